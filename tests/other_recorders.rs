//! The same live hang recorded by another tool: `perf record` of the tracepoints Argus
//! records, imported from its `perf.data`, must give the root cause `argus record` gives.

use crate::common::{chain, comms, debug_json, live_or_skip, recorded_truth, recording_lock, run};
use std::process::Command;

/// The chain workload (main thread ← worker ← shell over a pipe ← `sleep 3`) under `perf
/// record -a` with Argus's default tracepoints (all but `ftrace/print`, which perf cannot
/// record): built from the perf.data, the hang and its root cause are the ones the
/// `argus record` of the same workload gives.
#[test]
fn perf_record_of_the_chain_gives_argus_records_root_cause() {
    if !live_or_skip("perf_record_of_the_chain_gives_argus_records_root_cause") {
        return;
    }
    let rec = chain();
    let (code, want) = debug_json(&rec.snapshot, rec.pid);
    assert_eq!(code, 1, "{want:#}");

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("perf.data");
    let out = {
        let _guard = recording_lock();
        let mut cmd = Command::new("perf");
        cmd.args(["record", "-q", "-a", "-o"]).arg(&data);
        for e in argus_ingest::linux::DEFAULT_EVENTS {
            if *e != "ftrace/print" {
                cmd.arg("-e").arg(e.replace('/', ":"));
            }
        }
        cmd.args(["--", env!("CARGO_BIN_EXE_argus"), "workload", "chain"])
            .output()
            .expect("perf runs (perf is installed on this machine)")
    };
    let truth = recorded_truth(&out);
    let pid = truth["main_tid"]
        .as_i64()
        .unwrap_or_else(|| panic!("the workload printed its main thread: {truth}"))
        as i32;
    let snap = dir.path().join("snap");
    let built = run(&[
        "build",
        data.to_str().expect("utf-8"),
        "-o",
        snap.to_str().expect("utf-8"),
    ]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let (code, got) = debug_json(&snap, pid);
    assert_eq!(code, 1, "a hang was diagnosed from the perf.data: {got:#}");
    assert_eq!(got["hang"]["tid"], pid, "the main thread hangs: {got:#}");
    assert_eq!(got["hang"]["class"], want["hang"]["class"], "{got:#}");
    let (roots, want_roots) = (&got["root_causes"], &want["root_causes"]);
    assert_eq!(
        comms(roots).first(),
        comms(want_roots).first(),
        "perf: {got:#}\nargus: {want:#}"
    );
    assert_eq!(roots[0]["class"], want_roots[0]["class"], "{got:#}");
    let path = comms(&got["path"]);
    for who in ["argus-hang-main", "argus-worker", "sh", "sleep"] {
        assert!(
            path.iter().any(|c| c == who),
            "{who} is on the path {path:?}"
        );
    }
}
