//! The first join stage, `"pipeline::join_seq"`, by action/event `seq`: `Src ⋈ Dst` gives
//! the direct edges (wake-up, fork, signal); `Src ⋈ Pair` re-keys an action's actor by each
//! effect it caused, for `join_fire`. The join semantics and what is forgotten when are in
//! `join.rs`.

use super::handoff::{ship, Pending, Port, ToOutput};
use super::join::{spread, Side, SideA, SideB};
use super::{Collection, Diff, Update};
use crate::rules::{join_edges, Dst, RulesConfig, Src};
use std::collections::BTreeMap;
use std::sync::Arc;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;

/// The first join stage over the keyed stage's `side_a`, exchanged by join key: the direct
/// edges (to the output, through the side channel where there is one) and the fired
/// (effect, actor) pairs, in that order.
pub(super) fn join_seq<'s>(
    side_a: Collection<'s, SideA>,
    rules: Arc<RulesConfig>,
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
        let mut stage = StageA::new();
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
                    &rules,
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
}
