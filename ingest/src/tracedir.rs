//! The on-disk layout of a trace directory (`docs/trace-dir.md`), shared by the live
//! collector (writer) and replay (reader): file names and the JSON documents.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The value of `meta.json`'s `format` field.
pub const FORMAT_NAME: &str = "argus-trace";
/// The trace directory layout version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// `meta.json`: what was recorded, where and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceMeta {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Layout version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// `recording` while the recorder runs, `complete` after a clean close.
    pub status: String,
    /// The trace clock; always `mono` (`CLOCK_MONOTONIC`).
    pub clock: String,
    /// Ring-buffer page size in bytes.
    pub page_size: u32,
    /// CPUs recorded.
    pub cpus: Vec<u32>,
    /// `uname -r`.
    pub kernel: String,
    /// `uname -m`.
    pub machine: String,
    /// Host name.
    pub hostname: String,
    /// `CLOCK_MONOTONIC` when recording started.
    pub start_ns: u64,
    /// `CLOCK_MONOTONIC` when recording stopped (0 while recording).
    pub end_ns: u64,
    /// Enabled events as `system/event`.
    pub events: Vec<String>,
    /// The recorder's own process id (its threads are excluded from the trace).
    pub recorder_pid: i32,
    /// The command recorded with `-- CMD`, if any.
    pub command: Option<Vec<String>>,
    /// Its process id.
    pub command_pid: Option<i32>,
    /// Its exit status (or 128 + signal).
    pub command_status: Option<i32>,
    /// Events lost per CPU (ring-buffer overrun + dropped), keyed by CPU number.
    pub lost: BTreeMap<u32, u64>,
    /// Chunk files written per CPU.
    pub chunks: BTreeMap<u32, u32>,
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC` when recording started, in ns: a trace time plus
    /// this is the wall-clock time (ns since the Unix epoch), which `argus debug --at`
    /// takes. Absent in traces recorded before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_offset_ns: Option<i64>,
    /// Every thread of the recorder's process hidden from tracing (`set_event_notrace_pid`),
    /// written when recording stops: the trace has the first records of such a thread and
    /// never its exit. Absent while recording and in traces recorded before the field
    /// existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_tids: Vec<i32>,
}

impl TraceMeta {
    /// The `meta.json` of a recording this process starts: this format and version, status
    /// `recording`, the `clock` given, this process as the recorder, everything else empty
    /// for the recorder to fill in (`TraceMeta { cpus, ..TraceMeta::recording("mono") }`).
    pub fn recording(clock: &str) -> TraceMeta {
        TraceMeta {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            status: "recording".into(),
            clock: clock.into(),
            page_size: 0,
            cpus: Vec::new(),
            kernel: String::new(),
            machine: String::new(),
            hostname: String::new(),
            start_ns: 0,
            end_ns: 0,
            events: Vec::new(),
            recorder_pid: std::process::id() as i32,
            command: None,
            command_pid: None,
            command_status: None,
            lost: BTreeMap::new(),
            chunks: BTreeMap::new(),
            wall_offset_ns: None,
            excluded_tids: Vec::new(),
        }
    }
}

/// One line of `proc.json`: a thread alive when recording started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcEntry {
    /// Thread id.
    pub tid: i32,
    /// Process id (`Tgid`).
    pub pid: i32,
    /// Parent process id (`PPid`).
    pub ppid: i32,
    /// Thread name.
    pub comm: String,
    /// Whether it is a kernel thread.
    pub kernel: bool,
}

/// Path of `meta.json`.
pub fn meta_path(dir: &Path) -> PathBuf {
    dir.join("meta.json")
}
/// Path of `proc.json`.
pub fn proc_path(dir: &Path) -> PathBuf {
    dir.join("proc.json")
}
/// Path of `kallsyms.zst`.
pub fn kallsyms_path(dir: &Path) -> PathBuf {
    dir.join("kallsyms.zst")
}
/// Directory holding the copied tracefs format files.
pub fn formats_dir(dir: &Path) -> PathBuf {
    dir.join("formats")
}
/// Directory holding CPU `cpu`'s chunks.
pub fn cpu_dir(dir: &Path, cpu: u32) -> PathBuf {
    dir.join(format!("cpu{cpu}"))
}
/// Path of chunk number `seq` of CPU `cpu`.
pub fn chunk_path(dir: &Path, cpu: u32, seq: u32) -> PathBuf {
    cpu_dir(dir, cpu).join(format!("{seq:06}.chunk.zst"))
}

/// Directory holding a macOS recording's kdebug chunks (`docs/kdebug.md`).
pub fn kdebug_dir(dir: &Path) -> PathBuf {
    dir.join("kdebug")
}
/// Path of kdebug chunk number `seq`: zstd frames that decompress to a V3 kdebug file.
pub fn kdebug_path(dir: &Path, seq: u32) -> PathBuf {
    kdebug_dir(dir).join(format!("{seq:06}.ktrace.zst"))
}

/// The `meta.json` keys added by the always-on collector, beside those of [`TraceMeta`]
/// (which stays unchanged so older traces and other writers need not know them). Read them
/// with [`MetaExt::from_meta_json`]; all are optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaExt {
    /// The ring: its cap and what was deleted to hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingInfo>,
    /// Where the kernel lost events, per CPU, from the pages' missed-events flags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lost_ranges: BTreeMap<u32, Vec<LostRange>>,
    /// Pages the recorder could not hand to its page tap (consumer too slow), per CPU.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tap_dropped: BTreeMap<u32, u64>,
}

impl MetaExt {
    /// The extension keys of a `meta.json` document (unknown keys are ignored).
    pub fn from_meta_json(bytes: &[u8]) -> Result<MetaExt, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// `meta` and `self` as one JSON object (the `meta.json` document).
    pub fn merged_json(&self, meta: &TraceMeta) -> Result<serde_json::Value, serde_json::Error> {
        let mut doc = serde_json::to_value(meta)?;
        if let (Some(obj), serde_json::Value::Object(ext)) =
            (doc.as_object_mut(), serde_json::to_value(self)?)
        {
            obj.extend(ext);
        }
        Ok(doc)
    }

    /// CPUs whose oldest chunks were deleted by the ring, with the time from which their
    /// data is complete.
    pub fn complete_from(&self) -> BTreeMap<u32, u64> {
        self.ring
            .iter()
            .flat_map(|r| r.dropped.iter().map(|(&cpu, d)| (cpu, d.until_ns)))
            .collect()
    }
}

/// `meta.json` `ring`: the size cap of a recording and the chunks deleted to hold it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingInfo {
    /// The cap in bytes on everything in the trace directory.
    pub size: u64,
    /// Pages per chunk file.
    pub chunk_pages: u32,
    /// Per CPU: what was deleted (absent for CPUs that lost nothing).
    #[serde(default)]
    pub dropped: BTreeMap<u32, DroppedRange>,
}

/// The oldest chunks of one CPU, deleted by the ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedRange {
    /// Chunks deleted: sequence numbers `0..chunks` are gone, `chunks` is the oldest kept.
    pub chunks: u32,
    /// Timestamp of the first deleted page.
    pub from_ns: u64,
    /// Timestamp of the first page kept: this CPU's data is complete from here on.
    pub until_ns: u64,
}

/// Events lost by the kernel on one CPU, somewhere between two page timestamps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostRange {
    /// Timestamp of the last page read before the loss.
    pub from_ns: u64,
    /// Timestamp of the first page read after it.
    pub to_ns: u64,
    /// Events lost (`None` when a page said "some" without a count).
    pub events: Option<u64>,
}

/// Directory holding the file-identity records (`files/NNNNNN.jsonl.zst`).
pub fn files_dir(dir: &Path) -> PathBuf {
    dir.join("files")
}
/// Path of file-identity file number `seq`.
pub fn files_path(dir: &Path, seq: u32) -> PathBuf {
    files_dir(dir).join(format!("{seq:06}.jsonl.zst"))
}

/// One line of a `files/NNNNNN.jsonl.zst` file: what a file descriptor refers to
/// (`docs/trace-dir.md`, "File identity"). Read back by [`crate::files::FileTable`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileLine {
    /// The first line of every file: the lines up to the first non-snapshot line restate
    /// the whole table known at `ts`, so the file can be read without its predecessors.
    Snapshot {
        /// The file's sequence number.
        seq: u32,
        /// `CLOCK_MONOTONIC` when the snapshot was taken.
        ts: u64,
    },
    /// From `ts` on, fd `fd` of process `pid` refers to this file.
    Fd {
        /// When the fd got this meaning (the creating syscall's exit, or recording start).
        ts: u64,
        /// Process (thread group) id.
        pid: i32,
        /// The descriptor.
        fd: i32,
        /// `pipe`, `socket`, `regular`, `anon` or `other`.
        kind: String,
        /// Inode number (the bracketed number of `pipe:[N]`/`socket:[N]`, `st_ino` of a
        /// path, the `eventfd-id` of an eventfd).
        ino: u64,
        /// For a connected socket: the inode of the socket at the other end, when the kernel
        /// exposes it (unix sockets, TCP/UDP over loopback).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<u64>,
        /// The `/proc/PID/fd/N` link text (`pipe:[123]`, `/etc/passwd`, `anon_inode:[eventfd]`).
        target: String,
        /// How it was learnt: `start` (the scan at recording start), `syscall` (the fd a
        /// syscall returned), `scan` (a rescan of the process), `snapshot` (restated at the
        /// start of a later file).
        src: String,
    },
    /// From `ts` on, what fd `fd` of process `pid` refers to is unknown: it was closed at
    /// `ts` (`close`, `close_range`), or created at `ts` but closed (and possibly reused)
    /// before `/proc` could be read.
    Unknown {
        /// The creating syscall's time.
        ts: u64,
        /// Process id.
        pid: i32,
        /// The descriptor.
        fd: i32,
    },
    /// Process `child` was created by `parent` at `ts` with a copy of its descriptor table.
    Fork {
        /// `task_newtask` time.
        ts: u64,
        /// The parent process.
        parent: i32,
        /// The new process.
        child: i32,
    },
    /// Process `pid` ended at `ts` (its last thread exited): its table is gone. Later lines
    /// for `pid` are a new process's (a reused pid starts with `fork`).
    Exit {
        /// `sched_process_exit` time of its last thread.
        ts: u64,
        /// The process.
        pid: i32,
    },
    /// The tracker could not keep up and dropped `messages` syscall notifications before
    /// `ts`: identities created then may be missing.
    Lost {
        /// When the drop was noticed.
        ts: u64,
        /// Notifications dropped since the previous `lost` line.
        messages: u64,
    },
    /// A line type this build does not know (written by a newer recorder); ignored.
    #[serde(other)]
    Other,
}
