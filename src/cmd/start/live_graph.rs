//! Each generation's live graph: its dataflow's output kept as differential arrangements
//! ([`ArrangedJob`]: segments, edges, spins and every hang's backward slice) in a timely
//! worker of its own, which answers the query server's reads as of any recent epoch.
//!
//! ```text
//!  dataflow g ─► collector g (GraphSink: snapshots) ──clone of each Message──►
//!     argus-graph-g{id}: ArrangedJob ─ step until the epoch is done, compact, publish
//!        ▲ GraphRequest (fetch needs, spins) as of epoch e ─┘ reply
//!  query server (a thread per client) ─┘
//! ```
//!
//! **One worker per generation**, not one for the job: a generation's arrangements are
//! built from its own messages as they come, so the oldest generation's live graph holds
//! exactly what its snapshots hold (the same retention, `--retain`), and when it is dropped
//! the next one already holds its own history. A single worker fed by the oldest generation
//! would have to be rebuilt from the next generation's whole graph at every rotation. The
//! cost is the arrangements of the younger generation while two run (as the collectors).
//!
//! **Reads are served on the worker's thread** (a trace handle is not `Send`), between
//! epochs: the worker applies an epoch, steps until its probe passes it, then answers what
//! waits. A read costs a few seeks per need (`src/live/fetch.rs`); the diagnosis itself runs
//! on the client's thread.
//!
//! **Compaction.** After each epoch the trace handles are compacted to the epoch
//! [`QUERY_EPOCHS`] back: older epochs' distinctions are merged away (memory stays that of
//! the retained graph), and a read may ask for any of the last `QUERY_EPOCHS` epochs (5 s of
//! 200 ms ticks): enough for a client's rounds to read one epoch throughout, and for a
//! snapshot's epoch to be asked while the snapshot is being written.

use crate::live::fetch;
use anyhow::Result;
use argus_diagnose::{Need, Parts};
use argus_pipeline::arranged::{ArrangedJob, QueryError, SliceConfig};
use argus_pipeline::dataflow::Message;
use argus_schema::{EndCause, Nanos, Spin};
use crossbeam_channel::{select, Receiver, Sender};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::sync::lock;

/// Epochs a read may ask for, counting back from the last one done.
pub(crate) const QUERY_EPOCHS: u64 = 25;

/// Updates copied to a live graph and not applied yet beyond which it is given up (a few
/// hundred MB): a worker that cannot keep up with the dataflow must not hold the job back
/// (a blocking copy would) nor grow without bound. Its generation then has no live graph;
/// the next one gets a new one.
pub(crate) const LIVE_BACKLOG: usize = 2_000_000;

/// A read of a generation's live graph, as of its local epoch `as_of`.
pub(crate) enum GraphRequest {
    /// Answer needs ([`fetch::fetch`]).
    Fetch {
        as_of: u64,
        needs: Vec<Need>,
        reply: Sender<Result<Parts, QueryError>>,
    },
    /// Every spinning vertex.
    Spins {
        as_of: u64,
        reply: Sender<Result<Vec<Spin>, QueryError>>,
    },
}

/// Where a generation's live graph stands: the epochs it can be read at.
#[derive(Clone, Debug, Default)]
pub(crate) struct GraphStatus {
    /// `(local epoch, watermark)` of the epochs that can be read, oldest first.
    pub(crate) epochs: VecDeque<(u64, Nanos)>,
    /// Net records: segments, open segments, edges, spins.
    pub(crate) segments: i64,
    pub(crate) open_segments: i64,
    pub(crate) edges: i64,
    pub(crate) spins: i64,
    /// The worker has ended (its generation stopped, or it fell behind).
    pub(crate) ended: bool,
    /// It was given up: more than [`LIVE_BACKLOG`] updates waited for it.
    pub(crate) fell_behind: bool,
}

/// The collector's end of a live graph: copies each message to it, and gives it up when
/// it falls [`LIVE_BACKLOG`] updates behind.
pub(crate) struct Forward {
    tx: Sender<Message>,
    queued: Arc<AtomicUsize>,
    status: Arc<Mutex<GraphStatus>>,
}

impl Forward {
    /// Copies `m` to the live graph; `false` once it has ended or is given up (drop this
    /// then: the worker ends when its input closes).
    pub(crate) fn send(&self, m: &Message) -> bool {
        let n = match m {
            Message::Updates { updates, .. } => updates.len(),
            Message::EpochDone { .. } => 0,
        };
        if self.queued.fetch_add(n, Ordering::Relaxed) + n > LIVE_BACKLOG {
            lock(&self.status).fell_behind = true;
            tracing::warn!(
                "the live graph fell {LIVE_BACKLOG} updates behind the dataflow: this generation answers no live queries"
            );
            return false;
        }
        self.tx.send(m.clone()).is_ok()
    }
}

/// The handle the query server holds on a generation's live graph.
#[derive(Clone)]
pub(crate) struct LiveGraph {
    pub(crate) generation: u64,
    /// The global epoch of the generation's local epoch 0.
    pub(crate) first_epoch: u64,
    /// When the generation's window starts.
    pub(crate) start_ns: Nanos,
    pub(crate) requests: Sender<GraphRequest>,
    pub(crate) status: Arc<Mutex<GraphStatus>>,
    /// Set when the generation stops: the worker ends without applying what is left.
    pub(crate) stop: Arc<AtomicBool>,
}

impl LiveGraph {
    /// Starts the worker of generation `generation`; returns the handle, the collector's
    /// [`Forward`] that feeds it, and the thread.
    pub(crate) fn start(
        generation: u64,
        first_epoch: u64,
        start_ns: Nanos,
        slices: Option<SliceConfig>,
    ) -> Result<(LiveGraph, Forward, JoinHandle<()>)> {
        let (tx, messages) = crossbeam_channel::unbounded::<Message>();
        let queued = Arc::new(AtomicUsize::new(0));
        let (requests, rx) = crossbeam_channel::unbounded::<GraphRequest>();
        let status = Arc::new(Mutex::new(GraphStatus::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, stop2, queued2) = (status.clone(), stop.clone(), queued.clone());
        let thread = std::thread::Builder::new()
            .name(format!("argus-graph-g{generation}"))
            .spawn(move || serve(messages, queued2, rx, st, stop2, slices))?;
        let forward = Forward {
            tx,
            queued,
            status: status.clone(),
        };
        Ok((
            LiveGraph {
                generation,
                first_epoch,
                start_ns,
                requests,
                status,
                stop,
            },
            forward,
            thread,
        ))
    }

    /// The readable epochs, with the counts.
    pub(crate) fn status(&self) -> GraphStatus {
        lock(&self.status).clone()
    }

    /// Reads `needs` as of local epoch `as_of`.
    pub(crate) fn fetch(&self, as_of: u64, needs: Vec<Need>) -> Result<Parts, ReadError> {
        let (reply, rx) = crossbeam_channel::bounded(1);
        self.requests
            .send(GraphRequest::Fetch {
                as_of,
                needs,
                reply,
            })
            .map_err(|_| ReadError::Gone)?;
        rx.recv()
            .map_err(|_| ReadError::Gone)?
            .map_err(ReadError::Query)
    }

    /// Every spin as of local epoch `as_of`.
    pub(crate) fn spins(&self, as_of: u64) -> Result<Vec<Spin>, ReadError> {
        let (reply, rx) = crossbeam_channel::bounded(1);
        self.requests
            .send(GraphRequest::Spins { as_of, reply })
            .map_err(|_| ReadError::Gone)?;
        rx.recv()
            .map_err(|_| ReadError::Gone)?
            .map_err(ReadError::Query)
    }
}

/// Why a read of a live graph failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The generation has stopped.
    #[error("the generation's live graph has stopped (the job rotated or is stopping)")]
    Gone,
    /// The epoch cannot be read.
    #[error("{0}")]
    Query(QueryError),
}

/// The worker: applies the messages, epoch by epoch, and answers reads between them.
fn serve(
    messages: Receiver<Message>,
    queued: Arc<AtomicUsize>,
    requests: Receiver<GraphRequest>,
    status: Arc<Mutex<GraphStatus>>,
    stop: Arc<AtomicBool>,
    slices: Option<SliceConfig>,
) {
    timely::execute_directly(move |worker| {
        let mut job = match &slices {
            Some(cfg) => ArrangedJob::new(worker, cfg),
            None => ArrangedJob::without_slices(worker),
        };
        let mut counts = GraphStatus::default();
        let never = crossbeam_channel::never();
        let mut open_requests = Some(requests);
        while !stop.load(Ordering::Relaxed) {
            let req_rx = open_requests.as_ref().unwrap_or(&never);
            select! {
                recv(messages) -> msg => match msg {
                    Ok(Message::Updates { epoch, updates }) => {
                        queued.fetch_sub(updates.len(), Ordering::Relaxed);
                        for (u, d) in &updates {
                            match u {
                                argus_pipeline::dataflow::Update::Segment(s) => {
                                    counts.segments += d;
                                    if s.end == EndCause::Open {
                                        counts.open_segments += d;
                                    }
                                }
                                argus_pipeline::dataflow::Update::Edge(_) => counts.edges += d,
                                argus_pipeline::dataflow::Update::Spin(_) => counts.spins += d,
                            }
                        }
                        job.send(epoch.0, updates);
                    }
                    Ok(Message::EpochDone { epoch, watermark, .. }) => {
                        let e = epoch.0;
                        let t0 = std::time::Instant::now();
                        job.close(e);
                        worker.step_while(|| job.pending(e));
                        tracing::debug!(epoch = e, ms = t0.elapsed().as_secs_f64() * 1e3, "live graph epoch");
                        let since = e.saturating_sub(QUERY_EPOCHS - 1);
                        job.traces().compact_to(since);
                        let mut st = lock(&status);
                        st.epochs.push_back((e, watermark));
                        while st.epochs.front().is_some_and(|(x, _)| *x < since) {
                            st.epochs.pop_front();
                        }
                        st.segments = counts.segments;
                        st.open_segments = counts.open_segments;
                        st.edges = counts.edges;
                        st.spins = counts.spins;
                    }
                    Err(_) => break,
                },
                recv(req_rx) -> req => match req {
                    Ok(req) => answer(req, &mut job),
                    // Nobody holds the handle any more: only the messages remain.
                    Err(_) => open_requests = None,
                },
            }
        }
        lock(&status).ended = true;
        // Reads still waiting get an error (their reply channel closes): the generation has
        // gone.
        drop(open_requests);
    });
}

fn answer(req: GraphRequest, job: &mut ArrangedJob) {
    match req {
        GraphRequest::Fetch {
            as_of,
            needs,
            reply,
        } => {
            let _ = reply.send(fetch::fetch(job.traces(), &needs, as_of));
        }
        GraphRequest::Spins { as_of, reply } => {
            let _ = reply.send(job.traces().spins(as_of));
        }
    }
}
