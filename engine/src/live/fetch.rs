//! What a partial diagnosis needs ([`Need`]), read from the live arrangements
//! (one arranged graph, or the [`Union`](argus_pipeline::arranged::Union) of a live graph's
//! layers: [`GraphRead`]) as of an epoch: the answer is [`Parts`], each need answered whole.
//!
//! ```text
//!  Thread{tid}          segments_by_id over [tid#0, tid#MAX]          one seek + a step each
//!  Window{tid, from, to} segments_by_thread: thread_run(from, to) → ids, then
//!                        segments_by_id over [first, last]             two seeks + steps
//!  Segment{id}          segments_by_id point query
//!  Incoming / Outgoing  edges_by_dst / edges_by_src point query (walked kinds), + their
//!                        other ends as points
//!  Threads              segments_by_thread: first_segments (a seek per thread) + a point
//!                        query per thread for its pid
//!  Slice{spin}          slices_by_spin point query, + each member and its incoming edges
//! ```
//!
//! One worker holds the whole graph here (the live job runs its arrangements in one worker,
//! in layers read as one), so its answer is the answer.
//!
//! Used by the live job's query server, the live-query tests and `benches/live_query.rs`.

use argus_diagnose::{Need, Parts, Run};
use argus_pipeline::arranged::{GraphRead, QueryError};
use argus_schema::{CausalEdge, SegmentId, Tid};
use std::collections::BTreeSet;

/// Answers `needs` from `traces` as of epoch `as_of`.
pub fn fetch(traces: &mut impl GraphRead, needs: &[Need], as_of: u64) -> Result<Parts, QueryError> {
    let mut parts = Parts::default();
    // Segments to look up one by one (edge ends, slice members, single needs).
    let mut points: BTreeSet<SegmentId> = BTreeSet::new();
    // Segments already in `parts` (from stretches).
    let mut held: BTreeSet<SegmentId> = BTreeSet::new();
    let mut edges: BTreeSet<CausalEdge> = BTreeSet::new();
    let walked = |e: &CausalEdge| e.kind.info().walked;
    for need in needs {
        match *need {
            Need::Thread { tid } => {
                let segs = traces.segments_between(
                    SegmentId::new(tid, 0),
                    SegmentId::new(tid, u32::MAX),
                    as_of,
                )?;
                parts.runs.push(Run {
                    tid,
                    ids: segs.first().zip(segs.last()).map(|(a, b)| (a.id, b.id)),
                    at_start: true,
                    at_end: true,
                });
                held.extend(segs.iter().map(|s| s.id));
                parts.segments.extend(segs);
            }
            Need::Window {
                tid,
                from_ns,
                to_ns,
            } => {
                let run = traces.thread_run(tid, from_ns, Some(to_ns), as_of)?;
                let ids = run.segments.first().zip(run.segments.last());
                let segs = match ids {
                    Some(((a, _), (b, _))) => traces.segments_between(*a, *b, as_of)?,
                    None => Vec::new(),
                };
                parts.runs.push(Run {
                    tid,
                    ids: ids.map(|((a, _), (b, _))| (*a, *b)),
                    at_start: run.at_start,
                    at_end: run.at_end,
                });
                held.extend(segs.iter().map(|s| s.id));
                parts.segments.extend(segs);
            }
            Need::Segment { id } => {
                points.insert(id);
            }
            Need::Incoming { id } => {
                points.insert(id);
                for e in traces.incoming(id, as_of)?.into_iter().filter(walked) {
                    points.insert(e.src);
                    edges.insert(e);
                }
                parts.incoming.push(id);
            }
            Need::Outgoing { id } => {
                points.insert(id);
                for e in traces.outgoing(id, as_of)?.into_iter().filter(walked) {
                    points.insert(e.dst);
                    edges.insert(e);
                }
                parts.outgoing.push(id);
            }
            Need::Threads => {
                let mut all = Vec::new();
                for (tid, first) in traces.first_segments(as_of)? {
                    if let Some(s) = traces.segment(first, as_of)? {
                        all.push((tid, s.pid));
                    }
                }
                parts.threads = Some(all);
            }
            Need::Slice { spin } => {
                let members: BTreeSet<SegmentId> = traces
                    .slice(spin, as_of)?
                    .into_iter()
                    .map(|m| m.segment)
                    .collect();
                for id in members {
                    points.insert(id);
                    for e in traces.incoming(id, as_of)?.into_iter().filter(walked) {
                        points.insert(e.src);
                        edges.insert(e);
                    }
                    parts.incoming.push(id);
                }
            }
        }
    }
    for id in points {
        if held.contains(&id) {
            continue;
        }
        match traces.segment(id, as_of)? {
            Some(s) => parts.segments.push(s),
            None => parts.absent.push(id),
        }
    }
    parts.edges = edges.into_iter().collect();
    Ok(parts)
}

/// The needs that seed the diagnosis of thread `tid`'s hang: the thread whole (the hang
/// finder reads its history), and the maintained slice of each of its spins (the walk reads
/// most of it). Spins of other threads are not seeded: the walk reaches them through the
/// slice or asks.
pub fn seed(tid: Tid, spins: &[argus_schema::Spin]) -> Vec<Need> {
    let mut needs = vec![Need::Thread { tid }];
    needs.extend(
        spins
            .iter()
            .filter(|s| s.tid == tid)
            .map(|s| Need::Slice { spin: s.segment }),
    );
    needs
}
