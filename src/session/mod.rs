//! The interactive `argus debug` session: a prompt where the user moves through the event
//! graph as in a debugger (list the hangs, pick one, show a vertex, step back along an edge,
//! slice back, see the baseline, revisit a question, mark an edge wrong, jump to a time,
//! search markers and input events, save the answers as rules). Today's question-and-answer
//! flow is the default path through it: the session starts by diagnosing the hang `argus
//! debug` would pick, asking at the same prompt.
//!
//! Commands live in one table (`commands.rs`: name, arguments, help, function); how a vertex,
//! an edge or a time is shown lives in `view.rs`; where lines come from in `input.rs`.

mod commands;
mod input;
mod view;

use crate::cli::DebugArgs;
use anyhow::{Context, Result};
use argus_diagnose::{
    answer_of, find_hangs, write_question, DiagnoseConfig, Graph, Hang, Oracle, Question, Reply,
    Report, RuleOracle, SavedAnswers, Target,
};
use argus_schema::{CausalEdge, Nanos, SegmentId, Tid};
use input::Input;
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Whether `argus debug` runs the session: asked for (`--script`, `--session`), or a person
/// at a terminal who did not ask for a one-shot answer (`--auto`, `--answers`, `--json`,
/// `--follow`).
pub(crate) fn wanted(args: &DebugArgs) -> bool {
    args.script.is_some()
        || args.session
        || (!args.auto
            && args.slow.is_none()
            && args.answers.is_none()
            && !args.json
            && !args.follow
            && std::io::stdin().is_terminal()
            && std::io::stdout().is_terminal())
}

/// Runs the session on `graph` (loaded from `snapshot` with its markers and stacks) until
/// `quit` or the end of input; the exit code is the last diagnosis's (1 when a hang was
/// diagnosed, 0 when none).
pub(crate) fn run(args: &DebugArgs, snapshot: &Path, graph: Graph) -> Result<u8> {
    let input = match &args.script {
        Some(s) => Input::script(s)?,
        None if std::io::stdin().is_terminal() => Input::terminal(commands::names())?,
        None => Input::stdin(),
    };
    let mut s = Session::open(args, snapshot, graph, input)?;
    s.start()?;
    loop {
        let Some(line) = s.input.read("argus> ")? else {
            break;
        };
        let at = s.input.position().unwrap_or_default();
        match commands::run_line(&mut s, &line) {
            Ok(commands::Flow::Go) => {}
            Ok(commands::Flow::Quit) => break,
            Err(e) if s.input.interactive() => println!("error: {e:#}"),
            Err(e) => return Err(e.context(format!("{at}: {}", line.trim()))),
        }
    }
    s.save_history_rules()?;
    Ok(s.exit_code())
}

/// What the session knows and where it stands.
pub(crate) struct Session {
    args: DebugArgs,
    /// The snapshot's graph as loaded, kept once an edge is marked wrong (a graph of millions
    /// of segments is not copied for a session that never drops one).
    base: Option<Graph>,
    /// The graph without the edges marked wrong.
    graph: Graph,
    /// Edges the user marked wrong, in the order marked.
    wrong: Vec<CausalEdge>,
    /// The watched threads (the target's thread, else every main thread).
    watched: Vec<Tid>,
    target: Option<Target>,
    subject: String,
    /// The watched threads' hangs, in the order `argus debug` would pick them.
    hangs: Vec<Hang>,
    /// The hang diagnosed last (an index into `hangs`) and its report.
    picked: Option<usize>,
    report: Option<Report>,
    /// The vertex `show`, `back` and `slice` work from.
    cursor: Option<SegmentId>,
    /// Where `back` came from, most recent last (`forward` returns).
    trail: Vec<SegmentId>,
    /// The questions the last walk asked at the prompt, with their answers.
    asked: Vec<(Question, Reply)>,
    config: DiagnoseConfig,
    /// Rules read from `--save-answers` (they answer matching questions) and those learned
    /// from explicit answers in this session.
    rules: SavedAnswers,
    learned: SavedAnswers,
    /// The trace's first and last moments and its wall-clock offset (for `at`, times).
    trace_start: Nanos,
    trace_end: Nanos,
    wall_offset: Option<i64>,
    /// The recorder's own threads (the manifest's `recorder_tids`): `inspect` says nothing
    /// of them.
    pub(crate) recorder_tids: std::collections::BTreeSet<Tid>,
    input: Input,
}

impl Session {
    fn open(args: &DebugArgs, snapshot: &Path, graph: Graph, input: Input) -> Result<Session> {
        let manifest = argus_sinks::Manifest::read(snapshot)
            .with_context(|| format!("reading snapshot {}", snapshot.display()))?;
        let target = argus_engine::diagnosis::resolve_target(
            &graph,
            args.pid,
            args.tid,
            args.comm.as_deref(),
        )?;
        let (watched, subject) = match target {
            Some(t) => (vec![t.thread()], graph.describe(t.thread())),
            None => (
                argus_diagnose::main_threads(&graph),
                "the main threads of all processes".to_string(),
            ),
        };
        let config = args.diagnose_config()?;
        let rules = argus_engine::diagnosis::saved_answers(args.save_answers.as_deref())?;
        let trace_start = manifest.trace_start_ns.unwrap_or_else(|| {
            graph
                .segments()
                .iter()
                .map(|s| s.start_ns)
                .min()
                .unwrap_or_default()
        });
        let trace_end = graph.trace_end_ns();
        let mut s = Session {
            args: args.clone(),
            base: None,
            graph,
            wrong: Vec::new(),
            watched,
            target,
            subject,
            hangs: Vec::new(),
            picked: None,
            report: None,
            cursor: None,
            trail: Vec::new(),
            asked: Vec::new(),
            config,
            rules,
            learned: SavedAnswers::default(),
            trace_start,
            trace_end,
            wall_offset: manifest.wall_offset_ns,
            recorder_tids: manifest.recorder_tids.iter().map(|&t| Tid(t)).collect(),
            input,
        };
        if let Some(text) = &args.at {
            s.config.hang.at_ns = Some(s.moment(text)?);
        }
        s.find_hangs();
        Ok(s)
    }

    /// The default path: the hang `argus debug` would pick, diagnosed with questions.
    fn start(&mut self) -> Result<()> {
        println!(
            "argus debug: {} hang(s) of {} ({} segments, {} edges); type help for the commands",
            self.hangs.len(),
            self.subject,
            self.graph.segments().len(),
            self.graph.edges().len()
        );
        if self.hangs.is_empty() {
            println!(
                "no hang of {} longer than {} s",
                self.subject, self.args.threshold
            );
            return Ok(());
        }
        self.pick(0, Vec::new())
    }

    /// The watched threads' hangs, ranked as `argus debug` ranks them (the moment of `at`,
    /// marked ones, the longest).
    fn find_hangs(&mut self) {
        let at = self.config.hang.at_ns;
        let mut hangs: Vec<Hang> = self
            .watched
            .iter()
            .flat_map(|&t| find_hangs(&self.graph, t, &self.config.hang))
            .collect();
        hangs.sort_by_key(|h| argus_diagnose::hangs::rank(h, at));
        self.hangs = hangs;
    }

    /// Diagnoses hang `i`: the first answers come from `replay`, the rest are asked at the
    /// prompt (saved rules answer the questions they match). Prints the report; the cursor
    /// goes to the hang's vertex.
    fn pick(&mut self, i: usize, replay: Vec<Reply>) -> Result<()> {
        self.walk(i, replay, Vec::new())
    }

    /// [`Session::pick`], reusing the answers of `before` (the last walk's questions and
    /// answers) for as long as the walk asks the same questions in the same order.
    fn walk(&mut self, i: usize, replay: Vec<Reply>, before: Vec<(Question, Reply)>) -> Result<()> {
        let hang = self
            .hangs
            .get(i)
            .with_context(|| format!("there is no hang {} (see hangs)", i + 1))?
            .clone();
        let mut asker = Asker {
            replay: replay.into(),
            before,
            asked: Vec::new(),
            input: &mut self.input,
            error: None,
        };
        let mut oracle = RuleOracle::new(&mut asker, self.rules.clone());
        let report = argus_diagnose::diagnose_hang(&self.graph, &hang, &mut oracle, &self.config)?;
        let learned = oracle.learned().clone();
        if let Some(e) = asker.error {
            return Err(e);
        }
        self.asked = asker.asked;
        self.learned.merge(&learned);
        let diagnosis = argus_diagnose::Diagnosis {
            target: self.target,
            subject: self.subject.clone(),
            report: Some(report),
        };
        print!("{}", diagnosis.to_text());
        if let Some(r) = &diagnosis.report {
            print!("{}", r.to_picture());
        }
        std::io::stdout().flush()?;
        self.picked = Some(i);
        self.cursor = Some(hang.spin.segment);
        self.trail.clear();
        self.report = diagnosis.report;
        Ok(())
    }

    /// Rebuilds the graph without the edges marked wrong and diagnoses the picked hang again.
    fn rebuild(&mut self) -> Result<()> {
        let base = match self.base.take() {
            Some(b) => b,
            None => self.graph.without_edges(|_| false)?,
        };
        self.graph = base.without_edges(|e| self.wrong.contains(e))?;
        if !self.wrong.is_empty() {
            self.base = Some(base);
        }
        self.find_hangs();
        match self.picked {
            Some(_) if !self.hangs.is_empty() => {
                let was = self.report.as_ref().map(|r| r.hang.segment);
                let i = self
                    .hangs
                    .iter()
                    .position(|h| Some(h.spin.segment) == was)
                    .unwrap_or(0);
                let before = std::mem::take(&mut self.asked);
                self.walk(i, Vec::new(), before)
            }
            _ => Ok(()),
        }
    }

    /// A moment typed by the user, on the trace clock.
    fn moment(&self, text: &str) -> Result<Nanos> {
        crate::moment::parse(text)
            .and_then(|m| {
                crate::moment::resolve(m, self.trace_start, self.trace_end, self.wall_offset)
            })
            .map_err(|e| anyhow::anyhow!(e))
    }

    /// Writes the rules learned from explicit answers to `--save-answers`, if given.
    fn save_history_rules(&self) -> Result<()> {
        if let Some(f) = &self.args.save_answers {
            if !self.learned.rules.is_empty() {
                let mut all = self.rules.clone();
                all.merge(&self.learned);
                std::fs::write(f, all.to_json() + "\n")
                    .with_context(|| format!("writing saved answers {}", f.display()))?;
            }
        }
        Ok(())
    }

    fn exit_code(&self) -> u8 {
        u8::from(self.report.is_some())
    }
}

/// Answers the walk's questions: the replayed answers first, then a person (or the script)
/// at the session's prompt; the end of input takes the default. A script line that is not an
/// answer is an error (a person is asked again): the script and the questions disagree.
struct Asker<'a> {
    /// Answers given before anything is asked (`answer Q N`).
    replay: VecDeque<Reply>,
    /// The previous walk's questions: while this walk asks the same ones in the same order,
    /// their answers are reused (after `wrong`, only what the dropped edge changed is asked).
    before: Vec<(Question, Reply)>,
    /// What this walk asked (or reused), in order.
    asked: Vec<(Question, Reply)>,
    input: &'a mut Input,
    /// The script's line that was not an answer (the walk then ends with defaults).
    error: Option<anyhow::Error>,
}

impl Oracle for Asker<'_> {
    fn ask(&mut self, q: &Question) -> Reply {
        if let Some(r) = self.replay.pop_front() {
            self.asked.push((q.clone(), r));
            return r;
        }
        if self.error.is_some() {
            return Reply::Default;
        }
        let i = self.asked.len();
        if let Some((prev, r)) = self.before.get(i) {
            if prev.same_as(q) {
                let r = *r;
                self.asked.push((q.clone(), r));
                return r;
            }
            // A different question here: what was answered after it no longer applies.
            self.before.clear();
        }
        let r = self.ask_person(q);
        self.asked.push((q.clone(), r));
        r
    }
}

impl Asker<'_> {
    fn ask_person(&mut self, q: &Question) -> Reply {
        let n = q.choices.len();
        write_question(&mut std::io::stdout().lock(), q);
        loop {
            let prompt = format!("answer [1-{n}, s; enter = {}]: ", q.default + 1);
            match self.input.read(&prompt) {
                Ok(Some(line)) => match answer_of(&line, n) {
                    Some(r) => return r,
                    None if !self.input.interactive() => {
                        self.error = Some(anyhow::anyhow!(
                            "{}: {:?} is not an answer to the walk's question (a number from 1 to {n}, s, d, or an empty line for the default)",
                            self.input.position().unwrap_or_default(),
                            line.trim()
                        ));
                        return Reply::Default;
                    }
                    None => println!(
                        "please answer a number from 1 to {n}, s to stop, or enter for the default"
                    ),
                },
                Ok(None) | Err(_) => return Reply::Default,
            }
        }
    }
}
