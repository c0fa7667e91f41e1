//! Loading and indexing.

use crate::builder::{ms, B};
use argus_diagnose::{
    diagnose, find_any_hang, find_hang, target_by_comm, AutoOracle, DiagnoseConfig, Graph,
    GraphInput, Outcome, Target,
};
use argus_schema::{
    CausalEdge, EdgeKind, EndCause, Nanos, Pid, Segment, SegmentId, SegmentKind, Spin, SpinClass,
    StartCause, Strength, Tid,
};

#[test]
fn segments_are_indexed_by_id_and_thread_whatever_the_input_order() {
    let mut b = B::new(100.0);
    b.thread(10, 10, "main", "app");
    let a = b.task(10, 0.0, 1.0, 2.0, "futex", 1.0);
    let c = b.task(10, 2.0, 3.0, 4.0, "futex", 1.0);
    let d = b.open(10, 4.0, None, "", 1.0);
    b.segments.reverse();
    let g = b.graph();
    assert_eq!(g.segment(c).unwrap().start_ns, ms(2.0));
    assert_eq!(g.next_in_thread(a).unwrap().id, c);
    assert_eq!(g.prev_in_thread(d).unwrap().id, c);
    assert!(g.next_in_thread(d).is_none());
    assert!(g.prev_in_thread(a).is_none());
    assert_eq!(g.segment_at(Tid(10), ms(3.5)).unwrap().id, c);
    assert_eq!(g.segment_at(Tid(10), ms(50.0)).unwrap().id, d);
    let ids: Vec<SegmentId> = g.thread_segments(Tid(10)).map(|s| s.id).collect();
    assert_eq!(ids, vec![a, c, d]);
    let over: Vec<SegmentId> = g
        .segments_overlapping(Tid(10), ms(1.5), ms(3.0))
        .map(|s| s.id)
        .collect();
    assert_eq!(over, vec![a, c]);
    assert_eq!(g.end_of(g.segment(d).unwrap()), ms(100.0));
}

#[test]
fn a_polling_loop_whose_first_sleep_passes_the_threshold_is_the_hang_not_that_sleep() {
    // apt-get retrying a lock: two 1.0002 s sleeps, the table's RepeatedYield spin spans
    // both; with a 1 s threshold each sleep alone is a LongWait candidate too.
    let mut b = B::new(2100.0);
    b.thread(10, 10, "apt-get", "apt-get");
    let a = b.task(10, 0.0, 0.1, 1000.3, "clock_nanosleep", 0.1);
    let c = b.task(10, 1000.3, 1000.4, 2000.6, "clock_nanosleep", 0.1);
    b.open(10, 2000.6, None, "", 0.1);
    b.long_wait(a);
    b.long_wait(c);
    b.spins.push(Spin {
        segment: a,
        last: c,
        tid: Tid(10),
        pid: Pid(10),
        class: SpinClass::RepeatedYield,
        start_ns: ms(0.1),
        end_ns: ms(2000.6),
        open: false,
        on_cpu_ns: 200_000,
        wait_ns: ms(2000.0).0,
        segments: 2,
        wait_syscall: argus_schema::syscalls::number("clock_nanosleep").expect("syscall"),
        timeouts: 0,
    });
    let g = b.graph();
    let cfg = argus_diagnose::HangConfig {
        threshold_ns: 1_000_000_000,
        ..Default::default()
    };
    let hangs = argus_diagnose::find_hangs(&g, Tid(10), &cfg);
    assert_eq!(hangs[0].spin.class, SpinClass::RepeatedYield, "{hangs:#?}");
    assert_eq!((hangs[0].spin.segment, hangs[0].spin.last), (a, c));
}

#[test]
fn lost_ranges_are_merged_and_measured_within_a_window() {
    let mut b = B::new(100.0);
    b.thread(10, 10, "main", "app");
    b.task(10, 0.0, 1.0, 2.0, "futex", 1.0);
    let mut g = b.graph();
    assert_eq!(g.lost_within(ms(0.0), ms(100.0)), 0);
    // Unsorted, one backwards, two overlapping: [10, 30] and [50, 60] ms.
    g.set_lost_ranges([
        (ms(20.0), ms(30.0)),
        (ms(60.0), ms(50.0)),
        (ms(10.0), ms(25.0)),
    ]);
    assert_eq!(g.lost_within(ms(0.0), ms(100.0)), ms(30.0).0);
    assert_eq!(g.lost_within(ms(25.0), ms(55.0)), ms(10.0).0);
    assert_eq!(g.lost_within(ms(30.0), ms(50.0)), 0);
    assert_eq!(g.lost_within(ms(70.0), ms(90.0)), 0);
}

#[test]
fn gaps_in_ordinals_fall_back_to_a_search_and_dangling_edges_are_dropped() {
    let seg = |seq: u32, start: u64| Segment {
        id: SegmentId::new(Tid(7), seq),
        tid: Tid(7),
        pid: Pid(7),
        kind: SegmentKind::Task,
        start_ns: Nanos(start),
        end_ns: Nanos(start + 5),
        start: StartCause::Woken,
        end: EndCause::Woken,
        wait_start_ns: None,
        wait_state: 0,
        wait_syscall: -1,
        wait_ret: None,
        wait_object: None,
        on_cpu_ns: 5,
        preemptions: 0,
        yields: 0,
        syscalls: 0,
        events: 1,
        syscall_seq: vec![],
    };
    let edge = |src: SegmentId, dst: SegmentId| CausalEdge {
        src,
        dst,
        kind: EdgeKind::Wakeup,
        strength: Strength::Strong,
        ts: Nanos(0),
        src_syscall: -1,
    };
    let ids = [3u32, 9, 10, 40].map(|s| SegmentId::new(Tid(7), s));
    let g = Graph::new(GraphInput {
        segments: vec![seg(40, 40), seg(3, 3), seg(10, 10), seg(9, 9), seg(9, 99)],
        edges: vec![
            edge(ids[0], ids[3]),
            edge(ids[1], SegmentId::new(Tid(7), 11)),
            edge(SegmentId::new(Tid(8), 0), ids[2]),
        ],
        ..GraphInput::default()
    })
    .unwrap();
    for id in ids {
        assert_eq!(g.segment(id).unwrap().id, id);
    }
    assert!(g.segment(SegmentId::new(Tid(7), 11)).is_none());
    assert_eq!(g.dropped_edges(), 2);
    assert_eq!(g.duplicate_segments(), 1);
    assert_eq!(g.edges().len(), 1);
    assert_eq!(g.incoming(ids[3]).next().unwrap().src, ids[0]);
    assert_eq!(g.outgoing(ids[0]).count(), 1);
    assert_eq!(g.next_in_thread(ids[1]).unwrap().id, ids[2]);
    assert_eq!(g.petgraph().edge_count(), 1);
    assert_eq!(
        g.trace_end_ns(),
        Nanos(104),
        "the duplicate counts for the trace end"
    );
}

fn spin(seg: SegmentId, start: f64, end: f64, open: bool) -> Spin {
    Spin {
        segment: seg,
        last: seg,
        tid: seg.tid(),
        pid: Pid(10),
        class: SpinClass::LongRunning,
        start_ns: ms(start),
        end_ns: ms(end),
        open,
        on_cpu_ns: ms(end - start).0,
        wait_ns: 0,
        segments: 1,
        wait_syscall: -1,
        timeouts: 0,
    }
}

#[test]
fn the_hang_is_the_longest_spin_of_the_target_thread_ties_latest() {
    let mut b = B::new(10_000.0);
    b.thread(10, 10, "main", "app");
    b.thread(11, 10, "helper", "app");
    let s0 = b.task(10, 0.0, 2500.0, 2600.0, "futex", 2500.0);
    let s1 = b.task(10, 2600.0, 5100.0, 5200.0, "futex", 2500.0);
    let s2 = b.open(10, 5200.0, None, "", 100.0);
    let h = b.open(11, 0.0, None, "", 9000.0);
    b.spins = vec![
        spin(s0, 0.0, 2500.0, false),
        spin(s1, 2600.0, 5100.0, false),
        spin(s2, 5200.0, 6000.0, true), // open: reaches the trace end, 4.8 s
        spin(h, 0.0, 10_000.0, true),
    ];
    b.spins[3].tid = Tid(11);
    let g = b.graph();
    let main = Target {
        pid: Pid(10),
        tid: None,
    };
    assert_eq!(find_hang(&g, main).unwrap().segment, s2);
    let helper = Target {
        pid: Pid(10),
        tid: Some(Tid(11)),
    };
    assert_eq!(find_hang(&g, helper).unwrap().segment, h);
    assert_eq!(find_any_hang(&g).unwrap().segment, s2, "main threads only");
    assert_eq!(target_by_comm(&g, "helper"), Some(helper));
    assert_eq!(target_by_comm(&g, "app"), Some(main));
    assert_eq!(target_by_comm(&g, "nope"), None);

    let mut b2 = B::new(10_000.0);
    b2.thread(10, 10, "main", "app");
    let t0 = b2.task(10, 0.0, 2500.0, 2600.0, "futex", 2500.0);
    let t1 = b2.task(10, 2600.0, 5100.0, 5200.0, "futex", 2500.0);
    b2.spins = vec![
        spin(t0, 0.0, 2500.0, false),
        spin(t1, 2600.0, 5100.0, false),
    ];
    let g2 = b2.graph();
    assert_eq!(find_hang(&g2, main).unwrap().segment, t1, "tie: the latest");
}

#[test]
fn no_spin_means_no_hang() {
    let mut b = B::new(100.0);
    b.thread(10, 10, "main", "app");
    b.task(10, 0.0, 1.0, 2.0, "futex", 1.0);
    let g = b.graph();
    let d = diagnose(
        &g,
        Some(Target {
            pid: Pid(10),
            tid: None,
        }),
        &mut AutoOracle,
        &DiagnoseConfig::default(),
    )
    .unwrap();
    assert_eq!(d.outcome(), Outcome::NoHang);
    assert_eq!(d.outcome().exit_code(), 0);
    assert_eq!(
        d.to_text(),
        "No hang found in the main thread of main (pid 10).\n"
    );
    let j = d.to_json();
    assert!(j["hang"].is_null());
    assert_eq!(j["outcome"], "no_hang");
    assert_eq!(j["root_causes"].as_array().unwrap().len(), 0);
}

#[test]
fn a_spin_naming_a_missing_segment_is_an_error() {
    let mut b = B::new(100.0);
    b.thread(10, 10, "main", "app");
    b.task(10, 0.0, 1.0, 2.0, "futex", 1.0);
    b.spins = vec![spin(SegmentId::new(Tid(10), 99), 0.0, 50.0, false)];
    let g = b.graph();
    let spin = g.spins()[0].clone();
    let err = argus_diagnose::diagnose_spin(&g, &spin, &mut AutoOracle, &DiagnoseConfig::default())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "spin names segment 10#99 that is not in the segments table"
    );
}

/// `--at`: the hang going on at the moment, else the nearest; without one, the longest.
#[test]
fn a_moment_picks_the_hang_going_on_then_or_the_nearest() {
    let mut b = B::new(9000.0);
    b.thread(10, 10, "main", "app");
    let first = b.task(10, 0.0, 1.0, 3001.0, "wait4", 0.5);
    b.task(10, 3001.0, 3001.5, 3100.0, "read", 0.5);
    let second = b.task(10, 3100.0, 3101.0, 7101.0, "futex", 0.5);
    b.open(10, 7101.0, None, "", 0.5);
    b.long_wait(first);
    b.long_wait(second);
    let g = b.graph();
    let pick = |at_ms: Option<f64>| {
        let cfg = argus_diagnose::HangConfig {
            at_ns: at_ms.map(ms),
            ..Default::default()
        };
        let hangs = argus_diagnose::find_hangs(&g, Tid(10), &cfg);
        assert_eq!(hangs.len(), 2, "{hangs:#?}");
        hangs[0].spin.segment
    };
    assert_eq!(pick(None), second, "the longest");
    assert_eq!(pick(Some(2000.0)), first, "going on then");
    assert_eq!(pick(Some(5000.0)), second, "going on then");
    assert_eq!(pick(Some(3050.0)), first, "between them: the nearer end");
    assert_eq!(pick(Some(8500.0)), second, "after both: the nearer");
    // The same through `diagnose`.
    let cfg = DiagnoseConfig {
        hang: argus_diagnose::HangConfig {
            at_ns: Some(ms(2000.0)),
            ..Default::default()
        },
        ..DiagnoseConfig::default()
    };
    let d = diagnose(
        &g,
        Some(Target {
            pid: Pid(10),
            tid: None,
        }),
        &mut AutoOracle,
        &cfg,
    )
    .unwrap();
    let hang = d.report.expect("a hang").hang;
    assert!(hang.end_ns <= ms(3001.0), "the first wait: {hang:?}");
}
