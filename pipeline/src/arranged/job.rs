//! The arranged graph as one job in a timely worker: an input of graph updates, the
//! arrangements, the slices, the derived spins and a probe, built by [`ArrangedJob::new`] (or
//! [`ArrangedJob::with_config`] for the derived spins).
//!
//! ```text
//!  send(e, updates)   ─► InputSession (time e) ─► arrange_graph ─► backward_slices
//!  watermark(e, w)    ─► InputSession (time e) ─────────┴────────► derived_spins
//!  close(e)           ─► inputs advance to e+1          │ every arrangement's batches
//!                                                       ▼
//!                                                     probe ─► pending(e) false: query as of e
//! ```
//!
//! With several workers every worker builds the job and closes every epoch (timely needs each
//! worker's input to advance); the updates may be sent on any one of them (the arrangements
//! exchange them by key). [`ArrangedJob::apply`] does both from the
//! [`Message`]s of the graph dataflow.

use super::{
    arrange_graph, backward_slices, derived_spins, Diff, GraphTraces, SliceConfig, SliceMember,
    Time,
};
use crate::dataflow::{Message, Update};
use crate::rules::RulesConfig;
use argus_schema::{Nanos, SegmentId, Spin, Tid};
use differential_dataflow::input::InputSession;
use timely::dataflow::operators::Probe;
use timely::dataflow::ProbeHandle;
use timely::worker::Worker;

/// What an [`ArrangedJob`] derives beside the base arrangements.
#[derive(Clone, Debug, Default)]
pub struct JobConfig {
    /// The backward slices, with this look-back; `None`: their trace stays empty.
    pub slices: Option<SliceConfig>,
    /// The spins derived from the segments ([`derived_spins`]), with these rules' thresholds;
    /// `None`: their trace stays empty.
    pub derived_spins: Option<RulesConfig>,
}

/// The arranged graph and its slices, fed by hand or from [`Message`]s, in one worker.
pub struct ArrangedJob {
    input: InputSession<Time, Update, Diff>,
    /// The watermark: one record, the latest one fed.
    watermark: InputSession<Time, Nanos, Diff>,
    last_watermark: Option<Nanos>,
    probe: ProbeHandle<Time>,
    traces: GraphTraces,
}

impl ArrangedJob {
    /// Builds the job's dataflow in `worker`, with the slices and without the derived spins.
    pub fn new(worker: &mut Worker, cfg: &SliceConfig) -> ArrangedJob {
        ArrangedJob::with_config(
            worker,
            &JobConfig {
                slices: Some(cfg.clone()),
                derived_spins: None,
            },
        )
    }

    /// The job without the backward slices (their trace stays empty): the five base
    /// arrangements only, for a caller that does not read slices.
    pub fn without_slices(worker: &mut Worker) -> ArrangedJob {
        ArrangedJob::with_config(worker, &JobConfig::default())
    }

    /// Builds the job's dataflow in `worker`, deriving what `cfg` asks for.
    pub fn with_config(worker: &mut Worker, cfg: &JobConfig) -> ArrangedJob {
        let mut input = InputSession::new();
        let mut watermark = InputSession::new();
        let probe = ProbeHandle::new();
        let traces = worker.dataflow_named("arranged", |scope| {
            let graph = arrange_graph(input.to_collection(scope));
            let watermark = watermark.to_collection(scope);
            let slices = match &cfg.slices {
                Some(cfg) => backward_slices(&graph, cfg),
                None => graph
                    .spins_by_thread
                    .clone()
                    .flat_map_ref(|_, _| None::<(SegmentId, SliceMember)>),
            }
            .arrange_by_key_named("arranged::slices_by_spin");
            let derived = match &cfg.derived_spins {
                Some(rules) => derived_spins(&graph, watermark, rules),
                None => watermark.flat_map(|_| None::<(Tid, Spin)>),
            }
            .arrange_by_key_named("arranged::derived_spins_by_thread");
            graph.segments_by_id.stream.clone().probe_with(&probe);
            graph.segments_by_thread.stream.clone().probe_with(&probe);
            graph.edges_by_dst.stream.clone().probe_with(&probe);
            graph.edges_by_src.stream.clone().probe_with(&probe);
            graph.spins_by_thread.stream.clone().probe_with(&probe);
            slices.stream.clone().probe_with(&probe);
            derived.stream.clone().probe_with(&probe);
            GraphTraces::new(&graph, &slices, &derived)
        });
        ArrangedJob {
            input,
            watermark,
            last_watermark: None,
            probe,
            traces,
        }
    }

    /// Adds `updates` at `epoch`, which must not be closed yet.
    pub fn send(&mut self, epoch: Time, updates: impl IntoIterator<Item = (Update, Diff)>) {
        if *self.input.time() < epoch {
            self.input.advance_to(epoch);
        }
        for (u, d) in updates {
            self.input.update(u, d);
        }
    }

    /// Sets the watermark as of `epoch` (not closed yet): every event up to it has been seen.
    /// The derived spins report the open spins it has passed the threshold of. Fed on one
    /// worker, as the updates; without it no such open spin is derived.
    pub fn watermark(&mut self, epoch: Time, watermark: Nanos) {
        if self.last_watermark == Some(watermark) {
            return;
        }
        if *self.watermark.time() < epoch {
            self.watermark.advance_to(epoch);
        }
        if let Some(old) = self.last_watermark.replace(watermark) {
            self.watermark.update(old, -1);
        }
        self.watermark.update(watermark, 1);
    }

    /// Closes `epoch` (and every one before it): no more updates at it.
    pub fn close(&mut self, epoch: Time) {
        self.input.advance_to(epoch + 1);
        self.input.flush();
        self.watermark.advance_to(epoch + 1);
        self.watermark.flush();
    }

    /// Sends a [`Message::Updates`]; sets the watermark of a [`Message::EpochDone`] and closes
    /// its epoch, which it returns.
    pub fn apply(&mut self, msg: Message) -> Option<Time> {
        match msg {
            Message::Updates { epoch, updates } => {
                self.send(epoch.0, updates);
                None
            }
            Message::EpochDone {
                epoch, watermark, ..
            } => {
                self.watermark(epoch.0, watermark);
                self.close(epoch.0);
                Some(epoch.0)
            }
        }
    }

    /// Whether `epoch` may still change here: step the worker while it is.
    pub fn pending(&self, epoch: Time) -> bool {
        self.probe.less_equal(&epoch)
    }

    /// The trace handles, to query or import.
    pub fn traces(&mut self) -> &mut GraphTraces {
        &mut self.traces
    }
}
