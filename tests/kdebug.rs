//! macOS kdebug traces (issue 19): the live chain recording translated into the kdebug
//! events xnu records for the same behaviour (`argus_testkit::kdebug`), written as
//! `RAW_VERSION1`, `RAW_VERSION2` and V3 files, imported, built and diagnosed: the hang and
//! root cause are `argus record`'s.

use crate::common::{build_snapshot, chain, comms, debug_json, run};
use argus_ingest::import::kdebug::KdVersion;
use argus_ingest::import::ImportFormat;
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
    for version in [KdVersion::V1, KdVersion::V2, KdVersion::V3] {
        let what = format!("{version:?}");
        let file = dir.path().join(format!("chain-{what}.ktrace"));
        std::fs::write(&file, kd.write(version)).expect("write");
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
        assert_eq!(
            got["hang"]["tid"].as_u64(),
            Some(rec.pid as u64 + TID_OFFSET),
            "{what}: the main thread hangs: {got:#}"
        );
        assert_eq!(got["hang"]["class"], want["hang"]["class"], "{what}");
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
        let snap = dir.path().join(format!("snap-{cut}"));
        let out = run(&[
            "build",
            file.to_str().expect("utf-8"),
            "-o",
            snap.to_str().expect("utf-8"),
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
        assert!(offset <= cut as u64, "{stderr}");
        assert!(!snap.exists());
    }
}
