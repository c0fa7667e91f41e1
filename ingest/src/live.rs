//! The live merge: per-CPU ring-buffer pages as a live recording reads them in, one
//! time-ordered event stream out, released behind a watermark. It sits beside the merge of a
//! finished trace ([`crate::merge::Merge`]) and shares its [`ThreadTable`] and the one
//! [`Converter`]; that merge pulls the next record of every CPU, a live one cannot know
//! whether a CPU has more to come, so this one releases by time. Sans-IO: the caller (`argus
//! start`) brings the pages (tapped from the recorder, or read back from the ring on disk)
//! and picks the watermark.
//!
//! ```text
//!  push_page(cpu, page) ─► parse_page ─► Converter (per CPU) ─► cpu's queue ──────┐
//!        └─ lost events before the page (kernel flag, or pages the tap dropped):   │
//!           gap (cpu's last record before, first after) ─► gap sink, at once       │
//!  watermark(clock) ─ held back by a CPU whose reader is behind ─► release(w) ─────┘
//!        records ts ≤ w, k-way by (ts, cpu) ─► ThreadTable (pid, comm) ─► Event, seq = n, n+1, …
//! ```
//!
//! **Watermark.** [`LiveMerge::release`] hands out every queued record with `ts ≤ w`, merged
//! by `(ts, cpu)`, numbered on from the `seq` given to [`LiveMerge::new`]; the watermark only
//! moves forward. A record that arrives at or below a watermark already released is **late**:
//! dropped, counted ([`LiveStats::late`]) and reported in an error row. The caller chooses
//! the watermark; [`LiveMerge::watermark`] holds its clock back to the last record of a CPU
//! whose last page was full (its reader had more to read), for at most [`MAX_HOLD`] unless the
//! caller itself is behind the recorder.
//!
//! **Lost-events gaps.** A page flagged with lost events (or one after pages the tap dropped)
//! is a gap on its CPU: from that CPU's last record before it (or the origin given to
//! [`LiveMerge::track_gaps`]) to the page's first record. [`LiveMerge::push_page`] hands it to
//! the gap sink before it queues any record of the page, and only [`LiveMerge::release`]
//! releases records. So a gap reaches the sink before any record after it is released: a
//! caller whose sink feeds what its rules consult (`argus start` adds to the rules' `GapSet`,
//! shared by every dataflow generation) processes every record after the gap with the gap
//! known. The test `a_gap_reaches_the_sink_before_any_record_after_it_is_released` holds it
//! to that.
//!
//! **Errors** are never fatal: a malformed page or record, a record that goes back in time on
//! its CPU, a late record or a gap is counted in [`LiveStats`] and becomes an
//! [`ErrorRecord`] (source `live/cpuN`, at most [`MAX_ERROR_ROWS`] between two
//! [`LiveMerge::take_errors`]).

use crate::convert::{Converter, ConverterError, Decoded};
use crate::format::{FormatSet, HeaderPage};
use crate::merge::ThreadTable;
use crate::page::{parse_page, Missed};
use crate::perffile::{PerfFileError, PerfItem, PerfMerge, StreamInfo, PAIR_WINDOW_NS};
use crate::tracedir::ProcEntry;
use argus_schema::{ErrorRecord, Event, Nanos, Pid, ThreadInfo, Tid};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// Error rows held between two [`LiveMerge::take_errors`] (later ones are only counted).
pub const MAX_ERROR_ROWS: usize = 1000;

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
        self.lost
            .values()
            .fold(self.late.saturating_add(self.bad), |t, n| {
                t.saturating_add(*n)
            })
    }
}

/// One CPU's stream.
struct CpuLive {
    conv: Converter,
    queue: VecDeque<Decoded>,
    last: Option<Nanos>,
    /// The tap's drop count of this CPU as of its last page
    /// ([`crate::linux::TappedPage::dropped_before`]).
    dropped: u64,
    /// Set when the last page tapped was full: the reader had more to read, so records
    /// after `last` may still come (the time is when that page arrived).
    behind: Option<(Nanos, Instant)>,
}

/// A page whose records fill it to within this many bytes counts as full.
pub const FULL_PAGE_SLACK: usize = 512;
/// How long a CPU whose reader is behind may hold the watermark back.
pub const MAX_HOLD: Duration = Duration::from_secs(5);
/// Gaps remembered for [`LiveMerge::gaps_since`] (the newest).
pub const MAX_GAP_ROWS: usize = 64;

/// A lost-events gap: `(cpu, from ns, to ns, events lost if counted)`, as `argus start`'s
/// snapshots take them to name the segments a gap touched.
pub type LostRange = (u32, u64, u64, Option<u64>);

/// Where the live merge puts the lost-events gaps it finds: called with `(from, to)`, `from ≤
/// to`, before any record after the gap is queued (see the module docs).
pub type GapSink = Box<dyn FnMut(Nanos, Nanos) + Send>;

/// `ev` numbered `seq` (which moves on), and counted.
/// What a gap's error row says the kernel lost (`events`, if counted).
pub fn lost_why(events: Option<u64>) -> String {
    match events {
        Some(n) => format!("the kernel lost {n} events"),
        None => "the kernel lost events (count unknown)".to_string(),
    }
}

fn numbered(mut ev: Event, seq: &mut u64, count: &mut u64) -> Event {
    ev.seq = *seq;
    *seq += 1;
    *count += 1;
    ev
}

/// Per-CPU pages in, one time-ordered event stream out, released behind a watermark (see the
/// module docs for the rule and what happens to late records).
pub struct LiveMerge {
    layout: HeaderPage,
    template: Converter,
    cpus: BTreeMap<u32, CpuLive>,
    table: ThreadTable,
    next_seq: u64,
    released: Option<Nanos>,
    /// Counters.
    pub stats: LiveStats,
    errors: Vec<ErrorRecord>,
    /// Where lost-events gaps go (`argus start`: into the rules of every dataflow
    /// generation); nowhere until [`LiveMerge::track_gaps`].
    gaps: GapSink,
    /// Where this run's records begin: a CPU whose first page already follows lost events
    /// lost them after this.
    origin: Nanos,
    /// The newest gaps, for [`LiveMerge::gaps_since`].
    ranges: VecDeque<LostRange>,
    /// The recorder's readers give the kernel's losses ([`LiveMerge::losses_from_reader`]):
    /// a page flagged with missed events makes no gap of its own.
    reader_losses: bool,
    /// Stacks and watchpoint hits merged in as a replay of the trace merges them
    /// ([`LiveMerge::push_perf`]), and the time before which every sample is in.
    perf: Option<(PerfMerge, Option<u64>)>,
}

impl LiveMerge {
    /// A merge decoding with `formats`, threads seeded from `procs`, numbering from `seq`.
    /// Fails when an event Argus maps lacks a field the converter needs.
    pub fn new(
        formats: &FormatSet,
        procs: &[ProcEntry],
        seq: u64,
    ) -> Result<LiveMerge, ConverterError> {
        let template = Converter::new(formats)?;
        Ok(LiveMerge {
            layout: formats.header_page,
            template,
            cpus: BTreeMap::new(),
            table: ThreadTable::from_proc(procs),
            next_seq: seq,
            released: None,
            stats: LiveStats::default(),
            errors: Vec::new(),
            gaps: Box::new(|_, _| {}),
            origin: Nanos(0),
            ranges: VecDeque::new(),
            reader_losses: false,
            perf: None,
        })
    }

    /// The kernel's losses come from the recorder's readers, which write them to the ring's
    /// `meta.json` too (`argus start` adds them with [`LiveMerge::add_gap`] from the read
    /// frontier): a page flagged with missed events is counted, but makes no gap of its own.
    /// The readers' range starts where the CPU had been read up to when that is later than
    /// its last record, which only they know; a gap of the merge's own started earlier, and
    /// drew no edge across records already released.
    pub fn losses_from_reader(&mut self) {
        self.reader_losses = true;
    }

    /// Takes in perf samples (`argus start --stacks`, `--watch`): `items` of `streams`,
    /// complete before `frontier` (`None`: nothing is known to be complete yet). From the
    /// first call on, each stack sample follows the event it was taken at and each
    /// watchpoint hit is a `FlagAccess` event, as in a replay of the trace
    /// ([`PerfMerge`]); release no further than [`LiveMerge::perf_bound`].
    pub fn push_perf(
        &mut self,
        streams: &[StreamInfo],
        items: Vec<Result<PerfItem, PerfFileError>>,
        frontier: Option<u64>,
    ) {
        let (perf, known) = self
            .perf
            .get_or_insert_with(|| (PerfMerge::default(), None));
        perf.add(streams, items, None);
        *known = frontier.or(*known);
        let errors: Vec<String> = perf.errors.drain(..).collect();
        for e in errors {
            self.error(0, None, e);
        }
    }

    /// How far events may be released with their perf samples all in: a sample is taken
    /// within [`PAIR_WINDOW_NS`] of its event. `None` without perf samples.
    pub fn perf_bound(&self) -> Option<Nanos> {
        let (_, known) = self.perf.as_ref()?;
        Some(Nanos(known.map_or(0, |f| f.saturating_sub(PAIR_WINDOW_NS))))
    }

    /// The time of the last watchpoint hit not yet released: at the end of a recording,
    /// hits after its last record follow it, as in a replay.
    pub fn perf_last(&self) -> Option<Nanos> {
        self.perf.as_ref()?.0.last_hit().map(Nanos)
    }

    /// Perf samples that found no place: `(stack samples with no event, late hits)`.
    pub fn perf_unplaced(&self) -> (u64, u64) {
        self.perf
            .as_ref()
            .map_or((0, 0), |(p, _)| (p.unmatched_stacks, p.late_hits))
    }

    /// Hands the gaps this merge finds to `sink` (`argus start` adds them to its rules'
    /// gaps, shared by every generation), and takes `origin` as the start of the records: a
    /// CPU's first page that already follows lost events lost them between `origin` and its
    /// first record.
    pub fn track_gaps(&mut self, sink: impl FnMut(Nanos, Nanos) + Send + 'static, origin: Nanos) {
        self.gaps = Box::new(sink);
        self.origin = origin;
    }

    /// Records a lost-events gap on `cpu` from `from` to `to`: into the gap sink at once (so
    /// no record after it is released before the sink has it), an error row, and the list
    /// [`LiveMerge::gaps_since`] returns. `why` says what was lost.
    pub fn add_gap(&mut self, cpu: u32, from: Nanos, to: Nanos, events: Option<u64>, why: &str) {
        let (from, to) = (from.min(to), from.max(to));
        (self.gaps)(from, to);
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

    fn error(&mut self, cpu: u32, ts: Option<Nanos>, message: String) {
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
    /// pages of that CPU so far ([`crate::linux::TappedPage::dropped_before`]).
    ///
    /// A page flagged with lost events (or one after pages the tap dropped) is a **gap**:
    /// from this CPU's last record before it (or the merge's origin) to the page's first
    /// record. It goes to the gap sink here, before any record of the page is queued, and
    /// nothing is released here: the sink has the gap before any record after it is released
    /// (`argus start`: every dataflow generation's rules have it before the first record after
    /// it).
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
            Missed::Count(n) => {
                let lost = self.stats.lost.entry(cpu).or_default();
                *lost = lost.saturating_add(n);
            }
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
        let kernel = if self.reader_losses {
            Missed::None
        } else {
            missed
        };
        if kernel != Missed::None || tap_dropped > 0 {
            let from = before.unwrap_or(self.origin);
            let to = first.unwrap_or(page_ts);
            self.stats.tap_dropped += tap_dropped;
            let mut why = Vec::new();
            let events = match kernel {
                Missed::Count(n) => {
                    why.push(lost_why(Some(n)));
                    Some(n)
                }
                Missed::Unknown => {
                    why.push(lost_why(None));
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
    fn enqueue(&mut self, cpu: u32, decoded: Vec<Decoded>) {
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
        if let Some((perf, Some(known))) = &mut self.perf {
            perf.settle(*known);
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
            if let Some(ev) = self.table.apply(d) {
                let (seq, count) = (&mut self.next_seq, &mut self.stats.events);
                match &mut self.perf {
                    Some((perf, _)) => {
                        perf.push(ev);
                        while let Some(ev) = perf.pop() {
                            out.push(numbered(ev, seq, count));
                        }
                    }
                    None => out.push(numbered(ev, seq, count)),
                }
            }
        }
        if let Some((perf, _)) = &mut self.perf {
            perf.flush_hits(watermark.0);
            perf.forget_stacks_before(watermark.0);
            while let Some(ev) = perf.pop() {
                out.push(numbered(ev, &mut self.next_seq, &mut self.stats.events));
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

    /// An exit the trace cannot show, of a thread hidden from tracing (`argus start`'s own
    /// short-lived threads: the recorder excludes a thread of its process once it sees it,
    /// so its first records are traced and its exit is not), at `ts`, which must be at or
    /// after every record released so far (the last watermark) and before the next: the
    /// event numbered in the stream's order, and the thread table notes the exit.
    pub fn untraced_exit(&mut self, tid: Tid, pid: Pid, ts: Nanos) -> Event {
        self.table.note_exit(tid.0, ts);
        let ev = Event {
            ts,
            seq: self.next_seq,
            cpu: argus_schema::Cpu(0),
            pid,
            tid,
            ctx: argus_schema::Context::Task,
            kind: argus_schema::EventKind::Exit,
        };
        self.next_seq += 1;
        ev
    }

    /// Notes that `tid` is a thread of process `pid` (its creation was not traced: the
    /// recorder had hidden its creator); a thread not known stays unknown.
    pub fn note_process(&mut self, tid: Tid, pid: Pid) {
        self.table.note_process(tid.0, pid.0);
    }

    /// Forgets the threads that exited before `cutoff` (the start of a continuous job's
    /// retained window); returns how many.
    pub fn forget_threads_exited_before(&mut self, cutoff: Nanos) -> usize {
        self.table.forget_exited_before(cutoff)
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
    use crate::format::EventFormat;
    use argus_schema::{Pid, Tid};
    use std::sync::{Arc, Mutex};

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

    /// An exit no record showed goes into the stream numbered between what was released
    /// and what comes next, the thread table notes it, and the thread leaves the table once
    /// its exit is before the cutoff given.
    #[test]
    fn an_untraced_exit_is_numbered_in_the_stream_and_its_thread_forgotten_later() {
        let mut m = merge_with(&[(0, &[10, 30, 50])]);
        let mut out = Vec::new();
        m.release(Nanos(30), &mut out);
        assert_eq!(out.last().map(|e| e.seq), Some(101));
        let exit = m.untraced_exit(Tid(7), Pid(7), Nanos(30));
        assert_eq!((exit.seq, exit.ts, exit.tid), (102, Nanos(30), Tid(7)));
        assert_eq!(exit.kind, argus_schema::EventKind::Exit);
        let seven = |m: &LiveMerge| m.threads().into_iter().find(|t| t.tid == Tid(7));
        assert_eq!(seven(&m).and_then(|t| t.exit_ns), Some(Nanos(30)));
        out.clear();
        m.release(Nanos(60), &mut out);
        assert_eq!(out.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![103]);
        let n = m.threads().len();
        assert_eq!(m.forget_threads_exited_before(Nanos(30)), 0);
        assert_eq!(m.forget_threads_exited_before(Nanos(31)), 1);
        assert_eq!(m.threads().len(), n - 1);
        assert!(seven(&m).is_none());
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

    /// Pages whose lost-events counts add up past `u64::MAX` (the same pages as replay's,
    /// where the `perf` fuzz target found the overflow): the counts saturate.
    // See: issue 18 (fuzzing), docs/fuzzing.md.
    #[test]
    fn gh_18_page_lost_counts_saturate() {
        let mut m = LiveMerge::new(&waking_formats(), &[], 0).unwrap();
        for ts in [1_000, 2_000] {
            m.push_page(0, &waking_page(ts, Some(u64::MAX), &[(ts, 7)]), 0);
        }
        m.push_page(0, &[0u8; 10], 0);
        assert_eq!(m.stats.lost[&0], u64::MAX);
        assert_eq!(m.stats.lost_total(), u64::MAX);
        assert_eq!(m.queued(), 2);
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

    /// `sched_waking` as this kernel lays it out, id 2.
    pub(crate) fn waking_formats() -> FormatSet {
        let text = "name: sched_waking\nID: 2\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n";
        let mut set = FormatSet::default();
        set.insert(EventFormat::parse("sched", text).unwrap());
        set
    }

    /// A 4 KiB page starting at `ts` of `sched_waking` records `(ts, waker)` (36 bytes each,
    /// `type_len` 9) waking thread 1; `missed`: flagged as following that many lost events.
    pub(crate) fn waking_page(ts: u64, missed: Option<u64>, records: &[(u64, i32)]) -> Vec<u8> {
        let payloads: Vec<(u64, [u8; 36])> = records
            .iter()
            .map(|&(t, tid)| {
                let mut p = [0u8; 36];
                p[0..2].copy_from_slice(&2u16.to_le_bytes());
                p[4..8].copy_from_slice(&tid.to_le_bytes());
                p[24..28].copy_from_slice(&1i32.to_le_bytes());
                (t, p)
            })
            .collect();
        let records: Vec<(u64, &[u8])> = payloads.iter().map(|(t, p)| (*t, &p[..])).collect();
        crate::page::encode_page(4096, ts, &records, missed).unwrap()
    }

    /// The invariant `argus start` builds on (module docs): the sink has a gap before any
    /// record after it is released.
    #[test]
    fn a_gap_reaches_the_sink_before_any_record_after_it_is_released() {
        let mut m = LiveMerge::new(&waking_formats(), &[], 0).unwrap();
        let seen: Arc<Mutex<Vec<(Nanos, Nanos)>>> = Arc::default();
        let sink = seen.clone();
        m.track_gaps(
            move |from, to| sink.lock().unwrap().push((from, to)),
            Nanos(1_000),
        );
        let gaps = || seen.lock().unwrap().clone();
        m.push_page(0, &waking_page(2_000, None, &[(2_000, 7), (2_100, 7)]), 0);
        let mut out = Vec::new();
        m.release(Nanos(2_100), &mut out);
        assert_eq!(out.len(), 2);
        assert!(gaps().is_empty());
        // cpu0 lost 3 events after its record at 2_100; the next page starts at 5_000.
        m.push_page(
            0,
            &waking_page(5_000, Some(3), &[(5_000, 7), (5_050, 8)]),
            0,
        );
        assert_eq!(
            gaps(),
            vec![(Nanos(2_100), Nanos(5_000))],
            "handed on while the page was decoded"
        );
        assert_eq!(
            (m.queued(), m.released()),
            (2, Some(Nanos(2_100))),
            "before any record of the page is released"
        );
        m.release(Nanos(6_000), &mut out);
        let times: Vec<u64> = out.iter().map(|e| e.ts.0).collect();
        assert_eq!(times, vec![2_000, 2_100, 5_000, 5_050]);
        // Pages the tap dropped are a gap too; a CPU's first page after them lost its
        // records since the origin.
        m.push_page(1, &waking_page(7_000, None, &[(7_000, 9)]), 2);
        assert_eq!(gaps().last(), Some(&(Nanos(1_000), Nanos(7_000))));
        assert_eq!(m.queued(), 1);
        assert_eq!(
            (m.stats.gaps, m.stats.tap_dropped, m.stats.lost.get(&0)),
            (2, 2, Some(&3))
        );
        let errs = m.take_errors();
        assert!(errs[0]
            .message
            .starts_with("the kernel lost 3 events from 2100 to 5000 ns"));
        assert_eq!(errs[1].source, "live/cpu1");
    }

    /// With the readers giving the kernel's losses, a page flagged with missed events is
    /// counted but makes no gap of its own (the readers' range may start later); pages the
    /// tap dropped still do.
    #[test]
    fn with_the_readers_losses_a_missed_page_makes_no_gap_of_its_own() {
        let mut m = LiveMerge::new(&waking_formats(), &[], 0).unwrap();
        let seen: Arc<Mutex<Vec<(Nanos, Nanos)>>> = Arc::default();
        let sink = seen.clone();
        m.track_gaps(
            move |from, to| sink.lock().unwrap().push((from, to)),
            Nanos(1_000),
        );
        m.losses_from_reader();
        m.push_page(0, &waking_page(2_000, None, &[(2_000, 7)]), 0);
        m.push_page(0, &waking_page(5_000, Some(3), &[(5_000, 7)]), 0);
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!((m.stats.gaps, m.stats.lost.get(&0)), (0, Some(&3)));
        m.add_gap(0, Nanos(4_000), Nanos(5_000), Some(3), &lost_why(Some(3)));
        assert_eq!(*seen.lock().unwrap(), vec![(Nanos(4_000), Nanos(5_000))]);
        m.push_page(0, &waking_page(7_000, Some(2), &[(7_000, 7)]), 1);
        assert_eq!(
            seen.lock().unwrap().last(),
            Some(&(Nanos(5_000), Nanos(7_000))),
            "the tap's own drop"
        );
        let errs = m.take_errors();
        assert!(errs[0]
            .message
            .starts_with("the kernel lost 3 events from 4000 to 5000 ns"));
        assert!(
            !errs[1].message.contains("kernel lost"),
            "{}",
            errs[1].message
        );
    }
}
