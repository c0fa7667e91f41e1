//! Parameters of the rules: [`RulesConfig`] (thresholds, kernel thread classes, culled
//! callbacks, lost-events gaps, fd identity) and the user's rules ([`UserRules`], from the
//! rules file, [`crate::rulesfile`]).

use super::channels::{ChannelEnd, ChannelMap};
use super::key::Key;
use crate::gaps::GapSet;
use argus_schema::{Nanos, Pid, Tid};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

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
    /// there depends on the last write into the channel
    /// ([`EdgeKind::Message`](argus_schema::EdgeKind::Message)).
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

    /// Whether a lost-events gap lies between `from` and `to` ([`GapSet::crosses`]).
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
