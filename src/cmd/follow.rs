//! `argus debug DIR --follow`: re-diagnoses on each new snapshot of an `argus start` job
//! (`DIR/latest`) and prints what changed: a new hang, its root cause changing, the hang
//! resolved (its spin closed, or gone from the retained window). Questions are never asked:
//! every ambiguity takes the default answer, as with `--auto`.
//!
//! Output: one line per change, `[<snapshot>] <change>: <details>`; with `--json`, one JSON
//! object per line (`snapshot`, `change`, and the `argus debug --json` report). Runs until
//! interrupted or `--follow-for` seconds; exits 1 if a hang was reported, else 0.

use crate::cli::DebugArgs;
use anyhow::{Context, Result};
use argus_diagnose::{AutoOracle, DiagnoseConfig, Diagnosis, Graph, Target};
use argus_schema::{Pid, SegmentId, Tid};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often `latest` is checked.
const POLL: Duration = Duration::from_millis(100);

/// A snapshot directory, or an `argus start` directory: its `latest` snapshot.
pub fn resolve_snapshot(path: &Path) -> Result<PathBuf> {
    if path.join(argus_sinks::MANIFEST_FILE).is_file() {
        return Ok(path.to_path_buf());
    }
    let latest = path.join("latest");
    if latest.exists() {
        return std::fs::canonicalize(&latest)
            .with_context(|| format!("resolving {}", latest.display()));
    }
    Ok(path.to_path_buf())
}

/// What `--follow` compares between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangState {
    /// The spinning segment.
    pub segment: SegmentId,
    /// Its thread.
    pub tid: Tid,
    /// Its process.
    pub pid: Pid,
    /// Words for the thread.
    pub who: String,
    /// The class.
    pub class: String,
    /// Still going.
    pub open: bool,
    /// Its duration.
    pub duration_ns: u64,
    /// The deepest root cause, in words.
    pub root: Option<String>,
}

impl HangState {
    fn of(d: &Diagnosis) -> Option<HangState> {
        let r = d.report.as_ref()?;
        let h = &r.hang;
        Some(HangState {
            segment: h.segment,
            tid: h.tid,
            pid: h.pid,
            who: format!(
                "{} (tid {}) of {} (pid {})",
                h.comm, h.tid.0, h.process, h.pid.0
            ),
            class: h.class.name().to_string(),
            open: h.open,
            duration_ns: h.duration_ns,
            root: r
                .root_causes
                .last()
                .map(|c| format!("{} (tid {}): {}", c.comm, c.tid.0, c.reason)),
        })
    }
}

/// A change between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A hang that was not there.
    NewHang(HangState),
    /// Same hang, another root cause.
    RootCauseChanged {
        /// The hang now.
        hang: HangState,
        /// The root cause before.
        before: Option<String>,
    },
    /// The hang's spin closed or left the window.
    Resolved {
        /// The hang as last seen.
        hang: HangState,
        /// Why it counts as resolved.
        how: &'static str,
    },
}

impl Change {
    fn name(&self) -> &'static str {
        match self {
            Change::NewHang(_) => "new_hang",
            Change::RootCauseChanged { .. } => "root_cause_changed",
            Change::Resolved { .. } => "resolved",
        }
    }

    fn text(&self) -> String {
        let secs = |ns: u64| ns as f64 / 1e9;
        match self {
            Change::NewHang(h) => format!(
                "new hang: {} {} {:.3} s{}; root cause: {}",
                h.who,
                h.class,
                secs(h.duration_ns),
                if h.open { " (still going)" } else { "" },
                h.root.as_deref().unwrap_or("unknown")
            ),
            Change::RootCauseChanged { hang, before } => format!(
                "root cause changed for the hang of {}: {} → {}",
                hang.who,
                before.as_deref().unwrap_or("unknown"),
                hang.root.as_deref().unwrap_or("unknown")
            ),
            Change::Resolved { hang, how } => format!(
                "hang resolved: {} after {:.3} s ({how})",
                hang.who,
                secs(hang.duration_ns)
            ),
        }
    }
}

/// The changes from `before` to `now`. `graph` is the new snapshot, to tell whether the
/// previous hang's spin is still there.
pub fn changes(before: Option<&HangState>, now: Option<&HangState>, graph: &Graph) -> Vec<Change> {
    let mut out = Vec::new();
    match (before, now) {
        (None, None) => {}
        (None, Some(n)) => out.push(Change::NewHang(n.clone())),
        (Some(b), Some(n)) if b.segment == n.segment => {
            if b.open && !n.open {
                out.push(Change::Resolved {
                    hang: n.clone(),
                    how: "the thread was woken",
                });
            }
            if b.root != n.root {
                out.push(Change::RootCauseChanged {
                    hang: n.clone(),
                    before: b.root.clone(),
                });
            }
        }
        (Some(b), n) => {
            if b.open {
                let gone = !graph.spins().iter().any(|s| s.segment == b.segment);
                out.push(Change::Resolved {
                    hang: b.clone(),
                    how: if gone {
                        "it left the retained window"
                    } else {
                        "the thread was woken"
                    },
                });
            }
            if let Some(n) = n {
                out.push(Change::NewHang(n.clone()));
            }
        }
    }
    out
}

fn target_of(args: &DebugArgs, graph: &Graph) -> Option<Target> {
    match (args.pid, args.tid, &args.comm) {
        (Some(pid), tid, _) => Some(Target {
            pid: Pid(pid),
            tid: tid.map(Tid),
        }),
        (None, Some(tid), _) => graph.pid_of(Tid(tid)).map(|pid| Target {
            pid,
            tid: Some(Tid(tid)),
        }),
        (None, None, Some(name)) => argus_diagnose::target_by_comm(graph, name),
        (None, None, None) => None,
    }
}

/// Runs the follow loop.
pub fn run(args: &DebugArgs) -> Result<u8> {
    let dir = &args.snapshot;
    let latest = dir.join("latest");
    let deadline = args
        .follow_for
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let named = args.pid.is_some() || args.tid.is_some() || args.comm.is_some();
    let mut seen: Option<PathBuf> = None;
    let mut state: Option<HangState> = None;
    let mut reported = false;
    let mut out = std::io::stdout().lock();
    let mut warned = false;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let current = std::fs::canonicalize(&latest).ok();
        if current.is_some() && current != seen {
            let snap = current.clone().context("invariant: checked")?;
            match crate::cmd::debug::load_graph(&snap) {
                Ok(graph) => {
                    seen = current;
                    let target = target_of(args, &graph);
                    let now = if named && target.is_none() {
                        None // the named thread is not in the trace yet
                    } else {
                        let diagnosis = argus_diagnose::diagnose(
                            &graph,
                            target,
                            &mut AutoOracle,
                            &DiagnoseConfig::default(),
                        )?;
                        HangState::of(&diagnosis).map(|s| (s, diagnosis))
                    };
                    let label = snap
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let (now_state, report) = match now {
                        Some((s, d)) => (Some(s), Some(d.to_json())),
                        None => (None, None),
                    };
                    for c in changes(state.as_ref(), now_state.as_ref(), &graph) {
                        if matches!(c, Change::NewHang(_)) {
                            reported = true;
                        }
                        if args.json {
                            let v = serde_json::json!({
                                "snapshot": snap,
                                "change": c.name(),
                                "text": c.text(),
                                "report": report,
                            });
                            serde_json::to_writer(&mut out, &v)?;
                            writeln!(out)?;
                        } else {
                            writeln!(out, "[{label}] {}", c.text())?;
                        }
                        out.flush()?;
                    }
                    state = now_state;
                }
                Err(e) => {
                    // The job may have pruned it meanwhile; the next `latest` will do.
                    if !warned {
                        tracing::warn!("{e:#}");
                        warned = true;
                    }
                }
            }
        } else if current.is_none() && !warned && seen.is_none() {
            eprintln!(
                "argus debug: waiting for {} (is `argus start -o {}` running?)",
                latest.display(),
                dir.display()
            );
            warned = true;
        }
        std::thread::sleep(POLL);
    }
    Ok(if reported { 1 } else { 0 })
}
