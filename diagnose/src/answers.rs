//! Saved answers: what a user answered, kept as rules keyed by the question's *pattern* (the
//! kind of question, the thread name, its wait syscall and the edge kinds offered — never
//! ids), so the next hang with the same pattern is answered without asking.
//!
//! ```text
//!  argus debug snap1 --save-answers rules.json     asks 3 questions, saves the 3 answers
//!  argus debug snap2 --save-answers rules.json     same program, new pids: the rules answer
//!                                                  the known patterns, only new ones are asked
//! ```
//!
//! A rule's pick names the choice by thread name, edge kind and strength, so it applies to a
//! new trace where the ids differ. A rule whose pick is not among the choices is ignored.

use crate::answerer::{Oracle, Reply};
use crate::report::Question;
use crate::Error;
use serde::{Deserialize, Serialize};

/// What a rule answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum SavedPick {
    /// Stop the walk at this question.
    Stop,
    /// The choice with this thread name, edge kind and strength.
    Choice {
        /// Thread name of the choice.
        comm: String,
        /// Edge kind (`wakeup`, `flag`, `baseline`, `continue`…).
        kind: String,
        /// Edge strength name.
        strength: String,
    },
}

/// One saved answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedRule {
    /// The question pattern ([`Question::pattern`]).
    pub pattern: String,
    /// The answer.
    pub pick: SavedPick,
}

/// A file of saved answers (`--save-answers FILE`), JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedAnswers {
    /// Format version (1).
    pub version: u32,
    /// The rules; a later rule for the same pattern replaces an earlier one.
    pub rules: Vec<SavedRule>,
}

impl SavedAnswers {
    /// Parses a saved-answers file.
    pub fn parse(text: &str) -> Result<SavedAnswers, Error> {
        serde_json::from_str(text).map_err(|e| Error::BadSavedAnswers {
            message: e.to_string(),
        })
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_string())
    }

    /// The reply a rule gives to `q`, if a rule matches its pattern and names one of its
    /// choices.
    pub fn lookup(&self, q: &Question) -> Option<Reply> {
        let rule = self.rules.iter().rev().find(|r| r.pattern == q.pattern)?;
        match &rule.pick {
            SavedPick::Stop => Some(Reply::RuleStop),
            SavedPick::Choice {
                comm,
                kind,
                strength,
            } => q
                .choices
                .iter()
                .position(|c| &c.comm == comm && &c.kind == kind && c.strength.name() == strength)
                .map(Reply::Rule),
        }
    }

    /// Records the answer `reply` to `q` (explicit answers only: defaults are not saved).
    pub fn record(&mut self, q: &Question, reply: Reply) {
        let pick = match reply {
            Reply::Choice(i) | Reply::Rule(i) => match q.choices.get(i) {
                Some(c) => SavedPick::Choice {
                    comm: c.comm.clone(),
                    kind: c.kind.clone(),
                    strength: c.strength.name().to_string(),
                },
                None => return,
            },
            Reply::Stop | Reply::RuleStop => SavedPick::Stop,
            Reply::Default => return,
        };
        self.rules.retain(|r| r.pattern != q.pattern);
        self.rules.push(SavedRule {
            pattern: q.pattern.clone(),
            pick,
        });
        self.version = 1;
    }

    /// Adds (or replaces) the rules of `other`.
    pub fn merge(&mut self, other: &SavedAnswers) {
        for r in &other.rules {
            self.rules.retain(|x| x.pattern != r.pattern);
            self.rules.push(r.clone());
        }
        self.version = 1;
    }
}

/// An oracle that answers from saved rules first and asks `inner` otherwise, learning every
/// explicit answer `inner` gives.
pub struct RuleOracle<'a> {
    inner: &'a mut dyn Oracle,
    saved: SavedAnswers,
    learned: SavedAnswers,
    used: usize,
}

impl<'a> RuleOracle<'a> {
    /// Rules `saved` in front of `inner`.
    pub fn new(inner: &'a mut dyn Oracle, saved: SavedAnswers) -> RuleOracle<'a> {
        RuleOracle {
            inner,
            saved,
            learned: SavedAnswers::default(),
            used: 0,
        }
    }

    /// How many questions a rule answered.
    pub fn rules_used(&self) -> usize {
        self.used
    }

    /// The explicit answers given by `inner` during this run, as rules.
    pub fn learned(&self) -> &SavedAnswers {
        &self.learned
    }

    /// The saved rules merged with the learned ones: what to write back.
    pub fn merged(&self) -> SavedAnswers {
        let mut all = self.saved.clone();
        all.merge(&self.learned);
        all
    }
}

impl Oracle for RuleOracle<'_> {
    fn ask(&mut self, q: &Question) -> Reply {
        if let Some(r) = self.saved.lookup(q) {
            self.used += 1;
            return r;
        }
        let r = self.inner.ask(q);
        self.learned.record(q, r);
        r
    }
}
