//! Parsers for the tracefs metadata files that describe the binary ring buffer:
//! `events/header_page`, `events/header_event` and `events/<sys>/<event>/format`
//! (`FORMATS.md` §2).
//!
//! Offsets are never hard-coded anywhere in this crate: they come from these files, read once
//! per trace. The parsers are sans-IO (text in, structs out) except [`FormatSet::load_tracefs`]
//! and [`FormatSet::load_dir`], thin helpers that walk a directory.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A format-file problem: which line and why. The caller adds the file name
/// ([`crate::IngestError::Format`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// A `field:` line that does not have the `decl; offset:N; size:N; signed:N;` shape.
    #[error("line {line}: malformed field line {text:?}")]
    BadField {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// The `name:` line is missing.
    #[error("no `name:` line")]
    NoName,
    /// The `ID:` line is missing or not a 16-bit number.
    #[error("no valid `ID:` line")]
    NoId,
    /// `header_page` lacks the `commit` field.
    #[error("header_page has no commit field")]
    NoCommit,
    /// `header_page` gives a commit size other than 4 or 8.
    #[error("header_page commit size {size} is neither 4 nor 8")]
    BadCommitSize {
        /// The size read.
        size: u32,
    },
    /// An event Argus decodes lacks a field it needs.
    #[error("event {event} has no field {field}")]
    MissingField {
        /// Event name.
        event: String,
        /// Field name.
        field: &'static str,
    },
    /// A line of a text trace (tracefs `trace` text, `trace-cmd report`, systrace) whose
    /// payload does not have the shape its event prints (see [`crate::import`]).
    #[error("line {line}: {event}: {reason}: {text:?}")]
    BadTraceLine {
        /// 1-based line number (within the extracted trace text for HTML containers).
        line: usize,
        /// Event name.
        event: String,
        /// What is wrong.
        reason: &'static str,
        /// The line.
        text: String,
    },
    /// A field Argus reads has a size it cannot read as an integer.
    #[error("field {event}.{field} has unsupported size {size}")]
    BadFieldSize {
        /// Event name.
        event: String,
        /// Field name.
        field: String,
        /// Its size.
        size: u32,
    },
}

/// How a field's bytes are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A plain value (`int`, `u64`, `void *`, `long`).
    Scalar,
    /// A fixed array (`char prev_comm[16]`, `unsigned long args[6]`); `len` when the bound is a
    /// number (`char comm[TASK_COMM_LEN]` gives `None`, the size still says how many bytes).
    Array {
        /// Element count, when written as a number.
        len: Option<u32>,
    },
    /// A flexible array at the end of the record (`char buf[]`, size 0): runs to the end.
    Flexible,
    /// `__data_loc T[] name`: a u32 whose low 16 bits are the offset of the data within the
    /// record and whose high 16 bits are its length.
    DataLoc,
    /// `__rel_loc T[] name`: like `DataLoc` but the offset counts from the end of the field.
    RelLoc,
}

/// One `field:` line of a format file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldFormat {
    /// Field name (`prev_pid`).
    pub name: String,
    /// The C declaration as written (`char prev_comm[16]`).
    pub decl: String,
    /// Byte offset within the record.
    pub offset: u32,
    /// Size in bytes (4 for `__data_loc`, 0 for a flexible array).
    pub size: u32,
    /// Whether the kernel marks it signed.
    pub signed: bool,
    /// Layout.
    pub kind: FieldKind,
}

/// Reading a field out of a record that is too short for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field at offset {offset} size {size} runs past the {len}-byte record")]
pub struct FieldOutOfBounds {
    /// Field offset (or the data offset of a `__data_loc`).
    pub offset: usize,
    /// Bytes needed.
    pub size: usize,
    /// Record length.
    pub len: usize,
}

impl FieldFormat {
    /// Parses the text after `field:` of one line: `decl;\toffset:N;\tsize:N;\tsigned:N;`.
    fn parse(line_no: usize, line: &str) -> Result<FieldFormat, FormatError> {
        let bad = || FormatError::BadField {
            line: line_no,
            text: line.to_string(),
        };
        let rest = line.trim().strip_prefix("field:").ok_or_else(bad)?;
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().ok_or_else(bad)?.to_string();
        let (mut offset, mut size, mut signed) = (None, None, None);
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.trim().parse::<u32>().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.trim().parse::<u32>().ok();
            } else if let Some(v) = p.strip_prefix("signed:") {
                signed = v.trim().parse::<u32>().ok();
            }
        }
        let (offset, size) = (offset.ok_or_else(bad)?, size.ok_or_else(bad)?);
        let (name, kind) = parse_decl(&decl, size).ok_or_else(bad)?;
        Ok(FieldFormat {
            name,
            decl,
            offset,
            size,
            // Old header_page files omit `signed:` on some lines; unsigned is the safe default.
            signed: signed.unwrap_or(0) != 0,
            kind,
        })
    }

    /// The field's bytes in `record` (for `__data_loc`/`__rel_loc`, the data it points to; for a
    /// flexible array, everything to the end of the record).
    pub fn bytes<'a>(&self, record: &'a [u8]) -> Result<&'a [u8], FieldOutOfBounds> {
        let off = self.offset as usize;
        match self.kind {
            FieldKind::Scalar | FieldKind::Array { .. } => slice(record, off, self.size as usize),
            FieldKind::Flexible => record.get(off..).ok_or(FieldOutOfBounds {
                offset: off,
                size: 0,
                len: record.len(),
            }),
            FieldKind::DataLoc | FieldKind::RelLoc => {
                let loc = u32::from_le_bytes(fixed::<4>(record, off)?);
                let mut data_off = (loc & 0xffff) as usize;
                if self.kind == FieldKind::RelLoc {
                    data_off += off + 4;
                }
                slice(record, data_off, (loc >> 16) as usize)
            }
        }
    }

    /// The field as an unsigned integer (sign-extended to 64 bits first when `signed`).
    pub fn read_u64(&self, record: &[u8]) -> Result<u64, FieldOutOfBounds> {
        read_int(
            record,
            self.offset as usize,
            self.size as usize,
            self.signed,
        )
    }

    /// The field as a signed integer (sign-extended when `signed`, zero-extended otherwise).
    pub fn read_i64(&self, record: &[u8]) -> Result<i64, FieldOutOfBounds> {
        self.read_u64(record).map(|v| v as i64)
    }

    /// The field as a NUL-terminated string (bytes up to the first NUL), for `char[N]`,
    /// `__data_loc char[]` and `char buf[]` fields.
    pub fn read_str<'a>(&self, record: &'a [u8]) -> Result<&'a [u8], FieldOutOfBounds> {
        let b = self.bytes(record)?;
        Ok(b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n]))
    }
}

fn slice(record: &[u8], off: usize, size: usize) -> Result<&[u8], FieldOutOfBounds> {
    record
        .get(off..off.saturating_add(size))
        .ok_or(FieldOutOfBounds {
            offset: off,
            size,
            len: record.len(),
        })
}

fn fixed<const N: usize>(record: &[u8], off: usize) -> Result<[u8; N], FieldOutOfBounds> {
    let s = slice(record, off, N)?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Ok(a)
}

/// Reads a little-endian integer of `size` (1, 2, 4 or 8; other sizes read their first 8 bytes
/// or fewer) at `off`, sign-extending when `signed`.
#[inline]
pub(crate) fn read_int(
    record: &[u8],
    off: usize,
    size: usize,
    signed: bool,
) -> Result<u64, FieldOutOfBounds> {
    Ok(match size {
        8 => u64::from_le_bytes(fixed::<8>(record, off)?),
        4 => {
            let v = u32::from_le_bytes(fixed::<4>(record, off)?);
            if signed {
                v as i32 as i64 as u64
            } else {
                v as u64
            }
        }
        2 => {
            let v = u16::from_le_bytes(fixed::<2>(record, off)?);
            if signed {
                v as i16 as i64 as u64
            } else {
                v as u64
            }
        }
        1 => {
            let v = fixed::<1>(record, off)?[0];
            if signed {
                v as i8 as i64 as u64
            } else {
                v as u64
            }
        }
        n => {
            let s = slice(record, off, n)?;
            let mut a = [0u8; 8];
            let k = n.min(8);
            a[..k].copy_from_slice(&s[..k]);
            u64::from_le_bytes(a)
        }
    })
}

/// Splits a C declaration into the field name and its layout.
fn parse_decl(decl: &str, size: u32) -> Option<(String, FieldKind)> {
    let decl = decl.trim();
    let (base, bracket) = match decl.rfind('[') {
        Some(i) if decl.ends_with(']') => (&decl[..i], Some(&decl[i + 1..decl.len() - 1])),
        _ => (decl, None),
    };
    let name = base
        .rsplit(|c: char| c.is_whitespace() || c == '*')
        .next()?
        .trim();
    if name.is_empty() {
        return None;
    }
    let kind = if decl.starts_with("__data_loc") {
        FieldKind::DataLoc
    } else if decl.starts_with("__rel_loc") {
        FieldKind::RelLoc
    } else {
        match bracket {
            // `char buf; size:0` (older kernels' ftrace/print) is a flexible array too.
            None if size == 0 => FieldKind::Flexible,
            None => FieldKind::Scalar,
            Some(b) if b.trim().is_empty() || size == 0 => FieldKind::Flexible,
            Some(b) => FieldKind::Array {
                len: b.trim().parse().ok(),
            },
        }
    };
    Some((name.to_string(), kind))
}

/// One event's `format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    /// Subsystem (`sched`), from the directory name; empty when parsed from text alone.
    pub system: String,
    /// Event name (`sched_switch`).
    pub name: String,
    /// Numeric id: the `common_type` of every record of this event (boot-specific).
    pub id: u16,
    /// Every field, the common ones first, in file order.
    pub fields: Vec<FieldFormat>,
    /// The `print fmt:` text (empty when absent).
    pub print_fmt: String,
    /// Argus extension: the marker text every record of this event stands for, from the
    /// [`MARKER_FILE`] next to the format file in a trace directory (the `--dispatch`
    /// uprobes: `argus:dispatch-begin SYMBOL`). `None` for kernel formats.
    pub marker: Option<String>,
}

/// The file next to an event's `format` in a trace directory's `formats/events/SYS/EVENT/`
/// that makes every record of the event a marker with the file's text (first line).
pub const MARKER_FILE: &str = "argus_marker";
/// The field of a marker event's records (those with a [`MARKER_FILE`]) that holds the work
/// item an item-fetching uprobe read (`argus record --enqueue`, `--dispatch …@N`).
pub const ITEM_FIELD: &str = "item";

impl EventFormat {
    /// Parses the text of a `format` file. `system` is recorded as given.
    pub fn parse(system: &str, text: &str) -> Result<EventFormat, FormatError> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        let mut print_fmt = String::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if let Some(v) = t.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = t.strip_prefix("ID:") {
                id = Some(v.trim().parse::<u16>().map_err(|_| FormatError::NoId)?);
            } else if t.starts_with("field:") {
                fields.push(FieldFormat::parse(i + 1, t)?);
            } else if let Some(v) = t.strip_prefix("print fmt:") {
                print_fmt = v.trim().to_string();
            }
        }
        Ok(EventFormat {
            system: system.to_string(),
            name: name.ok_or(FormatError::NoName)?,
            id: id.ok_or(FormatError::NoId)?,
            fields,
            print_fmt,
            marker: None,
        })
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&FieldFormat> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// `system/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.system, self.name)
    }
}

/// The layout of a ring-buffer page header, from `events/header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderPage {
    /// Offset of the u64 page timestamp (0).
    pub timestamp_offset: usize,
    /// Offset of the `commit` word (8).
    pub commit_offset: usize,
    /// Size of the `commit` word: 8 on 64-bit kernels, 4 on 32-bit ones.
    pub commit_size: usize,
    /// Where records start: `commit_offset + commit_size`.
    ///
    /// Computed, not read from the `data` line: the 32-bit schedviz capture's header says
    /// `offset:16` for data yet its pages only decode with data at 12 (`FORMATS.md`, schedviz
    /// notes), and the kernel's `buffer_data_page` has no padding between the two.
    pub data_offset: usize,
}

impl Default for HeaderPage {
    /// The 64-bit layout (commit of 8 bytes, data at 16).
    fn default() -> Self {
        HeaderPage::with_commit_size(8)
    }
}

impl HeaderPage {
    /// The standard layout with a commit word of `commit_size` bytes (4 or 8).
    pub fn with_commit_size(commit_size: usize) -> HeaderPage {
        HeaderPage {
            timestamp_offset: 0,
            commit_offset: 8,
            commit_size,
            data_offset: 8 + commit_size,
        }
    }

    /// The sub-buffer (page) size an `events/header_page` text describes: the end of its
    /// `data` field (`offset:16; size:4080;` → 4096). `None` when the text has no such line.
    pub fn page_size_of(text: &str) -> Option<usize> {
        text.lines().enumerate().find_map(|(i, line)| {
            let t = line.trim();
            let f = FieldFormat::parse(i + 1, t).ok()?;
            (f.name == "data").then_some((f.offset + f.size) as usize)
        })
    }

    /// Parses `events/header_page`.
    pub fn parse(text: &str) -> Result<HeaderPage, FormatError> {
        let mut ts = 0;
        let mut commit = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if !t.starts_with("field:") {
                continue;
            }
            let f = FieldFormat::parse(i + 1, t)?;
            match f.name.as_str() {
                "timestamp" => ts = f.offset as usize,
                "commit" => commit = Some(f),
                _ => {}
            }
        }
        let c = commit.ok_or(FormatError::NoCommit)?;
        if c.size != 4 && c.size != 8 {
            return Err(FormatError::BadCommitSize { size: c.size });
        }
        Ok(HeaderPage {
            timestamp_offset: ts,
            commit_offset: c.offset as usize,
            commit_size: c.size as usize,
            // In usize: a crafted offset near u32::MAX must not overflow (issue 18).
            data_offset: c.offset as usize + c.size as usize,
        })
    }
}

/// What `events/header_event` says about the record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderEvent {
    /// Bits of `type_len` (5).
    pub type_len_bits: u32,
    /// Bits of `time_delta` (27).
    pub time_delta_bits: u32,
    /// Highest data `type_len` (28).
    pub data_max_type_len: u32,
    /// Whether the kernel documents absolute `time_stamp` records (type 31, ≥ 4.17).
    pub has_time_stamp: bool,
}

impl Default for HeaderEvent {
    fn default() -> Self {
        HeaderEvent {
            type_len_bits: 5,
            time_delta_bits: 27,
            data_max_type_len: 28,
            has_time_stamp: true,
        }
    }
}

impl HeaderEvent {
    /// Parses `events/header_event`. Missing lines keep their default.
    pub fn parse(text: &str) -> HeaderEvent {
        let mut h = HeaderEvent {
            has_time_stamp: false,
            ..HeaderEvent::default()
        };
        for line in text.lines() {
            let t = line.trim();
            let num = |s: &str| -> Option<u32> {
                s.split(|c: char| !c.is_ascii_digit())
                    .find(|p| !p.is_empty())?
                    .parse()
                    .ok()
            };
            if let Some(v) = t.strip_prefix("type_len") {
                h.type_len_bits = num(v).unwrap_or(h.type_len_bits);
            } else if let Some(v) = t.strip_prefix("time_delta") {
                h.time_delta_bits = num(v).unwrap_or(h.time_delta_bits);
            } else if let Some(v) = t.strip_prefix("data max type_len") {
                h.data_max_type_len = num(v).unwrap_or(h.data_max_type_len);
            } else if t.starts_with("time_stamp") {
                h.has_time_stamp = true;
            }
        }
        h
    }
}

/// Every format Argus knows for one trace: the page header and the events by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FormatSet {
    /// Page header layout.
    pub header_page: HeaderPage,
    /// Record header description.
    pub header_event: HeaderEvent,
    /// Event formats keyed by id.
    pub events: BTreeMap<u16, EventFormat>,
}

/// A format file that could not be read or parsed, from [`FormatSet::load_dir`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Reading failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Parsing failed.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: FormatError,
    },
}

impl FormatSet {
    /// Adds (or replaces) an event format.
    pub fn insert(&mut self, ev: EventFormat) {
        self.events.insert(ev.id, ev);
    }

    /// The event with id `id`.
    pub fn get(&self, id: u16) -> Option<&EventFormat> {
        self.events.get(&id)
    }

    /// The event called `system/name` (or just `name` when `system` is empty).
    pub fn by_name(&self, system: &str, name: &str) -> Option<&EventFormat> {
        self.events
            .values()
            .find(|e| e.name == name && (system.is_empty() || e.system == system))
    }

    /// Loads `dir/header_page`, `dir/header_event` (each optional: the 64-bit defaults are used
    /// when absent) and every `dir/SYS/EVENT/format` (tracefs `events/` layout, also the
    /// `formats/events/` folder of a trace directory).
    pub fn load_dir(dir: &Path) -> Result<FormatSet, LoadError> {
        let io = |path: &Path, source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut set = FormatSet::default();
        let hp = dir.join("header_page");
        if hp.exists() {
            let text = read_text(&hp).map_err(|e| io(&hp, e))?;
            set.header_page =
                HeaderPage::parse(&text).map_err(|source| LoadError::Parse { path: hp, source })?;
        }
        let he = dir.join("header_event");
        if he.exists() {
            let text = read_text(&he).map_err(|e| io(&he, e))?;
            set.header_event = HeaderEvent::parse(&text);
        }
        let mut systems: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| io(dir, e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        systems.sort();
        for sys_dir in systems {
            let system = file_name(&sys_dir);
            let mut events: Vec<_> = std::fs::read_dir(&sys_dir)
                .map_err(|e| io(&sys_dir, e))?
                .filter_map(Result::ok)
                .map(|e| e.path().join("format"))
                .filter(|p| p.is_file())
                .collect();
            events.sort();
            for path in events {
                let text = match read_text(&path) {
                    Ok(t) => t,
                    // tracefs lists some format files it then refuses to read.
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => continue,
                    Err(e) => return Err(io(&path, e)),
                };
                let mut ev =
                    EventFormat::parse(&system, &text).map_err(|source| LoadError::Parse {
                        path: path.clone(),
                        source,
                    })?;
                let marker = path.with_file_name(MARKER_FILE);
                if marker.is_file() {
                    let text = read_text(&marker).map_err(|e| io(&marker, e))?;
                    ev.marker = Some(text.lines().next().unwrap_or_default().to_string());
                }
                set.insert(ev);
            }
        }
        Ok(set)
    }

    /// Loads this machine's formats from tracefs (`/sys/kernel/tracing/events`).
    pub fn load_tracefs(tracefs: &Path) -> Result<FormatSet, LoadError> {
        FormatSet::load_dir(&tracefs.join("events"))
    }
}

/// Reads a (small) text file with one large first read: tracefs's `header_page` and
/// `header_event` answer only a read at offset 0 (`show_header_page_file`: `if (*ppos) return
/// 0;`), so `std::fs::read_to_string`'s 32-byte probe read would cut them. tracefs files also
/// report size 0.
fn read_text(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 18];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// How `sched_switch`'s `prev_state` maps to letters on the kernel that wrote the trace,
/// read from the format's `print fmt` (the kernel's `__trace_sched_switch_state` and the
/// `__print_flags` table differ between versions: 4.x prints `S D T t Z X x K W P N` with the
/// preempt bit at 2048 or 4096, ≥ 4.14 prints `S D T t X Z P I` with it at 256).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateTable {
    /// `(bit value, letter)` pairs of the `__print_flags` table.
    pub letters: Vec<(u64, u8)>,
    /// `TASK_REPORT_MAX`: set when the task was preempted (printed `R+`).
    pub preempt: u64,
}

impl Default for StateTable {
    /// The table of current kernels (≥ 4.14, checked against Linux 6.18).
    fn default() -> Self {
        StateTable {
            letters: b"SDTtXZPI"
                .iter()
                .enumerate()
                .map(|(i, &c)| (1u64 << i, c))
                .collect(),
            preempt: 0x100,
        }
    }
}

impl StateTable {
    /// Reads the table out of a `sched_switch` print fmt; falls back to the default when the
    /// text does not have the expected shape.
    pub fn from_print_fmt(fmt: &str) -> StateTable {
        Self::try_from_print_fmt(fmt).unwrap_or_default()
    }

    fn try_from_print_fmt(fmt: &str) -> Option<StateTable> {
        // `__print_flags(REC->prev_state & MASK, "|", { 1, "S" }, ...) : "R"`
        let start = fmt.find("__print_flags(")?;
        let end = start + fmt[start..].find(": \"R\"")?;
        let table = &fmt[start..end];
        let mut letters = Vec::new();
        let mut rest = table;
        while let Some(i) = rest.find('{') {
            let j = i + rest[i..].find('}')?;
            let entry = &rest[i + 1..j];
            let (v, l) = entry.split_once(',')?;
            let v = eval_const(v.trim())?;
            let l = l.trim().trim_matches('"');
            letters.push((v, *l.as_bytes().first()?));
            rest = &rest[j + 1..];
        }
        // `REC->prev_state & EXPR ? "+" : ""`
        let plus = fmt.find("? \"+\"")?;
        let head = &fmt[..plus];
        let amp = head.rfind("REC->prev_state &")?;
        let preempt = eval_const(head[amp + "REC->prev_state &".len()..].trim())?;
        if letters.is_empty() || preempt == 0 {
            return None;
        }
        Some(StateTable { letters, preempt })
    }

    /// The letter for a `prev_state` value: `R` when no state bit is set, `+` when only the
    /// preempt bit is, else the letter of the lowest known state bit (`?` when none is known).
    #[inline]
    pub fn letter(&self, state: u64) -> u8 {
        let mut masked = state & self.preempt.wrapping_sub(1);
        if masked == 0 {
            return if state & self.preempt != 0 {
                b'+'
            } else {
                b'R'
            };
        }
        // Lowest set bit first; the kernel records one bit (`1 << (index - 1)`), older
        // kernels the raw state where the lowest bit is the most specific.
        while masked != 0 {
            let bit = masked & masked.wrapping_neg();
            if let Some(&(_, c)) = self.letters.iter().find(|(v, _)| *v == bit) {
                return c;
            }
            masked &= masked - 1;
        }
        b'?'
    }
}

/// Evaluates the integer constant expressions of kernel print fmts: numbers (decimal, hex),
/// parentheses, `|`, `&`, `+`, `-`, `<<`, `>>`. `None` when the text is not such an
/// expression, or nests parentheses more than 64 deep.
pub fn eval_const(text: &str) -> Option<u64> {
    let toks = tokenize(text)?;
    let mut p = Parser {
        toks: &toks,
        pos: 0,
        depth: 0,
    };
    let v = p.expr(0)?;
    (p.pos == toks.len()).then_some(v)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok {
    Num(u64),
    Op(&'static str),
    Open,
    Close,
}

fn tokenize(s: &str) -> Option<Vec<Tok>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let st = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            let lit = s[st..i].trim_end_matches(['u', 'U', 'l', 'L']);
            let v = if let Some(h) = lit.strip_prefix("0x").or_else(|| lit.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).ok()?
            } else {
                lit.parse().ok()?
            };
            out.push(Tok::Num(v));
        } else if c == b'(' {
            out.push(Tok::Open);
            i += 1;
        } else if c == b')' {
            out.push(Tok::Close);
            i += 1;
        } else {
            let two = s.get(i..i + 2);
            let op = match (two, c) {
                (Some("<<"), _) => "<<",
                (Some(">>"), _) => ">>",
                (_, b'|') => "|",
                (_, b'&') => "&",
                (_, b'+') => "+",
                (_, b'-') => "-",
                _ => return None,
            };
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Some(out)
}

/// How deeply [`eval_const`] nests parentheses: kernels write at most three levels; a
/// crafted format file must not recurse the parser off the stack (issue 18).
const MAX_PAREN_DEPTH: usize = 64;

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
    /// Parentheses open around the current position.
    depth: usize,
}

impl Parser<'_> {
    fn prec(op: &str) -> u8 {
        match op {
            "|" => 1,
            "&" => 2,
            "<<" | ">>" => 3,
            _ => 4, // + -
        }
    }

    fn expr(&mut self, min: u8) -> Option<u64> {
        let mut lhs = self.atom()?;
        while let Some(Tok::Op(op)) = self.toks.get(self.pos).copied() {
            let p = Self::prec(op);
            if p <= min {
                break;
            }
            self.pos += 1;
            let rhs = self.expr(p)?;
            lhs = match op {
                "|" => lhs | rhs,
                "&" => lhs & rhs,
                "<<" => lhs.checked_shl(u32::try_from(rhs).ok()?)?,
                ">>" => lhs.checked_shr(u32::try_from(rhs).ok()?)?,
                "+" => lhs.wrapping_add(rhs),
                _ => lhs.wrapping_sub(rhs),
            };
        }
        Some(lhs)
    }

    fn atom(&mut self) -> Option<u64> {
        match self.toks.get(self.pos).copied()? {
            Tok::Num(v) => {
                self.pos += 1;
                Some(v)
            }
            Tok::Open => {
                if self.depth >= MAX_PAREN_DEPTH {
                    return None;
                }
                self.pos += 1;
                self.depth += 1;
                let v = self.expr(0)?;
                self.depth -= 1;
                (self.toks.get(self.pos) == Some(&Tok::Close)).then_some(())?;
                self.pos += 1;
                Some(v)
            }
            _ => None,
        }
    }
}

impl fmt::Display for HeaderPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "commit {} bytes at {}, data at {}",
            self.commit_size, self.commit_offset, self.data_offset
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A `header_page` whose commit sits at the last u32 offset: the data offset is past it,
    /// not an overflow, and every page is then too short for the header.
    // See: issue 18 (fuzzing), target `format` (docs/fuzzing.md).
    #[test]
    fn gh_18_header_page_commit_offset_does_not_overflow() {
        let text = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
                    \tfield: local_t commit;\toffset:4294967295;\tsize:8;\tsigned:1;\n";
        let hp = HeaderPage::parse(text).expect("a header page");
        assert_eq!(hp.data_offset, u32::MAX as usize + 8);
        let e = crate::page::parse_page(&hp, &[0u8; 4096]).expect_err("too short");
        assert_eq!(
            e.kind,
            crate::page::PageErrorKind::ShortPage {
                len: 4096,
                header: u32::MAX as usize + 8
            }
        );
    }

    #[test]
    fn const_expressions() {
        assert_eq!(eval_const("2048"), Some(2048));
        assert_eq!(eval_const("(4096-1)"), Some(4095));
        let modern =
            "(((0x0000 | 0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0010 | 0x0020 | 0x0040) + 1) << 1)";
        assert_eq!(eval_const(modern), Some(0x100));
        assert_eq!(eval_const("1 +"), None);
    }

    /// Parentheses nested deeper than any kernel writes are not an expression, whatever the
    /// depth: before the limit, 100 000 of them overflowed the stack.
    // See: issue 18 (fuzzing), target `format` (docs/fuzzing.md).
    #[test]
    fn gh_18_deeply_nested_parentheses_are_refused_not_recursed() {
        let nested = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(eval_const(&nested(MAX_PAREN_DEPTH)), Some(1));
        assert_eq!(eval_const(&nested(MAX_PAREN_DEPTH + 1)), None);
        assert_eq!(eval_const(&nested(100_000)), None);
        let fmt = format!(
            "__print_flags(REC->prev_state & 3, \"|\", {{ {}, \"S\" }}) : \"R\", REC->prev_state & 4 ? \"+\" : \"\"",
            nested(100_000)
        );
        assert_eq!(StateTable::from_print_fmt(&fmt), StateTable::default());
    }

    #[test]
    fn decl_shapes() {
        assert_eq!(
            parse_decl("char prev_comm[16]", 16),
            Some(("prev_comm".into(), FieldKind::Array { len: Some(16) }))
        );
        assert_eq!(
            parse_decl("char comm[TASK_COMM_LEN]", 16),
            Some(("comm".into(), FieldKind::Array { len: None }))
        );
        assert_eq!(
            parse_decl("__data_loc char[] name", 4),
            Some(("name".into(), FieldKind::DataLoc))
        );
        assert_eq!(
            parse_decl("char buf[]", 0),
            Some(("buf".into(), FieldKind::Flexible))
        );
        assert_eq!(
            parse_decl("char buf", 0),
            Some(("buf".into(), FieldKind::Flexible))
        );
        assert_eq!(
            parse_decl("const void * skbaddr", 8),
            Some(("skbaddr".into(), FieldKind::Scalar))
        );
        assert_eq!(
            parse_decl("void *hrtimer", 8),
            Some(("hrtimer".into(), FieldKind::Scalar))
        );
    }

    #[test]
    fn state_tables() {
        let old = r#""prev_state=%s%s", REC->prev_state & (2048-1) ? __print_flags(REC->prev_state & (2048-1), "|", { 1, "S"} , { 2, "D" }, { 4, "T" }, { 8, "t" }, { 16, "Z" }, { 32, "X" }, { 64, "x" }, { 128, "K" }, { 256, "W" }, { 512, "P" }, { 1024, "N" }) : "R", REC->prev_state & 2048 ? "+" : "", REC->next_comm"#;
        let t = StateTable::from_print_fmt(old);
        assert_eq!(t.preempt, 2048);
        assert_eq!(t.letters.len(), 11);
        assert_eq!(t.letter(0), b'R');
        assert_eq!(t.letter(2048), b'+');
        assert_eq!(t.letter(1), b'S');
        assert_eq!(t.letter(64), b'x');
        let d = StateTable::default();
        assert_eq!(d.letter(0x80), b'I');
        assert_eq!(d.letter(0x100), b'+');
        assert_eq!(d.letter(0x10), b'X');
        assert_eq!(StateTable::from_print_fmt("garbage"), d);
    }

    /// `argus_marker` next to a format becomes [`EventFormat::marker`] (first line);
    /// formats without it have none.
    #[test]
    fn marker_files_are_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        let format = |name: &str, id: u16| {
            format!(
                "name: {name}\nID: {id}\nformat:\n\
                 \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
            )
        };
        write("argus_1/dispatch_0/format", &format("dispatch_0", 9000));
        write(
            "argus_1/dispatch_0/argus_marker",
            "argus:dispatch-begin f\nignored\n",
        );
        write(
            "argus_1/dispatch_0_ret/format",
            &format("dispatch_0_ret", 9001),
        );
        let set = FormatSet::load_dir(dir.path()).expect("load");
        assert_eq!(
            set.get(9000).and_then(|e| e.marker.as_deref()),
            Some("argus:dispatch-begin f")
        );
        assert_eq!(set.get(9001).map(|e| e.marker.clone()), Some(None));
    }
}
