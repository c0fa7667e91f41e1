//! Findings: the decisions of the walk as data, part of the report's JSON contract
//! (`docs/report.md`).
//!
//! Every root cause carries a [`Finding`] (why that segment is a culprit), every path item a
//! [`Step`] (what that segment did, and why the walk went through it), and every thread
//! examined during a window a [`During`]. The walk decides; the module `walk::phrases` (public
//! as [`Phrases`](crate::Phrases)) turns these into the English `reason`, `description` and
//! `during_hang` strings beside them. Tests assert on these values, not on the phrases.
//!
//! ```text
//!   walk ──► Finding / Step / During ──► Phrases ──► reason / description / during_hang
//!             (data, JSON: tagged,                     (words, for people)
//!              snake_case)
//! ```
//!
//! Conventions: durations are `*_ns`, instants are [`Nanos`] on the trace clock, syscalls are
//! names (`futex`), threads are [`Tid`]s (the report's items name them). The thread a finding
//! is about is the root cause's or path item's own `tid`; other threads appear as fields
//! (`woke`: the thread it woke; `poller`: the thread of a polling loop). Every enum has an
//! `unknown` variant: what an older report (without the field) or a newer one (with a variant
//! this version does not know) reads as.

use crate::path_edge::PathEdgeKind;
use argus_schema::{Nanos, Strength, Tid};
use serde::{Deserialize, Serialize};

/// Why a root cause is a culprit. JSON: an object tagged by `kind`
/// (`{"kind": "slept", "syscall": "nanosleep", "wait_ns": 3000000000, ...}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// Busy on CPU: most of its run (or of the hang, for the hung thread itself) on CPU.
    Busy {
        /// Time on CPU.
        on_cpu_ns: u64,
        /// The run it was measured over (the hang, for the hung thread).
        run_ns: u64,
        /// The thread it woke late; `null` when the culprit is the hung thread itself.
        woke: Option<Tid>,
        /// The run counts from before brief waits (a page fault, a hand-off) that split it.
        through_brief_waits: bool,
        /// Still running when the trace ended.
        still_running: bool,
    },
    /// Runnable but starved of CPU: little time on CPU over its run.
    Starved {
        /// Time on CPU.
        on_cpu_ns: u64,
        /// The run (or hang) it was measured over.
        run_ns: u64,
        /// Times it was preempted.
        preemptions: u32,
        /// The thread it woke late; `null` when the culprit is the hung thread itself.
        woke: Option<Tid>,
        /// Still running when the trace ended.
        still_running: bool,
        /// How much of the run falls in lost-events ranges: when it is most of the time off
        /// CPU, the thread's waits there were not recorded and "starved" is a guess.
        #[serde(default)]
        lost_ns: u64,
    },
    /// Slept (a sleep syscall).
    Slept {
        /// The sleep syscall.
        syscall: String,
        /// How long.
        wait_ns: u64,
        /// Still sleeping when the trace ended.
        still_sleeping: bool,
        /// The thread it woke after the sleep; `null` when it is the waiting thread itself.
        woke: Option<Tid>,
    },
    /// Woken by its own timer: the thread armed the timer that ended its wait.
    OwnTimer {
        /// The syscall it waited in.
        syscall: String,
        /// How long.
        wait_ns: u64,
        /// A sleep (`true`) or a wait that timed out (`false`).
        slept: bool,
    },
    /// Its wait timed out: nobody woke it.
    TimedOut {
        /// The syscall.
        syscall: String,
        /// How long, the timed-out waits on the same object before it included.
        wait_ns: u64,
    },
    /// Its wait was never ended by a wake-up.
    NeverWoken {
        /// The syscall.
        syscall: String,
        /// How long.
        wait_ns: u64,
        /// It exited while waiting (else: still waiting when the trace ended).
        exited: bool,
    },
    /// Its wait was ended by a wake-up the trace does not show.
    WakeUntraced {
        /// The syscall.
        syscall: String,
        /// How long.
        wait_ns: u64,
        /// When the wait ended.
        ended_at: Nanos,
    },
    /// Blocked, and the walk was stopped here (an answer `stop`).
    Stopped {
        /// The syscall.
        syscall: String,
        /// How long.
        wait_ns: u64,
    },
    /// The walk reached its step limit (`max_depth`) at this segment.
    DepthLimit {
        /// The limit.
        steps: usize,
    },
    /// Blocked, and the walk reached its step limit before explaining the wait.
    DepthLimitInWait {
        /// The syscall.
        syscall: String,
        /// How long.
        wait_ns: u64,
        /// The limit.
        steps: usize,
    },
    /// Its thread is already on the path: the threads wait for each other.
    Circular,
    /// It armed the timer that woke `woke` and is already on the path.
    CircularTimer {
        /// The thread the timer woke.
        woke: Tid,
    },
    /// It had waited itself before it woke `woke`, and the walk could not go further: the
    /// walk was stopped, or the wake-up ending its wait was not traced.
    WaitedThenWoke {
        /// The thread it woke.
        woke: Tid,
        /// The syscall of its own wait; `null` when the wait is not in the trace.
        syscall: Option<String>,
        /// How long it waited (0 when unknown).
        wait_ns: u64,
        /// The walk was stopped here (else: the wake-up was not traced).
        walk_stopped: bool,
    },
    /// It first appears in the trace late (at `at`), then woke `woke`; nothing earlier is
    /// known.
    FirstSeen {
        /// The thread it woke.
        woke: Tid,
        /// When it first appears.
        at: Nanos,
    },
    /// It created `created` (the waker of `woke`) only `late_ns` after the wait began.
    CreatedLate {
        /// The thread it created.
        created: Tid,
        /// How long after the wait began.
        late_ns: u64,
        /// The thread the created one woke.
        woke: Tid,
    },
    /// It was created only `late_ns` after the wait began, by a creator the trace does not
    /// show, then woke `woke`.
    CreatorUntraced {
        /// How long after the wait began.
        late_ns: u64,
        /// The thread it woke.
        woke: Tid,
    },
    /// An interrupt woke `woke` and nothing in the trace raised it.
    Interrupt {
        /// The thread it woke.
        woke: Tid,
        /// How long after the wait began.
        after_ns: u64,
        /// A device interrupt (hard irq): the thread waited for the device.
        device: bool,
    },
    /// An interrupt woke `woke`, and the walk was stopped here.
    InterruptStopped {
        /// The thread it woke.
        woke: Tid,
    },
    /// A timer expiry woke `woke`; who armed it is not in the trace.
    TimerArmUntraced {
        /// The thread it woke.
        woke: Tid,
    },
    /// It armed a timer that fired `fired_after_ns` later and woke `woke`.
    TimerArmed {
        /// The thread the timer woke.
        woke: Tid,
        /// Arming to expiry.
        fired_after_ns: u64,
    },
    /// The hung thread polls a data flag and no other thread of its process ran during the
    /// loop: the setter is not in the trace.
    PollNoSetter {
        /// The loop's short waits.
        waits: u32,
        /// Their syscall.
        syscall: String,
        /// The loop's length.
        loop_ns: u64,
    },
    /// The hung thread polls a data flag; the walk was stopped before naming the setter.
    PollStopped {
        /// The loop's short waits.
        waits: u32,
        /// Their syscall.
        syscall: String,
        /// The loop's length.
        loop_ns: u64,
    },
    /// The likely (guessed) setter of the flag `poller` polls, busy on CPU through the loop.
    LikelySetterBusy {
        /// The polling (hung) thread.
        poller: Tid,
        /// Its time on CPU during the loop.
        on_cpu_ns: u64,
        /// The loop's length.
        loop_ns: u64,
    },
    /// The likely (guessed) setter of the flag `poller` polls, blocked through the loop.
    LikelySetterBlocked {
        /// The polling (hung) thread.
        poller: Tid,
        /// The syscall it was blocked in.
        syscall: String,
        /// How long during the loop.
        blocked_ns: u64,
    },
    /// The likely (guessed) setter of the flag `poller` polls, neither busy nor blocked.
    LikelySetter {
        /// The polling (hung) thread.
        poller: Tid,
        /// What it did during the loop.
        during: During,
    },
    /// It held the lock `poller` waited for (a file lock it retries, a lock whose owner the
    /// kernel named) and was busy on CPU through the wait.
    LockHolderBusy {
        /// The thread that wanted the lock (retrying, or blocked on it).
        poller: Tid,
        /// Its time on CPU during the wait.
        on_cpu_ns: u64,
        /// The wait's length (the retry loop's, the blocked wait's).
        loop_ns: u64,
    },
    /// It held the lock `poller` waited for while it was blocked through the wait.
    LockHolderBlocked {
        /// The thread that wanted the lock (retrying, or blocked on it).
        poller: Tid,
        /// The syscall it was blocked in.
        syscall: String,
        /// How long during the wait.
        blocked_ns: u64,
    },
    /// It held the lock `poller` waited for, neither busy nor blocked.
    LockHolder {
        /// The thread that wanted the lock (retrying, or blocked on it).
        poller: Tid,
        /// What it did during the wait.
        during: During,
    },
    /// It set the flag `poller` polls (known from the trace) after running through the loop.
    FlagSetRunning {
        /// The polling (hung) thread.
        poller: Tid,
        /// From the loop's start to the flag's setting.
        after_ns: u64,
        /// Its time on CPU meanwhile.
        on_cpu_ns: u64,
    },
    /// It set the flag `poller` polls (known from the trace) after being blocked itself.
    FlagSetAfterWait {
        /// The polling (hung) thread.
        poller: Tid,
        /// The syscall it was blocked in.
        syscall: String,
        /// How long.
        wait_ns: u64,
    },
    /// It set the flag `poller` polls (known from the trace), but only started at `started`.
    FlagSetLate {
        /// The polling (hung) thread.
        poller: Tid,
        /// When its segment started.
        started: Nanos,
    },
    /// A thread on a baseline's wake-up path (or the one now in its role) behaved abnormally
    /// during the hang of `waiter`: exited, blocked, busy, or otherwise not doing its part.
    OnBaselinePath {
        /// The hung (waiting) thread.
        waiter: Tid,
        /// It is the baseline's waker (else: further back on its wake-up path).
        normally_wakes: bool,
        /// What it did during the hang.
        during: During,
        /// Its blocked segment is already on the path (a circular wait).
        circular: bool,
    },
    /// A finding this version does not know, or none (a report older than findings).
    #[default]
    #[serde(other)]
    Unknown,
}

/// What a path item's segment did, and why the walk went through it. JSON: an object tagged
/// by `kind`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// The hang: the wait that lasted.
    HangWait {
        /// The syscall.
        syscall: String,
        /// How long (from the first wait of a logical wait).
        wait_ns: u64,
        /// Still blocked when the trace ended.
        still_blocked: bool,
        /// Several waits on one object (timed-out retries) make one logical wait.
        logical: Option<LogicalWait>,
    },
    /// The hang: a long run.
    HangRun {
        /// Time on CPU.
        on_cpu_ns: u64,
        /// The hang's length.
        hang_ns: u64,
    },
    /// The hang: a polling loop of short waits.
    HangPoll {
        /// The loop's length.
        loop_ns: u64,
        /// Its short waits.
        waits: u32,
        /// Their syscall.
        syscall: String,
        /// Time on CPU.
        on_cpu_ns: u64,
    },
    /// A waker on the causal chain: how it acted, and what it had been doing.
    Waker {
        /// How it acted on the previous item.
        by: By,
        /// What the walk found about it.
        then: WakerState,
    },
    /// An interrupt (timer expiry, device, softirq) that woke the previous item.
    WokenByInterrupt,
    /// The creator of the previous item's thread.
    CreatedBy {
        /// The syscall that created it (`clone`).
        syscall: Option<String>,
    },
    /// Its thread blocked in a wait that covers the window being explained.
    Blocked {
        /// The syscall.
        syscall: String,
        /// How long (within the window).
        blocked_ns: u64,
    },
    /// Its thread slept before waking the previous item.
    Slept {
        /// The syscall.
        syscall: String,
        /// How long.
        wait_ns: u64,
        /// The timer that ended the sleep fired in an interrupt the trace does not explain.
        untraced_timer: bool,
    },
    /// The thread armed its own timer and then waited in `syscall` until it fired.
    OwnTimer {
        /// The syscall.
        syscall: String,
        /// How long.
        wait_ns: u64,
        /// A sleep (`true`) or a wait that timed out (`false`).
        slept: bool,
    },
    /// It armed the timer that woke the previous item.
    TimerArmedBy {
        /// The syscall that armed it.
        syscall: Option<String>,
        /// Arming to expiry.
        before_ns: u64,
    },
    /// What started the run of a busy culprit (`role`: `input` or `context`).
    RunBegan {
        /// How it started the run.
        how: RunStart,
        /// The syscall it acted through.
        syscall: Option<String>,
        /// When.
        at: Nanos,
    },
    /// The likely (guessed) setter of the flag the hung thread polls.
    LikelySetter {
        /// What it did during the loop.
        during: During,
    },
    /// The holder of the lock a thread waits for: a file lock the hung thread retries (a
    /// lock-file edge), a lock whose owner the kernel named (a lock-owner edge).
    LockHolder {
        /// The thread that wanted the lock (retrying, or blocked on it).
        poller: Tid,
        /// Its lock operation (lock file), or when the waiter blocked (lock owner).
        at: Nanos,
        /// Strength of the edge.
        #[serde(with = "crate::path_edge::lower_strength")]
        strength: Strength,
    },
    /// The setter of the flag the hung thread polls, known from the trace.
    FlagSet {
        /// When it set the flag.
        at: Nanos,
        /// How that is known.
        evidence: FlagEvidence,
    },
    /// A thread of a baseline's wake-up path (or the one now in its role), as seen during the
    /// hang.
    Baseline {
        /// It is the baseline's waker (else: further back on its wake-up path).
        normally_wakes: bool,
        /// The thread on the baseline path (this item's `tid` when it still existed).
        baseline_tid: Tid,
        /// The syscall it acted through in the baseline.
        syscall: Option<String>,
        /// When the baseline's wait began.
        baseline_at: Nanos,
        /// How long the baseline's wait lasted.
        baseline_wait_ns: u64,
        /// What it did during the hang.
        during: During,
    },
    /// A step this version does not know, or none (a report older than steps).
    #[default]
    #[serde(other)]
    Unknown,
}

/// Several waits on one object (the earlier ones timed out) taken as one wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogicalWait {
    /// How many waits.
    pub waits: u32,
    /// How many of them timed out.
    pub timeouts: u32,
}

/// How a waker acted on the item before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum By {
    /// Through a causal edge of the graph.
    Edge {
        /// The edge kind.
        edge: PathEdgeKind,
        /// The syscall it acted through.
        syscall: Option<String>,
    },
    /// Its thread's previous segment, split from this one without a wait (a heuristic cut).
    Continuing,
    /// The same thread earlier: the segment after its wait that covers the window.
    Earlier,
}

/// What the walk found about a waker (see [`Step::Waker`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WakerState {
    /// Already on the path (a circular wait).
    Again,
    /// Not examined: the walk reached its step limit.
    NotExamined,
    /// Busy on CPU through the window.
    Busy {
        /// Time on CPU.
        on_cpu_ns: u64,
        /// Its run.
        run_ns: u64,
        /// The run counts from before brief waits that split it.
        through_brief_waits: bool,
    },
    /// Runnable through the window but starved of CPU.
    Starved {
        /// Time on CPU.
        on_cpu_ns: u64,
        /// Its run.
        run_ns: u64,
        /// How much of the run falls in lost-events ranges (see [`Finding::Starved`]).
        #[serde(default)]
        lost_ns: u64,
    },
    /// Its segment was split from the previous one without a wait; the walk continued there.
    Split,
    /// Its thread was blocked most of the window, then worked a while (through shorter waits,
    /// passed over) before it acted.
    BlockedEarlier {
        /// The syscall of the wait covering most of the window.
        syscall: String,
        /// How much of the window it covers.
        blocked_ns: u64,
        /// When that wait ended.
        until: Nanos,
        /// From then until it acted.
        worked_ns: u64,
        /// Shorter waits after it, passed over.
        passed_waits: u32,
    },
    /// It had itself waited (or slept) before it acted.
    HadWaited {
        /// The syscall.
        syscall: String,
        /// How long (a logical wait counts whole).
        wait_ns: u64,
        /// A sleep.
        slept: bool,
    },
    /// Its thread was only created at `at`.
    CreatedAt {
        /// When.
        at: Nanos,
    },
    /// Its thread first appears in the trace at `at`.
    FirstSeenAt {
        /// When.
        at: Nanos,
    },
    /// It acted in a work item (a kernel work item, or a user-space dispatch probed with
    /// its enqueue) that was queued only at `at`, late in the window: the walk went on to
    /// the segment that queued it.
    QueuedLate {
        /// When the item was queued.
        at: Nanos,
    },
    /// Its thread spent the window in many short waits, no one of which explains it, and
    /// `by` ended most of that blocked time: the walk went on to `by` (a hand-off chain, as
    /// between a runtime's threads).
    WokenThroughWindow {
        /// The thread whose wake-ups ended most of its waits.
        by: Tid,
        /// How many of its waits `by` ended.
        waits: u32,
        /// How much of the window those waits cover.
        covered_ns: u64,
    },
}

/// How the run of a busy culprit began (see [`Step::RunBegan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStart {
    /// Its thread was created.
    Created,
    /// It received data (a message edge).
    ReceivedData,
    /// A timer fired.
    Timer,
    /// It was sent input (queued work, a signal, a send syscall).
    SentInput,
    /// It was woken.
    Woken,
}

/// How the setter of a flag is known (see [`Step::FlagSet`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FlagEvidence {
    /// A flag edge of the graph, made from a watchpoint write at `watchpoint` when known.
    GraphEdge {
        /// Strength of the edge.
        #[serde(with = "crate::path_edge::lower_strength")]
        strength: Strength,
        /// The address of the matching watchpoint write.
        watchpoint: Option<u64>,
    },
    /// A watchpoint write to an address the loop reads.
    Watchpoint {
        /// The address.
        addr: u64,
    },
    /// An `argus:flag-set` application marker.
    Marker {
        /// The marker's text.
        text: String,
    },
}

/// What a thread did during a window (a hang, a loop). JSON: an object tagged by `state`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum During {
    /// It exited (before or during the window).
    Exited {
        /// When.
        at: Nanos,
    },
    /// Blocked most of the window.
    Blocked {
        /// The syscall.
        syscall: String,
        /// How much of the window.
        blocked_ns: u64,
        /// Still waiting when the trace ended.
        still_waiting: bool,
    },
    /// Running on CPU most of the window.
    Running {
        /// Time on CPU in the window.
        on_cpu_ns: u64,
    },
    /// No segment of it in the window.
    NotSeen,
    /// Neither mostly blocked nor mostly running.
    Active {
        /// Its segments in the window.
        segments: u32,
        /// Time on CPU in the window.
        on_cpu_ns: u64,
        /// It stopped running (blocked or exited) shortly before the window's end.
        stopped_near_end: bool,
    },
    /// A state this version does not know, or none (a report older than this field).
    #[default]
    #[serde(other)]
    Unknown,
}
