//! The `argus` binary: clap arguments → the crates' configs, and the glue between them
//! (ingest → pipeline → sinks → diagnose). Exit codes: 0 no hang (or success), 1 hang
//! diagnosed, 2 error.

mod cli;
mod cmd;
mod collect;
mod diagnosis;
mod duration;
mod gap_rows;
mod live;
mod progress;

use anyhow::{Context, Result};
use clap::Parser;
use cli::{Cli, Command};
use cmd::{build, bundle, debug, demo, export, follow, record, start};
use std::process::ExitCode;

/// mimalloc, not glibc malloc: see the comment on the dependency in Cargo.toml.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// Memory settings for commands that churn through large buffers, where every fresh page
/// costs the kernel a zeroing (and, on a VM, the host a fault):
///
/// - mimalloc keeps freed memory for `purge_delay_ms` before returning it to the kernel
///   (its default is 10 ms; -1: never): returned memory came back as fresh pages, ~17% of a
///   build's CPU.
/// - no transparent huge pages: mimalloc asks for them on its arenas, and a fresh 2 MB page
///   cost 1.2–2.9 ms to fault on the test VM (its host reclaims freed guest memory) against
///   0.5 ms for 512 small pages. A 17.2M-event build spent 1.5 s of system time with them
///   and 0.5 s without (5 s apart so no run reuses another's pages; user time unchanged).
///
/// One-shot commands (`argus build`) never return memory. The continuous job (`argus
/// start`) returns it after 2 s, so its RSS still falls when the load does: with the 10 ms
/// default, a 25 s profile of its soak at 340k events/s (`cargo bench --bench soak`) spent
/// 23% of the job's CPU zeroing fresh huge pages (14% in the collectors, whose merges
/// allocate and free large runs, 7% in the live graphs' arrangements).
fn tune_memory(purge_delay_ms: i64) {
    // mimalloc's `mi_option_purge_delay` (the same number in its v2 and v3 headers).
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets a process-wide allocator option; mimalloc reads it at each purge and
    // documents -1 as "never purge". No memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, purge_delay_ms as std::ffi::c_long) };
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
            let summary = record::record(&args, true)?;
            if !cli.quiet {
                eprintln!("{summary}");
            }
            Ok(0)
        }
        Command::Build(args) => {
            tune_memory(-1);
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
        Command::Debug(args) => debug::run(&args),
        Command::Export(args) => export::run(&args),
        Command::Start(args) => {
            tune_memory(2000);
            start::run(&start::StartConfig::from_args(&args)?, cli.quiet)
        }
        Command::Demo(args) => demo::run(&args, cli.quiet),
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
