//! Benchmark of the event-graph dataflow on a synthetic but realistic stream (2 CPUs, a few
//! hundred threads; syscalls with futex/epoll/read/write waits, wake-ups in task and
//! interrupt context, preemptions, hrtimers, wheel timers, work items, markers), generated
//! lazily so the events themselves take no memory.
//!
//! Prints, all measured in the same run:
//! 1. throughput over `ARGUS_BENCH_THROUGHPUT` events (default 2M): dataflow with 1 and 2
//!    workers (100k-event epochs, pipelined), and the batch reference on the same events;
//! 2. per-epoch latency of a 100k-event batch (send → `EpochDone`, one epoch in flight) as
//!    history grows to `ARGUS_BENCH_HISTORY` events (default 10M), median and p90 over the
//!    last tenth before 1M, 5M and 10M, 1 and 2 workers;
//! 3. resident memory (VmRSS growth since the dataflow started) per event of history at the
//!    same points, and the marginal growth per event between the first and last point.
//!
//! The end-to-end figures on a real 10M-event recording (with `argus build`, the reference
//! and `perf script`) are in the root `throughput` bench.
//!
//! Issue targets: ≥ 3M events/s with 2 workers; a 100k batch ≤ 50 ms median, flat to 10M;
//! ≤ 60 bytes of resident memory per event of history.
//!
//! `cargo bench -p argus-pipeline --bench graph`

#[path = "common/gen.rs"]
mod gen;

use argus_pipeline::dataflow::{run, Batch, DataflowConfig, Message};
use argus_pipeline::reference;
use argus_pipeline::rules::RulesConfig;
use gen::Gen;
use std::time::{Duration, Instant};

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const BATCH: usize = 100_000;

/// Pipelined throughput: batches are produced ahead (bounded channel); events/s.
fn throughput(workers: usize, total: usize) -> f64 {
    let (in_tx, in_rx) = crossbeam_channel::bounded::<Batch>(2);
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
    let cfg = DataflowConfig {
        workers,
        ..DataflowConfig::default()
    };
    // Generate first so generation is not timed.
    let mut g = Gen::new();
    let batches: Vec<Batch> = (0..total / BATCH)
        .map(|_| {
            let events = g.batch(BATCH);
            let watermark = events.last().map(|e| e.ts).unwrap_or_default();
            Batch { events, watermark }
        })
        .collect();
    let start = Instant::now();
    let runner = std::thread::spawn(move || run(&cfg, in_rx, out_tx));
    let feeder = std::thread::spawn(move || {
        for b in batches {
            if in_tx.send(b).is_err() {
                break;
            }
        }
    });
    let mut events = 0usize;
    for m in out_rx {
        if let Message::EpochDone { events: n, .. } = m {
            events += n;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let _ = feeder.join();
    let _ = runner.join();
    events as f64 / secs
}

/// One epoch in flight at a time: (history, latency) per batch, and RSS at checkpoints.
/// (history after the batch, its latency) per batch, and (history, resident bytes).
type LatencyRun = (Vec<(usize, Duration)>, Vec<(usize, u64)>);

fn latency(workers: usize, history: usize) -> LatencyRun {
    let (in_tx, in_rx) = crossbeam_channel::bounded::<Batch>(1);
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
    let cfg = DataflowConfig {
        workers,
        ..DataflowConfig::default()
    };
    let base_rss = rss_bytes();
    let runner = std::thread::spawn(move || run(&cfg, in_rx, out_tx));
    let mut g = Gen::new();
    let mut lat = Vec::new();
    let mut rss = Vec::new();
    let mut done = 0usize;
    let mut checkpoints = vec![1_000_000usize, 5_000_000, 10_000_000];
    checkpoints.retain(|c| *c < history);
    checkpoints.push(history);
    while done < history {
        let events = g.batch(BATCH);
        let n = events.len();
        let watermark = events.last().map(|e| e.ts).unwrap_or_default();
        let t = Instant::now();
        if in_tx.send(Batch { events, watermark }).is_err() {
            break;
        }
        loop {
            match out_rx.recv() {
                Ok(Message::EpochDone { .. }) => break,
                Ok(_) => {}
                Err(_) => return (lat, rss),
            }
        }
        lat.push((done + n, t.elapsed()));
        let before = done;
        done += n;
        for &c in &checkpoints {
            if before < c && done >= c {
                rss.push((done, rss_bytes().saturating_sub(base_rss)));
            }
        }
    }
    drop(in_tx);
    for _ in out_rx {}
    let _ = runner.join();
    (lat, rss)
}

/// Median and p90 of the batches in the window that ends at history `at` (its last tenth).
fn window(lat: &[(usize, Duration)], at: usize) -> Option<(Duration, Duration)> {
    let lo = at.saturating_sub(at / 10).max(BATCH);
    let mut w: Vec<Duration> = lat
        .iter()
        .filter(|(h, _)| *h > lo && *h <= at)
        .map(|(_, d)| *d)
        .collect();
    if w.is_empty() {
        return None;
    }
    w.sort();
    Some((w[w.len() / 2], w[(w.len() * 9).div_ceil(10) - 1]))
}

fn main() {
    let total = env("ARGUS_BENCH_THROUGHPUT", 2_000_000).max(BATCH);
    let history = env("ARGUS_BENCH_HISTORY", 10_000_000).max(BATCH);
    println!("argus-pipeline graph benchmark (synthetic stream, {BATCH}-event epochs)");

    let reference_rate = {
        let mut g = Gen::new();
        let evs = g.batch(total);
        let wm = evs.last().map(|e| e.ts).unwrap_or_default();
        let t = Instant::now();
        let graph = reference::compute(&evs, wm, &RulesConfig::default());
        let secs = t.elapsed().as_secs_f64();
        println!(
            "reference (batch): {} events -> {} segments, {} edges in {:.2} s: {:.2} M events/s",
            evs.len(),
            graph.segments.len(),
            graph.edges.len(),
            secs,
            evs.len() as f64 / secs / 1e6
        );
        evs.len() as f64 / secs
    };
    for w in [1, 2] {
        let r = throughput(w, total);
        println!(
            "dataflow {w} worker(s): {:.2} M events/s ({:.2}x the reference){}",
            r / 1e6,
            r / reference_rate,
            if w == 2 {
                format!(
                    " [target >= 3.00 M/s: {}]",
                    if r >= 3e6 { "met" } else { "NOT met" }
                )
            } else {
                String::new()
            }
        );
    }
    for w in [1, 2] {
        let (lat, rss) = latency(w, history);
        let mut line =
            format!("dataflow {w} worker(s), 100k-batch latency (median/p90) by history:");
        for at in [1_000_000, 5_000_000, 10_000_000] {
            if at <= history {
                if let Some((med, p90)) = window(&lat, at) {
                    line += &format!(
                        " {}M {:.1}/{:.1} ms",
                        at / 1_000_000,
                        med.as_secs_f64() * 1e3,
                        p90.as_secs_f64() * 1e3
                    );
                }
            }
        }
        println!("{line} [target median <= 50 ms, flat]");
        let mut line = format!("dataflow {w} worker(s), resident memory per event of history:");
        for (at, bytes) in &rss {
            line += &format!(
                " {:.1}M {:.1} B",
                *at as f64 / 1e6,
                *bytes as f64 / *at as f64
            );
        }
        if let (Some(first), Some(last)) = (rss.first(), rss.last()) {
            if last.0 > first.0 {
                line += &format!(
                    "; marginal {:.1} B",
                    last.1.saturating_sub(first.1) as f64 / (last.0 - first.0) as f64
                );
            }
        }
        println!("{line} [target <= 60 B]");
    }
}
