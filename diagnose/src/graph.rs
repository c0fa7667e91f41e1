//! The event graph: segments as nodes, causal edges as edges, with the indexes the walk needs.
//!
//! ```text
//!  segments (input order) ── node i of the petgraph is segments()[i]
//!  by_id: node indices sorted by SegmentId = (tid, seq) ── one contiguous run per thread,
//!         in trace order, so "next / previous segment of the thread" is ±1 in by_id
//!  threads: Tid → (start, len, first_seq) into by_id; lookup of a SegmentId is O(1) when the
//!         thread's ordinals are gapless, a binary search within the thread otherwise
//! ```
//!
//! Loading does no per-node allocation: the segments are moved in, nodes carry no weight and
//! edge weights are indices into [`Graph::edges`].

use crate::coverage::{Coverage, Partial};
use crate::stacks::{shown, CallStack, Frame, Stacks};
use crate::Error;
use argus_schema::{CausalEdge, EndCause, Nanos, Pid, Segment, SegmentId, Spin, ThreadInfo, Tid};
use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::Direction;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher for thread ids: the edge loader looks a thread up twice per edge,
/// and SipHash would dominate the load time.
#[derive(Default)]
struct TidHasher(u64);

impl Hasher for TidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_i32(&mut self, v: i32) {
        self.0 =
            (self.0.rotate_left(5) ^ u64::from(v as u32)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type TidMap<V> = HashMap<Tid, V, BuildHasherDefault<TidHasher>>;

/// The in-memory tables of a snapshot, as the CLI reads them. The diagnosis takes ownership.
#[derive(Clone, Debug, Default)]
pub struct GraphInput {
    /// Every segment, in any order.
    pub segments: Vec<Segment>,
    /// Every causal edge, in any order. Edges naming a segment that is not in `segments` are
    /// dropped (and counted, see [`Graph::dropped_edges`]).
    pub edges: Vec<CausalEdge>,
    /// Spinning vertices.
    pub spins: Vec<Spin>,
    /// Thread names.
    pub threads: Vec<ThreadInfo>,
    /// The end of the trace: where open segments end. When smaller than the latest segment end
    /// (for example zero when unknown) the latest segment end is used instead.
    pub trace_end_ns: Nanos,
}

/// An application marker (`trace_marker` write), e.g. `argus:hang-begin`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Marker {
    /// When it was written.
    pub ts: Nanos,
    /// Writing process.
    pub pid: Pid,
    /// Writing thread.
    pub tid: Tid,
    /// The text, trailing newline removed.
    pub text: String,
}

/// A hit of a hardware watchpoint on a shared data flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlagHit {
    /// When.
    pub ts: Nanos,
    /// Accessing process.
    pub pid: Pid,
    /// Accessing thread.
    pub tid: Tid,
    /// The watched address.
    pub addr: u64,
    /// A write (else a read).
    pub write: bool,
}

/// The application-level events of a trace the diagnosis uses: markers and data-flag
/// accesses. Read from the events table only when wanted (it is the largest table).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AppEvents {
    /// Markers, in time order.
    pub markers: Vec<Marker>,
    /// Data-flag accesses, in time order.
    pub flags: Vec<FlagHit>,
}

impl AppEvents {
    /// Picks the markers and flag accesses out of decoded events.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a argus_schema::Event>) -> AppEvents {
        let mut out = AppEvents::default();
        for e in events {
            out.push(e);
        }
        out.sort();
        out
    }

    /// Adds one event if it is a marker or a flag access.
    pub fn push(&mut self, e: &argus_schema::Event) {
        match &e.kind {
            argus_schema::EventKind::Marker { text } => self.markers.push(Marker {
                ts: e.ts,
                pid: e.pid,
                tid: e.tid,
                text: text.trim_end().to_string(),
            }),
            argus_schema::EventKind::FlagAccess { addr, write } => self.flags.push(FlagHit {
                ts: e.ts,
                pid: e.pid,
                tid: e.tid,
                addr: *addr,
                write: *write,
            }),
            _ => {}
        }
    }

    /// Sorts both lists by time.
    pub fn sort(&mut self) {
        self.markers.sort_by_key(|m| (m.ts, m.tid));
        self.flags.sort_by_key(|f| (f.ts, f.tid));
    }
}

#[derive(Clone, Copy, Debug)]
struct ThreadRange {
    start: u32,
    len: u32,
    first_seq: u32,
}

/// The event graph of one snapshot. Build it once with [`Graph::new`], then query it.
#[derive(Debug)]
pub struct Graph {
    segments: Vec<Segment>,
    edges: Vec<CausalEdge>,
    spins: Vec<Spin>,
    threads: Vec<ThreadInfo>,
    trace_end_ns: Nanos,
    graph: DiGraph<(), u32, u32>,
    /// `(segment id, node)` sorted by id.
    by_id: Vec<(u64, u32)>,
    ranges: TidMap<ThreadRange>,
    thread_info: TidMap<u32>,
    dropped_edges: u64,
    duplicate_segments: u64,
    app: AppEvents,
    stacks: Stacks,
    /// Time ranges in which some CPU lost events (sorted, merged): [`Graph::lost_within`].
    lost: Vec<(Nanos, Nanos)>,
    /// Set for a partial graph ([`Graph::partial`]): what it covers, what reads lacked.
    partial: Option<Box<Partial>>,
    /// The main thread of each process that has no thread numbered as it (a macOS trace,
    /// whose thread ids and pids are separate numbers): [`Graph::main_thread`].
    other_mains: HashMap<i32, Tid>,
}

impl Graph {
    /// Builds the graph: indexes segments by id and by thread, adds every edge whose two ends
    /// exist. Fails only when the tables exceed the 32-bit node or edge index space.
    pub fn new(input: GraphInput) -> Result<Graph, Error> {
        let GraphInput {
            segments,
            edges,
            spins,
            threads,
            trace_end_ns,
        } = input;
        let max = u32::MAX as usize - 1;
        if segments.len() > max {
            return Err(Error::TooLarge {
                table: "segments",
                rows: segments.len(),
            });
        }
        if edges.len() > max {
            return Err(Error::TooLarge {
                table: "edges",
                rows: edges.len(),
            });
        }

        let mut graph = DiGraph::<(), u32, u32>::with_capacity(segments.len(), edges.len());
        for _ in 0..segments.len() {
            graph.add_node(());
        }

        // Sort node indices by id (a u64 key sort, no moves of the segments themselves).
        let mut keyed: Vec<(u64, u32)> = segments
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.0, i as u32))
            .collect();
        keyed.sort_unstable();
        let before = keyed.len();
        keyed.dedup_by_key(|(id, _)| *id);
        let by_id = keyed;
        let duplicate_segments = (before - by_id.len()) as u64;
        if duplicate_segments > 0 {
            tracing::warn!(
                duplicates = duplicate_segments,
                "segments table holds duplicate ids; keeping the first of each"
            );
        }

        let mut ranges: TidMap<ThreadRange> = TidMap::default();
        let mut i = 0usize;
        while i < by_id.len() {
            let first = SegmentId(by_id[i].0);
            let tid = first.tid();
            let mut j = i + 1;
            while j < by_id.len() && SegmentId(by_id[j].0).tid() == tid {
                j += 1;
            }
            ranges.insert(
                tid,
                ThreadRange {
                    start: i as u32,
                    len: (j - i) as u32,
                    first_seq: first.seq(),
                },
            );
            i = j;
        }

        let mut thread_info = TidMap::default();
        for (i, t) in threads.iter().enumerate() {
            thread_info.insert(t.tid, i as u32);
        }

        let trace_end_ns = segments
            .iter()
            .map(|s| s.end_ns)
            .max()
            .unwrap_or_default()
            .max(trace_end_ns);

        let mut g = Graph {
            segments,
            edges: Vec::new(),
            spins,
            threads,
            trace_end_ns,
            graph,
            by_id,
            ranges,
            thread_info,
            dropped_edges: 0,
            duplicate_segments,
            app: AppEvents::default(),
            stacks: Stacks::default(),
            lost: Vec::new(),
            partial: None,
            other_mains: HashMap::new(),
        };
        g.other_mains = other_mains(&g.threads);

        let mut kept = Vec::with_capacity(edges.len());
        let mut dropped = 0u64;
        for e in edges {
            // Kinds the edge-kind table keeps out of the walk's graph (the weak wait↔wake
            // pairs: every wake-up has one, so they would compete with the real causes at
            // every step). They stay in the snapshot (stats, Perfetto, notebooks).
            if !e.kind.info().walked {
                continue;
            }
            match (g.node_of(e.src), g.node_of(e.dst)) {
                (Some(a), Some(b)) => {
                    let w = kept.len() as u32;
                    g.graph.add_edge(NodeIndex::new(a), NodeIndex::new(b), w);
                    kept.push(e);
                }
                _ => dropped += 1,
            }
        }
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "edges naming unknown segments were dropped from the event graph"
            );
        }
        g.edges = kept;
        g.dropped_edges = dropped;
        Ok(g)
    }

    /// The same graph without the edges `drop` picks (a person marked them wrong): markers,
    /// flag accesses, stacks and lost ranges are kept. A partial graph is refused.
    pub fn without_edges(&self, drop: impl Fn(&CausalEdge) -> bool) -> Result<Graph, Error> {
        if self.partial.is_some() {
            return Err(Error::Partial);
        }
        let mut g = Graph::new(GraphInput {
            segments: self.segments.clone(),
            edges: self.edges.iter().filter(|e| !drop(e)).cloned().collect(),
            spins: self.spins.clone(),
            threads: self.threads.clone(),
            trace_end_ns: self.trace_end_ns,
        })?;
        g.app = self.app.clone();
        g.stacks = self.stacks.clone();
        g.lost = self.lost.clone();
        g.dropped_edges = self.dropped_edges;
        Ok(g)
    }

    /// A partial graph: `input` holds part of a larger graph, `coverage` says which part.
    /// Its reads record what they lacked ([`Graph::needs`]; module `partial`).
    pub fn partial(input: GraphInput, coverage: Coverage) -> Result<Graph, Error> {
        let mut g = Graph::new(input)?;
        g.partial = Some(Box::new(Partial::new(coverage)));
        Ok(g)
    }

    /// Whether this is a partial graph ([`Graph::partial`]).
    pub fn is_partial(&self) -> bool {
        self.partial.is_some()
    }

    pub(crate) fn partial_state(&self) -> Option<&Partial> {
        self.partial.as_deref()
    }

    /// Attaches the trace's markers and data-flag accesses (see [`AppEvents`]).
    pub fn set_app_events(&mut self, mut app: AppEvents) {
        app.sort();
        self.app = app;
    }

    /// Attaches the time ranges in which some CPU lost events (the manifest's `lost_ranges`),
    /// given in any order.
    pub fn set_lost_ranges(&mut self, ranges: impl IntoIterator<Item = (Nanos, Nanos)>) {
        let mut r: Vec<(Nanos, Nanos)> = ranges
            .into_iter()
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        r.sort_unstable();
        self.lost.clear();
        for (from, to) in r {
            match self.lost.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => self.lost.push((from, to)),
            }
        }
    }

    /// How much of `[from, to)` falls in a lost-events range, in nanoseconds: the part of a
    /// window in which the trace may miss a thread's waits, wake-ups and edges.
    pub fn lost_within(&self, from: Nanos, to: Nanos) -> u64 {
        let start = self.lost.partition_point(|r| r.1 < from);
        self.lost[start..]
            .iter()
            .take_while(|r| r.0 < to)
            .map(|r| r.1.min(to).0.saturating_sub(r.0.max(from).0))
            .sum()
    }

    /// The markers and data-flag accesses attached with [`Graph::set_app_events`].
    pub fn app_events(&self) -> &AppEvents {
        &self.app
    }

    /// Attaches the call stacks of the trace (`stacks.parquet`, from `argus record
    /// --stacks`): questions and report steps then show the stack of the syscall that
    /// blocked or sent.
    pub fn set_stacks(&mut self, stacks: Vec<CallStack>) {
        self.stacks = Stacks::new(stacks);
    }

    /// How many call stacks are attached.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// The stack of the syscall segment `s` blocked in (the shown frames; empty when the
    /// trace has none).
    pub fn blocking_stack(&self, s: &Segment) -> Vec<Frame> {
        self.stacks.blocking(s).map(shown).unwrap_or_default()
    }

    /// The stack of the syscall through which segment `s` acted at `ts` (woke, wrote,
    /// signalled); empty when the trace has none.
    pub fn sending_stack(&self, s: &Segment, ts: Nanos) -> Vec<Frame> {
        self.stacks.sending(s, ts).map(shown).unwrap_or_default()
    }

    /// Position in `by_id` of a segment id.
    fn pos_of(&self, id: SegmentId) -> Option<usize> {
        let r = self.ranges.get(&id.tid())?;
        let (start, len) = (r.start as usize, r.len as usize);
        let guess = id.seq().checked_sub(r.first_seq).map(|d| d as usize);
        if let Some(d) = guess.filter(|d| *d < len) {
            if self.by_id[start + d].0 == id.0 {
                return Some(start + d);
            }
        }
        let slice = &self.by_id[start..start + len];
        slice
            .binary_search_by_key(&id.0, |&(k, _)| k)
            .ok()
            .map(|p| start + p)
    }

    fn node_of(&self, id: SegmentId) -> Option<usize> {
        self.pos_of(id).map(|p| self.by_id[p].1 as usize)
    }

    fn thread_slice(&self, tid: Tid) -> &[(u64, u32)] {
        match self.ranges.get(&tid) {
            Some(r) => &self.by_id[r.start as usize..(r.start + r.len) as usize],
            None => &[],
        }
    }

    /// The segment with this id.
    pub fn segment(&self, id: SegmentId) -> Option<&Segment> {
        let s = self.segment_quiet(id);
        if s.is_none() {
            self.check_absent(id);
        }
        s
    }

    /// The segment with this id, if held (a partial graph records no need).
    pub(crate) fn segment_quiet(&self, id: SegmentId) -> Option<&Segment> {
        self.node_of(id).map(|n| &self.segments[n])
    }

    /// The petgraph node of a segment.
    pub fn node(&self, id: SegmentId) -> Option<NodeIndex<u32>> {
        let n = self.node_of(id).map(NodeIndex::new);
        if n.is_none() {
            self.check_absent(id);
        }
        n
    }

    /// The underlying petgraph: node `i` is `segments()[i]`, an edge's weight is its index in
    /// [`Graph::edges`].
    pub fn petgraph(&self) -> &DiGraph<(), u32, u32> {
        &self.graph
    }

    /// Every segment, in input order (the node order).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Every edge kept in the graph.
    pub fn edges(&self) -> &[CausalEdge] {
        &self.edges
    }

    /// The spinning vertices of the snapshot.
    pub fn spins(&self) -> &[Spin] {
        &self.spins
    }

    /// The threads table.
    pub fn threads(&self) -> &[ThreadInfo] {
        &self.threads
    }

    /// The end of the trace (where open segments end).
    pub fn trace_end_ns(&self) -> Nanos {
        self.trace_end_ns
    }

    /// How many input edges named a segment that does not exist.
    pub fn dropped_edges(&self) -> u64 {
        self.dropped_edges
    }

    /// How many input segments repeated an id already seen (only the first is indexed).
    pub fn duplicate_segments(&self) -> u64 {
        self.duplicate_segments
    }

    /// When a segment ends: its `end_ns`, or the end of the trace for an open segment.
    pub fn end_of(&self, s: &Segment) -> Nanos {
        if s.end == EndCause::Open {
            s.end_ns.max(self.trace_end_ns)
        } else {
            s.end_ns
        }
    }

    /// The segments of a thread, in trace order.
    pub fn thread_segments(
        &self,
        tid: Tid,
    ) -> impl DoubleEndedIterator<Item = &Segment> + ExactSizeIterator + '_ {
        self.check_thread(tid);
        self.thread_slice(tid)
            .iter()
            .map(move |&(_, n)| &self.segments[n as usize])
    }

    /// Every thread (and interrupt pseudo-thread) that has segments.
    pub fn thread_ids(&self) -> Box<dyn Iterator<Item = Tid> + '_> {
        match self.partial_threads() {
            Some(Some(all)) => Box::new(all.iter().map(|(t, _)| *t)),
            _ => Box::new(self.ranges.keys().copied()),
        }
    }

    /// The next segment of the same thread.
    pub fn next_in_thread(&self, id: SegmentId) -> Option<&Segment> {
        self.check_step(id, true);
        let p = self.pos_of(id)?;
        let next = self.segments.get(self.by_id.get(p + 1)?.1 as usize)?;
        (next.id.tid() == id.tid()).then_some(next)
    }

    /// The previous segment of the same thread.
    pub fn prev_in_thread(&self, id: SegmentId) -> Option<&Segment> {
        self.check_step(id, false);
        let p = self.pos_of(id)?.checked_sub(1)?;
        let prev = &self.segments[self.by_id[p].1 as usize];
        (prev.id.tid() == id.tid()).then_some(prev)
    }

    /// The segment of `tid` running or waiting at time `t`: the last one that started at or
    /// before `t`, else (the thread appeared later) its first segment.
    pub fn segment_at(&self, tid: Tid, t: Nanos) -> Option<&Segment> {
        self.check_window(tid, t, t);
        let slice = self.thread_slice(tid);
        let p = slice.partition_point(|&(_, n)| self.segments[n as usize].start_ns <= t);
        let (_, n) = if p == 0 {
            *slice.first()?
        } else {
            slice[p - 1]
        };
        Some(&self.segments[n as usize])
    }

    /// The segments of `tid` that overlap `[from, to)` (open segments reach the trace end).
    pub fn segments_overlapping(
        &self,
        tid: Tid,
        from: Nanos,
        to: Nanos,
    ) -> impl Iterator<Item = &Segment> + '_ {
        self.check_window(tid, from, to);
        let slice = self.thread_slice(tid);
        let first = slice.partition_point(|&(_, n)| self.segments[n as usize].start_ns <= from);
        let begin = first.saturating_sub(1);
        slice[begin..]
            .iter()
            .map(move |&(_, n)| &self.segments[n as usize])
            .take_while(move |s| s.start_ns < to)
            .filter(move |s| self.end_of(s) > from)
    }

    /// The edges into a segment.
    pub fn incoming(&self, id: SegmentId) -> impl Iterator<Item = &CausalEdge> + '_ {
        self.check_edges(id, true);
        self.adjacent(id, Direction::Incoming)
    }

    /// The edges out of a segment.
    pub fn outgoing(&self, id: SegmentId) -> impl Iterator<Item = &CausalEdge> + '_ {
        self.check_edges(id, false);
        self.adjacent(id, Direction::Outgoing)
    }

    fn adjacent(&self, id: SegmentId, dir: Direction) -> impl Iterator<Item = &CausalEdge> + '_ {
        let node = self.node_of(id);
        node.into_iter().flat_map(move |n| {
            self.graph
                .edges_directed(NodeIndex::new(n), dir)
                .map(move |e| &self.edges[*e.weight() as usize])
        })
    }

    /// The edge behind a petgraph edge index.
    pub fn edge(&self, e: EdgeIndex<u32>) -> Option<&CausalEdge> {
        let w = *self.graph.edge_weight(e)?;
        self.edges.get(w as usize)
    }

    /// The threads-table row of a thread.
    pub fn thread(&self, tid: Tid) -> Option<&ThreadInfo> {
        self.thread_info
            .get(&tid)
            .and_then(|&i| self.threads.get(i as usize))
    }

    /// The process of a thread, from the threads table, else from its segments.
    pub fn pid_of(&self, tid: Tid) -> Option<Pid> {
        self.thread(tid)
            .map(|t| t.pid)
            .or_else(|| self.thread_segments(tid).next().map(|s| s.pid))
    }

    /// The thread's name (`comm`); interrupt pseudo-threads are `irq/cpuN`.
    pub fn comm(&self, tid: Tid) -> String {
        if let Some(cpu) = tid.irq_cpu() {
            return format!("irq/cpu{}", cpu.0);
        }
        match self.thread(tid) {
            Some(t) => t.comm.clone(),
            None => format!("tid {}", tid.0),
        }
    }

    /// The process name of a thread (empty for interrupts and unknown threads).
    pub fn process_name(&self, tid: Tid) -> String {
        if tid.irq_cpu().is_some() {
            return "kernel".to_string();
        }
        match self.thread(tid) {
            Some(t) if !t.process.is_empty() => t.process.clone(),
            Some(t) => t.comm.clone(),
            None => String::new(),
        }
    }

    /// A readable name of a thread: `hangdemo (pid 12)` for a main thread, `thread worker (tid
    /// 13) of hangdemo` for another thread, `interrupts on cpu1` for a pseudo-thread.
    pub fn describe(&self, tid: Tid) -> String {
        if let Some(cpu) = tid.irq_cpu() {
            return format!("interrupts on cpu{}", cpu.0);
        }
        match self.thread(tid) {
            Some(t) if self.is_main(t.tid, t.pid) => format!("{} (pid {})", t.comm, t.pid.0),
            Some(t) => {
                let process = if t.process.is_empty() {
                    format!("pid {}", t.pid.0)
                } else {
                    t.process.clone()
                };
                format!("thread {} (tid {}) of {}", t.comm, t.tid.0, process)
            }
            None => match self.pid_of(tid) {
                Some(p) if p.0 != tid.0 => format!("tid {} of pid {}", tid.0, p.0),
                _ => format!("tid {}", tid.0),
            },
        }
    }

    /// The main thread of a process: the thread whose id is the pid (Linux), else (a macOS
    /// trace, where thread ids and pids are separate numbers) the thread of the process
    /// that none of its own threads created, the earliest started (there from the start
    /// first), the lowest id among equals.
    pub fn main_thread(&self, pid: Pid) -> Tid {
        self.other_mains.get(&pid.0).copied().unwrap_or(Tid(pid.0))
    }

    /// Whether `tid` is the main thread of its process `pid` (see [`Graph::main_thread`]).
    pub fn is_main(&self, tid: Tid, pid: Pid) -> bool {
        tid.0 == pid.0 || self.other_mains.get(&pid.0) == Some(&tid)
    }

    /// The threads of a process: from the threads table and from the segments.
    pub fn threads_of(&self, pid: Pid) -> Vec<Tid> {
        let mut out: Vec<Tid> = self
            .threads
            .iter()
            .filter(|t| t.pid == pid)
            .map(|t| t.tid)
            .collect();
        match self.partial_threads() {
            // A partial graph: every thread's process as the store knows it.
            Some(Some(all)) => out.extend(
                all.iter()
                    .filter(|(t, p)| t.is_task() && *p == pid)
                    .map(|(t, _)| *t),
            ),
            _ => {
                for (&tid, r) in &self.ranges {
                    if tid.is_task()
                        && self.segments[self.by_id[r.start as usize].1 as usize].pid == pid
                    {
                        out.push(tid);
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The main threads of the processes with no thread numbered as them (see
/// [`Graph::main_thread`]), in a trace whose processes mostly have none (macOS). On Linux
/// every process has one but those whose main thread exited before the trace began, and
/// those keep having no main thread.
fn other_mains(threads: &[ThreadInfo]) -> HashMap<i32, Tid> {
    // User processes only: kernel threads are each their own task on both systems.
    let user = || {
        threads
            .iter()
            .filter(|t| !t.kernel && t.tid.is_task() && t.tid.0 != 0)
    };
    let numbered: std::collections::HashSet<i32> = user()
        .filter(|t| t.tid.0 == t.pid.0)
        .map(|t| t.pid.0)
        .collect();
    let processes: std::collections::HashSet<i32> = user().map(|t| t.pid.0).collect();
    if numbered.len() * 2 >= processes.len() {
        return HashMap::new();
    }
    let pid_of: HashMap<i32, i32> = threads.iter().map(|t| (t.tid.0, t.pid.0)).collect();
    let mut best: HashMap<i32, (Option<Nanos>, i32)> = HashMap::new();
    for t in user() {
        if numbered.contains(&t.pid.0) {
            continue;
        }
        // Created by a thread of its own process: not the main one.
        if t.parent.is_some_and(|p| pid_of.get(&p.0) == Some(&t.pid.0)) {
            continue;
        }
        // There from the start (no start time) sorts first.
        let key = (t.start_ns, t.tid.0);
        let e = best.entry(t.pid.0).or_insert(key);
        if key < *e {
            *e = key;
        }
    }
    best.into_iter().map(|(p, (_, t))| (p, Tid(t))).collect()
}
