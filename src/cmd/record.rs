//! `argus record`: system-wide kernel events into a trace directory (`docs/trace-dir.md`),
//! for a command, a duration, or until Ctrl-C.

use crate::cli::RecordArgs;
use anyhow::{bail, Context, Result};
use std::time::Duration;

pub(crate) fn record_config(args: &RecordArgs) -> Result<argus_ingest::linux::RecordConfig> {
    let mut cfg = argus_ingest::linux::RecordConfig::new(&args.output);
    cfg.duration = args.duration.map(Duration::from_secs_f64);
    cfg.command = (!args.command.is_empty()).then(|| args.command.clone());
    cfg.buffer_size_kb = args.buffer_kb;
    cfg.drain_priority.priority = args.drain_priority;
    cfg.handle_signals = true;
    cfg.events = argus_ingest::linux::event_set(&args.events).context("--events")?;
    cfg.ring_size = Some(args.ring_size);
    if !(args.flush_interval.is_finite() && args.flush_interval > 0.0) {
        bail!(
            "--flush-interval must be a positive number of seconds, got {}",
            args.flush_interval
        );
    }
    cfg.flush_interval = Some(Duration::from_secs_f64(args.flush_interval));
    if let Some(spec) = &args.stacks {
        cfg.perf.stacks = Some(
            argus_ingest::linux::parse_stacks(spec)
                .map_err(|e| anyhow::anyhow!("--stacks: {e}"))?,
        );
        cfg.perf.stack_bytes = argus_ingest::linux::DEFAULT_STACK_BYTES;
    }
    if let Some(hz) = args.profile {
        cfg.perf.profile_hz = Some(hz);
        cfg.perf.stack_bytes = argus_ingest::linux::DEFAULT_STACK_BYTES;
    }
    for w in &args.watch {
        let spec = argus_ingest::linux::WatchSpec::parse(w)
            .map_err(|e| anyhow::anyhow!("--watch: {e}"))?;
        if spec.process == argus_ingest::linux::WatchProcess::Command && args.command.is_empty() {
            bail!("--watch {w}: `@cmd` needs a command to record (argus record ... -- CMD)");
        }
        cfg.perf.watches.push(spec);
    }
    for p in &args.probe {
        let spec = argus_ingest::linux::DispatchSpec::parse(p).map_err(anyhow::Error::new)?;
        if spec.item_arg.is_some() {
            bail!("--probe {p}: a call probe fetches no work item; `@N` is for --dispatch and --enqueue");
        }
        cfg.probes.push(spec);
    }
    for d in &args.dispatch {
        cfg.dispatch
            .push(argus_ingest::linux::DispatchSpec::parse(d).map_err(anyhow::Error::new)?);
    }
    if !args.enqueue.is_empty() && cfg.dispatch.iter().all(|d| d.item_arg.is_none()) {
        bail!(
            "--enqueue needs a --dispatch BINARY:SYMBOL@N that fetches the same work item: \
             without one no queued item is joined to its run"
        );
    }
    for q in &args.enqueue {
        cfg.enqueue
            .push(argus_ingest::linux::DispatchSpec::parse_enqueue(q).map_err(anyhow::Error::new)?);
    }
    Ok(cfg)
}

pub(crate) fn record(
    args: &RecordArgs,
    announce: bool,
) -> Result<argus_ingest::linux::RecordSummary> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds, got {d}");
        }
    }
    run_recording(record_config(args)?, args, announce)
}

/// Records with `cfg` (made by [`record_config`] from `args`, maybe adjusted).
pub(crate) fn run_recording(
    cfg: argus_ingest::linux::RecordConfig,
    args: &RecordArgs,
    announce: bool,
) -> Result<argus_ingest::linux::RecordSummary> {
    let recorder = argus_ingest::linux::Recorder::new(cfg);
    let recording = recorder
        .start()
        .with_context(|| format!("recording into {}", args.output.display()))?;
    if announce {
        let until = if args.command.is_empty() {
            match args.duration {
                Some(d) => format!("for {d} s"),
                None => "until Ctrl-C".to_string(),
            }
        } else {
            "until the command exits".to_string()
        };
        eprintln!(
            "argus: recording into {} {until}; applications can mark events by writing to {}",
            args.output.display(),
            recording.marker_path().display()
        );
    }
    let summary = recording
        .wait()
        .with_context(|| format!("recording into {}", args.output.display()))?;
    Ok(summary)
}
