//! The collector thread ([`Collector`]): drains every perf ring into frames, drops the
//! recorder's own samples, counts what was sampled and lost, asks the maps thread for the
//! maps of the processes it sees, and hands the frames to its writer thread ([`Writer`]),
//! which compresses them into `perf/NNNNNN.perf.zst` within the perf budget.

use super::live::{PerfBatch, PerfTapEnds};
use super::maps::{MapsKeeper, MapsRequest};
use super::options::PerfSummary;
use super::syscalls::{ioctl, sys, Ring, PERF_EVENT_IOC_DISABLE};
use crate::linux::chunks::{ChunkOptions, ChunkWriter};
use crate::linux::error::RecordError;
use crate::linux::sysinfo;
use crate::perffile::{
    self, StreamInfo, StreamKind, StreamsFile, PERF_FORMAT_VERSION, RECORD_SAMPLE, SAMPLE_RAW,
    SAMPLE_REGS_USER, SAMPLE_STACK_USER,
};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the collector sleeps in poll at most.
const POLL_MS: i32 = 20;
/// Buffered record bytes that force a frame before the flush interval.
const FRAME_BYTES: usize = 4 << 20;
/// Frames queued for the writer thread at most (then the collector waits: the kernel
/// rings absorb the backlog, and count what they cannot hold as lost).
const FRAMES_QUEUED: usize = 16;
/// Nice value of the collector (draining) thread.
const COLLECTOR_NICE: i32 = -10;

/// The draining thread: moves records out of the rings into frames handed to the
/// [`Writer`], and keeps the maps copies. It never compresses, writes chunks or syncs, so a
/// slow disk or a large frame does not keep it from the rings.
pub(super) struct Collector {
    dir: PathBuf,
    streams: StreamsFile,
    rings: Vec<Ring>,
    buf: Vec<u8>,
    flush_interval: Option<Duration>,
    summary: PerfSummary,
    own_pid: i32,
    maps_requests: Option<crossbeam_channel::Sender<MapsRequest>>,
    maps_keeper: Option<JoinHandle<u64>>,
    frames: Option<crossbeam_channel::Sender<(Vec<u8>, bool)>>,
    /// Emptied frame buffers the writer gives back (no fresh 5 MiB to fault in per frame).
    spare: crossbeam_channel::Receiver<Vec<u8>>,
    writer: Option<JoinHandle<Result<u64, RecordError>>>,
    /// A live consumer's tap (`live.rs`), and how many streams it has been told of.
    tap: Option<(crossbeam_channel::Sender<PerfBatch>, usize)>,
}

impl Collector {
    /// A collector of `rings` (described by `streams`) writing into `dir`'s `perf/`. Starts
    /// its writer thread and its maps thread (after copying every process's maps).
    /// `budget`: bytes `perf/` may use (`None`: no cap).
    pub(super) fn new(
        dir: &Path,
        streams: Vec<StreamInfo>,
        rings: Vec<Ring>,
        flush_interval: Option<Duration>,
        budget: Option<u64>,
        tap: Option<PerfTapEnds>,
    ) -> Result<Collector, RecordError> {
        let maps_bytes = Arc::new(AtomicU64::new(0));
        let (frames_tx, frames_rx) = crossbeam_channel::bounded(FRAMES_QUEUED);
        let trace_dir = dir.to_path_buf();
        let chunks = ChunkWriter::new(
            move |seq| perffile::chunk_path(&trace_dir, seq),
            ChunkOptions {
                budget,
                // The maps copies count against the budget but are kept.
                also_counted: Some(maps_bytes.clone()),
                // Chunks of at most 1/8 of the budget.
                cut_at: Some(budget.map_or(64 << 20, |b| (b / 8).max(64 << 10))),
                sync_dir_on_create: false,
            },
        )?;
        let writer = Writer { chunks };
        let (spare_tx, spare_rx) = crossbeam_channel::bounded(FRAMES_QUEUED);
        let writer = std::thread::Builder::new()
            .name("argus-rec-perfw".into())
            .spawn(move || writer.run(&frames_rx, &spare_tx))
            .map_err(sys("pthread_create"))?;
        let mut keeper = MapsKeeper::new(dir, maps_bytes);
        keeper.scan_proc(true);
        let (maps_tx, maps_rx) = crossbeam_channel::unbounded();
        let interval = flush_interval.unwrap_or(Duration::from_secs(1));
        let maps_keeper = std::thread::Builder::new()
            .name("argus-rec-perfm".into())
            .spawn(move || keeper.run(&maps_rx, interval))
            .map_err(sys("pthread_create"))?;
        Ok(Collector {
            dir: dir.to_path_buf(),
            streams: StreamsFile {
                version: PERF_FORMAT_VERSION,
                streams,
            },
            rings,
            buf: Vec::with_capacity(FRAME_BYTES + (1 << 20)),
            flush_interval,
            summary: PerfSummary::default(),
            own_pid: std::process::id() as i32,
            maps_requests: Some(maps_tx),
            maps_keeper: Some(maps_keeper),
            frames: Some(frames_tx),
            spare: spare_rx,
            writer: Some(writer),
            tap: tap.map(|t| (t.batches, 0)),
        })
    }

    /// Second handles to every event of the rings (to enable them from another thread).
    pub(super) fn event_fds(&self) -> Result<Vec<OwnedFd>, RecordError> {
        self.rings
            .iter()
            .flat_map(|r| std::iter::once(&r.fd).chain(&r.also))
            .map(|fd| fd.try_clone())
            .collect::<Result<_, _>>()
            .map_err(sys("dup (perf fd)"))
    }

    pub(super) fn write_streams(&self) -> Result<(), RecordError> {
        let path = perffile::perf_dir(&self.dir).join(perffile::STREAMS_FILE);
        let json =
            serde_json::to_vec_pretty(&self.streams).map_err(|source| RecordError::Json {
                path: path.clone(),
                source,
            })?;
        sysinfo::write_atomic(&path, &json)
    }

    pub(super) fn run(
        mut self,
        stop: &AtomicBool,
        new_rings: &crossbeam_channel::Receiver<(Vec<Ring>, Vec<StreamInfo>)>,
    ) -> Result<PerfSummary, RecordError> {
        // This thread only copies records out of the rings (the writer thread compresses
        // and writes), but it must run soon after a ring's watermark wakes it, or a busy
        // ring fills (16 MiB is ~40 ms of `--stacks read,write` on a `dd bs=1` loop): it
        // gets a higher scheduling weight (nice -10; best effort, needs CAP_SYS_NICE).
        // SAFETY: gettid/setpriority on the calling thread have no memory preconditions.
        unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, COLLECTOR_NICE);
        }
        let mut last_flush = Instant::now();
        let interval = self.flush_interval.unwrap_or(Duration::from_secs(1));
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            while let Ok((rings, streams)) = new_rings.try_recv() {
                self.streams.streams.extend(streams);
                self.write_streams()?;
                self.rings.extend(rings);
            }
            if stopping {
                for ring in &self.rings {
                    for fd in std::iter::once(&ring.fd).chain(&ring.also) {
                        let _ = ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
                    }
                }
            }
            let drained_at = sysinfo::monotonic_ns();
            let before = self.buf.len();
            self.drain_all();
            self.tap(before, drained_at);
            if stopping {
                self.hand_over(true)?;
                break;
            }
            if self.buf.len() >= FRAME_BYTES
                || (self.flush_interval.is_some() && last_flush.elapsed() >= interval)
            {
                self.hand_over(self.flush_interval.is_some())?;
                last_flush = Instant::now();
            }
            self.wait();
        }
        self.frames = None;
        self.maps_requests = None;
        if let Some(h) = self.maps_keeper.take() {
            self.summary.maps_copies = h.join().unwrap_or(0);
        }
        self.summary.dropped_chunks = self.join_writer()?;
        self.summary.bytes = sysinfo::dir_bytes(&perffile::perf_dir(&self.dir));
        sysinfo::sync_dir(&perffile::perf_dir(&self.dir))?;
        Ok(self.summary)
    }

    /// Sends what the drain begun at `drained_at` appended to the frame after `from` to the
    /// tap, with the streams opened since (a consumer gone is no reason to stop).
    fn tap(&mut self, from: usize, drained_at: u64) {
        let Some((tx, told)) = &mut self.tap else {
            return;
        };
        let batch = PerfBatch {
            streams: self.streams.streams[*told..].to_vec(),
            records: self.buf.get(from..).unwrap_or_default().to_vec(),
            drained_at,
        };
        *told = self.streams.streams.len();
        if tx.send(batch).is_err() {
            self.tap = None;
        }
    }

    /// Hands the buffered records to the writer as one frame (`sync`: fdatasync after).
    fn hand_over(&mut self, sync: bool) -> Result<(), RecordError> {
        if self.buf.is_empty() && !sync {
            return Ok(());
        }
        let next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(FRAME_BYTES + (1 << 20)));
        let frame = std::mem::replace(&mut self.buf, next);
        let sent = self
            .frames
            .as_ref()
            .is_some_and(|tx| tx.send((frame, sync)).is_ok());
        if sent {
            return Ok(());
        }
        // The writer stopped: its error says why.
        self.frames = None;
        self.join_writer()?;
        Err(RecordError::Sys {
            call: "perf writer",
            source: std::io::Error::other("the perf chunk writer stopped"),
        })
    }

    fn join_writer(&mut self) -> Result<u64, RecordError> {
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(RecordError::Sys {
                call: "perf writer",
                source: std::io::Error::other("the perf chunk writer panicked"),
            }),
            None => Ok(0),
        }
    }

    fn wait(&self) {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if fds.is_empty() {
            std::thread::sleep(Duration::from_millis(POLL_MS as u64));
            return;
        }
        // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) };
    }

    fn drain_all(&mut self) {
        let mut buf = std::mem::take(&mut self.buf);
        let mut need_maps: Vec<(i32, Option<u64>)> = Vec::new();
        let mut summary = std::mem::take(&mut self.summary);
        let own = self.own_pid;
        for ring in &mut self.rings {
            let Some(info) = self.streams.streams.iter().find(|s| s.id == ring.stream) else {
                continue;
            };
            let stacks = matches!(
                info.kind,
                StreamKind::Stacks { .. } | StreamKind::Sched { .. } | StreamKind::Profile { .. }
            );
            // Parse only up to the callchain to learn pid and the first user ip.
            let head_type = info.sample_type & !(SAMPLE_RAW | SAMPLE_REGS_USER | SAMPLE_STACK_USER);
            let start = buf.len();
            let mut drop_own: Vec<(usize, usize)> = Vec::new();
            let mut offset = start;
            ring.drain(&mut buf, |kind, rec| {
                let rec_start = offset;
                offset += 4 + rec.len();
                match kind {
                    RECORD_SAMPLE => {
                        let Ok(s) = perffile::parse_sample(0, head_type, 0, &rec[8..]) else {
                            return;
                        };
                        if s.pid == own {
                            summary.own_dropped += 1;
                            drop_own.push((rec_start, offset));
                            return;
                        }
                        if stacks {
                            summary.stack_samples += 1;
                        } else {
                            summary.watch_hits += 1;
                        }
                        let ip = if stacks {
                            s.user_ips.first().copied()
                        } else {
                            s.ip
                        };
                        if need_maps.last() != Some(&(s.pid, ip)) {
                            need_maps.push((s.pid, ip));
                        }
                    }
                    perffile::RECORD_LOST => {
                        if let Some(b) = rec.get(16..24) {
                            let mut a = [0u8; 8];
                            a.copy_from_slice(b);
                            summary.lost += u64::from_le_bytes(a);
                        }
                    }
                    _ => {}
                }
            });
            // Remove the recorder's own samples (back to front keeps offsets valid).
            for (a, b) in drop_own.into_iter().rev() {
                buf.drain(a..b);
            }
        }
        self.buf = buf;
        self.summary = summary;
        need_maps.sort_unstable();
        need_maps.dedup();
        if !need_maps.is_empty() {
            if let Some(tx) = &self.maps_requests {
                let _ = tx.send(need_maps);
            }
        }
    }
}

/// The writing thread: compresses each frame the [`Collector`] hands over into a zstd frame
/// appended to the current `perf/NNNNNN.perf.zst` chunk ([`ChunkWriter`]: syncs, cuts
/// chunks, deletes the oldest past the budget).
struct Writer {
    chunks: ChunkWriter,
}

impl Writer {
    /// Writes frames until the collector hangs up; returns the chunks deleted by the budget.
    fn run(
        mut self,
        frames: &crossbeam_channel::Receiver<(Vec<u8>, bool)>,
        spare: &crossbeam_channel::Sender<Vec<u8>>,
    ) -> Result<u64, RecordError> {
        while let Ok((mut buf, sync)) = frames.recv() {
            match self.chunks.write_frame(&buf, sync) {
                // A full disk: these samples are lost, the next frames go on.
                Err(e) if e.is_no_space() => {
                    crate::linux::chunks::DiskFull::say(&e);
                }
                other => other?,
            }
            buf.clear();
            let _ = spare.send(buf);
        }
        self.chunks.complete()?;
        Ok(self.chunks.dropped())
    }
}
