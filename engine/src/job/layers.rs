//! The live graph's records in layers: one arranged graph ([`ArrangedJob`]) per stretch of
//! end times one retention cut takes ([`cut_step_ns`](super::window::cut_step_ns): a quarter
//! of `--retain`), and one for the records still open. A cut of the collector *retires* the
//! layers wholly before its cutoff instead of retracting their records one by one; reads
//! see the layers not retired as of their epoch, as one graph ([`Union`]).
//!
//! ```text
//!  update ─► end time (Timed)             ─ none ─► open layer
//!                                         └ t ──► layer ⌊t / step⌋ (made when first needed)
//!  Cut(e, cutoff) ─► layers ending at or before cutoff: retired at e
//!  read as of a ─► Union of the layers made and not retired as of a
//!  compaction to `since` ─► layers retired at or before `since` dropped (no read sees them)
//! ```
//!
//! Why: retracting what a cut forgot cost the worker more than arranging it had (the
//! retractions meet their insertions in the spines' biggest merges): at 300k events/s with
//! `--retain 30s` the worker stepped ~30 ms per 36k-update epoch until the first cut, then
//! 1–1.9 s per 10 epochs of ~700k updates, and fell behind every 40 s (soak, 2026-11-29).
//! A layer's records never meet a retraction from a cut, and a layer's spine holds a quarter
//! of the window, not all of it.
//!
//! The same answers: the collector keeps a record while its end bucket is not cut, and drops
//! later updates of records it cut ([`WindowGraph`](super::window::WindowGraph)); the layers
//! hold exactly the records of the buckets the collector holds, since cuts fall on layer
//! boundaries (both use the same step). Without `--retain`, or with the backward slices
//! maintained (`--live-slices`: a slice follows edges across any stretch), there is one
//! layer and a cut's records are retracted as before.

use super::window::Forgotten;
use argus_pipeline::arranged::{ArrangedJob, GraphRead, SliceConfig, Union};
use argus_pipeline::dataflow::{Timed, Update};
use argus_schema::{EndCause, Nanos};
use std::collections::BTreeMap;

/// One layer: its arranged graph, the epoch it was made at, the epoch it was retired at, and
/// its net record counts.
struct Layer {
    job: ArrangedJob,
    made: u64,
    retired: Option<u64>,
    counts: Counts,
}

/// Net records of a layer, or of the layers not retired (what the live graph's status
/// shows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) segments: i64,
    pub(crate) open_segments: i64,
    pub(crate) edges: i64,
    pub(crate) spins: i64,
}

impl Counts {
    fn add(&mut self, u: &Update, d: i64) {
        match u {
            Update::Segment(s) => {
                self.segments += d;
                if s.end == EndCause::Open {
                    self.open_segments += d;
                }
            }
            Update::Edge(_) => self.edges += d,
            Update::Spin(_) => self.spins += d,
        }
    }
}

/// Which layer an update goes to: `None` for the open layer (every update without layers).
type Key = Option<u64>;

/// A live graph's layers, in one timely worker (module docs).
pub(crate) struct Layers {
    /// End times per layer (`None`: one layer for everything).
    step: Option<u64>,
    slices: Option<SliceConfig>,
    layers: BTreeMap<Key, Layer>,
}

impl Layers {
    /// Layers of `step` ns of end times (`None`: one), each with the backward slices when
    /// `slices` (then one layer whatever `step`).
    pub(crate) fn new(step: Option<u64>, slices: Option<SliceConfig>) -> Layers {
        Layers {
            step: step.filter(|_| slices.is_none()),
            slices,
            layers: BTreeMap::new(),
        }
    }

    fn key(&self, u: &Update) -> Key {
        let step = self.step?;
        u.end_time().map(|t| t.0 / step)
    }

    /// Adds `updates` at `epoch` (not closed yet), each to its layer.
    pub(crate) fn send(
        &mut self,
        worker: &mut timely::worker::Worker,
        epoch: u64,
        updates: Vec<(Update, i64)>,
    ) {
        let mut by_key: BTreeMap<Key, Vec<(Update, i64)>> = BTreeMap::new();
        match self.step {
            None => {
                by_key.insert(None, updates);
            }
            Some(_) => {
                for (u, d) in updates {
                    by_key.entry(self.key(&u)).or_default().push((u, d));
                }
            }
        }
        for (key, updates) in by_key {
            let slices = &self.slices;
            let layer = self.layers.entry(key).or_insert_with(|| Layer {
                job: match slices {
                    Some(cfg) => ArrangedJob::new(worker, cfg),
                    None => ArrangedJob::without_slices(worker),
                },
                made: epoch,
                retired: None,
                counts: Counts::default(),
            });
            if layer.retired.is_some() {
                // Over before the window: the collector drops these (`WindowGraph::keep`).
                continue;
            }
            for (u, d) in &updates {
                layer.counts.add(u, *d);
            }
            layer.job.send(epoch, updates);
        }
    }

    /// Closes `epoch` in every layer not retired.
    pub(crate) fn close(&mut self, epoch: u64) {
        for l in self.layers.values_mut().filter(|l| l.retired.is_none()) {
            l.job.close(epoch);
        }
    }

    /// Whether a layer may still change at `epoch` (a retired one: at the last epoch it
    /// was closed, which reads before its retirement may ask). A layer made after `epoch`
    /// holds nothing at it and is not asked: a worker behind applies the next epoch's
    /// updates before it steps this one, and a layer they make has its input at epoch 0
    /// until its first close (differential's input session moves its handle only when it
    /// flushes), so its probe would never pass `epoch` before the worker went on.
    pub(crate) fn pending(&self, epoch: u64) -> bool {
        self.layers
            .values()
            .filter(|l| l.made <= epoch)
            .any(|l| match l.retired {
                None => l.job.pending(epoch),
                Some(r) => r > l.made && l.job.pending(epoch.min(r - 1)),
            })
    }

    /// Whether a cut's records must be retracted (one layer holds them all) rather than
    /// their layers retired.
    pub(crate) fn retracts(&self) -> bool {
        self.step.is_none()
    }

    /// The collector cut at `epoch` what ended before `cutoff` (a multiple of the step):
    /// the layers wholly before it are retired from `epoch` on.
    pub(crate) fn retire(&mut self, epoch: u64, cutoff: Nanos) {
        let Some(step) = self.step else {
            return;
        };
        for (key, l) in self.layers.iter_mut() {
            if key.is_some_and(|k| (k + 1).saturating_mul(step) <= cutoff.0) {
                l.retired.get_or_insert(epoch);
            }
        }
    }

    /// The collector cut at `epoch` what ended before `cutoff`, `gone`: the layers wholly
    /// before it are retired, and when the cutoff falls inside a layer (a cut of the memory
    /// budget's shorter window, `budget.rs`), what the cut took from that layer is
    /// retracted. Returns the retractions sent.
    pub(crate) fn cut(
        &mut self,
        worker: &mut timely::worker::Worker,
        epoch: u64,
        gone: Forgotten,
        cutoff: Nanos,
    ) -> usize {
        self.retire(epoch, cutoff);
        let Some(step) = self.step else {
            return 0;
        };
        if cutoff.0.is_multiple_of(step) {
            return 0;
        }
        let partial = cutoff.0 / step;
        let updates: Vec<(Update, i64)> = gone
            .retractions()
            .into_iter()
            .filter(|(u, _)| self.key(u) == Some(partial))
            .collect();
        let n = updates.len();
        if n > 0 {
            self.send(worker, epoch, updates);
        }
        n
    }

    /// Lets reads forget the epochs before `since`; drops the layers retired by then.
    pub(crate) fn compact_to(&mut self, since: u64) {
        self.layers
            .retain(|_, l| l.retired.is_none_or(|r| r > since));
        for l in self.layers.values_mut() {
            l.job.traces().compact_to(since);
        }
    }

    /// The net record counts of the layers not retired.
    pub(crate) fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for l in self.layers.values().filter(|l| l.retired.is_none()) {
            c.segments += l.counts.segments;
            c.open_segments += l.counts.open_segments;
            c.edges += l.counts.edges;
            c.spins += l.counts.spins;
        }
        c
    }

    /// Layers (made, retired or not), for the log.
    pub(crate) fn len(&self) -> usize {
        self.layers.len()
    }

    /// The graph as of `as_of`: the layers made by then and not retired.
    pub(crate) fn read(&mut self, as_of: u64) -> impl GraphRead + '_ {
        Union::new(
            self.layers
                .values_mut()
                .filter(|l| l.made <= as_of && l.retired.is_none_or(|r| as_of < r))
                .map(|l| l.job.traces())
                .collect(),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::window::tests::seg;
    use super::*;
    use argus_schema::{CausalEdge, EdgeKind, SegmentId, Strength, Tid};

    /// Records go to the layer of their end time (open ones apart); a cut retires the
    /// layers before it from its epoch on (reads of earlier epochs still see them), they are
    /// dropped once compaction passes that epoch, and the counts follow. Without a step
    /// there is one layer.
    #[test]
    fn a_cut_retires_whole_layers_and_compaction_drops_them() {
        timely::execute_directly(|worker| {
            let mut layers = Layers::new(Some(10), None);
            let old = seg(1, 0, 0, Some(5));
            let young = seg(1, 1, 5, Some(15));
            let open = seg(1, 2, 15, None);
            let edge = CausalEdge {
                src: old.id,
                dst: young.id,
                kind: EdgeKind::Wakeup,
                strength: Strength::Strong,
                ts: Nanos(5),
                src_syscall: -1,
            };
            layers.send(
                worker,
                0,
                vec![
                    (Update::Segment(old.clone()), 1),
                    (Update::Segment(young.clone()), 1),
                    (Update::Segment(open.clone()), 1),
                    (Update::Edge(edge.clone()), 1),
                ],
            );
            layers.close(0);
            worker.step_while(|| layers.pending(0));
            assert_eq!(layers.len(), 3, "layers 0 and 1, and the open one");
            let c = layers.counts();
            assert_eq!((c.segments, c.open_segments, c.edges), (3, 1, 1));
            // The cut at epoch 1 forgets what ended before 10: layer 0 (old, the edge).
            layers.retire(1, Nanos(10));
            layers.close(1);
            worker.step_while(|| layers.pending(1));
            let c = layers.counts();
            assert_eq!((c.segments, c.open_segments, c.edges), (2, 1, 0));
            assert_eq!(
                layers.read(0).segment(old.id, 0).unwrap(),
                Some(old.clone())
            );
            assert_eq!(layers.read(0).incoming(young.id, 0).unwrap(), vec![edge]);
            assert_eq!(layers.read(1).segment(old.id, 1).unwrap(), None);
            assert!(layers.read(1).incoming(young.id, 1).unwrap().is_empty());
            let run = layers
                .read(1)
                .thread_run(Tid(1), Nanos(0), None, 1)
                .unwrap();
            let ids: Vec<SegmentId> = run.segments.iter().map(|s| s.0).collect();
            assert_eq!(ids, vec![young.id, open.id]);
            assert!(run.at_start && run.at_end);
            // Compaction to epoch 1 drops it (no read may ask for epoch 0 any more).
            layers.compact_to(1);
            assert_eq!(layers.len(), 2);
            assert_eq!(layers.read(1).segment(young.id, 1).unwrap(), Some(young));
            // Without a step: one layer, and a cut retires nothing.
            let mut one = Layers::new(None, None);
            one.send(worker, 0, vec![(Update::Segment(old), 1)]);
            one.retire(0, Nanos(1_000));
            assert!(one.retracts());
            assert_eq!((one.len(), one.counts().segments), (1, 1));
        });
    }

    /// A cut inside a layer (the memory budget's shorter window) retires the layers before
    /// it and retracts what it took from the layer it falls in; the rest of that layer stays.
    #[test]
    fn a_cut_inside_a_layer_retracts_what_it_took_from_it() {
        timely::execute_directly(|worker| {
            let s = 1_000_000_000u64;
            let mut g =
                super::super::window::WindowGraph::new(Some(std::time::Duration::from_secs(40)));
            let mut layers = Layers::new(
                super::super::window::cut_step_ns(Some(std::time::Duration::from_secs(40))),
                None,
            );
            let segs: Vec<_> = [3, 12, 17, 25]
                .iter()
                .enumerate()
                .map(|(i, &end)| seg(i as i32 + 1, 0, 0, Some(end * s)))
                .collect();
            let ups: Vec<(Update, i64)> = segs
                .iter()
                .map(|x| (Update::Segment(x.clone()), 1))
                .collect();
            g.update(ups.clone());
            layers.send(worker, 0, ups);
            layers.close(0);
            worker.step_while(|| layers.pending(0));
            assert_eq!(layers.counts().segments, 4);
            // A 5 s window at 20 s: the cutoff is 15 s, inside the layer of 10..20 s.
            let gone = g.forget_due(Nanos(20 * s), 5 * s).unwrap();
            assert_eq!(g.window_start(), Nanos(15 * s));
            assert_eq!(layers.cut(worker, 1, gone, g.window_start()), 1);
            layers.close(1);
            worker.step_while(|| layers.pending(1));
            assert_eq!(layers.counts().segments, 2);
            let read = |l: &mut Layers, i: usize| l.read(1).segment(segs[i].id, 1).unwrap();
            assert_eq!(read(&mut layers, 0), None, "its layer retired");
            assert_eq!(read(&mut layers, 1), None, "retracted");
            assert_eq!(read(&mut layers, 2), Some(segs[2].clone()), "kept");
            assert_eq!(read(&mut layers, 3), Some(segs[3].clone()));
        });
    }

    /// A worker behind applies epoch 2's updates before it steps epoch 1 (`live_graph.rs`,
    /// `MAX_BATCH`): a layer they make holds epoch 1 back from nothing, and epoch 1 is done
    /// once the layers made by then have passed it (the worker spun on it for ever: a test of
    /// `flow.rs` failed 3 runs in 100 under saturate.c). Reads of epoch 1 do not see
    /// the new layer; epoch 2 is done once it is closed.
    #[test]
    fn a_layer_made_by_a_later_epoch_does_not_hold_an_earlier_one_back() {
        timely::execute_directly(|worker| {
            let mut layers = Layers::new(Some(10), None);
            let first = seg(1, 0, 0, Some(5));
            let later = seg(1, 1, 5, Some(25));
            layers.send(worker, 0, vec![(Update::Segment(first.clone()), 1)]);
            layers.close(0);
            worker.step_while(|| layers.pending(0));
            layers.close(1);
            // Epoch 2's updates arrive before epoch 1 is stepped: layer 2 is made.
            layers.send(worker, 2, vec![(Update::Segment(later.clone()), 1)]);
            assert_eq!(layers.len(), 2);
            let stepped = (0..10_000)
                .take_while(|_| {
                    let pending = layers.pending(1);
                    if pending {
                        worker.step();
                    }
                    pending
                })
                .count();
            assert!(
                !layers.pending(1),
                "epoch 1 still pending after {stepped} steps"
            );
            assert_eq!(layers.read(1).segment(later.id, 1).unwrap(), None);
            assert_eq!(
                layers.read(1).segment(first.id, 1).unwrap(),
                Some(first.clone())
            );
            assert!(layers.pending(2), "layer 2's epoch is not closed yet");
            layers.close(2);
            worker.step_while(|| layers.pending(2));
            assert_eq!(layers.read(2).segment(later.id, 2).unwrap(), Some(later));
            assert_eq!(layers.read(2).segment(first.id, 2).unwrap(), Some(first));
        });
    }
}
