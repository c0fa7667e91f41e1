//! kdebug files, decoded without I/O (issue 19): the bytes of a file in, its thread
//! map, CPU map, timebase and events out, every size checked against the file.
//!
//! Three containers carry the same 64-byte `kd_buf` records (xnu `bsd/sys/kdebug_private.h`;
//! `../shared/realtraces/FORMATS.md` §6):
//!
//! ```text
//! RAW_VERSION1 0x55aa0101  ("trace -b", KERN_KDWRITETR)
//!   i32 version; i32 thread_count; u64 tod_secs; u32 tod_usecs; 4 bytes pad      24 bytes
//!   kd_threadmap[thread_count] { u64 thread; i32 pid; char command[20]; }      32 bytes each
//!   optional kd_cpumap_header { u32 version(=RAW_VERSION1); u32 cpu_count; }
//!            kd_cpumap[cpu_count] { u32 cpu_id; u32 flags; char name[8]; }
//!   zero padding to the next 4 KiB boundary, then kd_buf[] to the end of the file
//! RAW_VERSION2 0x55aa0200  (kperf, Instruments)
//!   u32 version; u32 thread_count; u64 tod_secs; u32 tod_usecs; u32 flags (1: LP64);
//!   u64 tick_frequency; 256 bytes; kd_threadmap[thread_count]; padding to 4 KiB; kd_buf[]
//! V3 / ktrace chunks ("ktrace trace -o", .ktrace, .atrc, .artrace)
//!   chunk: u32 tag; u16 major; u16 minor; u64 size; size bytes; padding to 8
//!   first chunk tag 0x55aa0300: u32 timebase_numer; u32 timebase_denom; u64 timestamp;
//!     u64 walltime_secs; u32 walltime_usecs; u32 tz_minuteswest; u32 tz_dst; u32 flags
//!     (1: LP64); what follows in the chunk (libktrace's CPU description) is not read
//!   0x1c00 CPU map (kd_cpumap_header + kd_cpumap[], or the 40-byte kd_cpumap_ext entries)
//!   0x1d00 thread map (kd_threadmap[])       0x1e00 events (u64 future-events time, kd_buf[])
//!   every other chunk (stackshots, plists, trace codes, os_log) is skipped and listed
//! ```
//!
//! `kd_buf` on LP64 and arm64: `u64 timestamp; u64 arg1..arg4; u64 arg5 (the emitting
//! thread); u32 debugid; u32 cpuid; u64 unused`. The 32-bit layout (V2/V3 without the LP64
//! flag) is `u64 timestamp` (CPU in bits 56–63), `u32 arg1..arg5`, `u32 debugid`: 32 bytes.
//! Times are `mach_absolute_time` units: nanoseconds are `t × numer / denom` (V3's timebase;
//! V2's `tick_frequency` is ticks per second; V1 files carry no timebase and are taken as
//! nanoseconds, as on Intel Macs, which a note says).

use crate::error::IngestError;
use std::path::Path;

/// The first word of a `RAW_VERSION1` file.
pub const RAW_VERSION1: u32 = 0x55aa_0101;
/// The first word of a `RAW_VERSION2` file.
pub const RAW_VERSION2: u32 = 0x55aa_0200;
/// The tag of a V3 file's header chunk (its first word).
pub const RAW_VERSION3: u32 = 0x55aa_0300;

/// V3 chunk tags the decoder reads (xnu `bsd/kern/kdebug.c`, `V3_*`).
pub mod tags {
    /// Configuration (not read).
    pub const CONFIG: u32 = 0x1b00;
    /// The CPU map.
    pub const CPU_MAP: u32 = 0x1c00;
    /// The thread map.
    pub const THREAD_MAP: u32 = 0x1d00;
    /// Events.
    pub const RAW_EVENTS: u32 = 0x1e00;
    /// Padding.
    pub const NULL_CHUNK: u32 = 0x2000;
    /// The header chunk after the magic word of the stream layout
    /// ([`super::V3Layout::Stream`]): xnu's own `RAW_VERSION3` (`kd_header_v3.tag`).
    pub const HEADER: u32 = 0x1000;
    /// A stackshot (kcdata; not read).
    pub const STACKSHOT: u32 = 0x8002;
}

/// The two V3 layouts Argus reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V3Layout {
    /// The first chunk is the header: tag `0x55aa0300`, 40 bytes (timebase, start time, wall
    /// time, time zone, flags), as lldb's `ktrace.py` saves a trace and Argus's collector
    /// writes it.
    Chunks,
    /// The word `0x55aa0300` alone, then a header chunk of tag `0x1000` whose 40 bytes are
    /// followed by a `u32` and a `u64`-length-prefixed property list (the CPUs), padded so
    /// the chunks after it start 8-aligned in the file: the layout of iOS core-profile
    /// streams as pykdebugparser reads them (pymobiledevice3's kdebug captures).
    Stream,
}

/// Bytes of one LP64/arm64 `kd_buf`.
pub const KD_BUF_64: usize = 64;
/// Bytes of one 32-bit `kd_buf`.
pub const KD_BUF_32: usize = 32;
/// Bytes of one `kd_threadmap` entry.
pub const THREADMAP_ENTRY: usize = 32;
/// V1 and V2 put the events at this alignment from the start of the file.
pub const EVENTS_ALIGN: usize = 4096;

/// `debugid`'s function qualifier (its low two bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuncQual {
    /// A point event.
    None,
    /// `DBG_FUNC_START`: an interval begins.
    Start,
    /// `DBG_FUNC_END`: an interval ends.
    End,
    /// Both bits (a start that is also an end).
    All,
}

/// One `kd_buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdEvent {
    /// Where the record starts in the file.
    pub offset: u64,
    /// `mach_absolute_time` units (32-bit records: the low 56 bits).
    pub timestamp: u64,
    /// `arg1..arg4`.
    pub args: [u64; 4],
    /// `arg5`: the thread that emitted the event.
    pub tid: u64,
    /// `class << 24 | subclass << 16 | code << 2 | func`.
    pub debugid: u32,
    /// The CPU (32-bit records: bits 56–63 of the timestamp word).
    pub cpu: u32,
}

impl KdEvent {
    /// `debugid` without the function qualifier (`KDBG_EVENTID_MASK`).
    pub fn eventid(&self) -> u32 {
        self.debugid & 0xffff_fffc
    }

    /// The class (`DBG_MACH` 1, `DBG_BSD` 4, `DBG_TRACE` 7, …).
    pub fn class(&self) -> u8 {
        (self.debugid >> 24) as u8
    }

    /// The subclass.
    pub fn subclass(&self) -> u8 {
        (self.debugid >> 16) as u8
    }

    /// The code within the subclass.
    pub fn code(&self) -> u16 {
        ((self.debugid >> 2) & 0x3fff) as u16
    }

    /// `DBG_FUNC_START` / `DBG_FUNC_END`.
    pub fn func(&self) -> FuncQual {
        match self.debugid & 3 {
            0 => FuncQual::None,
            1 => FuncQual::Start,
            2 => FuncQual::End,
            _ => FuncQual::All,
        }
    }
}

/// One `kd_threadmap` entry: a thread alive when the trace started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KdThread {
    /// The thread id (`thread_tid`).
    pub tid: u64,
    /// Its process (xnu writes 1 for `kernel_task`'s threads: read as 0).
    pub pid: i32,
    /// The process name (at most 20 bytes).
    pub command: String,
}

/// One CPU of the CPU map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KdCpu {
    /// Its number, as `kd_buf.cpuid` gives it.
    pub cpu_id: u32,
    /// `KDBG_CPUMAP_IS_IOP` and such.
    pub flags: u32,
    /// Its name.
    pub name: String,
}

/// Which container a file was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KdVersion {
    /// `RAW_VERSION1`.
    V1,
    /// `RAW_VERSION2`.
    V2,
    /// V3 chunks.
    V3,
}

/// A decoded kdebug file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KdFile {
    /// The container.
    pub version: KdVersion,
    /// 64-bit records.
    pub lp64: bool,
    /// Nanoseconds per `numer / denom` time unit.
    pub timebase: (u64, u64),
    /// Wall-clock time of the start, when the file says (seconds, microseconds).
    pub walltime: Option<(u64, u32)>,
    /// The thread map.
    pub threads: Vec<KdThread>,
    /// The CPU map (empty when the file has none).
    pub cpus: Vec<KdCpu>,
    /// The events, in file order.
    pub events: Vec<KdEvent>,
    /// V3 chunks not read: `(tag, offset)`.
    pub skipped: Vec<(u32, u64)>,
    /// What the decoder assumed or left out, one line each.
    pub notes: Vec<String>,
}

impl KdFile {
    /// A file of `version` with 64-bit records, `timebase`, and nothing else yet.
    pub fn new(version: KdVersion, timebase: (u64, u64)) -> KdFile {
        KdFile {
            version,
            lp64: true,
            timebase,
            walltime: None,
            threads: Vec::new(),
            cpus: Vec::new(),
            events: Vec::new(),
            skipped: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// `t` (in the file's time units) in nanoseconds, saturating.
    pub fn ns(&self, t: u64) -> u64 {
        let (n, d) = self.timebase;
        let v = u128::from(t) * u128::from(n) / u128::from(d.max(1));
        u64::try_from(v).unwrap_or(u64::MAX)
    }
}

/// Whether `bytes` start like a kdebug file.
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && matches!(le_u32(bytes, 0), RAW_VERSION1 | RAW_VERSION2 | RAW_VERSION3)
}

fn malformed(file: &Path, offset: u64, what: impl Into<String>) -> IngestError {
    IngestError::Malformed {
        file: file.to_path_buf(),
        offset,
        what: what.into(),
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A NUL-padded name.
fn name(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `n` bytes at `at`, or an error naming what ran past the end.
fn bytes_at<'a>(
    file: &Path,
    bytes: &'a [u8],
    at: u64,
    n: u64,
    what: &str,
) -> Result<&'a [u8], IngestError> {
    let left = (bytes.len() as u64).saturating_sub(at);
    if n > left {
        return Err(malformed(
            file,
            at,
            format!("{what} of {n} bytes runs past the end of the file ({left} bytes left)"),
        ));
    }
    Ok(&bytes[at as usize..(at + n) as usize])
}

fn threadmap(data: &[u8]) -> Vec<KdThread> {
    data.chunks_exact(THREADMAP_ENTRY)
        .map(|e| {
            let command = name(&e[12..32]);
            let pid = le_u32(e, 8) as i32;
            // xnu marks kernel_task's threads with pid 1 (`_resolve_kernel_task`).
            let pid = if pid == 1 && command == "kernel_task" {
                0
            } else {
                pid
            };
            KdThread {
                tid: le_u64(e, 0),
                pid,
                command,
            }
        })
        .collect()
}

/// A CPU map: `u32 version; u32 count;` then `count` entries of 16 bytes (`kd_cpumap`) or
/// 40 (`kd_cpumap_ext`, 32-byte names), told apart by the size.
fn cpumap(file: &Path, data: &[u8], at: u64) -> Result<Vec<KdCpu>, IngestError> {
    if data.len() < 8 {
        return Err(malformed(file, at, "a CPU map shorter than its header"));
    }
    let count = u64::from(le_u32(data, 4));
    let rest = &data[8..];
    let need = |e: u64| count.checked_mul(e).filter(|&n| n <= rest.len() as u64);
    let entry = if need(40) == Some(rest.len() as u64) {
        40
    } else if need(16).is_some() {
        16
    } else {
        return Err(malformed(
            file,
            at + 4,
            format!(
                "a CPU map of {count} CPUs in {} bytes of entries",
                rest.len()
            ),
        ));
    };
    Ok(rest
        .chunks_exact(entry as usize)
        .take(count as usize)
        .map(|e| KdCpu {
            cpu_id: le_u32(e, 0),
            flags: le_u32(e, 4),
            name: name(&e[8..]),
        })
        .collect())
}

/// The `kd_buf`s of `data` (at `base` in the file); a partial record at the end is an error.
fn records(
    file: &Path,
    data: &[u8],
    base: u64,
    lp64: bool,
    out: &mut Vec<KdEvent>,
) -> Result<(), IngestError> {
    let size = if lp64 { KD_BUF_64 } else { KD_BUF_32 };
    let whole = data.len() / size * size;
    if whole != data.len() {
        return Err(malformed(
            file,
            base + whole as u64,
            format!(
                "a partial event record: {} bytes, a kd_buf is {size}",
                data.len() - whole
            ),
        ));
    }
    out.reserve(data.len() / size);
    for (i, r) in data.chunks_exact(size).enumerate() {
        let offset = base + (i * size) as u64;
        out.push(if lp64 {
            KdEvent {
                offset,
                timestamp: le_u64(r, 0),
                args: [le_u64(r, 8), le_u64(r, 16), le_u64(r, 24), le_u64(r, 32)],
                tid: le_u64(r, 40),
                debugid: le_u32(r, 48),
                cpu: le_u32(r, 52),
            }
        } else {
            let word = le_u64(r, 0);
            KdEvent {
                offset,
                timestamp: word & ((1 << 56) - 1),
                args: [
                    u64::from(le_u32(r, 8)),
                    u64::from(le_u32(r, 12)),
                    u64::from(le_u32(r, 16)),
                    u64::from(le_u32(r, 20)),
                ],
                tid: u64::from(le_u32(r, 24)),
                debugid: le_u32(r, 28),
                cpu: (word >> 56) as u32,
            }
        });
    }
    Ok(())
}

/// Decodes the bytes of a kdebug file (`file` is what errors name).
pub fn parse(file: &Path, bytes: &[u8]) -> Result<KdFile, IngestError> {
    if bytes.len() < 4 {
        return Err(malformed(file, 0, "too short for a kdebug file"));
    }
    match le_u32(bytes, 0) {
        RAW_VERSION1 => parse_v1(file, bytes),
        RAW_VERSION2 => parse_v2(file, bytes),
        RAW_VERSION3 => parse_v3(file, bytes),
        v => Err(malformed(
            file,
            0,
            format!(
                "version word {v:#x} is not a kdebug file's (0x55aa0101, 0x55aa0200, 0x55aa0300)"
            ),
        )),
    }
}

/// The events of a V1/V2 file: from the 4 KiB boundary at or after `end` of the headers to
/// the end of the file.
fn aligned_events(
    file: &Path,
    bytes: &[u8],
    end: u64,
    lp64: bool,
) -> Result<Vec<KdEvent>, IngestError> {
    let at = end.div_ceil(EVENTS_ALIGN as u64) * EVENTS_ALIGN as u64;
    let mut events = Vec::new();
    if at < bytes.len() as u64 {
        records(file, &bytes[at as usize..], at, lp64, &mut events)?;
    }
    Ok(events)
}

fn parse_v1(file: &Path, bytes: &[u8]) -> Result<KdFile, IngestError> {
    let head = bytes_at(file, bytes, 0, 24, "the RAW_VERSION1 header")?;
    let count = le_u32(head, 4);
    let tod = (le_u64(head, 8), le_u32(head, 16));
    let map_len = u64::from(count) * THREADMAP_ENTRY as u64;
    let map = bytes_at(file, bytes, 24, map_len, "the thread map")?;
    let mut threads = threadmap(map);
    // Entries with no thread are padding (the CPU map hides in the map's tail on V1+).
    threads.retain(|t| t.tid != 0);
    let mut end = 24 + map_len;
    let mut cpus = Vec::new();
    // A CPU map may follow: its header repeats the version word.
    if let Ok(h) = bytes_at(file, bytes, end, 8, "a CPU map") {
        if le_u32(h, 0) == RAW_VERSION1 {
            let n = u64::from(le_u32(h, 4));
            let data = bytes_at(file, bytes, end, 8 + n * 16, "the CPU map")?;
            cpus = cpumap(file, data, end)?;
            end += 8 + n * 16;
        }
    }
    let events = aligned_events(file, bytes, end, true)?;
    Ok(KdFile {
        walltime: Some(tod),
        threads,
        cpus,
        events,
        notes: vec![
            "a RAW_VERSION1 file has no timebase: its times are taken as nanoseconds (Intel Macs); \
             on Apple silicon they are 24 MHz ticks"
                .to_string(),
        ],
        ..KdFile::new(KdVersion::V1, (1, 1))
    })
}

fn parse_v2(file: &Path, bytes: &[u8]) -> Result<KdFile, IngestError> {
    const HEADER: u64 = 4 + 4 + 8 + 4 + 4 + 8 + 256;
    let head = bytes_at(file, bytes, 0, HEADER, "the RAW_VERSION2 header")?;
    let count = le_u32(head, 4);
    let tod = (le_u64(head, 8), le_u32(head, 16));
    let lp64 = le_u32(head, 20) & 1 != 0;
    let freq = le_u64(head, 24);
    if freq == 0 {
        return Err(malformed(file, 24, "a tick frequency of 0"));
    }
    let map_len = u64::from(count) * THREADMAP_ENTRY as u64;
    let map = bytes_at(file, bytes, HEADER, map_len, "the thread map")?;
    let threads = threadmap(map);
    let events = aligned_events(file, bytes, HEADER + map_len, lp64)?;
    Ok(KdFile {
        lp64,
        walltime: (tod != (0, 0)).then_some(tod),
        threads,
        events,
        ..KdFile::new(KdVersion::V2, (1_000_000_000, freq))
    })
}

/// Which V3 layout `bytes` (starting with `0x55aa0300`) have.
pub fn v3_layout(bytes: &[u8]) -> V3Layout {
    if bytes.len() >= 8 && le_u32(bytes, 4) == tags::HEADER {
        V3Layout::Stream
    } else {
        V3Layout::Chunks
    }
}

fn parse_v3(file: &Path, bytes: &[u8]) -> Result<KdFile, IngestError> {
    let mut kd = KdFile::new(KdVersion::V3, (1, 1));
    let len = bytes.len() as u64;
    // The header's 40 bytes, and where the chunks after it start.
    let (fields_at, mut at) = match v3_layout(bytes) {
        V3Layout::Chunks => {
            let head = bytes_at(file, bytes, 0, 16, "a chunk header")?;
            let size = le_u64(head, 8);
            bytes_at(file, bytes, 16, size, "a chunk")?;
            if size < 40 {
                return Err(malformed(
                    file,
                    16,
                    format!("a V3 header chunk of {size} bytes (at least 40)"),
                ));
            }
            (16, (16 + size).div_ceil(8).saturating_mul(8).min(len))
        }
        V3Layout::Stream => {
            // magic, chunk header, 40 bytes, u32, u64 plist length.
            let head = bytes_at(file, bytes, 0, 72, "a stream header")?;
            let plist = le_u64(head, 64);
            bytes_at(file, bytes, 72, plist, "the header's property list")?;
            // Padded to 8 bytes from the chunk header, then 4 bytes to realign.
            let end = 4 + (68 + plist).div_ceil(8).saturating_mul(8) + 4;
            kd.notes.push(
                "the stream layout of iOS core-profile captures (the header's property list \
                 of CPUs is not read)"
                    .into(),
            );
            (20, end.min(len))
        }
    };
    let fields = &bytes[fields_at..fields_at + 40];
    let (numer, denom) = (le_u32(fields, 0), le_u32(fields, 4));
    if numer == 0 || denom == 0 {
        return Err(malformed(
            file,
            fields_at as u64,
            format!("a timebase of {numer}/{denom}"),
        ));
    }
    kd.timebase = (u64::from(numer), u64::from(denom));
    let wall = (le_u64(fields, 16), le_u32(fields, 24));
    kd.walltime = (wall != (0, 0)).then_some(wall);
    kd.lp64 = le_u32(fields, 36) & 1 != 0;
    while at < len {
        let head = bytes_at(file, bytes, at, 16, "a chunk header")?;
        let tag = le_u32(head, 0);
        let size = le_u64(head, 8);
        let data = bytes_at(file, bytes, at + 16, size, "a chunk")?;
        let data_at = at + 16;
        match tag {
            tags::THREAD_MAP => {
                if data.len() % THREADMAP_ENTRY != 0 {
                    return Err(malformed(
                        file,
                        data_at,
                        format!("a thread map of {size} bytes (entries are {THREADMAP_ENTRY})"),
                    ));
                }
                kd.threads.extend(threadmap(data));
            }
            tags::CPU_MAP => kd.cpus = cpumap(file, data, data_at)?,
            tags::RAW_EVENTS => {
                if data.len() < 8 {
                    return Err(malformed(
                        file,
                        data_at,
                        "an events chunk shorter than its 8-byte time",
                    ));
                }
                records(file, &data[8..], data_at + 8, kd.lp64, &mut kd.events)?;
            }
            tags::NULL_CHUNK => {}
            _ => kd.skipped.push((tag, at)),
        }
        // Chunks are 8-aligned; the last one may end unpadded.
        at = (at + 16 + size).div_ceil(8).saturating_mul(8).min(len);
    }
    Ok(kd)
}

/// Start/end pairs: for each `DBG_FUNC_END` the `DBG_FUNC_START` of the same event id on the
/// same thread it closes (the innermost open one), as indexes into `events`. Starts never
/// ended and ends never started are left out.
pub fn pair_intervals(events: &[KdEvent]) -> Vec<(usize, usize)> {
    let mut open: std::collections::HashMap<(u64, u32), Vec<usize>> =
        std::collections::HashMap::new();
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e.func() {
            FuncQual::Start => open.entry((e.tid, e.eventid())).or_default().push(i),
            FuncQual::End => {
                if let Some(s) = open.get_mut(&(e.tid, e.eventid())).and_then(Vec::pop) {
                    out.push((s, i));
                }
            }
            FuncQual::None | FuncQual::All => {}
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::kdebug::encode;

    fn ev(ts: u64, tid: u64, debugid: u32, cpu: u32, args: [u64; 4]) -> KdEvent {
        KdEvent {
            offset: 0,
            timestamp: ts,
            args,
            tid,
            debugid,
            cpu,
        }
    }

    fn kd_buf64(e: &KdEvent) -> Vec<u8> {
        let mut b = Vec::new();
        encode::kd_buf(&mut b, e);
        b
    }

    fn thread_entry(tid: u64, pid: i32, command: &str) -> Vec<u8> {
        let mut b = tid.to_le_bytes().to_vec();
        b.extend_from_slice(&pid.to_le_bytes());
        let mut c = [0u8; 20];
        c[..command.len()].copy_from_slice(command.as_bytes());
        b.extend_from_slice(&c);
        b
    }

    fn chunk(tag: u32, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        encode::v3_chunk(&mut b, tag, data);
        b
    }

    fn sample_events() -> Vec<KdEvent> {
        vec![
            ev(1_000, 0x101, 0x0140_0018, 0, [0x202, 31, 0, 0]),
            ev(1_500, 0x101, 0x0140_0000, 0, [0, 0x202, 31, 31]),
            ev(2_000, 0x202, 0x040c_0031, 1, [3, 0, 0, 0]),
            ev(2_600, 0x202, 0x040c_0032, 1, [0, 8, 0, 0]),
        ]
    }

    fn v3(events: &[KdEvent]) -> Vec<u8> {
        let mut header = Vec::new();
        for v in [125u32, 3] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        header.extend_from_slice(&7u64.to_le_bytes());
        header.extend_from_slice(&1_700_000_000u64.to_le_bytes());
        for v in [250_000u32, 0, 0, 1] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        let mut f = chunk(RAW_VERSION3, &header);
        let mut map = thread_entry(0x101, 1, "kernel_task");
        map.extend(thread_entry(0x202, 88, "Safari"));
        f.extend(chunk(tags::THREAD_MAP, &map));
        f.extend(chunk(0x8002, b"stackshot bytes, skipped"));
        let mut cpus = 1u32.to_le_bytes().to_vec();
        cpus.extend_from_slice(&2u32.to_le_bytes());
        for (id, n) in [(0u32, "cpu0"), (1, "cpu1")] {
            cpus.extend_from_slice(&id.to_le_bytes());
            cpus.extend_from_slice(&0u32.to_le_bytes());
            let mut name = [0u8; 8];
            name[..n.len()].copy_from_slice(n.as_bytes());
            cpus.extend_from_slice(&name);
        }
        f.extend(chunk(tags::CPU_MAP, &cpus));
        let (a, b) = events.split_at(events.len() / 2);
        for part in [a, b] {
            let mut data = 0u64.to_le_bytes().to_vec();
            for e in part {
                data.extend(kd_buf64(e));
            }
            f.extend(chunk(tags::RAW_EVENTS, &data));
        }
        f
    }

    #[test]
    fn v3_chunks_give_maps_timebase_and_events() {
        let events = sample_events();
        let bytes = v3(&events);
        let kd = parse(Path::new("t.ktrace"), &bytes).expect("a kdebug file");
        assert_eq!(kd.version, KdVersion::V3);
        assert_eq!(kd.timebase, (125, 3));
        assert_eq!(kd.walltime, Some((1_700_000_000, 250_000)));
        assert_eq!(kd.ns(3), 125);
        assert_eq!(
            kd.threads,
            vec![
                KdThread {
                    tid: 0x101,
                    pid: 0,
                    command: "kernel_task".into()
                },
                KdThread {
                    tid: 0x202,
                    pid: 88,
                    command: "Safari".into()
                }
            ]
        );
        assert_eq!(kd.cpus.len(), 2);
        assert_eq!(kd.cpus[1].name, "cpu1");
        assert_eq!(kd.skipped.len(), 1);
        assert_eq!(kd.skipped[0].0, 0x8002);
        let got: Vec<KdEvent> = kd
            .events
            .iter()
            .map(|e| KdEvent { offset: 0, ..*e })
            .collect();
        assert_eq!(got, events);
        // Offsets point at the records.
        for e in &kd.events {
            let at = e.offset as usize;
            assert_eq!(le_u32(&bytes, at + 48), e.debugid);
        }
        let e = &kd.events[2];
        assert_eq!((e.class(), e.subclass(), e.code()), (4, 0x0c, 12));
        assert_eq!(e.func(), FuncQual::Start);
        assert_eq!(e.eventid(), 0x040c_0030);
        assert_eq!(pair_intervals(&kd.events), vec![(2, 3)]);
    }

    #[test]
    fn v2_and_v1_headers_pad_to_4_kib() {
        let events = sample_events();
        // V2, LP64, 24 MHz.
        let mut f = RAW_VERSION2.to_le_bytes().to_vec();
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&0u64.to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&24_000_000u64.to_le_bytes());
        f.extend_from_slice(&[0xaa; 256]);
        f.extend(thread_entry(0x202, 88, "Safari"));
        f.resize(4096, 0x55);
        for e in &events {
            f.extend(kd_buf64(e));
        }
        let kd = parse(Path::new("t.trace"), &f).expect("decodes");
        assert_eq!(kd.version, KdVersion::V2);
        assert_eq!(kd.threads.len(), 1);
        assert_eq!(kd.events.len(), 4);
        assert_eq!(kd.events[0].offset, 4096);
        assert_eq!(kd.ns(24), 1_000);
        assert_eq!(kd.walltime, None);

        // V1 with a CPU map after the thread map.
        let mut f = RAW_VERSION1.to_le_bytes().to_vec();
        f.extend_from_slice(&2u32.to_le_bytes());
        f.extend_from_slice(&1_700_000_000u64.to_le_bytes());
        f.extend_from_slice(&5u32.to_le_bytes());
        f.extend_from_slice(&[0; 4]);
        f.extend(thread_entry(0x202, 88, "Safari"));
        f.extend(thread_entry(0, 0, ""));
        f.extend_from_slice(&RAW_VERSION1.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(b"cpu0\0\0\0\0");
        f.resize(4096, 0);
        for e in &events {
            f.extend(kd_buf64(e));
        }
        let kd = parse(Path::new("t.trace"), &f).expect("decodes");
        assert_eq!(kd.version, KdVersion::V1);
        assert_eq!(kd.threads.len(), 1, "the empty entry is padding");
        assert_eq!(kd.cpus.len(), 1);
        assert_eq!(kd.walltime, Some((1_700_000_000, 5)));
        assert_eq!(kd.events.len(), 4);
        assert_eq!(kd.notes.len(), 1);
    }

    #[test]
    fn thirty_two_bit_records_carry_the_cpu_in_the_timestamp() {
        let mut header = Vec::new();
        for v in [1u32, 1] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        header.extend_from_slice(&[0; 28]);
        header.extend_from_slice(&0u32.to_le_bytes()); // flags: not LP64
        let mut f = chunk(RAW_VERSION3, &header);
        let mut rec = (3u64 << 56 | 12_345).to_le_bytes().to_vec();
        for a in [1u32, 2, 3, 4, 0x77, 0x0140_0018] {
            rec.extend_from_slice(&a.to_le_bytes());
        }
        let mut data = 0u64.to_le_bytes().to_vec();
        data.extend(rec);
        f.extend(chunk(tags::RAW_EVENTS, &data));
        let kd = parse(Path::new("t"), &f).expect("decodes");
        assert!(!kd.lp64);
        let e = kd.events[0];
        assert_eq!(
            (e.timestamp, e.cpu, e.args, e.tid, e.debugid),
            (12_345, 3, [1, 2, 3, 4], 0x77, 0x0140_0018)
        );
    }

    /// Every prefix of a file is an error naming an offset inside it, or a shorter file
    /// (a cut at a chunk boundary); never a panic.
    #[test]
    fn truncations_name_an_offset() {
        let bytes = v3(&sample_events());
        let file = Path::new("t.ktrace");
        for cut in 0..bytes.len() {
            match parse(file, &bytes[..cut]) {
                Ok(kd) => assert!(kd.events.len() < 4, "cut {cut}"),
                Err(IngestError::Malformed { offset, .. }) => {
                    assert!(offset <= cut as u64, "cut {cut}: offset {offset}")
                }
                Err(e) => panic!("cut {cut}: {e}"),
            }
        }
        // A chunk size past the end of the file.
        let mut bad = bytes.clone();
        let at = 16 + 40 + 8; // the thread map chunk's size
        bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let Err(IngestError::Malformed { offset, .. }) = parse(file, &bad) else {
            panic!("a huge chunk is an error");
        };
        assert_eq!(offset, 16 + 40 + 16);
    }

    #[test]
    fn pairs_nest_per_thread_and_event() {
        let s = |ts, tid, id: u32| ev(ts, tid, id | 1, 0, [0; 4]);
        let e = |ts, tid, id: u32| ev(ts, tid, id | 2, 0, [0; 4]);
        let events = vec![
            s(1, 7, 0x0105_0000),
            s(2, 7, 0x0105_0000),
            s(3, 8, 0x0105_0000),
            e(4, 7, 0x0105_0000),
            e(5, 8, 0x0105_0000),
            e(6, 7, 0x0105_0000),
            e(7, 7, 0x0105_0000),
        ];
        assert_eq!(pair_intervals(&events), vec![(0, 5), (1, 3), (2, 4)]);
    }
}
