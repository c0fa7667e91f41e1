//! The synthetic but realistic event stream of the pipeline benches (2 CPUs, a few hundred
//! threads; syscalls with futex/epoll/read/write waits, wake-ups in task and interrupt
//! context, preemptions, hrtimers, wheel timers, work items, forks), generated lazily so the
//! events themselves take no memory. Shared by `graph.rs` and `arranged.rs`.

use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};

pub struct Gen {
    rng: u64,
    ts: u64,
    seq: u64,
    running: [i32; 2],
    in_sys: Vec<Option<i32>>,
    blocked: Vec<bool>,
    /// Threads kept off the CPUs and unwoken until event `seq` (hangs), see [`Gen::stall`].
    stalled: Vec<(i32, u64)>,
}

/// Threads, with tids from [`BASE_TID`].
pub const THREADS: usize = 300;
/// The first thread's tid.
pub const BASE_TID: i32 = 1000;

impl Gen {
    pub fn new() -> Gen {
        Gen {
            rng: 0x2545_F491_4F6C_DD1D,
            ts: 1_000_000_000,
            seq: 0,
            running: [BASE_TID, BASE_TID + 1],
            in_sys: vec![None; THREADS],
            blocked: vec![false; THREADS],
            stalled: Vec::new(),
        }
    }
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn push(&mut self, out: &mut Vec<Event>, cpu: usize, tid: i32, ctx: Context, kind: EventKind) {
        self.ts += 1 + self.below(400);
        out.push(Event {
            ts: Nanos(self.ts),
            seq: self.seq,
            cpu: Cpu(cpu as u32),
            pid: Pid(tid / 4 * 4),
            tid: Tid(tid),
            ctx,
            kind,
        });
        self.seq += 1;
    }
    /// Makes thread `tid` hang for the next `events` events: nothing wakes it and it is not
    /// switched in (it finishes its current run first if it is on a CPU). Without a stall the
    /// stream is the same as before stalls existed.
    #[allow(dead_code)] // graph.rs makes no hangs
    pub fn stall(&mut self, tid: i32, events: u64) {
        self.stalled.push((tid, self.seq + events));
    }

    fn is_stalled(&self, tid: i32) -> bool {
        self.stalled
            .iter()
            .any(|&(t, until)| t == tid && self.seq < until)
    }

    /// At least `n` more events.
    pub fn batch(&mut self, n: usize) -> Vec<Event> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            let cpu = self.below(2) as usize;
            let cur = self.running[cpu];
            let ci = (cur - BASE_TID) as usize;
            let other = BASE_TID + self.below(THREADS as u64) as i32;
            let oi = (other - BASE_TID) as usize;
            match self.below(100) {
                0..=39 => {
                    // A syscall: enter now, exit now or after blocking.
                    if let Some(nr) = self.in_sys[ci].take() {
                        let ret = [0i64, 8, -11, -4][self.below(4) as usize];
                        self.push(
                            &mut out,
                            cpu,
                            cur,
                            Context::Task,
                            EventKind::SysExit { nr, ret },
                        );
                    } else {
                        let nr = [0, 1, 202, 232, 7, 39, 3, 46, 47][self.below(9) as usize];
                        let fd = 3 + self.below(12);
                        self.in_sys[ci] = Some(nr);
                        self.push(
                            &mut out,
                            cpu,
                            cur,
                            Context::Task,
                            EventKind::SysEnter {
                                nr,
                                args: [fd, 0, 0, 0, 0, 0],
                            },
                        );
                    }
                }
                40..=59 => {
                    // Switch: block (if in a syscall) or be preempted.
                    let block = self.in_sys[ci].is_some() && self.below(3) != 0;
                    let next = if self.blocked[oi] || self.is_stalled(other) {
                        cur
                    } else {
                        other
                    };
                    let state = if block {
                        TaskState::SLEEPING
                    } else {
                        TaskState::RUNNABLE
                    };
                    if block {
                        self.blocked[ci] = true;
                    }
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::Switch {
                            prev: Tid(cur),
                            prev_state: state,
                            next: Tid(next),
                        },
                    );
                    self.running[cpu] = next;
                }
                60..=74 if self.is_stalled(other) => {}
                60..=74 => {
                    let ctx = if self.below(4) == 0 {
                        Context::HardIrq
                    } else {
                        Context::Task
                    };
                    self.blocked[oi] = false;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        ctx,
                        EventKind::Waking { target: Tid(other) },
                    );
                }
                75..=82 if self.is_stalled(other) => {}
                75..=82 => {
                    let irq = [19, 24][self.below(2) as usize];
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::IrqEntry { irq },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::IrqExit { irq },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::SoftirqEntry { vec: 3 },
                    );
                    self.blocked[oi] = false;
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::Waking { target: Tid(other) },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::SoftirqExit { vec: 3 },
                    );
                }
                83..=89 => {
                    let timer = 0xffff_8000_0000 + (ci as u64) * 64;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::HrtimerStart {
                            timer,
                            function: 0xffff_1000,
                            expires: self.ts + 1000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::HrtimerExpire {
                            timer,
                            function: 0xffff_1000,
                        },
                    );
                    self.blocked[ci] = false;
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::Waking { target: Tid(cur) },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::HardIrq,
                        EventKind::HrtimerExpireExit { timer },
                    );
                }
                90..=94 => {
                    let work = 0xffff_9000_0000 + self.below(64) * 32;
                    let kw = BASE_TID + (THREADS as i32) - 1 - self.below(4) as i32;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::WorkQueue {
                            work,
                            function: 0xffff_2000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        kw,
                        Context::Task,
                        EventKind::WorkStart {
                            work,
                            function: 0xffff_2000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        kw,
                        Context::Task,
                        EventKind::WorkEnd { work },
                    );
                }
                95..=97 => {
                    let timer = 0xffff_a000_0000 + (ci as u64) * 64;
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::TimerStart {
                            timer,
                            function: 0xffff_3000,
                            expires: 5,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::TimerExpire {
                            timer,
                            function: 0xffff_3000,
                        },
                    );
                    self.push(
                        &mut out,
                        cpu,
                        0,
                        Context::SoftIrq,
                        EventKind::TimerExpireExit { timer },
                    );
                }
                98.. if self.is_stalled(other) => {}
                _ => {
                    self.push(
                        &mut out,
                        cpu,
                        cur,
                        Context::Task,
                        EventKind::Fork {
                            child: Tid(other),
                            child_pid: Pid(other / 4 * 4),
                            thread: true,
                        },
                    );
                }
            }
        }
        out
    }
}
