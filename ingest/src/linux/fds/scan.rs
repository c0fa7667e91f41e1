//! The page scan each reader thread runs on every page it reads ([`PageScan`]): picks the
//! records the fd tracker needs — exits of fd-creating syscalls, `close`, `close_range`,
//! `fcntl(F_DUPFD*)`, exec, task creation and exit — and sends them on as [`Msg`]s without
//! ever blocking (a full channel counts the message as dropped). It runs on the readers' hot
//! path: one table lookup per record, two or three fields read from the few it keeps.

use crate::format::{FieldFormat, FormatSet, HeaderPage};
use crate::page::parse_page;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Notifications the readers may queue for the tracker before dropping them.
pub(crate) const CHANNEL_CAPACITY: usize = 1 << 18;
/// `CLONE_THREAD` (`include/uapi/linux/sched.h`).
const CLONE_THREAD: u64 = 0x0001_0000;
/// `fcntl` commands that return a new descriptor (`include/uapi/linux/fcntl.h`,
/// `F_DUPFD_CLOEXEC` = `F_LINUX_SPECIFIC_BASE + 6`).
const F_DUPFD: u64 = 0;
const F_DUPFD_CLOEXEC: u64 = 1030;
/// `close_range` flag that only marks the range close-on-exec (`linux/close_range.h`).
const CLOSE_RANGE_CLOEXEC: u64 = 1 << 2;
/// `-EBADF`: the one `close` failure that closed nothing (on any other error the descriptor
/// is released anyway; `fs/open.c`, `close(2)`).
const EBADF_RET: i64 = -9;
/// Threads whose `sys_enter` arguments a reader keeps until the matching exit.
const MAX_ENTERED: usize = 64;

/// A reader's notification to the tracker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Thread `tid` got descriptor `fd` from a syscall that returned at `ts`.
    Fd { tid: i32, fd: i32, ts: u64 },
    /// Thread `tid`'s process may have new descriptors (or newly connected sockets) since
    /// `ts`, at numbers the trace does not show.
    Scan { tid: i32, ts: u64 },
    /// Thread `parent` created `child` (a thread when `thread`).
    NewTask {
        parent: i32,
        child: i32,
        thread: bool,
        ts: u64,
    },
    /// Thread `tid` exited; `group_dead` when its whole process is gone.
    Exit { tid: i32, group_dead: bool, ts: u64 },
    /// Thread `tid` closed descriptor `fd` (`close`) at `ts`.
    Close { tid: i32, fd: i32, ts: u64 },
    /// Thread `tid` closed descriptors `first..=last` (`close_range`) at `ts`.
    CloseRange {
        tid: i32,
        first: u32,
        last: u32,
        ts: u64,
    },
}

impl Msg {
    pub(super) fn ts(&self) -> u64 {
        match *self {
            Msg::Fd { ts, .. }
            | Msg::Scan { ts, .. }
            | Msg::NewTask { ts, .. }
            | Msg::Exit { ts, .. }
            | Msg::Close { ts, .. }
            | Msg::CloseRange { ts, .. } => ts,
        }
    }
}

/// How a syscall's successful exit is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Ignore,
    /// The return value is a new descriptor.
    ReturnsFd,
    /// New descriptors (or a peer) appear at numbers only `/proc` shows.
    Rescan,
    /// `close(fd)`: the descriptor's identity ends (the number is in the `sys_enter`).
    Close,
    /// `close_range(first, last, flags)`.
    CloseRange,
    /// `fcntl(fd, cmd, arg)`: a new descriptor when `cmd` is `F_DUPFD(_CLOEXEC)`.
    Fcntl,
}

impl Class {
    /// Whether the exit needs the arguments of the matching `sys_enter`.
    fn needs_args(self) -> bool {
        matches!(self, Class::Close | Class::CloseRange | Class::Fcntl)
    }
}

/// Syscalls whose return value is a new descriptor.
const RETURNS_FD: &[&str] = &[
    "open",
    "openat",
    "openat2",
    "creat",
    "open_by_handle_at",
    "socket",
    "accept",
    "accept4",
    "dup",
    "dup2",
    "dup3",
    "eventfd",
    "eventfd2",
    "timerfd_create",
    "signalfd",
    "signalfd4",
    "epoll_create",
    "epoll_create1",
    "memfd_create",
    "memfd_secret",
    "inotify_init",
    "inotify_init1",
    "fanotify_init",
    "pidfd_open",
    "pidfd_getfd",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "mq_open",
    "fsopen",
    "fspick",
    "fsmount",
    "open_tree",
];

/// Syscalls after which the process is rescanned: descriptors written to user memory
/// (`pipe`, `socketpair`), received by `SCM_RIGHTS` (`recvmsg`), or a socket just connected.
const RESCAN: &[&str] = &[
    "pipe",
    "pipe2",
    "socketpair",
    "recvmsg",
    "recvmmsg",
    "connect",
];

/// Where a scalar field is in a record.
#[derive(Clone, Copy, Debug)]
struct Loc {
    offset: usize,
    size: usize,
    signed: bool,
}

impl Loc {
    fn of(field: &FieldFormat) -> Loc {
        Loc {
            offset: field.offset as usize,
            size: field.size as usize,
            signed: field.signed,
        }
    }

    /// The field's value (`format::read_int`'s rules), inlined: the scan reads a syscall
    /// number from every `sys_enter` and `sys_exit` record on the reader's hot path.
    #[inline(always)]
    fn read(self, payload: &[u8]) -> Option<i64> {
        let b = payload.get(self.offset..self.offset.checked_add(self.size)?)?;
        Some(match *b {
            [b0, b1, b2, b3, b4, b5, b6, b7] => {
                i64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7])
            }
            [b0, b1, b2, b3] => {
                let v = u32::from_le_bytes([b0, b1, b2, b3]);
                if self.signed {
                    v as i32 as i64
                } else {
                    v as i64
                }
            }
            [b0, b1] => {
                let v = u16::from_le_bytes([b0, b1]);
                if self.signed {
                    v as i16 as i64
                } else {
                    v as i64
                }
            }
            [b0] => {
                if self.signed {
                    b0 as i8 as i64
                } else {
                    b0 as i64
                }
            }
            _ => return None,
        })
    }
}

/// Which of the scanned events an event id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pick {
    None,
    SysEnter,
    SysExit,
    Exec,
    NewTask,
    Exit,
}

/// The event ids and field offsets the page scan needs.
#[derive(Clone, Debug)]
struct Layout {
    /// Per event id (one table lookup per record: most records are none of these).
    picks: Vec<Pick>,
    common_pid: Loc,
    /// `raw_syscalls/sys_exit`: `id` (syscall number), `ret`.
    sys_nr: Loc,
    sys_ret: Loc,
    /// `raw_syscalls/sys_enter`: `id`, and the first of `args[6]` (each `size` bytes).
    enter_nr: Loc,
    enter_args: Loc,
    /// `sched/sched_process_exec`: `pid`.
    exec_pid: Loc,
    /// `task/task_newtask`: `pid`, `clone_flags`.
    new_pid: Loc,
    new_flags: Loc,
    /// `sched/sched_process_exit`: `pid`, `group_dead` (6.x).
    exit_pid: Loc,
    exit_group_dead: Option<Loc>,
    /// Per syscall number.
    classes: Vec<Class>,
}

impl Layout {
    /// How the exit of syscall `nr` is handled.
    #[inline]
    fn class(&self, nr: i64) -> Class {
        usize::try_from(nr)
            .ok()
            .and_then(|nr| self.classes.get(nr))
            .copied()
            .unwrap_or(Class::Ignore)
    }

    fn new(formats: &FormatSet) -> Layout {
        let field = |sys: &str, name: &str, field: &str| {
            formats
                .by_name(sys, name)
                .and_then(|e| Some((e.id, Loc::of(e.field(field)?))))
        };
        let none = Loc {
            offset: 0,
            size: 0,
            signed: false,
        };
        let common_pid = formats
            .events
            .values()
            .find_map(|e| e.field("common_pid"))
            .map(Loc::of)
            .unwrap_or(Loc {
                offset: 4,
                size: 4,
                signed: true,
            });
        let mut picks: Vec<Pick> = Vec::new();
        let mut pick = |id: u16, what: Pick| {
            let i = id as usize;
            if picks.len() <= i {
                picks.resize(i + 1, Pick::None);
            }
            picks[i] = what;
        };
        let (mut sys_nr, mut sys_ret) = (none, none);
        if let (Some((id, nr)), Some((_, ret))) = (
            field("raw_syscalls", "sys_exit", "id"),
            field("raw_syscalls", "sys_exit", "ret"),
        ) {
            pick(id, Pick::SysExit);
            (sys_nr, sys_ret) = (nr, ret);
        }
        let (mut enter_nr, mut enter_args) = (none, none);
        if let (Some((id, nr)), Some((_, args))) = (
            field("raw_syscalls", "sys_enter", "id"),
            field("raw_syscalls", "sys_enter", "args"),
        ) {
            // `unsigned long args[6]`: six words of the kernel's long.
            if args.size % 6 == 0 && args.size > 0 {
                pick(id, Pick::SysEnter);
                enter_nr = nr;
                enter_args = Loc {
                    size: args.size / 6,
                    signed: false,
                    ..args
                };
            }
        }
        let mut exec_pid = none;
        if let Some((id, pid)) = field("sched", "sched_process_exec", "pid") {
            pick(id, Pick::Exec);
            exec_pid = pid;
        }
        let (mut new_pid, mut new_flags) = (none, none);
        if let (Some((id, pid)), Some((_, flags))) = (
            field("task", "task_newtask", "pid"),
            field("task", "task_newtask", "clone_flags"),
        ) {
            pick(id, Pick::NewTask);
            (new_pid, new_flags) = (pid, flags);
        }
        let mut exit_pid = none;
        if let Some((id, pid)) = field("sched", "sched_process_exit", "pid") {
            pick(id, Pick::Exit);
            exit_pid = pid;
        }
        let exit_group_dead = field("sched", "sched_process_exit", "group_dead").map(|f| f.1);
        let mut classes = vec![Class::Ignore; argus_schema::syscalls::NAMES.len()];
        for (names, class) in [
            (RETURNS_FD, Class::ReturnsFd),
            (RESCAN, Class::Rescan),
            (&["close"][..], Class::Close),
            (&["close_range"][..], Class::CloseRange),
            (&["fcntl"][..], Class::Fcntl),
        ] {
            for name in names {
                if let Some(nr) = argus_schema::syscalls::number(name) {
                    classes[nr as usize] = class;
                }
            }
        }
        Layout {
            picks,
            common_pid,
            sys_nr,
            sys_ret,
            enter_nr,
            enter_args,
            exec_pid,
            new_pid,
            new_flags,
            exit_pid,
            exit_group_dead,
            classes,
        }
    }
}

/// The `sys_enter` arguments of `close`, `close_range` and `fcntl` calls one reader saw and
/// has not yet seen return, per thread: `(tid, nr, first three arguments)`, oldest first.
/// A thread enters and leaves these calls on one CPU unless it migrates inside the call
/// (they rarely block); a call whose exit another reader sees is not matched (`close`: not
/// recorded; `fcntl`: the process is rescanned), and its entry is evicted when the list is
/// full or the thread's next such call on this CPU replaces it.
#[derive(Clone, Debug, Default)]
struct Entered {
    calls: Vec<(i32, i64, [u64; 3])>,
}

impl Entered {
    #[inline]
    fn enter(&mut self, tid: i32, nr: i64, args: [u64; 3]) {
        if let Some(e) = self.calls.iter_mut().find(|e| e.0 == tid) {
            *e = (tid, nr, args);
            return;
        }
        if self.calls.len() >= MAX_ENTERED {
            self.calls.remove(0);
        }
        self.calls.push((tid, nr, args));
    }

    /// The arguments of `tid`'s pending call, if it is syscall `nr`; forgets the entry.
    #[inline]
    fn take(&mut self, tid: i32, nr: i64) -> Option<[u64; 3]> {
        let i = self.calls.iter().position(|e| e.0 == tid)?;
        let (_, entered, args) = self.calls.remove(i);
        (entered == nr).then_some(args)
    }
}

/// The cheap per-page scan a reader thread runs: picks the records the tracker needs and
/// sends them on (never blocks; a full channel counts the message as dropped). Each reader
/// has its own (clones start with no pending calls).
#[derive(Clone, Debug)]
pub(crate) struct PageScan {
    layout: Arc<Layout>,
    tx: Sender<Msg>,
    dropped: Arc<AtomicU64>,
    entered: Entered,
}

impl PageScan {
    /// A scan whose notifications arrive on the returned receiver (a bounded channel of
    /// [`CHANNEL_CAPACITY`]); each reader gets a clone.
    pub(super) fn new(formats: &FormatSet) -> (PageScan, Receiver<Msg>) {
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        let scan = PageScan {
            layout: Arc::new(Layout::new(formats)),
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
            entered: Entered::default(),
        };
        (scan, rx)
    }

    /// The count of notifications dropped because the channel was full (shared by every
    /// clone).
    pub(super) fn dropped(&self) -> Arc<AtomicU64> {
        self.dropped.clone()
    }

    /// Scans one ring-buffer page.
    pub(crate) fn page(&mut self, header: &HeaderPage, page: &[u8]) {
        let Ok(records) = parse_page(header, page) else {
            return;
        };
        let l = &*self.layout;
        for rec in records {
            let Ok(rec) = rec else { break };
            let Some(id) = rec.id() else { continue };
            let p = rec.payload;
            let msg = match l.picks.get(id as usize).copied().unwrap_or(Pick::None) {
                Pick::None => continue,
                Pick::SysEnter => {
                    let Some(nr) = l.enter_nr.read(p) else {
                        continue;
                    };
                    if !l.class(nr).needs_args() {
                        continue;
                    }
                    let Some(tid) = l.common_pid.read(p) else {
                        continue;
                    };
                    let arg = |i: usize| {
                        let at = Loc {
                            offset: l.enter_args.offset + i * l.enter_args.size,
                            ..l.enter_args
                        };
                        at.read(p).unwrap_or(0) as u64
                    };
                    self.entered.enter(tid as i32, nr, [arg(0), arg(1), arg(2)]);
                    continue;
                }
                Pick::SysExit => {
                    let Some(nr) = l.sys_nr.read(p) else {
                        continue;
                    };
                    let class = l.class(nr);
                    if class == Class::Ignore {
                        continue;
                    }
                    let (Some(ret), Some(tid)) = (l.sys_ret.read(p), l.common_pid.read(p)) else {
                        continue;
                    };
                    let tid = tid as i32;
                    let ts = rec.ts;
                    let args = if class.needs_args() {
                        self.entered.take(tid, nr)
                    } else {
                        None
                    };
                    match class {
                        // Any other failure still released the descriptor.
                        Class::Close => match args {
                            Some(a) if ret != EBADF_RET => Msg::Close {
                                tid,
                                fd: a[0] as i32,
                                ts,
                            },
                            _ => continue,
                        },
                        _ if ret < 0 => continue,
                        Class::ReturnsFd => Msg::Fd {
                            tid,
                            fd: ret as i32,
                            ts,
                        },
                        Class::CloseRange => match args {
                            Some(a) if a[2] & CLOSE_RANGE_CLOEXEC == 0 => Msg::CloseRange {
                                tid,
                                first: a[0] as u32,
                                last: a[1] as u32,
                                ts,
                            },
                            _ => continue,
                        },
                        Class::Fcntl => match args {
                            Some(a) if a[1] == F_DUPFD || a[1] == F_DUPFD_CLOEXEC => Msg::Fd {
                                tid,
                                fd: ret as i32,
                                ts,
                            },
                            Some(_) => continue,
                            // The call entered on another CPU: it may have made a descriptor.
                            None => Msg::Scan { tid, ts },
                        },
                        _ => Msg::Scan { tid, ts },
                    }
                }
                Pick::Exec => {
                    let Some(pid) = l.exec_pid.read(p) else {
                        continue;
                    };
                    Msg::Scan {
                        tid: pid as i32,
                        ts: rec.ts,
                    }
                }
                Pick::NewTask => {
                    let (Some(child), Some(flags), Some(parent)) =
                        (l.new_pid.read(p), l.new_flags.read(p), l.common_pid.read(p))
                    else {
                        continue;
                    };
                    Msg::NewTask {
                        parent: parent as i32,
                        child: child as i32,
                        thread: flags as u64 & CLONE_THREAD != 0,
                        ts: rec.ts,
                    }
                }
                Pick::Exit => {
                    let Some(tid) = l.exit_pid.read(p) else {
                        continue;
                    };
                    Msg::Exit {
                        tid: tid as i32,
                        group_dead: l
                            .exit_group_dead
                            .and_then(|g| g.read(p))
                            .is_some_and(|g| g != 0),
                        ts: rec.ts,
                    }
                }
            };
            match self.tx.try_send(msg) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

/// Runs the recorder's file-identity page scan (what each reader thread does to every page
/// it reads when [`crate::linux::RecordConfig::track_files`] is on) over `pages`, whole
/// pages of `page_size` bytes as in a chunk, and returns how many notifications it
/// produced. For measuring its cost (`cargo bench -p argus-ingest --bench fdscan`).
pub fn scan_pages(formats: &FormatSet, pages: &[u8], page_size: usize) -> u64 {
    let (mut scan, rx) = PageScan::new(formats);
    let mut sent = 0u64;
    for page in pages.chunks_exact(page_size.max(1)) {
        scan.page(&formats.header_page, page);
        sent += rx.try_iter().count() as u64;
    }
    sent
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn syscall_classes_are_known_numbers() {
        let layout = Layout::new(&FormatSet::default());
        let class = |name| layout.classes[argus_schema::syscalls::number(name).unwrap() as usize];
        assert_eq!(class("openat"), Class::ReturnsFd);
        assert_eq!(class("accept4"), Class::ReturnsFd);
        assert_eq!(class("pipe2"), Class::Rescan);
        assert_eq!(class("recvmsg"), Class::Rescan);
        assert_eq!(class("read"), Class::Ignore);
        assert_eq!(class("close"), Class::Close);
        assert_eq!(class("close_range"), Class::CloseRange);
        assert_eq!(class("fcntl"), Class::Fcntl);
        for name in RETURNS_FD.iter().chain(RESCAN) {
            assert!(argus_schema::syscalls::number(name).is_some(), "{name}");
        }
    }

    /// `raw_syscalls/sys_enter` (id 21) and `sys_exit` (id 22) as this x86-64 kernel lays
    /// them out.
    fn syscall_formats() -> FormatSet {
        let common = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
                      \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
                      \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
                      \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
                      \tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n";
        let mut set = FormatSet::default();
        for (name, id, rest) in [
            (
                "sys_enter",
                21,
                "\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n",
            ),
            (
                "sys_exit",
                22,
                "\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n",
            ),
        ] {
            let text = format!("name: {name}\nID: {id}\nformat:\n{common}{rest}");
            set.insert(crate::format::EventFormat::parse("raw_syscalls", &text).unwrap());
        }
        set
    }

    fn nr(name: &str) -> i64 {
        argus_schema::syscalls::number(name).unwrap() as i64
    }

    /// A `sys_enter` (`args`) or `sys_exit` (`ret`) record payload of `tid`.
    fn enter(tid: i32, call: &str, args: [u64; 3]) -> Vec<u8> {
        let mut p = vec![0u8; 64];
        p[..2].copy_from_slice(&21u16.to_le_bytes());
        p[4..8].copy_from_slice(&tid.to_le_bytes());
        p[8..16].copy_from_slice(&nr(call).to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            p[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        p
    }

    fn exit(tid: i32, call: &str, ret: i64) -> Vec<u8> {
        let mut p = vec![0u8; 24];
        p[..2].copy_from_slice(&22u16.to_le_bytes());
        p[4..8].copy_from_slice(&tid.to_le_bytes());
        p[8..16].copy_from_slice(&nr(call).to_le_bytes());
        p[16..24].copy_from_slice(&ret.to_le_bytes());
        p
    }

    /// A 4 KiB page of `records`, one nanosecond apart from `ts` on.
    fn page(ts: u64, records: &[Vec<u8>]) -> Vec<u8> {
        let mut data = Vec::new();
        for (i, payload) in records.iter().enumerate() {
            let delta = u32::from(i > 0);
            data.extend_from_slice(&((delta << 5) | (payload.len() / 4) as u32).to_le_bytes());
            data.extend_from_slice(payload);
        }
        let mut page = vec![0u8; 4096];
        page[..8].copy_from_slice(&ts.to_le_bytes());
        page[8..16].copy_from_slice(&(data.len() as u64).to_le_bytes());
        page[16..16 + data.len()].copy_from_slice(&data);
        page
    }

    #[test]
    fn the_scan_pairs_close_and_fcntl_exits_with_their_entries() {
        let set = syscall_formats();
        let (mut scan, rx) = PageScan::new(&set);
        let first = [
            // fcntl(3, F_DUPFD, 10) = 10 and fcntl(3, F_DUPFD_CLOEXEC, 0) = 11: new fds.
            enter(100, "fcntl", [3, F_DUPFD, 10]),
            exit(100, "fcntl", 10),
            enter(100, "fcntl", [3, F_DUPFD_CLOEXEC, 0]),
            exit(100, "fcntl", 11),
            // fcntl(3, F_GETFL) = 2: not a descriptor.
            enter(100, "fcntl", [3, 3, 0]),
            exit(100, "fcntl", 2),
            // close(10) = 0; close(99) = -EBADF closed nothing; close(5) = -EINTR did.
            enter(100, "close", [10, 0, 0]),
            exit(100, "close", 0),
            enter(100, "close", [99, 0, 0]),
            exit(100, "close", EBADF_RET),
            enter(101, "close", [5, 0, 0]),
            exit(101, "close", -4),
            // An fcntl whose entry another CPU saw: the process is rescanned.
            exit(102, "fcntl", 7),
            // close_range(20, ~0U, 0) closes; with CLOSE_RANGE_CLOEXEC it does not.
            enter(100, "close_range", [20, u32::MAX as u64, 0]),
            exit(100, "close_range", 0),
            enter(100, "close_range", [0, 9, CLOSE_RANGE_CLOEXEC]),
            exit(100, "close_range", 0),
            // Entered fcntl, left close (a lost record in between): not paired.
            enter(104, "fcntl", [6, F_DUPFD, 0]),
            exit(104, "close", 0),
            // A close that returns on the next page.
            enter(103, "close", [4, 0, 0]),
        ];
        scan.page(&set.header_page, &page(1_000, &first));
        scan.page(&set.header_page, &page(2_000, &[exit(103, "close", 0)]));
        let got: Vec<Msg> = rx.try_iter().collect();
        assert_eq!(
            got,
            vec![
                Msg::Fd {
                    tid: 100,
                    fd: 10,
                    ts: 1_001
                },
                Msg::Fd {
                    tid: 100,
                    fd: 11,
                    ts: 1_003
                },
                Msg::Close {
                    tid: 100,
                    fd: 10,
                    ts: 1_007
                },
                Msg::Close {
                    tid: 101,
                    fd: 5,
                    ts: 1_011
                },
                Msg::Scan {
                    tid: 102,
                    ts: 1_012
                },
                Msg::CloseRange {
                    tid: 100,
                    first: 20,
                    last: u32::MAX,
                    ts: 1_014
                },
                Msg::Close {
                    tid: 103,
                    fd: 4,
                    ts: 2_000
                },
            ]
        );
        assert!(scan.entered.calls.is_empty(), "{:?}", scan.entered.calls);
        // Bounded: calls that never return here are evicted oldest first.
        for tid in 0..(MAX_ENTERED as i32 + 10) {
            scan.entered.enter(tid, nr("close"), [1, 0, 0]);
        }
        assert_eq!(scan.entered.calls.len(), MAX_ENTERED);
        assert_eq!(scan.entered.take(0, nr("close")), None);
        assert_eq!(
            scan.entered.take(MAX_ENTERED as i32 + 9, nr("close")),
            Some([1, 0, 0])
        );
    }
}
