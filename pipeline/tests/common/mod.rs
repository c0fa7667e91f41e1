//! The randomized event stream of the oracle tests, shared by `oracle.rs` (the dataflow
//! equals the batch reference) and `arranged.rs` and `arranged_cluster.rs` (the arranged
//! graph and its slices equal their from-scratch computations, checked by
//! [`arranged_check`]): 2 CPUs, a dozen threads, every rule exercised (see `oracle.rs` for the
//! list), and the rules configuration that gives every user rule something to do.
//! [`spin_stream`] adds spin loops (yield loops, timed-out waits on one object) and keeps to
//! what the segments can tell (for the derived spins the arranged checks compare).
#![allow(dead_code)]

pub mod arranged_check;

use argus_pipeline::dataflow::Batch;
use argus_pipeline::rules::{
    is_lock_refused, ChannelEnd, CondvarRule, PipeRule, PoolRule, RulesConfig, SplitAt, SplitRule,
};
use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};
use std::collections::{HashMap, HashSet};

/// Rules that give every user and kernel rule something to do in [`stream`].
pub fn rules() -> RulesConfig {
    let mut r = RulesConfig::default();
    r.kernel_threads.insert(Tid(90));
    r.cull_functions.insert(0xc0);
    r.cull_threads.insert(Tid(105));
    r.user.condvars.push(CondvarRule {
        pid: Pid(100),
        addr: 0x1000,
        len: 48,
    });
    r.user.splits.push(SplitRule {
        pid: Some(Pid(100)),
        at: SplitAt::Syscall(39),
    });
    r.user.splits.push(SplitRule {
        pid: None,
        at: SplitAt::Marker("frame".into()),
    });
    r.user.pools.push(PoolRule {
        tids: [101, 102, 103, 104, 106, 107]
            .into_iter()
            .map(Tid)
            .collect(),
    });
    r.user.pipes.push(PipeRule {
        pid: Pid(110),
        write_fd: 4,
        read_fd: 3,
    });
    // fd identity: a pipe shared by processes 100 and 120, a socket pair between 100 and
    // 110, a regular file; forked children (tids from 200) inherit 100's table.
    r.channels
        .insert(Pid(100), 3, Nanos(0), ChannelEnd::pipe(77));
    r.channels
        .insert(Pid(120), 4, Nanos(0), ChannelEnd::pipe(77));
    r.channels
        .insert(Pid(100), 5, Nanos(0), ChannelEnd::socket(51, 52));
    r.channels
        .insert(Pid(110), 5, Nanos(0), ChannelEnd::socket(52, 51));
    r.channels
        .insert(Pid(100), 6, Nanos(0), ChannelEnd::default());
    r.channels
        .insert(Pid(100), 4, Nanos(3_000_000_000), ChannelEnd::pipe(78));
    for child in (200..260).map(|t| t / 10 * 10) {
        r.channels
            .set_parent(Pid(child), Pid(100), Nanos(2_000_000_000));
    }
    r
}

pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Synthetic user call chains (innermost first, `ips[0]` the stopped-at instruction) of an
/// event loop: thread entry `S`, loop `T`; the loop polls (`0x50`), runs callbacks A and B
/// (`0x51`, `0x52`) and a handler that blocks at two places (`0x53`, call sites `0x61`,
/// `0x62`); plus a stack with no call site and a derailed walk.
const STACKS: [&[u64]; 8] = [
    &[0x7f00, 0x50, 0x20, 0x10],
    &[0x7f00, 0x71, 0x51, 0x20, 0x10],
    &[0x7f00, 0x72, 0x52, 0x20, 0x10],
    &[0x7f00, 0x61, 0x53, 0x20, 0x10],
    &[0x7f00, 0x62, 0x53, 0x20, 0x10],
    &[0x7f00],
    &[0x7f00, 0xdead, 0xbeef],
    &[0x7f00, 0x20, 0x10],
];

/// Sometimes, the stack events `argus record --stacks` places right after an event of
/// `tid` (kernel then user stack, same time): at blocking switches, syscall entries and
/// wake-ups.
fn stacks_after(r: &mut Lcg, evs: &mut Vec<Event>, ts: u64, cpu: u32, tid: Tid, percent: u64) {
    if !tid.is_task() || r.below(100) >= percent {
        return;
    }
    let pid = Pid(if tid.0 >= 100 { tid.0 / 10 * 10 } else { tid.0 });
    let user = STACKS[r.below(STACKS.len() as u64) as usize].to_vec();
    let kernel = r.below(2) == 0;
    for (k, ips) in [(true, vec![0xffff_8000_0000_1000u64]), (false, user)] {
        if k && !kernel {
            continue;
        }
        let seq = evs.len() as u64;
        evs.push(Event {
            ts: Nanos(ts),
            seq,
            cpu: Cpu(cpu),
            pid,
            tid,
            ctx: Context::Task,
            kind: EventKind::Stack { kernel: k, ips },
        });
    }
}

/// A random but plausible stream: 2 CPUs, a dozen threads, ~`n` events.
pub fn stream(seed: u64, n: usize) -> Vec<Event> {
    generate(seed, n, false)
}

/// [`stream`] with spin loops: now and then a thread runs a few turns of short sleeps
/// (`nanosleep`, a yield loop) and of waits on one object (`futex`, `poll`) that time out
/// (a logical wait), mixed, a turn sometimes long (a spin of its own) or a wait that does
/// not time out (ending the logical wait); it then exits, blocks on the object again or
/// goes on. And kept to what the segments tell ([`well_formed`]), so that the spins derived
/// from them are the rule machines' exactly.
pub fn spin_stream(seed: u64, n: usize) -> Vec<Event> {
    well_formed(generate(seed, n, true))
}

/// An event of `evs[i]`'s task and CPU in context `ctx`, halfway to the next record: a time
/// of its own, in order (`seq` 0, renumbered by the caller).
fn halfway(evs: &[Event], i: usize, ctx: Context, kind: EventKind) -> Event {
    let ev = &evs[i];
    let next = evs.get(i + 1).map_or(ev.ts.0 + 2, |n| n.ts.0);
    Event {
        ts: Nanos(ev.ts.0 + next.saturating_sub(ev.ts.0) / 2),
        seq: 0,
        cpu: ev.cpu,
        pid: ev.pid,
        tid: ev.tid,
        ctx,
        kind,
    }
}

/// `evs` with socket data events: after a write's entry in task context, most of the time
/// a delivery to one of two sockets (`SockReady`, in the writer's or a softirq's context);
/// after a read's entry, a receive from one of them (data or `EAGAIN`); now and then a
/// delivery in some thread's softirq whatever it is doing. `seq` renumbered.
pub fn with_sockets(evs: Vec<Event>, seed: u64) -> Vec<Event> {
    let mut r = Lcg(seed ^ 0x5eed_50c4);
    let sks = [0xffff_8000_0000_1000u64, 0xffff_8000_0000_2000];
    let mut out = Vec::with_capacity(evs.len() * 2);
    for (i, ev) in evs.iter().enumerate() {
        let after = match ev.kind {
            EventKind::SysEnter { nr, .. } if ev.ctx == Context::Task && ev.tid.is_task() => {
                let sk = sks[r.below(2) as usize];
                match nr {
                    1 if r.below(4) != 0 => Some((
                        if r.below(2) == 0 {
                            Context::Task
                        } else {
                            Context::SoftIrq
                        },
                        EventKind::SockReady { sk },
                    )),
                    0 if r.below(4) != 0 => Some((
                        Context::Task,
                        EventKind::SockRecv {
                            sk,
                            ret: [5, 64, -11][r.below(3) as usize],
                        },
                    )),
                    _ if r.below(20) == 0 => Some((Context::SoftIrq, EventKind::SockReady { sk })),
                    _ => None,
                }
            }
            _ => None,
        };
        out.push(ev.clone());
        if let Some((ctx, kind)) = after {
            out.push(halfway(&evs, i, ctx, kind));
        }
    }
    for (i, ev) in out.iter_mut().enumerate() {
        ev.seq = i as u64;
    }
    out
}

/// `evs` with lock owners named (`LockOwner`): after a `futex` entry in task context, a
/// third of the time, the kernel names an owner of the lock: another task seen so far
/// (alive, exited or never running again), now and then the waiter itself or a task never
/// seen. `seq` renumbered.
pub fn with_lock_owners(evs: Vec<Event>, seed: u64) -> Vec<Event> {
    let mut r = Lcg(seed ^ 0x10c4_0a4e);
    let mut seen: Vec<Tid> = Vec::new();
    let mut out = Vec::with_capacity(evs.len() + evs.len() / 8);
    for (i, ev) in evs.iter().enumerate() {
        if ev.tid.is_task() && !seen.contains(&ev.tid) {
            seen.push(ev.tid);
        }
        out.push(ev.clone());
        let futex = matches!(ev.kind, EventKind::SysEnter { nr: 202, .. });
        if futex && ev.ctx == Context::Task && ev.tid.is_task() && r.below(3) == 0 {
            let owner = match r.below(10) {
                0 => ev.tid,
                1 => Tid(9999),
                _ => seen[r.below(seen.len() as u64) as usize],
            };
            out.push(halfway(
                &evs,
                i,
                Context::Task,
                EventKind::LockOwner { owner, lock: 0 },
            ));
        }
    }
    for (i, ev) in out.iter_mut().enumerate() {
        ev.seq = i as u64;
    }
    out
}

/// `evs` without what makes a thread's spins depend on more than its segments (see
/// `argus_pipeline::arranged::spins`): a thread enters no syscall while in one, a syscall
/// returns as the one it entered, and no file lock attempt is refused. `seq` renumbered.
pub fn well_formed(evs: Vec<Event>) -> Vec<Event> {
    let mut in_flight: HashMap<Tid, i32> = HashMap::new();
    let mut dead: HashSet<Tid> = HashSet::new();
    let mut out = Vec::with_capacity(evs.len());
    for mut ev in evs {
        let own = ev.ctx == Context::Task && ev.tid.is_task() && !dead.contains(&ev.tid);
        match &mut ev.kind {
            EventKind::SysEnter { nr, .. } if own => {
                if in_flight.contains_key(&ev.tid) {
                    continue;
                }
                in_flight.insert(ev.tid, *nr);
            }
            EventKind::SysExit { nr, .. } if own => {
                if let Some(entered) = in_flight.remove(&ev.tid) {
                    *nr = entered;
                }
            }
            EventKind::FileLock { ret, .. } if is_lock_refused(i64::from(*ret)) => continue,
            EventKind::Exit if own => {
                dead.insert(ev.tid);
            }
            _ => {}
        }
        ev.seq = out.len() as u64;
        out.push(ev);
    }
    out
}

/// Appends an event of `tid` (its process: the tens below it from tid 100 on) numbered by
/// its position in `evs`.
fn push_event(evs: &mut Vec<Event>, ts: u64, cpu: u32, tid: Tid, ctx: Context, kind: EventKind) {
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
}

/// The turns of a spin loop of thread `t` on `cpu` (see [`spin_stream`]); returns the time
/// after it and whether `t` exited.
fn spin_loop(r: &mut Lcg, evs: &mut Vec<Event>, mut ts: u64, cpu: u32, t: Tid) -> (u64, bool) {
    let push = |evs: &mut Vec<Event>, ts: u64, tid: Tid, ctx: Context, kind| {
        push_event(evs, ts, cpu, tid, ctx, kind);
    };
    const MS: u64 = 1_000_000;
    let object = [0x3000u64, 0x3008][r.below(2) as usize];
    let turns = 4 + r.below(9);
    // Mostly sleeps, mostly waits on the object, or mixed.
    let flavor = r.below(3);
    for turn in 0..=turns {
        // nanosleep; futex or poll on the object, timed out or (rarely) woken for good.
        let (nr, ret) = match (flavor, r.below(20)) {
            (0, 0..=16) | (1, 0) | (2, 0..=7) => (35, 0),
            (0, _) | (1, 1..=18) | (2, 8..=13) => (202, -110),
            (2, 14..=15) => (7, 0),
            (1, 19) | (2, 16..=17) => (202, 0),
            _ => (7, 1),
        };
        let args = [object, 1, 0, 0, 0, 0];
        push(evs, ts, t, Context::Task, EventKind::SysEnter { nr, args });
        push(
            evs,
            ts + 1,
            t,
            Context::Task,
            EventKind::Switch {
                prev: t,
                prev_state: TaskState::SLEEPING,
                next: Tid(0),
            },
        );
        if turn == turns {
            // The loop ends: the thread stays blocked, or runs on after the wait's return.
            if r.below(3) != 0 {
                return (ts + 2, false);
            }
        }
        ts += if r.below(15) == 0 {
            2_500 * MS
        } else {
            300 * MS + r.below(500) * MS
        };
        push(
            evs,
            ts,
            Tid(0),
            Context::HardIrq,
            EventKind::Waking { target: t },
        );
        push(
            evs,
            ts + 1,
            Tid(0),
            Context::Task,
            EventKind::Switch {
                prev: Tid(0),
                prev_state: TaskState::RUNNABLE,
                next: t,
            },
        );
        push(
            evs,
            ts + 2,
            t,
            Context::Task,
            EventKind::SysExit { nr, ret },
        );
        ts += 3 + r.below(1000);
        if r.below(25) == 0 {
            push(evs, ts, t, Context::Task, EventKind::Exit);
            return (ts + 1, true);
        }
    }
    (ts, false)
}

fn generate(seed: u64, n: usize, loops: bool) -> Vec<Event> {
    let mut r = Lcg(seed);
    let mut evs = Vec::new();
    let mut ts = 1_000_000u64;
    let mut running = [Tid(0), Tid(0)];
    let mut next_tid = 200;
    let mut alive: Vec<i32> = (100..112).collect();
    // Kernel workers (90 is a declared delegate thread) and their open work items.
    let mut items: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let push = push_event;
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
        if loops && r.below(60) == 0 {
            let (after, exited) = spin_loop(&mut r, &mut evs, ts, cpu as u32, pick);
            ts = after;
            running[cpu] = pick;
            if exited && alive.len() > 1 {
                alive.retain(|t| *t != pick.0);
            }
            continue;
        }
        match r.below(29) {
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
                if state != TaskState::RUNNABLE {
                    stacks_after(&mut r, &mut evs, ts, cpu as u32, cur, 70);
                }
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
                if ctx == Context::Task {
                    stacks_after(&mut r, &mut evs, ts, cpu as u32, cur, 20);
                }
            }
            4 | 14 | 15 => {
                let nr = [
                    0, 1, 7, 35, 202, 232, 24, 230, 20, 45, 46, 61, 231, 39, 3, 73,
                ][r.below(16) as usize];
                let arg0 = [3u64, 4, 5, 6, 0x1000, 0x1010, 0x2000][r.below(7) as usize];
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::SysEnter {
                        nr,
                        args: [arg0, 0, 0, 0, 0, 0],
                    },
                );
                stacks_after(&mut r, &mut evs, ts, cpu as u32, cur, 15);
            }
            5 | 16 | 17 => {
                let nr = [0, 1, 7, 35, 202, 232, 24, 230, 20, 45, 46, 61, 73][r.below(13) as usize];
                let ret = [0i64, -110, 5, -4, -11, -512, 64][r.below(7) as usize];
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
                // Timer 0 runs a maintenance callback (culled).
                let function = if timer == 0xffff_0000 { 0xc0 } else { 7 };
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::HrtimerExpire { timer, function },
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
            28 if cur.is_task() && r.below(2) == 0 => {
                // File locks on two files: granted, refused, deferred, released.
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::FileLock {
                        inode: 5 + r.below(2),
                        dev: 8 << 20,
                        flock: r.below(4) == 0,
                        lock_type: r.below(3) as u8,
                        ret: [0, 0, -11, -13, 1][r.below(5) as usize],
                    },
                );
            }
            28 if cur.is_task() => {
                let addr = [0x7000u64, 0x7008][r.below(2) as usize];
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::FlagAccess {
                        addr,
                        write: r.below(3) == 0,
                    },
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
            18 => {
                // Work queued (by a task or an interrupt), run by a kernel worker.
                let work = 0xaa00 + r.below(3) * 8;
                let ctx = if r.below(3) == 0 {
                    Context::SoftIrq
                } else {
                    Context::Task
                };
                let function = if work == 0xaa00 { 0xc0 } else { 0xf0 };
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    ctx,
                    EventKind::WorkQueue { work, function },
                );
            }
            19 => {
                let w = r.below(2) as usize;
                let kw = Tid(90 + w as i32);
                if !items[w].is_empty() && r.below(3) != 0 {
                    let work = items[w].pop().unwrap_or_default();
                    push(
                        &mut evs,
                        ts,
                        cpu as u32,
                        kw,
                        Context::Task,
                        EventKind::WorkEnd { work },
                    );
                } else if items[w].len() < 2 {
                    let work = 0xaa00 + r.below(3) * 8;
                    let function = if work == 0xaa00 { 0xc0 } else { 0xf0 };
                    items[w].push(work);
                    push(
                        &mut evs,
                        ts,
                        cpu as u32,
                        kw,
                        Context::Task,
                        EventKind::WorkStart { work, function },
                    );
                }
            }
            20 => {
                // Kernel workers block and are woken like any task (also inside items).
                let kw = Tid(90 + r.below(2) as i32);
                let (kind, c) = if r.below(2) == 0 {
                    (
                        EventKind::Switch {
                            prev: kw,
                            prev_state: TaskState::SLEEPING,
                            next: Tid(0),
                        },
                        kw,
                    )
                } else {
                    (EventKind::Waking { target: kw }, cur)
                };
                push(&mut evs, ts, cpu as u32, c, Context::Task, kind);
            }
            21 => {
                let timer = 0xbb00 + r.below(3) * 8;
                if r.below(2) == 0 {
                    push(
                        &mut evs,
                        ts,
                        cpu as u32,
                        cur,
                        Context::Task,
                        EventKind::TimerStart {
                            timer,
                            function: 0xf5,
                            expires: 9,
                        },
                    );
                } else {
                    push(
                        &mut evs,
                        ts,
                        cpu as u32,
                        cur,
                        Context::SoftIrq,
                        EventKind::TimerExpire {
                            timer,
                            function: 0xf5,
                        },
                    );
                    push(
                        &mut evs,
                        ts + 1,
                        cpu as u32,
                        cur,
                        Context::SoftIrq,
                        EventKind::Waking { target: pick },
                    );
                    push(
                        &mut evs,
                        ts + 2,
                        cpu as u32,
                        cur,
                        Context::SoftIrq,
                        EventKind::TimerExpireExit { timer },
                    );
                }
            }
            22 => {
                let sig = [10, 12][r.below(2) as usize];
                if r.below(2) == 0 {
                    push(
                        &mut evs,
                        ts,
                        cpu as u32,
                        cur,
                        Context::Task,
                        EventKind::SignalGenerate { sig, target: pick },
                    );
                } else {
                    push(
                        &mut evs,
                        ts,
                        cpu as u32,
                        cur,
                        Context::Task,
                        EventKind::SignalDeliver { sig },
                    );
                }
            }
            23 => {
                // A device interrupt and its bottom half.
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::IrqEntry { irq: 19 },
                );
                push(
                    &mut evs,
                    ts + 3,
                    cpu as u32,
                    cur,
                    Context::HardIrq,
                    EventKind::IrqExit { irq: 19 },
                );
                let vec = [3u32, 1][r.below(2) as usize];
                push(
                    &mut evs,
                    ts + 5,
                    cpu as u32,
                    cur,
                    Context::SoftIrq,
                    EventKind::SoftirqEntry { vec },
                );
                push(
                    &mut evs,
                    ts + 6,
                    cpu as u32,
                    cur,
                    Context::SoftIrq,
                    EventKind::Waking { target: pick },
                );
                push(
                    &mut evs,
                    ts + 8,
                    cpu as u32,
                    cur,
                    Context::SoftIrq,
                    EventKind::SoftirqExit { vec },
                );
                ts += 8;
            }
            25 | 26 => {
                // A scripted exchange between two live threads: `b` waits in a receive, a
                // futex or wait4; `a` acts from inside a send, a futex on the declared
                // condition variable, or its exit path; both on descriptors that make peer
                // sets (and the declared pipe of process 110) come and go.
                let a = pick;
                let b = Tid(alive[r.below(alive.len() as u64) as usize]);
                let fd = 3 + r.below(4);
                let (wait_nr, act_nr, act_arg) = match r.below(4) {
                    0 => (45, 46, fd),
                    1 => (0, 1, fd),
                    2 => (202, 202, [0x1000, 0x2000][r.below(2) as usize]),
                    _ => (61, 231, 0),
                };
                let c = cpu as u32;
                let enter = |nr: i32, arg: u64| EventKind::SysEnter {
                    nr,
                    args: [arg, 0, 0, 0, 0, 0],
                };
                push(&mut evs, ts, c, b, Context::Task, enter(wait_nr, fd));
                push(
                    &mut evs,
                    ts + 1,
                    c,
                    b,
                    Context::Task,
                    EventKind::Switch {
                        prev: b,
                        prev_state: TaskState::SLEEPING,
                        next: a,
                    },
                );
                stacks_after(&mut r, &mut evs, ts + 1, c, b, 70);
                push(
                    &mut evs,
                    ts + 2,
                    c,
                    a,
                    Context::Task,
                    enter(act_nr, act_arg),
                );
                if act_nr == 231 && r.below(2) == 0 {
                    push(&mut evs, ts + 3, c, a, Context::Task, EventKind::Exit);
                    alive.retain(|t| *t != a.0);
                    if alive.is_empty() {
                        alive.push(100);
                    }
                }
                push(
                    &mut evs,
                    ts + 4,
                    c,
                    a,
                    Context::Task,
                    EventKind::Waking { target: b },
                );
                push(
                    &mut evs,
                    ts + 5,
                    c,
                    a,
                    Context::Task,
                    EventKind::SysExit { nr: act_nr, ret: 8 },
                );
                push(
                    &mut evs,
                    ts + 6,
                    c,
                    b,
                    Context::Task,
                    EventKind::SysExit {
                        nr: wait_nr,
                        ret: [8i64, -4][r.below(2) as usize],
                    },
                );
                running[cpu] = a;
                ts += 6;
            }
            27 => {
                // The declared pipe of process 110: a write, then a read that finds data.
                let c = cpu as u32;
                let (w, rd) = if r.below(2) == 0 {
                    (Tid(110), Tid(111))
                } else {
                    (Tid(111), Tid(110))
                };
                for (t, nr, fd, k) in [(w, 1, 4u64, 0u64), (rd, 0, 3, 2)] {
                    push(
                        &mut evs,
                        ts + k,
                        c,
                        t,
                        Context::Task,
                        EventKind::SysEnter {
                            nr,
                            args: [fd, 0, 0, 0, 0, 0],
                        },
                    );
                    push(
                        &mut evs,
                        ts + k + 1,
                        c,
                        t,
                        Context::Task,
                        EventKind::SysExit { nr, ret: 5 },
                    );
                }
                ts += 3;
            }
            24 => {
                let text = [
                    "frame 1",
                    "other",
                    "argus:dispatch-begin cb",
                    "argus:dispatch-end cb",
                ][r.below(4) as usize];
                push(
                    &mut evs,
                    ts,
                    cpu as u32,
                    cur,
                    Context::Task,
                    EventKind::Marker { text: text.into() },
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

pub fn batches(evs: &[Event], size: usize, shuffle: Option<u64>) -> Vec<Batch> {
    let mut r = Lcg(shuffle.unwrap_or(0));
    evs.chunks(size)
        .map(|c| {
            let mut events = c.to_vec();
            if shuffle.is_some() {
                // Any arrival order within an epoch (per-CPU streams interleave arbitrarily
                // before the watermark): Fisher-Yates.
                for i in (1..events.len()).rev() {
                    let j = r.below(i as u64 + 1) as usize;
                    events.swap(i, j);
                }
            }
            Batch {
                events,
                watermark: c.last().map(|e| e.ts).unwrap_or_default(),
            }
        })
        .collect()
}
