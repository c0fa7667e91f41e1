//! The job's main loop, one turn per tick or per wake-up: the intake's batch into the
//! dataflow and the snapshot thread, the periodic snapshot (or its skip while the previous
//! one is still being written), an early snapshot when a watched hang appears or grows, the
//! memory budget's window, and the status line.
//!
//! **Ticks.** One epoch per tick: every [`TICK`] (200 ms) while events come, and on a quiet
//! machine (fewer than [`QUIET_RATE`] events a second, nothing waiting to be decoded) twice
//! as far apart each time, up to [`QUIET_TICK`]. Every epoch costs each stage a fixed amount
//! whatever it holds (the dataflow's and the live graph's operators are scheduled, their
//! arrangements compacted, the spins published): at 200 ms on an idle machine that was most
//! of the job's CPU. A busy tick goes back to 200 ms at once, and a live query on a quiet
//! machine asks for a tick at once (`serve.rs`, `Served::freshen`), so what it reads is as
//! fresh as on a busy one; only a hang's hook and early snapshot wait up to [`QUIET_TICK`].
//!
//! **Snapshots** are due by the clock, named by the epoch they are taken at: every
//! `--snapshot-every` while the machine is busy, every `quiet_snapshot_every` on a quiet one
//! (60 s when the flag is not given), and early ones at most one per half of that period
//! (of `--snapshot-every` with a hook: a hook's user waits for its snapshot).

use super::budget::{Change, Retention};
use super::flow::SnapRequest;
use super::intake::Intake;
use super::parts::PartCache;
use super::reload::LiveRules;
use super::running::Job;
use super::snapshots::{
    snapshot_name, EarlySnapshots, Finisher, SnapCmd, SnapContext, SnapshotThread,
};
use super::watch::{HangTracker, OwnExits, Watch};
use super::{monotonic_ns, StartConfig, TICK};

/// The longest a tick waits on a quiet machine (module docs): a hang's hook waits up to
/// this much longer than on a busy one.
pub(crate) const QUIET_TICK: Duration = Duration::from_secs(4);

/// How often the resident set is compared with the memory budget.
const MEMORY_CHECK: Duration = Duration::from_secs(1);
const GIB: f64 = (1u64 << 30) as f64;

/// Events a second below which the machine counts as quiet (an idle desktop makes a few
/// hundred to a few thousand; a build, tens of thousands and more).
const QUIET_RATE: f64 = 5_000.0;
use crate::progress::RateLimit;
use anyhow::Result;
use argus_ingest::linux::OwnThread;
use argus_ingest::live::MAX_ERROR_ROWS;
use argus_schema::{ErrorRecord, Nanos, Pid, Tid};
use crossbeam_channel::{select, Receiver, Sender};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Ticks of events the snapshot thread may have to write before the job waits for it.
const SNAPSHOT_BACKLOG: usize = 16;

/// A step of the main loop that took longer than this is logged: while it runs nothing is
/// decoded and the tap fills.
const STALL: Duration = Duration::from_millis(500);

/// Logs `step` when it took longer than [`STALL`] since `since`.
fn stalled(step: &str, since: Instant) {
    let took = since.elapsed();
    if took >= STALL {
        tracing::warn!(
            "the job's main loop stalled {:.2} s in {step}",
            took.as_secs_f64()
        );
    }
}

/// Where the snapshots go: the snapshot thread's queue, what every request carries, and the
/// early-snapshot rule.
pub(crate) struct Snapshots {
    pub(crate) tx: Sender<SnapCmd>,
    pub(crate) ctx: SnapContext,
    pub(crate) early: EarlySnapshots,
}

impl Snapshots {
    /// Starts the snapshot thread (its first staging directory opened) for a job recording
    /// into `trace_dir` since `live_start`; it wakes the main loop through `notify` once a
    /// snapshot is installed.
    pub(crate) fn start(
        cfg: &StartConfig,
        trace_dir: &Path,
        live_start: Nanos,
        notify: Sender<()>,
        collector: Sender<SnapRequest>,
        quiet: bool,
    ) -> Result<(Snapshots, JoinHandle<Result<u64>>)> {
        let (tx, rx) = crossbeam_channel::bounded::<SnapCmd>(SNAPSHOT_BACKLOG);
        let watch = Watch {
            pids: cfg.watch_pids.clone(),
            comms: cfg.watch_comms.clone(),
            since: live_start,
        };
        let tracker = Arc::new(std::sync::Mutex::new(HangTracker::default()));
        let installed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut thread = SnapshotThread {
            dir: cfg.dir.clone(),
            writer: None,
            staged: 0,
        };
        let finisher = Finisher {
            dir: cfg.dir.clone(),
            keep: cfg.keep,
            hook: cfg.on_hang.clone(),
            watch: watch.clone(),
            tracker: tracker.clone(),
            delay: cfg.snapshot_delay,
            written: 0,
            installed: installed.clone(),
            notify,
            gaps: cfg.dataflow.rules.gaps.clone(),
            parts: PartCache::default(),
            collector: Some(collector),
        };
        thread.open()?;
        let handle = std::thread::Builder::new()
            .name("argus-snapshot".into())
            .spawn(move || thread.run(rx, finisher))?;
        let early = EarlySnapshots {
            watch,
            tracker,
            installed,
            requested: 0,
            last_epoch: None,
            last_at: None,
            min_gap: cfg.snapshot_every / 2,
            new_only: cfg.on_hang.is_none(),
            unwatched: std::collections::HashSet::new(),
        };
        let ctx = SnapContext {
            sources: vec![trace_dir.to_path_buf()],
            // The job's clocks are the recording's (one machine): its offset now.
            wall_offset_ns: argus_ingest::linux::wall_offset_ns(),
            live_start,
            threshold_ns: cfg.dataflow.rules.spin_threshold_ns,
            workers: cfg.dataflow.workers as u32,
            quiet,
        };
        Ok((Snapshots { tx, ctx, early }, handle))
    }
}

/// The main loop's clocks and counters.
pub(crate) struct Cycle {
    snapshot_every: Duration,
    /// Between periodic snapshots while the machine is quiet.
    quiet_snapshot_every: Duration,
    /// When the next periodic snapshot is due.
    next_snapshot: Instant,
    next_tick: Instant,
    /// Between this tick and the next (module docs).
    every: Duration,
    status: RateLimit,
    status_events: u64,
    /// Error rows of the period, for the next snapshot.
    errors: Vec<ErrorRecord>,
    /// Periodic snapshots skipped because the previous one was still being written.
    skipped: u64,
    /// The exits of the job's own threads, added to the stream.
    own_exits: OwnExits,
    /// The window kept within the memory budget (`budget.rs`), checked every second.
    retention: Retention,
    next_memory_check: Instant,
    quiet: bool,
}

impl Cycle {
    /// A cycle snapshotting every `snapshot_every`, `quiet_snapshot_every` on a quiet machine.
    pub(crate) fn new(
        snapshot_every: Duration,
        quiet_snapshot_every: Duration,
        status_every: Duration,
        own_threads: Receiver<OwnThread>,
        retention: Retention,
        quiet: bool,
    ) -> Cycle {
        let now = Instant::now();
        Cycle {
            snapshot_every,
            quiet_snapshot_every: quiet_snapshot_every.max(snapshot_every),
            next_snapshot: now + snapshot_every,
            next_tick: now + TICK,
            every: TICK,
            status: RateLimit::new(status_every),
            status_events: 0,
            errors: Vec::new(),
            skipped: 0,
            own_exits: OwnExits::new(own_threads),
            retention,
            next_memory_check: now,
            quiet,
        }
    }

    /// Turns until the recorder has ended and the last snapshot is requested; `woken` wakes
    /// it between ticks to check for a hang worth an early snapshot, `asked` (a live query
    /// on a quiet machine) for a tick at once.
    pub(crate) fn run(
        &mut self,
        job: &mut Job<'_>,
        intake: &mut Intake,
        snaps: &mut Snapshots,
        woken: &Receiver<()>,
        asked: &Receiver<()>,
    ) -> Result<()> {
        while !intake.closed {
            // Sleep until the tick (or until woken to check for a hang), then decode what
            // the tap holds in one go. Waiting on the tap instead woke the job for every
            // page: ~10k context switches a second under the saturating load, each taking
            // a CPU from the load (the job's CPU time is small; its wake-ups are not).
            let now = Instant::now();
            let tick = if now < self.next_tick {
                select! {
                    recv(woken) -> _ => false,
                    recv(asked) -> _ => true,
                    default(self.next_tick - now) => true,
                }
            } else {
                true
            };
            if tick {
                self.tick(job, intake, snaps)?;
            }
            let t = Instant::now();
            self.early(job, intake, snaps)?;
            stalled("the early-snapshot check", t);
            if tick {
                self.status_line(job, intake);
            }
        }
        Ok(())
    }

    /// One tick: the batch into the job, and the periodic snapshot when it is due.
    fn tick(
        &mut self,
        job: &mut Job<'_>,
        intake: &mut Intake,
        snaps: &mut Snapshots,
    ) -> Result<()> {
        let began = Instant::now();
        if LiveRules::hangup() {
            job.reread_rules(self.quiet);
        }
        // Whatever is already tapped goes in before the watermark moves, and what the tap
        // dropped is read back from the ring.
        let t = Instant::now();
        let tick_ns = monotonic_ns();
        let (watermark, events, files) = intake.tick(tick_ns, job.cfg.lag);
        job.learn_files(files)?;
        stalled("the intake (decoding and merging the tapped pages)", t);
        job.catching_up.store(
            intake.catchup.behind(),
            std::sync::atomic::Ordering::Relaxed,
        );
        // The query server's tables, as a snapshot requested now would hold them.
        let t = Instant::now();
        let oldest = job.window_start(Nanos(0));
        job.served.set_tables(
            job.epoch,
            intake.merge.threads(),
            intake
                .merge
                .gaps_since(oldest)
                .iter()
                .map(|&(_, from, to, _)| (Nanos(from), Nanos(to)))
                .collect(),
        );
        stalled("publishing the thread table to the query server", t);
        self.status_events += events.len() as u64;
        let rate = events.len() as f64 / self.every.as_secs_f64();
        self.every = if rate < QUIET_RATE && intake.tap.is_empty() && !intake.catchup.behind() {
            (self.every * 2).min(QUIET_TICK)
        } else {
            TICK
        };
        self.next_tick = began.max(self.next_tick) + self.every;
        if self.next_tick < began || self.next_tick > began + self.every {
            self.next_tick = began + self.every;
        }
        job.served
            .quiet
            .store(self.every > TICK, std::sync::atomic::Ordering::Relaxed);
        self.errors.extend(intake.merge.take_errors());
        self.errors.truncate(MAX_ERROR_ROWS);
        let t = Instant::now();
        if !events.is_empty() && snaps.tx.send(SnapCmd::Events(events.clone())).is_err() {
            anyhow::bail!("the snapshot thread stopped");
        }
        stalled("handing the tick's events to the snapshot thread", t);
        // The exits of the job's own threads, which the trace does not show (`OwnExits`);
        // then the threads that exited before the retained window leave the thread table.
        let mut events = events;
        // Threads the recorder hid are this process's, whatever their first records said
        // (a thread created by a hidden one looks like a process of its own).
        let me = Pid(std::process::id() as i32);
        let own = self.own_exits.due(watermark, intake.closed);
        for &tid in &own.alive {
            intake.merge.note_process(Tid(tid), me);
        }
        for tid in own.exited {
            intake.merge.note_process(Tid(tid), me);
            events.push(intake.merge.untraced_exit(Tid(tid), me, watermark));
        }
        intake
            .merge
            .forget_threads_exited_before(job.window_start(Nanos(0)));
        // The markers and data-flag accesses a live diagnosis reads, as a snapshot's events
        // table holds them.
        job.served.push_app(&events, job.window_start(Nanos(0)));
        let t = Instant::now();
        job.send(events, watermark)?;
        stalled("handing the tick's events to the dataflow", t);
        self.memory(job, intake, watermark);
        // With the collector's `epoch done` line, where a hang's report time goes
        // (`benches/soak.rs`: watermark release, dataflow, follower).
        tracing::debug!(
            target: "argus::epochs",
            watermark = watermark.0,
            tick_ns,
            sent_ns = monotonic_ns(),
            "epoch sent"
        );
        // On a quiet machine periodic snapshots come `quiet_snapshot_every` apart; once it is
        // busy again, `snapshot_every` from now at the latest.
        let period = if self.every > TICK {
            self.quiet_snapshot_every
        } else {
            self.snapshot_every
        };
        if self.next_snapshot > began + period {
            self.next_snapshot = began + period;
        }
        // Early snapshots at most one per half period; with a hook, one per half of
        // `snapshot_every` whatever the load (a quiet machine's waiting shells and daemons
        // make new "hangs" every few seconds: without a hook nobody waits for them).
        snaps.early.min_gap = if job.cfg.on_hang.is_some() {
            self.snapshot_every / 2
        } else {
            period / 2
        };
        // Without a hook, a hang that grew is reported with the next periodic snapshot (a
        // daemon waiting for good doubles its "hang" every few periods).
        snaps.early.new_only = job.cfg.on_hang.is_none();
        let due = intake.closed || Instant::now() >= self.next_snapshot;
        if due {
            self.next_snapshot += period;
            if self.next_snapshot < began {
                self.next_snapshot = began + period;
            }
        }
        if due && !intake.closed && snaps.early.writing() {
            // The previous snapshot is still being written: skip this one rather than queue
            // a copy of the graph behind it (the next one holds both periods' events).
            self.skipped += 1;
        } else if due {
            let epoch = job.epoch;
            let errors = std::mem::take(&mut self.errors);
            let t = Instant::now();
            snaps.ctx.request(
                job,
                &intake.merge,
                errors,
                epoch,
                false,
                !intake.closed,
                &snaps.tx,
            )?;
            stalled("requesting the periodic snapshot", t);
            snaps.early.taken(epoch, false);
        }
        Ok(())
    }

    /// Once a second: the resident set against the memory budget, and the window the
    /// collector keeps shortened or grown back (`budget.rs`), said in one line when it
    /// shortens.
    fn memory(&mut self, job: &Job<'_>, intake: &Intake, watermark: Nanos) {
        let now = Instant::now();
        if now < self.next_memory_check {
            return;
        }
        self.next_memory_check = now + MEMORY_CHECK;
        let Some(limit) = intake.budget.limit() else {
            return;
        };
        let resident = intake.budget.used();
        job.set_over_budget(resident > limit);
        let held = watermark.0.saturating_sub(job.window_start(Nanos(0)).0);
        match self.retention.check(now, resident, limit, held) {
            Some(Change::Shortened {
                window_ns,
                resident,
            }) => {
                if !self.quiet {
                    eprintln!(
                        "argus start: {:.2} GiB resident, over the memory budget of {:.2} GiB (--max-memory): keeping the last {:.0} s of the graph instead of --retain {:.0} s (every event stays in the ring, {})",
                        resident as f64 / GIB,
                        limit as f64 / GIB,
                        window_ns as f64 / 1e9,
                        job.cfg.retain.as_secs_f64(),
                        job.cfg.dir.join("trace").display(),
                    );
                }
                tracing::info!(window_ns, resident, limit, "window shortened");
            }
            Some(Change::Grown { window_ns }) => {
                tracing::info!(window_ns, resident, limit, "window grown back");
            }
            None => {}
        }
    }

    /// A watched hang that is new, or grew, since the last snapshot: snapshot it now rather
    /// than at the next period.
    fn early(&mut self, job: &Job<'_>, intake: &Intake, snaps: &mut Snapshots) -> Result<()> {
        if intake.closed
            || Instant::now() >= self.next_snapshot
            || !snaps.early.due(job, &intake.merge)
        {
            return Ok(());
        }
        let epoch = job.epoch;
        let errors = std::mem::take(&mut self.errors);
        snaps
            .ctx
            .request(job, &intake.merge, errors, epoch, true, true, &snaps.tx)?;
        snaps.early.taken(epoch, true);
        if !self.quiet {
            eprintln!(
                "argus start: a watched thread's hang appeared or grew: snapshot {} taken at once",
                snapshot_name(epoch)
            );
        }
        Ok(())
    }

    /// The periodic status line: events per second since the last one, lag, losses, what
    /// waits.
    fn status_line(&mut self, job: &Job<'_>, intake: &Intake) {
        let Some(elapsed) = self.status.ready(Instant::now()) else {
            return;
        };
        let events = std::mem::take(&mut self.status_events);
        if self.quiet || elapsed.is_zero() {
            return;
        }
        let merge = &intake.merge;
        let now = monotonic_ns();
        let lag = now.saturating_sub(merge.released().map_or(0, |w| w.0));
        // How far behind the clock the recorder's slowest reader is: the watermark waits
        // for it (`intake.rs`).
        let readers = intake
            .read
            .min()
            .filter(|r| r.0 > 0)
            .map_or(0, |r| now.saturating_sub(r.0));
        let s = &merge.stats;
        eprintln!(
            "argus start: {:.0} events/s, lag {:.2} s (readers {:.2} s), {} open segments, lost {} (kernel {}, late {}, malformed {}), {} lost-events gaps, {} pages + {} records waiting{}{}{}",
            events as f64 / elapsed.as_secs_f64(),
            lag as f64 / 1e9,
            readers as f64 / 1e9,
            job.open_segments(),
            s.lost_total(),
            s.lost.values().sum::<u64>(),
            s.late,
            s.bad,
            s.gaps,
            intake.tap.len(),
            merge.queued(),
            job.live_lag(),
            if self.retention.limited() {
                format!(
                    ", window {:.0} s (memory budget)",
                    self.retention.window_ns() as f64 / 1e9
                )
            } else {
                String::new()
            },
            if self.skipped > 0 {
                format!(
                    ", {} snapshots skipped (the previous one was still being written)",
                    self.skipped
                )
            } else {
                String::new()
            },
        );
    }
}
