//! Records of the dataflow's output whose net count is not 1 (its invariant: every segment,
//! edge and spin once), noted while the collections stream into the snapshot and reported
//! by what made them: the edge kind and strength (which name the rule, docs/rules.md), the
//! segment kind, the spin class.
//!
//! Such a record is an internal error of a rule, not of the trace. The build keeps going: a
//! record made more than once is written once (a graph is a set, the copies add nothing),
//! one retracted more often than made is left out, and each is named in a warning and in
//! `errors.parquet` (docs/snapshot.md). Failing instead would lose the whole snapshot, and
//! every other table and record of it, to one rule's slip on one pattern.

use argus_schema::{syscalls, CausalEdge, ErrorRecord, Nanos, Segment, Spin, ThreadInfo, Tid};
use std::collections::{BTreeMap, HashMap};

/// Rows of `errors.parquet` per collection at most; past them, one row with the count.
const MAX_ROWS: usize = 1000;
/// Records shown per rule in the warning.
const SHOWN: usize = 3;

/// A record of one of the dataflow's collections, as an inconsistency names it.
pub(super) trait Record {
    /// What made it: the rule, in the words of the snapshot's columns.
    fn made_by(&self) -> String;
    /// The record, its threads named by `comm` (their last name in the trace).
    fn describe(&self, comm: &dyn Fn(Tid) -> String) -> String;
    /// When it happened.
    fn ts(&self) -> Nanos;
}

impl Record for CausalEdge {
    fn made_by(&self) -> String {
        format!("{} edges ({})", self.kind.name(), self.strength.name())
    }

    fn describe(&self, comm: &dyn Fn(Tid) -> String) -> String {
        format!(
            "{} {} → {} {} at {} s (source in {})",
            comm(self.src.tid()),
            self.src,
            comm(self.dst.tid()),
            self.dst,
            self.ts,
            syscalls::name(self.src_syscall)
        )
    }

    fn ts(&self) -> Nanos {
        self.ts
    }
}

impl Record for Segment {
    fn made_by(&self) -> String {
        format!("segments ({})", self.kind.name())
    }

    fn describe(&self, comm: &dyn Fn(Tid) -> String) -> String {
        format!(
            "{} {} from {} s to {} s",
            comm(self.tid),
            self.id,
            self.start_ns,
            self.end_ns
        )
    }

    fn ts(&self) -> Nanos {
        self.start_ns
    }
}

impl Record for Spin {
    fn made_by(&self) -> String {
        format!("spins ({})", self.class.name())
    }

    fn describe(&self, comm: &dyn Fn(Tid) -> String) -> String {
        format!(
            "{} {} to {} from {} s to {} s",
            comm(self.tid),
            self.segment,
            self.last,
            self.start_ns,
            self.end_ns
        )
    }

    fn ts(&self) -> Nanos {
        self.start_ns
    }
}

/// The records of one collection whose net count is not 1, found while streaming it.
pub(super) struct Inconsistent<T> {
    /// The first [`MAX_ROWS`] such records and their counts, in the collection's order.
    first: Vec<(T, i64)>,
    /// How many such records each rule made ([`Record::made_by`]).
    by_rule: BTreeMap<String, usize>,
}

/// What a build says about one collection's inconsistent records.
pub(super) struct Report {
    /// The warning, one line per rule after the first line.
    pub(super) warning: String,
    /// Rows for `errors.parquet`, one per record (at most [`MAX_ROWS`], then a count).
    pub(super) rows: Vec<ErrorRecord>,
}

impl<T> Default for Inconsistent<T> {
    fn default() -> Self {
        Inconsistent {
            first: Vec::new(),
            by_rule: BTreeMap::new(),
        }
    }
}

impl<T: Record + Clone> Inconsistent<T> {
    /// The records of `sorted` to write: each once, those with a net count below 1 left out;
    /// the others are noted here.
    pub(super) fn filter<'a>(
        &'a mut self,
        sorted: impl Iterator<Item = (T, i64)> + 'a,
    ) -> impl Iterator<Item = T> + 'a {
        sorted.filter_map(move |(record, count)| {
            if count != 1 {
                *self.by_rule.entry(record.made_by()).or_default() += 1;
                if self.first.len() < MAX_ROWS {
                    let kept = (count > 1).then(|| record.clone());
                    self.first.push((record, count));
                    return kept;
                }
            }
            (count >= 1).then_some(record)
        })
    }

    /// How many records were not made exactly once.
    pub(super) fn records(&self) -> usize {
        self.by_rule.values().sum()
    }

    /// The warning and the error rows for collection `name` (`edges`), threads named from
    /// `threads`; `None` when every record was made once.
    pub(super) fn report(&self, name: &str, threads: &[ThreadInfo]) -> Option<Report> {
        let total = self.records();
        if total == 0 {
            return None;
        }
        let names: HashMap<Tid, &str> = threads.iter().map(|t| (t.tid, t.comm.as_str())).collect();
        let comm = |t: Tid| names.get(&t).copied().unwrap_or("?").to_string();
        let what = |count: i64| {
            if count > 1 {
                format!("made {count} times, written once")
            } else {
                format!("retracted more often than made (net count {count}), left out")
            }
        };
        let source = format!("pipeline::{name}");
        let mut rows: Vec<ErrorRecord> = self
            .first
            .iter()
            .map(|(r, count)| ErrorRecord {
                source: source.clone(),
                offset: None,
                ts: Some(r.ts()),
                message: format!(
                    "internal inconsistency in {}: {}: {}",
                    r.made_by(),
                    r.describe(&comm),
                    what(*count)
                ),
            })
            .collect();
        if total > self.first.len() {
            rows.push(ErrorRecord {
                source: source.clone(),
                offset: None,
                ts: None,
                message: format!(
                    "internal inconsistency: {} more {name} not made exactly once",
                    total - self.first.len()
                ),
            });
        }
        let mut warning = format!(
            "argus: warning: internal error: the dataflow made {total} {name} other than \
             exactly once (please report it with the trace); each is written once, or left \
             out when retracted more often than made; the rest of the snapshot is complete, \
             and errors.parquet lists them"
        );
        for (rule, n) in &self.by_rule {
            warning.push_str(&format!("\nargus:   {rule}: {n}"));
            let shown: Vec<_> = self
                .first
                .iter()
                .filter(|(r, _)| r.made_by() == *rule)
                .take(SHOWN)
                .collect();
            for (r, count) in &shown {
                warning.push_str(&format!(
                    "\nargus:     {}: {}",
                    r.describe(&comm),
                    what(*count)
                ));
            }
            if *n > shown.len() {
                warning.push_str(&format!("\nargus:     ... {} more", n - shown.len()));
            }
        }
        Some(Report { warning, rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{EdgeKind, Pid, SegmentId, Strength};
    use argus_sinks::CollectionSink;

    fn edge(src: (i32, u32), dst: (i32, u32), kind: EdgeKind, strength: Strength) -> CausalEdge {
        CausalEdge {
            src: SegmentId::new(Tid(src.0), src.1),
            dst: SegmentId::new(Tid(dst.0), dst.1),
            kind,
            strength,
            ts: Nanos(2_044_080_420_343),
            src_syscall: 72,
        }
    }

    #[test]
    fn records_not_made_once_are_written_once_or_left_out_and_named_by_their_rule() {
        let twice = edge(
            (11348, 137),
            (11312, 301),
            EdgeKind::LockFile,
            Strength::Boosted,
        );
        let again = edge(
            (11348, 137),
            (11312, 302),
            EdgeKind::LockFile,
            Strength::Boosted,
        );
        let ok = edge(
            (11348, 137),
            (11312, 303),
            EdgeKind::LockFile,
            Strength::Boosted,
        );
        let gone = edge((7, 1), (8, 2), EdgeKind::Wakeup, Strength::Weak);
        let undone = edge((9, 1), (8, 3), EdgeKind::Wakeup, Strength::Weak);
        // As the collector receives them: counts are net, a record made and retracted is
        // not there at all.
        let mut sink = CollectionSink::new("edges");
        for (e, d) in [
            (&twice, 1),
            (&again, 1),
            (&ok, 1),
            (&undone, 1),
            (&twice, 1),
            (&gone, -1),
            (&again, 2),
            (&undone, -1),
        ] {
            sink.update(e.clone(), d);
        }
        let mut bad = Inconsistent::default();
        let kept: Vec<CausalEdge> = bad.filter(sink.into_sorted()).collect();
        let mut want = vec![twice, again, ok];
        want.sort();
        assert_eq!(kept, want, "each once, the retracted one left out");
        assert_eq!(bad.records(), 3);

        let threads: Vec<ThreadInfo> = [(11348, "python3"), (11312, "sqlite3")]
            .into_iter()
            .map(|(t, comm)| ThreadInfo {
                tid: Tid(t),
                pid: Pid(t),
                comm: comm.to_string(),
                process: comm.to_string(),
                parent: None,
                start_ns: None,
                exit_ns: None,
                kernel: false,
            })
            .collect();
        let report = bad.report("edges", &threads).expect("a report");
        let w = &report.warning;
        assert!(w.contains("made 3 edges other than exactly once"), "{w}");
        assert!(w.contains("lock_file edges (boosted): 2\n"), "{w}");
        assert!(
            w.contains(
                "python3 11348#137 → sqlite3 11312#301 at 2044.080420343 s (source in fcntl): \
                 made 2 times, written once"
            ),
            "{w}"
        );
        assert!(w.contains("wakeup edges (weak): 1\n"), "{w}");
        assert!(w.contains("(net count -1), left out"), "{w}");
        assert_eq!(report.rows.len(), 3);
        assert!(report.rows.iter().all(|r| r.source == "pipeline::edges"));
        assert!(
            report.rows.iter().any(|r| r.message
                == "internal inconsistency in lock_file edges (boosted): python3 11348#137 → \
                    sqlite3 11312#301 at 2044.080420343 s (source in fcntl): made 2 times, \
                    written once"),
            "{:#?}",
            report.rows
        );

        let mut clean: Inconsistent<CausalEdge> = Inconsistent::default();
        let ok = edge((1, 0), (2, 0), EdgeKind::Fork, Strength::Strong);
        assert_eq!(clean.filter([(ok, 1)].into_iter()).count(), 1);
        assert!(clean.report("edges", &threads).is_none());
    }
}
