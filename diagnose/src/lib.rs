//! # argus-diagnose — from a snapshot's tables to an explained hang
//!
//! This crate is the last stage of Argus: it loads the tables of a snapshot (segments, causal
//! edges, spinning vertices, threads) into an event graph ([`Graph`], a petgraph), picks the
//! hang of the thread the user names ([`find_hang`]), and walks the graph backwards from it
//! (Algorithm 1 of the Argus paper with *interactive slicing*) to the root cause. Where the
//! graph is ambiguous (several incoming edges, or a weak one) the walk asks an [`Oracle`]: a
//! person at a terminal ([`TerminalOracle`]), a list of answers ([`ScriptedOracle`]) or the
//! default policy ([`AutoOracle`]: the most recent strong edge). The result is a [`Report`]:
//! the JSON contract of `argus debug --json` and a terminal explanation ([`Report::to_text`]).
//!
//! What the walk does per class of hang (see the `walk` module docs for the details):
//! - **LongWait**: follow the wake-up that ended the wait back to its waker; a waker that was
//!   running through the wait is a LongRunning culprit, one that was itself blocked is
//!   explained recursively ("the culprit of the culprit"); timers lead to their armer (a
//!   thread's own timer means "it slept"), device interrupts end the walk. A wait that was
//!   never woken (open, or timed out) is compared with a **baseline**: the last short wait of
//!   the same thread in the same syscall, whose waker is examined during the hang.
//! - **LongRunning**: the hang is the culprit; the slice back one or two steps gives context.
//! - **RepeatedYield**: the thread polls a data flag; the likely setter (the busiest other
//!   thread of the process) is asked about and diagnosed in turn.
//!
//! Caller responsibilities: read the snapshot (the `argus` binary uses the Parquet reader of
//! `argus-sinks`) into a [`GraphInput`], choose the [`Target`] and the oracle, print the
//! report and map [`Outcome`] to the exit code. This crate does no I/O besides what a
//! [`TerminalOracle`] is given, never sees timely, and never panics on bad data: dangling
//! edges are dropped and counted, missing segments are [`Error`]s.
//!
//! Around the walk:
//! - **Finding the hang** ([`find_hangs`], module `hangs`): the watched thread's segments
//!   longer than the threshold (or yield runs), minus idleness in the thread's own event-loop
//!   wait *learned from the trace*, plus hangs the application marked with
//!   `argus:hang-begin` / `argus:hang-end` markers; each with the evidence for its class.
//! - **Ranking** ([`beam`]): beam search with look-back (width β, look-back depth, penalties
//!   per edge kind and strength) gives the report's top-k `ranked_paths` and the default
//!   answer of every question, so that under `--auto` the walk's path follows the best one.
//! - **Baselines**: similar vertices by signature (wait syscall, syscall sequence, connection
//!   kinds; a short wait ended by a wake-up is normal), the user's pick (default the most
//!   recent), the baseline's wake-up path, and what each of its threads did during the hang.
//!   Every abnormal thread of that path is ranked (stuck through the whole hang first, the
//!   nearest first; then by beam score) and its chain diagnosed; the best-ranked chain (or the
//!   one a person picks) gives the root cause, the others are `further_culprits`.
//! - **Saved answers** ([`SavedAnswers`], [`RuleOracle`]): explicit answers kept as rules keyed
//!   by the question's pattern (no ids), reused on the next hang of the same shape.
//! - **Pictures**: [`Report::to_picture`] draws the path as lanes per thread for a terminal;
//!   [`Report::highlight`] gives the segments and edges to mark in a Perfetto or DOT export.
//!
//! - **Blame** ([`Blame`]): the hang's window cut into pieces, each charged to the thread
//!   that held it (on CPU, runnable, a timer, a device, blocked untraced), back along the
//!   wake-ups the walk chose; the thread holding the largest share is the root cause (the
//!   last of `root_causes`), not the last culprit the walk reached.
//!
//! - **Findings** ([`Finding`], [`Step`], [`During`]): every decision of the walk is data in
//!   the report (why a root cause is one, what each path item did); [`Phrases`] turns it into
//!   the report's English (`reason`, `description`, prompts, advice, summary). Tests and
//!   scripts read the data.
//!
//! - **Partial graphs** (module [`partial`]): the same diagnosis on parts of a graph fetched
//!   on demand from a store that holds it whole (the live arrangements of `argus start`): the
//!   graph records every read it could not answer exactly ([`Need`]), [`rounds`] fetches
//!   those and runs again until none is missing, so the report is the whole graph's.
//!
//! - **Call stacks** ([`Graph::set_stacks`], module [`stacks`]): when the trace was recorded
//!   with `--stacks`, every question, choice and report step carries the stack of the
//!   syscall that blocked or sent (a few user frames and the innermost kernel frame).
//!
//! ```
//! use argus_diagnose::{
//!     diagnose, AutoOracle, DiagnoseConfig, Finding, Graph, GraphInput, Outcome, Target,
//! };
//! use argus_schema::*;
//!
//! // One thread blocked 3 s in nanosleep: a LongWait whose root cause is the sleep itself.
//! let tid = Tid(100);
//! let seg = Segment {
//!     id: SegmentId::new(tid, 0), tid, pid: Pid(100), kind: SegmentKind::Task,
//!     start_ns: Nanos(0), end_ns: Nanos(3_001_000_000),
//!     start: StartCause::FirstSeen, end: EndCause::Woken,
//!     wait_start_ns: Some(Nanos(1_000_000)), wait_state: b'S',
//!     wait_syscall: syscalls::number("nanosleep").unwrap_or(35), wait_ret: Some(0), wait_object: None,
//!     on_cpu_ns: 1_000_000, preemptions: 0, yields: 0, syscalls: 1, events: 4,
//!     syscall_seq: vec![35],
//! };
//! let spin = Spin {
//!     segment: seg.id, last: seg.id, tid, pid: Pid(100), class: SpinClass::LongWait,
//!     start_ns: Nanos(1_000_000), end_ns: seg.end_ns, open: false, on_cpu_ns: 0,
//!     wait_ns: 3_000_000_000, segments: 1, wait_syscall: seg.wait_syscall, timeouts: 0,
//! };
//! let graph = Graph::new(GraphInput {
//!     segments: vec![seg], spins: vec![spin], ..GraphInput::default()
//! })?;
//! let target = Target { pid: Pid(100), tid: None };
//! let d = diagnose(&graph, Some(target), &mut AutoOracle, &DiagnoseConfig::default())?;
//! assert_eq!(d.outcome(), Outcome::HangDiagnosed);
//! let report = d.report.as_ref().expect("a hang");
//! // The decision is data; `reason` says it in words.
//! assert_eq!(
//!     report.root_causes[0].finding,
//!     Finding::Slept { syscall: "nanosleep".into(), wait_ns: 3_000_000_000, still_sleeping: false, woke: None },
//! );
//! assert_eq!(report.root_causes[0].reason, "tid 100 slept 3.000 s in nanosleep");
//! # Ok::<(), argus_diagnose::Error>(())
//! ```
#![warn(missing_docs)]

mod answerer;
mod answers;
pub mod beam;
mod blame;
mod coverage;
mod findings;
mod graph;
pub mod hangs;
pub mod inspect;
mod logical;
pub mod partial;
mod path_edge;
mod picture;
pub mod profile;
mod report;
pub mod slow;
pub mod stacks;
mod walk;

pub use answerer::{
    answer_of, parse_reply, write_question, AutoOracle, Oracle, Reply, ScriptedOracle,
    TerminalOracle,
};
pub use answers::{RuleOracle, SavedAnswers, SavedPick, SavedRule};
pub use beam::{BeamConfig, Penalties};
pub use blame::{Blame, BlameContributor, BlameState, BlameStep, BlameTimes};
pub use findings::{By, During, Finding, FlagEvidence, LogicalWait, RunStart, Step, WakerState};
pub use graph::{AppEvents, FlagHit, Graph, GraphInput, Marker};
pub use hangs::{find_hangs, Hang, HangConfig, HangSource, LoopWait};
pub use partial::{fetch_whole, rounds, Extract, Need, Parts, Replay, RoundStats, Run, Whole};
pub use picture::Highlight;
pub use report::{
    secs, Answer, BaselineInfo, Candidate, CauseClass, Choice, FurtherCulprit, HangInfo, PathEdge,
    PathEdgeKind, PathItem, Question, RankedPath, RankedStep, Report, Role, RootCause,
    ThreadComparison,
};
pub use slow::{ExtraWait, Request, RequestGroup, SlowConfig, SlowRequest, SlowRequests};
pub use stacks::{stack_line, CallStack, Frame};
pub use walk::{DiagnoseConfig, Phrases};

use argus_schema::{Pid, SegmentId, Spin, Tid};
use serde::{Deserialize, Serialize};

/// Errors of the diagnosis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A spin names a segment that is not in the segments table.
    #[error("spin names segment {segment} that is not in the segments table")]
    MissingSegment {
        /// The missing segment.
        segment: SegmentId,
    },
    /// A table is larger than the graph's 32-bit indices.
    #[error("{table} table has {rows} rows, more than the event graph can index")]
    TooLarge {
        /// Which table.
        table: &'static str,
        /// How many rows it has.
        rows: usize,
    },
    /// A saved-answers file (`--save-answers`) is not valid JSON of the expected shape.
    #[error("saved answers: {message}")]
    BadSavedAnswers {
        /// What the JSON parser said.
        message: String,
    },
    /// A diagnosis on a partial graph still lacked parts after this many rounds
    /// ([`partial::rounds`]).
    #[error("the diagnosis still lacked parts of the graph after {rounds} rounds")]
    TooManyRounds {
        /// Rounds run.
        rounds: usize,
    },
    /// A line of an answers file is not an answer.
    #[error(
        "answers file line {line}: expected a choice number, s/stop or d/default, got {text:?}"
    )]
    BadAnswer {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// Edges cannot be dropped from a partial graph ([`Graph::without_edges`]): it holds part
    /// of a graph that lives elsewhere.
    #[error("edges cannot be dropped from a partial graph; load a snapshot instead")]
    Partial,
}

/// The thread to diagnose: `tid`, else the main thread of `pid` (tid == pid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// Process.
    pub pid: Pid,
    /// Thread; `None` for the main thread.
    pub tid: Option<Tid>,
}

impl Target {
    /// The thread the target names.
    pub fn thread(&self) -> Tid {
        self.tid.unwrap_or(Tid(self.pid.0))
    }
}

/// The length of a spin for ranking: open spins reach the trace end.
fn spin_rank(graph: &Graph, s: &Spin) -> (u64, argus_schema::Nanos) {
    let end = hangs::spin_end(graph, s);
    (s.start_ns.until(end), end)
}

/// The hang of a target thread: its longest spin (ties: the latest). `None`: no hang.
pub fn find_hang(graph: &Graph, target: Target) -> Option<Spin> {
    let tid = target.thread();
    graph
        .spins()
        .iter()
        .filter(|s| s.tid == tid)
        .max_by_key(|s| (spin_rank(graph, s), s.segment))
        .cloned()
}

/// With no target: the longest spin of any process' main thread ([`Graph::is_main`]), as the
/// design watches main threads by default. Ties: the latest.
pub fn find_any_hang(graph: &Graph) -> Option<Spin> {
    graph
        .spins()
        .iter()
        .filter(|s| graph.is_main(s.tid, s.pid))
        .max_by_key(|s| (spin_rank(graph, s), s.segment))
        .cloned()
}

/// The target named by a thread or process name (`--comm`): among the threads whose `comm`
/// (or process name) matches, the one with the longest spin, else the first main thread.
pub fn target_by_comm(graph: &Graph, name: &str) -> Option<Target> {
    let matching: Vec<&argus_schema::ThreadInfo> = graph
        .threads()
        .iter()
        .filter(|t| t.comm == name || t.process == name)
        .collect();
    let target_of = |t: &argus_schema::ThreadInfo| Target {
        pid: t.pid,
        tid: (t.tid.0 != t.pid.0).then_some(t.tid),
    };
    let main = |tid: Tid, pid: argus_schema::Pid| graph.is_main(tid, pid);
    let best_spin = graph
        .spins()
        .iter()
        .filter(|s| {
            matching
                .iter()
                .any(|t| t.tid == s.tid && (t.comm == name || main(s.tid, s.pid)))
        })
        .max_by_key(|s| (spin_rank(graph, s), s.segment));
    if let Some(s) = best_spin {
        return Some(Target {
            pid: s.pid,
            tid: (s.tid.0 != s.pid.0).then_some(s.tid),
        });
    }
    matching
        .iter()
        .find(|t| main(t.tid, t.pid))
        .or(matching.first())
        .map(|t| target_of(t))
}

/// Whether a hang was found: the CLI's exit code (0 no hang, 1 hang diagnosed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// No spinning vertex in the target.
    NoHang,
    /// A hang was found and diagnosed.
    HangDiagnosed,
}

impl Outcome {
    /// The exit code of `argus debug`.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::NoHang => 0,
            Outcome::HangDiagnosed => 1,
        }
    }
}

/// The result of [`diagnose`]: the report of the hang, if there was one.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnosis {
    /// The target examined (`None`: every main thread).
    pub target: Option<Target>,
    /// Who was examined, in words.
    pub subject: String,
    /// The report; `None` when no hang was found.
    pub report: Option<Report>,
}

impl Diagnosis {
    /// No hang, or hang diagnosed.
    pub fn outcome(&self) -> Outcome {
        match self.report {
            Some(_) => Outcome::HangDiagnosed,
            None => Outcome::NoHang,
        }
    }

    /// The terminal explanation.
    pub fn to_text(&self) -> String {
        match &self.report {
            Some(r) => r.to_text(),
            None => format!("No hang found in {}.\n", self.subject),
        }
    }

    /// The `argus debug --json` object: the report plus `"outcome"`; with no hang, `hang` is
    /// `null` and the lists are empty.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = match &self.report {
            Some(r) => serde_json::to_value(r).unwrap_or(serde_json::Value::Null),
            None => serde_json::json!({
                "hang": null,
                "path": [],
                "root_causes": [],
                "questions": [],
                "candidates": [],
                "advice": [],
                "summary": format!("No hang found in {}.", self.subject),
            }),
        };
        if let Some(obj) = v.as_object_mut() {
            obj.insert(
                "outcome".to_string(),
                serde_json::to_value(self.outcome()).unwrap_or(serde_json::Value::Null),
            );
        }
        v
    }
}

/// Finds the hang of `target` (or of any main thread) and diagnoses it.
pub fn diagnose(
    graph: &Graph,
    target: Option<Target>,
    oracle: &mut dyn Oracle,
    config: &DiagnoseConfig,
) -> Result<Diagnosis, Error> {
    let (tids, subject) = match target {
        Some(t) => {
            let tid = t.thread();
            let who = match graph.thread(tid) {
                Some(info) if graph.is_main(tid, info.pid) => {
                    format!("the main thread of {} (pid {})", info.comm, info.pid.0)
                }
                _ => graph.describe(tid),
            };
            (vec![tid], who)
        }
        None => (
            main_threads(graph),
            "the main threads of all processes".to_string(),
        ),
    };
    diagnose_watched(graph, &tids, subject, target, oracle, config)
}

/// Every process' main thread ([`Graph::is_main`]) that has segments.
pub fn main_threads(graph: &Graph) -> Vec<Tid> {
    let mut tids: Vec<Tid> = graph
        .thread_ids()
        .filter(|t| t.is_task() && graph.pid_of(*t).is_some_and(|p| graph.is_main(*t, p)))
        .collect();
    tids.sort_unstable();
    tids
}

/// Finds the hang among the watched threads `tids` (marked hangs first, then the longest)
/// and diagnoses it. `subject` names the watched threads in the "no hang" message.
pub fn diagnose_watched(
    graph: &Graph,
    tids: &[Tid],
    subject: String,
    target: Option<Target>,
    oracle: &mut dyn Oracle,
    config: &DiagnoseConfig,
) -> Result<Diagnosis, Error> {
    let mut best: Option<Hang> = None;
    for &tid in tids {
        if let Some(h) = find_hangs(graph, tid, &config.hang).into_iter().next() {
            let key = |h: &Hang| hangs::rank(h, config.hang.at_ns);
            if best.as_ref().is_none_or(|b| key(&h) < key(b)) {
                best = Some(h);
            }
        }
    }
    let report = match best {
        Some(h) => Some(walk::run(graph, &h, oracle, config)?),
        None => None,
    };
    let subject = match (&report, tids) {
        (None, [tid]) => match hangs::idle_waits(graph, *tid, &config.hang) {
            Some((lw, n)) if n > 0 => format!(
                "{subject} ({n} long wait(s) in {}, its event-loop wait, are idleness)",
                argus_schema::syscalls::name(lw.syscall)
            ),
            _ => subject,
        },
        _ => subject,
    };
    Ok(Diagnosis {
        target,
        subject,
        report,
    })
}

/// Diagnoses one hang found by [`find_hangs`] (a person picked it from the list).
pub fn diagnose_hang(
    graph: &Graph,
    hang: &Hang,
    oracle: &mut dyn Oracle,
    config: &DiagnoseConfig,
) -> Result<Report, Error> {
    walk::run(graph, hang, oracle, config)
}

/// Diagnoses one spinning vertex.
pub fn diagnose_spin(
    graph: &Graph,
    spin: &Spin,
    oracle: &mut dyn Oracle,
    config: &DiagnoseConfig,
) -> Result<Report, Error> {
    let mut spin = spin.clone();
    spin.end_ns = hangs::spin_end(graph, &spin);
    let lw = hangs::learn_loop_wait(graph, spin.tid, &config.hang);
    let hang = Hang {
        evidence: hangs::class_evidence(graph, &spin, lw.as_ref()),
        spin,
        source: HangSource::Spins,
        loop_wait: lw,
    };
    walk::run(graph, &hang, oracle, config)
}
