//! Yield loops (RepeatedYield): a thread polls a data flag or retries a lock. Decides who
//! held the lock or set the flag (graph edges, watchpoint hits, `argus:flag-set` markers, else
//! a guess the user confirms among the threads that ran) and why that thread was late.

use super::activity::Activity;
use super::phrases::sc;
use super::Walk;
use super::{at_least, ended_wait_of, path_edge, plus};
use crate::findings::{Finding, FlagEvidence, Step};
use crate::report::{CauseClass, Choice, PathEdge, PathEdgeKind, Role};
use argus_schema::{CausalEdge, EdgeKind, Nanos, Segment, Spin, Strength, Tid};

impl<'g> Walk<'g, '_> {
    /// A step back along the setter's (or holder's) own thread to the wait `b` it was
    /// blocked in for `ns` during the loop.
    fn push_blocked(&mut self, b: &'g Segment, ns: u64) -> usize {
        self.push(
            b,
            Some(PathEdge {
                kind: PathEdgeKind::Edge(EdgeKind::ThreadOrder),
                strength: Strength::Weak,
                ts: b.start_ns,
            }),
            Role::Cause,
            Step::Blocked {
                syscall: sc(b.wait_syscall),
                blocked_ns: ns,
            },
        )
    }

    pub(super) fn repeated_yield_hang(&mut self, spin: &Spin, first: &'g Segment, h1: Nanos) {
        let g = self.g;
        let h0 = spin.start_ns;
        let window = h0.until(h1);
        let sys = sc(spin.wait_syscall);
        self.push(
            first,
            None,
            Role::Hang,
            Step::HangPoll {
                loop_ns: window,
                waits: spin.segments,
                syscall: sys.clone(),
                on_cpu_ns: spin.on_cpu_ns,
            },
        );
        if let Some(e) = self.lock_holder(spin, first) {
            self.explain_holder(first.tid, e, self.hang_start, h1, Role::Setter, 0);
            return;
        }
        if let Some((ws, at, how)) = self.flag_setter(spin, first, h1) {
            self.explain_setter(first, ws, at, how);
            return;
        }
        let advice = self.words().advice_untraced_flag(first.tid);
        self.advice.push(advice);

        // Candidate setters: the other threads of the process, and whoever woke the thread
        // right after the loop ended.
        let mut woke_after: Vec<Tid> = Vec::new();
        let last = g.segment(spin.last).unwrap_or(first);
        if let Some(next) = g.next_in_thread(last.id) {
            for e in g.incoming(next.id).filter(|e| ended_wait_of(e, next)) {
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
        if cands.is_empty() {
            self.root(
                first,
                CauseClass::RepeatedYield,
                Finding::PollNoSetter {
                    waits: spin.segments,
                    syscall: sys,
                    loop_ns: window,
                },
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
                kind: EdgeKind::Flag.name().to_string(),
                strength: Strength::Weak,
                ts: seg.start_ns,
                description: self.words().choice_setter(*tid, &self.during(act, h0, h1)),
                stack: g.blocking_stack(seg),
            });
        }
        if segs.is_empty() {
            return;
        }
        let prompt = self
            .words()
            .ask_setter(first.tid, spin.class.name(), &sys, window);
        let Some(i) = self.ask("flag", first, prompt, choices, 0) else {
            self.root(
                first,
                CauseClass::RepeatedYield,
                Finding::PollStopped {
                    waits: spin.segments,
                    syscall: sys,
                    loop_ns: window,
                },
            );
            return;
        };
        let Some((_, act)) = cands
            .iter()
            .find(|(_, a)| a.busiest.or(a.at_start).map(|s| s.id) == Some(segs[i].id))
        else {
            return;
        };
        let seg = segs[i];
        let during = self.during(act, h0, h1);
        self.visited.insert(seg.id);
        self.push(
            seg,
            Some(PathEdge {
                kind: PathEdgeKind::Edge(EdgeKind::Flag),
                strength: Strength::Weak,
                ts: seg.start_ns,
            }),
            Role::Setter,
            Step::LikelySetter {
                during: during.clone(),
            },
        );
        if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
            self.root(
                seg,
                CauseClass::LongRunning,
                Finding::LikelySetterBusy {
                    poller: first.tid,
                    on_cpu_ns: act.on_cpu_ns,
                    loop_ns: window,
                },
            );
            self.context(seg);
        } else if let Some((b, ns)) = act
            .longest_block
            .filter(|(_, ns)| at_least(*ns, window, self.cfg.busy_fraction))
        {
            if b.id != seg.id {
                self.visited.insert(b.id);
                self.push_blocked(b, ns);
            }
            self.root(
                b,
                self.classify(b),
                Finding::LikelySetterBlocked {
                    poller: first.tid,
                    syscall: sc(b.wait_syscall),
                    blocked_ns: ns,
                },
            );
            self.explain_wait(b, 1);
        } else {
            self.root(
                seg,
                self.classify(seg),
                Finding::LikelySetter {
                    poller: first.tid,
                    during,
                },
            );
        }
    }

    /// Data-flag evidence for a polling loop `[h0, h1]` of `tid`: a flag edge into the loop,
    /// a watchpoint write read by the loop, or an `argus:flag-set` marker of another thread.
    /// Returns the setter's segment, the time it set the flag and how it is known.
    pub(super) fn flag_setter(
        &self,
        spin: &Spin,
        first: &'g Segment,
        h1: Nanos,
    ) -> Option<(&'g Segment, Nanos, FlagEvidence)> {
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
                let how = FlagEvidence::GraphEdge {
                    strength: e.strength,
                    watchpoint: hit.map(|f| f.addr),
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
                return Some((seg, w.ts, FlagEvidence::Watchpoint { addr: w.addr }));
            }
        }
        // 3. An application marker saying the flag was set.
        if let Some(m) = app
            .markers
            .iter()
            .filter(|m| {
                m.text.starts_with(argus_schema::markers::FLAG_SET)
                    && m.tid != tid
                    && m.ts >= h0
                    && m.ts <= late
            })
            .max_by_key(|m| m.ts)
        {
            if let Some(seg) = g.segment_at(m.tid, m.ts) {
                return Some((
                    seg,
                    m.ts,
                    FlagEvidence::Marker {
                        text: m.text.clone(),
                    },
                ));
            }
        }
        None
    }

    /// The lock a polling loop retries (lock-file edges of the graph into the loop's
    /// segments or the one after it): the edge from its release (into the segment after the
    /// loop, which got the lock), else from the latest lock of its holder that an attempt ran
    /// into.
    pub(super) fn lock_holder(&self, spin: &Spin, first: &'g Segment) -> Option<&'g CausalEdge> {
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

    /// `waiter` wanted a lock `e` says who held (a file lock a polling loop retries, a
    /// lock a wait nobody ended was blocked on): why did the holder hold it through the
    /// window `[h0, h1)`? Its thread's window: busy on CPU, or blocked in a wait (followed
    /// recursively: an owner waiting for another owner, a chain), or neither. A holder
    /// already on the path closes a circle: a deadlock.
    pub(super) fn explain_holder(
        &mut self,
        waiter: Tid,
        e: &'g CausalEdge,
        h0: Nanos,
        h1: Nanos,
        role: Role,
        depth: usize,
    ) {
        let g = self.g;
        let Some(ws) = g.segment(e.src) else {
            return;
        };
        let window = h0.until(h1);
        let poller = waiter;
        let step = Step::LockHolder {
            poller,
            at: e.ts,
            strength: e.strength,
        };
        if !self.visited.insert(ws.id) {
            self.push(ws, Some(path_edge(e)), role, step);
            self.root(ws, self.classify(ws), Finding::Circular);
            return;
        }
        self.push(ws, Some(path_edge(e)), role, step);
        let act = self.activity(ws.tid, h0, h1);
        if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
            let busy = act.busiest.unwrap_or(ws);
            self.root(
                busy,
                CauseClass::LongRunning,
                Finding::LockHolderBusy {
                    poller,
                    on_cpu_ns: act.on_cpu_ns,
                    loop_ns: window,
                },
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
                    self.push_blocked(b, ns);
                }
                self.root(
                    b,
                    self.classify(b),
                    Finding::LockHolderBlocked {
                        poller,
                        syscall: sc(b.wait_syscall),
                        blocked_ns: ns,
                    },
                );
                self.explain_wait(b, depth + 1);
            }
            None => self.root(
                ws,
                self.classify(ws),
                Finding::LockHolder {
                    poller,
                    during: self.during(&act, h0, h1),
                },
            ),
        }
    }

    /// The loop's flag setter is known: explain why it set the flag so late.
    pub(super) fn explain_setter(
        &mut self,
        first: &'g Segment,
        ws: &'g Segment,
        at: Nanos,
        evidence: FlagEvidence,
    ) {
        let g = self.g;
        let h0 = self.hang_start;
        let poller = first.tid;
        self.visited.insert(ws.id);
        self.push(
            ws,
            Some(PathEdge {
                kind: PathEdgeKind::Edge(EdgeKind::Flag),
                strength: Strength::Strong,
                ts: at,
            }),
            Role::Setter,
            Step::FlagSet { at, evidence },
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
                Finding::FlagSetRunning {
                    poller,
                    after_ns: window,
                    on_cpu_ns: act.on_cpu_ns,
                },
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
                    Finding::FlagSetAfterWait {
                        poller,
                        syscall: psys.clone(),
                        wait_ns: p.wait_ns(),
                    },
                );
                self.visited.insert(p.id);
                self.push_blocked(p, p.wait_ns());
                let prompt = self.words().ask_recurse_setter(p.tid, &psys, p.wait_ns());
                if self.confirm(p, prompt) {
                    self.explain_wait(p, 1);
                }
            }
            None => self.root(
                ws,
                self.classify(ws),
                Finding::FlagSetLate {
                    poller,
                    started: ws.start_ns,
                },
            ),
        }
    }
}
