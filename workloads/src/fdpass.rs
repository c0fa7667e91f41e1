//! `argus workload fd-pass` (hidden): file descriptors whose identity is known by
//! construction, for the file-identity live test (`tests/fds.rs`).
//!
//! ```text
//!  main ── pipe2 (A) ─────────────────────── read "hello", later "passed"
//!   │  ── socketpair (sa, sb), unix listener (abstract name) ── accept → conn
//!   ├─ fork: writer  ── write(A's write end, "hello")              (inherited fd)
//!   └─ fork: receiver ── closes A, fills the freed numbers with /dev/null,
//!                        connect(listener) → client; recvmsg(sb) ← SCM_RIGHTS(A's write end)
//!                        from main over sa → new fd N; write(N, "passed")
//!  main ── fcntl(A's write end, F_DUPFD, 100) → D; write(D, "dup"); close(D);
//!          fcntl(/dev/null, F_DUPFD_CLOEXEC, 100) → D again (the number reused); read(D)
//! ```
//!
//! Every step leaves the descriptors open for a few hundred milliseconds, so the recorder's
//! fd tracker (which reads `/proc` up to ~100 ms after a syscall) sees them. Prints one JSON
//! line with the pids, descriptor numbers and inodes (`fstat`).

use anyhow::{bail, Context, Result};
use std::io;
use std::thread::sleep;
use std::time::Duration;

/// How long each step keeps its descriptors before the next one.
const STEP: Duration = Duration::from_millis(300);
/// The lowest number `fcntl(F_DUPFD)` may give: above every descriptor the workload has.
const DUP_MIN: libc::c_int = 100;

fn check(rc: libc::c_int, what: &str) -> Result<libc::c_int> {
    if rc < 0 {
        return Err(io::Error::last_os_error()).context(what.to_string());
    }
    Ok(rc)
}

fn set_name(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
    }
}

fn inode(fd: libc::c_int) -> Result<u64> {
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writes.
    check(unsafe { libc::fstat(fd, &mut st) }, "fstat")?;
    Ok(st.st_ino)
}

fn write_all(fd: libc::c_int, mut data: &[u8]) -> Result<()> {
    while !data.is_empty() {
        // SAFETY: `data` is valid for reads of its length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err).context("write");
        }
        data = &data[n as usize..];
    }
    Ok(())
}

fn read_exact(fd: libc::c_int, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        // SAFETY: the tail of `buf` is valid for writes.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), len - got) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err).context("read");
        }
        if n == 0 {
            bail!("read: end of file after {got} of {len} bytes");
        }
        got += n as usize;
    }
    Ok(buf)
}

/// The abstract unix address `\0argus-fdpass-PID`.
fn listen_addr(pid: i32) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name = format!("argus-fdpass-{pid}");
    for (i, b) in name.bytes().enumerate() {
        addr.sun_path[i + 1] = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    (addr, len as libc::socklen_t)
}

/// Runs `f` on a `msghdr` for one byte (`byte`) with a control buffer sized for one
/// descriptor (`CMSG_SPACE(sizeof(int))`); the buffers live until `f` returns.
fn with_fd_msg<R>(byte: &mut [u8; 1], f: impl FnOnce(&mut libc::msghdr) -> R) -> R {
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    f(&mut msg)
}

/// Sends one byte and descriptor `fd` over unix socket `sock`.
fn send_fd(sock: libc::c_int, fd: libc::c_int) -> Result<()> {
    let n = with_fd_msg(&mut [b'F'], |msg| {
        // SAFETY: `msg` has a control buffer of CMSG_SPACE(sizeof(int)) bytes, so the first
        // header and its data fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
        }
        // SAFETY: `msg` is fully initialized.
        unsafe { libc::sendmsg(sock, msg, 0) }
    });
    if n != 1 {
        return Err(io::Error::last_os_error()).context("sendmsg(SCM_RIGHTS)");
    }
    Ok(())
}

/// Receives one byte and one descriptor from unix socket `sock`.
fn recv_fd(sock: libc::c_int) -> Result<libc::c_int> {
    with_fd_msg(&mut [0u8], |msg| {
        // SAFETY: `msg` points to live buffers.
        let n = unsafe { libc::recvmsg(sock, msg, libc::MSG_CMSG_CLOEXEC) };
        if n != 1 {
            return Err(io::Error::last_os_error()).context("recvmsg(SCM_RIGHTS)");
        }
        // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR checks its length.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(msg);
            if cmsg.is_null()
                || (*cmsg).cmsg_level != libc::SOL_SOCKET
                || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            {
                bail!("recvmsg: no SCM_RIGHTS descriptor received");
            }
            Ok(std::ptr::read_unaligned(
                libc::CMSG_DATA(cmsg).cast::<libc::c_int>(),
            ))
        }
    })
}

fn fork() -> Result<libc::pid_t> {
    // SAFETY: the workload is single-threaded here, so the child may run any code.
    check(unsafe { libc::fork() }, "fork")
}

/// Ends a forked child without running the parent's exit handlers.
fn child_exit(result: Result<()>) -> ! {
    let code = match result {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("argus workload fd-pass: child: {err:#}");
            1
        }
    };
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// The receiver: see the module docs.
fn receiver(main_pid: i32, pr: i32, pw: i32, sb: i32) -> Result<()> {
    set_name("argus-fdp-recv");
    // Free the inherited pipe ends and fill their numbers, so the descriptor received
    // below gets a number this process never had.
    // SAFETY: closing descriptors this process owns.
    unsafe {
        libc::close(pr);
        libc::close(pw);
    }
    let null = c"/dev/null";
    for _ in 0..2 {
        // SAFETY: a valid NUL-terminated path.
        check(
            unsafe { libc::open(null.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) },
            "open /dev/null",
        )?;
    }
    // SAFETY: socket has no memory-safety preconditions.
    let client = check(
        unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) },
        "socket",
    )?;
    let (addr, len) = listen_addr(main_pid);
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    check(
        unsafe { libc::connect(client, (&addr as *const libc::sockaddr_un).cast(), len) },
        "connect",
    )?;
    let mut hello = Vec::new();
    hello.extend_from_slice(&(client as i64).to_le_bytes());
    hello.extend_from_slice(&inode(client)?.to_le_bytes());
    write_all(client, &hello)?;
    let received = recv_fd(sb)?;
    sleep(STEP);
    write_all(received, b"passed")?;
    write_all(client, &(received as i64).to_le_bytes())?;
    // Longer than the other steps: the received descriptor is only learnt by a rescan,
    // which a loaded machine may delay.
    sleep(3 * STEP);
    Ok(())
}

/// Runs the workload; prints its JSON line.
pub fn run() -> Result<()> {
    set_name("argus-fdp-main");
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut p = [0; 2];
    // SAFETY: `p` holds two ints.
    check(
        unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) },
        "pipe2",
    )?;
    let (pr, pw) = (p[0], p[1]);
    let mut sv = [0; 2];
    // SAFETY: `sv` holds two ints.
    check(
        unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        },
        "socketpair",
    )?;
    let (sa, sb) = (sv[0], sv[1]);
    // SAFETY: socket has no memory-safety preconditions.
    let listener = check(
        unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) },
        "socket",
    )?;
    let (addr, len) = listen_addr(pid);
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    check(
        unsafe { libc::bind(listener, (&addr as *const libc::sockaddr_un).cast(), len) },
        "bind",
    )?;
    // SAFETY: listen has no memory-safety preconditions.
    check(unsafe { libc::listen(listener, 4) }, "listen")?;
    sleep(STEP);

    let writer = fork()?;
    if writer == 0 {
        set_name("argus-fdp-write");
        // SAFETY: closing a descriptor this process owns.
        unsafe { libc::close(pr) };
        let result = write_all(pw, b"hello");
        sleep(STEP);
        child_exit(result);
    }
    let hello = read_exact(pr, 5)?;

    let receiver_pid = fork()?;
    if receiver_pid == 0 {
        child_exit(receiver(pid, pr, pw, sb));
    }
    // SAFETY: accept4 accepts null address pointers.
    let conn = check(
        unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        },
        "accept4",
    )?;
    let info = read_exact(conn, 16)?;
    let word = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        a
    };
    let client_fd = i64::from_le_bytes(word(&info[..8]));
    let client_ino = u64::from_le_bytes(word(&info[8..]));
    sleep(STEP);
    send_fd(sa, pw)?;
    let passed = read_exact(pr, 6)?;
    let received_fd = i64::from_le_bytes(word(&read_exact(conn, 8)?));
    for child in [writer, receiver_pid] {
        let mut status = 0;
        // SAFETY: `status` is valid for writes.
        check(unsafe { libc::waitpid(child, &mut status, 0) }, "waitpid")?;
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!("child {child} failed (wait status {status})");
        }
    }
    // fcntl(F_DUPFD): the pipe's write end at a fresh number, used, closed, and the number
    // reused by fcntl(F_DUPFD_CLOEXEC) of /dev/null (the lowest free one from DUP_MIN).
    // SAFETY: fcntl on a descriptor this process owns.
    let dup = check(
        unsafe { libc::fcntl(pw, libc::F_DUPFD, DUP_MIN) },
        "fcntl(F_DUPFD)",
    )?;
    write_all(dup, b"dup")?;
    let dup_said = read_exact(pr, 3)?;
    sleep(STEP);
    // SAFETY: closing a descriptor this process owns.
    check(unsafe { libc::close(dup) }, "close")?;
    sleep(STEP);
    // SAFETY: a valid NUL-terminated path.
    let null_fd = check(
        unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) },
        "open /dev/null",
    )?;
    // SAFETY: fcntl on a descriptor this process owns.
    let reused = check(
        unsafe { libc::fcntl(null_fd, libc::F_DUPFD_CLOEXEC, DUP_MIN) },
        "fcntl(F_DUPFD_CLOEXEC)",
    )?;
    let mut byte = [0u8; 1];
    // SAFETY: `byte` is valid for writes of one byte.
    let n = unsafe { libc::read(reused, byte.as_mut_ptr().cast(), 1) };
    if n != 0 {
        bail!("read of /dev/null returned {n}");
    }
    sleep(STEP);
    let json = serde_json::json!({
        "workload": "fd-pass",
        "pid": pid,
        "writer_pid": writer,
        "receiver_pid": receiver_pid,
        "pipe_read_fd": pr,
        "pipe_write_fd": pw,
        "pipe_ino": inode(pr)?,
        "pair_fds": [sa, sb],
        "pair_inos": [inode(sa)?, inode(sb)?],
        "listener_fd": listener,
        "listener_ino": inode(listener)?,
        "conn_fd": conn,
        "conn_ino": inode(conn)?,
        "client_fd": client_fd,
        "client_ino": client_ino,
        "received_fd": received_fd,
        "dup_fd": dup,
        "dup_said": String::from_utf8_lossy(&dup_said),
        "null_fd": null_fd,
        "reused_fd": reused,
        "said": [String::from_utf8_lossy(&hello), String::from_utf8_lossy(&passed)],
    });
    println!("{json}");
    Ok(())
}
