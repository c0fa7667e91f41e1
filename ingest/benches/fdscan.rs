//! What file identity costs a reader thread: the page scan that picks descriptor-creating
//! syscalls, exec, task creation and exit out of every page (`linux::file_scan_pages`),
//! against the work the reader already does to each page (zstd level 1 compression into
//! frames of 256 pages; the walk to each page's last record, which a lost range starts
//! at) and against bare page parsing, all on one core, in the same run.
//!
//! `cargo bench -p argus-ingest --bench fdscan` records `dd bs=64 count=400000` (about 1.7M
//! events; needs root and tracefs) unless `ARGUS_BENCH_TRACE=DIR` names a trace directory
//! (recorded there when absent, the same trace the `decode` bench uses).

use argus_ingest::linux::{file_scan_pages, RecordConfig, Recorder};
use argus_ingest::page::{last_record_ts, parse_page};
use argus_ingest::replay::TraceReader;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Runs of each measurement; the fastest is reported.
const RUNS: usize = 7;
/// The highest sustained recording rate measured on this machine (M events/s,
/// `docs/trace-dir.md`, "Event sets"), to put the scan's cost in terms of CPU.
const SUSTAINED_RATE: f64 = 2.5;

fn trace() -> Option<(PathBuf, Option<tempfile::TempDir>)> {
    let wanted = std::env::var_os("ARGUS_BENCH_TRACE").map(PathBuf::from);
    if let Some(dir) = &wanted {
        if dir.join("meta.json").is_file() {
            return Some((dir.clone(), None));
        }
    }
    if let Some(why) = argus_ingest::linux::cannot_trace() {
        eprintln!(
            "SKIP fdscan bench: cannot record here ({why}); set ARGUS_BENCH_TRACE to an \
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
    let mut config = RecordConfig::new(&dir);
    config.buffer_size_kb = 65536;
    config.command = Some(
        [
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=64",
            "count=400000",
        ]
        .map(String::from)
        .to_vec(),
    );
    config.duration = Some(Duration::from_secs(60));
    Recorder::new(config)
        .run()
        .expect("recording the bench workload");
    Some((dir, tmp))
}

fn best(mut f: impl FnMut() -> u64) -> (Duration, u64) {
    let mut best = Duration::MAX;
    let mut out = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        out = std::hint::black_box(f());
        best = best.min(t.elapsed());
    }
    (best, out)
}

fn main() {
    let Some((dir, _tmp)) = trace() else { return };
    let reader = TraceReader::open(&dir).expect("the trace opens");
    let page_size = reader.meta().page_size as usize;
    let formats = reader.formats();
    let mut pages = Vec::new();
    for &cpu in &reader.meta().cpus {
        for f in reader.chunk_files(cpu) {
            let file = std::fs::File::open(reader.dir().join(f)).expect("chunk opens");
            zstd::stream::read::Decoder::new(file)
                .expect("zstd")
                .read_to_end(&mut pages)
                .expect("chunk decompresses");
        }
    }
    let n_pages = pages.len() / page_size;

    let (parse, records) = best(|| {
        let mut n = 0u64;
        for page in pages.chunks_exact(page_size) {
            for r in parse_page(&formats.header_page, page).expect("page header") {
                n += u64::from(r.expect("record").id().is_some());
            }
        }
        n
    });
    let (scan, sent) = best(|| file_scan_pages(formats, &pages, page_size));
    // The walk to a page's last record, where a lost range starts: a reader does it to the
    // page before a loss (and to the last page of each frame), so this is its cost were it
    // done to every page: on pages just read (in cache: the first 64 pages, walked as many
    // times as there are pages), and on pages not in cache (each once).
    let walk = |set: &[u8], rounds: usize| {
        best(|| {
            let mut sum = 0u64;
            for _ in 0..rounds {
                for page in set.chunks_exact(page_size) {
                    let ts = last_record_ts(&formats.header_page, std::hint::black_box(page));
                    sum = sum.wrapping_add(ts.unwrap_or(0));
                }
            }
            sum
        })
        .0
    };
    let hot_pages = n_pages.min(64);
    let last = walk(&pages[..hot_pages * page_size], n_pages / hot_pages.max(1));
    let last = last.mul_f64(n_pages as f64 / (hot_pages * (n_pages / hot_pages.max(1))) as f64);
    let cold = walk(&pages, 1);
    let (compress, bytes) = best(|| {
        let mut c = zstd::bulk::Compressor::new(1).expect("zstd");
        let mut out = 0u64;
        for frame in pages.chunks(page_size * 256) {
            out += c.compress(frame).expect("compress").len() as u64;
        }
        out
    });
    let rate = |d: Duration| records as f64 / d.as_secs_f64() / 1e6;
    println!(
        "fdscan: {} ({n_pages} pages, {records} records, {sent} notifications, {:.1} MiB compressed)",
        dir.display(),
        bytes as f64 / (1 << 20) as f64
    );
    println!(
        "  parse    {:>8.2} ms  {:>7.1} M records/s",
        parse.as_secs_f64() * 1e3,
        rate(parse)
    );
    println!(
        "  fdscan   {:>8.2} ms  {:>7.1} M records/s  ({:.2}x parse)",
        scan.as_secs_f64() * 1e3,
        rate(scan),
        scan.as_secs_f64() / parse.as_secs_f64()
    );
    println!(
        "  last ts  {:>8.2} ms  {:>7.1} M records/s  ({:.1}% of compress; {:.2}% of one core \
         at {SUSTAINED_RATE:.1} M events/s; {:.2} ms on pages not in cache)",
        last.as_secs_f64() * 1e3,
        rate(last),
        100.0 * last.as_secs_f64() / compress.as_secs_f64(),
        100.0 * SUSTAINED_RATE / rate(last),
        cold.as_secs_f64() * 1e3
    );
    println!(
        "  compress {:>8.2} ms  {:>7.1} M records/s  (the reader's existing work)",
        compress.as_secs_f64() * 1e3,
        rate(compress)
    );
    println!(
        "  fdscan adds {:.1}% to the reader's per-page work; at {SUSTAINED_RATE:.1} M events/s \
         it uses {:.2}% of one core",
        100.0 * scan.as_secs_f64() / compress.as_secs_f64(),
        100.0 * SUSTAINED_RATE / rate(scan)
    );
}
