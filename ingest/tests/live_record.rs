//! Live recordings with `argus_ingest::linux::Recorder`.
//!
//! They need root and tracefs. Where the machine cannot trace, each test prints one
//! `SKIP (cannot trace: ...)` line and passes, unless `ARGUS_REQUIRE_LIVE=1`, which turns
//! the skip into a failure (CI on a machine that can trace).
//!
//! The tests hold one lock while recording: the machine has few CPUs and a recording is
//! system-wide, so parallel recordings would only make each other slower and noisier. The
//! `two_recorders_coexist` test runs two at once on purpose.
//!
//! Pages are parsed here with a minimal walker (FORMATS.md §3) so that these tests do not
//! depend on the crate's decoder.
#![allow(clippy::unwrap_used)]

use argus_ingest::linux::{RecordConfig, RecordError, Recorder, StopReason, DEFAULT_EVENTS};
use argus_ingest::tracedir::{self, ProcEntry, TraceMeta};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use argus_ingest::linux::DEFAULT_TRACEFS as TRACEFS;

/// The lock for a live test, or `None` (after printing the SKIP line) when this machine
/// cannot trace.
fn live() -> Option<MutexGuard<'static, ()>> {
    if !argus_testkit::live_or_skip(&argus_testkit::current_test()) {
        return None;
    }
    Some(argus_testkit::recording_lock())
}

fn config(dir: &Path) -> RecordConfig {
    let mut config = RecordConfig::new(dir.join("trace"));
    // Small buffers: the tests record well under a second.
    config.buffer_size_kb = 2048;
    config.chunk_pages = 64;
    config
}

fn read_meta(dir: &Path) -> TraceMeta {
    serde_json::from_slice(&fs::read(tracedir::meta_path(dir)).unwrap()).unwrap()
}

/// One data record: event id, common_pid, the whole payload.
struct Record {
    id: u16,
    pid: i32,
    payload: Vec<u8>,
}

/// Walks one ring-buffer page (FORMATS.md §3).
fn page_records(page: &[u8], out: &mut Vec<Record>) {
    let commit = (u64::from_le_bytes(page[8..16].try_into().unwrap()) & ((1 << 27) - 1)) as usize;
    let data = &page[16..(16 + commit).min(page.len())];
    let u32_at = |off: usize| u32::from_le_bytes(data[off..off + 4].try_into().unwrap());
    let mut off = 0;
    while off + 4 <= data.len() {
        let word = u32_at(off);
        let type_len = (word & 0x1f) as usize;
        let delta = word >> 5;
        let (payload, next) = match type_len {
            0 => {
                if off + 8 > data.len() {
                    break;
                }
                let len = u32_at(off + 4) as usize;
                if len < 4 {
                    break;
                }
                (off + 8..off + 4 + len, off + 4 + len)
            }
            1..=28 => (off + 4..off + 4 + 4 * type_len, off + 4 + 4 * type_len),
            29 => {
                if delta == 0 || off + 8 > data.len() {
                    break;
                }
                off += 4 + u32_at(off + 4) as usize;
                continue;
            }
            _ => {
                off += 8;
                continue;
            }
        };
        assert!(payload.end <= data.len(), "record overruns the page");
        let bytes = &data[payload];
        out.push(Record {
            id: u16::from_le_bytes([bytes[0], bytes[1]]),
            pid: i32::from_le_bytes(bytes[4..8].try_into().unwrap()),
            payload: bytes.to_vec(),
        });
        off = next;
    }
}

/// Every record of every chunk of the trace, plus the pages per CPU.
fn all_records(dir: &Path, meta: &TraceMeta) -> (Vec<Record>, BTreeMap<u32, usize>) {
    let page_size = meta.page_size as usize;
    let mut records = Vec::new();
    let mut pages = BTreeMap::new();
    for &cpu in &meta.cpus {
        let chunks = meta.chunks[&cpu];
        let mut n = 0;
        for seq in 0..chunks {
            let path = tracedir::chunk_path(dir, cpu, seq);
            let bytes = zstd::decode_all(&fs::read(&path).unwrap()[..]).unwrap();
            assert!(!bytes.is_empty(), "{} is empty", path.display());
            assert_eq!(bytes.len() % page_size, 0, "{}", path.display());
            for page in bytes.chunks(page_size) {
                page_records(page, &mut records);
                n += 1;
            }
        }
        // No chunk beyond the count, no leftover temporary file.
        assert!(!tracedir::chunk_path(dir, cpu, chunks).exists());
        for entry in fs::read_dir(tracedir::cpu_dir(dir, cpu)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(name.ends_with(".chunk.zst"), "unexpected file {name}");
        }
        pages.insert(cpu, n);
    }
    (records, pages)
}

/// `ID:` and field offsets of one recorded format file.
struct Format {
    id: u16,
    offsets: BTreeMap<String, usize>,
}

fn format(dir: &Path, event: &str) -> Format {
    let path = tracedir::formats_dir(dir)
        .join("events")
        .join(event)
        .join("format");
    let text = fs::read_to_string(&path).unwrap();
    let mut id = None;
    let mut offsets = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("ID:") {
            id = Some(v.trim().parse().unwrap());
        } else if let Some(rest) = line.strip_prefix("field:") {
            let mut parts = rest.split(';');
            let decl = parts.next().unwrap();
            let name = decl.split_whitespace().last().unwrap();
            let name = name.split('[').next().unwrap().to_string();
            let offset = parts
                .find_map(|p| p.trim().strip_prefix("offset:"))
                .unwrap()
                .parse()
                .unwrap();
            offsets.insert(name, offset);
        }
    }
    Format {
        id: id.unwrap(),
        offsets,
    }
}

fn i32_at(payload: &[u8], offset: usize) -> i32 {
    i32::from_le_bytes(payload[offset..offset + 4].try_into().unwrap())
}

fn instance_gone(name: &str) -> bool {
    !Path::new(TRACEFS).join("instances").join(name).exists()
}

fn record_command() -> (
    tempfile::TempDir,
    PathBuf,
    argus_ingest::linux::RecordSummary,
) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    config.command = Some(vec![
        "sh".into(),
        "-c".into(),
        "sleep 0.2; echo hi > /dev/null".into(),
    ]);
    config.duration = Some(Duration::from_secs(3));
    let dir = config.output_dir.clone();
    let summary = Recorder::new(config).run().unwrap();
    (tmp, dir, summary)
}

#[test]
fn records_a_command() {
    let Some(_lock) = live() else { return };
    let (_tmp, dir, summary) = record_command();
    assert_eq!(summary.stop_reason, StopReason::CommandExited);
    assert_eq!(summary.command_status, Some(0));
    assert!(instance_gone(&summary.instance), "{}", summary.instance);

    let meta = read_meta(&dir);
    assert_eq!(meta.format, "argus-trace");
    assert_eq!(meta.version, 1);
    assert_eq!(meta.status, "complete");
    assert_eq!(meta.clock, "mono");
    assert_eq!(meta.command_status, Some(0));
    assert_eq!(meta.command_pid, summary.command_pid);
    assert!(meta.command_pid.is_some());
    assert_eq!(meta.recorder_pid, std::process::id() as i32);
    assert!(meta.end_ns > meta.start_ns);
    assert!(meta.end_ns - meta.start_ns >= 200_000_000, "{meta:?}");
    assert_eq!(meta.events, DEFAULT_EVENTS);
    assert_eq!(meta.page_size as usize, 4096);
    assert!(!meta.cpus.is_empty());
    let cpus: BTreeSet<u32> = meta.cpus.iter().copied().collect();
    assert_eq!(meta.chunks.keys().copied().collect::<BTreeSet<_>>(), cpus);
    assert_eq!(meta.lost.keys().copied().collect::<BTreeSet<_>>(), cpus);
    assert_eq!(meta.lost, summary.lost);

    let formats = tracedir::formats_dir(&dir);
    assert!(fs::read_to_string(formats.join("header_page"))
        .unwrap()
        .contains("commit"));
    assert!(fs::read_to_string(formats.join("header_event"))
        .unwrap()
        .contains("type_len"));
    for event in DEFAULT_EVENTS {
        let f = format(&dir, event);
        assert!(f.offsets.contains_key("common_pid"), "{event}");
    }

    let procs: Vec<ProcEntry> =
        serde_json::from_slice(&fs::read(tracedir::proc_path(&dir)).unwrap()).unwrap();
    assert!(procs
        .iter()
        .any(|p| p.tid == 1 && p.pid == 1 && p.ppid == 0 && !p.kernel));
    assert!(procs.iter().any(|p| p.tid == 2 && p.kernel), "kthreadd");
    assert!(procs
        .iter()
        .any(|p| p.pid == std::process::id() as i32 && p.tid != p.pid));

    let kallsyms = zstd::decode_all(&fs::read(tracedir::kallsyms_path(&dir)).unwrap()[..]).unwrap();
    let kallsyms = String::from_utf8(kallsyms).unwrap();
    assert!(kallsyms.lines().any(|l| l.ends_with(" T schedule")));
    assert!(kallsyms
        .lines()
        .all(|l| matches!(l.split(' ').nth(1), Some("t" | "T"))));

    let (records, pages) = all_records(&dir, &meta);
    assert!(pages.values().sum::<usize>() > 0);
    for (&cpu, &n) in &pages {
        assert_eq!(n as u64, summary.cpus[&cpu].pages, "cpu{cpu}");
        assert_eq!(meta.chunks[&cpu] > 0, n > 0, "cpu{cpu}");
    }
    assert!(records.len() > 100, "only {} records", records.len());
    assert_eq!(summary.pages, pages.values().sum::<usize>() as u64);
    // Every record's id is one of the enabled events.
    let ids: BTreeSet<u16> = DEFAULT_EVENTS.iter().map(|e| format(&dir, e).id).collect();
    assert!(records.iter().all(|r| ids.contains(&r.id)));
}

#[test]
fn own_threads_are_not_traced_but_the_command_is() {
    let Some(_lock) = live() else { return };
    let (_tmp, dir, summary) = record_command();
    let meta = read_meta(&dir);
    let (records, _) = all_records(&dir, &meta);
    let own: BTreeSet<i32> = summary.excluded_tids.iter().copied().collect();
    assert!(own.contains(&(std::process::id() as i32)), "{own:?}");

    // The kernel keeps sched_switch when the other side of the switch is traced, and
    // sched_waking/sched_wakeup* when the woken task is traced (trace_events.c,
    // event_filter_pid_sched_switch_probe_pre): only those may carry our pid.
    let switch = format(&dir, "sched/sched_switch");
    let next_pid = switch.offsets["next_pid"];
    let waking = format(&dir, "sched/sched_waking");
    let woken_pid = waking.offsets["pid"];
    let wakeup_new = format(&dir, "sched/sched_wakeup_new");
    let mut leaked = BTreeMap::<u16, usize>::new();
    for r in records.iter().filter(|r| own.contains(&r.pid)) {
        let excused = if r.id == switch.id {
            !own.contains(&i32_at(&r.payload, next_pid))
        } else if r.id == waking.id || r.id == wakeup_new.id {
            !own.contains(&i32_at(&r.payload, woken_pid))
        } else {
            false
        };
        if !excused {
            *leaked.entry(r.id).or_default() += 1;
        }
    }
    assert!(
        leaked.is_empty(),
        "records of recorder threads by event id: {leaked:?}"
    );

    let command = summary.command_pid.unwrap();
    let from_command = records.iter().filter(|r| r.pid == command).count();
    assert!(from_command > 10, "{from_command} records from the command");
    let exec = format(&dir, "sched/sched_process_exec");
    assert!(records.iter().any(|r| r.id == exec.id && r.pid == command));
}

#[test]
fn stop_handle_closes_early_and_cleanly() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    config.duration = Some(Duration::from_secs(20));
    let dir = config.output_dir.clone();
    let recording = Recorder::new(config).start().unwrap();
    let stop = recording.stop_handle();
    let began = Instant::now();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        stop.stop();
    });
    let summary = recording.wait().unwrap();
    stopper.join().unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert!(summary.duration >= Duration::from_millis(300));
    assert_eq!(summary.stop_reason, StopReason::Requested);
    assert!(instance_gone(&summary.instance));
    let meta = read_meta(&dir);
    assert_eq!(meta.status, "complete");
    assert_eq!(meta.command, None);
    assert_eq!(meta.command_status, None);
    let (records, pages) = all_records(&dir, &meta);
    assert!(!records.is_empty(), "{summary:?} {meta:?} {pages:?}");
}

#[test]
fn sigterm_closes_cleanly() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    config.duration = Some(Duration::from_secs(20));
    config.handle_signals = true;
    let dir = config.output_dir.clone();
    let began = Instant::now();
    let recording = Recorder::new(config).start().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: the recording's handlers are installed, so SIGTERM only sets its stop flag.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    let summary = recording.wait().unwrap();
    assert!(began.elapsed() < Duration::from_secs(5));
    assert_eq!(summary.stop_reason, StopReason::Signal(libc::SIGTERM));
    assert!(instance_gone(&summary.instance));
    assert_eq!(read_meta(&dir).status, "complete");
}

#[test]
fn last_marker_arrives_after_stop() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let config = config(tmp.path());
    let dir = config.output_dir.clone();
    let recording = Recorder::new(config).start().unwrap();
    assert!(recording.marker_path().ends_with(format!(
        "instances/{}/trace_marker",
        recording.instance_name()
    )));
    let copies_top_level = Path::new(TRACEFS)
        .join("instances")
        .join(recording.instance_name())
        .join("options/copy_trace_marker")
        .exists();
    std::thread::sleep(Duration::from_millis(100));
    // Written from an excluded thread: markers are not subject to the pid filter.
    fs::write(recording.marker_path(), "argus-test-last-marker").unwrap();
    if copies_top_level {
        // The kernel also copies this write into every other instance with the option set,
        // and fails it with EBADF when one of those (or the top level) has tracing off.
        fs::write(
            Path::new(TRACEFS).join("trace_marker"),
            "argus-test-top-marker",
        )
        .expect("top-level trace_marker write (another instance with tracing off?)");
    }
    // Stop at once: the marker sits in a partially filled page that only the drain reads.
    let summary = recording.stop().unwrap();
    let meta = read_meta(&dir);
    let (records, _) = all_records(&dir, &meta);
    let print = format(&dir, "ftrace/print");
    let markers: Vec<&Record> = records.iter().filter(|r| r.id == print.id).collect();
    let contains = |needle: &[u8]| {
        markers
            .iter()
            .any(|r| r.payload.windows(needle.len()).any(|w| w == needle))
    };
    assert!(
        contains(b"argus-test-last-marker"),
        "{} markers",
        markers.len()
    );
    if copies_top_level {
        assert!(contains(b"argus-test-top-marker"));
    }
    assert!(instance_gone(&summary.instance));
}

#[test]
fn unknown_event_is_named() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    config.events = vec![
        "sched/sched_switch".into(),
        "sched/argus_no_such_event".into(),
    ];
    let dir = config.output_dir.clone();
    let err = Recorder::new(config).run().unwrap_err();
    assert!(
        matches!(err, RecordError::EventUnavailable { ref event, .. } if event == "sched/argus_no_such_event"),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with("event sched/argus_no_such_event is not available in this kernel"),
        "{message}"
    );
    assert!(!dir.exists(), "nothing is created for a bad configuration");
}

#[test]
fn non_empty_output_dir_is_refused() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let config = config(tmp.path());
    fs::create_dir_all(&config.output_dir).unwrap();
    fs::write(config.output_dir.join("meta.json"), "{}").unwrap();
    let dir = config.output_dir.clone();
    let err = Recorder::new(config).run().unwrap_err();
    assert!(matches!(err, RecordError::OutputNotEmpty { .. }), "{err}");
    assert!(err.to_string().contains(&dir.display().to_string()));
    assert_eq!(fs::read_to_string(dir.join("meta.json")).unwrap(), "{}");
}

#[test]
fn two_recorders_coexist_and_stale_instances_are_removed() {
    let Some(_lock) = live() else { return };
    // A dead pid: a child that has exited and been reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = Path::new(TRACEFS)
        .join("instances")
        .join(format!("argus-{dead}"));
    if !stale.exists() {
        fs::create_dir(&stale).unwrap();
    }

    let tmp = tempfile::tempdir().unwrap();
    let mut a = config(tmp.path());
    a.output_dir = tmp.path().join("a");
    a.duration = Some(Duration::from_millis(400));
    let mut b = config(tmp.path());
    b.output_dir = tmp.path().join("b");
    b.duration = Some(Duration::from_millis(400));
    let first = Recorder::new(a).start().unwrap();
    let second = Recorder::new(b).start().unwrap();
    assert!(
        !stale.exists(),
        "stale instance {} not removed",
        stale.display()
    );
    assert_ne!(first.instance_name(), second.instance_name());
    let waiter = std::thread::spawn(move || first.wait());
    let second = second.wait().unwrap();
    let first = waiter.join().unwrap().unwrap();
    for (summary, name) in [(&first, "a"), (&second, "b")] {
        assert_eq!(summary.stop_reason, StopReason::DurationElapsed);
        assert!(instance_gone(&summary.instance));
        let dir = tmp.path().join(name);
        let meta = read_meta(&dir);
        assert_eq!(meta.status, "complete");
        let (records, _) = all_records(&dir, &meta);
        assert!(!records.is_empty(), "{name}");
    }
}

#[test]
fn flush_interval_makes_chunks_appear_while_recording() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    config.chunk_pages = 4096; // never full in this test
    config.flush_interval = Some(Duration::from_millis(100));
    let dir = config.output_dir.clone();
    let recording = Recorder::new(config).start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let complete_chunks = || {
        fs::read_dir(tracedir::cpu_dir(&dir, 0))
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().ends_with(".chunk.zst")
            })
            .count()
    };
    while complete_chunks() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = complete_chunks();
    // Chunks written so far are complete zstd frames even though recording goes on.
    let first = tracedir::chunk_path(&dir, 0, 0);
    let readable = first.exists() && zstd::decode_all(&fs::read(&first).unwrap()[..]).is_ok();
    assert_eq!(read_meta(&dir).status, "recording");
    let summary = recording.stop().unwrap();
    assert!(seen > 0, "no chunk appeared on cpu0 while recording");
    assert!(readable);
    assert!(summary.cpus[&0].chunks as usize >= seen);
    assert_eq!(read_meta(&dir).status, "complete");
}

/// Runs `dd bs=1` (two syscalls per byte) as the recorded command.
fn syscall_storm(config: &mut RecordConfig, bytes: u64) {
    config.command = Some(vec![
        "dd".into(),
        "if=/dev/zero".into(),
        "of=/dev/null".into(),
        "bs=1".into(),
        format!("count={bytes}"),
    ]);
    config.duration = Some(Duration::from_secs(30));
}

#[test]
fn tap_hands_over_every_page_written() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    let (tx, rx) = crossbeam_channel::unbounded();
    config.tap = Some(tx);
    syscall_storm(&mut config, 20_000);
    let dir = config.output_dir.clone();
    let summary = Recorder::new(config).run().unwrap();
    let tapped: Vec<_> = rx.try_iter().collect();
    assert_eq!(tapped.len() as u64, summary.pages);
    assert!(summary.cpus.values().all(|c| c.tap_dropped == 0));
    // The tapped pages are the pages on disk, per CPU and in order.
    let meta = read_meta(&dir);
    for &cpu in &meta.cpus {
        let mut on_disk = Vec::new();
        for seq in 0..meta.chunks[&cpu] {
            let path = tracedir::chunk_path(&dir, cpu, seq);
            on_disk.extend(zstd::decode_all(&fs::read(&path).unwrap()[..]).unwrap());
        }
        let from_tap: Vec<u8> = tapped
            .iter()
            .filter(|p| p.cpu == cpu)
            .flat_map(|p| p.data.iter().copied())
            .collect();
        assert_eq!(from_tap.len(), on_disk.len(), "cpu{cpu}");
        assert!(
            from_tap == on_disk,
            "cpu{cpu}: tapped pages differ from the chunks"
        );
    }
}

#[test]
fn a_full_tap_drops_pages_and_counts_them() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    let (tx, rx) = crossbeam_channel::bounded(2);
    config.tap = Some(tx);
    syscall_storm(&mut config, 20_000);
    let recording = Recorder::new(config).start().unwrap();
    let summary = recording.wait().unwrap();
    let dropped: u64 = summary.cpus.values().map(|c| c.tap_dropped).sum();
    assert!(dropped > 0, "nobody read the tap, yet nothing was dropped");
    assert_eq!(rx.try_iter().count() as u64 + dropped, summary.pages);
    // The chunks are complete regardless.
    let meta = read_meta(&summary.output_dir);
    let (_, pages) = all_records(&summary.output_dir, &meta);
    assert_eq!(pages.values().sum::<usize>() as u64, summary.pages);
    let ext = argus_ingest::tracedir::MetaExt::from_meta_json(
        &fs::read(tracedir::meta_path(&summary.output_dir)).unwrap(),
    )
    .unwrap();
    assert_eq!(ext.tap_dropped.values().sum::<u64>(), dropped);
}

#[test]
fn ring_keeps_the_directory_under_its_cap() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    let cap = 4u64 << 20;
    config.ring_size = Some(cap);
    config.chunk_pages = 64;
    // A debug-build reader on a busy machine: a large kernel buffer keeps losses down, and
    // the storm writes several times the cap even if some are lost.
    config.buffer_size_kb = 16384;
    syscall_storm(&mut config, 1_500_000);
    let dir = config.output_dir.clone();
    let recording = Recorder::new(config).start().unwrap();
    let waiter = std::thread::spawn(move || recording.wait());
    // Sample the directory size while recording.
    let mut max_seen = 0;
    while !waiter.is_finished() {
        max_seen = max_seen.max(dir_size(&dir));
        std::thread::sleep(Duration::from_millis(10));
    }
    let summary = waiter.join().unwrap().unwrap();
    max_seen = max_seen.max(dir_size(&dir));
    assert!(
        max_seen <= cap,
        "the trace used {max_seen} bytes, cap {cap}"
    );
    let dropped: u32 = summary.cpus.values().map(|c| c.dropped_chunks).sum();
    assert!(dropped > 0, "the storm did not fill the ring: {summary}");
    let bytes = fs::read(tracedir::meta_path(&dir)).unwrap();
    let ext = argus_ingest::tracedir::MetaExt::from_meta_json(&bytes).unwrap();
    let ring = ext.ring.expect("meta.json has the ring");
    assert_eq!(ring.size, cap);
    for (cpu, d) in &ring.dropped {
        assert_eq!(d.chunks, summary.cpus[cpu].dropped_chunks);
        assert!(d.from_ns <= d.until_ns);
        assert!(!tracedir::chunk_path(&dir, *cpu, d.chunks - 1).exists());
        assert!(tracedir::chunk_path(&dir, *cpu, d.chunks).exists());
    }
    // Replay reads what is left, from where every CPU's data is complete.
    let reader = argus_ingest::replay::TraceReader::open(&dir).unwrap();
    let start = reader.start_ns();
    assert!(start > reader.meta().start_ns);
    let mut events = reader.events();
    let mut n = 0u64;
    for ev in &mut events {
        let ev = ev.unwrap();
        assert!(ev.ts.0 >= start);
        assert_eq!(ev.seq, n);
        n += 1;
    }
    assert!(n > 0);
    assert!(events.finish().before_start > 0);
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[test]
fn files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let Some(_lock) = live() else { return };
    let (_tmp, dir, _) = record_command();
    let mut checked = 0;
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked > 5);
}

/// A cut at the end of the newest chunk: recovered while the trace says `recording`, an
/// error once it says `complete`.
#[test]
fn cut_tail_is_recovered_only_in_a_trace_still_recording() {
    use argus_ingest::replay::TraceReader;
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    syscall_storm(&mut config, 50_000);
    let dir = config.output_dir.clone();
    Recorder::new(config).run().unwrap();
    let full: u64 = TraceReader::open(&dir).unwrap().events().count() as u64;

    let meta = read_meta(&dir);
    let cpu = *meta
        .chunks
        .iter()
        .max_by_key(|(_, &n)| n)
        .map(|(c, _)| c)
        .unwrap();
    let last = tracedir::chunk_path(&dir, cpu, meta.chunks[&cpu] - 1);
    let bytes = fs::read(&last).unwrap();
    fs::write(&last, &bytes[..bytes.len() - bytes.len() / 3]).unwrap();

    let mut events = TraceReader::open(&dir).unwrap().events();
    let errors = events.by_ref().filter(|e| e.is_err()).count();
    assert!(
        errors > 0,
        "a cut chunk in a complete trace must be reported"
    );

    let mut recording = meta.clone();
    recording.status = "recording".into();
    fs::write(
        tracedir::meta_path(&dir),
        serde_json::to_vec(&recording).unwrap(),
    )
    .unwrap();
    let mut events = TraceReader::open(&dir).unwrap().events();
    let mut n = 0u64;
    for ev in &mut events {
        ev.unwrap();
        n += 1;
    }
    let summary = events.finish();
    assert_eq!(summary.cpus[&cpu].recovered_tails, 1);
    assert!(n > 0 && n < full, "{n} of {full}");
}

#[test]
fn no_record_arrives_at_or_below_the_read_frontier_loaded_before_it() {
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    let (tx, rx) = crossbeam_channel::unbounded();
    config.tap = Some(tx);
    syscall_storm(&mut config, 400_000);
    let dir = config.output_dir.clone();
    let recording = Recorder::new(config).start().unwrap();
    let frontier = recording.read_frontier();
    let layout = argus_ingest::format::HeaderPage::parse(
        &fs::read_to_string(dir.join("formats").join("header_page")).unwrap(),
    )
    .unwrap();
    let waiter = std::thread::spawn(move || recording.wait());
    // As `argus start` does: the frontier first, then what the tap holds. Every record taken
    // from the tap later must be stamped after the frontier loaded before the earlier take.
    let (mut loaded, mut pages, mut records, mut advanced) = (0u64, 0u64, 0u64, 0u32);
    let mut max_ts = 0u64;
    let mut check = |pages_now: Vec<argus_ingest::linux::TappedPage>, bound: u64| {
        for p in pages_now {
            pages += 1;
            for r in argus_ingest::page::parse_page(&layout, &p.data).unwrap() {
                let r = r.unwrap();
                records += 1;
                max_ts = max_ts.max(r.ts);
                assert!(
                    r.ts > bound,
                    "cpu{} record at {} arrived after the frontier {bound} said it was read",
                    p.cpu,
                    r.ts
                );
            }
        }
    };
    while !waiter.is_finished() {
        let now = frontier.min().expect("the recording's CPUs").0;
        check(rx.try_iter().collect(), loaded);
        if now > loaded {
            advanced += 1;
        }
        loaded = now;
        std::thread::sleep(Duration::from_millis(2));
    }
    let summary = waiter.join().unwrap().unwrap();
    check(rx.try_iter().collect(), loaded);
    assert_eq!(pages, summary.pages, "every page went through the tap");
    assert!(records > 100_000, "the storm recorded {records} records");
    // It moved while recording (how often depends on how much CPU this loop got), and the
    // final pass, which reads every buffer empty, took it to within the commit margin of
    // the last record.
    assert!(advanced >= 2, "the frontier advanced {advanced} times");
    let last = frontier.min().unwrap().0;
    assert!(
        last + argus_ingest::linux::COMMIT_MARGIN > max_ts,
        "the frontier {last} stopped before the last record {max_ts}"
    );
}

/// The recorder hides this process's threads as it finds them, says so, says when a hidden
/// one is gone (after its end: the trace cannot show that exit), and drops gone tids from
/// `set_event_notrace_pid` so a later thread given the same tid is traced.
#[test]
fn own_threads_are_reported_hidden_then_gone_and_unlisted() {
    use argus_ingest::linux::{monotonic_ns, OwnThread};
    let Some(_lock) = live() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    let (tx, rx) = crossbeam_channel::unbounded();
    config.own_threads = Some(tx);
    let recording = Recorder::new(config).start().unwrap();
    let list = Path::new(TRACEFS)
        .join("instances")
        .join(recording.instance_name())
        .join("set_event_notrace_pid");
    let listed = || -> BTreeSet<i32> {
        fs::read_to_string(&list)
            .unwrap()
            .split_ascii_whitespace()
            .map(|t| t.parse().unwrap())
            .collect()
    };
    let stop = recording.stop_handle();
    let waiter = std::thread::spawn(move || recording.wait());

    // Three threads one after the other, each alive across a look (every 250 ms).
    let mut ended = BTreeMap::new();
    for _ in 0..3 {
        let (tid, end) = std::thread::spawn(|| {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            std::thread::sleep(Duration::from_millis(600));
            (tid, monotonic_ns())
        })
        .join()
        .unwrap();
        ended.insert(tid, end);
    }
    let mut hidden = BTreeSet::new();
    let mut gone = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while gone.len() < ended.len() && Instant::now() < deadline {
        let Ok(report) = rx.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        match report {
            OwnThread::Hidden(t) => {
                hidden.insert(t);
            }
            OwnThread::Gone { tid, noticed_ns } if ended.contains_key(&tid) => {
                assert!(hidden.contains(&tid), "{tid} gone before it was hidden");
                assert!(gone.insert(tid, noticed_ns).is_none(), "{tid} gone twice");
            }
            OwnThread::Gone { .. } => {}
        }
    }
    for (tid, end) in &ended {
        let noticed = gone.get(tid).copied();
        assert!(
            noticed.is_some_and(|n| n >= *end && n - end < 1_000_000_000),
            "thread {tid} ended at {end}: noticed gone at {noticed:?}"
        );
    }
    // The gone tids stay listed while the kernel is far from handing them out again (a
    // rewrite of the list drops records of every task: it is kept for when it is needed)...
    let last_pid = Path::new("/proc/sys/kernel/ns_last_pid");
    let cursor = || -> i32 {
        fs::read_to_string(last_pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let first = *ended.keys().min().unwrap();
    let pid_max: i32 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    // Just handed out, the tids are a whole pid space away from their reuse.
    let ahead = (first - cursor()).rem_euclid(pid_max);
    assert!(ahead > pid_max / 8, "tid {first} is {ahead} pids ahead");
    let now = listed();
    assert!(ended.keys().all(|t| now.contains(t)), "{now:?}");
    // ...and leave it at the next look once the kernel's last pid comes near them (set here
    // as a fork storm would move it: just below the first gone tid).
    let before = monotonic_ns();
    fs::write(last_pid, (first - 10).to_string()).unwrap();
    // (A read while the list is being rewritten sees it empty: wait for the rewrite.)
    let me = std::process::id() as i32;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut now = listed();
    while (ended.keys().any(|t| now.contains(t)) || !now.contains(&me)) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
        now = listed();
    }
    assert!(ended.keys().all(|t| !now.contains(t)), "{now:?}");
    assert!(now.contains(&me), "{now:?}");
    let after = monotonic_ns();

    stop.stop();
    let summary = waiter.join().unwrap().unwrap();
    // The summary names every thread ever hidden.
    assert!(ended.keys().all(|t| summary.excluded_tids.contains(t)));
    // The rewrite is a possible loss on every CPU, in `meta.json` as the kernel's losses.
    let reader = argus_ingest::replay::TraceReader::open(&tmp.path().join("trace")).unwrap();
    let ranges = &reader.meta_ext().lost_ranges;
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    for cpu in 0..cpus {
        assert!(
            ranges.get(&cpu).is_some_and(|rs| rs
                .iter()
                .any(|r| r.events.is_none() && r.from_ns >= before && r.from_ns <= after)),
            "cpu {cpu}: no possible-loss range in [{before}, {after}]: {ranges:?}"
        );
    }
}
