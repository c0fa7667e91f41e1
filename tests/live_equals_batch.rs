//! One engine: on the real kernel, the continuous job's last snapshot holds the graph
//! `argus build` makes of the job's own ring over the same window, with 1 and 2 workers.
//! While the job runs, workloads make what the configuration is about: pipe and socket
//! data dependencies (message edges found through the fd identity the tracker writes as it
//! goes), kernel work items and kernel threads (the thread table, kallsyms), timers, a chain
//! of waits across processes, and a rules file that splits segments.
//!
//! The job's own threads are left out of the comparison: the recorder hides them once it
//! sees them, and only the live job knows whose they are.

use crate::common::{argus, debug_json_with, live_or_skip, recording_lock, start_job, wait_for};
use argus_schema::EventKind;
use argus_sinks::Snapshot;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// What the job and the build are compared on: every row of the graph tables, as text,
/// sorted; rows of the recorder's hidden threads left out.
fn tables(snap: &Snapshot, hidden: &BTreeSet<i32>) -> Vec<(&'static str, Vec<String>)> {
    fn rows<'a, T: std::fmt::Debug + 'a>(items: impl Iterator<Item = &'a T>) -> Vec<String> {
        let mut v: Vec<String> = items.map(|r| format!("{r:?}")).collect();
        v.sort();
        v
    }
    let shown = |tid: argus_schema::Tid| !hidden.contains(&tid.0);
    vec![
        (
            "segments",
            rows(snap.segments.iter().filter(|s| shown(s.tid))),
        ),
        ("edges", rows(snap.edges.iter())),
        ("spins", rows(snap.spins.iter().filter(|s| shown(s.tid)))),
        (
            "threads",
            rows(snap.threads.iter().filter(|t| shown(t.tid))),
        ),
    ]
}

fn run_workload(name: &str) {
    let out = argus()
        .args(["workload", name])
        .stderr(Stdio::null())
        .output()
        .expect("argus workload runs");
    assert!(out.status.success(), "argus workload {name}");
}

/// Runs the job (with `extra` flags) over `workloads` and the build of its ring, and
/// requires their graph tables to be equal; returns the build's snapshot and the ring's
/// `meta.json` for what a caller checks further.
fn job_equals_build(
    workers: &str,
    extra: &[&str],
    workloads: &dyn Fn(),
) -> (Snapshot, Snapshot, serde_json::Value) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("job");
    let rules = tmp.path().join("rules.toml");
    // Every process's segments split where it enters nanosleep: a rule the job and the
    // build both apply.
    std::fs::write(&rules, "[[split]]\nsyscall = \"nanosleep\"\n").expect("rules written");
    let rules_arg = rules.to_str().expect("utf-8");
    let mut args = vec![
        "--rules",
        rules_arg,
        "--snapshot-every",
        "2",
        "--retain",
        "10m",
        "--keep",
        "1000",
        "--nice",
        "0",
        "--workers",
        workers,
    ];
    args.extend_from_slice(extra);
    let mut start = start_job(&job, &args);
    wait_for("tracing on (meta.json)", Duration::from_secs(60), || {
        job.join("trace/meta.json").is_file().then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    workloads();
    std::thread::sleep(Duration::from_secs(1));
    let child = start.0.take().expect("running");
    // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("argus start exits");
    assert!(out.status.success(), "argus start: {}", out.status);

    let trace = job.join("trace");
    let built = tmp.path().join("built");
    let out = argus()
        .arg("build")
        .arg(&trace)
        .arg("-o")
        .arg(&built)
        .arg("--rules")
        .arg(&rules)
        .args(["--workers", workers])
        .output()
        .expect("argus build runs");
    assert!(
        out.status.success(),
        "argus build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(trace.join("meta.json")).expect("meta.json"))
            .expect("meta.json parses");
    let hidden: BTreeSet<i32> = meta["excluded_tids"]
        .as_array()
        .expect("excluded_tids")
        .iter()
        .filter_map(|t| t.as_i64())
        .map(|t| t as i32)
        .collect();
    let latest = std::fs::canonicalize(job.join("latest")).expect("a last snapshot");
    let mut live = argus_sinks::read_snapshot_tables(&latest, false).expect("the job's snapshot");
    // A live snapshot's events are those released since the one before: all of them.
    let mut snaps: Vec<_> = std::fs::read_dir(job.join("snapshots"))
        .expect("the job's snapshots")
        .map(|e| e.expect("a snapshot").path())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    snaps.sort();
    live.events = Some(
        snaps
            .iter()
            .flat_map(|dir| {
                argus_sinks::read_snapshot_tables(dir, true)
                    .expect("a snapshot's events")
                    .events
                    .unwrap_or_default()
            })
            .collect(),
    );
    let batch = argus_sinks::read_snapshot_tables(&built, true).expect("the build");
    let (l, b) = (tables(&live, &hidden), tables(&batch, &hidden));
    for ((table, lrows), (_, brows)) in l.iter().zip(&b) {
        let lset: BTreeSet<&String> = lrows.iter().collect();
        let bset: BTreeSet<&String> = brows.iter().collect();
        let only_live: Vec<_> = lset.difference(&bset).take(5).collect();
        let only_built: Vec<_> = bset.difference(&lset).take(5).collect();
        assert!(
            lrows == brows,
            "{workers} workers, {table}: {} rows live, {} built; live only {only_live:?}; built only {only_built:?}",
            lrows.len(),
            brows.len()
        );
    }
    (live, batch, meta)
}

fn check(workers: &str) {
    if !live_or_skip(&format!("live_equals_batch_with_{workers}_workers")) {
        return;
    }
    let _lock = recording_lock();
    let (_, batch, _) = job_equals_build(workers, &[], &|| {
        for w in ["pipe-dep", "sock-dep", "kwork", "timer", "chain"] {
            run_workload(w);
        }
    });
    // The run made what the comparison is about.
    let kinds: BTreeSet<&str> = batch.edges.iter().map(|e| e.kind.name()).collect();
    for kind in ["message", "queue", "timer", "wakeup"] {
        assert!(
            kinds.contains(kind),
            "{workers} workers: no {kind} edge: {kinds:?}"
        );
    }
}

/// Perf-sourced events: call stacks at syscalls (`--stacks`) and a hardware watchpoint on a
/// running process's flag (`--watch ARGUS_HANG_FLAG@PID`, `argus workload flag-watch`):
/// the job merges them into its events as a build of the ring does, so the flag edges and
/// the order edges the stacks decide are the same.
#[test]
fn the_job_and_the_build_agree_with_stacks_and_a_watchpoint_one_worker() {
    if live_or_skip("the_job_and_the_build_agree_with_stacks_and_a_watchpoint_one_worker") {
        stacks_and_a_watchpoint("1");
    }
}

#[test]
fn the_job_and_the_build_agree_with_stacks_and_a_watchpoint_two_workers() {
    if live_or_skip("the_job_and_the_build_agree_with_stacks_and_a_watchpoint_two_workers") {
        stacks_and_a_watchpoint("2");
    }
}

fn stacks_and_a_watchpoint(workers: &str) {
    let _lock = recording_lock();
    // The watched process runs before the job starts (`@PID` attaches to its threads).
    let flagged = std::process::Command::new(env!("CARGO_BIN_EXE_argus"))
        .args(["workload", "flag-watch", "--secs", "6"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("argus workload flag-watch runs");
    let watch = format!("ARGUS_HANG_FLAG@{}", flagged.id());
    let flagged = std::cell::RefCell::new(flagged);
    let (live, batch, _) = job_equals_build(workers, &["--stacks", "--watch", &watch], &|| {
        for w in ["pipe-dep", "sock-dep"] {
            run_workload(w);
        }
        // Until the flag is set and the poller sees it.
        let ended = flagged.borrow_mut().wait().expect("flag-watch ends");
        assert!(ended.success(), "flag-watch: {ended}");
    });
    // The run made what the comparison is about: the flag setter's write and the main
    // thread's reads, and stacks at syscalls.
    for snap in [&live, &batch] {
        let kinds: BTreeSet<&str> = snap.edges.iter().map(|e| e.kind.name()).collect();
        assert!(kinds.contains("flag"), "no flag edge: {kinds:?}");
    }
    let perf_rows = |snap: &Snapshot| {
        let mut rows: Vec<String> = snap
            .events
            .iter()
            .flatten()
            .filter(|e| {
                matches!(
                    e.kind,
                    EventKind::FlagAccess { .. } | EventKind::Stack { .. }
                )
            })
            .map(|e| format!("{:?} {:?} {:?}", e.ts, e.tid, e.kind))
            .collect();
        rows.sort();
        rows
    };
    let (l, b) = (perf_rows(&live), perf_rows(&batch));
    let count = |rows: &[String], what: &str| rows.iter().filter(|r| r.contains(what)).count();
    assert!(
        count(&b, "FlagAccess") > 0 && count(&b, "Stack") > 0,
        "{} rows",
        b.len()
    );
    assert!(
        l == b,
        "perf events: {} live ({} hits), {} built ({} hits)",
        l.len(),
        count(&l, "FlagAccess"),
        b.len(),
        count(&b, "FlagAccess")
    );
}

/// The kernel loses events: per-CPU buffers of 8 KiB, read at normal priority, overrun by
/// two bursts of a million one-byte reads. The job and the build see the same lost ranges,
/// make no edge across them, and still agree on every row.
#[test]
fn the_job_and_the_build_agree_across_the_ranges_the_kernel_lost_one_worker() {
    if live_or_skip("the_job_and_the_build_agree_across_the_ranges_the_kernel_lost_one_worker") {
        across_lost_ranges("1");
    }
}

#[test]
fn the_job_and_the_build_agree_across_the_ranges_the_kernel_lost_two_workers() {
    if live_or_skip("the_job_and_the_build_agree_across_the_ranges_the_kernel_lost_two_workers") {
        across_lost_ranges("2");
    }
}

fn across_lost_ranges(workers: &str) {
    let _lock = recording_lock();
    let extra = ["--buffer-kb", "8", "--drain-priority", "0"];
    let (live, batch, meta) = job_equals_build(workers, &extra, &|| {
        run_workload("pipe-dep");
        let dd = || {
            std::process::Command::new("dd")
                .args(["if=/dev/zero", "of=/dev/null", "bs=1", "count=1000000"])
                .stderr(Stdio::null())
                .spawn()
                .expect("dd runs")
        };
        // Blocking and waking on both CPUs while they lose events.
        let bursts = [dd(), dd()];
        for w in ["pipe-dep", "sock-dep", "chain"] {
            run_workload(w);
        }
        for mut d in bursts {
            assert!(d.wait().expect("dd ends").success(), "dd");
        }
        run_workload("pipe-dep");
    });
    let lost: usize = meta["lost_ranges"]
        .as_object()
        .into_iter()
        .flat_map(|cpus| cpus.values())
        .filter_map(|r| r.as_array())
        .map(Vec::len)
        .sum();
    assert!(lost > 0, "the kernel lost nothing: {}", meta["lost_ranges"]);
    // The job's snapshot names the newest of its gaps, each within one of the ring's.
    assert!(!live.manifest.lost_ranges.is_empty());
    for &(from, to) in &live.manifest.lost_ranges {
        assert!(
            batch
                .manifest
                .lost_ranges
                .iter()
                .any(|&(f, t)| f <= from && to <= t),
            "the job's gap {from:?}..{to:?} is not in the ring's {:?}",
            batch.manifest.lost_ranges
        );
    }
}

#[test]
fn the_jobs_last_snapshot_equals_a_build_of_its_ring_one_worker() {
    check("1");
}

#[test]
fn the_jobs_last_snapshot_equals_a_build_of_its_ring_two_workers() {
    check("2");
}

/// The hang suite's scenarios played while the job runs, each then diagnosed twice with
/// `--auto`: from the job's live graph (`argus debug DIR`, over its socket) and from a build
/// of its ring: the same report, finding for finding.
#[test]
fn the_hang_suite_is_diagnosed_alike_live_and_from_a_build_of_the_ring() {
    if !live_or_skip("the_hang_suite_is_diagnosed_alike_live_and_from_a_build_of_the_ring") {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = tmp.path().join("job");
    let mut start = start_job(
        &job,
        &[
            "--threshold",
            "1",
            "--snapshot-every",
            "2",
            "--retain",
            "10m",
            "--nice",
            "0",
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    let mut pids = Vec::new();
    for &name in crate::hang_suite::SCENARIOS {
        let out = argus()
            .args(["workload", name, "--secs", crate::hang_suite::HANG_SECS])
            .stderr(Stdio::null())
            .output()
            .expect("argus workload runs");
        assert!(out.status.success(), "argus workload {name}");
        let truth: serde_json::Value = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("{name}: no ground-truth line"));
        pids.push((name, truth["target_pid"].as_i64().expect("target_pid")));
    }
    // The job has handled the last scenario when its graph has the threshold past it.
    std::thread::sleep(Duration::from_secs(2));
    let debug = |what: &Path, pid: i64| debug_json_with(what, pid as i32, &["--threshold", "1"]).1;
    let live: Vec<serde_json::Value> = pids.iter().map(|&(_, p)| debug(&job, p)).collect();
    let child = start.0.take().expect("running");
    // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert!(child
        .wait_with_output()
        .expect("argus start exits")
        .status
        .success());
    let built = tmp.path().join("built");
    let out = argus()
        .arg("build")
        .arg(job.join("trace"))
        .arg("-o")
        .arg(&built)
        .args(["--threshold", "1"])
        .output()
        .expect("argus build runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found = 0;
    for ((name, pid), live) in pids.iter().zip(&live) {
        let from_build = debug(&built, *pid);
        assert_eq!(
            live, &from_build,
            "{name} (pid {pid}): the live diagnosis and the build's differ"
        );
        found += usize::from(
            live["root_causes"]
                .as_array()
                .is_some_and(|r| !r.is_empty()),
        );
    }
    // Not a suite of empty reports.
    assert!(
        found >= pids.len() / 2,
        "{found} of {} reports name a root cause",
        pids.len()
    );
}
