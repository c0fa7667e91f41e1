//! Integration tests of argus-sinks: one binary, one module per concern.
#![allow(clippy::unwrap_used)]

mod atomic;
mod bad_files;
mod collection;
mod layout;
mod roundtrip;

use argus_schema::{
    CausalEdge, Context, Cpu, EdgeKind, EndCause, Epoch, ErrorRecord, Event, EventKind, Nanos, Pid,
    Segment, SegmentId, SegmentKind, Spin, SpinClass, StartCause, Strength, TaskState, ThreadInfo,
    Tid,
};
use argus_sinks::{SnapshotData, SnapshotInfo};
use std::path::{Path, PathBuf};

/// One event of every kind, in every context, with extreme payload values.
pub fn all_events() -> Vec<Event> {
    let kinds = vec![
        EventKind::Switch {
            prev: Tid(1234),
            prev_state: TaskState::SLEEPING,
            next: Tid(0),
        },
        EventKind::Switch {
            prev: Tid(0),
            prev_state: TaskState(b'+'),
            next: Tid(i32::MAX),
        },
        EventKind::Switch {
            prev: Tid::irq(Cpu(3)),
            prev_state: TaskState(0xe9),
            next: Tid(5),
        },
        EventKind::Waking { target: Tid(77) },
        EventKind::WakeupNew { target: Tid(78) },
        EventKind::Fork {
            child: Tid(79),
            child_pid: Pid(79),
            thread: false,
        },
        EventKind::Fork {
            child: Tid(80),
            child_pid: Pid(-2),
            thread: true,
        },
        EventKind::Exec,
        EventKind::Exit,
        EventKind::SysEnter {
            nr: 202,
            args: [u64::MAX, 0x7fff_0000_1234, 0, 0, 0, 0],
        },
        EventKind::SysExit { nr: 202, ret: -110 },
        EventKind::SysExit {
            nr: -1,
            ret: i64::MIN,
        },
        EventKind::IrqEntry { irq: 24 },
        EventKind::IrqExit { irq: -1 },
        EventKind::SoftirqEntry { vec: 9 },
        EventKind::SoftirqExit { vec: u32::MAX },
        EventKind::HrtimerStart {
            timer: 0xffff_8880_0000_1000,
            function: 0xffff_ffff_8100_0000,
            expires: u64::MAX,
        },
        EventKind::HrtimerExpire {
            timer: 0xffff_8880_0000_1000,
            function: 1,
        },
        EventKind::HrtimerExpireExit { timer: 0 },
        EventKind::Marker {
            text: "argus: début ✓ \"quoted\"\nnewline".to_string(),
        },
        EventKind::Marker {
            text: String::new(),
        },
        EventKind::SysEnter {
            nr: 1,
            args: [1, 2, 3, 4, 5, u64::MAX],
        },
        EventKind::WorkQueue {
            work: 0xffff_8880_0000_2000,
            function: 0xffff_ffff_8100_1000,
        },
        EventKind::WorkStart {
            work: 0xffff_8880_0000_2000,
            function: 0xffff_ffff_8100_1000,
        },
        EventKind::WorkEnd { work: 1 },
        EventKind::TimerStart {
            timer: 0xffff_8880_0000_3000,
            function: 2,
            expires: 4_295_000_000,
        },
        EventKind::TimerExpire {
            timer: 0xffff_8880_0000_3000,
            function: 2,
        },
        EventKind::TimerExpireExit { timer: 3 },
        EventKind::SignalGenerate {
            sig: 15,
            target: Tid(4321),
        },
        EventKind::SignalDeliver { sig: 17 },
        EventKind::Stack {
            kernel: true,
            ips: vec![0xffff_ffff_8100_0000, 0xffff_ffff_8100_0010],
        },
        EventKind::Stack {
            kernel: false,
            ips: vec![],
        },
        EventKind::FlagAccess {
            addr: 0x5555_0000_1000,
            write: true,
        },
        EventKind::FlagAccess {
            addr: 0x5555_0000_1000,
            write: false,
        },
        EventKind::FileLock {
            inode: 1_234_567,
            dev: (259 << 20) | 3,
            flock: false,
            lock_type: 1,
            ret: -11,
        },
        EventKind::FileLock {
            inode: 42,
            dev: 8 << 20,
            flock: true,
            lock_type: 2,
            ret: 0,
        },
        EventKind::SockReady {
            sk: 0xffff_8881_0a0b_0c00,
        },
        EventKind::SockRecv {
            sk: 0xffff_8881_0a0b_0c00,
            ret: 38,
        },
        EventKind::SockRecv {
            sk: 0xffff_8881_0a0b_0d00,
            ret: -11,
        },
        EventKind::LockOwner {
            owner: Tid(4321),
            lock: 0xffff_ff80_2a3b_4c50,
        },
    ];
    let ctxs = [
        Context::Task,
        Context::SoftIrq,
        Context::HardIrq,
        Context::Nmi,
    ];
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| Event {
            ts: Nanos(1_000_000_000 + i as u64 * 17),
            seq: i as u64,
            cpu: Cpu(i as u32 % 5),
            pid: Pid(100 + i as i32),
            tid: if i == 2 {
                Tid::irq(Cpu(3))
            } else {
                Tid(200 + i as i32)
            },
            ctx: ctxs[i % ctxs.len()],
            kind,
        })
        .collect()
}

/// What the events table gives back: every event exactly (schema version 2 keeps all six
/// syscall argument registers).
pub fn as_stored(e: Event) -> Event {
    e
}

pub fn all_segments() -> Vec<Segment> {
    let kinds = [
        SegmentKind::Task,
        SegmentKind::HardIrq { irq: -1 },
        SegmentKind::HardIrq { irq: i32::MAX },
        SegmentKind::SoftIrq { vec: u32::MAX },
        SegmentKind::Timer {
            timer: u64::MAX,
            function: 0xffff_ffff_8100_0000,
        },
        SegmentKind::Interrupt,
    ];
    let starts = StartCause::ALL;
    let ends = EndCause::ALL;
    let mut out = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        for (j, start) in starts.iter().enumerate() {
            let n = (i * 4 + j) as u32;
            let tid = if matches!(kind, SegmentKind::Task) {
                Tid(300 + i as i32)
            } else {
                Tid::irq(Cpu(i as u32))
            };
            out.push(Segment {
                id: SegmentId::new(tid, n),
                tid,
                pid: Pid(tid.0),
                kind: *kind,
                start_ns: Nanos(u64::from(n) * 1000),
                end_ns: Nanos(u64::from(n) * 1000 + 999),
                start: *start,
                end: ends[(i + j) % ends.len()],
                wait_start_ns: n
                    .is_multiple_of(2)
                    .then_some(Nanos(u64::from(n) * 1000 + 500)),
                wait_state: [0, b'S', b'D', b'I'][(n % 4) as usize],
                wait_syscall: if n.is_multiple_of(3) { -1 } else { 202 },
                wait_ret: match n % 3 {
                    0 => None,
                    1 => Some(-110),
                    _ => Some(i64::MAX),
                },
                wait_object: (n % 4 == 1).then_some(0x7f00_0000_0000 + u64::from(n)),
                on_cpu_ns: u64::from(n) * 7,
                preemptions: n,
                yields: u32::MAX - n,
                syscalls: n * 2,
                events: n * 3,
                syscall_seq: (0..(n % 17) as i32).map(|k| k * 11 - 3).collect(),
            });
        }
    }
    out
}

pub fn all_edges() -> Vec<CausalEdge> {
    let mut out = Vec::new();
    for (i, kind) in [
        EdgeKind::Wakeup,
        EdgeKind::Fork,
        EdgeKind::Timer,
        EdgeKind::ThreadOrder,
    ]
    .into_iter()
    .enumerate()
    {
        for strength in [Strength::Weak, Strength::Strong] {
            out.push(CausalEdge {
                src: SegmentId::new(Tid::irq(Cpu(1)), i as u32),
                dst: SegmentId::new(Tid(400), u32::MAX - i as u32),
                kind,
                strength,
                ts: Nanos(u64::MAX - i as u64),
                src_syscall: if strength == Strength::Weak { -1 } else { 230 },
            });
        }
    }
    out
}

pub fn all_spins() -> Vec<Spin> {
    [
        SpinClass::LongRunning,
        SpinClass::RepeatedYield,
        SpinClass::LongWait,
    ]
    .into_iter()
    .enumerate()
    .flat_map(|(i, class)| {
        [false, true].into_iter().map(move |open| Spin {
            segment: SegmentId::new(Tid(500), i as u32),
            last: SegmentId::new(Tid(500), i as u32 + 9),
            tid: Tid(500),
            pid: Pid(499),
            class,
            start_ns: Nanos(10),
            end_ns: Nanos(2_000_000_000),
            open,
            on_cpu_ns: 1_500_000_000,
            wait_ns: 499_999_990,
            segments: 10,
            wait_syscall: if open { -1 } else { 35 },
            timeouts: if open { 0 } else { 9 },
        })
    })
    .collect()
}

pub fn all_threads() -> Vec<ThreadInfo> {
    vec![
        ThreadInfo {
            tid: Tid(600),
            pid: Pid(600),
            comm: "server".to_string(),
            process: "server".to_string(),
            parent: None,
            start_ns: None,
            exit_ns: None,
            kernel: false,
        },
        ThreadInfo {
            tid: Tid(601),
            pid: Pid(600),
            comm: "wörker-1".to_string(),
            process: "server".to_string(),
            parent: Some(Tid(600)),
            start_ns: Some(Nanos(5)),
            exit_ns: Some(Nanos(u64::MAX)),
            kernel: false,
        },
        ThreadInfo {
            tid: Tid(2),
            pid: Pid(2),
            comm: "kthreadd".to_string(),
            process: String::new(),
            parent: Some(Tid(0)),
            start_ns: None,
            exit_ns: Some(Nanos(0)),
            kernel: true,
        },
    ]
}

pub fn all_errors() -> Vec<ErrorRecord> {
    vec![
        ErrorRecord {
            source: "/traces/a/cpu0.raw".to_string(),
            offset: Some(4096),
            ts: Some(Nanos(123)),
            message: "bad record size 0".to_string(),
        },
        ErrorRecord {
            source: "pipeline::segments".to_string(),
            offset: None,
            ts: None,
            message: String::new(),
        },
    ]
}

pub fn sample_info() -> SnapshotInfo {
    SnapshotInfo {
        sources: vec![PathBuf::from("/traces/a"), PathBuf::from("/traces/b")],
        epoch: Epoch(42),
        watermark_ns: Nanos(999),
        lost_events: [(0, 3), (7, 100)].into_iter().collect(),
        // Unsorted, one given backwards, two overlapping: the manifest merges them.
        lost_ranges: vec![
            (Nanos(50), Nanos(60)),
            (Nanos(20), Nanos(10)),
            (Nanos(55), Nanos(70)),
        ],
        unknown_events: 12,
        threshold_ns: 1_000_000_000,
        workers: 4,
        wall_offset_ns: Some(1_764_000_000_000_000_000),
        recorder_tids: vec![4242, 4243],
        ..SnapshotInfo::default()
    }
}

pub fn sample() -> SnapshotData {
    SnapshotData {
        info: sample_info(),
        events: all_events(),
        segments: all_segments(),
        edges: all_edges(),
        spins: all_spins(),
        threads: all_threads(),
        errors: all_errors(),
    }
}

/// Cheap events for bulk tests: no payload.
pub fn small_events(n: u64) -> impl Iterator<Item = Event> {
    (0..n).map(|i| Event {
        ts: Nanos(i * 10),
        seq: i,
        cpu: Cpu((i % 2) as u32),
        pid: Pid(1),
        tid: Tid(1),
        ctx: Context::Task,
        kind: EventKind::Exec,
    })
}

/// Entries of `dir` whose name starts with `prefix` (leftover temporary directories).
pub fn entries_starting_with(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}
