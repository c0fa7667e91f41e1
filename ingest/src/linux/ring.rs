//! The state the reader threads share with the controller: `meta.json` (with its extension
//! keys, [`MetaExt`]) and the ring that keeps the trace directory under its size cap.
//!
//! ```text
//!  writer cpuN ── frame appended ──► account_progress(cpu, seq, bytes) ─┐ enforce: while chunks
//!              ── chunk complete ──► account_completed(cpu, seq, ...)  ─┤ + side files > cap,
//!  syncer cpuN ── missed events  ──► lost(cpu, range)                   │ delete the completed
//!              ── ring changed   ──► write_meta_if_dirty()              │ chunk whose data ends
//!  controller  ── start/close    ──► write_meta()                       │ first (any CPU)
//!                                                                       └► meta.json rewritten
//!                                                                          by the syncer
//! ```
//!
//! **Global, oldest-data-first deletion.** The cap is on the whole directory, not per CPU: a
//! busy CPU may use most of it while an idle one keeps its few chunks. The chunk deleted is
//! the completed one whose last page is oldest, whatever its CPU, so per CPU deletions are
//! always a prefix (sequence numbers `0..k`) and every CPU keeps its most recent data. The
//! chunks in progress are never deleted; their size counts against the cap.
//!
//! **A full disk.** When a writer finds its filesystem full, [`Shared::make_room`] lowers the
//! cap to what the chunks use now, less the oldest completed chunk, and deletes it (the usual
//! deletion, recorded in `ring.dropped`), so the ring goes on turning in the room it has. It
//! never goes below its **floor**, [`FLOOR_DIVISOR`]th of `--ring-size`: there the writers
//! pause (`reader.rs`). Every [`REGROW_EVERY`] a completed chunk gives the cap back up to half
//! the space the filesystem has free, until it is whole again. `meta.json` has room kept for
//! it in a reserve file (`.meta-reserve`, the size counted in the side files), given up when
//! `meta.json` cannot otherwise be written.

use super::error::RecordError;
use super::sysinfo;
use crate::tracedir::{DroppedRange, LostRange, MetaExt, RingInfo, TraceMeta};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The ring gives room back to a full disk down to this fraction of `--ring-size`.
pub(crate) const FLOOR_DIVISOR: u64 = 8;

/// How often a ring whose cap a full disk lowered looks for space to grow back into.
const REGROW_EVERY: Duration = Duration::from_secs(5);

/// The file that keeps room for `meta.json` on a filesystem that fills up.
pub(crate) const META_RESERVE_NAME: &str = ".meta-reserve";

/// A completed chunk still on disk.
#[derive(Clone, Debug)]
struct Done {
    cpu: u32,
    seq: u32,
    bytes: u64,
    first_ts: u64,
    last_ts: u64,
    path: PathBuf,
}

/// A chunk being written.
#[derive(Clone, Copy, Debug)]
struct Current {
    seq: u32,
    bytes: u64,
    first_ts: u64,
}

/// Everything behind the lock.
#[derive(Debug)]
pub(crate) struct State {
    /// `meta.json` proper.
    pub(crate) meta: TraceMeta,
    /// Its extension keys.
    pub(crate) ext: MetaExt,
    /// Bytes the chunk files may use now (`None`: no cap): the configured cap, or less
    /// while a full disk keeps it lower.
    budget: Option<u64>,
    /// The configured cap on the chunk files.
    full_budget: Option<u64>,
    /// Below this a full disk gets no more room from the ring.
    floor: u64,
    /// When a lowered cap last looked for free space.
    regrow_checked: Option<Instant>,
    completed: Vec<Done>,
    completed_bytes: u64,
    current: BTreeMap<u32, Current>,
    /// Chunks deleted per CPU.
    dropped_chunks: BTreeMap<u32, u32>,
    /// `ext` changed since `meta.json` was last written.
    dirty: bool,
}

/// Shared between the recording and its reader threads.
#[derive(Debug)]
pub(crate) struct Shared {
    dir: PathBuf,
    state: Mutex<State>,
    /// Held while `meta.json` is written.
    writing: Mutex<()>,
}

impl Shared {
    pub(crate) fn new(dir: &Path, meta: TraceMeta) -> Shared {
        Shared {
            dir: dir.to_path_buf(),
            state: Mutex::new(State {
                meta,
                ext: MetaExt::default(),
                budget: None,
                full_budget: None,
                floor: 0,
                regrow_checked: None,
                completed: Vec::new(),
                completed_bytes: 0,
                current: BTreeMap::new(),
                dropped_chunks: BTreeMap::new(),
                dirty: false,
            }),
            writing: Mutex::new(()),
        }
    }

    /// The state (a reader that panicked holding the lock leaves it usable).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the ring: `size` is the cap on the directory, `side_bytes` what the side files
    /// (formats, kallsyms, proc.json, meta.json) use of it.
    pub(crate) fn set_ring(&self, size: u64, side_bytes: u64, chunk_pages: u32) {
        let mut st = self.lock();
        st.budget = Some(size.saturating_sub(side_bytes));
        st.full_budget = st.budget;
        st.floor = size / FLOOR_DIVISOR;
        st.ext.ring = Some(RingInfo {
            size,
            chunk_pages,
            dropped: BTreeMap::new(),
        });
    }

    /// Rewrites `meta.json` from the current state.
    pub(crate) fn write_meta(&self) -> Result<(), RecordError> {
        self.write_meta_when(|_| true)
    }

    /// Chunk `seq` of `cpu` now has `bytes` on disk and starts at `first_ts`: the ring deletes
    /// what no longer fits at once. Returns whether `meta.json` needs rewriting (left to the
    /// caller, as the rewrite syncs: the chunk writer must never wait for the disk, yet the
    /// cap must hold while the disk is slow).
    pub(crate) fn account_progress(&self, cpu: u32, seq: u32, bytes: u64, first_ts: u64) -> bool {
        let mut st = self.lock();
        st.current.insert(
            cpu,
            Current {
                seq,
                bytes,
                first_ts,
            },
        );
        st.enforce();
        st.dirty
    }

    /// Chunk `seq` of `cpu` is complete (its sync may still be under way: a chunk deleted
    /// before it is synced costs nothing). Returns whether `meta.json` needs rewriting.
    pub(crate) fn account_completed(
        &self,
        cpu: u32,
        seq: u32,
        bytes: u64,
        first_ts: u64,
        last_ts: u64,
        path: PathBuf,
    ) -> bool {
        let mut st = self.lock();
        if st.current.get(&cpu).is_some_and(|c| c.seq == seq) {
            st.current.remove(&cpu);
        }
        st.completed.push(Done {
            cpu,
            seq,
            bytes,
            first_ts,
            last_ts,
            path,
        });
        st.completed_bytes += bytes;
        st.enforce();
        st.regrow(&self.dir);
        st.dirty
    }

    /// A writer found the filesystem full: lowers the cap to what the chunks use less the
    /// oldest completed chunk, and deletes it. `false` when the ring is at its floor (or has
    /// no cap, or nothing completed to delete): the caller pauses.
    pub(crate) fn make_room(&self) -> bool {
        let mut st = self.lock();
        let Some(budget) = st.budget else {
            return false;
        };
        let in_progress: u64 = st.current.values().map(|c| c.bytes).sum();
        let used = st.completed_bytes + in_progress;
        let Some(oldest) = st
            .completed
            .iter()
            .min_by_key(|d| (d.last_ts, d.seq, d.cpu))
            .map(|d| d.bytes)
        else {
            return false;
        };
        if used <= st.floor {
            return false;
        }
        let lowered = used.saturating_sub(oldest.max(1)).max(st.floor).min(budget);
        st.budget = Some(lowered);
        st.regrow_checked = Some(Instant::now());
        let before = st.completed_bytes;
        st.enforce();
        tracing::debug!(
            cap = lowered,
            freed = before - st.completed_bytes,
            "ring: the disk is full; cap lowered"
        );
        st.completed_bytes < before
    }

    /// Rewrites `meta.json` if the ring or the lost ranges changed since it was written.
    pub(crate) fn write_meta_if_dirty(&self) -> Result<(), RecordError> {
        self.write_meta_when(|st| st.dirty)
    }

    /// Rewrites `meta.json` from a copy of the state taken when `due` says so. The state's
    /// lock is not held while the file is written and synced (the chunk writers take it on
    /// every frame); the writing lock keeps the copies written in the order they were taken.
    /// On a full disk it gives up the reserve file, then the ring's oldest chunks, and tries
    /// again; failing that it stays due.
    fn write_meta_when(&self, due: impl FnOnce(&State) -> bool) -> Result<(), RecordError> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let (meta, ext) = {
            let mut st = self.lock();
            if !due(&st) {
                return Ok(());
            }
            st.dirty = false;
            (st.meta.clone(), st.ext.clone())
        };
        let mut written = sysinfo::write_meta(&self.dir, &meta, &ext);
        while written.as_ref().is_err_and(RecordError::is_no_space) {
            let reserve = self.dir.join(META_RESERVE_NAME);
            if std::fs::remove_file(&reserve).is_err() && !self.make_room() {
                break;
            }
            written = sysinfo::write_meta(&self.dir, &meta, &ext);
        }
        if written.is_err() {
            self.lock().dirty = true;
        }
        written
    }

    /// Keeps room for `meta.json` on the filesystem: the reserve file of `bytes` (see the
    /// module docs). Not having it only means a full disk reaches `meta.json` sooner.
    pub(crate) fn reserve_meta_room(&self, bytes: u64) {
        let path = self.dir.join(META_RESERVE_NAME);
        if let Err(e) = sysinfo::write_private(&path, &vec![0u8; bytes as usize]) {
            let _ = std::fs::remove_file(&path);
            tracing::debug!(error = %e, "no room kept for meta.json");
        }
    }

    /// Removes the reserve file (the recording is closed).
    pub(crate) fn release_meta_room(&self) {
        let _ = std::fs::remove_file(self.dir.join(META_RESERVE_NAME));
    }

    /// Events on `cpu` were (or may have been) lost in `range`: the kernel's count between two
    /// pages (a reader's, in time order per CPU), or the recorder's own stretch where it
    /// rewrote its exclusion list (the control thread's, at any time relative to them). The
    /// ranges stay sorted by start, overlapping or adjacent ones merged.
    pub(crate) fn lost(&self, cpu: u32, range: LostRange) {
        let mut st = self.lock();
        let ranges = st.ext.lost_ranges.entry(cpu).or_default();
        let at = ranges.partition_point(|r| r.from_ns <= range.from_ns);
        ranges.insert(at, range);
        let mut merged: Vec<LostRange> = Vec::with_capacity(ranges.len());
        for r in ranges.drain(..) {
            match merged.last_mut() {
                Some(last) if last.to_ns >= r.from_ns => {
                    last.to_ns = last.to_ns.max(r.to_ns);
                    last.events = match (last.events, r.events) {
                        (Some(a), Some(b)) => Some(a + b),
                        _ => None,
                    };
                }
                _ => merged.push(r),
            }
        }
        *ranges = merged;
        st.dirty = true;
    }

    /// Bytes of chunk files on disk now.
    pub(crate) fn chunk_bytes(&self) -> u64 {
        let st = self.lock();
        st.completed_bytes + st.current.values().map(|c| c.bytes).sum::<u64>()
    }

    /// Chunks deleted per CPU so far.
    pub(crate) fn dropped_chunks(&self) -> BTreeMap<u32, u32> {
        self.lock().dropped_chunks.clone()
    }
}

impl State {
    /// A cap lowered by a full disk grows back, every [`REGROW_EVERY`], by up to half the
    /// space the filesystem has free, until it is the configured cap again.
    fn regrow(&mut self, dir: &Path) {
        let (Some(budget), Some(full)) = (self.budget, self.full_budget) else {
            return;
        };
        if budget >= full
            || self
                .regrow_checked
                .is_some_and(|t| t.elapsed() < REGROW_EVERY)
        {
            return;
        }
        self.regrow_checked = Some(Instant::now());
        let Some(free) = sysinfo::free_bytes(dir) else {
            return;
        };
        let grown = (budget + free / 2).min(full);
        if grown > budget {
            tracing::debug!(cap = grown, "ring: space returned; cap raised");
            self.budget = Some(grown);
        }
    }

    /// Deletes completed chunks, oldest data first, until the chunks fit the budget.
    fn enforce(&mut self) {
        let Some(budget) = self.budget else {
            return;
        };
        loop {
            let in_progress: u64 = self.current.values().map(|c| c.bytes).sum();
            if self.completed_bytes + in_progress <= budget || self.completed.is_empty() {
                return;
            }
            let Some(oldest) = self
                .completed
                .iter()
                .enumerate()
                .min_by_key(|(_, d)| (d.last_ts, d.seq, d.cpu))
                .map(|(i, _)| i)
            else {
                return;
            };
            let done = self.completed.swap_remove(oldest);
            self.completed_bytes -= done.bytes;
            match std::fs::remove_file(&done.path) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => tracing::warn!(
                    path = %done.path.display(),
                    error = %err,
                    "cannot delete the oldest ring chunk"
                ),
            }
            // Where this CPU's data now starts: the next chunk, completed or in progress.
            let next_first = self
                .completed
                .iter()
                .filter(|d| d.cpu == done.cpu && d.seq > done.seq)
                .min_by_key(|d| d.seq)
                .map(|d| d.first_ts)
                .or_else(|| self.current.get(&done.cpu).map(|c| c.first_ts))
                .unwrap_or(done.last_ts);
            self.dropped_chunks.insert(done.cpu, done.seq + 1);
            if let Some(ring) = self.ext.ring.as_mut() {
                let entry = ring.dropped.entry(done.cpu).or_insert(DroppedRange {
                    chunks: 0,
                    from_ns: done.first_ts,
                    until_ns: 0,
                });
                entry.chunks = done.seq + 1;
                entry.until_ns = next_first;
            }
            tracing::debug!(
                cpu = done.cpu,
                seq = done.seq,
                "ring: deleted the oldest chunk"
            );
            self.dirty = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracedir;

    fn meta() -> TraceMeta {
        TraceMeta {
            page_size: 4096,
            cpus: vec![0, 1],
            start_ns: 1,
            recorder_pid: 1,
            ..TraceMeta::recording("mono")
        }
    }

    /// Writes chunk `seq` of `cpu` (`bytes` long) and reports it complete.
    fn chunk(shared: &Shared, dir: &Path, cpu: u32, seq: u32, bytes: u64, first: u64, last: u64) {
        let path = tracedir::chunk_path(dir, cpu, seq);
        std::fs::create_dir_all(path.parent().expect("cpu dir")).expect("mkdir");
        std::fs::write(&path, vec![0u8; bytes as usize]).expect("chunk");
        shared.account_completed(cpu, seq, bytes, first, last, path);
        shared.write_meta_if_dirty().expect("meta.json");
    }

    #[test]
    fn deletes_the_oldest_data_of_any_cpu_first_and_records_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let shared = Shared::new(dir, meta());
        // Cap 1000 bytes, 100 of them side files: 900 for chunks.
        shared.set_ring(1000, 100, 4);
        // cpu0 is busy (short chunks), cpu1 idle (one long chunk from the start).
        chunk(&shared, dir, 1, 0, 300, 10, 500);
        chunk(&shared, dir, 0, 0, 300, 10, 100);
        chunk(&shared, dir, 0, 1, 300, 100, 200);
        assert_eq!(shared.chunk_bytes(), 900);
        assert!(shared.dropped_chunks().is_empty());
        // One more: cpu0's first chunk holds the oldest data and goes.
        assert!(shared.account_progress(0, 2, 50, 200), "the ring changed");
        shared.write_meta_if_dirty().expect("meta.json");
        assert!(!tracedir::chunk_path(dir, 0, 0).exists());
        assert!(tracedir::chunk_path(dir, 1, 0).exists());
        assert_eq!(shared.chunk_bytes(), 650);
        chunk(&shared, dir, 0, 2, 350, 200, 300);
        // 600 + 350 > 900: cpu0 chunk 1 (ends at 200) goes before cpu1's (ends at 500).
        assert!(!tracedir::chunk_path(dir, 0, 1).exists());
        assert_eq!(shared.dropped_chunks(), BTreeMap::from([(0, 2)]));
        let st = shared.lock();
        let ring = st.ext.ring.as_ref().expect("ring");
        assert_eq!(
            ring.dropped[&0],
            DroppedRange {
                chunks: 2,
                from_ns: 10,
                until_ns: 200
            }
        );
        drop(st);
        // meta.json was rewritten with the ring.
        let bytes = std::fs::read(tracedir::meta_path(dir)).expect("meta.json");
        let ext = MetaExt::from_meta_json(&bytes).expect("ext");
        assert_eq!(ext.ring.expect("ring").dropped[&0].chunks, 2);
        let meta: TraceMeta = serde_json::from_slice(&bytes).expect("meta");
        assert_eq!(meta.status, "recording");
    }

    fn r(from_ns: u64, to_ns: u64, events: Option<u64>) -> LostRange {
        LostRange {
            from_ns,
            to_ns,
            events,
        }
    }

    #[test]
    fn adjacent_lost_ranges_merge() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let shared = Shared::new(tmp.path(), meta());
        shared.lost(1, r(10, 20, Some(5)));
        shared.lost(1, r(20, 30, Some(7)));
        shared.lost(1, r(50, 60, None));
        shared.lost(1, r(60, 70, Some(1)));
        let st = shared.lock();
        assert_eq!(
            st.ext.lost_ranges[&1],
            vec![r(10, 30, Some(12)), r(50, 70, None)]
        );
    }

    /// A range that comes out of time order (the recorder's own possible-loss stretch, told by
    /// the control thread while the readers report theirs) goes in its place: before,
    /// between, or over the others, merging with what it overlaps.
    #[test]
    fn a_lost_range_out_of_order_is_sorted_in() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let shared = Shared::new(tmp.path(), meta());
        shared.lost(2, r(100, 110, Some(3)));
        shared.lost(2, r(300, 310, Some(4)));
        shared.lost(2, r(10, 20, None));
        shared.lost(2, r(200, 220, None));
        assert_eq!(
            shared.lock().ext.lost_ranges[&2],
            vec![
                r(10, 20, None),
                r(100, 110, Some(3)),
                r(200, 220, None),
                r(300, 310, Some(4))
            ]
        );
        shared.lost(2, r(105, 205, None));
        assert_eq!(
            shared.lock().ext.lost_ranges[&2],
            vec![r(10, 20, None), r(100, 220, None), r(300, 310, Some(4))]
        );
    }

    #[test]
    fn a_full_disk_lowers_the_cap_down_to_the_floor_then_the_writers_pause() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let shared = Shared::new(dir, meta());
        // Cap 8000 bytes, none for side files: the floor is 1000.
        shared.set_ring(8000, 0, 4);
        chunk(&shared, dir, 0, 0, 600, 10, 100);
        chunk(&shared, dir, 1, 0, 600, 10, 150);
        chunk(&shared, dir, 0, 1, 600, 100, 200);
        shared.account_progress(0, 2, 100, 200);
        // 1900 bytes used: the oldest chunk goes and the cap follows what is left.
        assert!(shared.make_room());
        assert!(!tracedir::chunk_path(dir, 0, 0).exists());
        assert_eq!(shared.chunk_bytes(), 1300);
        assert_eq!(shared.lock().budget, Some(1300));
        // New data now turns within the lowered cap: a chunk completing deletes the oldest.
        chunk(&shared, dir, 0, 2, 600, 200, 300);
        assert!(!tracedir::chunk_path(dir, 1, 0).exists());
        assert_eq!(shared.chunk_bytes(), 1200);
        // At 1200 one more deletion would cross the floor (1000): the cap stops there.
        assert!(shared.make_room());
        assert_eq!(shared.lock().budget, Some(1000));
        assert_eq!(shared.chunk_bytes(), 600);
        assert!(!shared.make_room(), "at the floor: the writers pause");
        assert_eq!(
            shared.dropped_chunks(),
            BTreeMap::from([(0, 2), (1, 1)]),
            "every deletion is in ring.dropped"
        );
    }
}
