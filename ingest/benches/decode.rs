//! Decode speed on a real recording of this machine (issue 3: at least 20M events/s on one
//! core for the page decoder).
//!
//! `cargo bench -p argus-ingest --bench decode` (root and tracefs needed to record; set
//! `ARGUS_BENCH_TRACE=DIR` to reuse a trace directory instead, which is also how to compare
//! two builds on the same events: the trace is recorded into that directory when it does not
//! exist yet). `ARGUS_BENCH_BLOCKS` sets the workload size (default 400,000 `dd` blocks,
//! about 1.7M events).
//!
//! Three measurements, each on one core, over the same trace:
//! - `parse`: raw page parsing ([`parse_page`]), pages already decompressed in memory;
//! - `convert`: parsing + conversion to [`argus_schema::Event`] ([`decode_page`]), pages in memory;
//! - `replay`: the whole [`TraceReader`] path: zstd decompression, decoding, the per-CPU
//!   merge, thread table, `seq` numbering.
//!
//! Throughput is in records (`parse`) or events (`convert`, `replay`) per second.

use argus_ingest::convert::{decode_page, Converter, Decoded};
use argus_ingest::linux::{RecordConfig, Recorder};
use argus_ingest::page::parse_page;
use argus_ingest::replay::TraceReader;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The trace to measure: `ARGUS_BENCH_TRACE`, recorded there when absent; else a fresh
/// recording in a temporary directory. `None` (after a loud SKIP line) when this machine
/// cannot record.
fn trace() -> Option<(PathBuf, Option<tempfile::TempDir>)> {
    let wanted = std::env::var_os("ARGUS_BENCH_TRACE").map(PathBuf::from);
    if let Some(dir) = &wanted {
        if dir.join("meta.json").is_file() {
            return Some((dir.clone(), None));
        }
    }
    if let Some(why) = argus_ingest::linux::cannot_trace() {
        eprintln!(
            "SKIP decode bench: cannot record here ({why}); set ARGUS_BENCH_TRACE to an \
             existing trace directory"
        );
        return None;
    }
    let (dir, tmp) = match wanted {
        Some(d) => (d, None),
        None => {
            let tmp = tempfile::tempdir().expect("tempdir");
            (tmp.path().join("trace"), Some(tmp))
        }
    };
    let blocks = std::env::var("ARGUS_BENCH_BLOCKS").unwrap_or_else(|_| "400000".into());
    let mut config = RecordConfig::new(&dir);
    config.buffer_size_kb = 65536;
    config.command = Some(vec![
        "dd".into(),
        "if=/dev/zero".into(),
        "of=/dev/null".into(),
        "bs=64".into(),
        format!("count={blocks}"),
    ]);
    config.duration = Some(Duration::from_secs(60));
    let summary = Recorder::new(config)
        .run()
        .expect("recording the bench workload");
    eprintln!(
        "decode bench: recorded {} pages into {} (lost {})",
        summary.pages,
        dir.display(),
        summary.lost_total()
    );
    Some((dir, tmp))
}

/// Every CPU's decompressed pages.
fn load_pages(reader: &TraceReader) -> Vec<(u32, Vec<u8>)> {
    reader
        .meta()
        .cpus
        .iter()
        .map(|&cpu| {
            let mut data = Vec::new();
            for f in reader.chunk_files(cpu) {
                let file = std::fs::File::open(reader.dir().join(f)).expect("chunk opens");
                zstd::stream::read::Decoder::new(file)
                    .expect("zstd")
                    .read_to_end(&mut data)
                    .expect("chunk decompresses");
            }
            (cpu, data)
        })
        .collect()
}

fn parse_all(reader: &TraceReader, pages: &[(u32, Vec<u8>)]) -> u64 {
    let layout = &reader.formats().header_page;
    let ps = reader.meta().page_size as usize;
    let mut n = 0u64;
    for (_, data) in pages {
        for page in data.chunks_exact(ps) {
            for r in parse_page(layout, page).expect("page header") {
                let r = r.expect("record");
                n += u64::from(r.payload.len() > 1);
            }
        }
    }
    n
}

fn convert_all(reader: &TraceReader, pages: &[(u32, Vec<u8>)], out: &mut Vec<Decoded>) -> u64 {
    let layout = &reader.formats().header_page;
    let ps = reader.meta().page_size as usize;
    let mut n = 0u64;
    for (cpu, data) in pages {
        let mut conv = Converter::new(reader.formats()).expect("converter");
        for page in data.chunks_exact(ps) {
            out.clear();
            decode_page(layout, &mut conv, argus_schema::Cpu(*cpu), page, out).expect("page");
            n += out.iter().filter(|d| d.event.is_some()).count() as u64;
        }
    }
    n
}

/// Replays the whole trace; returns the number of events.
fn replay_all(dir: &Path) -> u64 {
    let mut n = 0;
    for e in TraceReader::open(dir).expect("opens").events() {
        e.expect("event");
        n += 1;
    }
    n
}

fn bench(c: &mut Criterion) {
    let Some((dir, _tmp)) = trace() else { return };
    let reader = TraceReader::open(&dir).expect("the trace opens");
    let pages = load_pages(&reader);
    let records = parse_all(&reader, &pages);
    let mut out = Vec::new();
    let events = convert_all(&reader, &pages, &mut out);
    let replayed = replay_all(&dir);
    assert_eq!(replayed, events, "replay and convert agree");
    eprintln!(
        "decode bench: {} ({} pages, {records} records, {events} events)",
        dir.display(),
        pages.iter().map(|p| p.1.len()).sum::<usize>() / reader.meta().page_size as usize
    );

    let mut group = c.benchmark_group("decode");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(records));
    group.bench_function("parse", |b| b.iter(|| parse_all(&reader, &pages)));
    group.throughput(Throughput::Elements(events));
    group.bench_function("convert", |b| {
        b.iter(|| convert_all(&reader, &pages, &mut out))
    });
    group.bench_function("replay", |b| b.iter(|| replay_all(&dir)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
