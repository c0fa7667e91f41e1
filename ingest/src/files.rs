//! File identity: what each file descriptor of each process referred to, over time.
//!
//! The live recorder (`linux::fds`) writes `files/NNNNNN.jsonl.zst` into the trace
//! directory (`docs/trace-dir.md`, "File identity"): the descriptors of every process at
//! recording start, then one line per descriptor created while recording, each stamped with
//! the creating syscall's time, plus process creations (`fork` lines). [`FileTable`] reads
//! them back and answers "what was fd 5 of process 1234 at time T":
//!
//! ```text
//!  files/000000.jsonl.zst   snapshot (scan at start) · fd · fd · fork · fd · unknown ...
//!  files/000001.jsonl.zst   snapshot (the table restated) · fd · ...      (ring may delete 0)
//!        │
//!        ▼  FileTable::read: every line of every file, deduplicated, sorted by time
//!  lookup(pid, fd, ts) = the latest record of (pid, fd) at or before ts, made since pid's
//!                        latest fork before ts; none → the parent's table at fork time
//! ```
//!
//! **Peers.** A socket's `peer` is the inode of the socket at the other end (unix sockets
//! through `NETLINK_SOCK_DIAG`, TCP/UDP over loopback through `/proc/net/*`). One end may
//! have been read before the other existed (a client connects before the server accepts);
//! the table completes such records from the other end's (`A.peer = B` gives `B.peer = A`).
//!
//! **Closes.** `close` and `close_range` are recorded as `unknown` lines at the syscall's
//! time: from then on [`FileTable::lookup`] gives `None` for the descriptor, until its
//! number is reused (the new file's record). Closes by `exec` (close-on-exec) and by process
//! exit are not recorded, nor a `close` whose entry and exit the recorder read on different
//! CPUs (`docs/trace-dir.md`, "File identity").
//!
//! **Limits.** Identities come from `/proc`, read shortly after the creating syscall: a
//! descriptor closed before that (a short-lived process, or a fast close-and-reuse) is
//! `unknown` from its creation on ([`FileTable::lookup`] gives `None`), and descriptors made
//! without a recorded syscall that returns them (`SCM_RIGHTS` receipts, `pipe2`,
//! `socketpair`) are learnt by rescanning the process, stamped with the time of the syscall
//! that triggered the rescan.

use crate::tracedir::{self, FileLine};
use argus_schema::{Nanos, Pid};
use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

/// What kind of file a descriptor refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FileKind {
    /// A pipe or FIFO (both ends share the inode).
    Pipe,
    /// A socket.
    Socket,
    /// A regular file.
    Regular,
    /// An anonymous inode (eventfd, timerfd, signalfd, epoll, ...).
    Anon,
    /// Anything else (directories, devices, namespaces, ...).
    Other,
}

impl FileKind {
    /// The name used in the trace directory (`pipe`, `socket`, `regular`, `anon`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Pipe => "pipe",
            FileKind::Socket => "socket",
            FileKind::Regular => "regular",
            FileKind::Anon => "anon",
            FileKind::Other => "other",
        }
    }

    /// The kind named `name`; unknown names are [`FileKind::Other`].
    pub fn from_name(name: &str) -> FileKind {
        match name {
            "pipe" => FileKind::Pipe,
            "socket" => FileKind::Socket,
            "regular" => FileKind::Regular,
            "anon" => FileKind::Anon,
            _ => FileKind::Other,
        }
    }
}

/// What a descriptor refers to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    /// The kind of file.
    pub kind: FileKind,
    /// Its inode (for pipes and sockets the bracketed number of `pipe:[N]`; for an eventfd
    /// its `eventfd-id`, since every anonymous inode shares one inode).
    pub inode: u64,
    /// For a connected socket, the inode of the socket at the other end, when known.
    pub peer: Option<u64>,
    /// The `/proc/PID/fd/N` link text.
    pub target: String,
}

impl FileId {
    /// What an `fd` line says: `(ts, pid, fd, identity)`; `None` for other lines.
    pub fn of_line(line: FileLine) -> Option<(u64, i32, i32, FileId)> {
        match line {
            FileLine::Fd {
                ts,
                pid,
                fd,
                kind,
                ino,
                peer,
                target,
                ..
            } => Some((
                ts,
                pid,
                fd,
                FileId {
                    kind: FileKind::from_name(&kind),
                    inode: ino,
                    peer,
                    target,
                },
            )),
            _ => None,
        }
    }
}

/// A file-identity file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// Reading failed.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file, relative to the trace directory.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The zstd stream is corrupt or cut short.
    #[error("{}: corrupt zstd stream after {decompressed} decompressed bytes: {source}", file.display())]
    Corrupt {
        /// The file, relative to the trace directory.
        file: PathBuf,
        /// Bytes decompressed before the error.
        decompressed: u64,
        /// zstd's complaint.
        source: std::io::Error,
    },
    /// A line is not a valid record.
    #[error("{}: offset {offset}: bad record: {reason}", file.display())]
    BadLine {
        /// The file, relative to the trace directory.
        file: PathBuf,
        /// Byte offset of the line in the decompressed content.
        offset: u64,
        /// Why.
        reason: String,
    },
}

impl FilesError {
    /// The file the error is about (relative to the trace directory).
    pub fn file(&self) -> &Path {
        match self {
            FilesError::Io { file, .. }
            | FilesError::Corrupt { file, .. }
            | FilesError::BadLine { file, .. } => file,
        }
    }
}

/// No identity: the descriptor's record says `unknown`.
const UNKNOWN: u32 = u32::MAX;
/// How many forks a lookup follows back to an ancestor at most.
const MAX_FORK_DEPTH: usize = 256;

/// One record: `(ts, pid, fd, index into ids or UNKNOWN)`.
type Rec = (u64, i32, i32, u32);

/// What every descriptor referred to over the recording (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct FileTable {
    ids: Vec<FileId>,
    /// Every record, sorted by (ts, pid, fd), without duplicates.
    records: Vec<Rec>,
    /// Per (pid, fd): `(ts, id)` sorted by time.
    by_fd: HashMap<(i32, i32), Vec<(u64, u32)>>,
    /// Per child pid: `(ts, parent)` of each fork that created a process with that pid.
    births: HashMap<i32, Vec<(u64, i32)>>,
    /// Notifications the recorder dropped.
    lost: u64,
    /// Files read.
    files: usize,
    /// Files whose cut last frame was dropped (trace still recording, or recorder died).
    recovered_tails: usize,
}

impl FileTable {
    /// Reads `dir/files/*.jsonl.zst`. A trace without them (older traces, imported ones)
    /// gives an empty table. `recording`: the trace is still being written (or its recorder
    /// died), so the newest file may end in a cut frame or line, which is dropped; a file
    /// deleted by the ring while reading is skipped. Otherwise any damage is an error naming
    /// the file and the offset.
    pub fn read(dir: &Path, recording: bool) -> Result<FileTable, FilesError> {
        let fdir = tracedir::files_dir(dir);
        let rel = |p: &Path| p.strip_prefix(dir).unwrap_or(p).to_path_buf();
        let entries = match std::fs::read_dir(&fdir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(FileTable::default()),
            Err(source) => {
                return Err(FilesError::Io {
                    file: rel(&fdir),
                    source,
                })
            }
        };
        let mut files: Vec<(u64, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let seq = name.to_str()?.strip_suffix(".jsonl.zst")?.parse().ok()?;
                Some((seq, e.path()))
            })
            .collect();
        files.sort();
        let mut builder = Builder::default();
        let last = files.len().saturating_sub(1);
        for (i, (_, path)) in files.iter().enumerate() {
            let tolerant = recording && i == last;
            let data = match std::fs::read(path) {
                Ok(d) => d,
                Err(e) if recording && e.kind() == ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(FilesError::Io {
                        file: rel(path),
                        source,
                    })
                }
            };
            let cut = builder.add_file(&rel(path), &data, tolerant)?;
            builder.table.files += 1;
            if cut {
                builder.table.recovered_tails += 1;
                tracing::warn!(
                    "{}: cut last frame (the trace is still recording or its recorder died); \
                     keeping the complete records",
                    rel(path).display()
                );
            }
        }
        Ok(builder.finish())
    }

    /// Builds a table from records already parsed (tests, importers).
    pub fn from_lines(lines: impl IntoIterator<Item = FileLine>) -> FileTable {
        let mut builder = Builder::default();
        for line in lines {
            builder.line(line);
        }
        builder.finish()
    }

    /// What fd `fd` of process `pid` referred to at `ts`: the latest record at or before
    /// `ts`; a child with no record of its own falls back to its parent's table at fork
    /// time. `None` when unknown: no record, the descriptor was closed (`close`,
    /// `close_range`), or it was closed before `/proc` could be read.
    pub fn lookup(&self, pid: Pid, fd: i32, ts: Nanos) -> Option<&FileId> {
        let (mut pid, mut ts) = (pid.0, ts.0);
        for _ in 0..MAX_FORK_DEPTH {
            let birth = self.births.get(&pid).and_then(|b| {
                let i = b.partition_point(|&(t, _)| t <= ts);
                i.checked_sub(1).map(|i| b[i])
            });
            if let Some(list) = self.by_fd.get(&(pid, fd)) {
                let i = list.partition_point(|&(t, _)| t <= ts);
                if let Some(&(t, id)) = i.checked_sub(1).map(|i| &list[i]) {
                    if birth.is_none_or(|(born, _)| t >= born) {
                        return self.ids.get(id as usize);
                    }
                }
            }
            let (born, parent) = birth?;
            (pid, ts) = (parent, born);
        }
        None
    }

    /// Records (known identities, not `unknown` ones).
    pub fn len(&self) -> usize {
        self.records.iter().filter(|r| r.3 != UNKNOWN).count()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All records in time order: `(pid, fd, ts, what it refers to from ts on)`.
    pub fn records(&self) -> impl Iterator<Item = (Pid, i32, Nanos, &FileId)> + '_ {
        self.records.iter().filter_map(|&(ts, pid, fd, id)| {
            Some((Pid(pid), fd, Nanos(ts), self.ids.get(id as usize)?))
        })
    }

    /// Every record in time order, `unknown` ones included as `None`: from `ts` on, what
    /// the descriptor refers to is not known (it was closed, or closed before `/proc` could
    /// be read).
    /// A map built from [`FileTable::records`] alone would keep the previous identity over
    /// such a stretch; at one `(pid, fd, ts)` the last entry is the one that counts.
    pub fn entries(&self) -> impl Iterator<Item = (Pid, i32, Nanos, Option<&FileId>)> + '_ {
        self.records
            .iter()
            .map(|&(ts, pid, fd, id)| (Pid(pid), fd, Nanos(ts), self.ids.get(id as usize)))
    }

    /// Process creations in time order: `(ts, parent, child)`.
    pub fn forks(&self) -> Vec<(Nanos, Pid, Pid)> {
        let mut forks: Vec<_> = self
            .births
            .iter()
            .flat_map(|(&child, b)| {
                b.iter()
                    .map(move |&(ts, p)| (Nanos(ts), Pid(p), Pid(child)))
            })
            .collect();
        forks.sort();
        forks
    }

    /// Syscall notifications the recorder dropped (identities possibly missing).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Files read.
    pub fn files(&self) -> usize {
        self.files
    }

    /// Files whose cut last frame was dropped.
    pub fn recovered_tails(&self) -> usize {
        self.recovered_tails
    }
}

#[derive(Default)]
struct Builder {
    table: FileTable,
    interned: HashMap<FileId, u32>,
    records: Vec<Rec>,
    forks: Vec<(u64, i32, i32)>,
}

impl Builder {
    /// Adds the lines of one file. Returns whether a cut tail was dropped (only when
    /// `tolerant`).
    fn add_file(&mut self, file: &Path, data: &[u8], tolerant: bool) -> Result<bool, FilesError> {
        let mut text = Vec::new();
        let mut cut = false;
        let mut decoder =
            zstd::stream::read::Decoder::new(data).map_err(|source| FilesError::Corrupt {
                file: file.to_path_buf(),
                decompressed: 0,
                source,
            })?;
        let limit = crate::inflate::limit_for(data.len() as u64);
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match decoder.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if (text.len() + n) as u64 > limit => {
                    return Err(FilesError::Corrupt {
                        file: file.to_path_buf(),
                        decompressed: text.len() as u64,
                        source: crate::inflate::too_large(limit),
                    })
                }
                Ok(n) => text.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) if tolerant => {
                    cut = true;
                    break;
                }
                Err(source) => {
                    return Err(FilesError::Corrupt {
                        file: file.to_path_buf(),
                        decompressed: text.len() as u64,
                        source,
                    })
                }
            }
        }
        let mut offset = 0usize;
        while offset < text.len() {
            let Some(len) = text[offset..].iter().position(|&b| b == b'\n') else {
                if tolerant {
                    cut = true;
                    break;
                }
                return Err(FilesError::BadLine {
                    file: file.to_path_buf(),
                    offset: offset as u64,
                    reason: "last line has no newline (cut short)".into(),
                });
            };
            let line = &text[offset..offset + len];
            if !line.iter().all(u8::is_ascii_whitespace) {
                let parsed: FileLine =
                    serde_json::from_slice(line).map_err(|e| FilesError::BadLine {
                        file: file.to_path_buf(),
                        offset: offset as u64,
                        reason: e.to_string(),
                    })?;
                self.line(parsed);
            }
            offset += len + 1;
        }
        Ok(cut)
    }

    fn line(&mut self, line: FileLine) {
        match line {
            FileLine::Fd { .. } => {
                if let Some((ts, pid, fd, id)) = FileId::of_line(line) {
                    let id = self.intern(id);
                    self.records.push((ts, pid, fd, id));
                }
            }
            FileLine::Unknown { ts, pid, fd } => self.records.push((ts, pid, fd, UNKNOWN)),
            FileLine::Fork { ts, parent, child } => self.forks.push((ts, parent, child)),
            // Saturating: the counts are the recorder's, but the file may not be (issue 18).
            FileLine::Lost { messages, .. } => {
                self.table.lost = self.table.lost.saturating_add(messages)
            }
            FileLine::Snapshot { .. } | FileLine::Exit { .. } | FileLine::Other => {}
        }
    }

    fn intern(&mut self, id: FileId) -> u32 {
        if let Some(&i) = self.interned.get(&id) {
            return i;
        }
        let i = self.table.ids.len() as u32;
        self.interned.insert(id.clone(), i);
        self.table.ids.push(id);
        i
    }

    fn finish(mut self) -> FileTable {
        // A socket whose other end was read first: complete it from that end.
        let mut peer_of: HashMap<u64, u64> = HashMap::new();
        for id in &self.table.ids {
            if let (FileKind::Socket, Some(peer)) = (id.kind, id.peer) {
                peer_of.entry(id.inode).or_insert(peer);
                peer_of.entry(peer).or_insert(id.inode);
            }
        }
        let mut remap: HashMap<u32, u32> = HashMap::new();
        for i in 0..self.table.ids.len() {
            let id = &self.table.ids[i];
            if id.kind == FileKind::Socket && id.peer.is_none() {
                if let Some(&peer) = peer_of.get(&id.inode) {
                    let mut filled = id.clone();
                    filled.peer = Some(peer);
                    let j = self.intern(filled);
                    remap.insert(i as u32, j);
                }
            }
        }
        for rec in &mut self.records {
            if let Some(&j) = remap.get(&rec.3) {
                rec.3 = j;
            }
        }
        self.records.sort_unstable();
        self.records.dedup();
        // Several records of one fd at one time (a snapshot restating a record, two
        // syscalls in the same nanosecond): the last in sort order wins, `unknown` last.
        let mut by_fd: HashMap<(i32, i32), Vec<(u64, u32)>> = HashMap::new();
        for &(ts, pid, fd, id) in &self.records {
            let list = by_fd.entry((pid, fd)).or_default();
            match list.last_mut() {
                Some(last) if last.0 == ts => last.1 = id,
                _ => list.push((ts, id)),
            }
        }
        self.forks.sort_unstable();
        self.forks.dedup();
        let mut births: HashMap<i32, Vec<(u64, i32)>> = HashMap::new();
        for &(ts, parent, child) in &self.forks {
            births.entry(child).or_default().push((ts, parent));
        }
        self.table.records = self.records;
        self.table.by_fd = by_fd;
        self.table.births = births;
        self.table
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;

    fn fd(ts: u64, pid: i32, fd: i32, kind: &str, ino: u64, peer: Option<u64>) -> FileLine {
        FileLine::Fd {
            ts,
            pid,
            fd,
            kind: kind.into(),
            ino,
            peer,
            target: format!("{kind}:[{ino}]"),
            src: "syscall".into(),
        }
    }

    fn encode(lines: &[FileLine]) -> Vec<u8> {
        let mut text = Vec::new();
        for l in lines {
            serde_json::to_writer(&mut text, l).unwrap();
            text.push(b'\n');
        }
        text
    }

    #[test]
    fn latest_record_at_or_before_wins_and_children_inherit() {
        let t = FileTable::from_lines([
            fd(10, 1, 3, "pipe", 100, None),
            fd(20, 1, 3, "socket", 200, Some(201)),
            FileLine::Fork {
                ts: 15,
                parent: 1,
                child: 2,
            },
            fd(30, 2, 3, "regular", 300, None),
            FileLine::Unknown {
                ts: 40,
                pid: 1,
                fd: 3,
            },
        ]);
        let ino = |pid, fd, ts| t.lookup(Pid(pid), fd, Nanos(ts)).map(|f| f.inode);
        assert_eq!(ino(1, 3, 9), None);
        assert_eq!(ino(1, 3, 10), Some(100));
        assert_eq!(ino(1, 3, 19), Some(100));
        assert_eq!(ino(1, 3, 25), Some(200));
        assert_eq!(ino(1, 3, 40), None, "unknown from 40 on");
        // The child: the parent's table at fork time (15), until its own record at 30.
        assert_eq!(ino(2, 3, 16), Some(100));
        assert_eq!(ino(2, 3, 30), Some(300));
        assert_eq!(ino(2, 3, 14), None, "not born yet");
        assert_eq!(t.len(), 3);
        assert_eq!(t.forks(), vec![(Nanos(15), Pid(1), Pid(2))]);
        assert_eq!(t.entries().count(), 4);
        assert_eq!(
            t.entries().last().map(|e| e.3),
            Some(None),
            "the unknown at 40"
        );
        let recs: Vec<_> = t
            .records()
            .map(|(p, f, ts, id)| (p.0, f, ts.0, id.inode))
            .collect();
        assert_eq!(
            recs,
            vec![(1, 3, 10, 100), (1, 3, 20, 200), (2, 3, 30, 300)]
        );
    }

    #[test]
    fn a_reused_pid_does_not_see_the_old_process_records() {
        let t = FileTable::from_lines([
            fd(10, 7, 4, "pipe", 1, None),
            FileLine::Fork {
                ts: 50,
                parent: 1,
                child: 7,
            },
            fd(5, 1, 4, "pipe", 2, None),
        ]);
        assert_eq!(t.lookup(Pid(7), 4, Nanos(20)).map(|f| f.inode), Some(1));
        assert_eq!(t.lookup(Pid(7), 4, Nanos(60)).map(|f| f.inode), Some(2));
    }

    #[test]
    fn peers_are_completed_from_the_other_end_and_duplicates_removed() {
        let t = FileTable::from_lines([
            fd(10, 1, 3, "socket", 500, None),
            fd(12, 2, 4, "socket", 501, Some(500)),
            fd(12, 2, 4, "socket", 501, Some(500)),
        ]);
        assert_eq!(t.len(), 2);
        let a = t.lookup(Pid(1), 3, Nanos(11)).unwrap();
        assert_eq!((a.kind, a.peer), (FileKind::Socket, Some(501)));
    }

    #[test]
    fn reads_frames_and_recovers_a_cut_tail_only_while_recording() {
        let dir = tempfile::tempdir().unwrap();
        let fdir = tracedir::files_dir(dir.path());
        std::fs::create_dir_all(&fdir).unwrap();
        let first = encode(&[
            FileLine::Snapshot { seq: 0, ts: 1 },
            fd(1, 1, 0, "pipe", 9, None),
        ]);
        let second = encode(&[fd(5, 1, 1, "pipe", 9, None)]);
        let mut data = zstd::bulk::compress(&first, 1).unwrap();
        let whole = data.len();
        data.extend(zstd::bulk::compress(&second, 1).unwrap());
        let path = tracedir::files_path(dir.path(), 0);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data[..data.len() - 3])
            .unwrap();
        let t = FileTable::read(dir.path(), true).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.recovered_tails(), 1);
        let err = FileTable::read(dir.path(), false).unwrap_err();
        assert!(matches!(err, FilesError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().starts_with(&format!(
                "files/000000.jsonl.zst: corrupt zstd stream after {}",
                first.len()
            )),
            "{err}"
        );
        // A bad line names the file and its offset.
        std::fs::write(
            &path,
            zstd::bulk::compress(b"{\"type\":\"fd\"}\n", 1).unwrap(),
        )
        .unwrap();
        let err = FileTable::read(dir.path(), false).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("files/000000.jsonl.zst: offset 0: bad record"),
            "{err}"
        );
        // Whole frames only: fine either way.
        std::fs::write(&path, &data[..whole]).unwrap();
        assert_eq!(FileTable::read(dir.path(), false).unwrap().len(), 1);
    }

    #[test]
    fn no_files_directory_is_an_empty_table() {
        let dir = tempfile::tempdir().unwrap();
        let t = FileTable::read(dir.path(), false).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.lookup(Pid(1), 0, Nanos(0)), None);
    }

    /// `lost` lines whose counts add up past `u64::MAX` saturate instead of overflowing.
    // See: issue 18 (fuzzing), target `files` (docs/fuzzing.md).
    #[test]
    fn gh_18_lost_counts_saturate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tracedir::files_dir(dir.path())).unwrap();
        let lost = |messages| FileLine::Lost { ts: 1, messages };
        let text = encode(&[lost(u64::MAX), lost(1), lost(7)]);
        let z = zstd::bulk::compress(&text, 1).unwrap();
        std::fs::write(tracedir::files_path(dir.path(), 0), z).unwrap();
        let t = FileTable::read(dir.path(), false).unwrap();
        assert_eq!(t.lost(), u64::MAX);
        assert_eq!(t.files(), 1);
    }

    /// A few kilobytes that decompress past the bound (64 MiB for a small file) are an error
    /// naming the file, not a read into memory without end.
    // See: issue 18 (resource limits), docs/fuzzing.md.
    #[test]
    fn gh_18_zstd_bomb_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tracedir::files_dir(dir.path())).unwrap();
        let bomb = argus_testkit::zstd_rle_bomb(1 << 30, b'\n');
        assert!(bomb.len() < 40_000);
        std::fs::write(tracedir::files_path(dir.path(), 0), &bomb).unwrap();
        for recording in [false, true] {
            let err = FileTable::read(dir.path(), recording).unwrap_err();
            let FilesError::Corrupt {
                file, decompressed, ..
            } = &err
            else {
                panic!("{err:?}");
            };
            assert_eq!(file, Path::new("files/000000.jsonl.zst"));
            assert!(*decompressed <= crate::inflate::MIN_LIMIT, "{err}");
            assert!(
                err.to_string().ends_with(&format!(
                    "decompresses to more than {} bytes: not a file Argus wrote",
                    crate::inflate::MIN_LIMIT
                )),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_line_types_are_ignored() {
        let line: FileLine = serde_json::from_str(r#"{"type":"future","x":1}"#).unwrap();
        assert_eq!(line, FileLine::Other);
    }
}
