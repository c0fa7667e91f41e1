//! The segment and edge rules, as per-key state machines.
//!
//! Every event is routed to one or more *keys* ([`route`]): the thread it concerns (as actor,
//! as target of a wake-up or fork, as the task switched in or out), the per-CPU interrupt
//! pseudo-thread for interrupt-context work, and the `struct hrtimer` address for timers.
//! Each key owns a small state machine ([`KeyState`]) fed with that key's events in `seq`
//! order. A machine produces:
//!
//! - **final** records, emitted once and never retracted: closed segments, thread-order
//!   edges, edge endpoints ([`Src`], [`Dst`], [`TimerPair`]), closed spins;
//! - **mutable** records, recomputed at every epoch end ([`KeyState::mutable`]): the open
//!   tail segment, the last closed segment while the result of its wait is not yet known,
//!   open spins. The caller retracts the previous version and inserts the new one.
//!
//! Edges across keys are joins on the event's `seq`: the actor side says which segment did
//! the waking/forking/arming ([`Src`]), the target side which segment it started ([`Dst`]),
//! and the timer key pairs an arming with the expiry it caused ([`TimerPair`]).
//!
//! ```text
//!  waker thread ──Src{seq, seg}──┐
//!                                ├─ join on seq ─► CausalEdge{src seg → dst seg}
//!  wakee thread ──Dst{seq, seg}──┘
//!  armer ──Src{arm}── join ── TimerPair{arm, fire} ── join ── Dst{fire, irq seg} (timer irq)
//! ```
//!
//! Both the dataflow and the batch reference drive these same machines; what the reference
//! checks is everything around them: partitioning by key, epoch closing, the retraction of
//! open tails, the spin deadlines and the joins.

use argus_schema::{
    syscalls, CausalEdge, Context, Cpu, EdgeKind, EndCause, Event, EventKind, Nanos, Pid, Segment,
    SegmentId, SegmentKind, Spin, SpinClass, StartCause, Strength, Tid,
};
use serde::{Deserialize, Serialize};

/// Parameters of the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesConfig {
    /// A segment (or yield run) longer than this is a spinning vertex. Default 2 s.
    pub spin_threshold_ns: u64,
    /// A busy segment with at least this many `sched_yield` calls per second is a yield loop.
    pub yields_per_sec: u64,
}

impl Default for RulesConfig {
    fn default() -> Self {
        RulesConfig {
            spin_threshold_ns: 2_000_000_000,
            yields_per_sec: 50,
        }
    }
}

/// What a key's state machine is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Key {
    /// A task.
    Thread(Tid),
    /// Interrupt context on a CPU.
    Irq(Cpu),
    /// A `struct hrtimer` by address.
    Timer(u64),
}

impl Key {
    /// A well-mixed hash, used to partition keys over workers.
    pub fn hash64(&self) -> u64 {
        let (tag, v) = match *self {
            Key::Thread(t) => (1u64, t.0 as u32 as u64),
            Key::Irq(c) => (2, c.0 as u64),
            Key::Timer(a) => (3, a),
        };
        // splitmix64 finalizer
        let mut z = v.wrapping_add(tag.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The part a key plays in an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// The key's own record (syscalls, exit, interrupt entry/exit, markers).
    Own,
    /// The key acts on another key (wakes, forks, arms a timer).
    Actor,
    /// The key is acted on (woken, created).
    Target,
    /// The task leaves the CPU.
    SwitchOut,
    /// The task takes the CPU.
    SwitchIn,
    /// A timer key is armed.
    Arm,
    /// A timer key fires.
    Fire,
}

/// Calls `f` for every (key, role) the event concerns.
pub fn route(ev: &Event, mut f: impl FnMut(Key, Role)) {
    let actor = || -> Key {
        if ev.ctx == Context::Task && ev.tid.is_task() {
            Key::Thread(ev.tid)
        } else {
            // Interrupt context, or the idle task acting (its work is interrupt tail work).
            Key::Irq(ev.cpu)
        }
    };
    match &ev.kind {
        EventKind::Switch { prev, next, .. } => {
            if prev.is_task() {
                f(Key::Thread(*prev), Role::SwitchOut);
            }
            if next.is_task() {
                f(Key::Thread(*next), Role::SwitchIn);
            }
        }
        EventKind::Waking { target } | EventKind::WakeupNew { target } => {
            f(actor(), Role::Actor);
            if target.is_task() {
                f(Key::Thread(*target), Role::Target);
            }
        }
        EventKind::Fork { child, .. } => {
            f(actor(), Role::Actor);
            if child.is_task() {
                f(Key::Thread(*child), Role::Target);
            }
        }
        EventKind::HrtimerStart { timer, .. } => {
            f(actor(), Role::Actor);
            f(Key::Timer(*timer), Role::Arm);
        }
        EventKind::HrtimerExpire { timer, .. } => {
            f(Key::Irq(ev.cpu), Role::Own);
            f(Key::Timer(*timer), Role::Fire);
        }
        EventKind::IrqEntry { .. }
        | EventKind::IrqExit { .. }
        | EventKind::SoftirqEntry { .. }
        | EventKind::SoftirqExit { .. }
        | EventKind::HrtimerExpireExit { .. } => f(Key::Irq(ev.cpu), Role::Own),
        EventKind::SysEnter { .. }
        | EventKind::SysExit { .. }
        | EventKind::Exec
        | EventKind::Exit
        | EventKind::Marker { .. } => {
            if ev.tid.is_task() && ev.ctx == Context::Task {
                f(Key::Thread(ev.tid), Role::Own)
            }
        }
        // Records the first rules do not use yet: they go to their actor so that its
        // segment counts them.
        EventKind::WorkQueue { .. }
        | EventKind::WorkStart { .. }
        | EventKind::WorkEnd { .. }
        | EventKind::TimerStart { .. }
        | EventKind::TimerExpire { .. }
        | EventKind::TimerExpireExit { .. }
        | EventKind::SignalGenerate { .. }
        | EventKind::SignalDeliver { .. }
        | EventKind::Stack { .. }
        | EventKind::FlagAccess { .. } => f(actor(), Role::Own),
    }
}

/// The actor side of a causal event: which segment did it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Src {
    /// The event's `seq`.
    pub seq: u64,
    /// The acting segment.
    pub seg: SegmentId,
    /// When.
    pub ts: Nanos,
    /// Syscall the actor was in (-1 none).
    pub syscall: i32,
    /// Whether the actor is interrupt context.
    pub interrupt: bool,
}

/// The target side of a causal event: which segment it started.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dst {
    /// The event's `seq`.
    pub seq: u64,
    /// The segment it started.
    pub seg: SegmentId,
    /// Relationship.
    pub kind: EdgeKind,
}

/// An arming of a timer (`arm` seq) and the expiry it caused (`fire` seq).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimerPair {
    /// `seq` of the `hrtimer_start`.
    pub arm: u64,
    /// `seq` of the `hrtimer_expire_entry`.
    pub fire: u64,
}

/// A record produced by a key's state machine.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Output {
    /// A segment version.
    Segment(Segment),
    /// An edge known within one key (thread order).
    Edge(CausalEdge),
    /// Actor side of a causal event.
    Src(Src),
    /// Target side of a causal event.
    Dst(Dst),
    /// A timer arming/expiry pair.
    Pair(TimerPair),
    /// A spinning vertex version.
    Spin(Spin),
}

/// The edge from a matched actor and target.
pub fn wake_edge(src: &Src, dst: &Dst) -> CausalEdge {
    let strength = match dst.kind {
        EdgeKind::Wakeup => {
            if src.interrupt || syscalls::is_send(src.syscall) || syscalls::is_notify(src.syscall) {
                Strength::Strong
            } else {
                // futex hand-offs and unknown kernel paths may be mere mutual exclusion.
                Strength::Weak
            }
        }
        EdgeKind::ThreadOrder => Strength::Weak,
        EdgeKind::Fork
        | EdgeKind::Timer
        | EdgeKind::Message
        | EdgeKind::Queue
        | EdgeKind::Signal
        | EdgeKind::Exit
        | EdgeKind::Flag
        | EdgeKind::Rule => Strength::Strong,
    };
    CausalEdge {
        src: src.seg,
        dst: dst.seg,
        kind: dst.kind,
        strength,
        ts: src.ts,
        src_syscall: src.syscall,
    }
}

/// The state machine of one key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum KeyState {
    /// A task.
    Thread(Box<ThreadState>),
    /// Interrupt context of a CPU.
    Irq(IrqState),
    /// A timer.
    Timer(TimerState),
}

impl KeyState {
    /// A fresh machine for `key`.
    pub fn new(key: Key) -> KeyState {
        match key {
            Key::Thread(tid) => KeyState::Thread(Box::new(ThreadState::new(tid))),
            Key::Irq(cpu) => KeyState::Irq(IrqState::new(cpu)),
            Key::Timer(_) => KeyState::Timer(TimerState::default()),
        }
    }

    /// Feeds one event; final records go to `out`.
    pub fn on_event(&mut self, ev: &Event, role: Role, cfg: &RulesConfig, out: &mut Vec<Output>) {
        match self {
            KeyState::Thread(t) => t.on_event(ev, role, cfg, out),
            KeyState::Irq(i) => i.on_event(ev, out),
            KeyState::Timer(t) => t.on_event(ev, role, out),
        }
    }

    /// The current versions of this key's mutable records, given that every event up to
    /// `watermark` has been seen.
    pub fn mutable(&self, watermark: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        match self {
            KeyState::Thread(t) => t.mutable(watermark, cfg, out),
            KeyState::Irq(i) => i.mutable(out),
            KeyState::Timer(_) => {}
        }
    }

    /// The watermark past which [`KeyState::mutable`] would report a new open spin although
    /// no new event arrived for this key.
    pub fn spin_deadline(&self, cfg: &RulesConfig) -> Option<Nanos> {
        match self {
            KeyState::Thread(t) => t.spin_deadline(cfg),
            _ => None,
        }
    }
}

/// A run of short timed waits (a yield loop) being tracked.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct YieldRun {
    first: SegmentId,
    last: SegmentId,
    start_ns: Nanos,
    end_ns: Nanos,
    on_cpu_ns: u64,
    wait_ns: u64,
    segments: u32,
    wait_syscall: i32,
}

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
    dead: bool,
    run: Option<YieldRun>,
}

impl ThreadState {
    fn new(tid: Tid) -> ThreadState {
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
            dead: false,
            run: None,
        }
    }

    fn open(&mut self, ts: Nanos, start: StartCause) -> SegmentId {
        let id = SegmentId::new(self.tid, self.next_ord);
        self.next_ord += 1;
        self.last_id = Some(id);
        self.cur = Some(Segment {
            id,
            tid: self.tid,
            pid: self.pid,
            kind: SegmentKind::Task,
            start_ns: ts,
            end_ns: ts,
            start,
            end: EndCause::Open,
            wait_start_ns: None,
            wait_state: 0,
            wait_syscall: -1,
            wait_ret: None,
            on_cpu_ns: 0,
            preemptions: 0,
            yields: 0,
            syscalls: 0,
            events: 0,
            syscall_seq: Vec::new(),
        });
        id
    }

    /// Closes the current segment at `ts` for `why`; it becomes pending (awaiting the result
    /// of its wait) when it ended by a wake-up inside a syscall, final otherwise.
    fn close(&mut self, ts: Nanos, why: EndCause, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let Some(mut seg) = self.cur.take() else {
            return;
        };
        if let Some(since) = self.running_since {
            // Still on CPU (exit path): count the run up to now.
            seg.on_cpu_ns += since.until(ts);
            self.running_since = if why == EndCause::Exit {
                None
            } else {
                Some(ts)
            };
        }
        seg.end_ns = ts;
        seg.end = why;
        self.flush_pending(cfg, out);
        if why == EndCause::Woken && seg.wait_syscall >= 0 {
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

    /// A segment is final: emit it, its single-segment spin, and feed the yield-run tracker.
    fn finish(&mut self, seg: Segment, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(spin) = single_spin(&seg, seg.end_ns, false, cfg) {
            out.push(Output::Spin(spin));
        }
        let short_timed = seg.wait_timed_out()
            && seg.end == EndCause::Woken
            && seg.duration_ns() < cfg.spin_threshold_ns;
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
            });
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

    fn ensure_open(&mut self, ts: Nanos) {
        if self.cur.is_none() && !self.dead {
            self.open(ts, StartCause::FirstSeen);
        }
    }

    fn on_event(&mut self, ev: &Event, role: Role, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        if ev.tid == self.tid && ev.pid.0 != 0 {
            self.pid = ev.pid;
            if let Some(c) = self.cur.as_mut() {
                c.pid = ev.pid;
            }
        }
        match role {
            Role::Target => self.on_target(ev, cfg, out),
            Role::SwitchIn => {
                if self.dead {
                    return;
                }
                if self.blocked {
                    // The wake-up was not recorded (lost, or a path without sched_waking):
                    // the wait ended when the task ran again, with no known cause.
                    self.close(ts, EndCause::Woken, cfg, out);
                    self.blocked = false;
                    self.open(ts, StartCause::Woken);
                    self.emit_thread_order(ts, out);
                }
                self.ensure_open(ts);
                self.running_since = Some(ts);
                self.touch(ts);
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
                        self.blocked = true;
                    } else if !prev_state.is_blocking() {
                        c.preemptions += 1;
                    }
                }
            }
            Role::Actor => {
                self.ensure_open(ts);
                self.touch(ts);
                let seg = match self.cur.as_ref() {
                    Some(c) => c.id,
                    None => match self.last_id {
                        Some(id) => id,
                        None => return,
                    },
                };
                out.push(Output::Src(Src {
                    seq: ev.seq,
                    seg,
                    ts,
                    syscall: self.in_syscall.unwrap_or(-1),
                    interrupt: false,
                }));
            }
            Role::Own => self.on_own(ev, cfg, out),
            Role::Arm | Role::Fire => {}
        }
    }

    fn touch(&mut self, ts: Nanos) {
        if let Some(c) = self.cur.as_mut() {
            c.end_ns = c.end_ns.max(ts);
            c.events += 1;
        }
    }

    fn emit_thread_order(&mut self, ts: Nanos, out: &mut Vec<Output>) {
        let Some(cur) = self.cur.as_ref() else {
            return;
        };
        if cur.id.seq() == 0 {
            return;
        }
        let prev = SegmentId::new(self.tid, cur.id.seq() - 1);
        out.push(Output::Edge(CausalEdge {
            src: prev,
            dst: cur.id,
            kind: EdgeKind::ThreadOrder,
            strength: Strength::Weak,
            ts,
            src_syscall: -1,
        }));
    }

    fn on_target(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        match ev.kind {
            EventKind::Waking { .. } => {
                if self.dead {
                    return;
                }
                let kind = EdgeKind::Wakeup;
                if self.cur.is_none() {
                    let id = self.open(ts, StartCause::Woken);
                    out.push(Output::Dst(Dst {
                        seq: ev.seq,
                        seg: id,
                        kind,
                    }));
                } else if self.blocked {
                    self.close(ts, EndCause::Woken, cfg, out);
                    self.blocked = false;
                    let id = self.open(ts, StartCause::Woken);
                    self.emit_thread_order(ts, out);
                    out.push(Output::Dst(Dst {
                        seq: ev.seq,
                        seg: id,
                        kind,
                    }));
                }
            }
            EventKind::Fork { child_pid, .. }
                if self.cur.is_none() && !self.dead && self.next_ord == 0 =>
            {
                self.pid = child_pid;
                let id = self.open(ts, StartCause::Created);
                out.push(Output::Dst(Dst {
                    seq: ev.seq,
                    seg: id,
                    kind: EdgeKind::Fork,
                }));
            }
            EventKind::WakeupNew { .. }
                if self.cur.is_none() && !self.dead && self.next_ord == 0 =>
            {
                let id = self.open(ts, StartCause::Created);
                out.push(Output::Dst(Dst {
                    seq: ev.seq,
                    seg: id,
                    kind: EdgeKind::Fork,
                }));
            }
            _ => {}
        }
    }

    fn on_own(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        if self.dead {
            return;
        }
        self.ensure_open(ts);
        self.touch(ts);
        match ev.kind {
            EventKind::SysEnter { nr, .. } => {
                self.in_syscall = Some(nr);
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
            }
            EventKind::SysExit { nr, ret } => {
                self.in_syscall = None;
                if let Some(mut p) = self.pending.take() {
                    if p.wait_syscall == nr {
                        p.wait_ret = Some(ret);
                    }
                    self.finish(p, cfg, out);
                }
            }
            EventKind::Exit => {
                self.close(ts, EndCause::Exit, cfg, out);
                self.flush_pending(cfg, out);
                if let Some(run) = self.run.take() {
                    if let Some(spin) = run_spin(&run, self.tid, self.pid, false, cfg) {
                        out.push(Output::Spin(spin));
                    }
                }
                self.dead = true;
                self.blocked = false;
            }
            _ => {}
        }
    }

    /// The open tail, a pending segment, and open spins.
    fn mutable(&self, watermark: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(p) = &self.pending {
            // Its spin is reported once final; a long wait is still visible through the
            // segment itself.
            if let Some(spin) = single_spin(p, p.end_ns, false, cfg) {
                out.push(Output::Spin(spin));
            }
            out.push(Output::Segment(p.clone()));
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
    }

    fn spin_deadline(&self, cfg: &RulesConfig) -> Option<Nanos> {
        self.cur
            .as_ref()
            .map(|c| Nanos(c.start_ns.0.saturating_add(cfg.spin_threshold_ns)))
    }
}

/// The spin of one segment, if it is one. `until` is how long it is known to last (its end,
/// or the watermark for an open segment). An open spin reports `end_ns` = the segment's last
/// record, so that it does not change while nothing happens.
fn single_spin(seg: &Segment, until: Nanos, open: bool, cfg: &RulesConfig) -> Option<Spin> {
    if !seg.tid.is_task() {
        return None;
    }
    let dur = seg.start_ns.until(until);
    if dur <= cfg.spin_threshold_ns {
        return None;
    }
    // The class must not depend on the watermark (an open spin is reported once, when the
    // watermark crosses the threshold): an open segment that blocked is waiting for good.
    let known = seg.duration_ns().max(1);
    let waiting = match seg.wait_start_ns {
        Some(_) if open => true,
        Some(w) => w.until(seg.end_ns) * 2 >= known,
        None => false,
    };
    let class = if waiting {
        SpinClass::LongWait
    } else if seg.yields as u64 * 1_000_000_000 >= cfg.yields_per_sec * known && seg.yields >= 3 {
        SpinClass::RepeatedYield
    } else {
        SpinClass::LongRunning
    };
    Some(Spin {
        segment: seg.id,
        last: seg.id,
        tid: seg.tid,
        pid: seg.pid,
        class,
        start_ns: seg.start_ns,
        end_ns: seg.end_ns,
        open,
        on_cpu_ns: seg.on_cpu_ns,
        wait_ns: seg.wait_ns(),
        segments: 1,
        wait_syscall: seg.wait_syscall,
    })
}

fn run_spin(run: &YieldRun, tid: Tid, pid: Pid, open: bool, cfg: &RulesConfig) -> Option<Spin> {
    if run.segments < 3 || run.start_ns.until(run.end_ns) <= cfg.spin_threshold_ns {
        return None;
    }
    Some(Spin {
        segment: run.first,
        last: run.last,
        tid,
        pid,
        class: SpinClass::RepeatedYield,
        start_ns: run.start_ns,
        end_ns: run.end_ns,
        open,
        on_cpu_ns: run.on_cpu_ns,
        wait_ns: run.wait_ns,
        segments: run.segments,
        wait_syscall: run.wait_syscall,
    })
}

/// Interrupt context of one CPU: a stack of open handlers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IrqState {
    cpu: Cpu,
    next_ord: u32,
    stack: Vec<Segment>,
}

impl IrqState {
    fn new(cpu: Cpu) -> IrqState {
        IrqState {
            cpu,
            next_ord: 0,
            stack: Vec::new(),
        }
    }

    fn new_segment(&mut self, ts: Nanos, kind: SegmentKind) -> Segment {
        let tid = Tid::irq(self.cpu);
        let id = SegmentId::new(tid, self.next_ord);
        self.next_ord += 1;
        Segment {
            id,
            tid,
            pid: Pid(tid.0),
            kind,
            start_ns: ts,
            end_ns: ts,
            start: StartCause::Interrupt,
            end: EndCause::Open,
            wait_start_ns: None,
            wait_state: 0,
            wait_syscall: -1,
            wait_ret: None,
            on_cpu_ns: 0,
            preemptions: 0,
            yields: 0,
            syscalls: 0,
            events: 1,
            syscall_seq: Vec::new(),
        }
    }

    fn push(&mut self, ts: Nanos, kind: SegmentKind) -> SegmentId {
        let seg = self.new_segment(ts, kind);
        let id = seg.id;
        self.stack.push(seg);
        id
    }

    fn pop_matching(&mut self, ts: Nanos, out: &mut Vec<Output>, m: impl Fn(&SegmentKind) -> bool) {
        if let Some(pos) = self.stack.iter().rposition(|s| m(&s.kind)) {
            // Handlers nested inside the one ending lost their exit record: close them too.
            while self.stack.len() > pos {
                if let Some(mut s) = self.stack.pop() {
                    s.end_ns = ts;
                    s.on_cpu_ns = s.start_ns.until(ts);
                    s.end = EndCause::HandlerDone;
                    out.push(Output::Segment(s));
                }
            }
        }
    }

    fn on_event(&mut self, ev: &Event, out: &mut Vec<Output>) {
        let ts = ev.ts;
        match ev.kind {
            EventKind::IrqEntry { irq } => {
                self.push(ts, SegmentKind::HardIrq { irq });
            }
            EventKind::SoftirqEntry { vec } => {
                self.push(ts, SegmentKind::SoftIrq { vec });
            }
            EventKind::HrtimerExpire { timer, function } => {
                let id = self.push(ts, SegmentKind::Timer { timer, function });
                out.push(Output::Dst(Dst {
                    seq: ev.seq,
                    seg: id,
                    kind: EdgeKind::Timer,
                }));
            }
            EventKind::IrqExit { irq } => self.pop_matching(
                ts,
                out,
                |k| matches!(k, SegmentKind::HardIrq { irq: i } if *i == irq),
            ),
            EventKind::SoftirqExit { vec } => self.pop_matching(
                ts,
                out,
                |k| matches!(k, SegmentKind::SoftIrq { vec: v } if *v == vec),
            ),
            EventKind::HrtimerExpireExit { timer } => self.pop_matching(
                ts,
                out,
                |k| matches!(k, SegmentKind::Timer { timer: t, .. } if *t == timer),
            ),
            EventKind::Waking { .. }
            | EventKind::WakeupNew { .. }
            | EventKind::Fork { .. }
            | EventKind::HrtimerStart { .. } => {
                let seg = match self.stack.last_mut() {
                    Some(top) => {
                        top.end_ns = top.end_ns.max(ts);
                        top.events += 1;
                        top.id
                    }
                    None => {
                        // Interrupt work with no enclosing handler record (IPI, local timer
                        // vector): a point segment of its own.
                        let mut s = self.new_segment(ts, SegmentKind::Interrupt);
                        s.end = EndCause::HandlerDone;
                        let id = s.id;
                        out.push(Output::Segment(s));
                        id
                    }
                };
                out.push(Output::Src(Src {
                    seq: ev.seq,
                    seg,
                    ts,
                    syscall: -1,
                    interrupt: true,
                }));
            }
            _ => {}
        }
    }

    fn mutable(&self, out: &mut Vec<Output>) {
        for s in &self.stack {
            out.push(Output::Segment(s.clone()));
        }
    }
}

/// A timer: the last arming not yet matched with an expiry.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TimerState {
    last_arm: Option<u64>,
}

impl TimerState {
    fn on_event(&mut self, ev: &Event, role: Role, out: &mut Vec<Output>) {
        match role {
            Role::Arm => self.last_arm = Some(ev.seq),
            Role::Fire => {
                if let Some(arm) = self.last_arm.take() {
                    out.push(Output::Pair(TimerPair { arm, fire: ev.seq }));
                }
            }
            _ => {}
        }
    }
}
