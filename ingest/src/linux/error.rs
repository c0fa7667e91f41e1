//! The recorder's error type.

use std::io;
use std::path::PathBuf;

/// Why a live recording could not start, continue or close cleanly.
///
/// Prerequisite failures (`NotRoot`, `NoTracefs`, `OutputNotEmpty`, `EventUnavailable`) are
/// detected before anything is created, and their messages say how to fix them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The process is not root, so it cannot create a tracefs instance.
    #[error(
        "recording needs root: tracefs instances can only be created by root, and this \
         process runs with effective uid {euid}; run the same command with `sudo` in front \
         (e.g. `sudo argus record -o TRACE_DIR`)"
    )]
    NotRoot {
        /// The effective user id of this process.
        euid: u32,
    },
    /// tracefs is not mounted where the recorder looks for it.
    #[error(
        "tracefs is not mounted at {} (no {}): run `mount -t tracefs nodev /sys/kernel/tracing` \
         as root",
        tracefs.display(),
        missing.display()
    )]
    NoTracefs {
        /// The tracefs mount point that was tried.
        tracefs: PathBuf,
        /// The file or directory that was missing there.
        missing: PathBuf,
    },
    /// The output directory exists and already holds files.
    #[error(
        "output directory {} is not empty{}: refusing to write into it (choose a new \
         directory or remove it)",
        path.display(),
        if *is_trace { " (it holds an earlier trace)" } else { " and is not a trace" }
    )]
    OutputNotEmpty {
        /// The output directory.
        path: PathBuf,
        /// Whether it holds a trace (`meta.json`).
        is_trace: bool,
    },
    /// The output path exists and is not a directory.
    #[error("output path {} exists and is not a directory", path.display())]
    OutputNotDirectory {
        /// The output path.
        path: PathBuf,
    },
    /// An event name is not of the form `system/event`.
    #[error("event name {event:?} is not of the form system/event (e.g. sched/sched_switch)")]
    BadEventName {
        /// The name as given.
        event: String,
    },
    /// The kernel has no such trace event (or it cannot be enabled).
    #[error(
        "event {event} is not available in this kernel (no {}): see {}/available_events",
        missing.display(),
        tracefs.display()
    )]
    EventUnavailable {
        /// The event as `system/event`.
        event: String,
        /// The tracefs file that was missing.
        missing: PathBuf,
        /// The tracefs mount point.
        tracefs: PathBuf,
    },
    /// A numeric setting is out of range.
    #[error("invalid recorder setting {setting} = {value}: {reason}")]
    InvalidSetting {
        /// The `RecordConfig` field.
        setting: &'static str,
        /// The value given.
        value: u64,
        /// What is allowed.
        reason: &'static str,
    },
    /// The instance name cannot be used as a tracefs directory name.
    #[error(
        "invalid tracefs instance name {name:?}: it must be a non-empty single path component"
    )]
    BadInstanceName {
        /// The name as given.
        name: String,
    },
    /// The `-- CMD` argument list is empty.
    #[error("the command to record is empty")]
    EmptyCommand,
    /// A tracefs instance with the chosen name already exists.
    #[error(
        "tracefs instance {} already exists (another recorder with the same name is running?)",
        path.display()
    )]
    InstanceExists {
        /// The instance directory.
        path: PathBuf,
    },
    /// Writing a tracefs control file failed.
    #[error("writing {value:?} to {}: {source}", path.display())]
    TracefsWrite {
        /// The control file.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A tracefs control file did not take the value written to it.
    #[error("{} reads {actual:?} after writing {expected:?}", path.display())]
    TracefsMismatch {
        /// The control file.
        path: PathBuf,
        /// What was written.
        expected: String,
        /// What it reads back.
        actual: String,
    },
    /// Reading, writing or creating a file failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done (`reading`, `writing`, `creating`...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A file could not be parsed.
    #[error("parsing {}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// Serializing a JSON document failed.
    #[error("serializing {}: {source}", path.display())]
    Json {
        /// The file being written.
        path: PathBuf,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// Compressing a chunk failed.
    #[error("compressing chunk {}: {source}", path.display())]
    Compress {
        /// The chunk file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The command to record could not be started.
    #[error("starting command {command:?}: {source}")]
    Spawn {
        /// The argv.
        command: Vec<String>,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A system call needed for control (eventfd, sigaction, poll, waitpid) failed.
    #[error("{call} failed: {source}")]
    Sys {
        /// The system call.
        call: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// `ring_size` cannot hold the side files and a few chunks per CPU.
    #[error(
        "ring size {size} bytes is too small: this machine needs at least {needed} bytes \
         (side files plus 4 chunks of 4 pages per CPU); raise --ring-size"
    )]
    RingTooSmall {
        /// The cap given.
        size: u64,
        /// The least that works here.
        needed: u64,
    },
    /// A `sysctl(KERN_KDEBUG)` operation of the macOS collector failed.
    #[error("kdebug {op} failed: {source}{}", kdebug_hint(source))]
    Kdebug {
        /// The operation (`KERN_KDSETBUF`, `KERN_KDREADTR`, …).
        op: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A per-CPU reader thread panicked (a bug: it should return errors).
    #[error("the reader thread of cpu {cpu} panicked")]
    ReaderPanicked {
        /// The CPU.
        cpu: u32,
    },
    /// A `--dispatch` or `--probe BINARY:SYMBOL` uprobe cannot be set up.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
}

/// What to do about a kdebug error, when the error says it.
fn kdebug_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EBUSY) => {
            ": another tracer owns kdebug (ktrace, Instruments, fs_usage, sc_usage, \
             spindump): stop it, or run `sudo ktrace reset`"
        }
        Some(libc::EPERM | libc::EACCES) => ": kdebug needs root: run the same command with sudo",
        _ => "",
    }
}

impl RecordError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        RecordError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A file could not be written because its filesystem is full (`ENOSPC`) or the
    /// owner's quota is spent (`EDQUOT`): the recorder makes room or pauses, it does not
    /// stop (`chunks.rs`, "A full disk").
    pub fn is_no_space(&self) -> bool {
        match self {
            RecordError::Io { source, .. } => is_no_space(source),
            _ => false,
        }
    }
}

/// `ENOSPC` or `EDQUOT`.
pub(crate) fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Why a `--dispatch` or `--probe` spec cannot be probed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The spec is not `BINARY:SYMBOL[@N]`.
    #[error("uprobe {spec:?}: expected BINARY:SYMBOL or BINARY:SYMBOL@N with N from 1 to 6 (e.g. /usr/bin/app:handle_event@1)")]
    BadSpec {
        /// The text as given.
        spec: String,
    },
    /// `@N` on an architecture whose argument registers the recorder does not know.
    #[error("uprobe {spec}: fetching an argument is supported on x86_64 and aarch64, not {arch}")]
    NoItemArgument {
        /// The spec.
        spec: String,
        /// This machine's architecture.
        arch: &'static str,
    },
    /// The binary does not exist (or a bare name is not in `PATH`).
    #[error("uprobe {}:{symbol}: binary {} not found{}", binary.display(), binary.display(),
        if *searched_path { " in PATH" } else { "" })]
    NoBinary {
        /// The binary as given.
        binary: PathBuf,
        /// The symbol asked for.
        symbol: String,
        /// Whether `PATH` was searched (bare name).
        searched_path: bool,
    },
    /// The binary cannot be read or is not ELF.
    #[error("uprobe {}:{symbol}: cannot read {} as ELF: {reason}", binary.display(), path.display())]
    Elf {
        /// The binary as given.
        binary: PathBuf,
        /// The file read.
        path: PathBuf,
        /// The symbol asked for.
        symbol: String,
        /// Why.
        reason: String,
    },
    /// No function of that name in `.symtab` or `.dynsym`.
    #[error(
        "uprobe {}:{symbol}: symbol {symbol:?} not found in {} (no defined function of \
         that name in .symtab or .dynsym; a stripped binary has only exported symbols)",
        binary.display(), path.display()
    )]
    NoSymbol {
        /// The binary as given.
        binary: PathBuf,
        /// The file searched.
        path: PathBuf,
        /// The symbol asked for.
        symbol: String,
    },
    /// The symbol's address is in no `PT_LOAD` segment with file contents.
    #[error(
        "uprobe {}:{symbol}: symbol address {vaddr:#x} is in no PT_LOAD segment of {}",
        binary.display(), path.display()
    )]
    NotMapped {
        /// The binary as given.
        binary: PathBuf,
        /// The file.
        path: PathBuf,
        /// The symbol.
        symbol: String,
        /// Its `st_value`.
        vaddr: u64,
    },
    /// The binary's path cannot be written into a uprobe definition.
    #[error("uprobe {}:{symbol}: the path {} contains white space, which uprobe_events cannot take", binary.display(), path.display())]
    UnusablePath {
        /// The binary as given.
        binary: PathBuf,
        /// The resolved path.
        path: PathBuf,
        /// The symbol.
        symbol: String,
    },
    /// The kernel has no uprobe support (`CONFIG_UPROBE_EVENTS`).
    #[error("--dispatch and --probe need uprobe events, and {} does not exist (kernel built without CONFIG_UPROBE_EVENTS)", path.display())]
    NoUprobes {
        /// The missing control file.
        path: PathBuf,
    },
}
