//! What the state machines produce ([`Output`]): records of the graph, the two sides of a
//! causal event to be joined ([`Src`], [`Dst`], [`Pair`]), hints for the joins and the rule
//! counters ([`Counter`], [`Counts`]).

use argus_schema::{CausalEdge, EdgeKind, Nanos, Segment, SegmentId, Spin};
use serde::{Deserialize, Serialize};

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
