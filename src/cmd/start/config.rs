//! `argus start`'s flags ([`StartArgs`]) and the configuration the job runs with
//! ([`StartConfig`]), including how its own threads are scheduled ([`JobPriority`]).

// Elsewhere than Linux only the arguments serve (`argus start --help` is the same
// everywhere; running says Linux-only).
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use anyhow::{bail, Result};
use argus_pipeline::dataflow::DataflowConfig;
use argus_pipeline::rules::RulesConfig;
use std::path::PathBuf;
use std::time::Duration;
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
    /// Per-CPU ring-buffer size in KiB.
    #[arg(long, default_value_t = 8192)]
    pub buffer_kb: u32,
    /// Real-time (`SCHED_FIFO`) priority of the trace readers while they drain, so a busy
    /// machine does not overrun the kernel's buffer; each reader uses at most half a CPU at
    /// it per 100 ms. 0: normal priority.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=99))]
    pub drain_priority: u8,
    /// Priority of the job's decoding, dataflow and snapshot threads: `idle` (its decoding,
    /// dataflow and collector at nice 19, its snapshot encoding and live graph in
    /// `SCHED_IDLE`: only CPU time no other thread wants) or a nice value (-20..19; the
    /// background threads 5 below). On a machine whose
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
    /// Also maintain every hang's backward slice in the live graph the query server reads
    /// (differential `iterate`; costly where many threads sleep longer than the threshold,
    /// see docs/query-protocol.md). Live diagnoses are the same without: the slice only
    /// saves them rounds.
    #[arg(long)]
    pub live_slices: bool,
}

/// How the job's own threads are scheduled (`--nice`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum JobPriority {
    /// The default: the job's decoding, dataflow and collector at nice 19, its background
    /// threads (snapshot encoding, the live graph) in `SCHED_IDLE`. Under the saturating
    /// load of issue 14 (`cargo bench --bench overhead`, `ARGUS_BENCH_SATURATE`) the load
    /// kept 0.41 of its untraced speed with the whole job in `SCHED_IDLE`, against 0.33 at
    /// nice 10 and 0.39 at nice 19 (15 s runs, `argus record` alone: 0.48): the ping-pong
    /// load is slowed by every wake-up it has to wait for, and only the idle class is
    /// preempted at once. But in the idle class every thread of the job weighs the same, and
    /// nice values do not count there: the snapshot encoding and the live graph (0.3–0.4
    /// CPUs) competed as equals with the decoding and the dataflow whose spins `--follow`
    /// reads. In the soak (300 s, ~290k events/s, one run each) `--follow` reported a new
    /// hang a median 0.63 s after it was detectable with the whole job idle, 0.47 s with
    /// this split (max 2.56 s and 2.19 s), and the marker → snapshot delay's max fell from
    /// 2.19 to 1.34 periods; the load's CPU time was the same (0.72 and 0.71 CPUs).
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
pub(crate) fn parse_job_priority(s: &str) -> Result<JobPriority, String> {
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
    /// What the job may hold resident, bytes (`--max-memory`).
    pub max_memory: u64,
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
    /// The live graph maintains the hangs' backward slices (`--live-slices`).
    pub live_slices: bool,
}

pub(crate) fn positive_secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0) {
        bail!("{name} must be a positive number of seconds, got {v}");
    }
    Ok(Duration::from_secs_f64(v))
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
            retain: crate::duration::parse_duration(&a.retain)
                .map_err(|e| anyhow::anyhow!("--retain: {e}"))?,
            lag,
            max_memory: super::budget::MemoryBudget::parse(&a.max_memory)
                .map_err(|e| anyhow::anyhow!("--max-memory: {e}"))?
                .limit()
                .unwrap_or(u64::MAX),
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
            live_slices: a.live_slices,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

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
}
