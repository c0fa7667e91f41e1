//! The query server of `argus start`: `DIR/argus.sock` (0600), the protocol of
//! docs/query-protocol.md (`crate::live::protocol`), answered from the job's live
//! graph (`live_graph.rs`), fed by the collector the snapshots come from; `hangs` from the spins its
//! collector published at its last epoch ([`LiveSpins`]), which the live graph may lag.
//!
//! ```text
//!  argus-serve: accept ─► argus-query (a thread per client, at most MAX_CLIENTS)
//!                           line ─► parse ─► status | hangs | diagnose | fetch ─► line
//!                                               │ reads as of an epoch
//!                                               ▼
//!                           Served: the generation's LiveGraph handle,
//!                                   the live merge's thread table and lost ranges
//!                                   (published by the main loop every tick)
//! ```
//!
//! A `diagnose` runs on its client's thread: the rounds of `argus_diagnose::partial`, each
//! fetching what the walk lacked from the live graph's worker (a few seeks per need), so a
//! slow diagnosis or many clients never hold the worker for long. A client that hangs up
//! mid-request loses its answer and nothing else: its thread ends at the failed write, the
//! worker's reply goes to a dropped channel.
//!
//! **The socket's life.** Bound under a temporary name, made 0600 and renamed into place (it
//! is never reachable with wider permissions under its own name); a socket left by a job
//! killed with `kill -9` is replaced at the next start (a socket some live job still answers
//! on is an error: two jobs in one directory); removed when the job stops.

use super::flow::LiveSpins;
use super::live_graph::{LiveGraph, ReadError};
use super::sync::lock;
use crate::diagnosis;
use crate::live::protocol::{
    self, AsOf, Code, DiagnoseQuery, Failure, FetchQuery, HangsQuery, Op, MAX_LINE,
};
use crate::live::SOCKET;
use anyhow::{Context, Result};
use argus_diagnose::{rounds, AppEvents, Replay, ScriptedOracle, Whole};
use argus_pipeline::arranged::QueryError;
use argus_schema::{Event, Nanos, ThreadInfo, Tid};
use crossbeam_channel::Sender;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Clients served at once; one more gets a `busy` error.
pub(crate) const MAX_CLIENTS: usize = 16;

/// What the server reads, shared with the main loop.
pub(crate) struct Served {
    /// The running generation's live graph and its collector's spins (none before it
    /// starts and once it stops).
    graphs: Mutex<Vec<(LiveGraph, Arc<LiveSpins>)>>,
    /// The tables of the last [`TABLE_EPOCHS`] global epochs, oldest first.
    tables: Mutex<VecDeque<(u64, Tables)>>,
    /// The markers and data-flag accesses of the retained window, as released.
    app: Mutex<AppEvents>,
    /// The main loop ticks far apart on a quiet machine (`cycle.rs`): a query for the
    /// newest state then asks it for a tick at once ([`Served::freshen`]).
    pub(crate) quiet: AtomicBool,
    /// Asks the main loop for a tick now (`try_send`; one pending request is enough).
    tick_now: Sender<()>,
}

/// The longest a query waits for the tick it asked for on a quiet machine.
const FRESH_WAIT: Duration = Duration::from_secs(3);

/// Epochs whose tables are kept: more than a live graph can be read at
/// ([`QUERY_EPOCHS`](super::live_graph::QUERY_EPOCHS)) plus what its worker may lag.
const TABLE_EPOCHS: usize = 256;

/// The tables a live diagnosis takes whole, as they stood when an epoch was sent: a snapshot
/// of that epoch holds the same.
#[derive(Clone, Default)]
pub(crate) struct Tables {
    pub(crate) threads: Arc<Vec<ThreadInfo>>,
    pub(crate) lost: Arc<Vec<(Nanos, Nanos)>>,
}

impl Served {
    /// What the server reads; `tick_now` reaches the main loop ([`Served::freshen`]).
    pub(crate) fn new(tick_now: Sender<()>) -> Served {
        Served {
            graphs: Mutex::new(Vec::new()),
            tables: Mutex::new(VecDeque::new()),
            app: Mutex::new(AppEvents::default()),
            quiet: AtomicBool::new(false),
            tick_now,
        }
    }

    /// On a quiet machine, where the main loop ticks up to seconds apart, asks it for a
    /// tick now and waits (at most [`FRESH_WAIT`]) until `done()` has passed what it was:
    /// a query for the newest state sees what happened up to the moment it was asked, as
    /// on a busy machine. On a busy one, nothing (a tick is at most 200 ms away).
    fn freshen(&self, done: impl Fn() -> Option<u64>) {
        if !self.quiet.load(Ordering::Relaxed) {
            return;
        }
        let before = done();
        let _ = self.tick_now.try_send(());
        let until = Instant::now() + FRESH_WAIT;
        while done() == before && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Keeps the markers and data-flag accesses among `events` (released in time order),
    /// and none from before `window_start` (the retained window's start).
    pub(crate) fn push_app(&self, events: &[Event], window_start: Nanos) {
        let mut app = lock(&self.app);
        for e in events {
            app.push(e);
        }
        app.markers.retain(|m| m.ts >= window_start);
        app.flags.retain(|f| f.ts >= window_start);
    }

    /// The markers and data-flag accesses up to `watermark` (what a snapshot of the epoch
    /// with that watermark has in its events table, within the retained window).
    pub(crate) fn app_until(&self, watermark: Nanos) -> AppEvents {
        let app = lock(&self.app);
        let mut out = AppEvents {
            markers: app
                .markers
                .iter()
                .filter(|m| m.ts <= watermark)
                .cloned()
                .collect(),
            flags: app
                .flags
                .iter()
                .filter(|f| f.ts <= watermark)
                .copied()
                .collect(),
        };
        out.sort();
        out
    }

    /// The running generation's live graph, with its collector's spins.
    pub(crate) fn set_graphs(&self, graphs: Vec<(LiveGraph, Arc<LiveSpins>)>) {
        *lock(&self.graphs) = graphs;
    }

    /// The live merge's thread table and the lost-events ranges of the retained window as
    /// global epoch `epoch` is sent.
    pub(crate) fn set_tables(
        &self,
        epoch: u64,
        threads: Vec<ThreadInfo>,
        lost: Vec<(Nanos, Nanos)>,
    ) {
        let mut t = lock(&self.tables);
        t.push_back((
            epoch,
            Tables {
                threads: Arc::new(threads),
                lost: Arc::new(lost),
            },
        ));
        while t.len() > TABLE_EPOCHS {
            t.pop_front();
        }
    }

    /// The tables as global epoch `epoch` was sent (the last ones before it when that epoch
    /// was not a tick's, the newest when it is too old).
    fn tables(&self, epoch: u64) -> Tables {
        let t = lock(&self.tables);
        t.iter()
            .rev()
            .find(|(e, _)| *e <= epoch)
            .or(t.back())
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    }

    /// The generation's live graph and the spins its collector published last.
    fn oldest(&self) -> Result<(LiveGraph, Arc<LiveSpins>), Failure> {
        lock(&self.graphs)
            .first()
            .cloned()
            .ok_or_else(|| Failure::new(Code::NotReady, "no dataflow generation runs"))
    }

    /// The running generation's graph; with `id`, only if it is that one.
    fn graph(&self, id: Option<u64>) -> Result<(LiveGraph, usize), Failure> {
        let graphs = lock(&self.graphs);
        let n = graphs.len();
        let g = match id {
            None => graphs.first(),
            Some(id) => graphs.iter().find(|(g, _)| g.generation == id),
        };
        match g {
            Some((g, _)) => Ok((g.clone(), n)),
            None if id.is_some() => Err(Failure::new(
                Code::Gone,
                format!(
                    "generation {} is not running any more: ask again without one",
                    id.unwrap_or_default()
                ),
            )),
            None => Err(Failure::new(Code::NotReady, "no dataflow generation runs")),
        }
    }
}

/// The server: its socket and accepting thread. Dropping it stops both and removes the
/// socket.
pub(crate) struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `served` on `DIR/argus.sock`.
    pub(crate) fn start(dir: &Path, served: Arc<Served>) -> Result<Server> {
        let path = dir.join(SOCKET);
        if path.exists() {
            if UnixStream::connect(&path).is_ok() {
                anyhow::bail!(
                    "another job answers on {}: one `argus start` per directory",
                    path.display()
                );
            }
            std::fs::remove_file(&path)
                .with_context(|| format!("removing the stale {}", path.display()))?;
        }
        let tmp = dir.join(format!(".{SOCKET}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let listener =
            UnixListener::bind(&tmp).with_context(|| format!("binding {}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making {} 0600", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let accept = std::thread::Builder::new()
            .name("argus-serve".into())
            .spawn(move || accept_loop(listener, served, stop2))?;
        Ok(Server {
            path,
            stop,
            accept: Some(accept),
        })
    }

    /// The socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accepting thread (it checks the flag after each connection).
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Decrements the client count when a client's thread ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: UnixListener, served: Arc<Served>, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut stream = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("{SOCKET}: accepting a client: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            active.fetch_sub(1, Ordering::SeqCst);
            let busy = Failure::new(
                Code::Busy,
                format!("{MAX_CLIENTS} clients are being served: try again"),
            );
            let _ = writeln!(stream, "{}", protocol::response(&Value::Null, Err(busy)));
            continue;
        }
        let slot = Slot(active.clone());
        let served = served.clone();
        let spawned = std::thread::Builder::new()
            .name("argus-query".into())
            .spawn(move || {
                let _slot = slot;
                client(stream, &served);
            });
        if let Err(e) = spawned {
            tracing::warn!("{SOCKET}: starting a client's thread: {e}");
        }
    }
}

/// Serves one client: a response line per request line, until it hangs up.
fn client(stream: UnixStream, served: &Served) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        match (&mut reader).take(MAX_LINE as u64 + 1).read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with('\n') {
            if line.len() > MAX_LINE {
                let f = Failure::new(
                    Code::BadRequest,
                    format!("a request line is at most {MAX_LINE} bytes"),
                );
                let _ = writeln!(writer, "{}", protocol::response(&Value::Null, Err(f)));
            }
            // Longer than allowed, or the client hung up mid-line: nothing to answer.
            return;
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let answer = match protocol::parse(text) {
            Ok(req) => protocol::response(&req.id, handle(served, req.op)),
            Err((id, f)) => protocol::response(&id, Err(f)),
        };
        if writeln!(writer, "{answer}").is_err() {
            return; // The client hung up: its answer goes nowhere.
        }
    }
}

fn handle(served: &Served, op: Op) -> Result<Value, Failure> {
    match op {
        Op::Status { .. } => status(served),
        Op::Hangs(q) => hangs(served, &q),
        Op::Diagnose(q) => diagnose(served, &q),
        Op::Fetch(q) => fetch_parts(served, q),
    }
}

fn read_failure(e: ReadError) -> Failure {
    match e {
        ReadError::Gone => Failure::new(Code::Gone, e.to_string()),
        ReadError::Query(q @ QueryError::Compacted { .. }) => {
            Failure::new(Code::Compacted, q.to_string())
        }
        ReadError::Query(q) => Failure::new(Code::NotReady, q.to_string()),
    }
}

/// The epoch a read is as of: `(local epoch, global epoch, watermark)`.
fn pick(g: &LiveGraph, as_of: AsOf) -> Result<(u64, u64, Nanos), Failure> {
    let st = g.status();
    if st.fell_behind {
        return Err(Failure::new(
            Code::Gone,
            "this generation's live graph fell behind the dataflow and is given up until the job has caught up (it is then seeded anew from the job's graph)",
        ));
    }
    if st.ended {
        return Err(read_failure(ReadError::Gone));
    }
    let (Some(&(first, _)), Some(&(last, last_w))) = (st.epochs.front(), st.epochs.back()) else {
        return Err(Failure::new(
            Code::NotReady,
            "the live graph has no complete epoch yet",
        ));
    };
    let global = |local: u64| g.first_epoch + local;
    let range = || format!("epochs {} to {} can be read", global(first), global(last));
    let local = if let Some(w) = as_of.watermark_ns {
        match st.epochs.iter().rev().find(|(_, x)| x.0 == w) {
            Some(&(e, _)) => e,
            None if w > last_w.0 => {
                return Err(Failure::new(
                    Code::NotReady,
                    format!("no epoch of watermark {w} yet ({})", range()),
                ))
            }
            None => {
                return Err(Failure::new(
                    Code::Compacted,
                    format!("no readable epoch has watermark {w} ({})", range()),
                ))
            }
        }
    } else if let Some(e) = as_of.epoch {
        match e.checked_sub(g.first_epoch) {
            Some(l) if l > last => {
                return Err(Failure::new(
                    Code::NotReady,
                    format!("epoch {e} is not complete yet ({})", range()),
                ))
            }
            Some(l) if l >= first => l,
            _ => {
                return Err(Failure::new(
                    Code::Compacted,
                    format!("epoch {e} is compacted away ({})", range()),
                ))
            }
        }
    } else {
        last
    };
    let watermark = st
        .epochs
        .iter()
        .find(|(e, _)| *e == local)
        .map_or(last_w, |(_, w)| *w);
    Ok((local, global(local), watermark))
}

fn status(served: &Served) -> Result<Value, Failure> {
    let (g, generations) = served.graph(None)?;
    let st = g.status();
    let last = st.epochs.back().copied();
    let t = served.tables(last.map_or(u64::MAX, |(e, _)| g.first_epoch + e));
    Ok(json!({
        "protocol": protocol::VERSION,
        "pid": std::process::id(),
        "generation": g.generation,
        "generations": generations,
        "epoch": last.map(|(e, _)| g.first_epoch + e),
        "watermark_ns": last.map(|(_, w)| w.0),
        "readable_epochs": st.epochs.front().zip(last).map(|(a, b)| [g.first_epoch + a.0, g.first_epoch + b.0]),
        "trace_start_ns": served.oldest()?.1.window_start(g.start_ns).0,
        "fell_behind": st.fell_behind,
        "reseeded": st.reseeded,
        "counts": {
            "segments": st.segments,
            "open_segments": st.open_segments,
            "edges": st.edges,
            "spins": st.spins,
            "threads": t.threads.len(),
            "lost_ranges": t.lost.len(),
        },
    }))
}

fn hangs(served: &Served, q: &HangsQuery) -> Result<Value, Failure> {
    // The collector's spins, not the live graph's: the same records, current as soon as the
    // dataflow has done an epoch however far the live graph's worker lags.
    let (g, collected) = served.oldest()?;
    served.freshen(|| collected.latest().done.map(|(e, _)| e));
    let published = collected.latest();
    let Some((local, watermark)) = published.done else {
        return Err(Failure::new(
            Code::NotReady,
            "the dataflow has no complete epoch yet",
        ));
    };
    let epoch = g.first_epoch + local;
    let graph_epoch = g.status().epochs.back().map(|(e, _)| g.first_epoch + e);
    let spins = published.spins.iter();
    let t = served.tables(epoch);
    let by_tid: HashMap<Tid, &ThreadInfo> = t.threads.iter().map(|t| (t.tid, t)).collect();
    let mut out = Vec::new();
    for s in spins {
        let info = by_tid.get(&s.tid);
        let comm = info.map_or(String::new(), |i| i.comm.clone());
        let process = info.map_or(String::new(), |i| i.process.clone());
        if q.pid.is_some_and(|p| p != s.pid.0)
            || q.tid.is_some_and(|x| x != s.tid.0)
            || q.comm.as_ref().is_some_and(|c| *c != comm && *c != process)
            || q.open.is_some_and(|o| o != s.open)
        {
            continue;
        }
        let end = if s.open {
            s.end_ns.max(watermark)
        } else {
            s.end_ns
        };
        out.push(json!({
            "segment": s.segment,
            "label": s.segment.to_string(),
            "tid": s.tid,
            "pid": s.pid,
            "comm": comm,
            "process": process,
            "class": s.class.name(),
            "start_ns": s.start_ns,
            "end_ns": end,
            "open": s.open,
            "duration_ns": s.start_ns.until(end),
        }));
    }
    Ok(json!({
        "epoch": epoch,
        "generation": g.generation,
        "watermark_ns": watermark,
        "graph_epoch": graph_epoch,
        "hangs": out,
    }))
}

fn diagnose(served: &Served, q: &DiagnoseQuery) -> Result<Value, Failure> {
    let started = Instant::now();
    if q.pid.is_none() && q.tid.is_none() && q.comm.is_none() {
        return Err(Failure::new(
            Code::BadRequest,
            "diagnose: name the target: pid, tid or comm",
        ));
    }
    let (g, _) = served.graph(q.generation)?;
    if q.epoch.is_none() && q.watermark_ns.is_none() {
        served.freshen(|| g.status().epochs.back().map(|&(e, _)| e));
    }
    let (local, epoch, watermark) = pick(&g, q.as_of())?;
    let spins = g.spins(local).map_err(read_failure)?;
    let t = served.tables(epoch);
    let whole = Whole {
        threads: t.threads.to_vec(),
        spins,
        trace_end_ns: watermark,
        lost: t.lost.to_vec(),
        app: served.app_until(watermark),
    };
    let cfg = diagnosis::config(
        q.threshold,
        q.loop_wait.as_deref(),
        q.beam,
        q.lookback,
        q.top,
    )
    .map_err(|e| Failure::new(Code::BadRequest, format!("diagnose: {e:#}")))?;
    let mut oracle = ScriptedOracle::parse(&q.answers.join("\n"))
        .map_err(|e| Failure::new(Code::BadRequest, format!("diagnose: answers: {e}")))?;
    let seed = crate::live::seed_for(&whole, q.pid, q.tid, q.comm.as_deref());
    let mut replay = Replay::new();
    let result = rounds(
        &whole,
        seed,
        |needs| {
            g.fetch(local, needs.to_vec())
                .map_err(|e| anyhow::Error::new(read_failure(e)))
        },
        |graph| {
            let target = diagnosis::resolve_target(graph, q.pid, q.tid, q.comm.as_deref())?;
            let mut o = replay.round(graph, &mut oracle);
            Ok(argus_diagnose::diagnose(graph, target, &mut o, &cfg)?)
        },
    );
    let (diagnosis, stats) = result.map_err(|e| {
        if let Some(f) = e.downcast_ref::<Failure>() {
            f.clone()
        } else if e.downcast_ref::<diagnosis::NoSuchTarget>().is_some() {
            Failure::new(Code::NotFound, format!("{e:#}"))
        } else {
            Failure::new(Code::Internal, format!("{e:#}"))
        }
    })?;
    Ok(json!({
        "epoch": epoch,
        "generation": g.generation,
        "watermark_ns": watermark,
        "rounds": stats.rounds,
        "segments": stats.segments,
        "edges": stats.edges,
        "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
        "diagnosis": diagnosis.to_json(),
    }))
}

fn fetch_parts(served: &Served, q: FetchQuery) -> Result<Value, Failure> {
    let (g, _) = served.graph(q.generation)?;
    let (local, epoch, watermark) = pick(&g, q.as_of())?;
    let parts = g.fetch(local, q.needs).map_err(read_failure)?;
    let mut out = json!({
        "epoch": epoch,
        "generation": g.generation,
        "watermark_ns": watermark,
        "parts": parts,
    });
    if q.whole {
        let spins = g.spins(local).map_err(read_failure)?;
        let t = served.tables(epoch);
        out["whole"] = json!({
            "threads": *t.threads,
            "spins": spins,
            "lost": *t.lost,
            "app": served.app_until(watermark),
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::Pid;

    /// On a quiet machine a query for the newest state asks the main loop for a tick and
    /// waits until the epoch it read moves; on a busy one it neither asks nor waits.
    #[test]
    fn a_query_on_a_quiet_machine_asks_for_a_tick_and_waits_for_it() {
        let (tx, asked) = crossbeam_channel::bounded(1);
        let served = Served::new(tx);
        let epoch = Arc::new(AtomicUsize::new(7));
        served.freshen(|| Some(epoch.load(Ordering::SeqCst) as u64));
        assert!(asked.try_recv().is_err(), "busy: no tick asked");
        served.quiet.store(true, Ordering::SeqCst);
        let ticker = {
            let epoch = epoch.clone();
            std::thread::spawn(move || {
                asked
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a tick is asked");
                std::thread::sleep(Duration::from_millis(50));
                epoch.store(8, Ordering::SeqCst);
            })
        };
        served.freshen(|| Some(epoch.load(Ordering::SeqCst) as u64));
        assert_eq!(
            epoch.load(Ordering::SeqCst),
            8,
            "answered after the new epoch"
        );
        ticker.join().unwrap();
    }

    /// Markers and flag hits are kept for the retained window and served up to the epoch's
    /// watermark; other events are not kept.
    #[test]
    fn app_events_are_kept_for_the_window_and_served_up_to_the_watermark() {
        let ev = |ts: u64, kind: argus_schema::EventKind| Event {
            ts: Nanos(ts),
            seq: ts,
            cpu: argus_schema::Cpu(0),
            pid: Pid(5),
            tid: Tid(5),
            ctx: argus_schema::Context::Task,
            kind,
        };
        let marker = |ts, text: &str| {
            ev(
                ts,
                argus_schema::EventKind::Marker {
                    text: text.to_string(),
                },
            )
        };
        let served = Served::new(crossbeam_channel::bounded(1).0);
        served.push_app(
            &[
                marker(10, "argus:hang-begin"),
                ev(20, argus_schema::EventKind::Exit),
                ev(
                    30,
                    argus_schema::EventKind::FlagAccess {
                        addr: 0x1000,
                        write: true,
                    },
                ),
            ],
            Nanos(0),
        );
        served.push_app(&[marker(40, "argus:flag-set")], Nanos(15));
        let all = served.app_until(Nanos(100));
        assert_eq!(
            all.markers.iter().map(|m| m.ts.0).collect::<Vec<_>>(),
            vec![40],
            "the marker before the window is gone"
        );
        assert_eq!(all.flags.len(), 1);
        let early = served.app_until(Nanos(35));
        assert!(early.markers.is_empty());
        assert_eq!(early.flags.len(), 1);
    }

    fn thread(tid: i32, comm: &str) -> ThreadInfo {
        ThreadInfo {
            tid: Tid(tid),
            pid: Pid(tid),
            comm: comm.into(),
            process: comm.into(),
            parent: None,
            start_ns: None,
            exit_ns: None,
            kernel: false,
        }
    }

    /// `hangs` reads the spins the generation's collector published at its last epoch, with
    /// the live graph's own epoch beside them: a hang is known as soon as the dataflow has
    /// seen it, however far the live graph lags (here it was fed nothing: no epoch at all).
    #[test]
    fn hangs_answer_from_the_dataflows_spins_however_far_the_live_graph_lags() {
        let (graph, forward, worker) = LiveGraph::start(3, 100, Nanos(0), None, None).unwrap();
        let (notify, woken) = crossbeam_channel::bounded(1);
        let spins = LiveSpins::new(notify);
        let served = Served::new(crossbeam_channel::bounded(1).0);
        served.set_graphs(vec![(graph.clone(), spins.clone())]);
        served.set_tables(100, vec![thread(7, "app"), thread(8, "other")], Vec::new());
        let all = HangsQuery::default();
        let err = hangs(&served, &all).unwrap_err();
        assert_eq!(err.code, Code::NotReady, "no epoch done yet");

        let mut closed = crate::job::watch::tests::spin(8 << 32, 8, 8, 1_000, 5_000);
        closed.open = false;
        let open = crate::job::watch::tests::spin(7 << 32, 7, 7, 2_000, 3_000);
        spins.publish(5, Nanos(9_000), Some(vec![closed, open]));
        assert!(
            woken.try_recv().is_ok(),
            "a change of spins wakes the main loop"
        );
        let v = hangs(&served, &all).unwrap();
        assert_eq!(
            v["epoch"], 105,
            "the generation's first epoch + the local epoch"
        );
        assert_eq!(v["watermark_ns"], 9_000);
        assert!(v["graph_epoch"].is_null(), "the live graph has no epoch");
        let h = v["hangs"].as_array().unwrap();
        assert_eq!(h.len(), 2);
        let of = |tid: i32| h.iter().find(|x| x["tid"] == tid).unwrap();
        assert_eq!(of(7)["comm"], "app");
        assert_eq!(of(7)["open"], true);
        assert_eq!(of(7)["end_ns"], 9_000, "an open spin runs to the watermark");
        assert_eq!(of(7)["duration_ns"], 7_000);
        assert_eq!(of(8)["duration_ns"], 4_000, "a closed spin keeps its end");

        // A later epoch with the same spins moves the watermark, not the spins.
        spins.publish(6, Nanos(12_000), None);
        assert!(woken.try_recv().is_err(), "no change of spins, no wake-up");
        let only_open: HangsQuery =
            serde_json::from_value(json!({"open": true, "comm": "app"})).unwrap();
        let v = hangs(&served, &only_open).unwrap();
        assert_eq!(v["epoch"], 106);
        let h = v["hangs"].as_array().unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0]["duration_ns"], 10_000);

        graph.stop.store(true, Ordering::Relaxed);
        drop(forward);
        drop(graph);
        served.set_graphs(Vec::new());
        worker.join().unwrap();
    }
}
