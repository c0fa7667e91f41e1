//! Real-time priority for the readers while they drain and for the chunk writers while they
//! compress, each with a CPU budget.
//!
//! On a machine whose CPUs are all busy, a reader at normal priority competes with the load
//! for its share of CPU and the kernel's ring overruns before it runs (issue 14: 86% of the
//! events lost under a two-CPU syscall load). A reader therefore runs `SCHED_FIFO`: when its
//! poll wakes it, it preempts the load, copies the pages out and sleeps again.
//!
//! The chunk writer runs `SCHED_FIFO` too, one priority below its drain. A nice value only
//! orders threads inside one scheduling group: with the recorder in a session of its own
//! (`sched_autogroup`) or a cgroup of its own, its whole group competes with the load's as
//! one entity, and under `saturate.c` the writers, at nice −10, got 20 ms of CPU in 6 s and
//! waited 5.1 s on the run queue (`/proc/PID/task/*/schedstat`): the spool filled and the
//! kernel lost 40–85% of the events (issue 42). The real-time class is scheduled before
//! every group's fair share, wherever the threads live.
//!
//! A runaway thread (a bug, or an event rate no budget can drain) must not take the machine,
//! so each one measures its own CPU time (`CLOCK_THREAD_CPUTIME_ID`) per [`WINDOW`]: past
//! its budget it sleeps for the rest of the window (counted, warned once) and goes on,
//! still real-time, in the next. (Dropping to `SCHED_OTHER` for the rest of the window
//! instead, as it did first, left a writer of a debug build, over its budget, to a starved
//! group's fair share: it waited seconds to run again and never got to raise itself.) The
//! kernel's own real-time throttling (`sched_rt_runtime_us`, 95% by default) is a further
//! bound, not the one relied on.
//!
//! **cgroups.** With `CONFIG_RT_GROUP_SCHED` and cgroup v1, a task in a cgroup whose
//! `cpu.rt_runtime_us` is 0 (every new group's default) may not enter the real-time class.
//! The recorder then gives its own `cpu` cgroup, and each ancestor that needs it, a
//! real-time budget ([`RtGroupGrant`]: [`GROUP_RT_SHARE`] of the period) and takes it back
//! when the recording ends, so the readers keep up in a service's or container's cgroup
//! too.
//!
//! ```text
//!  window (100 ms) ─┬─ FIFO: drain, sleep in poll, drain, … ─┬─ budget spent? ── sleep ─┐
//!                   └──────────────────────── next window ◄─────────────────────────────┘
//! ```
//!
//! `SCHED_RESET_ON_FORK` keeps anything the thread starts from inheriting the priority.
//! Without the privilege to raise it (no `CAP_SYS_NICE`), the reader runs as before and says
//! so once.

use std::path::{Path, PathBuf};
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

impl DrainPriority {
    /// What a chunk writer asks for: one priority below the drain (so a drain woken by its
    /// poll preempts its writer's compression), half the drain's budget (the writer needed
    /// 5% of a CPU under `saturate.c`, the drain 3.5%). Priority 0 stays 0.
    pub(crate) fn for_writer(self) -> DrainPriority {
        DrainPriority {
            priority: match self.priority {
                0 => 0,
                p => p.saturating_sub(1).max(1),
            },
            budget: self.budget / 2.0,
        }
    }
}

/// Which recorder thread a [`Governor`] raises, for its messages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Role {
    /// A CPU's drain (`argus-rec-cpuN`).
    Drain,
    /// A CPU's chunk writer (`argus-rec-wN`).
    Writer,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Drain => "trace reader",
            Role::Writer => "chunk writer",
        }
    }
}

/// One thread's state: raised or not, and the CPU time spent in the current window.
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
    role: Role,
}

impl Governor {
    /// Raises the calling thread (the `role` thread of `cpu`) if `want` asks for it.
    pub(crate) fn start(want: DrainPriority, cpu: u32, role: Role) -> Governor {
        let mut g = Governor {
            want,
            raised: false,
            disabled: want.priority == 0,
            window_start: Instant::now(),
            cpu_at_window_start: thread_cpu_time(),
            throttled: 0,
            cpu,
            role,
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
                // Said once per recording, by the first thread refused.
                if !REFUSAL_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        cpu = self.cpu,
                        error = %err,
                        "cannot give the {} real-time priority; on a busy machine the \
                         kernel may lose events (run as root; in a cgroup v1 `cpu` group, \
                         give it a cpu.rt_runtime_us budget; or raise --buffer-kb)",
                        self.role.name()
                    );
                }
            }
        }
    }

    /// Called often (after every few pages and every drain pass, every frame written):
    /// starts a new window when the old one is over, and when the budget of this one is
    /// spent, sleeps until it is over (still real-time, so the thread runs again at once).
    pub(crate) fn tick(&mut self) {
        if self.disabled || !self.raised {
            return;
        }
        let now = Instant::now();
        let cpu = thread_cpu_time();
        let elapsed = now.duration_since(self.window_start);
        if elapsed >= WINDOW {
            self.window_start = now;
            self.cpu_at_window_start = cpu;
            return;
        }
        if cpu.saturating_sub(self.cpu_at_window_start) > self.budget() {
            self.throttled += 1;
            if self.throttled == 1 {
                tracing::warn!(
                    cpu = self.cpu,
                    budget = self.want.budget,
                    "{} used its real-time CPU budget; it pauses until the next {} ms window",
                    self.role.name(),
                    WINDOW.as_millis()
                );
            }
            std::thread::sleep(WINDOW - elapsed);
            self.window_start = Instant::now();
            self.cpu_at_window_start = thread_cpu_time();
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

/// A refusal to raise a thread was said (once for all the recorder's threads).
static REFUSAL_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Nice value of the chunk syncers (`reader.rs`), and of the chunk writers where they may
/// not run real-time: inside the recorder's own scheduling group, it outweighs ten normal
/// threads.
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

/// The share of its real-time period the recorder gives its own cgroup when that group may
/// not run real-time threads at all (`cpu.rt_runtime_us` = 0): half, the most one reader
/// may use by its own budget. It bounds the group; each thread's [`Governor`] bounds it.
pub(crate) const GROUP_RT_SHARE: f64 = 0.5;

/// The real-time budget the recorder gave its cgroup v1 `cpu` group (and the ancestors that
/// needed one), taken back when dropped: after the readers have ended, as the kernel
/// refuses to take a budget from a group that has real-time threads.
#[derive(Debug)]
pub(crate) struct RtGroupGrant {
    /// The `cpu.rt_runtime_us` files written and their values before, innermost first.
    written: Vec<(PathBuf, u64)>,
}

impl RtGroupGrant {
    /// Gives this process's cgroup v1 `cpu` group a real-time budget if it has none
    /// (`Ok(None)`: nothing to do: no such hierarchy, the root group, or a budget already).
    /// Reads `/proc/self/cgroup` and `/proc/self/mountinfo`.
    pub(crate) fn ensure() -> Result<Option<RtGroupGrant>, String> {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("reading /proc/self/cgroup: {e}"))?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
        let Some(dir) = cpu_group_dir(&cgroup, &mountinfo) else {
            return Ok(None);
        };
        Self::ensure_at(&dir.mount, &dir.group)
    }

    /// [`RtGroupGrant::ensure`] for the group `group` (a path below the hierarchy's root,
    /// `/` for the root itself) of the hierarchy mounted at `mount`.
    pub(crate) fn ensure_at(mount: &Path, group: &Path) -> Result<Option<RtGroupGrant>, String> {
        let own = mount.join(group.strip_prefix("/").unwrap_or(group));
        let read = |dir: &Path, file: &str| -> Option<u64> {
            std::fs::read_to_string(dir.join(file))
                .ok()?
                .trim()
                .parse::<i64>()
                .ok()
                .map(|v| v.max(0) as u64)
        };
        if own == mount || read(&own, "cpu.rt_runtime_us").is_none_or(|v| v > 0) {
            return Ok(None);
        }
        // Outermost first: a group's budget may not exceed its parent's (the kernel checks
        // the ratio runtime/period against the parent's at every write).
        let mut chain: Vec<PathBuf> = own
            .ancestors()
            .take_while(|d| d.starts_with(mount) && *d != mount)
            .map(Path::to_path_buf)
            .collect();
        chain.reverse();
        let mut grant = RtGroupGrant {
            written: Vec::new(),
        };
        for dir in chain {
            let (Some(runtime), Some(period)) = (
                read(&dir, "cpu.rt_runtime_us"),
                read(&dir, "cpu.rt_period_us"),
            ) else {
                return Err(format!("{} has no cpu.rt_runtime_us", dir.display()));
            };
            let want = (period as f64 * GROUP_RT_SHARE) as u64;
            if runtime >= want {
                continue;
            }
            let file = dir.join("cpu.rt_runtime_us");
            std::fs::write(&file, want.to_string())
                .map_err(|e| format!("writing {want} to {}: {e}", file.display()))?;
            grant.written.insert(0, (file, runtime));
        }
        tracing::info!(
            group = %own.display(),
            share = GROUP_RT_SHARE,
            "gave the recorder's cpu cgroup a real-time budget (cpu.rt_runtime_us) so its \
             trace readers can keep up with a busy machine; taken back when recording ends"
        );
        Ok(Some(grant))
    }

    /// The files written, innermost first (tests).
    #[cfg(test)]
    fn written(&self) -> Vec<PathBuf> {
        self.written.iter().map(|(p, _)| p.clone()).collect()
    }
}

impl Drop for RtGroupGrant {
    fn drop(&mut self) {
        for (file, before) in &self.written {
            if let Err(e) = std::fs::write(file, before.to_string()) {
                tracing::warn!(
                    file = %file.display(),
                    error = %e,
                    "cannot take back the real-time budget given to the recorder's cgroup"
                );
            }
        }
    }
}

/// Where a cgroup v1 `cpu` hierarchy is mounted and this process's group in it.
#[derive(Debug, PartialEq)]
struct CpuGroupDir {
    mount: PathBuf,
    group: PathBuf,
}

/// The `cpu` controller's group of `/proc/self/cgroup` (v1 lines `ID:cpu,cpuacct:/path`)
/// and its mount point from `/proc/self/mountinfo` (a `cgroup` filesystem whose super
/// options name `cpu`); `None` without a v1 `cpu` hierarchy.
fn cpu_group_dir(cgroup: &str, mountinfo: &str) -> Option<CpuGroupDir> {
    let has_cpu = |list: &str| list.split(',').any(|c| c == "cpu");
    let group = cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        has_cpu(controllers).then(|| PathBuf::from(path))
    })?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fstype, _source, options) = (r.next()?, r.next()?, r.next()?);
        let fields: Vec<&str> = left.split_whitespace().collect();
        // Field 4 is the mount's root inside the hierarchy: only a mount of the whole
        // hierarchy shows every group at its path.
        let mount = fields.get(4)?;
        (fstype == "cgroup" && has_cpu(options) && fields.get(3) == Some(&"/"))
            .then(|| PathBuf::from(mount))
    })?;
    Some(CpuGroupDir { mount, group })
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
    // SCHED_OTHER keeps the thread's nice value (the writer's WRITER_NICE).
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
                Role::Drain,
            );
            (g.raised(), policy())
        });
        assert!(!raised);
        assert_eq!(policy, libc::SCHED_OTHER);
    }

    #[test]
    fn a_thread_past_its_budget_sleeps_out_the_window_and_stays_real_time() {
        // Needs CAP_SYS_NICE, as recording does: the tests run as root with tracefs.
        let (raised, throttled, slept_to, policy_after) = on_thread(|| {
            let mut g = Governor::start(
                DrainPriority {
                    priority: 5,
                    budget: 0.1,
                },
                0,
                Role::Writer,
            );
            let raised = g.raised();
            // Spin past 10% of the window (10 ms of CPU) inside one window.
            let t0 = g.window_start;
            while thread_cpu_time() < g.cpu_at_window_start + Duration::from_millis(15)
                && t0.elapsed() < WINDOW / 2
            {
                std::hint::black_box(0u64);
            }
            g.tick();
            (raised, g.throttled, t0.elapsed(), policy())
        });
        assert!(raised, "raised to SCHED_FIFO (root)");
        assert_eq!(throttled, 1);
        assert!(
            slept_to >= WINDOW,
            "slept to the window's end: {slept_to:?}"
        );
        assert_eq!(policy_after, libc::SCHED_FIFO, "still real-time");
    }

    #[test]
    fn a_writer_runs_one_priority_below_its_drain_on_half_the_budget() {
        let drain = DrainPriority::default();
        let w = drain.for_writer();
        assert_eq!(
            (w.priority, w.budget),
            (drain.priority - 1, drain.budget / 2.0)
        );
        let low = DrainPriority {
            priority: 1,
            budget: 0.5,
        };
        assert_eq!(low.for_writer().priority, 1);
        let off = DrainPriority {
            priority: 0,
            budget: 0.5,
        };
        assert_eq!(off.for_writer().priority, 0);
    }

    #[test]
    fn the_cpu_group_is_found_in_cgroup_v1_and_not_in_v2() {
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
33 30 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 30 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        let cgroup = "12:pids:/\n3:cpuacct:/\n2:cpu:/system.slice/argus.service\n0::/\n";
        assert_eq!(
            cpu_group_dir(cgroup, mountinfo),
            Some(CpuGroupDir {
                mount: PathBuf::from("/sys/fs/cgroup/cpu"),
                group: PathBuf::from("/system.slice/argus.service"),
            })
        );
        // Joined controllers (`cpu,cpuacct`) are one hierarchy.
        let joined = "33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct";
        assert_eq!(
            cpu_group_dir("4:cpu,cpuacct:/a\n", joined).map(|d| d.mount),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
        );
        // cgroup v2 only: no v1 `cpu` hierarchy, nothing to grant.
        assert_eq!(
            cpu_group_dir(
                "0::/user.slice\n",
                "41 30 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw"
            ),
            None
        );
    }

    /// A hierarchy laid out in a plain directory: each group's budget files.
    fn group(dir: &Path, runtime: u64) {
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::write(dir.join("cpu.rt_runtime_us"), runtime.to_string()).expect("runtime");
        std::fs::write(dir.join("cpu.rt_period_us"), "1000000").expect("period");
    }

    fn runtime(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("cpu.rt_runtime_us")).expect("read")
    }

    #[test]
    fn a_group_without_a_real_time_budget_gets_one_with_its_ancestors_and_gives_it_back() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        group(root, 950_000);
        group(&root.join("system.slice"), 0);
        group(&root.join("system.slice/argus.service"), 0);
        let grant = RtGroupGrant::ensure_at(root, Path::new("/system.slice/argus.service"))
            .expect("granted")
            .expect("a grant");
        assert_eq!(runtime(&root.join("system.slice")), "500000");
        assert_eq!(runtime(&root.join("system.slice/argus.service")), "500000");
        assert_eq!(runtime(root), "950000", "the root group is never written");
        assert_eq!(
            grant.written(),
            vec![
                root.join("system.slice/argus.service/cpu.rt_runtime_us"),
                root.join("system.slice/cpu.rt_runtime_us")
            ],
            "innermost first, as they are given back"
        );
        drop(grant);
        assert_eq!(runtime(&root.join("system.slice")), "0");
        assert_eq!(runtime(&root.join("system.slice/argus.service")), "0");
        // A group that has a budget, and the root group, are left alone.
        group(&root.join("rt"), 100_000);
        assert!(RtGroupGrant::ensure_at(root, Path::new("/rt"))
            .expect("ok")
            .is_none());
        assert!(RtGroupGrant::ensure_at(root, Path::new("/"))
            .expect("ok")
            .is_none());
    }

    /// With `CONFIG_RT_GROUP_SCHED` and a cgroup v1 `cpu` hierarchy (this project's test
    /// machines), a thread in a new group cannot enter the real-time class until the
    /// group has a budget; the grant gives one and takes it back.
    #[test]
    fn a_thread_in_a_new_cpu_cgroup_is_raised_after_the_grant() {
        let test = "a_thread_in_a_new_cpu_cgroup_is_raised_after_the_grant";
        if !argus_testkit::live_or_skip(test) {
            return;
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").expect("cgroup");
        let Some(hier) = cpu_group_dir(&cgroup, &mountinfo)
            .filter(|d| d.mount.join("cpu.rt_runtime_us").exists())
        else {
            argus_testkit::skip(
                test,
                "no cgroup v1 cpu hierarchy with real-time budgets (CONFIG_RT_GROUP_SCHED)",
                argus_testkit::REQUIRE_LIVE,
            );
            return;
        };
        let name = format!("argus-test-rt-{}", std::process::id());
        let child = hier.mount.join(&name);
        std::fs::create_dir(&child).expect("mkdir a cpu cgroup (root)");
        let (mount, group) = (hier.mount.clone(), PathBuf::from(format!("/{name}")));
        let outcome = on_thread(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() }.to_string();
            let tasks = mount
                .join(group.strip_prefix("/").unwrap_or(&group))
                .join("tasks");
            std::fs::write(tasks, &tid).expect("join the group");
            let refused = set_policy(Some(5)).is_err();
            let grant = RtGroupGrant::ensure_at(&mount, &group);
            let raised = set_policy(Some(5)).is_ok();
            let _ = set_policy(None);
            std::fs::write(mount.join("tasks"), &tid).expect("back to the root group");
            let given = grant.map(|g| g.map(|g| g.written().len()));
            (refused, given, raised)
        });
        let _ = std::fs::remove_dir(&child);
        assert_eq!(
            outcome,
            (true, Ok(Some(1)), true),
            "(refused, grant, raised after)"
        );
    }
}
