//! The snapshot reader: manifest and schema checks, then Parquet → schema structs.

use crate::error::SinkError;
use crate::from_arrow::{
    decode_edges, decode_errors, decode_events, decode_segments, decode_spins, decode_threads, At,
};
use crate::manifest::Manifest;
use crate::table::Table;
use argus_schema::{CausalEdge, ErrorRecord, Event, Segment, Spin, ThreadInfo};
use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Rows per batch when reading.
const READ_BATCH_ROWS: usize = 64 * 1024;

/// A snapshot read back into memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The manifest.
    pub manifest: Manifest,
    /// The events, when they were asked for ([`read_snapshot_tables`] with
    /// `include_events = false` leaves `None`; the file is still checked).
    pub events: Option<Vec<Event>>,
    /// Segments, in file order.
    pub segments: Vec<Segment>,
    /// Causal edges, in file order.
    pub edges: Vec<CausalEdge>,
    /// Spinning vertices, in file order.
    pub spins: Vec<Spin>,
    /// Threads, in file order.
    pub threads: Vec<ThreadInfo>,
    /// Unusable records, in file order.
    pub errors: Vec<ErrorRecord>,
}

/// Checks a snapshot without decoding it: `manifest.json` parses, and every table file's
/// footer reads, with the table's schema and the manifest's row count. Cheap (footers only);
/// tells a snapshot written [without sync](crate::SnapshotWriter::without_sync) that a crash
/// cut short.
pub fn check_snapshot(dir: &Path) -> Result<Manifest, SinkError> {
    let manifest = Manifest::read(dir)?;
    for table in Table::ALL {
        open_table(dir, table, &manifest)?;
    }
    Ok(manifest)
}

/// Reads a whole snapshot, events included.
pub fn read_snapshot(dir: &Path) -> Result<Snapshot, SinkError> {
    read_snapshot_tables(dir, true)
}

/// Reads a snapshot; the events table (by far the largest) is only decoded when
/// `include_events` is true, but its presence, schema and row count are always checked.
///
/// Checks, each failing with an error that names the file: `manifest.json` exists, parses
/// and has this build's `schema_version`; every table file exists, is readable Parquet, has
/// exactly the table's Arrow schema (column names, order, types, nullability) and as many
/// rows as the manifest says; every value decodes (known enum names, payload present).
pub fn read_snapshot_tables(dir: &Path, include_events: bool) -> Result<Snapshot, SinkError> {
    let manifest = Manifest::read(dir)?;
    let events = if include_events {
        Some(read_table(dir, Table::Events, &manifest, decode_events)?)
    } else {
        open_table(dir, Table::Events, &manifest)?;
        None
    };
    Ok(Snapshot {
        segments: read_table(dir, Table::Segments, &manifest, decode_segments)?,
        edges: read_table(dir, Table::Edges, &manifest, decode_edges)?,
        spins: read_table(dir, Table::Spins, &manifest, decode_spins)?,
        threads: read_table(dir, Table::Threads, &manifest, decode_threads)?,
        errors: read_table(dir, Table::Errors, &manifest, decode_errors)?,
        events,
        manifest,
    })
}

/// Streams the events of a snapshot, one batch in memory at a time. Checks the manifest and
/// the file's schema and row count first.
pub fn read_events(dir: &Path) -> Result<EventReader, SinkError> {
    let manifest = Manifest::read(dir)?;
    let (path, builder) = open_table(dir, Table::Events, &manifest)?;
    let reader = build(&path, builder)?;
    Ok(EventReader {
        path,
        reader: Some(reader),
        buffer: Vec::new().into_iter(),
        next_row: 0,
    })
}

/// Iterator over the events of a snapshot ([`read_events`]). Stops after the first error.
pub struct EventReader {
    path: PathBuf,
    reader: Option<ParquetRecordBatchReader>,
    buffer: std::vec::IntoIter<Event>,
    next_row: u64,
}

impl Iterator for EventReader {
    type Item = Result<Event, SinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.buffer.next() {
                return Some(Ok(e));
            }
            let reader = self.reader.as_mut()?;
            let next = match decoding(&self.path, || Ok(reader.next())) {
                Ok(next) => next,
                Err(e) => {
                    self.reader = None;
                    return Some(Err(e));
                }
            };
            let batch = match next? {
                Ok(b) => b,
                Err(source) => {
                    self.reader = None;
                    return Some(Err(SinkError::Arrow {
                        path: self.path.clone(),
                        source,
                    }));
                }
            };
            let mut rows = Vec::with_capacity(batch.num_rows());
            let at = At {
                path: &self.path,
                first_row: self.next_row,
            };
            if let Err(e) = decode_events(&batch, &at, &mut rows) {
                self.reader = None;
                return Some(Err(e));
            }
            self.next_row += batch.num_rows() as u64;
            self.buffer = rows.into_iter();
        }
    }
}

type Decode<R> = fn(&RecordBatch, &At<'_>, &mut Vec<R>) -> Result<(), SinkError>;

fn read_table<R>(
    dir: &Path,
    table: Table,
    manifest: &Manifest,
    decode: Decode<R>,
) -> Result<Vec<R>, SinkError> {
    let (path, builder) = open_table(dir, table, manifest)?;
    let mut reader = build(&path, builder)?;
    let mut out = Vec::new();
    let mut first_row = 0u64;
    while let Some(batch) = decoding(&path, || Ok(reader.next()))? {
        let batch = batch.map_err(|source| SinkError::Arrow {
            path: path.clone(),
            source,
        })?;
        decode(
            &batch,
            &At {
                path: &path,
                first_row,
            },
            &mut out,
        )?;
        first_row += batch.num_rows() as u64;
    }
    Ok(out)
}

fn build(
    path: &Path,
    builder: ParquetRecordBatchReaderBuilder<File>,
) -> Result<ParquetRecordBatchReader, SinkError> {
    decoding(path, || {
        builder
            .with_batch_size(READ_BATCH_ROWS)
            .build()
            .map_err(|source| SinkError::Parquet {
                path: path.to_path_buf(),
                source,
            })
    })
}

/// Runs one step of the `parquet` crate's reader (footer, row-group setup, next batch) on
/// the file at `path`. That reader panics on some corrupt files instead of returning an
/// error: parquet 60.1 decoding definition levels that run past their page stops in
/// `BitChunks::new` with "offset + len out of bounds" (found by the `snapshot` fuzz target,
/// issue 18). Such a panic is the file's [`SinkError::Parquet`], like the errors the reader
/// does return; the panic hook has still printed its message. The reader it happened in
/// must not be used again.
pub(crate) fn decoding<T>(
    path: &Path,
    step: impl FnOnce() -> Result<T, SinkError>,
) -> Result<T, SinkError> {
    catch_unwind(AssertUnwindSafe(step)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        Err(SinkError::Parquet {
            path: path.to_path_buf(),
            source: parquet::errors::ParquetError::General(format!(
                "the parquet decoder failed: {what}"
            )),
        })
    })
}

/// Opens a table file and checks its footer: schema and row count.
fn open_table(
    dir: &Path,
    table: Table,
    manifest: &Manifest,
) -> Result<(PathBuf, ParquetRecordBatchReaderBuilder<File>), SinkError> {
    let path = dir.join(table.file_name());
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SinkError::MissingFile { path })
        }
        Err(e) => return Err(SinkError::io(path, "opening", e)),
    };
    let builder = decoding(&path, || {
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| SinkError::Parquet {
            path: path.clone(),
            source,
        })
    })?;
    check_schema(&path, builder.schema(), &table.schema())?;
    let found = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let expected = manifest.counts.get(table);
    if found != expected {
        return Err(SinkError::RowCount {
            path,
            found,
            expected,
        });
    }
    Ok((path, builder))
}

/// Compares a file's Arrow schema with the table's, column by column (metadata ignored).
pub(crate) fn check_schema(
    path: &Path,
    found: &Schema,
    expected: &Schema,
) -> Result<(), SinkError> {
    for (index, want) in expected.fields().iter().enumerate() {
        let Some(got) = found.fields().get(index) else {
            return Err(SinkError::ColumnCount {
                path: path.to_path_buf(),
                found: found.fields().len(),
                expected: expected.fields().len(),
            });
        };
        if got.name() != want.name() {
            return Err(SinkError::ColumnName {
                path: path.to_path_buf(),
                index,
                found: got.name().clone(),
                expected: want.name().clone(),
            });
        }
        if got.data_type() != want.data_type() {
            return Err(SinkError::ColumnType {
                path: path.to_path_buf(),
                column: want.name().clone(),
                found: got.data_type().clone(),
                expected: want.data_type().clone(),
            });
        }
        if got.is_nullable() != want.is_nullable() {
            return Err(SinkError::ColumnNullability {
                path: path.to_path_buf(),
                column: want.name().clone(),
                found: got.is_nullable(),
                expected: want.is_nullable(),
            });
        }
    }
    if found.fields().len() != expected.fields().len() {
        return Err(SinkError::ColumnCount {
            path: path.to_path_buf(),
            found: found.fields().len(),
            expected: expected.fields().len(),
        });
    }
    Ok(())
}
