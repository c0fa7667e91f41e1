//! Ring-buffer pages and their conversion (`ingest/src/page.rs`, `ingest/src/convert.rs`),
//! and the recorder's file-identity page scan (`ingest/src/linux/fds/scan.rs`).
//!
//! Input, by its first byte:
//! - odd: structure-aware. The rest builds `PageSpec`s ([`argus_fuzz::pages`]) of the 6.18
//!   formats; a well-formed built page must parse back to exactly its records.
//! - even: bytes as recorded. Sections ([`argus_fuzz::sections`]): `header_page` text,
//!   format files (`SYS/EVENT\n<text>` entries), then the pages. The seeds are real pages
//!   with the formats they were recorded with.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use argus_fuzz::pages::{MissedSpec, PageSpec};
use argus_fuzz::{formats, sections};
use argus_ingest::convert::{decode_page, Converter};
use argus_ingest::format::{EventFormat, FormatSet, HeaderPage};
use argus_ingest::page::{parse_page, Missed};
use argus_schema::Cpu;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn standard() -> &'static (FormatSet, Vec<EventFormat>) {
    static SET: OnceLock<(FormatSet, Vec<EventFormat>)> = OnceLock::new();
    SET.get_or_init(|| {
        let set = formats::format_set();
        let list = set.events.values().cloned().collect();
        (set, list)
    })
}

/// Parses and converts every page; returns the decoded count (for the seeds' sake: a page
/// that decodes nothing still has to fail cleanly).
fn decode_all(formats: &FormatSet, pages: &[u8], page_size: usize) {
    let Ok(mut conv) = Converter::new(formats) else {
        return;
    };
    let mut out = Vec::new();
    for page in pages.chunks(page_size) {
        out.clear();
        match decode_page(&formats.header_page, &mut conv, Cpu(1), page, &mut out) {
            Ok(_) => {}
            Err(e) => assert!(
                e.offset <= page.len(),
                "error offset {} in the page",
                e.offset
            ),
        }
        for d in &out {
            assert_eq!(d.cpu, Cpu(1));
        }
    }
    let _ = conv.skipped();
    let _ = argus_ingest::linux::file_scan_pages(formats, pages, page_size);
}

fn built(data: &[u8]) {
    let (set, list) = standard();
    let mut u = Unstructured::new(data);
    let Ok(specs) = Vec::<PageSpec>::arbitrary(&mut u) else {
        return;
    };
    let page_size = 4096;
    let mut pages = Vec::new();
    for spec in specs.iter().take(8) {
        let enc = spec.encode(list, page_size);
        let parsed = parse_page(&HeaderPage::default(), &enc.page);
        if let Some(expected) = &enc.expected {
            let records = parsed.expect("a well-formed page parses");
            let header = records.header();
            assert_eq!(header.ts, spec.ts);
            let missed = match enc.missed {
                MissedSpec::None => Missed::None,
                MissedSpec::Unknown => Missed::Unknown,
                MissedSpec::Count(n) => Missed::Count(n),
            };
            assert_eq!(header.missed, missed);
            let got: Vec<(u64, Vec<u8>)> = records
                .map(|r| r.map(|r| (r.ts, r.payload.to_vec())))
                .collect::<Result<_, _>>()
                .expect("a well-formed page's records parse");
            assert_eq!(&got, expected, "the records the page was built from");
        } else if let Ok(records) = parsed {
            let mut errors = 0;
            for r in records {
                match r {
                    Ok(r) => assert!(r.offset + r.payload.len() <= page_size),
                    Err(_) => errors += 1,
                }
            }
            assert!(errors <= 1, "a page's iterator stops after its first error");
        }
        pages.extend_from_slice(&enc.page);
    }
    decode_all(set, &pages, page_size);
}

fn raw(data: &[u8]) {
    let parts = sections::split(data, 3);
    let header_text = String::from_utf8_lossy(parts[0]);
    let mut set = FormatSet::default();
    if let Ok(hp) = HeaderPage::parse(&header_text) {
        set.header_page = hp;
    }
    let page_size = HeaderPage::page_size_of(&header_text)
        .unwrap_or(4096)
        .clamp(set.header_page.data_offset.max(1), 1 << 16);
    for (path, text) in sections::parse_format_entries(parts[1]) {
        let system = path.split_once('/').map_or("", |(s, _)| s);
        if let Ok(ev) = EventFormat::parse(system, &text) {
            set.insert(ev);
        }
    }
    decode_all(&set, parts[2], page_size);
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 1 => built(rest),
        Some((_, rest)) => raw(rest),
        None => {}
    }
});
