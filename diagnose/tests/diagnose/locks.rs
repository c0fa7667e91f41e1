//! File locks (docs/rules.md, "Lock files"): a retry loop on a lock names its holder through
//! the lock-file edges and explains why the holder held it from the holder's own window.

use crate::builder::{nr, Seg, B};
use argus_diagnose::{
    diagnose, AutoOracle, CauseClass, DiagnoseConfig, Graph, PathEdgeKind, Report, Role, Target,
};
use argus_schema::{EdgeKind, Pid, SegmentId, Spin, SpinClass, Strength, Tid};

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

/// `db` retries `fcntl(F_SETLK)` every 20 ms for 3 s (refused: each attempt's segment has a
/// lock-file edge from the holder's lock); the holder, `locker`, took the lock at 900, then
/// waited in `wait4` for its child `sleep` (3 s); its exit released the lock, and `db`'s next
/// attempt got it. Meanwhile a bystander of `db`'s process computes.
fn retry_loop(with_edges: bool) -> (Graph, SegmentId, SegmentId) {
    let mut b = B::new(6000.0);
    b.thread(300, 300, "db", "db");
    b.thread(301, 300, "db-worker", "db");
    b.thread(400, 400, "locker", "locker");
    b.thread(410, 410, "sleep", "sleep");
    let mut loop_segs = Vec::new();
    let mut t = 1000.0;
    while t < 4000.0 {
        loop_segs.push(b.task(300, t, t + 0.05, t + 20.0, "clock_nanosleep", 0.05));
        t += 20.0;
    }
    let got = b.open(300, t, Some(t + 5.0), "pread64", 2.0);
    b.task(301, 0.0, 10.0, 1000.0, "futex", 5.0);
    b.open(301, 1000.0, Some(5000.0), "futex", 1500.0);
    // The holder: locks at 900 and forks `sleep` (its segment runs until 901), waits for it.
    let l0 = b.task(400, 0.0, 901.0, 3990.0, "wait4", 2.0);
    b.open(400, 3990.0, Some(3991.0), "", 0.5);
    let s0 = b.seg(Seg {
        tid: 410,
        start: 901.0,
        wait: Some(901.5),
        end: Some(3989.0),
        sys: "clock_nanosleep",
        on_cpu: 0.5,
        ret: Some(0),
    });
    let s1 = b.open(410, 3989.0, Some(3989.5), "", 0.2);
    b.edge(l0, s0, EdgeKind::Fork, Strength::Strong, 900.5, "clone");
    b.edge(s0, s1, EdgeKind::ThreadOrder, Strength::Weak, 3989.0, "");
    let l1 = SegmentId::new(Tid(400), 1);
    b.edge(
        s1,
        l1,
        EdgeKind::Exit,
        Strength::Strong,
        3989.5,
        "exit_group",
    );
    if with_edges {
        for s in &loop_segs {
            b.edge(
                l0,
                *s,
                EdgeKind::LockFile,
                Strength::Boosted,
                900.0,
                "fcntl",
            );
        }
        b.edge(
            l0,
            got,
            EdgeKind::LockFile,
            Strength::Boosted,
            900.0,
            "fcntl",
        );
    }
    b.spins.push(Spin {
        segment: loop_segs[0],
        last: *loop_segs.last().unwrap(),
        tid: Tid(300),
        pid: Pid(300),
        class: SpinClass::RepeatedYield,
        start_ns: crate::builder::ms(1000.0),
        end_ns: crate::builder::ms(t),
        open: false,
        on_cpu_ns: crate::builder::ms(7.5).0,
        wait_ns: crate::builder::ms(2990.0).0,
        segments: loop_segs.len() as u32,
        wait_syscall: nr("clock_nanosleep"),
        timeouts: 0,
    });
    (b.graph(), l0, s0)
}

#[test]
fn a_lock_retry_loop_names_the_holder_and_what_the_holder_waited_for() {
    let (g, holder, sleep) = retry_loop(true);
    let r = run(&g, 300);
    assert_eq!(r.hang.class, SpinClass::RepeatedYield);
    let setter = r.path.iter().find(|p| p.role == Role::Setter).unwrap();
    assert_eq!(setter.segment, holder);
    assert_eq!(
        setter.edge.unwrap().kind,
        PathEdgeKind::Edge(EdgeKind::LockFile)
    );
    let root = r.root_causes.last().unwrap();
    assert_eq!(
        (root.segment, root.class),
        (sleep, CauseClass::Sleep),
        "{:#?}",
        r.root_causes
    );
    assert!(
        r.path.iter().all(|p| p.tid.0 != 301),
        "the busy thread of the loop's process is no flag setter when the lock names the \
         holder: {:?}",
        r.path.iter().map(|p| p.tid).collect::<Vec<_>>()
    );
    assert!(r.questions.is_empty(), "{:#?}", r.questions);
}

/// The control: without the lock-file edges the loop looks like flag polling, and the busy
/// thread of its own process is the guess (so the edges, not the scenario, name the holder).
#[test]
fn without_lock_edges_the_same_loop_guesses_a_flag_setter_in_its_own_process() {
    let (g, _, _) = retry_loop(false);
    let r = run(&g, 300);
    let root = r.root_causes.last().unwrap();
    assert_eq!(root.tid, Tid(301), "{:#?}", r.root_causes);
}

/// apt-get's retry loop: two refused attempts 1.2 s apart (each turn longer than the 1 s
/// threshold), then the lock. One RepeatedYield over both turns, not a long sleep of the
/// waiter's own; the holder is named.
#[test]
fn a_retry_loop_with_sleeps_longer_than_the_threshold_is_one_loop_on_the_lock() {
    let mut b = B::new(4000.0);
    b.thread(300, 300, "apt-get", "apt-get");
    b.thread(400, 400, "perl", "perl");
    let t0 = b.task(300, 1000.0, 1000.1, 2200.0, "clock_nanosleep", 0.1);
    let t1 = b.task(300, 2200.0, 2200.1, 3400.0, "clock_nanosleep", 0.1);
    let got = b.open(300, 3400.0, Some(3401.0), "", 1.0);
    let held = b.task(400, 0.0, 900.0, 3390.0, "clock_nanosleep", 1.0);
    let release = b.open(400, 3390.0, Some(3391.0), "", 0.5);
    for s in [t0, t1] {
        b.edge(
            held,
            s,
            EdgeKind::LockFile,
            Strength::Boosted,
            899.0,
            "fcntl",
        );
    }
    b.edge(
        release,
        got,
        EdgeKind::LockFile,
        Strength::Boosted,
        3390.5,
        "fcntl",
    );
    let g = b.graph();
    let mut cfg = DiagnoseConfig::default();
    cfg.hang.threshold_ns = 1_000_000_000;
    let r = diagnose(
        &g,
        Some(Target {
            pid: Pid(300),
            tid: None,
        }),
        &mut AutoOracle,
        &cfg,
    )
    .unwrap()
    .report
    .unwrap();
    assert_eq!(r.hang.class, SpinClass::RepeatedYield, "{:#?}", r.hang);
    assert_eq!((r.hang.segment, r.hang.last_segment), (t0, t1));
    let setter = r.path.iter().find(|p| p.role == Role::Setter).unwrap();
    assert_eq!(setter.tid, Tid(400));
    let root = r.root_causes.last().unwrap();
    assert_eq!(
        (root.tid, root.class),
        (Tid(400), CauseClass::Sleep),
        "{:#?}",
        r.root_causes
    );
}

/// Lock owners the kernel named (docs/rules.md, "Lock owners"): `ui` blocks at 1000 on a
/// lock `mid` holds, and is still blocked when the trace ends at 6000; `mid` blocked at 500
/// on a lock `cruncher` holds; `cruncher` computes from 0 to the end. No wake-up ends either
/// wait. With `deadlock`, `mid` waits for a lock `ui` holds instead (and `cruncher` is
/// idle): a circle.
fn owners(with_edges: bool, deadlock: bool) -> (Graph, [SegmentId; 3]) {
    let mut b = B::new(6000.0);
    b.thread(500, 500, "ui", "app");
    b.thread(501, 500, "mid", "app");
    b.thread(502, 500, "cruncher", "app");
    let ui = b.open(500, 0.0, Some(1000.0), "futex", 20.0);
    let mid = b.open(501, 0.0, Some(500.0), "futex", 10.0);
    let cruncher = if deadlock {
        b.open(502, 0.0, Some(1.0), "read", 0.5)
    } else {
        b.open(502, 0.0, None, "", 5900.0)
    };
    b.long_wait(ui);
    if with_edges {
        b.edge(mid, ui, EdgeKind::LockOwner, Strength::Strong, 1000.0, "");
        let owner = if deadlock { ui } else { cruncher };
        b.edge(owner, mid, EdgeKind::LockOwner, Strength::Strong, 500.0, "");
    }
    (b.graph(), [ui, mid, cruncher])
}

/// The last root cause is `seg`, LongRunning.
fn busy_root(r: &Report, seg: SegmentId) {
    let root = r.root_causes.last().expect("a root cause");
    assert_eq!(
        (root.segment, root.class),
        (seg, CauseClass::LongRunning),
        "{:#?}",
        r.root_causes
    );
}

#[test]
fn a_wait_on_a_lock_still_held_follows_the_owners_to_the_busy_one() {
    let (g, [_, mid, cruncher]) = owners(true, false);
    let r = run(&g, 500);
    assert_eq!(r.hang.class, SpinClass::LongWait);
    let causes: Vec<(SegmentId, PathEdgeKind)> = r
        .path
        .iter()
        .filter(|p| p.role == Role::Cause)
        .map(|p| (p.segment, p.edge.expect("an edge").kind))
        .collect();
    let owner = PathEdgeKind::Edge(EdgeKind::LockOwner);
    assert_eq!(
        causes,
        vec![(mid, owner), (cruncher, owner)],
        "{:#?}",
        r.path
    );
    busy_root(&r, cruncher);
    // The owner in the middle, blocked holding the lock, is implicated too.
    assert!(r.root_causes.iter().any(|c| c.segment == mid));

    // Without the owners the kernel named, nothing says who the wait is for.
    let (g, _) = owners(false, false);
    let r = run(&g, 500);
    assert!(
        r.root_causes.iter().all(|c| c.segment.tid() != Tid(502)),
        "{:#?}",
        r.root_causes
    );
}

/// The same chain released in the end: `cruncher` unlocks at 5000 (a weak futex wake-up of
/// `mid`), `mid` unlocks at 5001 (one of `ui`). Each wake-up comes from the owner the kernel
/// named for the lock the wait was on, so it is the release, not mere mutual exclusion: the
/// walk follows both without a question. Without the owners, both are questions.
#[test]
fn a_wake_up_by_the_named_owner_is_followed_without_a_question() {
    let build = |with_owners: bool| {
        let mut b = B::new(6000.0);
        b.thread(500, 500, "ui", "app");
        b.thread(501, 500, "mid", "app");
        b.thread(502, 500, "cruncher", "app");
        let ui = b.task(500, 0.0, 1000.0, 5001.0, "futex", 20.0);
        let ui2 = b.open(500, 5001.0, None, "", 1.0);
        let mid = b.task(501, 0.0, 500.0, 5000.0, "futex", 10.0);
        let mid2 = b.open(501, 5000.0, Some(5002.0), "futex", 1.0);
        let cruncher = b.open(502, 0.0, Some(5003.0), "futex", 4990.0);
        b.long_wait(ui);
        b.edge(mid2, ui2, EdgeKind::Wakeup, Strength::Weak, 5001.0, "futex");
        b.edge(
            cruncher,
            mid2,
            EdgeKind::Wakeup,
            Strength::Weak,
            5000.0,
            "futex",
        );
        if with_owners {
            b.edge(mid, ui, EdgeKind::LockOwner, Strength::Strong, 1000.0, "");
            b.edge(
                cruncher,
                mid,
                EdgeKind::LockOwner,
                Strength::Strong,
                500.0,
                "",
            );
        }
        (b.graph(), cruncher)
    };
    let (g, cruncher) = build(true);
    let r = run(&g, 500);
    assert!(r.questions.is_empty(), "{:#?}", r.questions);
    busy_root(&r, cruncher);
    let (g, _) = build(false);
    assert_eq!(run(&g, 500).questions.len(), 2);
}

#[test]
fn owners_waiting_for_each_other_are_a_deadlock() {
    let (g, [ui, mid, _]) = owners(true, true);
    let r = run(&g, 500);
    let tids: Vec<Tid> = r.path.iter().map(|p| p.segment.tid()).collect();
    assert_eq!(tids, vec![Tid(500), Tid(501), Tid(500)], "{:#?}", r.path);
    assert!(
        r.root_causes
            .iter()
            .any(|c| c.segment == ui && matches!(c.finding, argus_diagnose::Finding::Circular)),
        "{:#?}",
        r.root_causes
    );
    assert!(r.root_causes.iter().any(|c| c.segment == mid));
}
