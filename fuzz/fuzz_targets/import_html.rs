//! The systrace HTML importer (`ingest/src/import/html.rs`): the old `var linuxPerfData =
//! "..."` string (JavaScript escapes) and `<script class="trace-data">` blocks, extracted
//! and read as ftrace text through `argus_ingest::import::open`.
//!
//! Input: the page after a fixed `<!DOCTYPE html>` line (so the input is taken as HTML
//! whatever it starts with).
#![no_main]

use argus_fuzz::import::import_file;
use argus_fuzz::scratch::Scratch;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("import_html"))
}

fuzz_target!(|data: &[u8]| {
    if data.iter().any(|&b| b < 0x09) {
        return;
    }
    let mut page = b"<!DOCTYPE html>\n".to_vec();
    page.extend_from_slice(data);
    import_file(scratch(), "trace.html", &page);
});
