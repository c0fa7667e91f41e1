//! `argus start`'s memory budget (`--max-memory`): what the job may hold resident, and how
//! it stays within it. The job's memory follows the event rate × the retained window: about
//! 550 bytes per retained event (the collector's graph, the live graph's arrangements, the
//! dataflow's state), so at the 2 M events/s of a saturating load the default 10-minute
//! window would take hundreds of GiB. Past the budget the job keeps a shorter window
//! ([`Retention`]), and a CPU read back from the ring far behind skips ahead
//! (`catchup.rs`).
//!
//! ```text
//!  every second: resident set (/proc/self/statm, less LazyFree) vs the budget
//!    over  ─► window = max(floor, min(window, held) / 2)   (held: what the collector holds)
//!    under half the budget for 10 s ─► window × 1.25, up to --retain
//!  the collector cuts by min(--retain, window) (`window.rs`), the live graph with it
//! ```
//!
//! A shortened window forgets records, it loses nothing: the raw ring still holds every
//! event (`argus build DIR/trace`), and each snapshot says where its window starts
//! (`forgotten_before`). The floor keeps at least [`MIN_WINDOW`] (or twice the hang
//! threshold, if longer), so a hang is still detected and its causes within that stretch are
//! in the graph.

// Elsewhere than Linux only the parsing of `--max-memory` serves.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use argus_pipeline::dataflow::ForgetLimit;
use argus_schema::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest window the budget keeps.
pub(crate) const MIN_WINDOW: Duration = Duration::from_secs(10);
/// How long the resident set stays under half the budget before the window may grow again.
const CALM: Duration = Duration::from_secs(10);
/// How long a shortened window is given to free memory before it is shortened again (the
/// collector cuts at its next epoch, the live graph drops the layers when its reads allow).
const SETTLE: Duration = Duration::from_secs(3);

/// A memory budget in bytes, measured against the job's resident set.
pub struct MemoryBudget {
    /// Bytes; `None` when no limit applies (then never over).
    limit: Option<u64>,
    page_size: u64,
}

impl MemoryBudget {
    /// `--max-memory`: a size (`4G`, `512M`) or a percentage of the machine's memory (`25%`).
    pub fn parse(text: &str) -> Result<MemoryBudget, String> {
        let t = text.trim();
        let limit = match t.strip_suffix('%') {
            Some(p) => {
                let pct: f64 = p
                    .trim()
                    .parse()
                    .ok()
                    .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
                    .ok_or_else(|| format!("`{t}`: a percentage must be in (0, 100]"))?;
                let total = mem_total().ok_or_else(|| {
                    format!("`{t}`: /proc/meminfo has no MemTotal; give a size such as 4G")
                })?;
                (total as f64 * pct / 100.0) as u64
            }
            None => argus_ingest::linux::parse_size(t).map_err(|e| format!("`{t}`: {e}"))?,
        };
        if limit < 64 << 20 {
            return Err(format!(
                "`{t}` is below 64 MiB, less than the job needs to run at all"
            ));
        }
        Ok(MemoryBudget::of(Some(limit)))
    }

    /// A budget of `limit` bytes.
    pub fn of(limit: Option<u64>) -> MemoryBudget {
        // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        MemoryBudget {
            limit,
            page_size: u64::try_from(page).unwrap_or(4096),
        }
    }

    /// The limit in bytes, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The job's resident set in bytes (`/proc/self/statm`; 0 when unreadable).
    pub fn resident(&self) -> u64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| pages * self.page_size)
    }

    /// The memory the job holds, bytes: its resident set, less the pages it freed lazily
    /// (`LazyFree` of `/proc/self/smaps_rollup`: the kernel takes them back whenever memory
    /// is short; `memory.rs`), read only when the resident set alone is over the budget.
    pub fn used(&self) -> u64 {
        let rss = self.resident();
        if self.limit.is_none_or(|l| rss <= l) {
            return rss;
        }
        rss.saturating_sub(lazy_free().unwrap_or(0))
    }

    /// Whether the job's memory ([`MemoryBudget::used`]) is over the budget.
    pub fn over(&self) -> bool {
        self.limit.is_some_and(|l| self.used() > l)
    }
}

/// `LazyFree` of `/proc/self/smaps_rollup`, bytes.
fn lazy_free() -> Option<u64> {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("LazyFree:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), bytes.
fn mem_total() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    })
}

/// The window the collector keeps, in ns: `--retain`, or shorter while the job is over its
/// budget (module docs). Shared with the collector, which reads it at every cut.
#[derive(Clone, Debug)]
pub(crate) struct WindowLimit(Arc<AtomicU64>);

impl WindowLimit {
    /// No limit beyond `--retain`.
    pub(crate) fn new() -> WindowLimit {
        WindowLimit(Arc::new(AtomicU64::new(u64::MAX)))
    }

    /// The window in ns (`u64::MAX`: `--retain`).
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::Relaxed);
    }
}

/// A change of the window, for the job's log and status line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Change {
    /// Over the budget: the window is now this (ns), with this resident set (bytes).
    Shortened { window_ns: u64, resident: u64 },
    /// Back under the budget for a while: the window may grow to this (ns).
    Grown { window_ns: u64 },
}

/// Keeps the retained window within the memory budget (module docs).
pub(crate) struct Retention {
    retain_ns: u64,
    floor_ns: u64,
    /// The window now (ns), `retain_ns` when the budget does not limit it.
    window_ns: u64,
    limit: WindowLimit,
    /// The dataflow's horizon: twice the window (`job::continuous`).
    forget: ForgetLimit,
    /// When the window last changed.
    changed: Option<Instant>,
    /// Since when the resident set has been under half the budget.
    calm_since: Option<Instant>,
    /// Times the window was shortened.
    pub(crate) shortened: u64,
}

impl Retention {
    /// `--retain` of `retain`, never below `floor` (or `retain` if shorter).
    pub(crate) fn new(
        retain: Duration,
        floor: Duration,
        limit: WindowLimit,
        forget: ForgetLimit,
    ) -> Retention {
        let retain_ns = retain.as_nanos() as u64;
        Retention {
            retain_ns,
            floor_ns: (floor.as_nanos() as u64).min(retain_ns),
            window_ns: retain_ns,
            limit,
            forget,
            changed: None,
            calm_since: None,
            shortened: 0,
        }
    }

    /// The window kept now, ns.
    pub(crate) fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// Whether the budget limits the window now.
    pub(crate) fn limited(&self) -> bool {
        self.window_ns < self.retain_ns
    }

    /// Called about once a second with the resident set, the budget and how much history
    /// the collector holds now (`held_ns`: watermark − window start).
    pub(crate) fn check(
        &mut self,
        now: Instant,
        resident: u64,
        limit: u64,
        held_ns: u64,
    ) -> Option<Change> {
        let settled = self.changed.is_none_or(|t| now.duration_since(t) >= SETTLE);
        if resident > limit {
            self.calm_since = None;
            if !settled || self.window_ns <= self.floor_ns {
                return None;
            }
            let next = (self.window_ns.min(held_ns) / 2).max(self.floor_ns);
            if next >= self.window_ns {
                return None;
            }
            self.window_ns = next;
            self.limit.set(next);
            self.forget.set(Some(Nanos(next.saturating_mul(2))));
            self.changed = Some(now);
            self.shortened += 1;
            return Some(Change::Shortened {
                window_ns: next,
                resident,
            });
        }
        if resident > limit / 2 || !self.limited() {
            self.calm_since = None;
            return None;
        }
        let calm = *self.calm_since.get_or_insert(now);
        if !settled || now.duration_since(calm) < CALM {
            return None;
        }
        let next = self
            .window_ns
            .saturating_add(self.window_ns / 4)
            .min(self.retain_ns);
        self.window_ns = next;
        let whole = next >= self.retain_ns;
        self.limit.set(if whole { u64::MAX } else { next });
        self.forget
            .set((!whole).then(|| Nanos(next.saturating_mul(2))));
        self.changed = Some(now);
        self.calm_since = None;
        Some(Change::Grown { window_ns: next })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const G: u64 = 1 << 30;

    /// Over the budget the window halves (from what the collector holds, if less), once per
    /// settling time, down to the floor; under half the budget for a while it grows back by
    /// a quarter at a time, to `--retain`, and the shared limit follows.
    #[test]
    fn the_window_halves_over_the_budget_and_grows_back_under_half_of_it() {
        let limit = WindowLimit::new();
        let forget = ForgetLimit::default();
        let mut r = Retention::new(
            Duration::from_secs(600),
            MIN_WINDOW,
            limit.clone(),
            forget.clone(),
        );
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(r.check(at(0), G, 2 * G, 100 * S), None, "within the budget");
        assert_eq!(limit.get(), u64::MAX);
        // Over: the collector holds 100 s, so the window becomes 50 s.
        assert_eq!(
            r.check(at(1), 3 * G, 2 * G, 100 * S),
            Some(Change::Shortened {
                window_ns: 50 * S,
                resident: 3 * G
            })
        );
        assert_eq!(limit.get(), 50 * S);
        assert_eq!(
            forget.apply(Nanos(1200 * S)),
            Nanos(100 * S),
            "the dataflow's: twice"
        );
        assert_eq!(r.check(at(2), 3 * G, 2 * G, 60 * S), None, "settling");
        assert!(matches!(
            r.check(at(4), 3 * G, 2 * G, 60 * S),
            Some(Change::Shortened { window_ns, .. }) if window_ns == 25 * S
        ));
        assert!(matches!(
            r.check(at(7), 3 * G, 2 * G, 30 * S),
            Some(Change::Shortened { window_ns, .. }) if window_ns == 12_500_000_000
        ));
        assert!(matches!(
            r.check(at(10), 3 * G, 2 * G, 15 * S),
            Some(Change::Shortened { window_ns, .. }) if window_ns == 10 * S
        ));
        assert_eq!(r.check(at(20), 3 * G, 2 * G, 12 * S), None, "at the floor");
        assert_eq!(r.shortened, 4);
        // Between half and the whole budget: nothing changes.
        assert_eq!(r.check(at(30), 3 * G / 2, 2 * G, 12 * S), None);
        // Under half: after 10 calm seconds, a quarter more each time.
        assert_eq!(r.check(at(40), G / 2, 2 * G, 12 * S), None);
        assert_eq!(
            r.check(at(50), G / 2, 2 * G, 12 * S),
            Some(Change::Grown {
                window_ns: 12_500_000_000
            })
        );
        assert_eq!(limit.get(), 12_500_000_000);
        let mut t = 50;
        while r.limited() {
            t += 11;
            r.check(at(t), G / 2, 2 * G, 12 * S);
            t += 11;
            r.check(at(t), G / 2, 2 * G, 12 * S);
        }
        assert_eq!(r.window_ns(), 600 * S);
        assert_eq!(limit.get(), u64::MAX, "back to --retain");
        assert_eq!(forget.apply(Nanos(1200 * S)), Nanos(1200 * S));
    }

    /// A window shorter than the floor is kept as it is: the budget never lengthens it.
    #[test]
    fn a_retain_below_the_floor_is_not_shortened() {
        let limit = WindowLimit::new();
        let mut r = Retention::new(
            Duration::from_secs(5),
            MIN_WINDOW,
            limit.clone(),
            ForgetLimit::default(),
        );
        assert_eq!(r.check(Instant::now(), 3 * G, 2 * G, 5 * S), None);
        assert_eq!(limit.get(), u64::MAX);
    }

    #[test]
    fn the_budget_is_a_size_or_a_share_of_memory() {
        assert_eq!(MemoryBudget::parse("4G").unwrap().limit(), Some(4 * G));
        assert_eq!(
            MemoryBudget::parse("512M").unwrap().limit(),
            Some(512 << 20)
        );
        let quarter = MemoryBudget::parse("25%").unwrap().limit().unwrap();
        let half = MemoryBudget::parse("50%").unwrap().limit().unwrap();
        assert!(quarter > 0 && half.abs_diff(2 * quarter) <= 1);
        for bad in ["0%", "150%", "lots", "1M", "-5%"] {
            assert!(MemoryBudget::parse(bad).is_err(), "{bad}");
        }
        assert!(MemoryBudget::of(Some(1)).over());
        assert!(!MemoryBudget::of(Some(u64::MAX)).over());
        assert!(!MemoryBudget::of(None).over());
        assert!(MemoryBudget::of(None).resident() > 0);
        let tight = MemoryBudget::of(Some(1));
        assert!(tight.used() <= tight.resident());
    }
}
