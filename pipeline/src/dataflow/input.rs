//! The input stage: the driver (worker 0 of process 0) reads each [`Batch`], routes its
//! events to keys ([`route`]), cuts them into one [`Part`] per owning worker (at least one
//! per worker and epoch: it carries the watermark), introduces them at the epoch and
//! advances the input to the next one.
//!
//! At most one epoch is in flight: the driver reads and routes epoch *e+1* while *e* is
//! still being processed, then steps the workers until *e* is done. With nothing in flight
//! it blocks on its input, so an epoch is finished, and reported, without waiting for the
//! next batch ([`next_batch`]).

use super::handoff::Chunks;
use super::updates::RulesAt;
use super::Batch;
use crate::rules::{route, Key, Role};
use argus_schema::{Event, Nanos};
use crossbeam_channel::Receiver;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use timely::dataflow::{InputHandleVec, ProbeHandle};

/// An event for a key: the `sub`-th of the keys [`route`] gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Routed {
    pub(super) key: Key,
    pub(super) role: Role,
    pub(super) sub: u8,
    pub(super) ev: Event,
}

/// The input record: a run of one worker's share of an epoch (the events routed to the keys
/// it owns, in `seq` order; at most [`super::handoff::CHUNK`]) and the epoch's watermark. The
/// driver partitions each batch itself, so the exchange moves one record per part rather
/// than copying every routed event into per-worker buffers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Part {
    pub(super) worker: u64,
    pub(super) watermark: Nanos,
    pub(super) items: Vec<Routed>,
}

/// The driver's record of each epoch it introduced (watermark, events), for the output
/// stage's `EpochDone` (both on worker 0).
pub(super) type Introduced = Rc<RefCell<BTreeMap<u64, (Nanos, usize)>>>;

/// The worker that owns `key`'s state, among `peers`.
fn owner(key: &Key, peers: u64) -> usize {
    (key.hash64() % peers) as usize
}

/// The next batch for the driver. While an epoch is still in flight the worker keeps
/// stepping (parking briefly when it has nothing to do) so that epoch finishes, and is
/// reported, without waiting for more input; with nothing in flight it blocks on `input`.
/// `None` once `input` is closed.
fn next_batch(
    input: &Receiver<Batch>,
    worker: &mut timely::worker::Worker,
    probe: &ProbeHandle<u64>,
    epoch: u64,
) -> Option<Batch> {
    loop {
        if !probe.less_than(&epoch) {
            return input.recv().ok();
        }
        match input.try_recv() {
            Ok(batch) => return Some(batch),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
            Err(crossbeam_channel::TryRecvError::Empty) => {
                worker.step_or_park(Some(std::time::Duration::from_micros(200)));
            }
        }
    }
}

/// Feeds every batch of `input` into the dataflow through `handle`, one epoch each, until
/// `input` is closed, then steps the worker until every epoch is done (and reported).
pub(super) fn drive(
    worker: &mut timely::worker::Worker,
    mut handle: InputHandleVec<u64, Part>,
    probe: &ProbeHandle<u64>,
    input: &Receiver<Batch>,
    rules: &RulesAt,
    introduced: &Introduced,
) {
    let peers = worker.peers() as u64;
    let mut epoch = 0u64;
    let mut routed = Vec::with_capacity(4);
    let mut parts: Vec<Chunks<Routed>> = (0..peers).map(|_| Chunks::default()).collect();
    while let Some(batch) = next_batch(input, worker, probe, epoch) {
        let n = batch.events.len();
        let rules = rules.at(epoch);
        for ev in batch.events {
            routed.clear();
            route(&ev, &rules, |key, role| routed.push((key, role)));
            if let Some((&(key, role), rest)) = routed.split_last() {
                for (sub, &(key, role)) in rest.iter().enumerate() {
                    parts[owner(&key, peers)].push(Routed {
                        key,
                        role,
                        sub: sub as u8,
                        ev: ev.clone(),
                    });
                }
                let sub = rest.len() as u8;
                parts[owner(&key, peers)].push(Routed { key, role, sub, ev });
            }
        }
        // Every worker gets at least one part, empty or not: it carries the watermark.
        for (w, chunks) in parts.iter_mut().enumerate() {
            for items in std::mem::take(chunks).into_containers() {
                handle.send(Part {
                    worker: w as u64,
                    watermark: batch.watermark,
                    items,
                });
            }
        }
        introduced.borrow_mut().insert(epoch, (batch.watermark, n));
        epoch += 1;
        handle.advance_to(epoch);
        // One epoch may still be in flight while the next batch is routed: the other
        // workers are not idle while this one reads and routes.
        let settled = epoch - 1;
        worker.step_while(|| probe.less_than(&settled));
    }
    // Input closed: the remaining epochs finish (and are reported) before returning.
    drop(handle);
    worker.step_while(|| !probe.done());
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(super) mod tests {
    use super::super::{run, DataflowConfig, Message};
    use super::*;
    use argus_schema::{Context, Cpu, Epoch, EventKind, Pid, TaskState, Tid};
    use std::time::Duration;

    /// Two threads switching on one CPU, `n` switches from `seq` (switch `i` at `i + 1` µs).
    pub(in crate::dataflow) fn switches(seq: u64, n: u64) -> Vec<Event> {
        (seq..seq + n)
            .map(|i| {
                let (prev, next) = if i % 2 == 0 { (10, 20) } else { (20, 10) };
                Event {
                    ts: Nanos(1_000 * (i + 1)),
                    seq: i,
                    cpu: Cpu(0),
                    pid: Pid(prev),
                    tid: Tid(prev),
                    ctx: Context::Task,
                    kind: EventKind::Switch {
                        prev: Tid(prev),
                        prev_state: TaskState::SLEEPING,
                        next: Tid(next),
                    },
                }
            })
            .collect()
    }

    /// A caller that sends the next batch only after the previous one is reported (the
    /// latency benchmark, a live job between batches) gets every `EpochDone`: an epoch in
    /// flight finishes without more input.
    #[test]
    fn each_epoch_is_reported_without_waiting_for_the_next_batch() {
        for workers in [1, 2] {
            let cfg = DataflowConfig {
                workers,
                ..DataflowConfig::default()
            };
            let (in_tx, in_rx) = crossbeam_channel::bounded::<Batch>(1);
            let (out_tx, out_rx) = crossbeam_channel::unbounded();
            let runner = std::thread::spawn(move || run(&cfg, in_rx, out_tx));
            let mut last_epoch = None;
            for b in 0..5u64 {
                let events = switches(b * 100, 100);
                let watermark = events.last().unwrap().ts;
                in_tx.send(Batch { events, watermark }).unwrap();
                let done = loop {
                    match out_rx.recv_timeout(Duration::from_secs(30)) {
                        Ok(Message::EpochDone { epoch, events, .. }) => break (epoch, events),
                        Ok(Message::Updates { epoch, .. }) => {
                            assert_eq!(epoch, Epoch(b), "an update of another epoch came first")
                        }
                        Err(e) => panic!("epoch {b} with {workers} workers not reported: {e}"),
                    }
                };
                assert_eq!(done, (Epoch(b), 100));
                last_epoch = Some(done.0);
            }
            drop(in_tx);
            runner.join().unwrap().unwrap();
            assert_eq!(last_epoch, Some(Epoch(4)));
        }
    }
}
