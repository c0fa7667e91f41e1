//! The kind and strength of a step on a reported path as the report's JSON names them:
//! [`PathEdgeKind`] (a graph edge's kind, or the baseline comparison) and the lowercase
//! strength names. Shared by the walk's findings and the report (neither owns the other).

use argus_schema::EdgeKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The kind of step taken to reach a path item: an edge of the graph, or the baseline
/// comparison, which is not one. In JSON it is a lowercase name: the edge kind's
/// ([`EdgeKind::name`]: `wakeup`, `lock_file`, …) or `baseline`.
///
/// A data-flag setter guessed outside the graph (no watchpoint edge) is reached by
/// `Edge(EdgeKind::Flag)` too, with a weak strength.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathEdgeKind {
    /// An edge of the graph, of this kind.
    Edge(EdgeKind),
    /// Not an edge of the graph: the thread that ended the same wait in a baseline run.
    Baseline,
}

impl PathEdgeKind {
    /// Stable lowercase name: the edge kind's, or `baseline`.
    pub fn name(self) -> &'static str {
        match self {
            PathEdgeKind::Edge(k) => k.name(),
            PathEdgeKind::Baseline => "baseline",
        }
    }

    /// The kind named `name` ([`PathEdgeKind::name`]), if any.
    pub fn from_name(name: &str) -> Option<PathEdgeKind> {
        if name == PathEdgeKind::Baseline.name() {
            Some(PathEdgeKind::Baseline)
        } else {
            EdgeKind::from_name(name).map(PathEdgeKind::Edge)
        }
    }

    /// The graph edge's kind (`None` for the baseline).
    pub fn edge(self) -> Option<EdgeKind> {
        match self {
            PathEdgeKind::Edge(k) => Some(k),
            PathEdgeKind::Baseline => None,
        }
    }
}

impl From<EdgeKind> for PathEdgeKind {
    fn from(k: EdgeKind) -> PathEdgeKind {
        PathEdgeKind::Edge(k)
    }
}

impl Serialize for PathEdgeKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for PathEdgeKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PathEdgeKind, D::Error> {
        let name = String::deserialize(d)?;
        PathEdgeKind::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown path edge kind `{name}`")))
    }
}

/// Serde for a [`argus_schema::Strength`] as its lowercase name (`strong`, `boosted`, `weak`).
pub(crate) mod lower_strength {
    use argus_schema::Strength;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Strength, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Strength, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "strong" => Ok(Strength::Strong),
            "boosted" => Ok(Strength::Boosted),
            "weak" => Ok(Strength::Weak),
            other => Err(serde::de::Error::unknown_variant(
                other,
                &["strong", "boosted", "weak"],
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_edge_kinds_are_named_like_the_edge_kinds_and_round_trip() {
        let mut all: Vec<PathEdgeKind> = EdgeKind::ALL.map(PathEdgeKind::Edge).to_vec();
        all.push(PathEdgeKind::Baseline);
        let mut names = std::collections::HashSet::new();
        for k in all {
            assert!(names.insert(k.name()), "{} twice", k.name());
            if let Some(e) = k.edge() {
                assert_eq!(k.name(), e.name());
            }
            assert_eq!(PathEdgeKind::from_name(k.name()), Some(k));
            let j = serde_json::to_string(&k).expect("serialize");
            assert_eq!(j, format!("\"{}\"", k.name()));
            let back: PathEdgeKind = serde_json::from_str(&j).expect("deserialize");
            assert_eq!(back, k);
        }
        assert!(serde_json::from_str::<PathEdgeKind>("\"Wakeup\"").is_err());
    }
}
