//! The second join stage, `"pipeline::join_fire"`, by effect `seq`: the (effect, actor)
//! pairs of `join_seq` ⋈ the effect's target give the paired edges (timer, work item, pipe
//! and other channels). The join semantics and what is forgotten when are in `join.rs` (in
//! a continuous job, also by time: [`Horizon`]).

use super::handoff::{Pending, ToOutput};
use super::join::{spread, Horizon, Side, SideB};
use super::updates::RulesAt;
use super::{Collection, Diff, ForgetLimit, Update};
use crate::rules::{join_edges, Dst, RulesConfig, Src};
use argus_schema::Nanos;
use std::collections::BTreeMap;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::Capability;

/// The second join stage over the targets of paired effects and the fired pairs,
/// exchanged by effect `seq`: the paired edges, through the side channel where there is
/// one, else on the returned stream. `forget`: the horizon of a continuous job
/// ([`super::DataflowConfig::forget`]).
pub(super) fn join_fire<'s>(
    side_b: Collection<'s, SideB>,
    rules: RulesAt,
    (forget, limit): (Option<Nanos>, &ForgetLimit),
    to_out: ToOutput,
) -> Collection<'s, Update> {
    side_b.unary_frontier::<CapacityContainerBuilder<Vec<(Update, Diff)>>, _, _, _>(
        Exchange::new(|x: &(SideB, Diff)| spread(x.0.key())),
        "pipeline::join_fire",
        move |_cap, _info| {
            let mut stage = StageB::limited(forget, limit.clone());
            let mut queued: Pending<Capability<u64>, (SideB, Diff)> = BTreeMap::new();
            move |(input, frontier), output| {
                input.for_each(|time, data| {
                    queued
                        .entry(*time.time())
                        .or_insert_with(|| (time.retain(0), Vec::new()))
                        .1
                        .append(data);
                });
                while let Some(entry) = queued.first_entry() {
                    if frontier.less_equal(entry.key()) {
                        break;
                    }
                    let (cap, delta) = entry.remove();
                    let mut edges = Vec::new();
                    let rules = rules.at(*cap.time());
                    stage.epoch(delta, &rules, |e, d| edges.push((Update::Edge(e), d)));
                    if let Some(mut edges) = to_out.send(*cap.time(), edges) {
                        if !edges.is_empty() {
                            output.session(&cap).give_container(&mut edges);
                        }
                    }
                }
            }
        },
    )
}

/// The second stage, by effect `seq`: (effect, actor) ⋈ the effect's target gives timer,
/// work-item and pipe edges.
pub(super) struct StageB {
    srcs: Side<Src>,
    dsts: Side<Dst>,
    /// Forgetting by time (a continuous job), or keeping what can still join (`None`). It
    /// learns from the actors re-keyed by their effects: their `seq` and `ts` are the
    /// action's, a fact about the stream like any other.
    horizon: Option<Horizon>,
}

impl StageB {
    /// `forget`: the horizon of a continuous job, if any (tests; the stage takes its
    /// limit too: [`StageB::limited`]).
    #[cfg(test)]
    pub(super) fn new(forget: Option<Nanos>) -> StageB {
        StageB::limited(forget, ForgetLimit::default())
    }

    /// `forget`, or less when `limit` says so (a continuous job's memory budget).
    pub(super) fn limited(forget: Option<Nanos>, limit: ForgetLimit) -> StageB {
        StageB {
            srcs: Side::new(),
            dsts: Side::new(),
            horizon: forget.map(|f| Horizon::limited(f, limit)),
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
            if let Some(h) = self.horizon.as_mut() {
                if let SideB::Src { src, .. } = &r {
                    h.saw(src);
                }
                // Below the floor: forgotten, nothing more is joined there.
                if !h.keeps(r.key()) {
                    continue;
                }
            }
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
        if let Some(floor) = self.horizon.as_mut().and_then(Horizon::sweep) {
            self.srcs.forget_below(floor);
            self.dsts.forget_below(floor);
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.srcs.len() + self.dsts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::join::testing::{dst, src};
    use super::super::join::SideA;
    use super::super::join_seq::StageA;
    use super::*;
    use crate::rules::Pair;
    use argus_schema::{EdgeKind, SegmentId, Tid};

    #[test]
    fn paired_effects_join_through_both_stages_in_any_order() {
        let rules = RulesConfig::default();
        let mut a = StageA::new(None);
        let mut b = StageB::new(None);
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
        let mut a = StageA::new(None);
        let mut b = StageB::new(None);
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

#[cfg(test)]
mod forgetting {
    use super::super::join::testing::{dst, src};
    use super::*;

    /// Actions (time = seq) re-keyed by their effects, and the effects' targets: keeping
    /// everything holds two entries per effect, a horizon of 1000 those of the last ~1250
    /// only; the edges are the same.
    #[test]
    fn a_horizon_keeps_the_second_stage_bounded() {
        let rules = RulesConfig::default();
        let mut kept = StageB::new(None);
        let mut forgetting = StageB::new(Some(argus_schema::Nanos(1000)));
        let mut most = 0;
        for e in 0..200u64 {
            let delta: Vec<(SideB, Diff)> = (e * 100..e * 100 + 100)
                .flat_map(|i| {
                    [
                        (
                            SideB::Src {
                                fire: i + 1,
                                src: src(i, 0),
                            },
                            1,
                        ),
                        (SideB::Dst(dst(i + 1, true)), 1),
                    ]
                })
                .collect();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            kept.epoch(delta.clone(), &rules, |x, d| a.push((x, d)));
            forgetting.epoch(delta, &rules, |x, d| b.push((x, d)));
            assert_eq!(a, b, "epoch {e}");
            assert_eq!(a.len(), 100, "epoch {e}");
            most = most.max(forgetting.held());
        }
        assert_eq!(kept.held(), 2 * 20_000);
        assert!(most <= 2 * 1500, "{most} entries held at most");
        assert!(forgetting.held() >= 2 * 1000, "what is recent is kept");
    }
}
