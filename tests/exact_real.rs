//! Exactness on real recordings: the dataflow's accumulated output equals the batch
//! reference at every epoch, with batches of 1k, 100k and everything, 1 and 2 workers,
//! 2 timely processes over loopback, and per-CPU streams arriving shuffled within each
//! epoch (the merger only promises completeness up to the watermark, not an order).

use crate::common::{bundled_trace, live_or_skip, recording_lock, run};
use argus_ingest::replay::TraceReader;
use argus_pipeline::dataflow::{collect_epochs, run as run_dataflow, Batch, DataflowConfig};
use argus_pipeline::{reference, Graph};
use argus_schema::{Event, Nanos};
use std::collections::BTreeMap;
use std::path::Path;

fn events(trace: &Path) -> Vec<Event> {
    TraceReader::open(trace)
        .expect("the trace opens")
        .events()
        .collect::<Result<Vec<_>, _>>()
        .expect("the trace decodes")
}

/// How the batches reach the dataflow.
#[derive(Clone, Copy, Debug)]
enum Arrival {
    /// In `seq` order.
    Ordered,
    /// Each CPU's events in order, the CPUs interleaved at random (seeded).
    PerCpuShuffled(u64),
}

fn batches(evs: &[Event], size: usize, arrival: Arrival) -> Vec<Batch> {
    let mut rng = match arrival {
        Arrival::Ordered => 0,
        Arrival::PerCpuShuffled(seed) => seed | 1,
    };
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    evs.chunks(size)
        .map(|c| {
            let events = match arrival {
                Arrival::Ordered => c.to_vec(),
                Arrival::PerCpuShuffled(_) => {
                    let mut per_cpu: BTreeMap<u32, std::collections::VecDeque<&Event>> =
                        BTreeMap::new();
                    for e in c {
                        per_cpu.entry(e.cpu.0).or_default().push_back(e);
                    }
                    let mut queues: Vec<_> = per_cpu.into_values().collect();
                    let mut out = Vec::with_capacity(c.len());
                    while !queues.is_empty() {
                        let i = (next() % queues.len() as u64) as usize;
                        if let Some(e) = queues[i].pop_front() {
                            out.push(e.clone());
                        }
                        if queues[i].is_empty() {
                            queues.swap_remove(i);
                        }
                    }
                    out
                }
            };
            Batch {
                events,
                watermark: c.last().map(|e| e.ts).unwrap_or_default(),
            }
        })
        .collect()
}

/// Where the dataflow runs.
#[derive(Clone, Copy, Debug)]
enum Placement {
    Workers(usize),
    /// Two timely processes (threads of this test) over loopback, one worker each.
    TwoProcesses,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn dataflow(batches: Vec<Batch>, placement: Placement) -> Vec<(Nanos, Graph)> {
    match placement {
        Placement::Workers(workers) => collect_epochs(
            &DataflowConfig {
                workers,
                ..DataflowConfig::default()
            },
            batches,
        )
        .expect("the dataflow runs"),
        Placement::TwoProcesses => {
            let hosts = vec![
                format!("127.0.0.1:{}", free_port()),
                format!("127.0.0.1:{}", free_port()),
            ];
            let cfg = |id| DataflowConfig {
                processes: 2,
                process_id: id,
                hosts: hosts.clone(),
                ..DataflowConfig::default()
            };
            let other = cfg(1);
            let peer = std::thread::spawn(move || {
                // Process 1 reads no input and writes no output (process 0 feeds it all).
                let (tx, rx) = crossbeam_channel::bounded(1);
                drop(tx);
                let (out_tx, out_rx) = crossbeam_channel::unbounded();
                run_dataflow(&other, rx, out_tx).expect("process 1 runs");
                assert!(out_rx.try_iter().next().is_none(), "process 1 got output");
            });
            let got = collect_epochs(&cfg(0), batches).expect("process 0 runs");
            peer.join().expect("process 1 finished");
            got
        }
    }
}

/// Compares the dataflow with the reference at every epoch (`stride` 1), or at every
/// `stride`-th epoch plus the first three and the last.
fn check(evs: &[Event], size: usize, placement: Placement, arrival: Arrival, stride: usize) {
    let bs = batches(evs, size, arrival);
    let got = dataflow(bs.clone(), placement);
    assert_eq!(got.len(), bs.len(), "one result per epoch");
    let mut upto = 0;
    for (i, (wm, g)) in got.iter().enumerate() {
        upto += bs[i].events.len();
        if i > 2 && i % stride != 0 && i + 1 != got.len() {
            continue;
        }
        let want = reference::compute(&evs[..upto], *wm, &Default::default());
        assert!(
            g.segments == want.segments
                && g.edges == want.edges
                && g.spins == want.spins
                && g.counts == want.counts,
            "epoch {i} of {} (batch {size}, {placement:?}, {arrival:?}): dataflow {}/{}/{} vs reference {}/{}/{} segments/edges/spins",
            got.len(),
            g.segments.len(),
            g.edges.len(),
            g.spins.len(),
            want.segments.len(),
            want.edges.len(),
            want.spins.len()
        );
    }
    let last = &got.last().expect("epochs").1;
    assert!(last.segments.len() > 100 && last.edges.len() > 100);
}

/// The bundled recording (the chain hang, recorded on a real kernel): runs anywhere.
#[test]
fn exact_at_every_epoch_on_the_bundled_recording() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let evs = events(&bundled_trace(tmp.path()));
    assert!(evs.len() > 20_000, "{} events", evs.len());
    for placement in [Placement::Workers(1), Placement::Workers(2)] {
        for size in [1_000, 100_000, evs.len()] {
            check(&evs, size, placement, Arrival::Ordered, 1);
        }
    }
    check(
        &evs,
        1_000,
        Placement::Workers(2),
        Arrival::PerCpuShuffled(7),
        1,
    );
    check(&evs, 1_000, Placement::TwoProcesses, Arrival::Ordered, 1);
    check(
        &evs,
        1_000,
        Placement::TwoProcesses,
        Arrival::PerCpuShuffled(11),
        1,
    );
}

/// A pipe ping-pong recorded here, large enough for several 100k-event epochs.
#[test]
fn exact_at_every_epoch_on_a_recorded_pipe_ping_pong() {
    if !live_or_skip("exact_at_every_epoch_on_a_recorded_pipe_ping_pong") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = tmp.path().join("trace");
    {
        let _guard = recording_lock();
        let out = run(&[
            "record",
            "-q",
            "-o",
            trace.to_str().expect("utf-8"),
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero bs=64 count=40000 status=none | dd of=/dev/null bs=64 status=none",
        ]);
        assert!(
            out.status.success(),
            "argus record failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let evs = events(&trace);
    assert!(evs.len() > 250_000, "{} events", evs.len());
    for placement in [Placement::Workers(1), Placement::Workers(2)] {
        check(&evs, 100_000, placement, Arrival::Ordered, 1);
        check(&evs, evs.len(), placement, Arrival::Ordered, 1);
    }
    // 1k batches: hundreds of epochs, so the reference checks a spread of them.
    check(&evs, 1_000, Placement::Workers(2), Arrival::Ordered, 40);
    check(
        &evs,
        100_000,
        Placement::Workers(2),
        Arrival::PerCpuShuffled(3),
        1,
    );
    check(&evs, 100_000, Placement::TwoProcesses, Arrival::Ordered, 1);
}
