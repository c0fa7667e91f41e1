//! The endpoint joins of the dataflow, done incrementally with hash maps.
//!
//! The keyed operator emits the two ends of every causal event separately: the actor's
//! [`Src`] and the target's [`Dst`], joined on the event's `seq`; for paired effects (timers,
//! work items, pipes) the object key's [`Pair`] links the action's `seq` (`arm`) to the
//! effect's (`fire`). These operators compute exactly what the relational joins
//! `Src ⋈ Dst` and `Src ⋈ Pair ⋈ Dst` would, as multisets with differences: for each closed
//! epoch, `ΔL ⋈ R + (L + ΔL) ⋈ ΔR`, then the state absorbs the deltas. Unlike differential
//! arrangements they keep one compact entry per `seq` (no batches, no merging, no times), so
//! the cost of an epoch depends on its own size only, not on the history behind it.
//!
//! Most actors and targets of paired effects never pair (a write read by nobody new, a
//! read of data already linked): the object keys say so ([`SideA::ArmDone`],
//! [`SideB::NoEffect`]) and the stages forget those entries at the end of the epoch, so the
//! state holds what can still join rather than the whole history (a 17M-event pipe
//! ping-pong: ~25k entries per worker instead of ~1.6M). Forgetting loses no output: no later
//! pair can name a done action (an actor with a direct target is never reported done), and
//! nothing can pair an effect that paired with nothing; a later retraction of a forgotten
//! actor still finds its pairs, which are kept.

use crate::rules::{join_edges, Dst, Pair, RulesConfig, Src};
use serde::{Deserialize, Serialize};
use std::hash::Hash;

/// A difference in multiplicity (+1 inserts, -1 retracts).
pub(super) type Diff = i64;

/// The input of the first join stage, exchanged by [`SideA::key`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum SideA {
    /// An actor, keyed by its event's `seq`.
    Src(Src),
    /// A direct target (wake-up, fork, signal), keyed by its event's `seq`.
    Direct(Dst),
    /// An action/effect pair, keyed by the action's `seq`.
    Pair(Pair),
    /// No later pair names this action ([`crate::rules::Output::ArmDone`]): its actor is
    /// forgotten at the end of the epoch.
    ArmDone(u64),
}

impl SideA {
    pub(super) fn key(&self) -> u64 {
        match self {
            SideA::Src(s) => s.seq,
            SideA::Direct(d) => d.seq,
            SideA::Pair(p) => p.arm,
            SideA::ArmDone(arm) => *arm,
        }
    }
}

/// The input of the second stage (paired effects), exchanged by [`SideB::key`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum SideB {
    /// The actor of an action, re-keyed by the `seq` of an effect it caused.
    Src {
        /// The effect's `seq`.
        fire: u64,
        /// The action's actor.
        src: Src,
    },
    /// The target of an effect, keyed by the effect's `seq`.
    Dst(Dst),
    /// The effect was paired with no action ([`crate::rules::Output::NoEffect`]): its
    /// target is forgotten at the end of the epoch.
    NoEffect(u64),
}

impl SideB {
    pub(super) fn key(&self) -> u64 {
        match self {
            SideB::Src { fire, .. } => *fire,
            SideB::Dst(d) => d.seq,
            SideB::NoEffect(fire) => *fire,
        }
    }
}

/// A well-mixed hash of a join key, to spread keys over workers.
pub(super) fn spread(seq: u64) -> u64 {
    let mut z = seq.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small multiset: almost every `seq` has one record per side.
#[derive(Clone, Debug)]
enum Bag<T> {
    One(T, Diff),
    Many(Vec<(T, Diff)>),
}

impl<T: PartialEq> Bag<T> {
    fn iter(&self) -> impl Iterator<Item = (&T, Diff)> {
        let (one, many) = match self {
            Bag::One(t, d) => (Some((t, *d)), &[][..]),
            Bag::Many(v) => (None, v.as_slice()),
        };
        one.into_iter().chain(many.iter().map(|(t, d)| (t, *d)))
    }

    /// Adds `d` copies of `t`; returns whether the bag is now empty.
    fn add(&mut self, t: T, d: Diff) -> bool {
        match self {
            Bag::One(u, e) if *u == t => {
                *e += d;
                *e == 0
            }
            Bag::One(..) => {
                let Bag::One(u, e) = std::mem::replace(self, Bag::Many(Vec::with_capacity(2)))
                else {
                    return false;
                };
                if let Bag::Many(v) = self {
                    v.push((u, e));
                    v.push((t, d));
                }
                false
            }
            Bag::Many(v) => {
                match v.iter().position(|(u, _)| *u == t) {
                    Some(i) => {
                        v[i].1 += d;
                        if v[i].1 == 0 {
                            v.swap_remove(i);
                        }
                    }
                    None => v.push((t, d)),
                }
                if v.len() == 1 {
                    if let Some((u, e)) = v.pop() {
                        *self = Bag::One(u, e);
                    }
                }
                matches!(self, Bag::Many(v) if v.is_empty())
            }
        }
    }
}

/// One side of a join: multisets of records by key.
struct Side<K, T>(super::FastMap<K, Bag<T>>);

impl<K: Hash + Eq + Copy, T: PartialEq> Side<K, T> {
    fn new() -> Self {
        Side(super::FastMap::default())
    }

    fn get(&self, k: &K) -> impl Iterator<Item = (&T, Diff)> {
        self.0.get(k).into_iter().flat_map(|b| b.iter())
    }

    /// Forgets every record of `k`.
    fn forget(&mut self, k: &K) {
        self.0.remove(k);
    }

    fn add(&mut self, k: K, t: T, d: Diff) {
        if d == 0 {
            return;
        }
        match self.0.entry(k) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                if e.get_mut().add(t, d) {
                    e.remove();
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Bag::One(t, d));
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The first stage, by action/event `seq`: `Src ⋈ Dst` gives wake-up, fork and signal
/// edges; `Src ⋈ Pair` re-keys an action's actor by each effect it caused.
pub(super) struct StageA {
    srcs: Side<u64, Src>,
    direct: Side<u64, Dst>,
    fires: Side<u64, u64>,
}

impl StageA {
    pub(super) fn new() -> StageA {
        StageA {
            srcs: Side::new(),
            direct: Side::new(),
            fires: Side::new(),
        }
    }

    /// Applies one epoch's changes; `edge` gets the changed edges, `fire` the changed
    /// (effect, actor) pairs.
    pub(super) fn epoch(
        &mut self,
        delta: Vec<(SideA, Diff)>,
        rules: &RulesConfig,
        mut edge: impl FnMut(argus_schema::CausalEdge, Diff),
        mut fire: impl FnMut(SideB, Diff),
    ) {
        let mut dsrc = Vec::new();
        let mut rest = Vec::new();
        let mut done = Vec::new();
        for (r, d) in delta {
            match r {
                SideA::Src(s) => dsrc.push((s, d)),
                SideA::ArmDone(arm) => done.push(arm),
                other => rest.push((other, d)),
            }
        }
        // ΔSrc ⋈ (Dst, Pair) as they were.
        for (s, d) in &dsrc {
            for (t, e) in self.direct.get(&s.seq) {
                join_edges(s, t, rules, |x| edge(x, d * e));
            }
            for (f, e) in self.fires.get(&s.seq) {
                fire(
                    SideB::Src {
                        fire: *f,
                        src: s.clone(),
                    },
                    d * e,
                );
            }
        }
        for (s, d) in dsrc {
            self.srcs.add(s.seq, s, d);
        }
        // (Src + ΔSrc) ⋈ Δ(Dst, Pair).
        for (r, d) in rest {
            match r {
                SideA::Direct(t) => {
                    for (s, e) in self.srcs.get(&t.seq) {
                        join_edges(s, &t, rules, |x| edge(x, d * e));
                    }
                    self.direct.add(t.seq, t, d);
                }
                SideA::Pair(p) => {
                    for (s, e) in self.srcs.get(&p.arm) {
                        fire(
                            SideB::Src {
                                fire: p.fire,
                                src: s.clone(),
                            },
                            d * e,
                        );
                    }
                    self.fires.add(p.arm, p.fire, d);
                }
                SideA::Src(_) | SideA::ArmDone(_) => {}
            }
        }
        // Actions no later pair can name: their actors have joined every pair they will
        // (an actor of such an action has no direct target), so they are forgotten. Their
        // pairs stay: a later retraction of the actor still finds them.
        for arm in done {
            self.srcs.forget(&arm);
        }
    }

    /// Keys held (for tests and diagnostics).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.srcs.len() + self.direct.len() + self.fires.len()
    }
}

/// The second stage, by effect `seq`: (effect, actor) ⋈ the effect's target gives timer,
/// work-item and pipe edges.
pub(super) struct StageB {
    srcs: Side<u64, Src>,
    dsts: Side<u64, Dst>,
}

impl StageB {
    pub(super) fn new() -> StageB {
        StageB {
            srcs: Side::new(),
            dsts: Side::new(),
        }
    }

    /// Applies one epoch's changes; `edge` gets the changed edges.
    pub(super) fn epoch(
        &mut self,
        delta: Vec<(SideB, Diff)>,
        rules: &RulesConfig,
        mut edge: impl FnMut(argus_schema::CausalEdge, Diff),
    ) {
        let mut ddst = Vec::new();
        let mut unpaired = Vec::new();
        for (r, d) in delta {
            match r {
                SideB::NoEffect(fire) => unpaired.push(fire),
                SideB::Src { fire, src } => {
                    for (t, e) in self.dsts.get(&fire) {
                        join_edges(&src, t, rules, |x| edge(x, d * e));
                    }
                    self.srcs.add(fire, src, d);
                }
                SideB::Dst(t) => ddst.push((t, d)),
            }
        }
        for (t, d) in ddst {
            for (s, e) in self.srcs.get(&t.seq) {
                join_edges(s, &t, rules, |x| edge(x, d * e));
            }
            self.dsts.add(t.seq, t, d);
        }
        // Effects paired with no action: no actor will ever join their targets.
        for fire in unpaired {
            self.dsts.forget(&fire);
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.srcs.len() + self.dsts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{EdgeKind, Nanos, SegmentId, Tid};

    fn src(seq: u64, seg: u32) -> Src {
        Src {
            seq,
            seg: SegmentId::new(Tid(1), seg),
            ts: Nanos(seq),
            syscall: -1,
            interrupt: true,
            exiting: false,
            condvar: false,
        }
    }

    fn dst(seq: u64, paired: bool) -> Dst {
        Dst {
            seq,
            seg: SegmentId::new(Tid(2), 0),
            kind: if paired {
                EdgeKind::Timer
            } else {
                EdgeKind::Wakeup
            },
            wait: -1,
            paired,
            waited: false,
        }
    }

    #[test]
    fn a_retracted_actor_retracts_its_edge_and_the_state_empties() {
        let rules = RulesConfig::default();
        let mut a = StageA::new();
        let mut edges: Vec<(SegmentId, Diff)> = Vec::new();
        let mut fires = Vec::new();
        a.epoch(
            vec![(SideA::Src(src(5, 0)), 1)],
            &rules,
            |e, d| edges.push((e.src, d)),
            |f, d| fires.push((f, d)),
        );
        assert!(edges.is_empty());
        a.epoch(
            vec![(SideA::Direct(dst(5, false)), 1)],
            &rules,
            |e, d| edges.push((e.src, d)),
            |f, d| fires.push((f, d)),
        );
        assert_eq!(edges, vec![(SegmentId::new(Tid(1), 0), 1)]);
        // The actor's version changes (a split moved it to segment 1).
        a.epoch(
            vec![(SideA::Src(src(5, 0)), -1), (SideA::Src(src(5, 1)), 1)],
            &rules,
            |e, d| edges.push((e.src, d)),
            |f, d| fires.push((f, d)),
        );
        assert_eq!(
            edges[1..],
            [
                (SegmentId::new(Tid(1), 0), -1),
                (SegmentId::new(Tid(1), 1), 1)
            ]
        );
        a.epoch(
            vec![
                (SideA::Src(src(5, 1)), -1),
                (SideA::Direct(dst(5, false)), -1),
            ],
            &rules,
            |e, d| edges.push((e.src, d)),
            |f, d| fires.push((f, d)),
        );
        assert_eq!(a.held(), 0);
        assert!(fires.is_empty());
    }

    #[test]
    fn paired_effects_join_through_both_stages_in_any_order() {
        let rules = RulesConfig::default();
        let mut a = StageA::new();
        let mut b = StageB::new();
        let mut edges = Vec::new();
        let mut fires = Vec::new();
        // The effect's target arrives first, then the pair, then the actor.
        b.epoch(vec![(SideB::Dst(dst(9, true)), 1)], &rules, |e, d| {
            edges.push((e, d))
        });
        a.epoch(
            vec![(SideA::Pair(Pair { arm: 3, fire: 9 }), 1)],
            &rules,
            |e, d| edges.push((e, d)),
            |f, d| fires.push((f, d)),
        );
        assert!(fires.is_empty());
        a.epoch(
            vec![(SideA::Src(src(3, 0)), 1)],
            &rules,
            |e, d| edges.push((e, d)),
            |f, d| fires.push((f, d)),
        );
        assert_eq!(fires.len(), 1);
        b.epoch(std::mem::take(&mut fires), &rules, |e, d| {
            edges.push((e, d))
        });
        assert_eq!(edges.len(), 1);
        assert_eq!(edges[0].1, 1);
        assert_eq!(edges[0].0.kind, EdgeKind::Timer);
        assert_eq!(b.held(), 2);
    }

    #[test]
    fn done_actions_and_unpaired_effects_are_forgotten_and_retractions_still_join() {
        let rules = RulesConfig::default();
        let mut a = StageA::new();
        let mut b = StageB::new();
        let mut edges = Vec::new();
        let mut fires = Vec::new();
        // The actor of action 3 and its pair to effect 9, then "no later pair names 3".
        a.epoch(
            vec![
                (SideA::Src(src(3, 0)), 1),
                (SideA::Pair(Pair { arm: 3, fire: 9 }), 1),
                (SideA::ArmDone(3), 1),
            ],
            &rules,
            |e, d| edges.push((e, d)),
            |f, d| fires.push((f, d)),
        );
        assert_eq!(fires.len(), 1);
        // The actor is forgotten, the pair kept.
        assert_eq!(a.held(), 1);
        // A later version change of the actor still moves its fired effect: the pair
        // joins the retraction and the new version.
        a.epoch(
            vec![(SideA::Src(src(3, 0)), -1), (SideA::Src(src(3, 1)), 1)],
            &rules,
            |e, d| edges.push((e, d)),
            |f, d| fires.push((f, d)),
        );
        assert_eq!(fires.len(), 3);
        assert_eq!(fires[1].1, -1);
        assert_eq!(fires[2].1, 1);
        assert!(matches!(&fires[2].0, SideB::Src { fire: 9, src } if src.seg.seq() == 1));
        // Stage B: the target of effect 9 joins the net actor version only.
        b.epoch(std::mem::take(&mut fires), &rules, |e, d| {
            edges.push((e, d))
        });
        b.epoch(vec![(SideB::Dst(dst(9, true)), 1)], &rules, |e, d| {
            edges.push((e, d))
        });
        assert_eq!(edges.len(), 1);
        assert_eq!(edges[0].0.src, SegmentId::new(Tid(1), 1));
        // An effect paired with nothing: its target is forgotten in the same epoch, and
        // a later epoch adds no edge for it.
        b.epoch(
            vec![(SideB::Dst(dst(12, true)), 1), (SideB::NoEffect(12), 1)],
            &rules,
            |e, d| edges.push((e, d)),
        );
        assert_eq!(edges.len(), 1);
        assert_eq!(b.dsts.get(&12).count(), 0);
        assert_eq!(b.dsts.get(&9).count(), 1);
    }
}
