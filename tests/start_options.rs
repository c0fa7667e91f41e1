//! `argus start` takes every recording option of `argus record` and a rules file, and
//! re-reads the rules file on SIGHUP: on the real kernel, a rule added to the file while the
//! job runs splits the segments of the events the job handles from then on, and only those.

use crate::common::{argus, live_or_skip, recording_lock, start_job, wait_for, Guard};
use argus_ingest::linux::monotonic_ns as mono_ns;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The long flags a verb's `--help` lists.
fn flags(verb: &str) -> BTreeSet<String> {
    let out = argus().args([verb, "--help"]).output().expect("argus runs");
    assert!(out.status.success(), "argus {verb} --help");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| {
            w.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

#[test]
fn start_takes_every_recording_option_of_record_and_a_rules_file() {
    let record = flags("record");
    let start = flags("start");
    // What only a one-shot recording has: its output, length and command, and how often
    // it flushes (the job flushes as its snapshots need).
    let one_shot: BTreeSet<String> = ["output", "duration", "flush-interval", "help"]
        .into_iter()
        .map(String::from)
        .collect();
    let missing: Vec<&String> = record
        .iter()
        .filter(|f| !one_shot.contains(*f) && !start.contains(*f))
        .collect();
    assert!(
        record.contains("watch") && record.contains("stacks"),
        "{record:?}"
    );
    assert!(missing.is_empty(), "argus start lacks {missing:?}");
    assert!(start.contains("rules"), "{start:?}");
}

#[test]
fn a_bad_rules_file_stops_start_before_it_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rules = tmp.path().join("rules.toml");
    std::fs::write(&rules, "[[split]\n").expect("rules written");
    let job = tmp.path().join("job");
    let out = argus()
        .args(["start", "-o"])
        .arg(&job)
        .arg("--rules")
        .arg(&rules)
        .output()
        .expect("argus runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rules.toml"));
    assert!(!job.join("trace").exists(), "nothing was recorded");
}

fn latest(job: &Path) -> Option<PathBuf> {
    let p = std::fs::canonicalize(job.join("latest")).ok()?;
    p.join("manifest.json").is_file().then_some(p)
}

fn watermark(snapshot: &Path) -> u64 {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snapshot.join("manifest.json")).expect("manifest"))
            .expect("manifest parses");
    m["watermark_ns"].as_u64().unwrap_or(0)
}

#[test]
fn sighup_rereads_the_rules_file_for_what_the_job_handles_from_then_on() {
    if !live_or_skip("sighup_rereads_the_rules_file_for_what_the_job_handles_from_then_on") {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("job");
    let rules = tmp.path().join("rules.toml");
    std::fs::write(&rules, "# nothing yet\n").expect("rules written");
    // A thread that never blocks and calls getppid every 2 ms: its segments end only where
    // a rule splits them.
    let mut spinner = Guard(Some(
        std::process::Command::new("python3")
            .args([
                "-c",
                "import os, time\n\
                 end = time.time() + 60\n\
                 while time.time() < end:\n\
                 \x20   t = time.time()\n\
                 \x20   while time.time() - t < 0.002: pass\n\
                 \x20   os.getppid()\n",
            ])
            .spawn()
            .expect("python3 runs"),
    ));
    let pid = spinner.0.as_ref().expect("running").id() as i32;
    let mut start = start_job(
        &job,
        &[
            "--rules",
            rules.to_str().expect("utf-8"),
            "--snapshot-every",
            "1",
            "--retain",
            "60",
            "--nice",
            "0",
        ],
    );
    let job_pid = start.0.as_ref().expect("running").id() as i32;
    // Two seconds under the old rules, all of them handled by the job (a snapshot's
    // watermark past them) before the file changes.
    std::thread::sleep(Duration::from_secs(3));
    let before_end = mono_ns();
    wait_for(
        "a snapshot past the first seconds",
        Duration::from_secs(120),
        || latest(&job).filter(|s| watermark(s) > before_end),
    );
    std::fs::write(
        &rules,
        format!("[[split]]\npid = {pid}\nsyscall = \"getppid\"\n"),
    )
    .expect("rules rewritten");
    let hangup = mono_ns();
    // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
    unsafe { libc::kill(job_pid, libc::SIGHUP) };
    // The new rules apply from the job's next tick: well within 2 s of the signal.
    let after_start = hangup + 2_000_000_000;
    std::thread::sleep(Duration::from_secs(5));
    let after_end = mono_ns();
    wait_for(
        "a snapshot past the new rules' seconds",
        Duration::from_secs(120),
        || latest(&job).filter(|s| watermark(s) > after_end),
    );
    // SAFETY: as above.
    unsafe { libc::kill(job_pid, libc::SIGINT) };
    let status = start
        .0
        .take()
        .expect("running")
        .wait()
        .expect("argus start exits");
    assert!(status.success(), "argus start: {status}");
    let _ = spinner.0.as_mut().map(|c| c.kill());

    let snap = latest(&job).expect("a last snapshot");
    let tables = argus_sinks::read_snapshot_tables(&snap, false).expect("the snapshot reads");
    let starts: Vec<u64> = tables
        .segments
        .iter()
        .filter(|s| s.tid.0 == pid)
        .map(|s| s.start_ns.0)
        .collect();
    let first = starts
        .iter()
        .copied()
        .min()
        .expect("the spinner has segments");
    // Segments per second of the spinner before the change and after it took effect.
    let rate = |from: u64, to: u64| {
        let n = starts.iter().filter(|&&s| s > from && s <= to).count();
        n as f64 / ((to - from) as f64 / 1e9)
    };
    let before = rate(first, before_end);
    let after = rate(after_start, after_end);
    // Split at every getppid: a few hundred segments a second (one per 2 ms of CPU).
    assert!(
        after > 100.0,
        "after the re-read: {after:.1} segments/s (before {before:.1})"
    );
    assert!(
        before * 10.0 < after,
        "before the re-read: {before:.1} segments/s, after {after:.1}"
    );
}
