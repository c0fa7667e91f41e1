//! The segment and edge rules, as per-key state machines.
//!
//! Every event is routed to one or more *keys* ([`route`]): the thread it concerns (as actor,
//! as target of a wake-up, fork or signal, as the task switched in or out), the per-CPU
//! interrupt pseudo-thread for interrupt-context work, and one key per kernel object that
//! joins an action with its later effect: the `struct hrtimer` or `struct timer_list`
//! address for timers, the `struct work_struct` address for queued work, a pipe or socket
//! channel (fd identity, or a user-declared pipe) for data dependencies, and a watched
//! address for data flags. Each key owns a small state machine ([`KeyState`]) fed with
//! that key's events in `seq` order. A machine produces:
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
//!   `function` [`dispatch_id`]`(NAME)`.
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
//!   [`EdgeKind::Message`] (strong). A reply sent by another thread than the receiver is
//!   covered: the edge goes from whichever thread's send woke the client.
//!   **Data dependency through a pipe or socket** where the reader did not block: the
//!   last write into the channel → the read that returned data from it, as
//!   [`EdgeKind::Message`]. Channels come from the fd identity the collector records
//!   ([`RulesConfig::channels`]: a pipe's two ends share its inode; a socket's writes feed
//!   its peer's reads) or are declared (`[[pipe]]` in the rules file). A thread reading
//!   back its own write is not an edge.
//! - **lock file**: file locks (`flock`, `fcntl` record locks) as the kernel records them
//!   ([`EventKind::FileLock`]: device, inode, type, result; releases on close and exit
//!   included), keyed by file ([`lock_key`], [`Key::Lock`]). A wake-up of a task blocked in
//!   `flock` or `fcntl(F_SETLKW)` is a strong [`EdgeKind::LockFile`] (the unlock, close or
//!   exit that released it). Lock attempts that are refused (`EAGAIN`/`EACCES`, a retry
//!   loop) are linked to the latest granted operation of each other process on the file,
//!   and a lock granted after refusals to the release before it: boosted
//!   [`EdgeKind::LockFile`] edges ([`LockState`], docs/rules.md).
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

use crate::gaps::GapSet;
use argus_schema::{
    syscalls, CausalEdge, Context, Cpu, EdgeKind, EndCause, Event, EventKind, Nanos, Pid, Segment,
    SegmentId, SegmentKind, Spin, SpinClass, StartCause, Strength, Tid,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// Parameters of the rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesConfig {
    /// A segment (or yield run) longer than this is a spinning vertex. Default 2 s.
    pub spin_threshold_ns: u64,
    /// A busy segment with at least this many `sched_yield` calls per second is a yield loop.
    pub yields_per_sec: u64,
    /// Kernel delegate threads (kworker, ksoftirqd, rcu…, irq threads): their thread-order
    /// edges are pruned, since each of their segments serves another requester. The
    /// pipeline sees no thread names; the caller fills this from the thread table (see
    /// [`is_delegate_comm`]).
    pub kernel_threads: BTreeSet<Tid>,
    /// Addresses of kernel maintenance callbacks (timer functions, work functions) whose
    /// wake-ups, timer and queue edges are culled. The caller fills this from kallsyms with
    /// [`is_maintenance_callback`].
    pub cull_functions: BTreeSet<u64>,
    /// Kernel maintenance threads (`rcu_preempt`, `rcu_sched`, …; see
    /// [`is_maintenance_comm`]) whose wake-ups, given or received, are culled.
    pub cull_threads: BTreeSet<Tid>,
    /// User-defined boundaries and edges (the rules file).
    pub user: UserRules,
    /// Time ranges in which the kernel lost events on some CPU (ring-buffer overruns, from
    /// the trace's `lost_ranges`), sorted and merged by [`RulesConfig::add_gap`]. No edge is
    /// made across one: a timer armed before a gap and firing after it may have been re-armed
    /// unseen, and a thread whose previous segment spans a gap may have run and waited
    /// unseen, so its thread-order edge is pruned. Shared by clones ([`GapSet`]).
    pub gaps: GapSet,
    /// What each file descriptor referred to (fd identity recorded by the collector):
    /// pipes and connected sockets become channels, and a read that finds data already
    /// there depends on the last write into the channel ([`EdgeKind::Message`]).
    pub channels: ChannelMap,
}

impl Default for RulesConfig {
    fn default() -> Self {
        RulesConfig {
            spin_threshold_ns: 2_000_000_000,
            yields_per_sec: 50,
            kernel_threads: BTreeSet::new(),
            cull_functions: BTreeSet::new(),
            cull_threads: BTreeSet::new(),
            user: UserRules::default(),
            gaps: GapSet::new(),
            channels: ChannelMap::default(),
        }
    }
}

impl RulesConfig {
    /// Records that events were lost between `from` and `to` (inclusive) on some CPU.
    pub fn add_gap(&mut self, from: Nanos, to: Nanos) {
        self.gaps.add(from, to);
    }

    /// Whether a lost-events gap overlaps `[from, to]`.
    pub fn crosses_gap(&self, from: Nanos, to: Nanos) -> bool {
        self.gaps.crosses(from, to)
    }

    /// The object key a data transfer on descriptor `fd` of process `pid` at `ts` goes
    /// through: a declared pipe ([`UserRules::pipes`]) first, else the channel the fd
    /// identity gives ([`RulesConfig::channels`]); the send side for a write (`write`),
    /// the receive side for a read.
    pub fn channel_key(&self, pid: Pid, fd: u64, ts: Nanos, write: bool) -> Option<Key> {
        self.message_channel(pid, fd, ts, write).0
    }

    /// What a data transfer on `fd` of process `pid` at `ts` goes through, with one look-up
    /// of the descriptor: the object key ([`RulesConfig::channel_key`]), and the
    /// connection as a direction-free id for the message peer set (a declared pipe, either
    /// end, else the channel of the fd identity, [`ChannelEnd::connection`]; `None` when
    /// neither knows).
    pub fn message_channel(
        &self,
        pid: Pid,
        fd: u64,
        ts: Nanos,
        write: bool,
    ) -> (Option<Key>, Option<u64>) {
        let (mut key, mut conn) = (None, None);
        if !self.user.pipes.is_empty() {
            key = self.user.pipe_of(pid, fd, write).map(Key::Pipe);
            conn = self
                .user
                .pipe_of(pid, fd, true)
                .or_else(|| self.user.pipe_of(pid, fd, false))
                .map(|i| ChannelEnd::mix(4, u64::from(i), 0));
        }
        if (key.is_none() || conn.is_none()) && !self.channels.is_empty() {
            let end = i32::try_from(fd)
                .ok()
                .and_then(|fd| self.channels.lookup(pid, fd, ts));
            if let Some(end) = end {
                key = key.or_else(|| if write { end.send } else { end.recv }.map(Key::Channel));
                conn = conn.or_else(|| end.connection());
            }
        }
        (key, conn)
    }

    /// Adds every maintenance callback among `symbols` (address, name) to
    /// [`RulesConfig::cull_functions`]; returns how many were added.
    pub fn cull_symbols<'a>(&mut self, symbols: impl IntoIterator<Item = (u64, &'a str)>) -> usize {
        let before = self.cull_functions.len();
        for (addr, name) in symbols {
            if is_maintenance_callback(name) {
                self.cull_functions.insert(addr);
            }
        }
        self.cull_functions.len() - before
    }

    /// Classifies kernel threads by name: delegates go to [`RulesConfig::kernel_threads`],
    /// maintenance threads to [`RulesConfig::cull_threads`] as well. `threads` yields
    /// `(tid, comm, is_kernel_thread)`.
    pub fn classify_threads<'a>(
        &mut self,
        threads: impl IntoIterator<Item = (Tid, &'a str, bool)>,
    ) {
        for (tid, comm, kernel) in threads {
            if !kernel {
                continue;
            }
            if is_delegate_comm(comm) {
                self.kernel_threads.insert(tid);
            }
            if is_maintenance_comm(comm) {
                self.cull_threads.insert(tid);
            }
        }
    }
}

/// Kernel callbacks that do scheduler, tick and RCU housekeeping: their wake-ups are not
/// causes of application work (the paper's "Timeshare maintenance").
pub fn is_maintenance_callback(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "tick_nohz_handler",
        "tick_sched_timer",
        "tick_nohz_highres_handler",
        "sched_rt_period_timer",
        "sched_cfs_period_timer",
        "sched_cfs_slack_timer",
        "hrtick",
        "watchdog_timer_fn",
        "inactive_task_timer",
        "dl_task_timer",
        "vmstat_update",
        "vmstat_shepherd",
        "clocksource_watchdog",
        "delayed_work_timer_fn",
        "idle_worker_timeout",
        "pool_mayday_timeout",
        "lru_add_drain_per_cpu",
        "psi_avgs_work",
        "kfree_rcu_monitor",
        "kfree_rcu_work",
    ];
    EXACT.contains(&name)
        || name.starts_with("rcu_")
        || name.starts_with("tick_")
        || name.starts_with("srcu_")
}

/// Kernel delegate threads by name: they run work on behalf of others.
pub fn is_delegate_comm(comm: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "kworker/",
        "ksoftirqd/",
        "rcu",
        "irq/",
        "kthreadd",
        "migration/",
        "kblockd",
        "kswapd",
        "jbd2/",
        "writeback",
        "kcompactd",
        "khugepaged",
        "cpuhp/",
        "idle_inject/",
        "watchdog",
    ];
    PREFIXES.iter().any(|p| comm.starts_with(p))
}

/// Kernel maintenance threads by name (RCU grace-period and callback threads, the tick's
/// helpers): culled.
pub fn is_maintenance_comm(comm: &str) -> bool {
    comm.starts_with("rcu_")
        || comm.starts_with("rcuc/")
        || comm.starts_with("rcuop/")
        || comm.starts_with("rcuog/")
        || comm.starts_with("migration/")
        || comm.starts_with("watchdog")
}

/// User-defined boundaries and edges, from the rules file ([`crate::rulesfile`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRules {
    /// Futex words that are condition variables: wake-ups through them are strong.
    pub condvars: Vec<CondvarRule>,
    /// Extra segment boundaries.
    pub splits: Vec<SplitRule>,
    /// Worker pools: weak wake-ups between their threads are boosted.
    pub pools: Vec<PoolRule>,
    /// Pipes (write end, read end): data dependencies through them are message edges.
    pub pipes: Vec<PipeRule>,
}

impl UserRules {
    /// Whether the futex word at `addr` in process `pid` is a declared condition variable.
    pub fn is_condvar(&self, pid: Pid, addr: u64) -> bool {
        self.condvars
            .iter()
            .any(|c| c.pid == pid && addr >= c.addr && addr < c.addr.saturating_add(c.len.max(1)))
    }

    /// Whether `a` and `b` are distinct threads of one declared worker pool.
    pub fn same_pool(&self, a: Tid, b: Tid) -> bool {
        a != b
            && self
                .pools
                .iter()
                .any(|p| p.tids.contains(&a) && p.tids.contains(&b))
    }

    /// The index of the pipe whose write end (`write` true) or read end is `fd` of `pid`.
    pub fn pipe_of(&self, pid: Pid, fd: u64, write: bool) -> Option<u32> {
        self.pipes
            .iter()
            .position(|p| p.pid == pid && (if write { p.write_fd } else { p.read_fd }) == fd)
            .map(|i| i as u32)
    }

    /// Whether there are no rules at all.
    pub fn is_empty(&self) -> bool {
        self.condvars.is_empty()
            && self.splits.is_empty()
            && self.pools.is_empty()
            && self.pipes.is_empty()
    }
}

/// "The futex word at `addr` (and the `len` bytes from it) in process `pid` is a condition
/// variable": a `futex` wake on it shows intent.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CondvarRule {
    /// Process.
    pub pid: Pid,
    /// Address of the condition variable (a `pthread_cond_t` or a bare futex word).
    pub addr: u64,
    /// Size of the object in bytes (48 for `pthread_cond_t`, 4 for a futex word).
    pub len: u64,
}

/// Where a user-defined boundary falls.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SplitAt {
    /// At the entry of this syscall (number).
    Syscall(i32),
    /// At an application marker whose text starts with this.
    Marker(String),
}

/// "Split at …, in process `pid` (any process when `None`)".
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SplitRule {
    /// Process, or every process.
    pub pid: Option<Pid>,
    /// Where.
    pub at: SplitAt,
}

/// "These threads are one worker pool": hand-offs between them are one piece of work.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PoolRule {
    /// The pool's threads.
    pub tids: BTreeSet<Tid>,
}

/// "In process `pid`, `write_fd` and `read_fd` are the two ends of one pipe (or socket
/// pair)": a read that returns data on `read_fd` depends on the last write on `write_fd`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PipeRule {
    /// Process (the descriptor table).
    pub pid: Pid,
    /// The write end.
    pub write_fd: u64,
    /// The read end.
    pub read_fd: u64,
}

/// One end of a channel as seen through a file descriptor: the channel a write on it
/// feeds and the channel a read on it drains. For a pipe both are the pipe's inode; for a
/// connected socket with inode `i` and peer `p`, writes feed `i → p` and reads drain
/// `p → i` (see [`ChannelEnd::socket`]). `None`: not a channel (a regular file, a socket
/// whose peer is unknown).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ChannelEnd {
    /// Channel fed by writes.
    pub send: Option<u64>,
    /// Channel drained by reads.
    pub recv: Option<u64>,
}

impl ChannelEnd {
    /// Both ends of the pipe with inode `inode`.
    pub fn pipe(inode: u64) -> ChannelEnd {
        let id = Self::mix(1, inode, 0);
        ChannelEnd {
            send: Some(id),
            recv: Some(id),
        }
    }

    /// A socket with inode `inode` connected to the socket with inode `peer`.
    pub fn socket(inode: u64, peer: u64) -> ChannelEnd {
        ChannelEnd {
            send: Some(Self::mix(2, inode, peer)),
            recv: Some(Self::mix(2, peer, inode)),
        }
    }

    /// What a descriptor to a file of kind `kind` (the collector's names: `pipe`, `socket`,
    /// `regular`, `anon`, `other`) with `inode`, socket `peer` and `/proc` link `target` is
    /// as a channel: pipes and FIFOs, connected sockets, and eventfds (written by one task,
    /// read by another) are; files, unconnected sockets and other anonymous inodes are not.
    pub fn of_file(kind: &str, inode: u64, peer: Option<u64>, target: &str) -> ChannelEnd {
        match (kind, peer) {
            ("pipe", _) => ChannelEnd::pipe(inode),
            ("socket", Some(peer)) => ChannelEnd::socket(inode, peer),
            ("anon", _) if target.contains("eventfd") => ChannelEnd::pipe(inode),
            _ => ChannelEnd::default(),
        }
    }

    /// The connection both directions belong to, the same seen from either end: the pipe,
    /// or the unordered pair of a connected socket's two directions.
    pub fn connection(&self) -> Option<u64> {
        match (self.send, self.recv) {
            (Some(a), Some(b)) if a == b => Some(a),
            (Some(a), Some(b)) => Some(Self::mix(3, a.min(b), a.max(b))),
            (Some(a), None) | (None, Some(a)) => Some(a),
            (None, None) => None,
        }
    }

    /// A channel id for (kind, from, to): injective enough for inode numbers (distinct
    /// inputs collide with probability ~2^-64).
    fn mix(tag: u64, a: u64, b: u64) -> u64 {
        let mut z = a
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(17)
            .wrapping_add(b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
            .wrapping_add(tag);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// From `from` on, descriptor `fd` refers to `end` (until a later span of the same fd).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChannelSpan {
    /// The descriptor.
    pub fd: i32,
    /// Since when.
    pub from: Nanos,
    /// What it is.
    pub end: ChannelEnd,
}

/// The descriptor tables of the traced processes over time, as channels
/// ([`RulesConfig::channels`]); filled by the caller from the trace's fd identity records.
/// A process without spans of its own for a descriptor falls back to its parent's table as
/// it was when the process was forked (descriptors are inherited).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "ChannelMapRepr", into = "ChannelMapRepr")]
pub struct ChannelMap {
    /// `(pid, fd)` → `(from, end)` sorted by `from`. Hashed by the descriptor itself (fast
    /// fixed-seed hash): looked up for every data-transfer syscall, and most descriptors
    /// have one span, so a lookup is one probe and no search.
    spans:
        std::collections::HashMap<(Pid, i32), Vec<(Nanos, ChannelEnd)>, foldhash::fast::FixedState>,
    /// Process → its creations `(fork time, parent)`, sorted (a pid may be reused).
    parents: std::collections::HashMap<Pid, Vec<(Nanos, Pid)>, foldhash::fast::FixedState>,
    /// Names these contents for the per-thread memo of answers ([`ChannelMap::lookup`]): a
    /// new number at every change, kept by clones (0: never changed, empty).
    version: u64,
}

impl PartialEq for ChannelMap {
    fn eq(&self, other: &ChannelMap) -> bool {
        self.spans == other.spans && self.parents == other.parents
    }
}

impl Eq for ChannelMap {}

/// A fresh [`ChannelMap::version`].
fn next_version() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One remembered answer: `end` is what `fd` of `pid` refers to for every time in
/// `[lo, hi)`, in the map of version `map`.
#[derive(Clone, Copy)]
struct Memo {
    map: u64,
    pid: Pid,
    fd: i32,
    lo: Nanos,
    hi: Nanos,
    end: Option<ChannelEnd>,
}

/// Slots of the per-thread memo (direct-mapped by process and descriptor).
const MEMO_SLOTS: usize = 64;

thread_local! {
    /// Each thread's recent [`ChannelMap::lookup`] answers: a thread's data transfers go
    /// through the same few descriptors, whose meaning changes rarely, and the look-up
    /// itself (two hash probes and two searches, for every read and write, twice) was ~4%
    /// of a build.
    static MEMO: std::cell::RefCell<[Memo; MEMO_SLOTS]> = const {
        std::cell::RefCell::new(
            [Memo {
                map: 0,
                pid: Pid(0),
                fd: 0,
                lo: Nanos(0),
                hi: Nanos(0),
                end: None,
            }; MEMO_SLOTS],
        )
    };
}

/// How a [`ChannelMap`] is serialized: its spans as a flat list (a map keyed by
/// `(pid, fd)` is not expressible in every format).
#[derive(Clone, Serialize, Deserialize)]
struct ChannelMapRepr {
    spans: Vec<(Pid, ChannelSpan)>,
    parents: Vec<(Pid, Vec<(Nanos, Pid)>)>,
}

impl From<ChannelMapRepr> for ChannelMap {
    fn from(r: ChannelMapRepr) -> ChannelMap {
        let mut m = ChannelMap::default();
        for (pid, s) in r.spans {
            m.insert(pid, s.fd, s.from, s.end);
        }
        for (child, forks) in r.parents {
            for (at, parent) in forks {
                m.set_parent(child, parent, at);
            }
        }
        m
    }
}

impl From<ChannelMap> for ChannelMapRepr {
    fn from(m: ChannelMap) -> ChannelMapRepr {
        let mut spans: Vec<(Pid, ChannelSpan)> = m
            .spans
            .into_iter()
            .flat_map(|((pid, fd), v)| {
                v.into_iter()
                    .map(move |(from, end)| (pid, ChannelSpan { fd, from, end }))
            })
            .collect();
        spans.sort();
        let mut parents: Vec<_> = m.parents.into_iter().collect();
        parents.sort();
        ChannelMapRepr { spans, parents }
    }
}

impl ChannelMap {
    /// Records that from `from` on, `fd` of `pid` refers to `end`.
    pub fn insert(&mut self, pid: Pid, fd: i32, from: Nanos, end: ChannelEnd) {
        self.version = next_version();
        let v = self.spans.entry((pid, fd)).or_default();
        let i = v.partition_point(|&(f, _)| f <= from);
        if i > 0 && v[i - 1].0 == from {
            v[i - 1].1 = end;
        } else {
            v.insert(i, (from, end));
        }
    }

    /// The map for a trace's fd identity: `records` are `(pid, fd, since, end)` as
    /// [`ChannelEnd::of_file`] makes them, `forks` are `(ts, parent, child)`.
    pub fn from_identity(
        records: impl IntoIterator<Item = (Pid, i32, Nanos, ChannelEnd)>,
        forks: impl IntoIterator<Item = (Nanos, Pid, Pid)>,
    ) -> ChannelMap {
        let mut m = ChannelMap::default();
        for (pid, fd, from, end) in records {
            m.insert(pid, fd, from, end);
        }
        for (at, parent, child) in forks {
            m.set_parent(child, parent, at);
        }
        m
    }

    /// Adds every span and fork of `other` (another trace of the same build).
    pub fn merge(&mut self, other: ChannelMap) {
        for ((pid, fd), spans) in other.spans {
            for (from, end) in spans {
                self.insert(pid, fd, from, end);
            }
        }
        for (child, forks) in other.parents {
            for (at, parent) in forks {
                self.set_parent(child, parent, at);
            }
        }
    }

    /// Records that `child` was forked from `parent` at `at` (inherits its descriptors).
    pub fn set_parent(&mut self, child: Pid, parent: Pid, at: Nanos) {
        self.version = next_version();
        if child != parent {
            let v = self.parents.entry(child).or_default();
            if let Err(i) = v.binary_search(&(at, parent)) {
                v.insert(i, (at, parent));
            }
        }
    }

    /// Whether there are no spans.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Number of spans.
    pub fn len(&self) -> usize {
        self.spans.values().map(Vec::len).sum()
    }

    /// What `fd` of `pid` referred to at `ts`: the process's own latest span since its
    /// latest creation (a reused pid does not see the previous process's descriptors), else
    /// what its parent's `fd` was at the fork.
    pub fn lookup(&self, pid: Pid, fd: i32, ts: Nanos) -> Option<ChannelEnd> {
        let slot = (pid.0 as u32 as usize)
            .wrapping_mul(31)
            .wrapping_add(fd as u32 as usize)
            % MEMO_SLOTS;
        let hit = MEMO.with(|m| {
            let e = m.borrow()[slot];
            (e.map == self.version && e.pid == pid && e.fd == fd && e.lo <= ts && ts < e.hi)
                .then_some(e.end)
        });
        if let Some(end) = hit {
            return end;
        }
        match self.own(pid, fd, ts) {
            Own::Here { end, lo, hi } => {
                MEMO.with(|m| {
                    m.borrow_mut()[slot] = Memo {
                        map: self.version,
                        pid,
                        fd,
                        lo,
                        hi,
                        end,
                    }
                });
                end
            }
            Own::Parent { at, parent } => self.resolve(parent, fd, at),
        }
    }

    /// What `pid`'s own table says of `fd` at `ts`: the latest span since the process's
    /// latest creation, with the times over which that holds (until the next span or
    /// creation; nothing at all before the first of either), else the parent's table as it
    /// was at the fork.
    fn own(&self, pid: Pid, fd: i32, ts: Nanos) -> Own {
        let forks = self.parents.get(&pid).map_or(&[][..], Vec::as_slice);
        let fi = forks.partition_point(|&(at, _)| at <= ts);
        let fork = fi.checked_sub(1).map(|i| forks[i]);
        let spans = self.spans.get(&(pid, fd)).map_or(&[][..], Vec::as_slice);
        let si = spans.partition_point(|&(at, _)| at <= ts);
        let hi = forks
            .get(fi)
            .map_or(Nanos(u64::MAX), |f| f.0)
            .min(spans.get(si).map_or(Nanos(u64::MAX), |s| s.0));
        if let Some((from, end)) = si.checked_sub(1).map(|i| spans[i]) {
            if fork.is_none_or(|(born, _)| from >= born) {
                return Own::Here {
                    end: Some(end),
                    lo: from,
                    hi,
                };
            }
        }
        match fork {
            Some((at, parent)) => Own::Parent { at, parent },
            None => Own::Here {
                end: None,
                lo: Nanos(0),
                hi,
            },
        }
    }

    /// [`ChannelMap::lookup`] without the memo.
    fn resolve(&self, pid: Pid, fd: i32, ts: Nanos) -> Option<ChannelEnd> {
        let (mut pid, mut ts) = (pid, ts);
        // Parent chains are short; the bound guards against a cycle in bad input.
        for _ in 0..16 {
            match self.own(pid, fd, ts) {
                Own::Here { end, .. } => return end,
                Own::Parent { at, parent } => (pid, ts) = (parent, at),
            }
        }
        None
    }
}

/// What one process's own descriptor table says ([`ChannelMap::own`]).
enum Own {
    /// `end` (nothing when `None`) holds for every time in `[lo, hi)`.
    Here {
        end: Option<ChannelEnd>,
        lo: Nanos,
        hi: Nanos,
    },
    /// The descriptor is the parent's, as it was at the fork.
    Parent { at: Nanos, parent: Pid },
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
    /// A `struct timer_list` (wheel timer) by address.
    WheelTimer(u64),
    /// A `struct work_struct` by address.
    Work(u64),
    /// A declared pipe, by index in [`UserRules::pipes`].
    Pipe(u32),
    /// A pipe or one direction of a socket connection, from fd identity
    /// ([`ChannelEnd`]).
    Channel(u64),
    /// A watched data flag: process and address.
    Flag(Pid, u64),
    /// A signal generated for a thread-group leader (`kill(pid)`: process-directed), by
    /// leader and signal number: any thread of the group may take delivery.
    ProcSignal(Tid, i32),
    /// A lockable file (`flock` or `fcntl` record locks), by device and inode
    /// ([`lock_key`]).
    Lock(u64),
}

impl Key {
    /// A well-mixed hash, used to partition keys over workers.
    pub fn hash64(&self) -> u64 {
        let (tag, v) = match *self {
            Key::Thread(t) => (1u64, t.0 as u32 as u64),
            Key::Irq(c) => (2, c.0 as u64),
            Key::Timer(a) => (3, a),
            Key::WheelTimer(a) => (4, a),
            Key::Work(a) => (5, a),
            Key::Pipe(i) => (6, i as u64),
            Key::Channel(c) => (7, c),
            Key::Flag(p, a) => (8, a ^ ((p.0 as u32 as u64) << 40)),
            Key::ProcSignal(t, s) => (9, (t.0 as u32 as u64) | ((s as u32 as u64) << 32)),
            Key::Lock(f) => (10, f),
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
    /// The key's own record (syscalls, exit, interrupt entry/exit, work items, markers).
    Own,
    /// The key acts on another key (wakes, forks, arms a timer, queues work, signals).
    Actor,
    /// The key is acted on (woken, created).
    Target,
    /// The task leaves the CPU.
    SwitchOut,
    /// The task takes the CPU.
    SwitchIn,
    /// An object key is armed (timer armed, work queued, pipe written).
    Arm,
    /// An object key fires (timer expires, work starts, pipe read).
    Fire,
    /// A signal is generated for the task.
    SignalTarget,
}

/// Syscall numbers the rules test on the hot path, looked up once.
struct Nrs {
    futex: i32,
    flock: i32,
    fcntl: i32,
    close: i32,
    exit: i32,
    exit_group: i32,
    wait4: i32,
    waitid: i32,
    reads: [i32; 5],
    writes: [i32; 5],
}

fn nrs() -> &'static Nrs {
    static NRS: OnceLock<Nrs> = OnceLock::new();
    NRS.get_or_init(|| {
        let n = |s: &str| syscalls::number(s).unwrap_or(-2);
        Nrs {
            futex: n("futex"),
            flock: n("flock"),
            fcntl: n("fcntl"),
            close: n("close"),
            exit: n("exit"),
            exit_group: n("exit_group"),
            wait4: n("wait4"),
            waitid: n("waitid"),
            reads: [
                n("read"),
                n("readv"),
                n("recvfrom"),
                n("recvmsg"),
                n("recvmmsg"),
            ],
            writes: [
                n("write"),
                n("writev"),
                n("sendto"),
                n("sendmsg"),
                n("sendmmsg"),
            ],
        }
    })
}

/// A data-transfer syscall on a descriptor given in `args[0]`, that could be a connection
/// (positional I/O, which only files support, is left out): `Some(true)` for a send,
/// `Some(false)` for a receive.
pub fn message_op(nr: i32) -> Option<bool> {
    let n = nrs();
    if n.writes.contains(&nr) {
        Some(true)
    } else if n.reads.contains(&nr) {
        Some(false)
    } else {
        None
    }
}

/// The lock key of a file: its device and inode, and whether the lock is a `flock` (which
/// never conflicts with a POSIX record lock on the same file).
pub fn lock_key(inode: u64, dev: u32, flock: bool) -> Key {
    Key::Lock(ChannelEnd::mix(5 + u64::from(flock), inode, u64::from(dev)))
}

/// Whether a task blocked in `nr` waits for a file lock (`flock`, `fcntl(F_SETLKW)`).
pub fn is_lock_wait(nr: i32) -> bool {
    let n = nrs();
    nr >= 0 && (nr == n.flock || nr == n.fcntl)
}

/// A lock attempt that failed because another process holds the lock: `EAGAIN`
/// (`EWOULDBLOCK`) or `EACCES`.
pub fn is_lock_refused(ret: i64) -> bool {
    matches!(ret, -11 | -13)
}

/// Results of a wait that mean "interrupted, try again": `EINTR`, `EAGAIN`, and the
/// kernel-internal restart codes `raw_syscalls:sys_exit` shows before a restart.
pub fn is_retry_result(ret: i64) -> bool {
    matches!(ret, -4 | -11 | -512 | -513 | -514 | -516)
}

/// Calls `f` for every (key, role) the event concerns.
pub fn route(ev: &Event, cfg: &RulesConfig, mut f: impl FnMut(Key, Role)) {
    let actor = || -> Key {
        if ev.ctx == Context::Task && ev.tid.is_task() {
            Key::Thread(ev.tid)
        } else {
            // Interrupt context, or the idle task acting (its work is interrupt tail work).
            Key::Irq(ev.cpu)
        }
    };
    let task = ev.tid.is_task() && ev.ctx == Context::Task;
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
        EventKind::TimerStart { timer, .. } => {
            f(actor(), Role::Actor);
            f(Key::WheelTimer(*timer), Role::Arm);
        }
        EventKind::TimerExpire { timer, .. } => {
            f(Key::Irq(ev.cpu), Role::Own);
            f(Key::WheelTimer(*timer), Role::Fire);
        }
        EventKind::WorkQueue { work, .. } => {
            f(actor(), Role::Actor);
            f(Key::Work(*work), Role::Arm);
        }
        EventKind::WorkStart { work, .. } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
            }
            f(Key::Work(*work), Role::Fire);
        }
        EventKind::SignalGenerate { target, sig } => {
            f(actor(), Role::Actor);
            if target.is_task() {
                f(Key::Thread(*target), Role::SignalTarget);
                f(Key::ProcSignal(*target, *sig), Role::Arm);
            }
        }
        EventKind::IrqEntry { .. }
        | EventKind::IrqExit { .. }
        | EventKind::SoftirqEntry { .. }
        | EventKind::SoftirqExit { .. }
        | EventKind::HrtimerExpireExit { .. }
        | EventKind::TimerExpireExit { .. } => f(Key::Irq(ev.cpu), Role::Own),
        EventKind::SysEnter { nr, args } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                if let Some(write) = message_op(*nr) {
                    if let Some(k) = cfg.channel_key(ev.pid, args[0], ev.ts, write) {
                        f(k, if write { Role::Arm } else { Role::Fire });
                    }
                }
            }
        }
        EventKind::SignalDeliver { sig } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                // Delivered in a thread other than the group leader: it may be a
                // process-directed signal generated for the leader.
                if ev.tid.0 != ev.pid.0 && ev.pid.0 > 0 {
                    f(Key::ProcSignal(Tid(ev.pid.0), *sig), Role::Fire);
                }
            }
        }
        EventKind::SysExit { .. }
        | EventKind::Exec
        | EventKind::Exit
        | EventKind::Marker { .. }
        | EventKind::WorkEnd { .. } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own)
            }
        }
        // Semantic records: they go to their actor so that its segment counts them.
        EventKind::Stack { .. } => f(actor(), Role::Own),
        // A write to a watched flag arms it (the writer is the actor of a flag edge); a
        // read by another thread fires it.
        // A lock, unlock or refusal: the file's lock key pairs it with the other processes'
        // operations; the thread says which pairs are edges.
        EventKind::FileLock {
            inode, dev, flock, ..
        } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                f(lock_key(*inode, *dev, *flock), Role::Arm);
            }
        }
        EventKind::FlagAccess { addr, write } => {
            if *write {
                f(actor(), Role::Actor);
                f(Key::Flag(ev.pid, *addr), Role::Arm);
            } else {
                f(actor(), Role::Own);
                f(Key::Flag(ev.pid, *addr), Role::Fire);
            }
        }
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
    /// Whether the actor is interrupt context or a kernel work item: delegated work, whose
    /// wake-ups show the intent of whoever caused it.
    pub interrupt: bool,
    /// Whether the actor had exited (its exit notifying its parent).
    pub exiting: bool,
    /// Whether the actor was in a `futex` call on a declared condition variable.
    pub condvar: bool,
}

/// The target side of a causal event: which segment it started (or, inside a callout,
/// which segment it resumed).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dst {
    /// The event's `seq` (for a paired effect, the effect's `seq`: the expiry, the work
    /// start, the read).
    pub seq: u64,
    /// The segment it started.
    pub seg: SegmentId,
    /// Relationship.
    pub kind: EdgeKind,
    /// The syscall the target was blocked in when woken (-1 none).
    pub wait: i32,
    /// Whether this endpoint joins through a [`Pair`] (timers, work, pipes) rather than
    /// directly on `seq` (wake-ups, forks, signals).
    pub paired: bool,
    /// Whether the wake-up ended a wait that closed the target's previous segment (whose
    /// id is then `seg`'s predecessor): the wait side of the weak wait↔wake pair.
    #[serde(default)]
    pub waited: bool,
}

/// An action (`arm` seq: timer armed, work queued, pipe written) and the effect it caused
/// (`fire` seq: expiry, work start, read).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Pair {
    /// `seq` of the action.
    pub arm: u64,
    /// `seq` of the effect.
    pub fire: u64,
}

/// What a rule did that the graph itself does not show, counted for the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Counter {
    /// A segment split by the message peer-set rule.
    SplitPeer,
    /// A segment split by a user rule.
    SplitUser,
    /// A segment split at a callout (work item) boundary.
    SplitCallout,
    /// A segment split at a signal delivery.
    SplitSignal,
    /// A thread-order edge pruned (kernel delegate thread, work item).
    PrunedOrder,
    /// A connection culled as kernel maintenance.
    Culled,
    /// A thread-order edge pruned because the two segments' end stacks share no call site
    /// below the thread's base (unrelated callbacks of one loop).
    PrunedStacks,
    /// A thread-order edge boosted because the two segments' end stacks share a call site
    /// below the thread's base (one invocation chain continued across a wait).
    BoostedStacks,
}

impl Counter {
    /// Every counter.
    pub const ALL: [Counter; 8] = [
        Counter::SplitPeer,
        Counter::SplitUser,
        Counter::SplitCallout,
        Counter::SplitSignal,
        Counter::PrunedOrder,
        Counter::Culled,
        Counter::PrunedStacks,
        Counter::BoostedStacks,
    ];

    /// Stable lowercase name.
    pub fn name(&self) -> &'static str {
        match self {
            Counter::SplitPeer => "split_peer_set",
            Counter::SplitUser => "split_user_rule",
            Counter::SplitCallout => "split_callout",
            Counter::SplitSignal => "split_signal",
            Counter::PrunedOrder => "pruned_thread_order",
            Counter::Culled => "culled",
            Counter::PrunedStacks => "pruned_stacks",
            Counter::BoostedStacks => "boosted_stacks",
        }
    }

    /// Whether the counter counts something the rules took out of the graph (a split, a
    /// pruned or culled connection) rather than something they strengthened.
    pub fn filters(&self) -> bool {
        !matches!(self, Counter::BoostedStacks)
    }
}

/// The rule counters of a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Counts indexed like [`Counter::ALL`].
    pub values: [u64; Counter::ALL.len()],
}

impl Counts {
    /// Adds `n` (may be negative, for retractions) to `c`.
    pub fn add(&mut self, c: Counter, n: i64) {
        let v = &mut self.values[c as usize];
        *v = v.saturating_add_signed(n);
    }

    /// The count of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize]
    }
}

/// A record produced by a key's state machine.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Output {
    /// A segment version.
    Segment(Segment),
    /// An edge known within one key (thread order, softirq bottom half).
    Edge(CausalEdge),
    /// Actor side of a causal event.
    Src(Src),
    /// Target side of a causal event.
    Dst(Dst),
    /// An action/effect pair of an object key.
    Pair(Pair),
    /// A spinning vertex version.
    Spin(Spin),
    /// One occurrence of a rule counter.
    Count(Counter),
    /// An object key's action (its `seq`) that no later effect can be paired with: a newer
    /// action replaced it, its one effect came, or events were lost. A hint for the joins,
    /// not part of the graph: they may forget the action's actor once they have seen the
    /// pairs so far (its actor has no other partner: timers, work items, pipes, channels
    /// and flags only).
    ArmDone(u64),
    /// An effect event of an object key (its `seq`) that was paired with no action: a hint
    /// for the joins, which may forget its paired target (nothing can join it).
    NoEffect(u64),
}

fn is_exit_call(nr: i32) -> bool {
    let n = nrs();
    nr == n.exit || nr == n.exit_group
}

fn is_wait_child(nr: i32) -> bool {
    let n = nrs();
    nr == n.wait4 || nr == n.waitid
}

/// The edge from a matched actor and target.
pub fn wake_edge(src: &Src, dst: &Dst, cfg: &RulesConfig) -> CausalEdge {
    let (kind, strength) = if dst.paired {
        match dst.kind {
            // Told by time order (the latest lock of another process), not by a wake-up.
            EdgeKind::LockFile => (EdgeKind::LockFile, Strength::Boosted),
            k => (k, Strength::Strong),
        }
    } else {
        match dst.kind {
            // An unlock, close or exit released the lock a blocked `flock`/`F_SETLKW` waited
            // for.
            EdgeKind::Wakeup if is_lock_wait(dst.wait) && !src.interrupt => {
                (EdgeKind::LockFile, Strength::Strong)
            }
            EdgeKind::Wakeup => {
                if src.condvar {
                    (EdgeKind::Rule, Strength::Strong)
                } else if src.exiting || is_exit_call(src.syscall) {
                    if is_wait_child(dst.wait) {
                        (EdgeKind::Exit, Strength::Strong)
                    } else {
                        (EdgeKind::Wakeup, Strength::Strong)
                    }
                } else if syscalls::is_send(src.syscall)
                    && (syscalls::is_receive(dst.wait) || syscalls::is_poll(dst.wait))
                {
                    (EdgeKind::Message, Strength::Strong)
                } else if src.interrupt
                    || syscalls::is_send(src.syscall)
                    || syscalls::is_notify(src.syscall)
                {
                    (EdgeKind::Wakeup, Strength::Strong)
                } else if cfg.user.same_pool(src.seg.tid(), dst.seg.tid()) {
                    (EdgeKind::Wakeup, Strength::Boosted)
                } else {
                    // futex hand-offs and unknown kernel paths may be mere mutual exclusion.
                    (EdgeKind::Wakeup, Strength::Weak)
                }
            }
            EdgeKind::ThreadOrder => (EdgeKind::ThreadOrder, Strength::Weak),
            k => (k, Strength::Strong),
        }
    };
    CausalEdge {
        src: src.seg,
        dst: dst.seg,
        kind,
        strength,
        ts: src.ts,
        src_syscall: src.syscall,
    }
}

/// Every edge one joined (actor, target) pair makes: the edge of [`wake_edge`], and for a
/// wake-up that ended a wait, the weak wait↔wake pair (ComputeGraph line 2.a): from the
/// segment that ended in the wait to the waker's segment, when the waker is another task.
pub fn join_edges(src: &Src, dst: &Dst, cfg: &RulesConfig, mut f: impl FnMut(CausalEdge)) {
    f(wake_edge(src, dst, cfg));
    let waiter = dst.seg.tid();
    if dst.waited
        && !dst.paired
        && dst.seg.seq() > 0
        && src.seg.tid().is_task()
        && src.seg.tid() != waiter
    {
        f(CausalEdge {
            src: SegmentId::new(waiter, dst.seg.seq() - 1),
            dst: src.seg,
            kind: EdgeKind::WaitWake,
            strength: Strength::Weak,
            ts: src.ts,
            src_syscall: -1,
        });
    }
}

/// Marker text that starts a user-space dispatch callout in the writing thread
/// (`argus:dispatch-begin NAME`; written by applications to `trace_marker`, or made by the
/// collector from a uprobe on the dispatch function, `argus record --dispatch`).
pub const DISPATCH_BEGIN: &str = "argus:dispatch-begin";
/// Marker text that ends the innermost dispatch callout of the same `NAME`.
pub const DISPATCH_END: &str = "argus:dispatch-end";

/// The `function` id of a dispatch callout's [`SegmentKind::WorkItem`] (its `work` is 0):
/// the callout's name (trimmed) hashed with FNV-1a, so callouts of different functions
/// differ and a begin matches its end.
pub fn dispatch_id(name: &str) -> u64 {
    name.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

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
}

impl KeyState {
    /// A fresh machine for `key`.
    pub fn new(key: Key) -> KeyState {
        match key {
            Key::Thread(tid) => KeyState::Thread(Box::new(ThreadState::new(tid))),
            Key::Irq(cpu) => KeyState::Irq(IrqState::new(cpu)),
            Key::ProcSignal(..) => KeyState::Object(ObjectState::default()),
            Key::Timer(_) | Key::WheelTimer(_) | Key::Work(_) => KeyState::Object(ObjectState {
                arms_done: true,
                ..ObjectState::default()
            }),
            Key::Pipe(_) | Key::Channel(_) | Key::Flag(..) => KeyState::Object(ObjectState {
                last_arm: None,
                sticky: true,
                fired_by: Vec::new(),
                arms_done: true,
            }),
            Key::Lock(_) => KeyState::Lock(LockState::default()),
        }
    }

    /// Feeds one event; final records go to `out`.
    pub fn on_event(&mut self, ev: &Event, role: Role, cfg: &RulesConfig, out: &mut Vec<Output>) {
        match self {
            KeyState::Thread(t) => t.on_event(ev, role, cfg, out),
            KeyState::Irq(i) => i.on_event(ev, cfg, out),
            KeyState::Object(t) => t.on_event(ev, role, cfg, out),
            KeyState::Lock(l) => l.on_event(ev, out),
        }
    }

    /// The current versions of this key's mutable records, given that every event up to
    /// `watermark` has been seen.
    pub fn mutable(&self, watermark: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
        match self {
            KeyState::Thread(t) => t.mutable(watermark, cfg, out),
            KeyState::Irq(i) => i.mutable(out),
            KeyState::Object(_) | KeyState::Lock(_) => {}
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
    /// Turns that were refused file lock attempts (a retry loop may sleep long).
    #[serde(default)]
    retries: u32,
}

/// Consecutive timed-out waits of a thread in one syscall on one object (a client's `poll`
/// loop with a timeout, a runtime's monitor parked with back-off timeouts): one logical
/// wait, a LongWait over its whole span, ended by the first wait on the object that is not a
/// timeout (ARCHITECTURE.md §6).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct LogicalRun {
    first: SegmentId,
    last: SegmentId,
    start_ns: Nanos,
    end_ns: Nanos,
    on_cpu_ns: u64,
    wait_ns: u64,
    segments: u32,
    timeouts: u32,
    wait_syscall: i32,
    object: u64,
}

impl LogicalRun {
    fn of(&self, seg: &Segment) -> bool {
        seg.wait_syscall == self.wait_syscall && seg.wait_object == Some(self.object)
    }

    fn add(&mut self, seg: &Segment) {
        self.last = seg.id;
        self.end_ns = seg.end_ns;
        self.on_cpu_ns += seg.on_cpu_ns;
        self.wait_ns += seg.wait_ns();
        self.segments += 1;
    }

    /// Its spin, when it is one: at least one timeout merged with another wait, longer than
    /// the threshold. `until` is how long it is known to last.
    fn spin(
        &self,
        tid: Tid,
        pid: Pid,
        until: Nanos,
        open: bool,
        cfg: &RulesConfig,
    ) -> Option<Spin> {
        if self.segments < 2 || self.start_ns.until(until) <= cfg.spin_threshold_ns {
            return None;
        }
        Some(Spin {
            segment: self.first,
            last: self.last,
            tid,
            pid,
            class: SpinClass::LongWait,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            open,
            on_cpu_ns: self.on_cpu_ns,
            wait_ns: self.wait_ns,
            segments: self.segments,
            wait_syscall: self.wait_syscall,
            timeouts: self.timeouts,
        })
    }
}

/// A work item being run (a callout), innermost last.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Callout {
    work: u64,
    function: u64,
    culled: bool,
    /// The segment of its latest part.
    seg: SegmentId,
}

/// The counters of the current segment at the entry of a message syscall, to split there
/// after the fact.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Mark {
    ts: Nanos,
    events: u32,
    syscalls: u32,
    seq_len: usize,
    preemptions: u32,
    yields: u32,
    on_cpu_ns: u64,
    /// The run in progress at the mark (its start), and how much of it preceded the mark.
    since: Option<Nanos>,
    run_extra: u64,
}

/// A message syscall in flight.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct MsgOp {
    nr: i32,
    fd: u64,
    /// The connection it went through, as a peer.
    peer: Peer,
    seg: SegmentId,
    mark: Mark,
    /// Endpoints produced inside it, held back until it returns.
    srcs: Vec<Src>,
    /// Tasks it woke.
    woke: Vec<Tid>,
}

/// A member of a message peer set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Peer {
    /// A descriptor whose connection is unknown, by number.
    Fd(u64),
    /// A connection ([`RulesConfig::message_channel`]).
    Chan(u64),
    /// A descriptor number the thread closed since (it may come back as another
    /// connection): no later operation shares it.
    Closed,
    Task(Tid),
}

/// A thread-order edge whose strength waits on the syscall retried after the wait, or on
/// the end stack of the segment it leads into.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PendingOrder {
    edge: CausalEdge,
    /// Set once the previous segment's wait returned a retry result: the syscall that
    /// would be a retry.
    retry: Option<i32>,
    /// The previous segment has an end stack: the stack rule decides when this one ends.
    #[serde(default)]
    stacks: bool,
}

/// The call-site stacks of a thread that has user stacks (the thread-order stack rule, see
/// the module docs). Call sites are `ips[1..]` of a user stack, innermost first.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Stacks {
    /// The common outermost chain of the thread's anchored stacks, outermost first; empty
    /// before the first stack, never empty after.
    base: Vec<u64>,
    /// End stack of the current segment, if known.
    cur: Option<Box<[u64]>>,
    /// End stack of the previous segment, if known.
    prev: Option<Box<[u64]>>,
}

impl Stacks {
    /// Folds a stack's call sites (non-empty) into the base. False when its outermost call
    /// site is not the base's: a cut-short or derailed walk, not used.
    fn observe(&mut self, sites: &[u64]) -> bool {
        if self.base.is_empty() {
            self.base.extend(sites.iter().rev());
            return true;
        }
        if self.base.first() != sites.last() {
            return false;
        }
        let common = self
            .base
            .iter()
            .zip(sites.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        self.base.truncate(common);
        true
    }

    /// The work frames of an anchored stack: its call sites inside the base, but for the
    /// innermost (the call of the wrapper that blocked, shared by every wait at that place).
    fn work<'a>(&self, sites: &'a [u64]) -> &'a [u64] {
        sites
            .get(1..sites.len().saturating_sub(self.base.len()))
            .unwrap_or(&[])
    }

    /// The stack rule on `prev → cur`: `Some(true)` boost (a shared call site inside the
    /// base), `Some(false)` prune (none shared), `None` no verdict (a stack unknown, or no
    /// work frames).
    fn verdict(&self) -> Option<bool> {
        let prev = self.work(self.prev.as_deref()?);
        let cur = self.work(self.cur.as_deref()?);
        if prev.is_empty() || cur.is_empty() {
            return None;
        }
        Some(prev.iter().any(|s| cur.contains(s)))
    }
}

/// How many connection descriptors and pending signals a thread remembers.
const MAX_CONN_FDS: usize = 64;
const MAX_PENDING_SIGNALS: usize = 64;
const MAX_PEERS: usize = 32;

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
    fn new(tid: Tid) -> ThreadState {
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

    fn on_event(&mut self, ev: &Event, role: Role, cfg: &RulesConfig, out: &mut Vec<Output>) {
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
    /// attempt, or a lock granted after a refusal, their target ([`LockState`]). A release
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
            // group leader, paired with its generation through [`Key::ProcSignal`].
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
    fn mutable(&self, watermark: Nanos, cfg: &RulesConfig, out: &mut Vec<Output>) {
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

    fn spin_deadline(&self, cfg: &RulesConfig, from: Nanos) -> Option<Nanos> {
        let after = |t: Nanos| Nanos(t.0.saturating_add(cfg.spin_threshold_ns));
        let cur = self.cur.as_ref().map(|c| after(c.start_ns));
        let logical = self.logical.as_ref().map(|r| after(r.start_ns));
        cur.into_iter().chain(logical).filter(|d| *d >= from).min()
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
        timeouts: 0,
    })
}

fn run_spin(run: &YieldRun, tid: Tid, pid: Pid, open: bool, cfg: &RulesConfig) -> Option<Spin> {
    if (run.segments < 3 && run.retries < 2)
        || run.start_ns.until(run.end_ns) <= cfg.spin_threshold_ns
    {
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
        timeouts: 0,
    })
}

/// One open interrupt-context handler.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Frame {
    seg: Segment,
    /// A maintenance callback: what it does is culled.
    culled: bool,
}

/// Softirq vectors that are a device's bottom half (NET_TX, NET_RX, BLOCK, IRQ_POLL,
/// TASKLET).
fn is_device_softirq(vec: u32) -> bool {
    matches!(vec, 2..=6)
}

/// How soon after a hard interrupt returns its bottom half must start to be attributed to
/// it.
const BOTTOM_HALF_NS: u64 = 1_000_000;

/// Interrupt context of one CPU: a stack of open handlers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IrqState {
    cpu: Cpu,
    next_ord: u32,
    stack: Vec<Frame>,
    /// The last hard interrupt, when it was the last interrupt record on this CPU.
    last_hard: Option<(SegmentId, Nanos)>,
}

impl IrqState {
    fn new(cpu: Cpu) -> IrqState {
        IrqState {
            cpu,
            next_ord: 0,
            stack: Vec::new(),
            last_hard: None,
        }
    }

    fn new_segment(&mut self, ts: Nanos, kind: SegmentKind) -> Segment {
        let tid = Tid::irq(self.cpu);
        let id = SegmentId::new(tid, self.next_ord);
        self.next_ord += 1;
        Segment {
            events: 1,
            ..Segment::starting(id, Pid(tid.0), kind, ts, StartCause::Interrupt)
        }
    }

    fn push(&mut self, ts: Nanos, kind: SegmentKind, culled: bool) -> SegmentId {
        let seg = self.new_segment(ts, kind);
        let id = seg.id;
        self.stack.push(Frame { seg, culled });
        id
    }

    fn pop_matching(&mut self, ts: Nanos, out: &mut Vec<Output>, m: impl Fn(&SegmentKind) -> bool) {
        if let Some(pos) = self.stack.iter().rposition(|s| m(&s.seg.kind)) {
            // Handlers nested inside the one ending lost their exit record: close them too.
            while self.stack.len() > pos {
                if let Some(Frame { mut seg, .. }) = self.stack.pop() {
                    seg.end_ns = ts;
                    seg.on_cpu_ns = seg.start_ns.until(ts);
                    seg.end = EndCause::HandlerDone;
                    if self.stack.is_empty() && matches!(seg.kind, SegmentKind::HardIrq { .. }) {
                        self.last_hard = Some((seg.id, ts));
                    }
                    out.push(Output::Segment(seg));
                }
            }
        }
    }

    fn timer_fires(
        &mut self,
        ev: &Event,
        timer: u64,
        function: u64,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        let culled = cfg.cull_functions.contains(&function);
        let id = self.push(ev.ts, SegmentKind::Timer { timer, function }, culled);
        out.push(if culled {
            Output::Count(Counter::Culled)
        } else {
            Output::Dst(Dst {
                seq: ev.seq,
                seg: id,
                kind: EdgeKind::Timer,
                wait: -1,
                paired: true,
                waited: false,
            })
        });
    }

    fn on_event(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        let last_hard = self.last_hard.take();
        match ev.kind {
            EventKind::IrqEntry { irq } => {
                self.push(ts, SegmentKind::HardIrq { irq }, false);
            }
            EventKind::SoftirqEntry { vec } => {
                let id = self.push(ts, SegmentKind::SoftIrq { vec }, false);
                if let Some((hard, at)) = last_hard {
                    if self.stack.len() == 1
                        && is_device_softirq(vec)
                        && at.until(ts) <= BOTTOM_HALF_NS
                    {
                        out.push(Output::Edge(CausalEdge {
                            src: hard,
                            dst: id,
                            kind: EdgeKind::Queue,
                            strength: Strength::Boosted,
                            ts: at,
                            src_syscall: -1,
                        }));
                    }
                }
            }
            EventKind::HrtimerExpire { timer, function }
            | EventKind::TimerExpire { timer, function } => {
                self.timer_fires(ev, timer, function, cfg, out);
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
            EventKind::HrtimerExpireExit { timer } | EventKind::TimerExpireExit { timer } => self
                .pop_matching(
                    ts,
                    out,
                    |k| matches!(k, SegmentKind::Timer { timer: t, .. } if *t == timer),
                ),
            EventKind::Waking { .. }
            | EventKind::WakeupNew { .. }
            | EventKind::Fork { .. }
            | EventKind::HrtimerStart { .. }
            | EventKind::TimerStart { .. }
            | EventKind::WorkQueue { .. }
            | EventKind::SignalGenerate { .. } => {
                let (seg, culled) = match self.stack.last_mut() {
                    Some(top) => {
                        top.seg.end_ns = top.seg.end_ns.max(ts);
                        top.seg.events += 1;
                        (top.seg.id, top.culled)
                    }
                    None => {
                        // Interrupt work with no enclosing handler record (IPI, local timer
                        // vector): a point segment of its own.
                        let mut s = self.new_segment(ts, SegmentKind::Interrupt);
                        s.end = EndCause::HandlerDone;
                        let id = s.id;
                        out.push(Output::Segment(s));
                        (id, false)
                    }
                };
                if culled {
                    out.push(Output::Count(Counter::Culled));
                } else {
                    out.push(Output::Src(Src {
                        seq: ev.seq,
                        seg,
                        ts,
                        syscall: -1,
                        interrupt: true,
                        exiting: false,
                        condvar: false,
                    }));
                }
            }
            _ => {
                // Other records in interrupt context (stacks, …) keep the bottom-half link.
                if self.stack.is_empty() {
                    self.last_hard = last_hard;
                }
            }
        }
    }

    fn mutable(&self, out: &mut Vec<Output>) {
        for f in &self.stack {
            out.push(Output::Segment(f.seg.clone()));
        }
    }
}

/// A timer, a work item or a pipe: the last action not yet matched with an effect.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ObjectState {
    /// `seq`, time and acting thread of the last arming.
    last_arm: Option<(u64, Nanos, Tid)>,
    /// Whether an action may cause several effects (a pipe's written data is read by
    /// several reads) rather than one (a timer expires once per arming).
    sticky: bool,
    /// Sticky objects: threads already linked to the last arming (one edge per reader
    /// thread and write, however many reads it takes).
    #[serde(default)]
    fired_by: Vec<Tid>,
    /// Whether the key reports [`Output::ArmDone`]: not for process-directed signals,
    /// whose generating event also has a direct target (the signalled thread).
    #[serde(default)]
    arms_done: bool,
}

impl ObjectState {
    fn on_event(&mut self, ev: &Event, role: Role, cfg: &RulesConfig, out: &mut Vec<Output>) {
        match role {
            Role::Arm => {
                if let Some((old, ..)) = self.last_arm {
                    self.arm_done(old, out);
                }
                self.last_arm = Some((ev.seq, ev.ts, ev.tid));
                self.fired_by.clear();
            }
            Role::Fire => {
                let arm = if self.sticky {
                    self.last_arm
                } else {
                    self.last_arm.take()
                };
                let mut paired = false;
                match arm {
                    // Events were lost in between: the arming that caused this may be one
                    // we never saw.
                    Some((old, at, _)) if cfg.crosses_gap(at, ev.ts) => {
                        self.last_arm = None;
                        self.arm_done(old, out);
                    }
                    // A thread reading back what it wrote itself (a self-pipe, its own
                    // flag) depends on nobody.
                    Some((_, _, by)) if self.sticky && by == ev.tid => {}
                    // Each reader thread is linked once per write (a second link would
                    // repeat the edge); past MAX_PEERS readers of one write, none more.
                    Some(_)
                        if self.sticky
                            && (self.fired_by.contains(&ev.tid)
                                || self.fired_by.len() >= MAX_PEERS) => {}
                    Some((arm, _, _)) => {
                        if self.sticky {
                            self.fired_by.push(ev.tid);
                        }
                        out.push(Output::Pair(Pair { arm, fire: ev.seq }));
                        paired = true;
                        if !self.sticky {
                            // Its one effect came.
                            self.arm_done(arm, out);
                        }
                    }
                    None => {}
                }
                if !paired {
                    out.push(Output::NoEffect(ev.seq));
                }
            }
            _ => {}
        }
    }

    /// No later effect can be paired with the action `arm`.
    fn arm_done(&self, arm: u64, out: &mut Vec<Output>) {
        if self.arms_done {
            out.push(Output::ArmDone(arm));
        }
    }
}

/// Holders a [`LockState`] keeps (shared locks can have many).
const MAX_HOLDERS: usize = 8;

/// A lockable file (lock-file rule), from the kernel's lock records ([`EventKind::FileLock`]):
/// the processes holding a lock on it (their latest granted lock, most recent last), the last
/// release by one of them, and the processes whose latest attempt was refused. Each refused
/// attempt is paired ([`Pair`]) with every other holder's lock (what it ran into); a lock
/// granted to a process after a refusal is paired with the last release by another process
/// (what it waited for). A release by a process that holds nothing known here (a child
/// closing an inherited descriptor at `exec`, a lock taken before the trace began) is no
/// release of a lock the trace saw, and is ignored. The threads emit the ends of the pairs
/// ([`ThreadState`]): every granted operation is a source, every refusal and every grant
/// after a refusal a target.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LockState {
    /// `(pid, seq, ts)` of each holder's latest granted lock.
    holders: Vec<(Pid, u64, Nanos)>,
    /// `(pid, seq, ts)` of the latest release by a holder.
    released: Option<(Pid, u64, Nanos)>,
    /// Processes whose latest attempt was refused.
    refused: Vec<Pid>,
}

impl LockState {
    fn on_event(&mut self, ev: &Event, out: &mut Vec<Output>) {
        let EventKind::FileLock { lock_type, ret, .. } = ev.kind else {
            return;
        };
        let unlock = lock_type == 2;
        // Unlike a timer (re-armed all the time), a lock changes hands rarely: a holder
        // seen before a lost-events gap is still taken as the holder after it (a hand-over
        // inside the gap, unseen, would be blamed on the old holder).
        let mut paired = false;
        let mut pair = |arm: u64, out: &mut Vec<Output>| {
            out.push(Output::Pair(Pair { arm, fire: ev.seq }));
            paired = true;
        };
        match (unlock, ret) {
            (false, 0) => {
                if let Some(i) = self.refused.iter().position(|p| *p == ev.pid) {
                    self.refused.swap_remove(i);
                    match self.released.filter(|r| r.0 != ev.pid) {
                        Some((_, seq, _)) => pair(seq, out),
                        // Released unseen: whoever held it.
                        None => {
                            for &(_, seq, _) in self.holders.iter().filter(|h| h.0 != ev.pid) {
                                pair(seq, out);
                            }
                        }
                    }
                }
                if let Some(i) = self.holders.iter().position(|h| h.0 == ev.pid) {
                    out.push(Output::ArmDone(self.holders.remove(i).1));
                } else if self.holders.len() >= MAX_HOLDERS {
                    out.push(Output::ArmDone(self.holders.remove(0).1));
                }
                self.holders.push((ev.pid, ev.seq, ev.ts));
            }
            (true, 0) => {
                if let Some(i) = self.holders.iter().position(|h| h.0 == ev.pid) {
                    out.push(Output::ArmDone(self.holders.remove(i).1));
                    if let Some((_, old, _)) = self.released.replace((ev.pid, ev.seq, ev.ts)) {
                        out.push(Output::ArmDone(old));
                    }
                } else {
                    out.push(Output::ArmDone(ev.seq));
                }
            }
            (false, r) if is_lock_refused(i64::from(r)) => {
                for &(_, seq, _) in self.holders.iter().filter(|h| h.0 != ev.pid) {
                    pair(seq, out);
                }
                if !self.refused.contains(&ev.pid) {
                    if self.refused.len() >= MAX_HOLDERS {
                        self.refused.remove(0);
                    }
                    self.refused.push(ev.pid);
                }
            }
            // A blocking request that will wait (its wake-up is the edge), or an error.
            _ => {}
        }
        if !paired {
            out.push(Output::NoEffect(ev.seq));
        }
    }
}

#[cfg(test)]
mod memo_tests {
    use super::*;

    /// The memoized look-up answers like the plain one, for random maps (reused pids,
    /// forks, several spans per descriptor) and queries that jump back and forth in time,
    /// across a change of the map.
    #[test]
    fn memoized_lookups_equal_plain_ones() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut m = ChannelMap::default();
        let mut checked = 0;
        for round in 0..3 {
            for _ in 0..60 {
                let (pid, fd, at) = (Pid(rnd(6) as i32), rnd(4) as i32, Nanos(rnd(1_000)));
                m.insert(pid, fd, at, ChannelEnd::pipe(rnd(9) + 1));
            }
            for _ in 0..8 {
                m.set_parent(Pid(rnd(6) as i32), Pid(rnd(6) as i32), Nanos(rnd(1_000)));
            }
            for _ in 0..20_000 {
                let (pid, fd, ts) = (Pid(rnd(7) as i32), rnd(5) as i32, Nanos(rnd(1_100)));
                let got = m.lookup(pid, fd, ts);
                assert_eq!(
                    got,
                    m.resolve(pid, fd, ts),
                    "{pid:?} fd {fd} at {ts:?}, round {round}"
                );
                checked += usize::from(got.is_some());
            }
        }
        assert!(checked > 1_000, "only {checked} look-ups found a channel");
        // An equal map built apart compares equal whatever its memo version.
        let again = ChannelMap::from(ChannelMapRepr::from(m.clone()));
        assert_ne!(again.version, m.version);
        assert_eq!(again, m);
    }
}
