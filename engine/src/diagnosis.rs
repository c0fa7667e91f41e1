//! What `argus debug`'s flags mean for a diagnosis, shared by `debug`, `export`, `follow`
//! and the live job's query server (`job/serve.rs`): the [`DiagnoseConfig`] of the
//! threshold, event-loop wait and beam flags, the saved answers of `--save-answers`, and the
//! target `--pid` / `--tid` / `--comm` name in a graph.

use anyhow::{bail, Context, Result};
use argus_diagnose::DiagnoseConfig;

/// The diagnosis configuration from `argus debug` flags.
pub fn config(
    threshold: f64,
    loop_wait: Option<&str>,
    beam: usize,
    lookback: usize,
    top: usize,
) -> Result<DiagnoseConfig> {
    if !(threshold.is_finite() && threshold > 0.0) {
        bail!("--threshold must be a positive number of seconds, got {threshold}");
    }
    if beam == 0 || lookback == 0 || top == 0 {
        bail!("--beam, --lookback and --top must be at least 1");
    }
    let mut cfg = DiagnoseConfig::default();
    cfg.hang.threshold_ns = (threshold * 1e9) as u64;
    cfg.hang.loop_wait = match loop_wait {
        Some(name) => Some(
            argus_schema::syscalls::number(name)
                .with_context(|| format!("--loop-wait: unknown syscall {name:?}"))?,
        ),
        None => None,
    };
    cfg.beam.width = beam;
    cfg.beam.lookback = lookback;
    cfg.beam.top_k = top;
    Ok(cfg)
}

/// The rules of a saved-answers file (`--save-answers`), empty when it does not exist yet.
pub fn saved_answers(file: Option<&std::path::Path>) -> Result<argus_diagnose::SavedAnswers> {
    match file {
        Some(f) if f.exists() => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading saved answers {}", f.display()))?;
            argus_diagnose::SavedAnswers::parse(&text)
                .with_context(|| format!("parsing saved answers {}", f.display()))
        }
        _ => Ok(argus_diagnose::SavedAnswers::default()),
    }
}

/// A vertex as the user writes it: `tid#seq`.
pub fn parse_vertex(text: &str) -> Result<argus_schema::SegmentId> {
    let (tid, seq) = text
        .split_once('#')
        .with_context(|| format!("{text:?} is not a vertex: write it as tid#seq"))?;
    let tid: i32 = tid
        .parse()
        .with_context(|| format!("{text:?}: {tid:?} is not a thread id"))?;
    let seq: u32 = seq
        .parse()
        .with_context(|| format!("{text:?}: {seq:?} is not a sequence number"))?;
    Ok(argus_schema::SegmentId::new(argus_schema::Tid(tid), seq))
}

/// A target the trace does not hold: `argus debug` says so, the query server answers
/// `not_found`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoSuchTarget(pub(crate) String);

/// The target `--pid` / `--tid` / `--comm` name in `graph` (`None`: every main thread).
pub fn resolve_target(
    graph: &argus_diagnose::Graph,
    pid: Option<i32>,
    tid: Option<i32>,
    comm: Option<&str>,
) -> Result<Option<argus_diagnose::Target>> {
    let target = match (pid, tid, comm) {
        (Some(pid), tid, _) => Some(argus_diagnose::Target {
            pid: argus_schema::Pid(pid),
            // A macOS trace's main thread is not numbered as its process.
            tid: tid
                .map(argus_schema::Tid)
                .or_else(|| Some(graph.main_thread(argus_schema::Pid(pid))).filter(|t| t.0 != pid)),
        }),
        (None, Some(tid), _) => {
            let tid = argus_schema::Tid(tid);
            let pid = graph
                .pid_of(tid)
                .ok_or_else(|| NoSuchTarget(format!("thread {} is not in the trace", tid.0)))?;
            Some(argus_diagnose::Target {
                pid,
                tid: Some(tid),
            })
        }
        (None, None, Some(name)) => Some(
            argus_diagnose::target_by_comm(graph, name)
                .ok_or_else(|| NoSuchTarget(format!("no process named {name:?} in the trace")))?,
        ),
        (None, None, None) => None,
    };
    if let Some(t) = &target {
        if graph.thread(t.thread()).is_none() && graph.thread_segments(t.thread()).len() == 0 {
            return Err(NoSuchTarget(format!(
                "thread {} (of pid {}) is not in the trace; `argus debug` needs a process that was running while recording",
                t.thread().0,
                t.pid.0
            ))
            .into());
        }
    }
    Ok(target)
}

/// The threads `argus debug --slow` watches: `--tid`'s, else every thread of `--pid`'s
/// process, else every thread named (or of a process named) `--comm`; and who they are in
/// words.
pub fn slow_threads(
    graph: &argus_diagnose::Graph,
    pid: Option<i32>,
    tid: Option<i32>,
    comm: Option<&str>,
) -> Result<(Vec<argus_schema::Tid>, String)> {
    let (tids, who): (Vec<argus_schema::Tid>, String) = match (pid, tid, comm) {
        (_, Some(t), _) => (vec![argus_schema::Tid(t)], format!("thread {t}")),
        (Some(p), None, _) => (
            graph.threads_of(argus_schema::Pid(p)),
            format!("the threads of pid {p}"),
        ),
        (None, None, Some(name)) => (
            graph
                .threads()
                .iter()
                .filter(|t| t.comm == name || t.process == name)
                .map(|t| t.tid)
                .collect(),
            format!("the threads named {name:?}"),
        ),
        (None, None, None) => {
            bail!("--slow needs the threads to watch: give --pid, --tid or --comm")
        }
    };
    let traced: Vec<argus_schema::Tid> = tids
        .into_iter()
        .filter(|t| graph.thread_segments(*t).len() > 0)
        .collect();
    if traced.is_empty() {
        return Err(NoSuchTarget(format!(
            "{who}: not in the trace; `argus debug --slow` needs threads that ran while recording"
        ))
        .into());
    }
    Ok((traced, who))
}
