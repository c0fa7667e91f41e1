//! Helpers shared by the integration tests.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The binary under test.
pub fn argus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_argus"))
}

/// Runs the binary and returns its output (never panics on a non-zero exit).
pub fn run(args: &[&str]) -> Output {
    argus().args(args).output().expect("the argus binary runs")
}

pub use argus_testkit::{live_or_skip, recording_lock};

/// A recorded workload: its trace, its snapshot, and what it printed about itself.
pub struct Recorded {
    /// Keeps the directory alive.
    pub _dir: tempfile::TempDir,
    /// The trace directory.
    pub trace: PathBuf,
    /// The snapshot directory.
    pub snapshot: PathBuf,
    /// The workload's pid (from meta.json).
    pub pid: i32,
    /// The workload's own JSON line.
    pub truth: Value,
}

/// Records `argus workload NAME`, then builds the snapshot.
pub fn record_workload(name: &str) -> Recorded {
    let exe = env!("CARGO_BIN_EXE_argus");
    record_command(&[exe, "workload", name])
}

/// Records `cmd` (which prints one JSON line on stdout), then builds the snapshot.
pub fn record_command(cmd: &[&str]) -> Recorded {
    record_with(&[], cmd, &[])
}

/// Records `cmd` with extra `argus record` options (`--stacks`, `--watch …`), then builds
/// the snapshot with extra `argus build` options.
pub fn record_with(record_opts: &[&str], cmd: &[&str], build_opts: &[&str]) -> Recorded {
    let _guard = recording_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let snapshot = dir.path().join("snapshot");
    let mut args = vec!["record"];
    args.extend_from_slice(record_opts);
    args.extend_from_slice(&["-o", trace.to_str().expect("utf-8 path"), "--"]);
    args.extend_from_slice(cmd);
    let out = run(&args);
    let truth = recorded_truth(&out);
    let meta: Value =
        serde_json::from_slice(&std::fs::read(trace.join("meta.json")).expect("meta.json exists"))
            .expect("meta.json parses");
    let pid = meta["command_pid"].as_i64().expect("command_pid") as i32;
    build_snapshot(&trace, &snapshot, build_opts);
    Recorded {
        _dir: dir,
        trace,
        snapshot,
        pid,
        truth,
    }
}

/// Records `argus workload NAME --secs SECS` (a suite's scenario) into `DIR/NAME/trace`
/// under the recording lock: the trace, where its snapshot goes (`DIR/NAME/snapshot`, not
/// built), and what `argus record` printed.
pub fn record_scenario(name: &str, dir: &Path, secs: &str) -> (PathBuf, PathBuf, Output) {
    record_scenario_with(name, dir, Some(secs), &[])
}

/// [`record_scenario`] with `argus record` options `opts` (`--events full`, …), and the
/// workload's own length when `secs` is `None`.
pub fn record_scenario_with(
    name: &str,
    dir: &Path,
    secs: Option<&str>,
    opts: &[&str],
) -> (PathBuf, PathBuf, Output) {
    let exe = env!("CARGO_BIN_EXE_argus");
    let trace = dir.join(name).join("trace");
    let snapshot = dir.join(name).join("snapshot");
    let mut args = vec!["record", "-o", trace.to_str().expect("utf-8")];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", exe, "workload", name]);
    if let Some(secs) = secs {
        args.extend_from_slice(&["--secs", secs]);
    }
    let out = {
        let _guard = recording_lock();
        run(&args)
    };
    (trace, snapshot, out)
}

/// Runs `argus build TRACE -o SNAPSHOT OPTS...` and asserts that it succeeded.
pub fn build_snapshot(trace: &Path, snapshot: &Path, opts: &[&str]) {
    let mut args = vec![
        "build",
        trace.to_str().expect("utf-8"),
        "-o",
        snapshot.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(opts);
    let out = run(&args);
    assert!(
        out.status.success(),
        "argus build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the bundled recording (`argus demo --bundled --keep DIR/demo`) under `dir` and
/// returns its trace directory. Needs no tracing: runs anywhere.
pub fn bundled_trace(dir: &Path) -> PathBuf {
    let keep = dir.join("demo");
    let out = run(&["demo", "--bundled", "--keep", keep.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    keep.join("trace")
}

/// Asserts that `argus record -- WORKLOAD` succeeded and returns the JSON line the
/// workload printed about itself (its ground truth).
pub fn recorded_truth(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "argus record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the workload printed no JSON line: {stdout}"))
}

/// The chain workload recorded once (see [`chain`]).
static CHAIN: OnceLock<Recorded> = OnceLock::new();

/// Removes the shared chain recording's directory: a static is never dropped, so its
/// `TempDir` alone left a trace and a snapshot in /tmp after every run of the tests.
extern "C" fn remove_chain_recording() {
    if let Some(rec) = CHAIN.get() {
        let _ = std::fs::remove_dir_all(rec._dir.path());
    }
}

/// The chain workload, recorded once for every test that needs a real trace; its directory
/// is removed when the test binary exits.
pub fn chain() -> &'static Recorded {
    CHAIN.get_or_init(|| {
        let rec = record_workload("chain");
        // SAFETY: registers a plain function, run once by `exit` (the test harness exits
        // through it).
        unsafe { libc::atexit(remove_chain_recording) };
        rec
    })
}

/// The JSON a command printed, after checking it exited with `code` (stderr shown if not).
pub fn json_out(out: &Output, code: i32) -> Value {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON on stdout ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `argus start -o JOB ARGS…`, its stderr dropped, killed when the guard goes.
pub fn start_job(job: &Path, args: &[&str]) -> Guard {
    Guard(Some(
        argus()
            .args(["start", "-o"])
            .arg(job)
            .args(args)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("argus start runs"),
    ))
}

/// `argus debug SNAPSHOT --pid P --auto --json`: exit code and report.
pub fn debug_json(snapshot: &Path, pid: i32) -> (i32, Value) {
    debug_json_with(snapshot, pid, &[])
}

/// [`debug_json`] with more options (`--threshold 1`, …).
pub fn debug_json_with(snapshot: &Path, pid: i32, extra: &[&str]) -> (i32, Value) {
    let pid = pid.to_string();
    let mut args = vec![
        "debug",
        snapshot.to_str().expect("utf-8"),
        "--pid",
        &pid,
        "--auto",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    let code = out.status.code().unwrap_or(-1);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "debug --json printed no JSON ({e}); stdout: {} stderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, report)
}

/// Asserts that the report `got` names the hang (of thread `hang_tid`) and root cause of
/// `want`, the chain's as `argus record` gives them, and that its path holds every link of
/// the chain (`what` names the input in messages).
pub fn same_chain_diagnosis(got: &Value, want: &Value, hang_tid: u64, what: &str) {
    assert_eq!(
        got["hang"]["tid"].as_u64(),
        Some(hang_tid),
        "{what}: the main thread hangs: {got:#}"
    );
    assert_eq!(
        got["hang"]["class"], want["hang"]["class"],
        "{what}: {got:#}"
    );
    let (roots, want_roots) = (&got["root_causes"], &want["root_causes"]);
    assert_eq!(
        comms(roots).first(),
        comms(want_roots).first(),
        "{what}: {got:#}\nargus record: {want:#}"
    );
    assert_eq!(roots[0]["class"], want_roots[0]["class"], "{what}: {got:#}");
    let path = comms(&got["path"]);
    for who in ["argus-hang-main", "argus-worker", "sh", "sleep"] {
        assert!(
            path.iter().any(|c| c == who),
            "{what}: {who} is on the path {path:?}"
        );
    }
}

/// `argus build FILE -o SNAP` of a file cut to `cut` bytes: exit 2, the file named with an
/// offset no further than the cut, no panic, no snapshot.
pub fn build_refuses_with_offset(file: &Path, snapshot: &Path, cut: u64) {
    let out = run(&[
        "build",
        file.to_str().expect("utf-8"),
        "-o",
        snapshot.to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains(file.to_str().expect("utf-8")), "{stderr}");
    let offset: u64 = stderr
        .split("offset ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an offset in {stderr}"));
    assert!(offset <= cut, "{stderr}");
    assert!(!snapshot.exists());
}

/// The `comm` of every item of a JSON list (a report's `path`, `root_causes`, ...).
pub fn comms(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["comm"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The largest contributor of a report's blame: its tid and share, and whether it is the
/// report's root cause (the last of `root_causes`, by tid).
pub fn blame_top(report: &Value) -> Option<(i64, f64, bool)> {
    let top = &report["blame"]["contributors"][0];
    let tid = top["tid"].as_i64()?;
    let share = top["share"].as_f64()?;
    let root = report["root_causes"]
        .as_array()
        .and_then(|r| r.last())
        .and_then(|r| r["tid"].as_i64());
    Some((tid, share, root == Some(tid)))
}

/// A suite table's blame cell: the top share, marked `*` when its thread is not the root
/// cause.
pub fn blame_cell(report: &Value) -> String {
    match blame_top(report) {
        Some((_, share, is_root)) => {
            format!("{:.0}%{}", share * 100.0, if is_root { "" } else { "*" })
        }
        None => "-".to_string(),
    }
}

/// Copies the directory `from` (recursively) to `to`: a missed scenario's snapshot, kept for
/// a look.
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()))?;
        } else {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Whether `prog` is installed (on `PATH`, or in the sbin directories servers live in).
pub fn installed(prog: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .any(|d| d.join(prog).is_file())
}

/// Every event of a trace directory, decoded.
pub fn trace_events(trace: &Path) -> Vec<argus_schema::Event> {
    argus_ingest::replay::TraceReader::open(trace)
        .expect("the trace opens")
        .events()
        .collect::<Result<Vec<_>, _>>()
        .expect("the trace decodes")
}

/// Stops a child on drop (SIGKILL), so a failing assertion leaves no job behind.
pub struct Guard(pub Option<std::process::Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `f` every 20 ms until it gives a value; fails naming `what` after `timeout`.
pub fn wait_for<T>(
    what: &str,
    timeout: std::time::Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let end = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The python of a virtual environment with the packages of `reqs` (a pip requirements file
/// of the repository), created under `target/pyenv/<hash of the file>` the first time and
/// reused while the file is unchanged. `Err`: why not.
pub fn venv_python(reqs: &Path) -> Result<PathBuf, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read(reqs).map_err(|e| format!("reading {}: {e}", reqs.display()))?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dir = target
        .join("pyenv")
        .join(format!("{:016x}", argus_schema::hash::fnv1a(&text)));
    let python = dir.join("bin/python");
    if dir.join(".complete").is_file() {
        return Ok(python);
    }
    let tmp = dir.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let ok = |c: &mut Command, what: &str| -> Result<(), String> {
        let out = c.output().map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    ok(
        Command::new("python3").args(["-m", "venv"]).arg(&tmp),
        "python3 -m venv",
    )?;
    ok(
        Command::new(tmp.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(reqs),
        &format!("pip install -r {}", reqs.display()),
    )?;
    std::fs::write(tmp.join(".complete"), &text).map_err(|e| e.to_string())?;
    // Another test run may have won the race; either copy is complete.
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(python)
}
