//! What the two join stages share: their inputs ([`SideA`], [`SideB`]), the hash that
//! spreads join keys over the workers ([`spread`]), and [`Side`], one side of a join as
//! multisets of records by key.
//!
//! The keyed stage emits the two ends of every causal event separately: the actor's
//! [`Src`] and the target's [`Dst`], joined on the event's `seq`; for paired effects (timers,
//! work items, pipes) the object key's [`Pair`] links the action's `seq` (`arm`) to the
//! effect's (`fire`). The stages (`join_seq.rs`: `Src ⋈ Dst` and `Src ⋈ Pair`;
//! `join_fire.rs`: `(Src ⋈ Pair) ⋈ Dst`) compute exactly what the relational joins
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

use super::Diff;
use crate::rules::{Dst, Pair, Src};
use serde::{Deserialize, Serialize};
use std::hash::Hash;

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
pub(super) struct Side<K, T>(super::FastMap<K, Bag<T>>);

impl<K: Hash + Eq + Copy, T: PartialEq> Side<K, T> {
    pub(super) fn new() -> Self {
        Side(super::FastMap::default())
    }

    pub(super) fn get(&self, k: &K) -> impl Iterator<Item = (&T, Diff)> {
        self.0.get(k).into_iter().flat_map(|b| b.iter())
    }

    /// Forgets every record of `k`.
    pub(super) fn forget(&mut self, k: &K) {
        self.0.remove(k);
    }

    pub(super) fn add(&mut self, k: K, t: T, d: Diff) {
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
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Hand-made endpoints for the join stages' tests.
#[cfg(test)]
pub(super) mod testing {
    use crate::rules::{Dst, Src};
    use argus_schema::{EdgeKind, Nanos, SegmentId, Tid};

    /// The actor of event `seq`, in segment `seg` of thread 1.
    pub(crate) fn src(seq: u64, seg: u32) -> Src {
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

    /// The target of event `seq` in thread 2: a timer's (paired) or a wake-up's.
    pub(crate) fn dst(seq: u64, paired: bool) -> Dst {
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
}
