//! Writers of other tools' binary recordings, for the seeds of the importer targets
//! (`import_tracedat`, `import_perfdata`, `import_perfetto`): trace-cmd's `trace.dat` v6 and v7
//! (uncompressed or zstd), `perf.data` of tracepoint samples (plain or `perf record -z`
//! COMPRESSED records) and Perfetto protobuf traces.
//!
//! The layouts are the ones Argus's readers read (`ingest/src/import/tracedat.rs`,
//! `perfdata.rs`, `perfetto.rs`, whose module docs give them, and `FORMATS.md` §4–5 of
//! `../shared/realtraces`); the seeds generator checks every file it writes by importing it.

use argus_ingest::import::TraceDat;
use std::io::Write as _;

/// The first bytes of every `trace.dat` (`argus_ingest`'s `tracedat::MAGIC`).
pub const TRACEDAT_MAGIC: &[u8] = b"\x17\x08\x44tracing";
/// The first bytes of a little-endian `perf.data`.
pub const PERF_MAGIC: &[u8] = b"PERFILE2";

fn p16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn p32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn p64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn cstr(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(s.as_bytes());
    b.push(0);
}

/// What a `trace.dat` holds, to be written as v6 or v7.
#[derive(Clone, Debug, Default)]
pub struct Dat {
    /// `sizeof(long)` of the recording's user space.
    pub long_size: u8,
    /// Ring-buffer page size.
    pub page_size: u32,
    /// `events/header_page` text.
    pub header_page: String,
    /// `events/header_event` text.
    pub header_event: String,
    /// `(system, format text)`: `ftrace` ones go to the ftrace formats.
    pub formats: Vec<(String, String)>,
    /// `/proc/kallsyms` text.
    pub kallsyms: String,
    /// `printk_formats` text.
    pub printk: String,
    /// `saved_cmdlines` text.
    pub cmdlines: String,
    /// The trace clock (a `TRACECLOCK` option).
    pub clock: Option<String>,
    /// An `OFFSET` option.
    pub ts_offset: Option<i64>,
    /// Each CPU's pages, back to back.
    pub cpus: Vec<Vec<u8>>,
}

impl Dat {
    /// The parts of a parsed file (its pages as they are).
    pub fn from_trace_dat(t: &TraceDat) -> Dat {
        Dat {
            long_size: t.long_size,
            page_size: t.page_size as u32,
            header_page: t.header_page.clone(),
            header_event: t.header_event.clone(),
            formats: t.formats.clone(),
            kallsyms: t.kallsyms.clone(),
            printk: t.printk_formats.clone(),
            cmdlines: t.cmdlines.clone(),
            clock: t.clock.clone(),
            ts_offset: (t.ts_offset != 0).then_some(t.ts_offset),
            cpus: t.cpus.iter().map(|c| c.pages.clone()).collect(),
        }
    }

    fn header_info(&self) -> Vec<u8> {
        let mut b = Vec::new();
        cstr(&mut b, "header_page");
        p64(&mut b, self.header_page.len() as u64);
        b.extend_from_slice(self.header_page.as_bytes());
        cstr(&mut b, "header_event");
        p64(&mut b, self.header_event.len() as u64);
        b.extend_from_slice(self.header_event.as_bytes());
        b
    }

    fn ftrace_events(&self) -> Vec<u8> {
        let ftrace: Vec<&String> = self
            .formats
            .iter()
            .filter(|(s, _)| s == "ftrace")
            .map(|(_, t)| t)
            .collect();
        let mut b = Vec::new();
        p32(&mut b, ftrace.len() as u32);
        for t in ftrace {
            p64(&mut b, t.len() as u64);
            b.extend_from_slice(t.as_bytes());
        }
        b
    }

    fn event_formats(&self) -> Vec<u8> {
        let mut systems: Vec<(&str, Vec<&String>)> = Vec::new();
        for (s, t) in self.formats.iter().filter(|(s, _)| s != "ftrace") {
            match systems.iter_mut().find(|(n, _)| n == s) {
                Some((_, v)) => v.push(t),
                None => systems.push((s, vec![t])),
            }
        }
        let mut b = Vec::new();
        p32(&mut b, systems.len() as u32);
        for (s, texts) in systems {
            cstr(&mut b, s);
            p32(&mut b, texts.len() as u32);
            for t in texts {
                p64(&mut b, t.len() as u64);
                b.extend_from_slice(t.as_bytes());
            }
        }
        b
    }

    fn kallsyms_section(&self) -> Vec<u8> {
        let mut b = Vec::new();
        p32(&mut b, self.kallsyms.len() as u32);
        b.extend_from_slice(self.kallsyms.as_bytes());
        b
    }

    fn printk_section(&self) -> Vec<u8> {
        let mut b = Vec::new();
        p32(&mut b, self.printk.len() as u32);
        b.extend_from_slice(self.printk.as_bytes());
        b
    }

    fn cmdlines_section(&self) -> Vec<u8> {
        let mut b = Vec::new();
        p64(&mut b, self.cmdlines.len() as u64);
        b.extend_from_slice(self.cmdlines.as_bytes());
        b
    }

    /// The clock and offset options, as `(id, data)`.
    fn options(&self) -> Vec<(u16, Vec<u8>)> {
        let mut o = Vec::new();
        if let Some(c) = &self.clock {
            let mut d = format!("[{c}] global counter").into_bytes();
            d.push(0);
            o.push((4, d));
        }
        if let Some(off) = self.ts_offset {
            let mut d = off.to_string().into_bytes();
            d.push(0);
            o.push((7, d));
        }
        o.push((8, (self.cpus.len() as u32).to_le_bytes().to_vec()));
        o
    }

    fn start(&self, version: &str) -> Vec<u8> {
        let mut b = TRACEDAT_MAGIC.to_vec();
        cstr(&mut b, version);
        b.push(0);
        b.push(self.long_size);
        p32(&mut b, self.page_size);
        b
    }

    /// A v6 file: the header parts in order, options, `flyrecord` and the pages.
    pub fn v6(&self) -> Vec<u8> {
        let mut b = self.header_parts("6");
        p32(&mut b, self.cpus.len() as u32);
        b.extend_from_slice(b"options  \0");
        for (id, d) in self.options() {
            p16(&mut b, id);
            p32(&mut b, d.len() as u32);
            b.extend(d);
        }
        p16(&mut b, 0);
        b.extend_from_slice(b"flyrecord\0");
        // The pages start at the next page boundary, as trace-cmd writes them.
        let table = b.len() + 16 * self.cpus.len();
        let mut at = table.div_ceil(self.page_size as usize) * self.page_size as usize;
        for pages in &self.cpus {
            p64(&mut b, at as u64);
            p64(&mut b, pages.len() as u64);
            at += pages.len();
        }
        b.resize(
            table.div_ceil(self.page_size as usize) * self.page_size as usize,
            0,
        );
        for pages in &self.cpus {
            b.extend_from_slice(pages);
        }
        b
    }

    /// A v7 file: sections (compressed with zstd when `zstd`), the buffer data (in chunks of
    /// `chunk_pages` pages when compressed), and one options section pointing at them.
    pub fn v7(&self, zstd: bool, chunk_pages: usize) -> Vec<u8> {
        let mut b = self.start("7");
        if zstd {
            cstr(&mut b, "zstd");
            cstr(&mut b, "1.5.5");
        } else {
            cstr(&mut b, "none");
            cstr(&mut b, "");
        }
        let options_at = b.len();
        p64(&mut b, 0);
        let section = |b: &mut Vec<u8>, id: u16, body: &[u8]| -> u64 {
            let at = b.len() as u64;
            p16(b, id);
            p16(b, u16::from(zstd));
            p32(b, 0);
            if zstd {
                let c = zstd::bulk::compress(body, 3).expect("zstd");
                p64(b, c.len() as u64 + 8);
                p32(b, c.len() as u32);
                p32(b, body.len() as u32);
                b.extend(c);
            } else {
                p64(b, body.len() as u64);
                b.extend_from_slice(body);
            }
            at
        };
        let mut opts: Vec<(u16, Vec<u8>)> = Vec::new();
        for (id, body) in [
            (16u16, self.header_info()),
            (17, self.ftrace_events()),
            (18, self.event_formats()),
            (19, self.kallsyms_section()),
            (20, self.printk_section()),
            (21, self.cmdlines_section()),
        ] {
            let at = section(&mut b, id, &body);
            opts.push((id, at.to_le_bytes().to_vec()));
        }
        // The buffer data: a section header, then each CPU's data (chunks when compressed).
        let datas: Vec<Vec<u8>> = self
            .cpus
            .iter()
            .map(|pages| {
                if !zstd {
                    return pages.clone();
                }
                let chunk = (chunk_pages.max(1) * self.page_size as usize).max(1);
                let chunks: Vec<&[u8]> = pages.chunks(chunk).collect();
                let mut d = Vec::new();
                p32(&mut d, chunks.len() as u32);
                for c in chunks {
                    let z = zstd::bulk::compress(c, 3).expect("zstd");
                    p32(&mut d, z.len() as u32);
                    p32(&mut d, c.len() as u32);
                    d.extend(z);
                }
                d
            })
            .collect();
        let buffer_at = b.len() as u64;
        p16(&mut b, 3);
        p16(&mut b, u16::from(zstd));
        p32(&mut b, 0);
        p64(&mut b, datas.iter().map(|d| d.len() as u64).sum());
        let mut buffer = Vec::new();
        p64(&mut buffer, buffer_at);
        cstr(&mut buffer, "");
        cstr(&mut buffer, self.clock.as_deref().unwrap_or("local"));
        p32(&mut buffer, self.page_size);
        p32(&mut buffer, datas.len() as u32);
        for (cpu, d) in datas.iter().enumerate() {
            p32(&mut buffer, cpu as u32);
            p64(&mut buffer, b.len() as u64);
            p64(&mut buffer, d.len() as u64);
            b.extend_from_slice(d);
        }
        opts.push((3, buffer));
        opts.extend(self.options());
        let mut body = Vec::new();
        for (id, d) in opts {
            p16(&mut body, id);
            p32(&mut body, d.len() as u32);
            body.extend(d);
        }
        p16(&mut body, 0);
        p32(&mut body, 8);
        p64(&mut body, 0);
        let at = section(&mut b, 0, &body);
        b[options_at..options_at + 8].copy_from_slice(&at.to_le_bytes());
        b
    }

    /// perf's `HEADER_TRACING_DATA`: the v6 header up to `saved_cmdlines`, version `0.6`.
    pub fn tracing_data(&self) -> Vec<u8> {
        self.header_parts("0.6")
    }

    /// The v6 layout's start and header parts up to `saved_cmdlines`, as `version`.
    fn header_parts(&self, version: &str) -> Vec<u8> {
        let mut b = self.start(version);
        b.extend(self.header_info());
        b.extend(self.ftrace_events());
        b.extend(self.event_formats());
        b.extend(self.kallsyms_section());
        b.extend(self.printk_section());
        b.extend(self.cmdlines_section());
        b
    }
}

/// `perf_event_attr.sample_type` of the samples written: identifier, ip, tid, time, cpu,
/// period, raw (what `perf record -e TRACEPOINT` with several events asks for).
pub const PERF_SAMPLE_TYPE: u64 =
    (1 << 16) | 1 | (1 << 1) | (1 << 2) | (1 << 7) | (1 << 8) | (1 << 10);
/// `attr.flags`: `sample_id_all`.
const SAMPLE_ID_ALL: u64 = 1 << 18;
/// `sizeof(struct perf_event_attr)` (`PERF_ATTR_SIZE_VER8`).
const ATTR_SIZE: usize = 136;

/// One record of a perf.data's data section.
#[derive(Clone, Debug)]
pub enum PerfRecord {
    /// A tracepoint sample: the attr's id, time, cpu, tid/pid, the raw record.
    Sample {
        /// The sample id (of an attr).
        id: u64,
        /// Time.
        time: u64,
        /// CPU.
        cpu: u32,
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// The tracepoint record (common_type first).
        raw: Vec<u8>,
    },
    /// `PERF_RECORD_COMM`.
    Comm {
        /// Process, thread.
        pid: u32,
        /// Thread.
        tid: u32,
        /// Name.
        comm: String,
        /// Time (sample_id trailer).
        time: u64,
    },
    /// `PERF_RECORD_FORK`.
    Fork {
        /// Child process.
        pid: u32,
        /// Parent process.
        ppid: u32,
        /// Child thread.
        tid: u32,
        /// Parent thread.
        ptid: u32,
        /// Time.
        time: u64,
    },
    /// `PERF_RECORD_LOST`: `lost` events of attr `id` on `cpu` before `time`.
    Lost {
        /// The attr's id.
        id: u64,
        /// Events lost.
        lost: u64,
        /// CPU.
        cpu: u32,
        /// Time.
        time: u64,
    },
}

impl PerfRecord {
    /// The record: header and body.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        let trailer = |body: &mut Vec<u8>, pid: u32, tid: u32, time: u64, cpu: u32, id: u64| {
            p32(body, pid);
            p32(body, tid);
            p64(body, time);
            p32(body, cpu);
            p32(body, 0);
            p64(body, id);
        };
        let kind = match self {
            PerfRecord::Sample {
                id,
                time,
                cpu,
                pid,
                tid,
                raw,
            } => {
                p64(&mut body, *id);
                p64(&mut body, 0xffff_ffff_8100_0000);
                p32(&mut body, *pid);
                p32(&mut body, *tid);
                p64(&mut body, *time);
                p32(&mut body, *cpu);
                p32(&mut body, 0);
                p64(&mut body, 1);
                // RAW: u32 size, then the data padded so the record stays 8-byte aligned.
                let size = (raw.len() + 4).div_ceil(8) * 8 - 4;
                p32(&mut body, size as u32);
                body.extend_from_slice(raw);
                body.resize(body.len() + size - raw.len(), 0);
                9
            }
            PerfRecord::Comm {
                pid,
                tid,
                comm,
                time,
            } => {
                p32(&mut body, *pid);
                p32(&mut body, *tid);
                let mut name = comm.as_bytes().to_vec();
                name.push(0);
                name.resize(name.len().div_ceil(8) * 8, 0);
                body.extend(name);
                trailer(&mut body, *pid, *tid, *time, 0, 0);
                3
            }
            PerfRecord::Fork {
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => {
                for v in [pid, ppid, tid, ptid] {
                    p32(&mut body, *v);
                }
                p64(&mut body, *time);
                trailer(&mut body, *pid, *tid, *time, 0, 0);
                7
            }
            PerfRecord::Lost {
                id,
                lost,
                cpu,
                time,
            } => {
                p64(&mut body, *id);
                p64(&mut body, *lost);
                trailer(&mut body, 0, 0, *time, *cpu, *id);
                2
            }
        };
        let mut r = Vec::new();
        p32(&mut r, kind);
        p16(&mut r, 0);
        p16(&mut r, (body.len() + 8) as u16);
        r.extend(body);
        r
    }
}

/// A perf.data file: one tracepoint attr per `(event id, sample ids)`, the records, and the
/// `HEADER_TRACING_DATA` feature. With `compressed = Some(n)`, the records are one zstd
/// stream flushed every `n` bytes of records into `COMPRESSED` records (`perf record -z`; a
/// record may continue in the next one).
pub fn perf_data(
    attrs: &[(u64, Vec<u64>)],
    records: &[PerfRecord],
    tracing_data: &[u8],
    compressed: Option<usize>,
) -> Vec<u8> {
    let header = 104usize;
    let attr_size = ATTR_SIZE + 16;
    let attrs_at = header;
    let ids_at = attrs_at + attrs.len() * attr_size;
    let mut ids_pos = ids_at;
    let mut attr_bytes = Vec::new();
    let mut id_bytes = Vec::new();
    for (config, ids) in attrs {
        let mut a = Vec::new();
        p32(&mut a, 2); // PERF_TYPE_TRACEPOINT
        p32(&mut a, ATTR_SIZE as u32);
        p64(&mut a, *config);
        p64(&mut a, 1); // sample_period
        p64(&mut a, PERF_SAMPLE_TYPE);
        p64(&mut a, 0); // read_format
        p64(&mut a, SAMPLE_ID_ALL | 1 << 1); // sample_id_all, inherit
        a.resize(ATTR_SIZE, 0);
        p64(&mut a, ids_pos as u64);
        p64(&mut a, 8 * ids.len() as u64);
        attr_bytes.extend(a);
        for id in ids {
            p64(&mut id_bytes, *id);
        }
        ids_pos += 8 * ids.len();
    }
    let plain: Vec<u8> = records.iter().flat_map(PerfRecord::encode).collect();
    let data = match compressed {
        None => plain,
        Some(step) => {
            let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
            let mut data = Vec::new();
            for part in plain.chunks(step.clamp(1, 32 << 10)) {
                enc.write_all(part).expect("zstd");
                enc.flush().expect("zstd");
                let z = std::mem::take(enc.get_mut());
                for piece in z.chunks(60 << 10) {
                    p32(&mut data, 81);
                    p16(&mut data, 0);
                    p16(&mut data, (piece.len() + 8) as u16);
                    data.extend_from_slice(piece);
                }
            }
            data
        }
    };
    let data_at = ids_pos;
    let feats_at = data_at + data.len();
    let tracing_at = feats_at + 16;
    let mut b = PERF_MAGIC.to_vec();
    p64(&mut b, header as u64);
    p64(&mut b, attr_size as u64);
    p64(&mut b, attrs_at as u64);
    p64(&mut b, attr_bytes.len() as u64);
    p64(&mut b, data_at as u64);
    p64(&mut b, data.len() as u64);
    p64(&mut b, 0); // event_types
    p64(&mut b, 0);
    p64(&mut b, 1 << 1); // HEADER_TRACING_DATA
    p64(&mut b, 0);
    p64(&mut b, 0);
    p64(&mut b, 0);
    b.extend(attr_bytes);
    b.extend(id_bytes);
    b.extend(data);
    p64(&mut b, tracing_at as u64);
    p64(&mut b, tracing_data.len() as u64);
    b.extend_from_slice(tracing_data);
    b
}

/// Protobuf encoding.
pub mod proto {
    /// A varint.
    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    /// Field `num` as a varint.
    pub fn uint(out: &mut Vec<u8>, num: u32, v: u64) {
        varint(out, u64::from(num) << 3);
        varint(out, v);
    }

    /// Field `num` as a signed varint (two's complement, as protobuf's `int32`/`int64`).
    pub fn int(out: &mut Vec<u8>, num: u32, v: i64) {
        uint(out, num, v as u64);
    }

    /// Field `num`, length-delimited.
    pub fn bytes(out: &mut Vec<u8>, num: u32, body: &[u8]) {
        varint(out, u64::from(num) << 3 | 2);
        varint(out, body.len() as u64);
        out.extend_from_slice(body);
    }

    /// Field `num`, a packed repeated varint.
    pub fn packed(out: &mut Vec<u8>, num: u32, values: &[u64]) {
        let mut body = Vec::new();
        for &v in values {
            varint(&mut body, v);
        }
        bytes(out, num, &body);
    }
}
