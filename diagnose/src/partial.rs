//! Partial graphs: the part of an event graph a diagnosis reads, fetched on demand from a
//! store that holds the whole graph (the live arrangements of `argus start`), with an exact
//! account of what is missing.
//!
//! A [`Graph`] built with [`Graph::partial`] holds some segments and edges of a larger graph
//! together with a [`Coverage`]: which threads' segments are complete over which stretches,
//! which segments are known not to exist, whose incoming or outgoing edges are complete.
//! Every accessor the walk uses answers from what is there and, when the answer could differ
//! from the whole graph's, records a [`Need`] ([`Graph::needs`]): what to fetch so that it
//! cannot. A diagnosis run on a partial graph that recorded no need read exactly what it
//! would have read in the whole graph, so it *is* the whole graph's diagnosis (the walk is
//! deterministic: same reads, same answers, same report). Until then the caller fetches what
//! was needed ([`Extract::add`]) and runs it again:
//!
//! ```text
//!  needs (seed: the hang's slice, its thread)
//!    └─► store.fetch(needs) ─► Parts ─► Extract (accumulated) ─► Graph::partial
//!          ▲                                                         │ diagnose
//!          └──────────── graph.needs() non-empty ◄───────────────────┘
//!                        empty: the whole graph's answer
//! ```
//!
//! Each round adds at least one part the walk asked for, so the rounds end (at worst when
//! everything the walk can reach is fetched). Questions asked during the rounds go through
//! [`Replay`]: a question asked while nothing was missing yet is the whole graph's question
//! (its reads were exact) and is put to the real oracle once, then replayed in later rounds;
//! one asked after a miss takes the default without bothering anyone (that round is thrown
//! away).
//!
//! **Threads in order.** A [`Run`] is a stretch of one thread's segments fetched whole and in
//! order: every segment of the thread whose id lies between the run's first and last is in
//! the graph, and the flags say whether the run starts at the thread's first segment and
//! ends at its last. This relies on a thread's segment ids (their ordinals) growing with their
//! start times, as the rule machines number them.
//!
//! What a partial graph does not cover and the walk does not read (application markers, data
//! flag hits, call stacks) is given whole or not at all by the caller.

pub use crate::coverage::{Coverage, Need, Parts, Run};

use crate::graph::Graph;
use crate::report::Question;
use crate::{Oracle, Reply};
use argus_schema::{CausalEdge, Nanos, Pid, Segment, SegmentId, Tid};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// How a partial graph checks one access (called by [`Graph`]'s accessors).
impl Graph {
    /// `segment(id)` found nothing: is that the whole graph's answer?
    pub(crate) fn check_absent(&self, id: SegmentId) {
        if let Some(p) = self.partial_state() {
            if !p.coverage.known_absent(id) {
                p.need(Need::Segment { id });
            }
        }
    }

    /// A read of every segment of `tid`.
    pub(crate) fn check_thread(&self, tid: Tid) {
        if let Some(p) = self.partial_state() {
            if !p.coverage.whole_thread(tid) {
                p.need(Need::Thread { tid });
            }
        }
    }

    /// A step to the next (`forward`) or previous segment of `id`'s thread.
    pub(crate) fn check_step(&self, id: SegmentId, forward: bool) {
        let Some(p) = self.partial_state() else {
            return;
        };
        let c = &p.coverage;
        if c.whole_thread(id.tid()) {
            return;
        }
        let known = c.run_of(id).is_some_and(|(first, last, at_start, at_end)| {
            if forward {
                id < last || at_end
            } else {
                id > first || at_start
            }
        });
        if known {
            return;
        }
        // A segment not held records its own need (in `segment`); the window comes next.
        if let Some(s) = self.segment(id) {
            p.need(Need::Window {
                tid: id.tid(),
                from_ns: s.start_ns,
                to_ns: s.start_ns,
            });
        }
    }

    /// A read of `tid`'s segments from the one running at `from` to those starting before
    /// `to` (`segments_overlapping`, `segment_at`).
    pub(crate) fn check_window(&self, tid: Tid, from: Nanos, to: Nanos) {
        let Some(p) = self.partial_state() else {
            return;
        };
        let c = &p.coverage;
        if c.whole_thread(tid) {
            return;
        }
        let start_of = |id: SegmentId| self.segment_quiet(id).map(|s| s.start_ns);
        let covered = c.runs.get(&tid).is_some_and(|runs| {
            runs.iter().any(|&(first, last, at_start, at_end)| {
                (at_start || start_of(first).is_some_and(|s| s <= from))
                    && (at_end || start_of(last).is_some_and(|s| s >= to && s > from))
            })
        });
        if !covered {
            p.need(Need::Window {
                tid,
                from_ns: from,
                to_ns: to,
            });
        }
    }

    /// A read of the edges into (`incoming`) or out of a segment.
    pub(crate) fn check_edges(&self, id: SegmentId, incoming: bool) {
        let Some(p) = self.partial_state() else {
            return;
        };
        let c = &p.coverage;
        if incoming && !c.incoming.contains(&id) {
            p.need(Need::Incoming { id });
        } else if !incoming && !c.outgoing.contains(&id) {
            p.need(Need::Outgoing { id });
        }
    }

    /// Every thread with its process, when a partial graph has them (else the need of them).
    pub(crate) fn partial_threads(&self) -> Option<Option<&[(Tid, Pid)]>> {
        let p = self.partial_state()?;
        match &p.coverage.threads {
            Some(t) => Some(Some(t)),
            None => {
                p.need(Need::Threads);
                Some(None)
            }
        }
    }

    /// What this partial graph lacked for the reads made of it so far (empty for a whole
    /// graph, or when every read was exact).
    pub fn needs(&self) -> Vec<Need> {
        self.partial_state().map(|p| p.needs()).unwrap_or_default()
    }

    /// Whether a read so far lacked something ([`Graph::needs`] is not empty).
    pub fn lacks(&self) -> bool {
        self.partial_state().is_some_and(|p| p.has_needs())
    }
}

/// The parts fetched so far for one diagnosis, accumulated round by round.
#[derive(Clone, Debug, Default)]
pub struct Extract {
    segments: BTreeMap<SegmentId, Segment>,
    edges: BTreeSet<CausalEdge>,
    coverage: Coverage,
    /// Needs answered so far (not asked again).
    asked: HashSet<Need>,
}

impl Extract {
    /// Nothing fetched yet.
    pub fn new() -> Extract {
        Extract::default()
    }

    /// Adds a fetch's parts.
    pub fn add(&mut self, parts: Parts) {
        for s in parts.segments {
            self.segments.insert(s.id, s);
        }
        self.edges.extend(parts.edges);
        let c = &mut self.coverage;
        for r in &parts.runs {
            c.add_run(r);
        }
        c.absent.extend(parts.absent);
        c.incoming.extend(parts.incoming);
        c.outgoing.extend(parts.outgoing);
        if parts.threads.is_some() {
            c.threads = parts.threads;
        }
    }

    /// Of `needs`, those not fetched before (each need is fetched once: the store answers it
    /// whole); marks them fetched.
    pub fn fresh(&mut self, needs: Vec<Need>) -> Vec<Need> {
        needs
            .into_iter()
            .filter(|n| self.asked.insert(n.clone()))
            .collect()
    }

    /// Segments held.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Edges held.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// The partial graph of what is held, with the tables given whole: threads, spins, the
    /// trace end (the watermark: where open segments end), the lost-events ranges and the
    /// application events.
    pub fn graph(
        &self,
        threads: Vec<argus_schema::ThreadInfo>,
        spins: Vec<argus_schema::Spin>,
        trace_end_ns: Nanos,
        lost: &[(Nanos, Nanos)],
        app: &crate::AppEvents,
    ) -> Result<Graph, crate::Error> {
        let input = crate::GraphInput {
            segments: self.segments.values().cloned().collect(),
            // In their order (`Ord`), as a snapshot lists them: a segment's edges are then
            // met in the same order as in the whole graph.
            edges: self.edges.iter().cloned().collect(),
            spins,
            threads,
            trace_end_ns,
        };
        let mut g = Graph::partial(input, self.coverage.clone())?;
        g.set_lost_ranges(lost.iter().copied());
        if *app != crate::AppEvents::default() {
            g.set_app_events(app.clone());
        }
        Ok(g)
    }
}

/// More rounds than this means the walk keeps stepping one segment at a time into the
/// unknown: [`rounds`] stops with [`Error::TooManyRounds`](crate::Error::TooManyRounds).
pub const MAX_ROUNDS: usize = 200;

/// The tables a partial graph is given whole, and where it ends.
#[derive(Clone, Debug, Default)]
pub struct Whole {
    /// Threads.
    pub threads: Vec<argus_schema::ThreadInfo>,
    /// Every spinning vertex.
    pub spins: Vec<argus_schema::Spin>,
    /// Where open segments end (a snapshot's `trace_end_ns`; the live graph's watermark).
    pub trace_end_ns: Nanos,
    /// Lost-events ranges.
    pub lost: Vec<(Nanos, Nanos)>,
    /// The markers and data-flag accesses (a snapshot's events table has them; the live
    /// job keeps those of its retained window).
    pub app: crate::AppEvents,
}

/// What the [`rounds`] cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundStats {
    /// Diagnoses run.
    pub rounds: usize,
    /// Needs fetched.
    pub needs: usize,
    /// Segments of the final partial graph.
    pub segments: usize,
    /// Edges of the final partial graph.
    pub edges: usize,
    /// The last round still lacked something already fetched (a store answered a need
    /// short): the answer may differ from the whole graph's. Never expected.
    pub inexact: bool,
}

/// Runs `body` on partial graphs fetched through `fetch`, from `seed` on, until a round lacks
/// nothing new, and returns that round's result (see the module docs).
///
/// `fetch` is the store (the live arrangements, a socket to them, [`fetch_whole`]); `body`
/// the diagnosis, target resolution included (it reads the graph too), its questions through
/// a [`Replay`]. A `body` error ends the rounds only when its round lacked nothing (else it
/// may be the missing data's: "thread not in the trace").
pub fn rounds<T, E: From<crate::Error>>(
    whole: &Whole,
    seed: Vec<Need>,
    mut fetch: impl FnMut(&[Need]) -> Result<Parts, E>,
    mut body: impl FnMut(&Graph) -> Result<T, E>,
) -> Result<(T, RoundStats), E> {
    let mut extract = Extract::new();
    let mut stats = RoundStats::default();
    let mut needs = extract.fresh(seed);
    loop {
        if !needs.is_empty() {
            stats.needs += needs.len();
            extract.add(fetch(&needs)?);
        }
        let graph = extract.graph(
            whole.threads.clone(),
            whole.spins.clone(),
            whole.trace_end_ns,
            &whole.lost,
            &whole.app,
        )?;
        let out = body(&graph);
        stats.rounds += 1;
        let lacked = graph.needs();
        needs = extract.fresh(lacked.clone());
        if needs.is_empty() {
            stats.segments = extract.segment_count();
            stats.edges = extract.edge_count();
            stats.inexact = !lacked.is_empty();
            if stats.inexact {
                tracing::warn!(
                    needs = ?lacked,
                    "the store answered needs short; the diagnosis may differ from the whole graph's"
                );
            }
            return out.map(|v| (v, stats));
        }
        if stats.rounds >= MAX_ROUNDS {
            return Err(crate::Error::TooManyRounds {
                rounds: stats.rounds,
            }
            .into());
        }
    }
}

/// Answers `needs` from a whole graph: the reference store (tests compare the live
/// arrangements' answers and diagnoses with it). A slice is not a property of the graph here:
/// `Slice` needs are answered with nothing (they only seed).
pub fn fetch_whole(g: &Graph, needs: &[Need]) -> Parts {
    let mut parts = Parts::default();
    let mut points: BTreeSet<SegmentId> = BTreeSet::new();
    let mut held: BTreeSet<SegmentId> = BTreeSet::new();
    let mut edges: BTreeSet<CausalEdge> = BTreeSet::new();
    let mut stretch = |parts: &mut Parts, tid: Tid, segs: &[&Segment], at_start, at_end| {
        parts.runs.push(Run {
            tid,
            ids: segs.first().zip(segs.last()).map(|(a, b)| (a.id, b.id)),
            at_start,
            at_end,
        });
        held.extend(segs.iter().map(|s| s.id));
        parts.segments.extend(segs.iter().map(|s| (*s).clone()));
    };
    for need in needs {
        match *need {
            Need::Thread { tid } => {
                let segs: Vec<&Segment> = g.thread_segments(tid).collect();
                stretch(&mut parts, tid, &segs, true, true);
            }
            Need::Window {
                tid,
                from_ns,
                to_ns,
            } => {
                let all: Vec<&Segment> = g.thread_segments(tid).collect();
                let before = all.partition_point(|s| s.start_ns < from_ns);
                let after = all.partition_point(|s| s.start_ns <= to_ns);
                // The last one starting before (with any sharing its start), every one in
                // the stretch, the first one after (with any sharing its start).
                let lo = match before.checked_sub(1) {
                    Some(i) => all[..=i].partition_point(|s| s.start_ns < all[i].start_ns),
                    None => 0,
                };
                let hi = match all.get(after) {
                    Some(s) => all.partition_point(|x| x.start_ns <= s.start_ns),
                    None => all.len(),
                };
                // The ends as a store that scans from `from` knows them: none before `from`,
                // none after `to`.
                stretch(
                    &mut parts,
                    tid,
                    &all[lo..hi],
                    before == 0,
                    after == all.len(),
                );
            }
            Need::Segment { id } => {
                points.insert(id);
            }
            Need::Incoming { id } => {
                points.insert(id);
                for e in g.incoming(id) {
                    points.insert(e.src);
                    edges.insert(e.clone());
                }
                parts.incoming.push(id);
            }
            Need::Outgoing { id } => {
                points.insert(id);
                for e in g.outgoing(id) {
                    points.insert(e.dst);
                    edges.insert(e.clone());
                }
                parts.outgoing.push(id);
            }
            Need::Threads => {
                let mut all: Vec<(Tid, Pid)> = g
                    .thread_ids()
                    .filter_map(|t| g.thread_segments(t).next().map(|s| (t, s.pid)))
                    .collect();
                all.sort_unstable();
                parts.threads = Some(all);
            }
            Need::Slice { .. } => {}
        }
    }
    for id in points {
        if held.contains(&id) {
            continue;
        }
        match g.segment(id) {
            Some(s) => parts.segments.push(s.clone()),
            None => parts.absent.push(id),
        }
    }
    parts.edges = edges.into_iter().collect();
    parts
}

/// Questions across the rounds of a partial diagnosis (see the module docs): asked once,
/// replayed after.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    asked: Vec<(Question, Reply)>,
}

impl Replay {
    /// No question asked yet.
    pub fn new() -> Replay {
        Replay::default()
    }

    /// The oracle of one round on `graph`: replays the answers of earlier rounds, asks
    /// `inner` what is new while `graph` lacks nothing, takes the default otherwise.
    pub fn round<'a>(
        &'a mut self,
        graph: &'a Graph,
        inner: &'a mut dyn Oracle,
    ) -> impl Oracle + 'a {
        ReplayRound {
            replay: self,
            graph,
            inner,
            next: 0,
        }
    }
}

struct ReplayRound<'a> {
    replay: &'a mut Replay,
    graph: &'a Graph,
    inner: &'a mut dyn Oracle,
    next: usize,
}

impl Oracle for ReplayRound<'_> {
    fn ask(&mut self, q: &Question) -> Reply {
        if self.graph.lacks() {
            // This round is thrown away: nobody is asked what the whole graph may not ask.
            return Reply::Default;
        }
        let i = self.next;
        self.next += 1;
        if let Some((asked, reply)) = self.replay.asked.get(i) {
            if asked.same_as(q) {
                return *reply;
            }
            // A different question at this point (the graph moved on between rounds): what
            // was answered after it no longer applies.
            self.replay.asked.truncate(i);
        }
        let reply = self.inner.ask(q);
        self.replay.asked.push((q.clone(), reply));
        reply
    }
}
