//! End-to-end benchmark on a real recording of at least 10M events, beside the batch
//! reference and `perf script` on the same events, all measured in one run.
//!
//! How to run: `cargo bench --bench throughput` (root and tracefs to record; `perf` optional).
//!
//! 1. The trace. The first run records a pipe ping-pong (`dd bs=64 | dd`: reads, writes,
//!    wake-ups and switches between two processes) with `argus record`, while `perf record`
//!    traces the same tracepoints system-wide over the same window, so both tools hold the
//!    same kernel events. Both are kept under `target/argus-bench/` and reused by later runs
//!    (delete the directory to record afresh). `ARGUS_BENCH_TRACE=DIR` benchmarks another
//!    trace directory instead (with `DIR/../perf.data` if present); `ARGUS_BENCH_BLOCKS`
//!    (default 1.5M, about 12M events) sizes a new recording.
//! 2. Throughput, interleaved over `ARGUS_BENCH_ROUNDS` rounds (default 2; best of each):
//!    `argus build` end to end (decode + dataflow + Parquet snapshot) with 1 and 2 workers,
//!    `perf script` over the perf recording (text to a pipe), and the batch reference
//!    (`argus_pipeline::reference::compute`) over the decoded events. Printed as events/s
//!    and ratios; the target is `argus build` ≥ 3M events/s with 2 workers.
//! 3. Batch latency: the decoded events fed to the dataflow in 100k-event batches, one in
//!    flight (send → `EpochDone`), 1 and 2 workers; median and p90 of the ten batches that
//!    bring the history to 1M, 5M and 10M events, beside the time the reference needs to
//!    produce the graph at that history (it recomputes from the start). Target: median
//!    ≤ 50 ms, flat.
//! 4. Resident memory per event of history: VmRSS growth of this process since the dataflow
//!    started, divided by the events fed, at 1M, 5M and 10M, and the marginal growth from 1M
//!    to 10M. Target ≤ 60 B.
//!
//! These machines are shared and noisy: compare the ratios, which come from one run.

use argus_ingest::replay::TraceReader;
use argus_pipeline::dataflow::{run, Batch, DataflowConfig, Message};
use argus_pipeline::reference;
use argus_pipeline::rules::RulesConfig;
use argus_schema::Event;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ARGUS: &str = env!("CARGO_BIN_EXE_argus");

const TRACEPOINTS: &[&str] = &[
    "sched:sched_switch",
    "sched:sched_waking",
    "sched:sched_wakeup_new",
    "sched:sched_process_fork",
    "sched:sched_process_exit",
    "sched:sched_process_exec",
    "task:task_newtask",
    "task:task_rename",
    "raw_syscalls:sys_enter",
    "raw_syscalls:sys_exit",
    "irq:irq_handler_entry",
    "irq:irq_handler_exit",
    "irq:softirq_entry",
    "irq:softirq_exit",
    "timer:hrtimer_start",
    "timer:hrtimer_expire_entry",
    "timer:hrtimer_expire_exit",
];

const BATCH: usize = 100_000;
const CHECKPOINTS: [usize; 3] = [1_000_000, 5_000_000, 10_000_000];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn workload() -> Vec<String> {
    let blocks = env_usize("ARGUS_BENCH_BLOCKS", 1_500_000);
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "dd if=/dev/zero bs=64 count={blocks} status=none | dd of=/dev/null bs=64 status=none"
        ),
    ]
}

fn can_trace() -> bool {
    argus_ingest::linux::cannot_trace().is_none()
}

/// The cached recording (recorded on first use), and the perf recording of the same window.
fn trace() -> Result<(PathBuf, Option<PathBuf>), String> {
    if let Ok(dir) = std::env::var("ARGUS_BENCH_TRACE") {
        let dir = PathBuf::from(dir);
        let perf = dir
            .parent()
            .map(|p| p.join("perf.data"))
            .filter(|p| p.exists());
        return Ok((dir, perf));
    }
    let cache = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/argus-bench");
    let trace = cache.join("trace");
    let perf = cache.join("perf.data");
    if trace.join("meta.json").exists() {
        return Ok((trace, perf.exists().then_some(perf)));
    }
    if !can_trace() {
        return Err("needs root and tracefs to record the trace (or ARGUS_BENCH_TRACE=DIR)".into());
    }
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let mut argus = vec![
        ARGUS.to_string(),
        "record".into(),
        "-q".into(),
        "--buffer-kb".into(),
        "65536".into(),
        "-o".into(),
        trace.display().to_string(),
        "--".into(),
    ];
    argus.extend(workload());
    let have_perf = Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    eprintln!("recording the benchmark trace into {}", cache.display());
    let status = if have_perf {
        // perf traces the same tracepoints system-wide while argus records the workload.
        Command::new("perf")
            .args(["record", "-q", "-a", "-m", "64M", "-o"])
            .arg(&perf)
            .arg("-e")
            .arg(TRACEPOINTS.join(","))
            .arg("--")
            .args(&argus)
            .stdout(Stdio::null())
            .status()
    } else {
        Command::new(&argus[0]).args(&argus[1..]).status()
    }
    .map_err(|e| e.to_string())?;
    if !status.success() || !trace.join("meta.json").exists() {
        let _ = std::fs::remove_dir_all(&trace);
        return Err(format!("recording failed: {status}"));
    }
    Ok((trace, (have_perf && perf.exists()).then_some(perf)))
}

fn decode(trace: &Path) -> Result<Vec<Event>, String> {
    let reader = TraceReader::open(trace).map_err(|e| e.to_string())?;
    reader
        .events()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

fn build(trace: &Path, out: &Path, workers: usize) -> Result<(), String> {
    let st = Command::new(ARGUS)
        .args(["build", "-q", "--workers", &workers.to_string(), "-o"])
        .arg(out)
        .arg(trace)
        .status()
        .map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("argus build failed: {st}"));
    }
    Ok(())
}

/// `perf script` to a pipe; returns the number of lines (events).
fn perf_script(data: &Path) -> Result<u64, String> {
    let mut child = Command::new("perf")
        .args(["script", "-i"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut out = child.stdout.take().ok_or("no perf stdout")?;
    let mut buf = vec![0u8; 1 << 20];
    let mut lines = 0u64;
    loop {
        let n = out.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
    if !child.wait().map_err(|e| e.to_string())?.success() {
        return Err("perf script failed".into());
    }
    Ok(lines)
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

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// Per batch: (history after it, latency); and (history, RSS growth) at the checkpoints.
type LatencyRun = (Vec<(usize, Duration)>, Vec<(usize, u64)>);

/// Feeds `events` in 100k batches, one epoch in flight.
fn latency(events: &[Event], workers: usize) -> LatencyRun {
    let (in_tx, in_rx) = crossbeam_channel::bounded::<Batch>(1);
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
    let cfg = DataflowConfig {
        workers,
        ..DataflowConfig::default()
    };
    let base = rss_bytes();
    let runner = std::thread::spawn(move || run(&cfg, in_rx, out_tx));
    let (mut lat, mut rss) = (Vec::new(), Vec::new());
    let mut done = 0;
    for chunk in events.chunks(BATCH) {
        let batch = Batch {
            events: chunk.to_vec(),
            watermark: chunk.last().map(|e| e.ts).unwrap_or_default(),
        };
        let t = Instant::now();
        if in_tx.send(batch).is_err() {
            break;
        }
        // The updates are received (and dropped) as a consumer would.
        let mut finished = false;
        for m in out_rx.iter() {
            if matches!(m, Message::EpochDone { .. }) {
                finished = true;
                break;
            }
        }
        if !finished {
            break;
        }
        lat.push((done + chunk.len(), t.elapsed()));
        let before = done;
        done += chunk.len();
        for c in CHECKPOINTS {
            if before < c && done >= c {
                rss.push((done, rss_bytes().saturating_sub(base)));
            }
        }
    }
    drop(in_tx);
    for _ in out_rx {}
    let _ = runner.join();
    (lat, rss)
}

/// Median and p90 of the ten batches that bring the history to `at`.
fn window(lat: &[(usize, Duration)], at: usize) -> Option<(Duration, Duration)> {
    let end = lat.iter().position(|(h, _)| *h >= at)?;
    let mut w: Vec<Duration> = lat[end.saturating_sub(9)..=end]
        .iter()
        .map(|(_, d)| *d)
        .collect();
    w.sort();
    Some((w[w.len() / 2], w[(w.len() * 9).div_ceil(10) - 1]))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let (trace, perf_data) = match trace() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("SKIP throughput bench: {e}");
            return;
        }
    };
    let rounds = env_usize("ARGUS_BENCH_ROUNDS", 2).max(1);
    let t = Instant::now();
    let events = decode(&trace).expect("the trace decodes");
    let t_decode = t.elapsed();
    let n = events.len();
    println!(
        "trace {}: {n} events ({:.1} M), decoded (one core) at {:.2} M events/s",
        trace.display(),
        n as f64 / 1e6,
        rate(n, t_decode) / 1e6
    );
    if n < 10_000_000 {
        println!("warning: fewer than 10M events; the issue asks for at least 10M");
    }

    // Throughput, interleaved so drift in machine load hits every contender alike.
    let tmp = tempfile::tempdir().expect("tempdir");
    let snap = tmp.path().join("snap");
    let (mut b1, mut b2, mut tp, mut tr) = (Duration::MAX, Duration::MAX, Duration::MAX, None);
    let mut perf_events = 0;
    let rules = RulesConfig::default();
    let wm = events.last().map(|e| e.ts).unwrap_or_default();
    let mut ref_graph = (0, 0);
    let mut build_error = None;
    for _ in 0..rounds {
        if build_error.is_none() {
            let t = Instant::now();
            match build(&trace, &snap, 1) {
                Ok(()) => b1 = b1.min(t.elapsed()),
                Err(e) => build_error = Some(e),
            }
            let t = Instant::now();
            match build(&trace, &snap, 2) {
                Ok(()) => b2 = b2.min(t.elapsed()),
                Err(e) => build_error = Some(e),
            }
        }
        if let Some(p) = &perf_data {
            let t = Instant::now();
            perf_events = perf_script(p).expect("perf script");
            tp = tp.min(t.elapsed());
        }
        let t = Instant::now();
        let g = reference::compute(&events, wm, &rules);
        let d = t.elapsed();
        tr = Some(tr.map_or(d, |x: Duration| x.min(d)));
        ref_graph = (g.segments.len(), g.edges.len());
    }
    let tr = tr.unwrap_or(Duration::MAX);
    let (r1, r2, rr) = (rate(n, b1), rate(n, b2), rate(n, tr));
    println!(
        "reference (batch, 1 core):   {:>6.2} M events/s ({:.2} s; {} segments, {} edges)",
        rr / 1e6,
        tr.as_secs_f64(),
        ref_graph.0,
        ref_graph.1
    );
    if let Some(e) = &build_error {
        println!("argus build FAILED on this trace ({e}): no end-to-end figures");
    }
    println!(
        "argus build, 1 worker:       {:>6.2} M events/s ({:.2} s, {:.2}x the reference)",
        r1 / 1e6,
        b1.as_secs_f64(),
        r1 / rr
    );
    println!(
        "argus build, 2 workers:      {:>6.2} M events/s ({:.2} s, {:.2}x the reference) [target >= 3.00 M/s: {}]",
        r2 / 1e6,
        b2.as_secs_f64(),
        r2 / rr,
        if r2 >= 3e6 { "met" } else { "NOT met" }
    );
    if perf_events > 0 {
        let rp = rate(perf_events as usize, tp);
        println!(
            "perf script (same window):   {:>6.2} M events/s ({:.2} s, {perf_events} events)",
            rp / 1e6,
            tp.as_secs_f64()
        );
        println!(
            "ratios vs perf script: build(1) {:.2}x, build(2) {:.2}x, reference {:.2}x",
            r1 / rp,
            r2 / rp,
            rr / rp
        );
    } else {
        println!("perf record/script unavailable: no perf comparison");
    }

    // The reference's cost of one update: recompute the graph of the whole history.
    let mut ref_at = Vec::new();
    for at in CHECKPOINTS.into_iter().filter(|c| *c <= n) {
        let wm = events[at - 1].ts;
        let t = Instant::now();
        let g = reference::compute(&events[..at], wm, &rules);
        ref_at.push((at, t.elapsed()));
        drop(g);
    }
    for workers in [1, 2] {
        let (lat, rss) = latency(&events, workers);
        let mut line = format!("dataflow {workers} worker(s), 100k batch (median/p90):");
        for at in CHECKPOINTS.into_iter().filter(|c| *c <= n) {
            if let Some((med, p90)) = window(&lat, at) {
                let r = ref_at.iter().find(|(h, _)| *h == at).map(|(_, d)| *d);
                line += &format!(
                    " | {}M: {:.1}/{:.1} ms (reference {:.0} ms)",
                    at / 1_000_000,
                    ms(med),
                    ms(p90),
                    r.map_or(f64::NAN, ms)
                );
            }
        }
        println!("{line} [target median <= 50 ms, flat]");
        let mut line = format!("dataflow {workers} worker(s), resident bytes per event:");
        for (at, bytes) in &rss {
            line += &format!(" {}M {:.1} B", at / 1_000_000, *bytes as f64 / *at as f64);
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
