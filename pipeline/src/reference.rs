//! The batch reference: every key's machine run from scratch over a prefix of the stream,
//! then the joins done with hash maps. Slow and obvious on purpose; it is the oracle the
//! dataflow is tested against at every epoch.

use crate::rules::{route, wake_edge, Key, KeyState, Output, RulesConfig};
use crate::Graph;
use argus_schema::{EdgeKind, Event, Nanos, Strength};
use std::collections::HashMap;

/// The graph of `events` (in `seq` order) when everything up to `watermark` has been seen.
pub fn compute(events: &[Event], watermark: Nanos, cfg: &RulesConfig) -> Graph {
    let mut keys: HashMap<Key, KeyState> = HashMap::new();
    let mut out = Vec::new();
    for ev in events {
        route(ev, |key, role| {
            keys.entry(key)
                .or_insert_with(|| KeyState::new(key))
                .on_event(ev, role, cfg, &mut out);
        });
    }
    for state in keys.values() {
        state.mutable(watermark, cfg, &mut out);
    }
    assemble(out)
}

/// Joins machine outputs into the graph.
pub fn assemble(out: Vec<Output>) -> Graph {
    let mut g = Graph::default();
    let mut srcs = HashMap::new();
    let mut dsts = HashMap::new();
    let mut pairs = Vec::new();
    for o in out {
        match o {
            Output::Segment(s) => g.segments.push(s),
            Output::Edge(e) => g.edges.push(e),
            Output::Spin(s) => g.spins.push(s),
            Output::Src(s) => {
                srcs.insert(s.seq, s);
            }
            Output::Dst(d) => {
                dsts.insert(d.seq, d);
            }
            Output::Pair(p) => pairs.push(p),
        }
    }
    for (seq, d) in &dsts {
        if let Some(s) = srcs.get(seq) {
            g.edges.push(wake_edge(s, d));
        }
    }
    for p in pairs {
        if let (Some(s), Some(d)) = (srcs.get(&p.arm), dsts.get(&p.fire)) {
            let mut e = wake_edge(s, d);
            e.kind = EdgeKind::Timer;
            e.strength = Strength::Strong;
            g.edges.push(e);
        }
    }
    g.sort();
    g
}
