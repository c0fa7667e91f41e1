//! The ring-buffer page parser, shared by the live collector, replay and the importers.
//! Sans-IO: the bytes of one page in, [`RawRecord`]s (absolute timestamp + payload slice) out,
//! without allocating. [`crate::convert::Converter`] turns the records into events.
//!
//! [`parse_page`] walks one `buffer_data_page` (`FORMATS.md` §3):
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
//! parser never panics on data and stops at the first error of a page. (The converter reports
//! a record it cannot read as a [`PageError`] too, at the record's offset.)

use crate::format::{FieldOutOfBounds, HeaderPage};

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

/// Writes a page as the kernel does with the default 64-bit header layout
/// ([`HeaderPage::default`]): the timestamp `ts`, the commit, and each `(time, payload)` of
/// `records` as a data record (`type_len` = payload words, so payloads are 4-byte multiples of
/// at most 112 bytes, times ascending from `ts` by less than 2^27 ns each). `missed` flags the
/// page as following that many lost events (the count stored after the data). The inverse of
/// [`parse_page`] for such pages: for tests and fuzz seeds that need real page bytes.
///
/// Returns `None` when the records do not fit in `page_size` bytes or break the rules above.
pub fn encode_page(
    page_size: usize,
    ts: u64,
    records: &[(u64, &[u8])],
    missed: Option<u64>,
) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    let mut at = ts;
    for &(t, payload) in records {
        let delta = t.checked_sub(at).filter(|d| *d < 1 << 27)? as u32;
        if payload.is_empty() || payload.len() % 4 != 0 || payload.len() > 112 {
            return None;
        }
        at = t;
        data.extend_from_slice(&((delta << 5) | (payload.len() / 4) as u32).to_le_bytes());
        data.extend_from_slice(payload);
    }
    if 16 + data.len() + if missed.is_some() { 8 } else { 0 } > page_size {
        return None;
    }
    let mut page = vec![0u8; page_size];
    let mut commit = data.len() as u64;
    if missed.is_some() {
        commit |= RB_MISSED_EVENTS | RB_MISSED_STORED;
    }
    page[..8].copy_from_slice(&ts.to_le_bytes());
    page[8..16].copy_from_slice(&commit.to_le_bytes());
    page[16..16 + data.len()].copy_from_slice(&data);
    if let Some(n) = missed {
        page[16 + data.len()..24 + data.len()].copy_from_slice(&n.to_le_bytes());
    }
    Some(page)
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

/// The time of the page's last record (`None`: no record, or a malformed page): where a
/// loss before the next page starts.
///
/// Walks the record headers only, as [`PageRecords`] does (and stops where it would fail).
pub fn last_record_ts(layout: &HeaderPage, page: &[u8]) -> Option<u64> {
    let recs = parse_page(layout, page).ok()?;
    let (data, mut at, mut ts) = (recs.data, recs.pos, recs.ts);
    let end = data.len();
    let mut last = None;
    while at + 4 <= end {
        let word = le_u32(data, at);
        let type_len = word & 0x1f;
        let delta = u64::from(word >> 5);
        let (len, record) = match type_len {
            1..=28 => (4 + 4 * type_len as usize, true),
            _ if at + 8 > end => break,
            0 => {
                let array0 = le_u32(data, at + 4) as usize;
                if array0 == 0 {
                    break;
                }
                (8 + ((array0.saturating_sub(4) + 3) & !3), true)
            }
            TYPE_PADDING if delta == 0 => break,
            TYPE_PADDING => ((4 + le_u32(data, at + 4) as usize).max(8), false),
            TYPE_TIME_EXTEND => {
                ts = ts.wrapping_add((u64::from(le_u32(data, at + 4)) << 27) + delta);
                at += 8;
                continue;
            }
            _ => {
                ts = ((u64::from(le_u32(data, at + 4)) << 27) | delta) | (ts & TS_MSB);
                at += 8;
                continue;
            }
        };
        if at + len > end {
            break;
        }
        ts = ts.wrapping_add(delta);
        at += len;
        if record {
            last = Some(ts);
        }
    }
    last
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
        // The walk to the last record agrees, on every prefix of the records (one cut
        // inside a record stops both where the iterator fails).
        for cut in 0..=b.len() {
            let p = page(100, 0, &b[..cut]);
            let want = parse_page(&HeaderPage::default(), &p)
                .unwrap()
                .map_while(Result::ok)
                .last()
                .map(|r| r.ts);
            assert_eq!(
                last_record_ts(&HeaderPage::default(), &p),
                want,
                "cut at {cut}"
            );
        }
        assert_eq!(
            last_record_ts(&HeaderPage::default(), &p),
            Some((0x1234u64 << 27) | 10)
        );
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
    fn an_encoded_page_parses_back_to_its_records() {
        let a = [1u8, 0, 0, 0, 9, 9, 9, 9];
        let b = [2u8; 36];
        let page =
            encode_page(4096, 1_000, &[(1_000, &a[..]), (1_500, &b[..])], Some(7)).expect("fits");
        let recs = parse_page(&HeaderPage::default(), &page).expect("parses");
        assert_eq!(recs.header().ts, 1_000);
        assert_eq!(recs.header().missed, Missed::Count(7));
        let got: Vec<(u64, Vec<u8>)> = recs
            .map(|r| r.map(|r| (r.ts, r.payload.to_vec())))
            .collect::<Result<_, _>>()
            .expect("records");
        assert_eq!(got, vec![(1_000, a.to_vec()), (1_500, b.to_vec())]);
        assert!(
            encode_page(4096, 10, &[(5, &a[..])], None).is_none(),
            "time goes back"
        );
        assert!(
            encode_page(4096, 0, &[(0, &a[..3])], None).is_none(),
            "not whole words"
        );
        assert!(
            encode_page(32, 0, &[(0, &b[..])], None).is_none(),
            "does not fit"
        );
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
}
