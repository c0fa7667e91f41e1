//! Per-CPU merge, thread table and epoch batching.
//!
//! ```text
//!  cpu0: Decoded ─┐
//!  cpu1: Decoded ─┼─► k-way merge by (ts, cpu) ─► ThreadTable (pid, comm, fork/exit) ─► Event
//!  cpuN: Decoded ─┘                                 seq = 0, 1, 2, ...
//! ```
//!
//! Each input is one CPU's stream in its own order (monotonic in time: the replay reader checks
//! it). The merge releases the smallest `(ts, cpu)` head, so records of one CPU keep their
//! order and equal timestamps on different CPUs come out lowest CPU first: the output is
//! deterministic.
//!
//! The thread table resolves `pid` as records arrive in time order: it starts from `proc.json`
//! (threads alive at the start), learns creations from `Fork` (the child's process is the
//! parent's when the fork made a thread, else the child itself), names from every comm the
//! records carry (switch `prev_comm`/`next_comm`, fork/newtask child comm, exec file name,
//! `task_rename`), and exits. A tid never seen before is its own process (`pid == tid`).

use crate::convert::{Comm, Decoded, ForkSource};
use crate::error::IngestError;
use crate::tracedir::ProcEntry;
use argus_schema::{Event, EventKind, Nanos, Pid, ThreadInfo, Tid};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher for small integer keys (tids): one multiply per lookup instead of
/// SipHash's rounds. Tids are not attacker-chosen in a way that matters here: a trace is the
/// user's own recording.
#[derive(Clone, Copy, Debug, Default)]
struct TidHasher(u64);

impl Hasher for TidHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    #[inline]
    fn write_i32(&mut self, v: i32) {
        self.write_u64(v as u32 as u64);
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type TidMap<V> = HashMap<i32, V, BuildHasherDefault<TidHasher>>;

/// `kthreadd`: every kernel thread is its child.
const KTHREADD: i32 = 2;

#[derive(Clone, Debug)]
struct Entry {
    pid: i32,
    comm: Comm,
    parent: Option<i32>,
    start_ns: Option<Nanos>,
    exit_ns: Option<Nanos>,
    kernel: bool,
}

impl Entry {
    fn unknown(tid: i32) -> Entry {
        Entry {
            pid: tid,
            comm: if tid == 0 {
                Comm::new(b"swapper")
            } else {
                Comm::default()
            },
            parent: None,
            start_ns: None,
            exit_ns: None,
            kernel: tid == 0 || tid == KTHREADD,
        }
    }
}

/// What Argus knows about every thread of the trace, updated in time order.
#[derive(Clone, Debug, Default)]
pub struct ThreadTable {
    threads: TidMap<Entry>,
}

impl ThreadTable {
    /// An empty table.
    pub fn new() -> ThreadTable {
        ThreadTable::default()
    }

    /// A table seeded with the threads alive at the start (`proc.json`).
    pub fn from_proc(entries: &[ProcEntry]) -> ThreadTable {
        let mut t = ThreadTable::new();
        for e in entries {
            t.threads.insert(
                e.tid,
                Entry {
                    pid: e.pid,
                    comm: Comm::new(e.comm.as_bytes()),
                    // /proc tells the parent of a process; who created a thread it does not.
                    parent: (e.tid == e.pid && e.ppid > 0).then_some(e.ppid),
                    start_ns: None,
                    exit_ns: None,
                    kernel: e.kernel,
                },
            );
        }
        t
    }

    fn entry(&mut self, tid: i32) -> &mut Entry {
        self.threads
            .entry(tid)
            .or_insert_with(|| Entry::unknown(tid))
    }

    /// The process of `tid` as known now (`tid` itself when unknown).
    pub fn pid_of(&self, tid: Tid) -> Pid {
        Pid(self.threads.get(&tid.0).map_or(tid.0, |e| e.pid))
    }

    /// Applies one decoded record: updates the table and returns its event with `pid` (and a
    /// fork's `child_pid`/`thread`) resolved. `seq` is left to the caller.
    pub fn apply(&mut self, mut d: Decoded) -> Option<Event> {
        self.apply_in_place(&mut d);
        d.event
    }

    /// [`ThreadTable::apply`] without moving the record: resolves `d.event` where it lies.
    #[inline]
    pub fn apply_in_place(&mut self, d: &mut Decoded) {
        let ts = d.ts;
        if let Some(ev) = d.event.as_mut() {
            let tid = ev.tid.0;
            let pid = self.entry(tid).pid;
            ev.pid = Pid(pid);
            match &mut ev.kind {
                EventKind::Fork {
                    child,
                    child_pid,
                    thread,
                } => {
                    if d.fork_source == ForkSource::ProcessFork {
                        // The record does not say; a thread that /proc (or an earlier record)
                        // already placed in another process is a thread of it.
                        if let Some(known) = self.threads.get(&child.0) {
                            *thread = known.pid != child.0 && known.pid == pid;
                        }
                    }
                    *child_pid = Pid(if *thread { pid } else { child.0 });
                    let parent_comm = self.entry(tid).comm;
                    self.threads.insert(
                        child.0,
                        Entry {
                            pid: child_pid.0,
                            comm: parent_comm,
                            parent: Some(tid),
                            start_ns: Some(ts),
                            exit_ns: None,
                            kernel: tid == KTHREADD,
                        },
                    );
                }
                EventKind::Exec => {
                    let e = self.entry(tid);
                    e.kernel = false;
                    if let Some(old) = d.exec_old_tid {
                        // de_thread(): the exec'ing thread took the leader's tid; its old tid
                        // is gone.
                        self.entry(old.0).exit_ns = Some(ts);
                    }
                }
                EventKind::Exit => self.entry(tid).exit_ns = Some(ts),
                _ => {}
            }
        }
        for (tid, comm) in d.comms.iter().flatten() {
            if tid.0 == 0 {
                // swapper/N: one name per CPU for the same tid 0; keep the generic one.
                continue;
            }
            let e = self.entry(tid.0);
            if e.comm != *comm {
                e.comm = *comm;
            }
        }
    }

    /// Every known thread, sorted by tid. `process` is the comm of the process's main thread
    /// (the thread's own comm when the main thread is unknown).
    pub fn threads(&self) -> Vec<ThreadInfo> {
        let mut out: Vec<ThreadInfo> = self
            .threads
            .iter()
            .map(|(&tid, e)| {
                let process = self
                    .threads
                    .get(&e.pid)
                    .map_or(e.comm, |m| m.comm)
                    .to_string_lossy();
                ThreadInfo {
                    tid: Tid(tid),
                    pid: Pid(e.pid),
                    comm: e.comm.to_string_lossy(),
                    process,
                    parent: e.parent.map(Tid),
                    start_ns: e.start_ns,
                    exit_ns: e.exit_ns,
                    kernel: e.kernel || e.parent == Some(KTHREADD),
                }
            })
            .collect();
        out.sort_by_key(|t| t.tid);
        out
    }

    /// Forgets the threads that exited before `cutoff`: a continuous job keeps only what
    /// its retained window can name (`argus start`). Returns how many went.
    pub fn forget_exited_before(&mut self, cutoff: Nanos) -> usize {
        let n = self.threads.len();
        self.threads
            .retain(|_, e| e.exit_ns.is_none_or(|x| x >= cutoff));
        n - self.threads.len()
    }

    /// Notes an exit at `ts` that no record showed (see
    /// [`crate::live::LiveMerge::untraced_exit`]); a thread not known stays unknown.
    pub fn note_exit(&mut self, tid: i32, ts: Nanos) {
        if let Some(e) = self.threads.get_mut(&tid) {
            e.exit_ns.get_or_insert(ts);
        }
    }

    /// Notes that `tid` belongs to process `pid`, which no record showed (see
    /// [`crate::live::LiveMerge::note_process`]); a thread not known stays unknown.
    pub fn note_process(&mut self, tid: i32, pid: i32) {
        if let Some(e) = self.threads.get_mut(&tid) {
            e.pid = pid;
        }
    }

    /// Number of threads known.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Whether no thread is known.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

/// Records pulled from an iterator source at a time.
const SOURCE_BATCH: usize = 128;

/// Where the records of one input of a [`Merge`] come from, in their buffer's order.
///
/// Any `Iterator<Item = Result<Decoded, IngestError>>` is one (records pulled 128 at a
/// time); a trace's [`crate::replay::CpuStream`] hands over each decoded page whole, so a
/// record (~160 bytes) is not moved again on its way into the merge.
pub trait Source {
    /// Puts the next records into `out` (empty on entry) and says whether the source may
    /// have more (`Ok(false)`: exhausted). `Err` reports a problem at this position: records
    /// already in `out` come before it, and the source is polled again afterwards.
    fn refill(&mut self, out: &mut Vec<Decoded>) -> Result<bool, IngestError>;
}

impl<I: Iterator<Item = Result<Decoded, IngestError>>> Source for I {
    fn refill(&mut self, out: &mut Vec<Decoded>) -> Result<bool, IngestError> {
        while out.len() < SOURCE_BATCH {
            match self.next() {
                Some(Ok(d)) => out.push(d),
                Some(Err(e)) => return Err(e),
                None => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// One input of a [`Merge`]: the source and a batch of its records, consumed in place.
struct Input<S> {
    source: S,
    buf: Vec<Decoded>,
    pos: usize,
    /// An error met while filling `buf`, returned once `buf` is consumed.
    err: Option<IngestError>,
    done: bool,
}

impl<S: Source> Input<S> {
    /// Refills `buf` when it is consumed. `false` when the source is exhausted.
    #[inline]
    fn ready(&mut self) -> bool {
        if self.pos < self.buf.len() {
            return true;
        }
        if self.err.is_some() || self.done {
            return false;
        }
        self.buf.clear();
        self.pos = 0;
        loop {
            match self.source.refill(&mut self.buf) {
                Ok(true) if self.buf.is_empty() => {}
                Ok(true) => return true,
                Ok(false) => {
                    self.done = true;
                    return !self.buf.is_empty();
                }
                Err(e) => {
                    self.err = Some(e);
                    return !self.buf.is_empty();
                }
            }
        }
    }

    #[inline]
    fn key(&self) -> (Nanos, u32) {
        let d = &self.buf[self.pos];
        (d.ts, d.cpu.0)
    }
}

/// K-way merge of per-CPU [`Decoded`] streams into time-ordered [`Event`]s with `seq` and `pid`
/// assigned. An `Err` from a source is passed through at its position in that source (the
/// source is polled again afterwards, so a source that recovers keeps contributing).
///
/// Records are pulled in small batches and resolved in place; the source that released the
/// last record keeps releasing without touching the heap while its next record is still the
/// smallest (one CPU's records come in runs).
pub struct Merge<S> {
    inputs: Vec<Input<S>>,
    /// Heads of the inputs other than `current`.
    heap: BinaryHeap<Reverse<(Nanos, u32, usize)>>,
    /// The input whose head is the smallest, outside the heap.
    current: Option<usize>,
    /// Inputs to (re)enter into the heap before the next release.
    refill: Vec<usize>,
    table: ThreadTable,
    seq: u64,
}

impl<S: Source> Merge<S> {
    /// Merges `sources` (one per CPU), resolving threads with `table`.
    pub fn new(sources: Vec<S>, table: ThreadTable) -> Merge<S> {
        let n = sources.len();
        Merge {
            inputs: sources
                .into_iter()
                .map(|source| Input {
                    source,
                    buf: Vec::with_capacity(SOURCE_BATCH),
                    pos: 0,
                    err: None,
                    done: false,
                })
                .collect(),
            heap: BinaryHeap::with_capacity(n),
            current: None,
            refill: (0..n).rev().collect(),
            table,
            seq: 0,
        }
    }

    /// The thread table as it stands.
    pub fn table(&self) -> &ThreadTable {
        &self.table
    }

    /// The number of events released so far (the next `seq`).
    pub fn released(&self) -> u64 {
        self.seq
    }

    /// The sources and the thread table, to read their final statistics.
    pub fn into_parts(self) -> (Vec<S>, ThreadTable) {
        (
            self.inputs.into_iter().map(|i| i.source).collect(),
            self.table,
        )
    }

    /// The sources.
    pub fn sources(&self) -> Vec<&S> {
        self.inputs.iter().map(|i| &i.source).collect()
    }

    /// Puts input `i` back in the running: into the heap if it has records, or returns its
    /// pending error.
    #[inline]
    fn enter(&mut self, i: usize) -> Option<IngestError> {
        let input = &mut self.inputs[i];
        if input.ready() {
            let (ts, cpu) = input.key();
            self.heap.push(Reverse((ts, cpu, i)));
            None
        } else {
            let e = input.err.take();
            if e.is_some() {
                // Poll it again next time: a source may recover after an error.
                self.refill.push(i);
            }
            e
        }
    }
}

impl<S: Source> Iterator for Merge<S> {
    type Item = Result<Event, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(i) = self.current {
                // Keep releasing from `i` while its head is the smallest.
                let input = &mut self.inputs[i];
                let still_first = input.ready() && {
                    let (ts, cpu) = input.key();
                    self.heap
                        .peek()
                        .is_none_or(|Reverse((hts, hcpu, hi))| (ts, cpu, i) <= (*hts, *hcpu, *hi))
                };
                if !still_first {
                    self.current = None;
                    self.refill.push(i);
                }
            }
            if self.current.is_none() {
                while let Some(i) = self.refill.pop() {
                    if let Some(e) = self.enter(i) {
                        return Some(Err(e));
                    }
                }
                let Reverse((_, _, i)) = self.heap.pop()?;
                self.current = Some(i);
            }
            let i = self.current?;
            let input = &mut self.inputs[i];
            let d = &mut input.buf[input.pos];
            input.pos += 1;
            self.table.apply_in_place(d);
            if let Some(mut ev) = d.event.take() {
                ev.seq = self.seq;
                self.seq += 1;
                return Some(Ok(ev));
            }
        }
    }
}

/// A closed batch of events: at most the batch size, in `seq` order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The events.
    pub events: Vec<Event>,
    /// The time of the last event: every later event is at or after it.
    pub watermark: Nanos,
}

/// Splits an event stream into [`Batch`]es of at most `max` events. An error ends the batch in
/// progress (which is returned first) and is then returned on its own.
pub struct Batches<I, E> {
    inner: I,
    max: usize,
    pending_err: Option<E>,
    done: bool,
}

impl<I, E> Batches<I, E>
where
    I: Iterator<Item = Result<Event, E>>,
{
    /// Batches of at most `max` (at least 1) events from `inner`.
    pub fn new(inner: I, max: usize) -> Batches<I, E> {
        Batches {
            inner,
            max: max.max(1),
            pending_err: None,
            done: false,
        }
    }
}

impl<I, E> Iterator for Batches<I, E>
where
    I: Iterator<Item = Result<Event, E>>,
{
    type Item = Result<Batch, E>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending_err.take() {
            return Some(Err(e));
        }
        if self.done {
            return None;
        }
        let mut events = Vec::with_capacity(self.max.min(1 << 16));
        while events.len() < self.max {
            match self.inner.next() {
                Some(Ok(ev)) => events.push(ev),
                Some(Err(e)) => {
                    if events.is_empty() {
                        return Some(Err(e));
                    }
                    self.pending_err = Some(e);
                    break;
                }
                None => {
                    self.done = true;
                    break;
                }
            }
        }
        let watermark = events.last()?.ts;
        Some(Ok(Batch { events, watermark }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::{Context, Cpu, TaskState};

    fn dec(ts: u64, cpu: u32, tid: i32, kind: EventKind) -> Decoded {
        Decoded {
            ts: Nanos(ts),
            cpu: Cpu(cpu),
            event: Some(Event {
                ts: Nanos(ts),
                seq: 0,
                cpu: Cpu(cpu),
                pid: Pid(tid),
                tid: Tid(tid),
                ctx: Context::Task,
                kind,
            }),
            comms: [None, None],
            fork_source: ForkSource::None,
            exec_old_tid: None,
        }
    }

    fn ok(v: Vec<Decoded>) -> std::vec::IntoIter<Result<Decoded, IngestError>> {
        v.into_iter().map(Ok).collect::<Vec<_>>().into_iter()
    }

    #[test]
    fn merges_by_time_then_cpu_and_numbers_events() {
        let a = ok(vec![
            dec(1, 0, 10, EventKind::Exec),
            dec(5, 0, 10, EventKind::Exit),
        ]);
        let b = ok(vec![
            dec(1, 1, 20, EventKind::Exec),
            dec(3, 1, 20, EventKind::Exit),
        ]);
        let out: Vec<Event> = Merge::new(vec![a, b], ThreadTable::new())
            .map(|r| r.unwrap())
            .collect();
        let keys: Vec<_> = out.iter().map(|e| (e.ts.0, e.cpu.0, e.seq)).collect();
        assert_eq!(keys, vec![(1, 0, 0), (1, 1, 1), (3, 1, 2), (5, 0, 3)]);
    }

    #[test]
    fn thread_table_resolves_forks_and_names() {
        let proc = vec![ProcEntry {
            tid: 100,
            pid: 100,
            ppid: 1,
            comm: "app".into(),
            kernel: false,
        }];
        let mut t = ThreadTable::from_proc(&proc);
        // A thread (task_newtask with CLONE_THREAD).
        let mut d = dec(
            10,
            0,
            100,
            EventKind::Fork {
                child: Tid(101),
                child_pid: Pid(101),
                thread: true,
            },
        );
        d.fork_source = ForkSource::NewTask;
        d.comms[0] = Some((Tid(101), Comm::new(b"app")));
        let ev = t.apply(d).unwrap();
        assert_eq!(
            ev.kind,
            EventKind::Fork {
                child: Tid(101),
                child_pid: Pid(100),
                thread: true
            }
        );
        // It renames itself, then runs: its events carry pid 100.
        let mut r = dec(11, 0, 101, EventKind::Exec);
        r.event = None;
        r.comms[0] = Some((Tid(101), Comm::new(b"worker")));
        assert!(t.apply(r).is_none());
        let ev = t
            .apply(dec(12, 1, 101, EventKind::SysExit { nr: 0, ret: 0 }))
            .unwrap();
        assert_eq!(ev.pid, Pid(100));
        // A process (sched_process_fork only): thread = false, own pid.
        let mut d = dec(
            13,
            0,
            100,
            EventKind::Fork {
                child: Tid(200),
                child_pid: Pid(200),
                thread: false,
            },
        );
        d.fork_source = ForkSource::ProcessFork;
        let ev = t.apply(d).unwrap();
        assert!(matches!(
            ev.kind,
            EventKind::Fork {
                child_pid: Pid(200),
                thread: false,
                ..
            }
        ));
        t.apply(dec(14, 0, 101, EventKind::Exit));
        let threads = t.threads();
        let w = threads.iter().find(|t| t.tid == Tid(101)).unwrap();
        assert_eq!(
            (
                w.comm.as_str(),
                w.process.as_str(),
                w.parent,
                w.start_ns,
                w.exit_ns
            ),
            (
                "worker",
                "app",
                Some(Tid(100)),
                Some(Nanos(10)),
                Some(Nanos(14))
            )
        );
        let c = threads.iter().find(|t| t.tid == Tid(200)).unwrap();
        assert_eq!((c.pid, c.comm.as_str()), (Pid(200), "app"));
    }

    #[test]
    fn sched_process_fork_uses_proc_knowledge_and_kthreadd_makes_kernel_threads() {
        let proc = vec![
            ProcEntry {
                tid: 50,
                pid: 50,
                ppid: 1,
                comm: "srv".into(),
                kernel: false,
            },
            // Created just after tracing began: /proc already shows it as a thread of 50.
            ProcEntry {
                tid: 51,
                pid: 50,
                ppid: 1,
                comm: "srv".into(),
                kernel: false,
            },
        ];
        let mut t = ThreadTable::from_proc(&proc);
        let mut d = dec(
            1,
            0,
            50,
            EventKind::Fork {
                child: Tid(51),
                child_pid: Pid(51),
                thread: false,
            },
        );
        d.fork_source = ForkSource::ProcessFork;
        let ev = t.apply(d).unwrap();
        assert!(matches!(
            ev.kind,
            EventKind::Fork {
                child_pid: Pid(50),
                thread: true,
                ..
            }
        ));
        let mut d = dec(
            2,
            0,
            2,
            EventKind::Fork {
                child: Tid(300),
                child_pid: Pid(300),
                thread: false,
            },
        );
        d.fork_source = ForkSource::NewTask;
        d.comms[0] = Some((Tid(300), Comm::new(b"kworker/0:2")));
        t.apply(d);
        let sw = dec(
            3,
            0,
            300,
            EventKind::Switch {
                prev: Tid(300),
                prev_state: TaskState::SLEEPING,
                next: Tid(0),
            },
        );
        assert_eq!(t.apply(sw).unwrap().pid, Pid(300));
        let k = t.threads().into_iter().find(|x| x.tid == Tid(300)).unwrap();
        assert!(k.kernel);
        assert_eq!(k.comm, "kworker/0:2");
    }

    #[test]
    fn runs_and_ties_merge_like_a_sort_and_errors_keep_their_place() {
        // Three CPUs with long runs, equal times across CPUs, and an error inside cpu1's
        // stream: the output is the (ts, cpu) order of a stable sort, the error comes after
        // cpu1's records before it and before those after it.
        let mut all = Vec::new();
        let mut sources = Vec::new();
        for cpu in 0..3u32 {
            let mut v: Vec<Result<Decoded, IngestError>> = Vec::new();
            for i in 0..700u64 {
                let ts = (i / 50) * 1000
                    + (i % 50) * (cpu as u64 + 1)
                    + if i % 7 == 0 { 0 } else { cpu as u64 };
                let d = dec(ts, cpu, 100 + cpu as i32, EventKind::Exec);
                all.push((ts, cpu));
                v.push(Ok(d));
                if cpu == 1 && i == 300 {
                    v.push(Err(IngestError::Missing { file: "x".into() }));
                }
            }
            sources.push(v.into_iter());
        }
        all.sort();
        let out: Vec<Result<Event, IngestError>> =
            Merge::new(sources, ThreadTable::new()).collect();
        let errors = out.iter().filter(|r| r.is_err()).count();
        assert_eq!(errors, 1);
        let evs: Vec<(u64, u32)> = out
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|e| (e.ts.0, e.cpu.0))
            .collect();
        assert_eq!(evs, all);
        let seqs: Vec<u64> = out
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|e| e.seq)
            .collect();
        assert!(seqs.iter().enumerate().all(|(i, &s)| s == i as u64));
        // The error comes right where cpu1's stream had it: after its first 301 records.
        let pos = out.iter().position(|r| r.is_err()).unwrap();
        let cpu1_before = out[..pos]
            .iter()
            .filter(|r| matches!(r, Ok(e) if e.cpu.0 == 1))
            .count();
        assert_eq!(cpu1_before, 301);
    }

    #[test]
    fn batches_respect_the_size_and_watermark() {
        let evs: Vec<Result<Event, IngestError>> = (0..5)
            .map(|i| Ok(dec(i * 10, 0, 1, EventKind::Exec).event.unwrap()))
            .collect();
        let b: Vec<Batch> = Batches::new(evs.into_iter(), 2)
            .map(|b| b.unwrap())
            .collect();
        assert_eq!(
            b.iter().map(|b| b.events.len()).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
        assert_eq!(
            b.iter().map(|b| b.watermark.0).collect::<Vec<_>>(),
            vec![10, 30, 40]
        );
    }
}
