//! The timely dataflow, with differential semantics: every stream carries `(record, diff)`
//! changes at an epoch, and the output accumulates to the graph.
//!
//! ```text
//!  worker 0: batches ─► route ─► (key, role, event) into parts: one worker's events
//!                         │ (≤4096) + the epoch's watermark; ≥1 part per worker and epoch
//!                         │ exchange by the part's worker (the key hash picked it)
//!                         ▼
//!            "pipeline::keyed": per-key state machines (rules/), per epoch in order:
//!              final records (+1), mutable records diffed against what was emitted,
//!              open-segment spin deadlines crossed by the epoch's watermark;
//!              four outputs, so no record is copied to consumers that drop it
//!        ┌──────────────┬───────────────────┬────────────────────────────┐
//!     segments,      counters       Src, direct Dst, Pair          paired Dst
//!     thread order,     │             │ exchange by seq               │
//!     spins             │             ▼                               │
//!        │              │   "pipeline::join_seq": Src ⋈ Dst ─► edges  │
//!        │              │      Src ⋈ Pair ─► (fire, Src) ─────────────┤ exchange by fire
//!        │              │                                             ▼
//!        │              │                "pipeline::join_fire": (fire, Src) ⋈ Dst ─► edges
//!        └──────────────┴────────────┬────────────────────────────────┘
//!                                    ▼ to worker 0: through a side channel from the
//!                                      workers of its process (containers handed over as
//!                                      they are), by exchange from other processes
//!                                    ─► output channel
//! ```
//!
//! The joins (`dataflow/join.rs`) are hash joins over closed epochs that hold one compact entry per
//! `seq` and do work proportional to the epoch's changes, so an epoch costs the same
//! whatever the history behind it.
//!
//! Epoch closing: the driver (worker 0 of process 0) introduces epoch *e*'s events and its
//! watermark, advances the input to *e+1*, and reads the next batch while *e* is still being
//! processed (at most one epoch in flight). The output operator on worker 0 holds each
//! epoch's changes until both its inputs (graph changes, rule counters) have passed the
//! epoch, then sends them and [`Message::EpochDone`]: every update of *e* comes before
//! `EpochDone(e)`, and none of *e+1* before it. (Changes that come through the side channel
//! were sent while their operator held the epoch's capability, so they are all there once
//! the frontier has passed it.)
//! Records are never late here: ingest's merger releases an event only once every CPU's
//! stream has passed its timestamp (see `argus_ingest::merge`).

mod join;

use crate::rules::{route, Counter, Counts, Key, KeyState, Output, Role, RulesConfig};
use argus_schema::{CausalEdge, Epoch, Event, Nanos, Segment, Spin};
use crossbeam_channel::{Receiver, Sender};
use join::{Diff, SideA, SideB, StageA, StageB};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::{Capability, Concat, Probe};
use timely::dataflow::{InputHandleVec, ProbeHandle};

/// One epoch of input: events in `seq` order, complete up to `watermark`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// The events.
    pub events: Vec<Event>,
    /// Every event at or before this time has been delivered.
    pub watermark: Nanos,
}

/// A change to the graph.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Update {
    /// A segment.
    Segment(Segment),
    /// A causal edge.
    Edge(CausalEdge),
    /// A spinning vertex.
    Spin(Spin),
}

/// What the dataflow reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Updates at an epoch (several messages may carry one epoch).
    Updates {
        /// The epoch.
        epoch: Epoch,
        /// `(record, diff)`: +1 inserts, -1 retracts.
        updates: Vec<(Update, i64)>,
    },
    /// Every update of `epoch` has been sent.
    EpochDone {
        /// The epoch.
        epoch: Epoch,
        /// Its watermark.
        watermark: Nanos,
        /// Events in it.
        events: usize,
        /// What the rules split, pruned and culled in this epoch (add them up over the
        /// epochs for [`crate::stats::GraphStats`]).
        counts: Counts,
    },
}

/// Where the dataflow runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataflowConfig {
    /// The rules' parameters.
    pub rules: RulesConfig,
    /// Worker threads per process.
    pub workers: usize,
    /// Number of timely processes (1 = single process).
    pub processes: usize,
    /// This process's index.
    pub process_id: usize,
    /// `host:port` of every process, when `processes > 1`.
    pub hosts: Vec<String>,
}

impl Default for DataflowConfig {
    fn default() -> Self {
        DataflowConfig {
            rules: RulesConfig::default(),
            workers: 1,
            processes: 1,
            process_id: 0,
            hosts: Vec::new(),
        }
    }
}

/// Errors of the dataflow runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// timely could not start (bad host list, port in use, ...).
    #[error("cannot start the dataflow: {0}")]
    Start(String),
    /// A worker failed.
    #[error("dataflow worker failed: {0}")]
    Worker(String),
    /// A configuration value is out of range.
    #[error("bad dataflow configuration: {0}")]
    Config(String),
}

/// An event for a key: the `sub`-th of the keys [`route`] gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Routed {
    key: Key,
    role: Role,
    sub: u8,
    ev: Event,
}

/// The input record: a run of one worker's share of an epoch (the events routed to the keys
/// it owns, in `seq` order; at most [`CHUNK`]) and the epoch's watermark. The driver
/// partitions each batch itself, so the exchange moves one record per part rather than
/// copying every routed event into per-worker buffers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Part {
    worker: u64,
    watermark: Nanos,
    items: Vec<Routed>,
}

/// The worker that owns `key`'s state, among `peers`.
fn owner(key: &Key, peers: u64) -> usize {
    (key.hash64() % peers) as usize
}

fn timely_config(cfg: &DataflowConfig) -> Result<timely::Config, PipelineError> {
    use timely::CommunicationConfig;
    if cfg.workers == 0 || cfg.processes == 0 {
        return Err(PipelineError::Config(
            "workers and processes must be at least 1".into(),
        ));
    }
    let communication = if cfg.processes > 1 {
        if cfg.hosts.len() != cfg.processes {
            return Err(PipelineError::Config(format!(
                "{} processes need {} host addresses, got {}",
                cfg.processes,
                cfg.processes,
                cfg.hosts.len()
            )));
        }
        if cfg.process_id >= cfg.processes {
            return Err(PipelineError::Config(format!(
                "process id {} is not below {}",
                cfg.process_id, cfg.processes
            )));
        }
        CommunicationConfig::Cluster {
            threads: cfg.workers,
            process: cfg.process_id,
            addresses: cfg.hosts.clone(),
            report: false,
            zerocopy: false,
        }
    } else if cfg.workers > 1 {
        CommunicationConfig::Process(cfg.workers)
    } else {
        CommunicationConfig::Thread
    };
    Ok(timely::Config {
        communication,
        worker: timely::WorkerConfig::default(),
    })
}

/// Records in containers of at most [`CHUNK`] (the size of timely's own buffers): each
/// container is allocated once and the allocator recycles it, where one vector growing to an
/// epoch's size would be copied at each doubling and land on fresh pages.
struct Chunks<D> {
    full: Vec<Vec<D>>,
    cur: Vec<D>,
}

/// Records per container of [`Chunks`] and per [`Part`].
const CHUNK: usize = 4096;

impl<D> Default for Chunks<D> {
    fn default() -> Self {
        Chunks {
            full: Vec::new(),
            cur: Vec::new(),
        }
    }
}

impl<D> Chunks<D> {
    #[inline]
    fn push(&mut self, d: D) {
        if self.cur.len() == CHUNK {
            let full = std::mem::replace(&mut self.cur, Vec::with_capacity(CHUNK));
            self.full.push(full);
        }
        self.cur.push(d);
    }

    /// The containers, in push order.
    fn into_containers(self) -> impl Iterator<Item = Vec<D>> {
        self.full.into_iter().chain(std::iter::once(self.cur))
    }
}

/// The keyed operator's records, split by where they go next.
#[derive(Default)]
struct Outs {
    /// Graph records, to the output.
    updates: Chunks<(Update, Diff)>,
    /// Rule counters, to worker 0's tally.
    counts: Chunks<(Counter, Diff)>,
    /// Endpoints joined by `seq` ([`StageA`]).
    a: Chunks<(SideA, Diff)>,
    /// Targets of paired effects ([`StageB`]).
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

/// Epochs waiting for their input to be complete: capabilities (one per output) and data.
type Pending<C, D> = BTreeMap<u64, (C, Vec<D>)>;

/// A hash map with a fast fixed-seed hash: the keys are the trace's own ids (no untrusted
/// input chooses them to collide), and SipHash was a visible share of the per-event cost.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// An output port with its container builder.
type Port<D> = OutputBuilder<u64, CapacityContainerBuilder<Vec<(D, Diff)>>>;

/// Sends `data` at `cap` on `port` as one container (no copy when it stays on this worker).
fn ship<D: Clone + 'static>(port: &mut Port<D>, cap: &Capability<u64>, mut data: Vec<(D, Diff)>) {
    if !data.is_empty() {
        port.activate().session(cap).give_container(&mut data);
    }
}

/// Where an operator's graph changes go: through the side channel to worker 0 (the workers
/// of the process that writes the output, see [`run`]), else (`None`) on the operator's
/// stream, which the caller ships them on.
struct ToOutput(Option<Sender<(u64, Changes)>>);

/// A container of graph changes.
type Changes = Vec<(Update, Diff)>;

impl ToOutput {
    /// Sends `changes` of epoch `epoch` through the side channel when there is one (the
    /// caller must still hold the epoch's capability); otherwise hands them back.
    fn send(&self, epoch: u64, changes: Changes) -> Option<Changes> {
        match &self.0 {
            Some(tx) => {
                if !changes.is_empty() {
                    // A closed receiver means the output operator is gone (shutting down).
                    let _ = tx.send((epoch, changes));
                }
                None
            }
            None => Some(changes),
        }
    }
}

/// Sends every container of `data` at `cap` on `port`.
fn ship_all<D: Clone + 'static>(
    port: &mut Port<D>,
    cap: &Capability<u64>,
    data: Chunks<(D, Diff)>,
) {
    for c in data.into_containers() {
        ship(port, cap, c);
    }
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

/// Runs the dataflow until `input` is closed. In a cluster, only process 0 reads `input`
/// and writes `output`; other processes pass channels that are never used.
pub fn run(
    cfg: &DataflowConfig,
    input: Receiver<Batch>,
    output: Sender<Message>,
) -> Result<(), PipelineError> {
    let tcfg = timely_config(cfg)?;
    let rules = Arc::new(cfg.rules.clone());
    // The workers of the process that writes `output` hand their graph changes to worker 0
    // through this channel, tagged with the epoch, instead of a timely exchange (which
    // copied every ~170-byte update into worker 0's buffers one at a time). Each sends
    // while it still holds the epoch's capability, so by the time worker 0's frontier has
    // passed the epoch, all of it is in the channel. Other processes of a cluster use the
    // exchange.
    let (side_tx, side_rx) = crossbeam_channel::unbounded::<(u64, Changes)>();
    let local = cfg.process_id == 0;
    let guards = timely::execute(tcfg, move |worker| {
        let index = worker.index();
        let peers = worker.peers() as u64;
        let mut handle: InputHandleVec<u64, Part> = InputHandleVec::new();
        let probe = ProbeHandle::new();
        // The driver's record of each epoch it introduced (watermark, events), for the
        // output operator's `EpochDone` (both on worker 0).
        let epochs_in: Rc<RefCell<BTreeMap<u64, (Nanos, usize)>>> = Rc::default();
        let epochs_out = epochs_in.clone();
        let out_tx = output.clone();
        let side_rx = side_rx.clone();
        worker.dataflow::<u64, _, _>(|scope| {
            let routed = handle.to_stream(scope);

            // The keyed operator: state machines per key, four outputs.
            let mut kb = OperatorBuilder::new("pipeline::keyed".to_owned(), routed.scope());
            let mut kin = kb.new_input(routed, Exchange::new(|p: &Part| p.worker));
            let (p_upd, updates) = kb.new_output::<Vec<(Update, Diff)>>();
            let (p_cnt, counted) = kb.new_output::<Vec<(Counter, Diff)>>();
            let (p_a, side_a) = kb.new_output::<Vec<(SideA, Diff)>>();
            let (p_b, side_b) = kb.new_output::<Vec<(SideB, Diff)>>();
            let mut p_upd: Port<Update> = OutputBuilder::from(p_upd);
            let mut p_cnt: Port<Counter> = OutputBuilder::from(p_cnt);
            let mut p_a: Port<SideA> = OutputBuilder::from(p_a);
            let mut p_b: Port<SideB> = OutputBuilder::from(p_b);
            let rk = rules.clone();
            let to_out = ToOutput(local.then(|| side_tx.clone()));
            kb.build(move |initial| {
                drop(initial);
                let mut keyed = Keyed::new(rk);
                // Parts are queued as they arrive (no per-event copy).
                let mut queued: Pending<Vec<Capability<u64>>, Part> = BTreeMap::new();
                move |frontiers| {
                    kin.for_each(|time, data| {
                        queued
                            .entry(*time.time())
                            .or_insert_with(|| {
                                ((0..4).map(|p| time.retain(p)).collect(), Vec::new())
                            })
                            .1
                            .append(data);
                    });
                    while let Some(entry) = queued.first_entry() {
                        if frontiers[0].less_equal(entry.key()) {
                            break;
                        }
                        let (caps, items) = entry.remove();
                        let mut outs = Outs::default();
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

            // Join stage A, by seq: direct edges, and paired actors re-keyed by effect.
            let mut ab = OperatorBuilder::new("pipeline::join_seq".to_owned(), side_a.scope());
            let mut ain = ab.new_input(
                side_a,
                Exchange::new(|x: &(SideA, Diff)| join::spread(x.0.key())),
            );
            let (p_edges, edges_a) = ab.new_output::<Vec<(Update, Diff)>>();
            let (p_fires, fires) = ab.new_output::<Vec<(SideB, Diff)>>();
            let mut p_edges: Port<Update> = OutputBuilder::from(p_edges);
            let mut p_fires: Port<SideB> = OutputBuilder::from(p_fires);
            let ra = rules.clone();
            let to_out = ToOutput(local.then(|| side_tx.clone()));
            ab.build(move |initial| {
                drop(initial);
                let mut stage = StageA::new();
                let mut queued: Pending<Vec<Capability<u64>>, (SideA, Diff)> = BTreeMap::new();
                move |frontiers| {
                    ain.for_each(|time, data| {
                        queued
                            .entry(*time.time())
                            .or_insert_with(|| {
                                ((0..2).map(|p| time.retain(p)).collect(), Vec::new())
                            })
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
                            &ra,
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

            // Join stage B, by effect seq: paired edges.
            let rb = rules.clone();
            let to_out = ToOutput(local.then(|| side_tx.clone()));
            let edges_b = side_b
                .concat(fires)
                .unary_frontier::<CapacityContainerBuilder<Vec<(Update, Diff)>>, _, _, _>(
                    Exchange::new(|x: &(SideB, Diff)| join::spread(x.0.key())),
                    "pipeline::join_fire",
                    move |_cap, _info| {
                        let mut stage = StageB::new();
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
                                stage.epoch(delta, &rb, |e, d| edges.push((Update::Edge(e), d)));
                                if let Some(mut edges) = to_out.send(*cap.time(), edges) {
                                    if !edges.is_empty() {
                                        output.session(&cap).give_container(&mut edges);
                                    }
                                }
                            }
                        }
                    },
                );

            // Every graph change and rule counter goes to worker 0, which hands each epoch's
            // containers to the channel as they are (no copy), then its `EpochDone`, in epoch
            // order, once both inputs have passed the epoch.
            updates
                .concat(edges_a)
                .concat(edges_b)
                .binary_frontier::<_, CapacityContainerBuilder<Vec<()>>, _, _, _, _>(
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
                            let mut known = epochs_out.borrow_mut();
                            while let Some(entry) = known.first_entry() {
                                let e = *entry.key();
                                if uf.less_equal(&e) || cf.less_equal(&e) {
                                    break;
                                }
                                // Everything this process's workers made for `e` is in the
                                // side channel by now (sent before their capabilities for
                                // `e` went).
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
                .probe_with(&probe);
        });

        if index != 0 {
            // Only the driver introduces data; everybody else closes its input at once so
            // the frontier follows the driver's.
            drop(handle);
            return;
        }
        let mut epoch = 0u64;
        let mut routed = Vec::with_capacity(4);
        let mut parts: Vec<Chunks<Routed>> = (0..peers).map(|_| Chunks::default()).collect();
        while let Some(batch) = next_batch(&input, worker, &probe, epoch) {
            let n = batch.events.len();
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
            epochs_in.borrow_mut().insert(epoch, (batch.watermark, n));
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
    })
    .map_err(PipelineError::Start)?;
    for r in guards.join() {
        r.map_err(PipelineError::Worker)?;
    }
    Ok(())
}

/// The keyed operator's state on one worker.
struct Keyed {
    rules: Arc<RulesConfig>,
    /// Each key's state machine, by index: a run of one key's events (a thread's records
    /// come in runs) finds its state without hashing the key again.
    states: Vec<KeyState>,
    index: FastMap<Key, usize>,
    emitted: FastMap<Key, Vec<Output>>,
    deadlines: BTreeSet<(Nanos, Key)>,
    deadline_of: FastMap<Key, Nanos>,
    /// Reused buffers.
    finals: Vec<Output>,
    now: Vec<Output>,
}

impl Keyed {
    fn new(rules: Arc<RulesConfig>) -> Keyed {
        Keyed {
            rules,
            states: Vec::new(),
            index: FastMap::default(),
            emitted: FastMap::default(),
            deadlines: BTreeSet::new(),
            deadline_of: FastMap::default(),
            finals: Vec::new(),
            now: Vec::new(),
        }
    }

    /// The state of `key`, if it has one.
    fn state(&self, key: &Key) -> Option<&KeyState> {
        self.index.get(key).and_then(|&at| self.states.get(at))
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
                    let at = *self.index.entry(*key).or_insert_with(|| {
                        states.push(KeyState::new(*key));
                        states.len() - 1
                    });
                    last = Some((*key, at));
                    at
                }
            };
            if let Some(state) = self.states.get_mut(at) {
                state.on_event(ev, *role, &self.rules, &mut finals);
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
            for o in &before {
                if !now.contains(o) {
                    outs.push(o.clone(), -1);
                }
            }
            for o in &now {
                if !before.contains(o) {
                    outs.push(o.clone(), 1);
                }
            }
            if !now.is_empty() {
                // The old list becomes the next key's scratch buffer.
                self.emitted
                    .insert(key, std::mem::replace(&mut now, before));
            }
        }
        self.now = now;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::{Context, Cpu, EventKind, Pid, TaskState, Tid};
    use std::time::Duration;

    /// Two threads switching on one CPU, `n` switches from `seq`.
    fn switches(seq: u64, n: u64) -> Vec<Event> {
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
