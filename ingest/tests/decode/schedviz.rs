//! SchedViz captures (`raw-ringbuffer/schedviz`, google/schedviz@72ec4f33): a 2019 x86-64
//! collection with its format files, a second 64-bit input and a 32-bit page.
//!
//! `sched_wakeup` is mapped to `EventKind::Waking` (these captures have no `sched_waking`).

use crate::common::*;
use argus_ingest::convert::{Converter, Decoded};
use argus_ingest::format::{EventFormat, FormatSet, HeaderPage};
use argus_schema::{Cpu, EventKind};
use std::collections::BTreeMap;
use std::path::Path;

/// Converts every record, checking per-record invariants, and counts event kinds.
fn convert_all(formats: &FormatSet, data: &[u8]) -> BTreeMap<&'static str, usize> {
    let mut conv = Converter::new(formats).unwrap();
    let mut kinds = BTreeMap::new();
    for (_, r) in records(&formats.header_page, data, 4096) {
        let Some(Decoded {
            event: Some(ev), ..
        }) = conv.convert(Cpu(0), &r).unwrap()
        else {
            continue;
        };
        if let EventKind::Switch { prev, next, .. } = ev.kind {
            // The task switching out is the current task.
            assert_eq!(prev, ev.tid);
            assert!(next.0 >= 0);
        }
        *kinds.entry(ev.kind.name()).or_default() += 1;
    }
    kinds
}

#[test]
fn server_testdata_tarball() {
    let Some(rt) = realtraces() else { return };
    let tmp = untar(&rt.join("raw-ringbuffer/schedviz/server_testdata_test.tar.gz"));
    // SchedViz keeps the tracefs layout without the `events/` level: formats/SYS/EVENT/format.
    let formats = FormatSet::load_dir(&tmp.path().join("formats")).unwrap();
    assert_eq!(formats.header_page, HeaderPage::default());
    assert_eq!(formats.events.len(), 4);
    let data = std::fs::read(tmp.path().join("traces/cpu0")).unwrap();
    assert_eq!(data.len() / 4096, 404);
    let recs = records(&formats.header_page, &data, 4096);
    assert!(recs.windows(2).all(|w| w[0].1.ts <= w[1].1.ts), "monotonic");
    let counts = count_by_name(&formats, &recs);
    assert_eq!(counts["sched_switch"], 15_056);
    assert_eq!(counts["sched_wakeup"], 11_134);
    assert_eq!(counts["sched_wakeup_new"], 2_732);
    let kinds = convert_all(&formats, &data);
    assert_eq!(kinds["switch"], 15_056);
    assert_eq!(kinds["waking"], 11_134);
    assert_eq!(kinds["wakeup_new"], 2_732);
}

#[test]
fn traceparser_input_cpu0_with_the_tarball_formats() {
    let Some(rt) = realtraces() else { return };
    let tmp = untar(&rt.join("raw-ringbuffer/schedviz/server_testdata_test.tar.gz"));
    let formats = FormatSet::load_dir(&tmp.path().join("formats")).unwrap();
    let data = std::fs::read(rt.join("raw-ringbuffer/schedviz/traceparser_input_cpu0")).unwrap();
    assert_eq!(data.len() / 4096, 21);
    let recs = records(&formats.header_page, &data, 4096);
    assert!(recs.windows(2).all(|w| w[0].1.ts <= w[1].1.ts), "monotonic");
    let counts = count_by_name(&formats, &recs);
    assert_eq!(counts["sched_switch"], 779);
    assert_eq!(counts["sched_wakeup"], 587);
    let kinds = convert_all(&formats, &data);
    assert_eq!((kinds["switch"], kinds["waking"]), (779, 587));
}

/// Rebuilds format-file text from `traceparser_formats_from_test.txt` (section `## name`).
fn transcribed(path: &Path, section: &str) -> FormatSet {
    let text = std::fs::read_to_string(path).unwrap();
    let body = text
        .split("\n## ")
        .find(|s| s.starts_with(section) && s[section.len()..].starts_with('\n'))
        .unwrap();
    let mut header_page = String::new();
    let mut events: Vec<(String, String)> = Vec::new();
    for line in body.lines().skip(1) {
        let toks: Vec<&str> = line.split_whitespace().collect();
        if toks.is_empty() {
            continue;
        }
        let kv = |key: &str| {
            toks.iter()
                .find_map(|t| t.strip_prefix(key))
                .unwrap()
                .to_string()
        };
        if toks[0] == "header_page" {
            let decl = toks[1..toks.len() - 2].join(" ");
            header_page += &format!(
                "\tfield: {decl};\toffset:{};\tsize:{};\tsigned:0;\n",
                kv("offset="),
                kv("size=")
            );
        } else if toks[0] == "event" {
            events.push((
                toks[2].to_string(),
                format!("name: {}\nID: {}\nformat:\n", toks[2], toks[1]),
            ));
        } else {
            // The upstream test labels prev_state `long prev_prio` (typo, see the file's notes).
            let mut decl = toks[..toks.len() - 2].join(" ");
            if decl == "long prev_prio" {
                decl = "long prev_state".into();
            }
            let ev = &mut events.last_mut().unwrap().1;
            *ev += &format!(
                "\tfield:{decl};\toffset:{};\tsize:{};\tsigned:1;\n",
                kv("offset="),
                kv("size=")
            );
        }
    }
    let mut set = FormatSet {
        header_page: HeaderPage::parse(&header_page).unwrap(),
        ..FormatSet::default()
    };
    for (_, text) in events {
        set.insert(EventFormat::parse("sched", &text).unwrap());
    }
    set
}

#[test]
fn traceparser_32bit_page_has_a_four_byte_commit() {
    let Some(rt) = realtraces() else { return };
    let dir = rt.join("raw-ringbuffer/schedviz");
    let formats = transcribed(&dir.join("traceparser_formats_from_test.txt"), "tp32");
    // header_page says commit is 4 bytes; data follows it at 12 (its `data` line says 16).
    assert_eq!(formats.header_page, HeaderPage::with_commit_size(4));
    assert_eq!(formats.header_page.data_offset, 12);
    let data = std::fs::read(dir.join("traceparser_input_cpu0-32")).unwrap();
    let recs = records(&formats.header_page, &data, 4096);
    assert!(recs.windows(2).all(|w| w[0].1.ts <= w[1].1.ts), "monotonic");
    let counts = count_by_name(&formats, &recs);
    assert_eq!(counts["sched_switch"], 39);
    assert_eq!(counts["sched_wakeup"], 23);
    assert_eq!(counts["sched_wakeup_new"], 1);
    assert_eq!(counts.len(), 3);
    // The switch fields sit after the two extra common fields (prev_pid at 32, 4-byte long).
    let kinds = convert_all(&formats, &data);
    assert_eq!(kinds["switch"], 39);

    // The 64-bit transcription agrees with the tarball's format files.
    let tp = transcribed(&dir.join("traceparser_formats_from_test.txt"), "tp");
    assert_eq!(tp.header_page, HeaderPage::default());
    let data = std::fs::read(dir.join("traceparser_input_cpu0")).unwrap();
    let kinds = convert_all(&tp, &data);
    assert_eq!((kinds["switch"], kinds["waking"]), (779, 587));
}
