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

use crate::decode::{parse_page, Converter, Decoded, Missed, Skipped};
use crate::error::IngestError;
use crate::format::{FormatSet, HeaderPage, LoadError};
use crate::kallsyms::Kallsyms;
use crate::merge::{Merge, ThreadTable};
use crate::tracedir::{self, ProcEntry, TraceMeta};
use argus_schema::{Cpu, Event, Nanos, ThreadInfo};
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};

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
        let meta: TraceMeta =
            serde_json::from_slice(&read_file(dir, &meta_path)?).map_err(|source| {
                IngestError::Json {
                    file: rel(dir, &meta_path),
                    source,
                }
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
        for &cpu in &meta.cpus {
            chunks.insert(cpu, list_chunks(dir, cpu, meta.chunks.get(&cpu).copied())?);
        }
        Ok(TraceReader {
            dir: dir.to_path_buf(),
            meta,
            formats,
            converter,
            kallsyms,
            procs,
            chunks,
        })
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
        CpuStream {
            cpu: Cpu(cpu),
            dir: self.dir.clone(),
            files: self.chunk_files(cpu).to_vec(),
            next_file: 0,
            chunk: None,
            layout: self.formats.header_page,
            page_size: self.meta.page_size as usize,
            conv: self.converter.clone(),
            page: vec![0; self.meta.page_size as usize],
            buf: VecDeque::new(),
            pending_err: None,
            last: None,
            stats: CpuStats::default(),
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

fn list_chunks(dir: &Path, cpu: u32, expected: Option<u32>) -> Result<Vec<PathBuf>, IngestError> {
    let cdir = tracedir::cpu_dir(dir, cpu);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&cdir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.len() == 16
                    && n.ends_with(".chunk.zst")
                    && n[..6].bytes().all(|b| b.is_ascii_digit())
            })
            .map(|e| rel(dir, &e.path()))
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    // meta.json counts the chunks of a clean close: each of those must be there.
    for seq in 0..expected.unwrap_or(0) {
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
}

struct Chunk {
    file: PathBuf,
    reader: zstd::stream::read::Decoder<'static, BufReader<File>>,
    page_idx: u64,
}

/// One CPU's records, decoded page by page: `Iterator<Item = Result<Decoded, IngestError>>`.
pub struct CpuStream {
    cpu: Cpu,
    dir: PathBuf,
    files: Vec<PathBuf>,
    next_file: usize,
    chunk: Option<Chunk>,
    layout: HeaderPage,
    page_size: usize,
    conv: Converter,
    page: Vec<u8>,
    buf: VecDeque<Decoded>,
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

    /// Reads the next page of the current chunk into `self.page`.
    fn read_page(&mut self) -> PageRead {
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
        match zstd::stream::read::Decoder::new(f) {
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
            Missed::Count(n) => self.stats.lost += n,
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
                Ok(Some(d)) => self.buf.push_back(d),
                Ok(None) => {}
                Err(e) => {
                    self.pending_err = Some(page_err(&chunk.file, e.kind, e.offset));
                    return;
                }
            }
        }
    }
}

impl Iterator for CpuStream {
    type Item = Result<Decoded, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(d) = self.buf.pop_front() {
                return Some(Ok(d));
            }
            if let Some(e) = self.pending_err.take() {
                self.stats.errors += 1;
                return Some(Err(e));
            }
            if self.chunk.is_none() {
                match self.open_next_chunk()? {
                    Ok(()) => {}
                    Err(e) => {
                        self.stats.errors += 1;
                        return Some(Err(e));
                    }
                }
            }
            match self.read_page() {
                PageRead::Page => self.decode_current_page(),
                PageRead::ChunkDone => {}
                PageRead::Failed(e) => {
                    self.stats.errors += 1;
                    return Some(Err(e));
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
}

impl Iterator for Events {
    type Item = Result<Event, IngestError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.merge.next();
        if matches!(r, Some(Err(_))) {
            self.errors += 1;
        }
        r
    }
}

impl Events {
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
        let events = self.merge.released();
        let (streams, table) = self.merge.into_parts();
        let mut s = ReplaySummary {
            threads: table.threads(),
            events,
            errors: self.errors,
            recorder_lost: self.meta.lost.clone(),
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
}

impl ReplaySummary {
    /// Events lost per CPU according to the page flags.
    pub fn lost(&self) -> BTreeMap<u32, u64> {
        self.cpus.iter().map(|(&c, s)| (c, s.lost)).collect()
    }
}
