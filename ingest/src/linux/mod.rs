//! Live Linux collector: records tracefs ring-buffer pages into a trace directory
//! (`docs/trace-dir.md`).
//!
//! The recorder works in its own tracefs instance so it never disturbs other tracing users
//! (`trace-cmd`, `perf`, a second recorder):
//!
//! ```text
//!  /sys/kernel/tracing/instances/argus-<pid>/        created by mkdir, removed by rmdir on
//!    trace_clock = mono                               every exit path (Drop guard); stale
//!    buffer_size_kb = RecordConfig::buffer_size_kb    argus-<dead pid> instances are removed
//!    events/<sys>/<event>/enable = 1                  at start
//!    set_event_notrace_pid = every thread of this process (options/event-fork = 0)
//!    trace_marker   ← apps write ftrace/print markers here
//!    per_cpu/cpuN/trace_pipe_raw ──► reader thread N ──► TRACE_DIR/cpuN/NNNNNN.chunk.zst
//! ```
//!
//! Order at start: check prerequisites (root, tracefs, empty output dir, events exist) →
//! create the instance with tracing off → configure → copy formats, write `kallsyms.zst` →
//! start one reader per CPU → exclude this process's threads → enable events → tracing on →
//! write `meta.json` (status `recording`) → snapshot `/proc` into `proc.json` (after tracing
//! is on, so every thread is either in `proc.json` or has its creation traced) → spawn the
//! command, if any.
//!
//! Order at stop: terminate the command if it still runs (SIGTERM, then SIGKILL after 2 s) →
//! tracing off → every reader drains its CPU to `EAGAIN` (partial last page included) and
//! flushes its last chunk → read lost counts from `per_cpu/cpuN/stats` → remove the instance
//! → rewrite `meta.json` with status `complete`. A recording that fails midway leaves
//! `meta.json` at `recording`, which is how replay tells a damaged trace.
//!
//! **The always-on ring.** Without a duration or a command the recording runs until stopped
//! (SIGINT/SIGTERM with [`RecordConfig::handle_signals`]); in every mode the directory is
//! capped at [`RecordConfig::ring_size`] by deleting the oldest completed chunks of any CPU,
//! recorded in `meta.json` `ring.dropped` (`ring.rs`). Chunks are sequences of zstd frames
//! appended every [`RecordConfig::flush_interval`], so a recorder killed with SIGKILL leaves
//! every completed chunk whole and the one in progress readable up to its last frame
//! (`reader.rs`; fsync policy in `docs/trace-dir.md`).
//!
//! **Page tap.** [`RecordConfig::tap`] receives a copy of every page read
//! ([`TappedPage`]) with a non-blocking `try_send`; a full channel drops the copy (counted in
//! [`CpuSummary::tap_dropped`], never the chunk's page). `argus start` decodes the tap live.
//!
//! **Markers.** Writes to the top-level `/sys/kernel/tracing/trace_marker` do not reach an
//! instance. Applications must write to `instances/<name>/trace_marker`
//! ([`Recording::marker_path`], also logged at start). On kernels that have
//! `options/copy_trace_marker` (6.17+), the recorder sets it while tracing is on, so
//! top-level markers are copied into the instance as well
//! ([`RecordConfig::copy_top_level_markers`]).
//!
//! ```no_run
//! use argus_ingest::linux::{RecordConfig, Recorder};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), argus_ingest::linux::RecordError> {
//! // `argus record -o /tmp/trace -- sh -c 'sleep 1'`
//! let mut config = RecordConfig::new("/tmp/trace");
//! config.command = Some(vec!["sh".into(), "-c".into(), "sleep 1".into()]);
//! config.duration = Some(Duration::from_secs(60)); // at most
//! config.handle_signals = true; // Ctrl-C closes the trace cleanly
//! let summary = Recorder::new(config).run()?;
//! println!("{summary}");
//!
//! // Driving it from a library: start, do something, stop.
//! let recording = Recorder::new(RecordConfig::new("/tmp/trace2")).start()?;
//! std::fs::write(recording.marker_path(), "phase 1").ok();
//! let summary = recording.stop()?;
//! assert_eq!(summary.command_status, None);
//! # Ok(())
//! # }
//! ```
//!
//! **Own threads.** `set_event_notrace_pid` hides this process's threads, re-scanned every
//! 250 ms so threads created later are hidden too. The kernel still records
//! `sched_switch` when the *other* task of the switch is traced, and `sched_waking` /
//! `sched_wakeup*` when the woken task is traced (`kernel/trace/trace_events.c`,
//! `event_filter_pid_sched_switch_probe_pre`), so a recorder thread can appear as
//! `common_pid` of those records only.

pub(crate) mod chunks;
mod error;
pub(crate) mod sysinfo;

// What reads the Linux kernel: the recorder, tracefs, perf events, uprobes, the fd scan.
// The rest of this module (the chunk ring, errors, output directories, clocks) serves the
// macOS collector too.
#[cfg(target_os = "linux")]
mod control;
#[cfg(target_os = "linux")]
mod drainprio;
#[cfg(target_os = "linux")]
mod fds;
#[cfg(target_os = "linux")]
mod frontier;
#[cfg(target_os = "linux")]
mod perf;
#[cfg(target_os = "linux")]
mod reader;
#[cfg(target_os = "linux")]
mod recorder;
#[cfg(target_os = "linux")]
mod ring;
#[cfg(target_os = "linux")]
mod signals;
#[cfg(target_os = "linux")]
mod tracefs;
#[cfg(target_os = "linux")]
mod uprobe;

#[cfg(target_os = "linux")]
pub use drainprio::{set_thread_nice, set_thread_sched_idle, DrainPriority};
pub use error::{DispatchError, RecordError};
#[cfg(target_os = "linux")]
pub use fds::scan_pages as file_scan_pages;
#[cfg(target_os = "linux")]
pub use fds::{files_tap, FilesTap, FilesTapEnds};
#[cfg(target_os = "linux")]
pub use frontier::{ReadFrontier, COMMIT_MARGIN};
#[cfg(target_os = "linux")]
pub use perf::{
    default_stack_syscalls, parse_stacks, perf_tap, PerfConfig, PerfSummary, PerfTap, PerfTapEnds,
    StackSet, WatchProcess, WatchSpec, WatchTarget, DEFAULT_STACK_BYTES, PERF_SHARE_DIVISOR,
    PROFILE_STACK_BYTES,
};
#[cfg(target_os = "linux")]
pub(crate) use recorder::stderr_stdio;
#[cfg(target_os = "linux")]
pub use recorder::{
    CpuSummary, OwnThread, RecordConfig, RecordSummary, Recorder, Recording, StopHandle,
    StopReason, TappedPage, DEFAULT_BUFFER_SIZE_KB, DEFAULT_CHUNK_PAGES, DEFAULT_TRACEFS,
};
pub use sysinfo::{cannot_trace, monotonic_ns, wall_offset_ns};
#[cfg(target_os = "linux")]
pub use uprobe::{symbol_file_offset, DispatchSpec, OffsetError};

use crate::tracedir;
use std::path::Path;
use std::time::Duration;

/// The events recorded when none are configured (`--events default`): scheduling (with
/// `sched_pi_setprio`: a waiter naming the owner of the priority-inheritance futex it
/// blocks on), task lifetime, syscalls, interrupts, hrtimers, file locks (`filelock/*`: the
/// kernel's record of every `fcntl`/`flock` lock, unlock and release on close, by inode),
/// socket data ([`OPTIONAL_EVENTS`]: which socket a send fed and which one a receive
/// drained) and `trace_marker` writes (`ftrace/print`).
/// The trade-off against overhead is discussed in `docs/trace-dir.md` ("Event sets").
pub const DEFAULT_EVENTS: &[&str] = &[
    "sched/sched_switch",
    "sched/sched_waking",
    "sched/sched_wakeup_new",
    "sched/sched_process_fork",
    "sched/sched_process_exit",
    "sched/sched_process_exec",
    "sched/sched_pi_setprio",
    "task/task_newtask",
    "task/task_rename",
    "raw_syscalls/sys_enter",
    "raw_syscalls/sys_exit",
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "timer/hrtimer_start",
    "timer/hrtimer_expire_entry",
    "timer/hrtimer_expire_exit",
    "filelock/posix_lock_inode",
    "filelock/flock_lock_inode",
    "filelock/locks_remove_posix",
    "sock/sk_data_ready",
    "sock/sock_recv_length",
    "ftrace/print",
];

/// Events recorded when the kernel has them and skipped (with a warning) when it does not:
/// the socket data events (`sock/sk_data_ready` since Linux 6.5, `sock/sock_recv_length`
/// since 6.3). Without them a message through a socket is linked only through fd identity,
/// which misses descriptors closed before the tracker reads `/proc`.
pub const OPTIONAL_EVENTS: &[&str] = &["sock/sk_data_ready", "sock/sock_recv_length"];

/// What `--events full` adds to [`DEFAULT_EVENTS`]: kernel work items (workqueue), timer
/// wheel timers and signals.
pub const FULL_EXTRA_EVENTS: &[&str] = &[
    "workqueue/workqueue_queue_work",
    "workqueue/workqueue_execute_start",
    "workqueue/workqueue_execute_end",
    "timer/timer_start",
    "timer/timer_expire_entry",
    "timer/timer_expire_exit",
    "signal/signal_generate",
    "signal/signal_deliver",
];

/// Default cap on a trace directory (`--ring-size`): 2 GiB.
pub const DEFAULT_RING_SIZE: u64 = 2 << 30;
/// Default interval between flushes of buffered pages to disk (`--flush-interval`).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// The events of an `--events` argument: `default`, `full`, or a comma-separated list of
/// `system/event` names and set names (`default,signal/signal_generate`). Duplicates are
/// removed, order kept. Whether the kernel has each event is checked when recording starts.
pub fn event_set(spec: &str) -> Result<Vec<String>, RecordError> {
    let mut events: Vec<String> = Vec::new();
    let mut add = |e: &str| {
        if !events.iter().any(|x| x == e) {
            events.push(e.to_string());
        }
    };
    for item in spec.split(',').map(str::trim) {
        match item {
            "default" => DEFAULT_EVENTS.iter().for_each(|e| add(e)),
            "full" => DEFAULT_EVENTS
                .iter()
                .chain(FULL_EXTRA_EVENTS)
                .for_each(|e| add(e)),
            "" => {
                return Err(RecordError::BadEventName {
                    event: spec.to_string(),
                })
            }
            name => {
                if !valid_event_name(name) {
                    return Err(RecordError::BadEventName {
                        event: name.to_string(),
                    });
                }
                add(name)
            }
        }
    }
    Ok(events)
}

/// A size such as `2G`, `512M`, `64k`, `1048576` or `1.5G` (binary units: K = 1024; an
/// optional `B`/`iB` suffix is accepted), for `--ring-size`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let num_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(num_end);
    let unit = unit.trim();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(unit);
    let mult: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(format!("{text:?}: unknown unit (use K, M, G or T)")),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 512M, 2G)"))?;
    let bytes = value * mult as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("{text:?} is not a usable size"));
    }
    Ok(bytes as u64)
}

/// Creates the output directory, or checks that an existing one is empty.
pub(crate) fn prepare_output(dir: &Path) -> Result<(), RecordError> {
    if dir.exists() {
        if !dir.is_dir() {
            return Err(RecordError::OutputNotDirectory {
                path: dir.to_path_buf(),
            });
        }
        let mut entries =
            std::fs::read_dir(dir).map_err(|source| RecordError::io("reading", dir, source))?;
        if entries.next().is_some() {
            return Err(RecordError::OutputNotEmpty {
                path: dir.to_path_buf(),
                is_trace: tracedir::meta_path(dir).exists(),
            });
        }
        return sysinfo::create_dir_private(dir);
    }
    sysinfo::create_dir_private(dir)
}

/// `system/event`, each part a plain path component.
fn valid_event_name(event: &str) -> bool {
    match event.split_once('/') {
        Some((sys, name)) => {
            !sys.is_empty()
                && !name.is_empty()
                && !name.contains('/')
                && sys != ".."
                && name != ".."
                && sys != "."
                && name != "."
        }
        None => false,
    }
}
