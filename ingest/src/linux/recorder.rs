//! The tracefs recorder: [`Recorder`] starts a [`Recording`] of the kernel's events into a
//! trace directory (the module's documentation, [`super`], tells how).

use super::*;
use crate::format::HeaderPage;
use crate::tracedir::{self, LostRange, TraceMeta};
use control::Doorbell;
use reader::{Reader, ReaderStats};
use ring::Shared;
use signals::SignalGuard;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracefs::Instance;

/// One ring-buffer page as read from `trace_pipe_raw`, handed to [`RecordConfig::tap`].
/// Decode it with [`crate::page::parse_page`] and the formats in the trace directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TappedPage {
    /// The CPU whose buffer it came from.
    pub cpu: u32,
    /// The whole page (`page_size` bytes, as written to the chunk).
    pub data: Vec<u8>,
    /// Pages of this CPU the tap dropped before this one since recording started: when it
    /// grew since the previous page, the pages in between are missing from the tap.
    pub dropped_before: u64,
    /// Which page of its CPU this is (0 for the first read): page `k` of a CPU is also page
    /// `k` of that CPU's chunk files, so a consumer that missed pages can read them there.
    pub seq: u64,
}

/// Where tracefs is normally mounted.
pub const DEFAULT_TRACEFS: &str = "/sys/kernel/tracing";
/// Default per-CPU ring-buffer size in KiB.
pub const DEFAULT_BUFFER_SIZE_KB: u32 = 8192;
/// Default chunk size in pages (4 MiB of 4 KiB pages).
pub const DEFAULT_CHUNK_PAGES: u32 = 1024;

/// The `ftrace/print` event: `trace_marker` writes. It has no `enable` file; it is on while
/// `options/markers` is.
const PRINT_EVENT: &str = "ftrace/print";
/// How often the control loop looks at a recorded command, and at one it asked to stop.
const CONTROL_TICK: Duration = Duration::from_millis(10);
/// How soon new threads of this process are looked for and added to
/// `set_event_notrace_pid` after the last look found one (or one gone).
const EXCLUDE_RESCAN: Duration = Duration::from_millis(250);
/// Each look that finds nothing new doubles the time to the next, up to this: a process
/// whose threads are settled costs a look a second, not four.
const EXCLUDE_RESCAN_MAX: Duration = Duration::from_secs(1);
/// How often at most `set_event_notrace_pid` is rewritten to drop the tids of gone threads
/// when the kernel's last pid cannot be read ([`sysinfo::pid_cursor`]); where it can, the
/// list is rewritten only when a gone tid is about to be handed out again
/// ([`reuse_distance`] within [`reuse_margin`]). A rewrite clears the list before setting it
/// (`O_TRUNC`): the kernel unregisters and registers its pid-filter probes, and for the
/// milliseconds that takes a CPU can drop every record of every task (measured: 0.2–0.6 % of
/// all context switches lost with one rewrite a second, in windows of up to 4 ms that end
/// with each rewrite). So rewrites are kept as rare as the tids' reuse allows.
const RELIST_EVERY: Duration = Duration::from_secs(60);
/// How long after a rewrite of `set_event_notrace_pid` returns its possible-loss stretch is
/// taken to last: records of the last CPU to see the new filter may still be dropped a little
/// after the write returns.
const RELIST_SETTLE_NS: u64 = 5_000_000;
/// How long the command gets to exit after SIGTERM before SIGKILL.
const COMMAND_GRACE: Duration = Duration::from_secs(2);

/// Bytes of the trace directory set aside for `meta.json` when sizing the ring.
const RING_META_RESERVE: u64 = 64 << 10;
/// Bytes set aside for `proc.json` (written after the ring is sized): 1 MiB, about 12,000
/// threads.
const PROC_JSON_RESERVE: u64 = 1 << 20;
/// The smallest number of chunks each CPU can keep in the ring.
const MIN_CHUNKS_PER_CPU: u64 = 4;

/// Numbers the instances of this process after the first (`argus-<pid>-<n>`).
static INSTANCE_COUNTER: AtomicU32 = AtomicU32::new(0);

/// What to record and where. Build with [`RecordConfig::new`] and adjust the fields.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// The trace directory to create. It must not exist or be empty.
    pub output_dir: PathBuf,
    /// Stop after this long (whatever the command does).
    pub duration: Option<Duration>,
    /// Spawn this command once tracing is on and stop when it exits (`argv[0]` looked up in
    /// `PATH`).
    pub command: Option<Vec<String>>,
    /// Give the command this process's stderr as its stdout (`argus dig --json`: the
    /// report alone is on stdout).
    pub command_stdout_to_stderr: bool,
    /// Events as `system/event` ([`DEFAULT_EVENTS`] by default; see [`event_set`]).
    /// Duplicates are ignored.
    pub events: Vec<String>,
    /// Per-CPU ring-buffer size in KiB ([`DEFAULT_BUFFER_SIZE_KB`]).
    pub buffer_size_kb: u32,
    /// Pages per chunk file at most ([`DEFAULT_CHUNK_PAGES`]; smaller when the ring is so
    /// small that each CPU would hold fewer than 4 chunks).
    pub chunk_pages: u32,
    /// Cap on the whole trace directory in bytes ([`DEFAULT_RING_SIZE`]): when the chunks
    /// would exceed it, the oldest are deleted (`docs/trace-dir.md`, "The ring"). `None`:
    /// no cap.
    pub ring_size: Option<u64>,
    /// Also hand every page read to this channel (non-blocking `try_send`: a page the
    /// consumer has no room for is counted in [`CpuSummary::tap_dropped`] and
    /// [`Recording::tap_dropped`], never waited for). The tap ends when the receiver is
    /// dropped.
    pub tap: Option<crossbeam_channel::Sender<TappedPage>>,
    /// Also tell this channel when a thread of this process is hidden from the trace and
    /// when a hidden one is gone ([`OwnThread`]): the trace cannot show such a thread's exit,
    /// so a consumer of the tap that follows the process's own threads (`argus start`) adds
    /// it. Sent without waiting; the reports end when the receiver is dropped.
    pub own_threads: Option<crossbeam_channel::Sender<OwnThread>>,
    /// tracefs instance name; `None` picks `argus-<pid>` (then `argus-<pid>-<n>` for further
    /// recorders in the same process). Names starting with `argus-<pid>` are removed at the
    /// start of a later recording once that pid is dead.
    pub instance: Option<String>,
    /// Install SIGINT/SIGTERM handlers that stop the recording cleanly (what the CLI wants;
    /// off by default because handlers are process-wide).
    pub handle_signals: bool,
    /// Append the buffered pages to the chunk in progress (one zstd frame) and `fdatasync`
    /// it this often ([`DEFAULT_FLUSH_INTERVAL`]), so a reader following the directory sees
    /// data at low event rates and a crash loses at most this much. `None`: pages reach the
    /// disk only as full frames (256 pages) and at the end.
    pub flush_interval: Option<Duration>,
    /// The tracefs mount point ([`DEFAULT_TRACEFS`]).
    pub tracefs: PathBuf,
    /// When recording `ftrace/print` on a kernel with `options/copy_trace_marker` (6.17+),
    /// also record writes to the top-level `trace_marker` (default true).
    pub copy_top_level_markers: bool,
    /// Call stacks (`--stacks`) and hardware watchpoints (`--watch`) recorded with perf into
    /// `perf/` (see `perf/`); off by default.
    pub perf: PerfConfig,
    /// Record what every file descriptor refers to (`files/`, read back by
    /// [`crate::files::FileTable`]; default true). Costs a scan of each page by the readers
    /// and a thread reading `/proc` after each descriptor-creating syscall.
    pub track_files: bool,
    /// A live consumer of the fd identity (`argus start`, [`super::files_tap`]): every line
    /// the tracker writes, and on request the bound up to which they are complete. `None`
    /// by default.
    pub files_tap: Option<super::FilesTapEnds>,
    /// A live consumer of the perf samples (`argus start`, [`super::perf_tap`]): each drain
    /// of the collector's rings, with the time up to which samples are complete. `None` by
    /// default.
    pub perf_tap: Option<super::PerfTapEnds>,
    /// User-space dispatch functions (`--dispatch BINARY:SYMBOL`): each call is recorded as
    /// an `argus:dispatch-begin SYMBOL` / `argus:dispatch-end SYMBOL` marker of the calling
    /// thread, through a uprobe and a uretprobe (`uprobe.rs`). Empty by default.
    pub dispatch: Vec<DispatchSpec>,
    /// User-space enqueue functions (`--enqueue BINARY:SYMBOL[@N]`): each call is recorded
    /// with its work item (argument `N`, default 1) and becomes a `work_queue` event, joined
    /// to the `--dispatch …@N` run of the same item by a queue edge. Empty by default.
    pub enqueue: Vec<DispatchSpec>,
    /// Functions whose calls are recorded (`--probe BINARY:SYMBOL`) as `argus:call-begin
    /// SYMBOL` / `argus:call-end SYMBOL` markers of the calling thread, without making
    /// segments of them (`argus dig` counts them). Empty by default.
    pub probes: Vec<DispatchSpec>,
    /// The readers' real-time priority while they drain, and its CPU budget
    /// ([`DrainPriority::default`]: `SCHED_FIFO` 10, half a CPU per reader; `drainprio.rs`).
    pub drain_priority: DrainPriority,
}

impl RecordConfig {
    /// The defaults: [`DEFAULT_EVENTS`], 8 MiB per CPU, 1024-page chunks, record until
    /// stopped through a [`StopHandle`].
    pub fn new(output_dir: impl Into<PathBuf>) -> Self {
        RecordConfig {
            output_dir: output_dir.into(),
            duration: None,
            command: None,
            command_stdout_to_stderr: false,
            events: DEFAULT_EVENTS.iter().map(|e| e.to_string()).collect(),
            buffer_size_kb: DEFAULT_BUFFER_SIZE_KB,
            chunk_pages: DEFAULT_CHUNK_PAGES,
            ring_size: Some(DEFAULT_RING_SIZE),
            tap: None,
            own_threads: None,
            instance: None,
            handle_signals: false,
            flush_interval: Some(DEFAULT_FLUSH_INTERVAL),
            tracefs: PathBuf::from(DEFAULT_TRACEFS),
            copy_top_level_markers: true,
            perf: PerfConfig::default(),
            track_files: true,
            dispatch: Vec::new(),
            enqueue: Vec::new(),
            probes: Vec::new(),
            drain_priority: DrainPriority::default(),
            files_tap: None,
            perf_tap: None,
        }
    }
}

impl PartialEq for RecordConfig {
    /// Field by field; two taps (or own-thread reports) are equal when they send into the
    /// same channel.
    fn eq(&self, other: &Self) -> bool {
        let taps = match (&self.tap, &other.tap) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_channel(b),
            _ => false,
        };
        let own = match (&self.own_threads, &other.own_threads) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_channel(b),
            _ => false,
        };
        let files = match (&self.files_tap, &other.files_tap) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_tap(b),
            _ => false,
        };
        let perf = match (&self.perf_tap, &other.perf_tap) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_tap(b),
            _ => false,
        };
        taps && own
            && files
            && perf
            && self.output_dir == other.output_dir
            && self.duration == other.duration
            && self.command == other.command
            && self.events == other.events
            && self.buffer_size_kb == other.buffer_size_kb
            && self.chunk_pages == other.chunk_pages
            && self.ring_size == other.ring_size
            && self.instance == other.instance
            && self.handle_signals == other.handle_signals
            && self.flush_interval == other.flush_interval
            && self.tracefs == other.tracefs
            && self.copy_top_level_markers == other.copy_top_level_markers
            && self.perf == other.perf
            && self.track_files == other.track_files
            && self.dispatch == other.dispatch
            && self.enqueue == other.enqueue
            && self.probes == other.probes
            && self.drain_priority == other.drain_priority
    }
}

/// What the recorder tells [`RecordConfig::own_threads`] of this process's threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnThread {
    /// The thread is hidden from the trace from now on (`set_event_notrace_pid`): records it
    /// left before are in the trace, its exit will not be.
    Hidden(i32),
    /// A hidden thread was found gone at `noticed_ns` (trace clock, `CLOCK_MONOTONIC`): it
    /// exited before then, after every record it left. Its tid no longer hides anything
    /// (a later thread given the same tid, in any process, is traced).
    Gone {
        /// The thread.
        tid: i32,
        /// When it was found gone.
        noticed_ns: u64,
    },
}

/// Stops a recording from another thread: the recording's control loop wakes at once and
/// closes the trace cleanly.
#[derive(Clone, Debug, Default)]
pub struct StopHandle(Arc<StopState>);

#[derive(Debug, Default)]
struct StopState {
    stopped: AtomicBool,
    /// The control loop's doorbell, once the recording started.
    bell: std::sync::OnceLock<Arc<Doorbell>>,
}

impl StopHandle {
    /// Asks the recording to stop.
    pub fn stop(&self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        if let Some(bell) = self.0.bell.get() {
            bell.ring();
        }
    }

    /// Whether [`StopHandle::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::SeqCst)
    }

    /// The doorbell [`StopHandle::stop`] rings (the first one attached stays).
    fn attach(&self, bell: &Arc<Doorbell>) {
        let _ = self.0.bell.set(bell.clone());
    }
}

/// Why a recording ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// [`RecordConfig::duration`] elapsed.
    DurationElapsed,
    /// The recorded command exited.
    CommandExited,
    /// SIGINT or SIGTERM (the number) arrived.
    Signal(i32),
    /// [`StopHandle::stop`] (or [`Recording::stop`]) was called.
    Requested,
}

/// One CPU's share of a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSummary {
    /// Ring-buffer pages written.
    pub pages: u64,
    /// Chunk files written.
    pub chunks: u32,
    /// Bytes on disk (compressed chunks).
    pub compressed_bytes: u64,
    /// Events the kernel lost on this CPU (overrun + dropped).
    pub lost: u64,
    /// Oldest chunks deleted by the ring.
    pub dropped_chunks: u32,
    /// Pages the tap consumer had no room for.
    pub tap_dropped: u64,
    /// Pages not written because the disk was full and the ring at its floor (their
    /// stretch is a lost range in `meta.json`).
    pub unwritten: u64,
}

/// What a finished recording wrote; `Display` gives a one-paragraph summary for the CLI.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordSummary {
    /// The trace directory.
    pub output_dir: PathBuf,
    /// The tracefs instance used (now removed).
    pub instance: String,
    /// Where applications had to write markers.
    pub marker_path: PathBuf,
    /// Ring-buffer page size in bytes.
    pub page_size: u32,
    /// Pages written, all CPUs.
    pub pages: u64,
    /// Raw page bytes (`pages * page_size`).
    pub bytes: u64,
    /// Bytes on disk in chunk files.
    pub compressed_bytes: u64,
    /// Per CPU.
    pub cpus: BTreeMap<u32, CpuSummary>,
    /// Lost events per CPU (as in `meta.json`).
    pub lost: BTreeMap<u32, u64>,
    /// Where events were lost, per CPU (`meta.json` `lost_ranges`).
    pub lost_ranges: BTreeMap<u32, Vec<LostRange>>,
    /// Bytes of chunk files on disk at the end (after ring deletions).
    pub chunk_bytes_on_disk: u64,
    /// Wall time from tracing on to tracing off.
    pub duration: Duration,
    /// `CLOCK_MONOTONIC` at tracing on.
    pub start_ns: u64,
    /// `CLOCK_MONOTONIC` at close.
    pub end_ns: u64,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// The recorded command's pid.
    pub command_pid: Option<i32>,
    /// Its exit status, or 128 + signal.
    pub command_status: Option<i32>,
    /// Threads of this process hidden from the trace (`set_event_notrace_pid`).
    pub excluded_tids: Vec<i32>,
    /// What perf recorded (`--stacks`, `--watch`), when on.
    pub perf: Option<PerfSummary>,
}

impl RecordSummary {
    /// Lost events on all CPUs.
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum()
    }
}

impl fmt::Display for RecordSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MIB: f64 = 1024.0 * 1024.0;
        write!(
            f,
            "recorded {} pages ({:.1} MiB, {:.1} MiB compressed) from {} cpus in {:.2} s into {}",
            self.pages,
            self.bytes as f64 / MIB,
            self.compressed_bytes as f64 / MIB,
            self.cpus.len(),
            self.duration.as_secs_f64(),
            self.output_dir.display()
        )?;
        let lost = self.lost_total();
        if lost > 0 {
            let per_cpu: Vec<String> = self
                .lost
                .iter()
                .map(|(cpu, n)| format!("cpu{cpu}: {n}"))
                .collect();
            write!(
                f,
                "; LOST {lost} events ({}): raise --buffer-kb",
                per_cpu.join(", ")
            )?;
        } else {
            write!(f, "; no events lost")?;
        }
        let dropped: u32 = self.cpus.values().map(|c| c.dropped_chunks).sum();
        if dropped > 0 {
            write!(
                f,
                "; the ring deleted the {dropped} oldest chunks ({:.1} MiB kept)",
                self.chunk_bytes_on_disk as f64 / MIB
            )?;
        }
        let unwritten: u64 = self.cpus.values().map(|c| c.unwritten).sum();
        if unwritten > 0 {
            write!(
                f,
                "; the disk was full: {unwritten} pages ({:.1} MiB) not written (lost ranges in \
                 meta.json)",
                (unwritten * u64::from(self.page_size)) as f64 / MIB
            )?;
        }
        let tap: u64 = self.cpus.values().map(|c| c.tap_dropped).sum();
        if tap > 0 {
            write!(f, "; the page tap dropped {tap} pages")?;
        }
        if let Some(p) = &self.perf {
            write!(
                f,
                "; perf: {} stack samples, {} watchpoint hits, {} maps copies",
                p.stack_samples, p.watch_hits, p.maps_copies
            )?;
            if p.lost > 0 {
                write!(f, " ({} samples LOST)", p.lost)?;
            }
            if p.dropped_chunks > 0 {
                write!(
                    f,
                    " ({} oldest perf chunks deleted by the ring)",
                    p.dropped_chunks
                )?;
            }
        }
        match (self.command_pid, self.command_status) {
            (Some(pid), Some(status)) => write!(f, "; command pid {pid} exited with {status}"),
            (Some(pid), None) => write!(f, "; command pid {pid} still running"),
            _ => Ok(()),
        }
    }
}

/// Records a trace directory. `Recorder::new(config).run()` does everything; use
/// [`Recorder::start`] to do something while recording (write markers, run a workload).
#[derive(Debug)]
pub struct Recorder {
    config: RecordConfig,
    stop: StopHandle,
}

impl Recorder {
    /// A recorder for `config` (nothing happens until [`Recorder::start`] or
    /// [`Recorder::run`]).
    pub fn new(config: RecordConfig) -> Self {
        Recorder {
            config,
            stop: StopHandle::default(),
        }
    }

    /// A handle that stops the recording from any thread, valid before and after `start`.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Records until a stop condition (duration, command exit, signal, stop handle) and
    /// closes the trace.
    pub fn run(self) -> Result<RecordSummary, RecordError> {
        self.start()?.wait()
    }

    /// Checks prerequisites, sets up the instance and the trace directory, turns tracing on
    /// and spawns the command. Returns once tracing is on.
    pub fn start(self) -> Result<Recording, RecordError> {
        let Recorder { config, stop } = self;
        let mut events = validate(&config)?;
        check_root()?;
        check_tracefs(&config.tracefs)?;
        check_events(&config.tracefs, &mut events)?;
        prepare_output(&config.output_dir)?;
        tracefs::remove_stale_instances(&config.tracefs);
        uprobe::remove_stale_groups(&config.tracefs);

        let page_size = page_size();
        let name = instance_name(&config);
        // Dropped after `instance` on every error path below (reverse declaration order):
        // a probe enabled in a live instance cannot be removed.
        let uprobes = uprobe::Uprobes::create(
            &config.tracefs,
            &uprobe::group_name(&name),
            &config.dispatch,
            &config.enqueue,
            &config.probes,
        )?;
        events.extend(uprobes.events().iter().cloned());
        check_events(&config.tracefs, &mut events)?;
        let instance = Instance::create(&config.tracefs, &name)?;
        let marker_path = instance.file("trace_marker");
        let (release, machine, hostname) = sysinfo::uname();
        let meta = TraceMeta {
            page_size: page_size as u32,
            kernel: release,
            machine,
            hostname,
            events: events.clone(),
            command: config.command.clone(),
            ..TraceMeta::recording("mono")
        };
        let wake = control::eventfd()?;
        let bell = Arc::new(Doorbell::new()?);
        stop.attach(&bell);
        let signals = if config.handle_signals {
            Some(SignalGuard::install()?)
        } else {
            None
        };
        // From here on, any error drops `recording`, whose Drop stops the readers and
        // removes the instance.
        let shared = Arc::new(Shared::new(&config.output_dir, meta));
        let mut recording = Recording {
            config,
            events,
            stop,
            signals,
            shared,
            tap_dropped: Arc::new(AtomicU64::new(0)),
            read_frontier: ReadFrontier::default(),
            chunk_pages: 0,
            started: Instant::now(),
            page_size,
            readers: Vec::new(),
            drain: Arc::new(AtomicBool::new(false)),
            wake,
            bell,
            child: None,
            command_status: None,
            excluded: BTreeSet::new(),
            hidden: BTreeSet::new(),
            listed: BTreeSet::new(),
            listed_at: Instant::now(),
            marker_path,
            instance_name: name,
            instance_dir: instance.path().to_path_buf(),
            copies_markers: false,
            instance: Some(instance),
            perf: None,
            fd_tracker: None,
            fd_start: None,
            uprobes: Some(uprobes),
            rt_grant: None,
        };
        recording.setup()?;
        Ok(recording)
    }
}

/// A recording in progress (tracing is on). Finish it with [`Recording::wait`] or
/// [`Recording::stop`]; dropping it instead still turns tracing off, stops the readers,
/// sends SIGTERM to a running command and removes the instance, but leaves `meta.json` at
/// status `recording`.
#[derive(Debug)]
pub struct Recording {
    config: RecordConfig,
    events: Vec<String>,
    stop: StopHandle,
    signals: Option<SignalGuard>,
    /// `meta.json` and the ring, shared with the readers.
    shared: Arc<Shared>,
    /// Pages the tap consumer had no room for, all CPUs.
    tap_dropped: Arc<AtomicU64>,
    /// How far the readers have read their CPUs (set up with the CPUs).
    read_frontier: ReadFrontier,
    /// Pages per chunk, as used.
    chunk_pages: u32,
    started: Instant,
    page_size: usize,
    readers: Vec<(u32, JoinHandle<Result<ReaderStats, RecordError>>)>,
    drain: Arc<AtomicBool>,
    wake: OwnedFd,
    /// Wakes the control loop ([`StopHandle::stop`], a reader ending).
    bell: Arc<Doorbell>,
    child: Option<Child>,
    command_status: Option<i32>,
    /// Every thread of this process ever hidden (the summary's `excluded_tids`).
    excluded: BTreeSet<i32>,
    /// The threads hidden and alive at the last look.
    hidden: BTreeSet<i32>,
    /// What `set_event_notrace_pid` holds: the hidden threads and gone ones until the list
    /// is next rewritten (see [`RELIST_EVERY`]).
    listed: BTreeSet<i32>,
    /// When `set_event_notrace_pid` was last written whole.
    listed_at: Instant,
    marker_path: PathBuf,
    instance_name: String,
    instance_dir: PathBuf,
    /// Whether `options/copy_trace_marker` is on.
    copies_markers: bool,
    /// Removes the instance when dropped; `None` once closed.
    instance: Option<Instance>,
    /// The perf collector (`--stacks`, `--watch`).
    perf: Option<perf::PerfRecorder>,
    /// The fd-tracker thread (`fds/`), when [`RecordConfig::track_files`].
    fd_tracker: Option<JoinHandle<Result<fds::FdStats, RecordError>>>,
    /// Tells the fd tracker the start time once tracing is on.
    fd_start: Option<crossbeam_channel::Sender<u64>>,
    /// The `--dispatch` uprobes; removed after the instance.
    uprobes: Option<uprobe::Uprobes>,
    /// The real-time budget given to this process's cgroup for the readers
    /// (`drainprio.rs`), taken back once they have ended.
    rt_grant: Option<super::drainprio::RtGroupGrant>,
}

impl Recording {
    /// The tracefs instance name (`argus-<pid>`...).
    pub fn instance_name(&self) -> &str {
        &self.instance_name
    }

    /// The `trace_marker` file of the instance: where applications must write markers
    /// (`ftrace/print` records) for them to be recorded.
    pub fn marker_path(&self) -> &Path {
        &self.marker_path
    }

    /// The trace directory.
    pub fn output_dir(&self) -> &Path {
        &self.config.output_dir
    }

    /// The recorded command's pid.
    pub fn command_pid(&self) -> Option<i32> {
        self.shared.lock().meta.command_pid
    }

    /// Pages the tap consumer had no room for so far (all CPUs).
    pub fn tap_dropped(&self) -> u64 {
        self.tap_dropped.load(Ordering::Relaxed)
    }

    /// How far the readers have read every CPU and handed the pages to the tap: a consumer
    /// of the tap that loads it before taking what the tap holds has every page stamped up
    /// to it ([`ReadFrontier`]).
    pub fn read_frontier(&self) -> ReadFrontier {
        self.read_frontier.clone()
    }

    /// Bytes of chunk files on disk now.
    pub fn chunk_bytes(&self) -> u64 {
        self.shared.chunk_bytes()
    }

    /// Threads of this process hidden from the trace so far.
    pub fn excluded_tids(&self) -> Vec<i32> {
        self.excluded.iter().copied().collect()
    }

    /// A handle that stops this recording from any thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Stops now and closes the trace.
    pub fn stop(self) -> Result<RecordSummary, RecordError> {
        self.stop.stop();
        self.wait()
    }

    /// Waits for a stop condition (duration, command exit, signal, stop handle, or a reader
    /// failing), then closes the trace and returns the summary.
    pub fn wait(mut self) -> Result<RecordSummary, RecordError> {
        let deadline = self.config.duration.map(|d| self.started + d);
        let mut last_rescan = Instant::now();
        let mut rescan_warned = false;
        let mut rescan_every = EXCLUDE_RESCAN;
        let reason = loop {
            if self.stop.is_stopped() {
                break StopReason::Requested;
            }
            if let Some(signal) = self.signals.as_ref().and_then(SignalGuard::received) {
                break StopReason::Signal(signal);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break StopReason::DurationElapsed;
            }
            if let Some(status) = self.poll_command()? {
                self.command_status = Some(status);
                break StopReason::CommandExited;
            }
            if self.readers.iter().any(|(_, handle)| handle.is_finished()) {
                // A reader only ends early on an error; close and report it.
                break StopReason::Requested;
            }
            if last_rescan.elapsed() >= rescan_every {
                // Not fatal: a missed thread only adds records to the trace.
                match self.exclude_own_threads() {
                    Ok(true) => rescan_every = EXCLUDE_RESCAN,
                    Ok(false) => rescan_every = (rescan_every * 2).min(EXCLUDE_RESCAN_MAX),
                    Err(err) => {
                        if !rescan_warned {
                            tracing::warn!(error = %err, "cannot exclude new recorder threads");
                            rescan_warned = true;
                        }
                    }
                }
                last_rescan = Instant::now();
            }
            // Asleep until a stop, a signal, a reader ending, the duration's end or the next
            // look for new threads.
            let now = Instant::now();
            let mut timeout = (last_rescan + rescan_every).saturating_duration_since(now);
            if let Some(d) = deadline {
                timeout = timeout.min(d.saturating_duration_since(now));
            }
            let mut fds = vec![self.bell.fd()];
            fds.extend(self.signals.as_ref().and_then(|_| signals::signal_fd()));
            if self.child.is_some() {
                // A recorded command is looked at every 10 ms, not through a pidfd: ending
                // the recording the instant it exited changed the trace's last records (the
                // group-commit test of tests/inspect.rs found a second batching suspect at
                // the workload's last write). A recording of a command is not an idle one.
                timeout = timeout.min(CONTROL_TICK);
            }
            control::wait_any(&fds, timeout);
            self.bell.quiet();
        };
        self.close(reason)
    }

    /// Everything between creating the instance and returning from `start`.
    fn setup(&mut self) -> Result<(), RecordError> {
        let instance_events = self.file("events");
        let dir = self.config.output_dir.clone();

        // Sub-buffer size = page size, so every trace_pipe_raw read is one page of the size
        // written to meta.json (6.8+ kernels allow other sub-buffer sizes).
        let subbuf = self.file("buffer_subbuf_size_kb");
        if subbuf.exists() {
            let kb = (self.page_size / 1024).to_string();
            if tracefs::read(&subbuf)?.trim() != kb {
                tracefs::write_checked(&subbuf, &kb)?;
            }
        }
        tracefs::write(
            &self.file("buffer_size_kb"),
            &self.config.buffer_size_kb.to_string(),
        )?;
        tracefs::write_checked(&self.file("trace_clock"), "mono")?;
        // With event-fork on, children of excluded pids would be excluded too, and the
        // recorded command is our child.
        tracefs::write_checked(&self.file("options/event-fork"), "0")?;
        if self.events.iter().any(|e| e == PRINT_EVENT) {
            tracefs::write_checked(&self.file("options/markers"), "1")?;
        }

        let cpus = self.cpus()?;
        self.shared.lock().meta.cpus = cpus.clone();
        self.read_frontier = ReadFrontier::new(&cpus);
        sysinfo::copy_formats(&dir, &instance_events, &self.events)?;
        if let Some(u) = &self.uprobes {
            u.write_markers(&dir)?;
        }
        sysinfo::write_kallsyms(&dir)?;
        for &cpu in &cpus {
            sysinfo::create_dir_private(&tracedir::cpu_dir(&dir, cpu))?;
        }
        let header_page_path = instance_events.join("header_page");
        let header_page = HeaderPage::parse(&tracefs::read(&header_page_path)?).map_err(|e| {
            RecordError::Parse {
                path: header_page_path.clone(),
                reason: e.to_string(),
            }
        })?;
        self.chunk_pages = self.config.chunk_pages;
        let files_budget = match self.config.ring_size {
            Some(size) if self.config.track_files => Some(fds::files_reserve(size)),
            _ => None,
        };
        if let Some(size) = self.config.ring_size {
            // The side files and meta.json (rewritten as it grows) count against the cap.
            let side = sysinfo::dir_bytes(&dir)
                + RING_META_RESERVE
                + PROC_JSON_RESERVE
                + files_budget.unwrap_or(0)
                + perf::PerfRecorder::reserve(&self.config.perf, Some(size));
            let budget = size.saturating_sub(side);
            let per_chunk_min =
                (MIN_CHUNKS_PER_CPU * cpus.len().max(1) as u64) * self.page_size as u64;
            if budget < per_chunk_min * 4 {
                return Err(RecordError::RingTooSmall {
                    size,
                    needed: side + per_chunk_min * 4,
                });
            }
            // Chunks are counted at their raw size here (compression only helps): each CPU
            // can hold MIN_CHUNKS_PER_CPU of them.
            let max_pages = budget / per_chunk_min;
            self.chunk_pages = self
                .chunk_pages
                .min(max_pages.min(u32::MAX as u64) as u32)
                .max(4);
            self.shared.set_ring(size, side, self.chunk_pages);
        }
        self.shared.reserve_meta_room(RING_META_RESERVE);

        // Readers first, so their threads exist when the exclusion list is written.
        let mut pipes = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            let path = self.file(&format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
            let pipe = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .map_err(|source| RecordError::io("opening", &path, source))?;
            pipes.push((cpu, pipe, path));
        }
        let fd_scan = self.spawn_fd_tracker(files_budget)?;
        if self.config.drain_priority.priority > 0 {
            // A cgroup that may not run real-time threads would leave the readers to its
            // fair share, which a busy machine does not give them (drainprio.rs).
            match super::drainprio::RtGroupGrant::ensure() {
                Ok(grant) => self.rt_grant = grant,
                Err(why) => tracing::warn!(
                    "cannot give the recorder's cgroup a real-time budget ({why}); on a busy \
                     machine the kernel may lose events"
                ),
            }
        }
        self.spawn_readers(pipes, header_page, fd_scan)?;

        self.exclude_own_threads()?;
        for event in &self.events {
            if event != PRINT_EVENT {
                tracefs::write(&instance_events.join(event).join("enable"), "1")?;
            }
        }

        self.perf = perf::start_if_enabled(
            &self.config.perf,
            &dir,
            &self.config.tracefs,
            self.config.flush_interval,
            self.config.ring_size,
            self.config.perf_tap.clone(),
        )?;
        {
            let mut shared = self.shared.lock();
            shared.meta.start_ns = sysinfo::monotonic_ns();
            shared.meta.wall_offset_ns = Some(sysinfo::wall_offset_ns());
        }
        self.started = Instant::now();
        tracefs::write(&self.file("tracing_on"), "1")?;
        if let Some(start) = self.fd_start.take() {
            let _ = start.send(self.shared.lock().meta.start_ns);
        }
        self.set_copy_markers(true)?;
        self.shared.write_meta()?;
        tracing::info!(
            instance = %self.instance_name,
            dir = %dir.display(),
            marker = %self.marker_path.display(),
            copies_top_level_markers = self.copies_markers,
            "tracing on; applications write markers to {}",
            self.marker_path.display()
        );

        let threads = sysinfo::scan_threads();
        sysinfo::write_proc(&dir, &threads)?;

        if let Some(argv) = self.config.command.clone() {
            let to_stderr = self.config.command_stdout_to_stderr;
            let child = match self.perf.as_mut() {
                Some(p) => p.spawn_command(&argv, to_stderr)?,
                None => spawn(&argv, to_stderr)?,
            };
            self.shared.lock().meta.command_pid = Some(child.id() as i32);
            self.child = Some(child);
            self.shared.write_meta()?;
        }
        Ok(())
    }

    /// Sets `options/copy_trace_marker` (6.17+), so writes to the top-level `trace_marker`
    /// reach this instance too. It is only on while tracing is: the kernel fails a top-level
    /// marker write with `EBADF` when any instance it copies into has tracing off (seen on
    /// 6.18), which would break other programs' markers during our setup and drain.
    fn set_copy_markers(&mut self, on: bool) -> Result<(), RecordError> {
        if on {
            let copy = self.file("options/copy_trace_marker");
            if self.config.copy_top_level_markers
                && self.events.iter().any(|e| e == PRINT_EVENT)
                && copy.exists()
            {
                tracefs::write_checked(&copy, "1")?;
                self.copies_markers = true;
            }
        } else if self.copies_markers {
            self.copies_markers = false;
            tracefs::write(&self.file("options/copy_trace_marker"), "0")?;
        }
        Ok(())
    }

    /// A file of the instance.
    fn file(&self, relative: &str) -> PathBuf {
        self.instance_dir.join(relative)
    }

    /// Online CPUs that have a per-CPU directory in the instance.
    fn cpus(&self) -> Result<Vec<u32>, RecordError> {
        Ok(tracefs::online_cpus()?
            .into_iter()
            .filter(|cpu| {
                self.file(&format!("per_cpu/cpu{cpu}/trace_pipe_raw"))
                    .exists()
            })
            .collect())
    }

    /// Starts the fd-tracker thread (before the exclusion list is written, so it is hidden
    /// too); returns the page scan for the readers.
    fn spawn_fd_tracker(
        &mut self,
        budget: Option<u64>,
    ) -> Result<Option<fds::PageScan>, RecordError> {
        if !self.config.track_files {
            return Ok(None);
        }
        let events_dir = tracedir::formats_dir(&self.config.output_dir).join("events");
        let formats =
            crate::format::FormatSet::load_dir(&events_dir).map_err(|e| RecordError::Parse {
                path: events_dir.clone(),
                reason: e.to_string(),
            })?;
        let (start_tx, start_rx) = crossbeam_channel::bounded(1);
        let tracker = fds::FdTracker::new(
            &self.config.output_dir,
            &formats,
            start_rx,
            self.config.flush_interval,
            budget,
            self.config.files_tap.clone(),
        );
        let scan = tracker.scan();
        let handle = std::thread::Builder::new()
            .name("argus-rec-fd".into())
            .spawn(move || tracker.run())
            .map_err(|source| RecordError::Sys {
                call: "pthread_create",
                source,
            })?;
        self.fd_tracker = Some(handle);
        self.fd_start = Some(start_tx);
        Ok(Some(scan))
    }

    fn spawn_readers(
        &mut self,
        pipes: Vec<(u32, File, PathBuf)>,
        header_page: HeaderPage,
        fd_scan: Option<fds::PageScan>,
    ) -> Result<(), RecordError> {
        let (tid_tx, tid_rx) = crossbeam_channel::unbounded();
        for (cpu, pipe, pipe_path) in pipes {
            let reader = Reader {
                cpu,
                pipe,
                pipe_path,
                page_size: self.page_size,
                chunk_pages: self.chunk_pages as usize,
                out_dir: self.config.output_dir.clone(),
                flush_interval: self.config.flush_interval,
                drain: self.drain.clone(),
                wake_fd: self.wake.as_raw_fd(),
                shared: self.shared.clone(),
                header_page,
                tap: self.config.tap.clone(),
                tap_dropped: self.tap_dropped.clone(),
                tap_behind: false,
                frontier: self.read_frontier.clone(),
                pending_frontier: None,
                fd_scan: fd_scan.clone(),
                priority: self.config.drain_priority,
            };
            let tid_tx = tid_tx.clone();
            let bell = self.bell.clone();
            let handle = std::thread::Builder::new()
                .name(format!("argus-rec-cpu{cpu}"))
                .spawn(move || {
                    let ended = reader.run(move || {
                        // SAFETY: gettid has no preconditions.
                        let _ = tid_tx.send(unsafe { libc::gettid() });
                    });
                    // A reader ends early only on an error: the control loop closes.
                    bell.ring();
                    ended
                })
                .map_err(|source| RecordError::Sys {
                    call: "pthread_create",
                    source,
                })?;
            self.readers.push((cpu, handle));
        }
        drop(tid_tx);
        // Wait until every reader thread runs, so /proc/self/task lists it.
        for _ in 0..self.readers.len() {
            let _ = tid_rx.recv();
        }
        Ok(())
    }

    /// Adds threads of this process not yet in `set_event_notrace_pid` (the first call
    /// replaces the list, later calls append), reports them and those gone since the last
    /// look ([`RecordConfig::own_threads`]), and rewrites the list without the gone ones when
    /// one of their tids may soon be reused (see [`RELIST_EVERY`]). Says whether it found a
    /// thread new or gone.
    fn exclude_own_threads(&mut self) -> Result<bool, RecordError> {
        let alive = own_tids()?;
        // Taken after the look: every thread not seen in it had exited by now.
        let now = sysinfo::monotonic_ns();
        let new: Vec<i32> = alive.difference(&self.hidden).copied().collect();
        let gone: Vec<i32> = self.hidden.difference(&alive).copied().collect();
        let path = self.file("set_event_notrace_pid");
        let joined = |tids: &mut dyn Iterator<Item = &i32>| {
            tids.map(i32::to_string).collect::<Vec<_>>().join(" ")
        };
        let stale = match sysinfo::pid_cursor() {
            // Only when a gone tid may be handed out before the next look.
            Some((last, max)) => self
                .listed
                .iter()
                .filter(|t| !alive.contains(t))
                .any(|&t| reuse_distance(last, t, max) <= reuse_margin(max)),
            None => {
                self.listed.iter().any(|t| !alive.contains(t))
                    && self.listed_at.elapsed() >= RELIST_EVERY
            }
        };
        if self.listed.is_empty() {
            let list = joined(&mut alive.iter());
            tracefs::write(&path, &list)?;
            let own = std::process::id().to_string();
            let read = tracefs::read(&path)?;
            if !read.split_ascii_whitespace().any(|p| p == own) {
                return Err(RecordError::TracefsMismatch {
                    path,
                    expected: list,
                    actual: read.trim().to_string(),
                });
            }
            self.listed = alive.clone();
            self.listed_at = Instant::now();
            tracing::debug!(tids = %list, "excluded own threads from tracing");
        } else if stale {
            let list = joined(&mut alive.iter());
            // Records of any task may be dropped while the kernel re-registers its filter
            // (see RELIST_EVERY): the stretch is a possible loss on every CPU, in `meta.json`
            // as the kernel's losses are and for the live consumer through the read
            // frontier, so no edge is made across it.
            let from = sysinfo::monotonic_ns();
            self.read_frontier.hold(from);
            let written = tracefs::write(&path, &list);
            let to = sysinfo::monotonic_ns() + RELIST_SETTLE_NS;
            // A live consumer takes it as a gap before it releases any record after `from`.
            self.read_frontier.release_with_gap(from, to);
            written?;
            for &(cpu, _) in &self.readers {
                self.shared.lost(
                    cpu,
                    LostRange {
                        from_ns: from,
                        to_ns: to,
                        events: None,
                    },
                );
            }
            self.listed = alive.clone();
            self.listed_at = Instant::now();
            tracing::debug!(
                tids = %list,
                from,
                to,
                "relisted own threads (gone ones dropped): a possible loss on every CPU"
            );
        } else {
            let unlisted: Vec<i32> = alive.difference(&self.listed).copied().collect();
            if !unlisted.is_empty() {
                let list = joined(&mut unlisted.iter());
                tracefs::append(&path, &list)?;
                self.listed.extend(unlisted);
                tracing::debug!(tids = %list, "excluded own threads from tracing");
            }
        }
        if let Some(tx) = &self.config.own_threads {
            for &tid in &new {
                let _ = tx.try_send(OwnThread::Hidden(tid));
            }
            for &tid in &gone {
                let _ = tx.try_send(OwnThread::Gone {
                    tid,
                    noticed_ns: now,
                });
            }
        }
        self.excluded.extend(&new);
        self.hidden = alive;
        Ok(!new.is_empty() || !gone.is_empty())
    }

    /// Tracing is off: reports the hidden threads gone since the last look
    /// ([`RecordConfig::own_threads`]), so a consumer can close them before the end.
    fn report_gone_threads(&mut self) {
        let Some(tx) = &self.config.own_threads else {
            return;
        };
        let Ok(alive) = own_tids() else {
            return;
        };
        let now = sysinfo::monotonic_ns();
        for &tid in self.hidden.difference(&alive) {
            let _ = tx.try_send(OwnThread::Gone {
                tid,
                noticed_ns: now,
            });
        }
        self.hidden = alive;
    }

    /// The command's exit status once it has exited.
    fn poll_command(&mut self) -> Result<Option<i32>, RecordError> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        match child.try_wait() {
            Ok(Some(status)) => Ok(Some(exit_code(status))),
            Ok(None) => Ok(None),
            Err(source) => Err(RecordError::Sys {
                call: "waitpid",
                source,
            }),
        }
    }

    /// Terminates a still-running command: SIGTERM, then SIGKILL after the grace period.
    fn finish_command(&mut self) -> Option<i32> {
        if self.command_status.is_some() {
            return self.command_status;
        }
        let child = self.child.as_mut()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(exit_code(status));
        }
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + COMMAND_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => return Some(exit_code(status)),
                Ok(None) => std::thread::sleep(CONTROL_TICK),
                Err(_) => return None,
            }
        }
        let _ = child.kill();
        child.wait().ok().map(exit_code)
    }

    /// Tells the readers to drain and wakes them from poll.
    fn signal_drain(&self) {
        self.drain.store(true, Ordering::SeqCst);
        control::ring(self.wake.as_raw_fd());
    }

    fn close(mut self, reason: StopReason) -> Result<RecordSummary, RecordError> {
        let command_status = self.finish_command();
        self.command_status = command_status;
        let mut first_error = self.set_copy_markers(false).err();
        let instance = self.instance.take();
        if let Some(instance) = &instance {
            if let Err(err) = tracefs::write(&instance.file("tracing_on"), "0") {
                first_error.get_or_insert(err);
            }
        }
        self.report_gone_threads();
        let end_ns = sysinfo::monotonic_ns();
        let duration = self.started.elapsed();
        let perf_summary = match self.perf.take().map(perf::PerfRecorder::stop) {
            Some(Ok(s)) => Some(s),
            Some(Err(err)) => {
                first_error.get_or_insert(err);
                None
            }
            None => None,
        };
        self.signal_drain();
        let mut cpus = BTreeMap::new();
        for (cpu, handle) in std::mem::take(&mut self.readers) {
            match handle.join() {
                Ok(Ok(stats)) => {
                    cpus.insert(
                        cpu,
                        CpuSummary {
                            pages: stats.pages,
                            chunks: stats.chunks,
                            compressed_bytes: stats.compressed_bytes,
                            lost: stats.page_lost,
                            dropped_chunks: 0,
                            tap_dropped: stats.tap_dropped,
                            unwritten: stats.unwritten,
                        },
                    );
                }
                Ok(Err(err)) => {
                    first_error.get_or_insert(err);
                }
                Err(_) => {
                    first_error.get_or_insert(RecordError::ReaderPanicked { cpu });
                }
            }
        }
        // No real-time thread is left in the group: its budget can be taken back.
        self.rt_grant = None;
        // The readers held the tracker's channel: it drains what they sent and ends.
        self.fd_start = None;
        if let Some(handle) = self.fd_tracker.take() {
            match handle.join() {
                Ok(Ok(stats)) => tracing::debug!(?stats, "fd tracker"),
                Ok(Err(err)) => {
                    first_error.get_or_insert(err);
                }
                Err(_) => tracing::warn!("the fd tracker panicked; files/ may be incomplete"),
            }
        }
        if let Some(instance) = &instance {
            for (cpu, summary) in cpus.iter_mut() {
                match tracefs::lost_events(&instance.file(&format!("per_cpu/cpu{cpu}/stats"))) {
                    Ok(lost) => summary.lost = summary.lost.max(lost),
                    Err(err) => {
                        first_error.get_or_insert(err);
                    }
                }
            }
        }
        // rmdir now that every descriptor into the instance is closed.
        drop(instance);
        self.uprobes = None;
        self.signals = None;
        if let Some(err) = first_error {
            return Err(err);
        }

        for (cpu, dropped) in self.shared.dropped_chunks() {
            if let Some(summary) = cpus.get_mut(&cpu) {
                summary.dropped_chunks = dropped;
            }
        }
        let lost: BTreeMap<u32, u64> = cpus.iter().map(|(&c, s)| (c, s.lost)).collect();
        let (start_ns, command_pid, lost_ranges) = {
            let mut st = self.shared.lock();
            st.meta.status = "complete".to_string();
            st.meta.end_ns = end_ns;
            st.meta.excluded_tids = self.excluded.iter().copied().collect();
            st.meta.lost = lost.clone();
            st.meta.chunks = cpus.iter().map(|(&c, s)| (c, s.chunks)).collect();
            st.meta.command_status = command_status;
            st.ext.tap_dropped = cpus
                .iter()
                .filter(|(_, s)| s.tap_dropped > 0)
                .map(|(&c, s)| (c, s.tap_dropped))
                .collect();
            (
                st.meta.start_ns,
                st.meta.command_pid,
                st.ext.lost_ranges.clone(),
            )
        };
        self.shared.write_meta()?;
        self.shared.release_meta_room();
        sysinfo::sync_dir(&self.config.output_dir)?;

        let pages: u64 = cpus.values().map(|s| s.pages).sum();
        let summary = RecordSummary {
            output_dir: self.config.output_dir.clone(),
            instance: self.instance_name.clone(),
            marker_path: self.marker_path.clone(),
            page_size: self.page_size as u32,
            pages,
            bytes: pages * self.page_size as u64,
            compressed_bytes: cpus.values().map(|s| s.compressed_bytes).sum(),
            cpus,
            lost,
            lost_ranges,
            chunk_bytes_on_disk: self.shared.chunk_bytes(),
            duration,
            start_ns,
            end_ns,
            stop_reason: reason,
            command_pid,
            command_status,
            excluded_tids: self.excluded_tids(),
            perf: perf_summary,
        };
        if summary.lost_total() > 0 {
            tracing::warn!(lost = ?summary.lost, "the kernel lost events: raise buffer_size_kb");
        }
        tracing::info!(?reason, pages, "recording complete");
        Ok(summary)
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if self.instance.is_none() && self.readers.is_empty() {
            return; // closed normally
        }
        let _ = self.set_copy_markers(false);
        if let Some(instance) = &self.instance {
            let _ = fs::write(instance.file("tracing_on"), "0");
        }
        self.signal_drain();
        for (_, handle) in std::mem::take(&mut self.readers) {
            let _ = handle.join();
        }
        self.fd_start = None;
        if let Some(handle) = self.fd_tracker.take() {
            let _ = handle.join();
        }
        if let Some(child) = self.child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                // SAFETY: kill has no memory-safety preconditions; the pid is our child.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            }
        }
        // Dropping the instance removes it (readers have closed their descriptors).
        self.instance = None;
        self.uprobes = None;
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

fn spawn(argv: &[String], stdout_to_stderr: bool) -> Result<Child, RecordError> {
    let (program, args) = argv.split_first().ok_or(RecordError::EmptyCommand)?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    if stdout_to_stderr {
        cmd.stdout(stderr_stdio()?);
    }
    cmd.spawn().map_err(|source| RecordError::Spawn {
        command: argv.to_vec(),
        source,
    })
}

/// This process's stderr, for a child's stdout.
pub(crate) fn stderr_stdio() -> Result<std::process::Stdio, RecordError> {
    use std::os::fd::AsFd;
    let fd = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|source| RecordError::Sys {
            call: "dup (stderr)",
            source,
        })?;
    Ok(std::process::Stdio::from(fd))
}

/// Checks the settings; returns the deduplicated event list.
fn validate(config: &RecordConfig) -> Result<Vec<String>, RecordError> {
    if config.chunk_pages == 0 || config.chunk_pages > 65_536 {
        return Err(RecordError::InvalidSetting {
            setting: "chunk_pages",
            value: config.chunk_pages.into(),
            reason: "must be between 1 and 65536",
        });
    }
    if config.buffer_size_kb < 4 {
        return Err(RecordError::InvalidSetting {
            setting: "buffer_size_kb",
            value: config.buffer_size_kb.into(),
            reason: "must be at least 4 (one page)",
        });
    }
    if let Some(command) = &config.command {
        if command.is_empty() {
            return Err(RecordError::EmptyCommand);
        }
    }
    if let Some(name) = &config.instance {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(RecordError::BadInstanceName { name: name.clone() });
        }
    }
    let mut events: Vec<String> = Vec::new();
    for event in &config.events {
        if !valid_event_name(event) {
            return Err(RecordError::BadEventName {
                event: event.clone(),
            });
        }
        if !events.contains(event) {
            events.push(event.clone());
        }
    }
    Ok(events)
}

fn check_root() -> Result<(), RecordError> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(RecordError::NotRoot { euid });
    }
    Ok(())
}

fn check_tracefs(tracefs: &Path) -> Result<(), RecordError> {
    for needed in ["instances", "events/header_page"] {
        let path = tracefs.join(needed);
        if !path.exists() {
            return Err(RecordError::NoTracefs {
                tracefs: tracefs.to_path_buf(),
                missing: path,
            });
        }
    }
    Ok(())
}

/// Checks that the kernel has every event; an absent one of [`OPTIONAL_EVENTS`] is dropped
/// from `events` with a warning.
fn check_events(tracefs: &Path, events: &mut Vec<String>) -> Result<(), RecordError> {
    let needed = |event: &str| {
        let dir = tracefs.join("events").join(event);
        if event == PRINT_EVENT {
            dir.join("format")
        } else {
            dir.join("enable")
        }
    };
    events.retain(|event| {
        let keep = !OPTIONAL_EVENTS.contains(&event.as_str()) || needed(event).exists();
        if !keep {
            tracing::warn!(
                event = event.as_str(),
                "the kernel has no such event: messages through sockets are linked through fd identity only"
            );
        }
        keep
    });
    for event in events.iter() {
        let needed = needed(event);
        if !needed.exists() {
            return Err(RecordError::EventUnavailable {
                event: event.clone(),
                missing: needed,
                tracefs: tracefs.to_path_buf(),
            });
        }
    }
    Ok(())
}

fn instance_name(config: &RecordConfig) -> String {
    if let Some(name) = &config.instance {
        return name.clone();
    }
    let pid = std::process::id();
    match INSTANCE_COUNTER.fetch_add(1, Ordering::SeqCst) {
        0 => format!("{}{pid}", tracefs::INSTANCE_PREFIX),
        n => format!("{}{pid}-{n}", tracefs::INSTANCE_PREFIX),
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// How many pids the kernel hands out after `last` before it gives `tid` again: pids go up
/// from the last one given to `pid_max`, then start again from the bottom (counting from 0
/// here, which errs short: the kernel restarts above its reserved pids).
fn reuse_distance(last: i32, tid: i32, pid_max: i32) -> i64 {
    let (last, tid, max) = (i64::from(last), i64::from(tid), i64::from(pid_max));
    if tid > last {
        tid - last
    } else {
        max - last + tid
    }
}

/// How close (in pids handed out) a gone tid may come before the notrace list is rewritten
/// without it: an eighth of the pid space, at least 1024 — far more than the tasks a machine
/// creates between two looks ([`EXCLUDE_RESCAN`]).
fn reuse_margin(pid_max: i32) -> i64 {
    (i64::from(pid_max) / 8).max(1024)
}

/// The threads of this process (`/proc/self/task`).
fn own_tids() -> Result<BTreeSet<i32>, RecordError> {
    let task_dir = Path::new("/proc/self/task");
    let entries =
        fs::read_dir(task_dir).map_err(|source| RecordError::io("reading", task_dir, source))?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_tid_is_dropped_from_the_list_only_when_its_reuse_comes_near() {
        let max = 32768;
        assert_eq!(reuse_margin(max), 4096);
        assert_eq!(reuse_margin(4096), 1024);
        // Ahead of the last pid: reused once the pids get there.
        assert_eq!(reuse_distance(20_000, 20_500, max), 500);
        // Behind it: only after the wrap.
        assert_eq!(reuse_distance(20_000, 19_000, max), 12_768 + 19_000);
        assert_eq!(reuse_distance(32_000, 400, max), 1_168);
        assert!(reuse_distance(20_000, 23_000, max) <= reuse_margin(max));
        assert!(reuse_distance(20_000, 25_000, max) > reuse_margin(max));
    }

    #[test]
    fn bad_event_names_are_refused_before_touching_the_system() {
        for bad in ["sched", "/x", "x/", "a/b/c", "../x", "sched/.."] {
            let mut config = RecordConfig::new("/nonexistent/argus-test");
            config.events = vec![bad.to_string()];
            let err = validate(&config).expect_err(bad);
            assert!(
                matches!(err, RecordError::BadEventName { .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn settings_are_checked() {
        let mut config = RecordConfig::new("/tmp/x");
        config.chunk_pages = 0;
        assert!(matches!(
            validate(&config),
            Err(RecordError::InvalidSetting {
                setting: "chunk_pages",
                ..
            })
        ));
        let mut config = RecordConfig::new("/tmp/x");
        config.command = Some(Vec::new());
        assert!(matches!(validate(&config), Err(RecordError::EmptyCommand)));
        let mut config = RecordConfig::new("/tmp/x");
        config.instance = Some("a/b".into());
        assert!(matches!(
            validate(&config),
            Err(RecordError::BadInstanceName { .. })
        ));
        let mut config = RecordConfig::new("/tmp/x");
        config.events.push("sched/sched_switch".into());
        assert_eq!(
            validate(&config).expect("valid").len(),
            DEFAULT_EVENTS.len()
        );
    }

    #[test]
    fn event_sets() {
        assert_eq!(
            event_set("default").expect("default").len(),
            DEFAULT_EVENTS.len()
        );
        let full = event_set("full").expect("full");
        assert_eq!(full.len(), DEFAULT_EVENTS.len() + FULL_EXTRA_EVENTS.len());
        assert!(full.iter().any(|e| e == "signal/signal_deliver"));
        let mixed = event_set("sched/sched_switch, default,signal/signal_generate").expect("list");
        assert_eq!(mixed[0], "sched/sched_switch");
        assert_eq!(mixed.len(), DEFAULT_EVENTS.len() + 1);
        for bad in ["", "default,", "sched", "fuller"] {
            assert!(event_set(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("10MB"), Ok(10 << 20));
        for bad in ["", "G", "2X", "-1M", "0"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn missing_tracefs_says_how_to_mount() {
        let err = check_tracefs(Path::new("/nonexistent/tracefs")).expect_err("missing");
        let message = err.to_string();
        assert!(
            message.contains("mount -t tracefs nodev /sys/kernel/tracing"),
            "{message}"
        );
    }

    #[test]
    fn non_empty_output_is_refused() {
        let dir = std::env::temp_dir().join(format!("argus-out-test-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("dir");
        fs::write(dir.join("old"), b"x").expect("file");
        let err = prepare_output(&dir).expect_err("non-empty");
        assert!(err.to_string().contains(&dir.display().to_string()));
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn summary_display() {
        let summary = RecordSummary {
            output_dir: PathBuf::from("/t"),
            instance: "argus-1".into(),
            marker_path: PathBuf::from("/m"),
            page_size: 4096,
            pages: 256,
            bytes: 1 << 20,
            compressed_bytes: 1 << 18,
            cpus: BTreeMap::from([(0, CpuSummary::default())]),
            lost: BTreeMap::from([(0, 3)]),
            lost_ranges: BTreeMap::new(),
            chunk_bytes_on_disk: 1 << 18,
            duration: Duration::from_millis(1500),
            start_ns: 1,
            end_ns: 2,
            stop_reason: StopReason::CommandExited,
            command_pid: Some(7),
            command_status: Some(0),
            excluded_tids: vec![1],
            perf: None,
        };
        assert_eq!(
            summary.to_string(),
            "recorded 256 pages (1.0 MiB, 0.2 MiB compressed) from 1 cpus in 1.50 s into /t; \
             LOST 3 events (cpu0: 3): raise --buffer-kb; command pid 7 exited with 0"
        );
    }
}
