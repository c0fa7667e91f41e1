//! Long runs: a thread busy on CPU is its own culprit. Decides what started its work: the
//! input sliced back from it (a message, a fork, an `argus:input` marker) or, for a busy
//! culprit found elsewhere, one or two steps of context.

use super::asking::Chosen;
use super::Walk;
use super::{at_least, path_edge, pct, wakes};
use crate::report::{secs, CauseClass, Role};
use argus_schema::{syscalls, CausalEdge, EdgeKind, Nanos, Segment, Spin, StartCause};

impl<'g> Walk<'g, '_> {
    pub(super) fn long_running_hang(&mut self, spin: &Spin, s: &'g Segment, end: Nanos) {
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

    /// Algorithm 1's LongRunning case: slice back from the busy segment to the input that
    /// started its work — a message or data written to it (a send syscall), the creation of
    /// its thread, or an application marker — asking where the slice is ambiguous.
    pub(super) fn slice_to_input(&mut self, start: &'g Segment) {
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

    /// Context for a LongRunning culprit: what started its run, one or two steps back.
    pub(super) fn context(&mut self, start: &'g Segment) {
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
}
