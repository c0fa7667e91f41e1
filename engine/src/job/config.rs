//! The configuration a continuous job runs with ([`StartConfig`]); `argus start`'s flags
//! make one.

pub use crate::priority::JobPriority;
use argus_pipeline::dataflow::DataflowConfig;
use std::path::PathBuf;
use std::time::Duration;

/// What `argus start` does.
#[derive(Clone, Debug)]
pub struct StartConfig {
    /// The job directory.
    pub dir: PathBuf,
    /// Between snapshots.
    pub snapshot_every: Duration,
    /// Between snapshots while the machine is quiet (at least `snapshot_every`).
    pub quiet_snapshot_every: Duration,
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
    /// The dataflow, with the user's rules (`setup::user_rules`); what the recordings add
    /// is learned when the job starts (`setup::configure`).
    pub dataflow: DataflowConfig,
    /// What to record and how, as for `argus record` (events, ring buffer and ring size,
    /// the readers' priority, stacks, profile, watchpoints, uprobes); the job sets the
    /// directory, the tap, the flush interval, the duration and the signal handling.
    pub record: argus_ingest::linux::RecordConfig,
    /// The rules file the dataflow's user rules come from (`--rules`), re-read on SIGHUP.
    pub rules_file: Option<PathBuf>,
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
