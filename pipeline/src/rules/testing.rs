//! Hand-made event streams for the rules' tests (the unit tests of each rule file and
//! `pipeline/tests/rules.rs`), and a driver that feeds them to one key's machine. Not part of
//! the crate's interface (hidden from its docs).

use super::{route, Key, KeyState, Output, RulesConfig};
use argus_schema::{syscalls, Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};

/// The number of syscall `name` on this machine.
pub fn nr(name: &str) -> i32 {
    syscalls::number(name).expect("a known syscall")
}

/// A stream built event by event, 1 µs apart, `seq` in order. A thread `tid` ≥ 100 belongs
/// to process `tid / 10 * 10` (threads 100 and 101 are one process), a smaller one is its
/// own process.
#[derive(Default)]
pub struct Trace {
    pub evs: Vec<Event>,
    /// The time of the last event (ns); the next is 1 µs later.
    pub ts: u64,
}

impl Trace {
    pub fn push(&mut self, cpu: u32, tid: i32, ctx: Context, kind: EventKind) -> u64 {
        self.ts += 1000;
        let seq = self.evs.len() as u64;
        self.evs.push(Event {
            ts: Nanos(self.ts),
            seq,
            cpu: Cpu(cpu),
            pid: Pid(if tid >= 100 { tid / 10 * 10 } else { tid }),
            tid: Tid(tid),
            ctx,
            kind,
        });
        seq
    }

    /// A record of task `tid`, in task context.
    pub fn task(&mut self, tid: i32, kind: EventKind) -> u64 {
        self.push(0, tid, Context::Task, kind)
    }

    pub fn enter(&mut self, tid: i32, nr: i32, arg0: u64) -> u64 {
        self.task(
            tid,
            EventKind::SysEnter {
                nr,
                args: [arg0, 0, 0, 0, 0, 0],
            },
        )
    }

    pub fn exit(&mut self, tid: i32, nr: i32, ret: i64) -> u64 {
        self.task(tid, EventKind::SysExit { nr, ret })
    }

    /// `tid` takes the CPU.
    pub fn run(&mut self, tid: i32) -> u64 {
        self.task(
            0,
            EventKind::Switch {
                prev: Tid(0),
                prev_state: TaskState::RUNNABLE,
                next: Tid(tid),
            },
        )
    }

    /// `tid` blocks.
    pub fn block(&mut self, tid: i32) -> u64 {
        self.task(
            tid,
            EventKind::Switch {
                prev: Tid(tid),
                prev_state: TaskState::SLEEPING,
                next: Tid(0),
            },
        )
    }

    pub fn wake(&mut self, waker: i32, target: i32) -> u64 {
        self.task(
            waker,
            EventKind::Waking {
                target: Tid(target),
            },
        )
    }

    /// A record of the interrupt pseudo-thread of `cpu`, in context `ctx`.
    pub fn irq(&mut self, cpu: u32, ctx: Context, kind: EventKind) -> u64 {
        self.push(cpu, 0, ctx, kind)
    }

    /// The stack events `argus record --stacks` places right after the thread's last event
    /// (a kernel stack, then the user stack `ips`), at the same time.
    pub fn stack(&mut self, tid: i32, ips: &[u64]) {
        let (ts, cpu) = self.evs.last().map_or((0, 0), |e| (e.ts.0, e.cpu.0));
        for (kernel, ips) in [(true, vec![0xffff_ffff_8100_0000]), (false, ips.to_vec())] {
            let seq = self.evs.len() as u64;
            self.evs.push(Event {
                ts: Nanos(ts),
                seq,
                cpu: Cpu(cpu),
                pid: Pid(if tid >= 100 { tid / 10 * 10 } else { tid }),
                tid: Tid(tid),
                ctx: Context::Task,
                kind: EventKind::Stack { kernel, ips },
            });
        }
    }
}

/// What the machine of `key` outputs for `evs` (the events routed to it), then its mutable
/// records at the last event's time.
pub fn outputs(evs: &[Event], key: Key, cfg: &RulesConfig) -> Vec<Output> {
    let mut state = KeyState::new(key);
    let mut out = Vec::new();
    for ev in evs {
        route(ev, cfg, |k, role| {
            if k == key {
                state.on_event(ev, role, cfg, &mut out);
            }
        });
    }
    let watermark = evs.last().map_or(Nanos(0), |e| e.ts);
    state.mutable(watermark, cfg, &mut out);
    out
}

/// The segments among `out`, in output order.
pub fn segments(out: &[Output]) -> Vec<argus_schema::Segment> {
    out.iter()
        .filter_map(|o| match o {
            Output::Segment(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}
