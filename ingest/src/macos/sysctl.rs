//! [`Sysctl`]: the [`KdebugSystem`] of a real macOS kernel, `sysctl({CTL_KERN, KERN_KDEBUG,
//! op[, value]})` as xnu's `trace`/`fs_usage` drive it, and `mach2` for the clock.
//!
//! **Never built or run**: this project has no macOS machine and this file is compiled only
//! for `target_os = "macos"`. The sequence and sizes follow xnu's `bsd/kern/kdebug.c`
//! (`kdbg_control`): KDREADTR's length is a count of records, the thread and CPU maps'
//! lengths are bytes, KDBUFWAIT takes its timeout in milliseconds through the length.

use super::{Host, KdebugSystem};
use std::io;
use std::ptr;
use std::time::Duration;

/// `KDEBUG_ENABLE_TRACE` (`bsd/sys/kdebug_private.h`).
const KDEBUG_ENABLE_TRACE: libc::c_int = 0x1;
/// The largest thread or CPU map read (bytes): 2 Mi threads.
const MAX_MAP: usize = 64 << 20;

/// kdebug through `sysctl` on this machine.
pub struct Sysctl {
    timebase: (u32, u32),
}

impl Sysctl {
    /// Reads the timebase.
    pub fn new() -> Sysctl {
        let mut info = mach2::mach_time::mach_timebase_info { numer: 0, denom: 0 };
        // SAFETY: `info` is a valid, writable mach_timebase_info.
        unsafe { mach2::mach_time::mach_timebase_info(&mut info) };
        Sysctl {
            timebase: (info.numer.max(1), info.denom.max(1)),
        }
    }
}

impl Default for Sysctl {
    fn default() -> Self {
        Sysctl::new()
    }
}

/// One `sysctl` on `{CTL_KERN, KERN_KDEBUG, op[, value]}`, with `old`/`len` as the kernel
/// takes them; returns the length it wrote back.
fn kd(
    op: libc::c_int,
    value: Option<libc::c_int>,
    old: *mut libc::c_void,
    mut len: libc::size_t,
) -> io::Result<libc::size_t> {
    let mut mib = [libc::CTL_KERN, libc::KERN_KDEBUG, op, value.unwrap_or(0)];
    let levels: libc::c_uint = if value.is_some() { 4 } else { 3 };
    // SAFETY: `mib` has `levels` valid entries; `old` is null or points to `len` writable
    // bytes (or, for KDREADTR, `len` kd_bufs), as the callers below ensure.
    let r = unsafe { libc::sysctl(mib.as_mut_ptr(), levels, old, &mut len, ptr::null_mut(), 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(len)
    }
}

/// A map read with a buffer doubled until it fits.
fn map(op: libc::c_int) -> io::Result<Vec<u8>> {
    let mut size = 64 << 10;
    loop {
        let mut buf = vec![0u8; size];
        match kd(op, None, buf.as_mut_ptr().cast(), size) {
            Ok(n) => {
                buf.truncate(n.min(size));
                return Ok(buf);
            }
            Err(e)
                if size < MAX_MAP
                    && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOMEM)) =>
            {
                size *= 2;
            }
            Err(e) => return Err(e),
        }
    }
}

impl KdebugSystem for Sysctl {
    fn timebase(&self) -> (u32, u32) {
        self.timebase
    }

    fn now(&self) -> u64 {
        // SAFETY: no preconditions.
        unsafe { mach2::mach_time::mach_absolute_time() }
    }

    fn walltime(&self) -> (u64, u32) {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (d.as_secs(), d.subsec_micros())
    }

    fn host(&self) -> Host {
        // SAFETY: utsname is plain data; uname fills it.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid, writable utsname.
        unsafe { libc::uname(&mut u) };
        let field = |f: &[libc::c_char]| {
            let bytes: Vec<u8> = f
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        Host {
            kernel: field(&u.release),
            machine: field(&u.machine),
            hostname: field(&u.nodename),
        }
    }

    fn setup(&mut self, events: u32) -> io::Result<()> {
        // A setup left by a killed tracer of ours; EINVAL when there is none.
        let _ = kd(libc::KERN_KDREMOVE, None, ptr::null_mut(), 0);
        let events = libc::c_int::try_from(events).unwrap_or(libc::c_int::MAX);
        kd(libc::KERN_KDSETBUF, Some(events), ptr::null_mut(), 0)?;
        kd(libc::KERN_KDSETUP, None, ptr::null_mut(), 0)?;
        Ok(())
    }

    fn enable(&mut self, on: bool) -> io::Result<()> {
        let value = if on { KDEBUG_ENABLE_TRACE } else { 0 };
        kd(libc::KERN_KDENABLE, Some(value), ptr::null_mut(), 0).map(drop)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let ms = libc::size_t::try_from(timeout.as_millis()).unwrap_or(libc::size_t::MAX);
        kd(libc::KERN_KDBUFWAIT, None, ptr::null_mut(), ms.max(1)).map(drop)
    }

    fn read(&mut self, out: &mut Vec<u8>, max: usize) -> io::Result<usize> {
        let start = out.len();
        out.resize(start + max * super::KD_BUF, 0);
        // KDREADTR's length is in records.
        let n = kd(
            libc::KERN_KDREADTR,
            None,
            out[start..].as_mut_ptr().cast(),
            max,
        );
        let n = match n {
            Ok(n) => n.min(max),
            Err(e) => {
                out.truncate(start);
                return Err(e);
            }
        };
        out.truncate(start + n * super::KD_BUF);
        Ok(n)
    }

    fn thread_map(&mut self) -> io::Result<Vec<u8>> {
        map(libc::KERN_KDREADCURTHRMAP)
    }

    fn cpu_map(&mut self) -> io::Result<Vec<u8>> {
        map(libc::KERN_KDCPUMAP)
    }

    fn remove(&mut self) -> io::Result<()> {
        kd(libc::KERN_KDREMOVE, None, ptr::null_mut(), 0).map(drop)
    }
}
