//! Oracle test: the dataflow's accumulated output equals the batch reference at every epoch,
//! with 1 and 2 workers and several batch sizes, and with each batch's events shuffled (as
//! per-CPU streams arrive in any interleaving within the watermark), on a randomized event
//! stream that exercises every rule: wake-ups in task and interrupt context, hrtimers and
//! wheel timers (some culled), forks, exits and `wait4`, yields, long waits and long runs,
//! work items (nested, blocking inside), signals, message syscalls on several descriptors
//! (peer-set splits), file locks granted, refused and released, interrupted and retried waits (boosts), device softirqs, markers, and
//! every kind of user rule (condition variable, worker pool, pipe, syscall and marker
//! splits), kernel delegate and maintenance threads, and call stacks after blocking
//! switches, syscall entries and wake-ups (the thread-order stack rule). Real recorded traces
//! go through the same check in the top-level integration tests.

mod common;

use argus_pipeline::dataflow::{collect_epochs, DataflowConfig};
use argus_pipeline::rules::Counter;
use argus_pipeline::{reference, Graph};
use argus_schema::{EdgeKind, Strength};
use common::{batches, rules, stream, with_sockets};

/// Asserts equality, printing only the records that differ.
fn same<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], table: &str, what: &str) {
    if got != want {
        let extra: Vec<_> = got.iter().filter(|x| !want.contains(x)).take(5).collect();
        let missing: Vec<_> = want.iter().filter(|x| !got.contains(x)).take(5).collect();
        panic!(
            "{table} differ at {what}: {} vs {} records\n dataflow only: {extra:#?}\n reference only: {missing:#?}",
            got.len(),
            want.len()
        );
    }
}

fn check(seed: u64, n: usize, size: usize, workers: usize, shuffle: bool) -> Graph {
    check_events(stream(seed, n), seed, size, workers, shuffle)
}

fn check_events(
    evs: Vec<argus_schema::Event>,
    seed: u64,
    size: usize,
    workers: usize,
    shuffle: bool,
) -> Graph {
    let cfg = DataflowConfig {
        workers,
        rules: rules(),
        ..DataflowConfig::default()
    };
    let bs = batches(&evs, size, shuffle.then_some(seed));
    let got = collect_epochs(&cfg, bs.clone()).expect("dataflow runs");
    assert_eq!(got.len(), bs.len(), "one result per epoch");
    let mut upto = 0;
    let mut spins_seen = 0;
    for (i, (wm, graph)) in got.iter().enumerate() {
        upto += bs[i].events.len();
        let want = reference::compute(&evs[..upto], *wm, &cfg.rules);
        let what =
            format!("epoch {i} (seed {seed}, batch {size}, {workers} workers, shuffled {shuffle})");
        same(&graph.segments, &want.segments, "segments", &what);
        same(&graph.edges, &want.edges, "edges", &what);
        same(&graph.spins, &want.spins, "spins", &what);
        assert_eq!(graph.counts, want.counts, "rule counters at {what}");
        spins_seen = spins_seen.max(want.spins.len());
    }
    let last = &got.last().expect("epochs").1;
    assert!(last.segments.len() > 50, "the stream makes many segments");
    assert!(last.edges.len() > 50, "and many edges");
    assert!(spins_seen > 0, "and some spins");
    last.clone()
}

/// Every rule fired somewhere in the streams checked.
fn assert_coverage(graphs: &[Graph]) {
    let has = |f: &dyn Fn(&Graph) -> bool| graphs.iter().any(f);
    for kind in [
        EdgeKind::Wakeup,
        EdgeKind::Fork,
        EdgeKind::Timer,
        EdgeKind::ThreadOrder,
        EdgeKind::Message,
        EdgeKind::Queue,
        EdgeKind::Signal,
        EdgeKind::Exit,
        EdgeKind::Flag,
        EdgeKind::Rule,
        EdgeKind::WaitWake,
        EdgeKind::LockFile,
    ] {
        assert!(
            has(&|g: &Graph| g.edges.iter().any(|e| e.kind == kind)),
            "no {kind:?} edge in the oracle streams"
        );
    }
    assert!(has(&|g: &Graph| g.edges.iter().any(|e| e.strength
        == Strength::Boosted
        && e.kind == EdgeKind::ThreadOrder)));
    let cb = argus_pipeline::rules::dispatch_id("cb");
    assert!(
        has(&|g: &Graph| g.segments.iter().any(|s| s.kind
            == argus_schema::SegmentKind::WorkItem {
                work: 0,
                function: cb
            })),
        "no user-space dispatch callout in the oracle streams"
    );
    assert!(has(&|g: &Graph| g.edges.iter().any(|e| e.strength
        == Strength::Boosted
        && e.kind == EdgeKind::Wakeup)));
    assert!(has(&|g: &Graph| g.segments.iter().any(|s| matches!(
        s.kind,
        argus_schema::SegmentKind::WorkItem { .. }
    ))));
    for c in Counter::ALL {
        assert!(
            has(&|g: &Graph| g.counts.get(c) > 0),
            "rule counter {c:?} never moved"
        );
    }
}

#[test]
fn dataflow_equals_reference_every_epoch_one_worker() {
    let mut gs = Vec::new();
    for (seed, size) in [(1, 97), (2, 1000), (3, 6000)] {
        gs.push(check(seed, 6000, size, 1, false));
    }
    assert_coverage(&gs);
}

#[test]
fn dataflow_equals_reference_every_epoch_two_workers() {
    let mut gs = Vec::new();
    for (seed, size) in [(4, 97), (5, 1000), (6, 6000)] {
        gs.push(check(seed, 6000, size, 2, false));
    }
    assert_coverage(&gs);
}

#[test]
fn dataflow_equals_reference_with_shuffled_arrival_within_each_epoch() {
    for (seed, size, workers) in [(7, 211, 1), (8, 500, 2)] {
        check(seed, 6000, size, workers, true);
    }
}

#[test]
fn dataflow_equals_reference_with_socket_data_events() {
    for (seed, size, workers, shuffle) in
        [(21, 97, 1, false), (22, 1000, 2, false), (24, 300, 2, true)]
    {
        let evs = with_sockets(stream(seed, 6000), seed);
        // Deliveries at a time no other record has: an edge at that time comes from one.
        let mut at: std::collections::BTreeMap<u64, (usize, usize)> = Default::default();
        for e in &evs {
            let n = at.entry(e.ts.0).or_default();
            match e.kind {
                argus_schema::EventKind::SockReady { .. } => n.0 += 1,
                _ => n.1 += 1,
            }
        }
        let g = check_events(evs, seed, size, workers, shuffle);
        assert!(
            g.edges.iter().any(|e| e.kind == EdgeKind::Message
                && at
                    .get(&e.ts.0)
                    .is_some_and(|&(d, other)| d > 0 && other == 0)),
            "seed {seed}: no message edge from a socket delivery"
        );
    }
}
