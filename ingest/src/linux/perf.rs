//! Call stacks and hardware watchpoints with `perf_event_open`, recorded next to the tracefs
//! chunks in `TRACE_DIR/perf/` (layout: [`crate::perffile`], `docs/trace-dir.md`).
//!
//! ```text
//!  --stacks   one event per CPU: tracepoint raw_syscalls:sys_enter, filter "id == 0 || ...",
//!             sample TID|TIME|CPU|CALLCHAIN|RAW|REGS_USER(bp,sp,ip)|STACK_USER(1 KiB),
//!             use_clockid = CLOCK_MONOTONIC (the tracefs `mono` clock)
//!  --watch    per (thread, CPU): two breakpoints on the address, W and RW, inherited by
//!             threads created later (inherit + inherit_thread), sample IP|TID|TIME|ADDR|CPU
//!  every event ─► its mmap ring (1 + 2^n pages) ─► collector thread (poll, 20 ms at most)
//!      ─► records prefixed with their stream id ─► zstd frame appended to perf/NNNNNN.perf.zst
//!         every flush interval (fdatasync), chunks of at most 1/8 of the perf budget
//!  maps   /proc/PID/maps of every process at start, of every new pid or exec (/proc scanned
//!         every flush interval: new pid, or /proc/PID/exe changed), and whenever a sample's
//!         user ip is outside its process's last copy (dlopen) ─► perf/maps/PID-TS.maps
//! ```
//!
//! **Why perf and not tracefs `stacktrace`.** A tracefs `stacktrace` trigger gives kernel
//! stacks only, and `options/userstacktrace` applies to every event of the instance (every
//! `sched_switch` would pay a user stack walk). A perf tracepoint event with a filter on the
//! syscall `id` costs only on the chosen syscalls and gives kernel and user frames plus the
//! registers and stack bytes `argus build` needs to unwind frameless functions
//! ([`crate::symbolize`]).
//!
//! **Budget.** With a ring cap the perf directory may use [`PERF_SHARE_DIVISOR`]⁻¹ of it
//! (the tracefs ring's budget shrinks by as much); past that its oldest completed chunks are
//! deleted (maps copies are kept). The recorder's own samples are dropped.
//!
//! **Watchpoints and `@cmd`.** `--watch SPEC@cmd` spawns the command with `PTRACE_TRACEME`:
//! it stops at its `execve`, before its first instruction; the symbol is resolved in the new
//! image, the breakpoints are opened on its only thread, and it is detached. No access is
//! missed (window: none), but a symbol of a library loaded later by `dlopen` cannot be
//! resolved at that point. `--watch SPEC@PID` attaches to every thread listed in
//! `/proc/PID/task` (re-listed until no new thread appears); threads created later inherit
//! the events. x86 has 4 debug registers per CPU: each watch takes two, so at most two
//! watches are possible. x86 data breakpoints cannot watch reads alone: the W event fires on
//! writes, the RW event on both; replay reports an RW hit as a write when a W hit of the same
//! thread and instruction comes within [`crate::replay`]'s pairing window, else as a read.

use super::error::RecordError;
use super::sysinfo;
use crate::format::EventFormat;
use crate::perffile::{
    self, StreamInfo, StreamKind, StreamsFile, PERF_FORMAT_VERSION, RECORD_SAMPLE, REGS_USER_MASK,
    SAMPLE_ADDR, SAMPLE_CALLCHAIN, SAMPLE_CPU, SAMPLE_IP, SAMPLE_RAW, SAMPLE_REGS_USER,
    SAMPLE_STACK_USER, SAMPLE_TID, SAMPLE_TIME,
};
use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The perf directory may use 1/8 of the ring cap.
pub const PERF_SHARE_DIVISOR: u64 = 8;
/// Bytes of user stack copied per stack sample (default of [`PerfConfig::stack_bytes`]).
pub const DEFAULT_STACK_BYTES: u32 = 1024;
/// Data pages of a stacks ring at most (16 MiB of 4 KiB pages: ~13000 samples with 1 KiB
/// stacks, ~40 ms of `--stacks read,write` on a `dd bs=1` loop).
const STACK_RING_PAGES: usize = 4096;
/// Data pages of a stacks ring at least.
const STACK_RING_MIN_PAGES: usize = 256;
/// Bytes of all stacks rings together that [`stack_ring_pages`] aims at (they are pinned
/// kernel memory).
const STACK_RINGS_TOTAL: usize = 64 << 20;

/// Data pages of each per-CPU stacks ring: [`STACK_RINGS_TOTAL`] shared by the CPUs, a
/// power of two between [`STACK_RING_MIN_PAGES`] and [`STACK_RING_PAGES`].
fn stack_ring_pages(cpus: usize) -> usize {
    let want = STACK_RINGS_TOTAL / page_size() / cpus.max(1);
    let pow = if want.is_power_of_two() {
        want
    } else {
        want.next_power_of_two() / 2
    };
    pow.clamp(STACK_RING_MIN_PAGES, STACK_RING_PAGES)
}
/// Data pages of each watch ring.
const WATCH_RING_PAGES: usize = 16;
/// How long the collector sleeps in poll at most.
const POLL_MS: i32 = 20;
/// zstd level of perf chunks.
const ZSTD_LEVEL: i32 = 1;
/// Buffered record bytes that force a frame before the flush interval.
const FRAME_BYTES: usize = 4 << 20;
/// Frames queued for the writer thread at most (then the collector waits: the kernel
/// rings absorb the backlog, and count what they cannot hold as lost).
const FRAMES_QUEUED: usize = 16;
/// Nice value of the collector (draining) thread.
const COLLECTOR_NICE: i32 = -10;
/// A stacks ring wakes the collector when 1/WAKEUP_DIVISOR of it is filled.
const WAKEUP_DIVISOR: usize = 8;

/// The syscalls `--stacks syscalls` samples: those that block or send
/// ([`argus_schema::syscalls`]: sleep, poll, send, receive, notify, yield, plus futex,
/// wait4/waitid, the epoll and semaphore waits).
pub fn default_stack_syscalls() -> Vec<i32> {
    use argus_schema::syscalls as sc;
    let extra = [
        "futex",
        "futex_waitv",
        "wait4",
        "waitid",
        "semop",
        "semtimedop",
        "flock",
        "connect",
        "msgrcv",
        "io_getevents",
        "io_uring_enter",
        "rt_sigtimedwait",
        "rt_sigsuspend",
    ];
    (0..sc::NAMES.len() as i32)
        .filter(|&nr| {
            sc::is_sleep(nr)
                || sc::is_poll(nr)
                || sc::is_send(nr)
                || sc::is_receive(nr)
                || sc::is_notify(nr)
                || sc::is_yield(nr)
                || extra.contains(&sc::NAMES[nr as usize])
        })
        .collect()
}

/// What `--stacks` samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackSet {
    /// Stacks of threads that block and of the tasks that wake them (`sched_switch` with
    /// `prev_state` S or D, `sched_waking` in task context): the default.
    pub blocking: bool,
    /// Stacks at `sys_enter` of these syscalls (the per-syscall mode).
    pub syscalls: Vec<i32>,
}

impl StackSet {
    /// Whether nothing would be sampled.
    pub fn is_empty(&self) -> bool {
        !self.blocking && self.syscalls.is_empty()
    }
}

/// Parses a `--stacks` argument: empty, `default` or `blocking` for the stacks of threads
/// that block and of their wakers ([`StackSet::blocking`]); else a comma-separated list of
/// syscall names or numbers, where `syscalls` stands for [`default_stack_syscalls`] and
/// `blocking` may be added (`--stacks blocking,connect`).
pub fn parse_stacks(spec: &str) -> Result<StackSet, String> {
    let mut out = StackSet::default();
    for item in spec.split(',').map(str::trim) {
        let add: Vec<i32> = match item {
            "" | "default" | "blocking" => {
                out.blocking = true;
                continue;
            }
            "syscalls" => default_stack_syscalls(),
            name => match name
                .parse::<i32>()
                .ok()
                .or_else(|| argus_schema::syscalls::number(name))
            {
                Some(nr) if (0..argus_schema::syscalls::NAMES.len() as i32).contains(&nr) => {
                    vec![nr]
                }
                _ => {
                    return Err(format!(
                        "{name:?} is not a syscall name or number (nor `blocking`, `syscalls`)"
                    ))
                }
            },
        };
        for nr in add {
            if !out.syscalls.contains(&nr) {
                out.syscalls.push(nr);
            }
        }
    }
    Ok(out)
}

/// Where a watched address is: a number or a symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchTarget {
    /// An address.
    Addr(u64),
    /// A symbol of the process's ELF files (raw or demangled name).
    Symbol(String),
}

/// Which process a watch is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchProcess {
    /// A running process.
    Pid(i32),
    /// The recorded command (`@cmd`).
    Command,
}

/// A parsed `--watch ADDR|SYMBOL[:LEN]@PID|@cmd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// The argument as given.
    pub text: String,
    /// What to watch.
    pub target: WatchTarget,
    /// Bytes (1, 2, 4 or 8); `None`: the symbol's size (capped to 8), or 8 for an address.
    pub len: Option<u64>,
    /// Which process.
    pub process: WatchProcess,
}

impl WatchSpec {
    /// Parses `ADDR|SYMBOL[:LEN]@PID|@cmd` (ADDR in hex with `0x`, or decimal).
    pub fn parse(text: &str) -> Result<WatchSpec, String> {
        let (what, proc_part) = text
            .rsplit_once('@')
            .ok_or_else(|| format!("{text:?}: expected ADDR|SYMBOL[:LEN]@PID or @cmd"))?;
        let process = match proc_part {
            "cmd" => WatchProcess::Command,
            p => WatchProcess::Pid(
                p.parse()
                    .ok()
                    .filter(|&p: &i32| p > 0)
                    .ok_or_else(|| format!("{text:?}: {p:?} is not a pid or `cmd`"))?,
            ),
        };
        let (target, len) = match what.rsplit_once(':') {
            Some((t, l)) if !t.ends_with(':') && l.chars().all(|c| c.is_ascii_digit()) => {
                let len: u64 = l
                    .parse()
                    .map_err(|_| format!("{text:?}: bad length {l:?}"))?;
                if ![1, 2, 4, 8].contains(&len) {
                    return Err(format!("{text:?}: length must be 1, 2, 4 or 8, got {len}"));
                }
                (t, Some(len))
            }
            _ => (what, None),
        };
        if target.is_empty() {
            return Err(format!("{text:?}: nothing to watch before '@'"));
        }
        let target = if let Some(hex) = target.strip_prefix("0x") {
            WatchTarget::Addr(
                u64::from_str_radix(hex, 16)
                    .map_err(|_| format!("{text:?}: {target:?} is not a hex address"))?,
            )
        } else if target.chars().all(|c| c.is_ascii_digit()) {
            WatchTarget::Addr(
                target
                    .parse()
                    .map_err(|_| format!("{text:?}: {target:?} is not an address"))?,
            )
        } else {
            WatchTarget::Symbol(target.to_string())
        };
        Ok(WatchSpec {
            text: text.to_string(),
            target,
            len,
            process,
        })
    }
}

/// What to record with perf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfConfig {
    /// What to sample call stacks at (`None`: no stacks).
    pub stacks: Option<StackSet>,
    /// Hardware watchpoints.
    pub watches: Vec<WatchSpec>,
    /// Bytes of user stack copied per stack sample ([`DEFAULT_STACK_BYTES`]; 0 keeps only
    /// the frame-pointer callchain).
    pub stack_bytes: u32,
}

impl PerfConfig {
    /// Whether anything is recorded with perf.
    pub fn enabled(&self) -> bool {
        self.stacks.is_some() || !self.watches.is_empty()
    }

    /// Whether the command must be spawned stopped (a watch on `@cmd`).
    pub fn watches_command(&self) -> bool {
        self.watches
            .iter()
            .any(|w| w.process == WatchProcess::Command)
    }
}

/// What the perf collector recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfSummary {
    /// Stack samples written.
    pub stack_samples: u64,
    /// Watchpoint hits written.
    pub watch_hits: u64,
    /// Samples the kernel dropped (a ring was full).
    pub lost: u64,
    /// Samples of the recorder's own threads, dropped.
    pub own_dropped: u64,
    /// Maps copies written.
    pub maps_copies: u64,
    /// Perf chunks deleted by the budget.
    pub dropped_chunks: u64,
    /// Bytes under `perf/` at the end.
    pub bytes: u64,
}

// ---------------------------------------------------------------------------------------
// perf_event_open plumbing

const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_TYPE_BREAKPOINT: u32 = 5;
const HW_BREAKPOINT_W: u32 = 2;
const HW_BREAKPOINT_RW: u32 = 3;
const ATTR_SIZE: u32 = 128;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

// Bits of the attr flags word.
const F_DISABLED: u64 = 1 << 0;
const F_INHERIT: u64 = 1 << 1;
const F_EXCLUDE_KERNEL: u64 = 1 << 5;
const F_EXCLUDE_HV: u64 = 1 << 6;
const F_WATERMARK: u64 = 1 << 14;
const F_EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
const F_USE_CLOCKID: u64 = 1 << 25;
const F_INHERIT_THREAD: u64 = 1 << 35;

/// `struct perf_event_attr` up to `sig_data` (PERF_ATTR_SIZE_VER7, 128 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_watermark: u32,
    bp_type: u32,
    bp_addr: u64,
    bp_len: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == ATTR_SIZE as usize);

fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid perf_event_attr of `attr.size` bytes that outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid,
            cpu,
            -1i32,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn ioctl(fd: &OwnedFd, req: libc::c_ulong, arg: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: perf ioctls on a perf fd; SET_FILTER's argument is a valid C string pointer.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// One perf event with its mmap ring.
struct Ring {
    stream: u32,
    fd: OwnedFd,
    /// Other events writing into this ring (`PERF_EVENT_IOC_SET_OUTPUT`).
    also: Vec<OwnedFd>,
    base: *mut u8,
    len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this struct and only touched by the collector thread
// that owns it (it is moved there once, never shared).
unsafe impl Send for Ring {}

impl Ring {
    fn new(stream: u32, fd: OwnedFd, data_pages: usize) -> std::io::Result<Ring> {
        let page = page_size();
        let len = page * (1 + data_pages);
        // SAFETY: maps a perf fd as the kernel documents (1 + 2^n pages, shared, rw).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        // SAFETY: the metadata page is mapped; data_offset/data_size are u64 at 1040/1048.
        let (off, size) = unsafe {
            (
                std::ptr::read_volatile(base.add(1040).cast::<u64>()) as usize,
                std::ptr::read_volatile(base.add(1048).cast::<u64>()) as usize,
            )
        };
        let (data_offset, data_size) = if size == 0 {
            (page, page * data_pages)
        } else {
            (off, size)
        };
        Ok(Ring {
            stream,
            fd,
            also: Vec::new(),
            base,
            len,
            data_offset,
            data_size,
        })
    }

    /// Copies every complete record out of the ring into `out` as `stream id + record`;
    /// calls `seen(type, record)` for each. Records are copied once, straight into `out`.
    fn drain(&mut self, out: &mut Vec<u8>, mut seen: impl FnMut(u32, &[u8])) -> usize {
        // SAFETY: data_head (u64 at 1024) is written by the kernel; read it with acquire
        // ordering so the records before it are visible.
        let head = unsafe {
            (*(self.base.add(1024).cast::<std::sync::atomic::AtomicU64>())).load(Ordering::Acquire)
        };
        // SAFETY: data_tail (u64 at 1032) is only written by us.
        let tail_ptr = unsafe { &*(self.base.add(1032).cast::<std::sync::atomic::AtomicU64>()) };
        let mut tail = tail_ptr.load(Ordering::Relaxed);
        let size = self.data_size as u64;
        // Appends ring bytes [from, from+len) (wrapping) to `buf`.
        let copy = |from: u64, len: usize, buf: &mut Vec<u8>| {
            let mut pos = (from % size) as usize;
            let mut left = len;
            while left > 0 {
                let chunk = left.min(self.data_size - pos);
                // SAFETY: pos..pos+chunk is inside the data area of the mapping.
                let src = unsafe {
                    std::slice::from_raw_parts(self.base.add(self.data_offset + pos), chunk)
                };
                buf.extend_from_slice(src);
                left -= chunk;
                pos = 0;
            }
        };
        let mut n = 0;
        let mut header = Vec::with_capacity(8);
        while tail < head {
            header.clear();
            copy(tail, 8, &mut header);
            let rsize = u16::from_le_bytes([header[6], header[7]]) as u64;
            if rsize < 8 || tail + rsize > head {
                // Corrupt or incomplete: skip to head (cannot happen with a sane kernel).
                tail = head;
                break;
            }
            out.extend_from_slice(&self.stream.to_le_bytes());
            let start = out.len();
            copy(tail, rsize as usize, out);
            let kind = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            seen(kind, &out[start..]);
            tail += rsize;
            n += 1;
        }
        tail_ptr.store(tail, Ordering::Release);
        n
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn sys(call: &'static str) -> impl FnOnce(std::io::Error) -> RecordError {
    move |source| RecordError::Sys { call, source }
}

/// The format of tracepoint `system/name` (its id is the perf `config`).
fn tracepoint(tracefs: &Path, system: &str, name: &str) -> Result<EventFormat, RecordError> {
    let path = tracefs
        .join("events")
        .join(system)
        .join(name)
        .join("format");
    let text = super::tracefs::read(&path)?;
    EventFormat::parse(system, &text).map_err(|e| RecordError::Parse {
        path,
        reason: e.to_string(),
    })
}

/// The attributes of a stacks event on tracepoint `id`. `kernel_chain`: whether the
/// kernel part of the callchain is wanted (at `sys_enter` it is always the syscall entry
/// path, so the per-syscall mode leaves it out: the kernel's unwind of it is about a third
/// of a sample's cost).
fn stacks_attr(id: u64, stack_bytes: u32, kernel_chain: bool, ring_pages: usize) -> PerfEventAttr {
    let mut sample_type = SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_CALLCHAIN | SAMPLE_RAW;
    let mut flags = F_DISABLED | F_WATERMARK | F_USE_CLOCKID | F_EXCLUDE_HV;
    if !kernel_chain {
        flags |= F_EXCLUDE_CALLCHAIN_KERNEL;
    }
    let mut attr = PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        size: ATTR_SIZE,
        config: id,
        sample_period: 1,
        flags,
        wakeup_watermark: (ring_pages * page_size() / WAKEUP_DIVISOR) as u32,
        clockid: libc::CLOCK_MONOTONIC,
        ..PerfEventAttr::default()
    };
    if stack_bytes > 0 {
        sample_type |= SAMPLE_REGS_USER | SAMPLE_STACK_USER;
        attr.sample_regs_user = REGS_USER_MASK;
        attr.sample_stack_user = stack_bytes & !7;
    }
    attr.sample_type = sample_type;
    attr
}

/// `common_pid != T && ...` for every thread of this process: the recorder reads `/proc`
/// and `trace_pipe_raw` a lot and its threads block and wake each other; its own samples
/// would only fill the rings. Threads created later are dropped in user space.
fn not_own_threads() -> String {
    threads_of(std::process::id() as i32)
        .iter()
        .map(|t| format!("common_pid != {t}"))
        .collect::<Vec<_>>()
        .join(" && ")
}

/// Sets a tracepoint filter: `(what) && not_own_threads()`.
fn set_filter(fd: &OwnedFd, what: &str) -> Result<(), RecordError> {
    let own = not_own_threads();
    let filter = match (what.is_empty(), own.is_empty()) {
        (true, true) => return Ok(()),
        (false, true) => what.to_string(),
        (true, false) => own,
        (false, false) => format!("({what}) && {own}"),
    };
    let filter = std::ffi::CString::new(filter).map_err(|_| RecordError::Parse {
        path: PathBuf::from("--stacks"),
        reason: "filter has a NUL byte".into(),
    })?;
    ioctl(
        fd,
        PERF_EVENT_IOC_SET_FILTER,
        filter.as_ptr() as libc::c_ulong,
    )
    .map_err(sys("PERF_EVENT_IOC_SET_FILTER"))
}

/// The filter of the blocking `sched_switch` samples: `prev_state` S (1) or D (2) — not a
/// preempted task (`R+`, 0x100), not an idle kernel worker (`I`, 0x80).
const SWITCH_FILTER: &str = "prev_state & 3";
/// The filter of the waker `sched_waking` samples: task context (none of the hardirq 0x08,
/// softirq 0x10 and NMI 0x40 bits of `common_flags`), not the idle task.
const WAKING_FILTER: &str = "!(common_flags & 88) && common_pid != 0";

/// The filter of a per-syscall stacks event: `id == N || ...`.
fn syscalls_filter(syscalls: &[i32]) -> String {
    syscalls
        .iter()
        .map(|nr| format!("id == {nr}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

fn watch_attr(addr: u64, len: u64, bp_type: u32) -> PerfEventAttr {
    PerfEventAttr {
        type_: PERF_TYPE_BREAKPOINT,
        size: ATTR_SIZE,
        sample_period: 1,
        sample_type: SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_CPU,
        flags: F_DISABLED
            | F_INHERIT
            | F_INHERIT_THREAD
            | F_EXCLUDE_KERNEL
            | F_EXCLUDE_HV
            | F_WATERMARK
            | F_USE_CLOCKID,
        wakeup_watermark: (WATCH_RING_PAGES * page_size() / 4) as u32,
        clockid: libc::CLOCK_MONOTONIC,
        bp_type,
        bp_addr: addr,
        bp_len: len,
        ..PerfEventAttr::default()
    }
}

fn online_cpus() -> Result<Vec<u32>, RecordError> {
    super::tracefs::online_cpus()
}

fn threads_of(pid: i32) -> Vec<i32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

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

// ---------------------------------------------------------------------------------------
// The collector

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
        let modes = usize::from(set.blocking) + usize::from(!set.syscalls.is_empty());
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
        for spec in &config.watches {
            if let WatchProcess::Pid(pid) = spec.process {
                let (r, s) = open_watch(spec, pid, &cpus, &mut next_id)?;
                rings.extend(r);
                streams.extend(s);
            }
        }
        let maps_bytes = Arc::new(AtomicU64::new(0));
        let (frames_tx, frames_rx) = crossbeam_channel::bounded(FRAMES_QUEUED);
        let writer = Writer {
            dir: dir.to_path_buf(),
            chunk: None,
            chunk_seq: 0,
            completed: Vec::new(),
            budget,
            chunk_limit: budget.map_or(64 << 20, |b| (b / 8).max(64 << 10)),
            maps_bytes: maps_bytes.clone(),
            dropped_chunks: 0,
        };
        let (spare_tx, spare_rx) = crossbeam_channel::bounded(FRAMES_QUEUED);
        let writer = std::thread::Builder::new()
            .name("argus-rec-perfw".into())
            .spawn(move || writer.run(&frames_rx, &spare_tx))
            .map_err(sys("pthread_create"))?;
        let mut keeper = MapsKeeper {
            dir: dir.to_path_buf(),
            maps: HashMap::new(),
            own_pid: std::process::id() as i32,
            maps_bytes: maps_bytes.clone(),
            copies: 0,
        };
        keeper.scan_proc(true);
        let (maps_tx, maps_rx) = crossbeam_channel::unbounded();
        let interval = flush_interval.unwrap_or(Duration::from_secs(1));
        let maps_keeper = std::thread::Builder::new()
            .name("argus-rec-perfm".into())
            .spawn(move || keeper.run(&maps_rx, interval))
            .map_err(sys("pthread_create"))?;
        let collector = Collector {
            dir: dir.to_path_buf(),
            streams: StreamsFile {
                version: PERF_FORMAT_VERSION,
                streams,
            },
            rings,
            buf: Vec::with_capacity(FRAME_BYTES + (1 << 20)),
            flush_interval,
            summary: PerfSummary::default(),
            own_pid: std::process::id() as i32,
            maps_requests: Some(maps_tx),
            maps_keeper: Some(maps_keeper),
            frames: Some(frames_tx),
            spare: spare_rx,
            writer: Some(writer),
        };
        collector.write_streams()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = crossbeam_channel::unbounded();
        let stop2 = stop.clone();
        let enable: Vec<OwnedFd> = collector
            .rings
            .iter()
            .flat_map(|r| std::iter::once(&r.fd).chain(&r.also))
            .map(|fd| fd.try_clone())
            .collect::<Result<_, _>>()
            .map_err(sys("dup (perf fd)"))?;
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
    pub(crate) fn spawn_command(&mut self, argv: &[String]) -> Result<Child, RecordError> {
        let (program, args) = argv.split_first().ok_or(RecordError::EmptyCommand)?;
        let mut cmd = Command::new(program);
        cmd.args(args);
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

/// A perf chunk being written.
struct OpenChunk {
    path: PathBuf,
    file: File,
    bytes: u64,
    unsynced: bool,
}

/// What the collector knows of a process's maps.
struct KnownProc {
    exe: Option<PathBuf>,
    /// Executable ranges of the last copy.
    exec: Vec<(u64, u64)>,
    last_copy: Instant,
}

/// The draining thread: moves records out of the rings into frames handed to the
/// [`Writer`], and keeps the maps copies. It never compresses, writes chunks or syncs, so a
/// slow disk or a large frame does not keep it from the rings.
struct Collector {
    dir: PathBuf,
    streams: StreamsFile,
    rings: Vec<Ring>,
    buf: Vec<u8>,
    flush_interval: Option<Duration>,
    summary: PerfSummary,
    own_pid: i32,
    maps_requests: Option<crossbeam_channel::Sender<MapsRequest>>,
    maps_keeper: Option<JoinHandle<u64>>,
    frames: Option<crossbeam_channel::Sender<(Vec<u8>, bool)>>,
    /// Emptied frame buffers the writer gives back (no fresh 5 MiB to fault in per frame).
    spare: crossbeam_channel::Receiver<Vec<u8>>,
    writer: Option<JoinHandle<Result<u64, RecordError>>>,
}

static MAPS_SERIAL: AtomicU64 = AtomicU64::new(0);

impl Collector {
    fn write_streams(&self) -> Result<(), RecordError> {
        let path = perffile::perf_dir(&self.dir).join(perffile::STREAMS_FILE);
        let json =
            serde_json::to_vec_pretty(&self.streams).map_err(|source| RecordError::Json {
                path: path.clone(),
                source,
            })?;
        sysinfo::write_atomic(&path, &json)
    }

    fn run(
        mut self,
        stop: &AtomicBool,
        new_rings: &crossbeam_channel::Receiver<(Vec<Ring>, Vec<StreamInfo>)>,
    ) -> Result<PerfSummary, RecordError> {
        // This thread only copies records out of the rings (the writer thread compresses
        // and writes), but it must run soon after a ring's watermark wakes it, or a busy
        // ring fills (16 MiB is ~40 ms of `--stacks read,write` on a `dd bs=1` loop): it
        // gets a higher scheduling weight (nice -10; best effort, needs CAP_SYS_NICE).
        // SAFETY: gettid/setpriority on the calling thread have no memory preconditions.
        unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, COLLECTOR_NICE);
        }
        let mut last_flush = Instant::now();
        let interval = self.flush_interval.unwrap_or(Duration::from_secs(1));
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            while let Ok((rings, streams)) = new_rings.try_recv() {
                self.streams.streams.extend(streams);
                self.write_streams()?;
                self.rings.extend(rings);
            }
            if stopping {
                for ring in &self.rings {
                    for fd in std::iter::once(&ring.fd).chain(&ring.also) {
                        let _ = ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
                    }
                }
            }
            self.drain_all();
            if stopping {
                self.hand_over(true)?;
                break;
            }
            if self.buf.len() >= FRAME_BYTES
                || (self.flush_interval.is_some() && last_flush.elapsed() >= interval)
            {
                self.hand_over(self.flush_interval.is_some())?;
                last_flush = Instant::now();
            }
            self.wait();
        }
        self.frames = None;
        self.maps_requests = None;
        if let Some(h) = self.maps_keeper.take() {
            self.summary.maps_copies = h.join().unwrap_or(0);
        }
        self.summary.dropped_chunks = self.join_writer()?;
        self.summary.bytes = sysinfo::dir_bytes(&perffile::perf_dir(&self.dir));
        sysinfo::sync_dir(&perffile::perf_dir(&self.dir))?;
        Ok(self.summary)
    }

    /// Hands the buffered records to the writer as one frame (`sync`: fdatasync after).
    fn hand_over(&mut self, sync: bool) -> Result<(), RecordError> {
        if self.buf.is_empty() && !sync {
            return Ok(());
        }
        let next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(FRAME_BYTES + (1 << 20)));
        let frame = std::mem::replace(&mut self.buf, next);
        let sent = self
            .frames
            .as_ref()
            .is_some_and(|tx| tx.send((frame, sync)).is_ok());
        if sent {
            return Ok(());
        }
        // The writer stopped: its error says why.
        self.frames = None;
        self.join_writer()?;
        Err(RecordError::Sys {
            call: "perf writer",
            source: std::io::Error::other("the perf chunk writer stopped"),
        })
    }

    fn join_writer(&mut self) -> Result<u64, RecordError> {
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(RecordError::Sys {
                call: "perf writer",
                source: std::io::Error::other("the perf chunk writer panicked"),
            }),
            None => Ok(0),
        }
    }

    fn wait(&self) {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if fds.is_empty() {
            std::thread::sleep(Duration::from_millis(POLL_MS as u64));
            return;
        }
        // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) };
    }

    fn drain_all(&mut self) {
        let mut buf = std::mem::take(&mut self.buf);
        let mut need_maps: Vec<(i32, Option<u64>)> = Vec::new();
        let mut summary = std::mem::take(&mut self.summary);
        let own = self.own_pid;
        for ring in &mut self.rings {
            let Some(info) = self.streams.streams.iter().find(|s| s.id == ring.stream) else {
                continue;
            };
            let stacks = matches!(
                info.kind,
                StreamKind::Stacks { .. } | StreamKind::Sched { .. }
            );
            // Parse only up to the callchain to learn pid and the first user ip.
            let head_type = info.sample_type & !(SAMPLE_RAW | SAMPLE_REGS_USER | SAMPLE_STACK_USER);
            let start = buf.len();
            let mut drop_own: Vec<(usize, usize)> = Vec::new();
            let mut offset = start;
            ring.drain(&mut buf, |kind, rec| {
                let rec_start = offset;
                offset += 4 + rec.len();
                match kind {
                    RECORD_SAMPLE => {
                        let Ok(s) = perffile::parse_sample(0, head_type, 0, &rec[8..]) else {
                            return;
                        };
                        if s.pid == own {
                            summary.own_dropped += 1;
                            drop_own.push((rec_start, offset));
                            return;
                        }
                        if stacks {
                            summary.stack_samples += 1;
                        } else {
                            summary.watch_hits += 1;
                        }
                        let ip = if stacks {
                            s.user_ips.first().copied()
                        } else {
                            s.ip
                        };
                        if need_maps.last() != Some(&(s.pid, ip)) {
                            need_maps.push((s.pid, ip));
                        }
                    }
                    perffile::RECORD_LOST => {
                        if let Some(b) = rec.get(16..24) {
                            let mut a = [0u8; 8];
                            a.copy_from_slice(b);
                            summary.lost += u64::from_le_bytes(a);
                        }
                    }
                    _ => {}
                }
            });
            // Remove the recorder's own samples (back to front keeps offsets valid).
            for (a, b) in drop_own.into_iter().rev() {
                buf.drain(a..b);
            }
        }
        self.buf = buf;
        self.summary = summary;
        need_maps.sort_unstable();
        need_maps.dedup();
        if !need_maps.is_empty() {
            if let Some(tx) = &self.maps_requests {
                let _ = tx.send(need_maps);
            }
        }
    }
}

/// Processes (and a sample's first user ip) whose maps copy may be missing or stale.
type MapsRequest = Vec<(i32, Option<u64>)>;

/// The maps thread: copies `/proc/PID/maps` when the collector sees a sample of a process
/// it has no (or a stale) copy of, and scans `/proc` every flush interval for new processes
/// and execs — reading `/proc` can wait on a busy process's `mmap_lock`, so the collector
/// never does it itself.
struct MapsKeeper {
    dir: PathBuf,
    maps: HashMap<i32, KnownProc>,
    own_pid: i32,
    maps_bytes: Arc<AtomicU64>,
    copies: u64,
}

impl MapsKeeper {
    /// Serves requests until the collector hangs up; returns the number of copies made.
    fn run(
        mut self,
        requests: &crossbeam_channel::Receiver<MapsRequest>,
        interval: Duration,
    ) -> u64 {
        let mut last_scan = Instant::now();
        loop {
            let wait = interval.saturating_sub(last_scan.elapsed());
            match requests.recv_timeout(wait) {
                Ok(need) => self.need(need),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
            if last_scan.elapsed() >= interval {
                self.scan_proc(false);
                last_scan = Instant::now();
            }
        }
        self.copies
    }

    /// Copies the maps of the processes of samples whose copy is missing or stale (the
    /// sample's user ip is outside every executable mapping of the last copy: dlopen).
    fn need(&mut self, need: Vec<(i32, Option<u64>)>) {
        for (pid, ip) in need {
            let known = self.maps.get(&pid);
            let stale = match known {
                None => true,
                Some(k) => ip.is_some_and(|ip| {
                    ip != 0
                        && !k.exec.iter().any(|&(s, e)| ip >= s && ip < e)
                        && k.last_copy.elapsed() >= Duration::from_millis(100)
                }),
            };
            if stale {
                self.copy_maps(pid);
            }
        }
    }

    /// Copies `/proc/PID/maps` into `perf/maps/PID-TS.maps`.
    fn copy_maps(&mut self, pid: i32) {
        let Ok(text) = fs::read(format!("/proc/{pid}/maps")) else {
            return;
        };
        let ts = sysinfo::monotonic_ns();
        let exec = String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| {
                let mut p = l.split_ascii_whitespace();
                let range = p.next()?;
                let perms = p.next()?;
                if perms.as_bytes().get(2) != Some(&b'x') {
                    return None;
                }
                let (s, e) = range.split_once('-')?;
                Some((
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                ))
            })
            .collect();
        // Two copies in the same nanosecond would collide: bump.
        let ts = ts.max(MAPS_SERIAL.fetch_max(ts, Ordering::Relaxed) + 1);
        MAPS_SERIAL.store(ts, Ordering::Relaxed);
        let path = perffile::maps_path(&self.dir, pid, ts);
        if let Err(e) = sysinfo::write_private(&path, &text) {
            tracing::warn!("{e}");
            return;
        }
        self.maps_bytes
            .fetch_add(text.len() as u64, Ordering::Relaxed);
        self.copies += 1;
        self.maps.insert(
            pid,
            KnownProc {
                exe: fs::read_link(format!("/proc/{pid}/exe")).ok(),
                exec,
                last_copy: Instant::now(),
            },
        );
    }

    /// Copies the maps of new processes and of processes whose executable changed (exec).
    fn scan_proc(&mut self, all: bool) {
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        let mut alive = BTreeSet::new();
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            alive.insert(pid);
            if pid == self.own_pid {
                continue;
            }
            let exe = fs::read_link(format!("/proc/{pid}/exe")).ok();
            if exe.is_none() {
                continue; // kernel thread (no user address space) or gone
            }
            let changed = match self.maps.get(&pid) {
                None => true,
                Some(k) => k.exe != exe,
            };
            if all || changed {
                self.copy_maps(pid);
            }
        }
        self.maps.retain(|pid, _| alive.contains(pid));
    }
}

/// The writing thread: compresses each frame the [`Collector`] hands over, appends it to
/// the current chunk, syncs, cuts chunks and deletes the oldest past the budget.
struct Writer {
    dir: PathBuf,
    chunk: Option<OpenChunk>,
    chunk_seq: u32,
    completed: Vec<(PathBuf, u64)>,
    budget: Option<u64>,
    chunk_limit: u64,
    maps_bytes: Arc<AtomicU64>,
    dropped_chunks: u64,
}

impl Writer {
    /// Writes frames until the collector hangs up; returns the chunks deleted by the budget.
    fn run(
        mut self,
        frames: &crossbeam_channel::Receiver<(Vec<u8>, bool)>,
        spare: &crossbeam_channel::Sender<Vec<u8>>,
    ) -> Result<u64, RecordError> {
        while let Ok((mut buf, sync)) = frames.recv() {
            self.write_frame(&buf, sync)?;
            buf.clear();
            let _ = spare.send(buf);
        }
        if let Some(c) = self.chunk.take() {
            self.complete(c)?;
        }
        Ok(self.dropped_chunks)
    }

    /// Compresses `buf` into one zstd frame appended to the current chunk.
    fn write_frame(&mut self, buf: &[u8], sync: bool) -> Result<(), RecordError> {
        if !buf.is_empty() {
            if self.chunk.is_none() {
                let path = perffile::chunk_path(&self.dir, self.chunk_seq);
                self.chunk_seq += 1;
                let file = OpenOptions::new()
                    .create_new(true)
                    .append(true)
                    .mode(sysinfo::FILE_MODE)
                    .open(&path)
                    .map_err(|source| RecordError::io("creating", &path, source))?;
                self.chunk = Some(OpenChunk {
                    path,
                    file,
                    bytes: 0,
                    unsynced: false,
                });
            }
            let frame =
                zstd::bulk::compress(buf, ZSTD_LEVEL).map_err(|source| RecordError::Compress {
                    path: self
                        .chunk
                        .as_ref()
                        .map(|c| c.path.clone())
                        .unwrap_or_default(),
                    source,
                })?;
            if let Some(c) = self.chunk.as_mut() {
                c.file
                    .write_all(&frame)
                    .map_err(|source| RecordError::io("writing", &c.path, source))?;
                c.bytes += frame.len() as u64;
                c.unsynced = true;
            }
        }
        if let Some(c) = self.chunk.as_mut() {
            if sync && c.unsynced {
                c.file
                    .sync_data()
                    .map_err(|source| RecordError::io("syncing", &c.path, source))?;
                c.unsynced = false;
            }
        }
        if self
            .chunk
            .as_ref()
            .is_some_and(|c| c.bytes >= self.chunk_limit)
        {
            if let Some(c) = self.chunk.take() {
                self.complete(c)?;
            }
        }
        self.enforce();
        Ok(())
    }

    fn complete(&mut self, c: OpenChunk) -> Result<(), RecordError> {
        if c.unsynced {
            c.file
                .sync_data()
                .map_err(|source| RecordError::io("syncing", &c.path, source))?;
        }
        self.completed.push((c.path, c.bytes));
        Ok(())
    }

    /// Deletes the oldest completed chunks while `perf/` exceeds its budget.
    fn enforce(&mut self) {
        let Some(budget) = self.budget else { return };
        let current = self.chunk.as_ref().map_or(0, |c| c.bytes);
        let mut total: u64 = self.completed.iter().map(|c| c.1).sum::<u64>()
            + current
            + self.maps_bytes.load(Ordering::Relaxed);
        while total > budget && !self.completed.is_empty() {
            let (path, bytes) = self.completed.remove(0);
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot delete a perf chunk");
            }
            total -= bytes;
            self.dropped_chunks += 1;
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
) -> Result<Option<PerfRecorder>, RecordError> {
    if !config.enabled() {
        return Ok(None);
    }
    let budget = ring_size.map(|s| s / PERF_SHARE_DIVISOR);
    PerfRecorder::start(config, dir, tracefs, flush_interval, budget).map(Some)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn watch_specs_parse() {
        let w = WatchSpec::parse("ARGUS_FLAG@cmd").unwrap();
        assert_eq!(w.target, WatchTarget::Symbol("ARGUS_FLAG".into()));
        assert_eq!(w.process, WatchProcess::Command);
        assert_eq!(w.len, None);
        let w = WatchSpec::parse("0x7f00:4@123").unwrap();
        assert_eq!(w.target, WatchTarget::Addr(0x7f00));
        assert_eq!((w.len, w.process), (Some(4), WatchProcess::Pid(123)));
        let w = WatchSpec::parse("my::flag:1@9").unwrap();
        assert_eq!(w.target, WatchTarget::Symbol("my::flag".into()));
        assert_eq!(w.len, Some(1));
        let w = WatchSpec::parse("my::flag@9").unwrap();
        assert_eq!(w.target, WatchTarget::Symbol("my::flag".into()));
        for bad in [
            "flag", "flag@", "flag@x", "@1", "flag:3@1", "0xzz@1", "f@-1",
        ] {
            assert!(WatchSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stack_syscall_sets() {
        let d = default_stack_syscalls();
        for name in [
            "read",
            "write",
            "futex",
            "nanosleep",
            "epoll_wait",
            "sendmsg",
        ] {
            let nr = argus_schema::syscalls::number(name).unwrap();
            assert!(d.contains(&nr), "{name}");
        }
        assert!(!d.contains(&argus_schema::syscalls::number("getpid").unwrap()));
        let blocking = StackSet {
            blocking: true,
            syscalls: vec![],
        };
        assert_eq!(parse_stacks("").unwrap(), blocking);
        assert_eq!(parse_stacks("default").unwrap(), blocking);
        assert_eq!(parse_stacks("blocking").unwrap(), blocking);
        assert_eq!(parse_stacks("read,1").unwrap().syscalls, vec![0, 1]);
        assert!(!parse_stacks("read,1").unwrap().blocking);
        let both = parse_stacks("blocking,connect").unwrap();
        assert!(both.blocking);
        assert_eq!(
            both.syscalls,
            vec![argus_schema::syscalls::number("connect").unwrap()]
        );
        assert_eq!(parse_stacks("syscalls").unwrap().syscalls, d);
        assert!(parse_stacks("read,nosuch").is_err());
        assert!(StackSet::default().is_empty());
        let pages = |cpus| stack_ring_pages(cpus) * page_size();
        assert_eq!(pages(2), 16 << 20);
        assert_eq!(pages(8), 8 << 20);
        assert_eq!(pages(6), 8 << 20);
        assert_eq!(pages(1024), STACK_RING_MIN_PAGES * page_size());
    }

    #[test]
    fn attr_layout() {
        let a = stacks_attr(7, 8192, true, STACK_RING_PAGES);
        assert_eq!(a.size, 128);
        assert_ne!(a.sample_type & SAMPLE_STACK_USER, 0);
        assert_eq!(a.sample_regs_user, REGS_USER_MASK);
        assert_eq!(a.flags & F_EXCLUDE_CALLCHAIN_KERNEL, 0);
        let a = stacks_attr(7, 0, false, STACK_RING_PAGES);
        assert_eq!(a.sample_type & (SAMPLE_STACK_USER | SAMPLE_REGS_USER), 0);
        assert_ne!(a.flags & F_EXCLUDE_CALLCHAIN_KERNEL, 0);
        assert_eq!(
            a.wakeup_watermark as usize,
            STACK_RING_PAGES * page_size() / WAKEUP_DIVISOR
        );
        let w = watch_attr(0x1000, 4, HW_BREAKPOINT_W);
        assert_eq!((w.bp_addr, w.bp_len, w.bp_type), (0x1000, 4, 2));
        assert_ne!(w.flags & F_INHERIT, 0);
    }
}
