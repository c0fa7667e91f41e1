//! The fd identity handed to a live consumer as the tracker writes it (`argus start`), with
//! the bound up to which it is complete.
//!
//! ```text
//!  consumer (each tick)                          FdTracker thread
//!    F = ReadFrontier::min()  (loaded first)
//!    sync(F) ── request F ──────────────────────► drains every notification the readers
//!                                                 sent (they send a page's before they move
//!                                                 the frontier past it), handles them, runs
//!                                                 the rescans that are due
//!    lines() ◄── every line written (FileLine) ── writes the lines (also to the files)
//!    bound   ◄── reply (F, bound) ─────────────── bound = F, or just before the earliest
//!                                                 rescan still waiting for its rate limit
//! ```
//!
//! Every line for a record stamped up to `bound` is in [`FilesTap::lines`] once
//! [`FilesTap::sync`] returns it: a consumer that releases events only up to it looks each
//! descriptor up as a build of the finished trace would. A tracker slower than the wait
//! leaves the bound where its last answer put it.

use crate::tracedir::FileLine;
use crossbeam_channel::{Receiver, Sender};
use std::time::{Duration, Instant};

/// The consumer's end ([`files_tap`]).
#[derive(Debug)]
pub struct FilesTap {
    lines: Receiver<FileLine>,
    requests: Sender<u64>,
    replies: Receiver<(u64, u64)>,
    /// The highest bound answered so far.
    bound: u64,
}

/// The recorder's end: [`crate::linux::RecordConfig::files_tap`].
#[derive(Clone, Debug)]
pub struct FilesTapEnds {
    pub(crate) lines: Sender<FileLine>,
    pub(crate) requests: Receiver<u64>,
    pub(crate) replies: Sender<(u64, u64)>,
}

impl FilesTapEnds {
    /// Whether both are the ends of one tap.
    pub fn same_tap(&self, other: &FilesTapEnds) -> bool {
        self.lines.same_channel(&other.lines)
    }
}

/// A tap: the consumer's end and the recorder's.
pub fn files_tap() -> (FilesTap, FilesTapEnds) {
    let (lines_tx, lines) = crossbeam_channel::unbounded();
    // One request at a time; a reply not waited for is still read by the next sync.
    let (requests, requests_rx) = crossbeam_channel::bounded(4);
    let (replies_tx, replies) = crossbeam_channel::unbounded();
    (
        FilesTap {
            lines,
            requests,
            replies,
            bound: 0,
        },
        FilesTapEnds {
            lines: lines_tx,
            requests: requests_rx,
            replies: replies_tx,
        },
    )
}

impl FilesTap {
    /// Asks the tracker to catch up to `upto` (a read frontier, loaded before) and waits at
    /// most `wait` for its answer; returns the bound up to which every line is in
    /// [`FilesTap::lines`] (0 before the first answer). `None` once the tracker has ended
    /// (every line it wrote is in `lines` then).
    pub fn sync(&mut self, upto: u64, wait: Duration) -> Option<u64> {
        // Full: the tracker is behind on earlier requests; their answers come below, and
        // the next sync asks again.
        let _ = self.requests.try_send(upto);
        let deadline = Instant::now() + wait;
        loop {
            match self.replies.recv_deadline(deadline) {
                Ok((asked, bound)) => {
                    self.bound = self.bound.max(bound);
                    if asked >= upto {
                        return Some(self.bound);
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => return Some(self.bound),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// The lines written since the last call.
    pub fn lines(&self) -> impl Iterator<Item = FileLine> + '_ {
        self.lines.try_iter()
    }
}
