//! `argus inspect` on recordings made to have what it looks for: a thread that signals two
//! processes in one segment (batching), a group-commit flusher whose batch misleads the walk,
//! and a polling loop recorded without a watchpoint on its flag (a missing flag edge);
//! applying each suggestion (the rule, the re-recording with the probes or the watchpoint)
//! removes the suspect, and the latter two fix the diagnosis.

use crate::common::{json_out, live_or_skip, record_command, record_with, run};
use serde_json::Value;
use std::path::Path;

fn inspect(snapshot: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["inspect", snapshot.to_str().expect("utf-8"), "--json"];
    args.extend_from_slice(extra);
    json_out(&run(&args), 0)
}

/// The last root cause of `argus debug SNAPSHOT --pid P --threshold 1 --auto --json`.
fn last_root(snapshot: &Path, pid: i64) -> Value {
    let pid = i32::try_from(pid).expect("a pid");
    let (_, r) = crate::common::debug_json_with(snapshot, pid, &["--threshold", "1"]);
    r["root_causes"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or_else(|| panic!("a root cause: {r:#}"))
}

fn suspects<'a>(v: &'a Value, kind: &str, pid: i64) -> Vec<&'a Value> {
    v["suspects"]
        .as_array()
        .expect("a suspects list")
        .iter()
        .filter(|s| s["kind"] == kind && s["pid"] == pid)
        .collect()
}

/// A supervisor that signals two children (each waiting in `pause`) in one go, five rounds
/// 200 ms apart. Writes to two pipes would not do: the built-in peer-set rule already splits
/// a segment between messages to two connections (docs/rules.md).
const BATCHING: &str = r#"
import json, os, signal, subprocess, sys, time
child = "import signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)\nfor _ in range(5):\n    signal.pause()\n"
kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
print(json.dumps({"server_pid": os.getpid(), "children": [k.pid for k in kids]}), flush=True)
time.sleep(0.5)
for _ in range(5):
    for k in kids:
        os.kill(k.pid, signal.SIGUSR1)
    time.sleep(0.2)
for k in kids:
    k.wait()
"#;

#[test]
fn inspect_finds_a_batching_segment_and_its_split_rule_removes_it() {
    if !live_or_skip("inspect_finds_a_batching_segment_and_its_split_rule_removes_it") {
        return;
    }
    let rec = record_command(&["python3", "-c", BATCHING]);
    let server = rec.truth["server_pid"].as_i64().expect("server_pid");
    let found = inspect(&rec.snapshot, &[]);
    let batching = suspects(&found, "batching", server);
    assert_eq!(batching.len(), 1, "{found:#}");
    let b = batching[0];
    assert!(b["count"].as_u64().unwrap_or(0) >= 3, "{b:#}");
    let rule = b["next"]
        .as_array()
        .expect("next steps")
        .iter()
        .find_map(|n| (n["type"] == "rule").then(|| n["toml"].as_str().unwrap_or("")))
        .expect("a rule")
        .to_string();
    assert!(
        rule.contains("[[split]]") && rule.contains("syscall = \"kill\""),
        "{rule}"
    );
    assert!(rule.contains(&format!("pid = {server}")), "{rule}");
    // Measured by building the trace again with it: the server's vertices change.
    let effect = &b["effects"][0];
    assert!(
        effect["segments_changed"].as_u64().unwrap_or(0) > 0,
        "{b:#}"
    );
    assert!(
        effect["segments_after"].as_u64() > effect["segments_before"].as_u64(),
        "{b:#}"
    );

    // Applied: built with the rule, no segment of the server reaches both cats.
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, &rule).expect("rules file");
    let split = dir.path().join("split");
    crate::common::build_snapshot(
        &rec.trace,
        &split,
        &["--rules", rules.to_str().expect("utf-8")],
    );
    let after = inspect(&split, &["--no-effects"]);
    assert!(suspects(&after, "batching", server).is_empty(), "{after:#}");
}

/// `argus workload flag-watch`: the main thread polls a flag while `argus-decoy` burns CPU
/// and `argus-flagger` sleeps, then sets it. Without a watchpoint nothing connects the
/// setter to the loop: inspect says so and suggests one; recorded with it, the suspect is
/// gone and the diagnosis names the flagger instead of the guessed decoy.
#[test]
fn inspect_finds_a_loop_with_no_flag_edge_and_a_watchpoint_fixes_the_diagnosis() {
    if !live_or_skip("inspect_finds_a_loop_with_no_flag_edge_and_a_watchpoint_fixes_the_diagnosis")
    {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let cmd = [exe, "workload", "flag-watch", "--secs", "1.5"];
    let root = |snap: &Path, pid: i64| -> String {
        last_root(snap, pid)["comm"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    let plain = record_with(&[], &cmd, &["--threshold", "1"]);
    let pid = plain.truth["target_pid"].as_i64().expect("target_pid");
    let found = inspect(
        &plain.snapshot,
        &["--pid", &pid.to_string(), "--threshold", "1"],
    );
    let loops = suspects(&found, "unexplained-loop", pid);
    assert_eq!(loops.len(), 1, "{found:#}");
    let watch = loops[0]["next"]
        .as_array()
        .expect("next steps")
        .iter()
        .find_map(|n| n["options"].as_str().filter(|o| o.starts_with("--watch ")))
        .unwrap_or_else(|| panic!("a watchpoint suggested: {found:#}"));
    assert_eq!(watch, format!("--watch FLAG@{pid}"));
    assert_eq!(
        root(&plain.snapshot, pid),
        "argus-decoy",
        "the guess without the watchpoint"
    );

    // The suggestion applied: FLAG is the variable the loop polls, and the command is
    // recorded again (`@cmd` for its new pid).
    let watched = record_with(
        &["--watch", "ARGUS_HANG_FLAG@cmd"],
        &cmd,
        &["--threshold", "1"],
    );
    let pid = watched.truth["target_pid"].as_i64().expect("target_pid");
    let after = inspect(
        &watched.snapshot,
        &["--pid", &pid.to_string(), "--threshold", "1"],
    );
    assert!(
        suspects(&after, "unexplained-loop", pid).is_empty(),
        "{after:#}"
    );
    assert_eq!(root(&watched.snapshot, pid), "argus-flagger");
}

/// `argus workload group-commit`: a group-commit flusher runs two clients' jobs in one
/// segment, woken by client 1's job while client 2's reader was the one busy. The walk from
/// client 2's hang goes through that segment to client 1; inspect reports the batch and
/// names, from the stacks, the function the flusher's loop runs each job with and the one
/// the readers queue them with. Recorded again with those probes, each job is a segment
/// joined to its enqueue, the batch is gone, and the diagnosis names the busy reader.
#[test]
fn inspect_finds_a_group_commit_batch_and_its_probes_fix_the_diagnosis() {
    if !live_or_skip("inspect_finds_a_group_commit_batch_and_its_probes_fix_the_diagnosis") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let cmd = [exe, "workload", "group-commit", "--secs", "2"];
    let root = |snap: &Path, pid: i64| -> (i64, String) {
        let last = last_root(snap, pid);
        (
            last["tid"].as_i64().unwrap_or(0),
            last["class"].as_str().unwrap_or("").to_string(),
        )
    };
    let truth = |rec: &crate::common::Recorded, key: &str| {
        rec.truth[key]
            .as_i64()
            .unwrap_or_else(|| panic!("{key} in {}", rec.truth))
    };

    let plain = record_with(&["--stacks"], &cmd, &[]);
    let server = truth(&plain, "server_pid");
    let found = inspect(&plain.snapshot, &[]);
    // Nothing of the recorder's own threads (stray records of them are in every trace).
    let meta: Value =
        serde_json::from_slice(&std::fs::read(plain.trace.join("meta.json")).expect("meta.json"))
            .expect("meta.json is JSON");
    let own = meta["excluded_tids"].as_array().expect("excluded_tids");
    assert!(!own.is_empty(), "{meta:#}");
    assert!(
        found["suspects"]
            .as_array()
            .expect("suspects")
            .iter()
            .all(|s| !own.contains(&s["tid"])),
        "{found:#}"
    );
    let batching = suspects(&found, "batching", server);
    assert_eq!(batching.len(), 1, "{found:#}");
    assert_eq!(
        batching[0]["tid"].as_i64(),
        Some(truth(&plain, "flusher_tid")),
        "{found:#}"
    );
    let probes = batching[0]["next"]
        .as_array()
        .expect("next steps")
        .iter()
        .find_map(|n| {
            n["options"]
                .as_str()
                .filter(|o| o.starts_with("--dispatch "))
        })
        .unwrap_or_else(|| panic!("probes suggested: {found:#}"))
        .to_string();
    let words: Vec<&str> = probes.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{probes}");
    assert_eq!(
        (words[0], words[2]),
        ("--dispatch", "--enqueue"),
        "{probes}"
    );
    assert!(words[1].ends_with(":argus_run_job@1"), "{probes}");
    assert!(words[3].ends_with(":argus_enqueue_job@1"), "{probes}");
    let (blamed, _) = root(&plain.snapshot, truth(&plain, "hung_pid"));
    assert_ne!(
        blamed,
        truth(&plain, "slow_reader_tid"),
        "without the probes the batch leads the walk to client 1"
    );

    // The suggestion applied, as printed.
    let mut opts = vec!["--stacks"];
    opts.extend(&words);
    let probed = record_with(&opts, &cmd, &[]);
    let server = truth(&probed, "server_pid");
    let after = inspect(&probed.snapshot, &[]);
    assert!(suspects(&after, "batching", server).is_empty(), "{after:#}");
    assert_eq!(
        root(&probed.snapshot, truth(&probed, "hung_pid")),
        (truth(&probed, "slow_reader_tid"), "LongRunning".to_string())
    );
}
