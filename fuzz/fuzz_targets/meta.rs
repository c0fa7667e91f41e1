//! A trace directory's JSON documents and side files (`ingest/src/tracedir.rs`,
//! `ingest/src/replay.rs`, `ingest/src/kallsyms.rs`): `meta.json` (and its extension keys:
//! ring, lost ranges), `proc.json` and `kallsyms.zst`, with the 6.18 formats and one chunk
//! of built pages for CPU 0, opened and replayed as `argus build` does.
//!
//! Input: sections ([`argus_fuzz::sections`]): `meta.json`, `proc.json` (none when empty),
//! kallsyms text (written zstd-compressed as `kallsyms.zst`; none when empty), then bytes
//! for `arbitrary` to build CPU 0's pages from.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use argus_fuzz::pages::PageSpec;
use argus_fuzz::scratch::Scratch;
use argus_fuzz::{formats, sections};
use argus_ingest::format::EventFormat;
use argus_ingest::kallsyms::Kallsyms;
use argus_ingest::replay::TraceReader;
use argus_ingest::tracedir::{MetaExt, ProcEntry, TraceMeta};
use argus_ingest::IngestError;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("meta"))
}

fn event_list() -> &'static Vec<EventFormat> {
    static L: OnceLock<Vec<EventFormat>> = OnceLock::new();
    L.get_or_init(|| formats::format_set().events.into_values().collect())
}

fn check_meta_error(e: &IngestError) {
    if let IngestError::Json { file, .. }
    | IngestError::Unsupported { file, .. }
    | IngestError::BadPageSize { file, .. }
    | IngestError::BadClock { file, .. } = e
    {
        assert!(
            file.ends_with("meta.json") || file.ends_with("proc.json"),
            "{e}: names the document"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let parts = sections::split(data, 4);
    let (meta, procs, kallsyms, pages) = (parts[0], parts[1], parts[2], parts[3]);
    let _ = serde_json::from_slice::<TraceMeta>(meta);
    let _ = MetaExt::from_meta_json(meta);
    let _ = serde_json::from_slice::<Vec<ProcEntry>>(procs);
    let text = String::from_utf8_lossy(kallsyms);
    let syms = Kallsyms::parse(&text);
    for (addr, _) in syms.iter().take(16) {
        assert_eq!(syms.lookup(addr).map(|(_, off)| off), Some(0));
        let _ = syms.describe(addr.wrapping_add(1));
    }

    let s = scratch();
    s.reset();
    let dir = s.path();
    s.write("meta.json", meta);
    if !procs.is_empty() {
        s.write("proc.json", procs);
    }
    if !kallsyms.is_empty() {
        let z = zstd::bulk::compress(kallsyms, 1).expect("invariant: compressing into a Vec");
        s.write("kallsyms.zst", &z);
    }
    formats::link_tree(dir).expect("invariant: writable scratch");
    let mut u = Unstructured::new(pages);
    let specs: Vec<PageSpec> = Vec::arbitrary(&mut u).unwrap_or_default();
    let mut raw = Vec::new();
    for p in specs.iter().take(4) {
        raw.extend_from_slice(&p.encode(event_list(), 4096).page);
    }
    let chunk = zstd::bulk::compress(&raw, 1).expect("invariant: compressing into a Vec");
    s.write("cpu0/000000.chunk.zst", &chunk);

    for window in [None, Some(Duration::from_millis(5))] {
        let reader = match window {
            None => TraceReader::open(dir),
            Some(w) => TraceReader::open_window(dir, w),
        };
        let reader = match reader {
            Ok(r) => r,
            Err(e) => {
                check_meta_error(&e);
                return;
            }
        };
        let _ = reader.files();
        let _ = reader.complete_from();
        let mut events = reader.events();
        let mut n = 0u64;
        for ev in events.by_ref() {
            if ev.is_ok() {
                n += 1;
            }
        }
        let summary = events.finish();
        assert_eq!(summary.events, n);
    }
});
