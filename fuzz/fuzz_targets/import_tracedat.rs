//! The trace-cmd `trace.dat` importer (`ingest/src/import/tracedat.rs`): v6 (header parts,
//! options, flyrecord CPU table and pages) and v7 (sections, chained options, BUFFER options,
//! zstd-compressed sections and per-CPU chunks), through `argus_ingest::import::open`, which
//! decodes the pages and merges the CPUs.
//!
//! Input: a `trace.dat`; the magic (`\x17\x08\x44tracing`) is put in front when the input does
//! not start with it, so every input reaches the trace.dat reader.
#![no_main]

use argus_fuzz::import::import_file;
use argus_fuzz::scratch::Scratch;
use argus_fuzz::writers::TRACEDAT_MAGIC;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("import_tracedat"))
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(TRACEDAT_MAGIC) {
        import_file(scratch(), "trace.dat", data);
    } else {
        let mut file = TRACEDAT_MAGIC.to_vec();
        file.extend_from_slice(data);
        import_file(scratch(), "trace.dat", &file);
    }
});
