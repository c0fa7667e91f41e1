//! Reading several arranged graphs as one ([`Union`]), and the reads a live diagnosis asks
//! ([`GraphRead`]), which one [`GraphTraces`] and a union both answer.
//!
//! A live graph may keep its records in *layers*: separate arranged graphs, each holding
//! the records that ended in one stretch of time (and one for the records still open), so
//! that forgetting a stretch is dropping its layer whole instead of retracting every record
//! (`argus start`'s live graph, `engine/src/job/layers.rs`). Every record is in exactly one
//! layer (all versions of a record in the same one), so a read of the union is the union of
//! the layers' reads, put in the order one graph would give:
//!
//! - point reads (`segment`, `incoming`, `outgoing`, `slice`) and `spins`: every layer's
//!   answer, concatenated, sorted as one arrangement would return them;
//! - `segments_between`: concatenated, in id order;
//! - `first_segments`: per thread, the least id of the layers' first segments (a thread's
//!   segments are numbered in time order);
//! - `thread_run`: the layers' runs merged by start; of those starting before `from` only the
//!   last start is kept, of those after `to` only the first, and `at_start` / `at_end` say
//!   whether there were none.

use super::{GraphTraces, QueryError, SliceMember, Span, ThreadRun, Time};
use argus_schema::{CausalEdge, Nanos, Segment, SegmentId, Spin, Tid};
use std::collections::BTreeMap;

/// The reads a live diagnosis asks of an arranged graph, each as of an epoch (see
/// [`GraphTraces`] for what each answers).
pub trait GraphRead {
    /// The segment `id`.
    fn segment(&mut self, id: SegmentId, as_of: Time) -> Result<Option<Segment>, QueryError>;
    /// The segments with ids in `[first, last]`, in id order.
    fn segments_between(
        &mut self,
        first: SegmentId,
        last: SegmentId,
        as_of: Time,
    ) -> Result<Vec<Segment>, QueryError>;
    /// The causal edges into `id`.
    fn incoming(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError>;
    /// The causal edges out of `id`.
    fn outgoing(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError>;
    /// A stretch of thread `tid`'s segments ([`GraphTraces::thread_run`]).
    fn thread_run(
        &mut self,
        tid: Tid,
        from: Nanos,
        to: Option<Nanos>,
        as_of: Time,
    ) -> Result<ThreadRun, QueryError>;
    /// Every thread with its first segment, in thread order.
    fn first_segments(&mut self, as_of: Time) -> Result<Vec<(Tid, SegmentId)>, QueryError>;
    /// The backward slice of the spin whose first segment is `spin`.
    fn slice(&mut self, spin: SegmentId, as_of: Time) -> Result<Vec<SliceMember>, QueryError>;
    /// Every spinning vertex.
    fn spins(&mut self, as_of: Time) -> Result<Vec<Spin>, QueryError>;
}

impl GraphRead for GraphTraces {
    fn segment(&mut self, id: SegmentId, as_of: Time) -> Result<Option<Segment>, QueryError> {
        GraphTraces::segment(self, id, as_of)
    }
    fn segments_between(
        &mut self,
        first: SegmentId,
        last: SegmentId,
        as_of: Time,
    ) -> Result<Vec<Segment>, QueryError> {
        GraphTraces::segments_between(self, first, last, as_of)
    }
    fn incoming(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError> {
        GraphTraces::incoming(self, id, as_of)
    }
    fn outgoing(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError> {
        GraphTraces::outgoing(self, id, as_of)
    }
    fn thread_run(
        &mut self,
        tid: Tid,
        from: Nanos,
        to: Option<Nanos>,
        as_of: Time,
    ) -> Result<ThreadRun, QueryError> {
        GraphTraces::thread_run(self, tid, from, to, as_of)
    }
    fn first_segments(&mut self, as_of: Time) -> Result<Vec<(Tid, SegmentId)>, QueryError> {
        GraphTraces::first_segments(self, as_of)
    }
    fn slice(&mut self, spin: SegmentId, as_of: Time) -> Result<Vec<SliceMember>, QueryError> {
        GraphTraces::slice(self, spin, as_of)
    }
    fn spins(&mut self, as_of: Time) -> Result<Vec<Spin>, QueryError> {
        GraphTraces::spins(self, as_of)
    }
}

/// Several arranged graphs read as one (module docs): each record in exactly one of them.
pub struct Union<'a> {
    layers: Vec<&'a mut GraphTraces>,
}

impl<'a> Union<'a> {
    /// The union of `layers`.
    pub fn new(layers: Vec<&'a mut GraphTraces>) -> Union<'a> {
        Union { layers }
    }

    /// Every layer's answer to `read`, concatenated and sorted.
    fn all<T: Ord>(
        &mut self,
        mut read: impl FnMut(&mut GraphTraces) -> Result<Vec<T>, QueryError>,
    ) -> Result<Vec<T>, QueryError> {
        let mut out = Vec::new();
        for l in self.layers.iter_mut() {
            out.extend(read(l)?);
        }
        out.sort();
        Ok(out)
    }
}

impl GraphRead for Union<'_> {
    fn segment(&mut self, id: SegmentId, as_of: Time) -> Result<Option<Segment>, QueryError> {
        for l in self.layers.iter_mut() {
            if let Some(s) = l.segment(id, as_of)? {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    fn segments_between(
        &mut self,
        first: SegmentId,
        last: SegmentId,
        as_of: Time,
    ) -> Result<Vec<Segment>, QueryError> {
        let mut out = Vec::new();
        for l in self.layers.iter_mut() {
            out.extend(l.segments_between(first, last, as_of)?);
        }
        // One arrangement gives id order (a segment's versions, if ever two, by value).
        out.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.cmp(b)));
        Ok(out)
    }

    fn incoming(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError> {
        self.all(|l| l.incoming(id, as_of))
    }

    fn outgoing(&mut self, id: SegmentId, as_of: Time) -> Result<Vec<CausalEdge>, QueryError> {
        self.all(|l| l.outgoing(id, as_of))
    }

    fn thread_run(
        &mut self,
        tid: Tid,
        from: Nanos,
        to: Option<Nanos>,
        as_of: Time,
    ) -> Result<ThreadRun, QueryError> {
        let mut all: Vec<(Nanos, SegmentId, Span)> = Vec::new();
        for l in self.layers.iter_mut() {
            let run = l.thread_run(tid, from, to, as_of)?;
            all.extend(run.segments.into_iter().map(|(id, s)| (s.start_ns, id, s)));
        }
        // By start, then as one arrangement orders the values of a key.
        all.sort_by_key(|a| (a.0, a.1, a.2.end_ns));
        let before_last = all.iter().filter(|s| s.0 < from).map(|s| s.0).next_back();
        let after_first = to.and_then(|to| all.iter().map(|s| s.0).find(|&st| st > to));
        let segments = all
            .into_iter()
            .filter(|&(start, _, _)| {
                if start < from {
                    Some(start) == before_last
                } else {
                    match to {
                        Some(to) if start > to => Some(start) == after_first,
                        _ => true,
                    }
                }
            })
            .map(|(_, id, span)| (id, span))
            .collect();
        Ok(ThreadRun {
            segments,
            at_start: before_last.is_none(),
            at_end: after_first.is_none(),
        })
    }

    fn first_segments(&mut self, as_of: Time) -> Result<Vec<(Tid, SegmentId)>, QueryError> {
        let mut first: BTreeMap<Tid, SegmentId> = BTreeMap::new();
        for l in self.layers.iter_mut() {
            for (tid, id) in l.first_segments(as_of)? {
                first
                    .entry(tid)
                    .and_modify(|f| *f = (*f).min(id))
                    .or_insert(id);
            }
        }
        Ok(first.into_iter().collect())
    }

    fn slice(&mut self, spin: SegmentId, as_of: Time) -> Result<Vec<SliceMember>, QueryError> {
        self.all(|l| l.slice(spin, as_of))
    }

    fn spins(&mut self, as_of: Time) -> Result<Vec<Spin>, QueryError> {
        let mut out = Vec::new();
        for l in self.layers.iter_mut() {
            out.extend(l.spins(as_of)?);
        }
        // One arrangement gives them by thread, then by value.
        out.sort_by(|a, b| (a.tid, a).cmp(&(b.tid, b)));
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::arranged::ArrangedJob;
    use crate::dataflow::{Timed, Update};
    use argus_schema::{EdgeKind, EndCause, Pid, SegmentKind, SpinClass, StartCause, Strength};

    /// A tiny deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Threads of back-to-back segments (the last of some open), edges between segments
    /// that ran at the edge's time, spins over runs of segments; over epochs, with open
    /// segments closed (retracted and inserted closed) later, as the dataflow does.
    fn graph(rng: &mut Rng) -> Vec<Vec<(Update, i64)>> {
        let mut epochs: Vec<Vec<(Update, i64)>> = vec![Vec::new(); 6];
        let mut segs: Vec<Segment> = Vec::new();
        for tid in 1..=6 {
            let mut t = rng.next(50);
            let n = 5 + rng.next(20) as u32;
            for seq in 0..n {
                let len = 1 + rng.next(30);
                let mut s = Segment::starting(
                    SegmentId::new(Tid(tid), seq),
                    Pid(tid),
                    SegmentKind::Task,
                    Nanos(t),
                    StartCause::Created,
                );
                s.end_ns = Nanos(t + len);
                let epoch = ((t + len) / 60).min(5) as usize;
                if seq + 1 == n && rng.next(2) == 0 {
                    // Open, and maybe closed at a later epoch.
                    epochs[epoch].push((Update::Segment(s.clone()), 1));
                    if epoch < 5 && rng.next(2) == 0 {
                        epochs[epoch + 1].push((Update::Segment(s.clone()), -1));
                        s.end = EndCause::Woken;
                        s.end_ns = Nanos(t + len + 40);
                        epochs[epoch + 1].push((Update::Segment(s.clone()), 1));
                    }
                } else {
                    s.end = EndCause::Woken;
                    epochs[epoch].push((Update::Segment(s.clone()), 1));
                }
                segs.push(s);
                t += len;
            }
        }
        for _ in 0..60 {
            let a = &segs[rng.next(segs.len() as u64) as usize];
            let b = &segs[rng.next(segs.len() as u64) as usize];
            let ts = a.start_ns.0 + rng.next(a.end_ns.0 - a.start_ns.0 + 1);
            let e = CausalEdge {
                src: a.id,
                dst: b.id,
                kind: EdgeKind::Wakeup,
                strength: if rng.next(3) == 0 {
                    Strength::Weak
                } else {
                    Strength::Strong
                },
                ts: Nanos(ts),
                src_syscall: -1,
            };
            epochs[(ts / 60).min(5) as usize].push((Update::Edge(e), 1));
        }
        for s in segs.iter().filter(|s| s.id.seq() % 4 == 1) {
            let spin = Spin {
                segment: s.id,
                last: s.id,
                tid: s.tid,
                pid: s.pid,
                class: SpinClass::LongWait,
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                open: s.end == EndCause::Open,
                on_cpu_ns: 0,
                wait_ns: 0,
                segments: 1,
                wait_syscall: -1,
                timeouts: 0,
            };
            epochs[(s.end_ns.0 / 60).min(5) as usize].push((Update::Spin(spin), 1));
        }
        epochs
    }

    /// Every read of a union of layers (each record in the layer of its end time, open
    /// ones apart) equals the same read of one arranged graph holding them all, at every
    /// epoch: point reads, id ranges, thread runs of every window, first segments, spins.
    #[test]
    fn a_union_of_layers_reads_as_one_graph() {
        for seed in [1u64, 7, 42, 1234] {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let epochs = graph(&mut rng);
            timely::execute_directly(move |worker| {
                let mut one = ArrangedJob::without_slices(worker);
                // Layers of 50 ns of end times, and the open one.
                let mut layers: BTreeMap<Option<u64>, ArrangedJob> = BTreeMap::new();
                for (e, updates) in epochs.iter().enumerate() {
                    let e = e as u64;
                    for (u, d) in updates {
                        let key = u.end_time().map(|t| t.0 / 50);
                        layers
                            .entry(key)
                            .or_insert_with(|| ArrangedJob::without_slices(worker))
                            .send(e, [(u.clone(), *d)]);
                    }
                    one.send(e, updates.clone());
                    one.close(e);
                    for l in layers.values_mut() {
                        l.close(e);
                    }
                    worker.step_while(|| one.pending(e) || layers.values().any(|l| l.pending(e)));
                    assert!(e < 5 || layers.len() > 4, "several layers");
                    let mut union = Union::new(layers.values_mut().map(|l| l.traces()).collect());
                    let single = one.traces();
                    let ids: Vec<SegmentId> = (1..=6)
                        .flat_map(|t| (0..26).map(move |s| SegmentId::new(Tid(t), s)))
                        .collect();
                    for &id in &ids {
                        assert_eq!(union.segment(id, e), GraphRead::segment(single, id, e));
                        assert_eq!(union.incoming(id, e), GraphRead::incoming(single, id, e));
                        assert_eq!(union.outgoing(id, e), GraphRead::outgoing(single, id, e));
                    }
                    for t in 1..=6 {
                        let (a, b) = (SegmentId::new(Tid(t), 2), SegmentId::new(Tid(t), 9));
                        assert_eq!(
                            union.segments_between(a, b, e),
                            GraphRead::segments_between(single, a, b, e)
                        );
                        for from in (0..400).step_by(17) {
                            for to in [None, Some(from), Some(from + 25), Some(from + 200)] {
                                assert_eq!(
                                    union.thread_run(Tid(t), Nanos(from), to.map(Nanos), e),
                                    GraphRead::thread_run(
                                        single,
                                        Tid(t),
                                        Nanos(from),
                                        to.map(Nanos),
                                        e
                                    ),
                                    "seed {seed}, epoch {e}, tid {t}, from {from}, to {to:?}"
                                );
                            }
                        }
                    }
                    assert_eq!(
                        union.first_segments(e),
                        GraphRead::first_segments(single, e)
                    );
                    assert_eq!(union.spins(e), GraphRead::spins(single, e));
                }
            });
        }
    }
}
