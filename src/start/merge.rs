//! The live merge: per-CPU pages tapped from the recorder (or read back from the ring,
//! [`super::catchup`]) decoded, queued per CPU and released in `(ts, cpu)` order behind the
//! watermark (the rule and its late records: the module docs of [`super`]); lost-events gaps
//! found on the way go to the rules' [`GapSet`] before any record after them.

use anyhow::{Context, Result};
use argus_ingest::convert::{Converter, Decoded};
use argus_ingest::format::{FormatSet, HeaderPage};
use argus_ingest::merge::ThreadTable;
use argus_ingest::page::{parse_page, Missed};
use argus_ingest::tracedir::ProcEntry;
use argus_pipeline::gaps::GapSet;
use argus_schema::{ErrorRecord, Event, Nanos, ThreadInfo};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};
/// Error rows kept per snapshot period (the rest are counted).
pub(crate) const MAX_ERROR_ROWS: usize = 1000;

/// What the live merge saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Pages decoded.
    pub pages: u64,
    /// Events released.
    pub events: u64,
    /// Events the kernel lost, per CPU (page commit flags).
    pub lost: BTreeMap<u32, u64>,
    /// Pages flagged as following lost events without a count.
    pub lost_unknown_pages: u64,
    /// Records that arrived after the watermark had passed them (dropped).
    pub late: u64,
    /// Malformed pages or records, and records going back in time (dropped).
    pub bad: u64,
    /// Pages the recorder read but could not hand to the job in time (the tap was full):
    /// their records are in the raw ring only.
    pub tap_dropped: u64,
    /// Lost-events gaps found (a page flagged with lost events, or pages the tap dropped):
    /// each was added to the rules' gaps before any record after it was released.
    pub gaps: u64,
}

impl LiveStats {
    /// Lost events of every kind: kernel, late and malformed.
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum::<u64>() + self.late + self.bad
    }
}

pub(crate) struct CpuLive {
    pub(crate) conv: Converter,
    pub(crate) queue: VecDeque<Decoded>,
    pub(crate) last: Option<Nanos>,
    /// The tap's drop count of this CPU as of its last page
    /// ([`argus_ingest::linux::TappedPage::dropped_before`]).
    pub(crate) dropped: u64,
    /// Set when the last page tapped was full: the reader had more to read, so records
    /// after `last` may still come (the time is when that page arrived).
    pub(crate) behind: Option<(Nanos, Instant)>,
}

/// A page whose records fill it to within this many bytes counts as full.
pub(crate) const FULL_PAGE_SLACK: usize = 512;
/// How long a CPU whose reader is behind may hold the watermark back.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(5);
/// Gaps remembered for the snapshots' `errors.parquet` rows (the newest).
pub(crate) const MAX_GAP_ROWS: usize = 64;

/// A lost-events gap: `(cpu, from ns, to ns, events lost if counted)`, as
/// [`crate::gaps::touched`] takes them.
pub type LostRange = (u32, u64, u64, Option<u64>);

/// Per-CPU pages in, one time-ordered event stream out, released behind a watermark (see the
/// module docs for the rule and what happens to late records).
pub struct LiveMerge {
    pub(crate) layout: HeaderPage,
    pub(crate) template: Converter,
    pub(crate) cpus: BTreeMap<u32, CpuLive>,
    pub(crate) table: ThreadTable,
    pub(crate) next_seq: u64,
    pub(crate) released: Option<Nanos>,
    /// Counters.
    pub stats: LiveStats,
    pub(crate) errors: Vec<ErrorRecord>,
    /// Where lost-events gaps go: shared with the rules of every dataflow generation.
    pub(crate) gaps: GapSet,
    /// Where this run's records begin: a CPU whose first page already follows lost events
    /// lost them after this.
    pub(crate) origin: Nanos,
    /// The newest gaps, for the snapshots' rows.
    pub(crate) ranges: VecDeque<LostRange>,
}

impl LiveMerge {
    /// A merge decoding with `formats`, threads seeded from `procs`, numbering from `seq`.
    pub fn new(formats: &FormatSet, procs: &[ProcEntry], seq: u64) -> Result<LiveMerge> {
        let template = Converter::new(formats).context("building the record converter")?;
        Ok(LiveMerge {
            layout: formats.header_page,
            template,
            cpus: BTreeMap::new(),
            table: ThreadTable::from_proc(procs),
            next_seq: seq,
            released: None,
            stats: LiveStats::default(),
            errors: Vec::new(),
            gaps: GapSet::new(),
            origin: Nanos(0),
            ranges: VecDeque::new(),
        })
    }

    /// Adds the gaps this merge finds to `gaps` (the job passes its rules' set, shared by
    /// every generation), and takes `origin` as the start of the records: a CPU's first page
    /// that already follows lost events lost them between `origin` and its first record.
    pub fn track_gaps(&mut self, gaps: GapSet, origin: Nanos) {
        self.gaps = gaps;
        self.origin = origin;
    }

    /// Records a lost-events gap on `cpu` from `from` to `to`: into the rules' gaps at once
    /// (so no record after it reaches a dataflow before the gap does), an error row, and
    /// the list the snapshots name touched segments from. `why` says what was lost.
    pub fn add_gap(&mut self, cpu: u32, from: Nanos, to: Nanos, events: Option<u64>, why: &str) {
        let (from, to) = (from.min(to), from.max(to));
        self.gaps.add(from, to);
        self.stats.gaps += 1;
        if self.ranges.len() >= MAX_GAP_ROWS {
            self.ranges.pop_front();
        }
        self.ranges.push_back((cpu, from.0, to.0, events));
        self.error(
            cpu,
            Some(from),
            format!(
                "{why} from {} to {} ns: no edge is made across this gap; threads running then may miss segments",
                from.0, to.0
            ),
        );
    }

    /// The gaps found (the newest [`MAX_GAP_ROWS`]) that end at or after `since`.
    pub fn gaps_since(&self, since: Nanos) -> Vec<LostRange> {
        self.ranges
            .iter()
            .filter(|r| r.2 >= since.0)
            .copied()
            .collect()
    }

    /// Decodes one tapped page, noting the pages the tap dropped before it as a gap.
    #[cfg(test)]
    pub fn push_tapped(&mut self, p: &argus_ingest::linux::TappedPage) {
        self.push_page(p.cpu, &p.data, p.dropped_before);
    }

    pub(crate) fn error(&mut self, cpu: u32, ts: Option<Nanos>, message: String) {
        if self.errors.len() < MAX_ERROR_ROWS {
            self.errors.push(ErrorRecord {
                source: format!("live/cpu{cpu}"),
                offset: None,
                ts,
                message,
            });
        }
    }

    /// Decodes one page read from `cpu`'s ring buffer, the tap having dropped `dropped`
    /// pages of that CPU so far ([`argus_ingest::linux::TappedPage::dropped_before`]).
    ///
    /// A page flagged with lost events (or one after pages the tap dropped) is a **gap**:
    /// from this CPU's last record before it (or the merge's origin) to the page's first
    /// record. It goes into the rules' [`GapSet`] here, before any record of the page is
    /// queued, so every dataflow generation has it before the first record after it.
    pub fn push_page(&mut self, cpu: u32, page: &[u8], dropped: u64) {
        self.stats.pages += 1;
        let recs = match parse_page(&self.layout, page) {
            Ok(r) => r,
            Err(e) => {
                self.stats.bad += 1;
                self.error(cpu, None, format!("malformed page: {e}"));
                return;
            }
        };
        match recs.header().missed {
            Missed::None => {}
            Missed::Unknown => self.stats.lost_unknown_pages += 1,
            Missed::Count(n) => *self.stats.lost.entry(cpu).or_default() += n,
        }
        let missed = recs.header().missed;
        let page_ts = Nanos(recs.header().ts);
        let template = &self.template;
        let state = self.cpus.entry(cpu).or_insert_with(|| CpuLive {
            conv: template.clone(),
            queue: VecDeque::new(),
            last: None,
            dropped: 0,
            behind: None,
        });
        let tap_dropped = dropped.saturating_sub(state.dropped);
        state.dropped = state.dropped.max(dropped);
        let before = state.last;
        let mut first = None;
        let full = recs.header().commit + FULL_PAGE_SLACK + 16 >= page.len();
        let mut decoded = Vec::new();
        let mut bad = Vec::new();
        for r in recs {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    bad.push((None, format!("malformed record: {e}")));
                    break;
                }
            };
            let ts = Nanos(r.ts);
            first.get_or_insert(ts);
            if state.last.is_some_and(|prev| ts < prev) {
                bad.push((Some(ts), "record goes back in time on its CPU".to_string()));
                continue;
            }
            state.last = Some(ts);
            match state.conv.convert(argus_schema::Cpu(cpu), &r) {
                Ok(Some(d)) => decoded.push(d),
                Ok(None) => {}
                Err(e) => bad.push((Some(ts), format!("malformed record: {e}"))),
            }
        }
        state.behind = match (full, state.last) {
            (true, Some(last)) => Some((last, Instant::now())),
            _ => None,
        };
        self.stats.bad += bad.len() as u64;
        for (ts, m) in bad {
            self.error(cpu, ts, m);
        }
        if missed != Missed::None || tap_dropped > 0 {
            let from = before.unwrap_or(self.origin);
            let to = first.unwrap_or(page_ts);
            self.stats.tap_dropped += tap_dropped;
            let mut why = Vec::new();
            let events = match missed {
                Missed::Count(n) => {
                    why.push(format!("the kernel lost {n} events"));
                    Some(n)
                }
                Missed::Unknown => {
                    why.push("the kernel lost events (count unknown)".to_string());
                    None
                }
                Missed::None => None,
            };
            if tap_dropped > 0 {
                why.push(format!(
                    "{tap_dropped} pages were read but not decoded in time (they are in the raw ring only)"
                ));
            }
            self.add_gap(cpu, from, to, events, &why.join(" and "));
        }
        self.enqueue(cpu, decoded);
    }

    /// The watermark to release at, given `clock` (now − lag): the clock, held back to the
    /// last record of any CPU whose last page was full (its reader is behind: more records
    /// of that CPU are on their way), for at most [`MAX_HOLD`]. A CPU whose last page was
    /// partial had been read to the end, and an idle CPU sends nothing: neither holds the
    /// watermark.
    ///
    /// `job_behind`: the job itself has not caught up with the recorder (pages wait in the
    /// tap, or are being read back from the ring): the CPU's next records are among them, so
    /// the hold does not expire (a saturating load kept the job more than 5 s behind, and
    /// the expired holds made two million records late).
    pub fn watermark(&self, clock: Nanos, job_behind: bool) -> Nanos {
        self.cpus
            .values()
            .filter_map(|c| c.behind)
            .filter(|(_, at)| job_behind || at.elapsed() < MAX_HOLD)
            .map(|(ts, _)| ts)
            .fold(clock, Nanos::min)
    }

    /// Queues decoded records of `cpu` (in time order) for release; records at or before the
    /// watermark already released are late: dropped and counted.
    pub(crate) fn enqueue(&mut self, cpu: u32, decoded: Vec<Decoded>) {
        let released = self.released;
        let mut late = 0u64;
        let mut first_late = None;
        if let Some(state) = self.cpus.get_mut(&cpu) {
            for d in decoded {
                if released.is_some_and(|w| d.ts <= w) {
                    late += 1;
                    first_late.get_or_insert(d.ts);
                } else {
                    state.queue.push_back(d);
                }
            }
        }
        if late > 0 {
            self.stats.late += late;
            self.error(
                cpu,
                first_late,
                format!("{late} records arrived after the watermark had passed them: dropped"),
            );
        }
    }

    /// Releases every queued record with `ts ≤ watermark`, merged by `(ts, cpu)`, as numbered
    /// events appended to `out`. The watermark only moves forward.
    pub fn release(&mut self, watermark: Nanos, out: &mut Vec<Event>) {
        if self.released.is_some_and(|w| watermark <= w) {
            return;
        }
        let mut heap: BinaryHeap<Reverse<(Nanos, u32)>> = BinaryHeap::new();
        for (&cpu, st) in &self.cpus {
            if let Some(d) = st.queue.front() {
                if d.ts <= watermark {
                    heap.push(Reverse((d.ts, cpu)));
                }
            }
        }
        while let Some(Reverse((_, cpu))) = heap.pop() {
            let Some(st) = self.cpus.get_mut(&cpu) else {
                continue;
            };
            let Some(d) = st.queue.pop_front() else {
                continue;
            };
            if let Some(next) = st.queue.front() {
                if next.ts <= watermark {
                    heap.push(Reverse((next.ts, cpu)));
                }
            }
            if let Some(mut ev) = self.table.apply(d) {
                ev.seq = self.next_seq;
                self.next_seq += 1;
                self.stats.events += 1;
                out.push(ev);
            }
        }
        self.released = Some(watermark);
    }

    /// The largest queued time (to release everything at the end).
    pub fn max_queued(&self) -> Option<Nanos> {
        self.cpus
            .values()
            .filter_map(|c| c.queue.back().map(|d| d.ts))
            .max()
    }

    /// Records decoded but not yet released.
    pub fn queued(&self) -> usize {
        self.cpus.values().map(|c| c.queue.len()).sum()
    }

    /// The watermark released so far.
    pub fn released(&self) -> Option<Nanos> {
        self.released
    }

    /// Every thread known.
    pub fn threads(&self) -> Vec<ThreadInfo> {
        self.table.threads()
    }

    /// The error rows collected since the last call.
    pub fn take_errors(&mut self) -> Vec<ErrorRecord> {
        std::mem::take(&mut self.errors)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use argus_schema::{Pid, Tid};

    /// One 4 KiB page of `print`-free raw records is hard to build by hand; the merge's
    /// ordering and watermark rules are tested on its release path with decoded records.
    fn decoded(ts: u64, cpu: u32, tid: i32) -> Decoded {
        Decoded {
            ts: Nanos(ts),
            cpu: argus_schema::Cpu(cpu),
            event: Some(Event {
                ts: Nanos(ts),
                seq: 0,
                cpu: argus_schema::Cpu(cpu),
                pid: Pid(tid),
                tid: Tid(tid),
                ctx: argus_schema::Context::Task,
                kind: argus_schema::EventKind::Waking { target: Tid(1) },
            }),
            comms: [None, None],
            fork_source: Default::default(),
            exec_old_tid: None,
        }
    }

    fn merge_with(queues: &[(u32, &[u64])]) -> LiveMerge {
        let mut m = LiveMerge::new(&FormatSet::default(), &[], 100).unwrap();
        for (cpu, ts) in queues {
            let st = m.cpus.entry(*cpu).or_insert_with(|| CpuLive {
                conv: m.template.clone(),
                queue: VecDeque::new(),
                last: None,
                dropped: 0,
                behind: None,
            });
            for &t in *ts {
                st.queue.push_back(decoded(t, *cpu, 7));
            }
        }
        m
    }

    #[test]
    fn release_merges_by_time_behind_the_watermark_and_an_idle_cpu_does_not_stall_it() {
        // cpu1 has nothing queued (idle): the watermark still moves.
        let mut m = merge_with(&[(0, &[10, 30, 50]), (1, &[]), (2, &[20, 30, 60])]);
        let mut out = Vec::new();
        m.release(Nanos(30), &mut out);
        let got: Vec<(u64, u32, u64)> = out.iter().map(|e| (e.ts.0, e.cpu.0, e.seq)).collect();
        assert_eq!(
            got,
            vec![(10, 0, 100), (20, 2, 101), (30, 0, 102), (30, 2, 103)]
        );
        assert_eq!(m.queued(), 2);
        out.clear();
        m.release(Nanos(20), &mut out);
        assert!(out.is_empty(), "the watermark never goes back");
        m.release(Nanos(1_000), &mut out);
        assert_eq!(
            out.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![104, 105]
        );
        assert_eq!(m.released(), Some(Nanos(1_000)));
    }

    #[test]
    fn a_record_behind_the_released_watermark_is_late_and_dropped() {
        let mut m = merge_with(&[(0, &[10])]);
        let mut out = Vec::new();
        m.release(Nanos(50), &mut out);
        assert_eq!(out.len(), 1);
        m.enqueue(
            0,
            vec![decoded(40, 0, 7), decoded(50, 0, 7), decoded(60, 0, 7)],
        );
        assert_eq!(m.stats.late, 2);
        assert_eq!(m.queued(), 1);
        let errs = m.take_errors();
        assert_eq!(errs.len(), 1);
        assert!(errs[0]
            .message
            .contains("2 records arrived after the watermark"));
        assert_eq!(errs[0].ts, Some(Nanos(40)));
        assert_eq!(m.stats.lost_total(), 2);
    }

    #[test]
    fn a_malformed_page_is_counted_not_fatal() {
        let mut m = LiveMerge::new(&FormatSet::default(), &[], 0).unwrap();
        m.push_page(3, &[0u8; 10], 0);
        assert_eq!((m.stats.pages, m.stats.bad), (1, 1));
        assert_eq!(m.take_errors()[0].source, "live/cpu3");
        // An empty page (commit 0) decodes to nothing.
        m.push_page(3, &[0u8; 4096], 0);
        assert_eq!((m.stats.pages, m.stats.bad, m.queued()), (2, 1, 0));
    }

    #[test]
    fn a_cpu_whose_reader_is_behind_holds_the_watermark_for_a_while() {
        let mut m = merge_with(&[(0, &[10]), (1, &[20])]);
        assert_eq!(m.watermark(Nanos(100), false), Nanos(100), "nobody behind");
        if let Some(c) = m.cpus.get_mut(&1) {
            c.behind = Some((Nanos(20), Instant::now()));
        }
        assert_eq!(m.watermark(Nanos(100), false), Nanos(20));
        if let Some(c) = m.cpus.get_mut(&1) {
            c.behind = Some((Nanos(20), Instant::now() - MAX_HOLD));
        }
        assert_eq!(m.watermark(Nanos(100), false), Nanos(100), "not for ever");
        assert_eq!(
            m.watermark(Nanos(100), true),
            Nanos(20),
            "for as long as the job itself is behind the recorder"
        );
    }
}
