//! Overhead of the always-on collector, against no tracing and against `perf record` of the
//! same tracepoints (issue 3).
//!
//! ```text
//! cargo bench --bench overhead                    # compile loop + pipe ping-pong: none / record / start / perf / kernel
//! ARGUS_BENCH_ROUNDS=7 cargo bench --bench overhead
//! ARGUS_BENCH_EVENTS=full cargo bench --bench overhead   # another --events set
//! ARGUS_BENCH_SUSTAINED=60 cargo bench --bench overhead  # sustained rate for 60 s instead
//! ARGUS_BENCH_STACKS=1 cargo bench --bench overhead  # call-stack modes instead (below)
//! ```
//!
//! **Stacks** (`ARGUS_BENCH_STACKS=1`): on a syscall-bound loop (`dd bs=1 count=N`,
//! `ARGUS_BENCH_DD`, default 400000: 800k read/write syscalls, no blocking) and on the
//! compile loop, interleaved: none / `argus record` / `argus record --stacks` (the default:
//! blocking and waking stacks) / `--stacks read,write` / `perf record -g` and `perf record
//! --call-graph dwarf,1024`, both on `raw_syscalls:sys_enter` filtered to read and write,
//! as `--stacks read,write` samples. Prints wall-time medians, ratios to none and to
//! perf dwarf, and samples lost (argus: the summary line; perf: `perf report --stats`).
//!
//! Workloads:
//! - **compile**: a loop of `gcc -O1 -c` over generated C files (forks, execs, file I/O).
//! - **pingpong**: two processes bouncing one byte over two pipes (syscall- and
//!   context-switch-bound): the worst case for per-event cost.
//!
//! Each round runs every workload under each mode, interleaved (none, argus, perf, none,
//! ...), so drift in the machine's speed hits every mode alike; the medians and their ratios
//! to "none" are printed, for wall time and for CPU time (user + system of the workload's
//! processes, from `getrusage`; on a shared machine wall time also measures the neighbours,
//! CPU time much less so). "+tracer" adds the tracer process's own CPU time. Tracers are system-wide, as `argus record` is: `perf record -a` with
//! one `-e` per tracepoint of the argus set (`ftrace/print` has no perf tracepoint).
//! "kernel" enables the same tracepoints in a tracefs instance nobody reads: the kernel's
//! cost of writing the events, a floor under every tracer's overhead.
//!
//! **Sustained** (`ARGUS_BENCH_SUSTAINED=SECS`): `argus record` with `--buffer-kb`
//! (`ARGUS_BENCH_BUFFER_KB`, default 65536) while `dd bs=1` storms run on every CPU but one
//! for SECS seconds; prints events/s (counted from the pages written) and lost events.
//!
//! **Saturation** (`ARGUS_BENCH_SATURATE=SECS`, issue 14; 60 for the issue's figures): the
//! load of `../shared/loads/saturate.c` (pipe ping-pong between two processes, a mutex and
//! condition-variable hand-off between two threads, a thread in 200 µs sleeps: both CPUs
//! busy with syscalls) for SECS seconds untraced, under `argus record`, under `argus start`
//! and under `perf record -a` of the same tracepoints, and with those tracepoints enabled in a
//! tracefs instance nobody reads ("kernel only": the kernel's cost of writing the events, the
//! ceiling of any tracer's speed), interleaved for `ARGUS_BENCH_ROUNDS` rounds (default 1).
//! Prints per mode: the load's round trips and their ratio to untraced (its speed), events
//! recorded per second, events lost (and the share of all), and the tracer's CPU time (user +
//! system, all its threads).
//!
//! The tracers run in each of the settings users run them in (issue 42): the load's own
//! session (`same session`), a session of their own (`own session`: with
//! `sched_autogroup`, a scheduling group of their own, as from another terminal), and a new
//! cgroup v1 `cpu` group with default weight (`own cgroup`, as a service or a container).
//! Untraced and kernel-only runs do not depend on the setting and run once per round.
//!
//! **Idle cost** (`ARGUS_BENCH_IDLE_COST=SECS`, issue 42; 60 for the issue's figures): on
//! the machine as it is (nothing started by the bench), `argus record`, `argus start` and
//! `perf record -a` of the same tracepoints, one after the other, each in a session of its
//! own for SECS seconds after `ARGUS_BENCH_IDLE_WARMUP` seconds (5 by default; 60 measures
//! an always-on job's steady state, past its first minute): its CPU time (all threads, `/proc/PID/stat`) as a share of one CPU,
//! and its resident memory at a quarter of the run and at the end (flat is the goal). Run it
//! with nothing else going on; the events/s of the machine are printed beside.
//! `ARGUS_BENCH_ROUNDS` rounds (default 3), the tracers interleaved; the median CPU share
//! of each is printed last.
//!
//! **Idle**: only the ping-pong runs hold PM QoS CPU latency 0 (polling idle), so that
//! wake-up latency from a halted CPU, which a tracer's busy reader hides, does not decide the
//! ping-pong ratios (see `hold_polling_idle`; `ARGUS_BENCH_IDLE=native` turns this off). Every
//! other run keeps the machine's own idle policy, as a user's machine does.
//!
//! **Sessions**: every tracer (`argus record`, `argus start`, `perf record`) runs in a session
//! of its own, as started from another terminal or as a service; on a machine with
//! `sched_autogroup` that is also a scheduling group of its own.
//!
//! Needs root, tracefs, gcc and perf; without them it prints `SKIP` and exits 0.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ARGUS: &str = env!("CARGO_BIN_EXE_argus");

fn main() {
    if std::env::var("ARGUS_BENCH_CHILD").as_deref() == Ok("pingpong") {
        pingpong_child();
        return;
    }
    if let Some(why) = cannot_run() {
        println!("SKIP overhead benchmark: {why}");
        return;
    }
    if let Ok(secs) = std::env::var("ARGUS_BENCH_SATURATE") {
        let secs: u64 = secs
            .parse()
            .expect("ARGUS_BENCH_SATURATE is a number of seconds");
        // The machine's own idle policy: a saturated machine does not idle, and a user's
        // machine does not hold polling idle for the tracer's sake.
        println!("idle: the machine's own idle policy");
        saturation(secs);
        return;
    }
    if let Ok(secs) = std::env::var("ARGUS_BENCH_IDLE_COST") {
        let secs: u64 = secs
            .parse()
            .expect("ARGUS_BENCH_IDLE_COST is a number of seconds");
        println!("idle: the machine's own idle policy");
        idle_cost(secs);
        return;
    }
    if let Ok(secs) = std::env::var("ARGUS_BENCH_SUSTAINED") {
        let secs: u64 = secs
            .parse()
            .expect("ARGUS_BENCH_SUSTAINED is a number of seconds");
        sustained(secs);
        return;
    }
    if std::env::var_os("ARGUS_BENCH_STACKS").is_some() {
        stacks_bench();
        return;
    }
    let rounds: usize = env_or("ARGUS_BENCH_ROUNDS", 5);
    let events = std::env::var("ARGUS_BENCH_EVENTS").unwrap_or_else(|_| "default".into());
    let set = argus_ingest::linux::event_set(&events).expect("a valid --events set");
    let tmp = tempfile::tempdir().expect("tempdir");
    let sources = write_sources(tmp.path(), env_or("ARGUS_BENCH_FILES", 24));
    let modes = [
        Mode::None,
        Mode::Argus,
        Mode::Start,
        Mode::Perf,
        Mode::KernelOnly,
    ];
    let workloads: [(&str, &dyn Fn() -> Duration); 2] = [
        ("compile", &|| compile_loop(&sources)),
        ("pingpong", &|| {
            pingpong(env_or("ARGUS_BENCH_ROUNDTRIPS", 100_000))
        }),
    ];
    println!(
        "overhead: {rounds} rounds, events {events:?} ({} tracepoints), {} cpus",
        set.len(),
        cpus()
    );
    for (name, work) in workloads {
        // Polling idle only for the ping-pong (every mode alike), whose ratios wake-up
        // latency from a halted CPU would otherwise decide; see `hold_polling_idle`.
        let _idle = (name == "pingpong").then(hold_polling_idle).flatten();
        work(); // warm caches (gcc, page cache)
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut tracer_cpu: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut lost = vec![0u64; modes.len()];
        for round in 0..rounds {
            for (i, mode) in modes.iter().enumerate() {
                let dir = tmp.path().join(format!("{name}-{round}-{i}"));
                let tracer = mode.start(&dir, &events, &set);
                let before = cpu_secs();
                let t = work();
                let during = cpu_secs() - before;
                let before_stop = cpu_secs();
                lost[i] += tracer.stop();
                times[i].push(t.as_secs_f64());
                cpu[i].push(during);
                tracer_cpu[i].push(cpu_secs() - before_stop);
            }
        }
        let base = median(&times[0]);
        let cpu_base = median(&cpu[0]);
        for (i, mode) in modes.iter().enumerate() {
            let m = median(&times[i]);
            let c = median(&cpu[i]);
            let tc = median(&tracer_cpu[i]);
            println!(
                "  {name:9} {:6}: wall {:7.3} s ratio {:.3} (min {:.3} max {:.3}) | cpu {:6.3} s ratio {:.3} | +tracer {:6.3} s ratio {:.3} | lost {}",
                mode.name(),
                m,
                m / base,
                times[i].iter().cloned().fold(f64::INFINITY, f64::min),
                times[i].iter().cloned().fold(0.0, f64::max),
                c,
                c / cpu_base,
                c + tc,
                (c + tc) / cpu_base,
                lost[i]
            );
        }
        let pct = |i: usize| {
            (
                (median(&times[i]) / base - 1.0) * 100.0,
                (median(&cpu[i]) / cpu_base - 1.0) * 100.0,
            )
        };
        let ((a, ac), (st, sc), (p, pc), (k, kc)) = (pct(1), pct(2), pct(3), pct(4));
        println!(
            "  {name:9} overhead: argus record wall {a:+.1}% cpu {ac:+.1}%; argus start wall {st:+.1}% cpu {sc:+.1}%; perf wall {p:+.1}% cpu {pc:+.1}%; kernel only (the floor) wall {k:+.1}% cpu {kc:+.1}%",
        );
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cannot_run() -> Option<String> {
    if let Some(why) = argus_ingest::linux::cannot_trace() {
        return Some(why);
    }
    for tool in ["gcc", "perf", "dd"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// User + system CPU seconds of this process and its reaped children so far.
fn cpu_secs() -> f64 {
    let get = |who| {
        // SAFETY: rusage is plain old data; all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage.
        unsafe { libc::getrusage(who, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    get(libc::RUSAGE_SELF) + get(libc::RUSAGE_CHILDREN)
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[derive(Clone, Copy)]
enum Mode {
    None,
    Argus,
    /// `argus start` (recorder, dataflow, snapshots every 10 s, the query socket).
    Start,
    Perf,
    /// The tracepoints enabled in an instance nobody reads: the kernel's share of any
    /// tracer's overhead, which no tracer can go below.
    KernelOnly,
}

/// A running tracer.
struct Tracer {
    child: Option<Child>,
    dir: PathBuf,
    mode: Mode,
    instance: Option<KernelOnly>,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Argus => "argus",
            Mode::Start => "start",
            Mode::Perf => "perf",
            Mode::KernelOnly => "kernel",
        }
    }

    fn start(self, dir: &Path, events: &str, set: &[String]) -> Tracer {
        let instance = matches!(self, Mode::KernelOnly).then(|| KernelOnly::enable(set));
        let child = match self {
            Mode::None | Mode::KernelOnly => None,
            Mode::Argus => {
                let mut cmd = Command::new(ARGUS);
                cmd.args(["-q", "record", "-o"])
                    .arg(dir)
                    .args(["--events", events])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // As a user runs it: from another terminal, a session of its own.
                argus_testkit::elsewhere::own_session(&mut cmd, None);
                let child = cmd.spawn().expect("argus record starts");
                wait_for(|| dir.join("proc.json").exists(), "argus record");
                Some(child)
            }
            Mode::Start => {
                let mut cmd = Command::new(ARGUS);
                cmd.args(["-q", "start", "-o"])
                    .arg(dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                argus_testkit::elsewhere::own_session(&mut cmd, None);
                let child = cmd.spawn().expect("argus start starts");
                wait_for(|| dir.join("argus.sock").exists(), "argus start");
                Some(child)
            }
            Mode::Perf => {
                std::fs::create_dir_all(dir).expect("perf dir");
                let mut cmd = Command::new("perf");
                cmd.args(["record", "-a", "-q", "-o"])
                    .arg(dir.join("perf.data"));
                for e in set.iter().filter(|e| e.as_str() != "ftrace/print") {
                    cmd.args(["-e", &e.replacen('/', ":", 1)]);
                }
                cmd.stdout(Stdio::null()).stderr(Stdio::piped());
                argus_testkit::elsewhere::own_session(&mut cmd, None);
                let child = cmd.spawn().expect("perf record starts");
                // perf has no ready signal: it has opened its events once perf.data has a
                // header; give it a little longer to mmap every CPU's buffer.
                wait_for(
                    || std::fs::metadata(dir.join("perf.data")).is_ok_and(|m| m.len() > 0),
                    "perf record",
                );
                std::thread::sleep(Duration::from_millis(300));
                Some(child)
            }
        };
        Tracer {
            child,
            dir: dir.to_path_buf(),
            mode: self,
            instance,
        }
    }
}

impl Tracer {
    /// Stops the tracer (SIGINT, as Ctrl-C) and returns the events it lost.
    fn stop(mut self) -> u64 {
        if let Some(instance) = self.instance.take() {
            return instance.finish().1;
        }
        let Some(mut child) = self.child.take() else {
            return 0;
        };
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let status = child.wait().expect("tracer exits");
        let lost = match self.mode {
            Mode::Argus | Mode::Start => {
                let trace = if matches!(self.mode, Mode::Start) {
                    self.dir.join("trace")
                } else {
                    self.dir.clone()
                };
                let meta: serde_json::Value = serde_json::from_slice(
                    &std::fs::read(trace.join("meta.json")).expect("meta.json"),
                )
                .expect("meta.json parses");
                meta["lost"]
                    .as_object()
                    .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum())
            }
            // "[ perf record: ... ]" / "Processed N events and lost M chunks!"
            Mode::Perf => stderr
                .split("lost ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            Mode::None | Mode::KernelOnly => 0,
        };
        assert!(
            status.success() || status.code() == Some(130) || matches!(self.mode, Mode::Perf),
            "{} exited with {status}: {stderr}",
            self.mode.name()
        );
        let _ = std::fs::remove_dir_all(&self.dir);
        lost
    }
}

fn wait_for(ready: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// C sources: a few hundred lines each, with loops and calls so `-O1` has work to do.
fn write_sources(dir: &Path, n: usize) -> Vec<PathBuf> {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("src dir");
    (0..n)
        .map(|i| {
            let mut text = String::from("#include <stdio.h>\n#include <string.h>\n");
            for f in 0..60 {
                text.push_str(&format!(
                    "static int f{f}(const char *s, int n) {{ int h = {i}; \
                     for (int k = 0; k < n; k++) {{ h = h * 31 + s[k % 7] + {f}; \
                     if (h % 3 == 0) h ^= (int)strlen(s); }} return h; }}\n"
                ));
            }
            text.push_str("int unit_main(void) { int t = 0;\n");
            for f in 0..60 {
                text.push_str(&format!("  t += f{f}(\"argus{f}\", {});\n", 10 + f));
            }
            text.push_str("  printf(\"%d\\n\", t); return t; }\n");
            let path = src.join(format!("unit{i}.c"));
            std::fs::write(&path, text).expect("write source");
            path
        })
        .collect()
}

/// Compiles every source with `gcc -O1 -c`, one after the other.
fn compile_loop(sources: &[PathBuf]) -> Duration {
    let started = Instant::now();
    for s in sources {
        let status = Command::new("gcc")
            .args(["-O1", "-c"])
            .arg(s)
            .arg("-o")
            .arg(s.with_extension("o"))
            .status()
            .expect("gcc runs");
        assert!(status.success(), "gcc failed on {}", s.display());
    }
    started.elapsed()
}

/// `n` one-byte round trips with a child process over two pipes.
/// Asks the kernel for polling idle (PM QoS CPU latency 0 through `/dev/cpu_dma_latency`,
/// held while the returned file is open). On this VM (cpuidle `haltpoll`) a CPU that halts
/// takes tens of µs to wake, so an untraced ping-pong ran at 45 µs per round trip and one
/// under a tracer whose reader kept the CPUs busy ran 3× *faster* than untraced: the
/// comparison measured idle exits, not tracing. With polling idle a round trip takes ~9 µs
/// in every mode. `ARGUS_BENCH_IDLE=native` keeps the machine's own idle policy.
fn hold_polling_idle() -> Option<std::fs::File> {
    if std::env::var("ARGUS_BENCH_IDLE").as_deref() == Ok("native") {
        println!("idle: the machine's own idle policy (ARGUS_BENCH_IDLE=native)");
        return None;
    }
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")
        .and_then(|mut f| f.write_all(&0i32.to_ne_bytes()).map(|()| f));
    match held {
        Ok(f) => {
            println!("idle: polling (PM QoS CPU latency 0 held through /dev/cpu_dma_latency)");
            Some(f)
        }
        Err(e) => {
            println!("idle: the machine's own idle policy (/dev/cpu_dma_latency: {e})");
            None
        }
    }
}

fn pingpong(n: usize) -> Duration {
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .env("ARGUS_BENCH_CHILD", "pingpong")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("child starts");
    let mut to = child.stdin.take().expect("stdin");
    let mut from = child.stdout.take().expect("stdout");
    let mut byte = [0u8; 1];
    // One round trip before timing: the child is running.
    to.write_all(b"x").expect("write");
    from.read_exact(&mut byte).expect("read");
    let started = Instant::now();
    for _ in 0..n {
        to.write_all(b"x").expect("write");
        from.read_exact(&mut byte).expect("read");
    }
    let elapsed = started.elapsed();
    drop(to);
    let _ = child.wait();
    elapsed
}

/// The other end of [`pingpong`]: echo bytes until end of input.
fn pingpong_child() {
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut byte = [0u8; 1];
    while stdin.read_exact(&mut byte).is_ok() {
        if stdout
            .write_all(&byte)
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
}

/// Holds a `dd bs=1` storm on all CPUs but one for `secs` under `argus record` and reports
/// the event rate and lost events.
fn sustained(secs: u64) {
    let buffer_kb: u32 = env_or("ARGUS_BENCH_BUFFER_KB", 65_536);
    let storms: usize = env_or("ARGUS_BENCH_STORMS", cpus().saturating_sub(1).max(1));
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = tmp.path().join("trace");
    let out = Command::new(ARGUS)
        .args(["record", "-o"])
        .arg(&trace)
        .args(["--buffer-kb", &buffer_kb.to_string(), "--ring-size", "8G"])
        .args(["--duration", &secs.to_string(), "--", "sh", "-c"])
        .arg(format!(
            "for i in $(seq {storms}); do \
               timeout {secs} dd if=/dev/zero of=/dev/null bs=1 count=1000000000000 2>/dev/null & \
             done; wait"
        ))
        .output()
        .expect("argus record runs");
    assert!(
        out.status.success(),
        "argus record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (records, page_lost, span) = count_records(&trace);
    let meta = argus_ingest::replay::TraceReader::open(&trace)
        .expect("trace opens")
        .meta()
        .clone();
    let lost: u64 = meta.lost.values().sum();
    println!(
        "sustained: {records} records in {span:.1} s = {:.2} M events/s with {storms} dd storms; \
         buffer {buffer_kb} KiB per cpu; lost {lost} (stats) / {page_lost} (page flags)",
        records as f64 / span / 1e6
    );
    println!(
        "  recorder: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A tracer of the stacks comparison.
#[derive(Clone, Copy)]
enum StackMode {
    None,
    Argus,
    /// `argus record --stacks` with this value (`None`: no value, the default).
    ArgusStacks(Option<&'static str>),
    PerfFp,
    PerfDwarf,
}

impl StackMode {
    fn name(self) -> &'static str {
        match self {
            StackMode::None => "none",
            StackMode::Argus => "argus",
            StackMode::ArgusStacks(None) => "argus --stacks",
            StackMode::ArgusStacks(Some(_)) => "argus --stacks read,write",
            StackMode::PerfFp => "perf -g",
            StackMode::PerfDwarf => "perf dwarf,1024",
        }
    }
}

/// Runs `work` under `mode`; returns (wall seconds, samples lost).
fn run_stack_mode(mode: StackMode, dir: &Path, work: &dyn Fn() -> Duration) -> (f64, u64) {
    std::fs::create_dir_all(dir).expect("bench dir");
    let trace = dir.join("trace");
    let perf_data = dir.join("perf.data");
    let child = match mode {
        StackMode::None => None,
        StackMode::Argus | StackMode::ArgusStacks(_) => {
            let mut cmd = Command::new(ARGUS);
            cmd.args(["record", "-o"]).arg(&trace);
            if let StackMode::ArgusStacks(v) = mode {
                cmd.arg("--stacks");
                cmd.args(v);
            }
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("argus record starts");
            wait_for(|| trace.join("proc.json").exists(), "argus record");
            Some(child)
        }
        StackMode::PerfFp | StackMode::PerfDwarf => {
            let graph = match mode {
                StackMode::PerfFp => "fp",
                _ => "dwarf,1024",
            };
            let child = Command::new("perf")
                .args(["record", "-a", "-q", "--call-graph", graph])
                .args([
                    "-e",
                    "raw_syscalls:sys_enter",
                    "--filter",
                    "id == 0 || id == 1",
                ])
                .arg("-o")
                .arg(&perf_data)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("perf record starts");
            wait_for(
                || std::fs::metadata(&perf_data).is_ok_and(|m| m.len() > 0),
                "perf record",
            );
            std::thread::sleep(Duration::from_millis(300));
            Some(child)
        }
    };
    let t = work().as_secs_f64();
    let mut lost = 0;
    if let Some(mut child) = child {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let _ = child.wait();
        lost = match mode {
            // "... perf: N stack samples, ... (M samples LOST)"
            StackMode::ArgusStacks(_) => stderr
                .split("perf: ")
                .nth(1)
                .and_then(|p| p.split(" samples LOST").next())
                .filter(|p| p.contains('('))
                .and_then(|p| p.rsplit('(').next())
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0),
            StackMode::PerfFp | StackMode::PerfDwarf => perf_lost(&perf_data),
            _ => 0,
        };
    }
    let _ = std::fs::remove_dir_all(dir);
    (t, lost)
}

/// Samples perf lost: the `LOST_SAMPLES` total (else the `LOST` records' count) of
/// `perf report --stats`.
fn perf_lost(data: &Path) -> u64 {
    let stats = perf_stats(data);
    perf_field(&stats, "LOST_SAMPLES events")
        .or(perf_field(&stats, "LOST events"))
        .unwrap_or(0)
}

/// The text of `perf report --stats` for `data`.
fn perf_stats(data: &Path) -> String {
    let out = Command::new("perf")
        .args(["report", "--stats", "-i"])
        .arg(data)
        .output()
        .expect("perf report runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The largest count on the lines of `stats` that start with `name` (`NAME: count ...`).
fn perf_field(stats: &str, name: &str) -> Option<u64> {
    stats
        .lines()
        .filter(|l| l.trim_start().starts_with(name))
        .filter_map(|l| l.split(':').nth(1)?.split_whitespace().next()?.parse().ok())
        .max()
}

/// `dd if=/dev/zero of=/dev/null bs=1 count=n`: 2n syscalls, none blocking.
fn dd_loop(n: u64) -> Duration {
    let started = Instant::now();
    let status = Command::new("dd")
        .args([
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            &format!("count={n}"),
        ])
        .stderr(Stdio::null())
        .status()
        .expect("dd runs");
    assert!(status.success(), "dd failed");
    started.elapsed()
}

/// The stacks comparison (`ARGUS_BENCH_STACKS`).
fn stacks_bench() {
    let rounds: usize = env_or("ARGUS_BENCH_ROUNDS", 3);
    let dd: u64 = env_or("ARGUS_BENCH_DD", 400_000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let sources = write_sources(tmp.path(), env_or("ARGUS_BENCH_FILES", 24));
    let modes = [
        StackMode::None,
        StackMode::Argus,
        StackMode::ArgusStacks(None),
        StackMode::ArgusStacks(Some("read,write")),
        StackMode::PerfFp,
        StackMode::PerfDwarf,
    ];
    println!(
        "overhead (stacks): {rounds} rounds, modes interleaved, {} cpus; perf: sys_enter id 0|1",
        cpus()
    );
    let workloads: [(String, &dyn Fn() -> Duration); 2] = [
        (format!("dd bs=1 count={dd}"), &|| dd_loop(dd)),
        ("compile".to_string(), &|| compile_loop(&sources)),
    ];
    for (name, work) in workloads {
        work();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut lost = vec![0u64; modes.len()];
        for round in 0..rounds {
            for (i, mode) in modes.iter().enumerate() {
                let dir = tmp.path().join(format!("s-{round}-{i}"));
                let (t, l) = run_stack_mode(*mode, &dir, work);
                times[i].push(t);
                lost[i] += l;
            }
        }
        let base = median(&times[0]);
        let dwarf = median(&times[modes.len() - 1]);
        for (i, mode) in modes.iter().enumerate() {
            let m = median(&times[i]);
            println!(
                "  {name:20} {:26} wall {:7.3} s  x{:6.2} none  x{:5.2} perf-dwarf  (min {:.3} max {:.3})  lost {}",
                mode.name(),
                m,
                m / base,
                m / dwarf,
                times[i].iter().cloned().fold(f64::INFINITY, f64::min),
                times[i].iter().cloned().fold(0.0, f64::max),
                lost[i]
            );
        }
    }
}

/// A tracer of the saturation benchmark.
#[derive(Clone, Copy, PartialEq)]
enum SatMode {
    None,
    KernelOnly,
    Record,
    Start,
    Perf,
}

impl SatMode {
    fn name(self) -> &'static str {
        match self {
            SatMode::None => "untraced",
            SatMode::KernelOnly => "kernel only",
            SatMode::Record => "argus record",
            SatMode::Start => "argus start",
            SatMode::Perf => "perf record",
        }
    }
}

/// CPU seconds (user + system, all threads) of process `pid` so far.
fn proc_cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// Resident memory of process `pid`, MiB.
fn proc_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Each tracer alone on the machine as it is, in a session of its own, for `secs`.
fn idle_cost(secs: u64) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let set = argus_ingest::linux::event_set("default").expect("the default events");
    let group = PathBuf::new();
    let rounds: usize = env_or("ARGUS_BENCH_ROUNDS", 3);
    let warmup: u64 = env_or("ARGUS_BENCH_IDLE_WARMUP", 5);
    println!(
        "idle cost: {secs} s per tracer after {warmup} s, each in a session of its own, {rounds} rounds (interleaved), {} cpus",
        cpus()
    );
    println!(
        "  {:14} | {:>9} | {:>10} | {:>10} | {:>12}",
        "tracer", "cpu", "rss 1/4", "rss end", "events/s"
    );
    let modes = [SatMode::Record, SatMode::Start, SatMode::Perf];
    let mut shares: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for (i, mode) in (0..rounds).flat_map(|_| modes.iter().copied().enumerate()) {
        let dir = tmp.path().join(mode.name().replace(' ', "-"));
        std::fs::create_dir_all(&dir).expect("bench dir");
        let trace = dir.join("trace");
        let perf_data = dir.join("perf.data");
        let mut cmd = match mode {
            SatMode::Record => {
                let mut c = Command::new(ARGUS);
                c.args(["-q", "record", "-o"]).arg(&trace);
                c
            }
            SatMode::Start => {
                let mut c = Command::new(ARGUS);
                c.args(["-q", "start", "-o"]).arg(dir.join("job"));
                c
            }
            _ => {
                // Without its own records, as `argus record` leaves out its threads': a
                // `perf record` tracing its own writes of perf.data feeds on itself (98% of a
                // CPU and 1.6 M events/s on the idle VM). The shell's pid is perf's after exec.
                let mut line = String::from("exec perf record -a -q -o \"$0\"");
                for e in set.iter().filter(|e| e.as_str() != "ftrace/print") {
                    line.push_str(&format!(
                        " -e {} --filter \"common_pid != $$\"",
                        e.replacen('/', ":", 1)
                    ));
                }
                let mut c = Command::new("sh");
                c.arg("-c").arg(line).arg(&perf_data);
                c
            }
        };
        Setting::OwnSession.apply(&mut cmd, &group);
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", mode.name()));
        let pid = child.id();
        // Past its start (the first scans, the first snapshot's setup; with a longer
        // warm-up, the first minute's new "hangs" of every waiting thread too).
        std::thread::sleep(Duration::from_secs(warmup));
        let cpu0 = proc_cpu_secs(pid);
        std::thread::sleep(Duration::from_secs(secs / 4));
        let rss_quarter = proc_rss_mib(pid);
        std::thread::sleep(Duration::from_secs(secs - secs / 4));
        let cpu = proc_cpu_secs(pid) - cpu0;
        let rss_end = proc_rss_mib(pid);
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(pid as i32, libc::SIGINT) };
        let _ = child.wait();
        let events_per_s = match mode {
            SatMode::Perf => perf_counts(&perf_data).0 as f64 / (secs + warmup) as f64,
            _ => {
                let t = if mode == SatMode::Start {
                    dir.join("job").join("trace")
                } else {
                    trace.clone()
                };
                let (records, _, span) = count_records(&t);
                records as f64 / span.max(1e-9)
            }
        };
        println!(
            "  {:14} | {:>8.2}% | {:>6.0} MiB | {:>6.0} MiB | {:>12.0}",
            mode.name(),
            100.0 * cpu / secs as f64,
            rss_quarter,
            rss_end,
            events_per_s
        );
        shares[i].push(100.0 * cpu / secs as f64);
        let _ = std::fs::remove_dir_all(&dir);
    }
    for (mode, mut v) in modes.iter().zip(shares) {
        v.sort_by(f64::total_cmp);
        println!(
            "  {:14} | {:>8.2}% median of {} runs",
            mode.name(),
            v[v.len() / 2],
            v.len()
        );
    }
}

/// Where a tracer runs relative to the load (the load runs in the bench's own session).
#[derive(Clone, Copy, PartialEq)]
enum Setting {
    SameSession,
    OwnSession,
    OwnCgroup,
}

impl Setting {
    const ALL: [Setting; 3] = [
        Setting::SameSession,
        Setting::OwnSession,
        Setting::OwnCgroup,
    ];

    fn name(self) -> &'static str {
        match self {
            Setting::SameSession => "same session",
            Setting::OwnSession => "own session",
            Setting::OwnCgroup => "own cgroup",
        }
    }

    /// Makes `cmd` start in this setting (`group`: the `own cgroup` group).
    fn apply(self, cmd: &mut Command, group: &Path) {
        let tasks = group.join("tasks");
        match self {
            Setting::SameSession => {}
            Setting::OwnSession => argus_testkit::elsewhere::own_session(cmd, None),
            Setting::OwnCgroup => argus_testkit::elsewhere::own_session(cmd, Some(&tasks)),
        }
    }
}

/// A cgroup v1 `cpu` group with default weight for the `own cgroup` runs, removed on drop.
struct BenchGroup(PathBuf);

impl BenchGroup {
    fn new() -> BenchGroup {
        let dir =
            PathBuf::from("/sys/fs/cgroup/cpu").join(format!("argus-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("mkdir {} (root, cgroup v1 cpu): {e}", dir.display()));
        BenchGroup(dir)
    }
}

impl Drop for BenchGroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// What one run of the saturating load under one tracer measured.
#[derive(Default)]
struct SatRun {
    round_trips: f64,
    events: u64,
    lost: u64,
    secs: f64,
    tracer_cpu: f64,
}

fn saturation(secs: u64) {
    let rounds: usize = env_or("ARGUS_BENCH_ROUNDS", 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let load = argus_testkit::elsewhere::saturate(tmp.path());
    let set = argus_ingest::linux::event_set("default").expect("the default events");
    let group = BenchGroup::new();
    // (tracer, setting); untraced and kernel-only once per round.
    let mut modes = vec![(SatMode::None, Setting::SameSession)];
    for setting in Setting::ALL {
        for tracer in [SatMode::Record, SatMode::Start, SatMode::Perf] {
            modes.push((tracer, setting));
        }
    }
    modes.push((SatMode::KernelOnly, Setting::SameSession));
    let label = |(mode, setting): (SatMode, Setting)| match mode {
        SatMode::None | SatMode::KernelOnly => mode.name().to_string(),
        _ => format!("{}, {}", mode.name(), setting.name()),
    };
    println!(
        "saturation: {secs} s of saturate.c per run, {rounds} round(s) interleaved, {} cpus",
        cpus()
    );
    let mut runs: Vec<Vec<SatRun>> = (0..modes.len()).map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, &(mode, setting)) in modes.iter().enumerate() {
            let dir = tmp.path().join(format!("sat-{round}-{i}"));
            let run = saturate_under(mode, setting, &group.0, &dir, &load, secs, &set);
            println!(
                "  round {round} {:28}: {:.0} round trips, {} events, {} lost, tracer cpu {:.2} s",
                label((mode, setting)),
                run.round_trips,
                run.events,
                run.lost,
                run.tracer_cpu
            );
            let _ = std::fs::remove_dir_all(&dir);
            runs[i].push(run);
        }
    }
    let med =
        |i: usize, f: &dyn Fn(&SatRun) -> f64| median(&runs[i].iter().map(f).collect::<Vec<f64>>());
    let base = med(0, &|r| r.round_trips);
    println!(
        "  {:28} | {:>12} | {:>5} | {:>11} | {:>12} | {:>7} | {:>10}",
        "mode", "round trips", "speed", "events/s", "lost", "lost %", "tracer cpu"
    );
    for (i, &m) in modes.iter().enumerate() {
        let rt = med(i, &|r| r.round_trips);
        let events = med(i, &|r| r.events as f64);
        let lost = med(i, &|r| r.lost as f64);
        let rate = med(i, &|r| r.events as f64 / r.secs.max(1e-9));
        let cpu = med(i, &|r| r.tracer_cpu);
        println!(
            "  {:28} | {:>12.0} | {:>5.2} | {:>11.0} | {:>12.0} | {:>6.3}% | {:>8.2} s",
            label(m),
            rt,
            rt / base,
            rate,
            lost,
            if events + lost > 0.0 {
                100.0 * lost / (events + lost)
            } else {
                0.0
            },
            cpu
        );
    }
    let speed = |i: usize| med(i, &|r| r.round_trips) / base;
    let ceiling = speed(modes.len() - 1);
    for (k, setting) in Setting::ALL.iter().enumerate() {
        // Rows 1 + 3k .. are record, start, perf in this setting.
        let (rec, start, perf) = (1 + 3 * k, 2 + 3 * k, 3 + 3 * k);
        println!(
            "  {}: speed vs perf: argus record {:.1}x, argus start {:.1}x; share of the kernel-only ceiling: argus record {:.0}%, argus start {:.0}%, perf {:.0}%",
            setting.name(),
            speed(rec) / speed(perf),
            speed(start) / speed(perf),
            100.0 * speed(rec) / ceiling,
            100.0 * speed(start) / ceiling,
            100.0 * speed(perf) / ceiling
        );
    }
}

/// Runs the load for `secs` under `mode` and measures it.
fn saturate_under(
    mode: SatMode,
    setting: Setting,
    group: &Path,
    dir: &Path,
    load: &Path,
    secs: u64,
    set: &[String],
) -> SatRun {
    std::fs::create_dir_all(dir).expect("bench dir");
    let trace = match mode {
        SatMode::Start => dir.join("job").join("trace"),
        _ => dir.join("trace"),
    };
    let perf_data = dir.join("perf.data");
    let instance = match mode {
        SatMode::KernelOnly => Some(KernelOnly::enable(set)),
        _ => None,
    };
    let child = match mode {
        SatMode::None | SatMode::KernelOnly => None,
        SatMode::Record => {
            let mut cmd = Command::new(ARGUS);
            cmd.args(["-q", "record", "-o"]).arg(&trace);
            Some(cmd)
        }
        SatMode::Start => {
            let mut cmd = Command::new(ARGUS);
            cmd.args(["-q", "start", "-o"])
                .arg(dir.join("job"))
                .args(["--snapshot-every", "10"]);
            Some(cmd)
        }
        SatMode::Perf => {
            let mut cmd = Command::new("perf");
            cmd.args(["record", "-a", "-q", "-o"]).arg(&perf_data);
            for e in set.iter().filter(|e| e.as_str() != "ftrace/print") {
                cmd.args(["-e", &e.replacen('/', ":", 1)]);
            }
            Some(cmd)
        }
    };
    let child = child.map(|mut cmd| {
        setting.apply(&mut cmd, group);
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", mode.name()))
    });
    match mode {
        SatMode::Record | SatMode::Start => {
            wait_for(|| trace.join("proc.json").exists(), mode.name())
        }
        SatMode::Perf => {
            wait_for(
                || std::fs::metadata(&perf_data).is_ok_and(|m| m.len() > 0),
                "perf record",
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        SatMode::None | SatMode::KernelOnly => {}
    }
    let started = Instant::now();
    let out = Command::new(load)
        .arg(secs.to_string())
        .output()
        .expect("the load runs");
    let load_secs = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let round_trips: f64 = text
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no round-trip count from the load: {text}"));
    let Some(mut child) = child else {
        let (events, lost) = instance.map_or((0, 0), KernelOnly::finish);
        return SatRun {
            round_trips,
            events,
            lost,
            secs: load_secs,
            ..SatRun::default()
        };
    };
    let before = cpu_secs();
    // SAFETY: kill has no memory-safety preconditions; the pid is our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let status = child.wait().expect("tracer exits");
    // The tracer is reaped now: its CPU time joined RUSAGE_CHILDREN (the load's had already).
    let tracer_cpu = cpu_secs() - before;
    assert!(
        status.success() || status.code() == Some(130) || mode == SatMode::Perf,
        "{} exited with {status}: {stderr}",
        mode.name()
    );
    let (events, lost, secs) = match mode {
        SatMode::Perf => {
            let (samples, lost) = perf_counts(&perf_data);
            (samples, lost, load_secs)
        }
        _ => {
            let (records, page_lost, span) = count_records(&trace);
            let meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(trace.join("meta.json")).expect("meta.json"))
                    .expect("meta.json parses");
            let stats_lost: u64 = meta["lost"]
                .as_object()
                .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
            (records, stats_lost.max(page_lost), span)
        }
    };
    SatRun {
        round_trips,
        events,
        lost,
        secs,
        tracer_cpu,
    }
}

/// A tracefs instance with the events of the set enabled and no reader: the kernel's cost of
/// writing them (the ring overwrites itself; nothing is read, so nothing else costs).
struct KernelOnly {
    dir: PathBuf,
}

impl KernelOnly {
    fn enable(set: &[String]) -> KernelOnly {
        let dir = PathBuf::from(argus_ingest::linux::DEFAULT_TRACEFS)
            .join("instances")
            .join(format!("argus-bench-kernel-only-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("a tracefs instance");
        let write = |rel: &str, value: &str| {
            std::fs::write(dir.join(rel), value)
                .unwrap_or_else(|e| panic!("writing {value} to {}: {e}", dir.join(rel).display()))
        };
        write(
            "buffer_size_kb",
            &argus_ingest::linux::DEFAULT_BUFFER_SIZE_KB.to_string(),
        );
        // ftrace/print has no enable file: it is on in every instance.
        for e in set.iter().filter(|e| e.as_str() != "ftrace/print") {
            write(&format!("events/{e}/enable"), "1");
        }
        write("tracing_on", "1");
        KernelOnly { dir }
    }

    /// Events the kernel wrote (kept plus overwritten), and 0 lost (overwriting is the mode);
    /// the instance goes when `self` is dropped.
    fn finish(self) -> (u64, u64) {
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        let mut events = 0u64;
        for cpu in 0..cpus() {
            let stats = std::fs::read_to_string(self.dir.join(format!("per_cpu/cpu{cpu}/stats")))
                .unwrap_or_default();
            for line in stats.lines() {
                if let Some((k, v)) = line.split_once(':') {
                    if k == "entries" || k == "overrun" {
                        events += v.trim().parse::<u64>().unwrap_or(0);
                    }
                }
            }
        }
        (events, 0)
    }
}

impl Drop for KernelOnly {
    /// Also on a panic: an instance left behind would keep tracing the machine.
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Records in a trace directory's chunks, events lost by the page flags, and the span in
/// seconds.
fn count_records(trace: &Path) -> (u64, u64, f64) {
    let reader = argus_ingest::replay::TraceReader::open(trace).expect("trace opens");
    let meta = reader.meta().clone();
    let layout = reader.formats().header_page;
    let page_size = meta.page_size as usize;
    let (mut records, mut page_lost) = (0u64, 0u64);
    for chunk in reader.ring_chunks() {
        let bytes =
            zstd::decode_all(std::fs::File::open(trace.join(&chunk.file)).expect("chunk opens"))
                .expect("chunk decodes");
        for page in bytes.chunks(page_size) {
            let recs = argus_ingest::page::parse_page(&layout, page).expect("page parses");
            if let argus_ingest::page::Missed::Count(n) = recs.header().missed {
                page_lost += n;
            }
            records += recs.filter(Result::is_ok).count() as u64;
        }
    }
    let span = meta.end_ns.saturating_sub(meta.start_ns) as f64 / 1e9;
    (records, page_lost, span)
}

/// Samples recorded and events lost by `perf record` (`perf report --stats`).
fn perf_counts(data: &Path) -> (u64, u64) {
    let samples = perf_field(&perf_stats(data), "SAMPLE events").unwrap_or(0);
    (samples, perf_lost(data))
}
