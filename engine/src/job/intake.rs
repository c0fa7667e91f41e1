//! The job's intake, once per tick: the pages the tap holds now, what the catch-up reads back
//! from the ring, then the records released behind the watermark (never past a CPU still
//! being read back, nor past where the recorder has read every CPU: [`ReadFrontier`]), as
//! one batch of events. The merge is ingest's [`LiveMerge`]; what the
//! job adds is where its lost-events gaps go ([`live_merge`]).

use super::budget::MemoryBudget;
use super::catchup::CatchUp;
use super::running::{live_formats, Replayed};
use anyhow::{Context, Result};
use argus_ingest::format::FormatSet;
use argus_ingest::linux::{FilesTap, PerfTap, ReadFrontier, TappedPage};
use argus_ingest::live::LiveMerge;
use argus_ingest::tracedir::{FileLine, ProcEntry};
use argus_pipeline::gaps::GapSet;
use argus_schema::{Event, Nanos};
use crossbeam_channel::{Receiver, TryRecvError};
use std::path::Path;
use std::time::{Duration, Instant};

/// The job's live merge: decoding with `formats`, threads seeded from `procs`, numbering
/// from `seq`, records starting at `origin`. Every lost-events gap it finds goes into `gaps`
/// (the rules' set, shared by every dataflow generation) before any record after the gap is
/// released ([`LiveMerge::push_page`]), so every generation processes those records with
/// the gap known.
pub(crate) fn live_merge(
    formats: &FormatSet,
    procs: &[ProcEntry],
    seq: u64,
    gaps: &GapSet,
    origin: Nanos,
) -> Result<LiveMerge> {
    let mut merge = LiveMerge::new(formats, procs, seq).context("building the record converter")?;
    let gaps = gaps.clone();
    merge.track_gaps(move |from, to| gaps.add(from, to), origin);
    Ok(merge)
}

/// How far behind the clock the recorder's read frontier may hold the watermark: past that,
/// a reader is taken for stuck and its records for late (the 10-minute soak at 377k
/// events/s lagged 23 s at most, median 5.6 s, and lost nothing).
pub(crate) const MAX_READ_HOLD: Duration = Duration::from_secs(60);

/// How long the job reads back what it is behind once the recorder has stopped: a stop
/// (Ctrl-C, `systemctl stop`) should not wait minutes for a backlog the ring keeps anyway.
pub(crate) const STOP_READ_BACK: Duration = Duration::from_secs(10);

/// Tap, catch-up and merge, and whether the recorder has ended.
pub(crate) struct Intake {
    pub(crate) tap: Receiver<TappedPage>,
    /// How far the recorder has read each CPU into the tap.
    pub(crate) read: ReadFrontier,
    pub(crate) catchup: CatchUp,
    pub(crate) merge: LiveMerge,
    /// The recorder has ended (the tap is closed and empty) and the catch-up is done: the
    /// last tick released all.
    pub(crate) closed: bool,
    /// When the tap closed (the recorder ended), while the catch-up finishes.
    pub(crate) stopping: Option<Instant>,
    /// `--max-memory`: past it, a CPU far behind skips ahead (module docs of `catchup`) and
    /// the collector keeps a shorter window (`budget.rs`).
    pub(crate) budget: MemoryBudget,
    /// The fd identity as the recorder's tracker writes it, and the bound it is complete
    /// to (`argus_ingest::linux::FilesTap`); `None` when files are not tracked.
    pub(crate) files: Option<FilesTap>,
    /// The perf samples as the collector drains them, merged into the events
    /// (`LiveMerge::push_perf`); `None` without `--stacks`, `--watch`.
    pub(crate) perf: Option<PerfTap>,
}

/// How long a tick waits for the fd tracker to catch up to the read frontier; a tracker
/// slower than that holds the watermark at its last answer, for at most [`FILES_HOLD`].
const FILES_WAIT: Duration = Duration::from_millis(50);
/// How far behind the read frontier a slow fd tracker may hold the watermark. The tracker
/// runs at the user's priority: on a machine whose CPUs a load takes it can fall seconds
/// behind, and holding the watermark for it delayed hang reports by as much (a hook 6.9 s
/// after the hang was detectable, period 3 s, with a compile beside the test). Past the
/// bound, a descriptor's identity may come after the events that use it: those look it up
/// without it, as a build of the ring would not.
const FILES_HOLD: Duration = Duration::from_secs(1);

/// What the recorder hands the intake as it records.
pub(crate) struct Taps {
    /// Every page read.
    pub(crate) pages: Receiver<TappedPage>,
    /// How far each CPU has been read into `pages`.
    pub(crate) read: ReadFrontier,
    /// The fd identity as written (`None` when files are not tracked).
    pub(crate) files: Option<FilesTap>,
    /// Stack samples and watchpoint hits (`None` without `--stacks`, `--watch`).
    pub(crate) perf: Option<PerfTap>,
}

impl Intake {
    /// The intake of a job recording into `trace_dir` since `live_start`, its pages coming
    /// through `taps`: a merge decoding with the trace's formats, numbering after the
    /// `replayed` events of an earlier run (whose gaps it names in snapshots), adding the gaps
    /// it finds to `gaps` (the rules'), and a catch-up over the ring.
    pub(crate) fn open(
        trace_dir: &Path,
        taps: Taps,
        replayed: Option<&Replayed>,
        gaps: &GapSet,
        live_start: Nanos,
        budget: MemoryBudget,
    ) -> Result<Intake> {
        let Taps {
            pages: tap,
            read,
            files,
            perf,
        } = taps;
        let (formats, procs) = live_formats(trace_dir)?;
        let catchup = open_catchup(trace_dir)?;
        let mut merge = live_merge(
            &formats,
            &procs,
            replayed.map_or(0, |r| r.events),
            gaps,
            live_start,
        )?;
        if !read.cpus().is_empty() {
            merge.losses_from_reader();
        }
        if let Some(r) = replayed {
            // The previous run's gaps are in the rules already; these name them in snapshots.
            for &(cpu, from, to, events) in &r.gaps {
                merge.add_gap(
                    cpu,
                    Nanos(from),
                    Nanos(to),
                    events,
                    "the previous run's kernel lost events",
                );
            }
            // Nothing was recorded between the runs: no edge across that stretch either.
            if let Some(last) = r.last {
                gaps.add(last, live_start);
            }
        }
        Ok(Intake {
            tap,
            read,
            catchup,
            merge,
            closed: false,
            stopping: None,
            budget,
            files,
            perf,
        })
    }

    /// One tick: decodes what the tap holds now and what the catch-up reads back, and
    /// returns the watermark `now − lag` (held back as [`LiveMerge::watermark`],
    /// [`CatchUp::frontier`] and the recorder's [`ReadFrontier`] say; everything once the
    /// recorder has ended) with the events released up to it, and the fd identity lines
    /// the tracker wrote since the last tick (complete up to the watermark: the watermark
    /// waits for the tracker).
    pub(crate) fn tick(
        &mut self,
        now_ns: u64,
        lag: Duration,
    ) -> (Nanos, Vec<Event>, Vec<FileLine>) {
        let Intake {
            tap,
            read,
            catchup,
            merge,
            closed,
            stopping,
            budget,
            files,
            perf,
        } = self;
        // Loaded before the tap is read: every page stamped up to it is in the tap now (or
        // was dropped from it, and the catch-up holds the watermark for it).
        let read_up_to = read.min();
        // The fd tracker handles every notification for records up to it (the readers send
        // a page's before they move the frontier past it); its lines then are complete up
        // to the bound it answers.
        let mut tracker_ended = files.is_none();
        let files_bound = match (files.as_mut(), read_up_to) {
            (Some(f), Some(r)) => match f.sync(r.0.max(1), FILES_WAIT) {
                Some(bound) => Some(Nanos(bound)),
                // The tracker has ended: every line it wrote is in hand.
                None => {
                    tracker_ended = true;
                    None
                }
            },
            _ => None,
        };
        let lines: Vec<FileLine> = files
            .as_ref()
            .map_or_else(Vec::new, |f| f.lines().collect());
        // Samples drained so far, complete up to the start of the last drain.
        let mut perf_ended = true;
        if let Some(p) = perf.as_mut() {
            let items = p.take();
            merge.push_perf(p.streams(), items, p.frontier());
            perf_ended = p.frontier() == Some(u64::MAX);
        }
        // The recorder's own possible losses (a rewrite of its exclusion list), taken after
        // the frontier: each is a gap before any record after its start is released.
        for (from, to) in read.take_gaps() {
            for cpu in read.cpus() {
                merge.add_gap(
                    cpu,
                    from,
                    to,
                    None,
                    "the recorder rewrote its exclusion list (records of any task may be missing)",
                );
            }
        }
        // The kernel's losses, as the readers wrote them to the ring (their range starts
        // where the CPU had been read up to: `ReadFrontier::note_loss`).
        for (cpu, r) in read.take_losses() {
            merge.add_gap(
                cpu,
                Nanos(r.from_ns),
                Nanos(r.to_ns),
                r.events,
                &argus_ingest::live::lost_why(r.events),
            );
        }
        let mut sink = |cpu: u32, page: &[u8], lost: u64| merge.push_page(cpu, page, lost);
        // Only what is there now: on a saturated machine the tap refills as fast as it is
        // read, and draining it to empty held the tick (and every release) off for the
        // whole load, queueing millions of decoded records.
        for _ in 0..=tap.len() {
            match tap.try_recv() {
                Ok(p) => catchup.push(p, &mut sink),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    stopping.get_or_insert_with(Instant::now);
                    break;
                }
            }
        }
        if let Some(since) = *stopping {
            // The recorder has ended: every chunk is written. What the job is behind is read
            // back a batch per tick, for at most STOP_READ_BACK; the rest is left to the ring.
            if since.elapsed() >= STOP_READ_BACK {
                catchup.abandon();
            }
            catchup.poll_at_end(&mut sink);
            // The last lines of the fd tracker come when it ends, shortly after the readers.
            *closed = !catchup.behind()
                && ((tracker_ended && perf_ended) || since.elapsed() >= STOP_READ_BACK);
        } else {
            // The resident set is read only while a CPU is behind: only then can it matter.
            catchup.set_memory_pressure(catchup.behind() && budget.over());
            catchup.poll(&mut sink);
        }
        let clock = Nanos(now_ns.saturating_sub(lag.as_nanos() as u64));
        let watermark = if *closed {
            // The recording is over: everything queued (and the watchpoint hits after the last
            // record), and time ends with its last event,
            // as in a build of the ring (the clock at this tick is past the recording, and
            // a spin it let fire would be one no build of the ring shows).
            let released = merge.released().unwrap_or(Nanos(0));
            let last = merge.max_queued().max(merge.perf_last());
            last.map_or(released, |m| m.max(released))
        } else {
            // Not past a CPU still being read back from the ring either, nor past what the
            // recorder has read (a starved reader's records would be late).
            let frontier = catchup.frontier();
            let mut held = frontier.map_or(clock, |f| clock.min(Nanos(f)));
            if let Some(r) = read_up_to {
                // Zero: a reader has not reached the end of its buffer yet (the first
                // read does, within a poll interval of the start).
                if r.0 == 0 || clock.0.saturating_sub(r.0) <= MAX_READ_HOLD.as_nanos() as u64 {
                    held = held.min(r);
                }
            }
            if let (Some(b), Some(r)) = (files_bound, read_up_to) {
                let floor = r.0.saturating_sub(FILES_HOLD.as_nanos() as u64);
                held = held.min(Nanos(b.0.max(floor)));
            }
            // Not past the perf samples drained (a stack follows its event, a hit pairs
            // with its partner), unless the collector is stuck: its samples are late then.
            if let Some(b) = merge.perf_bound() {
                if clock.0.saturating_sub(b.0) <= MAX_READ_HOLD.as_nanos() as u64 {
                    held = held.min(b);
                }
            }
            merge
                .watermark(held, frontier.is_some() || !tap.is_empty())
                .max(merge.released().unwrap_or(Nanos(0)))
        };
        let mut events = Vec::new();
        merge.release(watermark, &mut events);
        (watermark, events, lines)
    }
}

/// The catch-up over the ring being recorded in `trace_dir` (its page size and chunk size
/// from `meta.json`).
fn open_catchup(trace_dir: &Path) -> Result<CatchUp> {
    let meta: serde_json::Value = std::fs::read(trace_dir.join("meta.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .with_context(|| format!("reading {}", trace_dir.join("meta.json").display()))?;
    let page_size = meta["page_size"].as_u64().unwrap_or(4096) as usize;
    let chunk_pages = meta["ring"]["chunk_pages"]
        .as_u64()
        .unwrap_or(u64::from(argus_ingest::linux::DEFAULT_CHUNK_PAGES));
    Ok(CatchUp::new(trace_dir, page_size, chunk_pages))
}
