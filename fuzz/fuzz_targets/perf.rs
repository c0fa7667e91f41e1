//! The `perf/` part of a trace directory (`ingest/src/perffile.rs`): `streams.json`, chunks
//! of perf records (stack samples, watchpoint hits, lost records), parsed, read as `argus
//! dig` reads profiles and merged into a replayed trace as `argus build` does.
//!
//! Input, by its first byte:
//! - odd: structure-aware: streams of any sample type and records laid out for them
//!   ([`RecordSpec::encode`]), plus built pages for the trace events they attach to;
//! - even: sections: `streams.json`, a chunk's decompressed bytes, then bytes for
//!   `arbitrary` to build CPU 0's pages from (the seeds are samples as the kernel lays
//!   them out).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use argus_fuzz::pages::PageSpec;
use argus_fuzz::scratch::Scratch;
use argus_fuzz::{formats, sections, tracedir};
use argus_ingest::format::EventFormat;
use argus_ingest::perffile::{self as pf, PerfItem, PerfMerge, PerfTrace, StreamInfo, StreamKind};
use argus_ingest::replay::TraceReader;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

/// The sample-type bits the parser reads (and two it refuses).
const SAMPLE_BITS: [u64; 15] = [
    pf::SAMPLE_IP,
    pf::SAMPLE_TID,
    pf::SAMPLE_TIME,
    pf::SAMPLE_ADDR,
    pf::SAMPLE_READ,
    pf::SAMPLE_CALLCHAIN,
    pf::SAMPLE_ID,
    pf::SAMPLE_CPU,
    pf::SAMPLE_PERIOD,
    pf::SAMPLE_STREAM_ID,
    pf::SAMPLE_RAW,
    pf::SAMPLE_BRANCH_STACK,
    pf::SAMPLE_REGS_USER,
    pf::SAMPLE_STACK_USER,
    pf::SAMPLE_IDENTIFIER,
];

#[derive(Arbitrary, Debug)]
struct PerfSpec {
    streams: Vec<StreamSpec>,
    records: Vec<RecordSpec>,
    pages: Vec<PageSpec>,
    /// Bytes cut off the end of the compressed chunk.
    cut: u8,
}

#[derive(Arbitrary, Debug)]
struct StreamSpec {
    /// Bit `i` selects `SAMPLE_BITS[i]`.
    bits: u16,
    regs_user: u64,
    kind: KindSpec,
}

#[derive(Arbitrary, Debug)]
enum KindSpec {
    Stacks {
        syscalls: Vec<i32>,
    },
    Sched {
        switch_type: u16,
        waking_type: u16,
        waking_pid_offset: u8,
    },
    Profile {
        hz: u32,
    },
    Watch {
        pid: i32,
        addr: u64,
        len: u8,
        write: bool,
    },
}

#[derive(Arbitrary, Debug)]
struct RecordSpec {
    /// Index of the stream (modulo their number; its id is the index).
    stream: u8,
    /// A `PERF_RECORD_LOST` with this count instead of a sample.
    lost: Option<u64>,
    ip: u64,
    pid: i32,
    tid: i32,
    time: u64,
    addr: u64,
    cpu: u32,
    /// Callchain entries (context markers included as the values they are).
    chain: Vec<u64>,
    raw: Vec<u8>,
    abi: u64,
    regs: Vec<u64>,
    stack: Vec<u8>,
    dyn_size: u64,
    /// Added to the header's size (bytes).
    size_fudge: i8,
}

impl StreamSpec {
    fn info(&self, id: u32) -> StreamInfo {
        let sample_type = SAMPLE_BITS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits & (1 << i) != 0)
            .fold(0, |t, (_, b)| t | b);
        let kind = match &self.kind {
            KindSpec::Stacks { syscalls } => StreamKind::Stacks {
                cpu: 0,
                syscalls: syscalls.clone(),
            },
            KindSpec::Sched {
                switch_type,
                waking_type,
                waking_pid_offset,
            } => StreamKind::Sched {
                cpu: 0,
                switch_type: *switch_type,
                waking_type: *waking_type,
                waking_pid_offset: u32::from(*waking_pid_offset),
            },
            KindSpec::Profile { hz } => StreamKind::Profile { cpu: 0, hz: *hz },
            KindSpec::Watch {
                pid,
                addr,
                len,
                write,
            } => StreamKind::Watch {
                spec: format!("{pid}:{addr:#x}"),
                pid: *pid,
                tid: *pid,
                cpu: 0,
                addr: *addr,
                len: u64::from(*len),
                access: if *write { "w" } else { "rw" }.into(),
            },
        };
        StreamInfo {
            id,
            sample_type,
            regs_user: self.regs_user,
            kind,
        }
    }
}

impl RecordSpec {
    /// The record as the recorder stores it: stream id, perf header, body in the kernel's
    /// order for the stream's sample type.
    fn encode(&self, streams: &[StreamInfo]) -> Vec<u8> {
        let (id, info) = match streams.get(self.stream as usize % streams.len().max(1)) {
            Some(s) => (s.id, Some(s)),
            None => (u32::from(self.stream), None),
        };
        let mut body = Vec::new();
        let p64 = |b: &mut Vec<u8>, v: u64| b.extend_from_slice(&v.to_le_bytes());
        let p32 = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
        let kind = if let Some(lost) = self.lost {
            p64(&mut body, u64::from(id));
            p64(&mut body, lost);
            pf::RECORD_LOST
        } else {
            let t = info.map_or(0, |s| s.sample_type);
            let has = |bit: u64| t & bit != 0;
            if has(pf::SAMPLE_IDENTIFIER) {
                p64(&mut body, u64::from(id));
            }
            if has(pf::SAMPLE_IP) {
                p64(&mut body, self.ip);
            }
            if has(pf::SAMPLE_TID) {
                p32(&mut body, self.pid as u32);
                p32(&mut body, self.tid as u32);
            }
            if has(pf::SAMPLE_TIME) {
                p64(&mut body, self.time);
            }
            if has(pf::SAMPLE_ADDR) {
                p64(&mut body, self.addr);
            }
            if has(pf::SAMPLE_ID) {
                p64(&mut body, u64::from(id));
            }
            if has(pf::SAMPLE_STREAM_ID) {
                p64(&mut body, u64::from(id));
            }
            if has(pf::SAMPLE_CPU) {
                p32(&mut body, self.cpu);
                p32(&mut body, 0);
            }
            if has(pf::SAMPLE_PERIOD) {
                p64(&mut body, 1);
            }
            if has(pf::SAMPLE_CALLCHAIN) {
                p64(&mut body, self.chain.len() as u64);
                for &ip in &self.chain {
                    p64(&mut body, ip);
                }
            }
            if has(pf::SAMPLE_RAW) {
                p32(&mut body, self.raw.len() as u32);
                body.extend_from_slice(&self.raw);
            }
            if has(pf::SAMPLE_REGS_USER) {
                p64(&mut body, self.abi);
                if self.abi != 0 {
                    let n = info.map_or(0, |s| s.regs_user.count_ones() as usize);
                    for i in 0..n {
                        p64(&mut body, self.regs.get(i).copied().unwrap_or(0));
                    }
                }
            }
            if has(pf::SAMPLE_STACK_USER) {
                p64(&mut body, self.stack.len() as u64);
                if !self.stack.is_empty() {
                    body.extend_from_slice(&self.stack);
                    p64(&mut body, self.dyn_size);
                }
            }
            pf::RECORD_SAMPLE
        };
        let size = (body.len() + 8) as isize + self.size_fudge as isize;
        let mut rec = id.to_le_bytes().to_vec();
        rec.extend_from_slice(&kind.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&(size.clamp(0, 0xffff) as u16).to_le_bytes());
        rec.extend_from_slice(&body);
        rec
    }
}

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("perf"))
}

fn event_list() -> &'static Vec<EventFormat> {
    static L: OnceLock<Vec<EventFormat>> = OnceLock::new();
    L.get_or_init(|| formats::format_set().events.into_values().collect())
}

/// Writes the trace directory: formats, CPU 0's pages, `perf/streams.json` and one chunk.
fn write_trace(dir: &Path, streams: &[u8], chunk: &[u8], pages: &[PageSpec]) {
    let s = scratch();
    formats::link_tree(dir).expect("invariant: writable scratch");
    let mut raw = Vec::new();
    for p in pages.iter().take(4) {
        raw.extend_from_slice(&p.encode(event_list(), 4096).page);
    }
    let z = zstd::bulk::compress(&raw, 1).expect("invariant: compressing into a Vec");
    s.write("cpu0/000000.chunk.zst", &z);
    let chunks = BTreeMap::from([(0, 1)]);
    tracedir::write_meta(dir, &tracedir::meta(false, &chunks, &BTreeMap::new()));
    s.write("perf/streams.json", streams);
    s.write("perf/000000.perf.zst", chunk);
}

/// Reads the `perf/` part every way Argus does.
fn read(dir: &Path) {
    if let Ok(Some(trace)) = PerfTrace::open(dir) {
        for item in trace.items() {
            if let Err(e) = item {
                let msg = e.to_string();
                assert!(msg.starts_with("perf/"), "{msg}: names the chunk");
            }
        }
        let _ = trace.profile_samples(|_| true);
        let _ = trace.maps_files();
    }
    let _ = PerfMerge::load(dir, None);
    let Ok(reader) = TraceReader::open(dir) else {
        return;
    };
    let mut events = reader.events();
    let mut n = 0;
    for ev in events.by_ref() {
        if let Ok(ev) = ev {
            assert_eq!(ev.seq, n, "events are renumbered in order");
            n += 1;
        }
    }
    assert_eq!(events.finish().events, n);
}

fn built(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(spec) = PerfSpec::arbitrary(&mut u) else {
        return;
    };
    let streams: Vec<StreamInfo> = spec
        .streams
        .iter()
        .take(4)
        .enumerate()
        .map(|(i, s)| s.info(i as u32))
        .collect();
    let mut decompressed = Vec::new();
    for r in spec.records.iter().take(64) {
        decompressed.extend_from_slice(&r.encode(&streams));
    }
    let items = pf::parse_chunk(Path::new("perf/000000.perf.zst"), &decompressed, &streams);
    if let Some(Err(_)) = items.last() {
        assert_eq!(
            items.iter().filter(|i| i.is_err()).count(),
            1,
            "stops at the first error"
        );
    }
    for item in &items {
        if let Ok(PerfItem::Sample(s)) = item {
            assert!(streams.iter().any(|i| i.id == s.stream));
        }
    }
    let mut chunk = zstd::bulk::compress(&decompressed, 1).expect("invariant: compressing");
    let cut = usize::from(spec.cut) % (chunk.len() + 1);
    chunk.truncate(chunk.len() - cut);
    let file = pf::StreamsFile {
        version: pf::PERF_FORMAT_VERSION,
        streams,
    };
    let json = serde_json::to_vec(&file).expect("invariant: streams serialize");
    let s = scratch();
    s.reset();
    write_trace(s.path(), &json, &chunk, &spec.pages);
    read(s.path());
}

fn raw(data: &[u8]) {
    let parts = sections::split(data, 3);
    if let Ok(file) = serde_json::from_slice::<pf::StreamsFile>(parts[0]) {
        let _ = pf::parse_chunk(Path::new("perf/000000.perf.zst"), parts[1], &file.streams);
    }
    let mut u = Unstructured::new(parts[2]);
    let pages: Vec<PageSpec> = Vec::arbitrary(&mut u).unwrap_or_default();
    let chunk = zstd::bulk::compress(parts[1], 1).expect("invariant: compressing");
    let s = scratch();
    s.reset();
    write_trace(s.path(), parts[0], &chunk, &pages);
    read(s.path());
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 1 => built(rest),
        Some((_, rest)) => raw(rest),
        None => {}
    }
});
