//! The dataflow equals the batch reference at every epoch on a real recorded trace, with 1
//! and 2 workers and several batch sizes.

use crate::common::{chain, live_or_skip, record_command};
use argus_ingest::replay::TraceReader;
use argus_pipeline::dataflow::{collect_epochs, Batch, DataflowConfig};
use argus_pipeline::reference;
use argus_schema::Event;

fn events(trace: &std::path::Path) -> Vec<Event> {
    let reader = TraceReader::open(trace).expect("the trace opens");
    reader
        .events()
        .collect::<Result<Vec<_>, _>>()
        .expect("the trace decodes")
}

/// How many records of the sorted `records` repeat the one before.
fn repeated<T: PartialEq>(records: &[T]) -> usize {
    records.windows(2).filter(|w| w[0] == w[1]).count()
}

fn check(evs: &[Event], size: usize, workers: usize, every_epoch: bool) {
    let batches: Vec<Batch> = evs
        .chunks(size)
        .map(|c| Batch {
            events: c.to_vec(),
            watermark: c.last().map(|e| e.ts).unwrap_or_default(),
        })
        .collect();
    let cfg = DataflowConfig {
        workers,
        ..DataflowConfig::default()
    };
    let got = collect_epochs(&cfg, batches.clone()).expect("the dataflow runs");
    assert_eq!(got.len(), batches.len());
    let mut upto = 0;
    for (i, (wm, g)) in got.iter().enumerate() {
        upto += batches[i].events.len();
        // Recomputing the reference is linear in the prefix, so comparing every epoch is
        // quadratic: compare the first three, about eight spread over the run, and the last.
        let stride = (got.len() / 8).max(1);
        if !every_epoch && i > 2 && i % stride != 0 && i + 1 != got.len() {
            continue;
        }
        let want = reference::compute(&evs[..upto], *wm, &cfg.rules);
        assert!(
            g.segments == want.segments && g.edges == want.edges && g.spins == want.spins,
            "epoch {i} of {} (batch {size}, {workers} workers): dataflow {}/{}/{} vs reference {}/{}/{} segments/edges/spins",
            got.len(),
            g.segments.len(),
            g.edges.len(),
            g.spins.len(),
            want.segments.len(),
            want.edges.len(),
            want.spins.len()
        );
        // Each record once (a record made twice by the dataflow and by the reference alike
        // would pass the comparison).
        assert_eq!(
            (
                repeated(&want.segments),
                repeated(&want.edges),
                repeated(&want.spins)
            ),
            (0, 0, 0),
            "epoch {i}: segments, edges, spins made twice; an edge: {:?}",
            want.edges.windows(2).find(|w| w[0] == w[1])
        );
    }
    let last = &got.last().expect("epochs").1;
    assert!(last.segments.len() > 100 && last.edges.len() > 100);
    assert!(!last.spins.is_empty(), "the 3 s hang is a spin");
}

#[test]
fn dataflow_equals_reference_on_a_recorded_trace() {
    if !live_or_skip("dataflow_equals_reference_on_a_recorded_trace") {
        return;
    }
    let evs = events(&chain().trace);
    assert!(
        evs.len() > 2_000,
        "a real trace: {} events from {:?} to {:?}; meta: {}",
        evs.len(),
        evs.first().map(|e| e.ts),
        evs.last().map(|e| e.ts),
        std::fs::read_to_string(chain().trace.join("meta.json")).unwrap_or_default()
    );
    for workers in [1, 2] {
        for size in [evs.len() / 40 + 1, evs.len()] {
            check(&evs, size, workers, true);
        }
    }
    // The whole-trace result is what `argus build` wrote.
    let snap = argus_sinks::read_snapshot_tables(&chain().snapshot, false).expect("snapshot");
    let want = reference::compute(
        &evs,
        evs.last().map(|e| e.ts).unwrap_or_default(),
        &Default::default(),
    );
    let mut segs = snap.segments.clone();
    segs.sort();
    assert_eq!(segs.len(), want.segments.len());
    assert!(
        segs == want.segments,
        "the snapshot's segments are the reference's"
    );
}

/// A busier trace: the chain hang while processes come and go and files are read, so every
/// kind of record (forks, execs, exits, irqs, softirqs, timers) is in it in volume.
#[test]
fn dataflow_equals_reference_on_a_busy_recorded_trace() {
    if !live_or_skip("dataflow_equals_reference_on_a_busy_recorded_trace") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let script = format!(
        "{exe} workload chain --secs 2 & for i in 1 2 3 4 5 6; do ls -lR /usr/lib >/dev/null 2>&1; cat /proc/meminfo >/dev/null; done; wait"
    );
    let rec = record_command(&["sh", "-c", &script]);
    let evs = events(&rec.trace);
    assert!(evs.len() > 50_000, "a busy trace: {} events", evs.len());
    let kinds: std::collections::BTreeSet<&str> = evs.iter().map(|e| e.kind.name()).collect();
    for k in [
        "switch",
        "waking",
        "fork",
        "exec",
        "exit",
        "sys_enter",
        "hrtimer_expire",
    ] {
        assert!(kinds.contains(k), "the trace has {k} records: {kinds:?}");
    }
    for workers in [1, 2] {
        check(&evs, evs.len() / 25 + 1, workers, false);
    }
    check(&evs, 1000.max(evs.len() / 200), 2, false);
}
