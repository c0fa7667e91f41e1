//! The `argus` binary: clap arguments → the crates' configs, and the glue between them
//! (ingest → pipeline → sinks → diagnose). Exit codes: 0 no hang (or success), 1 hang
//! diagnosed, 2 error.

mod build;
mod build_stacks;
mod bundle;
mod cli;
mod cluster;
mod duration;
mod export;
mod follow;
mod gaps;
mod progress;
mod start;

use anyhow::{bail, Context, Result};
use clap::Parser;
use cli::{Cli, Command, DebugArgs, DemoArgs, RecordArgs};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// mimalloc, not glibc malloc: see the comment on the dependency in Cargo.toml.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The bundled fallback recording of `argus workload chain` (see `demo/README.md`).
const DEMO_BUNDLE: &[u8] = include_bytes!("../demo/chain.bundle.zst");

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("argus: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Memory settings for one-shot commands that churn through large buffers (`argus build`),
/// where every fresh page costs the kernel a zeroing (and, on a VM, the host a fault):
///
/// - mimalloc keeps freed memory instead of returning it to the kernel 10 ms later: returned
///   memory came back as fresh pages, ~17% of a build's CPU.
/// - no transparent huge pages: mimalloc asks for them on its arenas, and a fresh 2 MB page
///   cost 1.2–2.9 ms to fault on the test VM (its host reclaims freed guest memory) against
///   0.5 ms for 512 small pages. A 17.2M-event build spent 1.5 s of system time with them
///   and 0.5 s without (5 s apart so no run reuses another's pages; user time unchanged).
///
/// The continuous job (`argus start`) keeps the defaults so its RSS falls when the load does.
fn tune_memory_for_one_shot() {
    // mimalloc's `mi_option_purge_delay` (the same number in its v2 and v3 headers).
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets a process-wide allocator option; mimalloc reads it at each purge and
    // documents -1 as "never purge". No memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) };
    // SAFETY: PR_SET_THP_DISABLE takes no pointer; it sets a flag of this process's memory
    // map that the kernel checks at each fault (mappings made earlier are covered too).
    // Failure (a kernel without THP) leaves nothing to undo.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                .is_some_and(|k| k == std::io::ErrorKind::BrokenPipe)
    })
}

fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Record(args) => {
            let summary = record(&args, true)?;
            if !cli.quiet {
                eprintln!("{summary}");
            }
            Ok(0)
        }
        Command::Build(args) => {
            tune_memory_for_one_shot();
            let cfg = build::BuildConfig::from_args(&args)?;
            if cfg.dataflow.process_id != 0 {
                build::serve_cluster(&cfg)?;
                return Ok(0);
            }
            let summary = build::build(&cfg)?;
            if !cli.quiet {
                eprintln!("{summary}");
            }
            Ok(0)
        }
        Command::Debug(args) if args.follow => follow::run(&args),
        Command::Debug(args) => debug(&args),
        Command::Export(args) => export::run(&args),
        Command::Start(args) => start::run(&start::StartConfig::from_args(&args)?, cli.quiet),
        Command::Demo(args) => demo(&args, cli.quiet),
        Command::Bundle { dir, out } => {
            let bytes = bundle::pack(&dir)?;
            std::fs::write(&out, &bytes).with_context(|| format!("writing {}", out.display()))?;
            eprintln!(
                "argus: packed {} into {} ({} bytes)",
                dir.display(),
                out.display(),
                bytes.len()
            );
            Ok(0)
        }
        Command::Workload(args) => {
            argus_workloads::run(&args.name, args.secs)?;
            Ok(0)
        }
    }
}

fn record_config(args: &RecordArgs) -> Result<argus_ingest::linux::RecordConfig> {
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
    for w in &args.watch {
        let spec = argus_ingest::linux::WatchSpec::parse(w)
            .map_err(|e| anyhow::anyhow!("--watch: {e}"))?;
        if spec.process == argus_ingest::linux::WatchProcess::Command && args.command.is_empty() {
            bail!("--watch {w}: `@cmd` needs a command to record (argus record ... -- CMD)");
        }
        cfg.perf.watches.push(spec);
    }
    for d in &args.dispatch {
        cfg.dispatch
            .push(argus_ingest::linux::DispatchSpec::parse(d).map_err(anyhow::Error::new)?);
    }
    Ok(cfg)
}

fn record(args: &RecordArgs, announce: bool) -> Result<argus_ingest::linux::RecordSummary> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds, got {d}");
        }
    }
    let cfg = record_config(args)?;
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

pub(crate) fn load_graph(snapshot: &Path) -> Result<argus_diagnose::Graph> {
    let snap = argus_sinks::read_snapshot_tables(snapshot, false)
        .with_context(|| format!("reading snapshot {}", snapshot.display()))?;
    let input = argus_diagnose::GraphInput {
        segments: snap.segments,
        edges: snap.edges,
        spins: snap.spins,
        threads: snap.threads,
        trace_end_ns: snap.manifest.trace_end_ns.unwrap_or_default(),
    };
    let mut graph = argus_diagnose::Graph::new(input)
        .with_context(|| format!("building the event graph of {}", snapshot.display()))?;
    graph.set_lost_ranges(snap.manifest.lost_ranges);
    Ok(graph)
}

fn debug(args: &DebugArgs) -> Result<u8> {
    let snapshot = follow::resolve_snapshot(&args.snapshot)?;
    let mut graph = load_graph(&snapshot)?;
    export::attach_app_events(&mut graph, &snapshot)?;
    let target = match (args.pid, args.tid, &args.comm) {
        (Some(pid), tid, _) => Some(argus_diagnose::Target {
            pid: argus_schema::Pid(pid),
            tid: tid.map(argus_schema::Tid),
        }),
        (None, Some(tid), _) => {
            let tid = argus_schema::Tid(tid);
            let pid = graph
                .pid_of(tid)
                .with_context(|| format!("thread {} is not in the trace", tid.0))?;
            Some(argus_diagnose::Target {
                pid,
                tid: Some(tid),
            })
        }
        (None, None, Some(name)) => Some(
            argus_diagnose::target_by_comm(&graph, name)
                .with_context(|| format!("no process named {name:?} in the trace"))?,
        ),
        (None, None, None) => None,
    };
    if let Some(t) = &target {
        if graph.thread(t.thread()).is_none() && graph.thread_segments(t.thread()).len() == 0 {
            bail!(
                "thread {} (of pid {}) is not in the trace; `argus debug` needs a process that was running while recording",
                t.thread().0,
                t.pid.0
            );
        }
    }
    let diagnosis = export::diagnose_with(args, &graph, target)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &diagnosis.to_json())?;
        writeln!(out)?;
    } else {
        write!(out, "{}", diagnosis.to_text())?;
        if let Some(r) = &diagnosis.report {
            write!(out, "{}", r.to_picture())?;
        }
    }
    out.flush()?;
    Ok(diagnosis.outcome().exit_code())
}

fn demo(args: &DemoArgs, quiet: bool) -> Result<u8> {
    let tmp;
    let dir: PathBuf = match &args.keep {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir().context("creating a temporary directory")?;
            tmp.path().to_path_buf()
        }
    };
    let trace = dir.join("trace");
    let snapshot = dir.join("snapshot");
    let exe = std::env::current_exe().context("locating the argus binary")?;
    let live = if args.bundled {
        None
    } else {
        match argus_ingest::linux::cannot_trace() {
            Some(why) => {
                eprintln!("argus demo: cannot record live ({why}); using the bundled recording");
                None
            }
            None => Some(()),
        }
    };
    let pid = match live {
        Some(()) => {
            eprintln!(
                "argus demo: recording `argus workload chain`: the main thread waits on a worker thread,\n\
                 which reads a pipe from a shell that runs `sleep 3` (about 4 s)..."
            );
            let rec = RecordArgs {
                output: trace.clone(),
                duration: None,
                buffer_kb: 8192,
                drain_priority: 10,
                events: "default".into(),
                ring_size: argus_ingest::linux::DEFAULT_RING_SIZE,
                flush_interval: 1.0,
                stacks: None,
                watch: Vec::new(),
                dispatch: Vec::new(),
                command: vec![
                    exe.to_string_lossy().into_owned(),
                    "workload".into(),
                    "chain".into(),
                ],
            };
            let summary = record(&rec, false)?;
            if !quiet {
                eprintln!("{summary}");
            }
            summary
                .command_pid
                .context("the recorder did not report the workload's pid")?
        }
        None => {
            std::fs::create_dir_all(&trace)?;
            bundle::unpack(DEMO_BUNDLE, &trace).context("unpacking the bundled recording")?;
            let meta = argus_ingest::replay::TraceReader::open(&trace)?
                .meta()
                .clone();
            meta.command_pid
                .context("the bundled recording names no command pid")?
        }
    };
    let cfg = build::BuildConfig {
        traces: vec![trace.clone()],
        output: snapshot.clone(),
        ..build::BuildConfig::default()
    };
    let summary = build::build(&cfg)?;
    if !quiet {
        eprintln!("{summary}");
    }
    let graph = load_graph(&snapshot)?;
    let target = argus_diagnose::Target {
        pid: argus_schema::Pid(pid),
        tid: None,
    };
    let mut oracle = argus_diagnose::AutoOracle;
    let diagnosis = argus_diagnose::diagnose(
        &graph,
        Some(target),
        &mut oracle,
        &argus_diagnose::DiagnoseConfig::default(),
    )?;
    let mut out = std::io::stdout().lock();
    write!(out, "{}", diagnosis.to_text())?;
    if let Some(keep) = &args.keep {
        writeln!(
            out,
            "\nTrace: {}\nSnapshot: {}\nTry: argus debug {} --pid {pid}",
            trace.display(),
            snapshot.display(),
            keep.join("snapshot").display()
        )?;
    }
    out.flush()?;
    match diagnosis.outcome() {
        argus_diagnose::Outcome::HangDiagnosed => Ok(0),
        argus_diagnose::Outcome::NoHang => {
            bail!("the demo hang was not found in the recording (pid {pid})")
        }
    }
}
