//! Graph statistics in the manner of the paper's Table 2 ("Graph Comparison"): how many
//! vertices and edges, of which kind and strength, how many connections the rules removed
//! by splitting, pruning and culling, and how many the heuristics added. `argus build
//! --stats` prints them.
//!
//! - **filtered out** (the paper's "portion of connections filtered out"): segment splits
//!   (peer set, callouts, signals, user rules: each cuts what one vertex would have
//!   connected), pruned thread-order edges, culled maintenance connections. The portion is
//!   over the edges plus these.
//! - **added by heuristics** ("portion of connections added by heuristics"): boosted edges
//!   and edges of the kinds the edge-kind table marks `heuristic` (user rules, data flags). The portion is over the edges.
//!
//! ```
//! use argus_pipeline::{stats::GraphStats, Graph};
//! let s = GraphStats::of(&Graph::default());
//! assert_eq!(s.vertices, 0);
//! assert!(s.to_string().contains("vertices"));
//! ```

use crate::rules::Counter;
use crate::Graph;
use argus_schema::{Strength, EDGE_KINDS};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Counts of one edge kind by strength.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EdgeRow {
    /// Edge kind ([`argus_schema::EdgeKind::name`]).
    pub kind: String,
    /// Weak edges.
    pub weak: u64,
    /// Boosted edges.
    pub boosted: u64,
    /// Strong edges.
    pub strong: u64,
}

/// The statistics of one graph.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GraphStats {
    /// Segments.
    pub vertices: u64,
    /// Segments by kind ([`argus_schema::SegmentKind::name`]).
    pub vertices_by_kind: BTreeMap<String, u64>,
    /// Edges.
    pub edges: u64,
    /// Edges by kind (every kind, in declaration order) and strength.
    pub edges_by_kind: Vec<EdgeRow>,
    /// Spinning vertices.
    pub spins: u64,
    /// Rule counters by name ([`Counter::name`]).
    pub counters: BTreeMap<String, u64>,
    /// Connections removed by splitting, pruning and culling.
    pub filtered_out: u64,
    /// Connections added by heuristics (boosted, user rules, data flags).
    pub added_by_heuristics: u64,
    /// `filtered_out / (edges + filtered_out)`.
    pub portion_filtered_out: f64,
    /// `added_by_heuristics / edges`.
    pub portion_added: f64,
}

impl GraphStats {
    /// The statistics of `g`.
    pub fn of(g: &Graph) -> GraphStats {
        let mut s = GraphStats {
            vertices: g.segments.len() as u64,
            edges: g.edges.len() as u64,
            spins: g.spins.len() as u64,
            ..GraphStats::default()
        };
        for seg in &g.segments {
            *s.vertices_by_kind
                .entry(seg.kind.name().to_string())
                .or_insert(0) += 1;
        }
        // One row per kind, indexed by its code (the rows of `EDGE_KINDS` are in code order).
        let mut rows: Vec<EdgeRow> = EDGE_KINDS
            .iter()
            .map(|k| EdgeRow {
                kind: k.name.to_string(),
                ..EdgeRow::default()
            })
            .collect();
        for e in &g.edges {
            if let Some(row) = rows.get_mut(usize::from(e.kind.code())) {
                match e.strength {
                    Strength::Weak => row.weak += 1,
                    Strength::Boosted => row.boosted += 1,
                    Strength::Strong => row.strong += 1,
                }
            }
            if e.strength == Strength::Boosted || e.kind.info().heuristic {
                s.added_by_heuristics += 1;
            }
        }
        s.edges_by_kind = rows;
        for c in Counter::ALL {
            let n = g.counts.get(c);
            s.counters.insert(c.name().to_string(), n);
            if c.filters() {
                s.filtered_out += n;
            }
        }
        let denom = (s.edges + s.filtered_out).max(1) as f64;
        s.portion_filtered_out = s.filtered_out as f64 / denom;
        s.portion_added = s.added_by_heuristics as f64 / s.edges.max(1) as f64;
        s
    }
}

impl fmt::Display for GraphStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "vertices {}", self.vertices)?;
        for (k, n) in &self.vertices_by_kind {
            writeln!(f, "  {k:<14} {n:>10}")?;
        }
        writeln!(f, "edges {}", self.edges)?;
        writeln!(
            f,
            "  {:<14} {:>10} {:>10} {:>10}",
            "kind", "weak", "boosted", "strong"
        )?;
        for r in &self.edges_by_kind {
            if r.weak + r.boosted + r.strong > 0 {
                writeln!(
                    f,
                    "  {:<14} {:>10} {:>10} {:>10}",
                    r.kind, r.weak, r.boosted, r.strong
                )?;
            }
        }
        writeln!(f, "spins {}", self.spins)?;
        writeln!(f, "rules")?;
        for (k, n) in &self.counters {
            writeln!(f, "  {k:<22} {n:>10}")?;
        }
        writeln!(
            f,
            "connections filtered out {} ({:.4} of all), added by heuristics {} ({:.4} of edges)",
            self.filtered_out,
            self.portion_filtered_out,
            self.added_by_heuristics,
            self.portion_added
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{
        CausalEdge, EdgeKind, Nanos, Pid, Segment, SegmentId, SegmentKind, StartCause, Tid,
    };

    #[test]
    fn counts_kinds_strengths_and_rules() {
        let mut g = Graph::default();
        g.segments.push(Segment {
            end_ns: Nanos(1),
            events: 1,
            ..Segment::starting(
                SegmentId::new(Tid(1), 0),
                Pid(1),
                SegmentKind::Task,
                Nanos(0),
                StartCause::FirstSeen,
            )
        });
        let edge = |kind, strength| CausalEdge {
            src: SegmentId::new(Tid(1), 0),
            dst: SegmentId::new(Tid(1), 1),
            kind,
            strength,
            ts: Nanos(0),
            src_syscall: -1,
        };
        g.edges.push(edge(EdgeKind::Wakeup, Strength::Weak));
        g.edges.push(edge(EdgeKind::ThreadOrder, Strength::Boosted));
        g.edges.push(edge(EdgeKind::Rule, Strength::Strong));
        g.edges.push(edge(EdgeKind::Message, Strength::Strong));
        g.counts.add(Counter::SplitPeer, 3);
        g.counts.add(Counter::Culled, 1);
        let s = GraphStats::of(&g);
        assert_eq!(s.vertices, 1);
        assert_eq!(s.vertices_by_kind["task"], 1);
        assert_eq!(s.edges, 4);
        let row = |k: &str| s.edges_by_kind.iter().find(|r| r.kind == k).cloned();
        assert_eq!(row("wakeup").map(|r| r.weak), Some(1));
        assert_eq!(row("thread_order").map(|r| r.boosted), Some(1));
        assert_eq!(s.added_by_heuristics, 2);
        assert_eq!(s.filtered_out, 4);
        assert_eq!(s.counters["split_peer_set"], 3);
        assert!((s.portion_filtered_out - 0.5).abs() < 1e-9);
        assert!((s.portion_added - 0.5).abs() < 1e-9);
        let text = s.to_string();
        assert!(
            text.contains("message") && text.contains("split_peer_set"),
            "{text}"
        );
    }
}
