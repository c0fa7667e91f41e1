//! Snapshots of the live graph: directory names, `latest`, leftovers of a killed job, the
//! snapshot thread that writes and installs them (and runs the hooks), the requests the main
//! loop makes, and the early snapshots taken at once for a new or grown hang.

use super::flow::*;
use super::parts::{PartCache, PartStats, RunCache};
use super::running::*;
use super::sync::lock;
use super::watch::*;
use anyhow::{bail, Context, Result};
use argus_ingest::live::{LiveMerge, LostRange};
use argus_pipeline::gaps::GapSet;
use argus_schema::{ErrorRecord, Event, Nanos, SegmentId, Spin, ThreadInfo};
use argus_sinks::{EncodedPart, Frozen, SnapshotInfo, SnapshotWriter};
use crossbeam_channel::{Receiver, Sender};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
/// The name of the snapshot of global epoch `e`.
pub fn snapshot_name(e: u64) -> String {
    format!("{e:010}")
}

/// Points `DIR/latest` at `snapshots/<name>` atomically (symlink + rename). Not synced,
/// like the snapshots themselves: after a crash [`clean_leftovers`] points it at the newest
/// whole one.
pub fn set_latest(dir: &Path, name: &str) -> Result<()> {
    let tmp = dir.join(".latest.tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(Path::new("snapshots").join(name), &tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let latest = dir.join("latest");
    std::fs::rename(&tmp, &latest).with_context(|| format!("replacing {}", latest.display()))?;
    Ok(())
}

/// Complete snapshots under `DIR/snapshots`, oldest first.
pub fn list_snapshots(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join("snapshots"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    let epoch: u64 = name.parse().ok()?;
                    let p = e.path();
                    p.join(argus_sinks::MANIFEST_FILE)
                        .is_file()
                        .then_some((epoch, p))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Removes what a killed job left: hidden temporary and staged snapshot directories,
/// `.latest.tmp`, and the snapshots a crash cut short (they are written without fsync: a
/// snapshot is remade from the ring every few seconds, and syncing its files was a quarter
/// of an idle job's snapshot CPU); points `latest` at the newest whole snapshot when what
/// it named is gone.
pub(crate) fn clean_leftovers(dir: &Path) {
    remove_hidden(dir);
    let mut newest = None;
    for (_, path) in list_snapshots(dir) {
        match argus_sinks::check_snapshot(&path) {
            Ok(_) => newest = Some(path),
            Err(e) => {
                tracing::warn!(
                    "removing snapshot {}: cut short when the job before this one stopped ({e}); the ring has its events",
                    path.display()
                );
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }
    let latest = dir.join("latest");
    let named = std::fs::read_link(&latest).is_ok();
    if named && !latest.join(argus_sinks::MANIFEST_FILE).is_file() {
        let name = newest
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        match name {
            Some(name) => {
                if let Err(e) = set_latest(dir, &name) {
                    tracing::warn!("{e:#}");
                }
            }
            None => {
                let _ = std::fs::remove_file(&latest);
            }
        }
    }
}

/// Removes the hidden directories and files a killed job left.
fn remove_hidden(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(".latest.tmp"));
    if let Ok(rd) = std::fs::read_dir(dir.join("snapshots")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.')
                && (name.contains(".tmp-") || name.contains(".old-") || name.contains("staged-"))
            {
                tracing::info!("removing {} left by an earlier run", e.path().display());
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// What the main loop asks of the snapshot thread.
pub(crate) enum SnapCmd {
    Events(Vec<Event>),
    Finish(Box<SnapJob>),
}

pub(crate) struct SnapJob {
    /// The global epoch: the snapshot's name.
    pub(crate) epoch: u64,
    /// Taken at once for a hang (else on the periodic cycle).
    pub(crate) early: bool,
    /// Another snapshot follows (not the last one).
    pub(crate) more: bool,
    pub(crate) reply: Receiver<Captured>,
    pub(crate) threads: Vec<ThreadInfo>,
    pub(crate) errors: Vec<ErrorRecord>,
    /// Lost-events gaps in the window: the segments they touched get error rows.
    pub(crate) gaps: Vec<LostRange>,
    pub(crate) info: SnapshotInfo,
    pub(crate) quiet: bool,
}

/// Writes each tick's events into the snapshot being staged as they come, and hands a
/// requested snapshot to the [`Finisher`] at once, the next one's staging opened before. The
/// finisher waits for the dataflow's capture and writes the graph on a thread of its own:
/// when this thread did both, the events queued behind a finishing snapshot (seconds at
/// large sizes, longest just before a rotation) filled its queue and stopped the job's main
/// loop for up to 8 s at every period, so the tap filled and the follower fell behind.
pub(crate) struct SnapshotThread {
    pub(crate) dir: PathBuf,
    pub(crate) writer: Option<SnapshotWriter>,
    /// Staging directories opened so far (their names).
    pub(crate) staged: u64,
}

/// Writes a requested snapshot's graph beside its events, installs it, reports its hangs and
/// runs the hook; one snapshot at a time, in the order requested.
pub(crate) struct Finisher {
    pub(crate) dir: PathBuf,
    pub(crate) keep: usize,
    pub(crate) hook: Option<String>,
    pub(crate) watch: Watch,
    /// Shared with the main loop, which asks it whether a hang is due.
    pub(crate) tracker: Arc<std::sync::Mutex<HangTracker>>,
    pub(crate) delay: Duration,
    pub(crate) written: u64,
    /// Snapshots installed so far, for the main loop.
    pub(crate) installed: Arc<std::sync::atomic::AtomicU64>,
    /// Wakes the main loop once a snapshot is installed (a hang may be due now).
    pub(crate) notify: Sender<()>,
    /// The live graph's lost-events gaps (shared with the rules): spins across them are not
    /// reported.
    pub(crate) gaps: GapSet,
    /// The segments and edges of the last snapshot, encoded, by time bucket.
    pub(crate) parts: PartCache,
    /// Where the finisher asks the collector for its graph between snapshots, to encode the
    /// buckets that settled ([`PRE_ENCODE_EVERY`]); `None` once the collector is gone.
    pub(crate) collector: Option<Sender<SnapRequest>>,
}

/// How often the finisher, with no snapshot to write, encodes the buckets that settled
/// since: a snapshot then encodes only the last seconds and the open records. Each time the
/// collector freezes its graph (no copy).
const PRE_ENCODE_EVERY: Duration = Duration::from_secs(2);

/// Rows a second (settled since the last encoding ahead) below which the next time is twice
/// as far (up to [`AHEAD_MAX_EVERY`]). A part costs about the same to encode whatever its
/// rows (`parts.rs`): on a quiet machine (a thousand rows a second) encoding every 2 s was
/// most of the finisher's idle CPU, for snapshots that are quick anyway.
const AHEAD_RATE: f64 = 10_000.0;

/// The longest wait between two encodings ahead.
const AHEAD_MAX_EVERY: Duration = Duration::from_secs(32);

/// A bucket counts as settled once the watermark is this far past its end: records that
/// end in it (segments, edges) are then rarely updated again. One that is still updated
/// is encoded again by the next snapshot (its version moved).
const SETTLE_NS: u64 = 1_000_000_000;

/// Updates to encode in each of segments and edges past which a snapshot encodes the two
/// on two threads.
const PARALLEL_UPDATES: usize = 50_000;

impl SnapshotThread {
    /// Opens the next snapshot's writer. Its name (the epoch) is only known when it is
    /// finished (a hang may take it early), so it is written under a hidden staging name
    /// and renamed to `snapshots/<epoch>` once complete.
    pub(crate) fn open(&mut self) -> Result<()> {
        self.writer = Some(self.staging()?);
        Ok(())
    }

    /// A writer into the next staging directory.
    fn staging(&mut self) -> Result<SnapshotWriter> {
        let target = self.dir.join("snapshots").join(format!(
            ".staged-{}-{}",
            std::process::id(),
            self.staged
        ));
        self.staged += 1;
        SnapshotWriter::new(&target)
            .map(SnapshotWriter::without_sync)
            .with_context(|| format!("creating snapshot {}", target.display()))
    }

    /// Takes commands until the main loop hangs up, then waits for the finisher; the number
    /// of snapshots written, or the first error of either.
    pub(crate) fn run(mut self, rx: Receiver<SnapCmd>, finisher: Finisher) -> Result<u64> {
        let (ftx, frx) = crossbeam_channel::unbounded::<(SnapshotWriter, Box<SnapJob>)>();
        let handle = std::thread::Builder::new()
            .name("argus-snap-finish".into())
            .spawn(move || finisher.run(frx))?;
        let fed = (|| -> Result<()> {
            // Events of the period in progress were lost to a full disk: its snapshot is
            // skipped (they stay in the ring).
            let mut events_lost = false;
            for cmd in &rx {
                match cmd {
                    SnapCmd::Events(evs) => match self.writer.as_mut() {
                        Some(w) => {
                            if let Err(e) = w.write_events(&evs).context("writing events.parquet") {
                                if !no_space(&e) {
                                    return Err(e);
                                }
                                say_disk_full(&self.dir, &e);
                                self.writer = None;
                                events_lost = true;
                            }
                        }
                        None => events_lost = true,
                    },
                    SnapCmd::Finish(job) => {
                        let writer = match self.writer.take() {
                            Some(w) if !events_lost => Some(w),
                            Some(_) => None,
                            None if events_lost => None,
                            None => Some(self.staging()?),
                        };
                        events_lost = false;
                        if job.more {
                            if let Err(e) = self.open() {
                                if !no_space(&e) {
                                    return Err(e);
                                }
                                say_disk_full(&self.dir, &e);
                            }
                        }
                        let Some(writer) = writer else {
                            tracing::info!(
                                epoch = job.epoch,
                                "snapshot skipped: a full disk lost its events"
                            );
                            continue;
                        };
                        if ftx.send((writer, job)).is_err() {
                            // The finisher failed: its error is the one to report.
                            break;
                        }
                    }
                }
            }
            Ok(())
        })();
        drop(ftx);
        drop(rx);
        let written = handle
            .join()
            .map_err(|_| anyhow::anyhow!("the snapshot finisher panicked"))?;
        let written = written?;
        fed?;
        Ok(written)
    }
}

impl Finisher {
    fn run(mut self, rx: Receiver<(SnapshotWriter, Box<SnapJob>)>) -> Result<u64> {
        super::live_graph::below_the_job();
        // Lengthened while encoding ahead finds little to do for the time since the last
        // (a quiet machine: the snapshot itself encodes it as one run), back to
        // PRE_ENCODE_EVERY once it does.
        let mut every = PRE_ENCODE_EVERY;
        loop {
            match rx.recv_timeout(every) {
                Ok((writer, job)) => match self.finish(writer, *job) {
                    Ok(()) => {}
                    // The staging directory is gone with the writer; older snapshots give
                    // their room back, down to the newest one (`latest` stays whole).
                    Err(e) if no_space(&e) => {
                        say_disk_full(&self.dir, &e);
                        prune_snapshots(&self.dir, 1);
                    }
                    Err(e) => return Err(e),
                },
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    let rows = self.encode_ahead()?;
                    every = if rows as f64 >= AHEAD_RATE * every.as_secs_f64() {
                        PRE_ENCODE_EVERY
                    } else {
                        (every * 2).min(AHEAD_MAX_EVERY)
                    };
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(self.written)
    }

    /// Between snapshots: asks the collector for its graph and encodes the buckets that
    /// settled since the last time, in runs ([`RunCache::encode`] ahead), so that the next
    /// snapshot has little left to encode; returns the rows encoded.
    fn encode_ahead(&mut self) -> Result<u64> {
        let Some(collector) = &self.collector else {
            return Ok(0);
        };
        let (tx, reply) = crossbeam_channel::bounded(1);
        let asked = collector.send(SnapRequest {
            min_local_epoch: 0,
            reply: tx,
        });
        let Some(cap) = asked.ok().and_then(|()| reply.recv().ok()) else {
            // The job is stopping.
            self.collector = None;
            return Ok(0);
        };
        let begun = Instant::now();
        let settled = Nanos(cap.watermark.0.saturating_sub(SETTLE_NS));
        let PartCache { segments, edges } = &mut self.parts;
        let (_, seg) = segments.encode("segments", cap.segments, settled, true, |r, o| {
            EncodedPart::segments(r, o)
        })?;
        let (_, edge) = edges.encode("edges", cap.edges, settled, true, |r, o| {
            EncodedPart::edges(r, o)
        })?;
        let (seg_rows, edge_rows) = (seg.encoded_rows, edge.encoded_rows);
        tracing::debug!(
            rows = seg_rows + edge_rows,
            s = begun.elapsed().as_secs_f64(),
            "encoded the settled buckets ahead of the next snapshot"
        );
        Ok(seg_rows + edge_rows)
    }

    fn finish(&mut self, mut writer: SnapshotWriter, mut job: SnapJob) -> Result<()> {
        let staged = writer.target().to_path_buf();
        let name = snapshot_name(job.epoch);
        let target = self.dir.join("snapshots").join(&name);
        let begun = Instant::now();
        let cap = job
            .reply
            .recv()
            .context("the dataflow collector stopped before the snapshot")?;
        let Captured {
            segments,
            edges,
            spins,
            local_epoch,
            watermark,
            // The collector may have cut since the request: the window starts at its cutoff.
            forgotten_before: window_start,
        } = cap;
        let captured = begun.elapsed();
        let (spins, check) = spins.contents_checked();
        if let Err(e) = check {
            bail!("the dataflow's spins are inconsistent: {e}");
        }
        // Only with lost-events gaps: which segments they touched (as `argus build` does).
        let all_segments = (!job.gaps.is_empty()).then(|| {
            Frozen::concat("segments", segments.iter().map(|p| p.frozen.clone()))
                .contents_checked()
                .0
        });
        let PartCache {
            segments: seg_cache,
            edges: edge_cache,
        } = &mut self.parts;
        // Edges beside segments on a thread of their own, when both have enough to encode:
        // on a quiet machine a thread started and ended per snapshot cost more than it saved.
        let parallel = seg_cache.stale_updates(&segments) >= PARALLEL_UPDATES
            && edge_cache.stale_updates(&edges) >= PARALLEL_UPDATES;
        let settled = Nanos(watermark.0.saturating_sub(SETTLE_NS));
        let encode_edges = |edges, cache: &mut RunCache| -> Result<(_, PartStats)> {
            cache.encode("edges", edges, settled, false, |r, o| {
                EncodedPart::edges(r, o)
            })
        };
        let encode_segments = |segments, cache: &mut RunCache| -> Result<(_, PartStats)> {
            cache.encode("segments", segments, settled, false, |r, o| {
                EncodedPart::segments(r, o)
            })
        };
        let (segments, edges) = if parallel {
            std::thread::scope(|scope| {
                let edges = std::thread::Builder::new()
                    .name("argus-snap-edges".into())
                    .spawn_scoped(scope, move || encode_edges(edges, edge_cache));
                let segments = encode_segments(segments, seg_cache);
                let edges = match edges {
                    Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    Err(e) => Err(e.into()),
                };
                (segments, edges)
            })
        } else {
            (
                encode_segments(segments, seg_cache),
                encode_edges(edges, edge_cache),
            )
        };
        let ((segments, seg_stats), (edges, edge_stats)) = (segments?, edges?);
        let encoded = begun.elapsed();
        for part in segments {
            writer.append_segment_part(part)?;
        }
        for part in edges {
            writer.append_edge_part(part)?;
        }
        writer.write_spins(&spins)?;
        writer.write_threads(&job.threads)?;
        let mut errors = job.errors;
        job.gaps.retain(|&(_, _, to, _)| to >= window_start.0);
        job.info.lost_ranges = job
            .gaps
            .iter()
            .map(|&(_, from, to, _)| (Nanos(from), Nanos(to)))
            .collect();
        if let Some(segments) = &all_segments {
            errors.extend(crate::gap_rows::touched(segments, &job.gaps));
        }
        writer.write_errors(&errors)?;
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let mut info = job.info;
        info.trace_start_ns = info.trace_start_ns.max(Some(window_start));
        info.watermark_ns = watermark.max(info.watermark_ns);
        info.trace_end_ns = Some(info.watermark_ns);
        let manifest = writer
            .finish(info)
            .with_context(|| format!("writing snapshot {}", target.display()))?;
        std::fs::rename(&staged, &target)
            .with_context(|| format!("renaming {} to {}", staged.display(), target.display()))?;
        set_latest(&self.dir, &name)?;
        self.written += 1;
        self.installed.fetch_add(1, Ordering::Release);
        tracing::info!(
            snapshot = %target.display(),
            local_epoch,
            early = job.early,
            wait_capture_s = captured.as_secs_f64(),
            encode_s = (encoded - captured).as_secs_f64(),
            write_s = (begun.elapsed() - encoded).as_secs_f64(),
            reused_rows = seg_stats.reused_rows + edge_stats.reused_rows,
            encoded_rows = seg_stats.encoded_rows + edge_stats.encoded_rows,
            segments = manifest.counts.segments,
            edges = manifest.counts.edges,
            spins = manifest.counts.spins,
            "snapshot written"
        );
        let by_tid: HashMap<i32, &ThreadInfo> = job.threads.iter().map(|t| (t.tid.0, t)).collect();
        let own = own_threads();
        let watch = &self.watch;
        let gaps = &self.gaps;
        let mut in_gaps = 0u64;
        let notices = lock(&self.tracker).update(&spins, watermark, |s| {
            if is_own(s.tid.0, &by_tid, &own) || !watch.watches(s, &by_tid) {
                return false;
            }
            if spans_gap(s, watermark, gaps) {
                in_gaps += 1;
                return false;
            }
            true
        });
        if in_gaps > 0 && !job.quiet {
            eprintln!(
                "argus start: {in_gaps} candidate hang(s) not reported: they span lost-events gaps of the live graph (pages the job could not decode in time; the ring in {} has them)",
                self.dir.join("trace").display()
            );
        }
        for n in &notices {
            let who = argus_schema::describe_thread(&job.threads, n.spin.tid);
            if !job.quiet {
                eprintln!(
                    "argus start: {} hang: {who}: {} {:.3} s{} (snapshot {}{})",
                    if n.new { "new" } else { "growing" },
                    n.spin.class.name(),
                    n.duration_ns as f64 / 1e9,
                    if n.spin.open { ", still going" } else { "" },
                    target.display(),
                    if job.early { ", taken at once" } else { "" },
                );
            }
            if let Some(cmd) = &self.hook {
                run_hook(cmd, n, &target);
            }
        }
        // Keep the newest `keep` (the one just written is among them).
        prune_snapshots(&self.dir, self.keep);
        let _ = self.notify.try_send(());
        Ok(())
    }
}

/// Deletes all but the newest `keep` snapshots of the job in `dir`.
fn prune_snapshots(dir: &Path, keep: usize) {
    let all = list_snapshots(dir);
    if all.len() > keep {
        for (_, p) in &all[..all.len() - keep] {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// The error comes from a full filesystem (`ENOSPC`) or a spent quota (`EDQUOT`): the job
/// skips the snapshot and goes on (docs/start.md, "A full disk").
pub(crate) fn no_space(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)))
    })
}

/// Says once per job that snapshots are skipped for want of space.
fn say_disk_full(dir: &Path, e: &anyhow::Error) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            dir = %dir.display(),
            error = %format!("{e:#}"),
            "the disk is full: snapshots are skipped (their events stay in the ring) and older \
             ones deleted down to the newest until space returns; recording and the live graph go on"
        );
    }
}

/// What every snapshot request carries besides the graph.
pub(crate) struct SnapContext {
    pub(crate) sources: Vec<PathBuf>,
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC` when the job started (the snapshots' manifests).
    pub(crate) wall_offset_ns: i64,
    pub(crate) live_start: Nanos,
    pub(crate) threshold_ns: u64,
    pub(crate) workers: u32,
    pub(crate) quiet: bool,
}

impl SnapContext {
    /// Asks the collector for its graph and the snapshot thread to write snapshot
    /// `epoch` with it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn request(
        &self,
        job: &Job<'_>,
        merge: &LiveMerge,
        errors: Vec<ErrorRecord>,
        epoch: u64,
        early: bool,
        more: bool,
        tx: &Sender<SnapCmd>,
    ) -> Result<()> {
        let reply = job.request()?;
        let oldest = job.window_start(self.live_start);
        let cmd = SnapJob {
            epoch,
            early,
            more,
            reply,
            threads: merge.threads(),
            errors,
            gaps: merge.gaps_since(oldest),
            info: SnapshotInfo {
                sources: self.sources.clone(),
                trace_start_ns: Some(oldest),
                trace_end_ns: Some(job.watermark),
                epoch: argus_schema::Epoch(epoch),
                watermark_ns: job.watermark,
                lost_events: merge.stats.lost.clone(),
                unknown_events: 0,
                threshold_ns: self.threshold_ns,
                workers: self.workers,
                wall_offset_ns: Some(self.wall_offset_ns),
                recorder_tids: {
                    let mut own: Vec<i32> = own_threads().into_iter().collect();
                    own.sort_unstable();
                    own
                },
                ..SnapshotInfo::default()
            },
            quiet: self.quiet,
        };
        tx.send(SnapCmd::Finish(Box::new(cmd)))
            .map_err(|_| anyhow::anyhow!("the snapshot thread stopped"))
    }
}

/// When a hang earns a snapshot out of the periodic cycle: a watched thread's spin that
/// the hook has not been told of (new, or doubled since), in the collector's spins, while no snapshot is being written, at most one per half period.
pub(crate) struct EarlySnapshots {
    pub(crate) watch: Watch,
    pub(crate) tracker: Arc<std::sync::Mutex<HangTracker>>,
    pub(crate) installed: Arc<std::sync::atomic::AtomicU64>,
    /// Snapshots requested so far.
    pub(crate) requested: u64,
    /// The epoch of the last snapshot requested (names must grow).
    pub(crate) last_epoch: Option<u64>,
    /// When the last early one was requested.
    pub(crate) last_at: Option<Instant>,
    pub(crate) min_gap: Duration,
    /// Only a new hang takes a snapshot at once; one that grew waits for the next periodic
    /// snapshot (no `--on-hang` hook waits for it, and it is in an earlier snapshot already).
    pub(crate) new_only: bool,
    /// Spins found not watched (so the thread table is not consulted for them again).
    pub(crate) unwatched: std::collections::HashSet<SegmentId>,
}

impl EarlySnapshots {
    pub(crate) fn taken(&mut self, epoch: u64, early: bool) {
        self.requested += 1;
        self.last_epoch = Some(epoch);
        if early {
            self.last_at = Some(Instant::now());
        }
    }

    /// Whether a snapshot requested is not installed yet.
    pub(crate) fn writing(&self) -> bool {
        self.installed.load(Ordering::Acquire) < self.requested
    }

    pub(crate) fn due(&mut self, job: &Job<'_>, merge: &LiveMerge) -> bool {
        if self.writing()
            || self.last_epoch.is_some_and(|e| job.epoch <= e)
            || self.last_at.is_some_and(|t| t.elapsed() < self.min_gap)
        {
            return false;
        }
        let Some(g) = job.flow.as_ref() else {
            return false;
        };
        let spins = g.live.get();
        let present: std::collections::HashSet<SegmentId> =
            spins.iter().map(|s| s.segment).collect();
        self.unwatched.retain(|seg| present.contains(seg));
        let tracker = lock(&self.tracker);
        let candidates: Vec<&Spin> = spins
            .iter()
            .filter(|s| {
                !self.unwatched.contains(&s.segment)
                    && tracker
                        .notice(s, job.watermark)
                        .is_some_and(|n| n.new || !self.new_only)
            })
            .collect();
        drop(tracker);
        if candidates.is_empty() {
            return false;
        }
        let threads = merge.threads();
        let by_tid: HashMap<i32, &ThreadInfo> = threads.iter().map(|t| (t.tid.0, t)).collect();
        let own = own_threads();
        let gaps = &job.cfg.dataflow.rules.gaps;
        let mut due = false;
        for s in candidates {
            if !is_own(s.tid.0, &by_tid, &own)
                && self.watch.watches(s, &by_tid)
                && !spans_gap(s, job.watermark, gaps)
            {
                due = true;
            } else {
                self.unwatched.insert(s.segment);
            }
        }
        due
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    use super::super::watch::tests::spin;

    #[test]
    fn a_hang_is_due_for_an_early_snapshot_until_the_snapshot_reports_it() {
        let mut t = HangTracker::default();
        let s = spin(1, 10, 10, 0, 2_500);
        assert!(t.notice(&s, Nanos(2_500)).is_some(), "new: due");
        assert!(
            t.notice(&s, Nanos(2_500)).is_some(),
            "asking does not report it"
        );
        t.update(std::slice::from_ref(&s), Nanos(2_500), |_| true);
        assert!(
            t.notice(&s, Nanos(4_000)).is_none(),
            "reported, not doubled"
        );
        let n = t.notice(&s, Nanos(5_000)).unwrap();
        assert_eq!((n.new, n.duration_ns), (false, 5_000), "an open spin grows");
    }

    #[test]
    fn leftovers_of_a_killed_job_are_removed_and_snapshots_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let snaps = tmp.path().join("snapshots");
        for name in [
            ".staged-7-3",
            "..staged-7-4.tmp-7-9",
            ".0000000010.old-7-1",
            "0000000005",
        ] {
            std::fs::create_dir_all(snaps.join(name)).unwrap();
        }
        let whole = SnapshotWriter::new(snaps.join("0000000005")).unwrap();
        whole.finish(SnapshotInfo::default()).unwrap();
        clean_leftovers(tmp.path());
        let left: Vec<String> = std::fs::read_dir(&snaps)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["0000000005".to_string()]);
        assert_eq!(list_snapshots(tmp.path()).len(), 1);
    }

    /// Snapshots are written without fsync: one a crash cut short (a table file empty) is
    /// removed at the next start and `latest`, which named it, names the newest whole one;
    /// a whole one is kept as it is.
    #[test]
    fn a_snapshot_cut_short_by_a_crash_is_removed_and_latest_names_the_newest_whole_one() {
        let tmp = tempfile::tempdir().unwrap();
        let snaps = tmp.path().join("snapshots");
        std::fs::create_dir_all(&snaps).unwrap();
        for name in ["0000000005", "0000000009", "0000000012"] {
            let w = SnapshotWriter::new(snaps.join(name))
                .unwrap()
                .without_sync();
            w.finish(SnapshotInfo::default()).unwrap();
        }
        set_latest(tmp.path(), "0000000012").unwrap();
        std::fs::write(snaps.join("0000000012").join("edges.parquet"), b"").unwrap();
        clean_leftovers(tmp.path());
        let epochs: Vec<u64> = list_snapshots(tmp.path()).iter().map(|(e, _)| *e).collect();
        assert_eq!(epochs, vec![5, 9]);
        assert_eq!(
            std::fs::read_link(tmp.path().join("latest")).unwrap(),
            Path::new("snapshots").join("0000000009")
        );
        argus_sinks::check_snapshot(&tmp.path().join("latest")).unwrap();
        // Nothing cut short: nothing changes.
        clean_leftovers(tmp.path());
        assert_eq!(list_snapshots(tmp.path()).len(), 2);
    }
}
