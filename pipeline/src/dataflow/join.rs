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
//!
//! That leaves joined actors, direct targets and the pairs for good: the state grows with
//! every edge. A continuous job ([`super::DataflowConfig::forget`] = `Some(F)`) also forgets
//! by time ([`Horizon`]): there, `seq` increases with `ts` (ingest's merger releases events
//! in time order and they are numbered as released), so a stage learns which `seq`s are old
//! from the actors it sees (a [`Src`] has both), and forgets every entry keyed below the
//! *floor*, the `seq` after the newest event it knows to be older than the horizon `h =
//! (latest time seen) − F` ([`Side::forget_below`]); records that come for such keys later
//! (a late retraction, a pair naming an old action) are dropped on arrival. No output a
//! consumer keeps is lost: an edge's `ts` is its action's time, and every key of an edge is
//! a `seq` at or after its action's (the action itself for `join_seq`, its effect, which
//! comes later, for `join_fire`), so any edge a forgotten or dropped entry could still
//! produce or retract has `ts < h`, and the continuous job drops every record older than
//! its window (shorter than F) anyway. And no multiplicity goes negative: while a key is at
//! or above the floor its entries are complete, so what was emitted for it is an exact join;
//! once it is below, nothing more is emitted for it.

use super::{Diff, ForgetLimit};
use crate::rules::{Dst, Pair, Src};
use argus_schema::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

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

/// How many emptied tables a [`Side`] keeps for its next generations.
const SPARE_TABLES: usize = 2;

/// One side of a join: multisets of records by key (an event `seq`), in *generations*. Each
/// sweep of a continuous job ([`Side::forget_below`]) starts a generation for the keys above
/// every one added so far, drops the generations wholly below the floor and sweeps only the
/// one across it; a dropped generation's table, emptied, is the next one's. So no table
/// grows past a generation (a quarter of the horizon), and once the job is warm none grows
/// at all: growing one rehashes it whole into freshly zeroed pages, which stalled the
/// dataflow 1–1.5 s, twice, ~150 s into the soaks at 320k events/s while one table held
/// the whole horizon (2026-11-29). Without sweeps (a build) there is one generation.
pub(super) struct Side<T> {
    /// `(first key, table)`, oldest first; the newest also takes every key above its first.
    gens: VecDeque<(u64, super::FastMap<u64, Bag<T>>)>,
    /// Emptied tables of dropped generations, capacity kept.
    spare: Vec<super::FastMap<u64, Bag<T>>>,
    /// One more than the largest key added.
    next: u64,
}

impl<T: PartialEq> Side<T> {
    pub(super) fn new() -> Self {
        Side {
            gens: VecDeque::from([(0, super::FastMap::default())]),
            spare: Vec::new(),
            next: 0,
        }
    }

    /// The table that holds `k`: the newest generation starting at or below it (the oldest
    /// for a key below every generation: one the caller's floor drops anyway).
    fn table(&self, k: u64) -> usize {
        let newest = self.gens.len() - 1;
        // Most keys are recent, and a build keeps one generation: no search for them.
        if self.gens[newest].0 <= k {
            return newest;
        }
        self.gens
            .partition_point(|(first, _)| *first <= k)
            .saturating_sub(1)
    }

    pub(super) fn get(&self, k: &u64) -> impl Iterator<Item = (&T, Diff)> {
        let g = self.table(*k);
        self.gens[g].1.get(k).into_iter().flat_map(|b| b.iter())
    }

    /// Forgets every record of `k`.
    pub(super) fn forget(&mut self, k: &u64) {
        let g = self.table(*k);
        self.gens[g].1.remove(k);
    }

    pub(super) fn add(&mut self, k: u64, t: T, d: Diff) {
        if d == 0 {
            return;
        }
        self.next = self.next.max(k.saturating_add(1));
        let g = self.table(k);
        match self.gens[g].1.entry(k) {
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

    /// Forgets every record keyed below `floor` (a [`Horizon`] sweep), and starts a
    /// generation.
    pub(super) fn forget_below(&mut self, floor: u64) {
        while self.gens.len() > 1 && self.gens[1].0 <= floor {
            if let Some((_, mut table)) = self.gens.pop_front() {
                if self.spare.len() < SPARE_TABLES {
                    table.clear();
                    self.spare.push(table);
                }
            }
        }
        if let Some((_, table)) = self.gens.front_mut() {
            table.retain(|k, _| *k >= floor);
        }
        let newest = self.gens.back().map_or(0, |(first, _)| *first);
        if self.next > newest && self.gens.back().is_some_and(|(_, t)| !t.is_empty()) {
            let table = self.spare.pop().unwrap_or_default();
            self.gens.push_back((self.next, table));
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.gens.iter().map(|(_, t)| t.len()).sum()
    }

    #[cfg(test)]
    pub(super) fn generations(&self) -> usize {
        self.gens.len()
    }
}

/// A join stage's time horizon in a continuous job (see the module doc): which `seq`s are
/// older than `F` before the latest time the stage has seen, learned from the actors it
/// sees, and when to sweep.
pub(super) struct Horizon {
    /// The horizon F.
    after: Nanos,
    /// A shorter F the job may set while it runs.
    limit: ForgetLimit,
    /// The latest actor time seen.
    latest: Nanos,
    /// This epoch's latest actor time and largest actor `seq`.
    epoch: Option<(Nanos, u64)>,
    /// The same per earlier epoch, oldest first, until older than the horizon: one entry
    /// per epoch of the last F.
    log: VecDeque<(Nanos, u64)>,
    /// Every `seq` below this is known to be an event older than the horizon.
    known: u64,
    /// Keys below this have been forgotten, and records for them are dropped.
    floor: u64,
    /// The horizon at the last sweep.
    swept: Nanos,
}

impl Horizon {
    /// F of `after`, or less when `limit` says so.
    pub(super) fn limited(after: Nanos, limit: ForgetLimit) -> Horizon {
        Horizon {
            after,
            limit,
            latest: Nanos(0),
            epoch: None,
            log: VecDeque::new(),
            known: 0,
            floor: 0,
            swept: Nanos(0),
        }
    }

    /// An actor seen in this epoch (inserted or retracted: its `seq` and `ts` are facts
    /// either way).
    pub(super) fn saw(&mut self, src: &Src) {
        let (ts, seq) = self.epoch.get_or_insert((src.ts, src.seq));
        *ts = (*ts).max(src.ts);
        *seq = (*seq).max(src.seq);
    }

    /// Whether records keyed `k` are still joined (not below the floor).
    pub(super) fn keeps(&self, k: u64) -> bool {
        k >= self.floor
    }

    /// The epoch is over: the new floor when the stage should forget below it. The
    /// horizon must have advanced by a quarter of F since the last sweep (a sweep looks at
    /// every entry, so it is not done every epoch): an entry outlives its event by between
    /// F and about 1.25 F.
    pub(super) fn sweep(&mut self) -> Option<u64> {
        if let Some(e) = self.epoch.take() {
            self.latest = self.latest.max(e.0);
            self.log.push_back(e);
        }
        let after = self.limit.apply(self.after);
        let h = Nanos(self.latest.0.saturating_sub(after.0));
        // An epoch whose latest actor is older than h: its largest seq is an event older
        // than h, and so is every seq below it (seq increases with ts).
        while let Some(&(ts, seq)) = self.log.front() {
            if ts >= h {
                break;
            }
            self.known = self.known.max(seq.saturating_add(1));
            self.log.pop_front();
        }
        if self.known > self.floor && h.0 >= self.swept.0.saturating_add(after.0 / 4) {
            self.floor = self.known;
            self.swept = h;
            return Some(self.floor);
        }
        None
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A side against a plain map of multisets, over random additions, retractions,
    /// forgotten keys and sweeps at rising floors (keys mostly rising, some late).
    #[test]
    fn a_side_in_generations_holds_what_one_table_would() {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut side: Side<u8> = Side::new();
        let mut model: HashMap<u64, HashMap<u8, Diff>> = HashMap::new();
        let (mut top, mut floor) = (0u64, 0u64);
        let mut most = 0;
        for step in 0..20_000u64 {
            match next(100) {
                0..=69 => {
                    // Mostly new keys, some late ones, a few below the floor.
                    let k = match next(10) {
                        0..=6 => {
                            top += next(3);
                            top
                        }
                        _ => top.saturating_sub(next(400)),
                    };
                    if k < floor {
                        continue;
                    }
                    let (t, d) = (next(3) as u8, if next(4) == 0 { -1 } else { 1 });
                    side.add(k, t, d);
                    let m = model.entry(k).or_default();
                    *m.entry(t).or_default() += d;
                    m.retain(|_, d| *d != 0);
                }
                70..=74 => {
                    let k = top.saturating_sub(next(50));
                    side.forget(&k);
                    model.remove(&k);
                }
                75..=76 => {
                    floor = floor.max(top.saturating_sub(next(300)));
                    side.forget_below(floor);
                    model.retain(|k, _| *k >= floor);
                    most = most.max(side.generations());
                }
                _ => {}
            }
            model.retain(|_, m| !m.is_empty());
            if step % 500 == 0 || step == 19_999 {
                assert_eq!(side.len(), model.len(), "step {step}");
                for k in floor.saturating_sub(10)..=top + 1 {
                    let mut got: Vec<(u8, Diff)> = side.get(&k).map(|(t, d)| (*t, d)).collect();
                    got.sort();
                    let mut want: Vec<(u8, Diff)> = model
                        .get(&k)
                        .map(|m| m.iter().map(|(t, d)| (*t, *d)).collect())
                        .unwrap_or_default();
                    want.sort();
                    assert_eq!(got, want, "key {k} at step {step}");
                }
            }
        }
        // The sweeps made generations and dropped old ones.
        assert!(most > 2, "{most} generations at most");
        assert!(side.generations() < most + 2);
    }

    #[test]
    fn a_dropped_generations_table_is_the_next_ones() {
        let mut side: Side<u8> = Side::new();
        for k in 0..1000 {
            side.add(k, 0, 1);
        }
        side.forget_below(0);
        for k in 1000..2000 {
            side.add(k, 0, 1);
        }
        let first = side.gens[0].1.capacity();
        // The first generation goes whole; its table, emptied, starts the third.
        side.forget_below(1000);
        assert_eq!(side.generations(), 2);
        assert_eq!(side.gens[1].0, 2000);
        assert!(side.gens[1].1.is_empty());
        assert_eq!(side.gens[1].1.capacity(), first);
        assert_eq!(side.len(), 1000);
        // A sweep with nothing new starts no generation.
        side.forget_below(1500);
        assert_eq!(side.generations(), 2);
        assert_eq!(side.len(), 500);
    }
}
