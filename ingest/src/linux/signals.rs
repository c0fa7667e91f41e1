//! SIGINT/SIGTERM → a clean stop.
//!
//! The handler stores the signal number in an atomic and rings an eventfd (both
//! async-signal-safe); the recorder's control loop, asleep in `poll` on that eventfd
//! ([`signal_fd`]), wakes and closes the trace normally. Handlers are
//! process-wide, so installations are reference-counted: the first recorder that asks saves
//! the previous dispositions, the last one to finish restores them.

use super::control;
use super::error::RecordError;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

/// The last stop signal received while handlers were installed (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

struct Installed {
    users: usize,
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);

const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// The eventfd the handler rings (-1 until the first installation; then kept for the
/// process's life, so a handler running late never writes to a reused descriptor).
static SIGNAL_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    RECEIVED.store(signal, Ordering::SeqCst);
    let fd = SIGNAL_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        control::ring(fd);
    }
}

/// The eventfd a stop signal rings while handlers are installed: readable once one arrived.
pub(crate) fn signal_fd() -> Option<std::os::fd::RawFd> {
    Some(SIGNAL_FD.load(Ordering::SeqCst)).filter(|&fd| fd >= 0)
}

/// Keeps the SIGINT/SIGTERM handlers installed while alive.
#[derive(Debug)]
pub(crate) struct SignalGuard(());

impl SignalGuard {
    /// Installs the handlers (or joins the recorders that already did).
    pub(crate) fn install() -> Result<SignalGuard, RecordError> {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        match installed.as_mut() {
            Some(state) => state.users += 1,
            None => {
                RECEIVED.store(0, Ordering::SeqCst);
                match SIGNAL_FD.load(Ordering::SeqCst) {
                    -1 => {
                        let fd = control::eventfd()?.into_raw_fd();
                        SIGNAL_FD.store(fd, Ordering::SeqCst);
                    }
                    // A signal of an earlier installation rang it: take that back.
                    fd => control::quiet(fd),
                }
                let mut previous = Vec::new();
                for signal in STOP_SIGNALS {
                    // SAFETY: sigaction is plain old data; all-zero is a valid value.
                    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
                    action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                    action.sa_flags = libc::SA_RESTART;
                    // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
                    unsafe { libc::sigemptyset(&mut action.sa_mask) };
                    // SAFETY: as above.
                    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
                    // SAFETY: both pointers are valid; the handler only touches an atomic.
                    let rc = unsafe { libc::sigaction(signal, &action, &mut old) };
                    if rc != 0 {
                        let source = std::io::Error::last_os_error();
                        restore(&previous);
                        return Err(RecordError::Sys {
                            call: "sigaction",
                            source,
                        });
                    }
                    previous.push((signal, old));
                }
                *installed = Some(Installed { users: 1, previous });
            }
        }
        Ok(SignalGuard(()))
    }

    /// The stop signal received since installation, if any.
    pub(crate) fn received(&self) -> Option<i32> {
        match RECEIVED.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }
}

fn restore(previous: &[(libc::c_int, libc::sigaction)]) {
    for (signal, old) in previous {
        // SAFETY: `old` was filled in by sigaction for this signal.
        unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(state) = installed.as_mut() {
            state.users -= 1;
            if state.users == 0 {
                restore(&state.previous);
                *installed = None;
            }
        }
    }
}
