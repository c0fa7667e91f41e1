//! [`CollectionSink`]: consolidates the differential updates the dataflow pushes out.

use crate::error::SinkError;
use argus_schema::{Epoch, UpdateSink};
use std::borrow::Cow;
use std::fmt::Debug;
use std::hash::Hash;

/// Updates buffered before the first consolidation.
const MIN_PENDING: usize = 1 << 20;

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
/// Storage: one vector, a sorted and consolidated prefix followed by the updates since; the
/// whole is sorted and consolidated in place once the updates outnumber the prefix (and a
/// million). No hashing and no second table: the dataflow's output is mostly insertions,
/// and a hash table's probing and resizing was the collector's main cost. The contents
/// come out already sorted.
#[derive(Clone, Debug)]
pub struct CollectionSink<T> {
    name: String,
    /// `counts[..sorted]`: sorted by record, each record once, no zero count; then the
    /// updates (non-zero diffs) not yet folded in, in arrival order.
    counts: Vec<(T, i64)>,
    sorted: usize,
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

impl<T: Ord + Hash + Clone + Debug> CollectionSink<T> {
    /// An empty sink; `name` (e.g. `"segments"`) identifies it in errors.
    pub fn new(name: impl Into<String>) -> Self {
        CollectionSink {
            name: name.into(),
            counts: Vec::new(),
            sorted: 0,
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
        let (settled, pending) = self.counts.split_at(self.sorted);
        let settled = settled
            .binary_search_by(|(r, _)| r.cmp(record))
            .map_or(0, |i| settled[i].1);
        let pending: i64 = pending
            .iter()
            .filter(|(r, _)| r == record)
            .map(|(_, d)| d)
            .sum();
        settled + pending
    }

    /// Adds one update.
    pub fn update(&mut self, record: T, diff: i64) {
        self.updates += 1;
        if diff == 0 {
            return;
        }
        self.counts.push((record, diff));
        if self.counts.len() - self.sorted >= self.sorted.max(MIN_PENDING) {
            self.consolidate();
        }
    }

    /// Folds the pending updates into the sorted, consolidated records.
    pub fn consolidate(&mut self) {
        if self.sorted == self.counts.len() {
            return;
        }
        consolidate_updates(&mut self.counts);
        self.sorted = self.counts.len();
    }

    /// The consolidated records (borrowed when nothing is pending).
    fn view(&self) -> Cow<'_, [(T, i64)]> {
        if self.sorted == self.counts.len() {
            return Cow::Borrowed(&self.counts);
        }
        let mut all = self.counts.clone();
        consolidate_updates(&mut all);
        Cow::Owned(all)
    }

    /// Folds another sink (another worker's share of the same collection) into this one.
    pub fn absorb(&mut self, other: CollectionSink<T>) {
        self.epoch = self.epoch.max(other.epoch);
        let updates = self.updates + other.updates;
        for (record, diff) in other.counts {
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
    /// its count is above 1).
    pub fn into_contents(mut self) -> Vec<T> {
        self.consolidate();
        let mut out: Vec<T> = Vec::with_capacity(self.counts.len());
        for (record, count) in self.counts {
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
