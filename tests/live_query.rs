//! Live queries (issue 16 parts 3–4): a diagnosis from parts of the graph fetched on demand
//! equals the diagnosis of the whole graph.
//!
//! On the bundled recording (no tracing needed):
//! - every hang's diagnosis on partial graphs fetched from the whole snapshot graph
//!   (`argus_diagnose::fetch_whole`) equals the whole graph's, with several oracles;
//! - the live arrangements (`argus_pipeline::arranged`, fed epoch by epoch) answer every
//!   need as the whole graph of the same epoch does, and the diagnosis fetched from them
//!   equals the whole graph's at every epoch with a hang.
//!
//! On the real kernel (`argus start`, the `chain` workload): the job answers over its
//! socket (0600) the diagnosis a snapshot of the same epoch gives; two clients at once and a
//! client that hangs up mid-request leave it unharmed; with no job, `argus debug DIR` falls
//! back to the latest snapshot.

#[path = "../src/live/fetch.rs"]
mod fetch;

use crate::common::bundled_trace;
use argus_diagnose::{
    diagnose, fetch_whole, rounds, AutoOracle, DiagnoseConfig, Graph, GraphInput, Need, Oracle,
    Replay, ScriptedOracle, Target, Whole,
};
use argus_ingest::replay::TraceReader;
use argus_pipeline::arranged::{ArrangedJob, SliceConfig};
use argus_pipeline::dataflow::{run, Batch, DataflowConfig, Message, Update};
use argus_schema::{Event, Nanos, SegmentId, Spin, ThreadInfo, Tid};
use std::collections::BTreeMap;

fn events(trace: &std::path::Path) -> Vec<Event> {
    TraceReader::open(trace)
        .expect("the trace opens")
        .events()
        .collect::<Result<Vec<_>, _>>()
        .expect("the trace decodes")
}

/// The bundled recording's snapshot (as `argus demo --bundled` builds it) and its trace.
fn bundled() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = bundled_trace(tmp.path());
    let snapshot = trace
        .parent()
        .expect("the kept demo directory")
        .join("snapshot");
    (tmp, trace, snapshot)
}

/// The whole tables of a graph.
fn whole_of(spins: &[Spin], threads: &[ThreadInfo], end: Nanos) -> Whole {
    Whole {
        threads: threads.to_vec(),
        spins: spins.to_vec(),
        trace_end_ns: end,
        lost: Vec::new(),
    }
}

/// The diagnosis of `target` on `g` with the oracle `make` gives.
fn diagnose_whole(
    g: &Graph,
    target: Target,
    oracle: &mut dyn Oracle,
    cfg: &DiagnoseConfig,
) -> serde_json::Value {
    diagnose(g, Some(target), oracle, cfg)
        .expect("diagnoses")
        .to_json()
}

/// The same on partial graphs fetched through `fetch`, and the rounds it took.
fn diagnose_partial(
    whole: &Whole,
    target: Target,
    mut fetch: impl FnMut(&[Need]) -> argus_diagnose::Parts,
    oracle: &mut dyn Oracle,
    cfg: &DiagnoseConfig,
) -> (serde_json::Value, argus_diagnose::RoundStats) {
    let mut replay = Replay::new();
    let seed = fetch::seed(target.thread(), &whole.spins);
    let (d, stats) = rounds(
        whole,
        seed,
        |needs| Ok::<_, argus_diagnose::Error>(fetch(needs)),
        |g| {
            let mut o = replay.round(g, &mut *oracle);
            diagnose(g, Some(target), &mut o, cfg)
        },
    )
    .expect("rounds end");
    (d.to_json(), stats)
}

fn target_of(s: &Spin) -> Target {
    Target {
        pid: s.pid,
        tid: (s.tid.0 != s.pid.0).then_some(s.tid),
    }
}

#[test]
fn partial_diagnoses_equal_the_whole_graphs_on_the_bundled_recording() {
    let (_tmp, _trace, snapshot) = bundled();
    let snap = argus_sinks::read_snapshot_tables(&snapshot, false).expect("the snapshot");
    let end = snap.manifest.trace_end_ns.unwrap_or_default();
    let g = Graph::new(GraphInput {
        segments: snap.segments.clone(),
        edges: snap.edges.clone(),
        spins: snap.spins.clone(),
        threads: snap.threads.clone(),
        trace_end_ns: end,
    })
    .expect("the graph");
    let whole = whole_of(&snap.spins, &snap.threads, g.trace_end_ns());
    let cfg = DiagnoseConfig::default();
    let mut targets: Vec<Target> = snap.spins.iter().map(target_of).collect();
    targets.dedup();
    assert!(targets.len() > 3, "{} hung threads", targets.len());
    let mut fetched = 0;
    for t in &targets {
        let want = diagnose_whole(&g, *t, &mut AutoOracle, &cfg);
        let (got, stats) =
            diagnose_partial(&whole, *t, |n| fetch_whole(&g, n), &mut AutoOracle, &cfg);
        assert!(!stats.inexact, "{t:?}: {stats:?}");
        assert_eq!(got, want, "{t:?} ({stats:?})");
        fetched += stats.segments;
        // Scripted answers: the second choice wherever there is one, then stop.
        let script = || {
            ScriptedOracle::new([
                argus_diagnose::Reply::Choice(1),
                argus_diagnose::Reply::Choice(0),
                argus_diagnose::Reply::Stop,
            ])
        };
        let want = diagnose_whole(&g, *t, &mut script(), &cfg);
        let (got, _) = diagnose_partial(&whole, *t, |n| fetch_whole(&g, n), &mut script(), &cfg);
        assert_eq!(got, want, "{t:?}, scripted");
    }
    eprintln!(
        "{} targets: {} of {} segments fetched in all",
        targets.len(),
        fetched,
        g.segments().len() * targets.len()
    );
}

/// The graph dataflow's updates and watermark for `evs` in batches of `size`, per epoch.
fn epochs(evs: &[Event], size: usize) -> Vec<(Vec<(Update, i64)>, Nanos)> {
    let (in_tx, in_rx) = crossbeam_channel::bounded(4);
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let runner = std::thread::spawn(move || run(&DataflowConfig::default(), in_rx, out_tx));
    let chunks: Vec<Vec<Event>> = evs.chunks(size).map(|c| c.to_vec()).collect();
    let feeder = std::thread::spawn(move || {
        for c in chunks {
            let watermark = c.last().map(|e| e.ts).unwrap_or_default();
            in_tx
                .send(Batch {
                    events: c,
                    watermark,
                })
                .expect("the dataflow runs");
        }
    });
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for msg in out_rx {
        match msg {
            Message::Updates { updates, .. } => pending.extend(updates),
            Message::EpochDone { watermark, .. } => {
                out.push((std::mem::take(&mut pending), watermark))
            }
        }
    }
    feeder.join().expect("feeder");
    runner
        .join()
        .expect("the dataflow thread")
        .expect("the dataflow runs");
    out
}

#[test]
fn the_arrangements_answer_as_the_whole_graph_and_diagnose_alike_every_epoch() {
    let (_tmp, trace, snapshot) = bundled();
    let threads = argus_sinks::read_snapshot_tables(&snapshot, false)
        .expect("the snapshot")
        .threads;
    let evs = events(&trace);
    let eps = epochs(&evs, 5_000);
    assert!(eps.len() > 5, "{} epochs", eps.len());
    let cfg = DiagnoseConfig::default();
    let mut checked = 0;
    timely::execute_directly(move |worker| {
        let mut job = ArrangedJob::new(worker, &SliceConfig::default());
        let mut acc: BTreeMap<Update, i64> = BTreeMap::new();
        for (e, (updates, watermark)) in eps.iter().enumerate() {
            let e = e as u64;
            for (u, d) in updates {
                *acc.entry(u.clone()).or_default() += d;
            }
            acc.retain(|_, d| *d != 0);
            job.send(e, updates.iter().cloned());
            job.close(e);
            worker.step_while(|| job.pending(e));
            job.traces().compact_to(e);
            let mut input = GraphInput {
                threads: threads.clone(),
                trace_end_ns: *watermark,
                ..GraphInput::default()
            };
            for u in acc.keys() {
                match u {
                    Update::Segment(s) => input.segments.push(s.clone()),
                    Update::Edge(x) => input.edges.push(x.clone()),
                    Update::Spin(s) => input.spins.push(s.clone()),
                }
            }
            if input.spins.is_empty() {
                continue;
            }
            let whole = whole_of(&input.spins, &threads, *watermark);
            let spins = input.spins.clone();
            let g = Graph::new(input).expect("the graph");
            // Every need the walk can make, answered alike.
            let some: Vec<SegmentId> = g.segments().iter().step_by(37).map(|s| s.id).collect();
            let mut needs = vec![
                Need::Threads,
                Need::Segment {
                    id: SegmentId(u64::MAX),
                },
            ];
            for id in &some {
                let s = g.segment(*id).expect("held");
                needs.push(Need::Segment { id: *id });
                needs.push(Need::Incoming { id: *id });
                needs.push(Need::Outgoing { id: *id });
                needs.push(Need::Window {
                    tid: id.tid(),
                    from_ns: s.start_ns,
                    to_ns: Nanos(s.start_ns.0 + 3_000_000),
                });
                needs.push(Need::Window {
                    tid: id.tid(),
                    from_ns: Nanos(s.start_ns.0 + 1),
                    to_ns: Nanos(s.start_ns.0 + 1),
                });
                needs.push(Need::Thread { tid: id.tid() });
            }
            needs.push(Need::Thread { tid: Tid(-77) });
            for n in &needs {
                let mut got = fetch::fetch(job.traces(), std::slice::from_ref(n), e)
                    .expect("the epoch is readable");
                let mut want = fetch_whole(&g, std::slice::from_ref(n));
                for p in [&mut got, &mut want] {
                    p.segments.sort();
                    p.absent.sort();
                    if let Some(t) = p.threads.as_mut() {
                        t.sort();
                    }
                }
                assert_eq!(got, want, "epoch {e}: {n:?}");
            }
            // The diagnosis of each hung thread, from the arrangements.
            let mut targets: Vec<Target> = spins.iter().map(target_of).collect();
            targets.dedup();
            for t in targets {
                let want = diagnose_whole(&g, t, &mut AutoOracle, &cfg);
                let (got, stats) = diagnose_partial(
                    &whole,
                    t,
                    |n| fetch::fetch(job.traces(), n, e).expect("the epoch is readable"),
                    &mut AutoOracle,
                    &cfg,
                );
                assert!(!stats.inexact, "epoch {e}, {t:?}: {stats:?}");
                assert_eq!(got, want, "epoch {e}, {t:?} ({stats:?})");
                checked += 1;
            }
        }
        assert!(checked > 5, "{checked} diagnoses compared");
    });
}
