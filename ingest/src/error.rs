//! The crate's error type.

use crate::format::FormatError;
use crate::page::PageErrorKind;
use argus_schema::{Cpu, ErrorRecord, Nanos};
use std::path::PathBuf;

/// What went wrong while reading a trace. File paths are relative to the trace directory
/// (`cpu0/000001.chunk.zst`, `formats/events/sched/sched_switch/format`); offsets in chunk
/// files count bytes of *decompressed* content (`page index * page_size + offset in page`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The trace directory does not exist or is not a directory.
    #[error("{}: not a trace directory ({source})", dir.display())]
    NotADirectory {
        /// The directory given.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file the trace needs is absent.
    #[error("{}: not found (the trace directory is incomplete; re-record)", file.display())]
    Missing {
        /// The file.
        file: PathBuf,
    },
    /// Reading a file failed.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A JSON document (`meta.json`, `proc.json`) does not parse.
    #[error("{}: {source}", file.display())]
    Json {
        /// The file.
        file: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// `meta.json` names another format or version.
    #[error("{}: unsupported trace format {format:?} version {version} (this build reads {:?} version {})", file.display(), crate::tracedir::FORMAT_NAME, crate::tracedir::FORMAT_VERSION)]
    Unsupported {
        /// `meta.json`.
        file: PathBuf,
        /// Its `format`.
        format: String,
        /// Its `version`.
        version: u32,
    },
    /// `meta.json` gives an unusable page size.
    #[error("{}: page size {page_size} is not a power of two between 4096 and 1048576", file.display())]
    BadPageSize {
        /// `meta.json`.
        file: PathBuf,
        /// The value.
        page_size: u32,
    },
    /// `meta.json` gives a clock other than `mono`.
    #[error("{}: trace clock {clock:?} is not \"mono\"", file.display())]
    BadClock {
        /// `meta.json`.
        file: PathBuf,
        /// The value.
        clock: String,
    },
    /// A format file does not parse, or lacks a field Argus needs.
    #[error("{}: {source}", file.display())]
    Format {
        /// The format file.
        file: PathBuf,
        /// Why.
        source: FormatError,
    },
    /// A chunk's zstd stream ends before the end of its frame.
    #[error("{}: truncated zstd stream after {decompressed} decompressed bytes", file.display())]
    TruncatedChunk {
        /// The chunk.
        file: PathBuf,
        /// Bytes decompressed before the end.
        decompressed: u64,
    },
    /// A chunk's zstd stream is corrupt.
    #[error("{}: corrupt zstd stream after {decompressed} decompressed bytes: {source}", file.display())]
    CorruptChunk {
        /// The chunk.
        file: PathBuf,
        /// Bytes decompressed before the error.
        decompressed: u64,
        /// zstd's complaint.
        source: std::io::Error,
    },
    /// A chunk's content is not a whole number of pages.
    #[error("{}: decompressed size {size} is not a multiple of the page size {page_size}", file.display())]
    PartialPage {
        /// The chunk.
        file: PathBuf,
        /// Decompressed bytes.
        size: u64,
        /// Page size.
        page_size: u32,
    },
    /// A malformed ring-buffer page.
    #[error("{}: offset {offset} (page {page}): {kind}", file.display())]
    Page {
        /// The chunk.
        file: PathBuf,
        /// Page index within the chunk.
        page: u64,
        /// Byte offset within the decompressed chunk.
        offset: u64,
        /// What.
        kind: PageErrorKind,
    },
    /// A container file (a trace-cmd `trace.dat`) whose header, option or section table is
    /// malformed or unsupported: a size or offset past the end of the file, a missing string
    /// terminator, an unknown version or compression. `offset` is a byte offset in the file.
    #[error("{}: offset {offset}: {what}", file.display())]
    Malformed {
        /// The file.
        file: PathBuf,
        /// Where in it.
        offset: u64,
        /// What is wrong (and, for what Argus does not read, how to convert it).
        what: String,
    },
    /// A CPU's records go back in time.
    #[error("{}: offset {offset}: cpu{} time goes backwards ({ts} after {prev})", file.display(), cpu.0)]
    NotMonotonic {
        /// The CPU.
        cpu: Cpu,
        /// The chunk.
        file: PathBuf,
        /// Byte offset within the decompressed chunk.
        offset: u64,
        /// The record's time.
        ts: Nanos,
        /// The time of the CPU's previous record.
        prev: Nanos,
    },
}

impl IngestError {
    /// Whether reading can go on after this error (the bad page, chunk or record is skipped
    /// by [`crate::replay`]'s iterators); `false` for errors that stop the whole trace.
    pub fn is_recoverable(&self) -> bool {
        matches!(
            self,
            IngestError::TruncatedChunk { .. }
                | IngestError::CorruptChunk { .. }
                | IngestError::PartialPage { .. }
                | IngestError::Page { .. }
                | IngestError::NotMonotonic { .. }
        )
    }

    /// The file the error is about, when there is one.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            IngestError::NotADirectory { dir, .. } => Some(dir),
            IngestError::Missing { file }
            | IngestError::Io { file, .. }
            | IngestError::Json { file, .. }
            | IngestError::Unsupported { file, .. }
            | IngestError::BadPageSize { file, .. }
            | IngestError::BadClock { file, .. }
            | IngestError::Format { file, .. }
            | IngestError::TruncatedChunk { file, .. }
            | IngestError::CorruptChunk { file, .. }
            | IngestError::PartialPage { file, .. }
            | IngestError::Page { file, .. }
            | IngestError::Malformed { file, .. }
            | IngestError::NotMonotonic { file, .. } => Some(file),
        }
    }

    /// As a row of the errors table.
    pub fn to_error_record(&self) -> ErrorRecord {
        let offset = match self {
            IngestError::TruncatedChunk { decompressed, .. }
            | IngestError::CorruptChunk { decompressed, .. } => Some(*decompressed),
            IngestError::Page { offset, .. }
            | IngestError::NotMonotonic { offset, .. }
            | IngestError::Malformed { offset, .. } => Some(*offset),
            _ => None,
        };
        let ts = match self {
            IngestError::NotMonotonic { ts, .. } => Some(*ts),
            _ => None,
        };
        ErrorRecord {
            source: self
                .file()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
            offset,
            ts,
            message: self.to_string(),
        }
    }
}
