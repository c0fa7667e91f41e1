//! Lock owners the kernel names (`lock_owner` events and edges): a hang on a lock still held
//! when the trace ends is explained by what the owner did — down a chain of owners — on
//! Linux (priority-inheritance futexes, `sched_pi_setprio`) and in the kdebug translation of
//! the same recording (turnstile inheritors).

use crate::common::{argus, build_snapshot, debug_json, live_or_skip, recording_lock, wait_for};
use argus_ingest::import::kdebug::KdVersion;
use argus_schema::{EdgeKind, Event, EventKind, Strength, Tid};
use argus_testkit::kdebug::{from_linux, TID_OFFSET};
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The root cause's thread, class and name (the last root cause: the summary's "Root
/// cause", the others "also implicated"), and the tids on the path.
fn verdict(r: &Value) -> (u64, String, String, Vec<u64>) {
    let roots = r["root_causes"].as_array().expect("root causes");
    let root = roots.last().expect("a root cause");
    let path = r["path"]
        .as_array()
        .map(|p| p.iter().filter_map(|i| i["tid"].as_u64()).collect())
        .unwrap_or_default();
    (
        root["tid"].as_u64().unwrap_or(0),
        root["class"].as_str().unwrap_or("").to_string(),
        root["comm"].as_str().unwrap_or("").to_string(),
        path,
    )
}

/// A system-wide recording of 6 s; `argus workload pi-lock` starts inside it and still hangs
/// when it ends (its spinner computes for 60 s): the main thread blocked on lock A, held by
/// `argus-holder`, blocked on lock B, held by `argus-spinner`, computing. No wake-up ends
/// either wait inside the trace, so only the owners the kernel named (the waiters'
/// `sched_pi_setprio` records) say who the main thread waits for.
#[test]
fn a_hang_on_a_lock_still_held_blames_the_end_of_the_owner_chain() {
    if !live_or_skip("a_hang_on_a_lock_still_held_blames_the_end_of_the_owner_chain") {
        return;
    }
    let _guard = recording_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let mut recorder = argus()
        .args(["record", "-q", "--duration", "6", "-o"])
        .arg(&trace)
        .spawn()
        .expect("argus record runs");
    wait_for("the recording to start", Duration::from_secs(30), || {
        let m: Value =
            serde_json::from_slice(&std::fs::read(trace.join("meta.json")).ok()?).ok()?;
        (m["status"] == "recording").then_some(())
    });
    let mut workload = argus()
        .args(["workload", "pi-lock", "--secs", "60"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the workload runs");
    let pid = workload.id() as i32;
    let mut line = String::new();
    std::io::BufReader::new(workload.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the workload's line");
    let truth: Value = serde_json::from_str(&line).expect("the workload's JSON line");
    let status = recorder.wait().expect("argus record ends");
    let _ = workload.kill();
    let _ = workload.wait();
    assert!(status.success(), "argus record failed");
    let tid = |k: &str| truth[k].as_i64().expect("a tid") as i32;
    let (main, holder, spinner) = (tid("main_tid"), tid("holder_tid"), tid("spinner_tid"));

    // The kernel named each owner in its waiter's context, and the graph holds the edges.
    let snapshot = dir.path().join("snapshot");
    build_snapshot(&trace, &snapshot, &[]);
    let snap = argus_sinks::read_snapshot(&snapshot).expect("the snapshot reads");
    let events = snap.events.clone().expect("events");
    let owner_events: Vec<(i32, i32)> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::LockOwner { owner, .. } => Some((e.tid.0, owner.0)),
            _ => None,
        })
        .collect();
    for pair in [(holder, spinner), (main, holder)] {
        assert!(
            owner_events.contains(&pair),
            "{pair:?} among the lock owners {owner_events:?}"
        );
    }
    let owner_edges: Vec<(i32, i32)> = snap
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::LockOwner)
        .inspect(|e| assert_eq!(e.strength, Strength::Strong))
        .map(|e| (e.dst.tid().0, e.src.tid().0))
        .collect();
    for pair in [(holder, spinner), (main, holder)] {
        assert!(owner_edges.contains(&pair), "{pair:?} in {owner_edges:?}");
    }

    // The diagnosis walks the owners to the spinner.
    let (code, r) = debug_json(&snapshot, pid);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["hang"]["tid"], main as u64, "{r:#}");
    assert_eq!(r["hang"]["class"], "LongWait", "{r:#}");
    let (root, class, comm, path) = verdict(&r);
    assert_eq!(
        (root, class.as_str(), comm.as_str()),
        (spinner as u64, "LongRunning", "argus-spinner"),
        "{r:#}"
    );
    assert!(
        path.contains(&(holder as u64)),
        "the holder on the path: {r:#}"
    );

    // The same recording as macOS records it: turnstiles pushing on their owners.
    let reader = argus_ingest::replay::TraceReader::open(&trace).expect("the trace opens");
    let mut evs = reader.events();
    let linux: Vec<Event> = (&mut evs).map(|e| e.expect("decodes")).collect();
    let threads = evs.finish().threads;
    let file = dir.path().join("pi-lock.ktrace");
    std::fs::write(&file, from_linux(&linux, &threads).write(KdVersion::V3)).expect("write");
    let kd_snap = dir.path().join("kd-snapshot");
    build_snapshot(&file, &kd_snap, &[]);
    let (code, kr) = debug_json(&kd_snap, pid);
    assert_eq!(code, 1, "{kr:#}");
    assert_eq!(kr["hang"]["tid"], main as u64 + TID_OFFSET, "{kr:#}");
    let (root, class, comm, path) = verdict(&kr);
    assert_eq!(
        (root, class.as_str(), comm.as_str()),
        (spinner as u64 + TID_OFFSET, "LongRunning", "argus-spinner"),
        "{kr:#}"
    );
    assert!(path.contains(&(holder as u64 + TID_OFFSET)), "{kr:#}");
    let kd_owners = lock_owner_events(&kd_snap);
    assert!(
        kd_owners.contains(&(
            Tid(main + TID_OFFSET as i32),
            Tid(holder + TID_OFFSET as i32)
        )),
        "{kd_owners:?}"
    );
}

/// The (waiter, owner) pairs of a snapshot's lock-owner events.
fn lock_owner_events(snapshot: &Path) -> Vec<(Tid, Tid)> {
    argus_sinks::read_snapshot(snapshot)
        .expect("the snapshot reads")
        .events
        .expect("events")
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::LockOwner { owner, .. } => Some((e.tid, owner)),
            _ => None,
        })
        .collect()
}

/// The same chain released inside the trace (`argus record -- argus workload pi-lock --secs 3`):
/// each waiter is woken by the futex unlock of the owner the kernel named for its lock, a
/// wake-up that alone looks like mere mutual exclusion (weak); with the owner named it is the
/// release, so the walk asks nothing on its way to the spinner.
#[test]
fn a_released_chain_of_locks_is_followed_without_questions() {
    if !live_or_skip("a_released_chain_of_locks_is_followed_without_questions") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let rec = crate::common::record_command(&[exe, "workload", "pi-lock", "--secs", "3"]);
    let (code, r) = debug_json(&rec.snapshot, rec.pid);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["hang"]["tid"], rec.truth["main_tid"], "{r:#}");
    let (root, class, comm, path) = verdict(&r);
    assert_eq!(
        (root, class.as_str(), comm.as_str()),
        (
            rec.truth["spinner_tid"].as_u64().expect("a tid"),
            "LongRunning",
            "argus-spinner"
        ),
        "{r:#}"
    );
    let holder = rec.truth["holder_tid"].as_u64().expect("a tid");
    assert!(path.contains(&holder), "{r:#}");
    assert_eq!(r["questions"].as_array().map(Vec::len), Some(0), "{r:#}");
}
