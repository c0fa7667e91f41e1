//! The event graph as differential collections: shared arrangements that queries read while
//! the graph changes, and the state derived from them (issue 16, parts 1–2, and the spins
//! derived from the segments).
//!
//! The timely job of [`crate::dataflow`] emits the graph as `(Update, epoch, ±1)` changes
//! ([`Message::Updates`](crate::dataflow::Message)). This module takes that stream, inside a
//! timely worker, as a differential collection and keeps it *arranged*: indexed by the keys the
//! diagnosis walks, maintained in work proportional to each epoch's changes, and shareable
//! ([`TraceAgent`]) with any other dataflow or query of the same worker (the "Shared
//! Arrangements" paper, VLDB 2020; differential's `examples/arrange.rs`).
//!
//! ```text
//!  (Update, epoch, ±1) ─► partition by table (no copy)
//!     ├─ segments ─► segments_by_id      SegmentId       → Arc<Segment>
//!     │                └─► segments_by_thread  (Tid, start_ns) → (SegmentId, end)
//!     ├─ edges ────► edges_by_dst        dst SegmentId   → CausalEdge
//!     │            ► edges_by_src        src SegmentId   → CausalEdge
//!     └─ spins ────► spins_by_thread     Tid             → Spin
//!
//!  derived (slice.rs), maintained by differential as the above change:
//!     edges_by_src ⋈ segments_by_id ─► steps_by_dst   dst → (src, strength, src's span)
//!     spins ─► roots (first, last, next after last; hang window) ⋈ segments_by_id
//!     iterate { reach ⋈ steps_by_dst, source inside the window, weakest strength so far;
//!               ∪ roots; best strength per (segment, hang) }
//!         ─► slices_by_spin  spin's first SegmentId → (window, member, strength)
//!
//!  derived (spins.rs), from the segments and the watermark (EpochDone's) alone:
//!     segments_by_id ─► pending (closed, awaiting its syscall's return, before the open one)
//!                    ─► final segments, each found from its predecessor (tid, k − 1)
//!     iterate { the rule machine's spin trackers (rules/spins.rs) carried from a final
//!               segment to the next: step(trackers after k − 1, segment k) }
//!         ─► closed single spins ∪ closed runs ∪ open runs of the last final segment
//!            ∪ (open logical waits, open segments) ⋈ watermark past their threshold
//!         ─► derived_spins_by_thread  Tid → Spin      (= spins_by_thread, see spins.rs)
//! ```
//!
//! [`arrange_graph`] builds the five base arrangements, [`backward_slices`] the derived
//! backward slices (see [`slice`](mod@slice) for their definition and the window),
//! [`derived_spins`] the spins from the segments (see [`spins`](mod@spins) for what it
//! matches), [`GraphTraces`] holds the trace handles and answers point and range queries as of
//! an epoch ([`GraphRead`]: the reads a live diagnosis asks, which a [`Union`] of several
//! arranged graphs, each holding part of the records, answers as one), and [`ArrangedJob`]
//! is the whole thing fed from
//! [`Message`](crate::dataflow::Message)s in one worker ([`JobConfig`] says which derived
//! state it builds). [`reference`](mod@reference) recomputes the slices from scratch (the test
//! oracle); the derived spins' oracle is the dataflow's spins table itself.
//!
//! Times are epochs (`u64`, the dataflow's timestamp), diffs `i64` as in the messages.
//!
//! Caller responsibilities: feed each epoch's updates at that epoch (and, for the derived
//! spins, its watermark: [`ArrangedJob::watermark`], which [`ArrangedJob::apply`] does from
//! `EpochDone`), close epochs in order
//! (every worker closes every epoch; any worker may feed updates), step the worker until the
//! probe passes an epoch before querying it, and advance the query handles' compaction
//! ([`GraphTraces::compact_to`]) as epochs are answered — a handle that is never advanced keeps
//! every epoch's distinctions (memory grows with the retractions of open segments).
//!
//! Sharding: arrangements are partitioned over the workers by a hash of their key, so each
//! worker's traces hold a shard. A query on one worker answers for its shard; the answer is
//! the union over the workers (a point query's key lives on exactly one of them). With one
//! worker the local answer is the whole answer.
//!
//! Non-goals here: serving queries over a socket and feeding the diagnosis (the `argus`
//! binary does both: `engine/src/job/live_graph.rs` runs an [`ArrangedJob`] per dataflow
//! generation, `engine/src/live/fetch.rs` answers a partial diagnosis's needs with
//! [`GraphTraces::thread_run`], [`GraphTraces::segments_between`] and the point queries), and
//! replacing the keyed rule machines' spins by the derived ones: the graph dataflow still
//! emits the spins table, the derived spins are built only when [`JobConfig::derived_spins`]
//! asks (the live graph does not yet), and they equal the table except where the segments do
//! not say what the machines know (refused file lock attempts, a wait's return by another
//! syscall; see [`spins`](mod@spins)).
//!
//! ```
//! use argus_pipeline::arranged::{ArrangedJob, SliceConfig};
//! use argus_pipeline::dataflow::Update;
//! use argus_schema::{Nanos, Pid, Segment, SegmentId, SegmentKind, StartCause, Tid};
//!
//! timely::execute_directly(|worker| {
//!     let mut job = ArrangedJob::new(worker, &SliceConfig::default());
//!     let id = SegmentId::new(Tid(7), 0);
//!     let seg = Segment::starting(id, Pid(7), SegmentKind::Task, Nanos(5), StartCause::FirstSeen);
//!     job.send(0, [(Update::Segment(seg.clone()), 1)]);
//!     job.close(0);
//!     worker.step_while(|| job.pending(0));
//!     assert_eq!(job.traces().segment(id, 0), Ok(Some(seg)));
//! });
//! ```

mod job;
mod query;
pub mod reference;
pub mod slice;
pub mod spins;
mod union;

pub use job::{ArrangedJob, JobConfig};
pub use query::{GraphTraces, QueryError, ShardSnapshot, ThreadRun};
pub use slice::{backward_slices, roots, SliceConfig, SliceMember, Window};
pub use spins::derived_spins;
pub use union::{GraphRead, Union};

use crate::dataflow::Update;
use argus_schema::{CausalEdge, EndCause, Nanos, Segment, SegmentId, Spin, Tid};
use differential_dataflow::operators::arrange::{Arranged, TraceAgent};
use differential_dataflow::trace::implementations::ValSpine;
use differential_dataflow::{AsCollection, VecCollection};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use timely::dataflow::operators::vec::Partition;

/// The dataflow time of the arranged graph: the epoch.
pub type Time = u64;

/// The multiplicity change of an update, as in [`Message::Updates`](crate::dataflow::Message).
pub type Diff = i64;

/// A trace of `K → V` updates at epochs: what every arrangement here is.
pub type Trace<K, V> = TraceAgent<ValSpine<K, V, Time, Diff>>;

/// Segments by id, each shared behind an [`Arc`]: the batcher's sorts and the spine's merges
/// move a pointer instead of copying a segment (and its `syscall_seq` allocation) every time
/// (`cargo bench --bench live_query`: the per-epoch update median went from 61–66 ms to
/// 45–55 ms).
pub type SegmentsById = Trace<SegmentId, Arc<Segment>>;
/// Segments by thread and start time: the id and the end of each (`None` while open).
pub type SegmentsByThread = Trace<(Tid, Nanos), (SegmentId, Option<Nanos>)>;
/// Causal edges by one end (destination or source).
pub type EdgesByEnd = Trace<SegmentId, CausalEdge>;
/// Spinning vertices by thread.
pub type SpinsByThread = Trace<Tid, Spin>;
/// Backward slices by the first segment of their spin.
pub type SlicesBySpin = Trace<SegmentId, SliceMember>;

/// When a segment ran: from its start to its end, or on while it is open.
///
/// An open segment's `end_ns` is only the last record seen for its thread; the thread is still
/// in it (running, or blocked in a wait that has not ended), so for overlap it lasts until now
/// (the diagnosis likewise extends open segments to the end of the trace).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Span {
    /// When the segment started.
    pub start_ns: Nanos,
    /// When it ended; `None` while it is open.
    pub end_ns: Option<Nanos>,
}

impl Span {
    /// The span of `s`.
    pub fn of(s: &Segment) -> Span {
        Span {
            start_ns: s.start_ns,
            end_ns: (s.end != EndCause::Open).then_some(s.end_ns),
        }
    }

    /// Whether the span and `w` share at least an instant (both are closed intervals).
    pub fn overlaps(&self, w: &Window) -> bool {
        w.to_ns.is_none_or(|to| self.start_ns <= to)
            && self.end_ns.is_none_or(|end| end >= w.from_ns)
    }
}

/// The graph's base collections, arranged, inside one dataflow scope (see the module docs).
pub struct ArrangedGraph<'scope> {
    /// Segments by id.
    pub segments_by_id: Arranged<'scope, SegmentsById>,
    /// Segments by `(tid, start_ns)`: a thread's segments in time order.
    pub segments_by_thread: Arranged<'scope, SegmentsByThread>,
    /// Causal edges by destination: a segment's incoming edges.
    pub edges_by_dst: Arranged<'scope, EdgesByEnd>,
    /// Causal edges by source: a segment's outgoing edges.
    pub edges_by_src: Arranged<'scope, EdgesByEnd>,
    /// Spinning vertices by thread.
    pub spins_by_thread: Arranged<'scope, SpinsByThread>,
}

/// Arranges the graph's updates (each at its epoch) by the keys the diagnosis walks.
///
/// The updates may enter on any worker; each arrangement exchanges them by its key. The work
/// per epoch is proportional to the epoch's updates (a sort and a merge of its batch into the
/// trace, amortized), not to the history.
pub fn arrange_graph<'scope>(
    updates: VecCollection<'scope, Time, Update, Diff>,
) -> ArrangedGraph<'scope> {
    // One pass that moves each update to its table's stream (three `flat_map`s over one
    // collection would copy every update to each of them).
    let mut tables = updates
        .inner
        .partition(3, |(u, t, r)| {
            let table = match u {
                Update::Segment(_) => 0,
                Update::Edge(_) => 1,
                Update::Spin(_) => 2,
            };
            (table, (u, t, r))
        })
        .into_iter();
    let (Some(segments), Some(edges), Some(spins)) = (tables.next(), tables.next(), tables.next())
    else {
        unreachable!("invariant: partition(3) makes three streams")
    };
    let segments = segments.as_collection().flat_map(|u| match u {
        Update::Segment(s) => Some((s.id, Arc::new(s))),
        _ => None,
    });
    let edges = edges.as_collection().flat_map(|u| match u {
        Update::Edge(e) => Some(e),
        _ => None,
    });
    let spins = spins.as_collection().flat_map(|u| match u {
        Update::Spin(s) => Some((s.tid, s)),
        _ => None,
    });

    let segments_by_id = segments.arrange_by_key_named("arranged::segments_by_id");
    // From the arrangement's batches, by reference: the segments are not copied again.
    let segments_by_thread = segments_by_id
        .clone()
        .as_collection(|id: &SegmentId, s: &Arc<Segment>| {
            ((s.tid, s.start_ns), (*id, Span::of(s).end_ns))
        })
        .arrange_by_key_named("arranged::segments_by_thread");
    let edges_by_dst = edges
        .clone()
        .map(|e| (e.dst, e))
        .arrange_by_key_named("arranged::edges_by_dst");
    let edges_by_src = edges
        .map(|e| (e.src, e))
        .arrange_by_key_named("arranged::edges_by_src");
    let spins_by_thread = spins.arrange_by_key_named("arranged::spins_by_thread");
    ArrangedGraph {
        segments_by_id,
        segments_by_thread,
        edges_by_dst,
        edges_by_src,
        spins_by_thread,
    }
}
