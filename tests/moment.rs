//! `argus debug --at TIME` on a real recording with two hangs of one thread: Python's main
//! thread waits for `sleep 2.5`, then for `sleep 3.5`, noting the wall-clock time (its own
//! `time.time()`) before, between and after. The ground truth is those times; the moment the
//! user names picks the hang going on then, where the default picks the longer one.

use crate::common::{live_or_skip, record_command, run};
use serde_json::Value;
use std::path::Path;

/// `argus debug SNAP --pid P --auto --json [--at AT]`: exit code, report, stderr.
fn debug_at(snapshot: &Path, pid: i32, at: Option<&str>) -> (i32, Value, String) {
    let mut args = vec![
        "debug".to_string(),
        snapshot.display().to_string(),
        "--pid".to_string(),
        pid.to_string(),
        "--auto".to_string(),
        "--json".to_string(),
    ];
    if let Some(at) = at {
        args.push(format!("--at={at}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args);
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The local time of day of Unix time `t` (s), as `date` prints it: HH:MM:SS.mmm.
fn local_time_of_day(t: f64) -> String {
    let out = std::process::Command::new("date")
        .arg("-d")
        .arg(format!("@{t:.3}"))
        .arg("+%H:%M:%S.%3N")
        .output()
        .expect("date runs");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// The duration of the diagnosed hang, in seconds.
fn hang_secs(report: &Value) -> f64 {
    report["hang"]["duration_ns"].as_u64().unwrap_or(0) as f64 / 1e9
}

#[test]
fn at_picks_the_hang_going_on_at_a_wall_clock_time() {
    if !live_or_skip("moment") {
        return;
    }
    let rec = record_command(&[
        "python3",
        "-c",
        "import json, subprocess, time\n\
         t0 = time.time(); subprocess.run(['sleep', '2.5'])\n\
         t1 = time.time(); subprocess.run(['sleep', '3.5'])\n\
         t2 = time.time()\n\
         print(json.dumps({'t': [t0, t1, t2]}))",
    ]);
    let t: Vec<f64> = rec.truth["t"]
        .as_array()
        .expect("times")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let (first_mid, second_mid) = ((t[0] + t[1]) / 2.0, (t[1] + t[2]) / 2.0);
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(rec.snapshot.join("manifest.json")).expect("manifest"),
    )
    .expect("manifest parses");
    let offset = manifest["wall_offset_ns"]
        .as_i64()
        .expect("the snapshot carries the recording's wall-clock offset");

    // Without --at: the longer hang, the second wait.
    let (code, longest, _) = debug_at(&rec.snapshot, rec.pid, None);
    assert_eq!(code, 1, "{longest:#}");
    assert!((3.3..4.2).contains(&hang_secs(&longest)), "{longest:#}");
    // Its start, in wall-clock time, is when Python noted t1 (the offset is right).
    let start_wall = (longest["hang"]["start_ns"].as_i64().expect("start") + offset) as f64 / 1e9;
    assert!((start_wall - t[1]).abs() < 0.3, "{start_wall} vs {}", t[1]);

    // The first wait, named by local time of day, by Unix time and by a full date.
    for at in [
        local_time_of_day(first_mid),
        format!("@{first_mid:.3}"),
        format!(
            "{}T{}",
            String::from_utf8(
                std::process::Command::new("date")
                    .args(["-d", &format!("@{first_mid:.3}"), "+%Y-%m-%d"])
                    .output()
                    .expect("date")
                    .stdout
            )
            .expect("utf-8")
            .trim(),
            local_time_of_day(first_mid)
        ),
    ] {
        let (code, first, stderr) = debug_at(&rec.snapshot, rec.pid, Some(&at));
        assert_eq!(code, 1, "--at {at}: {stderr}");
        assert!(
            (2.3..3.2).contains(&hang_secs(&first)),
            "--at {at} picks the first wait: {first:#}"
        );
        assert_eq!(first["root_causes"][0]["comm"], "sleep", "{first:#}");
    }
    // The second wait by its time, and by a time before the trace's end.
    for at in [local_time_of_day(second_mid), "-1s".to_string()] {
        let (code, second, stderr) = debug_at(&rec.snapshot, rec.pid, Some(&at));
        assert_eq!(code, 1, "--at {at}: {stderr}");
        assert!(
            (3.3..4.2).contains(&hang_secs(&second)),
            "--at {at} picks the second wait: {second:#}"
        );
    }
    // A moment an hour before the trace is an error naming its span, exit 2.
    let (code, _, stderr) = debug_at(
        &rec.snapshot,
        rec.pid,
        Some(&format!("@{:.0}", t[0] - 3600.0)),
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("before the trace"), "{stderr}");
}
