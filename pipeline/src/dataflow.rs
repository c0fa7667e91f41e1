//! The timely/differential dataflow.
//!
//! ```text
//!  worker 0: batches ─► route ─► (key, role, event) + one Tick per worker
//!                         │ exchange by key hash (ticks by worker index)
//!                         ▼
//!            "pipeline::keyed": per-key state machines (rules.rs), per epoch in order:
//!              final records (+1), mutable records diffed against what was emitted,
//!              open-segment spin deadlines crossed by the epoch's watermark
//!                         │ differential collection of Output
//!        ┌────────────────┼─────────────────────┬───────────────┐
//!     segments,        Src ⋈ Dst on seq      Src ⋈ Pair ⋈ Dst    spins,
//!     thread order     (wake-up, fork,       (timers, work,      rule counters
//!                       signal)               pipes)
//!        └────────────────┴──────────┬──────────┴───────────────┘
//!                                    ▼ exchange to worker 0 ─► output channel
//! ```
//!
//! Epoch closing: the driver (worker 0 of process 0) introduces epoch *e*'s events and its
//! watermark, advances the input to *e+1*, and steps until the probe passes *e*; only then
//! does it send [`Message::EpochDone`]. All updates for *e* have been sent before that.
//! Records are never late here: ingest's merger releases an event only once every CPU's
//! stream has passed its timestamp (see `argus_ingest::merge`).

use crate::rules::{route, wake_edge, Counter, Counts, Key, KeyState, Output, Role, RulesConfig};
use argus_schema::{CausalEdge, Epoch, Event, Nanos, Segment, Spin};
use crossbeam_channel::{Receiver, Sender};
use differential_dataflow::collection::AsCollection;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::Exchange as _;
use timely::dataflow::operators::{InspectCore, Probe};
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

/// An input record: an event for a key, or a watermark tick for one worker.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Routed {
    Ev {
        key: Key,
        role: Role,
        sub: u8,
        ev: Event,
    },
    Tick {
        worker: u64,
        watermark: Nanos,
    },
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

/// Runs the dataflow until `input` is closed. In a cluster, only process 0 reads `input`
/// and writes `output`; other processes pass channels that are never used.
pub fn run(
    cfg: &DataflowConfig,
    input: Receiver<Batch>,
    output: Sender<Message>,
) -> Result<(), PipelineError> {
    let tcfg = timely_config(cfg)?;
    let rules = Arc::new(cfg.rules.clone());
    let guards = timely::execute(tcfg, move |worker| {
        let index = worker.index();
        let peers = worker.peers() as u64;
        let mut handle: InputHandleVec<u64, Routed> = InputHandleVec::new();
        let probe = ProbeHandle::new();
        // Rule counters reach worker 0 here; the driver (same thread) reports them per epoch.
        let counts_tx: Rc<RefCell<Counts>> = Rc::new(RefCell::new(Counts::default()));
        let counts_rx = counts_tx.clone();
        let out_tx = output.clone();
        worker.dataflow::<u64, _, _>(|scope| {
            let rk = rules.clone();
            let outputs = handle
                .to_stream(scope)
                .unary_frontier(
                    Exchange::new(|r: &Routed| match r {
                        Routed::Ev { key, .. } => key.hash64(),
                        Routed::Tick { worker, .. } => *worker,
                    }),
                    "pipeline::keyed",
                    move |_cap, _info| {
                        let mut keyed = Keyed::new(rk);
                        let mut queued: BTreeMap<
                            u64,
                            (timely::dataflow::operators::Capability<u64>, Vec<Routed>),
                        > = BTreeMap::new();
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
                                let (cap, items) = entry.remove();
                                let updates = keyed.epoch(items);
                                let t = *cap.time();
                                output
                                    .session(&cap)
                                    .give_iterator(updates.into_iter().map(|(o, d)| (o, t, d)));
                            }
                        }
                    },
                )
                .as_collection();

            let segments = outputs.clone().flat_map(|o| match o {
                Output::Segment(s) => Some(Update::Segment(s)),
                Output::Edge(e) => Some(Update::Edge(e)),
                Output::Spin(s) => Some(Update::Spin(s)),
                _ => None,
            });
            let counted = counts_tx.clone();
            outputs
                .clone()
                .flat_map(|o| match o {
                    Output::Count(c) => Some(c),
                    _ => None,
                })
                .inner
                .exchange(|_| 0)
                .inspect_container(move |event| {
                    if let Ok((_time, data)) = event {
                        let mut acc = counted.borrow_mut();
                        for (c, _t, d) in data.iter() {
                            acc.add(*c, *d as i64);
                        }
                    }
                })
                .probe_with(&probe);
            let srcs = outputs.clone().flat_map(|o| match o {
                Output::Src(s) => Some((s.seq, s)),
                _ => None,
            });
            let direct = outputs.clone().flat_map(|o| match o {
                Output::Dst(d) if !d.paired => Some((d.seq, d)),
                _ => None,
            });
            let paired = outputs.clone().flat_map(|o| match o {
                Output::Dst(d) if d.paired => Some((d.seq, d)),
                _ => None,
            });
            let pairs = outputs.flat_map(|o| match o {
                Output::Pair(p) => Some((p.arm, p.fire)),
                _ => None,
            });
            let r1 = rules.clone();
            let wake_edges = srcs
                .clone()
                .join_map(direct, move |_seq, s, d| Update::Edge(wake_edge(s, d, &r1)));
            let r2 = rules.clone();
            let paired_edges = srcs
                .join_map(pairs, |_arm, s, fire| (*fire, s.clone()))
                .join_map(paired, move |_fire, s, d| {
                    Update::Edge(wake_edge(s, d, &r2))
                });
            segments
                .concat(wake_edges)
                .concat(paired_edges)
                .inner
                .exchange(|_| 0)
                .inspect_container(move |event| {
                    if let Ok((time, data)) = event {
                        if !data.is_empty() {
                            let updates: Vec<(Update, i64)> = data
                                .iter()
                                .map(|(u, _t, d)| (u.clone(), *d as i64))
                                .collect();
                            // A closed receiver means the caller stopped listening: drop.
                            let _ = out_tx.send(Message::Updates {
                                epoch: Epoch(*time),
                                updates,
                            });
                        }
                    }
                })
                .probe_with(&probe);
        });

        if index != 0 {
            // Only the driver introduces data; everybody else closes its input at once so
            // the frontier follows the driver's.
            drop(handle);
            return;
        }
        let mut epoch = 0u64;
        while let Ok(batch) = input.recv() {
            let n = batch.events.len();
            for ev in batch.events {
                let mut sub = 0u8;
                let mut routed = Vec::with_capacity(2);
                route(&ev, &rules, |key, role| {
                    routed.push((key, role, sub));
                    sub = sub.wrapping_add(1);
                });
                if let Some((&(key, role, sub), rest)) = routed.split_last() {
                    for &(key, role, sub) in rest {
                        handle.send(Routed::Ev {
                            key,
                            role,
                            sub,
                            ev: ev.clone(),
                        });
                    }
                    handle.send(Routed::Ev { key, role, sub, ev });
                }
            }
            for w in 0..peers {
                handle.send(Routed::Tick {
                    worker: w,
                    watermark: batch.watermark,
                });
            }
            epoch += 1;
            handle.advance_to(epoch);
            worker.step_while(|| probe.less_than(&epoch));
            let counts = counts_rx.take();
            let _ = output.send(Message::EpochDone {
                epoch: Epoch(epoch - 1),
                watermark: batch.watermark,
                events: n,
                counts,
            });
        }
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
    keys: HashMap<Key, KeyState>,
    emitted: HashMap<Key, Vec<Output>>,
    deadlines: BTreeSet<(Nanos, Key)>,
    deadline_of: HashMap<Key, Nanos>,
}

impl Keyed {
    fn new(rules: Arc<RulesConfig>) -> Keyed {
        Keyed {
            rules,
            keys: HashMap::new(),
            emitted: HashMap::new(),
            deadlines: BTreeSet::new(),
            deadline_of: HashMap::new(),
        }
    }

    /// Processes one closed epoch's items; returns the updates at that epoch.
    fn epoch(&mut self, mut items: Vec<Routed>) -> Vec<(Output, isize)> {
        let mut watermark = Nanos(0);
        items.retain(|r| match r {
            Routed::Tick { watermark: w, .. } => {
                watermark = watermark.max(*w);
                false
            }
            Routed::Ev { .. } => true,
        });
        items.sort_unstable_by_key(|r| match r {
            Routed::Ev { ev, sub, .. } => (ev.seq, *sub),
            Routed::Tick { .. } => (u64::MAX, 0),
        });
        let mut finals = Vec::new();
        let mut touched: HashSet<Key> = HashSet::new();
        for r in &items {
            if let Routed::Ev { key, role, ev, .. } = r {
                self.keys
                    .entry(*key)
                    .or_insert_with(|| KeyState::new(*key))
                    .on_event(ev, *role, &self.rules, &mut finals);
                touched.insert(*key);
            }
        }
        // Re-arm the spin deadlines of touched keys, then fire those the watermark passed.
        for key in &touched {
            if let Some(old) = self.deadline_of.remove(key) {
                self.deadlines.remove(&(old, *key));
            }
            if let Some(d) = self
                .keys
                .get(key)
                .and_then(|s| s.spin_deadline(&self.rules))
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
        }
        // Counters are summed: one update per counter and epoch.
        let mut counts: BTreeMap<Counter, isize> = BTreeMap::new();
        let mut updates: Vec<(Output, isize)> = Vec::with_capacity(finals.len());
        for o in finals {
            match o {
                Output::Count(c) => *counts.entry(c).or_insert(0) += 1,
                o => updates.push((o, 1)),
            }
        }
        updates.extend(counts.into_iter().map(|(c, n)| (Output::Count(c), n)));
        let mut now = Vec::new();
        for key in touched {
            now.clear();
            if let Some(s) = self.keys.get(&key) {
                s.mutable(watermark, &self.rules, &mut now);
            }
            let before = self.emitted.remove(&key).unwrap_or_default();
            for o in &before {
                if !now.contains(o) {
                    updates.push((o.clone(), -1));
                }
            }
            for o in &now {
                if !before.contains(o) {
                    updates.push((o.clone(), 1));
                }
            }
            if !now.is_empty() {
                self.emitted.insert(key, now.clone());
            }
        }
        updates
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
