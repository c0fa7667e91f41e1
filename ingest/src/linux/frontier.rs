//! How far the recorder has read each CPU's buffer: the bound a live consumer of the page tap
//! may release events up to without any of them arriving late.
//!
//! A reader that finds its CPU's buffer empty (`EAGAIN`) at monotonic time `t` has read, and
//! handed to the tap, every record stamped before `t` (the trace clock is `mono`; a record
//! is stamped and committed with preemption off, so a record stamped before `t` but not yet
//! committed is at most microseconds old: [`COMMIT_MARGIN`] covers it). So has a reader whose
//! read at `t` returned a partial page (the page the kernel is writing) once the next page
//! it reads starts after `t`: under a steady load the buffer is never empty, yet every read
//! ends at the kernel's write position. The reader publishes `t − COMMIT_MARGIN` for its
//! CPU, unless the tap dropped its last page (then the consumer must first learn of the drop
//! from the next page and read the missing ones back from the ring). A consumer that loads the frontier *before* taking what the tap holds has every
//! page stamped up to it.
//!
//! The kernel's losses go the same way. A page flagged with missed events lost records
//! stamped after this CPU's last record read and after its frontier (the kernel overwrites
//! only what was not read yet): the reader notes that range ([`ReadFrontier::note_loss`],
//! the range it writes to `meta.json`) before it hands the page on or moves the frontier,
//! and a consumer takes it ([`ReadFrontier::take_losses`]) with the gaps below. A loss
//! starting at the last record read instead made a CPU idle since long ago (its frontier far
//! ahead of that record) lose a stretch a live consumer had already released, and draw
//! edges across it that a build of the ring did not.
//!
//! The recorder's own possible losses go the same way. While it rewrites its exclusion list
//! (`set_event_notrace_pid`, which may drop records of every task for milliseconds) it
//! *holds* the frontier at the rewrite's start ([`ReadFrontier::hold`]), then leaves the
//! stretch as a gap and lets go ([`ReadFrontier::release_with_gap`]). A consumer that takes
//! the gaps ([`ReadFrontier::take_gaps`]) after loading the frontier, in the same tick, so
//! knows of every such gap before it releases any record after its start.
//!
//! Without it, `argus start` released up to `now − lag` and counted as late (dropped) every
//! record a starved reader delivered after that: 4.1 M of 219 M events in a 10-minute soak
//! at 377k events/s.

use crate::tracedir::LostRange;
use argus_schema::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long before the empty read the published frontier is put (see the module docs).
pub const COMMIT_MARGIN: u64 = 1_000_000;

/// Per CPU, the trace time up to which the recorder has read that CPU's buffer (see the
/// module docs). Cheap to clone: the clones share the counters.
#[derive(Clone, Debug, Default)]
pub struct ReadFrontier {
    slots: Arc<[(u32, AtomicU64)]>,
    own: Arc<Mutex<OwnLoss>>,
}

/// The recorder's own possible losses: the start of one under way, and those not yet taken;
/// and the kernel's losses the readers found, not yet taken.
#[derive(Debug, Default)]
struct OwnLoss {
    held_at: Option<u64>,
    gaps: Vec<(Nanos, Nanos)>,
    kernel: Vec<(u32, LostRange)>,
}

/// Possible-loss gaps kept for a consumer that never takes them (a plain recording).
const MAX_OWN_GAPS: usize = 4096;

impl ReadFrontier {
    /// A frontier for `cpus`, none of them read yet.
    pub fn new(cpus: &[u32]) -> ReadFrontier {
        ReadFrontier {
            slots: cpus.iter().map(|&c| (c, AtomicU64::new(0))).collect(),
            own: Arc::default(),
        }
    }

    /// The CPUs of the recording.
    pub fn cpus(&self) -> Vec<u32> {
        self.slots.iter().map(|(c, _)| *c).collect()
    }

    fn own(&self) -> std::sync::MutexGuard<'_, OwnLoss> {
        self.own.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The recorder may lose records of any task from `from` (monotonic ns) on: the frontier
    /// stays at or before it until [`ReadFrontier::release_with_gap`].
    pub fn hold(&self, from: u64) {
        self.own().held_at = Some(from);
    }

    /// The possible loss begun at [`ReadFrontier::hold`] lasted `from..to`: a gap for the
    /// consumer, and the frontier free again.
    pub fn release_with_gap(&self, from: u64, to: u64) {
        let mut own = self.own();
        if own.gaps.len() >= MAX_OWN_GAPS {
            own.gaps.remove(0);
        }
        own.gaps.push((Nanos(from), Nanos(to.max(from))));
        own.held_at = None;
    }

    /// The recorder's possible-loss gaps since the last call. Taken after [`ReadFrontier::min`]
    /// in the same tick, they include every gap that starts before the time it returned.
    pub fn take_gaps(&self) -> Vec<(Nanos, Nanos)> {
        std::mem::take(&mut self.own().gaps)
    }

    /// A reader found that the kernel lost `range` of `cpu`'s records (a page flagged with
    /// missed events): kept for [`ReadFrontier::take_losses`]. Noted before the page goes to
    /// the tap and before the frontier moves past `range`'s start.
    pub fn note_loss(&self, cpu: u32, range: LostRange) {
        let mut own = self.own();
        if own.kernel.len() >= MAX_OWN_GAPS {
            own.kernel.remove(0);
        }
        own.kernel.push((cpu, range));
    }

    /// The kernel's losses the readers noted since the last call, each as its CPU's reader
    /// wrote it to `meta.json` `lost_ranges`. Taken after [`ReadFrontier::min`] in the same
    /// tick, they include every loss that starts before the time it returned.
    pub fn take_losses(&self) -> Vec<(u32, LostRange)> {
        std::mem::take(&mut self.own().kernel)
    }

    /// The time up to which `cpu`'s buffer has been read (0 before its first read to the
    /// end, or for a CPU not of the recording): the kernel can lose only records stamped
    /// after it.
    pub fn read_up_to(&self, cpu: u32) -> u64 {
        self.slots
            .iter()
            .find(|(c, _)| *c == cpu)
            .map_or(0, |(_, slot)| slot.load(Ordering::Acquire))
    }

    /// `cpu`'s buffer was read to its end by a read that began at `read_at` (monotonic ns);
    /// its frontier moves to `read_at − COMMIT_MARGIN` (it never goes back).
    pub fn advance(&self, cpu: u32, read_at: u64) {
        if let Some((_, slot)) = self.slots.iter().find(|(c, _)| *c == cpu) {
            slot.fetch_max(read_at.saturating_sub(COMMIT_MARGIN), Ordering::Release);
        }
    }

    /// Every CPU has been read up to the returned time (`Nanos(0)` while one has not been
    /// read to its end yet); `None` for a frontier of no CPU (not a recording's).
    pub fn min(&self) -> Option<Nanos> {
        let held = self.own().held_at.map(Nanos);
        self.slots
            .iter()
            .map(|(_, slot)| Nanos(slot.load(Ordering::Acquire)))
            .min()
            .map(|m| held.map_or(m, |h| m.min(h)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_is_the_least_read_cpu_and_never_goes_back() {
        let f = ReadFrontier::new(&[0, 1]);
        assert_eq!(f.min(), Some(Nanos(0)), "no CPU read yet");
        let clone = f.clone();
        let at = |ns: u64| ns + COMMIT_MARGIN;
        clone.advance(0, at(500));
        assert_eq!(f.min(), Some(Nanos(0)), "cpu1 not read yet");
        clone.advance(1, at(300));
        assert_eq!(f.min(), Some(Nanos(300)), "less the commit margin");
        f.advance(1, at(200));
        assert_eq!(f.min(), Some(Nanos(300)), "never back");
        f.advance(7, at(900));
        assert_eq!(f.min(), Some(Nanos(300)), "not a CPU of the recording");
        assert_eq!(ReadFrontier::default().min(), None);
    }

    #[test]
    fn the_kernels_losses_are_taken_once_with_their_cpu() {
        let f = ReadFrontier::new(&[0, 1]);
        assert_eq!(f.read_up_to(1), 0);
        f.advance(1, 700 + COMMIT_MARGIN);
        assert_eq!(
            (f.read_up_to(1), f.read_up_to(0), f.read_up_to(9)),
            (700, 0, 0)
        );
        let r = LostRange {
            from_ns: 700,
            to_ns: 900,
            events: Some(3),
        };
        f.clone().note_loss(1, r);
        assert_eq!(f.take_losses(), vec![(1, r)]);
        assert!(f.take_losses().is_empty(), "taken once");
    }

    /// A possible loss of the recorder's own holds the frontier at its start until its gap is
    /// there to take: a consumer that takes the gaps after loading the frontier never sees the
    /// frontier past a gap it has not taken.
    #[test]
    fn the_recorders_own_loss_holds_the_frontier_until_its_gap_is_there() {
        let f = ReadFrontier::new(&[0, 1]);
        let at = |ns: u64| ns + COMMIT_MARGIN;
        f.advance(0, at(1_000));
        f.advance(1, at(1_000));
        f.hold(1_200);
        f.advance(0, at(5_000));
        f.advance(1, at(5_000));
        assert_eq!(f.min(), Some(Nanos(1_200)), "held at the loss's start");
        assert!(f.take_gaps().is_empty());
        f.release_with_gap(1_200, 1_900);
        assert_eq!(f.min(), Some(Nanos(5_000)));
        assert_eq!(f.take_gaps(), vec![(Nanos(1_200), Nanos(1_900))]);
        assert!(f.take_gaps().is_empty(), "taken once");
        assert_eq!(f.cpus(), vec![0, 1]);
    }
}
