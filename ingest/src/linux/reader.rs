//! One reader thread per CPU: `trace_pipe_raw` pages → zstd chunks.
//!
//! ```text
//!  kernel ring buffer (cpuN) ──read(4096), O_NONBLOCK──► chunk buffer (chunk_pages pages)
//!         ▲                                                   │ full, or flush_interval,
//!         └── poll(POLLIN, 100 ms) + wake eventfd             ▼ or end of recording
//!                                         cpuN/NNNNNN.chunk.zst.tmp ──rename──► .chunk.zst
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
//! Stop protocol: the controller switches `tracing_on` off, then sets `drain` and signals the
//! eventfd. A reader that sees `drain` makes one more full pass until `EAGAIN`: since the
//! kernel writes nothing after `tracing_on` = 0, that pass empties the buffer, including the
//! last partial page.

use super::error::RecordError;
use crate::tracedir;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// zstd level for chunks. Level 1 because the reader runs on the machine being traced and
/// must keep up with the kernel on every CPU. Measured on this project's recordings (6.18,
/// default events): a syscall-heavy chunk compresses 38.7x at level 1 and 38.0x at level 3,
/// an idle-system chunk 7.38x vs 7.37x, and level 1 is 5-40% faster. Higher levels buy
/// nothing on these repetitive pages (ids, comm strings, zeroed page tails).
pub(crate) const CHUNK_ZSTD_LEVEL: i32 = 1;

/// How long a reader waits in `poll` before reading anyway.
const POLL_TIMEOUT_MS: i32 = 100;

/// What a reader thread did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReaderStats {
    /// Pages read.
    pub(crate) pages: u64,
    /// Compressed bytes written.
    pub(crate) compressed_bytes: u64,
    /// Chunk files written.
    pub(crate) chunks: u32,
    /// Reads that returned less than a page (zero-padded; never seen on 6.18).
    pub(crate) short_reads: u64,
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
}

impl Reader {
    /// Runs until drained. Returns the stats or the first error.
    pub(crate) fn run(self) -> Result<ReaderStats, RecordError> {
        let mut stats = ReaderStats::default();
        let mut chunk = ChunkBuffer::new(self.page_size, self.chunk_pages);
        let mut pipe = &self.pipe;
        let mut final_pass = false;
        let mut last_flush = Instant::now();
        loop {
            // Read until the buffer is empty.
            loop {
                let page = chunk.next_page();
                match pipe.read(page) {
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
                        chunk.commit_page();
                        stats.pages += 1;
                        if chunk.is_full() {
                            self.flush(&mut chunk, &mut stats)?;
                            last_flush = Instant::now();
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
                if chunk.pages() > 0 && last_flush.elapsed() >= interval {
                    self.flush(&mut chunk, &mut stats)?;
                    last_flush = Instant::now();
                }
            }
            self.wait()?;
        }
        if chunk.pages() > 0 {
            self.flush(&mut chunk, &mut stats)?;
        }
        Ok(stats)
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

    /// Compresses and writes the buffered pages as the next chunk, then empties the buffer.
    fn flush(&self, chunk: &mut ChunkBuffer, stats: &mut ReaderStats) -> Result<(), RecordError> {
        let path = tracedir::chunk_path(&self.out_dir, self.cpu, stats.chunks);
        let written = write_chunk(&path, chunk.bytes())?;
        stats.compressed_bytes += written;
        stats.chunks += 1;
        chunk.clear();
        Ok(())
    }
}

/// Writes one chunk: `path.tmp`, then rename to `path`. Returns the compressed size.
pub(crate) fn write_chunk(path: &Path, pages: &[u8]) -> Result<u64, RecordError> {
    let compressed =
        zstd::bulk::compress(pages, CHUNK_ZSTD_LEVEL).map_err(|source| RecordError::Compress {
            path: path.to_path_buf(),
            source,
        })?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file =
        File::create(&tmp).map_err(|source| RecordError::io("creating", &tmp, source))?;
    file.write_all(&compressed)
        .map_err(|source| RecordError::io("writing", &tmp, source))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|source| RecordError::io("renaming", &tmp, source))?;
    Ok(compressed.len() as u64)
}

/// Whole pages waiting to be written as one chunk.
struct ChunkBuffer {
    bytes: Vec<u8>,
    page_size: usize,
    pages: usize,
    capacity: usize,
}

impl ChunkBuffer {
    fn new(page_size: usize, capacity: usize) -> Self {
        ChunkBuffer {
            bytes: vec![0; page_size * capacity],
            page_size,
            pages: 0,
            capacity,
        }
    }

    /// The slot for the next page (not yet counted).
    fn next_page(&mut self) -> &mut [u8] {
        let start = self.pages * self.page_size;
        &mut self.bytes[start..start + self.page_size]
    }

    fn commit_page(&mut self) {
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
    fn chunk_round_trip() {
        let dir = std::env::temp_dir().join(format!("argus-chunk-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("000000.chunk.zst");
        let pages: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let size = write_chunk(&path, &pages).expect("write chunk");
        assert!(size > 0);
        assert!(!dir.join("000000.chunk.zst.tmp").exists());
        let data = std::fs::read(&path).expect("read chunk");
        assert_eq!(zstd::decode_all(&data[..]).expect("decode"), pages);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn chunk_buffer_fills_by_pages() {
        let mut chunk = ChunkBuffer::new(16, 2);
        chunk.next_page().fill(1);
        chunk.commit_page();
        assert!(!chunk.is_full());
        chunk.next_page().fill(2);
        chunk.commit_page();
        assert!(chunk.is_full());
        assert_eq!(chunk.bytes().len(), 32);
        assert_eq!(chunk.bytes()[16], 2);
        chunk.clear();
        assert_eq!(chunk.pages(), 0);
    }
}
