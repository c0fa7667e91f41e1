//! Shared pieces of the Argus fuzz targets (`docs/fuzzing.md`):
//!
//! - [`formats`]: the tracefs format files of every event the converter decodes (copied from
//!   a 6.18 x86-64 kernel, `fuzz/formats/`), for targets that build records;
//! - [`pages`]: [`pages::PageSpec`], an `arbitrary` ring-buffer page builder: plain bytes get
//!   nowhere past a page header, built pages reach the converter's every event handler, and a
//!   well-formed built page must parse back to exactly the records it was built from;
//! - [`sections`]: the byte layout of inputs that carry several files (format texts and
//!   pages, `meta.json` and `proc.json`): what the seeds generator writes and the targets'
//!   byte modes read;
//! - [`writers`]: trace-cmd `trace.dat` (v6, v7), `perf.data` and Perfetto protobuf writers
//!   for the seeds of the importer targets;
//! - [`scratch`]: a per-process scratch directory for the readers that take a path
//!   (trace directories, snapshots, importers).
//!
//! Every target is in `fuzz_targets/`; `scripts/fuzz` builds and runs them.

pub mod formats;
pub mod import;
pub mod pages;
pub mod scratch;
pub mod sections;
pub mod tracedir;
pub mod writers;
