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

/// `argus record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Output trace directory (must not exist or be empty).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Per-CPU ring-buffer size in KiB.
    #[arg(long, default_value_t = 8192)]
    pub buffer_kb: u32,
    /// The command to record; recording stops when it exits.
    #[arg(last = true)]
    pub command: Vec<String>,
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
}

/// `argus debug`.
#[derive(Debug, Args)]
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
    /// Which workload (chain, cpu, yield).
    pub name: String,
    /// How long the hang lasts, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub secs: f64,
}
