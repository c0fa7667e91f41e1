//! Baseline comparison with several abnormal threads on the baseline's wake-up path: every
//! one is ranked and diagnosed, the best-ranked chain is followed (the root cause), the others
//! are reported as further culprits, and a person is asked which to follow.

use crate::builder::B;
use argus_diagnose::{
    diagnose, AutoOracle, CauseClass, DiagnoseConfig, During, Finding, Graph, Reply, Report,
    ScriptedOracle, Target,
};
use argus_schema::{EdgeKind, Pid, SegmentId, StartCause, Strength, Tid};

const VIEWER: i32 = 400;
const RELAY: i32 = 401;
const SOURCE: i32 = 402;

fn run(g: &Graph, oracle: &mut dyn argus_diagnose::Oracle) -> Report {
    let d = diagnose(
        g,
        Some(Target {
            pid: Pid(VIEWER),
            tid: None,
        }),
        oracle,
        &DiagnoseConfig::default(),
    )
    .unwrap();
    d.report.unwrap()
}

/// The viewer's read is never answered (the trace ends mid-hang). Before, the same read
/// ended in 0.5 ms: `source` wrote to `relay`, which passed the data on to the viewer. So the
/// baseline's wake-up path is viewer ← relay ← source. `relay_during_hang` adds what the
/// relay did during the hang; the source is blocked in read through the whole hang.
fn relay_world(relay_during_hang: impl FnOnce(&mut B)) -> (Graph, SegmentId, SegmentId) {
    let mut b = B::new(3300.0);
    b.thread(VIEWER, VIEWER, "viewer", "viewer");
    b.thread(RELAY, VIEWER, "relay", "viewer");
    b.thread(SOURCE, SOURCE, "source", "source");
    // The baseline: source writes at 100.2, relay (woken) writes at 100.4, viewer reads.
    b.task(VIEWER, 0.0, 100.0, 100.5, "read", 50.0);
    let m1 = b.open(VIEWER, 100.5, Some(200.0), "read", 60.0);
    let s0 = b.task(SOURCE, 0.0, 100.3, 180.0, "read", 40.0);
    let s1 = b.open(SOURCE, 180.0, Some(190.0), "read", 5.0);
    let r0 = b.task(RELAY, 0.0, 50.0, 100.2, "read", 10.0);
    let r1 = b.task(RELAY, 100.2, 100.45, 150.0, "futex", 0.2);
    b.set_start(r1, StartCause::Woken);
    b.wake(s0, r1, 100.2, "write");
    b.wake(r1, m1, 100.4, "write");
    let _ = r0;
    relay_during_hang(&mut b);
    b.long_wait(m1);
    (b.graph(), s1, r1)
}

/// The relay computes through 60% of the hang: abnormal, but not stuck through all of it —
/// a bystander ranked below the source, which was blocked the whole time.
fn busy_relay() -> (Graph, SegmentId, SegmentId) {
    let mut relay_seg = None;
    let (g, s1, _) = relay_world(|b| {
        relay_seg = Some(b.open(RELAY, 150.0, None, "", 1860.0));
    });
    (g, s1, relay_seg.unwrap())
}

#[test]
fn a_bystander_first_on_the_baseline_path_ranks_below_the_thread_stuck_through_the_hang() {
    let (g, s1, relay_seg) = busy_relay();
    let r = run(&g, &mut AutoOracle);
    // The root cause: the deepest culprit of the best-ranked chain, the source.
    let last = r.root_causes.last().unwrap();
    assert_eq!(last.tid, Tid(SOURCE), "{:#?}", r.root_causes);
    assert_eq!(last.segment, s1);
    assert_eq!(last.class, CauseClass::LongWait);
    // The relay is reported as a further culprit with its own chain.
    assert_eq!(r.further_culprits.len(), 1, "{:#?}", r.further_culprits);
    let f = &r.further_culprits[0];
    assert_eq!((f.tid, f.rank), (Tid(RELAY), 2));
    assert!(matches!(f.during, During::Running { .. }), "{:?}", f.during);
    let froot = f.root_causes.last().unwrap();
    assert_eq!(
        (froot.segment, froot.class),
        (relay_seg, CauseClass::LongRunning)
    );
    assert!(f.path.iter().all(|p| p.tid == Tid(RELAY)), "{:#?}", f.path);
    // The main path does not contain the relay's chain.
    assert!(r.path.iter().all(|p| p.tid != Tid(RELAY)), "{:#?}", r.path);
    // Every thread of the baseline path is ranked and the followed one is marked.
    let b = r.baseline.as_ref().unwrap();
    let ranks: Vec<(Tid, Option<usize>, bool, bool)> = b
        .threads
        .iter()
        .map(|t| (t.tid, t.rank, t.whole_hang, t.followed))
        .collect();
    assert_eq!(
        ranks,
        vec![
            (Tid(RELAY), Some(2), false, false),
            (Tid(SOURCE), Some(1), true, true)
        ]
    );
    assert!(b.threads[1].score < b.threads[0].score);
    // One question chose between the two chains; --auto took the best-ranked one.
    let q = r
        .questions
        .iter()
        .find(|q| q.pattern.starts_with("culprit|"))
        .expect("a culprit question");
    assert_eq!(q.choices.len(), 2);
    assert_eq!(q.choices[q.default].tid, Tid(SOURCE));
    assert!(q.defaulted);
    assert_eq!(q.tag, "culprit");
    // Each choice names the chain's deepest culprit: the source blocked, the relay busy.
    let ends: Vec<&Finding> = r
        .root_causes
        .last()
        .into_iter()
        .chain(r.further_culprits[0].root_causes.last())
        .map(|c| &c.finding)
        .collect();
    assert!(
        matches!(
            ends[..],
            [
                Finding::OnBaselinePath {
                    during: During::Blocked { .. },
                    ..
                },
                Finding::OnBaselinePath {
                    during: During::Running { .. },
                    ..
                }
            ]
        ),
        "{ends:#?}"
    );
    let text = r.to_text();
    assert!(
        text.contains("Further culprits") && text.contains("#2 relay 401"),
        "{text}"
    );
    let further = &r.further_culprits[0].root_causes;
    assert!(r.summary.contains(&further.last().unwrap().reason));
}

#[test]
fn picking_the_other_culprit_follows_it_and_lists_the_best_ranked_as_further() {
    let (g, s1, relay_seg) = busy_relay();
    let mut answers = ScriptedOracle::new([Reply::Choice(1)]);
    let r = run(&g, &mut answers);
    let last = r.root_causes.last().unwrap();
    assert_eq!(
        (last.tid, last.segment),
        (Tid(RELAY), relay_seg),
        "{:#?}",
        r.root_causes
    );
    assert_eq!(r.further_culprits.len(), 1);
    let f = &r.further_culprits[0];
    assert_eq!((f.tid, f.rank), (Tid(SOURCE), 1));
    assert_eq!(f.root_causes.last().unwrap().segment, s1);
    let q = r
        .questions
        .iter()
        .find(|q| q.pattern.starts_with("culprit|"))
        .unwrap();
    assert!(!q.defaulted);
}

/// The relay idles in its event-loop wait (epoll_wait, learned from its earlier short waits)
/// through the whole hang: blocked, but idle — it never got the work. The source, blocked in
/// read, ranks first although it is second on the path.
#[test]
fn a_thread_idle_in_its_event_loop_wait_ranks_below_a_blocked_one() {
    let (g, s1, _) = relay_world(|b| {
        for i in 0..4 {
            let t = 150.0 + i as f64 * 10.0;
            b.task(RELAY, t, t + 1.0, t + 10.0, "epoll_wait", 0.5);
        }
        b.open(RELAY, 190.0, Some(191.0), "epoll_wait", 0.5);
    });
    let r = run(&g, &mut AutoOracle);
    assert_eq!(r.root_causes.last().unwrap().segment, s1);
    let b = r.baseline.as_ref().unwrap();
    let relay = b.threads.iter().find(|t| t.tid == Tid(RELAY)).unwrap();
    assert!(relay.abnormal && !relay.whole_hang && relay.rank == Some(2));
    assert_eq!(relay.idle_in.as_deref(), Some("epoll_wait"), "{relay:#?}");
    assert!(matches!(relay.during, During::Blocked { .. }), "{relay:#?}");
    assert_eq!(r.further_culprits.len(), 1);
    assert_eq!(r.further_culprits[0].tid, Tid(RELAY));
}

/// Both are stuck through the hang and the relay's wait ends (after the trace's hang
/// window) only when the source wakes it: the source is on the relay's chain, so there is one
/// chain, nothing to ask, and the source is "explained by" the relay.
#[test]
fn a_culprit_on_the_chain_of_a_better_ranked_one_is_not_asked_about() {
    let g = {
        let mut b = B::new(3600.0);
        b.thread(VIEWER, VIEWER, "viewer", "viewer");
        b.thread(RELAY, VIEWER, "relay", "viewer");
        b.thread(SOURCE, SOURCE, "source", "source");
        b.task(VIEWER, 0.0, 100.0, 100.5, "read", 50.0);
        let m1 = b.open(VIEWER, 100.5, Some(200.0), "read", 60.0);
        let s0 = b.task(SOURCE, 0.0, 100.3, 180.0, "read", 40.0);
        let s1 = b.task(SOURCE, 180.0, 190.0, 3500.0, "read", 5.0);
        let s2 = b.open(SOURCE, 3500.0, None, "", 50.0);
        let _ = s1;
        b.task(RELAY, 0.0, 50.0, 100.2, "read", 10.0);
        let r1 = b.task(RELAY, 100.2, 100.45, 150.0, "futex", 0.2);
        b.wake(s0, r1, 100.2, "write");
        b.wake(r1, m1, 100.4, "write");
        let r2 = b.task(RELAY, 150.0, 151.0, 3510.0, "futex", 0.5);
        let r3 = b.open(RELAY, 3510.0, None, "", 1.0);
        b.edge(s2, r3, EdgeKind::Wakeup, Strength::Strong, 3505.0, "futex");
        let _ = r2;
        // The viewer's hang window is [200, 3600): the relay blocks from 151 to 3510.
        b.long_wait(m1);
        b.graph()
    };
    let r = run(&g, &mut AutoOracle);
    assert!(
        r.questions
            .iter()
            .all(|q| !q.pattern.starts_with("culprit|")),
        "{:#?}",
        r.questions
    );
    assert!(r.further_culprits.is_empty(), "{:#?}", r.further_culprits);
    let b = r.baseline.as_ref().unwrap();
    let relay = b.threads.iter().find(|t| t.tid == Tid(RELAY)).unwrap();
    let source = b.threads.iter().find(|t| t.tid == Tid(SOURCE)).unwrap();
    assert!(relay.followed && relay.rank == Some(1), "{:#?}", b.threads);
    assert_eq!(source.explained_by, Some(Tid(RELAY)), "{:#?}", b.threads);
    assert!(
        r.path.iter().any(|p| p.tid == Tid(SOURCE)),
        "the relay's chain reaches the source: {:#?}",
        r.path
    );
}

/// Another process with the same name (a system-wide trace) had the same read end quickly
/// more recently than the viewer's own: the baseline is still the viewer's own read.
#[test]
fn the_baseline_comes_from_the_hung_process_before_a_same_named_other_process() {
    let mut other = None;
    let (g, _, _) = relay_world(|b| {
        b.thread(500, 500, "viewer", "viewer");
        b.thread(501, 501, "stranger", "stranger");
        let v0 = b.task(500, 0.0, 300.0, 300.2, "read", 1.0);
        let v1 = b.open(500, 300.2, None, "", 1.0);
        let x = b.task(501, 0.0, 300.1, 400.0, "", 1.0);
        b.wake(x, v1, 300.1, "exit_group");
        let _ = v0;
        other = Some(x);
    });
    let r = run(&g, &mut AutoOracle);
    let b = r.baseline.as_ref().unwrap();
    assert_eq!(b.tid, Tid(VIEWER), "{b:#?}");
    assert!(r.path.iter().all(|p| Some(p.segment) != other));
}
