//! Two threads per CPU: a *drain* that copies `trace_pipe_raw` pages into frames, and a
//! *chunk writer* that compresses the frames into zstd frames appended to chunk files.
//!
//! ```text
//!  kernel ring buffer (cpuN) ──read(4096), O_NONBLOCK──► frame (≤ FRAME_PAGES pages)
//!         ▲            argus-rec-cpuN (SCHED_FIFO,   │  also: fd scan, tap.try_send(page)
//!         │            budgeted: drainprio.rs)       │ full, flush_interval, chunk end
//!         └── poll(POLL_TIMEOUT) + wake eventfd      ▼
//!                                      spool (≤ SPOOL_BYTES of frames, reused) ◄─ empty frames
//!                                                    │                              │
//!                                   argus-rec-wN ────┴─► zstd ─► cpuN/NNNNNN.chunk.zst
//!                                   (SCHED_FIFO, budgeted) (write(2); fdatasync every
//!                                                        flush_interval and at chunk end)
//!                                                    └─► Shared: ring cap, lost ranges,
//!                                                        meta.json
//! ```
//!
//! The drain never touches the disk nor a lock the disk holds: under a load that keeps both
//! CPUs busy an `fdatasync` took up to 375 ms while the kernel's 8 MiB buffer filled in
//! 160 ms, and with the I/O on the drain's path 22% of the events were lost (issue 14). The
//! spool absorbs such stalls; when it is full the drain waits for the writer (counted in
//! `spool_stalls`) and the kernel's buffer is the only slack left.
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

use super::chunks::{ChunkOptions, ChunkWriter};
use super::drainprio::{set_thread_nice, Governor, Role, WRITER_NICE};
use super::error::RecordError;
use super::ring::Shared;
use super::TappedPage;
use crate::format::HeaderPage;
use crate::page::{parse_page, Missed};
use crate::tracedir::{self, LostRange};
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pages per zstd frame at most (1 MiB of 4 KiB pages): large enough to compress well, small
/// enough that a busy CPU's data reaches the disk many times a second.
pub(crate) const FRAME_PAGES: usize = 256;

/// A reader checks its real-time budget every this many pages of a drain pass.
const GOVERNOR_PAGES: u64 = 64;

/// Raw pages a CPU's drain may hold for its chunk writer (64 MiB: an `fdatasync` stall of
/// 375 ms at 50 MB/s per CPU, measured under the saturating load, with room to spare).
/// Frames are allocated only as a burst needs them.
const SPOOL_BYTES: usize = 64 << 20;

/// How long a reader waits in `poll` before reading anyway: a live consumer's watermark
/// waits for the slowest reader, and the fd tracker reads `/proc` only once the reader has
/// passed on the syscall that made a descriptor (a longer wait loses more short-lived ones).
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
    /// Budget windows in which the reader ran out of real-time CPU (`drainprio.rs`).
    pub(crate) throttled: u64,
    /// Times the drain waited for the chunk writer to return a frame (spool full).
    pub(crate) spool_stalls: u64,
    /// Pages the writer dropped: the disk was full and the ring at its floor.
    pub(crate) unwritten: u64,
}

/// The records a page flagged with missed events follows: stamped after `last` (the last
/// record read before it) and after `read_up_to` (this CPU's read frontier: the kernel
/// overwrites only records not read yet), and before `first` (the page's first record).
fn loss_range(last: u64, read_up_to: u64, first: u64, events: Option<u64>) -> LostRange {
    LostRange {
        from_ns: last.max(read_up_to).min(first),
        to_ns: first,
        events,
    }
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
    /// The tap dropped the last page offered: the frontier waits for the next page taken.
    pub(crate) tap_behind: bool,
    /// Where this CPU has been read up to, for the tap's consumer (`frontier.rs`).
    pub(crate) frontier: super::ReadFrontier,
    /// Read up to here if the next page starts later (the last page read looked partial).
    pub(crate) pending_frontier: Option<u64>,
    /// Picks the records the fd tracker needs out of each page (`fds/`).
    pub(crate) fd_scan: Option<super::fds::PageScan>,
    /// Real-time priority while draining (`drainprio.rs`).
    pub(crate) priority: super::drainprio::DrainPriority,
}

/// What the ring needs to know of the chunk being appended to (the file itself is the
/// [`ChunkWriter`]'s).
struct OpenChunk {
    seq: u32,
    /// Pages in the chunk so far (written frames).
    pages: usize,
    first_ts: u64,
    last_ts: u64,
}

/// A completed chunk (already in the ring) on its way to the syncer.
struct Completed {
    file: File,
    path: PathBuf,
}

/// One batch for the chunk writer: a frame of pages and what to do after appending it.
struct Batch {
    frame: FrameBuffer,
    /// Complete the chunk after this frame (sync, close, hand to the ring).
    end_chunk: bool,
    /// `fdatasync` the chunk after this frame (the flush interval).
    sync: bool,
    /// Lost-events ranges seen since the previous batch.
    lost: Vec<LostRange>,
}

/// Frames of pages on their way from the drain to the chunk writer, at most
/// [`SPOOL_BYTES`] per CPU: allocated as a burst needs them, reused after.
struct Spool {
    free: Receiver<FrameBuffer>,
    allocated: usize,
    max: usize,
    page_size: usize,
    capacity: usize,
}

impl Spool {
    /// An empty frame: a returned one, a new one while under the cap, else the next one
    /// the writer returns (counted in `stalls`: the kernel's buffer fills meanwhile).
    fn take(&mut self, stalls: &mut u64) -> Option<FrameBuffer> {
        if let Ok(f) = self.free.try_recv() {
            return Some(f);
        }
        if self.allocated < self.max {
            self.allocated += 1;
            return Some(FrameBuffer::new(self.page_size, self.capacity));
        }
        *stalls += 1;
        let t0 = Instant::now();
        let f = self.free.recv().ok();
        if *stalls == 1 || t0.elapsed() > Duration::from_millis(50) {
            tracing::warn!(
                waited_ms = t0.elapsed().as_millis() as u64,
                stalls = *stalls,
                "trace reader: the chunk writer is behind (spool full); the kernel's buffer fills meanwhile"
            );
        }
        f
    }
}

impl Reader {
    /// Runs until drained: spawns this CPU's chunk writer, calls `ready` (the writer
    /// exists, so a listing of the process's threads shows it), then drains. Returns the
    /// stats or the first error.
    pub(crate) fn run(mut self, ready: impl FnOnce()) -> Result<ReaderStats, RecordError> {
        let mut stats = ReaderStats::default();
        let capacity = FRAME_PAGES.min(self.chunk_pages).max(1);
        let (full_tx, full_rx) = crossbeam_channel::unbounded::<Batch>();
        let (free_tx, free_rx) = crossbeam_channel::unbounded::<FrameBuffer>();
        let (sync_tx, sync_rx) = crossbeam_channel::unbounded::<SyncJob>();
        let writer = CpuWriter::new(self.cpu, self.out_dir.clone(), self.shared.clone(), sync_tx)?;
        let writer_priority = self.priority.for_writer();
        let (cpu, shared) = (self.cpu, self.shared.clone());
        let syncer = std::thread::Builder::new()
            .name(format!("argus-rec-s{}", self.cpu))
            .spawn(move || {
                if let Err(err) = set_thread_nice(WRITER_NICE) {
                    tracing::debug!(error = %err, "cannot raise the chunk syncer's priority");
                }
                run_syncer(cpu, shared, sync_rx)
            })
            .map_err(|source| RecordError::Sys {
                call: "pthread_create",
                source,
            })?;
        let writer = std::thread::Builder::new()
            .name(format!("argus-rec-w{}", self.cpu))
            .spawn(move || {
                if let Err(err) = set_thread_nice(WRITER_NICE) {
                    tracing::debug!(error = %err, "cannot raise the chunk writer's priority");
                }
                writer.run(full_rx, free_tx, writer_priority)
            })
            .map_err(|source| RecordError::Sys {
                call: "pthread_create",
                source,
            })?;
        ready();
        let mut spool = Spool {
            free: free_rx,
            allocated: 0,
            max: (SPOOL_BYTES / (capacity * self.page_size)).max(2),
            page_size: self.page_size,
            capacity,
        };
        let drained = self.drain_loop(&mut spool, &full_tx, &mut stats);
        drop(full_tx);
        let written = writer.join().unwrap_or_else(|_| {
            Err(RecordError::Sys {
                call: "chunk writer",
                source: std::io::Error::other("the chunk writer thread panicked"),
            })
        });
        // The writer dropped its end: the syncer finishes what it was given.
        let synced = syncer.join().unwrap_or_else(|_| {
            Err(RecordError::Sys {
                call: "chunk syncer",
                source: std::io::Error::other("the chunk syncer thread panicked"),
            })
        });
        // The writer's error explains a drain that stopped because the writer was gone.
        let written = written?;
        synced?;
        drained?;
        stats.compressed_bytes = written.compressed_bytes;
        stats.chunks = written.chunks;
        stats.unwritten = written.unwritten;
        Ok(stats)
    }

    /// Reads pages into frames and hands them to the writer: no disk I/O, no lock that disk
    /// I/O holds, at real-time priority (`drainprio.rs`).
    fn drain_loop(
        &mut self,
        spool: &mut Spool,
        to_writer: &Sender<Batch>,
        stats: &mut ReaderStats,
    ) -> Result<(), RecordError> {
        let mut governor = Governor::start(self.priority, self.cpu, Role::Drain);
        let Some(mut frame) = spool.take(&mut stats.spool_stalls) else {
            return Ok(());
        };
        // Pages handed to the writer for the chunk in progress.
        let mut chunk_fill = 0usize;
        let mut lost: Vec<LostRange> = Vec::new();
        let mut final_pass = false;
        let mut last_flush = Instant::now();
        let mut prev_ts: Option<u64> = None;
        // The last record of the frame handed over last: where a loss before the next
        // frame's first page starts.
        let mut carried: Option<u64> = None;
        let header_page = self.header_page;
        // Hands `frame` over and takes an empty one; `false` when the writer is gone.
        let mut hand_over = |frame: &mut FrameBuffer,
                             end_chunk: bool,
                             sync: bool,
                             lost: &mut Vec<LostRange>,
                             carried: &mut Option<u64>,
                             stats: &mut ReaderStats|
         -> bool {
            if let Some(last) = frame.pages().checked_sub(1) {
                *carried = crate::page::last_record_ts(&header_page, frame.page(last));
            }
            let Some(next) = spool.take(&mut stats.spool_stalls) else {
                return false;
            };
            let batch = Batch {
                frame: std::mem::replace(frame, next),
                end_chunk,
                sync,
                lost: std::mem::take(lost),
            };
            to_writer.send(batch).is_ok()
        };
        loop {
            // Read until the buffer is empty.
            loop {
                if stats.pages.is_multiple_of(GOVERNOR_PAGES) {
                    governor.tick();
                }
                let page = frame.next_page();
                let read_at = super::sysinfo::monotonic_ns();
                let result = (&self.pipe).read(page);
                match result {
                    Ok(0) => {
                        self.read_to_end(read_at);
                        break;
                    }
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
                        let n = frame.pages();
                        let before = match n.checked_sub(1) {
                            Some(i) => Previous::Page(frame.page(i)),
                            None => Previous::Last(carried),
                        };
                        let ts = self.inspect(
                            frame.page(n),
                            before,
                            read_at,
                            &mut prev_ts,
                            &mut lost,
                            stats,
                        );
                        frame.commit_page(ts);
                        stats.pages += 1;
                        if chunk_fill + frame.pages() >= self.chunk_pages {
                            if !hand_over(&mut frame, true, false, &mut lost, &mut carried, stats) {
                                return Ok(());
                            }
                            chunk_fill = 0;
                            last_flush = Instant::now();
                        } else if frame.is_full() {
                            chunk_fill += frame.pages();
                            if !hand_over(&mut frame, false, false, &mut lost, &mut carried, stats)
                            {
                                return Ok(());
                            }
                        }
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => {
                        self.read_to_end(read_at);
                        break;
                    }
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
                    chunk_fill += frame.pages();
                    if !hand_over(&mut frame, false, true, &mut lost, &mut carried, stats) {
                        return Ok(());
                    }
                    last_flush = Instant::now();
                }
            }
            governor.tick();
            self.wait()?;
        }
        hand_over(&mut frame, true, false, &mut lost, &mut carried, stats);
        stats.throttled = governor.throttled;
        Ok(())
    }

    /// A read begun at `read_at` found nothing (`EAGAIN`, or 0 bytes at the final pass): every
    /// record stamped before it was in the pages handed on (`frontier.rs`).
    fn read_to_end(&mut self, read_at: u64) {
        self.pending_frontier = None;
        if !self.tap_behind {
            self.frontier.advance(self.cpu, read_at);
        }
    }

    /// Reads a fresh page's header: its timestamp (returned), lost events before it, and
    /// hands a copy to the tap; moves the read frontier (`frontier.rs`): a partial page read
    /// at `read_at` was the end of the buffer then, which the next page confirms if its
    /// first record is later (a page can look partial yet be full, its next record too big
    /// for the rest of it). `before`: what was read before it; `prev_ts`: the timestamp of
    /// the page before it.
    fn inspect(
        &mut self,
        page: &[u8],
        before: Previous<'_>,
        read_at: u64,
        prev_ts: &mut Option<u64>,
        lost: &mut Vec<LostRange>,
        stats: &mut ReaderStats,
    ) -> u64 {
        let (ts, missed, first, partial) = match parse_page(&self.header_page, page) {
            Ok(mut records) => {
                let h = records.header();
                let partial = h.commit + crate::live::FULL_PAGE_SLACK + 16 < page.len();
                let first = records.next().and_then(Result::ok).map(|r| r.ts);
                (h.ts, h.missed, first, partial)
            }
            Err(_) => (prev_ts.unwrap_or(0), Missed::None, None, false),
        };
        if let Some(p) = self.pending_frontier.take() {
            if first.is_some_and(|f| f > p) && !self.tap_behind {
                self.frontier.advance(self.cpu, p);
            }
        }
        if missed != Missed::None {
            let events = match missed {
                Missed::Count(n) => {
                    stats.page_lost += n;
                    Some(n)
                }
                _ => None,
            };
            // From the last record read, or the time this CPU had been read up to if
            // later (the kernel overwrote only records not read yet: `frontier.rs`), to the
            // first after the loss; `argus start` takes the same range from the frontier.
            // Only a page after a loss walks the one before (`benches/fdscan.rs`: a walk
            // costs about 1% of a core at the peak rate).
            let last = match before {
                Previous::Page(p) => crate::page::last_record_ts(&self.header_page, p),
                Previous::Last(last) => last,
            };
            let range = loss_range(
                last.or(*prev_ts).unwrap_or(ts),
                self.frontier.read_up_to(self.cpu),
                first.unwrap_or(ts),
                events,
            );
            self.frontier.note_loss(self.cpu, range);
            lost.push(range);
        }
        *prev_ts = Some(ts);
        if partial {
            self.pending_frontier = Some(read_at);
        }
        if let Some(scan) = &mut self.fd_scan {
            scan.page(&self.header_page, page);
        }
        if let Some(tap) = &self.tap {
            match tap.try_send(TappedPage {
                cpu: self.cpu,
                data: page.to_vec(),
                dropped_before: stats.tap_dropped,
                seq: stats.pages,
            }) {
                Ok(()) => self.tap_behind = false,
                Err(TrySendError::Full(_)) => {
                    self.tap_behind = true;
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
}

/// What a chunk writer did.
#[derive(Default)]
struct WriterStats {
    compressed_bytes: u64,
    chunks: u32,
    unwritten: u64,
}

/// Work for a CPU's syncer, in the order the writer produced it.
enum SyncJob {
    /// Lost-events ranges to record in `meta.json`.
    Lost(Vec<LostRange>),
    /// The ring changed (the writer deleted chunks): rewrite `meta.json`.
    Meta,
    /// `fdatasync` the chunk in progress (the flush interval): a second handle to it.
    Flush { file: File, path: PathBuf },
    /// Sync and close a completed chunk (the writer has put it in the ring).
    Complete(Completed),
    /// `fsync` the CPU's directory: a chunk was created there, and its name must survive a
    /// power loss as well as its data.
    Dir(PathBuf),
}

/// Compresses frames into zstd frames appended to this CPU's chunk files ([`ChunkWriter`]
/// with no budget of its own: chunks are cut by page count, by the drain). The writer keeps
/// the ring's accounts itself, so the cap holds frame by frame; syncing chunks and rewriting
/// `meta.json` (which syncs too) go to the CPU's syncer thread, so neither the drain nor the
/// writer waits for the disk: under the saturating load with `argus start` writing snapshots
/// beside it, one `fdatasync` took up to a second (and with the accounts behind the syncs, the
/// directory outgrew its cap by half).
struct CpuWriter {
    cpu: u32,
    chunks: ChunkWriter,
    chunk: Option<OpenChunk>,
    stats: WriterStats,
    shared: Arc<Shared>,
    syncer: Sender<SyncJob>,
    /// Pages are being dropped: the disk is full and the ring at its floor.
    paused: Option<Pause>,
}

/// A stretch of pages a full disk had no room for: from the first dropped page's time to
/// the last one's, and how many.
#[derive(Clone, Copy)]
struct Pause {
    from_ns: u64,
    last_ns: u64,
    pages: u64,
}

impl CpuWriter {
    fn new(
        cpu: u32,
        out_dir: PathBuf,
        shared: Arc<Shared>,
        syncer: Sender<SyncJob>,
    ) -> Result<CpuWriter, RecordError> {
        let options = ChunkOptions {
            budget: None,
            also_counted: None,
            cut_at: None,
            // The new name must survive a power loss as well as the data: the syncer syncs
            // the directory (`SyncJob::Dir`). On the writer, that fsync (a disk cache flush)
            // took 100-250 ms under the saturating load with `argus start`'s snapshots and
            // read-backs on the same disk, a new chunk every ~100 ms per CPU: the spool
            // filled, the drain waited and the kernel lost events (issue 42).
            sync_dir_on_create: false,
        };
        Ok(CpuWriter {
            cpu,
            chunks: ChunkWriter::new(move |seq| tracedir::chunk_path(&out_dir, cpu, seq), options)?,
            chunk: None,
            stats: WriterStats::default(),
            shared,
            syncer,
            paused: None,
        })
    }

    /// Writes every batch until the drain hangs up, returning each frame for reuse; then
    /// completes the chunk in progress. Runs at real-time `priority` within its budget
    /// (`drainprio.rs`: a writer left to its scheduling group's fair share starved).
    fn run(
        mut self,
        batches: Receiver<Batch>,
        free: Sender<FrameBuffer>,
        priority: super::drainprio::DrainPriority,
    ) -> Result<WriterStats, RecordError> {
        let mut governor = Governor::start(priority, self.cpu, Role::Writer);
        for mut batch in batches {
            governor.tick();
            if !batch.lost.is_empty() {
                let _ = self
                    .syncer
                    .send(SyncJob::Lost(std::mem::take(&mut batch.lost)));
            }
            self.write_or_pause(&batch.frame)?;
            if batch.end_chunk {
                self.complete();
            } else if batch.sync {
                self.flush();
            }
            batch.frame.clear();
            let _ = free.send(batch.frame);
        }
        self.complete();
        if let Some(p) = self.paused.take() {
            // Stopped while the disk was full: the stretch ends with the last page dropped.
            self.end_pause(p, p.last_ns);
        }
        self.stats.chunks = self.chunks.chunks();
        Ok(self.stats)
    }

    /// Writes the frame; on a full disk asks the ring for room (its oldest chunks) and tries
    /// again, and at the ring's floor drops the frame (`ring.rs`, "A full disk"). The first
    /// frame written after a pause closes it as a lost range ending at its first page.
    fn write_or_pause(&mut self, frame: &FrameBuffer) -> Result<(), RecordError> {
        loop {
            match self.write_frame(frame) {
                Ok(()) => {
                    if frame.pages() > 0 {
                        if let Some(p) = self.paused.take() {
                            self.end_pause(p, frame.first_ts);
                        }
                    }
                    return Ok(());
                }
                Err(e) if e.is_no_space() => {
                    super::chunks::DiskFull::say(&e);
                    if self.shared.make_room() {
                        let _ = self.syncer.send(SyncJob::Meta);
                        continue;
                    }
                    let p = self.paused.get_or_insert(Pause {
                        from_ns: frame.first_ts,
                        last_ns: frame.last_ts,
                        pages: 0,
                    });
                    p.last_ns = frame.last_ts;
                    p.pages += frame.pages() as u64;
                    self.stats.unwritten += frame.pages() as u64;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The pages of `p` were not written: this CPU has nothing from its first page's time
    /// to `to_ns` (`meta.json` `lost_ranges`, so no edge is drawn across it).
    fn end_pause(&mut self, p: Pause, to_ns: u64) {
        tracing::info!(
            cpu = self.cpu,
            pages = p.pages,
            from_ns = p.from_ns,
            to_ns,
            "disk space returned; the pages not written meanwhile are a lost range"
        );
        let _ = self.syncer.send(SyncJob::Lost(vec![LostRange {
            from_ns: p.from_ns,
            to_ns: to_ns.max(p.from_ns),
            events: None,
        }]));
    }

    /// Asks the syncer to `fdatasync` the chunk in progress, if anything was written since.
    fn flush(&mut self) {
        if let Some((file, path)) = self.chunks.sync_handle() {
            let _ = self.syncer.send(SyncJob::Flush { file, path });
        }
    }

    /// Compresses the frame's pages into one zstd frame and appends it to the chunk in
    /// progress (creating the chunk file first if needed).
    fn write_frame(&mut self, frame: &FrameBuffer) -> Result<(), RecordError> {
        if frame.pages() == 0 {
            return Ok(());
        }
        if self.chunk.is_none() {
            let seq = self.chunks.start_chunk()?;
            if let Some(dir) = self.chunks.current_path().and_then(Path::parent) {
                let _ = self.syncer.send(SyncJob::Dir(dir.to_path_buf()));
            }
            self.chunk = Some(OpenChunk {
                seq,
                pages: 0,
                first_ts: frame.first_ts,
                last_ts: frame.first_ts,
            });
        }
        let before = self.chunks.current_bytes().unwrap_or(0);
        self.chunks.write_frame(frame.bytes(), false)?;
        let bytes = self.chunks.current_bytes().unwrap_or(0);
        let Some(open) = self.chunk.as_mut() else {
            return Ok(());
        };
        if open.pages == 0 {
            // A frame the disk had no room for may have opened the chunk.
            open.first_ts = frame.first_ts;
        }
        open.pages += frame.pages();
        open.last_ts = frame.last_ts;
        self.stats.compressed_bytes += bytes - before;
        if self
            .shared
            .account_progress(self.cpu, open.seq, bytes, open.first_ts)
        {
            let _ = self.syncer.send(SyncJob::Meta);
        }
        Ok(())
    }

    /// Hands the chunk in progress to the syncer, which syncs it and adds it to the ring.
    fn complete(&mut self) {
        let (Some(open), Some((file, path, bytes))) = (self.chunk.take(), self.chunks.take())
        else {
            return;
        };
        let ring_changed = self.shared.account_completed(
            self.cpu,
            open.seq,
            bytes,
            open.first_ts,
            open.last_ts,
            path.clone(),
        );
        // Synced whatever a flush already did: the last frames may follow it.
        let _ = self
            .syncer
            .send(SyncJob::Complete(Completed { file, path }));
        if ring_changed {
            let _ = self.syncer.send(SyncJob::Meta);
        }
    }
}

/// A CPU's syncer: runs the writer's [`SyncJob`]s in order. After an error it keeps taking
/// jobs (the writer never waits for it) and returns the first error at the end. A full disk
/// is no error: `meta.json` stays due and is written by a later job, a sync that found no
/// room loses at most the flush interval on a power loss.
fn run_syncer(cpu: u32, shared: Arc<Shared>, jobs: Receiver<SyncJob>) -> Result<(), RecordError> {
    let mut first_err: Option<RecordError> = None;
    for job in jobs {
        let r = match job {
            SyncJob::Lost(ranges) => {
                for range in ranges {
                    shared.lost(cpu, range);
                }
                shared.write_meta_if_dirty()
            }
            SyncJob::Meta => shared.write_meta_if_dirty(),
            SyncJob::Flush { file, path } => file
                .sync_data()
                .map_err(|source| RecordError::io("syncing", &path, source)),
            SyncJob::Complete(done) => done
                .file
                .sync_data()
                .map_err(|source| RecordError::io("syncing", &done.path, source)),
            SyncJob::Dir(dir) => super::sysinfo::sync_dir(&dir),
        };
        match r {
            Err(e) if e.is_no_space() => {
                super::chunks::DiskFull::say(&e);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
            Ok(()) => {}
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Writes one chunk as a single frame (tests and tools). Returns the compressed size.
#[cfg(test)]
pub(crate) fn write_chunk(path: &std::path::Path, pages: &[u8]) -> Result<u64, RecordError> {
    use super::chunks::ZSTD_LEVEL;
    use super::sysinfo;
    use std::io::Write;
    let compressed =
        zstd::bulk::compress(pages, ZSTD_LEVEL).map_err(|source| RecordError::Compress {
            path: path.to_path_buf(),
            source,
        })?;
    let mut file = sysinfo::create_private(path)?;
    file.write_all(&compressed)
        .map_err(|source| RecordError::io("writing", path, source))?;
    Ok(compressed.len() as u64)
}

/// What a reader read before a page (`Reader::inspect`): where a loss before the page
/// starts.
#[derive(Clone, Copy)]
enum Previous<'a> {
    /// The page before it, still in the frame.
    Page(&'a [u8]),
    /// The last record of the frame handed over before (none known: `None`).
    Last(Option<u64>),
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

    /// Page `i` (committed or the next one).
    fn page(&self, i: usize) -> &[u8] {
        let start = i * self.page_size;
        &self.bytes[start..start + self.page_size]
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
    fn a_loss_starts_where_its_cpu_was_read_up_to_if_that_is_later() {
        // Last record at 100, the buffer read to its end at 500: lost after 500.
        assert_eq!(loss_range(100, 500, 900, Some(4)).from_ns, 500);
        // Read up to 50 only: lost after the last record.
        assert_eq!(loss_range(100, 50, 900, None).from_ns, 100);
        // Never past the first record after the loss.
        let r = loss_range(100, 950, 900, Some(1));
        assert_eq!((r.from_ns, r.to_ns, r.events), (900, 900, Some(1)));
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
