//! The latency suite: request latency spikes (50–500 ms among fast peers) in software the
//! project did not write, recorded live with the truth known by construction, and found by
//! `argus debug --slow --auto`. Prints a table (also `$CARGO_TARGET_TMPDIR/latency_suite.txt`):
//! the spike found, fast requests reported as slow (must be 0), the root cause named, and
//! what the slow request waited for that a fast one did not.
//!
//! A scenario whose programs are missing fails when `ARGUS_REQUIRE_LIVE=1` (`.ci/run`
//! installs them), else it is skipped with one loud line.

use crate::common::{installed, live_or_skip, record_scenario, recorded_truth, run};
use serde_json::Value;
use std::path::Path;

/// The scenarios and the programs each needs.
const SCENARIOS: &[(&str, &[&str])] = &[
    ("redis-spike", &["redis-server", "redis-cli", "python3"]),
    (
        "mariadb-convoy",
        &["mariadbd", "mariadb", "mariadb-install-db"],
    ),
    ("java-gc", &["java", "javac", "python3", "curl"]),
];

/// `--secs` given to each workload (a 0.3 s spike).
const SECS: &str = "1.5";

struct Row {
    name: &'static str,
    truth: Value,
    slow: Value,
    /// The reported slow requests that are the true spike.
    named: usize,
    /// Reported slow requests that are not.
    fast_as_slow: usize,
    root_hit: bool,
}

fn record_one(name: &'static str, dir: &Path) -> Row {
    let (trace, snapshot, out) = record_scenario(name, dir, SECS);
    let truth = recorded_truth(&out);
    let snap = snapshot.to_str().expect("utf-8");
    let out = run(&["build", trace.to_str().expect("utf-8"), "-o", snap]);
    assert!(
        out.status.success(),
        "{name}: argus build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = truth["target_pid"].as_i64().expect("target_pid");
    let out = run(&[
        "debug",
        snap,
        "--pid",
        &pid.to_string(),
        "--slow",
        "--auto",
        "--json",
    ]);
    let slow: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{name}: debug --slow printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    // The true spike: a reported request at least half as long as the one the client timed.
    let spike = truth["slow_ns"].as_u64().unwrap_or(u64::MAX);
    let reported = slow["requests"].as_array().cloned().unwrap_or_default();
    let is_spike = |r: &Value| {
        r["request"]["wait_ns"]
            .as_u64()
            .is_some_and(|w| w * 2 >= spike)
    };
    let named = reported.iter().filter(|r| is_spike(r)).count();
    let fast_as_slow = slow["found"].as_u64().unwrap_or(0) as usize - named;
    let root_hit = reported.iter().filter(|r| is_spike(r)).all(|r| {
        r["report"]["root_causes"]
            .as_array()
            .and_then(|c| c.last())
            .is_some_and(|c| c["comm"] == truth["root_comm"])
    }) && named > 0;
    Row {
        name,
        truth,
        slow,
        named,
        fast_as_slow,
        root_hit,
    }
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "Latency suite (spikes in software we did not write, live recordings, --slow --auto)\n\
         scenario       program                   spike ms  named  fast as slow  root hit  waited for\n",
    );
    for r in rows {
        let s = &r.slow["requests"][0];
        let extra = &s["extra"][0];
        t.push_str(&format!(
            "{:<14} {:<25} {:<9.0} {:<6} {:<13} {:<9} {}\n",
            r.name,
            r.truth["program"].as_str().unwrap_or("-"),
            r.truth["slow_ns"].as_f64().unwrap_or(0.0) / 1e6,
            r.named,
            r.fast_as_slow,
            if r.root_hit { "yes" } else { "NO" },
            if extra.is_null() {
                "-".to_string()
            } else {
                format!(
                    "{} {} {} ({:.0} ms)",
                    extra["comm"].as_str().unwrap_or(""),
                    extra["tid"],
                    extra["state"].as_str().unwrap_or(""),
                    extra["slow_ns"].as_f64().unwrap_or(0.0) / 1e6
                )
            }
        ));
    }
    t
}

#[test]
fn latency_spikes_are_found_named_and_no_fast_request_is_slow() {
    if !live_or_skip("latency_spikes_are_found_named_and_no_fast_request_is_slow") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rows = Vec::new();
    for (name, progs) in SCENARIOS {
        let missing: Vec<&str> = progs.iter().copied().filter(|p| !installed(p)).collect();
        if !missing.is_empty() {
            argus_testkit::skip(
                &format!("latency_{name}"),
                &format!(
                    "not installed: {} (.ci/run installs them)",
                    missing.join(", ")
                ),
                argus_testkit::REQUIRE_LIVE,
            );
            continue;
        }
        rows.push(record_one(name, dir.path()));
    }
    let t = table(&rows);
    eprintln!("\n{t}");
    let _ = std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("latency_suite.txt"),
        &t,
    );
    for r in &rows {
        assert_eq!(
            r.named, 1,
            "{}: the spike is found once: {:#}",
            r.name, r.slow
        );
        assert_eq!(
            r.fast_as_slow, 0,
            "{}: no fast request reported as slow: {:#}",
            r.name, r.slow
        );
        assert!(
            r.root_hit,
            "{}: the root cause is {}: {:#}",
            r.name, r.truth["root_comm"], r.slow
        );
    }
}
