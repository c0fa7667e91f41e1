//! The segment and edge rules, as per-key state machines.
//!
//! Every event is routed to one or more *keys* ([`route`]): the thread it concerns (as actor,
//! as target of a wake-up, fork or signal, as the task switched in or out), the per-CPU
//! interrupt pseudo-thread for interrupt-context work, and one key per kernel object that
//! joins an action with its later effect: the `struct hrtimer` or `struct timer_list`
//! address for timers, the `struct work_struct` address for queued work, a pipe or socket
//! channel (fd identity, or a user-declared pipe) or a socket's address (the socket data
//! records) for data dependencies, and a watched address for data flags. Each key owns a
//! small state machine ([`KeyState`]) fed with that key's events in `seq` order. A machine
//! produces:
//!
//! - **final** records, emitted once and never retracted: closed segments, thread-order
//!   edges, edge endpoints ([`Src`], [`Dst`], [`Pair`]), closed spins, rule counters;
//! - **mutable** records, recomputed at every epoch end ([`KeyState::mutable`]): the open
//!   tail segment, the last closed segment while the result of its wait is not yet known,
//!   a thread-order edge whose boost is not yet decided, the endpoints produced inside a
//!   message syscall that has not returned, open spins. The caller retracts the previous
//!   version and inserts the new one.
//!
//! Edges across keys are joins on the event's `seq`: the actor side says which segment did
//! the waking/forking/arming/queueing/signalling ([`Src`]), the target side which segment it
//! started ([`Dst`]), and the object keys pair an action with the effect it caused
//! ([`Pair`]).
//!
//! ```text
//!  waker thread ──Src{seq, seg}──┐
//!                                ├─ join on seq ─► CausalEdge{src seg → dst seg}
//!  wakee thread ──Dst{seq, seg}──┘       (wake-up, fork, signal)
//!  armer ──Src{arm}── join ── Pair{arm, fire} ── join ── Dst{fire, seg}
//!        (timers, work items, pipe data dependencies)
//! ```
//!
//! # The rules, by their names in the papers
//!
//! Segment boundaries (ComputeGraph lines 1.a–1.e; ARCHITECTURE.md §4):
//!
//! - **thread life cycle**: a thread's first record, its creation, its exit.
//! - **blocking wait** (1.b): a blocking `sched_switch` ends the segment — at the wake-up,
//!   since a segment is *run, then wait* — **unless** the thread is inside a callout
//!   (`callout_level > 0`): a kernel worker that blocks in the middle of a work item stays
//!   one segment, and the wake-up points into it.
//! - **callouts** (1.c, `Dispatch_invoke`): each work item (`workqueue_execute_start..end` in
//!   a kernel worker) is a segment of its own, [`SegmentKind::WorkItem`]; a work item
//!   started inside another splits it, and the outer item's two parts are joined by a
//!   *boosted* thread-order edge (one piece of work split by the rule). User-space
//!   dispatches are callouts too: between the markers `argus:dispatch-begin NAME` and
//!   `argus:dispatch-end NAME` ([`DISPATCH_BEGIN`]; from `trace_marker` or the collector's
//!   uprobes) the thread runs one callback, a `WorkItem` segment with `work` 0 and
//!   `function` [`dispatch_id`]`(NAME)`; with probes that fetch the item
//!   (`--dispatch …@N --enqueue …@N`) it begins with `work_start { work: item }` and is
//!   joined to its enqueue's `work_queue` by a queue edge (2.c, `Dispatch_enqueue`).
//! - **interrupt cut-out** (1.a): hard interrupts, softirqs and timer callbacks (hrtimer and
//!   wheel timers) are segments of the per-CPU pseudo-thread [`Tid::irq`], never of the task
//!   they interrupted.
//! - **message peer set** (1.d, `IPC_peer_set`): each data-transfer syscall of a thread
//!   (`read`, `write`, `readv`, `writev`, `send*`, `recv*`, that moved data) has a peer set:
//!   the connection (from fd identity, [`RulesConfig::message_channel`]: a pipe's inode, the
//!   unordered pair of a connected socket's inodes, so both directions and every descriptor
//!   of one connection are one peer, and a descriptor number reused for another connection is
//!   another peer; a declared `[[pipe]]`; else the descriptor number `args[0]`, which stops
//!   standing for its connection once the thread closes it), the tasks its send woke, and,
//!   for a receive that blocked and was woken, the waker. When two consecutive message
//!   operations of a segment have
//!   disjoint peer sets, the segment is split at the entry of the second one (undoing an
//!   epoll loop that serves many clients in one run). After a readiness wait (`epoll_wait`,
//!   `poll`, `select`) woken by a task, a first operation on a connection known (from an
//!   earlier send through it that woke one task) to lead to another task is split off too:
//!   the loop served another ready client before the waker's. Only descriptors known to be
//!   connections take part — one through which a wake-up went, in this thread, since it was
//!   last closed — so log writes and file reads do not cut a request in two. The decision
//!   is taken when the syscall returns (only then is it known whom it woke and whether it
//!   moved data); the split is placed at its entry, and the endpoints produced inside it are
//!   held back until then.
//! - **signal delivery**: a delivered signal (`signal_deliver`) starts a segment (the handler
//!   is an asynchronous callout), unless the current segment just started with a wake-up
//!   and has done nothing yet.
//! - **user-defined boundaries** (1.e, "other heuristics"): `[[split]]` rules of the rules
//!   file ([`crate::rulesfile`]): at the entry of a syscall, or at an application marker.
//!
//! Edges (ComputeGraph lines 2.a–2.f; ARCHITECTURE.md §5), see [`wake_edge`]:
//!
//! - **wait ↔ wake** (2.a, `AddWeakEdge`): for every wake-up that ended a wait, a weak
//!   [`EdgeKind::WaitWake`] edge from the segment that ended in the wait to the waker's
//!   segment (the waker may have been working for the waiter), see [`join_edges`].
//! - **wake-up** (2.a): waker's segment → the segment the wake-up starts. *Strong* when the
//!   waker shows intent: interrupt context or a work item (delegated work), a data-transfer
//!   syscall, a notification (`kill`, `exit`…); *weak* otherwise (futex hand-offs may be
//!   mere mutual exclusion).
//! - **message** (2.b): a wake-up sent from inside a data-transfer syscall that ends a wait
//!   in a receive or readiness wait (`read`, `recv*`, `poll`, `epoll_wait`…) is a
//!   [`EdgeKind::Message`] (strong), and so is a `connect` that wakes a listener in
//!   `accept` or polling its socket (a connection request). A reply sent by another thread
//!   than the receiver is covered: the edge goes from whichever thread's send woke the
//!   client.
//!   **Data dependency through a pipe or socket** where the reader did not block: the
//!   last write into the channel → the read that returned data from it, as
//!   [`EdgeKind::Message`]. Channels come from the fd identity the collector records
//!   ([`RulesConfig::channels`]: a pipe's two ends share its inode; a socket's writes feed
//!   its peer's reads) or are declared (`[[pipe]]` in the rules file). A thread reading
//!   back its own write is not an edge. Sockets need no fd identity when the kernel has
//!   the socket data events ([`EventKind::SockReady`], [`EventKind::SockRecv`]): the
//!   delivery a write made to the receiving socket → the receive that drained it, keyed by
//!   the socket's address ([`Key::Sock`], [`SockState`]).
//! - **lock file**: file locks (`flock`, `fcntl` record locks) as the kernel records them
//!   ([`EventKind::FileLock`]: device, inode, type, result; releases on close and exit
//!   included), keyed by file ([`lock_key`], [`Key::Lock`]). A wake-up of a task blocked in
//!   `flock` or `fcntl(F_SETLKW)` is a strong [`EdgeKind::LockFile`] (the unlock, close or
//!   exit that released it). Lock attempts that are refused (`EAGAIN`/`EACCES`, a retry
//!   loop) are linked to the latest granted operation of each other process on the file
//!   (once per segment), and a lock granted after refusals to the releases by others since
//!   the refusal: boosted [`EdgeKind::LockFile`] edges ([`LockState`], docs/rules.md).
//! - **lock owner**: a task blocking on a lock whose owner the kernel names
//!   ([`EventKind::LockOwner`]: a macOS turnstile's inheritor, a Linux PI futex's owner) →
//!   a strong [`EdgeKind::LockOwner`] edge from the owner's segment at that moment (running,
//!   or blocked in a wait of its own) to the segment the waiter's wait ends. It does not end
//!   the wait; the walk follows it when no wake-up did (a lock never released, a chain of
//!   owners each waiting for the next).
//! - **flag** (2.f): a write to a watched data flag (hardware watchpoint,
//!   [`EventKind::FlagAccess`]) → the next reads of it by other threads, as
//!   [`EdgeKind::Flag`] (joined on the process and address).
//! - **queue** (2.c): `workqueue_queue_work` → the work item's segment (joined on the
//!   `work_struct` address).
//! - **timer** (2.e): `hrtimer_start` / `timer_start` → the expiry's interrupt segment
//!   (joined on the timer address); a wake-up from that segment is then attributed to the
//!   armer through it.
//! - **softirq raised by a device interrupt**: a device softirq (NET_TX, NET_RX, BLOCK,
//!   IRQ_POLL, TASKLET) run on return from a hard interrupt (the next interrupt record on
//!   that CPU, within 1 ms) gets a *boosted* [`EdgeKind::Queue`] edge from the hard
//!   interrupt: it is the interrupt's bottom half.
//! - **signal**: `signal_generate` → the target's segment that starts at the matching
//!   `signal_deliver`. A process-directed signal (`kill(pid)`: generated for the group
//!   leader) delivered in another thread of the group is paired through the leader's
//!   [`Key::ProcSignal`] key.
//! - **process**: fork → the child's first segment; a wake-up by an exiting task that ends a
//!   `wait4`/`waitid` is an [`EdgeKind::Exit`] edge instead of a wake-up.
//! - **thread order** (weak): previous segment → next segment of the same thread. *Pruned*
//!   for kernel delegate threads ([`RulesConfig::kernel_threads`]) and around work items
//!   (each item serves a different requester). *Boosted* when syscall semantics show one
//!   piece of work split by a heuristic: the wait that ended the previous segment returned
//!   `EINTR`/`EAGAIN`/`ERESTART*` and the next syscall retries the same call; and across a
//!   nested callout. Until the retry is known the edge is reported weak (mutable).
//!   **Call stacks** (`argus record --stacks`) prune or boost it too, see below.
//! - **user rules**: a futex wake-up on a declared condition variable becomes a strong
//!   [`EdgeKind::Rule`] edge; weak wake-ups between threads of a declared worker pool are
//!   boosted.
//! - **culled** (§4.1 of the paper: "scheduler maintenance … culled out"): wake-ups, timer
//!   and queue edges done by kernel maintenance callbacks ([`RulesConfig::cull_functions`],
//!   e.g. `tick_nohz_handler`, `tick_sched_timer`, `rcu_*`, filled by the caller from
//!   kallsyms with [`is_maintenance_callback`]) and by or to maintenance threads
//!   ([`RulesConfig::cull_threads`], e.g. `rcu_preempt`) are dropped and counted.
//!
//! Every split, pruned edge and culled connection is counted ([`Counter`]), for the graph
//! statistics ([`crate::stats`]).
//!
//! # Thread order and call stacks
//!
//! The papers prune a thread-order edge "when the two segments' stacks share no symbol" and
//! boost it when the stacks show one piece of work split by a heuristic. The pipeline has
//! return addresses, not symbols (symbolization runs in `argus build` after the fact), so
//! it uses **call sites** as the symbol proxy: the return addresses of the caller frames of
//! a user stack (`ips[1..]` of an [`EventKind::Stack`] with `kernel: false`; `ips[0]` is
//! the instruction the thread stopped at, inside the syscall wrapper). Two equal return
//! addresses are the same call site in the same function, and, calls being direct, the
//! same function entered from it. The approximation: a function called from two places is
//! two different "symbols" (the same callback dispatched from two call sites of a loop
//! looks like two), and an indirect call site that enters different functions is one.
//!
//! Stack events follow the event they were taken at, same thread and time: a blocking
//! `sched_switch` and a `sched_waking` (`--stacks`), or the `sys_enter` of a chosen syscall
//! (`--stacks read,write,…`). Per thread, only when it has stacks ([`ThreadState`] keeps
//! nothing otherwise):
//!
//! - the **end stack** of a segment is the last user stack taken at a blocking switch or a
//!   syscall entry while it was current: where it blocked, or the message syscall whose
//!   peer-set split ended it (stacks taken at a wake-up it sent are not boundaries);
//! - the **base** is the longest common outermost chain of the thread's user stacks so far
//!   (thread entry, event-loop frames). A stack whose outermost call site is not the base's
//!   (a frame-pointer walk cut short or derailed, a truncated chain) is not used at all:
//!   neither for the base nor as an end stack;
//! - the **work frames** of an end stack are its call sites inside the base except the
//!   innermost one. A return address `ips[k+1]` names the function of frame `k` (the one
//!   it called), so the work frames name the functions the thread was in below the loop
//!   (the callback the loop called, what that called), while the innermost call site only
//!   names the syscall wrapper that blocked: counted, it would make two turns of an event
//!   loop, each blocking in the loop's own `poll`, share the `poll` call site and look like
//!   one piece of work.
//!
//! A thread-order edge `prev → next` where both end stacks are known is decided when `next`
//! ends (until then it is reported weak, a mutable record, as for a retry): if the work
//! frames of both are non-empty and share no call site, the edge is **pruned** (unrelated
//! callbacks of one loop; [`Counter::PrunedStacks`]); if they share one (the thread was in
//! the same callback at both waits: one piece of work split by them) it is **boosted**
//! ([`Counter::BoostedStacks`]); otherwise it is left as it is. A retry boost takes
//! precedence. The decision uses the base as it is when `next` ends, so it follows from the
//! stream alone (dataflow and reference agree); early in a thread's life, before its stacks
//! have shown the loop's branches, the base can be deeper than the loop.
//!
//! Both the dataflow and the batch reference drive these same machines; what the reference
//! checks is everything around them: partitioning by key, epoch closing, the retraction of
//! mutable records, the spin deadlines and the joins.
//!
//! # Layout
//!
//! One file per rule (or family of rules), each with its doc and its tests; the shared
//! vocabulary in leaf files that the rules import. This file only declares, re-exports and
//! dispatches to the key machines ([`KeyState`]).
//!
//! ```text
//! key.rs       Key, Role, lock_key             output.rs    Src, Dst, Pair, Output, Counters
//! config.rs    RulesConfig, UserRules, …       channels.rs  ChannelEnd, ChannelMap (fd identity)
//! sysno.rs     the syscall classes tested      route.rs     route(): an event → (key, role)…
//! edges.rs     wake_edge, join_edges: the kind and strength of a joined edge (2.a–2.f)
//! thread.rs    ThreadState: life cycle, blocking wait (1.b), wake-up and fork targets,
//!              made of the parts of the rules it calls:
//!   order.rs     thread order (retries, stacks)   callouts.rs  work items, dispatches (1.c, 2.c)
//!   peers.rs     message peer set (1.d)           user.rs      user boundaries (1.e)
//!   signals.rs   signal boundary and edge         data.rs      channel and flag reads (2.b, 2.f)
//!   lock.rs      lock file (and LockState)        spins.rs     spinning vertices
//! irq.rs       IrqState: interrupt cut-out (1.a), bottom halves, timer expiries (2.e)
//! object.rs    ObjectState: an object's action paired with its effects (timers, work, …)
//! socket.rs    SockState: socket data deliveries paired with the receives (2.b, no fd identity)
//! ```

mod callouts;
mod channels;
mod config;
mod data;
mod edges;
mod irq;
mod key;
mod lock;
mod object;
mod order;
mod output;
mod peers;
mod route;
mod signals;
mod socket;
pub(crate) mod spins;
mod sysno;
#[doc(hidden)]
pub mod testing;
mod thread;
mod user;

pub use callouts::{dispatch_id, DISPATCH_BEGIN, DISPATCH_END};
pub use channels::{ChannelEnd, ChannelMap, ChannelSpan};
pub use config::{
    is_delegate_comm, is_maintenance_callback, is_maintenance_comm, CondvarRule, PipeRule,
    PoolRule, RulesConfig, SplitAt, SplitRule, UserRules,
};
pub use edges::{join_edges, wake_edge};
pub use irq::IrqState;
pub use key::{lock_key, Key, Role};
pub use lock::LockState;
pub use object::ObjectState;
pub use output::{Counter, Counts, Dst, Output, Pair, Src};
pub use route::route;
pub use socket::SockState;
pub use sysno::{is_lock_refused, is_lock_wait, is_retry_result, message_op};
pub use thread::ThreadState;

// The module doc links these.
#[cfg(doc)]
use argus_schema::{EdgeKind, EventKind, SegmentKind, Tid};
use argus_schema::{Event, Nanos};
use serde::{Deserialize, Serialize};

/// The state machine of one key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum KeyState {
    /// A task.
    Thread(Box<ThreadState>),
    /// Interrupt context of a CPU.
    Irq(IrqState),
    /// A timer, a work item or a pipe: the last action not yet matched with an effect.
    Object(ObjectState),
    /// A lockable file: each process's latest lock operation on it.
    Lock(LockState),
    /// A socket: each thread's first delivery since its last receive.
    Sock(SockState),
}

impl KeyState {
    /// A fresh machine for `key`.
    pub fn new(key: Key) -> KeyState {
        match key {
            Key::Thread(tid) => KeyState::Thread(Box::new(ThreadState::new(tid))),
            Key::Irq(cpu) => KeyState::Irq(IrqState::new(cpu)),
            Key::ProcSignal(..) => KeyState::Object(ObjectState::signal()),
            Key::Timer(_) | Key::WheelTimer(_) | Key::Work(_) => {
                KeyState::Object(ObjectState::once())
            }
            Key::Pipe(_) | Key::Channel(_) | Key::Flag(..) => {
                KeyState::Object(ObjectState::sticky())
            }
            Key::Lock(_) => KeyState::Lock(LockState::default()),
            Key::Sock(_) => KeyState::Sock(SockState::default()),
        }
    }

    /// A fresh machine for `key` whose segments are numbered from `next_ord`: the key's
    /// earlier machine was forgotten ([`KeyState::forgettable`], a continuous job) after it
    /// had numbered segments up to there, and segment ids (`SegmentId::new(tid, ordinal)`)
    /// must stay unique when the thread (a reused tid) or the CPU's interrupt context comes
    /// back. Keys that number no segments get [`KeyState::new`].
    pub fn resume(key: Key, next_ord: u32) -> KeyState {
        match key {
            Key::Thread(tid) => KeyState::Thread(Box::new(ThreadState::resume(tid, next_ord))),
            Key::Irq(cpu) => KeyState::Irq(IrqState::resume(cpu, next_ord)),
            _ => KeyState::new(key),
        }
    }

    /// The ordinal the next segment of this machine would get, for the machines that number
    /// segments (threads and interrupt contexts): what [`KeyState::resume`] needs.
    pub fn next_ordinal(&self) -> Option<u32> {
        match self {
            KeyState::Thread(t) => Some(t.next_ordinal()),
            KeyState::Irq(i) => Some(i.next_ordinal()),
            KeyState::Object(_) | KeyState::Lock(_) | KeyState::Sock(_) => None,
        }
    }

    /// Whether the machine may be forgotten once its key has been idle longer than the
    /// horizon of a continuous job (`DataflowConfig::forget`), given that it has no mutable
    /// record and no spin deadline (the keyed stage checks those): a later event of the key
    /// then starts from [`KeyState::resume`], and every record that differs from what the
    /// kept machine would have made is older than the horizon (but for a reused tid, below).
    ///
    /// - A thread only once it has exited: a live thread's next event continues its
    ///   segment, its wait, its thread order. A dead thread's machine only acts for the
    ///   exit path (a release at close, the exit's wake-up of the parent, from its last
    ///   segment), which runs within milliseconds of the exit; a tid seen again after the
    ///   horizon is a new thread (the kernel reused the tid), which a kept dead machine would
    ///   ignore for good.
    /// - An interrupt context when no handler is open and no hard interrupt's bottom half is
    ///   still to be linked: a fresh machine then does what it would do.
    /// - An object (timer, work item, channel, flag, process signal): always. What it keeps
    ///   (the last arming, the readers linked to it) pairs a later effect with an action
    ///   older than the horizon, and such an edge's `ts` is its action's time: older than
    ///   the horizon too; the next arming replaces it in a kept machine as in a fresh one.
    /// - A socket only with no delivery pending, a lock file only when it knows of no holder,
    ///   release or refusal: those old facts decide which *new* action a later event is
    ///   linked to, inside the horizon ([`SockState::forgettable`],
    ///   [`LockState::forgettable`]). What is kept grows with the sockets and lock files
    ///   the system uses (their keys are kernel addresses and inodes, which the kernel
    ///   reuses), not with the events.
    pub fn forgettable(&self) -> bool {
        match self {
            KeyState::Thread(t) => t.forgettable(),
            KeyState::Irq(i) => i.forgettable(),
            KeyState::Object(_) => true,
            KeyState::Lock(l) => l.forgettable(),
            KeyState::Sock(s) => s.forgettable(),
        }
    }

    /// Feeds one event; final records go to `out`.
    pub fn on_event(&mut self, ev: &Event, role: Role, cfg: &RulesConfig, out: &mut Vec<Output>) {
        match self {
            KeyState::Thread(t) => t.on_event(ev, role, cfg, out),
            KeyState::Irq(i) => i.on_event(ev, cfg, out),
            KeyState::Object(t) => t.on_event(ev, role, cfg, out),
            KeyState::Lock(l) => l.on_event(ev, out),
            KeyState::Sock(s) => s.on_event(ev, role, cfg, out),
        }
    }

    /// The current versions of this key's mutable records, given that every event up to
    /// `watermark` has been seen.
    pub fn mutable(&self, watermark: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        match self {
            KeyState::Thread(t) => t.mutable(watermark, cfg, out),
            KeyState::Irq(i) => i.mutable(out),
            KeyState::Object(_) | KeyState::Lock(_) | KeyState::Sock(_) => {}
        }
    }

    /// The watermark past which [`KeyState::mutable`] would report a new open spin although
    /// no new event arrived for this key.
    /// The earliest such deadline at or after `from` (a key can have several: its open
    /// segment's and its logical wait's).
    pub fn spin_deadline(&self, cfg: &RulesConfig, from: Nanos) -> Option<Nanos> {
        match self {
            KeyState::Thread(t) => t.spin_deadline(cfg, from),
            _ => None,
        }
    }
}
