//! File identity while recording: what every file descriptor refers to, written to
//! `files/NNNNNN.jsonl.zst` (`docs/trace-dir.md`, "File identity"; read back by
//! [`crate::files::FileTable`]).
//!
//! ```text
//!  reader cpuN ── PageScan::page (ids + 2-3 fields per record) ──┐ sys_exit of fd-creating
//!    per thread: args of the last close/close_range/fcntl        │ syscalls (ret >= 0), exec,
//!    sys_enter, paired with its sys_exit on this CPU             │ task_newtask, process exit,
//!                                                                │ close, close_range,
//!                                                                │ fcntl(F_DUPFD*)
//!                                  bounded channel, try_send ────┘ (full: counted, `lost`)
//!                                             │
//!  FdTracker thread ◄─────────────────────────┘
//!     start: every /proc/PID/fd/* (ts = start_ns), unix peers by one sock_diag dump
//!     Fd{tid, fd, ts}  → readlink /proc/TID/fd/FD (+ stat, fdinfo, peer)  → `fd` line at ts
//!     Scan{tid, ts}    → pipe/pipe2/socketpair/recvmsg/recvmmsg/connect/exec: rescan
//!                        /proc/PID/fd (at most one per pid per 50 ms), changed entries at ts
//!     Close{tid, fd, ts}, CloseRange → `unknown` line at ts for each descriptor closed
//!     NewTask          → `fork` line (the child starts with a copy of the parent's table)
//!     Exit             → forget the process
//!     every flush interval: one zstd frame appended + fdatasync
//! ```
//!
//! Peers: unix sockets through `NETLINK_SOCK_DIAG` (`unix_diag_req` for one inode with
//! `UDIAG_SHOW_PEER`), TCP/UDP through `/proc/net/{tcp,tcp6,udp,udp6}` (the socket whose
//! local address is my remote one and whose remote is my local one): loopback connections
//! only, as a remote peer has no inode here.
//!
//! **Closes.** `close` and `close_range` end a descriptor's identity at the syscall's exit
//! (an `unknown` line), so a closed descriptor is not taken for its old file. Their
//! arguments are only in `sys_enter`: each reader keeps them per thread (`MAX_ENTERED`
//! threads) until the thread's exit of the same syscall on that CPU. A creation that the
//! tracker knows was closed again (in the same batch, or a close already read) is `unknown`
//! from its creation: `/proc` cannot show that file any more.
//!
//! **The race.** Without kprobes (not built into the 6.18 kernel this was written on) nothing
//! runs at the moment a descriptor is created: the tracker reads `/proc` after the reader
//! thread has passed it the page holding the syscall's exit, up to ~100 ms later (the
//! readers' poll timeout). A descriptor closed in between cannot be read: it is recorded as
//! `unknown` from its creation. A descriptor closed and its number reused in between would
//! be read as the newer file; the tracker detects the case where both creations are in the
//! notifications it holds (the earlier one becomes `unknown`), not one whose second creation
//! it has not yet been told about. Rescans stamp what they find with the time of the syscall
//! that triggered them (the earliest one pending for that process), or just after the
//! descriptor's latest record when that is later: notifications from different CPUs arrive
//! out of order, and the table keeps each descriptor's latest record in trace time.
//!
//! **The ring.** The files get a fixed share of `--ring-size` ([`files_reserve`]). A new file
//! starts (with the whole table restated as `snapshot` lines) when the current one reaches a
//! quarter of the share; the oldest files are deleted when the share is full, so the table
//! can always be rebuilt from the files that remain.

use super::error::RecordError;
use super::sysinfo;
use crate::decode::parse_page;
use crate::files::{FileId, FileKind};
use crate::format::{FieldFormat, FormatSet, HeaderPage};
use crate::tracedir::{self, FileLine};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Notifications the readers may queue for the tracker before dropping them.
pub(crate) const CHANNEL_CAPACITY: usize = 1 << 18;
/// At most one rescan of a process per this interval.
const RESCAN_INTERVAL: Duration = Duration::from_millis(50);
/// How long a parsed `/proc/net/*` table is reused.
const NET_TABLE_TTL: Duration = Duration::from_millis(20);
/// Buffered bytes that force a frame out before the flush interval.
const FRAME_BYTES: usize = 1 << 20;
/// Size of each file when the ring is off.
const UNCAPPED_FILE_BYTES: u64 = 16 << 20;
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

/// The share of a `--ring-size` cap set aside for `files/`: 1/16, between 256 KiB and
/// 64 MiB.
pub(crate) fn files_reserve(ring_size: u64) -> u64 {
    (ring_size / 16).clamp(256 << 10, 64 << 20)
}

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
    fn ts(&self) -> u64 {
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
/// it reads when [`super::RecordConfig::track_files`] is on) over `pages`, whole pages of
/// `page_size` bytes as in a chunk, and returns how many notifications it produced. For
/// measuring its cost (`cargo bench -p argus-ingest --bench fdscan`).
pub fn scan_pages(formats: &FormatSet, pages: &[u8], page_size: usize) -> u64 {
    let (start_tx, start_rx) = crossbeam_channel::bounded(1);
    drop(start_tx);
    let tracker = FdTracker::new(Path::new("."), formats, start_rx, None, None);
    let mut scan = tracker.scan();
    let mut sent = 0u64;
    for page in pages.chunks_exact(page_size.max(1)) {
        scan.page(&formats.header_page, page);
        sent += tracker.rx.try_iter().count() as u64;
    }
    sent
}

/// What the tracker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FdStats {
    /// `fd` lines written.
    pub(crate) records: u64,
    /// `unknown` lines written for descriptors closed before `/proc` could be read.
    pub(crate) unknown: u64,
    /// `unknown` lines written for `close` / `close_range` (the identity ends there).
    pub(crate) closes: u64,
    /// Rescans of a process.
    pub(crate) rescans: u64,
    /// Notifications dropped because the channel was full.
    pub(crate) lost: u64,
    /// Files written.
    pub(crate) files: u32,
}

/// The fd-tracker thread: build with [`FdTracker::new`], hand [`FdTracker::scan`] clones to
/// the readers, run [`FdTracker::run`] on its own thread and send it the start time.
pub(crate) struct FdTracker {
    dir: PathBuf,
    rx: Receiver<Msg>,
    scan: PageScan,
    start: Receiver<u64>,
    recorder_pid: i32,
    flush_interval: Option<Duration>,
    budget: Option<u64>,
}

impl FdTracker {
    /// A tracker writing into trace directory `dir`; `start` delivers the recording's start
    /// time once tracing is on (dropping it unsent ends the tracker without writing).
    pub(crate) fn new(
        dir: &Path,
        formats: &FormatSet,
        start: Receiver<u64>,
        flush_interval: Option<Duration>,
        budget: Option<u64>,
    ) -> FdTracker {
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        FdTracker {
            dir: dir.to_path_buf(),
            rx,
            scan: PageScan {
                layout: Arc::new(Layout::new(formats)),
                tx,
                dropped: Arc::new(AtomicU64::new(0)),
                entered: Entered::default(),
            },
            start,
            recorder_pid: std::process::id() as i32,
            flush_interval,
            budget,
        }
    }

    /// A page scan for one reader thread.
    pub(crate) fn scan(&self) -> PageScan {
        self.scan.clone()
    }

    /// Runs until every reader's scan is dropped, then flushes and syncs.
    pub(crate) fn run(self) -> Result<FdStats, RecordError> {
        let FdTracker {
            dir,
            rx,
            scan,
            start,
            recorder_pid,
            flush_interval,
            budget,
        } = self;
        let dropped = scan.dropped.clone();
        // Only the readers hold senders from here on: the channel ends when they do.
        drop(scan);
        let Ok(start_ns) = start.recv() else {
            return Ok(FdStats::default());
        };
        let files_dir = tracedir::files_dir(&dir);
        sysinfo::create_dir_private(&files_dir)?;
        let mut state = State::new(recorder_pid, Writer::new(&dir, budget));
        state.start(start_ns)?;
        let mut last_flush = Instant::now();
        let mut batch = Vec::new();
        let mut reported_lost = 0u64;
        let mut disconnected = false;
        while !disconnected {
            let mut timeout = flush_interval.unwrap_or(Duration::from_millis(500));
            if let Some(due) = state.next_pending() {
                timeout = timeout.min(due.saturating_duration_since(Instant::now()));
            }
            match rx.recv_timeout(timeout) {
                Ok(msg) => {
                    batch.push(msg);
                    while batch.len() < 8192 {
                        match rx.try_recv() {
                            Ok(m) => batch.push(m),
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => disconnected = true,
            }
            state.handle(&mut batch);
            state.run_pending(disconnected);
            let lost = dropped.load(Ordering::Relaxed);
            if lost > reported_lost {
                let ts = state.last_ts;
                state.writer.line(&FileLine::Lost {
                    ts,
                    messages: lost - reported_lost,
                });
                if reported_lost == 0 {
                    // Once; the total is in the `lost` lines and the final log line.
                    tracing::warn!(
                        dropped = lost,
                        "fd tracker: notifications dropped (channel full); some file identities are missing"
                    );
                }
                reported_lost = lost;
            }
            let interval_due = flush_interval.is_some_and(|i| last_flush.elapsed() >= i);
            if interval_due || state.writer.buffered() >= FRAME_BYTES || disconnected {
                state.flush(interval_due || disconnected)?;
                if interval_due {
                    last_flush = Instant::now();
                }
            }
        }
        sysinfo::sync_dir(&files_dir)?;
        state.stats.lost = reported_lost;
        state.stats.files = state.writer.files_written;
        tracing::info!(
            records = state.stats.records,
            unknown = state.stats.unknown,
            closes = state.stats.closes,
            rescans = state.stats.rescans,
            lost = state.stats.lost,
            "fd tracker done"
        );
        Ok(state.stats)
    }
}

/// One descriptor as the tracker knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    ts: u64,
    /// `None`: unknown (or closed).
    id: Option<FileId>,
    /// Closed at `ts` (a `close` or `close_range` seen in the trace).
    closed: bool,
}

#[derive(Debug, Default)]
struct Process {
    /// When it was created (0: before recording).
    birth: u64,
    parent: Option<i32>,
    fds: HashMap<i32, Entry>,
    last_scan: Option<Instant>,
    /// Earliest trigger time of a rescan waiting for the rate limit.
    pending: Option<u64>,
}

struct State {
    recorder_pid: i32,
    procs: HashMap<i32, Process>,
    /// Thread id → process id.
    tgid: HashMap<i32, i32>,
    peers: Peers,
    writer: Writer,
    stats: FdStats,
    /// Latest notification time seen.
    last_ts: u64,
}

impl State {
    fn new(recorder_pid: i32, writer: Writer) -> State {
        State {
            recorder_pid,
            procs: HashMap::new(),
            tgid: HashMap::new(),
            peers: Peers::new(),
            writer,
            stats: FdStats::default(),
            last_ts: 0,
        }
    }

    /// The scan at recording start: every process's descriptors at `ts`.
    fn start(&mut self, ts: u64) -> Result<(), RecordError> {
        self.last_ts = ts;
        self.peers.preload_unix();
        let mut pids: Vec<i32> = std::fs::read_dir("/proc")
            .map(|dir| {
                dir.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        pids.sort_unstable();
        for pid in pids {
            if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                for t in tasks.flatten() {
                    if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) {
                        self.tgid.insert(tid, pid);
                    }
                }
            }
            if pid == self.recorder_pid {
                continue;
            }
            self.procs.insert(pid, Process::default());
            self.rescan(pid, pid, ts, "start");
        }
        self.writer.begin(0, ts, &[])?;
        self.peers.drop_preload();
        Ok(())
    }

    /// The process of thread `tid`, from what the trace said or `/proc`.
    fn process_of(&mut self, tid: i32) -> Option<i32> {
        if let Some(&p) = self.tgid.get(&tid) {
            return Some(p);
        }
        let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
        let tgid = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())?;
        self.tgid.insert(tid, tgid);
        Some(tgid)
    }

    fn handle(&mut self, batch: &mut Vec<Msg>) {
        batch.sort_by_key(Msg::ts);
        if let Some(last) = batch.last() {
            self.last_ts = self.last_ts.max(last.ts());
        }
        // A descriptor number created twice in this batch (by any thread of the process),
        // or created and then closed: /proc shows only the second file, or none.
        let mut last_creation: HashMap<(i32, i32), usize> = HashMap::new();
        let mut ranges: Vec<(i32, u32, u32, usize)> = Vec::new();
        for (i, m) in batch.iter().enumerate() {
            match *m {
                Msg::Fd { tid, fd, .. } | Msg::Close { tid, fd, .. } => {
                    let pid = self.process_of(tid).unwrap_or(tid);
                    last_creation.insert((pid, fd), i);
                }
                Msg::CloseRange {
                    tid, first, last, ..
                } => {
                    let pid = self.process_of(tid).unwrap_or(tid);
                    ranges.push((pid, first, last, i));
                }
                _ => {}
            }
        }
        for (i, m) in std::mem::take(batch).into_iter().enumerate() {
            match m {
                Msg::Fd { tid, fd, ts } => {
                    let pid = self.process_of(tid).unwrap_or(tid);
                    let superseded = last_creation.get(&(pid, fd)).is_some_and(|&j| j != i)
                        || ranges.iter().any(|&(p, first, last, j)| {
                            p == pid && j > i && (first..=last).contains(&(fd as u32))
                        });
                    self.on_fd(tid, fd, ts, superseded);
                }
                Msg::Close { tid, fd, ts } => self.on_close(tid, fd as u32, fd as u32, ts),
                Msg::CloseRange {
                    tid,
                    first,
                    last,
                    ts,
                } => self.on_close(tid, first, last, ts),
                Msg::Scan { tid, ts } => self.on_scan(tid, ts),
                Msg::NewTask {
                    parent,
                    child,
                    thread,
                    ts,
                } => self.on_new_task(parent, child, thread, ts),
                Msg::Exit {
                    tid,
                    group_dead,
                    ts: _,
                } => {
                    let pid = self.tgid.remove(&tid);
                    if group_dead || pid == Some(tid) {
                        if let Some(pid) = pid {
                            self.procs.remove(&pid);
                        }
                    }
                }
            }
        }
    }

    /// The process entry for `pid`, scanning it whole the first time it is seen (its
    /// creation was not in the trace, or not yet).
    fn known(&mut self, pid: i32, tid: i32, ts: u64) -> bool {
        if self.procs.contains_key(&pid) {
            return true;
        }
        self.procs.insert(
            pid,
            Process {
                birth: ts,
                ..Process::default()
            },
        );
        self.rescan(pid, tid, ts, "scan");
        false
    }

    fn on_fd(&mut self, tid: i32, fd: i32, ts: u64, superseded: bool) {
        let Some(pid) = self.process_of(tid) else {
            return;
        };
        if pid == self.recorder_pid {
            return;
        }
        self.known(pid, tid, ts);
        // Closed after this creation (the close was read first, from another CPU's page):
        // what /proc shows now is not this file.
        let closed_since = self
            .procs
            .get(&pid)
            .and_then(|p| p.fds.get(&fd))
            .is_some_and(|e| e.closed && e.ts > ts);
        let id = if superseded || closed_since {
            None
        } else {
            resolve(tid, pid, fd, &mut self.peers)
        };
        self.set(pid, fd, ts, id, "syscall");
    }

    /// Thread `tid` closed descriptors `first..=last` at `ts`: each one the process is known
    /// to have gets an `unknown` line (its identity ends), unless it is already unknown
    /// from an earlier time. A process the tracker has no record of is left alone (a lookup
    /// finds nothing for it anyway).
    fn on_close(&mut self, tid: i32, first: u32, last: u32, ts: u64) {
        let Some(pid) = self.process_of(tid) else {
            return;
        };
        if pid == self.recorder_pid {
            return;
        }
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let mut fds: Vec<i32> = if first == last {
            let fd = first as i32;
            // A close read before the creation it ends (another CPU's page came first)
            // still counts: the creation, when it comes, is then known to be gone.
            vec![fd]
        } else {
            p.fds
                .keys()
                .copied()
                .filter(|&fd| fd >= 0 && (first..=last).contains(&(fd as u32)))
                .collect()
        };
        fds.sort_unstable();
        for fd in fds {
            let known = p.fds.get(&fd);
            // Unknown (or closed) since earlier, with nothing newer: nothing changes.
            if known.is_some_and(|e| e.id.is_none() && e.ts <= ts) {
                continue;
            }
            self.writer.line(&FileLine::Unknown { ts, pid, fd });
            self.stats.closes += 1;
            // The table keeps each descriptor's latest record in trace time (a reuse after
            // this close may have been read first).
            if known.is_none_or(|e| e.ts <= ts) {
                p.fds.insert(
                    fd,
                    Entry {
                        ts,
                        id: None,
                        closed: true,
                    },
                );
            }
        }
    }

    fn on_scan(&mut self, tid: i32, ts: u64) {
        let Some(pid) = self.process_of(tid) else {
            return;
        };
        if pid == self.recorder_pid || !self.known(pid, tid, ts) {
            return;
        }
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if p.last_scan.is_some_and(|t| t.elapsed() < RESCAN_INTERVAL) {
            p.pending = Some(p.pending.map_or(ts, |t| t.min(ts)));
            return;
        }
        self.rescan(pid, tid, ts, "scan");
    }

    fn on_new_task(&mut self, parent: i32, child: i32, thread: bool, ts: u64) {
        let Some(ppid) = self.process_of(parent) else {
            return;
        };
        if thread {
            self.tgid.insert(child, ppid);
            return;
        }
        self.tgid.insert(child, child);
        // The recorded command is the recorder's child: its inherited table is not
        // recorded (the recorder's own descriptors), but it is known from its creation on.
        let inherited: HashMap<i32, Entry> = self
            .procs
            .get(&ppid)
            .map(|p| {
                p.fds
                    .iter()
                    .map(|(&fd, e)| {
                        let entry = Entry {
                            ts: e.ts.max(ts),
                            id: e.id.clone(),
                            closed: e.closed,
                        };
                        (fd, entry)
                    })
                    .collect()
            })
            .unwrap_or_default();
        match self.procs.get_mut(&child) {
            // The child's own notifications arrived first (another CPU's page was read
            // earlier): keep what it has, add the rest.
            Some(p) if p.birth >= ts => {
                for (fd, e) in inherited {
                    p.fds.entry(fd).or_insert(e);
                }
                p.birth = ts;
                p.parent = Some(ppid);
            }
            _ => {
                self.procs.insert(
                    child,
                    Process {
                        birth: ts,
                        parent: Some(ppid),
                        fds: inherited,
                        ..Process::default()
                    },
                );
            }
        }
        self.writer.line(&FileLine::Fork {
            ts,
            parent: ppid,
            child,
        });
    }

    /// Records what `fd` of `pid` is from `ts` on.
    fn set(&mut self, pid: i32, fd: i32, ts: u64, id: Option<FileId>, src: &str) {
        match &id {
            Some(id) => {
                self.writer.line(&fd_line(ts, pid, fd, id, src));
                self.stats.records += 1;
            }
            None => {
                self.writer.line(&FileLine::Unknown { ts, pid, fd });
                self.stats.unknown += 1;
            }
        }
        // The table keeps each descriptor's latest record in trace time: notifications
        // from different CPUs arrive out of order.
        if let Some(p) = self.procs.get_mut(&pid) {
            match p.fds.get(&fd) {
                Some(e) if e.ts > ts => {}
                _ => {
                    let closed = false;
                    p.fds.insert(fd, Entry { ts, id, closed });
                }
            }
        }
    }

    /// Reads `/proc/TID/fd` (the process's table; `/proc/PID/fd` when the thread is gone)
    /// and records every descriptor that differs from what is known, at `ts`.
    fn rescan(&mut self, pid: i32, tid: i32, ts: u64, src: &str) {
        self.stats.rescans += 1;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.last_scan = Some(Instant::now());
            p.pending = None;
        }
        let mut base = tid;
        let entries = match std::fs::read_dir(format!("/proc/{tid}/fd")) {
            Ok(e) => e,
            Err(_) => {
                base = pid;
                match std::fs::read_dir(format!("/proc/{pid}/fd")) {
                    Ok(e) => e,
                    Err(_) => return,
                }
            }
        };
        let mut fds: Vec<i32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        fds.sort_unstable();
        for fd in fds {
            let Ok(target) = std::fs::read_link(format!("/proc/{base}/fd/{fd}")) else {
                continue;
            };
            let target = target.to_string_lossy();
            let unchanged = self
                .procs
                .get(&pid)
                .and_then(|p| p.fds.get(&fd))
                .and_then(|e| e.id.as_ref())
                .is_some_and(|id| {
                    id.target == target && (id.kind != FileKind::Socket || id.peer.is_some())
                });
            if unchanged {
                continue;
            }
            let Some(id) = resolve(base, pid, fd, &mut self.peers) else {
                continue;
            };
            let known = self.procs.get(&pid).and_then(|p| p.fds.get(&fd));
            if known.is_some_and(|e| e.id.as_ref() == Some(&id)) {
                continue;
            }
            // A later record of this number exists (processed earlier, or a notification
            // from another CPU): what /proc shows now came after it.
            let at = known.map_or(ts, |e| ts.max(e.ts.saturating_add(1)));
            self.set(pid, fd, at, Some(id), src);
        }
    }

    /// When the earliest rate-limited rescan is due.
    fn next_pending(&self) -> Option<Instant> {
        self.procs
            .values()
            .filter(|p| p.pending.is_some())
            .filter_map(|p| p.last_scan.map(|t| t + RESCAN_INTERVAL))
            .min()
    }

    /// Runs the rescans whose rate limit has passed (all of them when `all`).
    fn run_pending(&mut self, all: bool) {
        let due: Vec<(i32, u64)> = self
            .procs
            .iter()
            .filter_map(|(&pid, p)| {
                let ts = p.pending?;
                let ready = all || p.last_scan.is_none_or(|t| t.elapsed() >= RESCAN_INTERVAL);
                ready.then_some((pid, ts))
            })
            .collect();
        for (pid, ts) in due {
            self.rescan(pid, pid, ts, "scan");
        }
    }

    /// Writes the buffered lines as one frame (starting a new file, with the table
    /// restated, when the current one is full); `sync`: fdatasync it too.
    fn flush(&mut self, sync: bool) -> Result<(), RecordError> {
        if self.writer.wants_new_file() {
            let snapshot = self.snapshot_lines();
            let seq = self.writer.files_written;
            self.writer.begin(seq, self.last_ts, &snapshot)?;
        }
        self.writer.write_frame()?;
        if sync {
            self.writer.sync()?;
        }
        Ok(())
    }

    /// The whole table as lines (for the start of a new file).
    fn snapshot_lines(&self) -> Vec<FileLine> {
        let mut pids: Vec<&i32> = self.procs.keys().collect();
        pids.sort_unstable();
        let mut lines = Vec::new();
        for &pid in pids {
            let p = &self.procs[&pid];
            if let Some(parent) = p.parent {
                lines.push(FileLine::Fork {
                    ts: p.birth,
                    parent,
                    child: pid,
                });
            }
            let mut fds: Vec<(&i32, &Entry)> = p.fds.iter().collect();
            fds.sort_unstable_by_key(|(fd, _)| **fd);
            for (&fd, e) in fds {
                let ts = e.ts.max(p.birth);
                lines.push(match &e.id {
                    Some(id) => fd_line(ts, pid, fd, id, "snapshot"),
                    None => FileLine::Unknown { ts, pid, fd },
                });
            }
        }
        lines
    }
}

fn fd_line(ts: u64, pid: i32, fd: i32, id: &FileId, src: &str) -> FileLine {
    FileLine::Fd {
        ts,
        pid,
        fd,
        kind: id.kind.as_str().to_string(),
        ino: id.inode,
        peer: id.peer,
        target: id.target.clone(),
        src: src.to_string(),
    }
}

/// What a `/proc/PID/fd/N` link says before any `stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    /// `pipe:[N]`.
    Pipe(u64),
    /// `socket:[N]`.
    Socket(u64),
    /// `anon_inode:[eventfd]`, `anon_inode:inotify`: the name.
    Anon(String),
    /// An absolute path (possibly ending in ` (deleted)`).
    Path,
    /// Anything else: `net:[4026531840]` (the bracketed number, when there is one).
    Other(Option<u64>),
}

/// Parses a `/proc/PID/fd/N` link text.
pub(crate) fn parse_link(target: &str) -> Link {
    let bracketed =
        |rest: &str| -> Option<u64> { rest.strip_prefix('[')?.strip_suffix(']')?.parse().ok() };
    if let Some(rest) = target.strip_prefix("pipe:") {
        if let Some(ino) = bracketed(rest) {
            return Link::Pipe(ino);
        }
    }
    if let Some(rest) = target.strip_prefix("socket:") {
        if let Some(ino) = bracketed(rest) {
            return Link::Socket(ino);
        }
    }
    if let Some(rest) = target.strip_prefix("anon_inode:") {
        let name = rest
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(rest);
        return Link::Anon(name.to_string());
    }
    if target.starts_with('/') {
        return Link::Path;
    }
    Link::Other(target.split_once(':').and_then(|(_, rest)| bracketed(rest)))
}

/// The `eventfd-id:` (6.x) or `ino:` line of a `/proc/PID/fdinfo/N` file.
fn fdinfo_value(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// What fd `fd` of process `pid` refers to now, read through `/proc/BASE/fd` (`base` is a
/// thread of `pid`, or `pid`).
fn resolve(base: i32, pid: i32, fd: i32, peers: &mut Peers) -> Option<FileId> {
    let mut base = base;
    let target = match std::fs::read_link(format!("/proc/{base}/fd/{fd}")) {
        Ok(t) => t,
        Err(_) if base != pid => {
            base = pid;
            std::fs::read_link(format!("/proc/{base}/fd/{fd}")).ok()?
        }
        Err(_) => return None,
    };
    let target = target.to_string_lossy().into_owned();
    let (kind, inode) = match parse_link(&target) {
        Link::Pipe(ino) => (FileKind::Pipe, ino),
        Link::Socket(ino) => (FileKind::Socket, ino),
        Link::Anon(name) => {
            let info =
                std::fs::read_to_string(format!("/proc/{base}/fdinfo/{fd}")).unwrap_or_default();
            let id = if name == "eventfd" {
                fdinfo_value(&info, "eventfd-id:")
            } else {
                None
            };
            (
                FileKind::Anon,
                id.or_else(|| fdinfo_value(&info, "ino:")).unwrap_or(0),
            )
        }
        Link::Path => {
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            let meta = std::fs::metadata(format!("/proc/{base}/fd/{fd}")).ok()?;
            let ft = meta.file_type();
            let kind = if ft.is_fifo() {
                FileKind::Pipe
            } else if ft.is_socket() {
                FileKind::Socket
            } else if ft.is_file() {
                FileKind::Regular
            } else {
                FileKind::Other
            };
            (kind, meta.ino())
        }
        Link::Other(ino) => (FileKind::Other, ino.unwrap_or(0)),
    };
    let peer = if kind == FileKind::Socket {
        peers.peer(inode)
    } else {
        None
    };
    Some(FileId {
        kind,
        inode,
        peer,
        target,
    })
}

/// Finds the socket at the other end of a socket.
struct Peers {
    diag: Option<UnixDiag>,
    /// All unix sockets' peers, from one dump, while the start scan runs.
    preload: Option<HashMap<u64, Option<u64>>>,
    net: Option<(Instant, Vec<NetEntry>)>,
    warned: bool,
}

impl Peers {
    fn new() -> Peers {
        let diag = match UnixDiag::open() {
            Ok(d) => Some(d),
            Err(err) => {
                tracing::warn!(error = %err, "no NETLINK_SOCK_DIAG: unix socket peers unknown");
                None
            }
        };
        Peers {
            diag,
            preload: None,
            net: None,
            warned: false,
        }
    }

    fn preload_unix(&mut self) {
        if let Some(diag) = &self.diag {
            match diag.dump() {
                Ok(all) => self.preload = Some(all),
                Err(err) => tracing::debug!(error = %err, "sock_diag dump failed"),
            }
        }
    }

    fn drop_preload(&mut self) {
        self.preload = None;
    }

    fn peer(&mut self, ino: u64) -> Option<u64> {
        if let Some(known) = self.preload.as_ref().and_then(|p| p.get(&ino)) {
            return *known;
        }
        if let Some(diag) = &self.diag {
            match diag.query(ino) {
                Ok(Some(peer)) => return peer,
                Ok(None) => {}
                Err(err) => {
                    if !self.warned {
                        tracing::warn!(error = %err, "sock_diag query failed: unix socket peers unknown");
                        self.warned = true;
                    }
                    self.diag = None;
                }
            }
        }
        let fresh = self
            .net
            .as_ref()
            .is_some_and(|(t, _)| t.elapsed() < NET_TABLE_TTL);
        if !fresh {
            self.net = Some((Instant::now(), read_net_tables()));
        }
        self.net.as_ref().and_then(|(_, t)| inet_peer(t, ino))
    }
}

/// A `NETLINK_SOCK_DIAG` socket for unix-socket queries.
struct UnixDiag {
    fd: OwnedFd,
    seq: std::cell::Cell<u32>,
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const UDIAG_SHOW_NAME: u32 = 0x01;
const UDIAG_SHOW_PEER: u32 = 0x04;
const UNIX_DIAG_PEER: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
const UNIX_DIAG_MSG_LEN: usize = 16;

/// One answer of a sock_diag reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DiagAnswer {
    /// A unix socket: its inode and its peer's (`None`: not connected, or the peer has no
    /// inode yet, e.g. a connection not yet accepted).
    Unix { ino: u64, peer: Option<u64> },
    /// `NLMSG_ERROR` with this errno (0 is an acknowledgement).
    Error(i32),
    /// End of a dump.
    Done,
}

/// Parses a buffer of netlink messages answering a `unix_diag_req`.
pub(crate) fn parse_diag(buf: &[u8]) -> Vec<DiagAnswer> {
    let u16_at = |b: &[u8], at: usize| b.get(at..at + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]));
    let u32_at = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
    };
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(len) = u32_at(buf, pos) {
        let len = len as usize;
        if len < NLMSG_HDRLEN || pos + len > buf.len() {
            break;
        }
        let msg = &buf[pos..pos + len];
        match u16_at(msg, 4) {
            Some(NLMSG_DONE) => out.push(DiagAnswer::Done),
            Some(NLMSG_ERROR) => {
                let err = u32_at(msg, NLMSG_HDRLEN).map_or(0, |e| e as i32);
                out.push(DiagAnswer::Error(-err));
            }
            Some(SOCK_DIAG_BY_FAMILY) if len >= NLMSG_HDRLEN + UNIX_DIAG_MSG_LEN => {
                let body = &msg[NLMSG_HDRLEN..];
                let ino = u32_at(body, 4).unwrap_or(0) as u64;
                let mut peer = None;
                let mut at = UNIX_DIAG_MSG_LEN;
                while let (Some(alen), Some(atype)) = (u16_at(body, at), u16_at(body, at + 2)) {
                    let alen = alen as usize;
                    if alen < 4 || at + alen > body.len() {
                        break;
                    }
                    if atype == UNIX_DIAG_PEER {
                        peer = u32_at(body, at + 4).filter(|&p| p != 0).map(u64::from);
                    }
                    at += (alen + 3) & !3;
                }
                out.push(DiagAnswer::Unix { ino, peer });
            }
            _ => {}
        }
        pos += (len + 3) & !3;
    }
    out
}

impl UnixDiag {
    fn open() -> std::io::Result<UnixDiag> {
        // SAFETY: socket has no memory-safety preconditions.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a valid timeval for the duration of the call.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Ok(UnixDiag {
            fd,
            seq: std::cell::Cell::new(1),
        })
    }

    fn send(&self, ino: u32, dump: bool) -> std::io::Result<u32> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut req = Vec::with_capacity(40);
        let flags = libc::NLM_F_REQUEST as u16 | if dump { libc::NLM_F_DUMP as u16 } else { 0 };
        req.extend_from_slice(&40u32.to_ne_bytes());
        req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        req.extend_from_slice(&flags.to_ne_bytes());
        req.extend_from_slice(&seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        // struct unix_diag_req
        req.push(libc::AF_UNIX as u8);
        req.push(0);
        req.extend_from_slice(&0u16.to_ne_bytes());
        req.extend_from_slice(&u32::MAX.to_ne_bytes()); // all states
        req.extend_from_slice(&ino.to_ne_bytes());
        req.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_PEER).to_ne_bytes());
        req.extend_from_slice(&u32::MAX.to_ne_bytes()); // no cookie
        req.extend_from_slice(&u32::MAX.to_ne_bytes());
        // SAFETY: `req` is valid for its length; the kernel address is zero-initialized.
        let rc = unsafe {
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(seq)
    }

    fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// The peer of unix socket `ino`: `Ok(None)` when `ino` is not a unix socket,
    /// `Ok(Some(None))` when it has no peer.
    fn query(&self, ino: u64) -> std::io::Result<Option<Option<u64>>> {
        let Ok(ino32) = u32::try_from(ino) else {
            return Ok(None);
        };
        self.send(ino32, false)?;
        let mut buf = vec![0u8; 8192];
        let n = self.recv(&mut buf)?;
        for answer in parse_diag(&buf[..n]) {
            match answer {
                DiagAnswer::Unix { ino: i, peer } if i == ino => return Ok(Some(peer)),
                DiagAnswer::Error(e) if e == libc::ENOENT => return Ok(None),
                DiagAnswer::Error(0) => {}
                DiagAnswer::Error(e) => return Err(std::io::Error::from_raw_os_error(e)),
                _ => {}
            }
        }
        Ok(None)
    }

    /// Every unix socket's peer.
    fn dump(&self) -> std::io::Result<HashMap<u64, Option<u64>>> {
        self.send(0, true)?;
        let mut all = HashMap::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = self.recv(&mut buf)?;
            if n == 0 {
                return Ok(all);
            }
            for answer in parse_diag(&buf[..n]) {
                match answer {
                    DiagAnswer::Unix { ino, peer } => {
                        all.insert(ino, peer);
                    }
                    DiagAnswer::Done => return Ok(all),
                    DiagAnswer::Error(0) => {}
                    DiagAnswer::Error(e) => return Err(std::io::Error::from_raw_os_error(e)),
                }
            }
        }
    }
}

/// One line of `/proc/net/{tcp,tcp6,udp,udp6}`, addresses as IPv6 (IPv4 mapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NetEntry {
    /// `true` for TCP, `false` for UDP.
    pub(crate) tcp: bool,
    pub(crate) local: ([u8; 16], u16),
    pub(crate) remote: ([u8; 16], u16),
    pub(crate) inode: u64,
}

/// Parses `ADDR:PORT` as printed by `/proc/net/tcp` (`0100007F:1F90`) or `tcp6`: each
/// 32-bit word in host byte order, port in hex.
fn parse_net_addr(text: &str) -> Option<([u8; 16], u16)> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut out = [0u8; 16];
    match addr.len() {
        8 => {
            let word = u32::from_str_radix(addr, 16).ok()?;
            out[10] = 0xff;
            out[11] = 0xff;
            out[12..].copy_from_slice(&word.to_ne_bytes());
        }
        32 => {
            for i in 0..4 {
                let word = u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).ok()?;
                out[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
            }
        }
        _ => return None,
    }
    Some((out, port))
}

/// Parses the text of one `/proc/net/{tcp,tcp6,udp,udp6}` file.
pub(crate) fn parse_net_table(text: &str, tcp: bool) -> Vec<NetEntry> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            Some(NetEntry {
                tcp,
                local: parse_net_addr(f.get(1)?)?,
                remote: parse_net_addr(f.get(2)?)?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

fn read_net_tables() -> Vec<NetEntry> {
    let mut all = Vec::new();
    for (file, tcp) in [
        ("tcp", true),
        ("tcp6", true),
        ("udp", false),
        ("udp6", false),
    ] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/net/{file}")) {
            all.extend(parse_net_table(&text, tcp));
        }
    }
    all
}

/// The inode of the socket at the other end of socket `ino` (a loopback connection).
pub(crate) fn inet_peer(table: &[NetEntry], ino: u64) -> Option<u64> {
    let me = table.iter().find(|e| e.inode == ino && ino != 0)?;
    if me.remote.1 == 0 {
        return None;
    }
    table
        .iter()
        .find(|e| {
            e.tcp == me.tcp
                && e.inode != 0
                && e.inode != ino
                && e.local == me.remote
                && e.remote == me.local
        })
        .map(|e| e.inode)
}

/// Writes `files/NNNNNN.jsonl.zst`: lines buffered, appended as zstd frames.
struct Writer {
    dir: PathBuf,
    /// Bytes `files/` may use (`None`: no cap).
    budget: Option<u64>,
    file_cap: u64,
    current: Option<Current>,
    /// Completed files, oldest first, with their sizes.
    done: VecDeque<(PathBuf, u64)>,
    done_bytes: u64,
    buf: Vec<u8>,
    files_written: u32,
}

struct Current {
    file: File,
    path: PathBuf,
    bytes: u64,
    /// Bytes of the snapshot frame the file started with.
    snapshot_bytes: u64,
    unsynced: bool,
}

impl Writer {
    fn new(dir: &Path, budget: Option<u64>) -> Writer {
        Writer {
            dir: dir.to_path_buf(),
            budget,
            file_cap: budget.map_or(UNCAPPED_FILE_BYTES, |b| (b / 4).max(16 << 10)),
            current: None,
            done: VecDeque::new(),
            done_bytes: 0,
            buf: Vec::new(),
            files_written: 0,
        }
    }

    fn line(&mut self, line: &FileLine) {
        // Serializing these plain structs to a Vec cannot fail.
        if serde_json::to_writer(&mut self.buf, line).is_ok() {
            self.buf.push(b'\n');
        }
    }

    fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the current file is full (counting only what follows its snapshot, so a
    /// large table does not start a new file at every flush).
    fn wants_new_file(&self) -> bool {
        !self.buf.is_empty()
            && self.current.as_ref().is_some_and(|c| {
                c.bytes >= self.file_cap && c.bytes - c.snapshot_bytes >= self.file_cap / 2
            })
    }

    /// Completes the current file and starts file `seq` with a snapshot line and `lines`
    /// (written before anything buffered). The first file's snapshot is the buffered start
    /// scan itself.
    fn begin(&mut self, seq: u32, ts: u64, lines: &[FileLine]) -> Result<(), RecordError> {
        if let Some(mut cur) = self.current.take() {
            sync(&mut cur)?;
            self.done_bytes += cur.bytes;
            self.done.push_back((cur.path, cur.bytes));
        }
        let path = tracedir::files_path(&self.dir, seq);
        let file = sysinfo::create_private(&path)?;
        sysinfo::sync_dir(&tracedir::files_dir(&self.dir))?;
        self.files_written = seq + 1;
        self.current = Some(Current {
            file,
            path,
            bytes: 0,
            snapshot_bytes: 0,
            unsynced: false,
        });
        let pending = std::mem::take(&mut self.buf);
        self.line(&FileLine::Snapshot { seq, ts });
        for l in lines {
            self.line(l);
        }
        if !lines.is_empty() || seq == 0 {
            if seq == 0 {
                // The start scan (buffered before the file existed) is the first snapshot.
                self.buf.extend_from_slice(&pending);
                self.write_frame()?;
            } else {
                self.write_frame()?;
                self.buf = pending;
            }
            if let Some(cur) = self.current.as_mut() {
                cur.snapshot_bytes = cur.bytes;
            }
        } else {
            self.buf.extend_from_slice(&pending);
        }
        self.enforce();
        Ok(())
    }

    fn write_frame(&mut self) -> Result<(), RecordError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(cur) = self.current.as_mut() else {
            return Ok(());
        };
        let frame =
            zstd::bulk::compress(&self.buf, super::reader::CHUNK_ZSTD_LEVEL).map_err(|source| {
                RecordError::Compress {
                    path: cur.path.clone(),
                    source,
                }
            })?;
        cur.file
            .write_all(&frame)
            .map_err(|source| RecordError::io("writing", &cur.path, source))?;
        cur.bytes += frame.len() as u64;
        cur.unsynced = true;
        self.buf.clear();
        self.enforce();
        Ok(())
    }

    fn sync(&mut self) -> Result<(), RecordError> {
        match self.current.as_mut() {
            Some(cur) => sync(cur),
            None => Ok(()),
        }
    }

    /// Deletes the oldest completed files while `files/` is over its share of the ring.
    fn enforce(&mut self) {
        let Some(budget) = self.budget else {
            return;
        };
        let current = self.current.as_ref().map_or(0, |c| c.bytes);
        while self.done_bytes + current > budget {
            let Some((path, bytes)) = self.done.pop_front() else {
                return;
            };
            self.done_bytes -= bytes;
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "ring: deleted the oldest files record")
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "cannot delete an old files record")
                }
            }
        }
    }
}

fn sync(cur: &mut Current) -> Result<(), RecordError> {
    if cur.unsynced {
        cur.file
            .sync_data()
            .map_err(|source| RecordError::io("syncing", &cur.path, source))?;
        cur.unsynced = false;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn links() {
        assert_eq!(parse_link("pipe:[4026]"), Link::Pipe(4026));
        assert_eq!(parse_link("socket:[12345]"), Link::Socket(12345));
        assert_eq!(
            parse_link("anon_inode:[eventfd]"),
            Link::Anon("eventfd".into())
        );
        assert_eq!(
            parse_link("anon_inode:inotify"),
            Link::Anon("inotify".into())
        );
        assert_eq!(parse_link("/tmp/a file (deleted)"), Link::Path);
        assert_eq!(
            parse_link("net:[4026531840]"),
            Link::Other(Some(4026531840))
        );
        assert_eq!(parse_link("pipe:[x]"), Link::Other(None));
        assert_eq!(parse_link("weird"), Link::Other(None));
        assert_eq!(
            fdinfo_value(
                "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\neventfd-count:\t0\neventfd-id: 7\n",
                "eventfd-id:"
            ),
            Some(7)
        );
    }

    /// A reply as the kernel sends it (x86-64, little endian): one `unix_diag_msg` for inode
    /// 148 with a name attribute and a peer attribute (147), then `NLMSG_DONE`; then an
    /// `NLMSG_ERROR` with -ENOENT.
    #[test]
    fn sock_diag_answers() {
        #[rustfmt::skip]
        let buf: Vec<u8> = vec![
            // nlmsghdr: len 48, type 20, flags 2 (multi), seq 5, pid 0
            48, 0, 0, 0, 20, 0, 2, 0, 5, 0, 0, 0, 0, 0, 0, 0,
            // unix_diag_msg: family 1, type 1 (stream), state 1, pad, ino 148, cookie
            1, 1, 1, 0, 148, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0,
            // rtattr UNIX_DIAG_NAME: len 5 ("a"), padded to 8
            5, 0, 0, 0, b'a', 0, 0, 0,
            // rtattr UNIX_DIAG_PEER: len 8, peer 147
            8, 0, 2, 0, 147, 0, 0, 0,
            // NLMSG_DONE
            20, 0, 0, 0, 3, 0, 2, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            // NLMSG_ERROR: error -2, then the request header
            36, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 254, 255, 255, 255,
            40, 0, 0, 0, 20, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(
            parse_diag(&buf),
            vec![
                DiagAnswer::Unix {
                    ino: 148,
                    peer: Some(147)
                },
                DiagAnswer::Done,
                DiagAnswer::Error(libc::ENOENT),
            ]
        );
        // A listening socket (no peer attribute), and a cut message that is ignored.
        #[rustfmt::skip]
        let buf: Vec<u8> = vec![
            32, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
            1, 1, 10, 0, 200, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            44, 0, 0, 0, 20, 0,
        ];
        assert_eq!(
            parse_diag(&buf),
            vec![DiagAnswer::Unix {
                ino: 456,
                peer: None
            }]
        );
    }

    #[test]
    fn net_tables_give_loopback_peers() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1000 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1\n\
   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 20 4 30 10 -1\n\
   3: 0A00020F:C351 08080808:0035 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1\n";
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0000000000000000FFFF00000100007F:1F91 0000000000000000FFFF00000100007F:C352 01 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 20 4 30 10 -1\n\
   1: 00000000000000000000000001000000:1F92 00000000000000000000000001000000:C353 01 00000000:00000000 00:00000000 00000000     0        0 2004 1 0000000000000000 20 4 30 10 -1\n\
   2: 00000000000000000000000001000000:C353 00000000000000000000000001000000:1F92 01 00000000:00000000 00:00000000 00000000     0        0 2005 1 0000000000000000 20 4 30 10 -1\n";
        let v4 = "   0: 0100007F:C352 0100007F:1F91 01 00000000:00000000 00:00000000 00000000     0        0 2001 1\n";
        let mut table = parse_net_table(tcp, true);
        assert_eq!(table.len(), 4);
        assert_eq!(table[0].local.1, 8080);
        assert_eq!(&table[0].local.0[12..], &[127, 0, 0, 1]);
        table.extend(parse_net_table(tcp6, true));
        table.extend(parse_net_table(&format!("header\n{v4}"), true));
        assert_eq!(inet_peer(&table, 1001), Some(1002));
        assert_eq!(inet_peer(&table, 1002), Some(1001));
        assert_eq!(inet_peer(&table, 1000), None, "listening");
        assert_eq!(inet_peer(&table, 1003), None, "remote host");
        // An IPv4 client of a dual-stack server: the v4-mapped address matches.
        assert_eq!(inet_peer(&table, 2001), Some(2002));
        assert_eq!(inet_peer(&table, 2002), Some(2001));
        // ::1 on both ends.
        assert_eq!(inet_peer(&table, 2004), Some(2005));
        // UDP and TCP tables never pair with each other.
        let udp = parse_net_table(&format!("header\n{v4}"), false);
        assert_eq!(inet_peer(&[udp[0], table[5]], 2001), None);
    }

    #[test]
    fn the_ring_keeps_files_under_their_share_and_the_table_whole() {
        use argus_schema::{Nanos, Pid};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        sysinfo::create_dir_private(&tracedir::files_dir(dir)).unwrap();
        let budget = 64 << 10;
        let mut st = State::new(0, Writer::new(dir, Some(budget)));
        st.procs.insert(1, Process::default());
        let early = FileId {
            kind: FileKind::Pipe,
            inode: 42,
            peer: None,
            target: "pipe:[42]".into(),
        };
        st.set(1, 3, 100, Some(early), "start");
        st.writer.begin(0, 100, &[]).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = FileId {
                kind: FileKind::Regular,
                inode: x,
                peer: None,
                target: format!("/tmp/{x:016x}"),
            };
            st.last_ts = 200 + i;
            st.set(1, 10 + (i % 50) as i32, 200 + i, Some(id), "syscall");
            if i % 200 == 199 {
                st.flush(false).unwrap();
            }
        }
        st.flush(true).unwrap();
        let files: Vec<_> = std::fs::read_dir(tracedir::files_dir(dir))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .collect();
        let total: u64 = files.iter().sum();
        assert!(total <= budget, "{total} bytes in {} files", files.len());
        assert!(st.writer.files_written > 3, "{}", st.writer.files_written);
        assert!(!tracedir::files_path(dir, 0).exists(), "the oldest is gone");
        // The table is whole: the first record survives in the snapshots.
        let t = crate::files::FileTable::read(dir, false).unwrap();
        let found = t.lookup(Pid(1), 3, Nanos(1 << 40)).unwrap();
        assert_eq!((found.inode, found.kind), (42, FileKind::Pipe));
        let last = t
            .lookup(Pid(1), 10 + (19_999 % 50), Nanos(1 << 40))
            .unwrap();
        assert_eq!(last.inode, x);
    }

    /// `resolve` and the peer lookups on this process's own descriptors (no tracing needed).
    #[test]
    fn resolves_own_pipes_and_unix_and_tcp_peers() {
        use std::os::unix::fs::MetadataExt;
        let ino = |fd: i32| {
            std::fs::metadata(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .ino()
        };
        let (ua, ub) = std::os::unix::net::UnixStream::pair().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut p = [0i32; 2];
        // SAFETY: `p` holds two ints.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let me = std::process::id() as i32;
        let tmp = tempfile::tempdir().unwrap();
        let mut st = State::new(0, Writer::new(tmp.path(), None));
        st.procs.insert(me, Process::default());
        st.rescan(me, me, 5, "scan");
        let got = |fd: i32| {
            st.procs[&me].fds[&fd]
                .id
                .clone()
                .unwrap_or_else(|| panic!("fd {fd} unknown"))
        };
        let (fa, fb) = (ua.as_raw_fd(), ub.as_raw_fd());
        assert_eq!(
            (got(fa).kind, got(fa).inode, got(fa).peer),
            (FileKind::Socket, ino(fa), Some(ino(fb)))
        );
        assert_eq!(got(fb).peer, Some(ino(fa)));
        let (fc, fs) = (client.as_raw_fd(), server.as_raw_fd());
        assert_eq!(got(fc).peer, Some(ino(fs)), "tcp client");
        assert_eq!(got(fs).peer, Some(ino(fc)), "tcp server side");
        assert_eq!(got(listener.as_raw_fd()).peer, None, "listening");
        let (r, w) = (got(p[0]), got(p[1]));
        assert_eq!((r.kind, r.inode), (FileKind::Pipe, ino(p[0])));
        assert_eq!(r.inode, w.inode);
        assert_eq!(r.target, format!("pipe:[{}]", r.inode));
        // SAFETY: closing our own descriptors.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
        // A second rescan does not restate what did not change (other tests of this process
        // may have opened files meanwhile).
        st.procs.get_mut(&me).unwrap().last_scan = None;
        st.rescan(me, me, 6, "scan");
        for fd in [fa, fb, fc, fs] {
            assert_eq!(st.procs[&me].fds[&fd].ts, 5, "fd {fd}");
        }
    }

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
        let (_start_tx, start_rx) = crossbeam_channel::bounded(1);
        let tracker = FdTracker::new(Path::new("."), &set, start_rx, None, None);
        let mut scan = tracker.scan();
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
        let got: Vec<Msg> = tracker.rx.try_iter().collect();
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

    #[test]
    fn a_close_ends_the_identity_and_a_reused_number_is_the_new_file() {
        use argus_schema::{Nanos, Pid};
        let mut p = [0i32; 2];
        // SAFETY: `p` holds two ints.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let (pr, pw) = (p[0], p[1]);
        let pipe_target = std::fs::read_link(format!("/proc/self/fd/{pr}")).unwrap();
        let me = std::process::id() as i32;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        sysinfo::create_dir_private(&tracedir::files_dir(dir)).unwrap();
        let mut st = State::new(0, Writer::new(dir, None));
        st.procs.insert(me, Process::default());
        st.tgid.insert(me, me);
        st.writer.begin(0, 1, &[]).unwrap();
        st.handle(&mut vec![Msg::Fd {
            tid: me,
            fd: pr,
            ts: 10,
        }]);
        st.handle(&mut vec![Msg::Close {
            tid: me,
            fd: pr,
            ts: 20,
        }]);
        // The number reused for /dev/null (dup2 closes the pipe end and reuses it at once).
        let null = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: both are descriptors this test owns; `pr` is replaced atomically.
        assert_eq!(unsafe { libc::dup2(null.as_raw_fd(), pr) }, pr);
        st.handle(&mut vec![Msg::Fd {
            tid: me,
            fd: pr,
            ts: 30,
        }]);
        // Created and closed within one batch: /proc cannot show it, so it is unknown from
        // its creation; the close adds nothing.
        st.handle(&mut vec![
            Msg::Close {
                tid: me,
                fd: pw,
                ts: 50,
            },
            Msg::Fd {
                tid: me,
                fd: pw,
                ts: 40,
            },
        ]);
        // A close read before the creation it ends (another CPU's page came first).
        st.handle(&mut vec![Msg::Close {
            tid: me,
            fd: null.as_raw_fd(),
            ts: 70,
        }]);
        st.handle(&mut vec![Msg::Fd {
            tid: me,
            fd: null.as_raw_fd(),
            ts: 60,
        }]);
        // close_range over known descriptors.
        let fake = |n: u64| FileId {
            kind: FileKind::Regular,
            inode: n,
            peer: None,
            target: format!("/tmp/{n}"),
        };
        st.set(me, 900, 5, Some(fake(1)), "start");
        st.set(me, 901, 5, Some(fake(2)), "start");
        st.handle(&mut vec![Msg::CloseRange {
            tid: me,
            first: 900,
            last: u32::MAX,
            ts: 80,
        }]);
        st.flush(true).unwrap();
        // SAFETY: closing descriptors this test owns.
        unsafe {
            libc::close(pr);
            libc::close(pw);
        }
        assert_eq!(st.stats.closes, 4, "{:?}", st.stats);

        let t = crate::files::FileTable::read(dir, false).unwrap();
        let at = |fd: i32, ts: u64| t.lookup(Pid(me), fd, Nanos(ts)).map(|f| f.target.clone());
        assert_eq!(
            at(pr, 15).as_deref(),
            pipe_target.to_str(),
            "open: the pipe"
        );
        assert_eq!(at(pr, 25), None, "closed: not the pipe any more");
        assert_eq!(at(pr, 35).as_deref(), Some("/dev/null"), "reused");
        assert_eq!((at(pw, 45), at(pw, 55)), (None, None));
        assert_eq!(at(null.as_raw_fd(), 65), None);
        assert_eq!(at(900, 75).as_deref(), Some("/tmp/1"));
        assert_eq!((at(900, 85), at(901, 85)), (None, None));
        // A new file restates the table: the closes survive the ring deleting older files.
        let lines = st.snapshot_lines();
        assert!(lines.contains(&FileLine::Unknown {
            ts: 80,
            pid: me,
            fd: 901
        }));
    }
}
