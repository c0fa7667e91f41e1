//! The output stage, `"pipeline::output"`: every graph change and rule counter goes to
//! worker 0, which hands each epoch's containers to the caller's channel as they are (no
//! copy), then the epoch's [`Message::EpochDone`], in epoch order, once both its inputs
//! (graph changes, counters) have passed the epoch.
//!
//! The workers of process 0 send their graph changes through the side channel instead of
//! this stage's exchange, tagged with the epoch and while they still hold its capability:
//! once the frontier has passed an epoch, all of its changes are in the channel. Other
//! processes of a cluster use the exchange.

use super::handoff::Changes;
use super::input::Introduced;
use super::{Collection, Diff, Message, Update};
use crate::rules::{Counter, Counts};
use argus_schema::Epoch;
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::StreamVec;

/// The output stage over the graph changes `updates` and the rule counters `counted`:
/// sends each epoch the driver `introduced` on `out_tx`, with what came through `side_rx`.
/// The returned stream carries nothing; its frontier says which epochs are reported.
pub(super) fn output<'s>(
    updates: Collection<'s, Update>,
    counted: Collection<'s, Counter>,
    introduced: Introduced,
    side_rx: Receiver<(u64, Changes)>,
    out_tx: Sender<Message>,
) -> StreamVec<'s, u64, ()> {
    updates.binary_frontier::<_, CapacityContainerBuilder<Vec<()>>, _, _, _, _>(
        counted,
        Exchange::new(|_: &(Update, Diff)| 0),
        Exchange::new(|_: &(Counter, Diff)| 0),
        "pipeline::output",
        move |_cap, _info| {
            let mut held: BTreeMap<u64, Vec<Vec<(Update, Diff)>>> = BTreeMap::new();
            let mut counted: BTreeMap<u64, Counts> = BTreeMap::new();
            move |(updates, uf), (counts, cf), _output| {
                updates.for_each(|time, data| {
                    if !data.is_empty() {
                        held.entry(*time.time())
                            .or_default()
                            .push(std::mem::take(data));
                    }
                });
                counts.for_each(|time, data| {
                    let acc = counted.entry(*time.time()).or_default();
                    for (c, d) in data.iter() {
                        acc.add(*c, *d);
                    }
                });
                let mut known = introduced.borrow_mut();
                while let Some(entry) = known.first_entry() {
                    let e = *entry.key();
                    if uf.less_equal(&e) || cf.less_equal(&e) {
                        break;
                    }
                    // Everything this process's workers made for `e` is in the side
                    // channel by now (sent before their capabilities for `e` went).
                    for (t, c) in side_rx.try_iter() {
                        held.entry(t).or_default().push(c);
                    }
                    let (watermark, events) = entry.remove();
                    // A closed receiver means the caller stopped listening.
                    for updates in held.remove(&e).unwrap_or_default() {
                        let _ = out_tx.send(Message::Updates {
                            epoch: Epoch(e),
                            updates,
                        });
                    }
                    let _ = out_tx.send(Message::EpochDone {
                        epoch: Epoch(e),
                        watermark,
                        events,
                        counts: counted.remove(&e).unwrap_or_default(),
                    });
                }
            }
        },
    )
}
