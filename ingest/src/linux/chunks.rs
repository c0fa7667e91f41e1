//! The recorder's chunk files: numbered files in one directory, each a sequence of
//! independent zstd frames appended with one `write(2)` each, `fdatasync`ed at the points
//! the caller asks for, and kept under a byte budget by deleting the oldest completed files.
//! [`ChunkWriter`] writes the tracefs chunks (`cpuN/NNNNNN.chunk.zst`, `reader.rs`), the
//! perf chunks (`perf/NNNNNN.perf.zst`, `perf/collector.rs`) and the file-identity records
//! (`files/NNNNNN.jsonl.zst`, `fds/writer.rs`).
//!
//! ```text
//!  write_frame(raw, sync) ─► zstd frame (level ZSTD_LEVEL) ─► appended to the chunk in
//!     │                       progress (created on the first frame, or by start_chunk;
//!     │                       its directory fsynced when `sync_dir_on_create`)
//!     ├─ sync: fdatasync the chunk in progress
//!     ├─ `cut_at` compressed bytes reached: complete it (fdatasync, joins the ring)
//!     └─ enforce: while completed + in progress + `also_counted` > budget, delete the
//!                 oldest completed chunk (the one in progress is never deleted)
//! ```
//!
//! **A full disk.** A frame the filesystem has no room for (`ENOSPC`, `EDQUOT`) is taken
//! back whole (the chunk is cut back to its last complete frame) and the error returned:
//! [`RecordError::is_no_space`] tells the caller, who makes room or drops the frame and
//! goes on ([`DiskFull`] says so once). The tracefs writers ask the ring to delete its
//! oldest chunks down to its floor first and record what they drop as lost ranges
//! (`reader.rs`); the file-identity and perf writers drop their frame.
//!
//! **Crash safety.** Every frame holds whole records and is appended under the chunk's final
//! name, so a recorder killed at any point leaves every completed chunk whole and the chunk
//! in progress readable up to its last complete frame; a frame cut by the kill is detected
//! by the reader of that directory. Against power loss the data is safe up to the last
//! `fdatasync` the caller asked for (and a completed chunk's is always synced).
//!
//! **Where the users differ** (options and hand-over methods, not copies of the writer):
//!
//! ```text
//!                      tracefs cpuN/          perf/                  files/
//!  cut                 by the drain, at a     cut_at: 1/8 of the     start_chunk, with the
//!                      page count (catch-up   budget                 table restated
//!                      reads pages by index)
//!  fdatasync           on the CPU's syncer    in write_frame         sync() at the flush
//!                      thread: sync_handle,   (every flush           interval
//!                      take                   interval)
//!  dir fsync on create yes                    no                     yes
//!  ring                ring.rs: one budget    budget + also_counted  budget
//!                      for all CPUs, oldest   (maps copies)
//!                      data first, meta.json
//! ```

// Part of the writer serves the Linux recorder only.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use super::error::RecordError;
use super::sysinfo;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// zstd level for chunks. Level 1 because the recorder runs on the machine being traced and
/// must keep up with the kernel on every CPU. Measured on this project's recordings (6.18,
/// default events): a syscall-heavy chunk compresses 38.7x at level 1 and 38.0x at level 3,
/// an idle-system chunk 7.38x vs 7.37x, and level 1 is 5-40% faster. Higher levels buy
/// nothing on these repetitive pages (ids, comm strings, zeroed page tails).
pub(crate) const ZSTD_LEVEL: i32 = 1;

/// How a [`ChunkWriter`] cuts, syncs and caps its chunks.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkOptions {
    /// Bytes the chunks may use (`None`: no cap): past it the oldest completed chunks are
    /// deleted, oldest first.
    pub(crate) budget: Option<u64>,
    /// Bytes of other files counted against [`ChunkOptions::budget`] that this writer never
    /// deletes (perf's maps copies).
    pub(crate) also_counted: Option<Arc<AtomicU64>>,
    /// Complete the chunk in progress after the frame that brings it to this many bytes
    /// (`None`: only [`ChunkWriter::start_chunk`] and [`ChunkWriter::complete`] do).
    pub(crate) cut_at: Option<u64>,
    /// `fsync` the directory after creating a chunk, so its name survives a power loss.
    pub(crate) sync_dir_on_create: bool,
}

/// The chunk being appended to.
struct Current {
    file: File,
    path: PathBuf,
    bytes: u64,
    /// Bytes written since the last `fdatasync`.
    unsynced: bool,
}

impl Current {
    fn sync(&mut self) -> Result<(), RecordError> {
        if self.unsynced {
            self.file
                .sync_data()
                .map_err(|source| RecordError::io("syncing", &self.path, source))?;
            self.unsynced = false;
        }
        Ok(())
    }
}

/// Appends zstd frames to numbered chunk files (see the module docs).
pub(crate) struct ChunkWriter {
    path_of: Box<dyn Fn(u32) -> PathBuf + Send>,
    options: ChunkOptions,
    compressor: zstd::bulk::Compressor<'static>,
    out: Vec<u8>,
    current: Option<Current>,
    /// Completed chunks still on disk, oldest first, with their sizes.
    completed: VecDeque<(PathBuf, u64)>,
    completed_bytes: u64,
    /// Sequence number of the next chunk.
    next_seq: u32,
    /// Chunks deleted by the budget.
    dropped: u64,
}

impl ChunkWriter {
    /// A writer of chunks `path_of(0)`, `path_of(1)`, ... (their directory must exist).
    pub(crate) fn new(
        path_of: impl Fn(u32) -> PathBuf + Send + 'static,
        options: ChunkOptions,
    ) -> Result<ChunkWriter, RecordError> {
        let compressor =
            zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(|source| RecordError::Compress {
                path: path_of(0),
                source,
            })?;
        Ok(ChunkWriter {
            path_of: Box::new(path_of),
            options,
            compressor,
            out: Vec::new(),
            current: None,
            completed: VecDeque::new(),
            completed_bytes: 0,
            next_seq: 0,
            dropped: 0,
        })
    }

    /// Chunks created so far (the next one's sequence number).
    pub(crate) fn chunks(&self) -> u32 {
        self.next_seq
    }

    /// The sequence number of the chunk in progress, if there is one.
    pub(crate) fn current_seq(&self) -> Option<u32> {
        self.current.as_ref().map(|_| self.next_seq - 1)
    }

    /// The path of the chunk in progress, if there is one.
    pub(crate) fn current_path(&self) -> Option<&Path> {
        self.current.as_ref().map(|c| c.path.as_path())
    }

    /// Bytes of the chunk in progress, if there is one.
    pub(crate) fn current_bytes(&self) -> Option<u64> {
        self.current.as_ref().map(|c| c.bytes)
    }

    /// Chunks deleted by the budget so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Completes the chunk in progress (if any) and creates the next one, empty. Returns its
    /// sequence number.
    pub(crate) fn start_chunk(&mut self) -> Result<u32, RecordError> {
        self.complete()?;
        let seq = self.next_seq;
        let path = (self.path_of)(seq);
        let file = sysinfo::create_private(&path)?;
        if self.options.sync_dir_on_create {
            if let Some(dir) = path.parent() {
                sysinfo::sync_dir(dir)?;
            }
        }
        self.next_seq += 1;
        self.current = Some(Current {
            file,
            path,
            bytes: 0,
            unsynced: false,
        });
        Ok(seq)
    }

    /// Compresses `raw` into one zstd frame appended to the chunk in progress (created
    /// first if there is none; nothing is written for an empty `raw`); then `fdatasync`s the
    /// chunk when `sync`, completes it when it reached [`ChunkOptions::cut_at`], and
    /// deletes the oldest chunks past the budget.
    pub(crate) fn write_frame(&mut self, raw: &[u8], sync: bool) -> Result<(), RecordError> {
        if !raw.is_empty() {
            if self.current.is_none() {
                self.start_chunk()?;
            }
            self.append(raw)?;
        }
        if sync {
            self.sync()?;
        }
        if let (Some(limit), Some(bytes)) = (self.options.cut_at, self.current_bytes()) {
            if bytes >= limit {
                self.complete()?;
            }
        }
        self.enforce();
        Ok(())
    }

    fn append(&mut self, raw: &[u8]) -> Result<(), RecordError> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(());
        };
        self.out.clear();
        self.out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        self.compressor
            .compress_to_buffer(raw, &mut self.out)
            .map_err(|source| RecordError::Compress {
                path: cur.path.clone(),
                source,
            })?;
        if let Err(source) = cur.file.write_all(&self.out) {
            // Part of the frame may be on disk: cut the chunk back to its last whole frame,
            // so a later frame follows it directly and the file stays readable.
            let _ = cur.file.set_len(cur.bytes);
            let _ = cur.file.seek(SeekFrom::Start(cur.bytes));
            return Err(RecordError::io("writing", &cur.path, source));
        }
        cur.bytes += self.out.len() as u64;
        cur.unsynced = true;
        Ok(())
    }

    /// A second handle to the chunk in progress when it holds data not yet synced, for an
    /// `fdatasync` on another thread (the tracefs readers' syncer); the chunk counts as
    /// synced from then on.
    pub(crate) fn sync_handle(&mut self) -> Option<(File, PathBuf)> {
        let cur = self.current.as_mut().filter(|c| c.unsynced)?;
        let file = cur.file.try_clone().ok()?;
        cur.unsynced = false;
        Some((file, cur.path.clone()))
    }

    /// Hands the chunk in progress over unsynced, with its size: the caller syncs it (on
    /// another thread) and keeps it in its own ring (the tracefs readers: `ring.rs`).
    pub(crate) fn take(&mut self) -> Option<(File, PathBuf, u64)> {
        self.current.take().map(|c| (c.file, c.path, c.bytes))
    }

    /// `fdatasync`s the chunk in progress if anything was written to it since the last one.
    pub(crate) fn sync(&mut self) -> Result<(), RecordError> {
        match self.current.as_mut() {
            Some(cur) => cur.sync(),
            None => Ok(()),
        }
    }

    /// Completes the chunk in progress, if any: synced, it joins the completed chunks the
    /// budget may delete. The next frame starts a new chunk.
    pub(crate) fn complete(&mut self) -> Result<(), RecordError> {
        if let Some(mut cur) = self.current.take() {
            cur.sync()?;
            self.completed_bytes += cur.bytes;
            self.completed.push_back((cur.path, cur.bytes));
        }
        Ok(())
    }

    /// Deletes the oldest completed chunks while the chunks (and
    /// [`ChunkOptions::also_counted`]) exceed the budget.
    pub(crate) fn enforce(&mut self) {
        let Some(budget) = self.options.budget else {
            return;
        };
        let current = self.current_bytes().unwrap_or(0);
        let also = self
            .options
            .also_counted
            .as_ref()
            .map_or(0, |b| b.load(Ordering::Relaxed));
        while self.completed_bytes + current + also > budget {
            let Some((path, bytes)) = self.completed.pop_front() else {
                return;
            };
            self.completed_bytes -= bytes;
            self.dropped += 1;
            remove(&path);
        }
    }
}

/// Says once per process that a disk the recorder writes to is full, naming the file, and
/// what happens meanwhile ([`RecordError::is_no_space`]).
pub(crate) struct DiskFull;

impl DiskFull {
    /// The one line, the first time any writer meets a full disk (`e`, an error for which
    /// [`RecordError::is_no_space`] holds, names the file).
    pub(crate) fn say(e: &RecordError) {
        let RecordError::Io { path, .. } = e else {
            return;
        };
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if SAID.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::warn!(
            file = %path.display(),
            "the disk is full: the ring deletes its oldest chunks down to its floor \
             (1/8 of --ring-size) to make room; past that, writing pauses until space returns \
             and what was not written is recorded as lost ranges in meta.json; recording goes on"
        );
    }
}

fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::debug!(path = %path.display(), "ring: deleted the oldest chunk"),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(path = %path.display(), error = %err, "cannot delete an old chunk")
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn writer(dir: &Path, options: ChunkOptions) -> ChunkWriter {
        let dir = dir.to_path_buf();
        ChunkWriter::new(move |seq| dir.join(format!("{seq:06}.test.zst")), options).unwrap()
    }

    fn path(dir: &Path, seq: u32) -> PathBuf {
        dir.join(format!("{seq:06}.test.zst"))
    }

    /// Not very compressible bytes (so sizes grow with the input).
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// The complete frames at the start of `data`, decompressed, and whether bytes follow
    /// them (a frame cut short).
    fn frames(data: &[u8]) -> (Vec<Vec<u8>>, bool) {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            match zstd::zstd_safe::find_frame_compressed_size(&data[pos..]) {
                Ok(n) if pos + n <= data.len() => {
                    out.push(zstd::decode_all(&data[pos..pos + n]).unwrap());
                    pos += n;
                }
                _ => return (out, true),
            }
        }
        (out, false)
    }

    #[test]
    fn frames_are_appended_and_byte_identical_to_one_shot_compression() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = writer(tmp.path(), ChunkOptions::default());
        let raws = [noise(1, 5000), vec![7u8; 4096], noise(2, 100)];
        for raw in &raws {
            w.write_frame(raw, false).unwrap();
        }
        // An empty frame writes nothing (and creates no chunk when there is none).
        w.write_frame(&[], true).unwrap();
        assert_eq!((w.chunks(), w.dropped()), (1, 0));
        let data = std::fs::read(path(tmp.path(), 0)).unwrap();
        assert_eq!(w.current_bytes(), Some(data.len() as u64));
        // The on-disk format: each frame exactly what `zstd::bulk::compress` makes at
        // ZSTD_LEVEL (the reused compressor carries nothing from one frame to the next).
        let expected: Vec<u8> = raws
            .iter()
            .flat_map(|r| zstd::bulk::compress(r, ZSTD_LEVEL).unwrap())
            .collect();
        assert_eq!(data, expected);
        assert_eq!(frames(&data), (raws.to_vec(), false));
        assert_eq!(zstd::decode_all(&data[..]).unwrap(), raws.concat());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path(tmp.path(), 0))
            .unwrap()
            .permissions();
        assert_eq!(mode.mode() & 0o777, 0o600);
    }

    #[test]
    fn chunks_are_cut_at_their_size_and_started_on_demand() {
        let tmp = tempfile::tempdir().unwrap();
        let options = ChunkOptions {
            cut_at: Some(3000),
            sync_dir_on_create: true,
            ..ChunkOptions::default()
        };
        let mut w = writer(tmp.path(), options);
        w.write_frame(&noise(1, 2000), true).unwrap();
        assert_eq!(w.chunks(), 1);
        // Crosses the limit: the chunk completes after this frame.
        w.write_frame(&noise(2, 2000), false).unwrap();
        assert_eq!(w.current_bytes(), None);
        let first = std::fs::metadata(path(tmp.path(), 0)).unwrap().len();
        assert!(first >= 3000, "{first}");
        // The next frame starts chunk 1; start_chunk makes chunk 2 at once, empty.
        w.write_frame(&noise(3, 10), false).unwrap();
        assert_eq!(w.chunks(), 2);
        assert_eq!(w.start_chunk().unwrap(), 2);
        assert_eq!(w.current_bytes(), Some(0));
        assert_eq!(std::fs::metadata(path(tmp.path(), 2)).unwrap().len(), 0);
        assert_eq!(
            frames(&std::fs::read(path(tmp.path(), 1)).unwrap()).0,
            vec![noise(3, 10)]
        );
    }

    #[test]
    fn the_budget_deletes_the_oldest_completed_chunks_first() {
        let tmp = tempfile::tempdir().unwrap();
        let also = Arc::new(AtomicU64::new(0));
        let options = ChunkOptions {
            budget: Some(10_000),
            also_counted: Some(also.clone()),
            cut_at: Some(2_000),
            sync_dir_on_create: false,
        };
        let mut w = writer(tmp.path(), options);
        // Each frame is one chunk of ~2 KiB.
        for i in 0..4 {
            w.write_frame(&noise(i + 1, 2048), false).unwrap();
        }
        assert_eq!((w.chunks(), w.dropped()), (4, 0));
        // A fifth passes 10 000 bytes: chunk 0 goes, the others stay.
        w.write_frame(&noise(9, 2048), false).unwrap();
        assert_eq!(w.dropped(), 1);
        assert!(!path(tmp.path(), 0).exists());
        assert!((1..5).all(|seq| path(tmp.path(), seq).exists()));
        // Bytes of other files count too: 5 000 of them leave room for two chunks.
        also.store(5_000, Ordering::Relaxed);
        w.enforce();
        assert_eq!(w.dropped(), 3);
        assert!(!path(tmp.path(), 2).exists());
        assert!(path(tmp.path(), 3).exists());
        // The chunk in progress is never deleted, even alone over the budget.
        also.store(1 << 30, Ordering::Relaxed);
        w.write_frame(&noise(10, 100), false).unwrap();
        assert_eq!(w.dropped(), 5);
        assert_eq!(w.current_bytes().map(|b| b > 0), Some(true));
        assert!(path(tmp.path(), 5).exists());
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn a_crash_leaves_every_complete_frame_readable() {
        let tmp = tempfile::tempdir().unwrap();
        let options = ChunkOptions {
            cut_at: Some(4000),
            ..ChunkOptions::default()
        };
        let mut w = writer(tmp.path(), options);
        let raws: Vec<Vec<u8>> = (0..5).map(|i| noise(i + 1, 1500)).collect();
        for raw in &raws {
            w.write_frame(raw, false).unwrap();
        }
        // Killed: no complete, no sync (the page cache keeps what was written), and a
        // last frame cut halfway by the kill.
        drop(w);
        let partial = zstd::bulk::compress(&noise(99, 1500), ZSTD_LEVEL).unwrap();
        let in_progress = path(tmp.path(), 1);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&in_progress)
            .unwrap();
        file.write_all(&partial[..partial.len() / 2]).unwrap();
        drop(file);
        let (done, cut) = frames(&std::fs::read(path(tmp.path(), 0)).unwrap());
        assert!(!cut, "a completed chunk is whole");
        let (tail, cut) = frames(&std::fs::read(&in_progress).unwrap());
        assert!(cut, "the cut frame is detected");
        // Every frame written before the kill is there, in order.
        assert_eq!([done, tail].concat(), raws);
    }

    /// A frame the disk cannot hold leaves the chunk as it was: a later frame follows the
    /// last whole one. The full disk is a 64 KiB tmpfs (root, as recording needs).
    #[test]
    #[cfg(target_os = "linux")]
    fn a_frame_that_does_not_fit_is_taken_back_whole() {
        if !argus_testkit::live_or_skip("a_frame_that_does_not_fit_is_taken_back_whole") {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let small = tmp.path().join("small");
        std::fs::create_dir(&small).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&small)
            .status()
            .unwrap();
        assert!(ok.success(), "mount a tmpfs (root)");
        let mut w = writer(&small, ChunkOptions::default());
        w.write_frame(&noise(1, 3000), false).unwrap();
        let whole = w.current_bytes().unwrap();
        let err = w.write_frame(&noise(3, 200_000), false).unwrap_err();
        let after_failure = std::fs::metadata(path(&small, 0)).unwrap().len();
        w.write_frame(&noise(2, 300), false).unwrap();
        let data = std::fs::read(path(&small, 0)).unwrap();
        drop(w);
        let _ = std::process::Command::new("umount").arg(&small).status();
        assert!(err.is_no_space(), "{err}");
        assert_eq!(after_failure, whole, "cut back to the last whole frame");
        assert_eq!(frames(&data), (vec![noise(1, 3000), noise(2, 300)], false));
    }
}
