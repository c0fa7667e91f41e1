//! `argus build --rules` and `--stats` on a real recording.

use crate::common::{chain, live_or_skip, run};

fn build_with(extra: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    let mut args = vec![
        "build",
        chain().trace.to_str().expect("utf-8"),
        "-o",
        snap.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn counter(stderr: &str, name: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix(name)
                .and_then(|rest| rest.trim().parse::<u64>().ok())
        })
        .unwrap_or_else(|| panic!("no {name} counter in: {stderr}"))
}

#[test]
fn stats_print_the_table_and_rules_split_segments() {
    if !live_or_skip("stats_print_the_table_and_rules_split_segments") {
        return;
    }
    let plain = build_with(&["--stats"]);
    let err = String::from_utf8_lossy(&plain.stderr).to_string();
    assert!(plain.status.success(), "{err}");
    for want in [
        "vertices",
        "edges",
        "wakeup",
        "thread_order",
        "culled",
        "split_user_rule",
    ] {
        assert!(err.contains(want), "--stats prints {want}: {err}");
    }
    assert_eq!(counter(&err, "split_user_rule"), 0);

    // Splitting every thread of the workload at each `write` adds segments.
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        format!("[[split]]\npid = {}\nsyscall = \"write\"\n", chain().pid),
    )
    .expect("write rules");
    let split = build_with(&["--stats", "--rules", rules.to_str().expect("utf-8")]);
    let err2 = String::from_utf8_lossy(&split.stderr).to_string();
    assert!(split.status.success(), "{err2}");
    assert!(
        counter(&err2, "split_user_rule") > 0,
        "the rule split the workload's segments: {err2}"
    );
}

#[test]
fn a_bad_rules_file_names_file_and_line() {
    if !live_or_skip("a_bad_rules_file_names_file_and_line") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("bad.toml");
    std::fs::write(
        &rules,
        "# comment\n[[split]]\nsyscall = \"no_such_syscall\"\n",
    )
    .expect("write rules");
    let out = build_with(&["--rules", rules.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:3", rules.display())),
        "the error names the file and line 3: {err}"
    );
}

/// Other tools' recordings (tracefs text, trace-cmd report, systrace HTML) build directly.
#[test]
fn build_imports_other_tools_recordings() {
    let Some(rt) = argus_testkit::realtraces("build_imports_other_tools_recordings") else {
        return;
    };
    let dir = rt.join("ftrace-text");
    for (file, min_segments) in [
        ("catapult_android_systrace.html", 1000),
        ("lisa_trace_report_raw.txt", 500),
        ("tci_atrace-test.txt", 500),
    ] {
        let out_dir = tempfile::tempdir().expect("tempdir");
        let snap = out_dir.path().join("snap");
        let out = run(&[
            "build",
            dir.join(file).to_str().expect("utf-8"),
            "-o",
            snap.to_str().expect("utf-8"),
        ]);
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = argus_sinks::read_snapshot_tables(&snap, false).expect("snapshot");
        assert!(
            s.segments.len() >= min_segments && !s.edges.is_empty() && !s.threads.is_empty(),
            "{file}: {} segments, {} edges",
            s.segments.len(),
            s.edges.len()
        );
    }
    // Several inputs where one is an import is refused with a clear message.
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = run(&[
        "build",
        dir.join("lisa_trace_report_raw.txt")
            .to_str()
            .expect("utf-8"),
        dir.join("tci_atrace-test.txt").to_str().expect("utf-8"),
        "-o",
        out_dir.path().join("s").to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("one file at a time"));
}

#[test]
fn lost_ranges_of_the_recording_reach_the_manifest_and_the_diagnosis() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = crate::common::bundled_trace(dir.path());
    let build_and_debug = |name: &str| {
        let snap = dir.path().join(name);
        let out = run(&[
            "build",
            trace.to_str().expect("utf-8"),
            "-o",
            snap.to_str().expect("utf-8"),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = run(&["debug", snap.to_str().expect("utf-8"), "--auto", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        (
            argus_sinks::Manifest::read(&snap).expect("manifest"),
            report,
        )
    };
    let (manifest, report) = build_and_debug("clean");
    assert!(manifest.lost_ranges.is_empty());
    assert_eq!(report["hang"]["lost_ns"].as_u64(), Some(0));
    assert!(report["advice"].as_array().expect("advice").is_empty());
    // Say cpu0 lost events over the first half of the hang, as a ring overrun would.
    let (h0, h1) = (
        report["hang"]["start_ns"].as_u64().expect("start"),
        report["hang"]["end_ns"].as_u64().expect("end"),
    );
    let (from, to) = (h0 - 1_000, h0 + (h1 - h0) / 2);
    let meta_path = trace.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).expect("meta.json")).expect("json");
    meta["lost_ranges"] = serde_json::json!({"0": [{"from_ns": from, "to_ns": to, "events": 500}]});
    std::fs::write(&meta_path, serde_json::to_vec(&meta).expect("json")).expect("write");
    let (manifest, report) = build_and_debug("lossy");
    assert_eq!(
        manifest.lost_ranges,
        vec![(argus_schema::Nanos(from), argus_schema::Nanos(to))]
    );
    // `argus debug` says how much of the hang the range covers, and what to do.
    assert_eq!(report["hang"]["lost_ns"].as_u64(), Some(to - h0));
    assert_eq!(report["advice"].as_array().expect("advice").len(), 1);
}
