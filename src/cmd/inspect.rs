//! `argus inspect SNAPSHOT`: the places where the graph is likely wrong
//! (`argus_diagnose::inspect`), each with its next step; for a suggested rule, what it
//! changes — the snapshot's traces built again without and with it, the vertices and edges
//! that differ, and the watched hang's root cause before and after.

use crate::cli::InspectArgs;
use anyhow::{Context, Result};
use argus_diagnose::inspect::{inspect, InspectConfig, NextStep, Suspect};
use argus_diagnose::{AutoOracle, Graph};
use argus_schema::Tid;
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// What applying one suggested rule changes.
#[derive(Clone, Debug, Serialize)]
struct Effect {
    /// The rule (TOML).
    rule: String,
    /// Vertices without and with it.
    segments_before: usize,
    segments_after: usize,
    /// Vertices (id, start, end) in one graph and not the other.
    segments_changed: usize,
    /// Edges without and with it.
    edges_before: usize,
    edges_after: usize,
    /// Edges (source, destination, kind, time) in one graph and not the other.
    edges_changed: usize,
    /// The watched hang's deepest root cause (`comm tid`) without and with it.
    root_before: Option<String>,
    root_after: Option<String>,
}

/// A suspect and the effects of its rules.
#[derive(Debug, Serialize)]
struct Inspected {
    #[serde(flatten)]
    suspect: Suspect,
    effects: Vec<Effect>,
}

pub fn run(args: &InspectArgs) -> Result<u8> {
    let snapshot = crate::cmd::follow::resolve_snapshot(&args.snapshot)?;
    let manifest = argus_sinks::Manifest::read(&snapshot)
        .with_context(|| format!("reading snapshot {}", snapshot.display()))?;
    let mut graph = crate::cmd::debug::load_graph(&snapshot)?;
    crate::cmd::export::attach_app_events(&mut graph, &snapshot)?;
    let target = args.target.resolve(&graph)?;
    let watched: Vec<Tid> = match target {
        Some(t) => vec![t.thread()],
        None => argus_diagnose::main_threads(&graph),
    };
    let cfg = InspectConfig {
        diagnose: argus_engine::diagnosis::config(args.threshold, None, 8, 2, 3)?,
        watched: watched.clone(),
        ignored: manifest.recorder_tids.iter().map(|&t| Tid(t)).collect(),
    };
    let suspects = inspect(&graph, &cfg);

    // Effects: the traces built again, once without a rule and once per suggested rule.
    let sources: Vec<PathBuf> = manifest.sources.iter().map(PathBuf::from).collect();
    let can_rebuild = !args.no_effects
        && !sources.is_empty()
        && sources.iter().all(|p| p.exists())
        && suspects.iter().any(|s| !rules_of(s).is_empty());
    let scratch = tempfile::tempdir().context("creating a scratch directory")?;
    let before = if can_rebuild {
        let g = rebuild(&sources, &manifest, None, &scratch.path().join("base"))?;
        Some(g)
    } else {
        None
    };
    let mut out = Vec::new();
    for (i, s) in suspects.into_iter().enumerate() {
        let mut effects = Vec::new();
        if let Some(base) = &before {
            for (j, rule) in rules_of(&s).into_iter().enumerate() {
                let dir = scratch.path().join(format!("s{i}-{j}"));
                let after = rebuild(&sources, &manifest, Some(&rule), &dir)?;
                effects.push(effect(rule, base, &after, &watched, &cfg));
            }
        }
        out.push(Inspected {
            suspect: s,
            effects,
        });
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "suspects": out }))?
        );
    } else {
        print_text(&out, &graph, before.is_none() && !args.no_effects, &sources);
    }
    Ok(0)
}

/// The rules a suspect suggests (comments-only "if" rules excluded: they are not advice to
/// apply).
fn rules_of(s: &Suspect) -> Vec<String> {
    s.next
        .iter()
        .filter_map(|n| match n {
            NextStep::Rule { toml } if !toml.starts_with('#') => Some(toml.clone()),
            _ => None,
        })
        .collect()
}

/// The snapshot's traces built again into `dir` with the snapshot's threshold and `rule`.
fn rebuild(
    sources: &[PathBuf],
    manifest: &argus_sinks::Manifest,
    rule: Option<&str>,
    dir: &Path,
) -> Result<Graph> {
    let mut cfg = argus_engine::build::BuildConfig {
        traces: sources.to_vec(),
        output: dir.to_path_buf(),
        ..Default::default()
    };
    cfg.dataflow.rules.spin_threshold_ns = manifest.threshold_ns;
    if let Some(text) = rule {
        argus_engine::setup::apply_rules_text(&mut cfg.dataflow.rules, text, "the suggested rule")?;
    }
    argus_engine::build::build(&cfg).with_context(|| {
        format!(
            "building {} again to measure a suggestion",
            sources
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let mut g = crate::cmd::debug::load_graph(dir)?;
    crate::cmd::export::attach_app_events(&mut g, dir)?;
    Ok(g)
}

fn effect(
    rule: String,
    before: &Graph,
    after: &Graph,
    watched: &[Tid],
    cfg: &InspectConfig,
) -> Effect {
    let segs = |g: &Graph| -> HashSet<(u64, u64, u64)> {
        g.segments()
            .iter()
            .map(|s| (s.id.0, s.start_ns.0, s.end_ns.0))
            .collect()
    };
    let edges = |g: &Graph| -> HashSet<(u64, u64, u8, u64)> {
        g.edges()
            .iter()
            .map(|e| (e.src.0, e.dst.0, e.kind.code(), e.ts.0))
            .collect()
    };
    let (sb, sa) = (segs(before), segs(after));
    let (eb, ea) = (edges(before), edges(after));
    Effect {
        rule,
        segments_before: before.segments().len(),
        segments_after: after.segments().len(),
        segments_changed: sb.symmetric_difference(&sa).count(),
        edges_before: before.edges().len(),
        edges_after: after.edges().len(),
        edges_changed: eb.symmetric_difference(&ea).count(),
        root_before: root_cause(before, watched, cfg),
        root_after: root_cause(after, watched, cfg),
    }
}

/// The deepest root cause of the watched threads' hang (the default answers), `comm tid`.
fn root_cause(g: &Graph, watched: &[Tid], cfg: &InspectConfig) -> Option<String> {
    let d = argus_diagnose::diagnose_watched(
        g,
        watched,
        String::new(),
        None,
        &mut AutoOracle,
        &cfg.diagnose,
    )
    .ok()?;
    let c = d.report?.root_causes.pop()?;
    Some(format!("{} {}", c.comm, c.tid.0))
}

fn print_text(out: &[Inspected], g: &Graph, no_sources: bool, sources: &[PathBuf]) {
    if out.is_empty() {
        println!("no likely mistake found in the graph");
        return;
    }
    for (i, x) in out.iter().enumerate() {
        let s = &x.suspect;
        let kind = serde_json::to_value(s.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        println!("{}. {kind}: {} — {}", i + 1, g.describe(s.tid), s.evidence);
        let labels: Vec<String> = s.segments.iter().map(|id| id.to_string()).collect();
        println!("   e.g. {}", labels.join(", "));
        for n in &s.next {
            match n {
                NextStep::Rule { toml } => {
                    println!(
                        "   next: add to a rules file and build again (argus build --rules FILE):"
                    );
                    for l in toml.lines() {
                        println!("     {l}");
                    }
                }
                NextStep::Record { options } => {
                    println!("   next: record again with: argus record {options} …")
                }
                NextStep::Nothing { why } => println!("   nothing to add: {why}"),
            }
        }
        for e in &x.effects {
            let first = e.rule.lines().next().unwrap_or("");
            let root = match (&e.root_before, &e.root_after) {
                (Some(b), Some(a)) if a != b => format!("; root cause {b} → {a}"),
                (Some(b), Some(_)) => format!("; root cause stays {b}"),
                _ => String::new(),
            };
            println!(
                "   with {first}: {} → {} vertices ({} differ), {} → {} edges ({} differ){root}",
                e.segments_before,
                e.segments_after,
                e.segments_changed,
                e.edges_before,
                e.edges_after,
                e.edges_changed
            );
        }
    }
    if no_sources && out.iter().any(|x| !rules_of(&x.suspect).is_empty()) {
        println!(
            "(what the rules change is not shown: the traces {} are not here to build again)",
            sources
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}
