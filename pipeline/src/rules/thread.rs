//! The state machine of one task ([`ThreadState`]): the thread's life cycle (its first
//! record, its creation, its exit) and the blocking-wait boundary (ComputeGraph line 1.b: a
//! blocking `sched_switch` ends the segment, at the wake-up, unless the thread is inside a
//! callout), the wake-up and fork targets (line 2.a) and the actor side of every causal
//! event the thread does.
//!
//! The other rules that cut or link a thread's segments keep their own part of its state
//! and are called from here, in the order the events need:
//!
//! | rule | file | part of [`ThreadState`] |
//! |---|---|---|
//! | thread order, retries, call stacks | [`order`](super::order) | [`Order`] |
//! | callouts, user-space dispatch (1.c, 2.c) | [`callouts`](super::callouts) | [`Callouts`] |
//! | message peer set (1.d) | [`peers`](super::peers) | [`Peers`] |
//! | user-defined boundaries (1.e) | [`user`](super::user) | — |
//! | signals | [`signals`](super::signals) | [`Signals`] |
//! | data dependencies (2.b, 2.f) | [`data`](super::data) | [`Reads`] |
//! | lock file | [`lock`](super::lock) | [`Locking`] |
//! | spinning vertices | [`spins`](super::spins) | [`Spins`] |

use super::callouts::{self, dispatch_marker, Callouts, Dispatch};
use super::config::RulesConfig;
use super::data::{self, Reads};
use super::key::Role;
use super::lock::Locking;
use super::order::Order;
use super::output::{Counter, Dst, Output, Src};
use super::peers::{Mark, MsgOp, Peers};
use super::signals::{self, Signals};
use super::spins::{open_spin, past_threshold, single_spin, Spins};
use super::sysno::{is_retry_result, message_op, nrs};
use super::user;
use argus_schema::{
    syscalls, Context, EdgeKind, EndCause, Event, EventKind, Nanos, Pid, Segment, SegmentId,
    SegmentKind, StartCause, Tid,
};
use serde::{Deserialize, Serialize};

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
    running_since: Option<Nanos>,
    blocked: bool,
    in_syscall: Option<i32>,
    in_arg0: u64,
    /// The second argument of the syscall in progress (a `poll` set's length).
    #[serde(default)]
    in_arg1: u64,
    /// Whether the thread blocked since its last syscall entry.
    waited: bool,
    /// Whether an interrupt (not a task) ended its last wait since its last syscall entry:
    /// a socket's data delivered by the network softirq.
    #[serde(default)]
    woken_by_irq: bool,
    dead: bool,
    /// The thread-order edge into the current segment, and the thread's call stacks.
    order: Order,
    /// The work items and dispatches the thread is inside.
    callouts: Callouts,
    /// The message peer set of the current segment, and the message syscall in flight.
    peers: Peers,
    /// Generated, not yet delivered signals.
    signals: Signals,
    /// The channel read in flight.
    reads: Reads,
    /// Its file lock attempts.
    locks: Locking,
    /// The yield run and the logical wait in progress.
    spins: Spins,
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
            running_since: None,
            blocked: false,
            in_syscall: None,
            in_arg0: 0,
            in_arg1: 0,
            waited: false,
            woken_by_irq: false,
            dead: false,
            order: Order::default(),
            callouts: Callouts::default(),
            peers: Peers::default(),
            signals: Signals::default(),
            reads: Reads::default(),
            locks: Locking::default(),
            spins: Spins::default(),
        }
    }

    /// A fresh machine for `tid` whose segments are numbered from `next_ord`: the tid's
    /// earlier machine was forgotten (see [`KeyState::resume`](super::KeyState::resume)).
    /// It is a new thread in every other respect (a fork of it is still its creation).
    pub(super) fn resume(tid: Tid, next_ord: u32) -> ThreadState {
        ThreadState {
            next_ord,
            ..ThreadState::new(tid)
        }
    }

    /// The ordinal of the thread's next segment.
    pub(super) fn next_ordinal(&self) -> u32 {
        self.next_ord
    }

    /// Whether the machine may be forgotten when idle: once the thread has exited (see
    /// [`KeyState::forgettable`](super::KeyState::forgettable)).
    pub(super) fn forgettable(&self) -> bool {
        self.dead
    }

    fn open(&mut self, ts: Nanos, start: StartCause) -> SegmentId {
        let id = SegmentId::new(self.tid, self.next_ord);
        self.next_ord += 1;
        self.last_id = Some(id);
        self.peers.open();
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
        self.order.retire(&seg, out);
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
        self.spins
            .finish(&seg, self.tid, self.pid, self.locks.refused(), cfg, out);
        out.push(Output::Segment(seg));
    }

    fn ensure_open(&mut self, ts: Nanos) {
        if self.cur.is_none() && !self.dead {
            self.open(ts, StartCause::FirstSeen);
        }
    }

    fn cur_id(&self) -> Option<SegmentId> {
        self.cur.as_ref().map(|c| c.id).or(self.last_id)
    }

    /// The id of the open segment, if any.
    fn open_id(&self) -> Option<SegmentId> {
        self.cur.as_ref().map(|c| c.id)
    }

    pub(super) fn on_event(
        &mut self,
        ev: &Event,
        role: Role,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        let ts = ev.ts;
        let boundary = self.order.take_boundary();
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
            Role::SwitchOut => self.switch_out(ev),
            Role::Actor => self.on_actor(ev, cfg, out),
            Role::Holder => self.on_holder(ev, cfg, out),
            Role::SignalTarget => {
                if let EventKind::SignalGenerate { sig, .. } = ev.kind {
                    self.signals.generated(sig, ev.seq);
                }
            }
            Role::Own => {
                if let EventKind::Stack { kernel, ips } = &ev.kind {
                    if *kernel {
                        // The user stack of the same sample follows.
                        self.order.set_boundary(boundary);
                    } else if !self.dead {
                        self.order.user_stack(ips, boundary);
                    }
                }
                self.on_own(ev, cfg, out)
            }
            Role::Arm | Role::Fire => {}
        }
    }

    /// The task leaves the CPU (`ev`, a switch): a blocking switch starts the wait that will
    /// end the segment (line 1.b).
    fn switch_out(&mut self, ev: &Event) {
        if self.dead {
            return;
        }
        let ts = ev.ts;
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
                self.order.set_boundary(true);
            } else if !prev_state.is_blocking() {
                c.preemptions += 1;
            }
        }
    }

    fn on_actor(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        self.ensure_open(ts);
        self.touch(ts);
        let Some(seg) = self.cur_id() else {
            return;
        };
        if cfg.cull_threads.contains(&self.tid) || self.callouts.culled() {
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
            condvar: syscalls::class(syscall) == nrs().futex
                && cfg.user.is_condvar(self.pid, self.in_arg0),
        };
        // Inside a message syscall the endpoint waits for its return (peer-set rule).
        if self.dead {
            out.push(Output::Src(src));
        } else {
            self.peers.hold(ev, src, out);
        }
    }

    /// Another task blocks on a lock this one holds (the lock-owner rule): the source of the
    /// [`EdgeKind::LockOwner`] edge is the segment the owner is in (running, or blocked in
    /// a wait of its own), untouched: the owner did nothing at that moment. An owner not
    /// seen yet, or gone, has no segment to name.
    fn on_holder(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let Some(seg) = self.open_id() else {
            return;
        };
        if cfg.cull_threads.contains(&self.tid) || self.dead {
            return;
        }
        out.push(Output::Src(Src {
            seq: ev.seq,
            seg,
            ts: ev.ts,
            syscall: self.in_syscall.unwrap_or(-1),
            interrupt: false,
            exiting: false,
            condvar: false,
        }));
    }

    /// The task blocks on a lock held by `owner` (its own record, [`EventKind::LockOwner`]):
    /// the target of the lock-owner edge is the segment its wait will end. Routed to the
    /// owner only when it is another task ([`super::route`]).
    fn lock_wait(&mut self, ev: &Event, owner: Tid, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if self.dead || !owner.is_task() || owner == self.tid {
            return;
        }
        self.ensure_open(ev.ts);
        self.touch(ev.ts);
        let Some(seg) = self.open_id() else {
            return;
        };
        if cfg.cull_threads.contains(&self.tid) {
            out.push(Output::Count(Counter::Culled));
            return;
        }
        out.push(Output::Dst(Dst {
            seq: ev.seq,
            seg,
            kind: EdgeKind::LockOwner,
            wait: -1,
            paired: false,
            waited: false,
        }));
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

    /// A thread-order edge from the previous segment to the current one (the thread-order
    /// rule, [`Order::link`]).
    fn link_prev(&mut self, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let Some(cur) = self.cur.as_ref() else {
            return;
        };
        self.order
            .link(self.tid, cur, self.pending.is_some(), ts, cfg, out);
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
                        self.woken_by_irq = waker.is_none();
                        self.peers.woken(waker, wait);
                        self.link_prev(ts, cfg, out);
                        out.push(dst(id, EdgeKind::Wakeup, wait, true));
                    } else {
                        // callout_level > 0: the wait does not end the segment.
                        self.resume_in_callout();
                        if let Some(id) = self.open_id() {
                            out.push(dst(id, EdgeKind::Wakeup, wait, false));
                        }
                    }
                }
            }
            // A thread's creation: before its first segment (`last_id`, not `next_ord`: a
            // resumed machine numbers from where the forgotten one stopped).
            EventKind::Fork { child_pid, .. }
                if self.cur.is_none() && !self.dead && self.last_id.is_none() =>
            {
                self.pid = child_pid;
                let id = self.open(ts, StartCause::Created);
                out.push(dst(id, EdgeKind::Fork, -1, false));
            }
            EventKind::WakeupNew { .. }
                if self.cur.is_none() && !self.dead && self.last_id.is_none() =>
            {
                let id = self.open(ts, StartCause::Created);
                out.push(dst(id, EdgeKind::Fork, -1, false));
            }
            _ => {}
        }
    }

    /// The thread's own record: first the boundaries that fall *before* it (each rule that
    /// consumes the record whole returns here), then the record itself.
    fn on_own(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        match ev.kind {
            EventKind::FileLock { .. } => {
                self.file_lock(ev, out);
                return;
            }
            EventKind::SockReady { .. } => {
                self.sock_ready(ev, out);
                return;
            }
            EventKind::SockRecv { ret, .. } => {
                if ret > 0 && self.in_syscall.is_some() && !self.dead {
                    self.reads.sock_received(ev.seq);
                }
                return;
            }
            EventKind::LockOwner { owner, .. } => {
                self.lock_wait(ev, owner, cfg, out);
                return;
            }
            _ => {}
        }
        if self.dead {
            return;
        }
        self.ensure_open(ts);
        let consumed = match &ev.kind {
            EventKind::SysEnter { nr, .. } => {
                self.syscall_boundaries(*nr, ts, cfg, out);
                false
            }
            EventKind::Marker { text } if user::at_marker(cfg, self.pid, text) => {
                self.user_split(ts, cfg, out);
                false
            }
            EventKind::WorkStart { work, function } => {
                self.start_callout(ev, *work, *function, true, cfg, out);
                true
            }
            EventKind::WorkEnd { .. } => {
                self.end_callout(ts, cfg, out);
                true
            }
            EventKind::Marker { text } => self.dispatch(ev, text, cfg, out),
            EventKind::SignalDeliver { sig } => {
                self.deliver_signal(ev, *sig, cfg, out);
                true
            }
            _ => false,
        };
        if consumed {
            return;
        }
        let mark = match ev.kind {
            EventKind::SysEnter { nr, .. } if message_op(nr).is_some() => self
                .cur
                .as_ref()
                .map(|c| Mark::at(c, self.running_since, ts)),
            _ => None,
        };
        self.touch(ts);
        match ev.kind {
            EventKind::SysEnter { nr, args } => self.sys_enter(ev, nr, args, mark, cfg, out),
            EventKind::SysExit { nr, ret } => self.sys_exit(nr, ret, cfg, out),
            EventKind::FlagAccess { write: false, .. } => data::flag_read(ev, self.open_id(), out),
            EventKind::Exit => self.exit(ts, cfg, out),
            _ => {}
        }
    }

    /// The boundaries at a syscall entry: a user split, and the retry test of the
    /// thread-order edge into the current segment.
    fn syscall_boundaries(&mut self, nr: i32, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if user::at_syscall(cfg, self.pid, nr) {
            self.user_split(ts, cfg, out);
        }
        self.order.syscall(nr, self.pending.is_some(), out);
    }

    /// A user-defined boundary (line 1.e) at `ts`.
    fn user_split(&mut self, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        self.split(ts, Counter::SplitUser, cfg, out);
        self.link_prev(ts, cfg, out);
    }

    /// A marker that begins or ends a user-space dispatch; false for any other marker.
    fn dispatch(
        &mut self,
        ev: &Event,
        text: &str,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) -> bool {
        match dispatch_marker(text) {
            Some(Dispatch::Begin(function)) => {
                self.start_callout(ev, 0, function, false, cfg, out);
                true
            }
            Some(Dispatch::End(function)) => {
                // Only the callout it closes: a dispatch that began before the trace did
                // (or a kernel work item in progress) is left alone.
                if self.callouts.innermost_dispatch(function) {
                    self.end_callout(ev.ts, cfg, out);
                }
                true
            }
            None => false,
        }
    }

    /// Syscall `nr` entered (`ev`); `mark`: the segment's counters at its entry, for a
    /// message syscall.
    fn sys_enter(
        &mut self,
        ev: &Event,
        nr: i32,
        args: [u64; 6],
        mark: Option<Mark>,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        self.in_syscall = Some(nr);
        self.in_arg0 = args[0];
        self.in_arg1 = args[1];
        self.waited = false;
        self.woken_by_irq = false;
        self.order.set_boundary(true);
        self.reads.syscall();
        self.peers.syscall(nr, args[0], out);
        if let Some(c) = self.cur.as_mut() {
            c.syscalls += 1;
            if syscalls::is_yield(nr) {
                c.yields += 1;
            }
            if c.syscall_seq.last() != Some(&nr) && c.syscall_seq.len() < Segment::MAX_SYSCALLS {
                c.syscall_seq.push(nr);
            }
        }
        if let (Some(mark), Some(seg)) = (mark, self.open_id()) {
            let write = message_op(nr) == Some(true);
            let (key, conn) = cfg.message_channel(self.pid, args[0], ev.ts, write);
            let mut op = MsgOp::new(nr, args[0], conn, seg, mark);
            if key.is_some() {
                self.reads.transfer(ev, seg, nr, write, &mut op.srcs);
            }
            self.peers.begin(op);
        }
    }

    /// Syscall `nr` returned `ret`: the result of the wait that ended the pending segment
    /// (and of the retry test), the peer-set rule, a channel read.
    fn sys_exit(&mut self, nr: i32, ret: i64, cfg: &RulesConfig, out: &mut Vec<Output>) {
        self.in_syscall = None;
        if let Some(mut p) = self.pending.take() {
            if p.wait_syscall == nr {
                p.wait_ret = Some(ret);
            }
            self.order
                .wait_returned(nr, p.wait_syscall == nr && is_retry_result(ret), out);
            self.finish(p, cfg, out);
        }
        if let Some(m) = self.peers.take() {
            if m.nr == nr {
                self.message_done(m, ret, cfg, out);
            } else {
                m.flush(out);
            }
        }
        self.reads
            .returned(ret, self.waited, self.woken_by_irq, self.open_id(), out);
    }

    /// The thread exits: its last segment ends, and every run with it.
    fn exit(&mut self, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(m) = self.peers.take() {
            m.flush(out);
        }
        self.close(ts, EndCause::Exit, cfg, out);
        self.flush_pending(cfg, out);
        self.spins.exit(self.tid, self.pid, cfg, out);
        self.dead = true;
        self.blocked = false;
        self.callouts.clear();
    }

    /// Socket data queued in the thread's context (`ev`): the action of a data dependency
    /// when the thread is in a write (held back with it, like its other endpoints).
    fn sock_ready(&mut self, ev: &Event, out: &mut Vec<Output>) {
        let (Some(nr), Some(seg)) = (self.in_syscall, self.open_id()) else {
            return;
        };
        if self.dead || message_op(nr) != Some(true) {
            return;
        }
        self.peers.hold(ev, Reads::write_src(ev, seg, nr), out);
    }

    /// A file lock operation: a release at exit (the files closed after the thread's exit
    /// record) acts from its last segment ([`Locking::operation`]).
    fn file_lock(&mut self, ev: &Event, out: &mut Vec<Output>) {
        let seg = if self.dead {
            self.last_id
        } else {
            self.ensure_open(ev.ts);
            self.open_id()
        };
        let Some(seg) = seg else {
            return;
        };
        let syscall = self.in_syscall.unwrap_or(-1);
        self.locks.operation(ev, seg, syscall, self.dead, out);
    }

    /// The message peer-set rule, when a message syscall returns: split at its entry when
    /// [`Peers::returned`] says so.
    fn message_done(&mut self, mut m: MsgOp, ret: i64, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let same = self.cur.as_ref().is_some_and(|c| c.id == m.seg);
        if let Some(peer) = self.peers.returned(&m, ret, same) {
            let new = self.split_at_mark(&m.mark, m.nr, cfg, out);
            m.moved_to(new);
            self.peers.restart(peer);
        }
        m.flush(out);
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
        self.retire(mark.head(&cur), cfg, out);
        let id = self.open(mark.ts, StartCause::Woken);
        let same_run = mark.same_run(self.running_since);
        if let Some(c) = self.cur.as_mut() {
            mark.tail(&cur, nr, same_run, c);
        }
        if same_run {
            // The run in progress counts for the new segment from the split on.
            self.running_since = Some(mark.ts);
        }
        self.link_prev(mark.ts, cfg, out);
        id
    }

    /// A callout starts (`ev`): its own segment, linked to whoever queued it (`queued`: a
    /// kernel work item, not a user-space dispatch).
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
        let id = self.callouts.begin(c, work, function, culled);
        self.link_prev(ts, cfg, out);
        if queued {
            out.push(callouts::queued(ev, id, culled));
        }
    }

    /// The innermost callout ends at `ts`: the segment is split, and an outer callout goes
    /// on in the next one.
    fn end_callout(&mut self, ts: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        self.touch(ts);
        self.callouts.end();
        self.split(ts, Counter::SplitCallout, cfg, out);
        if !self.callouts.resume_outer(self.cur.as_mut(), ts, out) {
            self.link_prev(ts, cfg, out);
        }
    }

    /// Signal `sig` is delivered (`ev`): the handler starts a segment, the target of the
    /// signal's generation.
    fn deliver_signal(&mut self, ev: &Event, sig: i32, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        if signals::splits(self.cur.as_ref()) {
            self.split(ts, Counter::SplitSignal, cfg, out);
            self.link_prev(ts, cfg, out);
        }
        self.touch(ts);
        let seg = self.open_id();
        self.signals
            .delivered(ev, sig, seg, self.tid, self.pid, out);
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
        self.order.mutable(out);
        self.peers.mutable(out);
        if let Some(c) = &self.cur {
            let mut seg = c.clone();
            if let Some(since) = self.running_since {
                seg.on_cpu_ns += since.until(seg.end_ns);
            }
            if past_threshold(seg.start_ns, watermark, cfg) {
                out.extend(open_spin(&seg, cfg).map(Output::Spin));
            }
            out.push(Output::Segment(seg));
        }
        self.spins
            .mutable(self.cur.as_ref(), self.tid, self.pid, watermark, cfg, out);
    }

    pub(super) fn spin_deadline(&self, cfg: &RulesConfig, from: Nanos) -> Option<Nanos> {
        let after = |t: Nanos| Nanos(t.0.saturating_add(cfg.spin_threshold_ns));
        let cur = self.cur.as_ref().map(|c| after(c.start_ns));
        let logical = self.spins.logical_start().map(after);
        cur.into_iter().chain(logical).filter(|d| *d >= from).min()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{nr, outputs, segments, Trace};
    use super::super::Key;
    use super::*;
    use argus_schema::{CausalEdge, Strength};

    #[test]
    fn a_blocking_wait_ends_the_segment_at_the_wake_up() {
        let read = nr("read");
        let mut t = Trace::default();
        t.run(10);
        t.enter(10, read, 3);
        t.block(10);
        let wake = t.wake(20, 10);
        t.run(10);
        t.exit(10, read, 5);
        let out = outputs(&t.evs, Key::Thread(Tid(10)), &RulesConfig::default());
        let (s0, s1) = (SegmentId::new(Tid(10), 0), SegmentId::new(Tid(10), 1));
        let segs = segments(&out);
        assert_eq!(segs.len(), 2, "{out:#?}");
        // Run, then wait: the first segment ends in the read, final once it returned.
        assert_eq!((segs[0].id, segs[0].start), (s0, StartCause::FirstSeen));
        assert_eq!((segs[0].end, segs[0].wait_syscall), (EndCause::Woken, read));
        assert_eq!(segs[0].wait_ret, Some(5));
        // The wake-up starts the next one (the open tail).
        assert_eq!((segs[1].id, segs[1].start), (s1, StartCause::Woken));
        assert!(out.contains(&Output::Dst(Dst {
            seq: wake,
            seg: s1,
            kind: EdgeKind::Wakeup,
            wait: read,
            paired: false,
            waited: true,
        })));
        // Weak thread order, decided once the read returned (no retry).
        assert!(out.contains(&Output::Edge(CausalEdge {
            src: s0,
            dst: s1,
            kind: EdgeKind::ThreadOrder,
            strength: Strength::Weak,
            ts: t.evs[wake as usize].ts,
            src_syscall: -1,
        })));
    }

    #[test]
    fn a_fork_starts_the_child_and_its_exit_ends_it() {
        let mut t = Trace::default();
        let fork = t.task(
            10,
            EventKind::Fork {
                child: Tid(11),
                child_pid: Pid(11),
                thread: false,
            },
        );
        t.run(11);
        t.task(11, EventKind::Exit);
        let out = outputs(&t.evs, Key::Thread(Tid(11)), &RulesConfig::default());
        let child = SegmentId::new(Tid(11), 0);
        assert_eq!(
            out.first(),
            Some(&Output::Dst(Dst {
                seq: fork,
                seg: child,
                kind: EdgeKind::Fork,
                wait: -1,
                paired: false,
                waited: false,
            }))
        );
        let segs = segments(&out);
        assert_eq!(segs.len(), 1, "{out:#?}");
        assert_eq!(
            (segs[0].start, segs[0].end),
            (StartCause::Created, EndCause::Exit)
        );
    }
}
