//! [`CollectionSink`]: consolidates the differential updates the dataflow pushes out.

use crate::error::SinkError;
use argus_schema::{Epoch, UpdateSink};
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

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
#[derive(Clone, Debug)]
pub struct CollectionSink<T> {
    name: String,
    counts: HashMap<T, i64>,
    epoch: Option<Epoch>,
    updates: u64,
}

impl<T: Ord + Hash + Clone + Debug> CollectionSink<T> {
    /// An empty sink; `name` (e.g. `"segments"`) identifies it in errors.
    pub fn new(name: impl Into<String>) -> Self {
        CollectionSink {
            name: name.into(),
            counts: HashMap::new(),
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
        self.counts.len()
    }

    /// Whether no record has a non-zero net count.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// The net count of one record (0 when absent).
    pub fn count(&self, record: &T) -> i64 {
        self.counts.get(record).copied().unwrap_or(0)
    }

    /// Adds one update.
    pub fn update(&mut self, record: T, diff: i64) {
        self.updates += 1;
        if diff == 0 {
            return;
        }
        match self.counts.entry(record) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                *o.get_mut() += diff;
                if *o.get() == 0 {
                    o.remove();
                }
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(diff);
            }
        }
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
        let mut bad: Vec<(&T, i64)> = self
            .counts
            .iter()
            .filter(|(_, &c)| c != 1)
            .map(|(r, &c)| (r, c))
            .collect();
        bad.sort();
        match bad.first() {
            None => Ok(()),
            Some(&(record, count)) => Err(SinkError::Multiplicity {
                collection: self.name.clone(),
                records: bad.len(),
                first: format!("{record:?}"),
                count,
            }),
        }
    }

    /// The records, sorted, each repeated by its positive net count.
    pub fn contents(&self) -> Vec<T> {
        let mut out: Vec<T> = Vec::with_capacity(self.counts.len());
        for (record, &count) in &self.counts {
            for _ in 0..count.max(0) {
                out.push(record.clone());
            }
        }
        out.sort();
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
