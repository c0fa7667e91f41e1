//! Writes the generated seed corpora (`scripts/fuzz seeds`, docs/fuzzing.md):
//!
//! ```text
//! seeds OUT REALTRACES EXTRACTED     OUT/TARGET/NAME, one file per seed
//! ```
//!
//! From `REALTRACES` (`../shared/realtraces`, read in place: nothing of it is copied into the
//! repository) and `EXTRACTED` (its tarballs, unpacked by the script): format files, real
//! ring-buffer pages with their formats, ftrace text and systrace HTML. From the repository:
//! the demo's recording (`demo/chain.bundle.zst`: formats, chunks, `meta.json`,
//! `proc.json`, and a snapshot built from its events) and records laid out the way the unit
//! tests lay them out (perf samples, file-identity lines). Missing `REALTRACES` only leaves
//! its seeds out.
//!
//! It is a libFuzzer binary like the targets (it is built with them, with the same
//! instrumentation): the work happens in its `init` block, which exits before any fuzzing.

#![no_main]

use argus_fuzz::{formats, sections};
use argus_ingest::perffile::{self as pf, StreamInfo, StreamKind, StreamsFile};
use argus_ingest::replay::TraceReader;
use argus_sinks::{write_snapshot, SnapshotData, SnapshotInfo};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The largest seed: libFuzzer's `-max_len` of `scripts/fuzz`.
const MAX_SEED: usize = 60 << 10;
/// Ring-buffer page size of every recording here.
const PAGE: usize = 4096;

struct Out {
    dir: PathBuf,
    written: BTreeSet<(String, u64)>,
    count: usize,
}

impl Out {
    /// Writes one seed (duplicates by content are skipped).
    fn seed(&mut self, target: &str, name: &str, bytes: &[u8]) {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        if !self.written.insert((target.to_string(), h.finish())) {
            return;
        }
        let dir = self.dir.join(target);
        std::fs::create_dir_all(&dir).expect("seed directory");
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        std::fs::write(dir.join(name), bytes).expect("seed file");
        self.count += 1;
    }
}

/// Text cut to at most `MAX_SEED` bytes at a line end.
fn head_lines(text: &[u8]) -> &[u8] {
    if text.len() <= MAX_SEED {
        return text;
    }
    let end = text[..MAX_SEED]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(MAX_SEED, |i| i + 1);
    &text[..end]
}

fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

/// Every file under `dir`, sorted, as paths relative to it.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// A format set on disk: `header_page` text and the `SYS/EVENT\n<text>` entries.
struct FormatDir {
    header_page: Vec<u8>,
    entries: Vec<u8>,
    texts: Vec<(String, Vec<u8>)>,
}

/// Reads `root/header_page` (or `root/events/header_page`) and every `SYS/EVENT/format`
/// under `root` or `root/events`.
fn format_dir(root: &Path) -> Option<FormatDir> {
    let events = if root.join("events").is_dir() {
        root.join("events")
    } else {
        root.to_path_buf()
    };
    let header_page =
        read(&events.join("header_page")).or_else(|| read(&root.join("header_page")))?;
    let mut texts = Vec::new();
    for rel in walk(&events) {
        let parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        if let [sys, ev, f] = parts.as_slice() {
            if f == "format" {
                if let Some(text) = read(&events.join(&rel)) {
                    texts.push((format!("{sys}/{ev}"), text));
                }
            }
        }
    }
    let entries = sections::format_entries(
        texts
            .iter()
            .map(|(p, t)| (p.as_str(), std::str::from_utf8(t).unwrap_or(""))),
    );
    Some(FormatDir {
        header_page,
        entries,
        texts,
    })
}

/// The files of the demo's recording (`argus bundle` layout: zstd of `u32 name length,
/// name, u64 size, bytes` entries).
fn unbundle(bundle: &[u8], dir: &Path) -> Option<()> {
    let raw = zstd::decode_all(bundle).ok()?;
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = raw.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    loop {
        let Some(len) = take(4) else { break };
        let n = u32::from_le_bytes(len.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(n)?).ok()?.to_string();
        let size = u64::from_le_bytes(take(8)?.try_into().ok()?) as usize;
        let bytes = take(size)?.to_vec();
        if name.split('/').any(|c| c == ".." || c.is_empty()) {
            return None;
        }
        let path = dir.join(&name);
        std::fs::create_dir_all(path.parent()?).ok()?;
        std::fs::write(path, bytes).ok()?;
    }
    Some(())
}

fn formats_seeds(out: &mut Out, dirs: &[(&str, PathBuf)]) {
    for (_, text) in formats::EVENTS.iter().map(|(s, n, t)| ((*s, *n), *t)) {
        out.seed(
            "format",
            &format!("argus-{}", text.lines().next().unwrap_or("")),
            text.as_bytes(),
        );
    }
    out.seed(
        "format",
        "argus-header_page",
        formats::HEADER_PAGE.as_bytes(),
    );
    out.seed(
        "format",
        "argus-header_event",
        formats::HEADER_EVENT.as_bytes(),
    );
    for (label, dir) in dirs {
        let Some(f) = format_dir(dir) else { continue };
        out.seed("format", &format!("{label}-header_page"), &f.header_page);
        for (path, text) in f.texts.iter().take(400) {
            out.seed("format", &format!("{label}-{path}"), text);
        }
    }
}

/// `[mode 0][header_page][format entries][pages]` for the `page` target.
fn page_seed(f: &FormatDir, pages: &[u8]) -> Vec<u8> {
    let mut s = vec![0u8];
    s.extend(sections::join(&[&f.header_page, &f.entries, pages]));
    s
}

fn main_seeds(out: &mut Out, realtraces: &Path, extracted: &Path) {
    let perfetto = realtraces.join("raw-ringbuffer/perfetto_formats");
    let synthetic = format_dir(&perfetto.join("synthetic"));
    let synthetic_alt = format_dir(&perfetto.join("synthetic_alt"));
    let schedviz = format_dir(&extracted.join("schedviz/formats"));
    formats_seeds(
        out,
        &[
            ("synthetic", perfetto.join("synthetic")),
            ("synthetic_alt", perfetto.join("synthetic_alt")),
            ("schedviz", extracted.join("schedviz/formats")),
            (
                "android",
                extracted.join("android/android_raven_AOSP.MASTER_5.10.43"),
            ),
        ],
    );

    // Real pages with the formats they were recorded with.
    let pages_dir = realtraces.join("raw-ringbuffer/perfetto_pages");
    for rel in walk(&pages_dir) {
        let name = rel.to_string_lossy().into_owned();
        if !name.ends_with(".page") {
            continue;
        }
        let set = if name.contains("synthetic_alt") {
            &synthetic_alt
        } else {
            &synthetic
        };
        if let (Some(f), Some(page)) = (set, read(&pages_dir.join(&rel))) {
            out.seed("page", &name, &page_seed(f, &page));
        }
    }
    if let Some(f) = &schedviz {
        for (name, path) in [
            (
                "schedviz-cpu0",
                realtraces.join("raw-ringbuffer/schedviz/traceparser_input_cpu0"),
            ),
            ("schedviz-tar-cpu0", extracted.join("schedviz/traces/cpu0")),
        ] {
            if let Some(bytes) = read(&path) {
                for (i, pages) in bytes.chunks(4 * PAGE).take(4).enumerate() {
                    out.seed("page", &format!("{name}-{i}"), &page_seed(f, pages));
                }
            }
        }
    }

    // Text traces: the head of each file; HTML pages as they are (cut) and as the two
    // systrace forms wrapping a text trace.
    let text_dir = realtraces.join("ftrace-text");
    for rel in walk(&text_dir) {
        let name = rel.to_string_lossy().into_owned();
        let Some(bytes) = read(&text_dir.join(&rel)) else {
            continue;
        };
        let head = head_lines(&bytes);
        if name.ends_with(".html") {
            out.seed("import_html", &name, head);
            out.seed("import_text", &name, head);
            continue;
        }
        out.seed("import_text", &name, head);
        let small = head_lines(&head[..head.len().min(8 << 10)]);
        let mut script =
            b"<html><script class=\"trace-data\" type=\"application/text\">\n".to_vec();
        script.extend_from_slice(small);
        script.extend_from_slice(
            b"</script>\n<script class=\"trace-data\">{\"traceEvents\": []}</script></html>\n",
        );
        out.seed("import_html", &format!("script-{name}"), &script);
        let mut js = b"<html><script>\nvar linuxPerfData = \"\\\n".to_vec();
        for line in small.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            for &b in line {
                match b {
                    b'"' => js.extend_from_slice(b"\\\""),
                    b'\\' => js.extend_from_slice(b"\\\\"),
                    _ => js.push(b),
                }
            }
            js.extend_from_slice(b"\\n\\\n");
        }
        js.extend_from_slice(b"\";\n</script></html>\n");
        out.seed("import_html", &format!("js-{name}"), &js);
    }
}

/// Seeds from the demo's recording and from records laid out as the unit tests do.
fn repo_seeds(out: &mut Out, repo: &Path, scratch: &Path) {
    let trace = scratch.join("chain");
    let bundle = read(&repo.join("demo/chain.bundle.zst")).expect("demo/chain.bundle.zst");
    unbundle(&bundle, &trace).expect("the demo bundle unpacks");
    let chain = format_dir(&trace.join("formats")).expect("the demo's formats");

    // Pages and chunks: the first pages of each CPU, recompressed in two frames.
    for cpu in [0, 1] {
        let chunk = read(&trace.join(format!("cpu{cpu}/000000.chunk.zst"))).expect("chunk");
        let raw = zstd::decode_all(&chunk[..]).expect("the demo's chunk decompresses");
        for (i, pages) in raw.chunks(4 * PAGE).take(3).enumerate() {
            out.seed(
                "page",
                &format!("chain-cpu{cpu}-{i}"),
                &page_seed(&chain, pages),
            );
            let mut built = vec![1u8];
            built.extend_from_slice(&pages[..PAGE]);
            out.seed("page", &format!("chain-cpu{cpu}-{i}-as-spec"), &built);
        }
    }
    let mut frames = Vec::new();
    for cpu in [0, 1] {
        let chunk = read(&trace.join(format!("cpu{cpu}/000000.chunk.zst"))).expect("chunk");
        let raw = zstd::decode_all(&chunk[..]).expect("chunk");
        let pages = &raw[..raw.len().min(8 * PAGE)];
        let (a, b) = pages.split_at(pages.len() / 2 / PAGE * PAGE);
        let mut file = zstd::bulk::compress(a, 1).expect("compress");
        file.extend(zstd::bulk::compress(b, 1).expect("compress"));
        frames.push(file);
    }
    for (mode, name) in [(0u8, "complete"), (2, "recording")] {
        let mut s = vec![mode];
        s.extend(sections::join(&[&chain.entries, &frames[0], &frames[1]]));
        out.seed("chunks", &format!("chain-{name}"), &s);
        let cut = &frames[1][..frames[1].len() - 7];
        let mut s = vec![mode];
        s.extend(sections::join(&[&chain.entries, &frames[0], cut]));
        out.seed("chunks", &format!("chain-{name}-torn"), &s);
        let mut s = vec![mode];
        s.extend(sections::join(&[b"", &frames[0], &frames[1]]));
        out.seed("chunks", &format!("chain-{name}-argus-formats"), &s);
    }

    // meta.json, proc.json, a few kallsyms lines.
    let meta = read(&trace.join("meta.json")).expect("meta.json");
    let procs = read(&trace.join("proc.json")).unwrap_or_default();
    let kallsyms = b"ffffffff81000000 T _stext\nffffffff81001000 t hrtimer_wakeup\n\
ffffffff81002000 T tick_nohz_handler\nffffffff81003000 W weak_fn\n0000000000000000 T hidden\n\
ffffffffc0000000 t mod_fn\t[mod]\n";
    out.seed(
        "meta",
        "chain",
        &sections::join(&[&meta, &procs, kallsyms, b""]),
    );
    out.seed(
        "meta",
        "chain-no-proc",
        &sections::join(&[&meta, b"", b"", b""]),
    );
    let ring = String::from_utf8_lossy(&meta).replacen(
        "\"format\"",
        "\"ring\": {\"size\": 1048576, \"chunk_pages\": 16, \"dropped\": {\"0\": {\"chunks\": 1, \
         \"from_ns\": 5, \"until_ns\": 9}}}, \"lost_ranges\": {\"1\": [{\"from_ns\": 1, \"to_ns\": 2, \
         \"events\": 3}]}, \"tap_dropped\": {\"0\": 4}, \"format\"",
        1,
    );
    out.seed(
        "meta",
        "chain-ring",
        &sections::join(&[ring.as_bytes(), &procs, b"", b""]),
    );

    // perf: streams and samples as `perffile`'s tests lay them out.
    let streams = StreamsFile {
        version: pf::PERF_FORMAT_VERSION,
        streams: vec![
            StreamInfo {
                id: 3,
                sample_type: pf::SAMPLE_TID
                    | pf::SAMPLE_TIME
                    | pf::SAMPLE_CPU
                    | pf::SAMPLE_CALLCHAIN
                    | pf::SAMPLE_REGS_USER
                    | pf::SAMPLE_STACK_USER,
                regs_user: pf::REGS_USER_MASK,
                kind: StreamKind::Stacks {
                    cpu: 0,
                    syscalls: vec![0, 202],
                },
            },
            StreamInfo {
                id: 4,
                sample_type: pf::SAMPLE_TID
                    | pf::SAMPLE_TIME
                    | pf::SAMPLE_RAW
                    | pf::SAMPLE_CALLCHAIN,
                regs_user: 0,
                kind: StreamKind::Sched {
                    cpu: 0,
                    switch_type: 372,
                    waking_type: 375,
                    waking_pid_offset: 24,
                },
            },
            StreamInfo {
                id: 5,
                sample_type: pf::SAMPLE_IP
                    | pf::SAMPLE_TID
                    | pf::SAMPLE_TIME
                    | pf::SAMPLE_ADDR
                    | pf::SAMPLE_CPU,
                regs_user: 0,
                kind: StreamKind::Watch {
                    spec: "42:0x1000".into(),
                    pid: 42,
                    tid: 42,
                    cpu: 0,
                    addr: 0x1000,
                    len: 8,
                    access: "rw".into(),
                },
            },
            StreamInfo {
                id: 6,
                sample_type: pf::SAMPLE_TID | pf::SAMPLE_TIME | pf::SAMPLE_CALLCHAIN,
                regs_user: 0,
                kind: StreamKind::Profile { cpu: 0, hz: 99 },
            },
        ],
    };
    let json = serde_json::to_vec(&streams).expect("streams");
    let p64 = |b: &mut Vec<u8>, v: u64| b.extend_from_slice(&v.to_le_bytes());
    let p32 = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
    let record = |stream: u32, kind: u32, body: &[u8]| {
        let mut r = stream.to_le_bytes().to_vec();
        r.extend_from_slice(&kind.to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&((body.len() + 8) as u16).to_le_bytes());
        r.extend_from_slice(body);
        r
    };
    let mut stacks = Vec::new();
    p32(&mut stacks, 100);
    p32(&mut stacks, 101);
    p64(&mut stacks, 5_000);
    p32(&mut stacks, 1);
    p32(&mut stacks, 0);
    p64(&mut stacks, 5);
    for ip in [
        -128i64 as u64,
        0xffff_ffff_8100_0010,
        -512i64 as u64,
        0x5555_0001,
        0x5555_0002,
    ] {
        p64(&mut stacks, ip);
    }
    for v in [2u64, 0x7ff0, 0x7f00, 0x5555_0001, 16] {
        p64(&mut stacks, v);
    }
    stacks.extend_from_slice(&[7u8; 16]);
    p64(&mut stacks, 8);
    let mut sched = Vec::new();
    p32(&mut sched, 100);
    p32(&mut sched, 101);
    p64(&mut sched, 6_000);
    p64(&mut sched, 1);
    p64(&mut sched, 0xffff_ffff_8100_0020);
    let mut raw = vec![0u8; 40];
    raw[..2].copy_from_slice(&375u16.to_le_bytes());
    raw[24..28].copy_from_slice(&77i32.to_le_bytes());
    p32(&mut sched, raw.len() as u32);
    sched.extend_from_slice(&raw);
    let mut watch = Vec::new();
    p64(&mut watch, 0x4000_1234);
    p32(&mut watch, 42);
    p32(&mut watch, 42);
    p64(&mut watch, 7_000);
    p64(&mut watch, 0x1000);
    p32(&mut watch, 0);
    p32(&mut watch, 0);
    let mut lost = Vec::new();
    p64(&mut lost, 3);
    p64(&mut lost, 17);
    let mut chunk = record(3, pf::RECORD_SAMPLE, &stacks);
    chunk.extend(record(4, pf::RECORD_SAMPLE, &sched));
    chunk.extend(record(5, pf::RECORD_SAMPLE, &watch));
    chunk.extend(record(3, pf::RECORD_LOST, &lost));
    out.seed(
        "perf",
        "samples",
        &[&[0u8][..], &sections::join(&[&json, &chunk, b""])].concat(),
    );
    out.seed(
        "perf",
        "stacks-only",
        &[
            &[0u8][..],
            &sections::join(&[&json, &record(3, pf::RECORD_SAMPLE, &stacks), b""]),
        ]
        .concat(),
    );

    // File identity: every line type, as the recorder writes them.
    let lines = concat!(
        "{\"type\":\"snapshot\",\"seq\":0,\"ts\":100}\n",
        "{\"type\":\"fd\",\"ts\":100,\"pid\":42,\"fd\":3,\"kind\":\"pipe\",\"ino\":7001,\"target\":\"pipe:[7001]\",\"src\":\"start\"}\n",
        "{\"type\":\"fd\",\"ts\":100,\"pid\":42,\"fd\":4,\"kind\":\"socket\",\"ino\":7002,\"peer\":7003,\"target\":\"socket:[7002]\",\"src\":\"start\"}\n",
        "{\"type\":\"fd\",\"ts\":150,\"pid\":43,\"fd\":5,\"kind\":\"socket\",\"ino\":7003,\"target\":\"socket:[7003]\",\"src\":\"scan\"}\n",
        "{\"type\":\"fd\",\"ts\":200,\"pid\":42,\"fd\":6,\"kind\":\"regular\",\"ino\":99,\"target\":\"/etc/passwd\",\"src\":\"syscall\"}\n",
        "{\"type\":\"fd\",\"ts\":210,\"pid\":42,\"fd\":7,\"kind\":\"anon\",\"ino\":12,\"target\":\"anon_inode:[eventfd]\",\"src\":\"syscall\"}\n",
        "{\"type\":\"unknown\",\"ts\":300,\"pid\":42,\"fd\":6}\n",
        "{\"type\":\"fork\",\"ts\":400,\"parent\":42,\"child\":44}\n",
        "{\"type\":\"lost\",\"ts\":500,\"messages\":2}\n",
        "{\"type\":\"future_line\",\"ts\":600}\n",
        "\n",
    );
    let second = zstd::bulk::compress(
        b"{\"type\":\"snapshot\",\"seq\":1,\"ts\":700}\n{\"type\":\"fd\",\"ts\":700,\"pid\":42,\"fd\":3,\"kind\":\"pipe\",\"ino\":7001,\"target\":\"pipe:[7001]\",\"src\":\"snapshot\"}\n",
        1,
    )
    .expect("compress");
    for (mode, name) in [(0u8, "complete"), (2, "recording")] {
        out.seed(
            "files",
            &format!("lines-{name}"),
            &[&[mode][..], &sections::join(&[lines.as_bytes(), &second])].concat(),
        );
        out.seed(
            "files",
            &format!("lines-{name}-torn"),
            &[
                &[mode][..],
                &sections::join(&[lines.as_bytes(), &second[..second.len() - 3]]),
            ]
            .concat(),
        );
    }

    // A snapshot of the demo's first events and its threads.
    if let Ok(reader) = TraceReader::open(&trace) {
        let mut events = reader.events();
        let evs: Vec<_> = events.by_ref().filter_map(Result::ok).take(200).collect();
        let summary = events.finish();
        let snap_dir = scratch.join("snapshot");
        let data = SnapshotData {
            info: SnapshotInfo::default(),
            events: evs,
            segments: Vec::new(),
            edges: Vec::new(),
            spins: Vec::new(),
            threads: summary.threads.into_iter().take(50).collect(),
            errors: Vec::new(),
        };
        if write_snapshot(&snap_dir, &data).is_ok() {
            let files = [
                "manifest.json",
                "events.parquet",
                "segments.parquet",
                "edges.parquet",
                "spins.parquet",
                "threads.parquet",
                "errors.parquet",
                "stacks.parquet",
            ];
            let parts: Vec<Vec<u8>> = files
                .iter()
                .map(|f| read(&snap_dir.join(f)).unwrap_or_default())
                .collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            out.seed("snapshot", "chain-200-events", &sections::join(&refs));
            let mut no_events = refs.clone();
            no_events[1] = b"";
            out.seed("snapshot", "chain-no-events", &sections::join(&no_events));
        }
    }
}

/// Writes every seed and exits the process (before libFuzzer would start fuzzing).
fn generate() {
    let Some(out_dir) = std::env::var_os("ARGUS_FUZZ_SEEDS_OUT").map(PathBuf::from) else {
        eprintln!("seeds: set ARGUS_FUZZ_SEEDS_OUT, ARGUS_FUZZ_REPO and ARGUS_FUZZ_EXTRACTED (scripts/fuzz seeds)");
        std::process::exit(2);
    };
    let repo = PathBuf::from(std::env::var_os("ARGUS_FUZZ_REPO").unwrap_or_default());
    let realtraces = repo.join("../shared/realtraces");
    let extracted = PathBuf::from(std::env::var_os("ARGUS_FUZZ_EXTRACTED").unwrap_or_default());
    let scratch = out_dir.join(".scratch");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&scratch).expect("seed directory");
    let mut out = Out {
        dir: out_dir.clone(),
        written: BTreeSet::new(),
        count: 0,
    };
    repo_seeds(&mut out, &repo, &scratch);
    if realtraces.is_dir() {
        main_seeds(&mut out, &realtraces, &extracted);
    } else {
        eprintln!(
            "seeds: {} missing: only the repository's seeds",
            realtraces.display()
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    eprintln!("seeds: {} seeds in {}", out.count, out_dir.display());
    std::process::exit(0);
}

libfuzzer_sys::fuzz_target!(init: generate(), |_data: &[u8]| {});
