//! One reader thread per CPU: `trace_pipe_raw` pages → zstd frames appended to chunk files.
//!
//! ```text
//!  kernel ring buffer (cpuN) ──read(4096), O_NONBLOCK──► frame buffer (≤ FRAME_PAGES pages)
//!         ▲                                    │            │ also: tap.try_send(page)
//!         └── poll(POLL_TIMEOUT) + wake eventfd│            ▼ full, flush_interval, chunk end
//!                                              │   cpuN/NNNNNN.chunk.zst  ← zstd frame appended
//!                                              │   (write(2); fdatasync every flush_interval and
//!                                              │    at chunk end, then a new chunk file)
//!                                              └─► Shared: ring cap, lost ranges, meta.json
//! ```
//!
//! Measured on Linux 6.18 (x86-64, 4 KiB sub-buffers): every `read` of `page_size` bytes
//! returns exactly one page. A non-blocking read returns the page the kernel is still
//! writing as a *partial* page (its `commit` says how much is in use) instead of `EAGAIN`,
//! both while tracing is on and after it is switched off; `EAGAIN` only means the buffer is
//! empty. `poll(2)` on `trace_pipe_raw` reports `POLLIN` only once `buffer_percent` of the
//! buffer is full (default 50), so the reader also wakes on a timeout and reads whatever is
//! there, and on the shared wake `eventfd` when the recording stops.
//!
//! **Crash safety.** A chunk is a sequence of independent zstd frames, each holding whole
//! pages, appended with one `write(2)` each under the chunk's final name. A recorder killed
//! at any point leaves every completed chunk whole and the chunk in progress readable up to
//! its last complete frame (a frame cut by the kill is detected by replay, which keeps the
//! complete pages before it). Page-cache data survives the death of the process; against
//! power loss the reader calls `fdatasync` on the chunk every `flush_interval` and when the
//! chunk completes (and `fsync`s the CPU directory once a chunk is created), so at most one
//! flush interval of data is at risk.
//!
//! Stop protocol: the controller switches `tracing_on` off, then sets `drain` and signals the
//! eventfd. A reader that sees `drain` makes one more full pass until `EAGAIN`: since the
//! kernel writes nothing after `tracing_on` = 0, that pass empties the buffer, including the
//! last partial page.

use super::error::RecordError;
use super::ring::Shared;
use super::sysinfo;
use super::TappedPage;
use crate::decode::{parse_page, Missed};
use crate::format::HeaderPage;
use crate::tracedir::{self, LostRange};
use crossbeam_channel::{Sender, TrySendError};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// zstd level for chunks. Level 1 because the reader runs on the machine being traced and
/// must keep up with the kernel on every CPU. Measured on this project's recordings (6.18,
/// default events): a syscall-heavy chunk compresses 38.7x at level 1 and 38.0x at level 3,
/// an idle-system chunk 7.38x vs 7.37x, and level 1 is 5-40% faster. Higher levels buy
/// nothing on these repetitive pages (ids, comm strings, zeroed page tails).
pub(crate) const CHUNK_ZSTD_LEVEL: i32 = 1;

/// Pages per zstd frame at most (1 MiB of 4 KiB pages): large enough to compress well, small
/// enough that a busy CPU's data reaches the disk many times a second.
pub(crate) const FRAME_PAGES: usize = 256;

/// How long a reader waits in `poll` before reading anyway.
const POLL_TIMEOUT_MS: i32 = 100;

/// What a reader thread did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReaderStats {
    /// Pages read.
    pub(crate) pages: u64,
    /// Compressed bytes written.
    pub(crate) compressed_bytes: u64,
    /// Chunk files written (completed or in progress at the end).
    pub(crate) chunks: u32,
    /// Reads that returned less than a page (zero-padded; never seen on 6.18).
    pub(crate) short_reads: u64,
    /// Pages the tap consumer did not take in time.
    pub(crate) tap_dropped: u64,
    /// Events lost according to the page headers (counted ones only).
    pub(crate) page_lost: u64,
}

/// Everything a reader thread needs.
pub(crate) struct Reader {
    pub(crate) cpu: u32,
    pub(crate) pipe: File,
    pub(crate) pipe_path: PathBuf,
    pub(crate) page_size: usize,
    pub(crate) chunk_pages: usize,
    pub(crate) out_dir: PathBuf,
    pub(crate) flush_interval: Option<Duration>,
    pub(crate) drain: Arc<AtomicBool>,
    pub(crate) wake_fd: RawFd,
    pub(crate) shared: Arc<Shared>,
    pub(crate) header_page: HeaderPage,
    pub(crate) tap: Option<Sender<TappedPage>>,
    pub(crate) tap_dropped: Arc<AtomicU64>,
    /// Picks the records the fd tracker needs out of each page (`fdtrack.rs`).
    pub(crate) fd_scan: Option<super::fdtrack::PageScan>,
}

/// The chunk file being appended to.
struct OpenChunk {
    file: File,
    path: PathBuf,
    seq: u32,
    /// Pages in the chunk so far (written frames).
    pages: usize,
    bytes: u64,
    first_ts: u64,
    last_ts: u64,
    /// Bytes written since the last fdatasync.
    unsynced: bool,
}

impl Reader {
    /// Runs until drained. Returns the stats or the first error.
    pub(crate) fn run(mut self) -> Result<ReaderStats, RecordError> {
        let mut stats = ReaderStats::default();
        let mut frame = FrameBuffer::new(self.page_size, FRAME_PAGES.min(self.chunk_pages));
        let mut chunk: Option<OpenChunk> = None;
        let mut compressor = zstd::bulk::Compressor::new(CHUNK_ZSTD_LEVEL).map_err(|source| {
            RecordError::Compress {
                path: self.out_dir.clone(),
                source,
            }
        })?;
        let mut out = Vec::new();
        let mut final_pass = false;
        let mut last_flush = Instant::now();
        let mut prev_ts: Option<u64> = None;
        loop {
            // Read until the buffer is empty.
            loop {
                let page = frame.next_page();
                let result = (&self.pipe).read(page);
                match result {
                    Ok(0) => break,
                    Ok(n) => {
                        if n < self.page_size {
                            // Keep whole pages in chunks: pad (kernel zeroes page tails too).
                            page[n..].fill(0);
                            stats.short_reads += 1;
                            if stats.short_reads == 1 {
                                tracing::warn!(
                                    cpu = self.cpu,
                                    bytes = n,
                                    "short read from trace_pipe_raw; padding the page"
                                );
                            }
                        }
                        let ts = self.inspect(page, &mut prev_ts, &mut stats);
                        frame.commit_page(ts);
                        stats.pages += 1;
                        let in_chunk = chunk.as_ref().map_or(0, |c| c.pages) + frame.pages();
                        if in_chunk >= self.chunk_pages {
                            self.write_frame(
                                &mut chunk,
                                &mut frame,
                                &mut compressor,
                                &mut out,
                                &mut stats,
                            )?;
                            self.complete(&mut chunk)?;
                            last_flush = Instant::now();
                        } else if frame.is_full() {
                            self.write_frame(
                                &mut chunk,
                                &mut frame,
                                &mut compressor,
                                &mut out,
                                &mut stats,
                            )?;
                        }
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                    Err(source) => return Err(RecordError::io("reading", &self.pipe_path, source)),
                }
            }
            if final_pass {
                break;
            }
            if self.drain.load(Ordering::SeqCst) {
                final_pass = true;
                continue;
            }
            if let Some(interval) = self.flush_interval {
                if last_flush.elapsed() >= interval {
                    if frame.pages() > 0 {
                        self.write_frame(
                            &mut chunk,
                            &mut frame,
                            &mut compressor,
                            &mut out,
                            &mut stats,
                        )?;
                    }
                    if let Some(open) = chunk.as_mut() {
                        sync(open)?;
                    }
                    last_flush = Instant::now();
                }
            }
            self.wait()?;
        }
        if frame.pages() > 0 {
            self.write_frame(
                &mut chunk,
                &mut frame,
                &mut compressor,
                &mut out,
                &mut stats,
            )?;
        }
        self.complete(&mut chunk)?;
        Ok(stats)
    }

    /// Reads a fresh page's header: its timestamp (returned), lost events before it, and
    /// hands a copy to the tap.
    fn inspect(&mut self, page: &[u8], prev_ts: &mut Option<u64>, stats: &mut ReaderStats) -> u64 {
        let (ts, missed) = match parse_page(&self.header_page, page) {
            Ok(records) => {
                let h = records.header();
                (h.ts, h.missed)
            }
            Err(_) => (prev_ts.unwrap_or(0), Missed::None),
        };
        if missed != Missed::None {
            let events = match missed {
                Missed::Count(n) => {
                    stats.page_lost += n;
                    Some(n)
                }
                _ => None,
            };
            self.shared.lost(
                self.cpu,
                LostRange {
                    from_ns: prev_ts.unwrap_or(ts),
                    to_ns: ts,
                    events,
                },
            );
        }
        *prev_ts = Some(ts);
        if let Some(scan) = &mut self.fd_scan {
            scan.page(&self.header_page, page);
        }
        if let Some(tap) = &self.tap {
            match tap.try_send(TappedPage {
                cpu: self.cpu,
                data: page.to_vec(),
                dropped_before: stats.tap_dropped,
            }) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    stats.tap_dropped += 1;
                    self.tap_dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => {
                    tracing::debug!(cpu = self.cpu, "page tap consumer gone; tap closed");
                    self.tap = None;
                }
            }
        }
        ts
    }

    /// Waits for data, the stop eventfd or the timeout.
    fn wait(&self) -> Result<(), RecordError> {
        let mut fds = [
            libc::pollfd {
                fd: self.pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let rc =
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_TIMEOUT_MS) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != ErrorKind::Interrupted {
                return Err(RecordError::Sys {
                    call: "poll",
                    source: err,
                });
            }
        }
        Ok(())
    }

    /// Compresses the buffered pages into one zstd frame and appends it to the chunk in
    /// progress (creating the chunk file first if needed), then empties the buffer.
    fn write_frame(
        &self,
        chunk: &mut Option<OpenChunk>,
        frame: &mut FrameBuffer,
        compressor: &mut zstd::bulk::Compressor<'static>,
        out: &mut Vec<u8>,
        stats: &mut ReaderStats,
    ) -> Result<(), RecordError> {
        if frame.pages() == 0 {
            return Ok(());
        }
        if chunk.is_none() {
            let seq = stats.chunks;
            let path = tracedir::chunk_path(&self.out_dir, self.cpu, seq);
            let file = sysinfo::create_private(&path)?;
            // The new name must survive a power loss as well as the data.
            sysinfo::sync_dir(&tracedir::cpu_dir(&self.out_dir, self.cpu))?;
            stats.chunks += 1;
            *chunk = Some(OpenChunk {
                file,
                path,
                seq,
                pages: 0,
                bytes: 0,
                first_ts: frame.first_ts,
                last_ts: frame.first_ts,
                unsynced: false,
            });
        }
        let Some(open) = chunk.as_mut() else {
            return Ok(());
        };
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(frame.bytes().len()));
        compressor
            .compress_to_buffer(frame.bytes(), out)
            .map_err(|source| RecordError::Compress {
                path: open.path.clone(),
                source,
            })?;
        open.file
            .write_all(out)
            .map_err(|source| RecordError::io("writing", &open.path, source))?;
        open.pages += frame.pages();
        open.bytes += out.len() as u64;
        open.last_ts = frame.last_ts;
        open.unsynced = true;
        stats.compressed_bytes += out.len() as u64;
        frame.clear();
        self.shared
            .progress(self.cpu, open.seq, open.bytes, open.first_ts)
    }

    /// Syncs and closes the chunk in progress; it joins the ring's completed chunks.
    fn complete(&self, chunk: &mut Option<OpenChunk>) -> Result<(), RecordError> {
        let Some(mut open) = chunk.take() else {
            return Ok(());
        };
        sync(&mut open)?;
        self.shared.completed(
            self.cpu,
            open.seq,
            open.bytes,
            open.first_ts,
            open.last_ts,
            open.path,
        )
    }
}

fn sync(open: &mut OpenChunk) -> Result<(), RecordError> {
    if open.unsynced {
        open.file
            .sync_data()
            .map_err(|source| RecordError::io("syncing", &open.path, source))?;
        open.unsynced = false;
    }
    Ok(())
}

/// Writes one chunk as a single frame (tests and tools). Returns the compressed size.
#[cfg(test)]
pub(crate) fn write_chunk(path: &std::path::Path, pages: &[u8]) -> Result<u64, RecordError> {
    let compressed =
        zstd::bulk::compress(pages, CHUNK_ZSTD_LEVEL).map_err(|source| RecordError::Compress {
            path: path.to_path_buf(),
            source,
        })?;
    let mut file = sysinfo::create_private(path)?;
    file.write_all(&compressed)
        .map_err(|source| RecordError::io("writing", path, source))?;
    Ok(compressed.len() as u64)
}

/// Whole pages waiting to be compressed as one frame.
struct FrameBuffer {
    bytes: Vec<u8>,
    page_size: usize,
    pages: usize,
    capacity: usize,
    first_ts: u64,
    last_ts: u64,
}

impl FrameBuffer {
    fn new(page_size: usize, capacity: usize) -> Self {
        FrameBuffer {
            bytes: vec![0; page_size * capacity.max(1)],
            page_size,
            pages: 0,
            capacity: capacity.max(1),
            first_ts: 0,
            last_ts: 0,
        }
    }

    /// The slot for the next page (not yet counted).
    fn next_page(&mut self) -> &mut [u8] {
        let start = self.pages * self.page_size;
        &mut self.bytes[start..start + self.page_size]
    }

    /// Counts the page written into [`FrameBuffer::next_page`]; `ts` is its timestamp.
    fn commit_page(&mut self, ts: u64) {
        if self.pages == 0 {
            self.first_ts = ts;
        }
        self.last_ts = ts;
        self.pages += 1;
    }

    fn is_full(&self) -> bool {
        self.pages == self.capacity
    }

    fn pages(&self) -> usize {
        self.pages
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.pages * self.page_size]
    }

    fn clear(&mut self) {
        self.pages = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_round_trip_and_private_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("000000.chunk.zst");
        let pages: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let size = write_chunk(&path, &pages).expect("write chunk");
        assert!(size > 0);
        let data = std::fs::read(&path).expect("read chunk");
        assert_eq!(zstd::decode_all(&data[..]).expect("decode"), pages);
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn concatenated_frames_decode_as_one_stream() {
        let a = zstd::bulk::compress(&[1u8; 4096], 1).expect("a");
        let b = zstd::bulk::compress(&[2u8; 4096], 1).expect("b");
        let both = [a, b].concat();
        let out = zstd::decode_all(&both[..]).expect("decode");
        assert_eq!(out.len(), 8192);
        assert_eq!(out[4096], 2);
    }

    #[test]
    fn frame_buffer_fills_by_pages() {
        let mut frame = FrameBuffer::new(16, 2);
        frame.next_page().fill(1);
        frame.commit_page(10);
        assert!(!frame.is_full());
        frame.next_page().fill(2);
        frame.commit_page(20);
        assert!(frame.is_full());
        assert_eq!(frame.bytes().len(), 32);
        assert_eq!(frame.bytes()[16], 2);
        assert_eq!((frame.first_ts, frame.last_ts), (10, 20));
        frame.clear();
        assert_eq!(frame.pages(), 0);
    }
}
