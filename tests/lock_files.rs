//! File locks of real programs, recorded live from a shell script whose processes print
//! their pids (the ground truth by construction): the build makes every lock-file edge once,
//! and the diagnosis of the waiting program names the process that held the lock.

use crate::common::{debug_json_with, installed, live_or_skip, recording_lock, run, trace_events};
use argus_schema::{EventKind, Pid};
use argus_testkit::{skip, REQUIRE_LIVE};
use std::process::Command;

/// An `sqlite3` shell in WAL mode inserts a row every 10 ms with a 5 s busy timeout; after
/// 0.4 s a `python3` process takes the write lock (`BEGIN IMMEDIATE`) and holds it for 0.3 s.
/// The shell's busy handler retries between sleeps: each turn takes a read-mark byte of the
/// `-shm` file (granted), is refused the write byte and sleeps. Those two locks on one inode
/// made the lock-file rule link the python's lock into the same turn twice, and the build
/// failed ("the dataflow's edges are inconsistent … count 2").
// See: issue 42 (part 5).
#[test]
fn gh_42_sqlite_wal_busy_retry_builds_and_blames_the_writer() {
    const TEST: &str = "gh_42_sqlite_wal_busy_retry_builds_and_blames_the_writer";
    if !live_or_skip(TEST) {
        return;
    }
    for prog in ["sqlite3", "python3", "sh", "seq", "sleep"] {
        if !installed(prog) {
            skip(TEST, &format!("{prog} is not installed"), REQUIRE_LIVE);
            return;
        }
    }
    let module = Command::new("python3")
        .args(["-c", "import sqlite3"])
        .status();
    if !module.is_ok_and(|s| s.success()) {
        skip(TEST, "python3 has no sqlite3 module", REQUIRE_LIVE);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let db = db.to_str().expect("utf-8 path");
    let created = Command::new("sqlite3")
        .args([db, "PRAGMA journal_mode=WAL; CREATE TABLE t(v int);"])
        .output()
        .expect("sqlite3 runs");
    assert!(
        created.status.success(),
        "creating the database: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    // The issue's script, with the pids printed: `$!` of a pipeline is its last process.
    let script = format!(
        r#"( for i in $(seq 1 80); do echo "INSERT INTO t VALUES ($i);"; sleep 0.01; done ) | sqlite3 -cmd '.timeout 5000' {db} &
echo "sqlite3 $!"
sleep 0.4; python3 -c "import os, sqlite3, time; print('python3', os.getpid(), flush=True); db = sqlite3.connect('{db}', isolation_level=None); db.execute('BEGIN IMMEDIATE'); db.execute('INSERT INTO t VALUES (-1)'); time.sleep(0.3); db.execute('COMMIT')"; wait"#
    );
    let trace = dir.path().join("trace");
    let trace_s = trace.to_str().expect("utf-8 path");
    let out = {
        let _guard = recording_lock();
        run(&["record", "-o", trace_s, "--", "sh", "-c", &script])
    };
    assert!(
        out.status.success(),
        "argus record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pid_of = |name: &str| -> i32 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("the script printed no {name} pid: {stdout}"))
    };
    let (shell, writer) = (pid_of("sqlite3 "), pid_of("python3 "));

    // The scenario happened: the shell was refused a lock the writer held (else the test
    // would pass without exercising anything).
    let evs = trace_events(&trace);
    let refused = |pid: i32| {
        evs.iter()
            .filter(|e| {
                e.pid == Pid(pid) && matches!(e.kind, EventKind::FileLock { ret: -11 | -13, .. })
            })
            .count()
    };
    let granted = |pid: i32| {
        evs.iter().any(|e| {
            e.pid == Pid(pid)
                && matches!(
                    e.kind,
                    EventKind::FileLock {
                        lock_type: 1,
                        ret: 0,
                        ..
                    }
                )
        })
    };
    assert!(
        refused(shell) >= 2 && granted(writer),
        "sqlite3 {shell} was refused {} locks, python3 {writer} granted a write lock: {}",
        refused(shell),
        granted(writer)
    );

    for workers in ["1", "2"] {
        let snapshot = dir.path().join(format!("snapshot-{workers}"));
        let snapshot_s = snapshot.to_str().expect("utf-8 path");
        let out = run(&["build", trace_s, "-o", snapshot_s, "--workers", workers]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "argus build failed: {stderr}");
        assert!(
            !stderr.contains("other than exactly once"),
            "the build made records twice ({workers} workers): {stderr}"
        );

        // The shell's hang (0.3 s of retries, so a 0.1 s threshold) is a polling loop, and
        // its root cause the writer that held the lock.
        let (code, report) = debug_json_with(&snapshot, shell, &["--threshold", "0.1"]);
        assert_eq!(code, 1, "a hang is found: {report:#}");
        assert_eq!(report["hang"]["pid"].as_i64(), Some(i64::from(shell)));
        assert_eq!(report["hang"]["class"], "RepeatedYield", "{report:#}");
        let root = report["root_causes"]
            .as_array()
            .and_then(|r| r.last())
            .unwrap_or_else(|| panic!("no root cause: {report:#}"));
        assert_eq!(
            (root["pid"].as_i64(), root["comm"].as_str()),
            (Some(i64::from(writer)), Some("python3")),
            "the root cause is the python3 writer {writer}: {report:#}"
        );
    }
}
