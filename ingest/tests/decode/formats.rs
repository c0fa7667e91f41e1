//! The format-file parser over real corpora: this machine's tracefs and a Pixel 6 (5.10).

use crate::common::*;
use argus_ingest::convert::Converter;
use argus_ingest::format::{EventFormat, FieldKind, FormatSet, HeaderPage, StateTable};
use std::path::Path;

/// Counts `format` files under `dir` (recursively).
fn count_format_files(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            n += count_format_files(&p);
        } else if p.file_name().is_some_and(|f| f == "format") {
            n += 1;
        }
    }
    n
}

#[test]
fn every_format_file_of_this_machines_tracefs() {
    let tracefs = Path::new("/sys/kernel/tracing");
    if !tracefs.join("events/header_page").exists() {
        println!(
            "SKIP: tracefs is not mounted at /sys/kernel/tracing \
             (mount -t tracefs nodev /sys/kernel/tracing); format parser not run on this kernel"
        );
        return;
    }
    let set = FormatSet::load_tracefs(tracefs).unwrap();
    let files = count_format_files(&tracefs.join("events"));
    // Every file parsed into one event (ids are unique per boot).
    assert_eq!(set.events.len(), files);
    assert!(files > 100);
    assert_eq!(set.header_page, HeaderPage::default());
    assert!(set.header_event.has_time_stamp);
    for ev in set.events.values() {
        assert!(!ev.name.is_empty() && !ev.system.is_empty());
        let common = ev.field("common_type").unwrap();
        assert_eq!((common.offset, common.size), (0, 2), "{}", ev.full_name());
        assert!(ev.field("common_pid").is_some(), "{}", ev.full_name());
    }
    // The events Argus maps all have the fields it needs.
    Converter::new(&set).unwrap();
    let sw = set.by_name("sched", "sched_switch").unwrap();
    assert_eq!(
        StateTable::from_print_fmt(&sw.print_fmt),
        StateTable::default()
    );
    assert_eq!(
        sw.field("prev_comm").unwrap().kind,
        FieldKind::Array { len: Some(16) }
    );
    let fork = set.by_name("sched", "sched_process_fork").unwrap();
    // 6.x kernels store the comms as __data_loc strings.
    assert!(matches!(
        fork.field("child_comm").unwrap().kind,
        FieldKind::DataLoc | FieldKind::Array { .. }
    ));
    let enter = set.by_name("raw_syscalls", "sys_enter").unwrap();
    let args = enter.field("args").unwrap();
    assert_eq!(
        (args.kind, args.size),
        (FieldKind::Array { len: Some(6) }, 48)
    );
}

#[test]
fn every_format_file_of_the_pixel_tarball() {
    let Some(rt) = realtraces() else { return };
    let tmp =
        untar(&rt.join(
            "raw-ringbuffer/perfetto_formats/android_raven_AOSP.MASTER_5.10.43.formats.tar.gz",
        ));
    let events = tmp.path().join("android_raven_AOSP.MASTER_5.10.43/events");
    let set = FormatSet::load_dir(&events).unwrap();
    let files = count_format_files(&events);
    assert_eq!(files, 1544);
    assert_eq!(set.events.len(), files);
    assert_eq!(set.header_page, HeaderPage::default());
    Converter::new(&set).unwrap();
    // FORMATS.md §2 layouts.
    let sw = set.by_name("sched", "sched_switch").unwrap();
    assert_eq!(sw.id, 103);
    let offs: Vec<(&str, u32)> = sw
        .fields
        .iter()
        .map(|f| (f.name.as_str(), f.offset))
        .collect();
    assert_eq!(
        offs,
        vec![
            ("common_type", 0),
            ("common_flags", 2),
            ("common_preempt_count", 3),
            ("common_pid", 4),
            ("prev_comm", 8),
            ("prev_pid", 24),
            ("prev_prio", 28),
            ("prev_state", 32),
            ("next_comm", 40),
            ("next_pid", 56),
            ("next_prio", 60)
        ]
    );
    assert_eq!(
        StateTable::from_print_fmt(&sw.print_fmt),
        StateTable::default()
    );
    let irq = set.by_name("irq", "irq_handler_entry").unwrap();
    assert_eq!(irq.field("name").unwrap().kind, FieldKind::DataLoc);
    let bt = set.by_name("binder", "binder_transaction").unwrap();
    assert_eq!(bt.field("debug_id").unwrap().offset, 8);
    assert!(set.by_name("timer", "hrtimer_start").is_some());
}

#[test]
fn data_loc_and_rel_loc_strings() {
    let text = "name: x\nID: 7\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:__data_loc char[] a;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:__rel_loc char[] b;\toffset:12;\tsize:4;\tsigned:0;\n\
        \nprint fmt: \"%s\"\n";
    let ev = EventFormat::parse("t", text).unwrap();
    let mut rec = vec![0u8; 32];
    // a: offset 16, length 4 ("abc\0"); b: 4 bytes after the end of b (16) + 4 = 20, length 3.
    rec[8..12].copy_from_slice(&(16u32 | 4 << 16).to_le_bytes());
    rec[12..16].copy_from_slice(&(4u32 | 3 << 16).to_le_bytes());
    rec[16..20].copy_from_slice(b"abc\0");
    rec[20..23].copy_from_slice(b"xyz");
    assert_eq!(ev.field("a").unwrap().read_str(&rec).unwrap(), b"abc");
    assert_eq!(ev.field("b").unwrap().read_str(&rec).unwrap(), b"xyz");
    // Pointing past the record is an error value.
    rec[8..12].copy_from_slice(&(30u32 | 8 << 16).to_le_bytes());
    assert!(ev.field("a").unwrap().read_str(&rec).is_err());
    assert_eq!(ev.print_fmt, "\"%s\"");
}
