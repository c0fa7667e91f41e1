//! Logical waits on the diagnosis side (ARCHITECTURE.md §6): consecutive timed-out waits of
//! one thread in the same syscall on the same object (segments' `wait_object`: a futex word,
//! a descriptor, a `poll` set) are one wait to the user, ended by the first wait on that
//! object that is not a timeout.
//!
//! ```text
//!  poll(fd 5, 200 ms) ─timeout─► poll(fd 5) ─timeout─► poll(fd 5) ─woken by the reply─►
//!  └───────────────────────── one logical wait (LongWait) ─────────────────────────┘
//! ```
//!
//! The pipeline makes the same grouping where spins are made (`spins.timeouts`); the walk
//! needs it for any thread it steps into, whatever the build threshold was, so it is
//! recomputed here from the segments.

use crate::graph::Graph;
use argus_schema::{syscalls, EndCause, Segment};

/// Whether `s` ended in a wait on a nameable object (not a sleep).
pub(crate) fn on_object(s: &Segment) -> bool {
    s.wait_start_ns.is_some() && s.wait_object.is_some() && !syscalls::is_sleep(s.wait_syscall)
}

/// Whether `s` ended in a timed-out wait on an object: a link of a logical wait.
pub(crate) fn timed_out_on_object(s: &Segment) -> bool {
    s.end == EndCause::Woken && on_object(s) && s.wait_timed_out()
}

/// Whether `b`, the segment right after `a` in its thread, waits on the same object.
pub(crate) fn same_wait(a: &Segment, b: &Segment) -> bool {
    a.end_ns == b.start_ns
        && on_object(b)
        && a.wait_syscall == b.wait_syscall
        && a.wait_object == b.wait_object
}

/// A logical wait: its first and last segments, and how many of its waits timed out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Logical<'g> {
    pub first: &'g Segment,
    pub last: &'g Segment,
    pub timeouts: u32,
}

/// The logical wait that starts with `first`, if `first` is a timed-out wait on an object
/// followed by at least one more wait on it: up to and including the first wait that did
/// not time out (or the last one, timed out or still open, when none did).
pub(crate) fn forward<'g>(g: &'g Graph, first: &'g Segment) -> Option<Logical<'g>> {
    if !timed_out_on_object(first) {
        return None;
    }
    let mut last = first;
    let mut timeouts = 1;
    while timed_out_on_object(last) {
        let Some(next) = g.next_in_thread(last.id).filter(|n| same_wait(last, n)) else {
            break;
        };
        last = next;
        if timed_out_on_object(next) {
            timeouts += 1;
        }
    }
    (last.id != first.id).then_some(Logical {
        first,
        last,
        timeouts,
    })
}

/// The logical wait that `last` ends: `last` itself and the timed-out waits on the same
/// object right before it.
pub(crate) fn backward<'g>(g: &'g Graph, last: &'g Segment) -> Logical<'g> {
    let mut first = last;
    let mut timeouts = u32::from(timed_out_on_object(last));
    if on_object(last) {
        while let Some(p) = g
            .prev_in_thread(first.id)
            .filter(|p| timed_out_on_object(p) && same_wait(p, first))
        {
            first = p;
            timeouts += 1;
        }
    }
    Logical {
        first,
        last,
        timeouts,
    }
}
