//! Asking: which of several causes to follow. A single strong edge is followed without
//! asking; several edges, or a weak one, make a [`Question`](crate::Question) for the
//! [`Oracle`](crate::Oracle), whose default answer comes from a shallow beam search.

use super::phrases::{sc, src_syscall};
use super::specific;
use super::Walk;
use crate::answerer::Reply;
use crate::beam;
use crate::report::{Answer, Choice, Question};
use argus_schema::{CausalEdge, EdgeKind, Segment, Strength};

/// The one strong message a task sent among `edges` when every other one comes from an
/// interrupt: the data is the cause, the interrupt (the network softirq delivering a
/// packet, a poll's timer) only its courier. Followed without asking.
fn sent_by_a_task<'g>(edges: &[&'g CausalEdge]) -> Option<&'g CausalEdge> {
    let mut sent = edges.iter().filter(|e| {
        e.kind == EdgeKind::Message && e.strength == Strength::Strong && e.src.tid().is_task()
    });
    let one = sent.next()?;
    (sent.next().is_none()
        && edges
            .iter()
            .all(|e| std::ptr::eq(*e, *one) || e.src.tid().irq_cpu().is_some()))
    .then_some(*one)
}

pub(super) enum Chosen<'g> {
    Edge(&'g CausalEdge),
    Stop,
    Nothing,
}

impl<'g> Walk<'g, '_> {
    /// Picks one of `edges` (the causes of `about`): follows a single strong edge, asks
    /// otherwise.
    /// The edge [`Walk::choose`] would offer as its default, without asking (steps that do
    /// not change the culprit, such as the context of a busy one).
    pub(super) fn choose_default(&self, mut edges: Vec<&'g CausalEdge>) -> Option<&'g CausalEdge> {
        edges.sort_by_key(|e| (e.src, std::cmp::Reverse((e.strength, specific(e.kind)))));
        edges.dedup_by_key(|e| e.src);
        edges.sort_by_key(|e| (e.ts, e.src, e.kind));
        if edges.len() > self.cfg.max_choices.max(1) {
            let cut = edges.len() - self.cfg.max_choices.max(1);
            edges.drain(..cut);
        }
        if edges.is_empty() {
            return None;
        }
        let i = self.beam_default(&edges).min(edges.len() - 1);
        Some(edges[i])
    }

    pub(super) fn choose(
        &mut self,
        tag: &str,
        about: &Segment,
        prompt: String,
        mut edges: Vec<&'g CausalEdge>,
    ) -> Chosen<'g> {
        if edges.is_empty() {
            return Chosen::Nothing;
        }
        // One choice per source: the strongest, most specific edge (a message or exit edge
        // says more than the bare wake-up that comes with it).
        edges.sort_by_key(|e| (e.src, std::cmp::Reverse((e.strength, specific(e.kind)))));
        edges.dedup_by_key(|e| e.src);
        edges.sort_by_key(|e| (e.ts, e.src, e.kind));
        if let Some(e) = sent_by_a_task(&edges) {
            return Chosen::Edge(e);
        }
        if edges.len() == 1 && edges[0].strength == Strength::Strong {
            return Chosen::Edge(edges[0]);
        }
        if edges.len() > self.cfg.max_choices.max(1) {
            let cut = edges.len() - self.cfg.max_choices.max(1);
            edges.drain(..cut);
        }
        let default = self.beam_default(&edges);
        let g = self.g;
        let choices = edges
            .iter()
            .filter_map(|e| {
                let s = g.segment(e.src)?;
                Some(Choice {
                    segment: s.id,
                    segment_label: s.id.to_string(),
                    pid: s.pid,
                    tid: s.tid,
                    comm: g.comm(s.tid),
                    kind: e.kind.name().to_string(),
                    strength: e.strength,
                    ts: e.ts,
                    description: self.words().choice_edge(
                        s,
                        e.kind,
                        src_syscall(e.src_syscall).as_deref(),
                        e.ts,
                    ),
                    stack: {
                        let st = g.sending_stack(s, e.ts);
                        if st.is_empty() {
                            g.blocking_stack(s)
                        } else {
                            st
                        }
                    },
                })
            })
            .collect::<Vec<_>>();
        if choices.len() != edges.len() {
            // Edges are validated when the graph is built; this cannot happen.
            return Chosen::Nothing;
        }
        match self.ask(tag, about, prompt, choices, default) {
            Some(i) => Chosen::Edge(edges[i]),
            None => Chosen::Stop,
        }
    }

    /// The default answer among `edges` (oldest first): the edge starting the best path of a
    /// shallow beam search (edge penalty, relevance to the hang, best continuation); ties go
    /// to the most recent strong edge.
    pub(super) fn beam_default(&self, edges: &[&'g CausalEdge]) -> usize {
        let g = self.g;
        // Data a task sent, delivered by an interrupt (loopback packets go through the
        // NET_RX softirq): the sender is the cause, the interrupt only its courier.
        let sent: Vec<usize> = edges
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                e.kind == EdgeKind::Message
                    && e.strength == Strength::Strong
                    && e.src.tid().is_task()
            })
            .map(|(i, _)| i)
            .collect();
        if sent.len() == 1
            && edges
                .iter()
                .all(|e| e.kind == EdgeKind::Message || e.src.tid().irq_cpu().is_some())
        {
            return sent[0];
        }
        let cfg = &self.cfg.beam;
        let mut best: Option<(f64, bool, usize)> = None;
        for (i, e) in edges.iter().enumerate() {
            let Some(src) = g.segment(e.src) else {
                continue;
            };
            let score = beam::step_cost(g, cfg, e, src, self.window)
                + beam::best_from(g, src, self.window, cfg);
            let strong = e.strength == Strength::Strong;
            let better = match best {
                None => true,
                Some((b, bs, _)) => {
                    score < b - 1e-9 || ((score - b).abs() <= 1e-9 && (strong || !bs))
                }
            };
            if better {
                best = Some((score, strong, i));
            }
        }
        best.map_or(edges.len().saturating_sub(1), |(_, _, i)| i)
    }

    /// Asks the oracle; records the question. `None` means stop.
    pub(super) fn ask(
        &mut self,
        tag: &str,
        about: &Segment,
        prompt: String,
        choices: Vec<Choice>,
        default: usize,
    ) -> Option<usize> {
        let n = choices.len();
        if self.silent {
            return (default < n).then_some(default);
        }
        let mut kinds: Vec<String> = choices
            .iter()
            .map(|c| format!("{}/{}", c.kind, c.strength.name()))
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        let pattern = format!(
            "{tag}|{}|{}|{}",
            self.g.comm(about.tid),
            sc(about.wait_syscall),
            kinds.join(",")
        );
        let mut q = Question {
            stack: self.g.blocking_stack(about),
            about: about.id,
            about_label: about.id.to_string(),
            tag: tag.to_string(),
            prompt,
            choices,
            default,
            answer: Answer::Choice(default),
            defaulted: true,
            pattern,
            by_rule: false,
        };
        let (answer, defaulted, by_rule) = match self.oracle.ask(&q) {
            Reply::Choice(i) if i < n => (Answer::Choice(i), false, false),
            Reply::Rule(i) if i < n => (Answer::Choice(i), false, true),
            Reply::Stop => (Answer::Stop, false, false),
            Reply::RuleStop => (Answer::Stop, false, true),
            Reply::Choice(_) | Reply::Rule(_) | Reply::Default => {
                (Answer::Choice(default), true, false)
            }
        };
        q.answer = answer;
        q.defaulted = defaulted;
        q.by_rule = by_rule;
        tracing::debug!(prompt = %q.prompt, ?answer, defaulted, "question answered");
        self.questions.push(q);
        match answer {
            Answer::Choice(i) => Some(i),
            Answer::Stop => None,
        }
    }

    /// A question about `subject`'s cause among `edges` (before one choice per source is
    /// kept), in words.
    pub(super) fn wake_prompt(&self, subject: String, edges: &[&CausalEdge]) -> String {
        let strong = edges
            .iter()
            .filter(|e| e.strength == Strength::Strong)
            .count();
        self.words().wake_prompt(subject, edges.len(), strong)
    }

    /// Asks whether to diagnose a culprit recursively; `true` to go on.
    pub(super) fn confirm(&mut self, culprit: &'g Segment, what: String) -> bool {
        if !self.cfg.confirm_recursion {
            return true;
        }
        let g = self.g;
        let choice = Choice {
            segment: culprit.id,
            segment_label: culprit.id.to_string(),
            pid: culprit.pid,
            tid: culprit.tid,
            comm: g.comm(culprit.tid),
            kind: "continue".to_string(),
            strength: Strength::Strong,
            ts: culprit.start_ns,
            description: self.words().choice_continue(culprit.tid),
            stack: g.blocking_stack(culprit),
        };
        self.ask("recurse", culprit, what, vec![choice], 0)
            .is_some()
    }
}
