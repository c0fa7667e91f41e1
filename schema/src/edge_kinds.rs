//! The edge-kind table: every [`EdgeKind`] and what the other crates need to know about it,
//! in one row per kind ([`EDGE_KINDS`], an [`EdgeKindInfo`] each).
//!
//! The table is the only per-kind list outside prose. The enum is generated from it, so a
//! kind cannot exist without its row, and everything else reads the row:
//!
//! | fact | read by |
//! |---|---|
//! | `name` | the Parquet `kind` column and its parser (`argus-sinks`), exports, report JSON, `argus build --stats` rows |
//! | `code` | the sink's packed edge (`argus-sinks` `pack.rs`); the index of the row |
//! | `beam_cost` | the default `Penalties` of the beam search (`argus-diagnose` `beam.rs`) |
//! | `ends_wait`, `specificity`, `starts_input`, `sending_stack` | the backward walk (`argus-diagnose` `walk/`) |
//! | `walked` | the walk's graph (`argus-diagnose` `graph.rs`) |
//! | `heuristic` | "added by heuristics" of `argus build --stats` (`argus-pipeline` `stats.rs`) |
//!
//! What stays per kind elsewhere, on purpose:
//! - the *phrase* (`"woken by"`, `"lock released by"`): prose, in `argus-diagnose`
//!   `walk/phrases.rs`, whose match on [`EdgeKind`] has no wildcard, so a kind without a
//!   phrase does not compile;
//! - the *rules that make edges* (`argus-pipeline` `rules/`): which kind an edge is, decided
//!   from the events;
//! - code about one named kind, where that kind means something no column can say: the walk
//!   following thread order back through the same thread, a fork as "created by", a timer
//!   leading to its armer, the Perfetto export drawing no flow between two segments of one
//!   thread. A new kind needs none of it.
//!
//! # Adding a kind
//!
//! Append a row at the end with the next code. Codes are never renumbered or reused: the
//! row order is the enum's declaration order, which is the derived [`Ord`] that sorts the
//! edges of a snapshot, so a row inserted in the middle would reorder existing snapshots'
//! rows. A compile-time check fails when the codes are not `0, 1, 2, …` in row order.
//!
//! ```
//! use argus_schema::{EdgeKind, EDGE_KINDS};
//! let k = EdgeKind::from_name("lock_file").expect("a kind");
//! assert_eq!(EdgeKind::from_code(k.code()), Some(k));
//! assert_eq!(EDGE_KINDS[usize::from(k.code())].name, "lock_file");
//! assert!(k.info().ends_wait);
//! ```

use serde::{Deserialize, Serialize};

/// The facts about one edge kind, as data: one row of [`EDGE_KINDS`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EdgeKindInfo {
    /// The kind.
    pub kind: EdgeKind,
    /// Stable lowercase name: the Parquet `kind` column, exports, the report's path edges and
    /// the `argus build --stats` rows. Never changed: snapshots on disk hold it.
    pub name: &'static str,
    /// The kind's code: its index in [`EDGE_KINDS`] and [`EdgeKind::ALL`], its discriminant,
    /// and what the sink's packed edges keep (`kind·4 + strength` in one byte, so below 64).
    /// Never renumbered.
    pub code: u8,
    /// Cost of following one edge of this kind in the beam search, before the strength
    /// factor (`argus_diagnose::Penalties`): low for edges that surely carry the cause (a
    /// message, a data flag), high for thread order and the weak wait↔wake pair.
    pub beam_cost: f64,
    /// The edge ends the destination's wait: the walk asks "who woke it" among these. Not
    /// creation, timer arming (the expiry is an interrupt segment; the timer edge leads to
    /// its armer), thread order or the wait↔wake pair.
    pub ends_wait: bool,
    /// How much the kind says beyond "a wake-up happened", to prefer one edge among several
    /// from the same source: thread order 0, a plain wake-up 1, a user rule 2, the rest 3.
    pub specificity: u8,
    /// The edge brings input to the work it starts: a busy culprit reached through it is
    /// explained as working on that input (a message, a child's creation, queued work, a
    /// signal).
    pub starts_input: bool,
    /// The source acted at the edge's time through a syscall, so a report step shows the
    /// stack it sent from (`Graph::sending_stack`). Not thread order (no action) and not a
    /// data flag (a watchpoint write, not a syscall).
    pub sending_stack: bool,
    /// The edge is in the graph `argus debug` walks. Not the wait↔wake pair: every wake-up
    /// has one, so it would compete with the real causes at every step (it stays in the
    /// snapshot for stats, Perfetto and notebooks; the notebook helper's own walk,
    /// `python/argus_snapshot.py`, skips `wait_wake` by name).
    pub walked: bool,
    /// The edge was added by a heuristic rather than seen in the kernel's events: counted,
    /// with boosted edges, as "added by heuristics" in `argus build --stats`.
    pub heuristic: bool,
}

/// Generates [`EdgeKind`] (variant `= code`, with each row's doc and attributes) and
/// [`EDGE_KINDS`] (each row's fields, plus `kind` and `code`) from one list of rows.
macro_rules! edge_kinds {
    ($(
        $(#[$attr:meta])*
        $variant:ident = $code:literal { $($field:ident: $value:expr),* $(,)? }
    ),* $(,)?) => {
        /// What relationship a causal edge stands for. Each kind's facts are its row of
        /// [`EDGE_KINDS`] ([`EdgeKind::info`]); the enum is generated from that table.
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize,
            Deserialize,
        )]
        pub enum EdgeKind {
            $( $(#[$attr])* $variant = $code, )*
        }

        /// The edge-kind table: one row per kind, in code order (see the
        /// [module doc](self) for who reads which fact).
        pub const EDGE_KINDS: &[EdgeKindInfo] = &[
            $( EdgeKindInfo { kind: EdgeKind::$variant, code: $code, $($field: $value),* }, )*
        ];

        impl EdgeKind {
            /// Every kind, in code order.
            pub const ALL: [EdgeKind; EDGE_KINDS.len()] = [$(EdgeKind::$variant),*];
        }
    };
}

edge_kinds! {
    /// A wake-up (`sched_waking`) that ended the destination's wait.
    #[default]
    Wakeup = 0 {
        name: "wakeup", beam_cost: 1.0, specificity: 1,
        ends_wait: true, starts_input: false, sending_stack: true, walked: true, heuristic: false,
    },
    /// Creation of a task (fork/clone → child's first segment).
    Fork = 1 {
        name: "fork", beam_cost: 1.2, specificity: 3,
        ends_wait: false, starts_input: true, sending_stack: true, walked: true, heuristic: false,
    },
    /// A timer armed in `src` fired in `dst` (an interrupt segment).
    Timer = 2 {
        name: "timer", beam_cost: 0.6, specificity: 3,
        ends_wait: false, starts_input: false, sending_stack: true, walked: true, heuristic: false,
    },
    /// The previous segment of the same thread (weak).
    ThreadOrder = 3 {
        name: "thread_order", beam_cost: 2.0, specificity: 0,
        ends_wait: false, starts_input: false, sending_stack: false, walked: true, heuristic: false,
    },
    /// Data sent by `src` (pipe, socket, eventfd) received by `dst`.
    Message = 4 {
        name: "message", beam_cost: 0.5, specificity: 3,
        ends_wait: true, starts_input: true, sending_stack: true, walked: true, heuristic: false,
    },
    /// Work queued by `src` run as `dst`.
    Queue = 5 {
        name: "queue", beam_cost: 0.6, specificity: 3,
        ends_wait: true, starts_input: true, sending_stack: true, walked: true, heuristic: false,
    },
    /// A signal sent by `src` delivered in `dst`.
    Signal = 6 {
        name: "signal", beam_cost: 0.8, specificity: 3,
        ends_wait: true, starts_input: true, sending_stack: true, walked: true, heuristic: false,
    },
    /// A child's exit (`src`) ending its parent's `wait4` (`dst`).
    Exit = 7 {
        name: "exit", beam_cost: 0.6, specificity: 3,
        ends_wait: true, starts_input: false, sending_stack: true, walked: true, heuristic: false,
    },
    /// A write to a watched data flag in `src` read in `dst`.
    Flag = 8 {
        name: "flag", beam_cost: 0.4, specificity: 3,
        ends_wait: true, starts_input: false, sending_stack: false, walked: true, heuristic: true,
    },
    /// An edge added by a user rule (`argus build --rules`).
    Rule = 9 {
        name: "rule", beam_cost: 0.5, specificity: 2,
        ends_wait: true, starts_input: false, sending_stack: true, walked: true, heuristic: true,
    },
    /// The weak pair of a wake-up (ComputeGraph line 2.a, `AddWeakEdge(wait, wake_up)`):
    /// from the segment that ended in the wait to the waker's segment — the waker may have
    /// been doing what the waiter asked for. Always weak.
    WaitWake = 10 {
        name: "wait_wake", beam_cost: 3.0, specificity: 3,
        ends_wait: false, starts_input: false, sending_stack: true, walked: false, heuristic: false,
    },
    /// A file lock (`flock`, `fcntl` record locks) on an inode: from the holder's lock
    /// operation (or the unlock, close or exit that released it) to the other process's
    /// attempt that failed or blocked on it, or that succeeded after failing.
    LockFile = 11 {
        name: "lock_file", beam_cost: 0.5, specificity: 3,
        ends_wait: true, starts_input: false, sending_stack: true, walked: true, heuristic: false,
    },
    /// The owner of a lock (a macOS turnstile's inheritor, a Linux PI futex's owner) as the
    /// kernel named it when `dst` blocked on the lock ([`EventKind::LockOwner`]): from the
    /// owner's segment at that moment to the segment that ended in the wait. It does not end
    /// the wait (the unlock's wake-up does); the walk follows it when nothing ended the wait.
    ///
    /// [`EventKind::LockOwner`]: crate::EventKind::LockOwner
    LockOwner = 12 {
        name: "lock_owner", beam_cost: 0.5, specificity: 3,
        ends_wait: false, starts_input: false, sending_stack: false, walked: true, heuristic: false,
    },
}

// The rows are in code order, codes 0, 1, 2, … (so `EDGE_KINDS[code]` is the code's row and
// codes are unique), and every code fits the packed edge's six bits.
const _: () = {
    let mut i = 0;
    while i < EDGE_KINDS.len() {
        assert!(
            EDGE_KINDS[i].code as usize == i,
            "EDGE_KINDS: the rows' codes must be 0, 1, 2, … in row order"
        );
        i += 1;
    }
    assert!(EDGE_KINDS.len() <= 64, "EDGE_KINDS: codes must fit 6 bits");
};

impl EdgeKind {
    /// This kind's row of [`EDGE_KINDS`].
    pub const fn info(self) -> &'static EdgeKindInfo {
        &EDGE_KINDS[self as usize]
    }

    /// Stable lowercase name ([`EdgeKindInfo::name`]).
    pub const fn name(&self) -> &'static str {
        self.info().name
    }

    /// The kind's code ([`EdgeKindInfo::code`]).
    pub const fn code(self) -> u8 {
        self.info().code
    }

    /// The kind with code `code`, if any.
    pub fn from_code(code: u8) -> Option<EdgeKind> {
        EDGE_KINDS.get(usize::from(code)).map(|i| i.kind)
    }

    /// The kind named `name` ([`EdgeKind::name`]), if any.
    pub fn from_name(name: &str) -> Option<EdgeKind> {
        EDGE_KINDS.iter().find(|i| i.name == name).map(|i| i.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_table_has_unique_codes_and_names_that_round_trip() {
        assert_eq!(EDGE_KINDS.len(), EdgeKind::ALL.len());
        let mut codes = HashSet::new();
        let mut names = HashSet::new();
        for (i, row) in EDGE_KINDS.iter().enumerate() {
            assert!(codes.insert(row.code), "code {} twice", row.code);
            assert!(names.insert(row.name), "name {} twice", row.name);
            assert_eq!(
                usize::from(row.code),
                i,
                "{}: rows are in code order",
                row.name
            );
            assert_eq!(EdgeKind::ALL[i], row.kind);
            assert_eq!(row.kind.info(), row);
            assert_eq!(row.kind.code(), row.code);
            assert_eq!(
                row.kind as usize,
                usize::from(row.code),
                "discriminant is the code"
            );
            assert_eq!(EdgeKind::from_code(row.code), Some(row.kind));
            assert_eq!(row.kind.name(), row.name);
            assert_eq!(EdgeKind::from_name(row.name), Some(row.kind));
            assert!(
                !row.name.is_empty()
                    && row
                        .name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}: names are lowercase snake_case",
                row.name
            );
            assert!(row.beam_cost > 0.0, "{}: a positive beam cost", row.name);
        }
        assert_eq!(EdgeKind::from_code(EDGE_KINDS.len() as u8), None);
        assert_eq!(EdgeKind::from_name("Wakeup"), None);
    }

    /// The codes and names given out so far (new kinds come after them): changing one
    /// breaks snapshots and exports.
    #[test]
    fn codes_and_names_are_the_stable_ones() {
        let table: Vec<(u8, &str)> = EDGE_KINDS.iter().map(|r| (r.code, r.name)).collect();
        assert_eq!(
            table[..12],
            [
                (0, "wakeup"),
                (1, "fork"),
                (2, "timer"),
                (3, "thread_order"),
                (4, "message"),
                (5, "queue"),
                (6, "signal"),
                (7, "exit"),
                (8, "flag"),
                (9, "rule"),
                (10, "wait_wake"),
                (11, "lock_file"),
            ]
        );
        assert_eq!(EdgeKind::default(), EdgeKind::Wakeup);
    }
}
