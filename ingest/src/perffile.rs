//! The `perf/` part of a trace directory: call-stack samples (`argus record --stacks`) and
//! hardware-watchpoint hits (`--watch`), recorded with `perf_event_open` by
//! [`crate::linux`] and read back here by replay and by [`crate::symbolize`].
//!
//! ```text
//!  TRACE_DIR/perf/
//!    streams.json          {"version":1,"streams":[{id, kind, sample_type, ...}]}
//!    NNNNNN.perf.zst       chunks: zstd frames of records (crash-safe like cpuN chunks)
//!    maps/PID-TS.maps      copies of /proc/PID/maps taken at CLOCK_MONOTONIC TS
//! ```
//!
//! A chunk's decompressed content is a sequence of records, each the stream id (`u32` LE)
//! followed by one perf ring-buffer record exactly as the kernel wrote it
//! (`struct perf_event_header` + body, `header.size` bytes). Samples are parsed with the
//! `sample_type` of their stream ([`parse_sample`]); `PERF_RECORD_LOST` records count lost
//! samples; other record types are skipped. Layout details in `docs/trace-dir.md`.

use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, Tid};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The directory inside a trace directory.
pub const PERF_DIR: &str = "perf";
/// The stream description file inside [`PERF_DIR`].
pub const STREAMS_FILE: &str = "streams.json";
/// The maps directory inside [`PERF_DIR`].
pub const MAPS_DIR: &str = "maps";
/// Version of `streams.json` and of the chunk layout.
pub const PERF_FORMAT_VERSION: u32 = 1;

/// `PERF_SAMPLE_IP`.
pub const SAMPLE_IP: u64 = 1 << 0;
/// `PERF_SAMPLE_TID`.
pub const SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`.
pub const SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ADDR`.
pub const SAMPLE_ADDR: u64 = 1 << 3;
/// `PERF_SAMPLE_READ` (not supported by the parser).
pub const SAMPLE_READ: u64 = 1 << 4;
/// `PERF_SAMPLE_CALLCHAIN`.
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
/// `PERF_SAMPLE_ID`.
pub const SAMPLE_ID: u64 = 1 << 6;
/// `PERF_SAMPLE_CPU`.
pub const SAMPLE_CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_PERIOD`.
pub const SAMPLE_PERIOD: u64 = 1 << 8;
/// `PERF_SAMPLE_STREAM_ID`.
pub const SAMPLE_STREAM_ID: u64 = 1 << 9;
/// `PERF_SAMPLE_RAW`.
pub const SAMPLE_RAW: u64 = 1 << 10;
/// `PERF_SAMPLE_BRANCH_STACK` (not supported by the parser).
pub const SAMPLE_BRANCH_STACK: u64 = 1 << 11;
/// `PERF_SAMPLE_REGS_USER`.
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
/// `PERF_SAMPLE_STACK_USER`.
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
/// `PERF_SAMPLE_IDENTIFIER`.
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;

/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = 2;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = 9;

/// x86-64 `perf_regs` indices of the user registers recorded: bp, sp, ip.
pub const REG_BP: u32 = 6;
/// See [`REG_BP`].
pub const REG_SP: u32 = 7;
/// See [`REG_BP`].
pub const REG_IP: u32 = 8;
/// The `sample_regs_user` mask recording bp, sp and ip.
pub const REGS_USER_MASK: u64 = (1 << REG_BP) | (1 << REG_SP) | (1 << REG_IP);

/// Callchain context markers (`PERF_CONTEXT_*`): values at or above this are markers.
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
const PERF_CONTEXT_USER: u64 = -512i64 as u64;

/// What one perf event (a stream) records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StreamKind {
    /// Call stacks at `raw_syscalls:sys_enter` for these syscall numbers (one stream per
    /// CPU, system-wide).
    Stacks {
        /// The CPU.
        cpu: u32,
        /// Syscall numbers of the tracepoint filter.
        syscalls: Vec<i32>,
    },
    /// Call stacks of threads that block and of the tasks that wake them (one stream per
    /// CPU, system-wide, both tracepoints writing into the same ring): `sched:sched_switch`
    /// where `prev` leaves the CPU asleep (`prev_state` S or D), taken in the context of the
    /// task switching out; `sched:sched_waking` taken in the context of the waker (task
    /// context only: not in interrupts). The tracepoint of a sample is its raw data's
    /// `common_type` (the `u16` at byte 0).
    Sched {
        /// The CPU.
        cpu: u32,
        /// `common_type` of `sched_switch` samples.
        switch_type: u16,
        /// `common_type` of `sched_waking` samples.
        waking_type: u16,
        /// Byte offset of `sched_waking`'s `pid` (the woken task, `i32`) in the raw data.
        waking_pid_offset: u32,
    },
    /// Time-based call-stack sampling (`--profile HZ`): a `cpu-clock` software event per
    /// CPU, system-wide, `hz` samples per second of each running thread (idle excluded). Its
    /// samples belong to no trace event: `argus dig` reads them ([`PerfTrace::profile_samples`]).
    Profile {
        /// The CPU.
        cpu: u32,
        /// Samples per second asked of the kernel (`sample_freq`).
        hz: u32,
    },
    /// A hardware breakpoint on `[addr, addr+len)` of process `pid`.
    Watch {
        /// The `--watch` argument as given.
        spec: String,
        /// The process.
        pid: i32,
        /// The thread the event was opened on (threads created later inherit it).
        tid: i32,
        /// The CPU of this per-(thread, CPU) event.
        cpu: u32,
        /// Watched address.
        addr: u64,
        /// Watched length in bytes (1, 2, 4 or 8).
        len: u64,
        /// `w` (fires on writes) or `rw` (fires on reads and writes).
        access: String,
    },
}

/// One stream of `streams.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// The id prefixed to each of its records in the chunks.
    pub id: u32,
    /// The perf `sample_type` its samples were recorded with.
    pub sample_type: u64,
    /// The perf `sample_regs_user` mask.
    pub regs_user: u64,
    /// What it records.
    #[serde(flatten)]
    pub kind: StreamKind,
}

/// `perf/streams.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamsFile {
    /// [`PERF_FORMAT_VERSION`].
    pub version: u32,
    /// Every stream opened so far.
    pub streams: Vec<StreamInfo>,
}

/// Registers of the interrupted user context (`PERF_SAMPLE_REGS_USER`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
}

/// A parsed `PERF_RECORD_SAMPLE`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfSample {
    /// The stream it came from.
    pub stream: u32,
    /// `PERF_SAMPLE_IP`.
    pub ip: Option<u64>,
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// CLOCK_MONOTONIC nanoseconds.
    pub time: u64,
    /// `PERF_SAMPLE_ADDR` (the watched address for breakpoints).
    pub addr: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<u32>,
    /// Kernel part of the callchain, innermost first.
    pub kernel_ips: Vec<u64>,
    /// User part of the callchain (frame-pointer walk by the kernel), innermost first.
    pub user_ips: Vec<u64>,
    /// User registers, when recorded and the sample interrupted a user task.
    pub regs: Option<UserRegs>,
    /// The copied top of the user stack (starting at `regs.sp`).
    pub stack: Vec<u8>,
    /// `PERF_SAMPLE_RAW`: the tracepoint's fields (for `sys_enter`: the syscall `id` is the
    /// `i64` at byte 8).
    pub raw: Vec<u8>,
}

impl PerfSample {
    /// The syscall number of a `raw_syscalls:sys_enter` sample (from its raw data).
    pub fn syscall_id(&self) -> Option<i64> {
        let b = self.raw.get(8..16)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(i64::from_le_bytes(a))
    }
}

/// The trace event a stack sample belongs to (and that replay attaches it to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackAt {
    /// The `sys_enter` of this syscall number (`None`: unknown) — `--stacks SYSCALLS`.
    SysEnter(Option<i64>),
    /// The `sched_switch` where the sample's thread left the CPU asleep (state S or D).
    Block,
    /// The `sched_waking` where the sample's thread woke `target` (`None`: unknown).
    Wake(Option<i32>),
}

impl StackAt {
    /// What a sample of stream `info` was taken at; `None` for a watch stream or a sample
    /// of an unknown tracepoint.
    pub fn of_sample(info: &StreamInfo, s: &PerfSample) -> Option<StackAt> {
        match &info.kind {
            StreamKind::Stacks { .. } => Some(StackAt::SysEnter(s.syscall_id())),
            StreamKind::Sched {
                switch_type,
                waking_type,
                waking_pid_offset,
                ..
            } => {
                let ty = u16::from_le_bytes([*s.raw.first()?, *s.raw.get(1)?]);
                if ty == *switch_type {
                    Some(StackAt::Block)
                } else if ty == *waking_type {
                    let o = *waking_pid_offset as usize;
                    let target = s.raw.get(o..o + 4).map(|b| {
                        let mut a = [0u8; 4];
                        a.copy_from_slice(b);
                        i32::from_le_bytes(a)
                    });
                    Some(StackAt::Wake(target))
                } else {
                    None
                }
            }
            StreamKind::Watch { .. } | StreamKind::Profile { .. } => None,
        }
    }

    /// What a trace event can carry a stack as: a `sys_enter`, a `switch` where `prev` (the
    /// current task) leaves the CPU asleep (S or D, as the recorder's sample filter; a
    /// preempted switch has no sample and must not take the next blocking switch's), or a
    /// `waking`.
    pub fn of_event(ev: &Event) -> Option<StackAt> {
        match ev.kind {
            EventKind::SysEnter { nr, .. } => Some(StackAt::SysEnter(Some(i64::from(nr)))),
            EventKind::Switch {
                prev, prev_state, ..
            } if prev == ev.tid && matches!(prev_state.0, b'S' | b'D') => Some(StackAt::Block),
            EventKind::Waking { target } => Some(StackAt::Wake(Some(target.0))),
            _ => None,
        }
    }

    /// The kind (0 sys_enter, 1 block, 2 wake): samples are paired with events of the same
    /// thread and kind.
    pub fn class(self) -> u8 {
        match self {
            StackAt::SysEnter(_) => 0,
            StackAt::Block => 1,
            StackAt::Wake(_) => 2,
        }
    }

    /// Whether a sample taken at `self` may belong to an event that is `event` (same kind;
    /// same syscall or target when both are known).
    pub fn matches(self, event: StackAt) -> bool {
        match (self, event) {
            (StackAt::SysEnter(a), StackAt::SysEnter(b)) => a.is_none() || b.is_none() || a == b,
            (StackAt::Block, StackAt::Block) => true,
            (StackAt::Wake(a), StackAt::Wake(b)) => a.is_none() || b.is_none() || a == b,
            _ => false,
        }
    }
}

/// What [`PerfTrace::profile_samples`] found.
#[derive(Clone, Debug, Default)]
pub struct ProfileSamples {
    /// How many profile streams the trace has (0: not recorded with `--profile`).
    pub streams: usize,
    /// The samples kept, in time order.
    pub samples: Vec<PerfSample>,
    /// Samples the rings dropped (`PERF_RECORD_LOST` of the profile streams).
    pub lost: u64,
}

/// An item of a perf chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerfItem {
    /// A sample.
    Sample(PerfSample),
    /// `PERF_RECORD_LOST`: the ring of `stream` overflowed and `lost` samples were dropped.
    Lost {
        /// The stream.
        stream: u32,
        /// Samples lost.
        lost: u64,
    },
}

/// A malformed perf file or record. `file` is relative to the trace directory; `offset`
/// counts bytes of the chunk's decompressed content.
#[derive(Debug, thiserror::Error)]
pub enum PerfFileError {
    /// Reading a file failed.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `streams.json` does not parse.
    #[error("{}: {source}", file.display())]
    Json {
        /// The file.
        file: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// `streams.json` has another version.
    #[error("{}: perf layout version {found} (this build reads {PERF_FORMAT_VERSION})", file.display())]
    Version {
        /// The file.
        file: PathBuf,
        /// The version found.
        found: u32,
    },
    /// A record is cut short or inconsistent.
    #[error("{}: offset {offset}: {reason}", file.display())]
    Record {
        /// The chunk.
        file: PathBuf,
        /// Byte offset of the record in the decompressed chunk.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Path of `perf/`.
pub fn perf_dir(trace_dir: &Path) -> PathBuf {
    trace_dir.join(PERF_DIR)
}

/// Path of perf chunk `seq`.
pub fn chunk_path(trace_dir: &Path, seq: u32) -> PathBuf {
    perf_dir(trace_dir).join(format!("{seq:06}.perf.zst"))
}

/// Path of a maps copy of `pid` taken at `ts`.
pub fn maps_path(trace_dir: &Path, pid: i32, ts: u64) -> PathBuf {
    perf_dir(trace_dir)
        .join(MAPS_DIR)
        .join(format!("{pid}-{ts}.maps"))
}

/// Little-endian cursor over one record body.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| {
                format!(
                    "record ends at byte {} but {n} more bytes are needed at byte {}",
                    self.data.len(),
                    self.pos
                )
            })?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        Ok(u32::from_le_bytes(a))
    }
}

/// Parses the body of a `PERF_RECORD_SAMPLE` (the bytes after the 8-byte header) recorded
/// with `sample_type` and `regs_user` mask. Errors say what is missing and where.
pub fn parse_sample(
    stream: u32,
    sample_type: u64,
    regs_user: u64,
    body: &[u8],
) -> Result<PerfSample, String> {
    if sample_type & (SAMPLE_READ | SAMPLE_BRANCH_STACK) != 0 {
        return Err(format!(
            "sample_type {sample_type:#x} has READ or BRANCH_STACK, which are not supported"
        ));
    }
    let mut c = Cursor { data: body, pos: 0 };
    let mut s = PerfSample {
        stream,
        ..PerfSample::default()
    };
    if sample_type & SAMPLE_IDENTIFIER != 0 {
        c.u64()?;
    }
    if sample_type & SAMPLE_IP != 0 {
        s.ip = Some(c.u64()?);
    }
    if sample_type & SAMPLE_TID != 0 {
        s.pid = c.u32()? as i32;
        s.tid = c.u32()? as i32;
    }
    if sample_type & SAMPLE_TIME != 0 {
        s.time = c.u64()?;
    }
    if sample_type & SAMPLE_ADDR != 0 {
        s.addr = Some(c.u64()?);
    }
    if sample_type & SAMPLE_ID != 0 {
        c.u64()?;
    }
    if sample_type & SAMPLE_STREAM_ID != 0 {
        c.u64()?;
    }
    if sample_type & SAMPLE_CPU != 0 {
        s.cpu = Some(c.u32()?);
        c.u32()?;
    }
    if sample_type & SAMPLE_PERIOD != 0 {
        c.u64()?;
    }
    if sample_type & SAMPLE_CALLCHAIN != 0 {
        let nr = c.u64()?;
        if nr > (body.len() / 8) as u64 {
            return Err(format!(
                "callchain of {nr} entries in a {}-byte record",
                body.len()
            ));
        }
        let mut user = false;
        for _ in 0..nr {
            let ip = c.u64()?;
            if ip >= PERF_CONTEXT_MAX {
                user = match ip {
                    PERF_CONTEXT_USER => true,
                    PERF_CONTEXT_KERNEL => false,
                    _ => user,
                };
                continue;
            }
            if user {
                s.user_ips.push(ip);
            } else {
                s.kernel_ips.push(ip);
            }
        }
    }
    if sample_type & SAMPLE_RAW != 0 {
        let size = c.u32()? as usize;
        s.raw = c.take(size)?.to_vec();
    }
    if sample_type & SAMPLE_REGS_USER != 0 {
        let abi = c.u64()?;
        if abi != 0 {
            let mut regs = UserRegs::default();
            for bit in 0..64u32 {
                if regs_user & (1 << bit) == 0 {
                    continue;
                }
                let v = c.u64()?;
                match bit {
                    REG_BP => regs.bp = v,
                    REG_SP => regs.sp = v,
                    REG_IP => regs.ip = v,
                    _ => {}
                }
            }
            s.regs = Some(regs);
        }
    }
    if sample_type & SAMPLE_STACK_USER != 0 {
        let size = c.u64()? as usize;
        if size != 0 {
            let data = c.take(size)?;
            let dyn_size = (c.u64()? as usize).min(size);
            s.stack = data[..dyn_size].to_vec();
        }
    }
    Ok(s)
}

/// The `perf/` part of a trace directory, opened for reading.
#[derive(Clone, Debug)]
pub struct PerfTrace {
    dir: PathBuf,
    streams: Vec<StreamInfo>,
    chunks: Vec<PathBuf>,
}

impl PerfTrace {
    /// Opens `trace_dir/perf`; `Ok(None)` when the trace has no `perf/` directory.
    pub fn open(trace_dir: &Path) -> Result<Option<PerfTrace>, PerfFileError> {
        let pdir = perf_dir(trace_dir);
        if !pdir.is_dir() {
            return Ok(None);
        }
        let rel = PathBuf::from(PERF_DIR).join(STREAMS_FILE);
        let bytes = std::fs::read(pdir.join(STREAMS_FILE)).map_err(|source| PerfFileError::Io {
            file: rel.clone(),
            source,
        })?;
        let file: StreamsFile =
            serde_json::from_slice(&bytes).map_err(|source| PerfFileError::Json {
                file: rel.clone(),
                source,
            })?;
        if file.version != PERF_FORMAT_VERSION {
            return Err(PerfFileError::Version {
                file: rel,
                found: file.version,
            });
        }
        let mut chunks: Vec<PathBuf> = std::fs::read_dir(&pdir)
            .map_err(|source| PerfFileError::Io {
                file: PathBuf::from(PERF_DIR),
                source,
            })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(".perf.zst"))
            })
            .collect();
        chunks.sort();
        Ok(Some(PerfTrace {
            dir: trace_dir.to_path_buf(),
            streams: file.streams,
            chunks,
        }))
    }

    /// The streams of `streams.json`.
    pub fn streams(&self) -> &[StreamInfo] {
        &self.streams
    }

    /// The chunk files, oldest first.
    pub fn chunks(&self) -> &[PathBuf] {
        &self.chunks
    }

    /// The maps copies: `(pid, ts, path)`, sorted by pid then time.
    pub fn maps_files(&self) -> Vec<(i32, u64, PathBuf)> {
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(perf_dir(&self.dir).join(MAPS_DIR)) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".maps")) else {
                    continue;
                };
                let Some((pid, ts)) = stem.split_once('-') else {
                    continue;
                };
                if let (Ok(pid), Ok(ts)) = (pid.parse(), ts.parse()) {
                    out.push((pid, ts, e.path()));
                }
            }
        }
        out.sort();
        out
    }

    /// The samples of the `--profile` streams that `keep` accepts, in time order, with the
    /// lost ones counted. A malformed record is an error (the profile would be silently
    /// short).
    pub fn profile_samples(
        &self,
        mut keep: impl FnMut(&PerfSample) -> bool,
    ) -> Result<ProfileSamples, PerfFileError> {
        let profile: Vec<u32> = self
            .streams()
            .iter()
            .filter(|s| matches!(s.kind, StreamKind::Profile { .. }))
            .map(|s| s.id)
            .collect();
        let mut out = ProfileSamples {
            streams: profile.len(),
            ..ProfileSamples::default()
        };
        if profile.is_empty() {
            return Ok(out);
        }
        for item in self.items() {
            match item? {
                PerfItem::Sample(s) if profile.contains(&s.stream) && keep(&s) => {
                    out.samples.push(s);
                }
                PerfItem::Lost { stream, lost } if profile.contains(&stream) => {
                    out.lost = out.lost.saturating_add(lost)
                }
                _ => {}
            }
        }
        out.samples.sort_by_key(|s| s.time);
        Ok(out)
    }

    /// Every item of every chunk, in file order. A chunk whose last zstd frame is cut short
    /// (recorder killed) yields its complete records; a malformed record is an error and
    /// ends that chunk.
    pub fn items(&self) -> impl Iterator<Item = Result<PerfItem, PerfFileError>> + '_ {
        self.chunks
            .iter()
            .flat_map(move |path| match self.read_chunk(path) {
                Ok(items) => items,
                Err(e) => vec![Err(e)],
            })
    }

    fn read_chunk(
        &self,
        path: &Path,
    ) -> Result<Vec<Result<PerfItem, PerfFileError>>, PerfFileError> {
        let file = path.strip_prefix(&self.dir).unwrap_or(path).to_path_buf();
        let f = File::open(path).map_err(|source| PerfFileError::Io {
            file: file.clone(),
            source,
        })?;
        let limit = crate::inflate::limit_for(f.metadata().map_or(0, |m| m.len()));
        let mut data = Vec::new();
        let decoder = zstd::stream::read::Decoder::new(f).map_err(|source| PerfFileError::Io {
            file: file.clone(),
            source,
        })?;
        // A frame cut short by a crash ends the data; what came before is kept.
        let read = decoder.take(limit.saturating_add(1)).read_to_end(&mut data);
        if data.len() as u64 > limit {
            return Err(PerfFileError::Record {
                file,
                offset: limit,
                reason: crate::inflate::too_large(limit).to_string(),
            });
        }
        if let Err(e) = read {
            tracing::warn!(
                "{}: {e}: keeping the {} bytes before",
                file.display(),
                data.len()
            );
        }
        Ok(parse_chunk(&file, &data, &self.streams))
    }
}

/// Parses a decompressed chunk. Stops at the first malformed record (yielded as an error).
pub fn parse_chunk(
    file: &Path,
    data: &[u8],
    streams: &[StreamInfo],
) -> Vec<Result<PerfItem, PerfFileError>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let err = |offset: usize, reason: String| PerfFileError::Record {
        file: file.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    while pos < data.len() {
        let Some(head) = data.get(pos..pos + 12) else {
            out.push(Err(err(
                pos,
                format!(
                    "{} bytes left, a record needs at least 12",
                    data.len() - pos
                ),
            )));
            break;
        };
        let stream = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let kind = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let size = u16::from_le_bytes([head[10], head[11]]) as usize;
        if size < 8 {
            out.push(Err(err(pos, format!("record size {size} is below 8"))));
            break;
        }
        let Some(body) = data.get(pos + 12..pos + 4 + size) else {
            out.push(Err(err(
                pos,
                format!(
                    "record of {size} bytes but only {} bytes left",
                    data.len() - pos - 4
                ),
            )));
            break;
        };
        match kind {
            RECORD_SAMPLE => {
                let Some(info) = streams.iter().find(|s| s.id == stream) else {
                    out.push(Err(err(pos, format!("unknown stream {stream}"))));
                    break;
                };
                match parse_sample(stream, info.sample_type, info.regs_user, body) {
                    Ok(s) => out.push(Ok(PerfItem::Sample(s))),
                    Err(reason) => {
                        out.push(Err(err(pos, reason)));
                        break;
                    }
                }
            }
            RECORD_LOST => {
                let lost = body
                    .get(8..16)
                    .map(|b| {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(b);
                        u64::from_le_bytes(a)
                    })
                    .unwrap_or(0);
                out.push(Ok(PerfItem::Lost { stream, lost }));
            }
            _ => {}
        }
        pos += 4 + size;
    }
    out
}

/// Two perf timestamps this close (ns) belong to the same kernel event: the perf and the
/// tracefs probes of one tracepoint hit, or the W and RW breakpoints of one access.
pub const PAIR_WINDOW_NS: u64 = 20_000;

/// A stack sample kept for the merge (without its stack bytes).
#[derive(Clone, Debug)]
struct StackKeep {
    time: u64,
    at: StackAt,
    kernel: Vec<u64>,
    user: Vec<u64>,
}

/// Merges perf samples into the replayed event stream ([`crate::replay::Events`]):
/// each stack sample becomes `Stack` events (kernel, then user) placed right after the
/// trace event it was taken at ([`StackAt`]: the `sys_enter` of the same thread and
/// syscall, the `switch` where the same thread blocked, or the `waking` by the same thread
/// of the same target) whose time is within [`PAIR_WINDOW_NS`] (the perf and tracefs probes
/// of one tracepoint hit read the clock separately), with that event's `ts`; each
/// watchpoint hit becomes a `FlagAccess` event at its own time, before the first trace
/// event that is later. Samples are loaded into memory without their stack bytes.
#[derive(Debug, Default)]
pub struct PerfMerge {
    /// Per (thread, [`StackAt::class`]), in time order.
    stacks: HashMap<(i32, u8), VecDeque<StackKeep>>,
    /// Watchpoint hits not yet settled, and the settled ones still needed as partners, by
    /// time ([`PerfMerge::settle`]).
    raw_hits: Vec<Hit>,
    /// Hits up to this time are settled (events in `hits`).
    settled: Option<u64>,
    hits: VecDeque<Event>,
    out: VecDeque<Event>,
    /// Stack samples that matched no `sys_enter` (their event was lost, or precedes the
    /// replayed window).
    pub unmatched_stacks: u64,
    /// Stack samples attached.
    pub matched_stacks: u64,
    /// Watchpoint hits that came after their time was settled (a live consumer's late
    /// samples): dropped.
    pub late_hits: u64,
    /// Errors met while loading (also logged).
    pub errors: Vec<String>,
}

/// A watchpoint hit: (time, pid, tid, cpu, ip, addr, whether its stream is write-only).
type Hit = (u64, i32, i32, u32, u64, u64, bool);

impl PerfMerge {
    /// Loads `trace_dir/perf`; `Ok(None)` when the trace has none. Hits before `cutoff`
    /// are dropped.
    pub fn load(trace_dir: &Path, cutoff: Option<u64>) -> Result<Option<PerfMerge>, PerfFileError> {
        let Some(trace) = PerfTrace::open(trace_dir)? else {
            return Ok(None);
        };
        let mut m = PerfMerge::default();
        m.add(trace.streams(), trace.items(), cutoff);
        m.settle(u64::MAX);
        Ok(Some(m))
    }

    /// Takes in samples (`items` of `streams`): stacks wait for their events, watchpoint
    /// hits for [`PerfMerge::settle`]. Hits before `cutoff` are dropped.
    pub fn add(
        &mut self,
        streams: &[StreamInfo],
        items: impl IntoIterator<Item = Result<PerfItem, PerfFileError>>,
        cutoff: Option<u64>,
    ) {
        let mut stack_samples: Vec<((i32, u8), StackKeep)> = Vec::new();
        let mut hits: Vec<Hit> = Vec::new();
        for item in items {
            let s = match item {
                Ok(PerfItem::Sample(s)) => s,
                Ok(PerfItem::Lost { .. }) => continue,
                Err(e) => {
                    tracing::warn!("{e}");
                    self.errors.push(e.to_string());
                    continue;
                }
            };
            let Some(info) = streams.iter().find(|i| i.id == s.stream) else {
                continue;
            };
            match &info.kind {
                StreamKind::Stacks { .. } | StreamKind::Sched { .. } => {
                    let Some(at) = StackAt::of_sample(info, &s) else {
                        continue;
                    };
                    stack_samples.push((
                        (s.tid, at.class()),
                        StackKeep {
                            time: s.time,
                            at,
                            kernel: s.kernel_ips,
                            user: s.user_ips,
                        },
                    ))
                }
                // Not tied to any event: read by `argus dig` (`profile_samples`).
                StreamKind::Profile { .. } => {}
                StreamKind::Watch { access, addr, .. } => {
                    if cutoff.is_some_and(|c| s.time < c) {
                        continue;
                    }
                    if self.settled.is_some_and(|t| s.time <= t) {
                        self.late_hits += 1;
                        continue;
                    }
                    hits.push((
                        s.time,
                        s.pid,
                        s.tid,
                        s.cpu.unwrap_or(0),
                        s.ip.unwrap_or(0),
                        s.addr.unwrap_or(*addr),
                        access == "w",
                    ))
                }
            }
        }
        stack_samples.sort_by_key(|(key, k)| (*key, k.time));
        for (key, k) in stack_samples {
            let q = self.stacks.entry(key).or_default();
            let sorted = q.back().is_none_or(|b| b.time <= k.time);
            q.push_back(k);
            if !sorted {
                q.make_contiguous().sort_by_key(|k| k.time);
            }
        }
        if !hits.is_empty() {
            self.raw_hits.extend(hits);
            self.raw_hits.sort_unstable();
        }
    }

    /// Every hit up to `upto` − [`PAIR_WINDOW_NS`] becomes a `FlagAccess` event, in time
    /// order, once all hits it may pair with are in: a live consumer calls it with the time
    /// up to which it has every sample (`u64::MAX`: all are in). An RW hit is a write when a
    /// W hit of the same thread and instruction is paired with it; a W hit with no RW
    /// partner is a write too.
    pub fn settle(&mut self, upto: u64) {
        let bound = if upto == u64::MAX {
            u64::MAX
        } else {
            upto.saturating_sub(PAIR_WINDOW_NS)
        };
        if self.settled.is_some_and(|t| bound <= t) {
            return;
        }
        let from = self.settled.map_or(0, |t| t.saturating_add(1));
        let lo = self.raw_hits.partition_point(|h| h.0 < from);
        let hi = self.raw_hits.partition_point(|h| h.0 <= bound);
        let writes: Vec<&Hit> = self.raw_hits.iter().filter(|h| h.6).collect();
        let reads: Vec<&Hit> = self.raw_hits.iter().filter(|h| !h.6).collect();
        let paired = |h: &Hit, others: &[&Hit]| {
            let lo = others.partition_point(|o| o.0.saturating_add(PAIR_WINDOW_NS) < h.0);
            others[lo..]
                .iter()
                .take_while(|o| o.0 <= h.0.saturating_add(PAIR_WINDOW_NS))
                .any(|o| o.2 == h.2 && o.4 == h.4 && o.5 == h.5)
        };
        let mk = |h: &Hit, write: bool| Event {
            ts: Nanos(h.0),
            seq: 0,
            cpu: Cpu(h.3),
            pid: Pid(h.1),
            tid: Tid(h.2),
            ctx: Context::Task,
            kind: EventKind::FlagAccess { addr: h.5, write },
        };
        let mut events: Vec<Event> = Vec::new();
        for h in &self.raw_hits[lo..hi] {
            if !h.6 {
                events.push(mk(h, paired(h, &writes)));
            } else if !paired(h, &reads) {
                events.push(mk(h, true));
            }
        }
        events.sort_by_key(|e| (e.ts, e.tid));
        self.hits.extend(events);
        self.settled = Some(bound);
        // What an unsettled hit (after `bound`) may still pair with.
        let keep = self
            .raw_hits
            .partition_point(|h| h.0.saturating_add(PAIR_WINDOW_NS) < bound);
        self.raw_hits.drain(..keep);
    }

    /// [`PerfMerge::load`], logging a failure (the trace is then replayed without its perf
    /// samples) instead of returning it.
    pub fn load_logged(trace_dir: &Path, cutoff: Option<u64>) -> Option<PerfMerge> {
        match PerfMerge::load(trace_dir, cutoff) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{e}; replaying without stacks and watchpoint hits");
                None
            }
        }
    }

    /// Takes the next event of the merge (hits due before the last pushed event, that
    /// event, its stacks).
    pub fn pop(&mut self) -> Option<Event> {
        self.out.pop_front()
    }

    /// Feeds the next trace event.
    pub fn push(&mut self, ev: Event) {
        while self.hits.front().is_some_and(|h| h.ts <= ev.ts) {
            if let Some(h) = self.hits.pop_front() {
                self.out.push_back(h);
            }
        }
        let stacks = match StackAt::of_event(&ev) {
            Some(at) if !self.stacks.is_empty() => self.take_stack(ev.tid.0, ev.ts.0, at),
            _ => None,
        };
        let (ts, cpu, pid, tid, ctx) = (ev.ts, ev.cpu, ev.pid, ev.tid, ev.ctx);
        self.out.push_back(ev);
        if let Some(k) = stacks {
            for (kernel, ips) in [(true, k.kernel), (false, k.user)] {
                if ips.is_empty() {
                    continue;
                }
                self.out.push_back(Event {
                    ts,
                    seq: 0,
                    cpu,
                    pid,
                    tid,
                    ctx,
                    kind: EventKind::Stack { kernel, ips },
                });
            }
        }
    }

    /// Hits settled up to `upto` that no event pushed since came after: they follow now
    /// (a live consumer's batch ends at `upto`).
    pub fn flush_hits(&mut self, upto: u64) {
        while self.hits.front().is_some_and(|h| h.ts.0 <= upto) {
            if let Some(h) = self.hits.pop_front() {
                self.out.push_back(h);
            }
        }
    }

    /// The time of the last watchpoint hit not yet taken out ([`PerfMerge::pop`]).
    pub fn last_hit(&self) -> Option<u64> {
        let raw = self.raw_hits.last().map(|h| h.0);
        let settled = self.hits.back().map(|e| e.ts.0);
        raw.max(settled)
    }

    /// Forgets the stack samples whose event would have come before `upto` (every event up
    /// to it was pushed): counted unmatched. A live consumer's queues stay the size of what
    /// is in flight.
    pub fn forget_stacks_before(&mut self, upto: u64) {
        let mut unmatched = 0u64;
        self.stacks.retain(|_, q| {
            while q
                .front()
                .is_some_and(|k| k.time.saturating_add(PAIR_WINDOW_NS) < upto)
            {
                q.pop_front();
                unmatched += 1;
            }
            !q.is_empty()
        });
        self.unmatched_stacks += unmatched;
    }

    /// The trace events ended: the remaining hits follow.
    pub fn finish(&mut self) {
        self.settle(u64::MAX);
        self.out.extend(self.hits.drain(..));
        self.unmatched_stacks += self.stacks.values().map(|q| q.len() as u64).sum::<u64>();
        self.stacks.clear();
    }

    fn take_stack(&mut self, tid: i32, ts: u64, at: StackAt) -> Option<StackKeep> {
        let q = self.stacks.get_mut(&(tid, at.class()))?;
        while q
            .front()
            .is_some_and(|k| k.time.saturating_add(PAIR_WINDOW_NS) < ts)
        {
            q.pop_front();
            self.unmatched_stacks += 1;
        }
        let front = q.front()?;
        if front.time > ts.saturating_add(PAIR_WINDOW_NS) || !front.at.matches(at) {
            return None;
        }
        self.matched_stacks += 1;
        q.pop_front()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    /// A watchpoint stream (`access`: `w` or `rw`) on address 0x1000 of thread 7.
    pub(crate) fn watch_stream(id: u32, access: &str) -> StreamInfo {
        StreamInfo {
            id,
            sample_type: SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR,
            regs_user: 0,
            kind: StreamKind::Watch {
                spec: "7:0x1000".into(),
                pid: 7,
                tid: 7,
                cpu: 0,
                addr: 0x1000,
                len: 8,
                access: access.into(),
            },
        }
    }

    /// A hit of [`watch_stream`] `stream` at `time`, as a perf chunk holds it.
    pub(crate) fn watch_hit(stream: u32, time: u64) -> Vec<u8> {
        let mut body = Vec::new();
        for v in [0x40_1000u64, 7 | 7 << 32, time, 0x1000] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        let mut rec = stream.to_le_bytes().to_vec();
        rec.extend_from_slice(&RECORD_SAMPLE.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&((body.len() + 8) as u16).to_le_bytes());
        rec.extend_from_slice(&body);
        rec
    }

    fn stacks_stream() -> StreamInfo {
        StreamInfo {
            id: 3,
            sample_type: SAMPLE_TID
                | SAMPLE_TIME
                | SAMPLE_CPU
                | SAMPLE_CALLCHAIN
                | SAMPLE_REGS_USER
                | SAMPLE_STACK_USER,
            regs_user: REGS_USER_MASK,
            kind: StreamKind::Stacks {
                cpu: 0,
                syscalls: vec![0],
            },
        }
    }

    /// A stacks sample as the kernel lays it out, prefixed by its stream id.
    fn sample_bytes() -> Vec<u8> {
        let mut body: Vec<u8> = Vec::new();
        let p64 = |b: &mut Vec<u8>, v: u64| b.extend_from_slice(&v.to_le_bytes());
        body.extend_from_slice(&100u32.to_le_bytes()); // pid
        body.extend_from_slice(&101u32.to_le_bytes()); // tid
        p64(&mut body, 5_000); // time
        body.extend_from_slice(&1u32.to_le_bytes()); // cpu
        body.extend_from_slice(&0u32.to_le_bytes());
        p64(&mut body, 5); // callchain nr
        p64(&mut body, PERF_CONTEXT_KERNEL);
        p64(&mut body, 0xffff_ffff_8100_0010);
        p64(&mut body, PERF_CONTEXT_USER);
        p64(&mut body, 0x5555_0001);
        p64(&mut body, 0x5555_0002);
        p64(&mut body, 2); // abi 64
        p64(&mut body, 0x7ff0); // bp
        p64(&mut body, 0x7f00); // sp
        p64(&mut body, 0x5555_0001); // ip
        p64(&mut body, 16); // stack size
        body.extend_from_slice(&[7u8; 16]);
        p64(&mut body, 8); // dyn size
        let mut rec = 3u32.to_le_bytes().to_vec();
        rec.extend_from_slice(&RECORD_SAMPLE.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&((body.len() + 8) as u16).to_le_bytes());
        rec.extend_from_slice(&body);
        rec
    }

    #[test]
    fn stack_samples_say_which_event_they_belong_to() {
        let sched = StreamInfo {
            id: 3,
            sample_type: SAMPLE_TID | SAMPLE_RAW,
            regs_user: 0,
            kind: StreamKind::Sched {
                cpu: 0,
                switch_type: 300,
                waking_type: 301,
                waking_pid_offset: 24,
            },
        };
        let mut raw = vec![0u8; 40];
        raw[..2].copy_from_slice(&301u16.to_le_bytes());
        raw[24..28].copy_from_slice(&77i32.to_le_bytes());
        let mut s = PerfSample {
            stream: 3,
            raw,
            ..PerfSample::default()
        };
        assert_eq!(
            StackAt::of_sample(&sched, &s),
            Some(StackAt::Wake(Some(77)))
        );
        s.raw[..2].copy_from_slice(&300u16.to_le_bytes());
        assert_eq!(StackAt::of_sample(&sched, &s), Some(StackAt::Block));
        s.raw[..2].copy_from_slice(&9u16.to_le_bytes());
        assert_eq!(StackAt::of_sample(&sched, &s), None);
        s.raw.clear();
        assert_eq!(StackAt::of_sample(&sched, &s), None);
        let ev = |tid: i32, kind: EventKind| Event {
            ts: Nanos(1),
            seq: 0,
            cpu: Cpu(0),
            pid: Pid(tid),
            tid: Tid(tid),
            ctx: Context::Task,
            kind,
        };
        let switch = |prev: i32| EventKind::Switch {
            prev: Tid(prev),
            prev_state: argus_schema::TaskState::SLEEPING,
            next: Tid(0),
        };
        assert_eq!(StackAt::of_event(&ev(5, switch(5))), Some(StackAt::Block));
        assert_eq!(StackAt::of_event(&ev(5, switch(6))), None);
        let wake = StackAt::of_event(&ev(5, EventKind::Waking { target: Tid(77) }));
        assert_eq!(wake, Some(StackAt::Wake(Some(77))));
        assert!(StackAt::Wake(Some(77)).matches(StackAt::Wake(Some(77))));
        assert!(!StackAt::Wake(Some(78)).matches(StackAt::Wake(Some(77))));
        assert!(!StackAt::Block.matches(StackAt::Wake(Some(77))));
        assert!(StackAt::SysEnter(None).matches(StackAt::SysEnter(Some(0))));
        assert!(!StackAt::SysEnter(Some(1)).matches(StackAt::SysEnter(Some(0))));
        assert_ne!(StackAt::Block.class(), StackAt::Wake(None).class());
    }

    #[test]
    fn parses_a_stacks_sample_from_fixed_bytes() {
        let bytes = sample_bytes();
        let items = parse_chunk(
            Path::new("perf/000000.perf.zst"),
            &bytes,
            &[stacks_stream()],
        );
        assert_eq!(items.len(), 1);
        let Ok(PerfItem::Sample(s)) = &items[0] else {
            panic!("{items:?}");
        };
        assert_eq!((s.pid, s.tid, s.time, s.cpu), (100, 101, 5_000, Some(1)));
        assert_eq!(s.kernel_ips, vec![0xffff_ffff_8100_0010]);
        assert_eq!(s.user_ips, vec![0x5555_0001, 0x5555_0002]);
        assert_eq!(
            s.regs,
            Some(UserRegs {
                ip: 0x5555_0001,
                sp: 0x7f00,
                bp: 0x7ff0
            })
        );
        assert_eq!(s.stack, vec![7u8; 8]);
    }

    #[test]
    fn truncated_record_names_file_and_offset() {
        let mut bytes = sample_bytes();
        let whole = bytes.clone();
        bytes.extend_from_slice(&whole[..30]);
        let items = parse_chunk(
            Path::new("perf/000002.perf.zst"),
            &bytes,
            &[stacks_stream()],
        );
        assert_eq!(items.len(), 2);
        let e = items[1].as_ref().unwrap_err().to_string();
        assert!(
            e.contains("perf/000002.perf.zst") && e.contains(&format!("offset {}", whole.len())),
            "{e}"
        );
    }

    /// A trace directory whose `perf/` has the stacks stream and chunk 0 holding `chunk`
    /// (compressed bytes, as written).
    fn perf_trace_with(chunk: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let pdir = perf_dir(dir.path());
        std::fs::create_dir_all(&pdir).unwrap();
        let streams = StreamsFile {
            version: PERF_FORMAT_VERSION,
            streams: vec![stacks_stream()],
        };
        std::fs::write(
            pdir.join(STREAMS_FILE),
            serde_json::to_vec(&streams).unwrap(),
        )
        .unwrap();
        std::fs::write(chunk_path(dir.path(), 0), chunk).unwrap();
        dir
    }

    #[test]
    fn truncated_chunk_file_is_an_error_naming_the_file_and_offset() {
        let bytes = sample_bytes();
        let cut = &bytes[..bytes.len() - 5];
        let dir = perf_trace_with(&zstd::bulk::compress(cut, 1).unwrap());
        let trace = PerfTrace::open(dir.path()).unwrap().unwrap();
        let items: Vec<_> = trace.items().collect();
        assert_eq!(items.len(), 1);
        let e = items[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("perf/000000.perf.zst: offset 0:"), "{e}");
    }

    /// A chunk that decompresses past its bound is an error naming the chunk and where the
    /// bound was reached, for `argus dig` (items) and for the merge into replay (logged).
    // See: issue 18 (resource limits), docs/fuzzing.md.
    #[test]
    fn gh_18_zstd_bomb_chunk_is_refused() {
        let dir = perf_trace_with(&argus_testkit::zstd_rle_bomb(1 << 30, 0));
        let trace = PerfTrace::open(dir.path()).unwrap().unwrap();
        let items: Vec<_> = trace.items().collect();
        assert_eq!(items.len(), 1);
        let limit = crate::inflate::MIN_LIMIT;
        assert_eq!(
            items[0].as_ref().unwrap_err().to_string(),
            format!(
                "perf/000000.perf.zst: offset {limit}: decompresses to more than {limit} bytes: \
                 not a file Argus wrote"
            )
        );
        let merge = PerfMerge::load(dir.path(), None).unwrap().unwrap();
        assert_eq!(merge.errors.len(), 1);
    }

    /// Watchpoint hits and stack samples at the end of time: pairing them within
    /// [`PAIR_WINDOW_NS`] saturates instead of overflowing.
    // See: issue 18 (fuzzing, target `perf`), docs/fuzzing.md.
    #[test]
    fn gh_18_pairing_window_at_the_end_of_time() {
        let dir = tempfile::tempdir().unwrap();
        let pdir = perf_dir(dir.path());
        std::fs::create_dir_all(&pdir).unwrap();
        let streams = StreamsFile {
            version: PERF_FORMAT_VERSION,
            streams: vec![watch_stream(1, "w"), watch_stream(2, "rw"), stacks_stream()],
        };
        std::fs::write(
            pdir.join(STREAMS_FILE),
            serde_json::to_vec(&streams).unwrap(),
        )
        .unwrap();
        let mut chunk = watch_hit(1, u64::MAX);
        chunk.extend(watch_hit(2, u64::MAX - 5));
        chunk.extend(watch_hit(2, u64::MAX));
        // A stack sample of thread 101 at the end of time.
        let mut stack = sample_bytes();
        stack[4 + 8 + 8..4 + 8 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        chunk.extend(stack);
        std::fs::write(
            chunk_path(dir.path(), 0),
            zstd::bulk::compress(&chunk, 1).unwrap(),
        )
        .unwrap();
        let mut merge = PerfMerge::load(dir.path(), None).unwrap().unwrap();
        assert!(merge.errors.is_empty(), "{:?}", merge.errors);
        let sys_enter = Event {
            ts: Nanos(u64::MAX),
            seq: 0,
            cpu: Cpu(1),
            pid: Pid(100),
            tid: Tid(101),
            ctx: Context::Task,
            kind: EventKind::SysEnter {
                nr: 0,
                args: [0; 6],
            },
        };
        merge.push(sys_enter);
        merge.finish();
        let kinds: Vec<EventKind> = std::iter::from_fn(|| merge.pop()).map(|e| e.kind).collect();
        let writes: Vec<bool> = kinds
            .iter()
            .filter_map(|k| match k {
                EventKind::FlagAccess { write, .. } => Some(*write),
                _ => None,
            })
            .collect();
        // Both RW hits pair with the W hit within the window: both are writes.
        assert_eq!(writes, vec![true, true]);
        assert_eq!(merge.matched_stacks, 1);
        assert!(kinds
            .iter()
            .any(|k| matches!(k, EventKind::Stack { kernel: true, .. })));
    }

    /// `PERF_RECORD_LOST` counts of a profile stream that add up past `u64::MAX` saturate.
    // See: issue 18 (fuzzing, target `perf`), docs/fuzzing.md.
    #[test]
    fn gh_18_profile_lost_counts_saturate() {
        let dir = tempfile::tempdir().unwrap();
        let pdir = perf_dir(dir.path());
        std::fs::create_dir_all(&pdir).unwrap();
        let streams = StreamsFile {
            version: PERF_FORMAT_VERSION,
            streams: vec![StreamInfo {
                id: 4,
                sample_type: SAMPLE_TID | SAMPLE_TIME,
                regs_user: 0,
                kind: StreamKind::Profile { cpu: 0, hz: 99 },
            }],
        };
        std::fs::write(
            pdir.join(STREAMS_FILE),
            serde_json::to_vec(&streams).unwrap(),
        )
        .unwrap();
        let mut chunk = Vec::new();
        for _ in 0..2 {
            chunk.extend_from_slice(&4u32.to_le_bytes());
            chunk.extend_from_slice(&RECORD_LOST.to_le_bytes());
            chunk.extend_from_slice(&0u16.to_le_bytes());
            chunk.extend_from_slice(&24u16.to_le_bytes());
            chunk.extend_from_slice(&4u64.to_le_bytes());
            chunk.extend_from_slice(&u64::MAX.to_le_bytes());
        }
        std::fs::write(
            chunk_path(dir.path(), 0),
            zstd::bulk::compress(&chunk, 1).unwrap(),
        )
        .unwrap();
        let trace = PerfTrace::open(dir.path()).unwrap().unwrap();
        let profile = trace.profile_samples(|_| true).unwrap();
        assert_eq!((profile.streams, profile.lost), (1, u64::MAX));
        assert!(profile.samples.is_empty());
    }

    #[test]
    fn unknown_stream_and_short_header_are_errors() {
        let bytes = sample_bytes();
        let items = parse_chunk(Path::new("x"), &bytes, &[]);
        assert!(items[0]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("unknown stream 3"));
        let items = parse_chunk(Path::new("x"), &bytes[..6], &[stacks_stream()]);
        assert!(items[0].is_err());
    }

    /// Watchpoint hits (W and RW breakpoints of two threads, paired or not) taken in as a
    /// live consumer gets them, batch by batch with the time each is complete to, give the
    /// events a replay of the whole trace gives, in the same order.
    #[test]
    fn hits_taken_in_batches_merge_as_all_at_once() {
        let streams = [watch_stream(1, "w"), watch_stream(2, "rw")];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let hit = |stream: u32, tid: u32, time: u64| {
            PerfItem::Sample(PerfSample {
                stream,
                pid: 7,
                tid: tid as i32,
                time,
                ip: Some(0x40_1000),
                addr: Some(0x1000),
                ..PerfSample::default()
            })
        };
        // Accesses every ~30 µs: writes hit both breakpoints a few µs apart, reads only RW.
        let mut items: Vec<(u64, PerfItem)> = Vec::new();
        let mut t = 1_000_000u64;
        for _ in 0..3_000 {
            t += 1 + rnd(60_000);
            let tid = 7 + rnd(2) as u32;
            items.push((t, hit(2, tid, t)));
            if rnd(2) == 0 {
                let w = t + rnd(2 * PAIR_WINDOW_NS) - rnd(PAIR_WINDOW_NS).min(t);
                items.push((w, hit(1, tid, w)));
            }
        }
        let events: Vec<Event> = (0..2_000u64)
            .map(|i| Event {
                ts: Nanos(1_000_000 + i * 45_000),
                seq: 0,
                cpu: Cpu(0),
                pid: Pid(7),
                tid: Tid(7),
                ctx: Context::Task,
                kind: EventKind::Exit,
            })
            .collect();
        let out = |m: &mut PerfMerge| {
            std::iter::from_fn(|| m.pop())
                .map(|e| (e.ts, e.tid, e.kind))
                .collect::<Vec<_>>()
        };
        let mut whole = PerfMerge::default();
        whole.add(&streams, items.iter().map(|(_, i)| Ok(i.clone())), None);
        whole.settle(u64::MAX);
        let mut want = Vec::new();
        for ev in &events {
            whole.push(ev.clone());
            want.extend(out(&mut whole));
        }
        whole.finish();
        want.extend(out(&mut whole));
        // Batches drained at random times: a drain holds every sample stamped before it.
        items.sort_by_key(|(t, _)| *t);
        let mut live = PerfMerge::default();
        let (mut got, mut next, mut pushed) = (Vec::new(), 0usize, 0usize);
        let mut drained = 1_000_000u64;
        while next < items.len() {
            drained += rnd(3_000_000);
            let upto = items.partition_point(|(t, _)| *t < drained);
            live.add(
                &streams,
                items[next..upto].iter().map(|(_, i)| Ok(i.clone())),
                None,
            );
            next = upto;
            live.settle(drained);
            let release = drained.saturating_sub(PAIR_WINDOW_NS);
            while events.get(pushed).is_some_and(|e| e.ts.0 <= release) {
                live.push(events[pushed].clone());
                pushed += 1;
            }
            live.flush_hits(release);
            got.extend(out(&mut live));
        }
        for ev in &events[pushed..] {
            live.push(ev.clone());
            got.extend(out(&mut live));
        }
        live.finish();
        got.extend(out(&mut live));
        let writes = want
            .iter()
            .filter(|e| matches!(e.2, EventKind::FlagAccess { write: true, .. }))
            .count();
        assert!(
            writes > 500 && writes < want.len() - 2_000,
            "{writes} writes"
        );
        assert_eq!(live.late_hits, 0);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the merges differ");
    }
}
