//! The finisher's cache of encoded segments and edges ([`PartCache`]): the collector keeps
//! each table in one-second buckets (`window.rs`), each with a version, and a snapshot copies
//! the Parquet row groups of the buckets that did not change instead of decoding and
//! encoding them again.
//!
//! ```text
//!  parts (bucket, version, frozen)  oldest … newest, open
//!     ├─ a cached run whose buckets are all there, in a row, at their versions ─► copied
//!     ├─ settled buckets not in such a run ─► one run (≤ RUN_BUCKETS, ≤ RUN_UPDATES), cached
//!     └─ the buckets not settled and the open records ─► one part, never cached
//! ```
//!
//! **Runs, not buckets.** A part costs ~0.6 ms to encode whatever its rows (a column writer
//! and its zstd contexts per column, the footer, its metadata read back), so a run of settled
//! buckets is one part: on a quiet machine a second of segments is a few hundred rows, and a
//! part per bucket made the encoding the job's largest idle cost. A run that one of its
//! buckets left (an update moved its version, a cut dropped it, a late record filled a bucket
//! between two of its own) is encoded again as a whole at the next snapshot.

use super::window::Part;
use anyhow::{bail, Context, Result};
use argus_schema::Nanos;
use argus_sinks::{EncodedPart, Frozen, Pack, WriterOptions};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

/// Buckets a run holds at most: a run is encoded again as a whole when one of its buckets
/// changes.
const RUN_BUCKETS: usize = 16;

/// Updates a run holds at most (a busy machine's second can be a million).
const RUN_UPDATES: usize = 256 * 1024;

/// Encodes a table's rows into a part.
pub(crate) type Encode<T> =
    fn(&[T], &WriterOptions) -> std::result::Result<EncodedPart, argus_sinks::SinkError>;

/// Consecutive buckets encoded as one part, with the version of each.
struct Run {
    members: Vec<(u64, u64)>,
    part: Arc<EncodedPart>,
}

/// One table's encoded runs, by first bucket.
#[derive(Default)]
pub(crate) struct RunCache {
    runs: HashMap<u64, Run>,
}

/// The runs of the last snapshot's segments and edges, and those encoded ahead since.
#[derive(Default)]
pub(crate) struct PartCache {
    pub(crate) segments: RunCache,
    pub(crate) edges: RunCache,
}

/// What encoding one table's parts did.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartStats {
    pub(crate) reused_rows: u64,
    pub(crate) encoded_rows: u64,
}

/// One or more parts decoded (as one: [`Frozen::concat`]), checked (every record once: the
/// dataflow's invariant) and encoded.
fn encode_frozen<T: Ord + Clone + Debug + Pack>(
    name: &str,
    frozen: Frozen<T>,
    encode: Encode<T>,
) -> Result<Arc<EncodedPart>> {
    let (rows, check) = frozen.contents_checked();
    if let Err(e) = check {
        bail!("the dataflow's {name} are inconsistent: {e}");
    }
    let part =
        encode(&rows, &WriterOptions::default()).with_context(|| format!("encoding {name}"))?;
    Ok(Arc::new(part))
}

impl RunCache {
    /// The first bucket of every cached run still whole in `parts` (its buckets there, in a
    /// row, at their versions), with the position of that bucket in `parts`.
    fn whole<T>(&self, parts: &[Part<T>]) -> Vec<(u64, usize)> {
        let at: HashMap<u64, usize> = parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.bucket.map(|b| (b, i)))
            .collect();
        self.runs
            .iter()
            .filter_map(|(first, run)| {
                let &i = at.get(first)?;
                let whole = run.members.iter().enumerate().all(|(k, &(b, v))| {
                    parts
                        .get(i + k)
                        .is_some_and(|p| p.bucket == Some(b) && p.version == v)
                });
                whole.then_some((*first, i))
            })
            .collect()
    }

    /// Updates of `parts` that [`RunCache::encode`] would encode (not in a cached run that
    /// is still whole): an upper bound of the rows.
    pub(crate) fn stale_updates<T: Ord + Clone + Debug + Pack>(&self, parts: &[Part<T>]) -> usize {
        let mut covered = vec![false; parts.len()];
        for (first, i) in self.whole(parts) {
            covered[i..i + self.runs[&first].members.len()].fill(true);
        }
        parts
            .iter()
            .zip(covered)
            .filter(|(_, c)| !c)
            .map(|(p, _)| p.frozen.updates())
            .sum()
    }

    /// The table's parts (oldest first, the open records last) as encoded parts, in order:
    /// the cached runs still whole copied, the buckets settled by `settled` and not in one
    /// encoded in new runs, the others and the open records (the last seconds, which the
    /// next capture will have changed) encoded as one part. The cache keeps the runs of this
    /// capture.
    ///
    /// `ahead`: between snapshots, only the settled buckets are encoded (and nothing is
    /// returned but the stats).
    pub(crate) fn encode<T: Ord + Clone + Debug + Pack>(
        &mut self,
        name: &str,
        parts: Vec<Part<T>>,
        settled: Nanos,
        ahead: bool,
        encode: Encode<T>,
    ) -> Result<(Vec<Arc<EncodedPart>>, PartStats)> {
        // The runs still whole, by the position of their first bucket; the others go.
        let whole = self.whole(&parts);
        let mut valid: HashMap<usize, Run> = whole
            .into_iter()
            .filter_map(|(first, i)| Some((i, self.runs.remove(&first)?)))
            .collect();
        let mut out = Vec::new();
        let mut stats = PartStats::default();
        let mut kept: HashMap<u64, Run> = HashMap::new();
        let mut pending: Vec<Part<T>> = Vec::new();
        let mut tail: Vec<Part<T>> = Vec::new();
        let flush_tail = |tail: &mut Vec<Part<T>>,
                          out: &mut Vec<Arc<EncodedPart>>,
                          stats: &mut PartStats|
         -> Result<()> {
            if tail.is_empty() {
                return Ok(());
            }
            let frozen = Frozen::concat(name, tail.drain(..).map(|p| p.frozen));
            let part = encode_frozen(name, frozen, encode)?;
            stats.encoded_rows += part.rows();
            out.push(part);
            Ok(())
        };
        let flush = |pending: &mut Vec<Part<T>>,
                     out: &mut Vec<Arc<EncodedPart>>,
                     kept: &mut HashMap<u64, Run>,
                     stats: &mut PartStats|
         -> Result<()> {
            let Some(first) = pending.first().and_then(|p| p.bucket) else {
                return Ok(());
            };
            let members = pending
                .iter()
                .filter_map(|p| p.bucket.map(|b| (b, p.version)))
                .collect();
            let frozen = Frozen::concat(name, pending.drain(..).map(|p| p.frozen));
            let part = encode_frozen(name, frozen, encode)?;
            stats.encoded_rows += part.rows();
            if !ahead {
                out.push(part.clone());
            }
            kept.insert(first, Run { members, part });
            Ok(())
        };
        let mut parts = parts.into_iter().enumerate();
        while let Some((i, part)) = parts.next() {
            if let Some(run) = valid.remove(&i) {
                flush(&mut pending, &mut out, &mut kept, &mut stats)?;
                flush_tail(&mut tail, &mut out, &mut stats)?;
                if !ahead {
                    stats.reused_rows += run.part.rows();
                    out.push(run.part.clone());
                }
                // The run's other buckets are copied with it.
                for _ in 1..run.members.len() {
                    parts.next();
                }
                kept.insert(run.members[0].0, run);
                continue;
            }
            match part.bucket {
                Some(_) if part.ends_ns <= settled.0 => {
                    flush_tail(&mut tail, &mut out, &mut stats)?;
                    pending.push(part);
                    let updates: usize = pending.iter().map(|p| p.frozen.updates()).sum();
                    if pending.len() >= RUN_BUCKETS || updates >= RUN_UPDATES {
                        flush(&mut pending, &mut out, &mut kept, &mut stats)?;
                    }
                }
                _ if ahead => flush(&mut pending, &mut out, &mut kept, &mut stats)?,
                _ => {
                    flush(&mut pending, &mut out, &mut kept, &mut stats)?;
                    tail.push(part);
                }
            }
        }
        flush(&mut pending, &mut out, &mut kept, &mut stats)?;
        flush_tail(&mut tail, &mut out, &mut stats)?;
        // Every run still whole was met on the way (and kept); the others are gone.
        self.runs = kept;
        Ok((out, stats))
    }

    /// The first bucket of every cached run, sorted.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> Vec<Vec<u64>> {
        let mut runs: Vec<Vec<u64>> = self
            .runs
            .values()
            .map(|r| r.members.iter().map(|&(b, _)| b).collect())
            .collect();
        runs.sort();
        runs
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::job::window::WindowGraph;
    use argus_pipeline::dataflow::Update;
    use argus_schema::Segment;
    use argus_sinks::{SnapshotInfo, SnapshotWriter};
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    fn seg(tid: i32, end: Option<u64>) -> Segment {
        crate::job::window::tests::seg(tid, 0, 0, end)
    }

    fn rows(parts: &[Arc<EncodedPart>]) -> Vec<u64> {
        parts.iter().map(|p| p.rows()).collect()
    }

    fn encode(r: &[Segment], o: &WriterOptions) -> Result<EncodedPart, argus_sinks::SinkError> {
        EncodedPart::segments(r, o)
    }

    /// A snapshot's (or, `ahead`, an encoding ahead's) encoding of `g`'s segments.
    fn snap(
        cache: &mut RunCache,
        g: &mut WindowGraph,
        settled: u64,
        ahead: bool,
    ) -> Result<(Vec<Arc<EncodedPart>>, PartStats)> {
        cache.encode(
            "segments",
            g.segments.parts(),
            Nanos(settled),
            ahead,
            encode,
        )
    }

    fn stats(reused_rows: u64, encoded_rows: u64) -> PartStats {
        PartStats {
            reused_rows,
            encoded_rows,
        }
    }

    /// Settled buckets are encoded as one run and copied while it is whole; a run one of
    /// whose buckets changed or was forgotten is encoded again; the parts written hold the
    /// table whole either way.
    #[test]
    fn a_snapshot_copies_the_runs_whose_buckets_did_not_change() {
        let mut g = WindowGraph::new(Some(Duration::from_secs(4)));
        let mut cache = RunCache::default();
        let add =
            |g: &mut WindowGraph, s: &Segment, d| g.update(vec![(Update::Segment(s.clone()), d)]);
        let (a, b, c, open) = (
            seg(1, Some(SEC / 2)),
            seg(2, Some(SEC + 1)),
            seg(3, Some(2 * SEC + 1)),
            seg(4, None),
        );
        for s in [&a, &b, &c, &open] {
            add(&mut g, s, 1);
        }
        // Buckets 0–2 have settled by 3 s: one run, then the open records.
        let (first, st) = snap(&mut cache, &mut g, 3 * SEC, false).unwrap();
        assert_eq!((rows(&first), st), (vec![3, 1], stats(0, 4)));
        assert_eq!(cache.runs(), vec![vec![0, 1, 2]]);
        // A bucket that has not settled goes with the open records; the run is copied.
        let d = seg(5, Some(3 * SEC + 1));
        add(&mut g, &d, 1);
        let (second, st) = snap(&mut cache, &mut g, 3 * SEC, false).unwrap();
        assert_eq!((rows(&second), st), (vec![3, 2], stats(3, 2)));
        assert!(
            Arc::ptr_eq(&first[0], &second[0]),
            "the run copied as it was"
        );
        assert_eq!(cache.runs(), vec![vec![0, 1, 2]]);
        // b grows a new version: its run is encoded again, with bucket 3, settled now.
        let mut b2 = b.clone();
        b2.events += 1;
        add(&mut g, &b, -1);
        add(&mut g, &b2, 1);
        let (_, st) = snap(&mut cache, &mut g, 4 * SEC, false).unwrap();
        assert_eq!(st, stats(0, 5));
        assert_eq!(cache.runs(), vec![vec![0, 1, 2, 3]]);
        // Ahead of a snapshot: only the settled buckets, as a run; nothing else changes.
        let (e, f) = (seg(6, Some(4 * SEC + 1)), seg(7, Some(5 * SEC + 1)));
        add(&mut g, &e, 1);
        add(&mut g, &f, 1);
        let (none, st) = snap(&mut cache, &mut g, 6 * SEC, true).unwrap();
        assert!(none.is_empty());
        assert_eq!(st, stats(0, 2));
        assert_eq!(cache.runs(), vec![vec![0, 1, 2, 3], vec![4, 5]]);
        let (parts, st) = snap(&mut cache, &mut g, 6 * SEC, false).unwrap();
        assert_eq!(st, stats(6, 1), "only the open records encoded");
        // The parts written make the whole table.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("snap");
        let mut w = SnapshotWriter::new(&target).unwrap();
        for p in parts {
            w.append_segment_part(p).unwrap();
        }
        w.finish(SnapshotInfo::default()).unwrap();
        let mut got = argus_sinks::read_snapshot(&target).unwrap().segments;
        got.sort();
        let mut want = vec![a, b2, c, d, e, f, open];
        want.sort();
        assert_eq!(got, want);
        // A cut forgets bucket 0: the rest of its run is encoded again.
        assert!(g.forget_due(Nanos(5 * SEC + 1), u64::MAX).is_some());
        let (_, st) = snap(&mut cache, &mut g, 6 * SEC, false).unwrap();
        assert_eq!(st, stats(2, 4));
        assert_eq!(cache.runs(), vec![vec![1, 2, 3], vec![4, 5]]);
        // An inconsistent part is an error naming the table.
        add(&mut g, &seg(9, Some(SEC + 3)), 2);
        let err = snap(&mut cache, &mut g, 6 * SEC, false).unwrap_err();
        assert!(err.to_string().contains("segments"), "{err}");
    }

    /// A run holds at most `RUN_BUCKETS` buckets.
    #[test]
    fn a_run_is_cut_at_its_bucket_limit() {
        let mut g = WindowGraph::new(Some(Duration::from_secs(3600)));
        let n = RUN_BUCKETS as u64 + 3;
        for i in 0..n {
            g.update(vec![(
                Update::Segment(seg(i as i32 + 1, Some(i * SEC + 1))),
                1,
            )]);
        }
        let mut cache = RunCache::default();
        let (parts, st) = snap(&mut cache, &mut g, n * SEC, false).unwrap();
        assert_eq!(rows(&parts), vec![RUN_BUCKETS as u64, 3, 0]);
        assert_eq!(st, stats(0, n));
        assert_eq!(cache.stale_updates(&g.segments.parts()), 0);
    }
}
