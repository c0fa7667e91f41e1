//! What wakes the recorder's control loop: it sleeps in `poll` until something it must act
//! on happens. Every wake-up is a context switch and a few records in the trace it writes,
//! so an idle machine's recording holds almost none of its own.
//!
//! ```text
//!   StopHandle::stop ──┐
//!   a reader ending ───┼─ Doorbell (eventfd) ─┐
//!   SIGINT / SIGTERM ─── signals' eventfd ────┼─ poll ── the control loop: stop, or
//!   --duration, the next look ─ timeout ──────┘          look for new threads of its own
//!   (a recorded command: every 10 ms)
//! ```

use super::error::RecordError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An eventfd that wakes a thread waiting in [`wait_any`]; rung from any thread.
#[derive(Debug)]
pub(crate) struct Doorbell(OwnedFd);

impl Doorbell {
    pub(crate) fn new() -> Result<Doorbell, RecordError> {
        Ok(Doorbell(eventfd()?))
    }

    /// Wakes the waiter (or makes its next wait return at once).
    pub(crate) fn ring(&self) {
        ring(self.0.as_raw_fd());
    }

    /// Takes back every ring so far: the next wait sleeps.
    pub(crate) fn quiet(&self) {
        quiet(self.0.as_raw_fd());
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A non-blocking, close-on-exec eventfd.
pub(crate) fn eventfd() -> Result<OwnedFd, RecordError> {
    // SAFETY: eventfd has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(RecordError::Sys {
            call: "eventfd",
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to the eventfd `fd` (async-signal-safe: a signal handler may call it).
pub(crate) fn ring(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64; a closed or full descriptor only fails.
    unsafe { libc::write(fd, (&one as *const u64).cast(), std::mem::size_of::<u64>()) };
}

/// Takes back every ring of the non-blocking eventfd `fd` so far.
pub(crate) fn quiet(fd: RawFd) {
    let mut n: u64 = 0;
    // SAFETY: reads 8 bytes into a valid u64; an empty non-blocking eventfd only fails.
    unsafe { libc::read(fd, (&mut n as *mut u64).cast(), std::mem::size_of::<u64>()) };
}

/// Sleeps until one of `fds` is readable or `timeout` passes (a signal ends it early too).
pub(crate) fn wait_any(fds: &[RawFd], timeout: Duration) {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Rounded up: a wait that wakes a moment early only to sleep again is a wasted wake-up.
    let ms = timeout
        .as_nanos()
        .div_ceil(1_000_000)
        .min(libc::c_int::MAX as u128) as libc::c_int;
    // SAFETY: `polled` is a valid array of `polled.len()` pollfds.
    unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A ring wakes a waiter on another thread at once; taken back, the next wait sleeps its
    /// timeout out.
    #[test]
    fn a_ring_wakes_the_waiter_and_quiet_takes_it_back() {
        let bell = std::sync::Arc::new(Doorbell::new().unwrap());
        let ringer = bell.clone();
        let t = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ringer.ring();
        });
        wait_any(&[bell.fd()], Duration::from_secs(30));
        let woke = t.elapsed();
        h.join().unwrap();
        assert!(
            woke < Duration::from_secs(20),
            "woken by the ring: {woke:?}"
        );
        bell.quiet();
        let t = Instant::now();
        wait_any(&[bell.fd()], Duration::from_millis(100));
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }
}
