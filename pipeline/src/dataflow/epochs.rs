//! The dataflow's output by epoch: [`by_epoch`] groups its messages into each epoch's updates
//! (for whatever applies them epoch by epoch: the arranged graph's tests and benches), and
//! [`collect_epochs`] accumulates them into the whole graph after every epoch, which the
//! oracle tests (`pipeline/tests/oracle.rs`, the top-level `oracle_real` and `exact_real`)
//! compare with the batch reference recomputed from scratch.

use super::{run, Batch, DataflowConfig, Message, PipelineError, Update};
use crate::rules::Counter;
use argus_schema::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One epoch of the dataflow's output: its updates, in the order they came, and its watermark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochUpdates {
    /// The epoch.
    pub epoch: u64,
    /// Every event up to it had been seen when the epoch closed.
    pub watermark: Nanos,
    /// The `(update, ±1)` changes at the epoch.
    pub updates: Vec<(Update, i64)>,
}

/// Groups the dataflow's messages by epoch: each [`Message::EpochDone`] closes the updates
/// that came before it. Updates after the last `EpochDone` (a stream cut short) are dropped.
pub fn by_epoch<I: IntoIterator<Item = Message>>(messages: I) -> ByEpoch<I::IntoIter> {
    ByEpoch {
        messages: messages.into_iter(),
        pending: Vec::new(),
    }
}

/// The iterator of [`by_epoch`].
pub struct ByEpoch<I> {
    messages: I,
    pending: Vec<(Update, i64)>,
}

impl<I: Iterator<Item = Message>> Iterator for ByEpoch<I> {
    type Item = EpochUpdates;

    fn next(&mut self) -> Option<EpochUpdates> {
        for msg in self.messages.by_ref() {
            match msg {
                Message::Updates { updates, .. } => self.pending.extend(updates),
                Message::EpochDone {
                    epoch, watermark, ..
                } => {
                    return Some(EpochUpdates {
                        epoch: epoch.0,
                        watermark,
                        updates: std::mem::take(&mut self.pending),
                    })
                }
            }
        }
        None
    }
}

/// Runs the dataflow over `batches` and returns the accumulated graph after every epoch,
/// with the epoch's watermark. For tests and tools that want every intermediate state.
pub fn collect_epochs(
    cfg: &DataflowConfig,
    batches: Vec<Batch>,
) -> Result<Vec<(Nanos, crate::Graph)>, PipelineError> {
    let (in_tx, in_rx) = crossbeam_channel::bounded(4);
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let cfg2 = cfg.clone();
    let runner = std::thread::spawn(move || run(&cfg2, in_rx, out_tx));
    let feeder = std::thread::spawn(move || {
        for b in batches {
            if in_tx.send(b).is_err() {
                break;
            }
        }
    });
    let mut acc: HashMap<Update, i64> = HashMap::new();
    let mut counts = crate::rules::Counts::default();
    let mut result = Vec::new();
    for msg in out_rx {
        match msg {
            Message::Updates { updates, .. } => {
                for (u, d) in updates {
                    let e = acc.entry(u.clone()).or_insert(0);
                    *e += d;
                    if *e == 0 {
                        acc.remove(&u);
                    }
                }
            }
            Message::EpochDone {
                watermark,
                counts: delta,
                ..
            } => {
                for c in Counter::ALL {
                    counts.add(c, delta.get(c) as i64);
                }
                let mut g = crate::Graph {
                    counts: counts.clone(),
                    ..crate::Graph::default()
                };
                for (u, d) in &acc {
                    for _ in 0..*d {
                        match u {
                            Update::Segment(s) => g.segments.push(s.clone()),
                            Update::Edge(e) => g.edges.push(e.clone()),
                            Update::Spin(s) => g.spins.push(s.clone()),
                        }
                    }
                    if *d < 0 {
                        return Err(PipelineError::Worker(format!(
                            "negative multiplicity {d} for {u:?}"
                        )));
                    }
                }
                g.sort();
                result.push((watermark, g));
            }
        }
    }
    feeder
        .join()
        .map_err(|_| PipelineError::Worker("input feeder panicked".into()))?;
    runner
        .join()
        .map_err(|_| PipelineError::Worker("dataflow thread panicked".into()))??;
    Ok(result)
}
