//! The `argus` binary: clap arguments → the crates' configs, and the glue between them
//! (ingest → pipeline → sinks → diagnose). Exit codes: 0 no hang (or success), 1 hang
//! diagnosed, 2 error.

mod cli;
mod cmd;
mod duration;
mod moment;
mod session;

use anyhow::{Context, Result};
use argus_engine::memory;
use clap::Parser;
use cli::{Cli, Command};
#[cfg(target_os = "linux")]
use cmd::start;
use cmd::{build, bundle, debug, demo, dig, export, follow, inspect, record};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("argus: error: {}", chain_message(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes joined by ": ", each cause left out when the message already
/// ends with it (a library error that prints its source, as `writing FILE: No space left
/// on device`, and also hands it on as its cause, said it twice).
fn chain_message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
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
        // Colours only on a terminal: a log piped to a file or a supervisor stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Record(args) => {
            record::run(&args, cli.quiet)?;
            Ok(0)
        }
        Command::Build(args) => {
            memory::tune(memory::NEVER_PURGE);
            let cfg = build::config(&args)?;
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
        Command::Inspect(args) => inspect::run(&args),
        Command::Dig(args) => dig::run(&args),
        #[cfg(target_os = "linux")]
        Command::Start(args) => {
            memory::tune(memory::START_PURGE);
            argus_engine::job::run(&start::config(&args)?, cli.quiet)
        }
        #[cfg(not(target_os = "linux"))]
        Command::Start(_) => anyhow::bail!(
            "argus start records the kernel with tracefs, on Linux only (this is {}): record \
             with `argus record` and build with `argus build`",
            std::env::consts::OS
        ),
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
        #[cfg(target_os = "linux")]
        Command::Workload(args) => {
            argus_workloads::run(&args.name, args.secs)?;
            Ok(0)
        }
        #[cfg(not(target_os = "linux"))]
        Command::Workload(_) => anyhow::bail!(
            "the workloads make their hangs with Linux system calls: not on {}",
            std::env::consts::OS
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::chain_message;

    #[test]
    fn a_cause_the_message_already_ends_with_is_said_once() {
        let io = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let said = io.to_string();
        let e = anyhow::Error::new(io)
            .context(format!("writing T/cpu0/000000.chunk.zst: {said}"))
            .context("recording into T");
        assert_eq!(
            chain_message(&e),
            format!("recording into T: writing T/cpu0/000000.chunk.zst: {said}")
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(chain_message(&plain), "outer: inner");
    }
}
