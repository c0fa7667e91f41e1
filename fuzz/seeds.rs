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

use argus_fuzz::writers::{perf_data, proto, Dat, PerfRecord};
use argus_fuzz::{formats, sections};
use argus_ingest::format::{EventFormat, FormatSet, HeaderPage};
use argus_ingest::import::{self, TraceDat};
use argus_ingest::page::parse_page;
use argus_ingest::perffile::{self as pf, StreamInfo, StreamKind, StreamsFile};
use argus_ingest::replay::TraceReader;
use argus_sinks::{write_snapshot, SnapshotData, SnapshotInfo};
use std::collections::{BTreeMap, BTreeSet};
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
    importer_seeds(out, &trace, &chain, scratch);

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

    kdebug_seeds(out, &trace, scratch);

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
            let parts: Vec<Vec<u8>> = argus_fuzz::sections::SNAPSHOT_FILES
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

/// A seed of an importer target must be a valid file: importing it gives events (when
/// `events`) and no errors. A writer that produces anything else fails `scripts/fuzz seeds`
/// loudly.
fn check_import(scratch: &Path, target: &str, name: &str, bytes: &[u8], events: bool) {
    let path = scratch.join(format!("check-{target}-{name}"));
    std::fs::write(&path, bytes).expect("scratch file");
    let fail = |why: String| -> ! {
        eprintln!(
            "seeds: INVALID seed {target}/{name} ({} bytes): {why}",
            bytes.len()
        );
        std::process::exit(1);
    };
    let imported = match import::open(&path) {
        Ok(i) => i,
        Err(e) => fail(format!("import failed: {e}")),
    };
    let _ = std::fs::remove_file(&path);
    if let Some(e) = imported.errors().first() {
        fail(format!(
            "{} errors, the first: {e}",
            imported.errors().len()
        ));
    }
    if events && imported.event_slice().is_empty() {
        fail(format!("no events ({:?})", imported.summary()));
    }
}

/// The `import_kdebug` seeds: the demo's first events translated into the kdebug events xnu
/// records for them (`argus_testkit::kdebug`), as `RAW_VERSION1`, `RAW_VERSION2` and V3 files
/// (both V3 layouts).
fn kdebug_seeds(out: &mut Out, trace: &Path, scratch: &Path) {
    use argus_ingest::import::kdebug::KdVersion;
    let reader = TraceReader::open(trace).expect("the demo trace opens");
    let mut events = reader.events();
    let evs: Vec<_> = events.by_ref().filter_map(Result::ok).take(500).collect();
    let threads = events.finish().threads;
    let kd = argus_testkit::kdebug::from_linux(&evs, &threads);
    for (name, version) in [
        ("chain-v1.trace", KdVersion::V1),
        ("chain-v2.trace", KdVersion::V2),
        ("chain-v3.ktrace", KdVersion::V3),
    ] {
        import_seed(out, scratch, "import_kdebug", name, &kd.write(version));
    }
    import_seed(
        out,
        scratch,
        "import_kdebug",
        "chain-v3-stream.ktrace",
        &kd.write_stream(),
    );
    // Turnstile owners (a chain through a second turnstile, a release) and libdispatch work
    // items, between two of the demo's threads.
    use argus_ingest::import::kdebug::{codes, KdEvent};
    let tids: Vec<u64> = kd.threads.iter().map(|t| t.tid).take(2).collect();
    if let [a, b] = tids[..] {
        let start = kd.events.first().map_or(0, |e| e.timestamp);
        let (t1, t2, item) = (0xffff_ff80_0000_1000u64, 0xffff_ff80_0000_2000, 0x6000_0040);
        let records = [
            (a, codes::TURNSTILE_THREAD_ADDED_TO_WAITQ, [t1, a, 31, 0]),
            (a, codes::TURNSTILE_ADDED_TO_THREAD_HEAP, [b, t1, 31, 0]),
            (b, codes::TURNSTILE_THREAD_ADDED_TO_WAITQ, [t2, b, 31, 0]),
            (b, codes::TURNSTILE_ADDED_TO_TURNSTILE_HEAP, [t1, t2, 31, 0]),
            (b, codes::TURNSTILE_REMOVED_FROM_THREAD_HEAP, [b, t1, 0, 0]),
            (a, codes::DISPATCH_PUSH_F, [item, 0x1_0000_3f00, 7 << 32, 0]),
            (b, codes::DISPATCH_POP, [item, 0, 7, 0]),
            (b, codes::DISPATCH_COMPLETE, [item, 0, 0, 0]),
        ];
        let mut locks = kd.clone();
        locks.events = records
            .iter()
            .enumerate()
            .map(|(i, &(tid, debugid, args))| KdEvent {
                offset: 0,
                timestamp: start + i as u64 * 1_000,
                args,
                tid,
                debugid,
                cpu: 0,
            })
            .collect();
        import_seed(
            out,
            scratch,
            "import_kdebug",
            "locks-dispatch-v2.trace",
            &locks.write(KdVersion::V2),
        );
    }
}

/// Writes an importer seed after [`check_import`] (which asks for events).
fn import_seed(out: &mut Out, scratch: &Path, target: &str, name: &str, bytes: &[u8]) {
    import_seed_of(out, scratch, target, name, bytes, true);
}

/// Writes an importer seed after [`check_import`].
fn import_seed_of(
    out: &mut Out,
    scratch: &Path,
    target: &str,
    name: &str,
    bytes: &[u8],
    events: bool,
) {
    if bytes.len() > MAX_SEED {
        eprintln!(
            "seeds: INVALID seed {target}/{name}: {} bytes, more than {MAX_SEED}",
            bytes.len()
        );
        std::process::exit(1);
    }
    check_import(scratch, target, name, bytes, events);
    out.seed(target, name, bytes);
}

/// `(ts, cpu, payload)` of every record of `pages` (whole pages of `page_size`).
fn page_records(
    layout: &HeaderPage,
    cpu: u32,
    pages: &[u8],
    page_size: usize,
) -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for page in pages.chunks_exact(page_size) {
        let Ok(recs) = parse_page(layout, page) else {
            continue;
        };
        for r in recs.flatten() {
            if r.id().is_some() {
                out.push((r.ts, cpu, r.payload.to_vec()));
            }
        }
    }
    out
}

/// The formats of `formats` whose event ids the records use, plus `keep` by name.
fn used_formats(
    formats: &[(String, String)],
    records: &[(u64, u32, Vec<u8>)],
    keep: &[&str],
) -> Vec<(String, String)> {
    let ids: BTreeSet<u16> = records
        .iter()
        .filter_map(|r| Some(u16::from_le_bytes([*r.2.first()?, *r.2.get(1)?])))
        .collect();
    formats
        .iter()
        .filter(|(sys, text)| {
            EventFormat::parse(sys, text)
                .is_ok_and(|ev| ids.contains(&ev.id) || keep.contains(&ev.name.as_str()))
        })
        .cloned()
        .collect()
}

/// A decoded scheduling record of the demo, for the Perfetto seeds.
enum Sched {
    Switch {
        prev_comm: String,
        prev_pid: i64,
        prev_prio: i64,
        prev_state: i64,
        next_comm: String,
        next_pid: i64,
        next_prio: i64,
    },
    Waking {
        comm: String,
        pid: i64,
        prio: i64,
        target_cpu: i64,
    },
    SysEnter {
        id: i64,
        args: Vec<u64>,
    },
    SysExit {
        id: i64,
        ret: i64,
    },
}

fn decode_sched(set: &FormatSet, payload: &[u8]) -> Option<(i64, Sched)> {
    let id = u16::from_le_bytes([*payload.first()?, *payload.get(1)?]);
    let ev = set.get(id)?;
    let int = |n: &str| ev.field(n).and_then(|f| f.read_i64(payload).ok());
    let s = |n: &str| {
        ev.field(n)
            .and_then(|f| f.read_str(payload).ok())
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let pid = int("common_pid")?;
    let rec = match ev.name.as_str() {
        "sched_switch" => Sched::Switch {
            prev_comm: s("prev_comm")?,
            prev_pid: int("prev_pid")?,
            prev_prio: int("prev_prio")?,
            prev_state: int("prev_state")?,
            next_comm: s("next_comm")?,
            next_pid: int("next_pid")?,
            next_prio: int("next_prio")?,
        },
        "sched_waking" => Sched::Waking {
            comm: s("comm")?,
            pid: int("pid")?,
            prio: int("prio")?,
            target_cpu: int("target_cpu")?,
        },
        "sys_enter" => Sched::SysEnter {
            id: int("id")?,
            args: ev
                .field("args")?
                .bytes(payload)
                .ok()?
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        },
        "sys_exit" => Sched::SysExit {
            id: int("id")?,
            ret: int("ret")?,
        },
        _ => return None,
    };
    Some((pid, rec))
}

/// A full `FtraceEvent`.
fn ftrace_event(ts: u64, pid: i64, rec: &Sched) -> Vec<u8> {
    let mut ev = Vec::new();
    proto::uint(&mut ev, 1, ts);
    proto::int(&mut ev, 2, pid);
    let mut m = Vec::new();
    let num = match rec {
        Sched::Switch {
            prev_comm,
            prev_pid,
            prev_prio,
            prev_state,
            next_comm,
            next_pid,
            next_prio,
        } => {
            proto::bytes(&mut m, 1, prev_comm.as_bytes());
            proto::int(&mut m, 2, *prev_pid);
            proto::int(&mut m, 3, *prev_prio);
            proto::int(&mut m, 4, *prev_state);
            proto::bytes(&mut m, 5, next_comm.as_bytes());
            proto::int(&mut m, 6, *next_pid);
            proto::int(&mut m, 7, *next_prio);
            4
        }
        Sched::Waking {
            comm,
            pid,
            prio,
            target_cpu,
        } => {
            proto::bytes(&mut m, 1, comm.as_bytes());
            proto::int(&mut m, 2, *pid);
            proto::int(&mut m, 3, *prio);
            proto::int(&mut m, 4, 1);
            proto::int(&mut m, 5, *target_cpu);
            20
        }
        Sched::SysEnter { id, args } => {
            proto::int(&mut m, 1, *id);
            proto::packed(&mut m, 2, args);
            329
        }
        Sched::SysExit { id, ret } => {
            proto::int(&mut m, 1, *id);
            proto::int(&mut m, 2, *ret);
            330
        }
    };
    proto::bytes(&mut ev, num, &m);
    ev
}

/// A `TracePacket` holding `body` in field `num`, as a `Trace`'s `packet` field.
fn packet(num: u32, body: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    proto::bytes(&mut p, num, body);
    let mut out = Vec::new();
    proto::bytes(&mut out, 1, &p);
    out
}

/// Perfetto traces of the demo's records: a process tree, then per CPU bundles of full
/// events or of compact sched (switches and wakings) with the rest full; the second bundle
/// of CPU 0 says events were lost before it.
fn perfetto_trace(set: &FormatSet, records: &[(u64, u32, Vec<u8>)], compact: bool) -> Vec<u8> {
    let decoded: Vec<(u64, u32, i64, Sched)> = records
        .iter()
        .filter_map(|(ts, cpu, p)| decode_sched(set, p).map(|(pid, r)| (*ts, *cpu, pid, r)))
        .collect();
    let mut comms: BTreeMap<i64, String> = BTreeMap::new();
    for (_, _, _, r) in &decoded {
        match r {
            Sched::Switch {
                prev_comm,
                prev_pid,
                next_comm,
                next_pid,
                ..
            } => {
                comms.insert(*prev_pid, prev_comm.clone());
                comms.insert(*next_pid, next_comm.clone());
            }
            Sched::Waking { comm, pid, .. } => {
                comms.insert(*pid, comm.clone());
            }
            _ => {}
        }
    }
    let mut tree = Vec::new();
    for (k, (pid, comm)) in comms.iter().enumerate() {
        if *pid == 0 {
            continue;
        }
        let mut p = Vec::new();
        proto::int(&mut p, 1, *pid);
        proto::int(&mut p, 2, 1);
        proto::bytes(&mut p, 3, format!("/usr/bin/{comm}").as_bytes());
        proto::bytes(&mut tree, 1, &p);
        // Every other thread in its own entry too, as Perfetto lists threads.
        if k % 2 == 0 {
            let mut t = Vec::new();
            proto::int(&mut t, 1, *pid);
            proto::bytes(&mut t, 2, comm.as_bytes());
            proto::int(&mut t, 3, *pid);
            proto::bytes(&mut tree, 2, &t);
        }
    }
    let mut out = packet(2, &tree);
    let cpus: BTreeSet<u32> = decoded.iter().map(|d| d.1).collect();
    for cpu in cpus {
        let evs: Vec<&(u64, u32, i64, Sched)> = decoded.iter().filter(|d| d.1 == cpu).collect();
        for (k, chunk) in evs.chunks(evs.len().div_ceil(3).max(1)).enumerate() {
            let mut b = Vec::new();
            proto::uint(&mut b, 1, cpu.into());
            let mut c = CompactCols::default();
            for (ts, _, pid, r) in chunk {
                if compact && c.take(*ts, r) {
                    continue;
                }
                proto::bytes(&mut b, 2, &ftrace_event(*ts, *pid, r));
            }
            if cpu == 0 && k == 1 {
                proto::uint(&mut b, 3, 1);
            }
            if compact {
                proto::bytes(&mut b, 4, &c.encode());
            }
            out.extend(packet(1, &b));
        }
    }
    out
}

/// The columns of a `CompactSched`.
#[derive(Default)]
struct CompactCols {
    intern: Vec<String>,
    switch: [Vec<u64>; 5],
    waking: [Vec<u64>; 6],
    last_switch: u64,
    last_waking: u64,
}

impl CompactCols {
    fn comm(&mut self, c: &str) -> u64 {
        match self.intern.iter().position(|i| i == c) {
            Some(k) => k as u64,
            None => {
                self.intern.push(c.to_string());
                self.intern.len() as u64 - 1
            }
        }
    }

    /// Takes a switch or waking into the columns; false for other records.
    fn take(&mut self, ts: u64, r: &Sched) -> bool {
        match r {
            Sched::Switch {
                prev_state,
                next_comm,
                next_pid,
                next_prio,
                ..
            } => {
                let comm = self.comm(next_comm);
                let s = &mut self.switch;
                s[0].push(ts - self.last_switch);
                s[1].push(*prev_state as u64);
                s[2].push(*next_pid as u64);
                s[3].push(*next_prio as u64);
                s[4].push(comm);
                self.last_switch = ts;
                true
            }
            Sched::Waking {
                comm,
                pid,
                prio,
                target_cpu,
            } => {
                let comm = self.comm(comm);
                let w = &mut self.waking;
                w[0].push(ts - self.last_waking);
                w[1].push(*pid as u64);
                w[2].push(*target_cpu as u64);
                w[3].push(*prio as u64);
                w[4].push(comm);
                w[5].push(0);
                self.last_waking = ts;
                true
            }
            _ => false,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut c = Vec::new();
        for s in &self.intern {
            proto::bytes(&mut c, 5, s.as_bytes());
        }
        for (num, col) in [1, 2, 3, 4, 6].into_iter().zip(&self.switch) {
            proto::packed(&mut c, num, col);
        }
        for (num, col) in [7, 8, 9, 10, 11, 12].into_iter().zip(&self.waking) {
            proto::packed(&mut c, num, col);
        }
        c
    }
}

/// perf.data files of the demo's records: one tracepoint attr per event (an id per CPU),
/// COMM and FORK records for the tasks, RAW samples, a LOST record; plain and compressed.
fn perf_files(
    dat: &Dat,
    set: &FormatSet,
    records: &[(u64, u32, Vec<u8>)],
) -> Vec<(String, Vec<u8>)> {
    let ncpus = records.iter().map(|r| r.1 + 1).max().unwrap_or(1);
    let ids: BTreeSet<u16> = records
        .iter()
        .filter_map(|r| Some(u16::from_le_bytes([*r.2.first()?, *r.2.get(1)?])))
        .filter(|id| set.get(*id).is_some())
        .collect();
    let attrs: Vec<(u64, Vec<u64>)> = ids
        .iter()
        .enumerate()
        .map(|(k, &id)| {
            (
                id.into(),
                (0..ncpus)
                    .map(|c| 100 + (k as u64) * 16 + u64::from(c))
                    .collect(),
            )
        })
        .collect();
    let id_of = |ev: u16, cpu: u32| {
        let k = ids.iter().position(|&i| i == ev).unwrap_or(0) as u64;
        100 + k * 16 + u64::from(cpu)
    };
    let mut sorted: Vec<&(u64, u32, Vec<u8>)> = records.iter().collect();
    sorted.sort_by_key(|r| r.0);
    let mut recs = Vec::new();
    let mut seen = BTreeSet::new();
    for (ts, _, p) in &sorted {
        if let Some((
            pid,
            Sched::Switch {
                next_comm,
                next_pid,
                ..
            },
        )) = decode_sched(set, p)
        {
            for (tid, comm) in [(pid, None), (next_pid, Some(next_comm))] {
                if tid > 0 && seen.insert(tid) {
                    if seen.len() == 2 {
                        recs.push(PerfRecord::Fork {
                            pid: tid as u32,
                            ppid: 1,
                            tid: tid as u32,
                            ptid: 1,
                            time: ts.saturating_sub(1),
                        });
                    }
                    if let Some(comm) = comm {
                        recs.push(PerfRecord::Comm {
                            pid: tid as u32,
                            tid: tid as u32,
                            comm,
                            time: ts.saturating_sub(1),
                        });
                    }
                }
            }
        }
    }
    let half = sorted.len() / 2;
    for (k, (ts, cpu, p)) in sorted.iter().enumerate() {
        let ev = u16::from_le_bytes([p[0], p[1]]);
        if set.get(ev).is_none() {
            continue;
        }
        if k == half {
            recs.push(PerfRecord::Lost {
                id: id_of(ev, *cpu),
                lost: 3,
                cpu: *cpu,
                time: *ts,
            });
        }
        let tid = i32::from_le_bytes([p[4], p[5], p[6], p[7]]) as u32;
        recs.push(PerfRecord::Sample {
            id: id_of(ev, *cpu),
            time: *ts,
            cpu: *cpu,
            pid: tid,
            tid,
            raw: p.to_vec(),
        });
    }
    let tracing = dat.tracing_data();
    vec![
        ("chain".into(), perf_data(&attrs, &recs, &tracing, None)),
        (
            "chain-z".into(),
            perf_data(&attrs, &recs, &tracing, Some(16 << 10)),
        ),
        (
            "chain-z-split".into(),
            perf_data(&attrs, &recs, &tracing, Some(3000)),
        ),
    ]
}

/// The importers' seeds from the demo's recording: trace.dat v6 and v7 (plain, zstd), perf.data
/// (plain, compressed), Perfetto (full, compact).
fn importer_seeds(out: &mut Out, trace: &Path, chain: &FormatDir, scratch: &Path) {
    let fmt = trace.join("formats");
    let header_event = read(&fmt.join("header_event"))
        .or_else(|| read(&fmt.join("events/header_event")))
        .unwrap_or_else(|| formats::HEADER_EVENT.as_bytes().to_vec());
    let header_page = String::from_utf8_lossy(&chain.header_page).into_owned();
    let layout = HeaderPage::parse(&header_page).expect("the demo's header_page");
    let page_size = HeaderPage::page_size_of(&header_page).unwrap_or(PAGE);
    let mut cpus = Vec::new();
    let mut records = Vec::new();
    for cpu in [0u32, 1] {
        let chunk = read(&trace.join(format!("cpu{cpu}/000000.chunk.zst"))).expect("chunk");
        let raw = zstd::decode_all(&chunk[..]).expect("chunk");
        let pages = raw[..raw.len().min(2 * page_size)].to_vec();
        records.extend(page_records(&layout, cpu, &pages, page_size));
        cpus.push(pages);
    }
    let all: Vec<(String, String)> = chain
        .texts
        .iter()
        .map(|(path, text)| {
            (
                path.split('/').next().unwrap_or("").to_string(),
                String::from_utf8_lossy(text).into_owned(),
            )
        })
        .collect();
    let formats = used_formats(&all, &records, &["sched_switch", "sched_waking"]);
    let mut set = FormatSet::default();
    for (sys, text) in &formats {
        if let Ok(ev) = EventFormat::parse(sys, text) {
            set.insert(ev);
        }
    }
    let comms: BTreeMap<i64, String> = records
        .iter()
        .filter_map(|r| match decode_sched(&set, &r.2)? {
            (
                _,
                Sched::Switch {
                    next_pid,
                    next_comm,
                    ..
                },
            ) => Some((next_pid, next_comm)),
            _ => None,
        })
        .collect();
    let cmdlines: String = comms.iter().map(|(p, c)| format!("{p} {c}\n")).collect();
    let dat = Dat {
        long_size: 8,
        page_size: page_size as u32,
        header_page,
        header_event: String::from_utf8_lossy(&header_event).into_owned(),
        formats,
        kallsyms: "ffffffff81000000 T _stext\nffffffff81001000 t hrtimer_wakeup\n\
                   ffffffffc0000000 t mod_fn\t[mod]\n"
            .into(),
        printk: "0xffffffff82000000 : \"hello %d\\n\"\n".into(),
        cmdlines,
        clock: Some("local".into()),
        ts_offset: None,
        cpus,
    };
    let t = "import_tracedat";
    import_seed(out, scratch, t, "chain-v6", &dat.v6());
    import_seed(out, scratch, t, "chain-v7-none", &dat.v7(false, 1));
    import_seed(out, scratch, t, "chain-v7-zstd", &dat.v7(true, 1));
    let mut offset = dat.clone();
    offset.ts_offset = Some(-1000);
    offset.clock = Some("mono".into());
    import_seed(out, scratch, t, "chain-v6-offset", &offset.v6());
    import_seed(out, scratch, t, "chain-v7-zstd-offset", &offset.v7(true, 2));
    for (name, bytes) in perf_files(&dat, &set, &records) {
        import_seed(out, scratch, "import_perfdata", &name, &bytes);
    }
    import_seed(
        out,
        scratch,
        "import_perfetto",
        "chain-full",
        &perfetto_trace(&set, &records, false),
    );
    import_seed(
        out,
        scratch,
        "import_perfetto",
        "chain-compact",
        &perfetto_trace(&set, &records, true),
    );
}

/// `../shared/realtraces/trace-dat/*.trace.dat` and `derived/*.trace.dat` (0.7–4 MB, read in
/// place) cut to fit libFuzzer's `-max_len`: the first page with records of each CPU, the
/// formats of the events on them, no kallsyms or printk formats, the first saved cmdlines;
/// written as the version they are (v7 with their compression).
fn realtrace_dat_seeds(out: &mut Out, realtraces: &Path, scratch: &Path) {
    let dir = realtraces.join("trace-dat");
    let mut files: Vec<PathBuf> = Vec::new();
    for d in [dir.clone(), dir.join("derived")] {
        if let Ok(entries) = std::fs::read_dir(&d) {
            files.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.to_string_lossy().ends_with(".trace.dat")),
            );
        }
    }
    files.sort();
    for path in files {
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let Some(bytes) = read(&path) else { continue };
        let dat = match TraceDat::parse(&path, &bytes) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("seeds: INVALID real trace {}: {e}", path.display());
                std::process::exit(1);
            }
        };
        let Ok(layout) = HeaderPage::parse(&dat.header_page) else {
            continue;
        };
        // The cut must give events when the whole file does (trappy_trace_32bit has only
        // bprint and thermal events, which Argus does not map: no events either way).
        let whole = import::open(&path).unwrap_or_else(|e| {
            eprintln!("seeds: INVALID real trace {}: {e}", path.display());
            std::process::exit(1);
        });
        let events = !whole.event_slice().is_empty();
        let mut cut = Dat::from_trace_dat(&dat);
        cut.kallsyms.clear();
        cut.printk.clear();
        let head = head_lines(cut.cmdlines.as_bytes());
        let head = &head[..head.len().min(2048)];
        let end = head.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        cut.cmdlines = String::from_utf8_lossy(&head[..end]).into_owned();
        // The first page with a scheduling event (else with any record) of each CPU.
        let sched: BTreeSet<u16> = dat
            .formats
            .iter()
            .filter_map(|(sys, text)| EventFormat::parse(sys, text).ok())
            .filter(|ev| ev.name.starts_with("sched_"))
            .map(|ev| ev.id)
            .collect();
        let has = |page: &[u8], any: bool| {
            parse_page(&layout, page).is_ok_and(|mut r| {
                r.any(|r| r.is_ok_and(|r| any || r.id().is_some_and(|id| sched.contains(&id))))
            })
        };
        let mut records = Vec::new();
        cut.cpus = dat
            .cpus
            .iter()
            .map(|c| {
                let mut pages = c.pages.chunks_exact(dat.page_size);
                let first = pages
                    .clone()
                    .find(|page| has(page, false))
                    .or_else(|| pages.find(|page| has(page, true)));
                let page = first.map(<[u8]>::to_vec).unwrap_or_default();
                records.extend(page_records(&layout, c.cpu, &page, dat.page_size));
                page
            })
            .collect();
        cut.formats = used_formats(&dat.formats, &records, &[]);
        let write = |d: &Dat| match dat.compression.as_deref() {
            Some("zstd") => d.v7(true, 1),
            Some(_) => d.v7(false, 1),
            None => d.v6(),
        };
        // The CPUs past what fits are left without pages.
        let mut bytes = write(&cut);
        while bytes.len() > MAX_SEED {
            let Some(last) = cut.cpus.iter_mut().rev().find(|p| !p.is_empty()) else {
                break;
            };
            last.clear();
            bytes = write(&cut);
        }
        import_seed_of(
            out,
            scratch,
            "import_tracedat",
            &format!("real-{name}"),
            &bytes,
            events,
        );
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
        realtrace_dat_seeds(&mut out, &realtraces, &scratch);
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
