//! `perf.data` files recorded here with `perf record -e TRACEPOINT…` (plain and `-z`
//! compressed), imported directly and compared with `perf script` of the same file: the same
//! number of records of each event, the same thread names and processes.

use crate::common::{can_trace, live_lock};
use argus_ingest::import::{self, ImportFormat};
use argus_schema::EventKind;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const EVENTS: &[&str] = &[
    "sched:sched_switch",
    "sched:sched_waking",
    "sched:sched_wakeup_new",
    "sched:sched_process_fork",
    "sched:sched_process_exec",
    "sched:sched_process_exit",
    "raw_syscalls:sys_enter",
    "raw_syscalls:sys_exit",
];

/// `perf record -a` of `EVENTS` (plus `extra` options) around a shell that forks a sleeper.
fn record(out: &Path, extra: &[&str]) {
    let mut cmd = Command::new("perf");
    cmd.arg("record").arg("-a").arg("-q").arg("-o").arg(out);
    for e in EVENTS {
        cmd.arg("-e").arg(e);
    }
    cmd.args(extra)
        .args(["--", "sh", "-c", "sleep 0.2; exec sleep 0.1"]);
    let st = cmd
        .output()
        .expect("perf runs (perf is installed on this machine)");
    assert!(
        st.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// `perf script`'s count of records per event name, and `(tid → comm)` as it prints them.
fn perf_script(file: &Path) -> (BTreeMap<String, u64>, BTreeMap<i32, (i32, String)>) {
    let out = Command::new("perf")
        .args(["script", "-F", "comm,pid,tid,event", "-i"])
        .arg(file)
        .output()
        .expect("perf script runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut counts = BTreeMap::new();
    let mut threads = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // `   comm  PID/TID  sys:event: `
        let Some((head, _)) = line.trim_end().rsplit_once(':') else {
            continue;
        };
        let mut words: Vec<&str> = head.split_whitespace().collect();
        let Some(event) = words.pop() else { continue };
        let Some(ids) = words.pop() else { continue };
        let Some((pid, tid)) = ids.split_once('/') else {
            continue;
        };
        let name = event.rsplit(':').next().unwrap_or(event).to_string();
        *counts.entry(name).or_default() += 1;
        if let (Ok(pid), Ok(tid)) = (pid.parse(), tid.parse()) {
            threads.insert(tid, (pid, words.join(" ")));
        }
    }
    (counts, threads)
}

fn check(file: &Path) {
    let imported = import::open(file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(imported.format(), ImportFormat::PerfData);
    assert!(imported.errors().is_empty(), "{:?}", imported.errors());
    let (want, threads) = perf_script(file);
    let ours = imported.kind_counts();
    for (event, kind) in [
        ("sched_switch", "switch"),
        ("sched_waking", "waking"),
        ("sys_enter", "sys_enter"),
        ("sys_exit", "sys_exit"),
        ("sched_process_exec", "exec"),
    ] {
        assert_eq!(
            ours.get(kind).copied().unwrap_or(0),
            want.get(event).copied().unwrap_or(0),
            "{kind}: ours {ours:?}, perf script {want:?}"
        );
    }
    assert!(want.get("sched_switch").copied().unwrap_or(0) > 0);
    // The sleeper: the shell's child execs sleep; perf and Argus agree on its process.
    let sleeper = imported
        .event_slice()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Exec if threads.get(&e.tid.0).is_some_and(|t| t.1 == "sleep") => Some(e.tid),
            _ => None,
        })
        .expect("an exec of sleep");
    let t = imported
        .threads()
        .iter()
        .find(|t| t.tid == sleeper)
        .expect("the sleeper's thread");
    assert_eq!(t.comm, "sleep");
    assert_eq!(t.pid.0, threads[&sleeper.0].0);
    // Time order across CPUs, gapless seq.
    assert!(imported
        .event_slice()
        .windows(2)
        .all(|w| w[0].ts <= w[1].ts && w[0].seq + 1 == w[1].seq));
}

#[test]
fn a_perf_record_of_tracepoints_imports_like_perf_script_reads_it() {
    if !can_trace() {
        return;
    }
    let _lock = live_lock();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("perf.data");
    record(&plain, &[]);
    check(&plain);
    let compressed = dir.path().join("perf-z.data");
    record(&compressed, &["-z"]);
    check(&compressed);
}

/// Every prefix of a real perf.data is refused with the file and an offset, never a panic.
#[test]
fn a_truncated_perf_data_is_an_error_naming_the_offset() {
    if !can_trace() {
        return;
    }
    let _lock = live_lock();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("perf.data");
    record(&file, &["-z"]);
    let bytes = std::fs::read(&file).unwrap();
    let cut = dir.path().join("cut.data");
    for n in (8..bytes.len()).step_by((bytes.len() / 200).max(1)) {
        std::fs::write(&cut, &bytes[..n]).unwrap();
        match import::open(&cut) {
            Ok(_) => {}
            Err(argus_ingest::IngestError::Malformed { file, offset, .. }) => {
                assert_eq!(file, cut);
                assert!(offset <= bytes.len() as u64);
            }
            Err(e) => panic!("cut at {n}: {e}"),
        }
    }
}

/// perf's `LOST` and `LOST_SAMPLES` records (a one-page buffer under a syscall storm):
/// each becomes a lost range on its CPU, as many as `perf report --stats` counts.
#[test]
fn perfs_lost_records_become_lost_ranges() {
    if !can_trace() {
        return;
    }
    let _lock = live_lock();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("perf.data");
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-m",
            "1",
            "-a",
            "-e",
            "raw_syscalls:sys_enter",
        ])
        .args([
            "-e",
            "raw_syscalls:sys_exit",
            "-e",
            "sched:sched_switch",
            "-o",
        ])
        .arg(&file)
        .args([
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            "count=300000",
        ])
        .output()
        .expect("perf runs");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let stats = Command::new("perf")
        .args(["report", "--stats", "-i"])
        .arg(&file)
        .output()
        .expect("perf report runs");
    // The first block is the whole file's: `LOST events: N` and `LOST_SAMPLES events: M`.
    let text = String::from_utf8_lossy(&stats.stdout);
    let count = |name: &str| -> usize {
        text.lines()
            .find_map(|l| {
                let rest = l.trim().strip_prefix(name)?.trim();
                rest.split_whitespace().next()?.parse().ok()
            })
            .unwrap_or(0)
    };
    let records = count("LOST events:") + count("LOST_SAMPLES events:");
    assert!(records > 0, "the storm made perf lose samples: {text}");
    let imported = import::open(&file).unwrap_or_else(|e| panic!("{e}"));
    let s = imported.summary();
    assert_eq!(s.lost_ranges.len(), records, "{text}");
    assert!(s.lost > 0);
    assert!(s
        .lost_ranges
        .iter()
        .all(|&(cpu, from, to, n)| { from <= to && cpu < s.cpus && n.is_some_and(|n| n > 0) }));
}
