//! Every step explains a window, not a segment (ARCHITECTURE.md §7), and a wait made of
//! timed-out waits on one object is one logical wait (§6).

use crate::builder::{Seg, B};
use argus_diagnose::{diagnose, AutoOracle, CauseClass, DiagnoseConfig, Graph, Report, Target};
use argus_schema::{Cpu, EdgeKind, Pid, SegmentKind, SpinClass, Strength, Tid};

fn run(g: &Graph, pid: i32) -> Report {
    let target = Target {
        pid: Pid(pid),
        tid: None,
    };
    diagnose(g, Some(target), &mut AutoOracle, &DiagnoseConfig::default())
        .unwrap()
        .report
        .unwrap()
}

fn path_tids(r: &Report) -> Vec<i32> {
    r.path.iter().map(|p| p.tid.0).collect()
}

/// A client waits 3 s for a server thread that was blocked 3 s on a row lock, released by
/// another connection's commit, then flushed the log (2 ms on the disk) and answered. The
/// commit came from a client that slept holding the lock.
#[test]
fn the_wakers_short_last_wait_is_passed_over_for_the_wait_that_covers_the_window() {
    let mut b = B::new(6000.0);
    b.thread(300, 300, "client", "client");
    b.thread(401, 400, "conn-b", "mariadbd");
    b.thread(402, 400, "conn-a", "mariadbd");
    b.thread(500, 500, "holder", "holder");
    // The hung client: asks at 999, blocked in recvfrom from 1000 to the reply at 4005.
    let c0 = b.task(300, 0.0, 1000.0, 4005.0, "recvfrom", 900.0);
    let c1 = b.open(300, 4005.0, None, "", 1.0);
    // The server thread: reads the request, blocks on the row lock (futex) 1001..4000, is
    // released, flushes (fdatasync 4002..4004, ended by the disk's interrupt), answers.
    let s0 = b.task(401, 0.0, 10.0, 1000.5, "recvfrom", 5.0);
    let s1 = b.task(401, 1000.5, 1001.0, 4000.0, "futex", 0.5);
    let s2 = b.task(401, 4000.0, 4002.0, 4004.0, "fdatasync", 2.0);
    let s3 = b.open(401, 4004.0, Some(4006.0), "recvfrom", 1.0);
    // The other connection's thread: idle until the holder's COMMIT at 3999, then commits
    // and releases the row lock at 4000.
    let t0 = b.task(402, 0.0, 500.0, 3999.0, "recvfrom", 5.0);
    let t1 = b.open(402, 3999.0, Some(4000.5), "recvfrom", 1.0);
    // The holder: took the lock, slept 3 s, sent COMMIT.
    let a0 = b.task(500, 0.0, 10.0, 3998.0, "clock_nanosleep", 5.0);
    let a1 = b.open(500, 3998.0, Some(3999.5), "recvfrom", 1.0);
    let disk = b.irq(1, SegmentKind::HardIrq { irq: 24 }, 4003.9, 4004.0);
    b.edge(c0, s1, EdgeKind::Message, Strength::Strong, 999.0, "sendto");
    b.wake(disk, s3, 4004.0, "");
    b.edge(
        s3,
        c1,
        EdgeKind::Message,
        Strength::Strong,
        4005.0,
        "sendto",
    );
    b.wake(t1, s2, 4000.0, "futex");
    b.edge(
        a1,
        t1,
        EdgeKind::Message,
        Strength::Strong,
        3998.5,
        "sendto",
    );
    for (x, y) in [(s0, s1), (s1, s2), (s2, s3), (t0, t1), (a0, a1), (c0, c1)] {
        let ts = b.segments.iter().find(|s| s.id == y).unwrap().start_ns.0 as f64 / 1e6;
        b.edge(x, y, EdgeKind::ThreadOrder, Strength::Weak, ts, "");
    }
    b.long_wait(c0);
    let r = run(&b.graph(), 300);
    assert_eq!(r.hang.class, SpinClass::LongWait);
    let tids = path_tids(&r);
    assert_eq!(
        r.root_causes.last().map(|c| (c.comm.as_str(), c.class)),
        Some(("holder", CauseClass::Sleep)),
        "{tids:?} {:#?}",
        r.root_causes
    );
    // The walk went through the row-lock wait, not into the disk interrupt.
    let segs: Vec<_> = r.path.iter().map(|p| p.segment).collect();
    assert!(segs.contains(&s2), "{segs:?}");
    assert!(
        !segs.contains(&disk),
        "the flush's interrupt is passed over: {segs:?}"
    );
    assert!(tids.contains(&402) && tids.contains(&500), "{tids:?}");
}

/// A client polls one socket with 500 ms timeouts; the reply comes after the server
/// computed 2.4 s. One logical wait: LongWait, ended by the reply.
#[test]
fn timed_out_polls_on_one_socket_are_one_long_wait_ended_by_the_reply() {
    let mut b = B::new(4000.0);
    b.thread(600, 600, "client", "client");
    b.thread(700, 700, "server", "server");
    let mut segs = Vec::new();
    let mut t = 0.0;
    for _ in 0..4 {
        segs.push(b.task(600, t, t + 1.0, t + 501.0, "poll", 0.5));
        t += 501.0;
    }
    // The wait the reply ends (poll returns 1).
    let last = b.seg(Seg {
        tid: 600,
        start: t,
        wait: Some(t + 1.0),
        end: Some(2600.0),
        sys: "poll",
        on_cpu: 0.5,
        ret: Some(1),
    });
    segs.push(last);
    let after = b.open(600, 2600.0, None, "", 1.0);
    for s in &segs {
        b.object(*s, 0x7ffd_1000);
    }
    let w0 = b.task(700, 0.0, 10.0, 150.0, "recvfrom", 5.0);
    let w1 = b.open(700, 150.0, Some(2599.0), "recvfrom", 2400.0);
    b.edge(
        w1,
        after,
        EdgeKind::Message,
        Strength::Strong,
        2598.0,
        "sendto",
    );
    b.edge(
        segs[0],
        w1,
        EdgeKind::Message,
        Strength::Strong,
        149.0,
        "sendto",
    );
    b.edge(w0, w1, EdgeKind::ThreadOrder, Strength::Weak, 150.0, "");
    let _ = Tid::irq(Cpu(0));
    let r = run(&b.graph(), 600);
    assert_eq!(r.hang.class, SpinClass::LongWait, "{:#?}", r.hang);
    assert_eq!((r.hang.segment, r.hang.last_segment), (segs[0], last));
    let root = r.root_causes.last().unwrap();
    assert_eq!(
        (root.comm.as_str(), root.class),
        ("server", CauseClass::LongRunning)
    );
    assert!(
        r.path.iter().all(|p| p.tid.0 == 600 || p.tid.0 == 700),
        "no timer or bystander on the path: {:?}",
        path_tids(&r)
    );
}

/// A client library polls its one connection for each reply (8 quick round trips teach
/// `poll` as the thread's loop wait); its ninth request takes the server 3 s. The long poll
/// is a round trip (a request to the server's process, ended by its reply), not idleness.
/// Without the request the same long poll is an idle loop.
#[test]
fn a_long_poll_ended_by_the_reply_to_its_own_request_is_a_hang_not_idleness() {
    let build = |asked: bool| {
        let mut b = B::new(4000.0);
        b.thread(800, 800, "client", "client");
        b.thread(901, 900, "conn", "server");
        let mut t = 0.0;
        for _ in 0..8 {
            b.task(800, t, t + 1.0, t + 10.0, "poll", 1.0);
            t += 10.0;
        }
        let ask = b.seg(Seg {
            tid: 800,
            start: t,
            wait: Some(t + 1.0),
            end: Some(t + 3002.0),
            sys: "poll",
            on_cpu: 1.0,
            ret: Some(1),
        });
        let after = b.open(800, t + 3002.0, Some(t + 3003.0), "", 1.0);
        let work = b.open(901, t + 0.5, Some(t + 3001.0), "sendto", 2990.0);
        if asked {
            b.edge(
                ask,
                work,
                EdgeKind::Message,
                Strength::Strong,
                t + 0.5,
                "sendto",
            );
        }
        b.edge(
            work,
            after,
            EdgeKind::Message,
            Strength::Strong,
            t + 3001.5,
            "sendto",
        );
        b.graph()
    };
    let g = build(true);
    let d = diagnose(
        &g,
        Some(Target {
            pid: Pid(800),
            tid: None,
        }),
        &mut AutoOracle,
        &DiagnoseConfig::default(),
    )
    .unwrap();
    let r = d.report.expect("a hang");
    assert_eq!(r.hang.class, SpinClass::LongWait);
    let root = r.root_causes.last().unwrap();
    assert_eq!((root.tid, root.class), (Tid(901), CauseClass::LongRunning));
    let idle = diagnose(
        &build(false),
        Some(Target {
            pid: Pid(800),
            tid: None,
        }),
        &mut AutoOracle,
        &DiagnoseConfig::default(),
    )
    .unwrap();
    assert!(idle.report.is_none(), "no request: an idle loop wait");
}
