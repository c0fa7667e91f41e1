//! Workloads for the Argus inaccuracy patterns (paper §3), with ground truth known by
//! construction, run as `argus workload NAME`. Each prints one JSON line with the ids the
//! graph tests need (process, threads, descriptors, addresses); `tests/graph_rules.rs`
//! records them and checks the event graph's segments and edges.
//!
//! - `batch-server`: one thread serves three clients through epoll on unix socket pairs,
//!   handling every ready client in one run (batching): the message peer-set rule must split
//!   the run so no segment links one client's request to another's reply.
//! - `convoy`: four threads contend on one pthread mutex: the lock hand-offs are weak.
//! - `reply`: a receiver thread reads requests and hands them over a condition variable to a
//!   worker thread, which sends the reply: the reply edge comes from the worker.
//! - `timer`: one thread arms a timerfd, another sleeps reading it while a third spins on a
//!   CPU: the expiry's wake-up is attributed to the armer, not to the interrupted task.
//! - `kwork`: writes to a pseudo-terminal are pushed to the reader by a kernel work item
//!   (`flush_to_ldisc`): work-item segments, queue edges, no thread-order chain.
//! - `pipe-dep`: a writer fills a pipe; a reader that sleeps on a timer reads it later
//!   without blocking: a data dependency with no wake-up.
//! - `sock-dep`: two client threads each connect (one over loopback TCP, one over a unix
//!   socket), send and close at once; a server thread that sleeps on a timer accepts and
//!   reads later without blocking: data dependencies through sockets whose descriptors
//!   live for a few milliseconds (the socket data events link them; fd identity mostly
//!   cannot).
//! - `net-reply`: a TCP client thread and a UDP client thread each send a request over
//!   loopback and block in `recv`; a server thread per protocol computes 5 ms and replies.
//!   The client is woken by the network softirq that delivered the reply: the data is the
//!   server's send, whatever context delivered it.
//! - `stack-loop`: one thread runs an event loop (`poll` on three pipes): callback A and
//!   callback B (two functions, each blocking inside: `nanosleep`, `clock_nanosleep`) are
//!   unrelated work, and a handler sends two requests to a backend thread and blocks in
//!   `read` for each reply: one piece of work split by its waits. Recorded with `--stacks`,
//!   the thread-order edge between the callbacks is pruned and the one across the
//!   handler's wait boosted. The loop calls every function through a frame-pointer frame
//!   (`framed`) so the kernel's frame-pointer walk sees the call sites.

use crate::Workload;
use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The pattern workloads, with one line on what each does.
pub const PATTERNS: &[Workload] = &[
    Workload::rounds(
        "batch-server",
        "one thread serves 3 clients through epoll, several per run (peer-set split)",
        batch_server,
    ),
    Workload::rounds(
        "convoy",
        "4 threads contend on a pthread mutex (weak hand-offs)",
        convoy,
    ),
    Workload::rounds(
        "reply",
        "a receiver hands requests to a worker over a condvar; the worker replies",
        reply,
    ),
    Workload::rounds(
        "timer",
        "an armer sets a timerfd a sleeper reads, while a busy thread spins",
        timer,
    ),
    Workload::rounds(
        "kwork",
        "pty writes reach the reader through a kernel work item",
        kwork,
    ),
    Workload::rounds(
        "pipe-dep",
        "a reader finds a writer's data in a pipe without blocking",
        pipe_dep,
    ),
    Workload::rounds(
        "sock-dep",
        "a server finds short-lived TCP and unix clients' data without blocking",
        sock_dep,
    ),
    Workload::rounds(
        "net-reply",
        "clients blocked in recv over loopback TCP and UDP, woken by the softirq that delivers the reply",
        net_reply,
    ),
    Workload::rounds(
        "stack-loop",
        "an event loop's unrelated callbacks and a handler blocking mid-request (--stacks)",
        stack_loop,
    ),
];

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

fn spin(d: Duration) {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < d {
        for _ in 0..1000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
}

fn check(ret: libc::c_int, what: &str) -> Result<libc::c_int> {
    if ret < 0 {
        bail!("{what}: {}", std::io::Error::last_os_error());
    }
    Ok(ret)
}

fn write_all(fd: i32, buf: &[u8]) -> Result<()> {
    // SAFETY: buf is a valid slice for the length given.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n != buf.len() as isize {
        bail!("write on fd {fd}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn read_some(fd: i32, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: buf is a valid mutable slice for the length given.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        bail!("read on fd {fd}: {}", std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

fn socketpair() -> Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors.
    check(
        unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) },
        "socketpair",
    )?;
    Ok((fds[0], fds[1]))
}

fn join<T>(h: thread::JoinHandle<Result<T>>, who: &str) -> Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("{who} panicked"))?
        .with_context(|| who.to_string())
}

/// The rounds a pattern runs for a hang of about `secs` seconds (each round about 100 ms).
pub(crate) fn rounds(secs: f64) -> usize {
    ((secs.max(0.2) * 10.0) as usize).clamp(4, 60)
}

fn batch_server(rounds: usize) -> Result<()> {
    const CLIENTS: usize = 3;
    let mut server_fds = Vec::new();
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let (s, c) = socketpair()?;
        server_fds.push(s);
        let h = thread::Builder::new()
            .name(format!("argus-client{i}"))
            .spawn(move || -> Result<(i32, i32)> {
                let me = tid();
                let mut buf = [0u8; 8];
                for _ in 0..rounds {
                    // The clients wake together (their replies come in one run) and sleep
                    // the same time, so their next requests arrive while the server spins.
                    thread::sleep(Duration::from_millis(10));
                    write_all(c, b"request!")?;
                    read_some(c, &mut buf)?;
                }
                // SAFETY: closing our own descriptor.
                unsafe { libc::close(c) };
                Ok((me, c))
            })?;
        clients.push(h);
    }
    let fds = server_fds.clone();
    let server = thread::Builder::new().name("argus-server".into()).spawn(
        move || -> Result<(i32, usize)> {
            // Rounds that served two clients or more (the batches the peer-set split
            // must undo: the load of the machine decides how many).
            let mut batched = 0;
            // SAFETY: plain syscalls on descriptors we own; `evs` has room for 8 events.
            unsafe {
                let ep = check(libc::epoll_create1(0), "epoll_create1")?;
                for (i, fd) in fds.iter().enumerate() {
                    let mut ev = libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: i as u64,
                    };
                    check(
                        libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, *fd, &mut ev),
                        "epoll_ctl",
                    )?;
                }
                let mut open = fds.len();
                let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
                let mut buf = [0u8; 8];
                while open > 0 {
                    check(libc::epoll_wait(ep, evs.as_mut_ptr(), 8, -1), "epoll_wait")?;
                    // Batching: let the other clients' requests arrive, then serve every
                    // ready client in this one run.
                    spin(Duration::from_millis(3));
                    let n = check(libc::epoll_wait(ep, evs.as_mut_ptr(), 8, 0), "epoll_wait")?;
                    let mut served = 0;
                    for ev in evs.iter().take(n as usize) {
                        let fd = fds[ev.u64 as usize];
                        if read_some(fd, &mut buf)? == 0 {
                            libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
                            open -= 1;
                            continue;
                        }
                        write_all(fd, b"reply!!!")?;
                        served += 1;
                    }
                    batched += usize::from(served >= 2);
                }
                Ok((tid(), batched))
            }
        },
    )?;
    let mut client_tids = Vec::new();
    let mut client_fds = Vec::new();
    for (i, h) in clients.into_iter().enumerate() {
        let (t, fd) = join(h, &format!("client {i}"))?;
        client_tids.push(t);
        client_fds.push(fd);
    }
    let (server_tid, batched) = join(server, "server")?;
    println!(
        "{{\"workload\":\"batch-server\",\"pid\":{},\"server_tid\":{server_tid},\"client_tids\":{client_tids:?},\"server_fds\":{server_fds:?},\"rounds\":{rounds},\"batched_rounds\":{batched}}}",
        pid()
    );
    Ok(())
}

/// A pthread mutex or condition variable at a stable address, shared between threads.
struct Shared<T>(Box<std::cell::UnsafeCell<T>>);
// SAFETY: only used through the pthread functions, which synchronize.
unsafe impl<T> Sync for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Send for Shared<T> {}
impl<T> Shared<T> {
    fn ptr(&self) -> *mut T {
        self.0.get()
    }
}

fn convoy(rounds: usize) -> Result<()> {
    let mutex = Arc::new(Shared(Box::new(std::cell::UnsafeCell::new(
        libc::PTHREAD_MUTEX_INITIALIZER,
    ))));
    let addr = mutex.ptr() as u64;
    let mut hs = Vec::new();
    for i in 0..4 {
        let m = mutex.clone();
        hs.push(
            thread::Builder::new()
                .name(format!("argus-convoy{i}"))
                .spawn(move || -> Result<i32> {
                    for _ in 0..rounds * 20 {
                        // SAFETY: the mutex is initialized and outlives the threads.
                        unsafe {
                            libc::pthread_mutex_lock(m.ptr());
                            spin(Duration::from_micros(200));
                            libc::pthread_mutex_unlock(m.ptr());
                        }
                        spin(Duration::from_micros(20));
                    }
                    Ok(tid())
                })?,
        );
    }
    let mut tids = Vec::new();
    for (i, h) in hs.into_iter().enumerate() {
        tids.push(join(h, &format!("convoy thread {i}"))?);
    }
    println!(
        "{{\"workload\":\"convoy\",\"pid\":{},\"tids\":{tids:?},\"mutex\":{addr}}}",
        pid()
    );
    Ok(())
}

fn reply(rounds: usize) -> Result<()> {
    let (server_end, client_end) = socketpair()?;
    let mutex = Arc::new(Shared(Box::new(std::cell::UnsafeCell::new(
        libc::PTHREAD_MUTEX_INITIALIZER,
    ))));
    let cond = Arc::new(Shared(Box::new(std::cell::UnsafeCell::new(
        libc::PTHREAD_COND_INITIALIZER,
    ))));
    let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cond_addr = cond.ptr() as u64;
    let (m, c, p) = (mutex.clone(), cond.clone(), pending.clone());
    let worker =
        thread::Builder::new()
            .name("argus-worker".into())
            .spawn(move || -> Result<i32> {
                for _ in 0..rounds {
                    // SAFETY: initialized mutex and condition variable, outliving the threads.
                    unsafe {
                        libc::pthread_mutex_lock(m.ptr());
                        while p.load(Ordering::Acquire) == 0 {
                            libc::pthread_cond_wait(c.ptr(), m.ptr());
                        }
                        p.fetch_sub(1, Ordering::AcqRel);
                        libc::pthread_mutex_unlock(m.ptr());
                    }
                    // Work on the request off the CPU, so the client is surely blocked in its
                    // read when the reply comes.
                    thread::sleep(Duration::from_millis(2));
                    // The reply goes out on the connection the receiver read the request from.
                    write_all(server_end, b"reply!!!")?;
                }
                Ok(tid())
            })?;
    let (m, c, p) = (mutex.clone(), cond.clone(), pending.clone());
    let receiver =
        thread::Builder::new()
            .name("argus-receiver".into())
            .spawn(move || -> Result<i32> {
                let mut buf = [0u8; 8];
                for _ in 0..rounds {
                    read_some(server_end, &mut buf)?;
                    // SAFETY: as above.
                    unsafe {
                        libc::pthread_mutex_lock(m.ptr());
                        p.fetch_add(1, Ordering::AcqRel);
                        libc::pthread_cond_signal(c.ptr());
                        libc::pthread_mutex_unlock(m.ptr());
                    }
                }
                Ok(tid())
            })?;
    let client =
        thread::Builder::new()
            .name("argus-asker".into())
            .spawn(move || -> Result<i32> {
                let mut buf = [0u8; 8];
                for _ in 0..rounds {
                    thread::sleep(Duration::from_millis(5));
                    write_all(client_end, b"request!")?;
                    read_some(client_end, &mut buf)?;
                }
                Ok(tid())
            })?;
    let client_tid = join(client, "client")?;
    let receiver_tid = join(receiver, "receiver")?;
    let worker_tid = join(worker, "worker")?;
    println!(
        "{{\"workload\":\"reply\",\"pid\":{},\"client_tid\":{client_tid},\"receiver_tid\":{receiver_tid},\"worker_tid\":{worker_tid},\"cond\":{cond_addr}}}",
        pid()
    );
    Ok(())
}

fn timer(rounds: usize) -> Result<()> {
    // SAFETY: plain syscall.
    let tfd = check(
        unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, 0) },
        "timerfd_create",
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let busy = thread::Builder::new()
        .name("argus-busy".into())
        .spawn(move || -> Result<i32> {
            while !s2.load(Ordering::Acquire) {
                spin(Duration::from_millis(1));
            }
            Ok(tid())
        })?;
    let (armed_tx, armed_rx) = std::sync::mpsc::channel::<()>();
    let (fired_tx, fired_rx) = std::sync::mpsc::channel::<()>();
    let sleeper =
        thread::Builder::new()
            .name("argus-sleeper".into())
            .spawn(move || -> Result<i32> {
                let mut buf = [0u8; 8];
                for _ in 0..rounds {
                    read_some(tfd, &mut buf)?;
                    let _ = fired_tx.send(());
                }
                Ok(tid())
            })?;
    let armer =
        thread::Builder::new()
            .name("argus-armer".into())
            .spawn(move || -> Result<i32> {
                for _ in 0..rounds {
                    let spec = libc::itimerspec {
                        it_interval: libc::timespec {
                            tv_sec: 0,
                            tv_nsec: 0,
                        },
                        it_value: libc::timespec {
                            tv_sec: 0,
                            tv_nsec: 15_000_000,
                        },
                    };
                    // SAFETY: spec is a valid itimerspec; the old value is not wanted.
                    check(
                        unsafe { libc::timerfd_settime(tfd, 0, &spec, std::ptr::null_mut()) },
                        "timerfd_settime",
                    )?;
                    let _ = armed_tx.send(());
                    fired_rx
                        .recv()
                        .map_err(|_| anyhow::anyhow!("the sleeper stopped"))?;
                }
                Ok(tid())
            })?;
    let armer_tid = join(armer, "armer")?;
    let sleeper_tid = join(sleeper, "sleeper")?;
    stop.store(true, Ordering::Release);
    let busy_tid = join(busy, "busy thread")?;
    drop(armed_rx);
    println!(
        "{{\"workload\":\"timer\",\"pid\":{},\"armer_tid\":{armer_tid},\"sleeper_tid\":{sleeper_tid},\"busy_tid\":{busy_tid}}}",
        pid()
    );
    Ok(())
}

fn kwork(rounds: usize) -> Result<()> {
    // SAFETY: plain libc calls on descriptors we own; ptsname's buffer is copied at once.
    let (master, slave) = unsafe {
        let master = check(
            libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY),
            "posix_openpt",
        )?;
        check(libc::grantpt(master), "grantpt")?;
        check(libc::unlockpt(master), "unlockpt")?;
        let name = libc::ptsname(master);
        if name.is_null() {
            bail!("ptsname: {}", std::io::Error::last_os_error());
        }
        let slave = check(libc::open(name, libc::O_RDWR | libc::O_NOCTTY), "open pts")?;
        // Raw mode: every byte is delivered, nothing is echoed back.
        let mut t: libc::termios = std::mem::zeroed();
        check(libc::tcgetattr(slave, &mut t), "tcgetattr")?;
        libc::cfmakeraw(&mut t);
        check(libc::tcsetattr(slave, libc::TCSANOW, &t), "tcsetattr")?;
        (master, slave)
    };
    let reader = thread::Builder::new()
        .name("argus-ptyreader".into())
        .spawn(move || -> Result<i32> {
            let mut buf = [0u8; 64];
            let mut got = 0;
            while got < rounds {
                got += read_some(slave, &mut buf)?;
            }
            Ok(tid())
        })?;
    let writer = thread::Builder::new()
        .name("argus-ptywriter".into())
        .spawn(move || -> Result<i32> {
            for _ in 0..rounds {
                thread::sleep(Duration::from_millis(10));
                write_all(master, b"x")?;
            }
            Ok(tid())
        })?;
    let writer_tid = join(writer, "writer")?;
    let reader_tid = join(reader, "reader")?;
    println!(
        "{{\"workload\":\"kwork\",\"pid\":{},\"writer_tid\":{writer_tid},\"reader_tid\":{reader_tid}}}",
        pid()
    );
    Ok(())
}

/// A clock of rounds `period` apart from now: `at(k, offset)` sleeps until `offset` into
/// round `k` (at once when that has passed).
fn rounds_of(period: Duration) -> impl Fn(usize, Duration) + Copy {
    let start = Instant::now();
    move |k: usize, offset: Duration| {
        let t = start + period * k as u32 + offset;
        if let Some(d) = t.checked_duration_since(Instant::now()) {
            thread::sleep(d);
        }
    }
}

fn pipe_dep(rounds: usize) -> Result<()> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for both ends.
    check(unsafe { libc::pipe(fds.as_mut_ptr()) }, "pipe")?;
    let (rfd, wfd) = (fds[0], fds[1]);
    let period = Duration::from_millis(20);
    let at = rounds_of(period);
    let writer = thread::Builder::new()
        .name("argus-pipewriter".into())
        .spawn(move || -> Result<i32> {
            for k in 0..rounds {
                at(k, Duration::ZERO);
                write_all(wfd, b"data")?;
            }
            Ok(tid())
        })?;
    let reader = thread::Builder::new()
        .name("argus-pipereader".into())
        .spawn(move || -> Result<i32> {
            let mut buf = [0u8; 4];
            for k in 0..rounds {
                // Half a period after the write: the data is there, the read does not block.
                at(k, period / 2);
                read_some(rfd, &mut buf)?;
            }
            Ok(tid())
        })?;
    let writer_tid = join(writer, "writer")?;
    let reader_tid = join(reader, "reader")?;
    println!(
        "{{\"workload\":\"pipe-dep\",\"pid\":{},\"writer_tid\":{writer_tid},\"reader_tid\":{reader_tid},\"write_fd\":{wfd},\"read_fd\":{rfd},\"rounds\":{rounds}}}",
        pid()
    );
    Ok(())
}

fn sock_dep(rounds: usize) -> Result<()> {
    use std::io::{Read, Write};
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").context("tcp listener")?;
    let tcp_addr = tcp.local_addr()?;
    let unix_addr = SocketAddr::from_abstract_name(format!("argus-sock-dep-{}", pid()))?;
    let unix = UnixListener::bind_addr(&unix_addr).context("unix listener")?;
    let period = Duration::from_millis(20);
    let at = rounds_of(period);
    // Round k: client k % 2 connects, sends and closes at its start; the server accepts
    // and reads half a period later, when the data (and the close) are long there.
    let tcp_client = thread::Builder::new()
        .name("argus-tcpclient".into())
        .spawn(move || -> Result<i32> {
            for k in (0..rounds).step_by(2) {
                at(k, Duration::ZERO);
                std::net::TcpStream::connect(tcp_addr)?.write_all(b"data")?;
            }
            Ok(tid())
        })?;
    let unix_client = thread::Builder::new()
        .name("argus-unixclient".into())
        .spawn(move || -> Result<i32> {
            for k in (1..rounds).step_by(2) {
                at(k, Duration::ZERO);
                UnixStream::connect_addr(&unix_addr)?.write_all(b"data")?;
            }
            Ok(tid())
        })?;
    let server = thread::Builder::new()
        .name("argus-sockserver".into())
        .spawn(move || -> Result<i32> {
            let mut buf = [0u8; 4];
            for k in 0..rounds {
                at(k, period / 2);
                let n = if k % 2 == 0 {
                    tcp.accept()?.0.read(&mut buf)?
                } else {
                    unix.accept()?.0.read(&mut buf)?
                };
                if n == 0 {
                    bail!("round {k}: the client's data was not there");
                }
            }
            Ok(tid())
        })?;
    let tcp_tid = join(tcp_client, "tcp client")?;
    let unix_tid = join(unix_client, "unix client")?;
    let server_tid = join(server, "server")?;
    println!(
        "{{\"workload\":\"sock-dep\",\"pid\":{},\"tcp_client_tid\":{tcp_tid},\"unix_client_tid\":{unix_tid},\"server_tid\":{server_tid},\"rounds\":{rounds}}}",
        pid()
    );
    Ok(())
}

fn net_reply(rounds: usize) -> Result<()> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream, UdpSocket};
    let listener = TcpListener::bind("127.0.0.1:0").context("tcp listener")?;
    let tcp_addr = listener.local_addr()?;
    let udp_server = UdpSocket::bind("127.0.0.1:0").context("udp server")?;
    let udp_addr = udp_server.local_addr()?;
    let work = Duration::from_millis(5);
    let tcp_server = thread::Builder::new()
        .name("argus-tcpserver".into())
        .spawn(move || -> Result<i32> {
            let (mut c, _) = listener.accept()?;
            c.set_nodelay(true)?;
            let mut buf = [0u8; 4];
            for _ in 0..rounds {
                c.read_exact(&mut buf)?;
                spin(work);
                c.write_all(b"done")?;
            }
            Ok(tid())
        })?;
    let udp_srv = thread::Builder::new()
        .name("argus-udpserver".into())
        .spawn(move || -> Result<i32> {
            let mut buf = [0u8; 4];
            for _ in 0..rounds {
                let (_, from) = udp_server.recv_from(&mut buf)?;
                spin(work);
                udp_server.send_to(b"done", from)?;
            }
            Ok(tid())
        })?;
    let tcp_client = thread::Builder::new()
        .name("argus-tcpclient".into())
        .spawn(move || -> Result<i32> {
            let mut c = TcpStream::connect(tcp_addr)?;
            c.set_nodelay(true)?;
            let mut buf = [0u8; 4];
            for _ in 0..rounds {
                c.write_all(b"work")?;
                c.read_exact(&mut buf)?;
                thread::sleep(Duration::from_millis(5));
            }
            Ok(tid())
        })?;
    let udp_client = thread::Builder::new()
        .name("argus-udpclient".into())
        .spawn(move || -> Result<i32> {
            let c = UdpSocket::bind("127.0.0.1:0")?;
            c.connect(udp_addr)?;
            let mut buf = [0u8; 4];
            for _ in 0..rounds {
                c.send(b"work")?;
                c.recv(&mut buf)?;
                thread::sleep(Duration::from_millis(5));
            }
            Ok(tid())
        })?;
    let tcp_client_tid = join(tcp_client, "tcp client")?;
    let udp_client_tid = join(udp_client, "udp client")?;
    let tcp_server_tid = join(tcp_server, "tcp server")?;
    let udp_server_tid = join(udp_srv, "udp server")?;
    println!(
        "{{\"workload\":\"net-reply\",\"pid\":{},\"tcp_client_tid\":{tcp_client_tid},\"udp_client_tid\":{udp_client_tid},\"tcp_server_tid\":{tcp_server_tid},\"udp_server_tid\":{udp_server_tid},\"rounds\":{rounds}}}",
        pid()
    );
    Ok(())
}

// `argus_pattern_fp_call(f, arg)` calls `f(arg)` inside a frame-pointer frame (push the
// frame pointer, point it at the frame, call, pop), as code compiled with frame pointers
// does for every call. The argus binary is built without them (Rust's default), so the
// kernel's frame-pointer walk of a user stack would skip the workload's own functions; a
// function called through this shows up in the walk as the return address into its caller.
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .text.argus_pattern_fp_call,\"ax\",@progbits",
    ".globl argus_pattern_fp_call",
    ".type argus_pattern_fp_call,@function",
    ".p2align 4",
    "argus_pattern_fp_call:",
    ".cfi_startproc",
    "push rbp",
    ".cfi_def_cfa_offset 16",
    ".cfi_offset rbp, -16",
    "mov rbp, rsp",
    ".cfi_def_cfa_register rbp",
    "mov rax, rdi",
    "mov rdi, rsi",
    "call rax",
    "pop rbp",
    ".cfi_def_cfa rsp, 8",
    "ret",
    ".cfi_endproc",
    ".size argus_pattern_fp_call, .-argus_pattern_fp_call",
    ".popsection",
);

#[cfg(target_arch = "aarch64")]
std::arch::global_asm!(
    ".pushsection .text.argus_pattern_fp_call,\"ax\",@progbits",
    ".globl argus_pattern_fp_call",
    ".type argus_pattern_fp_call,@function",
    ".p2align 2",
    "argus_pattern_fp_call:",
    ".cfi_startproc",
    "stp x29, x30, [sp, #-16]!",
    ".cfi_def_cfa_offset 16",
    ".cfi_offset x29, -16",
    ".cfi_offset x30, -8",
    "mov x29, sp",
    "mov x9, x0",
    "mov x0, x1",
    "blr x9",
    "ldp x29, x30, [sp], #16",
    ".cfi_def_cfa_offset 0",
    "ret",
    ".cfi_endproc",
    ".size argus_pattern_fp_call, .-argus_pattern_fp_call",
    ".popsection",
);

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe extern "C" {
    fn argus_pattern_fp_call(f: extern "C" fn(*mut u8), arg: *mut u8);
}

/// Elsewhere: a plain call (the walk will not see it).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe extern "C" fn argus_pattern_fp_call(f: extern "C" fn(*mut u8), arg: *mut u8) {
    f(arg)
}

/// Runs `f` through `argus_pattern_fp_call`: a stack taken inside `f` shows this call's
/// return address (one per closure type, so one per call site). The workload calls every
/// function whose frame a stack should show this way, and the syscall wrappers that block,
/// as a binary built with frame pointers would show them.
#[inline(never)]
fn framed<F: FnMut()>(f: &mut F) {
    extern "C" fn call<F: FnMut()>(arg: *mut u8) {
        // SAFETY: `arg` is the `&mut F` given below, alive and unaliased for the call.
        let f = unsafe { &mut *arg.cast::<F>() };
        f();
    }
    // SAFETY: the trampoline calls `call::<F>` with the pointer it is given and returns.
    unsafe { argus_pattern_fp_call(call::<F>, (f as *mut F).cast()) }
}

fn pipe() -> Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for both ends.
    check(unsafe { libc::pipe(fds.as_mut_ptr()) }, "pipe")?;
    Ok((fds[0], fds[1]))
}

const MS: libc::timespec = libc::timespec {
    tv_sec: 0,
    tv_nsec: 1_000_000,
};

/// Callback A: takes its event, then blocks inside (in `nanosleep`, standing for its I/O).
/// False at end of input.
fn callback_a(fd: i32) -> Result<bool> {
    let mut b = [0u8; 1];
    if read_some(fd, &mut b)? == 0 {
        return Ok(false);
    }
    // SAFETY: a valid timespec; the remainder is not wanted.
    framed(&mut || unsafe {
        libc::syscall(
            libc::SYS_nanosleep,
            &MS,
            std::ptr::null_mut::<libc::timespec>(),
        );
    });
    Ok(true)
}

/// Callback B: the same, blocking in `clock_nanosleep`.
fn callback_b(fd: i32) -> Result<bool> {
    let mut b = [0u8; 1];
    if read_some(fd, &mut b)? == 0 {
        return Ok(false);
    }
    // SAFETY: as above.
    framed(&mut || unsafe {
        libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &MS, std::ptr::null_mut());
    });
    Ok(true)
}

/// The handler: one request done in two calls to the backend, blocking in `read` for each
/// reply.
fn handler(fd: i32, req: i32, rep: i32) -> Result<bool> {
    let mut b = [0u8; 8];
    if read_some(fd, &mut b[..1])? == 0 {
        return Ok(false);
    }
    for part in [&b"prepare!"[..], &b"commit!!"[..]] {
        write_all(req, part)?;
        let mut reply = Ok(0);
        framed(&mut || reply = read_some(rep, &mut b));
        reply?;
    }
    Ok(true)
}

/// The event loop: `poll` on A's, B's and the handler's pipes; each ready one is served by
/// its function, until all three are closed.
fn event_loop(fa: i32, fb: i32, fh: i32, req: i32, rep: i32) -> Result<()> {
    let mut fds = [fa, fb, fh].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let mut open = fds.len();
    while open > 0 {
        let mut n = 0;
        // SAFETY: fds is a valid array of 3 pollfds.
        framed(&mut || n = unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) });
        check(n, "poll")?;
        for (i, p) in fds.iter_mut().enumerate() {
            if p.revents == 0 {
                continue;
            }
            let mut more = Ok(true);
            match i {
                0 => framed(&mut || more = callback_a(fa)),
                1 => framed(&mut || more = callback_b(fb)),
                _ => framed(&mut || more = handler(fh, req, rep)),
            }
            if !more? {
                p.fd = -1;
                open -= 1;
            }
        }
    }
    Ok(())
}

fn stack_loop(rounds: usize) -> Result<()> {
    let (fa_r, fa_w) = pipe()?;
    let (fb_r, fb_w) = pipe()?;
    let (fh_r, fh_w) = pipe()?;
    let (req_r, req_w) = pipe()?;
    let (rep_r, rep_w) = pipe()?;
    let backend =
        thread::Builder::new()
            .name("argus-backend".into())
            .spawn(move || -> Result<i32> {
                let mut buf = [0u8; 8];
                // Each request is answered after 1 ms, so the handler surely blocks for it.
                while read_some(req_r, &mut buf)? > 0 {
                    thread::sleep(Duration::from_millis(1));
                    write_all(rep_w, b"done!!!!")?;
                }
                Ok(tid())
            })?;
    let evloop =
        thread::Builder::new()
            .name("argus-evloop".into())
            .spawn(move || -> Result<i32> {
                let mut res = Ok(());
                framed(&mut || res = event_loop(fa_r, fb_r, fh_r, req_w, rep_r));
                // SAFETY: closing our own descriptor ends the backend.
                unsafe { libc::close(req_w) };
                res.map(|()| tid())
            })?;
    for _ in 0..rounds {
        // A's and B's events together: B's is there before A's callback returns.
        write_all(fa_w, b"a")?;
        write_all(fb_w, b"b")?;
        thread::sleep(Duration::from_millis(5));
        write_all(fh_w, b"h")?;
        thread::sleep(Duration::from_millis(8));
    }
    // SAFETY: closing our own descriptors ends the loop.
    unsafe {
        libc::close(fa_w);
        libc::close(fb_w);
        libc::close(fh_w);
    }
    let loop_tid = join(evloop, "event loop")?;
    let backend_tid = join(backend, "backend")?;
    println!(
        "{{\"workload\":\"stack-loop\",\"pid\":{},\"loop_tid\":{loop_tid},\"backend_tid\":{backend_tid},\"rounds\":{rounds}}}",
        pid()
    );
    Ok(())
}
