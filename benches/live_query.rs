//! Live query latency (issue 16 part 3): the diagnosis of a hang from the live arrangements of
//! a long retained history, against loading the snapshot of the same graph and diagnosing it.
//!
//! The stream is the pipeline benches' generator (`pipeline/benches/common/gen.rs`: 300
//! threads on 2 CPUs, ~5M events/s of trace time), `ARGUS_BENCH_EVENTS` events (default
//! 10M) in epochs of `ARGUS_BENCH_EPOCH` (default 100k), with the spin threshold lowered to
//! `ARGUS_BENCH_THRESHOLD_MS` (default 20 ms) and four threads kept off the CPUs and unwoken
//! for three thresholds each, the last one near the end: four hangs in 10M events of history.
//!
//! 1. The graph dataflow runs over the stream, its output collected per epoch; then each
//!    epoch's updates go to the arranged graph (`ArrangedJob`, one worker, as `argus start`'s
//!    live graph: without the slices unless `ARGUS_BENCH_SLICES=1`), stepped to the epoch and
//!    compacted, and to consolidating sinks. Per-epoch update latency of the arranged graph
//!    is reported, timed with nothing else running (the dataflow is done by then).
//! 2. The consolidated graph is written as a snapshot (`SnapshotWriter`).
//! 3. For each hang: the snapshot path (`read_snapshot_tables` + `Graph::new`, then
//!    `diagnose`) and the live path (the rounds of `argus_diagnose::partial` reading the
//!    arrangements through `engine/src/live/fetch.rs`, then the same `diagnose`), each timed as the
//!    median of `ARGUS_BENCH_REPS` (default 5) runs; the two reports must be equal.
//!
//! `argus start` keeps its live graph in layers by end time (`engine/src/job/layers.rs`: a
//! quarter of `--retain` each, and the open records apart) and reads them as one
//! (`arranged::Union`). Without slices the bench feeds such layers too, `ARGUS_BENCH_LAYERS`
//! (default 5) of the stream's trace time each, beside the one arrangement, and reports the
//! per-epoch update and the live diagnosis for both (the layered answer must be equal too).
//!
//! Prints the figures and the ratio snapshot / live.
//!
//! `cargo bench --bench live_query`

#[path = "../pipeline/benches/common/gen.rs"]
#[allow(dead_code)]
mod gen;
// The allocator and memory settings `argus start` runs with (argus_engine::memory, its
// `allocator` feature on): the live graph's figures are the product's only with them.
use argus_engine::live::fetch;
use argus_engine::memory;

use argus_diagnose::{diagnose, rounds, AutoOracle, DiagnoseConfig, Graph, GraphInput, Replay};
use argus_pipeline::arranged::{ArrangedJob, GraphRead, SliceConfig, Union};
use argus_pipeline::dataflow::{by_epoch, run, Batch, DataflowConfig, Message, Timed, Update};
use argus_pipeline::rules::RulesConfig;
use argus_schema::{Epoch, Nanos, Pid, Segment, Spin, ThreadInfo, Tid};
use argus_sinks::{CollectionSink, SnapshotInfo, SnapshotWriter};
use gen::{Gen, BASE_TID, THREADS};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The layer of an update, as `argus start` picks it: its record's end time over
/// `layer_ns`, `None` while open.
fn layer_of(u: &Update, layer_ns: u64) -> Option<u64> {
    u.end_time().map(|t| t.0 / layer_ns)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Mean trace time per event of `Gen` (ns).
const NS_PER_EVENT: u64 = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    memory::tune(memory::START_PURGE);
    let total = env("ARGUS_BENCH_EVENTS", 10_000_000);
    let epoch = env("ARGUS_BENCH_EPOCH", 100_000);
    let reps = env("ARGUS_BENCH_REPS", 5).max(1);
    let slices = env("ARGUS_BENCH_SLICES", 0) == 1;
    let layers_n = if slices {
        0
    } else {
        env("ARGUS_BENCH_LAYERS", 5) as u64
    };
    let layer_ns = (total as u64 * NS_PER_EVENT / layers_n.max(1)).max(1);
    let rules = RulesConfig {
        spin_threshold_ns: env("ARGUS_BENCH_THRESHOLD_MS", 20) as u64 * 1_000_000,
        ..RulesConfig::default()
    };
    let threshold_ns = rules.spin_threshold_ns;
    let threads: Vec<ThreadInfo> = (0..THREADS as i32)
        .map(|i| {
            let tid = BASE_TID + i;
            ThreadInfo {
                tid: Tid(tid),
                pid: Pid(tid / 4 * 4),
                comm: format!("t{tid}"),
                process: format!("p{}", tid / 4 * 4),
                parent: None,
                start_ns: None,
                exit_ns: None,
                kernel: false,
            }
        })
        .collect();
    println!(
        "live_query: {total} events in epochs of {epoch}, threshold {} ms, live graph {} slices",
        threshold_ns / 1_000_000,
        if slices { "with" } else { "without" }
    );

    // The graph dataflow, fed by a thread; its output consumed by the timely worker below.
    let (in_tx, in_rx) = crossbeam_channel::bounded::<Batch>(2);
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
    let cfg = DataflowConfig {
        rules: rules.clone(),
        ..DataflowConfig::default()
    };
    let runner = std::thread::spawn(move || run(&cfg, in_rx, out_tx));
    let feeder = std::thread::spawn(move || {
        let mut g = Gen::new();
        let stall_events = 3 * threshold_ns / NS_PER_EVENT;
        // Four hangs, the last ending near the end of the stream.
        let at = |k: usize| {
            let end = (k + 1) * total / 5;
            if k == 3 {
                end.saturating_sub(2 * stall_events as usize)
            } else {
                end
            }
        };
        let mut stalls = (0..4).map(|k| (at(k), BASE_TID + 17 + 31 * k as i32));
        let mut next = stalls.next();
        let mut done = 0;
        while done < total {
            if let Some((_, tid)) = next.filter(|(at, _)| done >= *at) {
                g.stall(tid, stall_events);
                next = stalls.next();
            }
            let events = g.batch(epoch);
            done += events.len();
            let watermark = events.last().map(|e| e.ts).unwrap_or_default();
            if in_tx.send(Batch { events, watermark }).is_err() {
                return;
            }
        }
    });

    // The dataflow's output, per epoch, collected before the live graph is fed: the live
    // graph is then timed on its own. With the generator and the dataflow running flat out
    // beside it (two busy threads on this 2-core machine) its epochs also waited for the CPU,
    // which in `argus start` the dataflow takes only at the event rate.
    let t = Instant::now();
    let produced: Vec<_> = by_epoch(out_rx).collect();
    println!(
        "graph dataflow: {} epochs in {:.1} s",
        produced.len(),
        t.elapsed().as_secs_f64()
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let snap_dir = tmp.path().join("snapshot");
    let threads2 = threads.clone();
    let snap2 = snap_dir.clone();
    timely::execute_directly(move |worker| {
        let mut job = if slices {
            ArrangedJob::new(worker, &SliceConfig::from_rules(&rules))
        } else {
            ArrangedJob::without_slices(worker)
        };
        let mut segments = CollectionSink::<Segment>::new("segments");
        let mut edges = CollectionSink::new("edges");
        let mut spins = CollectionSink::<Spin>::new("spins");
        let mut lat = Vec::new();
        let mut layered: BTreeMap<Option<u64>, ArrangedJob> = BTreeMap::new();
        let mut lat_layered = Vec::new();
        let mut last = (0u64, Nanos(0));
        let started = Instant::now();
        for ep in produced {
            let e = ep.epoch;
            let t = Instant::now();
            job.send(e, ep.updates.iter().cloned());
            job.close(e);
            worker.step_while(|| job.pending(e));
            job.traces().compact_to(e);
            lat.push(t.elapsed());
            if layers_n > 0 {
                // The same epoch into the layers (the one arrangement is idle meanwhile).
                let t = Instant::now();
                let mut by: BTreeMap<Option<u64>, Vec<(Update, i64)>> = BTreeMap::new();
                for (u, d) in &ep.updates {
                    by.entry(layer_of(u, layer_ns))
                        .or_default()
                        .push((u.clone(), *d));
                }
                for (k, ups) in by {
                    layered
                        .entry(k)
                        .or_insert_with(|| ArrangedJob::without_slices(worker))
                        .send(e, ups);
                }
                for l in layered.values_mut() {
                    l.close(e);
                }
                worker.step_while(|| layered.values().any(|l| l.pending(e)));
                for l in layered.values_mut() {
                    l.traces().compact_to(e);
                }
                lat_layered.push(t.elapsed());
            }
            for (u, d) in ep.updates {
                match u {
                    Update::Segment(s) => segments.update(s, d),
                    Update::Edge(x) => edges.update(x, d),
                    Update::Spin(s) => spins.update(s, d),
                }
            }
            last = (e, ep.watermark);
        }
        let (as_of, watermark) = last;
        let segments = segments.contents();
        let edges = edges.contents();
        let spins = spins.contents();
        println!(
            "history: {} epochs, {} segments, {} edges, {} spins; fed to the live graph and sinks in {:.1} s",
            lat.len(),
            segments.len(),
            edges.len(),
            spins.len(),
            started.elapsed().as_secs_f64()
        );
        for (what, lat) in [("one arrangement", &lat), ("layered", &lat_layered)] {
            if lat.is_empty() {
                continue;
            }
            let mut sorted = lat.clone();
            sorted.sort();
            println!(
                "live graph per-epoch update ({epoch} events), {what}: median {:.1} ms, p90 {:.1} ms, max {:.1} ms",
                ms(sorted[sorted.len() / 2]),
                ms(sorted[sorted.len() * 9 / 10]),
                ms(sorted[sorted.len() - 1]),
            );
        }
        if layers_n > 0 {
            println!(
                "layers: {} ({} of {:.0} ms of end times, and the open records)",
                layered.len(),
                layered.keys().filter(|k| k.is_some()).count(),
                layer_ns as f64 / 1e6
            );
        }

        // The snapshot of the same graph.
        let t = Instant::now();
        let mut w = SnapshotWriter::new(&snap2).expect("a snapshot writer");
        w.write_segments(&segments).expect("segments");
        w.write_edges(&edges).expect("edges");
        w.write_spins(&spins).expect("spins");
        w.write_threads(&threads2).expect("threads");
        w.write_errors(&[]).expect("errors");
        w.finish(SnapshotInfo {
            epoch: Epoch(as_of),
            watermark_ns: watermark,
            trace_end_ns: Some(watermark),
            threshold_ns,
            workers: 1,
            ..SnapshotInfo::default()
        })
        .expect("the snapshot");
        println!("snapshot written in {:.1} s", t.elapsed().as_secs_f64());
        drop((segments, edges));

        let cfg = DiagnoseConfig {
            hang: argus_diagnose::HangConfig {
                threshold_ns,
                ..DiagnoseConfig::default().hang
            },
            ..DiagnoseConfig::default()
        };
        let load = || {
            let snap = argus_sinks::read_snapshot_tables(&snap2, false).expect("the snapshot");
            Graph::new(GraphInput {
                segments: snap.segments,
                edges: snap.edges,
                spins: snap.spins,
                threads: snap.threads,
                trace_end_ns: snap.manifest.trace_end_ns.unwrap_or_default(),
            })
            .expect("the graph")
        };
        let mut targets: Vec<argus_diagnose::Target> = spins
            .iter()
            .filter(|s| (BASE_TID + 17..BASE_TID + 17 + 31 * 4).contains(&s.tid.0))
            .map(|s| argus_diagnose::Target {
                pid: s.pid,
                tid: Some(s.tid),
            })
            .collect();
        targets.dedup();
        let mut load_times = Vec::new();
        let mut graph = None;
        for _ in 0..reps.min(3) {
            let t = Instant::now();
            graph = Some(load());
            load_times.push(t.elapsed());
        }
        let graph = graph.expect("loaded");
        let load_ms = ms(median(load_times));
        println!("snapshot load (read + graph): median {load_ms:.1} ms");
        for target in targets {
            let snap_diag = || {
                let t = Instant::now();
                let d = diagnose(&graph, Some(target), &mut AutoOracle, &cfg).expect("diagnoses");
                (t.elapsed(), d.to_json())
            };
            let (_, want) = snap_diag();
            let snap_walk = median((0..reps).map(|_| snap_diag().0).collect());
            let mut live = Vec::new();
            let mut stats = None;
            let mut got = serde_json::Value::Null;
            for _ in 0..reps {
                let t = Instant::now();
                let traces = job.traces();
                let whole = argus_diagnose::Whole {
                    threads: threads2.clone(),
                    spins: traces.spins(as_of).expect("spins"),
                    trace_end_ns: watermark,
                    lost: Vec::new(),
                    app: Default::default(),
                };
                let seed = fetch::seed(target.thread(), &whole.spins);
                let mut replay = Replay::new();
                let mut auto = AutoOracle;
                let (d, s) = rounds(
                    &whole,
                    seed,
                    |needs| fetch::fetch(job.traces(), needs, as_of).map_err(|e| panic!("{e}")),
                    |g| -> Result<_, argus_diagnose::Error> {
                        let mut o = replay.round(g, &mut auto);
                        diagnose(g, Some(target), &mut o, &cfg)
                    },
                )
                .expect("rounds");
                live.push(t.elapsed());
                stats = Some(s);
                got = d.to_json();
            }
            assert_eq!(
                got, want,
                "{target:?}: the live diagnosis equals the snapshot's"
            );
            let live_ms = ms(median(live));
            let s = stats.expect("ran");
            // The same diagnosis from the layers, read as one graph.
            let mut live_layered = Vec::new();
            for _ in 0..if layers_n > 0 { reps } else { 0 } {
                let t = Instant::now();
                let mut union = Union::new(layered.values_mut().map(|l| l.traces()).collect());
                let whole = argus_diagnose::Whole {
                    threads: threads2.clone(),
                    spins: union.spins(as_of).expect("spins"),
                    trace_end_ns: watermark,
                    lost: Vec::new(),
                    app: Default::default(),
                };
                let seed = fetch::seed(target.thread(), &whole.spins);
                let mut replay = Replay::new();
                let mut auto = AutoOracle;
                let (d, _) = rounds(
                    &whole,
                    seed,
                    |needs| fetch::fetch(&mut union, needs, as_of).map_err(|e| panic!("{e}")),
                    |g| -> Result<_, argus_diagnose::Error> {
                        let mut o = replay.round(g, &mut auto);
                        diagnose(g, Some(target), &mut o, &cfg)
                    },
                )
                .expect("rounds");
                live_layered.push(t.elapsed());
                assert_eq!(
                    d.to_json(),
                    want,
                    "{target:?}: the layered live diagnosis equals the snapshot's"
                );
            }
            if !live_layered.is_empty() {
                println!(
                    "hang of tid {}: live diagnosis from the {} layers {:.2} ms",
                    target.thread().0,
                    layered.len(),
                    ms(median(live_layered))
                );
            }
            println!(
                "hang of tid {}: live diagnosis {live_ms:.2} ms ({} rounds, {} segments, {} edges read) | snapshot: load {load_ms:.1} ms + diagnosis {:.2} ms = {:.1} ms | ratio {:.0}x",
                target.thread().0,
                s.rounds,
                s.segments,
                s.edges,
                ms(snap_walk),
                load_ms + ms(snap_walk),
                (load_ms + ms(snap_walk)) / live_ms,
            );
        }
    });
    feeder.join().expect("feeder");
    runner
        .join()
        .expect("the dataflow thread")
        .expect("the dataflow");
}
