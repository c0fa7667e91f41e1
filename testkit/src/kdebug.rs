//! kdebug test vectors from real Linux recordings (issue 19): a Linux trace's events
//! translated into the kdebug events macOS records for the same behaviour ([`from_linux`]),
//! written as `RAW_VERSION1`, `RAW_VERSION2` and V3 files ([`KdTrace::write`]).
//!
//! The translation is the inverse of `argus_ingest::import::kdebug`'s mapping, written from
//! xnu's side: a blocking switch is a `MACH_WAIT` then a `MACH_SCHED`, a wake-up a
//! `MACH_MKRUNNABLE` by the waker, interrupts and softirqs `INTERRUPT` intervals, syscalls
//! the BSD syscall or Mach trap of the same class (a futex wait is `__ulock_wait` on the
//! word, a sleep `__semwait_signal` without a semaphore, `epoll_wait` `kevent`), creations
//! `TRACE_DATA_NEWTHREAD`, execs `TRACE_DATA_EXEC` with the program in
//! `TRACE_STRING_EXEC`, names `TRACE_STRING_THREADNAME`, exits
//! `TRACE_DATA_THREAD_TERMINATE`, application markers
//! the strings of `kdebug_trace_string`
//! (`TRACE_STRING_GLOBAL`), a waiter naming its lock's owner a
//! `TURNSTILE_thread_added_to_turnstile_waitq` then a `TURNSTILE_turnstile_added_to_thread_heap`.
//! Thread ids are moved by [`TID_OFFSET`] (macOS thread ids
//! and pids are different numbers), each CPU's idle task is a thread of its own that says
//! `MACH_IDLE`, times are Apple silicon ticks (24 MHz, timebase 125/3) for V2 and V3 and
//! nanoseconds for V1. What macOS has no record for (socket data, file locks,
//! stacks, watchpoints, signals, wheel timers, kernel work items) is left out, and counted.

use argus_ingest::import::kdebug::{codes, encode, KdCpu, KdEvent, KdThread, KdVersion};
use argus_schema::{syscalls, Context, Event, EventKind, ThreadInfo};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Added to every Linux thread id but 0.
pub const TID_OFFSET: u64 = 1_000_000;
/// The idle thread of CPU `c` is `IDLE_BASE + c`.
pub const IDLE_BASE: u64 = 100;

/// A kdebug trace in memory: times in nanoseconds until written.
#[derive(Clone, Debug, Default)]
pub struct KdTrace {
    /// Threads alive at the start: the thread map.
    pub threads: Vec<KdThread>,
    /// CPUs.
    pub cpus: Vec<KdCpu>,
    /// Events, `timestamp` in nanoseconds, in time order.
    pub events: Vec<KdEvent>,
    /// Linux events left out, by kind name.
    pub left_out: BTreeMap<&'static str, u64>,
}

/// The kdebug thread id of a Linux thread (`cpu` names the idle thread for tid 0).
pub fn kd_tid(tid: i32, cpu: u32) -> u64 {
    if tid == 0 {
        IDLE_BASE + u64::from(cpu)
    } else {
        tid as u64 + TID_OFFSET
    }
}

/// Where the turnstiles of the translation's lock owners are (a kernel address).
const TURNSTILE_BASE: u64 = 0xffff_ff80_0000_0000;

/// The four argument words of a string event: up to 32 bytes of `s`.
pub fn string_args(s: &[u8]) -> [u64; 4] {
    let mut b = [0u8; 32];
    let n = s.len().min(32);
    b[..n].copy_from_slice(&s[..n]);
    std::array::from_fn(|i| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes")))
}

fn bsd(name: &str) -> &'static codes::Syscall {
    codes::BSD
        .iter()
        .chain(codes::MACH)
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is in the tables"))
}

/// The kdebug syscall for Linux syscall `nr` with arguments `args` (`None` at an exit, whose
/// arguments the trace does not have): its event id and its four arguments.
fn syscall(nr: i32, args: Option<&[u64; 6]>, futex_wake: bool) -> (u32, [u64; 4]) {
    let name = syscalls::name(nr);
    let a = args.copied().unwrap_or([0; 6]);
    let plain = |s: &'static codes::Syscall| (codes::eventid(s), [a[0], a[1], a[2], a[3]]);
    match name.as_str() {
        "futex" if futex_wake => (codes::eventid(bsd("BSC_ulock_wake")), [1, a[0], 0, 0]),
        "futex" => (codes::eventid(bsd("BSC_ulock_wait")), [1, a[0], a[2], 0]),
        "nanosleep" | "clock_nanosleep" => {
            (codes::eventid(bsd("BSC_semwait_signal")), [0, 0, 1, 1])
        }
        "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => plain(bsd("BSC_kevent")),
        "sched_yield" => plain(bsd("MSC_swtch_pri")),
        n => match codes::BSD
            .iter()
            .find(|s| s.linux == n && s.args == codes::Args::Same)
        {
            Some(s) => plain(s),
            // No BSD equivalent: a syscall number of its own, past every table's.
            None => (
                codes::BSD_SYSCALL | (1000 + nr.rem_euclid(15_000) as u32) << 2,
                [a[0], a[1], a[2], a[3]],
            ),
        },
    }
}

/// The start of the timer's interrupt on `cpu` (`DBG_INTR_TYPE_TIMER`, interrupt 0 as on
/// arm64).
fn timer_interrupt(ts: u64, me: u64, cpu: u32) -> KdEvent {
    KdEvent {
        offset: 0,
        timestamp: ts,
        args: [0, 0, 0, codes::INTR_TYPE_TIMER],
        tid: me,
        debugid: codes::INTERRUPT | 1,
        cpu,
    }
}

/// Translates a Linux recording (its events in `seq` order and its thread table).
pub fn from_linux(events: &[Event], threads: &[ThreadInfo]) -> KdTrace {
    let mut out = KdTrace::default();
    let info: HashMap<i32, &ThreadInfo> = threads.iter().map(|t| (t.tid.0, t)).collect();
    let cpus: u32 = events.iter().map(|e| e.cpu.0 + 1).max().unwrap_or(1);
    let start = events.first().map_or(0, |e| e.ts.0);
    // The thread map: every thread not created during the trace.
    let created: HashSet<i32> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Fork { child, .. } => Some(child.0),
            _ => None,
        })
        .collect();
    for t in threads.iter().filter(|t| t.tid.0 != 0) {
        if !created.contains(&t.tid.0) {
            out.threads.push(KdThread {
                tid: kd_tid(t.tid.0, 0),
                pid: if t.kernel { 0 } else { t.pid.0 },
                command: t.process.chars().take(19).collect(),
            });
        }
    }
    out.cpus = (0..cpus)
        .map(|c| KdCpu {
            cpu_id: c,
            flags: 0,
            name: format!("cpu{c}"),
        })
        .collect();
    let ev = |ts: u64, tid: u64, debugid: u32, cpu: u32, args: [u64; 4]| KdEvent {
        offset: 0,
        timestamp: ts,
        args,
        tid,
        debugid,
        cpu,
    };
    fn push(out: &mut KdTrace, e: KdEvent) {
        out.events.push(e);
    }
    // Each idle thread says so; each thread names itself once, at the start.
    for c in 0..cpus {
        push(
            &mut out,
            ev(start, kd_tid(0, c), codes::MACH_IDLE | 1, c, [0; 4]),
        );
    }
    for t in threads
        .iter()
        .filter(|t| t.tid.0 != 0 && !created.contains(&t.tid.0))
    {
        let name = string_args(t.comm.as_bytes());
        push(
            &mut out,
            ev(
                start,
                kd_tid(t.tid.0, 0),
                codes::TRACE_STRING_THREADNAME | 3,
                0,
                name,
            ),
        );
    }
    let mut in_irq: HashMap<u32, u32> = HashMap::new();
    // Timer calls this translation put inside an interrupt of their own, by CPU.
    let mut timer_wrapped: HashMap<u32, bool> = HashMap::new();
    // A futex call's operation, kept from its entry for its exit.
    let mut futex_op: HashMap<i32, bool> = HashMap::new();
    for e in events {
        let (ts, cpu) = (e.ts.0, e.cpu.0);
        let me = kd_tid(e.tid.0, cpu);
        let irq_ctx = matches!(e.ctx, Context::HardIrq | Context::SoftIrq | Context::Nmi);
        match &e.kind {
            EventKind::Switch {
                prev,
                prev_state,
                next,
            } => {
                let prev = kd_tid(prev.0, cpu);
                if prev_state.is_blocking() && e.tid.0 != 0 {
                    let interruptible = u64::from(prev_state.letter() != 'D');
                    push(
                        &mut out,
                        ev(
                            ts,
                            prev,
                            codes::MACH_WAIT,
                            cpu,
                            [0xe0e0, interruptible, 0, 0],
                        ),
                    );
                }
                push(
                    &mut out,
                    ev(
                        ts,
                        prev,
                        codes::MACH_SCHED,
                        cpu,
                        [0, kd_tid(next.0, cpu), 31, 31],
                    ),
                );
            }
            // A wake-up in hard-IRQ context outside any handler Linux traced is from the
            // local timer or an IPI (no handler tracepoint): xnu's timer interrupt.
            EventKind::Waking { target } | EventKind::WakeupNew { target } => {
                let wrap = irq_ctx && in_irq.get(&cpu).copied().unwrap_or(0) == 0;
                if wrap {
                    push(&mut out, timer_interrupt(ts, me, cpu));
                }
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::MACH_MKRUNNABLE,
                        cpu,
                        [kd_tid(target.0, cpu), 31, 0, 0],
                    ),
                );
                if wrap {
                    push(&mut out, ev(ts, me, codes::INTERRUPT | 2, cpu, [0; 4]));
                }
            }
            EventKind::IrqEntry { irq } => {
                *in_irq.entry(cpu).or_default() += 1;
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::INTERRUPT | 1,
                        cpu,
                        [*irq as u64, 0, 0, codes::INTR_TYPE_OTHER],
                    ),
                );
            }
            EventKind::SoftirqEntry { vec } => {
                *in_irq.entry(cpu).or_default() += 1;
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::INTERRUPT | 1,
                        cpu,
                        [1000 + *vec as u64, 0, 0, codes::INTR_TYPE_OTHER],
                    ),
                );
            }
            EventKind::IrqExit { irq } => {
                let d = in_irq.entry(cpu).or_default();
                *d = d.saturating_sub(1);
                push(
                    &mut out,
                    ev(ts, me, codes::INTERRUPT | 2, cpu, [*irq as u64, 0, 0, 0]),
                );
            }
            EventKind::SoftirqExit { vec } => {
                let d = in_irq.entry(cpu).or_default();
                *d = d.saturating_sub(1);
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::INTERRUPT | 2,
                        cpu,
                        [1000 + *vec as u64, 0, 0, codes::INTR_TYPE_OTHER],
                    ),
                );
            }
            EventKind::SysEnter { nr, args } => {
                let wake = syscalls::name(*nr) == "futex" && matches!(args[1] & 0x7f, 1 | 10);
                futex_op.insert(e.tid.0, wake);
                let (id, a) = syscall(*nr, Some(args), wake);
                push(&mut out, ev(ts, me, id | 1, cpu, a));
            }
            EventKind::SysExit { nr, ret } => {
                let wake = futex_op.remove(&e.tid.0).unwrap_or(false);
                let (id, _) = syscall(*nr, None, wake);
                let args = if *ret < 0 {
                    let errno = match -*ret {
                        110 => 60,
                        11 => 35,
                        n => n as u64,
                    };
                    [errno, 0, 0, 0]
                } else {
                    [0, *ret as u64, 0, 0]
                };
                push(&mut out, ev(ts, me, id | 2, cpu, args));
            }
            EventKind::Fork {
                child, child_pid, ..
            } => {
                let kid = kd_tid(child.0, cpu);
                // A kernel thread belongs to kernel_task (pid 0), as in the thread map.
                let kd_pid = if info.get(&child.0).is_some_and(|t| t.kernel) {
                    0
                } else {
                    child_pid.0 as u64
                };
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TRACE_DATA_NEWTHREAD,
                        cpu,
                        [kid, kd_pid, 0, 0],
                    ),
                );
                // The new thread's name, as its first record (a thread's own name is in
                // the Linux table only as its last one: the creator's until it renames).
                let name = info
                    .get(&child.0)
                    .map_or_else(String::new, |t| t.comm.clone());
                let parent_name = info.get(&e.tid.0).map(|t| t.comm.as_str()).unwrap_or("");
                let execs = events
                    .iter()
                    .any(|x| x.tid == *child && x.kind == EventKind::Exec);
                let first = if execs { parent_name } else { name.as_str() };
                push(
                    &mut out,
                    ev(
                        ts,
                        kid,
                        codes::TRACE_STRING_THREADNAME | 3,
                        cpu,
                        string_args(first.as_bytes()),
                    ),
                );
            }
            EventKind::Exec => {
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TRACE_DATA_EXEC,
                        cpu,
                        [e.pid.0 as u64, 0, 0, 0],
                    ),
                );
                let name = info.get(&e.tid.0).map_or("", |t| t.comm.as_str());
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TRACE_STRING_EXEC | 3,
                        cpu,
                        string_args(name.as_bytes()),
                    ),
                );
            }
            EventKind::Exit => push(
                &mut out,
                ev(
                    ts,
                    me,
                    codes::TRACE_DATA_THREAD_TERMINATE,
                    cpu,
                    [me, 0, 0, 0],
                ),
            ),
            EventKind::HrtimerStart {
                timer,
                function,
                expires,
            } => push(
                &mut out,
                ev(
                    ts,
                    me,
                    codes::TMR_TIMER_CALL_ENTER,
                    cpu,
                    [*timer, *function, *expires, 0],
                ),
            ),
            // xnu runs timer calls from the timer interrupt: inside an `INTERRUPT` interval,
            // which Linux's trace does not show (the local timer is no irq handler).
            EventKind::HrtimerExpire { timer, function } => {
                let depth = in_irq.entry(cpu).or_default();
                let wrap = *depth == 0;
                *depth += 1;
                timer_wrapped.insert(cpu, wrap);
                if wrap {
                    push(&mut out, timer_interrupt(ts, me, cpu));
                }
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TMR_TIMER_CALL_INTR | 1,
                        cpu,
                        [*timer, *function, 0, 0],
                    ),
                );
            }
            EventKind::HrtimerExpireExit { timer } => {
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TMR_TIMER_CALL_INTR | 2,
                        cpu,
                        [*timer, 0, 0, 0],
                    ),
                );
                let d = in_irq.entry(cpu).or_default();
                *d = d.saturating_sub(1);
                if timer_wrapped.remove(&cpu).unwrap_or(false) {
                    push(&mut out, ev(ts, me, codes::INTERRUPT | 2, cpu, [0; 4]));
                }
            }
            // An application's marker, as `kdebug_trace_string` traces it.
            EventKind::Marker { text } => {
                let b = text.as_bytes();
                let word = |at: usize| {
                    let mut w = [0u8; 8];
                    let part = b.get(at..b.len().min(at + 8)).unwrap_or(&[]);
                    w[..part.len()].copy_from_slice(part);
                    u64::from_le_bytes(w)
                };
                let single = if b.len() <= 16 { 2 } else { 0 };
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TRACE_STRING_GLOBAL | 1 | single,
                        cpu,
                        [0x2100_0000, e.seq, word(0), word(8)],
                    ),
                );
                let mut at = 16;
                while at < b.len() {
                    let last = if at + 32 >= b.len() { 2 } else { 0 };
                    let part = &b[at..b.len().min(at + 32)];
                    push(
                        &mut out,
                        ev(
                            ts,
                            me,
                            codes::TRACE_STRING_GLOBAL | last,
                            cpu,
                            string_args(part),
                        ),
                    );
                    at += 32;
                }
            }
            // A lock whose owner the kernel named: the waiter queued on a turnstile, which
            // pushes on its owner (Linux names no lock: one turnstile per owner here).
            EventKind::LockOwner { owner, lock } => {
                let turnstile = if *lock != 0 {
                    *lock
                } else {
                    TURNSTILE_BASE + kd_tid(owner.0, 0)
                };
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TURNSTILE_THREAD_ADDED_TO_WAITQ,
                        cpu,
                        [turnstile, me, 31, 0],
                    ),
                );
                push(
                    &mut out,
                    ev(
                        ts,
                        me,
                        codes::TURNSTILE_ADDED_TO_THREAD_HEAP,
                        cpu,
                        [kd_tid(owner.0, 0), turnstile, 31, 0],
                    ),
                );
            }
            other => *out.left_out.entry(other.name()).or_default() += 1,
        }
    }
    out
}

impl KdTrace {
    /// The file bytes of `version` (V1: times in nanoseconds; V2 and V3: 24 MHz ticks).
    pub fn write(&self, version: KdVersion) -> Vec<u8> {
        if version == KdVersion::V1 {
            self.write_raw(version)
        } else {
            self.in_ticks().write_raw(version)
        }
    }

    /// The trace as a V3 file in the stream layout pykdebugparser reads (24 MHz ticks).
    pub fn write_stream(&self) -> Vec<u8> {
        let t = self.in_ticks();
        encode::stream_file(&t.header(), &t.threads, t.cpus.len(), &t.events)
    }

    /// The trace with its times (and timer deadlines) in 24 MHz ticks.
    fn in_ticks(&self) -> KdTrace {
        let mut ticks = self.clone();
        let tick = |ns: u64| (u128::from(ns) * 3 / 125) as u64;
        for e in &mut ticks.events {
            e.timestamp = tick(e.timestamp);
            // A timer call's deadline is a time too.
            if e.debugid == codes::TMR_TIMER_CALL_ENTER {
                e.args[2] = tick(e.args[2]);
            }
        }
        ticks
    }

    fn header(&self) -> encode::V3Header {
        encode::V3Header {
            timebase: (125, 3),
            start: self.events.first().map_or(0, |e| e.timestamp),
            walltime: (1_764_300_000, 0),
        }
    }

    /// The file bytes of `version` with the events' times as they are (already in the
    /// file's units: nanoseconds for V1, 24 MHz ticks for V2 and V3).
    pub fn write_raw(&self, version: KdVersion) -> Vec<u8> {
        encode::file(
            version,
            &self.header(),
            &self.threads,
            &self.cpus,
            &self.events,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{Cpu, Nanos, Pid, Tid};

    fn linux(ts: u64, ctx: Context, kind: EventKind) -> Event {
        Event {
            ts: Nanos(ts),
            seq: ts,
            cpu: Cpu(1),
            pid: Pid(40),
            tid: Tid(41),
            ctx,
            kind,
        }
    }

    /// A Linux wake-up in hard-IRQ context with no handler record (the local timer, an IPI)
    /// becomes xnu's timer interrupt, which names no handler; a device's handler stays one.
    #[test]
    fn interrupts_keep_whether_they_name_a_handler() {
        let hard = Context::HardIrq;
        let events = vec![
            linux(1_000, hard, EventKind::Waking { target: Tid(50) }),
            linux(2_000, hard, EventKind::IrqEntry { irq: 33 }),
            linux(2_100, hard, EventKind::Waking { target: Tid(51) }),
            linux(2_200, hard, EventKind::IrqExit { irq: 33 }),
        ];
        let kd = from_linux(&events, &[]);
        let types: Vec<u64> = kd
            .events
            .iter()
            .filter(|e| {
                e.eventid() == codes::INTERRUPT
                    && e.func() == argus_ingest::import::kdebug::FuncQual::Start
            })
            .map(|e| e.args[3])
            .collect();
        assert_eq!(types, [codes::INTR_TYPE_TIMER, codes::INTR_TYPE_OTHER]);
        let path =
            std::env::temp_dir().join(format!("argus-testkit-{}.ktrace", std::process::id()));
        std::fs::write(&path, kd.write(KdVersion::V3)).expect("write");
        let imported = argus_ingest::import::open(&path).expect("imports");
        std::fs::remove_file(&path).ok();
        let got: Vec<(Context, EventKind)> = imported
            .events()
            .map(|e| e.expect("an event"))
            .map(|e| (e.ctx, e.kind))
            .collect();
        assert_eq!(
            got,
            [
                (
                    hard,
                    EventKind::Waking {
                        target: Tid(50 + TID_OFFSET as i32)
                    }
                ),
                (hard, EventKind::IrqEntry { irq: 33 }),
                (
                    hard,
                    EventKind::Waking {
                        target: Tid(51 + TID_OFFSET as i32)
                    }
                ),
                (hard, EventKind::IrqExit { irq: 33 }),
            ]
        );
    }
}
