//! Beam search with look-back over the causal edges, backwards from a vertex (the later
//! Argus paper's ranking of causal paths).
//!
//! ```text
//!  depth 0      hang ─┐ incoming edges (at most max_fanout, most recent first)
//!  depth 1   a   b   c  ─┐ every partial path is scored: Σ (edge penalty − relevance reward)
//!  depth 2  a1 a2 b1 c1 c2    no pruning before the look-back depth: a weak edge (b) that
//!  ──────── prune to β ──────  leads to a relevant vertex (b1) two steps on survives
//!  depth 3 …                  prune again every `lookback` levels
//! ```
//!
//! * **Edge penalty** = per-kind cost × per-strength factor ([`Penalties`]): a strong message
//!   costs little, a weak wake-up (maybe mere mutual exclusion) or a thread-order edge a lot.
//! * **Relevance reward** = `relevance` × the fraction of the hang window `[h0, h1]` that the
//!   reached segment covers (running or blocked): threads that were busy or stuck *during the
//!   hang* explain it, segments long before it do not.
//!
//! A path may end at any segment (every prefix is a candidate, so steps past the real root,
//! which only add penalties, are not taken); it cannot go past a segment with no incoming
//! edge, past `max_depth`, or revisit a segment. The best `top_k` completed paths with distinct end segments are returned, lowest
//! score first. Cost: at most `β · fanout^lookback` partial paths per level, each step O(edges
//! of one vertex) — a few microseconds per level on a graph of millions of vertices.

use crate::graph::Graph;
use argus_schema::{CausalEdge, EdgeKind, Nanos, Segment, SegmentId, Strength};

/// Penalties per edge kind and strength, and the relevance reward.
#[derive(Clone, Debug, PartialEq)]
pub struct Penalties {
    /// Cost of each edge kind, indexed by [`EdgeKind::code`]; the default is each kind's
    /// [`beam_cost`](argus_schema::EdgeKindInfo::beam_cost) in the edge-kind table.
    pub kind: [f64; EdgeKind::ALL.len()],
    /// Factor per strength, indexed like [`Strength::ALL`] (weak, boosted, strong).
    pub strength: [f64; 3],
    /// Reward for a segment covering the whole hang window.
    pub relevance: f64,
}

impl Default for Penalties {
    fn default() -> Penalties {
        Penalties {
            kind: EdgeKind::ALL.map(|k| k.info().beam_cost),
            strength: [3.0, 1.5, 1.0],
            relevance: 2.5,
        }
    }
}

impl Penalties {
    /// The penalty of taking edge `e`.
    pub fn edge(&self, e: &CausalEdge) -> f64 {
        let s = Strength::ALL
            .iter()
            .position(|s| *s == e.strength)
            .unwrap_or(0);
        self.kind[usize::from(e.kind.code())] * self.strength[s]
    }
}

/// Tuning of the beam search.
#[derive(Clone, Debug, PartialEq)]
pub struct BeamConfig {
    /// Beam width β: partial paths kept at each pruning.
    pub width: usize,
    /// Levels expanded between prunings (1 = plain beam search).
    pub lookback: usize,
    /// How many ranked paths to return.
    pub top_k: usize,
    /// Longest path, in edges.
    pub max_depth: usize,
    /// Most incoming edges followed from one segment (the most recent).
    pub max_fanout: usize,
    /// The cost model.
    pub penalties: Penalties,
}

impl Default for BeamConfig {
    fn default() -> BeamConfig {
        BeamConfig {
            width: 8,
            lookback: 2,
            top_k: 3,
            max_depth: 12,
            max_fanout: 8,
            penalties: Penalties::default(),
        }
    }
}

/// A path found by [`search`]: segments from the start back to the end, and the edges
/// between them (`edges[i]` leads from `segments[i + 1]` to `segments[i]`).
#[derive(Clone, Debug, PartialEq)]
pub struct BeamPath<'g> {
    /// Lower is better.
    pub score: f64,
    /// The start first.
    pub segments: Vec<&'g Segment>,
    /// The edges taken, one fewer than the segments.
    pub edges: Vec<&'g CausalEdge>,
    /// The cost of each step (0 for the start).
    pub costs: Vec<f64>,
}

impl BeamPath<'_> {
    /// The last segment: where the path ends.
    pub fn end(&self) -> Option<&Segment> {
        self.segments.last().copied()
    }

    fn contains(&self, id: SegmentId) -> bool {
        self.segments.iter().any(|s| s.id == id)
    }
}

/// How much of `[h0, h1]` a segment covers, as a fraction: its run and its wait, and the
/// wait of its thread that it ended (a relay thread blocked through the hang, then woken to
/// pass the wake-up on, covers the hang).
pub fn coverage(g: &Graph, s: &Segment, h0: Nanos, h1: Nanos) -> f64 {
    let window = h0.until(h1);
    if window == 0 {
        return 0.0;
    }
    let begin = match g.prev_in_thread(s.id) {
        Some(p) if p.end_ns == s.start_ns => p.wait_start_ns.unwrap_or(s.start_ns),
        _ => s.start_ns,
    };
    let from = begin.max(h0);
    let to = g.end_of(s).min(h1);
    from.until(to) as f64 / window as f64
}

/// The cost of stepping over `e` to its source `src`.
pub fn step_cost(
    g: &Graph,
    cfg: &BeamConfig,
    e: &CausalEdge,
    src: &Segment,
    window: (Nanos, Nanos),
) -> f64 {
    cfg.penalties.edge(e) - cfg.penalties.relevance * coverage(g, src, window.0, window.1)
}

/// The incoming edges followed from `s`: the most recent `max_fanout`, one per source and
/// kind.
fn expansions<'g>(
    g: &'g Graph,
    s: &Segment,
    cfg: &BeamConfig,
) -> Vec<(&'g CausalEdge, &'g Segment)> {
    let mut edges: Vec<&'g CausalEdge> = g.incoming(s.id).collect();
    edges.sort_by_key(|e| (std::cmp::Reverse(e.ts), e.src, e.kind));
    edges.dedup_by_key(|e| (e.src, e.kind));
    edges.truncate(cfg.max_fanout.max(1));
    edges
        .into_iter()
        .filter_map(|e| Some((e, g.segment(e.src)?)))
        .collect()
}

/// Beam search backwards from `start`, scoring against the hang window `[h0, h1]`.
/// Returns at most `top_k` paths with distinct ends, best first. The start alone is a path
/// (score 0) when it has no incoming edge.
pub fn search<'g>(
    g: &'g Graph,
    start: &'g Segment,
    window: (Nanos, Nanos),
    cfg: &BeamConfig,
) -> Vec<BeamPath<'g>> {
    let mut frontier = vec![BeamPath {
        score: 0.0,
        segments: vec![start],
        edges: Vec::new(),
        costs: vec![0.0],
    }];
    let mut done: Vec<BeamPath<'g>> = Vec::new();
    let lookback = cfg.lookback.max(1);
    for depth in 1..=cfg.max_depth.max(1) {
        let mut next: Vec<BeamPath<'g>> = Vec::new();
        for p in frontier.drain(..) {
            let Some(last) = p.end() else { continue };
            let mut grew = false;
            for (e, src) in expansions(g, last, cfg) {
                if p.contains(src.id) {
                    continue;
                }
                let c = step_cost(g, cfg, e, src, window);
                let mut q = p.clone();
                q.score += c;
                q.segments.push(src);
                q.edges.push(e);
                q.costs.push(c);
                next.push(q);
                grew = true;
            }
            // Every prefix is a candidate: a path may end anywhere (the steps after the real
            // root only add penalties).
            if !grew || !p.edges.is_empty() {
                done.push(p);
            }
        }
        if next.is_empty() {
            break;
        }
        if depth % lookback == 0 {
            rank(&mut next);
            next.truncate(cfg.width.max(1));
        }
        frontier = next;
    }
    done.append(&mut frontier);
    rank(&mut done);
    let mut out: Vec<BeamPath<'g>> = Vec::new();
    for p in done {
        // Distinct paths: not a prefix of (nor extending) one already taken, not ending where
        // one already ends.
        let end = p.end().map(|s| s.id);
        let overlaps = |o: &BeamPath<'g>| {
            let n = o.segments.len().min(p.segments.len());
            o.end().map(|s| s.id) == end
                || o.segments[..n]
                    .iter()
                    .zip(&p.segments[..n])
                    .all(|(a, b)| a.id == b.id)
        };
        if out.iter().any(overlaps) {
            continue;
        }
        out.push(p);
        if out.len() >= cfg.top_k.max(1) {
            break;
        }
    }
    out
}

fn rank(paths: &mut [BeamPath<'_>]) {
    paths.sort_by(|a, b| {
        a.score
            .total_cmp(&b.score)
            .then_with(|| a.edges.len().cmp(&b.edges.len()))
            .then_with(|| {
                let ta = a.edges.first().map(|e| e.ts);
                let tb = b.edges.first().map(|e| e.ts);
                tb.cmp(&ta)
            })
    });
}

/// The best continuation score from `src` (after taking an edge to it): used to rank the
/// choices of a question. Shallow: look-back depth plus one.
pub fn best_from<'g>(
    g: &'g Graph,
    src: &'g Segment,
    window: (Nanos, Nanos),
    cfg: &BeamConfig,
) -> f64 {
    let shallow = BeamConfig {
        max_depth: cfg.lookback.max(1) + 1,
        top_k: 1,
        ..cfg.clone()
    };
    search(g, src, window, &shallow)
        .first()
        .map_or(0.0, |p| p.score)
}
