//! Who answers the walk's questions: the default policy ([`AutoOracle`], `--auto`), a person at
//! a terminal ([`TerminalOracle`]), or a list of answers ([`ScriptedOracle`], `--answers FILE`).
//!
//! Choices are shown and scripted **1-based** (`1` is the first choice); [`Reply::Choice`] and
//! the report's `answer` are 0-based indices.

use crate::report::Question;
use crate::stacks::stack_line;
use crate::Error;
use std::collections::VecDeque;
use std::io::{BufRead, Write};

/// An oracle's reply to a question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Follow choice `n` (0-based).
    Choice(usize),
    /// Stop the walk at the segment asked about.
    Stop,
    /// Let the default policy answer (the report marks the answer `defaulted`).
    Default,
    /// Follow choice `n` (0-based) because a saved answer says so (the report marks it
    /// `by_rule`).
    Rule(usize),
    /// Stop because a saved answer says so.
    RuleStop,
}

/// Answers the questions of the interactive slicing.
pub trait Oracle {
    /// Answers one question. A `Choice` out of range counts as `Default`.
    fn ask(&mut self, question: &Question) -> Reply;
}

/// Always takes the default: the most recent strong incoming edge, else the most recent edge.
#[derive(Clone, Copy, Debug, Default)]
pub struct AutoOracle;

impl Oracle for AutoOracle {
    fn ask(&mut self, _question: &Question) -> Reply {
        Reply::Default
    }
}

/// Replies from a list, in order; once the list is used up, the default.
#[derive(Clone, Debug, Default)]
pub struct ScriptedOracle {
    replies: VecDeque<Reply>,
}

impl ScriptedOracle {
    /// An oracle that gives these replies in order.
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> ScriptedOracle {
        ScriptedOracle {
            replies: replies.into_iter().collect(),
        }
    }

    /// Parses an answers file: one answer per line, a 1-based choice number, `s`/`stop`, or
    /// `d`/`default`; blank lines and lines starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<ScriptedOracle, Error> {
        let mut replies = VecDeque::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match parse_reply(line) {
                Some(r) => replies.push_back(r),
                None => {
                    return Err(Error::BadAnswer {
                        line: i + 1,
                        text: line.to_string(),
                    })
                }
            }
        }
        Ok(ScriptedOracle { replies })
    }

    /// How many replies are left.
    pub fn remaining(&self) -> usize {
        self.replies.len()
    }
}

/// One answer as typed or written in an answers file: a 1-based choice number, `s`/`stop`,
/// or `d`/`default`.
pub fn parse_reply(s: &str) -> Option<Reply> {
    match s.to_ascii_lowercase().as_str() {
        "s" | "stop" => Some(Reply::Stop),
        "d" | "default" => Some(Reply::Default),
        n => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .map(|n| Reply::Choice(n - 1)),
    }
}

impl Oracle for ScriptedOracle {
    fn ask(&mut self, _question: &Question) -> Reply {
        self.replies.pop_front().unwrap_or(Reply::Default)
    }
}

/// Asks a person: prints the numbered choices to `output`, reads a line from `input`.
/// A number picks a choice, `s`/`stop` stops, an empty line or end of input takes the default;
/// anything else is asked again.
#[derive(Debug)]
pub struct TerminalOracle<R: BufRead, W: Write> {
    input: R,
    output: W,
}

impl<R: BufRead, W: Write> TerminalOracle<R, W> {
    /// An oracle reading answers from `input` and writing questions to `output`.
    pub fn new(input: R, output: W) -> TerminalOracle<R, W> {
        TerminalOracle { input, output }
    }

    /// Gives back the reader and the writer.
    pub fn into_inner(self) -> (R, W) {
        (self.input, self.output)
    }
}

/// Writes a question as [`TerminalOracle`] asks it: the prompt, the blocking stack, the
/// numbered choices (kind, strength, description, default marked, stack) and the stop line.
/// Write errors are ignored (a closed terminal; the read then decides).
pub fn write_question(output: &mut dyn Write, q: &Question) {
    let _ = writeln!(output, "\n? {}", q.prompt);
    if !q.stack.is_empty() {
        let _ = writeln!(output, "  (blocked at: {})", stack_line(&q.stack));
    }
    for (i, c) in q.choices.iter().enumerate() {
        let mark = if i == q.default { " (default)" } else { "" };
        let _ = writeln!(
            output,
            "  {}) [{} {}] {}{}",
            i + 1,
            c.kind,
            c.strength.name(),
            c.description,
            mark
        );
        if !c.stack.is_empty() {
            let _ = writeln!(output, "       at: {}", stack_line(&c.stack));
        }
    }
    let _ = writeln!(output, "  s) stop here");
}

/// The answer a typed line gives to a question with `n` choices: an empty line is the
/// default; `None` for anything that is not an answer (ask again).
pub fn answer_of(line: &str, n: usize) -> Option<Reply> {
    let line = line.trim();
    if line.is_empty() {
        return Some(Reply::Default);
    }
    match parse_reply(line) {
        Some(Reply::Choice(i)) if i < n => Some(Reply::Choice(i)),
        Some(r @ (Reply::Stop | Reply::Default)) => Some(r),
        _ => None,
    }
}

impl<R: BufRead, W: Write> Oracle for TerminalOracle<R, W> {
    fn ask(&mut self, q: &Question) -> Reply {
        let n = q.choices.len();
        write_question(&mut self.output, q);
        loop {
            let _ = write!(
                self.output,
                "answer [1-{n}, s; enter = {}]: ",
                q.default + 1
            );
            let _ = self.output.flush();
            let mut line = String::new();
            match self.input.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = writeln!(self.output);
                    return Reply::Default;
                }
                Ok(_) => {}
            }
            match answer_of(&line, n) {
                Some(r) => return r,
                None => {
                    let _ = writeln!(
                        self.output,
                        "please answer a number from 1 to {n}, s to stop, or enter for the default"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::report::{Answer, Choice};
    use argus_schema::{Nanos, Pid, SegmentId, Strength, Tid};
    use std::io::Cursor;

    fn question(n: usize) -> Question {
        Question {
            about: SegmentId::new(Tid(1), 0),
            about_label: "1#0".into(),
            tag: "wake".into(),
            prompt: "which one?".into(),
            choices: (0..n)
                .map(|i| Choice {
                    segment: SegmentId::new(Tid(10 + i as i32), 0),
                    segment_label: format!("{}#0", 10 + i),
                    pid: Pid(10),
                    tid: Tid(10 + i as i32),
                    comm: format!("t{i}"),
                    kind: "wakeup".into(),
                    strength: Strength::Strong,
                    ts: Nanos(i as u64),
                    description: format!("choice {i}"),
                    stack: Vec::new(),
                })
                .collect(),
            default: n - 1,
            answer: Answer::Choice(n - 1),
            defaulted: true,
            pattern: "wake|main|futex|wakeup/strong".into(),
            by_rule: false,
            stack: Vec::new(),
        }
    }

    #[test]
    fn terminal_reasks_on_garbage_then_takes_the_number() {
        let mut out = Vec::new();
        let mut o = TerminalOracle::new(Cursor::new("9\nfoo\n2\n"), &mut out);
        assert_eq!(o.ask(&question(3)), Reply::Choice(1));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("please answer").count(), 2, "{text}");
        assert!(text.contains("  1) [wakeup strong] choice 0"), "{text}");
        assert!(text.contains("choice 2 (default)"), "{text}");
    }

    #[test]
    fn terminal_eof_and_empty_line_default_and_s_stops() {
        let mut o = TerminalOracle::new(Cursor::new(""), Vec::new());
        assert_eq!(o.ask(&question(2)), Reply::Default);
        let mut o = TerminalOracle::new(Cursor::new("\n"), Vec::new());
        assert_eq!(o.ask(&question(2)), Reply::Default);
        let mut o = TerminalOracle::new(Cursor::new("x\nstop\n"), Vec::new());
        assert_eq!(o.ask(&question(2)), Reply::Stop);
        let mut o = TerminalOracle::new(Cursor::new("0\n"), Vec::new());
        assert_eq!(
            o.ask(&question(2)),
            Reply::Default,
            "0 is garbage, then EOF"
        );
    }

    #[test]
    fn scripted_parses_one_based_answers_and_runs_out_to_default() {
        let mut o = ScriptedOracle::parse("# answers\n2\n\ns\ndefault\n").unwrap();
        assert_eq!(o.remaining(), 3);
        let q = question(3);
        assert_eq!(o.ask(&q), Reply::Choice(1));
        assert_eq!(o.ask(&q), Reply::Stop);
        assert_eq!(o.ask(&q), Reply::Default);
        assert_eq!(o.ask(&q), Reply::Default);
    }

    #[test]
    fn scripted_rejects_garbage_with_the_line_number() {
        let err = ScriptedOracle::parse("1\nmaybe\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "answers file line 2: expected a choice number, s/stop or d/default, got \"maybe\""
        );
    }
}
