//! macOS system calls (BSD syscalls and Mach traps, as kdebug traces record them) in the
//! graph: each keeps its own number and name, and carries the Linux syscall whose class it
//! has, so the rules treat `psynch_cvwait` as a `futex` wait while a report still says
//! `psynch_cvwait`.
//!
//! A macOS call's syscall number in the schema ([`encode`]) sets bit 30, bit 29 for a Mach
//! trap, holds the BSD syscall or Mach trap number in bits 12–25 and the class — the number of
//! the Linux syscall it stands for — in bits 0–11 ([`NO_CLASS`] for a call the rules know
//! nothing of, which still counts as a wait when a thread blocks in it). The class can differ
//! between two calls of one function (`__semwait_signal` sleeps without a semaphore and waits
//! on one with it), so it is part of the number, not of the table.
//!
//! The tables name every call as xnu's kdebug does (`BSC_read`, `MSC_mach_msg_trap`:
//! `ingest`'s kdebug codes check them against the `trace.codes` files); reports drop the
//! prefix (`read`, `mach_msg_trap`), as `fs_usage` prints them.

/// How a syscall's arguments become the Linux syscall's it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Args {
    /// As they are.
    Same,
    /// A wait on a word or object: `[arg(n), FUTEX_WAIT]`.
    WaitOn(usize),
    /// A wake of a word or object: `[arg(n), FUTEX_WAKE]`.
    WakeOn(usize),
    /// `__semwait_signal(cond_sem, mutex_sem, timeout, …)`: a sleep with no semaphore
    /// (how libc's `nanosleep` and `usleep` wait), else a wait on the semaphore.
    SemwaitSignal,
    /// `mach_msg`'s options (arg2): `MACH_RCV_MSG` makes it a receive (after its send part,
    /// when it has one), else a send.
    MachMsg,
}

/// One syscall of the table: its kdebug name, number, the Linux syscall it maps to and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Syscall {
    /// The kdebug name (`BSC_read`, `MSC_mach_msg_trap`).
    pub name: &'static str,
    /// The BSD syscall or Mach trap number.
    pub number: u16,
    /// The Linux (x86-64) syscall whose class it has: a read is a read, `kevent` a
    /// readiness wait like `epoll_wait`, `psynch_cvwait` and `__ulock_wait` futex waits.
    pub linux: &'static str,
    /// How the arguments map.
    pub args: Args,
}

const fn sc(name: &'static str, number: u16, linux: &'static str, args: Args) -> Syscall {
    Syscall {
        name,
        number,
        linux,
        args,
    }
}

/// The BSD syscalls whose class the rules need (messages, waits, sleeps, signals, process
/// lifetime), with the Linux syscall each stands for. The `_nocancel` twins map as their
/// plain ones.
pub const BSD: &[Syscall] = &[
    sc("BSC_exit", 1, "exit_group", Args::Same),
    sc("BSC_fork", 2, "fork", Args::Same),
    sc("BSC_read", 3, "read", Args::Same),
    sc("BSC_write", 4, "write", Args::Same),
    sc("BSC_open", 5, "open", Args::Same),
    sc("BSC_sys_close", 6, "close", Args::Same),
    sc("BSC_wait4", 7, "wait4", Args::Same),
    sc("BSC_recvmsg", 27, "recvmsg", Args::Same),
    sc("BSC_sendmsg", 28, "sendmsg", Args::Same),
    sc("BSC_recvfrom", 29, "recvfrom", Args::Same),
    sc("BSC_accept", 30, "accept", Args::Same),
    sc("BSC_kill", 37, "kill", Args::Same),
    sc("BSC_pipe", 42, "pipe", Args::Same),
    sc("BSC_execve", 59, "execve", Args::Same),
    sc("BSC_vfork", 66, "vfork", Args::Same),
    sc("BSC_sys_fcntl", 92, "fcntl", Args::Same),
    sc("BSC_select", 93, "select", Args::Same),
    sc("BSC_fsync", 95, "fsync", Args::Same),
    sc("BSC_socket", 97, "socket", Args::Same),
    sc("BSC_connect", 98, "connect", Args::Same),
    sc("BSC_sigsuspend", 111, "rt_sigsuspend", Args::Same),
    sc("BSC_readv", 120, "readv", Args::Same),
    sc("BSC_writev", 121, "writev", Args::Same),
    sc("BSC_sys_flock", 131, "flock", Args::Same),
    sc("BSC_sendto", 133, "sendto", Args::Same),
    sc("BSC_shutdown", 134, "shutdown", Args::Same),
    sc("BSC_socketpair", 135, "socketpair", Args::Same),
    sc("BSC_pread", 153, "pread64", Args::Same),
    sc("BSC_pwrite", 154, "pwrite64", Args::Same),
    sc("BSC_waitid", 173, "waitid", Args::Same),
    sc("BSC_poll", 230, "poll", Args::Same),
    sc("BSC_posix_spawn", 244, "execve", Args::Same),
    sc("BSC_psynch_mutexwait", 301, "futex", Args::WaitOn(0)),
    sc("BSC_psynch_mutexdrop", 302, "futex", Args::WakeOn(0)),
    sc("BSC_psynch_cvbroad", 303, "futex", Args::WakeOn(0)),
    sc("BSC_psynch_cvsignal", 304, "futex", Args::WakeOn(0)),
    sc("BSC_psynch_cvwait", 305, "futex", Args::WaitOn(0)),
    sc("BSC_psynch_rw_rdlock", 306, "futex", Args::WaitOn(0)),
    sc("BSC_psynch_rw_wrlock", 307, "futex", Args::WaitOn(0)),
    sc("BSC_semwait_signal", 334, "nanosleep", Args::SemwaitSignal),
    sc("BSC_bsdthread_create", 360, "clone", Args::Same),
    sc("BSC_bsdthread_terminate", 361, "exit", Args::Same),
    sc("BSC_kevent", 363, "epoll_wait", Args::Same),
    sc("BSC_kevent64", 369, "epoll_wait", Args::Same),
    sc("BSC_kevent_qos", 374, "epoll_wait", Args::Same),
    sc("BSC_kevent_id", 375, "epoll_wait", Args::Same),
    sc("BSC_pselect", 394, "pselect6", Args::Same),
    sc("BSC_pselect_nocancel", 395, "pselect6", Args::Same),
    sc("BSC_read_nocancel", 396, "read", Args::Same),
    sc("BSC_write_nocancel", 397, "write", Args::Same),
    sc("BSC_wait4_nocancel", 400, "wait4", Args::Same),
    sc("BSC_recvmsg_nocancel", 401, "recvmsg", Args::Same),
    sc("BSC_sendmsg_nocancel", 402, "sendmsg", Args::Same),
    sc("BSC_recvfrom_nocancel", 403, "recvfrom", Args::Same),
    sc("BSC_accept_nocancel", 404, "accept", Args::Same),
    sc("BSC_select_nocancel", 407, "select", Args::Same),
    sc("BSC_fsync_nocancel", 408, "fsync", Args::Same),
    sc("BSC_connect_nocancel", 409, "connect", Args::Same),
    sc("BSC_sigsuspend_nocancel", 410, "rt_sigsuspend", Args::Same),
    sc("BSC_readv_nocancel", 411, "readv", Args::Same),
    sc("BSC_writev_nocancel", 412, "writev", Args::Same),
    sc("BSC_sendto_nocancel", 413, "sendto", Args::Same),
    sc("BSC_pread_nocancel", 414, "pread64", Args::Same),
    sc("BSC_pwrite_nocancel", 415, "pwrite64", Args::Same),
    sc("BSC_poll_nocancel", 417, "poll", Args::Same),
    sc(
        "BSC_semwait_signal_nocancel",
        423,
        "nanosleep",
        Args::SemwaitSignal,
    ),
    sc("BSC_ulock_wait", 515, "futex", Args::WaitOn(1)),
    sc("BSC_ulock_wake", 516, "futex", Args::WakeOn(1)),
    sc("BSC_ulock_wait2", 544, "futex", Args::WaitOn(1)),
];

/// The Mach traps whose class the rules need.
pub const MACH: &[Syscall] = &[
    sc("MSC_mach_msg_trap", 31, "recvmsg", Args::MachMsg),
    sc("MSC_mach_msg_overwrite_trap", 32, "recvmsg", Args::MachMsg),
    sc("MSC_semaphore_signal_trap", 33, "futex", Args::WakeOn(0)),
    sc("MSC_semaphore_wait_trap", 36, "futex", Args::WaitOn(0)),
    sc(
        "MSC_semaphore_wait_signal_trap",
        37,
        "futex",
        Args::WaitOn(0),
    ),
    sc("MSC_semaphore_timedwait_trap", 38, "futex", Args::WaitOn(0)),
    sc("MSC_mach_msg2_trap", 47, "recvmsg", Args::MachMsg),
    sc("MSC_swtch_pri", 59, "sched_yield", Args::Same),
    sc("MSC_swtch", 60, "sched_yield", Args::Same),
    sc("MSC_thread_switch", 61, "sched_yield", Args::Same),
    sc("MSC_mach_wait_until", 90, "clock_nanosleep", Args::Same),
];

/// The class bits of a macOS call without one.
pub const NO_CLASS: i32 = 0xfff;
const MACOS: i32 = 1 << 30;
const MACH_BIT: i32 = 1 << 29;
const CLASS_BITS: i32 = 0xfff;

impl Syscall {
    /// Whether it is a Mach trap (else a BSD syscall).
    pub fn is_mach(&self) -> bool {
        self.name.starts_with("MSC_")
    }

    /// Its name in reports: the kdebug name without its `BSC_`/`MSC_` prefix.
    pub fn short_name(&self) -> &'static str {
        self.name.get(4..).unwrap_or(self.name)
    }
}

/// The schema's number of the BSD syscall (`mach` false) or Mach trap `number`, in the class
/// of Linux syscall `class` (`None`: no class; a Linux number outside the table counts as
/// none).
pub fn encode(mach: bool, number: u16, class: Option<i32>) -> i32 {
    let class = class
        .filter(|c| (0..super::NAMES.len() as i32).contains(c))
        .unwrap_or(NO_CLASS);
    MACOS | if mach { MACH_BIT } else { 0 } | (i32::from(number) & 0x3fff) << 12 | class
}

/// The call a schema number stands for, if it is a macOS one: whether a Mach trap, its
/// number, and its class bits (the Linux number, or [`NO_CLASS`]).
pub fn decode(nr: i32) -> Option<(bool, u16, i32)> {
    (nr >= 0 && nr & MACOS != 0).then_some((
        nr & MACH_BIT != 0,
        ((nr >> 12) & 0x3fff) as u16,
        nr & CLASS_BITS,
    ))
}

/// The table entry of a BSD syscall or Mach trap number.
pub fn lookup(mach: bool, number: u16) -> Option<&'static Syscall> {
    let table = if mach { MACH } else { BSD };
    table.iter().find(|s| s.number == number)
}

/// The report name of a macOS call's schema number: the table's name without prefix, else
/// `bsd_syscall_N` or `mach_trap_N`; `None` for a Linux number.
pub fn name(nr: i32) -> Option<String> {
    let (mach, number, _) = decode(nr)?;
    Some(match lookup(mach, number) {
        Some(s) => s.short_name().to_string(),
        None if mach => format!("mach_trap_{number}"),
        None => format!("bsd_syscall_{number}"),
    })
}

/// The schema number of a macOS call by its report name (`psynch_cvwait`, `mach_msg_trap`,
/// `bsd_syscall_N`), in its table class.
pub fn number(name: &str) -> Option<i32> {
    let class = |s: &Syscall| super::number(s.linux);
    if let Some(s) = BSD.iter().chain(MACH).find(|s| s.short_name() == name) {
        return Some(encode(s.is_mach(), s.number, class(s)));
    }
    let numbered = |prefix: &str| name.strip_prefix(prefix)?.parse::<u16>().ok();
    if let Some(n) = numbered("bsd_syscall_").filter(|n| *n <= 0x3fff) {
        return Some(encode(false, n, lookup(false, n).and_then(class)));
    }
    numbered("mach_trap_")
        .filter(|n| *n <= 0x3fff)
        .map(|n| encode(true, n, lookup(true, n).and_then(class)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_the_call_and_its_class() {
        let futex = super::super::number("futex").expect("futex");
        let cvwait = number("psynch_cvwait").expect("in the table");
        assert_eq!(decode(cvwait), Some((false, 305, futex)));
        assert_eq!(super::super::class(cvwait), futex);
        assert_eq!(super::super::name(cvwait), "psynch_cvwait");
        assert_eq!(
            super::super::number("psynch_cvwait"),
            Some(cvwait),
            "the schema's lookup knows macOS names"
        );
        let wait_until = number("mach_wait_until").expect("a Mach trap");
        assert_eq!(decode(wait_until).map(|d| d.0), Some(true));
        assert!(super::super::is_sleep(wait_until));
        // A rule naming a call or its class names every instance of it.
        let semwait_on_sem = encode(false, 334, Some(futex));
        assert!(super::super::names(
            number("semwait_signal").expect("in the table"),
            semwait_on_sem
        ));
        assert!(super::super::names(futex, cvwait));
        assert!(!super::super::names(cvwait, futex));
        assert!(!super::super::names(
            super::super::number("read").expect("read"),
            cvwait
        ));
        // A call outside the tables: named by its number, in no class.
        let other = encode(false, 9, None);
        assert_eq!(super::super::name(other), "bsd_syscall_9");
        assert_eq!(number("bsd_syscall_9"), Some(other));
        assert_eq!(super::super::class(other), -1);
        assert!(!super::super::is_poll(other) && !super::super::is_sleep(other));
        // Linux numbers are not macOS ones, and every macOS number is positive.
        assert_eq!(decode(futex), None);
        assert!(encode(true, 0x3fff, Some(450)) > 0);
        // Every entry's class is a Linux syscall, every name unique.
        let mut seen = std::collections::HashSet::new();
        for s in BSD.iter().chain(MACH) {
            assert!(super::super::number(s.linux).is_some(), "{}", s.name);
            assert!(seen.insert(s.short_name()), "{}", s.name);
        }
    }
}
