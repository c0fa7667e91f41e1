//! `argus dig` on a live hang: `argus workload slowpath` answers requests in
//! `argus_dig_checksum` (~40 ms each) and one in `argus_dig_rebuild_index` (1.5 s), while the
//! main thread waits for each reply. The always-on recording (stacks at waits and wake-ups)
//! cannot see inside the computation; `dig` plans a recording with call-stack sampling,
//! makes it (`--run`), finds the server's slow request again and names the function that
//! differs between it and the normal requests.

use crate::common::{json_out, live_or_skip, record_with, recording_lock, run};
use serde_json::Value;

fn functions(diff: &Value) -> Vec<(&str, f64, f64)> {
    diff["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| {
            (
                f["function"].as_str().expect("name"),
                f["hung"].as_f64().expect("hung share"),
                f["normal"].as_f64().expect("normal share"),
            )
        })
        .collect()
}

#[test]
fn dig_names_the_function_only_the_hung_request_runs() {
    if !live_or_skip("dig_names_the_function_only_the_hung_request_runs") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let rec = record_with(
        &["--stacks"],
        &[exe, "workload", "slowpath", "--secs", "1.5"],
        &[],
    );
    let main_tid = rec.truth["main_tid"].as_i64().expect("main_tid");
    let server_tid = rec.truth["server_tid"].as_i64().expect("server_tid");
    let snap = rec.snapshot.to_str().expect("utf-8");
    let pid = main_tid.to_string();
    let base = ["dig", snap, "--pid", &pid, "--threshold", "1", "--json"];

    // The plan: the server's busy vertex (the root cause), recorded again with sampling.
    let out = run(&base);
    let plan = json_out(&out, 0);
    assert_eq!(
        plan["subject"]["tid"].as_i64(),
        Some(server_tid),
        "{plan:#}"
    );
    assert_eq!(plan["subject"]["comm"], "argus-server");
    assert!(plan["compared"].is_null());
    let argv: Vec<&str> = plan["plan"]["argv"]
        .as_array()
        .expect("argv")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let dashes = argv.iter().position(|a| *a == "--").expect("a command");
    assert_eq!(
        &argv[dashes + 1..],
        &[exe, "workload", "slowpath", "--secs", "1.5"],
        "the recorded command again: {argv:?}"
    );
    assert!(
        argv.windows(2).any(|w| w == ["--profile", "997"]),
        "{argv:?}"
    );
    let compare: Vec<&str> = plan["plan"]["compare"]
        .as_array()
        .expect("compare argv")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(&compare[1..3], &["dig", snap], "{compare:?}");
    assert!(compare
        .windows(2)
        .any(|w| w[0] == "--trace" && argv.contains(&w[1])));

    // Made and compared.
    let dir = tempfile::tempdir().expect("tempdir");
    let dig_dir = dir.path().join("dig");
    let out = {
        let _lock = recording_lock();
        let mut args = base.to_vec();
        args.extend(["--run", "-o", dig_dir.to_str().expect("utf-8")]);
        run(&args)
    };
    let r = json_out(&out, 0);
    let c = &r["compared"];
    assert_eq!(c["comm"], "argus-server", "{c:#}");
    assert_ne!(
        c["tid"].as_i64(),
        Some(server_tid),
        "a new run, a new thread"
    );
    let diff = &c["diff"];
    // 1.5 s of computing at 997 samples/s of CPU, 8 × 40 ms normally; a loaded machine
    // gives the server less CPU.
    assert!(diff["hung_samples"].as_u64() > Some(150), "{diff:#}");
    assert!(diff["normal_samples"].as_u64() > Some(30), "{diff:#}");
    assert_eq!(
        diff["only_in_hang"][0], "argus_dig_rebuild_index",
        "{diff:#}"
    );
    let fns = functions(diff);
    let (name, hung, normal) = fns[0];
    assert_eq!(name, "argus_dig_rebuild_index", "{fns:?}");
    assert!(hung > 0.9 && normal == 0.0, "{fns:?}");
    // The callers are unwound too: the server thread's closure is on both sides.
    let closure = fns
        .iter()
        .find(|f| f.0 == "argus_workloads::stackflag::slowpath::{{closure}}")
        .unwrap_or_else(|| panic!("the caller of both request functions: {fns:?}"));
    assert!(closure.1 > 0.9 && closure.2 > 0.9, "{closure:?}");
    let checksum = fns
        .iter()
        .find(|f| f.0 == "argus_dig_checksum")
        .expect("the normal requests' function");
    assert!(checksum.1 == 0.0 && checksum.2 > 0.9, "{checksum:?}");
    // The syscalls: the normal requests read and write a pipe; the slow one makes none in
    // its window but the write that ends it.
    let sc = diff["syscalls"].as_array().expect("syscalls");
    let read = sc.iter().find(|s| s["syscall"] == "read").expect("read");
    assert!(read["normal"].as_u64() >= Some(8), "{read}");

    // A recording without call-stack samples cannot be compared: exit 2, naming it.
    let trace = rec.trace.to_str().expect("utf-8");
    let mut args = base.to_vec();
    let other = dir.path().join("other");
    args.extend(["--trace", trace, "-o", other.to_str().expect("utf-8")]);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(trace) && err.contains("--profile"), "{err}");
}

/// `argus workload stacks`: the reader blocks 1.5 s in `argus_stack_blocking_read`. Dug
/// into the hang vertex itself (`--vertex`), the plan puts a call probe on that function —
/// the application's own function in the vertex's blocking stack — and the comparison
/// counts its call in the hung vertex, timed across the wait, and none in the normal runs.
#[test]
fn dig_probes_the_functions_of_the_vertexs_stack_and_counts_their_calls() {
    if !live_or_skip("dig_probes_the_functions_of_the_vertexs_stack_and_counts_their_calls") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let rec = record_with(
        &["--stacks"],
        &[exe, "workload", "stacks", "--secs", "1.5"],
        &[],
    );
    let reader = rec.truth["reader_tid"]
        .as_i64()
        .expect("reader_tid")
        .to_string();
    let snap = rec.snapshot.to_str().expect("utf-8");
    let out = run(&[
        "debug",
        snap,
        "--tid",
        &reader,
        "--threshold",
        "1",
        "--json",
    ]);
    let r: Value = serde_json::from_slice(&out.stdout).expect("debug --json");
    let vertex = r["hang"]["segment_label"].as_str().expect("hang vertex");
    let dir = tempfile::tempdir().expect("tempdir");
    let dig_dir = dir.path().join("dig");
    let out = {
        let _lock = recording_lock();
        run(&[
            "dig",
            snap,
            "--tid",
            &reader,
            "--threshold",
            "1",
            "--vertex",
            vertex,
            "--json",
            "--run",
            "-o",
            dig_dir.to_str().expect("utf-8"),
        ])
    };
    let d = json_out(&out, 0);
    let probes: Vec<&str> = d["subject"]["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // The function it blocked in (others of the application's own may come with it, e.g. a
    // page fault taken at thread start).
    let probe = format!("{exe}:argus_stack_blocking_read");
    assert!(probes.contains(&probe.as_str()), "{d:#}");
    assert!(probes
        .iter()
        .all(|p| p.starts_with(exe) && !p.contains("std::") && !p.contains("{{")));
    let argv = d["plan"]["argv"].as_array().expect("argv");
    assert!(argv.iter().any(|a| a == "--probe"), "{argv:?}");
    let c = &d["compared"];
    assert_eq!(c["comm"], "argus-stackrd", "{c:#}");
    let call = c["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .find(|c| c["function"] == "argus_stack_blocking_read")
        .unwrap_or_else(|| panic!("its calls: {c:#}"));
    assert_eq!(call["hung_calls"], 1, "{call}");
    assert_eq!(call["normal_calls"], 0, "{call}");
    assert!(call["hung_ns"].as_u64() > Some(1_000_000_000), "{call}");
}
