//! kdebug events as Argus events (the table is in `docs/kdebug.md`).
//!
//! - `MACH_SCHED`/`MACH_STKHANDOFF` are switches: the emitter leaves the CPU, arg2 takes it.
//!   The thread left blocked when it asserted a wait (`MACH_WAIT`, interruptible or not)
//!   that no wake-up cleared before the switch, else runnable (preempted). A CPU's idle
//!   thread (the emitter of `MACH_IDLE`) is tid 0, as Linux's swapper.
//! - `MACH_MKRUNNABLE` is a wake-up of arg1 by the emitter, in interrupt context inside an
//!   `INTERRUPT` interval of its CPU.
//! - BSD syscalls and Mach traps are `sys_enter`/`sys_exit` in the class of a Linux syscall
//!   ([`super::codes::BSD`], [`super::codes::MACH`]): the rules then treat a `read` as a
//!   receive, `kevent` as a readiness wait, `psynch_cvwait` and `__ulock_wait` as waits on a
//!   word, `__semwait_signal` without a semaphore as a sleep, while each keeps its own number
//!   and name ([`argus_schema::syscalls::macos`]); one outside the tables keeps its number,
//!   in no class. Errors are negative Linux errno values (`ETIMEDOUT`, `EAGAIN` renumbered),
//!   a Mach wait's timeout is `-ETIMEDOUT`, a received Mach message returns 1.
//! - A Mach message send (`MACH_IPC_msg_send`) delivers to its kmsg and its receive
//!   (`MACH_IPC_msg_recv`) drains it: the socket data records, paired by the kmsg address,
//!   so a message is an edge as a socket's data is. A `mach_msg` that sends and receives is
//!   a send until its message is queued, then a receive.
//! - Timer calls (`TMR_TimerCallEnter`, `TMR_TimerCallIntr`) are high-resolution timers;
//!   `TRACE_DATA_NEWTHREAD` a thread creation, `TRACE_DATA_THREAD_TERMINATE` an exit,
//!   `TRACE_DATA_EXEC` an exec with the program name of `TRACE_STRING_EXEC`,
//!   `TRACE_STRING_THREADNAME` a thread's name; `TRACE_LOST_EVENTS` a lost range.
//!
//! - A thread queued on a turnstile whose inheritor chain ends at a thread is a `LockOwner`
//!   record of the waiter naming that thread; libdispatch's work items (its introspection
//!   build's push, pop and completion records) are `WorkQueue`/`WorkStart`/`WorkEnd`.
//!
//! Processes keep their macOS pids; the thread map, creations and execs say which thread is
//! whose. Thread ids above `i32::MAX` (a machine up for a very long time) are renumbered
//! below it, which a note says.

use super::codes::{self, Args, Syscall};
use super::decode::{FuncQual, KdEvent, KdFile};
use crate::import::ImportSummary;
use argus_schema::syscalls::{self, macos};
use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, ThreadInfo, Tid};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What the mapping gives.
pub(super) struct Mapped {
    pub events: Vec<Event>,
    pub threads: Vec<ThreadInfo>,
    pub summary: ImportSummary,
}

/// A thread as the mapping knows it.
#[derive(Default)]
struct Thread {
    pid: Option<i32>,
    name: Option<String>,
    parent: Option<Tid>,
    start: Option<Nanos>,
    exit: Option<Nanos>,
    kernel: bool,
    /// The state a switch away leaves it in, from its `MACH_WAIT`.
    waiting: Option<TaskState>,
    /// Syscalls in flight: event id, the Linux number, a `mach_msg` still in its send part.
    calls: Vec<(u32, i32, bool)>,
    /// A name being assembled from string events.
    string: Vec<u8>,
    /// A `kdebug_trace_string` string being assembled.
    global: Vec<u8>,
}

struct Mapper<'a> {
    kd: &'a KdFile,
    idle: HashSet<u64>,
    /// kdebug thread ids above `i32::MAX`, renumbered.
    renumbered: HashMap<u64, i32>,
    threads: BTreeMap<i32, Thread>,
    /// Process names by pid.
    processes: HashMap<i32, String>,
    /// The interrupts open on each CPU, innermost last: the number of a device's (an
    /// `IrqEntry` was emitted), `None` for the timer's and IPIs.
    irqs: HashMap<u32, Vec<Option<i32>>>,
    last_ts: HashMap<u32, Nanos>,
    /// What each turnstile pushes on (`TURNSTILE_*_heap` records): its owner's thread, or
    /// another turnstile.
    inheritors: HashMap<u64, Inheritor>,
    /// Threads queued on a turnstile whose owner is not known yet (the owner is named just
    /// after the waiter is queued, and only for the first waiter).
    unowned: BTreeMap<u64, Vec<Tid>>,
    /// The turnstile each thread of `unowned` is queued on.
    queued_on: HashMap<Tid, u64>,
    /// The turnstiles pushing on each turnstile (the reverse of `inheritors`' chains), so an
    /// inheritance reaches the waiters it names an owner for without a scan.
    pushers: HashMap<u64, Vec<u64>>,
    /// The function of each libdispatch continuation queued and not yet complete.
    dispatched: HashMap<u64, u64>,
    events: Vec<Event>,
    summary: ImportSummary,
}

/// What a turnstile pushes on.
#[derive(Clone, Copy)]
enum Inheritor {
    Thread(Tid),
    Turnstile(u64),
}

/// Turnstiles a chain of pushes is followed through before giving up (xnu stops
/// propagating at a similar depth, `TURNSTILE_MAX_HOP_DEFAULT`, 10).
const MAX_TURNSTILE_HOPS: usize = 16;
/// Turnstiles with waiters whose owner is not known yet, kept at most (a bound against a
/// crafted file; a real trace has a few: the waiters blocked right now).
const MAX_UNOWNED: usize = 65_536;
/// Turnstiles remembered as pushing on one turnstile, at most.
const MAX_PUSHERS: usize = 64;

/// The printable bytes packed in a string event's arguments.
fn string_bytes(args: &[u64; 4]) -> Vec<u8> {
    args.iter()
        .flat_map(|a| a.to_le_bytes())
        .take_while(|&b| b != 0)
        .collect()
}

impl Mapper<'_> {
    fn tid(&mut self, raw: u64) -> Tid {
        if self.idle.contains(&raw) {
            return Tid(0);
        }
        if let Ok(t) = i32::try_from(raw) {
            return Tid(t);
        }
        let next = i32::MAX - self.renumbered.len() as i32;
        Tid(*self.renumbered.entry(raw).or_insert(next))
    }

    fn thread(&mut self, tid: Tid) -> &mut Thread {
        self.threads.entry(tid.0).or_default()
    }

    fn pid_of(&self, tid: Tid) -> Pid {
        Pid(self
            .threads
            .get(&tid.0)
            .and_then(|t| t.pid)
            .unwrap_or(tid.0))
    }

    fn push(&mut self, e: &KdEvent, tid: Tid, ctx: Context, kind: EventKind) {
        let ts = Nanos(self.kd.ns(e.timestamp));
        let pid = if tid.0 == 0 { Pid(0) } else { self.pid_of(tid) };
        self.events.push(Event {
            ts,
            seq: self.events.len() as u64,
            cpu: Cpu(e.cpu),
            pid,
            tid,
            ctx,
            kind,
        });
    }

    fn ctx(&self, cpu: u32) -> Context {
        if self.irqs.get(&cpu).is_some_and(|open| !open.is_empty()) {
            Context::HardIrq
        } else {
            Context::Task
        }
    }

    fn count_unknown(&mut self, e: &KdEvent) {
        *self
            .summary
            .unknown
            .entry(format!("kdebug {:#010x}", e.eventid()))
            .or_default() += 1;
    }

    /// The thread a turnstile pushes on, through the turnstiles it pushes on.
    fn owner_of(&self, turnstile: u64) -> Option<Tid> {
        let mut cur = turnstile;
        for _ in 0..MAX_TURNSTILE_HOPS {
            match self.inheritors.get(&cur)? {
                Inheritor::Thread(t) => return Some(*t),
                Inheritor::Turnstile(next) => cur = *next,
            }
        }
        None
    }

    /// Turnstile `turnstile` now pushes on `on`: the threads queued on it, or on a turnstile
    /// pushing on it (up to [`MAX_TURNSTILE_HOPS`] back), with no owner known yet, learn
    /// theirs.
    fn inherits(&mut self, e: &KdEvent, turnstile: u64, on: Inheritor) {
        if let Inheritor::Turnstile(to) = on {
            let p = self.pushers.entry(to).or_default();
            if !p.contains(&turnstile) && p.len() < MAX_PUSHERS {
                p.push(turnstile);
            }
        }
        self.inheritors.insert(turnstile, on);
        let Some(owner) = self.owner_of(turnstile) else {
            return;
        };
        let mut level = vec![turnstile];
        for _ in 0..MAX_TURNSTILE_HOPS {
            let mut next = Vec::new();
            for t in level {
                // A link that no longer holds (released since) names nobody.
                if self.owner_of(t) != Some(owner) {
                    continue;
                }
                for waiter in self.unowned.remove(&t).unwrap_or_default() {
                    self.queued_on.remove(&waiter);
                    self.lock_owner(e, waiter, owner, t);
                }
                next.extend(self.pushers.get(&t).into_iter().flatten().copied());
            }
            if next.is_empty() {
                break;
            }
            level = next;
        }
    }

    /// `waiter` is queued on `turnstile`, whose owner is not known yet. A thread waits on one
    /// turnstile at a time: an earlier queueing of it is forgotten.
    fn queue_unowned(&mut self, turnstile: u64, waiter: Tid) {
        self.dequeue_unowned(waiter);
        if self.unowned.len() >= MAX_UNOWNED && !self.unowned.contains_key(&turnstile) {
            return;
        }
        self.unowned.entry(turnstile).or_default().push(waiter);
        self.queued_on.insert(waiter, turnstile);
    }

    /// `waiter` runs again (woken): it waits on no turnstile any more.
    fn dequeue_unowned(&mut self, waiter: Tid) {
        if let Some(t) = self.queued_on.remove(&waiter) {
            if let Some(q) = self.unowned.get_mut(&t) {
                q.retain(|w| *w != waiter);
                if q.is_empty() {
                    self.unowned.remove(&t);
                }
            }
        }
    }

    /// `waiter` blocks on `turnstile`, which `owner` holds.
    fn lock_owner(&mut self, e: &KdEvent, waiter: Tid, owner: Tid, turnstile: u64) {
        if waiter.0 == 0 || owner.0 == 0 || waiter == owner {
            return;
        }
        self.push(
            e,
            waiter,
            Context::Task,
            EventKind::LockOwner {
                owner,
                lock: turnstile,
            },
        );
    }

    fn event(&mut self, e: &KdEvent) {
        let cpu = e.cpu;
        let ts = Nanos(self.kd.ns(e.timestamp));
        let me = self.tid(e.tid);
        let ctx = self.ctx(cpu);
        match e.eventid() {
            codes::MACH_SCHED | codes::MACH_STKHANDOFF => {
                let next = self.tid(e.args[1]);
                let prev_state = if me.0 == 0 {
                    TaskState::RUNNABLE
                } else {
                    self.thread(me)
                        .waiting
                        .take()
                        .unwrap_or(TaskState::RUNNABLE)
                };
                self.push(
                    e,
                    me,
                    Context::Task,
                    EventKind::Switch {
                        prev: me,
                        prev_state,
                        next,
                    },
                );
            }
            codes::MACH_MKRUNNABLE => {
                let target = self.tid(e.args[0]);
                self.thread(target).waiting = None;
                self.dequeue_unowned(target);
                self.push(e, me, ctx, EventKind::Waking { target });
            }
            codes::MACH_WAIT => {
                if me.0 != 0 {
                    self.thread(me).waiting = Some(if e.args[1] != 0 {
                        TaskState::SLEEPING
                    } else {
                        TaskState::DISK
                    });
                }
            }
            codes::MACH_IDLE => {}
            // A device's interrupt is an `irq_handler_entry`/`exit` pair; the CPU's timer and
            // IPIs are hard-IRQ context naming no handler, as Linux's local timer and IPIs
            // (which have no handler tracepoint) are.
            codes::INTERRUPT => match e.func() {
                FuncQual::Start => {
                    let named = !matches!(e.args[3], codes::INTR_TYPE_TIMER | codes::INTR_TYPE_IPI);
                    let irq = named.then_some(e.args[0] as i32);
                    self.irqs.entry(cpu).or_default().push(irq);
                    if let Some(irq) = irq {
                        self.push(e, me, Context::HardIrq, EventKind::IrqEntry { irq });
                    }
                }
                FuncQual::End => {
                    if let Some(Some(irq)) = self.irqs.entry(cpu).or_default().pop() {
                        self.push(e, me, Context::HardIrq, EventKind::IrqExit { irq });
                    }
                }
                _ => self.count_unknown(e),
            },
            codes::TMR_TIMER_CALL_ENTER => {
                let kind = EventKind::HrtimerStart {
                    timer: e.args[0],
                    function: e.args[1],
                    expires: self.kd.ns(e.args[2]),
                };
                self.push(e, me, ctx, kind);
            }
            codes::TMR_TIMER_CALL_INTR => match e.func() {
                FuncQual::Start => self.push(
                    e,
                    me,
                    Context::HardIrq,
                    EventKind::HrtimerExpire {
                        timer: e.args[0],
                        function: e.args[1],
                    },
                ),
                FuncQual::End => self.push(
                    e,
                    me,
                    Context::HardIrq,
                    EventKind::HrtimerExpireExit { timer: e.args[0] },
                ),
                _ => self.count_unknown(e),
            },
            codes::MACH_IPC_MSG_SEND => {
                self.push(e, me, ctx, EventKind::SockReady { sk: e.args[0] });
                // A send-and-receive `mach_msg`: its send part ends here.
                let split = self
                    .threads
                    .get(&me.0)
                    .and_then(|t| t.calls.last())
                    .filter(|c| c.2)
                    .map(|c| c.1);
                if let Some(send) = split {
                    let recv = in_class(send, "recvmsg");
                    self.push(e, me, ctx, EventKind::SysExit { nr: send, ret: 1 });
                    if let Some(c) = self.thread(me).calls.last_mut() {
                        *c = (c.0, recv, false);
                    }
                    self.push(
                        e,
                        me,
                        ctx,
                        EventKind::SysEnter {
                            nr: recv,
                            args: [0; 6],
                        },
                    );
                }
            }
            codes::MACH_IPC_MSG_RECV => {
                self.push(
                    e,
                    me,
                    ctx,
                    EventKind::SockRecv {
                        sk: e.args[0],
                        ret: 1,
                    },
                );
            }
            codes::TRACE_DATA_NEWTHREAD => {
                let child = self.tid(e.args[0]);
                let child_pid = i32::try_from(e.args[1]).unwrap_or(child.0);
                // A thread of kernel_task (pid 0) is a kernel thread, its own task as in
                // the thread map.
                let kernel = child_pid == 0;
                let child_pid = if kernel { child.0 } else { child_pid };
                let creator = self.pid_of(me);
                let thread = !kernel && child_pid == creator.0;
                let name = if thread {
                    None
                } else {
                    self.threads.get(&me.0).and_then(|t| t.name.clone())
                };
                let t = self.thread(child);
                t.pid = Some(child_pid);
                t.kernel |= kernel;
                t.parent = Some(me);
                t.start = Some(ts);
                if t.name.is_none() {
                    t.name = name;
                }
                if let (false, Some(n)) = (thread, self.processes.get(&creator.0).cloned()) {
                    self.processes.entry(child_pid).or_insert(n);
                }
                self.push(
                    e,
                    me,
                    Context::Task,
                    EventKind::Fork {
                        child,
                        child_pid: Pid(child_pid),
                        thread,
                    },
                );
            }
            codes::TRACE_DATA_EXEC => {
                if let Ok(pid) = i32::try_from(e.args[0]) {
                    self.thread(me).pid = Some(pid);
                }
                self.push(e, me, Context::Task, EventKind::Exec);
            }
            codes::TRACE_DATA_THREAD_TERMINATE => {
                let who = self.tid(e.args[0]);
                self.thread(who).exit = Some(ts);
                self.push(e, who, Context::Task, EventKind::Exit);
            }
            codes::TRACE_STRING_EXEC | codes::TRACE_STRING_THREADNAME => {
                let exec = e.eventid() == codes::TRACE_STRING_EXEC;
                let t = self.thread(me);
                if matches!(e.func(), FuncQual::Start | FuncQual::All) {
                    t.string.clear();
                }
                t.string.extend(string_bytes(&e.args));
                if matches!(e.func(), FuncQual::End | FuncQual::All | FuncQual::None) {
                    let s = String::from_utf8_lossy(&std::mem::take(&mut t.string)).into_owned();
                    t.name = Some(s.clone());
                    if exec {
                        let pid = self.pid_of(me).0;
                        self.processes.insert(pid, s);
                    }
                }
            }
            codes::TRACE_STRING_GLOBAL => {
                let t = self.thread(me);
                let first = matches!(e.func(), FuncQual::Start | FuncQual::All);
                if first {
                    t.global.clear();
                    // arg1 the caller's debug id, arg2 the string's id, then the bytes.
                    let bytes: Vec<u8> = e.args[2..]
                        .iter()
                        .flat_map(|a| a.to_le_bytes())
                        .take_while(|&b| b != 0)
                        .collect();
                    t.global.extend(bytes);
                } else {
                    t.global.extend(string_bytes(&e.args));
                }
                if matches!(e.func(), FuncQual::End | FuncQual::All) {
                    let text = String::from_utf8_lossy(&std::mem::take(&mut t.global)).into_owned();
                    if !text.is_empty() {
                        self.push(e, me, ctx, EventKind::Marker { text });
                    }
                }
            }
            // libdispatch's work items (its introspection build): a push is work queued
            // by the emitter, a pop the start of the item in the worker that runs it, the
            // completion its end — as a kernel work item, so the queue edge links the two.
            codes::DISPATCH_PUSH_EB | codes::DISPATCH_PUSH_AB | codes::DISPATCH_PUSH_F => {
                let (work, function) = (e.args[0], e.args[1]);
                self.dispatched.insert(work, function);
                self.push(e, me, ctx, EventKind::WorkQueue { work, function });
            }
            codes::DISPATCH_POP => {
                let work = e.args[0];
                let function = self.dispatched.get(&work).copied().unwrap_or(0);
                self.push(
                    e,
                    me,
                    Context::Task,
                    EventKind::WorkStart { work, function },
                );
            }
            codes::DISPATCH_COMPLETE => {
                let work = e.args[0];
                self.dispatched.remove(&work);
                self.push(e, me, Context::Task, EventKind::WorkEnd { work });
            }
            codes::TURNSTILE_THREAD_ADDED_TO_WAITQ => {
                let (turnstile, waiter) = (e.args[0], self.tid(e.args[1]));
                match self.owner_of(turnstile) {
                    Some(owner) => self.lock_owner(e, waiter, owner, turnstile),
                    None => self.queue_unowned(turnstile, waiter),
                }
            }
            codes::TURNSTILE_ADDED_TO_THREAD_HEAP => {
                let owner = self.tid(e.args[0]);
                self.inherits(e, e.args[1], Inheritor::Thread(owner));
            }
            codes::TURNSTILE_ADDED_TO_TURNSTILE_HEAP => {
                self.inherits(e, e.args[1], Inheritor::Turnstile(e.args[0]));
            }
            codes::TURNSTILE_REMOVED_FROM_THREAD_HEAP => {
                let owner = self.tid(e.args[0]);
                if matches!(self.inheritors.get(&e.args[1]), Some(Inheritor::Thread(t)) if *t == owner)
                {
                    self.inheritors.remove(&e.args[1]);
                }
            }
            codes::TURNSTILE_REMOVED_FROM_TURNSTILE_HEAP => {
                if matches!(self.inheritors.get(&e.args[1]), Some(Inheritor::Turnstile(t)) if *t == e.args[0])
                {
                    self.inheritors.remove(&e.args[1]);
                }
                if let Some(p) = self.pushers.get_mut(&e.args[0]) {
                    p.retain(|t| *t != e.args[1]);
                }
            }
            codes::TRACE_LOST_EVENTS => {
                let from = self.last_ts.get(&cpu).copied().unwrap_or(ts);
                self.summary.lost_ranges.push((cpu, from.0, ts.0, None));
            }
            id => match codes::syscall(id) {
                Some(s) => self.syscall(e, me, ctx, s),
                None => self.other_syscall_or_unknown(e, me, ctx),
            },
        }
        self.last_ts.insert(cpu, ts);
    }

    fn syscall(&mut self, e: &KdEvent, me: Tid, ctx: Context, s: &'static Syscall) {
        let a = e.args;
        match e.func() {
            FuncQual::Start => {
                let (class, args, combined) = match s.args {
                    Args::Same => (s.linux, [a[0], a[1], a[2], a[3], 0, 0], false),
                    Args::WaitOn(i) => ("futex", [a[i], 0, 0, 0, 0, 0], false),
                    Args::WakeOn(i) => ("futex", [a[i], 1, 0, 0, 0, 0], false),
                    Args::SemwaitSignal if a[0] == 0 => ("nanosleep", [0; 6], false),
                    Args::SemwaitSignal => ("futex", [a[0], 0, 0, 0, 0, 0], false),
                    Args::MachMsg => {
                        let opts = a[1];
                        let recv = opts & codes::MACH_RCV_MSG != 0;
                        let send = opts & codes::MACH_SEND_MSG != 0;
                        let first = if recv && !send { "recvmsg" } else { "sendmsg" };
                        (first, [0; 6], recv && send)
                    }
                };
                let call = macos::encode(s.is_mach(), s.number, syscalls::number(class));
                self.thread(me).calls.push((e.eventid(), call, combined));
                self.push(e, me, ctx, EventKind::SysEnter { nr: call, args });
            }
            FuncQual::End => {
                let call = match self.close_call(me, e.eventid()) {
                    Some(call) => call,
                    // Entered before the trace began.
                    None => {
                        let class = match s.args {
                            Args::MachMsg => "recvmsg",
                            Args::WaitOn(_) | Args::WakeOn(_) => "futex",
                            _ => s.linux,
                        };
                        macos::encode(s.is_mach(), s.number, syscalls::number(class))
                    }
                };
                let class = syscalls::class(call);
                let ret = if s.is_mach() {
                    if codes::mach_timed_out(a[0]) {
                        -110
                    } else if a[0] != 0 {
                        -i64::from(u32::try_from(a[0]).unwrap_or(u32::MAX) & 0x7fff_ffff)
                    } else {
                        i64::from(class == nr("recvmsg"))
                    }
                } else {
                    match bsd_ret(&a) {
                        // A sleep that ran its course.
                        -110 if a[0] != 0 && class == nr("nanosleep") => 0,
                        ret => ret,
                    }
                };
                self.push(e, me, ctx, EventKind::SysExit { nr: call, ret });
            }
            _ => self.count_unknown(e),
        }
    }

    /// A BSD syscall or Mach trap outside the tables (kept, numbered above the Linux ones),
    /// or an event the mapping does not read (counted).
    fn other_syscall_or_unknown(&mut self, e: &KdEvent, me: Tid, ctx: Context) {
        let mach = match e.eventid() & 0xffff_0000 {
            codes::BSD_SYSCALL => false,
            codes::MACH_TRAP => true,
            _ => return self.count_unknown(e),
        };
        let number = macos::encode(mach, e.code(), None);
        match e.func() {
            FuncQual::Start => {
                self.thread(me).calls.push((e.eventid(), number, false));
                let a = e.args;
                self.push(
                    e,
                    me,
                    ctx,
                    EventKind::SysEnter {
                        nr: number,
                        args: [a[0], a[1], a[2], a[3], 0, 0],
                    },
                );
            }
            FuncQual::End => {
                self.close_call(me, e.eventid());
                let ret = bsd_ret(&e.args);
                self.push(e, me, ctx, EventKind::SysExit { nr: number, ret });
            }
            _ => self.count_unknown(e),
        }
    }

    /// Closes `me`'s innermost open call of `eventid` (and any left open inside it): the
    /// Linux number it was entered as.
    fn close_call(&mut self, me: Tid, eventid: u32) -> Option<i32> {
        let calls = &mut self.thread(me).calls;
        let i = calls.iter().rposition(|c| c.0 == eventid)?;
        let linux = calls[i].1;
        calls.truncate(i);
        Some(linux)
    }
}

/// A BSD syscall's result as Linux gives it: `-errno` when arg1 holds an error, else arg2.
fn bsd_ret(a: &[u64; 4]) -> i64 {
    if a[0] != 0 {
        -codes::linux_errno(a[0])
    } else {
        a[1] as i64
    }
}

fn nr(name: &str) -> i32 {
    syscalls::number(name).unwrap_or(-1)
}

/// The same macOS call as `call`, in the class of Linux syscall `class`.
fn in_class(call: i32, class: &str) -> i32 {
    match macos::decode(call) {
        Some((mach, number, _)) => macos::encode(mach, number, syscalls::number(class)),
        None => nr(class),
    }
}

/// Maps the events of `kd` (in time order; file order among equal times).
pub(super) fn map(kd: &KdFile) -> Mapped {
    let idle: HashSet<u64> = kd
        .events
        .iter()
        .filter(|e| e.eventid() == codes::MACH_IDLE)
        .map(|e| e.tid)
        .collect();
    let mut m = Mapper {
        kd,
        idle,
        renumbered: HashMap::new(),
        threads: BTreeMap::new(),
        processes: HashMap::new(),
        irqs: HashMap::new(),
        last_ts: HashMap::new(),
        inheritors: HashMap::new(),
        unowned: BTreeMap::new(),
        queued_on: HashMap::new(),
        pushers: HashMap::new(),
        dispatched: HashMap::new(),
        events: Vec::with_capacity(kd.events.len()),
        summary: ImportSummary::default(),
    };
    for t in &kd.threads {
        let tid = m.tid(t.tid);
        if tid.0 == 0 {
            continue;
        }
        let kernel = t.pid == 0;
        // kernel_task's threads are kernel threads, each its own task as on Linux.
        let pid = if kernel { tid.0 } else { t.pid };
        let th = m.thread(tid);
        th.pid = Some(pid);
        th.kernel = kernel;
        m.processes.entry(pid).or_insert_with(|| t.command.clone());
    }
    let mut order: Vec<usize> = (0..kd.events.len()).collect();
    order.sort_by_key(|&i| kd.events[i].timestamp);
    for i in order {
        m.event(&kd.events[i]);
    }
    if !m.renumbered.is_empty() {
        m.summary.notes.push(format!(
            "{} thread ids above {} renumbered below it",
            m.renumbered.len(),
            i32::MAX
        ));
    }
    let threads = m
        .threads
        .iter()
        .filter(|(&tid, _)| tid != 0)
        .map(|(&tid, t)| {
            let pid = t.pid.unwrap_or(tid);
            let process = m.processes.get(&pid).cloned();
            let comm = t
                .name
                .clone()
                .or_else(|| process.clone())
                .unwrap_or_default();
            ThreadInfo {
                tid: Tid(tid),
                pid: Pid(pid),
                process: process.unwrap_or_else(|| comm.clone()),
                comm,
                parent: t.parent,
                start_ns: t.start,
                exit_ns: t.exit,
                kernel: t.kernel,
            }
        })
        .collect();
    m.summary.cpus = kd
        .events
        .iter()
        .map(|e| e.cpu.saturating_add(1))
        .max()
        .unwrap_or(0)
        .max(kd.cpus.len() as u32);
    m.summary.start_ns = m.events.first().map(|e| e.ts);
    m.summary.end_ns = m.events.last().map(|e| e.ts);
    Mapped {
        events: m.events,
        threads,
        summary: m.summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::kdebug::{KdThread, KdVersion};

    const START: u32 = 1;
    const END: u32 = 2;

    fn bsc(name: &str) -> u32 {
        codes::eventid(codes::BSD.iter().find(|s| s.name == name).expect(name))
    }

    fn msc(name: &str) -> u32 {
        codes::eventid(codes::MACH.iter().find(|s| s.name == name).expect(name))
    }

    fn file(events: Vec<(u64, u64, u32, u32, [u64; 4])>) -> KdFile {
        KdFile {
            threads: vec![
                KdThread {
                    tid: 1001,
                    pid: 500,
                    command: "Mail".into(),
                },
                KdThread {
                    tid: 1002,
                    pid: 500,
                    command: "Mail".into(),
                },
                KdThread {
                    tid: 2001,
                    pid: 600,
                    command: "imagent".into(),
                },
                KdThread {
                    tid: 9,
                    pid: 0,
                    command: "kernel_task".into(),
                },
            ],
            events: events
                .into_iter()
                .map(|(ts, tid, debugid, cpu, args)| KdEvent {
                    offset: 0,
                    timestamp: ts * 3,
                    args,
                    tid,
                    debugid,
                    cpu,
                })
                .collect(),
            ..KdFile::new(KdVersion::V3, (125, 3))
        }
    }

    fn name_args(s: &str) -> [u64; 4] {
        let mut b = [0u8; 32];
        b[..s.len()].copy_from_slice(s.as_bytes());
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        [w(0), w(1), w(2), w(3)]
    }

    #[test]
    fn a_wait_a_wake_up_syscalls_and_a_mach_message() {
        let kmsg = 0xffff_ff80_1234_5000;
        let kd = file(vec![
            (100, 77, codes::MACH_IDLE | START, 0, [0; 4]),
            (101, 78, codes::MACH_IDLE | START, 1, [0; 4]),
            (110, 1001, bsc("BSC_read") | START, 1, [3, 0x7000, 64, 0]),
            (120, 1001, codes::MACH_WAIT, 1, [0xe1, 1, 0, 0]),
            (130, 1001, codes::MACH_SCHED, 1, [0, 78, 31, 0]),
            (200, 2001, bsc("BSC_write") | START, 0, [4, 0x8000, 8, 0]),
            (210, 2001, codes::MACH_MKRUNNABLE, 0, [1001, 31, 0, 0]),
            (220, 2001, bsc("BSC_write") | END, 0, [0, 8, 0, 0]),
            (230, 78, codes::MACH_SCHED, 1, [0, 1001, 0, 31]),
            (240, 1001, bsc("BSC_read") | END, 1, [0, 8, 0, 0]),
            (
                250,
                1002,
                bsc("BSC_psynch_cvwait") | START,
                2,
                [0xabc, 1, 2, 0xdd],
            ),
            (
                260,
                2001,
                bsc("BSC_ulock_wake") | START,
                0,
                [1, 0xdef, 0, 0],
            ),
            (
                270,
                1002,
                bsc("BSC_semwait_signal") | START,
                3,
                [0, 0, 1, 1],
            ),
            (
                280,
                1001,
                msc("MSC_mach_msg_trap") | START,
                1,
                [0x9000, 3, 64, 128],
            ),
            (290, 1001, codes::MACH_IPC_MSG_SEND, 1, [kmsg, 0, 0, 0]),
            (300, 2001, codes::MACH_IPC_MSG_RECV, 0, [kmsg, 0, 0, 0]),
            (310, 1001, msc("MSC_mach_msg_trap") | END, 1, [0, 0, 0, 0]),
            (
                320,
                2001,
                codes::INTERRUPT | START,
                0,
                [33, 0, 0, codes::INTR_TYPE_OTHER],
            ),
            (321, 2001, codes::MACH_MKRUNNABLE, 0, [1002, 31, 0, 0]),
            (322, 2001, codes::INTERRUPT | END, 0, [0; 4]),
            (330, 1001, codes::TRACE_DATA_NEWTHREAD, 1, [1003, 500, 0, 0]),
            (
                340,
                1003,
                codes::TRACE_STRING_THREADNAME | 3,
                1,
                name_args("worker-a"),
            ),
            (
                350,
                1003,
                codes::TRACE_DATA_THREAD_TERMINATE,
                1,
                [1003, 0, 0, 0],
            ),
            (360, 2001, 0x0501_0000, 0, [0; 4]),
            // The timer's interrupt names no handler: a wake-up in hard-IRQ context alone.
            (
                365,
                2001,
                codes::INTERRUPT | START,
                0,
                [0, 0, 0, codes::INTR_TYPE_TIMER],
            ),
            (366, 2001, codes::MACH_MKRUNNABLE, 0, [1001, 31, 0, 0]),
            (367, 2001, codes::INTERRUPT | END, 0, [0; 4]),
            (370, 2001, bsc("BSC_kevent") | END, 0, [0, 2, 0, 0]),
            (380, 1002, bsc("BSC_ulock_wait") | END, 2, [60, 0, 0, 0]),
            (390, 2001, 0x040c_0000 | 9 << 2 | START, 0, [5, 0, 0, 0]),
        ]);
        let m = map(&kd);
        // The macOS calls by name, each in its class (a send-and-receive `mach_msg_trap` in
        // two: its send part, then its receive).
        let n = |s: &str| macos::number(s).expect("a macOS call");
        let mach_msg = |class: &str| macos::encode(true, 31, syscalls::number(class));
        let got: Vec<(u64, i32, i32, Context, EventKind)> = m
            .events
            .iter()
            .map(|e| (e.ts.0, e.tid.0, e.pid.0, e.ctx, e.kind.clone()))
            .collect();
        let task = Context::Task;
        let want = vec![
            (
                13_750,
                1001,
                500,
                task,
                EventKind::SysEnter {
                    nr: n("read"),
                    args: [3, 0x7000, 64, 0, 0, 0],
                },
            ),
            (
                16_250,
                1001,
                500,
                task,
                EventKind::Switch {
                    prev: Tid(1001),
                    prev_state: TaskState::SLEEPING,
                    next: Tid(0),
                },
            ),
            (
                25_000,
                2001,
                600,
                task,
                EventKind::SysEnter {
                    nr: n("write"),
                    args: [4, 0x8000, 8, 0, 0, 0],
                },
            ),
            (
                26_250,
                2001,
                600,
                task,
                EventKind::Waking { target: Tid(1001) },
            ),
            (
                27_500,
                2001,
                600,
                task,
                EventKind::SysExit {
                    nr: n("write"),
                    ret: 8,
                },
            ),
            (
                28_750,
                0,
                0,
                task,
                EventKind::Switch {
                    prev: Tid(0),
                    prev_state: TaskState::RUNNABLE,
                    next: Tid(1001),
                },
            ),
            (
                30_000,
                1001,
                500,
                task,
                EventKind::SysExit {
                    nr: n("read"),
                    ret: 8,
                },
            ),
            (
                31_250,
                1002,
                500,
                task,
                EventKind::SysEnter {
                    nr: n("psynch_cvwait"),
                    args: [0xabc, 0, 0, 0, 0, 0],
                },
            ),
            (
                32_500,
                2001,
                600,
                task,
                EventKind::SysEnter {
                    nr: n("ulock_wake"),
                    args: [0xdef, 1, 0, 0, 0, 0],
                },
            ),
            (
                33_750,
                1002,
                500,
                task,
                EventKind::SysEnter {
                    nr: n("semwait_signal"),
                    args: [0; 6],
                },
            ),
            (
                35_000,
                1001,
                500,
                task,
                EventKind::SysEnter {
                    nr: mach_msg("sendmsg"),
                    args: [0; 6],
                },
            ),
            (36_250, 1001, 500, task, EventKind::SockReady { sk: kmsg }),
            (
                36_250,
                1001,
                500,
                task,
                EventKind::SysExit {
                    nr: mach_msg("sendmsg"),
                    ret: 1,
                },
            ),
            (
                36_250,
                1001,
                500,
                task,
                EventKind::SysEnter {
                    nr: mach_msg("recvmsg"),
                    args: [0; 6],
                },
            ),
            (
                37_500,
                2001,
                600,
                task,
                EventKind::SockRecv { sk: kmsg, ret: 1 },
            ),
            (
                38_750,
                1001,
                500,
                task,
                EventKind::SysExit {
                    nr: mach_msg("recvmsg"),
                    ret: 1,
                },
            ),
            (
                40_000,
                2001,
                600,
                Context::HardIrq,
                EventKind::IrqEntry { irq: 33 },
            ),
            (
                40_125,
                2001,
                600,
                Context::HardIrq,
                EventKind::Waking { target: Tid(1002) },
            ),
            (
                40_250,
                2001,
                600,
                Context::HardIrq,
                EventKind::IrqExit { irq: 33 },
            ),
            (
                41_250,
                1001,
                500,
                task,
                EventKind::Fork {
                    child: Tid(1003),
                    child_pid: Pid(500),
                    thread: true,
                },
            ),
            (43_750, 1003, 500, task, EventKind::Exit),
            (
                45_750,
                2001,
                600,
                Context::HardIrq,
                EventKind::Waking { target: Tid(1001) },
            ),
            (
                46_250,
                2001,
                600,
                task,
                EventKind::SysExit {
                    nr: n("kevent"),
                    ret: 2,
                },
            ),
            (
                47_500,
                1002,
                500,
                task,
                EventKind::SysExit {
                    nr: n("ulock_wait"),
                    ret: -110,
                },
            ),
            (
                48_750,
                2001,
                600,
                task,
                EventKind::SysEnter {
                    nr: macos::encode(false, 9, None),
                    args: [5, 0, 0, 0, 0, 0],
                },
            ),
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "event {i}");
        }
        assert!(m.events.iter().enumerate().all(|(i, e)| e.seq == i as u64));
        assert_eq!(m.summary.unknown.get("kdebug 0x05010000"), Some(&1));
        let names: Vec<(i32, i32, &str, &str)> = m
            .threads
            .iter()
            .map(|t| (t.tid.0, t.pid.0, t.comm.as_str(), t.process.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                (9, 9, "kernel_task", "kernel_task"),
                (1001, 500, "Mail", "Mail"),
                (1002, 500, "Mail", "Mail"),
                (1003, 500, "worker-a", "Mail"),
                (2001, 600, "imagent", "imagent"),
            ]
        );
        let worker = m.threads.iter().find(|t| t.tid.0 == 1003).expect("decodes");
        assert_eq!(worker.parent, Some(Tid(1001)));
        assert_eq!(
            (worker.start_ns, worker.exit_ns),
            (Some(Nanos(41_250)), Some(Nanos(43_750)))
        );
        assert!(
            m.threads
                .iter()
                .find(|t| t.tid.0 == 9)
                .expect("kernel_task's thread")
                .kernel
        );
        assert_eq!(m.summary.cpus, 4);
    }

    /// A new process (not a thread of the creator's) takes its creator's name until it execs.
    #[test]
    fn a_new_process_and_its_exec() {
        let kd = file(vec![
            (10, 2001, codes::TRACE_DATA_NEWTHREAD, 0, [3001, 700, 0, 0]),
            (20, 3001, codes::TRACE_DATA_EXEC, 0, [700, 0, 0, 0]),
            (
                21,
                3001,
                codes::TRACE_STRING_EXEC | START,
                0,
                name_args("a-long-program-name-"),
            ),
            (
                22,
                3001,
                codes::TRACE_STRING_EXEC | END,
                0,
                name_args("that-goes-on"),
            ),
            (30, 2001, codes::TRACE_LOST_EVENTS, 0, [0; 4]),
            // kdebug_trace_string("argus:flag-set 0x7f001000 by me"): 16 bytes, then 32.
            (40, 3001, codes::TRACE_STRING_GLOBAL | START, 0, {
                let a = name_args("argus:flag-set 0");
                [0x2100_0000, 7, a[0], a[1]]
            }),
            (
                40,
                3001,
                codes::TRACE_STRING_GLOBAL | END,
                0,
                name_args("x7f001000 by me"),
            ),
        ]);
        let m = map(&kd);
        let kinds: Vec<&EventKind> = m.events.iter().map(|e| &e.kind).collect();
        assert_eq!(
            kinds,
            vec![
                &EventKind::Fork {
                    child: Tid(3001),
                    child_pid: Pid(700),
                    thread: false
                },
                &EventKind::Exec,
                &EventKind::Marker {
                    text: "argus:flag-set 0x7f001000 by me".into()
                }
            ]
        );
        let t = m.threads.iter().find(|t| t.tid.0 == 3001).expect("decodes");
        assert_eq!(
            (t.pid.0, t.comm.as_str(), t.process.as_str()),
            (
                700,
                "a-long-program-name-that-goes-on",
                "a-long-program-name-that-goes-on"
            )
        );
        assert_eq!(m.summary.lost_ranges, vec![(0, 2_750, 3_750, None)]);
    }

    /// A thread created in kernel_task (pid 0) mid-trace is a kernel thread, its own task,
    /// as kernel_task's threads of the thread map are.
    #[test]
    fn a_thread_created_in_kernel_task_is_a_kernel_thread() {
        let kd = file(vec![(
            10,
            2001,
            codes::TRACE_DATA_NEWTHREAD,
            0,
            [3002, 0, 0, 0],
        )]);
        let m = map(&kd);
        let t = m.threads.iter().find(|t| t.tid.0 == 3002).expect("created");
        assert!(t.kernel, "{t:?}");
        assert_eq!(t.pid.0, 3002, "{t:?}");
    }

    /// The (waiter, owner, lock) of each `LockOwner` record mapped.
    fn lock_owners(m: &Mapped) -> Vec<(i32, i32, u64)> {
        m.events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::LockOwner { owner, lock } => Some((e.tid.0, owner.0, lock)),
                _ => None,
            })
            .collect()
    }

    /// Turnstiles: a waiter queued before its turnstile names an owner learns it when the
    /// turnstile pushes on a thread (the first waiter); one queued later learns it at once;
    /// a turnstile pushing on another reaches that one's owner; a released turnstile names
    /// no owner any more.
    #[test]
    fn turnstile_inheritors_name_the_owners_of_the_locks_waited_for() {
        let (t1, t2) = (0xffff_ff80_0000_1000u64, 0xffff_ff80_0000_2000u64);
        let kd = file(vec![
            // 1001 blocks on t1 (owned by 2001): queued, then the turnstile pushes on 2001.
            (
                10,
                1001,
                codes::TURNSTILE_THREAD_ADDED_TO_WAITQ,
                0,
                [t1, 1001, 31, 0],
            ),
            (
                11,
                1001,
                codes::TURNSTILE_ADDED_TO_THREAD_HEAP,
                0,
                [2001, t1, 31, 0],
            ),
            // 1002 blocks on t1 too: its owner is known already.
            (
                20,
                1002,
                codes::TURNSTILE_THREAD_ADDED_TO_WAITQ,
                1,
                [t1, 1002, 31, 0],
            ),
            // t2 pushes on t1 (a port's turnstile on a workloop's): 9's wait reaches 2001.
            (
                30,
                9,
                codes::TURNSTILE_THREAD_ADDED_TO_WAITQ,
                0,
                [t2, 9, 31, 0],
            ),
            (
                31,
                9,
                codes::TURNSTILE_ADDED_TO_TURNSTILE_HEAP,
                0,
                [t1, t2, 31, 0],
            ),
            // t1 is released: a waiter queued on it now has no owner to name.
            (
                40,
                2001,
                codes::TURNSTILE_REMOVED_FROM_THREAD_HEAP,
                0,
                [2001, t1, 0, 0],
            ),
            (
                50,
                1001,
                codes::TURNSTILE_THREAD_ADDED_TO_WAITQ,
                0,
                [t1, 1001, 31, 0],
            ),
        ]);
        let m = map(&kd);
        let owners = lock_owners(&m);
        assert_eq!(
            owners,
            vec![(1001, 2001, t1), (1002, 2001, t1), (9, 2001, t2)]
        );
        assert!(m.summary.unknown.is_empty(), "{:?}", m.summary.unknown);
    }

    /// Waiters whose owner comes later: one woken before it is named nobody; one queued on a
    /// turnstile that pushes on another learns the owner when the other one gets it.
    #[test]
    fn a_woken_waiter_names_no_owner_and_a_chain_learns_it_late() {
        let (t1, t2, t3) = (0x1000u64, 0x2000u64, 0x3000u64);
        let kd = file(vec![
            (
                10,
                1001,
                codes::TURNSTILE_THREAD_ADDED_TO_WAITQ,
                0,
                [t1, 1001, 31, 0],
            ),
            (11, 2001, codes::MACH_MKRUNNABLE, 1, [1001, 31, 0, 0]),
            (
                12,
                1002,
                codes::TURNSTILE_THREAD_ADDED_TO_WAITQ,
                0,
                [t2, 1002, 31, 0],
            ),
            (
                13,
                1002,
                codes::TURNSTILE_ADDED_TO_TURNSTILE_HEAP,
                0,
                [t3, t2, 31, 0],
            ),
            (
                20,
                9,
                codes::TURNSTILE_ADDED_TO_THREAD_HEAP,
                1,
                [2001, t1, 31, 0],
            ),
            (
                21,
                9,
                codes::TURNSTILE_ADDED_TO_THREAD_HEAP,
                1,
                [2001, t3, 31, 0],
            ),
        ]);
        let m = map(&kd);
        let owners = lock_owners(&m);
        assert_eq!(owners, vec![(1002, 2001, t2)]);
    }

    /// A record on CPU `u32::MAX` counts `u32::MAX` CPUs instead of overflowing.
    // See: issue 18 (fuzzing, target `import_kdebug`), docs/fuzzing.md.
    #[test]
    fn gh_18_a_record_on_the_last_cpu_number() {
        let kd = file(vec![(
            10,
            2001,
            codes::MACH_MKRUNNABLE,
            u32::MAX,
            [1001, 0, 0, 0],
        )]);
        let m = map(&kd);
        assert_eq!(m.summary.cpus, u32::MAX);
        assert_eq!(m.events.len(), 1);
        assert_eq!(m.events[0].cpu, Cpu(u32::MAX));
    }
}
