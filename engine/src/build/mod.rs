//! `argus build`: trace directories → merged events → dataflow → Parquet snapshot.
//!
//! ```text
//!  this thread: replay (decode + merge) ──tee──► events.parquet (streamed)
//!                                         └────► batches ──► dataflow thread(s)
//!  collector thread: dataflow updates ──► GraphSink (collect.rs: segments, edges, spins)
//! ```
//! Decoding, the dataflow and the collection of its output run concurrently.

mod inconsistent;
mod stacks;

use crate::collect::GraphSink;
use crate::setup::{configure, Recording};
use anyhow::{bail, Context, Result};
use argus_ingest::replay::TraceReader;
use argus_pipeline::dataflow::{self, Batch, DataflowConfig, Message};
use argus_schema::{CausalEdge, Epoch, ErrorRecord, Event, Nanos, Segment, Spin, ThreadInfo};
use argus_sinks::{SnapshotInfo, SnapshotWriter};
use inconsistent::Inconsistent;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What `argus build` does.
#[derive(Clone, Debug)]
pub struct BuildConfig {
    /// Trace directories, in any order (they are chained by time).
    pub traces: Vec<PathBuf>,
    /// Snapshot directory to write.
    pub output: PathBuf,
    /// Events per epoch.
    pub batch: usize,
    /// The dataflow's placement.
    pub dataflow: DataflowConfig,
    /// Only the last this much of each trace (`--last`).
    pub last: Option<Duration>,
    /// Compute and report graph statistics (`--stats`).
    pub stats: bool,
}

impl Default for BuildConfig {
    fn default() -> Self {
        BuildConfig {
            traces: Vec::new(),
            output: PathBuf::new(),
            batch: 100_000,
            dataflow: DataflowConfig::default(),
            last: None,
            stats: false,
        }
    }
}

/// The dataflow's configuration for these traces ([`crate::setup::configure`]). Every
/// process of a cluster computes the same, so all of them call this.
fn dataflow_config(cfg: &BuildConfig, readers: &[TraceReader]) -> Result<DataflowConfig> {
    let recordings: Vec<Recording<'_>> = readers.iter().map(Recording::Trace).collect();
    configure(&cfg.dataflow, &recordings)
}

/// Cluster mode, a process other than 0: runs its share of the dataflow with an input that
/// is closed at once (process 0's worker 0 feeds every event) and writes nothing.
pub fn serve_cluster(cfg: &BuildConfig) -> Result<()> {
    let readers = open_traces(&cfg.traces, cfg.last)?;
    let dcfg = dataflow_config(cfg, &readers)?;
    drop(readers);
    let (batch_tx, batch_rx) = crossbeam_channel::bounded::<Batch>(1);
    drop(batch_tx);
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
    dataflow::run(&dcfg, batch_rx, out_tx).with_context(|| {
        format!(
            "running process {} of {} of the dataflow",
            cfg.dataflow.process_id, cfg.dataflow.processes
        )
    })?;
    // Only process 0 receives output; anything here would be a contract violation.
    if out_rx.try_iter().next().is_some() {
        bail!(
            "process {} received dataflow output meant for process 0",
            cfg.dataflow.process_id
        );
    }
    Ok(())
}

/// What a build did.
#[derive(Clone, Debug, Default)]
pub struct BuildSummary {
    /// Events decoded.
    pub events: u64,
    /// Epochs run.
    pub epochs: u64,
    /// Rows per table.
    pub segments: usize,
    /// Edges.
    pub edges: usize,
    /// Spins.
    pub spins: usize,
    /// Threads.
    pub threads: usize,
    /// Events lost by the kernel, per CPU.
    pub lost: BTreeMap<u32, u64>,
    /// Where: (cpu, from ns, to ns, events if counted), from `meta.json` `lost_ranges`.
    pub lost_ranges: Vec<(u32, u64, u64, Option<u64>)>,
    /// Graph statistics, with `--stats`.
    pub stats: Option<argus_pipeline::stats::GraphStats>,
    /// Records of unknown kinds skipped.
    pub unknown: u64,
    /// Stack samples lost by the recorder's perf rings (`--stacks`).
    pub stacks_lost: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Where.
    pub output: PathBuf,
}

impl fmt::Display for BuildSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        write!(
            f,
            "argus: built {}: {} events in {} epochs → {} segments, {} edges, {} spins, {} threads in {:.2} s ({:.2} M events/s)",
            self.output.display(),
            self.events,
            self.epochs,
            self.segments,
            self.edges,
            self.spins,
            self.threads,
            secs,
            self.events as f64 / secs / 1e6,
        )?;
        if self.unknown > 0 {
            write!(
                f,
                "\nargus: note: {} records of event types Argus does not use (or has no format file for) were skipped",
                self.unknown
            )?;
        }
        if self.stacks_lost > 0 {
            write!(
                f,
                "\nargus: warning: the recorder lost {} stack samples (--stacks): those events have no stack in stacks.parquet",
                self.stacks_lost
            )?;
        }
        let lost: u64 = self.lost.values().sum();
        if lost > 0 {
            write!(
                f,
                "\nargus: warning: the kernel lost {lost} events ({}); edges near the gaps may be missing — record with a larger --buffer-kb",
                self.lost
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(c, n)| format!("cpu{c}: {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
            const SHOWN: usize = 8;
            for (cpu, from, to, n) in self.lost_ranges.iter().take(SHOWN) {
                let n = n.map_or("some".to_string(), |n| n.to_string());
                write!(
                    f,
                    "\nargus:   cpu{cpu}: {n} events lost between {:.6} s and {:.6} s",
                    *from as f64 / 1e9,
                    *to as f64 / 1e9
                )?;
            }
            if self.lost_ranges.len() > SHOWN {
                write!(
                    f,
                    "\nargus:   ... {} more ranges",
                    self.lost_ranges.len() - SHOWN
                )?;
            }
        }
        if let Some(stats) = &self.stats {
            write!(f, "\n{stats}")?;
        }
        Ok(())
    }
}

/// Appends `ev` to the epoch being filled and sends the epoch to the dataflow once it holds
/// `size` events. A closed channel sets `failed` (the dataflow stopped).
fn feed(
    batch: &mut Vec<Event>,
    ev: Event,
    size: usize,
    tx: &crossbeam_channel::Sender<Batch>,
    failed: &mut bool,
) {
    if *failed {
        return;
    }
    batch.push(ev);
    if batch.len() >= size {
        let events = std::mem::replace(batch, Vec::with_capacity(size));
        let watermark = events.last().map(|e| e.ts).unwrap_or_default();
        if tx.send(Batch { events, watermark }).is_err() {
            *failed = true;
        }
    }
}

/// Opens the traces and orders them by start time; overlapping traces are refused (they
/// would need a merge of two recordings of the same CPUs).
fn open_traces(paths: &[PathBuf], last: Option<Duration>) -> Result<Vec<TraceReader>> {
    let mut readers = Vec::new();
    for p in paths {
        let r = match last {
            Some(window) => TraceReader::open_window(p, window),
            None => TraceReader::open(p),
        }
        .with_context(|| format!("opening trace {}", p.display()))?;
        readers.push(r);
    }
    readers.sort_by_key(|r| r.meta().start_ns);
    for w in readers.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if a.meta().end_ns == 0 || b.meta().start_ns < a.meta().end_ns {
            bail!(
                "traces {} and {} overlap in time; build them separately",
                a.dir().display(),
                b.dir().display()
            );
        }
    }
    Ok(readers)
}

/// Runs a build.
pub fn build(cfg: &BuildConfig) -> Result<BuildSummary> {
    let started = Instant::now();
    let imported = match cfg.traces.as_slice() {
        [one] if argus_ingest::import::is_importable(one) => Some(
            argus_ingest::import::open(one)
                .with_context(|| format!("importing {}", one.display()))?,
        ),
        many if many.iter().any(|p| argus_ingest::import::is_importable(p)) => bail!(
            "import other tools' recordings one file at a time (argus build FILE -o SNAPSHOT)"
        ),
        _ => None,
    };
    let readers = if imported.is_some() {
        Vec::new()
    } else {
        open_traces(&cfg.traces, cfg.last)?
    };
    let dcfg = match &imported {
        Some(imp) => configure(&cfg.dataflow, &[Recording::Import(imp)])?,
        None => dataflow_config(cfg, &readers)?,
    };
    let mut writer = SnapshotWriter::new(&cfg.output)
        .with_context(|| format!("creating snapshot {}", cfg.output.display()))?;

    let (batch_tx, batch_rx) = crossbeam_channel::bounded::<Batch>(4);
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Message>();
    let flow = std::thread::Builder::new()
        .name("argus-dataflow".into())
        .spawn(move || dataflow::run(&dcfg, batch_rx, out_tx))?;
    let collector = std::thread::Builder::new()
        .name("argus-collect".into())
        .spawn(move || GraphSink::collect(out_rx))?;

    let mut threads: BTreeMap<i32, ThreadInfo> = BTreeMap::new();
    let mut lost: BTreeMap<u32, u64> = BTreeMap::new();
    let mut lost_ranges: Vec<(u32, u64, u64, Option<u64>)> = Vec::new();
    let mut unknown = 0u64;
    let mut stacks_lost = 0u64;
    let mut errors: Vec<ErrorRecord> = Vec::new();
    let mut events_total = 0u64;
    let mut seq_base = 0u64;
    let mut trace_start: Option<Nanos> = None;
    let mut trace_end = Nanos(0);
    let mut wall_offset: Option<i64> = None;
    let mut recorder_tids: std::collections::BTreeSet<i32> = Default::default();
    let mut batch: Vec<Event> = Vec::with_capacity(cfg.batch);
    let mut feed_failed = false;
    let progress = crate::progress::BuildProgress::new();

    let mut result: Result<()> = Ok(());
    for reader in readers {
        let dir = reader.dir().to_path_buf();
        let meta = reader.meta().clone();
        // The first trace's wall-clock offset (traces of one machine share their clocks).
        wall_offset = wall_offset.or(meta.wall_offset_ns);
        recorder_tids.extend(meta.excluded_tids.iter().copied());
        let start = Nanos(reader.start_ns());
        trace_start = Some(trace_start.map_or(start, |s| s.min(start)));
        for (cpu, from) in reader.complete_from() {
            errors.push(ErrorRecord {
                source: format!("{}/cpu{cpu}", dir.display()),
                offset: None,
                ts: Some(Nanos(*from)),
                message:
                    "the recorder's ring deleted this cpu's older chunks: its data starts here"
                        .to_string(),
            });
        }
        for (cpu, ranges) in &reader.meta_ext().lost_ranges {
            for r in ranges {
                lost_ranges.push((*cpu, r.from_ns, r.to_ns, r.events));
                errors.push(ErrorRecord {
                    source: format!("{}/cpu{cpu}", dir.display()),
                    offset: None,
                    ts: Some(Nanos(r.from_ns)),
                    message: format!(
                        "events lost from {} to {} ns ({}): no edge is made across this gap; threads running then may miss segments",
                        r.from_ns,
                        r.to_ns,
                        r.events.map_or("count unknown".to_string(), |n| format!("{n} events"))
                    ),
                });
            }
        }
        trace_end = trace_end.max(Nanos(meta.end_ns));
        let mut events = reader.events();
        let mut stacks = stacks::StackCollector::for_trace(&dir);
        let base = seq_base;
        let mut last_seq = None;
        let mut last_ts = Nanos(0);
        let tee = (&mut events).map(|r| {
            r.map(|mut ev| {
                ev.seq += base;
                stacks.observe(&ev);
                last_seq = Some(ev.seq);
                last_ts = ev.ts;
                progress.tick();
                ev
            })
        });
        let written = writer
            .try_write_events_then(tee, |ev| {
                feed(&mut batch, ev, cfg.batch, &batch_tx, &mut feed_failed)
            })
            .with_context(|| format!("decoding {}", dir.display()));
        let written = written.and_then(|_| {
            stacks
                .finish(&dir, events.kallsyms().cloned(), &mut writer)
                .with_context(|| format!("stacks of {}", dir.display()))
        });
        if let Ok(done) = &written {
            if done.lost > 0 {
                stacks_lost += done.lost;
                errors.push(ErrorRecord {
                    source: format!("{}/perf", dir.display()),
                    offset: None,
                    ts: None,
                    message: format!(
                        "the recorder's perf rings lost {} stack samples: those events have no stack",
                        done.lost
                    ),
                });
            }
        }
        let summary = events.finish();
        if let Err(e) = written {
            result = Err(e);
            break;
        }
        events_total += summary.events;
        seq_base = last_seq.map_or(seq_base, |s| s + 1);
        if meta.end_ns == 0 {
            // Still recording, or the recorder died: the trace ends with its last event.
            trace_end = trace_end.max(last_ts);
        }
        for t in summary.threads.iter().cloned() {
            threads.insert(t.tid.0, t);
        }
        for (cpu, n) in summary.lost() {
            let rec = summary.recorder_lost.get(&cpu).copied().unwrap_or(0);
            *lost.entry(cpu).or_insert(0) += n.max(rec);
        }
        unknown += summary.skipped.unknown_ids.values().sum::<u64>();
        for (cpu, st) in &summary.cpus {
            if st.lost > 0 || st.lost_unknown_pages > 0 {
                errors.push(ErrorRecord {
                    source: format!("{}/cpu{cpu}", dir.display()),
                    offset: None,
                    ts: None,
                    message: format!(
                        "kernel lost {} events ({} pages flagged without a count): edges across the gaps may be missing",
                        st.lost, st.lost_unknown_pages
                    ),
                });
            }
        }
    }
    if let Some(imp) = &imported {
        let sum = imp.summary();
        trace_start = sum.start_ns.or(trace_start);
        trace_end = trace_end.max(sum.end_ns.unwrap_or_default());
        for e in imp.errors() {
            // Lines that could not be read are skipped, kept in errors.parquet, and counted.
            errors.push(e.to_error_record());
        }
        if !imp.errors().is_empty() {
            eprintln!(
                "argus: warning: {} lines of {} could not be read and were skipped (first: {}); see errors.parquet",
                imp.errors().len(),
                imp.path().display(),
                imp.errors()[0]
            );
        }
        for &(cpu, from, to, n) in &sum.lost_ranges {
            lost_ranges.push((cpu, from, to, n));
            errors.push(ErrorRecord {
                source: format!("{} cpu{cpu}", imp.path().display()),
                offset: None,
                ts: Some(Nanos(from)),
                message: format!(
                    "events lost from {from} to {to} ns ({}): no edge is made across this gap; threads running then may miss segments",
                    n.map_or("count unknown".to_string(), |n| format!("{n} events"))
                ),
            });
        }
        for note in &sum.notes {
            eprintln!("argus: note: {}: {note}", imp.path().display());
        }
        let tee = imp.event_slice().iter().map(|ev| {
            progress.tick();
            Ok::<_, std::convert::Infallible>(ev)
        });
        let fed = writer.try_write_events_then(tee, |ev| {
            feed(
                &mut batch,
                ev.clone(),
                cfg.batch,
                &batch_tx,
                &mut feed_failed,
            )
        });
        match fed {
            Ok(n) => events_total += n,
            Err(e) => result = Err(e.into()),
        }
        for t in imp.threads() {
            threads.insert(t.tid.0, t.clone());
        }
        if sum.lost > 0 {
            *lost.entry(0).or_insert(0) += sum.lost;
        }
        unknown += sum.unknown.values().sum::<u64>();
    }
    if result.is_ok() && !batch.is_empty() && !feed_failed {
        let events = std::mem::take(&mut batch);
        let watermark = events.last().map(|e| e.ts).unwrap_or_default();
        if batch_tx.send(Batch { events, watermark }).is_err() {
            feed_failed = true;
        }
    }
    drop(batch_tx);
    progress.finish();
    let flow_result = flow
        .join()
        .map_err(|_| anyhow::anyhow!("the dataflow thread panicked"))?;
    let collected = collector
        .join()
        .map_err(|_| anyhow::anyhow!("the output collector panicked"))?;
    result?;
    flow_result.context("running the dataflow")?;
    if feed_failed {
        bail!("the dataflow stopped reading its input");
    }
    let (last_epoch, watermark) = collected.done.unwrap_or((Epoch(0), Nanos(0)));
    let threads: Vec<ThreadInfo> = threads.into_values().collect();
    let mut summary = BuildSummary {
        stats: None,
        events: events_total,
        epochs: collected.epochs,
        segments: 0,
        edges: 0,
        spins: 0,
        threads: threads.len(),
        lost: lost.clone(),
        lost_ranges,
        unknown,
        stacks_lost,
        elapsed: Duration::ZERO,
        output: cfg.output.clone(),
    };
    // The collector's sorted (packed) runs, merged as they are read; records whose net count is
    // not 1 (the dataflow's invariant) are written once or left out, and reported once written
    // (inconsistent.rs: why the build keeps going).
    let mut bad_segments = Inconsistent::<Segment>::default();
    let mut bad_edges = Inconsistent::<CausalEdge>::default();
    let mut bad_spins = Inconsistent::<Spin>::default();
    let segments = bad_segments.filter(collected.segments.into_sorted());
    let edges = bad_edges.filter(collected.edges.into_sorted());
    let spins = bad_spins.filter(collected.spins.into_sorted());
    // Segments and edges are written at once (edges from a second thread).
    let (n_segments, n_edges, n_spins) = if cfg.stats || !summary.lost_ranges.is_empty() {
        // The statistics and the gap marks need the whole graph in memory.
        let graph = argus_pipeline::Graph {
            segments: segments.collect(),
            edges: edges.collect(),
            spins: spins.collect(),
            counts: collected.counts.clone(),
        };
        summary.stats = cfg
            .stats
            .then(|| argus_pipeline::stats::GraphStats::of(&graph));
        // Which threads' segments a lost-events gap touched.
        errors.extend(crate::gap_rows::touched(
            &graph.segments,
            &summary.lost_ranges,
        ));
        let (s, e) = writer.write_segments_and_edges(&graph.segments, &graph.edges)?;
        (s, e, writer.write_spins(&graph.spins)?)
    } else {
        // Streamed: no consolidated copy of millions of segments is built first.
        let (s, e) = writer.write_segments_and_edges(segments, edges)?;
        (s, e, writer.write_spins(spins)?)
    };
    for report in [
        bad_segments.report("segments", &threads),
        bad_edges.report("edges", &threads),
        bad_spins.report("spins", &threads),
    ]
    .into_iter()
    .flatten()
    {
        // Shown even with --quiet: the graph has a known defect.
        eprintln!("{}", report.warning);
        errors.extend(report.rows);
    }
    summary.segments = n_segments as usize;
    summary.edges = n_edges as usize;
    summary.spins = n_spins as usize;
    writer.write_threads(&threads)?;
    writer.write_errors(&errors)?;
    writer
        .finish(SnapshotInfo {
            sources: cfg.traces.clone(),
            trace_start_ns: trace_start,
            trace_end_ns: (trace_end.0 > 0).then_some(trace_end),
            epoch: last_epoch,
            watermark_ns: watermark,
            lost_events: lost,
            lost_ranges: summary
                .lost_ranges
                .iter()
                .map(|&(_, from, to, _)| (Nanos(from), Nanos(to)))
                .collect(),
            unknown_events: unknown,
            threshold_ns: cfg.dataflow.rules.spin_threshold_ns,
            workers: cfg.dataflow.workers as u32,
            wall_offset_ns: wall_offset,
            recorder_tids: recorder_tids.into_iter().collect(),
            ..SnapshotInfo::default()
        })
        .with_context(|| format!("writing snapshot {}", cfg.output.display()))?;
    Ok(BuildSummary {
        elapsed: started.elapsed(),
        ..summary
    })
}
