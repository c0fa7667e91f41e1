//! # argus-schema — the vocabulary every Argus crate shares
//!
//! Argus debugs application hangs with *interactive causal tracing*. This crate defines the
//! data that flows between the stages, and nothing else: no I/O, no timely, no Parquet.
//!
//! ```text
//!  collector ─► ingest ─► Event ─► pipeline ─► Segment / CausalEdge / Spin ─► sinks ─► diagnose
//! ```
//!
//! Vocabulary:
//! - **event** ([`Event`]): one kernel trace record after decoding, time on `CLOCK_MONOTONIC`
//!   ([`Nanos`]), with its position `seq` in the merged, time-ordered stream.
//! - **segment** ([`Segment`]): a vertex of the event graph. One thread's execution from the
//!   wake-up (or creation, or first sighting) that started it until the wake-up that ends the
//!   blocking wait it finished with. So a segment is *run, then wait*: its `wait_start_ns`
//!   splits it. Interrupt handling gets segments of its own on a per-CPU pseudo-thread
//!   ([`Tid::irq`]), never charged to the interrupted task.
//! - **causal edge** ([`CausalEdge`]): `src` segment caused `dst` segment, with an
//!   [`EdgeKind`] and a [`Strength`]: strong (surely causal) or weak (maybe causal). Each
//!   kind's facts (name, code, how the diagnosis weighs it) are one row of [`EDGE_KINDS`]
//!   ([`edge_kinds`]).
//! - **spinning vertex** ([`Spin`]): a segment (or a run of yield segments) of a thread that
//!   lasted longer than the threshold, classified [`SpinClass`].
//! - **hang**: a spinning vertex in a watched thread, the start of a diagnosis.
//!
//! Callers own I/O and ordering; this crate only guarantees that ids are deterministic (the
//! same input gives the same [`SegmentId`]s whatever the number of workers) and that the Arrow
//! schemas in [`arrow_schema`] match the structs field for field.
//!
//! ```
//! use argus_schema::{SegmentId, Tid};
//! let id = SegmentId::new(Tid(42), 7);
//! assert_eq!(id.tid(), Tid(42));
//! assert_eq!(id.seq(), 7);
//! ```
#![warn(missing_docs)]

pub mod arrow_schema;
pub mod edge_kinds;
pub mod hash;
pub mod markers;
pub mod syscalls;

pub use edge_kinds::{EdgeKind, EdgeKindInfo, EDGE_KINDS};

use serde::{Deserialize, Serialize};
use std::fmt;

/// Version of the snapshot layout written to `manifest.json`.
pub const SCHEMA_VERSION: u32 = 2;

/// A time on the trace clock (`CLOCK_MONOTONIC`, tracefs `trace_clock=mono`), in nanoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Nanoseconds from `self` to `later`, zero when `later` is earlier.
    pub fn until(self, later: Nanos) -> u64 {
        later.0.saturating_sub(self.0)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A dataflow epoch: the index of a closed batch of events. Not a time of day.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Epoch(pub u64);

/// A kernel task id (what the kernel calls `pid`, what user space calls a thread id).
///
/// Negative values are Argus pseudo-threads: `Tid::irq(cpu)` holds the interrupt, softirq and
/// timer-expiry processing done on `cpu`, cut out of whichever task it interrupted.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Tid(pub i32);

impl Tid {
    /// The idle task (`swapper/N`) on every CPU.
    pub const IDLE: Tid = Tid(0);

    /// The pseudo-thread that runs interrupt context on `cpu`.
    pub fn irq(cpu: Cpu) -> Tid {
        Tid(-1 - cpu.0 as i32)
    }

    /// Whether this is an interrupt pseudo-thread, and for which CPU.
    pub fn irq_cpu(self) -> Option<Cpu> {
        (self.0 < 0).then(|| Cpu((-1 - self.0) as u32))
    }

    /// Whether this is a real task other than the idle task.
    pub fn is_task(self) -> bool {
        self.0 > 0
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.irq_cpu() {
            Some(cpu) => write!(f, "irq@cpu{}", cpu.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// A process id (thread group id).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Pid(pub i32);

/// A CPU number.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Cpu(pub u32);

/// Identifies a segment: the thread and the segment's ordinal within that thread.
///
/// Deterministic: ordinals count the thread's segments in trace order, so the same trace
/// gives the same ids whatever the number of workers or the batch sizes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SegmentId(pub u64);

impl SegmentId {
    /// The id of segment number `seq` of thread `tid`.
    pub fn new(tid: Tid, seq: u32) -> SegmentId {
        SegmentId(((tid.0 as u32 as u64) << 32) | seq as u64)
    }
    /// The thread this segment belongs to.
    pub fn tid(self) -> Tid {
        Tid((self.0 >> 32) as u32 as i32)
    }
    /// The ordinal of the segment within its thread.
    pub fn seq(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.tid(), self.seq())
    }
}

/// What context a record was emitted in, from the `common_flags` of the record.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Context {
    /// Process context: the record belongs to the current task.
    #[default]
    Task,
    /// Softirq (bottom half) context.
    SoftIrq,
    /// Hard interrupt context.
    HardIrq,
    /// Non-maskable interrupt context.
    Nmi,
}

impl Context {
    /// Decodes the context bits of a tracefs record's `common_flags`
    /// (`TRACE_FLAG_HARDIRQ` 0x08, `TRACE_FLAG_SOFTIRQ` 0x10, `TRACE_FLAG_NMI` 0x40,
    /// include/linux/trace_events.h).
    pub fn from_common_flags(flags: u8) -> Context {
        if flags & 0x40 != 0 {
            Context::Nmi
        } else if flags & 0x08 != 0 {
            Context::HardIrq
        } else if flags & 0x10 != 0 {
            Context::SoftIrq
        } else {
            Context::Task
        }
    }

    /// Whether this is any interrupt context.
    pub fn is_interrupt(self) -> bool {
        self != Context::Task
    }

    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Context::Task => "task",
            Context::SoftIrq => "softirq",
            Context::HardIrq => "hardirq",
            Context::Nmi => "nmi",
        }
    }
}

/// The state a task left the CPU in (`prev_state` of `sched_switch`), as the letter the
/// kernel prints: `R` runnable (preempted), `S` sleeping, `D` uninterruptible, `T` stopped,
/// `t` traced, `X` dead, `Z` zombie, `P` parked, `I` idle, `+` runnable-preempted.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct TaskState(pub u8);

impl TaskState {
    /// Runnable: the task was preempted and did not block.
    pub const RUNNABLE: TaskState = TaskState(b'R');
    /// Interruptible sleep.
    pub const SLEEPING: TaskState = TaskState(b'S');
    /// Uninterruptible sleep.
    pub const DISK: TaskState = TaskState(b'D');
    /// Dead.
    pub const DEAD: TaskState = TaskState(b'X');

    /// Whether switching out in this state is a blocking wait (anything but runnable).
    pub fn is_blocking(self) -> bool {
        self.0 != b'R' && self.0 != b'+'
    }

    /// The letter, as a char.
    pub fn letter(self) -> char {
        self.0 as char
    }
}

/// A decoded trace record. `tid` is the current task (`common_pid`); `pid` its process as
/// resolved by ingest (equal to `tid` when unknown).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Event {
    /// Time on the trace clock.
    pub ts: Nanos,
    /// Position in the merged, time-ordered stream of the trace: unique, gapless per trace.
    pub seq: u64,
    /// The CPU whose ring buffer held the record.
    pub cpu: Cpu,
    /// Process (thread group) of `tid`.
    pub pid: Pid,
    /// Current task when the record was written.
    pub tid: Tid,
    /// Process or interrupt context.
    pub ctx: Context,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of event Argus understands, with their payloads.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// `sched:sched_switch`: `prev` left the CPU in `prev_state`, `next` got it.
    Switch {
        /// The task leaving the CPU.
        prev: Tid,
        /// The state it left in.
        prev_state: TaskState,
        /// The task taking the CPU.
        next: Tid,
    },
    /// `sched:sched_waking`: the current task (or interrupt) wakes `target`.
    Waking {
        /// The task being woken.
        target: Tid,
    },
    /// `sched:sched_wakeup_new`: a newly created task is woken for the first time.
    WakeupNew {
        /// The new task.
        target: Tid,
    },
    /// `sched:sched_process_fork` (and `task:task_newtask` when present): `child` created by
    /// the current task. `thread` is true for a thread (`CLONE_THREAD`) of the same process.
    Fork {
        /// The created task.
        child: Tid,
        /// The child's process id as resolved by ingest.
        child_pid: Pid,
        /// Whether the child is a thread of the creator's process.
        thread: bool,
    },
    /// `sched:sched_process_exec`: the current task executed a new program.
    Exec,
    /// `sched:sched_process_exit`: the current task exits.
    Exit,
    /// `raw_syscalls:sys_enter`.
    SysEnter {
        /// Syscall number (x86-64 numbering on x86-64).
        nr: i32,
        /// The six argument registers.
        args: [u64; 6],
    },
    /// `raw_syscalls:sys_exit`.
    SysExit {
        /// Syscall number.
        nr: i32,
        /// Return value (negative errno on failure).
        ret: i64,
    },
    /// `irq:irq_handler_entry`.
    IrqEntry {
        /// Interrupt line.
        irq: i32,
    },
    /// `irq:irq_handler_exit`.
    IrqExit {
        /// Interrupt line.
        irq: i32,
    },
    /// `irq:softirq_entry`.
    SoftirqEntry {
        /// Softirq vector (0 HI, 1 TIMER, 2 NET_TX, 3 NET_RX, 4 BLOCK, 5 IRQ_POLL, 6 TASKLET,
        /// 7 SCHED, 8 HRTIMER, 9 RCU).
        vec: u32,
    },
    /// `irq:softirq_exit`.
    SoftirqExit {
        /// Softirq vector.
        vec: u32,
    },
    /// `timer:hrtimer_start`: the current task (or interrupt) arms a high-resolution timer.
    HrtimerStart {
        /// Address of the `struct hrtimer`.
        timer: u64,
        /// Address of the expiry callback.
        function: u64,
        /// Absolute expiry time (ns, the timer's clock).
        expires: u64,
    },
    /// `timer:hrtimer_expire_entry`: a timer fires (interrupt context).
    HrtimerExpire {
        /// Address of the `struct hrtimer`.
        timer: u64,
        /// Address of the expiry callback.
        function: u64,
    },
    /// `timer:hrtimer_expire_exit`.
    HrtimerExpireExit {
        /// Address of the `struct hrtimer`.
        timer: u64,
    },
    /// An application marker written to `trace_marker` (`ftrace:print`).
    Marker {
        /// The marker text.
        text: String,
    },
    /// `workqueue:workqueue_queue_work`: the current task (or interrupt) queues kernel work.
    WorkQueue {
        /// Address of the `struct work_struct`.
        work: u64,
        /// Address of the work function.
        function: u64,
    },
    /// `workqueue:workqueue_execute_start`: a worker starts a work item.
    WorkStart {
        /// Address of the `struct work_struct`.
        work: u64,
        /// Address of the work function.
        function: u64,
    },
    /// `workqueue:workqueue_execute_end`: a worker finished a work item.
    WorkEnd {
        /// Address of the `struct work_struct`.
        work: u64,
    },
    /// `timer:timer_start`: a (wheel) timer is armed.
    TimerStart {
        /// Address of the `struct timer_list`.
        timer: u64,
        /// Address of the callback.
        function: u64,
        /// Expiry in jiffies.
        expires: u64,
    },
    /// `timer:timer_expire_entry`: a wheel timer's callback starts (softirq context).
    TimerExpire {
        /// Address of the `struct timer_list`.
        timer: u64,
        /// Address of the callback.
        function: u64,
    },
    /// `timer:timer_expire_exit`.
    TimerExpireExit {
        /// Address of the `struct timer_list`.
        timer: u64,
    },
    /// `signal:signal_generate`: the current task (or interrupt) sends `sig` to `target`.
    SignalGenerate {
        /// Signal number.
        sig: i32,
        /// Receiving task.
        target: Tid,
    },
    /// `signal:signal_deliver`: the current task takes delivery of `sig`.
    SignalDeliver {
        /// Signal number.
        sig: i32,
    },
    /// A call stack recorded for the previous record on the same CPU (tracefs
    /// `stacktrace` / `userstacktrace`), innermost frame first.
    Stack {
        /// Kernel stack (true) or user stack (false).
        kernel: bool,
        /// Return addresses.
        ips: Vec<u64>,
    },
    /// A hardware watchpoint hit on a shared data flag (perf breakpoint event).
    FlagAccess {
        /// The watched address.
        addr: u64,
        /// Whether the access was a write.
        write: bool,
    },
    /// A file lock operation by the current task, from the kernel's own record of it
    /// (`filelock:posix_lock_inode` for `fcntl` record locks and their release on close,
    /// `filelock:flock_lock_inode` for `flock` and its release on the last close): the
    /// locked file by device and inode, whatever descriptor it went through.
    FileLock {
        /// Inode number (`i_ino`).
        inode: u64,
        /// Device (`s_dev`, the kernel's encoding: major << 20 | minor).
        dev: u32,
        /// `flock` (true) or POSIX/OFD record lock (false): the two never conflict.
        flock: bool,
        /// Lock type: 0 `F_RDLCK`, 1 `F_WRLCK`, 2 `F_UNLCK` (a release).
        lock_type: u8,
        /// The kernel's result: 0 granted (or released), negative errno (`-EAGAIN`,
        /// `-EACCES`: held by another owner), 1 (`FILE_LOCK_DEFERRED`) when a blocking
        /// request will wait.
        ret: i32,
    },
    /// `sock:sk_data_ready`: data (or a connection, on a listening socket) was queued for
    /// reading on the socket `sk` (the kernel's `struct sock` address). In a sender's
    /// context it is the delivery of the sender's data: for a unix socket inside its
    /// `sendmsg`, for loopback TCP in the softirq its own send runs.
    SockReady {
        /// The receiving socket (`struct sock *`).
        sk: u64,
    },
    /// `sock:sock_recv_length`: a receive by the current task on socket `sk` (any
    /// `read`/`recv*` on a socket) returned `ret` (bytes, or a negative errno).
    SockRecv {
        /// The socket read (`struct sock *`).
        sk: u64,
        /// The receive's result: bytes read, or a negative errno.
        ret: i32,
    },
    /// The current task blocks on a lock whose owner the kernel names: on macOS a
    /// turnstile's inheritor (`TURNSTILE_thread_added_to_turnstile_waitq` for the waiter,
    /// `TURNSTILE_turnstile_added_to_thread_heap` for the owner, through
    /// `TURNSTILE_turnstile_added_to_turnstile_heap` when one turnstile pushes on another);
    /// on Linux a priority-inheritance futex whose owner the waiter boosts
    /// (`sched:sched_pi_setprio` in the waiter's context).
    LockOwner {
        /// The task holding the lock.
        owner: Tid,
        /// The lock (a turnstile's address; 0 when the kernel does not say).
        lock: u64,
    },
}

impl EventKind {
    /// Stable lowercase name, the `kind` column of the events table.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Switch { .. } => "switch",
            EventKind::Waking { .. } => "waking",
            EventKind::WakeupNew { .. } => "wakeup_new",
            EventKind::Fork { .. } => "fork",
            EventKind::Exec => "exec",
            EventKind::Exit => "exit",
            EventKind::SysEnter { .. } => "sys_enter",
            EventKind::SysExit { .. } => "sys_exit",
            EventKind::IrqEntry { .. } => "irq_entry",
            EventKind::IrqExit { .. } => "irq_exit",
            EventKind::SoftirqEntry { .. } => "softirq_entry",
            EventKind::SoftirqExit { .. } => "softirq_exit",
            EventKind::HrtimerStart { .. } => "hrtimer_start",
            EventKind::HrtimerExpire { .. } => "hrtimer_expire",
            EventKind::HrtimerExpireExit { .. } => "hrtimer_expire_exit",
            EventKind::Marker { .. } => "marker",
            EventKind::WorkQueue { .. } => "work_queue",
            EventKind::WorkStart { .. } => "work_start",
            EventKind::WorkEnd { .. } => "work_end",
            EventKind::TimerStart { .. } => "timer_start",
            EventKind::TimerExpire { .. } => "timer_expire",
            EventKind::TimerExpireExit { .. } => "timer_expire_exit",
            EventKind::SignalGenerate { .. } => "signal_generate",
            EventKind::SignalDeliver { .. } => "signal_deliver",
            EventKind::Stack { .. } => "stack",
            EventKind::FlagAccess { .. } => "flag_access",
            EventKind::FileLock { .. } => "file_lock",
            EventKind::SockReady { .. } => "sock_ready",
            EventKind::SockRecv { .. } => "sock_recv",
            EventKind::LockOwner { .. } => "lock_owner",
        }
    }
}

/// What a segment of a pseudo-thread or a task is.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum SegmentKind {
    /// A run of a task followed by the wait it blocked in.
    #[default]
    Task,
    /// A hardware interrupt handler (`irq` line).
    HardIrq {
        /// Interrupt line.
        irq: i32,
    },
    /// A softirq run (`vec`).
    SoftIrq {
        /// Softirq vector.
        vec: u32,
    },
    /// A high-resolution timer expiry.
    Timer {
        /// Address of the `struct hrtimer`.
        timer: u64,
        /// Address of the callback.
        function: u64,
    },
    /// Interrupt-context work with no enclosing handler record (IPIs, the local timer vector).
    Interrupt,
    /// A kernel work item run by a worker thread (`workqueue_execute_start..end`).
    WorkItem {
        /// Address of the `struct work_struct`.
        work: u64,
        /// Address of the work function.
        function: u64,
    },
}

impl SegmentKind {
    /// Stable lowercase name.
    pub fn name(&self) -> &'static str {
        match self {
            SegmentKind::Task => "task",
            SegmentKind::HardIrq { .. } => "hardirq",
            SegmentKind::SoftIrq { .. } => "softirq",
            SegmentKind::Timer { .. } => "timer",
            SegmentKind::Interrupt => "interrupt",
            SegmentKind::WorkItem { .. } => "work_item",
        }
    }
}

/// Why a segment started.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum StartCause {
    /// The first record of the thread in the trace (it existed before the trace started).
    #[default]
    FirstSeen,
    /// The thread was created (fork/clone) during the trace.
    Created,
    /// A wake-up ended the previous segment's wait.
    Woken,
    /// An interrupt-context entry record.
    Interrupt,
}

impl StartCause {
    /// Every cause, in declaration order.
    pub const ALL: [StartCause; 4] = [
        StartCause::FirstSeen,
        StartCause::Created,
        StartCause::Woken,
        StartCause::Interrupt,
    ];

    /// Stable lowercase name.
    pub fn name(&self) -> &'static str {
        match self {
            StartCause::FirstSeen => "first_seen",
            StartCause::Created => "created",
            StartCause::Woken => "woken",
            StartCause::Interrupt => "interrupt",
        }
    }
}

/// Why a segment ended.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum EndCause {
    /// Still going at the end of the input seen so far.
    #[default]
    Open,
    /// A wake-up ended its wait; the thread's next segment starts at `end_ns`.
    Woken,
    /// The thread exited.
    Exit,
    /// The interrupt handler returned.
    HandlerDone,
}

impl EndCause {
    /// Every cause, in declaration order.
    pub const ALL: [EndCause; 4] = [
        EndCause::Open,
        EndCause::Woken,
        EndCause::Exit,
        EndCause::HandlerDone,
    ];

    /// Stable lowercase name.
    pub fn name(&self) -> &'static str {
        match self {
            EndCause::Open => "open",
            EndCause::Woken => "woken",
            EndCause::Exit => "exit",
            EndCause::HandlerDone => "handler_done",
        }
    }
}

/// A vertex of the event graph: one thread's run and the blocking wait that ended it.
///
/// ```text
///  start_ns            wait_start_ns                end_ns
///     │ on CPU / runnable │ blocked in wait_syscall    │ (next segment starts here)
///     ├───────────────────┼────────────────────────────┤
/// ```
///
/// An open segment (`end == EndCause::Open`) ends at the last record seen for its thread.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Segment {
    /// Deterministic id (thread + ordinal).
    pub id: SegmentId,
    /// Thread (or interrupt pseudo-thread).
    pub tid: Tid,
    /// Process.
    pub pid: Pid,
    /// Task or interrupt kind.
    pub kind: SegmentKind,
    /// When it started.
    pub start_ns: Nanos,
    /// When it ended (the last record seen for an open segment).
    pub end_ns: Nanos,
    /// Why it started.
    pub start: StartCause,
    /// Why it ended.
    pub end: EndCause,
    /// When the thread blocked in the wait that ends the segment, if it did.
    pub wait_start_ns: Option<Nanos>,
    /// `prev_state` letter of the blocking switch (0 when it did not block).
    pub wait_state: u8,
    /// Syscall the thread was in when it blocked (-1 none or unknown).
    pub wait_syscall: i32,
    /// Return value of that syscall once known (timeouts show as 0 or -ETIMEDOUT).
    pub wait_ret: Option<i64>,
    /// What the wait waited on, from the syscall's arguments: the futex word's address, the
    /// descriptor (`read`/`recv*`, `epoll_wait`'s epoll descriptor, `wait4`'s pid), a
    /// `poll`/`select` set (array address mixed with its length); `None` for sleeps, yields
    /// and waits outside a known syscall. Consecutive timed-out waits on one object make one
    /// logical wait (ARCHITECTURE.md §6).
    #[serde(default)]
    pub wait_object: Option<u64>,
    /// Time spent on a CPU.
    pub on_cpu_ns: u64,
    /// Number of involuntary switch-outs (preemptions).
    pub preemptions: u32,
    /// Number of `sched_yield` calls.
    pub yields: u32,
    /// Number of syscalls entered.
    pub syscalls: u32,
    /// Number of records of the thread in the segment.
    pub events: u32,
    /// Syscall numbers entered in the segment, in order, deduplicated consecutively, at most
    /// [`Segment::MAX_SYSCALLS`] (the semantic signature used to find baselines).
    pub syscall_seq: Vec<i32>,
}

impl Segment {
    /// How many syscall numbers `syscall_seq` keeps.
    pub const MAX_SYSCALLS: usize = 16;

    /// A segment that starts (and, so far, ends) at `ts`, open, with nothing counted yet and
    /// no wait: the state every rule machine starts a vertex from.
    pub fn starting(
        id: SegmentId,
        pid: Pid,
        kind: SegmentKind,
        ts: Nanos,
        start: StartCause,
    ) -> Segment {
        Segment {
            id,
            tid: id.tid(),
            pid,
            kind,
            start_ns: ts,
            end_ns: ts,
            start,
            end: EndCause::Open,
            wait_start_ns: None,
            wait_state: 0,
            wait_syscall: -1,
            wait_ret: None,
            wait_object: None,
            on_cpu_ns: 0,
            preemptions: 0,
            yields: 0,
            syscalls: 0,
            events: 0,
            syscall_seq: Vec::new(),
        }
    }

    /// Duration in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.start_ns.until(self.end_ns)
    }

    /// Time blocked in the final wait (zero when it did not block).
    pub fn wait_ns(&self) -> u64 {
        self.wait_start_ns.map_or(0, |w| w.until(self.end_ns))
    }

    /// Whether the final wait ended in a timeout or a plain sleep rather than a wake-up by
    /// somebody else, judged from the syscall and its result.
    pub fn wait_timed_out(&self) -> bool {
        syscalls::is_timeout(self.wait_syscall, self.wait_ret)
    }
}

/// How sure Argus is that an edge is causal.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Strength {
    /// Maybe causal: ask the user before relying on it.
    #[default]
    Weak,
    /// A weak edge promoted because syscall semantics or stacks show one piece of work
    /// split by a heuristic (Argus's "boosted" edges): followed like a strong edge, reported
    /// as boosted.
    Boosted,
    /// Surely causal.
    Strong,
}

impl Strength {
    /// Every strength, weakest first.
    pub const ALL: [Strength; 3] = [Strength::Weak, Strength::Boosted, Strength::Strong];
}

impl Strength {
    /// Stable lowercase name.
    pub fn name(&self) -> &'static str {
        match self {
            Strength::Weak => "weak",
            Strength::Boosted => "boosted",
            Strength::Strong => "strong",
        }
    }
}

/// A causal edge of the event graph.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CausalEdge {
    /// The causing segment.
    pub src: SegmentId,
    /// The caused segment.
    pub dst: SegmentId,
    /// Relationship.
    pub kind: EdgeKind,
    /// Strong or weak.
    pub strength: Strength,
    /// When the causing action happened (the waking, the fork, the arming).
    pub ts: Nanos,
    /// The syscall the source was in when it acted (-1 none, e.g. interrupt context).
    pub src_syscall: i32,
}

/// The class of a spinning vertex (Algorithm 1 of the paper).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum SpinClass {
    /// Mostly on a CPU (or runnable, waiting for one).
    #[default]
    LongRunning,
    /// A loop of short sleeps, timeouts or yields: waiting on a data flag.
    RepeatedYield,
    /// Blocked in one long wait.
    LongWait,
}

impl SpinClass {
    /// The name used in reports (`LongRunning`, `RepeatedYield`, `LongWait`).
    pub fn name(&self) -> &'static str {
        match self {
            SpinClass::LongRunning => "LongRunning",
            SpinClass::RepeatedYield => "RepeatedYield",
            SpinClass::LongWait => "LongWait",
        }
    }
}

/// A spinning vertex: a thread that made no externally caused progress for longer than the
/// threshold. For `RepeatedYield` it spans a run of segments (`first`..=`last`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Spin {
    /// The segment that spins (the first of a yield run).
    pub segment: SegmentId,
    /// The last segment of a yield run (equal to `segment` otherwise).
    pub last: SegmentId,
    /// Thread.
    pub tid: Tid,
    /// Process.
    pub pid: Pid,
    /// Class.
    pub class: SpinClass,
    /// Start of the spin.
    pub start_ns: Nanos,
    /// End of the spin; for a spin still going, the watermark it was last seen at.
    pub end_ns: Nanos,
    /// Whether it was still going at `end_ns`.
    pub open: bool,
    /// Time on CPU within it.
    pub on_cpu_ns: u64,
    /// Time blocked within it.
    pub wait_ns: u64,
    /// Number of segments (yield iterations) it spans.
    pub segments: u32,
    /// The wait syscall of the (last) blocking wait (-1 none).
    pub wait_syscall: i32,
    /// For a logical wait (a LongWait made of consecutive timed-out waits on one object,
    /// ended by a real wake-up or still going), how many of its waits timed out; 0 for a
    /// single wait and for the other classes.
    #[serde(default)]
    pub timeouts: u32,
}

impl Spin {
    /// Duration in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.start_ns.until(self.end_ns)
    }
}

/// One thread known to the trace, from `/proc` at start and from fork/exec/rename records.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// Thread id.
    pub tid: Tid,
    /// Process id.
    pub pid: Pid,
    /// Thread name (`comm`), the last one seen.
    pub comm: String,
    /// Name of the process (its main thread's comm).
    pub process: String,
    /// Creating task, if the creation was traced or /proc told.
    pub parent: Option<Tid>,
    /// When it was created, if traced.
    pub start_ns: Option<Nanos>,
    /// When it exited, if traced.
    pub exit_ns: Option<Nanos>,
    /// Whether it is a kernel thread (no user address space).
    pub kernel: bool,
}

/// A record that could not be used, with why. Errors are data: counted, written to
/// `errors.parquet`, shown at the end; never a panic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// Where: a file path and byte offset, or a stage name.
    pub source: String,
    /// Byte offset within `source`, when it is a file.
    pub offset: Option<u64>,
    /// Time of the record, when known.
    pub ts: Option<Nanos>,
    /// What went wrong.
    pub message: String,
}

/// Receives the differential updates of a collection: `(record, diff)` pairs at an epoch.
/// `pipeline` pushes through it; `sinks` implements it. A diff of +1 inserts, -1 retracts.
pub trait UpdateSink<T> {
    /// Applies one batch of updates, all at `epoch`.
    fn apply(&mut self, epoch: Epoch, updates: &mut dyn Iterator<Item = (T, i64)>);
}

/// A thread-name lookup, as built from the threads table.
pub fn describe_thread(threads: &[ThreadInfo], tid: Tid) -> String {
    if let Some(cpu) = tid.irq_cpu() {
        return format!("interrupts on cpu{}", cpu.0);
    }
    match threads.iter().find(|t| t.tid == tid) {
        Some(t) if t.pid.0 == t.tid.0 => format!("{} (pid {})", t.comm, t.pid.0),
        Some(t) => format!(
            "thread {} (tid {}) of {} (pid {})",
            t.comm, t.tid.0, t.process, t.pid.0
        ),
        None => format!("tid {}", tid.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_ids_round_trip_for_tasks_and_irq_threads() {
        for tid in [Tid(1), Tid(4_194_304), Tid::irq(Cpu(0)), Tid::irq(Cpu(63))] {
            let id = SegmentId::new(tid, 123);
            assert_eq!(id.tid(), tid);
            assert_eq!(id.seq(), 123);
        }
        assert_eq!(Tid::irq(Cpu(3)).irq_cpu(), Some(Cpu(3)));
        assert_eq!(Tid(5).irq_cpu(), None);
    }

    #[test]
    fn context_from_flags() {
        assert_eq!(Context::from_common_flags(0x01), Context::Task);
        assert_eq!(Context::from_common_flags(0x09), Context::HardIrq);
        assert_eq!(Context::from_common_flags(0x10), Context::SoftIrq);
        assert_eq!(Context::from_common_flags(0x48), Context::Nmi);
    }

    #[test]
    fn nanos_display() {
        assert_eq!(Nanos(3_000_000_123).to_string(), "3.000000123");
    }
}
