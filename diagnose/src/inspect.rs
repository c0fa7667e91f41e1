//! Graph inspection for incremental tracing: the places where the graph is likely wrong,
//! each with the exact next step — a rule to add to a rules file (`argus build --rules`), or
//! what to record next time (`argus record --dispatch`, `--watch`, `--stacks`). This is the
//! "report → add tracing → re-record" loop of the Argus papers.
//!
//! What is looked for (each a [`SuspectKind`]):
//! - **Batching**: one segment whose strong messages or wake-ups reach two or more other
//!   processes: the thread served several clients in one vertex, so a walk through it blames
//!   all of its work on each of them. Next: a `[[split]]` rule on the syscall it sent
//!   through, or probes on the function its loop called to send (`--dispatch`; the frame of
//!   its sending stack just inside the frames it shares with a stack where it waited) and,
//!   when another thread's wake-up set the loop going, on the function that thread's loop
//!   called to wake it (`--enqueue`): each run of a work item becomes a segment joined to
//!   the enqueue that queued it.
//! - **Unexplained wait**: a wait at least the threshold long that ended with nothing
//!   leading to the thread's next segment, or only the thread's own order: the connection
//!   that woke it is missing. Next: for a futex word, a `[[condvar]]` rule or a watchpoint on
//!   it; else a `--dispatch` probe on the function it blocked in (outside the C runtime), or
//!   `--stacks` to learn it.
//! - **Weak path**: a hang of the watched threads whose diagnosed path is more than half weak
//!   edges: the explanation rests on guesses. Next: the `[[condvar]]` rules for the futex
//!   words of its weak wake-ups.
//! - **Unexplained loop**: a hang that is a polling loop (RepeatedYield) with no edge from
//!   whoever set what it polled (no watchpoint on the flag): the setter is a guess. Next: a
//!   watchpoint on the flag (`--watch FLAG@PID`), with stacks to find where it polls.
//! - **Mutex-like**: weak futex wake-ups on one word that two or more threads of a process
//!   hand back and forth with short waits: lock hand-offs, rightly weak. Nothing to add
//!   unless the word is a condition variable.

use crate::answerer::AutoOracle;
use crate::hangs::find_hangs;
use crate::walk::DiagnoseConfig;
use crate::Graph;
use argus_schema::{EdgeKind, Pid, SegmentId, SegmentKind, Strength, Tid};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What kind of likely mistake a suspect is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SuspectKind {
    /// One segment reaches several other processes.
    Batching,
    /// A long wait ended by nothing (or the thread's own order).
    UnexplainedWait,
    /// A hang's path is mostly weak edges.
    WeakPath,
    /// A polling loop (RepeatedYield) that ends with no edge from the thread that set what it
    /// polled.
    UnexplainedLoop,
    /// Weak futex hand-offs that look like a mutex.
    MutexLike,
}

/// The next step for a suspect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum NextStep {
    /// Add this to a rules file and build again (`argus build TRACE --rules FILE`).
    Rule {
        /// The TOML to add.
        toml: String,
    },
    /// Record again with these `argus record` options.
    Record {
        /// The options, e.g. `--dispatch /usr/bin/app:handle_request`.
        options: String,
    },
    /// Nothing to add; why.
    Nothing {
        /// Why.
        why: String,
    },
}

/// One place where the graph is likely wrong.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// What kind.
    pub kind: SuspectKind,
    /// The process and thread.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Its name.
    pub comm: String,
    /// How many segments (or edges, for a mutex-like word) show it.
    pub count: usize,
    /// Up to 5 of them, earliest first.
    pub segments: Vec<SegmentId>,
    /// What was seen, in plain words.
    pub evidence: String,
    /// What to do, best first.
    pub next: Vec<NextStep>,
}

/// The inspection's settings.
#[derive(Clone, Debug)]
pub struct InspectConfig {
    /// The diagnosis settings (the hang threshold is also the "long wait" of an unexplained
    /// wait).
    pub diagnose: DiagnoseConfig,
    /// The watched threads for the weak-path check (their hangs are diagnosed).
    pub watched: Vec<Tid>,
    /// Threads to say nothing of: the recorder's own (the snapshot manifest's
    /// `recorder_tids`), of which the trace holds only stray records — a wait of theirs
    /// ends with "nothing", their real wake-ups being hidden.
    pub ignored: BTreeSet<Tid>,
}

/// Every suspect of `graph`, by kind then by count (largest first).
pub fn inspect(graph: &Graph, cfg: &InspectConfig) -> Vec<Suspect> {
    let mut out = Vec::new();
    out.extend(batching(graph));
    out.extend(unexplained_waits(graph, cfg.diagnose.hang.threshold_ns));
    out.extend(weak_paths(graph, cfg));
    out.extend(mutex_like(graph));
    out.retain(|s| !cfg.ignored.contains(&s.tid));
    out.sort_by(|a, b| {
        (a.kind, std::cmp::Reverse(a.count), a.tid).cmp(&(
            b.kind,
            std::cmp::Reverse(b.count),
            b.tid,
        ))
    });
    out
}

fn examples(mut v: Vec<SegmentId>) -> Vec<SegmentId> {
    v.sort_by_key(|id| (id.tid(), id.seq()));
    v.truncate(5);
    v
}

/// With no better next step, record stacks to learn more.
fn or_stacks(next: &mut Vec<NextStep>) {
    if next.is_empty() {
        next.push(NextStep::Record {
            options: "--stacks".into(),
        });
    }
}

/// The `[[condvar]]` rule that makes futex `addr` of `pid` a condition variable.
fn condvar_toml(pid: Pid, addr: u64) -> String {
    format!("[[condvar]]\npid = {}\naddr = \"{addr:#x}\"\n", pid.0)
}

/// [`condvar_toml`] as a next step.
fn condvar_rule(pid: Pid, addr: u64) -> NextStep {
    NextStep::Rule {
        toml: condvar_toml(pid, addr),
    }
}

/// `--dispatch OBJECT:SYMBOL` for the innermost user frame of `stack` with both, outside
/// the C runtime (its syscall stubs are no one's callback) and not inlined (no entry).
fn dispatch_probe(stack: &[crate::Frame]) -> Option<NextStep> {
    stack
        .iter()
        .filter(|f| !f.kernel && !f.inlined() && !runtime_frame(f))
        .find_map(probe_spec)
        .map(|spec| NextStep::Record {
            options: format!("--dispatch {spec}"),
        })
}

/// Whether `e` is a strong message, queued work or wake-up: what a server sends a client.
fn sends(e: &argus_schema::CausalEdge) -> bool {
    matches!(
        e.kind,
        EdgeKind::Message | EdgeKind::Queue | EdgeKind::Wakeup
    ) && e.strength != Strength::Weak
}

/// How many segments back a thread's history is searched for a stack where it waited, or
/// the wake-up that set its loop going.
const LOOKBACK: usize = 8;

/// Whether a frame is a C runtime's wrapper (a syscall stub): never the function a loop
/// calls for one piece of work.
fn runtime_frame(f: &crate::Frame) -> bool {
    let file = f
        .object
        .as_deref()
        .and_then(|o| o.rsplit('/').next())
        .unwrap_or("");
    [
        "libc.so",
        "libc-",
        "libpthread",
        "ld-linux",
        "ld-musl",
        "libc.musl",
    ]
    .iter()
    .any(|p| file.starts_with(p))
}

/// The function a thread's loop called to do what it did at `sending` (a stack, innermost
/// first): the frame of `sending` just inside its innermost frame that `waiting` (a stack
/// where the same thread waited: its loop, and the loop's callers) also holds. `None` when
/// the stacks share nothing, or that frame is the C runtime's (the loop itself sent).
/// Inlined frames are left out of both: a probe needs a function's entry.
fn loop_callee<'a>(
    sending: &'a [crate::Frame],
    waiting: &[crate::Frame],
) -> Option<&'a crate::Frame> {
    let called = |f: &&crate::Frame| !f.kernel && !f.inlined();
    let sending: Vec<&crate::Frame> = sending.iter().filter(called).collect();
    let shared: BTreeSet<(&str, &str)> = waiting.iter().filter(called).filter_map(named).collect();
    let held = |f: &crate::Frame| named(f).is_some_and(|k| shared.contains(&k));
    // Past the frames both hold at the innermost end (a shared syscall stub), the first
    // frame of the loop.
    let first_own = sending.iter().position(|f| !held(f))?;
    let loop_at = first_own + sending[first_own..].iter().position(|f| held(f))?;
    let callee = sending[loop_at - 1];
    (named(callee).is_some() && !runtime_frame(callee)).then_some(callee)
}

/// A stack where the thread of `s` waited: `s`'s own, else one of the segments before it.
fn waiting_stack(g: &Graph, s: &argus_schema::Segment) -> Vec<crate::Frame> {
    let mut cur = Some(s);
    for _ in 0..LOOKBACK {
        let Some(c) = cur else { break };
        if c.wait_start_ns.is_some() {
            let st = g.blocking_stack(c);
            if !st.is_empty() {
                return st;
            }
        }
        cur = g.prev_in_thread(c.id);
    }
    Vec::new()
}

/// A frame's `(object, symbol)`, when it has both.
fn named(f: &crate::Frame) -> Option<(&str, &str)> {
    Some((f.object.as_deref()?, f.symbol.as_deref()?))
}

/// `OBJECT:SYMBOL` of a named frame.
fn probe_spec(f: &crate::Frame) -> Option<String> {
    named(f).map(|(object, symbol)| format!("{object}:{symbol}"))
}

/// The probes that make each piece of work a batching segment `s` sent at `ts` a segment of
/// its own: `--dispatch` on the function its loop called to send, and `--enqueue` on the
/// function another thread's loop called when it set `s`'s loop going (the latest wake-up or
/// message from another task into `s` or the segments before it), the first argument of
/// each taken as the work item (`@1`). Without stacks where the threads waited: the
/// innermost named user frame of the sending stack.
fn work_probes(g: &Graph, s: &argus_schema::Segment, ts: argus_schema::Nanos) -> Option<NextStep> {
    let sending = g.sending_stack(s, ts);
    let Some(run) = loop_callee(&sending, &waiting_stack(g, s)) else {
        return dispatch_probe(&sending);
    };
    let run_spec = probe_spec(run)?;
    let mut cur = Some(s);
    let mut enqueue = None;
    'back: for _ in 0..LOOKBACK {
        let Some(c) = cur else { break };
        let mut into: Vec<_> = g
            .incoming(c.id)
            .filter(|e| {
                matches!(
                    e.kind,
                    EdgeKind::Wakeup | EdgeKind::Message | EdgeKind::Queue
                ) && e.src.tid() != c.tid
                    && e.src.tid().irq_cpu().is_none()
            })
            .collect();
        into.sort_by_key(|e| std::cmp::Reverse(e.ts));
        for e in into {
            let Some(src) = g.segment(e.src) else {
                continue;
            };
            let from = g.sending_stack(src, e.ts);
            if let Some(f) = loop_callee(&from, &waiting_stack(g, src)) {
                enqueue = probe_spec(f).filter(|q| *q != run_spec);
                break 'back;
            }
        }
        cur = g.prev_in_thread(c.id);
    }
    Some(NextStep::Record {
        options: match enqueue {
            Some(q) => format!("--dispatch {run_spec}@1 --enqueue {q}@1"),
            None => format!("--dispatch {run_spec}"),
        },
    })
}

/// Segments whose strong messages, queued work or wake-ups reach two or more other
/// processes, grouped by thread.
fn batching(g: &Graph) -> Vec<Suspect> {
    struct Seen {
        segments: Vec<SegmentId>,
        syscalls: BTreeMap<i32, usize>,
        probe: Option<NextStep>,
        reached: BTreeSet<i32>,
    }
    let mut by_thread: BTreeMap<(Pid, Tid), Seen> = BTreeMap::new();
    for s in g.segments().iter().filter(|s| s.kind == SegmentKind::Task) {
        let sent: Vec<_> = g
            .outgoing(s.id)
            .filter(|e| sends(e))
            .filter(|e| g.pid_of(e.dst.tid()).is_some_and(|p| p != s.pid))
            .collect();
        let pids: BTreeSet<i32> = sent
            .iter()
            .filter_map(|e| g.pid_of(e.dst.tid()).map(|p| p.0))
            .collect();
        if pids.len() < 2 {
            continue;
        }
        let seen = by_thread.entry((s.pid, s.tid)).or_insert_with(|| Seen {
            segments: Vec::new(),
            syscalls: BTreeMap::new(),
            probe: None,
            reached: BTreeSet::new(),
        });
        seen.segments.push(s.id);
        seen.reached.extend(pids);
        for e in &sent {
            if e.src_syscall >= 0 {
                *seen.syscalls.entry(e.src_syscall).or_default() += 1;
            }
            if seen.probe.is_none() {
                seen.probe = work_probes(g, s, e.ts);
            }
        }
    }
    by_thread
        .into_iter()
        .map(|((pid, tid), seen)| {
            let mut next = Vec::new();
            if let Some((&sys, _)) = seen.syscalls.iter().max_by_key(|(_, n)| **n) {
                next.push(NextStep::Rule {
                    toml: format!(
                        "[[split]]\npid = {}\nsyscall = \"{}\"\n",
                        pid.0,
                        argus_schema::syscalls::name(sys)
                    ),
                });
            }
            next.extend(seen.probe);
            or_stacks(&mut next);
            Suspect {
                kind: SuspectKind::Batching,
                pid,
                tid,
                comm: g.comm(tid),
                count: seen.segments.len(),
                evidence: format!(
                    "{} segment(s) each sent to two or more of {} other processes",
                    seen.segments.len(),
                    seen.reached.len()
                ),
                segments: examples(seen.segments),
                next,
            }
        })
        .collect()
}

/// Long waits that ended with nothing leading to the thread's next segment, or only the
/// thread's own order, grouped by thread and what it waited in.
fn unexplained_waits(g: &Graph, threshold_ns: u64) -> Vec<Suspect> {
    let mut by_wait: BTreeMap<(Pid, Tid, i32, Option<u64>), Vec<SegmentId>> = BTreeMap::new();
    let mut probes: BTreeMap<(Pid, Tid, i32, Option<u64>), NextStep> = BTreeMap::new();
    for s in g.segments().iter().filter(|s| s.kind == SegmentKind::Task) {
        let Some(w) = s.wait_start_ns else { continue };
        if s.end != argus_schema::EndCause::Woken || w.until(g.end_of(s)) < threshold_ns {
            continue;
        }
        let Some(next) = g.next_in_thread(s.id) else {
            continue;
        };
        if g.incoming(next.id).any(|e| e.kind != EdgeKind::ThreadOrder) {
            continue;
        }
        let key = (s.pid, s.tid, s.wait_syscall, s.wait_object);
        by_wait.entry(key).or_default().push(s.id);
        if let std::collections::btree_map::Entry::Vacant(v) = probes.entry(key) {
            if let Some(p) = dispatch_probe(&g.blocking_stack(s)) {
                v.insert(p);
            }
        }
    }
    by_wait
        .into_iter()
        .map(|(key @ (pid, tid, sys, object), segs)| {
            let name = argus_schema::syscalls::name(sys);
            let mut next = Vec::new();
            if let (Some(addr), true) = (object, name == "futex") {
                next.push(condvar_rule(pid, addr));
                next.push(NextStep::Record {
                    options: format!("--watch {addr:#x}:4@{}", pid.0),
                });
            }
            next.extend(probes.remove(&key));
            or_stacks(&mut next);
            Suspect {
                kind: SuspectKind::UnexplainedWait,
                pid,
                tid,
                comm: g.comm(tid),
                count: segs.len(),
                evidence: format!(
                    "{} wait(s) in {name}{} of at least the threshold ended with no edge \
                     from another thread",
                    segs.len(),
                    object.map_or(String::new(), |a| format!(" on {a:#x}"))
                ),
                segments: examples(segs),
                next,
            }
        })
        .collect()
}

/// Hangs of the watched threads whose path (diagnosed with the default answers) is mostly
/// weak edges.
fn weak_paths(g: &Graph, cfg: &InspectConfig) -> Vec<Suspect> {
    let mut out = Vec::new();
    for &tid in &cfg.watched {
        for hang in find_hangs(g, tid, &cfg.diagnose.hang) {
            let Ok(report) = crate::walk::run(g, &hang, &mut AutoOracle, &cfg.diagnose) else {
                continue;
            };
            if hang.spin.class == argus_schema::SpinClass::RepeatedYield {
                let flagged = g
                    .thread_segments(tid)
                    .filter(|s| s.end_ns >= hang.spin.start_ns && s.start_ns <= hang.spin.end_ns)
                    .any(|s| g.incoming(s.id).any(|e| e.kind == EdgeKind::Flag));
                if !flagged {
                    let seg = g.segment(hang.spin.segment);
                    let mut next = vec![NextStep::Record {
                        options: format!("--watch FLAG@{}", report.hang.pid.0),
                    }];
                    match seg.and_then(|s| dispatch_probe(&g.blocking_stack(s))) {
                        Some(NextStep::Record { options }) => next.push(NextStep::Record {
                            options: format!("{options} (where it polls)"),
                        }),
                        _ => next.push(NextStep::Record {
                            options: "--stacks (to see where it polls)".into(),
                        }),
                    }
                    out.push(Suspect {
                        kind: SuspectKind::UnexplainedLoop,
                        pid: report.hang.pid,
                        tid,
                        comm: report.hang.comm.clone(),
                        count: hang.spin.segments as usize,
                        segments: vec![hang.spin.segment],
                        evidence: format!(
                            "the {} polling loop from {} ends with no edge from whoever set \
                             what it polled (FLAG: the variable it polls, a symbol or address)",
                            crate::report::secs(report.hang.duration_ns),
                            report.hang.segment_label
                        ),
                        next,
                    });
                }
            }
            // Item i was reached from item i − 1 by its edge: i − 1's wait is what it ended.
            let edges: Vec<(usize, &crate::report::PathEdge)> = report
                .path
                .iter()
                .enumerate()
                .filter_map(|(i, p)| Some((i, p.edge.as_ref()?)))
                .collect();
            let weak: Vec<usize> = edges
                .iter()
                .filter(|(_, e)| e.strength == Strength::Weak)
                .map(|(i, _)| *i)
                .collect();
            if weak.is_empty() || weak.len() * 2 <= edges.len() {
                continue;
            }
            // The futex words the weak wake-ups ended waits on: condition variables?
            let mut next: Vec<NextStep> = Vec::new();
            for &i in &weak {
                let Some(w) = i
                    .checked_sub(1)
                    .and_then(|j| g.segment(report.path[j].segment))
                else {
                    continue;
                };
                if let (Some(addr), true) = (w.wait_object, is_futex(w.wait_syscall)) {
                    let step = condvar_rule(w.pid, addr);
                    if !next.contains(&step) {
                        next.push(step);
                    }
                }
            }
            or_stacks(&mut next);
            out.push(Suspect {
                kind: SuspectKind::WeakPath,
                pid: report.hang.pid,
                tid,
                comm: report.hang.comm.clone(),
                count: weak.len(),
                segments: examples(weak.iter().map(|&i| report.path[i].segment).collect()),
                evidence: format!(
                    "the {} hang from {} rests on {} weak edge(s) of {}",
                    crate::report::secs(report.hang.duration_ns),
                    report.hang.segment_label,
                    weak.len(),
                    edges.len()
                ),
                next,
            });
        }
    }
    out
}

fn is_futex(syscall: i32) -> bool {
    argus_schema::syscalls::name(syscall) == "futex"
}

/// A woken wait shorter than this is a hand-off, not a wait for work.
const HANDOFF_NS: u64 = 1_000_000;

/// Weak futex wake-ups on one word among two or more threads of a process that both wake
/// and wait on it, with short waits: a mutex.
fn mutex_like(g: &Graph) -> Vec<Suspect> {
    #[derive(Default)]
    struct Word {
        wakers: BTreeSet<Tid>,
        woken: BTreeSet<Tid>,
        waits: Vec<u64>,
        segments: Vec<SegmentId>,
    }
    let mut words: BTreeMap<(Pid, u64), Word> = BTreeMap::new();
    for e in g.edges() {
        if e.kind != EdgeKind::Wakeup || e.strength != Strength::Weak {
            continue;
        }
        let Some(woken) = g.prev_in_thread(e.dst) else {
            continue;
        };
        let (Some(addr), true) = (woken.wait_object, is_futex(woken.wait_syscall)) else {
            continue;
        };
        if g.pid_of(e.src.tid()) != Some(woken.pid) {
            continue;
        }
        let w = words.entry((woken.pid, addr)).or_default();
        w.wakers.insert(e.src.tid());
        w.woken.insert(woken.tid);
        w.waits
            .push(woken.wait_start_ns.map_or(0, |s| s.until(g.end_of(woken))));
        w.segments.push(woken.id);
    }
    words
        .into_iter()
        .filter_map(|((pid, addr), mut w)| {
            let both: BTreeSet<Tid> = w.wakers.intersection(&w.woken).copied().collect();
            if both.len() < 2 || w.waits.len() < 4 {
                return None;
            }
            w.waits.sort_unstable();
            let median = w.waits[w.waits.len() / 2];
            if median >= HANDOFF_NS {
                return None;
            }
            let tid = *both.iter().next()?;
            Some(Suspect {
                kind: SuspectKind::MutexLike,
                pid,
                tid,
                comm: g.comm(tid),
                count: w.waits.len(),
                evidence: format!(
                    "{} weak wake-ups on futex {addr:#x} among {} threads that both wait on \
                     it and wake it, median wait {}",
                    w.waits.len(),
                    both.len(),
                    crate::report::secs(median)
                ),
                segments: examples(w.segments),
                next: vec![
                    NextStep::Nothing {
                        why: "lock hand-offs are rightly weak: a lock's release does not \
                              cause the waiter's work"
                            .into(),
                    },
                    NextStep::Rule {
                        toml: format!(
                            "# only if {addr:#x} is a condition variable, not a lock:\n{}",
                            condvar_toml(pid, addr)
                        ),
                    },
                ],
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::GraphInput;
    use argus_schema::{CausalEdge, EndCause, Nanos, Segment, StartCause, ThreadInfo};

    const FUTEX: i32 = 202;
    const MS: u64 = 1_000_000;

    /// A segment of `tid` (process `pid`) that runs from `start`, waits in `futex` on `addr`
    /// from `wait` and is woken at `end`.
    fn seg(pid: i32, tid: i32, seq: u32, start: u64, wait: u64, end: u64, addr: u64) -> Segment {
        let mut s = Segment::starting(
            SegmentId::new(Tid(tid), seq),
            Pid(pid),
            SegmentKind::Task,
            Nanos(start),
            StartCause::Woken,
        );
        s.end_ns = Nanos(end);
        s.end = EndCause::Woken;
        s.wait_start_ns = Some(Nanos(wait));
        s.wait_syscall = FUTEX;
        s.wait_object = Some(addr);
        s
    }

    fn edge(
        src: SegmentId,
        dst: SegmentId,
        kind: EdgeKind,
        strength: Strength,
        ts: u64,
    ) -> CausalEdge {
        CausalEdge {
            src,
            dst,
            kind,
            strength,
            ts: Nanos(ts),
            src_syscall: FUTEX,
        }
    }

    fn thread(pid: i32, tid: i32) -> ThreadInfo {
        ThreadInfo {
            tid: Tid(tid),
            pid: Pid(pid),
            comm: format!("t{tid}"),
            process: "p".into(),
            parent: None,
            start_ns: None,
            exit_ns: None,
            kernel: false,
        }
    }

    fn config() -> InspectConfig {
        let mut diagnose = DiagnoseConfig::default();
        diagnose.hang.threshold_ns = 1000 * MS;
        InspectConfig {
            diagnose,
            watched: Vec::new(),
            ignored: BTreeSet::new(),
        }
    }

    /// A 3 s futex wait whose end only the thread's own order leads to is unexplained, with a
    /// condvar rule and a watchpoint on its word; the same wait ended by a wake-up is not.
    #[test]
    fn a_long_wait_ended_by_nothing_is_unexplained_and_one_woken_is_not() {
        let a0 = seg(10, 10, 0, 0, MS, 3000 * MS, 0x1000);
        let a1 = seg(10, 10, 1, 3000 * MS, 3001 * MS, 6000 * MS, 0x1000);
        let a2 = seg(10, 10, 2, 6000 * MS, 6001 * MS, 6002 * MS, 0x1000);
        let b0 = seg(10, 11, 0, 0, 5999 * MS, 6000 * MS, 0x2000);
        let edges = vec![
            edge(
                a0.id,
                a1.id,
                EdgeKind::ThreadOrder,
                Strength::Weak,
                3000 * MS,
            ),
            edge(
                a1.id,
                a2.id,
                EdgeKind::ThreadOrder,
                Strength::Weak,
                6000 * MS,
            ),
            edge(b0.id, a2.id, EdgeKind::Wakeup, Strength::Strong, 6000 * MS),
        ];
        let g = Graph::new(GraphInput {
            segments: vec![a0, a1, a2, b0],
            edges,
            threads: vec![thread(10, 10), thread(10, 11)],
            ..GraphInput::default()
        })
        .unwrap();
        let found: Vec<Suspect> = inspect(&g, &config())
            .into_iter()
            .filter(|s| s.kind == SuspectKind::UnexplainedWait)
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].segments, vec![SegmentId::new(Tid(10), 0)]);
        assert_eq!(
            found[0].next[0],
            NextStep::Rule {
                toml: "[[condvar]]\npid = 10\naddr = \"0x1000\"\n".into()
            }
        );
        assert_eq!(
            found[0].next[1],
            NextStep::Record {
                options: "--watch 0x1000:4@10".into()
            }
        );
        // The same thread as one of the recorder's own: nothing is said of it.
        let mut cfg = config();
        cfg.ignored.insert(Tid(10));
        assert!(inspect(&g, &cfg).iter().all(|s| s.tid != Tid(10)));
    }

    /// Two threads handing one futex word back and forth with 0.1 ms waits: mutex-like. The
    /// same hand-offs with 50 ms waits are waits for work, not a lock.
    #[test]
    fn short_weak_hand_offs_on_one_word_look_like_a_mutex() {
        // Threads 20 and 21 each run six segments, each ending in a futex wait on 0x3000;
        // 21's segment i wakes 20's i + 1, and 20's i + 1 wakes 21's i + 1.
        let graph = |wait_ns: u64| {
            let step = wait_ns + 2 * MS;
            let mut segments = Vec::new();
            let mut edges = Vec::new();
            for i in 0..6u32 {
                let t = u64::from(i) * step;
                segments.push(seg(20, 20, i, t, t + MS, t + MS + wait_ns, 0x3000));
                segments.push(seg(20, 21, i, t, t + MS, t + MS + wait_ns, 0x3000));
                if i > 0 {
                    let a = SegmentId::new(Tid(20), i);
                    let b_prev = SegmentId::new(Tid(21), i - 1);
                    let b = SegmentId::new(Tid(21), i);
                    edges.push(edge(b_prev, a, EdgeKind::Wakeup, Strength::Weak, t));
                    edges.push(edge(a, b, EdgeKind::Wakeup, Strength::Weak, t));
                }
            }
            Graph::new(GraphInput {
                segments,
                edges,
                threads: vec![thread(20, 20), thread(20, 21)],
                ..GraphInput::default()
            })
            .unwrap()
        };
        let mutexes = |g: &Graph| {
            inspect(g, &config())
                .into_iter()
                .filter(|s| s.kind == SuspectKind::MutexLike)
                .count()
        };
        assert_eq!(mutexes(&graph(MS / 10)), 1);
        assert_eq!(mutexes(&graph(50 * MS)), 0);
    }

    fn frames(list: &[(&str, &str)]) -> Vec<crate::Frame> {
        list.iter()
            .map(|(object, symbol)| crate::Frame {
                kernel: false,
                ip: 1,
                symbol: Some(symbol.to_string()),
                offset: Some(4),
                object: Some(object.to_string()),
            })
            .collect()
    }

    /// The function a loop calls for one piece of work is the sending stack's frame just
    /// inside the loop (the innermost frame a stack where the thread waited also holds),
    /// past a syscall stub both share; a loop that sends by itself names no function.
    #[test]
    fn the_loop_callee_is_the_frame_inside_the_frames_a_wait_shares() {
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let waiting = frames(&[
            (libc, "syscall"),
            ("/app", "std::sys::futex::wait"),
            ("/app", "app::flusher"),
            ("/app", "start"),
        ]);
        let sending = frames(&[
            (libc, "kill"),
            ("/app", "run_job"),
            ("/app", "app::flusher"),
            ("/app", "start"),
        ]);
        let f = loop_callee(&sending, &waiting).expect("a callee");
        assert_eq!(f.symbol.as_deref(), Some("run_job"));
        // A shared stub at the innermost end is passed over.
        let via_stub = frames(&[
            (libc, "syscall"),
            ("/app", "notify"),
            ("/app", "enqueue_job"),
            ("/app", "app::flusher"),
        ]);
        let f = loop_callee(&via_stub, &waiting).expect("a callee");
        assert_eq!(f.symbol.as_deref(), Some("enqueue_job"));
        // The loop calls kill itself: no function to probe.
        let direct = frames(&[(libc, "kill"), ("/app", "app::flusher"), ("/app", "start")]);
        assert!(loop_callee(&direct, &waiting).is_none());
        // Nothing shared (another thread's stack, or none): nothing to say.
        assert!(loop_callee(&sending, &frames(&[(libc, "read")])).is_none());
        assert!(loop_callee(&sending, &[]).is_none());
        // A function inlined into the loop at its call (no offset, the loop's ip) is no
        // callee: the function it calls is.
        let mut inlined = sending.clone();
        inlined.insert(
            2,
            crate::Frame {
                offset: None,
                ..frames(&[("/app", "app::flusher::step")])[0].clone()
            },
        );
        assert!(inlined[2].inlined() && !inlined[1].inlined());
        let f = loop_callee(&inlined, &waiting).expect("a callee");
        assert_eq!(f.symbol.as_deref(), Some("run_job"));
        assert_eq!(
            dispatch_probe(&inlined[2..]),
            Some(NextStep::Record {
                options: "--dispatch /app:app::flusher".into()
            })
        );
    }
}
