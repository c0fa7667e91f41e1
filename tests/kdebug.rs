//! macOS kdebug traces (issue 19): the live chain recording translated into the kdebug
//! events xnu records for the same behaviour (`argus_testkit::kdebug`), written as
//! `RAW_VERSION1`, `RAW_VERSION2` and V3 files, imported, built and diagnosed: the hang and
//! root cause are `argus record`'s.

use crate::common::{
    build_refuses_with_offset, build_snapshot, chain, debug_json, run, same_chain_diagnosis,
};
use argus_ingest::import::kdebug::KdVersion;
use argus_ingest::import::ImportFormat;
use argus_ingest::macos::{KdebugConfig, Replay};
use argus_schema::{Event, EventKind};
use argus_testkit::kdebug::{from_linux, TID_OFFSET};

/// The chain's events and threads, as `argus build` reads them.
fn chain_events() -> (Vec<Event>, Vec<argus_schema::ThreadInfo>) {
    let rec = chain();
    let reader = argus_ingest::replay::TraceReader::open(&rec.trace).expect("the trace opens");
    let mut evs = reader.events();
    let events: Vec<Event> = (&mut evs)
        .map(|e| e.expect("the chain trace decodes"))
        .collect();
    let summary = evs.finish();
    (events, summary.threads)
}

#[test]
fn the_chain_as_kdebug_v1_v2_v3_gives_argus_records_root_cause() {
    if !crate::common::live_or_skip("the_chain_as_kdebug_v1_v2_v3_gives_argus_records_root_cause") {
        return;
    }
    let rec = chain();
    let (code, want) = debug_json(&rec.snapshot, rec.pid);
    assert_eq!(code, 1, "{want:#}");
    let (events, threads) = chain_events();
    let kd = from_linux(&events, &threads);
    let switches = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Switch { .. }))
        .count() as u64;
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        ("V1", kd.write(KdVersion::V1)),
        ("V2", kd.write(KdVersion::V2)),
        ("V3", kd.write(KdVersion::V3)),
        ("V3 stream", kd.write_stream()),
    ];
    for (what, bytes) in files {
        let file = dir.path().join(format!("chain-{what}.ktrace"));
        std::fs::write(&file, bytes).expect("write");
        let imported = argus_ingest::import::open(&file).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(imported.format(), ImportFormat::Kdebug);
        assert!(imported.errors().is_empty(), "{what}");
        assert_eq!(
            imported.kind_counts().get("switch").copied().unwrap_or(0),
            switches,
            "{what}: every switch"
        );
        // Every thread keeps its process and name.
        for t in threads.iter().filter(|t| t.tid.0 != 0) {
            let got = imported
                .threads()
                .iter()
                .find(|g| g.tid.0 as u64 == t.tid.0 as u64 + TID_OFFSET)
                .unwrap_or_else(|| panic!("{what}: thread {} imported", t.tid.0));
            // Kernel threads are kernel_task's on macOS: each its own task here.
            if t.kernel {
                assert!(got.kernel && got.pid.0 == got.tid.0, "{what}: {got:?}");
            } else {
                assert_eq!(got.pid, t.pid, "{what}: {got:?}");
            }
            assert_eq!(got.comm, t.comm, "{what}: {got:?}");
        }

        let snap = dir.path().join(format!("snap-{what}"));
        build_snapshot(&file, &snap, &[]);
        let (code, got) = debug_json(&snap, rec.pid);
        assert_eq!(code, 1, "{what}: a hang was diagnosed: {got:#}");
        same_chain_diagnosis(&got, &want, rec.pid as u64 + TID_OFFSET, what);
        // The waits keep their macOS names (the translation made the main thread's futex
        // wait an `__ulock_wait`, sleep's `clock_nanosleep` a `__semwait_signal`).
        let named = |r: &serde_json::Value| {
            let root = r["root_causes"].as_array().and_then(|c| c.last()).cloned();
            (
                r["hang"]["wait_syscall"].as_str().map(String::from),
                root.and_then(|c| c["finding"]["syscall"].as_str().map(String::from)),
            )
        };
        let (hang_wait, root_sleep) = named(&want);
        assert_eq!(hang_wait.as_deref(), Some("futex"), "{want:#}");
        assert!(
            root_sleep.is_some_and(|s| s.ends_with("nanosleep")),
            "{want:#}"
        );
        assert_eq!(
            named(&got),
            (Some("ulock_wait".into()), Some("semwait_signal".into())),
            "{what}: {got:#}"
        );
        // Named by its thread's name, the hang is the same: the main thread of a macOS
        // process is not numbered as its pid, and is found anyway.
        let out = run(&[
            "debug",
            snap.to_str().expect("utf-8"),
            "--comm",
            "argus-hang-main",
            "--auto",
            "--json",
        ]);
        let by_name: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("debug --comm prints a report");
        assert_eq!(by_name["hang"], got["hang"], "{what}");
    }
}

/// The macOS collector (`argus_ingest::macos::record`) driven by a replay of the chain's kdebug
/// translation writes a trace directory (a ring of V3 chunk files) that `argus build` reads
/// and `argus debug` diagnoses as `argus record`'s trace; a damaged file before the last is
/// refused naming it (exit 2).
#[test]
fn the_collector_replaying_the_chain_writes_a_trace_that_diagnoses_the_same() {
    if !crate::common::live_or_skip(
        "the_collector_replaying_the_chain_writes_a_trace_that_diagnoses_the_same",
    ) {
        return;
    }
    let rec = chain();
    let (code, want) = debug_json(&rec.snapshot, rec.pid);
    assert_eq!(code, 1, "{want:#}");
    let (events, threads) = chain_events();
    let bytes = from_linux(&events, &threads).write(KdVersion::V3);
    let kd = argus_ingest::import::kdebug::parse(std::path::Path::new("chain.ktrace"), &bytes)
        .expect("the translation decodes");
    let mut replay = Replay::new(&kd);
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let mut cfg = KdebugConfig::new(&trace);
    // Small enough for a ring of several chunks whatever the recording's size (a quiet
    // machine records a few thousand events, which compress well): a quarter of the
    // stream's compressed size, written in frames of 5 ms of virtual time.
    let compressed = zstd::encode_all(&bytes[..], 3).expect("zstd").len() as u64;
    cfg.chunk_bytes = (compressed / 4).max(1 << 10);
    cfg.interval = std::time::Duration::from_millis(5);
    let done = replay.done();
    let summary = argus_ingest::macos::record(&mut replay, &cfg, &move || {
        done.load(std::sync::atomic::Ordering::SeqCst)
    })
    .expect("the collector records the replay");
    assert_eq!(summary.events, kd.events.len() as u64);
    assert!(summary.lost.is_empty(), "{:?}", summary.lost);
    assert!(summary.chunks >= 2, "{summary:?}");

    let snap = dir.path().join("snap");
    build_snapshot(&trace, &snap, &[]);
    let (code, got) = debug_json(&snap, rec.pid);
    assert_eq!(code, 1, "a hang was diagnosed: {got:#}");
    same_chain_diagnosis(&got, &want, rec.pid as u64 + TID_OFFSET, "collector");

    let first = argus_ingest::tracedir::kdebug_path(&trace, 0);
    std::fs::write(&first, b"not zstd").expect("damage");
    let out = run(&[
        "build",
        trace.to_str().expect("utf-8"),
        "-o",
        dir.path().join("snap2").to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(first.to_str().expect("utf-8")), "{stderr}");
}

/// A kdebug file cut short is refused by `argus build` with its name and an offset inside
/// what is left (exit 2, no snapshot).
#[test]
fn a_truncated_ktrace_names_file_and_offset() {
    if !crate::common::live_or_skip("a_truncated_ktrace_names_file_and_offset") {
        return;
    }
    let (events, threads) = chain_events();
    let bytes = from_linux(&events, &threads).write(KdVersion::V3);
    let dir = tempfile::tempdir().expect("tempdir");
    for cut in [100, bytes.len() / 2 + 13] {
        let file = dir.path().join(format!("cut-{cut}.ktrace"));
        std::fs::write(&file, &bytes[..cut]).expect("write");
        build_refuses_with_offset(&file, &dir.path().join(format!("snap-{cut}")), cut as u64);
    }
}

/// Real `kd_buf` records captured on iOS devices, as written in the tests of
/// matan1008/pykdebugparser @2da81e77 (MIT licence, © 2021 Matan Perelman):
/// `tests/traces/test_mach.py` (`test_mach_sched`, `test_mach_stkhandoff`,
/// `test_mach_mkrunnable`, `test_mach_idle`, `test_mach_wait`, `test_mach_dispatch`) and
/// `tests/traces/test_turnstile.py` (`test_turnstile_waitq_add_thread_priority_queue`: a
/// thread queued on a turnstile, whose owner the record does not name) and
/// `tests/test_pykdebugparser.py` (`test_kevents`: a `BSC` code-202 END). Each is
/// `(timestamp, [arg1..arg4], tid, debugid)`; the tests give no CPU (0 here).
const REAL_RECORDS: &[(u64, [u64; 4], u64, u32)] = &[
    (
        7_476_381_345,
        [9_311_246_762_178_912_673, 7569, 37, 0],
        7569,
        890_241_028,
    ),
    (3_897_242_679_331, [5, 324_983, 55, 63], 2761, 20_971_528),
    (
        4_365_975_502_717,
        [8_476_009_773_746_460_953, 0, 0, 0],
        884,
        20_971_584,
    ),
    (4_440_978_834_382, [332, 0, 132, 3], 261, 20_971_648),
    (4_580_000_449_861, [1, 623, 4, 81], 387_391, 20_971_520),
    (7_006_015_729_829, [0, 0, 0, 454], 645_241, 67_896_106),
    (9_982_171_649_633, [439, 81, 0, 8], 261, 20_971_544),
    (10_071_358_928_388, [0, 0, 0, 0], 332, 20_971_557),
    (10_071_358_928_416, [831_908, 241, 3, 0], 332, 27_852_808),
    (10_071_358_928_432, [0, 6, 831_908, 0], 332, 20_971_558),
];

/// The real records as a `RAW_VERSION2` file (LP64, 24 MHz) with a thread map of their
/// threads.
fn real_records_v2() -> Vec<u8> {
    let kd = argus_testkit::kdebug::KdTrace {
        threads: vec![
            argus_ingest::import::kdebug::KdThread {
                tid: 387_391,
                pid: 812,
                command: "SpringBoard".into(),
            },
            argus_ingest::import::kdebug::KdThread {
                tid: 261,
                pid: 0,
                command: "kernel_task".into(),
            },
        ],
        events: REAL_RECORDS
            .iter()
            .map(
                |&(ts, args, tid, debugid)| argus_ingest::import::kdebug::KdEvent {
                    offset: 0,
                    timestamp: ts,
                    args,
                    tid,
                    debugid,
                    cpu: 0,
                },
            )
            .collect(),
        ..Default::default()
    };
    kd.write_raw(KdVersion::V2)
}

/// Runs `scripts/kdebug-oracle` (pykdebugparser) on `file`.
fn oracle(python: &std::path::Path, file: &std::path::Path) -> serde_json::Value {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(python)
        .arg(root.join("scripts/kdebug-oracle"))
        .arg(file)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the oracle's JSON")
}

/// PyPI's pykdebugparser, an independent decoder (pymobiledevice3 reads iOS kdebug streams
/// with it), reads the V2 test vectors as Argus does: the live chain's translation and the
/// real iOS records of its own tests, event for event and thread for thread; and every BSD
/// syscall code of Argus's table is named and numbered as in the trace.codes it ships.
#[test]
fn pykdebugparser_reads_the_test_vectors_as_argus_does() {
    let test = "pykdebugparser_reads_the_test_vectors_as_argus_does";
    if !crate::common::live_or_skip(test) {
        return;
    }
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = match crate::common::venv_python(&root.join("python/kdebug-requirements.txt")) {
        Ok(p) => p,
        Err(why) => {
            argus_testkit::skip(
                test,
                &format!("no Python environment with pykdebugparser ({why})"),
                argus_testkit::REQUIRE_LIVE,
            );
            return;
        }
    };
    let (events, threads) = chain_events();
    let dir = tempfile::tempdir().expect("tempdir");
    let kd = from_linux(&events, &threads);
    let vectors = [
        ("chain", kd.write(KdVersion::V2)),
        ("chain V3 stream", kd.write_stream()),
        ("real records", real_records_v2()),
    ];
    let mut codes_checked = false;
    for (what, bytes) in vectors {
        let file = dir.path().join(format!("{what}.trace"));
        std::fs::write(&file, &bytes).expect("write");
        let want = oracle(&python, &file);
        let kd = argus_ingest::import::kdebug::parse(&file, &bytes).expect("Argus decodes it");
        let got: Vec<Vec<u64>> = kd
            .events
            .iter()
            .map(|e| {
                let [a, b, c, d] = e.args;
                vec![e.timestamp, a, b, c, d, e.tid, u64::from(e.debugid)]
            })
            .collect();
        let want_events: Vec<Vec<u64>> =
            serde_json::from_value(want["events"].clone()).expect("events");
        assert!(!got.is_empty(), "{what}");
        assert_eq!(got.len(), want_events.len(), "{what}: as many events");
        for (i, (g, w)) in got.iter().zip(&want_events).enumerate() {
            assert_eq!(g, w, "{what}: event {i}");
        }
        let mut want_threads: Vec<(u64, i64)> = want["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .map(|t| (t[0].as_u64().expect("tid"), t[1].as_i64().expect("pid")))
            .collect();
        want_threads.sort_unstable();
        let mut got_threads: Vec<(u64, i64)> = kd
            .threads
            .iter()
            .map(|t| (t.tid, i64::from(t.pid)))
            .collect();
        got_threads.sort_unstable();
        assert_eq!(got_threads, want_threads, "{what}: the thread map");
        if !codes_checked {
            let bsd = &want["bsd_codes"];
            for s in argus_ingest::import::kdebug::codes::BSD {
                assert_eq!(
                    bsd[s.name].as_u64(),
                    Some(u64::from(argus_ingest::import::kdebug::codes::eventid(s))),
                    "{}",
                    s.name
                );
            }
            codes_checked = true;
        }
    }
}

/// The real iOS records map as their meaning says: a preemption by `MACH_SCHED` (no wait
/// asserted: runnable), a stack handoff, a wake-up of 439 by 261, an idle thread (332, which
/// says `MACH_IDLE`) as tid 0, `MACH_WAIT` making its thread's next switch a blocking one.
#[test]
fn real_ios_records_map_to_switches_and_a_wake_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("real.trace");
    std::fs::write(&file, real_records_v2()).expect("write");
    let imported = argus_ingest::import::open(&file).expect("imports");
    assert_eq!(imported.format(), ImportFormat::Kdebug);
    let kinds: Vec<(i32, &EventKind)> = imported
        .event_slice()
        .iter()
        .map(|e| (e.tid.0, &e.kind))
        .collect();
    use argus_schema::{TaskState, Tid};
    assert!(kinds.contains(&(
        2761,
        &EventKind::Switch {
            prev: Tid(2761),
            prev_state: TaskState::RUNNABLE,
            next: Tid(324_983)
        }
    )));
    assert!(kinds.contains(&(
        387_391,
        &EventKind::Switch {
            prev: Tid(387_391),
            prev_state: TaskState::RUNNABLE,
            next: Tid(623)
        }
    )));
    assert!(kinds.contains(&(261, &EventKind::Waking { target: Tid(439) })));
    // The idle thread's own records are tid 0's; nothing is left as thread 332.
    assert!(kinds.iter().all(|(t, _)| *t != 332));
    // A thread queued on a turnstile that names no owner in the trace names none.
    assert!(!kinds
        .iter()
        .any(|(_, k)| matches!(k, EventKind::LockOwner { .. })));
    let springboard = imported
        .threads()
        .iter()
        .find(|t| t.tid.0 == 387_391)
        .expect("SpringBoard's thread");
    assert_eq!(
        (springboard.pid.0, springboard.process.as_str()),
        (812, "SpringBoard")
    );
}

/// libdispatch's work items (its introspection build's `DISPATCH_QOS_TRACE_*` records): a
/// function pushed by one thread and popped, run and completed by a worker is a kernel-style
/// work item — the worker's work-item segment (with the function pushed), and a queue edge
/// from the pusher's segment to it, as for a kernel work queue.
#[test]
fn dispatch_work_items_are_queued_work_with_a_queue_edge() {
    use argus_ingest::import::kdebug::codes;
    const ITEM: u64 = 0x6000_0123_4560;
    const FUNCTION: u64 = 0x1_0000_3f00;
    let ev = |timestamp: u64, tid: u64, debugid: u32, cpu: u32, args: [u64; 4]| {
        argus_ingest::import::kdebug::KdEvent {
            offset: 0,
            timestamp,
            args,
            tid,
            debugid,
            cpu,
        }
    };
    let kd = argus_testkit::kdebug::KdTrace {
        threads: vec![
            argus_ingest::import::kdebug::KdThread {
                tid: 1001,
                pid: 500,
                command: "Mail".into(),
            },
            argus_ingest::import::kdebug::KdThread {
                tid: 1002,
                pid: 500,
                command: "Mail".into(),
            },
        ],
        events: vec![
            ev(
                1_000,
                1001,
                codes::DISPATCH_PUSH_F,
                0,
                [ITEM, FUNCTION, 7 << 32, 0],
            ),
            ev(2_000, 1002, codes::DISPATCH_POP, 1, [ITEM, 0, 7, 0]),
            ev(90_000, 1002, codes::DISPATCH_COMPLETE, 1, [ITEM, 0, 0, 0]),
            ev(
                95_000,
                1001,
                codes::DISPATCH_PUSH_AB,
                0,
                [ITEM + 64, FUNCTION, 7 << 32, 0],
            ),
        ],
        ..Default::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dispatch.trace");
    std::fs::write(&file, kd.write_raw(KdVersion::V2)).expect("write");
    let snap = dir.path().join("snap");
    build_snapshot(&file, &snap, &[]);
    let s = argus_sinks::read_snapshot(&snap).expect("the snapshot reads");
    let kinds: Vec<(i32, &EventKind)> = s
        .events
        .as_ref()
        .expect("events")
        .iter()
        .map(|e| (e.tid.0, &e.kind))
        .collect();
    assert!(kinds.contains(&(
        1001,
        &EventKind::WorkQueue {
            work: ITEM,
            function: FUNCTION
        }
    )));
    assert!(kinds.contains(&(
        1002,
        &EventKind::WorkStart {
            work: ITEM,
            function: FUNCTION
        }
    )));
    assert!(kinds.contains(&(1002, &EventKind::WorkEnd { work: ITEM })));
    let item = s
        .segments
        .iter()
        .find(|g| {
            g.tid.0 == 1002
                && g.kind
                    == argus_schema::SegmentKind::WorkItem {
                        work: ITEM,
                        function: FUNCTION,
                    }
        })
        .unwrap_or_else(|| panic!("the worker's work item: {:#?}", s.segments));
    let queued: Vec<_> = s
        .edges
        .iter()
        .filter(|e| e.kind == argus_schema::EdgeKind::Queue && e.dst == item.id)
        .map(|e| e.src.tid().0)
        .collect();
    assert_eq!(queued, vec![1001], "{:#?}", s.edges);
}
