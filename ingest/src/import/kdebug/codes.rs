//! The kdebug codes the mapping reads, by the names xnu gives them.
//!
//! Every event id here is named exactly as in xnu's `bsd/kern/trace_codes`
//! (`../shared/realtraces/kdebug/xnu-*_trace_codes`), and every BSD syscall as in the
//! `trace.codes` that PyPI's `pykdebugparser` ships (xnu's file has no `BSC_*` lines: its
//! build generates them from `syscalls.master`). The tests check both tables against those
//! files, name by name and value by value, so nothing here is retyped unchecked.

/// `MACH_SCHED`: a context switch (arg2 the thread switched to; the emitter the one leaving).
pub const MACH_SCHED: u32 = 0x0140_0000;
/// `MACH_STKHANDOFF`: a context switch by stack handoff (the same arguments).
pub const MACH_STKHANDOFF: u32 = 0x0140_0008;
/// `MACH_MKRUNNABLE`: the emitter makes arg1 runnable (a wake-up).
pub const MACH_MKRUNNABLE: u32 = 0x0140_0018;
/// `MACH_IDLE`: the emitter is a CPU's idle thread.
pub const MACH_IDLE: u32 = 0x0140_0024;
/// `MACH_WAIT`: the emitter asserts a wait (arg1 the event, arg2 interruptible).
pub const MACH_WAIT: u32 = 0x0140_0040;
/// `INTERRUPT`: an interrupt handler (START/END; arg1 the interrupt number — 0 on arm64 —,
/// arg2 the interrupted pc, arg3 whether it was in user mode, arg4 its type, one of
/// `INTR_TYPE_*`).
pub const INTERRUPT: u32 = 0x0105_0000;
/// `INTERRUPT`'s arg4 `DBG_INTR_TYPE_UNKNOWN` (xnu `bsd/sys/kdebug.h`; written by
/// `osfmk/i386/trap.c` `interrupt()` and `osfmk/arm64/sleh.c`
/// `sleh_interrupt_handler_prologue`).
pub const INTR_TYPE_UNKNOWN: u64 = 0;
/// `DBG_INTR_TYPE_IPI`: an inter-processor interrupt.
pub const INTR_TYPE_IPI: u64 = 1;
/// `DBG_INTR_TYPE_TIMER`: the CPU's timer (x86 local APIC timer, arm64 decrementer FIQ).
pub const INTR_TYPE_TIMER: u64 = 2;
/// `DBG_INTR_TYPE_OTHER`: any other interrupt (a device's).
pub const INTR_TYPE_OTHER: u64 = 3;
/// `MACH_IPC_msg_send`: a Mach message is queued (arg1 the kmsg).
pub const MACH_IPC_MSG_SEND: u32 = 0x0120_000c;
/// `MACH_IPC_msg_recv`: a Mach message is received (arg1 the kmsg).
pub const MACH_IPC_MSG_RECV: u32 = 0x0120_0010;
/// `TMR_TimerCallIntr`: a timer call runs (START/END; arg1 the call, arg2 its function).
pub const TMR_TIMER_CALL_INTR: u32 = 0x0109_0008;
/// `TMR_TimerCallEnter`: a timer call is armed (arg1 the call, arg2 its function, arg3
/// the deadline).
pub const TMR_TIMER_CALL_ENTER: u32 = 0x0109_001c;
/// `TRACE_DATA_NEWTHREAD`: the emitter created thread arg1 in process arg2.
pub const TRACE_DATA_NEWTHREAD: u32 = 0x0700_0004;
/// `TRACE_DATA_EXEC`: the emitter's process (arg1) executed a program.
pub const TRACE_DATA_EXEC: u32 = 0x0700_0008;
/// `TRACE_DATA_THREAD_TERMINATE`: thread arg1 ended.
pub const TRACE_DATA_THREAD_TERMINATE: u32 = 0x0700_000c;
/// `TRACE_STRING_GLOBAL`: a string an application traced (`kdebug_trace_string`): the
/// first event has the caller's debug id and the string's id then 16 bytes, each following
/// one 32 bytes, the last is `DBG_FUNC_END`.
pub const TRACE_STRING_GLOBAL: u32 = 0x0701_0000;
/// `TRACE_STRING_EXEC`: the program's name, packed in the arguments.
pub const TRACE_STRING_EXEC: u32 = 0x0701_0008;
/// `TRACE_STRING_THREADNAME`: the emitter's name, packed in the arguments.
pub const TRACE_STRING_THREADNAME: u32 = 0x0701_0010;
/// `TRACE_LOST_EVENTS`: the buffer wrapped; events before this one were lost.
pub const TRACE_LOST_EVENTS: u32 = 0x0702_0008;

/// `TURNSTILE_thread_added_to_turnstile_waitq`: thread arg2 (the emitter, blocking) is
/// queued on turnstile arg1 (`osfmk/kern/waitq.c`, `waitq_thread_insert`).
pub const TURNSTILE_THREAD_ADDED_TO_WAITQ: u32 = 0x3510_0004;
/// `TURNSTILE_turnstile_added_to_turnstile_heap`: turnstile arg2 pushes on turnstile arg1,
/// its inheritor (`osfmk/kern/turnstile.c`, `turnstile_add_turnstile_promotion`).
pub const TURNSTILE_ADDED_TO_TURNSTILE_HEAP: u32 = 0x3510_0010;
/// `TURNSTILE_turnstile_removed_from_turnstile_heap`: turnstile arg2 no longer pushes on
/// turnstile arg1.
pub const TURNSTILE_REMOVED_FROM_TURNSTILE_HEAP: u32 = 0x3510_0014;
/// `TURNSTILE_turnstile_added_to_thread_heap`: turnstile arg2 pushes on thread arg1, its
/// inheritor: the owner of what its waiters wait for (`thread_add_turnstile_promotion`).
pub const TURNSTILE_ADDED_TO_THREAD_HEAP: u32 = 0x3510_001c;
/// `TURNSTILE_turnstile_removed_from_thread_heap`: turnstile arg2 no longer pushes on thread
/// arg1 (the lock changed hands or was released).
pub const TURNSTILE_REMOVED_FROM_THREAD_HEAP: u32 = 0x3510_0020;

/// libdispatch's class (`DBG_DISPATCH`, 46), and its `DISPATCH_TRACE_SUBCLASS_QOS_TRACE` (5)
/// codes: neither xnu's `trace_codes` nor pykdebugparser's `trace.codes` has them. They are
/// libdispatch's own (`src/internal.h`, `KDBG_CODE(DBG_DISPATCH, DISPATCH_TRACE_SUBCLASS_##sub,
/// code)`; emitted in `src/introspection.c` and `src/trace.h`, apple/swift-corelibs-libdispatch,
/// Apache-2.0) and only its introspection build emits them (the one Instruments loads).
pub const DBG_DISPATCH: u32 = 46;
/// `DISPATCH_TRACE_SUBCLASS_QOS_TRACE`.
pub const DISPATCH_SUBCLASS_QOS_TRACE: u32 = 5;

/// A libdispatch event id: `KDBG_CODE(DBG_DISPATCH, subclass, code)`.
pub const fn dispatch_code(subclass: u32, code: u32) -> u32 {
    (DBG_DISPATCH << 24) | (subclass << 16) | (code << 2)
}

/// `DISPATCH_QOS_TRACE_continuation_push_eb`: the emitter enqueues a block with private data
/// (arg1 the continuation, arg2 the block, arg3 the queue's serial number << 32 | flags).
pub const DISPATCH_PUSH_EB: u32 = dispatch_code(DISPATCH_SUBCLASS_QOS_TRACE, 5);
/// `DISPATCH_QOS_TRACE_continuation_push_ab`: the emitter enqueues a block (arg2 its invoke
/// function).
pub const DISPATCH_PUSH_AB: u32 = dispatch_code(DISPATCH_SUBCLASS_QOS_TRACE, 6);
/// `DISPATCH_QOS_TRACE_continuation_push_f`: the emitter enqueues a function (arg2 it).
pub const DISPATCH_PUSH_F: u32 = dispatch_code(DISPATCH_SUBCLASS_QOS_TRACE, 7);
/// `DISPATCH_QOS_TRACE_continuation_pop`: the emitter dequeues continuation arg1 to run it
/// (arg3 the queue's serial number).
pub const DISPATCH_POP: u32 = dispatch_code(DISPATCH_SUBCLASS_QOS_TRACE, 9);
/// `DISPATCH_QOS_TRACE_queue_item_complete`: the emitter finished continuation arg1.
pub const DISPATCH_COMPLETE: u32 = dispatch_code(DISPATCH_SUBCLASS_QOS_TRACE, 11);

/// The event ids above by their xnu names.
pub const NAMED: &[(&str, u32)] = &[
    ("MACH_SCHED", MACH_SCHED),
    ("MACH_STKHANDOFF", MACH_STKHANDOFF),
    ("MACH_MKRUNNABLE", MACH_MKRUNNABLE),
    ("MACH_IDLE", MACH_IDLE),
    ("MACH_WAIT", MACH_WAIT),
    ("INTERRUPT", INTERRUPT),
    ("MACH_IPC_msg_send", MACH_IPC_MSG_SEND),
    ("MACH_IPC_msg_recv", MACH_IPC_MSG_RECV),
    ("TMR_TimerCallIntr", TMR_TIMER_CALL_INTR),
    ("TMR_TimerCallEnter", TMR_TIMER_CALL_ENTER),
    ("TRACE_DATA_NEWTHREAD", TRACE_DATA_NEWTHREAD),
    ("TRACE_DATA_EXEC", TRACE_DATA_EXEC),
    ("TRACE_DATA_THREAD_TERMINATE", TRACE_DATA_THREAD_TERMINATE),
    ("TRACE_STRING_GLOBAL", TRACE_STRING_GLOBAL),
    ("TRACE_STRING_EXEC", TRACE_STRING_EXEC),
    ("TRACE_STRING_THREADNAME", TRACE_STRING_THREADNAME),
    ("TRACE_LOST_EVENTS", TRACE_LOST_EVENTS),
    (
        "TURNSTILE_thread_added_to_turnstile_waitq",
        TURNSTILE_THREAD_ADDED_TO_WAITQ,
    ),
    (
        "TURNSTILE_turnstile_added_to_turnstile_heap",
        TURNSTILE_ADDED_TO_TURNSTILE_HEAP,
    ),
    (
        "TURNSTILE_turnstile_removed_from_turnstile_heap",
        TURNSTILE_REMOVED_FROM_TURNSTILE_HEAP,
    ),
    (
        "TURNSTILE_turnstile_added_to_thread_heap",
        TURNSTILE_ADDED_TO_THREAD_HEAP,
    ),
    (
        "TURNSTILE_turnstile_removed_from_thread_heap",
        TURNSTILE_REMOVED_FROM_THREAD_HEAP,
    ),
];

/// BSD syscalls: class `DBG_BSD` (4), subclass `DBG_BSD_EXCP_SC` (0x0c), the code is the
/// syscall number.
pub const BSD_SYSCALL: u32 = 0x040c_0000;
/// Mach traps: class `DBG_MACH` (1), subclass `DBG_MACH_EXCP_SC` (0x0c), the code is the
/// trap number.
pub const MACH_TRAP: u32 = 0x010c_0000;

// The syscall tables live in the schema, which names a macOS call in reports
// (`argus_schema::syscalls::macos`); the tests below check them against the codes files.
pub use argus_schema::syscalls::macos::{Args, Syscall, BSD, MACH};

/// `MACH_SEND_MSG` / `MACH64_SEND_MSG` in `mach_msg`'s options.
pub const MACH_SEND_MSG: u64 = 0x1;
/// `MACH_RCV_MSG` / `MACH64_RCV_MSG` in `mach_msg`'s options.
pub const MACH_RCV_MSG: u64 = 0x2;

/// The syscall table entry of a BSD syscall or Mach trap event id, if mapped.
pub fn syscall(eventid: u32) -> Option<&'static Syscall> {
    let number = ((eventid >> 2) & 0x3fff) as u16;
    let table = match eventid & 0xffff_0000 {
        BSD_SYSCALL => BSD,
        MACH_TRAP => MACH,
        _ => return None,
    };
    table.iter().find(|s| s.number == number)
}

/// The event id of a syscall of the table (`BSC_…` or `MSC_…`).
pub fn eventid(s: &Syscall) -> u32 {
    let base = if s.name.starts_with("MSC_") {
        MACH_TRAP
    } else {
        BSD_SYSCALL
    };
    base | u32::from(s.number) << 2
}

/// macOS errno values whose Linux numbers differ and that the rules read (a timed-out or
/// would-block wait), mapped; others pass as they are.
pub fn linux_errno(mac: u64) -> i64 {
    match mac {
        35 => 11,  // EAGAIN / EWOULDBLOCK
        60 => 110, // ETIMEDOUT
        e => i64::try_from(e).unwrap_or(i64::MAX),
    }
}

/// Mach return codes that mean a timed-out wait (`KERN_OPERATION_TIMED_OUT`,
/// `MACH_RCV_TIMED_OUT`, `MACH_SEND_TIMED_OUT`).
pub fn mach_timed_out(kr: u64) -> bool {
    matches!(kr, 49 | 0x1000_4003 | 0x1000_0004)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// libdispatch's codes are in no codes file: their values, as `KDBG_CODE(46, 5, n)`
    /// gives them (class in the top byte, subclass next, the code shifted past the two
    /// function-qualifier bits), and outside every class the files name (xnu's and
    /// pykdebugparser's list `0x2e02…` for subclass 2 only).
    #[test]
    fn libdispatch_codes_are_its_kdbg_codes() {
        assert_eq!(
            [
                DISPATCH_PUSH_EB,
                DISPATCH_PUSH_AB,
                DISPATCH_PUSH_F,
                DISPATCH_POP,
                DISPATCH_COMPLETE
            ],
            [
                0x2e05_0014,
                0x2e05_0018,
                0x2e05_001c,
                0x2e05_0024,
                0x2e05_002c
            ]
        );
        assert!(NAMED.iter().all(|(_, id)| id >> 24 != DBG_DISPATCH));
    }

    /// `0xID<TAB>NAME` lines, by name.
    fn codes(text: &str) -> HashMap<String, u32> {
        text.lines()
            .filter_map(|l| {
                let (id, name) = l.split_once('\t')?;
                let id = u32::from_str_radix(id.trim().trim_start_matches("0x"), 16).ok()?;
                Some((name.trim().to_string(), id))
            })
            .collect()
    }

    /// Every named event id is xnu's, checked against its `trace_codes` file.
    #[test]
    fn event_ids_are_xnus() {
        let Some(dir) = argus_testkit::realtraces("event_ids_are_xnus") else {
            return;
        };
        let file = std::fs::read_dir(dir.join("kdebug"))
            .expect("realtraces/kdebug")
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with("_trace_codes"))
            .expect("an xnu trace_codes file")
            .path();
        let xnu = codes(&std::fs::read_to_string(&file).expect("trace codes"));
        for (name, id) in NAMED {
            assert_eq!(xnu.get(*name), Some(id), "{name}");
        }
        for s in MACH {
            assert_eq!(xnu.get(s.name), Some(&eventid(s)), "{}", s.name);
            assert_eq!(syscall(eventid(s)), Some(s));
        }
        // Every Linux name is a syscall the schema knows.
        for s in BSD.iter().chain(MACH) {
            assert!(
                argus_schema::syscalls::number(s.linux).is_some(),
                "{}: {}",
                s.name,
                s.linux
            );
        }
    }

    /// Numbers unique per table; function qualifiers ignored in the lookup.
    #[test]
    fn lookups() {
        for t in [BSD, MACH] {
            let mut seen = std::collections::HashSet::new();
            for s in t {
                assert!(seen.insert(s.number), "{}", s.name);
            }
        }
        let read = syscall(0x040c_000c | 1).expect("BSC_read START");
        assert_eq!((read.name, read.linux), ("BSC_read", "read"));
        assert_eq!(syscall(0x040c_0000 | 9999 << 2), None);
        assert_eq!(syscall(MACH_SCHED), None);
        assert_eq!(linux_errno(60), 110);
        assert_eq!(linux_errno(4), 4);
    }
}
