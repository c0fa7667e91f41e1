//! Importers for recordings made by other tools, into the same merged [`Event`] stream and
//! [`ThreadInfo`] table as [`crate::replay`]:
//!
//! | input | [`ImportFormat`] |
//! |---|---|
//! | tracefs text: the `trace` file, `trace_pipe`, atrace output (with or without the TGID and flags columns) | [`ImportFormat::FtraceText`] |
//! | `trace-cmd report` text, plugin-formatted or `-R` raw | [`ImportFormat::TraceCmdReport`] |
//! | systrace HTML: the old `var linuxPerfData = "..."` form and `<script class="trace-data">` blocks | [`ImportFormat::SystraceHtml`] |
//! | a directory of format files plus raw per-CPU ring-buffer files (`formats/` + `traces/cpuN`, the SchedViz collection layout) | [`ImportFormat::RawPages`] |
//! | trace-cmd's `trace.dat`, versions 6 and 7 (v7 uncompressed or zstd-compressed) | [`ImportFormat::TraceDat`] |
//! | `perf.data` of tracepoints (`perf record -e sched:… -e raw_syscalls:…`, also `-z`) | [`ImportFormat::PerfData`] |
//! | Perfetto traces (`.perfetto-trace`, `.pftrace`) with ftrace event bundles, full and compact sched | [`ImportFormat::Perfetto`] |
//! | macOS/iOS kdebug traces: `RAW_VERSION1`, `RAW_VERSION2`, V3 chunked (`.ktrace`, `.atrc`, `.artrace`) ([`kdebug`]) | [`ImportFormat::Kdebug`] |
//!
//! ```text
//!  file ─► detect ─► text lines ─► (ts, cpu, Decoded) ─┐
//!                ├─► formats + cpuN pages ─► Converter ─┤
//!                └─► trace.dat: formats, cmdlines, kallsyms + pages ─┴─► time order ─► ThreadTable ─► Event (seq)
//! ```
//!
//! The text importers map what the schema has: `sched_switch` (kernel `prev_state` letters,
//! `R+`, trace-cmd's `comm:pid [prio] S ==> ...` plugin form and `-R` numeric states),
//! `sched_waking` (or `sched_wakeup` when a file has no `sched_waking`: never both, which would
//! double every wake-up), `sched_wakeup_new`, `sched_process_fork/exec/exit`,
//! `task_newtask`/`task_rename`, raw `sys_enter`/`sys_exit` and the per-syscall
//! `sys_X(...)` / `sys_X -> 0x..` forms (numbered by name with
//! [`argus_schema::syscalls::number`], x86-64 numbering), irq and softirq entry/exit,
//! `hrtimer_*`, `timer_*`, `workqueue_*`, `signal_*`, and `tracing_mark_write` / `print` /
//! `0:` markers (atrace's `trace_event_clock_sync` markers are dropped). Other event names
//! are counted in [`ImportSummary::unknown`].
//!
//! Text traces print kernel callbacks by name (`function=hrtimer_wakeup`): such a name gets a
//! stable pseudo-address (a hash, top bit set), and [`Imported::kallsyms`] names it back.
//! Timestamps are the `sec.usec` (or `sec.nsec`) column converted to nanoseconds; pids come
//! from the TGID column where present, else from forks, else `pid == tid`.
//!
//! Errors: a file that cannot be read or recognized fails [`open`]; a line of a mapped event
//! whose payload does not parse is skipped and reported as an [`IngestError::Format`] naming
//! the file and line; such errors are yielded first by [`Imported::events`]. Lines that are
//! not event lines at all (headers, continuation lines of multi-line `bprint` output) are
//! counted in [`ImportSummary::skipped_lines`].
//!
//! A `trace.dat` ([`TraceDat`]) gives its format files, its raw pages per CPU (decompressed),
//! `saved_cmdlines` (the threads' names before their first switch) and kallsyms (the names of
//! callbacks); a malformed header is an [`IngestError::Malformed`] naming the byte offset.
//!
//! A `perf.data` gives its tracepoint samples' raw records (decoded with the format files
//! perf saved in the file), thread groups and names from its COMM/FORK records and samples,
//! and its lost records as [`ImportSummary::lost_ranges`].
//!
//! Non-goals: the `atrace -z` compressed dump (zlib), Chrome JSON trace events; streaming
//! (inputs are read whole).
//!
//! ```no_run
//! # fn main() -> Result<(), argus_ingest::IngestError> {
//! let imported = argus_ingest::import::open(std::path::Path::new("trace.html"))?;
//! println!("{}: {} threads", imported.format_name(), imported.threads().len());
//! for ev in imported.events() {
//!     let ev = ev?;
//!     println!("{} {} {}", ev.seq, ev.ts, ev.kind.name());
//! }
//! # Ok(())
//! # }
//! ```

mod html;
pub mod kdebug;
mod perfdata;
mod perfetto;
mod raw;
mod text;
mod tracedat;

use crate::error::IngestError;
use crate::kallsyms::Kallsyms;
use argus_schema::{Event, Nanos, ThreadInfo};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use text::{parse_line, TextLine};
pub use tracedat::{CpuData, TraceDat};

/// Which kind of input an import read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ImportFormat {
    /// tracefs `trace` / `trace_pipe` text, atrace output.
    FtraceText,
    /// `trace-cmd report` output (plugin-formatted or `-R`).
    TraceCmdReport,
    /// A systrace HTML page.
    SystraceHtml,
    /// Format files plus raw per-CPU ring-buffer pages.
    RawPages,
    /// A trace-cmd `trace.dat` (v6 or v7).
    TraceDat,
    /// A `perf.data` file of tracepoint samples.
    PerfData,
    /// A Perfetto trace (protobuf) with ftrace event bundles.
    Perfetto,
    /// A macOS/iOS kdebug trace (`RAW_VERSION1`, `RAW_VERSION2`, V3/ktrace).
    Kdebug,
}

impl ImportFormat {
    /// Stable lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ImportFormat::FtraceText => "ftrace-text",
            ImportFormat::TraceCmdReport => "trace-cmd-report",
            ImportFormat::SystraceHtml => "systrace-html",
            ImportFormat::RawPages => "raw-pages",
            ImportFormat::TraceDat => "trace-dat",
            ImportFormat::PerfData => "perf-data",
            ImportFormat::Perfetto => "perfetto",
            ImportFormat::Kdebug => "kdebug",
        }
    }
}

/// What an import learned besides the events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// CPUs of the recording (`#P:N`, `cpus=N`, the number of raw files, or the highest CPU
    /// seen + 1).
    pub cpus: u32,
    /// Events lost according to the input (`entries-in-buffer/entries-written` A/B gives
    /// B − A; page flags for raw pages; perf's lost records).
    pub lost: u64,
    /// Where events were lost, when the input says: `(cpu, from ns, to ns, events)`; no edge
    /// is made across these stretches.
    pub lost_ranges: Vec<(u32, u64, u64, Option<u64>)>,
    /// Records of event types Argus does not map, by event name (by `#id` for raw records
    /// without a format file).
    pub unknown: BTreeMap<String, u64>,
    /// Records of mapped types deliberately not used, by name (`sched_wakeup` when
    /// `sched_waking` is present, clock-sync markers, ...).
    pub ignored: BTreeMap<String, u64>,
    /// Lines that are not event lines (headers, continuation lines).
    pub skipped_lines: u64,
    /// The first such line that was not a comment or blank, for diagnostics.
    pub first_skipped_line: Option<usize>,
    /// What the input holds that was not read, one sentence each (a trace.dat's other
    /// instances, an event whose format the converter cannot use).
    pub notes: Vec<String>,
    /// First and last event time.
    pub start_ns: Option<Nanos>,
    /// Last event time.
    pub end_ns: Option<Nanos>,
}

/// An imported recording: events in time order with `seq` assigned, the thread table, and
/// statistics.
#[derive(Debug)]
pub struct Imported {
    path: PathBuf,
    format: ImportFormat,
    events: Vec<Event>,
    threads: Vec<ThreadInfo>,
    errors: Vec<IngestError>,
    summary: ImportSummary,
    kallsyms: Option<Kallsyms>,
}

impl Imported {
    /// The input path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What kind of input it was.
    pub fn format(&self) -> ImportFormat {
        self.format
    }

    /// [`ImportFormat::name`] of the input.
    pub fn format_name(&self) -> &'static str {
        self.format.name()
    }

    /// The malformed lines or pages that were skipped, then every event in `seq` order.
    pub fn events(&self) -> impl Iterator<Item = Result<Event, IngestError>> + '_ {
        self.errors
            .iter()
            .map(|e| Err(clone_error(e)))
            .chain(self.events.iter().cloned().map(Ok))
    }

    /// The events, by value (without the errors: see [`Imported::errors`]).
    pub fn into_events(self) -> Vec<Event> {
        self.events
    }

    /// The events in `seq` order.
    pub fn event_slice(&self) -> &[Event] {
        &self.events
    }

    /// Every thread seen, sorted by tid.
    pub fn threads(&self) -> &[ThreadInfo] {
        &self.threads
    }

    /// Malformed lines or pages that were skipped.
    pub fn errors(&self) -> &[IngestError] {
        &self.errors
    }

    /// Counts and statistics.
    pub fn summary(&self) -> &ImportSummary {
        &self.summary
    }

    /// Event counts per [`argus_schema::EventKind::name`].
    pub fn kind_counts(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for e in &self.events {
            *m.entry(e.kind.name()).or_default() += 1;
        }
        m
    }

    /// Names for the callback addresses of the events (the pseudo-addresses given to the
    /// names a text trace prints), when the input had any.
    pub fn kallsyms(&self) -> Option<&Kallsyms> {
        self.kallsyms.as_ref()
    }
}

/// `IngestError` holds `io::Error`s and is not `Clone`; importer errors never do, but stay
/// total anyway.
fn clone_error(e: &IngestError) -> IngestError {
    match e {
        IngestError::Format { file, source } => IngestError::Format {
            file: file.clone(),
            source: source.clone(),
        },
        IngestError::Page {
            file,
            page,
            offset,
            kind,
        } => IngestError::Page {
            file: file.clone(),
            page: *page,
            offset: *offset,
            kind: *kind,
        },
        IngestError::NotMonotonic {
            cpu,
            file,
            offset,
            ts,
            prev,
        } => IngestError::NotMonotonic {
            cpu: *cpu,
            file: file.clone(),
            offset: *offset,
            ts: *ts,
            prev: *prev,
        },
        IngestError::Missing { file } => IngestError::Missing { file: file.clone() },
        IngestError::Malformed { file, offset, what } => IngestError::Malformed {
            file: file.clone(),
            offset: *offset,
            what: what.clone(),
        },
        other => IngestError::Io {
            file: other.file().map(Path::to_path_buf).unwrap_or_default(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// Whether `path` is something [`open`] reads rather than an Argus trace directory: a file,
/// a macOS recording (`kdebug/`), or a directory without `meta.json` that holds `formats/`.
pub fn is_importable(path: &Path) -> bool {
    if path.is_file() {
        return true;
    }
    path.is_dir()
        && (kdebug::is_recording(path)
            || !crate::tracedir::meta_path(path).exists() && raw::looks_raw(path))
}

/// Reads a recording made by another tool (see the module doc for the formats), detecting
/// its kind from the content.
pub fn open(path: &Path) -> Result<Imported, IngestError> {
    if path.is_dir() {
        if kdebug::is_recording(path) {
            return kdebug::import_dir(path);
        }
        return raw::open(path);
    }
    let bytes = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            IngestError::Missing {
                file: path.to_path_buf(),
            }
        } else {
            IngestError::Io {
                file: path.to_path_buf(),
                source,
            }
        }
    })?;
    let unsupported = |why: &str| IngestError::Io {
        file: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string()),
    };
    if bytes.starts_with(tracedat::MAGIC) {
        return tracedat::import(path, &bytes);
    }
    if bytes.starts_with(perfdata::MAGIC) || bytes.starts_with(b"2ELIFREP") {
        return perfdata::import(path, &bytes);
    }
    if kdebug::looks_like(&bytes) {
        return kdebug::import(path, &bytes);
    }
    if let Some(i) = find(&bytes, b"TRACE:\n") {
        if bytes.get(i + 7) == Some(&0x78) {
            return Err(unsupported(
                "a compressed atrace dump (atrace -z): inflate it first (zlib) and import the text",
            ));
        }
    }
    // Text has no control bytes below TAB; a protobuf's lengths and small numbers do.
    let head = &bytes[..bytes.len().min(4096)];
    if head.iter().any(|&b| b < 0x09) && perfetto::looks_like(&bytes) {
        return perfetto::import(path, &bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    // The first 4 KiB, cut at a character boundary (lossy decoding makes 3-byte characters).
    let mut cut = text.len().min(4096);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = &text[..cut];
    let lower = head.to_ascii_lowercase();
    if lower.contains("<html") || lower.contains("<!doctype html") || lower.contains("<script") {
        let extracted = html::extract(&text).ok_or_else(|| {
            unsupported("an HTML file without systrace data (no linuxPerfData string and no trace-data block of ftrace text)")
        })?;
        return text::import(path, &extracted, ImportFormat::SystraceHtml);
    }
    let format = if text
        .lines()
        .take(8)
        .any(|l| l.starts_with("version = ") || l.starts_with("cpus="))
    {
        ImportFormat::TraceCmdReport
    } else {
        ImportFormat::FtraceText
    };
    text::import(path, &text, format)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text file whose 4096th byte is inside a character (found by mutating a trace):
    /// detection looks at the first 4 KiB without cutting the character.
    #[test]
    fn detection_cuts_the_head_at_a_character_boundary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.txt");
        let mut bytes = vec![b'x'; 4095];
        bytes.extend("é and more text\n".as_bytes());
        std::fs::write(&path, &bytes).expect("write");
        let Err(err) = open(&path) else {
            panic!("a file without event lines imports")
        };
        assert!(matches!(err, IngestError::Io { .. }), "{err:?}");
        // Invalid UTF-8 there (lossy decoding makes it a 3-byte character) is no panic either.
        bytes[4094] = 0xff;
        std::fs::write(&path, &bytes).expect("write");
        assert!(open(&path).is_err());
    }
}
