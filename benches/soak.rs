//! Soak: `argus start` under a steady load (pipe ping-pong, futex hand-offs, timers) for a
//! long time. Reports the event rate the job saw, its resident memory at the start (after the
//! first snapshot) and at the end, lost events, and the delay from a `trace_marker` write to
//! its appearance in a snapshot (target: at most two snapshot periods).
//!
//! ```text
//! cargo bench --bench soak                          # 10 minutes, 10 s snapshots
//! ARGUS_SOAK_SECS=150 ARGUS_SOAK_PERIOD=10 ARGUS_SOAK_RETAIN=30 cargo bench --bench soak
//! ```
//! Needs root and tracefs (prints SKIP otherwise). `ARGUS_SOAK_RETAIN` (seconds, default 60) is the
//! job's `--retain`: the window is full once two of them have passed (the job forgets what
//! ended more than `--retain` ago, a quarter of it at a time), so besides single
//! samples the bench prints per-`retain` cycle peak and mean RSS and the RSS trend
//! (least-squares slope) over the steady part and over its second half (the allocator's
//! and the arrangements' working sets still grow for a few minutes after the window is
//! full: 250 s with `--retain 30`, 2026-11-29), for `VmRSS` and for `VmRSS` less `LazyFree`
//! (memory the job freed with `MADV_FREE`, which the kernel takes back when it needs it: see
//! `engine/src/memory.rs`). The two bound what the job holds: a lazily freed page the allocator
//! hands out again stays counted in `LazyFree` until the kernel's reclaim next looks at it,
//! so `VmRSS` counts memory the kernel could take and the difference misses memory in use.
//! `ARGUS_SOAK_HANDOFFS`
//! (default 9000) paces each generator (hand-offs per second; about 250k events/s in all on
//! the 2-core development machine). `ARGUS_SOAK_BIN` soaks another `argus` binary (to compare
//! builds, e.g. allocators, with the same harness). With `RUST_LOG=info` the job's own log
//! lines (retention cuts, live graphs given up or seeded anew, snapshots written, with
//! times) are printed between its status lines; `ARGUS_SOAK_LOG=FILE` keeps every line the
//! job wrote (e.g. its debug lines) in `FILE`.
//!
//! Live `--follow`: an `argus debug DIR --follow --comm argus-hang-main --json` runs beside
//! the job, and every `ARGUS_SOAK_HANG_EVERY` seconds (default 60) the `chain` hang workload
//! hangs its main thread for 4 s; the bench prints the delay from the moment each hang became
//! detectable (its start + the 2 s threshold, on the trace clock, which is CLOCK_MONOTONIC) to
//! the follower's `new_hang` line (target: within 1 s, from the live job) and to its first
//! line with a diagnosis (the same line, or a later `diagnosed` when the live graph lagged).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `kB` figure of a `KEY:` line of `/proc/PID/FILE` (0 when absent).
fn proc_kib(pid: u32, file: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Of the resident memory, what the allocator has given back with `MADV_FREE` and the
/// kernel has not taken yet (`LazyFree` in `smaps_rollup`): it still counts in `VmRSS`, but
/// the kernel reclaims it without I/O whenever memory is short. (A page handed out and
/// written again stays counted until the kernel's reclaim looks at it: an upper bound.)
fn lazy_free_kib(pid: u32) -> u64 {
    proc_kib(pid, "smaps_rollup", "LazyFree")
}

fn rss_kib(pid: u32) -> u64 {
    proc_kib(pid, "status", "VmRSS")
}

/// Paces a loop at `per_sec` iterations per second (sleeping 1 ms when ahead).
struct Pace {
    start: Instant,
    per_sec: f64,
}

impl Pace {
    fn wait(&self, done: u64) {
        while done as f64 > self.per_sec * self.start.elapsed().as_secs_f64() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The load: each kind in its own threads until `stop`, each paced at `rate` hand-offs/s.
fn load(stop: Arc<AtomicBool>, rate: f64) -> Vec<std::thread::JoinHandle<u64>> {
    let pace = move || Pace {
        start: Instant::now(),
        per_sec: rate,
    };
    let mut handles = Vec::new();
    // Pipe ping-pong: one byte back and forth over two pipes.
    let (mut a_rx, mut a_tx) = os_pipe();
    let (mut b_rx, mut b_tx) = os_pipe();
    let s = stop.clone();
    handles.push(std::thread::spawn(move || {
        let mut n = 0u64;
        let mut buf = [0u8; 1];
        let p = pace();
        while !s.load(Ordering::Relaxed) {
            p.wait(n);
            if a_tx.write_all(b"x").is_err() || b_rx.read_exact(&mut buf).is_err() {
                break;
            }
            n += 1;
        }
        drop(a_tx);
        n
    }));
    handles.push(std::thread::spawn(move || {
        let mut buf = [0u8; 1];
        while a_rx.read_exact(&mut buf).is_ok() {
            if b_tx.write_all(b"y").is_err() {
                break;
            }
        }
        0
    }));
    // Futex hand-offs: a token passed between two threads through a mutex and condvar.
    let pair = Arc::new((Mutex::new(0u64), Condvar::new()));
    for me in 0..2u64 {
        let pair = pair.clone();
        let s = stop.clone();
        handles.push(std::thread::spawn(move || {
            let (m, cv) = &*pair;
            let mut n = 0;
            let p = pace();
            loop {
                p.wait(n);
                let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
                while *g % 2 != me && !s.load(Ordering::Relaxed) {
                    g = cv
                        .wait_timeout(g, Duration::from_millis(50))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if s.load(Ordering::Relaxed) {
                    cv.notify_all();
                    return n;
                }
                *g += 1;
                n += 1;
                cv.notify_all();
            }
        }));
    }
    // Timers: short sleeps.
    let s = stop;
    handles.push(std::thread::spawn(move || {
        let mut n = 0;
        while !s.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_micros(200));
            n += 1;
        }
        n
    }));
    handles
}

fn os_pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into the array we own.
    let r = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(r, 0, "pipe");
    use std::os::fd::FromRawFd;
    // SAFETY: fresh descriptors owned by nobody else.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

/// Resident memory rises and falls with the retention cuts (between `--retain` and a second
/// more held) and with the snapshot writers, so single samples say little; this prints, for each
/// full `retain` cycle after `steady_after`, the peak and mean RSS, the last cycle against
/// the first, and the least-squares slope over the whole steady part and over its second
/// half.
fn flatness(what: &str, samples: &[(f64, u64)], steady_after: f64, cycle: f64) {
    let steady: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(t, _)| *t >= steady_after)
        .map(|&(t, k)| (t, k as f64 / 1024.0))
        .collect();
    let Some(&(t_end, _)) = steady.last() else {
        println!("soak: no {what} samples after {steady_after:.0} s");
        return;
    };
    let cycles = ((t_end - steady_after) / cycle).floor() as usize;
    let mut stats = Vec::new();
    for c in 0..cycles {
        let (lo, hi) = (
            steady_after + c as f64 * cycle,
            steady_after + (c + 1) as f64 * cycle,
        );
        let v: Vec<f64> = steady
            .iter()
            .filter(|(t, _)| *t >= lo && *t < hi)
            .map(|&(_, m)| m)
            .collect();
        if v.is_empty() {
            continue;
        }
        let peak = v.iter().copied().fold(0.0, f64::max);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        stats.push((lo, peak, mean));
    }
    let line: Vec<String> = stats
        .iter()
        .map(|(t, p, m)| format!("{t:.0}s:{p:.0}/{m:.0}"))
        .collect();
    println!(
        "soak: {what} per {cycle:.0} s cycle after {steady_after:.0} s, peak/mean MiB: {}",
        line.join(" ")
    );
    if let (Some(first), Some(last)) = (stats.first(), stats.last()) {
        println!(
            "soak: {what} last cycle vs first steady cycle: peak {:.0} → {:.0} MiB ({:+.1}%), mean {:.0} → {:.0} MiB ({:+.1}%)",
            first.1,
            last.1,
            100.0 * (last.1 / first.1 - 1.0),
            first.2,
            last.2,
            100.0 * (last.2 / first.2 - 1.0)
        );
    }
    // Over the whole steady part, and over its second half: what still grows once the
    // job's caches and arrangements have reached their working size.
    let half = steady_after + (t_end - steady_after) / 2.0;
    for (part, from) in [("the steady part", steady_after), ("the second half", half)] {
        let points: Vec<(f64, f64)> = steady.iter().copied().filter(|p| p.0 >= from).collect();
        if let Some((slope, mean)) = trend(&points) {
            println!(
                "soak: {what} trend over {part} (from {from:.0} s): {slope:+.1} MiB/min ({:+.1}% of the mean {mean:.0} MiB per 10 min)",
                100.0 * slope * 10.0 / mean
            );
        }
    }
}

/// The least-squares slope of `(seconds, MiB)` points in MiB per minute, and their mean;
/// `None` for fewer than two distinct times.
fn trend(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let (mt, mm) = (
        points.iter().map(|s| s.0).sum::<f64>() / n,
        points.iter().map(|s| s.1).sum::<f64>() / n,
    );
    let cov: f64 = points.iter().map(|s| (s.0 - mt) * (s.1 - mm)).sum();
    let var: f64 = points.iter().map(|s| (s.0 - mt).powi(2)).sum();
    (var > 0.0).then(|| (cov / var * 60.0, mm))
}

/// Clock ticks per second of `/proc` CPU times.
fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// User + system CPU seconds in a `/proc/.../stat` line (fields 14 and 15).
fn stat_cpu(stat: &str) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_string();
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((comm, ticks as f64 / clk_tck()))
}

/// CPU seconds of process `pid` as a whole (threads that ended included) and per live
/// thread, keyed by thread id, with the thread's name.
fn process_cpu(pid: u32) -> (f64, HashMap<u64, (String, f64)>) {
    let total = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_cpu(&s))
        .map_or(0.0, |(_, c)| c);
    let mut threads = HashMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        if let Some(c) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| stat_cpu(&s))
        {
            threads.insert(tid, c);
        }
    }
    (total, threads)
}

/// Busy and total CPU seconds of the machine (`/proc/stat`; idle and iowait are not busy).
fn machine_cpu() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    ((total - idle) as f64 / clk_tck(), total as f64 / clk_tck())
}

/// Where the job's CPU went between two samples: per thread name (digits dropped, so the
/// per-CPU and per-worker threads add up), and the machine's busy share.
fn cpu_figures(
    who: &str,
    wall: f64,
    before: &(f64, HashMap<u64, (String, f64)>),
    after: &(f64, HashMap<u64, (String, f64)>),
    machine: ((f64, f64), (f64, f64)),
) {
    let mut by_name: BTreeMap<String, f64> = BTreeMap::new();
    for (tid, (name, cpu)) in &after.1 {
        let was = before.1.get(tid).map_or(0.0, |b| b.1);
        let key: String = name.trim_end_matches(|c: char| c.is_ascii_digit()).into();
        *by_name.entry(key).or_default() += cpu - was;
    }
    let mut v: Vec<(String, f64)> = by_name.into_iter().filter(|x| x.1 > 0.05).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    let parts: Vec<String> = v
        .iter()
        .map(|(n, c)| format!("{n} {:.2}", c / wall))
        .collect();
    let ((busy0, total0), (busy1, total1)) = machine;
    println!(
        "soak: {who} CPU {:.2} CPUs over {wall:.0} s (by thread: {}); machine busy {:.0}%",
        (after.0 - before.0) / wall,
        parts.join(", "),
        100.0 * (busy1 - busy0) / (total1 - total0).max(1e-9)
    );
}

fn latest(job: &Path) -> Option<PathBuf> {
    let p = std::fs::canonicalize(job.join("latest")).ok()?;
    p.join("manifest.json").is_file().then_some(p)
}

fn main() {
    if let Some(why) = argus_ingest::linux::cannot_trace() {
        eprintln!("SKIP soak: {why}");
        return;
    }
    let secs = env_f64("ARGUS_SOAK_SECS", 600.0);
    let period = env_f64("ARGUS_SOAK_PERIOD", 10.0);
    let retain_secs = env_f64("ARGUS_SOAK_RETAIN", 60.0);
    let retain = format!("{retain_secs}s");
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("job");
    println!("soak: argus start for {secs:.0} s, snapshots every {period} s, --retain {retain}");

    // ARGUS_SOAK_BIN: another `argus` binary to soak (to compare builds in one session).
    let bin = std::env::var_os("ARGUS_SOAK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_argus")));
    println!("soak: {}", bin.display());
    let mut child = Command::new(&bin)
        .args(["start", "-o"])
        .arg(&job)
        .args(["--snapshot-every", &period.to_string(), "--retain", &retain])
        .args([
            "--status-every",
            "5",
            "--watch-pid",
            "1",
            "--buffer-kb",
            "16384",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("argus start runs");
    let pid = child.id();
    let stderr = child.stderr.take().expect("stderr");
    let marker_path: Arc<Mutex<Option<PathBuf>>> = Arc::new(Mutex::new(None));
    let rates: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::new()));
    let lines: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    {
        let (marker_path, rates, lines) = (marker_path.clone(), rates.clone(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(m) = line.split("markers: ").nth(1) {
                    *marker_path.lock().expect("lock") = Some(PathBuf::from(m.trim()));
                }
                if let Some(r) = line
                    .strip_prefix("argus start: ")
                    .and_then(|l| l.split(" events/s").next())
                    .and_then(|v| v.parse::<f64>().ok())
                {
                    rates.lock().expect("lock").push(r);
                }
                lines.lock().expect("lock").push(line);
            }
        });
    }
    let started = Instant::now();
    while latest(&job).is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no first snapshot"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The follower: its new_hang lines, with when they arrived.
    let mut follower = Command::new(&bin)
        .arg("debug")
        .arg(&job)
        .args(["--follow", "--comm", "argus-hang-main", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("argus debug --follow runs");
    let follow_out = follower.stdout.take().expect("stdout");
    let reported: Arc<Mutex<Vec<(u64, serde_json::Value)>>> = Arc::new(Mutex::new(Vec::new()));
    {
        let reported = reported.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(follow_out).lines().map_while(Result::ok) {
                let at = mono_ns();
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    reported.lock().expect("lock").push((at, v));
                }
            }
        });
    }
    let hang_every = Duration::from_secs_f64(env_f64("ARGUS_SOAK_HANG_EVERY", 60.0));
    let mut next_hang = Instant::now() + hang_every / 2;
    let mut hangs: Vec<std::process::Child> = Vec::new();
    let stop = Arc::new(AtomicBool::new(false));
    let workers = load(stop.clone(), env_f64("ARGUS_SOAK_HANDOFFS", 9000.0));
    // Let the load and the job settle for one period, then take the starting RSS.
    std::thread::sleep(Duration::from_secs_f64(period));
    let rss_start = rss_kib(pid);
    let mut rss_max = rss_start;
    let marker = marker_path
        .lock()
        .expect("lock")
        .clone()
        .expect("argus start printed its marker path");

    // Markers every half period; a snapshot watcher finds them.
    let written: Arc<Mutex<Vec<(String, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let delays: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::new()));
    let watching = Arc::new(AtomicBool::new(true));
    let seen_snapshots = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (job, written, delays, watching, seen_snapshots) = (
            job.clone(),
            written.clone(),
            delays.clone(),
            watching.clone(),
            seen_snapshots.clone(),
        );
        std::thread::Builder::new()
            .name("soak-watch".into())
            .spawn(move || {
                let mut last: Option<PathBuf> = None;
                while watching.load(Ordering::Relaxed) {
                    if let Some(snap) = latest(&job) {
                        if Some(&snap) != last.as_ref() {
                            let found_at = mono_ns();
                            last = Some(snap.clone());
                            seen_snapshots.fetch_add(1, Ordering::Relaxed);
                            let Ok(events) = argus_sinks::read_events(&snap) else {
                                continue;
                            };
                            let mut texts = Vec::new();
                            for ev in events.flatten() {
                                if let argus_schema::EventKind::Marker { text } = ev.kind {
                                    if text.starts_with("argus-soak-") {
                                        texts.push(text.trim().to_string());
                                    }
                                }
                            }
                            let mut w = written.lock().expect("lock");
                            w.retain(|(t, at)| {
                                if texts.iter().any(|x| x == t) {
                                    delays
                                        .lock()
                                        .expect("lock")
                                        .push(found_at.saturating_sub(*at) as f64 / 1e9);
                                    false
                                } else {
                                    true
                                }
                            });
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .expect("spawn")
    };
    let soak_start = Instant::now();
    let soak_start_ns = mono_ns();
    let me = std::process::id();
    let cpu_start = (process_cpu(pid), machine_cpu(), process_cpu(me));
    // RSS every second (see `flatness`).
    let samples: Arc<Mutex<Vec<(f64, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let sampling = Arc::new(AtomicBool::new(true));
    // Thread CPU times every second too: threads that end during the run (snapshot
    // writers, a live graph's seeding) would be missing from a final sample.
    let thread_times: Arc<Mutex<HashMap<u64, (String, f64)>>> =
        Arc::new(Mutex::new(HashMap::new()));
    // RSS less what the allocator freed lazily (see `lazy_free_kib`): a lower bound of the
    // memory the job holds.
    let held: Arc<Mutex<Vec<(f64, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (samples, held, sampling, thread_times) = (
            samples.clone(),
            held.clone(),
            sampling.clone(),
            thread_times.clone(),
        );
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                let t = soak_start.elapsed().as_secs_f64();
                let rss = rss_kib(pid);
                samples.lock().expect("lock").push((t, rss));
                held.lock()
                    .expect("lock")
                    .push((t, rss.saturating_sub(lazy_free_kib(pid))));
                thread_times
                    .lock()
                    .expect("lock")
                    .extend(process_cpu(pid).1);
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let mut n = 0u64;
    // Memory is steady once two retention windows have passed (see `argus start`'s docs).
    let steady_after = Duration::from_secs_f64(2.0 * retain_secs + period);
    let mut rss_steady: Option<(f64, u64)> = None;
    while soak_start.elapsed() < Duration::from_secs_f64(secs) {
        if rss_steady.is_none() && soak_start.elapsed() >= steady_after {
            rss_steady = Some((soak_start.elapsed().as_secs_f64(), rss_kib(pid)));
        }
        let text = format!("argus-soak-{n}");
        let at = mono_ns();
        if std::fs::write(&marker, &text).is_ok() {
            written.lock().expect("lock").push((text, at));
        }
        n += 1;
        let pause = Instant::now() + Duration::from_secs_f64(period / 2.0);
        while Instant::now() < pause {
            if Instant::now() >= next_hang {
                next_hang += hang_every;
                hangs.push(
                    Command::new(&bin)
                        .args(["workload", "chain", "--secs", "4"])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .expect("the chain workload runs"),
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        rss_max = rss_max.max(rss_kib(pid));
    }
    let rss_end = rss_kib(pid);
    let mut cpu_end = (process_cpu(pid), machine_cpu(), process_cpu(me));
    let cpu_wall = soak_start.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    for (tid, c) in thread_times.lock().expect("lock").drain() {
        cpu_end.0 .1.entry(tid).or_insert(c);
    }
    stop.store(true, Ordering::Relaxed);
    let round_trips: u64 = workers.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    // Two more periods for the last markers to show.
    std::thread::sleep(Duration::from_secs_f64(2.5 * period));
    watching.store(false, Ordering::Relaxed);
    let _ = watcher.join();
    let hangs_started = hangs.len();
    for mut h in hangs.drain(..) {
        let _ = h.wait();
    }
    let _ = follower.kill();
    let _ = follower.wait();
    // SAFETY: kill has no memory-safety preconditions; the pid is our child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = child.wait().expect("argus start exits");
    std::thread::sleep(Duration::from_millis(200));

    let lines = lines.lock().expect("lock").clone();
    if let Some(path) = std::env::var_os("ARGUS_SOAK_LOG") {
        // Every line the job wrote (with `RUST_LOG=debug`, its per-epoch lines too).
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        if let Err(e) = std::fs::write(&path, text) {
            println!("soak: writing {}: {e}", Path::new(&path).display());
        }
    }
    let last_line = lines
        .iter()
        .rev()
        .find(|l| l.contains("stopped"))
        .cloned()
        .unwrap_or_else(|| "(no final line)".into());
    let tap_warning = lines.iter().find(|l| l.contains("missed the live graph"));
    let rates = rates.lock().expect("lock").clone();
    let steady: Vec<f64> = rates.iter().skip(2).copied().collect();
    let mean_rate = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
    let min_rate = steady.iter().copied().fold(f64::INFINITY, f64::min);
    follow_figures(
        &reported.lock().expect("lock"),
        hangs_started,
        soak_start_ns,
        &lines,
    );
    let mut d = delays.lock().expect("lock").clone();
    d.sort_by(|a, b| a.total_cmp(b));
    let missing = written.lock().expect("lock").len();
    // The status lines, and the job's own log lines (`RUST_LOG=info`: retention cuts, live
    // graphs given up) to put the stalls beside what the job did.
    for l in lines
        .iter()
        .filter(|l| l.contains("events/s, lag") || l.contains("INFO") || l.contains("WARN"))
    {
        println!("  {l}");
    }
    println!("soak: exit {status}; {}", last_line);
    if let Some(w) = tap_warning {
        println!("soak: {w}");
    }
    println!(
        "soak: load {round_trips} hand-offs; job saw {mean_rate:.0} events/s on average (min {min_rate:.0}) over {} status lines",
        steady.len()
    );
    println!(
        "soak: RSS start {:.1} MiB, max {:.1} MiB, end {:.1} MiB (end/start {:.2})",
        rss_start as f64 / 1024.0,
        rss_max as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        rss_end as f64 / rss_start.max(1) as f64
    );
    match rss_steady {
        Some((at, kib)) => println!(
            "soak: RSS once steady (t = {at:.0} s, after 2 × retain): {:.1} MiB; end/steady {:.2}",
            kib as f64 / 1024.0,
            rss_end as f64 / kib.max(1) as f64
        ),
        None => println!("soak: the run was shorter than 2 × retain + one period: no steady RSS"),
    }
    cpu_figures(
        "job",
        cpu_wall,
        &cpu_start.0,
        &cpu_end.0,
        (cpu_start.1, cpu_end.1),
    );
    cpu_figures(
        "bench",
        cpu_wall,
        &cpu_start.2,
        &cpu_end.2,
        (cpu_start.1, cpu_end.1),
    );
    let samples = samples.lock().expect("lock").clone();
    flatness("RSS", &samples, steady_after.as_secs_f64(), retain_secs);
    let held = held.lock().expect("lock").clone();
    flatness(
        "RSS less LazyFree",
        &held,
        steady_after.as_secs_f64(),
        retain_secs,
    );
    if d.is_empty() {
        println!("soak: no marker reached a snapshot ({missing} written)");
    } else {
        println!(
            "soak: marker → snapshot delay over {} markers: median {:.2} s, max {:.2} s = {:.2} periods (target ≤ 2); {missing} not seen; {} snapshots",
            d.len(),
            d[d.len() / 2],
            d[d.len() - 1],
            d[d.len() - 1] / period,
            seen_snapshots.load(Ordering::Relaxed)
        );
    }
}

/// How many hangs the soak starts (the first half a spacing in, then one per spacing).
/// What `--follow` said of one hang: when it became detectable, when it was reported and
/// diagnosed, whether from the live job, and in how many `new_hang` lines.
type FollowedHang = (u64, Option<u64>, Option<u64>, bool, usize);

/// The live `--follow` figures, per hang (spinning segment): the delay from detectable
/// (start + 2 s threshold) to its first `new_hang` line, and to its first line with a
/// diagnosis (a `new_hang` with a report, or `diagnosed`).
///
/// With the job's `epoch sent` and `epoch done` lines (`RUST_LOG=info,argus::epochs=debug`),
/// each hang's delay is split: the tick whose watermark first passed its detectable time
/// (release: the lag, the read frontier and the tick), that epoch handed to the dataflow,
/// done by it (its spins published), and the follower's line.
fn follow_figures(lines: &[(u64, serde_json::Value)], started: usize, t0: u64, job: &[String]) {
    const THRESHOLD_NS: u64 = 2_000_000_000;
    let mut by_hang: BTreeMap<String, FollowedHang> = BTreeMap::new();
    for (at, v) in lines {
        let (Some(start), segment) = (
            v["hang"]["start_ns"].as_u64(),
            v["hang"]["segment"].to_string(),
        ) else {
            continue;
        };
        let h = by_hang
            .entry(segment)
            .or_insert((start + THRESHOLD_NS, None, None, false, 0));
        if v["change"] == "new_hang" {
            h.4 += 1;
            h.1.get_or_insert(*at);
            h.3 |= v["source"] == "live";
        }
        if !v["report"].is_null() {
            h.2.get_or_insert(*at);
        }
    }
    let delays = |pick: &dyn Fn(&FollowedHang) -> Option<u64>| {
        let mut d: Vec<f64> = by_hang
            .values()
            .filter_map(|h| pick(h).map(|at| at.saturating_sub(h.0) as f64 / 1e9))
            .collect();
        d.sort_by(|a, b| a.total_cmp(b));
        d
    };
    let secs = |at: Option<u64>, from: u64| {
        at.map_or("-".to_string(), |a| {
            format!("{:.2}", a.saturating_sub(from) as f64 / 1e9)
        })
    };
    for (at, v) in lines {
        println!(
            "soak: follow at {:.2} s: {} from {} {} (hang {}, diagnosed {})",
            at.saturating_sub(t0) as f64 / 1e9,
            v["change"].as_str().unwrap_or_default(),
            v["source"].as_str().unwrap_or_default(),
            if v["source"] == "live" {
                v["epoch"].to_string()
            } else {
                v["snapshot"].to_string()
            },
            v["hang"]["segment"],
            v["hang"]["diagnosed"],
        );
    }
    let sent = epoch_lines(job, "epoch sent", "sent_ns");
    let ticks = epoch_lines(job, "epoch sent", "tick_ns");
    let done = epoch_lines(job, "epoch done", "done_ns");
    // The first epoch whose watermark reached `at`: when it happened.
    let past = |times: &[(u64, u64)], at: u64| {
        times
            .iter()
            .find(|&&(w, _)| w >= at)
            .map(|&(_, t)| secs(Some(t), at))
            .unwrap_or_else(|| "-".into())
    };
    for (segment, h) in &by_hang {
        println!(
            "soak: hang {segment} detectable at {:.1} s: reported after {} s, diagnosed after {} s, {} new_hang line(s); watermark past it at the tick of +{} s, sent +{} s, done +{} s",
            h.0.saturating_sub(t0) as f64 / 1e9,
            secs(h.1, h.0),
            secs(h.2, h.0),
            h.4,
            past(&ticks, h.0),
            past(&sent, h.0),
            past(&done, h.0),
        );
    }
    let reported = delays(&|h| h.1);
    let diagnosed = delays(&|h| h.2);
    let live = by_hang.values().filter(|h| h.3).count();
    let repeated = by_hang.values().filter(|h| h.4 > 1).count();
    let median = |d: &[f64]| d.get(d.len() / 2).copied().unwrap_or(f64::NAN);
    let max = |d: &[f64]| d.last().copied().unwrap_or(f64::NAN);
    println!(
        "soak: --follow reported {} hangs of the {started} started ({live} from the live job, {repeated} reported more than once); detectable → reported: median {:.2} s, max {:.2} s (target ≤ 1 s); → diagnosed ({}): median {:.2} s, max {:.2} s",
        reported.len(),
        median(&reported),
        max(&reported),
        diagnosed.len(),
        median(&diagnosed),
        max(&diagnosed),
    );
}

/// `(watermark, time)` of the job's debug lines with `message` (`argus::epochs`), `time`
/// being the field `field`, in the order they came.
fn epoch_lines(job: &[String], message: &str, field: &str) -> Vec<(u64, u64)> {
    let value = |l: &str, key: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse::<u64>().ok())
    };
    job.iter()
        .filter(|l| l.contains(message))
        .filter_map(|l| Some((value(l, "watermark")?, value(l, field)?)))
        .collect()
}
