//! The always-on collector through the binary: kill -9 recovery, the ring's size cap,
//! `build --last` while recording, private files, and the `full` event families.

use crate::common::{live_or_skip, recording_lock, run};
use argus_schema::EventKind;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `argus record -o TRACE ARGS...` in the background (no duration, no command: the ring).
fn spawn_recorder(trace: &Path, args: &[&str]) -> Child {
    let child = crate::common::argus()
        .args(["record", "-o", path(trace)])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("argus record starts");
    // Recording has started once meta.json exists.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !trace.join("meta.json").exists() {
        assert!(Instant::now() < deadline, "argus record did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn meta(trace: &Path) -> Value {
    serde_json::from_slice(&fs::read(trace.join("meta.json")).expect("meta.json"))
        .expect("meta.json parses")
}

/// A syscall storm: `dd bs=1` makes two syscalls per byte.
fn storm(bytes: u64) {
    let status = Command::new("dd")
        .args([
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            &format!("count={bytes}"),
        ])
        .stderr(Stdio::null())
        .status()
        .expect("dd runs");
    assert!(status.success());
}

fn build(trace: &Path, snapshot: &Path, extra: &[&str]) -> String {
    let mut args = vec!["build", path(trace), "-o", path(snapshot)];
    args.extend_from_slice(extra);
    let out = run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "argus build failed: {stderr}");
    stderr
}

/// Chunk files of one CPU, in sequence order.
fn chunks(trace: &Path, cpu: u64) -> Vec<PathBuf> {
    let mut files: Vec<(u64, PathBuf)> = fs::read_dir(trace.join(format!("cpu{cpu}")))
        .expect("cpu dir")
        .map(|e| e.expect("entry").path())
        .filter_map(|p| {
            let seq = p
                .file_name()?
                .to_str()?
                .strip_suffix(".chunk.zst")?
                .parse()
                .ok()?;
            Some((seq, p))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn kill_9_keeps_every_completed_chunk_and_the_trace_builds() {
    if !live_or_skip("kill_9_keeps_every_completed_chunk_and_the_trace_builds") {
        return;
    }
    let _guard = recording_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let mut recorder = spawn_recorder(&trace, &["--flush-interval", "0.2"]);
    let pid = recorder.id();
    storm(400_000);
    std::thread::sleep(Duration::from_millis(500));
    recorder.kill().expect("SIGKILL");
    recorder.wait().expect("reaped");

    let m = meta(&trace);
    assert_eq!(m["status"], "recording");
    let page_size = m["page_size"].as_u64().expect("page_size") as usize;
    let mut pages = 0;
    for cpu in m["cpus"].as_array().expect("cpus") {
        let files = chunks(&trace, cpu.as_u64().expect("cpu"));
        let Some((_, completed)) = files.split_last() else {
            continue;
        };
        // Completed chunks decode whole: complete frames of whole pages.
        for f in completed {
            let bytes = zstd::decode_all(&fs::read(f).expect("chunk")[..])
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert!(
                !bytes.is_empty() && bytes.len() % page_size == 0,
                "{}",
                f.display()
            );
            pages += bytes.len() / page_size;
        }
    }
    assert!(
        pages > 100,
        "the storm should have filled several chunks ({pages} pages)"
    );

    // The stale trace builds: the newest chunks are recovered up to their last page.
    let snapshot = dir.path().join("snapshot");
    build(&trace, &snapshot, &[]);
    let snap = argus_sinks::read_snapshot(&snapshot).expect("snapshot");
    let events = snap.events.expect("events");
    assert!(events.len() > 100_000, "{} events", events.len());

    // The next recorder removes the dead one's tracefs instance.
    let stale = Path::new("/sys/kernel/tracing/instances").join(format!("argus-{pid}"));
    assert!(
        stale.exists(),
        "a SIGKILLed recorder cannot remove its instance"
    );
    let out = run(&[
        "record",
        "-o",
        path(&dir.path().join("next")),
        "--duration",
        "0.2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stale.exists(),
        "stale instance {} left behind",
        stale.display()
    );
}

#[test]
fn tiny_ring_stays_under_its_cap_and_builds() {
    if !live_or_skip("tiny_ring_stays_under_its_cap_and_builds") {
        return;
    }
    let _guard = recording_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let cap: u64 = 4 << 20;
    let out = run(&[
        "record",
        "-o",
        path(&trace),
        "--ring-size",
        "4M",
        "--buffer-kb",
        "16384",
        "--",
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=1",
        "count=1500000",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the ring deleted"), "{stderr}");
    let size = dir_size(&trace);
    assert!(size <= cap, "trace uses {size} bytes, cap {cap}");
    let m = meta(&trace);
    assert_eq!(m["status"], "complete");
    assert_eq!(m["ring"]["size"], cap);
    let dropped = m["ring"]["dropped"].as_object().expect("dropped per cpu");
    assert!(!dropped.is_empty(), "{m}");
    for (cpu, d) in dropped {
        let first = chunks(&trace, cpu.parse().expect("cpu"))[0].clone();
        let first_seq: u64 = first
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".chunk.zst"))
            .and_then(|n| n.parse().ok())
            .expect("seq");
        assert_eq!(Some(first_seq), d["chunks"].as_u64(), "cpu{cpu}");
        assert!(d["from_ns"].as_u64() <= d["until_ns"].as_u64());
    }
    // Files private, directories too.
    let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&trace), 0o700);
    assert_eq!(mode(&trace.join("cpu0")), 0o700);
    assert_eq!(mode(&trace.join("meta.json")), 0o600);
    assert_eq!(mode(&chunks(&trace, 0)[0]), 0o600);

    let snapshot = dir.path().join("snapshot");
    build(&trace, &snapshot, &[]);
    let snap = argus_sinks::read_snapshot(&snapshot).expect("snapshot");
    let events = snap.events.expect("events");
    let starts = m["ring"]["dropped"]
        .as_object()
        .expect("dropped")
        .values()
        .filter_map(|d| d["until_ns"].as_u64())
        .max()
        .expect("a start");
    assert!(!events.is_empty());
    assert!(
        events.iter().all(|e| e.ts.0 >= starts),
        "events before the point where every cpu is complete"
    );
}

#[test]
fn build_last_reads_the_tail_while_the_recorder_writes() {
    if !live_or_skip("build_last_reads_the_tail_while_the_recorder_writes") {
        return;
    }
    let _guard = recording_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let mut recorder = spawn_recorder(&trace, &["--flush-interval", "0.1"]);
    storm(200_000);
    std::thread::sleep(Duration::from_millis(1500));
    storm(50_000);
    std::thread::sleep(Duration::from_millis(300));
    let snapshot = dir.path().join("snapshot");
    build(&trace, &snapshot, &["--last", "1s"]);
    let whole = dir.path().join("whole");
    build(&trace, &whole, &[]);
    // SAFETY: kill has no memory-safety preconditions; the pid is our child.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGTERM) };
    let status = recorder.wait().expect("recorder exits");
    assert!(status.success(), "recorder exit {status:?}");
    assert_eq!(meta(&trace)["status"], "complete");

    let tail = argus_sinks::read_snapshot(&snapshot)
        .expect("tail snapshot")
        .events
        .expect("events");
    let all = argus_sinks::read_snapshot(&whole)
        .expect("whole snapshot")
        .events
        .expect("events");
    assert!(!tail.is_empty());
    assert!(tail.len() < all.len(), "{} of {}", tail.len(), all.len());
    let (first, last) = (tail[0].ts.0, tail[tail.len() - 1].ts.0);
    assert!(
        last - first <= 1_500_000_000,
        "window spans {} ns",
        last - first
    );
    for (i, e) in tail.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "events renumbered without gaps");
    }
}

#[test]
fn full_event_set_records_work_items_timers_and_signals() {
    if !live_or_skip("full_event_set_records_work_items_timers_and_signals") {
        return;
    }
    let _guard = recording_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    // sync and drop_caches queue kernel work; a child shell that handles SIGUSR1 gets one
    // (a signal whose default action kills may be delivered as SIGKILL instead: the kernel
    // turns a fatal signal into a group exit); the timer wheel is armed by the kernel all the
    // time (writeback, networking, delayed work).
    let script = "sh -c 'trap \"exit 0\" USR1; while :; do sleep 0.05; done' & p=$!; \
                  sleep 0.2; sync; echo 1 > /proc/sys/vm/drop_caches; \
                  kill -USR1 $p; wait $p; sleep 0.3; exit 0";
    let out = run(&[
        "record",
        "-o",
        path(&trace),
        "--events",
        "full",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = meta(&trace);
    let events: Vec<&str> = m["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for e in argus_ingest::linux::FULL_EXTRA_EVENTS {
        assert!(events.contains(e), "{e} not enabled");
    }
    let snapshot = dir.path().join("snapshot");
    build(&trace, &snapshot, &[]);
    let snap = argus_sinks::read_snapshot(&snapshot).expect("snapshot");
    let evs = snap.events.expect("events");
    let count = |f: fn(&EventKind) -> bool| evs.iter().filter(|e| f(&e.kind)).count();
    let queued = count(|k| matches!(k, EventKind::WorkQueue { .. }));
    let started = count(|k| matches!(k, EventKind::WorkStart { .. }));
    let ended = count(|k| matches!(k, EventKind::WorkEnd { .. }));
    let timers = count(|k| matches!(k, EventKind::TimerStart { .. }));
    let expired = count(|k| matches!(k, EventKind::TimerExpire { .. }));
    let generated = count(|k| matches!(k, EventKind::SignalGenerate { .. }));
    let delivered = count(|k| matches!(k, EventKind::SignalDeliver { .. }));
    let summary = format!(
        "work queue/start/end {queued}/{started}/{ended}, timer start/expire {timers}/{expired}, \
         signal generate/deliver {generated}/{delivered}"
    );
    assert!(queued > 0 && started > 0 && ended > 0, "{summary}");
    assert!(timers > 0 && expired > 0, "{summary}");
    assert!(generated > 0 && delivered > 0, "{summary}");
    // The USR1 itself: generated for the child shell and delivered to it.
    let usr1 = libc::SIGUSR1;
    assert!(
        evs.iter()
            .any(|e| matches!(&e.kind, EventKind::SignalGenerate { sig, .. } if *sig == usr1)),
        "no SIGUSR1 generated; {summary}"
    );
    assert!(
        evs.iter()
            .any(|e| matches!(&e.kind, EventKind::SignalDeliver { sig, .. } if *sig == usr1)),
        "no SIGUSR1 delivered; {summary}"
    );
}

#[test]
fn bad_flags_are_refused_with_clear_messages() {
    let out = run(&["record", "-o", "/nonexistent/x", "--ring-size", "2X"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
    let out = run(&[
        "build",
        "/nonexistent/x",
        "-o",
        "/tmp/y",
        "--last",
        "5 parsecs",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
    let out = run(&["record", "-o", "/nonexistent/x", "--events", "sched"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not of the form system/event"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
