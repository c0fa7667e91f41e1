//! End-to-end throughput on a real recording, beside `perf` in the same run.
//!
//! `cargo bench --bench throughput` (root and tracefs needed; `perf` optional):
//!
//! 1. records a syscall-heavy workload (`dd` copying 64-byte blocks, a few seconds) with
//!    `argus record`, and the same workload with `perf record` of the same tracepoints;
//! 2. measures, interleaved and repeated (`ARGUS_BENCH_ROUNDS`, default 3), the best time of
//!    - argus decode (replay: chunks → pages → events, merged; one core),
//!    - `argus build` end to end (decode + dataflow + Parquet) with 1 and 2 workers,
//!    - `perf script` over the perf recording (text to /dev/null),
//! 3. prints events/s for each and the ratios against `perf script`.
//!
//! Figures are ratios measured in one run: these machines are noisy.

use argus_ingest::replay::TraceReader;
use std::path::Path;
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

fn workload() -> Vec<String> {
    let blocks = std::env::var("ARGUS_BENCH_BLOCKS").unwrap_or_else(|_| "400000".into());
    vec![
        "dd".into(),
        "if=/dev/zero".into(),
        "of=/dev/null".into(),
        "bs=64".into(),
        format!("count={blocks}"),
    ]
}

fn best<F: FnMut() -> Result<u64, String>>(
    rounds: usize,
    mut f: F,
) -> Result<(Duration, u64), String> {
    let mut best = Duration::MAX;
    let mut n = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        n = f()?;
        best = best.min(t.elapsed());
    }
    Ok((best, n))
}

fn decode(trace: &Path) -> Result<u64, String> {
    let reader = TraceReader::open(trace).map_err(|e| e.to_string())?;
    let mut n = 0u64;
    for ev in reader.events() {
        ev.map_err(|e| e.to_string())?;
        n += 1;
    }
    Ok(n)
}

fn build(trace: &Path, out: &Path, workers: usize) -> Result<u64, String> {
    let st = Command::new(ARGUS)
        .args(["build", "-q", "--workers", &workers.to_string(), "-o"])
        .arg(out)
        .arg(trace)
        .status()
        .map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("argus build failed: {st}"));
    }
    Ok(0)
}

fn perf_script(data: &Path) -> Result<u64, String> {
    let out = Command::new("perf")
        .args(["script", "-i"])
        .arg(data)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err("perf script failed".into());
    }
    Ok(out.stdout.iter().filter(|b| **b == b'\n').count() as u64)
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/sys/kernel/tracing/events").exists() {
        eprintln!("SKIP throughput bench: needs root and tracefs (mount -t tracefs nodev /sys/kernel/tracing)");
        return;
    }
    let rounds: usize = std::env::var("ARGUS_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let snap = dir.path().join("snap");
    let mut rec = Command::new(ARGUS);
    rec.args(["record", "-q", "--buffer-kb", "65536", "-o"])
        .arg(&trace)
        .arg("--")
        .args(workload())
        .stderr(Stdio::null());
    let st = rec.status().expect("argus record runs");
    assert!(st.success(), "argus record failed");

    let (t_decode, events) = best(rounds, || decode(&trace)).expect("decode");
    println!(
        "trace: {events} events ({} MiB compressed)",
        dir_size(&trace) / (1 << 20)
    );
    if events < 1_000_000 {
        println!("warning: fewer than 1M events; raise ARGUS_BENCH_BLOCKS");
    }

    let perf_data = dir.path().join("perf.data");
    let have_perf = Command::new("perf")
        .args(["record", "-q", "-a", "-m", "16M", "-o"])
        .arg(&perf_data)
        .arg("-e")
        .arg(TRACEPOINTS.join(","))
        .arg("--")
        .args(workload())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);

    // Interleave the measurements so drift in machine load hits all of them alike.
    let mut t_build1 = Duration::MAX;
    let mut t_build2 = Duration::MAX;
    let mut t_perf = Duration::MAX;
    let mut perf_events = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        build(&trace, &snap, 1).expect("build");
        t_build1 = t_build1.min(t.elapsed());
        let t = Instant::now();
        build(&trace, &snap, 2).expect("build");
        t_build2 = t_build2.min(t.elapsed());
        if have_perf {
            let t = Instant::now();
            perf_events = perf_script(&perf_data).expect("perf script");
            t_perf = t_perf.min(t.elapsed());
        }
    }
    let d = rate(events, t_decode);
    let b1 = rate(events, t_build1);
    let b2 = rate(events, t_build2);
    println!(
        "argus decode (1 core):        {:>7.2} M events/s  ({:.3} s)",
        d / 1e6,
        t_decode.as_secs_f64()
    );
    println!(
        "argus build, 1 worker:        {:>7.2} M events/s  ({:.3} s)",
        b1 / 1e6,
        t_build1.as_secs_f64()
    );
    println!(
        "argus build, 2 workers:       {:>7.2} M events/s  ({:.3} s)",
        b2 / 1e6,
        t_build2.as_secs_f64()
    );
    if have_perf && perf_events > 0 {
        let p = rate(perf_events, t_perf);
        println!(
            "perf script (same tracepoints): {:>5.2} M events/s  ({:.3} s, {perf_events} events)",
            p / 1e6,
            t_perf.as_secs_f64()
        );
        println!(
            "ratios vs perf script: decode {:.1}x, build(1) {:.1}x, build(2) {:.1}x",
            d / p,
            b1 / p,
            b2 / p
        );
    } else {
        println!("perf record/script unavailable: no perf comparison");
    }
}

fn dir_size(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            n += if path.is_dir() {
                dir_size(&path)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
        }
    }
    n
}
