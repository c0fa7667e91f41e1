//! [`PageSpec`]: a ring-buffer page described as records, for `arbitrary` to build.
//!
//! A page of random bytes almost never has a commit count that fits and a first record
//! header that parses, so a byte-level fuzzer spends its time on the page header. A
//! `PageSpec` is a list of record *kinds* (an event of the format set with chosen field
//! bytes, a time extend, an absolute time stamp, a discarded event, the padding that ends a
//! page, a raw header word) that [`PageSpec::encode`] lays out as the kernel does
//! (`FORMATS.md` §3, `argus_ingest::page`). Left alone, an encoded page is well-formed, and
//! [`Encoded::expected`] says which records with which times and payloads
//! `argus_ingest::page::parse_page` must return; raw words and an overridden commit make
//! malformed pages on purpose (then nothing is expected but an error instead of a panic).

use crate::formats::record_size;
use arbitrary::Arbitrary;
use argus_ingest::format::{EventFormat, FieldKind};

/// Bits of a record header's `time_delta`.
const DELTA_MASK: u32 = (1 << 27) - 1;
/// `TS_MSB`: the top bits an absolute time stamp record keeps from the previous time.
const TS_MSB: u64 = 0xf8 << 56;
/// Commit flags: events missed before the page, count stored after the data.
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
/// The 64-bit page header: timestamp, 8-byte commit.
const HEADER: usize = 16;

/// One page.
#[derive(Arbitrary, Clone, Debug)]
pub struct PageSpec {
    /// The page timestamp.
    pub ts: u64,
    /// The lost-events flags of the commit word.
    pub missed: MissedSpec,
    /// The commit count: exact, or any value (malformed on purpose).
    pub commit: CommitSpec,
    /// The records, in order (those that do not fit are left out).
    pub records: Vec<RecordSpec>,
}

/// The commit word's lost-events flags.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissedSpec {
    /// No flag.
    None,
    /// `RB_MISSED_EVENTS` alone.
    Unknown,
    /// `RB_MISSED_EVENTS | RB_MISSED_STORED` with the count after the data.
    Count(u64),
}

/// The commit count.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitSpec {
    /// The bytes of records written.
    Exact,
    /// This whole commit word (flags included).
    Raw(u64),
}

/// One record.
#[derive(Arbitrary, Clone, Debug)]
pub enum RecordSpec {
    /// A record of event `event` (an index into the format list, modulo its length).
    Event(EventSpec),
    /// `RINGBUF_TYPE_TIME_EXTEND`: time += `ext << 27 + delta`.
    TimeExtend {
        /// Low 27 bits used.
        delta: u32,
        /// The array word.
        ext: u32,
    },
    /// `RINGBUF_TYPE_TIME_STAMP`: time = `abs << 27 | delta`, top 5 bits kept.
    TimeStamp {
        /// Low 27 bits used.
        delta: u32,
        /// The array word.
        abs: u32,
    },
    /// A discarded event (`RINGBUF_TYPE_PADDING` with a delta): `4 * (words + 1)` bytes.
    Discarded {
        /// Low 27 bits used; 0 is taken as 1 (0 would end the page).
        delta: u32,
        /// Words after the length word.
        words: u8,
    },
    /// `RINGBUF_TYPE_PADDING` with delta 0: the rest of the page is padding.
    End,
    /// A raw record header word (and whatever follows it is read from the next records).
    Word(u32),
}

/// An event record.
#[derive(Arbitrary, Clone, Debug)]
pub struct EventSpec {
    /// Which format (modulo the number of formats).
    pub event: u8,
    /// Low 27 bits used.
    pub delta: u32,
    /// `common_pid`.
    pub pid: i32,
    /// Bytes of the fields after the common ones, repeated to the record's size.
    pub fill: Vec<u8>,
    /// Bytes after the fixed fields that every `__data_loc`/`__rel_loc` field points to
    /// (`None`: those fields keep their `fill` bytes, usually out of bounds).
    pub tail: Option<Vec<u8>>,
    /// Bytes added to (or, negative, cut from) the payload's natural size.
    pub resize: i8,
    /// Written with the `type_len 0` length word even when short enough for `type_len`.
    pub array: bool,
}

/// An encoded page and what parsing it must give.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// The page bytes (`page_size` long).
    pub page: Vec<u8>,
    /// For a well-formed page (no raw word, exact commit), each data record's time and payload
    /// in order; `None` for a page malformed on purpose.
    pub expected: Option<Vec<(u64, Vec<u8>)>>,
    /// The lost-events state the header must report.
    pub missed: MissedSpec,
}

impl EventSpec {
    /// The payload: `common_type`, `common_pid`, then `fill`; `__data_loc` fields pointed at
    /// `tail`; resized by `resize`.
    pub fn payload(&self, formats: &[EventFormat]) -> Vec<u8> {
        if formats.is_empty() {
            return Vec::new();
        }
        let ev = &formats[self.event as usize % formats.len()];
        let natural = record_size(ev).max(8);
        let mut p = vec![0u8; natural];
        if !self.fill.is_empty() {
            for (i, b) in p.iter_mut().enumerate().skip(8) {
                *b = self.fill[i % self.fill.len()];
            }
        }
        p[..2].copy_from_slice(&ev.id.to_le_bytes());
        if let Some(f) = ev.field("common_pid") {
            if let Some(s) = p.get_mut(f.offset as usize..f.offset as usize + 4) {
                s.copy_from_slice(&self.pid.to_le_bytes());
            }
        }
        if let Some(tail) = &self.tail {
            let tail = &tail[..tail.len().min(0xffff)];
            for f in &ev.fields {
                let off = f.offset as usize;
                let data = match f.kind {
                    FieldKind::DataLoc => natural,
                    FieldKind::RelLoc => natural.saturating_sub(off + 4),
                    _ => continue,
                };
                let loc = (data as u32 & 0xffff) | (tail.len() as u32) << 16;
                if let Some(s) = p.get_mut(off..off + 4) {
                    s.copy_from_slice(&loc.to_le_bytes());
                }
            }
            p.extend_from_slice(tail);
        }
        let len = (p.len() as isize + self.resize as isize).max(0) as usize;
        p.resize(len, 0);
        p
    }
}

impl PageSpec {
    /// Lays the page out in `page_size` bytes with the 64-bit header (8-byte commit), records
    /// of `formats`.
    pub fn encode(&self, formats: &[EventFormat], page_size: usize) -> Encoded {
        let page_size = page_size.max(HEADER);
        let room = page_size
            - HEADER
            - if self.missed == MissedSpec::None {
                0
            } else {
                8
            };
        let mut data: Vec<u8> = Vec::new();
        let mut well_formed = self.commit == CommitSpec::Exact;
        let mut expected = Vec::new();
        let mut ts = self.ts;
        let mut ended = false;
        for rec in &self.records {
            let mut bytes = Vec::new();
            let word = |type_len: u32, delta: u32| type_len | (delta & DELTA_MASK) << 5;
            let mut next_ts = ts;
            let mut record = None;
            match rec {
                RecordSpec::Event(e) => {
                    let payload = e.payload(formats);
                    let delta = e.delta & DELTA_MASK;
                    if !e.array
                        && !payload.is_empty()
                        && payload.len() <= 112
                        && payload.len() % 4 == 0
                    {
                        bytes.extend_from_slice(
                            &word(payload.len() as u32 / 4, delta).to_le_bytes(),
                        );
                    } else {
                        bytes.extend_from_slice(&word(0, delta).to_le_bytes());
                        bytes.extend_from_slice(&(payload.len() as u32 + 4).to_le_bytes());
                    }
                    bytes.extend_from_slice(&payload);
                    bytes.resize(bytes.len().next_multiple_of(4), 0);
                    next_ts = ts.wrapping_add(delta as u64);
                    record = Some((next_ts, payload));
                }
                RecordSpec::TimeExtend { delta, ext } => {
                    bytes.extend_from_slice(&word(30, *delta).to_le_bytes());
                    bytes.extend_from_slice(&ext.to_le_bytes());
                    next_ts = ts.wrapping_add(((*ext as u64) << 27) + (delta & DELTA_MASK) as u64);
                }
                RecordSpec::TimeStamp { delta, abs } => {
                    bytes.extend_from_slice(&word(31, *delta).to_le_bytes());
                    bytes.extend_from_slice(&abs.to_le_bytes());
                    next_ts = ((*abs as u64) << 27) | (delta & DELTA_MASK) as u64 | (ts & TS_MSB);
                }
                RecordSpec::Discarded { delta, words } => {
                    let delta = (delta & DELTA_MASK).max(1);
                    let len = 4 * (*words as u32 + 1);
                    bytes.extend_from_slice(&word(29, delta).to_le_bytes());
                    bytes.extend_from_slice(&len.to_le_bytes());
                    bytes.resize(4 + len as usize, 0);
                    next_ts = ts.wrapping_add(delta as u64);
                }
                RecordSpec::End => {
                    bytes.extend_from_slice(&word(29, 0).to_le_bytes());
                }
                RecordSpec::Word(w) => {
                    bytes.extend_from_slice(&w.to_le_bytes());
                    well_formed = false;
                }
            }
            if data.len() + bytes.len() > room {
                break;
            }
            data.extend_from_slice(&bytes);
            if !ended {
                ts = next_ts;
                expected.extend(record);
                ended = matches!(rec, RecordSpec::End);
            }
        }
        let mut page = vec![0u8; page_size];
        let commit = match (self.commit, self.missed) {
            (CommitSpec::Raw(c), _) => c,
            (CommitSpec::Exact, MissedSpec::None) => data.len() as u64,
            (CommitSpec::Exact, MissedSpec::Unknown) => data.len() as u64 | MISSED_EVENTS,
            (CommitSpec::Exact, MissedSpec::Count(_)) => {
                data.len() as u64 | MISSED_EVENTS | MISSED_STORED
            }
        };
        page[..8].copy_from_slice(&self.ts.to_le_bytes());
        page[8..16].copy_from_slice(&commit.to_le_bytes());
        page[HEADER..HEADER + data.len()].copy_from_slice(&data);
        if let (CommitSpec::Exact, MissedSpec::Count(n)) = (self.commit, self.missed) {
            let at = HEADER + data.len();
            page[at..at + 8].copy_from_slice(&n.to_le_bytes());
        }
        Encoded {
            page,
            expected: well_formed.then_some(expected),
            missed: self.missed,
        }
    }
}
