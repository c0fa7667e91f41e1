//! `argus build`'s stacks table: the stack samples of a trace's `perf/` directory,
//! unwound and symbolized ([`argus_ingest::symbolize`]) and written to `stacks.parquet`
//! ([`argus_sinks::read_stacks`]).
//!
//! While the events stream past, [`StackCollector::observe`] notes every event that
//! replay gave a `stack` event (replay places it right after, same tid and ts): a
//! `sys_enter` (`--stacks SYSCALLS`), a `switch` where the thread blocked or a `waking` by
//! the thread (`--stacks`, the default). After the trace, [`StackCollector::finish`] reads
//! the samples again (with their registers and stack bytes, which the events do not carry),
//! pairs each with its event the way replay did (same thread and
//! [`argus_ingest::perffile::StackAt`] kind, nearest time within
//! [`argus_ingest::perffile::PAIR_WINDOW_NS`]) and writes one row per frame.

use anyhow::{Context, Result};
use argus_ingest::kallsyms::Kallsyms;
use argus_ingest::perffile::{PerfItem, PerfTrace, StackAt, PAIR_WINDOW_NS};
use argus_ingest::symbolize::Symbolizer;
use argus_schema::{Event, EventKind};
use argus_sinks::{EventStack, SnapshotWriter, StackFrame};
use std::collections::HashMap;
use std::path::Path;

/// An event followed by a stack: (ts, seq, what).
type Stacked = (u64, u64, StackAt);

/// Collects the events that have stacks, for one trace directory.
#[derive(Debug, Default)]
pub struct StackCollector {
    /// Last event per thread that can carry a stack: (ts, seq, what).
    last: HashMap<i32, (u64, u64, StackAt)>,
    /// Per (thread, [`StackAt::class`]): (ts, seq, what) of the events followed by a stack,
    /// in time order.
    with_stack: HashMap<(i32, u8), Vec<Stacked>>,
}

impl StackCollector {
    /// Looks at the next event of the stream (with its final `seq`).
    pub fn observe(&mut self, ev: &Event) {
        if let EventKind::Stack { .. } = ev.kind {
            if let Some(&(ts, seq, at)) = self.last.get(&ev.tid.0) {
                if ts == ev.ts.0 {
                    let v = self.with_stack.entry((ev.tid.0, at.class())).or_default();
                    if v.last().map(|l| l.1) != Some(seq) {
                        v.push((ts, seq, at));
                    }
                }
            }
        } else if let Some(at) = StackAt::of_event(ev) {
            self.last.insert(ev.tid.0, (ev.ts.0, ev.seq, at));
        }
    }

    /// Whether any stack was seen.
    pub fn is_empty(&self) -> bool {
        self.with_stack.is_empty()
    }

    /// Symbolizes the stacks of `dir` and appends them to the snapshot. Returns the number
    /// of stacks written.
    pub fn finish(
        self,
        dir: &Path,
        kallsyms: Option<Kallsyms>,
        writer: &mut SnapshotWriter,
    ) -> Result<u64> {
        if self.is_empty() {
            return Ok(0);
        }
        let Some(trace) = PerfTrace::open(dir).with_context(|| format!("{}", dir.display()))?
        else {
            return Ok(0);
        };
        let mut symbolizer = Symbolizer::new(kallsyms, &trace.maps_files());
        let mut used: HashMap<u64, ()> = HashMap::new();
        let mut out: Vec<EventStack> = Vec::new();
        for item in trace.items() {
            let s = match item {
                Ok(PerfItem::Sample(s)) => s,
                Ok(PerfItem::Lost { .. }) => continue,
                // Already reported by replay (logged); the rest of the chunk is skipped.
                Err(e) => {
                    tracing::warn!("{e}");
                    continue;
                }
            };
            let Some(at) = trace
                .streams()
                .iter()
                .find(|i| i.id == s.stream)
                .and_then(|info| StackAt::of_sample(info, &s))
            else {
                continue;
            };
            let Some(cands) = self.with_stack.get(&(s.tid, at.class())) else {
                continue;
            };
            let lo = cands.partition_point(|c| c.0 + PAIR_WINDOW_NS < s.time);
            let Some(&(ts, seq, _)) = cands[lo..]
                .iter()
                .take_while(|c| c.0 <= s.time + PAIR_WINDOW_NS)
                .filter(|c| !used.contains_key(&c.1) && at.matches(c.2))
                .min_by_key(|c| c.0.abs_diff(s.time))
            else {
                continue;
            };
            used.insert(seq, ());
            let mut frames = Vec::new();
            for (depth, &ip) in s.kernel_ips.iter().enumerate() {
                let lookup = if depth == 0 { ip } else { ip.saturating_sub(1) };
                let f = symbolizer.kernel_frame(ip, lookup);
                frames.push(StackFrame {
                    kernel: true,
                    depth: depth.min(u16::MAX as usize) as u16,
                    ip,
                    symbol: f.symbol,
                    offset: f.offset,
                    object: f.object,
                });
            }
            let user = symbolizer.unwind_user(s.pid, s.time, s.regs, &s.stack, &s.user_ips);
            for (depth, &ip) in user.iter().enumerate() {
                let lookup = if depth == 0 { ip } else { ip.saturating_sub(1) };
                let f = symbolizer.user_frame(s.pid, s.time, ip, lookup);
                frames.push(StackFrame {
                    kernel: false,
                    depth: depth.min(u16::MAX as usize) as u16,
                    ip,
                    symbol: f.symbol,
                    offset: f.offset,
                    object: f.object,
                });
            }
            out.push(EventStack {
                event_seq: seq,
                tid: s.tid,
                ts,
                frames,
            });
        }
        out.sort_by_key(|s| s.event_seq);
        writer
            .write_stacks(&out)
            .context("writing stacks.parquet")?;
        Ok(out.len() as u64)
    }
}
