//! Snapshot write and read rates on a realistic event mix.
//!
//! `cargo bench -p argus-sinks` (set `ARGUS_BENCH_EVENTS` to change the event count,
//! default 1,000,000).

use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};
use argus_sinks::{read_events, SnapshotInfo, SnapshotWriter, WriterOptions};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// A scheduler-heavy mix: switches, wake-ups, syscalls, interrupts, the odd marker.
fn events(n: u64) -> impl Iterator<Item = Event> {
    (0..n).map(|i| {
        let tid = Tid(1000 + (i % 37) as i32);
        let kind = match i % 10 {
            0 | 1 => EventKind::Switch {
                prev: tid,
                prev_state: if i % 3 == 0 {
                    TaskState::RUNNABLE
                } else {
                    TaskState::SLEEPING
                },
                next: Tid(1000 + ((i + 5) % 37) as i32),
            },
            2 => EventKind::Waking {
                target: Tid(1000 + ((i + 11) % 37) as i32),
            },
            3 | 4 => EventKind::SysEnter {
                nr: (i % 300) as i32,
                args: [i, i * 3, 0, 0, 0, 0],
            },
            5 | 6 => EventKind::SysExit {
                nr: (i % 300) as i32,
                ret: (i % 4096) as i64 - 11,
            },
            7 => EventKind::IrqEntry { irq: 24 },
            8 => EventKind::HrtimerStart {
                timer: 0xffff_8880_0000_0000 + (i % 64) * 64,
                function: 0xffff_ffff_8100_0000,
                expires: i * 1000 + 1_000_000,
            },
            _ => {
                if i % 1000 == 9 {
                    EventKind::Marker {
                        text: format!("request {i} done"),
                    }
                } else {
                    EventKind::Exec
                }
            }
        };
        Event {
            ts: Nanos(1_000_000_000 + i * 97),
            seq: i,
            cpu: Cpu((i % 4) as u32),
            pid: Pid(1000),
            tid,
            ctx: Context::Task,
            kind,
        }
    })
}

fn bench(c: &mut Criterion) {
    let n: u64 = std::env::var("ARGUS_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("snap");
    let mut group = c.benchmark_group("sinks");
    group.sample_size(10);
    group.throughput(Throughput::Elements(n));
    let default_threads = WriterOptions::default().encode_threads;
    for threads in [1, default_threads] {
        let options = WriterOptions {
            encode_threads: threads,
            ..WriterOptions::default()
        };
        group.bench_function(format!("write_events/{n}/threads={threads}"), |b| {
            b.iter(|| {
                let mut w = SnapshotWriter::with_options(&target, options).expect("writer");
                w.write_events(events(n)).expect("write");
                w.finish(SnapshotInfo::default()).expect("finish")
            })
        });
    }
    group.bench_function(format!("read_events/{n}"), |b| {
        b.iter(|| {
            read_events(&target)
                .expect("reader")
                .map(|e| e.expect("event").seq)
                .sum::<u64>()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
