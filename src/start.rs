//! `argus start -o DIR`: the continuous job. The recorder keeps its raw ring in `DIR/trace/`
//! and taps every page it reads straight into decoding; the events feed the dataflow live and
//! a snapshot is written every `--snapshot-every` seconds.
//!
//! ```text
//!  recorder readers (cpuN) ──► DIR/trace/cpuN/*.chunk.zst          (the raw ring, as `record`)
//!          └── tap (page) ──► LiveMerge: per-CPU decode → queues ──► release ts ≤ watermark
//!                                                                    │ Batch every tick (200 ms)
//!                       ┌────────────────────────────────────────────┤
//!                 generation g (dataflow + collector)     generation g+1 (started when g is
//!                       │ oldest generation answers                  `--retain` old)
//!                       ▼ snapshot requests
//!  snapshot thread: events of the period (streamed) + segments/edges/spins/threads/errors
//!     → DIR/snapshots/<epoch>/ (atomic) → DIR/latest (symlink, atomic) → --on-hang hooks
//!          ▲ every --snapshot-every, or at once when the oldest generation's collector
//!          └ publishes a new or grown spin of a watched thread (woken main loop)
//! ```
//!
//! **Watermark.** Every tick the main loop first drains the tap, then releases the queued
//! records with `ts ≤ now − --lag` (the trace clock is `CLOCK_MONOTONIC`, the same clock the
//! job reads), merged by `(ts, cpu)`. A CPU that produced nothing lately has nothing queued
//! and does not hold the watermark back: the watermark follows the clock, not the streams.
//! The recorder reads every CPU at least every 100 ms (its poll timeout) and the tap is
//! drained before each release, so with the default 500 ms lag a record is only late when the
//! recorder itself fell behind. That case is recognised too: a CPU whose last tapped page was
//! *full* had more to read, so the watermark stays at that CPU's last record until a partial
//! page (the reader reached the end of the buffer) arrives, for at most 5 s unless the job
//! itself is behind the recorder (pages wait in the tap, or are read back from the ring:
//! [`crate::catchup`]; the watermark never passes the last page handed on of a CPU being
//! read back). A **late record** (its `ts` is at or below a watermark
//! already released) cannot enter the dataflow (epochs are closed); it is dropped, counted as
//! lost (`late` in the status line, one row per CPU and snapshot period in `errors.parquet`)
//! and stays in the raw ring, so `argus build DIR/trace` still sees it.
//!
//! **Lost-events gaps.** A page flagged with missed events (the kernel overwrote records the
//! reader had not read), or one after pages the tap dropped, is a gap on its CPU: from that
//! CPU's last record before it (or the job's start) to the page's first record.
//! [`LiveMerge::push_page`] adds it to the rules' [`GapSet`] (shared by every generation and
//! worker, kept for later generations) before it queues any record of the page, so every
//! event released afterwards is processed with the gap known and no timer/queue pair or
//! thread-order edge is made across it, as in `argus build`. Events of other CPUs inside the
//! gap released *before* the page came (only when the watermark passed the CPU's last record:
//! its hold expired, or its last page was partial) were processed without it; an edge made
//! then stays (`docs/start.md`, "Lost events").
//!
//! **Retention.** The dataflow only accepts insertions of events, so old events cannot be
//! retracted from it. Instead the job runs *generations*: a new dataflow starts whenever the
//! newest one has covered `--retain`; the oldest is dropped once the next one covers
//! `--retain`. At most two run at once (one in the first `--retain`), snapshots come from
//! the oldest, so a snapshot covers between `--retain` and twice `--retain` of history and
//! memory stays bounded: between one and three windows of events are held, so resident
//! memory saw-tooths with period `--retain`. A spin that began before the window (a thread
//! blocked longer than `--retain`) shows from the window's start: the job forgets what is
//! older. A dropped generation's unread input is discarded (when no snapshot waits on it) so
//! it ends quickly. Measured (`cargo bench --bench soak`, 290k events/s, `--retain 15s`):
//! about 180 bytes of resident memory per event held (dataflow state plus the collected
//! graph), flat from cycle to cycle with mimalloc as the global allocator (glibc malloc kept
//! the memory of dropped generations in its arenas: +20% in 10 minutes). Size `--retain` to
//! the event rate.
//!
//! **Back-pressure.** A generation's input holds at most 8 epochs (1.6 s) and the snapshot
//! thread 16 ticks of events; beyond that the main loop waits, the tap fills, and pages the
//! recorder could not hand over are reported as dropped at the end (they are still in the
//! raw ring).
//!
//! **Snapshots.** `DIR/snapshots/<epoch>/` (10 digits, the global epoch: one per tick), each
//! written by `argus_sinks::SnapshotWriter` into a hidden directory, installed under a hidden
//! staging name (`.staged-<pid>-<n>`: the epoch is only known when the snapshot is finished)
//! and renamed into place; then `DIR/latest` (a relative symlink) is replaced by a rename.
//! A `kill -9` at any point leaves `latest` on a complete snapshot. `events.parquet` of a
//! live snapshot holds the events released since the previous snapshot (streamed to disk as
//! they come, so memory does not hold them); the other tables describe the whole retained
//! window. The newest
//! `--keep` snapshots are kept. While a snapshot is still being written when the next one is
//! due, that one is skipped (counted in the status line) rather than queued: a queued request
//! would hold a copy of the whole graph, and an overloaded writer would fall further behind;
//! the next snapshot then holds the events of both periods.
//!
//! **Hangs.** After each snapshot the spins of watched threads are compared with the previous
//! snapshot's: a new spin, or one whose duration doubled since it was last reported, is
//! logged and runs `--on-hang CMD` (`sh -c`, not waited for) with `ARGUS_HANG_PID`, `_TID`,
//! `_CLASS`, `_SNAPSHOT`, `_SEGMENT`, `_DURATION_NS` and `_NEW` set. Watched: `--watch-pid` /
//! `--watch-comm`; with neither, the main thread of every user process unless it waits in an
//! event-loop call (poll, epoll, select).
//!
//! A hang does not wait for the periodic cycle: the dataflow reports an open spin as soon as
//! the watermark passes its start + `--threshold`, the oldest generation's collector
//! publishes its spins at the end of that epoch and wakes the main loop, which takes a
//! snapshot **at once** (named by the current epoch, off the cycle) when one of them is of a
//! watched thread and would be reported (new, or doubled). The hook then runs on that
//! snapshot, and `argus debug DIR --follow` sees it as the new `latest`. Rate limits: no such
//! snapshot while another is being written (the main loop is woken again when it is
//! installed), and at most one per half `--snapshot-every`. The hang is therefore reported
//! about `--lag` + a tick + one snapshot write after it became detectable (measured by
//! `tests/continuous.rs`: well within one period).
//!
//! **Stop and restart.** SIGINT/SIGTERM stop the recorder (its signal handler), which closes
//! the tap; the job releases everything queued, writes a last snapshot and exits 0. On start,
//! a non-empty `DIR/trace` from an earlier run is moved to `DIR/trace.prev` and its last
//! `--retain` is replayed into the first generation before live events (the gap between the
//! runs is not recorded; spins that began before this run do not run hooks).

use crate::cli::BuildArgs;
use crate::progress::RateLimit;
use anyhow::{bail, Context, Result};
use argus_ingest::decode::{parse_page, Converter, Decoded, Missed};
use argus_ingest::format::{FormatSet, HeaderPage};
use argus_ingest::merge::ThreadTable;
use argus_ingest::replay::TraceReader;
use argus_ingest::tracedir::ProcEntry;
use argus_pipeline::dataflow::{self, Batch, DataflowConfig, Message, Update};
use argus_pipeline::gaps::GapSet;
use argus_pipeline::rules::RulesConfig;
use argus_schema::{
    CausalEdge, EndCause, ErrorRecord, Event, Nanos, SegmentId, Spin, ThreadInfo, UpdateSink,
};
use argus_sinks::{CollectionSink, SnapshotInfo, SnapshotWriter};
use crossbeam_channel::{select, Receiver, Sender};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the main loop releases events into the dataflow (one epoch per tick).
const TICK: Duration = Duration::from_millis(200);
/// Epochs a generation's input may hold before the job waits for the dataflow (1.6 s): an
/// overloaded job slows its reading of the tap, whose pages then count as dropped.
const INPUT_EPOCHS: usize = 8;
/// Ticks of events the snapshot thread may have to write before the job waits for it.
const SNAPSHOT_BACKLOG: usize = 16;
/// Error rows kept per snapshot period (the rest are counted).
const MAX_ERROR_ROWS: usize = 1000;
/// Events per batch when replaying the previous run's ring.
const REPLAY_BATCH: usize = 100_000;
/// Tapped pages that may wait for decoding (4 KiB each: 32 MiB); the recorder drops what
/// does not fit, and the job reads it back from the ring (`catchup.rs`).
const TAP_CAPACITY: usize = 8192;

/// `argus start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// The job directory: `trace/` (raw ring), `snapshots/<epoch>/`, `latest`.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Seconds between snapshots. A watched thread's new or grown hang takes one at once
    /// (at most one extra per half period).
    #[arg(long, default_value_t = 10.0)]
    pub snapshot_every: f64,
    /// History kept in the dataflow (`90s`, `10m`, `1h`; a bare number is seconds).
    #[arg(long, default_value = "10m")]
    pub retain: String,
    /// Seconds the watermark stays behind the clock (how late a record may arrive).
    #[arg(long, default_value_t = 0.5)]
    pub lag: f64,
    /// Snapshots kept on disk (the newest).
    #[arg(long, default_value_t = 3)]
    pub keep: usize,
    /// Shell command run when a watched thread's hang appears or doubles, on the snapshot
    /// taken at once for it (env: ARGUS_HANG_PID, ARGUS_HANG_TID, ARGUS_HANG_CLASS,
    /// ARGUS_HANG_SNAPSHOT, …).
    #[arg(long)]
    pub on_hang: Option<String>,
    /// Watch this process (repeatable); default: every user process's main thread.
    #[arg(long)]
    pub watch_pid: Vec<i32>,
    /// Watch threads or processes with this name (repeatable).
    #[arg(long)]
    pub watch_comm: Vec<String>,
    /// Dataflow worker threads.
    #[arg(short, long, default_value_t = 1)]
    pub workers: usize,
    /// Spinning-vertex threshold in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub threshold: f64,
    /// Per-CPU ring-buffer size in KiB.
    #[arg(long, default_value_t = 8192)]
    pub buffer_kb: u32,
    /// Real-time (`SCHED_FIFO`) priority of the trace readers while they drain, so a busy
    /// machine does not overrun the kernel's buffer; each reader uses at most half a CPU at
    /// it per 100 ms. 0: normal priority.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=99))]
    pub drain_priority: u8,
    /// Priority of the job's decoding, dataflow and snapshot threads: `idle` (`SCHED_IDLE`:
    /// only CPU time no other thread wants) or a nice value (-20..19). On a machine whose
    /// CPUs the traced load needs, the live graph lags (counted, visible in the status line)
    /// rather than slowing the load; the recorder keeps its own priority and loses nothing.
    #[arg(long, default_value = "idle", allow_negative_numbers = true, value_parser = parse_job_priority)]
    pub nice: JobPriority,
    /// Stop after this many seconds (default: until SIGINT / SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds between status lines.
    #[arg(long, default_value_t = 5.0)]
    pub status_every: f64,
    /// Sleep this long before installing each snapshot (for crash tests).
    #[arg(long, hide = true, default_value_t = 0)]
    pub snapshot_delay_ms: u64,
}

/// How the job's own threads are scheduled (`--nice`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum JobPriority {
    /// `SCHED_IDLE`. The default: under the saturating load of issue 14 (`cargo bench
    /// --bench overhead`, `ARGUS_BENCH_SATURATE`) the load kept 0.41 of its untraced speed
    /// against 0.33 at nice 10 and 0.39 at nice 19 (15 s runs, `argus record` alone: 0.48):
    /// the ping-pong load is slowed by every wake-up it has to wait for, and only the idle
    /// class is preempted at once.
    Idle,
    /// A nice value, -20..19.
    Nice(i32),
}

impl std::fmt::Display for JobPriority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobPriority::Idle => f.write_str("idle"),
            JobPriority::Nice(n) => write!(f, "nice {n}"),
        }
    }
}

/// `idle` or a nice value in -20..19.
fn parse_job_priority(s: &str) -> Result<JobPriority, String> {
    if s.eq_ignore_ascii_case("idle") {
        return Ok(JobPriority::Idle);
    }
    match s.parse::<i32>() {
        Ok(n) if (-20..=19).contains(&n) => Ok(JobPriority::Nice(n)),
        _ => Err(format!(
            "`{s}` is neither `idle` nor a nice value from -20 to 19"
        )),
    }
}

/// What `argus start` does.
#[derive(Clone, Debug)]
pub struct StartConfig {
    /// The job directory.
    pub dir: PathBuf,
    /// Between snapshots.
    pub snapshot_every: Duration,
    /// History kept.
    pub retain: Duration,
    /// Watermark lag behind the clock.
    pub lag: Duration,
    /// Snapshots kept.
    pub keep: usize,
    /// The hang hook.
    pub on_hang: Option<String>,
    /// Watched processes.
    pub watch_pids: Vec<i32>,
    /// Watched names.
    pub watch_comms: Vec<String>,
    /// The dataflow.
    pub dataflow: DataflowConfig,
    /// Ring-buffer size per CPU.
    pub buffer_kb: u32,
    /// The readers' real-time priority while draining (0: normal).
    pub drain_priority: u8,
    /// Scheduling of the job's own threads (all but the recorder's).
    pub nice: JobPriority,
    /// Stop after.
    pub duration: Option<Duration>,
    /// Between status lines.
    pub status_every: Duration,
    /// Test hook: delay before installing a snapshot.
    pub snapshot_delay: Duration,
}

fn positive_secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0) {
        bail!("{name} must be a positive number of seconds, got {v}");
    }
    Ok(Duration::from_secs_f64(v))
}

/// Parses `90`, `90s`, `10m`, `1h`, `1.5h`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&t[..i], &t[i..]),
        None => (t, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => bail!("bad duration {text:?}: the unit must be s, m or h"),
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("bad duration {text:?}"))?;
    positive_secs("a duration", v * scale).with_context(|| format!("bad duration {text:?}"))
}

impl StartConfig {
    /// From the command line.
    pub fn from_args(a: &StartArgs) -> Result<StartConfig> {
        if a.workers == 0 {
            bail!("--workers must be at least 1");
        }
        if a.keep == 0 {
            bail!("--keep must be at least 1");
        }
        let lag = positive_secs("--lag", a.lag)?;
        Ok(StartConfig {
            dir: a.output.clone(),
            snapshot_every: positive_secs("--snapshot-every", a.snapshot_every)?,
            retain: parse_duration(&a.retain).context("--retain")?,
            lag,
            keep: a.keep,
            on_hang: a.on_hang.clone(),
            watch_pids: a.watch_pid.clone(),
            watch_comms: a.watch_comm.clone(),
            dataflow: DataflowConfig {
                rules: RulesConfig {
                    spin_threshold_ns: positive_secs("--threshold", a.threshold)?.as_nanos() as u64,
                    ..RulesConfig::default()
                },
                workers: a.workers,
                ..DataflowConfig::default()
            },
            buffer_kb: a.buffer_kb,
            drain_priority: a.drain_priority,
            nice: a.nice,
            duration: a
                .duration
                .map(|d| positive_secs("--duration", d))
                .transpose()?,
            status_every: positive_secs("--status-every", a.status_every)?,
            snapshot_delay: Duration::from_millis(a.snapshot_delay_ms),
        })
    }
}

/// Cluster flags of `argus build`: the number of processes and their addresses (one
/// `host:port` per line of `--hosts`, `#` comments and blank lines ignored).
pub fn cluster_hosts(args: &BuildArgs) -> Result<(usize, Vec<String>)> {
    if args.processes == 0 {
        bail!("--processes must be at least 1");
    }
    if args.process_id >= args.processes {
        bail!(
            "--process-id {} must be below --processes {}",
            args.process_id,
            args.processes
        );
    }
    let hosts = match &args.hosts {
        None if args.processes > 1 => bail!("--processes > 1 needs --hosts FILE"),
        None => Vec::new(),
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading hosts file {}", file.display()))?;
            let hosts: Vec<String> = text
                .lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(bad) = hosts.iter().find(|h| !h.contains(':')) {
                bail!("hosts file {}: {bad:?} is not host:port", file.display());
            }
            if hosts.len() != args.processes {
                bail!(
                    "hosts file {} lists {} addresses for --processes {}",
                    file.display(),
                    hosts.len(),
                    args.processes
                );
            }
            hosts
        }
    };
    Ok((
        args.processes,
        if args.processes > 1 {
            hosts
        } else {
            Vec::new()
        },
    ))
}

/// `CLOCK_MONOTONIC` now: the trace clock.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ───────────────────────────── live decoding and merging ─────────────────────────────

/// What the live merge saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Pages decoded.
    pub pages: u64,
    /// Events released.
    pub events: u64,
    /// Events the kernel lost, per CPU (page commit flags).
    pub lost: BTreeMap<u32, u64>,
    /// Pages flagged as following lost events without a count.
    pub lost_unknown_pages: u64,
    /// Records that arrived after the watermark had passed them (dropped).
    pub late: u64,
    /// Malformed pages or records, and records going back in time (dropped).
    pub bad: u64,
    /// Pages the recorder read but could not hand to the job in time (the tap was full):
    /// their records are in the raw ring only.
    pub tap_dropped: u64,
    /// Lost-events gaps found (a page flagged with lost events, or pages the tap dropped):
    /// each was added to the rules' gaps before any record after it was released.
    pub gaps: u64,
}

impl LiveStats {
    /// Lost events of every kind: kernel, late and malformed.
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum::<u64>() + self.late + self.bad
    }
}

struct CpuLive {
    conv: Converter,
    queue: VecDeque<Decoded>,
    last: Option<Nanos>,
    /// The tap's drop count of this CPU as of its last page
    /// ([`argus_ingest::linux::TappedPage::dropped_before`]).
    dropped: u64,
    /// Set when the last page tapped was full: the reader had more to read, so records
    /// after `last` may still come (the time is when that page arrived).
    behind: Option<(Nanos, Instant)>,
}

/// A page whose records fill it to within this many bytes counts as full.
const FULL_PAGE_SLACK: usize = 512;
/// How long a CPU whose reader is behind may hold the watermark back.
const MAX_HOLD: Duration = Duration::from_secs(5);
/// Gaps remembered for the snapshots' `errors.parquet` rows (the newest).
const MAX_GAP_ROWS: usize = 64;

/// A lost-events gap: `(cpu, from ns, to ns, events lost if counted)`, as
/// [`crate::gaps::touched`] takes them.
pub type LostRange = (u32, u64, u64, Option<u64>);

/// Per-CPU pages in, one time-ordered event stream out, released behind a watermark (see the
/// module docs for the rule and what happens to late records).
pub struct LiveMerge {
    layout: HeaderPage,
    template: Converter,
    cpus: BTreeMap<u32, CpuLive>,
    table: ThreadTable,
    next_seq: u64,
    released: Option<Nanos>,
    /// Counters.
    pub stats: LiveStats,
    errors: Vec<ErrorRecord>,
    /// Where lost-events gaps go: shared with the rules of every dataflow generation.
    gaps: GapSet,
    /// Where this run's records begin: a CPU whose first page already follows lost events
    /// lost them after this.
    origin: Nanos,
    /// The newest gaps, for the snapshots' rows.
    ranges: VecDeque<LostRange>,
}

impl LiveMerge {
    /// A merge decoding with `formats`, threads seeded from `procs`, numbering from `seq`.
    pub fn new(formats: &FormatSet, procs: &[ProcEntry], seq: u64) -> Result<LiveMerge> {
        let template = Converter::new(formats).context("building the record converter")?;
        Ok(LiveMerge {
            layout: formats.header_page,
            template,
            cpus: BTreeMap::new(),
            table: ThreadTable::from_proc(procs),
            next_seq: seq,
            released: None,
            stats: LiveStats::default(),
            errors: Vec::new(),
            gaps: GapSet::new(),
            origin: Nanos(0),
            ranges: VecDeque::new(),
        })
    }

    /// Adds the gaps this merge finds to `gaps` (the job passes its rules' set, shared by
    /// every generation), and takes `origin` as the start of the records: a CPU's first page
    /// that already follows lost events lost them between `origin` and its first record.
    pub fn track_gaps(&mut self, gaps: GapSet, origin: Nanos) {
        self.gaps = gaps;
        self.origin = origin;
    }

    /// Records a lost-events gap on `cpu` from `from` to `to`: into the rules' gaps at once
    /// (so no record after it reaches a dataflow before the gap does), an error row, and
    /// the list the snapshots name touched segments from. `why` says what was lost.
    pub fn add_gap(&mut self, cpu: u32, from: Nanos, to: Nanos, events: Option<u64>, why: &str) {
        let (from, to) = (from.min(to), from.max(to));
        self.gaps.add(from, to);
        self.stats.gaps += 1;
        if self.ranges.len() >= MAX_GAP_ROWS {
            self.ranges.pop_front();
        }
        self.ranges.push_back((cpu, from.0, to.0, events));
        self.error(
            cpu,
            Some(from),
            format!(
                "{why} from {} to {} ns: no edge is made across this gap; threads running then may miss segments",
                from.0, to.0
            ),
        );
    }

    /// The gaps found (the newest [`MAX_GAP_ROWS`]) that end at or after `since`.
    pub fn gaps_since(&self, since: Nanos) -> Vec<LostRange> {
        self.ranges
            .iter()
            .filter(|r| r.2 >= since.0)
            .copied()
            .collect()
    }

    /// Decodes one tapped page, noting the pages the tap dropped before it as a gap.
    #[cfg(test)]
    pub fn push_tapped(&mut self, p: &Tapped) {
        self.push_page(p.cpu, &p.data, p.dropped_before);
    }

    fn error(&mut self, cpu: u32, ts: Option<Nanos>, message: String) {
        if self.errors.len() < MAX_ERROR_ROWS {
            self.errors.push(ErrorRecord {
                source: format!("live/cpu{cpu}"),
                offset: None,
                ts,
                message,
            });
        }
    }

    /// Decodes one page read from `cpu`'s ring buffer, the tap having dropped `dropped`
    /// pages of that CPU so far ([`argus_ingest::linux::TappedPage::dropped_before`]).
    ///
    /// A page flagged with lost events (or one after pages the tap dropped) is a **gap**:
    /// from this CPU's last record before it (or the merge's origin) to the page's first
    /// record. It goes into the rules' [`GapSet`] here, before any record of the page is
    /// queued, so every dataflow generation has it before the first record after it.
    pub fn push_page(&mut self, cpu: u32, page: &[u8], dropped: u64) {
        self.stats.pages += 1;
        let recs = match parse_page(&self.layout, page) {
            Ok(r) => r,
            Err(e) => {
                self.stats.bad += 1;
                self.error(cpu, None, format!("malformed page: {e}"));
                return;
            }
        };
        match recs.header().missed {
            Missed::None => {}
            Missed::Unknown => self.stats.lost_unknown_pages += 1,
            Missed::Count(n) => *self.stats.lost.entry(cpu).or_default() += n,
        }
        let missed = recs.header().missed;
        let page_ts = Nanos(recs.header().ts);
        let template = &self.template;
        let state = self.cpus.entry(cpu).or_insert_with(|| CpuLive {
            conv: template.clone(),
            queue: VecDeque::new(),
            last: None,
            dropped: 0,
            behind: None,
        });
        let tap_dropped = dropped.saturating_sub(state.dropped);
        state.dropped = state.dropped.max(dropped);
        let before = state.last;
        let mut first = None;
        let full = recs.header().commit + FULL_PAGE_SLACK + 16 >= page.len();
        let mut decoded = Vec::new();
        let mut bad = Vec::new();
        for r in recs {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    bad.push((None, format!("malformed record: {e}")));
                    break;
                }
            };
            let ts = Nanos(r.ts);
            first.get_or_insert(ts);
            if state.last.is_some_and(|prev| ts < prev) {
                bad.push((Some(ts), "record goes back in time on its CPU".to_string()));
                continue;
            }
            state.last = Some(ts);
            match state.conv.convert(argus_schema::Cpu(cpu), &r) {
                Ok(Some(d)) => decoded.push(d),
                Ok(None) => {}
                Err(e) => bad.push((Some(ts), format!("malformed record: {e}"))),
            }
        }
        state.behind = match (full, state.last) {
            (true, Some(last)) => Some((last, Instant::now())),
            _ => None,
        };
        self.stats.bad += bad.len() as u64;
        for (ts, m) in bad {
            self.error(cpu, ts, m);
        }
        if missed != Missed::None || tap_dropped > 0 {
            let from = before.unwrap_or(self.origin);
            let to = first.unwrap_or(page_ts);
            self.stats.tap_dropped += tap_dropped;
            let mut why = Vec::new();
            let events = match missed {
                Missed::Count(n) => {
                    why.push(format!("the kernel lost {n} events"));
                    Some(n)
                }
                Missed::Unknown => {
                    why.push("the kernel lost events (count unknown)".to_string());
                    None
                }
                Missed::None => None,
            };
            if tap_dropped > 0 {
                why.push(format!(
                    "{tap_dropped} pages were read but not decoded in time (they are in the raw ring only)"
                ));
            }
            self.add_gap(cpu, from, to, events, &why.join(" and "));
        }
        self.enqueue(cpu, decoded);
    }

    /// The watermark to release at, given `clock` (now − lag): the clock, held back to the
    /// last record of any CPU whose last page was full (its reader is behind: more records
    /// of that CPU are on their way), for at most [`MAX_HOLD`]. A CPU whose last page was
    /// partial had been read to the end, and an idle CPU sends nothing: neither holds the
    /// watermark.
    ///
    /// `job_behind`: the job itself has not caught up with the recorder (pages wait in the
    /// tap, or are being read back from the ring): the CPU's next records are among them, so
    /// the hold does not expire (a saturating load kept the job more than 5 s behind, and
    /// the expired holds made two million records late).
    pub fn watermark(&self, clock: Nanos, job_behind: bool) -> Nanos {
        self.cpus
            .values()
            .filter_map(|c| c.behind)
            .filter(|(_, at)| job_behind || at.elapsed() < MAX_HOLD)
            .map(|(ts, _)| ts)
            .fold(clock, Nanos::min)
    }

    /// Queues decoded records of `cpu` (in time order) for release; records at or before the
    /// watermark already released are late: dropped and counted.
    fn enqueue(&mut self, cpu: u32, decoded: Vec<Decoded>) {
        let released = self.released;
        let mut late = 0u64;
        let mut first_late = None;
        if let Some(state) = self.cpus.get_mut(&cpu) {
            for d in decoded {
                if released.is_some_and(|w| d.ts <= w) {
                    late += 1;
                    first_late.get_or_insert(d.ts);
                } else {
                    state.queue.push_back(d);
                }
            }
        }
        if late > 0 {
            self.stats.late += late;
            self.error(
                cpu,
                first_late,
                format!("{late} records arrived after the watermark had passed them: dropped"),
            );
        }
    }

    /// Releases every queued record with `ts ≤ watermark`, merged by `(ts, cpu)`, as numbered
    /// events appended to `out`. The watermark only moves forward.
    pub fn release(&mut self, watermark: Nanos, out: &mut Vec<Event>) {
        if self.released.is_some_and(|w| watermark <= w) {
            return;
        }
        let mut heap: BinaryHeap<Reverse<(Nanos, u32)>> = BinaryHeap::new();
        for (&cpu, st) in &self.cpus {
            if let Some(d) = st.queue.front() {
                if d.ts <= watermark {
                    heap.push(Reverse((d.ts, cpu)));
                }
            }
        }
        while let Some(Reverse((_, cpu))) = heap.pop() {
            let Some(st) = self.cpus.get_mut(&cpu) else {
                continue;
            };
            let Some(d) = st.queue.pop_front() else {
                continue;
            };
            if let Some(next) = st.queue.front() {
                if next.ts <= watermark {
                    heap.push(Reverse((next.ts, cpu)));
                }
            }
            if let Some(mut ev) = self.table.apply(d) {
                ev.seq = self.next_seq;
                self.next_seq += 1;
                self.stats.events += 1;
                out.push(ev);
            }
        }
        self.released = Some(watermark);
    }

    /// The largest queued time (to release everything at the end).
    pub fn max_queued(&self) -> Option<Nanos> {
        self.cpus
            .values()
            .filter_map(|c| c.queue.back().map(|d| d.ts))
            .max()
    }

    /// Records decoded but not yet released.
    pub fn queued(&self) -> usize {
        self.cpus.values().map(|c| c.queue.len()).sum()
    }

    /// The watermark released so far.
    pub fn released(&self) -> Option<Nanos> {
        self.released
    }

    /// Every thread known.
    pub fn threads(&self) -> Vec<ThreadInfo> {
        self.table.threads()
    }

    /// The error rows collected since the last call.
    pub fn take_errors(&mut self) -> Vec<ErrorRecord> {
        std::mem::take(&mut self.errors)
    }
}

// ───────────────────────────── dataflow generations ─────────────────────────────

/// The consolidated graph of a generation at an epoch boundary.
struct Captured {
    segments: Vec<argus_schema::Segment>,
    edges: Vec<CausalEdge>,
    spins: Vec<Spin>,
    local_epoch: u64,
    watermark: Nanos,
    check: std::result::Result<(), String>,
}

struct SnapRequest {
    min_local_epoch: u64,
    reply: Sender<Captured>,
}

struct Collector {
    segments: CollectionSink<argus_schema::Segment>,
    edges: CollectionSink<CausalEdge>,
    spins: CollectionSink<Spin>,
    done: Option<(u64, Nanos)>,
    dirty: bool,
    open: Arc<AtomicI64>,
    /// Set when an epoch changed the spins; published at its end.
    spins_changed: bool,
    live: Arc<LiveSpins>,
}

impl Collector {
    fn capture(&self) -> Captured {
        let check = [
            ("segments", self.segments.check()),
            ("edges", self.edges.check()),
            ("spins", self.spins.check()),
        ]
        .into_iter()
        .find_map(|(n, r)| {
            r.err()
                .map(|e| format!("the dataflow's {n} are inconsistent: {e}"))
        })
        .map_or(Ok(()), Err);
        let (local_epoch, watermark) = self.done.unwrap_or((0, Nanos(0)));
        Captured {
            segments: self.segments.contents(),
            edges: self.edges.contents(),
            spins: self.spins.contents(),
            local_epoch,
            watermark,
            check,
        }
    }

    fn serve(&self, pending: &mut Vec<SnapRequest>, closed: bool) {
        if self.dirty && !closed {
            return;
        }
        let at = self.done.map(|(e, _)| e);
        pending.retain(|r| {
            if closed || at.is_some_and(|e| e >= r.min_local_epoch) {
                let _ = r.reply.send(self.capture());
                false
            } else {
                true
            }
        });
    }
}

fn collect_live(out: Receiver<Message>, requests: Receiver<SnapRequest>, live: Arc<LiveSpins>) {
    let mut c = Collector {
        segments: CollectionSink::new("segments"),
        edges: CollectionSink::new("edges"),
        spins: CollectionSink::new("spins"),
        done: None,
        dirty: false,
        open: live.open.clone(),
        spins_changed: false,
        live,
    };
    let mut pending: Vec<SnapRequest> = Vec::new();
    let mut requests = Some(requests);
    let never = crossbeam_channel::never();
    loop {
        let req_rx = requests.as_ref().unwrap_or(&never);
        select! {
            recv(out) -> msg => match msg {
                Ok(Message::Updates { epoch, updates }) => {
                    c.dirty = true;
                    let mut segs = Vec::new();
                    let mut edges = Vec::new();
                    let mut spins = Vec::new();
                    for (u, d) in updates {
                        match u {
                            Update::Segment(s) => {
                                if s.end == EndCause::Open {
                                    c.open.fetch_add(d, Ordering::Relaxed);
                                }
                                segs.push((s, d))
                            }
                            Update::Edge(e) => edges.push((e, d)),
                            Update::Spin(s) => {
                                c.spins_changed = true;
                                spins.push((s, d))
                            }
                            // Other outputs (counters) are not part of the graph.
                            #[allow(unreachable_patterns)]
                            _ => {}
                        }
                    }
                    c.segments.apply(epoch, &mut segs.into_iter());
                    c.edges.apply(epoch, &mut edges.into_iter());
                    c.spins.apply(epoch, &mut spins.into_iter());
                }
                Ok(Message::EpochDone { epoch, watermark, .. }) => {
                    c.dirty = false;
                    c.done = Some((epoch.0, watermark));
                    if std::mem::take(&mut c.spins_changed) {
                        c.live.publish(c.spins.contents());
                    }
                    c.serve(&mut pending, false);
                }
                Err(_) => {
                    c.serve(&mut pending, true);
                    // Requests still arriving get the final state.
                    if let Some(rx) = requests.take() {
                        for r in rx.iter() {
                            let _ = r.reply.send(c.capture());
                        }
                    }
                    return;
                }
            },
            recv(req_rx) -> r => match r {
                Ok(r) => {
                    pending.push(r);
                    c.serve(&mut pending, false);
                }
                Err(_) => requests = None,
            },
        }
    }
}

/// A generation's spins as of its last completed epoch, shared with the main loop so a new
/// hang can trigger a snapshot at once (see `EarlySnapshots`).
struct LiveSpins {
    spins: std::sync::Mutex<Vec<Spin>>,
    /// Open segments (for the status line).
    open: Arc<AtomicI64>,
    /// Woken (`try_send`) whenever the spins change.
    notify: Sender<()>,
}

impl LiveSpins {
    fn publish(&self, spins: Vec<Spin>) {
        *lock(&self.spins) = spins;
        let _ = self.notify.try_send(());
    }

    fn get(&self) -> Vec<Spin> {
        lock(&self.spins).clone()
    }
}

/// One dataflow and its collector, fed from `first_epoch` (global) on.
struct Generation {
    id: u64,
    first_epoch: u64,
    start_ns: Nanos,
    input: Sender<Batch>,
    /// The input's other end, to discard what a dropped generation has not read yet.
    queued: Receiver<Batch>,
    requests: Sender<SnapRequest>,
    live: Arc<LiveSpins>,
    flow: JoinHandle<std::result::Result<(), argus_pipeline::dataflow::PipelineError>>,
    collector: JoinHandle<()>,
}

impl Generation {
    fn start(
        id: u64,
        cfg: &DataflowConfig,
        first_epoch: u64,
        start_ns: Nanos,
        notify: Sender<()>,
    ) -> Result<Self> {
        let (input, batch_rx) = crossbeam_channel::bounded::<Batch>(INPUT_EPOCHS);
        let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
        let (requests, req_rx) = crossbeam_channel::unbounded::<SnapRequest>();
        let dcfg = cfg.clone();
        let queued = batch_rx.clone();
        let flow = std::thread::Builder::new()
            .name(format!("argus-flow-g{id}"))
            .spawn(move || dataflow::run(&dcfg, batch_rx, out_tx))?;
        let live = Arc::new(LiveSpins {
            spins: std::sync::Mutex::new(Vec::new()),
            open: Arc::new(AtomicI64::new(0)),
            notify,
        });
        let live2 = live.clone();
        let collector = std::thread::Builder::new()
            .name(format!("argus-collect-g{id}"))
            .spawn(move || collect_live(out_rx, req_rx, live2))?;
        Ok(Generation {
            id,
            first_epoch,
            start_ns,
            input,
            queued,
            requests,
            live,
            flow,
            collector,
        })
    }

    /// Closes the input and waits for the dataflow (in the background when `background`).
    /// With `discard`, the batches it has not started are thrown away (nobody asks it for
    /// its graph any more), so it ends and frees its memory sooner under load.
    fn stop(self, background: bool, discard: bool) -> Result<()> {
        let Generation {
            input,
            queued,
            requests,
            flow,
            collector,
            id,
            ..
        } = self;
        drop(input);
        drop(requests);
        if discard {
            for _ in queued.try_iter() {}
        }
        drop(queued);
        let join = move || -> Result<()> {
            let r = flow
                .join()
                .map_err(|_| anyhow::anyhow!("dataflow generation {id} panicked"))?;
            let _ = collector.join();
            r.with_context(|| format!("dataflow generation {id}"))
        };
        if background {
            std::thread::Builder::new()
                .name(format!("argus-drop-g{id}"))
                .spawn(move || {
                    if let Err(e) = join() {
                        tracing::warn!("{e:#}");
                    }
                })?;
            Ok(())
        } else {
            join()
        }
    }
}

// ───────────────────────────── snapshots and hooks ─────────────────────────────

/// Which spins run the hook.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// Processes named by the user.
    pub pids: Vec<i32>,
    /// Names given by the user.
    pub comms: Vec<String>,
    /// Spins starting before this (an earlier run, across the unrecorded gap) never fire.
    pub since: Nanos,
}

/// The event-loop waits that mean "idle", not "hung", for the default watch.
fn is_event_loop_wait(nr: i32) -> bool {
    let name = argus_schema::syscalls::name(nr);
    matches!(
        name.as_str(),
        "poll" | "ppoll" | "select" | "pselect6" | "epoll_wait" | "epoll_pwait" | "epoll_pwait2"
    )
}

impl Watch {
    /// Whether `spin` is of a watched thread.
    pub fn watches(&self, spin: &Spin, threads: &HashMap<i32, &ThreadInfo>) -> bool {
        if spin.start_ns < self.since || !spin.tid.is_task() {
            return false;
        }
        let info = threads.get(&spin.tid.0);
        if self.pids.is_empty() && self.comms.is_empty() {
            return spin.tid.0 == spin.pid.0
                && spin.tid.0 > 0
                && !info.is_some_and(|t| t.kernel)
                && !is_event_loop_wait(spin.wait_syscall);
        }
        self.pids.contains(&spin.pid.0)
            || info.is_some_and(|t| {
                self.comms
                    .iter()
                    .any(|c| *c == t.comm || (*c == t.process && spin.tid.0 == spin.pid.0))
            })
    }
}

/// What a hook is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangNotice {
    /// The spin.
    pub spin: Spin,
    /// First report (else it grew).
    pub new: bool,
    /// Its duration as of the snapshot.
    pub duration_ns: u64,
}

/// Decides which spins to report: new ones, and known ones whose duration doubled since last
/// reported.
#[derive(Debug, Default)]
pub struct HangTracker {
    reported: HashMap<SegmentId, u64>,
}

impl HangTracker {
    /// What `s` would report now (an open spin lasts until `watermark`): `None` when it was
    /// reported and has not doubled since. The main loop asks this (without updating) to
    /// take a snapshot at once for a hang; the snapshot's [`HangTracker::update`] reports it.
    fn notice(&self, s: &Spin, watermark: Nanos) -> Option<HangNotice> {
        let d = if s.open {
            s.start_ns.until(watermark.max(s.end_ns))
        } else {
            s.duration_ns()
        };
        let new = match self.reported.get(&s.segment) {
            None => true,
            Some(&prev) if d >= prev.saturating_mul(2) => false,
            Some(_) => return None,
        };
        Some(HangNotice {
            spin: s.clone(),
            new,
            duration_ns: d,
        })
    }

    /// The notices for one snapshot's spins; an open spin lasts until `watermark`.
    pub fn update(
        &mut self,
        spins: &[Spin],
        watermark: Nanos,
        mut watched: impl FnMut(&Spin) -> bool,
    ) -> Vec<HangNotice> {
        let mut out = Vec::new();
        for s in spins.iter().filter(|s| watched(s)) {
            if let Some(n) = self.notice(s, watermark) {
                self.reported.insert(s.segment, n.duration_ns);
                out.push(n);
            }
        }
        // Forget spins that left the window.
        let live: std::collections::HashSet<SegmentId> = spins.iter().map(|s| s.segment).collect();
        self.reported.retain(|k, _| live.contains(k));
        out
    }
}

/// This job's own threads, every one seen so far: they appear in the records of the tasks
/// they switch with, and the recorder cannot always tell their process (a thread created
/// while the job runs may look like a process of its own), so the hang filter recognises
/// them here. The set only grows: snapshot writers and dataflow workers of earlier
/// generations have exited by the time a later snapshot names their spins.
fn own_threads() -> std::collections::HashSet<i32> {
    static SEEN: std::sync::Mutex<Option<std::collections::HashSet<i32>>> =
        std::sync::Mutex::new(None);
    let mut seen = lock(&SEEN);
    let set = seen.get_or_insert_with(Default::default);
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        set.extend(
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()),
        );
    }
    set.clone()
}

/// Whether `tid` is one of this job's threads: seen in `/proc/self/task` ([`own_threads`]),
/// of this process, or created by one of them (a thread that exited between two looks, or
/// a hook's shell), following creators up to 8 steps.
fn is_own(
    tid: i32,
    threads: &HashMap<i32, &ThreadInfo>,
    own: &std::collections::HashSet<i32>,
) -> bool {
    let me = std::process::id() as i32;
    let mut t = tid;
    for _ in 0..8 {
        if own.contains(&t) {
            return true;
        }
        let Some(info) = threads.get(&t) else {
            return false;
        };
        if info.pid.0 == me || untraced_own_name(info) {
            return true;
        }
        match info.parent {
            Some(p) if p.0 > 0 && p.0 != t => t = p.0,
            _ => return false,
        }
    }
    false
}

/// A thread whose creation the trace does not show (no creator, no process of its own
/// known: it was created by a thread the recorder excludes) named as the job names its
/// threads: one of ours that lived too briefly for [`own_threads`] to see it. With its own
/// events excluded, its last switch looks like a run or a wait that never ends.
fn untraced_own_name(info: &ThreadInfo) -> bool {
    info.parent.is_none()
        && info.pid.0 == info.tid.0
        && (info.comm.starts_with("argus-") || info.comm.starts_with("timely:"))
}

/// Whether `s` (an open spin lasts until `watermark`) overlaps a lost-events gap of the
/// live graph: a thread whose switch-out or wake-up fell in the gap looks running or
/// blocked for as long as the gap hides it, so such a spin is no evidence of a hang.
fn spans_gap(s: &Spin, watermark: Nanos, gaps: &GapSet) -> bool {
    let end = if s.open {
        watermark.max(s.end_ns)
    } else {
        s.end_ns
    };
    gaps.crosses(s.start_ns, end)
}

fn run_hook(cmd: &str, n: &HangNotice, snapshot: &Path) {
    let s = &n.spin;
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("ARGUS_HANG_PID", s.pid.0.to_string())
        .env("ARGUS_HANG_TID", s.tid.0.to_string())
        .env("ARGUS_HANG_CLASS", s.class.name())
        .env("ARGUS_HANG_SNAPSHOT", snapshot)
        .env("ARGUS_HANG_SEGMENT", s.segment.0.to_string())
        .env("ARGUS_HANG_DURATION_NS", n.duration_ns.to_string())
        .env("ARGUS_HANG_NEW", if n.new { "1" } else { "0" })
        .stdin(std::process::Stdio::null())
        .spawn();
    match child {
        Ok(mut child) => {
            // Reap it without waiting here.
            let _ = std::thread::Builder::new()
                .name("argus-hook".into())
                .spawn(move || child.wait());
        }
        Err(e) => eprintln!("argus start: cannot run --on-hang command: {e}"),
    }
}

/// The name of the snapshot of global epoch `e`.
pub fn snapshot_name(e: u64) -> String {
    format!("{e:010}")
}

/// Points `DIR/latest` at `snapshots/<name>` atomically (symlink + rename).
pub fn set_latest(dir: &Path, name: &str) -> Result<()> {
    let tmp = dir.join(".latest.tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(Path::new("snapshots").join(name), &tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let latest = dir.join("latest");
    std::fs::rename(&tmp, &latest).with_context(|| format!("replacing {}", latest.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(())
}

/// Complete snapshots under `DIR/snapshots`, oldest first.
pub fn list_snapshots(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join("snapshots"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    let epoch: u64 = name.parse().ok()?;
                    let p = e.path();
                    p.join(argus_sinks::MANIFEST_FILE)
                        .is_file()
                        .then_some((epoch, p))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Removes what a killed job left: hidden temporary and staged snapshot directories and
/// `.latest.tmp`.
fn clean_leftovers(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(".latest.tmp"));
    if let Ok(rd) = std::fs::read_dir(dir.join("snapshots")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.')
                && (name.contains(".tmp-") || name.contains(".old-") || name.contains("staged-"))
            {
                tracing::info!("removing {} left by an earlier run", e.path().display());
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// What the main loop asks of the snapshot thread.
enum SnapCmd {
    Events(Vec<Event>),
    Finish(Box<SnapJob>),
}

struct SnapJob {
    /// The global epoch: the snapshot's name.
    epoch: u64,
    /// Taken at once for a hang (else on the periodic cycle).
    early: bool,
    /// Another snapshot follows (not the last one).
    more: bool,
    reply: Receiver<Captured>,
    threads: Vec<ThreadInfo>,
    errors: Vec<ErrorRecord>,
    /// Lost-events gaps in the window: the segments they touched get error rows.
    gaps: Vec<LostRange>,
    info: SnapshotInfo,
    quiet: bool,
}

struct SnapshotThread {
    dir: PathBuf,
    writer: Option<SnapshotWriter>,
    /// Staging directories opened so far (their names).
    staged: u64,
    keep: usize,
    hook: Option<String>,
    watch: Watch,
    /// Shared with the main loop, which asks it whether a hang is due.
    tracker: Arc<std::sync::Mutex<HangTracker>>,
    delay: Duration,
    written: u64,
    /// Snapshots installed so far, for the main loop.
    installed: Arc<std::sync::atomic::AtomicU64>,
    /// Wakes the main loop once a snapshot is installed (a hang may be due now).
    notify: Sender<()>,
    /// The live graph's lost-events gaps (shared with the rules): spins across them are not
    /// reported.
    gaps: GapSet,
}

impl SnapshotThread {
    /// Opens the next snapshot's writer. Its name (the epoch) is only known when it is
    /// finished (a hang may take it early), so it is written under a hidden staging name
    /// and renamed to `snapshots/<epoch>` once complete.
    fn open(&mut self) -> Result<()> {
        let target = self.dir.join("snapshots").join(format!(
            ".staged-{}-{}",
            std::process::id(),
            self.staged
        ));
        self.staged += 1;
        self.writer = Some(
            SnapshotWriter::new(&target)
                .with_context(|| format!("creating snapshot {}", target.display()))?,
        );
        Ok(())
    }

    fn run(mut self, rx: Receiver<SnapCmd>) -> Result<u64> {
        for cmd in rx {
            match cmd {
                SnapCmd::Events(evs) => {
                    if let Some(w) = self.writer.as_mut() {
                        w.write_events(&evs).context("writing events.parquet")?;
                    }
                }
                SnapCmd::Finish(job) => self.finish(*job)?,
            }
        }
        Ok(self.written)
    }

    fn finish(&mut self, mut job: SnapJob) -> Result<()> {
        let mut writer = match self.writer.take() {
            Some(w) => w,
            None => {
                self.open()?;
                self.writer
                    .take()
                    .context("invariant: writer just opened")?
            }
        };
        let staged = writer.target().to_path_buf();
        let name = snapshot_name(job.epoch);
        let target = self.dir.join("snapshots").join(&name);
        let cap = job
            .reply
            .recv()
            .context("the dataflow collector stopped before the snapshot")?;
        if let Err(e) = &cap.check {
            bail!("{e}");
        }
        writer.write_segments(&cap.segments)?;
        writer.write_edges(&cap.edges)?;
        writer.write_spins(&cap.spins)?;
        writer.write_threads(&job.threads)?;
        let mut errors = job.errors;
        job.info.lost_ranges = job
            .gaps
            .iter()
            .map(|&(_, from, to, _)| (Nanos(from), Nanos(to)))
            .collect();
        if !job.gaps.is_empty() {
            // As `argus build` does: which threads' segments a gap touched.
            errors.extend(crate::gaps::touched(&cap.segments, &job.gaps));
        }
        writer.write_errors(&errors)?;
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let mut info = job.info;
        info.watermark_ns = cap.watermark.max(info.watermark_ns);
        info.trace_end_ns = Some(info.watermark_ns);
        let manifest = writer
            .finish(info)
            .with_context(|| format!("writing snapshot {}", target.display()))?;
        std::fs::rename(&staged, &target)
            .with_context(|| format!("renaming {} to {}", staged.display(), target.display()))?;
        set_latest(&self.dir, &name)?;
        self.written += 1;
        self.installed.fetch_add(1, Ordering::Release);
        tracing::info!(
            snapshot = %target.display(),
            local_epoch = cap.local_epoch,
            early = job.early,
            segments = manifest.counts.segments,
            edges = manifest.counts.edges,
            spins = manifest.counts.spins,
            "snapshot written"
        );
        let by_tid: HashMap<i32, &ThreadInfo> = job.threads.iter().map(|t| (t.tid.0, t)).collect();
        let own = own_threads();
        let watch = &self.watch;
        let gaps = &self.gaps;
        let mut in_gaps = 0u64;
        let notices = lock(&self.tracker).update(&cap.spins, cap.watermark, |s| {
            if is_own(s.tid.0, &by_tid, &own) || !watch.watches(s, &by_tid) {
                return false;
            }
            if spans_gap(s, cap.watermark, gaps) {
                in_gaps += 1;
                return false;
            }
            true
        });
        if in_gaps > 0 && !job.quiet {
            eprintln!(
                "argus start: {in_gaps} candidate hang(s) not reported: they span lost-events gaps of the live graph (pages the job could not decode in time; the ring in {} has them)",
                self.dir.join("trace").display()
            );
        }
        for n in &notices {
            let who = argus_schema::describe_thread(&job.threads, n.spin.tid);
            if !job.quiet {
                eprintln!(
                    "argus start: {} hang: {who}: {} {:.3} s{} (snapshot {}{})",
                    if n.new { "new" } else { "growing" },
                    n.spin.class.name(),
                    n.duration_ns as f64 / 1e9,
                    if n.spin.open { ", still going" } else { "" },
                    target.display(),
                    if job.early { ", taken at once" } else { "" },
                );
            }
            if let Some(cmd) = &self.hook {
                run_hook(cmd, n, &target);
            }
        }
        // Keep the newest `keep` (the one just written is among them).
        let all = list_snapshots(&self.dir);
        if all.len() > self.keep {
            for (_, p) in &all[..all.len() - self.keep] {
                let _ = std::fs::remove_dir_all(p);
            }
        }
        if job.more {
            self.open()?;
        }
        let _ = self.notify.try_send(());
        Ok(())
    }
}

/// What every snapshot request carries besides the graph.
struct SnapContext {
    sources: Vec<PathBuf>,
    live_start: Nanos,
    threshold_ns: u64,
    workers: u32,
    quiet: bool,
}

impl SnapContext {
    /// Asks the oldest generation for its graph and the snapshot thread to write snapshot
    /// `epoch` with it.
    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        job: &Job<'_>,
        merge: &LiveMerge,
        errors: Vec<ErrorRecord>,
        epoch: u64,
        early: bool,
        more: bool,
        tx: &Sender<SnapCmd>,
    ) -> Result<()> {
        let reply = job.request()?;
        let oldest = job.gens.first().map_or(self.live_start, |g| g.start_ns);
        let cmd = SnapJob {
            epoch,
            early,
            more,
            reply,
            threads: merge.threads(),
            errors,
            gaps: merge.gaps_since(oldest),
            info: SnapshotInfo {
                sources: self.sources.clone(),
                trace_start_ns: Some(oldest),
                trace_end_ns: Some(job.watermark),
                epoch: argus_schema::Epoch(epoch),
                watermark_ns: job.watermark,
                lost_events: merge.stats.lost.clone(),
                unknown_events: 0,
                threshold_ns: self.threshold_ns,
                workers: self.workers,
                ..SnapshotInfo::default()
            },
            quiet: self.quiet,
        };
        tx.send(SnapCmd::Finish(Box::new(cmd)))
            .map_err(|_| anyhow::anyhow!("the snapshot thread stopped"))
    }
}

/// When a hang earns a snapshot out of the periodic cycle: a watched thread's spin that
/// the hook has not been told of (new, or doubled since), in the oldest generation (the one
/// snapshots come from), while no snapshot is being written, at most one per half period.
struct EarlySnapshots {
    watch: Watch,
    tracker: Arc<std::sync::Mutex<HangTracker>>,
    installed: Arc<std::sync::atomic::AtomicU64>,
    /// Snapshots requested so far.
    requested: u64,
    /// The epoch of the last snapshot requested (names must grow).
    last_epoch: Option<u64>,
    /// When the last early one was requested.
    last_at: Option<Instant>,
    min_gap: Duration,
    /// Spins found not watched (so the thread table is not consulted for them again).
    unwatched: std::collections::HashSet<SegmentId>,
}

impl EarlySnapshots {
    fn taken(&mut self, epoch: u64, early: bool) {
        self.requested += 1;
        self.last_epoch = Some(epoch);
        if early {
            self.last_at = Some(Instant::now());
        }
    }

    /// Whether a snapshot requested is not installed yet.
    fn writing(&self) -> bool {
        self.installed.load(Ordering::Acquire) < self.requested
    }

    fn due(&mut self, job: &Job<'_>, merge: &LiveMerge) -> bool {
        if self.writing()
            || self.last_epoch.is_some_and(|e| job.epoch <= e)
            || self.last_at.is_some_and(|t| t.elapsed() < self.min_gap)
        {
            return false;
        }
        let Some(g) = job.gens.first() else {
            return false;
        };
        let spins = g.live.get();
        let present: std::collections::HashSet<SegmentId> =
            spins.iter().map(|s| s.segment).collect();
        self.unwatched.retain(|seg| present.contains(seg));
        let tracker = lock(&self.tracker);
        let candidates: Vec<&Spin> = spins
            .iter()
            .filter(|s| {
                !self.unwatched.contains(&s.segment) && tracker.notice(s, job.watermark).is_some()
            })
            .collect();
        drop(tracker);
        if candidates.is_empty() {
            return false;
        }
        let threads = merge.threads();
        let by_tid: HashMap<i32, &ThreadInfo> = threads.iter().map(|t| (t.tid.0, t)).collect();
        let own = own_threads();
        let gaps = &job.cfg.dataflow.rules.gaps;
        let mut due = false;
        for s in candidates {
            if !is_own(s.tid.0, &by_tid, &own)
                && self.watch.watches(s, &by_tid)
                && !spans_gap(s, job.watermark, gaps)
            {
                due = true;
            } else {
                self.unwatched.insert(s.segment);
            }
        }
        due
    }
}

/// Locks a mutex, whether or not a thread panicked holding it.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ───────────────────────────── the job ─────────────────────────────

/// Moves an earlier run's ring aside; returns it when it holds a trace.
fn take_previous_trace(dir: &Path) -> Result<Option<PathBuf>> {
    let trace = dir.join("trace");
    let non_empty = std::fs::read_dir(&trace)
        .map(|mut rd| rd.next().is_some())
        .unwrap_or(false);
    if !non_empty {
        return Ok(None);
    }
    let prev = dir.join("trace.prev");
    if prev.exists() {
        std::fs::remove_dir_all(&prev).with_context(|| format!("removing {}", prev.display()))?;
    }
    std::fs::rename(&trace, &prev)
        .with_context(|| format!("moving {} to {}", trace.display(), prev.display()))?;
    Ok(prev.join("meta.json").is_file().then_some(prev))
}

/// The state of the running job.
struct Job<'a> {
    cfg: &'a StartConfig,
    gens: Vec<Generation>,
    next_gen: u64,
    /// Batches sent so far: the next batch is this global epoch.
    epoch: u64,
    /// Each generation's next local epoch is `epoch - first_epoch`.
    watermark: Nanos,
    /// Given to every generation's collector: woken when its spins change.
    notify: Sender<()>,
}

impl Job<'_> {
    fn send(&mut self, events: Vec<Event>, watermark: Nanos) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        let n = self.gens.len();
        let mut events = Some(events);
        for (i, g) in self.gens.iter().enumerate() {
            let evs = if i + 1 == n {
                events.take().unwrap_or_default()
            } else {
                events.clone().unwrap_or_default()
            };
            g.input
                .send(Batch {
                    events: evs,
                    watermark: self.watermark,
                })
                .map_err(|_| anyhow::anyhow!("dataflow generation {} stopped", g.id))?;
        }
        self.epoch += 1;
        Ok(())
    }

    /// Starts and drops generations so the oldest covers between `retain` and 2×`retain`.
    /// `idle`: no snapshot is being taken (so a dropped generation's unread input can go).
    fn rotate(&mut self, idle: bool) -> Result<()> {
        let retain = self.cfg.retain.as_nanos() as u64;
        let age = |g: &Generation, w: Nanos| g.start_ns.until(w);
        if self
            .gens
            .last()
            .is_some_and(|g| age(g, self.watermark) >= retain)
        {
            let g = Generation::start(
                self.next_gen,
                &self.cfg.dataflow,
                self.epoch,
                self.watermark,
                self.notify.clone(),
            )?;
            tracing::info!(generation = g.id, "new dataflow generation");
            self.next_gen += 1;
            self.gens.push(g);
        }
        while self.gens.len() > 1 && age(&self.gens[1], self.watermark) >= retain {
            let old = self.gens.remove(0);
            tracing::info!(
                generation = old.id,
                "dropping the oldest dataflow generation"
            );
            old.stop(true, idle)?;
        }
        Ok(())
    }

    /// Asks the oldest generation for its state once it has done the last epoch sent.
    fn request(&self) -> Result<Receiver<Captured>> {
        let g = self.gens.first().context("invariant: a generation runs")?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        g.requests
            .send(SnapRequest {
                min_local_epoch: (self.epoch - g.first_epoch).saturating_sub(1),
                reply: tx,
            })
            .map_err(|_| anyhow::anyhow!("dataflow generation {} stopped", g.id))?;
        Ok(rx)
    }

    fn open_segments(&self) -> i64 {
        self.gens
            .first()
            .map_or(0, |g| g.live.open.load(Ordering::Relaxed))
    }
}

/// What replaying an earlier run's ring fed the job.
struct Replayed {
    /// Events fed.
    events: u64,
    /// The time of the first and of the last.
    first: Option<Nanos>,
    last: Option<Nanos>,
    /// Its lost-events gaps (already in the rules' gaps).
    gaps: Vec<LostRange>,
}

/// Replays the last `retain` of an earlier run's ring into the job, its lost-events gaps
/// into the rules' gaps first.
fn replay_previous(job: &mut Job<'_>, prev: &Path) -> Result<Replayed> {
    let reader = TraceReader::open(prev).with_context(|| format!("opening {}", prev.display()))?;
    let mut gaps = Vec::new();
    for (&cpu, ranges) in &reader.meta_ext().lost_ranges {
        for g in ranges {
            job.cfg
                .dataflow
                .rules
                .gaps
                .add(Nanos(g.from_ns), Nanos(g.to_ns));
            gaps.push((cpu, g.from_ns, g.to_ns, g.events));
        }
    }
    let mut events = reader.events();
    let mut batch = Vec::with_capacity(REPLAY_BATCH);
    // Two passes would re-decode; keep the tail window instead (bounded by `retain`): events
    // come in time order, so what falls out of the window leaves at the front.
    let mut all: VecDeque<Event> = VecDeque::new();
    let retain = job.cfg.retain.as_nanos() as u64;
    let mut errors = 0u64;
    for r in &mut events {
        match r {
            Ok(ev) => {
                let cut = ev.ts.0.saturating_sub(retain);
                while all.front().is_some_and(|e| e.ts.0 < cut) {
                    all.pop_front();
                }
                all.push_back(ev);
            }
            Err(e) => {
                errors += 1;
                if errors == 1 {
                    tracing::warn!("{}: {e}; continuing", prev.display());
                }
            }
        }
    }
    let n = all.len() as u64;
    let first = all.front().map(|e| e.ts);
    let last = all.back().map(|e| e.ts);
    for (i, mut ev) in all.into_iter().enumerate() {
        ev.seq = i as u64;
        batch.push(ev);
        if batch.len() >= REPLAY_BATCH {
            let w = batch.last().map_or(Nanos(0), |e: &Event| e.ts);
            job.send(std::mem::take(&mut batch), w)?;
        }
    }
    if !batch.is_empty() {
        let w = batch.last().map_or(Nanos(0), |e: &Event| e.ts);
        job.send(batch, w)?;
    }
    let _ = events.finish();
    Ok(Replayed {
        events: n,
        first,
        last,
        gaps,
    })
}

/// The live trace directory's formats and `/proc` table (what `TraceReader::open` reads,
/// without its warning about a trace still being recorded).
fn live_formats(dir: &Path) -> Result<(FormatSet, Vec<ProcEntry>)> {
    let fdir = argus_ingest::tracedir::formats_dir(dir);
    let hp = fdir.join("header_page");
    let text = std::fs::read_to_string(&hp).with_context(|| format!("reading {}", hp.display()))?;
    let header_page =
        HeaderPage::parse(&text).with_context(|| format!("parsing {}", hp.display()))?;
    let events = fdir.join("events");
    let mut formats =
        FormatSet::load_dir(&events).with_context(|| format!("reading {}", events.display()))?;
    formats.header_page = header_page;
    let proc_path = argus_ingest::tracedir::proc_path(dir);
    let procs = match std::fs::read(&proc_path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("parsing {}", proc_path.display()))?,
        Err(e) => {
            tracing::warn!("{}: {e}; threads start unnamed", proc_path.display());
            Vec::new()
        }
    };
    Ok((formats, procs))
}

/// A tapped page: the CPU and the page bytes.
type Tapped = argus_ingest::linux::TappedPage;

/// Runs the job until the recorder stops (signal, `--duration`).
pub fn run(cfg: &StartConfig, quiet: bool) -> Result<u8> {
    // This run's own gap set: the merge adds to it, every generation's rules read it.
    let mut owned = cfg.clone();
    owned.dataflow.rules.gaps = GapSet::new();
    let cfg = &owned;
    std::fs::create_dir_all(cfg.dir.join("snapshots"))
        .with_context(|| format!("creating {}", cfg.dir.display()))?;
    clean_leftovers(&cfg.dir);
    let prev = take_previous_trace(&cfg.dir)?;
    let first_epoch = list_snapshots(&cfg.dir).last().map_or(0, |(e, _)| e + 1);
    let ticks_per_snapshot = (cfg.snapshot_every.as_nanos() / TICK.as_nanos()).max(1) as u64;

    // The recorder, tapping its pages to us.
    let (tap_tx, tap_rx) = crossbeam_channel::bounded::<Tapped>(TAP_CAPACITY);
    let trace_dir = cfg.dir.join("trace");
    let mut rcfg = argus_ingest::linux::RecordConfig::new(&trace_dir);
    rcfg.duration = cfg.duration;
    rcfg.buffer_size_kb = cfg.buffer_kb;
    rcfg.drain_priority.priority = cfg.drain_priority;
    rcfg.handle_signals = true;
    // The ring on disk is at most a second behind, even at low event rates: the live graph
    // reads back from it what the tap dropped (`catchup.rs`).
    rcfg.flush_interval = Some(cfg.snapshot_every.min(Duration::from_secs(1)));
    rcfg.tap = Some(tap_tx);
    let recording = argus_ingest::linux::Recorder::new(rcfg)
        .start()
        .with_context(|| format!("recording into {}", trace_dir.display()))?;
    // The job's own threads, looked at every 20 ms for the hang filter (`own_threads`);
    // briefer ones are recognised by their names (`untraced_own_name`).
    // Above the job's nice value, so a loaded machine does not starve it.
    std::thread::Builder::new()
        .name("argus-self".into())
        .spawn(|| {
            let _ = argus_ingest::linux::set_thread_nice(-5);
            loop {
                let _ = own_threads();
                std::thread::sleep(Duration::from_millis(20));
            }
        })?;
    // From here on every thread this one starts (decoding, dataflow generations, snapshot
    // writers) inherits the job's nice value; the recorder's threads already run.
    let set = match cfg.nice {
        JobPriority::Idle => argus_ingest::linux::set_thread_sched_idle(),
        JobPriority::Nice(0) => Ok(()),
        JobPriority::Nice(n) => argus_ingest::linux::set_thread_nice(n),
    };
    if let Err(e) = set {
        eprintln!(
            "argus start: warning: cannot set the job's priority ({}): {e}",
            cfg.nice
        );
    }
    let live_start = Nanos(monotonic_ns());
    let marker = recording.marker_path().to_path_buf();
    let recorder = std::thread::Builder::new()
        .name("argus-start-rec".into())
        .spawn(move || recording.wait())?;
    if !quiet {
        eprintln!(
            "argus start: recording into {} and snapshotting every {:.1} s into {} (retaining {:.0} s); markers: {}",
            trace_dir.display(),
            cfg.snapshot_every.as_secs_f64(),
            cfg.dir.join("snapshots").display(),
            cfg.retain.as_secs_f64(),
            marker.display()
        );
    }
    let (formats, procs) = live_formats(&trace_dir)?;
    let mut catchup = {
        let meta: serde_json::Value = std::fs::read(trace_dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .with_context(|| format!("reading {}", trace_dir.join("meta.json").display()))?;
        let page_size = meta["page_size"].as_u64().unwrap_or(4096) as usize;
        let chunk_pages = meta["ring"]["chunk_pages"]
            .as_u64()
            .unwrap_or(u64::from(argus_ingest::linux::DEFAULT_CHUNK_PAGES));
        crate::catchup::CatchUp::new(&trace_dir, page_size, chunk_pages)
    };

    // Collectors (spins changed) and the snapshot thread (a snapshot installed) wake the
    // main loop to check for a hang that should be snapshotted at once.
    let (notify, woken) = crossbeam_channel::bounded::<()>(1);
    let mut job = Job {
        cfg,
        gens: Vec::new(),
        next_gen: 1,
        epoch: first_epoch,
        watermark: Nanos(0),
        notify: notify.clone(),
    };
    job.gens.push(Generation::start(
        0,
        &cfg.dataflow,
        first_epoch,
        Nanos(0),
        notify.clone(),
    )?);
    let replayed = match &prev {
        Some(p) => {
            let r = replay_previous(&mut job, p)?;
            if !quiet {
                eprintln!(
                    "argus start: resumed {} events of the last {:.0} s from {}",
                    r.events,
                    cfg.retain.as_secs_f64(),
                    p.display()
                );
            }
            Some(r)
        }
        None => None,
    };
    if let Some(g) = job.gens.first_mut() {
        g.start_ns = replayed
            .as_ref()
            .and_then(|r| r.first)
            .unwrap_or(live_start);
    }
    let mut merge = LiveMerge::new(&formats, &procs, replayed.as_ref().map_or(0, |r| r.events))?;
    merge.track_gaps(cfg.dataflow.rules.gaps.clone(), live_start);
    if let Some(r) = &replayed {
        // The previous run's gaps are in the rules already; these name them in snapshots.
        for &(cpu, from, to, events) in &r.gaps {
            merge.add_gap(
                cpu,
                Nanos(from),
                Nanos(to),
                events,
                "the previous run's kernel lost events",
            );
        }
        // Nothing was recorded between the runs: no edge across that stretch either.
        if let Some(last) = r.last {
            cfg.dataflow.rules.gaps.add(last, live_start);
        }
    }

    let (snap_tx, snap_rx) = crossbeam_channel::bounded::<SnapCmd>(SNAPSHOT_BACKLOG);
    let mut next_snapshot = job.epoch + ticks_per_snapshot;
    let watch = Watch {
        pids: cfg.watch_pids.clone(),
        comms: cfg.watch_comms.clone(),
        since: live_start,
    };
    let tracker = Arc::new(std::sync::Mutex::new(HangTracker::default()));
    let installed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut snap_thread = SnapshotThread {
        dir: cfg.dir.clone(),
        writer: None,
        staged: 0,
        keep: cfg.keep,
        hook: cfg.on_hang.clone(),
        watch: watch.clone(),
        tracker: tracker.clone(),
        delay: cfg.snapshot_delay,
        written: 0,
        installed: installed.clone(),
        notify: notify.clone(),
        gaps: cfg.dataflow.rules.gaps.clone(),
    };
    drop(notify);
    snap_thread.open()?;
    let snapshots = std::thread::Builder::new()
        .name("argus-snapshot".into())
        .spawn(move || snap_thread.run(snap_rx))?;
    let mut early = EarlySnapshots {
        watch,
        tracker,
        installed,
        requested: 0,
        last_epoch: None,
        last_at: None,
        min_gap: cfg.snapshot_every / 2,
        unwatched: std::collections::HashSet::new(),
    };
    let snap = SnapContext {
        sources: vec![trace_dir.clone()],
        live_start,
        threshold_ns: cfg.dataflow.rules.spin_threshold_ns,
        workers: cfg.dataflow.workers as u32,
        quiet,
    };

    let mut status = RateLimit::new(cfg.status_every);
    let mut status_events = 0u64;
    let mut next_tick = Instant::now() + TICK;
    let mut errors: Vec<ErrorRecord> = Vec::new();
    let mut closed = false;
    let mut skipped = 0u64;
    let mut result: Result<()> = Ok(());
    while !closed {
        // Decode pages as they come until the tick, or until woken to check for a hang.
        let mut tick = false;
        // Sleep until the tick (or until woken to check for a hang), then decode what the
        // tap holds in one go. Waiting on the tap instead woke the job for every page:
        // ~10k context switches a second under the saturating load, each taking a CPU from
        // the load (the job's CPU time is small; its wake-ups are not).
        let now = Instant::now();
        if now < next_tick {
            select! {
                recv(woken) -> _ => {}
                default(next_tick - now) => tick = true,
            }
        } else {
            tick = true;
        }
        if tick {
            next_tick += TICK;
            if Instant::now() > next_tick {
                next_tick = Instant::now() + TICK;
            }
            // Whatever is already tapped goes in before the watermark moves, and what the
            // tap dropped is read back from the ring. Only what is there now: on a saturated
            // machine the tap refills as fast as it is read, and draining it to empty held
            // the tick (and every release) off for the whole load, queueing millions of
            // decoded records.
            let tapped_now = tap_rx.len();
            for _ in 0..=tapped_now {
                match tap_rx.try_recv() {
                    Ok(p) => {
                        catchup.push(p, &mut |cpu, page, lost| merge.push_page(cpu, page, lost))
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            if closed {
                // The recorder has ended: every chunk is written.
                catchup.finish(&mut |cpu, page, lost| merge.push_page(cpu, page, lost));
            } else {
                catchup.poll(&mut |cpu, page, lost| merge.push_page(cpu, page, lost));
            }
            let clock = Nanos(monotonic_ns().saturating_sub(cfg.lag.as_nanos() as u64));
            let watermark = if closed {
                merge.max_queued().map_or(clock, |m| m.max(clock))
            } else {
                // Not past a CPU still being read back from the ring either.
                let frontier = catchup.frontier();
                let held = frontier.map_or(clock, |f| clock.min(Nanos(f)));
                merge
                    .watermark(held, frontier.is_some() || !tap_rx.is_empty())
                    .max(merge.released().unwrap_or(Nanos(0)))
            };
            let mut events = Vec::new();
            merge.release(watermark, &mut events);
            status_events += events.len() as u64;
            errors.extend(merge.take_errors());
            errors.truncate(MAX_ERROR_ROWS);
            if !events.is_empty() && snap_tx.send(SnapCmd::Events(events.clone())).is_err() {
                result = Err(anyhow::anyhow!("the snapshot thread stopped"));
                break;
            }
            if let Err(e) = job.send(events, watermark) {
                result = Err(e);
                break;
            }
            if closed {
                // Pad to the planned epoch so the last snapshot keeps its name.
                while job.epoch < next_snapshot {
                    if let Err(e) = job.send(Vec::new(), watermark) {
                        result = Err(e);
                        break;
                    }
                }
            }
            if job.epoch >= next_snapshot && !closed && early.writing() {
                // The previous snapshot is still being written: skip this one rather than
                // queue a copy of the graph behind it (the next one holds both periods'
                // events).
                next_snapshot += ticks_per_snapshot;
                skipped += 1;
            }
            if job.epoch >= next_snapshot {
                let epoch = next_snapshot;
                next_snapshot += ticks_per_snapshot;
                let errs = std::mem::take(&mut errors);
                let r = snap.request(&job, &merge, errs, epoch, false, !closed, &snap_tx);
                if let Err(e) = r {
                    result = Err(e);
                    break;
                }
                early.taken(epoch, false);
            }
        }
        // A watched hang that is new, or grew, since the last snapshot: snapshot it now
        // rather than at the next period.
        if !closed && job.epoch < next_snapshot && early.due(&job, &merge) {
            let epoch = job.epoch;
            let errs = std::mem::take(&mut errors);
            if let Err(e) = snap.request(&job, &merge, errs, epoch, true, true, &snap_tx) {
                result = Err(e);
                break;
            }
            early.taken(epoch, true);
            if !quiet {
                eprintln!(
                    "argus start: a watched thread's hang appeared or grew: snapshot {} taken at once",
                    snapshot_name(epoch)
                );
            }
        }
        if !tick {
            continue;
        }
        if let Err(e) = job.rotate(!early.writing()) {
            result = Err(e);
            break;
        }
        if let Some(elapsed) = status.ready(Instant::now()) {
            if !quiet && !elapsed.is_zero() {
                let lag = monotonic_ns().saturating_sub(merge.released().map_or(0, |w| w.0));
                let s = &merge.stats;
                eprintln!(
                    "argus start: {:.0} events/s, lag {:.2} s, {} open segments, lost {} (kernel {}, late {}, malformed {}), {} lost-events gaps, {} pages + {} records waiting, {} generation(s){}",
                    status_events as f64 / elapsed.as_secs_f64(),
                    lag as f64 / 1e9,
                    job.open_segments(),
                    s.lost_total(),
                    s.lost.values().sum::<u64>(),
                    s.late,
                    s.bad,
                    s.gaps,
                    tap_rx.len(),
                    merge.queued(),
                    job.gens.len(),
                    if skipped > 0 {
                        format!(", {skipped} snapshots skipped (the previous one was still being written)")
                    } else {
                        String::new()
                    },
                );
            }
            status_events = 0;
        }
    }
    drop(snap_tx);
    let rec_summary = recorder
        .join()
        .map_err(|_| anyhow::anyhow!("the recorder thread panicked"))?;
    let gens = std::mem::take(&mut job.gens);
    for g in gens {
        if let Err(e) = g.stop(false, false) {
            result = result.and(Err(e));
        }
    }
    let written = snapshots
        .join()
        .map_err(|_| anyhow::anyhow!("the snapshot thread panicked"))?;
    let rec_summary =
        rec_summary.with_context(|| format!("recording into {}", trace_dir.display()))?;
    let written = written?;
    result?;
    let kernel_lost = rec_summary.lost_total();
    let tap_dropped: u64 = rec_summary.cpus.values().map(|c| c.tap_dropped).sum();
    if tap_dropped > 0 && !quiet {
        eprintln!(
            "argus start: {tap_dropped} pages were read faster than the job decoded them: {} read back from the ring in {}, {} not (gaps in the live graph; {} of them skipped because the job fell too far behind)",
            catchup.recovered,
            trace_dir.display(),
            catchup.unrecoverable,
            catchup.skipped
        );
    }
    if !quiet {
        let s = &merge.stats;
        eprintln!(
            "argus start: stopped ({:?}): {} events, {} snapshots, latest {}; lost {} events (kernel {}, late {}, malformed {})",
            rec_summary.stop_reason,
            s.events,
            written,
            cfg.dir.join("latest").display(),
            kernel_lost.max(s.lost.values().sum::<u64>()) + s.late + s.bad,
            kernel_lost.max(s.lost.values().sum::<u64>()),
            s.late,
            s.bad,
        );
    }
    Ok(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::{Pid, SpinClass, Tid};

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("10d").is_err());
        assert!(parse_duration("-1m").is_err());
        assert!(parse_duration("m").is_err());
    }

    fn spin(seg: u64, tid: i32, pid: i32, start: u64, end: u64) -> Spin {
        Spin {
            segment: SegmentId(seg),
            last: SegmentId(seg),
            tid: Tid(tid),
            pid: Pid(pid),
            class: SpinClass::LongWait,
            start_ns: Nanos(start),
            end_ns: Nanos(end),
            open: true,
            on_cpu_ns: 0,
            wait_ns: end - start,
            segments: 1,
            wait_syscall: 202,
            timeouts: 0,
        }
    }

    #[test]
    fn the_jobs_own_threads_are_known_after_they_exit_and_through_their_creators() {
        // A thread of this process that has exited by the next look is still known.
        let gone = std::thread::spawn(|| {
            let _ = own_threads();
            // SAFETY: gettid has no preconditions.
            unsafe { libc::gettid() }
        })
        .join()
        .unwrap();
        let own = own_threads();
        assert!(own.contains(&gone));
        let info = |tid: i32, pid: i32, parent: Option<i32>| ThreadInfo {
            tid: Tid(tid),
            pid: argus_schema::Pid(pid),
            comm: "x".into(),
            process: "x".into(),
            parent: parent.map(Tid),
            start_ns: None,
            exit_ns: None,
            kernel: false,
        };
        // 9_000_001: created by one of ours, never seen in /proc, recorded as its own
        // process; 9_000_002: a child of that; 9_000_003: a stranger.
        let me = std::process::id() as i32;
        let rows = [
            info(9_000_001, 9_000_001, Some(gone)),
            info(9_000_002, 9_000_002, Some(9_000_001)),
            info(9_000_003, 9_000_003, Some(1)),
            info(9_000_004, me, None),
        ];
        let by_tid: HashMap<i32, &ThreadInfo> = rows.iter().map(|t| (t.tid.0, t)).collect();
        assert!(is_own(9_000_001, &by_tid, &own));
        assert!(is_own(9_000_002, &by_tid, &own));
        assert!(!is_own(9_000_003, &by_tid, &own));
        assert!(is_own(9_000_004, &by_tid, &own));
        assert!(!is_own(9_000_005, &by_tid, &own));
        // One of ours too brief to be seen in /proc: untraced creation, our naming.
        let brief = ThreadInfo {
            comm: "argus-write-eve".into(),
            ..info(9_000_006, 9_000_006, None)
        };
        let named = ThreadInfo {
            comm: "argus-write-eve".into(),
            ..info(9_000_007, 9_000_007, Some(1))
        };
        let by_tid: HashMap<i32, &ThreadInfo> = [(9_000_006, &brief), (9_000_007, &named)]
            .into_iter()
            .collect();
        assert!(is_own(9_000_006, &by_tid, &own));
        assert!(
            !is_own(9_000_007, &by_tid, &own),
            "created by a traced stranger"
        );
    }

    #[test]
    fn hangs_are_reported_when_new_and_when_doubled() {
        let mut t = HangTracker::default();
        let all = |_: &Spin| true;
        let w = Nanos(0);
        let n = t.update(&[spin(1, 10, 10, 0, 2_500)], w, all);
        assert_eq!(n.len(), 1);
        assert!(n[0].new);
        assert!(t.update(&[spin(1, 10, 10, 0, 4_000)], w, all).is_empty());
        let n = t.update(&[spin(1, 10, 10, 0, 5_000)], w, all);
        assert_eq!((n.len(), n[0].new, n[0].duration_ns), (1, false, 5_000));
        // An open spin lasts until the watermark, whatever its last record.
        let n = t.update(&[spin(1, 10, 10, 0, 5_000)], Nanos(10_000), all);
        assert_eq!(n[0].duration_ns, 10_000);
        // Gone from the window: forgotten, so it would be new again.
        assert!(t.update(&[], w, all).is_empty());
        assert!(t.update(&[spin(1, 10, 10, 0, 5_000)], w, all)[0].new);
    }

    #[test]
    fn a_hang_is_due_for_an_early_snapshot_until_the_snapshot_reports_it() {
        let mut t = HangTracker::default();
        let s = spin(1, 10, 10, 0, 2_500);
        assert!(t.notice(&s, Nanos(2_500)).is_some(), "new: due");
        assert!(
            t.notice(&s, Nanos(2_500)).is_some(),
            "asking does not report it"
        );
        t.update(std::slice::from_ref(&s), Nanos(2_500), |_| true);
        assert!(
            t.notice(&s, Nanos(4_000)).is_none(),
            "reported, not doubled"
        );
        let n = t.notice(&s, Nanos(5_000)).unwrap();
        assert_eq!((n.new, n.duration_ns), (false, 5_000), "an open spin grows");
    }

    #[test]
    fn leftovers_of_a_killed_job_are_removed_and_snapshots_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let snaps = tmp.path().join("snapshots");
        for name in [
            ".staged-7-3",
            "..staged-7-4.tmp-7-9",
            ".0000000010.old-7-1",
            "0000000005",
        ] {
            std::fs::create_dir_all(snaps.join(name)).unwrap();
        }
        std::fs::write(snaps.join("0000000005").join("manifest.json"), "{}").unwrap();
        clean_leftovers(tmp.path());
        let left: Vec<String> = std::fs::read_dir(&snaps)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["0000000005".to_string()]);
        assert_eq!(list_snapshots(tmp.path()).len(), 1);
    }

    #[test]
    fn the_default_watch_is_main_threads_not_idle_in_their_event_loop() {
        let w = Watch::default();
        let threads = HashMap::new();
        assert!(w.watches(&spin(1, 10, 10, 0, 1), &threads));
        assert!(!w.watches(&spin(1, 11, 10, 0, 1), &threads), "not main");
        let mut s = spin(1, 10, 10, 0, 1);
        s.wait_syscall = argus_schema::syscalls::number("epoll_wait").unwrap();
        assert!(!w.watches(&s, &threads), "idle in epoll");
        let w = Watch {
            since: Nanos(5),
            ..Watch::default()
        };
        assert!(
            !w.watches(&spin(1, 10, 10, 0, 9), &threads),
            "before the run"
        );
        let w = Watch {
            pids: vec![20],
            ..Watch::default()
        };
        assert!(w.watches(&spin(1, 21, 20, 0, 1), &threads));
        assert!(!w.watches(&spin(1, 10, 10, 0, 1), &threads));
    }

    /// One 4 KiB page of `print`-free raw records is hard to build by hand; the merge's
    /// ordering and watermark rules are tested on its release path with decoded records.
    fn decoded(ts: u64, cpu: u32, tid: i32) -> Decoded {
        Decoded {
            ts: Nanos(ts),
            cpu: argus_schema::Cpu(cpu),
            event: Some(Event {
                ts: Nanos(ts),
                seq: 0,
                cpu: argus_schema::Cpu(cpu),
                pid: Pid(tid),
                tid: Tid(tid),
                ctx: argus_schema::Context::Task,
                kind: argus_schema::EventKind::Waking { target: Tid(1) },
            }),
            comms: [None, None],
            fork_source: Default::default(),
            exec_old_tid: None,
        }
    }

    fn merge_with(queues: &[(u32, &[u64])]) -> LiveMerge {
        let mut m = LiveMerge::new(&FormatSet::default(), &[], 100).unwrap();
        for (cpu, ts) in queues {
            let st = m.cpus.entry(*cpu).or_insert_with(|| CpuLive {
                conv: m.template.clone(),
                queue: VecDeque::new(),
                last: None,
                dropped: 0,
                behind: None,
            });
            for &t in *ts {
                st.queue.push_back(decoded(t, *cpu, 7));
            }
        }
        m
    }

    #[test]
    fn release_merges_by_time_behind_the_watermark_and_an_idle_cpu_does_not_stall_it() {
        // cpu1 has nothing queued (idle): the watermark still moves.
        let mut m = merge_with(&[(0, &[10, 30, 50]), (1, &[]), (2, &[20, 30, 60])]);
        let mut out = Vec::new();
        m.release(Nanos(30), &mut out);
        let got: Vec<(u64, u32, u64)> = out.iter().map(|e| (e.ts.0, e.cpu.0, e.seq)).collect();
        assert_eq!(
            got,
            vec![(10, 0, 100), (20, 2, 101), (30, 0, 102), (30, 2, 103)]
        );
        assert_eq!(m.queued(), 2);
        out.clear();
        m.release(Nanos(20), &mut out);
        assert!(out.is_empty(), "the watermark never goes back");
        m.release(Nanos(1_000), &mut out);
        assert_eq!(
            out.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![104, 105]
        );
        assert_eq!(m.released(), Some(Nanos(1_000)));
    }

    #[test]
    fn a_record_behind_the_released_watermark_is_late_and_dropped() {
        let mut m = merge_with(&[(0, &[10])]);
        let mut out = Vec::new();
        m.release(Nanos(50), &mut out);
        assert_eq!(out.len(), 1);
        m.enqueue(
            0,
            vec![decoded(40, 0, 7), decoded(50, 0, 7), decoded(60, 0, 7)],
        );
        assert_eq!(m.stats.late, 2);
        assert_eq!(m.queued(), 1);
        let errs = m.take_errors();
        assert_eq!(errs.len(), 1);
        assert!(errs[0]
            .message
            .contains("2 records arrived after the watermark"));
        assert_eq!(errs[0].ts, Some(Nanos(40)));
        assert_eq!(m.stats.lost_total(), 2);
    }

    #[test]
    fn a_malformed_page_is_counted_not_fatal() {
        let mut m = LiveMerge::new(&FormatSet::default(), &[], 0).unwrap();
        m.push_page(3, &[0u8; 10], 0);
        assert_eq!((m.stats.pages, m.stats.bad), (1, 1));
        assert_eq!(m.take_errors()[0].source, "live/cpu3");
        // An empty page (commit 0) decodes to nothing.
        m.push_page(3, &[0u8; 4096], 0);
        assert_eq!((m.stats.pages, m.stats.bad, m.queued()), (2, 1, 0));
    }

    /// This kernel's layouts of the events the timer test needs (`print fmt` left out):
    /// (system, name, id, the fields after the common header).
    const FORMATS: &[(&str, &str, u32, &str)] = &[
        (
            "sched",
            "sched_switch",
            1,
            "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
             \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
             \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
             \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
             \tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n",
        ),
        (
            "sched",
            "sched_waking",
            2,
            "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\
             \tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n\
             \tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n",
        ),
        (
            "timer",
            "hrtimer_start",
            3,
            "\tfield:void * hrtimer;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:void * function;\toffset:16;\tsize:8;\tsigned:0;\n\
             \tfield:s64 expires;\toffset:24;\tsize:8;\tsigned:1;\n\
             \tfield:s64 softexpires;\toffset:32;\tsize:8;\tsigned:1;\n\
             \tfield:enum hrtimer_mode mode;\toffset:40;\tsize:4;\tsigned:0;\n\
             \tfield:bool was_armed;\toffset:44;\tsize:1;\tsigned:0;\n",
        ),
        (
            "timer",
            "hrtimer_expire_entry",
            4,
            "\tfield:void * hrtimer;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:s64 now;\toffset:16;\tsize:8;\tsigned:1;\n\
             \tfield:void * function;\toffset:24;\tsize:8;\tsigned:0;\n",
        ),
        (
            "timer",
            "hrtimer_expire_exit",
            5,
            "\tfield:void * hrtimer;\toffset:8;\tsize:8;\tsigned:0;\n",
        ),
    ];

    /// The fields every event's format starts with.
    const COMMON_FIELDS: &str =
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n";

    fn formats() -> FormatSet {
        let mut set = FormatSet::default();
        for (sys, name, id, fields) in FORMATS {
            let text = format!("name: {name}\nID: {id}\nformat:\n{COMMON_FIELDS}{fields}");
            set.insert(argus_ingest::format::EventFormat::parse(sys, &text).unwrap());
        }
        set
    }

    /// A record of event `name` by `pid` (`flags`: 0x08 = hard interrupt) with `values` at
    /// their fields' offsets.
    fn record(set: &FormatSet, name: &str, pid: i32, flags: u8, values: &[(&str, u64)]) -> Vec<u8> {
        let ev = set.events.values().find(|e| e.name == name).unwrap();
        let len = ev
            .fields
            .iter()
            .map(|f| (f.offset + f.size) as usize)
            .max()
            .unwrap();
        let mut p = vec![0u8; (len + 3) & !3];
        let common = [
            ("common_type", ev.id as u64),
            ("common_flags", flags as u64),
            ("common_pid", pid as u32 as u64),
        ];
        for (field, v) in common.iter().chain(values) {
            let f = ev.field(field).unwrap();
            let (o, n) = (f.offset as usize, (f.size as usize).min(8));
            p[o..o + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        p
    }

    /// A 4 KiB ring-buffer page starting at `ts` holding `records` (time, payload); `missed`:
    /// flagged as following that many lost events.
    fn raw_page(ts: u64, missed: Option<u64>, records: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut data = Vec::new();
        let mut at = ts;
        for (t, payload) in records {
            let delta = (t - at) as u32;
            assert!(delta < 1 << 27 && payload.len() % 4 == 0 && payload.len() <= 112);
            at = *t;
            data.extend_from_slice(&((delta << 5) | (payload.len() / 4) as u32).to_le_bytes());
            data.extend_from_slice(payload);
        }
        let mut page = vec![0u8; 4096];
        let mut commit = data.len() as u64;
        if missed.is_some() {
            // RB_MISSED_EVENTS | RB_MISSED_STORED: the count follows the data.
            commit |= (1 << 31) | (1 << 30);
        }
        page[..8].copy_from_slice(&ts.to_le_bytes());
        page[8..16].copy_from_slice(&commit.to_le_bytes());
        page[16..16 + data.len()].copy_from_slice(&data);
        if let Some(n) = missed {
            page[16 + data.len()..24 + data.len()].copy_from_slice(&n.to_le_bytes());
        }
        page
    }

    fn start_config(dir: &Path) -> StartConfig {
        StartConfig {
            dir: dir.to_path_buf(),
            snapshot_every: Duration::from_secs(10),
            retain: Duration::from_secs(600),
            lag: Duration::from_millis(500),
            keep: 3,
            on_hang: None,
            watch_pids: Vec::new(),
            watch_comms: Vec::new(),
            dataflow: DataflowConfig {
                workers: 2,
                ..DataflowConfig::default()
            },
            buffer_kb: 1024,
            drain_priority: 10,
            nice: JobPriority::Nice(0),
            duration: None,
            status_every: Duration::from_secs(5),
            snapshot_delay: Duration::ZERO,
        }
    }

    /// What the live job made of the timer stream.
    struct LiveRun {
        edges: Vec<CausalEdge>,
        /// Segments after the first tick (the timer armed, the gap not yet seen).
        before_gap: Vec<argus_schema::Segment>,
        events: Vec<Event>,
        watermark: Nanos,
        gaps: Vec<(Nanos, Nanos)>,
        stats: LiveStats,
        errors: Vec<ErrorRecord>,
    }

    const TIMER: u64 = 0xffff_8880_0000_1000;
    const BASE: u64 = 5_000_000_000;

    /// Thread 10 arms an hrtimer on cpu0 and sleeps; thread 20 sleeps on cpu1. The pages go
    /// through the job's merge into a dataflow generation tick by tick; the timer fires in
    /// the next page of cpu0, flagged as following lost events when `missed`.
    fn run_timer_stream(missed: Option<u64>) -> LiveRun {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = start_config(tmp.path());
        let set = formats();
        let sleeping = |prev: i32, next: i32, state: u64| {
            record(
                &set,
                "sched_switch",
                prev,
                0,
                &[
                    ("prev_pid", prev as u64),
                    ("prev_state", state),
                    ("next_pid", next as u64),
                ],
            )
        };
        let arm = record(
            &set,
            "hrtimer_start",
            10,
            0,
            &[
                ("hrtimer", TIMER),
                ("function", 1),
                ("expires", BASE + 1_000),
            ],
        );
        let cpu0_before = raw_page(
            BASE,
            None,
            &[(BASE + 20, arm), (BASE + 100, sleeping(10, 0, 1))],
        );
        let cpu1 = raw_page(BASE + 150, None, &[(BASE + 150, sleeping(20, 0, 1))]);
        let fire = BASE + 1_000;
        let cpu0_after = raw_page(
            fire,
            missed,
            &[
                (
                    fire,
                    record(
                        &set,
                        "hrtimer_expire_entry",
                        0,
                        0x08,
                        &[("hrtimer", TIMER), ("function", 1)],
                    ),
                ),
                (
                    fire + 1,
                    record(&set, "sched_waking", 0, 0x08, &[("pid", 10)]),
                ),
                (
                    fire + 2,
                    record(&set, "hrtimer_expire_exit", 0, 0x08, &[("hrtimer", TIMER)]),
                ),
                (fire + 10, sleeping(0, 10, 0)),
            ],
        );

        let (notify, _woken) = crossbeam_channel::bounded::<()>(1);
        let mut job = Job {
            cfg: &cfg,
            gens: vec![Generation::start(0, &cfg.dataflow, 0, Nanos(0), notify.clone()).unwrap()],
            next_gen: 1,
            epoch: 0,
            watermark: Nanos(0),
            notify,
        };
        let mut merge = LiveMerge::new(&set, &[], 0).unwrap();
        merge.track_gaps(cfg.dataflow.rules.gaps.clone(), Nanos(BASE));
        let mut all = Vec::new();
        let mut tick = |job: &mut Job<'_>, merge: &mut LiveMerge, w: u64| {
            let mut out = Vec::new();
            merge.release(Nanos(w), &mut out);
            all.extend(out.iter().cloned());
            job.send(out, Nanos(w)).unwrap();
            job.request().unwrap().recv().unwrap()
        };
        // Tick 1: the arming and both sleeps are in the graph before cpu0's next page comes.
        merge.push_page(0, &cpu0_before, 0);
        merge.push_page(1, &cpu1, 0);
        let first = tick(&mut job, &mut merge, BASE + 500);
        // Tick 2: the firing.
        merge.push_page(0, &cpu0_after, 0);
        let watermark = Nanos(BASE + 2_000);
        let last = tick(&mut job, &mut merge, watermark.0);
        for g in std::mem::take(&mut job.gens) {
            g.stop(false, false).unwrap();
        }
        assert!(first.check.is_ok() && last.check.is_ok());
        LiveRun {
            edges: last.edges,
            before_gap: first.segments,
            events: all,
            watermark,
            gaps: cfg.dataflow.rules.gaps.to_vec(),
            stats: merge.stats.clone(),
            errors: merge.take_errors(),
        }
    }

    fn timer_edges(edges: &[CausalEdge]) -> usize {
        let irq = argus_schema::Tid::irq(argus_schema::Cpu(0));
        edges
            .iter()
            .filter(|e| {
                e.kind == argus_schema::EdgeKind::Timer
                    && e.src.tid() == Tid(10)
                    && e.dst.tid() == irq
            })
            .count()
    }

    #[test]
    fn a_timer_armed_before_a_live_gap_and_firing_after_it_makes_no_edge_as_in_build() {
        use argus_pipeline::reference;
        // Control: without lost events the live graph has the timer edge.
        let clean = run_timer_stream(None);
        assert_eq!(clean.events.len(), 7, "{:#?}", clean.events);
        assert_eq!(timer_edges(&clean.edges), 1, "{:#?}", clean.edges);
        assert!(clean.gaps.is_empty() && clean.stats.gaps == 0);

        let lossy = run_timer_stream(Some(3));
        // The arming and the sleep that followed it were in the dataflow before the gap was
        // known: the segment of thread 10 that armed the timer had ended.
        assert!(
            lossy
                .before_gap
                .iter()
                .any(|s| s.tid == Tid(10) && s.end_ns == Nanos(BASE + 100)),
            "{:#?}",
            lossy.before_gap
        );
        assert_eq!(
            lossy.gaps,
            vec![(Nanos(BASE + 100), Nanos(BASE + 1_000))],
            "from cpu0's last record before the loss to its first after"
        );
        assert_eq!(lossy.stats.gaps, 1);
        assert_eq!(lossy.stats.lost.get(&0), Some(&3));
        assert!(lossy.errors.iter().any(|e| e.source == "live/cpu0"
            && e.message.contains("the kernel lost 3 events")
            && e.message.contains("no edge is made across this gap")));
        assert_eq!(timer_edges(&lossy.edges), 0, "{:#?}", lossy.edges);
        // Thread 10's sleep spans the gap: no thread-order edge into its next segment.
        assert!(!lossy
            .edges
            .iter()
            .any(|e| e.kind == argus_schema::EdgeKind::ThreadOrder && e.dst.tid() == Tid(10)));

        // As in build: the batch computation with the gap known from the start gives the
        // same graph; without the gap it would have made the edge.
        let mut rules = RulesConfig::default();
        rules.add_gap(Nanos(BASE + 100), Nanos(BASE + 1_000));
        let mut want = reference::compute(&lossy.events, lossy.watermark, &rules).edges;
        let mut got = lossy.edges.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        let gapless = reference::compute(&lossy.events, lossy.watermark, &RulesConfig::default());
        assert_eq!(timer_edges(&gapless.edges), 1);
    }

    #[test]
    fn pages_the_tap_dropped_are_a_gap_too() {
        let set = formats();
        let mut m = LiveMerge::new(&set, &[], 0).unwrap();
        let gaps = GapSet::new();
        m.track_gaps(gaps.clone(), Nanos(BASE));
        let rec = |pid: i32| record(&set, "sched_waking", pid, 0, &[("pid", 1)]);
        m.push_tapped(&Tapped {
            cpu: 1,
            data: raw_page(BASE + 10, None, &[(BASE + 10, rec(7))]),
            dropped_before: 0,
            seq: 0,
        });
        assert!(gaps.is_empty());
        // Two pages of cpu1 were dropped by the tap before this one.
        m.push_tapped(&Tapped {
            cpu: 1,
            data: raw_page(BASE + 900, None, &[(BASE + 950, rec(7))]),
            dropped_before: 2,
            seq: 3,
        });
        assert_eq!(gaps.to_vec(), vec![(Nanos(BASE + 10), Nanos(BASE + 950))]);
        assert_eq!((m.stats.tap_dropped, m.stats.gaps), (2, 1));
        // A CPU whose first page already follows lost events lost them after the origin.
        m.push_tapped(&Tapped {
            cpu: 2,
            data: raw_page(BASE + 2_000, Some(4), &[(BASE + 2_001, rec(8))]),
            dropped_before: 0,
            seq: 0,
        });
        assert_eq!(
            gaps.to_vec(),
            vec![(Nanos(BASE), Nanos(BASE + 2_001))],
            "merged with the first"
        );
        assert_eq!(m.gaps_since(Nanos(BASE + 900)).len(), 2);
        assert_eq!(
            m.gaps_since(Nanos(BASE + 1_000)),
            vec![(2, BASE, BASE + 2_001, Some(4))],
            "the snapshots name the gaps that end in their window"
        );
        assert!(m.gaps_since(Nanos(BASE + 3_000)).is_empty());
    }

    #[test]
    fn the_rules_gap_set_is_shared_by_clones_and_serializes_as_a_list() {
        let cfg = start_config(Path::new("/nonexistent"));
        let generation = cfg.dataflow.clone();
        cfg.dataflow.rules.gaps.add(Nanos(5), Nanos(9));
        assert!(generation.rules.crosses_gap(Nanos(0), Nanos(5)));
        let text = serde_json::to_string(&generation.rules.gaps).unwrap();
        assert_eq!(text, "[[5,9]]");
        let back: GapSet = serde_json::from_str(&text).unwrap();
        assert_eq!(back, generation.rules.gaps);
        assert!(!back.shares(&generation.rules.gaps));
    }

    #[test]
    fn the_job_priority_is_idle_or_a_nice_value() {
        assert_eq!(parse_job_priority("idle"), Ok(JobPriority::Idle));
        assert_eq!(parse_job_priority("IDLE"), Ok(JobPriority::Idle));
        assert_eq!(parse_job_priority("-5"), Ok(JobPriority::Nice(-5)));
        assert_eq!(parse_job_priority("19"), Ok(JobPriority::Nice(19)));
        for bad in ["20", "-21", "", "lazy", "1.5"] {
            assert!(parse_job_priority(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_cpu_whose_reader_is_behind_holds_the_watermark_for_a_while() {
        let mut m = merge_with(&[(0, &[10]), (1, &[20])]);
        assert_eq!(m.watermark(Nanos(100), false), Nanos(100), "nobody behind");
        if let Some(c) = m.cpus.get_mut(&1) {
            c.behind = Some((Nanos(20), Instant::now()));
        }
        assert_eq!(m.watermark(Nanos(100), false), Nanos(20));
        if let Some(c) = m.cpus.get_mut(&1) {
            c.behind = Some((Nanos(20), Instant::now() - MAX_HOLD));
        }
        assert_eq!(m.watermark(Nanos(100), false), Nanos(100), "not for ever");
        assert_eq!(
            m.watermark(Nanos(100), true),
            Nanos(20),
            "for as long as the job itself is behind the recorder"
        );
    }
}
