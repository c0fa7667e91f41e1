//! `argus start` on the real kernel: a hang reproduced while the job runs shows in a snapshot
//! taken at once, runs `--on-hang` and is reported by `argus debug --follow`, all within one
//! snapshot period of the moment it became detectable; `kill -9` during a snapshot write
//! leaves `latest` on a complete snapshot and a restart resumes from the ring.

use crate::common::{argus, live_or_skip, recording_lock, wait_for, Guard};
use argus_ingest::linux::monotonic_ns as mono_ns;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
    unsafe { libc::kill(child.id() as i32, sig) };
}

fn latest(job: &Path) -> Option<PathBuf> {
    let p = std::fs::canonicalize(job.join("latest")).ok()?;
    p.join("manifest.json").is_file().then_some(p)
}

fn manifest(snapshot: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(snapshot.join("manifest.json")).expect("manifest"))
        .expect("manifest parses")
}

#[test]
fn start_shows_a_live_hang_runs_the_hook_and_follow_reports_it_within_a_period() {
    if !live_or_skip("start_shows_a_live_hang_runs_the_hook_and_follow_reports_it_within_a_period")
    {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("job");
    let hook = tmp.path().join("hook.env");
    // The bound is one period. 3 s: comfortably more than what the job needs after the hang
    // becomes detectable (the 0.5 s lag, a tick, the snapshot, the diagnosis) even on a loaded
    // 2-core machine, and short enough that waiting for the periodic cycle (up to a whole
    // period after the lag) would break the bound.
    let period = 3.0f64;
    let threshold_ns = 2_000_000_000u64;
    // The hook also asks the running job for the diagnosis (its live graph, through
    // ARGUS_HANG_DIR), as a user's hook would.
    let asked = tmp.path().join("hook-debug.json");
    let hook_cmd = format!(
        "env | grep ^ARGUS_HANG_ > {0}.tmp && mv {0}.tmp {0}; \
         {1} debug \"$ARGUS_HANG_DIR\" --pid \"$ARGUS_HANG_PID\" --auto --json > {2}.tmp 2>{2}.err; \
         mv {2}.tmp {2}",
        hook.display(),
        env!("CARGO_BIN_EXE_argus"),
        asked.display()
    );
    let mut start = Guard(Some(
        argus()
            .args(["start", "-o"])
            .arg(&job)
            .args([
                "--snapshot-every",
                &period.to_string(),
                "--retain",
                "60s",
                "--watch-comm",
                "argus-hang-main",
                "--status-every",
                "1",
                "--duration",
                "60",
                "--on-hang",
                &hook_cmd,
            ])
            .stderr(Stdio::piped())
            .spawn()
            .expect("argus start runs"),
    ));
    wait_for("the first snapshot", Duration::from_secs(30), || {
        latest(&job)
    });

    let follow = argus()
        .args(["debug"])
        .arg(&job)
        .args([
            "--follow",
            "--follow-for",
            "40",
            "--comm",
            "argus-hang-main",
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("argus debug --follow runs");
    let mut follow = Guard(Some(follow));
    let follow_out = follow
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .expect("stdout");
    let (line_tx, line_rx) = std::sync::mpsc::channel::<(u64, String)>();
    std::thread::spawn(move || {
        for line in BufReader::new(follow_out).lines().map_while(Result::ok) {
            let _ = line_tx.send((mono_ns(), line));
        }
    });

    let spawned_at = mono_ns();
    let mut workload = argus()
        .args(["workload", "chain", "--secs", "6"])
        .stdout(Stdio::null())
        .spawn()
        .expect("the workload runs");
    let pid = workload.id() as i32;

    // The hook runs once the hang is in a snapshot.
    let (hook_at, env) = wait_for("the --on-hang command", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&hook).ok()?;
        Some((mono_ns(), text))
    });
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} in the hook's environment: {env}"))
            .to_string()
    };
    assert_eq!(var("ARGUS_HANG_PID"), pid.to_string(), "{env}");
    assert_eq!(
        var("ARGUS_HANG_TID"),
        pid.to_string(),
        "the main thread: {env}"
    );
    assert_eq!(var("ARGUS_HANG_CLASS"), "LongWait", "{env}");
    let snap = PathBuf::from(var("ARGUS_HANG_SNAPSHOT"));
    let tables =
        argus_sinks::read_snapshot_tables(&snap, false).expect("the hook's snapshot reads");
    let spin = tables
        .spins
        .iter()
        .find(|s| s.tid.0 == pid)
        .expect("the hang is in the snapshot the hook names");
    // The hang starts when the workload's main thread blocks (the spin's start, on the
    // trace clock, which is this test's CLOCK_MONOTONIC) and is detectable once it has lasted
    // the threshold; from then on the hook and --follow have one period.
    assert!(
        spin.start_ns.0 >= spawned_at && spin.start_ns.0 < spawned_at + 2_000_000_000,
        "the spin starts as the workload blocks: {} vs spawned at {spawned_at}",
        spin.start_ns.0
    );
    let detectable_at = spin.start_ns.0 + threshold_ns;
    let delay = hook_at.saturating_sub(detectable_at) as f64 / 1e9;
    eprintln!("hang detectable → --on-hang ran: {delay:.2} s (period {period} s)");
    assert!(
        delay <= period,
        "the hook ran {delay:.2} s after the hang became detectable (period {period} s)"
    );

    // --follow reads the job (not a snapshot) and reports the hang of the workload's main
    // thread: at once from the job's spins, with its diagnosis from the live graph on the same
    // line, or on a later `diagnosed` line when the live graph lagged.
    let change = |l: &str| -> serde_json::Value { serde_json::from_str(l).expect("JSON lines") };
    let mut lines = Vec::new();
    let (follow_at, line) = wait_for("debug --follow's report", Duration::from_secs(20), || {
        lines.extend(line_rx.try_iter().map(|(t, l)| (t, change(&l))));
        lines
            .iter()
            .find(|(_, c)| {
                c["change"] == "new_hang" && c["hang"]["tid"].as_i64() == Some(pid as i64)
            })
            .cloned()
    });
    let follow_delay = follow_at.saturating_sub(detectable_at) as f64 / 1e9;
    eprintln!("hang detectable → debug --follow reported it: {follow_delay:.2} s: {line}");
    assert_eq!(line["source"], "live", "{line}");
    assert!(line["epoch"].as_u64().is_some(), "{line}");
    assert_eq!(line["hang"]["class"], "LongWait", "{line}");
    assert_eq!(line["hang"]["start_ns"], spin.start_ns.0, "{line}");
    assert!(
        follow_delay <= period,
        "follow reported {follow_delay:.2} s after the hang became detectable (period {period} s)"
    );
    let (_, diagnosed) = wait_for(
        "debug --follow's diagnosis",
        Duration::from_secs(20),
        || {
            lines.extend(line_rx.try_iter().map(|(t, l)| (t, change(&l))));
            lines
                .iter()
                .find(|(_, c)| {
                    c["hang"]["segment"] == line["hang"]["segment"]
                        && c["hang"]["diagnosed"] == true
                        && (c["change"] == "new_hang" || c["change"] == "diagnosed")
                })
                .cloned()
        },
    );
    assert_eq!(diagnosed["source"], "live", "{diagnosed}");
    assert_eq!(diagnosed["report"]["hang"]["tid"], pid, "{diagnosed}");
    assert_eq!(
        diagnosed["report"]["hang"]["class"], "LongWait",
        "{diagnosed}"
    );
    assert_eq!(
        diagnosed["report"]["outcome"], "hang_diagnosed",
        "{diagnosed}"
    );
    // The hook's own question to the job: the same hang, diagnosed.
    let asked = wait_for("the hook's diagnosis", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&asked).ok()?;
        Some(
            serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| {
                panic!(
                    "the hook's argus debug printed JSON ({e}): {text}\n{}",
                    std::fs::read_to_string(asked.with_extension("json.err")).unwrap_or_default()
                )
            }),
        )
    });
    assert_eq!(asked["outcome"], "hang_diagnosed", "{asked}");
    assert_eq!(asked["hang"]["tid"].as_i64(), Some(pid as i64), "{asked}");
    assert!(workload.wait().expect("workload exits").success());
    // Once the worker wakes the main thread, follow reports the hang resolved.
    let (_, resolved) = wait_for("the hang resolved", Duration::from_secs(15), || {
        lines.extend(line_rx.try_iter().map(|(t, l)| (t, change(&l))));
        lines
            .iter()
            .find(|(_, c)| c["change"] == "resolved")
            .cloned()
    });
    assert_eq!(resolved["source"], "live", "{resolved}");
    assert_eq!(
        resolved["hang"]["tid"].as_i64(),
        Some(pid as i64),
        "{resolved}"
    );
    assert_eq!(resolved["hang"]["open"], false, "{resolved}");
    drop(follow);

    // SIGTERM: a clean stop with a last snapshot.
    let child = start.0.take().expect("running");
    let job_pid = child.id() as i64;
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().expect("argus start exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "clean stop: {stderr}");
    assert!(stderr.contains("stopped (Signal(15))"), "{stderr}");
    assert!(stderr.contains("events/s, lag"), "status lines: {stderr}");
    assert!(stderr.contains("lost 0 events"), "no events lost: {stderr}");
    for line in stderr.lines().filter(|l| l.contains("hang")) {
        eprintln!("{line}");
    }
    // Every snapshot, periodic or taken at once for the hang, is named by its epoch; no
    // staging directory is left behind.
    for e in std::fs::read_dir(job.join("snapshots"))
        .expect("snapshots")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with('.'), "left behind: {name}");
        let m = manifest(&e.path());
        assert_eq!(name, format!("{:010}", m["epoch"].as_u64().expect("epoch")));
    }
    let last = latest(&job).expect("latest after the stop");
    let m = manifest(&last);
    assert!(m["counts"]["segments"].as_u64().unwrap_or(0) > 0, "{m}");
    // The job's own threads are listed (its main thread among them), so inspect skips them.
    assert!(
        m["recorder_tids"]
            .as_array()
            .is_some_and(|t| t.len() > 1 && t.iter().any(|t| t.as_i64() == Some(job_pid))),
        "{m}"
    );
    assert_eq!(
        last.file_name().and_then(|n| n.to_str()),
        Some(format!("{:010}", m["epoch"].as_u64().expect("epoch")).as_str()),
        "snapshots are named by their epoch"
    );
}

#[test]
fn kill_9_during_a_snapshot_write_keeps_latest_complete_and_a_restart_resumes() {
    if !live_or_skip("kill_9_during_a_snapshot_write_keeps_latest_complete_and_a_restart_resumes") {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("job");
    let mut start = Guard(Some(
        argus()
            .args(["start", "-o"])
            .arg(&job)
            .args(["--snapshot-every", "1", "--snapshot-delay-ms", "1500"])
            .args(["--duration", "60", "-q"])
            .spawn()
            .expect("argus start runs"),
    ));
    let first = wait_for("the first snapshot", Duration::from_secs(30), || {
        latest(&job)
    });
    // The next snapshot's tables are written and it waits before installing: kill it there.
    let partial = wait_for("a snapshot being written", Duration::from_secs(30), || {
        std::fs::read_dir(job.join("snapshots"))
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.') && n.contains(".tmp-"))
                    && p.join("threads.parquet").is_file()
                    && !p.join("manifest.json").exists()
            })
    });
    let child = start.0.take().expect("running");
    signal(&child, libc::SIGKILL);
    let mut child = child;
    let _ = child.wait();
    assert!(partial.exists(), "the interrupted write is still there");
    let kept = latest(&job).expect("latest points at a complete snapshot");
    argus_sinks::read_snapshot(&kept).expect("the latest snapshot reads");
    argus_sinks::read_snapshot(&first).expect("the first snapshot reads");
    let before = manifest(&kept);

    // Restart: leftovers cleaned, the earlier ring replayed, snapshots continue.
    let out = argus()
        .args(["start", "-o"])
        .arg(&job)
        .args(["--snapshot-every", "1", "--duration", "3"])
        .output()
        .expect("argus start runs again");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("resumed"), "{stderr}");
    assert!(!partial.exists(), "the interrupted write was removed");
    let now = latest(&job).expect("latest after the restart");
    let after = manifest(&now);
    assert!(
        after["epoch"].as_u64() > before["epoch"].as_u64(),
        "{before} → {after}"
    );
    assert!(
        after["trace_start_ns"].as_u64() < before["watermark_ns"].as_u64(),
        "the resumed window holds events from before the crash: {before} → {after}"
    );
    argus_sinks::read_snapshot(&now).expect("the new snapshot reads");
}

/// Builds `../shared/loads/saturate.c` (the load of the "nothing lost" issue: pipe ping-pong
/// between two processes, a mutex and condition-variable hand-off, 200 µs sleeps) into `dir`.
fn build_saturate(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/loads/saturate.c");
    assert!(
        src.is_file(),
        "{} is missing: clone the project beside ../shared",
        src.display()
    );
    let exe = dir.join("saturate");
    let status = std::process::Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc runs (build-essential)");
    assert!(status.success(), "gcc failed on {}", src.display());
    exe
}

#[test]
fn start_under_a_saturating_load_loses_nothing_finds_a_hang_and_never_reports_itself() {
    if !live_or_skip(
        "start_under_a_saturating_load_loses_nothing_finds_a_hang_and_never_reports_itself",
    ) {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let load = build_saturate(tmp.path());
    let job = tmp.path().join("job");
    let hooks = tmp.path().join("hooks.txt");
    // Every hang of every main thread (the default watch) is appended: pid, tid, snapshot.
    let hook_cmd = format!(
        "echo \"$ARGUS_HANG_PID $ARGUS_HANG_TID $ARGUS_HANG_SNAPSHOT\" >> {}",
        hooks.display()
    );
    let mut start = Guard(Some(
        argus()
            .args(["start", "-o"])
            .arg(&job)
            .args([
                "--snapshot-every",
                "2",
                "--threshold",
                "1",
                "--status-every",
                "1",
                "--duration",
                "300",
                "--on-hang",
                &hook_cmd,
            ])
            .stderr(Stdio::piped())
            .spawn()
            .expect("argus start runs"),
    ));
    let job_pid = start.0.as_ref().map(|c| c.id() as i32).expect("running");
    wait_for("the first snapshot", Duration::from_secs(30), || {
        latest(&job)
    });
    // The job's threads, sampled while it runs (snapshot writers and dataflow workers come
    // and go).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(rd) = std::fs::read_dir(format!("/proc/{job_pid}/task")) {
                    seen.extend(
                        rd.flatten()
                            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()),
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        })
    };
    let t0 = Instant::now();
    let mut saturate = std::process::Command::new(&load)
        .arg("6")
        .stdout(Stdio::null())
        .spawn()
        .expect("the load runs");
    std::thread::sleep(Duration::from_millis(1500));
    // A real hang during the load: the main thread waits ~4 s on a worker.
    let mut workload = argus()
        .args(["workload", "chain", "--secs", "6"])
        .stdout(Stdio::null())
        .spawn()
        .expect("the workload runs");
    let pid = workload.id() as i32;
    assert!(workload.wait().expect("workload exits").success());
    assert!(saturate.wait().expect("load exits").success());
    // Found during the load or as the job catches up after it.
    let reported = || -> Vec<(i32, i32, PathBuf)> {
        std::fs::read_to_string(&hooks)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((
                    f.next()?.parse().ok()?,
                    f.next()?.parse().ok()?,
                    PathBuf::from(f.next()?),
                ))
            })
            .collect()
    };
    // The live graph lags the load (it reads back from the ring what it could not decode in
    // time), so the report may come well after the hang: with the test build (unoptimised)
    // the job reads ~6 M events back at ~200k/s and writes its snapshots of them (91 s in
    // one run).
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut found = false;
    while !found && Instant::now() < deadline {
        found = reported().iter().any(|r| r.0 == pid);
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "load and hang done, reported: {found} at {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let child = start.0.take().expect("running");
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().expect("argus start exits");
    eprintln!("job stopped at {:.1} s", t0.elapsed().as_secs_f64());
    assert!(
        found,
        "the workload's hang (pid {pid}) was not reported: {:?}\n{}",
        reported(),
        String::from_utf8_lossy(&out.stderr)
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let own = sampler.join().expect("sampler");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing the kernel recorded was lost: the raw ring has every event.
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(job.join("trace").join("meta.json")).expect("meta.json"),
    )
    .expect("meta.json parses");
    let lost: u64 = meta["lost"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
    assert_eq!(lost, 0, "events lost under the load: {meta}");
    eprintln!("checked the ring at {:.1} s", t0.elapsed().as_secs_f64());
    // No hang of the job's own threads, by tid, by process, or by creator.
    assert!(own.contains(&job_pid) && own.len() > 3, "{own:?}");
    for (hpid, htid, snap) in reported() {
        assert!(
            !own.contains(&htid) && hpid != job_pid,
            "the job reported its own thread {htid} (pid {hpid}) as hung"
        );
        let Ok(tables) = argus_sinks::read_snapshot_tables(&snap, false) else {
            continue; // an older snapshot, already rotated out (--keep)
        };
        if let Some(t) = tables.threads.iter().find(|t| t.tid.0 == htid) {
            assert!(
                t.pid.0 != job_pid && !t.parent.is_some_and(|p| own.contains(&p.0)),
                "the job reported a thread it created as hung: {t:?}"
            );
        }
    }
}

/// The job's own short-lived threads (a query's thread, a large snapshot's encoders) are
/// hidden from the trace once the recorder finds them, so the trace has their first records
/// and no exit: the job adds the exit when the recorder reports the thread gone. The test
/// makes such threads: a query connection every 0.7 s, each held 1.5 s (longer than the
/// recorder's look for new threads, 1 s at most). In the last snapshot of a run with a
/// snapshot every second, no thread of the job that was gone well before the end has an open
/// segment — hidden or never found alive —, and the long-lived ones the recorder hid are the
/// job's threads in the threads table.
#[test]
fn the_jobs_gone_threads_leave_no_open_segment() {
    if !live_or_skip("the_jobs_gone_threads_leave_no_open_segment") {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("job");
    let mut start = Guard(Some(
        argus()
            .args(["start", "-o"])
            .arg(&job)
            .args([
                "--snapshot-every",
                "1",
                "--duration",
                "14",
                "--retain",
                "60",
            ])
            // At the user's priority: a loaded test machine must not starve the job of the
            // snapshots (and their short-lived encoder threads) this test is about.
            .args(["--nice", "0"])
            .stderr(Stdio::null())
            .spawn()
            .expect("argus start runs"),
    ));
    let child = start.0.as_mut().expect("running");
    let job_pid = child.id() as i32;
    // Every thread of the job: first and last seen (trace clock), every 2 ms until it
    // exits.
    let mut seen = std::collections::BTreeMap::<i32, (u64, u64)>::new();
    // A loaded machine slows the job (it runs at nice 19 and catches up afterwards).
    let began = Instant::now();
    let deadline = began + Duration::from_secs(300);
    let sock = job.join("argus.sock");
    let mut clients: std::collections::VecDeque<(Instant, std::os::unix::net::UnixStream)> =
        Default::default();
    let mut next_client = began;
    while child.try_wait().expect("waiting").is_none() {
        // A query connection now and then (each served by a thread of the job), until 5 s
        // before the end.
        let now = Instant::now();
        if now >= next_client && now < began + Duration::from_secs(9) {
            next_client = now + Duration::from_millis(700);
            if let Ok(mut c) = std::os::unix::net::UnixStream::connect(&sock) {
                use std::io::{BufRead, Write};
                c.write_all(b"{\"v\":1,\"id\":1,\"op\":\"status\"}\n")
                    .expect("a request is sent");
                let mut line = String::new();
                std::io::BufReader::new(&c)
                    .read_line(&mut line)
                    .expect("the job answers");
                clients.push_back((now, c));
            }
        }
        while clients
            .front()
            .is_some_and(|(at, _)| at.elapsed() > Duration::from_millis(1500))
        {
            clients.pop_front();
        }
        assert!(
            Instant::now() < deadline,
            "argus start --duration 14 runs on"
        );
        let now = mono_ns();
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{job_pid}/task")) {
            for t in rd
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            {
                seen.entry(t).or_insert((now, now)).1 = now;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = start
        .0
        .take()
        .expect("ran")
        .wait_with_output()
        .expect("argus start exits");
    assert!(out.status.success(), "argus start: {:?}", out.status);
    let snap = latest(&job).expect("a last snapshot");
    let tables = argus_sinks::read_snapshot_tables(&snap, false).expect("the snapshot reads");
    // The end of tracing (meta.json): a thread alive then (the recorder's own readers, which
    // exit as it stops) rightly keeps its open segment.
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(job.join("trace").join("meta.json")).expect("meta.json"),
    )
    .expect("meta.json parses");
    let end = meta["end_ns"].as_u64().expect("end_ns");
    // The threads the recorder hid (meta.json `excluded_tids`): the trace cannot show their
    // exits. Those gone 1.5 s before the end: the recorder's look (250 ms) and the job's
    // release (a few ticks) have long passed.
    let hidden: Vec<i64> = meta["excluded_tids"]
        .as_array()
        .expect("excluded_tids")
        .iter()
        .filter_map(|t| t.as_i64())
        .collect();
    let gone_early: Vec<i32> = seen
        .iter()
        .filter(|(t, &(_, last))| last + 1_500_000_000 < end && hidden.contains(&i64::from(**t)))
        .map(|(&t, _)| t)
        .collect();
    let traced: Vec<i32> = gone_early
        .iter()
        .copied()
        .filter(|t| tables.segments.iter().any(|s| s.tid.0 == *t))
        .collect();
    assert!(
        traced.len() >= 2,
        "too few hidden threads of the job gone in the trace to tell: {} gone, {traced:?} traced",
        gone_early.len()
    );
    // Nor does any other thread of the job gone by then: those the recorder never found
    // alive were traced to their exit (they once kept open segments, when the recorder's
    // rewrites of its exclusion list made the kernel drop records: issue 16).
    let all_gone: Vec<i32> = seen
        .iter()
        .filter(|(_, &(_, last))| last + 1_500_000_000 < end)
        .map(|(&t, _)| t)
        .collect();
    let open: Vec<&argus_schema::Segment> = tables
        .segments
        .iter()
        .filter(|s| all_gone.contains(&s.tid.0) && s.end == argus_schema::EndCause::Open)
        .collect();
    assert!(
        open.is_empty(),
        "{} of the job's threads gone before {end} keep an open segment: {:?}",
        open.len(),
        open.iter()
            .map(|s| (s.tid.0, seen[&s.tid.0], s.start_ns.0))
            .collect::<Vec<_>>()
    );
    // Every thread the recorder hid is in the threads table as one of the job's, whoever
    // created it (a thread created by a hidden one looks like a process of its own).
    let hidden_threads: Vec<&argus_schema::ThreadInfo> = tables
        .threads
        .iter()
        .filter(|t| hidden.contains(&i64::from(t.tid.0)))
        .collect();
    assert!(hidden_threads.len() > 3, "{hidden_threads:?}");
    let others: Vec<_> = hidden_threads
        .iter()
        .filter(|t| t.pid.0 != job_pid)
        .collect();
    assert!(
        others.is_empty(),
        "job threads with another pid: {others:?}"
    );
}
