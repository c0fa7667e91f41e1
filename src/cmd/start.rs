//! `argus start`: its flags (`StartArgs`, in `cli.rs`) into the continuous job's configuration
//! ([`argus_engine::job::StartConfig`]), then the job (`argus_engine::job::run`).
//! Linux-only (`argus start --help` is the same everywhere).

#![cfg(target_os = "linux")]

use crate::cli::StartArgs;
use anyhow::{bail, Result};
use argus_engine::job::StartConfig;
use std::time::Duration;

/// Seconds between snapshots without `--snapshot-every`.
const SNAPSHOT_EVERY: f64 = 10.0;

/// Between snapshots on a quiet machine without `--snapshot-every` (`cycle.rs`).
const QUIET_SNAPSHOT_EVERY: Duration = Duration::from_secs(60);

fn positive_secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0) {
        bail!("{name} must be a positive number of seconds, got {v}");
    }
    Ok(Duration::from_secs_f64(v))
}

/// The job `a` asks for.
pub fn config(a: &StartArgs) -> Result<StartConfig> {
    if a.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if a.keep == 0 {
        bail!("--keep must be at least 1");
    }
    let lag = positive_secs("--lag", a.lag)?;
    let snapshot_every = positive_secs(
        "--snapshot-every",
        a.snapshot_every.unwrap_or(SNAPSHOT_EVERY),
    )?;
    let threshold = positive_secs("--threshold", a.threshold)?;
    if let Some(file) = &a.rules {
        argus_engine::setup::apply_rules_file(&mut Default::default(), file)?;
    }
    // The job's ring in DIR/trace; its directory, tap and flushes are the job's own.
    let mut record = argus_ingest::linux::RecordConfig::new(a.output.join("trace"));
    super::record::recording_config(&a.recording, false, &mut record)?;
    Ok(StartConfig {
        dir: a.output.clone(),
        snapshot_every,
        quiet_snapshot_every: match a.snapshot_every {
            Some(_) => snapshot_every,
            None => QUIET_SNAPSHOT_EVERY,
        },
        retain: crate::duration::parse_duration(&a.retain)
            .map_err(|e| anyhow::anyhow!("--retain: {e}"))?,
        lag,
        max_memory: argus_engine::job::MemoryBudget::parse(&a.max_memory)
            .map_err(|e| anyhow::anyhow!("--max-memory: {e}"))?
            .limit()
            .unwrap_or(u64::MAX),
        keep: a.keep,
        on_hang: a.on_hang.clone(),
        watch_pids: a.watch_pid.clone(),
        watch_comms: a.watch_comm.clone(),
        dataflow: argus_pipeline::dataflow::DataflowConfig {
            // The rules file goes on top of what the job learns from the recordings when
            // it starts (and again on SIGHUP): here it is only checked.
            rules: argus_engine::setup::user_rules(threshold.as_nanos() as u64, None)?,
            workers: a.workers,
            ..Default::default()
        },
        record,
        rules_file: a.rules.clone(),
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
