//! trace-cmd's `trace.dat`, versions 6 and 7 (`FORMATS.md` §4; trace-cmd's
//! `trace-cmd.dat.v6(5)` and `trace-cmd.dat.v7(5)`), read directly.
//!
//! ```text
//!  v6: magic "tracing" "6" endian long_size page_size
//!      header_page, header_event, ftrace formats, event formats by system, kallsyms,
//!      printk formats, saved cmdlines, cpu count, options…, "flyrecord" (offset, size) per CPU
//!  v7: magic "tracing" "7" endian long_size page_size compression\0version\0 options_offset
//!      OPTIONS sections (chained) point at the HEADER_INFO, FTRACE_EVENTS, EVENT_FORMATS,
//!      KALLSYMS, PRINTK and CMDLINES sections and give one BUFFER option per instance:
//!      (section offset, name, clock, page size, (cpu, offset, size) per CPU); a section may be
//!      compressed (u32 csize, u32 usize, data), a compressed CPU's data is a list of chunks
//! ```
//!
//! What the file holds becomes a [`TraceDat`]: the format texts, kallsyms, `saved_cmdlines`
//! and the top instance's raw pages per CPU (decompressed), which the importer decodes as any
//! ring-buffer pages ([`super::raw`]). Every size and offset is checked against the file
//! before it is used, and a decompressed size against what the header declares, so a
//! truncated or crafted file is an [`IngestError::Malformed`] naming the file and the byte
//! offset, never an allocation the file cannot back.
//!
//! Not read (each said in [`TraceDat::notes`]): trace instances other than the top one
//! (`trace-cmd record -B`), latency-tracer text (`"latency"` files), big-endian files, and
//! zlib-compressed v7 files (`trace-cmd convert --compression zstd` makes them readable).
//! The `DATE` option is ignored as `trace-cmd report` does by default; `OFFSET` is added to
//! every time as it does.

use super::raw::{CpuPages, Pages};
use super::{ImportFormat, Imported};
use crate::convert::Converter;
use crate::error::IngestError;
use crate::format::{EventFormat, FormatSet, HeaderEvent, HeaderPage};
use crate::kallsyms::Kallsyms;
use crate::merge::ThreadTable;
use crate::tracedir::ProcEntry;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The first bytes of every `trace.dat`.
pub const MAGIC: &[u8] = b"\x17\x08\x44tracing";

/// Section and option ids (trace-cmd's `enum tracecmd_section_ids` / `tracecmd_option_id`).
const OPT_DONE: u16 = 0;
const OPT_BUFFER: u16 = 3;
const OPT_TRACECLOCK: u16 = 4;
const OPT_OFFSET: u16 = 7;
const OPT_CPUCOUNT: u16 = 8;
const OPT_BUFFER_TEXT: u16 = 22;
const SEC_HEADER_INFO: u16 = 16;
const SEC_FTRACE_EVENTS: u16 = 17;
const SEC_EVENT_FORMATS: u16 = 18;
const SEC_KALLSYMS: u16 = 19;
const SEC_PRINTK: u16 = 20;
const SEC_CMDLINES: u16 = 21;
/// Section flag: the body is compressed.
const SECTION_COMPRESSED: u16 = 1;
/// Options sections one file may chain (a loop in the chain is an error, not a hang).
const MAX_OPTION_SECTIONS: usize = 1024;

/// One CPU's ring-buffer pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuData {
    /// The CPU.
    pub cpu: u32,
    /// Where its data starts in the file.
    pub offset: u64,
    /// Whether `pages` were decompressed (then offsets within them are not file offsets).
    pub compressed: bool,
    /// The pages, back to back.
    pub pages: Vec<u8>,
}

/// Everything of a `trace.dat` that Argus uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceDat {
    /// File version (6 or 7).
    pub version: u32,
    /// `sizeof(long)` of the recording's user space (4 or 8).
    pub long_size: u8,
    /// Ring-buffer page size.
    pub page_size: usize,
    /// v7 compression algorithm (`none`, `zstd`); `None` for v6.
    pub compression: Option<String>,
    /// `events/header_page` text.
    pub header_page: String,
    /// `events/header_event` text.
    pub header_event: String,
    /// Every format file: `(system, text)`, the ftrace ones under `ftrace`.
    pub formats: Vec<(String, String)>,
    /// `/proc/kallsyms` text.
    pub kallsyms: String,
    /// `printk_formats` text.
    pub printk_formats: String,
    /// `saved_cmdlines` text (`pid comm` lines).
    pub cmdlines: String,
    /// The trace clock (`local`, `mono`, ...), when the file says.
    pub clock: Option<String>,
    /// Nanoseconds to add to every time (the `OFFSET` option).
    pub ts_offset: i64,
    /// CPUs of the recording machine (cpu count field or option).
    pub cpu_count: u32,
    /// The top instance's pages, by CPU.
    pub cpus: Vec<CpuData>,
    /// What the file has that Argus did not read (other instances, ...).
    pub notes: Vec<String>,
}

/// A bounds-checked reader over the file's bytes.
struct Cursor<'a> {
    file: &'a Path,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn at(file: &'a Path, bytes: &'a [u8], pos: u64) -> Result<Cursor<'a>, IngestError> {
        let c = Cursor {
            file,
            bytes,
            pos: bytes.len(),
        };
        if pos > bytes.len() as u64 {
            return Err(c.err(format!(
                "offset {pos} is past the end of the {}-byte file",
                bytes.len()
            )));
        }
        Ok(Cursor {
            pos: pos as usize,
            ..c
        })
    }

    fn err(&self, what: impl Into<String>) -> IngestError {
        malformed(self.file, self.pos as u64, what)
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], IngestError> {
        let left = (self.bytes.len() - self.pos) as u64;
        if n > left {
            return Err(self.err(format!(
                "{what} of {n} bytes runs past the end of the file ({left} bytes left)"
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u16(&mut self, what: &str) -> Result<u16, IngestError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, IngestError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, IngestError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A NUL-terminated string.
    fn cstr(&mut self, what: &str) -> Result<String, IngestError> {
        let rest = &self.bytes[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.err(format!("{what}: no NUL before the end of the file")))?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }

    /// A text of `n` bytes.
    fn text(&mut self, n: u64, what: &str) -> Result<String, IngestError> {
        Ok(String::from_utf8_lossy(self.take(n, what)?).into_owned())
    }

    /// Expects the literal `tag`.
    fn tag(&mut self, tag: &[u8]) -> Result<(), IngestError> {
        let at = self.pos;
        let got = self.take(tag.len() as u64, "tag")?;
        if got != tag {
            self.pos = at;
            return Err(self.err(format!(
                "expected {:?}, found {:?}",
                String::from_utf8_lossy(tag),
                String::from_utf8_lossy(got)
            )));
        }
        Ok(())
    }
}

/// Adds `size` bytes of CPU `cpu`'s data (its entry at `at`) to the `claimed` bytes of the
/// CPUs before it: the CPUs' data are distinct parts of the file, so more than the file is
/// CPUs pointing at the same bytes, each copied and decoded again (issue 18).
fn claim(
    file: &Path,
    at: u64,
    cpu: u32,
    claimed: u64,
    size: u64,
    file_size: usize,
) -> Result<u64, IngestError> {
    match claimed.checked_add(size) {
        Some(total) if total <= file_size as u64 => Ok(total),
        _ => Err(malformed(
            file,
            at,
            format!(
                "cpu{cpu} data of {size} bytes after {claimed} bytes of the CPUs before it: \
                 more than the {file_size}-byte file (CPUs share their data)"
            ),
        )),
    }
}

fn malformed(file: &Path, offset: u64, what: impl Into<String>) -> IngestError {
    IngestError::Malformed {
        file: file.to_path_buf(),
        offset,
        what: what.into(),
    }
}

/// What a v7 file may decompress to in all, its sections and CPU chunks together
/// ([`crate::inflate::limit_for`] its size): each section or chunk declares up to 4 GiB and a
/// few bytes of zstd make that much, so without a bound for the file a crafted one asks for
/// gigabytes (issue 18).
struct Inflate {
    limit: u64,
    left: u64,
}

impl Inflate {
    fn for_file(size: usize) -> Inflate {
        let limit = crate::inflate::limit_for(size as u64);
        Inflate { limit, left: limit }
    }
}

/// Decompresses `data` (at `offset` of `file`) with `algo`, which must give exactly `usize`
/// bytes: the output grows only as the decoder produces it, so a declared size the data
/// cannot back allocates nothing, and a declared size past what is left of the file's
/// `budget` is refused before anything is decompressed.
fn decompress(
    file: &Path,
    offset: u64,
    algo: &str,
    data: &[u8],
    usize: u32,
    budget: &mut Inflate,
) -> Result<Vec<u8>, IngestError> {
    if u64::from(usize) > budget.left {
        return Err(malformed(
            file,
            offset,
            format!(
                "compressed data declared to give {usize} bytes: the file would decompress to \
                 more than {} bytes in all ({} times its size)",
                budget.limit,
                crate::inflate::MAX_RATIO
            ),
        ));
    }
    if algo != "zstd" {
        return Err(malformed(
            file,
            offset,
            format!(
                "compressed with {algo:?}, which Argus does not read: convert it with \
                 `trace-cmd convert --compression zstd` (or `none`)"
            ),
        ));
    }
    let mut out = Vec::new();
    let dec = zstd::stream::read::Decoder::new(data)
        .map_err(|e| malformed(file, offset, format!("zstd: {e}")))?;
    dec.take(u64::from(usize) + 1)
        .read_to_end(&mut out)
        .map_err(|e| malformed(file, offset, format!("corrupt zstd data: {e}")))?;
    if out.len() != usize as usize {
        return Err(malformed(
            file,
            offset,
            format!(
                "compressed data gives {} bytes where the header declares {usize}",
                out.len()
            ),
        ));
    }
    budget.left -= u64::from(usize);
    Ok(out)
}

impl TraceDat {
    /// Parses the bytes of `file` (whose name errors carry).
    pub fn parse(file: &Path, bytes: &[u8]) -> Result<TraceDat, IngestError> {
        let mut c = Cursor::at(file, bytes, 0)?;
        c.tag(MAGIC)?;
        let version_at = c.pos as u64;
        let version = c.cstr("version")?;
        let version: u32 = version.parse().map_err(|_| {
            malformed(
                file,
                version_at,
                format!("version {version:?} is not a number"),
            )
        })?;
        let endian_at = c.pos as u64;
        let endian = c.take(1, "endianness")?[0];
        if endian != 0 {
            return Err(malformed(
                file,
                endian_at,
                "a big-endian trace.dat, which Argus does not read: `trace-cmd report` it on \
                 the recording machine and import the text",
            ));
        }
        let long_size = c.take(1, "long size")?[0];
        let page_at = c.pos as u64;
        let page_size = c.u32("page size")? as usize;
        if !(1024..=(1 << 24)).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(malformed(
                file,
                page_at,
                format!("page size {page_size} is not a power of two between 1 KiB and 16 MiB"),
            ));
        }
        let mut dat = TraceDat {
            version,
            long_size,
            page_size,
            ..TraceDat::default()
        };
        match version {
            6 => dat.parse_v6(&mut c)?,
            7 => dat.parse_v7(&mut c)?,
            v => {
                return Err(malformed(
                    file,
                    version_at,
                    format!("trace.dat version {v}: Argus reads versions 6 and 7"),
                ))
            }
        }
        Ok(dat)
    }

    /// perf's `HEADER_TRACING_DATA` feature section (`size` bytes at `at` of `file`): the
    /// trace.dat v6 header from the magic to `saved_cmdlines`, with version `0.6` (`0.5`
    /// has no `saved_cmdlines`). Gives the formats, kallsyms and cmdlines; no pages.
    pub fn parse_tracing_data(
        file: &Path,
        bytes: &[u8],
        at: u64,
        size: u64,
    ) -> Result<TraceDat, IngestError> {
        let end = at
            .checked_add(size)
            .filter(|&e| e <= bytes.len() as u64)
            .ok_or_else(|| {
                malformed(
                    file,
                    at,
                    format!(
                        "tracing data of {size} bytes runs past the end of the {}-byte file",
                        bytes.len()
                    ),
                )
            })?;
        let mut c = Cursor::at(file, &bytes[..end as usize], at)?;
        c.tag(MAGIC)?;
        let version_at = c.pos as u64;
        let version = c.cstr("version")?;
        if version != "0.5" && version != "0.6" {
            return Err(malformed(
                file,
                version_at,
                format!("tracing data version {version:?}: Argus reads 0.5 and 0.6"),
            ));
        }
        let endian_at = c.pos as u64;
        if c.take(1, "endianness")?[0] != 0 {
            return Err(malformed(
                file,
                endian_at,
                "big-endian tracing data, which Argus does not read",
            ));
        }
        let long_size = c.take(1, "long size")?[0];
        let page_size = c.u32("page size")? as usize;
        let mut dat = TraceDat {
            version: 6,
            long_size,
            page_size,
            ..TraceDat::default()
        };
        dat.read_headers(&mut c)?;
        dat.read_ftrace_formats(&mut c)?;
        dat.read_event_formats(&mut c)?;
        let n = c.u32("kallsyms size")?;
        dat.kallsyms = c.text(n.into(), "kallsyms")?;
        let n = c.u32("printk formats size")?;
        dat.printk_formats = c.text(n.into(), "printk formats")?;
        if version == "0.6" {
            let n = c.u64("saved cmdlines size")?;
            dat.cmdlines = c.text(n, "saved cmdlines")?;
        }
        Ok(dat)
    }

    /// `header_page` and `header_event`, each a tag and a u64 size.
    fn read_headers(&mut self, c: &mut Cursor<'_>) -> Result<(), IngestError> {
        c.tag(b"header_page\0")?;
        let n = c.u64("header_page size")?;
        self.header_page = c.text(n, "header_page")?;
        c.tag(b"header_event\0")?;
        let n = c.u64("header_event size")?;
        self.header_event = c.text(n, "header_event")?;
        Ok(())
    }

    /// The ftrace formats: a u32 count of u64-sized texts.
    fn read_ftrace_formats(&mut self, c: &mut Cursor<'_>) -> Result<(), IngestError> {
        let n = c.u32("ftrace format count")?;
        for _ in 0..n {
            let size = c.u64("ftrace format size")?;
            let text = c.text(size, "ftrace format")?;
            self.formats.push(("ftrace".to_string(), text));
        }
        Ok(())
    }

    /// The event formats: a u32 count of systems, each a name and a u32 count of u64-sized
    /// texts.
    fn read_event_formats(&mut self, c: &mut Cursor<'_>) -> Result<(), IngestError> {
        let systems = c.u32("system count")?;
        for _ in 0..systems {
            let system = c.cstr("system name")?;
            let n = c.u32("event count")?;
            for _ in 0..n {
                let size = c.u64("event format size")?;
                let text = c.text(size, "event format")?;
                self.formats.push((system.clone(), text));
            }
        }
        Ok(())
    }

    fn parse_v6(&mut self, c: &mut Cursor<'_>) -> Result<(), IngestError> {
        self.read_headers(c)?;
        self.read_ftrace_formats(c)?;
        self.read_event_formats(c)?;
        let n = c.u32("kallsyms size")?;
        self.kallsyms = c.text(n.into(), "kallsyms")?;
        let n = c.u32("printk formats size")?;
        self.printk_formats = c.text(n.into(), "printk formats")?;
        let n = c.u64("saved cmdlines size")?;
        self.cmdlines = c.text(n, "saved cmdlines")?;
        let cpus_at = c.pos as u64;
        self.cpu_count = c.u32("cpu count")?;
        loop {
            let at = c.pos as u64;
            let tag = c.take(10, "section tag")?;
            match tag {
                b"options  \0" => loop {
                    let id = c.u16("option id")?;
                    if id == OPT_DONE {
                        break;
                    }
                    let size = c.u32("option size")?;
                    let data = c.take(size.into(), "option")?;
                    self.option(c.file, c.pos as u64 - u64::from(size), id, data)?;
                },
                b"latency  \0" => {
                    return Err(malformed(
                        c.file,
                        at,
                        "a latency-tracer trace.dat (its data is the `trace` text): \
                         `trace-cmd report` it and import the text",
                    ))
                }
                b"flyrecord\0" => break,
                other => {
                    return Err(malformed(
                        c.file,
                        at,
                        format!(
                            "expected \"options\", \"latency\" or \"flyrecord\", found {:?}",
                            String::from_utf8_lossy(other)
                        ),
                    ))
                }
            }
        }
        // Each CPU's (offset, size) takes 16 bytes: a count the file cannot hold is an error
        // before anything is allocated for it.
        if u64::from(self.cpu_count) * 16 > (c.bytes.len() - c.pos) as u64 {
            return Err(malformed(
                c.file,
                cpus_at,
                format!("{} CPUs do not fit in the rest of the file", self.cpu_count),
            ));
        }
        let mut claimed = 0u64;
        for cpu in 0..self.cpu_count {
            let entry_at = c.pos as u64;
            let offset = c.u64("cpu data offset")?;
            let size = c.u64("cpu data size")?;
            let pages = Cursor::at(c.file, c.bytes, offset)
                .and_then(|mut d| d.take(size, "cpu data").map(<[u8]>::to_vec))
                .map_err(|e| match e {
                    IngestError::Malformed { what, .. } => malformed(
                        c.file,
                        entry_at,
                        format!("cpu{cpu} data at {offset} of {size} bytes: {what}"),
                    ),
                    e => e,
                })?;
            claimed = claim(c.file, entry_at, cpu, claimed, size, c.bytes.len())?;
            self.cpus.push(CpuData {
                cpu,
                offset,
                compressed: false,
                pages,
            });
        }
        Ok(())
    }

    /// An option both versions share; the v7 section pointers are handled by the caller.
    fn option(&mut self, file: &Path, at: u64, id: u16, data: &[u8]) -> Result<(), IngestError> {
        let text = || {
            let s = String::from_utf8_lossy(data);
            s.trim_end_matches('\0').trim().to_string()
        };
        match id {
            OPT_TRACECLOCK => {
                // "[local] global counter ..." in v6: the bracketed one is in use.
                let t = text();
                let clock = t
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
                    .unwrap_or(t.as_str())
                    .to_string();
                if !clock.is_empty() {
                    self.clock = Some(clock);
                }
            }
            OPT_OFFSET => {
                let t = text();
                self.ts_offset = parse_c_int(&t).ok_or_else(|| {
                    malformed(file, at, format!("OFFSET option {t:?} is not a number"))
                })?;
            }
            OPT_CPUCOUNT if data.len() >= 4 => {
                self.cpu_count = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
            }
            OPT_BUFFER if self.version == 6 => {
                let name = data.get(8..).map(|d| {
                    String::from_utf8_lossy(&d[..d.iter().position(|&b| b == 0).unwrap_or(d.len())])
                        .into_owned()
                });
                self.notes.push(format!(
                    "instance {:?} not read (only the top instance is)",
                    name.unwrap_or_default()
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn parse_v7(&mut self, c: &mut Cursor<'_>) -> Result<(), IngestError> {
        let algo = c.cstr("compression name")?;
        let _algo_version = c.cstr("compression version")?;
        self.compression = Some(algo.clone());
        let mut next = c.u64("options offset")?;
        let mut sections: BTreeMap<u16, u64> = BTreeMap::new();
        let mut buffers: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut seen = Vec::new();
        let mut budget = Inflate::for_file(c.bytes.len());
        while next != 0 {
            if seen.contains(&next) || seen.len() >= MAX_OPTION_SECTIONS {
                return Err(malformed(
                    c.file,
                    next,
                    "the chain of options sections loops",
                ));
            }
            seen.push(next);
            let body = self.section(c.file, c.bytes, next, &algo, &mut budget)?;
            let (start, data) = (body.0, body.1);
            let mut o = OwnedCursor::new(c.file, &data, start);
            next = 0;
            while !o.at_end() {
                let id = o.u16("option id")?;
                let size = o.u32("option size")?;
                let opt_at = o.file_offset();
                let d = o.take(size.into(), "option")?;
                match id {
                    OPT_DONE => {
                        if d.len() < 8 {
                            return Err(malformed(
                                c.file,
                                opt_at,
                                "DONE option shorter than 8 bytes",
                            ));
                        }
                        next = le_u64(&d[..8]);
                        break;
                    }
                    SEC_HEADER_INFO | SEC_FTRACE_EVENTS | SEC_EVENT_FORMATS | SEC_KALLSYMS
                    | SEC_PRINTK | SEC_CMDLINES => {
                        if d.len() < 8 {
                            return Err(malformed(
                                c.file,
                                opt_at,
                                format!("option {id} shorter than 8 bytes"),
                            ));
                        }
                        sections.insert(id, le_u64(&d[..8]));
                    }
                    OPT_BUFFER => buffers.push((opt_at, d.to_vec())),
                    OPT_BUFFER_TEXT => self.notes.push(
                        "a latency-tracer buffer not read (its data is `trace` text)".to_string(),
                    ),
                    _ => self.option(c.file, opt_at, id, d)?,
                }
            }
        }
        for (id, at) in sections {
            let (start, data) = self.section(c.file, c.bytes, at, &algo, &mut budget)?;
            let mut s = OwnedCursor::new(c.file, &data, start);
            match id {
                SEC_HEADER_INFO => {
                    s.tag(b"header_page\0")?;
                    let n = s.u64("header_page size")?;
                    self.header_page = s.text(n, "header_page")?;
                    s.tag(b"header_event\0")?;
                    let n = s.u64("header_event size")?;
                    self.header_event = s.text(n, "header_event")?;
                }
                SEC_FTRACE_EVENTS => {
                    let n = s.u32("ftrace format count")?;
                    for _ in 0..n {
                        let size = s.u64("ftrace format size")?;
                        let text = s.text(size, "ftrace format")?;
                        self.formats.push(("ftrace".to_string(), text));
                    }
                }
                SEC_EVENT_FORMATS => {
                    let systems = s.u32("system count")?;
                    for _ in 0..systems {
                        let system = s.cstr("system name")?;
                        let n = s.u32("event count")?;
                        for _ in 0..n {
                            let size = s.u64("event format size")?;
                            let text = s.text(size, "event format")?;
                            self.formats.push((system.clone(), text));
                        }
                    }
                }
                SEC_KALLSYMS => {
                    let n = s.u32("kallsyms size")?;
                    self.kallsyms = s.text(n.into(), "kallsyms")?;
                }
                SEC_PRINTK => {
                    let n = s.u32("printk formats size")?;
                    self.printk_formats = s.text(n.into(), "printk formats")?;
                }
                SEC_CMDLINES => {
                    let n = s.u64("saved cmdlines size")?;
                    self.cmdlines = s.text(n, "saved cmdlines")?;
                }
                _ => {}
            }
        }
        if self.header_page.is_empty() {
            return Err(malformed(
                c.file,
                0,
                "no HEADER_INFO section (the page layout): not a complete trace.dat",
            ));
        }
        let mut top = false;
        // The CPUs' data is copied (or decompressed) out of the file: together it may not be
        // more than the file, or CPUs pointing at the same bytes multiply it (issue 18).
        let mut claimed = 0u64;
        for (at, d) in buffers {
            let mut b = OwnedCursor::new(c.file, &d, at);
            let section = b.u64("buffer section offset")?;
            let name = b.cstr("instance name")?;
            let clock = b.cstr("trace clock")?;
            if !name.is_empty() {
                self.notes.push(format!(
                    "instance {name:?} not read (only the top instance is)"
                ));
                continue;
            }
            if top {
                return Err(malformed(c.file, at, "a second top-instance BUFFER option"));
            }
            top = true;
            if !clock.is_empty() {
                self.clock = Some(clock);
            }
            let page_size = b.u32("buffer page size")? as usize;
            if page_size != self.page_size {
                if !(1024..=(1 << 24)).contains(&page_size) || !page_size.is_power_of_two() {
                    return Err(malformed(
                        c.file,
                        at,
                        format!("buffer page size {page_size} is not a power of two between 1 KiB and 16 MiB"),
                    ));
                }
                self.page_size = page_size;
            }
            let ncpus = b.u32("buffer cpu count")?;
            if u64::from(ncpus) * 20 > b.left() {
                return Err(malformed(
                    c.file,
                    at,
                    format!("{ncpus} CPUs do not fit in the BUFFER option"),
                ));
            }
            let mut hdr = Cursor::at(c.file, c.bytes, section)?;
            hdr.take(2, "buffer section id")?;
            let flags = hdr.u16("buffer section flags")?;
            let compressed = flags & SECTION_COMPRESSED != 0;
            for _ in 0..ncpus {
                let entry_at = b.file_offset();
                let cpu = b.u32("cpu")?;
                let offset = b.u64("cpu data offset")?;
                let size = b.u64("cpu data size")?;
                // A compressed CPU's size counts its chunks' data, not their headers
                // (trace-cmd reads the chunk list from the offset on): the file bounds it.
                let (pages, used) = if compressed {
                    let rest = Cursor::at(c.file, c.bytes, offset)?;
                    self.chunks(c.file, offset, &c.bytes[rest.pos..], &algo, &mut budget)?
                } else {
                    let d = Cursor::at(c.file, c.bytes, offset)
                        .and_then(|mut d| d.take(size, &format!("cpu{cpu} data")))?;
                    (d.to_vec(), size)
                };
                claimed = claim(c.file, entry_at, cpu, claimed, used, c.bytes.len())?;
                self.cpus.push(CpuData {
                    cpu,
                    offset,
                    compressed,
                    pages,
                });
            }
        }
        if !top {
            return Err(malformed(
                c.file,
                0,
                "no BUFFER option for the top instance: the file has no trace data",
            ));
        }
        Ok(())
    }

    /// A v7 section's body at `at`: its file offset and its bytes, decompressed when flagged.
    fn section(
        &self,
        file: &Path,
        bytes: &[u8],
        at: u64,
        algo: &str,
        budget: &mut Inflate,
    ) -> Result<(u64, Vec<u8>), IngestError> {
        let mut c = Cursor::at(file, bytes, at)?;
        let _id = c.u16("section id")?;
        let flags = c.u16("section flags")?;
        let _desc = c.u32("section description")?;
        let size = c.u64("section size")?;
        let body_at = c.pos as u64;
        let body = c.take(size, "section")?;
        if flags & SECTION_COMPRESSED == 0 {
            return Ok((body_at, body.to_vec()));
        }
        let mut b = Cursor::at(file, body, 0)?;
        let csize = b.u32("compressed size")?;
        let usize = b.u32("uncompressed size")?;
        let data = b.take(csize.into(), "compressed section").map_err(|_| {
            malformed(
                file,
                body_at,
                format!("compressed size {csize} is larger than the {size}-byte section"),
            )
        })?;
        Ok((
            body_at,
            decompress(file, body_at + 8, algo, data, usize, budget)?,
        ))
    }

    /// A compressed CPU's data: a u32 chunk count, then (u32 csize, u32 usize, data) chunks.
    /// Gives the pages and the bytes of the file the chunks took.
    fn chunks(
        &self,
        file: &Path,
        at: u64,
        raw: &[u8],
        algo: &str,
        budget: &mut Inflate,
    ) -> Result<(Vec<u8>, u64), IngestError> {
        let mut c = OwnedCursor::new(file, raw, at);
        let n = c.u32("chunk count")?;
        if u64::from(n) * 8 > c.left() {
            return Err(malformed(
                file,
                at,
                format!("{n} chunks do not fit in the CPU's data"),
            ));
        }
        let mut out = Vec::new();
        for _ in 0..n {
            let csize = c.u32("chunk compressed size")?;
            let usize = c.u32("chunk uncompressed size")?;
            let data_at = c.file_offset();
            let data = c.take(csize.into(), "chunk")?;
            out.extend(decompress(file, data_at, algo, data, usize, budget)?);
        }
        Ok((out, c.file_offset() - at))
    }

    /// The formats of the file, with the page layout from `header_page`.
    pub fn format_set(&self, file: &Path) -> Result<FormatSet, IngestError> {
        let mut set = FormatSet {
            header_page: HeaderPage::parse(&self.header_page).map_err(|source| {
                IngestError::Format {
                    file: file.join("header_page"),
                    source,
                }
            })?,
            header_event: HeaderEvent::parse(&self.header_event),
            ..FormatSet::default()
        };
        for (system, text) in &self.formats {
            let ev = EventFormat::parse(system, text).map_err(|source| IngestError::Format {
                file: file.join(system).join(format_name(text)).join("format"),
                source,
            })?;
            set.insert(ev);
        }
        Ok(set)
    }

    /// `saved_cmdlines` as thread entries (`pid == tid`: the file has no thread groups).
    pub fn threads(&self) -> Vec<ProcEntry> {
        self.cmdlines
            .lines()
            .filter_map(|l| {
                let (tid, comm) = l.trim_start().split_once(' ')?;
                let tid: i32 = tid.parse().ok()?;
                Some(ProcEntry {
                    tid,
                    pid: tid,
                    ppid: 0,
                    comm: comm.to_string(),
                    kernel: false,
                })
            })
            .collect()
    }
}

/// The `name:` of a format text, for error paths.
fn format_name(text: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("name:"))
        .map_or_else(|| "?".to_string(), |n| n.trim().to_string())
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// `strtoll(s, NULL, 0)`: decimal, `0x` hex or `0` octal, signed.
fn parse_c_int(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if s.len() > 1 && s.starts_with('0') {
        i64::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse().ok()?
    };
    Some(if neg { -v } else { v })
}

/// A [`Cursor`] over bytes that are not the file's own (a decompressed section, an option's
/// data) but whose errors name the file offset they came from.
struct OwnedCursor<'a> {
    inner: Cursor<'a>,
    base: u64,
}

impl<'a> OwnedCursor<'a> {
    fn new(file: &'a Path, bytes: &'a [u8], base: u64) -> OwnedCursor<'a> {
        OwnedCursor {
            inner: Cursor {
                file,
                bytes,
                pos: 0,
            },
            base,
        }
    }

    fn fix<T>(&self, r: Result<T, IngestError>) -> Result<T, IngestError> {
        r.map_err(|e| match e {
            IngestError::Malformed { file, offset, what } => IngestError::Malformed {
                file,
                offset: self.base + offset,
                what,
            },
            e => e,
        })
    }

    fn file_offset(&self) -> u64 {
        self.base + self.inner.pos as u64
    }

    fn left(&self) -> u64 {
        (self.inner.bytes.len() - self.inner.pos) as u64
    }

    fn at_end(&self) -> bool {
        self.left() == 0
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], IngestError> {
        let r = self.inner.take(n, what);
        self.fix(r)
    }

    fn u16(&mut self, what: &str) -> Result<u16, IngestError> {
        let r = self.inner.u16(what);
        self.fix(r)
    }

    fn u32(&mut self, what: &str) -> Result<u32, IngestError> {
        let r = self.inner.u32(what);
        self.fix(r)
    }

    fn u64(&mut self, what: &str) -> Result<u64, IngestError> {
        let r = self.inner.u64(what);
        self.fix(r)
    }

    fn cstr(&mut self, what: &str) -> Result<String, IngestError> {
        let r = self.inner.cstr(what);
        self.fix(r)
    }

    fn text(&mut self, n: u64, what: &str) -> Result<String, IngestError> {
        let r = self.inner.text(n, what);
        self.fix(r)
    }

    fn tag(&mut self, tag: &[u8]) -> Result<(), IngestError> {
        let r = self.inner.tag(tag);
        self.fix(r)
    }
}

/// Imports a `trace.dat` (its bytes, read by [`super::open`]).
pub(super) fn import(path: &Path, bytes: &[u8]) -> Result<Imported, IngestError> {
    let dat = TraceDat::parse(path, bytes)?;
    let mut formats = dat.format_set(path)?;
    let mut unreadable = Vec::new();
    // A format the converter cannot read (ftrace's `kernel_stack` with `caller[8]` of size 0
    // on some kernels) drops that event, said in the summary, not the whole file.
    let conv = loop {
        match Converter::new(&formats) {
            Ok(conv) => break conv,
            Err(e) => {
                let Some(id) = formats
                    .events
                    .values()
                    .find(|ev| ev.full_name() == e.event || ev.name == e.event)
                    .map(|ev| ev.id)
                else {
                    return Err(IngestError::Format {
                        file: path.join(e.event).join("format"),
                        source: e.source,
                    });
                };
                if let Some(ev) = formats.events.remove(&id) {
                    unreadable.push(format!("{}: {}", ev.full_name(), e.source));
                }
            }
        }
    };
    let cpus = dat
        .cpus
        .iter()
        .map(|c| CpuPages {
            cpu: c.cpu,
            file: if c.compressed {
                PathBuf::from(format!("{} (cpu{} decompressed)", path.display(), c.cpu))
            } else {
                path.to_path_buf()
            },
            base: if c.compressed { 0 } else { c.offset },
            data: &c.pages,
        })
        .collect();
    let pages = Pages {
        formats: &formats,
        conv,
        page_size: dat.page_size,
        ts_offset: dat.ts_offset,
    };
    let (events, threads, errors, mut summary) =
        pages.import(cpus, ThreadTable::from_proc(&dat.threads()))?;
    summary.cpus = summary.cpus.max(dat.cpu_count);
    summary.notes = dat.notes.iter().chain(&unreadable).cloned().collect();
    let kallsyms = Kallsyms::parse(&dat.kallsyms);
    Ok(Imported {
        path: path.to_path_buf(),
        format: ImportFormat::TraceDat,
        events,
        threads,
        errors,
        summary,
        kallsyms: (!kallsyms.is_empty()).then_some(kallsyms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v6 file's start: empty header parts, no formats, then `cpus` and the flyrecord tag.
    fn v6_head(cpus: u32) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(b"6\0\0\x08");
        b.extend_from_slice(&4096u32.to_le_bytes());
        b.extend_from_slice(b"header_page\0");
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(b"header_event\0");
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // ftrace formats
        b.extend_from_slice(&0u32.to_le_bytes()); // systems
        b.extend_from_slice(&0u32.to_le_bytes()); // kallsyms
        b.extend_from_slice(&0u32.to_le_bytes()); // printk formats
        b.extend_from_slice(&0u64.to_le_bytes()); // saved cmdlines
        b.extend_from_slice(&cpus.to_le_bytes());
        b.extend_from_slice(b"flyrecord\0");
        b
    }

    /// CPUs whose flyrecord entries all point at the same pages: each was copied out of the
    /// file and decoded again, so a 64 KiB file of 4000 such CPUs made gigabytes of events.
    /// Together the CPUs' data may not be more than the file; the error names the entry.
    // See: issue 18 (fuzzing, target import_tracedat), docs/fuzzing.md.
    #[test]
    fn gh_18_cpus_sharing_their_pages_are_refused() {
        let file = Path::new("shared.dat");
        let mut b = v6_head(3);
        let table = b.len() as u64;
        let data = table + 3 * 16;
        for _ in 0..3 {
            b.extend_from_slice(&data.to_le_bytes());
            b.extend_from_slice(&4096u64.to_le_bytes());
        }
        b.resize(b.len() + 4096, 0);
        let Err(err) = TraceDat::parse(file, &b) else {
            panic!("three CPUs of the same 4096 bytes parse")
        };
        let IngestError::Malformed {
            file: f, offset, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(f, file);
        // The second CPU's entry: 8192 bytes of data in a file of less.
        assert_eq!(*offset, table + 16, "{err}");
        // Each CPU on its own pages is a file.
        let mut b = v6_head(2);
        let data = b.len() as u64 + 2 * 16;
        for k in 0..2u64 {
            b.extend_from_slice(&(data + 4096 * k).to_le_bytes());
            b.extend_from_slice(&4096u64.to_le_bytes());
        }
        b.resize(b.len() + 2 * 4096, 0);
        let dat = TraceDat::parse(file, &b).expect("two CPUs of their own pages");
        assert_eq!(dat.cpus.len(), 2);
    }

    /// A v7 section that declares 3 GiB of zstd output and holds the 96 KiB of RLE blocks
    /// that make it: refused before decompressing, by what the whole file may give (1000
    /// times its size, at least 64 MiB), at the offset of its compressed data.
    // See: issue 18 (fuzzing, target import_tracedat), docs/fuzzing.md.
    #[test]
    fn gh_18_zstd_bomb_section_is_refused_before_decompressing() {
        let file = Path::new("bomb.dat");
        let bomb = argus_testkit::zstd_rle_bomb(3 << 30, b'x');
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(b"7\0\0\x08");
        b.extend_from_slice(&4096u32.to_le_bytes());
        b.extend_from_slice(b"zstd\0\0");
        let options = b.len() as u64 + 8;
        b.extend_from_slice(&options.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes()); // OPTIONS
        b.extend_from_slice(&SECTION_COMPRESSED.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(bomb.len() as u64 + 8).to_le_bytes());
        b.extend_from_slice(&(bomb.len() as u32).to_le_bytes());
        b.extend_from_slice(&(3u32 << 30).to_le_bytes());
        b.extend_from_slice(&bomb);
        let Err(err) = TraceDat::parse(file, &b) else {
            panic!("a 3 GiB options section parses")
        };
        let IngestError::Malformed {
            file: f,
            offset,
            what,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(f, file);
        assert_eq!(*offset, options + 16 + 8, "{err}");
        let limit = crate::inflate::limit_for(b.len() as u64);
        assert!(what.contains(&format!("more than {limit} bytes")), "{what}");
    }
}
