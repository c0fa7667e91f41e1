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

use crate::beam::{self, BeamConfig};
use crate::graph::Graph;
use crate::hangs::{self, Hang, HangConfig};
use crate::logical;
use crate::oracle::{Oracle, Reply};
use crate::report::{
    secs, Answer, BaselineInfo, Candidate, CauseClass, Choice, FurtherCulprit, HangInfo, PathEdge,
    PathEdgeKind, PathItem, Question, RankedPath, RankedStep, Report, Role, RootCause,
    ThreadComparison,
};
use crate::Error;
use argus_schema::syscalls;
use argus_schema::{
    CausalEdge, EdgeKind, EndCause, Nanos, Segment, SegmentId, SegmentKind, Spin, SpinClass,
    StartCause, Strength, Tid,
};
use std::collections::HashSet;

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
        }
    }
}

enum Chosen<'g> {
    Edge(&'g CausalEdge),
    Stop,
    Nothing,
}

/// What a thread did during a window.
struct Activity<'g> {
    on_cpu_ns: u64,
    segments: u32,
    /// The segment with the most on-CPU time in the window.
    busiest: Option<&'g Segment>,
    /// The segment whose wait covers most of the window, and how much of it.
    longest_block: Option<(&'g Segment, u64)>,
    /// When the thread exited, if at or before the window's end.
    exited_at: Option<(&'g Segment, Nanos)>,
    /// Whether it stopped running (blocked or exited) shortly before the window's end.
    ended_near: bool,
    /// The segment active at the window's start (or the first after it).
    at_start: Option<&'g Segment>,
}

/// The wait of a thread that covers most of a window.
struct WindowWait<'g> {
    /// The segment that ended in it (the last of a logical wait).
    last: &'g Segment,
    /// The segment that started when it ended.
    next: &'g Segment,
    /// How much of the window it covers (ns).
    covered: u64,
    /// How many waits of the thread came after it in the window.
    passed: u32,
}

fn overlap(a0: Nanos, a1: Nanos, b0: Nanos, b1: Nanos) -> u64 {
    a0.max(b0).until(a1.min(b1))
}

fn plus(t: Nanos, ns: u64) -> Nanos {
    Nanos(t.0.saturating_add(ns))
}

/// Whether `part` is at least the fraction `f` of a non-empty `whole`.
fn at_least(part: u64, whole: u64, f: f64) -> bool {
    whole > 0 && part as f64 >= whole as f64 * f
}

fn pct(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        0
    } else {
        ((part as u128 * 100) / whole as u128) as u64
    }
}

fn sc(nr: i32) -> String {
    syscalls::name(nr)
}

fn softirq_name(vec: u32) -> &'static str {
    match vec {
        0 => "HI",
        1 => "TIMER",
        2 => "NET_TX",
        3 => "NET_RX",
        4 => "BLOCK",
        5 => "IRQ_POLL",
        6 => "TASKLET",
        7 => "SCHED",
        8 => "HRTIMER",
        9 => "RCU",
        _ => "unknown",
    }
}

fn via(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Wakeup => "woken by",
        EdgeKind::Fork => "created by",
        EdgeKind::Timer => "timer armed by",
        EdgeKind::ThreadOrder => "after",
        EdgeKind::Message => "sent data by",
        EdgeKind::Queue => "work queued by",
        EdgeKind::Signal => "signalled by",
        EdgeKind::Exit => "released by the exit of",
        EdgeKind::Flag => "flag set by",
        EdgeKind::Rule => "linked by a rule to",
        EdgeKind::WaitWake => "possibly working for",
        EdgeKind::LockFile => "lock released by",
    }
}

/// Kinds of edge that end a wait: everything but creation, timer arming and thread order.
fn wakes(k: EdgeKind) -> bool {
    !matches!(
        k,
        EdgeKind::ThreadOrder | EdgeKind::Fork | EdgeKind::Timer | EdgeKind::WaitWake
    )
}

/// How much an edge kind says beyond "a wake-up happened".
fn specific(k: EdgeKind) -> u8 {
    match k {
        EdgeKind::ThreadOrder => 0,
        EdgeKind::Wakeup => 1,
        EdgeKind::Rule => 2,
        _ => 3,
    }
}

fn path_edge(e: &CausalEdge) -> PathEdge {
    PathEdge {
        kind: e.kind.into(),
        strength: e.strength,
        ts: e.ts,
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The end of a spin: its `end_ns`, or the trace end when it is still going.
pub(crate) fn spin_end(g: &Graph, spin: &Spin) -> Nanos {
    if spin.open {
        spin.end_ns.max(g.trace_end_ns())
    } else {
        spin.end_ns
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

/// The walk's state that a dry run (see [`Walk::dry_run`]) restores.
struct Saved {
    path: usize,
    root_causes: usize,
    questions: usize,
    candidates: Vec<Candidate>,
    advice: usize,
    visited: HashSet<SegmentId>,
    baseline_info: Option<BaselineInfo>,
    baseline_next: Option<SegmentId>,
    further: usize,
    silent: bool,
}

/// An abnormal thread of a baseline's wake-up path, ranked.
struct Culprit<'g> {
    /// Position on the baseline path (0 = nearest the hung thread).
    pos: usize,
    /// The thread on the baseline path and the one examined during the hang.
    bt: Tid,
    t: Tid,
    /// The baseline edge that thread acted through, and its baseline segment.
    e: &'g CausalEdge,
    x: &'g Segment,
    whole: bool,
    score: f64,
    /// The segment that shows what it did during the hang.
    seg: Option<&'g Segment>,
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
    };
    let summary = w.summary(&hang);
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
    })
}

impl<'g> Walk<'g, '_> {
    // ---- bookkeeping -------------------------------------------------------------------

    fn who(&self, tid: Tid) -> String {
        self.g.describe(tid)
    }

    fn hang_who(&self, tid: Tid) -> String {
        match self.g.thread(tid) {
            Some(t) if t.pid.0 == t.tid.0 => {
                format!("main thread of {} (pid {})", t.comm, t.pid.0)
            }
            _ => self.who(tid),
        }
    }

    /// A time relative to the start of the hang: `+1.234 s` / `-0.500 s`.
    fn rel(&self, t: Nanos) -> String {
        if t >= self.hang_start {
            format!("+{}", secs(self.hang_start.until(t)))
        } else {
            format!("-{}", secs(t.until(self.hang_start)))
        }
    }

    /// The stack shown for a step: the syscall `s` acted through at the edge's time (a graph
    /// edge it caused), else the one it blocked in.
    fn step_stack(&self, s: &Segment, edge: Option<PathEdge>) -> Vec<crate::stacks::Frame> {
        let sent = edge
            .filter(|e| {
                !matches!(
                    e.kind,
                    PathEdgeKind::Baseline | PathEdgeKind::ThreadOrder | PathEdgeKind::Flag
                )
            })
            .map(|e| self.g.sending_stack(s, e.ts))
            .unwrap_or_default();
        if sent.is_empty() {
            self.g.blocking_stack(s)
        } else {
            sent
        }
    }

    fn item(&self, s: &Segment, edge: Option<PathEdge>, role: Role, desc: String) -> PathItem {
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
            description: desc,
        }
    }

    fn push(&mut self, s: &Segment, edge: Option<PathEdge>, role: Role, desc: String) -> usize {
        let it = self.item(s, edge, role, desc);
        self.path.push(it);
        self.path.len() - 1
    }

    fn describe_item(&mut self, idx: usize, desc: String) {
        if let Some(it) = self.path.get_mut(idx) {
            it.description = desc;
        }
    }

    fn root(&mut self, s: &Segment, class: CauseClass, reason: String) {
        if self.root_causes.iter().any(|r| r.segment == s.id) {
            return;
        }
        self.root_causes.push(RootCause {
            segment: s.id,
            segment_label: s.id.to_string(),
            pid: s.pid,
            tid: s.tid,
            comm: self.g.comm(s.tid),
            process: self.g.process_name(s.tid),
            class,
            reason,
        });
    }

    fn classify(&self, s: &Segment) -> CauseClass {
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

    /// How a segment acted through an edge: `thread x (tid 3) of p in write`, `a timer expiry
    /// on cpu1`, `device interrupt irq 24 on cpu0`.
    fn source_phrase(&self, s: &Segment, e: &CausalEdge) -> String {
        match s.tid.irq_cpu() {
            Some(cpu) => self.irq_phrase(s, cpu.0),
            None => {
                let mut d = self.who(s.tid);
                if e.src_syscall >= 0 {
                    d.push_str(" in ");
                    d.push_str(&sc(e.src_syscall));
                }
                d
            }
        }
    }

    fn irq_phrase(&self, s: &Segment, cpu: u32) -> String {
        match s.kind {
            SegmentKind::Timer { .. } => format!("a timer expiry on cpu{cpu}"),
            SegmentKind::HardIrq { irq } => format!("device interrupt irq {irq} on cpu{cpu}"),
            SegmentKind::SoftIrq { vec } => {
                format!("softirq {} on cpu{cpu}", softirq_name(vec))
            }
            SegmentKind::Interrupt | SegmentKind::Task => {
                format!("interrupt work on cpu{cpu}")
            }
            SegmentKind::WorkItem { .. } => format!("a kernel work item on cpu{cpu}"),
        }
    }

    // ---- questions ---------------------------------------------------------------------

    /// Picks one of `edges` (the causes of `about`): follows a single strong edge, asks
    /// otherwise.
    fn choose(
        &mut self,
        tag: &str,
        about: &Segment,
        prompt: String,
        mut edges: Vec<&'g CausalEdge>,
    ) -> Chosen<'g> {
        if edges.is_empty() {
            return Chosen::Nothing;
        }
        // One choice per source: the strongest, most specific edge (a message or exit edge
        // says more than the bare wake-up that comes with it).
        edges.sort_by_key(|e| (e.src, std::cmp::Reverse((e.strength, specific(e.kind)))));
        edges.dedup_by_key(|e| e.src);
        edges.sort_by_key(|e| (e.ts, e.src, e.kind));
        if edges.len() == 1 && edges[0].strength == Strength::Strong {
            return Chosen::Edge(edges[0]);
        }
        if edges.len() > self.cfg.max_choices.max(1) {
            let cut = edges.len() - self.cfg.max_choices.max(1);
            edges.drain(..cut);
        }
        let default = self.beam_default(&edges);
        let g = self.g;
        let choices = edges
            .iter()
            .filter_map(|e| {
                let s = g.segment(e.src)?;
                Some(Choice {
                    segment: s.id,
                    segment_label: s.id.to_string(),
                    pid: s.pid,
                    tid: s.tid,
                    comm: g.comm(s.tid),
                    kind: e.kind.name().to_string(),
                    strength: e.strength,
                    ts: e.ts,
                    description: format!(
                        "{} {} at {}",
                        via(e.kind),
                        self.source_phrase(s, e),
                        self.rel(e.ts)
                    ),
                    stack: {
                        let st = g.sending_stack(s, e.ts);
                        if st.is_empty() {
                            g.blocking_stack(s)
                        } else {
                            st
                        }
                    },
                })
            })
            .collect::<Vec<_>>();
        if choices.len() != edges.len() {
            // Edges are validated when the graph is built; this cannot happen.
            return Chosen::Nothing;
        }
        match self.ask(tag, about, prompt, choices, default) {
            Some(i) => Chosen::Edge(edges[i]),
            None => Chosen::Stop,
        }
    }

    /// The default answer among `edges` (oldest first): the edge starting the best path of a
    /// shallow beam search (edge penalty, relevance to the hang, best continuation); ties go
    /// to the most recent strong edge.
    fn beam_default(&self, edges: &[&'g CausalEdge]) -> usize {
        let g = self.g;
        let cfg = &self.cfg.beam;
        let mut best: Option<(f64, bool, usize)> = None;
        for (i, e) in edges.iter().enumerate() {
            let Some(src) = g.segment(e.src) else {
                continue;
            };
            let score = beam::step_cost(g, cfg, e, src, self.window)
                + beam::best_from(g, src, self.window, cfg);
            let strong = e.strength == Strength::Strong;
            let better = match best {
                None => true,
                Some((b, bs, _)) => {
                    score < b - 1e-9 || ((score - b).abs() <= 1e-9 && (strong || !bs))
                }
            };
            if better {
                best = Some((score, strong, i));
            }
        }
        best.map_or(edges.len().saturating_sub(1), |(_, _, i)| i)
    }

    /// Asks the oracle; records the question. `None` means stop.
    fn ask(
        &mut self,
        tag: &str,
        about: &Segment,
        prompt: String,
        choices: Vec<Choice>,
        default: usize,
    ) -> Option<usize> {
        let n = choices.len();
        if self.silent {
            return (default < n).then_some(default);
        }
        let mut kinds: Vec<String> = choices
            .iter()
            .map(|c| format!("{}/{}", c.kind, c.strength.name()))
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        let pattern = format!(
            "{tag}|{}|{}|{}",
            self.g.comm(about.tid),
            sc(about.wait_syscall),
            kinds.join(",")
        );
        let mut q = Question {
            stack: self.g.blocking_stack(about),
            about: about.id,
            about_label: about.id.to_string(),
            prompt,
            choices,
            default,
            answer: Answer::Choice(default),
            defaulted: true,
            pattern,
            by_rule: false,
        };
        let (answer, defaulted, by_rule) = match self.oracle.ask(&q) {
            Reply::Choice(i) if i < n => (Answer::Choice(i), false, false),
            Reply::Rule(i) if i < n => (Answer::Choice(i), false, true),
            Reply::Stop => (Answer::Stop, false, false),
            Reply::RuleStop => (Answer::Stop, false, true),
            Reply::Choice(_) | Reply::Rule(_) | Reply::Default => {
                (Answer::Choice(default), true, false)
            }
        };
        q.answer = answer;
        q.defaulted = defaulted;
        q.by_rule = by_rule;
        tracing::debug!(prompt = %q.prompt, ?answer, defaulted, "question answered");
        self.questions.push(q);
        match answer {
            Answer::Choice(i) => Some(i),
            Answer::Stop => None,
        }
    }

    fn wake_prompt(&self, subject: String, edges: &[&CausalEdge]) -> String {
        let strong = edges
            .iter()
            .filter(|e| e.strength == Strength::Strong)
            .count();
        if edges.len() == 1 {
            format!(
                "{subject}: the only wake-up is weak (it may be mere mutual exclusion). \
                 Follow it, or stop here?"
            )
        } else {
            format!(
                "{subject}: {} candidate causes ({strong} strong). Which one caused it?",
                edges.len()
            )
        }
    }

    // ---- the hang classes --------------------------------------------------------------

    fn long_wait_hang(&mut self, spin: &Spin, first: &'g Segment) {
        // A logical wait ends with its last segment's wait: that is the one to explain.
        let s = self.g.segment(spin.last).unwrap_or(first);
        let w0 = first.wait_start_ns.unwrap_or(spin.start_ns);
        let w1 = self.g.end_of(s);
        let open = if s.end == EndCause::Open {
            " (still blocked when the trace ended)"
        } else {
            ""
        };
        let timeouts = if s.id == first.id {
            String::new()
        } else {
            format!(
                ", one logical wait of {} waits on the same object, {} of them timed out",
                spin.segments.max(2),
                logical::backward(self.g, s).timeouts
            )
        };
        let desc = format!(
            "{} blocked {} in {}{open}{timeouts}",
            self.hang_who(s.tid),
            secs(w0.until(w1)),
            sc(s.wait_syscall)
        );
        self.push(first, None, Role::Hang, desc);
        self.visited.insert(s.id);
        self.explain_wait(s, 0);
    }

    fn long_running_hang(&mut self, spin: &Spin, s: &'g Segment, end: Nanos) {
        let dur = spin.start_ns.until(end);
        let on = if spin.on_cpu_ns > 0 {
            spin.on_cpu_ns
        } else {
            s.on_cpu_ns
        };
        let who = self.hang_who(s.tid);
        self.push(
            s,
            None,
            Role::Hang,
            format!("{who} ran {} on CPU over {}", secs(on), secs(dur)),
        );
        let still = if spin.open {
            " and was still running when the trace ended"
        } else {
            ""
        };
        let reason = if at_least(on, dur, self.cfg.busy_fraction) {
            format!(
                "{who} was busy on CPU for {} ({}% of the {} hang){still}",
                secs(on),
                pct(on, dur),
                secs(dur)
            )
        } else {
            format!(
                "{who} was runnable but not running: only {} on CPU in {} \
                 (CPU starved, {} preemptions){still}",
                secs(on),
                secs(dur),
                s.preemptions
            )
        };
        self.root(s, CauseClass::LongRunning, reason);
        self.slice_to_input(s);
    }

    fn repeated_yield_hang(&mut self, spin: &Spin, first: &'g Segment, h1: Nanos) {
        let g = self.g;
        let h0 = spin.start_ns;
        let window = h0.until(h1);
        let who = self.hang_who(first.tid);
        let sys = sc(spin.wait_syscall);
        self.push(
            first,
            None,
            Role::Hang,
            format!(
                "{who} polled for {}: {} short waits in {sys}, {} on CPU",
                secs(window),
                spin.segments,
                secs(spin.on_cpu_ns)
            ),
        );
        if let Some(e) = self.lock_holder(spin, first) {
            self.explain_holder(first, e, h1);
            return;
        }
        if let Some((ws, at, how)) = self.flag_setter(spin, first, h1) {
            self.explain_setter(first, ws, at, how);
            return;
        }
        self.advice.push(format!(
            "{who} is polling a data flag and the trace has no record of it (no flag edge, \
             watchpoint hit or argus:flag-set marker), so the setter below is a guess. To trace \
             the flag: find its address (gdb: `info address NAME` or `p &NAME`), record again \
             with a hardware watchpoint on it (perf_event_open PERF_TYPE_BREAKPOINT, e.g. \
             `perf record -e mem:ADDR:rw -p PID`), or have the setter write \
             `argus:flag-set NAME` to the trace_marker printed by `argus record`, and reproduce \
             the hang"
        ));

        // Candidate setters: the other threads of the process, and whoever woke the thread
        // right after the loop ended.
        let mut woke_after: Vec<Tid> = Vec::new();
        let last = g.segment(spin.last).unwrap_or(first);
        if let Some(next) = g.next_in_thread(last.id) {
            for e in g.incoming(next.id).filter(|e| wakes(e.kind)) {
                let t = e.src.tid();
                if t.is_task() && t != first.tid {
                    woke_after.push(t);
                }
            }
        }
        let mut tids: Vec<Tid> = g
            .threads_of(first.pid)
            .into_iter()
            .filter(|t| *t != first.tid && t.is_task())
            .collect();
        tids.extend(woke_after.iter().copied());
        tids.sort_unstable();
        tids.dedup();

        let mut cands: Vec<(Tid, Activity<'g>)> = Vec::new();
        for tid in tids {
            let act = self.activity(tid, h0, h1);
            let near = act.ended_near || woke_after.contains(&tid);
            self.add_candidate(tid, &act, h0, h1, false);
            if act.on_cpu_ns > 0 || near {
                cands.push((tid, act));
            }
        }
        cands.sort_by_key(|(tid, a)| {
            (
                std::cmp::Reverse(a.on_cpu_ns),
                std::cmp::Reverse(a.ended_near || woke_after.contains(tid)),
                *tid,
            )
        });
        cands.truncate(self.cfg.max_choices.max(1));
        let process = g.process_name(first.tid);
        if cands.is_empty() {
            self.root(
                first,
                CauseClass::RepeatedYield,
                format!(
                    "{who} polls a data flag ({} short waits in {sys} over {}); no other thread \
                     of {process} ran during the loop, so the flag's setter is not in the trace",
                    spin.segments,
                    secs(window)
                ),
            );
            return;
        }
        let mut choices = Vec::new();
        let mut segs = Vec::new();
        for (tid, act) in &cands {
            let Some(seg) = act.busiest.or(act.at_start) else {
                continue;
            };
            segs.push(seg);
            choices.push(Choice {
                segment: seg.id,
                segment_label: seg.id.to_string(),
                pid: seg.pid,
                tid: *tid,
                comm: g.comm(*tid),
                kind: PathEdgeKind::Flag.name().to_string(),
                strength: Strength::Weak,
                ts: seg.start_ns,
                description: format!("{}: {}", self.who(*tid), self.during(act, h0, h1)),
                stack: g.blocking_stack(seg),
            });
        }
        if segs.is_empty() {
            return;
        }
        let prompt = format!(
            "{who} polls a data flag ({} in {sys}, {}). Which thread sets the flag?",
            spin.class.name(),
            secs(window)
        );
        let Some(i) = self.ask("flag", first, prompt, choices, 0) else {
            self.root(
                first,
                CauseClass::RepeatedYield,
                format!(
                    "{who} polls a data flag ({} short waits in {sys} over {}); the walk was \
                     stopped before naming the setter",
                    spin.segments,
                    secs(window)
                ),
            );
            return;
        };
        let Some((tid, act)) = cands
            .iter()
            .find(|(_, a)| a.busiest.or(a.at_start).map(|s| s.id) == Some(segs[i].id))
        else {
            return;
        };
        let seg = segs[i];
        let setter = self.who(*tid);
        let during = self.during(act, h0, h1);
        self.visited.insert(seg.id);
        self.push(
            seg,
            Some(PathEdge {
                kind: PathEdgeKind::Flag,
                strength: Strength::Weak,
                ts: seg.start_ns,
            }),
            Role::Setter,
            format!("likely sets the flag: {setter}, which during the loop was {during}"),
        );
        if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
            self.root(
                seg,
                CauseClass::LongRunning,
                format!(
                    "{setter} ran {} on CPU during the {} poll loop of {who}: it is the likely \
                     setter of the flag, and the loop lasts as long as its work",
                    secs(act.on_cpu_ns),
                    secs(window)
                ),
            );
            self.context(seg);
        } else if let Some((b, ns)) = act
            .longest_block
            .filter(|(_, ns)| at_least(*ns, window, self.cfg.busy_fraction))
        {
            if b.id != seg.id {
                self.visited.insert(b.id);
                self.push(
                    b,
                    Some(PathEdge {
                        kind: PathEdgeKind::ThreadOrder,
                        strength: Strength::Weak,
                        ts: b.start_ns,
                    }),
                    Role::Cause,
                    format!("{setter} blocked {} in {}", secs(ns), sc(b.wait_syscall)),
                );
            }
            self.root(
                b,
                self.classify(b),
                format!(
                    "{setter}, the likely setter of the flag {who} polls, was blocked {} in {} \
                     during the loop",
                    secs(ns),
                    sc(b.wait_syscall)
                ),
            );
            self.explain_wait(b, 1);
        } else {
            self.root(
                seg,
                self.classify(seg),
                format!("{setter} is the likely setter of the flag {who} polls: {during}"),
            );
        }
    }

    /// Algorithm 1's LongRunning case: slice back from the busy segment to the input that
    /// started its work — a message or data written to it (a send syscall), the creation of
    /// its thread, or an application marker — asking where the slice is ambiguous.
    fn slice_to_input(&mut self, start: &'g Segment) {
        let g = self.g;
        let mut cur = start;
        for _ in 0..self.cfg.input_depth {
            if let Some(m) = g.app_events().markers.iter().rev().find(|m| {
                m.text.starts_with("argus:input")
                    && m.ts <= cur.start_ns
                    && m.ts
                        >= cur
                            .start_ns
                            .0
                            .checked_sub(self.cfg.near_ns)
                            .map_or(Nanos(0), Nanos)
            }) {
                self.advice.push(format!(
                    "the work started with the application's input marker {:?} of {} at {}",
                    m.text,
                    self.who(m.tid),
                    self.rel(m.ts)
                ));
                return;
            }
            let edges: Vec<&CausalEdge> = g
                .incoming(cur.id)
                .filter(|e| e.kind != EdgeKind::ThreadOrder)
                .collect();
            if edges.is_empty() {
                let why = match cur.start {
                    StartCause::FirstSeen => "it was already running when the trace began",
                    _ => "no traced edge leads into it",
                };
                self.advice.push(format!(
                    "the input that started the work of {} was not found: {why}",
                    self.who(cur.tid)
                ));
                return;
            }
            let prompt = self.wake_prompt(
                format!(
                    "Input: what started the run of {} at {}",
                    self.who(cur.tid),
                    self.rel(cur.start_ns)
                ),
                &edges,
            );
            let Chosen::Edge(e) = self.choose("input", cur, prompt, edges) else {
                return;
            };
            let Some(s) = g.segment(e.src) else { return };
            if !self.visited.insert(s.id) {
                return;
            }
            let input = matches!(
                e.kind,
                EdgeKind::Message | EdgeKind::Fork | EdgeKind::Queue | EdgeKind::Signal
            ) || (e.src_syscall >= 0 && syscalls::is_send(e.src_syscall));
            let what = match e.kind {
                EdgeKind::Fork => "it was created by".to_string(),
                EdgeKind::Message => "it received data from".to_string(),
                EdgeKind::Timer => "a timer fired, armed by".to_string(),
                _ if input => "it was sent input by".to_string(),
                _ => "it was woken by".to_string(),
            };
            let role = if input { Role::Input } else { Role::Context };
            let ts = self.rel(e.ts);
            let src_phrase = self.source_phrase(s, e);
            self.push(
                s,
                Some(path_edge(e)),
                role,
                format!("its run began when {what} {src_phrase} at {ts}"),
            );
            if input {
                self.advice.push(format!(
                    "the work of {} started with the input {what} {src_phrase} at {ts}",
                    self.who(start.tid)
                ));
                return;
            }
            cur = s;
        }
    }

    /// Data-flag evidence for a polling loop `[h0, h1]` of `tid`: a flag edge into the loop,
    /// a watchpoint write read by the loop, or an `argus:flag-set` marker of another thread.
    /// Returns the setter's segment, the time it set the flag and how it is known.
    fn flag_setter(
        &self,
        spin: &Spin,
        first: &'g Segment,
        h1: Nanos,
    ) -> Option<(&'g Segment, Nanos, String)> {
        let g = self.g;
        let tid = first.tid;
        let h0 = spin.start_ns;
        let late = plus(h1, self.cfg.near_ns);
        // 1. Flag edges of the graph into the loop's segments or the one after it.
        let mut segs: Vec<&'g Segment> = g
            .thread_segments(tid)
            .filter(|s| s.id >= spin.segment && s.id <= spin.last)
            .collect();
        if let Some(n) = g.segment(spin.last).and_then(|l| g.next_in_thread(l.id)) {
            segs.push(n);
        }
        let edge = segs
            .iter()
            .flat_map(|s| g.incoming(s.id))
            .filter(|e| e.kind == EdgeKind::Flag && e.src.tid() != tid)
            .max_by_key(|e| (e.ts, e.src));
        let app = g.app_events();
        if let Some(e) = edge {
            if let Some(src) = g.segment(e.src) {
                // The rules make flag edges from watchpoint hits: say so when a write of the
                // source thread matches the edge.
                let near = self.cfg.near_ns;
                let hit = app
                    .flags
                    .iter()
                    .filter(|f| f.write && f.tid == e.src.tid() && f.ts.0.abs_diff(e.ts.0) <= near)
                    .min_by_key(|f| f.ts.0.abs_diff(e.ts.0));
                let how = match hit {
                    Some(f) => format!(
                        "a watchpoint write to {:#x} the loop reads (a {} flag edge of the graph)",
                        f.addr,
                        e.strength.name()
                    ),
                    None => format!("a flag edge of the graph ({})", e.strength.name()),
                };
                return Some((src, e.ts, how));
            }
        }
        // 2. Watchpoint hits: addresses the loop read, written by another thread.
        let mut addrs: Vec<u64> = app
            .flags
            .iter()
            .filter(|f| f.tid == tid && !f.write && f.ts >= h0 && f.ts <= late)
            .map(|f| f.addr)
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        if let Some(w) = app
            .flags
            .iter()
            .filter(|f| f.write && f.tid != tid && addrs.contains(&f.addr) && f.ts <= late)
            .max_by_key(|f| f.ts)
        {
            if let Some(seg) = g.segment_at(w.tid, w.ts) {
                return Some((
                    seg,
                    w.ts,
                    format!("a watchpoint write to {:#x} the loop reads", w.addr),
                ));
            }
        }
        // 3. An application marker saying the flag was set.
        if let Some(m) = app
            .markers
            .iter()
            .filter(|m| {
                m.text.starts_with("argus:flag-set") && m.tid != tid && m.ts >= h0 && m.ts <= late
            })
            .max_by_key(|m| m.ts)
        {
            if let Some(seg) = g.segment_at(m.tid, m.ts) {
                return Some((seg, m.ts, format!("the application marker {:?}", m.text)));
            }
        }
        None
    }

    /// The lock a polling loop retries (lock-file edges of the graph into the loop's
    /// segments or the one after it): the edge from its release (into the segment after the
    /// loop, which got the lock), else from the latest lock of its holder that an attempt ran
    /// into.
    fn lock_holder(&self, spin: &Spin, first: &'g Segment) -> Option<&'g CausalEdge> {
        let g = self.g;
        let tid = first.tid;
        let into = |s: &'g Segment| {
            g.incoming(s.id)
                .filter(move |e| e.kind == EdgeKind::LockFile && e.src.tid() != tid)
                .max_by_key(|e| (e.ts, e.src))
        };
        let after = g
            .segment(spin.last)
            .and_then(|l| g.next_in_thread(l.id))
            .and_then(into);
        after.or_else(|| {
            g.thread_segments(tid)
                .filter(|s| s.id >= spin.segment && s.id <= spin.last)
                .filter_map(into)
                .max_by_key(|e| (e.ts, e.src))
        })
    }

    /// The loop retries a file lock `e` says who held: why did the holder hold it through
    /// the loop `[h0, h1)`? Its thread's window: busy on CPU, or blocked in a wait (followed
    /// recursively), or neither.
    fn explain_holder(&mut self, first: &'g Segment, e: &'g CausalEdge, h1: Nanos) {
        let g = self.g;
        let Some(ws) = g.segment(e.src) else {
            return;
        };
        let h0 = self.hang_start;
        let window = h0.until(h1);
        let who = self.hang_who(first.tid);
        let holder = self.who(ws.tid);
        self.visited.insert(ws.id);
        self.push(
            ws,
            Some(path_edge(e)),
            Role::Setter,
            format!(
                "holds the file lock {who} retries: {holder} (its lock operation at {}, a {} \
                 lock-file edge)",
                self.rel(e.ts),
                e.strength.name()
            ),
        );
        let act = self.activity(ws.tid, h0, h1);
        if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
            let busy = act.busiest.unwrap_or(ws);
            self.root(
                busy,
                CauseClass::LongRunning,
                format!(
                    "{holder} held the file lock {who} retries and ran {} on CPU during its {} \
                     loop",
                    secs(act.on_cpu_ns),
                    secs(window)
                ),
            );
            self.context(busy);
            return;
        }
        // The wait that covers most of the window: one segment's, or a logical wait (a run
        // of timed-out waits) ending before the loop did.
        let mut blocked = act.longest_block;
        if let Some(d) = g
            .segment_at(ws.tid, h1)
            .and_then(|s| g.next_in_thread(s.id))
            .and_then(|n| self.dominant_wait(n, h0, h1))
        {
            if blocked.is_none_or(|(_, ns)| d.covered > ns) {
                blocked = Some((d.last, d.covered));
            }
        }
        match blocked.filter(|(_, ns)| at_least(*ns, window, self.cfg.busy_fraction)) {
            Some((b, ns)) => {
                if b.id != ws.id && self.visited.insert(b.id) {
                    self.push(
                        b,
                        Some(PathEdge {
                            kind: PathEdgeKind::ThreadOrder,
                            strength: Strength::Weak,
                            ts: b.start_ns,
                        }),
                        Role::Cause,
                        format!("{holder} blocked {} in {}", secs(ns), sc(b.wait_syscall)),
                    );
                }
                self.root(
                    b,
                    self.classify(b),
                    format!(
                        "{holder} held the file lock {who} retries while it was blocked {} in {} \
                         during the loop",
                        secs(ns),
                        sc(b.wait_syscall)
                    ),
                );
                self.explain_wait(b, 1);
            }
            None => self.root(
                ws,
                self.classify(ws),
                format!(
                    "{holder} held the file lock {who} retries: {}",
                    self.during(&act, h0, h1)
                ),
            ),
        }
    }

    /// The loop's flag setter is known: explain why it set the flag so late.
    fn explain_setter(&mut self, first: &'g Segment, ws: &'g Segment, at: Nanos, how: String) {
        let g = self.g;
        let h0 = self.hang_start;
        let who = self.hang_who(first.tid);
        let setter = self.who(ws.tid);
        self.visited.insert(ws.id);
        self.push(
            ws,
            Some(PathEdge {
                kind: PathEdgeKind::Flag,
                strength: Strength::Strong,
                ts: at,
            }),
            Role::Setter,
            format!(
                "flag set by {setter} at {} (known from {how})",
                self.rel(at)
            ),
        );
        let window = h0.until(at);
        let slack = ((window as f64 * self.cfg.running_slack) as u64).max(self.floor);
        if ws.start_ns <= plus(h0, slack) {
            // The setter ran through the loop: its work is what the loop waited for.
            let act = self.activity(ws.tid, h0, at);
            let class = if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
                CauseClass::LongRunning
            } else {
                self.classify(ws)
            };
            self.root(
                ws,
                class,
                format!(
                    "{setter} sets the flag {who} polls, {} after the loop began; it ran {} on \
                     CPU meanwhile",
                    secs(window),
                    secs(act.on_cpu_ns)
                ),
            );
            self.context(ws);
            return;
        }
        // What kept the setter from setting the flag earlier: its longest wait during the
        // loop (a short wait just before the write explains little of it).
        let act = self.activity(ws.tid, h0, at);
        let longest = act
            .longest_block
            .filter(|(b, ns)| b.id != ws.id && at_least(*ns, window, self.cfg.busy_fraction))
            .map(|(b, _)| b);
        match longest.or_else(|| {
            g.prev_in_thread(ws.id)
                .filter(|p| p.wait_start_ns.is_some())
        }) {
            Some(p) => {
                let psys = sc(p.wait_syscall);
                self.root(
                    p,
                    self.classify(p),
                    format!(
                        "{setter}, which sets the flag {who} polls, was itself blocked {} in \
                         {psys} before setting it",
                        secs(p.wait_ns())
                    ),
                );
                self.visited.insert(p.id);
                self.push(
                    p,
                    Some(PathEdge {
                        kind: PathEdgeKind::ThreadOrder,
                        strength: Strength::Weak,
                        ts: p.start_ns,
                    }),
                    Role::Cause,
                    format!("{setter} blocked {} in {psys}", secs(p.wait_ns())),
                );
                if self.confirm(
                    p,
                    format!(
                        "{setter} was blocked {} in {psys} before it set the flag: diagnose why \
                         (the culprit of the culprit)?",
                        secs(p.wait_ns())
                    ),
                ) {
                    self.explain_wait(p, 1);
                }
            }
            None => self.root(
                ws,
                self.classify(ws),
                format!(
                    "{setter} sets the flag {who} polls; it started only at {}",
                    self.rel(ws.start_ns)
                ),
            ),
        }
    }

    // ---- explaining waits and wakers ---------------------------------------------------

    /// Why the wait at the end of `s` (already on the path) lasted: follow its wake-up, or
    /// when none came, compare with a baseline.
    fn explain_wait(&mut self, s: &'g Segment, depth: usize) {
        let g = self.g;
        // A logical wait (timed-out waits on the same object before this one) counts whole.
        let first = logical::backward(g, s).first;
        let w0 = first.wait_start_ns.unwrap_or(first.start_ns);
        let w1 = g.end_of(s);
        let wait = w0.until(w1);
        let who = self.who(s.tid);
        let sys = sc(s.wait_syscall);
        if depth > self.cfg.max_depth {
            self.root(
                s,
                self.classify(s),
                format!(
                    "{who} blocked {} in {sys}; the walk stopped after {} steps",
                    secs(wait),
                    self.cfg.max_depth
                ),
            );
            return;
        }
        if syscalls::is_sleep(s.wait_syscall) {
            let still = if s.end == EndCause::Open {
                " and was still sleeping when the trace ended"
            } else {
                ""
            };
            self.root(
                s,
                CauseClass::Sleep,
                format!("{who} slept {} in {sys}{still}", secs(wait)),
            );
            return;
        }
        let next = match s.end {
            EndCause::Woken => g.next_in_thread(s.id),
            _ => None,
        };
        let Some(next) = next else {
            let reason = if s.end == EndCause::Exit {
                format!(
                    "{who} blocked {} in {sys} and exited without being woken",
                    secs(wait)
                )
            } else {
                format!(
                    "{who} blocked {} in {sys} and was never woken: still waiting when the \
                     trace ended",
                    secs(wait)
                )
            };
            self.root(s, CauseClass::LongWait, reason);
            self.baseline(s, depth);
            return;
        };
        if s.wait_timed_out() {
            self.root(
                s,
                CauseClass::Sleep,
                format!(
                    "{who} waited {} in {sys} until its timeout expired: nobody woke it",
                    secs(wait)
                ),
            );
            self.baseline(s, depth);
            return;
        }
        let edges: Vec<&CausalEdge> = g.incoming(next.id).filter(|e| wakes(e.kind)).collect();
        let prompt = self.wake_prompt(
            format!(
                "The {} wait of {who} in {sys} ended at {}",
                secs(wait),
                self.rel(w1)
            ),
            &edges,
        );
        match self.choose("wake", s, prompt, edges) {
            Chosen::Edge(e) => self.follow(e, next, w0, depth + 1),
            Chosen::Stop => self.root(
                s,
                CauseClass::LongWait,
                format!(
                    "{who} blocked {} in {sys}; the walk was stopped here",
                    secs(wait)
                ),
            ),
            Chosen::Nothing => self.root(
                s,
                CauseClass::LongWait,
                format!(
                    "{who} blocked {} in {sys}; the wake-up that ended it at {} was not traced",
                    secs(wait),
                    self.rel(w1)
                ),
            ),
        }
    }

    /// Steps to the source of `e`, which started `woken`; the delay to explain is the window
    /// `[h0, e.ts)`.
    fn follow(&mut self, e: &'g CausalEdge, woken: &'g Segment, h0: Nanos, depth: usize) {
        let g = self.g;
        let Some(w) = g.segment(e.src) else {
            return;
        };
        if !self.visited.insert(w.id) {
            let who = self.who(w.tid);
            self.push(
                w,
                Some(path_edge(e)),
                Role::Cause,
                format!("{} {}, again", via(e.kind), self.source_phrase(w, e)),
            );
            self.root(
                w,
                self.classify(w),
                format!(
                    "circular wait: {who} is already on the path, so these threads wait for \
                     each other"
                ),
            );
            return;
        }
        let idx = self.push(w, Some(path_edge(e)), Role::Cause, String::new());
        if depth > self.cfg.max_depth {
            let desc = format!("{} {}", via(e.kind), self.source_phrase(w, e));
            self.describe_item(idx, desc);
            self.root(
                w,
                self.classify(w),
                format!(
                    "{} is as far as the walk goes ({} steps)",
                    self.who(w.tid),
                    self.cfg.max_depth
                ),
            );
            return;
        }
        match w.tid.irq_cpu() {
            Some(cpu) => self.irq_waker(idx, w, cpu.0, woken, h0, depth),
            None => self.task_waker(idx, w, e, woken, h0, depth),
        }
    }

    fn task_waker(
        &mut self,
        idx: usize,
        w: &'g Segment,
        e: &'g CausalEdge,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        let len = h0.until(e.ts);
        let by = if e.kind == EdgeKind::ThreadOrder {
            format!("continuing the previous segment of {}", self.who(w.tid))
        } else {
            format!("{} {}", via(e.kind), self.source_phrase(w, e))
        };
        let who = self.who(w.tid);
        let woken_who = self.who(woken.tid);
        let slack = ((len as f64 * self.cfg.running_slack) as u64).max(self.floor);
        if len >= self.floor && w.start_ns > plus(h0, slack) {
            if let Some((from, on_cpu)) = self.busy_through_brief_waits(w, e.ts, h0, slack) {
                let run = from.until(e.ts).max(1);
                self.describe_item(
                    idx,
                    format!(
                        "{by}, which was busy on CPU ({} of its {} run, counting from before \
                         the brief waits that split it)",
                        secs(on_cpu),
                        secs(run)
                    ),
                );
                self.root(
                    w,
                    CauseClass::LongRunning,
                    format!(
                        "{who} ran {} on CPU ({}% of its {} run, through brief waits) before it \
                         woke {woken_who}",
                        secs(on_cpu),
                        pct(on_cpu, run),
                        secs(run)
                    ),
                );
                self.context(w);
                return;
            }
        }
        if len < self.floor || w.start_ns <= plus(h0, slack) {
            // The waker was there through the window: it ran, or waited for a CPU.
            let run_end = w.wait_start_ns.unwrap_or_else(|| g.end_of(w)).max(e.ts);
            let run = w.start_ns.until(run_end).max(1);
            if at_least(w.on_cpu_ns, run, self.cfg.busy_fraction) {
                self.describe_item(
                    idx,
                    format!(
                        "{by}, which was busy on CPU ({} of its {} run)",
                        secs(w.on_cpu_ns),
                        secs(run)
                    ),
                );
                self.root(
                    w,
                    CauseClass::LongRunning,
                    format!(
                        "{who} ran {} on CPU ({}% of its {} run) before it woke {woken_who}",
                        secs(w.on_cpu_ns),
                        pct(w.on_cpu_ns, run),
                        secs(run)
                    ),
                );
            } else {
                self.describe_item(
                    idx,
                    format!(
                        "{by}, which was runnable but starved of CPU ({} on CPU in {})",
                        secs(w.on_cpu_ns),
                        secs(run)
                    ),
                );
                self.root(
                    w,
                    CauseClass::LongRunning,
                    format!(
                        "{who} was runnable but not running: only {} on CPU in {} (CPU \
                         starved, {} preemptions) before it woke {woken_who}",
                        secs(w.on_cpu_ns),
                        secs(run),
                        w.preemptions
                    ),
                );
            }
            self.context(w);
            return;
        }

        // Split by a heuristic (a batching server loop cut where its peers change): the thread
        // did not block between its previous segment and this one, so continue there, after
        // asking, since the thread-order edge is weak.
        let split = g.prev_in_thread(w.id).filter(|p| {
            p.wait_start_ns.is_none() && p.end_ns == w.start_ns && p.end != EndCause::Exit
        });
        // A message edge into a segment whose thread did not block before it is a data
        // dependency (the request it read without waiting), not a wake-up that started it.
        let woken_by_edge = g
            .incoming(w.id)
            .any(|e| wakes(e.kind) && e.kind != EdgeKind::Message);
        if let Some(p) = split.filter(|_| !woken_by_edge) {
            if let Some(te) = g
                .incoming(w.id)
                .find(|e| e.kind == EdgeKind::ThreadOrder && e.src == p.id)
            {
                let prompt = format!(
                    "{who} started a new segment at {} without blocking: the segment was split \
                     by a heuristic (a batching loop changing peers). Continue with its previous \
                     segment, or stop here?",
                    self.rel(w.start_ns)
                );
                if let Chosen::Edge(te) = self.choose("split", w, prompt, vec![te]) {
                    self.describe_item(
                        idx,
                        format!("{by}, in a segment split from its previous one (no wait between)"),
                    );
                    self.follow(te, woken, h0, depth + 1);
                    return;
                }
            }
        }

        // The waker itself started late. Where did its thread spend the window? Its latest
        // wait may be a short one (a disk flush, a brief hand-off) after a long one: the wait
        // that covers most of the window is explained, the short ones after it passed over.
        if let Some(d) = self.dominant_wait(w, h0, e.ts) {
            if d.next.id != w.id && !self.visited.contains(&d.next.id) {
                let after = d.next.start_ns.until(e.ts);
                self.describe_item(
                    idx,
                    format!(
                        "{by}; its thread had been blocked {} of the window in {} until {}, \
                         then worked {} (through {} shorter wait{}) before it acted",
                        secs(d.covered),
                        sc(d.last.wait_syscall),
                        self.rel(d.next.start_ns),
                        secs(after),
                        d.passed,
                        if d.passed == 1 { "" } else { "s" }
                    ),
                );
                self.visited.insert(d.next.id);
                let idx2 = self.push(
                    d.next,
                    Some(PathEdge {
                        kind: PathEdgeKind::ThreadOrder,
                        strength: Strength::Weak,
                        ts: d.next.start_ns,
                    }),
                    Role::Cause,
                    String::new(),
                );
                let by2 = format!("earlier, {who}");
                self.late_waker(idx2, d.next, by2, woken, h0, depth + 1);
                return;
            }
        }
        self.late_waker(idx, w, by, woken, h0, depth);
    }

    /// How long the wait that `p` ends lasted, counting the timed-out waits on the same
    /// object right before it (one logical wait).
    fn waited_ns(&self, p: &Segment) -> u64 {
        let first = logical::backward(self.g, p).first;
        first
            .wait_start_ns
            .unwrap_or(first.start_ns)
            .until(p.end_ns)
    }

    /// The wait of `w`'s thread that covers most of the window `[h0, until)`, walking back
    /// from `w` over its thread's segments (logical waits taken whole), if it covers at
    /// least the floor.
    fn dominant_wait(&self, w: &'g Segment, h0: Nanos, until: Nanos) -> Option<WindowWait<'g>> {
        let g = self.g;
        let mut cur = w;
        let mut best: Option<WindowWait<'g>> = None;
        let mut waits = 0u32;
        while cur.start_ns > h0 {
            let Some(p) = g.prev_in_thread(cur.id) else {
                break;
            };
            if p.end_ns != cur.start_ns || p.end == EndCause::Exit {
                break;
            }
            if p.wait_start_ns.is_none() {
                cur = p;
                continue;
            }
            let l = logical::backward(g, p);
            let w0 = l.first.wait_start_ns.unwrap_or(l.first.start_ns);
            let covered = overlap(w0, p.end_ns, h0, until);
            waits += 1;
            if best.as_ref().is_none_or(|b| covered > b.covered) {
                best = Some(WindowWait {
                    last: p,
                    next: cur,
                    covered,
                    passed: waits - 1,
                });
            }
            cur = l.first;
        }
        best.filter(|b| b.covered >= self.floor)
    }

    /// A waker `w` whose thread was blocked (or did not exist) before it acted: what ended
    /// its wait before `w` is followed (`by` says how `w` acted).
    fn late_waker(
        &mut self,
        idx: usize,
        w: &'g Segment,
        by: String,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        let who = self.who(w.tid);
        let woken_who = self.who(woken.tid);
        let prev = g.prev_in_thread(w.id).filter(|p| p.wait_start_ns.is_some());
        let desc = match (prev, w.start) {
            (Some(p), _) => {
                let verb = if syscalls::is_sleep(p.wait_syscall) {
                    "slept"
                } else {
                    "waited"
                };
                format!(
                    "{by}, which had itself {verb} {} in {}",
                    secs(self.waited_ns(p)),
                    sc(p.wait_syscall)
                )
            }
            (None, StartCause::Created) => {
                format!(
                    "{by}, whose thread was only created at {}",
                    self.rel(w.start_ns)
                )
            }
            (None, _) => format!(
                "{by}, whose thread first appears in the trace at {}",
                self.rel(w.start_ns)
            ),
        };
        self.describe_item(idx, desc);
        let edges: Vec<&CausalEdge> = g.incoming(w.id).filter(|e| wakes(e.kind)).collect();
        let waited = prev.map_or_else(String::new, |p| {
            format!(" {} in {}", secs(self.waited_ns(p)), sc(p.wait_syscall))
        });
        if !edges.is_empty() {
            let prompt = self.wake_prompt(
                format!(
                    "{who} started at {} after waiting{waited}",
                    self.rel(w.start_ns)
                ),
                &edges,
            );
            match self.choose("wake", w, prompt, edges) {
                Chosen::Edge(e2) => self.follow(e2, w, h0, depth + 1),
                Chosen::Stop | Chosen::Nothing => self.root(
                    w,
                    CauseClass::LongWait,
                    format!(
                        "{who} waited{waited} before it woke {woken_who}; the walk was stopped \
                         here"
                    ),
                ),
            }
            return;
        }
        match prev {
            Some(p) if syscalls::is_sleep(p.wait_syscall) || p.wait_timed_out() => {
                let psys = sc(p.wait_syscall);
                self.visited.insert(p.id);
                self.push(
                    p,
                    Some(PathEdge {
                        kind: PathEdgeKind::ThreadOrder,
                        strength: Strength::Weak,
                        ts: p.start_ns,
                    }),
                    Role::Cause,
                    format!("{who} slept {} in {psys}", secs(p.wait_ns())),
                );
                self.root(
                    p,
                    CauseClass::Sleep,
                    format!(
                        "{who} slept {} in {psys} before it woke {woken_who}",
                        secs(p.wait_ns())
                    ),
                );
            }
            Some(_) => self.root(
                w,
                CauseClass::LongWait,
                format!(
                    "{who} waited{waited} before it woke {woken_who}; the wake-up that ended \
                     that wait was not traced"
                ),
            ),
            None if w.start == StartCause::Created => self.created_late(w, woken, h0, depth),
            None => self.root(
                w,
                self.classify(w),
                format!(
                    "{who} first appears in the trace at {}, then woke {woken_who}; nothing \
                     earlier is known",
                    self.rel(w.start_ns)
                ),
            ),
        }
    }

    /// A waker `w` that started after the window began, but only because brief waits (below
    /// the floor, not sleeps: a page fault, a lock hand-off, a preemption recorded as a
    /// block) split a run that began before it: when that run (from its start to `until`)
    /// was mostly on CPU, its start and on-CPU time.
    fn busy_through_brief_waits(
        &self,
        w: &'g Segment,
        until: Nanos,
        h0: Nanos,
        slack: u64,
    ) -> Option<(Nanos, u64)> {
        let g = self.g;
        let mut from = w.start_ns;
        let mut on_cpu = w.on_cpu_ns;
        let mut cur = w;
        while from > plus(h0, slack) {
            let p = g.prev_in_thread(cur.id)?;
            // (A run split without any wait is the batching-loop split handled below.)
            let brief = p.wait_start_ns.is_some_and(|_| {
                p.wait_ns() < self.floor
                    && !syscalls::is_sleep(p.wait_syscall)
                    && !p.wait_timed_out()
            });
            if p.end_ns != cur.start_ns || !brief || p.end == EndCause::Exit {
                return None;
            }
            from = p.start_ns;
            on_cpu += p.on_cpu_ns;
            cur = p;
        }
        let run = from.until(until).max(1);
        (cur.id != w.id && at_least(on_cpu, run, self.cfg.busy_fraction)).then_some((from, on_cpu))
    }

    /// The waker's thread was created during the window: follow the fork edge once.
    fn created_late(&mut self, w: &'g Segment, woken: &'g Segment, h0: Nanos, depth: usize) {
        let g = self.g;
        let who = self.who(w.tid);
        let woken_who = self.who(woken.tid);
        let late = h0.until(w.start_ns);
        let fork = g
            .incoming(w.id)
            .filter(|e| e.kind == EdgeKind::Fork)
            .max_by_key(|e| (e.ts, e.src));
        let slack = ((h0.until(w.start_ns) as f64 * self.cfg.running_slack) as u64).max(self.floor);
        match fork.and_then(|e| Some((e, g.segment(e.src)?))) {
            // The creator itself only got going late: what delayed it explains the wait.
            Some((e, parent))
                if parent.tid.is_task()
                    && parent.start_ns > plus(h0, slack)
                    && !self.visited.contains(&parent.id) =>
            {
                self.follow(e, w, h0, depth + 1);
            }
            Some((e, parent)) if self.visited.insert(parent.id) => {
                let pwho = self.who(parent.tid);
                self.push(
                    parent,
                    Some(path_edge(e)),
                    Role::Cause,
                    format!("created by {}", self.source_phrase(parent, e)),
                );
                self.root(
                    parent,
                    self.classify(parent),
                    format!(
                        "{pwho} created {who} only {} after the wait began; {who} then woke \
                         {woken_who}",
                        secs(late)
                    ),
                );
            }
            _ => self.root(
                w,
                self.classify(w),
                format!(
                    "{who} was created only {} after the wait began (its creator was not \
                     traced), then woke {woken_who}",
                    secs(late)
                ),
            ),
        }
    }

    fn irq_waker(
        &mut self,
        idx: usize,
        w: &'g Segment,
        cpu: u32,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        let what = self.irq_phrase(w, cpu);
        let woken_who = self.who(woken.tid);
        self.describe_item(idx, format!("woken by {what}"));
        if let SegmentKind::Timer { .. } = w.kind {
            let edges: Vec<&CausalEdge> = g
                .incoming(w.id)
                .filter(|e| e.kind == EdgeKind::Timer)
                .collect();
            let prompt = self.wake_prompt(format!("Who armed {what}"), &edges);
            match self.choose("timer", w, prompt, edges) {
                Chosen::Edge(te) => self.timer_armer(te, w, woken, h0, depth),
                Chosen::Stop => self.root(
                    w,
                    CauseClass::Interrupt,
                    format!("{what} woke {woken_who}; the walk was stopped here"),
                ),
                Chosen::Nothing => {
                    // The arming was not traced (lost events), but the timer ended the
                    // woken thread's own sleep: it slept.
                    if let Some(p) = self.slept_before(woken) {
                        self.own_sleep(p, woken, h0, depth);
                        return;
                    }
                    self.root(
                        w,
                        CauseClass::Interrupt,
                        format!("{what} woke {woken_who}; who armed the timer was not traced"),
                    );
                }
            }
            return;
        }
        let edges: Vec<&CausalEdge> = g
            .incoming(w.id)
            .filter(|e| e.kind != EdgeKind::ThreadOrder)
            .collect();
        let prompt = self.wake_prompt(format!("What raised {what}"), &edges);
        match self.choose("irq", w, prompt, edges) {
            Chosen::Edge(e2) => self.follow(e2, w, h0, depth + 1),
            Chosen::Stop => self.root(
                w,
                CauseClass::Interrupt,
                format!("{what} woke {woken_who}; the walk was stopped here"),
            ),
            Chosen::Nothing => {
                // An untraced timer interrupt ending the thread's own sleep: it slept.
                let slept = self.slept_before(woken);
                if let Some(p) = slept.filter(|_| !matches!(w.kind, SegmentKind::HardIrq { .. })) {
                    self.own_sleep(p, woken, h0, depth);
                    return;
                }
                let len = h0.until(woken.start_ns);
                let reason = match w.kind {
                    SegmentKind::HardIrq { .. } => format!(
                        "{what} woke {woken_who} after {}: it was waiting for the device",
                        secs(len)
                    ),
                    _ => format!("{what} woke {woken_who} after {}", secs(len)),
                };
                self.root(w, CauseClass::Interrupt, reason);
            }
        }
    }

    /// The segment before `woken` in its thread when it ended in a sleep or a timed-out wait
    /// right where `woken` starts: the wait a timer ended.
    fn slept_before(&self, woken: &'g Segment) -> Option<&'g Segment> {
        self.g.prev_in_thread(woken.id).filter(|p| {
            p.end_ns == woken.start_ns
                && p.wait_start_ns.is_some()
                && (syscalls::is_sleep(p.wait_syscall) || p.wait_timed_out())
        })
    }

    /// `p` slept (its timer fired in an interrupt the trace does not explain) and then
    /// woke `woken`'s thread: it slept, unless the sleep began long after the window did, in
    /// which case what started it so late is followed.
    fn own_sleep(&mut self, p: &'g Segment, woken: &'g Segment, h0: Nanos, depth: usize) {
        let g = self.g;
        let who = self.who(p.tid);
        let psys = sc(p.wait_syscall);
        if !self.visited.insert(p.id) {
            return;
        }
        self.push(
            p,
            Some(PathEdge {
                kind: PathEdgeKind::ThreadOrder,
                strength: Strength::Weak,
                ts: p.wait_start_ns.unwrap_or(p.start_ns),
            }),
            Role::Cause,
            format!(
                "{who} slept {} in {psys} (its timer fired in an untraced interrupt)",
                secs(p.wait_ns())
            ),
        );
        let slack =
            ((h0.until(woken.start_ns) as f64 * self.cfg.running_slack) as u64).max(self.floor);
        if p.start_ns > plus(h0, slack) && depth <= self.cfg.max_depth {
            let edges: Vec<&CausalEdge> = g
                .incoming(p.id)
                .filter(|e| wakes(e.kind) || e.kind == EdgeKind::Fork)
                .collect();
            if !edges.is_empty() {
                let prompt = self.wake_prompt(
                    format!(
                        "{who} only started the {} sleep at {}; what started it",
                        secs(p.wait_ns()),
                        self.rel(p.start_ns)
                    ),
                    &edges,
                );
                if let Chosen::Edge(e2) = self.choose("late-sleep", p, prompt, edges) {
                    self.follow(e2, p, h0, depth + 1);
                    return;
                }
            }
        }
        self.root(
            p,
            CauseClass::Sleep,
            format!(
                "{who} slept {} in {psys} (its own timer)",
                secs(p.wait_ns())
            ),
        );
    }

    /// The armer of a timer that woke `woken`. Armed by the woken thread itself: it slept.
    fn timer_armer(
        &mut self,
        te: &'g CausalEdge,
        expiry: &'g Segment,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        let Some(a) = g.segment(te.src) else {
            return;
        };
        let who = self.who(a.tid);
        let woken_who = self.who(woken.tid);
        let fired_after = te.ts.until(expiry.start_ns);
        if a.tid == woken.tid {
            let slept = if a.wait_start_ns.is_some() {
                a.wait_ns()
            } else {
                fired_after
            };
            let asys = sc(a.wait_syscall);
            let sleep = syscalls::is_sleep(a.wait_syscall) || a.wait_syscall < 0;
            let verb = if sleep { "slept" } else { "waited" };
            if self.visited.insert(a.id) {
                self.push(
                    a,
                    Some(path_edge(te)),
                    Role::Cause,
                    format!(
                        "timer armed by {who} itself, which then {verb} {} in {asys}",
                        secs(slept)
                    ),
                );
            }
            // A short sleep that began long after the window: what made the thread start it
            // so late is the real delay (a relay: lock hand-offs, a shell running `sleep`).
            let slack = ((h0.until(te.ts) as f64 * self.cfg.running_slack) as u64).max(self.floor);
            if a.start_ns > plus(h0, slack) && depth <= self.cfg.max_depth {
                let edges: Vec<&CausalEdge> = g
                    .incoming(a.id)
                    .filter(|e| wakes(e.kind) || e.kind == EdgeKind::Fork)
                    .collect();
                if !edges.is_empty() {
                    let prompt = self.wake_prompt(
                        format!(
                            "{who} only started the {} sleep at {}, {} after the wait began; \
                             what started it",
                            secs(slept),
                            self.rel(te.ts),
                            secs(h0.until(te.ts))
                        ),
                        &edges,
                    );
                    if let Chosen::Edge(e2) = self.choose("late-sleep", a, prompt, edges) {
                        self.follow(e2, a, h0, depth + 1);
                        return;
                    }
                }
            }
            let reason = if sleep {
                format!("{who} slept {} in {asys} (its own timer)", secs(slept))
            } else {
                format!(
                    "{who} waited {} in {asys} until its own timeout fired: nobody else woke it",
                    secs(slept)
                )
            };
            self.root(a, CauseClass::Sleep, reason);
            return;
        }
        if !self.visited.insert(a.id) {
            self.root(
                a,
                self.classify(a),
                format!(
                    "circular wait: {who} armed the timer that woke {woken_who} and is already \
                     on the path"
                ),
            );
            return;
        }
        self.push(
            a,
            Some(path_edge(te)),
            Role::Cause,
            format!(
                "timer armed by {}, {} before it fired",
                self.source_phrase(a, te),
                secs(fired_after)
            ),
        );
        let class = if a.tid.irq_cpu().is_some() {
            CauseClass::Interrupt
        } else {
            CauseClass::Timer
        };
        self.root(
            a,
            class,
            format!(
                "{who} armed a timer that fired {} later and woke {woken_who}",
                secs(fired_after)
            ),
        );
    }

    /// Context for a LongRunning culprit: what started its run, one or two steps back.
    fn context(&mut self, start: &'g Segment) {
        let g = self.g;
        let mut cur = start;
        for _ in 0..self.cfg.context_steps {
            let edges: Vec<&CausalEdge> = g
                .incoming(cur.id)
                .filter(|e| wakes(e.kind) || matches!(e.kind, EdgeKind::Fork | EdgeKind::Timer))
                .collect();
            let prompt = self.wake_prompt(
                format!(
                    "Context: what started the run of {} at {}",
                    self.who(cur.tid),
                    self.rel(cur.start_ns)
                ),
                &edges,
            );
            let Chosen::Edge(e) = self.choose("context", cur, prompt, edges) else {
                break;
            };
            let Some(s) = g.segment(e.src) else {
                break;
            };
            self.push(
                s,
                Some(path_edge(e)),
                Role::Context,
                format!(
                    "its run began when {} {} at {}",
                    match e.kind {
                        EdgeKind::Fork => "it was created by",
                        EdgeKind::Timer => "a timer fired, armed by",
                        _ => "it was woken by",
                    },
                    self.source_phrase(s, e),
                    self.rel(e.ts)
                ),
            );
            if !self.visited.insert(s.id) {
                break;
            }
            cur = s;
        }
    }

    // ---- baselines and candidates ------------------------------------------------------

    /// A wait that no wake-up ended (or that timed out): Algorithm 1's LongWait case. Find
    /// similar vertices that did not hang (same wait syscall, similar syscall sequence and
    /// connection kinds, a short wait ended by a wake-up), let the user pick one (default: the
    /// most recent), slice its wake-up path back, and for each thread on that path look at
    /// what it did during the hang; the first abnormal one (blocked, busy, gone) is a culprit,
    /// diagnosed recursively after a confirmation.
    fn baseline(&mut self, s: &'g Segment, depth: usize) {
        let g = self.g;
        let w0 = s.wait_start_ns.unwrap_or(s.start_ns);
        let w1 = g.end_of(s);
        let hang_wait = w0.until(w1);
        let who = self.who(s.tid);
        let sys = sc(s.wait_syscall);
        let sims = self.similar(s, hang_wait);
        if sims.is_empty() {
            self.advice.push(format!(
                "no baseline: no similar wait of {who} in {sys} (or of a thread with the same \
                 name) was ended quickly by a wake-up; the candidates are the other threads of \
                 its process"
            ));
            self.add_process_candidates(s, w0, w1, None);
            return;
        }
        let pick = if sims.len() == 1 || self.equivalent_baselines(&sims) {
            Some(0)
        } else {
            let choices = sims
                .iter()
                .map(|(b, _, score)| Choice {
                    segment: b.id,
                    segment_label: b.id.to_string(),
                    pid: b.pid,
                    tid: b.tid,
                    comm: g.comm(b.tid),
                    kind: PathEdgeKind::Baseline.name().to_string(),
                    strength: Strength::Weak,
                    ts: b.wait_start_ns.unwrap_or(b.start_ns),
                    description: format!(
                        "the same wait of {} in {sys} at {} ended after {} (similarity {:.2})",
                        self.who(b.tid),
                        self.rel(b.wait_start_ns.unwrap_or(b.start_ns)),
                        secs(b.wait_ns()),
                        score
                    ),
                    stack: g.blocking_stack(b),
                })
                .collect();
            let prompt = format!(
                "The {} wait of {who} in {sys} never ended normally: {} similar waits that did \
                 end quickly. Which one is the baseline to compare with?",
                secs(hang_wait),
                sims.len()
            );
            self.ask("baseline", s, prompt, choices, 0)
        };
        let Some(i) = pick else {
            self.advice
                .push("the baseline comparison was stopped before a baseline was picked".into());
            self.add_process_candidates(s, w0, w1, None);
            return;
        };
        let (b, nb, similarity) = sims[i];
        let similar_found = sims.len();
        self.baseline_next.get_or_insert(nb.id);
        let bw0 = b.wait_start_ns.unwrap_or(b.start_ns);
        let steps = self.baseline_slice(b, nb);
        let mut info = BaselineInfo {
            hang_segment: s.id,
            segment: b.id,
            segment_label: b.id.to_string(),
            tid: b.tid,
            comm: g.comm(b.tid),
            wait_ns: b.wait_ns(),
            similarity,
            similar_found,
            wake_path: Vec::new(),
            threads: Vec::new(),
        };
        info.wake_path.push(self.ranked_step(b, None, 0.0));
        for (e, x) in &steps {
            info.wake_path
                .push(self.ranked_step(x, Some(path_edge(e)), 0.0));
        }
        // The threads on the baseline path, nearest first, once each.
        let mut tids: Vec<(Tid, &'g Segment, &'g CausalEdge)> = Vec::new();
        for (e, x) in &steps {
            if x.tid.is_task() && x.tid != s.tid && !tids.iter().any(|(t, _, _)| *t == x.tid) {
                tids.push((x.tid, x, e));
            }
        }
        if tids.is_empty() {
            self.advice.push(format!(
                "{who} is normally woken {} (the same wait at {} ended after {}); during the \
                 hang that did not happen",
                match steps.first() {
                    Some((e, x)) => format!("by {}", self.source_phrase(x, e)),
                    None => "by an untraced cause".to_string(),
                },
                self.rel(bw0),
                secs(b.wait_ns())
            ));
            self.add_process_candidates(s, w0, w1, None);
            self.baseline_info = self.baseline_info.take().or(Some(info));
            return;
        }
        self.add_process_candidates(s, w0, w1, Some(tids[0].0));
        let pen = &self.cfg.beam.penalties;
        let mut cum = 0.0;
        let mut culprits: Vec<Culprit<'g>> = Vec::new();
        for (pos, (bt, x, e)) in tids.iter().enumerate() {
            let (t, role_note) = self.same_role(*bt, w0, w1);
            let act = self.activity(t, w0, w1);
            let abnormal = self.abnormal(&act, w0, w1, hang_wait);
            let (cov, whole, idle) = self.stuck(t, &act, hang_wait);
            cum += pen.edge(e) - pen.relevance * cov;
            let score = (cum * 1000.0).round() / 1000.0;
            let idle_note = match idle {
                Some(nr) => format!(" (its event-loop wait {}: idle)", sc(nr)),
                None => String::new(),
            };
            info.threads.push(ThreadComparison {
                baseline_tid: *bt,
                tid: t,
                comm: g.comm(t),
                during_hang: format!("{}{idle_note}{role_note}", self.during(&act, w0, w1)),
                abnormal,
                whole_hang: abnormal && whole,
                score,
                rank: None,
                followed: false,
                explained_by: None,
            });
            if abnormal {
                let seg = act
                    .exited_at
                    .map(|(x, _)| x)
                    .or(act.longest_block.map(|(b, _)| b))
                    .filter(|_| whole || act.exited_at.is_some())
                    .or(act.busiest)
                    .or(act.at_start);
                culprits.push(Culprit {
                    pos,
                    bt: *bt,
                    t,
                    e,
                    x,
                    whole,
                    score,
                    seg,
                });
            }
        }
        // Threads stuck through the whole hang first, the nearest to the hung thread first;
        // then the others by their beam score.
        culprits.sort_by(|a, b| {
            (!a.whole)
                .cmp(&!b.whole)
                .then_with(|| {
                    if a.whole && b.whole {
                        a.pos.cmp(&b.pos)
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .then_with(|| a.score.total_cmp(&b.score))
                .then_with(|| a.pos.cmp(&b.pos))
        });
        for (r, c) in culprits.iter().enumerate() {
            if let Some(tc) = info.threads.get_mut(c.pos) {
                tc.rank = Some(r + 1);
            }
        }
        if culprits.is_empty() {
            self.baseline_info = self.baseline_info.take().or(Some(info));
            let names: Vec<String> = tids.iter().map(|(t, _, _)| self.g.comm(*t)).collect();
            self.advice.push(format!(
                "every thread on the baseline's wake-up path ({}) ran normally during the hang; \
                 the missing wake-up is not explained by them",
                names.join(", ")
            ));
            return;
        }
        let note = |w: &Self, c: &Culprit<'g>| {
            let how = if c.pos == 0 {
                "normally woken by"
            } else {
                "normally on the wake-up path:"
            };
            format!(
                "{how} {} (the same wait at {} ended after {})",
                w.source_phrase(c.x, c.e),
                w.rel(bw0),
                secs(b.wait_ns())
            )
        };
        if culprits.len() == 1 || self.silent {
            // One culprit (or a chain explored with the default answers): follow the best.
            let c = &culprits[0];
            if let Some(tc) = info.threads.get_mut(c.pos) {
                tc.followed = true;
            }
            self.baseline_info = self.baseline_info.take().or(Some(info));
            let n = note(self, c);
            self.compare_culprit(s, c.t, c.bt, c.pos, n, w0, w1, depth);
            return;
        }
        // Several: explore each chain with the default answers, keep the independent ones
        // (a culprit on a better-ranked culprit's chain, or whose chain meets it, is explained
        // by it), and ask which to follow when more than one is left.
        let chains: Vec<(Vec<PathItem>, Vec<RootCause>)> = culprits
            .iter()
            .map(|c| {
                let n = note(self, c);
                self.dry_run(|w| w.compare_culprit(s, c.t, c.bt, c.pos, n, w0, w1, depth))
            })
            .collect();
        let tids_of = |(path, roots): &(Vec<PathItem>, Vec<RootCause>)| -> HashSet<Tid> {
            path.iter()
                .map(|p| p.tid)
                .chain(roots.iter().map(|r| r.tid))
                .collect()
        };
        let mut independent: Vec<usize> = Vec::new();
        for (j, c) in culprits.iter().enumerate() {
            let mine = tids_of(&chains[j]);
            let deepest = chains[j].1.last().map(|r| r.segment);
            let by = independent.iter().copied().find(|&i| {
                let theirs = tids_of(&chains[i]);
                theirs.contains(&c.t)
                    || mine.contains(&culprits[i].t)
                    || (deepest.is_some() && chains[i].1.last().map(|r| r.segment) == deepest)
            });
            match by {
                Some(i) => {
                    if let Some(tc) = info.threads.get_mut(c.pos) {
                        tc.explained_by = Some(culprits[i].t);
                    }
                }
                None => independent.push(j),
            }
        }
        let pick = if independent.len() == 1 {
            Some(0)
        } else {
            let choices: Vec<Choice> = independent
                .iter()
                .map(|&j| {
                    let c = &culprits[j];
                    let seg = c.seg.unwrap_or(c.x);
                    let during = info
                        .threads
                        .get(c.pos)
                        .map_or_else(String::new, |t| t.during_hang.clone());
                    let ends = chains[j].1.last().map_or_else(String::new, |r| {
                        format!("; its chain ends at: {}", r.reason)
                    });
                    Choice {
                        segment: seg.id,
                        segment_label: seg.id.to_string(),
                        pid: seg.pid,
                        tid: c.t,
                        comm: g.comm(c.t),
                        kind: PathEdgeKind::Baseline.name().to_string(),
                        strength: Strength::Weak,
                        ts: seg.start_ns,
                        description: format!(
                            "{}: during the hang {during} (score {:.2}){ends}",
                            self.who(c.t),
                            c.score
                        ),
                        stack: g.blocking_stack(seg),
                    }
                })
                .collect();
            let prompt = format!(
                "{} threads on the baseline's wake-up path behaved abnormally during the {} \
                 wait of {who} in {sys}, with separate causes. Which one to follow?",
                independent.len(),
                secs(hang_wait)
            );
            self.ask("culprit", s, prompt, choices, 0)
        };
        let durings: Vec<String> = culprits
            .iter()
            .map(|c| {
                info.threads
                    .get(c.pos)
                    .map_or_else(String::new, |t| t.during_hang.clone())
            })
            .collect();
        let followed = pick.and_then(|i| independent.get(i).copied());
        if let Some(j) = followed {
            if let Some(tc) = info.threads.get_mut(culprits[j].pos) {
                tc.followed = true;
            }
        } else {
            self.advice.push(
                "the baseline comparison was stopped before a culprit was followed; the \
                 abnormal threads of the baseline path are listed as further culprits"
                    .to_string(),
            );
        }
        self.baseline_info = self.baseline_info.take().or(Some(info));
        if let Some(j) = followed {
            let c = &culprits[j];
            let n = note(self, c);
            self.compare_culprit(s, c.t, c.bt, c.pos, n, w0, w1, depth);
        }
        let mut chains: Vec<Option<(Vec<PathItem>, Vec<RootCause>)>> =
            chains.into_iter().map(Some).collect();
        for &j in independent.iter().filter(|&&j| Some(j) != followed) {
            let c = &culprits[j];
            let Some((path, root_causes)) = chains.get_mut(j).and_then(Option::take) else {
                continue;
            };
            let during = durings.get(j).cloned().unwrap_or_default();
            self.further.push(FurtherCulprit {
                rank: j + 1,
                tid: c.t,
                comm: g.comm(c.t),
                during_hang: during,
                score: c.score,
                path,
                root_causes,
            });
        }
    }

    /// Runs `f` (a step of the walk) with the default answers and no questions, then puts
    /// the walk back as it was; returns the path items and root causes `f` found.
    fn dry_run(&mut self, f: impl FnOnce(&mut Self)) -> (Vec<PathItem>, Vec<RootCause>) {
        let saved = Saved {
            path: self.path.len(),
            root_causes: self.root_causes.len(),
            questions: self.questions.len(),
            candidates: self.candidates.clone(),
            advice: self.advice.len(),
            visited: self.visited.clone(),
            baseline_info: self.baseline_info.clone(),
            baseline_next: self.baseline_next,
            further: self.further.len(),
            silent: self.silent,
        };
        self.silent = true;
        f(self);
        let path = self.path.split_off(saved.path.min(self.path.len()));
        let roots = self
            .root_causes
            .split_off(saved.root_causes.min(self.root_causes.len()));
        self.questions.truncate(saved.questions);
        self.candidates = saved.candidates;
        self.advice.truncate(saved.advice);
        self.visited = saved.visited;
        self.baseline_info = saved.baseline_info;
        self.baseline_next = saved.baseline_next;
        self.further.truncate(saved.further);
        self.silent = saved.silent;
        (path, roots)
    }

    /// How much of a hang of length `hang_wait` thread `t` was stuck (gone, blocked outside
    /// its event-loop wait, or busy), as a fraction; whether that is (nearly) the whole hang;
    /// and the event-loop wait it idled in, when its longest block was one.
    fn stuck(&self, t: Tid, act: &Activity<'_>, hang_wait: u64) -> (f64, bool, Option<i32>) {
        if hang_wait == 0 {
            return (0.0, false, None);
        }
        let frac = |ns: u64| (ns as f64 / hang_wait as f64).min(1.0);
        if act.exited_at.is_some() || act.segments == 0 {
            return (1.0, true, None);
        }
        let block = act.longest_block.map_or(0, |(_, ns)| ns);
        let idle = act
            .longest_block
            .filter(|(_, ns)| *ns > 0 && *ns >= act.on_cpu_ns)
            .and_then(|(b, _)| {
                hangs::learn_loop_wait(self.g, t, &self.cfg.hang)
                    .filter(|lw| lw.syscall == b.wait_syscall)
                    .map(|lw| lw.syscall)
            });
        let blocked = if idle.is_some() { 0.0 } else { frac(block) };
        let cov = blocked.max(frac(act.on_cpu_ns));
        (cov, cov >= self.cfg.whole_hang_fraction, idle)
    }

    /// The culprit of a baseline comparison: `t` (with the role of `bt` on the baseline path)
    /// was abnormal during `[w0, w1)`.
    #[allow(clippy::too_many_arguments)]
    fn compare_culprit(
        &mut self,
        s: &'g Segment,
        t: Tid,
        bt: Tid,
        pos: usize,
        note: String,
        w0: Nanos,
        w1: Nanos,
        depth: usize,
    ) {
        let hang_wait = w0.until(w1);
        let act = self.activity(t, w0, w1);
        let who = self.who(s.tid);
        let wakes = if pos == 0 {
            format!("which normally wakes {who}")
        } else {
            format!("which is normally on the wake-up path of {who}")
        };
        let xwho = self.who(t);
        let same = if t == bt {
            String::new()
        } else {
            format!(" ({xwho} has the role {} had)", self.who(bt))
        };
        let edge = PathEdge {
            kind: PathEdgeKind::Baseline,
            strength: Strength::Weak,
            ts: w0,
        };
        if let Some((seg, at)) = act.exited_at {
            self.push(
                seg,
                Some(edge),
                Role::Baseline,
                format!("{note}{same}; {xwho} exited at {}", self.rel(at)),
            );
            self.root(
                seg,
                CauseClass::Exited,
                format!(
                    "{xwho}, {wakes}, exited at {} so the wake-up never came",
                    self.rel(at)
                ),
            );
            return;
        }
        let blocked = act
            .longest_block
            .filter(|(_, ns)| at_least(*ns, hang_wait, self.cfg.busy_fraction));
        if let Some((bseg, ns)) = blocked {
            let bsys = sc(bseg.wait_syscall);
            self.push(
                bseg,
                Some(edge),
                Role::Baseline,
                format!(
                    "{note}{same}; during the hang {xwho} was blocked {} in {bsys}",
                    secs(ns)
                ),
            );
            if !self.visited.insert(bseg.id) {
                self.root(
                    bseg,
                    self.classify(bseg),
                    format!(
                        "circular wait: {xwho}, {wakes}, was blocked in \
                         {bsys} and is already on the path"
                    ),
                );
                return;
            }
            self.root(
                bseg,
                self.classify(bseg),
                format!(
                    "{xwho}, {wakes}, was itself blocked {} in {bsys} during \
                     the hang",
                    secs(ns)
                ),
            );
            if self.confirm(
                bseg,
                format!(
                    "{xwho} was blocked {} in {bsys} during the hang: diagnose why (the culprit \
                     of the culprit)?",
                    secs(ns)
                ),
            ) {
                self.explain_wait(bseg, depth + 1);
            }
            return;
        }
        if let Some(busy) = act
            .busiest
            .filter(|_| at_least(act.on_cpu_ns, hang_wait, self.cfg.busy_fraction))
        {
            self.visited.insert(busy.id);
            self.push(
                busy,
                Some(edge),
                Role::Baseline,
                format!(
                    "{note}{same}; during the hang {xwho} was busy on CPU for {}",
                    secs(act.on_cpu_ns)
                ),
            );
            self.root(
                busy,
                CauseClass::LongRunning,
                format!(
                    "{xwho}, {wakes}, was busy on CPU for {} during the hang \
                     instead",
                    secs(act.on_cpu_ns)
                ),
            );
            if self.confirm(
                busy,
                format!(
                    "{xwho} was busy on CPU during the hang: slice back to what started its \
                     work?"
                ),
            ) {
                self.context(busy);
            }
            return;
        }
        let during = self.during(&act, w0, w1);
        if let Some(seg) = act.busiest.or(act.at_start) {
            self.push(
                seg,
                Some(edge),
                Role::Baseline,
                format!("{note}{same}; during the hang {xwho} was {during}"),
            );
            self.root(
                seg,
                self.classify(seg),
                format!("{xwho}, {wakes}, was {during} during the hang"),
            );
        }
    }

    /// Whether a thread's activity during a hang of length `hang_wait` is abnormal: it exited,
    /// was blocked most of the time, or was busy most of the time.
    fn abnormal(&self, act: &Activity<'_>, _w0: Nanos, _w1: Nanos, hang_wait: u64) -> bool {
        act.exited_at.is_some()
            || act.segments == 0
            || act
                .longest_block
                .is_some_and(|(_, ns)| at_least(ns, hang_wait, self.cfg.busy_fraction))
            || at_least(act.on_cpu_ns, hang_wait, self.cfg.busy_fraction)
    }

    /// The thread to examine during `[w0, w1)` for the baseline thread `bt`: `bt` itself when
    /// it existed then, else the thread with the same name in a process of the same name
    /// that was there the longest (short-lived helpers: a new `sleep` each time).
    fn same_role(&self, bt: Tid, w0: Nanos, w1: Nanos) -> (Tid, String) {
        let g = self.g;
        let alive = |t: Tid| -> u64 {
            g.segments_overlapping(t, w0, w1)
                .map(|x| x.start_ns.max(w0).until(g.end_of(x).min(w1)))
                .sum()
        };
        let exited_before = g
            .thread_segments(bt)
            .next_back()
            .is_some_and(|l| l.end == EndCause::Exit && g.end_of(l) <= w0);
        if alive(bt) > 0 || !exited_before {
            return (bt, String::new());
        }
        let comm = g.comm(bt);
        let process = g.process_name(bt);
        let best = g
            .threads()
            .iter()
            .filter(|t| t.tid != bt && t.comm == comm && t.process == process)
            .map(|t| (alive(t.tid), t.tid))
            .filter(|(a, _)| *a > 0)
            .max();
        match best {
            Some((_, t)) => (
                t,
                format!(
                    " (the baseline's {} had exited; this is another {comm})",
                    self.who(bt)
                ),
            ),
            None => (bt, String::new()),
        }
    }

    /// Similar vertices that did not hang: segments of the same thread, or of threads with the
    /// same name in a process of the same name (those of the hung thread's own process when
    /// it has any), ending in the same wait syscall, whose wait was short, not a timeout, and
    /// ended by a wake-up. Ranked by signature similarity; of the best group (within 0.2 of
    /// the best), the most recent first.
    fn similar(&self, s: &'g Segment, hang_wait: u64) -> Vec<(&'g Segment, &'g Segment, f64)> {
        let g = self.g;
        let short = ((hang_wait as f64 * self.cfg.running_slack) as u64).max(1);
        let comm = g.comm(s.tid);
        let process = g.process_name(s.tid);
        let mut tids = vec![s.tid];
        tids.extend(
            g.threads()
                .iter()
                .filter(|t| t.tid != s.tid && t.comm == comm && t.process == process)
                .map(|t| t.tid)
                .take(16),
        );
        let kinds_of = |x: &Segment| -> Vec<EdgeKind> {
            let mut k: Vec<EdgeKind> = g
                .incoming(x.id)
                .map(|e| e.kind)
                .filter(|k| *k != EdgeKind::ThreadOrder)
                .collect();
            k.sort_unstable();
            k.dedup();
            k
        };
        let s_kinds = kinds_of(s);
        let mut out: Vec<(&'g Segment, &'g Segment, f64)> = Vec::new();
        for tid in tids {
            for b in g.thread_segments(tid).rev().take(self.cfg.baseline_scan) {
                if b.id == s.id
                    || b.wait_syscall != s.wait_syscall
                    || b.end != EndCause::Woken
                    || b.wait_start_ns.is_none()
                    || b.wait_ns() > short
                    || b.wait_timed_out()
                {
                    continue;
                }
                let Some(nb) = g.next_in_thread(b.id) else {
                    continue;
                };
                if !g.incoming(nb.id).any(|e| e.kind != EdgeKind::ThreadOrder) {
                    continue;
                }
                let seq = seq_similarity(&s.syscall_seq, &b.syscall_seq);
                let kinds = jaccard(&s_kinds, &kinds_of(b));
                out.push((b, nb, 0.7 * seq + 0.3 * kinds));
            }
        }
        // The hung thread's own process first: a same-named process elsewhere on the machine
        // (a system-wide trace) is only a baseline when the process has none.
        if out.iter().any(|x| x.0.pid == s.pid) {
            out.retain(|x| x.0.pid == s.pid);
        }
        let best = out.iter().map(|x| x.2).fold(f64::MIN, f64::max);
        out.retain(|x| x.2 >= best - 0.2);
        out.sort_by(|a, b| b.0.end_ns.cmp(&a.0.end_ns).then(b.0.id.cmp(&a.0.id)));
        out.truncate(self.cfg.max_choices.max(1));
        out
    }

    /// The baseline's wake-up path: from the segment its wake-up started, back through the
    /// causal edges (asking where ambiguous), through timers to their armers.
    fn baseline_slice(
        &mut self,
        b: &'g Segment,
        nb: &'g Segment,
    ) -> Vec<(&'g CausalEdge, &'g Segment)> {
        let g = self.g;
        let mut out: Vec<(&'g CausalEdge, &'g Segment)> = Vec::new();
        let mut cur = nb;
        let mut about = b;
        let mut seen: HashSet<SegmentId> = HashSet::new();
        seen.insert(nb.id);
        for _ in 0..self.cfg.baseline_depth {
            let timer = matches!(cur.kind, SegmentKind::Timer { .. });
            let edges: Vec<&CausalEdge> = g
                .incoming(cur.id)
                .filter(|e| {
                    if timer {
                        e.kind == EdgeKind::Timer
                    } else {
                        e.kind != EdgeKind::ThreadOrder
                    }
                })
                .collect();
            let prompt = self.wake_prompt(
                format!(
                    "Baseline: what started {} at {}",
                    self.who(cur.tid),
                    self.rel(cur.start_ns)
                ),
                &edges,
            );
            let Chosen::Edge(e) = self.choose("baseline-wake", about, prompt, edges) else {
                break;
            };
            let Some(x) = g.segment(e.src) else { break };
            if !seen.insert(x.id) {
                break;
            }
            out.push((e, x));
            // Keep slicing through a waker that had itself just been woken (a relay), stop at
            // a thread that ran or slept on its own.
            about = x;
            cur = x;
            if x.tid.is_task() && x.start != StartCause::Woken {
                break;
            }
        }
        out
    }

    /// Asks whether to diagnose a culprit recursively; `true` to go on.
    fn confirm(&mut self, culprit: &'g Segment, what: String) -> bool {
        if !self.cfg.confirm_recursion {
            return true;
        }
        let g = self.g;
        let choice = Choice {
            segment: culprit.id,
            segment_label: culprit.id.to_string(),
            pid: culprit.pid,
            tid: culprit.tid,
            comm: g.comm(culprit.tid),
            kind: "continue".to_string(),
            strength: Strength::Strong,
            ts: culprit.start_ns,
            description: format!("continue with {}", self.who(culprit.tid)),
            stack: g.blocking_stack(culprit),
        };
        self.ask("recurse", culprit, what, vec![choice], 0)
            .is_some()
    }

    /// Whether the candidate baselines tell one story, so that choosing among them is no
    /// ambiguity to ask about: equally similar (within 0.05), and at least three quarters of
    /// them, the default (the most recent) among them, normally ended by a wake-up from a
    /// thread of one name (the same writer, or one `sleep` after another).
    fn equivalent_baselines(&self, sims: &[(&'g Segment, &'g Segment, f64)]) -> bool {
        let g = self.g;
        let waker = |nb: &Segment| -> Option<String> {
            let mut comms: Vec<String> = g
                .incoming(nb.id)
                .filter(|e| wakes(e.kind))
                .map(|e| g.comm(e.src.tid()))
                .collect();
            comms.sort_unstable();
            comms.dedup();
            (comms.len() == 1).then(|| comms.remove(0))
        };
        let (lo, hi) = sims
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), (_, _, x)| {
                (lo.min(*x), hi.max(*x))
            });
        let first = sims.first().and_then(|(_, nb, _)| waker(nb));
        let same = sims.iter().filter(|(_, nb, _)| waker(nb) == first).count();
        hi - lo <= 0.05 && first.is_some() && same * 4 >= sims.len() * 3
    }

    /// One step of a ranked or baseline path.
    fn ranked_step(&self, s: &Segment, edge: Option<PathEdge>, cost: f64) -> RankedStep {
        RankedStep {
            stack: self.step_stack(s, edge),
            segment: s.id,
            segment_label: s.id.to_string(),
            pid: s.pid,
            tid: s.tid,
            comm: self.g.comm(s.tid),
            edge,
            cost,
            description: self.seg_summary(s),
        }
    }

    /// What a segment did, in a few words.
    fn seg_summary(&self, s: &Segment) -> String {
        if let Some(cpu) = s.tid.irq_cpu() {
            return format!("{} at {}", self.irq_phrase(s, cpu.0), self.rel(s.start_ns));
        }
        let end = self.g.end_of(s);
        let run_end = s.wait_start_ns.unwrap_or(end);
        let mut d = format!(
            "{} from {}: ran {} ({} on CPU)",
            self.who(s.tid),
            self.rel(s.start_ns),
            secs(s.start_ns.until(run_end)),
            secs(s.on_cpu_ns)
        );
        if s.wait_start_ns.is_some() {
            d.push_str(&format!(
                ", then blocked {} in {}",
                secs(run_end.until(end)),
                sc(s.wait_syscall)
            ));
        } else if s.end == EndCause::Exit {
            d.push_str(", then exited");
        }
        d
    }

    /// The beam search's ranked paths from the hang.
    fn ranked(&self, spin: &Spin, first: &'g Segment) -> Vec<RankedPath> {
        let g = self.g;
        let mut prefix: Vec<RankedStep> = vec![self.ranked_step(first, None, 0.0)];
        let start: &'g Segment = match spin.class {
            SpinClass::LongWait => {
                let next = (first.end == EndCause::Woken && !first.wait_timed_out())
                    .then(|| g.next_in_thread(first.id))
                    .flatten();
                match (next, self.baseline_next.and_then(|id| g.segment(id))) {
                    (Some(n), _) => n,
                    (None, Some(bn)) => {
                        if let Some(b) = g.prev_in_thread(bn.id) {
                            prefix.push(self.ranked_step(
                                b,
                                Some(PathEdge {
                                    kind: PathEdgeKind::Baseline,
                                    strength: Strength::Weak,
                                    ts: b.wait_start_ns.unwrap_or(b.start_ns),
                                }),
                                0.0,
                            ));
                        }
                        bn
                    }
                    (None, None) => first,
                }
            }
            SpinClass::RepeatedYield => g
                .segment(spin.last)
                .and_then(|l| g.next_in_thread(l.id))
                .unwrap_or(first),
            SpinClass::LongRunning => first,
        };
        let paths = beam::search(g, start, self.window, &self.cfg.beam);
        paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut steps = prefix.clone();
                for (j, seg) in p.segments.iter().enumerate().skip(1) {
                    let e = p.edges[j - 1];
                    steps.push(self.ranked_step(seg, Some(path_edge(e)), p.costs[j]));
                }
                let weak = p
                    .edges
                    .iter()
                    .filter(|e| e.strength == Strength::Weak)
                    .count();
                let mut evidence = vec![format!(
                    "{} edge(s): {} strong or boosted, {weak} weak",
                    p.edges.len(),
                    p.edges.len() - weak
                )];
                if let Some(end) = p.end() {
                    evidence.push(format!(
                        "ends at {} ({}), covering {:.0}% of the hang",
                        self.who(end.tid),
                        self.classify(end).name(),
                        100.0 * beam::coverage(g, end, self.window.0, self.window.1)
                    ));
                }
                RankedPath {
                    rank: i + 1,
                    score: (p.score * 1000.0).round() / 1000.0,
                    steps,
                    evidence,
                }
            })
            .collect()
    }

    /// What `tid` did during `[from, to)`.
    fn activity(&self, tid: Tid, from: Nanos, to: Nanos) -> Activity<'g> {
        let g = self.g;
        let mut act = Activity {
            on_cpu_ns: 0,
            segments: 0,
            busiest: None,
            longest_block: None,
            exited_at: None,
            ended_near: false,
            at_start: g.segment_at(tid, from),
        };
        let mut busiest_ns = 0u64;
        let near_from = Nanos(to.0.saturating_sub(self.cfg.near_ns));
        for s in g.segments_overlapping(tid, from, to) {
            act.segments += 1;
            let end = g.end_of(s);
            let run_end = s.wait_start_ns.unwrap_or(end).min(end);
            let run = s.start_ns.until(run_end);
            let run_in = overlap(s.start_ns, run_end, from, to);
            let cpu = if run == 0 {
                0
            } else {
                ((s.on_cpu_ns.min(run) as u128 * run_in as u128) / run as u128) as u64
            };
            act.on_cpu_ns += cpu;
            if cpu >= busiest_ns && (cpu > 0 || act.busiest.is_none()) {
                busiest_ns = cpu;
                act.busiest = Some(s);
            }
            if let Some(ws) = s.wait_start_ns {
                let blocked = overlap(ws, end, from, to);
                if blocked > act.longest_block.map_or(0, |(_, b)| b) {
                    act.longest_block = Some((s, blocked));
                }
            }
            let stopped = if s.wait_start_ns.is_some() || s.end == EndCause::Exit {
                Some(run_end)
            } else {
                None
            };
            if stopped.is_some_and(|t| t >= near_from && t <= to) {
                act.ended_near = true;
            }
            if s.end == EndCause::Exit && end <= to {
                act.exited_at = Some((s, end));
            }
        }
        if act.segments == 0 {
            // Not running during the window: it exited before, or appears after.
            if let Some(last) = g.thread_segments(tid).next_back() {
                if last.end == EndCause::Exit && g.end_of(last) <= from {
                    act.exited_at = Some((last, g.end_of(last)));
                }
            }
        }
        if act.exited_at.is_none() {
            if let (Some(t), Some(last)) = (g.thread(tid), g.thread_segments(tid).next_back()) {
                if let Some(x) = t.exit_ns.filter(|x| *x <= to) {
                    act.exited_at = Some((last, x));
                }
            }
        }
        act
    }

    /// What a thread did during a window, in words.
    fn during(&self, act: &Activity<'_>, from: Nanos, to: Nanos) -> String {
        let window = from.until(to);
        if let Some((_, t)) = act.exited_at {
            return format!("exited at {}", self.rel(t));
        }
        if let Some((b, ns)) = act.longest_block {
            if at_least(ns, window, self.cfg.busy_fraction) {
                let still = if b.end == EndCause::Open {
                    ", still waiting when the trace ended"
                } else {
                    ""
                };
                return format!("blocked {} in {}{still}", secs(ns), sc(b.wait_syscall));
            }
        }
        if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
            return format!("running on CPU for {}", secs(act.on_cpu_ns));
        }
        if act.segments == 0 {
            return "not seen in the trace".to_string();
        }
        let near = if act.ended_near {
            ", stopping shortly before the end"
        } else {
            ""
        };
        format!(
            "active in {} segment(s) with {} on CPU{near}",
            act.segments,
            secs(act.on_cpu_ns)
        )
    }

    fn add_candidate(&mut self, tid: Tid, act: &Activity<'_>, from: Nanos, to: Nanos, base: bool) {
        if let Some(c) = self.candidates.iter_mut().find(|c| c.tid == tid) {
            c.baseline_waker |= base;
            return;
        }
        let g = self.g;
        let during = self.during(act, from, to);
        self.candidates.push(Candidate {
            tid,
            pid: g.pid_of(tid).unwrap_or_default(),
            comm: g.comm(tid),
            process: g.process_name(tid),
            segment: act.busiest.or(act.at_start).map(|s| s.id),
            on_cpu_ns: act.on_cpu_ns,
            during_hang: during,
            baseline_waker: base,
        });
    }

    /// Candidates for a wake-up that never came: the baseline waker first, then the other
    /// threads of the process.
    fn add_process_candidates(&mut self, s: &Segment, from: Nanos, to: Nanos, base: Option<Tid>) {
        let mut tids: Vec<Tid> = base.into_iter().collect();
        tids.extend(
            self.g
                .threads_of(s.pid)
                .into_iter()
                .filter(|t| *t != s.tid && Some(*t) != base && t.is_task()),
        );
        for tid in tids.into_iter().take(self.cfg.max_choices.max(1) + 1) {
            let act = self.activity(tid, from, to);
            self.add_candidate(tid, &act, from, to, Some(tid) == base);
        }
    }

    // ---- summary -----------------------------------------------------------------------

    fn summary(&self, hang: &HangInfo) -> String {
        let mut out = match self.path.first() {
            Some(p) => format!("{} ({}).", capitalize(&p.description), hang.class.name()),
            None => format!("{} hang of tid {}.", hang.class.name(), hang.tid.0),
        };
        let chain: Vec<&str> = self
            .path
            .iter()
            .filter(|p| p.role == Role::Cause)
            .map(|p| p.description.as_str())
            .collect();
        if !chain.is_empty() {
            out.push_str(&format!(" Causal chain: {}.", chain.join("; ")));
        }
        for p in &self.path {
            match p.role {
                Role::Baseline => out.push_str(&format!(" Baseline: {}.", p.description)),
                Role::Setter => out.push_str(&format!(" Flag: {}.", p.description)),
                _ => {}
            }
        }
        if let Some((last, others)) = self.root_causes.split_last() {
            out.push_str(&format!(" Root cause: {}.", last.reason));
            if !others.is_empty() {
                let o: Vec<&str> = others.iter().map(|r| r.reason.as_str()).collect();
                out.push_str(&format!(" Also implicated: {}.", o.join("; ")));
            }
        }
        let further: Vec<&str> = self
            .further
            .iter()
            .filter_map(|f| f.root_causes.last().map(|r| r.reason.as_str()))
            .collect();
        if !further.is_empty() {
            out.push_str(&format!(" Further culprits: {}.", further.join("; ")));
        }
        if !self.questions.is_empty() {
            let d = self.questions.iter().filter(|q| q.defaulted).count();
            out.push_str(&format!(
                " {} question(s) asked, {d} answered by default.",
                self.questions.len()
            ));
        }
        out
    }
}

/// Longest common subsequence length of two syscall sequences over the longer length.
fn seq_similarity(a: &[i32], b: &[i32]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let mut dp = vec![0usize; b.len() + 1];
    for x in a {
        let mut prev = 0;
        for (j, y) in b.iter().enumerate() {
            let cur = dp[j + 1];
            dp[j + 1] = if x == y {
                prev + 1
            } else {
                dp[j + 1].max(dp[j])
            };
            prev = cur;
        }
    }
    dp[b.len()] as f64 / a.len().max(b.len()) as f64
}

/// Jaccard similarity of two sorted, deduplicated sets (1 when both are empty).
fn jaccard(a: &[EdgeKind], b: &[EdgeKind]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.iter().filter(|k| b.contains(k)).count();
    let union = a.len() + b.len() - inter;
    inter as f64 / union.max(1) as f64
}
