//! Reading the arrangements: the trace handles of one worker and the queries a live diagnosis
//! asks of them, each as of an epoch.
//!
//! A query reads the traces directly with their cursors (no dataflow is built): a point
//! query seeks its key, a thread's window seeks `(tid, from)` and scans forward. An answer as
//! of epoch `e` accumulates every update at an epoch `≤ e`; it is exact once the worker's
//! arrangements have passed `e` (their upper frontier is beyond it, which the job's probe
//! shows) and as long as the handle's compaction has not moved past `e`
//! ([`GraphTraces::compact_to`]). Otherwise the query says which ([`QueryError`]).
//!
//! Each worker holds a shard of every arrangement (see the parent module): the answer of a
//! query is the union of the workers' answers.
//!
//! Costs: a point query is a seek in each of the trace's batches (a logarithmic number of
//! them), `O(log n)` each. A thread's window costs its seeks plus one step per segment of the
//! thread in the window (and a few before it, to find the segment already running at its
//! start).

use super::{
    ArrangedGraph, Diff, EdgesByEnd, SegmentsById, SegmentsByThread, SliceMember, SlicesBySpin,
    Span, SpinsByThread, Time, Trace, Window,
};
use argus_schema::{CausalEdge, Nanos, Segment, SegmentId, Spin, Tid};
use differential_dataflow::operators::arrange::Arranged;
use differential_dataflow::trace::{Cursor, TraceReader};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use timely::progress::frontier::AntichainRef;
use timely::progress::Antichain;

/// Why a query could not be answered as of the epoch asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The arrangement is not complete through the epoch yet: step the worker until its probe
    /// passes it.
    #[error("epoch {as_of} is not complete yet (the arrangement holds the epochs before {upper})")]
    NotYet {
        /// The epoch asked.
        as_of: Time,
        /// The first epoch the arrangement does not hold yet.
        upper: Time,
    },
    /// The handle's compaction has moved past the epoch: its distinctions are gone.
    #[error("epoch {as_of} is compacted away (the arrangement answers from epoch {since} on)")]
    Compacted {
        /// The epoch asked.
        as_of: Time,
        /// The earliest epoch that can still be asked.
        since: Time,
    },
}

/// Rows of one arrangement: key, value and multiplicity (non-zero).
pub type Rows<K, V> = Vec<(K, V, Diff)>;

/// Everything one worker's shard holds as of an epoch, every arrangement read whole. For
/// tests and tools (a live diagnosis asks [`GraphTraces`] point queries instead). Serializable,
/// so that a shard read in one process can be united with the others' elsewhere.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSnapshot {
    /// `segments_by_id`.
    pub segments_by_id: Rows<SegmentId, Segment>,
    /// `segments_by_thread`.
    pub segments_by_thread: Rows<(Tid, Nanos), (SegmentId, Option<Nanos>)>,
    /// `edges_by_dst`.
    pub edges_by_dst: Rows<SegmentId, CausalEdge>,
    /// `edges_by_src`.
    pub edges_by_src: Rows<SegmentId, CausalEdge>,
    /// `spins_by_thread`.
    pub spins_by_thread: Rows<Tid, Spin>,
    /// `slices_by_spin`.
    pub slices_by_spin: Rows<SegmentId, SliceMember>,
    /// `derived_spins_by_thread`.
    pub derived_spins_by_thread: Rows<Tid, Spin>,
}

/// A stretch of one thread's segments ([`GraphTraces::thread_run`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRun {
    /// The segments in order, with their spans.
    pub segments: Vec<(SegmentId, Span)>,
    /// No segment of the thread starts before the first of `segments` (or it has none).
    pub at_start: bool,
    /// No segment of the thread starts after the last of `segments` (or it has none).
    pub at_end: bool,
}

/// The trace handles of one worker's arrangements: import them into other dataflows of the
/// worker (`traces.edges_by_dst.import(scope)`), or query them as of an epoch.
///
/// Each handle holds back the compaction of its trace: call [`GraphTraces::compact_to`] as
/// the epochs before one need no answers any more.
pub struct GraphTraces {
    /// Segments by id.
    pub segments_by_id: SegmentsById,
    /// Segments by `(tid, start_ns)`: their id and end (`None` while open).
    pub segments_by_thread: SegmentsByThread,
    /// Causal edges by destination.
    pub edges_by_dst: EdgesByEnd,
    /// Causal edges by source.
    pub edges_by_src: EdgesByEnd,
    /// Spinning vertices by thread.
    pub spins_by_thread: SpinsByThread,
    /// Backward slices by their spin's first segment.
    pub slices_by_spin: SlicesBySpin,
    /// Spinning vertices derived from the segments, by thread
    /// ([`derived_spins`](super::derived_spins)).
    pub derived_spins_by_thread: SpinsByThread,
}

impl GraphTraces {
    /// Handles on `graph`'s arrangements, on `slices` (the arranged
    /// [`backward_slices`](super::backward_slices)) and on `derived_spins` (the arranged
    /// [`derived_spins`](super::derived_spins)).
    pub fn new(
        graph: &ArrangedGraph<'_>,
        slices: &Arranged<'_, SlicesBySpin>,
        derived_spins: &Arranged<'_, SpinsByThread>,
    ) -> GraphTraces {
        GraphTraces {
            segments_by_id: graph.segments_by_id.trace.clone(),
            segments_by_thread: graph.segments_by_thread.trace.clone(),
            edges_by_dst: graph.edges_by_dst.trace.clone(),
            edges_by_src: graph.edges_by_src.trace.clone(),
            spins_by_thread: graph.spins_by_thread.trace.clone(),
            slices_by_spin: slices.trace.clone(),
            derived_spins_by_thread: derived_spins.trace.clone(),
        }
    }

    /// Lets every trace forget the distinctions between epochs before `epoch` (and merge its
    /// batches): queries as of earlier epochs fail from now on. Moving back is ignored.
    pub fn compact_to(&mut self, epoch: Time) {
        compact(&mut self.segments_by_id, epoch);
        compact(&mut self.segments_by_thread, epoch);
        compact(&mut self.edges_by_dst, epoch);
        compact(&mut self.edges_by_src, epoch);
        compact(&mut self.spins_by_thread, epoch);
        compact(&mut self.slices_by_spin, epoch);
        compact(&mut self.derived_spins_by_thread, epoch);
    }

    /// The segment `id`, if this shard has it.
    pub fn segment(&mut self, id: SegmentId, as_of: Time) -> Result<Option<Segment>, QueryError> {
        Ok(expand(lookup(&mut self.segments_by_id, &id, as_of)?)
            .into_iter()
            .next()
            .map(Arc::unwrap_or_clone))
    }

    /// The segments with ids in `[first, last]`, in id order: one seek, then one step per
    /// segment (a thread's segments are consecutive in id order, so this reads a stretch of
    /// one thread without a seek per segment).
    pub fn segments_between(
        &mut self,
        first: SegmentId,
        last: SegmentId,
        as_of: Time,
    ) -> Result<Vec<Segment>, QueryError> {
        let trace = &mut self.segments_by_id;
        readable(trace, as_of)?;
        let (mut cursor, storage) = trace.cursor();
        cursor.seek_key(&storage, &first);
        let mut out = Vec::new();
        while let Some(&id) = cursor.get_key(&storage) {
            if id > last {
                break;
            }
            out.extend(
                expand(vals(&mut cursor, &storage, as_of))
                    .into_iter()
                    .map(Arc::unwrap_or_clone),
            );
            cursor.step_key(&storage);
        }
        Ok(out)
    }

    /// The causal edges into segment `id`.
    pub fn incoming(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError> {
        Ok(expand(lookup(&mut self.edges_by_dst, &id, as_of)?))
    }

    /// The causal edges out of segment `id`.
    pub fn outgoing(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError> {
        Ok(expand(lookup(&mut self.edges_by_src, &id, as_of)?))
    }

    /// The segments of thread `tid` whose span overlaps `window`, in start order, with their
    /// spans.
    ///
    /// Relies on the segments of one thread not overlapping each other (each ends at or
    /// before the start of the next, as the rule machines cut them): of the segments that
    /// start before the window, only the last can reach into it.
    pub fn thread_segments(
        &mut self,
        tid: Tid,
        window: Window,
        as_of: Time,
    ) -> Result<Vec<(SegmentId, Span)>, QueryError> {
        let trace = &mut self.segments_by_thread;
        readable(trace, as_of)?;
        let (mut cursor, storage) = trace.cursor();
        let mut out = Vec::new();
        let push = |out: &mut Vec<(SegmentId, Span)>,
                    start_ns,
                    (id, end_ns): (SegmentId, Option<Nanos>)| {
            let span = Span { start_ns, end_ns };
            if span.overlaps(&window) {
                out.push((id, span));
            }
        };
        // The last segment starting before the window.
        if let Some((start, last)) = last_before(&mut cursor, &storage, tid, window.from_ns, as_of)
        {
            for (v, n) in last {
                for _ in 0..n.max(0) {
                    push(&mut out, start, v);
                }
            }
        }
        cursor.rewind_keys(&storage);
        cursor.seek_key(&storage, &(tid, window.from_ns));
        // The cursor is at the first key at or after `(tid, from)`.
        while let Some(&(t, start)) = cursor.get_key(&storage) {
            if t != tid || window.to_ns.is_some_and(|to| start > to) {
                break;
            }
            for (v, n) in vals(&mut cursor, &storage, as_of) {
                for _ in 0..n.max(0) {
                    push(&mut out, start, v);
                }
            }
            cursor.step_key(&storage);
        }
        Ok(out)
    }

    /// A stretch of thread `tid`'s segments in order, whole: the last one starting before
    /// `from`, every one starting in `[from, to]` (`to`: `None` for no end), and the first one
    /// starting after `to`. `at_start` / `at_end`: there is none before / after the stretch
    /// (the thread's first / last segment is in it). `(0, None)` is the whole thread.
    ///
    /// Costs as [`GraphTraces::thread_segments`]: its seeks, one step per segment of the
    /// stretch.
    pub fn thread_run(
        &mut self,
        tid: Tid,
        from: Nanos,
        to: Option<Nanos>,
        as_of: Time,
    ) -> Result<ThreadRun, QueryError> {
        let trace = &mut self.segments_by_thread;
        readable(trace, as_of)?;
        let (mut cursor, storage) = trace.cursor();
        let spans = |start: Nanos, vals: Vec<((SegmentId, Option<Nanos>), Diff)>| {
            vals.into_iter().flat_map(move |((id, end_ns), n)| {
                std::iter::repeat_n(
                    (
                        id,
                        Span {
                            start_ns: start,
                            end_ns,
                        },
                    ),
                    n.max(0) as usize,
                )
            })
        };
        let mut run = ThreadRun::default();
        // The last segment starting before `from`.
        match last_before(&mut cursor, &storage, tid, from, as_of) {
            Some((start, last)) => run.segments = spans(start, last).collect(),
            None => run.at_start = true,
        }
        cursor.rewind_keys(&storage);
        cursor.seek_key(&storage, &(tid, from));
        // The cursor is at the first key at or after `(tid, from)`.
        run.at_end = true;
        while let Some(&(t, start)) = cursor.get_key(&storage) {
            if t != tid {
                break;
            }
            let here = vals(&mut cursor, &storage, as_of);
            if !here.is_empty() {
                run.segments.extend(spans(start, here));
                if to.is_some_and(|to| start > to) {
                    run.at_end = false;
                    break;
                }
            }
            cursor.step_key(&storage);
        }
        Ok(run)
    }

    /// Every thread that has a segment in this shard, with its first segment, in thread
    /// order: one seek per thread (not a scan of the segments).
    pub fn first_segments(&mut self, as_of: Time) -> Result<Vec<(Tid, SegmentId)>, QueryError> {
        let trace = &mut self.segments_by_thread;
        readable(trace, as_of)?;
        let (mut cursor, storage) = trace.cursor();
        let mut out = Vec::new();
        while let Some(&(tid, _)) = cursor.get_key(&storage) {
            let here = vals(&mut cursor, &storage, as_of);
            match here.iter().find(|(_, n)| *n > 0) {
                Some(((id, _), _)) => {
                    out.push((tid, *id));
                    let Some(next) = tid.0.checked_add(1) else {
                        break;
                    };
                    cursor.seek_key(&storage, &(Tid(next), Nanos(0)));
                }
                None => cursor.step_key(&storage),
            }
        }
        Ok(out)
    }

    /// Every spinning vertex of this shard.
    pub fn spins(&mut self, as_of: Time) -> Result<Vec<Spin>, QueryError> {
        Ok(expand(
            rows(&mut self.spins_by_thread, as_of)?
                .into_iter()
                .map(|(_, v, n)| (v, n))
                .collect(),
        ))
    }

    /// Every spinning vertex derived from the segments in this shard (empty unless the job
    /// derives them, [`JobConfig::derived_spins`](super::JobConfig::derived_spins)).
    pub fn derived_spins(&mut self, as_of: Time) -> Result<Vec<Spin>, QueryError> {
        Ok(expand(
            rows(&mut self.derived_spins_by_thread, as_of)?
                .into_iter()
                .map(|(_, v, n)| (v, n))
                .collect(),
        ))
    }

    /// The derived spins of thread `tid`.
    pub fn derived_thread_spins(&mut self, tid: Tid, as_of: Time) -> Result<Vec<Spin>, QueryError> {
        Ok(expand(lookup(
            &mut self.derived_spins_by_thread,
            &tid,
            as_of,
        )?))
    }

    /// The backward slice of the spin whose first segment is `spin` (of every such spin, each
    /// member tagged with its window).
    pub fn slice(&mut self, spin: SegmentId, as_of: Time) -> Result<Vec<SliceMember>, QueryError> {
        Ok(expand(lookup(&mut self.slices_by_spin, &spin, as_of)?))
    }

    /// Every arrangement of this shard, read whole.
    pub fn snapshot(&mut self, as_of: Time) -> Result<ShardSnapshot, QueryError> {
        Ok(ShardSnapshot {
            segments_by_id: rows(&mut self.segments_by_id, as_of)?
                .into_iter()
                .map(|(id, s, n)| (id, Arc::unwrap_or_clone(s), n))
                .collect(),
            segments_by_thread: rows(&mut self.segments_by_thread, as_of)?,
            edges_by_dst: rows(&mut self.edges_by_dst, as_of)?,
            edges_by_src: rows(&mut self.edges_by_src, as_of)?,
            spins_by_thread: rows(&mut self.spins_by_thread, as_of)?,
            slices_by_spin: rows(&mut self.slices_by_spin, as_of)?,
            derived_spins_by_thread: rows(&mut self.derived_spins_by_thread, as_of)?,
        })
    }
}

fn compact<K, V>(trace: &mut Trace<K, V>, epoch: Time)
where
    K: Ord + Clone + 'static,
    V: Ord + Clone + 'static,
{
    if trace.get_logical_compaction().less_equal(&epoch) {
        trace.set_logical_compaction(AntichainRef::new(&[epoch]));
    }
    if trace.get_physical_compaction().less_equal(&epoch) {
        trace.set_physical_compaction(AntichainRef::new(&[epoch]));
    }
}

/// Whether `trace` can answer as of `as_of`.
fn readable<K, V>(trace: &mut Trace<K, V>, as_of: Time) -> Result<(), QueryError>
where
    K: Ord + Clone + 'static,
    V: Ord + Clone + 'static,
{
    let mut upper = Antichain::new();
    trace.read_upper(&mut upper);
    if let Some(&upper) = upper.elements().first().filter(|u| **u <= as_of) {
        return Err(QueryError::NotYet { as_of, upper });
    }
    let since = trace.get_logical_compaction();
    if !since.less_equal(&as_of) {
        let since = since.iter().next().copied().unwrap_or(Time::MAX);
        return Err(QueryError::Compacted { as_of, since });
    }
    Ok(())
}

/// The values of the cursor's key as of `as_of`, with their multiplicities (non-zero).
fn vals<C, V>(cursor: &mut C, storage: &C::Storage, as_of: Time) -> Vec<(V, Diff)>
where
    C: Cursor<Time = Time, Diff = Diff>,
    for<'a> C: Cursor<Val<'a> = &'a V>,
    V: Clone,
{
    let mut out = Vec::new();
    cursor.rewind_vals(storage);
    while let Some(val) = cursor.get_val(storage) {
        let mut n = 0;
        cursor.map_times(storage, |t, d| {
            if C::owned_time(t) <= as_of {
                n += C::owned_diff(d);
            }
        });
        if n != 0 {
            out.push((val.clone(), n));
        }
        cursor.step_val(storage);
    }
    out
}

/// The last key `(tid, start)` with `start < from` that has values as of `as_of`, with
/// them: a binary search on `start` (a cursor only seeks forward, so each step rewinds and
/// seeks: `O(log² n)`), not a scan. A look-back that widened 1 ms, 4 ms, 16 ms, ... and then
/// scanned forward read every segment of the thread in the last stretch it tried: cheap in
/// one arrangement, where a busy thread has a segment just before `from`, but when the
/// graph is in layers by end time (`argus start`'s live graph) an older layer's last segment
/// of the thread can lie far back, and the scan read a whole layer's worth of an interrupt
/// pseudo-thread's segments (`cargo bench --bench live_query`: up to 200 ms per window,
/// 0.1–1.9 s per diagnosis).
fn last_before<C, V>(
    cursor: &mut C,
    storage: &C::Storage,
    tid: Tid,
    mut from: Nanos,
    as_of: Time,
) -> Option<(Nanos, Vec<(V, Diff)>)>
where
    C: Cursor<Time = Time, Diff = Diff>,
    for<'a> C: Cursor<Key<'a> = &'a (Tid, Nanos), Val<'a> = &'a V>,
    V: Clone,
{
    // The first key at or after `(tid, p)`, if it is the thread's and starts before `from`.
    let first_from = |cursor: &mut C, p: u64, from: Nanos| {
        cursor.rewind_keys(storage);
        cursor.seek_key(storage, &(tid, Nanos(p)));
        cursor
            .get_key(storage)
            .filter(|&&(t, start)| t == tid && start < from)
            .map(|&(_, start)| start)
    };
    loop {
        // A busy thread has one in the last millisecond: the search starts there.
        let near = from.0.saturating_sub(1_000_000);
        let mut lo = match first_from(cursor, near, from) {
            Some(_) => near,
            None => {
                first_from(cursor, 0, from)?;
                0
            }
        };
        // Invariant: a key starts in [lo, from); none starts in [hi, from).
        let mut hi = from.0;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match first_from(cursor, mid, from) {
                Some(_) => lo = mid,
                None => hi = mid,
            }
        }
        let start = first_from(cursor, lo, from)?;
        let here = vals(cursor, storage, as_of);
        if !here.is_empty() {
            return Some((start, here));
        }
        // Every value of that key is retracted as of `as_of`: the one before it.
        from = start;
    }
}

/// The values of `key` as of `as_of`.
fn lookup<K, V>(trace: &mut Trace<K, V>, key: &K, as_of: Time) -> Result<Vec<(V, Diff)>, QueryError>
where
    K: Ord + Clone + 'static,
    V: Ord + Clone + 'static,
{
    readable(trace, as_of)?;
    let (mut cursor, storage) = trace.cursor();
    cursor.seek_key(&storage, key);
    if cursor.get_key(&storage) != Some(key) {
        return Ok(Vec::new());
    }
    Ok(vals(&mut cursor, &storage, as_of))
}

/// Every row of `trace` as of `as_of`.
fn rows<K, V>(trace: &mut Trace<K, V>, as_of: Time) -> Result<Rows<K, V>, QueryError>
where
    K: Ord + Clone + 'static,
    V: Ord + Clone + 'static,
{
    readable(trace, as_of)?;
    let (mut cursor, storage) = trace.cursor();
    let mut out = Vec::new();
    while let Some(key) = cursor.get_key(&storage) {
        for (v, n) in vals(&mut cursor, &storage, as_of) {
            out.push((key.clone(), v, n));
        }
        cursor.step_key(&storage);
    }
    Ok(out)
}

/// Each value as many times as its multiplicity (none when it is negative, which the
/// update stream never makes: a retraction follows its insertion).
fn expand<V: Clone>(vals: Vec<(V, Diff)>) -> Vec<V> {
    vals.into_iter()
        .flat_map(|(v, n)| std::iter::repeat_n(v, n.max(0) as usize))
        .collect()
}
