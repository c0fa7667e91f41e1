//! Backward slices of the hangs, maintained by differential dataflow.
//!
//! The backward slice of a spinning vertex is every segment from which the spin's vertex can
//! be reached through incoming causal edges, without leaving the hang's window:
//!
//! ```text
//!   roots:   the spin's first segment (`segment`), its last (`last`, for a run) and, once a
//!            LongWait or RepeatedYield spin has closed, the segment after `last` (below)
//!   window:  W = [spin.start_ns − lookback, spin.end_ns]   (open spin: [.., now], see below)
//!   member:  a root whose span overlaps W, or the source of an edge into a member whose span
//!            overlaps W (so every segment on the path lies in W)
//!   tag:     the strongest s such that a path from the member to a root uses only edges of
//!            strength ≥ s (Weak < Boosted < Strong): Strong = reachable by strong edges
//!            only, Boosted = needs a boosted edge, Weak = needs a weak edge (roots: Strong)
//! ```
//!
//! **The roots.** A wake-up edge goes to the segment that starts when the wait returns
//! (ARCHITECTURE.md §5), so the wake-up that ended a hang's wait is an incoming edge of the
//! segment *after* `last`, not of `last`. The walk explains a LongWait by exactly that edge
//! (`argus_diagnose` `walk/long_wait.rs`: the wake-ups into `next_in_thread(last)`), and a
//! RepeatedYield loop by what woke that segment too (`walk/yield_loop.rs`); a LongRunning hang
//! by the edges into its first segment. So a closed LongWait or RepeatedYield spin also roots
//! its slice at `last`'s successor in its thread: ordinal `last.seq() + 1`, the ordinals of a
//! thread being consecutive ([`roots`]). Like every member, a root counts only if it exists
//! and overlaps the window (the successor starts where `last` ends, the spin's end).
//!
//! A segment's span is `[start_ns, end_ns]`, and an open segment lasts until now
//! ([`Span`]). An open spin's window has no end ([`Window::to_ns`] is `None`):
//! the hang still lasts, so everything from its start on is inside. (An open spin's `end_ns`
//! is its segment's last record, which may lag the watermark; the window does not stop
//! there.) That keeps an open hang's key the same from epoch to epoch, so its slice grows with
//! the graph instead of being retracted and recomputed whenever the spin is re-reported; it is
//! recomputed once, when the spin closes and its window gets its end.
//!
//! **The window's look-back.** The diagnosis scores paths against the hang itself,
//! `[spin.start_ns, end]` (`argus_diagnose::beam::coverage`, the walk's `window`), but its walk
//! starts by stepping over the edge that began the hang's first segment, whose source acted
//! just before `spin.start_ns`, and then explains the waker's wait, which began earlier still
//! (ARCHITECTURE.md §7: "every step explains a window"). A slice cut at `spin.start_ns` would
//! lose that first step. [`SliceConfig::lookback_ns`] extends the window back by one spin
//! threshold (2 s by default, [`SliceConfig::from_rules`]): a hang is declared only after the
//! threshold passed without progress, so its cause is looked for as far back as the hang
//! itself had to last to be one.
//!
//! **The computation** ([`backward_slices`]):
//!
//! ```text
//!  steps_by_dst = edges_by_src ⋈ segments_by_id        (dst, (src, strength, span of src))
//!  roots        = spins' roots ⋈ segments_by_id, in window  (root, (hang, Strong))
//!  reach        = roots.iterate(|reach|
//!                   reach ⋈ steps_by_dst  where span of src overlaps the hang's window
//!                         ↦ (src, (hang, min(strength so far, edge strength)))
//!                   ∪ roots
//!                   reduce per segment: the strongest tag per hang)
//! ```
//!
//! `hang` is the spin's first segment and its window; two spins with the same first segment
//! and window share one slice (their roots united). The iteration is a widest-path fixed
//! point: tags only rise, to at most Strong, so it terminates, and differential maintains it
//! as edges, segments and spins come and go (an open segment that closes changes its span,
//! a spin that closes its window, a run that grows its `last` root).
//!
//! The source segment's span is joined onto each edge once, outside the loop (`steps_by_dst`,
//! an arrangement derived from the edges and segments), so a round of the loop is one join
//! and one reduce instead of two joins.
//!
//! **Costs.** While a hang is open its slice only grows, by the epoch's new members. When it
//! closes its key changes and the slice is computed again: work proportional to the slice,
//! in as many rounds as its longest path back (thread-order chains make that hundreds of
//! steps in a busy window).
//!
//! **Where the loop runs: on worker 0.** A round of the loop is a timely time `(epoch,
//! round)`, and it ends for a worker only once no worker can still produce anything at it.
//! Keyed by segment as usual, a round's reached sources hash to other workers than their
//! destinations, so with several workers every round is a data exchange and a progress
//! exchange between them, and the rounds advance at the pace of the slowest worker's
//! scheduling: with 2 workers on 2 cores, the per-epoch p90 of the job (the epochs where a
//! hang closes) was 4.9–8.3× the one-worker p90 (`benches/arranged.rs`). So the loop's
//! arrangements (`steps_by_dst`, the reached tags before and after `slice_strongest`) are made
//! with an exchange that sends every update to worker 0 (`on_one_worker`): the other workers
//! hold nothing inside the loop, worker 0's rounds wait for no one, and they run at one
//! worker's pace. The slices leave the loop as a collection that the job arranges by key as
//! usual, so `slices_by_spin` is sharded like every other trace. Measured in one session
//! (`cargo bench -p argus-pipeline --bench arranged`, default stream, 2 cores, two runs
//! each): the job's 2-worker p90 went from 4.9× and 8.3× its 1-worker p90 to 1.5× and 2.0×,
//! and its 2-worker total from 4.7× and 5.9× the graph dataflow's to 1.8× and 1.9×.
//!
//! The price: the slices do not scale out. Worker 0 holds a `Step` for every edge of the
//! graph and every tag, and does all of the slices' work (in a cluster the other processes
//! send it their edges and spans over the network); the other workers only keep the base
//! arrangements. Two other ways were weighed. Partitioning the loop by hang, with the steps
//! copied to every worker, keeps a hang's rounds local but not the rounds' progress: every
//! worker that holds a hang holds each round open until it is done with it, so the rounds
//! still advance in lockstep, and the steps' memory is multiplied by the workers. Fewer
//! rounds (joining two steps per round) would halve the rounds at the cost of an arrangement
//! of two-step paths, larger than the steps, and more work per round with one worker too.

use super::{ArrangedGraph, Diff, Span, Time};
use crate::rules::RulesConfig;
use argus_schema::{CausalEdge, Nanos, Segment, SegmentId, Spin, SpinClass, Strength};
use differential_dataflow::lattice::Lattice;
use differential_dataflow::operators::arrange::arrangement::arrange_core;
use differential_dataflow::operators::arrange::{Arranged, TraceAgent};
use differential_dataflow::operators::Iterate;
use differential_dataflow::trace::implementations::{
    ContainerChunker, ValBatcher, ValBuilder, ValSpine,
};
use differential_dataflow::{ExchangeData, VecCollection};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use timely::dataflow::channels::pact::Exchange;
use timely::progress::Timestamp;

/// How far back a slice looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceConfig {
    /// The window of a hang starts this long before the spin does (ns). Default 2 s, the
    /// default spin threshold (see the module docs).
    pub lookback_ns: u64,
}

impl Default for SliceConfig {
    fn default() -> SliceConfig {
        SliceConfig::from_rules(&RulesConfig::default())
    }
}

impl SliceConfig {
    /// Looks back one spin threshold of `rules`.
    pub fn from_rules(rules: &RulesConfig) -> SliceConfig {
        SliceConfig {
            lookback_ns: rules.spin_threshold_ns,
        }
    }
}

/// The time window of a hang: the segments a slice may contain overlap it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Window {
    /// Start: the spin's start minus the look-back (0 at the earliest).
    pub from_ns: Nanos,
    /// End: the spin's end; `None` while the spin is open (it still lasts).
    pub to_ns: Option<Nanos>,
}

impl Window {
    /// The window of `spin`'s slice.
    pub fn of(spin: &Spin, cfg: &SliceConfig) -> Window {
        Window {
            from_ns: Nanos(spin.start_ns.0.saturating_sub(cfg.lookback_ns)),
            to_ns: (!spin.open).then_some(spin.end_ns),
        }
    }
}

/// A segment of a backward slice.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SliceMember {
    /// The hang's window (with the spin's first segment, which keys the slice, it names the
    /// hang).
    pub window: Window,
    /// The member.
    pub segment: SegmentId,
    /// The strongest `s` such that the member reaches the spin through edges of strength
    /// `s` or stronger only: Strong when strong edges suffice, Weak when every path needs a
    /// weak edge.
    pub strength: Strength,
}

/// The roots of `spin`'s slice, before the window and existence filter: its first and last
/// segments and, for a closed LongWait or RepeatedYield spin, the next segment of its thread
/// (where the wake-up that ended it landed; see the module docs).
pub fn roots(spin: &Spin) -> impl Iterator<Item = SegmentId> {
    let last = (spin.last != spin.segment).then_some(spin.last);
    let ended_by_a_wake =
        !spin.open && matches!(spin.class, SpinClass::LongWait | SpinClass::RepeatedYield);
    let next = ended_by_a_wake
        .then(|| spin.last.seq().checked_add(1))
        .flatten()
        .map(|seq| SegmentId::new(spin.last.tid(), seq));
    std::iter::once(spin.segment).chain(last).chain(next)
}

/// A hang: its spin's first segment and its window.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
struct Hang {
    spin: SegmentId,
    window: Window,
}

/// One step back over an edge, from its destination: the source, how strong the edge is and
/// when the source ran.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
struct Step {
    src: SegmentId,
    strength: Strength,
    span: Span,
}

/// The backward slice of every spin of `graph`, as `(spin's first segment, member)`.
pub fn backward_slices<'scope>(
    graph: &ArrangedGraph<'scope>,
    cfg: &SliceConfig,
) -> VecCollection<'scope, Time, (SegmentId, SliceMember), Diff> {
    let steps = graph.edges_by_src.clone().join_core(
        graph.segments_by_id.clone(),
        |_src: &SegmentId, e: &CausalEdge, s: &Arc<Segment>| {
            Some((
                e.dst,
                Step {
                    src: e.src,
                    strength: e.strength,
                    span: Span::of(s),
                },
            ))
        },
    );
    let steps = on_one_worker(steps, "arranged::steps_by_dst");
    let cfg = cfg.clone();
    let roots = graph
        .spins_by_thread
        .clone()
        .flat_map_ref(move |_tid, spin: &Spin| {
            let hang = Hang {
                spin: spin.segment,
                window: Window::of(spin, &cfg),
            };
            roots(spin).map(move |root| (root, hang))
        })
        .join_core(
            graph.segments_by_id.clone(),
            |root: &SegmentId, hang: &Hang, s: &Arc<Segment>| {
                Span::of(s)
                    .overlaps(&hang.window)
                    .then_some((*root, (*hang, Strength::Strong)))
            },
        );
    let reach = roots.clone().iterate(|scope, reach| {
        let steps = steps.enter(scope);
        let roots = roots.enter(scope);
        let tags = on_one_worker(reach, "arranged::slice_reach")
            .join_core(
                steps,
                |_dst: &SegmentId, (hang, strength): &(Hang, Strength), step: &Step| {
                    step.span
                        .overlaps(&hang.window)
                        .then_some((step.src, (*hang, (*strength).min(step.strength))))
                },
            )
            .concat(roots);
        // As `reduce_named`, on the arrangement made on worker 0.
        on_one_worker(tags, "arranged::slice_tags")
            .reduce_abelian::<_, ValBuilder<_, _, _, _>, ValSpine<_, _, _, _>, _, _>(
                "arranged::slice_strongest",
                strongest,
                |vec, key, upds| {
                    vec.clear();
                    vec.extend(upds.drain(..).map(|(v, t, r)| ((*key, v), t, r)));
                },
            )
            .as_collection(|k, v| (*k, *v))
    });
    reach.map(|(segment, (hang, strength))| {
        (
            hang.spin,
            SliceMember {
                window: hang.window,
                segment,
                strength,
            },
        )
    })
}

/// Arranges `c` by key, all of it on worker 0 (see "Where the loop runs" in the module docs).
fn on_one_worker<'scope, K, V, T>(
    c: VecCollection<'scope, T, (K, V), Diff>,
    name: &str,
) -> Arranged<'scope, TraceAgent<ValSpine<K, V, T, Diff>>>
where
    K: ExchangeData + Ord,
    V: ExchangeData + Ord,
    T: Timestamp + Lattice + Ord + ExchangeData,
{
    let pact = Exchange::new(|_: &((K, V), T, Diff)| 0u64);
    arrange_core::<
        _,
        _,
        ContainerChunker<Vec<((K, V), T, Diff)>>,
        ValBatcher<K, V, T, Diff>,
        ValBuilder<K, V, T, Diff>,
        _,
    >(c.inner, pact, name)
}

/// For one segment: the strongest tag it has for each hang. `vals` is sorted, so a hang's
/// tags are consecutive, weakest first.
fn strongest(
    _segment: &SegmentId,
    vals: &[(&(Hang, Strength), Diff)],
    out: &mut Vec<((Hang, Strength), Diff)>,
) {
    let mut best: Option<(Hang, Strength)> = None;
    for (v, n) in vals {
        let (hang, strength) = **v;
        if let Some(b) = best.filter(|b| b.0 != hang) {
            out.push((b, 1));
            best = None;
        }
        if *n > 0 {
            best = Some((hang, strength));
        }
    }
    out.extend(best.map(|b| (b, 1)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hang(n: u64) -> Hang {
        Hang {
            spin: SegmentId(n),
            window: Window::default(),
        }
    }

    #[test]
    fn strongest_keeps_the_strongest_tag_per_hang() {
        let a = [
            (hang(1), Strength::Weak),
            (hang(1), Strength::Strong),
            (hang(2), Strength::Weak),
            (hang(2), Strength::Boosted),
            (hang(3), Strength::Boosted),
            (hang(3), Strength::Strong),
        ];
        let vals: Vec<_> = a.iter().zip([1, 1, 2, 1, 1, -1]).collect();
        let mut out = Vec::new();
        strongest(&SegmentId(0), &vals, &mut out);
        assert_eq!(
            out,
            vec![
                ((hang(1), Strength::Strong), 1),
                ((hang(2), Strength::Boosted), 1),
                ((hang(3), Strength::Boosted), 1),
            ]
        );
    }

    #[test]
    fn an_open_spin_has_an_endless_window_and_the_look_back_stops_at_zero() {
        let spin = Spin {
            segment: SegmentId(1),
            last: SegmentId(1),
            tid: argus_schema::Tid(1),
            pid: argus_schema::Pid(1),
            class: argus_schema::SpinClass::LongWait,
            start_ns: Nanos(5_000_000_000),
            end_ns: Nanos(8_000_000_000),
            open: true,
            on_cpu_ns: 0,
            wait_ns: 0,
            segments: 1,
            wait_syscall: -1,
            timeouts: 0,
        };
        let cfg = SliceConfig::default();
        let w = Window::of(&spin, &cfg);
        assert_eq!(w.from_ns, Nanos(3_000_000_000));
        assert_eq!(w.to_ns, None);
        let closed = Spin {
            open: false,
            start_ns: Nanos(1),
            ..spin
        };
        let w = Window::of(&closed, &cfg);
        assert_eq!((w.from_ns, w.to_ns), (Nanos(0), Some(Nanos(8_000_000_000))));
        let later = Span {
            start_ns: Nanos(8_000_000_001),
            end_ns: None,
        };
        assert!(!later.overlaps(&w));
        let open_before = Span {
            start_ns: Nanos(0),
            end_ns: None,
        };
        assert!(open_before.overlaps(&w));
    }
}
