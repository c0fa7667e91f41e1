//! Pictures of a diagnosis: a compact text picture for the terminal (a lane per thread, the
//! path's segments on a shared time axis, arrows from cause to effect) and the set of
//! segments and edges an export (Perfetto, DOT) marks.

use crate::report::{secs, Report, Role};
use argus_schema::{Nanos, SegmentId, Tid};

/// What an export marks: the hang, the diagnosed path (cause → effect edges), the root
/// causes, and the other ranked paths.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Highlight {
    /// The hang: segment, thread, window.
    pub hang: Option<(SegmentId, Tid, Nanos, Nanos)>,
    /// Segments of the diagnosed path, the hang first, with their step number (1-based) and
    /// a short label.
    pub path: Vec<(SegmentId, usize, String)>,
    /// Edges of the path: (cause, effect, kind, strength).
    pub path_edges: Vec<(SegmentId, SegmentId, String, String)>,
    /// Root-cause segments.
    pub roots: Vec<SegmentId>,
    /// Segments on the other ranked paths (not on the main path).
    pub alternatives: Vec<SegmentId>,
}

const WIDTH: usize = 60;

fn step_mark(n: usize) -> String {
    const CIRCLED: [&str; 20] = [
        "①", "②", "③", "④", "⑤", "⑥", "⑦", "⑧", "⑨", "⑩", "⑪", "⑫", "⑬", "⑭", "⑮", "⑯", "⑰", "⑱",
        "⑲", "⑳",
    ];
    CIRCLED
        .get(n.wrapping_sub(1))
        .map_or_else(|| format!("[{n}]"), |s| s.to_string())
}

impl Report {
    /// The segments and edges an export marks.
    pub fn highlight(&self) -> Highlight {
        let mut h = Highlight {
            hang: Some((
                self.hang.segment,
                self.hang.tid,
                self.hang.start_ns,
                self.hang.end_ns,
            )),
            ..Highlight::default()
        };
        for (i, item) in self.path.iter().enumerate() {
            h.path
                .push((item.segment, i + 1, format!("{} {}", item.comm, item.tid)));
            if i > 0 {
                if let Some(e) = item.edge {
                    // The item was reached from the previous one by going back along `e`:
                    // the item is the cause, the previous one the effect.
                    h.path_edges.push((
                        item.segment,
                        self.path[i - 1].segment,
                        e.kind.name().to_string(),
                        e.strength.name().to_string(),
                    ));
                }
            }
        }
        h.roots = self.root_causes.iter().map(|r| r.segment).collect();
        for p in self.ranked_paths.iter().skip(1) {
            for s in &p.steps {
                if !h.path.iter().any(|(id, _, _)| *id == s.segment)
                    && !h.alternatives.contains(&s.segment)
                {
                    h.alternatives.push(s.segment);
                }
            }
        }
        h
    }

    /// A compact text picture of the path: one lane per thread on a shared time axis, each
    /// path segment drawn where it ran (`━`, the hang `▒`), numbered in path order, then the
    /// arrows from cause to effect.
    pub fn to_picture(&self) -> String {
        if self.path.is_empty() {
            return String::new();
        }
        let t0 = self
            .path
            .iter()
            .map(|p| p.start_ns)
            .min()
            .unwrap_or(self.hang.start_ns)
            .min(self.hang.start_ns);
        let t1 = self
            .path
            .iter()
            .map(|p| p.end_ns)
            .max()
            .unwrap_or(self.hang.end_ns)
            .max(self.hang.end_ns);
        let span = t0.until(t1).max(1);
        let col = |t: Nanos| -> usize {
            ((t0.until(t) as u128 * (WIDTH as u128 - 1)) / span as u128) as usize
        };
        let rel = |t: Nanos| -> String {
            if t >= self.hang.start_ns {
                format!("+{}", secs(self.hang.start_ns.until(t)))
            } else {
                format!("-{}", secs(t.until(self.hang.start_ns)))
            }
        };
        // Lanes in order of first appearance on the path.
        let mut lanes: Vec<(Tid, String)> = Vec::new();
        for p in &self.path {
            if !lanes.iter().any(|(t, _)| *t == p.tid) {
                let name = if p.tid.0 < 0 {
                    p.comm.clone()
                } else {
                    format!("{} {}", p.comm, p.tid.0)
                };
                lanes.push((p.tid, name));
            }
        }
        let name_w = lanes
            .iter()
            .map(|(_, n)| n.chars().count())
            .max()
            .unwrap_or(0)
            .min(28);
        let mut out = format!(
            "Picture (time → from {} to {}; ▒ the hang, ━ a segment on the path):\n",
            rel(t0),
            rel(t1)
        );
        for (tid, name) in &lanes {
            let mut row: Vec<String> = vec!["·".to_string(); WIDTH];
            let mine = || self.path.iter().enumerate().filter(|(_, p)| p.tid == *tid);
            for (_, p) in mine() {
                let (a, b) = (col(p.start_ns), col(p.end_ns).max(col(p.start_ns)));
                let fill = if p.role == Role::Hang { "▒" } else { "━" };
                for c in row.iter_mut().take(b + 1).skip(a) {
                    *c = fill.to_string();
                }
            }
            // Step numbers after the fills, so a long segment does not hide a short one; two
            // steps in one column move the later one right.
            let mut taken = [false; WIDTH];
            for (i, p) in mine() {
                let mut a = col(p.start_ns);
                while a + 1 < WIDTH && taken[a] {
                    a += 1;
                }
                taken[a] = true;
                row[a] = step_mark(i + 1);
            }
            let short: String = name.chars().take(name_w).collect();
            out.push_str(&format!(
                "  {short:<name_w$} │{}│\n",
                row.concat(),
                name_w = name_w
            ));
        }
        let mut arrows = Vec::new();
        for (i, p) in self.path.iter().enumerate().skip(1) {
            if let Some(e) = p.edge {
                arrows.push(format!(
                    "{} ─{} {}→ {}",
                    step_mark(i + 1),
                    e.kind.name(),
                    e.strength.name(),
                    step_mark(i)
                ));
            }
        }
        if !arrows.is_empty() {
            out.push_str("  ");
            out.push_str(&arrows.join("   "));
            out.push('\n');
        }
        out
    }
}
