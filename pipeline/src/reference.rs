//! The batch reference: every key's machine run from scratch over a prefix of the stream,
//! then the joins done with hash maps. Slow and obvious on purpose; it is the oracle the
//! dataflow is tested against at every epoch.

use crate::rules::{join_edges, route, Dst, Key, KeyState, Output, RulesConfig, Src};
use crate::Graph;
use argus_schema::{Event, Nanos};
use std::collections::HashMap;

/// The graph of `events` (in `seq` order) when everything up to `watermark` has been seen.
pub fn compute(events: &[Event], watermark: Nanos, cfg: &RulesConfig) -> Graph {
    let mut keys: HashMap<Key, KeyState> = HashMap::new();
    let mut out = Vec::new();
    for ev in events {
        route(ev, cfg, |key, role| {
            keys.entry(key)
                .or_insert_with(|| KeyState::new(key))
                .on_event(ev, role, cfg, &mut out);
        });
    }
    for state in keys.values() {
        state.mutable(watermark, cfg, &mut out);
    }
    assemble(out, cfg)
}

/// Joins machine outputs into the graph.
pub fn assemble(out: Vec<Output>, cfg: &RulesConfig) -> Graph {
    let mut g = Graph::default();
    let mut srcs: HashMap<u64, Vec<Src>> = HashMap::new();
    let mut direct: HashMap<u64, Vec<Dst>> = HashMap::new();
    let mut paired: HashMap<u64, Vec<Dst>> = HashMap::new();
    let mut pairs = Vec::new();
    for o in out {
        match o {
            Output::Segment(s) => g.segments.push(s),
            Output::Edge(e) => g.edges.push(e),
            Output::Spin(s) => g.spins.push(s),
            Output::Src(s) => srcs.entry(s.seq).or_default().push(s),
            Output::Dst(d) if d.paired => paired.entry(d.seq).or_default().push(d),
            Output::Dst(d) => direct.entry(d.seq).or_default().push(d),
            Output::Pair(p) => pairs.push(p),
            Output::Count(c) => g.counts.add(c, 1),
            // Hints for the incremental joins; these joins see every output at once.
            Output::ArmDone(_) | Output::NoEffect(_) => {}
        }
    }
    for (seq, ds) in &direct {
        for s in srcs.get(seq).into_iter().flatten() {
            for d in ds {
                join_edges(s, d, cfg, |e| g.edges.push(e));
            }
        }
    }
    for p in pairs {
        for s in srcs.get(&p.arm).into_iter().flatten() {
            for d in paired.get(&p.fire).into_iter().flatten() {
                join_edges(s, d, cfg, |e| g.edges.push(e));
            }
        }
    }
    g.sort();
    g
}
