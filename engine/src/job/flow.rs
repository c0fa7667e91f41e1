//! The job's dataflow ([`Flow`]): the graph dataflow over the events released since it
//! started, with a collector thread that keeps its consolidated graph (a [`WindowGraph`]:
//! what `argus build` keeps, in time buckets), forgets what ended before the retained window,
//! answers snapshot requests and publishes its spins (woken main loop) as soon as they
//! change. One runs for the whole job (module docs of [`super`]); the query protocol still
//! names it generation 0.

use anyhow::{Context, Result};
use argus_pipeline::dataflow::{self, Batch, DataflowConfig, Message, RuleUpdates};
use argus_schema::{CausalEdge, Nanos, Spin};
use argus_sinks::Frozen;
use crossbeam_channel::{select, Receiver, Sender};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
/// Epochs the dataflow's input may hold before the job waits for the dataflow (1.6 s): an
/// overloaded job slows its reading of the tap, whose pages then count as dropped.
pub(crate) const INPUT_EPOCHS: usize = 8;
use super::budget::WindowLimit;
use super::live_graph::{Forward, LiveGraph, Seed};
use super::sync::lock;
use super::window::{Forgotten, Part, WindowGraph};
use argus_pipeline::arranged::SliceConfig;

/// The consolidated graph at an epoch boundary, frozen
/// ([`CollectionSink::freeze`](argus_sinks::CollectionSink::freeze)): taking it costs the
/// collector no copy of the graph; whoever reads it (the snapshot finisher) decodes and
/// checks it, bucket by bucket.
pub(crate) struct Captured {
    /// By time bucket (see [`Part`]): a snapshot encodes again only the buckets that changed.
    pub(crate) segments: Vec<Part<argus_schema::Segment>>,
    pub(crate) edges: Vec<Part<CausalEdge>>,
    pub(crate) spins: Frozen<Spin>,
    pub(crate) local_epoch: u64,
    pub(crate) watermark: Nanos,
    /// The cutoff of the collector's last cut (0 before the first): what ended before it
    /// is not in the tables.
    pub(crate) forgotten_before: Nanos,
}

/// A [`Captured`] graph, decoded (the tests read it whole; snapshots by part).
#[cfg(test)]
pub(crate) struct Contents {
    pub(crate) segments: Vec<argus_schema::Segment>,
    pub(crate) edges: Vec<CausalEdge>,
    pub(crate) spins: Vec<Spin>,
    /// Whether every record is there once (the dataflow's invariant).
    pub(crate) check: std::result::Result<(), String>,
}

#[cfg(test)]
impl Captured {
    /// Decodes the tables and checks them, in one pass over each; the edges (the largest
    /// table) on a second thread while this one does the segments and spins (the snapshot
    /// of a 30 s window at 300k events/s spent 2–4 s here, one table after the other).
    pub(crate) fn contents(self) -> Contents {
        let Captured {
            segments,
            edges,
            spins,
            ..
        } = self;
        let segments = Frozen::concat("segments", segments.into_iter().map(|p| p.frozen));
        let edges = Frozen::concat("edges", edges.into_iter().map(|p| p.frozen));
        let ((segments, s), (spins, p), (edges, e)) = std::thread::scope(|scope| {
            // A clone of a frozen table shares its runs.
            let shared = edges.clone();
            let thread = std::thread::Builder::new()
                .name("argus-decode-edges".into())
                .spawn_scoped(scope, move || shared.contents_checked());
            let segments = segments.contents_checked();
            let spins = spins.contents_checked();
            let edges = match thread {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                // No thread to be had: decoded here.
                Err(_) => edges.contents_checked(),
            };
            (segments, spins, edges)
        });
        let check = [("segments", s), ("edges", e), ("spins", p)]
            .into_iter()
            .find_map(|(n, r)| {
                r.err()
                    .map(|e| format!("the dataflow's {n} are inconsistent: {e}"))
            })
            .map_or(Ok(()), Err);
        Contents {
            segments,
            edges,
            spins,
            check,
        }
    }
}

pub(crate) struct SnapRequest {
    pub(crate) min_local_epoch: u64,
    pub(crate) reply: Sender<Captured>,
}

/// The dataflow's graph ([`WindowGraph`]) and what a live job adds to it.
pub(crate) struct Collector {
    pub(crate) graph: WindowGraph,
    /// Updates of an epoch not done yet came: snapshots wait for its end.
    pub(crate) dirty: bool,
    pub(crate) open: Arc<AtomicI64>,
    /// Set when an epoch changed the spins; published at its end.
    pub(crate) spins_changed: bool,
    pub(crate) live: Arc<LiveSpins>,
}

impl Collector {
    /// The graph as of the last epoch done, frozen (see [`Captured`]).
    pub(crate) fn capture(&mut self) -> Captured {
        let g = &mut self.graph;
        let (local_epoch, watermark) = g.done.map_or((0, Nanos(0)), |(e, w)| (e.0, w));
        Captured {
            segments: g.segments.parts(),
            edges: g.edges.parts(),
            spins: g.spins.freeze(),
            local_epoch,
            watermark,
            forgotten_before: g.window_start(),
        }
    }

    /// At the end of an epoch with `watermark`: what the retention cut forgot, frozen, when
    /// a bucket was due ([`WindowGraph::forget_due`]).
    fn cut(&mut self, watermark: Nanos) -> Option<Forgotten> {
        let t = Instant::now();
        let gone = self.graph.forget_due(watermark, self.live.window.get())?;
        self.spins_changed |= gone.spins.updates() > 0;
        let start = self.graph.window_start();
        self.live.window_start.store(start.0, Ordering::Release);
        tracing::info!(
            window_start = start.0,
            forgotten = gone.updates(),
            us = t.elapsed().as_micros() as u64,
            "retention cut"
        );
        Some(gone)
    }

    pub(crate) fn serve(&mut self, pending: &mut Vec<SnapRequest>, closed: bool) {
        if self.dirty && !closed {
            return;
        }
        let at = self.graph.done.map(|(e, _)| e.0);
        pending.retain(|r| {
            if closed || at.is_some_and(|e| e >= r.min_local_epoch) {
                let _ = r.reply.send(self.capture());
                false
            } else {
                true
            }
        });
    }
}

/// When a given-up live graph is seeded anew from the collector's graph: at the end of an
/// epoch, with nothing more queued for the collector, the job not reading pages back from
/// the ring (`catching_up`), and a wait passed since it was given up (10 s, doubling at each
/// give-up up to `--retain`, so an overloaded job does not keep copying its graph; a seed
/// arranges the whole retained graph in one batch, so seeding once per `--retain` costs
/// about what keeping it up to date does).
pub(crate) struct Revive {
    pub(crate) catching_up: Arc<AtomicBool>,
    /// When the current give-up was noticed.
    since: Option<Instant>,
    wait: Duration,
    max: Duration,
}

const REVIVE_FIRST: Duration = Duration::from_secs(10);
const REVIVE_MAX: Duration = Duration::from_secs(600);

impl Revive {
    /// Waits of at most `max` (`--retain`; without one, 10 minutes).
    pub(crate) fn new(catching_up: Arc<AtomicBool>, max: Option<Duration>) -> Revive {
        let mut r = Revive::waiting(catching_up, REVIVE_FIRST);
        r.max = max.unwrap_or(REVIVE_MAX).max(REVIVE_FIRST);
        r
    }

    /// With a first wait of `first` (tests).
    fn waiting(catching_up: Arc<AtomicBool>, first: Duration) -> Revive {
        Revive {
            catching_up,
            since: None,
            wait: first / 2,
            max: REVIVE_MAX,
        }
    }

    /// At the end of an epoch, for a live graph that is given up: whether to seed it now.
    fn due(&mut self, now: Instant, idle: bool) -> bool {
        let since = *self.since.get_or_insert_with(|| {
            self.wait = (self.wait * 2).min(self.max);
            now
        });
        let due = idle
            && !self.catching_up.load(Ordering::Relaxed)
            && now.duration_since(since) >= self.wait;
        if due {
            self.since = None;
        }
        due
    }
}

/// The collector's consolidated graph at its last finished epoch, frozen, as a seed for its
/// live graph (decoded by the live graph's worker, not the collector).
fn seed(graph: &mut WindowGraph) -> Seed {
    let (epoch, watermark) = graph.done.map_or((0, Nanos(0)), |(e, w)| (e.0, w));
    Seed {
        epoch,
        watermark,
        segments: graph.segments.freeze(),
        edges: graph.edges.freeze(),
        spins: graph.spins.freeze(),
    }
}

/// The dataflow's collector; `forward` gets a copy of every message (the
/// live graph, `live_graph.rs`) until it ends; while it is given up, `revive`
/// says when to seed it anew. With `retain`, what ended before the window goes.
pub(crate) fn collect_live(
    out: Receiver<Message>,
    requests: Receiver<SnapRequest>,
    live: Arc<LiveSpins>,
    mut forward: Option<(Forward, Revive)>,
    retain: Option<Duration>,
) {
    let mut c = Collector {
        graph: WindowGraph::new(retain),
        dirty: false,
        open: live.open.clone(),
        spins_changed: false,
        live,
    };
    let mut pending: Vec<SnapRequest> = Vec::new();
    let mut requests = Some(requests);
    let never = crossbeam_channel::never();
    // A copy of every message to the live graph, until it ends.
    let pass = |forward: &mut Option<(Forward, Revive)>, m: &Message| {
        if forward
            .as_mut()
            .is_some_and(|(f, _)| !f.send(m) && !f.given_up())
        {
            *forward = None;
        }
    };
    loop {
        let req_rx = requests.as_ref().unwrap_or(&never);
        select! {
            recv(out) -> msg => {
                let Ok(msg) = msg else {
                    c.serve(&mut pending, true);
                    // Requests still arriving get the final state.
                    if let Some(rx) = requests.take() {
                        for r in rx.iter() {
                            let _ = r.reply.send(c.capture());
                        }
                    }
                    return;
                };
                let msg = match msg {
                    Message::Updates { epoch, mut updates } => {
                        c.graph.keep(&mut updates);
                        Message::Updates { epoch, updates }
                    }
                    Message::EpochDone { epoch, watermark, .. } => {
                        if let Some(gone) = c.cut(watermark) {
                            if forward
                                .as_mut()
                                .is_some_and(|(f, _)| {
                                    !f.cut(epoch.0, gone, c.graph.window_start()) && !f.given_up()
                                })
                            {
                                forward = None;
                            }
                        }
                        msg
                    }
                };
                pass(&mut forward, &msg);
                if c.live.over_budget.load(Ordering::Relaxed) {
                    // Over the memory budget: the live graph's arrangements (a copy of the
                    // whole window) go first; it is seeded anew once memory allows.
                    if let Some((f, _)) = forward.as_mut().filter(|(f, _)| !f.given_up()) {
                        f.give_up();
                        tracing::warn!(
                            "the job is over its memory budget: the live graph is dropped, and answers no live queries until memory allows"
                        );
                    }
                }
                match msg {
                    Message::Updates { updates, .. } => {
                        c.dirty = true;
                        let changed = c.graph.update(updates);
                        if changed.open_segments != 0 {
                            c.open.fetch_add(changed.open_segments, Ordering::Relaxed);
                        }
                        c.spins_changed |= changed.spins;
                    }
                    Message::EpochDone { epoch, watermark, counts, .. } => {
                        c.dirty = false;
                        c.graph.epoch_done(epoch, watermark, &counts);
                        let changed = std::mem::take(&mut c.spins_changed);
                        c.live.publish(epoch.0, watermark, changed.then(|| c.graph.spins.contents()));
                        tracing::debug!(
                            target: "argus::epochs",
                            watermark = watermark.0,
                            done_ns = super::monotonic_ns(),
                            "epoch done"
                        );
                        c.serve(&mut pending, false);
                        if let Some((f, revive)) = forward.as_mut() {
                            if f.given_up()
                                && !c.live.over_budget.load(Ordering::Relaxed)
                                && revive.due(Instant::now(), out.is_empty())
                                && !f.reseed(seed(&mut c.graph))
                            {
                                forward = None;
                            }
                        }
                    }
                }
            },
            recv(req_rx) -> r => match r {
                Ok(r) => {
                    pending.push(r);
                    c.serve(&mut pending, false);
                }
                Err(_) => requests = None,
            },
        }
    }
}

/// The dataflow's spins as of its last completed epoch, shared with the main loop so a new
/// hang can trigger a snapshot at once (see `EarlySnapshots`), and with the query server,
/// whose `hangs` answers from them: they are current as soon as the dataflow has done an
/// epoch, however far the live graph lags.
pub(crate) struct LiveSpins {
    at: std::sync::Mutex<Published>,
    /// Open segments (for the status line).
    pub(crate) open: Arc<AtomicI64>,
    /// Woken (`try_send`) whenever the spins change.
    pub(crate) notify: Sender<()>,
    /// Where the collector's retained window starts ([`WindowGraph::window_start`]; 0
    /// before the first cut), in ns.
    pub(crate) window_start: AtomicU64,
    /// The window the memory budget lets the collector keep (`budget.rs`).
    pub(crate) window: WindowLimit,
    /// The job is over its memory budget: the live graph is given up (`budget.rs`).
    pub(crate) over_budget: AtomicBool,
}

/// What a collector published last.
#[derive(Clone, Default)]
pub(crate) struct Published {
    /// The last local epoch done, and its watermark (`None` before the first).
    pub(crate) done: Option<(u64, Nanos)>,
    pub(crate) spins: Arc<Vec<Spin>>,
}

impl LiveSpins {
    pub(crate) fn new(notify: Sender<()>) -> Arc<LiveSpins> {
        Arc::new(LiveSpins {
            at: std::sync::Mutex::new(Published::default()),
            open: Arc::new(AtomicI64::new(0)),
            notify,
            window_start: AtomicU64::new(0),
            window: WindowLimit::new(),
            over_budget: AtomicBool::new(false),
        })
    }

    /// The end of local epoch `epoch` (watermark `watermark`); `spins` when they changed in it.
    pub(crate) fn publish(&self, epoch: u64, watermark: Nanos, spins: Option<Vec<Spin>>) {
        let mut at = lock(&self.at);
        at.done = Some((epoch, watermark));
        if let Some(spins) = spins {
            at.spins = Arc::new(spins);
            drop(at);
            let _ = self.notify.try_send(());
        }
    }

    pub(crate) fn get(&self) -> Vec<Spin> {
        lock(&self.at).spins.to_vec()
    }

    /// Where the retained window starts: at the collector's last cutoff, or at `start` (the
    /// generation's) before the first.
    pub(crate) fn window_start(&self, start: Nanos) -> Nanos {
        start.max(Nanos(self.window_start.load(Ordering::Acquire)))
    }

    /// The spins as of the last epoch done.
    pub(crate) fn latest(&self) -> Published {
        lock(&self.at).clone()
    }
}

/// The dataflow and its collector, fed from `first_epoch` (global) on.
pub(crate) struct Flow {
    pub(crate) id: u64,
    pub(crate) first_epoch: u64,
    pub(crate) start_ns: Nanos,
    pub(crate) input: Sender<Batch>,
    /// New rules for the dataflow from a local epoch on (a re-read rules file).
    pub(crate) rules: RuleUpdates,
    pub(crate) requests: Sender<SnapRequest>,
    pub(crate) live: Arc<LiveSpins>,
    pub(crate) flow: JoinHandle<std::result::Result<(), argus_pipeline::dataflow::PipelineError>>,
    pub(crate) collector: JoinHandle<()>,
    /// Its live graph (what the query server reads) and its worker.
    pub(crate) graph: LiveGraph,
    pub(crate) graph_worker: JoinHandle<()>,
}

/// How a generation's live graph starts.
pub(crate) struct LiveSetup {
    /// Keep every hang's backward slice (`--live-slices`).
    pub(crate) slices: bool,
    /// Set while the job reads pages back from the ring ([`Revive`]).
    pub(crate) catching_up: Arc<AtomicBool>,
    /// `--retain` ([`WindowGraph`]; `None`: keep everything, tests).
    pub(crate) retain: Option<Duration>,
}

impl Flow {
    pub(crate) fn start(
        id: u64,
        cfg: &DataflowConfig,
        first_epoch: u64,
        start_ns: Nanos,
        notify: Sender<()>,
        setup: LiveSetup,
    ) -> Result<Self> {
        let LiveSetup {
            slices: live_slices,
            catching_up,
            retain,
        } = setup;
        let (input, batch_rx) = crossbeam_channel::bounded::<Batch>(INPUT_EPOCHS);
        let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
        let (requests, req_rx) = crossbeam_channel::unbounded::<SnapRequest>();
        let dcfg = cfg.clone();
        let rules = RuleUpdates::new();
        let updates = rules.clone();
        let flow = std::thread::Builder::new()
            .name(format!("argus-flow-g{id}"))
            .spawn(move || dataflow::run_with_updates(&dcfg, updates, batch_rx, out_tx))?;
        let live = LiveSpins::new(notify);
        let live2 = live.clone();
        let (graph, forward, graph_worker) = LiveGraph::start(
            id,
            first_epoch,
            start_ns,
            live_slices.then(|| SliceConfig::from_rules(&cfg.rules)),
            super::window::cut_step_ns(retain),
        )?;
        let collector = std::thread::Builder::new()
            .name(format!("argus-collect-g{id}"))
            .spawn(move || {
                collect_live(
                    out_rx,
                    req_rx,
                    live2,
                    Some((forward, Revive::new(catching_up, retain))),
                    retain,
                )
            })?;
        Ok(Flow {
            id,
            first_epoch,
            start_ns,
            input,
            rules,
            requests,
            live,
            flow,
            collector,
            graph,
            graph_worker,
        })
    }

    /// Closes the input and waits for the dataflow, its collector and its live graph's
    /// worker (which ends without applying what is left: nobody reads it any more).
    pub(crate) fn stop(self) -> Result<()> {
        let Flow {
            input,
            requests,
            flow,
            collector,
            graph_worker,
            graph,
            id,
            ..
        } = self;
        graph.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        drop(graph);
        drop(input);
        drop(requests);
        let r = flow
            .join()
            .map_err(|_| anyhow::anyhow!("dataflow generation {id} panicked"))?;
        let _ = collector.join();
        let _ = graph_worker.join();
        r.with_context(|| format!("dataflow generation {id}"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_pipeline::dataflow::Update;
    use argus_pipeline::rules::Counts;
    use argus_schema::{EndCause, Epoch, Pid, Segment, SegmentId, SegmentKind, StartCause, Tid};
    use std::time::Duration;

    /// The live extras on top of the [`WindowGraph`]: a snapshot request waits for the
    /// end of the epoch being applied, the open segments are counted for the status line,
    /// and spins that changed are published when their epoch ends.
    #[test]
    fn a_live_collector_serves_whole_epochs_counts_open_segments_and_publishes_spins() {
        let (out_tx, out_rx) = crossbeam_channel::unbounded();
        let (req_tx, req_rx) = crossbeam_channel::unbounded();
        let (notify, woken) = crossbeam_channel::bounded(1);
        let live = LiveSpins::new(notify);
        let live2 = live.clone();
        let collector = std::thread::spawn(move || collect_live(out_rx, req_rx, live2, None, None));
        let open = Segment::starting(
            SegmentId::new(Tid(7), 0),
            Pid(7),
            SegmentKind::Task,
            Nanos(5),
            StartCause::Created,
        );
        assert_eq!(open.end, EndCause::Open);
        let spin = super::super::watch::tests::spin(SegmentId::new(Tid(7), 0).0, 7, 7, 5, 9);
        out_tx
            .send(Message::Updates {
                epoch: Epoch(0),
                updates: vec![
                    (Update::Segment(open.clone()), 1),
                    (Update::Spin(spin.clone()), 1),
                ],
            })
            .unwrap();
        let (reply, replies) = crossbeam_channel::unbounded();
        req_tx
            .send(SnapRequest {
                min_local_epoch: 0,
                reply,
            })
            .unwrap();
        // Epoch 0 is not done: no snapshot of half an epoch.
        assert!(replies.recv_timeout(Duration::from_millis(100)).is_err());
        out_tx
            .send(Message::EpochDone {
                epoch: Epoch(0),
                watermark: Nanos(9),
                events: 2,
                counts: Counts::default(),
            })
            .unwrap();
        let got = replies.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!((got.local_epoch, got.watermark), (0, Nanos(9)));
        let got = got.contents();
        assert_eq!(got.segments, vec![open]);
        assert_eq!(got.spins, vec![spin.clone()]);
        assert!(got.check.is_ok());
        woken.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(live.get(), vec![spin]);
        assert_eq!(live.open.load(Ordering::Relaxed), 1);
        // The dataflow ends, then the job stops asking: the collector returns.
        drop(out_tx);
        drop(req_tx);
        collector.join().unwrap();
    }

    /// A collector feeding a live graph, and the handles a test drives them with.
    struct Harness {
        out: Sender<Message>,
        requests: Sender<SnapRequest>,
        graph: LiveGraph,
        catching_up: Arc<AtomicBool>,
        live: Arc<LiveSpins>,
        collector: JoinHandle<()>,
        worker: JoinHandle<()>,
    }

    impl Harness {
        /// A live graph given up past `backlog` queued updates; a collector keeping `retain`.
        fn start(backlog: usize, retain: Option<Duration>) -> Harness {
            let (out, out_rx) = crossbeam_channel::unbounded();
            let (requests, req_rx) = crossbeam_channel::unbounded::<SnapRequest>();
            let (notify, _woken) = crossbeam_channel::bounded(1);
            let live = LiveSpins::new(notify);
            let layer_ns = super::super::window::cut_step_ns(retain);
            let (graph, forward, worker) =
                LiveGraph::start(0, 0, Nanos(0), None, layer_ns).unwrap();
            let catching_up = Arc::new(AtomicBool::new(true));
            let revive = Revive::waiting(catching_up.clone(), Duration::ZERO);
            let live2 = live.clone();
            let collector = std::thread::spawn(move || {
                collect_live(
                    out_rx,
                    req_rx,
                    live2,
                    Some((forward.with_backlog(backlog), revive)),
                    retain,
                )
            });
            Harness {
                out,
                requests,
                graph,
                catching_up,
                live,
                collector,
                worker,
            }
        }

        /// Epoch `e` with `updates`, then its end (watermark `10 (e + 1)`).
        fn epoch(&self, e: u64, updates: Vec<(Update, i64)>) {
            self.epoch_at(e, Nanos(10 * (e + 1)), updates);
        }

        /// Epoch `e` with `updates`, then its end with `watermark`.
        fn epoch_at(&self, e: u64, watermark: Nanos, updates: Vec<(Update, i64)>) {
            self.out
                .send(Message::Updates {
                    epoch: Epoch(e),
                    updates,
                })
                .unwrap();
            self.out
                .send(Message::EpochDone {
                    epoch: Epoch(e),
                    watermark,
                    events: 1,
                    counts: Counts::default(),
                })
                .unwrap();
        }

        /// Waits (30 s at most) until the live graph's status satisfies `f`.
        fn wait(&self, what: &str, f: &dyn Fn(&super::super::live_graph::GraphStatus) -> bool) {
            let t = Instant::now();
            while !f(&self.graph.status()) {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "{what}: {:?}",
                    self.graph.status()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }

        /// The collector's graph once it has done epoch `e`.
        fn capture(&self, e: u64) -> Contents {
            let (reply, rx) = crossbeam_channel::bounded(1);
            self.requests
                .send(SnapRequest {
                    min_local_epoch: e,
                    reply,
                })
                .unwrap();
            rx.recv_timeout(Duration::from_secs(30)).unwrap().contents()
        }

        fn end(self) {
            drop(self.out);
            drop(self.requests);
            self.collector.join().unwrap();
            self.graph.stop.store(true, Ordering::Relaxed);
            drop(self.graph);
            self.worker.join().unwrap();
        }
    }

    fn seg(tid: i32, start: u64) -> Segment {
        Segment::starting(
            SegmentId::new(Tid(tid), 0),
            Pid(tid),
            SegmentKind::Task,
            Nanos(start),
            StartCause::Created,
        )
    }

    fn spin(tid: i32) -> Spin {
        super::super::watch::tests::spin(SegmentId::new(Tid(tid), 0).0, tid, tid, 5, 9)
    }

    /// A live graph that falls behind is given up (its reads fail, the collector goes on),
    /// then seeded anew from the collector's graph at the end of an epoch: it then holds
    /// what the collector holds, the updates it skipped included, and goes on from there.
    #[test]
    fn a_given_up_live_graph_is_seeded_anew_from_the_collector_and_goes_on() {
        let h = Harness::start(3, None);
        h.epoch(
            0,
            vec![(Update::Segment(seg(1, 1)), 1), (Update::Spin(spin(1)), 1)],
        );
        h.wait("epoch 0 readable", &|st| {
            st.epochs.back().is_some_and(|e| e.0 == 0)
        });
        assert_eq!(h.graph.spins(0).unwrap(), vec![spin(1)]);
        // Four updates in one message: past the backlog of 3. The job is still catching
        // up: given up, not seeded anew.
        h.epoch(
            1,
            vec![
                (Update::Segment(seg(2, 2)), 1),
                (Update::Spin(spin(2)), 1),
                (Update::Segment(seg(3, 3)), 1),
                (Update::Spin(spin(3)), 1),
            ],
        );
        h.wait("given up", &|st| st.fell_behind);
        std::thread::sleep(Duration::from_millis(100));
        let st = h.graph.status();
        assert!(st.epochs.is_empty() && st.reseeded == 0, "{st:?}");
        assert!(
            h.graph.spins(1).is_err(),
            "a given-up live graph answers no reads"
        );
        // Caught up: at the end of the next epoch the collector seeds it with its graph.
        h.catching_up.store(false, Ordering::Relaxed);
        h.epoch(2, vec![(Update::Spin(spin(1)), -1)]);
        h.wait("seeded at epoch 2", &|st| {
            st.reseeded == 1 && st.epochs.back().is_some_and(|e| e.0 == 2)
        });
        let mut spins = h.graph.spins(2).unwrap();
        spins.sort_by_key(|s| s.tid);
        assert_eq!(spins, vec![spin(2), spin(3)]);
        let st = h.graph.status();
        assert!(!st.fell_behind);
        assert_eq!((st.segments, st.spins), (3, 2));
        // And it goes on with the messages after the seed.
        h.epoch(3, vec![(Update::Spin(spin(2)), -1)]);
        h.wait("epoch 3", &|st| st.epochs.back().is_some_and(|e| e.0 == 3));
        assert_eq!(h.graph.spins(3).unwrap(), vec![spin(3)]);
        assert_eq!(h.graph.status().spins, 1);
        h.end();
    }

    fn closed(tid: i32, start: u64, end: u64) -> Segment {
        Segment {
            end: EndCause::Woken,
            end_ns: Nanos(end),
            ..seg(tid, start)
        }
    }

    fn edge(src: i32, dst: i32, ts: u64) -> CausalEdge {
        CausalEdge {
            src: SegmentId::new(Tid(src), 0),
            dst: SegmentId::new(Tid(dst), 0),
            kind: argus_schema::EdgeKind::Wakeup,
            strength: argus_schema::Strength::Strong,
            ts: Nanos(ts),
            src_syscall: -1,
        }
    }

    /// Retention: once the watermark is `retain` past the end of the oldest time bucket (a
    /// second wide), what ended in it leaves the collector's graph and, as retractions at that
    /// epoch, the live graph (earlier epochs still read it); open segments and spins stay
    /// however old; later updates of forgotten records (a retraction, a late insertion) are
    /// dropped, so the tables stay consistent.
    #[test]
    fn what_ended_before_the_window_is_forgotten_by_the_collector_and_the_live_graph() {
        let s = 1_000_000_000u64;
        let h = Harness::start(usize::MAX, Some(Duration::from_secs(4)));
        let old_seg = closed(1, s / 10, s / 2);
        let open_seg = seg(2, s / 5);
        let old_edge = edge(1, 2, 2 * s / 5);
        let mut old_spin = spin(1);
        old_spin.end_ns = Nanos(s / 2);
        old_spin.open = false;
        let mut open_spin = spin(2);
        open_spin.open = true;
        h.epoch_at(
            0,
            Nanos(s),
            vec![
                (Update::Segment(old_seg.clone()), 1),
                (Update::Segment(open_seg.clone()), 1),
                (Update::Edge(old_edge.clone()), 1),
                (Update::Spin(old_spin.clone()), 1),
                (Update::Spin(open_spin.clone()), 1),
            ],
        );
        // Watermark 4.9 s: the cutoff would be 0.9 s, less than a step (1 s) past 0: no cut.
        let young = closed(3, 4 * s, 4 * s + s / 2);
        h.epoch_at(
            1,
            Nanos(4 * s + 9 * s / 10),
            vec![(Update::Segment(young.clone()), 1)],
        );
        let c = h.capture(1);
        assert_eq!(c.segments.len(), 3);
        assert_eq!(h.live.window_start(Nanos(0)), Nanos(0));
        // Watermark 5.6 s: cut at 1.6 s.
        let recent = edge(3, 2, 5 * s);
        h.epoch_at(
            2,
            Nanos(5 * s + 6 * s / 10),
            vec![(Update::Edge(recent.clone()), 1)],
        );
        let c = h.capture(2);
        assert!(c.check.is_ok(), "{:?}", c.check);
        let mut want_segs = vec![open_seg.clone(), young.clone()];
        want_segs.sort();
        assert_eq!(c.segments, want_segs);
        assert_eq!(c.edges, vec![recent.clone()]);
        assert_eq!(c.spins, vec![open_spin.clone()]);
        // The bucket holding the cutoff (1.6 s) stays: the window starts at its start.
        assert_eq!(h.live.window_start(Nanos(0)), Nanos(s));
        h.wait("epoch 2", &|st| st.epochs.back().is_some_and(|e| e.0 == 2));
        let st = h.graph.status();
        assert_eq!((st.segments, st.edges, st.spins), (2, 1, 1), "{st:?}");
        assert_eq!(h.graph.spins(2).unwrap(), vec![open_spin.clone()]);
        let mut before = h.graph.spins(1).unwrap();
        before.sort();
        let mut want = vec![old_spin.clone(), open_spin.clone()];
        want.sort();
        assert_eq!(before, want, "as of epoch 1 the live graph still has it");
        // The dataflow retracts a forgotten record and inserts one over before the cutoff:
        // both dropped, the tables stay consistent.
        h.epoch_at(
            3,
            Nanos(5 * s + 8 * s / 10),
            vec![
                (Update::Segment(old_seg), -1),
                (Update::Edge(old_edge), -1),
                (Update::Edge(edge(1, 3, s / 2)), 1),
                (Update::Spin(old_spin), -1),
            ],
        );
        let c = h.capture(3);
        assert!(c.check.is_ok(), "{:?}", c.check);
        assert_eq!(c.segments, want_segs);
        assert_eq!(c.edges, vec![recent]);
        assert_eq!(c.spins, vec![open_spin]);
        h.wait("epoch 3", &|st| st.epochs.back().is_some_and(|e| e.0 == 3));
        let st = h.graph.status();
        assert_eq!((st.segments, st.edges, st.spins), (2, 1, 1), "{st:?}");
        h.end();
    }

    /// Epochs that queue up while the worker is busy are applied together and the dataflow
    /// stepped once for them, yet each stays readable on its own: as of epoch e a read sees
    /// exactly the updates of epochs up to e.
    #[test]
    fn epochs_applied_together_stay_readable_one_by_one() {
        let h = Harness::start(usize::MAX, None);
        for e in 0..40u64 {
            h.epoch(e, vec![(Update::Spin(spin(e as i32 + 1)), 1)]);
        }
        h.wait("epoch 39", &|st| {
            st.epochs.back().is_some_and(|e| e.0 == 39)
        });
        let st = h.graph.status();
        let readable: Vec<u64> = st.epochs.iter().map(|e| e.0).collect();
        assert_eq!(readable, (15..40).collect::<Vec<u64>>(), "{st:?}");
        for (e, w) in &st.epochs {
            assert_eq!(*w, Nanos(10 * (e + 1)));
        }
        for e in [15u64, 27, 39] {
            let mut tids: Vec<i32> = h.graph.spins(e).unwrap().iter().map(|s| s.tid.0).collect();
            tids.sort_unstable();
            assert_eq!(
                tids,
                (1..=e as i32 + 1).collect::<Vec<i32>>(),
                "as of epoch {e}"
            );
        }
        h.end();
    }
}
