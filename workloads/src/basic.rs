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
    // An event loop dispatching jobs to `argus_dispatch_job` (`--dispatch`).
    Workload::hidden(
        "dispatch",
        "an event loop dispatching jobs to argus_dispatch_job (tests/dispatch.rs)",
        crate::dispatchwork::run,
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
