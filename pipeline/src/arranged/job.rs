//! The arranged graph as one job in a timely worker: an input of graph updates, the
//! arrangements, the slices and a probe, built by [`ArrangedJob::new`].
//!
//! ```text
//!  send(e, updates) ─► InputSession (time e) ─► arrange_graph ─► backward_slices
//!  close(e)         ─► input advances to e+1        │ every arrangement's batches
//!                                                   ▼
//!                                                 probe ─► pending(e) false: query as of e
//! ```
//!
//! With several workers every worker builds the job and closes every epoch (timely needs each
//! worker's input to advance); the updates may be sent on any one of them (the arrangements
//! exchange them by key). [`ArrangedJob::apply`] does both from the
//! [`Message`]s of the graph dataflow.

use super::{arrange_graph, backward_slices, Diff, GraphTraces, SliceConfig, SliceMember, Time};
use crate::dataflow::{Message, Update};
use argus_schema::SegmentId;
use differential_dataflow::input::InputSession;
use timely::dataflow::operators::Probe;
use timely::dataflow::ProbeHandle;
use timely::worker::Worker;

/// The arranged graph and its slices, fed by hand or from [`Message`]s, in one worker.
pub struct ArrangedJob {
    input: InputSession<Time, Update, Diff>,
    probe: ProbeHandle<Time>,
    traces: GraphTraces,
}

impl ArrangedJob {
    /// Builds the job's dataflow in `worker`.
    pub fn new(worker: &mut Worker, cfg: &SliceConfig) -> ArrangedJob {
        ArrangedJob::build(worker, Some(cfg))
    }

    /// The job without the backward slices (their trace stays empty): the five base
    /// arrangements only, for a caller that does not read slices.
    pub fn without_slices(worker: &mut Worker) -> ArrangedJob {
        ArrangedJob::build(worker, None)
    }

    fn build(worker: &mut Worker, cfg: Option<&SliceConfig>) -> ArrangedJob {
        let mut input = InputSession::new();
        let probe = ProbeHandle::new();
        let traces = worker.dataflow_named("arranged", |scope| {
            let graph = arrange_graph(input.to_collection(scope));
            let slices = match cfg {
                Some(cfg) => backward_slices(&graph, cfg),
                None => graph
                    .spins_by_thread
                    .clone()
                    .flat_map_ref(|_, _| None::<(SegmentId, SliceMember)>),
            }
            .arrange_by_key_named("arranged::slices_by_spin");
            graph.segments_by_id.stream.clone().probe_with(&probe);
            graph.segments_by_thread.stream.clone().probe_with(&probe);
            graph.edges_by_dst.stream.clone().probe_with(&probe);
            graph.edges_by_src.stream.clone().probe_with(&probe);
            graph.spins_by_thread.stream.clone().probe_with(&probe);
            slices.stream.clone().probe_with(&probe);
            GraphTraces::new(&graph, &slices)
        });
        ArrangedJob {
            input,
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

    /// Closes `epoch` (and every one before it): no more updates at it.
    pub fn close(&mut self, epoch: Time) {
        self.input.advance_to(epoch + 1);
        self.input.flush();
    }

    /// Sends a [`Message::Updates`], closes the epoch of a [`Message::EpochDone`]; returns the
    /// closed epoch.
    pub fn apply(&mut self, msg: Message) -> Option<Time> {
        match msg {
            Message::Updates { epoch, updates } => {
                self.send(epoch.0, updates);
                None
            }
            Message::EpochDone { epoch, .. } => {
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
