//! The `files/` writer ([`FilesWriter`]): the tracker's lines, buffered and appended to
//! `files/NNNNNN.jsonl.zst` as zstd frames ([`ChunkWriter`]), in files of a quarter of the
//! `files/` share of the ring at most, each starting with the whole table restated; the
//! oldest files are deleted when the share is full.

use crate::linux::chunks::{ChunkOptions, ChunkWriter};
use crate::linux::error::RecordError;
use crate::tracedir::{self, FileLine};
use std::path::Path;

/// The share of a `--ring-size` cap set aside for `files/`: 1/16, between 256 KiB and
/// 64 MiB.
pub(crate) fn files_reserve(ring_size: u64) -> u64 {
    (ring_size / 16).clamp(256 << 10, 64 << 20)
}

/// Size of each file when the ring is off.
const UNCAPPED_FILE_BYTES: u64 = 16 << 20;

/// Writes `files/NNNNNN.jsonl.zst`: lines buffered, appended as zstd frames.
pub(super) struct FilesWriter {
    chunks: ChunkWriter,
    file_cap: u64,
    /// Bytes of the snapshot frame the file in progress started with.
    snapshot_bytes: u64,
    buf: Vec<u8>,
    /// Lines were dropped for want of disk space: the next flush begins a file with the
    /// table restated.
    dropped: bool,
    /// Every line also goes here (a live consumer: `live.rs`).
    pub(super) tap: Option<crossbeam_channel::Sender<FileLine>>,
}

impl FilesWriter {
    /// A writer into trace directory `dir` (`files/` must exist); `budget`: bytes `files/`
    /// may use (`None`: no cap).
    pub(super) fn new(dir: &Path, budget: Option<u64>) -> Result<FilesWriter, RecordError> {
        let trace_dir = dir.to_path_buf();
        let options = ChunkOptions {
            budget,
            also_counted: None,
            // Files are cut by `begin`, with the table restated.
            cut_at: None,
            sync_dir_on_create: true,
        };
        Ok(FilesWriter {
            chunks: ChunkWriter::new(move |seq| tracedir::files_path(&trace_dir, seq), options)?,
            file_cap: budget.map_or(UNCAPPED_FILE_BYTES, |b| (b / 4).max(16 << 10)),
            snapshot_bytes: 0,
            buf: Vec::new(),
            dropped: false,
            tap: None,
        })
    }

    /// Files created so far.
    pub(super) fn files_written(&self) -> u32 {
        self.chunks.chunks()
    }

    pub(super) fn line(&mut self, line: &FileLine) {
        if let Some(tap) = &self.tap {
            // Unbounded; a consumer gone is no reason to stop writing the files.
            let _ = tap.send(line.clone());
        }
        // Serializing these plain structs to a Vec cannot fail.
        if serde_json::to_writer(&mut self.buf, line).is_ok() {
            self.buf.push(b'\n');
        }
    }

    pub(super) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the current file is full (counting only what follows its snapshot, so a
    /// large table does not start a new file at every flush).
    pub(super) fn wants_new_file(&self) -> bool {
        if self.dropped {
            return true;
        }
        !self.buf.is_empty()
            && self.chunks.current_bytes().is_some_and(|bytes| {
                bytes >= self.file_cap && bytes - self.snapshot_bytes >= self.file_cap / 2
            })
    }

    /// Completes the current file and starts the next one with a snapshot line and `lines`
    /// (written before anything buffered). The first file's snapshot is the buffered start
    /// scan itself.
    pub(super) fn begin(&mut self, ts: u64, lines: &[FileLine]) -> Result<(), RecordError> {
        let seq = match (
            self.dropped,
            self.chunks.current_bytes(),
            self.chunks.current_seq(),
        ) {
            // The file begun while the disk was full is still empty: begin it again.
            (true, Some(0), Some(seq)) => seq,
            _ => match self.chunks.start_chunk() {
                Err(e) if e.is_no_space() => {
                    self.no_space(&e);
                    return Ok(());
                }
                other => other?,
            },
        };
        self.snapshot_bytes = 0;
        let pending = std::mem::take(&mut self.buf);
        self.line(&FileLine::Snapshot { seq, ts });
        for l in lines {
            self.line(l);
        }
        if !lines.is_empty() || seq == 0 {
            if seq == 0 {
                // The start scan (buffered before the file existed) is the first snapshot.
                self.buf.extend_from_slice(&pending);
                self.write_frame()?;
            } else {
                self.write_frame()?;
                self.buf = pending;
            }
            self.snapshot_bytes = self.chunks.current_bytes().unwrap_or(0);
        } else {
            self.buf.extend_from_slice(&pending);
        }
        self.chunks.enforce();
        Ok(())
    }

    /// Appends the buffered lines to the current file as one zstd frame (nothing before the
    /// first file is begun).
    pub(super) fn write_frame(&mut self) -> Result<(), RecordError> {
        if self.buf.is_empty() || self.chunks.current_bytes().is_none() {
            return Ok(());
        }
        match self.chunks.write_frame(&self.buf, false) {
            Err(e) if e.is_no_space() => self.no_space(&e),
            Ok(()) => self.dropped = false,
            Err(e) => return Err(e),
        }
        self.buf.clear();
        Ok(())
    }

    /// The disk is full: the buffered lines are lost; the next file restates the whole
    /// table (`wants_new_file`), so what follows is complete again.
    fn no_space(&mut self, e: &RecordError) {
        crate::linux::chunks::DiskFull::say(e);
        self.buf.clear();
        self.dropped = true;
    }

    /// `fdatasync`s the current file.
    pub(super) fn sync(&mut self) -> Result<(), RecordError> {
        self.chunks.sync()
    }
}
