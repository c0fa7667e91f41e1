//! Syscall names and semantics for x86-64 (the numbering `raw_syscalls` records carry on
//! x86-64 kernels), generated from the kernel's `asm/unistd_64.h`.
//!
//! The classification here is what the graph rules need: which syscalls block, which move
//! data between processes (intent to wake), and which waits end in a timeout.
//!
//! A macOS call (from a kdebug trace) has a number of its own that carries the Linux
//! syscall of its class ([`macos`]): every test here goes by the class ([`class`]), names
//! by the call.

pub mod macos;

/// Syscall names indexed by number; empty strings are unassigned numbers.
pub const NAMES: [&str; 451] = [
    "read",
    "write",
    "open",
    "close",
    "stat",
    "fstat",
    "lstat",
    "poll",
    "lseek",
    "mmap",
    "mprotect",
    "munmap",
    "brk",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "ioctl",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "access",
    "pipe",
    "select",
    "sched_yield",
    "mremap",
    "msync",
    "mincore",
    "madvise",
    "shmget",
    "shmat",
    "shmctl",
    "dup",
    "dup2",
    "pause",
    "nanosleep",
    "getitimer",
    "alarm",
    "setitimer",
    "getpid",
    "sendfile",
    "socket",
    "connect",
    "accept",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "shutdown",
    "bind",
    "listen",
    "getsockname",
    "getpeername",
    "socketpair",
    "setsockopt",
    "getsockopt",
    "clone",
    "fork",
    "vfork",
    "execve",
    "exit",
    "wait4",
    "kill",
    "uname",
    "semget",
    "semop",
    "semctl",
    "shmdt",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "fcntl",
    "flock",
    "fsync",
    "fdatasync",
    "truncate",
    "ftruncate",
    "getdents",
    "getcwd",
    "chdir",
    "fchdir",
    "rename",
    "mkdir",
    "rmdir",
    "creat",
    "link",
    "unlink",
    "symlink",
    "readlink",
    "chmod",
    "fchmod",
    "chown",
    "fchown",
    "lchown",
    "umask",
    "gettimeofday",
    "getrlimit",
    "getrusage",
    "sysinfo",
    "times",
    "ptrace",
    "getuid",
    "syslog",
    "getgid",
    "setuid",
    "setgid",
    "geteuid",
    "getegid",
    "setpgid",
    "getppid",
    "getpgrp",
    "setsid",
    "setreuid",
    "setregid",
    "getgroups",
    "setgroups",
    "setresuid",
    "getresuid",
    "setresgid",
    "getresgid",
    "getpgid",
    "setfsuid",
    "setfsgid",
    "getsid",
    "capget",
    "capset",
    "rt_sigpending",
    "rt_sigtimedwait",
    "rt_sigqueueinfo",
    "rt_sigsuspend",
    "sigaltstack",
    "utime",
    "mknod",
    "uselib",
    "personality",
    "ustat",
    "statfs",
    "fstatfs",
    "sysfs",
    "getpriority",
    "setpriority",
    "sched_setparam",
    "sched_getparam",
    "sched_setscheduler",
    "sched_getscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "mlock",
    "munlock",
    "mlockall",
    "munlockall",
    "vhangup",
    "modify_ldt",
    "pivot_root",
    "_sysctl",
    "prctl",
    "arch_prctl",
    "adjtimex",
    "setrlimit",
    "chroot",
    "sync",
    "acct",
    "settimeofday",
    "mount",
    "umount2",
    "swapon",
    "swapoff",
    "reboot",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "create_module",
    "init_module",
    "delete_module",
    "get_kernel_syms",
    "query_module",
    "quotactl",
    "nfsservctl",
    "getpmsg",
    "putpmsg",
    "afs_syscall",
    "tuxcall",
    "security",
    "gettid",
    "readahead",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "tkill",
    "time",
    "futex",
    "sched_setaffinity",
    "sched_getaffinity",
    "set_thread_area",
    "io_setup",
    "io_destroy",
    "io_getevents",
    "io_submit",
    "io_cancel",
    "get_thread_area",
    "lookup_dcookie",
    "epoll_create",
    "epoll_ctl_old",
    "epoll_wait_old",
    "remap_file_pages",
    "getdents64",
    "set_tid_address",
    "restart_syscall",
    "semtimedop",
    "fadvise64",
    "timer_create",
    "timer_settime",
    "timer_gettime",
    "timer_getoverrun",
    "timer_delete",
    "clock_settime",
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "exit_group",
    "epoll_wait",
    "epoll_ctl",
    "tgkill",
    "utimes",
    "vserver",
    "mbind",
    "set_mempolicy",
    "get_mempolicy",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    "kexec_load",
    "waitid",
    "add_key",
    "request_key",
    "keyctl",
    "ioprio_set",
    "ioprio_get",
    "inotify_init",
    "inotify_add_watch",
    "inotify_rm_watch",
    "migrate_pages",
    "openat",
    "mkdirat",
    "mknodat",
    "fchownat",
    "futimesat",
    "newfstatat",
    "unlinkat",
    "renameat",
    "linkat",
    "symlinkat",
    "readlinkat",
    "fchmodat",
    "faccessat",
    "pselect6",
    "ppoll",
    "unshare",
    "set_robust_list",
    "get_robust_list",
    "splice",
    "tee",
    "sync_file_range",
    "vmsplice",
    "move_pages",
    "utimensat",
    "epoll_pwait",
    "signalfd",
    "timerfd_create",
    "eventfd",
    "fallocate",
    "timerfd_settime",
    "timerfd_gettime",
    "accept4",
    "signalfd4",
    "eventfd2",
    "epoll_create1",
    "dup3",
    "pipe2",
    "inotify_init1",
    "preadv",
    "pwritev",
    "rt_tgsigqueueinfo",
    "perf_event_open",
    "recvmmsg",
    "fanotify_init",
    "fanotify_mark",
    "prlimit64",
    "name_to_handle_at",
    "open_by_handle_at",
    "clock_adjtime",
    "syncfs",
    "sendmmsg",
    "setns",
    "getcpu",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "finit_module",
    "sched_setattr",
    "sched_getattr",
    "renameat2",
    "seccomp",
    "getrandom",
    "memfd_create",
    "kexec_file_load",
    "bpf",
    "execveat",
    "userfaultfd",
    "membarrier",
    "mlock2",
    "copy_file_range",
    "preadv2",
    "pwritev2",
    "pkey_mprotect",
    "pkey_alloc",
    "pkey_free",
    "statx",
    "io_pgetevents",
    "rseq",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "pidfd_send_signal",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "pidfd_open",
    "clone3",
    "close_range",
    "openat2",
    "pidfd_getfd",
    "faccessat2",
    "process_madvise",
    "epoll_pwait2",
    "mount_setattr",
    "quotactl_fd",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "memfd_secret",
    "process_mrelease",
    "futex_waitv",
    "set_mempolicy_home_node",
];

/// The syscall's name (a macOS call's own), or `syscall_N` for an unknown number, `-` for
/// none.
pub fn name(nr: i32) -> String {
    if nr < 0 {
        return "-".to_string();
    }
    if let Some(n) = macos::name(nr) {
        return n;
    }
    match NAMES.get(nr as usize) {
        Some(n) if !n.is_empty() => (*n).to_string(),
        _ => format!("syscall_{nr}"),
    }
}

/// The number of a syscall by name: a Linux name, else a macOS call's ([`macos::number`]).
pub fn number(name: &str) -> Option<i32> {
    NAMES
        .iter()
        .position(|n| *n == name)
        .map(|p| p as i32)
        .or_else(|| macos::number(name))
}

/// The Linux syscall whose class `nr` has: `nr` itself for a Linux number, a macOS call's
/// class, -1 for a macOS call in none (or for none).
pub fn class(nr: i32) -> i32 {
    match macos::decode(nr) {
        Some((_, _, macos::NO_CLASS)) => -1,
        Some((_, _, linux)) => linux,
        None => nr,
    }
}

/// Whether syscall `nr` is one that `named` (a number a user gave by name) names: the same
/// syscall, the same macOS call whatever its class, or a macOS call in the class of the
/// Linux syscall named.
pub fn names(named: i32, nr: i32) -> bool {
    if named == nr || (named >= 0 && named == class(nr)) {
        return true;
    }
    matches!(
        (macos::decode(named), macos::decode(nr)),
        (Some((m1, n1, _)), Some((m2, n2, _))) if (m1, n1) == (m2, n2)
    )
}

fn is_one_of(nr: i32, names: &[&str]) -> bool {
    let nr = class(nr);
    nr >= 0 && NAMES.get(nr as usize).is_some_and(|n| names.contains(n))
}

/// Syscalls that only sleep for a time given by the caller.
pub fn is_sleep(nr: i32) -> bool {
    is_one_of(nr, &["nanosleep", "clock_nanosleep", "pause"])
}

/// Syscalls that wait for readiness with an optional timeout (return 0 on timeout).
pub fn is_poll(nr: i32) -> bool {
    is_one_of(
        nr,
        &[
            "poll",
            "ppoll",
            "select",
            "pselect6",
            "epoll_wait",
            "epoll_pwait",
            "epoll_pwait2",
        ],
    )
}

/// Syscalls that transfer data to another task: a wake-up from inside one shows intent.
pub fn is_send(nr: i32) -> bool {
    is_one_of(
        nr,
        &[
            "write",
            "writev",
            "pwrite64",
            "pwritev",
            "pwritev2",
            "sendto",
            "sendmsg",
            "sendmmsg",
            "splice",
            "vmsplice",
            "tee",
            "sendfile",
            "mq_timedsend",
            "msgsnd",
        ],
    )
}

/// Syscalls that ask another task for a connection: a `connect` wakes the listener's
/// `accept` (or its readiness wait on the listening socket).
pub fn is_connect(nr: i32) -> bool {
    is_one_of(nr, &["connect"])
}

/// Syscalls that receive data from another task.
pub fn is_receive(nr: i32) -> bool {
    is_one_of(
        nr,
        &[
            "read",
            "readv",
            "pread64",
            "preadv",
            "preadv2",
            "recvfrom",
            "recvmsg",
            "recvmmsg",
            "mq_timedreceive",
            "msgrcv",
            "accept",
            "accept4",
        ],
    )
}

/// Syscalls whose wake-ups are deliberate notifications (signals, process exit).
pub fn is_notify(nr: i32) -> bool {
    is_one_of(
        nr,
        &[
            "kill",
            "tkill",
            "tgkill",
            "rt_sigqueueinfo",
            "rt_tgsigqueueinfo",
            "exit",
            "exit_group",
            "pidfd_send_signal",
        ],
    )
}

/// Whether a wait in syscall `nr` that returned `ret` ended by itself (sleep elapsed,
/// timeout) rather than because another task acted.
pub fn is_timeout(nr: i32, ret: Option<i64>) -> bool {
    if is_sleep(nr) {
        return true;
    }
    match ret {
        Some(0) if is_poll(nr) => true,
        Some(-110) => true, // -ETIMEDOUT: futex, semtimedop, mq_timed*, ...
        Some(-11) if is_one_of(nr, &["semtimedop"]) => true,
        _ => false,
    }
}

/// How a waiting syscall names what it waits on (see [`wait_object`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjectArg {
    /// Nothing: sleeps, yields, syscalls that do not wait on an object.
    None,
    /// The first argument (a futex word's address, a descriptor, an epoll descriptor, a pid).
    First,
    /// A set given by its address and length (`poll`/`ppoll` array and count, `select`'s
    /// count and read set).
    Set,
}

fn object_arg(nr: i32) -> ObjectArg {
    static TABLE: std::sync::OnceLock<Vec<ObjectArg>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let first = [
            "futex",
            "epoll_wait",
            "epoll_pwait",
            "epoll_pwait2",
            "wait4",
            "waitid",
            "semtimedop",
            "mq_timedreceive",
            "msgrcv",
            "accept",
            "accept4",
            "connect",
            "flock",
            "fcntl",
        ];
        let set = ["poll", "ppoll", "select", "pselect6"];
        NAMES
            .iter()
            .enumerate()
            .map(|(nr, n)| {
                if first.contains(n) || is_receive(nr as i32) || is_send(nr as i32) {
                    ObjectArg::First
                } else if set.contains(n) {
                    ObjectArg::Set
                } else {
                    ObjectArg::None
                }
            })
            .collect()
    });
    usize::try_from(class(nr))
        .ok()
        .and_then(|i| table.get(i).copied())
        .unwrap_or(ObjectArg::None)
}

/// What a blocking syscall waits on, from its first two arguments: the futex word's address,
/// the descriptor of a read, receive, send or epoll wait, `wait4`'s pid, or a `poll`/`select`
/// set (its address mixed with its length: the trace has pointers, not the descriptors in
/// the set, so a loop that rebuilds its set at another address each time is not matched).
/// `None` for sleeps, yields and syscalls that wait on nothing nameable. Consecutive
/// timed-out waits of a thread with the same syscall and object are one logical wait.
pub fn wait_object(nr: i32, arg0: u64, arg1: u64) -> Option<u64> {
    match object_arg(nr) {
        ObjectArg::None => None,
        ObjectArg::First => Some(arg0),
        // Lengths are small, addresses aligned: rotate the length into the high bits.
        // No set at all (`poll(NULL, 0, t)`, `select(0, NULL, …, t)`): a sleep.
        ObjectArg::Set if arg0 == 0 && arg1 == 0 => None,
        ObjectArg::Set => Some(arg0 ^ arg1.rotate_right(16)),
    }
}

/// Whether `nr` is `sched_yield`.
pub fn is_yield(nr: i32) -> bool {
    is_one_of(nr, &["sched_yield"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_objects_name_what_is_waited_on() {
        let n = |s| number(s).expect("known syscall");
        assert_eq!(wait_object(n("futex"), 0x7f00_1000, 128), Some(0x7f00_1000));
        assert_eq!(wait_object(n("epoll_wait"), 5, 0x1234), Some(5));
        assert_eq!(wait_object(n("recvfrom"), 7, 0), Some(7));
        let a = wait_object(n("poll"), 0x7ffd_0000, 2);
        assert!(a.is_some());
        assert_ne!(
            a,
            wait_object(n("poll"), 0x7ffd_0000, 3),
            "the length matters"
        );
        assert_eq!(wait_object(n("nanosleep"), 1, 2), None);
        assert_eq!(
            wait_object(n("select"), 0, 0),
            None,
            "select with no set sleeps"
        );
        assert_eq!(wait_object(n("sched_yield"), 0, 0), None);
        assert_eq!(wait_object(-1, 0, 0), None);
        assert_eq!(wait_object(100_000, 0, 0), None);
    }

    #[test]
    fn names_and_classes() {
        assert_eq!(name(0), "read");
        assert_eq!(name(202), "futex");
        assert_eq!(name(-1), "-");
        assert_eq!(number("nanosleep"), Some(35));
        assert!(is_timeout(35, None));
        assert!(is_timeout(7, Some(0)));
        assert!(!is_timeout(7, Some(1)));
        assert!(is_timeout(202, Some(-110)));
        assert!(!is_timeout(202, Some(0)));
        assert!(is_send(1) && is_receive(0) && is_yield(24));
    }
}
