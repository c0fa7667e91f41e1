//! The keyed stage, `"pipeline::keyed"`: each worker runs the state machines
//! ([`crate::rules`]) of the keys it owns, one closed epoch at a time:
//!
//! 1. the epoch's events, in `seq` order, go to their keys' machines, whose final records
//!    (never changed again) are emitted once (+1);
//! 2. the spin deadlines of the keys the epoch touched are re-armed, and those the epoch's
//!    watermark crossed touch their keys too;
//! 3. each touched key's mutable records (its open tail) are diffed against what was
//!    emitted for it before: -1 for what went, +1 for what came.
//!
//! Four outputs, so no record is copied to consumers that drop it: graph records (to the
//! output, through the side channel where there is one), rule counters (summed per epoch),
//! the joins' first stage ([`SideA`]) and paired targets for the second ([`SideB`]).

use super::handoff::{ship, ship_all, Chunks, Pending, Port, ToOutput};
use super::input::{Part, Routed};
use super::join::{SideA, SideB};
use super::{Collection, Diff, FastMap, Update};
use crate::rules::{Counter, Key, KeyState, Output, RulesConfig};
use argus_schema::Nanos;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;
use timely::dataflow::StreamVec;

/// The keyed stage's four outputs.
pub(super) struct KeyedStreams<'s> {
    /// Graph records made by the machines (segments, thread-order edges, spins).
    pub(super) updates: Collection<'s, Update>,
    /// Rule counters, one update per counter and epoch.
    pub(super) counted: Collection<'s, Counter>,
    /// Actors, direct targets and action/effect pairs, for `join_seq`.
    pub(super) side_a: Collection<'s, SideA>,
    /// Targets of paired effects, for `join_fire`.
    pub(super) side_b: Collection<'s, SideB>,
}

/// The keyed stage over the driver's `parts`, exchanged to the workers they name.
pub(super) fn keyed<'s>(
    parts: StreamVec<'s, u64, Part>,
    rules: Arc<RulesConfig>,
    to_out: ToOutput,
) -> KeyedStreams<'s> {
    let mut kb = OperatorBuilder::new("pipeline::keyed".to_owned(), parts.scope());
    let mut kin = kb.new_input(parts, Exchange::new(|p: &Part| p.worker));
    let (p_upd, updates) = kb.new_output::<Vec<(Update, Diff)>>();
    let (p_cnt, counted) = kb.new_output::<Vec<(Counter, Diff)>>();
    let (p_a, side_a) = kb.new_output::<Vec<(SideA, Diff)>>();
    let (p_b, side_b) = kb.new_output::<Vec<(SideB, Diff)>>();
    let mut p_upd: Port<Update> = OutputBuilder::from(p_upd);
    let mut p_cnt: Port<Counter> = OutputBuilder::from(p_cnt);
    let mut p_a: Port<SideA> = OutputBuilder::from(p_a);
    let mut p_b: Port<SideB> = OutputBuilder::from(p_b);
    kb.build(move |initial| {
        drop(initial);
        let mut keyed = Keyed::new(rules);
        // Parts are queued as they arrive (no per-event copy).
        let mut queued: Pending<Vec<Capability<u64>>, Part> = BTreeMap::new();
        move |frontiers| {
            kin.for_each(|time, data| {
                queued
                    .entry(*time.time())
                    .or_insert_with(|| ((0..4).map(|p| time.retain(p)).collect(), Vec::new()))
                    .1
                    .append(data);
            });
            while let Some(entry) = queued.first_entry() {
                if frontiers[0].less_equal(entry.key()) {
                    break;
                }
                let (caps, items) = entry.remove();
                let mut outs = Outs::default();
                keyed.epoch(items, &mut outs);
                for c in outs.updates.into_containers() {
                    if let Some(c) = to_out.send(*caps[0].time(), c) {
                        ship(&mut p_upd, &caps[0], c);
                    }
                }
                ship_all(&mut p_cnt, &caps[1], outs.counts);
                ship_all(&mut p_a, &caps[2], outs.a);
                ship_all(&mut p_b, &caps[3], outs.b);
            }
        }
    });
    KeyedStreams {
        updates,
        counted,
        side_a,
        side_b,
    }
}

/// The keyed operator's records, split by where they go next.
#[derive(Default)]
struct Outs {
    /// Graph records, to the output.
    updates: Chunks<(Update, Diff)>,
    /// Rule counters, to worker 0's tally.
    counts: Chunks<(Counter, Diff)>,
    /// Endpoints joined by `seq` (`join_seq`).
    a: Chunks<(SideA, Diff)>,
    /// Targets of paired effects (`join_fire`).
    b: Chunks<(SideB, Diff)>,
}

impl Outs {
    fn push(&mut self, o: Output, d: Diff) {
        match o {
            Output::Segment(s) => self.updates.push((Update::Segment(s), d)),
            Output::Edge(e) => self.updates.push((Update::Edge(e), d)),
            Output::Spin(s) => self.updates.push((Update::Spin(s), d)),
            Output::Src(s) => self.a.push((SideA::Src(s), d)),
            Output::Dst(t) if t.paired => self.b.push((SideB::Dst(t), d)),
            Output::Dst(t) => self.a.push((SideA::Direct(t), d)),
            Output::Pair(p) => self.a.push((SideA::Pair(p), d)),
            Output::Count(c) => self.counts.push((c, d)),
            Output::ArmDone(arm) => self.a.push((SideA::ArmDone(arm), d)),
            Output::NoEffect(fire) => self.b.push((SideB::NoEffect(fire), d)),
        }
    }
}

/// The keyed operator's state on one worker.
struct Keyed {
    rules: Arc<RulesConfig>,
    /// Each key's state machine, by index: a run of one key's events (a thread's records
    /// come in runs) finds its state without hashing the key again.
    states: Vec<KeyState>,
    index: FastMap<Key, usize>,
    emitted: FastMap<Key, Vec<Output>>,
    deadlines: BTreeSet<(Nanos, Key)>,
    deadline_of: FastMap<Key, Nanos>,
    /// Reused buffers.
    finals: Vec<Output>,
    now: Vec<Output>,
}

impl Keyed {
    fn new(rules: Arc<RulesConfig>) -> Keyed {
        Keyed {
            rules,
            states: Vec::new(),
            index: FastMap::default(),
            emitted: FastMap::default(),
            deadlines: BTreeSet::new(),
            deadline_of: FastMap::default(),
            finals: Vec::new(),
            now: Vec::new(),
        }
    }

    /// The state of `key`, if it has one.
    fn state(&self, key: &Key) -> Option<&KeyState> {
        self.index.get(key).and_then(|&at| self.states.get(at))
    }

    /// Processes one closed epoch's parts (as they arrived); the updates at that epoch go to
    /// `outs`.
    fn epoch(&mut self, mut parts: Vec<Part>, outs: &mut Outs) {
        let watermark = parts.iter().map(|p| p.watermark).max().unwrap_or(Nanos(0));
        // One driver sends in seq order, so the parts in arrival order are usually sorted
        // already (one part per epoch): checked, and sorted as one list only when not.
        let key = |r: &Routed| (r.ev.seq, r.sub);
        let mut prev = (0u64, 0u8);
        let mut sorted = true;
        for r in parts.iter().flat_map(|p| &p.items) {
            let k = key(r);
            sorted &= k >= prev;
            prev = k;
        }
        if !sorted {
            let mut all: Vec<Routed> = parts.into_iter().flat_map(|p| p.items).collect();
            all.sort_unstable_by_key(key);
            parts = vec![Part {
                worker: 0,
                watermark,
                items: all,
            }];
        }
        let mut finals = std::mem::take(&mut self.finals);
        let mut touched: HashSet<Key, foldhash::fast::FixedState> = HashSet::default();
        let mut last: Option<(Key, usize)> = None;
        for Routed { key, role, ev, .. } in parts.iter().flat_map(|p| &p.items) {
            let at = match last {
                Some((k, at)) if k == *key => at,
                _ => {
                    touched.insert(*key);
                    let states = &mut self.states;
                    let at = *self.index.entry(*key).or_insert_with(|| {
                        states.push(KeyState::new(*key));
                        states.len() - 1
                    });
                    last = Some((*key, at));
                    at
                }
            };
            if let Some(state) = self.states.get_mut(at) {
                state.on_event(ev, *role, &self.rules, &mut finals);
            }
        }
        drop(parts);
        // Re-arm the spin deadlines of touched keys, then fire those the watermark passed.
        for key in &touched {
            if let Some(old) = self.deadline_of.remove(key) {
                self.deadlines.remove(&(old, *key));
            }
            if let Some(d) = self
                .state(key)
                .and_then(|s| s.spin_deadline(&self.rules, watermark))
            {
                self.deadlines.insert((d, *key));
                self.deadline_of.insert(*key, d);
            }
        }
        while let Some(&(d, key)) = self.deadlines.first() {
            if d >= watermark {
                break;
            }
            self.deadlines.remove(&(d, key));
            self.deadline_of.remove(&key);
            touched.insert(key);
            // Its next deadline (a later one of the same key), past this watermark.
            if let Some(next) = self
                .state(&key)
                .and_then(|s| s.spin_deadline(&self.rules, watermark))
            {
                self.deadlines.insert((next, key));
                self.deadline_of.insert(key, next);
            }
        }
        // Counters are summed: one update per counter and epoch.
        let mut counts: BTreeMap<Counter, Diff> = BTreeMap::new();
        for o in finals.drain(..) {
            match o {
                Output::Count(c) => *counts.entry(c).or_insert(0) += 1,
                o => outs.push(o, 1),
            }
        }
        self.finals = finals;
        for c in counts {
            outs.counts.push(c);
        }
        let mut now = std::mem::take(&mut self.now);
        for key in touched {
            now.clear();
            if let Some(s) = self.state(&key) {
                s.mutable(watermark, &self.rules, &mut now);
            }
            let before = self.emitted.remove(&key).unwrap_or_default();
            for o in &before {
                if !now.contains(o) {
                    outs.push(o.clone(), -1);
                }
            }
            for o in &now {
                if !before.contains(o) {
                    outs.push(o.clone(), 1);
                }
            }
            if !now.is_empty() {
                // The old list becomes the next key's scratch buffer.
                self.emitted
                    .insert(key, std::mem::replace(&mut now, before));
            }
        }
        self.now = now;
    }
}
