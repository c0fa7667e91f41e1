//! The snapshot tables stay the same: the bundled recording and a trace of another tool
//! (`../shared/realtraces`) built with 1 and 2 workers, every table's order-independent digest
//! (`argus_sinks::digest`) against the digests kept in `tests/golden/`. A refactor must leave
//! them alone; a change that means to alter the graph updates them on purpose:
//! `ARGUS_BLESS=1 cargo test --test integration identity` rewrites the files (review the
//! diff: which tables, how many rows). `scripts/same-snapshots REV` compares two builds of any
//! trace the same way.

use crate::common::{build_snapshot, bundled_trace};
use std::path::{Path, PathBuf};

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.digests"))
}

/// Builds `input` with 1 and 2 workers: both must give the same tables, equal to the golden
/// file `name` (or written to it under `ARGUS_BLESS=1`).
fn check(name: &str, input: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut texts = Vec::new();
    for workers in ["1", "2"] {
        let snap = dir.path().join(format!("snap-{workers}"));
        build_snapshot(input, &snap, &["--workers", workers]);
        let digests = argus_sinks::digest::table_digests(&snap).expect("the snapshot's tables");
        assert!(
            digests.iter().any(|t| t.table == "segments" && t.rows > 0),
            "{name}: no segments: {digests:?}"
        );
        let text: String = digests.iter().map(|d| format!("{d}\n")).collect();
        texts.push(text);
    }
    assert_eq!(
        texts[0], texts[1],
        "{name}: 1 and 2 workers built different tables"
    );
    let file = golden(name);
    if std::env::var("ARGUS_BLESS").as_deref() == Ok("1") {
        std::fs::write(&file, &texts[0]).expect("writing the golden digests");
        eprintln!("identity: wrote {}", file.display());
        return;
    }
    let want = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with ARGUS_BLESS=1 cargo test --test integration identity",
            file.display()
        )
    });
    assert_eq!(
        texts[0],
        want,
        "{name}: the snapshot tables changed (left: now, right: {}). If the change is meant, \
         rerun with ARGUS_BLESS=1 and commit the new digests; `cargo run --example \
         snapshot_digest -- SNAPSHOT --rows TABLE` shows a table's rows",
        file.display()
    );
}

#[test]
fn the_bundled_recording_builds_the_same_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = bundled_trace(dir.path());
    check("bundled", &trace);
}

#[test]
fn another_tools_trace_builds_the_same_tables() {
    let Some(rt) = argus_testkit::realtraces("another_tools_trace_builds_the_same_tables") else {
        return;
    };
    check(
        "lisa_trace_report_raw",
        &rt.join("ftrace-text/lisa_trace_report_raw.txt"),
    );
}
