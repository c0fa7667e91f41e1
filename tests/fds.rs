//! File identity, live: `argus record -- argus workload fd-pass` (see `workloads/src/fdpass.rs`), then
//! `TraceReader::files()` must say what each descriptor of the workload referred to, checked
//! against the inodes the workload read with `fstat`.

use crate::common::{live_or_skip, record_scenario_with, recorded_truth};
use argus_ingest::files::{FileKind, FileTable};
use argus_ingest::replay::TraceReader;
use argus_schema::{EventKind, Nanos, Pid, Tid};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

/// The time of the last `sys_enter` of syscall `nr` by `tid` whose first argument is `fd`
/// (the last: the dynamic loader reads libraries through the same low numbers first).
fn syscall_ts(events: &[argus_schema::Event], tid: i32, nr: i32, fd: i64) -> Nanos {
    events
        .iter()
        .rev()
        .find(|e| {
            e.tid == Tid(tid)
                && matches!(e.kind, EventKind::SysEnter { nr: n, args } if n == nr && args[0] == fd as u64)
        })
        .map(|e| e.ts)
        .unwrap_or_else(|| panic!("no syscall {nr} on fd {fd} by {tid} in the trace"))
}

fn num(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn descriptors_are_identified_across_fork_sockets_and_scm_rights() {
    if !live_or_skip("descriptors_are_identified_across_fork_sockets_and_scm_rights") {
        return;
    }
    // A descriptor open before recording starts (close-on-exec: the recorder doesn't get it).
    let mut early = [0i32; 2];
    // SAFETY: `early` holds two ints.
    assert_eq!(
        unsafe { libc::pipe2(early.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writes.
    assert_eq!(unsafe { libc::fstat(early[0], &mut st) }, 0);
    let early_ino = st.st_ino;

    let dir = tempfile::tempdir().expect("tempdir");
    let (trace, _, out) = record_scenario_with("fd-pass", dir.path(), None, &[]);
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(early[0]);
        libc::close(early[1]);
    }
    let truth = recorded_truth(&out);
    assert_eq!(
        truth["said"],
        serde_json::json!(["hello", "passed"]),
        "{truth}"
    );

    // The files are private, like everything in a trace directory.
    let files_dir = trace.join("files");
    let first = files_dir.join("000000.jsonl.zst");
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&first), 0o600);
    assert_eq!(mode(&files_dir), 0o700);

    let reader = TraceReader::open(&trace).expect("open trace");
    let start = Nanos(reader.meta().start_ns);
    let table: FileTable = reader.files().expect("files");
    assert!(!table.is_empty());
    assert_eq!(table.lost(), 0, "no notification dropped");
    let events: Vec<_> = reader
        .events()
        .collect::<Result<_, _>>()
        .expect("events decode");

    let pid = num(&truth["pid"]) as i32;
    let writer = num(&truth["writer_pid"]) as i32;
    let receiver = num(&truth["receiver_pid"]) as i32;
    let pipe_ino = num(&truth["pipe_ino"]) as u64;
    let (pr, pw) = (num(&truth["pipe_read_fd"]), num(&truth["pipe_write_fd"]));
    let read = argus_schema::syscalls::number("read").expect("read");
    let write = argus_schema::syscalls::number("write").expect("write");
    let lookup = |p: i32, fd: i64, ts: Nanos| {
        table
            .lookup(Pid(p), fd as i32, ts)
            .unwrap_or_else(|| panic!("fd {fd} of {p} at {ts}: unknown"))
    };

    // Known before recording started: the test's own pipe, from the scan at start.
    let own = lookup(std::process::id() as i32, early[0] as i64, start);
    assert_eq!(
        (own.kind, own.inode),
        (FileKind::Pipe, early_ino),
        "{own:?}"
    );

    // (a) Both ends of the pipe, in two processes: the writer inherited its end by fork.
    let at = syscall_ts(&events, pid, read, pr);
    let r = lookup(pid, pr, at);
    assert_eq!((r.kind, r.inode), (FileKind::Pipe, pipe_ino), "{r:?}");
    assert_eq!(r.target, format!("pipe:[{pipe_ino}]"));
    let at = syscall_ts(&events, writer, write, pw);
    let w = lookup(writer, pw, at);
    assert_eq!((w.kind, w.inode), (FileKind::Pipe, pipe_ino), "{w:?}");

    // (b) The socketpair's ends are each other's peers.
    let pair: Vec<i64> = truth["pair_fds"]
        .as_array()
        .expect("pair")
        .iter()
        .map(num)
        .collect();
    let inos: Vec<u64> = truth["pair_inos"]
        .as_array()
        .expect("inos")
        .iter()
        .map(|v| num(v) as u64)
        .collect();
    let end = Nanos(reader_end(&trace));
    let a = lookup(pid, pair[0], end);
    let b = lookup(pid, pair[1], end);
    assert_eq!(
        (a.kind, a.inode, a.peer),
        (FileKind::Socket, inos[0], Some(inos[1]))
    );
    assert_eq!(
        (b.kind, b.inode, b.peer),
        (FileKind::Socket, inos[1], Some(inos[0]))
    );
    // ... and the listener's accepted connection is the receiver's client's peer.
    let conn_ino = num(&truth["conn_ino"]) as u64;
    let client_ino = num(&truth["client_ino"]) as u64;
    let conn = lookup(pid, num(&truth["conn_fd"]), end);
    assert_eq!(
        (conn.inode, conn.peer),
        (conn_ino, Some(client_ino)),
        "{conn:?}"
    );
    let client = lookup(receiver, num(&truth["client_fd"]), end);
    assert_eq!(
        (client.inode, client.peer),
        (client_ino, Some(conn_ino)),
        "{client:?}"
    );
    let listener = lookup(pid, num(&truth["listener_fd"]), end);
    assert_eq!(
        (listener.inode, listener.peer),
        (num(&truth["listener_ino"]) as u64, None)
    );

    // (c) The pipe's write end passed over the socketpair: the receiver's new descriptor
    // (a number it never had before) is the sender's pipe when it writes "passed".
    let n = num(&truth["received_fd"]);
    assert!(n != pr && n != pw, "received fd {n} is a fresh number");
    let at = syscall_ts(&events, receiver, write, n);
    let passed = lookup(receiver, n, at);
    assert_eq!(
        (passed.kind, passed.inode),
        (FileKind::Pipe, pipe_ino),
        "{passed:?}"
    );
    // The receiver's inherited pipe numbers were reopened on /dev/null: its own records win
    // over the parent's table from then on.
    let null = lookup(receiver, pw, at);
    assert_eq!(null.target, "/dev/null", "{null:?}");

    // (d) fcntl(F_DUPFD) of the pipe's write end is the pipe while it is open; after its
    // close the number is not the pipe any more; reused by fcntl(F_DUPFD_CLOEXEC) of
    // /dev/null, it is /dev/null.
    assert_eq!(truth["dup_said"], "dup", "{truth}");
    let (dup, reused) = (num(&truth["dup_fd"]), num(&truth["reused_fd"]));
    assert_eq!(dup, reused, "the number is reused: {truth}");
    let at = syscall_ts(&events, pid, write, dup);
    let d = lookup(pid, dup, at);
    assert_eq!((d.kind, d.inode), (FileKind::Pipe, pipe_ino), "{d:?}");
    let close = argus_schema::syscalls::number("close").expect("close");
    let fcntl = argus_schema::syscalls::number("fcntl").expect("fcntl");
    let closed_at = syscall_ts(&events, pid, close, dup);
    // The fcntl that reuses the number starts after the close returned.
    let reuse_at = syscall_ts(&events, pid, fcntl, num(&truth["null_fd"]));
    assert!(closed_at < reuse_at && at < closed_at);
    assert_eq!(
        table.lookup(Pid(pid), dup as i32, reuse_at),
        None,
        "closed: not the pipe any more"
    );
    let at = syscall_ts(&events, pid, read, reused);
    let r = lookup(pid, reused, at);
    assert_eq!(r.target, "/dev/null", "{r:?}");
}

fn reader_end(trace: &std::path::Path) -> u64 {
    let meta: Value =
        serde_json::from_slice(&std::fs::read(trace.join("meta.json")).expect("meta.json"))
            .expect("meta parses");
    meta["end_ns"].as_u64().expect("end_ns")
}
