//! `argus debug SNAPSHOT --pid P`: find the hang, walk the graph back, ask where it is
//! ambiguous, print the report (`--follow`: `src/cmd/follow.rs`). Also loads a snapshot into the
//! diagnosis graph for `export` and `follow`.

use crate::cli::DebugArgs;
use crate::{export, follow};
use anyhow::{Context, Result};
use argus_engine::live;
use std::io::Write;
use std::path::Path;

/// A snapshot as the diagnosis graph (with its stacks and application events).
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

pub(crate) fn run(args: &DebugArgs) -> Result<u8> {
    if crate::session::wanted(args) {
        // The session works on a snapshot (a job directory's latest).
        let snapshot = follow::resolve_snapshot(&args.snapshot)?;
        let mut graph = load_graph(&snapshot)?;
        export::attach_app_events(&mut graph, &snapshot)?;
        return crate::session::run(args, &snapshot, graph);
    }
    let dir = &args.snapshot;
    // Slow requests are looked for in a snapshot (a job directory's latest).
    let job_dir = args.slow.is_none()
        && !dir.join(argus_sinks::MANIFEST_FILE).is_file()
        && (dir.join(live::SOCKET).exists() || dir.join("latest").exists());
    if job_dir && !args.follow {
        match live::client::connect(dir)? {
            live::client::Connect::Job(mut client) => match run_live(args, &mut client)? {
                Some(code) => return Ok(code),
                None => {
                    let snapshot = follow::resolve_snapshot(dir)?;
                    eprintln!(
                        "argus debug: the job running in {} has no live graph to answer from: answered from snapshot {}",
                        dir.display(),
                        snapshot.display()
                    );
                }
            },
            live::client::Connect::NoJob(why) => {
                let snapshot = follow::resolve_snapshot(dir)?;
                eprintln!(
                    "argus debug: no job is running in {} ({why}): answered from snapshot {}",
                    dir.display(),
                    snapshot.display()
                );
            }
        }
    }
    let snapshot = follow::resolve_snapshot(&args.snapshot)?;
    if let Some(secs) = args.slow {
        return run_slow(args, &snapshot, secs);
    }
    let mut args = args.clone();
    if args.at.is_some() {
        let m = argus_sinks::Manifest::read(&snapshot)
            .with_context(|| format!("reading snapshot {}", snapshot.display()))?;
        resolve_at(
            &mut args,
            m.trace_start_ns.unwrap_or_default(),
            m.trace_end_ns.unwrap_or_default(),
            m.wall_offset_ns,
        )?;
    }
    let args = &args;
    let mut graph = load_graph(&snapshot)?;
    export::attach_app_events(&mut graph, &snapshot)?;
    let target =
        argus_engine::diagnosis::resolve_target(&graph, args.pid, args.tid, args.comm.as_deref())?;
    let diagnosis = export::diagnose_with(args, &graph, target)?;
    print(args, &diagnosis)
}

/// `--slow`: the slow requests of the watched threads, diagnosed; exit 1 when there is one.
fn run_slow(args: &DebugArgs, snapshot: &Path, secs: f64) -> Result<u8> {
    if !(secs.is_finite() && secs > 0.0) {
        anyhow::bail!("--slow must be a positive number of seconds, got {secs}");
    }
    if !(args.slow_factor.is_finite() && args.slow_factor > 1.0) {
        anyhow::bail!(
            "--slow-factor must be a number above 1, got {}",
            args.slow_factor
        );
    }
    let mut graph = load_graph(snapshot)?;
    export::attach_app_events(&mut graph, snapshot)?;
    let (tids, subject) =
        argus_engine::diagnosis::slow_threads(&graph, args.pid, args.tid, args.comm.as_deref())?;
    let slow = argus_diagnose::SlowConfig {
        factor: args.slow_factor,
        min_ns: (secs * 1e9) as u64,
        ..argus_diagnose::SlowConfig::default()
    };
    let found = export::with_oracle(args, |oracle, config| {
        Ok(argus_diagnose::slow::slow_requests(
            &graph, &tids, oracle, config, &slow,
        )?)
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &found)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", found.to_text(&subject))?;
    }
    out.flush()?;
    Ok(u8::from(found.found > 0))
}

/// Resolves `--at` (if given) to `args.at_ns` for a trace spanning `start..=end` with the
/// wall-clock offset `wall`; says on stderr which moment it took.
fn resolve_at(
    args: &mut DebugArgs,
    start: argus_schema::Nanos,
    end: argus_schema::Nanos,
    wall: Option<i64>,
) -> Result<()> {
    let Some(text) = &args.at else {
        return Ok(());
    };
    let at = crate::moment::parse(text)
        .and_then(|m| crate::moment::resolve(m, start, end, wall))
        .map_err(|e| anyhow::anyhow!(e))?;
    let local = match wall {
        Some(w) => format!(
            "{} local time, ",
            crate::moment::local_text(i128::from(at.0) + i128::from(w))
        ),
        None => String::new(),
    };
    eprintln!(
        "argus debug: --at {text}: {local}{:.3} s before the trace's end (trace time {} ns)",
        end.0 as f64 / 1e9 - at.0 as f64 / 1e9,
        at.0
    );
    args.at_ns = Some(at.0);
    Ok(())
}

/// Prints the report (text and picture, or JSON) and returns the exit code.
fn print(args: &DebugArgs, diagnosis: &argus_diagnose::Diagnosis) -> Result<u8> {
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

/// A diagnosis from a job's live graph, and the epoch it is as of.
pub(crate) struct LiveDiagnosis {
    /// The diagnosis (the whole graph's, as of the epoch).
    pub diagnosis: argus_diagnose::Diagnosis,
    /// The epoch's spins (every spinning vertex, watched or not).
    pub spins: Vec<argus_schema::Spin>,
    /// The global epoch.
    pub epoch: u64,
    /// Its watermark.
    pub watermark_ns: u64,
    /// How much of the graph the rounds read.
    pub stats: argus_diagnose::RoundStats,
}

/// Diagnoses from the live graph of the job answering on `client` and prints the report;
/// `None` when the job has no live graph to answer from (the caller diagnoses the latest
/// snapshot).
fn run_live(args: &DebugArgs, client: &mut live::client::Client) -> Result<Option<u8>> {
    let Some(live) = diagnose_live(args, client)? else {
        return Ok(None);
    };
    eprintln!(
        "argus debug: answered by the job running in {} (its live graph as of epoch {}, watermark {} ns; {} segments read in {} round(s))",
        args.snapshot.display(),
        live.epoch,
        live.watermark_ns,
        live.stats.segments,
        live.stats.rounds
    );
    print(args, &live.diagnosis).map(Some)
}

/// Diagnoses from the live graph of the job answering on `client`: the rounds of
/// `argus_diagnose::partial` on this side (so questions, answers files and saved answers
/// work as with a snapshot), each reading what the walk lacked as of one epoch. When that
/// epoch is compacted away or its generation dropped before the rounds end (a person took
/// long to answer), it starts again at the latest epoch; answers already given are reused.
///
/// `None`: the job has no live graph to answer from (none complete yet, or it fell behind).
pub(crate) fn diagnose_live(
    args: &DebugArgs,
    client: &mut live::client::Client,
) -> Result<Option<LiveDiagnosis>> {
    use live::protocol::Code;
    let mut replay = argus_diagnose::Replay::new();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let first = match client.request("fetch", serde_json::json!({"whole": true}))? {
            Ok(first) => first,
            Err(f) if matches!(f.code, Code::NotReady | Code::Gone) => {
                tracing::info!(
                    "the job running in {} has no live graph to answer from ({f})",
                    args.snapshot.display()
                );
                return Ok(None);
            }
            Err(f) => anyhow::bail!("the job in {}: {f}", args.snapshot.display()),
        };
        let pin = serde_json::json!({
            "epoch": first["epoch"],
            "generation": first["generation"],
        });
        let whole_json = &first["whole"];
        let whole = argus_diagnose::Whole {
            threads: serde_json::from_value(whole_json["threads"].clone())
                .context("the job's threads table")?,
            spins: serde_json::from_value(whole_json["spins"].clone())
                .context("the job's spins")?,
            trace_end_ns: argus_schema::Nanos(first["watermark_ns"].as_u64().unwrap_or(0)),
            lost: serde_json::from_value(whole_json["lost"].clone())
                .context("the job's lost ranges")?,
            // A job from before markers were served has none.
            app: match whole_json.get("app") {
                Some(app) => serde_json::from_value(app.clone())
                    .context("the job's markers and data-flag accesses")?,
                None => Default::default(),
            },
        };
        let seed = live::seed_for(&whole, args.pid, args.tid, args.comm.as_deref());
        // `--at` against the job: its clocks are this machine's, its end the watermark.
        let mut args = args.clone();
        if args.at.is_some() {
            resolve_at(
                &mut args,
                argus_schema::Nanos(0),
                whole.trace_end_ns,
                Some(argus_ingest::linux::wall_offset_ns()),
            )?;
        }
        let args = &args;
        let result = export::with_oracle(args, |oracle, config| {
            argus_diagnose::rounds(
                &whole,
                seed,
                |needs| -> Result<argus_diagnose::Parts> {
                    let mut req = pin.clone();
                    req["needs"] = serde_json::to_value(needs)?;
                    let answer = client.request("fetch", req)??;
                    serde_json::from_value(answer["parts"].clone())
                        .context("the job's parts of the graph")
                },
                |graph| {
                    let target = argus_engine::diagnosis::resolve_target(
                        graph,
                        args.pid,
                        args.tid,
                        args.comm.as_deref(),
                    )?;
                    let mut o = replay.round(graph, &mut *oracle);
                    Ok(argus_diagnose::diagnose(graph, target, &mut o, config)?)
                },
            )
        });
        match result {
            Ok((diagnosis, stats)) => {
                return Ok(Some(LiveDiagnosis {
                    diagnosis,
                    spins: whole.spins,
                    epoch: first["epoch"].as_u64().unwrap_or(0),
                    watermark_ns: whole.trace_end_ns.0,
                    stats,
                }))
            }
            Err(e)
                if attempt < 5
                    && e.downcast_ref::<live::protocol::Failure>()
                        .is_some_and(|f| matches!(f.code, Code::Compacted | Code::Gone)) =>
            {
                tracing::info!("the live graph moved on ({e:#}); asking again");
            }
            Err(e) => return Err(e),
        }
    }
}
