//! # argus-ingest — from kernel ring-buffer pages to time-ordered [`argus_schema::Event`]s
//!
//! Argus records Linux tracefs events into a *trace directory* (`docs/trace-dir.md`): raw
//! per-CPU ring-buffer pages (`trace_pipe_raw`) compressed in chunks, plus copies of the
//! tracefs format files that describe them. This crate turns those bytes into the shared event
//! vocabulary, the same way for a live recording and for a replay:
//!
//! ```text
//!  formats/ ──► format::FormatSet ──► convert::Converter (field offsets looked up once per id)
//!  page bytes ─► page::parse_page ─► RawRecord ─► Converter ─► Decoded (per CPU)
//!  per-CPU Decoded ─► merge::Merge (k-way by (ts, cpu), ThreadTable: pid, comm) ─► Event
//!  Event stream ─► merge::Batches (epochs of at most N events, watermark = last ts)
//!  live pages ─► live::LiveMerge (per-CPU queues released behind a watermark; `argus start`)
//! ```
//!
//! Modules:
//! - [`format`](mod@format): parsers for `header_page`, `header_event` and `events/SYS/EVENT/format`.
//! - [`page`]: the sans-IO ring-buffer page parser (page header, records, lost-events flags).
//! - [`convert`]: the record → event converter ([`convert::Converter`]).
//! - [`kallsyms`]: kernel symbol lookup, to name timer callbacks.
//! - [`import`]: readers for others' recordings (tracefs text, `trace-cmd report`, systrace
//!   HTML, format files + raw per-CPU pages) into the same events and thread table.
//! - [`replay`]: [`replay::TraceReader`], reading a trace directory back.
//! - [`perffile`]: the `perf/` part of a trace (call stacks, watchpoint hits) and its merge
//!   into the replayed events.
//! - [`symbolize`]: `/proc/PID/maps` + ELF symbols + DWARF unwinding of recorded stacks.
//! - [`merge`]: per-CPU merge, thread table, epoch batching.
//! - [`live`]: the live merge of `argus start`: pages as they are read, released behind a
//!   watermark, lost-events gaps handed to the caller before any record after them.
//! - [`tracedir`]: trace directory file names and JSON documents.
//! - [`files`]: file identity (what each file descriptor referred to), [`files::FileTable`].
//! - [`linux`]: the live collector (writes trace directories).
//! - [`macos`]: the macOS kdebug collector (writes V3 chunks into a trace directory; its OS
//!   calls behind [`macos::KdebugSystem`], replayed anywhere by [`macos::Replay`]).
//!
//! **What this crate does:** validates the trace directory; decodes every page defensively
//! (a malformed page, chunk or record is an [`IngestError`] naming the file and byte offset,
//! never a panic); checks that each CPU's records go forward in time; numbers events
//! (`seq`) in merged order; resolves each thread's process; counts lost and unknown records.
//!
//! **What the caller does:** decides what to do with recoverable errors
//! ([`IngestError::is_recoverable`]: stop, or keep going and report them); chooses the batch
//! size; symbolizes addresses with [`kallsyms::Kallsyms`] when it wants names.
//!
//! **Non-goals:** evaluating `print fmt` expressions in general (only the `sched_switch` state
//! table is read from it); big-endian or 8-byte-aligned (`RB_FORCE_8BYTE_ALIGNMENT`) ring
//! buffers; the trace-cmd `trace.dat` and perf.data containers.
//!
//! Replaying a trace directory:
//!
//! ```no_run
//! use argus_ingest::replay::TraceReader;
//! use argus_ingest::merge::Batches;
//!
//! # fn main() -> Result<(), argus_ingest::IngestError> {
//! let mut events = TraceReader::open(std::path::Path::new("trace-dir"))?.events();
//! for batch in Batches::new(&mut events, 100_000) {
//!     let batch = batch?;
//!     println!("{} events up to {}", batch.events.len(), batch.watermark);
//! }
//! let summary = events.finish();
//! println!("{} threads, lost per cpu {:?}", summary.threads.len(), summary.lost());
//! # Ok(())
//! # }
//! ```
//!
//! Decoding one page by hand:
//!
//! ```
//! use argus_ingest::page::parse_page;
//! use argus_ingest::format::HeaderPage;
//!
//! let mut page = vec![0u8; 4096];
//! page[..8].copy_from_slice(&1000u64.to_le_bytes()); // page timestamp
//! page[8..16].copy_from_slice(&8u64.to_le_bytes()); // commit: 8 bytes of records
//! page[16..20].copy_from_slice(&(1u32 | 5 << 5).to_le_bytes()); // type_len 1, delta 5
//! let records: Vec<_> = parse_page(&HeaderPage::default(), &page)
//!     .expect("valid header")
//!     .collect::<Result<_, _>>()
//!     .expect("valid records");
//! assert_eq!(records.len(), 1);
//! assert_eq!(records[0].ts, 1005);
//! assert_eq!(records[0].payload.len(), 4);
//! ```
#![warn(missing_docs)]

pub mod convert;
pub mod error;
pub mod files;
pub mod format;
pub mod import;
mod inflate;
pub mod kallsyms;
pub mod live;
pub mod macos;
pub mod merge;
pub mod page;
pub mod perffile;
pub mod replay;
pub mod symbolize;

pub mod linux;
pub mod tracedir;

pub use error::IngestError;
