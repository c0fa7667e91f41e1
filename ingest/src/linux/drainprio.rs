//! Real-time priority for the readers while they drain, with a CPU budget.
//!
//! On a machine whose CPUs are all busy, a reader at normal priority competes with the load
//! for its share of CPU and the kernel's ring overruns before it runs (issue 14: 86% of the
//! events lost under a two-CPU syscall load). A reader therefore runs `SCHED_FIFO`: when its
//! poll wakes it, it preempts the load, copies the pages out and sleeps again. A runaway
//! reader (a bug, or an event rate no budget can drain) must not take the machine, so each
//! reader measures its own CPU time (`CLOCK_THREAD_CPUTIME_ID`) per [`WINDOW`]: past its
//! budget it drops back to `SCHED_OTHER` for the rest of the window (counted, warned once),
//! and the next window raises it again. The kernel's own real-time throttling
//! (`sched_rt_runtime_us`, 95% by default) is a further bound, not the one relied on.
//!
//! ```text
//!  window (100 ms) ─┬─ FIFO: drain, sleep in poll, drain, … ─┬─ budget spent? ── OTHER ─┐
//!                   └──────────────── new window: FIFO again ◄──────────────────────────┘
//! ```
//!
//! `SCHED_RESET_ON_FORK` keeps anything the thread starts from inheriting the priority.
//! Without the privilege to raise it (no `CAP_SYS_NICE`), the reader runs as before and says
//! so once.

use std::time::{Duration, Instant};

/// The budget is measured over windows this long.
pub(crate) const WINDOW: Duration = Duration::from_millis(100);

/// Whether to raise a reader, and how far.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DrainPriority {
    /// `SCHED_FIFO` priority (1–99); 0 leaves the readers at normal priority.
    pub priority: u8,
    /// The share of one CPU a reader may use at that priority per window (0–1].
    pub budget: f64,
}

impl Default for DrainPriority {
    /// Priority 10 (above the kernel's default for threaded interrupts' user-space peers,
    /// below watchdogs and migration, which run at 99), half a CPU per reader.
    fn default() -> Self {
        DrainPriority {
            priority: 10,
            budget: 0.5,
        }
    }
}

/// One reader's state: raised or not, and the CPU time spent in the current window.
pub(crate) struct Governor {
    want: DrainPriority,
    raised: bool,
    /// The raise failed (no privilege): stop trying.
    disabled: bool,
    window_start: Instant,
    cpu_at_window_start: Duration,
    /// Windows in which the budget ran out.
    pub(crate) throttled: u64,
    cpu: u32,
}

impl Governor {
    /// Raises the calling thread (the reader of `cpu`) if `want` asks for it.
    pub(crate) fn start(want: DrainPriority, cpu: u32) -> Governor {
        let mut g = Governor {
            want,
            raised: false,
            disabled: want.priority == 0,
            window_start: Instant::now(),
            cpu_at_window_start: thread_cpu_time(),
            throttled: 0,
            cpu,
        };
        g.raise();
        g
    }

    fn raise(&mut self) {
        if self.disabled || self.raised {
            return;
        }
        match set_policy(Some(self.want.priority)) {
            Ok(()) => self.raised = true,
            Err(err) => {
                self.disabled = true;
                tracing::warn!(
                    cpu = self.cpu,
                    error = %err,
                    "cannot give the trace reader real-time priority; on a busy machine the \
                     kernel may lose events (run as root, or raise --buffer-kb)"
                );
            }
        }
    }

    /// Called often (after every few pages and every drain pass): starts a new window when
    /// the old one is over, and lowers the thread when its budget for this one is spent.
    pub(crate) fn tick(&mut self) {
        if self.disabled {
            return;
        }
        let now = Instant::now();
        let cpu = thread_cpu_time();
        if now.duration_since(self.window_start) >= WINDOW {
            self.window_start = now;
            self.cpu_at_window_start = cpu;
            self.raise();
            return;
        }
        if self.raised && cpu.saturating_sub(self.cpu_at_window_start) > self.budget() {
            if set_policy(None).is_ok() {
                self.raised = false;
            }
            self.throttled += 1;
            if self.throttled == 1 {
                tracing::warn!(
                    cpu = self.cpu,
                    budget = self.want.budget,
                    "trace reader used its real-time CPU budget; draining at normal priority \
                     for the rest of the window"
                );
            }
        }
    }

    fn budget(&self) -> Duration {
        WINDOW.mul_f64(self.want.budget.clamp(0.01, 1.0))
    }

    /// Whether the thread runs at real-time priority now.
    #[cfg(test)]
    pub(crate) fn raised(&self) -> bool {
        self.raised
    }
}

/// Nice value of the chunk writers (`reader.rs`): they compress and write what the drain
/// spooled, and a writer starved by the load (or by `argus start`'s own dataflow) fills the
/// spool and stalls the drain. At -10 a writer outweighs ten normal threads on its CPU,
/// without the real-time class's power to shut them out.
pub(crate) const WRITER_NICE: i32 = -10;

/// Sets the calling thread's nice value (Linux: per thread). Returns the error when the
/// process may not raise it.
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority on our own thread id; no memory is passed.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Puts the calling thread in the `SCHED_IDLE` class: it runs only on a CPU no other thread
/// wants, and a waking thread of any other class preempts it at once (Linux: per thread;
/// threads it starts inherit the class).
pub fn set_thread_sched_idle() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the
    // calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `SCHED_FIFO` at `prio` (`Some`) or `SCHED_OTHER` (`None`) for the calling thread, reset
/// in any child it forks.
fn set_policy(prio: Option<u8>) -> std::io::Result<()> {
    let (policy, p) = match prio {
        Some(p) => (libc::SCHED_FIFO, i32::from(p.clamp(1, 99))),
        None => (libc::SCHED_OTHER, 0),
    };
    let param = libc::sched_param { sched_priority: p };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    let rc = unsafe { libc::sched_setscheduler(0, policy | libc::SCHED_RESET_ON_FORK, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's scheduling policy.
#[cfg(test)]
fn policy() -> i32 {
    // SAFETY: pid 0 is the calling thread.
    let policy = unsafe { libc::sched_getscheduler(0) };
    policy & !libc::SCHED_RESET_ON_FORK
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a fresh thread (the policy is per thread: the test harness's own threads
    /// are left alone).
    fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("thread")
    }

    #[test]
    fn priority_zero_leaves_the_thread_alone() {
        let (raised, policy) = on_thread(|| {
            let g = Governor::start(
                DrainPriority {
                    priority: 0,
                    budget: 0.5,
                },
                0,
            );
            (g.raised(), policy())
        });
        assert!(!raised);
        assert_eq!(policy, libc::SCHED_OTHER);
    }

    #[test]
    fn a_reader_past_its_budget_drops_to_normal_priority_until_the_next_window() {
        // Needs CAP_SYS_NICE, as recording does: the tests run as root with tracefs.
        let (raised, policy_raised, throttled, lowered, policy_lowered, again) = on_thread(|| {
            let mut g = Governor::start(
                DrainPriority {
                    priority: 5,
                    budget: 0.1,
                },
                0,
            );
            let raised = g.raised();
            let policy_raised = policy();
            // Spin past 10% of the window (10 ms of CPU) inside one window.
            let t0 = Instant::now();
            while thread_cpu_time() < Duration::from_millis(15) && t0.elapsed() < WINDOW / 2 {
                std::hint::black_box(0u64);
            }
            g.tick();
            let (throttled, lowered, policy_lowered) = (g.throttled, !g.raised(), policy());
            std::thread::sleep(WINDOW);
            g.tick();
            (
                raised,
                policy_raised,
                throttled,
                lowered,
                policy_lowered,
                g.raised(),
            )
        });
        assert!(raised, "raised to SCHED_FIFO (root)");
        assert_eq!(policy_raised, libc::SCHED_FIFO);
        assert_eq!(throttled, 1);
        assert!(lowered);
        assert_eq!(policy_lowered, libc::SCHED_OTHER);
        assert!(again, "raised again in the next window");
    }
}
