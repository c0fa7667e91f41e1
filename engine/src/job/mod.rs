//! The continuous job of `argus start` (user page: `docs/start.md`). The recorder keeps
//! its raw ring in `DIR/trace/` and taps every page it reads straight into decoding; the
//! events feed one dataflow live, a snapshot is written every `--snapshot-every` seconds and
//! at once when a watched thread hangs, and the live graph answers queries on
//! `DIR/argus.sock`.
//!
//! ```text
//!  recorder readers (cpuN) ──► DIR/trace/cpuN/*.chunk.zst           (the raw ring, as `record`)
//!          ├── tap (page) ──► intake: LiveMerge (per-CPU decode → queues) ──► release ts ≤ watermark
//!          └── fd tracker ──► files/ and the files tap (lines + the bound they are complete to)
//!                                                                    │ one epoch per tick
//!  reload.rs: the rules (learned + --rules, SIGHUP; fd identity) ──► the dataflow (RuleUpdates:
//!                                                                    │ new rules from an epoch on)
//!                 collector (flow.rs, window.rs): the graph in time buckets, cut
//!                 after --retain                                     │
//!                       ├── snapshot requests ──► snapshots.rs, parts.rs: DIR/snapshots/<epoch>/
//!                       │                          (atomic), DIR/latest, --on-hang (watch.rs)
//!                       └── copy ──► live_graph.rs, layers.rs: arrangements ◄── serve.rs ◄── argus.sock
//! ```
//!
//! - **Watermark** (`intake.rs`). Every tick releases the records with `ts ≤ now − --lag`,
//!   merged by `(ts, cpu)`, never past the recorder's read frontier (what each reader has
//!   read to the kernel's write position: `argus_ingest::linux::ReadFrontier`), a CPU being
//!   read back from the ring (`catchup.rs`: pages the tap dropped), nor the fd tracker's
//!   bound (`argus_ingest::linux::FilesTap`: its lines for the records released are in
//!   hand). A record at or below a watermark already released is late: dropped, counted,
//!   and still in the ring.
//! - **Gaps.** A page flagged with missed events is a gap on its CPU, added to the rules'
//!   shared gap set before any record of the page is released, so no edge is made across it
//!   (`docs/start.md`, "Lost events").
//! - **Rules** (`reload.rs`). What the recordings tell (`crate::setup::configure`: the
//!   previous run's ring, the live ring's thread table and kallsyms), the fd identity as the
//!   tracker writes it (`crate::setup::LiveChannels`) and the rules file; each change
//!   reaches every stage of the dataflow from the next epoch on.
//! - **Retention** (`window.rs`, `budget.rs`). One dataflow runs for the whole job; its
//!   collector keeps the graph in one-second buckets by end time and drops those that ended
//!   more than `--retain` (or the memory budget's shorter window) before the watermark; the
//!   dataflow's rule state forgets what has been idle for twice that.
//! - **Back-pressure.** The dataflow's input holds at most 8 epochs and the snapshot thread
//!   16 ticks of events; beyond that the main loop waits and the tap fills (what it drops is
//!   read back from the ring). A step of the main loop over 500 ms is logged.
//! - **Snapshots** (`snapshots.rs`, `parts.rs`). Written into a hidden directory, renamed
//!   into place, then `latest` is replaced by a rename: a `kill -9` leaves `latest` on a
//!   complete snapshot. `events.parquet` holds the period's events, the other tables the
//!   retained window; time buckets encoded before are copied, not encoded again.
//! - **Hangs** (`watch.rs`, `cycle.rs`). A new or doubled spin of a watched thread takes a
//!   snapshot at once (at most one per half period) and runs `--on-hang`.
//! - **Stop and restart** (`running.rs`). SIGINT/SIGTERM stop the recorder; the job reads
//!   back what it is behind by for at most 10 s, writes a last snapshot and exits 0. On
//!   start an earlier run's ring moves to `DIR/trace.prev` and its last `--retain` is
//!   replayed before live events.
//!
//! Why it is built this way, with the measurements behind each choice: `docs/design-notes.md`.

mod budget;
mod catchup;
mod config;
mod cycle;
mod flow;
mod intake;
mod layers;
mod live_graph;
mod parts;
mod reload;
mod running;
mod serve;
mod snapshots;
mod sync;
mod watch;
mod window;

pub use crate::priority::{parse_job_priority, JobPriority};
pub use budget::MemoryBudget;
pub use config::StartConfig;
pub use snapshots::list_snapshots;

use self::cycle::{Cycle, Snapshots};
use self::intake::Intake;
use self::reload::LiveRules;
use self::running::{take_previous_trace, Job};
use self::serve::{Served, Server};
use self::snapshots::clean_leftovers;
use crate::setup::{configure, Recording};
use anyhow::{Context, Result};
use argus_ingest::replay::TraceReader;
use argus_pipeline::gaps::GapSet;
use argus_schema::Nanos;
use crossbeam_channel::Receiver;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often the main loop releases events into the dataflow (one epoch per tick) while
/// events come; a quiet machine's ticks are further apart (`cycle.rs`).
const TICK: Duration = Duration::from_millis(200);
/// Tapped pages that may wait for decoding (4 KiB each: 32 MiB); the recorder drops what
/// does not fit, and the job reads it back from the ring (`catchup.rs`).
const TAP_CAPACITY: usize = 8192;

pub use argus_ingest::linux::monotonic_ns;

/// A tapped page: the CPU and the page bytes.
type Tapped = argus_ingest::linux::TappedPage;

/// Runs the job until the recorder stops (signal, `--duration`).
pub fn run(cfg: &StartConfig, quiet: bool) -> Result<u8> {
    // This run's own gap set: the merge adds to it, the dataflow's rules read it.
    let mut owned = cfg.clone();
    owned.dataflow.rules.gaps = GapSet::new();
    std::fs::create_dir_all(owned.dir.join("snapshots"))
        .with_context(|| format!("creating {}", owned.dir.display()))?;
    clean_leftovers(&owned.dir);
    let prev = take_previous_trace(&owned.dir)?
        .map(|p| TraceReader::open(&p).with_context(|| format!("opening {}", p.display())))
        .transpose()?;
    let first_epoch = list_snapshots(&owned.dir).last().map_or(0, |(e, _)| e + 1);

    let trace_dir = owned.dir.join("trace");
    let (recording, taps, own_reports) = start_recording(&owned, &trace_dir)?;
    // What the recordings tell the rules: the previous run's ring (replayed below) and
    // what the recorder wrote when it started (setup.rs).
    let (procs, kallsyms, traced_from) = running::live_tables(&trace_dir)?;
    let mut recordings: Vec<Recording<'_>> = prev.iter().map(Recording::Trace).collect();
    recordings.push(Recording::Live {
        procs: &procs,
        kallsyms: kallsyms.as_ref(),
    });
    owned.dataflow = configure(&owned.dataflow, &recordings)?;
    drop(recordings);
    // The rules file on top of what was learned; SIGHUP re-reads it, and the fd identity
    // is learned as the tracker writes it (`reload.rs`).
    let rules = LiveRules::new(owned.rules_file.clone(), owned.dataflow.rules.clone())?;
    owned.dataflow.rules = rules.current().clone();
    LiveRules::catch_hangup();
    let cfg = &owned;
    let marker = recording.marker_path().to_path_buf();
    // The recorder's control loop (stop conditions, hiding the job's new threads and
    // reporting the gone ones) keeps the user's priority, like its readers: starved under a
    // load, it would report a thread gone seconds late.
    let recorder = std::thread::Builder::new()
        .name("argus-start-rec".into())
        .spawn(move || recording.wait())?;
    // From here on every thread this one starts (decoding, the dataflow, snapshot
    // writers) inherits the job's priority; the recorder's threads already run.
    set_job_priority(cfg.nice);
    // The live part starts where the ring does: the tap holds every page since tracing
    // went on, and the threads that ended before now belong in the window as their
    // segments do.
    let live_start = traced_from.unwrap_or_else(|| Nanos(monotonic_ns()));
    if !quiet {
        eprintln!(
            "argus start: recording into {} and snapshotting every {:.1} s into {} (retaining {:.0} s); markers: {}",
            trace_dir.display(),
            cfg.snapshot_every.as_secs_f64(),
            cfg.dir.join("snapshots").display(),
            cfg.retain.as_secs_f64(),
            marker.display()
        );
    }

    // Collectors (spins changed) and the snapshot thread (a snapshot installed) wake the
    // main loop to check for a hang that should be snapshotted at once.
    let (notify, woken) = crossbeam_channel::bounded::<()>(1);
    // A live query on a quiet machine asks for a tick at once (`Served::freshen`).
    let (tick_now, ticks_asked) = crossbeam_channel::bounded::<()>(1);
    let served = Arc::new(Served::new(tick_now));
    let (mut job, replayed) = Job::open(
        cfg,
        first_epoch,
        prev,
        live_start,
        notify.clone(),
        served.clone(),
        quiet,
    )?;
    job.rules = Some(rules);
    // Live queries (`serve.rs`): a job that cannot serve still records and snapshots.
    let server = match Server::start(&cfg.dir, served) {
        Ok(s) => {
            if !quiet {
                eprintln!(
                    "argus start: answering live queries on {} (docs/query-protocol.md)",
                    s.path().display()
                );
            }
            Some(s)
        }
        Err(e) => {
            eprintln!("argus start: warning: no live queries: {e:#}");
            None
        }
    };
    let gaps = &cfg.dataflow.rules.gaps;
    let mut intake = Intake::open(
        &trace_dir,
        taps,
        replayed.as_ref(),
        gaps,
        live_start,
        budget::MemoryBudget::of(Some(cfg.max_memory).filter(|&m| m < u64::MAX)),
    )?;
    let collector = job
        .flow
        .as_ref()
        .map(|g| g.requests.clone())
        .context("invariant: a generation runs")?;
    let (mut snaps, snapshots) =
        Snapshots::start(cfg, &trace_dir, live_start, notify, collector, quiet)?;
    let retention = budget::Retention::new(
        cfg.retain,
        budget::MIN_WINDOW.max(2 * Duration::from_nanos(cfg.dataflow.rules.spin_threshold_ns)),
        job.window_limit().context("invariant: a generation runs")?,
        // `job::continuous` clones the dataflow settings: the same handle.
        cfg.dataflow.forget_limit.clone(),
    );
    let mut cycle = Cycle::new(
        cfg.snapshot_every,
        cfg.quiet_snapshot_every,
        cfg.status_every,
        own_reports,
        retention,
        quiet,
    );
    let mut result = cycle.run(&mut job, &mut intake, &mut snaps, &woken, &ticks_asked);
    // The job is stopping: no more queries (the socket is removed).
    drop(server);
    job.served.set_graphs(Vec::new());

    // The recorder has ended (or the loop failed): the last snapshot is requested; close
    // the snapshot queue, let the dataflow finish and the writer install it.
    drop(snaps);
    let rec_summary = recorder
        .join()
        .map_err(|_| anyhow::anyhow!("the recorder thread panicked"))?;
    if let Some(g) = job.flow.take() {
        if let Err(e) = g.stop() {
            result = result.and(Err(e));
        }
    }
    let written = snapshots
        .join()
        .map_err(|_| anyhow::anyhow!("the snapshot thread panicked"))?;
    let rec_summary =
        rec_summary.with_context(|| format!("recording into {}", trace_dir.display()))?;
    let written = written?;
    result?;
    if !quiet {
        print_summary(&rec_summary, &intake, written, cfg, &trace_dir);
    }
    Ok(0)
}

/// Starts the recorder into `trace_dir`, tapping every page it reads and the fd identity
/// its tracker writes ([`intake::Taps`]); the channel has its reports of the job's own
/// threads (`OwnExits`).
fn start_recording(
    cfg: &StartConfig,
    trace_dir: &Path,
) -> Result<(
    argus_ingest::linux::Recording,
    intake::Taps,
    Receiver<argus_ingest::linux::OwnThread>,
)> {
    let (tap_tx, tap_rx) = crossbeam_channel::bounded::<Tapped>(TAP_CAPACITY);
    // Unbounded: a few reports per 250 ms, drained every tick.
    let (own_tx, own_rx) = crossbeam_channel::unbounded();
    let mut rcfg = cfg.record.clone();
    rcfg.output_dir = trace_dir.to_path_buf();
    rcfg.duration = cfg.duration;
    rcfg.handle_signals = true;
    // The ring on disk is at most a second behind, even at low event rates: the live graph
    // reads back from it what the tap dropped (`catchup.rs`).
    rcfg.flush_interval = Some(cfg.snapshot_every.min(Duration::from_secs(1)));
    rcfg.tap = Some(tap_tx);
    rcfg.own_threads = Some(own_tx);
    let files = rcfg.track_files.then(|| {
        let (files, ends) = argus_ingest::linux::files_tap();
        rcfg.files_tap = Some(ends);
        files
    });
    let perf = rcfg.perf.enabled().then(|| {
        let (perf, ends) = argus_ingest::linux::perf_tap();
        rcfg.perf_tap = Some(ends);
        perf
    });
    let recording = argus_ingest::linux::Recorder::new(rcfg)
        .start()
        .with_context(|| format!("recording into {}", trace_dir.display()))?;
    let taps = intake::Taps {
        pages: tap_rx,
        read: recording.read_frontier(),
        files,
        perf,
    };
    Ok((recording, taps, own_rx))
}

/// Schedules the calling thread (and every thread it starts from now on) as `--nice` says;
/// warns when the system refuses.
fn set_job_priority(priority: JobPriority) {
    let set = match priority {
        // The decoding, dataflow and collector at nice 19; the background threads
        // (`live_graph::below_the_job`) go to SCHED_IDLE below them.
        JobPriority::Idle => argus_ingest::linux::set_thread_nice(19),
        JobPriority::Nice(0) => Ok(()),
        JobPriority::Nice(n) => argus_ingest::linux::set_thread_nice(n),
    };
    if let Err(e) = set {
        eprintln!("argus start: warning: cannot set the job's priority ({priority}): {e}");
    }
}

/// The last lines: pages read back from the ring, events, snapshots and losses of the run.
fn print_summary(
    rec: &argus_ingest::linux::RecordSummary,
    intake: &Intake,
    written: u64,
    cfg: &StartConfig,
    trace_dir: &Path,
) {
    let kernel_lost = rec.lost_total();
    let tap_dropped: u64 = rec.cpus.values().map(|c| c.tap_dropped).sum();
    let c = &intake.catchup;
    if tap_dropped > 0 {
        eprintln!(
            "argus start: {tap_dropped} pages were read faster than the job decoded them: {} read back from the ring in {}, {} not (gaps in the live graph; {} of them skipped because the job fell too far behind over its memory budget)",
            c.recovered,
            trace_dir.display(),
            c.unrecoverable,
            c.skipped
        );
    }
    if c.left > 0 {
        eprintln!(
            "argus start: stopped reading back from the ring {} s after the recorder stopped: {} pages it was behind by are not in the last snapshot; `argus build {}` includes them",
            intake::STOP_READ_BACK.as_secs(),
            c.left,
            trace_dir.display()
        );
    }
    let s = &intake.merge.stats;
    eprintln!(
        "argus start: stopped ({:?}): {} events, {} snapshots, latest {}; lost {} events (kernel {}, late {}, malformed {})",
        rec.stop_reason,
        s.events,
        written,
        cfg.dir.join("latest").display(),
        kernel_lost.max(s.lost.values().sum::<u64>()) + s.late + s.bad,
        kernel_lost.max(s.lost.values().sum::<u64>()),
        s.late,
        s.bad,
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::flow::Flow;
    use super::intake::live_merge;
    use super::*;
    use argus_ingest::format::FormatSet;
    use argus_ingest::live::{LiveMerge, LiveStats};
    use argus_pipeline::dataflow::DataflowConfig;
    use argus_pipeline::rules::RulesConfig;
    use argus_schema::{CausalEdge, ErrorRecord, Event, Tid};

    /// This kernel's layouts of the events the timer test needs (`print fmt` left out):
    /// (system, name, id, the fields after the common header).
    const FORMATS: &[(&str, &str, u32, &str)] = &[
        (
            "sched",
            "sched_switch",
            1,
            "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
             \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
             \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
             \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
             \tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n",
        ),
        (
            "sched",
            "sched_waking",
            2,
            "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
             \tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\
             \tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n\
             \tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n",
        ),
        (
            "timer",
            "hrtimer_start",
            3,
            "\tfield:void * hrtimer;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:void * function;\toffset:16;\tsize:8;\tsigned:0;\n\
             \tfield:s64 expires;\toffset:24;\tsize:8;\tsigned:1;\n\
             \tfield:s64 softexpires;\toffset:32;\tsize:8;\tsigned:1;\n\
             \tfield:enum hrtimer_mode mode;\toffset:40;\tsize:4;\tsigned:0;\n\
             \tfield:bool was_armed;\toffset:44;\tsize:1;\tsigned:0;\n",
        ),
        (
            "timer",
            "hrtimer_expire_entry",
            4,
            "\tfield:void * hrtimer;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:s64 now;\toffset:16;\tsize:8;\tsigned:1;\n\
             \tfield:void * function;\toffset:24;\tsize:8;\tsigned:0;\n",
        ),
        (
            "timer",
            "hrtimer_expire_exit",
            5,
            "\tfield:void * hrtimer;\toffset:8;\tsize:8;\tsigned:0;\n",
        ),
    ];

    /// The fields every event's format starts with.
    const COMMON_FIELDS: &str =
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n";

    fn formats() -> FormatSet {
        let mut set = FormatSet::default();
        for (sys, name, id, fields) in FORMATS {
            let text = format!("name: {name}\nID: {id}\nformat:\n{COMMON_FIELDS}{fields}");
            set.insert(argus_ingest::format::EventFormat::parse(sys, &text).unwrap());
        }
        set
    }

    /// A record of event `name` by `pid` (`flags`: 0x08 = hard interrupt) with `values` at
    /// their fields' offsets.
    fn record(set: &FormatSet, name: &str, pid: i32, flags: u8, values: &[(&str, u64)]) -> Vec<u8> {
        let ev = set.events.values().find(|e| e.name == name).unwrap();
        let len = ev
            .fields
            .iter()
            .map(|f| (f.offset + f.size) as usize)
            .max()
            .unwrap();
        let mut p = vec![0u8; (len + 3) & !3];
        let common = [
            ("common_type", ev.id as u64),
            ("common_flags", flags as u64),
            ("common_pid", pid as u32 as u64),
        ];
        for (field, v) in common.iter().chain(values) {
            let f = ev.field(field).unwrap();
            let (o, n) = (f.offset as usize, (f.size as usize).min(8));
            p[o..o + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        p
    }

    /// A 4 KiB ring-buffer page starting at `ts` holding `records` (time, payload); `missed`:
    /// flagged as following that many lost events.
    fn raw_page(ts: u64, missed: Option<u64>, records: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let records: Vec<(u64, &[u8])> = records.iter().map(|(t, p)| (*t, &p[..])).collect();
        argus_ingest::page::encode_page(4096, ts, &records, missed).unwrap()
    }

    fn start_config(dir: &Path) -> StartConfig {
        StartConfig {
            dir: dir.to_path_buf(),
            snapshot_every: Duration::from_secs(10),
            quiet_snapshot_every: Duration::from_secs(10),
            retain: Duration::from_secs(600),
            lag: Duration::from_millis(500),
            max_memory: u64::MAX,
            keep: 3,
            on_hang: None,
            watch_pids: Vec::new(),
            watch_comms: Vec::new(),
            dataflow: DataflowConfig {
                workers: 2,
                ..DataflowConfig::default()
            },
            record: argus_ingest::linux::RecordConfig::new(dir.join("trace")),
            rules_file: None,
            nice: JobPriority::Nice(0),
            duration: None,
            status_every: Duration::from_secs(5),
            snapshot_delay: Duration::ZERO,
            live_slices: false,
        }
    }

    /// What the live job made of the timer stream.
    struct LiveRun {
        edges: Vec<CausalEdge>,
        /// Segments after the first tick (the timer armed, the gap not yet seen).
        before_gap: Vec<argus_schema::Segment>,
        events: Vec<Event>,
        watermark: Nanos,
        gaps: Vec<(Nanos, Nanos)>,
        stats: LiveStats,
        errors: Vec<ErrorRecord>,
    }

    const TIMER: u64 = 0xffff_8880_0000_1000;
    const BASE: u64 = 5_000_000_000;

    /// Thread 10 arms an hrtimer on cpu0 and sleeps; thread 20 sleeps on cpu1. The pages go
    /// through the job's merge into a dataflow generation tick by tick; the timer fires in
    /// the next page of cpu0, flagged as following lost events when `missed`.
    fn run_timer_stream(missed: Option<u64>) -> LiveRun {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = start_config(tmp.path());
        let set = formats();
        let sleeping = |prev: i32, next: i32, state: u64| {
            record(
                &set,
                "sched_switch",
                prev,
                0,
                &[
                    ("prev_pid", prev as u64),
                    ("prev_state", state),
                    ("next_pid", next as u64),
                ],
            )
        };
        let arm = record(
            &set,
            "hrtimer_start",
            10,
            0,
            &[
                ("hrtimer", TIMER),
                ("function", 1),
                ("expires", BASE + 1_000),
            ],
        );
        let cpu0_before = raw_page(
            BASE,
            None,
            &[(BASE + 20, arm), (BASE + 100, sleeping(10, 0, 1))],
        );
        let cpu1 = raw_page(BASE + 150, None, &[(BASE + 150, sleeping(20, 0, 1))]);
        let fire = BASE + 1_000;
        let cpu0_after = raw_page(
            fire,
            missed,
            &[
                (
                    fire,
                    record(
                        &set,
                        "hrtimer_expire_entry",
                        0,
                        0x08,
                        &[("hrtimer", TIMER), ("function", 1)],
                    ),
                ),
                (
                    fire + 1,
                    record(&set, "sched_waking", 0, 0x08, &[("pid", 10)]),
                ),
                (
                    fire + 2,
                    record(&set, "hrtimer_expire_exit", 0, 0x08, &[("hrtimer", TIMER)]),
                ),
                (fire + 10, sleeping(0, 10, 0)),
            ],
        );

        let (notify, _woken) = crossbeam_channel::bounded::<()>(1);
        let mut job = Job {
            cfg: &cfg,
            flow: Some(
                Flow::start(
                    0,
                    &cfg.dataflow,
                    0,
                    Nanos(0),
                    notify,
                    super::flow::LiveSetup {
                        slices: false,
                        catching_up: Default::default(),
                        retain: None,
                    },
                )
                .unwrap(),
            ),
            epoch: 0,
            watermark: Nanos(0),
            served: Arc::new(Served::new(crossbeam_channel::bounded(1).0)),
            catching_up: Default::default(),
            rules: None,
        };
        let mut merge = live_merge(&set, &[], 0, &cfg.dataflow.rules.gaps, Nanos(BASE)).unwrap();
        let mut all = Vec::new();
        let mut tick = |job: &mut Job<'_>, merge: &mut LiveMerge, w: u64| {
            let mut out = Vec::new();
            merge.release(Nanos(w), &mut out);
            all.extend(out.iter().cloned());
            job.send(out, Nanos(w)).unwrap();
            job.request().unwrap().recv().unwrap().contents()
        };
        // Tick 1: the arming and both sleeps are in the graph before cpu0's next page comes.
        merge.push_page(0, &cpu0_before, 0);
        merge.push_page(1, &cpu1, 0);
        let first = tick(&mut job, &mut merge, BASE + 500);
        // Tick 2: the firing.
        merge.push_page(0, &cpu0_after, 0);
        let watermark = Nanos(BASE + 2_000);
        let last = tick(&mut job, &mut merge, watermark.0);
        if let Some(g) = job.flow.take() {
            g.stop().unwrap();
        }
        assert!(first.check.is_ok() && last.check.is_ok());
        LiveRun {
            edges: last.edges,
            before_gap: first.segments,
            events: all,
            watermark,
            gaps: cfg.dataflow.rules.gaps.to_vec(),
            stats: merge.stats.clone(),
            errors: merge.take_errors(),
        }
    }

    fn timer_edges(edges: &[CausalEdge]) -> usize {
        let irq = argus_schema::Tid::irq(argus_schema::Cpu(0));
        edges
            .iter()
            .filter(|e| {
                e.kind == argus_schema::EdgeKind::Timer
                    && e.src.tid() == Tid(10)
                    && e.dst.tid() == irq
            })
            .count()
    }

    #[test]
    fn a_timer_armed_before_a_live_gap_and_firing_after_it_makes_no_edge_as_in_build() {
        use argus_pipeline::reference;
        // Control: without lost events the live graph has the timer edge.
        let clean = run_timer_stream(None);
        assert_eq!(clean.events.len(), 7, "{:#?}", clean.events);
        assert_eq!(timer_edges(&clean.edges), 1, "{:#?}", clean.edges);
        assert!(clean.gaps.is_empty() && clean.stats.gaps == 0);

        let lossy = run_timer_stream(Some(3));
        // The arming and the sleep that followed it were in the dataflow before the gap was
        // known: the segment of thread 10 that armed the timer had ended.
        assert!(
            lossy
                .before_gap
                .iter()
                .any(|s| s.tid == Tid(10) && s.end_ns == Nanos(BASE + 100)),
            "{:#?}",
            lossy.before_gap
        );
        assert_eq!(
            lossy.gaps,
            vec![(Nanos(BASE + 100), Nanos(BASE + 1_000))],
            "from cpu0's last record before the loss to its first after"
        );
        assert_eq!(lossy.stats.gaps, 1);
        assert_eq!(lossy.stats.lost.get(&0), Some(&3));
        assert!(lossy.errors.iter().any(|e| e.source == "live/cpu0"
            && e.message.contains("the kernel lost 3 events")
            && e.message.contains("no edge is made across this gap")));
        assert_eq!(timer_edges(&lossy.edges), 0, "{:#?}", lossy.edges);
        // Thread 10's sleep spans the gap: no thread-order edge into its next segment.
        assert!(!lossy
            .edges
            .iter()
            .any(|e| e.kind == argus_schema::EdgeKind::ThreadOrder && e.dst.tid() == Tid(10)));

        // As in build: the batch computation with the gap known from the start gives the
        // same graph; without the gap it would have made the edge.
        let mut rules = RulesConfig::default();
        rules.add_gap(Nanos(BASE + 100), Nanos(BASE + 1_000));
        let mut want = reference::compute(&lossy.events, lossy.watermark, &rules).edges;
        let mut got = lossy.edges.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        let gapless = reference::compute(&lossy.events, lossy.watermark, &RulesConfig::default());
        assert_eq!(timer_edges(&gapless.edges), 1);
    }

    #[test]
    fn pages_the_tap_dropped_are_a_gap_too() {
        let set = formats();
        let gaps = GapSet::new();
        let mut m = live_merge(&set, &[], 0, &gaps, Nanos(BASE)).unwrap();
        // As the catch-up hands a tapped page on (`intake.rs`).
        let push = |m: &mut LiveMerge, p: Tapped| m.push_page(p.cpu, &p.data, p.dropped_before);
        let rec = |pid: i32| record(&set, "sched_waking", pid, 0, &[("pid", 1)]);
        push(
            &mut m,
            Tapped {
                cpu: 1,
                data: raw_page(BASE + 10, None, &[(BASE + 10, rec(7))]),
                dropped_before: 0,
                seq: 0,
            },
        );
        assert!(gaps.is_empty());
        // Two pages of cpu1 were dropped by the tap before this one.
        push(
            &mut m,
            Tapped {
                cpu: 1,
                data: raw_page(BASE + 900, None, &[(BASE + 950, rec(7))]),
                dropped_before: 2,
                seq: 3,
            },
        );
        assert_eq!(gaps.to_vec(), vec![(Nanos(BASE + 10), Nanos(BASE + 950))]);
        assert_eq!((m.stats.tap_dropped, m.stats.gaps), (2, 1));
        // A CPU whose first page already follows lost events lost them after the origin.
        push(
            &mut m,
            Tapped {
                cpu: 2,
                data: raw_page(BASE + 2_000, Some(4), &[(BASE + 2_001, rec(8))]),
                dropped_before: 0,
                seq: 0,
            },
        );
        assert_eq!(
            gaps.to_vec(),
            vec![(Nanos(BASE), Nanos(BASE + 2_001))],
            "merged with the first"
        );
        assert_eq!(m.gaps_since(Nanos(BASE + 900)).len(), 2);
        assert_eq!(
            m.gaps_since(Nanos(BASE + 1_000)),
            vec![(2, BASE, BASE + 2_001, Some(4))],
            "the snapshots name the gaps that end in their window"
        );
        assert!(m.gaps_since(Nanos(BASE + 3_000)).is_empty());
    }

    #[test]
    fn the_rules_gap_set_is_shared_by_clones_and_serializes_as_a_list() {
        let cfg = start_config(Path::new("/nonexistent"));
        let generation = cfg.dataflow.clone();
        cfg.dataflow.rules.gaps.add(Nanos(5), Nanos(9));
        assert!(generation.rules.crosses_gap(Nanos(0), Nanos(6)));
        let text = serde_json::to_string(&generation.rules.gaps).unwrap();
        assert_eq!(text, "[[5,9]]");
        let back: GapSet = serde_json::from_str(&text).unwrap();
        assert_eq!(back, generation.rules.gaps);
        assert!(!back.shares(&generation.rules.gaps));
    }
}
