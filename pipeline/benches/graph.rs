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

use argus_pipeline::dataflow::{run, Batch, DataflowConfig, Message};
use argus_pipeline::reference;
use argus_pipeline::rules::RulesConfig;
use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};
use std::time::{Duration, Instant};

struct Gen {
    rng: u64,
    ts: u64,
    seq: u64,
    running: [i32; 2],
    in_sys: Vec<Option<i32>>,
    blocked: Vec<bool>,
}

const THREADS: usize = 300;
const BASE_TID: i32 = 1000;

impl Gen {
    fn new() -> Gen {
        Gen {
            rng: 0x2545_F491_4F6C_DD1D,
            ts: 1_000_000_000,
            seq: 0,
            running: [BASE_TID, BASE_TID + 1],
            in_sys: vec![None; THREADS],
            blocked: vec![false; THREADS],
        }
    }
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn push(&mut self, out: &mut Vec<Event>, cpu: usize, tid: i32, ctx: Context, kind: EventKind) {
        self.ts += 1 + self.below(400);
        out.push(Event {
            ts: Nanos(self.ts),
            seq: self.seq,
            cpu: Cpu(cpu as u32),
            pid: Pid(tid / 4 * 4),
            tid: Tid(tid),
            ctx,
            kind,
        });
        self.seq += 1;
    }
    /// At least `n` more events.
    fn batch(&mut self, n: usize) -> Vec<Event> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            let cpu = self.below(2) as usize;
            let cur = self.running[cpu];
            let ci = (cur - BASE_TID) as usize;
            let other = BASE_TID + self.below(THREADS as u64) as i32;
            let oi = (other - BASE_TID) as usize;
            match self.below(100) {
                0..=39 => {
                    // A syscall: enter now, exit now or after blocking.
                    if let Some(nr) = self.in_sys[ci].take() {
                        let ret = [0i64, 8, -11, -4][self.below(4) as usize];
                        self.push(
                            &mut out,
                            cpu,
                            cur,
                            Context::Task,
                            EventKind::SysExit { nr, ret },
                        );
                    } else {
                        let nr = [0, 1, 202, 232, 7, 39, 3, 46, 47][self.below(9) as usize];
                        let fd = 3 + self.below(12);
                        self.in_sys[ci] = Some(nr);
                        self.push(
                            &mut out,
                            cpu,
                            cur,
                            Context::Task,
                            EventKind::SysEnter {
                                nr,
                                args: [fd, 0, 0, 0, 0, 0],
                            },
                        );
                    }
                }
                40..=59 => {
                    // Switch: block (if in a syscall) or be preempted.
                    let block = self.in_sys[ci].is_some() && self.below(3) != 0;
                    let next = if self.blocked[oi] { cur } else { other };
                    let state = if block {
                        TaskState::SLEEPING
                    } else {
                        TaskState::RUNNABLE
                    };
                    if block {
                        self.blocked[ci] = true;
                    }
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::Switch {
                            prev: Tid(cur),
                            prev_state: state,
                            next: Tid(next),
                        },
                    );
                    self.running[cpu] = next;
                }
                60..=74 => {
                    let ctx = if self.below(4) == 0 {
                        Context::HardIrq
                    } else {
                        Context::Task
                    };
                    self.blocked[oi] = false;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        ctx,
                        EventKind::Waking { target: Tid(other) },
                    );
                }
                75..=82 => {
                    let irq = [19, 24][self.below(2) as usize];
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::IrqEntry { irq },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::IrqExit { irq },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::SoftirqEntry { vec: 3 },
                    );
                    self.blocked[oi] = false;
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::Waking { target: Tid(other) },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::SoftirqExit { vec: 3 },
                    );
                }
                83..=89 => {
                    let timer = 0xffff_8000_0000 + (ci as u64) * 64;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::HrtimerStart {
                            timer,
                            function: 0xffff_1000,
                            expires: self.ts + 1000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::HrtimerExpire {
                            timer,
                            function: 0xffff_1000,
                        },
                    );
                    self.blocked[ci] = false;
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::Waking { target: Tid(cur) },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::HrtimerExpireExit { timer },
                    );
                }
                90..=94 => {
                    let work = 0xffff_9000_0000 + self.below(64) * 32;
                    let kw = BASE_TID + (THREADS as i32) - 1 - self.below(4) as i32;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::WorkQueue {
                            work,
                            function: 0xffff_2000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        kw,
                        Context::Task,
                        EventKind::WorkStart {
                            work,
                            function: 0xffff_2000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        kw,
                        Context::Task,
                        EventKind::WorkEnd { work },
                    );
                }
                95..=97 => {
                    let timer = 0xffff_a000_0000 + (ci as u64) * 64;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::TimerStart {
                            timer,
                            function: 0xffff_3000,
                            expires: 5,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::TimerExpire {
                            timer,
                            function: 0xffff_3000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::TimerExpireExit { timer },
                    );
                }
                _ => {
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::Fork {
                            child: Tid(other),
                            child_pid: Pid(other / 4 * 4),
                            thread: true,
                        },
                    );
                }
            }
        }
        out
    }
}

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
