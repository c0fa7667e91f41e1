//! `stacks.parquet`: symbolized call stacks, one row per frame.
//!
//! Written by `argus build` when the trace holds stacks (`argus record --stacks`), absent
//! otherwise; [`read_stacks`] treats absence as "no stacks". The columns are documented in
//! `docs/snapshot.md` (section *stacks.parquet*):
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `event_seq` | UInt64 | `seq` of the event the stack was taken at (the `sys_enter`) |
//! | `tid` | Int32 | thread |
//! | `ts` | UInt64 | ns, CLOCK_MONOTONIC, same clock as `events.ts_ns` |
//! | `kernel` | Boolean | kernel frame (true) or user frame (false) |
//! | `depth` | UInt16 | 0 = innermost; kernel and user frames numbered separately |
//! | `ip` | UInt64 | return address |
//! | `symbol` | Utf8, nullable | demangled function name |
//! | `offset` | UInt64, nullable | `ip - symbol start` |
//! | `object` | Utf8, nullable | ELF path (user) or `[kernel]` |
//!
//! Rows are grouped per stack (consecutive rows with the same `event_seq` and `tid`), kernel
//! frames before user frames, each innermost first. The table is not counted in
//! `manifest.json` (it is optional); the reader checks its exact Arrow schema instead.

use crate::error::SinkError;
use crate::reader::decoding;
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, RecordBatch, StringBuilder,
    UInt16Builder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt16Type, UInt64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File name of the stacks table inside a snapshot directory.
pub const STACKS_FILE: &str = "stacks.parquet";

/// Rows buffered before a batch is handed to Parquet.
const BATCH_ROWS: usize = 16 * 1024;

/// One frame of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackFrame {
    /// Kernel frame (true) or user frame (false).
    pub kernel: bool,
    /// 0 = innermost frame; kernel and user frames are numbered separately.
    pub depth: u16,
    /// Return address.
    pub ip: u64,
    /// Demangled function name, `None` when unknown.
    pub symbol: Option<String>,
    /// `ip - symbol start`, when the symbol is known; `None` also for a function the
    /// compiler inlined at `ip` (its frame comes before the one of the function holding it,
    /// at the same `ip`).
    pub offset: Option<u64>,
    /// ELF file path (user frames) or `[kernel]` (kernel frames).
    pub object: Option<String>,
}

/// The stack recorded at one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventStack {
    /// `seq` (events table) of the event the stack was taken at, e.g. the `sys_enter`.
    pub event_seq: u64,
    /// Thread.
    pub tid: i32,
    /// Nanoseconds, CLOCK_MONOTONIC, same clock as the events' `ts_ns`.
    pub ts: u64,
    /// Kernel frames then user frames, each innermost first.
    pub frames: Vec<StackFrame>,
}

/// The Arrow schema of `stacks.parquet`.
pub fn stacks_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("event_seq", DataType::UInt64, false),
        Field::new("tid", DataType::Int32, false),
        Field::new("ts", DataType::UInt64, false),
        Field::new("kernel", DataType::Boolean, false),
        Field::new("depth", DataType::UInt16, false),
        Field::new("ip", DataType::UInt64, false),
        Field::new("symbol", DataType::Utf8, true),
        Field::new("offset", DataType::UInt64, true),
        Field::new("object", DataType::Utf8, true),
    ]))
}

/// Streams stacks into one `stacks.parquet` file (zstd, batches of 16k rows).
pub(crate) struct StacksWriter {
    path: PathBuf,
    writer: ArrowWriter<File>,
    event_seq: UInt64Builder,
    tid: Int32Builder,
    ts: UInt64Builder,
    kernel: BooleanBuilder,
    depth: UInt16Builder,
    ip: UInt64Builder,
    symbol: StringBuilder,
    offset: UInt64Builder,
    object: StringBuilder,
    pending: usize,
    rows: u64,
}

impl StacksWriter {
    /// Creates `dir/stacks.parquet`.
    pub(crate) fn create(dir: &Path, zstd_level: i32) -> Result<StacksWriter, SinkError> {
        let path = dir.join(STACKS_FILE);
        let pq = |source| SinkError::Parquet {
            path: path.clone(),
            source,
        };
        let file = File::create(&path).map_err(|e| SinkError::io(&path, "creating", e))?;
        let level = ZstdLevel::try_new(zstd_level).map_err(pq)?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .build();
        let writer = ArrowWriter::try_new(file, stacks_schema(), Some(props)).map_err(pq)?;
        Ok(StacksWriter {
            path,
            writer,
            event_seq: UInt64Builder::new(),
            tid: Int32Builder::new(),
            ts: UInt64Builder::new(),
            kernel: BooleanBuilder::new(),
            depth: UInt16Builder::new(),
            ip: UInt64Builder::new(),
            symbol: StringBuilder::new(),
            offset: UInt64Builder::new(),
            object: StringBuilder::new(),
            pending: 0,
            rows: 0,
        })
    }

    /// Appends the rows of one stack.
    pub(crate) fn push(&mut self, stack: &EventStack) -> Result<(), SinkError> {
        for f in &stack.frames {
            self.event_seq.append_value(stack.event_seq);
            self.tid.append_value(stack.tid);
            self.ts.append_value(stack.ts);
            self.kernel.append_value(f.kernel);
            self.depth.append_value(f.depth);
            self.ip.append_value(f.ip);
            self.symbol.append_option(f.symbol.as_deref());
            self.offset.append_option(f.offset);
            self.object.append_option(f.object.as_deref());
            self.pending += 1;
        }
        if self.pending >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        if self.pending == 0 {
            return Ok(());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.event_seq.finish()),
            Arc::new(self.tid.finish()),
            Arc::new(self.ts.finish()),
            Arc::new(self.kernel.finish()),
            Arc::new(self.depth.finish()),
            Arc::new(self.ip.finish()),
            Arc::new(self.symbol.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.object.finish()),
        ];
        let batch =
            RecordBatch::try_new(stacks_schema(), columns).map_err(|source| SinkError::Arrow {
                path: self.path.clone(),
                source,
            })?;
        self.writer
            .write(&batch)
            .map_err(|source| SinkError::Parquet {
                path: self.path.clone(),
                source,
            })?;
        self.rows += self.pending as u64;
        self.pending = 0;
        Ok(())
    }

    /// Writes the footer and (`sync`) fsyncs; returns the number of rows.
    pub(crate) fn close(mut self, sync: bool) -> Result<u64, SinkError> {
        self.flush()?;
        let path = self.path;
        let file = self
            .writer
            .into_inner()
            .map_err(|source| SinkError::Parquet {
                path: path.clone(),
                source,
            })?;
        if sync {
            file.sync_all()
                .map_err(|e| SinkError::io(&path, "syncing", e))?;
        }
        Ok(self.rows)
    }
}

/// Reads `snapshot_dir/stacks.parquet` back into stacks (consecutive rows with the same
/// `event_seq` and `tid` form one stack); `Ok(empty)` when the file is absent.
///
/// Errors name the file: unreadable Parquet, another Arrow schema than
/// [`stacks_schema`], a null where the column is not nullable.
pub fn read_stacks(snapshot_dir: &Path) -> Result<Vec<EventStack>, SinkError> {
    let path = snapshot_dir.join(STACKS_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SinkError::io(path, "opening", e)),
    };
    let pq = |source| SinkError::Parquet {
        path: path.clone(),
        source,
    };
    let builder = decoding(&path, || {
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(pq)
    })?;
    crate::reader::check_schema(&path, builder.schema(), &stacks_schema())?;
    let mut reader = decoding(&path, || {
        builder.with_batch_size(64 * 1024).build().map_err(pq)
    })?;
    let mut out: Vec<EventStack> = Vec::new();
    let mut first_row = 0u64;
    while let Some(batch) = decoding(&path, || Ok(reader.next()))? {
        let batch = batch.map_err(|source| SinkError::Arrow {
            path: path.clone(),
            source,
        })?;
        decode_batch(&path, first_row, &batch, &mut out)?;
        first_row += batch.num_rows() as u64;
    }
    Ok(out)
}

fn decode_batch(
    path: &Path,
    first_row: u64,
    batch: &RecordBatch,
    out: &mut Vec<EventStack>,
) -> Result<(), SinkError> {
    // The schema was checked, so the columns are at their positions with their types.
    let col = |i: usize| batch.column(i);
    let bad_type = |name: &str, expected: DataType| SinkError::ColumnType {
        path: path.to_path_buf(),
        column: name.to_string(),
        found: DataType::Null,
        expected,
    };
    let event_seq = col(0)
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| bad_type("event_seq", DataType::UInt64))?;
    let tid = col(1)
        .as_primitive_opt::<arrow::datatypes::Int32Type>()
        .ok_or_else(|| bad_type("tid", DataType::Int32))?;
    let ts = col(2)
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| bad_type("ts", DataType::UInt64))?;
    let kernel = col(3)
        .as_boolean_opt()
        .ok_or_else(|| bad_type("kernel", DataType::Boolean))?;
    let depth = col(4)
        .as_primitive_opt::<UInt16Type>()
        .ok_or_else(|| bad_type("depth", DataType::UInt16))?;
    let ip = col(5)
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| bad_type("ip", DataType::UInt64))?;
    let symbol = col(6)
        .as_string_opt::<i32>()
        .ok_or_else(|| bad_type("symbol", DataType::Utf8))?;
    let offset = col(7)
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| bad_type("offset", DataType::UInt64))?;
    let object = col(8)
        .as_string_opt::<i32>()
        .ok_or_else(|| bad_type("object", DataType::Utf8))?;
    let required: [(&'static str, &dyn Array); 6] = [
        ("event_seq", event_seq),
        ("tid", tid),
        ("ts", ts),
        ("kernel", kernel),
        ("depth", depth),
        ("ip", ip),
    ];
    for i in 0..batch.num_rows() {
        if let Some((column, _)) = required.iter().find(|(_, a)| a.is_null(i)) {
            return Err(SinkError::BadValue {
                path: path.to_path_buf(),
                row: first_row + i as u64,
                column,
                problem: "null in a non-nullable column".to_string(),
            });
        }
        let frame = StackFrame {
            kernel: kernel.value(i),
            depth: depth.value(i),
            ip: ip.value(i),
            symbol: symbol.is_valid(i).then(|| symbol.value(i).to_string()),
            offset: offset.is_valid(i).then(|| offset.value(i)),
            object: object.is_valid(i).then(|| object.value(i).to_string()),
        };
        let (seq, t) = (event_seq.value(i), tid.value(i));
        match out.last_mut() {
            Some(last) if last.event_seq == seq && last.tid == t => last.frames.push(frame),
            _ => out.push(EventStack {
                event_seq: seq,
                tid: t,
                ts: ts.value(i),
                frames: vec![frame],
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{read_snapshot, SnapshotInfo, SnapshotWriter};

    fn frame(kernel: bool, depth: u16, ip: u64, symbol: Option<&str>) -> StackFrame {
        StackFrame {
            kernel,
            depth,
            ip,
            symbol: symbol.map(str::to_string),
            offset: symbol.map(|_| 4),
            object: Some(if kernel { "[kernel]" } else { "/bin/x" }.to_string()),
        }
    }

    #[test]
    fn stacks_round_trip_through_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("snap");
        let stacks = vec![
            EventStack {
                event_seq: 3,
                tid: 7,
                ts: 100,
                frames: vec![
                    frame(true, 0, 0xffff_ffff_8100_0000, Some("ksys_read")),
                    frame(true, 1, 0xffff_ffff_8100_0100, None),
                    frame(false, 0, 0x5555_0000, Some("main")),
                ],
            },
            EventStack {
                event_seq: 9,
                tid: 8,
                ts: 200,
                frames: vec![frame(false, 0, 0x5555_0010, None)],
            },
        ];
        let mut w = SnapshotWriter::new(&target).unwrap();
        assert_eq!(w.write_stacks(&stacks).unwrap(), 4);
        w.finish(SnapshotInfo::default()).unwrap();
        assert_eq!(read_stacks(&target).unwrap(), stacks);
        // The other tables are unaffected.
        read_snapshot(&target).unwrap();
    }

    #[test]
    fn absent_table_reads_as_no_stacks() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("snap");
        SnapshotWriter::new(&target)
            .unwrap()
            .finish(SnapshotInfo::default())
            .unwrap();
        assert!(!target.join(STACKS_FILE).exists());
        assert!(read_stacks(&target).unwrap().is_empty());
    }

    #[test]
    fn corrupt_table_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STACKS_FILE), b"not parquet").unwrap();
        let err = read_stacks(dir.path()).unwrap_err().to_string();
        assert!(err.contains(STACKS_FILE), "{err}");
    }
}
