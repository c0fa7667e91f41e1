//! Reading `/proc` for the fd tracker: the processes and threads that exist, a thread's
//! process, a process's descriptor numbers, and what one descriptor refers to
//! ([`resolve`]: the `/proc/PID/fd/N` link, plus `stat` or `fdinfo` and the socket's peer).

use super::peers::Peers;
use crate::files::{FileId, FileKind};

/// Every process in `/proc`, in pid order.
pub(super) fn pids() -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// The threads of process `pid` (`/proc/PID/task`), in directory order.
pub(super) fn threads(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// The process of thread `tid` (the `Tgid:` of `/proc/TID/status`).
pub(super) fn tgid(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The open descriptor numbers of process `pid`, in order, read through `/proc/TID/fd`
/// (`/proc/PID/fd` when thread `tid` is gone), with the id they were read through.
pub(super) fn fd_numbers(pid: i32, tid: i32) -> Option<(i32, Vec<i32>)> {
    let mut base = tid;
    let entries = match std::fs::read_dir(format!("/proc/{tid}/fd")) {
        Ok(e) => e,
        Err(_) => {
            base = pid;
            std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?
        }
    };
    let mut fds: Vec<i32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    Some((base, fds))
}

/// The text of link `/proc/BASE/fd/FD`.
pub(super) fn link_text(base: i32, fd: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/{base}/fd/{fd}"))
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
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
pub(super) fn resolve(base: i32, pid: i32, fd: i32, peers: &mut Peers) -> Option<FileId> {
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
}
