//! Oracle tests of the arranged graph (`argus_pipeline::arranged`): the graph dataflow runs
//! on the randomized oracle stream (`common`), and its messages are fed epoch by epoch into
//! the arranged job with 1 and 2 timely workers. After every epoch:
//!
//! - each arrangement, read whole and united over the workers, consolidates to the sink's
//!   contents at that epoch (the updates accumulated so far);
//! - the slices arrangement equals `arranged::reference::slices` recomputed from scratch on
//!   that snapshot;
//! - point and window queries (a segment, its incoming and outgoing edges, a thread's
//!   segments in a window, a spin's slice), united over the workers, equal the same questions
//!   asked of the snapshot;
//! - a query as of the next epoch is refused as not yet complete, and, once the handles are
//!   compacted to the epoch, one as of the previous epoch as compacted away;
//! - on the stream with spin loops (`common::spin_stream`), the spins derived from the
//!   segments and the watermark (`arranged::spins`) equal the dataflow's spins table.

mod common;

use argus_pipeline::arranged::{reference, ArrangedJob, ShardSnapshot, SliceConfig, Span, Window};
use argus_pipeline::arranged::{JobConfig, QueryError, SliceMember, ThreadRun};
use argus_pipeline::dataflow::{run, DataflowConfig, Message, Update};
use argus_pipeline::Graph;
use argus_schema::{CausalEdge, Event, Nanos, Segment, SegmentId, Spin, SpinClass, Strength, Tid};
use common::{batches, rules, spin_stream, stream};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

/// One epoch of the graph dataflow's output.
struct Epoch {
    epoch: u64,
    watermark: Nanos,
    updates: Vec<(Update, i64)>,
}

/// The graph dataflow's messages for `evs` in batches of `size`, grouped by epoch.
fn epochs(evs: &[Event], size: usize) -> Vec<Epoch> {
    let cfg = DataflowConfig {
        rules: rules(),
        ..DataflowConfig::default()
    };
    let (in_tx, in_rx) = crossbeam_channel::bounded(4);
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let runner = std::thread::spawn(move || run(&cfg, in_rx, out_tx));
    let bs = batches(evs, size, None);
    let feeder = std::thread::spawn(move || {
        for b in bs {
            if in_tx.send(b).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    let mut pending: Vec<(Update, i64)> = Vec::new();
    for msg in out_rx {
        match msg {
            Message::Updates { updates, .. } => pending.extend(updates),
            Message::EpochDone {
                epoch, watermark, ..
            } => out.push(Epoch {
                epoch: epoch.0,
                watermark,
                updates: std::mem::take(&mut pending),
            }),
        }
    }
    feeder.join().expect("the feeder finishes");
    runner
        .join()
        .expect("the dataflow thread finishes")
        .expect("the dataflow runs");
    out
}

/// The questions asked at one epoch (chosen from the snapshot the answers are checked on).
#[derive(Clone, Debug, Default)]
struct Questions {
    segments: Vec<SegmentId>,
    windows: Vec<(Tid, Window)>,
    spins: Vec<SegmentId>,
}

/// One worker's answers at one epoch.
#[derive(Debug, Default)]
struct Answers {
    snapshot: ShardSnapshot,
    segments: Vec<Option<Segment>>,
    incoming: Vec<Vec<CausalEdge>>,
    outgoing: Vec<Vec<CausalEdge>>,
    windows: Vec<Vec<(SegmentId, Span)>>,
    slices: Vec<Vec<SliceMember>>,
    spins: Vec<Spin>,
    /// `thread_run` of each window question (meaningful with one worker: a thread's
    /// segments are spread over the shards).
    runs: Vec<ThreadRun>,
    /// `first_segments`.
    firsts: Vec<(Tid, SegmentId)>,
    /// `segments_between` each segment question's thread's first and last possible ids.
    between: Vec<Vec<Segment>>,
}

/// Feeds `epochs` (on worker 0) into the arranged job with `workers` workers, deriving the
/// spins when `spins`; returns every worker's answers at every epoch.
fn arranged(
    epochs: Arc<Vec<Epoch>>,
    questions: Arc<Vec<Questions>>,
    workers: usize,
    cfg: SliceConfig,
    spins: bool,
) -> Vec<Vec<Answers>> {
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let mut job = ArrangedJob::with_config(
            worker,
            &JobConfig {
                slices: Some(cfg.clone()),
                derived_spins: spins.then(rules),
            },
        );
        let mut seen = Vec::new();
        for (i, ep) in epochs.iter().enumerate() {
            let e = ep.epoch;
            if worker.index() == 0 {
                job.send(e, ep.updates.iter().cloned());
                job.watermark(e, ep.watermark);
            }
            job.close(e);
            worker.step_while(|| job.pending(e));
            let t = job.traces();
            assert!(
                matches!(
                    t.segment(SegmentId(0), e + 1),
                    Err(QueryError::NotYet { .. })
                ),
                "epoch {} is not complete at epoch {e}",
                e + 1
            );
            let q = &questions[i];
            let a = Answers {
                snapshot: t.snapshot(e).expect("the epoch is complete"),
                segments: q
                    .segments
                    .iter()
                    .map(|id| t.segment(*id, e).expect("segment"))
                    .collect(),
                incoming: q
                    .segments
                    .iter()
                    .map(|id| t.incoming(*id, e).expect("incoming"))
                    .collect(),
                outgoing: q
                    .segments
                    .iter()
                    .map(|id| t.outgoing(*id, e).expect("outgoing"))
                    .collect(),
                windows: q
                    .windows
                    .iter()
                    .map(|(tid, w)| t.thread_segments(*tid, *w, e).expect("window"))
                    .collect(),
                slices: q
                    .spins
                    .iter()
                    .map(|s| t.slice(*s, e).expect("slice"))
                    .collect(),
                spins: t.spins(e).expect("spins"),
                runs: q
                    .windows
                    .iter()
                    .map(|(tid, w)| t.thread_run(*tid, w.from_ns, w.to_ns, e).expect("run"))
                    .collect(),
                firsts: t.first_segments(e).expect("first segments"),
                between: q
                    .segments
                    .iter()
                    .map(|id| {
                        t.segments_between(
                            SegmentId::new(id.tid(), 0),
                            SegmentId::new(id.tid(), u32::MAX),
                            e,
                        )
                        .expect("between")
                    })
                    .collect(),
            };
            seen.push(a);
            t.compact_to(e);
            if e > 0 {
                assert_eq!(
                    t.segment(SegmentId(0), e - 1),
                    Err(QueryError::Compacted {
                        as_of: e - 1,
                        since: e
                    }),
                );
            }
        }
        seen
    })
    .expect("timely starts");
    guards
        .join()
        .into_iter()
        .map(|r| r.expect("a worker finishes"))
        .collect()
}

/// The sink's contents after each epoch.
fn snapshots(epochs: &[Epoch]) -> Vec<Graph> {
    let mut acc: HashMap<Update, i64> = HashMap::new();
    let mut out = Vec::new();
    for ep in epochs {
        for (u, d) in &ep.updates {
            *acc.entry(u.clone()).or_default() += d;
        }
        acc.retain(|_, d| *d != 0);
        let mut g = Graph::default();
        for (u, d) in &acc {
            assert!(*d > 0, "the sink holds {u:?} {d} times");
            for _ in 0..*d {
                match u {
                    Update::Segment(s) => g.segments.push(s.clone()),
                    Update::Edge(e) => g.edges.push(e.clone()),
                    Update::Spin(s) => g.spins.push(s.clone()),
                }
            }
        }
        g.sort();
        out.push(g);
    }
    out
}

/// Rows united over shards, consolidated, in order.
fn consolidate<K: Ord + Clone, V: Ord + Clone>(
    shards: impl IntoIterator<Item = Vec<(K, V, i64)>>,
) -> Vec<(K, V, i64)> {
    let mut acc: BTreeMap<(K, V), i64> = BTreeMap::new();
    for rows in shards {
        for (k, v, n) in rows {
            *acc.entry((k, v)).or_default() += n;
        }
    }
    acc.into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|((k, v), n)| (k, v, n))
        .collect()
}

/// Asserts equality, printing only a few of the records that differ.
fn same<T: PartialEq + Debug>(got: &[T], want: &[T], what: &str) {
    if got != want {
        let extra: Vec<_> = got.iter().filter(|x| !want.contains(x)).take(5).collect();
        let missing: Vec<_> = want.iter().filter(|x| !got.contains(x)).take(5).collect();
        panic!(
            "{what}: {} vs {} records\n arranged only: {extra:#?}\n expected only: {missing:#?}",
            got.len(),
            want.len()
        );
    }
}

/// Questions for `g`: a sample of segments (and one that does not exist), the windows of its
/// spins and of some threads, every spin.
fn questions(g: &Graph, cfg: &SliceConfig, seed: u64) -> Questions {
    let mut q = Questions::default();
    let n = g.segments.len();
    for i in 0..n.min(12) {
        q.segments
            .push(g.segments[(i * 7919 + seed as usize) % n].id);
    }
    q.segments.push(SegmentId(u64::MAX));
    for spin in &g.spins {
        q.windows.push((spin.tid, Window::of(spin, cfg)));
        q.spins.push(spin.segment);
    }
    for (i, s) in g
        .segments
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 97 == 3)
        .take(6)
    {
        let from = s.start_ns;
        let to = Nanos(from.0 + 1_000_000 * (i as u64 % 50));
        q.windows.push((
            s.tid,
            Window {
                from_ns: from,
                to_ns: Some(to),
            },
        ));
        q.windows.push((
            s.tid,
            Window {
                from_ns: Nanos(from.0 + 1),
                to_ns: None,
            },
        ));
    }
    q.spins.push(SegmentId(u64::MAX));
    q
}

/// The expected rows of every arrangement for the snapshot `g` (the derived spins: the
/// spins table when they are derived, else none).
fn expected(g: &Graph, cfg: &SliceConfig, spins: bool) -> ShardSnapshot {
    fn one<K: Ord + Clone, V: Ord + Clone>(rows: Vec<(K, V, i64)>) -> Vec<(K, V, i64)> {
        consolidate([rows])
    }
    ShardSnapshot {
        segments_by_id: one(g.segments.iter().map(|s| (s.id, s.clone(), 1)).collect()),
        segments_by_thread: one(g
            .segments
            .iter()
            .map(|s| ((s.tid, s.start_ns), (s.id, Span::of(s).end_ns), 1))
            .collect()),
        edges_by_dst: one(g.edges.iter().map(|e| (e.dst, e.clone(), 1)).collect()),
        edges_by_src: one(g.edges.iter().map(|e| (e.src, e.clone(), 1)).collect()),
        spins_by_thread: one(g.spins.iter().map(|s| (s.tid, s.clone(), 1)).collect()),
        slices_by_spin: one(reference::slices(g, cfg)
            .into_iter()
            .map(|(spin, m)| (spin, m, 1))
            .collect()),
        derived_spins_by_thread: if spins {
            one(g.spins.iter().map(|s| (s.tid, s.clone(), 1)).collect())
        } else {
            Vec::new()
        },
    }
}

/// What the slices of a run covered.
#[derive(Default)]
struct Coverage {
    strengths: BTreeSet<Strength>,
    largest: usize,
    slices: usize,
    /// Slices holding the segment after their spin's `last` (closed waits and loops).
    successors: usize,
    /// The distinct spins seen, by kind (see [`SpinKind`]).
    spins: BTreeMap<SpinKind, BTreeSet<Spin>>,
}

/// What a spin is: its class, whether it is open, whether it is a run (a yield run or a
/// logical wait of several segments).
type SpinKind = (SpinClass, bool, bool);

fn kind(s: &Spin) -> SpinKind {
    (s.class, s.open, s.segments > 1)
}

impl Coverage {
    /// How many distinct spins of `kind` were seen.
    fn count(&self, kind: SpinKind) -> usize {
        self.spins.get(&kind).map_or(0, BTreeSet::len)
    }
}

/// Runs the stream of `seed` (with spin loops and the derived spins when `spins`) through the
/// dataflow and the arranged job, and checks every arrangement and query at every epoch.
fn check(
    seed: u64,
    n: usize,
    size: usize,
    workers: usize,
    cfg: SliceConfig,
    spins: bool,
) -> Coverage {
    let evs = if spins {
        spin_stream(seed, n)
    } else {
        stream(seed, n)
    };
    let eps = epochs(&evs, size);
    assert!(eps.len() > 1 || size >= n, "several epochs");
    let graphs = snapshots(&eps);
    let qs: Vec<Questions> = graphs
        .iter()
        .enumerate()
        .map(|(i, g)| questions(g, &cfg, seed + i as u64))
        .collect();
    let seen = arranged(
        Arc::new(eps),
        Arc::new(qs.clone()),
        workers,
        cfg.clone(),
        spins,
    );
    assert_eq!(seen.len(), workers);
    let mut cov = Coverage::default();
    for (i, g) in graphs.iter().enumerate() {
        let what = |table: &str| {
            format!("{table} at epoch {i} (seed {seed}, batch {size}, {workers} workers)")
        };
        let at: Vec<&Answers> = seen.iter().map(|w| &w[i]).collect();
        let want = expected(g, &cfg, spins);
        same(
            &consolidate(at.iter().map(|a| a.snapshot.segments_by_id.clone())),
            &want.segments_by_id,
            &what("segments_by_id"),
        );
        same(
            &consolidate(at.iter().map(|a| a.snapshot.segments_by_thread.clone())),
            &want.segments_by_thread,
            &what("segments_by_thread"),
        );
        same(
            &consolidate(at.iter().map(|a| a.snapshot.edges_by_dst.clone())),
            &want.edges_by_dst,
            &what("edges_by_dst"),
        );
        same(
            &consolidate(at.iter().map(|a| a.snapshot.edges_by_src.clone())),
            &want.edges_by_src,
            &what("edges_by_src"),
        );
        same(
            &consolidate(at.iter().map(|a| a.snapshot.spins_by_thread.clone())),
            &want.spins_by_thread,
            &what("spins_by_thread"),
        );
        same(
            &consolidate(at.iter().map(|a| a.snapshot.slices_by_spin.clone())),
            &want.slices_by_spin,
            &what("slices_by_spin"),
        );
        same(
            &consolidate(
                at.iter()
                    .map(|a| a.snapshot.derived_spins_by_thread.clone()),
            ),
            &want.derived_spins_by_thread,
            &what("derived_spins_by_thread"),
        );
        for s in &g.spins {
            cov.spins.entry(kind(s)).or_default().insert(s.clone());
        }

        // Point and window queries, united over the workers.
        let q = &qs[i];
        for (j, id) in q.segments.iter().enumerate() {
            let got: Vec<Segment> = at.iter().filter_map(|a| a.segments[j].clone()).collect();
            let want: Vec<Segment> = g.segments.iter().filter(|s| s.id == *id).cloned().collect();
            same(&got, &want, &what(&format!("segment {id:?}")));
            let mut got: Vec<CausalEdge> = at.iter().flat_map(|a| a.incoming[j].clone()).collect();
            got.sort();
            let want: Vec<CausalEdge> = g.edges.iter().filter(|e| e.dst == *id).cloned().collect();
            same(&got, &want, &what(&format!("incoming edges of {id:?}")));
            let mut got: Vec<CausalEdge> = at.iter().flat_map(|a| a.outgoing[j].clone()).collect();
            got.sort();
            let want: Vec<CausalEdge> = g.edges.iter().filter(|e| e.src == *id).cloned().collect();
            same(&got, &want, &what(&format!("outgoing edges of {id:?}")));
        }
        for (j, (tid, w)) in q.windows.iter().enumerate() {
            let mut got: Vec<(SegmentId, Span)> =
                at.iter().flat_map(|a| a.windows[j].clone()).collect();
            got.sort_by_key(|(id, span)| (span.start_ns, *id));
            let mut want: Vec<(SegmentId, Span)> = g
                .segments
                .iter()
                .filter(|s| s.tid == *tid && Span::of(s).overlaps(w))
                .map(|s| (s.id, Span::of(s)))
                .collect();
            want.sort_by_key(|(id, span)| (span.start_ns, *id));
            same(&got, &want, &what(&format!("segments of {tid:?} in {w:?}")));
        }
        if workers == 1 {
            let a = at[0];
            for (j, (tid, w)) in q.windows.iter().enumerate() {
                let mut all: Vec<&Segment> = g.segments.iter().filter(|s| s.tid == *tid).collect();
                all.sort_by_key(|s| (s.start_ns, s.id));
                // The last start before `from` (all sharing it), those in [from, to], the
                // first start after `to` (all sharing it).
                let before = all
                    .iter()
                    .map(|s| s.start_ns)
                    .filter(|x| *x < w.from_ns)
                    .max();
                let after = all
                    .iter()
                    .map(|s| s.start_ns)
                    .filter(|x| w.to_ns.is_some_and(|to| *x > to))
                    .min();
                let want = ThreadRun {
                    segments: all
                        .iter()
                        .filter(|s| {
                            Some(s.start_ns) == before
                                || Some(s.start_ns) == after
                                || (s.start_ns >= w.from_ns
                                    && w.to_ns.is_none_or(|to| s.start_ns <= to))
                        })
                        .map(|s| (s.id, Span::of(s)))
                        .collect(),
                    at_start: before.is_none(),
                    at_end: after.is_none(),
                };
                assert_eq!(
                    a.runs[j],
                    want,
                    "{}",
                    what(&format!("run of {tid:?} in {w:?}"))
                );
            }
            let mut firsts: BTreeMap<Tid, SegmentId> = BTreeMap::new();
            for s in &g.segments {
                let f = firsts.entry(s.tid).or_insert(s.id);
                *f = (*f).min(s.id);
            }
            let firsts: Vec<(Tid, SegmentId)> = firsts.into_iter().collect();
            assert_eq!(a.firsts, firsts, "{}", what("first segments"));
            for (j, id) in q.segments.iter().enumerate() {
                let mut want: Vec<Segment> = g
                    .segments
                    .iter()
                    .filter(|s| s.tid == id.tid())
                    .cloned()
                    .collect();
                want.sort_by_key(|s| s.id);
                same(
                    &a.between[j],
                    &want,
                    &what(&format!("segments of {:?}", id.tid())),
                );
            }
        }
        let slices = reference::slices(g, &cfg);
        for (j, spin) in q.spins.iter().enumerate() {
            let mut got: Vec<SliceMember> = at.iter().flat_map(|a| a.slices[j].clone()).collect();
            got.sort();
            let want: Vec<SliceMember> = slices
                .iter()
                .filter(|(s, _)| s == spin)
                .map(|(_, m)| *m)
                .collect();
            same(&got, &want, &what(&format!("slice of {spin:?}")));
        }
        let mut got: Vec<Spin> = at.iter().flat_map(|a| a.spins.clone()).collect();
        got.sort();
        same(&got, &g.spins, &what("spins"));

        let mut sizes: HashMap<(SegmentId, Window), usize> = HashMap::new();
        for (spin, m) in &slices {
            cov.strengths.insert(m.strength);
            *sizes.entry((*spin, m.window)).or_default() += 1;
        }
        cov.largest = cov.largest.max(sizes.values().copied().max().unwrap_or(0));
        let successors = g
            .spins
            .iter()
            .filter(|spin| {
                let next = SegmentId::new(spin.last.tid(), spin.last.seq() + 1);
                !spin.open
                    && slices
                        .iter()
                        .any(|(s, m)| *s == spin.segment && m.segment == next)
            })
            .count();
        cov.successors = cov.successors.max(successors);
        cov.slices = cov.slices.max(sizes.len());
    }
    cov
}

#[test]
fn arranged_graph_and_slices_equal_the_sink_and_the_reference_every_epoch_one_worker() {
    for (seed, n, size) in [(11, 4000, 131), (14, 6000, 1000)] {
        let cov = check(seed, n, size, 1, SliceConfig::default(), false);
        assert!(cov.slices > 0, "the stream has hangs");
        assert!(cov.largest > 10, "and slices beyond their roots");
        assert_eq!(cov.strengths.len(), 3, "with members of every strength");
        assert!(cov.successors > 0, "and the segments that ended waits");
    }
}

#[test]
fn arranged_graph_and_slices_equal_the_sink_and_the_reference_every_epoch_two_workers() {
    for (seed, n, size) in [(13, 4000, 173), (11, 6000, 1500)] {
        let cov = check(seed, n, size, 2, SliceConfig::default(), false);
        assert!(cov.slices > 0 && cov.largest > 10);
    }
}

#[test]
fn slices_with_no_look_back_and_one_epoch_per_event_run() {
    // A look-back of 0 cuts the window at the spin's start; one event per epoch makes every
    // open segment and spin change at every epoch.
    let cov = check(15, 800, 1, 2, SliceConfig { lookback_ns: 0 }, false);
    assert!(cov.slices > 0 && cov.largest > 2);
    // The window does cut: without it the slices are larger.
    let evs = stream(15, 800);
    let g = argus_pipeline::reference::compute(
        &evs,
        evs.last().map(|e| e.ts).unwrap_or_default(),
        &rules(),
    );
    let cut = reference::slices(&g, &SliceConfig { lookback_ns: 0 }).len();
    let all = reference::slices(
        &g,
        &SliceConfig {
            lookback_ns: u64::MAX,
        },
    )
    .len();
    assert!(
        cut < all,
        "{cut} members within the windows, {all} without them"
    );
}

/// Asserts that the spin loops of `cov` made every kind of spin the derived spins compute.
fn assert_spin_coverage(cov: &Coverage) {
    use SpinClass::{LongRunning, LongWait, RepeatedYield};
    for (kind, what) in [
        ((RepeatedYield, false, true), "closed yield runs"),
        ((RepeatedYield, true, true), "open yield runs"),
        ((LongWait, false, true), "closed logical waits"),
        ((LongWait, true, true), "open logical waits"),
        ((LongWait, false, false), "closed long waits"),
        ((LongWait, true, false), "open long waits"),
        ((LongRunning, true, false), "open long runs"),
    ] {
        assert!(
            cov.count(kind) > 0,
            "the stream has {what}: {:?}",
            cov.spins
                .iter()
                .map(|(k, v)| (k, v.len()))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn derived_spins_equal_the_dataflows_every_epoch_one_worker() {
    for (seed, n, size) in [(21, 4000, 97), (22, 6000, 1000)] {
        let cov = check(seed, n, size, 1, SliceConfig::default(), true);
        assert_spin_coverage(&cov);
    }
}

#[test]
fn derived_spins_equal_the_dataflows_every_epoch_two_workers() {
    for (seed, n, size) in [(23, 4000, 131), (24, 5000, 1500)] {
        let cov = check(seed, n, size, 2, SliceConfig::default(), true);
        assert_spin_coverage(&cov);
    }
}

#[test]
fn derived_spins_with_one_event_per_epoch() {
    // Every open segment, pending segment and open run changes at every epoch.
    let cov = check(25, 1500, 1, 2, SliceConfig::default(), true);
    assert!(cov.count((SpinClass::RepeatedYield, true, true)) > 0);
}

/// The thread-window query relies on this: the segments of one thread do not overlap (each
/// ends at or before the start of the next; only the last may be open). The slices' roots
/// rely on their ordinals being consecutive in time order (`last`'s successor is `seq + 1`).
#[test]
fn a_threads_segments_do_not_overlap_and_are_numbered_in_order() {
    let evs = stream(16, 6000);
    let g = argus_pipeline::reference::compute(
        &evs,
        evs.last().map(|e| e.ts).unwrap_or_default(),
        &rules(),
    );
    let mut by_thread: BTreeMap<Tid, Vec<&Segment>> = BTreeMap::new();
    for s in &g.segments {
        by_thread.entry(s.tid).or_default().push(s);
    }
    for (tid, mut segs) in by_thread {
        segs.sort_by_key(|s| (s.start_ns, s.id));
        for pair in segs.windows(2) {
            let end = Span::of(pair[0]).end_ns;
            assert!(
                end.is_some_and(|end| end <= pair[1].start_ns),
                "{tid:?}: {:?} and {:?} overlap",
                pair[0],
                pair[1]
            );
            assert_eq!(
                pair[1].id,
                SegmentId::new(tid, pair[0].id.seq() + 1),
                "{tid:?}: the segment after {:?}",
                pair[0]
            );
        }
        assert_eq!(
            segs.first().map(|s| s.id.seq()),
            Some(0),
            "{tid:?} is numbered from 0"
        );
    }
}

/// The definition on a hand-made hang: a LongWait of thread 1 from 10 s to 13 s (window from
/// 8 s with the 2 s look-back), ended by thread 2's wake-up into its next segment.
#[test]
fn a_hand_made_hang_has_the_slice_its_definition_gives() {
    use argus_schema::{EdgeKind, EndCause, Pid, SegmentKind, SpinClass, StartCause};
    const S: u64 = 1_000_000_000;
    let seg = |tid: i32, seq: u32, start: u64, end: Option<u64>| {
        let mut s = Segment::starting(
            SegmentId::new(Tid(tid), seq),
            Pid(tid),
            SegmentKind::Task,
            Nanos(start),
            if seq == 0 {
                StartCause::FirstSeen
            } else {
                StartCause::Woken
            },
        );
        s.end_ns = Nanos(end.unwrap_or(start + S / 2));
        s.end = if end.is_some() {
            EndCause::Woken
        } else {
            EndCause::Open
        };
        s
    };
    let edge = |src: &Segment, dst: &Segment, kind, strength| CausalEdge {
        src: src.id,
        dst: dst.id,
        kind,
        strength,
        ts: dst.start_ns,
        src_syscall: -1,
    };
    let a0 = seg(1, 0, 10 * S, Some(13 * S));
    let a1 = seg(1, 1, 13 * S, None);
    let b0 = seg(2, 0, 9 * S, Some(11 * S));
    let b1 = seg(2, 1, 11 * S, Some(14 * S));
    let c0 = seg(3, 0, 17 * S / 2, Some(12 * S));
    let d0 = seg(4, 0, S, Some(7 * S));
    let e0 = seg(5, 0, 12 * S, Some(25 * S / 2));
    let spin = Spin {
        segment: a0.id,
        last: a0.id,
        tid: Tid(1),
        pid: Pid(1),
        class: SpinClass::LongWait,
        start_ns: a0.start_ns,
        end_ns: a0.end_ns,
        open: false,
        on_cpu_ns: 0,
        wait_ns: 3 * S,
        segments: 1,
        wait_syscall: 202,
        timeouts: 0,
    };
    let woke = edge(&b1, &a1, EdgeKind::Wakeup, Strength::Strong);
    let mut first: Vec<(Update, i64)> = [&a0, &a1, &b0, &b1, &c0, &d0, &e0]
        .into_iter()
        .map(|s| (Update::Segment(s.clone()), 1))
        .collect();
    first.extend(
        [
            woke.clone(),
            edge(&b0, &b1, EdgeKind::ThreadOrder, Strength::Weak),
            edge(&c0, &b1, EdgeKind::Message, Strength::Boosted),
            edge(&d0, &b0, EdgeKind::Fork, Strength::Strong),
            edge(&e0, &a0, EdgeKind::WaitWake, Strength::Weak),
            edge(&a0, &a1, EdgeKind::ThreadOrder, Strength::Weak),
        ]
        .map(|e| (Update::Edge(e), 1)),
    );
    first.push((Update::Spin(spin.clone()), 1));
    let epochs = [
        first,
        vec![(Update::Edge(woke), -1)],
        vec![(
            Update::Edge(edge(&c0, &a0, EdgeKind::Message, Strength::Strong)),
            1,
        )],
    ];
    let member = |s: &Segment, strength| SliceMember {
        window: Window {
            from_ns: Nanos(8 * S),
            to_ns: Some(Nanos(13 * S)),
        },
        segment: s.id,
        strength,
    };
    use Strength::{Boosted, Strong, Weak};
    let want = [
        vec![
            member(&a0, Strong),
            member(&a1, Strong),
            member(&b0, Weak),
            member(&b1, Strong),
            member(&c0, Boosted),
            member(&e0, Weak),
        ],
        vec![member(&a0, Strong), member(&a1, Strong), member(&e0, Weak)],
        vec![
            member(&a0, Strong),
            member(&a1, Strong),
            member(&c0, Strong),
            member(&e0, Weak),
        ],
    ];
    let cfg = SliceConfig::default();
    let got = timely::execute_directly(move |worker| {
        let mut job = ArrangedJob::new(worker, &cfg);
        let mut got = Vec::new();
        for (e, updates) in epochs.into_iter().enumerate() {
            let e = e as u64;
            job.send(e, updates);
            job.close(e);
            worker.step_while(|| job.pending(e));
            got.push(job.traces().slice(a0.id, e).expect("the epoch is complete"));
        }
        got
    });
    for (i, want) in want.iter().enumerate() {
        let mut got = got[i].clone();
        got.sort();
        let mut want = want.clone();
        want.sort();
        assert_eq!(got, want, "epoch {i}");
    }
}
