//! The timely dataflow, with differential semantics: every stream carries `(record, diff)`
//! changes at an epoch, and the output accumulates to the graph.
//!
//! One function per stage, each in its own file; [`run`] wires them:
//!
//! ```text
//!  worker 0: batches ─► input.rs: route ─► (key, role, event) into parts: one worker's
//!                         │ events (≤4096) + the epoch's watermark; ≥1 part per worker
//!                         │ and epoch; exchange by the part's worker (the key hash picked it)
//!                         ▼
//!            keyed.rs "pipeline::keyed": per-key state machines (rules/), per epoch in
//!              order: final records (+1), mutable records diffed against what was
//!              emitted, open-segment spin deadlines crossed by the epoch's watermark;
//!              four outputs, so no record is copied to consumers that drop it
//!        ┌──────────────┬───────────────────┬────────────────────────────┐
//!     segments,      counters       Src, direct Dst, Pair          paired Dst
//!     thread order,     │             │ exchange by seq               │
//!     spins             │             ▼                               │
//!        │              │   join_seq.rs "pipeline::join_seq":         │
//!        │              │      Src ⋈ Dst ─► edges                     │
//!        │              │      Src ⋈ Pair ─► (fire, Src) ─────────────┤ exchange by fire
//!        │              │                                             ▼
//!        │              │         join_fire.rs "pipeline::join_fire": (fire, Src) ⋈ Dst
//!        │              │                                              ─► edges
//!        └──────────────┴────────────┬────────────────────────────────┘
//!                                    ▼ to worker 0: through a side channel from the
//!                                      workers of its process (containers handed over as
//!                                      they are), by exchange from other processes
//!                          output.rs "pipeline::output" ─► output channel
//! ```
//!
//! Beside the stages: `join.rs` holds what the two joins share (their inputs, the
//! multisets by key); `handoff.rs` how stages hand records on (containers of ≤4096, ports,
//! the side channel); `epochs.rs` [`collect_epochs`], the graph after every epoch for the
//! oracle tests.
//!
//! The joins are hash joins over closed epochs that hold one compact entry per `seq` and do
//! work proportional to the epoch's changes, so an epoch costs the same whatever the
//! history behind it.
//!
//! A continuous job runs one dataflow forever: with [`DataflowConfig::forget`] the keyed
//! stage and the joins forget state older than a horizon (`keyed.rs`, `join.rs`), so their
//! memory follows the recent trace, not all of it.
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

mod epochs;
mod handoff;
mod input;
mod join;
mod join_fire;
mod join_seq;
mod keyed;
mod output;
mod updates;

pub use epochs::{by_epoch, collect_epochs, ByEpoch, EpochUpdates};
pub use updates::RuleUpdates;

use crate::rules::{Counts, RulesConfig};
use argus_schema::{CausalEdge, EndCause, Epoch, Event, Nanos, Segment, Spin};
use crossbeam_channel::{Receiver, Sender};
use handoff::{Changes, ToOutput};
use input::{Introduced, Part};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use timely::dataflow::operators::{Concat, Probe};
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

/// When a record of the graph is over for good: what a window keyed by time (retention, the
/// live graph's layers) goes by. `None` while the record is open (it may still change).
pub trait Timed {
    /// The end time, `None` while open.
    fn end_time(&self) -> Option<Nanos>;
}

impl Timed for Segment {
    fn end_time(&self) -> Option<Nanos> {
        (self.end != EndCause::Open).then_some(self.end_ns)
    }
}

impl Timed for CausalEdge {
    fn end_time(&self) -> Option<Nanos> {
        Some(self.ts)
    }
}

impl Timed for Spin {
    fn end_time(&self) -> Option<Nanos> {
        (!self.open).then_some(self.end_ns)
    }
}

impl Timed for Update {
    fn end_time(&self) -> Option<Nanos> {
        match self {
            Update::Segment(s) => s.end_time(),
            Update::Edge(e) => e.end_time(),
            Update::Spin(s) => s.end_time(),
        }
    }
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
    /// Forget rule state idle for longer than this, by the data's own time (a continuous
    /// job); `None` keeps everything (a build, the oracle).
    ///
    /// A dataflow that runs forever must forget, or its memory grows with the trace. With
    /// `Some(F)`: the keyed stage drops the machines of keys idle for longer than F that are
    /// done with (an exited thread, an object, a lock file, a socket; never a live thread,
    /// nor a key with a mutable record or a spin deadline; `keyed.rs`), and the joins drop
    /// their entries for events older than F before the latest they saw (`join.rs`). Records
    /// already emitted stay; what can differ from a dataflow that keeps everything is only
    /// older than `watermark − F`: edges whose action is older (an old action paired with a
    /// later effect is not linked, a late change to an old edge is not applied). The job
    /// must drop records older than a window shorter than F, and feed events in time order
    /// numbered as released (`seq` increasing with `ts`), as ingest's merger does.
    pub forget: Option<Nanos>,
    /// A shorter horizon the job may set while the dataflow runs (a memory budget): the
    /// stages forget after the lesser of it and `forget`. Without `forget` it does nothing.
    pub forget_limit: ForgetLimit,
}

/// A horizon shared with the running dataflow ([`DataflowConfig::forget_limit`]), read at
/// every sweep; `u64::MAX` (the default) limits nothing. Two are equal when they are the
/// same handle.
#[derive(Clone, Debug)]
pub struct ForgetLimit(Arc<AtomicU64>);

impl Default for ForgetLimit {
    fn default() -> Self {
        ForgetLimit(Arc::new(AtomicU64::new(u64::MAX)))
    }
}

impl ForgetLimit {
    /// Forget after at most `after` from now on (`None`: only after `forget`).
    pub fn set(&self, after: Option<Nanos>) {
        self.0
            .store(after.map_or(u64::MAX, |a| a.0), Ordering::Relaxed);
    }

    /// The horizon `forget` comes to under this limit.
    pub fn apply(&self, forget: Nanos) -> Nanos {
        Nanos(forget.0.min(self.0.load(Ordering::Relaxed)))
    }
}

impl PartialEq for ForgetLimit {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ForgetLimit {}

impl Default for DataflowConfig {
    fn default() -> Self {
        DataflowConfig {
            rules: RulesConfig::default(),
            workers: 1,
            processes: 1,
            process_id: 0,
            hosts: Vec::new(),
            forget: None,
            forget_limit: ForgetLimit::default(),
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

/// A difference in multiplicity (+1 inserts, -1 retracts).
type Diff = i64;

/// A collection, as differential dataflow calls it: a stream of `(record, diff)` changes
/// at epochs. Every stage takes and returns these.
type Collection<'s, D> = timely::dataflow::StreamVec<'s, u64, (D, Diff)>;

/// A hash map with a fast fixed-seed hash: the keys are the trace's own ids (no untrusted
/// input chooses them to collide), and SipHash was a visible share of the per-event cost.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

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
    run_with_updates(cfg, RuleUpdates::new(), input, output)
}

/// [`run`], with rules that may change while it runs: each epoch runs with the latest of
/// `updates` at or before it, else `cfg.rules` ([`RuleUpdates`]; a cluster's other
/// processes never see updates, so only a single-process dataflow should get any).
pub fn run_with_updates(
    cfg: &DataflowConfig,
    updates: RuleUpdates,
    input: Receiver<Batch>,
    output: Sender<Message>,
) -> Result<(), PipelineError> {
    let tcfg = timely_config(cfg)?;
    let rules = updates::RulesAt::new(cfg.rules.clone(), updates);
    // The workers of the process that writes `output` hand their graph changes to worker 0
    // through this channel, tagged with the epoch, instead of a timely exchange (which
    // copied every ~170-byte update into worker 0's buffers one at a time). Each sends
    // while it still holds the epoch's capability, so by the time worker 0's frontier has
    // passed the epoch, all of it is in the channel. Other processes of a cluster use the
    // exchange.
    let (side_tx, side_rx) = crossbeam_channel::unbounded::<(u64, Changes)>();
    let local = cfg.process_id == 0;
    let forget = cfg.forget;
    let limit = cfg.forget_limit.clone();
    let guards = timely::execute(tcfg, move |worker| {
        let index = worker.index();
        let mut handle: InputHandleVec<u64, Part> = InputHandleVec::new();
        let probe = ProbeHandle::new();
        let introduced: Introduced = Introduced::default();
        let to_out = || ToOutput(local.then(|| side_tx.clone()));
        worker.dataflow::<u64, _, _>(|scope| {
            let parts = handle.to_stream(scope);
            let forget = (forget, &limit);
            let keyed = keyed::keyed(parts, rules.clone(), forget, to_out());
            let (edges_a, fires) =
                join_seq::join_seq(keyed.side_a, rules.clone(), forget, to_out());
            let edges_b =
                join_fire::join_fire(keyed.side_b.concat(fires), rules.clone(), forget, to_out());
            output::output(
                keyed.updates.concat(edges_a).concat(edges_b),
                keyed.counted,
                introduced.clone(),
                side_rx.clone(),
                output.clone(),
            )
            .probe_with(&probe);
        });
        if index != 0 {
            // Only the driver introduces data; everybody else closes its input at once so
            // the frontier follows the driver's.
            drop(handle);
            return;
        }
        input::drive(worker, handle, &probe, &input, &rules, &introduced);
    })
    .map_err(PipelineError::Start)?;
    for r in guards.join() {
        r.map_err(PipelineError::Worker)?;
    }
    Ok(())
}
