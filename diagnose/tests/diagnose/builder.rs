//! Hand-made snapshot tables. Times are given in milliseconds for readability.

use argus_diagnose::{Graph, GraphInput};
use argus_schema::{
    syscalls, CausalEdge, Cpu, EdgeKind, EndCause, Nanos, Pid, Segment, SegmentId, SegmentKind,
    Spin, SpinClass, StartCause, Strength, ThreadInfo, Tid,
};
use std::collections::HashMap;

pub fn ms(x: f64) -> Nanos {
    Nanos((x * 1_000_000.0).round() as u64)
}

pub fn nr(name: &str) -> i32 {
    syscalls::number(name).expect("known syscall")
}

#[derive(Default)]
pub struct B {
    pub segments: Vec<Segment>,
    pub edges: Vec<CausalEdge>,
    pub spins: Vec<Spin>,
    pub threads: Vec<ThreadInfo>,
    seq: HashMap<Tid, u32>,
    pub end_ms: f64,
}

/// One task segment: run `[start, wait)` then blocked in `sys` until `end` (None: open).
pub struct Seg<'a> {
    pub tid: i32,
    pub start: f64,
    pub wait: Option<f64>,
    pub end: Option<f64>,
    pub sys: &'a str,
    pub on_cpu: f64,
    pub ret: Option<i64>,
}

impl B {
    pub fn new(end_ms: f64) -> B {
        B {
            end_ms,
            ..B::default()
        }
    }

    pub fn thread(&mut self, tid: i32, pid: i32, comm: &str, process: &str) {
        self.threads.push(ThreadInfo {
            tid: Tid(tid),
            pid: Pid(pid),
            comm: comm.into(),
            process: process.into(),
            parent: None,
            start_ns: None,
            exit_ns: None,
            kernel: false,
        });
    }

    fn pid_of(&self, tid: i32) -> Pid {
        self.threads
            .iter()
            .find(|t| t.tid == Tid(tid))
            .map_or(Pid(tid), |t| t.pid)
    }

    fn next_seq(&mut self, tid: Tid) -> u32 {
        let s = self.seq.entry(tid).or_insert(0);
        *s += 1;
        *s - 1
    }

    pub fn seg(&mut self, s: Seg<'_>) -> SegmentId {
        let tid = Tid(s.tid);
        let seq = self.next_seq(tid);
        let id = SegmentId::new(tid, seq);
        let sys = if s.sys.is_empty() { -1 } else { nr(s.sys) };
        let start = if seq == 0 {
            StartCause::FirstSeen
        } else {
            StartCause::Woken
        };
        let (end_ns, end) = match s.end {
            Some(e) => (ms(e), EndCause::Woken),
            None => (ms(self.end_ms), EndCause::Open),
        };
        self.segments.push(Segment {
            id,
            tid,
            pid: self.pid_of(s.tid),
            kind: SegmentKind::Task,
            start_ns: ms(s.start),
            end_ns,
            start,
            end,
            wait_start_ns: s.wait.map(ms),
            wait_state: if s.wait.is_some() { b'S' } else { 0 },
            wait_syscall: sys,
            wait_ret: s.ret,
            wait_object: None,
            on_cpu_ns: ms(s.on_cpu).0,
            preemptions: 0,
            yields: 0,
            syscalls: 1,
            events: 4,
            syscall_seq: if sys >= 0 { vec![sys] } else { vec![] },
        });
        id
    }

    /// Shorthand: a closed segment `[start, wait)` + wait until `end`, ret 0.
    pub fn task(
        &mut self,
        tid: i32,
        start: f64,
        wait: f64,
        end: f64,
        sys: &str,
        on_cpu: f64,
    ) -> SegmentId {
        self.seg(Seg {
            tid,
            start,
            wait: Some(wait),
            end: Some(end),
            sys,
            on_cpu,
            ret: Some(0),
        })
    }

    /// An open segment that blocked at `wait` (None: still running).
    pub fn open(
        &mut self,
        tid: i32,
        start: f64,
        wait: Option<f64>,
        sys: &str,
        on_cpu: f64,
    ) -> SegmentId {
        self.seg(Seg {
            tid,
            start,
            wait,
            end: None,
            sys,
            on_cpu,
            ret: None,
        })
    }

    pub fn irq(&mut self, cpu: u32, kind: SegmentKind, start: f64, end: f64) -> SegmentId {
        let tid = Tid::irq(Cpu(cpu));
        let seq = self.next_seq(tid);
        let id = SegmentId::new(tid, seq);
        self.segments.push(Segment {
            id,
            tid,
            pid: Pid(0),
            kind,
            start_ns: ms(start),
            end_ns: ms(end),
            start: StartCause::Interrupt,
            end: EndCause::HandlerDone,
            wait_start_ns: None,
            wait_state: 0,
            wait_syscall: -1,
            wait_ret: None,
            wait_object: None,
            on_cpu_ns: ms(end - start).0,
            preemptions: 0,
            yields: 0,
            syscalls: 0,
            events: 2,
            syscall_seq: vec![],
        });
        id
    }

    pub fn edge(
        &mut self,
        src: SegmentId,
        dst: SegmentId,
        kind: EdgeKind,
        strength: Strength,
        ts: f64,
        src_sys: &str,
    ) {
        self.edges.push(CausalEdge {
            src,
            dst,
            kind,
            strength,
            ts: ms(ts),
            src_syscall: if src_sys.is_empty() { -1 } else { nr(src_sys) },
        });
    }

    pub fn wake(&mut self, src: SegmentId, dst: SegmentId, ts: f64, src_sys: &str) {
        self.edge(src, dst, EdgeKind::Wakeup, Strength::Strong, ts, src_sys);
    }

    pub fn set_start(&mut self, id: SegmentId, cause: StartCause) {
        if let Some(s) = self.segments.iter_mut().find(|s| s.id == id) {
            s.start = cause;
        }
    }

    pub fn long_wait(&mut self, seg: SegmentId) {
        let s = self
            .segments
            .iter()
            .find(|s| s.id == seg)
            .expect("segment")
            .clone();
        let start = s.wait_start_ns.expect("blocked");
        self.spins.push(Spin {
            segment: seg,
            last: seg,
            tid: s.tid,
            pid: s.pid,
            class: SpinClass::LongWait,
            start_ns: start,
            end_ns: s.end_ns,
            open: s.end == EndCause::Open,
            on_cpu_ns: 0,
            wait_ns: start.until(s.end_ns),
            segments: 1,
            wait_syscall: s.wait_syscall,
            timeouts: 0,
        });
    }

    /// Names what the wait ending `seg` waited on (a descriptor, a futex word).
    pub fn object(&mut self, seg: SegmentId, object: u64) {
        if let Some(s) = self.segments.iter_mut().find(|s| s.id == seg) {
            s.wait_object = Some(object);
        }
    }

    pub fn graph(self) -> Graph {
        Graph::new(GraphInput {
            segments: self.segments,
            edges: self.edges,
            spins: self.spins,
            threads: self.threads,
            trace_end_ns: ms(self.end_ms),
        })
        .expect("graph")
    }
}
