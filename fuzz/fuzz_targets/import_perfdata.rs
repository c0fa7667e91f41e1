//! The `perf.data` importer (`ingest/src/import/perfdata.rs`): header, attrs and their ids,
//! the feature table and `HEADER_TRACING_DATA` (a trace.dat v6 header read by
//! `TraceDat::parse_tracing_data`), data records (RAW tracepoint samples decoded with those
//! formats, COMM, FORK, LOST, LOST_SAMPLES) and `perf record -z` COMPRESSED records (one zstd
//! stream across records), through `argus_ingest::import::open`.
//!
//! Input: a `perf.data`; the magic `PERFILE2` is put in front when the input does not start
//! with it (or with the big-endian `2ELIFREP`), so every input reaches the perf.data reader.
#![no_main]

use argus_fuzz::import::import_file;
use argus_fuzz::scratch::Scratch;
use argus_fuzz::writers::PERF_MAGIC;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("import_perfdata"))
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(PERF_MAGIC) || data.starts_with(b"2ELIFREP") {
        import_file(scratch(), "perf.data", data);
    } else {
        let mut file = PERF_MAGIC.to_vec();
        file.extend_from_slice(data);
        import_file(scratch(), "perf.data", &file);
    }
});
