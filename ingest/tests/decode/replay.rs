//! Replay of hand-built trace directories: the good path, bad input (exact error text) and
//! throughput.

use crate::common::*;
use argus_ingest::merge::Batches;
use argus_ingest::replay::TraceReader;
use argus_ingest::tracedir::{self, ProcEntry, TraceMeta};
use argus_ingest::IngestError;
use argus_schema::{Event, EventKind, Pid, TaskState, Tid};
use std::collections::BTreeMap;
use std::path::Path;

const PAGE: usize = 4096;

/// The synthetic_alt format set (sched_switch 317, sched_waking 320) and its sched page.
struct Material {
    formats: std::path::PathBuf,
    sched_page: Vec<u8>,
}

fn material() -> Option<Material> {
    let rt = realtraces()?;
    Some(Material {
        formats: rt.join("raw-ringbuffer/perfetto_formats/synthetic_alt/events"),
        sched_page: std::fs::read(
            rt.join("raw-ringbuffer/perfetto_pages/unittest_g_sched_page.synthetic_alt.page"),
        )
        .unwrap(),
    })
}

fn meta(cpus: &[u32], chunks: BTreeMap<u32, u32>) -> TraceMeta {
    TraceMeta {
        status: "complete".into(),
        page_size: PAGE as u32,
        cpus: cpus.to_vec(),
        kernel: "test".into(),
        machine: "x86_64".into(),
        hostname: "test".into(),
        events: vec!["sched/sched_switch".into(), "sched/sched_waking".into()],
        recorder_pid: 1,
        lost: cpus.iter().map(|&c| (c, 0)).collect(),
        chunks,
        ..TraceMeta::recording("mono")
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

/// Writes a trace directory: `chunks[cpu]` is the list of chunks, each a byte string of
/// (normally) whole pages.
fn build(dir: &Path, m: &Material, chunks: &[(u32, Vec<Vec<u8>>)]) {
    let fdir = tracedir::formats_dir(dir);
    copy(&m.formats.join("header_page"), &fdir.join("header_page"));
    copy(&m.formats.join("header_event"), &fdir.join("header_event"));
    for ev in ["sched/sched_switch", "sched/sched_waking"] {
        copy(
            &m.formats.join(ev).join("format"),
            &fdir.join("events").join(ev).join("format"),
        );
    }
    let cpus: Vec<u32> = chunks.iter().map(|c| c.0).collect();
    let counts = chunks.iter().map(|(c, v)| (*c, v.len() as u32)).collect();
    std::fs::write(
        tracedir::meta_path(dir),
        serde_json::to_vec_pretty(&meta(&cpus, counts)).unwrap(),
    )
    .unwrap();
    let procs = vec![ProcEntry {
        tid: 217958,
        pid: 217958,
        ppid: 1,
        comm: "bash".into(),
        kernel: false,
    }];
    std::fs::write(
        tracedir::proc_path(dir),
        serde_json::to_vec(&procs).unwrap(),
    )
    .unwrap();
    for (cpu, list) in chunks {
        std::fs::create_dir_all(tracedir::cpu_dir(dir, *cpu)).unwrap();
        for (i, content) in list.iter().enumerate() {
            let z = zstd::bulk::compress(content, 3).unwrap();
            std::fs::write(tracedir::chunk_path(dir, *cpu, i as u32), z).unwrap();
        }
    }
}

/// A page with no records (commit 0) at time `ts`.
fn empty_page(ts: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    p[..8].copy_from_slice(&ts.to_le_bytes());
    p
}

fn run(dir: &Path) -> (Vec<Event>, Vec<String>, argus_ingest::replay::ReplaySummary) {
    let mut events = TraceReader::open(dir).unwrap().events();
    let mut ok = Vec::new();
    let mut errs = Vec::new();
    for r in &mut events {
        match r {
            Ok(e) => ok.push(e),
            Err(e) => {
                assert!(e.is_recoverable(), "{e}");
                errs.push(e.to_string());
            }
        }
    }
    (ok, errs, events.finish())
}

#[test]
fn replays_a_trace_directory() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // cpu1 holds an empty page that sorts between the records of cpu0.
    build(
        tmp.path(),
        &m,
        &[
            (0, vec![m.sched_page.clone()]),
            (1, vec![empty_page(701_500_115_000_000)]),
        ],
    );
    let (events, errs, summary) = run(tmp.path());
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(events.len(), 7);
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    assert!(events.windows(2).all(|w| w[0].ts <= w[1].ts));
    assert_eq!(
        events[0].kind,
        EventKind::Switch {
            prev: Tid(0),
            prev_state: TaskState::RUNNABLE,
            next: Tid(219057)
        }
    );
    assert_eq!(
        events[1].kind,
        EventKind::Waking {
            target: Tid(203967)
        }
    );
    assert_eq!(
        events[6].kind,
        EventKind::Switch {
            prev: Tid(219057),
            prev_state: TaskState(b'Z'),
            next: Tid(0)
        }
    );
    assert_eq!(events[6].pid, Pid(219057));
    let t = |tid| summary.threads.iter().find(|t| t.tid == Tid(tid)).unwrap();
    // Named by the switch records: `bash` switched in, `ls` (after its exec) switched out.
    assert_eq!(t(219057).comm, "ls");
    assert_eq!(t(203967).comm, "kworker/u16:17");
    assert_eq!(t(217958).comm, "bash");
    assert_eq!(summary.cpus[&0].pages, 1);
    assert_eq!(summary.cpus[&1].pages, 1);
    assert_eq!(summary.cpus[&0].records, 7);
    assert_eq!(summary.events, 7);
    assert_eq!(summary.lost(), BTreeMap::from([(0, 0), (1, 0)]));

    // Batching the same stream.
    let mut events = TraceReader::open(tmp.path()).unwrap().events();
    let batches: Vec<_> = Batches::new(&mut events, 3).map(|b| b.unwrap()).collect();
    assert_eq!(
        batches.iter().map(|b| b.events.len()).collect::<Vec<_>>(),
        vec![3, 3, 1]
    );
    assert_eq!(batches[0].watermark, batches[0].events[2].ts);
}

fn only_error(dir: &Path) -> String {
    let (events, errs, _) = run(dir);
    assert_eq!(errs.len(), 1, "{errs:?}");
    // The good page before the damage still decodes.
    assert_eq!(events.len(), 7);
    errs.into_iter().next().unwrap()
}

#[test]
fn truncated_chunk() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path(), &m, &[(0, vec![m.sched_page.clone()])]);
    // A second chunk of 40 empty pages (two zstd blocks of at most 128 KiB), cut inside its
    // last block: the first block's 32 pages decode, then the stream ends early.
    let mut content = Vec::new();
    for i in 0..40u64 {
        content.extend(empty_page(701_500_200_000_000 + i));
    }
    let z = zstd::bulk::compress(&content, 3).unwrap();
    let path = tracedir::chunk_path(tmp.path(), 0, 1);
    std::fs::write(&path, &z[..z.len() - 4]).unwrap();
    assert_eq!(
        only_error(tmp.path()),
        "cpu0/000001.chunk.zst: truncated zstd stream after 131072 decompressed bytes"
    );
}

#[test]
fn corrupt_page_commit() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // Page 2 holds a type_len-0 record of 4000 bytes in a commit of 120.
    let mut bad = empty_page(701_500_200_000_000);
    bad[8..16].copy_from_slice(&120u64.to_le_bytes());
    bad[16..20].copy_from_slice(&0u32.to_le_bytes());
    bad[20..24].copy_from_slice(&3996u32.to_le_bytes());
    let mut chunk = m.sched_page.clone();
    chunk.extend(empty_page(701_500_150_000_000));
    chunk.extend(&bad);
    build(tmp.path(), &m, &[(0, vec![chunk.clone()])]);
    assert_eq!(
        only_error(tmp.path()),
        "cpu0/000000.chunk.zst: offset 8208 (page 2): record length 4000 runs past commit 120"
    );
    // A commit beyond the page.
    let n = chunk.len();
    chunk[n - PAGE + 8..n - PAGE + 16].copy_from_slice(&5000u64.to_le_bytes());
    build(tmp.path(), &m, &[(0, vec![chunk])]);
    assert_eq!(
        only_error(tmp.path()),
        "cpu0/000000.chunk.zst: offset 8200 (page 2): commit 5000 larger than the page data area of 4080 bytes"
    );
}

#[test]
fn missing_format_file() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path(), &m, &[(0, vec![m.sched_page.clone()])]);
    std::fs::remove_file(tmp.path().join("formats/events/sched/sched_waking/format")).unwrap();
    let err = TraceReader::open(tmp.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "formats/events/sched/sched_waking/format: not found (the trace directory is incomplete; re-record)"
    );
    std::fs::remove_file(tmp.path().join("formats/header_page")).unwrap();
    assert_eq!(
        TraceReader::open(tmp.path()).unwrap_err().to_string(),
        "formats/header_page: not found (the trace directory is incomplete; re-record)"
    );
}

#[test]
fn other_bad_directories() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // Not a whole number of pages.
    let mut chunk = m.sched_page.clone();
    chunk.extend([0u8; 100]);
    build(tmp.path(), &m, &[(0, vec![chunk])]);
    assert_eq!(
        only_error(tmp.path()),
        "cpu0/000000.chunk.zst: decompressed size 4196 is not a multiple of the page size 4096"
    );
    // Time going backwards: the same page twice.
    let mut chunk = m.sched_page.clone();
    chunk.extend(&m.sched_page);
    build(tmp.path(), &m, &[(0, vec![chunk])]);
    assert_eq!(
        only_error(tmp.path()),
        "cpu0/000000.chunk.zst: offset 4120: cpu0 time goes backwards \
         (701500.111507047 after 701500.115817421)"
    );
    // A chunk listed in meta.json but absent.
    build(
        tmp.path(),
        &m,
        &[(0, vec![m.sched_page.clone(), m.sched_page.clone()])],
    );
    std::fs::remove_file(tracedir::chunk_path(tmp.path(), 0, 1)).unwrap();
    assert_eq!(
        TraceReader::open(tmp.path()).unwrap_err().to_string(),
        "cpu0/000001.chunk.zst: not found (the trace directory is incomplete; re-record)"
    );
    // No meta.json.
    std::fs::remove_file(tracedir::meta_path(tmp.path())).unwrap();
    assert_eq!(
        TraceReader::open(tmp.path()).unwrap_err().to_string(),
        "meta.json: not found (the trace directory is incomplete; re-record)"
    );
    // Not a directory at all.
    let err = TraceReader::open(&tmp.path().join("nope")).unwrap_err();
    assert!(matches!(err, IngestError::NotADirectory { .. }), "{err}");
    // A foreign meta.json.
    std::fs::write(
        tracedir::meta_path(tmp.path()),
        serde_json::to_vec(&TraceMeta {
            version: 99,
            ..meta(&[0], BTreeMap::new())
        })
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        TraceReader::open(tmp.path()).unwrap_err().to_string(),
        "meta.json: unsupported trace format \"argus-trace\" version 99 \
         (this build reads \"argus-trace\" version 1)"
    );
}

/// Fills pages with copies of the sched page's records (2 switches, 5 wakings), advancing
/// time, until `n` records are written; splits them over `cpus` CPUs, `pages_per_chunk` pages
/// per chunk.
fn synthetic_chunks(
    m: &Material,
    n: usize,
    cpus: u32,
    pages_per_chunk: usize,
) -> Vec<(u32, Vec<Vec<u8>>)> {
    // The sched page's records: (header word, payload) with type_len != 0.
    let commit = u64::from_le_bytes(m.sched_page[8..16].try_into().unwrap()) as usize;
    let mut recs: Vec<&[u8]> = Vec::new();
    let mut at = 16;
    while at < 16 + commit {
        let w = u32::from_le_bytes(m.sched_page[at..at + 4].try_into().unwrap());
        match w & 0x1f {
            // The page starts with a time extend.
            30 | 31 => at += 8,
            t @ 1..=28 => {
                let len = 4 + 4 * t as usize;
                recs.push(&m.sched_page[at + 4..at + len]);
                at += len;
            }
            t => panic!("unexpected type_len {t}"),
        }
    }
    let mut out: Vec<(u32, Vec<Vec<u8>>)> = (0..cpus).map(|c| (c, vec![Vec::new()])).collect();
    let mut written = 0;
    let mut ts = 1_000_000u64;
    let mut cpu = 0usize;
    while written < n {
        let mut page = vec![0u8; PAGE];
        page[..8].copy_from_slice(&ts.to_le_bytes());
        let mut pos = 16;
        let mut i = 0;
        while written < n {
            let p = recs[i % recs.len()];
            if pos + 4 + p.len() > PAGE {
                break;
            }
            let type_len = (p.len() / 4) as u32;
            page[pos..pos + 4].copy_from_slice(&(type_len | 100 << 5).to_le_bytes());
            page[pos + 4..pos + 4 + p.len()].copy_from_slice(p);
            pos += 4 + p.len();
            ts += 100;
            i += 1;
            written += 1;
        }
        page[8..16].copy_from_slice(&((pos - 16) as u64).to_le_bytes());
        let chunks = &mut out[cpu].1;
        if chunks.last().unwrap().len() >= pages_per_chunk * PAGE {
            chunks.push(Vec::new());
        }
        chunks.last_mut().unwrap().extend(page);
        cpu = (cpu + 1) % cpus as usize;
        // The next page of this CPU starts after the records of the others' pages.
        ts += 1;
    }
    out
}

#[test]
fn replays_a_million_events_quickly() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let n = 1_000_000;
    build(tmp.path(), &m, &synthetic_chunks(&m, n, 2, 256));
    let start = std::time::Instant::now();
    let mut events = TraceReader::open(tmp.path()).unwrap().events();
    let mut count = 0u64;
    let mut last = (argus_schema::Nanos(0), 0u64);
    for e in &mut events {
        let e = e.unwrap();
        assert!(e.ts >= last.0 && (count == 0 || e.seq == last.1 + 1));
        last = (e.ts, e.seq);
        count += 1;
    }
    let elapsed = start.elapsed();
    let summary = events.finish();
    assert_eq!(count, n as u64);
    assert_eq!(summary.events, n as u64);
    println!(
        "replayed {n} events in {elapsed:?} ({:.1} M events/s)",
        n as f64 / elapsed.as_secs_f64() / 1e6
    );
    if !cfg!(debug_assertions) {
        assert!(elapsed.as_secs_f64() < 1.0, "{elapsed:?}");
    }
}

#[test]
fn format_without_a_needed_field() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path(), &m, &[(0, vec![m.sched_page.clone()])]);
    let path = tmp.path().join("formats/events/sched/sched_waking/format");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("pid_t pid;", "pid_t tid;")).unwrap();
    assert_eq!(
        TraceReader::open(tmp.path()).unwrap_err().to_string(),
        "formats/events/sched/sched_waking/format: event sched_waking has no field pid"
    );
    std::fs::write(&path, "name: sched_waking\nID: x\n").unwrap();
    assert_eq!(
        TraceReader::open(tmp.path()).unwrap_err().to_string(),
        "formats/events/sched/sched_waking/format: no valid `ID:` line"
    );
}

/// Pages whose stored lost-events counts add up past `u64::MAX` (found by the `perf` fuzz
/// target, which replays the trace it builds): the per-CPU count saturates.
// See: issue 18 (fuzzing), docs/fuzzing.md.
#[test]
fn gh_18_page_lost_counts_saturate() {
    let Some(m) = material() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut chunk = m.sched_page.clone();
    for i in 0..3u64 {
        let lost =
            argus_ingest::page::encode_page(PAGE, 701_500_200_000_000 + i, &[], Some(u64::MAX))
                .expect("an empty page fits");
        chunk.extend(lost);
    }
    build(tmp.path(), &m, &[(0, vec![chunk])]);
    let (events, errs, summary) = run(tmp.path());
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(events.len(), 7);
    assert_eq!(summary.cpus[&0].lost, u64::MAX);
    assert_eq!(summary.cpus[&0].pages, 4);
}
