//! The thread-order edge (weak; pruned, boosted by retries and call stacks).

use argus_schema::CausalEdge;
use serde::{Deserialize, Serialize};

/// A thread-order edge whose strength waits on the syscall retried after the wait, or on
/// the end stack of the segment it leads into.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct PendingOrder {
    pub(super) edge: CausalEdge,
    /// Set once the previous segment's wait returned a retry result: the syscall that
    /// would be a retry.
    pub(super) retry: Option<i32>,
    /// The previous segment has an end stack: the stack rule decides when this one ends.
    #[serde(default)]
    pub(super) stacks: bool,
}

/// The call-site stacks of a thread that has user stacks (the thread-order stack rule, see
/// the module docs). Call sites are `ips[1..]` of a user stack, innermost first.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Stacks {
    /// The common outermost chain of the thread's anchored stacks, outermost first; empty
    /// before the first stack, never empty after.
    pub(super) base: Vec<u64>,
    /// End stack of the current segment, if known.
    pub(super) cur: Option<Box<[u64]>>,
    /// End stack of the previous segment, if known.
    pub(super) prev: Option<Box<[u64]>>,
}

impl Stacks {
    /// Folds a stack's call sites (non-empty) into the base. False when its outermost call
    /// site is not the base's: a cut-short or derailed walk, not used.
    pub(super) fn observe(&mut self, sites: &[u64]) -> bool {
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
    pub(super) fn work<'a>(&self, sites: &'a [u64]) -> &'a [u64] {
        sites
            .get(1..sites.len().saturating_sub(self.base.len()))
            .unwrap_or(&[])
    }

    /// The stack rule on `prev → cur`: `Some(true)` boost (a shared call site inside the
    /// base), `Some(false)` prune (none shared), `None` no verdict (a stack unknown, or no
    /// work frames).
    pub(super) fn verdict(&self) -> Option<bool> {
        let prev = self.work(self.prev.as_deref()?);
        let cur = self.work(self.cur.as_deref()?);
        if prev.is_empty() || cur.is_empty() {
            return None;
        }
        Some(prev.iter().any(|s| cur.contains(s)))
    }
}
