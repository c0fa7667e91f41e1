//! `argus workload dispatch` (hidden): an event loop that dispatches jobs to a callout, for
//! `argus record --dispatch <argus>:argus_dispatch_job`.
//!
//! A producer thread (`argus-dprod`) writes job numbers into a pipe; the loop thread
//! (`argus-dloop`) reads them and calls [`argus_dispatch_job`] for each. Every third job
//! asks a helper thread (`argus-dfeed`) for a token and blocks inside the callout reading
//! it; the helper answers 20 ms later. The others sleep 2 ms. The loop prints one JSON line:
//! its tid, the number of jobs and which of them blocked on the pipe.

use anyhow::{bail, Context, Result};
use std::thread;
use std::time::Duration;

/// Jobs the producer sends.
const JOBS: u32 = 9;
/// Every job whose number is a multiple of this blocks inside the callout.
const BLOCK_EVERY: u32 = 3;

/// One pipe: `(read end, write end)`.
fn pipe() -> Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into a valid array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

fn write_u32(fd: i32, v: u32) -> Result<()> {
    let b = v.to_le_bytes();
    // SAFETY: writes 4 bytes from a valid buffer.
    let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
    if n != b.len() as isize {
        bail!("pipe write: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads one u32; `None` at end of file.
fn read_u32(fd: i32) -> Result<Option<u32>> {
    let mut b = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        // SAFETY: reads at most the remaining bytes of a valid buffer.
        let n = unsafe { libc::read(fd, b[got..].as_mut_ptr().cast(), 4 - got) };
        match n {
            0 => return Ok(None),
            n if n < 0 => {
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                bail!("pipe read: {err}");
            }
            n => got += n as usize,
        }
    }
    Ok(Some(u32::from_le_bytes(b)))
}

/// The dispatched callout: one job. Blocking jobs send their number on `ask_fd` and wait
/// for the token on `token_fd` (a wait inside the callout, which must not end its segment).
/// Returns the token (the job number), or 0 when the helper is gone.
#[no_mangle]
#[inline(never)]
pub extern "C" fn argus_dispatch_job(job: u32, ask_fd: i32, token_fd: i32) -> u32 {
    if job.is_multiple_of(BLOCK_EVERY) {
        if write_u32(ask_fd, job).is_err() {
            return 0;
        }
        read_u32(token_fd).ok().flatten().unwrap_or(0)
    } else {
        thread::sleep(Duration::from_millis(2));
        std::hint::black_box(job)
    }
}

/// Runs the workload; jobs are spread over about `secs` seconds.
pub fn run(secs: f64) -> Result<()> {
    let gap = Duration::from_secs_f64((secs / JOBS as f64).clamp(0.01, 1.0));
    let (job_rd, job_wr) = pipe()?;
    let (ask_rd, ask_wr) = pipe()?;
    let (tok_rd, tok_wr) = pipe()?;
    let producer = thread::Builder::new()
        .name("argus-dprod".into())
        .spawn(move || -> Result<()> {
            for job in 1..=JOBS {
                thread::sleep(gap);
                write_u32(job_wr, job)?;
            }
            // SAFETY: closes our own descriptor once: the loop sees end of file.
            unsafe { libc::close(job_wr) };
            Ok(())
        })
        .context("spawning the producer")?;
    let feeder = thread::Builder::new()
        .name("argus-dfeed".into())
        .spawn(move || -> Result<()> {
            // Until the loop closes its end of the request pipe.
            while let Some(job) = read_u32(ask_rd)? {
                // Late enough that the callout is asleep on the pipe.
                thread::sleep(Duration::from_millis(20));
                write_u32(tok_wr, job)?;
            }
            Ok(())
        })
        .context("spawning the feeder")?;
    let loop_thread = thread::Builder::new()
        .name("argus-dloop".into())
        .spawn(move || -> Result<(i32, u32, Vec<u32>)> {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let served = (|| -> Result<(u32, Vec<u32>)> {
                let (mut jobs, mut blocked) = (0u32, Vec::new());
                while let Some(job) = read_u32(job_rd)? {
                    let token = argus_dispatch_job(job, ask_wr, tok_rd);
                    if job.is_multiple_of(BLOCK_EVERY) {
                        if token != job {
                            bail!("job {job}: the helper answered {token}");
                        }
                        blocked.push(job);
                    }
                    jobs += 1;
                }
                Ok((jobs, blocked))
            })();
            // SAFETY: closes our own descriptor once, on every path: the helper sees end of
            // file and ends.
            unsafe { libc::close(ask_wr) };
            let (jobs, blocked) = served?;
            Ok((tid, jobs, blocked))
        })
        .context("spawning the loop")?;
    let joined = |r: std::thread::Result<Result<()>>, what: &str| -> Result<()> {
        r.map_err(|_| anyhow::anyhow!("the {what} thread panicked"))?
    };
    joined(producer.join(), "producer")?;
    let (tid, jobs, blocked) = loop_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the loop thread panicked"))??;
    joined(feeder.join(), "feeder")?;
    // SAFETY: closes descriptors this function opened and no thread uses any more.
    unsafe {
        libc::close(job_rd);
        libc::close(ask_rd);
        libc::close(tok_rd);
        libc::close(tok_wr);
    }
    println!(
        "{{\"workload\":\"dispatch\",\"loop_tid\":{tid},\"jobs\":{jobs},\"symbol\":\"argus_dispatch_job\",\"blocking_jobs\":{blocked:?}}}"
    );
    Ok(())
}
