//! Blame: where the hang's time went, along its causal chain (part of the report's JSON
//! contract, `docs/report.md`).
//!
//! The hung thread's window is cut into pieces, each charged to one thread in one state: on
//! CPU, runnable but not running, waiting for a timer, waiting for a device, or blocked with
//! no traced cause. A piece in which a thread waited for another is not charged to it: it is
//! the other thread's, over the same span, recursively (the wake-up that ended the wait
//! names that thread; the walk's answers choose among several). The pieces partition the
//! window, so the shares sum to at most 100%.
//!
//! ```text
//!  client  ├──────────────── waits for server ────────────────┤
//!  server   ├─────────────── waits for shell ────────────────┤
//!  shell     ├─ runs ─┤├──────── waits for sleep ────────────┤
//!  sleep                ├─ created late ─┤├─ its timer 3.0 s ─┤  ← the largest share: root
//! ```
//!
//! The root cause of a report is the thread holding the largest share (the last of
//! `root_causes`), not the last one the walk reached.

use argus_schema::{Nanos, Pid, SegmentId, Tid};
use serde::{Deserialize, Serialize};

/// What a thread was doing in a piece of the window charged to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlameState {
    /// Running on a CPU.
    OnCpu,
    /// Runnable, waiting for a CPU.
    Runnable,
    /// Waiting for a timer: its own sleep or timeout, or one it armed for the waiting thread.
    Timer,
    /// Waiting for a device (an interrupt nothing in the trace raised ended the wait).
    Device,
    /// Blocked with no traced cause: never woken, woken by a wake-up the trace does not show,
    /// or not in the trace yet.
    Blocked,
}

impl BlameState {
    /// Every state, in the report's order.
    pub const ALL: [BlameState; 5] = [
        BlameState::OnCpu,
        BlameState::Runnable,
        BlameState::Timer,
        BlameState::Device,
        BlameState::Blocked,
    ];

    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            BlameState::OnCpu => "on_cpu",
            BlameState::Runnable => "runnable",
            BlameState::Timer => "timer",
            BlameState::Device => "device",
            BlameState::Blocked => "blocked",
        }
    }

    /// In words, for the terminal.
    pub(crate) fn words(self) -> &'static str {
        match self {
            BlameState::OnCpu => "on CPU",
            BlameState::Runnable => "runnable, waiting for a CPU",
            BlameState::Timer => "waiting for a timer",
            BlameState::Device => "waiting for a device",
            BlameState::Blocked => "blocked, cause not traced",
        }
    }
}

/// Time per state (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlameTimes {
    /// On CPU.
    pub on_cpu_ns: u64,
    /// Runnable, waiting for a CPU.
    pub runnable_ns: u64,
    /// Waiting for a timer.
    pub timer_ns: u64,
    /// Waiting for a device.
    pub device_ns: u64,
    /// Blocked with no traced cause.
    pub blocked_ns: u64,
}

impl BlameTimes {
    /// The time in one state.
    pub fn get(&self, s: BlameState) -> u64 {
        match s {
            BlameState::OnCpu => self.on_cpu_ns,
            BlameState::Runnable => self.runnable_ns,
            BlameState::Timer => self.timer_ns,
            BlameState::Device => self.device_ns,
            BlameState::Blocked => self.blocked_ns,
        }
    }

    pub(crate) fn add(&mut self, s: BlameState, ns: u64) {
        let slot = match s {
            BlameState::OnCpu => &mut self.on_cpu_ns,
            BlameState::Runnable => &mut self.runnable_ns,
            BlameState::Timer => &mut self.timer_ns,
            BlameState::Device => &mut self.device_ns,
            BlameState::Blocked => &mut self.blocked_ns,
        };
        *slot = slot.saturating_add(ns);
    }

    /// The time in all states.
    pub fn total(&self) -> u64 {
        BlameState::ALL.iter().map(|s| self.get(*s)).sum()
    }

    /// The state holding the most time (ties: the first in [`BlameState::ALL`]).
    pub fn main_state(&self) -> BlameState {
        let mut best = BlameState::OnCpu;
        for s in BlameState::ALL {
            if self.get(s) > self.get(best) {
                best = s;
            }
        }
        best
    }
}

/// A thread (or an interrupt pseudo-thread) holding a share of the hang's time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlameContributor {
    /// Thread (negative: an interrupt pseudo-thread).
    pub tid: Tid,
    /// Process.
    pub pid: Pid,
    /// Thread name.
    pub comm: String,
    /// Process name.
    pub process: String,
    /// Its segment holding the most of its time.
    pub segment: SegmentId,
    /// `tid#seq`.
    pub segment_label: String,
    /// Time charged to it (ns).
    pub ns: u64,
    /// `ns` over the hang's length (0..1).
    pub share: f64,
    /// The state holding most of its time.
    pub state: BlameState,
    /// Its time per state.
    pub time: BlameTimes,
}

/// A thread of the blame's chain: how its part of the window was spent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlameStep {
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub comm: String,
    /// The earliest and latest instants of the window charged through it.
    pub from_ns: Nanos,
    /// See `from_ns`.
    pub to_ns: Nanos,
    /// The part of the window it covers: its own time plus `waiting_ns` (ns).
    pub covered_ns: u64,
    /// `covered_ns` over the hang's length.
    pub share: f64,
    /// Its own time per state.
    pub time: BlameTimes,
    /// Time it waited for the next culprits (charged to them).
    pub waiting_ns: u64,
    /// The threads it waited for, the longest waited first.
    pub waiting_on: Vec<Tid>,
}

/// The hang's time attributed along its chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blame {
    /// The hang's length (ns): what shares are of.
    pub window_ns: u64,
    /// Every thread holding at least `min_share` of the window, the largest share first.
    /// The first is the root cause.
    pub contributors: Vec<BlameContributor>,
    /// The threads the window was charged through, in the order the chain reached them
    /// (the hung thread first); threads covering under 1% of the window are left out.
    pub steps: Vec<BlameStep>,
    /// The smallest share a contributor needs to be listed.
    pub min_share: f64,
}
