//! The state machine of one task: its segments and the rules that cut them.

use super::callouts::{dispatch_id, Callout, DISPATCH_BEGIN, DISPATCH_END};
use super::config::{RulesConfig, SplitAt};
use super::key::Role;
use super::order::{PendingOrder, Stacks};
use super::output::{Counter, Dst, Output, Src};
use super::peers::{Mark, MsgOp, Peer, MAX_CONN_FDS, MAX_PEERS};
use super::spins::{run_spin, single_spin, LogicalRun, YieldRun};
use super::sysno::{is_lock_refused, is_retry_result, message_op, nrs};
use argus_schema::{
    syscalls, CausalEdge, Context, EdgeKind, EndCause, Event, EventKind, Nanos, Pid, Segment,
    SegmentId, SegmentKind, StartCause, Strength, Tid,
};
use serde::{Deserialize, Serialize};

const MAX_PENDING_SIGNALS: usize = 64;

/// State of one task.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadState {
    tid: Tid,
    pid: Pid,
    next_ord: u32,
    cur: Option<Segment>,
    /// The last closed segment while its wait's syscall has not returned.
    pending: Option<Segment>,
    /// The id of the last segment, for actions after exit.
    last_id: Option<SegmentId>,
    /// The kind of the segment before `cur`.
    prev_kind: SegmentKind,
    /// Start of the previous segment (a thread-order edge from it must not cross a gap).
    prev_start: Nanos,
    running_since: Option<Nanos>,
    blocked: bool,
    in_syscall: Option<i32>,
    in_arg0: u64,
    /// The second argument of the syscall in progress (a `poll` set's length).
    #[serde(default)]
    in_arg1: u64,
    /// Consecutive timed-out waits on one object being tracked as one logical wait.
    #[serde(default)]
    logical: Option<LogicalRun>,
    /// Whether the thread blocked since its last syscall entry.
    waited: bool,
    dead: bool,
    run: Option<YieldRun>,
    callouts: Vec<Callout>,
    /// Message peer set of the current segment.
    peers: Vec<Peer>,
    /// Whether the current segment has done a message operation yet.
    messaged: bool,
    /// The task whose wake-up started the current segment.
    woken_by: Option<Tid>,
    /// The task whose wake-up ended the readiness wait (`epoll_wait`, `poll`, `select`)
    /// that started the current segment, until its first message operation.
    #[serde(default)]
    ready_waker: Option<Tid>,
    /// Connections known to lead to one task: a send through them woke that task (most
    /// recent last, at most [`MAX_CONN_FDS`]).
    #[serde(default)]
    peer_tasks: Vec<(Peer, Tid)>,
    /// Descriptors known to be connections.
    conn_fds: Vec<u64>,
    msg: Option<MsgOp>,
    order: Option<PendingOrder>,
    /// Generated, not yet delivered signals: (signal, seq of the generation).
    signals: Vec<(i32, u64)>,
    /// `seq` of the entry of a read on a declared pipe in flight.
    pipe_read: Option<u64>,
    /// Whether the thread's latest file lock attempt was refused (a retry loop).
    #[serde(default)]
    lock_refused: bool,
    /// Whether a user stack now would be a segment-boundary stack: the thread's last event
    /// was a blocking switch-out or a syscall entry (stack events follow their event).
    #[serde(default)]
    stack_boundary: bool,
    /// Call stacks, once the thread has any (nothing is kept for a thread without).
    #[serde(default)]
    stacks: Option<Box<Stacks>>,
}

impl ThreadState {
    pub(super) fn new(tid: Tid) -> ThreadState {
        ThreadState {
            tid,
            pid: Pid(tid.0),
            next_ord: 0,
            cur: None,
            pending: None,
            last_id: None,
            prev_kind: SegmentKind::Task,
            prev_start: Nanos(0),
            running_since: None,
            blocked: false,
            in_syscall: None,
            in_arg0: 0,
            in_arg1: 0,
            logical: None,
            waited: false,
            dead: false,
            run: None,
            callouts: Vec::new(),
            peers: Vec::new(),
            messaged: false,
            woken_by: None,
            ready_waker: None,
            peer_tasks: Vec::new(),
            conn_fds: Vec::new(),
            msg: None,
            order: None,
            signals: Vec::new(),
            pipe_read: None,
            lock_refused: false,
            stack_boundary: false,
            stacks: None,
        }
    }

    fn open(&mut self, ts: Nanos, start: StartCause) -> SegmentId {
        let id = SegmentId::new(self.tid, self.next_ord);
        self.next_ord += 1;
        self.last_id = Some(id);
        self.peers.clear();
        self.messaged = false;
        self.woken_by = None;
        self.ready_waker = None;
        self.cur = Some(Segment::starting(
            id,
            self.pid,
            SegmentKind::Task,
            ts,
            start,
        ));
        id
    }

    /// Closes the current segment at `ts` for `why`; it becomes pending (awaiting the result
    /// of its wait) when it ended by a wake-up inside a syscall, final otherwise.
    fn close(&mut self, ts: Nanos, why: EndCause, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let Some(mut seg) = self.cur.take() else {
            return;
        };
        if let Some(since) = self.running_since {
            // Still on CPU (exit path, or a split): count the run up to now.
            seg.on_cpu_ns += since.until(ts);
            self.running_since = if why == EndCause::Exit {
                None
            } else {
                Some(ts)
            };
        }
        seg.end_ns = ts;
        seg.end = why;
        self.retire(seg, cfg, out);
    }

    /// A segment leaves `cur`: settle what depended on it being current.
    fn retire(&mut self, seg: Segment, cfg: &RulesConfig, out: &mut Vec<Output>) {
        self.prev_kind = seg.kind;
        self.prev_start = seg.start_ns;
        // A thread-order edge into it whose boost is undecided: the stack rule decides
        // (both end stacks are known now, if ever), else it stays weak.
        if let Some(o) = self.order.take() {
            match self.stacks.as_ref().and_then(|s| s.verdict()) {
                Some(true) => {
                    out.push(Output::Count(Counter::BoostedStacks));
                    out.push(Output::Edge(CausalEdge {
                        strength: Strength::Boosted,
                        ..o.edge
                    }));
                }
                Some(false) => out.push(Output::Count(Counter::PrunedStacks)),
                None => out.push(Output::Edge(o.edge)),
            }
        }
        if let Some(st) = self.stacks.as_mut() {
            st.prev = st.cur.take();
        }
        self.flush_pending(cfg, out);
        if seg.end == EndCause::Woken && seg.wait_syscall >= 0 {
            self.pending = Some(seg);
        } else {
            self.finish(seg, cfg, out);
        }
    }

    fn flush_pending(&mut self, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(p) = self.pending.take() {
            self.finish(p, cfg, out);
        }
    }

    /// A segment is final: emit it, its single-segment spin, and feed the logical-wait and
    /// yield-run trackers.
    fn finish(&mut self, seg: Segment, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(spin) = single_spin(&seg, seg.end_ns, false, cfg) {
            out.push(Output::Spin(spin));
        }
        if self.logical_wait(&seg, cfg, out) {
            out.push(Output::Segment(seg));
            return;
        }
        // A refused file lock attempt and the sleep after it is a turn of a retry loop,
        // however long the sleep.
        let short_timed = seg.wait_timed_out()
            && seg.end == EndCause::Woken
            && (seg.duration_ns() < cfg.spin_threshold_ns || self.lock_refused);
        if short_timed {
            let run = self.run.get_or_insert(YieldRun {
                first: seg.id,
                last: seg.id,
                start_ns: seg.start_ns,
                end_ns: seg.end_ns,
                on_cpu_ns: 0,
                wait_ns: 0,
                segments: 0,
                wait_syscall: seg.wait_syscall,
                retries: 0,
            });
            run.retries += u32::from(self.lock_refused);
            run.last = seg.id;
            run.end_ns = seg.end_ns;
            run.on_cpu_ns += seg.on_cpu_ns;
            run.wait_ns += seg.wait_ns();
            run.segments += 1;
            run.wait_syscall = seg.wait_syscall;
        } else if let Some(run) = self.run.take() {
            if let Some(spin) = run_spin(&run, self.tid, self.pid, false, cfg) {
                out.push(Output::Spin(spin));
            }
        }
        out.push(Output::Segment(seg));
    }

    /// Feeds the logical-wait tracker with a final segment; true when the segment's wait is
    /// part of a logical wait (then it is no yield-loop iteration: it waited on something).
    fn logical_wait(&mut self, seg: &Segment, cfg: &RulesConfig, out: &mut Vec<Output>) -> bool {
        let on_object = seg.end == EndCause::Woken
            && seg.wait_object.is_some()
            && !syscalls::is_sleep(seg.wait_syscall);
        let same = self.logical.as_ref().is_some_and(|r| r.of(seg));
        if !same {
            self.flush_logical(cfg, out);
        }
        if !on_object {
            return false;
        }
        let timed_out = seg.wait_timed_out();
        match self.logical.as_mut() {
            Some(run) => {
                run.add(seg);
                if timed_out {
                    run.timeouts += 1;
                } else {
                    // The first wake-up that is not a timeout ends it.
                    self.flush_logical(cfg, out);
                }
                true
            }
            None if timed_out => {
                let mut run = LogicalRun {
                    first: seg.id,
                    last: seg.id,
                    start_ns: seg.start_ns,
                    end_ns: seg.end_ns,
                    on_cpu_ns: 0,
                    wait_ns: 0,
                    segments: 0,
                    timeouts: 1,
                    wait_syscall: seg.wait_syscall,
                    object: seg.wait_object.unwrap_or_default(),
                };
                run.add(seg);
                self.logical = Some(run);
                true
            }
            None => false,
        }
    }

    fn flush_logical(&mut self, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(run) = self.logical.take() {
            if let Some(spin) = run.spin(self.tid, self.pid, run.end_ns, false, cfg) {
                out.push(Output::Spin(spin));
            }
        }
    }

    fn ensure_open(&mut self, ts: Nanos) {
        if self.cur.is_none() && !self.dead {
            self.open(ts, StartCause::FirstSeen);
        }
    }

    fn cur_id(&self) -> Option<SegmentId> {
        self.cur.as_ref().map(|c| c.id).or(self.last_id)
    }

    pub(super) fn on_event(
        &mut self,
        ev: &Event,
        role: Role,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        let ts = ev.ts;
        let boundary = std::mem::take(&mut self.stack_boundary);
        if ev.tid == self.tid && ev.pid.0 != 0 {
            self.pid = ev.pid;
            if let Some(c) = self.cur.as_mut() {
                c.pid = ev.pid;
            }
        }
        // A record the task wrote itself, in task context, means it is running: some kernels
        // do not trace the switch from a secondary CPU's idle task (RCU is not watching
        // there), so the switch-in is taken to be here when none was seen.
        let own = ev.tid == self.tid
            && ev.ctx == Context::Task
            && matches!(role, Role::Own | Role::Actor)
            && !matches!(ev.kind, EventKind::Stack { .. });
        if own && self.running_since.is_none() && !self.dead {
            self.switch_in(ts, cfg, out);
        }
        match role {
            Role::Target => self.on_target(ev, cfg, out),
            Role::SwitchIn => {
                if self.dead {
                    return;
                }
                self.switch_in(ts, cfg, out);
            }
            Role::SwitchOut => {
                if self.dead {
                    return;
                }
                self.ensure_open(ts);
                let EventKind::Switch { prev_state, .. } = ev.kind else {
                    return;
                };
                let syscall = self.in_syscall.unwrap_or(-1);
                let since = self.running_since.take();
                if let Some(c) = self.cur.as_mut() {
                    if let Some(since) = since {
                        c.on_cpu_ns += since.until(ts);
                    }
                    c.end_ns = ts;
                    c.events += 1;
                    if prev_state.is_blocking() && !matches!(prev_state.0, b'X' | b'Z') {
                        c.wait_start_ns = Some(ts);
                        c.wait_state = prev_state.0;
                        c.wait_syscall = syscall;
                        c.wait_object = self
                            .in_syscall
                            .and_then(|nr| syscalls::wait_object(nr, self.in_arg0, self.in_arg1));
                        self.blocked = true;
                        self.waited = true;
                        self.stack_boundary = true;
                    } else if !prev_state.is_blocking() {
                        c.preemptions += 1;
                    }
                }
            }
            Role::Actor => self.on_actor(ev, cfg, out),
            Role::SignalTarget => {
                if let EventKind::SignalGenerate { sig, .. } = ev.kind {
                    self.signals.retain(|(s, _)| *s != sig);
                    if self.signals.len() >= MAX_PENDING_SIGNALS {
                        self.signals.remove(0);
                    }
                    self.signals.push((sig, ev.seq));
                }
            }
            Role::Own => {
                if let EventKind::Stack { kernel, ips } = &ev.kind {
                    if *kernel {
                        // The user stack of the same sample follows.
                        self.stack_boundary = boundary;
                    } else if !self.dead {
                        self.user_stack(ips, boundary);
                    }
                }
                self.on_own(ev, cfg, out)
            }
            Role::Arm | Role::Fire => {}
        }
    }

    /// A user stack of the thread: it shapes the base, and taken at a boundary (`boundary`)
    /// it is where the current segment ended so far.
    fn user_stack(&mut self, ips: &[u64], boundary: bool) {
        let sites = ips.get(1..).unwrap_or(&[]);
        if sites.is_empty() {
            if boundary {
                if let Some(st) = self.stacks.as_mut() {
                    st.cur = None;
                }
            }
            return;
        }
        let st = self.stacks.get_or_insert_with(Box::default);
        let anchored = st.observe(sites);
        if boundary {
            st.cur = anchored.then(|| sites.into());
        }
    }

    /// The retry test found no retry: the edge is weak, unless the stack rule is still to
    /// decide it (when the segment it leads into ends).
    fn settle(&mut self, o: PendingOrder, out: &mut Vec<Output>) {
        if o.stacks {
            self.order = Some(PendingOrder { retry: None, ..o });
        } else {
            out.push(Output::Edge(o.edge));
        }
    }

    fn on_actor(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        self.ensure_open(ts);
        self.touch(ts);
        let Some(seg) = self.cur_id() else {
            return;
        };
        if cfg.cull_threads.contains(&self.tid) || self.callouts.last().is_some_and(|c| c.culled) {
            out.push(Output::Count(Counter::Culled));
            return;
        }
        let syscall = self.in_syscall.unwrap_or(-1);
        let src = Src {
            seq: ev.seq,
            seg,
            ts,
            syscall,
            // A work item acts for whoever queued it, as an interrupt handler does.
            interrupt: !self.callouts.is_empty(),
            exiting: self.dead,
            condvar: syscall == nrs().futex && cfg.user.is_condvar(self.pid, self.in_arg0),
        };
        match self.msg.as_mut() {
            Some(m) if !self.dead => {
                if let EventKind::Waking { target } = ev.kind {
                    if m.woke.len() < MAX_PEERS {
                        m.woke.push(target);
                    }
                }
                m.srcs.push(src);
            }
            _ => out.push(Output::Src(src)),
        }
    }

    /// The task takes a CPU at `ts` (a switch-in, seen or implied by its own record).
    fn switch_in(&mut self, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if self.blocked {
            self.blocked = false;
            if self.callouts.is_empty() {
                // The wake-up was not recorded (lost, or a path without sched_waking): the
                // wait ended when the task ran again, with no known cause.
                self.close(ts, EndCause::Woken, cfg, out);
                self.open(ts, StartCause::Woken);
                self.link_prev(ts, cfg, out);
            } else {
                self.resume_in_callout();
            }
        }
        self.ensure_open(ts);
        self.running_since = Some(ts);
        self.touch(ts);
    }

    fn touch(&mut self, ts: Nanos) {
        if let Some(c) = self.cur.as_mut() {
            c.end_ns = c.end_ns.max(ts);
            c.events += 1;
        }
    }

    /// A thread-order edge from the previous segment to the current one, unless pruned;
    /// weak, or pending a boost when the previous segment's wait has not returned yet.
    fn link_prev(&mut self, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let Some(cur) = self.cur.as_ref() else {
            return;
        };
        if cur.id.seq() == 0 {
            return;
        }
        if cfg.kernel_threads.contains(&self.tid)
            || matches!(cur.kind, SegmentKind::WorkItem { .. })
            || matches!(self.prev_kind, SegmentKind::WorkItem { .. })
            || cfg.crosses_gap(self.prev_start, ts)
        {
            out.push(Output::Count(Counter::PrunedOrder));
            return;
        }
        let edge = CausalEdge {
            src: SegmentId::new(self.tid, cur.id.seq() - 1),
            dst: cur.id,
            kind: EdgeKind::ThreadOrder,
            strength: Strength::Weak,
            ts,
            src_syscall: -1,
        };
        let stacks = self.stacks.as_ref().is_some_and(|s| s.prev.is_some());
        if self.pending.is_some() || stacks {
            self.order = Some(PendingOrder {
                edge,
                retry: None,
                stacks,
            });
        } else {
            out.push(Output::Edge(edge));
        }
    }

    /// Ends the current segment at `ts` because a boundary rule says so, and opens the next.
    fn split(&mut self, ts: Nanos, why: Counter, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if self.cur.is_none() {
            return;
        }
        out.push(Output::Count(why));
        self.close(ts, EndCause::HandlerDone, cfg, out);
        self.open(ts, StartCause::Woken);
    }

    /// A wait inside a callout ended: the segment goes on.
    fn resume_in_callout(&mut self) {
        if let Some(c) = self.cur.as_mut() {
            c.wait_start_ns = None;
            c.wait_state = 0;
            c.wait_syscall = -1;
        }
    }

    fn on_target(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        let culled = cfg.cull_threads.contains(&self.tid);
        let dst = |seg: SegmentId, kind: EdgeKind, wait: i32, waited: bool| {
            if culled {
                Output::Count(Counter::Culled)
            } else {
                Output::Dst(Dst {
                    seq: ev.seq,
                    seg,
                    kind,
                    wait,
                    paired: false,
                    waited,
                })
            }
        };
        match ev.kind {
            EventKind::Waking { .. } => {
                if self.dead {
                    return;
                }
                let waker = (ev.ctx == Context::Task && ev.tid.is_task()).then_some(ev.tid);
                if self.cur.is_none() {
                    let id = self.open(ts, StartCause::Woken);
                    out.push(dst(id, EdgeKind::Wakeup, -1, false));
                } else if self.blocked {
                    self.blocked = false;
                    let wait = self.cur.as_ref().map_or(-1, |c| c.wait_syscall);
                    if self.callouts.is_empty() {
                        self.close(ts, EndCause::Woken, cfg, out);
                        let id = self.open(ts, StartCause::Woken);
                        // The waker is a peer of the receive it ended (not of a readiness
                        // wait, which may report other connections first).
                        self.woken_by = waker.filter(|_| message_op(wait) == Some(false));
                        self.ready_waker = waker.filter(|_| syscalls::is_poll(wait));
                        self.link_prev(ts, cfg, out);
                        out.push(dst(id, EdgeKind::Wakeup, wait, true));
                    } else {
                        // callout_level > 0: the wait does not end the segment.
                        self.resume_in_callout();
                        if let Some(id) = self.cur.as_ref().map(|c| c.id) {
                            out.push(dst(id, EdgeKind::Wakeup, wait, false));
                        }
                    }
                }
            }
            EventKind::Fork { child_pid, .. }
                if self.cur.is_none() && !self.dead && self.next_ord == 0 =>
            {
                self.pid = child_pid;
                let id = self.open(ts, StartCause::Created);
                out.push(dst(id, EdgeKind::Fork, -1, false));
            }
            EventKind::WakeupNew { .. }
                if self.cur.is_none() && !self.dead && self.next_ord == 0 =>
            {
                let id = self.open(ts, StartCause::Created);
                out.push(dst(id, EdgeKind::Fork, -1, false));
            }
            _ => {}
        }
    }

    fn mark(&self, ts: Nanos) -> Option<Mark> {
        let c = self.cur.as_ref()?;
        Some(Mark {
            ts,
            events: c.events,
            syscalls: c.syscalls,
            seq_len: c.syscall_seq.len(),
            preemptions: c.preemptions,
            yields: c.yields,
            on_cpu_ns: c.on_cpu_ns,
            since: self.running_since,
            run_extra: self.running_since.map_or(0, |s| s.until(ts)),
        })
    }

    fn on_own(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        if let EventKind::FileLock { lock_type, ret, .. } = ev.kind {
            self.file_lock(ev, lock_type == 2, ret, out);
            return;
        }
        if self.dead {
            return;
        }
        self.ensure_open(ts);
        // Boundaries that fall *before* this record.
        match &ev.kind {
            EventKind::SysEnter { nr, .. } => {
                let nr = *nr;
                if self.user_split(cfg, |at| matches!(at, SplitAt::Syscall(s) if *s == nr)) {
                    self.split(ts, Counter::SplitUser, cfg, out);
                    self.link_prev(ts, cfg, out);
                }
                if let Some(o) = self.order.take() {
                    if o.retry == Some(nr) {
                        out.push(Output::Edge(CausalEdge {
                            strength: Strength::Boosted,
                            ..o.edge
                        }));
                    } else if o.retry.is_none() && self.pending.is_some() {
                        // The wait's result is not known yet (a syscall without exit
                        // record): keep waiting.
                        self.order = Some(o);
                    } else {
                        self.settle(o, out);
                    }
                }
            }
            EventKind::Marker { text }
                if self.user_split(
                    cfg,
                    |at| matches!(at, SplitAt::Marker(p) if text.starts_with(p.as_str())),
                ) =>
            {
                self.split(ts, Counter::SplitUser, cfg, out);
                self.link_prev(ts, cfg, out);
            }
            EventKind::WorkStart { work, function } => {
                self.start_callout(ev, *work, *function, true, cfg, out);
                return;
            }
            EventKind::WorkEnd { .. } => {
                self.end_callout(ts, cfg, out);
                return;
            }
            EventKind::Marker { text } if text.starts_with(DISPATCH_BEGIN) => {
                let function = dispatch_id(&text[DISPATCH_BEGIN.len()..]);
                self.start_callout(ev, 0, function, false, cfg, out);
                return;
            }
            EventKind::Marker { text } if text.starts_with(DISPATCH_END) => {
                // Only the callout it closes: a dispatch that began before the trace did
                // (or a kernel work item in progress) is left alone.
                let function = dispatch_id(&text[DISPATCH_END.len()..]);
                if self
                    .callouts
                    .last()
                    .is_some_and(|c| c.work == 0 && c.function == function)
                {
                    self.end_callout(ts, cfg, out);
                }
                return;
            }
            EventKind::SignalDeliver { sig } => {
                self.deliver_signal(ev, *sig, cfg, out);
                return;
            }
            _ => {}
        }
        let mark = match ev.kind {
            EventKind::SysEnter { nr, .. } if message_op(nr).is_some() => self.mark(ts),
            _ => None,
        };
        self.touch(ts);
        match ev.kind {
            EventKind::SysEnter { nr, args } => {
                self.in_syscall = Some(nr);
                self.in_arg0 = args[0];
                self.in_arg1 = args[1];
                self.waited = false;
                self.stack_boundary = true;
                self.pipe_read = None;
                if let Some(m) = self.msg.take() {
                    // The previous message syscall never returned (lost record).
                    self.flush_msg(m, out);
                }
                if let Some(c) = self.cur.as_mut() {
                    c.syscalls += 1;
                    if syscalls::is_yield(nr) {
                        c.yields += 1;
                    }
                    if c.syscall_seq.last() != Some(&nr)
                        && c.syscall_seq.len() < Segment::MAX_SYSCALLS
                    {
                        c.syscall_seq.push(nr);
                    }
                }
                if nr == nrs().close {
                    self.conn_fds.retain(|fd| *fd != args[0]);
                    // The number may come back as another connection: it no longer stands
                    // for this one in the peer set.
                    for p in self.peers.iter_mut().filter(|p| **p == Peer::Fd(args[0])) {
                        *p = Peer::Closed;
                    }
                    self.peer_tasks.retain(|(p, _)| *p != Peer::Fd(args[0]));
                }
                if let (Some(mark), Some(seg)) = (mark, self.cur.as_ref().map(|c| c.id)) {
                    let write = message_op(nr) == Some(true);
                    let (key, conn) = cfg.message_channel(self.pid, args[0], ts, write);
                    let mut op = MsgOp {
                        nr,
                        fd: args[0],
                        peer: conn.map_or(Peer::Fd(args[0]), Peer::Chan),
                        seg,
                        mark,
                        srcs: Vec::new(),
                        woke: Vec::new(),
                    };
                    if key.is_some() {
                        if write {
                            // The write is the action of a pipe data dependency.
                            op.srcs.push(Src {
                                seq: ev.seq,
                                seg,
                                ts,
                                syscall: nr,
                                interrupt: false,
                                exiting: false,
                                condvar: false,
                            });
                        } else {
                            self.pipe_read = Some(ev.seq);
                        }
                    }
                    self.msg = Some(op);
                }
            }
            EventKind::SysExit { nr, ret } => {
                self.in_syscall = None;
                if let Some(mut p) = self.pending.take() {
                    if p.wait_syscall == nr {
                        p.wait_ret = Some(ret);
                    }
                    if let Some(o) = self.order.as_mut() {
                        if p.wait_syscall == nr && is_retry_result(ret) {
                            o.retry = Some(nr);
                        } else if let Some(o) = self.order.take() {
                            self.settle(o, out);
                        }
                    }
                    self.finish(p, cfg, out);
                }
                if let Some(m) = self.msg.take() {
                    if m.nr == nr {
                        self.message_done(m, ret, cfg, out);
                    } else {
                        self.flush_msg(m, out);
                    }
                }
                if let Some(seq) = self.pipe_read.take() {
                    if ret > 0 && !self.waited {
                        // Data was there already: the reader depends on the last write.
                        if let Some(seg) = self.cur.as_ref().map(|c| c.id) {
                            out.push(Output::Dst(Dst {
                                seq,
                                seg,
                                kind: EdgeKind::Message,
                                wait: -1,
                                paired: true,
                                waited: false,
                            }));
                        }
                    }
                }
            }
            EventKind::FlagAccess { write: false, .. } => {
                // A read of a watched flag depends on the last write of another thread.
                if let Some(seg) = self.cur.as_ref().map(|c| c.id) {
                    out.push(Output::Dst(Dst {
                        seq: ev.seq,
                        seg,
                        kind: EdgeKind::Flag,
                        wait: -1,
                        paired: true,
                        waited: false,
                    }));
                }
            }
            EventKind::Exit => {
                if let Some(m) = self.msg.take() {
                    self.flush_msg(m, out);
                }
                self.close(ts, EndCause::Exit, cfg, out);
                self.flush_pending(cfg, out);
                self.flush_logical(cfg, out);
                if let Some(run) = self.run.take() {
                    if let Some(spin) = run_spin(&run, self.tid, self.pid, false, cfg) {
                        out.push(Output::Spin(spin));
                    }
                }
                self.dead = true;
                self.blocked = false;
                self.callouts.clear();
            }
            _ => {}
        }
    }

    /// A file lock operation (`lock_type` 2: a release) the kernel answered with `ret`: a
    /// granted lock or a release is the source of the lock-file pairs of its file; a refused
    /// attempt, or a lock granted after a refusal, their target ([`LockState`](super::LockState)). A release
    /// at exit (the files closed after the thread's exit record) acts from its last
    /// segment.
    fn file_lock(&mut self, ev: &Event, unlock: bool, ret: i32, out: &mut Vec<Output>) {
        let seg = if self.dead {
            self.last_id
        } else {
            self.ensure_open(ev.ts);
            self.cur.as_ref().map(|c| c.id)
        };
        let Some(seg) = seg else {
            return;
        };
        let target = if ret == 0 {
            out.push(Output::Src(Src {
                seq: ev.seq,
                seg,
                ts: ev.ts,
                syscall: self.in_syscall.unwrap_or(-1),
                interrupt: false,
                exiting: self.dead,
                condvar: false,
            }));
            !unlock && std::mem::take(&mut self.lock_refused)
        } else if is_lock_refused(i64::from(ret)) {
            self.lock_refused = true;
            true
        } else {
            false
        };
        if target {
            out.push(Output::Dst(Dst {
                seq: ev.seq,
                seg,
                kind: EdgeKind::LockFile,
                wait: -1,
                paired: true,
                waited: false,
            }));
        }
    }

    fn user_split(&self, cfg: &RulesConfig, at: impl Fn(&SplitAt) -> bool) -> bool {
        cfg.user
            .splits
            .iter()
            .any(|s| s.pid.is_none_or(|p| p == self.pid) && at(&s.at))
    }

    fn flush_msg(&mut self, m: MsgOp, out: &mut Vec<Output>) {
        out.extend(m.srcs.into_iter().map(Output::Src));
    }

    /// The message peer-set rule, when a message syscall returns.
    fn message_done(&mut self, m: MsgOp, ret: i64, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let mut peer: Vec<Peer> = vec![m.peer];
        peer.extend(m.woke.iter().map(|t| Peer::Task(*t)));
        let same = self.cur.as_ref().is_some_and(|c| c.id == m.seg);
        if same && !self.messaged {
            if let Some(w) = self.woken_by {
                peer.push(Peer::Task(w));
            }
        }
        let evidence = peer.iter().any(|p| matches!(p, Peer::Task(_)));
        let known = self.conn_fds.contains(&m.fd);
        if evidence && !known {
            if self.conn_fds.len() >= MAX_CONN_FDS {
                self.conn_fds.remove(0);
            }
            self.conn_fds.push(m.fd);
        }
        if ret > 0 {
            if let [t] = m.woke[..] {
                // This connection leads to `t` (most often known already, as the latest).
                if self.peer_tasks.last() != Some(&(m.peer, t)) {
                    self.peer_tasks.retain(|(p, _)| *p != m.peer);
                    if self.peer_tasks.len() >= MAX_CONN_FDS {
                        self.peer_tasks.remove(0);
                    }
                    self.peer_tasks.push((m.peer, t));
                }
            }
        }
        // A readiness wait woken by one task may return several ready connections and the
        // loop may serve another one first: when this first operation's connection is known
        // to lead to another task, the wake-up's part of the segment ends here (the waker's
        // own request is served further on, after a split of its own).
        let ready_other = same
            && !self.messaged
            && self
                .ready_waker
                .is_some_and(|w| self.peer_tasks.iter().any(|(p, t)| *p == m.peer && *t != w));
        let mut srcs = m.srcs;
        if ret > 0 && (evidence || known) {
            let disjoint = !self.peers.is_empty() && !peer.iter().any(|p| self.peers.contains(p));
            if same && (disjoint || ready_other) {
                let new = self.split_at_mark(&m.mark, m.nr, cfg, out);
                for s in srcs.iter_mut().filter(|s| s.seg == m.seg) {
                    s.seg = new;
                }
                self.peers = peer;
            } else {
                for p in peer {
                    if !self.peers.contains(&p) && self.peers.len() < MAX_PEERS {
                        self.peers.push(p);
                    }
                }
            }
            self.messaged = true;
        }
        out.extend(srcs.into_iter().map(Output::Src));
    }

    /// Splits the current segment at an earlier point (`mark`, the entry of the message
    /// syscall now returning): the part before is closed there, the rest becomes a new
    /// segment. Returns the new segment's id.
    fn split_at_mark(
        &mut self,
        mark: &Mark,
        nr: i32,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) -> SegmentId {
        out.push(Output::Count(Counter::SplitPeer));
        let Some(cur) = self.cur.take() else {
            return SegmentId::new(self.tid, self.next_ord);
        };
        let mut old = cur.clone();
        old.end_ns = mark.ts;
        old.end = EndCause::HandlerDone;
        old.events = mark.events;
        old.syscalls = mark.syscalls;
        old.syscall_seq.truncate(mark.seq_len);
        old.preemptions = mark.preemptions;
        old.yields = mark.yields;
        old.on_cpu_ns = mark.on_cpu_ns + mark.run_extra;
        self.retire(old, cfg, out);
        let id = self.open(mark.ts, StartCause::Woken);
        if let Some(c) = self.cur.as_mut() {
            c.end_ns = cur.end_ns;
            c.events = cur.events.saturating_sub(mark.events);
            c.syscalls = cur.syscalls.saturating_sub(mark.syscalls);
            let mut seq: Vec<i32> = cur.syscall_seq.get(mark.seq_len..).unwrap_or(&[]).to_vec();
            if seq.first() != Some(&nr) {
                seq.insert(0, nr);
                seq.truncate(Segment::MAX_SYSCALLS);
            }
            c.syscall_seq = seq;
            c.preemptions = cur.preemptions.saturating_sub(mark.preemptions);
            c.yields = cur.yields.saturating_sub(mark.yields);
            let same_run = mark.since.is_some() && self.running_since == mark.since;
            c.on_cpu_ns = cur.on_cpu_ns.saturating_sub(mark.on_cpu_ns);
            if !same_run {
                // The run that straddled the mark was already added to `cur`.
                c.on_cpu_ns = c.on_cpu_ns.saturating_sub(mark.run_extra);
            }
        }
        if mark.since.is_some() && self.running_since == mark.since {
            // The run in progress counts for the new segment from the split on.
            self.running_since = Some(mark.ts);
        }
        self.link_prev(mark.ts, cfg, out);
        id
    }

    fn start_callout(
        &mut self,
        ev: &Event,
        work: u64,
        function: u64,
        queued: bool,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        let ts = ev.ts;
        self.split(ts, Counter::SplitCallout, cfg, out);
        let culled = cfg.cull_functions.contains(&function);
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        c.kind = SegmentKind::WorkItem { work, function };
        c.events += 1;
        let id = c.id;
        self.link_prev(ts, cfg, out);
        self.callouts.push(Callout {
            work,
            function,
            culled,
            seg: id,
        });
        if !queued {
            return;
        }
        out.push(if culled {
            Output::Count(Counter::Culled)
        } else {
            Output::Dst(Dst {
                seq: ev.seq,
                seg: id,
                kind: EdgeKind::Queue,
                wait: -1,
                paired: true,
                waited: false,
            })
        });
    }

    fn end_callout(&mut self, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        self.touch(ts);
        self.callouts.pop();
        self.split(ts, Counter::SplitCallout, cfg, out);
        match self.callouts.last_mut() {
            Some(outer) => {
                // The outer item goes on: its parts are one piece of work.
                let prev = outer.seg;
                let kind = SegmentKind::WorkItem {
                    work: outer.work,
                    function: outer.function,
                };
                if let Some(c) = self.cur.as_mut() {
                    c.kind = kind;
                    outer.seg = c.id;
                    out.push(Output::Edge(CausalEdge {
                        src: prev,
                        dst: c.id,
                        kind: EdgeKind::ThreadOrder,
                        strength: Strength::Boosted,
                        ts,
                        src_syscall: -1,
                    }));
                }
                out.push(Output::Count(Counter::PrunedOrder));
            }
            None => self.link_prev(ts, cfg, out),
        }
    }

    fn deliver_signal(&mut self, ev: &Event, sig: i32, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        let fresh = self.cur.as_ref().is_some_and(|c| {
            c.start == StartCause::Woken && c.syscalls == 0 && c.start_ns == c.end_ns
        });
        if !fresh {
            self.split(ts, Counter::SplitSignal, cfg, out);
            self.link_prev(ts, cfg, out);
        }
        self.touch(ts);
        let gen = self
            .signals
            .iter()
            .position(|(s, _)| *s == sig)
            .map(|i| self.signals.remove(i).1);
        let Some(seg) = self.cur.as_ref().map(|c| c.id) else {
            return;
        };
        match gen {
            Some(seq) => out.push(Output::Dst(Dst {
                seq,
                seg,
                kind: EdgeKind::Signal,
                wait: -1,
                paired: false,
                waited: false,
            })),
            // Not generated for this thread: a process-directed signal generated for the
            // group leader, paired with its generation through [`Key::ProcSignal`](super::Key::ProcSignal).
            None if self.tid.0 != self.pid.0 => out.push(Output::Dst(Dst {
                seq: ev.seq,
                seg,
                kind: EdgeKind::Signal,
                wait: -1,
                paired: true,
                waited: false,
            })),
            None => {}
        }
    }

    /// The open tail, a pending segment, an undecided thread-order edge, endpoints of a
    /// message syscall in flight, and open spins.
    pub(super) fn mutable(&self, watermark: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(p) = &self.pending {
            // Its spin is reported once final; a long wait is still visible through the
            // segment itself.
            if let Some(spin) = single_spin(p, p.end_ns, false, cfg) {
                out.push(Output::Spin(spin));
            }
            out.push(Output::Segment(p.clone()));
        }
        if let Some(o) = &self.order {
            out.push(Output::Edge(o.edge.clone()));
        }
        if let Some(m) = &self.msg {
            out.extend(m.srcs.iter().cloned().map(Output::Src));
        }
        if let Some(c) = &self.cur {
            let mut seg = c.clone();
            if let Some(since) = self.running_since {
                seg.on_cpu_ns += since.until(seg.end_ns);
            }
            if watermark.0.saturating_sub(seg.start_ns.0) > cfg.spin_threshold_ns {
                if let Some(spin) = single_spin(&seg, watermark, true, cfg) {
                    out.push(Output::Spin(spin));
                }
            }
            out.push(Output::Segment(seg));
        }
        if let Some(run) = &self.run {
            if let Some(spin) = run_spin(run, self.tid, self.pid, true, cfg) {
                out.push(Output::Spin(spin));
            }
        }
        if let Some(run) = &self.logical {
            // Still going: through the open segment when it is blocked on the same object.
            let mut run = run.clone();
            if let Some(c) = self.cur.as_ref().filter(|c| c.wait_start_ns.is_some()) {
                if run.of(c) {
                    run.add(c);
                }
            }
            if watermark.0.saturating_sub(run.start_ns.0) > cfg.spin_threshold_ns {
                if let Some(spin) = run.spin(self.tid, self.pid, watermark, true, cfg) {
                    out.push(Output::Spin(spin));
                }
            }
        }
    }

    pub(super) fn spin_deadline(&self, cfg: &RulesConfig, from: Nanos) -> Option<Nanos> {
        let after = |t: Nanos| Nanos(t.0.saturating_add(cfg.spin_threshold_ns));
        let cur = self.cur.as_ref().map(|c| after(c.start_ns));
        let logical = self.logical.as_ref().map(|r| after(r.start_ns));
        cur.into_iter().chain(logical).filter(|d| *d >= from).min()
    }
}
