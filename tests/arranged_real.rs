//! The arranged graph (`argus_pipeline::arranged`) on the bundled recording of the chain hang
//! (a real kernel's trace; no live tracing needed):
//!
//! - the graph dataflow's messages, fed epoch by epoch into the arranged job with 1 and 2
//!   workers, give arrangements equal to the sink's contents and slices equal to the
//!   from-scratch reference after every epoch;
//! - on the snapshot `argus demo --bundled` builds, the slice of the hang holds every segment
//!   of the path `argus debug --auto --json` walks from it to its root cause: the slice's
//!   window and roots cover what the diagnosis explains.

use crate::common::{bundled_trace, debug_json, trace_events};
use argus_pipeline::arranged::{reference, ArrangedJob, SliceConfig, SliceMember};
use argus_pipeline::dataflow::{run, Batch, DataflowConfig, Message, Update};
use argus_pipeline::Graph;
use argus_schema::{Event, SegmentId, SpinClass};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The graph dataflow's updates for `evs` in batches of `size`, one entry per epoch.
fn epochs(evs: &[Event], size: usize) -> Vec<Vec<(Update, i64)>> {
    let (in_tx, in_rx) = crossbeam_channel::bounded(4);
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let runner = std::thread::spawn(move || run(&DataflowConfig::default(), in_rx, out_tx));
    for c in evs.chunks(size) {
        in_tx
            .send(Batch {
                events: c.to_vec(),
                watermark: c.last().map(|e| e.ts).unwrap_or_default(),
            })
            .expect("the dataflow runs");
    }
    drop(in_tx);
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for msg in out_rx {
        match msg {
            Message::Updates { updates, .. } => pending.extend(updates),
            Message::EpochDone { .. } => out.push(std::mem::take(&mut pending)),
        }
    }
    runner
        .join()
        .expect("the dataflow thread")
        .expect("the dataflow runs");
    out
}

/// Every worker's slices and record counts after every epoch.
type Seen = Vec<Vec<(Vec<(SegmentId, SliceMember)>, [usize; 3])>>;

fn arranged(epochs: Arc<Vec<Vec<(Update, i64)>>>, workers: usize) -> Seen {
    timely::execute(timely::Config::process(workers), move |worker| {
        let mut job = ArrangedJob::new(worker, &SliceConfig::default());
        let mut seen = Vec::new();
        for (e, updates) in epochs.iter().enumerate() {
            let e = e as u64;
            if worker.index() == 0 {
                job.send(e, updates.iter().cloned());
            }
            job.close(e);
            worker.step_while(|| job.pending(e));
            let snap = job.traces().snapshot(e).expect("the epoch is complete");
            job.traces().compact_to(e);
            seen.push((
                snap.slices_by_spin
                    .iter()
                    .flat_map(|(s, m, n)| std::iter::repeat_n((*s, *m), *n as usize))
                    .collect(),
                [
                    snap.segments_by_id.len(),
                    snap.edges_by_dst.len(),
                    snap.spins_by_thread.len(),
                ],
            ));
        }
        seen
    })
    .expect("timely starts")
    .join()
    .into_iter()
    .map(|r| r.expect("a worker finishes"))
    .collect()
}

#[test]
fn arranged_slices_equal_the_reference_every_epoch_on_the_bundled_recording() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let evs = trace_events(&bundled_trace(tmp.path()));
    let eps = epochs(&evs, 2_000);
    assert!(eps.len() > 5, "{} epochs", eps.len());
    // The sink's contents after each epoch.
    let mut acc: BTreeMap<Update, i64> = BTreeMap::new();
    let mut graphs = Vec::new();
    for updates in &eps {
        for (u, d) in updates {
            *acc.entry(u.clone()).or_default() += d;
        }
        acc.retain(|_, d| *d != 0);
        let mut g = Graph::default();
        for u in acc.keys() {
            match u {
                Update::Segment(s) => g.segments.push(s.clone()),
                Update::Edge(e) => g.edges.push(e.clone()),
                Update::Spin(s) => g.spins.push(s.clone()),
            }
        }
        graphs.push(g);
    }
    let eps = Arc::new(eps);
    let cfg = SliceConfig::default();
    for workers in [1, 2] {
        let seen = arranged(eps.clone(), workers);
        for (i, g) in graphs.iter().enumerate() {
            let mut slices: Vec<(SegmentId, SliceMember)> =
                seen.iter().flat_map(|w| w[i].0.clone()).collect();
            slices.sort();
            let counts = seen.iter().fold([0; 3], |a, w| {
                [a[0] + w[i].1[0], a[1] + w[i].1[1], a[2] + w[i].1[2]]
            });
            assert_eq!(
                counts,
                [g.segments.len(), g.edges.len(), g.spins.len()],
                "records at epoch {i}, {workers} workers"
            );
            assert!(
                slices == reference::slices(g, &cfg),
                "slices at epoch {i}, {workers} workers: {} vs {}",
                slices.len(),
                reference::slices(g, &cfg).len()
            );
        }
        let last = seen
            .iter()
            .flat_map(|w| &w.last().expect("epochs").0)
            .count();
        assert!(last > 10, "the hang has a slice: {last} members");
    }
}

#[test]
fn the_slice_of_the_demo_hang_holds_its_diagnosis_path() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = bundled_trace(tmp.path());
    let snapshot = trace
        .parent()
        .expect("the kept demo directory")
        .join("snapshot");
    let snap = argus_sinks::read_snapshot_tables(&snapshot, false).expect("the snapshot");
    // The chain workload's main thread waits ~3 s for its worker (demo/README.md).
    let main = snap
        .threads
        .iter()
        .find(|t| t.comm == "argus-hang-main")
        .expect("the workload's main thread");
    let hang = snap
        .spins
        .iter()
        .filter(|s| s.tid == main.tid && s.class == SpinClass::LongWait)
        .max_by_key(|s| s.duration_ns())
        .expect("the demo's hang is a LongWait");
    let (code, report) = debug_json(&snapshot, hang.pid.0);
    assert_eq!(code, 1, "a hang is diagnosed: {report}");
    assert_eq!(report["hang"]["segment"], hang.segment.0, "{report}");
    let g = Graph {
        segments: snap.segments.clone(),
        edges: snap.edges.clone(),
        spins: snap.spins.clone(),
        ..Graph::default()
    };
    let slice: BTreeSet<SegmentId> = reference::slices(&g, &SliceConfig::default())
        .into_iter()
        .filter(|(spin, _)| *spin == hang.segment)
        .map(|(_, m)| m.segment)
        .collect();
    let path: Vec<SegmentId> = report["path"]
        .as_array()
        .expect("a path")
        .iter()
        .map(|p| SegmentId(p["segment"].as_u64().expect("a segment id")))
        .collect();
    assert!(path.len() > 2, "the walk goes past the hang: {report}");
    for s in &path {
        assert!(
            slice.contains(s),
            "path segment {s:?} is not in the hang's slice ({} members); path {path:?}",
            slice.len()
        );
    }
    for r in report["root_causes"].as_array().expect("root causes") {
        let s = SegmentId(r["segment"].as_u64().expect("a segment id"));
        assert!(slice.contains(&s), "root cause {s:?} is in the slice");
    }
}
