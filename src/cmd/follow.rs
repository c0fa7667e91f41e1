//! `argus debug DIR --follow`: follows an `argus start` job and prints what changed: a new
//! hang, its diagnosis when it came later, its root cause changing, the hang resolved (its
//! spin closed, or gone from the retained window). Questions are never asked: every ambiguity
//! takes the default answer, as with `--auto`.
//!
//! Where it reads: while the job answers on `DIR/argus.sock` (docs/query-protocol.md), every
//! [`POLL`] it asks for the watched hangs (`hangs`: the spins of the job's dataflow as of its
//! last epoch, a few records) and re-diagnoses from the job's **live graph** (`fetch` rounds,
//! as `argus debug DIR` does) when they change (a new spin, one ending, one crossing
//! `--threshold`) and at least every [`RECHECK`] (a root cause may change as the graph grows),
//! the thread hung now (its latest open spin past the threshold) first when several threads
//! match. A hang is therefore seen about a tick plus a poll after the job's watermark passes
//! its threshold, without waiting for a snapshot.
//!
//! The live graph is kept by a worker of its own that may lag the dataflow under load
//! (`graph_epoch` of `hangs`) and answers reads only between the epochs it applies, so:
//!
//! - diagnoses are asked on a second connection by a thread of their own ([`Diagnoser`], one
//!   at a time): a slow one never stops the polling of `hangs`;
//! - a hang the graph has not reached is reported from the spins (after up to [`WAIT`] when
//!   the graph is at most [`NEAR_EPOCHS`] behind), undiagnosed (`new_hang` with no report),
//!   its end too, and `diagnosed` once the graph reaches the epoch that showed it;
//! - an answer older than the state already printed (a live graph behind, after it was given
//!   up and seeded anew; an older snapshot) is never shown, nor another hang, ended, in place of one
//!   going on or older than the one followed (a diagnosis picks its own spin).
//!
//! With no job answering, or one with no live graph (before its first epoch, given up), each
//! new snapshot (`DIR/latest`), as the job writes them.
//!
//! Output: one line per change, `[epoch <E>] <change>: <details>` (live) or
//! `[<snapshot>] <change>: <details>`; with `--json`, one JSON object per line (`source`:
//! `live` or `snapshot`, `epoch` or `snapshot`, `change`, `text`, `hang` (the spin: segment,
//! tid, pid, class, start_ns, duration_ns, open, diagnosed) and `report`, the
//! `argus debug --json` report, `null` while undiagnosed). Runs until interrupted or
//! `--follow-for` seconds; exits 1 if a hang was reported, else 0.

use crate::cli::DebugArgs;
use anyhow::{Context, Result};
use argus_diagnose::{Diagnosis, Graph, Target};
use argus_engine::live::client::{self, Client, Connect};
use argus_schema::{Pid, SegmentId, Tid};
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
    /// When the spin started (trace clock).
    pub start_ns: u64,
    /// Still going.
    pub open: bool,
    /// Its duration.
    pub duration_ns: u64,
    /// The deepest root cause, in words.
    pub root: Option<String>,
    /// Whether a diagnosis stands behind `root`: a hang the job's `hangs` reported before
    /// its live graph reached it is not diagnosed yet.
    pub diagnosed: bool,
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
            start_ns: h.start_ns.0,
            open: h.open,
            duration_ns: h.duration_ns,
            root: r
                .root_causes
                .last()
                .map(|c| format!("{} (tid {}): {}", c.comm, c.tid.0, c.reason)),
            diagnosed: true,
        })
    }

    /// A hang as the job's `hangs` reports it (docs/query-protocol.md), not diagnosed yet.
    fn of_hang(h: &Value) -> Option<HangState> {
        let segment: SegmentId = serde_json::from_value(h["segment"].clone()).ok()?;
        let (tid, pid) = (h["tid"].as_i64()? as i32, h["pid"].as_i64()? as i32);
        Some(HangState {
            segment,
            tid: Tid(tid),
            pid: Pid(pid),
            who: format!(
                "{} (tid {tid}) of {} (pid {pid})",
                h["comm"].as_str().unwrap_or_default(),
                h["process"].as_str().unwrap_or_default(),
            ),
            class: h["class"].as_str().unwrap_or_default().to_string(),
            start_ns: h["start_ns"].as_u64().unwrap_or(0),
            open: h["open"].as_bool().unwrap_or(false),
            duration_ns: h["duration_ns"].as_u64().unwrap_or(0),
            root: None,
            diagnosed: false,
        })
    }
}

/// A change between two snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A hang that was not there.
    NewHang(HangState),
    /// A hang reported before it could be diagnosed (the live graph was behind the job's
    /// dataflow) has its diagnosis.
    Diagnosed(HangState),
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
    /// The hang the change is about.
    fn hang(&self) -> &HangState {
        match self {
            Change::NewHang(h) | Change::Diagnosed(h) => h,
            Change::RootCauseChanged { hang, .. } | Change::Resolved { hang, .. } => hang,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Change::NewHang(_) => "new_hang",
            Change::Diagnosed(_) => "diagnosed",
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
                match (&h.root, h.diagnosed) {
                    (Some(r), _) => r.as_str(),
                    (None, true) => "unknown",
                    (None, false) => "not diagnosed yet (the job's live graph is behind)",
                }
            ),
            Change::Diagnosed(h) => format!(
                "diagnosed the hang of {}: root cause: {}",
                h.who,
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

/// The changes from `before` to `now`. `spinning` are the new graph's spinning segments, to
/// tell whether the previous hang's spin is still there.
pub fn changes(
    before: Option<&HangState>,
    now: Option<&HangState>,
    spinning: &[SegmentId],
) -> Vec<Change> {
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
            if !b.diagnosed && n.diagnosed {
                out.push(Change::Diagnosed(n.clone()));
            } else if b.root != n.root && n.diagnosed {
                out.push(Change::RootCauseChanged {
                    hang: n.clone(),
                    before: b.root.clone(),
                });
            }
        }
        (Some(b), n) => {
            if b.open {
                let gone = !spinning.contains(&b.segment);
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
    state: Option<HangState>,
    /// The latest epoch a state was read at (live, or a snapshot's): an answer as of an
    /// older one is not shown, so the state never goes back in time.
    shown: u64,
    reported: bool,
    out: Box<dyn Write + 'a>,
}

impl Follower<'_> {
    /// Prints the changes from the last state to `now` (read from `source`, whose spinning
    /// segments are `spinning`) and keeps `now`. `now` comes with its diagnosis, if it has one.
    fn update(
        &mut self,
        now: Option<(HangState, Option<&Diagnosis>)>,
        spinning: &[SegmentId],
        source: Source<'_>,
    ) -> Result<()> {
        let at = match source {
            Source::Live(epoch) => Some(epoch),
            Source::Snapshot(path) => snapshot_epoch(path),
        };
        if at.is_some_and(|e| e < self.shown) {
            return Ok(());
        }
        if let (Some(prev), Some((s, _))) = (&self.state, &now) {
            if s.segment != prev.segment && !s.open && (prev.open || s.start_ns < prev.start_ns) {
                // Another hang, ended, does not replace one going on now, nor is one that
                // ended before the one followed began news: a diagnosis picks its own spin
                // (the longest in a snapshot's window, perhaps one reported and resolved long
                // ago; the soak saw one reported anew 40 s after it ended).
                return Ok(());
            }
        }
        self.shown = self.shown.max(at.unwrap_or(0));
        let (now_state, report) = match now {
            Some((s, d)) => (Some(s), d.map(Diagnosis::to_json)),
            None => (None, None),
        };
        for c in changes(self.state.as_ref(), now_state.as_ref(), spinning) {
            if matches!(c, Change::NewHang(_)) {
                self.reported = true;
            }
            if self.args.json {
                let h = c.hang();
                let mut v = serde_json::json!({
                    "change": c.name(),
                    "text": c.text(),
                    "hang": {
                        "segment": h.segment,
                        "tid": h.tid,
                        "pid": h.pid,
                        "class": h.class,
                        "start_ns": h.start_ns,
                        "duration_ns": h.duration_ns,
                        "open": h.open,
                        "diagnosed": h.diagnosed,
                    },
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

    /// Shows what a snapshot's diagnosis ([`SnapshotReader`]) found.
    fn snapshot(&mut self, read: &SnapshotRead, snap: &Path) -> Result<()> {
        let now = read.hang.as_ref().map(|(s, d)| (s.clone(), Some(d)));
        self.update(now, &read.spinning, Source::Snapshot(snap))
    }
}

/// Nice value of the follower's snapshot and diagnosis threads: the job's own under its
/// default `--nice idle`. Loading and diagnosing a snapshot takes a CPU for a second or more;
/// at the user's priority it took that CPU from the job being followed, whose decoding (at
/// nice 19) waited up to 1.8 s to run on the soak's two busy cores, and the hangs the
/// follower polls for came that much later. The polling itself keeps the user's priority.
#[cfg(target_os = "linux")]
pub const READ_NICE: i32 = 19;

/// Lowers the calling thread to [`READ_NICE`] (a thread already lower stays); elsewhere
/// than Linux (no job to yield to: `argus start` is Linux-only) it does nothing.
#[cfg(not(target_os = "linux"))]
fn at_the_jobs_priority() {}

/// Lowers the calling thread to [`READ_NICE`] (a thread already lower stays).
#[cfg(target_os = "linux")]
fn at_the_jobs_priority() {
    // SAFETY: errno is thread-local; clearing it tells getpriority's -1 error from a nice
    // of -1. gettid and getpriority on our own thread take no pointers.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t)
    };
    if nice >= READ_NICE {
        return;
    }
    if let Err(e) = argus_ingest::linux::set_thread_nice(READ_NICE) {
        tracing::debug!("the follower's reads keep the user's priority: {e}");
    }
}

/// What a snapshot says: the hang its diagnosis found (with the diagnosis) and the spinning
/// segments.
struct SnapshotRead {
    hang: Option<(HangState, Diagnosis)>,
    spinning: Vec<SegmentId>,
}

/// Loads and diagnoses a snapshot (`named`: the watched thread was named, and is not
/// diagnosed until it is in the trace).
fn read_snapshot(args: &DebugArgs, named: bool, snap: &Path) -> Result<SnapshotRead> {
    let graph = crate::cmd::debug::load_graph(snap)?;
    let target = target_of(args, &graph);
    let diagnosis = if named && target.is_none() {
        None // the named thread is not in the trace yet
    } else {
        Some(crate::cmd::export::diagnose_with(args, &graph, target)?)
    };
    let hang = diagnosis.and_then(|d| HangState::of(&d).map(|s| (s, d)));
    let spinning = graph.spins().iter().map(|s| s.segment).collect();
    Ok(SnapshotRead { hang, spinning })
}

/// Work the follower does on a thread of its own (at the job's priority), one item at a
/// time, while its polling goes on.
struct Background<Q, A> {
    ask: crossbeam_channel::Sender<Q>,
    answers: crossbeam_channel::Receiver<A>,
    busy: bool,
    /// What the thread does, for the error when it has stopped.
    what: &'static str,
}

impl<Q: Send + 'static, A: Send + 'static> Background<Q, A> {
    /// Starts thread `name`, which answers each item asked for with `work`.
    fn start(
        name: &str,
        what: &'static str,
        mut work: impl FnMut(Q) -> A + Send + 'static,
    ) -> Result<Background<Q, A>> {
        let (ask, asked) = crossbeam_channel::bounded::<Q>(1);
        let (answer, answers) = crossbeam_channel::bounded(1);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                at_the_jobs_priority();
                for q in asked {
                    if answer.send(work(q)).is_err() {
                        return;
                    }
                }
            })
            .with_context(|| format!("starting the {what} thread"))?;
        Ok(Background {
            ask,
            answers,
            busy: false,
            what,
        })
    }

    /// Asks for `q`; `false` while another item is under way.
    fn ask(&mut self, q: Q) -> Result<bool> {
        if self.busy {
            return Ok(false);
        }
        self.ask
            .send(q)
            .map_err(|_| anyhow::anyhow!("the {} thread stopped", self.what))?;
        self.busy = true;
        Ok(true)
    }

    /// The answer, once there (`wait`: until it is, if an item is under way).
    fn answer(&mut self, wait: bool) -> Option<A> {
        let a = if wait && self.busy {
            self.answers.recv().ok()
        } else {
            self.answers.try_recv().ok()
        }?;
        self.busy = false;
        Some(a)
    }
}

/// Snapshots loaded and diagnosed on a thread of their own, one at a time: a snapshot of a
/// large window takes a second or more to load, and meanwhile the follower goes on polling
/// the job's `hangs` (the soak saw a hang reported 3.7 s late while `latest` was being
/// loaded in the polling loop, with the live graph given up).
type SnapshotReader = Background<PathBuf, (PathBuf, Result<SnapshotRead>)>;

impl SnapshotReader {
    /// Starts the thread, which reads each snapshot asked for with `read`.
    fn reading(
        read: impl Fn(&Path) -> Result<SnapshotRead> + Send + 'static,
    ) -> Result<SnapshotReader> {
        Background::start("argus-snapshot", "snapshot", move |snap: PathBuf| {
            let got = read(&snap);
            (snap, got)
        })
    }
}

/// What the live loop compares between two polls: the watched spins, whether each is still
/// going and whether it has lasted the threshold.
type HangsKey = Vec<(Value, bool, bool)>;

/// The live side of the loop: the job's connection, the last hangs seen and when the hang
/// was last diagnosed.
struct LiveFollow {
    client: Client,
    /// Diagnoses from the live graph, on a connection and thread of their own.
    diagnoser: Diagnoser,
    key: Option<HangsKey>,
    diagnosed_at: Option<Instant>,
    /// The first epoch of `hangs` that showed the current `key`.
    seen: u64,
    /// A hang the live graph has not reached yet.
    pending: Option<Pending>,
}

/// What the diagnosis thread answers: the diagnosis as of the live graph's latest epoch, or
/// `None` when the job has no live graph to answer from.
type Diagnosed = Result<Option<crate::cmd::debug::LiveDiagnosis>>;

/// The live graph's diagnoses, asked on a connection of their own by a thread of their own:
/// a live graph behind under load answers reads only between the epochs it applies, so a
/// diagnosis can take seconds, and the follower keeps polling `hangs` meanwhile. One at a
/// time.
struct Diagnoser {
    work: Background<DebugArgs, Diagnosed>,
    /// Asked for again while busy: the answer that comes is already stale.
    again: bool,
}

impl Diagnoser {
    fn start(mut client: Client) -> Result<Diagnoser> {
        let work = Background::start("argus-diagnose", "diagnosis", move |args: DebugArgs| {
            crate::cmd::debug::diagnose_live(&args, &mut client)
        })?;
        Ok(Diagnoser { work, again: false })
    }

    /// Asks for a diagnosis unless one is under way; `fresh`: the state changed since that
    /// one was asked for, so it is wanted again once it is in.
    fn ask(&mut self, args: DebugArgs, fresh: bool) -> Result<()> {
        self.again |= self.work.busy && fresh;
        self.work.ask(args)?;
        Ok(())
    }

    /// The answer, once there.
    fn answer(&mut self) -> Option<Diagnosed> {
        self.work.answer(false)
    }
}

/// A hang `hangs` showed at `epoch` before the live graph got there: it is diagnosed as soon
/// as the graph reaches that epoch; after [`WAIT`] it is reported undiagnosed.
struct Pending {
    epoch: u64,
    since: Instant,
    reported: bool,
}

/// How long a hang waits for the live graph before it is reported undiagnosed, when the graph
/// is at most [`NEAR_EPOCHS`] behind the epoch that showed it: the graph of a job that keeps
/// up is a tick or two behind its dataflow. A graph further behind is not waited for. One
/// poll: the report is due within 1 s of the hang crossing the threshold, of which the
/// job's `--lag` and its tick take most; with 400 ms (and a 500 ms lag) the soak's reports
/// came a median 1.20 s after (max 1.56 s), 0.77 s when the graph was too far behind to
/// wait for.
pub const WAIT: Duration = Duration::from_millis(100);

/// Epochs (200 ms ticks) a live graph may be behind and still be waited for.
pub const NEAR_EPOCHS: u64 = 2;

impl LiveFollow {
    fn new(client: Client, diagnoser: Diagnoser) -> LiveFollow {
        LiveFollow {
            client,
            diagnoser,
            key: None,
            diagnosed_at: None,
            seen: 0,
            pending: None,
        }
    }

    /// One poll of the job: `Ok(false)` when it has no live graph to answer from.
    fn poll(&mut self, f: &mut Follower<'_>) -> Result<bool> {
        use argus_engine::live::protocol::Code;
        if !self.diagnosed(f)? {
            return Ok(false);
        }
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
        let epoch = hangs["epoch"].as_u64().unwrap_or(0);
        // `hangs` reports the dataflow's spins; the live graph that diagnoses may lag them.
        let graph_at = hangs["graph_epoch"].as_u64();
        let reached = |e: u64| graph_at.is_some_and(|g| g >= e);
        let changed = self.key.as_ref() != Some(&key);
        if changed {
            self.key = Some(key.clone());
            self.seen = epoch;
        }
        let due = self.diagnosed_at.is_none_or(|t| t.elapsed() >= RECHECK);
        let waited = self
            .pending
            .as_ref()
            .is_some_and(|p| reached(p.epoch) || (!p.reported && p.since.elapsed() >= WAIT));
        if !changed && !due && !waited {
            return Ok(true);
        }
        let spinning: Vec<SegmentId> = hangs["hangs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|h| serde_json::from_value(h["segment"].clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        if key.is_empty() {
            // No spin of the watched threads: no hang (the named thread may not be traced yet).
            self.diagnosed_at = Some(Instant::now());
            self.pending = None;
            f.update(None, &spinning, Source::Live(epoch))?;
            return Ok(true);
        }
        let entries = hangs["hangs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        // A thread hung now comes first: with several matching threads (a name shared by
        // processes that come and go) the diagnosis would otherwise pick the longest spin in
        // the window, perhaps one that ended long ago. With none, the hang followed so far
        // while its spin is in the window (it ended), so the diagnosis stays on it.
        let followed = f.state.as_ref().map(|s| s.segment);
        let focus = entries
            .iter()
            .filter(|h| {
                h["open"].as_bool() == Some(true)
                    && h["duration_ns"].as_u64().unwrap_or(0) >= threshold_ns
                    && targeted(&f.args, h)
            })
            .max_by_key(|h| h["start_ns"].as_u64())
            .or_else(|| {
                entries.iter().find(|h| {
                    followed.is_some()
                        && serde_json::from_value::<SegmentId>(h["segment"].clone()).ok()
                            == followed
                })
            });
        // The live graph diagnoses once it has reached the epoch that showed these spins
        // (before, it would answer an older state than the one shown), on the diagnosis
        // thread: a slow answer holds nothing up.
        let mut args = f.args.clone();
        if let Some(h) = focus {
            args.pid = h["pid"].as_i64().map(|p| p as i32);
            args.tid = h["tid"].as_i64().map(|t| t as i32);
            args.comm = None;
        }
        if reached(self.seen) {
            self.diagnoser.ask(args, changed || waited)?;
        }
        // Meanwhile the spins say what is hung now: a hang is reported from them unless its
        // diagnosis comes first (waited for up to `WAIT` when the graph is at most
        // `NEAR_EPOCHS` behind), and the end of the one followed as soon as they show it.
        let Some(mut hung) = focus.and_then(HangState::of_hang) else {
            // Nothing hung: the diagnosis, if asked for, says the rest.
            return Ok(graph_at.is_some());
        };
        let prev = f.state.as_ref().filter(|p| p.segment == hung.segment);
        if let Some(prev) = prev {
            hung.root.clone_from(&prev.root);
            hung.diagnosed = prev.diagnosed;
        } else {
            let p = self.pending.get_or_insert(Pending {
                epoch: self.seen,
                since: Instant::now(),
                reported: false,
            });
            p.epoch = self.seen;
            // A graph a tick or two behind is worth the wait; one further behind (or none)
            // would not get there in time.
            let near = graph_at.is_some_and(|g| g + NEAR_EPOCHS >= self.seen);
            if near && p.since.elapsed() < WAIT {
                return Ok(true);
            }
            p.reported = true;
        }
        if !hung.diagnosed {
            self.pending.get_or_insert(Pending {
                epoch: self.seen,
                since: Instant::now(),
                reported: true,
            });
        }
        // As of the epoch that showed these spins (the same since: only durations grew).
        f.update(Some((hung, None)), &spinning, Source::Live(self.seen))?;
        // With no live graph at all (given up until the job seeds it anew) a new snapshot may
        // diagnose it meanwhile.
        Ok(graph_at.is_some())
    }

    /// Shows the diagnosis thread's answer, if one came: `Ok(false)` when the job had no
    /// live graph to answer from.
    fn diagnosed(&mut self, f: &mut Follower<'_>) -> Result<bool> {
        let Some(answer) = self.diagnoser.answer() else {
            return Ok(true);
        };
        let Some(live) = answer? else {
            // Asked again at the next change or recheck.
            self.diagnosed_at = None;
            return Ok(false);
        };
        // Asked for again meanwhile: ask at the next poll.
        self.diagnosed_at = (!std::mem::take(&mut self.diagnoser.again)).then(Instant::now);
        if live.epoch >= self.seen {
            self.pending = None;
        }
        let now = HangState::of(&live.diagnosis).map(|s| (s, Some(&live.diagnosis)));
        let spinning: Vec<SegmentId> = live.spins.iter().map(|s| s.segment).collect();
        // An answer older than what was shown meanwhile, or of another hang that ended, is
        // dropped by `update`.
        f.update(now, &spinning, Source::Live(live.epoch))?;
        Ok(true)
    }
}

/// The last global epoch a job's snapshot holds: snapshot `N` (`DIR/snapshots/N`) holds the
/// graph through epoch `N − 1`.
fn snapshot_epoch(path: &Path) -> Option<u64> {
    let n: u64 = path.file_name()?.to_str()?.parse().ok()?;
    Some(n.saturating_sub(1))
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

/// The follow loop's sources: the job (once it answers), the snapshots, and the last
/// snapshot asked for.
struct Following {
    dir: PathBuf,
    job: Option<LiveFollow>,
    snapshots: SnapshotReader,
    seen: Option<PathBuf>,
    warned: bool,
}

impl Following {
    /// One round: the job's answer (or, with no live graph, a new `latest` snapshot, read on
    /// the snapshot thread while the rounds go on), and any snapshot diagnosis that came in.
    fn round(&mut self, f: &mut Follower<'_>) -> Result<()> {
        if self.job.is_none() {
            if let (Connect::Job(c), Connect::Job(d)) =
                (client::connect(&self.dir)?, client::connect(&self.dir)?)
            {
                tracing::info!(
                    "following the live graph of the job running in {}",
                    self.dir.display()
                );
                self.job = Some(LiveFollow::new(c, Diagnoser::start(d)?));
            }
        }
        let answer = self.snapshots.answer(false);
        self.show(f, answer)?;
        let latest = self.dir.join("latest");
        let current = std::fs::canonicalize(&latest).ok();
        let live = match self.job.as_mut().map(|j| j.poll(f)) {
            Some(Ok(answered)) => answered,
            Some(Err(e)) => {
                // The job stopped (or broke the connection): snapshots from here on.
                tracing::info!("the job in {} stopped answering: {e:#}", self.dir.display());
                self.job = None;
                false
            }
            None => false,
        };
        if live {
            // Snapshots written meanwhile hold nothing newer than the live graph.
            self.seen = current;
        } else if current.is_some() && current != self.seen {
            let snap = current.clone().context("invariant: checked")?;
            if self.snapshots.ask(snap)? {
                self.seen = current;
            }
        } else if current.is_none() && !self.warned && self.seen.is_none() && self.job.is_none() {
            eprintln!(
                "argus debug: waiting for {} (is `argus start -o {}` running?)",
                latest.display(),
                self.dir.display()
            );
            self.warned = true;
        }
        Ok(())
    }

    /// Shows a snapshot's diagnosis once it is in; a snapshot that could not be read (the job
    /// may have pruned it meanwhile) is tried again, or the next `latest`.
    fn show(
        &mut self,
        f: &mut Follower<'_>,
        answer: Option<(PathBuf, Result<SnapshotRead>)>,
    ) -> Result<()> {
        match answer {
            Some((snap, Ok(read))) => f.snapshot(&read, &snap)?,
            Some((snap, Err(e))) => {
                if !self.warned {
                    tracing::warn!("{e:#}");
                    self.warned = true;
                }
                if self.seen.as_ref() == Some(&snap) {
                    self.seen = None;
                }
            }
            None => {}
        }
        Ok(())
    }
}

/// Runs the follow loop.
pub fn run(args: &DebugArgs) -> Result<u8> {
    let deadline = args
        .follow_for
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let mut auto = args.clone();
    auto.auto = true;
    let named = args.pid.is_some() || args.tid.is_some() || args.comm.is_some();
    let mut f = Follower {
        args: auto.clone(),
        state: None,
        shown: 0,
        reported: false,
        out: Box::new(std::io::stdout().lock()),
    };
    let mut following = Following {
        dir: args.snapshot.clone(),
        job: None,
        snapshots: SnapshotReader::reading(move |snap| read_snapshot(&auto, named, snap))?,
        seen: None,
        warned: false,
    };
    while deadline.is_none_or(|d| Instant::now() < d) {
        following.round(&mut f)?;
        std::thread::sleep(POLL);
    }
    // A snapshot being read when the time was up is still shown.
    let answer = following.snapshots.answer(true);
    following.show(&mut f, answer)?;
    Ok(if f.reported { 1 } else { 0 })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Mutex};

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

    fn state(segment: u64, open: bool, diagnosed: bool, root: Option<&str>) -> HangState {
        HangState {
            segment: SegmentId(segment),
            tid: Tid(10),
            pid: Pid(10),
            who: "app (tid 10) of app (pid 10)".into(),
            class: "LongWait".into(),
            start_ns: 1_000,
            open,
            duration_ns: 3_000_000_000,
            root: root.map(String::from),
            diagnosed,
        }
    }

    /// A hang the job's spins showed before its live graph could diagnose it is new once,
    /// diagnosed once when the diagnosis comes, and followed as any other from then on.
    #[test]
    fn a_hang_reported_before_its_diagnosis_is_new_once_then_diagnosed_once() {
        let seen = state(1, true, false, None);
        let here = [SegmentId(1)];
        assert_eq!(
            changes(None, Some(&seen), &here),
            vec![Change::NewHang(seen.clone())]
        );
        assert!(changes(Some(&seen), Some(&seen), &here).is_empty());
        let found = state(1, true, true, Some("worker (tid 11): LongRunning"));
        assert_eq!(
            changes(Some(&seen), Some(&found), &here),
            vec![Change::Diagnosed(found.clone())]
        );
        let other = state(1, true, true, Some("disk (tid 12): LongWait"));
        assert_eq!(
            changes(Some(&found), Some(&other), &here),
            vec![Change::RootCauseChanged {
                hang: other.clone(),
                before: found.root.clone()
            }]
        );
        // Diagnosed as it ends: both are said.
        let ended = state(1, false, true, None);
        assert_eq!(
            changes(Some(&seen), Some(&ended), &here),
            vec![
                Change::Resolved {
                    hang: ended.clone(),
                    how: "the thread was woken"
                },
                Change::Diagnosed(ended.clone())
            ]
        );
        // An undiagnosed hang replaced by another one.
        let next = state(2, true, false, None);
        assert_eq!(
            changes(Some(&seen), Some(&next), &[SegmentId(2)]),
            vec![
                Change::Resolved {
                    hang: seen.clone(),
                    how: "it left the retained window"
                },
                Change::NewHang(next.clone())
            ]
        );
    }

    /// A fake job on one end of a socket pair: `hangs` answers what `state` holds, any
    /// other request (the live graph's reads) `not_ready`, after `slow`.
    fn fake_job(state: Arc<Mutex<Value>>, slow: Duration) -> Client {
        let (ours, theirs) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut w = theirs.try_clone().unwrap();
            for line in BufReader::new(theirs).lines().map_while(Result::ok) {
                let req: Value = serde_json::from_str(&line).unwrap();
                let answer = if req["op"] == "hangs" {
                    json!({"v": 1, "id": req["id"], "ok": true, "result": *state.lock().unwrap()})
                } else {
                    std::thread::sleep(slow);
                    json!({"v": 1, "id": req["id"], "ok": false,
                           "error": {"code": "not_ready", "message": "behind"}})
                };
                if writeln!(w, "{answer}").is_err() {
                    return;
                }
            }
        });
        Client::new(ours).unwrap()
    }

    /// What the follower printed, shared with the test.
    #[derive(Clone, Default)]
    struct Printed(Arc<Mutex<Vec<u8>>>);

    impl Write for Printed {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Printed {
        fn lines(&self) -> Vec<Value> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        }
    }

    /// A follower of `--comm app --json` on a fake job holding `state`, whose diagnoses
    /// answer after `slow`; what it prints.
    fn following(
        state: &Arc<Mutex<Value>>,
        slow: Duration,
    ) -> (LiveFollow, Follower<'static>, Printed) {
        let live = LiveFollow {
            client: fake_job(state.clone(), Duration::ZERO),
            diagnoser: Diagnoser::start(fake_job(state.clone(), slow)).unwrap(),
            key: None,
            diagnosed_at: None,
            seen: 0,
            pending: None,
        };
        let printed = Printed::default();
        let mut a = args(&["--comm", "app", "--json"]);
        a.auto = true;
        let f = Follower {
            args: a,
            state: None,
            shown: 0,
            reported: false,
            out: Box::new(printed.clone()),
        };
        (live, f, printed)
    }

    /// Polls: the first poll (after which `first` checks the follower) prints nothing, the
    /// hang's diagnosis being waited for a little; the poll after [`WAIT`] prints one
    /// `new_hang`. What was printed.
    fn new_hang_after_wait(
        live: &mut LiveFollow,
        f: &mut Follower<'_>,
        printed: &Printed,
        first: impl FnOnce(&LiveFollow),
    ) -> Vec<Value> {
        assert!(live.poll(f).unwrap(), "the job answered");
        first(live);
        assert!(
            printed.lines().is_empty(),
            "the diagnosis is waited for a little"
        );
        std::thread::sleep(WAIT);
        assert!(live.poll(f).unwrap());
        let l = printed.lines();
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0]["change"], "new_hang");
        l
    }

    /// The job's `hangs` runs ahead of its live graph (`graph_epoch`): a hang the graph has
    /// not reached is reported from the spins after [`WAIT`], undiagnosed, its end is
    /// reported from them too, and the graph's older state is never asked for; with no
    /// graph at all the follower may read snapshots meanwhile.
    #[test]
    fn a_hang_the_live_graph_has_not_reached_is_reported_from_the_jobs_spins() {
        let segment = SegmentId::new(Tid(10), 3);
        let hang = |open: bool, duration_ns: u64| {
            json!({"segment": segment, "label": segment.to_string(), "tid": 10, "pid": 10,
                   "comm": "app", "process": "app", "class": "LongWait", "start_ns": 1_000,
                   "end_ns": 1_000 + duration_ns, "open": open, "duration_ns": duration_ns})
        };
        let state = Arc::new(Mutex::new(
            json!({"epoch": 10, "generation": 0, "watermark_ns": 1,
            "graph_epoch": 9, "hangs": [hang(true, 3_000_000_000)]}),
        ));
        let (mut live, mut f, printed) = following(&state, Duration::ZERO);
        let l = new_hang_after_wait(&mut live, &mut f, &printed, |_| {});
        assert_eq!(
            (l[0]["source"].as_str(), l[0]["epoch"].as_u64()),
            (Some("live"), Some(10))
        );
        assert_eq!(l[0]["hang"]["segment"], json!(segment));
        assert_eq!(l[0]["hang"]["diagnosed"], false);
        assert_eq!(l[0]["hang"]["open"], true);
        assert!(l[0]["report"].is_null());
        assert!(f.reported);

        // It ends while the graph is still behind.
        *state.lock().unwrap() = json!({"epoch": 12, "generation": 0, "watermark_ns": 2,
            "graph_epoch": 9, "hangs": [hang(false, 4_000_000_000)]});
        assert!(live.poll(&mut f).unwrap());
        let l = printed.lines();
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[1]["change"], "resolved");
        assert_eq!(l[1]["epoch"], 12);
        assert_eq!(l[1]["hang"]["open"], false);

        // The graph given up: nothing new to say; snapshots may be read meanwhile.
        *state.lock().unwrap() = json!({"epoch": 13, "generation": 0, "watermark_ns": 3,
            "graph_epoch": null, "hangs": [hang(false, 4_000_000_000)]});
        assert!(!live.poll(&mut f).unwrap());
        assert_eq!(printed.lines().len(), 2);
        // An older snapshot's state is not shown.
        f.update(
            None,
            &[],
            Source::Snapshot(Path::new("/job/snapshots/0000000011")),
        )
        .unwrap();
        assert_eq!(printed.lines().len(), 2, "no going back to epoch 11");
        assert_eq!(f.state.as_ref().map(|s| s.segment), Some(segment));

        // A new hang while the graph is far behind is reported at the first poll.
        let next = SegmentId::new(Tid(10), 9);
        *state.lock().unwrap() = json!({"epoch": 40, "generation": 0, "watermark_ns": 4,
            "graph_epoch": 20, "hangs": [hang(false, 4_000_000_000),
            {"segment": next, "label": next.to_string(), "tid": 10, "pid": 10, "comm": "app",
             "process": "app", "class": "LongWait", "start_ns": 9_000,
             "end_ns": 2_000_009_000, "open": true, "duration_ns": 2_000_000_000}]});
        assert!(live.poll(&mut f).unwrap());
        let l = printed.lines();
        assert_eq!(l.len(), 3, "{l:?}");
        assert_eq!(l[2]["change"], "new_hang");
        assert_eq!(l[2]["hang"]["segment"], json!(next));
        assert_eq!(l[2]["epoch"], 40);

        // A newer snapshot's diagnosis of the older hang, ended long ago, is not news...
        let mut older = super::tests::state(0, false, true, Some("disk (tid 12): LongWait"));
        older.segment = segment;
        f.update(
            Some((older.clone(), None)),
            &[],
            Source::Snapshot(Path::new("/job/snapshots/0000000050")),
        )
        .unwrap();
        assert_eq!(printed.lines().len(), 3, "{:?}", printed.lines());
        assert_eq!(f.state.as_ref().map(|s| s.segment), Some(next));
        // ...but another thread's older hang still going is.
        let mut other = super::tests::state(0, true, true, Some("disk (tid 12): LongWait"));
        other.segment = SegmentId::new(Tid(11), 4);
        other.tid = Tid(11);
        f.update(
            Some((other.clone(), None)),
            &[other.segment, next],
            Source::Snapshot(Path::new("/job/snapshots/0000000055")),
        )
        .unwrap();
        let l = printed.lines();
        let last = l.last().unwrap();
        assert_eq!(last["change"], "new_hang", "{l:?}");
        assert_eq!(last["hang"]["segment"], json!(other.segment));
    }

    /// A live graph that has reached the hang but is slow to answer its diagnosis (it reads
    /// between the epochs it applies): the hang is reported from the spins after [`WAIT`],
    /// and the polling goes on while the diagnosis is under way.
    #[test]
    fn a_slow_diagnosis_does_not_hold_up_the_report() {
        let segment = SegmentId::new(Tid(10), 3);
        let state = Arc::new(Mutex::new(json!({"epoch": 10, "generation": 0,
            "watermark_ns": 1, "graph_epoch": 10, "hangs": [
            {"segment": segment, "label": segment.to_string(), "tid": 10, "pid": 10,
             "comm": "app", "process": "app", "class": "LongWait", "start_ns": 1_000,
             "end_ns": 3_000_001_000_u64, "open": true, "duration_ns": 3_000_000_000_u64}]})));
        let (mut live, mut f, printed) = following(&state, Duration::from_secs(30));
        let t = Instant::now();
        let l = new_hang_after_wait(&mut live, &mut f, &printed, |live| {
            assert!(live.diagnoser.work.busy, "the diagnosis was asked for");
        });
        assert_eq!(l[0]["hang"]["segment"], json!(segment));
        assert!(l[0]["report"].is_null());
        assert!(live.diagnoser.work.busy, "still under way");
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "nothing waited for it"
        );
    }

    /// The snapshot and diagnosis threads run at the job's priority, the polling at the
    /// user's.
    #[test]
    fn the_followers_reads_run_at_the_jobs_priority() {
        // SAFETY: gettid and getpriority on the calling thread take no pointers.
        let nice =
            || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut reader = SnapshotReader::reading(move |_| {
            tx.send(nice()).unwrap();
            anyhow::bail!("no snapshot")
        })
        .unwrap();
        assert!(reader.ask(PathBuf::from("/nowhere")).unwrap());
        assert!(matches!(reader.answer(true), Some((_, Err(_)))));
        assert_eq!(rx.recv().unwrap(), READ_NICE);
        assert!(nice() < READ_NICE, "the calling thread keeps its priority");
    }

    /// With the live graph given up, the follower reads `latest` on its snapshot thread: a
    /// hang the job's spins show meanwhile is reported at once, however long the snapshot
    /// takes; the snapshot's older answer, when it comes, changes nothing.
    #[test]
    fn a_snapshot_being_read_does_not_hold_up_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snapshots").join("0000000050");
        std::fs::create_dir_all(&snap).unwrap();
        std::os::unix::fs::symlink(&snap, dir.path().join("latest")).unwrap();
        // A hang that ended: nothing hung now, nothing the spins can say; a snapshot might.
        let old = SegmentId::new(Tid(10), 1);
        let ended = json!({"segment": old, "label": old.to_string(), "tid": 10, "pid": 10,
            "comm": "app", "process": "app", "class": "LongWait", "start_ns": 500,
            "end_ns": 4_000_000_500_u64, "open": false, "duration_ns": 4_000_000_000_u64});
        let state = Arc::new(Mutex::new(json!({"epoch": 60, "generation": 0,
            "watermark_ns": 1, "graph_epoch": null, "hangs": [ended.clone()]})));
        let (live, mut f, printed) = following(&state, Duration::ZERO);
        // The snapshot's read waits for the test (or, should a round wait for it, for a
        // watchdog, which the test then sees).
        let (open, gate) = crossbeam_channel::bounded::<bool>(2);
        let watchdog = open.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(30));
            let _ = watchdog.send(true);
        });
        let mut following = Following {
            dir: dir.path().to_path_buf(),
            job: Some(live),
            snapshots: SnapshotReader::reading(move |_| {
                let by_watchdog = gate.recv().unwrap_or(true);
                anyhow::ensure!(!by_watchdog, "a round waited for the snapshot");
                Ok(SnapshotRead {
                    hang: None,
                    spinning: Vec::new(),
                })
            })
            .unwrap(),
            seen: None,
            warned: false,
        };
        following.round(&mut f).unwrap();
        assert!(
            following.snapshots.busy,
            "no live graph: the snapshot is read"
        );
        assert_eq!(
            following.seen.as_deref(),
            Some(std::fs::canonicalize(&snap).unwrap().as_path())
        );
        assert!(printed.lines().is_empty());

        // A hang while the snapshot is read: the next round reports it.
        let segment = SegmentId::new(Tid(10), 3);
        *state.lock().unwrap() = json!({"epoch": 61, "generation": 0, "watermark_ns": 2,
            "graph_epoch": null, "hangs": [ended,
            {"segment": segment, "label": segment.to_string(), "tid": 10, "pid": 10,
             "comm": "app", "process": "app", "class": "LongWait", "start_ns": 5_000_000_000_u64,
             "end_ns": 8_000_000_000_u64, "open": true, "duration_ns": 3_000_000_000_u64}]});
        following.round(&mut f).unwrap();
        let l = printed.lines();
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0]["change"], "new_hang");
        assert_eq!(l[0]["hang"]["segment"], json!(segment));
        assert!(following.snapshots.busy, "the snapshot is still being read");

        // The snapshot (through epoch 49) answers: older than what was shown, so no change.
        open.send(false).unwrap();
        let answer = following.snapshots.answer(true);
        assert!(
            matches!(&answer, Some((_, Ok(_)))),
            "read by the test's leave"
        );
        following.show(&mut f, answer).unwrap();
        following.round(&mut f).unwrap();
        assert_eq!(printed.lines().len(), 1, "{:?}", printed.lines());
        assert_eq!(f.state.as_ref().map(|s| s.segment), Some(segment));
        assert!(
            !following.snapshots.busy,
            "the same snapshot is not read again"
        );
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
