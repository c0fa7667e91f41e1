//! Round trip: record this machine with the live collector, replay the directory.

use argus_ingest::linux::{RecordConfig, Recorder};
use argus_ingest::replay::TraceReader;
use argus_schema::{EventKind, Pid};
use std::time::Duration;

#[test]
fn live_recording_replays_cleanly() {
    if !crate::common::can_trace() {
        return;
    }
    let _guard = crate::common::live_lock();
    let tmp = tempfile::tempdir().unwrap();
    let mut config = RecordConfig::new(tmp.path().join("trace"));
    config.buffer_size_kb = 2048;
    config.chunk_pages = 64;
    config.command = Some(vec![
        "sh".into(),
        "-c".into(),
        "sleep 0.05 & wait; /bin/true".into(),
    ]);
    config.duration = Some(Duration::from_secs(5));
    let dir = config.output_dir.clone();
    let rec = Recorder::new(config).run().unwrap();

    let reader = TraceReader::open(&dir).unwrap();
    let sh = reader.meta().command_pid.unwrap();
    let mut events = reader.events();
    let mut all = Vec::new();
    for e in &mut events {
        all.push(e.unwrap_or_else(|e| panic!("{e}")));
    }
    let summary = events.finish();
    assert!(all.len() > 100, "{} events", all.len());
    assert!(all
        .windows(2)
        .all(|w| w[0].ts <= w[1].ts && w[0].seq + 1 == w[1].seq));
    // The shell forked processes (not threads), and they ran as their own processes.
    let forks: Vec<_> = all
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Fork {
                child,
                child_pid,
                thread,
            } if e.tid.0 == sh => Some((child, child_pid, thread)),
            _ => None,
        })
        .collect();
    assert!(forks.len() >= 2, "{forks:?}");
    assert!(forks.iter().all(|&(c, p, t)| !t && p == Pid(c.0)));
    // One Fork per clone even with task_newtask and sched_process_fork both on.
    let mut children: Vec<_> = forks.iter().map(|f| f.0).collect();
    children.dedup();
    assert_eq!(children.len(), forks.len());
    assert!(all
        .iter()
        .any(|e| e.kind == EventKind::Exec && forks.iter().any(|f| f.0 == e.tid)));
    let names: Vec<&str> = summary
        .threads
        .iter()
        .filter(|t| forks.iter().any(|f| f.0 == t.tid))
        .map(|t| t.comm.as_str())
        .collect();
    assert!(
        names.contains(&"sleep") && names.contains(&"true"),
        "{names:?}"
    );
    // No unknown ids: every record's format was saved.
    assert!(
        summary.skipped.unknown_ids.is_empty(),
        "{:?}",
        summary.skipped
    );
    let lost: u64 = summary.lost().values().sum();
    println!(
        "live: {} events, {} threads, lost (page flags) {lost}, recorder summary lost {}",
        all.len(),
        summary.threads.len(),
        rec.lost_total()
    );
}
