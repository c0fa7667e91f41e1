//! The first join stage, `"pipeline::join_seq"`, by action/event `seq`: `Src ⋈ Dst` gives
//! the direct edges (wake-up, fork, signal); `Src ⋈ Pair` re-keys an action's actor by each
//! effect it caused, for `join_fire`. The join semantics and what is forgotten when are in
//! `join.rs` (in a continuous job, also by time: [`Horizon`]).

use super::handoff::{ship, Pending, Port, ToOutput};
use super::join::{spread, Horizon, Side, SideA, SideB};
use super::updates::RulesAt;
use super::{Collection, Diff, ForgetLimit, Update};
use crate::rules::{join_edges, Dst, RulesConfig, Src};
use argus_schema::Nanos;
use std::collections::BTreeMap;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;

/// The first join stage over the keyed stage's `side_a`, exchanged by join key: the direct
/// edges (to the output, through the side channel where there is one) and the fired
/// (effect, actor) pairs, in that order. `forget`: the horizon of a continuous job
/// ([`super::DataflowConfig::forget`]).
pub(super) fn join_seq<'s>(
    side_a: Collection<'s, SideA>,
    rules: RulesAt,
    (forget, limit): (Option<Nanos>, &ForgetLimit),
    to_out: ToOutput,
) -> (Collection<'s, Update>, Collection<'s, SideB>) {
    let mut ab = OperatorBuilder::new("pipeline::join_seq".to_owned(), side_a.scope());
    let mut ain = ab.new_input(side_a, Exchange::new(|x: &(SideA, Diff)| spread(x.0.key())));
    let (p_edges, edges) = ab.new_output::<Vec<(Update, Diff)>>();
    let (p_fires, fires) = ab.new_output::<Vec<(SideB, Diff)>>();
    let mut p_edges: Port<Update> = OutputBuilder::from(p_edges);
    let mut p_fires: Port<SideB> = OutputBuilder::from(p_fires);
    ab.build(move |initial| {
        drop(initial);
        let mut stage = StageA::limited(forget, limit.clone());
        let mut queued: Pending<Vec<Capability<u64>>, (SideA, Diff)> = BTreeMap::new();
        move |frontiers| {
            ain.for_each(|time, data| {
                queued
                    .entry(*time.time())
                    .or_insert_with(|| ((0..2).map(|p| time.retain(p)).collect(), Vec::new()))
                    .1
                    .append(data);
            });
            while let Some(entry) = queued.first_entry() {
                if frontiers[0].less_equal(entry.key()) {
                    break;
                }
                let (caps, delta) = entry.remove();
                let mut edges = Vec::new();
                let mut fired = Vec::new();
                stage.epoch(
                    delta,
                    &rules.at(*caps[0].time()),
                    |e, d| edges.push((Update::Edge(e), d)),
                    |f, d| fired.push((f, d)),
                );
                if let Some(edges) = to_out.send(*caps[0].time(), edges) {
                    ship(&mut p_edges, &caps[0], edges);
                }
                ship(&mut p_fires, &caps[1], fired);
            }
        }
    });
    (edges, fires)
}

/// The first stage, by action/event `seq`: `Src ⋈ Dst` gives wake-up, fork and signal
/// edges; `Src ⋈ Pair` re-keys an action's actor by each effect it caused.
pub(super) struct StageA {
    srcs: Side<Src>,
    direct: Side<Dst>,
    fires: Side<u64>,
    /// Forgetting by time (a continuous job), or keeping what can still join (`None`).
    horizon: Option<Horizon>,
}

impl StageA {
    /// `forget`: the horizon of a continuous job, if any (tests; the stage takes its
    /// limit too: [`StageA::limited`]).
    #[cfg(test)]
    pub(super) fn new(forget: Option<Nanos>) -> StageA {
        StageA::limited(forget, ForgetLimit::default())
    }

    /// `forget`, or less when `limit` says so (a continuous job's memory budget).
    pub(super) fn limited(forget: Option<Nanos>, limit: ForgetLimit) -> StageA {
        StageA {
            srcs: Side::new(),
            direct: Side::new(),
            fires: Side::new(),
            horizon: forget.map(|f| Horizon::limited(f, limit)),
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
            if let Some(h) = self.horizon.as_mut() {
                if let SideA::Src(s) = &r {
                    h.saw(s);
                }
                // Below the floor: forgotten, nothing more is joined there.
                if !h.keeps(r.key()) {
                    continue;
                }
            }
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
        if let Some(floor) = self.horizon.as_mut().and_then(Horizon::sweep) {
            self.srcs.forget_below(floor);
            self.direct.forget_below(floor);
            self.fires.forget_below(floor);
        }
    }

    /// Keys held (for tests and diagnostics).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.srcs.len() + self.direct.len() + self.fires.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::join::testing::{dst, src};
    use super::*;
    use argus_schema::{SegmentId, Tid};

    #[test]
    fn a_retracted_actor_retracts_its_edge_and_the_state_empties() {
        let rules = RulesConfig::default();
        let mut a = StageA::new(None);
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
}

#[cfg(test)]
mod forgetting {
    use super::super::join::testing::{dst, src};
    use super::*;
    use crate::rules::Pair;

    /// The edges and fired pairs a stage emitted.
    type Emitted = (Vec<(argus_schema::CausalEdge, Diff)>, Vec<(SideB, Diff)>);

    /// Runs `epochs` through a stage; what it emitted, in order.
    fn run(a: &mut StageA, epochs: impl IntoIterator<Item = Vec<(SideA, Diff)>>) -> Emitted {
        let rules = RulesConfig::default();
        let (mut edges, mut fires) = (Vec::new(), Vec::new());
        for delta in epochs {
            a.epoch(
                delta,
                &rules,
                |e, d| edges.push((e, d)),
                |f, d| fires.push((f, d)),
            );
        }
        (edges, fires)
    }

    /// A long stream of actors (time = seq) with direct targets, and actions paired with
    /// effects that never report done: keeping everything holds an entry per event, a
    /// horizon of 1000 holds those of the last ~1250 only; the edges are the same.
    #[test]
    fn a_horizon_keeps_the_first_stage_bounded() {
        let epochs = || {
            (0..200u64).map(|e| {
                (e * 100..e * 100 + 100)
                    .flat_map(|i| {
                        [
                            (SideA::Src(src(i, 0)), 1),
                            (SideA::Direct(dst(i, false)), 1),
                            (
                                SideA::Pair(Pair {
                                    arm: i,
                                    fire: i + 1,
                                }),
                                1,
                            ),
                        ]
                    })
                    .collect::<Vec<_>>()
            })
        };
        let mut kept = StageA::new(None);
        let mut forgetting = StageA::new(Some(argus_schema::Nanos(1000)));
        let mut most = 0;
        let (mut all_kept, mut all_forgetting) = (Vec::new(), Vec::new());
        for delta in epochs() {
            all_kept.push(run(&mut kept, [delta.clone()]));
            all_forgetting.push(run(&mut forgetting, [delta]));
            most = most.max(forgetting.held());
        }
        assert_eq!(all_kept, all_forgetting);
        assert_eq!(kept.held(), 3 * 20_000);
        assert!(most <= 3 * 1500, "{most} entries held at most");
        assert!(forgetting.held() >= 3 * 1000, "what is recent is kept");
        // The same stream under a limit the job lowers to 200 halfway (its memory budget):
        // from then on only the last ~250 are held, and the limit lifted lets it grow back.
        let limit = ForgetLimit::default();
        let mut limited = StageA::limited(Some(argus_schema::Nanos(1000)), limit.clone());
        let mut after = 0;
        for (e, delta) in epochs().enumerate() {
            match e {
                100 => limit.set(Some(argus_schema::Nanos(200))),
                150 => limit.set(None),
                _ => {}
            }
            run(&mut limited, [delta]);
            if (110..150).contains(&e) {
                after = after.max(limited.held());
            }
        }
        assert!(after <= 3 * 400, "{after} entries held under the limit");
        assert!(limited.held() >= 3 * 1000, "grown back once lifted");
    }

    /// Below the floor nothing more is joined: a pair naming a forgotten action and a late
    /// change of that action's actor fire nothing. (Kept, the pair would find no actor and
    /// the retraction would then fire a -1 that nothing ever fired.)
    #[test]
    fn records_below_the_floor_are_dropped_and_nothing_goes_negative() {
        let mut a = StageA::new(Some(argus_schema::Nanos(1000)));
        // Actor of action 5 (time 5), then time runs on past the horizon.
        let mut epochs = vec![vec![(SideA::Src(src(5, 0)), 1)]];
        epochs.extend((1..40u64).map(|e| vec![(SideA::Src(src(e * 100, 0)), 1)]));
        let (edges, fires) = run(&mut a, epochs);
        assert!(edges.is_empty() && fires.is_empty());
        assert_eq!(a.srcs.get(&5).count(), 0, "the old actor is forgotten");
        // An effect of action 5 now, and the actor's segment changing: nothing fires.
        let (edges, fires) = run(
            &mut a,
            [
                vec![(SideA::Pair(Pair { arm: 5, fire: 3950 }), 1)],
                vec![(SideA::Src(src(5, 0)), -1), (SideA::Src(src(5, 1)), 1)],
            ],
        );
        assert!(edges.is_empty());
        assert!(fires.is_empty(), "{fires:?}");
        assert_eq!(a.fires.get(&5).count(), 0);
        assert_eq!(a.srcs.get(&5).count(), 0);
    }
}
