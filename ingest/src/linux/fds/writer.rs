//! The `files/` writer ([`FilesWriter`]): the tracker's lines, buffered and appended to
//! `files/NNNNNN.jsonl.zst` as zstd frames, in files of a quarter of the `files/` share of
//! the ring at most; the oldest files are deleted when the share is full.

use crate::linux::error::RecordError;
use crate::linux::sysinfo;
use crate::tracedir::{self, FileLine};
use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The share of a `--ring-size` cap set aside for `files/`: 1/16, between 256 KiB and
/// 64 MiB.
pub(crate) fn files_reserve(ring_size: u64) -> u64 {
    (ring_size / 16).clamp(256 << 10, 64 << 20)
}

/// Size of each file when the ring is off.
const UNCAPPED_FILE_BYTES: u64 = 16 << 20;

/// Writes `files/NNNNNN.jsonl.zst`: lines buffered, appended as zstd frames.
pub(super) struct FilesWriter {
    dir: PathBuf,
    /// Bytes `files/` may use (`None`: no cap).
    budget: Option<u64>,
    file_cap: u64,
    current: Option<Current>,
    /// Completed files, oldest first, with their sizes.
    done: VecDeque<(PathBuf, u64)>,
    done_bytes: u64,
    buf: Vec<u8>,
    pub(super) files_written: u32,
}

struct Current {
    file: File,
    path: PathBuf,
    bytes: u64,
    /// Bytes of the snapshot frame the file started with.
    snapshot_bytes: u64,
    unsynced: bool,
}

impl FilesWriter {
    pub(super) fn new(dir: &Path, budget: Option<u64>) -> FilesWriter {
        FilesWriter {
            dir: dir.to_path_buf(),
            budget,
            file_cap: budget.map_or(UNCAPPED_FILE_BYTES, |b| (b / 4).max(16 << 10)),
            current: None,
            done: VecDeque::new(),
            done_bytes: 0,
            buf: Vec::new(),
            files_written: 0,
        }
    }

    pub(super) fn line(&mut self, line: &FileLine) {
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
        !self.buf.is_empty()
            && self.current.as_ref().is_some_and(|c| {
                c.bytes >= self.file_cap && c.bytes - c.snapshot_bytes >= self.file_cap / 2
            })
    }

    /// Completes the current file and starts file `seq` with a snapshot line and `lines`
    /// (written before anything buffered). The first file's snapshot is the buffered start
    /// scan itself.
    pub(super) fn begin(
        &mut self,
        seq: u32,
        ts: u64,
        lines: &[FileLine],
    ) -> Result<(), RecordError> {
        if let Some(mut cur) = self.current.take() {
            sync(&mut cur)?;
            self.done_bytes += cur.bytes;
            self.done.push_back((cur.path, cur.bytes));
        }
        let path = tracedir::files_path(&self.dir, seq);
        let file = sysinfo::create_private(&path)?;
        sysinfo::sync_dir(&tracedir::files_dir(&self.dir))?;
        self.files_written = seq + 1;
        self.current = Some(Current {
            file,
            path,
            bytes: 0,
            snapshot_bytes: 0,
            unsynced: false,
        });
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
            if let Some(cur) = self.current.as_mut() {
                cur.snapshot_bytes = cur.bytes;
            }
        } else {
            self.buf.extend_from_slice(&pending);
        }
        self.enforce();
        Ok(())
    }

    pub(super) fn write_frame(&mut self) -> Result<(), RecordError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(cur) = self.current.as_mut() else {
            return Ok(());
        };
        let frame = zstd::bulk::compress(&self.buf, crate::linux::reader::CHUNK_ZSTD_LEVEL)
            .map_err(|source| RecordError::Compress {
                path: cur.path.clone(),
                source,
            })?;
        cur.file
            .write_all(&frame)
            .map_err(|source| RecordError::io("writing", &cur.path, source))?;
        cur.bytes += frame.len() as u64;
        cur.unsynced = true;
        self.buf.clear();
        self.enforce();
        Ok(())
    }

    pub(super) fn sync(&mut self) -> Result<(), RecordError> {
        match self.current.as_mut() {
            Some(cur) => sync(cur),
            None => Ok(()),
        }
    }

    /// Deletes the oldest completed files while `files/` is over its share of the ring.
    fn enforce(&mut self) {
        let Some(budget) = self.budget else {
            return;
        };
        let current = self.current.as_ref().map_or(0, |c| c.bytes);
        while self.done_bytes + current > budget {
            let Some((path, bytes)) = self.done.pop_front() else {
                return;
            };
            self.done_bytes -= bytes;
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "ring: deleted the oldest files record")
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "cannot delete an old files record")
                }
            }
        }
    }
}

fn sync(cur: &mut Current) -> Result<(), RecordError> {
    if cur.unsynced {
        cur.file
            .sync_data()
            .map_err(|source| RecordError::io("syncing", &cur.path, source))?;
        cur.unsynced = false;
    }
    Ok(())
}
