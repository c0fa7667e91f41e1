//! `argus debug DIR --follow`: follows an `argus start` job and prints what changed: a new
//! hang, its root cause changing, the hang resolved (its spin closed, or gone from the
//! retained window). Questions are never asked: every ambiguity takes the default answer, as
//! with `--auto`.
//!
//! Where it reads: while the job answers on `DIR/argus.sock` (docs/query-protocol.md), its
//! **live graph** — every [`POLL`] it asks for the watched hangs (`hangs`, a few spins) and
//! re-diagnoses (`fetch` rounds, as `argus debug DIR` does) when they change (a new spin, one
//! ending, one crossing `--threshold`) and at least every [`RECHECK`] (a root cause may change
//! as the graph grows), the thread hung now (its latest open spin past the threshold) first
//! when several threads match; a hang is therefore reported about a tick plus a poll after the job's
//! watermark passes its threshold, without waiting for a snapshot. With no job answering, or
//! one with no live graph (before its first epoch, given up), each new snapshot (`DIR/latest`)
//! instead, as the job writes them.
//!
//! Output: one line per change, `[epoch <E>] <change>: <details>` (live) or
//! `[<snapshot>] <change>: <details>`; with `--json`, one JSON object per line (`source`:
//! `live` or `snapshot`, `epoch` or `snapshot`, `change`, `text` and the `argus debug --json`
//! report). Runs until interrupted or `--follow-for` seconds; exits 1 if a hang was reported,
//! else 0.

use crate::cli::DebugArgs;
use crate::live::client::{self, Client, Connect};
use anyhow::{Context, Result};
use argus_diagnose::{Diagnosis, Graph, Target};
use argus_schema::{Pid, SegmentId, Spin, Tid};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the job's hangs (or `latest`) are checked.
pub const POLL: Duration = Duration::from_millis(100);

/// How often a live hang is re-diagnosed when its spins did not change.
pub const RECHECK: Duration = Duration::from_secs(1);

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

/// The changes from `before` to `now`. `spins` are the new graph's, to tell whether the
/// previous hang's spin is still there.
pub fn changes(before: Option<&HangState>, now: Option<&HangState>, spins: &[Spin]) -> Vec<Change> {
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
                let gone = !spins.iter().any(|s| s.segment == b.segment);
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

/// Where a state was read.
enum Source<'a> {
    /// The job's live graph as of an epoch.
    Live(u64),
    /// A snapshot.
    Snapshot(&'a Path),
}

/// The follow loop's memory: the hang last seen and where the changes go.
struct Follower<'a> {
    /// `argus debug`'s flags, with `--auto`.
    args: DebugArgs,
    named: bool,
    state: Option<HangState>,
    reported: bool,
    out: std::io::StdoutLock<'a>,
}

impl Follower<'_> {
    /// Prints the changes from the last state to `now` (read from `source`, whose spins are
    /// `spins`) and keeps `now`.
    fn update(
        &mut self,
        now: Option<(HangState, Diagnosis)>,
        spins: &[Spin],
        source: Source<'_>,
    ) -> Result<()> {
        let (now_state, report) = match now {
            Some((s, d)) => (Some(s), Some(d.to_json())),
            None => (None, None),
        };
        for c in changes(self.state.as_ref(), now_state.as_ref(), spins) {
            if matches!(c, Change::NewHang(_)) {
                self.reported = true;
            }
            if self.args.json {
                let mut v = serde_json::json!({
                    "change": c.name(),
                    "text": c.text(),
                    "report": report,
                });
                match source {
                    Source::Live(epoch) => {
                        v["source"] = "live".into();
                        v["epoch"] = epoch.into();
                    }
                    Source::Snapshot(path) => {
                        v["source"] = "snapshot".into();
                        v["snapshot"] = serde_json::to_value(path)?;
                    }
                }
                serde_json::to_writer(&mut self.out, &v)?;
                writeln!(self.out)?;
            } else {
                let label = match source {
                    Source::Live(epoch) => format!("epoch {epoch}"),
                    Source::Snapshot(path) => path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                };
                writeln!(self.out, "[{label}] {}", c.text())?;
            }
            self.out.flush()?;
        }
        self.state = now_state;
        Ok(())
    }

    /// Diagnoses a snapshot.
    fn snapshot(&mut self, snap: &Path) -> Result<()> {
        let graph = crate::cmd::debug::load_graph(snap)?;
        let target = target_of(&self.args, &graph);
        let now = if self.named && target.is_none() {
            None // the named thread is not in the trace yet
        } else {
            let diagnosis = crate::cmd::export::diagnose_with(&self.args, &graph, target)?;
            HangState::of(&diagnosis).map(|s| (s, diagnosis))
        };
        self.update(now, graph.spins(), Source::Snapshot(snap))
    }
}

/// What the live loop compares between two polls: the watched spins, whether each is still
/// going and whether it has lasted the threshold.
type HangsKey = Vec<(Value, bool, bool)>;

/// The live side of the loop: the job's connection, the last hangs seen and when the hang
/// was last diagnosed.
struct LiveFollow {
    client: Client,
    key: Option<HangsKey>,
    diagnosed_at: Option<Instant>,
}

impl LiveFollow {
    /// One poll of the job: `Ok(false)` when it has no live graph to answer from.
    fn poll(&mut self, f: &mut Follower<'_>) -> Result<bool> {
        use crate::live::protocol::Code;
        let mut q = serde_json::Map::new();
        if let Some(p) = f.args.pid {
            q.insert("pid".into(), p.into());
        }
        if let Some(t) = f.args.tid {
            q.insert("tid".into(), t.into());
        }
        if let Some(c) = &f.args.comm {
            q.insert("comm".into(), c.clone().into());
        }
        let hangs = match self.client.request("hangs", Value::Object(q))? {
            Ok(h) => h,
            Err(e) if matches!(e.code, Code::NotReady | Code::Gone) => return Ok(false),
            Err(e) => anyhow::bail!("the job in {}: {e}", f.args.snapshot.display()),
        };
        let threshold_ns = (f.args.threshold.max(0.0) * 1e9) as u64;
        let key: HangsKey = hangs["hangs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|h| {
                        let open = h["open"].as_bool().unwrap_or(false);
                        let long = h["duration_ns"].as_u64().unwrap_or(0) >= threshold_ns;
                        (h["segment"].clone(), open, long)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let due = self.diagnosed_at.is_none_or(|t| t.elapsed() >= RECHECK);
        if self.key.as_ref() == Some(&key) && !due {
            return Ok(true);
        }
        let epoch = hangs["epoch"].as_u64().unwrap_or(0);
        if key.is_empty() {
            // No spin of the watched threads: no hang (the named thread may not be traced yet).
            self.key = Some(key);
            self.diagnosed_at = Some(Instant::now());
            f.update(None, &[], Source::Live(epoch))?;
            return Ok(true);
        }
        // A thread hung now comes first: with several matching threads (a name shared by
        // processes that come and go) the diagnosis would otherwise pick the longest spin in
        // the window, perhaps one that ended long ago.
        let focus = hangs["hangs"].as_array().and_then(|a| {
            a.iter()
                .filter(|h| {
                    h["open"].as_bool() == Some(true)
                        && h["duration_ns"].as_u64().unwrap_or(0) >= threshold_ns
                        && targeted(&f.args, h)
                })
                .max_by_key(|h| h["start_ns"].as_u64())
        });
        let mut args = f.args.clone();
        if let Some(h) = focus {
            args.pid = h["pid"].as_i64().map(|p| p as i32);
            args.tid = h["tid"].as_i64().map(|t| t as i32);
            args.comm = None;
        }
        let Some(live) = crate::cmd::debug::diagnose_live(&args, &mut self.client)? else {
            return Ok(false);
        };
        self.key = Some(key);
        self.diagnosed_at = Some(Instant::now());
        let now = HangState::of(&live.diagnosis).map(|s| (s, live.diagnosis));
        f.update(now, &live.spins, Source::Live(live.epoch))?;
        Ok(true)
    }
}

/// Whether the thread of a `hangs` entry is one the diagnosis may take for its target, as
/// `argus debug` resolves `--tid`, `--pid` and `--comm`: the named thread; a process's main
/// thread; a thread of that name, or the main thread of a process of that name; with none of
/// them, any main thread.
fn targeted(args: &DebugArgs, h: &Value) -> bool {
    let (tid, pid) = (h["tid"].as_i64(), h["pid"].as_i64());
    let main = tid.is_some() && tid == pid;
    match (args.tid, args.pid, &args.comm) {
        (Some(t), _, _) => tid == Some(i64::from(t)),
        (None, Some(p), _) => main && pid == Some(i64::from(p)),
        (None, None, Some(name)) => {
            h["comm"].as_str() == Some(name.as_str())
                || (main && h["process"].as_str() == Some(name.as_str()))
        }
        (None, None, None) => main,
    }
}

/// Runs the follow loop.
pub fn run(args: &DebugArgs) -> Result<u8> {
    let dir = &args.snapshot;
    let latest = dir.join("latest");
    let deadline = args
        .follow_for
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let mut auto = args.clone();
    auto.auto = true;
    let mut f = Follower {
        named: args.pid.is_some() || args.tid.is_some() || args.comm.is_some(),
        args: auto,
        state: None,
        reported: false,
        out: std::io::stdout().lock(),
    };
    let mut job: Option<LiveFollow> = None;
    let mut seen: Option<PathBuf> = None;
    let mut warned = false;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if job.is_none() {
            if let Connect::Job(c) = client::connect(dir)? {
                tracing::info!(
                    "following the live graph of the job running in {}",
                    dir.display()
                );
                job = Some(LiveFollow {
                    client: c,
                    key: None,
                    diagnosed_at: None,
                });
            }
        }
        let current = std::fs::canonicalize(&latest).ok();
        let live = match job.as_mut().map(|j| j.poll(&mut f)) {
            Some(Ok(answered)) => answered,
            Some(Err(e)) => {
                // The job stopped (or broke the connection): snapshots from here on.
                tracing::info!("the job in {} stopped answering: {e:#}", dir.display());
                job = None;
                false
            }
            None => false,
        };
        if live {
            // Snapshots written meanwhile hold nothing newer than the live graph.
            seen = current;
        } else if current.is_some() && current != seen {
            let snap = current.clone().context("invariant: checked")?;
            match f.snapshot(&snap) {
                Ok(()) => seen = current,
                Err(e) => {
                    // The job may have pruned it meanwhile; the next `latest` will do.
                    if !warned {
                        tracing::warn!("{e:#}");
                        warned = true;
                    }
                }
            }
        } else if current.is_none() && !warned && seen.is_none() && job.is_none() {
            eprintln!(
                "argus debug: waiting for {} (is `argus start -o {}` running?)",
                latest.display(),
                dir.display()
            );
            warned = true;
        }
        std::thread::sleep(POLL);
    }
    Ok(if f.reported { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(flags: &[&str]) -> DebugArgs {
        let mut argv = vec!["argus", "debug", "DIR", "--follow"];
        argv.extend_from_slice(flags);
        match crate::cli::Cli::try_parse_from(argv)
            .expect("flags parse")
            .command
        {
            crate::cli::Command::Debug(a) => a,
            _ => unreachable!("a debug command"),
        }
    }

    fn hang(tid: i32, pid: i32, comm: &str, process: &str) -> Value {
        serde_json::json!({"tid": tid, "pid": pid, "comm": comm, "process": process})
    }

    #[test]
    fn the_live_focus_is_a_thread_the_target_may_mean() {
        let main = hang(10, 10, "app", "app");
        let worker = hang(11, 10, "app-worker", "app");
        let other = hang(20, 20, "other", "other");
        let by_comm = args(&["--comm", "app"]);
        assert!(targeted(&by_comm, &main));
        assert!(
            !targeted(&by_comm, &worker),
            "a worker of a process named app"
        );
        assert!(targeted(&args(&["--comm", "app-worker"]), &worker));
        let by_pid = args(&["--pid", "10"]);
        assert!(targeted(&by_pid, &main) && !targeted(&by_pid, &worker));
        assert!(!targeted(&by_pid, &other));
        assert!(targeted(&args(&["--tid", "11"]), &worker));
        let any = args(&[]);
        assert!(targeted(&any, &main) && targeted(&any, &other) && !targeted(&any, &worker));
    }
}
