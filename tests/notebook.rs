//! The notebook interface: `python/argus_snapshot.py` (pyarrow + DuckDB from PyPI, in a
//! virtual environment cached under `target/pyenv/<hash of python/requirements.txt>`) reads
//! a snapshot built from a fresh live recording and agrees with what the Rust side wrote;
//! the example notebook is valid nbformat 4 and its code runs.

use crate::common::{chain, debug_json, live_or_skip, venv_python};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn require_or_skip(test: &str, why: &str) -> bool {
    argus_testkit::skip(test, why, argus_testkit::REQUIRE_LIVE)
}

fn script(python: &Path, args: &[&str]) -> Value {
    let out = Command::new(python)
        .arg(root().join("python/argus_snapshot.py"))
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "argus_snapshot.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "argus_snapshot.py printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn the_python_reader_agrees_with_the_rust_snapshot() {
    let test = "the_python_reader_agrees_with_the_rust_snapshot";
    if !live_or_skip(test) {
        return;
    }
    let python = match venv_python(&root().join("python/requirements.txt")) {
        Ok(p) => p,
        Err(why) => {
            require_or_skip(
                test,
                &format!("no Python environment with pyarrow and duckdb ({why})"),
            );
            return;
        }
    };
    let rec = chain();
    let snap = rec.snapshot.to_str().expect("utf-8");
    let got = script(&python, &[snap, "--pid", &rec.pid.to_string(), "--json"]);

    // Row counts: the files, the manifest and the Rust reader agree.
    let tables = argus_sinks::read_snapshot(&rec.snapshot).expect("snapshot reads");
    let m = &tables.manifest.counts;
    let want = [
        (
            "events",
            tables.events.as_ref().map_or(0, Vec::len) as u64,
            m.events,
        ),
        ("segments", tables.segments.len() as u64, m.segments),
        ("edges", tables.edges.len() as u64, m.edges),
        ("spins", tables.spins.len() as u64, m.spins),
        ("threads", tables.threads.len() as u64, m.threads),
        ("errors", tables.errors.len() as u64, m.errors),
    ];
    for (table, rust, manifest) in want {
        assert_eq!(rust, manifest, "{table}: rust reader vs manifest");
        assert_eq!(got["counts"][table], rust, "{table}: python vs rust");
    }

    // The hang: same thread and duration as `argus debug`.
    let (_, report) = debug_json(&rec.snapshot, rec.pid);
    let hang = &got["hangs"][0];
    assert_eq!(
        hang["tid"], report["hang"]["tid"],
        "{hang} vs {}",
        report["hang"]
    );
    let rust_dur = report["hang"]["end_ns"].as_u64().expect("end")
        - report["hang"]["start_ns"].as_u64().expect("start");
    assert_eq!(hang["duration_ns"].as_u64(), Some(rust_dur), "{hang}");
    assert_eq!(hang["class"], "LongWait");
    assert_eq!(hang["segment"], report["hang"]["segment"]);

    // The path starts at the hang and walks back through the worker thread.
    let path = got["path"].as_array().expect("path");
    assert_eq!(path[0]["segment"], hang["segment"]);
    let comms: Vec<&str> = path.iter().filter_map(|p| p["comm"].as_str()).collect();
    assert!(
        comms.contains(&"argus-worker"),
        "the path goes through the worker: {comms:?}"
    );

    // Edges by kind: the same counts as the Rust side.
    let mut rust_kinds: BTreeMap<String, u64> = BTreeMap::new();
    for e in &tables.edges {
        *rust_kinds.entry(e.kind.name().to_string()).or_default() += 1;
    }
    let py_kinds: BTreeMap<String, u64> = got["edge_counts"]
        .as_object()
        .expect("edge counts")
        .iter()
        .map(|(k, v)| {
            let n = v
                .as_object()
                .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
            (k.clone(), n)
        })
        .collect();
    assert_eq!(py_kinds, rust_kinds);

    // The example notebook: nbformat 4, and its code cells run against this snapshot.
    let nb: Value = serde_json::from_slice(
        &std::fs::read(root().join("python/example.ipynb")).expect("example.ipynb"),
    )
    .expect("the notebook is JSON");
    assert_eq!(nb["nbformat"], 4);
    let code: String = nb["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter(|c| c["cell_type"] == "code")
        .map(|c| match &c["source"] {
            Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect::<String>(),
            Value::String(s) => s.clone(),
            _ => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let out = Command::new(&python)
        .arg("-c")
        .arg(&code)
        .env("ARGUS_SNAPSHOT", &rec.snapshot)
        .env("ARGUS_PID", rec.pid.to_string())
        .current_dir(root().join("python"))
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the notebook's code failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("LongWait"),
        "the notebook lists the hang: {stdout}"
    );
}
