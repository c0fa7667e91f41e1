//! Lost-events gaps: time ranges in which some CPU's events were lost, shared between whoever
//! discovers them and the rules that consult them ([`crate::rules::RulesConfig::gaps`]).
//!
//! `argus build` knows every gap before the dataflow starts (the trace's `lost_ranges`).
//! `argus start` discovers them while its dataflow runs: the live merge sees a page flagged
//! with missed events and adds the gap *before* it releases any record of that page, so the
//! rules have it when they process the first event after it. A [`GapSet`] is therefore an
//! append-only set behind a shared handle: clones share one set (the job's merge, every
//! dataflow generation and every worker see the same gaps), additions are visible to every
//! clone at once.
//!
//! ```text
//!  LiveMerge::push_page (missed events on cpuN) ── add(last record before, first after) ─┐
//!                                                                                        ▼
//!  RulesConfig.gaps (clone) ── crosses(from, to) ◄── rule machines of every generation ◄─ GapSet
//! ```
//!
//! Serialized as the plain sorted list of `(from, to)` pairs; deserializing gives a new,
//! unshared set. Equality compares the gaps, not the handles.

use argus_schema::Nanos;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// A sorted, merged, append-only set of inclusive time ranges, shared by its clones (see
/// the module docs).
#[derive(Clone, Default)]
pub struct GapSet {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Set once the first gap is added: lets [`GapSet::crosses`] skip the lock when there
    /// are none (every trace without lost events, on every thread-order edge).
    any: AtomicBool,
    /// Sorted by start, non-overlapping.
    gaps: RwLock<Vec<(Nanos, Nanos)>>,
}

impl GapSet {
    /// An empty set.
    pub fn new() -> GapSet {
        GapSet::default()
    }

    /// A new (unshared) set holding `gaps`, merged.
    pub fn from_list(gaps: impl IntoIterator<Item = (Nanos, Nanos)>) -> GapSet {
        let set = GapSet::new();
        for (from, to) in gaps {
            set.add(from, to);
        }
        set
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<(Nanos, Nanos)>> {
        // The list is valid after every write (a panic cannot leave it half-merged: `add`
        // builds the new list before replacing the old), so a poisoned lock is still usable.
        self.inner.gaps.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that events were lost between `from` and `to` (inclusive; given in either
    /// order), merging it with the gaps it touches. Visible to every clone at once.
    pub fn add(&self, from: Nanos, to: Nanos) {
        let (from, to) = (from.min(to), from.max(to));
        let mut gaps = self.inner.gaps.write().unwrap_or_else(|p| p.into_inner());
        // The gaps that overlap [from, to]: those ending at or after `from` and starting at
        // or before `to`.
        let lo = gaps.partition_point(|g| g.1 < from);
        let hi = gaps.partition_point(|g| g.0 <= to);
        if lo < hi {
            let merged = (from.min(gaps[lo].0), to.max(gaps[hi - 1].1));
            gaps.splice(lo..hi, [merged]);
        } else {
            gaps.insert(lo, (from, to));
        }
        self.inner.any.store(true, Ordering::Release);
    }

    /// Whether something lost may lie between `from` and `to`: a gap's inside (strictly
    /// after its start, strictly before its end) overlaps `from..to`'s. A gap's ends are
    /// records the trace has (the last before the loss, the first after it), and a span
    /// that ends at a gap's start was complete when that record was read: a live consumer
    /// that released it before the gap was known drew the same edges as a build that knew.
    #[inline]
    pub fn crosses(&self, from: Nanos, to: Nanos) -> bool {
        if !self.inner.any.load(Ordering::Acquire) {
            return false;
        }
        let gaps = self.read();
        // The first gap that ends after `from`; it overlaps when it starts before `to`.
        let i = gaps.partition_point(|g| g.1 <= from);
        gaps.get(i).is_some_and(|g| g.0 < to)
    }

    /// The gaps, sorted and merged.
    pub fn to_vec(&self) -> Vec<(Nanos, Nanos)> {
        self.read().clone()
    }

    /// Number of (merged) gaps.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether there is no gap.
    pub fn is_empty(&self) -> bool {
        !self.inner.any.load(Ordering::Acquire)
    }

    /// Whether `self` and `other` are handles to one set.
    pub fn shares(&self, other: &GapSet) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A new set with the same gaps that later additions to `self` do not reach.
    pub fn detached(&self) -> GapSet {
        GapSet::from_list(self.to_vec())
    }
}

impl std::fmt::Debug for GapSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.read().iter()).finish()
    }
}

impl PartialEq for GapSet {
    fn eq(&self, other: &GapSet) -> bool {
        self.shares(other) || *self.read() == *other.read()
    }
}

impl Eq for GapSet {}

impl PartialEq<Vec<(Nanos, Nanos)>> for GapSet {
    fn eq(&self, other: &Vec<(Nanos, Nanos)>) -> bool {
        *self.read() == *other
    }
}

impl PartialEq<GapSet> for Vec<(Nanos, Nanos)> {
    fn eq(&self, other: &GapSet) -> bool {
        other == self
    }
}

impl Serialize for GapSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.read().serialize(s)
    }
}

impl<'de> Deserialize<'de> for GapSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GapSet, D::Error> {
        Ok(GapSet::from_list(Vec::<(Nanos, Nanos)>::deserialize(d)?))
    }
}

impl FromIterator<(Nanos, Nanos)> for GapSet {
    fn from_iter<I: IntoIterator<Item = (Nanos, Nanos)>>(iter: I) -> GapSet {
        GapSet::from_list(iter)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn n(a: u64, b: u64) -> (Nanos, Nanos) {
        (Nanos(a), Nanos(b))
    }

    #[test]
    fn gaps_merge_in_any_order() {
        let s = GapSet::new();
        assert!(s.is_empty());
        assert!(!s.crosses(Nanos(0), Nanos(u64::MAX)));
        s.add(Nanos(50), Nanos(40));
        s.add(Nanos(10), Nanos(20));
        s.add(Nanos(15), Nanos(30));
        assert_eq!(s.to_vec(), vec![n(10, 30), n(40, 50)]);
        // Touching ends merge (ranges are inclusive); one range can swallow several.
        s.add(Nanos(30), Nanos(35));
        assert_eq!(s.to_vec(), vec![n(10, 35), n(40, 50)]);
        s.add(Nanos(5), Nanos(60));
        assert_eq!(s.to_vec(), vec![n(5, 60)]);
        s.add(Nanos(100), Nanos(100));
        s.add(Nanos(70), Nanos(80));
        assert_eq!(s.to_vec(), vec![n(5, 60), n(70, 80), n(100, 100)]);
        assert!(s.crosses(Nanos(61), Nanos(71)));
        assert!(
            !s.crosses(Nanos(61), Nanos(70)),
            "ends at the gap's first record"
        );
        assert!(
            !s.crosses(Nanos(80), Nanos(99)),
            "starts at the gap's last record"
        );
        assert!(s.crosses(Nanos(99), Nanos(101)), "across a point gap");
        assert!(!s.crosses(Nanos(100), Nanos(100)));
        assert!(!s.crosses(Nanos(101), Nanos(200)));
    }

    #[test]
    fn clones_share_additions_and_detached_copies_do_not() {
        let a = GapSet::new();
        let b = a.clone();
        let c = a.detached();
        a.add(Nanos(1), Nanos(2));
        assert!(b.crosses(Nanos(0), Nanos(2)), "a clone sees the new gap");
        assert!(!c.crosses(Nanos(0), Nanos(2)), "a detached copy does not");
        assert!(a.shares(&b) && !a.shares(&c));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, vec![n(1, 2)]);
    }
}
