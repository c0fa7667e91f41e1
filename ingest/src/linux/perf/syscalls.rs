//! The `perf_event_open` plumbing: the attribute struct, the syscall and its ioctls,
//! tracepoint filters, and [`Ring`], one event's mmap ring buffer (`1 + 2^n` pages) that
//! the collector drains. Every `unsafe` block of the perf recorder's kernel interface is
//! here.

use crate::format::EventFormat;
use crate::linux::error::RecordError;
use crate::perffile::{
    REGS_USER_MASK, SAMPLE_ADDR, SAMPLE_CALLCHAIN, SAMPLE_CPU, SAMPLE_IP, SAMPLE_RAW,
    SAMPLE_REGS_USER, SAMPLE_STACK_USER, SAMPLE_TID, SAMPLE_TIME,
};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

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
pub(super) fn stack_ring_pages(cpus: usize) -> usize {
    let want = STACK_RINGS_TOTAL / page_size() / cpus.max(1);
    let pow = if want.is_power_of_two() {
        want
    } else {
        want.next_power_of_two() / 2
    };
    pow.clamp(STACK_RING_MIN_PAGES, STACK_RING_PAGES)
}
/// Data pages of each watch ring.
pub(super) const WATCH_RING_PAGES: usize = 16;
/// A stacks ring wakes the collector when 1/WAKEUP_DIVISOR of it is filled.
const WAKEUP_DIVISOR: usize = 8;

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_TYPE_BREAKPOINT: u32 = 5;
pub(super) const HW_BREAKPOINT_W: u32 = 2;
pub(super) const HW_BREAKPOINT_RW: u32 = 3;
const ATTR_SIZE: u32 = 128;
pub(super) const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
pub(super) const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;
pub(super) const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

// Bits of the attr flags word.
const F_DISABLED: u64 = 1 << 0;
const F_INHERIT: u64 = 1 << 1;
const F_EXCLUDE_KERNEL: u64 = 1 << 5;
const F_EXCLUDE_HV: u64 = 1 << 6;
const F_EXCLUDE_IDLE: u64 = 1 << 7;
const F_FREQ: u64 = 1 << 10;
const F_WATERMARK: u64 = 1 << 14;
const F_EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
const F_USE_CLOCKID: u64 = 1 << 25;
const F_INHERIT_THREAD: u64 = 1 << 35;

/// `struct perf_event_attr` up to `sig_data` (PERF_ATTR_SIZE_VER7, 128 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    pub(super) sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_watermark: u32,
    bp_type: u32,
    bp_addr: u64,
    bp_len: u64,
    branch_sample_type: u64,
    pub(super) sample_regs_user: u64,
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

pub(super) fn perf_event_open(
    attr: &PerfEventAttr,
    pid: i32,
    cpu: i32,
) -> std::io::Result<OwnedFd> {
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

pub(super) fn ioctl(fd: &OwnedFd, req: libc::c_ulong, arg: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: perf ioctls on a perf fd; SET_FILTER's argument is a valid C string pointer.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// One perf event with its mmap ring.
pub(super) struct Ring {
    pub(super) stream: u32,
    pub(super) fd: OwnedFd,
    /// Other events writing into this ring (`PERF_EVENT_IOC_SET_OUTPUT`).
    pub(super) also: Vec<OwnedFd>,
    base: *mut u8,
    len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this struct and only touched by the collector thread
// that owns it (it is moved there once, never shared).
unsafe impl Send for Ring {}

impl Ring {
    pub(super) fn new(stream: u32, fd: OwnedFd, data_pages: usize) -> std::io::Result<Ring> {
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
    pub(super) fn drain(&mut self, out: &mut Vec<u8>, mut seen: impl FnMut(u32, &[u8])) -> usize {
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

pub(super) fn sys(call: &'static str) -> impl FnOnce(std::io::Error) -> RecordError {
    move |source| RecordError::Sys { call, source }
}

/// The format of tracepoint `system/name` (its id is the perf `config`).
pub(super) fn tracepoint(
    tracefs: &Path,
    system: &str,
    name: &str,
) -> Result<EventFormat, RecordError> {
    let path = tracefs
        .join("events")
        .join(system)
        .join(name)
        .join("format");
    let text = crate::linux::tracefs::read(&path)?;
    EventFormat::parse(system, &text).map_err(|e| RecordError::Parse {
        path,
        reason: e.to_string(),
    })
}

/// The attributes of a stacks event on tracepoint `id`. `kernel_chain`: whether the
/// kernel part of the callchain is wanted (at `sys_enter` it is always the syscall entry
/// path, so the per-syscall mode leaves it out: the kernel's unwind of it is about a third
/// of a sample's cost).
pub(super) fn stacks_attr(
    id: u64,
    stack_bytes: u32,
    kernel_chain: bool,
    ring_pages: usize,
) -> PerfEventAttr {
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
pub(super) fn set_filter(fd: &OwnedFd, what: &str) -> Result<(), RecordError> {
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
pub(super) const SWITCH_FILTER: &str = "prev_state & 3";
/// The filter of the waker `sched_waking` samples: task context (none of the hardirq 0x08,
/// softirq 0x10 and NMI 0x40 bits of `common_flags`), not the idle task.
pub(super) const WAKING_FILTER: &str = "!(common_flags & 88) && common_pid != 0";

/// The filter of a per-syscall stacks event: `id == N || ...`.
pub(super) fn syscalls_filter(syscalls: &[i32]) -> String {
    syscalls
        .iter()
        .map(|nr| format!("id == {nr}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// The attributes of a profiling event: `cpu-clock` at `hz` samples per second of CPU
/// time (`freq`: the kernel adjusts the period), the idle task excluded, kernel and user
/// callchain, user registers and stack bytes for unwinding.
pub(super) fn profile_attr(hz: u32, stack_bytes: u32, ring_pages: usize) -> PerfEventAttr {
    let mut attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE,
        config: PERF_COUNT_SW_CPU_CLOCK,
        // A union with sample_freq: with `freq` set it is the rate.
        sample_period: u64::from(hz),
        sample_type: SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_CALLCHAIN,
        flags: F_DISABLED | F_FREQ | F_WATERMARK | F_USE_CLOCKID | F_EXCLUDE_HV | F_EXCLUDE_IDLE,
        wakeup_watermark: (ring_pages * page_size() / WAKEUP_DIVISOR) as u32,
        clockid: libc::CLOCK_MONOTONIC,
        ..PerfEventAttr::default()
    };
    if stack_bytes > 0 {
        attr.sample_type |= SAMPLE_REGS_USER | SAMPLE_STACK_USER;
        attr.sample_regs_user = REGS_USER_MASK;
        attr.sample_stack_user = stack_bytes & !7;
    }
    attr
}

pub(super) fn watch_attr(addr: u64, len: u64, bp_type: u32) -> PerfEventAttr {
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

pub(super) fn online_cpus() -> Result<Vec<u32>, RecordError> {
    crate::linux::tracefs::online_cpus()
}

pub(super) fn threads_of(pid: i32) -> Vec<i32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stack_rings_share_their_budget() {
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
        // Profiling: cpu-clock at a frequency (the period field holds it), idle excluded.
        let p = profile_attr(997, 4096, STACK_RING_PAGES);
        assert_eq!((p.type_, p.config, p.sample_period), (1, 0, 997));
        assert_ne!(p.flags & F_FREQ, 0);
        assert_ne!(p.flags & F_EXCLUDE_IDLE, 0);
        assert_eq!(p.sample_stack_user, 4096);
        assert_eq!(p.sample_type & SAMPLE_RAW, 0);
    }

    /// A live profile event samples a thread that computes, at about the asked rate.
    #[test]
    fn a_profile_event_samples_a_computing_thread() {
        let pages = 16;
        let attr = profile_attr(1000, 0, pages);
        let fd = match perf_event_open(&attr, 0, -1) {
            Ok(fd) => fd,
            Err(e) => panic!("perf_event_open (cpu-clock) on this thread: {e}"),
        };
        let mut ring = Ring::new(0, fd, pages).unwrap();
        ioctl(&ring.fd, PERF_EVENT_IOC_ENABLE, 0).unwrap();
        let start = std::time::Instant::now();
        let mut x = 1u64;
        while start.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let mut buf = Vec::new();
        let mut samples = 0;
        ring.drain(&mut buf, |kind, _| samples += usize::from(kind == 9));
        // ~200 at 1000/s of CPU; a loaded machine gives this thread less of it.
        assert!(samples >= 20, "{samples} samples");
    }
}
