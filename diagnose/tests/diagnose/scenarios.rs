//! One scenario per rule of the walk.

use crate::builder::{ms, nr, Seg, B};
use argus_diagnose::{
    diagnose, diagnose_spin, find_hang, Answer, AutoOracle, By, CauseClass, DiagnoseConfig, During,
    Finding, Graph, Outcome, PathEdgeKind, Reply, Report, Role, RunStart, ScriptedOracle, Step,
    Target, TerminalOracle, WakerState,
};
use argus_schema::{
    EdgeKind, Pid, SegmentId, SegmentKind, Spin, SpinClass, StartCause, Strength, Tid,
};
use std::io::Cursor;

fn run(g: &Graph, pid: i32, oracle: &mut dyn argus_diagnose::Oracle) -> Report {
    let target = Target {
        pid: Pid(pid),
        tid: None,
    };
    let d = diagnose(g, Some(target), oracle, &DiagnoseConfig::default()).unwrap();
    assert_eq!(d.outcome(), Outcome::HangDiagnosed);
    assert_eq!(d.outcome().exit_code(), 1);
    d.report.unwrap()
}

fn labels(r: &Report) -> Vec<String> {
    r.path.iter().map(|p| p.segment_label.clone()).collect()
}

/// main (futex) ← worker (had waited in read) ← sleeper (wrote after its own 3 s nanosleep).
struct Chain {
    graph: Graph,
    m0: SegmentId,
    w1: SegmentId,
    s0: SegmentId,
    s1: SegmentId,
    t: SegmentId,
}

fn chain() -> Chain {
    let mut b = B::new(6000.0);
    b.thread(1234, 1234, "hangdemo", "hangdemo");
    b.thread(1236, 1234, "worker", "hangdemo");
    b.thread(1237, 1237, "sleeper", "sleeper");
    let m0 = b.task(1234, 0.0, 1000.0, 4004.0, "futex", 900.0);
    let m1 = b.open(1234, 4004.0, Some(4010.0), "epoll_wait", 5.0);
    let w0 = b.task(1236, 0.0, 1000.5, 4002.5, "read", 500.0);
    let w1 = b.open(1236, 4002.5, Some(4004.5), "read", 1.5);
    let s0 = b.task(1237, 0.0, 1001.0, 4002.0, "clock_nanosleep", 600.0);
    let s1 = b.open(1237, 4002.0, Some(4002.6), "clock_nanosleep", 0.5);
    let t = b.irq(
        1,
        SegmentKind::Timer {
            timer: 0xffff_0001,
            function: 0xffff_0002,
        },
        4001.95,
        4002.0,
    );
    b.edge(
        s0,
        t,
        EdgeKind::Timer,
        Strength::Strong,
        1000.9,
        "clock_nanosleep",
    );
    b.wake(t, s1, 4002.0, "");
    b.wake(s1, w1, 4002.5, "write");
    b.wake(w1, m1, 4004.0, "futex");
    for (a, c) in [(m0, m1), (w0, w1), (s0, s1)] {
        let ts = b.segments.iter().find(|s| s.id == c).unwrap().start_ns.0 as f64 / 1e6;
        b.edge(a, c, EdgeKind::ThreadOrder, Strength::Weak, ts, "");
    }
    b.long_wait(m0);
    Chain {
        graph: b.graph(),
        m0,
        w1,
        s0,
        s1,
        t,
    }
}

#[test]
fn a_chain_of_waits_ends_at_the_thread_that_slept_on_its_own_timer() {
    let c = chain();
    let r = run(&c.graph, 1234, &mut AutoOracle);
    assert_eq!(r.hang.class, SpinClass::LongWait);
    assert_eq!(r.hang.segment, c.m0);
    assert_eq!(
        r.path.iter().map(|p| p.segment).collect::<Vec<_>>(),
        vec![c.m0, c.w1, c.s1, c.t, c.s0],
        "{:?}",
        labels(&r)
    );
    assert!(r.path[0].edge.is_none());
    let kinds: Vec<PathEdgeKind> = r.path[1..].iter().map(|p| p.edge.unwrap().kind).collect();
    assert_eq!(
        kinds,
        vec![
            PathEdgeKind::Edge(EdgeKind::Wakeup),
            PathEdgeKind::Edge(EdgeKind::Wakeup),
            PathEdgeKind::Edge(EdgeKind::Wakeup),
            PathEdgeKind::Edge(EdgeKind::Timer)
        ]
    );
    assert_eq!(
        r.path[1].step,
        Step::Waker {
            by: By::Edge {
                edge: PathEdgeKind::Edge(EdgeKind::Wakeup),
                syscall: Some("futex".into()),
            },
            then: WakerState::HadWaited {
                syscall: "read".into(),
                wait_ns: ms(3002.0).0,
                slept: false,
            },
        }
    );
    assert_eq!(r.root_causes.len(), 1);
    let rc = &r.root_causes[0];
    assert_eq!(rc.segment, c.s0);
    assert_eq!(rc.class, CauseClass::Sleep);
    assert_eq!(rc.comm, "sleeper");
    assert_eq!(
        rc.finding,
        Finding::OwnTimer {
            syscall: "clock_nanosleep".into(),
            wait_ns: ms(3001.0).0,
            slept: true,
        }
    );
    // The words are made from that data: the terminal text and the summary say it.
    assert!(r.questions.is_empty(), "single strong edges are followed");
    let text = r.to_text();
    assert!(
        text.starts_with(
            "Hang: main thread of hangdemo (pid 1234) blocked 3.004 s in futex (LongWait)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "Root cause: sleeper (pid 1237) slept 3.001 s in clock_nanosleep (its own timer).\n"
        ),
        "{text}"
    );
    assert!(
        r.summary.contains("Root cause: sleeper (pid 1237) slept"),
        "{}",
        r.summary
    );
}

#[test]
fn a_waker_busy_through_the_wait_is_a_long_running_culprit_with_context() {
    let mut b = B::new(6000.0);
    b.thread(100, 100, "app", "app");
    b.thread(101, 100, "cruncher", "app");
    let m0 = b.task(100, 0.0, 500.0, 3600.0, "futex", 400.0);
    let m1 = b.open(100, 3600.0, Some(3700.0), "poll", 50.0);
    b.task(101, 0.0, 10.0, 450.0, "futex", 5.0);
    let k1 = b.task(101, 450.0, 3600.5, 5000.0, "futex", 3100.0);
    b.wake(m0, k1, 450.0, "futex");
    b.wake(k1, m1, 3600.0, "futex");
    b.long_wait(m0);
    let r = run(&b.graph(), 100, &mut AutoOracle);
    assert_eq!(r.root_causes.len(), 1);
    let rc = &r.root_causes[0];
    assert_eq!((rc.segment, rc.class), (k1, CauseClass::LongRunning));
    assert_eq!(
        rc.finding,
        Finding::Busy {
            on_cpu_ns: ms(3100.0).0,
            run_ns: ms(3150.5).0,
            woke: Some(Tid(100)),
            through_brief_waits: false,
            still_running: false,
        }
    );
    assert_eq!(r.path[1].segment, k1);
    assert_eq!(r.path[1].role, Role::Cause);
    // Context: the cruncher's run began when main handed it the work.
    let ctx = r.path.last().unwrap();
    assert_eq!((ctx.segment, ctx.role), (m0, Role::Context));
    assert_eq!(
        ctx.step,
        Step::RunBegan {
            how: RunStart::Woken,
            syscall: Some("futex".into()),
            at: ms(450.0),
        }
    );
}

#[test]
fn a_starved_waker_is_reported_as_runnable_but_not_running() {
    let mut b = B::new(6000.0);
    b.thread(100, 100, "app", "app");
    b.thread(101, 100, "lowprio", "app");
    let m0 = b.task(100, 0.0, 500.0, 3600.0, "futex", 400.0);
    let m1 = b.open(100, 3600.0, None, "", 50.0);
    let k0 = b.task(101, 400.0, 3600.5, 5000.0, "futex", 40.0);
    b.wake(k0, m1, 3600.0, "futex");
    b.long_wait(m0);
    let r = run(&b.graph(), 100, &mut AutoOracle);
    let rc = &r.root_causes[0];
    assert_eq!((rc.segment, rc.class), (k0, CauseClass::LongRunning));
    assert_eq!(
        rc.finding,
        Finding::Starved {
            on_cpu_ns: ms(40.0).0,
            run_ns: ms(3200.5).0,
            preemptions: 0,
            woke: Some(Tid(100)),
            still_running: false,
            lost_ns: 0,
        }
    );
    assert_eq!(r.hang.lost_ns, 0);
    assert!(r.advice.is_empty(), "{:?}", r.advice);
}

#[test]
fn a_starved_run_inside_lost_events_is_marked_unrecorded_not_trusted() {
    // The same graph, but a CPU lost events from 1.0 s to 3.0 s: lowprio's waits there, if
    // it had any, are not in the trace.
    let mut b = B::new(6000.0);
    b.thread(100, 100, "app", "app");
    b.thread(101, 100, "lowprio", "app");
    let m0 = b.task(100, 0.0, 500.0, 3600.0, "futex", 400.0);
    let m1 = b.open(100, 3600.0, None, "", 50.0);
    let k0 = b.task(101, 400.0, 3600.5, 5000.0, "futex", 40.0);
    b.wake(k0, m1, 3600.0, "futex");
    b.long_wait(m0);
    let mut g = b.graph();
    g.set_lost_ranges([(ms(3000.0), ms(1000.0))]);
    let r = run(&g, 100, &mut AutoOracle);
    let rc = &r.root_causes[0];
    assert_eq!((rc.segment, rc.class), (k0, CauseClass::LongRunning));
    assert_eq!(
        rc.finding,
        Finding::Starved {
            on_cpu_ns: ms(40.0).0,
            run_ns: ms(3200.5).0,
            preemptions: 0,
            woke: Some(Tid(100)),
            still_running: false,
            lost_ns: ms(2000.0).0,
        }
    );
    // The hang (0.5 s to 3.6 s) overlaps the range for 2 s: the report says so.
    assert_eq!(r.hang.lost_ns, ms(2000.0).0);
    assert_eq!(r.advice.len(), 1, "{:?}", r.advice);
}

/// main polls with 1 ms nanosleeps for 3 s while `busy` computes and `idle` sleeps.
fn yield_loop() -> (Graph, SegmentId) {
    let mut b = B::new(6000.0);
    b.thread(200, 200, "poller", "poller");
    b.thread(201, 200, "busy", "poller");
    b.thread(202, 200, "idle", "poller");
    b.task(200, 0.0, 900.0, 1000.0, "futex", 100.0);
    let mut first = None;
    let mut last = None;
    for i in 0..3000 {
        let t = 1000.0 + i as f64;
        let s = b.task(200, t, t + 0.02, t + 1.0, "nanosleep", 0.02);
        first.get_or_insert(s);
        last = Some(s);
    }
    b.open(200, 4000.0, Some(4100.0), "epoll_wait", 50.0);
    b.task(201, 0.0, 10.0, 900.0, "futex", 5.0);
    let busy = b.task(201, 900.0, 3999.0, 5000.0, "futex", 3050.0);
    b.open(202, 0.0, Some(10.0), "epoll_wait", 1.0);
    let (first, last) = (first.unwrap(), last.unwrap());
    b.spins.push(Spin {
        segment: first,
        last,
        tid: Tid(200),
        pid: Pid(200),
        class: SpinClass::RepeatedYield,
        start_ns: ms(1000.0),
        end_ns: ms(4000.0),
        open: false,
        on_cpu_ns: ms(60.0).0,
        wait_ns: ms(2940.0).0,
        segments: 3000,
        wait_syscall: nr("nanosleep"),
        timeouts: 0,
    });
    (b.graph(), busy)
}

#[test]
fn a_yield_loop_names_the_busy_thread_of_the_process_as_the_flag_setter() {
    let (g, busy) = yield_loop();
    let r = run(&g, 200, &mut AutoOracle);
    assert_eq!(r.hang.class, SpinClass::RepeatedYield);
    assert_eq!(r.hang.last_segment.tid(), Tid(200));
    assert!(
        matches!(
            &r.path[0].step,
            Step::HangPoll { waits: 3000, syscall, .. } if syscall == "nanosleep"
        ),
        "{:?}",
        r.path[0].step
    );
    assert_eq!(r.questions.len(), 1);
    let q = &r.questions[0];
    assert_eq!(
        q.choices.len(),
        1,
        "the idle thread never ran: not a setter"
    );
    assert_eq!(q.choices[0].tid, Tid(201));
    assert_eq!(q.choices[0].kind, "flag");
    assert!(q.defaulted);
    let setter = r.path.iter().find(|p| p.role == Role::Setter).unwrap();
    assert_eq!(setter.segment, busy);
    assert_eq!(
        setter.edge.unwrap().kind,
        PathEdgeKind::Edge(EdgeKind::Flag)
    );
    let rc = &r.root_causes[0];
    assert_eq!((rc.segment, rc.class), (busy, CauseClass::LongRunning));
    assert!(
        matches!(
            rc.finding,
            Finding::LikelySetterBusy {
                poller: Tid(200),
                loop_ns: 3_000_000_000,
                ..
            }
        ),
        "{:?}",
        rc.finding
    );
    assert!(r
        .advice
        .iter()
        .any(|a| a.contains("hardware watchpoint") && a.contains("argus:flag-set")));
    let names: Vec<&str> = r.candidates.iter().map(|c| c.comm.as_str()).collect();
    assert_eq!(names, vec!["busy", "idle"]);
    assert!(r.to_text().contains("flag setter?"), "{}", r.to_text());
}

/// main's read is never answered; before, `feeder` ended the same read in 0.4 ms.
#[test]
fn an_open_wait_is_compared_with_the_baseline_waker() {
    let mut b = B::new(3300.0);
    b.thread(300, 300, "viewer", "viewer");
    b.thread(302, 300, "feeder", "viewer");
    b.task(300, 0.0, 100.0, 100.4, "read", 50.0);
    let m1 = b.open(300, 100.4, Some(200.0), "read", 60.0);
    let f0 = b.task(302, 0.0, 100.5, 150.0, "read", 90.0);
    let f1 = b.open(302, 150.0, Some(190.0), "read", 30.0);
    b.wake(f0, m1, 100.4, "write");
    b.long_wait(m1);
    let r = run(&b.graph(), 300, &mut AutoOracle);
    assert!(r.hang.open);
    assert_eq!(r.root_causes[0].segment, m1);
    assert_eq!(r.root_causes[0].class, CauseClass::LongWait);
    assert_eq!(
        r.root_causes[0].finding,
        Finding::NeverWoken {
            syscall: "read".into(),
            wait_ns: ms(3100.0).0,
            exited: false,
        }
    );
    let rc = r.root_causes.iter().find(|c| c.segment == f1).unwrap();
    assert_eq!(rc.class, CauseClass::LongWait);
    let blocked = During::Blocked {
        syscall: "read".into(),
        blocked_ns: ms(3100.0).0,
        still_waiting: true,
    };
    assert_eq!(
        rc.finding,
        Finding::OnBaselinePath {
            waiter: Tid(300),
            normally_wakes: true,
            during: blocked.clone(),
            circular: false,
        }
    );
    let item = r.path.iter().find(|p| p.role == Role::Baseline).unwrap();
    assert_eq!(item.segment, f1);
    assert_eq!(item.edge.unwrap().kind, PathEdgeKind::Baseline);
    assert_eq!(
        item.step,
        Step::Baseline {
            normally_wakes: true,
            baseline_tid: Tid(302),
            syscall: Some("write".into()),
            baseline_at: ms(100.0),
            baseline_wait_ns: ms(0.4).0,
            during: blocked.clone(),
        }
    );
    let c = &r.candidates[0];
    assert_eq!(c.tid, Tid(302));
    assert!(c.baseline_waker);
    assert_eq!(c.during, blocked);
}

#[test]
fn a_timed_out_wait_is_its_own_root_cause() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "app", "app");
    let m0 = b.seg(Seg {
        tid: 10,
        start: 0.0,
        wait: Some(100.0),
        end: Some(3100.0),
        sys: "futex",
        on_cpu: 90.0,
        ret: Some(-110),
    });
    let t = b.irq(
        0,
        SegmentKind::Timer {
            timer: 1,
            function: 2,
        },
        3099.9,
        3100.0,
    );
    let m1 = b.open(10, 3100.0, None, "", 5.0);
    b.wake(t, m1, 3100.0, "");
    b.edge(m0, t, EdgeKind::Timer, Strength::Strong, 99.0, "futex");
    b.long_wait(m0);
    let r = run(&b.graph(), 10, &mut AutoOracle);
    assert_eq!(r.root_causes.len(), 1);
    assert_eq!(r.root_causes[0].segment, m0);
    assert_eq!(r.root_causes[0].class, CauseClass::Sleep);
    assert_eq!(
        r.root_causes[0].finding,
        Finding::TimedOut {
            syscall: "futex".into(),
            wait_ns: ms(3000.0).0,
        }
    );
}

#[test]
fn a_poll_timeout_seen_only_through_its_own_timer_is_a_self_sleep() {
    // No return value recorded: the self-cycle through the timer says it timed out.
    let mut b = B::new(5000.0);
    b.thread(10, 10, "app", "app");
    let m0 = b.seg(Seg {
        tid: 10,
        start: 0.0,
        wait: Some(100.0),
        end: Some(3100.0),
        sys: "poll",
        on_cpu: 90.0,
        ret: None,
    });
    let t = b.irq(
        0,
        SegmentKind::Timer {
            timer: 1,
            function: 2,
        },
        3099.9,
        3100.0,
    );
    let m1 = b.open(10, 3100.0, None, "", 5.0);
    b.wake(t, m1, 3100.0, "");
    b.edge(m0, t, EdgeKind::Timer, Strength::Strong, 99.0, "poll");
    b.long_wait(m0);
    let r = run(&b.graph(), 10, &mut AutoOracle);
    assert_eq!(labels(&r), vec!["10#0", "irq@cpu0#0"]);
    assert_eq!(r.root_causes[0].segment, m0);
    assert_eq!(
        r.root_causes[0].finding,
        Finding::OwnTimer {
            syscall: "poll".into(),
            wait_ns: ms(3000.0).0,
            slept: false,
        }
    );
}

/// A server polling with a timeout (a logical wait) is woken by an interrupt, and in the run
/// that begins reads the request a client sent during the wait (a loopback packet delivered at
/// a timer interrupt's exit, the request read in a segment split from the first): the
/// client, not the interrupt, ended the wait. (`redis-blpop` of the real suite under load.)
#[test]
fn data_sent_during_the_wait_and_read_in_the_run_an_interrupt_began_explains_the_wait() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "server", "server");
    b.thread(20, 20, "client", "client");
    let m0 = b.seg(Seg {
        tid: 10,
        start: 0.0,
        wait: Some(100.0),
        end: Some(3100.0),
        sys: "epoll_wait",
        on_cpu: 90.0,
        ret: Some(1),
    });
    // The run after the wake-up: 3100..3100.5, split (no wait) into a second segment that
    // reads the request, and blocks again at 3101.
    let m1 = b.seg(Seg {
        tid: 10,
        start: 3100.0,
        wait: None,
        end: Some(3100.5),
        sys: "",
        on_cpu: 0.5,
        ret: None,
    });
    let m2 = b.open(10, 3100.5, Some(3101.0), "epoll_wait", 0.5);
    let irq = b.irq(0, SegmentKind::HardIrq { irq: 24 }, 3099.9, 3100.0);
    b.wake(irq, m1, 3100.0, "");
    b.edge(m1, m2, EdgeKind::ThreadOrder, Strength::Weak, 3100.5, "");
    // The client slept 3 s, then sent its request at 3099.95, during the server's wait.
    let c0 = b.task(20, 0.0, 10.0, 3099.9, "clock_nanosleep", 5.0);
    let c1 = b.open(20, 3099.9, Some(3100.0), "read", 0.05);
    b.edge(
        c1,
        m2,
        EdgeKind::Message,
        Strength::Strong,
        3099.95,
        "write",
    );
    b.long_wait(m0);
    let r = run(&b.graph(), 10, &mut AutoOracle);
    let path: Vec<SegmentId> = r.path.iter().map(|p| p.segment).collect();
    assert!(
        path.contains(&c1),
        "the walk goes to the client: {:?}",
        labels(&r)
    );
    assert!(
        !path.contains(&irq),
        "not to the interrupt: {:?}",
        labels(&r)
    );
    assert_eq!(r.root_causes[0].segment, c0, "{:?}", r.root_causes);
}

/// A client blocked on a server's reply. The server waited in `epoll_wait` through the
/// window until a timer interrupt woke it; in the run that began it read a pusher's request
/// (a segment split from the first, no wait between) and replied. The pusher, which slept
/// before sending, is what the client waited for; the timer only woke the server's loop.
/// (`redis-blpop` of the real suite when redis's own timer fires just before the request.)
#[test]
fn a_request_read_in_the_run_a_timer_began_explains_the_late_waker() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "server", "server");
    b.thread(20, 20, "pusher", "pusher");
    b.thread(30, 30, "client", "client");
    let c0 = b.task(30, 0.0, 1.0, 3100.0, "recvfrom", 0.5);
    let c1 = b.open(30, 3100.0, None, "", 0.5);
    b.task(10, 0.0, 10.0, 3095.0, "epoll_wait", 5.0);
    let m1 = b.seg(Seg {
        tid: 10,
        start: 3095.0,
        wait: None,
        end: Some(3099.5),
        sys: "",
        on_cpu: 4.0,
        ret: None,
    });
    let m2 = b.open(10, 3099.5, Some(3101.0), "epoll_wait", 0.5);
    let timer = b.irq(
        0,
        SegmentKind::Timer {
            timer: 1,
            function: 2,
        },
        3094.9,
        3095.0,
    );
    b.wake(timer, m1, 3095.0, "");
    b.edge(m1, m2, EdgeKind::ThreadOrder, Strength::Weak, 3099.5, "");
    // The pusher slept 3 s, then sent its request during the server's run.
    let p0 = b.task(20, 0.0, 1.0, 3099.0, "clock_nanosleep", 0.5);
    let p1 = b.open(20, 3099.0, Some(3099.6), "read", 0.2);
    b.edge(p1, m2, EdgeKind::Message, Strength::Strong, 3099.5, "write");
    b.edge(m2, c1, EdgeKind::Message, Strength::Strong, 3100.0, "write");
    b.long_wait(c0);
    let r = run(&b.graph(), 30, &mut AutoOracle);
    let path: Vec<SegmentId> = r.path.iter().map(|p| p.segment).collect();
    assert!(
        path.contains(&p1),
        "the walk goes to the pusher: {:?}",
        labels(&r)
    );
    assert!(!path.contains(&timer), "not to the timer: {:?}", labels(&r));
    assert_eq!(r.root_causes[0].segment, p0, "{:?}", r.root_causes);
}

/// Always takes the last choice offered (the least likely by the walk's own order).
struct LastChoice;
impl argus_diagnose::Oracle for LastChoice {
    fn ask(&mut self, q: &argus_diagnose::Question) -> argus_diagnose::Reply {
        argus_diagnose::Reply::Choice(q.choices.len().saturating_sub(1))
    }
}

/// A client blocked on a server's reply; the server got the request from a pusher that
/// had waited for `sleep` to exit, and the pusher later read the server's reply to its own
/// request without blocking (a data dependency into the pusher's segment, after its wait
/// ended). That reply did not end the pusher's wait: it is not offered as what did, even to
/// a user who would pick it. (`redis-blpop` of the real suite, with socket data edges.)
#[test]
fn data_read_after_a_wait_ended_is_not_offered_as_what_ended_it() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "server", "server");
    b.thread(20, 20, "pusher", "pusher");
    b.thread(30, 30, "client", "client");
    b.thread(40, 40, "sleep", "sleep");
    // The client waits for the reply from 0 to 3100.
    let c0 = b.task(30, 0.0, 1.0, 3100.0, "recvfrom", 0.5);
    let c1 = b.open(30, 3100.0, None, "", 0.5);
    // sleep slept 3 s and exited at 3098, ending the pusher's wait4.
    let sl = b.task(40, 0.0, 1.0, 3098.0, "clock_nanosleep", 0.5);
    let sl1 = b.open(40, 3098.0, None, "", 0.1);
    let p0 = b.task(20, 0.0, 2.0, 3098.0, "wait4", 1.0);
    let p1 = b.open(20, 3098.0, Some(3101.0), "recvfrom", 2.0);
    b.edge(
        sl1,
        p1,
        EdgeKind::Exit,
        Strength::Strong,
        3098.0,
        "exit_group",
    );
    // The pusher connects (waking the server) and sends its request; the server pushes to
    // the client and replies to the pusher, which reads the reply without blocking.
    b.task(10, 0.0, 10.0, 3099.0, "epoll_wait", 5.0);
    let m1 = b.open(10, 3099.0, Some(3101.0), "epoll_wait", 1.0);
    b.edge(p1, m1, EdgeKind::Wakeup, Strength::Weak, 3099.0, "connect");
    b.edge(
        p1,
        m1,
        EdgeKind::Message,
        Strength::Strong,
        3099.05,
        "sendto",
    );
    b.edge(m1, c1, EdgeKind::Message, Strength::Strong, 3100.0, "write");
    b.edge(m1, p1, EdgeKind::Message, Strength::Strong, 3100.2, "write");
    b.long_wait(c0);
    let g = b.graph();
    for r in [run(&g, 30, &mut AutoOracle), run(&g, 30, &mut LastChoice)] {
        let path: Vec<SegmentId> = r.path.iter().map(|p| p.segment).collect();
        assert!(path.contains(&m1) && path.contains(&p1), "{:?}", labels(&r));
        assert_eq!(r.root_causes[0].segment, sl, "{:?}", labels(&r));
        assert!(
            r.questions
                .iter()
                .filter(|q| q.about == p1 || q.about == p0)
                .all(|q| q.choices.iter().all(|c| c.segment != m1)),
            "{:#?}",
            r.questions
        );
    }
}

#[test]
fn a_device_interrupt_with_no_cause_ends_the_walk() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "app", "app");
    let m0 = b.task(10, 0.0, 100.0, 3100.0, "read", 90.0);
    let m1 = b.open(10, 3100.0, None, "", 5.0);
    let irq = b.irq(0, SegmentKind::HardIrq { irq: 24 }, 3099.9, 3100.0);
    b.wake(irq, m1, 3100.0, "");
    b.long_wait(m0);
    let r = run(&b.graph(), 10, &mut AutoOracle);
    let rc = &r.root_causes[0];
    assert_eq!((rc.segment, rc.class), (irq, CauseClass::Interrupt));
    assert_eq!(
        rc.finding,
        Finding::Interrupt {
            woke: Tid(10),
            after_ns: ms(3000.0).0,
            device: true,
        }
    );
}

#[test]
fn a_waker_created_late_leads_to_its_creator() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "app", "app");
    b.thread(20, 20, "launcher", "launcher");
    b.thread(21, 21, "helper", "helper");
    let m0 = b.task(10, 0.0, 100.0, 3100.0, "wait4", 90.0);
    let m1 = b.open(10, 3100.0, None, "", 5.0);
    let l0 = b.task(20, 0.0, 3000.0, 4000.0, "futex", 2900.0);
    let h0 = b.open(21, 3000.0, None, "", 100.0);
    b.set_start(h0, StartCause::Created);
    b.edge(l0, h0, EdgeKind::Fork, Strength::Strong, 3000.0, "clone");
    b.wake(h0, m1, 3100.0, "exit_group");
    b.long_wait(m0);
    let r = run(&b.graph(), 10, &mut AutoOracle);
    assert_eq!(labels(&r), vec!["10#0", "21#0", "20#0"]);
    let rc = &r.root_causes[0];
    assert_eq!((rc.segment, rc.class), (l0, CauseClass::LongRunning));
    assert_eq!(
        rc.finding,
        Finding::CreatedLate {
            created: Tid(21),
            late_ns: ms(2900.0).0,
            woke: Tid(10),
        }
    );
}

#[test]
fn a_long_running_hang_is_its_own_culprit_sliced_back_to_its_input() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "app", "app");
    b.thread(30, 30, "Xorg", "Xorg");
    let x0 = b.task(30, 0.0, 50.0, 200.0, "epoll_wait", 40.0);
    b.task(10, 0.0, 10.0, 100.0, "poll", 5.0);
    let m1 = b.open(10, 100.0, None, "", 3900.0);
    b.wake(x0, m1, 100.0, "writev");
    b.spins.push(Spin {
        segment: m1,
        last: m1,
        tid: Tid(10),
        pid: Pid(10),
        class: SpinClass::LongRunning,
        start_ns: ms(100.0),
        end_ns: ms(5000.0),
        open: true,
        on_cpu_ns: ms(3900.0).0,
        wait_ns: 0,
        segments: 1,
        wait_syscall: -1,
        timeouts: 0,
    });
    let r = run(&b.graph(), 10, &mut AutoOracle);
    assert_eq!(r.hang.class, SpinClass::LongRunning);
    assert_eq!(r.root_causes[0].segment, m1);
    assert_eq!(
        r.root_causes[0].finding,
        Finding::Busy {
            on_cpu_ns: ms(3900.0).0,
            run_ns: ms(4900.0).0,
            woke: None,
            through_brief_waits: false,
            still_running: true,
        }
    );
    assert_eq!(labels(&r), vec!["10#1", "30#0"]);
    assert_eq!(r.path[1].role, Role::Input, "writev sent the input");
    assert_eq!(
        r.path[1].step,
        Step::RunBegan {
            how: RunStart::SentInput,
            syscall: Some("writev".into()),
            at: ms(100.0),
        }
    );
    assert!(r
        .advice
        .iter()
        .any(|a| a.contains("started with the input")));
}

/// main's futex wait ended with two wake-ups: `alpha` (strong, running all along) and `beta`
/// (weak and more recent, after its own 3 s nanosleep).
fn two_wakers() -> (Graph, SegmentId, SegmentId, SegmentId) {
    let mut b = B::new(6000.0);
    b.thread(400, 400, "gui", "gui");
    b.thread(401, 400, "alpha", "gui");
    b.thread(402, 400, "beta", "gui");
    let m0 = b.task(400, 0.0, 1000.0, 4000.0, "futex", 900.0);
    let m1 = b.open(400, 4000.0, Some(4100.0), "poll", 10.0);
    let a0 = b.task(401, 0.0, 3995.0, 6000.0, "futex", 3900.0);
    let b0 = b.task(402, 0.0, 990.0, 3998.0, "nanosleep", 5.0);
    let b1 = b.open(402, 3998.0, Some(4001.0), "futex", 2.0);
    b.wake(a0, m1, 3990.0, "futex");
    b.edge(b1, m1, EdgeKind::Wakeup, Strength::Weak, 4000.0, "futex");
    b.long_wait(m0);
    (b.graph(), m0, a0, b0)
}

#[test]
fn two_wake_ups_make_a_question_whose_default_is_the_most_recent_strong_edge() {
    let (g, m0, a0, _) = two_wakers();
    let r = run(&g, 400, &mut AutoOracle);
    assert_eq!(r.questions.len(), 1);
    let q = &r.questions[0];
    assert_eq!(q.about, m0);
    assert_eq!(q.choices.len(), 2);
    assert_eq!(q.choices[0].comm, "alpha");
    assert_eq!(q.choices[1].strength, Strength::Weak);
    assert_eq!(q.default, 0);
    assert_eq!((q.answer, q.defaulted), (Answer::Choice(0), true));
    assert_eq!(r.root_causes[0].segment, a0);
    assert_eq!(r.root_causes[0].class, CauseClass::LongRunning);
    assert!(r
        .summary
        .contains("1 question(s) asked, 1 answered by default"));
}

#[test]
fn a_scripted_answer_picking_the_other_edge_changes_the_root_cause() {
    let (g, _, _, b0) = two_wakers();
    let mut o = ScriptedOracle::new([Reply::Choice(1)]);
    let r = run(&g, 400, &mut o);
    assert_eq!(
        (r.questions[0].answer, r.questions[0].defaulted),
        (Answer::Choice(1), false)
    );
    let rc = &r.root_causes[0];
    assert_eq!((rc.segment, rc.class), (b0, CauseClass::Sleep));
    assert_eq!(
        rc.finding,
        Finding::Slept {
            syscall: "nanosleep".into(),
            wait_ns: ms(3008.0).0,
            still_sleeping: false,
            woke: Some(Tid(400)),
        }
    );
    assert_eq!(r.path[1].edge.unwrap().strength, Strength::Weak);
    assert!(r.to_text().contains("[weak]"));
}

#[test]
fn a_terminal_answer_after_garbage_is_taken() {
    let (g, _, _, b0) = two_wakers();
    let mut out = Vec::new();
    let r = {
        let mut o = TerminalOracle::new(Cursor::new("9\nfoo\n2\n"), &mut out);
        run(&g, 400, &mut o)
    };
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("please answer").count(), 2, "{text}");
    assert!(text.contains("2) [wakeup weak] woken by thread beta (tid 402) of gui in futex"));
    assert_eq!(r.questions[0].answer, Answer::Choice(1));
    assert!(!r.questions[0].defaulted);
    assert_eq!(r.root_causes[0].segment, b0);
}

#[test]
fn stopping_makes_the_asked_segment_the_root_cause() {
    let (g, m0, _, _) = two_wakers();
    let mut o = ScriptedOracle::parse("s\n").unwrap();
    let r = run(&g, 400, &mut o);
    assert_eq!(r.questions[0].answer, Answer::Stop);
    assert_eq!(r.root_causes[0].segment, m0);
    assert_eq!(
        r.root_causes[0].finding,
        Finding::Stopped {
            syscall: "futex".into(),
            wait_ns: ms(3000.0).0,
        }
    );
    assert_eq!(r.questions[0].tag, "wake");
    assert_eq!(r.path.len(), 1);
}

#[test]
fn the_json_report_has_every_contract_field() {
    let (g, m0, _, _) = two_wakers();
    let spin = find_hang(
        &g,
        Target {
            pid: Pid(400),
            tid: None,
        },
    )
    .unwrap();
    let r = diagnose_spin(&g, &spin, &mut AutoOracle, &DiagnoseConfig::default()).unwrap();
    let j = serde_json::to_value(&r).unwrap();
    let hang = &j["hang"];
    for k in [
        "pid", "tid", "comm", "start_ns", "end_ns", "class", "segment",
    ] {
        assert!(!hang[k].is_null(), "hang.{k} missing: {hang}");
    }
    assert_eq!(hang["class"], "LongWait");
    assert_eq!(hang["segment"], m0.0);
    assert_eq!(hang["segment_label"], "400#0");
    assert_eq!(hang["pid"], 400);
    assert_eq!(hang["start_ns"], ms(1000.0).0);
    let path = j["path"].as_array().unwrap();
    assert!(path.len() >= 2);
    for p in path {
        for k in [
            "segment",
            "pid",
            "tid",
            "comm",
            "start_ns",
            "end_ns",
            "description",
        ] {
            assert!(!p[k].is_null(), "path item {k} missing: {p}");
        }
        assert!(p.as_object().unwrap().contains_key("edge"));
    }
    assert!(path[0]["edge"].is_null());
    assert_eq!(path[1]["edge"]["kind"], "wakeup");
    assert_eq!(path[1]["edge"]["strength"], "strong");
    let rc = &j["root_causes"][0];
    for k in ["segment", "pid", "tid", "comm", "class", "reason"] {
        assert!(!rc[k].is_null(), "root cause {k} missing: {rc}");
    }
    assert_eq!(rc["class"], "LongRunning");
    assert_eq!(rc["finding"]["kind"], "busy");
    assert_eq!(rc["finding"]["woke"], 400);
    assert_eq!(path[0]["step"]["kind"], "hang_wait");
    assert_eq!(path[1]["step"]["kind"], "waker");
    assert_eq!(path[1]["step"]["by"]["edge"], "wakeup");
    assert_eq!(path[1]["step"]["then"]["kind"], "busy");
    let q = &j["questions"][0];
    for k in ["prompt", "choices", "answer", "defaulted"] {
        assert!(!q[k].is_null(), "question {k} missing: {q}");
    }
    assert_eq!(q["answer"], 0);
    assert_eq!(q["tag"], "wake");
    assert_eq!(q["defaulted"], true);
    assert_eq!(q["choices"][1]["strength"], "weak");
    assert!(j["summary"]
        .as_str()
        .unwrap()
        .starts_with("Main thread of gui (pid 400)"));
    // Round trip.
    let back: Report = serde_json::from_value(j).unwrap();
    assert_eq!(back, r);
}

/// A group commit: the flusher, woken by reader 1's job, runs client 2's job in a work item
/// that reader 2 queued only at 3000 ms, after 2990 ms on CPU over client 2's request. The
/// item started late because it was queued late: the walk follows its queue edge to the
/// busy reader, not the flusher's wake-up by reader 1.
#[test]
fn a_work_item_queued_late_is_explained_by_the_segment_that_queued_it() {
    let mut b = B::new(6000.0);
    b.thread(300, 300, "client2", "client2");
    b.thread(200, 200, "client1", "client1");
    b.thread(101, 100, "flusher", "server");
    b.thread(102, 100, "reader2", "server");
    b.thread(103, 100, "reader1", "server");
    let c0 = b.task(300, 0.0, 10.0, 3045.0, "rt_sigtimedwait", 1.0);
    let c1 = b.open(300, 3045.0, Some(3046.0), "rt_sigtimedwait", 0.5);
    let r2 = b.task(102, 5.0, 3000.5, 5000.0, "read", 2990.0);
    b.edge(c0, r2, EdgeKind::Message, Strength::Strong, 5.0, "write");
    let k0 = b.task(200, 0.0, 1.0, 2979.0, "clock_nanosleep", 0.5);
    let r1 = b.task(103, 2979.0, 2980.0, 5000.0, "read", 0.5);
    b.edge(k0, r1, EdgeKind::Message, Strength::Strong, 2979.0, "write");
    b.task(101, 0.0, 1.0, 2980.0, "futex", 0.5);
    let w1 = b.task(101, 2980.0, 2981.0, 3030.0, "nanosleep", 0.5);
    b.edge(r1, w1, EdgeKind::Wakeup, Strength::Weak, 2980.0, "futex");
    let item = |b: &mut B, start: f64, end: f64, work: u64| {
        let id = b.seg(Seg {
            tid: 101,
            start,
            wait: None,
            end: Some(end),
            sys: "",
            on_cpu: end - start,
            ret: None,
        });
        let s = b.segments.last_mut().expect("the item");
        s.kind = SegmentKind::WorkItem { work, function: 7 };
        s.end = argus_schema::EndCause::HandlerDone;
        id
    };
    let i1 = item(&mut b, 3030.0, 3040.0, 0x1000);
    let i2 = item(&mut b, 3040.0, 3050.0, 0x2000);
    b.edge(r1, i1, EdgeKind::Queue, Strength::Strong, 2979.5, "");
    b.edge(r2, i2, EdgeKind::Queue, Strength::Strong, 3000.0, "futex");
    b.wake(i2, c1, 3045.0, "kill");
    b.long_wait(c0);
    let r = run(&b.graph(), 300, &mut AutoOracle);
    let rc = r.root_causes.last().expect("a root cause");
    assert_eq!(
        (rc.segment, rc.class),
        (r2, CauseClass::LongRunning),
        "{r:#?}"
    );
    let through = r
        .path
        .iter()
        .find(|p| p.segment == i2)
        .expect("the item on the path");
    assert_eq!(
        through.step,
        Step::Waker {
            by: By::Edge {
                edge: PathEdgeKind::Edge(EdgeKind::Wakeup),
                syscall: Some("kill".into()),
            },
            then: WakerState::QueuedLate { at: ms(3000.0) },
        }
    );
}

/// A reply over loopback TCP: the client's wait was ended by the network softirq's wake-up
/// and by the server's message (the send whose data the softirq delivered). The softirq is
/// the courier: the walk follows the message without asking.
#[test]
fn a_reply_delivered_by_a_softirq_is_followed_to_the_send_without_asking() {
    let mut b = B::new(4000.0);
    b.thread(10, 10, "client", "client");
    b.thread(20, 20, "server", "server");
    let c0 = b.task(10, 0.0, 1.0, 3000.0, "recvfrom", 1.0);
    let c1 = b.open(10, 3000.0, None, "", 1.0);
    let s0 = b.task(20, 0.0, 2999.9, 3500.0, "recvfrom", 2990.0);
    let net = b.irq(1, SegmentKind::SoftIrq { vec: 3 }, 2999.9, 3000.0);
    b.wake(net, c1, 3000.0, "");
    b.edge(
        s0,
        c1,
        EdgeKind::Message,
        Strength::Strong,
        2999.95,
        "sendto",
    );
    b.long_wait(c0);
    let r = run(&b.graph(), 10, &mut AutoOracle);
    assert!(r.questions.is_empty(), "{:#?}", r.questions);
    let rc = r.root_causes.last().expect("a root cause");
    assert_eq!(
        (rc.tid, rc.class),
        (Tid(20), CauseClass::LongRunning),
        "{r:#?}"
    );
}

/// A poll loop with 1 s timeouts waits for a server's reply; the reply comes just after the
/// third timeout, and the run that timeout began reads it. The data, not the timer, ended
/// the logical wait: the walk follows the server's message, and blame gives it the time.
#[test]
fn a_reply_racing_the_last_timeout_of_a_logical_wait_is_what_ended_it() {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "client", "client");
    b.thread(20, 20, "server", "server");
    let c0 = b.task(10, 0.0, 1.0, 1001.0, "pselect6", 0.5);
    let c1 = b.task(10, 1001.0, 1002.0, 2001.0, "pselect6", 0.5);
    let c2 = b.task(10, 2001.0, 2002.0, 3001.0, "pselect6", 0.5);
    for c in [c0, c1, c2] {
        b.object(c, 0x50);
    }
    let c3 = b.open(10, 3001.0, None, "", 1.0);
    let s0 = b.task(20, 0.0, 3001.5, 4000.0, "read", 2990.0);
    let timer = b.irq(
        0,
        SegmentKind::Timer {
            timer: 0x10,
            function: 0x20,
        },
        3001.0,
        3001.01,
    );
    b.edge(
        c2,
        timer,
        EdgeKind::Timer,
        Strength::Strong,
        2002.0,
        "pselect6",
    );
    b.wake(timer, c3, 3001.0, "");
    b.edge(
        s0,
        c3,
        EdgeKind::Message,
        Strength::Strong,
        3001.5,
        "sendto",
    );
    b.long_wait(c0);
    if let Some(s) = b.spins.last_mut() {
        s.last = c2;
        s.end_ns = ms(3001.0);
        s.segments = 3;
        s.timeouts = 3;
        s.wait_ns = ms(3000.0).0;
    }
    let r = run(&b.graph(), 10, &mut AutoOracle);
    let rc = r.root_causes.last().expect("a root cause");
    assert_eq!(
        (rc.tid, rc.class),
        (Tid(20), CauseClass::LongRunning),
        "{r:#?}"
    );
    let top = &r.blame.as_ref().expect("blame").contributors[0];
    assert_eq!(top.tid, Tid(20), "{:#?}", r.blame);
}

/// A pool worker's request sat in its socket while its dispatcher was held up: the client
/// sent at 10 ms, but the worker was woken (a weak futex hand-off) by the dispatcher only at
/// 2990 ms, when a runtime's collector, on CPU since 5 ms, let the dispatcher go. The
/// request (a strong message, read after the wake-up) explains none of the delay: the walk
/// follows the wake-ups to the collector, and blame gives it the window.
#[test]
fn data_that_sat_while_the_worker_waited_for_its_dispatcher_is_not_the_cause() {
    let mut b = B::new(4000.0);
    b.thread(10, 10, "client", "client");
    b.thread(20, 2, "worker", "server");
    b.thread(30, 2, "dispatcher", "server");
    b.thread(40, 2, "collector", "server");
    let c_send = b.task(10, 0.0, 10.0, 3000.0, "recvfrom", 1.0);
    let c1 = b.open(10, 3000.0, None, "", 1.0);
    let w0 = b.task(20, 0.0, 1.0, 2990.0, "futex", 0.5);
    let w1 = b.open(20, 2990.0, Some(3001.0), "futex", 10.0);
    let d0 = b.task(30, 0.0, 5.0, 2989.0, "futex", 1.0);
    let d1 = b.open(30, 2989.0, Some(2990.5), "epoll_wait", 0.5);
    let g0 = b.open(40, 5.0, Some(2989.5), "futex", 2984.0);
    b.set_start(g0, StartCause::Woken);
    b.edge(
        c_send,
        w1,
        EdgeKind::Message,
        Strength::Strong,
        10.0,
        "sendto",
    );
    b.edge(d1, w1, EdgeKind::Wakeup, Strength::Weak, 2990.0, "futex");
    b.edge(g0, d1, EdgeKind::Wakeup, Strength::Weak, 2989.0, "futex");
    b.edge(w1, c1, EdgeKind::Message, Strength::Strong, 3000.0, "write");
    let _ = (w0, d0);
    b.long_wait(c_send);
    let r = run(&b.graph(), 10, &mut AutoOracle);
    let rc = r.root_causes.last().expect("a root cause");
    assert_eq!(
        (rc.tid, rc.class),
        (Tid(40), CauseClass::LongRunning),
        "{r:#?}"
    );
    let blame = r.blame.as_ref().expect("a blame");
    assert_eq!(blame.contributors[0].tid, Tid(40), "{blame:#?}");
}
