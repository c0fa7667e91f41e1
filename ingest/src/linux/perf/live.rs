//! The perf samples handed to a live consumer as the collector drains them (`argus start`),
//! with the time up to which they are complete.
//!
//! ```text
//!  collector thread (every drain, 20 ms at most apart)     consumer (each tick)
//!    t = now; drain every ring ── PerfBatch {new streams,  take(): parsed samples, the
//!                                  records, drained_at: t} ─► streams known, frontier = t
//! ```
//!
//! A sample is in its ring once its event has happened, so every sample stamped before a
//! drain began is in that drain's batch or an earlier one: the frontier is the start of the
//! last drain. When the collector ends (the recording stops) the tap closes and every
//! sample is in.

use crate::perffile::{parse_chunk, PerfFileError, PerfItem, StreamInfo};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::path::Path;

/// What one drain of the collector read.
#[derive(Debug)]
pub(crate) struct PerfBatch {
    /// Streams opened since the last batch (all of them in the first).
    pub(crate) streams: Vec<StreamInfo>,
    /// The records, each its stream id then the kernel's record, as in a perf chunk.
    pub(crate) records: Vec<u8>,
    /// `CLOCK_MONOTONIC` when the drain began.
    pub(crate) drained_at: u64,
}

/// The consumer's end ([`perf_tap`]).
#[derive(Debug)]
pub struct PerfTap {
    batches: Receiver<PerfBatch>,
    streams: Vec<StreamInfo>,
    frontier: Option<u64>,
    ended: bool,
}

/// The recorder's end: [`crate::linux::RecordConfig::perf_tap`].
#[derive(Clone, Debug)]
pub struct PerfTapEnds {
    pub(crate) batches: Sender<PerfBatch>,
}

impl PerfTapEnds {
    /// Whether both are the ends of one tap.
    pub fn same_tap(&self, other: &PerfTapEnds) -> bool {
        self.batches.same_channel(&other.batches)
    }
}

/// A tap: the consumer's end and the recorder's.
pub fn perf_tap() -> (PerfTap, PerfTapEnds) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (
        PerfTap {
            batches: rx,
            streams: Vec::new(),
            frontier: None,
            ended: false,
        },
        PerfTapEnds { batches: tx },
    )
}

impl PerfTap {
    /// Every sample drained since the last call (a malformed record is an error naming the
    /// tap and its offset in the batch).
    pub fn take(&mut self) -> Vec<Result<PerfItem, PerfFileError>> {
        let mut items = Vec::new();
        loop {
            match self.batches.try_recv() {
                Ok(b) => {
                    self.streams.extend(b.streams);
                    items.extend(parse_chunk(
                        Path::new("(the perf tap)"),
                        &b.records,
                        &self.streams,
                    ));
                    self.frontier = Some(b.drained_at);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.ended = true;
                    break;
                }
            }
        }
        items
    }

    /// The streams known so far.
    pub fn streams(&self) -> &[StreamInfo] {
        &self.streams
    }

    /// Every sample stamped before this is in what [`PerfTap::take`] returned (`None`
    /// before the first drain; `u64::MAX` once the collector has ended).
    pub fn frontier(&self) -> Option<u64> {
        if self.ended {
            Some(u64::MAX)
        } else {
            self.frontier
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::perffile::tests::{watch_hit, watch_stream};

    #[test]
    fn batches_give_their_samples_streams_and_frontier_and_the_end_gives_all() {
        let (mut tap, ends) = perf_tap();
        assert_eq!(tap.frontier(), None);
        let watch = watch_stream(1, "w");
        let rec = watch_hit(1, 500);
        let send = |streams: Vec<StreamInfo>, records: Vec<u8>, drained_at| {
            ends.batches
                .send(PerfBatch {
                    streams,
                    records,
                    drained_at,
                })
                .unwrap()
        };
        send(vec![watch], rec.clone(), 1_000);
        send(Vec::new(), rec, 2_000);
        let items = tap.take();
        assert_eq!(items.len(), 2);
        assert!(matches!(&items[0], Ok(PerfItem::Sample(s)) if s.time == 500 && s.tid == 7));
        assert_eq!(tap.streams().len(), 1);
        assert_eq!(tap.frontier(), Some(2_000));
        // A record cut short is an error, not a panic.
        send(Vec::new(), vec![1, 0, 0, 0, 9, 0], 3_000);
        assert!(tap.take()[0].is_err());
        drop(ends);
        assert!(tap.take().is_empty());
        assert_eq!(tap.frontier(), Some(u64::MAX));
    }
}
