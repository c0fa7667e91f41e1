//! Catching `argus start`'s live graph up from the ring on disk: pages the tap dropped (the
//! job decoded slower than the kernel wrote, as on a machine whose CPUs a load saturates) are
//! read back from the chunk files, in order, before the pages tapped after them. The live
//! graph lags instead of skipping; only pages the ring no longer holds become gaps.
//!
//! ```text
//!  tap ──(cpu, seq, page)──► CatchUp ── next of its CPU, no CPU behind it in time ──► merge
//!                               │  otherwise: pending (≤ MAX_PENDING; beyond, dropped:
//!                               │             the disk has it too)
//!                               └─ poll (each tick): k-way merge by page time of the CPUs
//!                                  that are behind, their next pages from pending or the
//!                                  chunk files ─► merge
//!                                        cpuN/NNNNNN.chunk.zst: chunk c holds pages
//!                                        [c·chunk_pages, (c+1)·chunk_pages), zstd frames of
//!                                        whole pages appended by the recorder's writer
//! ```
//!
//! **Time order across CPUs.** The merge downstream releases a record only once every CPU
//! has passed its time, so a CPU read live while another is read back from disk would queue
//! everything it decodes until the slow one catches up (5 GB after 15 s of the saturating
//! load). Pages are therefore handed on oldest first (by the page header's time), with at
//! most [`SKEW_NS`] between CPUs, and [`CatchUp::frontier`] tells the merge's watermark
//! where the CPUs still behind stand so it never passes them.
//!
//! A page the writer has not written yet (still in the recorder's spool or its frame) is
//! "not yet": that CPU waits, the others stop within [`SKEW_NS`] of it, and
//! [`CatchUp::poll`] retries on the next tick. A chunk the ring deleted, or one that cannot
//! be read, makes its pages unrecoverable: counted, handed to the merge as dropped (it marks
//! the gap), and the CPU resumes at the next page it has.

use argus_ingest::linux::TappedPage;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Tapped pages held per CPU while it catches up (4 KiB each: 64 MiB); later ones are read
/// from disk when their turn comes.
const MAX_PENDING: usize = 16_384;
/// Pages read from disk per [`CatchUp::poll`], all CPUs together: the job releases what
/// they hold at each tick, so this bounds the records waiting in its merge (~4096 × 150).
const DISK_BATCH: usize = 4096;
/// How far a CPU may fall behind the tap, in pages (256 MiB of raw pages, ~10 s of the
/// saturating load on one CPU), before it may skip ahead, and only while the job is over its
/// memory budget ([`CatchUp::set_memory_pressure`]): the job's memory grows with what it
/// holds (records waiting for the watermark, the retained window's events), and 60 s of that
/// load read back in full took 24 GiB. Within the budget a CPU reads everything back however
/// far behind it is (a job starved for seconds by a burst catches up after it, and a hang in
/// the burst is still found); beyond it, it skips ahead to the pages the tap still holds and
/// the skipped ones become a gap. Only pages the ring has deleted are lost otherwise.
const MAX_BEHIND: u64 = 65_536;
/// How far (by its header's time) a page may run ahead of the last page handed on of a CPU
/// that is behind. The merge holds every record after the slowest CPU's last one until that
/// CPU moves on, so without this bound a CPU read live while another was read back from
/// disk queued seconds of decoded records (5 GB of `argus start`'s memory, and most of its
/// CPU spent faulting that memory in, after 15 s of the saturating load).
const SKEW_NS: u64 = 100_000_000;

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
    /// Pages skipped because their CPU fell more than [`MAX_BEHIND`] behind while the job
    /// was over its memory budget.
    pub skipped: u64,
    /// Pages still behind when the job stopped reading back at its stop ([`CatchUp::abandon`]).
    pub left: u64,
    /// The job is over its memory budget: a CPU more than [`MAX_BEHIND`] behind skips ahead.
    pressure: bool,
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
    /// Header time of the last page handed on (0 before the first).
    last_ts: u64,
    /// Decoded pages of the frame read last: (sequence number of the first, pages).
    frame: Option<(u64, Vec<u8>)>,
    /// Where the next frame of the current chunk starts: (chunk, byte offset, first page).
    at: Option<(u32, u64, u64)>,
}

impl CpuState {
    fn behind(&self) -> bool {
        self.expected < self.seen
    }

    /// Marks `n` pages from `expected` lost for good and resumes after them.
    fn lose(&mut self, n: u64) {
        self.lost += n;
        self.expected += n;
        self.pending.retain(|&k, _| k >= self.expected);
        self.frame = None;
        self.at = None;
    }
}

/// Where the next page of a CPU that is behind stands.
enum Head {
    /// Available (pending, or in the frame read from disk), with its header time.
    Ready(u64),
    /// Not on disk yet (still in the recorder's spool or frame), or this call's disk budget
    /// is spent.
    NotYet,
    /// Lost for good: `expected` was moved past it.
    Lost,
}

/// The outcome of looking for a page on disk.
enum Disk {
    InFrame,
    NotYet,
    Gone,
}

/// The time in a page's header (`timestamp`, offset 0, 8 bytes, in every ring-buffer page
/// header the kernel has shipped).
fn page_ts(page: &[u8]) -> u64 {
    page.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
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
            left: 0,
            pressure: false,
        }
    }

    /// Whether the job is over its memory budget ([`MemoryBudget`](super::budget::MemoryBudget)), set on every tick: only
    /// then does a CPU more than [`MAX_BEHIND`] pages behind skip ahead.
    pub fn set_memory_pressure(&mut self, over: bool) {
        self.pressure = over;
    }

    /// Takes a tapped page: hands it on at once when it is its CPU's next one and no CPU
    /// that is behind needs to move first ([`SKEW_NS`]); otherwise holds it (up to
    /// [`MAX_PENDING`]; beyond, the disk has it) for [`CatchUp::poll`].
    pub fn push(&mut self, p: TappedPage, out: &mut Sink<'_>) {
        let bound = self.bound(p.cpu);
        let st = self.cpus.entry(p.cpu).or_default();
        st.seen = st.seen.max(p.seq + 1);
        if p.seq < st.expected {
            return; // already read from disk
        }
        let ts = page_ts(&p.data);
        if p.seq == st.expected && st.pending.is_empty() && st.seen == p.seq + 1 && ts <= bound {
            st.expected += 1;
            st.last_ts = ts;
            out(p.cpu, &p.data, st.lost);
            return;
        }
        if st.pending.len() < MAX_PENDING {
            st.pending.insert(p.seq, p.data);
        }
    }

    /// Hands on the pages of the CPUs that are behind, oldest first (on the job's tick),
    /// reading at most [`DISK_BATCH`] of them from disk.
    pub fn poll(&mut self, out: &mut Sink<'_>) {
        self.merge(out, false);
    }

    /// The recording has ended and its chunks are written: hands on the pages still behind,
    /// at most [`DISK_BATCH`] of them from disk per call, as [`CatchUp::poll`] does; a page
    /// not on disk now never will be (lost). Called every tick until nothing is
    /// [`behind`](CatchUp::behind): decoding the whole backlog at once held all of it in
    /// the merge (16 GiB after a minute of the saturating load).
    pub fn poll_at_end(&mut self, out: &mut Sink<'_>) {
        self.merge(out, true);
    }

    /// The job was asked to stop and has read back what it could: the pages still behind
    /// are left to the ring (counted in `left`, and lost to the live graph).
    pub fn abandon(&mut self) {
        for st in self.cpus.values_mut().filter(|s| s.behind()) {
            let n = st.seen - st.expected;
            st.lose(n);
            self.left += n;
        }
    }

    /// The oldest time a record not handed on yet may have: the header time of the last
    /// page handed on of each CPU that is behind (its next page starts no earlier). The
    /// merge's watermark must not pass it, or that CPU's records would arrive late.
    pub fn frontier(&self) -> Option<u64> {
        self.cpus
            .values()
            .filter(|s| s.behind())
            .map(|s| s.last_ts)
            .min()
    }

    /// Whether any CPU is behind the tap.
    pub fn behind(&self) -> bool {
        self.cpus.values().any(CpuState::behind)
    }

    /// The latest header time a page of `cpu` may have to be handed on now: [`SKEW_NS`]
    /// past the last page handed on of every other CPU that is behind.
    fn bound(&self, cpu: u32) -> u64 {
        self.cpus
            .iter()
            .filter(|&(&c, s)| c != cpu && s.behind())
            .map(|(_, s)| s.last_ts.saturating_add(SKEW_NS))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// A k-way merge by page time of the CPUs that are behind: hands on the oldest next
    /// page, as long as no CPU whose next page is not on disk yet may hold an older one.
    /// `at_end`: the recording has ended, so a page not on disk never will be (lost).
    fn merge(&mut self, out: &mut Sink<'_>, at_end: bool) {
        let mut budget = DISK_BATCH;
        // No CPU appears during a merge: list them once, not for every page handed on.
        let cpus: Vec<u32> = self.cpus.keys().copied().collect();
        loop {
            if !self.cpus.values().any(CpuState::behind) {
                return;
            }
            let mut best: Option<(u64, u32)> = None;
            // The oldest a page of a CPU that must wait could be.
            let mut waiting: Option<u64> = None;
            let mut progressed = false;
            for &cpu in &cpus {
                if !self.cpus[&cpu].behind() {
                    continue;
                }
                match self.head(cpu, &mut budget) {
                    Head::Ready(ts) => {
                        if best.is_none_or(|(b, _)| ts < b) {
                            best = Some((ts, cpu));
                        }
                    }
                    Head::Lost => progressed = true,
                    Head::NotYet if at_end && budget > 0 => {
                        // Not on disk at the end: skip to the next page held, if any.
                        let st = self.cpus.get_mut(&cpu).expect("behind");
                        let resume = st.pending.keys().next().copied().unwrap_or(st.seen);
                        let n = resume.saturating_sub(st.expected).max(1);
                        st.lose(n);
                        self.unrecoverable += n;
                        progressed = true;
                    }
                    Head::NotYet => {
                        let last = self.cpus[&cpu].last_ts;
                        waiting = Some(waiting.map_or(last, |w: u64| w.min(last)));
                    }
                }
            }
            match best {
                Some((ts, cpu)) if waiting.is_none_or(|w| ts <= w.saturating_add(SKEW_NS)) => {
                    self.hand_on(cpu, ts, &mut budget, out);
                }
                _ if progressed => {}
                _ => return,
            }
        }
    }

    /// Makes the next page of `cpu` (which is behind) available, from the pending pages or
    /// the disk, skipping what is lost for good.
    fn head(&mut self, cpu: u32, budget: &mut usize) -> Head {
        let chunk_pages = self.chunk_pages;
        let page_size = self.page_size;
        let st = self.cpus.get_mut(&cpu).expect("present");
        if self.pressure && st.seen - st.expected > MAX_BEHIND {
            let resume = st
                .pending
                .keys()
                .next()
                .copied()
                .unwrap_or(st.seen)
                .max(st.seen - MAX_BEHIND / 2);
            let n = resume - st.expected;
            st.lose(n);
            self.unrecoverable += n;
            self.skipped += n;
            return Head::Lost;
        }
        let seq = st.expected;
        if let Some(p) = st.pending.get(&seq) {
            return Head::Ready(page_ts(p));
        }
        if let Some((first, pages)) = &st.frame {
            let n = (pages.len() / page_size) as u64;
            if seq >= *first && seq < first + n {
                let i = (seq - first) as usize * page_size;
                return Head::Ready(page_ts(&pages[i..]));
            }
        }
        if *budget == 0 {
            return Head::NotYet;
        }
        match self.read_frame(cpu, seq) {
            Disk::InFrame => self.head(cpu, budget),
            Disk::NotYet => Head::NotYet,
            Disk::Gone => {
                // Resume at the next page still held: pending, or the next chunk.
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
                st.lose(n);
                self.unrecoverable += n;
                Head::Lost
            }
        }
    }

    /// Hands on the next page of `cpu`, made available by [`CatchUp::head`].
    /// A page from disk counts against `budget`.
    fn hand_on(&mut self, cpu: u32, ts: u64, budget: &mut usize, out: &mut Sink<'_>) {
        let page_size = self.page_size;
        let st = self.cpus.get_mut(&cpu).expect("present");
        let seq = st.expected;
        st.expected += 1;
        st.last_ts = ts;
        if let Some(p) = st.pending.remove(&seq) {
            out(cpu, &p, st.lost);
        } else if let Some((first, pages)) = &st.frame {
            let i = (seq - first) as usize * page_size;
            self.recovered += 1;
            *budget = budget.saturating_sub(1);
            out(cpu, &pages[i..i + page_size], st.lost);
        }
        if !st.behind() {
            st.pending.clear();
            st.frame = None;
        }
    }

    /// Reads the frame of `cpu`'s chunk files that holds page `seq` into its state.
    fn read_frame(&mut self, cpu: u32, seq: u64) -> Disk {
        let page_size = self.page_size;
        let chunk_pages = self.chunk_pages;
        let dir = self.dir.clone();
        let st = self.cpus.get_mut(&cpu).expect("present");
        loop {
            if let Some((first, pages)) = &st.frame {
                let n = (pages.len() / page_size) as u64;
                if seq >= *first && seq < first + n {
                    return Disk::InFrame;
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
    /// Page `seq` of every CPU starts at this time × seq (ns).
    const STEP: u64 = 10_000_000;

    /// A page: header time, then its CPU and sequence number.
    fn page(cpu: u32, seq: u64) -> Vec<u8> {
        let mut p = vec![0u8; PS];
        p[..8].copy_from_slice(&(seq * STEP).to_le_bytes());
        p[8..12].copy_from_slice(&cpu.to_le_bytes());
        p[12..20].copy_from_slice(&seq.to_le_bytes());
        p
    }

    fn cpu_seq(p: &[u8]) -> (u32, u64) {
        (
            u32::from_le_bytes(p[8..12].try_into().unwrap()),
            u64::from_le_bytes(p[12..20].try_into().unwrap()),
        )
    }

    /// Appends pages `range` of `cpu` as one zstd frame to its chunk `c`.
    fn append(dir: &Path, cpu: u32, c: u32, range: std::ops::Range<u64>) {
        std::fs::create_dir_all(argus_ingest::tracedir::cpu_dir(dir, cpu)).unwrap();
        let raw: Vec<u8> = range.flat_map(|s| page(cpu, s)).collect();
        let frame = zstd::bulk::compress(&raw, 1).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(argus_ingest::tracedir::chunk_path(dir, cpu, c))
            .unwrap();
        f.write_all(&frame).unwrap();
    }

    fn tapped(cpu: u32, seq: u64) -> TappedPage {
        TappedPage {
            cpu,
            data: page(cpu, seq),
            dropped_before: 0,
            seq,
        }
    }

    #[test]
    fn pages_the_tap_dropped_are_read_back_in_order_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 8);
        let mut got: Vec<(u64, u64)> = Vec::new();
        let mut out = |_: u32, p: &[u8], lost: u64| got.push((cpu_seq(p).1, lost));
        c.push(tapped(0, 0), &mut out);
        c.push(tapped(0, 1), &mut out);
        // 2..=9 dropped by the tap; 10 arrives before the writer wrote 2..
        c.push(tapped(0, 10), &mut out);
        assert!(c.behind());
        append(dir.path(), 0, 0, 0..5);
        c.poll(&mut out);
        append(dir.path(), 0, 0, 5..8);
        append(dir.path(), 0, 1, 8..9);
        c.poll(&mut out);
        assert!(c.behind(), "page 9 is not written yet");
        append(dir.path(), 0, 1, 9..11);
        c.poll(&mut out);
        c.push(tapped(0, 11), &mut out);
        assert!(!c.behind());
        let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(seqs, (0..=11).collect::<Vec<u64>>());
        assert!(got.iter().all(|g| g.1 == 0), "nothing lost");
        assert_eq!((c.recovered, c.unrecoverable), (8, 0));
    }

    #[test]
    fn a_cpu_far_behind_reads_everything_back_within_the_memory_budget() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 1 << 20);
        let mut got: Vec<u64> = Vec::new();
        let mut out = |_: u32, p: &[u8], _: u64| got.push(cpu_seq(p).1);
        c.push(tapped(0, 0), &mut out);
        let far = MAX_BEHIND + 10;
        c.push(tapped(0, far), &mut out);
        append(dir.path(), 0, 0, 0..far);
        c.set_memory_pressure(false);
        // DISK_BATCH pages per poll: well within 100 polls.
        for _ in 0..100 {
            if !c.behind() {
                break;
            }
            c.poll(&mut out);
        }
        assert_eq!(got, (0..=far).collect::<Vec<u64>>());
        assert_eq!((c.skipped, c.unrecoverable, c.recovered), (0, 0, far - 1));
    }

    #[test]
    fn a_cpu_too_far_behind_skips_ahead_over_the_memory_budget_and_counts_the_gap() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 1 << 20);
        let got: std::cell::RefCell<Vec<(u64, u64)>> = Default::default();
        let mut out = |_: u32, p: &[u8], lost: u64| got.borrow_mut().push((cpu_seq(p).1, lost));
        c.push(tapped(0, 0), &mut out);
        // Nothing on disk; the tap goes far ahead.
        let far = MAX_BEHIND + 10;
        c.push(tapped(0, far), &mut out);
        c.poll(&mut out);
        assert_eq!(
            got.borrow().len(),
            1,
            "within the budget it waits for the disk"
        );
        c.set_memory_pressure(true);
        c.poll(&mut out);
        let last = *got.borrow().last().unwrap();
        assert_eq!(last.0, far, "resumed at the page the tap holds");
        assert_eq!(c.skipped, far - 1);
        assert_eq!(last.1, far - 1);
    }

    #[test]
    fn a_chunk_the_ring_deleted_is_counted_lost_and_the_cpu_resumes_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 4);
        let mut got: Vec<(u64, u64)> = Vec::new();
        let mut out = |_: u32, p: &[u8], lost: u64| got.push((cpu_seq(p).1, lost));
        c.push(tapped(0, 0), &mut out);
        // Chunk 0 (pages 0..4) deleted by the ring; chunk 1 holds 4..8.
        append(dir.path(), 0, 1, 4..8);
        c.push(tapped(0, 6), &mut out);
        c.poll(&mut out);
        let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(seqs, vec![0, 4, 5, 6]);
        assert_eq!(got.last().unwrap().1, 3, "pages 1..4 lost for good");
        assert_eq!(c.unrecoverable, 3);
    }

    /// CPU 1 is read back from disk while CPU 0 is tapped live: CPU 0 is held until CPU 1
    /// reaches its time, so what the merge holds spans at most [`SKEW_NS`] plus a page.
    #[test]
    fn a_cpu_read_live_waits_for_one_read_back_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 64);
        let got: std::cell::RefCell<Vec<(u32, u64)>> = Default::default();
        let mut out = |_: u32, p: &[u8], _: u64| got.borrow_mut().push(cpu_seq(p));
        c.push(tapped(1, 0), &mut out);
        // CPU 1's pages 1..=39 were dropped by the tap; page 40 arrived.
        c.push(tapped(1, 40), &mut out);
        // CPU 0 keeps arriving live: only what is within the skew of CPU 1 goes on.
        for s in 0..41 {
            c.push(tapped(0, s), &mut out);
        }
        let skew_pages = SKEW_NS / STEP;
        assert!(
            got.borrow()
                .iter()
                .all(|&(cpu, s)| cpu == 1 || s <= skew_pages),
            "CPU 0 ran ahead of CPU 1: {got:?}"
        );
        // The writer has CPU 1's pages now: the merge takes both CPUs in time order.
        append(dir.path(), 1, 0, 0..41);
        c.poll(&mut out);
        assert!(!c.behind());
        let got = got.into_inner();
        let n = |cpu| got.iter().filter(|g| g.0 == cpu).count();
        assert_eq!((n(0), n(1)), (41, 41), "every page once");
        let mut times: Vec<u64> = Vec::new();
        let mut max_skew = 0;
        for &(_, s) in &got {
            let ts = s * STEP;
            let newest = times.iter().copied().max().unwrap_or(0);
            max_skew = max_skew.max(newest.saturating_sub(ts));
            times.push(ts);
        }
        assert!(
            max_skew <= SKEW_NS + STEP,
            "a page came {max_skew} ns after a newer one"
        );
        for cpu in [0, 1] {
            let seqs: Vec<u64> = got.iter().filter(|g| g.0 == cpu).map(|g| g.1).collect();
            assert_eq!(seqs, (0..41).collect::<Vec<u64>>(), "cpu {cpu} in order");
        }
    }

    /// At the end of the recording a page that never reached the disk is lost, and the
    /// CPU resumes at the next page it holds.
    #[test]
    fn at_the_end_a_page_never_written_is_lost_and_the_rest_handed_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 8);
        let mut got: Vec<(u64, u64)> = Vec::new();
        let mut out = |_: u32, p: &[u8], lost: u64| got.push((cpu_seq(p).1, lost));
        c.push(tapped(0, 0), &mut out);
        append(dir.path(), 0, 0, 0..3);
        c.push(tapped(0, 5), &mut out);
        c.poll_at_end(&mut out);
        assert!(!c.behind());
        let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(seqs, vec![0, 1, 2, 5]);
        assert_eq!(got.last().unwrap().1, 2, "pages 3 and 4 lost");
        assert_eq!(c.unrecoverable, 2);
    }

    /// At the end, the backlog is read back a batch per call, never all at once; what is
    /// still behind when the job gives up is left to the ring and counted.
    #[test]
    fn at_the_end_the_backlog_is_read_a_batch_at_a_time_and_the_rest_can_be_left() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = CatchUp::new(dir.path(), PS, 1 << 20);
        let got = std::cell::Cell::new(0u64);
        let mut out = |_: u32, _: &[u8], _: u64| got.set(got.get() + 1);
        // Frames of 64 pages, as the recorder's writer appends them: a call hands on
        // DISK_BATCH pages and the rest of the frame it is in.
        let total = 3 * DISK_BATCH as u64;
        for f in 0..total / 64 {
            append(dir.path(), 0, 0, f * 64..(f + 1) * 64);
        }
        c.push(tapped(0, total - 1), &mut out);
        let batch = DISK_BATCH as u64;
        c.poll_at_end(&mut out);
        assert!(
            (batch..batch + 64).contains(&got.get()),
            "one batch: {}",
            got.get()
        );
        assert!(c.behind());
        c.poll_at_end(&mut out);
        let two = got.get();
        assert!((2 * batch..2 * batch + 128).contains(&two), "{two}");
        c.abandon();
        assert!(!c.behind());
        assert_eq!(c.left, total - two);
        c.poll_at_end(&mut out);
        assert_eq!(got.get(), two, "nothing after giving up");
    }
}
