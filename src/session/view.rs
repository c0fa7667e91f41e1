//! How the session shows times, vertices and edges.

use super::Session;
use anyhow::{bail, Context, Result};
use argus_diagnose::Graph;
use argus_schema::{CausalEdge, Nanos, SegmentId, Strength};

impl Session {
    /// `12.345 s` since the trace's start.
    pub(super) fn t(&self, ns: Nanos) -> String {
        format!(
            "{:.3} s",
            ns.0.saturating_sub(self.trace_start.0) as f64 / 1e9
        )
    }

    /// The local wall-clock time of `ns`, when the trace has its offset.
    pub(super) fn clock(&self, ns: Nanos) -> Option<String> {
        self.wall_offset
            .map(|w| crate::moment::local_text(i128::from(ns.0) + i128::from(w)))
    }

    /// A segment as `tid#seq` followed by its thread's name.
    pub(super) fn who(&self, id: SegmentId) -> String {
        format!("{id} ({})", self.graph.comm(id.tid()))
    }

    /// A segment named by the user: `tid#seq`, or `.` / nothing for the cursor.
    pub(super) fn segment_arg(&self, arg: Option<&str>) -> Result<SegmentId> {
        match arg {
            None | Some(".") => self
                .cursor
                .context("no vertex is selected: pick a hang or name one as tid#seq"),
            Some(text) => {
                let id = argus_engine::diagnosis::parse_vertex(text)?;
                if self.graph.segment(id).is_none() {
                    bail!("there is no vertex {id} in the snapshot");
                }
                Ok(id)
            }
        }
    }

    /// Prints a vertex: its thread, times, wait, syscalls, stack, and its incoming and
    /// outgoing edges (numbered; `back N` follows incoming edge N).
    pub(super) fn show(&self, id: SegmentId) -> Result<()> {
        let g = &self.graph;
        let s = g
            .segment(id)
            .with_context(|| format!("there is no vertex {id}"))?;
        let end = g.end_of(s);
        println!(
            "vertex {id}: {} segment of {}",
            s.kind.name(),
            g.describe(s.tid)
        );
        let clock = self
            .clock(s.start_ns)
            .map_or(String::new(), |c| format!(" (local {c})"));
        println!(
            "  {} – {} ({}){clock}, ended: {}",
            self.t(s.start_ns),
            self.t(end),
            argus_diagnose::secs(s.start_ns.until(end)),
            s.end.name()
        );
        if let Some(w) = s.wait_start_ns {
            let ret = s
                .wait_ret
                .map_or(String::new(), |r| format!(", returned {r}"));
            println!(
                "  waited {} in {} (state {}{ret})",
                argus_diagnose::secs(w.until(end)),
                argus_schema::syscalls::name(s.wait_syscall),
                char::from(s.wait_state)
            );
        }
        let seq: Vec<String> = s
            .syscall_seq
            .iter()
            .take(12)
            .map(|&n| argus_schema::syscalls::name(n).to_string())
            .collect();
        println!(
            "  on CPU {}, {} syscall(s){}{}, {} preemption(s), {} yield(s)",
            argus_diagnose::secs(s.on_cpu_ns),
            s.syscalls,
            if seq.is_empty() { "" } else { ": " },
            seq.join(" "),
            s.preemptions,
            s.yields
        );
        let stack = g.blocking_stack(s);
        if !stack.is_empty() {
            println!("  blocked at: {}", argus_diagnose::stack_line(&stack));
        }
        if self.report.as_ref().is_some_and(|r| r.hang.segment == id) {
            println!("  (the hang's vertex)");
        }
        let c = self.causes(id);
        for (i, e) in c.edges.iter().enumerate() {
            if i == 0 && c.ended > 0 {
                println!("  its wait ended by ({}):", c.ended);
            }
            if i == c.ended {
                println!("  its run started by ({}):", c.edges.len() - c.ended);
            }
            let mark = if Some(i) == c.default {
                "  (default)"
            } else {
                ""
            };
            println!("    {}) {}{mark}", i + 1, self.edge_text(e, true));
        }
        if c.edges.is_empty() {
            println!("  nothing leads to it in the graph");
        }
        let outgoing = outgoing(g, id);
        println!("  outgoing ({}):", outgoing.len());
        for e in &outgoing {
            println!("    - {}", self.edge_text(e, false));
        }
        Ok(())
    }

    /// `[kind strength] from tid#seq (comm) at T` (or `to` for an outgoing edge).
    pub(super) fn edge_text(&self, e: &CausalEdge, incoming: bool) -> String {
        let (dir, other) = if incoming {
            ("from", e.src)
        } else {
            ("to", e.dst)
        };
        let wrong = if self.is_wrong(e) {
            " [marked wrong]"
        } else {
            ""
        };
        format!(
            "[{} {}] {dir} {} at {}{wrong}",
            e.kind.name(),
            e.strength.name(),
            self.who(other),
            self.t(e.ts)
        )
    }

    /// The edges back from `id` ([`causes`]); its wait comes first when it is the hang's
    /// vertex or the cursor's starting point.
    pub(super) fn causes(&self, id: SegmentId) -> Causes {
        let hang = self
            .report
            .as_ref()
            .is_some_and(|r| r.hang.segment == id || r.hang.last_segment == id);
        causes(&self.graph, id, hang || self.trail.is_empty())
    }

    pub(super) fn is_wrong(&self, e: &CausalEdge) -> bool {
        self.wrong.contains(e)
    }
}

/// The edges back from a vertex, numbered as `show` lists them: first what ended its wait
/// (the edges into the thread's next segment: a wake-up, a message, a timer), then what
/// started its run (the edges into it), each in time order.
pub(super) struct Causes {
    pub(super) edges: Vec<CausalEdge>,
    /// How many of `edges` (the first ones) ended the wait.
    pub(super) ended: usize,
    /// The one `back` follows by default: for a vertex whose wait is the question (the hang's,
    /// or one with nothing that started it), the most recent strong edge that ended it (else
    /// the most recent); for a vertex reached as a cause, what started its run likewise.
    pub(super) default: Option<usize>,
}

pub(super) fn causes(g: &Graph, id: SegmentId, wait_first: bool) -> Causes {
    let sorted = |mut v: Vec<CausalEdge>| {
        v.sort_by_key(|e| (e.ts, e.src));
        v
    };
    let ended = match g.next_in_thread(id) {
        Some(next) => sorted(g.incoming(next.id).cloned().collect()),
        None => Vec::new(),
    };
    let started = sorted(g.incoming(id).cloned().collect());
    let best = |v: &[CausalEdge]| {
        v.iter()
            .rposition(|e| e.strength == Strength::Strong)
            .or_else(|| v.len().checked_sub(1))
    };
    let n = ended.len();
    let default = if wait_first || started.is_empty() {
        best(&ended).or_else(|| best(&started).map(|i| i + n))
    } else {
        best(&started).map(|i| i + n).or_else(|| best(&ended))
    };
    let mut edges = ended;
    edges.extend(started);
    Causes {
        edges,
        ended: n,
        default,
    }
}

/// The outgoing edges of `id` in time order.
pub(super) fn outgoing(g: &Graph, id: SegmentId) -> Vec<CausalEdge> {
    let mut v: Vec<CausalEdge> = g.outgoing(id).cloned().collect();
    v.sort_by_key(|e| (e.ts, e.dst));
    v
}
