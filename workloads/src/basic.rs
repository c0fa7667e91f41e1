//! Hang workloads with ground truth known by construction, run as `argus workload NAME`.
//! `argus demo` and the live end-to-end tests record them.
//!
//! Each workload names its threads (`comm`) so a diagnosis can be checked by name, and
//! prints one JSON line on stdout describing who should be blamed.

use crate::Workload;
use anyhow::{Context, Result};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// The workloads, with one line on what each does.
pub const WORKLOADS: &[Workload] = &[
    Workload::plain(
        "chain",
        "main thread waits on a worker thread, which reads a pipe from a child shell that runs `sleep 3` (LongWait; root cause: sleep)",
        chain,
    ),
    Workload::plain(
        "cpu",
        "main thread waits on a worker thread that computes for 3 s (root cause: the worker, LongRunning)",
        cpu,
    ),
    Workload::plain(
        "yield",
        "main thread polls a flag with 1 ms sleeps while a worker computes for 3 s and then sets it (RepeatedYield)",
        yield_loop,
    ),
    // Descriptors with known identities for the file-identity test.
    Workload::hidden(
        "fd-pass",
        "passes descriptors with known identities between processes (tests/fds.rs)",
        |_| crate::fdpass::run(),
    ),
    // A chain of priority-inheritance lock owners (tests/diagnosis.rs, lock owners).
    Workload::hidden(
        "pi-lock",
        "main thread blocks on a PI mutex whose owner (nice +5) blocks on one held by a thread (nice +10) computing for SECS (root cause: argus-spinner)",
        pi_lock,
    ),
    // An event loop dispatching jobs to `argus_dispatch_job` (`--dispatch`).
    Workload::hidden(
        "dispatch",
        "an event loop dispatching jobs to argus_dispatch_job (tests/dispatch.rs)",
        crate::dispatchwork::run,
    ),
    // A group-commit server whose batch misleads a walk (`--dispatch`/`--enqueue`).
    Workload::hidden(
        "group-commit",
        "a group-commit flusher batching two clients' jobs (tests/inspect.rs)",
        crate::groupcommit::run,
    ),
];

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

fn set_name(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0);
        }
    }
}

fn busy(d: Duration) -> u64 {
    let start = Instant::now();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while start.elapsed() < d {
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    }
    x
}

/// Names the calling thread as the hang's main thread and returns its tid.
fn hang_main() -> i32 {
    set_name("argus-hang-main");
    tid()
}

fn chain(secs: f64) -> Result<()> {
    let main_tid = hang_main();
    let (tx, rx) = mpsc::channel();
    let worker =
        thread::Builder::new()
            .name("argus-worker".into())
            .spawn(move || -> Result<()> {
                let mut child = Command::new("sh")
                    .arg("-c")
                    .arg(format!("sleep {secs}; echo ready"))
                    .stdout(Stdio::piped())
                    .spawn()
                    .context("starting sh")?;
                let mut out = child.stdout.take().context("child stdout")?;
                let mut buf = String::new();
                out.read_to_string(&mut buf).context("reading the pipe")?;
                child.wait().context("waiting for sh")?;
                let _ = tx.send((tid(), buf));
                Ok(())
            })?;
    let (worker_tid, text) = rx.recv().context("worker vanished")?;
    worker
        .join()
        .map_err(|_| anyhow::anyhow!("worker panicked"))??;
    println!(
        "{{\"workload\":\"chain\",\"main_tid\":{main_tid},\"worker_tid\":{worker_tid},\"root_cause_comm\":\"sleep\",\"child_said\":{:?}}}",
        text.trim()
    );
    Ok(())
}

fn cpu(secs: f64) -> Result<()> {
    let main_tid = hang_main();
    let d = Duration::from_secs_f64(secs);
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("argus-cruncher".into())
        .spawn(move || {
            let x = busy(d);
            let _ = tx.send((tid(), x));
        })?;
    let (worker_tid, _) = rx.recv().context("worker vanished")?;
    println!(
        "{{\"workload\":\"cpu\",\"main_tid\":{main_tid},\"worker_tid\":{worker_tid},\"root_cause_comm\":\"argus-cruncher\"}}"
    );
    Ok(())
}

fn yield_loop(secs: f64) -> Result<()> {
    let main_tid = hang_main();
    let d = Duration::from_secs_f64(secs);
    let flag = Arc::new(AtomicBool::new(false));
    let f2 = flag.clone();
    let worker = thread::Builder::new()
        .name("argus-setter".into())
        .spawn(move || {
            busy(d);
            f2.store(true, Ordering::Release);
            tid()
        })?;
    let mut spins = 0u64;
    while !flag.load(Ordering::Acquire) {
        thread::sleep(Duration::from_millis(1));
        spins += 1;
    }
    let worker_tid = worker
        .join()
        .map_err(|_| anyhow::anyhow!("worker panicked"))?;
    println!(
        "{{\"workload\":\"yield\",\"main_tid\":{main_tid},\"worker_tid\":{worker_tid},\"root_cause_comm\":\"argus-setter\",\"polls\":{spins}}}"
    );
    Ok(())
}

/// A `pthread` mutex with the priority-inheritance protocol (`PTHREAD_PRIO_INHERIT`):
/// contended, it is a PI futex (`FUTEX_LOCK_PI`), whose waiter the kernel lets boost the
/// owner — and records it (`sched:sched_pi_setprio`, naming the owner, in the waiter's
/// context).
struct PiMutex(std::cell::UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be shared between threads; it is only used through
// `pthread_mutex_*` after `new` initialised it in place, and never moved (it lives in an Arc).
unsafe impl Sync for PiMutex {}
// SAFETY: as above.
unsafe impl Send for PiMutex {}

impl PiMutex {
    fn new() -> Result<Arc<PiMutex>> {
        let m = Arc::new(PiMutex(std::cell::UnsafeCell::new(
            libc::PTHREAD_MUTEX_INITIALIZER,
        )));
        // SAFETY: the attribute object is initialised before use and destroyed after; the
        // mutex is initialised in place where it stays (inside the Arc).
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            anyhow::ensure!(
                libc::pthread_mutexattr_init(&mut attr) == 0,
                "mutexattr_init"
            );
            let r = libc::pthread_mutexattr_setprotocol(&mut attr, libc::PTHREAD_PRIO_INHERIT);
            anyhow::ensure!(r == 0, "PTHREAD_PRIO_INHERIT not supported ({r})");
            let r = libc::pthread_mutex_init(m.0.get(), &attr);
            libc::pthread_mutexattr_destroy(&mut attr);
            anyhow::ensure!(r == 0, "pthread_mutex_init: {r}");
        }
        Ok(m)
    }

    fn lock(&self) {
        // SAFETY: initialised in `new`; locked and unlocked by the same thread.
        let r = unsafe { libc::pthread_mutex_lock(self.0.get()) };
        assert_eq!(r, 0, "pthread_mutex_lock");
    }

    fn unlock(&self) {
        // SAFETY: as for `lock`; called by the thread holding it.
        let r = unsafe { libc::pthread_mutex_unlock(self.0.get()) };
        assert_eq!(r, 0, "pthread_mutex_unlock");
    }
}

/// Lowers the calling thread's priority by `n` nice levels below the process's (a
/// background worker's; relative, so a workload started under `nice` keeps the order).
fn nice(n: i32) {
    // SAFETY: getpriority and setpriority have no memory-safety preconditions; `tid` names
    // this thread (on Linux each thread has its own nice value).
    unsafe {
        let me = tid() as libc::id_t;
        let now = libc::getpriority(libc::PRIO_PROCESS, me);
        libc::setpriority(libc::PRIO_PROCESS, me, (now + n).min(19));
    }
}

/// A chain of lock owners: `argus-spinner` holds lock B and computes for `secs`;
/// `argus-holder` holds lock A and blocks on B; the main thread blocks on A. Both locks are
/// priority-inheritance mutexes, and the two workers run at a lower priority (nice +5 and
/// +10 from the process's) than the main thread, as background workers do: each waiter
/// boosts the owner of its lock, which is what the kernel records (a boost that changes no
/// priority is not). The JSON line comes out once the chain stands (before the main thread
/// blocks), so a recording can end while all of it still hangs — no wake-up then says who
/// the main thread waits for, only the owners the kernel named.
pub(crate) fn pi_lock(secs: f64) -> Result<()> {
    let main_tid = hang_main();
    let (a, b) = (PiMutex::new()?, PiMutex::new()?);
    let (tx, rx) = mpsc::channel();
    let b2 = b.clone();
    let tx2 = tx.clone();
    let d = Duration::from_secs_f64(secs);
    let spinner = thread::Builder::new()
        .name("argus-spinner".into())
        .spawn(move || {
            nice(10);
            b2.lock();
            let _ = tx2.send(tid());
            busy(d);
            b2.unlock();
        })?;
    let spinner_tid = rx.recv().context("spinner vanished")?;
    let (a2, b3) = (a.clone(), b.clone());
    let holder = thread::Builder::new()
        .name("argus-holder".into())
        .spawn(move || {
            nice(5);
            a2.lock();
            let _ = tx.send(tid());
            b3.lock();
            b3.unlock();
            a2.unlock();
        })?;
    let holder_tid = rx.recv().context("holder vanished")?;
    // Let the holder block on B first.
    thread::sleep(Duration::from_millis(200));
    println!(
        "{{\"workload\":\"pi-lock\",\"main_tid\":{main_tid},\"holder_tid\":{holder_tid},\"spinner_tid\":{spinner_tid},\"root_cause_comm\":\"argus-spinner\"}}"
    );
    use std::io::Write;
    std::io::stdout().flush().context("stdout")?;
    a.lock();
    a.unlock();
    for t in [spinner, holder] {
        t.join()
            .map_err(|_| anyhow::anyhow!("a lock thread panicked"))?;
    }
    Ok(())
}
