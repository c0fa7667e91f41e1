//! The running job ([`Job`]): its dataflow generation and the batches sent to it; and the
//! start of a run: the previous run's ring moved aside and
//! replayed, the live trace's formats and processes.

use anyhow::{Context, Result};
use argus_ingest::format::{FormatSet, HeaderPage};
use argus_ingest::live::LostRange;
use argus_ingest::replay::TraceReader;
use argus_ingest::tracedir::ProcEntry;
use argus_pipeline::dataflow::Batch;
use argus_schema::{Event, Nanos};
use crossbeam_channel::{Receiver, Sender};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
/// Events per batch when replaying the previous run's ring.
pub(crate) const REPLAY_BATCH: usize = 100_000;
use super::config::*;
use super::flow::*;
use super::live_graph::LiveGraph;
use super::reload::LiveRules;
use super::serve::Served;
use std::sync::Arc;

/// Moves an earlier run's ring aside; returns it when it holds a trace.
pub(crate) fn take_previous_trace(dir: &Path) -> Result<Option<PathBuf>> {
    let trace = dir.join("trace");
    let non_empty = std::fs::read_dir(&trace)
        .map(|mut rd| rd.next().is_some())
        .unwrap_or(false);
    if !non_empty {
        return Ok(None);
    }
    let prev = dir.join("trace.prev");
    if prev.exists() {
        std::fs::remove_dir_all(&prev).with_context(|| format!("removing {}", prev.display()))?;
    }
    std::fs::rename(&trace, &prev)
        .with_context(|| format!("moving {} to {}", trace.display(), prev.display()))?;
    Ok(prev.join("meta.json").is_file().then_some(prev))
}

/// The state of the running job.
pub(crate) struct Job<'a> {
    pub(crate) cfg: &'a StartConfig,
    /// The dataflow and its collector: one for the whole run (the collector forgets what
    /// ended before the retained window), none once the job is stopping.
    pub(crate) flow: Option<Flow>,
    /// Batches sent so far: the next batch is this global epoch.
    pub(crate) epoch: u64,
    /// Each generation's next local epoch is `epoch - first_epoch`.
    pub(crate) watermark: Nanos,
    /// What the query server reads: the generation's live graph is published here when it
    /// starts and withdrawn when it stops.
    pub(crate) served: Arc<Served>,
    /// Set while the intake reads pages back from the ring: a given-up live graph is not
    /// seeded anew then (`flow.rs`).
    pub(crate) catching_up: Arc<AtomicBool>,
    /// The rules it runs with and what they are made of (`reload.rs`).
    pub(crate) rules: Option<LiveRules>,
}

/// The dataflow settings of `argus start`: rule state idle for twice `--retain` is
/// forgotten (the collector keeps only `--retain` of the graph, so nothing it holds can
/// change by that), or for twice the shorter window of the memory budget (`budget.rs`:
/// `forget_limit`, the handle of `cfg.dataflow`, which the clone shares).
pub(crate) fn continuous(cfg: &StartConfig) -> argus_pipeline::dataflow::DataflowConfig {
    let mut d = cfg.dataflow.clone();
    d.forget = Some(Nanos(2 * cfg.retain.as_nanos() as u64));
    d
}

impl<'a> Job<'a> {
    /// The job's generation from `first_epoch`, with the last `--retain` of `prev` (an
    /// earlier run's ring) replayed into it; the generation starts at the first replayed
    /// event, else at `live_start`.
    pub(crate) fn open(
        cfg: &'a StartConfig,
        first_epoch: u64,
        prev: Option<TraceReader>,
        live_start: Nanos,
        notify: Sender<()>,
        served: Arc<Served>,
        quiet: bool,
    ) -> Result<(Job<'a>, Option<Replayed>)> {
        let catching_up = Arc::new(AtomicBool::new(false));
        let first = Flow::start(
            0,
            &continuous(cfg),
            first_epoch,
            Nanos(0),
            notify,
            LiveSetup {
                slices: cfg.live_slices,
                catching_up: catching_up.clone(),
                retain: Some(cfg.retain),
            },
        )?;
        let mut job = Job {
            cfg,
            flow: Some(first),
            epoch: first_epoch,
            watermark: Nanos(0),
            served,
            catching_up,
            rules: None,
        };
        job.publish();
        let replayed = match prev {
            Some(p) => {
                let dir = p.dir().to_path_buf();
                let r = replay_previous(&mut job, p)?;
                if !quiet {
                    eprintln!(
                        "argus start: resumed {} events of the last {:.0} s from {}",
                        r.events,
                        cfg.retain.as_secs_f64(),
                        dir.display()
                    );
                }
                Some(r)
            }
            None => None,
        };
        if let Some(g) = job.flow.as_mut() {
            g.start_ns = replayed
                .as_ref()
                .and_then(|r| r.first)
                .unwrap_or(live_start);
        }
        job.publish();
        Ok((job, replayed))
    }

    /// The dataflow runs the current rules from the next batch on; returns that batch's
    /// (global) epoch.
    fn update_rules(&self) -> Result<u64> {
        let g = self
            .flow
            .as_ref()
            .context("invariant: the generation runs")?;
        let rules = self
            .rules
            .as_ref()
            .context("invariant: the rules are set")?;
        g.rules
            .push(self.epoch - g.first_epoch, rules.current().clone());
        // What the dataflow has finished needs none of the older rules.
        if let Some((done, _)) = g.live.latest().done {
            g.rules.forget_before(done);
        }
        Ok(self.epoch)
    }

    /// Re-reads the rules file after a SIGHUP (`reload.rs`); says what came of it.
    pub(crate) fn reread_rules(&mut self, quiet: bool) {
        let Some(rules) = self.rules.as_mut() else {
            return;
        };
        let Some(read) = rules.reread() else {
            eprintln!(
                "argus start: SIGHUP, but no --rules file to re-read: the rules stay as they were"
            );
            return;
        };
        let file = rules
            .file
            .as_ref()
            .map_or(String::new(), |f| f.display().to_string());
        match read.and_then(|()| self.update_rules()) {
            Ok(epoch) => {
                if !quiet {
                    eprintln!(
                        "argus start: rules re-read from {file}: in effect from epoch {epoch}"
                    );
                }
            }
            Err(e) => eprintln!("argus start: warning: SIGHUP: {e:#}; the rules stay as they were"),
        }
    }

    /// Learns the fd identity the tracker wrote since the last tick: its message channels
    /// are in the rules of the epoch sent next, before any event after the lines' bound.
    pub(crate) fn learn_files(
        &mut self,
        lines: Vec<argus_ingest::tracedir::FileLine>,
    ) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        // Every event still to be sent is after the watermark sent last.
        let now = self.watermark;
        let changed = self
            .rules
            .as_mut()
            .is_some_and(|r| r.learn_files(lines, now));
        if changed {
            self.update_rules()?;
        }
        Ok(())
    }

    pub(crate) fn send(&mut self, events: Vec<Event>, watermark: Nanos) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        let g = self
            .flow
            .as_ref()
            .context("invariant: the generation runs")?;
        g.input
            .send(Batch {
                events,
                watermark: self.watermark,
            })
            .map_err(|_| anyhow::anyhow!("dataflow generation {} stopped", g.id))?;
        self.epoch += 1;
        Ok(())
    }

    /// Asks the generation for its state once it has done the last epoch sent.
    pub(crate) fn request(&self) -> Result<Receiver<Captured>> {
        let g = self.flow.as_ref().context("invariant: a generation runs")?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        g.requests
            .send(SnapRequest {
                min_local_epoch: (self.epoch - g.first_epoch).saturating_sub(1),
                reply: tx,
            })
            .map_err(|_| anyhow::anyhow!("dataflow generation {} stopped", g.id))?;
        Ok(rx)
    }

    /// Shows the query server the generation's live graph.
    pub(crate) fn publish(&self) {
        self.served.set_graphs(
            self.flow
                .iter()
                .map(|g| {
                    let graph = LiveGraph {
                        start_ns: g.start_ns,
                        ..g.graph.clone()
                    };
                    (graph, g.live.clone())
                })
                .collect(),
        );
    }

    /// The window the memory budget lets the collector keep (`budget.rs`).
    pub(crate) fn window_limit(&self) -> Option<super::budget::WindowLimit> {
        self.flow.as_ref().map(|g| g.live.window.clone())
    }

    /// Whether the job is over its memory budget: while it is, the live graph is given up
    /// (`budget.rs`).
    pub(crate) fn set_over_budget(&self, over: bool) {
        if let Some(g) = &self.flow {
            g.live
                .over_budget
                .store(over, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Where the retained window starts now (the collector's last cutoff).
    pub(crate) fn window_start(&self, before_any: Nanos) -> Nanos {
        self.flow
            .as_ref()
            .map_or(before_any, |g| g.live.window_start(g.start_ns))
    }

    /// For the status line: how far the generation's dataflow (its collector) and
    /// live graph are behind the epochs sent (empty when they keep up), or that the live
    /// graph was given up.
    pub(crate) fn live_lag(&self) -> String {
        let Some(g) = self.flow.as_ref() else {
            return String::new();
        };
        let behind = |done: Option<u64>| {
            self.epoch
                .saturating_sub(done.map_or(g.first_epoch, |e| g.first_epoch + e + 1))
        };
        let mut out = String::new();
        match behind(g.live.latest().done.map(|(e, _)| e)) {
            0..=2 => {}
            n => out.push_str(&format!(", dataflow {n} epochs behind")),
        }
        let st = g.graph.status();
        if st.fell_behind {
            out.push_str(", live graph given up (fell behind)");
            return out;
        }
        match behind(st.epochs.back().map(|(e, _)| *e)) {
            0..=2 => {}
            n => out.push_str(&format!(", live graph {n} epochs behind")),
        }
        out
    }

    pub(crate) fn open_segments(&self) -> i64 {
        self.flow
            .as_ref()
            .map_or(0, |g| g.live.open.load(Ordering::Relaxed))
    }
}

/// What replaying an earlier run's ring fed the job.
pub(crate) struct Replayed {
    /// Events fed.
    pub(crate) events: u64,
    /// The time of the first and of the last.
    pub(crate) first: Option<Nanos>,
    pub(crate) last: Option<Nanos>,
    /// Its lost-events gaps (already in the rules' gaps).
    pub(crate) gaps: Vec<LostRange>,
}

/// Replays the last `retain` of an earlier run's ring into the job (the rules learned from
/// it when the job was configured, its lost-events gaps included).
pub(crate) fn replay_previous(job: &mut Job<'_>, reader: TraceReader) -> Result<Replayed> {
    let prev = reader.dir().to_path_buf();
    // Its gaps are in the rules already (`setup::configure`).
    let mut gaps = Vec::new();
    for (&cpu, ranges) in &reader.meta_ext().lost_ranges {
        for g in ranges {
            gaps.push((cpu, g.from_ns, g.to_ns, g.events));
        }
    }
    let mut events = reader.events();
    let mut batch = Vec::with_capacity(REPLAY_BATCH);
    // Two passes would re-decode; keep the tail window instead (bounded by `retain`): events
    // come in time order, so what falls out of the window leaves at the front.
    let mut all: VecDeque<Event> = VecDeque::new();
    let retain = job.cfg.retain.as_nanos() as u64;
    let mut errors = 0u64;
    for r in &mut events {
        match r {
            Ok(ev) => {
                let cut = ev.ts.0.saturating_sub(retain);
                while all.front().is_some_and(|e| e.ts.0 < cut) {
                    all.pop_front();
                }
                all.push_back(ev);
            }
            Err(e) => {
                errors += 1;
                if errors == 1 {
                    tracing::warn!("{}: {e}; continuing", prev.display());
                }
            }
        }
    }
    let n = all.len() as u64;
    let first = all.front().map(|e| e.ts);
    let last = all.back().map(|e| e.ts);
    for (i, mut ev) in all.into_iter().enumerate() {
        ev.seq = i as u64;
        batch.push(ev);
        if batch.len() >= REPLAY_BATCH {
            let w = batch.last().map_or(Nanos(0), |e: &Event| e.ts);
            job.send(std::mem::take(&mut batch), w)?;
        }
    }
    if !batch.is_empty() {
        let w = batch.last().map_or(Nanos(0), |e: &Event| e.ts);
        job.send(batch, w)?;
    }
    let _ = events.finish();
    Ok(Replayed {
        events: n,
        first,
        last,
        gaps,
    })
}

/// The live trace directory's `/proc` table and kallsyms as its recorder wrote them when it
/// started: what the rules learn from the live recording (`setup::Recording::Live`).
/// Also the trace's start (`meta.json`), `None` when it cannot be read.
pub(crate) fn live_tables(
    dir: &Path,
) -> Result<(
    Vec<ProcEntry>,
    Option<argus_ingest::kallsyms::Kallsyms>,
    Option<Nanos>,
)> {
    let procs = live_procs(dir)?;
    let start = std::fs::read(argus_ingest::tracedir::meta_path(dir))
        .ok()
        .and_then(|b| serde_json::from_slice::<argus_ingest::tracedir::TraceMeta>(&b).ok())
        .map(|m| Nanos(m.start_ns))
        .filter(|s| s.0 > 0);
    let path = argus_ingest::tracedir::kallsyms_path(dir);
    let kallsyms = match std::fs::File::open(&path) {
        Ok(f) => match argus_ingest::kallsyms::Kallsyms::from_zstd(std::io::BufReader::new(f)) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!("{}: {e}; kernel callbacks stay unnamed", path.display());
                None
            }
        },
        Err(_) => None,
    };
    Ok((procs, kallsyms, start))
}

/// The live trace directory's formats and `/proc` table (what `TraceReader::open` reads,
/// without its warning about a trace still being recorded).
pub(crate) fn live_formats(dir: &Path) -> Result<(FormatSet, Vec<ProcEntry>)> {
    let fdir = argus_ingest::tracedir::formats_dir(dir);
    let hp = fdir.join("header_page");
    let text = std::fs::read_to_string(&hp).with_context(|| format!("reading {}", hp.display()))?;
    let header_page =
        HeaderPage::parse(&text).with_context(|| format!("parsing {}", hp.display()))?;
    let events = fdir.join("events");
    let mut formats =
        FormatSet::load_dir(&events).with_context(|| format!("reading {}", events.display()))?;
    formats.header_page = header_page;
    Ok((formats, live_procs(dir)?))
}

/// The live trace directory's `/proc` table (`proc.json`); none, with a warning, when it
/// cannot be read.
fn live_procs(dir: &Path) -> Result<Vec<ProcEntry>> {
    let proc_path = argus_ingest::tracedir::proc_path(dir);
    match std::fs::read(&proc_path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("parsing {}", proc_path.display())),
        Err(e) => {
            tracing::warn!("{}: {e}; threads start unnamed", proc_path.display());
            Ok(Vec::new())
        }
    }
}
