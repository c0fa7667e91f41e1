//! Writing trace directories (`docs/trace-dir.md`) for the replay targets: `meta.json`,
//! `formats/`, chunk files.

use argus_ingest::tracedir::{DroppedRange, MetaExt, RingInfo, TraceMeta};
use std::collections::BTreeMap;
use std::path::Path;

/// A `meta.json` that [`argus_ingest::replay::TraceReader::open`] accepts: 4096-byte pages,
/// `chunks[cpu]` chunk files per CPU, `dropped[cpu]` of them deleted by the ring, status
/// `complete` or `recording`.
pub fn meta(
    recording: bool,
    chunks: &BTreeMap<u32, u32>,
    dropped: &BTreeMap<u32, u32>,
) -> serde_json::Value {
    let meta = TraceMeta {
        status: if recording { "recording" } else { "complete" }.into(),
        page_size: 4096,
        cpus: chunks.keys().copied().collect(),
        kernel: "6.18.0".into(),
        machine: "x86_64".into(),
        hostname: "fuzz".into(),
        end_ns: if recording { 0 } else { u64::MAX / 2 },
        recorder_pid: 1,
        chunks: chunks.clone(),
        ..TraceMeta::recording("mono")
    };
    let ext = MetaExt {
        ring: (!dropped.is_empty()).then(|| RingInfo {
            size: 1 << 20,
            chunk_pages: 16,
            dropped: dropped
                .iter()
                .map(|(&cpu, &n)| {
                    let range = DroppedRange {
                        chunks: n,
                        from_ns: 0,
                        until_ns: 1000,
                    };
                    (cpu, range)
                })
                .collect(),
        }),
        ..MetaExt::default()
    };
    ext.merged_json(&meta)
        .expect("invariant: the meta structs serialize")
}

/// Writes `dir/meta.json`.
pub fn write_meta(dir: &Path, meta: &serde_json::Value) {
    std::fs::write(
        dir.join("meta.json"),
        serde_json::to_vec(meta).expect("invariant: a JSON value serializes"),
    )
    .expect("invariant: the scratch directory is writable");
}
