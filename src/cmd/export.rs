//! `argus export` (Perfetto JSON, Graphviz DOT/SVG) and the diagnosis options of `argus debug`
//! (threshold, event-loop wait, beam search, saved answers, markers).

use crate::cli::{DebugArgs, ExportArgs};
use anyhow::{bail, Context, Result};
use argus_diagnose::{
    AppEvents, AutoOracle, CallStack, DiagnoseConfig, Diagnosis, Frame, Graph, Oracle, Report,
    RuleOracle, SavedAnswers, ScriptedOracle, Target, TerminalOracle,
};
use argus_schema::{Pid, Tid};
use argus_sinks::export::{EdgeMark, Marks, PathMark};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Attaches the snapshot's markers and data-flag accesses (a filtered scan of the events
/// table's `kind` column) and its call stacks (`stacks.parquet`, present when the trace was
/// recorded with `--stacks`) to the graph.
pub fn attach_app_events(graph: &mut Graph, snapshot: &Path) -> Result<()> {
    let events = argus_sinks::export::read_app_events(snapshot)
        .with_context(|| format!("reading markers of {}", snapshot.display()))?;
    graph.set_app_events(AppEvents::from_events(&events));
    let stacks = argus_sinks::read_stacks(snapshot)
        .with_context(|| format!("reading call stacks of {}", snapshot.display()))?;
    if !stacks.is_empty() {
        graph.set_stacks(stacks.into_iter().map(call_stack).collect());
    }
    Ok(())
}

/// A stack of the snapshot as the diagnosis takes it.
fn call_stack(s: argus_sinks::EventStack) -> CallStack {
    CallStack {
        event_seq: s.event_seq,
        tid: Tid(s.tid),
        ts: argus_schema::Nanos(s.ts),
        frames: s
            .frames
            .into_iter()
            .map(|f| Frame {
                kernel: f.kernel,
                ip: f.ip,
                symbol: f.symbol,
                offset: f.offset,
                object: f.object,
            })
            .collect(),
    }
}

/// Runs the diagnosis of `argus debug` with the oracle its flags ask for: scripted answers
/// (`--answers`, either lines or a saved-answers JSON file), the default policy (`--auto`) or
/// the terminal; saved answers (`--save-answers`) are applied first and updated afterwards.
pub fn diagnose_with(args: &DebugArgs, graph: &Graph, target: Option<Target>) -> Result<Diagnosis> {
    with_oracle(args, |oracle, config| {
        Ok(argus_diagnose::diagnose(graph, target, oracle, config)?)
    })
}

/// Runs `run` with the diagnosis configuration and the oracle `argus debug`'s flags ask for
/// (see [`diagnose_with`]); saved answers are read before and written after.
pub fn with_oracle<T>(
    args: &DebugArgs,
    run: impl FnOnce(&mut dyn Oracle, &DiagnoseConfig) -> Result<T>,
) -> Result<T> {
    let mut config = args.diagnose_config()?;
    config.hang.at_ns = args.at_ns.map(argus_schema::Nanos);
    let mut saved = argus_engine::diagnosis::saved_answers(args.save_answers.as_deref())?;
    let mut scripted;
    let mut auto = AutoOracle;
    let stdin = std::io::stdin();
    let mut terminal;
    let inner: &mut dyn Oracle = if let Some(file) = &args.answers {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading answers {}", file.display()))?;
        if text.trim_start().starts_with('{') {
            // A saved-answers file: its rules, then the default policy.
            let rules = SavedAnswers::parse(&text)
                .with_context(|| format!("parsing answers {}", file.display()))?;
            saved.merge(&rules);
            &mut auto
        } else {
            scripted = ScriptedOracle::parse(&text)
                .with_context(|| format!("parsing answers {}", file.display()))?;
            &mut scripted
        }
    } else if args.auto {
        &mut auto
    } else {
        // Questions go to stderr and answers come from stdin, a terminal or a pipe; at the
        // end of input every remaining question takes its default answer.
        terminal = TerminalOracle::new(stdin.lock(), std::io::stderr());
        &mut terminal
    };
    let mut oracle = RuleOracle::new(inner, saved);
    let out = run(&mut oracle, &config)?;
    if let Some(f) = &args.save_answers {
        let merged = oracle.merged();
        std::fs::write(f, merged.to_json() + "\n")
            .with_context(|| format!("writing saved answers {}", f.display()))?;
        if oracle.rules_used() > 0 || !oracle.learned().rules.is_empty() {
            eprintln!(
                "argus: {} question(s) answered by saved answers, {} new answer(s) saved to {}",
                oracle.rules_used(),
                oracle.learned().rules.len(),
                f.display()
            );
        }
    }
    Ok(out)
}

/// The marks of a report for the exports.
pub fn marks_of(report: &Report) -> Marks {
    let h = report.highlight();
    let roots = &h.roots;
    Marks {
        hang: Some((
            report.hang.tid,
            report.hang.start_ns,
            report.hang.end_ns,
            format!(
                "hang: {} {} {} ({})",
                report.hang.comm,
                report.hang.tid.0,
                report.hang.class.name(),
                argus_diagnose::secs(report.hang.duration_ns)
            ),
        )),
        path: report
            .path
            .iter()
            .enumerate()
            .map(|(i, p)| PathMark {
                segment: p.segment,
                step: i + 1,
                label: format!("{} {}: {}", p.comm, p.tid.0, p.description),
                root: roots.contains(&p.segment),
            })
            .collect(),
        path_edges: h
            .path_edges
            .iter()
            .map(|(src, dst, kind, strength)| EdgeMark {
                src: *src,
                dst: *dst,
                kind: kind.clone(),
                strength: strength.clone(),
            })
            .collect(),
    }
}

/// `argus export`: diagnoses the hang (default answers), then writes the files asked for.
pub fn run(args: &ExportArgs) -> Result<u8> {
    if args.perfetto.is_none() && args.dot.is_none() {
        bail!("argus export needs --perfetto FILE and/or --dot FILE");
    }
    let mut graph = crate::cmd::debug::load_graph(&args.snapshot)?;
    attach_app_events(&mut graph, &args.snapshot)?;
    let target = match (args.pid, args.tid) {
        (Some(pid), tid) => Some(Target {
            pid: Pid(pid),
            tid: tid.map(Tid),
        }),
        (None, Some(tid)) => Some(Target {
            pid: graph
                .pid_of(Tid(tid))
                .with_context(|| format!("thread {tid} is not in the trace"))?,
            tid: Some(Tid(tid)),
        }),
        (None, None) => None,
    };
    let config = argus_engine::diagnosis::config(args.threshold, None, 8, 2, 3)?;
    let diagnosis = argus_diagnose::diagnose(&graph, target, &mut AutoOracle, &config)?;
    let marks = diagnosis.report.as_ref().map(marks_of).unwrap_or_default();
    if diagnosis.report.is_none() {
        eprintln!(
            "argus export: {}; exporting without a diagnosed path",
            diagnosis.to_text().trim_end()
        );
    }
    if let Some(file) = &args.perfetto {
        let f =
            std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
        let mut w = std::io::BufWriter::new(f);
        let stats = argus_sinks::export::write_perfetto(
            &mut w,
            graph.segments(),
            graph.edges(),
            graph.threads(),
            &marks,
            target.map(|t| t.pid),
            &|s| graph.end_of(s),
        )
        .with_context(|| format!("writing {}", file.display()))?;
        w.flush()
            .with_context(|| format!("writing {}", file.display()))?;
        eprintln!(
            "argus: wrote {} ({} threads, {} segments, {} causal edges); open it in https://ui.perfetto.dev",
            file.display(),
            stats.threads,
            stats.slices,
            stats.flows
        );
    }
    if let Some(file) = &args.dot {
        if diagnosis.report.is_none() {
            bail!(
                "no hang was found, so there is no diagnosed path to draw into {}",
                file.display()
            );
        }
        let mut buf = Vec::new();
        argus_sinks::export::write_dot(&mut buf, &marks, graph.threads())
            .context("rendering DOT")?;
        std::fs::write(file, &buf).with_context(|| format!("writing {}", file.display()))?;
        eprintln!("argus: wrote {}", file.display());
        if let Some(svg) = render_svg(file)? {
            eprintln!("argus: wrote {}", svg.display());
        }
    }
    // Its job is the files: written, it succeeded, whether or not a hang was found (`argus
    // debug` is the verb whose exit code says that).
    Ok(0)
}

/// Renders `file.dot` to `file.svg` with Graphviz when `dot` is on the PATH.
fn render_svg(dot_file: &Path) -> Result<Option<PathBuf>> {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join("dot").is_file()));
    if !found {
        eprintln!("argus: `dot` (Graphviz) is not installed; no SVG written");
        return Ok(None);
    }
    let svg = dot_file.with_extension("svg");
    let status = std::process::Command::new("dot")
        .arg("-Tsvg")
        .arg(dot_file)
        .arg("-o")
        .arg(&svg)
        .status()
        .context("running dot")?;
    if !status.success() {
        bail!("dot failed on {} ({status})", dot_file.display());
    }
    Ok(Some(svg))
}
