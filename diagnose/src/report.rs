//! The diagnosis report: the JSON contract of `argus debug --json` (ARCHITECTURE.md §9; every
//! field is described in `docs/report.md`) and its terminal rendering.
//!
//! Times are nanoseconds on the trace clock; ids are `u64` numbers with a human
//! `segment_label` (`tid#seq`) beside them. Edge kinds and strengths are lowercase names
//! (`wakeup`, `strong`) as in the Parquet tables; classes are the paper's names
//! (`LongWait`).

use crate::blame::{Blame, BlameState};
use crate::findings::{During, Finding, Step};
use crate::path_edge::lower_strength;
pub use crate::path_edge::PathEdgeKind;
use crate::stacks::{stack_line, Frame};
use argus_schema::{Nanos, Pid, SegmentId, SpinClass, Strength, Tid};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Everything a diagnosis found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The spinning vertex diagnosed.
    pub hang: HangInfo,
    /// From the hang back to the root cause (plus baseline, setter and context items).
    pub path: Vec<PathItem>,
    /// The culprits: the last is the root cause, the thread holding the largest share of
    /// the hang's time (`blame`); the others in the order the walk found them, nearest to
    /// the hang first.
    pub root_causes: Vec<RootCause>,
    /// The questions asked during the walk, with their answers.
    pub questions: Vec<Question>,
    /// Threads that could have ended the hang, with what they did during it (LongWait without
    /// a wake-up, RepeatedYield).
    pub candidates: Vec<Candidate>,
    /// What to do next for more certainty.
    pub advice: Vec<String>,
    /// A plain-English paragraph.
    pub summary: String,
    /// The best causal paths from the hang found by beam search with look-back, best first
    /// (lowest score). `path` is the walk's explanation; when every question took its
    /// default, its causal steps follow `ranked_paths[0]`.
    #[serde(default)]
    pub ranked_paths: Vec<RankedPath>,
    /// The baseline (a similar vertex that did not hang) the hang was compared with, if one
    /// was needed and found.
    #[serde(default)]
    pub baseline: Option<BaselineInfo>,
    /// Other culprits of a baseline comparison: abnormal threads on the baseline's wake-up
    /// path whose chains are independent of the one followed (`path` / `root_causes`), each
    /// diagnosed with the default answers. Best-ranked first.
    #[serde(default)]
    pub further_culprits: Vec<FurtherCulprit>,
    /// Where the hang's time went along its chain: each thread's share, per state.
    /// `None` in reports of versions without it.
    #[serde(default)]
    pub blame: Option<Blame>,
}

/// An abnormal thread of a baseline's wake-up path that the walk did not follow, with the
/// chain it leads to (diagnosed recursively with the default answers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FurtherCulprit {
    /// Its rank among the abnormal threads of the baseline path (1 = best).
    pub rank: usize,
    /// The thread examined during the hang.
    pub tid: Tid,
    /// Its name.
    pub comm: String,
    /// What it did during the hang.
    pub during_hang: String,
    /// What it did during the hang, as data (`during_hang` says it in words).
    #[serde(default)]
    pub during: During,
    /// Its beam score on the baseline path (lower is better).
    pub score: f64,
    /// Its chain: the thread as seen during the hang, then the culprits behind it.
    pub path: Vec<PathItem>,
    /// The culprits of its chain, nearest first; the last is the deepest.
    pub root_causes: Vec<RootCause>,
}

/// One path ranked by the beam search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankedPath {
    /// 1 for the best path.
    pub rank: usize,
    /// Sum of the step penalties minus the relevance rewards: lower is better.
    pub score: f64,
    /// From the hang (first, no edge) back to the path's root (last).
    pub steps: Vec<RankedStep>,
    /// Why this path ranks where it does, in plain words.
    pub evidence: Vec<String>,
}

/// One step of a ranked path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankedStep {
    /// Segment.
    pub segment: SegmentId,
    /// `tid#seq`.
    pub segment_label: String,
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub comm: String,
    /// The edge taken to reach this step from the previous one (`null` for the first).
    pub edge: Option<PathEdge>,
    /// Penalty of the edge minus the reward for how much of the hang this segment covers.
    pub cost: f64,
    /// What the segment did, in plain words.
    pub description: String,
    /// The call stack of the syscall it acted through (sent) or blocked in, when the trace
    /// has stacks: user frames innermost first, then the innermost kernel frame.
    #[serde(default)]
    pub stack: Vec<Frame>,
}

/// The baseline comparison of a wait that never ended (or timed out).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineInfo {
    /// The wait that hung (the segment ending in it).
    pub hang_segment: SegmentId,
    /// The similar segment whose same wait ended quickly.
    pub segment: SegmentId,
    /// `tid#seq` of `segment`.
    pub segment_label: String,
    /// Its thread.
    pub tid: Tid,
    /// Its thread name.
    pub comm: String,
    /// How long its wait lasted.
    pub wait_ns: u64,
    /// Signature similarity with the hang's vertex, 0 to 1.
    pub similarity: f64,
    /// How many similar normal vertices were found (the user picks when several).
    pub similar_found: usize,
    /// The baseline's wake-up path, from the baseline back.
    pub wake_path: Vec<RankedStep>,
    /// For each thread on the wake-up path: what it did during the hang.
    pub threads: Vec<ThreadComparison>,
}

/// What a thread of the baseline's wake-up path did during the hang.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadComparison {
    /// The thread on the baseline path.
    pub baseline_tid: Tid,
    /// The thread examined during the hang (the same, or one with the same role when the
    /// baseline's thread no longer existed).
    pub tid: Tid,
    /// Its name.
    pub comm: String,
    /// What it did during the hang.
    pub during_hang: String,
    /// What it did during the hang, as data (`during_hang` says it in words, with notes on
    /// its event-loop wait and on a thread now in an exited thread's role).
    #[serde(default)]
    pub during: During,
    /// Its own event-loop wait (learned from the trace) when its longest block was in it: that
    /// block is idleness, not a reason to rank it as stuck.
    #[serde(default)]
    pub idle_in: Option<String>,
    /// Whether that was abnormal (blocked, busy or gone): a culprit.
    pub abnormal: bool,
    /// Whether it was blocked, busy or gone for (nearly) the whole hang, outside its own
    /// event-loop wait: such threads rank first, the nearest to the hung thread first.
    #[serde(default)]
    pub whole_hang: bool,
    /// Beam score of the baseline path up to this thread: edge penalties minus the reward
    /// for how much of the hang the thread was stuck (lower is better).
    #[serde(default)]
    pub score: f64,
    /// Rank among the abnormal threads (1 = best); `null` for a normal one.
    #[serde(default)]
    pub rank: Option<usize>,
    /// Whether the walk followed this thread (its chain is `path` / `root_causes`).
    #[serde(default)]
    pub followed: bool,
    /// An abnormal thread whose chain meets a better-ranked culprit's chain: that culprit.
    #[serde(default)]
    pub explained_by: Option<Tid>,
}

/// The hang (spinning vertex) the report explains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HangInfo {
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub comm: String,
    /// Process name.
    pub process: String,
    /// Start of the spin.
    pub start_ns: Nanos,
    /// End of the spin (the trace end when still going).
    pub end_ns: Nanos,
    /// Duration in nanoseconds.
    pub duration_ns: u64,
    /// Class of the spin.
    pub class: SpinClass,
    /// The spinning segment (the first of a yield run).
    pub segment: SegmentId,
    /// `tid#seq` of `segment`.
    pub segment_label: String,
    /// The last segment of a yield run (equal to `segment` otherwise).
    pub last_segment: SegmentId,
    /// Whether it was still going when the trace ended.
    pub open: bool,
    /// The syscall of the (last) blocking wait, `-` when none.
    pub wait_syscall: String,
    /// Time on CPU within it.
    pub on_cpu_ns: u64,
    /// Why this is a hang of this class: durations, shares, the thread's event-loop wait.
    #[serde(default)]
    pub evidence: Vec<String>,
    /// Where the spinning vertex came from: `segments` (found by the diagnosis with its
    /// threshold), `spins` (the snapshot's spins table) or `marker` (the application marked
    /// the hang through `trace_marker`).
    #[serde(default)]
    pub source: String,
    /// The thread's own event-loop wait learned from the trace (`poll`, `epoll_wait`…),
    /// whose long waits are idleness, not hangs.
    #[serde(default)]
    pub loop_wait: Option<String>,
    /// How much of the hang falls in time ranges in which some CPU lost events (the
    /// snapshot's `lost_ranges`): its waits, wake-ups and edges there may be missing.
    #[serde(default)]
    pub lost_ns: u64,
}

/// Why a path item is on the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The hang itself (the first item).
    Hang,
    /// A segment on the causal chain that delayed the hang.
    Cause,
    /// A thread that ended the same wait in a baseline (normal) run, as seen during the hang.
    Baseline,
    /// The likely setter of a data flag a RepeatedYield loop polls.
    Setter,
    /// Context of a LongRunning culprit: what started its run.
    Context,
    /// The input that started the work of a LongRunning culprit (a message, a pipe read,
    /// an application marker).
    Input,
}

/// The edge taken to reach a path item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathEdge {
    /// Kind.
    pub kind: PathEdgeKind,
    /// Strength (`strong` / `weak`).
    #[serde(with = "lower_strength")]
    pub strength: Strength,
    /// When the causing action happened.
    pub ts: Nanos,
}

/// One step of the path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathItem {
    /// Segment.
    pub segment: SegmentId,
    /// `tid#seq`.
    pub segment_label: String,
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub comm: String,
    /// Process name.
    pub process: String,
    /// Segment kind (`task`, `timer`, `hardirq`, ...).
    pub kind: String,
    /// Segment start.
    pub start_ns: Nanos,
    /// Segment end (the trace end when open).
    pub end_ns: Nanos,
    /// The edge taken to get here from the previous item; `null` for the hang.
    pub edge: Option<PathEdge>,
    /// Why it is on the path.
    pub role: Role,
    /// What this segment did, in plain words.
    pub description: String,
    /// What this segment did and why the walk went through it, as data (`description` says
    /// it in words).
    #[serde(default)]
    pub step: Step,
    /// The call stack of the syscall this segment acted through (the one that woke, wrote or
    /// signalled the previous item) or, for a wait, blocked in; empty when the trace has no
    /// stacks (`argus record --stacks`). User frames innermost first, then the innermost
    /// kernel frame.
    #[serde(default)]
    pub stack: Vec<Frame>,
}

/// What kind of culprit a root cause is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CauseClass {
    /// Busy on a CPU (or runnable and starved of one).
    LongRunning,
    /// Polling a data flag in a loop of short waits.
    RepeatedYield,
    /// Blocked in a wait that nobody ended in time.
    LongWait,
    /// Slept or timed out by itself (its own timer).
    Sleep,
    /// Armed a timer that delayed another thread.
    Timer,
    /// A device interrupt, softirq or other interrupt-context work.
    Interrupt,
    /// The thread had exited.
    Exited,
}

impl CauseClass {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            CauseClass::LongRunning => "LongRunning",
            CauseClass::RepeatedYield => "RepeatedYield",
            CauseClass::LongWait => "LongWait",
            CauseClass::Sleep => "Sleep",
            CauseClass::Timer => "Timer",
            CauseClass::Interrupt => "Interrupt",
            CauseClass::Exited => "Exited",
        }
    }
}

/// A culprit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RootCause {
    /// Segment.
    pub segment: SegmentId,
    /// `tid#seq`.
    pub segment_label: String,
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub comm: String,
    /// Process name.
    pub process: String,
    /// Class.
    pub class: CauseClass,
    /// Why, in plain words.
    pub reason: String,
    /// Why, as data (`reason` says it in words).
    #[serde(default)]
    pub finding: Finding,
}

/// One choice offered by a question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The segment the walk would continue to.
    pub segment: SegmentId,
    /// `tid#seq`.
    pub segment_label: String,
    /// Its process.
    pub pid: Pid,
    /// Its thread.
    pub tid: Tid,
    /// Its thread name.
    pub comm: String,
    /// The edge kind (`wakeup`, `timer`, ...; `flag` for a guessed data-flag setter).
    pub kind: String,
    /// Edge strength.
    #[serde(with = "lower_strength")]
    pub strength: Strength,
    /// When the causing action happened.
    pub ts: Nanos,
    /// What the choice means, in plain words.
    pub description: String,
    /// The call stack of the syscall the choice's segment acted through (or blocked in).
    #[serde(default)]
    pub stack: Vec<Frame>,
}

/// The answer to a question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Follow choice `n` (0-based index into `choices`). JSON: the number.
    Choice(usize),
    /// Stop the walk here. JSON: `"stop"`.
    Stop,
}

impl Serialize for Answer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Answer::Choice(n) => s.serialize_u64(*n as u64),
            Answer::Stop => s.serialize_str("stop"),
        }
    }
}

impl<'de> Deserialize<'de> for Answer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Answer, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(usize),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Answer::Choice(n)),
            Raw::S(s) if s == "stop" => Ok(Answer::Stop),
            Raw::S(s) => Err(serde::de::Error::invalid_value(
                serde::de::Unexpected::Str(&s),
                &"a choice index or \"stop\"",
            )),
        }
    }
}

/// A question the walk asked an [`Oracle`](crate::Oracle): several incoming edges, or a weak
/// one. `answer` and `defaulted` are filled in once the oracle replied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// The segment whose cause is asked for.
    pub about: SegmentId,
    /// `tid#seq` of `about`.
    pub about_label: String,
    /// What the question is about (`wake`, `timer`, `irq`, `split`, `late-sleep`, `input`,
    /// `context`, `flag`, `baseline`, `baseline-wake`, `culprit`, `recurse`); the first part
    /// of `pattern`.
    #[serde(default)]
    pub tag: String,
    /// The question in plain words.
    pub prompt: String,
    /// The choices, oldest first.
    pub choices: Vec<Choice>,
    /// The default policy's choice: the most recent strong edge, else the most recent edge.
    pub default: usize,
    /// The answer.
    pub answer: Answer,
    /// Whether the answer is the default because nobody chose (`--auto`, end of input, end of
    /// the answers file).
    pub defaulted: bool,
    /// The question's pattern: what it is about without ids (kind of question, thread name,
    /// wait syscall, edge kinds offered). Saved answers are keyed by it.
    #[serde(default)]
    pub pattern: String,
    /// Whether a saved answer (`--save-answers`) answered it, so nobody was asked.
    #[serde(default)]
    pub by_rule: bool,
    /// The call stack of the syscall the segment asked about blocked in.
    #[serde(default)]
    pub stack: Vec<Frame>,
}

impl Question {
    /// Whether `other` is the same question: everything but the answer is equal (a walk run
    /// again asks it again; its earlier answer may be reused).
    pub fn same_as(&self, other: &Question) -> bool {
        self.about == other.about
            && self.tag == other.tag
            && self.prompt == other.prompt
            && self.choices == other.choices
            && self.default == other.default
    }
}

/// A thread that could have ended the hang, and what it did during it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Thread.
    pub tid: Tid,
    /// Process.
    pub pid: Pid,
    /// Thread name.
    pub comm: String,
    /// Process name.
    pub process: String,
    /// Its segment that best shows what it did during the hang.
    pub segment: Option<SegmentId>,
    /// Time on CPU during the hang.
    pub on_cpu_ns: u64,
    /// What it did during the hang.
    pub during_hang: String,
    /// What it did during the hang, as data (`during_hang` says it in words).
    #[serde(default)]
    pub during: During,
    /// Whether it ended the same wait in the baseline.
    pub baseline_waker: bool,
}

/// Seconds with millisecond precision: `3.004 s`.
pub fn secs(ns: u64) -> String {
    format!(
        "{}.{:03} s",
        ns / 1_000_000_000,
        (ns % 1_000_000_000) / 1_000_000
    )
}

impl Report {
    /// A readable terminal explanation.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let hang = self.path.first().map_or("", |p| p.description.as_str());
        out.push_str(&format!("Hang: {} ({})\n", hang, self.hang.class.name()));
        if let Some(first) = self.path.first().filter(|p| !p.stack.is_empty()) {
            out.push_str(&format!("  · blocked at: {}\n", stack_line(&first.stack)));
        }
        for e in &self.hang.evidence {
            out.push_str(&format!("  · {e}\n"));
        }
        for item in self.path.iter().skip(1) {
            let arrow = match item.role {
                Role::Cause | Role::Hang => "←",
                Role::Baseline => "⇠ baseline:",
                Role::Setter => "⇠ flag setter?",
                Role::Context => "  context:",
                Role::Input => "  input:",
            };
            let strength = match item.edge {
                Some(e) if e.strength == Strength::Weak => " [weak]",
                _ => "",
            };
            out.push_str(&format!("  {arrow} {}{strength}\n", item.description));
            if !item.stack.is_empty() {
                out.push_str(&format!("      at: {}\n", stack_line(&item.stack)));
            }
        }
        match self.root_causes.split_last() {
            Some((last, others)) => {
                out.push_str(&format!("Root cause: {}\n", sentence(&last.reason)));
                for rc in others {
                    out.push_str(&format!(
                        "  also: {} ({})\n",
                        sentence(&rc.reason),
                        rc.class.name()
                    ));
                }
            }
            None => out.push_str("Root cause: not found\n"),
        }
        if let Some(b) = &self.blame {
            out.push_str(&blame_text(b));
        }
        if !self.further_culprits.is_empty() {
            out.push_str(
                "Further culprits (other abnormal threads on the baseline's wake-up path):\n",
            );
            for f in &self.further_culprits {
                out.push_str(&format!(
                    "  #{} {} {}: during the hang {} (score {:.2})\n",
                    f.rank, f.comm, f.tid, f.during_hang, f.score
                ));
                if let Some(last) = f.root_causes.last() {
                    out.push_str(&format!(
                        "     its root cause: {} ({})\n",
                        sentence(&last.reason),
                        last.class.name()
                    ));
                }
            }
        }
        if let Some(b) = &self.baseline {
            out.push_str(&format!(
                "Baseline: {} ({} similar normal wait(s), similarity {:.2}, its wait lasted {})\n",
                b.wake_path
                    .first()
                    .map_or(b.segment_label.as_str(), |s| s.description.as_str()),
                b.similar_found,
                b.similarity,
                secs(b.wait_ns)
            ));
            let chain: Vec<String> = b
                .wake_path
                .iter()
                .skip(1)
                .map(|s| match s.edge {
                    Some(e) => format!(
                        "{} {} [{} {}]",
                        s.comm,
                        s.tid,
                        e.kind.name(),
                        e.strength.name()
                    ),
                    None => format!("{} {}", s.comm, s.tid),
                })
                .collect();
            if !chain.is_empty() {
                out.push_str(&format!("  its wake-up path: ← {}\n", chain.join(" ← ")));
            }
            for t in &b.threads {
                let mut mark = if t.abnormal { "abnormal" } else { "normal" }.to_string();
                if let Some(r) = t.rank {
                    mark.push_str(&format!(", culprit #{r}"));
                }
                if t.followed {
                    mark.push_str(", followed");
                }
                if let Some(by) = t.explained_by {
                    mark.push_str(&format!(", on the chain of tid {by}"));
                }
                out.push_str(&format!(
                    "  during the hang, {} {}: {} ({mark})\n",
                    t.comm, t.tid, t.during_hang
                ));
            }
        }
        if !self.ranked_paths.is_empty() {
            out.push_str("Ranked paths (beam search with look-back; lower score is better):\n");
            for p in &self.ranked_paths {
                let chain: Vec<String> = p
                    .steps
                    .iter()
                    .map(|s| match s.edge {
                        Some(e) => format!(
                            "[{} {}] {} {}",
                            e.kind.name(),
                            e.strength.name(),
                            s.comm,
                            s.tid
                        ),
                        None => format!("{} {}", s.comm, s.tid),
                    })
                    .collect();
                out.push_str(&format!(
                    "  {}. score {:.2}: {}\n",
                    p.rank,
                    p.score,
                    chain.join(" ← ")
                ));
            }
        }
        if !self.candidates.is_empty() {
            out.push_str("Candidates that could have ended it:\n");
            for c in &self.candidates {
                let mark = if c.baseline_waker {
                    " (baseline waker)"
                } else {
                    ""
                };
                out.push_str(&format!("  - {}{mark}: {}\n", c.comm, c.during_hang));
            }
        }
        if !self.questions.is_empty() {
            out.push_str("Questions:\n");
            for q in &self.questions {
                let ans = match q.answer {
                    Answer::Choice(n) => q
                        .choices
                        .get(n)
                        .map_or_else(|| format!("#{}", n + 1), |c| c.description.clone()),
                    Answer::Stop => "stop".to_string(),
                };
                let how = if q.by_rule {
                    " (saved answer)"
                } else if q.defaulted {
                    " (default)"
                } else {
                    ""
                };
                out.push_str(&format!("  ? {}\n", q.prompt));
                if !q.stack.is_empty() {
                    out.push_str(&format!("    (blocked at: {})\n", stack_line(&q.stack)));
                }
                out.push_str(&format!("    → {ans}{how}\n"));
                if let Some(c) = match q.answer {
                    Answer::Choice(n) => q.choices.get(n).filter(|c| !c.stack.is_empty()),
                    Answer::Stop => None,
                } {
                    out.push_str(&format!("      at: {}\n", stack_line(&c.stack)));
                }
            }
        }
        for a in &self.advice {
            out.push_str(&format!("Hint: {}\n", sentence(a)));
        }
        out
    }
}

fn sentence(s: &str) -> String {
    if s.ends_with('.') {
        s.to_string()
    } else {
        format!("{s}.")
    }
}

/// The terminal lines of a blame: each contributor with its share and what it was doing.
fn blame_text(b: &Blame) -> String {
    let mut out = format!("Blame (of {}):\n", secs(b.window_ns));
    for c in &b.contributors {
        let parts: Vec<String> = BlameState::ALL
            .iter()
            // States under 1% of its time say nothing.
            .filter(|s| c.time.get(**s) > 0 && c.time.get(**s) * 100 >= c.ns)
            .map(|s| format!("{} {}", s.words(), secs(c.time.get(*s))))
            .collect();
        let process = if c.process.is_empty() || c.process == c.comm {
            String::new()
        } else {
            format!(" ({})", c.process)
        };
        out.push_str(&format!(
            "  {:>3.0}%  {} {}{process}: {}\n",
            c.share * 100.0,
            c.comm,
            c.tid,
            parts.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_have_millisecond_precision() {
        assert_eq!(secs(3_004_400_000), "3.004 s");
        assert_eq!(secs(999_999), "0.000 s");
    }

    #[test]
    fn answers_round_trip_through_json() {
        for a in [Answer::Choice(2), Answer::Stop] {
            let j = serde_json::to_string(&a).expect("serialize");
            let back: Answer = serde_json::from_str(&j).expect("deserialize");
            assert_eq!(back, a);
        }
        assert_eq!(
            serde_json::to_string(&Answer::Stop).expect("serialize"),
            "\"stop\""
        );
        assert!(serde_json::from_str::<Answer>("\"go\"").is_err());
    }
}
