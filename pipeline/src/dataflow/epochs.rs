//! [`collect_epochs`]: the dataflow's output accumulated into the whole graph after every
//! epoch, which the oracle tests (`pipeline/tests/oracle.rs`, the top-level `oracle_real`
//! and `exact_real`) compare with the batch reference recomputed from scratch.

use super::{run, Batch, DataflowConfig, Message, PipelineError, Update};
use crate::rules::Counter;
use argus_schema::Nanos;
use std::collections::HashMap;

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
