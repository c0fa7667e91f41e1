//! Oracle test: the dataflow's accumulated output equals the batch reference at every epoch,
//! with 1 and 2 workers and several batch sizes, on a randomized event stream that exercises
//! every rule (wake-ups in task and interrupt context, timers, forks, exits, yields, long
//! waits and long runs). Real recorded traces go through the same check in the top-level
//! integration tests.

use argus_pipeline::dataflow::{collect_epochs, Batch, DataflowConfig};
use argus_pipeline::reference;
use argus_pipeline::rules::RulesConfig;
use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random but plausible stream: 2 CPUs, a dozen threads, ~`n` events.
fn stream(seed: u64, n: usize) -> Vec<Event> {
    let mut r = Lcg(seed);
    let mut evs = Vec::new();
    let mut ts = 1_000_000u64;
    let mut running = [Tid(0), Tid(0)];
    let mut next_tid = 200;
    let mut alive: Vec<i32> = (100..112).collect();
    let push = |evs: &mut Vec<Event>, ts: u64, cpu: u32, tid: Tid, ctx: Context, kind| {
        let seq = evs.len() as u64;
        evs.push(Event {
            ts: Nanos(ts),
            seq,
            cpu: Cpu(cpu),
            pid: Pid(if tid.0 >= 100 { tid.0 / 10 * 10 } else { tid.0 }),
            tid,
            ctx,
            kind,
        });
    };
    while evs.len() < n {
        // Occasionally a long gap so spins (threshold 2 s) appear and open ones cross it.
        ts += if r.below(400) == 0 {
            2_500_000_000
        } else {
            1 + r.below(50_000)
        };
        let cpu = r.below(2) as usize;
        let cur = running[cpu];
        let pick = Tid(alive[r.below(alive.len() as u64) as usize]);
        match r.below(14) {
            0 | 1 => {
                let state = match r.below(3) {
                    0 => TaskState::RUNNABLE,
                    1 => TaskState::SLEEPING,
                    _ => TaskState::DISK,
                };
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::Switch {
                        prev: cur,
                        prev_state: state,
                        next: pick,
                    },
                );
                running[cpu] = pick;
            }
            2 | 3 => {
                let ctx = if r.below(3) == 0 {
                    Context::HardIrq
                } else {
                    Context::Task
                };
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    ctx,
                    EventKind::Waking { target: pick },
                );
            }
            4 => {
                let nr = [0, 1, 7, 35, 202, 232, 24, 230][r.below(8) as usize];
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::SysEnter { nr, args: [0; 6] },
                );
            }
            5 => {
                let nr = [0, 1, 7, 35, 202, 232, 24, 230][r.below(8) as usize];
                let ret = [0i64, -110, 5][r.below(3) as usize];
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::SysExit { nr, ret },
                );
            }
            6 => {
                let timer = 0xffff_0000 + r.below(4) * 64;
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::HrtimerStart {
                        timer,
                        function: 7,
                        expires: ts,
                    },
                );
            }
            7 => {
                let timer = 0xffff_0000 + r.below(4) * 64;
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::HrtimerExpire { timer, function: 7 },
                );
                ts += 1 + r.below(1000);
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::Waking { target: pick },
                );
                ts += 1 + r.below(1000);
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::HrtimerExpireExit { timer },
                );
            }
            8 => {
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::IrqEntry { irq: 11 },
                );
                ts += 1 + r.below(1000);
                if r.below(2) == 0 {
                    push(
                        &mut evs,
                        ts,
                        cpu as u32,
                        cur,
                        Context::HardIrq,
                        EventKind::Waking { target: pick },
                    );
                }
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::IrqExit { irq: 11 },
                );
            }
            9 => {
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::SoftIrq,
                    EventKind::SoftirqEntry { vec: 3 },
                );
                push(
                    &mut evs,
                    ts + 5,
                    cpu as u32,
                    cur,
                    Context::SoftIrq,
                    EventKind::SoftirqExit { vec: 3 },
                );
            }
            10 if cur.is_task() && next_tid < 260 => {
                let child = Tid(next_tid);
                next_tid += 1;
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::Fork {
                        child,
                        child_pid: Pid(child.0),
                        thread: false,
                    },
                );
                alive.push(child.0);
            }
            11 if cur.is_task() && alive.len() > 6 && r.below(4) == 0 => {
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::Exit,
                );
                alive.retain(|t| *t != cur.0);
            }
            12 => {
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::SysEnter {
                        nr: 24,
                        args: [0; 6],
                    },
                );
            }
            _ => {
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::Marker { text: "m".into() },
                );
            }
        }
    }
    evs
}

fn batches(evs: &[Event], size: usize) -> Vec<Batch> {
    evs.chunks(size)
        .map(|c| Batch {
            events: c.to_vec(),
            watermark: c.last().map(|e| e.ts).unwrap_or_default(),
        })
        .collect()
}

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

fn check(seed: u64, n: usize, size: usize, workers: usize) {
    let evs = stream(seed, n);
    let cfg = DataflowConfig {
        workers,
        ..DataflowConfig::default()
    };
    let bs = batches(&evs, size);
    let got = collect_epochs(&cfg, bs.clone()).expect("dataflow runs");
    assert_eq!(got.len(), bs.len(), "one result per epoch");
    let mut upto = 0;
    let mut spins_seen = 0;
    for (i, (wm, graph)) in got.iter().enumerate() {
        upto += bs[i].events.len();
        let want = reference::compute(&evs[..upto], *wm, &RulesConfig::default());
        let what = format!("epoch {i} (seed {seed}, batch {size}, {workers} workers)");
        same(&graph.segments, &want.segments, "segments", &what);
        same(&graph.edges, &want.edges, "edges", &what);
        same(&graph.spins, &want.spins, "spins", &what);
        spins_seen = spins_seen.max(want.spins.len());
    }
    let last = &got.last().expect("epochs").1;
    assert!(last.segments.len() > 50, "the stream makes many segments");
    assert!(last.edges.len() > 50, "and many edges");
    assert!(spins_seen > 0, "and some spins");
}

#[test]
fn dataflow_equals_reference_every_epoch_one_worker() {
    for (seed, size) in [(1, 97), (2, 1000), (3, 4000)] {
        check(seed, 4000, size, 1);
    }
}

#[test]
fn dataflow_equals_reference_every_epoch_two_workers() {
    for (seed, size) in [(4, 97), (5, 1000), (6, 4000)] {
        check(seed, 4000, size, 2);
    }
}
