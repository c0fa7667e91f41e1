//! # argus-sinks — Parquet snapshots and the dataflow's output sink
//!
//! A *snapshot* is a directory the notebook and `argus debug` read:
//!
//! ```text
//!  SNAPSHOT/
//!    manifest.json      schema_version, trace range, epoch, row counts, lost events…
//!    events.parquet     segments.parquet   edges.parquet
//!    spins.parquet      threads.parquet    errors.parquet
//!    stacks.parquet     (optional) symbolized call stacks, see [`read_stacks`]
//! ```
//!
//! Every column of every table (name, Arrow type, unit, meaning) is documented in
//! `docs/snapshot.md`; the schemas themselves live in [`argus_schema::arrow_schema`].
//!
//! What this crate does:
//! - [`SnapshotWriter`] streams rows into zstd-compressed Parquet (64k-row batches, row groups
//!   of at most 1Mi rows, the columns of each batch encoded on up to 4 threads: ~6M event
//!   rows/s on 2 cores, ~30 MB peak for 10M events) inside a hidden temporary directory next to the target, fsyncs, and
//!   renames it into place: readers never see a half-written snapshot, a failed or dropped
//!   writer leaves no trace, and a previous snapshot at the target is replaced.
//! - [`read_snapshot`] / [`read_snapshot_tables`] / [`read_events`] read it back into the
//!   [`argus_schema`] structs after checking the manifest version, each file's exact Arrow
//!   schema and row count. Errors ([`SinkError`]) name the offending file.
//! - [`CollectionSink`] implements [`argus_schema::UpdateSink`]: it consolidates the
//!   `(record, diff)` updates of the dataflow and checks that every record ends up present
//!   exactly once.
//!
//! Caller responsibilities: choose the target path (its parent directory must exist and be
//! on one file system with it), decide what goes in each table and in what order, supply the
//! manifest facts ([`SnapshotInfo`]), and call [`CollectionSink::check`] before trusting its
//! contents.
//!
//! Non-goals: queries over snapshots (notebooks use any Parquet reader; `diagnose` loads the
//! tables), appending to an existing snapshot (each snapshot is rewritten whole), keeping the
//! `SysEnter` argument registers 2‥5 (the schema has no columns for them: a round trip gives
//! `args[2..6] == [0; 4]`).
//!
//! ```
//! use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, Tid};
//! use argus_sinks::{read_snapshot, SnapshotInfo, SnapshotWriter};
//!
//! let dir = tempfile::tempdir()?;
//! let target = dir.path().join("snap");
//! let events = (0..3u64).map(|i| Event {
//!     ts: Nanos(1_000 + i), seq: i, cpu: Cpu(0), pid: Pid(7), tid: Tid(7),
//!     ctx: Context::Task, kind: EventKind::Waking { target: Tid(8) },
//! });
//! let mut writer = SnapshotWriter::new(&target)?;
//! writer.write_events(events)?;
//! let manifest = writer.finish(SnapshotInfo::default())?;
//! assert_eq!(manifest.counts.events, 3);
//! assert_eq!(manifest.trace_end_ns, Some(Nanos(1_002)));
//!
//! let snap = read_snapshot(&target)?;
//! assert_eq!(snap.events.map(|e| e.len()), Some(3));
//! assert!(snap.segments.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

#[cfg(test)]
mod send_tests {
    fn assert_send<T: Send>() {}

    #[test]
    fn writer_and_sink_can_move_to_another_thread() {
        assert_send::<crate::SnapshotWriter>();
        assert_send::<crate::EventReader>();
        assert_send::<crate::CollectionSink<argus_schema::Segment>>();
    }
}

mod collection;
pub mod digest;
mod error;
pub mod export;
mod from_arrow;
mod manifest;
mod pack;
mod reader;
mod stacks_table;
mod table;
mod to_arrow;
mod writer;

pub use collection::{CollectionSink, Frozen, Sorted};
pub use error::SinkError;
pub use manifest::{Manifest, SnapshotInfo, TableCounts, MANIFEST_FILE};
pub use pack::{EdgePrev, Pack, SegmentPrev};
pub use reader::{
    check_snapshot, read_events, read_snapshot, read_snapshot_tables, EventReader, Snapshot,
};
pub use stacks_table::{read_stacks, stacks_schema, EventStack, StackFrame, STACKS_FILE};
pub use table::{
    parse_context, parse_edge_kind, parse_end_cause, parse_event_kind, parse_segment_kind,
    parse_spin_class, parse_start_cause, parse_strength, EventKindTag, SegmentKindTag, Table,
};
pub use writer::{write_snapshot, EncodedPart, SnapshotData, SnapshotWriter, WriterOptions};
