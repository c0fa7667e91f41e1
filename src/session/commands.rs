//! The session's commands, one table: a new command is one entry (name, arguments, help) and
//! one function here.

use super::Session;
use anyhow::{bail, Context, Result};
use argus_diagnose::{Answer, Reply};
use argus_schema::{SegmentId, Strength};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// What the loop does after a command.
pub(super) enum Flow {
    Go,
    Quit,
}

/// One command of the session.
struct Command {
    name: &'static str,
    /// One line for the list.
    what: &'static str,
    args: &'static str,
    help: &'static str,
    run: fn(&mut Session, &[&str]) -> Result<Flow>,
}

const COMMANDS: &[Command] = &[
    Command {
        name: "help",
        what: "list the commands, or explain one",
        args: "[COMMAND]",
        help: "list the commands, or explain one",
        run: help,
    },
    Command {
        name: "hangs",
        what: "list the watched threads' hangs",
        args: "",
        help: "list the watched threads' hangs (the one diagnosed is marked *)",
        run: hangs,
    },
    Command {
        name: "pick",
        what: "diagnose hang N",
        args: "N",
        help: "diagnose hang N of `hangs`, asking where the graph is ambiguous",
        run: pick,
    },
    Command {
        name: "report",
        what: "show the report again",
        args: "",
        help: "show the report of the hang diagnosed last",
        run: report,
    },
    Command {
        name: "json",
        what: "the report as one line of JSON",
        args: "",
        help: "the report of the hang diagnosed last as one line of JSON (as --json writes it)",
        run: json,
    },
    Command {
        name: "show",
        what: "show a vertex and the edges back from it",
        args: "[tid#seq]",
        help: "show a vertex (default: the selected one): thread, times, wait, syscalls, stack, \
               the edges back from it (numbered: what ended its wait, what started its run) \
               and its outgoing edges; it becomes the selected vertex",
        run: show,
    },
    Command {
        name: "thread",
        what: "list a thread's vertices",
        args: "[TID] [FROM-TO]",
        help: "list a thread's vertices (default: the selected vertex's thread), optionally \
               only those overlapping FROM-TO seconds since the trace's start, with what each \
               waited in and how many edges leave it",
        run: thread,
    },
    Command {
        name: "back",
        what: "step back along an edge",
        args: "[N]",
        help: "step back along edge N of the selected vertex (default: the most recent strong \
               edge that ended the hang's wait, or that started a cause's run) and show where \
               it leads",
        run: back,
    },
    Command {
        name: "forward",
        what: "return to where the last back came from",
        args: "",
        help: "return to the vertex the last `back` came from",
        run: forward,
    },
    Command {
        name: "slice",
        what: "the backward slice of a vertex, by thread",
        args: "[tid#seq]",
        help: "the backward slice of a vertex (default: the selected one): the vertices that \
               reach it through incoming edges since the hang began, by thread, and whether a \
               path of strong edges only reaches them",
        run: slice,
    },
    Command {
        name: "baseline",
        what: "the normal vertex the hang was compared with",
        args: "",
        help: "the normal vertex the hang was compared with, its wake-up path and what each of \
               its threads did during the hang",
        run: baseline,
    },
    Command {
        name: "questions",
        what: "the questions the walk asked and their answers",
        args: "",
        help: "the questions the walk asked and their answers",
        run: questions,
    },
    Command {
        name: "answer",
        what: "answer a question again and walk again",
        args: "Q N|s|d",
        help: "give question Q another answer (a choice number, s to stop there, d for the \
               default) and walk again from there (later questions are asked again)",
        run: answer,
    },
    Command {
        name: "wrong",
        what: "mark an edge wrong and diagnose again",
        args: "[N|d]",
        help: "mark edge N back from the selected vertex wrong (d: the default one, which \
               `back` follows): it is dropped from the graph and the hang diagnosed again; \
               without N, list the edges marked wrong",
        run: wrong,
    },
    Command {
        name: "unwrong",
        what: "take back a mark",
        args: "K|all",
        help: "take back mark K of `wrong` (or all) and diagnose again",
        run: unwrong,
    },
    Command {
        name: "at",
        what: "jump to a moment",
        args: "TIME",
        help: "jump to a moment (14:03:12, a date and time, @unix-seconds, -30s before the end): \
               diagnose the hang going on then (else the nearest) and select the watched \
               thread's vertex at that moment",
        run: at,
    },
    Command {
        name: "markers",
        what: "search the application's markers",
        args: "[TEXT]",
        help: "the application's markers (trace_marker writes), those containing TEXT",
        run: markers,
    },
    Command {
        name: "inputs",
        what: "search the input events",
        args: "[TEXT]",
        help: "input events: the watched threads' wake-ups by an interrupt or by input from \
               another process (a message, a socket, a pipe), those whose line contains TEXT",
        run: inputs,
    },
    Command {
        name: "inspect",
        what: "where the graph is likely wrong, with the next step",
        args: "",
        help: "where the graph is likely wrong (argus inspect without the rebuilds): segments \
               that reach several processes, long waits ended by nothing, hangs resting on \
               weak edges, lock-like hand-offs; each with the rule to add or what to record",
        run: inspect,
    },
    Command {
        name: "save",
        what: "save the answers as rules",
        args: "[FILE]",
        help: "save this session's explicit answers as rules (default: the --save-answers \
               file); `argus debug --save-answers FILE` then answers questions of the same \
               shape without asking",
        run: save,
    },
    Command {
        name: "quit",
        what: "end the session",
        args: "",
        help: "end the session (also Ctrl-D)",
        run: quit,
    },
];

/// The command names (for completion).
pub(super) fn names() -> Vec<String> {
    COMMANDS.iter().map(|c| c.name.to_string()).collect()
}

/// Runs one line typed at the prompt (a command and its arguments; a unique prefix of a
/// command's name is enough).
pub(super) fn run_line(s: &mut Session, line: &str) -> Result<Flow> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&name, args)) = words.split_first() else {
        return Ok(Flow::Go);
    };
    let cmd = find(name)?;
    (cmd.run)(s, args)
}

fn find(name: &str) -> Result<&'static Command> {
    if let Some(c) = COMMANDS.iter().find(|c| c.name == name) {
        return Ok(c);
    }
    let matching: Vec<&Command> = COMMANDS
        .iter()
        .filter(|c| c.name.starts_with(name))
        .collect();
    match matching.as_slice() {
        [c] => Ok(c),
        [] => bail!("no command {name:?}; type help for the list"),
        many => bail!(
            "{name:?} could be {}",
            many.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn number(arg: Option<&&str>, what: &str) -> Result<usize> {
    let text = arg.with_context(|| format!("which {what}? give its number"))?;
    text.parse::<usize>()
        .ok()
        .filter(|n| *n >= 1)
        .with_context(|| format!("{text:?} is not a {what} number (1, 2, ...)"))
}

fn help(_: &mut Session, args: &[&str]) -> Result<Flow> {
    match args.first() {
        Some(name) => {
            let c = find(name)?;
            println!("{} {}\n  {}", c.name, c.args, c.help);
        }
        None => {
            for c in COMMANDS {
                let head = format!("{} {}", c.name, c.args);
                println!("  {head:<24} {}", c.what);
            }
            println!(
                "  (a unique prefix is enough: `sh` is show, `bac` back; help COMMAND says more)"
            );
        }
    }
    Ok(Flow::Go)
}

fn hangs(s: &mut Session, _: &[&str]) -> Result<Flow> {
    if s.hangs.is_empty() {
        println!(
            "no hang of {} longer than {} s",
            s.subject, s.args.threshold
        );
    }
    for (i, h) in s.hangs.iter().enumerate() {
        let mark = if s.picked == Some(i) { "*" } else { " " };
        let clock = s
            .clock(h.spin.start_ns)
            .map_or(String::new(), |c| format!(" (local {c})"));
        println!(
            "{mark}{:>3}) {} {} of {} from {}{clock}, {}{}",
            i + 1,
            argus_diagnose::secs(h.spin.start_ns.until(h.spin.end_ns)),
            h.spin.class.name(),
            s.who(h.spin.segment),
            s.t(h.spin.start_ns),
            if h.spin.open { "still going" } else { "ended" },
            if h.source == argus_diagnose::HangSource::Marker {
                ", marked by the application"
            } else {
                ""
            }
        );
    }
    Ok(Flow::Go)
}

fn pick(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let n = number(args.first(), "hang")?;
    s.pick(n - 1, Vec::new())?;
    Ok(Flow::Go)
}

fn picked_report(s: &Session) -> Result<&argus_diagnose::Report> {
    s.report
        .as_ref()
        .context("no hang is diagnosed: see hangs, then pick N")
}

fn report(s: &mut Session, _: &[&str]) -> Result<Flow> {
    let r = picked_report(s)?;
    print!("{}{}", r.to_text(), r.to_picture());
    Ok(Flow::Go)
}

fn json(s: &mut Session, _: &[&str]) -> Result<Flow> {
    let d = argus_diagnose::Diagnosis {
        target: s.target,
        subject: s.subject.clone(),
        report: s.report.clone(),
    };
    println!("{}", serde_json::to_string(&d.to_json())?);
    Ok(Flow::Go)
}

fn show(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let id = s.segment_arg(args.first().copied())?;
    s.show(id)?;
    if s.cursor != Some(id) {
        s.trail.clear();
        s.cursor = Some(id);
    }
    Ok(Flow::Go)
}

fn thread(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let mut tid = s.cursor.map(|c| c.tid());
    let mut window = None;
    for a in args {
        if let Some((from, to)) = a.split_once('-') {
            let secs = |t: &str| -> Result<u64> {
                let v: f64 = t
                    .parse()
                    .with_context(|| format!("{a:?}: FROM-TO in seconds"))?;
                Ok(s.trace_start.0 + (v.max(0.0) * 1e9) as u64)
            };
            window = Some((secs(from)?, secs(to)?));
        } else {
            let t: i32 = a
                .parse()
                .with_context(|| format!("{a:?} is not a thread id"))?;
            tid = Some(argus_schema::Tid(t));
        }
    }
    let tid = tid.context("which thread? give its tid")?;
    if s.graph.thread(tid).is_none() && s.graph.thread_ids().all(|t| t != tid) {
        bail!("thread {} is not in the snapshot", tid.0);
    }
    println!("{}:", s.graph.describe(tid));
    for seg in s.graph.thread_segments(tid) {
        let end = s.graph.end_of(seg);
        if window.is_some_and(|(from, to)| end.0 < from || seg.start_ns.0 > to) {
            continue;
        }
        let wait = seg.wait_start_ns.map_or(String::new(), |w| {
            format!(
                ", waited {} in {}",
                argus_diagnose::secs(w.until(end)),
                argus_schema::syscalls::name(seg.wait_syscall)
            )
        });
        println!(
            "  {} {} – {}{wait}, {} edge(s) out, {}",
            seg.id,
            s.t(seg.start_ns),
            s.t(end),
            s.graph.outgoing(seg.id).count(),
            match seg.end {
                argus_schema::EndCause::Open => "still open",
                argus_schema::EndCause::Exit => "then exited",
                _ => "then woken",
            }
        );
    }
    Ok(Flow::Go)
}

fn back(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let here = s.segment_arg(None)?;
    let c = s.causes(here);
    if c.edges.is_empty() {
        bail!("nothing leads to {} in the graph", s.who(here));
    }
    let i = match args.first() {
        Some(_) => number(args.first(), "edge")? - 1,
        None => c.default.unwrap_or(0),
    };
    let e = c
        .edges
        .get(i)
        .with_context(|| format!("{} has {} edge(s) back", s.who(here), c.edges.len()))?;
    println!("back along {}", s.edge_text(e, true));
    s.trail.push(here);
    s.cursor = Some(e.src);
    s.show(e.src)?;
    Ok(Flow::Go)
}

fn forward(s: &mut Session, _: &[&str]) -> Result<Flow> {
    let to = s.trail.pop().context("no `back` to return from")?;
    s.cursor = Some(to);
    s.show(to)?;
    Ok(Flow::Go)
}

/// At most this many vertices in a slice (the nearest first).
const SLICE_LIMIT: usize = 2000;

fn slice(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let from = s.segment_arg(args.first().copied())?;
    let g = &s.graph;
    let seg = g.segment(from).context("the vertex is gone")?;
    let since = s
        .report
        .as_ref()
        .map_or(seg.start_ns, |r| r.hang.start_ns.min(seg.start_ns));
    // Breadth-first back through incoming edges after `since`; a vertex is strong when a
    // path of strong edges reaches it.
    let mut strong: HashMap<SegmentId, bool> = HashMap::from([(from, true)]);
    let mut queue = VecDeque::from([from]);
    // What ended a vertex's wait points at the thread's next segment: it is in the slice.
    if seg.wait_start_ns.is_some() {
        if let Some(next) = g.next_in_thread(from) {
            strong.insert(next.id, true);
            queue.push_back(next.id);
        }
    }
    let seeds = strong.len();
    while let Some(v) = queue.pop_front() {
        let via_strong = strong[&v];
        for e in g.incoming(v).filter(|e| e.ts >= since) {
            let st = via_strong && e.strength == Strength::Strong;
            let full = strong.len() >= SLICE_LIMIT;
            match strong.get_mut(&e.src) {
                Some(known) if st && !*known => {
                    *known = true;
                    queue.push_back(e.src);
                }
                Some(_) => {}
                None if !full => {
                    strong.insert(e.src, st);
                    queue.push_back(e.src);
                }
                None => {}
            }
        }
    }
    let mut by_thread: BTreeMap<i32, Vec<(SegmentId, bool)>> = BTreeMap::new();
    for (&id, &st) in &strong {
        if id != from && !(seeds == 2 && g.next_in_thread(from).is_some_and(|n| n.id == id)) {
            by_thread.entry(id.tid().0).or_default().push((id, st));
        }
    }
    println!(
        "slice of {} since {}: {} vertices in {} thread(s){}",
        s.who(from),
        s.t(since),
        strong.len() - seeds,
        by_thread.len(),
        if strong.len() >= SLICE_LIMIT {
            " (cut at the limit)"
        } else {
            ""
        }
    );
    let mut rows: Vec<(i32, Vec<(SegmentId, bool)>)> = by_thread.into_iter().collect();
    rows.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    for (tid, mut v) in rows {
        v.sort_by_key(|(id, _)| id.seq());
        let strong_n = v.iter().filter(|(_, st)| *st).count();
        let first = v.first().map(|(id, _)| *id).unwrap_or(from);
        let last = v.last().map(|(id, _)| *id).unwrap_or(from);
        println!(
            "  {}: {} vertices ({} by strong edges only), {} … {}",
            s.graph.describe(argus_schema::Tid(tid)),
            v.len(),
            strong_n,
            first,
            last
        );
    }
    Ok(Flow::Go)
}

fn baseline(s: &mut Session, _: &[&str]) -> Result<Flow> {
    let r = picked_report(s)?;
    let Some(b) = &r.baseline else {
        println!("the walk needed no baseline for this hang (or found none)");
        return Ok(Flow::Go);
    };
    println!(
        "baseline {} ({}): a {} wait, similarity {:.2}, {} similar vertices",
        b.segment_label,
        b.comm,
        argus_diagnose::secs(b.wait_ns),
        b.similarity,
        b.similar_found
    );
    println!("  its wake-up path:");
    for (i, st) in b.wake_path.iter().enumerate() {
        println!(
            "    {}. {} {}: {}",
            i + 1,
            st.segment_label,
            st.comm,
            st.description
        );
    }
    println!("  its threads during the hang:");
    for t in &b.threads {
        let flag = if t.abnormal { "abnormal" } else { "normal" };
        let rank = t.rank.map_or(String::new(), |r| format!(", rank {r}"));
        println!(
            "    {} {} ({flag}{rank}): {}",
            t.tid.0, t.comm, t.during_hang
        );
    }
    Ok(Flow::Go)
}

fn questions(s: &mut Session, _: &[&str]) -> Result<Flow> {
    let r = picked_report(s)?;
    if r.questions.is_empty() {
        println!("the walk asked nothing: the graph was not ambiguous on its path");
    }
    for (i, q) in r.questions.iter().enumerate() {
        let how = if q.by_rule {
            "by a saved rule"
        } else if q.defaulted {
            "default"
        } else {
            "answered"
        };
        let answer = match q.answer {
            Answer::Choice(c) => q.choices.get(c).map_or(format!("{}", c + 1), |ch| {
                format!(
                    "{}) [{} {}] {}",
                    c + 1,
                    ch.kind,
                    ch.strength.name(),
                    ch.description
                )
            }),
            Answer::Stop => "stop".to_string(),
        };
        println!("Q{} ({how}): {}\n     → {answer}", i + 1, q.prompt);
    }
    Ok(Flow::Go)
}

fn answer(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let q = number(args.first(), "question")?;
    let text = args
        .get(1)
        .context("which answer? a choice number, s or d")?;
    let r = picked_report(s)?;
    let picked = s.picked.context("no hang is diagnosed")?;
    let question = r
        .questions
        .get(q - 1)
        .with_context(|| format!("the walk asked {} question(s)", r.questions.len()))?;
    let reply = argus_diagnose::answer_of(text, question.choices.len())
        .with_context(|| format!("{text:?}: answer 1 to {}, s or d", question.choices.len()))?;
    if question.by_rule {
        bail!("Q{q} was answered by a saved rule; edit the --save-answers file to change it");
    }
    // The earlier questions get the answers they had (those a rule answered are answered by
    // it again); this one the new answer; later ones are asked again.
    let mut replay: Vec<Reply> = r.questions[..q - 1]
        .iter()
        .filter(|x| !x.by_rule)
        .map(|x| match x.answer {
            Answer::Choice(c) => Reply::Choice(c),
            Answer::Stop => Reply::Stop,
        })
        .collect();
    replay.push(reply);
    s.pick(picked, replay)?;
    Ok(Flow::Go)
}

fn wrong(s: &mut Session, args: &[&str]) -> Result<Flow> {
    if args.is_empty() {
        if s.wrong.is_empty() {
            println!("no edge is marked wrong");
        }
        for (i, e) in s.wrong.iter().enumerate() {
            println!(
                "  {}) [{} {}] {} → {} at {}",
                i + 1,
                e.kind.name(),
                e.strength.name(),
                s.who(e.src),
                s.who(e.dst),
                s.t(e.ts)
            );
        }
        return Ok(Flow::Go);
    }
    let here = s.segment_arg(None)?;
    let c = s.causes(here);
    let n = match args.first() {
        Some(&"d") => c.default.map_or(0, |d| d + 1),
        other => number(other, "edge")?,
    };
    let e = c
        .edges
        .get(n.wrapping_sub(1))
        .with_context(|| format!("{} has {} edge(s) back", s.who(here), c.edges.len()))?
        .clone();
    println!(
        "marked wrong: {}; diagnosing again without it",
        s.edge_text(&e, true)
    );
    s.wrong.push(e);
    s.rebuild()?;
    Ok(Flow::Go)
}

fn unwrong(s: &mut Session, args: &[&str]) -> Result<Flow> {
    match args.first() {
        Some(&"all") => s.wrong.clear(),
        other => {
            let k = number(other, "mark")?;
            if k > s.wrong.len() {
                bail!("{} edge(s) are marked wrong", s.wrong.len());
            }
            s.wrong.remove(k - 1);
        }
    }
    s.rebuild()?;
    Ok(Flow::Go)
}

fn at(s: &mut Session, args: &[&str]) -> Result<Flow> {
    if args.is_empty() {
        bail!("at what time? e.g. at 14:03:12, at -30s");
    }
    let text = args.join(" ");
    let t = s.moment(&text)?;
    let clock = s
        .clock(t)
        .map_or(String::new(), |c| format!(" (local {c})"));
    println!("{text}: {}{clock}", s.t(t));
    s.config.hang.at_ns = Some(t);
    s.find_hangs();
    if !s.hangs.is_empty() {
        s.pick(0, Vec::new())?;
    }
    // The watched thread's vertex at that moment.
    let tid = s
        .report
        .as_ref()
        .map(|r| r.hang.tid)
        .or_else(|| s.watched.first().copied());
    if let Some(seg) = tid.and_then(|tid| s.graph.segment_at(tid, t)) {
        let id = seg.id;
        s.cursor = Some(id);
        s.trail.clear();
        s.show(id)?;
    }
    Ok(Flow::Go)
}

fn markers(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let needle = args.join(" ").to_lowercase();
    let found: Vec<_> = s
        .graph
        .app_events()
        .markers
        .iter()
        .filter(|m| needle.is_empty() || m.text.to_lowercase().contains(&needle))
        .collect();
    if found.is_empty() {
        println!(
            "no marker{}",
            if needle.is_empty() { "" } else { " matches" }
        );
    }
    for m in found {
        let seg = s
            .graph
            .segment_at(m.tid, m.ts)
            .map_or(String::new(), |v| format!(" in {}", v.id));
        println!(
            "  {} {} {}: {}{seg}",
            s.t(m.ts),
            m.tid.0,
            s.graph.comm(m.tid),
            m.text
        );
    }
    Ok(Flow::Go)
}

fn inputs(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let needle = args.join(" ").to_lowercase();
    let mut lines = Vec::new();
    for &tid in &s.watched {
        for seg in s.graph.thread_segments(tid) {
            for e in s.graph.incoming(seg.id) {
                let from_irq = s
                    .graph
                    .segment(e.src)
                    .is_some_and(|src| src.kind != argus_schema::SegmentKind::Task);
                let other_process = s.graph.pid_of(e.src.tid()) != s.graph.pid_of(tid);
                let is_input = from_irq || (e.kind.info().starts_input && other_process);
                if !is_input {
                    continue;
                }
                let kind = s.graph.segment(e.src).map_or("?", |src| src.kind.name());
                let line = format!(
                    "  {} {} started by [{} {}] from {} ({kind})",
                    s.t(e.ts),
                    e.dst,
                    e.kind.name(),
                    e.strength.name(),
                    s.who(e.src)
                );
                if needle.is_empty() || line.to_lowercase().contains(&needle) {
                    lines.push((e.ts, line));
                }
            }
        }
    }
    lines.sort();
    if lines.is_empty() {
        println!(
            "no input event{}",
            if needle.is_empty() { "" } else { " matches" }
        );
    }
    for (_, l) in lines {
        println!("{l}");
    }
    Ok(Flow::Go)
}

fn inspect(s: &mut Session, _: &[&str]) -> Result<Flow> {
    use argus_diagnose::inspect::NextStep;
    let cfg = argus_diagnose::inspect::InspectConfig {
        diagnose: s.config.clone(),
        watched: s.watched.clone(),
        ignored: s.recorder_tids.clone(),
    };
    let suspects = argus_diagnose::inspect::inspect(&s.graph, &cfg);
    if suspects.is_empty() {
        println!("no likely mistake found in the graph");
    }
    for (i, x) in suspects.iter().enumerate() {
        let kind = serde_json::to_value(x.kind)?;
        println!(
            "{}. {}: {} — {}",
            i + 1,
            kind.as_str().unwrap_or(""),
            s.graph.describe(x.tid),
            x.evidence
        );
        let labels: Vec<String> = x.segments.iter().map(|id| id.to_string()).collect();
        println!("   e.g. {}", labels.join(", "));
        for n in &x.next {
            match n {
                NextStep::Rule { toml } => {
                    println!("   next: a rule (argus build --rules FILE):");
                    for l in toml.lines() {
                        println!("     {l}");
                    }
                }
                NextStep::Record { options } => println!("   next: argus record {options} …"),
                NextStep::Nothing { why } => println!("   nothing to add: {why}"),
            }
        }
    }
    Ok(Flow::Go)
}

fn save(s: &mut Session, args: &[&str]) -> Result<Flow> {
    let file = match args.first() {
        Some(f) => std::path::PathBuf::from(f),
        None => s
            .args
            .save_answers
            .clone()
            .context("save to which file? (or start with --save-answers FILE)")?,
    };
    let mut all = s.rules.clone();
    all.merge(&s.learned);
    std::fs::write(&file, all.to_json() + "\n")
        .with_context(|| format!("writing {}", file.display()))?;
    println!("{} rule(s) saved to {}", all.rules.len(), file.display());
    Ok(Flow::Go)
}

fn quit(_: &mut Session, _: &[&str]) -> Result<Flow> {
    Ok(Flow::Quit)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_a_unique_name_and_help() {
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
        assert!(COMMANDS
            .iter()
            .all(|c| !c.help.is_empty() && !c.what.is_empty()));
    }

    #[test]
    fn a_unique_prefix_names_a_command_and_an_ambiguous_one_is_refused() {
        assert_eq!(find("bac").unwrap().name, "back");
        assert!(find("b").is_err()); // back, baseline
        assert_eq!(find("wrong").unwrap().name, "wrong");
        assert!(find("s").is_err()); // show, slice, save
        assert!(find("frobnicate").is_err());
    }
}
