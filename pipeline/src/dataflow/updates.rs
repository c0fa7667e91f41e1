//! Rules that change while a dataflow runs (`argus start` re-reads its rules file on
//! SIGHUP): new rules from an epoch on, in stream order.
//!
//! The feeder pushes `(epoch, rules)` *before* it sends that epoch's batch; every stage looks
//! up the rules of the epoch it is processing ([`RulesAt::at`]). A worker cannot process an
//! epoch before its batch is sent, so every stage of every worker runs an epoch with the
//! same rules, whatever the timing: epochs before the update with the old rules, from it on
//! with the new. Rule state (a key's machine) carries over; only what is decided from then
//! on follows the new rules.

use crate::rules::RulesConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// Updates of a running dataflow's rules, shared by its clones (the feeder and the stages).
#[derive(Clone, Default)]
pub struct RuleUpdates {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Set with the first update: a dataflow that never gets one takes no lock.
    any: AtomicBool,
    /// `(first epoch, rules)`, by epoch.
    list: RwLock<Vec<(u64, Arc<RulesConfig>)>>,
}

impl RuleUpdates {
    /// No updates yet.
    pub fn new() -> RuleUpdates {
        RuleUpdates::default()
    }

    /// From epoch `from` on the dataflow runs `rules`. Call it before sending batch `from`;
    /// an update for an epoch before the last one's replaces the later ones (the list stays
    /// ordered).
    pub fn push(&self, from: u64, rules: RulesConfig) {
        let mut list = self.inner.list.write().unwrap_or_else(|p| p.into_inner());
        list.retain(|(e, _)| *e < from);
        list.push((from, Arc::new(rules)));
        self.inner.any.store(true, Ordering::Release);
    }

    /// Forgets what no epoch from `epoch` on can need: every update but the latest at or
    /// before it, and those after. Call it with an epoch the dataflow has finished (or
    /// later: one it has not yet begun).
    pub fn forget_before(&self, epoch: u64) {
        let mut list = self.inner.list.write().unwrap_or_else(|p| p.into_inner());
        let keep_from = list.partition_point(|(e, _)| *e <= epoch).saturating_sub(1);
        list.drain(..keep_from);
    }

    /// How many updates were pushed and kept.
    pub fn len(&self) -> usize {
        self.inner
            .list
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for RuleUpdates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RuleUpdates({})", self.len())
    }
}

/// The rules each epoch runs with: the dataflow's own, or the latest update at or before
/// the epoch.
#[derive(Clone)]
pub(super) struct RulesAt {
    base: Arc<RulesConfig>,
    updates: RuleUpdates,
}

impl RulesAt {
    pub(super) fn new(base: RulesConfig, updates: RuleUpdates) -> RulesAt {
        RulesAt {
            base: Arc::new(base),
            updates,
        }
    }

    /// The rules of `epoch`.
    pub(super) fn at(&self, epoch: u64) -> Arc<RulesConfig> {
        if !self.updates.inner.any.load(Ordering::Acquire) {
            return self.base.clone();
        }
        let list = self
            .updates
            .inner
            .list
            .read()
            .unwrap_or_else(|p| p.into_inner());
        list.iter()
            .rev()
            .find(|(e, _)| *e <= epoch)
            .map_or_else(|| self.base.clone(), |(_, r)| r.clone())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::input::tests::switches;
    use super::super::{run_with_updates, Batch, DataflowConfig, Message, Update};
    use super::*;
    use argus_schema::{EdgeKind, Nanos, Tid};

    /// Thread 10 becomes a kernel delegate from epoch 2 on: the thread-order edges between
    /// its segments stop there, with 1 and 2 workers, however fast the stages run.
    #[test]
    fn an_update_applies_from_its_epoch_on() {
        for workers in [1, 2] {
            let cfg = DataflowConfig {
                workers,
                ..DataflowConfig::default()
            };
            let updates = RuleUpdates::new();
            let (in_tx, in_rx) = crossbeam_channel::unbounded::<Batch>();
            let (out_tx, out_rx) = crossbeam_channel::unbounded();
            let feeder = updates.clone();
            let runner = std::thread::spawn(move || run_with_updates(&cfg, updates, in_rx, out_tx));
            for b in 0..4u64 {
                if b == 2 {
                    let mut delegate = RulesConfig::default();
                    delegate.kernel_threads.insert(Tid(10));
                    feeder.push(2, delegate);
                }
                let events = switches(b * 100, 100);
                let watermark = events.last().unwrap().ts;
                in_tx.send(Batch { events, watermark }).unwrap();
            }
            drop(in_tx);
            runner.join().unwrap().unwrap();
            // Thread 10's thread-order edges by the time of their action, net of retractions.
            let mut order: Vec<(Nanos, i64)> = Vec::new();
            for m in out_rx.try_iter() {
                if let Message::Updates { updates, .. } = m {
                    for (u, d) in updates {
                        if let Update::Edge(e) = u {
                            if e.kind == EdgeKind::ThreadOrder && e.src.tid() == Tid(10) {
                                order.push((e.ts, d));
                            }
                        }
                    }
                }
            }
            // Epochs 0-1 hold switches 0-199 (up to 200 µs), 2-3 the rest; the edge at
            // the boundary may go either way.
            let net = |from: u64, to: u64| {
                order
                    .iter()
                    .filter(|(ts, _)| ts.0 > from * 1_000 && ts.0 < to * 1_000)
                    .map(|(_, d)| d)
                    .sum::<i64>()
            };
            assert!(net(0, 195) > 50, "{workers} workers: {order:?}");
            assert_eq!(net(205, 500), 0, "{workers} workers");
        }
    }

    #[test]
    fn each_epoch_gets_the_latest_update_at_or_before_it() {
        let base = RulesConfig::default();
        let updates = RuleUpdates::new();
        let at = RulesAt::new(base.clone(), updates.clone());
        assert_eq!(*at.at(5), base);
        let three = RulesConfig {
            yields_per_sec: 3,
            ..RulesConfig::default()
        };
        let seven = RulesConfig {
            yields_per_sec: 7,
            ..RulesConfig::default()
        };
        updates.push(3, three.clone());
        updates.push(7, seven.clone());
        assert_eq!(*at.at(2), base);
        assert_eq!(*at.at(3), three);
        assert_eq!(*at.at(6), three);
        assert_eq!(*at.at(100), seven);
        // An earlier epoch's update replaces what came after it.
        updates.push(5, base.clone());
        assert_eq!(updates.len(), 2);
        assert_eq!(*at.at(100), base);
        assert_eq!(*at.at(4), three);
        // Once epoch 6 is done, the update at 3 is of no use, the one at 5 still is.
        updates.push(9, seven.clone());
        updates.forget_before(6);
        assert_eq!(updates.len(), 2);
        assert_eq!(*at.at(6), base);
        assert_eq!(*at.at(9), seven);
        updates.forget_before(100);
        assert_eq!(updates.len(), 1);
        assert_eq!(*at.at(100), seven);
    }
}
