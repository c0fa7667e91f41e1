//! The syscall classes the rules test on the hot path (message operations, lock waits,
//! retry results, exits and waits for a child), their numbers looked up once. Each test goes
//! by the syscall's class ([`syscalls::class`]: a macOS call is tested as the Linux syscall
//! it stands for).

use argus_schema::syscalls;
use std::sync::OnceLock;

/// Syscall numbers the rules test on the hot path, looked up once.
pub(super) struct Nrs {
    pub(super) futex: i32,
    pub(super) flock: i32,
    pub(super) fcntl: i32,
    pub(super) close: i32,
    pub(super) exit: i32,
    pub(super) exit_group: i32,
    pub(super) wait4: i32,
    pub(super) waitid: i32,
    pub(super) reads: [i32; 5],
    pub(super) writes: [i32; 5],
}

pub(super) fn nrs() -> &'static Nrs {
    static NRS: OnceLock<Nrs> = OnceLock::new();
    NRS.get_or_init(|| {
        let n = |s: &str| syscalls::number(s).unwrap_or(-2);
        Nrs {
            futex: n("futex"),
            flock: n("flock"),
            fcntl: n("fcntl"),
            close: n("close"),
            exit: n("exit"),
            exit_group: n("exit_group"),
            wait4: n("wait4"),
            waitid: n("waitid"),
            reads: [
                n("read"),
                n("readv"),
                n("recvfrom"),
                n("recvmsg"),
                n("recvmmsg"),
            ],
            writes: [
                n("write"),
                n("writev"),
                n("sendto"),
                n("sendmsg"),
                n("sendmmsg"),
            ],
        }
    })
}

/// A data-transfer syscall on a descriptor given in `args[0]`, that could be a connection
/// (positional I/O, which only files support, is left out): `Some(true)` for a send,
/// `Some(false)` for a receive.
pub fn message_op(nr: i32) -> Option<bool> {
    let (n, nr) = (nrs(), syscalls::class(nr));
    if n.writes.contains(&nr) {
        Some(true)
    } else if n.reads.contains(&nr) {
        Some(false)
    } else {
        None
    }
}

/// Whether a task blocked in `nr` waits for a file lock (`flock`, `fcntl(F_SETLKW)`).
pub fn is_lock_wait(nr: i32) -> bool {
    let (n, nr) = (nrs(), syscalls::class(nr));
    nr >= 0 && (nr == n.flock || nr == n.fcntl)
}

/// A lock attempt that failed because another process holds the lock: `EAGAIN`
/// (`EWOULDBLOCK`) or `EACCES`.
pub fn is_lock_refused(ret: i64) -> bool {
    matches!(ret, -11 | -13)
}

/// Results of a wait that mean "interrupted, try again": `EINTR`, `EAGAIN`, and the
/// kernel-internal restart codes `raw_syscalls:sys_exit` shows before a restart.
pub fn is_retry_result(ret: i64) -> bool {
    matches!(ret, -4 | -11 | -512 | -513 | -514 | -516)
}

pub(super) fn is_exit_call(nr: i32) -> bool {
    let (n, nr) = (nrs(), syscalls::class(nr));
    nr == n.exit || nr == n.exit_group
}

pub(super) fn is_wait_child(nr: i32) -> bool {
    let (n, nr) = (nrs(), syscalls::class(nr));
    nr == n.wait4 || nr == n.waitid
}
