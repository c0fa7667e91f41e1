//! The chunk and frame reader of replay (`ingest/src/replay.rs`): a trace directory whose
//! `cpuN/NNNNNN.chunk.zst` files are zstd frames of pages (frames cut short, garbage between
//! frames, partial pages, chunks missing or deleted by the ring, a trace still recording
//! whose newest chunk ends in a torn frame), read to the end as `argus build` does; and a
//! window of it as `argus build --last` does.
//!
//! Input, by its first byte:
//! - odd: structure-aware: CPUs of chunks of frames of built pages
//!   ([`argus_fuzz::pages::PageSpec`]) with the 6.18 formats;
//! - even: sections: format files (`SYS/EVENT\n<text>` entries; none: the 6.18 formats),
//!   `cpu0/000000.chunk.zst` and `cpu1/000000.chunk.zst` as bytes (the seeds are the
//!   chunks of the demo's recording); bit 1 of the first byte: status `recording`.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use argus_fuzz::pages::PageSpec;
use argus_fuzz::scratch::Scratch;
use argus_fuzz::{formats, sections, tracedir};
use argus_ingest::format::EventFormat;
use argus_ingest::replay::TraceReader;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Arbitrary, Debug)]
struct TraceSpec {
    recording: bool,
    cpus: Vec<CpuSpec>,
    window_ms: Option<u16>,
}

#[derive(Arbitrary, Debug)]
struct CpuSpec {
    /// Chunks deleted by the ring before the first one written (0..=3).
    dropped: u8,
    chunks: Vec<ChunkSpec>,
}

#[derive(Arbitrary, Debug)]
struct ChunkSpec {
    frames: Vec<FrameSpec>,
    /// Bytes cut off the end of the file (modulo its length + 1).
    cut: u16,
}

#[derive(Arbitrary, Debug)]
enum FrameSpec {
    /// One zstd frame of whole pages.
    Pages(Vec<PageSpec>),
    /// One zstd frame of these bytes (not a whole number of pages, usually).
    Bytes(Vec<u8>),
    /// These bytes as they are, between frames.
    Garbage(Vec<u8>),
}

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("chunks"))
}

fn event_list() -> &'static Vec<EventFormat> {
    static L: OnceLock<Vec<EventFormat>> = OnceLock::new();
    L.get_or_init(|| formats::format_set().events.into_values().collect())
}

fn compress(bytes: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(bytes, 1).expect("invariant: compressing into a Vec")
}

/// Reads the whole trace and checks what replay promises: events in time order numbered
/// 0, 1, 2...; every error names a file of the trace.
fn replay(dir: &Path, window: Option<Duration>) {
    let reader = match window {
        Some(w) => TraceReader::open_window(dir, w),
        None => TraceReader::open(dir),
    };
    let Ok(reader) = reader else {
        return;
    };
    let _ = reader.ring_chunks();
    let _ = reader.start_ns();
    let mut events = reader.events();
    let mut last = None;
    let mut seq = 0;
    for ev in events.by_ref() {
        match ev {
            Ok(ev) => {
                assert_eq!(ev.seq, seq, "events are numbered in order");
                seq += 1;
                if let Some(prev) = last {
                    assert!(ev.ts >= prev, "merged events go forward in time");
                }
                last = Some(ev.ts);
            }
            Err(e) => {
                assert!(e.file().is_some(), "{e}: names a file");
                let _ = e.to_error_record();
            }
        }
    }
    let summary = events.finish();
    assert_eq!(summary.events, seq);
}

fn built(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(spec) = TraceSpec::arbitrary(&mut u) else {
        return;
    };
    let s = scratch();
    s.reset();
    let dir = s.path();
    formats::link_tree(dir).expect("invariant: writable scratch");
    let mut chunks = BTreeMap::new();
    let mut dropped = BTreeMap::new();
    for (cpu, c) in spec.cpus.iter().take(3).enumerate() {
        let cpu = cpu as u32;
        let first = u32::from(c.dropped % 4);
        if first > 0 {
            dropped.insert(cpu, first);
        }
        let mut seq = first;
        for chunk in c.chunks.iter().take(3) {
            let mut file = Vec::new();
            for frame in chunk.frames.iter().take(4) {
                match frame {
                    FrameSpec::Pages(pages) => {
                        let mut raw = Vec::new();
                        for p in pages.iter().take(6) {
                            raw.extend_from_slice(&p.encode(event_list(), 4096).page);
                        }
                        file.extend_from_slice(&compress(&raw));
                    }
                    FrameSpec::Bytes(b) => file.extend_from_slice(&compress(b)),
                    FrameSpec::Garbage(b) => file.extend_from_slice(b),
                }
            }
            let cut = chunk.cut as usize % (file.len() + 1);
            file.truncate(file.len() - cut);
            s.write(&format!("cpu{cpu}/{seq:06}.chunk.zst"), &file);
            seq += 1;
        }
        chunks.insert(cpu, seq);
    }
    tracedir::write_meta(dir, &tracedir::meta(spec.recording, &chunks, &dropped));
    replay(dir, None);
    if let Some(ms) = spec.window_ms {
        replay(dir, Some(Duration::from_millis(ms.into())));
    }
}

fn raw(recording: bool, data: &[u8]) {
    let parts = sections::split(data, 3);
    let s = scratch();
    s.reset();
    let dir = s.path();
    let entries = sections::parse_format_entries(parts[0]);
    if entries.is_empty() {
        formats::link_tree(dir).expect("invariant: writable scratch");
    } else {
        s.write("formats/header_page", formats::HEADER_PAGE.as_bytes());
        for (path, text) in entries {
            // Only `SYS/EVENT` names: anything else would leave the scratch directory.
            let mut parts = path.split('/');
            let (Some(sys), Some(ev), None) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let ok = |p: &str| {
                !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            };
            if ok(sys) && ok(ev) {
                s.write(
                    &format!("formats/events/{sys}/{ev}/format"),
                    text.as_bytes(),
                );
            }
        }
    }
    let mut chunks = BTreeMap::new();
    for (cpu, bytes) in [(0u32, parts[1]), (1, parts[2])] {
        s.write(&format!("cpu{cpu}/000000.chunk.zst"), bytes);
        chunks.insert(cpu, 1);
    }
    tracedir::write_meta(dir, &tracedir::meta(recording, &chunks, &BTreeMap::new()));
    replay(dir, None);
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 1 => built(rest),
        Some((mode, rest)) => raw(mode & 2 != 0, rest),
        None => {}
    }
});
