//! `manifest.json`: what a snapshot holds and how it was made.

use crate::error::SinkError;
use crate::table::Table;
use argus_schema::{Epoch, Nanos, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file name of the manifest inside a snapshot directory. Its presence is what makes a
/// directory a snapshot.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Rows per table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableCounts {
    /// Rows of `events.parquet`.
    pub events: u64,
    /// Rows of `segments.parquet`.
    pub segments: u64,
    /// Rows of `edges.parquet`.
    pub edges: u64,
    /// Rows of `spins.parquet`.
    pub spins: u64,
    /// Rows of `threads.parquet`.
    pub threads: u64,
    /// Rows of `errors.parquet`.
    pub errors: u64,
}

impl TableCounts {
    /// The count of one table.
    pub fn get(&self, table: Table) -> u64 {
        match table {
            Table::Events => self.events,
            Table::Segments => self.segments,
            Table::Edges => self.edges,
            Table::Spins => self.spins,
            Table::Threads => self.threads,
            Table::Errors => self.errors,
        }
    }

    /// A mutable reference to the count of one table.
    pub fn get_mut(&mut self, table: Table) -> &mut u64 {
        match table {
            Table::Events => &mut self.events,
            Table::Segments => &mut self.segments,
            Table::Edges => &mut self.edges,
            Table::Spins => &mut self.spins,
            Table::Threads => &mut self.threads,
            Table::Errors => &mut self.errors,
        }
    }
}

/// The content of `manifest.json`. Times are plain JSON numbers of nanoseconds on the trace
/// clock; see `docs/snapshot.md`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Layout version ([`argus_schema::SCHEMA_VERSION`]); readers refuse other versions.
    pub schema_version: u32,
    /// The program that wrote it, `argus <version>`.
    pub created_by: String,
    /// The trace directories the snapshot was built from.
    pub sources: Vec<String>,
    /// Timestamp of the first event (`null` when there were none).
    pub trace_start_ns: Option<Nanos>,
    /// Timestamp of the last event (`null` when there were none).
    pub trace_end_ns: Option<Nanos>,
    /// The last dataflow epoch included.
    pub epoch: Epoch,
    /// Trace time up to which the input is complete: no event earlier than this is missing.
    pub watermark_ns: Nanos,
    /// Rows per table.
    pub counts: TableCounts,
    /// Events the kernel dropped (ring buffer overruns), per CPU.
    pub lost_events: BTreeMap<u32, u64>,
    /// When: the time ranges `[from, to]` (ns, inclusive, sorted, merged over CPUs) in which
    /// some CPU lost events. The graph has no edge across them and a diagnosis says when a
    /// hang's evidence falls in one. Empty in snapshots written before the field existed.
    #[serde(default)]
    pub lost_ranges: Vec<(Nanos, Nanos)>,
    /// Records of event types Argus does not decode, skipped.
    pub unknown_events: u64,
    /// Spin threshold used to build `spins.parquet`, in nanoseconds.
    pub threshold_ns: u64,
    /// Dataflow workers used.
    pub workers: u32,
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC` of the recording, in ns: a trace time plus this is
    /// the wall-clock time (ns since the Unix epoch). Absent (`null`) when the trace did not
    /// record it.
    #[serde(default)]
    pub wall_offset_ns: Option<i64>,
    /// The recorder's own threads (`meta.json`'s `excluded_tids`): hidden from tracing once
    /// the recorder knew them, so the trace holds only stray records of them (their first
    /// ones, and switches with traced tasks); `argus inspect` reports nothing of them.
    /// Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorder_tids: Vec<i32>,
}

/// What the caller tells [`crate::SnapshotWriter::finish`] about the snapshot; the writer
/// adds the schema version and the row counts to make the [`Manifest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The program that wrote it; defaults to `argus <this crate's version>`.
    pub created_by: String,
    /// The trace directories the snapshot was built from.
    pub sources: Vec<PathBuf>,
    /// First event time; `None` takes the smallest `ts` written to the events table.
    pub trace_start_ns: Option<Nanos>,
    /// Last event time; `None` takes the largest `ts` written to the events table.
    pub trace_end_ns: Option<Nanos>,
    /// The last dataflow epoch included.
    pub epoch: Epoch,
    /// Trace time up to which the input is complete.
    pub watermark_ns: Nanos,
    /// Events lost by the kernel, per CPU.
    pub lost_events: BTreeMap<u32, u64>,
    /// Time ranges in which some CPU lost events (any order; merged when written).
    pub lost_ranges: Vec<(Nanos, Nanos)>,
    /// Records of unknown event types skipped.
    pub unknown_events: u64,
    /// Spin threshold used, in nanoseconds.
    pub threshold_ns: u64,
    /// Dataflow workers used.
    pub workers: u32,
    /// The recording's wall-clock offset ([`Manifest::wall_offset_ns`]).
    pub wall_offset_ns: Option<i64>,
    /// The recorder's own threads ([`Manifest::recorder_tids`]).
    pub recorder_tids: Vec<i32>,
}

impl Default for SnapshotInfo {
    fn default() -> Self {
        SnapshotInfo {
            created_by: concat!("argus ", env!("CARGO_PKG_VERSION")).to_string(),
            sources: Vec::new(),
            trace_start_ns: None,
            trace_end_ns: None,
            epoch: Epoch(0),
            watermark_ns: Nanos(0),
            lost_events: BTreeMap::new(),
            lost_ranges: Vec::new(),
            unknown_events: 0,
            threshold_ns: 0,
            workers: 1,
            wall_offset_ns: None,
            recorder_tids: Vec::new(),
        }
    }
}

impl Manifest {
    /// Reads and checks `dir/manifest.json`: the version is checked before the other fields,
    /// so a snapshot of another version is reported as such rather than as a parse error.
    pub fn read(dir: &Path) -> Result<Manifest, SinkError> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SinkError::MissingFile { path })
            }
            Err(e) => return Err(SinkError::io(path, "reading", e)),
        };
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|source| SinkError::Manifest {
                path: path.clone(),
                source,
            })?;
        let found = value.get("schema_version").and_then(|v| v.as_u64());
        if found != Some(u64::from(SCHEMA_VERSION)) {
            return Err(SinkError::SchemaVersion {
                path,
                found,
                expected: SCHEMA_VERSION,
            });
        }
        serde_json::from_value(value).map_err(|source| SinkError::Manifest { path, source })
    }
}
