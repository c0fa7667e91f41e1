//! The text importer (`ingest/src/import/text.rs`): tracefs `trace` text, atrace output and
//! `trace-cmd report` (plugin and `-R`) read through `argus_ingest::import::open`, and every
//! line through `argus_ingest::import::parse_line`.
#![no_main]

use argus_fuzz::import::import_file;
use argus_fuzz::scratch::Scratch;
use argus_ingest::import::parse_line;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("import_text"))
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        if let Some(l) = parse_line(line) {
            assert!(l.tid >= 0);
            assert!(line.contains(l.body));
        }
    }
    // Binary containers (trace.dat, perf.data, Perfetto) are other importers: keep to text,
    // which has no byte below TAB.
    if data.iter().any(|&b| b < 0x09)
        || data.starts_with(b"PERFILE2")
        || data.starts_with(b"2ELIFREP")
    {
        return;
    }
    import_file(scratch(), "trace.txt", data);
});
