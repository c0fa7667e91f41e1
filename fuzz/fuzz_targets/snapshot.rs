//! Snapshot reading (`sinks/src/reader.rs`, `sinks/src/manifest.rs`,
//! `sinks/src/stacks_table.rs`), what `argus debug`, `dig`, `export` and `inspect` do first:
//! `manifest.json` (version checked first) and the Parquet tables checked against their
//! schema and row counts, then decoded.
//!
//! Input: sections ([`argus_fuzz::sections`]), one per file of a snapshot directory, in the
//! order of [`SNAPSHOT_FILES`]; an empty section leaves its file out. The seeds are a
//! snapshot of the demo's recording.
#![no_main]

use argus_fuzz::scratch::Scratch;
use argus_fuzz::sections::{self, SNAPSHOT_FILES};
use argus_sinks::{read_events, read_snapshot, read_snapshot_tables, read_stacks, Manifest};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("snapshot"))
}

/// libfuzzer-sys's panic hook aborts on every panic, even one that is caught: the reader
/// catches the `parquet` crate's panics on corrupt files (`sinks/src/reader.rs`, `decoding`).
/// With the default hook back, a panic nobody catches still ends the run as a crash
/// (libfuzzer-sys aborts when one unwinds out of the target).
fn restore_default_panic_hook() {
    drop(std::panic::take_hook());
}

fuzz_target!(init: restore_default_panic_hook(), |data: &[u8]| {
    let parts = sections::split(data, SNAPSHOT_FILES.len());
    let s = scratch();
    s.reset();
    for (name, bytes) in SNAPSHOT_FILES.iter().zip(&parts) {
        if !bytes.is_empty() {
            s.write(name, bytes);
        }
    }
    let dir = s.path();
    let in_dir = |e: &argus_sinks::SinkError| {
        let msg = e.to_string();
        assert!(msg.contains(&*dir.to_string_lossy()), "{msg}: names the file");
    };
    if let Err(e) = Manifest::read(dir) {
        in_dir(&e);
    }
    match read_snapshot(dir) {
        Ok(snap) => {
            assert_eq!(snap.events.as_ref().map(Vec::len), Some(snap.manifest.counts.events as usize));
            assert_eq!(snap.segments.len() as u64, snap.manifest.counts.segments);
        }
        Err(e) => in_dir(&e),
    }
    if let Err(e) = read_snapshot_tables(dir, false) {
        in_dir(&e);
    }
    if let Ok(events) = read_events(dir) {
        for ev in events {
            if let Err(e) = ev {
                in_dir(&e);
            }
        }
    }
    if let Err(e) = read_stacks(dir) {
        in_dir(&e);
    }
});
