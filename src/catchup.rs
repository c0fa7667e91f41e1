//! Catching `argus start`'s live graph up from the ring on disk: pages the tap dropped (the
//! job decoded slower than the kernel wrote, as on a machine whose CPUs a load saturates) are
//! read back from the chunk files, in order, before the pages tapped after them. The live
//! graph lags instead of skipping; only pages the ring no longer holds become gaps.
//!
//! ```text
//!  tap ──(cpu, seq, page)──► CatchUp ── seq == expected ───────────────► merge.push_page
//!                               │  seq > expected: pending (≤ MAX_PENDING; beyond, dropped:
//!                               │                   the disk has it too)
//!                               └─ fill: pending[expected] or the chunk files ─┘
//!                                        cpuN/NNNNNN.chunk.zst: chunk c holds pages
//!                                        [c·chunk_pages, (c+1)·chunk_pages), zstd frames of
//!                                        whole pages appended by the recorder's writer
//! ```
//!
//! A page the writer has not written yet (still in the recorder's spool or its frame) is
//! "not yet": the CPU waits and [`CatchUp::poll`] retries on the next tick. A chunk the ring
//! deleted, or one that cannot be read, makes its pages unrecoverable: counted, handed to the
//! merge as dropped (it marks the gap), and the CPU resumes at the next page it has.

use argus_ingest::linux::TappedPage;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Tapped pages held per CPU while it catches up (4 KiB each: 64 MiB); later ones are read
/// from disk when their turn comes.
const MAX_PENDING: usize = 16_384;
/// Pages read from disk per CPU per call, so the job's loop stays responsive.
const DISK_BATCH: usize = 4096;
/// How far a CPU may fall behind the tap, in pages (256 MiB of raw pages, ~10 s of the
/// saturating load on one CPU). The job's memory grows with its lag (records waiting for the
/// watermark, the snapshot's events): 60 s of that load unbounded took 24 GiB. Beyond it the
/// CPU skips ahead to the pages the tap still holds, and the skipped ones become a gap.
const MAX_BEHIND: u64 = 65_536;

/// What the catch-up hands on: `(cpu, page, pages of this CPU lost for good so far)`.
pub type Sink<'a> = dyn FnMut(u32, &[u8], u64) + 'a;

/// Per-CPU ordering of tapped pages, with the chunk files behind it.
pub struct CatchUp {
    dir: PathBuf,
    page_size: usize,
    chunk_pages: u64,
    cpus: BTreeMap<u32, CpuState>,
    /// Pages read back from disk, all CPUs.
    pub recovered: u64,
    /// Pages neither tapped nor on disk any more, all CPUs (the skipped ones included).
    pub unrecoverable: u64,
    /// Pages skipped because their CPU fell more than [`MAX_BEHIND`] behind.
    pub skipped: u64,
}

#[derive(Default)]
struct CpuState {
    /// The sequence number of the next page to hand on.
    expected: u64,
    /// The highest sequence number tapped so far (+1): pages below it exist.
    seen: u64,
    pending: BTreeMap<u64, Vec<u8>>,
    /// Pages lost for good on this CPU.
    lost: u64,
    /// Decoded pages of the frame read last: (sequence number of the first, pages).
    frame: Option<(u64, Vec<u8>)>,
    /// Where the next frame of the current chunk starts: (chunk, byte offset, first page).
    at: Option<(u32, u64, u64)>,
}

/// The outcome of reading one page from disk.
enum Disk {
    Page(Vec<u8>),
    NotYet,
    Gone,
}

impl CatchUp {
    /// For the trace directory `dir` being recorded with `page_size` pages and
    /// `chunk_pages` pages per chunk.
    pub fn new(dir: &Path, page_size: usize, chunk_pages: u64) -> CatchUp {
        CatchUp {
            dir: dir.to_path_buf(),
            page_size,
            chunk_pages: chunk_pages.max(1),
            cpus: BTreeMap::new(),
            recovered: 0,
            unrecoverable: 0,
            skipped: 0,
        }
    }

    /// Takes a tapped page; hands on every page now in order.
    pub fn push(&mut self, p: TappedPage, out: &mut Sink<'_>) {
        let st = self.cpus.entry(p.cpu).or_default();
        st.seen = st.seen.max(p.seq + 1);
        if p.seq < st.expected {
            return; // already read from disk
        }
        if p.seq == st.expected && st.pending.is_empty() && st.seen == p.seq + 1 {
            st.expected += 1;
            out(p.cpu, &p.data, st.lost);
            return;
        }
        if st.pending.len() < MAX_PENDING {
            st.pending.insert(p.seq, p.data);
        }
        self.fill(p.cpu, out);
    }

    /// Retries every CPU that is behind (on the job's tick).
    pub fn poll(&mut self, out: &mut Sink<'_>) {
        let behind: Vec<u32> = self
            .cpus
            .iter()
            .filter(|(_, s)| s.expected < s.seen)
            .map(|(&c, _)| c)
            .collect();
        for cpu in behind {
            self.fill(cpu, out);
        }
    }

    /// The recording has ended and its chunks are written: hands on everything still
    /// behind, reading the disk until each CPU has caught up; a page still missing is lost.
    pub fn finish(&mut self, out: &mut Sink<'_>) {
        let cpus: Vec<u32> = self.cpus.keys().copied().collect();
        for cpu in cpus {
            loop {
                self.fill(cpu, out);
                let Some(st) = self.cpus.get_mut(&cpu) else {
                    break;
                };
                if st.expected >= st.seen {
                    break;
                }
                let before = st.expected;
                self.fill(cpu, out);
                let st = self.cpus.get_mut(&cpu).expect("present");
                if st.expected == before {
                    // Not on disk at the end: skip to the next page held, if any.
                    let resume = st.pending.keys().next().copied().unwrap_or(st.seen);
                    let n = resume.saturating_sub(st.expected).max(1);
                    st.lost += n;
                    st.expected += n;
                    st.frame = None;
                    st.at = None;
                    self.unrecoverable += n;
                }
            }
        }
    }

    /// Whether any CPU is behind the tap.
    #[cfg(test)]
    pub fn behind(&self) -> bool {
        self.cpus.values().any(|s| s.expected < s.seen)
    }

    /// Hands on pages of `cpu` in order from the pending ones and the disk, until one is not
    /// on disk yet or the CPU has caught up.
    fn fill(&mut self, cpu: u32, out: &mut Sink<'_>) {
        let mut from_disk = 0usize;
        loop {
            let Some(st) = self.cpus.get_mut(&cpu) else {
                return;
            };
            if st.expected >= st.seen {
                st.pending.clear();
                st.frame = None;
                return;
            }
            if st.seen - st.expected > MAX_BEHIND {
                let resume = st
                    .pending
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or(st.seen)
                    .max(st.seen - MAX_BEHIND / 2);
                let n = resume - st.expected;
                st.pending.retain(|&k, _| k >= resume);
                st.lost += n;
                st.expected = resume;
                st.frame = None;
                st.at = None;
                self.unrecoverable += n;
                self.skipped += n;
                continue;
            }
            let seq = st.expected;
            if let Some(page) = st.pending.remove(&seq) {
                st.expected += 1;
                out(cpu, &page, st.lost);
                continue;
            }
            if from_disk >= DISK_BATCH {
                return;
            }
            match self.read_page(cpu, seq) {
                Disk::Page(page) => {
                    from_disk += 1;
                    self.recovered += 1;
                    let st = self.cpus.get_mut(&cpu).expect("present");
                    st.expected += 1;
                    out(cpu, &page, st.lost);
                }
                Disk::NotYet => return,
                Disk::Gone => {
                    // Resume at the next page still held: pending, or the next chunk.
                    let chunk_pages = self.chunk_pages;
                    let st = self.cpus.get_mut(&cpu).expect("present");
                    let next_chunk = (seq / chunk_pages + 1) * chunk_pages;
                    let resume = st
                        .pending
                        .keys()
                        .next()
                        .copied()
                        .map_or(next_chunk, |p| p.min(next_chunk))
                        .min(st.seen)
                        .max(seq + 1);
                    let n = resume - seq;
                    st.lost += n;
                    st.expected = resume;
                    st.frame = None;
                    st.at = None;
                    self.unrecoverable += n;
                }
            }
        }
    }

    /// Page `seq` of `cpu` from its chunk files.
    fn read_page(&mut self, cpu: u32, seq: u64) -> Disk {
        let page_size = self.page_size;
        let chunk_pages = self.chunk_pages;
        let dir = self.dir.clone();
        let st = self.cpus.get_mut(&cpu).expect("present");
        loop {
            if let Some((first, pages)) = &st.frame {
                let n = (pages.len() / page_size) as u64;
                if seq >= *first && seq < first + n {
                    let i = (seq - first) as usize * page_size;
                    return Disk::Page(pages[i..i + page_size].to_vec());
                }
            }
            let chunk = (seq / chunk_pages) as u32;
            let (c, offset, first) = match st.at {
                Some((c, off, first)) if c == chunk && first <= seq => (c, off, first),
                _ => (chunk, 0, u64::from(chunk) * chunk_pages),
            };
            let path = argus_ingest::tracedir::chunk_path(&dir, cpu, c);
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Not written yet, or deleted by the ring: a later chunk tells which.
                    let later = argus_ingest::tracedir::chunk_path(&dir, cpu, c + 1);
                    return if later.exists() || c < self::oldest_missing_hint(&dir, cpu, c) {
                        Disk::Gone
                    } else {
                        Disk::NotYet
                    };
                }
                Err(_) => return Disk::Gone,
            };
            let Some(rest) = bytes.get(offset as usize..) else {
                return Disk::Gone;
            };
            if rest.is_empty() {
                return Disk::NotYet;
            }
            let size = match zstd::zstd_safe::find_frame_compressed_size(rest) {
                Ok(n) if n <= rest.len() => n,
                // A frame still being appended.
                _ => return Disk::NotYet,
            };
            let frame = &rest[..size];
            let pages = match zstd::stream::decode_all(frame) {
                Ok(p) => p,
                Err(_) => return Disk::Gone,
            };
            let n = (pages.len() / page_size) as u64;
            st.at = Some((c, offset + size as u64, first + n));
            st.frame = Some((first, pages));
            if n == 0 {
                return Disk::Gone;
            }
        }
    }
}

/// The first chunk of `cpu` still on disk when chunks before `c` are missing (the ring
/// deleted them), else 0.
fn oldest_missing_hint(dir: &Path, cpu: u32, c: u32) -> u32 {
    let Ok(rd) = std::fs::read_dir(argus_ingest::tracedir::cpu_dir(dir, cpu)) else {
        return 0;
    };
    rd.flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".chunk.zst")?
                .parse::<u32>()
                .ok()
        })
        .filter(|&s| s > c)
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;

    const PS: usize = 64;

    fn page(cpu: u32, seq: u64) -> Vec<u8> {
        let mut p = vec![0u8; PS];
        p[..4].copy_from_slice(&cpu.to_le_bytes());
        p[4..12].copy_from_slice(&seq.to_le_bytes());
        p
    }

    fn seq_of(p: &[u8]) -> u64 {
        u64::from_le_bytes(p[4..12].try_into().unwrap())
    }

    /// Appends pages `range` of cpu 0 as one zstd frame to chunk `c`.
    fn append(dir: &Path, c: u32, range: std::ops::Range<u64>) {
        std::fs::create_dir_all(argus_ingest::tracedir::cpu_dir(dir, 0)).unwrap();
        let raw: Vec<u8> = range.flat_map(|s| page(0, s)).collect();
        let frame = zstd::bulk::compress(&raw, 1).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(argus_ingest::tracedir::chunk_path(dir, 0, c))
            .unwrap();
        f.write_all(&frame).unwrap();
    }

    fn tapped(seq: u64) -> TappedPage {
        TappedPage {
            cpu: 0,
            data: page(0, seq),
            dropped_before: 0,
            seq,
        }
    }

    #[test]
    fn pages_the_tap_dropped_are_read_back_in_order_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 8);
        let mut got: Vec<(u64, u64)> = Vec::new();
        let mut out = |_: u32, p: &[u8], lost: u64| got.push((seq_of(p), lost));
        c.push(tapped(0), &mut out);
        c.push(tapped(1), &mut out);
        // 2..=9 dropped by the tap; 10 arrives before the writer wrote 2..
        c.push(tapped(10), &mut out);
        assert!(c.behind());
        append(dir.path(), 0, 0..5);
        c.poll(&mut out);
        append(dir.path(), 0, 5..8);
        append(dir.path(), 1, 8..9);
        c.poll(&mut out);
        assert!(c.behind(), "page 9 is not written yet");
        append(dir.path(), 1, 9..11);
        c.poll(&mut out);
        c.push(tapped(11), &mut out);
        assert!(!c.behind());
        let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(seqs, (0..=11).collect::<Vec<u64>>());
        assert!(got.iter().all(|g| g.1 == 0), "nothing lost");
        assert_eq!((c.recovered, c.unrecoverable), (8, 0));
    }

    #[test]
    fn a_cpu_too_far_behind_skips_ahead_and_counts_the_gap() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 1 << 20);
        let mut got: Vec<(u64, u64)> = Vec::new();
        let mut out = |_: u32, p: &[u8], lost: u64| got.push((seq_of(p), lost));
        c.push(tapped(0), &mut out);
        // Nothing on disk; the tap goes far ahead.
        let far = MAX_BEHIND + 10;
        c.push(tapped(far), &mut out);
        assert_eq!(
            got.last().unwrap().0,
            far,
            "resumed at the page the tap holds"
        );
        assert_eq!(c.skipped, far - 1);
        assert_eq!(got.last().unwrap().1, far - 1);
    }

    #[test]
    fn a_chunk_the_ring_deleted_is_counted_lost_and_the_cpu_resumes_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 4);
        let mut got: Vec<(u64, u64)> = Vec::new();
        let mut out = |_: u32, p: &[u8], lost: u64| got.push((seq_of(p), lost));
        c.push(tapped(0), &mut out);
        // Chunk 0 (pages 0..4) deleted by the ring; chunk 1 holds 4..8.
        append(dir.path(), 1, 4..8);
        c.push(tapped(6), &mut out);
        let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(seqs, vec![0, 4, 5, 6]);
        assert_eq!(got.last().unwrap().1, 3, "pages 1..4 lost for good");
        assert_eq!(c.unrecoverable, 3);
    }
}
