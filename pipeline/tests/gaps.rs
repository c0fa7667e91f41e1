//! No edge across a lost-events gap: a timer armed before a gap and firing after it, and a
//! thread whose previous segment spans a gap, get no timer / thread-order edge — in the
//! reference and in the dataflow alike.

use argus_pipeline::dataflow::{collect_epochs, Batch, DataflowConfig};
use argus_pipeline::reference;
use argus_pipeline::rules::RulesConfig;
use argus_schema::{Context, Cpu, EdgeKind, Event, EventKind, Nanos, Pid, TaskState, Tid};

fn ev(seq: u64, ts: u64, cpu: u32, tid: i32, ctx: Context, kind: EventKind) -> Event {
    Event {
        ts: Nanos(ts),
        seq,
        cpu: Cpu(cpu),
        pid: Pid(tid.max(0)),
        tid: Tid(tid),
        ctx,
        kind,
    }
}

/// Thread 10 arms timer T and blocks at 100; on cpu1, thread 20 runs. T fires at 1000 and
/// wakes 10. Thread 20 blocks at 150 and is woken by 10 at 1100.
fn stream() -> Vec<Event> {
    use Context::*;
    let t = 0xffff_0000_0000_1000;
    let kinds = vec![
        (
            10,
            0,
            10,
            Task,
            EventKind::SysEnter {
                nr: 35,
                args: [0; 6],
            },
        ),
        (
            20,
            0,
            10,
            Task,
            EventKind::HrtimerStart {
                timer: t,
                function: 1,
                expires: 1000,
            },
        ),
        (
            100,
            0,
            10,
            Task,
            EventKind::Switch {
                prev: Tid(10),
                prev_state: TaskState::SLEEPING,
                next: Tid(0),
            },
        ),
        (
            120,
            1,
            20,
            Task,
            EventKind::SysEnter {
                nr: 0,
                args: [0; 6],
            },
        ),
        (
            150,
            1,
            20,
            Task,
            EventKind::Switch {
                prev: Tid(20),
                prev_state: TaskState::SLEEPING,
                next: Tid(0),
            },
        ),
        (
            1000,
            0,
            0,
            HardIrq,
            EventKind::HrtimerExpire {
                timer: t,
                function: 1,
            },
        ),
        (1001, 0, 0, HardIrq, EventKind::Waking { target: Tid(10) }),
        (
            1002,
            0,
            0,
            HardIrq,
            EventKind::HrtimerExpireExit { timer: t },
        ),
        (
            1010,
            0,
            0,
            Task,
            EventKind::Switch {
                prev: Tid(0),
                prev_state: TaskState::RUNNABLE,
                next: Tid(10),
            },
        ),
        (1020, 0, 10, Task, EventKind::SysExit { nr: 35, ret: 0 }),
        (1100, 0, 10, Task, EventKind::Waking { target: Tid(20) }),
        (
            1110,
            1,
            0,
            Task,
            EventKind::Switch {
                prev: Tid(0),
                prev_state: TaskState::RUNNABLE,
                next: Tid(20),
            },
        ),
    ];
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, (ts, cpu, tid, ctx, kind))| ev(i as u64, ts, cpu, tid, ctx, kind))
        .collect()
}

fn kinds_between(g: &argus_pipeline::Graph, a: i32, b: i32) -> Vec<EdgeKind> {
    g.edges
        .iter()
        .filter(|e| e.src.tid() == Tid(a) && e.dst.tid() == Tid(b))
        .map(|e| e.kind)
        .collect()
}

fn graphs(cfg: &RulesConfig) -> (argus_pipeline::Graph, argus_pipeline::Graph) {
    let evs = stream();
    let wm = evs.last().map(|e| e.ts).unwrap_or_default();
    let want = reference::compute(&evs, wm, cfg);
    let dcfg = DataflowConfig {
        rules: cfg.clone(),
        workers: 2,
        ..DataflowConfig::default()
    };
    let batches = evs
        .chunks(3)
        .map(|c| Batch {
            events: c.to_vec(),
            watermark: c.last().map(|e| e.ts).unwrap_or_default(),
        })
        .collect();
    let got = collect_epochs(&dcfg, batches)
        .expect("dataflow runs")
        .pop()
        .expect("epochs")
        .1;
    (want, got)
}

#[test]
fn without_a_gap_the_timer_and_thread_order_edges_exist() {
    let (want, got) = graphs(&RulesConfig::default());
    assert_eq!(want.edges, got.edges);
    let irq = Tid::irq(Cpu(0)).0;
    assert!(
        kinds_between(&want, 10, irq).contains(&EdgeKind::Timer),
        "{:#?}",
        want.edges
    );
    assert!(kinds_between(&want, 20, 20).contains(&EdgeKind::ThreadOrder));
    assert!(kinds_between(&want, 10, 10).contains(&EdgeKind::ThreadOrder));
}

#[test]
fn no_edge_is_made_across_a_gap() {
    let mut cfg = RulesConfig::default();
    cfg.add_gap(Nanos(400), Nanos(500));
    assert!(cfg.crosses_gap(Nanos(20), Nanos(1000)));
    assert!(!cfg.crosses_gap(Nanos(501), Nanos(1000)));
    let (want, got) = graphs(&cfg);
    assert_eq!(want.edges, got.edges, "dataflow equals reference with gaps");
    let irq = Tid::irq(Cpu(0)).0;
    assert!(
        !kinds_between(&want, 10, irq).contains(&EdgeKind::Timer),
        "{:#?}",
        want.edges
    );
    assert!(!kinds_between(&want, 20, 20).contains(&EdgeKind::ThreadOrder));
    assert!(!kinds_between(&want, 10, 10).contains(&EdgeKind::ThreadOrder));
    // Edges from events actually seen after the gap remain: the timer interrupt still woke
    // thread 10, and thread 10 still woke thread 20.
    assert!(kinds_between(&want, irq, 10).contains(&EdgeKind::Wakeup));
    assert!(!kinds_between(&want, 10, 20).is_empty());
}

#[test]
fn gaps_merge() {
    let mut cfg = RulesConfig::default();
    cfg.add_gap(Nanos(10), Nanos(20));
    cfg.add_gap(Nanos(15), Nanos(30));
    cfg.add_gap(Nanos(50), Nanos(40));
    assert_eq!(
        cfg.gaps,
        vec![(Nanos(10), Nanos(30)), (Nanos(40), Nanos(50))]
    );
    assert!(cfg.crosses_gap(Nanos(31), Nanos(41)));
    assert!(
        !cfg.crosses_gap(Nanos(31), Nanos(40)),
        "ends at the gap's first record"
    );
}
