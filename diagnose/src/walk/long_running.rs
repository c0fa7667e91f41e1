//! Long runs: a thread busy on CPU is its own culprit. Decides what started its work: the
//! input sliced back from it (a message, a fork, an `argus:input` marker) or, for a busy
//! culprit found elsewhere, one or two steps of context.

use super::asking::Chosen;
use super::phrases::src_syscall;
use super::Walk;
use super::{at_least, path_edge, wakes};
use crate::findings::{Finding, RunStart, Step};
use crate::report::{CauseClass, Role};
use argus_schema::{syscalls, CausalEdge, EdgeKind, Nanos, Segment, Spin, StartCause};

impl<'g> Walk<'g, '_> {
    pub(super) fn long_running_hang(&mut self, spin: &Spin, s: &'g Segment, end: Nanos) {
        let dur = spin.start_ns.until(end);
        let on = if spin.on_cpu_ns > 0 {
            spin.on_cpu_ns
        } else {
            s.on_cpu_ns
        };
        self.push(
            s,
            None,
            Role::Hang,
            Step::HangRun {
                on_cpu_ns: on,
                hang_ns: dur,
            },
        );
        let finding = if at_least(on, dur, self.cfg.busy_fraction) {
            Finding::Busy {
                on_cpu_ns: on,
                run_ns: dur,
                woke: None,
                through_brief_waits: false,
                still_running: spin.open,
            }
        } else {
            Finding::Starved {
                on_cpu_ns: on,
                run_ns: dur,
                preemptions: s.preemptions,
                woke: None,
                still_running: spin.open,
                lost_ns: self.g.lost_within(spin.start_ns, end),
            }
        };
        self.root(s, CauseClass::LongRunning, finding);
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
                m.text.starts_with(argus_schema::markers::INPUT)
                    && m.ts <= cur.start_ns
                    && m.ts
                        >= cur
                            .start_ns
                            .0
                            .checked_sub(self.cfg.near_ns)
                            .map_or(Nanos(0), Nanos)
            }) {
                let advice = self.words().advice_input_marker(&m.text, m.tid, m.ts);
                self.advice.push(advice);
                return;
            }
            let edges: Vec<&CausalEdge> = g
                .incoming(cur.id)
                .filter(|e| e.kind != EdgeKind::ThreadOrder)
                .collect();
            if edges.is_empty() {
                let advice = self
                    .words()
                    .advice_input_missing(cur.tid, cur.start == StartCause::FirstSeen);
                self.advice.push(advice);
                return;
            }
            let prompt = self.wake_prompt(self.words().ask_input(cur.tid, cur.start_ns), &edges);
            let Chosen::Edge(e) = self.choose("input", cur, prompt, edges) else {
                return;
            };
            let Some(s) = g.segment(e.src) else { return };
            if !self.visited.insert(s.id) {
                return;
            }
            let input = e.kind.info().starts_input
                || (e.src_syscall >= 0 && syscalls::is_send(e.src_syscall));
            let how = match e.kind {
                EdgeKind::Fork => RunStart::Created,
                EdgeKind::Message => RunStart::ReceivedData,
                EdgeKind::Timer => RunStart::Timer,
                _ if input => RunStart::SentInput,
                _ => RunStart::Woken,
            };
            let role = if input { Role::Input } else { Role::Context };
            let syscall = src_syscall(e.src_syscall);
            let advice = input.then(|| {
                self.words()
                    .advice_input(start.tid, how, s, syscall.as_deref(), e.ts)
            });
            self.push(
                s,
                Some(path_edge(e)),
                role,
                Step::RunBegan {
                    how,
                    syscall,
                    at: e.ts,
                },
            );
            if let Some(advice) = advice {
                self.advice.push(advice);
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
            // Context is told, not asked: it does not change the culprit, so the best-ranked
            // edge is taken without a question.
            let Some(e) = self.choose_default(edges) else {
                break;
            };
            let Some(s) = g.segment(e.src) else {
                break;
            };
            let how = match e.kind {
                EdgeKind::Fork => RunStart::Created,
                EdgeKind::Timer => RunStart::Timer,
                _ => RunStart::Woken,
            };
            self.push(
                s,
                Some(path_edge(e)),
                Role::Context,
                Step::RunBegan {
                    how,
                    syscall: src_syscall(e.src_syscall),
                    at: e.ts,
                },
            );
            if !self.visited.insert(s.id) {
                break;
            }
            cur = s;
        }
    }
}
