//! The oracle check of the arranged graph (`argus_pipeline::arranged`), shared by
//! `arranged.rs` (1 and 2 worker threads) and `arranged_cluster.rs` (two timely processes):
//! the graph dataflow runs on the randomized oracle stream ([`stream`]), and its messages are
//! fed epoch by epoch into the arranged job ([`arranged`]). After every epoch ([`verify`]):
//!
//! - each arrangement, read whole and united over the workers, consolidates to the sink's
//!   contents at that epoch (the updates accumulated so far);
//! - the slices arrangement equals `arranged::reference::slices` recomputed from scratch on
//!   that snapshot;
//! - point and window queries (a segment, its incoming and outgoing edges, a thread's
//!   segments in a window, a spin's slice), united over the workers, equal the same questions
//!   asked of the snapshot;
//! - a query as of the next epoch is refused as not yet complete, and, once the handles are
//!   compacted to the epoch, one as of the previous epoch as compacted away (asserted in the
//!   workers);
//! - with the spins derived (`Plan::spins`, on [`spin_stream`]: yield loops and timed-out
//!   waits on one object), the derived spins (`arranged::spins`, from the segments and the
//!   watermark) equal the dataflow's spins table.
//!
//! The questions and answers are serializable: in a cluster each process answers for its
//! workers' shards and another unites them.

use super::{batches, rules, spin_stream, stream};
use argus_pipeline::arranged::{reference, ArrangedJob, ShardSnapshot, SliceConfig, Span, Window};
use argus_pipeline::arranged::{JobConfig, QueryError, SliceMember, ThreadRun};
use argus_pipeline::dataflow::{by_epoch, run, DataflowConfig, Update};
use argus_pipeline::Graph;
use argus_schema::{CausalEdge, Event, Nanos, Segment, SegmentId, Spin, SpinClass, Strength, Tid};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

/// One epoch of the graph dataflow's output.
pub use argus_pipeline::dataflow::EpochUpdates as Epoch;

/// The graph dataflow's messages for `evs` in batches of `size`, grouped by epoch.
pub fn epochs(evs: &[Event], size: usize) -> Vec<Epoch> {
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
    let out = by_epoch(out_rx).collect();
    feeder.join().expect("the feeder finishes");
    runner
        .join()
        .expect("the dataflow thread finishes")
        .expect("the dataflow runs");
    out
}

/// The questions asked at one epoch (chosen from the snapshot the answers are checked on).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Questions {
    pub segments: Vec<SegmentId>,
    pub windows: Vec<(Tid, Window)>,
    pub spins: Vec<SegmentId>,
}

/// One worker's answers at one epoch.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Answers {
    pub snapshot: ShardSnapshot,
    pub segments: Vec<Option<Segment>>,
    pub incoming: Vec<Vec<CausalEdge>>,
    pub outgoing: Vec<Vec<CausalEdge>>,
    pub windows: Vec<Vec<(SegmentId, Span)>>,
    pub slices: Vec<Vec<SliceMember>>,
    pub spins: Vec<Spin>,
    /// `thread_run` of each window question (meaningful with one worker: a thread's
    /// segments are spread over the shards).
    pub runs: Vec<ThreadRun>,
    /// `first_segments`.
    pub firsts: Vec<(Tid, SegmentId)>,
    /// `segments_between` each segment question's thread's first and last possible ids.
    pub between: Vec<Vec<Segment>>,
}

/// Feeds `epochs` (on worker 0) into the arranged job, its workers and processes as `config`
/// says, deriving the spins when `spins`; returns the answers of every worker of this process
/// at every epoch, in the order of their indices.
pub fn arranged(
    epochs: Arc<Vec<Epoch>>,
    questions: Arc<Vec<Questions>>,
    config: timely::Config,
    cfg: SliceConfig,
    spins: bool,
) -> Vec<Vec<Answers>> {
    let guards = timely::execute(config, move |worker| {
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
pub struct Coverage {
    pub strengths: BTreeSet<Strength>,
    pub largest: usize,
    pub slices: usize,
    /// Slices holding the segment after their spin's `last` (closed waits and loops).
    pub successors: usize,
    /// The distinct spins seen, by kind (see [`SpinKind`]).
    pub spins: BTreeMap<SpinKind, BTreeSet<Spin>>,
}

/// What a spin is: its class, whether it is open, whether it is a run (a yield run or a
/// logical wait of several segments).
pub type SpinKind = (SpinClass, bool, bool);

fn kind(s: &Spin) -> SpinKind {
    (s.class, s.open, s.segments > 1)
}

impl Coverage {
    /// How many distinct spins of `kind` were seen.
    pub fn count(&self, kind: SpinKind) -> usize {
        self.spins.get(&kind).map_or(0, BTreeSet::len)
    }
}

/// A check's input and what it is checked against: the oracle stream of `seed` in epochs,
/// the sink's contents after each and the questions asked at each.
pub struct Plan {
    pub seed: u64,
    pub size: usize,
    pub cfg: SliceConfig,
    /// The stream has spin loops and the spins are derived.
    pub spins: bool,
    pub epochs: Arc<Vec<Epoch>>,
    pub graphs: Vec<Graph>,
    pub questions: Arc<Vec<Questions>>,
}

/// The plan for `n` events of the stream of `seed` in batches of `size`; with `spins`, the
/// stream with spin loops ([`spin_stream`]) and the spins derived.
pub fn plan(seed: u64, n: usize, size: usize, cfg: SliceConfig, spins: bool) -> Plan {
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
    Plan {
        seed,
        size,
        cfg,
        spins,
        epochs: Arc::new(eps),
        graphs,
        questions: Arc::new(qs),
    }
}

/// The plan run by `workers` worker threads of this process, checked (with the spins
/// derived when `spins`).
pub fn check(
    seed: u64,
    n: usize,
    size: usize,
    workers: usize,
    cfg: SliceConfig,
    spins: bool,
) -> Coverage {
    let plan = plan(seed, n, size, cfg, spins);
    let seen = arranged(
        plan.epochs.clone(),
        plan.questions.clone(),
        timely::Config::process(workers),
        plan.cfg.clone(),
        plan.spins,
    );
    assert_eq!(seen.len(), workers);
    verify(&plan, &seen, &format!("{workers} workers"))
}

/// Checks the answers of every worker (`seen[w][i]`: worker `w` at the plan's epoch `i`),
/// united over the workers, against the plan at every epoch (see the module docs); `who`
/// names the workers in failures.
pub fn verify(plan: &Plan, seen: &[Vec<Answers>], who: &str) -> Coverage {
    let (seed, size, cfg, graphs, qs) = (
        plan.seed,
        plan.size,
        &plan.cfg,
        &plan.graphs,
        &plan.questions,
    );
    assert!(
        seen.iter().all(|w| w.len() == graphs.len()),
        "every worker answers at each of the {} epochs",
        graphs.len()
    );
    let mut cov = Coverage::default();
    for (i, g) in graphs.iter().enumerate() {
        let what = |table: &str| format!("{table} at epoch {i} (seed {seed}, batch {size}, {who})");
        let at: Vec<&Answers> = seen.iter().map(|w| &w[i]).collect();
        let want = expected(g, cfg, plan.spins);
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
        // A thread's segments are spread over the shards: these hold with one worker only.
        if seen.len() == 1 {
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
        let slices = reference::slices(g, cfg);
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
