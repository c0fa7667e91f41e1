//! The fd-tracker thread ([`FdTracker`]): keeps what every descriptor of every process
//! refers to, from the readers' notifications ([`Msg`]) and `/proc`, and writes it as lines
//! of `files/` ([`FileLine`], through [`FilesWriter`]). The races it handles are described
//! in the module docs of `fds`.

use super::peers::Peers;
use super::procfs;
use super::scan::{Msg, PageScan};
use super::writer::FilesWriter;
use crate::files::{FileId, FileKind};
use crate::format::FormatSet;
use crate::linux::error::RecordError;
use crate::linux::sysinfo;
use crate::tracedir::{self, FileLine};
use crossbeam_channel::Receiver;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// At most one rescan of a process per this interval.
const RESCAN_INTERVAL: Duration = Duration::from_millis(50);
/// Buffered bytes that force a frame out before the flush interval.
const FRAME_BYTES: usize = 1 << 20;

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
    tap: Option<super::FilesTapEnds>,
}

impl FdTracker {
    /// A tracker writing into trace directory `dir`; `start` delivers the recording's start
    /// time once tracing is on (dropping it unsent ends the tracker without writing);
    /// `tap`: a live consumer's (`live.rs`).
    pub(crate) fn new(
        dir: &Path,
        formats: &FormatSet,
        start: Receiver<u64>,
        flush_interval: Option<Duration>,
        budget: Option<u64>,
        tap: Option<super::FilesTapEnds>,
    ) -> FdTracker {
        let (scan, rx) = PageScan::new(formats);
        FdTracker {
            dir: dir.to_path_buf(),
            rx,
            scan,
            start,
            recorder_pid: std::process::id() as i32,
            flush_interval,
            budget,
            tap,
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
            tap,
        } = self;
        let dropped = scan.dropped();
        // Only the readers hold senders from here on: the channel ends when they do.
        drop(scan);
        let Ok(start_ns) = start.recv() else {
            return Ok(FdStats::default());
        };
        let files_dir = tracedir::files_dir(&dir);
        sysinfo::create_dir_private(&files_dir)?;
        let mut writer = FilesWriter::new(&dir, budget)?;
        writer.tap = tap.as_ref().map(|t| t.lines.clone());
        let mut state = State::new(recorder_pid, writer);
        state.start(start_ns)?;
        // A live consumer's requests (`live.rs`); none: a channel that never delivers.
        let never = crossbeam_channel::never();
        let mut requests = tap.as_ref().map_or(&never, |t| &t.requests).clone();
        let mut last_flush = Instant::now();
        let mut batch = Vec::new();
        let mut reported_lost = 0u64;
        let mut disconnected = false;
        while !disconnected {
            let mut timeout = flush_interval.unwrap_or(Duration::from_millis(500));
            if let Some(due) = state.next_pending() {
                timeout = timeout.min(due.saturating_duration_since(Instant::now()));
            }
            let mut asked = None;
            crossbeam_channel::select! {
                recv(rx) -> msg => match msg {
                    Ok(msg) => {
                        batch.push(msg);
                        while batch.len() < 8192 {
                            match rx.try_recv() {
                                Ok(m) => batch.push(m),
                                Err(_) => break,
                            }
                        }
                    }
                    Err(_) => disconnected = true,
                },
                recv(requests) -> upto => match upto {
                    // Every notification sent for records up to `upto` is in the channel
                    // now: take them all.
                    Ok(upto) => {
                        asked = Some(upto);
                        batch.extend(rx.try_iter());
                    }
                    Err(_) => requests = never.clone(),
                },
                default(timeout) => {}
            }
            state.handle(&mut batch);
            state.run_pending(disconnected);
            if let (Some(upto), Some(t)) = (asked, &tap) {
                // Complete up to `upto`, but not past a rescan still waiting for its rate
                // limit: its lines will be stamped with the syscall that asked for it.
                let bound = state
                    .earliest_pending()
                    .map_or(upto, |p| upto.min(p.saturating_sub(1)));
                let _ = t.replies.send((upto, bound));
            }
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
        state.stats.files = state.writer.files_written();
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
    writer: FilesWriter,
    stats: FdStats,
    /// Latest notification time seen.
    last_ts: u64,
}

impl State {
    fn new(recorder_pid: i32, writer: FilesWriter) -> State {
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
        for pid in procfs::pids() {
            for tid in procfs::threads(pid) {
                self.tgid.insert(tid, pid);
            }
            if pid == self.recorder_pid {
                continue;
            }
            self.procs.insert(pid, Process::default());
            self.rescan(pid, pid, ts, "start");
        }
        self.writer.begin(ts, &[])?;
        self.peers.drop_preload();
        Ok(())
    }

    /// The process of thread `tid`, from what the trace said or `/proc`.
    fn process_of(&mut self, tid: i32) -> Option<i32> {
        if let Some(&p) = self.tgid.get(&tid) {
            return Some(p);
        }
        let tgid = procfs::tgid(tid)?;
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
                    ts,
                } => {
                    let pid = self.tgid.remove(&tid);
                    if group_dead || pid == Some(tid) {
                        if let Some(pid) = pid {
                            if self.procs.remove(&pid).is_some() {
                                self.writer.line(&FileLine::Exit { ts, pid });
                            }
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
            procfs::resolve(tid, pid, fd, &mut self.peers)
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
        let Some((base, fds)) = procfs::fd_numbers(pid, tid) else {
            return;
        };
        for fd in fds {
            let Some(target) = procfs::link_text(base, fd) else {
                continue;
            };
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
            let Some(id) = procfs::resolve(base, pid, fd, &mut self.peers) else {
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
    /// The trace time of the earliest rescan waiting for its rate limit.
    fn earliest_pending(&self) -> Option<u64> {
        self.procs.values().filter_map(|p| p.pending).min()
    }

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
            self.writer.begin(self.last_ts, &snapshot)?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_ring_keeps_files_under_their_share_and_the_table_whole() {
        use argus_schema::{Nanos, Pid};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        sysinfo::create_dir_private(&tracedir::files_dir(dir)).unwrap();
        let budget = 64 << 10;
        let mut st = State::new(0, FilesWriter::new(dir, Some(budget)).unwrap());
        st.procs.insert(1, Process::default());
        let early = FileId {
            kind: FileKind::Pipe,
            inode: 42,
            peer: None,
            target: "pipe:[42]".into(),
        };
        st.set(1, 3, 100, Some(early), "start");
        st.writer.begin(100, &[]).unwrap();
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
        assert!(
            st.writer.files_written() > 3,
            "{}",
            st.writer.files_written()
        );
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
        let mut st = State::new(0, FilesWriter::new(tmp.path(), None).unwrap());
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
        let mut st = State::new(0, FilesWriter::new(dir, None).unwrap());
        st.procs.insert(me, Process::default());
        st.tgid.insert(me, me);
        st.writer.begin(1, &[]).unwrap();
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
