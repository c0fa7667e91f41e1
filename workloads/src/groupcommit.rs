//! `argus workload group-commit` (hidden): a group-commit server, the batching that misleads a
//! walk, for `argus inspect` and `argus record --dispatch …@1 --enqueue …@1`.
//!
//! Two client processes (`argus-gc-c1`, `argus-gc-c2`) each send requests on a pipe of their
//! own and wait for SIGUSR1, the reply (as PostgreSQL's latches and group commit wake their
//! backends with signals). In the server, one reader thread per client (`argus-gc-read1`,
//! `argus-gc-read2`) reads its client's requests and queues a job for each with
//! [`argus_enqueue_job`] (an in-memory queue: a mutex, and a condition variable the flusher
//! waits on). The flusher (`argus-gc-flush`) is a group-commit leader: woken by the first job,
//! it waits [`GATHER`] for more, then runs every queued job with [`argus_run_job`], which
//! signals the job's client — all in one run, one segment that wakes both clients.
//!
//! The hang, by construction: in the second round client 2's reader takes `secs` seconds of
//! CPU over its request (the culprit: a long-running reader). Client 1 sends its request on
//! its own timer just before that ends, so the flusher is woken by client 1's job, gathers,
//! and runs both jobs together. Walking back from client 2's reply through the batched
//! segment leads to client 1 (its request, its timer) unless each run of a job is a segment
//! of its own joined to the enqueue that queued it. The truth line names the reader.

use anyhow::{bail, Context, Result};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// How long the flusher waits for more jobs after the first (the group-commit delay).
pub const GATHER: Duration = Duration::from_millis(250);
/// How long before the slow reader finishes client 1 sends its hang-round request.
const C1_LEAD: Duration = Duration::from_millis(100);
/// The rounds: 0 normal, 1 the hang.
const ROUNDS: u32 = 2;

/// A queued job: whom to reply to.
#[derive(Debug)]
pub struct Job {
    client: i32,
    round: u32,
}

/// The queue of job pointers (`Box<Job>` as addresses, so the queue is `Send`) and whether
/// the readers are done.
struct Queue {
    jobs: Vec<usize>,
    done: bool,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    jobs: Vec::new(),
    done: false,
});
static READY: Condvar = Condvar::new();

/// Queues `job` and wakes the flusher if it waits (the function `--enqueue` probes; the
/// job's address is its first argument).
#[no_mangle]
#[inline(never)]
pub extern "C" fn argus_enqueue_job(job: *mut Job) {
    let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    q.jobs.push(job as usize);
    drop(q);
    READY.notify_one();
}

/// Runs one job: replies to its client with SIGUSR1 and frees it (the function
/// `--dispatch` probes; the job's address is its first argument). Returns the round.
///
/// # Safety
///
/// `job` comes from `Box::into_raw` and is run once.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn argus_run_job(job: *mut Job) -> u32 {
    // SAFETY: the caller's contract: a leaked `Box<Job>`, run once.
    let job = unsafe { Box::from_raw(job) };
    // SAFETY: kill has no memory preconditions; the client waits for this signal.
    unsafe { libc::kill(job.client, libc::SIGUSR1) };
    std::hint::black_box(job.round)
}

fn now() -> libc::timespec {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t
}

fn plus(t: libc::timespec, d: Duration) -> libc::timespec {
    let ns = t.tv_nsec as u64 + u64::from(d.subsec_nanos());
    libc::timespec {
        tv_sec: t.tv_sec + d.as_secs() as libc::time_t + (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

fn before(a: &libc::timespec, b: &libc::timespec) -> bool {
    (a.tv_sec, a.tv_nsec) < (b.tv_sec, b.tv_nsec)
}

/// Sleeps until `t` (CLOCK_MONOTONIC): the thread's own timer.
fn sleep_until(t: &libc::timespec) {
    // SAFETY: a valid absolute time; EINTR is retried.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            t,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
}

/// The set holding SIGUSR1 alone.
fn usr1() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is a valid value to initialize.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both write into the valid set.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
    }
    set
}

fn name_thread(name: &str) {
    let c = std::ffi::CString::new(name).unwrap_or_default();
    // SAFETY: PR_SET_NAME copies at most 16 bytes of a NUL-terminated string.
    unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr()) };
}

fn pipe() -> Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into a valid array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// A client (a forked process, single-threaded): sends round `r` at `send_at[r]`, then waits
/// for the reply. Never returns.
fn client(name: &str, req: i32, send_at: &[libc::timespec]) -> ! {
    name_thread(name);
    let set = usr1();
    let mut code = 0;
    for (round, at) in send_at.iter().enumerate() {
        sleep_until(at);
        let b = (round as u32).to_le_bytes();
        // SAFETY: writes 4 bytes of a valid buffer.
        if unsafe { libc::write(req, b.as_ptr().cast(), 4) } != 4 {
            code = 1;
            break;
        }
        // SAFETY: waits for the blocked SIGUSR1; EINTR is retried.
        while unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) } < 0 {}
    }
    // SAFETY: ends the forked child without running the parent's destructors.
    unsafe { libc::_exit(code) }
}

/// One reader: reads its client's requests and queues a job for each; the hang round of the
/// slow reader first computes until `slow_until`.
fn reader(req: i32, client: i32, slow_until: Option<libc::timespec>) -> Result<i32> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    loop {
        let mut b = [0u8; 4];
        // SAFETY: reads at most 4 bytes into a valid buffer.
        let n = unsafe { libc::read(req, b.as_mut_ptr().cast(), 4) };
        match n {
            0 => return Ok(tid),
            4 => {}
            _ => bail!("request pipe: {}", std::io::Error::last_os_error()),
        }
        let round = u32::from_le_bytes(b);
        if let (Some(until), 1) = (slow_until, round) {
            // The culprit: a long computation over this request.
            let mut x = 0u64;
            while before(&now(), &until) {
                for i in 0..10_000u64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
                }
                std::hint::black_box(x);
            }
        }
        argus_enqueue_job(Box::into_raw(Box::new(Job { client, round })));
    }
}

/// The group-commit leader: waits for a job, gathers for [`GATHER`], runs every queued job.
fn flusher() -> Result<(i32, u32)> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut ran = 0;
    loop {
        let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
        while q.jobs.is_empty() && !q.done {
            q = READY.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        if q.jobs.is_empty() {
            return Ok((tid, ran));
        }
        drop(q);
        thread::sleep(GATHER);
        let batch = std::mem::take(&mut QUEUE.lock().unwrap_or_else(|e| e.into_inner()).jobs);
        for job in batch {
            // SAFETY: every queued job is a `Box<Job>` a reader leaked, taken off the queue
            // once.
            unsafe { argus_run_job(job as *mut Job) };
            ran += 1;
        }
    }
}

/// Runs the workload; the slow reader computes `secs` seconds (at least 1).
pub fn run(secs: f64) -> Result<()> {
    let slow = Duration::from_secs_f64(secs.clamp(1.0, 10.0));
    // SIGUSR1 blocked before anything forks or spawns: the clients take it by sigwaitinfo.
    let set = usr1();
    // SAFETY: a valid set; changes this thread's mask only.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let t0 = plus(now(), Duration::from_millis(300));
    let hang = plus(t0, Duration::from_millis(800));
    let slow_until = plus(hang, slow);
    // Client 2: round 0 at t0, the hang round at `hang`. Client 1: round 0 400 ms after t0,
    // its hang-round request just before the slow reader finishes.
    let c2_at = [t0, hang];
    let c1_at = [
        plus(t0, Duration::from_millis(400)),
        plus(hang, slow.saturating_sub(C1_LEAD)),
    ];
    let mut pids = Vec::new();
    let mut readers = Vec::new();
    for (i, at) in [(1, c1_at), (2, c2_at)] {
        let (rd, wr) = pipe()?;
        // SAFETY: the process is single-threaded here (no reader or flusher yet); the child
        // only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: the child closes the read end it does not use.
            unsafe { libc::close(rd) };
            client(&format!("argus-gc-c{i}"), wr, &at);
        }
        // SAFETY: the parent closes the write end the child owns.
        unsafe { libc::close(wr) };
        pids.push(pid);
        readers.push((i, rd, pid));
    }
    let flush = thread::Builder::new()
        .name("argus-gc-flush".into())
        .spawn(flusher)
        .context("spawning the flusher")?;
    let mut handles = Vec::new();
    for (i, rd, client) in readers {
        let slow = (i == 2).then_some(slow_until);
        handles.push((
            i,
            thread::Builder::new()
                .name(format!("argus-gc-read{i}"))
                .spawn(move || reader(rd, client, slow))
                .context("spawning a reader")?,
        ));
    }
    let mut tids = [0i32; 3];
    for (i, h) in handles {
        tids[i as usize] = h
            .join()
            .map_err(|_| anyhow::anyhow!("reader {i} panicked"))??;
    }
    for pid in &pids {
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(*pid, &mut status, 0) };
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!("client {pid} failed (status {status:#x})");
        }
    }
    QUEUE.lock().unwrap_or_else(|e| e.into_inner()).done = true;
    READY.notify_one();
    let (flush_tid, ran) = flush
        .join()
        .map_err(|_| anyhow::anyhow!("the flusher panicked"))??;
    if ran != 2 * ROUNDS {
        bail!("the flusher ran {ran} jobs, expected {}", 2 * ROUNDS);
    }
    println!(
        "{{\"workload\":\"group-commit\",\"server_pid\":{},\"slow_reader_tid\":{},\"other_reader_tid\":{},\"flusher_tid\":{flush_tid},\"hung_pid\":{},\"other_client_pid\":{},\"slow_ns\":{},\"enqueue\":\"argus_enqueue_job\",\"run\":\"argus_run_job\"}}",
        std::process::id(),
        tids[2],
        tids[1],
        pids[1],
        pids[0],
        slow.as_nanos()
    );
    Ok(())
}
