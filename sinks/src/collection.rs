//! [`CollectionSink`]: consolidates the differential updates the dataflow pushes out.

use crate::error::SinkError;
use argus_schema::{Epoch, UpdateSink};
use std::borrow::Cow;
use std::fmt::Debug;
use std::hash::Hash;

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
/// Storage: a sorted, consolidated vector, plus the updates since in fixed-size chunks
/// (each sorted and consolidated when it fills). Once the pending updates outnumber the
/// sorted records (and a million) and at least one in eight is a retraction, everything is
/// merged into one new vector of the exact size; otherwise at the end. No hashing and no
/// second table: the dataflow's output is mostly insertions, and a hash table's probing and
/// resizing was the collector's main cost; no vector doubling either: growing one vector of
/// gigabytes copied it and faulted in fresh pages at every step. The contents come out
/// already sorted.
#[derive(Clone, Debug)]
pub struct CollectionSink<T> {
    name: String,
    /// Sorted by record, each record once, no zero count.
    settled: Vec<(T, i64)>,
    /// Full chunks of later updates, each sorted and consolidated on its own.
    chunks: Vec<Vec<(T, i64)>>,
    /// The chunk being filled, in arrival order.
    open: Vec<(T, i64)>,
    /// Updates in `chunks` and `open`.
    pending: usize,
    /// Retractions (negative diffs) among them.
    pending_negative: usize,
    epoch: Option<Epoch>,
    updates: u64,
}

/// Sorts updates by record and sums the diffs of equal records in place, dropping zeros.
fn consolidate_updates<T: Ord>(updates: &mut Vec<(T, i64)>) {
    updates.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // `w` is the last kept slot; slots after it up to `i` are spent.
    let mut w = 0;
    for i in 1..updates.len() {
        if updates[i].0 == updates[w].0 {
            let d = updates[i].1;
            updates[w].1 += d;
        } else {
            if updates[w].1 != 0 {
                w += 1;
            }
            updates.swap(w, i);
        }
    }
    let kept = match updates.get(w) {
        Some(last) if last.1 != 0 => w + 1,
        _ => w,
    };
    updates.truncate(kept);
}

/// A k-way merge of runs, each sorted by record: the heap orders run indices by the runs'
/// heads, which stay where they are, so each update is moved once on its way out (a heap of
/// the updates themselves moved every ~150-byte segment at each level of every sift).
/// Ties go to the earlier run.
struct RunMerge<T> {
    iters: Vec<std::vec::IntoIter<(T, i64)>>,
    heads: Vec<Option<(T, i64)>>,
    /// Min-heap of the runs that still have a head.
    heap: Vec<usize>,
}

impl<T: Ord> RunMerge<T> {
    fn new(runs: Vec<Vec<(T, i64)>>) -> RunMerge<T> {
        let mut iters: Vec<std::vec::IntoIter<(T, i64)>> =
            runs.into_iter().map(Vec::into_iter).collect();
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

/// Merges runs, each sorted by record and consolidated, into one such run of the exact
/// size (diffs of a record present in several runs are summed; zeros dropped).
fn merge_runs<T: Ord>(mut runs: Vec<Vec<(T, i64)>>) -> Vec<(T, i64)> {
    let total: usize = runs.iter().map(Vec::len).sum();
    runs.retain(|r| !r.is_empty());
    if runs.len() <= 1 {
        return runs.pop().unwrap_or_default();
    }
    let mut out: Vec<(T, i64)> = Vec::with_capacity(total);
    out.extend(Sorted::new(runs));
    out
}

/// The records of a [`CollectionSink`] in order, merged lazily from its sorted runs
/// ([`CollectionSink::into_sorted`]).
pub struct Sorted<T> {
    merge: RunMerge<T>,
}

impl<T: Ord> Sorted<T> {
    fn new(runs: Vec<Vec<(T, i64)>>) -> Sorted<T> {
        Sorted {
            merge: RunMerge::new(runs),
        }
    }
}

impl<T: Ord> Iterator for Sorted<T> {
    /// A record and its net count (never 0).
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

impl<T: Ord + Hash + Clone + Debug> CollectionSink<T> {
    /// Consumes the sink: its records in order with their net counts (0 omitted), merged
    /// from the sorted runs as the caller reads them, so no consolidated copy is ever built
    /// (a build streams its segments into Parquet this way).
    pub fn into_sorted(mut self) -> Sorted<T> {
        Sorted::new(self.take_runs())
    }

    /// Empties the sink into its sorted runs: the settled records, the full chunks and the
    /// open chunk (sorted and consolidated here).
    fn take_runs(&mut self) -> Vec<Vec<(T, i64)>> {
        let mut open = std::mem::take(&mut self.open);
        consolidate_updates(&mut open);
        let mut runs = Vec::with_capacity(self.chunks.len() + 2);
        runs.push(std::mem::take(&mut self.settled));
        runs.append(&mut self.chunks);
        runs.push(open);
        self.pending = 0;
        self.pending_negative = 0;
        runs
    }

    /// An empty sink; `name` (e.g. `"segments"`) identifies it in errors.
    pub fn new(name: impl Into<String>) -> Self {
        CollectionSink {
            name: name.into(),
            settled: Vec::new(),
            chunks: Vec::new(),
            open: Vec::new(),
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

    /// The net count of one record (0 when absent).
    pub fn count(&self, record: &T) -> i64 {
        let sorted = |run: &[(T, i64)]| {
            run.binary_search_by(|(r, _)| r.cmp(record))
                .map_or(0, |i| run[i].1)
        };
        let open: i64 = self
            .open
            .iter()
            .filter(|(r, _)| r == record)
            .map(|(_, d)| d)
            .sum();
        sorted(&self.settled) + self.chunks.iter().map(|c| sorted(c)).sum::<i64>() + open
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
            let mut full = std::mem::take(&mut self.open);
            consolidate_updates(&mut full);
            self.chunks.push(full);
        }
        // Folding only frees what retractions cancel: with (nearly) only insertions pending
        // (a batch build) the chunks are merged once, at the end.
        if self.pending >= self.settled.len().max(MIN_PENDING)
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
        let runs = self.take_runs();
        self.settled = merge_runs(runs);
    }

    /// The consolidated records (borrowed when nothing is pending).
    fn view(&self) -> Cow<'_, [(T, i64)]> {
        if self.pending == 0 {
            return Cow::Borrowed(&self.settled);
        }
        let mut all = self.clone();
        all.consolidate();
        Cow::Owned(all.settled)
    }

    /// Folds another sink (another worker's share of the same collection) into this one.
    pub fn absorb(&mut self, other: CollectionSink<T>) {
        self.epoch = self.epoch.max(other.epoch);
        let updates = self.updates + other.updates;
        let runs = std::iter::once(other.settled)
            .chain(other.chunks)
            .chain(std::iter::once(other.open));
        for (record, diff) in runs.flatten() {
            self.update(record, diff);
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
        let view = self.view();
        let mut out: Vec<T> = Vec::with_capacity(view.len());
        for (record, count) in view.iter() {
            for _ in 0..(*count).max(0) {
                out.push(record.clone());
            }
        }
        out
    }

    /// Like [`CollectionSink::contents`], consuming the sink (no record is copied unless
    /// its count is above 1; when every count is 1, as [`CollectionSink::check`] requires,
    /// the records are moved within the sink's own allocation).
    pub fn into_contents(mut self) -> Vec<T> {
        self.consolidate();
        if self.settled.iter().all(|(_, c)| *c == 1) {
            // In-place collection: no second vector of gigabytes to fault in.
            return self.settled.into_iter().map(|(record, _)| record).collect();
        }
        let mut out: Vec<T> = Vec::with_capacity(self.settled.len());
        for (record, count) in self.settled {
            for _ in 1..count.max(0) {
                out.push(record.clone());
            }
            if count > 0 {
                out.push(record);
            }
        }
        out
    }
}

impl<T: Ord + Hash + Clone + Debug> UpdateSink<T> for CollectionSink<T> {
    fn apply(&mut self, epoch: Epoch, updates: &mut dyn Iterator<Item = (T, i64)>) {
        self.epoch = self.epoch.max(Some(epoch));
        for (record, diff) in updates {
            self.update(record, diff);
        }
    }
}
