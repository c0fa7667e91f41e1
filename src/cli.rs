//! Command-line arguments (clap) and their conversion into the crates' `*Config` structs.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Argus: debug application hangs with interactive causal tracing.
///
/// Exit codes: 0 no hang found (or a command succeeded), 1 a hang was diagnosed, 2 error.
#[derive(Debug, Parser)]
#[command(name = "argus", version, about, long_about = None)]
pub struct Cli {
    /// More log output (repeat for more); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record system-wide kernel events into a trace directory.
    Record(RecordArgs),
    /// Decode a trace, run the dataflow, write a Parquet snapshot.
    Build(BuildArgs),
    /// Find the hang in a process and explain its root cause.
    Debug(DebugArgs),
    /// Write a snapshot (and its diagnosed hang) as Perfetto JSON or Graphviz DOT.
    Export(ExportArgs),
    /// Where the graph is likely wrong, each with the next step (a rule, or what to record)
    /// and what applying it changes.
    Inspect(InspectArgs),
    /// Dig into a vertex: record its thread again with call-stack sampling and compare the
    /// hung run with the normal ones (functions, syscalls).
    Dig(DigArgs),
    /// The continuous job: record, feed the dataflow live, write periodic snapshots.
    Start(StartArgs),
    /// Record a bundled hang, diagnose it and explain it.
    Demo(DemoArgs),
    /// Run a bundled hang workload (used by `demo` and the tests).
    #[command(hide = true)]
    Workload(WorkloadArgs),
    /// Pack a trace directory into one file (how the demo's fallback recording is made).
    #[command(hide = true)]
    Bundle {
        /// The trace directory.
        dir: PathBuf,
        /// The bundle file to write.
        out: PathBuf,
    },
}

impl DebugArgs {
    /// The diagnosis configuration of the flags (threshold, event-loop wait, beam,
    /// `--confirm`).
    pub fn diagnose_config(&self) -> anyhow::Result<argus_diagnose::DiagnoseConfig> {
        let mut cfg = argus_engine::diagnosis::config(
            self.threshold,
            self.loop_wait.as_deref(),
            self.beam,
            self.lookback,
            self.top,
        )?;
        cfg.confirm_recursion = self.confirm;
        Ok(cfg)
    }
}

/// The process or thread a command looks at (`inspect`, `dig`).
#[derive(Clone, Debug, Default, Args)]
pub struct TargetArgs {
    /// Process (its main thread, unless `--tid`).
    #[arg(long)]
    pub pid: Option<i32>,
    /// The thread.
    #[arg(long)]
    pub tid: Option<i32>,
    /// Process name, when the pid is not known.
    #[arg(long)]
    pub comm: Option<String>,
}

impl TargetArgs {
    /// The target in `graph` (`None`: every main thread).
    pub(crate) fn resolve(
        &self,
        graph: &argus_diagnose::Graph,
    ) -> anyhow::Result<Option<argus_diagnose::Target>> {
        argus_engine::diagnosis::resolve_target(graph, self.pid, self.tid, self.comm.as_deref())
    }
}

/// `argus inspect`.
#[derive(Clone, Debug, Args)]
pub struct InspectArgs {
    /// Snapshot directory (or an `argus start` directory: its latest snapshot).
    pub snapshot: PathBuf,
    /// Whose hangs are checked for weak paths (default: every main thread).
    #[command(flatten)]
    pub target: TargetArgs,
    /// Hang threshold in seconds; also the length of a wait worth explaining.
    #[arg(long, default_value_t = 2.0)]
    pub threshold: f64,
    /// Print the suspects as JSON.
    #[arg(long)]
    pub json: bool,
    /// Do not rebuild the snapshot's traces with each suggested rule to show what it changes.
    #[arg(long)]
    pub no_effects: bool,
}

/// `argus dig`.
#[derive(Debug, Clone, Args)]
pub struct DigArgs {
    /// Snapshot directory (or an `argus start` directory: its latest snapshot).
    pub snapshot: PathBuf,
    /// Whose hang to dig into.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Hang threshold in seconds (also in the focused recording).
    #[arg(long, default_value_t = 2.0)]
    pub threshold: f64,
    /// The vertex to dig into, as `tid#seq` (default: the hang's deepest root cause).
    #[arg(long)]
    pub vertex: Option<String>,
    /// Call-stack samples per second of CPU time in the focused recording.
    #[arg(long, default_value_t = 997,
          value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub hz: u32,
    /// Make the focused recording now (the command after `--`, else the command the
    /// snapshot's trace recorded, else system-wide for `--duration`), build it and compare.
    /// Without it (and without `--trace`), the recording is only planned and printed.
    #[arg(long)]
    pub run: bool,
    /// Compare with this focused recording (a trace directory recorded with `--profile`,
    /// e.g. by the printed plan) instead of making one.
    #[arg(long, conflicts_with = "run")]
    pub trace: Option<PathBuf>,
    /// Directory for the focused recording (`trace/`) and its snapshot (`snapshot/`);
    /// default: `argus-dig-TID-UNIXTIME` in the current directory.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Seconds to record when there is no command to run (system-wide, waiting for the hang
    /// to come back).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Print the plan and the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command to record (default: the one the snapshot's trace recorded).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `argus record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Output trace directory (must not exist or be empty).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// What to record and how (shared with `argus start`).
    #[command(flatten)]
    pub recording: RecordingArgs,
    /// Seconds between flushes (and fdatasyncs) of buffered pages to the chunk files.
    #[arg(long, default_value_t = 1.0)]
    pub flush_interval: f64,
    /// The command to record; recording stops when it exits.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// What to record and how: the options `argus record` and `argus start` share, with one
/// meaning (`recording_config` in `cmd/record.rs` applies them).
#[derive(Clone, Debug, Args)]
pub struct RecordingArgs {
    /// Per-CPU ring-buffer size in KiB.
    #[arg(long, default_value_t = 8192)]
    pub buffer_kb: u32,
    /// Real-time (`SCHED_FIFO`) priority of the trace readers while they drain, so a busy
    /// machine does not overrun the kernel's buffer; each reader uses at most half a CPU at
    /// it per 100 ms. 0: normal priority.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=99))]
    pub drain_priority: u8,
    /// Events: `default`, `full` (adds workqueue, timer-wheel and signal events), or a
    /// comma-separated list of `system/event` names and set names.
    #[arg(long, default_value = "default")]
    pub events: String,
    /// Cap on the trace directory (e.g. 512M, 2G): the oldest chunks are deleted to hold it.
    #[arg(long, default_value = "2G", value_parser = argus_ingest::linux::parse_size)]
    pub ring_size: u64,
    /// Record call stacks (kernel + user) with perf. No value (or `default`, `blocking`):
    /// the stack of each thread when it blocks (sched_switch, state S/D) and of each task
    /// when it wakes another (sched_waking). Or a comma-separated list of syscall names or
    /// numbers (`syscalls` = those that block or send; `blocking` may be added): the stack
    /// at every entry of those syscalls (user frames only). `argus build` symbolizes them
    /// into stacks.parquet.
    #[arg(long, num_args = 0..=1, default_missing_value = "default", value_name = "SYSCALLS")]
    pub stacks: Option<String>,
    /// Sample every running thread's call stack (kernel + user) this many times per second
    /// of CPU time (no value: 997), system-wide: where threads spend their CPU, for
    /// `argus dig`'s hung-versus-normal profile.
    #[arg(long, num_args = 0..=1, default_missing_value = "997", value_name = "HZ",
          value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub profile: Option<u32>,
    /// Hardware watchpoint (repeatable): `ADDR|SYMBOL[:LEN]@PID`, or `@cmd` for the
    /// recorded command (`argus record` only); hits become flag_access events (write or read, with thread).
    #[arg(long, value_name = "ADDR|SYMBOL[:LEN]@PID|@cmd")]
    pub watch: Vec<String>,
    /// User-space dispatch function (repeatable): every call of SYMBOL in BINARY (a path,
    /// or a name looked up in PATH) becomes its own segment, through a uprobe and a
    /// uretprobe that record `argus:dispatch-begin/end SYMBOL` markers. `@N`: its Nth
    /// argument is the work item run, joined to the `--enqueue` that queued it.
    #[arg(long, value_name = "BINARY:SYMBOL[@N]")]
    pub dispatch: Vec<String>,
    /// User-space enqueue function (repeatable): every call of SYMBOL in BINARY queues the
    /// work item in its Nth argument (default 1); the `--dispatch …@N` run of the same item
    /// gets a queue edge from the segment that called it.
    #[arg(long, value_name = "BINARY:SYMBOL[@N]")]
    pub enqueue: Vec<String>,
    /// Function whose calls to record (repeatable): every entry and return of SYMBOL in
    /// BINARY becomes an `argus:call-begin/end SYMBOL` marker of the calling thread (a uprobe
    /// and a uretprobe), without a segment of its own; `argus dig` counts them.
    #[arg(long, value_name = "BINARY:SYMBOL")]
    pub probe: Vec<String>,
}

impl Default for RecordingArgs {
    /// The defaults the command line has.
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            recording: RecordingArgs,
        }
        <Defaults as clap::Parser>::parse_from(["argus"]).recording
    }
}

/// `argus start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// The job directory: `trace/` (raw ring), `snapshots/<epoch>/`, `latest`.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Seconds between snapshots [default: 10, and 60 while the machine is quiet]
    ///
    /// A watched thread's new or grown hang takes one at once (at most one extra per half
    /// period). Without this flag a quiet machine (under 5,000 events a second) is
    /// snapshotted every 60 s, which is most of an idle job's cost saved; live queries
    /// always see the newest state. Given, the period holds whatever the load.
    #[arg(long)]
    pub snapshot_every: Option<f64>,
    /// History kept in the dataflow (`90s`, `10m`, `1h`; a bare number is seconds).
    #[arg(long, default_value = "10m")]
    pub retain: String,
    /// Memory the job may hold resident: a size (`4G`, `512M`) or a share of the machine's
    /// memory (`25%`). Past it the job keeps a shorter window than `--retain` (down to 10 s)
    /// and grows it back when memory allows; the raw ring in `DIR/trace` keeps every event.
    #[arg(long, default_value = "25%")]
    pub max_memory: String,
    /// Seconds the watermark stays at least behind the clock. It never passes what the
    /// recorder has read of each CPU either, so a record is not late however long its reader
    /// takes; a larger lag only delays every report.
    #[arg(long, default_value_t = 0.1)]
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
    /// Priority of the job's decoding, dataflow and snapshot threads: `idle` (its decoding,
    /// dataflow and collector at nice 19, its snapshot encoding and live graph in
    /// `SCHED_IDLE`: only CPU time no other thread wants) or a nice value (-20..19; the
    /// background threads 5 below). On a machine whose
    /// CPUs the traced load needs, the live graph lags (counted, visible in the status line)
    /// rather than slowing the load; the recorder keeps its own priority and loses nothing.
    #[arg(long, default_value = "idle", allow_negative_numbers = true, value_parser = argus_engine::priority::parse_job_priority)]
    pub nice: argus_engine::priority::JobPriority,
    /// Stop after this many seconds (default: until SIGINT / SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds between status lines.
    #[arg(long, default_value_t = 5.0)]
    pub status_every: f64,
    /// Sleep this long before installing each snapshot (for crash tests).
    #[arg(long, hide = true, default_value_t = 0)]
    pub snapshot_delay_ms: u64,
    /// Also maintain every hang's backward slice in the live graph the query server reads
    /// (differential `iterate`; costly where many threads sleep longer than the threshold,
    /// see docs/query-protocol.md). Live diagnoses are the same without: the slice only
    /// saves them rounds.
    #[arg(long)]
    pub live_slices: bool,
    /// A rules file (TOML): user segment boundaries and edges, as for `argus build
    /// --rules` (docs/rules.md). Re-read on SIGHUP: the new rules apply to the events the
    /// job handles from then on.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// What to record and how, as for `argus record`.
    #[command(flatten)]
    pub recording: RecordingArgs,
}

/// `argus build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Trace directories written by `argus record`.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Output snapshot directory (replaced atomically if it holds a snapshot).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Dataflow worker threads.
    #[arg(short, long, default_value_t = 1)]
    pub workers: usize,
    /// Events per dataflow epoch.
    #[arg(long, default_value_t = 100_000)]
    pub batch: usize,
    /// Spinning-vertex threshold in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub threshold: f64,
    /// Cluster mode: number of timely processes (see docs/cluster.md).
    #[arg(long, default_value_t = 1)]
    pub processes: usize,
    /// Cluster mode: this process's index (0 feeds the input and writes the snapshot).
    #[arg(long, default_value_t = 0)]
    pub process_id: usize,
    /// Cluster mode: a file with one `host:port` per process, in process order.
    #[arg(long)]
    pub hosts: Option<PathBuf>,
    /// Only the last DURATION of each trace (e.g. 5m, 30s): the tail of a ring, also while
    /// the recorder is still writing it.
    #[arg(long, value_parser = crate::duration::parse_duration)]
    pub last: Option<std::time::Duration>,
    /// A rules file (TOML): user segment boundaries and edges (condition variables, splits,
    /// worker pools, pipes, kernel threads). See `docs/rules.md`.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Print graph statistics (vertices, edges by kind and strength, what the rules split,
    /// pruned, culled and added), like the Argus paper's Table 2.
    #[arg(long)]
    pub stats: bool,
}

/// `argus debug`.
#[derive(Clone, Debug, Args)]
pub struct DebugArgs {
    /// Snapshot directory written by `argus build`.
    pub snapshot: PathBuf,
    /// Process whose main thread hangs.
    #[arg(long)]
    pub pid: Option<i32>,
    /// Thread that hangs (default: the process's main thread).
    #[arg(long)]
    pub tid: Option<i32>,
    /// Process name, when the pid is not known.
    #[arg(long)]
    pub comm: Option<String>,
    /// Never ask: take the default answer at every ambiguity.
    #[arg(long)]
    pub auto: bool,
    /// Answer the questions from this file (one per line: a choice number, `stop` or
    /// `default`; `#` starts a comment).
    #[arg(long, conflicts_with = "auto")]
    pub answers: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// SNAPSHOT is an `argus start` directory: re-diagnose on each new snapshot (its
    /// `latest`) and print what changed, until interrupted.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: stop after this many seconds.
    #[arg(long, requires = "follow")]
    pub follow_for: Option<f64>,
    /// Hang threshold in seconds: a watched thread's segment (or yield loop) longer than this.
    #[arg(long, default_value_t = 2.0)]
    pub threshold: f64,
    /// The watched thread's event-loop wait syscall (default: learned from the trace).
    #[arg(long)]
    pub loop_wait: Option<String>,
    /// Beam width β of the path ranking.
    #[arg(long = "beam", default_value_t = 8)]
    pub beam: usize,
    /// Look-back depth of the beam search (levels expanded before pruning).
    #[arg(long, default_value_t = 2)]
    pub lookback: usize,
    /// How many ranked paths to report.
    #[arg(long, default_value_t = 3)]
    pub top: usize,
    /// Save explicit answers as rules to this file (read first when it exists: its rules
    /// answer questions of the same pattern without asking).
    #[arg(long)]
    pub save_answers: Option<PathBuf>,
    /// Ask before diagnosing each culprit recursively (Algorithm 1, line 19). Without it the
    /// walk recurses on its own and asks only where the graph is ambiguous.
    #[arg(long)]
    pub confirm: bool,
    /// When it froze: the watched thread's hang going on then (else the nearest one) is
    /// diagnosed instead of the longest. A local time (14:03:12, 14:03:12.5), a date and
    /// time (2026-11-27T14:03:12, with Z or +01:00 for another zone), Unix seconds
    /// (@1795788192.5) or a time before the trace's end (-30s, "30s ago").
    #[arg(long, conflicts_with = "follow", allow_hyphen_values = true)]
    pub at: Option<String>,
    /// `--at` on the trace clock, once resolved against the trace (not a flag).
    #[arg(skip)]
    pub at_ns: Option<u64>,
    /// Run the interactive session's commands from this file (one per line, exactly as typed
    /// at the prompt, answers to the walk's questions included), echoing each after the
    /// prompt; the first failing command ends it (exit 2, naming the line). See
    /// docs/session.md.
    #[arg(long, conflicts_with_all = ["follow", "json", "auto", "answers"])]
    pub script: Option<PathBuf>,
    /// Run the interactive session even when standard input is not a terminal (commands are
    /// read from it). On a terminal the session is the default unless --auto, --answers,
    /// --json or --follow asks for a one-shot answer.
    #[arg(long, conflicts_with_all = ["follow", "json", "auto", "answers"])]
    pub session: bool,
    /// Slow requests rather than hangs: the watched threads' round trips to other processes
    /// (a call and its reply) are grouped with their similar ones (same thread name and
    /// wait), and each one at least SECS long (default 0.05) and --slow-factor times its
    /// group's median is diagnosed and compared with a fast one. See docs/slow.md.
    #[arg(
        long,
        value_name = "SECS",
        num_args = 0..=1,
        default_missing_value = "0.05",
        conflicts_with_all = ["follow", "session", "script", "at"]
    )]
    pub slow: Option<f64>,
    /// With --slow: how many times its group's median a request must take to be slow.
    #[arg(long, default_value_t = 5.0, requires = "slow")]
    pub slow_factor: f64,
}

/// `argus demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Use the bundled recording even where live recording is possible.
    #[arg(long)]
    pub bundled: bool,
    /// Keep the trace and snapshot here instead of a temporary directory.
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

/// `argus workload`.
#[derive(Debug, Args)]
pub struct WorkloadArgs {
    /// Which workload (chain, cpu, yield, …: every one is listed in `workloads/`, argus-workloads).
    pub name: String,
    /// How long the hang lasts, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub secs: f64,
}

/// `argus export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Snapshot directory written by `argus build`.
    pub snapshot: PathBuf,
    /// Write Chrome trace-event JSON here (open it in ui.perfetto.dev).
    #[arg(long)]
    pub perfetto: Option<PathBuf>,
    /// Write Graphviz DOT of the diagnosed path here (and an SVG next to it when `dot` is
    /// installed).
    #[arg(long)]
    pub dot: Option<PathBuf>,
    /// Process whose main thread hangs; the Perfetto export keeps only its threads and the
    /// threads on the diagnosed path.
    #[arg(long)]
    pub pid: Option<i32>,
    /// Thread that hangs (default: the process's main thread).
    #[arg(long)]
    pub tid: Option<i32>,
    /// Hang threshold in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub threshold: f64,
}
