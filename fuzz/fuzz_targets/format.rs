//! Format files (`ingest/src/format.rs`): one text read as an event `format`, a
//! `header_page` and a `header_event`; what parses is used as the converter and the page
//! parser use it (a `Converter` built from the event, a record of its natural size
//! converted, a page parsed with the header layout), and the `sched_switch` state table and
//! the print-fmt constant evaluator read the `print fmt`.
#![no_main]

use argus_fuzz::formats::record_size;
use argus_ingest::convert::Converter;
use argus_ingest::format::{
    eval_const, EventFormat, FormatSet, HeaderEvent, HeaderPage, StateTable,
};
use argus_ingest::page::{parse_page, RawRecord};
use argus_schema::Cpu;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = HeaderEvent::parse(&text);
    let _ = HeaderPage::page_size_of(&text);
    if let Ok(layout) = HeaderPage::parse(&text) {
        assert_eq!(
            layout.data_offset,
            layout.commit_offset + layout.commit_size
        );
        let mut page = vec![0u8; 4096];
        page.iter_mut()
            .zip(data.iter().cycle())
            .for_each(|(p, d)| *p = *d);
        if let Ok(records) = parse_page(&layout, &page) {
            for r in records.take(4096) {
                if let Ok(r) = r {
                    assert!(r.offset + r.payload.len() <= page.len());
                }
            }
        }
    }
    let _ = eval_const(&text);
    let table = StateTable::from_print_fmt(&text);
    for state in [0u64, 1, 2, 0x100, 0x800, u64::MAX] {
        let _ = table.letter(state);
    }
    for system in [
        "sched",
        "raw_syscalls",
        "ftrace",
        "timer",
        "filelock",
        "sock",
        "",
    ] {
        let Ok(ev) = EventFormat::parse(system, &text) else {
            return;
        };
        let _ = StateTable::from_print_fmt(&ev.print_fmt);
        let mut set = FormatSet::default();
        set.insert(ev.clone());
        let Ok(mut conv) = Converter::new(&set) else {
            continue;
        };
        let mut payload = vec![0u8; record_size(&ev).min(1 << 16)];
        payload
            .iter_mut()
            .zip(data.iter().cycle())
            .for_each(|(p, d)| *p = *d);
        if let Some(p) = payload.get_mut(..2) {
            p.copy_from_slice(&ev.id.to_le_bytes());
        }
        for f in &ev.fields {
            let _ = f.read_u64(&payload);
            let _ = f.read_str(&payload);
        }
        let rec = RawRecord {
            ts: 1,
            offset: 16,
            payload: &payload,
        };
        if let Err(e) = conv.convert(Cpu(0), &rec) {
            assert_eq!(e.offset, 16, "a record's error is at the record");
        }
    }
});
