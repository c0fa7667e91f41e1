//! Workloads for the stacks and watchpoint tests (`argus workload stacks|flag`, hidden from
//! the list of hang workloads).
//!
//! - `stacks`: the thread `argus-stackrd` blocks in [`argus_stack_blocking_read`], which
//!   calls `read()` on a pipe that the main thread writes to after `secs` seconds (in
//!   [`argus_stack_waking_write`], waking it).
//! - `flag`: the thread `argus-setter` computes for `secs` seconds, then stores 1 into the
//!   static [`ARGUS_WATCH_FLAG`]; the main thread polls it with 1 ms sleeps. Recorded with
//!   `--watch ARGUS_WATCH_FLAG@cmd`, the hits show the write by the setter and the reads by
//!   the poller.
//!
//! Each prints one JSON line with the thread ids.

use crate::Workload;
use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The flag the `flag` workload's threads share (watched by symbol name in the tests).
#[no_mangle]
pub static ARGUS_WATCH_FLAG: AtomicU32 = AtomicU32::new(0);

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

fn set_name(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
    }
}

/// Blocks in `read(fd)` until data arrives; the function the stacks test looks for.
#[inline(never)]
#[no_mangle]
pub extern "C" fn argus_stack_blocking_read(fd: i32) -> isize {
    let mut buf = [0u8; 16];
    // SAFETY: reads at most 16 bytes into a valid buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    std::hint::black_box(n)
}

/// Writes one byte to `fd`, waking the reader blocked on the pipe; the function the
/// stacks test looks for in the waker's stack.
#[inline(never)]
#[no_mangle]
pub extern "C" fn argus_stack_waking_write(fd: i32) -> isize {
    // SAFETY: writes 1 byte from a valid buffer.
    let n = unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) };
    std::hint::black_box(n)
}

/// The stack and watched-flag fixtures (not listed: tests run them by name).
pub const WORKLOADS: &[Workload] = &[
    Workload::hidden(
        "stacks",
        "argus-stackrd blocks in argus_stack_blocking_read until the main thread calls argus_stack_waking_write (tests/stacks.rs)",
        stacks,
    ),
    Workload::hidden(
        "flag",
        "polls ARGUS_WATCH_FLAG with 1 ms sleeps until argus-setter, computing, sets it (tests/diagnosis.rs)",
        flag,
    ),
];

fn stacks(secs: f64) -> Result<()> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into a valid array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    let (rd, wr) = (fds[0], fds[1]);
    let reader = thread::Builder::new()
        .name("argus-stackrd".into())
        .spawn(move || {
            set_name("argus-stackrd");
            let t = tid();
            let n = argus_stack_blocking_read(rd);
            (t, n)
        })
        .context("spawning the reader")?;
    thread::sleep(Duration::from_secs_f64(secs));
    argus_stack_waking_write(wr);
    let (reader_tid, n) = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reader panicked"))?;
    // SAFETY: closes descriptors this function opened.
    unsafe {
        libc::close(rd);
        libc::close(wr);
    }
    println!(
        "{{\"workload\":\"stacks\",\"reader_tid\":{reader_tid},\"writer_tid\":{},\"read\":{n}}}",
        tid()
    );
    Ok(())
}

fn flag(secs: f64) -> Result<()> {
    let d = Duration::from_secs_f64(secs);
    let setter = thread::Builder::new()
        .name("argus-setter".into())
        .spawn(move || {
            set_name("argus-setter");
            let start = Instant::now();
            let mut x = 1u64;
            while start.elapsed() < d {
                for _ in 0..10_000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
            }
            std::hint::black_box(x);
            ARGUS_WATCH_FLAG.store(1, Ordering::Release);
            tid()
        })
        .context("spawning the setter")?;
    let mut polls = 0u64;
    while ARGUS_WATCH_FLAG.load(Ordering::Acquire) == 0 {
        thread::sleep(Duration::from_millis(1));
        polls += 1;
    }
    let setter_tid = setter
        .join()
        .map_err(|_| anyhow::anyhow!("setter panicked"))?;
    println!(
        "{{\"workload\":\"flag\",\"poller_tid\":{},\"setter_tid\":{setter_tid},\"polls\":{polls}}}",
        tid()
    );
    Ok(())
}
