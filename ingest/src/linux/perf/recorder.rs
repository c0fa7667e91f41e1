//! The perf part of a recording ([`PerfRecorder`]): opens the stacks events and the
//! watchpoints, starts the [`Collector`] thread, spawns the recorded command (stopped at
//! its `execve` when a watch is on `@cmd`) and stops it all.

use super::collector::Collector;
use super::live::PerfTapEnds;
use super::options::{
    PerfConfig, PerfSummary, WatchProcess, WatchSpec, WatchTarget, PERF_SHARE_DIVISOR,
    PROFILE_STACK_BYTES,
};
use super::syscalls::{
    ioctl, online_cpus, perf_event_open, profile_attr, set_filter, stack_ring_pages, stacks_attr,
    sys, syscalls_filter, threads_of, tracepoint, watch_attr, Ring, HW_BREAKPOINT_RW,
    HW_BREAKPOINT_W, PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_OUTPUT, SWITCH_FILTER,
    WAKING_FILTER, WATCH_RING_PAGES,
};
use crate::linux::error::RecordError;
use crate::linux::sysinfo;
use crate::perffile::{
    self, StreamInfo, StreamKind, SAMPLE_ADDR, SAMPLE_CPU, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME,
};
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Opens the W and RW breakpoints of `spec` on every thread of `pid` (and CPU); returns the
/// rings and their stream descriptions, ids from `next_id`.
fn open_watch(
    spec: &WatchSpec,
    pid: i32,
    cpus: &[u32],
    next_id: &mut u32,
) -> Result<(Vec<Ring>, Vec<StreamInfo>), RecordError> {
    let (addr, size) = match &spec.target {
        WatchTarget::Addr(a) => (*a, 8),
        WatchTarget::Symbol(name) => {
            crate::symbolize::resolve_symbol(pid, name).map_err(|e| RecordError::Parse {
                path: PathBuf::from(format!("--watch {}", spec.text)),
                reason: e.to_string(),
            })?
        }
    };
    let len = spec.len.unwrap_or(match size {
        1 => 1,
        2 => 2,
        3 | 4 => 4,
        _ => 8,
    });
    if addr % len != 0 {
        return Err(RecordError::Parse {
            path: PathBuf::from(format!("--watch {}", spec.text)),
            reason: format!("address {addr:#x} is not aligned to the watched length {len}"),
        });
    }
    let mut rings = Vec::new();
    let mut streams = Vec::new();
    let mut done: BTreeSet<i32> = BTreeSet::new();
    loop {
        let tids: Vec<i32> = threads_of(pid)
            .into_iter()
            .filter(|t| !done.contains(t))
            .collect();
        if tids.is_empty() {
            break;
        }
        for tid in tids {
            done.insert(tid);
            for &cpu in cpus {
                for (bp, access) in [(HW_BREAKPOINT_W, "w"), (HW_BREAKPOINT_RW, "rw")] {
                    let fd = match perf_event_open(&watch_attr(addr, len, bp), tid, cpu as i32) {
                        Ok(fd) => fd,
                        // The thread exited meanwhile.
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                        Err(source) => {
                            return Err(RecordError::Sys {
                                call: "perf_event_open (hardware breakpoint)",
                                source,
                            })
                        }
                    };
                    let id = *next_id;
                    *next_id += 1;
                    let ring = Ring::new(id, fd, WATCH_RING_PAGES).map_err(sys("mmap (perf)"))?;
                    ioctl(&ring.fd, PERF_EVENT_IOC_ENABLE, 0)
                        .map_err(sys("PERF_EVENT_IOC_ENABLE"))?;
                    streams.push(StreamInfo {
                        id,
                        sample_type: SAMPLE_IP
                            | SAMPLE_TID
                            | SAMPLE_TIME
                            | SAMPLE_ADDR
                            | SAMPLE_CPU,
                        regs_user: 0,
                        kind: StreamKind::Watch {
                            spec: spec.text.clone(),
                            pid,
                            tid,
                            cpu,
                            addr,
                            len,
                            access: access.to_string(),
                        },
                    });
                    rings.push(ring);
                }
            }
        }
    }
    if rings.is_empty() {
        return Err(RecordError::Parse {
            path: PathBuf::from(format!("--watch {}", spec.text)),
            reason: format!("process {pid} has no threads (exited?)"),
        });
    }
    tracing::info!(spec = %spec.text, addr = format!("{addr:#x}"), len, pid, "watchpoint set");
    Ok((rings, streams))
}

/// The perf part of a recording: events, rings and the collector thread.
pub(crate) struct PerfRecorder {
    dir: PathBuf,
    config: PerfConfig,
    cpus: Vec<u32>,
    next_id: u32,
    new_rings: crossbeam_channel::Sender<(Vec<Ring>, Vec<StreamInfo>)>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<PerfSummary, RecordError>>>,
}

impl std::fmt::Debug for PerfRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfRecorder")
            .field("dir", &self.dir)
            .field("config", &self.config)
            .finish()
    }
}

impl PerfRecorder {
    /// Bytes of the ring cap set aside for `perf/` (0 when perf is off).
    pub(crate) fn reserve(config: &PerfConfig, ring_size: Option<u64>) -> u64 {
        match ring_size {
            Some(size) if config.enabled() => size / PERF_SHARE_DIVISOR,
            _ => 0,
        }
    }

    /// Opens the stacks events and the `@PID` watches, saves every process's maps and
    /// starts the collector. `budget`: bytes `perf/` may use (`None`: no cap).
    pub(crate) fn start(
        config: &PerfConfig,
        dir: &Path,
        tracefs: &Path,
        flush_interval: Option<Duration>,
        budget: Option<u64>,
        tap: Option<PerfTapEnds>,
    ) -> Result<PerfRecorder, RecordError> {
        let pdir = perffile::perf_dir(dir);
        sysinfo::create_dir_private(&pdir.join(perffile::MAPS_DIR))?;
        let cpus = online_cpus()?;
        let mut next_id = 0u32;
        let mut rings = Vec::new();
        let mut streams = Vec::new();
        // Filters are set once the collector thread exists (so they exclude it too).
        let mut filters: Vec<(OwnedFd, String)> = Vec::new();
        let set = config.stacks.clone().unwrap_or_default();
        // Both modes on: two rings per CPU.
        let modes = usize::from(set.blocking)
            + usize::from(!set.syscalls.is_empty())
            + usize::from(config.profile_hz.is_some());
        let ring_pages = stack_ring_pages(cpus.len() * modes.max(1));
        if !set.syscalls.is_empty() {
            let tp = tracepoint(tracefs, "raw_syscalls", "sys_enter")?;
            let attr = stacks_attr(u64::from(tp.id), config.stack_bytes, false, ring_pages);
            for &cpu in &cpus {
                let fd = perf_event_open(&attr, -1, cpu as i32)
                    .map_err(sys("perf_event_open (raw_syscalls:sys_enter)"))?;
                filters.push((
                    fd.try_clone().map_err(sys("dup (perf fd)"))?,
                    syscalls_filter(&set.syscalls),
                ));
                let ring = Ring::new(next_id, fd, ring_pages).map_err(sys("mmap (perf)"))?;
                streams.push(StreamInfo {
                    id: next_id,
                    sample_type: attr.sample_type,
                    regs_user: attr.sample_regs_user,
                    kind: StreamKind::Stacks {
                        cpu,
                        syscalls: set.syscalls.clone(),
                    },
                });
                next_id += 1;
                rings.push(ring);
            }
        }
        if set.blocking {
            let switch = tracepoint(tracefs, "sched", "sched_switch")?;
            let waking = tracepoint(tracefs, "sched", "sched_waking")?;
            let waking_pid_offset =
                waking
                    .field("pid")
                    .map(|f| f.offset)
                    .ok_or_else(|| RecordError::Parse {
                        path: tracefs.join("events/sched/sched_waking/format"),
                        reason: "no `pid` field".into(),
                    })?;
            let sattr = stacks_attr(u64::from(switch.id), config.stack_bytes, true, ring_pages);
            let wattr = stacks_attr(u64::from(waking.id), config.stack_bytes, true, ring_pages);
            for &cpu in &cpus {
                let sfd = perf_event_open(&sattr, -1, cpu as i32)
                    .map_err(sys("perf_event_open (sched:sched_switch)"))?;
                let wfd = perf_event_open(&wattr, -1, cpu as i32)
                    .map_err(sys("perf_event_open (sched:sched_waking)"))?;
                filters.push((
                    sfd.try_clone().map_err(sys("dup (perf fd)"))?,
                    SWITCH_FILTER.to_string(),
                ));
                filters.push((
                    wfd.try_clone().map_err(sys("dup (perf fd)"))?,
                    WAKING_FILTER.to_string(),
                ));
                let mut ring = Ring::new(next_id, sfd, ring_pages).map_err(sys("mmap (perf)"))?;
                // Both write into the switch event's ring (which must be mapped first).
                ioctl(
                    &wfd,
                    PERF_EVENT_IOC_SET_OUTPUT,
                    ring.fd.as_raw_fd() as libc::c_ulong,
                )
                .map_err(sys("PERF_EVENT_IOC_SET_OUTPUT"))?;
                ring.also.push(wfd);
                streams.push(StreamInfo {
                    id: next_id,
                    sample_type: sattr.sample_type,
                    regs_user: sattr.sample_regs_user,
                    kind: StreamKind::Sched {
                        cpu,
                        switch_type: switch.id,
                        waking_type: waking.id,
                        waking_pid_offset,
                    },
                });
                next_id += 1;
                rings.push(ring);
            }
        }
        if let Some(hz) = config.profile_hz {
            let attr = profile_attr(hz, PROFILE_STACK_BYTES, ring_pages);
            for &cpu in &cpus {
                let fd = perf_event_open(&attr, -1, cpu as i32)
                    .map_err(sys("perf_event_open (cpu-clock, --profile)"))?;
                let ring = Ring::new(next_id, fd, ring_pages).map_err(sys("mmap (perf)"))?;
                streams.push(StreamInfo {
                    id: next_id,
                    sample_type: attr.sample_type,
                    regs_user: attr.sample_regs_user,
                    kind: StreamKind::Profile { cpu, hz },
                });
                next_id += 1;
                rings.push(ring);
            }
        }
        for spec in &config.watches {
            if let WatchProcess::Pid(pid) = spec.process {
                let (r, s) = open_watch(spec, pid, &cpus, &mut next_id)?;
                rings.extend(r);
                streams.extend(s);
            }
        }
        let collector = Collector::new(dir, streams, rings, flush_interval, budget, tap)?;
        collector.write_streams()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = crossbeam_channel::unbounded();
        let stop2 = stop.clone();
        let enable = collector.event_fds()?;
        let handle = std::thread::Builder::new()
            .name("argus-rec-perf".into())
            .spawn(move || collector.run(&stop2, &rx))
            .map_err(sys("pthread_create"))?;
        // The filter can be set once: now, so that it excludes the collector thread too (its
        // /proc scans read). Then enable everything.
        for (fd, filter) in &filters {
            set_filter(fd, filter)?;
        }
        for fd in &enable {
            ioctl(fd, PERF_EVENT_IOC_ENABLE, 0).map_err(sys("PERF_EVENT_IOC_ENABLE"))?;
        }
        Ok(PerfRecorder {
            dir: dir.to_path_buf(),
            config: config.clone(),
            cpus,
            next_id,
            new_rings: tx,
            stop,
            handle: Some(handle),
        })
    }

    /// Spawns the recorded command. With a watch on `@cmd` the child stops at its `execve`
    /// (`PTRACE_TRACEME`), gets its watchpoints and is detached before running.
    pub(crate) fn spawn_command(
        &mut self,
        argv: &[String],
        stdout_to_stderr: bool,
    ) -> Result<Child, RecordError> {
        let (program, args) = argv.split_first().ok_or(RecordError::EmptyCommand)?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        if stdout_to_stderr {
            cmd.stdout(crate::linux::stderr_stdio()?);
        }
        let traced = self.config.watches_command();
        if traced {
            // SAFETY: the closure only calls ptrace(2), which is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().map_err(|source| RecordError::Spawn {
            command: argv.to_vec(),
            source,
        })?;
        if !traced {
            return Ok(child);
        }
        let pid = child.id() as i32;
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r != pid || !libc::WIFSTOPPED(status) {
            return Err(RecordError::Sys {
                call: "waitpid (command stopped at exec)",
                source: std::io::Error::other(format!(
                    "the command did not stop at exec (status {status:#x})"
                )),
            });
        }
        let mut result = Ok(());
        for spec in self.config.watches.clone() {
            if spec.process != WatchProcess::Command {
                continue;
            }
            match open_watch(&spec, pid, &self.cpus, &mut self.next_id) {
                Ok(opened) => {
                    if self.new_rings.send(opened).is_err() {
                        result = Err(RecordError::Sys {
                            call: "perf collector",
                            source: std::io::Error::other("the perf collector stopped"),
                        });
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // Resume it (a failed setup kills it: the recording fails).
        if result.is_err() {
            // SAFETY: kill/ptrace on our own stopped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // SAFETY: detaches our tracee with no signal.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
        result.map(|()| child)
    }

    /// Stops the collector: disables the events, drains the rings, writes the last frame.
    pub(crate) fn stop(mut self) -> Result<PerfSummary, RecordError> {
        self.stop.store(true, Ordering::SeqCst);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(RecordError::Sys {
                call: "perf collector",
                source: std::io::Error::other("the perf collector thread panicked"),
            }),
            None => Ok(PerfSummary::default()),
        }
    }
}

impl Drop for PerfRecorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Opens the perf recorder for a recording when `config` asks for anything.
pub(crate) fn start_if_enabled(
    config: &PerfConfig,
    dir: &Path,
    tracefs: &Path,
    flush_interval: Option<Duration>,
    ring_size: Option<u64>,
    tap: Option<PerfTapEnds>,
) -> Result<Option<PerfRecorder>, RecordError> {
    if !config.enabled() {
        return Ok(None);
    }
    let budget = ring_size.map(|s| s / PERF_SHARE_DIVISOR);
    PerfRecorder::start(config, dir, tracefs, flush_interval, budget, tap).map(Some)
}
