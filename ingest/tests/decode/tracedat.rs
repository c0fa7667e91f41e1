//! trace-cmd `trace.dat` files (v6 and v7) read directly, against `trace-cmd report -R` of
//! each (`../shared/realtraces/trace-dat/oracle/`): every record, in order, with its CPU, time,
//! pid, thread name, event and every field must be what trace-cmd printed.

use crate::common::realtraces;
use argus_ingest::format::{EventFormat, FieldFormat, FieldKind, FormatSet};
use argus_ingest::import::{self, ImportFormat, TraceDat};
use argus_ingest::kallsyms::Kallsyms;
use argus_ingest::page::parse_page;
use argus_ingest::IngestError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One line of `trace-cmd report -R`.
#[derive(Debug)]
struct OracleLine {
    comm: String,
    pid: i32,
    cpu: u32,
    /// `sec.usec` as printed.
    time: String,
    event: String,
    /// Everything after `event:`, trimmed.
    fields: String,
}

fn gunzip(path: &Path) -> String {
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(path)
        .output()
        .expect("gzip runs");
    assert!(out.status.success(), "gzip -dc {}", path.display());
    String::from_utf8(out.stdout).expect("utf-8 report")
}

/// Parses the oracle: `comm-pid [cpu] sec.usec: event: fields`.
fn oracle(path: &Path) -> Vec<OracleLine> {
    let text = gunzip(path);
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("cpus=") || line.trim().is_empty() {
            continue;
        }
        let open = line
            .find(" [")
            .unwrap_or_else(|| panic!("no CPU column: {line}"));
        let who = line[..open].trim_start();
        let (comm, pid) = who.rsplit_once('-').expect("comm-pid");
        let close = open + line[open..].find(']').expect("]");
        let cpu: u32 = line[open + 2..close].parse().expect("cpu");
        let rest = line[close + 1..].trim_start();
        let (time, rest) = rest.split_once(": ").expect("time");
        let (event, fields) = rest.split_once(':').expect("event");
        out.push(OracleLine {
            comm: comm.to_string(),
            pid: pid.trim().parse().expect("pid"),
            cpu,
            time: time.to_string(),
            event: event.to_string(),
            fields: fields.trim().to_string(),
        });
    }
    out
}

/// One decoded record.
struct Ours {
    cpu: u32,
    ts: u64,
    pid: i32,
    event: String,
    payload: Vec<u8>,
}

fn decode(dat: &TraceDat, formats: &FormatSet) -> Vec<Ours> {
    let mut out = Vec::new();
    for c in &dat.cpus {
        assert_eq!(c.pages.len() % dat.page_size, 0, "cpu{} pages", c.cpu);
        for (i, page) in c.pages.chunks(dat.page_size).enumerate() {
            let recs = parse_page(&formats.header_page, page)
                .unwrap_or_else(|e| panic!("cpu{} page {i}: {e:?}", c.cpu));
            for r in recs {
                let r = r.unwrap_or_else(|e| panic!("cpu{} page {i}: {e:?}", c.cpu));
                let id = r.id().expect("id");
                let ev = formats
                    .get(id)
                    .unwrap_or_else(|| panic!("no format for id {id}"));
                let pid = ev.field("common_pid").expect("common_pid");
                out.push(Ours {
                    cpu: c.cpu,
                    ts: r.ts.saturating_add_signed(dat.ts_offset),
                    pid: pid.read_i64(r.payload).expect("pid") as i32,
                    event: ev.name.clone(),
                    payload: r.payload.to_vec(),
                });
            }
        }
    }
    out
}

/// trace-cmd's time column: microseconds, rounded.
fn time(ts: u64) -> String {
    let us = (ts + 500) / 1000;
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// `sec.usec` as microseconds.
fn micros(t: &str) -> u64 {
    let (s, u) = t.split_once('.').expect("sec.usec");
    s.parse::<u64>().expect("sec") * 1_000_000 + u.parse::<u64>().expect("usec")
}

fn is_char_array(f: &FieldFormat) -> bool {
    f.decl.starts_with("char ")
        || f.decl.contains(" char ")
        || f.decl.starts_with("__data_loc char")
}

/// Checks one field's printed `value` against the record.
fn check_field(
    ev: &EventFormat,
    f: &FieldFormat,
    value: &str,
    payload: &[u8],
    kallsyms: &Kallsyms,
) -> Result<(), String> {
    let bad = |ours: String| {
        Err(format!(
            "{}.{}: oracle {value:?}, ours {ours:?}",
            ev.name, f.name
        ))
    };
    match f.kind {
        FieldKind::Array { .. } | FieldKind::DataLoc | FieldKind::RelLoc | FieldKind::Flexible
            if is_char_array(f) =>
        {
            let s = String::from_utf8_lossy(f.read_str(payload).map_err(|e| e.to_string())?)
                .into_owned();
            // An empty dynamic string prints as (null); print's text keeps its newline,
            // which the report line cannot show.
            let ours = if s.is_empty() && matches!(f.kind, FieldKind::DataLoc | FieldKind::RelLoc) {
                "(null)".to_string()
            } else {
                s.trim_end_matches('\n').to_string()
            };
            if ours == value {
                Ok(())
            } else {
                bad(ours)
            }
        }
        // A flexible array of numbers (bprint's `u32 buf[]`) reads as a zero-size number.
        FieldKind::Flexible => {
            if value == "0" {
                Ok(())
            } else {
                bad("0".to_string())
            }
        }
        FieldKind::Array { .. } | FieldKind::DataLoc | FieldKind::RelLoc => {
            let bytes = f.bytes(payload).map_err(|e| e.to_string())?;
            let ours = format!(
                "ARRAY[{}]",
                bytes
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if ours == value {
                Ok(())
            } else {
                bad(ours)
            }
        }
        FieldKind::Scalar => {
            let v = f.read_u64(payload).map_err(|e| e.to_string())?;
            let size_mask = if f.size >= 8 {
                u64::MAX
            } else {
                (1u64 << (8 * f.size)) - 1
            };
            let ok = if let Some(h) = value.strip_prefix("0x") {
                u64::from_str_radix(h, 16).ok() == Some(v & size_mask)
            } else if let Ok(n) = value.parse::<i64>() {
                n == v as i64 || (n as u64) == v & size_mask
            } else if let Ok(n) = value.parse::<u64>() {
                n == v & size_mask
            } else {
                // A pointer printed as its symbol.
                kallsyms.lookup(v).map(|(n, _)| n) == Some(value)
            };
            if ok {
                Ok(())
            } else {
                bad(format!("{v} ({:#x}, {:?})", v, kallsyms.name(v)))
            }
        }
    }
}

/// Splits `fields` by the names of the event's own fields (values may hold spaces).
fn split_fields<'a>(
    ev: &'a EventFormat,
    fields: &'a str,
) -> Result<Vec<(&'a FieldFormat, &'a str)>, String> {
    let own: Vec<&FieldFormat> = ev
        .fields
        .iter()
        .filter(|f| !f.name.starts_with("common_"))
        .collect();
    let mut out = Vec::new();
    let mut rest = fields;
    for (i, f) in own.iter().enumerate() {
        let key = format!("{}=", f.name);
        rest = rest
            .strip_prefix(&key)
            .ok_or_else(|| format!("{}: expected {key} at {rest:?}", ev.name))?;
        let end = match own.get(i + 1) {
            Some(next) => rest
                .find(&format!(" {}=", next.name))
                .ok_or_else(|| format!("{}: no {}= in {rest:?}", ev.name, next.name))?,
            None => rest.len(),
        };
        out.push((*f, &rest[..end]));
        rest = rest[end..].strip_prefix(' ').unwrap_or(&rest[end..]);
    }
    Ok(out)
}

fn trace_dat_dir() -> Option<PathBuf> {
    Some(realtraces()?.join("trace-dat"))
}

/// Decodes `dat_file` and compares every record with `oracle_file`; returns how many records
/// of each event were compared.
fn compare(dat_file: &Path, oracle_file: &Path) -> BTreeMap<String, usize> {
    let bytes = std::fs::read(dat_file).unwrap();
    let dat = TraceDat::parse(dat_file, &bytes).unwrap_or_else(|e| panic!("{e}"));
    let formats = dat.format_set(dat_file).unwrap();
    let kallsyms = Kallsyms::parse(&dat.kallsyms);
    let names: BTreeMap<i32, String> = dat.threads().into_iter().map(|t| (t.tid, t.comm)).collect();
    let mut ours = decode(&dat, &formats);
    let mut want = oracle(oracle_file);
    assert_eq!(
        ours.len(),
        want.len(),
        "{}: record count",
        dat_file.display()
    );
    // trace-cmd merges CPUs by time; at equal printed times the order between CPUs is its own.
    ours.sort_by_key(|o| ((o.ts + 500) / 1000, o.cpu));
    want.sort_by_key(|w| (micros(&w.time), w.cpu));
    let mut counts = BTreeMap::new();
    let mut mismatches = Vec::new();
    for (i, (o, w)) in ours.iter().zip(&want).enumerate() {
        let mut why = Vec::new();
        if (o.cpu, time(o.ts), o.pid, o.event.as_str())
            != (w.cpu, w.time.clone(), w.pid, w.event.as_str())
        {
            why.push(format!(
                "cpu/time/pid/event: ours {} {} {} {}",
                o.cpu,
                time(o.ts),
                o.pid,
                o.event
            ));
        } else {
            let comm = match (o.pid, names.get(&o.pid)) {
                (0, _) => "<idle>".to_string(),
                (_, Some(c)) => c.clone(),
                (_, None) => "<...>".to_string(),
            };
            if comm != w.comm {
                why.push(format!("comm: ours {comm:?}"));
            }
            let ev = formats.by_name("", &o.event).unwrap();
            match split_fields(ev, &w.fields) {
                Ok(fields) => {
                    for (f, v) in fields {
                        if let Err(e) = check_field(ev, f, v, &o.payload, &kallsyms) {
                            why.push(e);
                        }
                    }
                }
                Err(e) => why.push(e),
            }
        }
        if why.is_empty() {
            *counts.entry(o.event.clone()).or_default() += 1;
        } else if mismatches.len() < 10 {
            mismatches.push(format!("record {i} ({w:?}): {}", why.join("; ")));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{}: records differ from trace-cmd's:\n{}",
        dat_file.display(),
        mismatches.join("\n")
    );
    counts
}

#[test]
fn every_v6_trace_dat_decodes_to_its_trace_cmd_report() {
    let Some(dir) = trace_dat_dir() else { return };
    let mut total = 0;
    for name in [
        "trappy_trace_idle",
        "trappy_raw_trace",
        "trappy_trace_32bit",
        "lisa_example_rtapp",
        "lisa_sched_load",
    ] {
        let counts = compare(
            &dir.join(format!("{name}.trace.dat")),
            &dir.join(format!("oracle/{name}.report-raw.txt.gz")),
        );
        assert!(!counts.is_empty(), "{name}: no records");
        total += counts.values().sum::<usize>();
    }
    // The manifest's counts: 23 + 17 + 3, 755 + 2, 501 + 18 + 6, 1552 + 6242 + 12 + 14, and
    // lisa_sched_load's 3724.
    assert_eq!(total, 43 + 757 + 525 + 7820 + 3724);
}

#[test]
fn v7_trace_dat_uncompressed_and_zstd_decode_to_the_v6_report() {
    let Some(dir) = trace_dat_dir() else { return };
    let oracle = dir.join("oracle/lisa_sched_load.report-raw.txt.gz");
    let v6 = compare(&dir.join("lisa_sched_load.trace.dat"), &oracle);
    for v7 in ["v7-none", "v7-zstd"] {
        let path = dir.join(format!("derived/lisa_sched_load.{v7}.trace.dat"));
        let bytes = std::fs::read(&path).unwrap();
        let dat = TraceDat::parse(&path, &bytes).unwrap();
        assert_eq!(dat.version, 7);
        assert_eq!(dat.compression.as_deref(), Some(&v7[3..]));
        assert_eq!(compare(&path, &oracle), v6, "{v7}");
    }
}

#[test]
fn a_trace_dat_imports_into_events_and_threads() {
    let Some(dir) = trace_dat_dir() else { return };
    let imported = import::open(&dir.join("trappy_trace_idle.trace.dat")).unwrap();
    assert_eq!(imported.format(), ImportFormat::TraceDat);
    assert!(imported.errors().is_empty(), "{:?}", imported.errors());
    assert_eq!(imported.summary().cpus, 6);
    let counts = imported.kind_counts();
    assert_eq!(counts.get("switch"), Some(&23), "{counts:?}");
    // saved_cmdlines names a thread before its first switch.
    let sh = imported
        .threads()
        .iter()
        .find(|t| t.tid.0 == 6243)
        .expect("sh");
    assert_eq!(sh.comm, "sh");
}

/// Every prefix of a real file is either a complete file or an error naming an offset inside
/// the file; never a panic.
#[test]
fn a_truncated_trace_dat_is_an_error_naming_the_offset() {
    let Some(dir) = trace_dat_dir() else { return };
    for name in [
        "trappy_trace_idle.trace.dat",
        "derived/lisa_sched_load.v7-zstd.trace.dat",
    ] {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).unwrap();
        let step = (bytes.len() / 400).max(1);
        let mut errors = 0;
        for cut in (0..bytes.len()).step_by(step) {
            match TraceDat::parse(&path, &bytes[..cut]) {
                Ok(_) => {}
                Err(IngestError::Malformed { file, offset, .. }) => {
                    assert_eq!(file, path);
                    assert!(
                        offset <= bytes.len() as u64,
                        "{name} cut at {cut}: offset {offset}"
                    );
                    errors += 1;
                }
                Err(e) => panic!("{name} cut at {cut}: {e}"),
            }
        }
        assert!(errors > 0, "{name}: no prefix failed");
    }
}

/// The 4.x kernels of these files write `unsigned long caller; size:0` for `kernel_stack` (a
/// flexible tail of kernel longs): their stacks decode, and nothing of the file is left out.
#[test]
fn an_old_kernels_flexible_kernel_stack_decodes() {
    let Some(dir) = trace_dat_dir() else { return };
    let path = dir.join("trappy_trace_idle.trace.dat");
    let bytes = std::fs::read(&path).unwrap();
    let dat = TraceDat::parse(&path, &bytes).unwrap();
    let formats = dat.format_set(&path).unwrap();
    let ks = formats
        .by_name("ftrace", "kernel_stack")
        .expect("kernel_stack");
    let caller = ks.field("caller").expect("caller");
    assert_eq!((caller.size, caller.kind), (0, FieldKind::Flexible));
    let ips = [0xffff_ffc0_0008_1000u64, 0xffff_ffc0_0008_2000];
    let mut p = vec![0u8; caller.offset as usize + 8 * ips.len()];
    p[..2].copy_from_slice(&ks.id.to_le_bytes());
    let size = ks.field("size").expect("size").offset as usize;
    p[size..size + 4].copy_from_slice(&(ips.len() as u32).to_le_bytes());
    for (i, ip) in ips.iter().enumerate() {
        let at = caller.offset as usize + 8 * i;
        p[at..at + 8].copy_from_slice(&ip.to_le_bytes());
    }
    let mut conv = argus_ingest::convert::Converter::new(&formats).expect("converter");
    let rec = argus_ingest::page::RawRecord {
        ts: 1,
        offset: 16,
        payload: &p,
    };
    let d = conv
        .convert(argus_schema::Cpu(0), &rec)
        .unwrap()
        .expect("maps");
    assert_eq!(
        d.event.expect("event").kind,
        argus_schema::EventKind::Stack {
            kernel: true,
            ips: ips.to_vec()
        }
    );
    let imported = import::open(&path).unwrap();
    assert!(
        imported.summary().notes.is_empty(),
        "{:?}",
        imported.summary().notes
    );
}
