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
//!
//! In a continuous job ([`super::DataflowConfig::forget`] = `Some(F)`) the stage forgets
//! machines that are done with: every time the watermark has advanced by F/4, each key whose
//! last event is older than `watermark − F`, that has no mutable record out (nothing to
//! retract later), no spin deadline, and whose machine says it is settled
//! ([`KeyState::forgettable`]: a thread once it has exited, an object always, a socket or a
//! lock file when nothing it knows can decide a later link) is removed. Nothing is
//! retracted: its final records stay in the graph. If the key comes back, its machine starts
//! afresh, numbering segments from where the forgotten one stopped ([`KeyState::resume`]) so
//! that segment ids stay unique.

use super::handoff::{ship, ship_all, Chunks, Pending, Port, ToOutput};
use super::input::{Part, Routed};
use super::join::{SideA, SideB};
use super::updates::RulesAt;
use super::{Collection, Diff, FastMap, ForgetLimit, Update};
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
/// `forget`: the horizon of a continuous job ([`super::DataflowConfig::forget`]).
pub(super) fn keyed<'s>(
    parts: StreamVec<'s, u64, Part>,
    rules: RulesAt,
    (forget, limit): (Option<Nanos>, &ForgetLimit),
    to_out: ToOutput,
) -> KeyedStreams<'s> {
    let limit = limit.clone();
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
        let mut keyed = Keyed::new(rules.at(0), forget);
        if let Some(f) = keyed.forget.as_mut() {
            f.limit = limit;
        }
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
                keyed.rules = rules.at(*caps[0].time());
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

/// One key's state machine.
struct Slot {
    key: Key,
    /// The time of the last event it processed (for [`Forget`]).
    last: Nanos,
    state: KeyState,
}

/// What a continuous job needs to forget idle machines ([`Keyed::sweep`]).
struct Forget {
    /// The horizon F: machines idle for longer (by the data's time) may be forgotten.
    after: Nanos,
    /// A shorter F the job may set while it runs.
    limit: ForgetLimit,
    /// The watermark of the last sweep.
    swept: Nanos,
    /// The next segment ordinal of each forgotten machine that numbers segments (threads,
    /// interrupt contexts): a key that comes back resumes from it, so its segment ids stay
    /// unique. One entry per thread or CPU that went, bounded by the tids in use.
    ordinals: FastMap<Key, u32>,
}

/// The keyed operator's state on one worker.
struct Keyed {
    rules: Arc<RulesConfig>,
    /// Each key's state machine, by index: a run of one key's events (a thread's records
    /// come in runs) finds its state without hashing the key again.
    states: Vec<Slot>,
    index: FastMap<Key, usize>,
    emitted: FastMap<Key, Vec<Output>>,
    deadlines: BTreeSet<(Nanos, Key)>,
    deadline_of: FastMap<Key, Nanos>,
    /// Forgetting idle machines (a continuous job), or keeping every machine (`None`).
    forget: Option<Forget>,
    /// Reused buffers.
    finals: Vec<Output>,
    now: Vec<Output>,
}

impl Keyed {
    fn new(rules: Arc<RulesConfig>, forget: Option<Nanos>) -> Keyed {
        Keyed {
            rules,
            states: Vec::new(),
            index: FastMap::default(),
            emitted: FastMap::default(),
            deadlines: BTreeSet::new(),
            deadline_of: FastMap::default(),
            forget: forget.map(|after| Forget {
                after,
                limit: ForgetLimit::default(),
                swept: Nanos(0),
                ordinals: FastMap::default(),
            }),
            finals: Vec::new(),
            now: Vec::new(),
        }
    }

    /// The state of `key`, if it has one.
    fn state(&self, key: &Key) -> Option<&KeyState> {
        self.index
            .get(key)
            .and_then(|&at| self.states.get(at))
            .map(|s| &s.state)
    }

    /// Forgets the machines that are done with (see the module doc), when the watermark has
    /// advanced by a quarter of the horizon since the last sweep: a sweep looks at every
    /// machine, so it is not done every epoch, and a machine outlives its last event by
    /// between F and 1.25 F.
    fn sweep(&mut self, watermark: Nanos) {
        let Some(f) = self.forget.as_mut() else {
            return;
        };
        let after = f.limit.apply(f.after);
        if watermark.0 < f.swept.0.saturating_add(after.0 / 4) {
            return;
        }
        f.swept = watermark;
        let before = Nanos(watermark.0.saturating_sub(after.0));
        let mut at = 0;
        while let Some(slot) = self.states.get(at) {
            let idle = slot.last < before
                && !self.emitted.contains_key(&slot.key)
                && !self.deadline_of.contains_key(&slot.key)
                && slot.state.forgettable();
            if !idle {
                at += 1;
                continue;
            }
            let gone = self.states.swap_remove(at);
            self.index.remove(&gone.key);
            // The last machine moved into the hole: its index follows.
            if let Some(moved) = self.states.get(at) {
                self.index.insert(moved.key, at);
            }
            if let Some(ord) = gone.state.next_ordinal() {
                f.ordinals.insert(gone.key, ord);
            }
        }
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
                    let ordinals = self.forget.as_mut().map(|f| &mut f.ordinals);
                    let at = *self.index.entry(*key).or_insert_with(|| {
                        // A forgotten machine's key back: numbered on from where it stopped.
                        let state = match ordinals.and_then(|o| o.remove(key)) {
                            Some(ord) => KeyState::resume(*key, ord),
                            None => KeyState::new(*key),
                        };
                        states.push(Slot {
                            key: *key,
                            last: ev.ts,
                            state,
                        });
                        states.len() - 1
                    });
                    last = Some((*key, at));
                    at
                }
            };
            if let Some(slot) = self.states.get_mut(at) {
                slot.last = slot.last.max(ev.ts);
                slot.state.on_event(ev, *role, &self.rules, &mut finals);
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
            changes(&before, &now, |o, d| outs.push(o.clone(), d));
            if !now.is_empty() {
                // The old list becomes the next key's scratch buffer.
                self.emitted
                    .insert(key, std::mem::replace(&mut now, before));
            }
        }
        self.now = now;
        self.sweep(watermark);
    }

    /// Machines held (for tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.states.len()
    }

    /// Every key's index names its machine, and every machine is indexed.
    #[cfg(test)]
    fn index_is_consistent(&self) -> bool {
        self.index.len() == self.states.len()
            && self
                .index
                .iter()
                .all(|(k, &at)| self.states.get(at).is_some_and(|s| s.key == *k))
    }
}

/// What changed from a key's mutable records `before` to `now`: each one of `before` not in
/// `now` retracted (`-1`), then each one of `now` not in `before` inserted (`+1`), in list
/// order.
///
/// Long lists are compared by hash (the same set membership, in linear time). A thread
/// inside one message syscall holds back every endpoint
/// it makes until the syscall returns (`rules/peers.rs`), and a list of thousands compared
/// pairwise every epoch took 13% of the dataflow's thread two minutes into the soak and 37%
/// at eight (`perf record --call-graph dwarf`: `slice_contains<Output>` under
/// `Keyed::epoch`), until the dataflow fell 11 epochs behind.
fn changes(before: &[Output], now: &[Output], mut emit: impl FnMut(&Output, Diff)) {
    type Set<'a> = HashSet<&'a Output, foldhash::fast::FixedState>;
    let hashed = before.len().saturating_mul(now.len()) > 256;
    let in_before: Option<Set<'_>> = hashed.then(|| before.iter().collect());
    let in_now: Option<Set<'_>> = hashed.then(|| now.iter().collect());
    let holds = |set: &Option<Set<'_>>, list: &[Output], o: &Output| match set {
        Some(s) => s.contains(o),
        None => list.contains(o),
    };
    for o in before.iter().filter(|o| !holds(&in_now, now, o)) {
        emit(o, -1);
    }
    for o in now.iter().filter(|o| !holds(&in_before, before, o)) {
        emit(o, 1);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rules::{route, Dst};
    use argus_schema::{Context, Cpu, EdgeKind, Event, EventKind, Pid, SegmentId, Tid};

    /// The changes between two lists of mutable records are the naive set difference (each
    /// of `before` not in `now` retracted, then each of `now` not in `before` inserted, in
    /// list order) for short and long lists, with and without a common prefix, with
    /// duplicates.
    #[test]
    fn changes_are_the_set_difference_in_list_order() {
        let src = |n: u64| {
            Output::Src(crate::rules::Src {
                seq: n,
                seg: SegmentId::new(Tid(1), 0),
                ts: Nanos(n),
                syscall: -1,
                interrupt: false,
                exiting: false,
                condvar: false,
            })
        };
        let naive = |before: &[Output], now: &[Output]| {
            let mut out = Vec::new();
            out.extend(
                before
                    .iter()
                    .filter(|o| !now.contains(o))
                    .map(|o| (o.clone(), -1)),
            );
            out.extend(
                now.iter()
                    .filter(|o| !before.contains(o))
                    .map(|o| (o.clone(), 1)),
            );
            out
        };
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..300 {
            let len = if round % 3 == 0 { 400 } else { 12 };
            let before: Vec<Output> = (0..rnd(len)).map(|_| src(rnd(len))).collect();
            // A common prefix of `before`, then other records.
            let keep = rnd(before.len() as u64 + 1) as usize;
            let mut now: Vec<Output> = before[..keep].to_vec();
            now.extend((0..rnd(len)).map(|_| src(rnd(2 * len))));
            let mut got = Vec::new();
            changes(&before, &now, |o, d| got.push((o.clone(), d)));
            assert_eq!(got, naive(&before, &now), "round {round}");
        }
    }

    const MS: u64 = 1_000_000;

    /// A task record of `tid` at `ts` ms, numbered by its position.
    fn push(evs: &mut Vec<Event>, ts: u64, tid: i32, kind: EventKind) {
        evs.push(Event {
            ts: Nanos(ts * MS),
            seq: evs.len() as u64,
            cpu: Cpu(0),
            pid: Pid(tid),
            tid: Tid(tid),
            ctx: Context::Task,
            kind,
        });
    }

    /// Thread 1 forks `child` at `ts` ms; the child arms a timer of its own and exits.
    fn short_life(evs: &mut Vec<Event>, ts: u64, child: i32) {
        let fork = EventKind::Fork {
            child: Tid(child),
            child_pid: Pid(child),
            thread: false,
        };
        push(evs, ts, 1, fork);
        let timer = 0xffff_0000 + child as u64 * 64;
        let arm = EventKind::HrtimerStart {
            timer,
            function: 7,
            expires: 0,
        };
        push(evs, ts, child, arm);
        push(evs, ts, child, EventKind::Exit);
    }

    /// The graph records and the first join stage's records of an epoch.
    type Emitted = (Vec<(Update, Diff)>, Vec<(SideA, Diff)>);

    /// One epoch of `evs` (one part, as the driver makes it); the records it emits.
    fn epoch(keyed: &mut Keyed, evs: &[Event]) -> Emitted {
        let mut items = Vec::new();
        for ev in evs {
            let mut sub = 0u8;
            route(ev, &keyed.rules, |key, role| {
                items.push(Routed {
                    key,
                    role,
                    sub,
                    ev: ev.clone(),
                });
                sub += 1;
            });
        }
        let watermark = evs.last().map_or(Nanos(0), |e| e.ts);
        let mut outs = Outs::default();
        let part = Part {
            worker: 0,
            watermark,
            items,
        };
        keyed.epoch(vec![part], &mut outs);
        (
            outs.updates.into_containers().flatten().collect(),
            outs.a.into_containers().flatten().collect(),
        )
    }

    /// Thousands of short-lived threads, each with a timer of its own: forgetting keeps a
    /// bounded number of machines (the recent threads and timers, and thread 1), keeping
    /// everything holds one per thread and timer ever seen; the graph records are the same.
    #[test]
    fn forgetting_keeps_the_machines_of_short_lived_threads_bounded() {
        let rules = Arc::new(RulesConfig::default());
        let mut kept = Keyed::new(rules.clone(), None);
        let mut forgetting = Keyed::new(rules, Some(Nanos(10 * MS)));
        let mut evs = Vec::new();
        for child in 0..3000 {
            short_life(&mut evs, 1 + child as u64, 1000 + child);
        }
        let (mut most, mut records) = (0, 0);
        for (i, chunk) in evs.chunks(30).enumerate() {
            let (upd_kept, _) = epoch(&mut kept, chunk);
            let (upd_forgetting, _) = epoch(&mut forgetting, chunk);
            assert_eq!(upd_kept, upd_forgetting, "epoch {i}");
            records += upd_kept.len();
            assert!(forgetting.index_is_consistent(), "epoch {i}");
            most = most.max(forgetting.held());
        }
        assert!(records > 3000, "the threads made segments");
        // 10 threads per epoch of 10 ms, forgotten 10 to 12.5 ms after their exit: at most
        // some 25 threads and their timers, and thread 1.
        assert!(most <= 60, "{most} machines held at most");
        assert!(
            forgetting.held() <= 60,
            "{} machines held",
            forgetting.held()
        );
        assert_eq!(kept.held(), 2 * 3000 + 1);
        // Each forgotten thread's ordinal is remembered, one entry per tid.
        let ordinals = forgetting.forget.as_ref().map_or(0, |f| f.ordinals.len());
        assert!((2900..=3000).contains(&ordinals), "{ordinals} ordinals");
    }

    /// A tid that comes back after its exited thread was forgotten (the kernel reused it) is
    /// a new thread: its creation is a fork, and its segments are numbered on from the
    /// forgotten machine's, so ids stay unique. A kept dead machine ignores it.
    #[test]
    fn a_tid_back_after_its_thread_was_forgotten_numbers_its_segments_on() {
        let mut evs = Vec::new();
        short_life(&mut evs, 1, 500);
        let first = evs.len();
        // Thread 1 goes on (the watermark advances), then forks tid 500 again.
        for t in 2..100 {
            push(&mut evs, t, 1, EventKind::Marker { text: "m".into() });
        }
        let again = evs.len();
        short_life(&mut evs, 100, 500);
        let rules = Arc::new(RulesConfig::default());
        for forget in [None, Some(Nanos(10 * MS))] {
            let mut keyed = Keyed::new(rules.clone(), forget);
            let mut updates = Vec::new();
            let mut side_a = Vec::new();
            for chunk in [&evs[..first], &evs[first..again], &evs[again..]] {
                let (u, a) = epoch(&mut keyed, chunk);
                updates.extend(u);
                side_a.extend(a);
            }
            let segs: Vec<SegmentId> = updates
                .iter()
                .filter_map(|(u, d)| match u {
                    Update::Segment(s) if s.tid == Tid(500) && *d > 0 => Some(s.id),
                    _ => None,
                })
                .collect();
            let forks: Vec<SegmentId> = side_a
                .iter()
                .filter_map(|(a, _)| match a {
                    SideA::Direct(Dst {
                        seg,
                        kind: EdgeKind::Fork,
                        ..
                    }) => Some(*seg),
                    _ => None,
                })
                .collect();
            let (s0, s1) = (SegmentId::new(Tid(500), 0), SegmentId::new(Tid(500), 1));
            if forget.is_some() {
                assert_eq!(segs, [s0, s1]);
                assert_eq!(forks, [s0, s1]);
                assert!(keyed.index_is_consistent());
            } else {
                assert_eq!(segs, [s0]);
                assert_eq!(forks, [s0]);
            }
        }
    }

    /// A live thread is never forgotten however idle (nor its open segment retracted).
    #[test]
    fn live_threads_are_kept() {
        let mut evs = Vec::new();
        push(&mut evs, 1, 7, EventKind::Marker { text: "m".into() });
        let first = evs.len();
        for t in 2..200 {
            push(&mut evs, t, 1, EventKind::Marker { text: "m".into() });
        }
        let mut keyed = Keyed::new(Arc::new(RulesConfig::default()), Some(Nanos(10 * MS)));
        epoch(&mut keyed, &evs[..first]);
        for chunk in evs[first..].chunks(10) {
            epoch(&mut keyed, chunk);
        }
        assert!(keyed.state(&Key::Thread(Tid(7))).is_some());
        assert_eq!(keyed.held(), 2);
    }
}
