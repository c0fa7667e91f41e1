//! `perf.data` files of tracepoints (`perf record -e sched:… -e raw_syscalls:…`), read
//! directly (`FORMATS.md` §5; the kernel's `tools/perf/Documentation/perf.data-file-format.txt`).
//!
//! ```text
//!  header: "PERFILE2" size attr_size attrs{offset,size} data{offset,size} event_types
//!          features bitmap[256 bits]; one {offset,size} per set bit after the data section
//!  attrs:  perf_event_attr (type, config, sample_type, flags, ...) + ids{offset,size}
//!  data:   records {u32 type, u16 misc, u16 size} + body:
//!          SAMPLE (9): fields by sample_type, RAW = the tracepoint record (common_type first)
//!          COMM (3) / FORK (7): thread names and thread groups
//!          LOST (2) / LOST_SAMPLES (13): a gap on the CPU of the record's sample_id
//!          COMPRESSED (81): zstd frames of more records (`perf record -z`)
//!  feature 1 (HEADER_TRACING_DATA): the tracepoints' format files, kallsyms, saved_cmdlines
//! ```
//!
//! Each RAW sample is decoded by the same [`Converter`] as a ring-buffer record, with the
//! format files perf saved. perf writes its per-CPU buffers round by round, so the samples are
//! put in time order per CPU before the CPUs are merged. Lost records become
//! [`super::ImportSummary::lost_ranges`]: from the CPU's last sample before the record to the
//! record's time (no edge is made across them, as for a trace directory's lost ranges).
//!
//! Not read: pipe-mode files (`perf record -o -`), big-endian files, samples of events other
//! than tracepoints (counted in the summary's notes).

use super::tracedat::TraceDat;
use super::{ImportFormat, ImportSummary, Imported};
use crate::convert::{Converter, Decoded, Skipped};
use crate::error::IngestError;
use crate::kallsyms::Kallsyms;
use crate::merge::{Merge, ThreadTable};
use crate::page::RawRecord;
use crate::perffile::{
    parse_sample, SAMPLE_ADDR, SAMPLE_CPU, SAMPLE_ID, SAMPLE_IDENTIFIER, SAMPLE_IP,
    SAMPLE_STREAM_ID, SAMPLE_TID, SAMPLE_TIME,
};
use crate::tracedir::ProcEntry;
use argus_schema::Cpu;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use zstd::stream::raw::{Decoder as ZDecoder, InBuffer, Operation, OutBuffer};

/// The first bytes of a perf.data file (little-endian).
pub const MAGIC: &[u8] = b"PERFILE2";
/// The same written by a big-endian machine.
const MAGIC_BE: &[u8] = b"2ELIFREP";
/// `struct perf_file_header` without the features bitmap.
const HEADER_SIZE: u64 = 104;
/// `PERF_TYPE_TRACEPOINT`.
const TYPE_TRACEPOINT: u32 = 2;
/// `HEADER_TRACING_DATA`.
const FEAT_TRACING_DATA: usize = 1;
/// Record types.
const RECORD_LOST: u32 = 2;
const RECORD_COMM: u32 = 3;
const RECORD_FORK: u32 = 7;
const RECORD_SAMPLE: u32 = 9;
const RECORD_LOST_SAMPLES: u32 = 13;
const RECORD_COMPRESSED: u32 = 81;
/// `attr.flags` bit `sample_id_all`.
const SAMPLE_ID_ALL: u64 = 1 << 18;
/// Most bytes one `COMPRESSED` record may give: perf compresses at most one ring flush (the
/// mmap size, 512 KiB by default) per record, so more is a crafted file, refused as it grows.
const MAX_DECOMPRESSED: u64 = 64 << 20;

/// One `perf_event_attr` with its ids.
#[derive(Clone, Debug)]
struct Attr {
    kind: u32,
    sample_type: u64,
    sample_id_all: bool,
    regs_user: u64,
}

/// A tracepoint sample waiting for the time sort.
struct Sample {
    ts: u64,
    /// Where its record starts in the file (or in the decompressed data after `at`).
    offset: u64,
    raw: Vec<u8>,
}

fn malformed(file: &Path, offset: u64, what: impl Into<String>) -> IngestError {
    IngestError::Malformed {
        file: file.to_path_buf(),
        offset,
        what: what.into(),
    }
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `(offset, size)` of a section, checked to lie inside the file.
fn section(file: &Path, bytes: &[u8], at: usize, what: &str) -> Result<(u64, u64), IngestError> {
    let (off, size) = (le_u64(bytes, at), le_u64(bytes, at + 8));
    match off.checked_add(size) {
        Some(end) if end <= bytes.len() as u64 => Ok((off, size)),
        _ => Err(malformed(
            file,
            at as u64,
            format!(
                "{what} section at {off} of {size} bytes runs past the end of the {}-byte file",
                bytes.len()
            ),
        )),
    }
}

/// Where `PERF_SAMPLE_ID` sits in a sample body of `sample_type` (the fields before it).
fn id_position(sample_type: u64) -> usize {
    [
        SAMPLE_IDENTIFIER,
        SAMPLE_IP,
        SAMPLE_TID,
        SAMPLE_TIME,
        SAMPLE_ADDR,
    ]
    .iter()
    .filter(|&&b| sample_type & b != 0)
    .count()
        * 8
}

/// The `sample_id` trailer of a non-sample record (`sample_id_all`): `(time, cpu)`.
fn trailer(sample_type: u64, body: &[u8]) -> Option<(Option<u64>, Option<u32>)> {
    let fields = [
        SAMPLE_TID,
        SAMPLE_TIME,
        SAMPLE_ID,
        SAMPLE_STREAM_ID,
        SAMPLE_CPU,
        SAMPLE_IDENTIFIER,
    ];
    let n = fields.iter().filter(|&&b| sample_type & b != 0).count() * 8;
    let mut at = body.len().checked_sub(n)?;
    let (mut time, mut cpu) = (None, None);
    for b in fields {
        if sample_type & b == 0 {
            continue;
        }
        if b == SAMPLE_TIME {
            time = Some(le_u64(body, at));
        } else if b == SAMPLE_CPU {
            cpu = Some(le_u32(body, at));
        }
        at += 8;
    }
    Some((time, cpu))
}

/// What the walk over the records collects.
struct Collected {
    /// The file's one zstd stream (`COMPRESSED` records).
    zstd: ZDecoder<'static>,
    by_cpu: BTreeMap<u32, Vec<Sample>>,
    threads: BTreeMap<i32, ProcEntry>,
    lost: u64,
    lost_ranges: Vec<(u32, u64, u64, Option<u64>)>,
    last_ts: HashMap<u32, u64>,
    not_tracepoints: u64,
    /// Bytes the `COMPRESSED` records gave so far, and the most the file may give in all
    /// ([`crate::inflate::limit_for`] its size).
    inflated: u64,
    inflate_limit: u64,
}

impl Collected {
    /// Nothing collected yet; `COMPRESSED` records may give `inflate_limit` bytes in all.
    fn new(inflate_limit: u64) -> std::io::Result<Collected> {
        Ok(Collected {
            zstd: ZDecoder::new()?,
            by_cpu: BTreeMap::new(),
            threads: BTreeMap::new(),
            lost: 0,
            lost_ranges: Vec::new(),
            last_ts: HashMap::new(),
            not_tracepoints: 0,
            inflated: 0,
            inflate_limit,
        })
    }
}

struct Reader<'a> {
    file: &'a Path,
    attrs: Vec<Attr>,
    by_id: HashMap<u64, usize>,
}

impl Reader<'_> {
    fn attr_of(&self, body: &[u8]) -> Option<&Attr> {
        let first = self.attrs.first()?;
        if self.attrs.len() == 1 {
            return Some(first);
        }
        let at = if first.sample_type & SAMPLE_IDENTIFIER != 0 {
            0
        } else if first.sample_type & SAMPLE_ID != 0 {
            id_position(first.sample_type)
        } else {
            return Some(first);
        };
        let id = (body.len() >= at + 8).then(|| le_u64(body, at))?;
        self.by_id.get(&id).map(|&i| &self.attrs[i])
    }

    /// Walks the records of `data` (at `base` of the file; `compressed` when they came out
    /// of a `COMPRESSED` record, whose offset `base` then is).
    fn walk(
        &self,
        data: &[u8],
        base: u64,
        compressed: bool,
        out: &mut Collected,
        pending: &mut Vec<u8>,
    ) -> Result<usize, IngestError> {
        let mut pos = 0usize;
        while data.len() - pos >= 8 {
            let at = if compressed { base } else { base + pos as u64 };
            let kind = le_u32(data, pos);
            let size = u16::from_le_bytes([data[pos + 6], data[pos + 7]]) as usize;
            if size < 8 {
                return Err(malformed(
                    self.file,
                    at,
                    format!("record of type {kind} with size {size} (less than its header)"),
                ));
            }
            if data.len() - pos < size {
                if compressed {
                    // The rest continues in the next COMPRESSED record.
                    break;
                }
                return Err(malformed(
                    self.file,
                    at,
                    format!(
                        "record of {size} bytes runs past the end of the data section ({} bytes left)",
                        data.len() - pos
                    ),
                ));
            }
            let body = &data[pos + 8..pos + size];
            self.record(kind, body, at, out, pending)?;
            pos += size;
        }
        Ok(pos)
    }

    fn record(
        &self,
        kind: u32,
        body: &[u8],
        at: u64,
        out: &mut Collected,
        pending: &mut Vec<u8>,
    ) -> Result<(), IngestError> {
        match kind {
            RECORD_SAMPLE => {
                let Some(attr) = self.attr_of(body) else {
                    return Err(malformed(self.file, at, "a sample whose id no attr has"));
                };
                if attr.kind != TYPE_TRACEPOINT {
                    out.not_tracepoints += 1;
                    return Ok(());
                }
                let s = parse_sample(0, attr.sample_type, attr.regs_user, body)
                    .map_err(|e| malformed(self.file, at, format!("sample: {e}")))?;
                if s.raw.is_empty() {
                    return Err(malformed(
                        self.file,
                        at,
                        "a tracepoint sample without raw data (record with -e TRACEPOINT, which samples RAW)",
                    ));
                }
                let cpu = s.cpu.unwrap_or(0);
                out.threads.entry(s.tid).or_insert_with(|| ProcEntry {
                    tid: s.tid,
                    pid: s.pid,
                    ppid: 0,
                    comm: String::new(),
                    kernel: false,
                });
                out.last_ts.insert(cpu, s.time);
                out.by_cpu.entry(cpu).or_default().push(Sample {
                    ts: s.time,
                    offset: at,
                    raw: s.raw,
                });
            }
            RECORD_COMM if body.len() >= 9 => {
                let (pid, tid) = (le_u32(body, 0) as i32, le_u32(body, 4) as i32);
                let name = &body[8..];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                let e = out.threads.entry(tid).or_insert_with(|| ProcEntry {
                    tid,
                    pid,
                    ppid: 0,
                    comm: String::new(),
                    kernel: false,
                });
                if e.comm.is_empty() {
                    e.comm = String::from_utf8_lossy(name).into_owned();
                }
            }
            RECORD_FORK if body.len() >= 16 => {
                let (pid, ppid, tid) = (
                    le_u32(body, 0) as i32,
                    le_u32(body, 4) as i32,
                    le_u32(body, 8) as i32,
                );
                out.threads.entry(tid).or_insert_with(|| ProcEntry {
                    tid,
                    pid,
                    ppid,
                    comm: String::new(),
                    kernel: false,
                });
            }
            RECORD_LOST | RECORD_LOST_SAMPLES => {
                let (n, id_at) = if kind == RECORD_LOST {
                    (body.get(8..16).map(|b| le_u64(b, 0)), 0)
                } else {
                    (body.get(0..8).map(|b| le_u64(b, 0)), 8)
                };
                let n = n.ok_or_else(|| malformed(self.file, at, "a lost record too short"))?;
                // Saturating: the counts are the file's word (issue 18).
                out.lost = out.lost.saturating_add(n);
                let attr = if kind == RECORD_LOST {
                    body.get(id_at..id_at + 8)
                        .and_then(|b| self.by_id.get(&le_u64(b, 0)))
                        .map(|&i| &self.attrs[i])
                        .or(self.attrs.first())
                } else {
                    self.attrs.first()
                };
                if let Some((Some(time), Some(cpu))) = attr
                    .filter(|a| a.sample_id_all)
                    .and_then(|a| trailer(a.sample_type, body))
                {
                    let from = out.last_ts.get(&cpu).copied().unwrap_or(time).min(time);
                    out.lost_ranges.push((cpu, from, time, Some(n)));
                }
            }
            RECORD_COMPRESSED => {
                // perf compresses with one zstd stream for the whole file, flushed (not ended)
                // at each record: the decoder carries over from record to record.
                let start = pending.len();
                let mut input = InBuffer::around(body);
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let before = input.pos();
                    let mut output = OutBuffer::around(&mut buf[..]);
                    out.zstd
                        .run(&mut input, &mut output)
                        .map_err(|e| malformed(self.file, at, format!("corrupt zstd data: {e}")))?;
                    let n = output.pos();
                    pending.extend_from_slice(&buf[..n]);
                    if (pending.len() - start) as u64 > MAX_DECOMPRESSED {
                        return Err(malformed(
                            self.file,
                            at,
                            format!("a compressed record gives more than {MAX_DECOMPRESSED} bytes"),
                        ));
                    }
                    // Records of up to 64 MiB each, as many as the file holds: bounded for
                    // the whole file too (issue 18).
                    out.inflated += n as u64;
                    if out.inflated > out.inflate_limit {
                        return Err(malformed(
                            self.file,
                            at,
                            format!(
                                "the compressed records give more than {} bytes in all ({} times \
                                 the file's size)",
                                out.inflate_limit,
                                crate::inflate::MAX_RATIO
                            ),
                        ));
                    }
                    let done = input.pos() >= body.len() && n < buf.len();
                    if done || (n == 0 && input.pos() == before) {
                        break;
                    }
                }
                let buf = std::mem::take(pending);
                // COMPRESSED records do not nest: what they hold is walked with no pending.
                let used = self.walk(&buf, at, true, out, &mut Vec::new())?;
                // A record may continue in the next COMPRESSED record: keep its start.
                *pending = buf[used..].to_vec();
            }
            _ => {}
        }
        Ok(())
    }
}

/// Imports a perf.data file (its bytes, read by [`super::open`]).
pub(super) fn import(path: &Path, bytes: &[u8]) -> Result<Imported, IngestError> {
    if bytes.starts_with(MAGIC_BE) {
        return Err(malformed(
            path,
            0,
            "a big-endian perf.data, which Argus does not read: `perf script` it on the recording machine",
        ));
    }
    if (bytes.len() as u64) < HEADER_SIZE + 32 {
        return Err(malformed(
            path,
            0,
            format!(
                "a perf.data header needs 136 bytes; the file has {}",
                bytes.len()
            ),
        ));
    }
    let header_size = le_u64(bytes, 8);
    if header_size == 16 {
        return Err(malformed(
            path,
            8,
            "a pipe-mode perf.data (perf record -o -), which Argus does not read: record to a file",
        ));
    }
    let attr_size = le_u64(bytes, 16);
    let (attrs_off, attrs_len) = section(path, bytes, 24, "attrs")?;
    let (data_off, data_len) = section(path, bytes, 40, "data")?;
    if !(64 + 16..=4096).contains(&attr_size) {
        return Err(malformed(
            path,
            16,
            format!("attr size {attr_size} is not between 80 and 4096"),
        ));
    }
    let mut attrs = Vec::new();
    let mut by_id = HashMap::new();
    // Every attr may point at the same ids: in all they may not be more than the file holds,
    // or a file of many attrs sharing a large ids section takes quadratic time (issue 18).
    let mut ids_total = 0u64;
    for i in 0..attrs_len / attr_size {
        let at = (attrs_off + i * attr_size) as usize;
        let a = &bytes[at..at + attr_size as usize];
        let attr_len = attr_size as usize - 16;
        let regs_user = if attr_len >= 88 { le_u64(a, 80) } else { 0 };
        attrs.push(Attr {
            kind: le_u32(a, 0),
            sample_type: le_u64(a, 24),
            sample_id_all: le_u64(a, 40) & SAMPLE_ID_ALL != 0,
            regs_user,
        });
        let (ids_off, ids_len) = section(path, bytes, at + attr_len, "ids")?;
        ids_total += ids_len;
        if ids_total > bytes.len() as u64 {
            return Err(malformed(
                path,
                (at + attr_len) as u64,
                format!(
                    "the attrs' ids sections add up to {ids_total} bytes, more than the {}-byte file",
                    bytes.len()
                ),
            ));
        }
        for k in 0..ids_len / 8 {
            by_id.insert(le_u64(bytes, (ids_off + 8 * k) as usize), attrs.len() - 1);
        }
    }
    if attrs.iter().all(|a| a.kind != TYPE_TRACEPOINT) {
        return Err(malformed(
            path,
            attrs_off,
            "no tracepoint events in this perf.data: record with `perf record -e sched:sched_switch -e sched:sched_waking -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit ...`",
        ));
    }
    // Feature sections follow the data, one per set bit of the bitmap.
    let feats_at = data_off + data_len;
    let mut tracing = None;
    let mut k = 0u64;
    for bit in 0..256usize {
        if le_u64(bytes, 72 + 8 * (bit / 64)) >> (bit % 64) & 1 == 0 {
            continue;
        }
        let at = feats_at + 16 * k;
        k += 1;
        if bit != FEAT_TRACING_DATA {
            continue;
        }
        if at + 16 > bytes.len() as u64 {
            return Err(malformed(
                path,
                at,
                "the feature table runs past the end of the file",
            ));
        }
        let (off, size) = section(path, bytes, at as usize, "tracing data")?;
        tracing = Some(TraceDat::parse_tracing_data(path, bytes, off, size)?);
    }
    let dat = tracing.ok_or_else(|| {
        malformed(
            path,
            72,
            "no tracing data (the tracepoints' format files) in this perf.data",
        )
    })?;
    let formats = dat.format_set(path)?;
    let conv = Converter::new(&formats).map_err(|e| IngestError::Format {
        file: path.join(e.event).join("format"),
        source: e.source,
    })?;

    let reader = Reader {
        file: path,
        attrs,
        by_id,
    };
    let mut got = Collected::new(crate::inflate::limit_for(bytes.len() as u64))
        .map_err(|e| malformed(path, 0, format!("zstd: {e}")))?;
    let mut pending = Vec::new();
    let data = &bytes[data_off as usize..(data_off + data_len) as usize];
    reader.walk(data, data_off, false, &mut got, &mut pending)?;
    if !pending.is_empty() {
        return Err(malformed(
            path,
            data_off + data_len,
            format!(
                "the compressed records end inside a record ({} bytes of it)",
                pending.len()
            ),
        ));
    }

    let mut summary = ImportSummary {
        // Saturating: a sample's CPU is the file's word (issue 18).
        cpus: got.by_cpu.keys().max().map_or(0, |&c| c.saturating_add(1)),
        lost: got.lost,
        lost_ranges: got.lost_ranges,
        ..ImportSummary::default()
    };
    if got.not_tracepoints > 0 {
        summary.notes.push(format!(
            "{} samples of events other than tracepoints not read",
            got.not_tracepoints
        ));
    }
    let mut errors = Vec::new();
    let mut streams = Vec::new();
    let mut skipped = Skipped::default();
    for (cpu, mut samples) in got.by_cpu {
        samples.sort_by_key(|s| s.ts);
        let mut conv = conv.clone();
        let mut out: Vec<Decoded> = Vec::with_capacity(samples.len());
        for s in &samples {
            let rec = RawRecord {
                ts: s.ts,
                offset: 0,
                payload: &s.raw,
            };
            match conv.convert(Cpu(cpu), &rec) {
                Ok(Some(d)) => out.push(d),
                Ok(None) => {}
                Err(e) => errors.push(malformed(
                    path,
                    s.offset,
                    format!("sample's raw data: {}", e.kind),
                )),
            }
        }
        skipped.merge(&conv.skipped());
        streams.push(out.into_iter().map(Ok::<Decoded, IngestError>));
    }
    for (id, n) in skipped.unknown_ids {
        summary.unknown.insert(format!("#{id}"), n);
    }
    summary.unknown.extend(skipped.ignored);
    // Names from saved_cmdlines where perf saw no COMM record.
    let mut threads: BTreeMap<i32, ProcEntry> = got.threads;
    for t in dat.threads() {
        let e = threads.entry(t.tid).or_insert(t.clone());
        if e.comm.is_empty() {
            e.comm = t.comm;
        }
    }
    let seed: Vec<ProcEntry> = threads.into_values().collect();
    let mut merge = Merge::new(streams, ThreadTable::from_proc(&seed));
    let events = (&mut merge).collect::<Result<Vec<_>, _>>()?;
    summary.start_ns = events.first().map(|e| e.ts);
    summary.end_ns = events.last().map(|e| e.ts);
    let (_, table) = merge.into_parts();
    let kallsyms = Kallsyms::parse(&dat.kallsyms);
    Ok(Imported {
        path: path.to_path_buf(),
        format: ImportFormat::PerfData,
        events,
        threads: table.threads(),
        errors,
        summary,
        kallsyms: (!kallsyms.is_empty()).then_some(kallsyms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PERF_RECORD_LOST` records whose counts add up past `u64::MAX`: the count saturates
    /// and each is a lost range with its own count (the attr has `sample_id_all`, so the
    /// records carry time and CPU).
    // See: issue 18 (fuzzing), docs/fuzzing.md.
    #[test]
    fn gh_18_lost_counts_saturate() {
        let file = Path::new("perf.data");
        let reader = Reader {
            file,
            attrs: vec![Attr {
                kind: TYPE_TRACEPOINT,
                sample_type: SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU,
                sample_id_all: true,
                regs_user: 0,
            }],
            by_id: HashMap::new(),
        };
        let mut data = Vec::new();
        for time in [10u64, 20] {
            let mut body = Vec::new();
            body.extend_from_slice(&0u64.to_le_bytes()); // id
            body.extend_from_slice(&u64::MAX.to_le_bytes()); // lost
            body.extend_from_slice(&7u64.to_le_bytes()); // pid, tid
            body.extend_from_slice(&time.to_le_bytes());
            body.extend_from_slice(&1u64.to_le_bytes()); // cpu, res
            data.extend_from_slice(&RECORD_LOST.to_le_bytes());
            data.extend_from_slice(&0u16.to_le_bytes());
            data.extend_from_slice(&((body.len() + 8) as u16).to_le_bytes());
            data.extend(body);
        }
        let mut out = collected(u64::MAX);
        let used = reader
            .walk(&data, 0, false, &mut out, &mut Vec::new())
            .expect("lost records walk");
        assert_eq!(used, data.len());
        assert_eq!(out.lost, u64::MAX);
        assert_eq!(
            out.lost_ranges,
            vec![(1, 10, 10, Some(u64::MAX)), (1, 20, 20, Some(u64::MAX))]
        );
    }

    fn collected(inflate_limit: u64) -> Collected {
        Collected::new(inflate_limit).expect("a zstd decoder")
    }

    /// Attrs that all point at the same ids section: each id was inserted once per attr, so
    /// a file of N attrs over an ids section of M ids took N × M steps (quadratic in the
    /// file). The ids sections may add up to the file at most; the error names the attr's
    /// ids pointer.
    // See: issue 18 (fuzzing, target import_perfdata), docs/fuzzing.md.
    #[test]
    fn gh_18_attrs_sharing_their_ids_are_refused() {
        let path = Path::new("ids.perf.data");
        let (nattrs, ids_len) = (4u64, 400u64);
        let attr_size = 152u64;
        let ids_at = HEADER_SIZE + nattrs * attr_size;
        let end = ids_at + ids_len;
        let mut b = MAGIC.to_vec();
        for v in [
            HEADER_SIZE,
            attr_size,
            HEADER_SIZE,
            nattrs * attr_size,
            end,
            0,
            0,
            0,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.resize(HEADER_SIZE as usize, 0);
        for _ in 0..nattrs {
            let mut a = vec![0u8; attr_size as usize];
            a[..4].copy_from_slice(&TYPE_TRACEPOINT.to_le_bytes());
            a[136..144].copy_from_slice(&ids_at.to_le_bytes());
            a[144..152].copy_from_slice(&ids_len.to_le_bytes());
            b.extend(a);
        }
        b.resize(end as usize, 0);
        let Err(err) = import(path, &b) else {
            panic!("attrs sharing their ids import")
        };
        let IngestError::Malformed { file, offset, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(file, path);
        // The third attr's ids: 1200 bytes of ids in a 1112-byte file.
        assert_eq!(*offset, HEADER_SIZE + 2 * attr_size + 136, "{err}");
    }

    /// `COMPRESSED` records of a few bytes of zstd RLE blocks each give up to 64 MiB, and a
    /// file holds as many records as it has room for: what they give in all is bounded by the
    /// file's size; the error names the record that went past it.
    // See: issue 18 (fuzzing, target import_perfdata), docs/fuzzing.md.
    #[test]
    fn gh_18_compressed_records_are_bounded_for_the_whole_file() {
        let reader = Reader {
            file: Path::new("z.perf.data"),
            attrs: vec![Attr {
                kind: TYPE_TRACEPOINT,
                sample_type: SAMPLE_TID | SAMPLE_TIME,
                sample_id_all: false,
                regs_user: 0,
            }],
            by_id: HashMap::new(),
        };
        // 0x10 bytes are records of an unknown type 0x10101010 and 0x1010 bytes each.
        let frame = argus_testkit::zstd_rle_bomb(768 << 10, 0x10);
        let mut record = RECORD_COMPRESSED.to_le_bytes().to_vec();
        record.extend_from_slice(&0u16.to_le_bytes());
        record.extend_from_slice(&((frame.len() + 8) as u16).to_le_bytes());
        record.extend_from_slice(&frame);
        let data = [record.clone(), record.clone(), record.clone()].concat();
        let mut out = collected(1 << 20);
        let Err(err) = reader.walk(&data, 4096, false, &mut out, &mut Vec::new()) else {
            panic!("2.25 MiB of records pass a 1 MiB bound")
        };
        let IngestError::Malformed { offset, what, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(*offset, 4096 + record.len() as u64, "{err}");
        assert!(what.contains("more than 1048576 bytes in all"), "{what}");
        // Within the bound, the same records are read.
        let mut out = collected(u64::MAX);
        reader
            .walk(&data, 4096, false, &mut out, &mut Vec::new())
            .expect("within the bound");
        assert_eq!(out.inflated, 3 * (768 << 10));
    }

    /// A sample on CPU `u32::MAX` (a mutated perf.data): counting the CPUs as the highest
    /// plus one overflowed. The count saturates; the sample is read (its event unknown).
    // See: issue 18 (fuzzing, target import_perfdata), docs/fuzzing.md.
    #[test]
    fn gh_18_a_sample_on_the_last_cpu_number() {
        let path = Path::new("cpu.perf.data");
        let p64 = |b: &mut Vec<u8>, v: u64| b.extend_from_slice(&v.to_le_bytes());
        let p32 = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
        // The tracing data: a 64-bit header_page and no event formats.
        let header_page = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
                           \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
                           \tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n";
        let mut tracing = super::super::tracedat::MAGIC.to_vec();
        tracing.extend_from_slice(b"0.6\0\0\x08");
        p32(&mut tracing, 4096);
        tracing.extend_from_slice(b"header_page\0");
        p64(&mut tracing, header_page.len() as u64);
        tracing.extend_from_slice(header_page.as_bytes());
        tracing.extend_from_slice(b"header_event\0");
        p64(&mut tracing, 0);
        for _ in 0..4 {
            p32(&mut tracing, 0); // ftrace formats, systems, kallsyms, printk formats
        }
        p64(&mut tracing, 0); // saved cmdlines
                              // One sample: tid, time, cpu u32::MAX, 8 bytes of raw record of event 1.
        let mut body = Vec::new();
        p32(&mut body, 5);
        p32(&mut body, 5);
        p64(&mut body, 1000);
        p32(&mut body, u32::MAX);
        p32(&mut body, 0);
        p32(&mut body, 12);
        body.extend_from_slice(&[1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
        let mut data = Vec::new();
        p32(&mut data, RECORD_SAMPLE);
        data.extend_from_slice(&0u16.to_le_bytes());
        data.extend_from_slice(&((body.len() + 8) as u16).to_le_bytes());
        data.extend(body);
        let attr_size = 152u64;
        let data_at = HEADER_SIZE + attr_size;
        let feats_at = data_at + data.len() as u64;
        let mut b = MAGIC.to_vec();
        for v in [HEADER_SIZE, attr_size, HEADER_SIZE, attr_size, data_at] {
            p64(&mut b, v);
        }
        for v in [data.len() as u64, 0, 0, 1 << FEAT_TRACING_DATA, 0, 0, 0] {
            p64(&mut b, v);
        }
        let mut a = vec![0u8; attr_size as usize];
        a[..4].copy_from_slice(&TYPE_TRACEPOINT.to_le_bytes());
        a[24..32].copy_from_slice(
            &(SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | crate::perffile::SAMPLE_RAW).to_le_bytes(),
        );
        b.extend(a);
        b.extend(data);
        p64(&mut b, feats_at + 16);
        p64(&mut b, tracing.len() as u64);
        b.extend(tracing);
        let imported = match import(path, &b) {
            Ok(i) => i,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(imported.summary().cpus, u32::MAX);
        assert_eq!(imported.summary().unknown.get("#1"), Some(&1));
        assert!(imported.errors().is_empty(), "{:?}", imported.errors());
    }
}
