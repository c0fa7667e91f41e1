//! Beam search with look-back, hang finding with a learned event-loop wait, saved answers and
//! the terminal picture, on hand-made graphs.

use crate::builder::{ms, B};
use argus_diagnose::beam::{search, BeamConfig, Penalties};
use argus_diagnose::hangs::{find_hangs, learn_loop_wait};
use argus_diagnose::{
    diagnose, AutoOracle, DiagnoseConfig, Finding, HangConfig, HangSource, Oracle, Question, Reply,
    RuleOracle, SavedAnswers, ScriptedOracle, Step, Target,
};
use argus_schema::{syscalls, EdgeKind, Pid, SpinClass, Strength, Tid};

/// H's wait ends with a strong edge from S (long before the hang, irrelevant) and a weak
/// edge from W (first seen just before the wake-up), which was started by X, busy through
/// the whole hang.
fn lookback_graph() -> (argus_diagnose::Graph, argus_schema::SegmentId) {
    let mut b = B::new(4000.0);
    b.thread(1, 1, "main", "app");
    b.thread(2, 1, "s", "app");
    b.thread(3, 1, "w", "app");
    b.thread(4, 1, "x", "app");
    b.task(1, 0.0, 1000.0, 3000.0, "futex", 1.0);
    let h1 = b.open(1, 3000.0, None, "", 1.0);
    let s0 = b.task(2, 0.0, 10.0, 20.0, "futex", 5.0);
    let w1 = b.task(3, 2999.0, 3000.0, 3500.0, "futex", 1.0);
    let x0 = b.task(4, 900.0, 2998.0, 3500.0, "futex", 2000.0);
    b.edge(s0, h1, EdgeKind::Wakeup, Strength::Strong, 3000.0, "futex");
    b.edge(w1, h1, EdgeKind::Wakeup, Strength::Weak, 3000.0, "futex");
    b.edge(x0, w1, EdgeKind::Wakeup, Strength::Strong, 2999.0, "futex");
    (b.graph(), h1)
}

#[test]
fn look_back_keeps_a_weak_edge_that_leads_to_the_culprit() {
    let (g, h1) = lookback_graph();
    let start = g.segment(h1).unwrap();
    let window = (ms(1000.0), ms(3000.0));
    let cfg = |lookback| BeamConfig {
        width: 1,
        lookback,
        top_k: 2,
        penalties: Penalties {
            relevance: 5.0,
            ..Penalties::default()
        },
        ..BeamConfig::default()
    };
    // Plain beam search (prune at every level, β = 1) drops the weak edge at once.
    let plain = search(&g, start, window, &cfg(1));
    assert_eq!(plain[0].end().unwrap().tid, Tid(2), "{plain:?}");
    // With a look-back of 2 the weak edge survives one more level and wins.
    let look = search(&g, start, window, &cfg(2));
    let best = &look[0];
    assert_eq!(best.end().unwrap().tid, Tid(4));
    assert_eq!(best.edges[0].strength, Strength::Weak);
    assert!(best.score < look[1].score);
}

#[test]
fn the_default_answer_follows_the_best_ranked_path() {
    let (g, _) = lookback_graph();
    let target = Target {
        pid: Pid(1),
        tid: None,
    };
    let mut cfg = DiagnoseConfig::default();
    cfg.beam.penalties.relevance = 5.0;
    let d = diagnose(&g, Some(target), &mut AutoOracle, &cfg).unwrap();
    let r = d.report.unwrap();
    let q = &r.questions[0];
    assert_eq!(q.choices[q.default].comm, "w", "{q:#?}");
    assert_eq!(r.root_causes.last().unwrap().comm, "x");
    assert_eq!(r.ranked_paths[0].steps.last().unwrap().comm, "x");
    let pic = r.to_picture();
    assert!(
        pic.contains("main 1") && pic.contains("x 4") && pic.contains('②'),
        "{pic}"
    );
}

#[test]
fn the_event_loop_wait_is_learned_and_its_long_waits_are_idleness() {
    let mut b = B::new(9250.0);
    b.thread(1, 1, "gui", "gui");
    let mut t = 0.0;
    for _ in 0..8 {
        b.task(1, t, t + 1.0, t + 30.0, "epoll_wait", 1.0);
        t += 30.0;
    }
    b.task(1, t, t + 1.0, t + 6000.0, "epoll_wait", 1.0);
    t += 6000.0;
    b.task(1, t, t + 1.0, t + 3000.0, "futex", 1.0);
    t += 3000.0;
    b.open(1, t, None, "", 1.0);
    let g = b.graph();
    let cfg = HangConfig::default();
    let lw = learn_loop_wait(&g, Tid(1), &cfg).unwrap();
    assert_eq!(lw.syscall, syscalls::number("epoll_wait").unwrap());
    assert_eq!(lw.waits, 9);
    let hangs = find_hangs(&g, Tid(1), &cfg);
    assert_eq!(hangs.len(), 1, "{hangs:#?}");
    assert_eq!(hangs[0].spin.class, SpinClass::LongWait);
    assert_eq!(
        hangs[0].spin.wait_syscall,
        syscalls::number("futex").unwrap()
    );
    assert_eq!(hangs[0].source, HangSource::Segments);
    assert!(hangs[0]
        .evidence
        .iter()
        .any(|e| e.contains("not the thread's event-loop wait")));
}

struct Count(usize);
impl Oracle for Count {
    fn ask(&mut self, _q: &Question) -> Reply {
        self.0 += 1;
        Reply::Default
    }
}

#[test]
fn rules_learned_from_explicit_answers_answer_the_same_pattern() {
    let (g, _) = lookback_graph();
    let target = Target {
        pid: Pid(1),
        tid: None,
    };
    let cfg = DiagnoseConfig::default();
    // A person picks the first choice (s, strong) explicitly.
    let mut person = ScriptedOracle::new([Reply::Choice(0)]);
    let mut o = RuleOracle::new(&mut person, SavedAnswers::default());
    let r1 = diagnose(&g, Some(target), &mut o, &cfg)
        .unwrap()
        .report
        .unwrap();
    let saved = o.merged();
    assert_eq!(saved.rules.len(), 1);
    assert!(
        !saved.rules[0].pattern.contains('#'),
        "no ids in {}",
        saved.rules[0].pattern
    );
    assert_eq!(r1.root_causes.last().unwrap().comm, "s");
    // Next time nobody needs to be asked that question.
    let back = SavedAnswers::parse(&saved.to_json()).unwrap();
    let mut count = Count(0);
    let mut o = RuleOracle::new(&mut count, back);
    let r2 = diagnose(&g, Some(target), &mut o, &cfg)
        .unwrap()
        .report
        .unwrap();
    assert_eq!(o.rules_used(), 1);
    assert_eq!(count.0, r2.questions.iter().filter(|q| !q.by_rule).count());
    assert!(r2.questions[0].by_rule && !r2.questions[0].defaulted);
    assert_eq!(r2.root_causes.last().unwrap().comm, "s");
}

/// A relay: `holder` computes through the hang, then starts `sleep` for 20 ms, whose end
/// (an interrupt the trace does not explain) lets it wake `main`. The short sleep is not the
/// root cause: what started it late is.
#[test]
fn a_short_sleep_woken_by_an_untraced_interrupt_leads_back_to_what_started_it() {
    let mut b = B::new(4000.0);
    b.thread(1, 1, "main", "app");
    b.thread(4, 4, "holder", "holder");
    b.thread(5, 5, "sleep", "sleep");
    b.task(1, 0.0, 100.0, 3000.0, "futex", 1.0);
    let m1 = b.open(1, 3000.0, None, "", 1.0);
    let h0 = b.task(4, 0.0, 2980.0, 3500.0, "wait4", 2800.0);
    let s0 = b.task(5, 2980.0, 2980.5, 2999.0, "clock_nanosleep", 0.5);
    b.set_start(s0, argus_schema::StartCause::Created);
    let s1 = b.task(5, 2999.0, 2999.5, 3001.0, "", 0.2);
    let irq = b.irq(0, argus_schema::SegmentKind::Interrupt, 2999.0, 2999.0);
    b.edge(h0, s0, EdgeKind::Fork, Strength::Strong, 2980.0, "clone");
    b.edge(irq, s1, EdgeKind::Wakeup, Strength::Strong, 2999.0, "");
    b.edge(
        s1,
        m1,
        EdgeKind::Wakeup,
        Strength::Strong,
        2999.5,
        "exit_group",
    );
    let g = b.graph();
    let d = diagnose(
        &g,
        Some(Target {
            pid: Pid(1),
            tid: None,
        }),
        &mut AutoOracle,
        &DiagnoseConfig::default(),
    )
    .unwrap();
    let r = d.report.unwrap();
    let last = r.root_causes.last().unwrap();
    assert_eq!(last.comm, "holder", "{:#?}", r.root_causes);
    assert!(
        r.path.iter().any(|p| matches!(
            p.step,
            Step::Slept {
                untraced_timer: true,
                ..
            }
        )),
        "{:#?}",
        r.path
    );
}

/// A thread stopped by a tracer (state `t`: the recorder's own `--watch …@cmd` attach, a
/// debugger) or a stop signal (`T`) for longer than the threshold is not hung; a real wait
/// later on is the hang.
#[test]
fn a_stopped_thread_is_not_a_hang() {
    let mut b = B::new(5600.0);
    b.thread(1, 1, "app", "app");
    let stopped = b.task(1, 0.0, 1.0, 3000.0, "", 0.5);
    let real = b.task(1, 3000.0, 3001.0, 5500.0, "read", 0.5);
    b.open(1, 5500.0, None, "", 1.0);
    for s in b.segments.iter_mut().filter(|s| s.id == stopped) {
        s.wait_state = b't';
    }
    let g = b.graph();
    let hangs = argus_diagnose::find_hangs(&g, argus_schema::Tid(1), &Default::default());
    let segs: Vec<_> = hangs.iter().map(|h| h.spin.segment).collect();
    assert_eq!(segs, vec![real]);
}

/// A batching server loop: `main` sent its request at 100 ms, the loop thread (busy with
/// another client, its segment split where its peers change) read it without blocking — a
/// message edge that is a data dependency, not a wake-up — and replied at 2999 ms. The walk
/// continues into the loop's previous segment (busy), not back along the request to `main`
/// (which would read as a circular wait).
#[test]
fn a_request_read_without_blocking_does_not_hide_the_split_of_a_batching_loop() {
    let mut b = B::new(3600.0);
    b.thread(1, 1, "main", "srv");
    b.thread(2, 1, "loop", "srv");
    let m0 = b.task(1, 0.0, 100.0, 3000.0, "recvfrom", 1.0);
    let m1 = b.open(1, 3000.0, None, "", 1.0);
    let l0 = b.seg(crate::builder::Seg {
        tid: 2,
        start: 0.0,
        wait: None,
        end: Some(2000.0),
        sys: "",
        on_cpu: 1950.0,
        ret: None,
    });
    let l1 = b.task(2, 2000.0, 2999.5, 3500.0, "select", 900.0);
    b.edge(l0, l1, EdgeKind::ThreadOrder, Strength::Weak, 2000.0, "");
    b.edge(m0, l1, EdgeKind::Message, Strength::Strong, 100.0, "sendto");
    b.edge(l1, m1, EdgeKind::Wakeup, Strength::Weak, 2999.0, "sendto");
    b.long_wait(m0);
    let g = b.graph();
    let d = diagnose(
        &g,
        Some(Target {
            pid: Pid(1),
            tid: None,
        }),
        &mut AutoOracle,
        &DiagnoseConfig::default(),
    )
    .unwrap();
    let r = d.report.unwrap();
    let last = r.root_causes.last().unwrap();
    assert_eq!(last.segment, l0, "{:#?}", r.root_causes);
    assert_eq!(last.class, argus_diagnose::CauseClass::LongRunning);
    assert!(r.root_causes.iter().all(|c| !matches!(
        c.finding,
        Finding::Circular
            | Finding::CircularTimer { .. }
            | Finding::OnBaselinePath { circular: true, .. }
    )));
}

fn run_main(b: B) -> argus_diagnose::Report {
    let g = b.graph();
    diagnose(
        &g,
        Some(Target {
            pid: Pid(1),
            tid: None,
        }),
        &mut AutoOracle,
        &DiagnoseConfig::default(),
    )
    .unwrap()
    .report
    .unwrap()
}

/// The timer that ended `sleeper`'s sleep has no armer in the graph (its arming was lost):
/// it still ended the thread's own sleep, so the root cause is that sleep, not the interrupt.
#[test]
fn a_timer_whose_arming_was_lost_still_ends_its_own_sleep() {
    let mut b = B::new(3400.0);
    b.thread(1, 1, "main", "app");
    b.thread(2, 2, "sleeper", "sleeper");
    b.task(1, 0.0, 10.0, 3010.0, "futex", 1.0);
    let m1 = b.open(1, 3010.0, None, "", 1.0);
    let s0 = b.task(2, 0.0, 5.0, 3005.0, "clock_nanosleep", 1.0);
    let s1 = b.task(2, 3005.0, 3009.5, 3300.0, "", 0.5);
    let t = b.irq(
        0,
        argus_schema::SegmentKind::Timer {
            timer: 1,
            function: 2,
        },
        3005.0,
        3005.0,
    );
    b.edge(t, s1, EdgeKind::Wakeup, Strength::Strong, 3005.0, "");
    b.wake(s1, m1, 3009.0, "futex");
    let r = run_main(b);
    let last = r.root_causes.last().unwrap();
    assert_eq!(last.segment, s0, "{:#?}", r.root_causes);
    assert_eq!(last.class, argus_diagnose::CauseClass::Sleep);
    assert!(
        matches!(last.finding, Finding::OwnTimer { slept: true, .. }),
        "{:?}",
        last.finding
    );
}

/// The waker computed through the whole wait, but a 1 ms block (a page fault, say) split its
/// run: it is still the busy culprit, not a thread that "waited" before waking main.
#[test]
fn a_waker_busy_through_brief_waits_is_long_running() {
    let mut b = B::new(3400.0);
    b.thread(1, 1, "main", "app");
    b.thread(2, 1, "worker", "app");
    b.task(1, 0.0, 10.0, 3010.0, "futex", 1.0);
    let m1 = b.open(1, 3010.0, None, "", 1.0);
    b.task(2, 0.0, 1500.0, 1501.0, "", 1490.0);
    let w1 = b.task(2, 1501.0, 3009.5, 3300.0, "futex", 1500.0);
    b.wake(w1, m1, 3009.0, "futex");
    let r = run_main(b);
    let last = r.root_causes.last().unwrap();
    assert_eq!(last.segment, w1, "{:#?}", r.root_causes);
    assert_eq!(last.class, argus_diagnose::CauseClass::LongRunning);
    assert!(
        matches!(
            last.finding,
            Finding::Busy {
                through_brief_waits: true,
                woke: Some(Tid(1)),
                ..
            }
        ),
        "{:?}",
        last.finding
    );
}
