//! [`CollectionSink`]: consolidates the differential updates the dataflow pushes out.

use crate::error::SinkError;
use crate::pack::{get_i64, put_i64, Pack};
use argus_schema::{Epoch, UpdateSink};
use std::borrow::Borrow;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

/// Updates buffered before the first consolidation.
const MIN_PENDING: usize = 1 << 20;

/// Updates per chunk of the pending storage (a few MB for the largest records).
const CHUNK: usize = 32 * 1024;

/// Accumulates `(record, diff)` updates into net counts per record.
///
/// ```text
///  apply(e0, [(a,+1),(b,+1)])  apply(e1, [(a,-1),(a2,+1)])   →  contents() = [a2, b]
/// ```
///
/// A record whose net count reaches 0 disappears. A consolidated collection (segments,
/// edges, spins...) must hold every record at most once: a net count other than 0 or 1 is
/// an invariant violation of the producer, reported by [`CollectionSink::check`], never a
/// panic. [`CollectionSink::contents`] lists the multiset as it stands (a record with count
/// 2 twice, negative counts omitted) so a caller that does not check still sees everything.
///
/// Storage: a sorted, consolidated run, plus the updates since in fixed-size chunks (each
/// sorted and consolidated when it fills). Runs are kept packed ([`Pack`]: varints and
/// deltas, ~30 bytes a segment instead of ~160); only the chunk being filled holds records
/// as such. Once the pending updates outnumber the sorted records (and a million) and at
/// least one in eight is a retraction, everything is merged into one new run; otherwise at
/// the end. No hashing and no second table: the dataflow's output is mostly insertions, and
/// a hash table's probing and resizing was the collector's main cost; no vector doubling
/// either: growing one vector of gigabytes copied it and faulted in fresh pages at every
/// step. The contents come out already sorted.
#[derive(Clone, Debug)]
pub struct CollectionSink<T> {
    name: String,
    /// Sorted by record, each record once, no zero count.
    settled: Run,
    /// Full chunks of later updates, each sorted and consolidated on its own.
    chunks: Vec<Run>,
    /// The chunk being filled, in arrival order.
    open: Vec<(T, i64)>,
    /// Bytes of the run being packed (reused; each run is copied out at its exact size).
    scratch: Vec<u8>,
    /// The open chunk's positions in record order, while it is sealed (reused).
    order: Vec<u32>,
    /// Updates in `chunks` and `open`.
    pending: usize,
    /// Retractions (negative diffs) among them.
    pending_negative: usize,
    epoch: Option<Epoch>,
    updates: u64,
}

/// Consolidates a chunk of updates where they lie: `order` gets the positions of the
/// records whose summed diff is not zero, in record order, and each of those holds the sum.
/// The positions are sorted, not the updates: a step of the sort moves 4 bytes where it
/// moved a whole update (~150 bytes for a segment). At most `u32::MAX` updates (a chunk holds
/// [`CHUNK`]).
fn consolidate_order<T: Ord>(updates: &mut [(T, i64)], order: &mut Vec<u32>) {
    order.clear();
    order.extend(0..updates.len() as u32);
    order.sort_unstable_by(|&a, &b| updates[a as usize].0.cmp(&updates[b as usize].0));
    // Equal records are adjacent in `order`: the first of each run takes their summed diff,
    // the others keep zero and are left out with the records that cancel out.
    let mut lead = 0;
    for k in 1..order.len() {
        let (first, this) = (order[lead] as usize, order[k] as usize);
        if updates[first].0 == updates[this].0 {
            let d = std::mem::take(&mut updates[this].1);
            updates[first].1 += d;
        } else {
            lead = k;
        }
    }
    order.retain(|&i| updates[i as usize].1 != 0);
}

/// A run of `(record, diff)` updates, sorted by record and consolidated, packed one after
/// another ([`Pack`], then the diff as a zigzag varint). Immutable once packed, and shared:
/// a [`Frozen`] view holds the runs of the moment without copying them.
#[derive(Clone, Debug)]
struct Run {
    bytes: Arc<[u8]>,
    len: usize,
}

impl Default for Run {
    fn default() -> Run {
        Run {
            bytes: Arc::from(&[][..]),
            len: 0,
        }
    }
}

impl Run {
    /// Packs sorted, consolidated updates, through `scratch` so the run is allocated once at
    /// its exact size.
    /// (By reference or by value: the open chunk is packed in place, a merge of runs as it
    /// is decoded.)
    fn pack<T: Pack, U: Borrow<(T, i64)>>(
        updates: impl IntoIterator<Item = U>,
        scratch: &mut Vec<u8>,
    ) -> Run {
        scratch.clear();
        let mut prev = T::Prev::default();
        let mut len = 0;
        for u in updates {
            let (record, diff) = u.borrow();
            record.pack(&mut prev, scratch);
            put_i64(scratch, *diff);
            len += 1;
        }
        Run {
            bytes: Arc::from(scratch.as_slice()),
            len,
        }
    }

    fn decode<T: Pack>(&self) -> Decode<&[u8], T> {
        Decode::new(&self.bytes[..], self.len)
    }

    fn into_decode<T: Pack>(self) -> Decode<Arc<[u8]>, T> {
        Decode::new(self.bytes, self.len)
    }
}

/// The updates of a [`Run`], unpacked one at a time.
struct Decode<B, T: Pack> {
    bytes: B,
    pos: usize,
    left: usize,
    prev: T::Prev,
    _t: PhantomData<T>,
}

impl<B: AsRef<[u8]>, T: Pack> Decode<B, T> {
    fn new(bytes: B, len: usize) -> Self {
        Decode {
            bytes,
            pos: 0,
            left: len,
            prev: T::Prev::default(),
            _t: PhantomData,
        }
    }
}

impl<B: AsRef<[u8]>, T: Pack> Iterator for Decode<B, T> {
    type Item = (T, i64);

    fn next(&mut self) -> Option<(T, i64)> {
        if self.left == 0 {
            return None;
        }
        let all = self.bytes.as_ref();
        let mut input = all.get(self.pos..).unwrap_or_default();
        let update = T::unpack(&mut self.prev, &mut input)
            .and_then(|record| Some((record, get_i64(&mut input)?)))
            .expect("invariant: a run holds `len` updates written by Pack::pack");
        self.pos = all.len() - input.len();
        self.left -= 1;
        Some(update)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// A k-way merge of runs, each sorted by record: the heap orders run indices by the runs'
/// heads, which stay where they are, so each update is moved once on its way out (a heap of
/// the updates themselves moved every ~150-byte segment at each level of every sift).
/// Ties go to the earlier run.
struct RunMerge<T, I> {
    iters: Vec<I>,
    heads: Vec<Option<(T, i64)>>,
    /// Min-heap of the runs that still have a head.
    heap: Vec<usize>,
}

impl<T: Ord, I: Iterator<Item = (T, i64)>> RunMerge<T, I> {
    fn new(mut iters: Vec<I>) -> RunMerge<T, I> {
        let heads: Vec<Option<(T, i64)>> = iters.iter_mut().map(Iterator::next).collect();
        let heap: Vec<usize> = (0..heads.len()).filter(|&r| heads[r].is_some()).collect();
        let mut m = RunMerge { iters, heads, heap };
        for i in (0..m.heap.len() / 2).rev() {
            m.sift_down(i);
        }
        m
    }

    /// Whether run `a`'s head comes before run `b`'s.
    fn before(&self, a: usize, b: usize) -> bool {
        match (&self.heads[a], &self.heads[b]) {
            (Some(x), Some(y)) => (&x.0, a) < (&y.0, b),
            _ => false,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let c = if l + 1 < n && self.before(self.heap[l + 1], self.heap[l]) {
                l + 1
            } else {
                l
            };
            if !self.before(self.heap[c], self.heap[i]) {
                break;
            }
            self.heap.swap(c, i);
            i = c;
        }
    }

    /// The smallest head.
    fn peek(&self) -> Option<&T> {
        let run = *self.heap.first()?;
        self.heads[run].as_ref().map(|h| &h.0)
    }

    /// Takes the smallest head and refills its run.
    fn pop(&mut self) -> Option<(T, i64)> {
        let run = *self.heap.first()?;
        let next = self.iters.get_mut(run).and_then(Iterator::next);
        let out = std::mem::replace(&mut self.heads[run], next);
        if self.heads[run].is_none() {
            self.heap.swap_remove(0);
        }
        self.sift_down(0);
        out
    }
}

/// Merges sorted, consolidated runs lazily: each record once, with the diffs of the runs
/// that hold it summed, zeros dropped.
struct Merged<T, I> {
    merge: RunMerge<T, I>,
}

impl<T: Ord, I: Iterator<Item = (T, i64)>> Iterator for Merged<T, I> {
    type Item = (T, i64);

    fn next(&mut self) -> Option<(T, i64)> {
        loop {
            let (record, mut count) = self.merge.pop()?;
            // Equal records of several runs come one after another.
            while self.merge.peek() == Some(&record) {
                if let Some((_, d)) = self.merge.pop() {
                    count += d;
                }
            }
            if count != 0 {
                return Some((record, count));
            }
        }
    }
}

fn merged<T: Ord, I: Iterator<Item = (T, i64)>>(runs: Vec<I>) -> Merged<T, I> {
    Merged {
        merge: RunMerge::new(runs),
    }
}

/// The records of a [`CollectionSink`] in order, merged lazily from its sorted runs
/// ([`CollectionSink::into_sorted`]).
pub struct Sorted<T: Pack> {
    merged: Merged<T, Decode<Arc<[u8]>, T>>,
}

impl<T: Ord + Pack> Iterator for Sorted<T> {
    /// A record and its net count (never 0).
    type Item = (T, i64);

    fn next(&mut self) -> Option<(T, i64)> {
        self.merged.next()
    }
}

impl<T: Ord + Clone + Debug + Pack> CollectionSink<T> {
    /// Consumes the sink: its records in order with their net counts (0 omitted), merged
    /// from the sorted runs as the caller reads them, so no consolidated copy is ever built
    /// (a build streams its segments into Parquet this way).
    pub fn into_sorted(mut self) -> Sorted<T> {
        let runs = self.take_runs();
        Sorted {
            merged: merged(runs.into_iter().map(Run::into_decode).collect()),
        }
    }

    /// Empties the sink into its sorted runs: the settled records, the full chunks and the
    /// open chunk (sorted, consolidated and packed here).
    fn take_runs(&mut self) -> Vec<Run> {
        self.seal_open();
        let mut runs = Vec::with_capacity(self.chunks.len() + 1);
        runs.push(std::mem::take(&mut self.settled));
        runs.append(&mut self.chunks);
        runs.retain(|r| r.len > 0);
        self.pending = 0;
        self.pending_negative = 0;
        runs
    }

    /// Sorts, consolidates and packs the chunk being filled into `chunks`.
    fn seal_open(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let mut order = std::mem::take(&mut self.order);
        consolidate_order(&mut self.open, &mut order);
        // Packed reading the updates where they lie, in record order.
        let open = &self.open;
        let run = Run::pack(order.iter().map(|&i| &open[i as usize]), &mut self.scratch);
        self.order = order;
        // The open chunk's allocation is kept for the next one.
        self.open.clear();
        self.chunks.push(run);
    }

    /// An empty sink; `name` (e.g. `"segments"`) identifies it in errors.
    pub fn new(name: impl Into<String>) -> Self {
        CollectionSink {
            name: name.into(),
            settled: Run::default(),
            chunks: Vec::new(),
            open: Vec::new(),
            scratch: Vec::new(),
            order: Vec::new(),
            pending: 0,
            pending_negative: 0,
            epoch: None,
            updates: 0,
        }
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The largest epoch applied so far.
    pub fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    /// Total number of `(record, diff)` updates applied.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Number of distinct records with a non-zero net count.
    pub fn len(&self) -> usize {
        self.view().len()
    }

    /// Whether no record has a non-zero net count.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The net count of one record (0 when absent). Reads through every run: for tests and
    /// spot checks, not for lookups in a loop.
    pub fn count(&self, record: &T) -> i64 {
        let packed: i64 = std::iter::once(&self.settled)
            .chain(&self.chunks)
            .flat_map(|run| run.decode::<T>())
            .filter(|(r, _)| r == record)
            .map(|(_, d)| d)
            .sum();
        let open: i64 = self
            .open
            .iter()
            .filter(|(r, _)| r == record)
            .map(|(_, d)| d)
            .sum();
        packed + open
    }

    /// Adds one update.
    pub fn update(&mut self, record: T, diff: i64) {
        self.updates += 1;
        if diff == 0 {
            return;
        }
        if self.open.capacity() == 0 {
            self.open.reserve_exact(CHUNK);
        }
        self.open.push((record, diff));
        self.pending += 1;
        if diff < 0 {
            self.pending_negative += 1;
        }
        if self.open.len() >= CHUNK {
            self.seal_open();
        }
        // Folding only frees what retractions cancel: with (nearly) only insertions pending
        // (a batch build) the chunks are merged once, at the end.
        if self.pending >= self.settled.len.max(MIN_PENDING)
            && self.pending_negative * 8 >= self.pending
        {
            self.consolidate();
        }
    }

    /// Folds the pending updates into the sorted, consolidated records.
    pub fn consolidate(&mut self) {
        if self.pending == 0 {
            return;
        }
        // Merged straight from the old runs into the new one: no unpacked copy of them all.
        let runs = self.take_runs();
        let all = merged(runs.iter().map(Run::decode::<T>).collect());
        self.settled = Run::pack(all, &mut self.scratch);
    }

    /// The consolidated records, unpacked.
    fn view(&self) -> Vec<(T, i64)> {
        let mut open = self.open.clone();
        let mut order = Vec::new();
        consolidate_order(&mut open, &mut order);
        let open: Vec<(T, i64)> = order.iter().map(|&i| open[i as usize].clone()).collect();
        type Updates<'a, T> = Box<dyn Iterator<Item = (T, i64)> + 'a>;
        let mut runs: Vec<Updates<'_, T>> = std::iter::once(&self.settled)
            .chain(&self.chunks)
            .map(|r| Box::new(r.decode::<T>()) as Updates<'_, T>)
            .collect();
        runs.push(Box::new(open.into_iter()));
        merged(runs).collect()
    }

    /// Folds another sink (another worker's share of the same collection) into this one.
    pub fn absorb(&mut self, mut other: CollectionSink<T>) {
        self.epoch = self.epoch.max(other.epoch);
        let updates = self.updates + other.updates;
        for run in other.take_runs() {
            for (record, diff) in run.into_decode::<T>() {
                self.update(record, diff);
            }
        }
        self.updates = updates;
    }

    /// Checks that every record is present at most once and none negatively.
    pub fn check(&self) -> Result<(), SinkError> {
        let view = self.view();
        // Sorted by record, so the first bad one is the smallest.
        let mut bad = view.iter().filter(|(_, c)| *c != 1);
        match bad.next() {
            None => Ok(()),
            Some((record, count)) => Err(SinkError::Multiplicity {
                collection: self.name.clone(),
                records: 1 + bad.count(),
                first: format!("{record:?}"),
                count: *count,
            }),
        }
    }

    /// The records, sorted, each repeated by its positive net count.
    pub fn contents(&self) -> Vec<T> {
        repeat_by_count(self.view())
    }

    /// The contents as they stand, frozen: the sorted runs, shared with the sink (the chunk
    /// being filled is sealed into one first), so freezing costs no copy of the records and
    /// the decoding and merging happen wherever the [`Frozen`] view is read. Later updates
    /// do not show in it.
    pub fn freeze(&mut self) -> Frozen<T> {
        self.seal_open();
        Frozen {
            name: self.name.clone(),
            runs: std::iter::once(&self.settled)
                .chain(&self.chunks)
                .filter(|r| r.len > 0)
                .cloned()
                .collect(),
            _t: PhantomData,
        }
    }

    /// Like [`CollectionSink::contents`], consuming the sink.
    pub fn into_contents(self) -> Vec<T> {
        let all: Vec<(T, i64)> = self.into_sorted().collect();
        repeat_by_count(all)
    }
}

/// A [`CollectionSink`]'s contents at one moment ([`CollectionSink::freeze`]): its packed,
/// sorted runs, shared and immutable, so one thread can freeze a large collection at once and
/// another read it at leisure (`argus start`: the collector freezes, the snapshot thread
/// writes).
#[derive(Clone, Debug)]
pub struct Frozen<T> {
    name: String,
    runs: Vec<Run>,
    _t: PhantomData<T>,
}

impl<T: Ord + Clone + Debug + Pack> Frozen<T> {
    /// One view of several frozen collections (their runs side by side, merged when read):
    /// `argus start` keeps a table in time buckets, each a sink of its own, and a snapshot
    /// reads them as one. A record in two parts counts in both (its net count is the sum).
    pub fn concat(name: impl Into<String>, parts: impl IntoIterator<Item = Frozen<T>>) -> Self {
        Frozen {
            name: name.into(),
            runs: parts.into_iter().flat_map(|p| p.runs).collect(),
            _t: PhantomData,
        }
    }

    /// Updates held (records of the runs, before merging them: an upper bound of the
    /// records).
    pub fn updates(&self) -> usize {
        self.runs.iter().map(|r| r.len).sum()
    }

    /// The records, sorted, each repeated by its positive net count (as
    /// [`CollectionSink::contents`]), and in the same pass the check of
    /// [`CollectionSink::check`]: an error when some record's net count is not 1.
    pub fn contents_checked(self) -> (Vec<T>, Result<(), SinkError>) {
        let all = merged(self.runs.into_iter().map(Run::into_decode::<T>).collect());
        let mut out: Vec<T> = Vec::new();
        let mut bad: Option<(String, i64)> = None;
        let mut n_bad = 0;
        for (record, count) in all {
            if count != 1 {
                n_bad += 1;
                if bad.is_none() {
                    bad = Some((format!("{record:?}"), count));
                }
            }
            for _ in 1..count.max(0) {
                out.push(record.clone());
            }
            if count > 0 {
                out.push(record);
            }
        }
        let check = match bad {
            None => Ok(()),
            Some((first, count)) => Err(SinkError::Multiplicity {
                collection: self.name,
                records: n_bad,
                first,
                count,
            }),
        };
        (out, check)
    }
}

/// Each record as many times as its positive count (moved, cloned only for counts above 1).
fn repeat_by_count<T: Clone>(all: Vec<(T, i64)>) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(all.len());
    for (record, count) in all {
        for _ in 1..count.max(0) {
            out.push(record.clone());
        }
        if count > 0 {
            out.push(record);
        }
    }
    out
}

impl<T: Ord + Clone + Debug + Pack> UpdateSink<T> for CollectionSink<T> {
    fn apply(&mut self, epoch: Epoch, updates: &mut dyn Iterator<Item = (T, i64)>) {
        self.epoch = self.epoch.max(Some(epoch));
        for (record, diff) in updates {
            self.update(record, diff);
        }
    }
}
