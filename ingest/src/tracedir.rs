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
