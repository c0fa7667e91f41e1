//! Findings as data: every [`Finding`], [`Step`] and [`During`] has a phrase, and the JSON
//! report carries them through a round trip (older reports, and kinds a newer version adds,
//! read as `unknown`).

use crate::builder::{ms, B};
use argus_diagnose::{
    diagnose, AutoOracle, By, DiagnoseConfig, During, Finding, FlagEvidence, Graph, LogicalWait,
    PathEdgeKind, Phrases, Report, RunStart, Step, Target, WakerState,
};
use argus_schema::{EdgeKind, Nanos, Pid, Segment, SegmentKind, Strength, Tid};

/// A main thread (`app`), its worker, and a device interrupt; `app` waits until the worker,
/// busy through the wait, wakes it.
fn world() -> (Graph, [argus_schema::SegmentId; 3]) {
    let mut b = B::new(5000.0);
    b.thread(10, 10, "app", "app");
    b.thread(11, 10, "worker", "app");
    let m0 = b.task(10, 0.0, 100.0, 3100.0, "futex", 90.0);
    let m1 = b.open(10, 3100.0, None, "", 5.0);
    let w0 = b.task(11, 0.0, 3099.0, 3200.0, "futex", 3000.0);
    let irq = b.irq(0, SegmentKind::HardIrq { irq: 24 }, 50.0, 50.1);
    b.wake(w0, m1, 3099.0, "futex");
    b.long_wait(m0);
    (b.graph(), [m0, w0, irq])
}

fn during_samples() -> Vec<During> {
    vec![
        During::Exited { at: ms(20.0) },
        During::Blocked {
            syscall: "read".into(),
            blocked_ns: ms(3000.0).0,
            still_waiting: true,
        },
        During::Running {
            on_cpu_ns: ms(2900.0).0,
        },
        During::NotSeen,
        During::Active {
            segments: 3,
            on_cpu_ns: ms(12.0).0,
            stopped_near_end: true,
        },
        During::Unknown,
    ]
}

/// One of each variant (and each sub-case its phrase distinguishes).
fn finding_samples() -> Vec<Finding> {
    let w = Tid(10);
    let sys = || "futex".to_string();
    let mut v = vec![
        Finding::Busy {
            on_cpu_ns: 1,
            run_ns: 2,
            woke: None,
            through_brief_waits: false,
            still_running: true,
        },
        Finding::Busy {
            on_cpu_ns: 1,
            run_ns: 2,
            woke: Some(w),
            through_brief_waits: true,
            still_running: false,
        },
        Finding::Starved {
            on_cpu_ns: 1,
            run_ns: 2,
            preemptions: 7,
            woke: Some(w),
            still_running: false,
            lost_ns: 0,
        },
        // Most of its time off CPU fell in a lost-events range: not explained.
        Finding::Starved {
            on_cpu_ns: 1,
            run_ns: 20,
            preemptions: 0,
            woke: None,
            still_running: false,
            lost_ns: 15,
        },
        Finding::Slept {
            syscall: "nanosleep".into(),
            wait_ns: 3,
            still_sleeping: true,
            woke: None,
        },
        Finding::OwnTimer {
            syscall: "poll".into(),
            wait_ns: 3,
            slept: false,
        },
        Finding::TimedOut {
            syscall: sys(),
            wait_ns: 3,
        },
        Finding::NeverWoken {
            syscall: sys(),
            wait_ns: 3,
            exited: true,
        },
        Finding::WakeUntraced {
            syscall: sys(),
            wait_ns: 3,
            ended_at: ms(3.0),
        },
        Finding::Stopped {
            syscall: sys(),
            wait_ns: 3,
        },
        Finding::DepthLimit { steps: 24 },
        Finding::DepthLimitInWait {
            syscall: sys(),
            wait_ns: 3,
            steps: 24,
        },
        Finding::Circular,
        Finding::CircularTimer { woke: w },
        Finding::WaitedThenWoke {
            woke: w,
            syscall: Some(sys()),
            wait_ns: 3,
            walk_stopped: true,
        },
        Finding::FirstSeen {
            woke: w,
            at: ms(1.0),
        },
        Finding::CreatedLate {
            created: Tid(11),
            late_ns: 3,
            woke: w,
        },
        Finding::CreatorUntraced {
            late_ns: 3,
            woke: w,
        },
        Finding::Interrupt {
            woke: w,
            after_ns: 3,
            device: true,
        },
        Finding::InterruptStopped { woke: w },
        Finding::TimerArmUntraced { woke: w },
        Finding::TimerArmed {
            woke: w,
            fired_after_ns: 3,
        },
        Finding::PollNoSetter {
            waits: 9,
            syscall: "sched_yield".into(),
            loop_ns: 3,
        },
        Finding::PollStopped {
            waits: 9,
            syscall: "sched_yield".into(),
            loop_ns: 3,
        },
        Finding::LikelySetterBusy {
            poller: w,
            on_cpu_ns: 1,
            loop_ns: 3,
        },
        Finding::LikelySetterBlocked {
            poller: w,
            syscall: sys(),
            blocked_ns: 3,
        },
        Finding::LikelySetter {
            poller: w,
            during: During::NotSeen,
        },
        Finding::LockHolderBusy {
            poller: w,
            on_cpu_ns: 1,
            loop_ns: 3,
        },
        Finding::LockHolderBlocked {
            poller: w,
            syscall: sys(),
            blocked_ns: 3,
        },
        Finding::LockHolder {
            poller: w,
            during: During::NotSeen,
        },
        Finding::FlagSetRunning {
            poller: w,
            after_ns: 3,
            on_cpu_ns: 1,
        },
        Finding::FlagSetAfterWait {
            poller: w,
            syscall: sys(),
            wait_ns: 3,
        },
        Finding::FlagSetLate {
            poller: w,
            started: ms(2.0),
        },
        Finding::Unknown,
    ];
    for (i, during) in during_samples().into_iter().enumerate() {
        v.push(Finding::OnBaselinePath {
            waiter: w,
            normally_wakes: i % 2 == 0,
            circular: matches!(during, During::Blocked { .. }),
            during,
        });
    }
    v
}

/// An index per variant; the match is exhaustive, so a new variant fails to compile here
/// until it gets a sample.
fn finding_variant(f: &Finding) -> usize {
    match f {
        Finding::Busy { .. } => 0,
        Finding::Starved { .. } => 1,
        Finding::Slept { .. } => 2,
        Finding::OwnTimer { .. } => 3,
        Finding::TimedOut { .. } => 4,
        Finding::NeverWoken { .. } => 5,
        Finding::WakeUntraced { .. } => 6,
        Finding::Stopped { .. } => 7,
        Finding::DepthLimit { .. } => 8,
        Finding::DepthLimitInWait { .. } => 9,
        Finding::Circular => 10,
        Finding::CircularTimer { .. } => 11,
        Finding::WaitedThenWoke { .. } => 12,
        Finding::FirstSeen { .. } => 13,
        Finding::CreatedLate { .. } => 14,
        Finding::CreatorUntraced { .. } => 15,
        Finding::Interrupt { .. } => 16,
        Finding::InterruptStopped { .. } => 17,
        Finding::TimerArmUntraced { .. } => 18,
        Finding::TimerArmed { .. } => 19,
        Finding::PollNoSetter { .. } => 20,
        Finding::PollStopped { .. } => 21,
        Finding::LikelySetterBusy { .. } => 22,
        Finding::LikelySetterBlocked { .. } => 23,
        Finding::LikelySetter { .. } => 24,
        Finding::LockHolderBusy { .. } => 25,
        Finding::LockHolderBlocked { .. } => 26,
        Finding::LockHolder { .. } => 27,
        Finding::FlagSetRunning { .. } => 28,
        Finding::FlagSetAfterWait { .. } => 29,
        Finding::FlagSetLate { .. } => 30,
        Finding::OnBaselinePath { .. } => 31,
        Finding::Unknown => 32,
    }
}

fn step_samples() -> Vec<Step> {
    let edge = || By::Edge {
        edge: PathEdgeKind::Edge(EdgeKind::Wakeup),
        syscall: Some("futex".into()),
    };
    let mut v = vec![
        Step::HangWait {
            syscall: "futex".into(),
            wait_ns: 3,
            still_blocked: true,
            logical: Some(LogicalWait {
                waits: 4,
                timeouts: 3,
            }),
        },
        Step::HangRun {
            on_cpu_ns: 1,
            hang_ns: 3,
        },
        Step::HangPoll {
            loop_ns: 3,
            waits: 9,
            syscall: "sched_yield".into(),
            on_cpu_ns: 1,
        },
        Step::WokenByInterrupt,
        Step::CreatedBy {
            syscall: Some("clone".into()),
        },
        Step::Blocked {
            syscall: "read".into(),
            blocked_ns: 3,
        },
        Step::Slept {
            syscall: "nanosleep".into(),
            wait_ns: 3,
            untraced_timer: true,
        },
        Step::OwnTimer {
            syscall: "nanosleep".into(),
            wait_ns: 3,
            slept: true,
        },
        Step::TimerArmedBy {
            syscall: None,
            before_ns: 3,
        },
        Step::RunBegan {
            how: RunStart::ReceivedData,
            syscall: Some("write".into()),
            at: ms(1.0),
        },
        Step::LikelySetter {
            during: During::NotSeen,
        },
        Step::LockHolder {
            poller: Tid(10),
            at: ms(1.0),
            strength: Strength::Boosted,
        },
        Step::Unknown,
    ];
    for evidence in [
        FlagEvidence::GraphEdge {
            strength: Strength::Strong,
            watchpoint: Some(0x1000),
        },
        FlagEvidence::Watchpoint { addr: 0x1000 },
        FlagEvidence::Marker {
            text: "argus:flag-set ready".into(),
        },
    ] {
        v.push(Step::FlagSet {
            at: ms(1.0),
            evidence,
        });
    }
    for then in [
        WakerState::Again,
        WakerState::NotExamined,
        WakerState::Busy {
            on_cpu_ns: 1,
            run_ns: 2,
            through_brief_waits: true,
        },
        WakerState::Starved {
            on_cpu_ns: 1,
            run_ns: 2,
            lost_ns: 0,
        },
        WakerState::Starved {
            on_cpu_ns: 1,
            run_ns: 20,
            lost_ns: 15,
        },
        WakerState::Split,
        WakerState::BlockedEarlier {
            syscall: "read".into(),
            blocked_ns: 3,
            until: ms(2.0),
            worked_ns: 1,
            passed_waits: 2,
        },
        WakerState::HadWaited {
            syscall: "read".into(),
            wait_ns: 3,
            slept: false,
        },
        WakerState::CreatedAt { at: ms(1.0) },
        WakerState::FirstSeenAt { at: ms(1.0) },
        WakerState::QueuedLate { at: ms(1.0) },
        WakerState::WokenThroughWindow {
            by: Tid(7),
            waits: 3,
            covered_ns: 4,
        },
    ] {
        for by in [edge(), By::Continuing, By::Earlier] {
            v.push(Step::Waker {
                by,
                then: then.clone(),
            });
        }
    }
    for during in during_samples() {
        v.push(Step::Baseline {
            normally_wakes: false,
            baseline_tid: Tid(12),
            syscall: Some("write".into()),
            baseline_at: ms(1.0),
            baseline_wait_ns: 1,
            during,
        });
    }
    v
}

fn step_variant(s: &Step) -> usize {
    match s {
        Step::HangWait { .. } => 0,
        Step::HangRun { .. } => 1,
        Step::HangPoll { .. } => 2,
        Step::Waker { .. } => 3,
        Step::WokenByInterrupt => 4,
        Step::CreatedBy { .. } => 5,
        Step::Blocked { .. } => 6,
        Step::Slept { .. } => 7,
        Step::OwnTimer { .. } => 8,
        Step::TimerArmedBy { .. } => 9,
        Step::RunBegan { .. } => 10,
        Step::LikelySetter { .. } => 11,
        Step::LockHolder { .. } => 12,
        Step::FlagSet { .. } => 13,
        Step::Baseline { .. } => 14,
        Step::Unknown => 15,
    }
}

/// A phrase is a finished sentence part: not empty, no format braces left, no debug output.
fn assert_phrase(p: &str, what: &dyn std::fmt::Debug) {
    assert!(!p.trim().is_empty(), "empty phrase for {what:?}");
    assert!(
        !p.contains('{') && !p.contains('}'),
        "braces in {p:?} for {what:?}"
    );
    assert!(!p.contains("Some(") && !p.contains("None"), "{p:?}");
}

#[test]
fn every_finding_step_and_during_has_a_phrase() {
    let (g, [m0, w0, irq]) = world();
    let words = Phrases::new(&g, ms(100.0));
    let seg = |id| -> &Segment { g.segment(id).unwrap() };
    let findings = finding_samples();
    let mut seen = [false; 33];
    for f in &findings {
        seen[finding_variant(f)] = true;
        // The interrupt findings are about an interrupt segment, the others about threads.
        for s in [seg(m0), seg(w0), seg(irq)] {
            assert_phrase(&words.reason(s, f), f);
        }
    }
    assert!(seen.iter().all(|s| *s), "a Finding variant has no sample");
    let steps = step_samples();
    let mut seen = [false; 16];
    for st in &steps {
        seen[step_variant(st)] = true;
        if *st != Step::Unknown {
            for s in [seg(m0), seg(w0), seg(irq)] {
                assert_phrase(&words.step(s, st), st);
            }
        }
    }
    assert!(seen.iter().all(|s| *s), "a Step variant has no sample");
    for d in during_samples() {
        assert_phrase(&words.during(&d), &d);
    }
    // Different decisions read differently.
    let reasons: std::collections::HashSet<String> =
        findings.iter().map(|f| words.reason(seg(w0), f)).collect();
    assert_eq!(reasons.len(), findings.len());
    // The hung thread's own findings name it as the main thread.
    let busy = &findings[0];
    assert!(words
        .reason(seg(m0), busy)
        .starts_with("main thread of app"));
}

fn report() -> Report {
    let (g, [_, w0, _]) = world();
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
    let r = d.report.unwrap();
    assert_eq!(r.root_causes.last().unwrap().segment, w0);
    r
}

#[test]
fn the_json_report_round_trips_with_its_findings() {
    let r = report();
    let rc = r.root_causes.last().unwrap();
    assert_eq!(
        rc.finding,
        Finding::Busy {
            on_cpu_ns: ms(3000.0).0,
            run_ns: ms(3099.0).0,
            woke: Some(Tid(10)),
            through_brief_waits: false,
            still_running: false,
        }
    );
    assert!(matches!(r.path[0].step, Step::HangWait { .. }));
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["root_causes"][0]["finding"]["kind"], "busy");
    assert_eq!(j["path"][1]["step"]["then"]["kind"], "busy");
    let back: Report = serde_json::from_value(j.clone()).unwrap();
    assert_eq!(back, r);
    // A report written before findings existed still parses: the data reads as unknown.
    let mut old = j.clone();
    for rc in old["root_causes"].as_array_mut().unwrap() {
        rc.as_object_mut().unwrap().remove("finding");
    }
    for p in old["path"].as_array_mut().unwrap() {
        p.as_object_mut().unwrap().remove("step");
    }
    let back: Report = serde_json::from_value(old).unwrap();
    assert_eq!(back.root_causes[0].finding, Finding::Unknown);
    assert!(back.path.iter().all(|p| p.step == Step::Unknown));
    assert_eq!(back.root_causes[0].reason, r.root_causes[0].reason);
    // A finding a newer version adds reads as unknown too.
    let mut newer = j;
    newer["root_causes"][0]["finding"] = serde_json::json!({"kind": "quantum_flux", "x": 1});
    let back: Report = serde_json::from_value(newer).unwrap();
    assert_eq!(back.root_causes[0].finding, Finding::Unknown);
}

#[test]
fn the_words_are_made_from_the_findings() {
    let r = report();
    let (g, _) = world();
    let words = Phrases::new(&g, r.hang.start_ns);
    for rc in &r.root_causes {
        let s = g.segment(rc.segment).unwrap();
        assert_eq!(words.reason(s, &rc.finding), rc.reason);
    }
    for p in &r.path {
        let s = g.segment(p.segment).unwrap();
        assert_eq!(words.step(s, &p.step), p.description);
    }
    assert_eq!(
        words.rel(Nanos(r.hang.start_ns.0 + 1_500_000_000)),
        "+1.500 s"
    );
}
