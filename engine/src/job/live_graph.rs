//! Each generation's live graph: its dataflow's output kept as differential arrangements
//! ([`ArrangedJob`](argus_pipeline::arranged::ArrangedJob)s, in layers: segments, edges,
//! spins and every hang's backward slice) in a timely worker of its own, which answers the
//! query server's reads as of any recent epoch.
//!
//! ```text
//!  dataflow g ─► collector g (WindowGraph: snapshots) ──clone of each Message, cuts──►
//!     argus-graph-g{id}: ArrangedJob ─ step until the epoch is done, compact, publish
//!        ▲ GraphRequest (fetch needs, spins) as of epoch e ─┘ reply
//!  query server (a thread per client) ─┘
//! ```
//!
//! **One worker, fed by the collector.** The live graph is built from the collector's
//! messages, so it holds exactly what the snapshots hold: the same retention (`--retain`).
//! Its records are in layers by end time (`layers.rs`): when the collector forgets a stretch
//! of time, the worker retires the layer that holds it instead of retracting its records.
//!
//! **Reads are served on the worker's thread** (a trace handle is not `Send`), between
//! epochs: the worker applies an epoch, steps until its probe passes it, then answers what
//! waits. A worker that is behind (messages queued) applies up to [`MAX_BATCH`] epochs
//! before it steps once for all of them. A read costs a few seeks per need (`live/fetch.rs`); the diagnosis itself runs
//! on the client's thread.
//!
//! **Given up, then seeded anew.** A worker more than [`LIVE_BACKLOG`] updates behind is given
//! up (the job's decoding and dataflow come first; on an overloaded machine the live graph
//! would only fall further behind): it skips what is queued and reads fail as "not readable".
//! Once the job has caught up, the collector sends a [`Feed::Reset`] with its consolidated
//! graph at a finished epoch; the worker drops its dataflow, starts a new one from that seed
//! (one epoch holding the whole graph) and goes on with the messages after it. The handle the
//! query server holds stays valid throughout.
//!
//! **Compaction.** After each epoch the trace handles are compacted to the epoch
//! [`QUERY_EPOCHS`] back: older epochs' distinctions are merged away (memory stays that of
//! the retained graph), and a read may ask for any of the last `QUERY_EPOCHS` epochs (5 s of
//! 200 ms ticks): enough for a client's rounds to read one epoch throughout, and for a
//! snapshot's epoch to be asked while the snapshot is being written.

use crate::live::fetch;
use anyhow::Result;
use argus_diagnose::{Need, Parts};
use argus_pipeline::arranged::{GraphRead, QueryError, SliceConfig};
use argus_pipeline::dataflow::{Message, Update};
use argus_schema::{CausalEdge, Nanos, Segment, Spin};
use argus_sinks::Frozen;
use crossbeam_channel::{select, Receiver, Sender};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::layers::Layers;
use super::sync::lock;
use super::window::Forgotten;

/// Epochs a read may ask for, counting back from the last one done.
pub(crate) const QUERY_EPOCHS: u64 = 25;

/// Epochs a worker that is behind (more messages queued) applies before it steps its
/// dataflow once for all of them: differential then builds one batch per arrangement for
/// the lot instead of one per 200 ms epoch. Each epoch stays readable on its own.
const MAX_BATCH: usize = 10;

/// Updates copied to a live graph and not applied yet beyond which it is given up (a few
/// hundred MB): a worker that cannot keep up with the dataflow must not hold the job back
/// (a blocking copy would) nor grow without bound. The worker then skips what is queued and
/// the generation answers no live queries until its collector seeds the live graph anew
/// from its own consolidated graph, once the job has caught up (`flow.rs`).
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
    /// It is given up: more than [`LIVE_BACKLOG`] updates waited for it (until the collector
    /// seeds it anew).
    pub(crate) fell_behind: bool,
    /// Times it was seeded anew after being given up.
    pub(crate) reseeded: u64,
}

/// Nice levels the live graph's worker and the snapshot finisher (with the encoder threads it
/// starts) run below the rest of the job: on a busy machine the decoding, the dataflow and
/// the collector (whose spins `--follow`, `hangs` and the early snapshots read) come first,
/// the live graph falls behind and is given up and seeded anew, and a snapshot takes longer,
/// rather than delaying them. Past nice 19 (the job at `--nice idle` runs at 19) they go
/// to `SCHED_IDLE` instead.
const BACKGROUND_NICE: i32 = 5;

/// Lowers the calling thread's priority by [`BACKGROUND_NICE`], or puts it in `SCHED_IDLE`
/// when that passes 19 (threads it starts later inherit either); a thread whose priority
/// cannot be read or changed keeps it.
pub(crate) fn below_the_job() {
    // SAFETY: errno is thread-local; clearing it tells getpriority's -1 error from a nice
    // of -1. gettid and getpriority on our own thread take no pointers.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t)
    };
    if nice == -1 && std::io::Error::last_os_error().raw_os_error().unwrap_or(0) != 0 {
        return;
    }
    // SAFETY: sched_getscheduler on the calling thread (0) takes no pointers.
    if unsafe { libc::sched_getscheduler(0) } == libc::SCHED_IDLE {
        // Nothing is lower (a nice value does not weigh in the idle class).
        return;
    }
    let set = if nice + BACKGROUND_NICE > 19 {
        argus_ingest::linux::set_thread_sched_idle()
    } else {
        argus_ingest::linux::set_thread_nice(nice + BACKGROUND_NICE)
    };
    if let Err(e) = set {
        tracing::debug!("a background thread keeps the job's priority: {e}");
    }
}

/// What the collector sends its live graph's worker.
pub(crate) enum Feed {
    /// The dataflow's next message.
    Msg(Message),
    /// What the collector forgot at the end of an epoch ([`super::window::WindowGraph`]),
    /// frozen, and where its window starts now: the layers before that are retired at that
    /// epoch (`layers.rs`), or, with one layer, the records are retracted at that epoch,
    /// decoded on the worker's thread. Not counted against [`LIVE_BACKLOG`].
    Cut(u64, Forgotten, Nanos),
    /// Start again from this graph (the collector's consolidated one at a finished epoch):
    /// after the live graph was given up.
    Reset(Seed),
}

/// A whole graph at a local epoch, to start a live graph from: the collector's tables,
/// frozen (decoded on the worker's thread).
pub(crate) struct Seed {
    pub(crate) epoch: u64,
    pub(crate) watermark: Nanos,
    pub(crate) segments: Frozen<Segment>,
    pub(crate) edges: Frozen<CausalEdge>,
    pub(crate) spins: Frozen<Spin>,
}

impl Seed {
    /// The graph as insertions (a table that fails its check goes in as it stands: the
    /// snapshot reports the inconsistency).
    fn updates(self) -> Vec<(Update, i64)> {
        let (segments, _) = self.segments.contents_checked();
        let (edges, _) = self.edges.contents_checked();
        let (spins, _) = self.spins.contents_checked();
        let mut updates = Vec::with_capacity(segments.len() + edges.len() + spins.len());
        updates.extend(segments.into_iter().map(|s| (Update::Segment(s), 1)));
        updates.extend(edges.into_iter().map(|e| (Update::Edge(e), 1)));
        updates.extend(spins.into_iter().map(|s| (Update::Spin(s), 1)));
        updates
    }
}

/// The collector's end of a live graph: copies each message to it, gives it up when it
/// falls [`LIVE_BACKLOG`] updates behind (the worker then skips what is queued), and starts
/// it again from a [`Seed`] when the collector says the job has caught up.
pub(crate) struct Forward {
    tx: Sender<Feed>,
    queued: Arc<AtomicUsize>,
    status: Arc<Mutex<GraphStatus>>,
    /// Resets sent so far.
    resets: u64,
    /// The worker skips messages until it has seen this many resets (`resets + 1` once
    /// given up; `0`: none to skip).
    skip_until: Arc<AtomicU64>,
    given_up: bool,
    /// [`LIVE_BACKLOG`], or less in tests.
    backlog: usize,
}

impl Forward {
    /// Gives the live graph up past `n` queued updates (tests).
    #[cfg(test)]
    pub(crate) fn with_backlog(mut self, n: usize) -> Forward {
        self.backlog = n;
        self
    }

    /// Copies `m` to the live graph; `false` while it is given up or has ended.
    pub(crate) fn send(&mut self, m: &Message) -> bool {
        if self.given_up {
            return false;
        }
        let n = match m {
            Message::Updates { updates, .. } => updates.len(),
            Message::EpochDone { .. } => 0,
        };
        if self.queued.fetch_add(n, Ordering::Relaxed) + n > self.backlog {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            self.give_up();
            tracing::warn!(
                "the live graph fell {LIVE_BACKLOG} updates behind the dataflow: it answers no live queries until the job catches up"
            );
            return false;
        }
        self.tx.send(Feed::Msg(m.clone())).is_ok()
    }

    /// Gives the live graph up: the worker skips what is queued and drops its
    /// arrangements until it is seeded anew ([`Forward::reseed`]).
    pub(crate) fn give_up(&mut self) {
        if self.given_up {
            return;
        }
        self.given_up = true;
        self.skip_until.store(self.resets + 1, Ordering::Release);
        let mut st = lock(&self.status);
        st.fell_behind = true;
        st.epochs.clear();
    }

    /// Passes what the collector forgot at the end of `epoch` (before that epoch's end),
    /// and where its window starts now; `false` while the live graph is given up or has
    /// ended.
    pub(crate) fn cut(&mut self, epoch: u64, gone: Forgotten, window_start: Nanos) -> bool {
        if self.given_up {
            return false;
        }
        self.tx.send(Feed::Cut(epoch, gone, window_start)).is_ok()
    }

    /// Whether the live graph gets no copies now: given up (and not started again yet).
    pub(crate) fn given_up(&self) -> bool {
        self.given_up
    }

    /// Starts the live graph (again) from `seed`; the messages after its epoch follow.
    pub(crate) fn reseed(&mut self, seed: Seed) -> bool {
        // Not counted in the backlog: the seed is the whole graph (it may hold more than
        // LIVE_BACKLOG records), applied in one step.
        self.resets += 1;
        self.given_up = false;
        self.tx.send(Feed::Reset(seed)).is_ok()
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
    /// Starts the worker of generation `generation`, its records in layers of `layer_ns` of
    /// end times (`None`: one; `layers.rs`); returns the handle, the collector's [`Forward`]
    /// that feeds it, and the thread.
    pub(crate) fn start(
        generation: u64,
        first_epoch: u64,
        start_ns: Nanos,
        slices: Option<SliceConfig>,
        layer_ns: Option<u64>,
    ) -> Result<(LiveGraph, Forward, JoinHandle<()>)> {
        let (tx, messages) = crossbeam_channel::unbounded::<Feed>();
        let queued = Arc::new(AtomicUsize::new(0));
        let (requests, rx) = crossbeam_channel::unbounded::<GraphRequest>();
        let status = Arc::new(Mutex::new(GraphStatus::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let skip_until = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            messages,
            queued: queued.clone(),
            requests: rx,
            status: status.clone(),
            stop: stop.clone(),
            skip_until: skip_until.clone(),
            slices,
            layer_ns,
        };
        let thread = std::thread::Builder::new()
            .name(format!("argus-graph-g{generation}"))
            .spawn(move || {
                below_the_job();
                worker.serve()
            })?;
        let forward = Forward {
            tx,
            queued,
            status: status.clone(),
            resets: 0,
            skip_until,
            given_up: false,
            backlog: LIVE_BACKLOG,
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

/// A live graph's worker thread: what it reads from and reports to.
struct Worker {
    messages: Receiver<Feed>,
    queued: Arc<AtomicUsize>,
    requests: Receiver<GraphRequest>,
    status: Arc<Mutex<GraphStatus>>,
    stop: Arc<AtomicBool>,
    skip_until: Arc<AtomicU64>,
    slices: Option<SliceConfig>,
    layer_ns: Option<u64>,
}

/// Why one run of the worker's dataflow ended.
enum RunEnd {
    /// The generation stopped or its input closed.
    Done,
    /// The collector gave the live graph up: its arrangements are dropped until a seed
    /// comes.
    GivenUp,
    /// Start again from this seed (the live graph was given up and is seeded anew).
    Reset(Seed),
}

impl Worker {
    /// Runs the arranged graph, from scratch at every [`Feed::Reset`], until the generation
    /// stops.
    fn serve(self) {
        let me = Arc::new(self);
        let mut seed: Option<Seed> = None;
        let mut resets = 0u64;
        loop {
            let w = me.clone();
            let first = seed.take();
            let end = match timely::execute_directly(move |worker| w.run(worker, first, resets)) {
                // The run (its dataflows and arrangements) is gone: the memory it held is
                // free while the job is overloaded.
                RunEnd::GivenUp => me.wait_for_seed(),
                end => end,
            };
            match end {
                RunEnd::Done | RunEnd::GivenUp => break,
                RunEnd::Reset(s) => {
                    resets += 1;
                    seed = Some(s);
                }
            }
        }
        lock(&me.status).ended = true;
    }

    /// Given up: skips the messages until the next seed ([`RunEnd::Reset`]); reads get no
    /// answer (their reply channel closes) and the query server says the graph is not
    /// readable.
    fn wait_for_seed(&self) -> RunEnd {
        let never = crossbeam_channel::never();
        let mut requests = Some(self.requests.clone());
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return RunEnd::Done;
            }
            let req_rx = requests.as_ref().unwrap_or(&never);
            select! {
                recv(self.messages) -> msg => match msg {
                    Ok(Feed::Reset(seed)) => return RunEnd::Reset(seed),
                    Ok(Feed::Msg(Message::Updates { updates, .. })) => {
                        self.queued.fetch_sub(updates.len(), Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => return RunEnd::Done,
                },
                recv(req_rx) -> req => match req {
                    // Dropped: its reply channel closes.
                    Ok(req) => drop(req),
                    Err(_) => requests = None,
                },
            }
        }
    }

    /// One run: applies `seed` (if any) as its first epoch, then the messages, epoch by
    /// epoch, answering reads between them; skips messages while the collector has given
    /// it up (until its next reset).
    fn run(&self, worker: &mut timely::worker::Worker, seed: Option<Seed>, resets: u64) -> RunEnd {
        let mut job = Layers::new(self.layer_ns, self.slices.clone());
        if let Some(seed) = seed {
            let t = std::time::Instant::now();
            let (epoch, watermark) = (seed.epoch, seed.watermark);
            let updates = seed.updates();
            let records = updates.len();
            job.send(worker, epoch, updates);
            job.close(epoch);
            self.epochs_done(worker, &mut job, &[(epoch, watermark)], true, records);
            tracing::info!(
                epoch,
                records,
                ms = t.elapsed().as_millis() as u64,
                backlog = self.queued.load(Ordering::Relaxed),
                "live graph seeded anew"
            );
        }
        // Epochs closed and not stepped yet (see `MAX_BATCH`).
        let mut closed: Vec<(u64, Nanos)> = Vec::new();
        // Updates applied since the dataflow was last stepped (logged).
        let mut applied = 0usize;
        let never = crossbeam_channel::never();
        let mut open_requests = Some(self.requests.clone());
        while !self.stop.load(Ordering::Relaxed) {
            // Behind (more messages queued): their epochs are applied first, and the dataflow
            // stepped once for all of them.
            if !closed.is_empty() && (closed.len() >= MAX_BATCH || self.messages.is_empty()) {
                self.epochs_done(worker, &mut job, &closed, false, applied);
                closed.clear();
                applied = 0;
            }
            if self.skip_until.load(Ordering::Acquire) > resets {
                return RunEnd::GivenUp;
            }
            let req_rx = open_requests.as_ref().unwrap_or(&never);
            select! {
                recv(self.messages) -> msg => match msg {
                    Ok(Feed::Reset(seed)) => return RunEnd::Reset(seed),
                    // Given up: the seed will hold the graph after the cut.
                    Ok(Feed::Cut(..)) if self.skip_until.load(Ordering::Acquire) > resets => {}
                    Ok(Feed::Cut(epoch, gone, _)) if job.retracts() => {
                        let updates = gone.retractions();
                        applied += updates.len();
                        job.send(worker, epoch, updates);
                    }
                    // Layers: the forgotten records go with their layers, dropped here
                    // (on this thread, not the collector's); a cut inside a layer (the
                    // memory budget's) retracts what it took from it.
                    Ok(Feed::Cut(epoch, gone, window_start)) => {
                        applied += job.cut(worker, epoch, gone, window_start);
                    }
                    Ok(Feed::Msg(m)) if self.skip_until.load(Ordering::Acquire) > resets => {
                        if let Message::Updates { updates, .. } = m {
                            self.queued.fetch_sub(updates.len(), Ordering::Relaxed);
                        }
                    }
                    Ok(Feed::Msg(Message::Updates { epoch, updates })) => {
                        self.queued.fetch_sub(updates.len(), Ordering::Relaxed);
                        applied += updates.len();
                        job.send(worker, epoch.0, updates);
                    }
                    Ok(Feed::Msg(Message::EpochDone { epoch, watermark, .. })) => {
                        job.close(epoch.0);
                        closed.push((epoch.0, watermark));
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
        // Reads still waiting get an error (their reply channel closes): the generation has
        // gone.
        RunEnd::Done
    }

    /// Steps until the epochs `done` (closed, oldest first) are done, compacts, and
    /// publishes them as readable (`fresh`: the first epoch of a run, after which the older
    /// ones are gone).
    fn epochs_done(
        &self,
        worker: &mut timely::worker::Worker,
        job: &mut Layers,
        done: &[(u64, Nanos)],
        fresh: bool,
        applied: usize,
    ) {
        let Some(&(e, _)) = done.last() else {
            return;
        };
        let t0 = std::time::Instant::now();
        // A generation that stops ends its worker even mid-step (its join must not wait on
        // an epoch that will not be done).
        worker.step_while(|| job.pending(e) && !self.stop.load(Ordering::Relaxed));
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        tracing::debug!(
            epoch = e,
            epochs = done.len(),
            updates = applied,
            layers = job.len(),
            ms = t0.elapsed().as_secs_f64() * 1e3,
            "live graph epochs"
        );
        let since = e.saturating_sub(QUERY_EPOCHS - 1);
        job.compact_to(since);
        let mut st = lock(&self.status);
        if fresh {
            st.epochs.clear();
            st.fell_behind = false;
            st.reseeded += 1;
        }
        st.epochs.extend(done.iter().copied());
        while st.epochs.front().is_some_and(|(x, _)| *x < since) {
            st.epochs.pop_front();
        }
        let c = job.counts();
        st.segments = c.segments;
        st.open_segments = c.open_segments;
        st.edges = c.edges;
        st.spins = c.spins;
    }
}

fn answer(req: GraphRequest, job: &mut Layers) {
    match req {
        GraphRequest::Fetch {
            as_of,
            needs,
            reply,
        } => {
            let _ = reply.send(fetch::fetch(&mut job.read(as_of), &needs, as_of));
        }
        GraphRequest::Spins { as_of, reply } => {
            let _ = reply.send(job.read(as_of).spins(as_of));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The calling thread's nice value and whether it is in `SCHED_IDLE`.
    fn sched() -> (i32, bool) {
        // SAFETY: getpriority and sched_getscheduler on the calling thread take no pointers.
        unsafe {
            (
                libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t),
                libc::sched_getscheduler(0) == libc::SCHED_IDLE,
            )
        }
    }

    /// Background threads go 5 nice levels below the thread that starts them, and to
    /// `SCHED_IDLE` past 19 (the job at `--nice idle` runs at 19); one in `SCHED_IDLE` stays.
    #[test]
    fn background_threads_run_below_the_job() {
        let run = |job: Option<i32>| {
            std::thread::spawn(move || {
                match job {
                    Some(n) => argus_ingest::linux::set_thread_nice(n).unwrap(),
                    None => argus_ingest::linux::set_thread_sched_idle().unwrap(),
                }
                below_the_job();
                sched()
            })
            .join()
            .unwrap()
        };
        assert_eq!(run(Some(19)), (19, true));
        assert_eq!(run(Some(15)), (15, true));
        assert_eq!(run(Some(10)), (15, false));
        assert!(run(None).1, "SCHED_IDLE stays");
    }
}
