//! The thread-order rule (ARCHITECTURE.md §5, "thread order"; the paper adds "weak causal
//! edges between the split segments in case the splitting was incorrect"): a weak edge from
//! a thread's previous segment to its next one.
//!
//! - **Pruned** ([`Counter::PrunedOrder`]) for kernel delegate threads
//!   ([`RulesConfig::kernel_threads`]), around work items (each serves another requester),
//!   and across a lost-events gap (the thread may have run and waited unseen).
//! - **Boosted** when syscall semantics show one piece of work split by a heuristic: the
//!   wait that ended the previous segment returned a retry result
//!   ([`is_retry_result`](super::is_retry_result)) and the next syscall is the same call.
//!   Until the retry is known the edge is reported weak, as a mutable record.
//! - **Call stacks** prune or boost it ([`Counter::PrunedStacks`],
//!   [`Counter::BoostedStacks`]): see "Thread order and call stacks" in the
//!   [module docs](super). [`Stacks`] keeps the thread's base and end stacks; the verdict is
//!   taken when the segment the edge leads into leaves `cur`.
//!
//! Nested callouts boost the edge between the outer item's parts too; that edge is made by
//! the callout rule ([`super::callouts`]).

use super::config::RulesConfig;
use super::output::{Counter, Output};
use argus_schema::{CausalEdge, EdgeKind, Nanos, Segment, SegmentId, SegmentKind, Strength, Tid};
use serde::{Deserialize, Serialize};

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

/// The thread-order part of a [`ThreadState`](super::ThreadState): what is known of the
/// previous segment, the edge into the current one while its strength is undecided, and the
/// thread's call stacks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Order {
    /// The kind of the segment before `cur`.
    prev_kind: SegmentKind,
    /// Start of the previous segment (a thread-order edge from it must not cross a gap).
    prev_start: Nanos,
    /// The edge into the current segment, while undecided.
    order: Option<PendingOrder>,
    /// Whether a user stack now would be a segment-boundary stack: the thread's last event
    /// was a blocking switch-out or a syscall entry (stack events follow their event).
    #[serde(default)]
    stack_boundary: bool,
    /// Call stacks, once the thread has any (nothing is kept for a thread without).
    #[serde(default)]
    stacks: Option<Box<Stacks>>,
}

impl Default for Order {
    fn default() -> Self {
        Order {
            prev_kind: SegmentKind::Task,
            prev_start: Nanos(0),
            order: None,
            stack_boundary: false,
            stacks: None,
        }
    }
}

impl Order {
    /// A segment leaves `cur`: a thread-order edge into it whose boost is undecided is
    /// decided by the stack rule (both end stacks are known now, if ever), else it stays
    /// weak; its end stack becomes the previous one.
    pub(super) fn retire(&mut self, seg: &Segment, out: &mut Vec<Output>) {
        self.prev_kind = seg.kind;
        self.prev_start = seg.start_ns;
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
    }

    /// A thread-order edge from the previous segment to `cur` (of thread `tid`, opened at
    /// `ts`), unless pruned; weak, or pending a boost when the previous segment's wait has not
    /// returned yet (`pending`) or the stack rule is to decide it.
    pub(super) fn link(
        &mut self,
        tid: Tid,
        cur: &Segment,
        pending: bool,
        ts: Nanos,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        if cur.id.seq() == 0 {
            return;
        }
        if cfg.kernel_threads.contains(&tid)
            || matches!(cur.kind, SegmentKind::WorkItem { .. })
            || matches!(self.prev_kind, SegmentKind::WorkItem { .. })
            || cfg.crosses_gap(self.prev_start, ts)
        {
            out.push(Output::Count(Counter::PrunedOrder));
            return;
        }
        let edge = CausalEdge {
            src: SegmentId::new(tid, cur.id.seq() - 1),
            dst: cur.id,
            kind: EdgeKind::ThreadOrder,
            strength: Strength::Weak,
            ts,
            src_syscall: -1,
        };
        let stacks = self.stacks.as_ref().is_some_and(|s| s.prev.is_some());
        if pending || stacks {
            self.order = Some(PendingOrder {
                edge,
                retry: None,
                stacks,
            });
        } else {
            out.push(Output::Edge(edge));
        }
    }

    /// The retry test at the entry of syscall `nr`: boosted when it retries the wait that
    /// returned a retry result; still undecided while that wait's result is unknown
    /// (`pending`: a syscall without exit record).
    pub(super) fn syscall(&mut self, nr: i32, pending: bool, out: &mut Vec<Output>) {
        if let Some(o) = self.order.take() {
            if o.retry == Some(nr) {
                out.push(Output::Edge(CausalEdge {
                    strength: Strength::Boosted,
                    ..o.edge
                }));
            } else if o.retry.is_none() && pending {
                // The wait's result is not known yet (a syscall without exit
                // record): keep waiting.
                self.order = Some(o);
            } else {
                self.settle(o, out);
            }
        }
    }

    /// The wait `nr` of the previous segment returned: with a retry result (`retry`) the
    /// edge waits for the next syscall, else the retry test is over.
    pub(super) fn wait_returned(&mut self, nr: i32, retry: bool, out: &mut Vec<Output>) {
        if let Some(o) = self.order.as_mut() {
            if retry {
                o.retry = Some(nr);
            } else if let Some(o) = self.order.take() {
                self.settle(o, out);
            }
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

    /// Whether a stack now would be a boundary stack; the flag is cleared (every event of the
    /// thread takes it).
    pub(super) fn take_boundary(&mut self) -> bool {
        std::mem::take(&mut self.stack_boundary)
    }

    /// The next user stack of the thread is a boundary stack (`true`), or not.
    pub(super) fn set_boundary(&mut self, boundary: bool) {
        self.stack_boundary = boundary;
    }

    /// A user stack of the thread: it shapes the base, and taken at a boundary (`boundary`)
    /// it is where the current segment ended so far.
    pub(super) fn user_stack(&mut self, ips: &[u64], boundary: bool) {
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

    /// The undecided edge, reported weak until decided.
    pub(super) fn mutable(&self, out: &mut Vec<Output>) {
        if let Some(o) = &self.order {
            out.push(Output::Edge(o.edge.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{EndCause, Pid, StartCause};

    fn segment(tid: Tid, ord: u32, ts: u64) -> Segment {
        let mut s = Segment::starting(
            SegmentId::new(tid, ord),
            Pid(tid.0),
            SegmentKind::Task,
            Nanos(ts),
            StartCause::Woken,
        );
        s.end = EndCause::Woken;
        s
    }

    fn edges(out: &[Output]) -> Vec<Strength> {
        out.iter()
            .filter_map(|o| match o {
                Output::Edge(e) => Some(e.strength),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn work_frames_shared_boost_and_disjoint_prune() {
        // Outermost first in the base: main → loop; the work frames are the call sites
        // between the base and the innermost one.
        let mut st = Stacks::default();
        assert!(st.observe(&[0x10, 0xa1, 0x2, 0x1]));
        assert!(st.observe(&[0x10, 0xb1, 0x2, 0x1]));
        assert_eq!(st.base, vec![0x1, 0x2]);
        // A walk cut short (another outermost call site) is not used.
        assert!(!st.observe(&[0x10, 0x9]));
        st.prev = Some(vec![0x10, 0xa2, 0xa1, 0x2, 0x1].into());
        st.cur = Some(vec![0x11, 0xa1, 0x2, 0x1].into());
        assert_eq!(st.verdict(), Some(true), "the same callback at both waits");
        st.cur = Some(vec![0x11, 0xb1, 0x2, 0x1].into());
        assert_eq!(st.verdict(), Some(false), "unrelated callbacks of one loop");
        st.cur = Some(vec![0x11, 0x2, 0x1].into());
        assert_eq!(st.verdict(), None, "no work frames: no verdict");
    }

    #[test]
    fn a_retried_wait_boosts_and_another_syscall_leaves_the_edge_weak() {
        let cfg = RulesConfig::default();
        let tid = Tid(10);
        for (next, want) in [(202, Strength::Boosted), (0, Strength::Weak)] {
            let mut o = Order::default();
            let mut out = Vec::new();
            o.retire(&segment(tid, 0, 1), &mut out);
            // The wait of segment 0 has not returned yet: the edge waits.
            o.link(tid, &segment(tid, 1, 5), true, Nanos(5), &cfg, &mut out);
            assert!(out.is_empty());
            o.mutable(&mut out);
            assert_eq!(edges(&out), [Strength::Weak], "reported weak meanwhile");
            out.clear();
            o.wait_returned(202, true, &mut out); // futex returned EAGAIN
            o.syscall(next, false, &mut out);
            assert_eq!(edges(&out), [want]);
        }
    }

    #[test]
    fn work_items_kernel_threads_and_gaps_prune() {
        let mut cfg = RulesConfig::default();
        let tid = Tid(10);
        let mut o = Order::default();
        let mut out = Vec::new();
        let mut item = segment(tid, 1, 5);
        item.kind = SegmentKind::WorkItem {
            work: 1,
            function: 2,
        };
        o.link(tid, &item, false, Nanos(5), &cfg, &mut out);
        cfg.kernel_threads.insert(tid);
        o.link(tid, &segment(tid, 2, 6), false, Nanos(6), &cfg, &mut out);
        cfg.kernel_threads.clear();
        cfg.add_gap(Nanos(2), Nanos(3));
        o.link(tid, &segment(tid, 3, 7), false, Nanos(7), &cfg, &mut out);
        assert_eq!(out, vec![Output::Count(Counter::PrunedOrder); 3]);
        // The first segment has no predecessor.
        o.link(tid, &segment(tid, 0, 8), false, Nanos(8), &cfg, &mut out);
        assert_eq!(out.len(), 3);
    }
}
