//! Blame over the window: the root cause is the thread that holds the hang's time, whatever
//! the walk reached last.

use crate::builder::{ms, B};
use argus_diagnose::{
    diagnose, AutoOracle, BlameState, CauseClass, DiagnoseConfig, Finding, Report, Target,
};
use argus_schema::{Cpu, EdgeKind, EndCause, Pid, SegmentKind, StartCause, Strength, Tid};

fn run(b: B, pid: i32) -> Report {
    let target = Target {
        pid: Pid(pid),
        tid: None,
    };
    let d = diagnose(
        &b.graph(),
        Some(target),
        &mut AutoOracle,
        &DiagnoseConfig::default(),
    )
    .expect("diagnosis");
    d.report.expect("a hang")
}

/// The shares of the contributors sum to at most the whole, each listed one holds at least
/// the threshold (the first excepted), largest first, and the steps' own times and waits
/// add up to what they cover.
fn check_shape(r: &Report) {
    let b = r.blame.as_ref().expect("a blame");
    let sum: f64 = b.contributors.iter().map(|c| c.share).sum();
    assert!(sum <= 1.0 + 1e-9, "shares sum to {sum}: {b:#?}");
    for (i, c) in b.contributors.iter().enumerate() {
        assert!(i == 0 || c.share >= b.min_share, "{c:#?}");
        assert_eq!(c.ns, c.time.total());
    }
    assert!(b.contributors.windows(2).all(|w| w[0].ns >= w[1].ns));
    for s in &b.steps {
        assert_eq!(s.covered_ns, s.time.total() + s.waiting_ns, "{s:#?}");
    }
    // The hung thread's whole window is accounted for.
    let hung = b
        .steps
        .iter()
        .find(|s| s.tid == r.hang.tid)
        .expect("the hung thread");
    assert_eq!(hung.covered_ns, b.window_ns, "{b:#?}");
}

/// The first miss: client ← server ← shell ← `sleep` (3.0 s on its own timer), the
/// sleep created 0.19 s into the window because the shell's read waited for the disk. The
/// walk goes on past the sleep to why it began late (the disk); the root cause is the
/// sleep, which holds 94% of the hang.
#[test]
fn a_culprit_that_started_late_for_a_short_reason_is_still_the_root() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "client", "client");
    b.thread(20, 20, "server", "server");
    b.thread(30, 30, "sh", "sh");
    b.thread(40, 40, "sleep", "sleep");
    // The client waits for the server's reply from 1 ms to 3200 ms.
    let c0 = b.task(10, 0.0, 1.0, 3200.0, "recvfrom", 1.0);
    let c1 = b.open(10, 3200.0, None, "", 1.0);
    b.edge(c0, c1, EdgeKind::Wakeup, Strength::Strong, 3200.0, "sendto");
    // The server waits for the shell's output, then replies.
    b.task(20, 0.0, 2.0, 3191.0, "read", 2.0);
    let s1 = b.task(20, 3191.0, 3200.0, 4000.0, "accept", 9.0);
    b.edge(
        s1,
        c1,
        EdgeKind::Message,
        Strength::Strong,
        3200.0,
        "sendto",
    );
    b.wake(s1, c1, 3200.0, "sendto");
    // The shell reads a script from disk (185 ms), forks `sleep`, waits for it, writes.
    b.task(30, 0.0, 5.0, 190.0, "read", 5.0);
    let disk = b.irq(1, SegmentKind::HardIrq { irq: 36 }, 189.9, 190.0);
    let sh1 = b.task(30, 190.0, 191.0, 3190.0, "wait4", 1.0);
    b.wake(disk, sh1, 190.0, "");
    let sh2 = b.task(30, 3190.0, 3191.0, 4000.0, "read", 1.0);
    b.edge(
        sh2,
        s1,
        EdgeKind::Message,
        Strength::Strong,
        3191.0,
        "write",
    );
    b.wake(sh2, s1, 3191.0, "write");
    // `sleep`: created at 191 ms, sleeps 2998 ms on its own timer, exits.
    let z0 = b.task(40, 191.0, 192.0, 3190.0, "clock_nanosleep", 1.0);
    b.set_start(z0, StartCause::Created);
    b.edge(sh1, z0, EdgeKind::Fork, Strength::Strong, 191.0, "clone");
    let timer = b.irq(
        0,
        SegmentKind::Timer {
            timer: 0x10,
            function: 0x20,
        },
        3190.0,
        3190.01,
    );
    b.edge(
        z0,
        timer,
        EdgeKind::Timer,
        Strength::Strong,
        192.0,
        "clock_nanosleep",
    );
    let z1 = b.task(40, 3190.0, 3190.0, 3190.5, "", 0.5);
    b.wake(timer, z1, 3190.0, "");
    if let Some(s) = b.segments.iter_mut().find(|s| s.id == z1) {
        s.end = EndCause::Exit;
        s.wait_start_ns = None;
    }
    b.edge(
        z1,
        sh2,
        EdgeKind::Exit,
        Strength::Strong,
        3190.0,
        "exit_group",
    );
    b.wake(z1, sh2, 3190.0, "exit_group");
    b.long_wait(c0);
    let r = run(b, 10);
    check_shape(&r);
    let blame = r.blame.as_ref().unwrap();
    let top = &blame.contributors[0];
    assert_eq!(top.tid, Tid(40), "{blame:#?}");
    assert_eq!(top.state, BlameState::Timer);
    assert!(top.share > 0.9, "{top:#?}");
    assert_eq!(top.time.timer_ns, ms(3190.0).0 - ms(192.0).0);
    // The disk's 185 ms (6%) is below the listing threshold.
    assert!(
        blame.contributors.iter().all(|c| c.tid != Tid::irq(Cpu(1))),
        "{blame:#?}"
    );
    let disk_ns = blame
        .steps
        .iter()
        .find(|s| s.tid == Tid::irq(Cpu(1)))
        .map(|s| s.time.device_ns);
    assert_eq!(disk_ns, Some(ms(190.0).0 - ms(5.0).0), "{blame:#?}");
    // The chain, in the order it was charged.
    let chain: Vec<Tid> = blame.steps.iter().map(|s| s.tid).collect();
    assert_eq!(
        &chain[..4],
        &[Tid(10), Tid(20), Tid(30), Tid(40)],
        "{chain:?}"
    );
    let root = r.root_causes.last().unwrap();
    assert_eq!(root.tid, Tid(40), "{:#?}", r.root_causes);
    // The walk went on to the disk, still listed, but not as the root.
    assert!(
        r.root_causes
            .iter()
            .any(|c| c.class == CauseClass::Interrupt && c.tid == Tid::irq(Cpu(1))),
        "{:#?}",
        r.root_causes
    );
    assert_eq!(root.class, CauseClass::Sleep);
    assert!(
        matches!(&root.finding, Finding::OwnTimer { syscall, slept: true, .. } if syscall == "clock_nanosleep"),
        "{:?}",
        root.finding
    );
    // JSON and text carry it.
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["blame"]["contributors"][0]["tid"], 40);
    assert_eq!(j["blame"]["contributors"][0]["state"], "timer");
    assert!(r.to_text().contains("Blame"));
}

/// Two culprits one after the other: the waker was blocked 1 s on X (busy), then busy 2 s
/// itself. Both are listed, the 2 s one first, and it is the root cause.
#[test]
fn two_culprits_one_after_the_other_are_ranked_by_their_time() {
    let mut b = B::new(5000.0);
    b.thread(1, 1, "main", "app");
    b.thread(2, 1, "w", "app");
    b.thread(3, 1, "x", "app");
    let h0 = b.task(1, 0.0, 0.0, 3000.0, "futex", 0.0);
    let h1 = b.open(1, 3000.0, None, "", 1.0);
    b.task(2, 0.0, 0.5, 1000.0, "futex", 0.5);
    let w1 = b.task(2, 1000.0, 3000.0, 4000.0, "futex", 1990.0);
    let x0 = b.task(3, 0.0, 1000.0, 2000.0, "futex", 1000.0);
    b.wake(x0, w1, 1000.0, "futex");
    b.wake(w1, h1, 3000.0, "futex");
    b.long_wait(h0);
    let r = run(b, 1);
    check_shape(&r);
    let blame = r.blame.as_ref().unwrap();
    let who: Vec<(Tid, BlameState)> = blame
        .contributors
        .iter()
        .map(|c| (c.tid, c.state))
        .collect();
    assert_eq!(
        who,
        [(Tid(2), BlameState::OnCpu), (Tid(3), BlameState::OnCpu)],
        "{blame:#?}"
    );
    assert!((blame.contributors[0].share - 2.0 / 3.0).abs() < 0.01);
    assert!((blame.contributors[1].share - 1.0 / 3.0).abs() < 0.01);
    let root = r.root_causes.last().unwrap();
    assert_eq!((root.tid, root.class), (Tid(2), CauseClass::LongRunning));
    // The waker waited 1 s for x: its step says so.
    let w = blame.steps.iter().find(|s| s.tid == Tid(2)).unwrap();
    assert_eq!(w.waiting_on, [Tid(3)]);
    assert_eq!(w.waiting_ns, ms(1000.0).0 - ms(0.5).0);
}

/// A culprit that was runnable but starved of CPU: its share is mostly runnable time.
#[test]
fn a_starved_culprit_holds_the_window_as_runnable() {
    let mut b = B::new(5000.0);
    b.thread(1, 1, "main", "app");
    b.thread(2, 1, "w", "app");
    let h0 = b.task(1, 0.0, 0.0, 3000.0, "futex", 0.0);
    let h1 = b.open(1, 3000.0, None, "", 1.0);
    let w0 = b.task(2, 0.0, 3000.0, 4000.0, "futex", 200.0);
    b.wake(w0, h1, 3000.0, "futex");
    b.long_wait(h0);
    let r = run(b, 1);
    check_shape(&r);
    let blame = r.blame.as_ref().unwrap();
    let top = &blame.contributors[0];
    assert_eq!((top.tid, top.state), (Tid(2), BlameState::Runnable));
    assert_eq!(top.time.on_cpu_ns, ms(200.0).0);
    assert_eq!(top.time.runnable_ns, ms(2800.0).0);
    let root = r.root_causes.last().unwrap();
    assert_eq!(root.tid, Tid(2));
    assert!(matches!(root.finding, Finding::Starved { .. }), "{root:#?}");
}
