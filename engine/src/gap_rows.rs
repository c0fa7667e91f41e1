//! Marks what a lost-events gap touched: the graph makes no edge across a gap (the rules'
//! `RulesConfig::gaps`), and each thread whose segment was running, or ended, while a CPU
//! lost events gets a row in `errors.parquet` naming the segment and the gap, so a reader
//! of the snapshot (and `argus debug`) knows which parts of the graph may miss waits,
//! wake-ups and edges.

use argus_schema::{ErrorRecord, Nanos, Segment, SegmentId, Tid};
use std::collections::BTreeMap;

/// At most this many rows: a long gap on a busy machine touches every thread; past the cap
/// one summary row says how many more there were.
pub(crate) const MAX_ROWS: usize = 1000;

/// One row per (thread, gap) for the segments a gap touched. `gaps` are
/// `(cpu, from ns, to ns, events lost if counted)`. A segment is touched when its running
/// part (start to the wait it ends with) overlaps the gap, or when it ended inside the gap
/// (its wake-up's origin may be among the lost records).
pub(crate) fn touched(
    segments: &[Segment],
    gaps: &[(u32, u64, u64, Option<u64>)],
) -> Vec<ErrorRecord> {
    let mut by_thread: BTreeMap<(usize, Tid), (SegmentId, Nanos, Nanos, usize)> = BTreeMap::new();
    for (gi, &(_, from, to, _)) in gaps.iter().enumerate() {
        let (from, to) = (Nanos(from.min(to)), Nanos(from.max(to)));
        for s in segments {
            let run_end = s.wait_start_ns.unwrap_or(s.end_ns);
            let running = s.start_ns <= to && run_end >= from;
            let woken = s.end_ns >= from && s.end_ns <= to && s.wait_start_ns.is_some();
            if running || woken {
                by_thread
                    .entry((gi, s.tid))
                    .and_modify(|e| e.3 += 1)
                    .or_insert((s.id, s.start_ns, s.end_ns, 1));
            }
        }
    }
    let total = by_thread.len();
    let mut rows: Vec<ErrorRecord> = by_thread
        .into_iter()
        .take(MAX_ROWS)
        .map(|((gi, tid), (id, start, end, n))| {
            let (cpu, from, to, lost) = gaps[gi];
            let who = match tid.irq_cpu() {
                Some(c) => format!("interrupts on cpu{}", c.0),
                None => format!("thread {}", tid.0),
            };
            ErrorRecord {
                source: "graph".to_string(),
                offset: None,
                ts: Some(start),
                message: format!(
                    "{who}: segment {} ({} to {} ns){} overlaps the lost-events gap on cpu{cpu} \
                     ({from} to {to} ns, {}): its waits, wake-ups and edges there may be missing",
                    id.0,
                    start.0,
                    end.0,
                    if n > 1 {
                        format!(" and {} more of its segments", n - 1)
                    } else {
                        String::new()
                    },
                    lost.map_or("count unknown".to_string(), |n| format!("{n} events"))
                ),
            }
        })
        .collect();
    if total > MAX_ROWS {
        rows.push(ErrorRecord {
            source: "graph".to_string(),
            offset: None,
            ts: None,
            message: format!(
                "{} more thread/gap pairs touched by lost events are not listed",
                total - MAX_ROWS
            ),
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{Pid, SegmentKind, StartCause};

    fn seg(tid: i32, n: u32, start: u64, wait: Option<u64>, end: u64) -> Segment {
        let mut s = Segment::starting(
            SegmentId::new(Tid(tid), n),
            Pid(tid),
            SegmentKind::Task,
            Nanos(start),
            StartCause::Woken,
        );
        s.wait_start_ns = wait.map(Nanos);
        s.end_ns = Nanos(end);
        s
    }

    #[test]
    fn running_or_woken_inside_a_gap_is_marked_blocked_across_it_is_not() {
        let segs = vec![
            seg(1, 0, 100, Some(150), 500), // running 100..150, gap 140..160: touched
            seg(2, 0, 0, Some(10), 1000),   // blocked across the gap: not touched
            seg(3, 0, 0, Some(10), 155),    // woken inside the gap: touched
            seg(3, 1, 155, None, 158),      // and running in it: same thread, one row
            seg(4, 0, 200, None, 300),      // after the gap
        ];
        let rows = touched(&segs, &[(1, 140, 160, Some(12))]);
        assert_eq!(rows.len(), 2, "{rows:#?}");
        assert!(
            rows[0].message.starts_with("thread 1: segment"),
            "{}",
            rows[0].message
        );
        assert!(rows[0].message.contains("cpu1 (140 to 160 ns, 12 events)"));
        assert!(rows[1].message.starts_with("thread 3:"));
        assert!(rows[1].message.contains("and 1 more of its segments"));
        assert!(touched(&segs, &[]).is_empty());
    }

    #[test]
    fn rows_are_capped_with_a_summary() {
        let segs: Vec<Segment> = (0..MAX_ROWS as i32 + 5)
            .map(|t| seg(t + 1, 0, 0, None, 100))
            .collect();
        let rows = touched(&segs, &[(0, 10, 20, None)]);
        assert_eq!(rows.len(), MAX_ROWS + 1);
        assert!(rows[MAX_ROWS].message.starts_with("5 more"));
    }
}
