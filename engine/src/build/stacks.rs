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
#[derive(Debug)]
pub struct StackCollector {
    /// Whether the trace can have stacks (it has a `perf/` directory): without one, every
    /// event is passed over at the cost of a branch.
    enabled: bool,
    /// Last event per thread that can carry a stack: (ts, seq, what).
    last: HashMap<i32, (u64, u64, StackAt)>,
    /// Per (thread, [`StackAt::class`]): (ts, seq, what) of the events followed by a stack,
    /// in time order.
    with_stack: HashMap<(i32, u8), Vec<Stacked>>,
}

impl Default for StackCollector {
    fn default() -> Self {
        StackCollector {
            enabled: true,
            last: HashMap::new(),
            with_stack: HashMap::new(),
        }
    }
}

impl StackCollector {
    /// A collector for the trace in `dir`: it looks at events only when the trace recorded
    /// stacks ([`argus_ingest::perffile::perf_dir`] exists).
    pub fn for_trace(dir: &Path) -> StackCollector {
        StackCollector {
            enabled: argus_ingest::perffile::perf_dir(dir).is_dir(),
            ..StackCollector::default()
        }
    }

    /// Looks at the next event of the stream (with its final `seq`).
    #[inline]
    pub fn observe(&mut self, ev: &Event) {
        if !self.enabled {
            return;
        }
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
    /// of stacks written and of samples the recorder's rings lost.
    pub fn finish(
        self,
        dir: &Path,
        kallsyms: Option<Kallsyms>,
        writer: &mut SnapshotWriter,
    ) -> Result<StacksDone> {
        let Some(trace) = PerfTrace::open(dir).with_context(|| format!("{}", dir.display()))?
        else {
            return Ok(StacksDone::default());
        };
        if self.is_empty() {
            // No event carries a stack: only the lost samples are worth counting.
            let lost = trace
                .items()
                .map(|item| match item {
                    Ok(PerfItem::Lost { lost, .. }) => lost,
                    _ => 0,
                })
                .sum();
            return Ok(StacksDone { written: 0, lost });
        }
        let mut lost = 0u64;
        let mut symbolizer = Symbolizer::new(kallsyms, &trace.maps_files());
        let mut used: HashMap<u64, ()> = HashMap::new();
        let mut out: Vec<EventStack> = Vec::new();
        for item in trace.items() {
            let s = match item {
                Ok(PerfItem::Sample(s)) => s,
                Ok(PerfItem::Lost { lost: n, .. }) => {
                    lost += n;
                    continue;
                }
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
            let kernel_frames = s.kernel_ips.len();
            let frames: Vec<StackFrame> = symbolizer
                .sample_frames(&s)
                .into_iter()
                .enumerate()
                .map(|(i, f)| {
                    // Depth within its part (kernel frames first, then user frames).
                    let depth = if f.kernel { i } else { i - kernel_frames };
                    StackFrame {
                        kernel: f.kernel,
                        depth: depth.min(u16::MAX as usize) as u16,
                        ip: f.ip,
                        symbol: f.symbol,
                        offset: f.offset,
                        object: f.object,
                    }
                })
                .collect();
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
        Ok(StacksDone {
            written: out.len() as u64,
            lost,
        })
    }
}

/// What [`StackCollector::finish`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StacksDone {
    /// Stacks written to `stacks.parquet`.
    pub written: u64,
    /// Stack samples the recorder's perf rings dropped (`PERF_RECORD_LOST`): their events
    /// have no stack.
    pub lost: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_ingest::perffile::{
        chunk_path, perf_dir, StreamInfo, StreamKind, StreamsFile, PERF_FORMAT_VERSION,
        RECORD_LOST, STREAMS_FILE,
    };

    /// A `PERF_RECORD_LOST` record as the recorder stores it: stream id, then the record.
    fn lost_record(stream: u32, lost: u64) -> Vec<u8> {
        let mut rec = stream.to_le_bytes().to_vec();
        rec.extend_from_slice(&RECORD_LOST.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&(8u16 + 16).to_le_bytes());
        rec.extend_from_slice(&7u64.to_le_bytes()); // perf's event id
        rec.extend_from_slice(&lost.to_le_bytes());
        rec
    }

    #[test]
    fn lost_stack_samples_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(perf_dir(dir.path())).unwrap();
        let streams = StreamsFile {
            version: PERF_FORMAT_VERSION,
            streams: vec![StreamInfo {
                id: 1,
                sample_type: 0,
                regs_user: 0,
                kind: StreamKind::Stacks {
                    cpu: 0,
                    syscalls: vec![0, 1],
                },
            }],
        };
        std::fs::write(
            perf_dir(dir.path()).join(STREAMS_FILE),
            serde_json::to_vec(&streams).unwrap(),
        )
        .unwrap();
        let mut records = lost_record(1, 1200);
        records.extend(lost_record(1, 34));
        std::fs::write(
            chunk_path(dir.path(), 0),
            zstd::encode_all(records.as_slice(), 1).unwrap(),
        )
        .unwrap();
        let out = tempfile::tempdir().unwrap();
        let mut writer = SnapshotWriter::new(out.path().join("snap")).unwrap();
        let done = StackCollector::default()
            .finish(dir.path(), None, &mut writer)
            .unwrap();
        assert_eq!(
            done,
            StacksDone {
                written: 0,
                lost: 1234
            }
        );
        // No perf directory: nothing to count.
        let plain = tempfile::tempdir().unwrap();
        let done = StackCollector::default()
            .finish(plain.path(), None, &mut writer)
            .unwrap();
        assert_eq!(done, StacksDone::default());
    }
}
