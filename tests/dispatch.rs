//! Live tests of `argus record --dispatch BINARY:SYMBOL`: a uprobe and a uretprobe on the
//! dispatch function become `argus:dispatch-begin/end SYMBOL` markers of the calling thread,
//! and each call is its own `work_item` segment.

use crate::common::{build_snapshot, live_or_skip, recorded_truth, recording_lock, run};
use argus_ingest::replay::TraceReader;
use argus_schema::{EventKind, Nanos, SegmentKind, Tid};
use serde_json::Value;

const SYMBOL: &str = "argus_dispatch_job";
const UPROBE_EVENTS: &str = "/sys/kernel/tracing/uprobe_events";

#[test]
fn dispatch_probes_make_one_callout_per_job() {
    if !live_or_skip("dispatch_probes_make_one_callout_per_job") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let snap = dir.path().join("snap");
    let exe = env!("CARGO_BIN_EXE_argus");
    let spec = format!("{exe}:{SYMBOL}");
    // A probe left behind by a recorder that died (its pid is gone): removed at start.
    let dead = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let dead_pid = dead.id();
    let _ = { dead }.wait();
    let offset =
        argus_ingest::linux::symbol_file_offset(&std::fs::read(exe).expect("read argus"), SYMBOL)
            .expect("symbol offset");
    let stale = format!("argus_{dead_pid}/dispatch_0");
    let out = {
        let _guard = recording_lock();
        std::fs::OpenOptions::new()
            .append(true)
            .open(UPROBE_EVENTS)
            .and_then(|mut f| {
                std::io::Write::write_all(
                    &mut f,
                    format!("p:{stale} {exe}:{offset:#x}\n").as_bytes(),
                )
            })
            .expect("define a stale probe");
        run(&[
            "record",
            "-o",
            trace.to_str().expect("utf-8"),
            "--dispatch",
            &spec,
            "--",
            exe,
            "workload",
            "dispatch",
            "--secs",
            "0.5",
        ])
    };
    let truth = recorded_truth(&out);
    let loop_tid = Tid(truth["loop_tid"].as_i64().expect("loop_tid") as i32);
    let jobs = truth["jobs"].as_u64().expect("jobs") as usize;
    assert_eq!(truth["blocking_jobs"].as_array().map(Vec::len), Some(3));

    // The probes are gone from the global uprobe_events, and so is the stale one.
    let probes = std::fs::read_to_string(UPROBE_EVENTS).unwrap_or_default();
    assert!(!probes.contains(&stale), "stale probe kept: {probes}");
    let group = format!("argus_{}", truth_recorder_pid(&trace));
    assert!(
        !probes.contains(&format!("{group}/")),
        "probes of {group} left behind: {probes}"
    );

    // Decoded: one begin and one end per job, all in the loop thread, alternating.
    let begin = format!("argus:dispatch-begin {SYMBOL}");
    let end = format!("argus:dispatch-end {SYMBOL}");
    let reader = TraceReader::open(&trace).expect("trace opens");
    let mut markers: Vec<(Nanos, Tid, String)> = Vec::new();
    for ev in reader.events() {
        let ev = ev.expect("event decodes");
        if let EventKind::Marker { text } = ev.kind {
            if text.starts_with("argus:dispatch-") {
                assert_eq!(
                    ev.ctx,
                    argus_schema::Context::Task,
                    "{text} in task context"
                );
                markers.push((ev.ts, ev.tid, text));
            }
        }
    }
    assert_eq!(markers.len(), 2 * jobs, "markers: {markers:?}");
    for (i, (_, tid, text)) in markers.iter().enumerate() {
        assert_eq!(*tid, loop_tid, "marker {i} in the loop thread: {markers:?}");
        let want = if i % 2 == 0 { &begin } else { &end };
        assert_eq!(text, want, "marker {i} properly nested: {markers:?}");
    }
    let calls: Vec<(Nanos, Nanos)> = markers.chunks(2).map(|p| (p[0].0, p[1].0)).collect();
    // Every third job waits ~20 ms for the helper inside the callout.
    let long = calls
        .iter()
        .filter(|(b, e)| e.0 - b.0 >= 15_000_000)
        .count();
    assert_eq!(long, 3, "blocking calls: {calls:?}");

    build_snapshot(&trace, &snap, &[]);
    // Each job is its own work_item segment of the loop thread, blocking wait included.
    let snapshot = argus_sinks::read_snapshot_tables(&snap, false).expect("snapshot");
    let function = argus_pipeline::rules::dispatch_id(SYMBOL);
    let items: Vec<_> = snapshot
        .segments
        .iter()
        .filter(|s| s.tid == loop_tid && s.kind == SegmentKind::WorkItem { work: 0, function })
        .collect();
    let of_loop: Vec<_> = snapshot
        .segments
        .iter()
        .filter(|s| s.tid == loop_tid)
        .map(|s| (s.kind, s.start_ns, s.end_ns))
        .collect();
    assert_eq!(
        items.len(),
        jobs,
        "dispatch segments: {items:#?}\nsegments of the loop thread: {of_loop:?}\ncalls: {calls:?}"
    );
    for (seg, (b, e)) in items.iter().zip(&calls) {
        assert!(
            seg.start_ns <= *e && seg.end_ns >= *b,
            "segment {:?} [{:?}, {:?}] overlaps its call [{b:?}, {e:?}]",
            seg.id,
            seg.start_ns,
            seg.end_ns
        );
    }
    let long_segments = items
        .iter()
        .filter(|s| s.end_ns.0 - s.start_ns.0 >= 15_000_000)
        .count();
    assert_eq!(long_segments, 3, "a wait inside a callout does not end it");
}

/// The recorder's pid from `meta.json`.
fn truth_recorder_pid(trace: &std::path::Path) -> i64 {
    let meta: Value =
        serde_json::from_slice(&std::fs::read(trace.join("meta.json")).expect("meta.json"))
            .expect("meta.json parses");
    meta["recorder_pid"].as_i64().expect("recorder_pid")
}

#[test]
fn dispatch_errors_name_binary_and_symbol() {
    if !live_or_skip("dispatch_errors_name_binary_and_symbol") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = env!("CARGO_BIN_EXE_argus");
    let cases = [
        (
            format!("{exe}:argus_no_such_function"),
            vec![exe, "argus_no_such_function", "not found"],
        ),
        (
            "/nonexistent/argus-app:handle".to_string(),
            vec!["/nonexistent/argus-app", "handle", "not found"],
        ),
        (
            "argus-no-such-binary-in-path:handle".to_string(),
            vec!["argus-no-such-binary-in-path", "handle", "PATH"],
        ),
        ("no-symbol-given".to_string(), vec!["BINARY:SYMBOL"]),
    ];
    for (i, (spec, needles)) in cases.iter().enumerate() {
        let trace = dir.path().join(format!("t{i}"));
        let out = run(&[
            "record",
            "-o",
            trace.to_str().expect("utf-8"),
            "--dispatch",
            spec,
            "--duration",
            "1",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{spec}: {n:?} not in {stderr}");
        }
    }
    // Work-item arguments: out of range, an enqueue with no dispatch fetching the item, a
    // call probe given one. Refused before anything is probed or recorded.
    let enqueue = format!("{exe}:argus_enqueue_job");
    let probe = format!("{exe}:argus_run_job@1");
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--dispatch", "app:f@7"], &["app:f@7"]),
        (&["--enqueue", &enqueue], &["--enqueue", "--dispatch"]),
        (&["--probe", &probe], &["--probe", "argus_run_job@1"]),
    ];
    for (i, (opts, needles)) in cases.iter().enumerate() {
        let trace = dir.path().join(format!("w{i}"));
        let mut args = vec!["record", "-o", trace.to_str().expect("utf-8")];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["--duration", "1"]);
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opts:?}: {stderr}");
        for n in needles.iter() {
            assert!(stderr.contains(n), "{opts:?}: {n:?} not in {stderr}");
        }
        assert!(!trace.exists(), "{opts:?}: nothing recorded");
    }
}
