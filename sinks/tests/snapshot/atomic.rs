//! The target never holds a half-written snapshot; failures leave no temporary directory.

use crate::*;
use argus_sinks::{read_snapshot, write_snapshot, SinkError, SnapshotWriter};

#[derive(Debug)]
struct DiskOnFire;
impl std::fmt::Display for DiskOnFire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decoder gave up")
    }
}
impl std::error::Error for DiskOnFire {}

#[test]
fn failing_input_keeps_the_old_snapshot_and_leaves_no_temp_dir() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let old = sample();
    write_snapshot(&target, &old).unwrap();
    let before = read_snapshot(&target).unwrap();

    let mut w = SnapshotWriter::new(&target).unwrap();
    let temp = w.temp_dir().to_path_buf();
    assert!(temp.is_dir());
    assert!(temp
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(&format!(".snap.tmp-{}-", std::process::id())));
    w.write_segments(&old.segments).unwrap();
    // 200k good events (several batches flushed to disk), then the source fails.
    let failing = small_events(200_000)
        .map(Ok)
        .chain(std::iter::once(Err(DiskOnFire)))
        .chain(small_events(10).map(Ok));
    let err = w.try_write_events(failing).unwrap_err();
    assert!(matches!(err, SinkError::Input { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "events.parquet: input failed: decoder gave up"
    );

    // The writer is poisoned: finishing refuses, and nothing replaces the old snapshot.
    assert!(matches!(
        w.write_edges(&old.edges),
        Err(SinkError::WriterFailed { .. })
    ));
    let err = w.finish(SnapshotInfo::default()).unwrap_err();
    assert!(matches!(err, SinkError::WriterFailed { .. }), "{err:?}");
    assert!(!temp.exists(), "temporary directory left behind");
    assert_eq!(
        entries_starting_with(dir.path(), ".snap"),
        Vec::<String>::new()
    );
    assert_eq!(read_snapshot(&target).unwrap(), before);
}

#[test]
fn dropping_an_unfinished_writer_cleans_up_and_target_never_appears_early() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("fresh");
    let mut w = SnapshotWriter::new(&target).unwrap();
    w.write_events(small_events(100_000)).unwrap();
    assert!(!target.exists(), "target visible before finish");
    drop(w);
    assert!(!target.exists());
    assert_eq!(entries_starting_with(dir.path(), "."), Vec::<String>::new());

    // And a finished one appears whole, with nothing else left around.
    let mut w = SnapshotWriter::new(&target).unwrap();
    w.write_events(small_events(10)).unwrap();
    assert!(!target.exists());
    w.finish(SnapshotInfo::default()).unwrap();
    assert_eq!(read_snapshot(&target).unwrap().manifest.counts.events, 10);
    assert_eq!(entries_starting_with(dir.path(), "."), Vec::<String>::new());
}

#[test]
fn a_previous_snapshot_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    write_snapshot(&target, &sample()).unwrap();
    // A stray file inside the old snapshot must not survive the replacement.
    std::fs::write(target.join("notes.txt"), "old").unwrap();

    let mut w = SnapshotWriter::new(&target).unwrap();
    w.write_events(small_events(5)).unwrap();
    w.finish(SnapshotInfo::default()).unwrap();

    let snap = read_snapshot(&target).unwrap();
    assert_eq!(snap.events.unwrap().len(), 5);
    assert!(snap.segments.is_empty());
    assert!(!target.join("notes.txt").exists());
    assert_eq!(entries_starting_with(dir.path(), "."), Vec::<String>::new());
}

#[test]
fn an_empty_directory_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    std::fs::create_dir(&target).unwrap();
    write_snapshot(&target, &sample()).unwrap();
    assert_eq!(read_snapshot(&target).unwrap().edges, all_edges());
}

#[test]
fn something_else_at_the_target_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("thesis.tex"), "do not delete").unwrap();
    let err = SnapshotWriter::new(&target).err().unwrap();
    assert!(matches!(err, SinkError::NotASnapshot { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: refusing to replace: exists and is not an argus snapshot (no manifest.json) nor an empty directory",
            target.display()
        )
    );
    assert!(target.join("thesis.tex").exists());

    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let err = write_snapshot(&file, &sample()).unwrap_err();
    assert!(matches!(err, SinkError::NotASnapshot { .. }), "{err:?}");

    // The check is repeated at finish: something created meanwhile is not clobbered.
    let late = dir.path().join("late");
    let w = SnapshotWriter::new(&late).unwrap();
    std::fs::create_dir(&late).unwrap();
    std::fs::write(late.join("data"), "mine").unwrap();
    let err = w.finish(SnapshotInfo::default()).unwrap_err();
    assert!(matches!(err, SinkError::NotASnapshot { .. }), "{err:?}");
    assert_eq!(std::fs::read_to_string(late.join("data")).unwrap(), "mine");
    assert_eq!(entries_starting_with(dir.path(), "."), Vec::<String>::new());
}

#[test]
fn unusable_target_names_are_refused() {
    let err = SnapshotWriter::new("/").err().unwrap();
    assert!(matches!(err, SinkError::BadTarget { .. }), "{err:?}");
    let err = SnapshotWriter::new("a/..").err().unwrap();
    assert!(matches!(err, SinkError::BadTarget { .. }), "{err:?}");
}
