//! The one ring-buffer decoder, shared by the live collector and replay. Sans-IO: bytes of a
//! page in, records out.
//!
//! Two layers:
//! - [`parse_page`] walks one `buffer_data_page` (`FORMATS.md` §3) and yields [`RawRecord`]s
//!   (absolute timestamp + payload slice), without allocating.
//! - [`Converter`] turns a raw record into an [`argus_schema::Event`] using field offsets
//!   looked up once per event id from the [`FormatSet`].
//!
//! ```text
//!  page: | u64 ts | commit (4|8) | hdr payload | hdr payload | ... | (padding) |
//!                   bits 0..26 = bytes in use, bit 31 missed events, bit 30 count stored
//!  hdr = u32: type_len (5 bits) | time_delta (27 bits) << 5
//!        0      payload length in the next u32 (length + 4), payload after it
//!        1..28  payload of type_len * 4 bytes
//!        29     padding (delta 0: rest of the page; else discarded event of array[0] bytes)
//!        30     time extend: ts += array[0] << 27 + delta
//!        31     absolute time stamp: ts = array[0] << 27 + delta (top 5 bits kept)
//! ```
//!
//! Every malformed condition is a [`PageError`] carrying its byte offset within the page; the
//! decoder never panics on data and stops at the first error of a page.

use crate::format::StateTable;
use crate::format::{
    EventFormat, FieldFormat, FieldOutOfBounds, FormatError, FormatSet, HeaderPage,
};
use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};
use std::collections::BTreeMap;
use std::fmt;

/// `RINGBUF_TYPE_PADDING`.
const TYPE_PADDING: u32 = 29;
/// `RINGBUF_TYPE_TIME_EXTEND`.
const TYPE_TIME_EXTEND: u32 = 30;
/// `RINGBUF_TYPE_TIME_STAMP`.
const TYPE_TIME_STAMP: u32 = 31;
/// Bits of the commit word holding the byte count (libtraceevent `COMMIT_MASK`).
const COMMIT_MASK: u64 = (1 << 27) - 1;
/// Commit flag: events were lost before this page.
const RB_MISSED_EVENTS: u64 = 1 << 31;
/// Commit flag: the number lost is stored after the data.
const RB_MISSED_STORED: u64 = 1 << 30;
/// `TS_MSB`: the bits an absolute time stamp record cannot hold (kernel `rb_fix_abs_ts`).
const TS_MSB: u64 = 0xf8 << 56;
/// `CLONE_THREAD`.
const CLONE_THREAD: u64 = 0x0001_0000;

/// What went wrong in a page, without the position (see [`PageError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PageErrorKind {
    /// The page is shorter than its header.
    #[error("page of {len} bytes is shorter than its {header}-byte header")]
    ShortPage {
        /// Bytes given.
        len: usize,
        /// Header size.
        header: usize,
    },
    /// The commit count exceeds the data area.
    #[error("commit {commit} larger than the page data area of {capacity} bytes")]
    CommitPastPage {
        /// Commit count.
        commit: usize,
        /// Bytes available after the header.
        capacity: usize,
    },
    /// A record header (or its length word) does not fit before the commit end.
    #[error("record header runs past commit {commit}")]
    HeaderPastCommit {
        /// Commit count.
        commit: usize,
    },
    /// A record's length runs past the commit end.
    #[error("record length {len} runs past commit {commit}")]
    RecordPastCommit {
        /// Record length (header included).
        len: usize,
        /// Commit count.
        commit: usize,
    },
    /// A `type_len` 0 record whose length word is 0 (a zero-filled page tail; perfetto
    /// b/204564312): nothing after it can be trusted.
    #[error("zero-length array record")]
    ZeroLengthRecord,
    /// A data record too short for the common header.
    #[error("record of {len} bytes is shorter than the common header")]
    ShortRecord {
        /// Payload length.
        len: usize,
    },
    /// A field of the record lies outside it.
    #[error("event id {id}: {source}")]
    FieldOutOfBounds {
        /// Event id.
        id: u16,
        /// Which bytes.
        source: FieldOutOfBounds,
    },
}

/// A malformed page: what and where (byte offset within the page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset}: {kind}")]
pub struct PageError {
    /// Byte offset within the page.
    pub offset: usize,
    /// What.
    pub kind: PageErrorKind,
}

/// Whether events were lost before a page (commit flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Missed {
    /// None lost.
    #[default]
    None,
    /// Some lost, count unknown (`RB_MISSED_EVENTS` without `RB_MISSED_STORED`).
    Unknown,
    /// This many lost.
    Count(u64),
}

/// The parsed page header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// Timestamp of the page start.
    pub ts: u64,
    /// Bytes of records in use.
    pub commit: usize,
    /// Lost events before this page.
    pub missed: Missed,
}

/// One record of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawRecord<'a> {
    /// Absolute timestamp (trace clock, ns).
    pub ts: u64,
    /// Offset of the record header within the page.
    pub offset: usize,
    /// The payload: the record described by the event's format (starts with `common_type`).
    pub payload: &'a [u8],
}

impl RawRecord<'_> {
    /// The event id (`common_type`, the first u16), when the payload has one.
    #[inline]
    pub fn id(&self) -> Option<u16> {
        Some(u16::from_le_bytes([
            *self.payload.first()?,
            *self.payload.get(1)?,
        ]))
    }
}

/// Parses the page header and returns an iterator over its records.
///
/// `page` is one whole page (normally 4096 bytes). The iterator yields `Err` at most once, then
/// stops.
pub fn parse_page<'a>(layout: &HeaderPage, page: &'a [u8]) -> Result<PageRecords<'a>, PageError> {
    let header = layout.data_offset;
    if page.len() < header {
        return Err(PageError {
            offset: 0,
            kind: PageErrorKind::ShortPage {
                len: page.len(),
                header,
            },
        });
    }
    let ts = le_u64(page, layout.timestamp_offset);
    let raw_commit = if layout.commit_size == 4 {
        le_u32(page, layout.commit_offset) as u64
    } else {
        le_u64(page, layout.commit_offset)
    };
    let commit = (raw_commit & COMMIT_MASK) as usize;
    let capacity = page.len() - header;
    if commit > capacity {
        return Err(PageError {
            offset: layout.commit_offset,
            kind: PageErrorKind::CommitPastPage { commit, capacity },
        });
    }
    let missed = if raw_commit & RB_MISSED_EVENTS == 0 {
        Missed::None
    } else if raw_commit & RB_MISSED_STORED != 0 {
        // The count is a `long` right after the data (kernel `rb_read_data_page`).
        let at = header + commit;
        match page.get(at..at + layout.commit_size) {
            Some(_) if layout.commit_size == 4 => Missed::Count(le_u32(page, at) as u64),
            Some(_) => Missed::Count(le_u64(page, at)),
            None => Missed::Unknown,
        }
    } else {
        Missed::Unknown
    };
    Ok(PageRecords {
        header: PageHeader { ts, commit, missed },
        data: &page[..header + commit],
        pos: header,
        ts,
        commit,
        done: false,
    })
}

#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

#[inline]
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// Iterator over the records of one page (see [`parse_page`]).
#[derive(Clone, Debug)]
pub struct PageRecords<'a> {
    header: PageHeader,
    /// The page up to the commit end.
    data: &'a [u8],
    pos: usize,
    ts: u64,
    commit: usize,
    done: bool,
}

impl<'a> PageRecords<'a> {
    /// The page header.
    pub fn header(&self) -> PageHeader {
        self.header
    }

    fn fail(
        &mut self,
        offset: usize,
        kind: PageErrorKind,
    ) -> Option<Result<RawRecord<'a>, PageError>> {
        self.done = true;
        Some(Err(PageError { offset, kind }))
    }
}

impl<'a> Iterator for PageRecords<'a> {
    type Item = Result<RawRecord<'a>, PageError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            let at = self.pos;
            let end = self.data.len();
            if at >= end {
                self.done = true;
                return None;
            }
            if at + 4 > end {
                return self.fail(
                    at,
                    PageErrorKind::HeaderPastCommit {
                        commit: self.commit,
                    },
                );
            }
            let word = le_u32(self.data, at);
            let type_len = word & 0x1f;
            let delta = (word >> 5) as u64;
            match type_len {
                1..=28 => {
                    let len = 4 + 4 * type_len as usize;
                    if at + len > end {
                        return self.fail(
                            at,
                            PageErrorKind::RecordPastCommit {
                                len,
                                commit: self.commit,
                            },
                        );
                    }
                    self.ts = self.ts.wrapping_add(delta);
                    self.pos = at + len;
                    return Some(Ok(RawRecord {
                        ts: self.ts,
                        offset: at,
                        payload: &self.data[at + 4..at + len],
                    }));
                }
                0 => {
                    if at + 8 > end {
                        return self.fail(
                            at,
                            PageErrorKind::HeaderPastCommit {
                                commit: self.commit,
                            },
                        );
                    }
                    let array0 = le_u32(self.data, at + 4) as usize;
                    if array0 == 0 {
                        return self.fail(at, PageErrorKind::ZeroLengthRecord);
                    }
                    // array[0] counts itself; the kernel aligns records to 4 bytes.
                    let payload_len = array0.saturating_sub(4);
                    let len = 8 + ((payload_len + 3) & !3);
                    if at + len > end {
                        return self.fail(
                            at,
                            PageErrorKind::RecordPastCommit {
                                len,
                                commit: self.commit,
                            },
                        );
                    }
                    self.ts = self.ts.wrapping_add(delta);
                    self.pos = at + len;
                    return Some(Ok(RawRecord {
                        ts: self.ts,
                        offset: at,
                        payload: &self.data[at + 8..at + 8 + payload_len],
                    }));
                }
                TYPE_PADDING => {
                    if delta == 0 {
                        // Null event: the rest of the page is padding.
                        self.done = true;
                        return None;
                    }
                    if at + 8 > end {
                        return self.fail(
                            at,
                            PageErrorKind::HeaderPastCommit {
                                commit: self.commit,
                            },
                        );
                    }
                    let len = 4 + le_u32(self.data, at + 4) as usize;
                    if at + len > end {
                        return self.fail(
                            at,
                            PageErrorKind::RecordPastCommit {
                                len,
                                commit: self.commit,
                            },
                        );
                    }
                    // A discarded event still advances time (kernel `rb_update_read_stamp`).
                    self.ts = self.ts.wrapping_add(delta);
                    self.pos = at + len.max(8);
                }
                TYPE_TIME_EXTEND => {
                    if at + 8 > end {
                        return self.fail(
                            at,
                            PageErrorKind::HeaderPastCommit {
                                commit: self.commit,
                            },
                        );
                    }
                    let ext = ((le_u32(self.data, at + 4) as u64) << 27) + delta;
                    self.ts = self.ts.wrapping_add(ext);
                    self.pos = at + 8;
                }
                _ => {
                    // TYPE_TIME_STAMP: absolute, without the top 5 bits.
                    debug_assert_eq!(type_len, TYPE_TIME_STAMP);
                    if at + 8 > end {
                        return self.fail(
                            at,
                            PageErrorKind::HeaderPastCommit {
                                commit: self.commit,
                            },
                        );
                    }
                    let abs = ((le_u32(self.data, at + 4) as u64) << 27) | delta;
                    self.ts = abs | (self.ts & TS_MSB);
                    self.pos = at + 8;
                }
            }
        }
    }
}

/// A task name as the kernel stores it: up to 16 bytes, NUL-padded. Kept inline so decoding a
/// `sched_switch` does not allocate.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Comm {
    bytes: [u8; 16],
    len: u8,
}

impl Comm {
    /// From raw bytes (cut at the first NUL, at most 16 bytes).
    pub fn new(raw: &[u8]) -> Comm {
        let raw = raw.iter().position(|&c| c == 0).map_or(raw, |n| &raw[..n]);
        let n = raw.len().min(16);
        let mut bytes = [0u8; 16];
        bytes[..n].copy_from_slice(&raw[..n]);
        Comm {
            bytes,
            len: n as u8,
        }
    }

    /// From a kernel `char[16]` field (cut at the first NUL).
    #[inline]
    pub fn from_array(raw: &[u8; 16]) -> Comm {
        let len = raw.iter().position(|&c| c == 0).unwrap_or(16);
        let mut bytes = *raw;
        bytes[len..].fill(0);
        Comm {
            bytes,
            len: len as u8,
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Lossy UTF-8 text.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string_lossy())
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

/// Where a `Fork` event's `thread` flag came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForkSource {
    /// Not a fork.
    #[default]
    None,
    /// `task:task_newtask`: `thread` is `clone_flags & CLONE_THREAD`, authoritative.
    NewTask,
    /// `sched:sched_process_fork` alone: the record does not say; `thread` is false unless the
    /// thread table knows the child's process already.
    ProcessFork,
}

/// A converted record: the event (if the record maps to one) plus what it says about threads.
/// `event.seq` is 0 and `event.pid` equals `event.tid`: both are assigned by the merge
/// ([`crate::merge`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Record time.
    pub ts: Nanos,
    /// CPU whose buffer held it.
    pub cpu: Cpu,
    /// The event, or `None` for records that only carry thread names (`task_rename`, the
    /// `sched_process_fork` twin of a `task_newtask`).
    pub event: Option<Event>,
    /// Up to two `(tid, comm)` observations.
    pub comms: [Option<(Tid, Comm)>; 2],
    /// For a `Fork`: how sure its `thread` flag is.
    pub fork_source: ForkSource,
    /// For an `Exec` by a non-leader thread: the tid it had before (`old_pid`), which is gone.
    pub exec_old_tid: Option<Tid>,
}

/// How a precomputed integer field is read (size and signedness, from the format file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
}

/// An integer field looked up once, read per record with a reader specialized for its width.
#[derive(Clone, Copy, Debug)]
struct Field {
    offset: usize,
    width: Width,
}

/// Copies `N` bytes at `at`, or reports where the record is too short.
#[inline(always)]
fn bytes_at<const N: usize>(p: &[u8], at: usize) -> Result<[u8; N], FieldOutOfBounds> {
    match p.get(at..at.wrapping_add(N)) {
        Some(s) => {
            let mut a = [0u8; N];
            a.copy_from_slice(s);
            Ok(a)
        }
        None => Err(FieldOutOfBounds {
            offset: at,
            size: N,
            len: p.len(),
        }),
    }
}

impl Field {
    fn of<'a>(ev: &'a EventFormat, name: &'static str) -> Result<&'a FieldFormat, FormatError> {
        ev.field(name).ok_or_else(|| FormatError::MissingField {
            event: ev.name.clone(),
            field: name,
        })
    }

    fn int(ev: &EventFormat, name: &'static str) -> Result<Field, FormatError> {
        let f = Field::of(ev, name)?;
        let width = match (f.size, f.signed) {
            (1, false) => Width::U8,
            (1, true) => Width::I8,
            (2, false) => Width::U16,
            (2, true) => Width::I16,
            (4, false) => Width::U32,
            (4, true) => Width::I32,
            (8, _) => Width::U64,
            (size, _) => {
                return Err(FormatError::BadFieldSize {
                    event: ev.name.clone(),
                    field: name.to_string(),
                    size,
                })
            }
        };
        Ok(Field {
            offset: f.offset as usize,
            width,
        })
    }

    /// The value, sign-extended to 64 bits when the field is signed.
    #[inline(always)]
    fn u64(&self, p: &[u8]) -> Result<u64, FieldOutOfBounds> {
        let o = self.offset;
        Ok(match self.width {
            Width::U64 => u64::from_le_bytes(bytes_at::<8>(p, o)?),
            Width::U32 => u32::from_le_bytes(bytes_at::<4>(p, o)?) as u64,
            Width::I32 => i32::from_le_bytes(bytes_at::<4>(p, o)?) as i64 as u64,
            Width::U16 => u16::from_le_bytes(bytes_at::<2>(p, o)?) as u64,
            Width::I16 => i16::from_le_bytes(bytes_at::<2>(p, o)?) as i64 as u64,
            Width::U8 => bytes_at::<1>(p, o)?[0] as u64,
            Width::I8 => bytes_at::<1>(p, o)?[0] as i8 as i64 as u64,
        })
    }

    #[inline(always)]
    fn i32(&self, p: &[u8]) -> Result<i32, FieldOutOfBounds> {
        self.u64(p).map(|v| v as i32)
    }
}

/// A fixed array of 4- or 8-byte integers (`unsigned long args[6]`, `caller[8]`).
#[derive(Clone, Copy, Debug)]
struct ArrayField {
    offset: usize,
    /// Bytes per element (4 or 8).
    each: usize,
    /// Elements the format declares.
    len: usize,
}

impl ArrayField {
    fn of(ev: &EventFormat, name: &'static str, len: usize) -> Result<ArrayField, FormatError> {
        let f = Field::of(ev, name)?;
        let each = match f.kind {
            crate::format::FieldKind::Array { len: Some(n) } if n > 0 => f.size / n,
            _ => f.size / len.max(1) as u32,
        };
        if each != 4 && each != 8 {
            return Err(FormatError::BadFieldSize {
                event: ev.name.clone(),
                field: name.to_string(),
                size: f.size,
            });
        }
        Ok(ArrayField {
            offset: f.offset as usize,
            each: each as usize,
            len: (f.size / each) as usize,
        })
    }

    /// Element `i` (zero-extended).
    #[inline(always)]
    fn get(&self, p: &[u8], i: usize) -> Result<u64, FieldOutOfBounds> {
        let at = self.offset + i * self.each;
        if self.each == 8 {
            Ok(u64::from_le_bytes(bytes_at::<8>(p, at)?))
        } else {
            Ok(u32::from_le_bytes(bytes_at::<4>(p, at)?) as u64)
        }
    }

    /// How many elements the record actually holds (a flexible tail may be shorter).
    #[inline]
    fn available(&self, p: &[u8]) -> usize {
        p.len().saturating_sub(self.offset) / self.each
    }
}

/// A string field: fixed `char[N]`, `__data_loc`/`__rel_loc` or a flexible array.
#[derive(Clone, Debug)]
struct StrField(FieldFormat);

impl StrField {
    fn of(ev: &EventFormat, name: &'static str) -> Result<StrField, FormatError> {
        Field::of(ev, name).cloned().map(StrField)
    }

    #[inline]
    fn read<'a>(&self, p: &'a [u8]) -> Result<&'a [u8], FieldOutOfBounds> {
        self.0.read_str(p)
    }

    /// The string as a task name (at most 16 bytes, cut at the first NUL).
    #[inline]
    fn comm(&self, p: &[u8]) -> Result<Comm, FieldOutOfBounds> {
        if let (crate::format::FieldKind::Array { .. }, 16) = (self.0.kind, self.0.size) {
            return Ok(Comm::from_array(&bytes_at::<16>(
                p,
                self.0.offset as usize,
            )?));
        }
        self.read(p).map(Comm::new)
    }
}

/// What to do with each event id.
#[derive(Clone, Debug)]
enum Handler {
    Switch {
        prev_pid: Field,
        prev_state: Field,
        next_pid: Field,
        prev_comm: StrField,
        next_comm: StrField,
        states: StateLetters,
    },
    Waking {
        pid: Field,
        comm: Option<StrField>,
        new: bool,
    },
    ProcessFork {
        child_pid: Field,
        child_comm: Option<StrField>,
    },
    NewTask {
        pid: Field,
        comm: Option<StrField>,
        clone_flags: Field,
    },
    Exec {
        filename: Option<StrField>,
        pid: Option<Field>,
        old_pid: Option<Field>,
    },
    Exit,
    Rename {
        pid: Field,
        newcomm: StrField,
    },
    SysEnter {
        id: Field,
        args: ArrayField,
    },
    SysExit {
        id: Field,
        ret: Field,
    },
    Irq {
        irq: Field,
        exit: bool,
    },
    Softirq {
        vec: Field,
        exit: bool,
    },
    HrStart {
        timer: Field,
        function: Field,
        expires: Field,
    },
    HrExpire {
        timer: Field,
        function: Field,
    },
    HrExpireExit {
        timer: Field,
    },
    Print {
        buf: StrField,
    },
    WorkQueue {
        work: Field,
        function: Field,
    },
    WorkStart {
        work: Field,
        function: Field,
    },
    WorkEnd {
        work: Field,
    },
    TimerStart {
        timer: Field,
        function: Field,
        expires: Field,
    },
    TimerExpire {
        timer: Field,
        function: Field,
    },
    TimerExpireExit {
        timer: Field,
    },
    SignalGenerate {
        sig: Field,
        pid: Field,
    },
    SignalDeliver {
        sig: Field,
    },
    /// `filelock/posix_lock_inode`, `filelock/locks_remove_posix` (`flock: false`) and
    /// `filelock/flock_lock_inode` (`flock: true`).
    FileLock {
        ino: Field,
        dev: Field,
        lock_type: Field,
        ret: Field,
        flock: bool,
    },
    /// `ftrace/kernel_stack` (`size` = number of entries, `caller` a flexible tail) and
    /// `ftrace/user_stack` (`caller[8]`, unused entries zero).
    Stack {
        kernel: bool,
        size: Option<Field>,
        caller: ArrayField,
    },
    /// An event whose every record is a marker with this text ([`EventFormat::marker`]:
    /// the `--dispatch` uprobes, `linux/uprobe.rs`).
    Marker {
        text: String,
    },
    /// A known format Argus does not map (counted).
    Ignored,
}

/// `prev_state` → letter, tabulated for the small values every switch carries.
#[derive(Clone, Debug)]
struct StateLetters {
    table: StateTable,
    /// `letter(v)` for every `v < cache.len()`.
    cache: Vec<u8>,
}

impl StateLetters {
    fn new(table: StateTable) -> StateLetters {
        let n = (table.preempt.saturating_mul(2)).clamp(1, 8192) as usize;
        let cache = (0..n as u64).map(|v| table.letter(v)).collect();
        StateLetters { table, cache }
    }

    #[inline(always)]
    fn letter(&self, v: u64) -> u8 {
        match self.cache.get(v as usize) {
            Some(&c) => c,
            None => self.table.letter(v),
        }
    }
}

/// Whether the event belongs to `system` (format sets parsed from text alone have no system).
fn in_system(ev: &EventFormat, system: &str) -> bool {
    ev.system.is_empty() || ev.system == system
}

impl Handler {
    fn build(ev: &EventFormat) -> Result<Handler, FormatError> {
        if let Some(text) = &ev.marker {
            return Ok(Handler::Marker { text: text.clone() });
        }
        let opt = |name| StrField::of(ev, name).ok();
        let int = |name| Field::int(ev, name);
        Ok(match ev.name.as_str() {
            "sched_switch" => Handler::Switch {
                prev_pid: int("prev_pid")?,
                prev_state: int("prev_state")?,
                next_pid: int("next_pid")?,
                prev_comm: StrField::of(ev, "prev_comm")?,
                next_comm: StrField::of(ev, "next_comm")?,
                states: StateLetters::new(StateTable::from_print_fmt(&ev.print_fmt)),
            },
            // sched_wakeup is mapped to Waking too: on kernels (or captures) without
            // sched_waking it is the only wake-up record; it is emitted by the waker's CPU
            // slightly later than sched_waking would be.
            "sched_waking" | "sched_wakeup" => Handler::Waking {
                pid: int("pid")?,
                comm: opt("comm"),
                new: false,
            },
            "sched_wakeup_new" => Handler::Waking {
                pid: int("pid")?,
                comm: opt("comm"),
                new: true,
            },
            "sched_process_fork" => Handler::ProcessFork {
                child_pid: int("child_pid")?,
                child_comm: opt("child_comm"),
            },
            "task_newtask" => Handler::NewTask {
                pid: int("pid")?,
                comm: opt("comm"),
                clone_flags: int("clone_flags")?,
            },
            "sched_process_exec" => Handler::Exec {
                filename: opt("filename"),
                pid: int("pid").ok(),
                old_pid: int("old_pid").ok(),
            },
            "sched_process_exit" => Handler::Exit,
            "task_rename" => Handler::Rename {
                pid: int("pid")?,
                newcomm: StrField::of(ev, "newcomm")?,
            },
            "sys_enter" if in_system(ev, "raw_syscalls") => Handler::SysEnter {
                id: int("id")?,
                args: ArrayField::of(ev, "args", 6)?,
            },
            "sys_exit" if in_system(ev, "raw_syscalls") => Handler::SysExit {
                id: int("id")?,
                ret: int("ret")?,
            },
            "irq_handler_entry" | "irq_handler_exit" => Handler::Irq {
                irq: int("irq")?,
                exit: ev.name == "irq_handler_exit",
            },
            "softirq_entry" | "softirq_exit" => Handler::Softirq {
                vec: int("vec")?,
                exit: ev.name == "softirq_exit",
            },
            "hrtimer_start" => Handler::HrStart {
                timer: int("hrtimer")?,
                function: int("function")?,
                expires: int("expires")?,
            },
            "hrtimer_expire_entry" => Handler::HrExpire {
                timer: int("hrtimer")?,
                function: int("function")?,
            },
            "hrtimer_expire_exit" => Handler::HrExpireExit {
                timer: int("hrtimer")?,
            },
            "print" if in_system(ev, "ftrace") => Handler::Print {
                buf: StrField::of(ev, "buf")?,
            },
            "workqueue_queue_work" => Handler::WorkQueue {
                work: int("work")?,
                function: int("function")?,
            },
            "workqueue_execute_start" => Handler::WorkStart {
                work: int("work")?,
                function: int("function")?,
            },
            "workqueue_execute_end" => Handler::WorkEnd { work: int("work")? },
            "timer_start" if in_system(ev, "timer") => Handler::TimerStart {
                timer: int("timer")?,
                function: int("function")?,
                expires: int("expires")?,
            },
            "timer_expire_entry" => Handler::TimerExpire {
                timer: int("timer")?,
                function: int("function")?,
            },
            "timer_expire_exit" => Handler::TimerExpireExit {
                timer: int("timer")?,
            },
            "signal_generate" => Handler::SignalGenerate {
                sig: int("sig")?,
                pid: int("pid")?,
            },
            "signal_deliver" => Handler::SignalDeliver { sig: int("sig")? },
            "posix_lock_inode" | "locks_remove_posix" | "flock_lock_inode"
                if in_system(ev, "filelock") =>
            {
                Handler::FileLock {
                    ino: int("i_ino")?,
                    dev: int("s_dev")?,
                    // `fl_type` before Linux 6.9 (file_lock_core).
                    lock_type: int("type").or_else(|_| int("fl_type"))?,
                    ret: int("ret")?,
                    flock: ev.name == "flock_lock_inode",
                }
            }
            "kernel_stack" if in_system(ev, "ftrace") => Handler::Stack {
                kernel: true,
                size: Some(int("size")?),
                caller: ArrayField::of(ev, "caller", 8)?,
            },
            "user_stack" if in_system(ev, "ftrace") => Handler::Stack {
                kernel: false,
                size: None,
                caller: ArrayField::of(ev, "caller", 8)?,
            },
            _ => Handler::Ignored,
        })
    }
}

/// Per-id tables.
#[derive(Clone, Debug)]
struct Slot {
    handler: Handler,
    common_flags: Field,
    common_pid: Field,
}

/// Converts raw records to [`Event`]s. One per CPU stream (it keeps a little per-CPU state:
/// the `task_newtask` children whose `sched_process_fork` twin is still to come).
///
/// Field offsets and widths are looked up once per event id from the format files; each
/// record costs one table lookup and the reads its event needs.
///
/// Fork de-duplication: one `clone()` fires `task:task_newtask` (inside `copy_process`) and
/// then `sched:sched_process_fork` (in `kernel_clone`), both on the parent's CPU. When
/// `task_newtask` is decoded the `Fork` is emitted with `thread` from `CLONE_THREAD`
/// ([`ForkSource::NewTask`]) and the child remembered; the later `sched_process_fork` for that
/// child then only contributes the child's comm. When only `sched_process_fork` is enabled it
/// emits the `Fork` itself with [`ForkSource::ProcessFork`] and the merge's thread table
/// decides `thread` (see [`crate::merge::ThreadTable`]).
///
/// Stacks: with the tracefs `stacktrace` / `userstacktrace` options on, the kernel writes an
/// `ftrace/kernel_stack` / `ftrace/user_stack` record right after each event on the same CPU;
/// they become [`EventKind::Stack`] events of the same task (decode needs their format files,
/// `formats/events/ftrace/{kernel,user}_stack/format`, like any other event).
#[derive(Clone, Debug)]
pub struct Converter {
    slots: Vec<Option<Slot>>,
    names: Vec<Option<String>>,
    counts_unknown: BTreeMap<u16, u64>,
    counts_ignored: Vec<u64>,
    /// Children announced by `task_newtask` whose `sched_process_fork` is pending.
    pending_forks: Vec<i32>,
}

/// An event format Argus maps lacks what the converter needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{event}: {source}")]
pub struct ConverterError {
    /// `system/name` of the event.
    pub event: String,
    /// What is missing.
    pub source: FormatError,
}

/// Records the converter did not turn into events, by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Records whose id has no format file, by id.
    pub unknown_ids: BTreeMap<u16, u64>,
    /// Records of known events Argus does not use, by `system/name`.
    pub ignored: BTreeMap<String, u64>,
}

impl Skipped {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Skipped) {
        for (k, v) in &other.unknown_ids {
            *self.unknown_ids.entry(*k).or_default() += v;
        }
        for (k, v) in &other.ignored {
            *self.ignored.entry(k.clone()).or_default() += v;
        }
    }
}

impl Converter {
    /// Builds the per-id tables from `formats`. Fails when an event Argus maps lacks a field
    /// it needs.
    pub fn new(formats: &FormatSet) -> Result<Converter, ConverterError> {
        let max = formats
            .events
            .keys()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1);
        let mut slots = vec![None; max];
        let mut names = vec![None; max];
        for (&id, ev) in &formats.events {
            let fail = |source| ConverterError {
                event: ev.full_name(),
                source,
            };
            let handler = Handler::build(ev).map_err(fail)?;
            let common = |name| Field::int(ev, name).map_err(fail);
            slots[id as usize] = Some(Slot {
                handler,
                common_flags: common("common_flags")?,
                common_pid: common("common_pid")?,
            });
            names[id as usize] = Some(if ev.system.is_empty() {
                ev.name.clone()
            } else {
                ev.full_name()
            });
        }
        Ok(Converter {
            counts_ignored: vec![0; max],
            slots,
            names,
            counts_unknown: BTreeMap::new(),
            pending_forks: Vec::new(),
        })
    }

    /// What was skipped so far.
    pub fn skipped(&self) -> Skipped {
        let mut s = Skipped {
            unknown_ids: self.counts_unknown.clone(),
            ..Skipped::default()
        };
        for (id, &n) in self.counts_ignored.iter().enumerate() {
            if n > 0 {
                if let Some(Some(name)) = self.names.get(id) {
                    s.ignored.insert(name.clone(), n);
                }
            }
        }
        s
    }

    /// Converts one record. `Ok(None)` for records that are skipped (unknown id or an event
    /// Argus does not use: counted, see [`Converter::skipped`]).
    #[inline]
    pub fn convert(&mut self, cpu: Cpu, rec: &RawRecord<'_>) -> Result<Option<Decoded>, PageError> {
        let p = rec.payload;
        let err = |kind| PageError {
            offset: rec.offset,
            kind,
        };
        let id = rec
            .id()
            .ok_or(err(PageErrorKind::ShortRecord { len: p.len() }))?;
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            *self.counts_unknown.entry(id).or_default() += 1;
            return Ok(None);
        };
        let oob = |source| err(PageErrorKind::FieldOutOfBounds { id, source });
        let ts = Nanos(rec.ts);
        let mut comms = [None, None];
        let mut fork_source = ForkSource::None;
        let mut exec_old_tid = None;
        let names_only = |comms| {
            Ok(Some(Decoded {
                ts,
                cpu,
                event: None,
                comms,
                fork_source: ForkSource::None,
                exec_old_tid: None,
            }))
        };
        let kind = match &slot.handler {
            Handler::Ignored => {
                self.counts_ignored[id as usize] += 1;
                return Ok(None);
            }
            Handler::Switch {
                prev_pid,
                prev_state,
                next_pid,
                prev_comm,
                next_comm,
                states,
            } => {
                let prev = Tid(prev_pid.i32(p).map_err(oob)?);
                let next = Tid(next_pid.i32(p).map_err(oob)?);
                let state = prev_state.u64(p).map_err(oob)?;
                comms[0] = Some((prev, prev_comm.comm(p).map_err(oob)?));
                comms[1] = Some((next, next_comm.comm(p).map_err(oob)?));
                EventKind::Switch {
                    prev,
                    prev_state: TaskState(states.letter(state)),
                    next,
                }
            }
            Handler::Waking { pid, comm, new } => {
                let target = Tid(pid.i32(p).map_err(oob)?);
                if let Some(c) = comm {
                    comms[0] = Some((target, c.comm(p).map_err(oob)?));
                }
                if *new {
                    EventKind::WakeupNew { target }
                } else {
                    EventKind::Waking { target }
                }
            }
            Handler::ProcessFork {
                child_pid,
                child_comm,
            } => {
                let child = Tid(child_pid.i32(p).map_err(oob)?);
                if let Some(c) = child_comm {
                    comms[0] = Some((child, c.comm(p).map_err(oob)?));
                }
                if let Some(i) = self.pending_forks.iter().position(|&c| c == child.0) {
                    self.pending_forks.swap_remove(i);
                    return names_only(comms);
                }
                fork_source = ForkSource::ProcessFork;
                EventKind::Fork {
                    child,
                    child_pid: Pid(child.0),
                    thread: false,
                }
            }
            Handler::NewTask {
                pid,
                comm,
                clone_flags,
            } => {
                let child = Tid(pid.i32(p).map_err(oob)?);
                let thread = clone_flags.u64(p).map_err(oob)? & CLONE_THREAD != 0;
                if let Some(c) = comm {
                    comms[0] = Some((child, c.comm(p).map_err(oob)?));
                }
                // Bounded: a lost sched_process_fork must not grow this forever.
                if self.pending_forks.len() >= 256 {
                    self.pending_forks.remove(0);
                }
                self.pending_forks.push(child.0);
                fork_source = ForkSource::NewTask;
                EventKind::Fork {
                    child,
                    child_pid: Pid(child.0),
                    thread,
                }
            }
            Handler::Exec {
                filename,
                pid,
                old_pid,
            } => {
                let tid = Tid(slot.common_pid.i32(p).map_err(oob)?);
                if let Some(f) = filename {
                    // The kernel sets comm to the basename of the file, cut to 15 bytes
                    // (`begin_new_exec` → `__set_task_comm(kbasename(bprm->filename))`).
                    let path = f.read(p).map_err(oob)?;
                    let base = path.rsplit(|&c| c == b'/').next().unwrap_or(path);
                    comms[0] = Some((tid, Comm::new(&base[..base.len().min(15)])));
                }
                if let (Some(pid), Some(old)) = (pid, old_pid) {
                    let (pid, old) = (pid.i32(p).map_err(oob)?, old.i32(p).map_err(oob)?);
                    if pid != old {
                        exec_old_tid = Some(Tid(old));
                    }
                }
                EventKind::Exec
            }
            Handler::Exit => EventKind::Exit,
            Handler::Rename { pid, newcomm } => {
                let who = Tid(pid.i32(p).map_err(oob)?);
                comms[0] = Some((who, newcomm.comm(p).map_err(oob)?));
                return names_only(comms);
            }
            Handler::SysEnter { id: nr, args } => {
                let mut a = [0u64; 6];
                if args.len >= 6 {
                    for (i, slot) in a.iter_mut().enumerate() {
                        *slot = args.get(p, i).map_err(oob)?;
                    }
                }
                EventKind::SysEnter {
                    nr: nr.i32(p).map_err(oob)?,
                    args: a,
                }
            }
            Handler::SysExit { id: nr, ret } => EventKind::SysExit {
                nr: nr.i32(p).map_err(oob)?,
                ret: ret.u64(p).map_err(oob)? as i64,
            },
            Handler::Irq { irq, exit } => {
                let irq = irq.i32(p).map_err(oob)?;
                if *exit {
                    EventKind::IrqExit { irq }
                } else {
                    EventKind::IrqEntry { irq }
                }
            }
            Handler::Softirq { vec, exit } => {
                let vec = vec.u64(p).map_err(oob)? as u32;
                if *exit {
                    EventKind::SoftirqExit { vec }
                } else {
                    EventKind::SoftirqEntry { vec }
                }
            }
            Handler::HrStart {
                timer,
                function,
                expires,
            } => EventKind::HrtimerStart {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
                expires: expires.u64(p).map_err(oob)?,
            },
            Handler::HrExpire { timer, function } => EventKind::HrtimerExpire {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::HrExpireExit { timer } => EventKind::HrtimerExpireExit {
                timer: timer.u64(p).map_err(oob)?,
            },
            Handler::Print { buf } => {
                let b = buf.read(p).map_err(oob)?;
                let b = b.strip_suffix(b"\n").unwrap_or(b);
                EventKind::Marker {
                    text: String::from_utf8_lossy(b).into_owned(),
                }
            }
            Handler::Marker { text } => EventKind::Marker { text: text.clone() },
            Handler::WorkQueue { work, function } => EventKind::WorkQueue {
                work: work.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::WorkStart { work, function } => EventKind::WorkStart {
                work: work.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::WorkEnd { work } => EventKind::WorkEnd {
                work: work.u64(p).map_err(oob)?,
            },
            Handler::TimerStart {
                timer,
                function,
                expires,
            } => EventKind::TimerStart {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
                expires: expires.u64(p).map_err(oob)?,
            },
            Handler::TimerExpire { timer, function } => EventKind::TimerExpire {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::TimerExpireExit { timer } => EventKind::TimerExpireExit {
                timer: timer.u64(p).map_err(oob)?,
            },
            Handler::SignalGenerate { sig, pid } => EventKind::SignalGenerate {
                sig: sig.i32(p).map_err(oob)?,
                target: Tid(pid.i32(p).map_err(oob)?),
            },
            Handler::SignalDeliver { sig } => EventKind::SignalDeliver {
                sig: sig.i32(p).map_err(oob)?,
            },
            Handler::FileLock {
                ino,
                dev,
                lock_type,
                ret,
                flock,
            } => EventKind::FileLock {
                inode: ino.u64(p).map_err(oob)?,
                dev: dev.u64(p).map_err(oob)? as u32,
                flock: *flock,
                lock_type: lock_type.u64(p).map_err(oob)? as u8,
                ret: ret.i32(p).map_err(oob)?,
            },
            Handler::Stack {
                kernel,
                size,
                caller,
            } => {
                // Newer kernels write only the `size` entries they have (the format still
                // says `caller[8]`); user stacks pad unused entries with zeros, old kernels
                // end both with ULONG_MAX.
                let avail = caller.available(p);
                let n = match size {
                    Some(s) => (s.u64(p).map_err(oob)? as usize).min(avail),
                    None => caller.len.min(avail),
                };
                let mut ips = Vec::with_capacity(n);
                for i in 0..n {
                    let ip = caller.get(p, i).map_err(oob)?;
                    let end = if caller.each == 8 {
                        u64::MAX
                    } else {
                        u32::MAX as u64
                    };
                    if ip == end || (ip == 0 && !kernel) {
                        break;
                    }
                    ips.push(ip);
                }
                EventKind::Stack {
                    kernel: *kernel,
                    ips,
                }
            }
        };
        let flags = slot.common_flags.u64(p).map_err(oob)? as u8;
        let ctx = match slot.handler {
            // Uprobe handlers run in the task that hit the probe (on its way back to user
            // mode), and their `common_flags` cannot be trusted: 6.18 writes 0xff (the
            // context word is taken with `tracing_gen_ctx_dec()`, whose decrement of a zero
            // preempt count borrows into the flags; seen as `DBZff` in `trace`).
            Handler::Marker { .. } => Context::Task,
            _ => Context::from_common_flags(flags),
        };
        let tid = Tid(slot.common_pid.i32(p).map_err(oob)?);
        Ok(Some(Decoded {
            ts,
            cpu,
            event: Some(Event {
                ts,
                seq: 0,
                cpu,
                pid: Pid(tid.0),
                tid,
                ctx,
                kind,
            }),
            comms,
            fork_source,
            exec_old_tid,
        }))
    }
}

/// Decodes a whole page through `conv`, appending results to `out` and returning the header.
/// Convenience for callers that work page by page (replay, the live collector).
pub fn decode_page(
    layout: &HeaderPage,
    conv: &mut Converter,
    cpu: Cpu,
    page: &[u8],
    out: &mut Vec<Decoded>,
) -> Result<PageHeader, PageError> {
    let recs = parse_page(layout, page)?;
    let header = recs.header();
    for r in recs {
        if let Some(d) = conv.convert(cpu, &r?)? {
            out.push(d);
        }
    }
    Ok(header)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Builds a 64-bit page: header + given record bytes.
    fn page(ts: u64, commit_flags: u64, body: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        p[..8].copy_from_slice(&ts.to_le_bytes());
        p[8..16].copy_from_slice(&(body.len() as u64 | commit_flags).to_le_bytes());
        p[16..16 + body.len()].copy_from_slice(body);
        p
    }

    fn hdr(type_len: u32, delta: u32) -> [u8; 4] {
        (type_len | (delta << 5)).to_le_bytes()
    }

    type Collected = Vec<Result<(u64, usize, Vec<u8>), PageError>>;

    fn collect(p: &[u8]) -> (PageHeader, Collected) {
        let it = parse_page(&HeaderPage::default(), p).unwrap();
        let h = it.header();
        (
            h,
            it.map(|r| r.map(|r| (r.ts, r.offset, r.payload.to_vec())))
                .collect(),
        )
    }

    #[test]
    fn every_type_len() {
        let mut b = Vec::new();
        // type_len 2: 8-byte payload, delta 5.
        b.extend(hdr(2, 5));
        b.extend([1, 2, 3, 4, 5, 6, 7, 8]);
        // type_len 0: array[0] = 12 + 4 → 12-byte payload, delta 1.
        b.extend(hdr(0, 1));
        b.extend(16u32.to_le_bytes());
        b.extend([9; 12]);
        // time extend: + (1 << 27) + 3.
        b.extend(hdr(30, 3));
        b.extend(1u32.to_le_bytes());
        // type_len 1 with delta 0.
        b.extend(hdr(1, 0));
        b.extend([7; 4]);
        // discarded event (padding with delta): 4 + array[0] = 8 bytes total, delta 2.
        b.extend(hdr(29, 2));
        b.extend(4u32.to_le_bytes());
        // absolute time stamp 0x1234 << 27 | 10.
        b.extend(hdr(31, 10));
        b.extend(0x1234u32.to_le_bytes());
        b.extend(hdr(28, 0));
        b.extend([5; 112]);
        let p = page(100, 0, &b);
        let (h, recs) = collect(&p);
        assert_eq!(h.ts, 100);
        assert_eq!(h.missed, Missed::None);
        let recs: Vec<_> = recs.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(recs.len(), 4);
        assert_eq!(recs[0], (105, 16, vec![1, 2, 3, 4, 5, 6, 7, 8]));
        assert_eq!(recs[1], (106, 28, vec![9; 12]));
        let t = 106 + (1 << 27) + 3;
        assert_eq!(recs[2], (t, 56, vec![7; 4]));
        assert_eq!(recs[3].0, (0x1234u64 << 27) | 10);
        assert_eq!(recs[3].1, 80);
        assert_eq!(recs[3].2.len(), 112);
    }

    #[test]
    fn padding_ends_the_page() {
        let mut b = Vec::new();
        b.extend(hdr(1, 1));
        b.extend([1; 4]);
        b.extend(hdr(29, 0));
        b.extend([0xff; 12]); // ignored
        let (_, recs) = collect(&page(0, 0, &b));
        assert_eq!(recs.len(), 1);
    }

    #[test]
    fn absolute_timestamp_keeps_top_bits() {
        let mut b = Vec::new();
        b.extend(hdr(31, 7));
        b.extend(2u32.to_le_bytes());
        b.extend(hdr(1, 0));
        b.extend([0; 4]);
        let base = 0xf800_0000_0000_0000u64;
        let (_, recs) = collect(&page(base, 0, &b));
        assert_eq!(recs[0].as_ref().unwrap().0, base | (2 << 27) | 7);
    }

    #[test]
    fn missed_events_flags() {
        let mut b = Vec::new();
        b.extend(hdr(1, 0));
        b.extend([0; 4]);
        let p = page(0, RB_MISSED_EVENTS, &b);
        assert_eq!(collect(&p).0.missed, Missed::Unknown);
        let mut p = page(0, RB_MISSED_EVENTS | RB_MISSED_STORED, &b);
        p[16 + 8..16 + 16].copy_from_slice(&42u64.to_le_bytes());
        let (h, recs) = collect(&p);
        assert_eq!(h.missed, Missed::Count(42));
        assert_eq!(h.commit, 8);
        assert_eq!(recs.len(), 1);
    }

    #[test]
    fn four_byte_commit_layout() {
        let mut p = vec![0u8; 4096];
        p[..8].copy_from_slice(&50u64.to_le_bytes());
        p[8..12].copy_from_slice(&8u32.to_le_bytes());
        p[12..16].copy_from_slice(&hdr(1, 2));
        p[16..20].copy_from_slice(&[3; 4]);
        let it = parse_page(&HeaderPage::with_commit_size(4), &p).unwrap();
        let r: Vec<_> = it.map(|r| r.unwrap()).collect();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].ts, r[0].offset, r[0].payload),
            (52, 12, &[3u8; 4][..])
        );
    }

    #[test]
    fn malformed_pages_are_errors_with_offsets() {
        // Commit bigger than the page.
        let mut p = page(0, 0, &[]);
        p[8..16].copy_from_slice(&5000u64.to_le_bytes());
        let e = parse_page(&HeaderPage::default(), &p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "offset 8: commit 5000 larger than the page data area of 4080 bytes"
        );
        // Short page.
        let e = parse_page(&HeaderPage::default(), &[0; 10]).unwrap_err();
        assert_eq!(
            e.kind,
            PageErrorKind::ShortPage {
                len: 10,
                header: 16
            }
        );
        // Record running past commit: type_len 3 (16 bytes) in an 8-byte commit.
        let mut b = Vec::new();
        b.extend(hdr(1, 0));
        b.extend([0; 4]);
        b.extend(hdr(3, 0));
        let mut p = page(0, 0, &b);
        p[8..16].copy_from_slice(&12u64.to_le_bytes());
        let (_, recs) = collect(&p);
        assert_eq!(recs.len(), 2);
        assert_eq!(
            recs[1].as_ref().unwrap_err().to_string(),
            "offset 24: record length 16 runs past commit 12"
        );
        // Array record past commit.
        let mut b = Vec::new();
        b.extend(hdr(0, 0));
        b.extend(4000u32.to_le_bytes());
        let (_, recs) = collect(&page(0, 0, &b));
        assert_eq!(
            recs[0].as_ref().unwrap_err().to_string(),
            "offset 16: record length 4004 runs past commit 8"
        );
        // Zero-length array record.
        let (_, recs) = collect(&page(0, 0, &[0; 8]));
        assert_eq!(
            recs[0].as_ref().unwrap_err(),
            &PageError {
                offset: 16,
                kind: PageErrorKind::ZeroLengthRecord
            }
        );
        // Truncated header: 2 bytes of commit.
        let mut p = page(0, 0, &[1, 0]);
        p[8..16].copy_from_slice(&2u64.to_le_bytes());
        let (_, recs) = collect(&p);
        assert_eq!(
            recs[0].as_ref().unwrap_err().kind,
            PageErrorKind::HeaderPastCommit { commit: 2 }
        );
        // Time extend missing its array word.
        let (_, recs) = collect(&page(0, 0, &hdr(30, 0)));
        assert_eq!(
            recs[0].as_ref().unwrap_err().kind,
            PageErrorKind::HeaderPastCommit { commit: 4 }
        );
    }

    #[test]
    fn comm_is_inline_and_cut_at_nul() {
        let c = Comm::new(b"sleep\0r/0\0\0\0\0\0\0\0");
        assert_eq!(c.as_bytes(), b"sleep");
        assert_eq!(Comm::new(&[b'a'; 20]).as_bytes().len(), 16);
    }

    /// A `--dispatch` return probe as 6.18 writes its format, with its marker text: each
    /// record becomes that marker in the task that hit the probe.
    #[test]
    fn marker_events_become_markers() {
        let text = "name: dispatch_0_ret\nID: 2400\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n\n\
print fmt: \"(%lx <- %lx)\", REC->__probe_func, REC->__probe_ret_ip\n";
        let mut ev = EventFormat::parse("argus_1", text).expect("format");
        let mut set = FormatSet::default();
        set.insert(ev.clone());
        let mut p = vec![0u8; 24];
        p[0..2].copy_from_slice(&2400u16.to_le_bytes());
        p[4..8].copy_from_slice(&77i32.to_le_bytes());
        // common_flags and preempt count as 6.18 writes them for uprobes.
        p[2] = 0xff;
        p[3] = 0xff;
        let rec = RawRecord {
            ts: 5,
            offset: 16,
            payload: &p,
        };
        // Without the marker file the probe is an event Argus does not use.
        let mut conv = Converter::new(&set).expect("converter");
        assert!(conv.convert(Cpu(0), &rec).expect("ok").is_none());
        ev.marker = Some("argus:dispatch-end krate::f".into());
        set.insert(ev);
        let mut conv = Converter::new(&set).expect("converter");
        let d = conv.convert(Cpu(0), &rec).expect("ok").expect("mapped");
        let e = d.event.expect("event");
        assert_eq!(e.tid, Tid(77));
        assert_eq!(e.ctx, Context::Task);
        assert_eq!(
            e.kind,
            EventKind::Marker {
                text: "argus:dispatch-end krate::f".into()
            }
        );
    }
}
