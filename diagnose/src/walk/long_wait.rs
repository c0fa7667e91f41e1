//! Long waits: why a wait lasted. Follows the wake-up that ended it to its waker and decides
//! what the waker was doing through the window: busy (a LongRunning culprit), starved,
//! blocked itself (recurse on the wait covering most of the window), created or first seen
//! late, a timer (its armer; the thread's own timer means it slept) or a device interrupt.
//! A wait no wake-up ended goes to the [baseline](super::baseline) comparison.

use super::activity::WindowWait;
use super::asking::Chosen;
use super::phrases::{sc, src_syscall};
use super::Walk;
use super::{at_least, edge_by, ended_wait_of, overlap, path_edge, plus, wakes};
use crate::findings::{By, Finding, LogicalWait, Step, WakerState};
use crate::logical;
use crate::report::{CauseClass, PathEdge, PathEdgeKind, Role};
use argus_schema::{
    syscalls, CausalEdge, EdgeKind, EndCause, Nanos, Segment, SegmentKind, Spin, StartCause,
    Strength, Tid,
};

impl<'g> Walk<'g, '_> {
    pub(super) fn long_wait_hang(&mut self, spin: &Spin, first: &'g Segment) {
        // A logical wait ends with its last segment's wait: that is the one to explain.
        let s = self.g.segment(spin.last).unwrap_or(first);
        let w0 = first.wait_start_ns.unwrap_or(spin.start_ns);
        let w1 = self.g.end_of(s);
        let logical = (s.id != first.id).then(|| LogicalWait {
            waits: spin.segments.max(2),
            timeouts: logical::backward(self.g, s).timeouts,
        });
        let step = Step::HangWait {
            syscall: sc(s.wait_syscall),
            wait_ns: w0.until(w1),
            still_blocked: s.end == EndCause::Open,
            logical,
        };
        self.push(first, None, Role::Hang, step);
        self.visited.insert(s.id);
        self.explain_wait(s, 0);
    }

    /// Why the wait at the end of `s` (already on the path) lasted: follow its wake-up, or
    /// when none came, compare with a baseline.
    pub(super) fn explain_wait(&mut self, s: &'g Segment, depth: usize) {
        let g = self.g;
        // A logical wait (timed-out waits on the same object before this one) counts whole.
        let first = logical::backward(g, s).first;
        let w0 = first.wait_start_ns.unwrap_or(first.start_ns);
        let w1 = g.end_of(s);
        let wait = w0.until(w1);
        let sys = sc(s.wait_syscall);
        if depth > self.cfg.max_depth {
            self.root(
                s,
                self.classify(s),
                Finding::DepthLimitInWait {
                    syscall: sys,
                    wait_ns: wait,
                    steps: self.cfg.max_depth,
                },
            );
            return;
        }
        if syscalls::is_sleep(s.wait_syscall) {
            self.root(
                s,
                CauseClass::Sleep,
                Finding::Slept {
                    syscall: sys,
                    wait_ns: wait,
                    still_sleeping: s.end == EndCause::Open,
                    woke: None,
                },
            );
            return;
        }
        let next = match s.end {
            EndCause::Woken => g.next_in_thread(s.id),
            _ => None,
        };
        let Some(next) = next else {
            // Blocked on a lock whose owner the kernel named: the owner held it through the
            // wait (a lock never released, or an owner waiting in turn).
            if let Some(e) = self.lock_owner(s) {
                self.explain_holder(s.tid, e, w0, w1, Role::Cause, depth);
                return;
            }
            let finding = Finding::NeverWoken {
                syscall: sys,
                wait_ns: wait,
                exited: s.end == EndCause::Exit,
            };
            self.root(s, CauseClass::LongWait, finding);
            self.baseline(s, depth);
            return;
        };
        if s.wait_timed_out() {
            // The last timeout came as the data did: a task's message read in the run that
            // began (sent during the logical wait) is what the thread was waiting for.
            if let Some(e) = self.sent_after_timeout(s, next, w0) {
                self.follow(e, next, w0, depth + 1);
                return;
            }
            self.root(
                s,
                CauseClass::Sleep,
                Finding::TimedOut {
                    syscall: sys,
                    wait_ns: wait,
                },
            );
            self.baseline(s, depth);
            return;
        }
        let mut edges: Vec<&CausalEdge> = g
            .incoming(next.id)
            .filter(|e| ended_wait_of(e, next))
            .collect();
        self.drop_stale_data(next, &mut edges);
        edges.extend(self.couriered(next, w0, &edges));
        if let Some(e) = self.owner_release(s, &edges) {
            self.follow(e, next, w0, depth + 1);
            return;
        }
        let prompt = self.wake_prompt(self.words().ask_wait_ended(s.tid, &sys, wait, w1), &edges);
        match self.choose("wake", s, prompt, edges) {
            Chosen::Edge(e) => self.follow(e, next, w0, depth + 1),
            Chosen::Stop => self.root(
                s,
                CauseClass::LongWait,
                Finding::Stopped {
                    syscall: sys,
                    wait_ns: wait,
                },
            ),
            Chosen::Nothing => self.root(
                s,
                CauseClass::LongWait,
                Finding::WakeUntraced {
                    syscall: sys,
                    wait_ns: wait,
                    ended_at: w1,
                },
            ),
        }
    }

    /// Leaves out of `edges` (those that may have ended the wait `next` began after) the data
    /// that had been there for longer than the floor when a wake-up came as `next` began:
    /// the thread was not waiting for that data (it would have been woken when it came), the
    /// wake-up ended its wait. A pool worker woken by its dispatcher reads a request that sat
    /// in its socket while the dispatcher was held up: the request's sender explains nothing
    /// of the delay. Data delivered by an interrupt (its courier) is added back by
    /// [`Walk::couriered`].
    pub(super) fn drop_stale_data(&self, next: &'g Segment, edges: &mut Vec<&'g CausalEdge>) {
        let stale =
            |e: &CausalEdge| e.kind == EdgeKind::Message && e.ts.until(next.start_ns) > self.floor;
        let woke = |e: &CausalEdge| !stale(e) && e.ts.until(next.start_ns) <= self.floor;
        if edges.iter().any(|e| woke(e)) {
            edges.retain(|e| !stale(e));
        }
    }

    /// For a wait `s` that timed out (the logical wait from `w0`), the message a task sent
    /// during it and `next`'s run read, when exactly one task sent one: the data arrived as
    /// the last timeout fired (a reply racing a poll's timeout), and it ended the wait.
    pub(super) fn sent_after_timeout(
        &self,
        s: &'g Segment,
        next: &'g Segment,
        w0: Nanos,
    ) -> Option<&'g CausalEdge> {
        let wakers: Vec<&CausalEdge> = self
            .g
            .incoming(next.id)
            .filter(|e| ended_wait_of(e, next))
            .collect();
        let sent = self.couriered(next, w0, &wakers);
        let first = sent.first()?;
        (sent.iter().all(|e| e.src.tid() == first.src.tid()) && first.src.tid() != s.tid)
            .then(|| sent.iter().copied().max_by_key(|e| (e.ts, e.src)))
            .flatten()
    }

    /// The wake-up to follow without asking when every one of `edges` (those that ended the
    /// wait of `waited`) comes from the owner the kernel named for the lock that wait was on:
    /// its release, not mere mutual exclusion, however weak the futex wake-up looks.
    pub(super) fn owner_release(
        &self,
        waited: &'g Segment,
        edges: &[&'g CausalEdge],
    ) -> Option<&'g CausalEdge> {
        let owner = self.lock_owner(waited)?.src.tid();
        if !edges.iter().all(|e| e.src.tid() == owner) {
            return None;
        }
        edges.iter().copied().max_by_key(|e| (e.strength, e.ts))
    }

    /// The owner of the lock `s`'s wait was on, as the kernel named it when `s` blocked
    /// ([`EdgeKind::LockOwner`]): the earliest such edge from another thread (on Linux a
    /// waiter boosts its lock's owner first, then the owners down the chain of locks that
    /// owner waits for: the walk reaches those through the owner).
    pub(super) fn lock_owner(&self, s: &'g Segment) -> Option<&'g CausalEdge> {
        self.g
            .incoming(s.id)
            .filter(|e| {
                e.kind == EdgeKind::LockOwner && e.src.tid().is_task() && e.src.tid() != s.tid
            })
            .min_by_key(|e| (e.ts, e.src))
    }

    /// When only interrupts woke `next` (a timer ending a poll's timeout, a softirq): the data
    /// sent to its thread during the wait (from `w0`, the logical wait's start) and read in
    /// the run the wake-up began (`next` and the segments split from it with no wait
    /// between). A logical wait is a thread waiting, timeout after timeout, for its object to
    /// become ready: the data that made it ready ends it, and the interrupt was at most its
    /// courier (a loopback packet is delivered by the NET_RX softirq, often at the exit of
    /// whatever interrupt came next). A server loop split where its peers change reads it in
    /// a later segment of the run. `beam_default` prefers such a sender over the interrupt.
    pub(super) fn couriered(
        &self,
        next: &'g Segment,
        w0: Nanos,
        wakers: &[&'g CausalEdge],
    ) -> Vec<&'g CausalEdge> {
        let g = self.g;
        if wakers.is_empty() || !wakers.iter().all(|e| e.src.tid().irq_cpu().is_some()) {
            return Vec::new();
        }
        let mut sent = Vec::new();
        let mut cur = next;
        // A run is a few segments; a bound against a thread that never blocks.
        for _ in 0..16 {
            sent.extend(g.incoming(cur.id).filter(|e| {
                e.kind == EdgeKind::Message
                    && e.strength == Strength::Strong
                    && e.src.tid().is_task()
                    && e.ts >= w0
            }));
            match g.next_in_thread(cur.id) {
                Some(n) if split_from(cur, n) => cur = n,
                _ => break,
            }
        }
        // Disjoint from `wakers`: those all come from interrupts, these from tasks.
        sent
    }

    /// Steps to the source of `e`, which started `woken`; the delay to explain is the window
    /// `[h0, e.ts)`.
    pub(super) fn follow(
        &mut self,
        e: &'g CausalEdge,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        let Some(w) = g.segment(e.src) else {
            return;
        };
        if !self.visited.insert(w.id) {
            self.push(
                w,
                Some(path_edge(e)),
                Role::Cause,
                Step::Waker {
                    by: edge_by(e),
                    then: WakerState::Again,
                },
            );
            self.root(w, self.classify(w), Finding::Circular);
            return;
        }
        let idx = self.push(w, Some(path_edge(e)), Role::Cause, Step::Unknown);
        if depth > self.cfg.max_depth {
            self.describe_item(
                idx,
                Step::Waker {
                    by: edge_by(e),
                    then: WakerState::NotExamined,
                },
            );
            self.root(
                w,
                self.classify(w),
                Finding::DepthLimit {
                    steps: self.cfg.max_depth,
                },
            );
            return;
        }
        match w.tid.irq_cpu() {
            Some(_) => self.irq_waker(idx, w, woken, h0, depth),
            None => self.task_waker(idx, w, e, woken, h0, depth),
        }
    }

    pub(super) fn task_waker(
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
            By::Continuing
        } else {
            edge_by(e)
        };
        let slack = ((len as f64 * self.cfg.running_slack) as u64).max(self.floor);
        // A work item queued late in the window started late because of its queuing, not
        // because of what its worker did before: the segment that queued it is followed.
        if len >= self.floor && w.start_ns > plus(h0, slack) {
            if let Some(q) = self.queued_late(w, h0, slack) {
                self.describe_item(
                    idx,
                    Step::Waker {
                        by,
                        then: WakerState::QueuedLate { at: q.ts },
                    },
                );
                self.follow(q, w, h0, depth + 1);
                return;
            }
            if let Some((from, on_cpu)) = self.busy_through_brief_waits(w, e.ts, h0, slack) {
                let run = from.until(e.ts).max(1);
                self.describe_item(
                    idx,
                    Step::Waker {
                        by,
                        then: WakerState::Busy {
                            on_cpu_ns: on_cpu,
                            run_ns: run,
                            through_brief_waits: true,
                        },
                    },
                );
                self.root(
                    w,
                    CauseClass::LongRunning,
                    Finding::Busy {
                        on_cpu_ns: on_cpu,
                        run_ns: run,
                        woke: Some(woken.tid),
                        through_brief_waits: true,
                        still_running: false,
                    },
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
                    Step::Waker {
                        by,
                        then: WakerState::Busy {
                            on_cpu_ns: w.on_cpu_ns,
                            run_ns: run,
                            through_brief_waits: false,
                        },
                    },
                );
                self.root(
                    w,
                    CauseClass::LongRunning,
                    Finding::Busy {
                        on_cpu_ns: w.on_cpu_ns,
                        run_ns: run,
                        woke: Some(woken.tid),
                        through_brief_waits: false,
                        still_running: false,
                    },
                );
            } else {
                self.describe_item(
                    idx,
                    Step::Waker {
                        by,
                        then: WakerState::Starved {
                            on_cpu_ns: w.on_cpu_ns,
                            run_ns: run,
                            lost_ns: g.lost_within(w.start_ns, run_end),
                        },
                    },
                );
                self.root(
                    w,
                    CauseClass::LongRunning,
                    Finding::Starved {
                        on_cpu_ns: w.on_cpu_ns,
                        run_ns: run,
                        preemptions: w.preemptions,
                        woke: Some(woken.tid),
                        still_running: false,
                        lost_ns: g.lost_within(w.start_ns, run_end),
                    },
                );
            }
            self.context(w);
            return;
        }

        // Split by a heuristic (a batching server loop cut where its peers change): the thread
        // did not block between its previous segment and this one, so continue there, after
        // asking, since the thread-order edge is weak.
        let split = g.prev_in_thread(w.id).filter(|p| split_from(p, w));
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
                let prompt = self.words().ask_split(w.tid, w.start_ns);
                if let Chosen::Edge(te) = self.choose("split", w, prompt, vec![te]) {
                    self.describe_item(
                        idx,
                        Step::Waker {
                            by,
                            then: WakerState::Split,
                        },
                    );
                    self.follow(te, woken, h0, depth + 1);
                    return;
                }
            }
        }

        // The waker itself started late. Where did its thread spend the window? Its latest
        // wait may be a short one (a disk flush, a brief hand-off) after a long one: the wait
        // that covers most of the window is explained, the short ones after it passed over.
        // Busy through the window, however its run was cut (sleeps, a runtime's hand-offs
        // between its threads): the thread ran, or was runnable, for most of the window.
        if len >= self.floor {
            let act = self.activity(w.tid, h0, e.ts);
            let runnable = act.run_ns;
            if act.segments > 0
                && act.on_cpu_ns > 0
                && at_least(runnable, len, self.cfg.busy_fraction)
            {
                let busy = act.busiest.unwrap_or(w);
                let (then, finding) = if at_least(act.on_cpu_ns, len, self.cfg.busy_fraction) {
                    (
                        WakerState::Busy {
                            on_cpu_ns: act.on_cpu_ns,
                            run_ns: len,
                            through_brief_waits: true,
                        },
                        Finding::Busy {
                            on_cpu_ns: act.on_cpu_ns,
                            run_ns: len,
                            woke: Some(woken.tid),
                            through_brief_waits: true,
                            still_running: false,
                        },
                    )
                } else {
                    // Runnable but short of CPU (a CPU-heavy load beside it).
                    (
                        WakerState::Starved {
                            on_cpu_ns: act.on_cpu_ns,
                            run_ns: runnable,
                            lost_ns: g.lost_within(h0, e.ts),
                        },
                        Finding::Starved {
                            on_cpu_ns: act.on_cpu_ns,
                            run_ns: runnable,
                            preemptions: busy.preemptions,
                            woke: Some(woken.tid),
                            still_running: false,
                            lost_ns: g.lost_within(h0, e.ts),
                        },
                    )
                };
                self.describe_item(idx, Step::Waker { by, then });
                self.root(busy, CauseClass::LongRunning, finding);
                self.context(busy);
                return;
            }
        }
        let dominant = self.dominant_wait(w, h0, e.ts);
        if dominant.is_none() {
            // No one wait explains the window: many short ones. Whoever ended most of them
            // is what the thread waited for (hand-offs between a runtime's threads).
            if let Some((t, e2, waits, covered)) = self.window_waker(w, woken, h0, e.ts) {
                if let Some(src) = g.segment(e2.src).filter(|s| !self.visited.contains(&s.id)) {
                    self.describe_item(
                        idx,
                        Step::Waker {
                            by,
                            then: WakerState::WokenThroughWindow {
                                by: t,
                                waits,
                                covered_ns: covered,
                            },
                        },
                    );
                    self.visited.insert(src.id);
                    let idx2 = self.push(src, Some(path_edge(e2)), Role::Cause, Step::Unknown);
                    self.task_waker(idx2, src, e2, woken, h0, depth + 1);
                    return;
                }
            }
        }
        if let Some(d) = dominant {
            if d.next.id != w.id && !self.visited.contains(&d.next.id) {
                let after = d.next.start_ns.until(e.ts);
                self.describe_item(
                    idx,
                    Step::Waker {
                        by,
                        then: WakerState::BlockedEarlier {
                            syscall: sc(d.last.wait_syscall),
                            blocked_ns: d.covered,
                            until: d.next.start_ns,
                            worked_ns: after,
                            passed_waits: d.passed,
                        },
                    },
                );
                self.visited.insert(d.next.id);
                let idx2 = self.push(
                    d.next,
                    Some(PathEdge {
                        kind: PathEdgeKind::Edge(EdgeKind::ThreadOrder),
                        strength: Strength::Weak,
                        ts: d.next.start_ns,
                    }),
                    Role::Cause,
                    Step::Unknown,
                );
                self.late_waker(idx2, d.next, By::Earlier, woken, h0, depth + 1);
                return;
            }
        }
        self.late_waker(idx, w, by, woken, h0, depth);
    }

    /// The queue edge into work item `w` when the item was queued after the window
    /// `[h0, …)` had run `slack` (its latest, should an item be queued twice) and its
    /// source is not on the path yet.
    pub(super) fn queued_late(
        &self,
        w: &'g Segment,
        h0: Nanos,
        slack: u64,
    ) -> Option<&'g CausalEdge> {
        if !matches!(w.kind, SegmentKind::WorkItem { .. }) {
            return None;
        }
        self.g
            .incoming(w.id)
            .filter(|e| e.kind == EdgeKind::Queue && e.ts <= w.start_ns)
            .max_by_key(|e| e.ts)
            .filter(|e| e.ts > plus(h0, slack) && !self.visited.contains(&e.src))
    }

    /// The thread whose wake-ups ended most of `w`'s thread's blocked time in the window
    /// `[h0, until)`, when that is at least the busy fraction of the window: the thread, its
    /// latest wake-up of `w`'s thread in the window, how many waits it ended and how much of
    /// the window they cover. Interrupts (timers the thread armed itself) and the hung
    /// thread are not candidates.
    pub(super) fn window_waker(
        &self,
        w: &'g Segment,
        woken: &'g Segment,
        h0: Nanos,
        until: Nanos,
    ) -> Option<(Tid, &'g CausalEdge, u32, u64)> {
        let g = self.g;
        let mut by: Vec<(Tid, u64, u32, &'g CausalEdge)> = Vec::new();
        for s in g.segments_overlapping(w.tid, h0, until) {
            let (Some(ws), EndCause::Woken) = (s.wait_start_ns, s.end) else {
                continue;
            };
            let Some(next) = g.next_in_thread(s.id) else {
                continue;
            };
            let covered = overlap(ws, s.end_ns, h0, until);
            let edge = g
                .incoming(next.id)
                .filter(|e| {
                    wakes(e.kind)
                        && e.ts <= until
                        && e.src.tid().is_task()
                        && e.src.tid() != w.tid
                        && e.src.tid() != woken.tid
                })
                .max_by_key(|e| (e.strength, e.ts));
            if let Some(e) = edge {
                match by.iter_mut().find(|b| b.0 == e.src.tid()) {
                    Some(b) => {
                        b.1 += covered;
                        b.2 += 1;
                        if e.ts > b.3.ts {
                            b.3 = e;
                        }
                    }
                    None => by.push((e.src.tid(), covered, 1, e)),
                }
            }
        }
        let len = h0.until(until);
        by.into_iter()
            .max_by_key(|b| (b.1, b.0))
            .filter(|b| b.2 >= 2 && at_least(b.1, len, self.cfg.busy_fraction))
            .map(|(t, covered, waits, e)| (t, e, waits, covered))
    }

    /// How long the wait that `p` ends lasted, counting the timed-out waits on the same
    /// object right before it (one logical wait).
    pub(super) fn waited_ns(&self, p: &Segment) -> u64 {
        let first = logical::backward(self.g, p).first;
        first
            .wait_start_ns
            .unwrap_or(first.start_ns)
            .until(p.end_ns)
    }

    /// The wait of `w`'s thread that covers most of the window `[h0, until)`, walking back
    /// from `w` over its thread's segments (logical waits taken whole), if it covers at
    /// least the floor.
    pub(super) fn dominant_wait(
        &self,
        w: &'g Segment,
        h0: Nanos,
        until: Nanos,
    ) -> Option<WindowWait<'g>> {
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
    pub(super) fn late_waker(
        &mut self,
        idx: usize,
        w: &'g Segment,
        by: By,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        let prev = g.prev_in_thread(w.id).filter(|p| p.wait_start_ns.is_some());
        let then = match (prev, w.start) {
            (Some(p), _) => WakerState::HadWaited {
                syscall: sc(p.wait_syscall),
                wait_ns: self.waited_ns(p),
                slept: syscalls::is_sleep(p.wait_syscall),
            },
            (None, StartCause::Created) => WakerState::CreatedAt { at: w.start_ns },
            (None, _) => WakerState::FirstSeenAt { at: w.start_ns },
        };
        self.describe_item(idx, Step::Waker { by, then });
        let mut edges: Vec<&CausalEdge> =
            g.incoming(w.id).filter(|e| ended_wait_of(e, w)).collect();
        self.drop_stale_data(w, &mut edges);
        // Woken only by interrupts (its own timer), the run then read what a task sent: the
        // sender is why the waker acted when it did, as for the hung thread's own wait.
        edges.extend(self.couriered(w, h0, &edges));
        let waited = prev.map(|p| (sc(p.wait_syscall), self.waited_ns(p)));
        let waited_then_woke = |walk_stopped: bool| Finding::WaitedThenWoke {
            woke: woken.tid,
            syscall: waited.as_ref().map(|(sys, _)| sys.clone()),
            wait_ns: waited.as_ref().map_or(0, |(_, ns)| *ns),
            walk_stopped,
        };
        if let Some(e2) = prev.and_then(|p| self.owner_release(p, &edges)) {
            self.follow(e2, w, h0, depth + 1);
            return;
        }
        if !edges.is_empty() {
            let prompt = self.wake_prompt(
                self.words().ask_started_after_wait(
                    w.tid,
                    w.start_ns,
                    waited.as_ref().map(|(sys, ns)| (sys.as_str(), *ns)),
                ),
                &edges,
            );
            match self.choose("wake", w, prompt, edges) {
                Chosen::Edge(e2) => self.follow(e2, w, h0, depth + 1),
                Chosen::Stop | Chosen::Nothing => {
                    self.root(w, CauseClass::LongWait, waited_then_woke(true))
                }
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
                        kind: PathEdgeKind::Edge(EdgeKind::ThreadOrder),
                        strength: Strength::Weak,
                        ts: p.start_ns,
                    }),
                    Role::Cause,
                    Step::Slept {
                        syscall: psys.clone(),
                        wait_ns: p.wait_ns(),
                        untraced_timer: false,
                    },
                );
                self.root(
                    p,
                    CauseClass::Sleep,
                    Finding::Slept {
                        syscall: psys,
                        wait_ns: p.wait_ns(),
                        still_sleeping: false,
                        woke: Some(woken.tid),
                    },
                );
            }
            Some(_) => self.root(w, CauseClass::LongWait, waited_then_woke(false)),
            None if w.start == StartCause::Created => self.created_late(w, woken, h0, depth),
            None => self.root(
                w,
                self.classify(w),
                Finding::FirstSeen {
                    woke: woken.tid,
                    at: w.start_ns,
                },
            ),
        }
    }

    /// A waker `w` that started after the window began, but only because brief waits (below
    /// the floor, not sleeps: a page fault, a lock hand-off, a preemption recorded as a
    /// block) split a run that began before it: when that run (from its start to `until`)
    /// was mostly on CPU, its start and on-CPU time.
    pub(super) fn busy_through_brief_waits(
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
    pub(super) fn created_late(
        &mut self,
        w: &'g Segment,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
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
                self.push(
                    parent,
                    Some(path_edge(e)),
                    Role::Cause,
                    Step::CreatedBy {
                        syscall: src_syscall(e.src_syscall),
                    },
                );
                self.root(
                    parent,
                    self.classify(parent),
                    Finding::CreatedLate {
                        created: w.tid,
                        late_ns: late,
                        woke: woken.tid,
                    },
                );
            }
            _ => self.root(
                w,
                self.classify(w),
                Finding::CreatorUntraced {
                    late_ns: late,
                    woke: woken.tid,
                },
            ),
        }
    }

    pub(super) fn irq_waker(
        &mut self,
        idx: usize,
        w: &'g Segment,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        self.describe_item(idx, Step::WokenByInterrupt);
        if let SegmentKind::Timer { .. } = w.kind {
            let edges: Vec<&CausalEdge> = g
                .incoming(w.id)
                .filter(|e| e.kind == EdgeKind::Timer)
                .collect();
            let prompt = self.wake_prompt(self.words().ask_timer_armer(w), &edges);
            match self.choose("timer", w, prompt, edges) {
                Chosen::Edge(te) => self.timer_armer(te, w, woken, h0, depth),
                Chosen::Stop => self.root(
                    w,
                    CauseClass::Interrupt,
                    Finding::InterruptStopped { woke: woken.tid },
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
                        Finding::TimerArmUntraced { woke: woken.tid },
                    );
                }
            }
            return;
        }
        let edges: Vec<&CausalEdge> = g
            .incoming(w.id)
            .filter(|e| e.kind != EdgeKind::ThreadOrder)
            .collect();
        let prompt = self.wake_prompt(self.words().ask_irq_cause(w), &edges);
        match self.choose("irq", w, prompt, edges) {
            Chosen::Edge(e2) => self.follow(e2, w, h0, depth + 1),
            Chosen::Stop => self.root(
                w,
                CauseClass::Interrupt,
                Finding::InterruptStopped { woke: woken.tid },
            ),
            Chosen::Nothing => {
                // An untraced timer interrupt ending the thread's own sleep: it slept.
                let slept = self.slept_before(woken);
                if let Some(p) = slept.filter(|_| !matches!(w.kind, SegmentKind::HardIrq { .. })) {
                    self.own_sleep(p, woken, h0, depth);
                    return;
                }
                let finding = Finding::Interrupt {
                    woke: woken.tid,
                    after_ns: h0.until(woken.start_ns),
                    device: matches!(w.kind, SegmentKind::HardIrq { .. }),
                };
                self.root(w, CauseClass::Interrupt, finding);
            }
        }
    }

    /// The segment before `woken` in its thread when it ended in a sleep or a timed-out wait
    /// right where `woken` starts: the wait a timer ended.
    pub(super) fn slept_before(&self, woken: &'g Segment) -> Option<&'g Segment> {
        self.g.prev_in_thread(woken.id).filter(|p| {
            p.end_ns == woken.start_ns
                && p.wait_start_ns.is_some()
                && (syscalls::is_sleep(p.wait_syscall) || p.wait_timed_out())
        })
    }

    /// `p` slept (its timer fired in an interrupt the trace does not explain) and then
    /// woke `woken`'s thread: it slept, unless the sleep began long after the window did, in
    /// which case what started it so late is followed.
    pub(super) fn own_sleep(
        &mut self,
        p: &'g Segment,
        woken: &'g Segment,
        h0: Nanos,
        depth: usize,
    ) {
        let g = self.g;
        let psys = sc(p.wait_syscall);
        if !self.visited.insert(p.id) {
            return;
        }
        self.push(
            p,
            Some(PathEdge {
                kind: PathEdgeKind::Edge(EdgeKind::ThreadOrder),
                strength: Strength::Weak,
                ts: p.wait_start_ns.unwrap_or(p.start_ns),
            }),
            Role::Cause,
            Step::Slept {
                syscall: psys.clone(),
                wait_ns: p.wait_ns(),
                untraced_timer: true,
            },
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
                    self.words()
                        .ask_late_sleep(p.tid, p.wait_ns(), p.start_ns, None),
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
            Finding::OwnTimer {
                syscall: psys,
                wait_ns: p.wait_ns(),
                slept: true,
            },
        );
    }

    /// The armer of a timer that woke `woken`. Armed by the woken thread itself: it slept.
    pub(super) fn timer_armer(
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
        let fired_after = te.ts.until(expiry.start_ns);
        if a.tid == woken.tid {
            let slept = if a.wait_start_ns.is_some() {
                a.wait_ns()
            } else {
                fired_after
            };
            let asys = sc(a.wait_syscall);
            let sleep = syscalls::is_sleep(a.wait_syscall) || a.wait_syscall < 0;
            if self.visited.insert(a.id) {
                self.push(
                    a,
                    Some(path_edge(te)),
                    Role::Cause,
                    Step::OwnTimer {
                        syscall: asys.clone(),
                        wait_ns: slept,
                        slept: sleep,
                    },
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
                        self.words()
                            .ask_late_sleep(a.tid, slept, te.ts, Some(h0.until(te.ts))),
                        &edges,
                    );
                    if let Chosen::Edge(e2) = self.choose("late-sleep", a, prompt, edges) {
                        self.follow(e2, a, h0, depth + 1);
                        return;
                    }
                }
            }
            let finding = Finding::OwnTimer {
                syscall: asys,
                wait_ns: slept,
                slept: sleep,
            };
            self.root(a, CauseClass::Sleep, finding);
            return;
        }
        if !self.visited.insert(a.id) {
            self.root(
                a,
                self.classify(a),
                Finding::CircularTimer { woke: woken.tid },
            );
            return;
        }
        self.push(
            a,
            Some(path_edge(te)),
            Role::Cause,
            Step::TimerArmedBy {
                syscall: src_syscall(te.src_syscall),
                before_ns: fired_after,
            },
        );
        let class = if a.tid.irq_cpu().is_some() {
            CauseClass::Interrupt
        } else {
            CauseClass::Timer
        };
        self.root(
            a,
            class,
            Finding::TimerArmed {
                woke: woken.tid,
                fired_after_ns: fired_after,
            },
        );
    }
}

/// Whether `next` continues `prev` in the same run of their thread: `prev` neither blocked nor
/// exited, and `next` starts where it ends (a heuristic split of the run).
fn split_from(prev: &Segment, next: &Segment) -> bool {
    prev.wait_start_ns.is_none() && prev.end_ns == next.start_ns && prev.end != EndCause::Exit
}
