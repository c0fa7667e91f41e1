//! The backward slices computed from scratch on a snapshot of the graph, with hash maps and
//! one breadth-first search per strength: slow and obvious on purpose, the oracle that
//! [`backward_slices`](super::backward_slices) is tested against at every epoch.
//!
//! Where the dataflow finds each member's tag as a fixed point (the strongest of the weakest
//! edges over all paths), this finds it by thresholds: a member is Strong when a search over
//! strong edges only reaches it, else Boosted when one over strong and boosted edges does,
//! else Weak. The two agree exactly when both are right.

use super::slice::{roots, SliceConfig, SliceMember, Window};
use super::Span;
use crate::Graph;
use argus_schema::{SegmentId, Strength};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Every spin's backward slice in `graph`, as `(spin's first segment, member)`, sorted.
pub fn slices(graph: &Graph, cfg: &SliceConfig) -> Vec<(SegmentId, SliceMember)> {
    let spans: HashMap<SegmentId, Span> =
        graph.segments.iter().map(|s| (s.id, Span::of(s))).collect();
    let mut incoming: HashMap<SegmentId, Vec<(SegmentId, Strength)>> = HashMap::new();
    for e in &graph.edges {
        incoming.entry(e.dst).or_default().push((e.src, e.strength));
    }
    // Spins with one first segment and one window share a slice.
    let mut hangs: BTreeMap<(SegmentId, Window), BTreeSet<SegmentId>> = BTreeMap::new();
    for spin in &graph.spins {
        hangs
            .entry((spin.segment, Window::of(spin, cfg)))
            .or_default()
            .extend(roots(spin));
    }
    let mut out = Vec::new();
    for ((spin, window), roots) in hangs {
        let inside = |id: &SegmentId| spans.get(id).is_some_and(|s| s.overlaps(&window));
        let mut tag: HashMap<SegmentId, Strength> = HashMap::new();
        // Strongest first: a member keeps the first (strongest) level that reaches it.
        for level in Strength::ALL.into_iter().rev() {
            let mut seen: HashSet<SegmentId> = roots.iter().copied().filter(inside).collect();
            let mut todo: Vec<SegmentId> = seen.iter().copied().collect();
            while let Some(dst) = todo.pop() {
                for (src, strength) in incoming.get(&dst).into_iter().flatten() {
                    if *strength >= level && inside(src) && seen.insert(*src) {
                        todo.push(*src);
                    }
                }
            }
            for id in seen {
                tag.entry(id).or_insert(level);
            }
        }
        out.extend(tag.into_iter().map(|(segment, strength)| {
            (
                spin,
                SliceMember {
                    window,
                    segment,
                    strength,
                },
            )
        }));
    }
    out.sort();
    out
}
