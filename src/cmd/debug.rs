//! `argus debug SNAPSHOT --pid P`: find the hang, walk the graph back, ask where it is
//! ambiguous, print the report (`--follow`: `src/cmd/follow.rs`). Also loads a snapshot into the
//! diagnosis graph for `export` and `follow`.

use crate::cli::DebugArgs;
use crate::{export, follow};
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::Path;

/// A snapshot as the diagnosis graph (with its stacks and application events).
pub(crate) fn load_graph(snapshot: &Path) -> Result<argus_diagnose::Graph> {
    let snap = argus_sinks::read_snapshot_tables(snapshot, false)
        .with_context(|| format!("reading snapshot {}", snapshot.display()))?;
    let input = argus_diagnose::GraphInput {
        segments: snap.segments,
        edges: snap.edges,
        spins: snap.spins,
        threads: snap.threads,
        trace_end_ns: snap.manifest.trace_end_ns.unwrap_or_default(),
    };
    let mut graph = argus_diagnose::Graph::new(input)
        .with_context(|| format!("building the event graph of {}", snapshot.display()))?;
    graph.set_lost_ranges(snap.manifest.lost_ranges);
    Ok(graph)
}

pub(crate) fn run(args: &DebugArgs) -> Result<u8> {
    let snapshot = follow::resolve_snapshot(&args.snapshot)?;
    let mut graph = load_graph(&snapshot)?;
    export::attach_app_events(&mut graph, &snapshot)?;
    let target = match (args.pid, args.tid, &args.comm) {
        (Some(pid), tid, _) => Some(argus_diagnose::Target {
            pid: argus_schema::Pid(pid),
            tid: tid.map(argus_schema::Tid),
        }),
        (None, Some(tid), _) => {
            let tid = argus_schema::Tid(tid);
            let pid = graph
                .pid_of(tid)
                .with_context(|| format!("thread {} is not in the trace", tid.0))?;
            Some(argus_diagnose::Target {
                pid,
                tid: Some(tid),
            })
        }
        (None, None, Some(name)) => Some(
            argus_diagnose::target_by_comm(&graph, name)
                .with_context(|| format!("no process named {name:?} in the trace"))?,
        ),
        (None, None, None) => None,
    };
    if let Some(t) = &target {
        if graph.thread(t.thread()).is_none() && graph.thread_segments(t.thread()).len() == 0 {
            bail!(
                "thread {} (of pid {}) is not in the trace; `argus debug` needs a process that was running while recording",
                t.thread().0,
                t.pid.0
            );
        }
    }
    let diagnosis = export::diagnose_with(args, &graph, target)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &diagnosis.to_json())?;
        writeln!(out)?;
    } else {
        write!(out, "{}", diagnosis.to_text())?;
        if let Some(r) = &diagnosis.report {
            write!(out, "{}", r.to_picture())?;
        }
    }
    out.flush()?;
    Ok(diagnosis.outcome().exit_code())
}
