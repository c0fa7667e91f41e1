//! Benchmark of the arranged graph (`argus_pipeline::arranged`) against the output path it
//! sits behind, on the synthetic stream of `graph.rs` with hangs made in it.
//!
//! The stream: `ARGUS_BENCH_EVENTS` events (default 2M) in epochs of `ARGUS_BENCH_EPOCH`
//! (default 50k), 300 threads at ~5M events/s of trace time. The spin threshold is lowered
//! to `ARGUS_BENCH_THRESHOLD_MS` (default 20 ms, so hangs fit in a short stream; the slices'
//! look-back is the same threshold) and four threads, one after another, are kept off the
//! CPUs and unwoken for three thresholds each: four hangs whose windows hold ~400k events of
//! everyone else's activity, so their slices are large (most of what ran in the window
//! reaches the hang through wake-ups and thread order).
//!
//! Measured, one epoch in flight at a time, `ARGUS_BENCH_WORKERS` workers (default 1):
//! 1. the graph dataflow (`dataflow::run`): send the batch → its `EpochDone` (the existing
//!    output path, up to the sink); its updates are kept for the next two;
//! 2. the arranged graph alone (`arrange_graph`: five arrangements), the same epochs' updates
//!    sent → the probe past the epoch, the handles compacted to it each epoch;
//! 3. the arranged graph with the backward slices (`ArrangedJob`).
//!
//! Then point queries on the final graph (a segment, its incoming edges, its thread's
//! segments over 1 ms, a hang's slice), timed each.
//!
//! Prints per-epoch median, p90 and total, and the ratios of (2) and (3) to (1).
//!
//! `cargo bench -p argus-pipeline --bench arranged`

#[path = "common/gen.rs"]
mod gen;

use argus_pipeline::arranged::{arrange_graph, ArrangedJob, GraphTraces, SliceConfig, Window};
use argus_pipeline::dataflow::{run, Batch, DataflowConfig, Message, Update};
use argus_pipeline::rules::RulesConfig;
use argus_schema::{Nanos, SegmentId, Spin};
use gen::{Gen, BASE_TID};
use std::sync::Arc;
use std::time::{Duration, Instant};
use timely::dataflow::operators::Probe;
use timely::dataflow::ProbeHandle;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Setup {
    total: usize,
    epoch: usize,
    workers: usize,
    rules: RulesConfig,
}

/// Mean trace time per event of `Gen` (ns): `1 + below(400)`.
const NS_PER_EVENT: u64 = 200;

/// The graph dataflow over the stream, one epoch at a time: per-epoch latency and each
/// epoch's updates.
fn dataflow(s: &Setup) -> (Vec<Duration>, Vec<Vec<(Update, i64)>>) {
    let (in_tx, in_rx) = crossbeam_channel::bounded::<Batch>(1);
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
    let cfg = DataflowConfig {
        workers: s.workers,
        rules: s.rules.clone(),
        ..DataflowConfig::default()
    };
    let runner = std::thread::spawn(move || run(&cfg, in_rx, out_tx));
    let mut g = Gen::new();
    let stall_events = 3 * s.rules.spin_threshold_ns / NS_PER_EVENT;
    let mut stalls = (0..4).map(|k| ((k + 1) * s.total / 5, BASE_TID + 17 + 31 * k as i32));
    let mut next_stall = stalls.next();
    let mut lat = Vec::new();
    let mut epochs = Vec::new();
    let mut done = 0;
    while done < s.total {
        if let Some((at, tid)) = next_stall.filter(|(at, _)| done >= *at) {
            let _ = at;
            g.stall(tid, stall_events);
            next_stall = stalls.next();
        }
        let events = g.batch(s.epoch);
        done += events.len();
        let watermark = events.last().map(|e| e.ts).unwrap_or_default();
        let t = Instant::now();
        in_tx
            .send(Batch { events, watermark })
            .expect("the dataflow runs");
        let mut updates = Vec::new();
        loop {
            match out_rx.recv().expect("the dataflow runs") {
                Message::EpochDone { .. } => break,
                Message::Updates { updates: u, .. } => updates.extend(u),
            }
        }
        lat.push(t.elapsed());
        epochs.push(updates);
    }
    drop(in_tx);
    for _ in out_rx {}
    runner
        .join()
        .expect("the dataflow thread")
        .expect("the dataflow");
    (lat, epochs)
}

/// What the arranged run reports from worker 0.
#[derive(Default)]
struct Arranged {
    lat: Vec<Duration>,
    queries: Vec<(&'static str, Duration)>,
    slice_rows: usize,
    largest_slice: usize,
    hangs: usize,
}

/// The arranged graph (with the slices when `slices`) fed `epochs`, one at a time.
fn arranged(s: &Setup, epochs: Arc<Vec<Vec<(Update, i64)>>>, slices: bool) -> Arranged {
    let cfg = SliceConfig::from_rules(&s.rules);
    let guards = timely::execute(timely::Config::process(s.workers), move |worker| {
        let lead = worker.index() == 0;
        let mut out = Arranged::default();
        if slices {
            let mut job = ArrangedJob::new(worker, &cfg);
            for (e, updates) in epochs.iter().enumerate() {
                let e = e as u64;
                let t = Instant::now();
                if lead {
                    job.send(e, updates.iter().cloned());
                }
                job.close(e);
                worker.step_while(|| job.pending(e));
                out.lat.push(t.elapsed());
                job.traces().compact_to(e);
            }
            let last = epochs.len() as u64 - 1;
            if lead {
                queries(job.traces(), last, &mut out);
            }
        } else {
            let mut input = differential_dataflow::input::InputSession::new();
            let probe = ProbeHandle::new();
            let mut traces = worker.dataflow(|scope| {
                let g = arrange_graph(input.to_collection(scope));
                g.segments_by_id.stream.clone().probe_with(&probe);
                g.segments_by_thread.stream.clone().probe_with(&probe);
                g.edges_by_dst.stream.clone().probe_with(&probe);
                g.edges_by_src.stream.clone().probe_with(&probe);
                g.spins_by_thread.stream.clone().probe_with(&probe);
                (
                    g.segments_by_id.trace.clone(),
                    g.segments_by_thread.trace.clone(),
                    g.edges_by_dst.trace.clone(),
                    g.edges_by_src.trace.clone(),
                    g.spins_by_thread.trace.clone(),
                )
            });
            for (e, updates) in epochs.iter().enumerate() {
                let e = e as u64;
                let t = Instant::now();
                if lead {
                    input.advance_to(e);
                    for (u, d) in updates.iter().cloned() {
                        input.update(u, d);
                    }
                }
                input.advance_to(e + 1);
                input.flush();
                worker.step_while(|| probe.less_equal(&e));
                out.lat.push(t.elapsed());
                use differential_dataflow::trace::TraceReader;
                use timely::progress::frontier::AntichainRef;
                let f = [e];
                let f = AntichainRef::new(&f);
                traces.0.set_logical_compaction(f);
                traces.0.set_physical_compaction(f);
                traces.1.set_logical_compaction(f);
                traces.1.set_physical_compaction(f);
                traces.2.set_logical_compaction(f);
                traces.2.set_physical_compaction(f);
                traces.3.set_logical_compaction(f);
                traces.3.set_physical_compaction(f);
                traces.4.set_logical_compaction(f);
                traces.4.set_physical_compaction(f);
            }
        }
        out
    })
    .expect("timely starts");
    let mut results = guards.join().into_iter();
    results
        .next()
        .expect("worker 0")
        .expect("worker 0 finishes")
}

/// Times point queries as of `at` on worker 0's shard (the whole graph with one worker).
fn queries(t: &mut GraphTraces, at: u64, out: &mut Arranged) {
    let snap = t.snapshot(at).expect("the last epoch is complete");
    out.slice_rows = snap.slices_by_spin.len();
    let mut sizes = std::collections::HashMap::<SegmentId, usize>::new();
    for (spin, _, _) in &snap.slices_by_spin {
        *sizes.entry(*spin).or_default() += 1;
    }
    out.largest_slice = sizes.values().copied().max().unwrap_or(0);
    let spins: Vec<Spin> = t.spins(at).expect("spins");
    out.hangs = spins.len();
    let ids: Vec<SegmentId> = snap
        .segments_by_id
        .iter()
        .step_by((snap.segments_by_id.len() / 200).max(1))
        .map(|(id, _, _)| *id)
        .collect();
    let mut time = |name: &'static str, n: usize, mut f: Box<dyn FnMut(usize) + '_>| {
        let mut each = Vec::new();
        for i in 0..n {
            let start = Instant::now();
            f(i);
            each.push(start.elapsed());
        }
        each.sort();
        if let Some(m) = each.get(each.len() / 2) {
            out.queries.push((name, *m));
        }
    };
    let segs = &snap.segments_by_id;
    time(
        "segment by id",
        ids.len(),
        Box::new(|i| {
            std::hint::black_box(t.segment(ids[i], at).expect("query"));
        }),
    );
    let t = std::cell::RefCell::new(t);
    time(
        "incoming edges",
        ids.len(),
        Box::new(|i| {
            std::hint::black_box(t.borrow_mut().incoming(ids[i], at).expect("query"));
        }),
    );
    time(
        "thread's segments over 1 ms",
        ids.len(),
        Box::new(|i| {
            let s = &segs[(i * 7919) % segs.len()].1;
            let w = Window {
                from_ns: s.start_ns,
                to_ns: Some(Nanos(s.start_ns.0 + 1_000_000)),
            };
            std::hint::black_box(t.borrow_mut().thread_segments(s.tid, w, at).expect("query"));
        }),
    );
    time(
        "a hang's slice",
        spins.len(),
        Box::new(|i| {
            std::hint::black_box(t.borrow_mut().slice(spins[i].segment, at).expect("query"));
        }),
    );
}

fn stats(lat: &[Duration]) -> (Duration, Duration, Duration) {
    let mut l = lat.to_vec();
    l.sort();
    let at = |q: f64| {
        l.get(((l.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    (at(0.5), at(0.9), lat.iter().sum())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let threshold_ms = env("ARGUS_BENCH_THRESHOLD_MS", 20) as u64;
    let s = Setup {
        total: env("ARGUS_BENCH_EVENTS", 2_000_000),
        epoch: env("ARGUS_BENCH_EPOCH", 50_000),
        workers: env("ARGUS_BENCH_WORKERS", 1),
        rules: RulesConfig {
            spin_threshold_ns: threshold_ms * 1_000_000,
            ..RulesConfig::default()
        },
    };
    println!(
        "arranged graph bench: {} events, {}-event epochs, {} worker(s), spin threshold and look-back {threshold_ms} ms",
        s.total, s.epoch, s.workers
    );
    let (flow, epochs) = dataflow(&s);
    let updates: usize = epochs.iter().map(|e| e.len()).sum();
    println!("graph dataflow: {} epochs, {updates} updates", epochs.len());
    let epochs = Arc::new(epochs);
    let graph = arranged(&s, epochs.clone(), false);
    let job = arranged(&s, epochs, true);
    let (f50, f90, ftot) = stats(&flow);
    println!();
    println!(
        "{:<38} {:>12} {:>12} {:>12} {:>8}",
        "per epoch", "median", "p90", "total", "ratio"
    );
    println!(
        "{:<38} {:>12} {:>12} {:>12} {:>8}",
        "graph dataflow (existing output path)",
        ms(f50),
        ms(f90),
        ms(ftot),
        "1.00"
    );
    for (name, r) in [
        ("arranged graph", &graph),
        ("arranged graph + slices", &job),
    ] {
        let (a50, a90, atot) = stats(&r.lat);
        println!(
            "{:<38} {:>12} {:>12} {:>12} {:>8.2}",
            name,
            ms(a50),
            ms(a90),
            ms(atot),
            atot.as_secs_f64() / ftot.as_secs_f64()
        );
    }
    println!();
    println!(
        "hangs {}, slice rows {}, largest slice {} segments",
        job.hangs, job.slice_rows, job.largest_slice
    );
    for (name, d) in &job.queries {
        println!("query {name:<30} median {:.1} µs", d.as_secs_f64() * 1e6);
    }
}
