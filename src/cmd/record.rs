//! `argus record`: system-wide kernel events into a trace directory (`docs/trace-dir.md`),
//! for a command, a duration, or until Ctrl-C: tracefs and perf on Linux, kdebug on macOS
//! (`docs/kdebug.md`, "Recording on macOS"; type-checked here, never run).

use crate::cli::RecordArgs;
use anyhow::{bail, Result};
#[cfg(target_os = "linux")]
use {anyhow::Context, std::time::Duration};

/// `argus record`: records, then prints the summary unless `quiet`.
#[cfg(target_os = "linux")]
pub(crate) fn run(args: &RecordArgs, quiet: bool) -> Result<()> {
    let summary = record(args, true)?;
    if !quiet {
        eprintln!("{summary}");
    }
    Ok(())
}

/// `argus dig --run`'s recording of its plan: the command's output goes to stderr.
#[cfg(target_os = "linux")]
pub(crate) fn record_plan(record: &RecordArgs) -> Result<()> {
    let mut cfg = record_config(record)?;
    cfg.command_stdout_to_stderr = true;
    run_recording(cfg, record, true)?;
    Ok(())
}

/// `argus dig --run` records the kernel with tracefs and perf: Linux only.
#[cfg(not(target_os = "linux"))]
pub(crate) fn record_plan(_: &RecordArgs) -> Result<()> {
    bail!(
        "argus dig --run records with tracefs and perf, on Linux only (this is {}): run \
         the printed commands on a Linux machine, or give --trace",
        std::env::consts::OS
    )
}

/// `argus record` elsewhere than Linux and macOS.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub(crate) fn run(_: &RecordArgs, _: bool) -> Result<()> {
    bail!(
        "argus record records Linux (tracefs) and macOS (kdebug) kernels, not {}: record \
         there and read the trace here with `argus build`",
        std::env::consts::OS
    )
}

#[cfg(target_os = "linux")]
pub(crate) fn record_config(args: &RecordArgs) -> Result<argus_ingest::linux::RecordConfig> {
    let mut cfg = argus_ingest::linux::RecordConfig::new(&args.output);
    cfg.duration = args.duration.map(Duration::from_secs_f64);
    cfg.command = (!args.command.is_empty()).then(|| args.command.clone());
    cfg.handle_signals = true;
    if !(args.flush_interval.is_finite() && args.flush_interval > 0.0) {
        bail!(
            "--flush-interval must be a positive number of seconds, got {}",
            args.flush_interval
        );
    }
    cfg.flush_interval = Some(Duration::from_secs_f64(args.flush_interval));
    recording_config(&args.recording, !args.command.is_empty(), &mut cfg)?;
    Ok(cfg)
}

/// Applies the recording options `argus record` and `argus start` share to `cfg`;
/// `command`: a command is recorded (`--watch …@cmd` needs one).
#[cfg(target_os = "linux")]
pub(crate) fn recording_config(
    args: &crate::cli::RecordingArgs,
    command: bool,
    cfg: &mut argus_ingest::linux::RecordConfig,
) -> Result<()> {
    cfg.buffer_size_kb = args.buffer_kb;
    cfg.drain_priority.priority = args.drain_priority;
    cfg.events = argus_ingest::linux::event_set(&args.events).context("--events")?;
    cfg.ring_size = Some(args.ring_size);
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
        if spec.process == argus_ingest::linux::WatchProcess::Command && !command {
            bail!("--watch {w}: `@cmd` needs a command to record (argus record ... -- CMD); name the process with @PID");
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
    Ok(())
}

#[cfg(target_os = "linux")]
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

#[cfg(target_os = "linux")]
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

#[cfg(target_os = "macos")]
pub(crate) use macos::run;

/// `argus record` on macOS: kdebug events through `sysctl(KERN_KDEBUG)` into a ring of V3
/// chunk files (`argus_ingest::macos`). Compiled for macOS only and never run: this project
/// has no macOS machine (README, "What is verified").
#[cfg(target_os = "macos")]
mod macos {
    use crate::cli::RecordArgs;
    use anyhow::{bail, Context, Result};
    use std::process::{Child, Command};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// Set by SIGINT or SIGTERM: the recording stops and closes (kdebug is given back).
    static INTERRUPTED: AtomicBool = AtomicBool::new(false);

    extern "C" fn interrupted(_: libc::c_int) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }

    /// The options that only the Linux recorder has, refused rather than ignored.
    fn linux_only(args: &RecordArgs) -> Result<()> {
        let args = &args.recording;
        let given = [
            ("--stacks", args.stacks.is_some()),
            ("--profile", args.profile.is_some()),
            ("--watch", !args.watch.is_empty()),
            ("--dispatch", !args.dispatch.is_empty()),
            ("--enqueue", !args.enqueue.is_empty()),
            ("--probe", !args.probe.is_empty()),
            ("--events", args.events != "default"),
        ];
        match given.iter().find(|g| g.1) {
            Some((flag, _)) => bail!(
                "{flag} is Linux-only (tracefs, perf, uprobes); kdebug records its own event set"
            ),
            None => Ok(()),
        }
    }

    pub(crate) fn run(args: &RecordArgs, quiet: bool) -> Result<()> {
        linux_only(args)?;
        if let Some(d) = args.duration {
            if !(d.is_finite() && d > 0.0) {
                bail!("--duration must be a positive number of seconds, got {d}");
            }
        }
        if !(args.flush_interval.is_finite() && args.flush_interval > 0.0) {
            bail!(
                "--flush-interval must be a positive number of seconds, got {}",
                args.flush_interval
            );
        }
        let mut cfg = argus_ingest::macos::KdebugConfig::new(&args.output);
        // --buffer-kb: the kernel's buffer, 64 bytes a record.
        cfg.buffer_events = u32::try_from(u64::from(args.recording.buffer_kb) * 1024 / 64)
            .unwrap_or(u32::MAX)
            .max(1);
        cfg.ring_size = Some(args.recording.ring_size);
        cfg.sync_interval = Duration::from_secs_f64(args.flush_interval);
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            let handler: extern "C" fn(libc::c_int) = interrupted;
            unsafe { libc::signal(sig, handler as libc::sighandler_t) };
        }
        // The command starts once kdebug is on: at the collector's first look at `stop`.
        let child: Mutex<Option<std::io::Result<Child>>> = Mutex::new(None);
        let started = Instant::now();
        let limit = args.duration.map(Duration::from_secs_f64);
        let stop = || {
            if INTERRUPTED.load(Ordering::SeqCst) || limit.is_some_and(|l| started.elapsed() >= l) {
                return true;
            }
            if args.command.is_empty() {
                return false;
            }
            let mut c = child.lock().unwrap_or_else(|p| p.into_inner());
            match c.get_or_insert_with(|| {
                Command::new(&args.command[0])
                    .args(&args.command[1..])
                    .spawn()
            }) {
                Ok(ch) => !matches!(ch.try_wait(), Ok(None)),
                Err(_) => true,
            }
        };
        if !quiet {
            eprintln!("argus: recording kdebug into {}", args.output.display());
        }
        let mut sys = argus_ingest::macos::Sysctl::new();
        let summary = argus_ingest::macos::record(&mut sys, &cfg, &stop)
            .with_context(|| format!("recording into {}", args.output.display()))?;
        if let Some(c) = child.into_inner().unwrap_or_else(|p| p.into_inner()) {
            let mut c = c.with_context(|| format!("starting {}", args.command[0]))?;
            let pid = c.id();
            let _ = c.wait();
            if !quiet {
                eprintln!("argus: the command ran as pid {pid}");
            }
        }
        if !quiet {
            eprintln!(
                "argus: recorded {} kdebug records in {} chunk files ({} CPUs lost records)",
                summary.events,
                summary.chunks,
                summary.lost.len()
            );
        }
        Ok(())
    }
}
