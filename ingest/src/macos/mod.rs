//! The macOS live collector (issue 19): kdebug events read from the kernel with
//! `sysctl(KERN_KDEBUG)` and written as V3 chunks into a crash-safe ring of chunk files, a
//! trace directory that `argus build DIR` reads (`docs/kdebug.md`, "Recording on macOS").
//!
//! ```text
//!  KdebugSystem: the OS calls, one small trait
//!    macOS: sysctl.rs (KERN_KDEBUG + mach2's clock)     anywhere: Replay (a recorded stream)
//!
//!  setup(buffer) ─► enable ─► prologue frame: V3 header + CPU map + thread map
//!    loop until stopped:  wait(interval) ─► read(kd_bufs) ─► events chunk ─► zstd frame
//!                         ─► kdebug/NNNNNN.ktrace.zst (ChunkWriter: fdatasync each second,
//!                            a new file past `chunk_bytes`, starting with its own prologue;
//!                            the oldest files deleted past `ring_size`)
//!                         TRACE_LOST_EVENTS in the stream (the kernel's buffer wrapped)
//!                         ─► lost ranges in meta.json
//!  stop ─► disable ─► last read ─► remove (also when anything fails: the guard's Drop)
//!       ─► meta.json "complete"
//! ```
//!
//! **Crash safety** is `ChunkWriter`'s: every frame holds whole V3 chunks, so a collector
//! killed at any point leaves every file readable up to its last complete frame, and every
//! file starts with its own header and maps, so the ring can delete any prefix of them.
//!
//! **What runs where.** Everything here but `sysctl.rs` is platform-neutral and tested on
//! Linux through [`Replay`]; `sysctl.rs` is compiled on macOS only and has never been built
//! or run (this project has no macOS machine): see the README.

mod replay;
#[cfg(target_os = "macos")]
mod sysctl;

pub use replay::Replay;
#[cfg(target_os = "macos")]
pub use sysctl::Sysctl;

use crate::import::kdebug::{codes, encode, parse, tags};
use crate::linux::chunks::{ChunkOptions, ChunkWriter};
use crate::linux::{sysinfo, RecordError};
use crate::tracedir::{self, LostRange, MetaExt, RingInfo, TraceMeta};
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bytes of one 64-bit `kd_buf`.
const KD_BUF: usize = crate::import::kdebug::KD_BUF_64;

/// The machine a recording was made on, for `meta.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Host {
    /// The kernel release (`kern.osrelease`).
    pub kernel: String,
    /// The hardware (`hw.machine`: `arm64`, `x86_64`).
    pub machine: String,
    /// The host name.
    pub hostname: String,
}

/// The kernel side of kdebug collection: each method is one `sysctl(KERN_KDEBUG)` operation
/// or clock read (the names in brackets), so that the loop, the buffers and the ring run and
/// are tested anywhere through [`Replay`].
pub trait KdebugSystem {
    /// `mach_timebase_info`: nanoseconds per `numer / denom` tick.
    fn timebase(&self) -> (u32, u32);
    /// `mach_absolute_time`.
    fn now(&self) -> u64;
    /// The wall-clock time: seconds and microseconds since the Unix epoch.
    fn walltime(&self) -> (u64, u32);
    /// The machine.
    fn host(&self) -> Host;
    /// Takes kdebug and gives it a buffer of `events` records: `KERN_KDREMOVE` (a stale
    /// setup), `KERN_KDSETBUF`, `KERN_KDSETUP` (xnu `bsd/sys/kdebug_private.h`). Fails with
    /// `EBUSY` when another tracer owns it.
    fn setup(&mut self, events: u32) -> io::Result<()>;
    /// Starts or stops tracing (`KERN_KDENABLE`).
    fn enable(&mut self, on: bool) -> io::Result<()>;
    /// Waits until the buffer is filling up or `timeout` passed (`KERN_KDBUFWAIT`).
    fn wait(&mut self, timeout: Duration) -> io::Result<()>;
    /// Appends up to `max` records taken from the kernel's buffer to `out` (64-bit
    /// `kd_buf`s, in time order, as `KERN_KDREADTR` gives them); returns how many.
    fn read(&mut self, out: &mut Vec<u8>, max: usize) -> io::Result<usize>;
    /// The threads alive now, as `kd_threadmap` entries (`KERN_KDREADCURTHRMAP`).
    fn thread_map(&mut self) -> io::Result<Vec<u8>>;
    /// The CPU map: `kd_cpumap_header` and its entries (`KERN_KDCPUMAP`).
    fn cpu_map(&mut self) -> io::Result<Vec<u8>>;
    /// Gives kdebug back (`KERN_KDREMOVE`).
    fn remove(&mut self) -> io::Result<()>;
}

/// How to record.
#[derive(Clone, Debug)]
pub struct KdebugConfig {
    /// The trace directory (created; must be empty if it exists).
    pub output: PathBuf,
    /// Records in the kernel's buffer (64 bytes each).
    pub buffer_events: u32,
    /// Records taken per read.
    pub read_events: usize,
    /// The longest wait between reads.
    pub interval: Duration,
    /// `fdatasync` the file being written at least this often.
    pub sync_interval: Duration,
    /// Start a new chunk file when the current one reaches this many compressed bytes.
    pub chunk_bytes: u64,
    /// The cap on the chunk files: the oldest are deleted past it (`None`: no cap).
    pub ring_size: Option<u64>,
}

impl KdebugConfig {
    /// The defaults for `output`: a 64 MiB kernel buffer (1 Mi records), reads of 64 Ki
    /// records every 100 ms at most, 16 MiB files, no cap.
    pub fn new(output: impl Into<PathBuf>) -> KdebugConfig {
        KdebugConfig {
            output: output.into(),
            buffer_events: 1 << 20,
            read_events: 1 << 16,
            interval: Duration::from_millis(100),
            sync_interval: Duration::from_secs(1),
            chunk_bytes: 16 << 20,
            ring_size: None,
        }
    }
}

/// What a recording wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KdebugSummary {
    /// Records read from the kernel (`TRACE_LOST_EVENTS` included).
    pub events: u64,
    /// Where the kernel's buffer wrapped (a `TRACE_LOST_EVENTS` record each), per CPU.
    pub lost: BTreeMap<u32, Vec<LostRange>>,
    /// Chunk files written.
    pub chunks: u32,
    /// Chunk files the ring deleted.
    pub dropped_chunks: u64,
}

/// Disables and gives back kdebug when dropped, whatever happened.
struct Owned<'a> {
    sys: &'a mut dyn KdebugSystem,
    enabled: bool,
}

impl Owned<'_> {
    fn call<T>(
        &mut self,
        op: &'static str,
        f: impl FnOnce(&mut dyn KdebugSystem) -> io::Result<T>,
    ) -> Result<T, RecordError> {
        f(&mut *self.sys).map_err(|source| RecordError::Kdebug { op, source })
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        if self.enabled {
            if let Err(e) = self.sys.enable(false) {
                tracing::warn!("kdebug: disabling tracing: {e}");
            }
        }
        if let Err(e) = self.sys.remove() {
            tracing::warn!("kdebug: giving kdebug back (KERN_KDREMOVE): {e}");
        }
    }
}

/// The recording in progress: the chunk files and what `meta.json` says.
struct Writer {
    dir: PathBuf,
    chunks: ChunkWriter,
    chunk_bytes: u64,
    meta: TraceMeta,
    ext: MetaExt,
    timebase: (u32, u32),
    /// The last record's time on each CPU (ticks), where a loss starts.
    last: BTreeMap<u32, u64>,
    summary: KdebugSummary,
    frame: Vec<u8>,
}

impl Writer {
    fn ns(&self, ticks: u64) -> u64 {
        let (n, d) = self.timebase;
        u64::try_from(u128::from(ticks) * u128::from(n) / u128::from(d.max(1))).unwrap_or(u64::MAX)
    }

    /// Starts a chunk file with its prologue: the V3 header, the CPU map, the thread map.
    fn start_file(&mut self, own: &mut Owned<'_>) -> Result<(), RecordError> {
        let header = encode::V3Header {
            timebase: self.timebase,
            start: own.sys.now(),
            walltime: own.sys.walltime(),
        };
        let cpus = own.call("KERN_KDCPUMAP", |s| s.cpu_map())?;
        let threads = own.call("KERN_KDREADCURTHRMAP", |s| s.thread_map())?;
        self.frame.clear();
        encode::v3_header(&mut self.frame, &header);
        encode::v3_chunk(&mut self.frame, tags::CPU_MAP, &cpus);
        encode::v3_chunk(&mut self.frame, tags::THREAD_MAP, &threads);
        // What the kernel gave must read back: a bad map now is a bad file later.
        let seq = self.chunks.start_chunk()?;
        let path = tracedir::kdebug_path(&self.dir, seq);
        let kd = parse(&path, &self.frame).map_err(|e| RecordError::Parse {
            path: path.clone(),
            reason: format!("the kernel's CPU or thread map: {e}"),
        })?;
        if self.meta.cpus.is_empty() {
            self.meta.cpus = kd.cpus.iter().map(|c| c.cpu_id).collect();
        }
        self.chunks.write_frame(&self.frame, true)?;
        Ok(())
    }

    /// Writes `records` (whole `kd_buf`s) as one events chunk in one frame, noting losses.
    fn events(&mut self, records: &[u8], sync: bool) -> Result<(), RecordError> {
        for r in records.chunks_exact(KD_BUF) {
            let word = |at: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&r[at..at + 8]);
                u64::from_le_bytes(b)
            };
            let ts = word(0);
            let debugid = word(48) as u32;
            let cpu = (word(48) >> 32) as u32;
            if debugid & !3 == codes::TRACE_LOST_EVENTS {
                let from = self.last.get(&cpu).copied().unwrap_or(ts);
                let range = LostRange {
                    from_ns: self.ns(from),
                    to_ns: self.ns(ts),
                    events: None,
                };
                self.summary.lost.entry(cpu).or_default().push(range);
            }
            self.last.insert(cpu, ts);
        }
        self.summary.events += (records.len() / KD_BUF) as u64;
        self.frame.clear();
        if !records.is_empty() {
            encode::v3_events(&mut self.frame, records);
        }
        self.chunks.write_frame(&self.frame, sync)?;
        Ok(())
    }

    fn write_meta(&mut self) -> Result<(), RecordError> {
        self.meta.chunks = BTreeMap::from([(0, self.chunks.chunks())]);
        self.ext.lost_ranges = self.summary.lost.clone();
        if let Some(ring) = &mut self.ext.ring {
            let dropped = u32::try_from(self.chunks.dropped()).unwrap_or(u32::MAX);
            if dropped > 0 {
                ring.dropped.entry(0).or_default().chunks = dropped;
            }
        }
        sysinfo::write_meta(&self.dir, &self.meta, &self.ext)
    }
}

/// Records kdebug events from `sys` into `cfg.output` until `stop()` says so, then reads
/// what is left and closes the recording (see the module docs).
pub fn record(
    sys: &mut dyn KdebugSystem,
    cfg: &KdebugConfig,
    stop: &dyn Fn() -> bool,
) -> Result<KdebugSummary, RecordError> {
    if cfg.read_events == 0 || cfg.buffer_events == 0 {
        return Err(RecordError::InvalidSetting {
            setting: "buffer_events/read_events",
            value: 0,
            reason: "at least 1 record",
        });
    }
    if let Some(size) = cfg.ring_size {
        if size < cfg.chunk_bytes.saturating_mul(4) {
            return Err(RecordError::RingTooSmall {
                size,
                needed: cfg.chunk_bytes.saturating_mul(4),
            });
        }
    }
    crate::linux::prepare_output(&cfg.output)?;
    let kdir = tracedir::kdebug_dir(&cfg.output);
    sysinfo::create_dir_private(&kdir)?;
    let dir = cfg.output.clone();
    let chunks = ChunkWriter::new(
        move |seq| tracedir::kdebug_path(&dir, seq),
        ChunkOptions {
            budget: cfg.ring_size,
            sync_dir_on_create: true,
            ..ChunkOptions::default()
        },
    )?;
    let timebase = sys.timebase();
    let host = sys.host();
    let mut own = Owned {
        sys,
        enabled: false,
    };
    own.call("setup (KERN_KDREMOVE, KERN_KDSETBUF, KERN_KDSETUP)", |s| {
        s.setup(cfg.buffer_events)
    })?;
    let (wall_s, wall_us) = own.sys.walltime();
    let mut w = Writer {
        dir: cfg.output.clone(),
        chunks,
        chunk_bytes: cfg.chunk_bytes,
        meta: TraceMeta {
            kernel: host.kernel,
            machine: host.machine,
            hostname: host.hostname,
            events: vec!["kdebug".into()],
            ..TraceMeta::recording("mach_absolute_time")
        },
        ext: MetaExt {
            ring: cfg.ring_size.map(|size| RingInfo {
                size,
                chunk_pages: 0,
                dropped: BTreeMap::new(),
            }),
            ..MetaExt::default()
        },
        timebase,
        last: BTreeMap::new(),
        summary: KdebugSummary::default(),
        frame: Vec::new(),
    };
    let start = own.sys.now();
    w.meta.start_ns = w.ns(start);
    let wall_ns = i128::from(wall_s) * 1_000_000_000 + i128::from(wall_us) * 1_000;
    w.meta.wall_offset_ns = i64::try_from(wall_ns - i128::from(w.meta.start_ns)).ok();
    w.start_file(&mut own)?;
    w.write_meta()?;
    own.call("KERN_KDENABLE", |s| s.enable(true))?;
    own.enabled = true;

    let mut records = Vec::with_capacity(cfg.read_events * KD_BUF);
    let mut synced = Instant::now();
    loop {
        let stopping = stop();
        if stopping {
            own.call("KERN_KDENABLE", |s| s.enable(false))?;
            own.enabled = false;
        } else {
            own.call("KERN_KDBUFWAIT", |s| s.wait(cfg.interval))?;
        }
        // Drain: a full read may leave more behind.
        loop {
            records.clear();
            let n = own.call("KERN_KDREADTR", |s| s.read(&mut records, cfg.read_events))?;
            records.truncate(n * KD_BUF);
            let sync = stopping || synced.elapsed() >= cfg.sync_interval;
            if sync {
                synced = Instant::now();
            }
            w.events(&records, sync)?;
            if w.chunks.current_bytes().unwrap_or(0) >= w.chunk_bytes && !stopping {
                w.start_file(&mut own)?;
                w.write_meta()?;
            }
            if n < cfg.read_events {
                break;
            }
        }
        if stopping {
            break;
        }
    }
    w.meta.end_ns = w.ns(own.sys.now());
    drop(own);
    w.chunks.complete()?;
    w.meta.status = "complete".into();
    w.write_meta()?;
    w.summary.chunks = w.chunks.chunks();
    w.summary.dropped_chunks = w.chunks.dropped();
    Ok(w.summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::kdebug::{dir_read, KdEvent, KdFile, KdThread, KdVersion};
    use std::path::Path;
    use std::sync::atomic::Ordering;

    /// `n` records on 2 CPUs, 10 µs apart, in 24 MHz ticks.
    fn stream(n: u64) -> KdFile {
        KdFile {
            threads: vec![
                KdThread {
                    tid: 7,
                    pid: 0,
                    command: "kernel_task".into(),
                },
                KdThread {
                    tid: 1001,
                    pid: 500,
                    command: "app".into(),
                },
            ],
            events: (0..n)
                .map(|i| KdEvent {
                    offset: 0,
                    timestamp: 24_000 + i * 240,
                    args: [i, i * 3, 0, 0x5a5a],
                    tid: 1001,
                    debugid: 0x040c_0000 | ((i % 200) as u32) << 2 | (i % 3) as u32,
                    cpu: (i % 2) as u32,
                })
                .collect(),
            ..KdFile::new(KdVersion::V3, (125, 3))
        }
    }

    fn fields(events: &[KdEvent]) -> Vec<(u64, [u64; 4], u64, u32, u32)> {
        events
            .iter()
            .map(|e| (e.timestamp, e.args, e.tid, e.debugid, e.cpu))
            .collect()
    }

    fn run(replay: &mut Replay, cfg: &KdebugConfig) -> Result<KdebugSummary, RecordError> {
        let done = replay.done();
        record(replay, cfg, &move || done.load(Ordering::SeqCst))
    }

    fn meta(dir: &Path) -> (TraceMeta, MetaExt) {
        let bytes = std::fs::read(tracedir::meta_path(dir)).expect("meta.json");
        (
            serde_json::from_slice(&bytes).expect("meta.json is TraceMeta"),
            MetaExt::from_meta_json(&bytes).expect("meta.json extension keys"),
        )
    }

    #[test]
    fn a_replayed_stream_is_written_as_v3_files_and_reads_back_record_for_record() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("trace");
        let source = stream(30_000);
        let mut replay = Replay::new(&source);
        let mut cfg = KdebugConfig::new(&out);
        cfg.chunk_bytes = 32 << 10;
        let summary = run(&mut replay, &cfg).expect("records");
        assert_eq!(summary.events, 30_000);
        assert!(summary.lost.is_empty(), "{:?}", summary.lost);
        assert!(summary.chunks >= 3, "{} files", summary.chunks);
        let kd = dir_read(&out).expect("the directory reads");
        assert_eq!(fields(&kd.events), fields(&source.events));
        assert_eq!(kd.threads, source.threads);
        assert_eq!(kd.cpus.iter().map(|c| c.cpu_id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(kd.timebase, (125, 3));
        // Every file stands alone: a V3 file with its own header and maps.
        for seq in 0..summary.chunks {
            let path = tracedir::kdebug_path(&out, seq);
            let bytes = zstd::decode_all(std::fs::File::open(&path).expect("chunk"))
                .expect("whole zstd frames");
            let one = parse(&path, &bytes).expect("a V3 file");
            assert_eq!(one.threads, source.threads, "file {seq}");
            assert_eq!(one.cpus.len(), 2, "file {seq}");
        }
        let (m, ext) = meta(&out);
        assert_eq!(m.status, "complete");
        assert_eq!(m.cpus, [0, 1]);
        assert_eq!(m.chunks, BTreeMap::from([(0, summary.chunks)]));
        // The replay's clock starts a tick before the first record.
        assert_eq!(m.start_ns, (24_000 - 1) * 125 / 3);
        assert!(
            m.end_ns >= (24_000 + 29_999 * 240) * 125 / 3,
            "end {}",
            m.end_ns
        );
        assert!(ext.lost_ranges.is_empty());
        // The sysctl sequence: take, size, set up, maps, enable; reads; disable, give back.
        let calls = replay.calls();
        assert_eq!(
            calls[..6],
            [
                "KERN_KDREMOVE",
                "KERN_KDSETBUF",
                "KERN_KDSETUP",
                "KERN_KDCPUMAP",
                "KERN_KDREADCURTHRMAP",
                "KERN_KDENABLE"
            ]
        );
        assert_eq!(calls.last(), Some(&"KERN_KDREMOVE"));
        assert_eq!(calls.iter().filter(|c| **c == "KERN_KDENABLE").count(), 2);
        let thread_maps = calls
            .iter()
            .filter(|c| **c == "KERN_KDREADCURTHRMAP")
            .count();
        assert_eq!(
            thread_maps as u32, summary.chunks,
            "one thread map per file"
        );
    }

    #[test]
    fn a_full_kernel_buffer_becomes_lost_ranges_and_nothing_else_is_lost() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("trace");
        let source = stream(20_000);
        let mut replay = Replay::new(&source);
        let mut cfg = KdebugConfig::new(&out);
        // 128 records of buffer and a read every 50 ms: 5000 records arrive per wait.
        cfg.buffer_events = 128;
        cfg.interval = Duration::from_millis(50);
        let summary = run(&mut replay, &cfg).expect("records");
        let kd = dir_read(&out).expect("the directory reads");
        let lost_marks: Vec<&KdEvent> = kd
            .events
            .iter()
            .filter(|e| e.debugid == codes::TRACE_LOST_EVENTS)
            .collect();
        assert!(replay.dropped() > 0);
        assert!(!lost_marks.is_empty());
        // What was read plus what the kernel dropped is everything that happened.
        let read = kd.events.len() - lost_marks.len();
        assert_eq!(read as u64 + replay.dropped(), 20_000);
        // Every record read is one of the stream's, in order.
        let kept: Vec<_> = kd
            .events
            .iter()
            .filter(|e| e.debugid != codes::TRACE_LOST_EVENTS)
            .map(|e| e.args[0])
            .collect();
        assert!(kept.windows(2).all(|w| w[0] < w[1]));
        let marks: usize = summary.lost.values().map(Vec::len).sum();
        assert_eq!(marks, lost_marks.len());
        let (_, ext) = meta(&out);
        assert_eq!(ext.lost_ranges, summary.lost);
        for r in summary.lost.values().flatten() {
            assert!(r.from_ns <= r.to_ns, "{r:?}");
        }
        // The import turns them into gaps.
        let imported = crate::import::open(&out).expect("imports");
        assert_eq!(imported.summary().lost_ranges.len(), lost_marks.len());
    }

    #[test]
    fn the_ring_deletes_the_oldest_files_and_what_is_left_reads() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("trace");
        let source = stream(60_000);
        let mut replay = Replay::new(&source);
        let mut cfg = KdebugConfig::new(&out);
        // Reads of 1000 records (a few KiB of frame), four files in the ring.
        cfg.read_events = 1000;
        cfg.interval = Duration::from_millis(10);
        cfg.chunk_bytes = 16 << 10;
        cfg.ring_size = Some(64 << 10);
        let summary = run(&mut replay, &cfg).expect("records");
        assert!(summary.dropped_chunks > 0);
        let kd = dir_read(&out).expect("the directory reads");
        let all = fields(&source.events);
        let kept = fields(&kd.events);
        assert!(
            !kept.is_empty() && kept.len() < all.len(),
            "{} of {} kept, {summary:?}",
            kept.len(),
            all.len()
        );
        assert_eq!(
            kept[..],
            all[all.len() - kept.len()..],
            "the newest records are kept"
        );
        let (_, ext) = meta(&out);
        let ring = ext.ring.expect("ring info");
        assert_eq!(u64::from(ring.dropped[&0].chunks), summary.dropped_chunks);
        assert!(
            kd.notes.iter().any(|n| n.contains("deleted")),
            "{:?}",
            kd.notes
        );
    }

    #[test]
    fn a_killed_collector_leaves_every_whole_frame_readable() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("trace");
        let source = stream(5_000);
        let mut replay = Replay::new(&source);
        let mut cfg = KdebugConfig::new(&out);
        cfg.interval = Duration::from_millis(5);
        let summary = run(&mut replay, &cfg).expect("records");
        assert_eq!(summary.chunks, 1);
        let path = tracedir::kdebug_path(&out, 0);
        let whole = std::fs::read(&path).expect("chunk");
        let all = fields(&source.events);
        let mut seen = 0;
        for cut in (0..whole.len()).step_by(97).skip(2) {
            std::fs::write(&path, &whole[..cut]).expect("cut");
            match dir_read(&out) {
                Ok(kd) => {
                    let got = fields(&kd.events);
                    assert_eq!(got[..], all[..got.len()], "cut at {cut}");
                    assert!(
                        got.len() >= seen,
                        "cut at {cut}: fewer records than a shorter cut"
                    );
                    seen = got.len();
                }
                // Too short for the prologue: an error naming the directory's file.
                Err(e) => assert!(seen == 0 && e.file().is_some(), "cut at {cut}: {e}"),
            }
        }
        assert!(seen > 4_000, "{seen} records before the last cut");
    }

    #[test]
    fn kdebug_owned_by_another_tracer_is_an_error_and_is_left_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut replay = Replay::new(&stream(10)).busy();
        let err = run(&mut replay, &KdebugConfig::new(tmp.path().join("t"))).expect_err("EBUSY");
        match &err {
            RecordError::Kdebug { source, .. } => {
                assert_eq!(source.raw_os_error(), Some(libc::EBUSY));
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("ktrace reset"), "{err}");
        assert_eq!(
            replay
                .calls()
                .iter()
                .filter(|c| **c == "KERN_KDENABLE")
                .count(),
            0
        );
    }
}
