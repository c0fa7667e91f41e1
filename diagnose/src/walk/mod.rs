//! The backward walk: Algorithm 1 of the paper with interactive slicing.
//!
//! ```text
//!  LongWait   h0 = wait start ── blocked ── h1 = wake-up ─► next segment of the hang thread
//!                                                   ▲ incoming Wakeup edge(s): the waker W
//!  W (task)   started before h0 + slack?  yes ─► culprit: LongRunning (or CPU-starved)
//!                                         no  ─► where did W's thread spend [h0, wake-up)?
//!                                                the wait covering most of it (a logical
//!                                                wait counts whole) is recursed on; shorter
//!                                                waits after it (a flush, a hand-off) are
//!                                                passed over, not blamed
//!  W (timer)  ─► Timer edge to the armer; armer's thread == woken thread ─► "it slept"
//!  W (irq)    no incoming edge ─► device interrupt
//!  open wait  no wake-up at all ─► baseline: the last short wait in the same syscall, who ended
//!             it, and what that thread did during the hang (blocked ─► recurse on its wait)
//!  RepeatedYield ─► the likely flag setter (a question), then recurse on it
//!  LongRunning   ─► culprit itself; slice back one or two steps for context
//! ```
//!
//! Every choice between several incoming edges, or of a weak edge, is a [`Question`] for the
//! [`Oracle`]; a single strong edge is followed without asking.
//!
//! One room per kind of decision; this module holds the walk's state and bookkeeping (the
//! path, the root causes, what was visited) and dispatches on the hang's class:
//!
//! | module | decides |
//! |---|---|
//! | `asking` | which cause to follow: a single strong edge, else a question with a beam-search default |
//! | `long_wait` | why a wait lasted: its waker busy, starved, blocked, late, a timer or an interrupt |
//! | `yield_loop` | who holds the lock or sets the flag a polling loop waits for, and why it was late |
//! | `long_running` | what started the work of a busy culprit (input, context) |
//! | `baseline` | a wait nobody ended, against a similar one that ended: which threads were abnormal, their rank |
//! | `activity` | what a thread did during a window |
//! | `phrases` | nothing: it says the decisions ([`Finding`], [`Step`], `During`) in English |
//!
//! The walk records what it decided as data ([`Finding`] for a root cause, [`Step`] for a
//! path item); every string of the report comes from `phrases`.

use crate::answerer::Oracle;
use crate::beam::BeamConfig;
use crate::findings::{By, Finding, Step};
use crate::graph::Graph;
use crate::hangs::{spin_end, Hang, HangConfig};
use crate::report::{
    BaselineInfo, Candidate, CauseClass, FurtherCulprit, HangInfo, PathEdge, PathItem, Question,
    Report, Role, RootCause,
};
use crate::Error;
use argus_schema::syscalls;
use argus_schema::{CausalEdge, EdgeKind, Nanos, Segment, SegmentId, SpinClass};
use std::collections::HashSet;

mod activity;
mod asking;
mod baseline;
mod blame;
mod long_running;
mod long_wait;
mod phrases;
mod yield_loop;

pub use phrases::Phrases;
use phrases::{sc, src_syscall};

/// Tuning of the walk. The defaults follow the design notes.
#[derive(Clone, Debug, PartialEq)]
pub struct DiagnoseConfig {
    /// Stop explaining a delay shorter than this (ns)...
    pub floor_ns: u64,
    /// ...or shorter than this fraction of the hang, whichever is larger.
    pub floor_fraction: f64,
    /// A waker that started within this fraction of the window (or the floor) after the
    /// window began was already there: it ran (or waited for a CPU) through the window.
    pub running_slack: f64,
    /// On-CPU fraction from which a thread counts as busy (below: runnable but starved), and
    /// the fraction of a window a wait must cover to count as blocked through it.
    pub busy_fraction: f64,
    /// Most steps of the walk before it stops.
    pub max_depth: usize,
    /// How many steps to slice back from a LongRunning culprit for context.
    pub context_steps: usize,
    /// "Shortly before the end" of a RepeatedYield loop, for flag setters (ns).
    pub near_ns: u64,
    /// Most choices offered by one question (the most recent ones are kept).
    pub max_choices: usize,
    /// Most earlier segments of a thread examined when looking for a baseline.
    pub baseline_scan: usize,
    /// Most steps of a baseline's wake-up path.
    pub baseline_depth: usize,
    /// Most steps sliced back from a LongRunning hang to the input that started it.
    pub input_depth: usize,
    /// Ask before recursing into the culprit of a culprit (Algorithm 1 line 19; `argus
    /// debug --confirm`). Off by default: the walk asks only where the graph is ambiguous.
    pub confirm_recursion: bool,
    /// The fraction of a hang a thread of a baseline's wake-up path must have spent blocked
    /// (outside its event-loop wait), busy or gone to count as stuck for the whole hang;
    /// such culprits rank first.
    pub whole_hang_fraction: f64,
    /// Finding the spinning vertex.
    pub hang: HangConfig,
    /// Ranking paths and default answers.
    pub beam: BeamConfig,
    /// The smallest share of the hang a thread must hold to be listed in the report's
    /// blame (the largest share is always listed: it is the root cause).
    pub blame_min_share: f64,
}

impl Default for DiagnoseConfig {
    fn default() -> DiagnoseConfig {
        DiagnoseConfig {
            floor_ns: 10_000_000,
            floor_fraction: 0.05,
            running_slack: 0.10,
            busy_fraction: 0.5,
            max_depth: 24,
            context_steps: 2,
            near_ns: 5_000_000,
            max_choices: 12,
            baseline_scan: 100_000,
            baseline_depth: 6,
            input_depth: 6,
            confirm_recursion: false,
            whole_hang_fraction: 0.8,
            hang: HangConfig::default(),
            beam: BeamConfig::default(),
            blame_min_share: 0.10,
        }
    }
}

pub(super) fn overlap(a0: Nanos, a1: Nanos, b0: Nanos, b1: Nanos) -> u64 {
    a0.max(b0).until(a1.min(b1))
}

pub(super) fn plus(t: Nanos, ns: u64) -> Nanos {
    Nanos(t.0.saturating_add(ns))
}

/// Whether `part` is at least the fraction `f` of a non-empty `whole`.
pub(super) fn at_least(part: u64, whole: u64, f: f64) -> bool {
    whole > 0 && part as f64 >= whole as f64 * f
}

/// Kinds of edge that end a wait ([`ends_wait`](argus_schema::EdgeKindInfo::ends_wait)):
/// everything but creation, timer arming, thread order and the wait↔wake pair.
pub(super) fn wakes(k: EdgeKind) -> bool {
    k.info().ends_wait
}

/// Whether `e` can have ended the wait that `woken` began after: a kind that ends waits,
/// and no later than `woken` began (the wake-up itself, or data sent during the wait and
/// read without blocking). A data dependency read later in `woken` (a reply to what
/// `woken` itself sent) came after the wait had ended.
pub(super) fn ended_wait_of(e: &CausalEdge, woken: &Segment) -> bool {
    wakes(e.kind) && e.ts <= woken.start_ns
}

/// How much an edge kind says beyond "a wake-up happened"
/// ([`specificity`](argus_schema::EdgeKindInfo::specificity)).
pub(super) fn specific(k: EdgeKind) -> u8 {
    k.info().specificity
}

pub(super) fn path_edge(e: &CausalEdge) -> PathEdge {
    PathEdge {
        kind: e.kind.into(),
        strength: e.strength,
        ts: e.ts,
    }
}

/// How the source of `e` acted on its target, for a [`Step::Waker`].
pub(super) fn edge_by(e: &CausalEdge) -> By {
    By::Edge {
        edge: e.kind.into(),
        syscall: src_syscall(e.src_syscall),
    }
}

struct Walk<'g, 'o> {
    g: &'g Graph,
    oracle: &'o mut dyn Oracle,
    cfg: &'o DiagnoseConfig,
    floor: u64,
    hang_start: Nanos,
    path: Vec<PathItem>,
    root_causes: Vec<RootCause>,
    questions: Vec<Question>,
    candidates: Vec<Candidate>,
    advice: Vec<String>,
    visited: HashSet<SegmentId>,
    /// The hang window, for beam scores.
    window: (Nanos, Nanos),
    baseline_info: Option<BaselineInfo>,
    /// The baseline's next segment (where its wake-up landed), for ranking.
    baseline_next: Option<SegmentId>,
    /// Abnormal threads of a baseline path not followed, with their chains.
    further: Vec<FurtherCulprit>,
    /// Exploring a chain with the default answers: nothing is asked or recorded as a
    /// question, and only the best-ranked culprit of a baseline is followed.
    silent: bool,
}

/// Diagnoses one spinning vertex.
pub(crate) fn run(
    g: &Graph,
    found: &Hang,
    oracle: &mut dyn Oracle,
    cfg: &DiagnoseConfig,
) -> Result<Report, Error> {
    let spin = &found.spin;
    let first = g.segment(spin.segment).ok_or(Error::MissingSegment {
        segment: spin.segment,
    })?;
    let end = spin_end(g, spin);
    let dur = spin.start_ns.until(end);
    let mut w = Walk {
        g,
        oracle,
        cfg,
        floor: cfg.floor_ns.max((dur as f64 * cfg.floor_fraction) as u64),
        hang_start: spin.start_ns,
        path: Vec::new(),
        root_causes: Vec::new(),
        questions: Vec::new(),
        candidates: Vec::new(),
        advice: Vec::new(),
        visited: HashSet::new(),
        window: (spin.start_ns, end),
        baseline_info: None,
        baseline_next: None,
        further: Vec::new(),
        silent: false,
    };
    w.visited.insert(first.id);
    match spin.class {
        SpinClass::LongWait => w.long_wait_hang(spin, first),
        SpinClass::LongRunning => w.long_running_hang(spin, first, end),
        SpinClass::RepeatedYield => w.repeated_yield_hang(spin, first, end),
    }
    let hang = HangInfo {
        pid: spin.pid,
        tid: spin.tid,
        comm: g.comm(spin.tid),
        process: g.process_name(spin.tid),
        start_ns: spin.start_ns,
        end_ns: end,
        duration_ns: dur,
        class: spin.class,
        segment: spin.segment,
        segment_label: spin.segment.to_string(),
        last_segment: spin.last,
        open: spin.open,
        wait_syscall: sc(spin.wait_syscall),
        on_cpu_ns: spin.on_cpu_ns,
        evidence: found.evidence.clone(),
        source: found.source.name().to_string(),
        loop_wait: found.loop_wait.map(|l| sc(l.syscall)),
        lost_ns: g.lost_within(spin.start_ns, end),
    };
    let blame = w.blame(spin, end);
    if hang.lost_ns > 0 {
        let advice = w.words().advice_events_lost(hang.lost_ns, dur);
        w.advice.push(advice);
    }
    let summary = w
        .words()
        .summary(&hang, &w.path, &w.root_causes, &w.further, &w.questions);
    let ranked_paths = w.ranked(spin, first);
    Ok(Report {
        hang,
        path: w.path,
        root_causes: w.root_causes,
        questions: w.questions,
        candidates: w.candidates,
        advice: w.advice,
        summary,
        ranked_paths,
        baseline: w.baseline_info,
        further_culprits: w.further,
        blame: Some(blame),
    })
}

impl<'g> Walk<'g, '_> {
    /// The stack shown for a step: the syscall `s` acted through at the edge's time (a graph
    /// edge it caused), else the one it blocked in.
    pub(super) fn step_stack(
        &self,
        s: &Segment,
        edge: Option<PathEdge>,
    ) -> Vec<crate::stacks::Frame> {
        let sent = edge
            .filter(|e| e.kind.edge().is_some_and(|k| k.info().sending_stack))
            .map(|e| self.g.sending_stack(s, e.ts))
            .unwrap_or_default();
        if sent.is_empty() {
            self.g.blocking_stack(s)
        } else {
            sent
        }
    }

    /// The phrases of this walk: names from its graph, times relative to its hang.
    pub(super) fn words(&self) -> Phrases<'g> {
        Phrases::new(self.g, self.hang_start)
    }

    pub(super) fn item(
        &self,
        s: &Segment,
        edge: Option<PathEdge>,
        role: Role,
        step: Step,
    ) -> PathItem {
        PathItem {
            stack: self.step_stack(s, edge),
            segment: s.id,
            segment_label: s.id.to_string(),
            pid: s.pid,
            tid: s.tid,
            comm: self.g.comm(s.tid),
            process: self.g.process_name(s.tid),
            kind: s.kind.name().to_string(),
            start_ns: s.start_ns,
            end_ns: self.g.end_of(s),
            edge,
            role,
            description: self.words().step(s, &step),
            step,
        }
    }

    pub(super) fn push(
        &mut self,
        s: &Segment,
        edge: Option<PathEdge>,
        role: Role,
        step: Step,
    ) -> usize {
        let it = self.item(s, edge, role, step);
        self.path.push(it);
        self.path.len() - 1
    }

    /// Records what the walk found about path item `idx` (pushed before it knew).
    pub(super) fn describe_item(&mut self, idx: usize, step: Step) {
        let words = self.words();
        if let Some(it) = self.path.get_mut(idx) {
            if let Some(s) = self.g.segment(it.segment) {
                it.description = words.step(s, &step);
            }
            it.step = step;
        }
    }

    /// Records a culprit, once per segment.
    pub(super) fn root(&mut self, s: &Segment, class: CauseClass, finding: Finding) {
        if self.root_causes.iter().any(|r| r.segment == s.id) {
            return;
        }
        let reason = self.words().reason(s, &finding);
        self.root_causes.push(RootCause {
            segment: s.id,
            segment_label: s.id.to_string(),
            pid: s.pid,
            tid: s.tid,
            comm: self.g.comm(s.tid),
            process: self.g.process_name(s.tid),
            class,
            reason,
            finding,
        });
    }

    pub(super) fn classify(&self, s: &Segment) -> CauseClass {
        if s.tid.irq_cpu().is_some() {
            return CauseClass::Interrupt;
        }
        let run_end = s.wait_start_ns.unwrap_or_else(|| self.g.end_of(s));
        let run = s.start_ns.until(run_end);
        let wait = run_end.until(self.g.end_of(s));
        if s.wait_start_ns.is_some() && wait > run {
            if syscalls::is_sleep(s.wait_syscall) || s.wait_timed_out() {
                CauseClass::Sleep
            } else {
                CauseClass::LongWait
            }
        } else {
            CauseClass::LongRunning
        }
    }
}
