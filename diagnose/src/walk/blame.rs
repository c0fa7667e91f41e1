//! Blame over the window: charges every instant of the hang to the thread that held it, back
//! along the chain of wake-ups (a critical path through the event graph), and makes the
//! thread holding the largest share the root cause.
//!
//! ```text
//!  charge(T, segment s, [lo, t])      walking T's history back from t
//!    t in s's wait  ── ended by e ──► charge(src of e, [max(lo, wait start), e.ts])
//!                   ── a sleep, a timeout, its own timer ──► T: timer
//!                   ── an interrupt nothing raised ──► the interrupt: device
//!                   ── nobody (open, untraced) ──► the thread the walk named for it
//!                                                  (baseline, lock holder, setter), else
//!                                                  T: blocked
//!    t in s's run   ──► T: on CPU / runnable, split by s's on-CPU fraction
//!    before T's first segment ── created ──► charge(creator, [lo, fork]) ; else T: blocked
//! ```
//!
//! Where a wait was ended by several edges, the one whose source is on the walk's path is
//! taken (the walk asked, or chose by beam search), else the strongest, most recent one (a
//! task's message over the interrupt that delivered it). A budget of pieces bounds the work
//! on a busy window; what is left over is charged as blocked to the thread reached.

use super::{ended_wait_of, specific, Walk};
use crate::blame::{Blame, BlameContributor, BlameState, BlameStep, BlameTimes};
use crate::findings::Finding;
use crate::logical;
use crate::report::{CauseClass, Role};
use argus_schema::{
    syscalls, CausalEdge, EdgeKind, EndCause, Nanos, Segment, SegmentId, SegmentKind, Spin,
    SpinClass, StartCause, Strength, Tid,
};
use std::collections::{HashMap, HashSet};

/// Most pieces charged for one hang before the rest is charged as blocked.
const BUDGET: usize = 200_000;
/// Deepest chain of threads followed.
const MAX_HOPS: usize = 256;
/// Steps covering less than this share of the window are left out of the report.
const STEP_SHARE: f64 = 0.01;

/// One thread's part of the blame, while charging.
#[derive(Default)]
struct Part {
    time: BlameTimes,
    waiting_ns: u64,
    waiting_on: HashMap<Tid, u64>,
    /// Own time per segment: the contributor's segment is the largest.
    by_segment: HashMap<SegmentId, (u64, BlameTimes)>,
    from: Option<Nanos>,
    to: Option<Nanos>,
    /// The thread it was charged for (waited on by): the first one.
    for_tid: Option<Tid>,
}

impl Part {
    fn span(&mut self, lo: Nanos, hi: Nanos) {
        self.from = Some(self.from.map_or(lo, |f| f.min(lo)));
        self.to = Some(self.to.map_or(hi, |t| t.max(hi)));
    }
}

struct Charges {
    parts: HashMap<Tid, Part>,
    order: Vec<Tid>,
    budget: usize,
}

impl Charges {
    fn part(&mut self, tid: Tid) -> &mut Part {
        if !self.parts.contains_key(&tid) {
            self.order.push(tid);
        }
        self.parts.entry(tid).or_default()
    }

    /// Charges `[lo, hi)` to `s`'s thread in `state`.
    fn leaf(&mut self, s: &Segment, state: BlameState, lo: Nanos, hi: Nanos) {
        self.leaf_in(s.tid, s.id, state, lo, hi);
    }

    /// Charges `[lo, hi)` to thread `tid`, in its segment `seg`, in `state`.
    fn leaf_in(&mut self, tid: Tid, seg: SegmentId, state: BlameState, lo: Nanos, hi: Nanos) {
        let ns = lo.until(hi);
        if ns == 0 {
            return;
        }
        let p = self.part(tid);
        p.time.add(state, ns);
        p.span(lo, hi);
        let e = p.by_segment.entry(seg).or_default();
        e.0 += ns;
        e.1.add(state, ns);
    }

    /// Records that `waiter` waited for `on` through `[lo, hi)` (charged to `on`).
    fn waited(&mut self, waiter: Tid, on: Tid, lo: Nanos, hi: Nanos) {
        let ns = lo.until(hi);
        if ns == 0 || waiter == on {
            return;
        }
        let p = self.part(waiter);
        p.waiting_ns += ns;
        *p.waiting_on.entry(on).or_default() += ns;
        p.span(lo, hi);
        let q = self.part(on);
        q.for_tid.get_or_insert(waiter);
    }

    /// Takes one piece of the budget; `false` when it is spent.
    fn spend(&mut self) -> bool {
        if self.budget == 0 {
            return false;
        }
        self.budget -= 1;
        true
    }
}

impl<'g> Walk<'g, '_> {
    /// The blame of the hang `spin` over `[start, end)`, and the root cause it names made the
    /// last of `root_causes`.
    pub(super) fn blame(&mut self, spin: &Spin, end: Nanos) -> Blame {
        let g = self.g;
        let window = spin.start_ns.until(end);
        let mut ch = Charges {
            parts: HashMap::new(),
            order: Vec::new(),
            budget: BUDGET,
        };
        let on_path: HashSet<SegmentId> = self
            .path
            .iter()
            .filter(|p| matches!(p.role, Role::Hang | Role::Cause))
            .map(|p| p.segment)
            .collect();
        let last = g.segment(spin.last).or_else(|| g.segment(spin.segment));
        if let Some(last) = last {
            // A polling loop waits for the setter (or lock holder) the walk named.
            let sub = (spin.class == SpinClass::RepeatedYield)
                .then(|| self.named_for(spin.tid))
                .flatten();
            match sub {
                Some(sub) => {
                    ch.part(spin.tid);
                    ch.waited(spin.tid, sub, spin.start_ns, end);
                    self.charge_at(&mut ch, &on_path, sub, spin.start_ns, end, 1);
                }
                None => self.charge(&mut ch, &on_path, last, spin.start_ns, end, 0),
            }
        }
        let blame = self.summarize(&ch, window);
        if let Some(top) = blame.contributors.first() {
            self.promote(top, &ch);
        }
        blame
    }

    fn summarize(&self, ch: &Charges, window: u64) -> Blame {
        let g = self.g;
        let share = |ns: u64| {
            if window == 0 {
                0.0
            } else {
                ns as f64 / window as f64
            }
        };
        let min_share = self.cfg.blame_min_share;
        let mut contributors: Vec<BlameContributor> = ch
            .order
            .iter()
            .filter_map(|tid| {
                let p = &ch.parts[tid];
                let ns = p.time.total();
                let (seg, _) = p.by_segment.iter().max_by_key(|(id, (n, _))| (*n, **id))?;
                Some(BlameContributor {
                    tid: *tid,
                    pid: g.pid_of(*tid).unwrap_or(argus_schema::Pid(tid.0)),
                    comm: g.comm(*tid),
                    process: g.process_name(*tid),
                    segment: *seg,
                    segment_label: seg.to_string(),
                    ns,
                    share: share(ns),
                    state: p.time.main_state(),
                    time: p.time,
                })
            })
            .filter(|c| c.ns > 0)
            .collect();
        contributors.sort_by_key(|c| (std::cmp::Reverse(c.ns), c.tid));
        // The largest share is the root cause even below the listing threshold.
        let keep = contributors
            .iter()
            .enumerate()
            .filter(|(i, c)| *i == 0 || c.share >= min_share)
            .count();
        contributors.truncate(keep);
        let steps = ch
            .order
            .iter()
            .filter_map(|tid| {
                let p = &ch.parts[tid];
                let covered = p.time.total() + p.waiting_ns;
                let mut on: Vec<(Tid, u64)> = p.waiting_on.iter().map(|(t, n)| (*t, *n)).collect();
                on.sort_by_key(|(t, n)| (std::cmp::Reverse(*n), *t));
                (share(covered) >= STEP_SHARE).then(|| BlameStep {
                    tid: *tid,
                    comm: g.comm(*tid),
                    from_ns: p.from.unwrap_or_default(),
                    to_ns: p.to.unwrap_or_default(),
                    covered_ns: covered,
                    share: share(covered),
                    time: p.time,
                    waiting_ns: p.waiting_ns,
                    waiting_on: on.into_iter().map(|(t, _)| t).collect(),
                })
            })
            .collect();
        Blame {
            window_ns: window,
            contributors,
            steps,
            min_share,
        }
    }

    /// Makes `top` the root cause (the last of `root_causes`): the walk's own finding about
    /// its thread when it has one, else one made from what blame found.
    fn promote(&mut self, top: &BlameContributor, ch: &Charges) {
        if let Some(i) = self.root_causes.iter().rposition(|r| r.tid == top.tid) {
            let r = self.root_causes.remove(i);
            self.root_causes.push(r);
            return;
        }
        let g = self.g;
        let Some(s) = g.segment(top.segment) else {
            return;
        };
        let part = &ch.parts[&top.tid];
        let woke = part.for_tid;
        let t = top.time;
        let seg_time = part.by_segment.get(&s.id).map(|(_, t)| *t).unwrap_or(t);
        let sys = super::phrases::sc(s.wait_syscall);
        let (class, finding) = match top.state {
            BlameState::OnCpu => (
                CauseClass::LongRunning,
                Finding::Busy {
                    on_cpu_ns: t.on_cpu_ns,
                    run_ns: t.on_cpu_ns + t.runnable_ns,
                    woke,
                    through_brief_waits: false,
                    still_running: s.end == EndCause::Open && s.wait_start_ns.is_none(),
                },
            ),
            BlameState::Runnable => (
                CauseClass::LongRunning,
                Finding::Starved {
                    on_cpu_ns: t.on_cpu_ns,
                    run_ns: t.on_cpu_ns + t.runnable_ns,
                    preemptions: s.preemptions,
                    woke,
                    still_running: s.end == EndCause::Open && s.wait_start_ns.is_none(),
                    lost_ns: g.lost_within(s.start_ns, g.end_of(s)),
                },
            ),
            BlameState::Timer if s.tid.is_task() && s.wait_start_ns.is_some() => (
                CauseClass::Sleep,
                Finding::OwnTimer {
                    syscall: sys,
                    wait_ns: seg_time.timer_ns.max(s.wait_ns()),
                    slept: syscalls::is_sleep(s.wait_syscall),
                },
            ),
            BlameState::Timer => (
                CauseClass::Timer,
                Finding::TimerArmed {
                    woke: woke.unwrap_or(self.window_tid()),
                    fired_after_ns: t.timer_ns,
                },
            ),
            BlameState::Device => (
                CauseClass::Interrupt,
                Finding::Interrupt {
                    woke: woke.unwrap_or(self.window_tid()),
                    after_ns: t.device_ns,
                    device: true,
                },
            ),
            BlameState::Blocked if s.end == EndCause::Woken => (
                CauseClass::LongWait,
                Finding::WakeUntraced {
                    syscall: sys,
                    wait_ns: s.wait_ns(),
                    ended_at: s.end_ns,
                },
            ),
            BlameState::Blocked => (
                CauseClass::LongWait,
                Finding::NeverWoken {
                    syscall: sys,
                    wait_ns: s.wait_ns(),
                    exited: s.end == EndCause::Exit,
                },
            ),
        };
        self.root(s, class, finding);
    }

    /// The hung thread.
    fn window_tid(&self) -> Tid {
        self.path.first().map_or(Tid(0), |p| p.tid)
    }

    /// The thread the walk named as what `waiter` waited for without a wake-up edge saying
    /// so: a baseline's abnormal thread, a lock's holder, a flag's setter.
    fn named_for(&self, waiter: Tid) -> Option<Tid> {
        self.root_causes.iter().find_map(|r| {
            let w = match &r.finding {
                Finding::OnBaselinePath { waiter, .. } => *waiter,
                Finding::LikelySetterBusy { poller, .. }
                | Finding::LikelySetterBlocked { poller, .. }
                | Finding::LikelySetter { poller, .. }
                | Finding::LockHolderBusy { poller, .. }
                | Finding::LockHolderBlocked { poller, .. }
                | Finding::LockHolder { poller, .. }
                | Finding::FlagSetRunning { poller, .. }
                | Finding::FlagSetAfterWait { poller, .. }
                | Finding::FlagSetLate { poller, .. } => *poller,
                _ => return None,
            };
            (w == waiter && r.tid != waiter).then_some(r.tid)
        })
    }

    /// Charges `[lo, hi)` to `tid` from its segment at `hi` back.
    fn charge_at(
        &self,
        ch: &mut Charges,
        on_path: &HashSet<SegmentId>,
        tid: Tid,
        lo: Nanos,
        hi: Nanos,
        hops: usize,
    ) {
        let g = self.g;
        let at = Nanos(hi.0.saturating_sub(1));
        match g.segment_at(tid, at) {
            Some(s) => self.charge(ch, on_path, s, lo, hi, hops),
            None => ch.leaf_in(tid, SegmentId::new(tid, 0), BlameState::Blocked, lo, hi),
        }
    }

    /// Charges `[lo, hi)` to `s`'s thread, walking its history back from `hi` (at or before
    /// `s`'s end).
    fn charge(
        &self,
        ch: &mut Charges,
        on_path: &HashSet<SegmentId>,
        s: &'g Segment,
        lo: Nanos,
        hi: Nanos,
        hops: usize,
    ) {
        let g = self.g;
        let mut cur = s;
        let mut t = hi.min(g.end_of(s).max(s.start_ns));
        // Past the segment's end (the window reaches beyond what is known): blocked.
        ch.leaf(s, BlameState::Blocked, t.max(lo), hi);
        while t > lo {
            if !ch.spend() {
                ch.leaf(cur, BlameState::Blocked, lo, t);
                return;
            }
            if let Some(ws) = cur.wait_start_ns.filter(|ws| t > *ws) {
                // In the wait: a logical wait counts from its first wait.
                let l = logical::backward(g, cur);
                let w0 = l.first.wait_start_ns.unwrap_or(ws).min(ws);
                let from = lo.max(w0);
                self.charge_wait(ch, on_path, cur, w0, from, t, hops);
                t = from;
                cur = l.first;
                continue;
            }
            let run_end = cur.wait_start_ns.unwrap_or_else(|| g.end_of(cur));
            let from = lo.max(cur.start_ns);
            if t > from {
                let run = cur.start_ns.until(run_end).max(1);
                let ns = from.until(t);
                let on = ((cur.on_cpu_ns.min(run) as u128 * ns as u128) / run as u128) as u64;
                let mid = Nanos(from.0 + on);
                ch.leaf(cur, BlameState::OnCpu, from, mid);
                ch.leaf(cur, BlameState::Runnable, mid, t);
                t = from;
            }
            if t <= lo {
                return;
            }
            // A work item started once queued: before that, it is its queuer's.
            if let Some(q) = queued_by(g, cur).filter(|_| hops < MAX_HOPS) {
                let qa = q.ts.clamp(lo, t);
                if t > qa {
                    match g.prev_in_thread(cur.id) {
                        Some(p) => self.charge(ch, on_path, p, qa, t, hops),
                        None => ch.leaf(cur, BlameState::Runnable, qa, t),
                    }
                }
                if qa > lo {
                    if let Some(src) = g.segment(q.src) {
                        ch.waited(cur.tid, src.tid, lo, qa);
                        self.charge(ch, on_path, src, lo, qa, hops + 1);
                    } else {
                        ch.leaf(cur, BlameState::Blocked, lo, qa);
                    }
                }
                return;
            }
            match g.prev_in_thread(cur.id) {
                Some(p) => {
                    // A gap between segments: events lost, the thread's state unknown.
                    let pe = p.end_ns.min(t);
                    ch.leaf(cur, BlameState::Blocked, lo.max(pe), t);
                    t = t.min(lo.max(pe));
                    cur = p;
                }
                None => {
                    self.before_first(ch, on_path, cur, lo, t, hops);
                    return;
                }
            }
        }
    }

    /// `[lo, t)` before `first`, its thread's first segment: its creator's when the fork is
    /// traced, its waker's when a wake-up started it (the wait before is not traced).
    fn before_first(
        &self,
        ch: &mut Charges,
        on_path: &HashSet<SegmentId>,
        first: &'g Segment,
        lo: Nanos,
        t: Nanos,
        hops: usize,
    ) {
        let g = self.g;
        let fork = (first.start == StartCause::Created)
            .then(|| {
                g.incoming(first.id)
                    .filter(|e| e.kind == EdgeKind::Fork)
                    .max_by_key(|e| (e.ts, e.src))
            })
            .flatten();
        let parent = fork.and_then(|e| Some((e, g.segment(e.src)?)));
        match parent {
            Some((e, p)) if hops < MAX_HOPS && p.tid != first.tid => {
                let at = e.ts.min(t);
                // From the fork to its first run: the new thread waited for a CPU.
                ch.leaf(first, BlameState::Runnable, lo.max(at), t);
                if at > lo {
                    ch.waited(first.tid, p.tid, lo, at);
                    self.charge(ch, on_path, p, lo, at, hops + 1);
                }
            }
            _ => {
                let mut edges: Vec<&'g CausalEdge> = g
                    .incoming(first.id)
                    .filter(|e| ended_wait_of(e, first))
                    .collect();
                edges.extend(self.couriered(first, lo, &edges));
                match pick(&edges, on_path).filter(|_| hops < MAX_HOPS) {
                    Some(e) => self.charge_edge(ch, on_path, first, e, lo, t, hops),
                    None => ch.leaf(first, BlameState::Blocked, lo, t),
                }
            }
        }
    }

    /// Charges `[from, t)`, part of the wait that `last` ends (a logical wait from `w0`).
    #[allow(clippy::too_many_arguments)]
    fn charge_wait(
        &self,
        ch: &mut Charges,
        on_path: &HashSet<SegmentId>,
        last: &'g Segment,
        w0: Nanos,
        from: Nanos,
        t: Nanos,
        hops: usize,
    ) {
        let g = self.g;
        let tid = last.tid;
        if syscalls::is_sleep(last.wait_syscall) {
            ch.leaf(last, BlameState::Timer, from, t);
            return;
        }
        let next = match last.end {
            EndCause::Woken => g.next_in_thread(last.id),
            _ => None,
        };
        let Some(next) = next else {
            // Never woken: the lock's owner the kernel named, else the thread the walk named
            // for this wait, else the thread itself.
            if let Some(e) = self.lock_owner(last) {
                if let Some(src) = g.segment(e.src).filter(|_| hops < MAX_HOPS) {
                    ch.waited(tid, src.tid, from, t);
                    self.charge_at(ch, on_path, src.tid, from, t, hops + 1);
                    return;
                }
            }
            return self.charge_named(ch, on_path, last, BlameState::Blocked, from, t, hops);
        };
        if last.wait_timed_out() {
            if let Some(e) = self
                .sent_after_timeout(last, next, w0)
                .filter(|_| hops < MAX_HOPS)
            {
                return self.charge_edge(ch, on_path, last, e, from, t, hops);
            }
            return self.charge_named(ch, on_path, last, BlameState::Timer, from, t, hops);
        }
        let mut edges: Vec<&'g CausalEdge> = g
            .incoming(next.id)
            .filter(|e| ended_wait_of(e, next))
            .collect();
        edges.extend(self.couriered(next, w0, &edges));
        let chosen = self
            .owner_release(last, &edges)
            .or_else(|| pick(&edges, on_path));
        match chosen {
            Some(e) if hops < MAX_HOPS => self.charge_edge(ch, on_path, last, e, from, t, hops),
            _ => ch.leaf(last, BlameState::Blocked, from, t),
        }
    }

    /// A wait no edge explains: the thread the walk named for it, else `state` on its own.
    #[allow(clippy::too_many_arguments)]
    fn charge_named(
        &self,
        ch: &mut Charges,
        on_path: &HashSet<SegmentId>,
        last: &'g Segment,
        state: BlameState,
        from: Nanos,
        t: Nanos,
        hops: usize,
    ) {
        match self.named_for(last.tid).filter(|_| hops < MAX_HOPS) {
            Some(sub) => {
                ch.waited(last.tid, sub, from, t);
                self.charge_at(ch, on_path, sub, from, t, hops + 1);
            }
            None => ch.leaf(last, state, from, t),
        }
    }

    /// Charges `[from, t)` of `last`'s wait to the source of `e`, which ended it.
    #[allow(clippy::too_many_arguments)]
    fn charge_edge(
        &self,
        ch: &mut Charges,
        on_path: &HashSet<SegmentId>,
        last: &'g Segment,
        e: &'g CausalEdge,
        from: Nanos,
        t: Nanos,
        hops: usize,
    ) {
        let g = self.g;
        let Some(src) = g.segment(e.src) else {
            ch.leaf(last, BlameState::Blocked, from, t);
            return;
        };
        let at = e.ts.clamp(from, t);
        if src.tid.irq_cpu().is_some() {
            self.charge_irq(ch, on_path, last, src, from, t, hops);
            return;
        }
        // Between the cause and the end of the wait (data sent before the wake-up).
        ch.leaf(last, BlameState::Blocked, at, t);
        if at > from {
            ch.waited(last.tid, src.tid, from, at);
            self.charge(ch, on_path, src, from, at, hops + 1);
        }
    }

    /// Charges `[from, t)` of `last`'s wait, ended by interrupt segment `irq`: its armer's
    /// timer, what raised it, or the device.
    #[allow(clippy::too_many_arguments)]
    fn charge_irq(
        &self,
        ch: &mut Charges,
        on_path: &HashSet<SegmentId>,
        last: &'g Segment,
        irq: &'g Segment,
        from: Nanos,
        t: Nanos,
        hops: usize,
    ) {
        let g = self.g;
        if let SegmentKind::Timer { .. } = irq.kind {
            let armer = g
                .incoming(irq.id)
                .filter(|e| e.kind == EdgeKind::Timer)
                .max_by_key(|e| (e.ts, e.src))
                .and_then(|e| g.segment(e.src));
            match armer {
                Some(a) if a.tid != last.tid && a.tid.is_task() => {
                    ch.waited(last.tid, a.tid, from, t);
                    ch.leaf(a, BlameState::Timer, from, t);
                }
                _ => ch.leaf(last, BlameState::Timer, from, t),
            }
            return;
        }
        let causes: Vec<&'g CausalEdge> = g
            .incoming(irq.id)
            .filter(|e| e.kind != EdgeKind::ThreadOrder && e.ts <= irq.end_ns)
            .collect();
        // The delivery's own cause, when it has one in the graph; else the device is the leaf.
        let cause = pick(&causes, on_path)
            .filter(|_| hops < MAX_HOPS)
            .and_then(|e| Some((e.ts.clamp(from, t), g.segment(e.src)?)));
        let Some((at, src)) = cause else {
            ch.waited(last.tid, irq.tid, from, t);
            ch.leaf(irq, BlameState::Device, from, t);
            return;
        };
        ch.leaf(irq, BlameState::Device, at, t);
        if at > from {
            if src.tid.irq_cpu().is_some() {
                self.charge_irq(ch, on_path, last, src, from, at, hops + 1);
            } else {
                ch.waited(last.tid, src.tid, from, at);
                self.charge(ch, on_path, src, from, at, hops + 1);
            }
        }
    }
}

/// The edge to charge through among `edges`: one whose source is on the walk's path (the
/// latest), else the strongest and most recent, a task's over an interrupt's.
fn pick<'g>(edges: &[&'g CausalEdge], on_path: &HashSet<SegmentId>) -> Option<&'g CausalEdge> {
    if let Some(e) = edges
        .iter()
        .filter(|e| on_path.contains(&e.src))
        .max_by_key(|e| (e.ts, e.src))
    {
        return Some(e);
    }
    edges
        .iter()
        .max_by_key(|e| {
            (
                e.strength == Strength::Strong,
                e.src.tid().is_task(),
                e.ts,
                specific(e.kind),
                e.src,
            )
        })
        .copied()
}

/// The queue edge of work item `s` (its latest, should it be queued twice).
fn queued_by<'g>(g: &'g crate::graph::Graph, s: &Segment) -> Option<&'g CausalEdge> {
    if !matches!(s.kind, SegmentKind::WorkItem { .. }) {
        return None;
    }
    g.incoming(s.id)
        .filter(|e| e.kind == EdgeKind::Queue && e.ts <= s.start_ns)
        .max_by_key(|e| (e.ts, e.src))
}
