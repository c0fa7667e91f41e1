//! Reading a trace directory (`docs/trace-dir.md`) back: validation, formats, per-CPU chunk
//! streams (zstd decompressed incrementally, page by page) and the merged event stream.
//!
//! ```text
//! TraceReader::open(dir)       meta.json checked, formats/ parsed, proc.json + kallsyms.zst read
//!   .events()                  Events: Iterator<Item = Result<Event, IngestError>>
//!       cpu0: chunk → pages → records → Decoded ─┐
//!       cpu1: ...                                 ├─ Merge (seq, pid) ─► Event
//!   events.finish()            ReplaySummary: threads, lost events, skipped records
//! ```
//!
//! Errors name the file relative to the trace directory and the byte offset in the chunk's
//! decompressed content. Page-level problems are recoverable: the iterator yields the error,
//! skips the rest of that page (or chunk, for a broken zstd stream) and goes on, so a caller
//! may stop at the first error or collect them ([`IngestError::is_recoverable`]).
//!
//! **Traces still being written, or whose recorder died** (`meta.json` status `recording`):
//! the newest chunk of each CPU may end in a zstd frame cut short (the recorder is writing
//! it, or was killed while writing it). Its complete pages are kept and the cut is counted
//! in [`CpuStats::recovered_tails`] with a warning, not reported as an error. The same cut
//! in any other chunk, or in a trace whose status is `complete`, is an error.
//!
//! **Rings** (`docs/trace-dir.md`): chunks deleted by the recorder's size cap leave CPUs
//! whose data starts later than others. The merged stream starts where every CPU's data is
//! complete ([`TraceReader::start_ns`]), so the graph never sees one CPU's half of a
//! handoff without the other's. [`TraceReader::open_window`] (`argus build --last`) reads
//! only the tail of the trace, skipping whole chunks older than the window.

use crate::convert::{Converter, Decoded, Skipped};
use crate::error::IngestError;
use crate::format::{FormatSet, HeaderPage, LoadError};
use crate::kallsyms::Kallsyms;
use crate::merge::{Merge, Source, ThreadTable};
use crate::page::{parse_page, Missed};
use crate::tracedir::{self, MetaExt, ProcEntry, TraceMeta};
use argus_schema::{Cpu, Event, Nanos, ThreadInfo};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An opened, validated trace directory.
#[derive(Debug)]
pub struct TraceReader {
    dir: PathBuf,
    meta: TraceMeta,
    formats: FormatSet,
    converter: Converter,
    kallsyms: Option<Kallsyms>,
    procs: Vec<ProcEntry>,
    /// Chunk files per CPU, relative to `dir`, in order.
    chunks: BTreeMap<u32, Vec<PathBuf>>,
    /// `meta.json`'s extension keys.
    ext: MetaExt,
    /// Per CPU whose oldest chunks are gone: the first page time of the oldest chunk kept.
    complete_from: BTreeMap<u32, u64>,
    /// Events before this time are not returned (ring start, `--last` window).
    cutoff: Option<u64>,
    /// Chunks skipped as older than the window, per CPU.
    window_skipped: BTreeMap<u32, u64>,
    /// For a trace still recording: the size of each CPU's newest chunk when opened, so a
    /// reader sees the trace as it was then however long it takes.
    limits: BTreeMap<PathBuf, u64>,
}

fn rel(dir: &Path, p: &Path) -> PathBuf {
    p.strip_prefix(dir).unwrap_or(p).to_path_buf()
}

fn read_file(dir: &Path, path: &Path) -> Result<Vec<u8>, IngestError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == ErrorKind::NotFound {
            IngestError::Missing {
                file: rel(dir, path),
            }
        } else {
            IngestError::Io {
                file: rel(dir, path),
                source,
            }
        }
    })
}

impl TraceReader {
    /// Opens `dir`: validates `meta.json`, parses every format file (each event listed in
    /// `meta.events` must have one), reads `proc.json` and `kallsyms.zst` (both optional: a
    /// warning is logged when absent) and lists the chunk files.
    pub fn open(dir: &Path) -> Result<TraceReader, IngestError> {
        std::fs::read_dir(dir).map_err(|source| IngestError::NotADirectory {
            dir: dir.to_path_buf(),
            source,
        })?;
        let meta_path = tracedir::meta_path(dir);
        let meta_bytes = read_file(dir, &meta_path)?;
        let meta: TraceMeta =
            serde_json::from_slice(&meta_bytes).map_err(|source| IngestError::Json {
                file: rel(dir, &meta_path),
                source,
            })?;
        let ext = MetaExt::from_meta_json(&meta_bytes).map_err(|source| IngestError::Json {
            file: rel(dir, &meta_path),
            source,
        })?;
        let mfile = rel(dir, &meta_path);
        if meta.format != tracedir::FORMAT_NAME || meta.version != tracedir::FORMAT_VERSION {
            return Err(IngestError::Unsupported {
                file: mfile,
                format: meta.format,
                version: meta.version,
            });
        }
        if meta.clock != "mono" {
            return Err(IngestError::BadClock {
                file: mfile,
                clock: meta.clock,
            });
        }
        if !meta.page_size.is_power_of_two() || !(4096..=1 << 20).contains(&meta.page_size) {
            return Err(IngestError::BadPageSize {
                file: mfile,
                page_size: meta.page_size,
            });
        }
        if meta.status != "complete" {
            tracing::warn!(
                "{}: status {:?}: the recorder did not close this trace cleanly; reading what is there",
                dir.display(),
                meta.status
            );
        }

        let formats = load_formats(dir, &meta)?;
        let converter = Converter::new(&formats).map_err(|e| IngestError::Format {
            file: Path::new("formats/events").join(e.event).join("format"),
            source: e.source,
        })?;

        let proc_path = tracedir::proc_path(dir);
        let procs = match read_file(dir, &proc_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| IngestError::Json {
                file: rel(dir, &proc_path),
                source,
            })?,
            Err(IngestError::Missing { file }) => {
                tracing::warn!("{}: not found; threads start unnamed", file.display());
                Vec::new()
            }
            Err(e) => return Err(e),
        };

        let ks_path = tracedir::kallsyms_path(dir);
        let kallsyms = match File::open(&ks_path) {
            Ok(f) => match Kallsyms::from_zstd(BufReader::new(f)) {
                Ok(k) => Some(k),
                Err(e) => {
                    tracing::warn!("kallsyms.zst: {e}; kernel callbacks stay unnamed");
                    None
                }
            },
            Err(_) => None,
        };

        let mut chunks = BTreeMap::new();
        let mut complete_from = BTreeMap::new();
        for &cpu in &meta.cpus {
            let dropped = ext
                .ring
                .as_ref()
                .and_then(|r| r.dropped.get(&cpu))
                .map_or(0, |d| d.chunks);
            let expected = if meta.status == "complete" {
                meta.chunks.get(&cpu).copied()
            } else {
                None
            };
            let files = list_chunks(dir, cpu, dropped, expected)?;
            if files
                .first()
                .and_then(|f| chunk_seq(f))
                .is_some_and(|s| s > 0)
            {
                let first = chunk_first_ts(
                    &dir.join(&files[0]),
                    &formats.header_page,
                    meta.page_size as usize,
                );
                let from = first.or_else(|| {
                    ext.ring
                        .as_ref()
                        .and_then(|r| r.dropped.get(&cpu))
                        .map(|d| d.until_ns)
                });
                if let Some(from) = from {
                    complete_from.insert(cpu, from);
                }
            }
            chunks.insert(cpu, files);
        }
        let cutoff = complete_from.values().copied().max();
        let mut limits = BTreeMap::new();
        if meta.status != "complete" {
            for f in chunks.values().filter_map(|files| files.last()) {
                if let Ok(m) = std::fs::metadata(dir.join(f)) {
                    limits.insert(f.clone(), m.len());
                }
            }
        }
        if let Some(from) = cutoff {
            tracing::warn!(
                "{}: the ring deleted the oldest chunks of cpus {:?}; reading from {from} ns, where every cpu's data is complete",
                dir.display(),
                complete_from.keys().collect::<Vec<_>>()
            );
        }
        Ok(TraceReader {
            dir: dir.to_path_buf(),
            meta,
            formats,
            converter,
            kallsyms,
            procs,
            chunks,
            ext,
            complete_from,
            cutoff,
            window_skipped: BTreeMap::new(),
            limits,
        })
    }

    /// Opens `dir` like [`TraceReader::open`] but reads only its last `last` of time: the
    /// window ends at `end_ns` for a complete trace, and at the newest page on disk for one
    /// still recording (or whose recorder died). Chunks that end before the window are not
    /// read at all; events before it are dropped (their thread names and forks are still
    /// learnt from the chunks that are read, so threads created in the skipped part keep
    /// the names `proc.json` or later records give them).
    pub fn open_window(dir: &Path, last: Duration) -> Result<TraceReader, IngestError> {
        let mut reader = TraceReader::open(dir)?;
        let page_size = reader.meta.page_size as usize;
        let layout = reader.formats.header_page;
        let end = if reader.meta.status == "complete" && reader.meta.end_ns > 0 {
            reader.meta.end_ns
        } else {
            reader
                .chunks
                .values()
                .filter_map(|files| files.last())
                .filter_map(|f| chunk_last_ts(&dir.join(f), &layout, page_size))
                .max()
                .unwrap_or(reader.meta.start_ns)
        };
        let since = end.saturating_sub(u64::try_from(last.as_nanos()).unwrap_or(u64::MAX));
        for (&cpu, files) in reader.chunks.iter_mut() {
            // The newest chunk that starts at or before `since` holds the window's start;
            // everything older ends before it.
            let keep_from = (0..files.len())
                .rev()
                .find(|&i| {
                    chunk_first_ts(&dir.join(&files[i]), &layout, page_size)
                        .is_some_and(|ts| ts <= since)
                })
                .unwrap_or(0);
            if keep_from > 0 {
                reader.window_skipped.insert(cpu, keep_from as u64);
                files.drain(..keep_from);
            }
        }
        reader.cutoff = Some(reader.cutoff.map_or(since, |c| c.max(since)));
        tracing::info!(
            end_ns = end,
            since_ns = since,
            skipped = ?reader.window_skipped,
            "{}: reading the last {last:?}",
            dir.display()
        );
        Ok(reader)
    }

    /// Where the returned events start: the latest of `meta.start_ns`, the time from which
    /// every CPU's data is complete (rings) and the window's start ([`TraceReader::open_window`]).
    pub fn start_ns(&self) -> u64 {
        self.cutoff
            .map_or(self.meta.start_ns, |c| c.max(self.meta.start_ns))
    }

    /// What each file descriptor referred to (`files/`, [`crate::files`]); empty for traces
    /// without it. A cut last frame is tolerated while the trace's status is `recording`.
    pub fn files(&self) -> Result<crate::files::FileTable, crate::files::FilesError> {
        crate::files::FileTable::read(&self.dir, self.meta.status != "complete")
    }

    /// `meta.json`'s extension keys (ring, lost ranges).
    pub fn meta_ext(&self) -> &MetaExt {
        &self.ext
    }

    /// CPUs whose oldest chunks the ring deleted, with the time their data is complete from.
    pub fn complete_from(&self) -> &BTreeMap<u32, u64> {
        &self.complete_from
    }

    /// Every chunk to be read, in order: CPU, sequence number, path relative to the trace
    /// directory, and the timestamp of its first page (`None` when unreadable).
    pub fn ring_chunks(&self) -> Vec<ChunkInfo> {
        let page_size = self.meta.page_size as usize;
        self.chunks
            .iter()
            .flat_map(|(&cpu, files)| {
                files.iter().map(move |f| ChunkInfo {
                    cpu,
                    seq: chunk_seq(f).unwrap_or(0),
                    file: f.clone(),
                    first_ts: chunk_first_ts(
                        &self.dir.join(f),
                        &self.formats.header_page,
                        page_size,
                    ),
                    bytes: std::fs::metadata(self.dir.join(f)).map_or(0, |m| m.len()),
                })
            })
            .collect()
    }

    /// The trace directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `meta.json`.
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// The parsed format files.
    pub fn formats(&self) -> &FormatSet {
        &self.formats
    }

    /// The kernel symbols, when the trace has them.
    pub fn kallsyms(&self) -> Option<&Kallsyms> {
        self.kallsyms.as_ref()
    }

    /// `proc.json` (empty when absent).
    pub fn procs(&self) -> &[ProcEntry] {
        &self.procs
    }

    /// The chunk files of `cpu`, relative to the trace directory.
    pub fn chunk_files(&self, cpu: u32) -> &[PathBuf] {
        self.chunks.get(&cpu).map_or(&[], Vec::as_slice)
    }

    /// One CPU's decoded records in its buffer order, unmerged (`pid` unresolved, `seq` 0).
    pub fn cpu_stream(&self, cpu: u32) -> CpuStream {
        let stats = CpuStats {
            window_skipped_chunks: self.window_skipped.get(&cpu).copied().unwrap_or(0),
            ..CpuStats::default()
        };
        CpuStream {
            recover_tail: self.meta.status != "complete",
            limits: self
                .limits
                .iter()
                .filter(|(f, _)| self.chunk_files(cpu).contains(f))
                .map(|(f, n)| (f.clone(), *n))
                .collect(),
            cpu: Cpu(cpu),
            dir: self.dir.clone(),
            files: self.chunk_files(cpu).to_vec(),
            next_file: 0,
            chunk: None,
            layout: self.formats.header_page,
            page_size: self.meta.page_size as usize,
            conv: self.converter.clone(),
            page: vec![0; self.meta.page_size as usize],
            buf: Vec::new(),
            pending_err: None,
            last: None,
            stats,
        }
    }

    /// The merged, numbered event stream of every CPU. Call [`Events::finish`] after it ends
    /// for threads and statistics.
    pub fn events(self) -> Events {
        let streams = self.meta.cpus.iter().map(|&c| self.cpu_stream(c)).collect();
        let table = ThreadTable::from_proc(&self.procs);
        Events {
            merge: Merge::new(streams, table),
            meta: self.meta,
            kallsyms: self.kallsyms,
            errors: 0,
            perf: crate::perffile::PerfMerge::load_logged(&self.dir, self.cutoff),
            cutoff: self.cutoff.map(Nanos),
            seq: 0,
            before_cutoff: 0,
        }
    }
}

fn load_formats(dir: &Path, meta: &TraceMeta) -> Result<FormatSet, IngestError> {
    let fdir = tracedir::formats_dir(dir);
    let hp_path = fdir.join("header_page");
    let hp_text = read_file(dir, &hp_path)?;
    let header_page = HeaderPage::parse(&String::from_utf8_lossy(&hp_text)).map_err(|source| {
        IngestError::Format {
            file: rel(dir, &hp_path),
            source,
        }
    })?;
    let events_dir = fdir.join("events");
    let mut formats = if events_dir.is_dir() {
        FormatSet::load_dir(&events_dir).map_err(|e| match e {
            LoadError::Io { path, source } => IngestError::Io {
                file: rel(dir, &path),
                source,
            },
            LoadError::Parse { path, source } => IngestError::Format {
                file: rel(dir, &path),
                source,
            },
        })?
    } else {
        FormatSet::default()
    };
    formats.header_page = header_page;
    if let Ok(text) = std::fs::read_to_string(fdir.join("header_event")) {
        formats.header_event = crate::format::HeaderEvent::parse(&text);
    }
    for ev in &meta.events {
        let (sys, name) = ev.split_once('/').unwrap_or(("", ev.as_str()));
        if formats.by_name(sys, name).is_none() {
            return Err(IngestError::Missing {
                file: Path::new("formats/events")
                    .join(sys)
                    .join(name)
                    .join("format"),
            });
        }
    }
    Ok(formats)
}

/// A chunk of a trace directory ([`TraceReader::ring_chunks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Its CPU.
    pub cpu: u32,
    /// Its sequence number.
    pub seq: u32,
    /// Its path relative to the trace directory.
    pub file: PathBuf,
    /// The timestamp of its first page.
    pub first_ts: Option<u64>,
    /// Its size on disk.
    pub bytes: u64,
}

/// The sequence number of a chunk file name (`000042.chunk.zst` → 42; at least six digits,
/// more once a long-running ring passes 999999).
fn chunk_seq(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_suffix(".chunk.zst")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Decompresses the first page of a chunk and returns its header timestamp.
fn chunk_first_ts(path: &Path, layout: &HeaderPage, page_size: usize) -> Option<u64> {
    let mut dec = zstd::stream::read::Decoder::new(File::open(path).ok()?).ok()?;
    let mut page = vec![0u8; page_size];
    dec.read_exact(&mut page).ok()?;
    parse_page(layout, &page).ok().map(|r| r.header().ts)
}

/// The latest record timestamp of a chunk, reading as far as it decodes (a chunk being
/// written may end in a cut frame). Records, not page headers: a page's header holds the
/// time of its first record only.
fn chunk_last_ts(path: &Path, layout: &HeaderPage, page_size: usize) -> Option<u64> {
    let mut dec = zstd::stream::read::Decoder::new(File::open(path).ok()?).ok()?;
    let mut page = vec![0u8; page_size];
    let mut last: Option<u64> = None;
    while dec.read_exact(&mut page).is_ok() {
        if let Ok(records) = parse_page(layout, &page) {
            for r in records.map_while(Result::ok) {
                last = Some(last.map_or(r.ts, |l| l.max(r.ts)));
            }
        }
    }
    last
}

fn list_chunks(
    dir: &Path,
    cpu: u32,
    dropped: u32,
    expected: Option<u32>,
) -> Result<Vec<PathBuf>, IngestError> {
    let cdir = tracedir::cpu_dir(dir, cpu);
    let mut files: Vec<(u32, PathBuf)> = match std::fs::read_dir(&cdir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .filter_map(|e| {
                let p = rel(dir, &e.path());
                chunk_seq(&p).map(|seq| (seq, p))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    let files: Vec<PathBuf> = files.into_iter().map(|(_, p)| p).collect();
    // meta.json counts the chunks of a clean close: each of those the ring kept must be
    // there.
    for seq in dropped..expected.unwrap_or(0) {
        let p = rel(dir, &tracedir::chunk_path(dir, cpu, seq));
        if !files.contains(&p) {
            return Err(IngestError::Missing { file: p });
        }
    }
    Ok(files)
}

/// Per-CPU counters of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Pages read.
    pub pages: u64,
    /// Records decoded (all ids).
    pub records: u64,
    /// Events lost, as counted by the pages' commit flags.
    pub lost: u64,
    /// Pages flagged as following lost events without a count.
    pub lost_unknown_pages: u64,
    /// Errors reported.
    pub errors: u64,
    /// Cut zstd frames at the end of the newest chunk of a trace still recording (or whose
    /// recorder died), recovered up to the last complete page.
    pub recovered_tails: u64,
    /// Chunks not read because they end before the `--last` window.
    pub window_skipped_chunks: u64,
}

struct Chunk {
    file: PathBuf,
    reader: zstd::stream::read::Decoder<'static, BufReader<std::io::Take<File>>>,
    page_idx: u64,
}

/// One CPU's records, decoded page by page: a [`Source`] for a [`Merge`], which takes each
/// decoded page whole (the records are not moved one by one through an iterator).
pub struct CpuStream {
    /// Whether a cut at the end of the last chunk is a recoverable tail.
    recover_tail: bool,
    /// Bytes to read of chunks still being written.
    limits: BTreeMap<PathBuf, u64>,
    cpu: Cpu,
    dir: PathBuf,
    files: Vec<PathBuf>,
    next_file: usize,
    chunk: Option<Chunk>,
    layout: HeaderPage,
    page_size: usize,
    conv: Converter,
    page: Vec<u8>,
    /// The records of the last decoded page (handed over whole by [`Source::refill`]).
    buf: Vec<Decoded>,
    pending_err: Option<IngestError>,
    last: Option<Nanos>,
    stats: CpuStats,
}

enum PageRead {
    Page,
    ChunkDone,
    Failed(IngestError),
}

impl CpuStream {
    /// The CPU.
    pub fn cpu(&self) -> Cpu {
        self.cpu
    }

    /// Counters so far.
    pub fn stats(&self) -> &CpuStats {
        &self.stats
    }

    /// Records skipped so far.
    pub fn skipped(&self) -> Skipped {
        self.conv.skipped()
    }

    /// Reads the next page; a cut at the end of the newest chunk of a trace still recording
    /// ends that chunk (counted) instead of failing.
    fn read_page(&mut self) -> PageRead {
        match self.read_page_inner() {
            PageRead::Failed(e)
                if self.recover_tail
                    && self.next_file == self.files.len()
                    && matches!(
                        e,
                        IngestError::TruncatedChunk { .. }
                            | IngestError::CorruptChunk { .. }
                            | IngestError::PartialPage { .. }
                    ) =>
            {
                self.stats.recovered_tails += 1;
                tracing::warn!(
                    "{e}: the newest chunk of a trace still recording (or whose recorder died); \
                     keeping its complete pages"
                );
                PageRead::ChunkDone
            }
            other => other,
        }
    }

    /// Reads the next page of the current chunk into `self.page`.
    fn read_page_inner(&mut self) -> PageRead {
        let Some(chunk) = self.chunk.as_mut() else {
            return PageRead::ChunkDone;
        };
        let mut filled = 0;
        let done = chunk.page_idx * self.page_size as u64;
        while filled < self.page_size {
            match chunk.reader.read(&mut self.page[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let file = chunk.file.clone();
                    let decompressed = done + filled as u64;
                    self.chunk = None;
                    return PageRead::Failed(if e.kind() == ErrorKind::UnexpectedEof {
                        IngestError::TruncatedChunk { file, decompressed }
                    } else {
                        IngestError::CorruptChunk {
                            file,
                            decompressed,
                            source: e,
                        }
                    });
                }
            }
        }
        if filled == 0 {
            self.chunk = None;
            return PageRead::ChunkDone;
        }
        if filled < self.page_size {
            let file = chunk.file.clone();
            self.chunk = None;
            return PageRead::Failed(IngestError::PartialPage {
                file,
                size: done + filled as u64,
                page_size: self.page_size as u32,
            });
        }
        PageRead::Page
    }

    fn open_next_chunk(&mut self) -> Option<Result<(), IngestError>> {
        let file = self.files.get(self.next_file)?.clone();
        self.next_file += 1;
        let path = self.dir.join(&file);
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(source) => return Some(Err(IngestError::Io { file, source })),
        };
        // A chunk still being written is read as far as it went when the trace was opened.
        let limit = self.limits.get(&file).copied().unwrap_or(u64::MAX);
        match zstd::stream::read::Decoder::new(f.take(limit)) {
            Ok(reader) => {
                self.chunk = Some(Chunk {
                    file,
                    reader,
                    page_idx: 0,
                });
                Some(Ok(()))
            }
            Err(source) => Some(Err(IngestError::CorruptChunk {
                file,
                decompressed: 0,
                source,
            })),
        }
    }

    /// Decodes `self.page` into `self.buf` (empty when called).
    fn decode_current_page(&mut self) {
        self.buf.clear();
        let Some(chunk) = self.chunk.as_mut() else {
            return;
        };
        let page_idx = chunk.page_idx;
        chunk.page_idx += 1;
        self.stats.pages += 1;
        let base = page_idx * self.page_size as u64;
        let page_err = |file: &Path, kind, offset: usize| IngestError::Page {
            file: file.to_path_buf(),
            page: page_idx,
            offset: base + offset as u64,
            kind,
        };
        let recs = match parse_page(&self.layout, &self.page) {
            Ok(r) => r,
            Err(e) => {
                self.pending_err = Some(page_err(&chunk.file, e.kind, e.offset));
                return;
            }
        };
        match recs.header().missed {
            Missed::None => {}
            Missed::Unknown => self.stats.lost_unknown_pages += 1,
            // Saturating: the count is the page's, whatever wrote it (issue 18).
            Missed::Count(n) => self.stats.lost = self.stats.lost.saturating_add(n),
        }
        for r in recs {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    self.pending_err = Some(page_err(&chunk.file, e.kind, e.offset));
                    return;
                }
            };
            self.stats.records += 1;
            let ts = Nanos(r.ts);
            if let Some(prev) = self.last {
                if ts < prev {
                    self.pending_err = Some(IngestError::NotMonotonic {
                        cpu: self.cpu,
                        file: chunk.file.clone(),
                        offset: base + r.offset as u64,
                        ts,
                        prev,
                    });
                    return;
                }
            }
            self.last = Some(ts);
            match self.conv.convert(self.cpu, &r) {
                Ok(Some(d)) => self.buf.push(d),
                Ok(None) => {}
                Err(e) => {
                    self.pending_err = Some(page_err(&chunk.file, e.kind, e.offset));
                    return;
                }
            }
        }
    }
}

impl Source for CpuStream {
    fn refill(&mut self, out: &mut Vec<Decoded>) -> Result<bool, IngestError> {
        loop {
            if !self.buf.is_empty() {
                // `out` (empty) becomes the buffer of the next page.
                std::mem::swap(&mut self.buf, out);
                return Ok(true);
            }
            if let Some(e) = self.pending_err.take() {
                self.stats.errors += 1;
                return Err(e);
            }
            if self.chunk.is_none() {
                match self.open_next_chunk() {
                    None => return Ok(false),
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        self.stats.errors += 1;
                        return Err(e);
                    }
                }
            }
            match self.read_page() {
                PageRead::Page => self.decode_current_page(),
                PageRead::ChunkDone => {}
                PageRead::Failed(e) => {
                    self.stats.errors += 1;
                    return Err(e);
                }
            }
        }
    }
}

/// The merged event stream of a trace (see [`TraceReader::events`]).
pub struct Events {
    merge: Merge<CpuStream>,
    meta: TraceMeta,
    kallsyms: Option<Kallsyms>,
    errors: u64,
    /// Events before this are decoded (for the thread table) but not returned.
    cutoff: Option<Nanos>,
    /// The next `seq` when filtering (returned events stay numbered 0, 1, 2...).
    seq: u64,
    /// Events dropped as before the cutoff.
    before_cutoff: u64,
    /// Stack samples and watchpoint hits of `perf/` merged into the stream (every event
    /// is then renumbered).
    perf: Option<crate::perffile::PerfMerge>,
}

impl Iterator for Events {
    type Item = Result<Event, IngestError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.perf.is_some() {
            return self.next_merged();
        }
        loop {
            match self.merge.next()? {
                Ok(mut ev) => {
                    if let Some(cutoff) = self.cutoff {
                        if ev.ts < cutoff {
                            self.before_cutoff += 1;
                            continue;
                        }
                        ev.seq = self.seq;
                        self.seq += 1;
                    }
                    return Some(Ok(ev));
                }
                Err(e) => {
                    self.errors += 1;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl Events {
    /// [`Iterator::next`] with `perf/` samples merged in ([`crate::perffile::PerfMerge`]).
    fn next_merged(&mut self) -> Option<Result<Event, IngestError>> {
        loop {
            let perf = self.perf.as_mut()?;
            if let Some(mut ev) = perf.pop() {
                ev.seq = self.seq;
                self.seq += 1;
                return Some(Ok(ev));
            }
            match self.merge.next() {
                None => {
                    perf.finish();
                    let mut ev = perf.pop()?;
                    ev.seq = self.seq;
                    self.seq += 1;
                    return Some(Ok(ev));
                }
                Some(Err(e)) => {
                    self.errors += 1;
                    return Some(Err(e));
                }
                Some(Ok(ev)) => {
                    if self.cutoff.is_some_and(|c| ev.ts < c) {
                        self.before_cutoff += 1;
                        continue;
                    }
                    perf.push(ev);
                }
            }
        }
    }

    /// `meta.json`.
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// The kernel symbols, when the trace has them.
    pub fn kallsyms(&self) -> Option<&Kallsyms> {
        self.kallsyms.as_ref()
    }

    /// The thread table as it stands (useful between batches).
    pub fn threads_so_far(&self) -> Vec<ThreadInfo> {
        self.merge.table().threads()
    }

    /// Ends the stream: threads and statistics (whatever was consumed).
    pub fn finish(self) -> ReplaySummary {
        let events = match (self.cutoff, &self.perf) {
            (None, None) => self.merge.released(),
            _ => self.seq,
        };
        let before_cutoff = self.before_cutoff;
        let (streams, table) = self.merge.into_parts();
        let mut s = ReplaySummary {
            threads: table.threads(),
            events,
            errors: self.errors,
            recorder_lost: self.meta.lost.clone(),
            before_start: before_cutoff,
            ..ReplaySummary::default()
        };
        for st in &streams {
            s.skipped.merge(&st.skipped());
            s.cpus.insert(st.cpu().0, st.stats().clone());
        }
        s
    }
}

/// What replay learned besides the events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Every thread seen or listed in `proc.json`, sorted by tid.
    pub threads: Vec<ThreadInfo>,
    /// Events released.
    pub events: u64,
    /// Errors reported by the iterator.
    pub errors: u64,
    /// Per-CPU counters, including events lost according to the page flags.
    pub cpus: BTreeMap<u32, CpuStats>,
    /// Events lost according to the recorder (`meta.json` `lost`).
    pub recorder_lost: BTreeMap<u32, u64>,
    /// Records not turned into events.
    pub skipped: Skipped,
    /// Events decoded but not returned because they precede [`TraceReader::start_ns`].
    pub before_start: u64,
}

impl ReplaySummary {
    /// Events lost per CPU according to the page flags.
    pub fn lost(&self) -> BTreeMap<u32, u64> {
        self.cpus.iter().map(|(&c, s)| (c, s.lost)).collect()
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn chunk_names() {
        assert_eq!(chunk_seq(Path::new("cpu0/000042.chunk.zst")), Some(42));
        assert_eq!(
            chunk_seq(Path::new("cpu0/1000000.chunk.zst")),
            Some(1_000_000)
        );
        assert_eq!(chunk_seq(Path::new("cpu0/42.chunk.zst")), None);
        assert_eq!(chunk_seq(Path::new("cpu0/000042.chunk.zst.tmp")), None);
    }
}
