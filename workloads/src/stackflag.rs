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
//! - `slowpath`: the main thread sends requests to `argus-server` over a pipe and blocks
//!   reading each reply. Eight requests take ~40 ms each in [`argus_dig_checksum`]; the
//!   fourth takes `secs` seconds in [`argus_dig_rebuild_index`] (the hang: a LongWait of
//!   the main thread whose culprit is the server's LongRunning segment). The fixture of
//!   `argus dig` (tests/dig.rs): the function that differs between the normal and the hung
//!   requests is `argus_dig_rebuild_index`.
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
        "slowpath",
        "argus-server answers requests in argus_dig_checksum (~40 ms), the fourth in argus_dig_rebuild_index (secs); the main thread waits for each reply (tests/dig.rs)",
        slowpath,
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

/// Mixes `x` for `d` of CPU time; the work of both request kinds (one loop, so the two
/// differ only by the function they run in).
#[inline(always)]
fn mix_for(d: Duration, mut x: u64) -> u64 {
    let start = Instant::now();
    while start.elapsed() < d {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

/// A normal request: ~40 ms of computing.
#[inline(never)]
#[no_mangle]
pub extern "C" fn argus_dig_checksum(seed: u64) -> u64 {
    mix_for(Duration::from_millis(40), seed)
}

/// The slow request: `millis` of computing.
#[inline(never)]
#[no_mangle]
pub extern "C" fn argus_dig_rebuild_index(seed: u64, millis: u64) -> u64 {
    mix_for(Duration::from_millis(millis), seed ^ 0x9e37)
}

fn slowpath(secs: f64) -> Result<()> {
    let pipe = || -> Result<(i32, i32)> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe writes two descriptors into a valid array.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            bail!("pipe: {}", std::io::Error::last_os_error());
        }
        Ok((fds[0], fds[1]))
    };
    let (req_rd, req_wr) = pipe()?;
    let (rep_rd, rep_wr) = pipe()?;
    let slow_ms = (secs * 1000.0) as u64;
    let server = thread::Builder::new()
        .name("argus-server".into())
        .spawn(move || {
            set_name("argus-server");
            let t = tid();
            let mut acc = 0u64;
            loop {
                let mut b = [0u8; 1];
                // SAFETY: reads 1 byte into a valid buffer.
                if unsafe { libc::read(req_rd, b.as_mut_ptr().cast(), 1) } != 1 || b[0] == b'q' {
                    break;
                }
                acc = if b[0] == b's' {
                    argus_dig_rebuild_index(acc, slow_ms)
                } else {
                    argus_dig_checksum(acc)
                };
                // SAFETY: writes 1 byte from a valid buffer.
                unsafe { libc::write(rep_wr, b"r".as_ptr().cast(), 1) };
            }
            std::hint::black_box(acc);
            t
        })
        .context("spawning the server")?;
    for i in 0..9 {
        let req: &[u8] = if i == 3 { b"s" } else { b"n" };
        // SAFETY: writes 1 byte from a valid buffer; reads 1 byte into a valid buffer.
        unsafe {
            libc::write(req_wr, req.as_ptr().cast(), 1);
            let mut b = [0u8; 1];
            libc::read(rep_rd, b.as_mut_ptr().cast(), 1);
        }
        thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: writes 1 byte from a valid buffer.
    unsafe { libc::write(req_wr, b"q".as_ptr().cast(), 1) };
    let server_tid = server
        .join()
        .map_err(|_| anyhow::anyhow!("server panicked"))?;
    // SAFETY: closes descriptors this function opened.
    unsafe {
        for fd in [req_rd, req_wr, rep_rd, rep_wr] {
            libc::close(fd);
        }
    }
    println!(
        "{{\"workload\":\"slowpath\",\"main_tid\":{},\"server_tid\":{server_tid},\"slow_request\":3}}",
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
