//! `argus demo`: records the bundled hang live (or, where the machine cannot trace, uses the
//! recording shipped in the binary, `demo/README.md`), builds it and explains it.

use crate::cli::DemoArgs;
#[cfg(target_os = "linux")]
use crate::cli::{RecordArgs, RecordingArgs};
use crate::cmd::build;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::PathBuf;

/// The bundled fallback recording of `argus workload chain` (see `demo/README.md`).
const DEMO_BUNDLE: &[u8] = include_bytes!("../../demo/chain.bundle.zst");

pub(crate) fn run(args: &DemoArgs, quiet: bool) -> Result<u8> {
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
        Some(()) => record_chain(&trace, &exe, quiet)?,
        None => {
            std::fs::create_dir_all(&trace)?;
            crate::cmd::bundle::unpack(DEMO_BUNDLE, &trace)
                .context("unpacking the bundled recording")?;
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
    let graph = crate::cmd::debug::load_graph(&snapshot)?;
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

/// Records `argus workload chain` into `trace`: the workload's pid.
#[cfg(target_os = "linux")]
fn record_chain(trace: &std::path::Path, exe: &std::path::Path, quiet: bool) -> Result<i32> {
    eprintln!(
        "argus demo: recording `argus workload chain`: the main thread waits on a worker thread,\n\
         which reads a pipe from a shell that runs `sleep 3` (about 4 s)..."
    );
    let rec = RecordArgs {
        output: trace.to_path_buf(),
        duration: None,
        recording: RecordingArgs::default(),
        flush_interval: 1.0,
        command: vec![
            exe.to_string_lossy().into_owned(),
            "workload".into(),
            "chain".into(),
        ],
    };
    let summary = crate::cmd::record::record(&rec, false)?;
    if !quiet {
        eprintln!("{summary}");
    }
    summary
        .command_pid
        .context("the recorder did not report the workload's pid")
}

/// The demo records live on Linux only ([`argus_ingest::linux::cannot_trace`] says so
/// elsewhere, and the bundled recording is used).
#[cfg(not(target_os = "linux"))]
fn record_chain(_: &std::path::Path, _: &std::path::Path, _: bool) -> Result<i32> {
    anyhow::bail!("recording the kernel needs Linux")
}
