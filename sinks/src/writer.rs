//! The snapshot writer: six Parquet files and a manifest, written into a hidden temporary
//! directory next to the target and renamed into place.

use crate::error::SinkError;
use crate::manifest::{Manifest, SnapshotInfo, TableCounts, MANIFEST_FILE};
use crate::stacks_table::{EventStack, StacksWriter};
use crate::table::Table;
use crate::to_arrow::{
    EdgeEncoder, Encoder, ErrorEncoder, EventEncoder, SegmentEncoder, SpinEncoder, ThreadEncoder,
};
use argus_schema::{
    CausalEdge, ErrorRecord, Event, Nanos, Segment, Spin, ThreadInfo, SCHEMA_VERSION,
};
use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::writer::ColumnCloseResult;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
use std::borrow::Borrow;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Tuning of the Parquet output. The defaults suit every table; tests shrink them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// Rows buffered in Arrow builders before they are handed to Parquet as one batch.
    pub batch_rows: usize,
    /// Maximum rows per Parquet row group.
    pub row_group_rows: usize,
    /// zstd compression level (1 is fast and already shrinks event tables ~10×).
    pub zstd_level: i32,
    /// Threads encoding the columns of a batch in parallel (the calling thread included;
    /// 1 encodes inline).
    pub encode_threads: usize,
}

/// The CPUs to encode on, looked up once (it reads the cgroup's quota: a dozen syscalls,
/// and `argus start` makes options for every part it encodes).
static ENCODE_THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            batch_rows: 64 * 1024,
            row_group_rows: 1024 * 1024,
            zstd_level: 1,
            encode_threads: *ENCODE_THREADS.get_or_init(|| {
                std::thread::available_parallelism()
                    .map_or(1, |n| n.get())
                    .min(4)
            }),
        }
    }
}

/// Removes the temporary directory unless disarmed: a writer that is dropped, fails, or
/// panics leaves nothing behind.
struct TempDir {
    path: PathBuf,
    armed: bool,
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = fs::remove_dir_all(&self.path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %self.path.display(), error = %e,
                        "could not remove the temporary snapshot directory");
                }
            }
        }
    }
}

/// Columns written without a dictionary, and whether they are (nearly) sorted so delta
/// encoding suits them.
fn high_cardinality_columns(table: Table) -> &'static [(&'static str, bool)] {
    match table {
        // Numbers: a dictionary of them costs a hash per value and saved nothing over
        // zstd on recorded traces (17.2M events: 43 MB with, 42 MB without; writing 21%
        // faster). The low-cardinality strings (ctx, kind, state, text) keep theirs.
        Table::Events => &[
            ("ts_ns", true),
            ("seq", true),
            ("cpu", false),
            ("pid", false),
            ("tid", false),
            ("target", false),
            ("nr", false),
            ("arg0", false),
            ("arg1", false),
            ("arg2", false),
            ("arg3", false),
            ("arg4", false),
            ("arg5", false),
            ("ret", false),
        ],
        // Segments and edges are written sorted by id (thread, then ordinal) and by source:
        // ids, threads, processes and times delta-encode to a few bits a row, which cut the
        // zstd input of the two tables to a third (17.2M-event build: 34 MB → 15 MB of
        // files) and their encoding CPU by ~35%. The small counters are plain: zstd
        // squeezes them as well as a dictionary without a hash per value.
        Table::Segments => &[
            ("id", true),
            ("tid", true),
            ("pid", true),
            ("irq", false),
            ("start_ns", true),
            ("end_ns", true),
            ("wait_start_ns", true),
            ("wait_syscall", false),
            ("wait_ret", false),
            ("wait_object", false),
            ("on_cpu_ns", false),
            ("preemptions", false),
            ("yields", false),
            ("syscalls", false),
            ("events", false),
            ("syscall_seq.list.item", true),
            ("timer_function", false),
        ],
        Table::Edges => &[
            ("src", true),
            ("dst", true),
            ("ts_ns", true),
            ("src_syscall", false),
        ],
        Table::Spins | Table::Threads | Table::Errors => &[],
    }
}

/// One open Parquet file and the builders filling its next batch.
///
/// Uses the column-level API of `parquet` rather than `ArrowWriter::write` so that the
/// columns of each batch are encoded (dictionary, statistics, zstd) on several threads:
/// encoding is ~75% of the cost of writing events. The large tables (events, segments,
/// edges) encode on a thread of their own once they reach a second batch, so filling the
/// next batch (decoding, for events) overlaps the encoding of the previous one. A table of
/// one batch (every table of `argus start`'s snapshots on a quiet machine) starts no thread:
/// each one started and ended is work, and records in the trace the job is reading.
struct TableWriter<E: Encoder, W: Write + Send + 'static = BufWriter<File>> {
    path: PathBuf,
    schema: SchemaRef,
    enc: E,
    batch_rows: usize,
    rows: u64,
    columns: Columns<W>,
}

/// What reaches a table's Parquet side, in order: rows to encode, or a part encoded before.
enum Piece {
    Batch(RecordBatch),
    Part(Arc<EncodedPart>),
}

/// Where finished batches go: encoded on this thread, or sent to the table's encoder.
enum Columns<W: Write + Send + 'static> {
    /// Encoded on this thread. `threaded`: a large table, whose encoder thread starts with
    /// its second batch (the first one was encoded here).
    Inline {
        sink: Option<Box<ColumnSink<W>>>,
        threaded: bool,
        batches: u32,
    },
    Thread {
        tx: Option<std::sync::mpsc::SyncSender<Piece>>,
        handle: Option<std::thread::JoinHandle<Result<ColumnSink<W>, SinkError>>>,
    },
}

impl<W: Write + Send + 'static> Columns<W> {
    /// Takes the sink: stops the encoder thread (after the batches already sent) and
    /// returns its sink or the error that stopped it. `None` once taken.
    fn join(&mut self) -> Option<Result<ColumnSink<W>, SinkError>> {
        match self {
            Columns::Inline { sink, .. } => sink.take().map(|s| Ok(*s)),
            Columns::Thread { tx, handle } => {
                drop(tx.take());
                let handle = handle.take()?;
                Some(match handle.join() {
                    Ok(r) => r,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
            }
        }
    }
}

impl<W: Write + Send + 'static> Drop for Columns<W> {
    fn drop(&mut self) {
        // A writer dropped without close: let the encoder finish before the temporary
        // directory goes.
        let _ = self.join();
    }
}

/// The Parquet side of a table: the file and the column writers of its current row group.
struct ColumnSink<W: Write + Send> {
    path: PathBuf,
    schema: SchemaRef,
    file: SerializedFileWriter<W>,
    factory: ArrowRowGroupWriterFactory,
    /// The same columns uncompressed, for a row group of fewer than [`SMALL_GROUP_ROWS`]
    /// rows written in one piece.
    small: ArrowRowGroupWriterFactory,
    /// Column writers of the row group being filled.
    group: Option<Vec<ArrowColumnWriter>>,
    group_rows: usize,
    row_group_rows: usize,
    /// Rows of a full batch: a batch with fewer is the last before its row group closes.
    batch_rows: usize,
    threads: usize,
}

/// Rows below which a row group written in one piece is left uncompressed. zstd costs two
/// contexts (~100 KiB each, zeroed) per column of every row group, about as much as encoding
/// a few thousand rows of it; a quiet machine's snapshot is mostly such groups (the open
/// records, spins, threads, errors, a few seconds of events), and there the contexts were a
/// quarter of the snapshot's CPU while zstd saved a few tens of KiB a file.
const SMALL_GROUP_ROWS: usize = 4096;

impl<E: Encoder> TableWriter<E> {
    fn create(dir: &Path, options: &WriterOptions) -> Result<Self, SinkError> {
        let path = dir.join(E::TABLE.file_name());
        let file = File::create(&path).map_err(|e| SinkError::io(&path, "creating", e))?;
        TableWriter::with_output(path, BufWriter::with_capacity(1 << 20, file), options)
    }

    /// Writes the footer and (`sync`) fsyncs; returns the number of rows.
    fn close(self, sync: bool) -> Result<u64, SinkError> {
        let path = self.path.clone();
        let (rows, buf) = self.finish()?;
        let file = buf
            .into_inner()
            .map_err(|e| SinkError::io(&path, "writing", e.into_error()))?;
        if sync {
            file.sync_all()
                .map_err(|e| SinkError::io(&path, "syncing", e))?;
        }
        Ok(rows)
    }
}

impl<E: Encoder, W: Write + Send + 'static> TableWriter<E, W> {
    /// A table written to `out` (`path` names it in errors).
    fn with_output(path: PathBuf, out: W, options: &WriterOptions) -> Result<Self, SinkError> {
        let pq = |source| SinkError::Parquet {
            path: path.clone(),
            source,
        };
        let level = ZstdLevel::try_new(options.zstd_level).map_err(pq)?;
        let row_group_rows = options.row_group_rows.max(1);
        let mut props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(row_group_rows))
            // Values per mini-batch of the column writers (1024 by default): each has a
            // fixed cost (levels, page-size checks) that 8192 spreads thinner.
            .set_write_batch_size(8192);
        // Columns where a dictionary does not pay (unique or numeric values): it only costs
        // a hash per value. Monotonic ones delta-encode to a few bits per row.
        for &(column, delta) in high_cardinality_columns(E::TABLE) {
            // A nested leaf's path has one part per level (`syscall_seq.list.item`).
            let column = ColumnPath::new(column.split('.').map(str::to_string).collect());
            props = props.set_column_dictionary_enabled(column.clone(), false);
            if delta {
                props = props.set_column_encoding(column, Encoding::DELTA_BINARY_PACKED);
            }
        }
        if E::TABLE == Table::Events {
            // Row-group statistics (readers skip row groups by time with them), not per
            // page: page statistics were ~10% of writing events.
            props = props.set_statistics_enabled(EnabledStatistics::Chunk);
        }
        let schema = E::TABLE.schema();
        if matches!(E::TABLE, Table::Events | Table::Segments | Table::Edges) {
            // Names (kinds, causes, states, marker texts): their min/max skip no row group
            // (every group has most kinds) and cost two byte comparisons per value, a third
            // of the string columns' encoding beside the dictionary's.
            for field in schema.fields() {
                if matches!(field.data_type(), DataType::Utf8) {
                    props = props.set_column_statistics_enabled(
                        ColumnPath::from(field.name().as_str()),
                        EnabledStatistics::None,
                    );
                }
            }
        }
        // ArrowWriter embeds the Arrow schema in the footer metadata (readers get the exact
        // types back: UInt32, Utf8...); then its lower-level parts do the writing.
        let compressed = props.clone().set_compression(Compression::ZSTD(level));
        let (file, factory) = ArrowWriter::try_new(out, schema.clone(), Some(compressed.build()))
            .and_then(|w| w.into_serialized_writer())
            .map_err(pq)?;
        // The uncompressed columns' writers come from a writer of their own (to nowhere):
        // the codec is a property of the factory. Their chunks go into `file`'s row groups
        // like the others, each naming its codec.
        let uncompressed = props.set_compression(Compression::UNCOMPRESSED);
        let (_, small) =
            ArrowWriter::try_new(std::io::sink(), schema.clone(), Some(uncompressed.build()))
                .and_then(|w| w.into_serialized_writer())
                .map_err(pq)?;
        let batch_rows = options.batch_rows.max(1);
        // Small tables (threads, errors) do not need a full batch of capacity up front.
        let capacity = if E::TABLE == Table::Events {
            batch_rows
        } else {
            batch_rows.min(4096)
        };
        let sink = ColumnSink {
            path: path.clone(),
            schema: schema.clone(),
            file,
            factory,
            small,
            group: None,
            group_rows: 0,
            row_group_rows,
            batch_rows,
            threads: options.encode_threads.max(1),
        };
        let columns = Columns::Inline {
            sink: Some(Box::new(sink)),
            threaded: matches!(E::TABLE, Table::Events | Table::Segments | Table::Edges),
            batches: 0,
        };
        Ok(TableWriter {
            path,
            schema,
            enc: E::with_capacity(capacity),
            batch_rows,
            rows: 0,
            columns,
        })
    }

    fn push(&mut self, row: &E::Row) -> Result<(), SinkError> {
        self.enc.push(row);
        if self.enc.len() >= self.batch_rows {
            self.flush_batch()?;
        }
        Ok(())
    }

    fn flush_batch(&mut self) -> Result<(), SinkError> {
        let n = self.enc.len();
        if n == 0 {
            return Ok(());
        }
        let batch =
            RecordBatch::try_new(self.schema.clone(), self.enc.finish()).map_err(|source| {
                SinkError::Arrow {
                    path: self.path.clone(),
                    source,
                }
            })?;
        self.send(Piece::Batch(batch))?;
        self.rows += n as u64;
        Ok(())
    }

    /// Appends a part encoded before (after the rows pushed so far): its row groups are
    /// copied as they are, nothing is decoded or encoded again.
    fn append(&mut self, part: Arc<EncodedPart>) -> Result<(), SinkError> {
        if part.table != E::TABLE {
            return Err(SinkError::Parquet {
                path: self.path.clone(),
                source: ParquetError::General(format!(
                    "a part of {} appended to {}",
                    part.table.file_name(),
                    E::TABLE.file_name()
                )),
            });
        }
        self.flush_batch()?;
        let rows = part.rows;
        self.send(Piece::Part(part))?;
        self.rows += rows;
        Ok(())
    }

    /// Moves a large table's encoding to a thread of its own once its second batch comes.
    fn start_encoder(&mut self) -> Result<(), SinkError> {
        let Columns::Inline {
            sink,
            threaded: true,
            batches,
        } = &mut self.columns
        else {
            return Ok(());
        };
        *batches += 1;
        if *batches < 2 {
            return Ok(());
        }
        let Some(mut sink) = sink.take() else {
            return Ok(());
        };
        // Two batches in flight: bounded memory, and the encoder never waits for the
        // producer while it has work.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Piece>(2);
        let handle = std::thread::Builder::new()
            .name(format!("argus-write-{}", E::TABLE.file_name()))
            .spawn(move || {
                for piece in rx {
                    sink.take(piece)?;
                }
                Ok(*sink)
            })
            .map_err(|e| SinkError::io(&self.path, "starting the encoder thread for", e))?;
        self.columns = Columns::Thread {
            tx: Some(tx),
            handle: Some(handle),
        };
        Ok(())
    }

    /// Hands a piece to the Parquet side.
    fn send(&mut self, piece: Piece) -> Result<(), SinkError> {
        if matches!(piece, Piece::Batch(_)) {
            self.start_encoder()?;
        }
        match &mut self.columns {
            Columns::Inline {
                sink: Some(sink), ..
            } => sink.take(piece)?,
            Columns::Inline { sink: None, .. } => {
                return Err(SinkError::Parquet {
                    path: self.path.clone(),
                    source: ParquetError::General("the table is closed".to_string()),
                })
            }
            Columns::Thread { tx, .. } => {
                let sent = tx.as_ref().is_some_and(|tx| tx.send(piece).is_ok());
                if !sent {
                    // The encoder stopped: it returns why.
                    return Err(match self.columns.join() {
                        Some(Err(e)) => e,
                        _ => SinkError::Parquet {
                            path: self.path.clone(),
                            source: ParquetError::General("the encoder thread stopped".to_string()),
                        },
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the footer; returns the number of rows and the output.
    fn finish(mut self) -> Result<(u64, W), SinkError> {
        self.flush_batch()?;
        let rows = self.rows;
        let sink = match self.columns.join() {
            Some(r) => r?,
            None => {
                return Err(SinkError::Parquet {
                    path: self.path.clone(),
                    source: ParquetError::General("the table is closed".to_string()),
                })
            }
        };
        Ok((rows, sink.close()?))
    }
}

impl<W: Write + Send> ColumnSink<W> {
    fn take(&mut self, piece: Piece) -> Result<(), SinkError> {
        match piece {
            Piece::Batch(batch) => self.write_batch(&batch),
            Piece::Part(part) => self.append(&part),
        }
    }

    /// Closes the row group being filled, then copies the part's row groups.
    fn append(&mut self, part: &EncodedPart) -> Result<(), SinkError> {
        self.flush_group()?;
        let mut copy = || -> Result<(), ParquetError> {
            for (g, rg) in part.meta.row_groups().iter().enumerate() {
                let index = part.meta.page_index_for_row_group(g);
                let mut group = self.file.next_row_group()?;
                for (c, chunk) in rg.columns().iter().enumerate() {
                    let close = ColumnCloseResult {
                        bytes_written: chunk.compressed_size() as u64,
                        rows_written: rg.num_rows() as u64,
                        metadata: chunk.clone(),
                        bloom_filter: None,
                        column_index: index.column_index(c).cloned(),
                        offset_index: index.offset_index(c).cloned(),
                    };
                    group.append_column(&part.bytes, close)?;
                }
                group.close()?;
            }
            Ok(())
        };
        let r = copy();
        r.map_err(|e| self.parquet_error(e))
    }

    fn parquet_error(&self, source: ParquetError) -> SinkError {
        SinkError::Parquet {
            path: self.path.clone(),
            source,
        }
    }

    /// Encodes a batch, cut at row-group boundaries.
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        let n = batch.num_rows();
        // A short batch is the last before its row group closes (at a part or the footer):
        // one that starts a group is the whole group.
        let whole_group = self.group.is_none() && n < self.batch_rows && n <= self.row_group_rows;
        let small = whole_group && n < SMALL_GROUP_ROWS;
        let mut offset = 0;
        while offset < n {
            let take = (n - offset).min(self.row_group_rows - self.group_rows);
            self.encode(&batch.slice(offset, take), small)?;
            self.group_rows += take;
            offset += take;
            if self.group_rows >= self.row_group_rows {
                self.flush_group()?;
            }
        }
        Ok(())
    }

    /// Encodes one batch into the current row group's column writers (`small`: a new
    /// group's are the uncompressed ones).
    fn encode(&mut self, batch: &RecordBatch, small: bool) -> Result<(), SinkError> {
        let mut leaves = Vec::with_capacity(batch.num_columns());
        let mut costs = Vec::with_capacity(batch.num_columns());
        for (field, column) in self.schema.fields().iter().zip(batch.columns()) {
            let column_leaves = compute_leaves(field, column).map_err(|e| self.parquet_error(e))?;
            // Every column of our schemas is one leaf; cost it by its bytes, strings (hashed
            // for the dictionary, compared for statistics) weigh more.
            let weight = if matches!(field.data_type(), DataType::Utf8) {
                4
            } else {
                1
            };
            for leaf in column_leaves {
                costs.push(column.get_buffer_memory_size() * weight);
                leaves.push(leaf);
            }
        }
        if self.group.is_none() {
            let index = self.file.flushed_row_groups().len();
            let factory = if small { &self.small } else { &self.factory };
            let writers = factory
                .create_column_writers(index)
                .map_err(|e| self.parquet_error(e))?;
            self.group = Some(writers);
        }
        let Some(writers) = self.group.as_mut() else {
            return Ok(());
        };
        if writers.len() != leaves.len() {
            return Err(SinkError::Parquet {
                path: self.path.clone(),
                source: ParquetError::General(format!(
                    "{} leaf columns for {} column writers",
                    leaves.len(),
                    writers.len()
                )),
            });
        }
        // A small batch (the last of a table, a quiet period's) is encoded here: helper
        // threads would cost more to start than they save.
        let result = if self.threads <= 1 || batch.num_rows() < PARALLEL_ROWS {
            writers
                .iter_mut()
                .zip(&leaves)
                .try_for_each(|(w, leaf)| w.write(leaf))
        } else {
            encode_parallel(writers, leaves, costs, self.threads)
        };
        result.map_err(|e| self.parquet_error(e))
    }

    fn flush_group(&mut self) -> Result<(), SinkError> {
        self.group_rows = 0;
        let Some(writers) = self.group.take() else {
            return Ok(());
        };
        let close = || -> Result<(), ParquetError> {
            let mut group = self.file.next_row_group()?;
            for w in writers {
                w.close()?.append_to_row_group(&mut group)?;
            }
            group.close()?;
            Ok(())
        };
        close().map_err(|e| self.parquet_error(e))
    }

    /// Writes the footer; returns the output.
    fn close(mut self) -> Result<W, SinkError> {
        self.flush_group()?;
        let path = self.path;
        self.file
            .into_inner()
            .map_err(|source| SinkError::Parquet { path, source })
    }
}

/// Batches of fewer rows are encoded on one thread ([`encode_parallel`] otherwise).
const PARALLEL_ROWS: usize = 8192;

/// Encodes the leaves into their writers on `threads` threads (the caller's included),
/// costliest first, each thread taking the next column when done (longest-processing-time
/// scheduling). Returns the first error.
fn encode_parallel(
    writers: &mut [ArrowColumnWriter],
    leaves: Vec<ArrowLeafColumn>,
    costs: Vec<usize>,
    threads: usize,
) -> Result<(), ParquetError> {
    let mut jobs: Vec<(usize, &mut ArrowColumnWriter, ArrowLeafColumn)> = writers
        .iter_mut()
        .zip(leaves)
        .zip(costs)
        .map(|((w, leaf), cost)| (cost, w, leaf))
        .collect();
    jobs.sort_by_key(|job| std::cmp::Reverse(job.0));
    let jobs: Vec<Mutex<Option<(&mut ArrowColumnWriter, ArrowLeafColumn)>>> = jobs
        .into_iter()
        .map(|(_, w, leaf)| Mutex::new(Some((w, leaf))))
        .collect();
    let next = AtomicUsize::new(0);
    let work = || -> Result<(), ParquetError> {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = jobs.get(i) else {
                return Ok(());
            };
            // Each slot is taken exactly once; a poisoned lock means another thread
            // panicked, and the scope re-raises that panic anyway.
            let job = match slot.lock() {
                Ok(mut guard) => guard.take(),
                Err(poisoned) => poisoned.into_inner().take(),
            };
            if let Some((writer, leaf)) = job {
                writer.write(&leaf)?;
            }
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.min(jobs.len()))
            .map(|_| scope.spawn(work))
            .collect();
        let mut result = work();
        for helper in helpers {
            let r = match helper.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            if result.is_ok() {
                result = r;
            }
        }
        result
    })
}

/// Rows of one table encoded once, to be copied into any number of snapshots: a complete
/// Parquet file in memory (row groups, footer, page indexes), whose row groups
/// [`SnapshotWriter::append_segment_part`] and [`SnapshotWriter::append_edge_part`] copy
/// without decoding or encoding them again. `argus start` keeps its graph in time buckets:
/// a bucket that did not change since the last snapshot is not encoded again.
pub struct EncodedPart {
    table: Table,
    bytes: bytes::Bytes,
    meta: ParquetMetaData,
    rows: u64,
}

impl std::fmt::Debug for EncodedPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedPart")
            .field("table", &self.table)
            .field("rows", &self.rows)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl EncodedPart {
    /// Segments encoded as `segments.parquet` is (same columns, encodings, row groups).
    pub fn segments<I>(rows: I, options: &WriterOptions) -> Result<EncodedPart, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<Segment>,
    {
        EncodedPart::encode::<SegmentEncoder, I>(rows, options)
    }

    /// Edges encoded as `edges.parquet` is.
    pub fn edges<I>(rows: I, options: &WriterOptions) -> Result<EncodedPart, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<CausalEdge>,
    {
        EncodedPart::encode::<EdgeEncoder, I>(rows, options)
    }

    fn encode<E: Encoder, I>(rows: I, options: &WriterOptions) -> Result<EncodedPart, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<E::Row>,
    {
        let path = PathBuf::from(format!("(a part of {} in memory)", E::TABLE.file_name()));
        let mut tw = TableWriter::<E, Vec<u8>>::with_output(path.clone(), Vec::new(), options)?;
        write_all(&mut tw, rows)?;
        let (rows, out) = tw.finish()?;
        let bytes = bytes::Bytes::from(out);
        let meta = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(&bytes)
            .map_err(|source| SinkError::Parquet { path, source })?;
        Ok(EncodedPart {
            table: E::TABLE,
            bytes,
            meta,
            rows,
        })
    }

    /// Rows it holds.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes it takes (encoded and compressed).
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// Writes one snapshot directory, table by table, then installs it atomically.
///
/// ```text
///  new(target)          creates  <parent>/.<name>.tmp-<pid>-<n>/  with six open Parquet files
///  write_events(..)*    streams rows through 64k-row Arrow batches (any number of calls)
///  write_segments(..)*  … likewise for every other table (tables never written stay empty)
///  finish(info)         footers, fsync, manifest.json, fsync, rename into place
///  drop without finish  removes the temporary directory; the target is untouched
/// ```
///
/// Replacing: if `target` exists and holds a `manifest.json` (a previous snapshot) it is
/// renamed away, the new one renamed in, and the old one deleted; an empty directory is
/// replaced; anything else is refused with [`SinkError::NotASnapshot`] (checked both by
/// [`SnapshotWriter::new`] and by [`SnapshotWriter::finish`]).
///
/// After any failed call the writer is poisoned: later calls return
/// [`SinkError::WriterFailed`] and the snapshot is never installed.
pub struct SnapshotWriter {
    target: PathBuf,
    events: TableWriter<EventEncoder>,
    segments: TableWriter<SegmentEncoder>,
    edges: TableWriter<EdgeEncoder>,
    spins: TableWriter<SpinEncoder>,
    threads: TableWriter<ThreadEncoder>,
    errors: TableWriter<ErrorEncoder>,
    /// `stacks.parquet`, created by the first [`SnapshotWriter::write_stacks`] call.
    stacks: Option<StacksWriter>,
    zstd_level: i32,
    /// Declared after the tables: dropped (removed) once their encoder threads are done.
    temp: TempDir,
    ts_range: Option<(Nanos, Nanos)>,
    failed: bool,
    /// Whether [`SnapshotWriter::finish`] fsyncs the files and directories
    /// ([`SnapshotWriter::without_sync`]).
    sync: bool,
}

static WRITER_SERIAL: AtomicU64 = AtomicU64::new(0);

/// The parent directory and final name of a target path.
fn split_target(target: &Path) -> Result<(PathBuf, String), SinkError> {
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| *n != "." && *n != "..")
        .ok_or_else(|| SinkError::BadTarget {
            path: target.to_path_buf(),
        })?
        .to_string();
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name))
}

/// What is at the target path now.
enum TargetState {
    Absent,
    EmptyDir,
    Snapshot,
}

fn target_state(target: &Path) -> Result<TargetState, SinkError> {
    let meta = match fs::symlink_metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TargetState::Absent),
        Err(e) => return Err(SinkError::io(target, "inspecting", e)),
    };
    if !meta.is_dir() {
        return Err(SinkError::NotASnapshot {
            path: target.to_path_buf(),
        });
    }
    if target.join(MANIFEST_FILE).is_file() {
        return Ok(TargetState::Snapshot);
    }
    let mut entries = fs::read_dir(target).map_err(|e| SinkError::io(target, "listing", e))?;
    if entries.next().is_none() {
        Ok(TargetState::EmptyDir)
    } else {
        Err(SinkError::NotASnapshot {
            path: target.to_path_buf(),
        })
    }
}

fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SinkError::io(dir, "syncing directory", e))
}

fn rename(from: &Path, to: &Path) -> Result<(), SinkError> {
    fs::rename(from, to)
        .map_err(|e| SinkError::io(from, format!("renaming to {}", to.display()), e))
}

impl SnapshotWriter {
    /// Starts a snapshot that [`SnapshotWriter::finish`] will install at `target`, with the
    /// default [`WriterOptions`].
    pub fn new(target: impl AsRef<Path>) -> Result<SnapshotWriter, SinkError> {
        SnapshotWriter::with_options(target, WriterOptions::default())
    }

    /// Like [`SnapshotWriter::new`] with explicit Parquet options.
    pub fn with_options(
        target: impl AsRef<Path>,
        options: WriterOptions,
    ) -> Result<SnapshotWriter, SinkError> {
        let target = target.as_ref().to_path_buf();
        let (parent, name) = split_target(&target)?;
        target_state(&target)?;
        let serial = WRITER_SERIAL.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!(".{name}.tmp-{}-{serial}", std::process::id()));
        fs::create_dir(&path).map_err(|e| SinkError::io(&path, "creating directory", e))?;
        let temp = TempDir { path, armed: true };
        let dir = temp.path.clone();
        Ok(SnapshotWriter {
            target,
            events: TableWriter::create(&dir, &options)?,
            segments: TableWriter::create(&dir, &options)?,
            edges: TableWriter::create(&dir, &options)?,
            spins: TableWriter::create(&dir, &options)?,
            threads: TableWriter::create(&dir, &options)?,
            errors: TableWriter::create(&dir, &options)?,
            stacks: None,
            zstd_level: options.zstd_level,
            temp,
            ts_range: None,
            failed: false,
            sync: true,
        })
    }

    /// Installs the snapshot without fsyncing anything: for a snapshot that can be made
    /// again from a trace kept elsewhere (`argus start`'s, every few seconds). After a
    /// crash its files may be short or empty; [`check_snapshot`](crate::check_snapshot)
    /// tells.
    pub fn without_sync(mut self) -> SnapshotWriter {
        self.sync = false;
        self
    }

    /// Where the snapshot will be installed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The hidden directory being written (removed on drop unless installed).
    pub fn temp_dir(&self) -> &Path {
        &self.temp.path
    }

    fn check_alive(&self) -> Result<(), SinkError> {
        if self.failed {
            Err(SinkError::WriterFailed {
                path: self.target.clone(),
            })
        } else {
            Ok(())
        }
    }

    fn poison_on_err<T>(&mut self, r: Result<T, SinkError>) -> Result<T, SinkError> {
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// Appends events (streaming: memory stays bounded by one batch whatever the iterator's
    /// length). May be called any number of times; rows keep the iterator's order. Returns the
    /// number of rows this call wrote.
    ///
    /// `SysEnter` keeps only `args[0]` and `args[1]`; see `docs/snapshot.md`.
    pub fn write_events<I>(&mut self, events: I) -> Result<u64, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<Event>,
    {
        self.try_write_events(events.into_iter().map(Ok::<_, std::convert::Infallible>))
    }

    /// Like [`SnapshotWriter::write_events`] for a fallible source (a decoder, a channel):
    /// the first `Err` stops writing, poisons the writer and is returned as
    /// [`SinkError::Input`].
    pub fn try_write_events<I, B, E>(&mut self, events: I) -> Result<u64, SinkError>
    where
        I: IntoIterator<Item = Result<B, E>>,
        B: Borrow<Event>,
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    {
        self.try_write_events_then(events, drop)
    }

    /// Like [`SnapshotWriter::try_write_events`], handing each event to `then` once it is
    /// encoded: a caller that needs the events afterwards (the build feeds them to the
    /// dataflow) takes them without a copy.
    pub fn try_write_events_then<I, B, E, F>(
        &mut self,
        events: I,
        mut then: F,
    ) -> Result<u64, SinkError>
    where
        I: IntoIterator<Item = Result<B, E>>,
        B: Borrow<Event>,
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
        F: FnMut(B),
    {
        self.check_alive()?;
        let mut n = 0u64;
        let mut range = self.ts_range;
        let run = || -> Result<(), SinkError> {
            for item in events {
                let item = item.map_err(|e| SinkError::Input {
                    table: Table::Events.file_name(),
                    source: e.into(),
                })?;
                let event = item.borrow();
                range = Some(match range {
                    None => (event.ts, event.ts),
                    Some((lo, hi)) => (lo.min(event.ts), hi.max(event.ts)),
                });
                self.events.push(event)?;
                n += 1;
                then(item);
            }
            Ok(())
        };
        let r = run();
        self.ts_range = range;
        self.poison_on_err(r).map(|()| n)
    }

    /// Appends segments. Returns the number of rows written.
    pub fn write_segments<I>(&mut self, rows: I) -> Result<u64, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<Segment>,
    {
        self.check_alive()?;
        let r = write_all(&mut self.segments, rows);
        self.poison_on_err(r)
    }

    /// Appends causal edges. Returns the number of rows written.
    pub fn write_edges<I>(&mut self, rows: I) -> Result<u64, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<CausalEdge>,
    {
        self.check_alive()?;
        let r = write_all(&mut self.edges, rows);
        self.poison_on_err(r)
    }

    /// Appends segments and edges at once, the edges from a second thread, so that building
    /// the two tables' columns overlaps (each table also encodes on its own thread). Returns
    /// the rows written of each.
    pub fn write_segments_and_edges<S, E>(
        &mut self,
        segments: S,
        edges: E,
    ) -> Result<(u64, u64), SinkError>
    where
        S: IntoIterator,
        S::Item: Borrow<Segment>,
        E: IntoIterator + Send,
        E::Item: Borrow<CausalEdge>,
    {
        self.check_alive()?;
        let edges_path = self.edges.path.clone();
        let (seg, edg) = (&mut self.segments, &mut self.edges);
        let r = std::thread::scope(|scope| {
            let e = std::thread::Builder::new()
                .name("argus-edges".into())
                .spawn_scoped(scope, move || write_all(edg, edges))
                .map_err(|e| SinkError::io(&edges_path, "starting a thread for", e));
            let s = write_all(seg, segments);
            let e = match e {
                Ok(h) => match h.join() {
                    Ok(r) => r,
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                Err(e) => Err(e),
            };
            Ok((s?, e?))
        });
        self.poison_on_err(r)
    }

    /// Appends segments encoded before ([`EncodedPart::segments`]), after the rows written
    /// so far; returns the rows appended.
    pub fn append_segment_part(&mut self, part: Arc<EncodedPart>) -> Result<u64, SinkError> {
        self.check_alive()?;
        let rows = part.rows;
        let r = self.segments.append(part).map(|()| rows);
        self.poison_on_err(r)
    }

    /// Appends edges encoded before ([`EncodedPart::edges`]); returns the rows appended.
    pub fn append_edge_part(&mut self, part: Arc<EncodedPart>) -> Result<u64, SinkError> {
        self.check_alive()?;
        let rows = part.rows;
        let r = self.edges.append(part).map(|()| rows);
        self.poison_on_err(r)
    }

    /// Appends spinning vertices. Returns the number of rows written.
    pub fn write_spins<I>(&mut self, rows: I) -> Result<u64, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<Spin>,
    {
        self.check_alive()?;
        let r = write_all(&mut self.spins, rows);
        self.poison_on_err(r)
    }

    /// Appends threads. Returns the number of rows written.
    pub fn write_threads<I>(&mut self, rows: I) -> Result<u64, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<ThreadInfo>,
    {
        self.check_alive()?;
        let r = write_all(&mut self.threads, rows);
        self.poison_on_err(r)
    }

    /// Appends error records. Returns the number of rows written.
    pub fn write_errors<I>(&mut self, rows: I) -> Result<u64, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<ErrorRecord>,
    {
        self.check_alive()?;
        let r = write_all(&mut self.errors, rows);
        self.poison_on_err(r)
    }

    /// Appends call stacks to `stacks.parquet` (one row per frame; the file exists only
    /// once this was called). Returns the number of rows (frames) written.
    pub fn write_stacks<I>(&mut self, stacks: I) -> Result<u64, SinkError>
    where
        I: IntoIterator,
        I::Item: Borrow<EventStack>,
    {
        self.check_alive()?;
        let r = (|| {
            if self.stacks.is_none() {
                self.stacks = Some(StacksWriter::create(&self.temp.path, self.zstd_level)?);
            }
            let mut n = 0;
            if let Some(w) = self.stacks.as_mut() {
                for s in stacks {
                    let s = s.borrow();
                    w.push(s)?;
                    n += s.frames.len() as u64;
                }
            }
            Ok(n)
        })();
        self.poison_on_err(r)
    }

    /// Closes every table, writes `manifest.json`, fsyncs, and installs the directory at the
    /// target. Returns the manifest written.
    pub fn finish(self, info: SnapshotInfo) -> Result<Manifest, SinkError> {
        self.check_alive()?;
        let SnapshotWriter {
            target,
            mut temp,
            events,
            segments,
            edges,
            spins,
            threads,
            errors,
            stacks,
            zstd_level: _,
            ts_range,
            failed: _,
            sync,
        } = self;
        if let Some(stacks) = stacks {
            stacks.close(sync)?;
        }
        let counts = TableCounts {
            events: events.close(sync)?,
            segments: segments.close(sync)?,
            edges: edges.close(sync)?,
            spins: spins.close(sync)?,
            threads: threads.close(sync)?,
            errors: errors.close(sync)?,
        };
        let manifest = Manifest {
            schema_version: SCHEMA_VERSION,
            created_by: info.created_by,
            sources: info
                .sources
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            trace_start_ns: info.trace_start_ns.or(ts_range.map(|r| r.0)),
            trace_end_ns: info.trace_end_ns.or(ts_range.map(|r| r.1)),
            epoch: info.epoch,
            watermark_ns: info.watermark_ns,
            counts,
            lost_events: info.lost_events,
            lost_ranges: merged_ranges(info.lost_ranges),
            unknown_events: info.unknown_events,
            threshold_ns: info.threshold_ns,
            workers: info.workers,
            wall_offset_ns: info.wall_offset_ns,
            recorder_tids: info.recorder_tids,
        };
        let path = temp.path.join(MANIFEST_FILE);
        let json = serde_json::to_vec_pretty(&manifest).map_err(|source| SinkError::Manifest {
            path: path.clone(),
            source,
        })?;
        let mut file = File::create(&path).map_err(|e| SinkError::io(&path, "creating", e))?;
        file.write_all(&json)
            .and_then(|()| file.write_all(b"\n"))
            .map_err(|e| SinkError::io(&path, "writing", e))?;
        if sync {
            file.sync_all()
                .map_err(|e| SinkError::io(&path, "syncing", e))?;
            sync_dir(&temp.path)?;
        }
        drop(file);
        install(&temp.path, &target, sync)?;
        temp.armed = false;
        tracing::debug!(target = %target.display(), events = counts.events,
            segments = counts.segments, "snapshot written");
        Ok(manifest)
    }
}

fn write_all<E, W, I>(tw: &mut TableWriter<E, W>, rows: I) -> Result<u64, SinkError>
where
    E: Encoder,
    W: Write + Send + 'static,
    I: IntoIterator,
    I::Item: Borrow<E::Row>,
{
    let mut n = 0;
    for row in rows {
        tw.push(row.borrow())?;
        n += 1;
    }
    Ok(n)
}

/// Moves the finished temporary directory to `target` (see [`SnapshotWriter`]).
fn install(temp: &Path, target: &Path, sync: bool) -> Result<(), SinkError> {
    let (parent, name) = split_target(target)?;
    match target_state(target)? {
        // rename(2) replaces an empty directory atomically.
        TargetState::Absent | TargetState::EmptyDir => rename(temp, target)?,
        TargetState::Snapshot => {
            let serial = WRITER_SERIAL.fetch_add(1, Ordering::Relaxed);
            let old = parent.join(format!(".{name}.old-{}-{serial}", std::process::id()));
            rename(target, &old)?;
            if let Err(e) = rename(temp, target) {
                // Put the previous snapshot back so the target is never left missing.
                if let Err(back) = fs::rename(&old, target) {
                    tracing::error!(old = %old.display(), error = %back,
                        "could not restore the previous snapshot");
                }
                return Err(e);
            }
            if let Err(e) = fs::remove_dir_all(&old) {
                tracing::warn!(path = %old.display(), error = %e,
                    "could not delete the replaced snapshot");
            }
        }
    }
    if sync {
        sync_dir(&parent)?;
    }
    Ok(())
}

/// Everything a snapshot holds, in memory, for [`write_snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotData {
    /// Manifest fields supplied by the caller.
    pub info: SnapshotInfo,
    /// Decoded events.
    pub events: Vec<Event>,
    /// Segments.
    pub segments: Vec<Segment>,
    /// Causal edges.
    pub edges: Vec<CausalEdge>,
    /// Spinning vertices.
    pub spins: Vec<Spin>,
    /// Threads.
    pub threads: Vec<ThreadInfo>,
    /// Unusable records.
    pub errors: Vec<ErrorRecord>,
}

/// Writes a whole in-memory snapshot to `dir` (see [`SnapshotWriter`] for the streaming
/// form and the replacement rules).
pub fn write_snapshot(dir: &Path, snap: &SnapshotData) -> Result<Manifest, SinkError> {
    let mut w = SnapshotWriter::new(dir)?;
    w.write_events(&snap.events)?;
    w.write_segments(&snap.segments)?;
    w.write_edges(&snap.edges)?;
    w.write_spins(&snap.spins)?;
    w.write_threads(&snap.threads)?;
    w.write_errors(&snap.errors)?;
    w.finish(snap.info.clone())
}

/// Sorts `ranges` (each given in either order) and merges the ones that overlap or touch.
fn merged_ranges(ranges: Vec<(Nanos, Nanos)>) -> Vec<(Nanos, Nanos)> {
    let mut ranges: Vec<(Nanos, Nanos)> = ranges
        .into_iter()
        .map(|(a, b)| (a.min(b), a.max(b)))
        .collect();
    ranges.sort_unstable();
    let mut out: Vec<(Nanos, Nanos)> = Vec::with_capacity(ranges.len());
    for (from, to) in ranges {
        match out.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => out.push((from, to)),
        }
    }
    out
}
