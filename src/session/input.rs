//! Where the session's lines come from: a terminal (rustyline: line editing, history in a
//! file, completion of command names), a script file (`--script`), or standard input when it
//! is not a terminal. Commands and the answers to the walk's questions come from the same
//! place, so a script is exactly what a person would type.

use anyhow::{Context, Result};
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// The session's source of lines.
pub(crate) enum Input {
    /// A person at a terminal.
    Terminal {
        editor: Box<rustyline::Editor<Completion, FileHistory>>,
        /// Where the history is kept between sessions (`None`: no home directory).
        history: Option<PathBuf>,
    },
    /// Lines of a script file or of standard input, echoed after the prompt so that the
    /// output reads like a terminal session.
    Lines {
        lines: Box<dyn Iterator<Item = std::io::Result<String>>>,
        /// The script (`None`: standard input), for errors.
        path: Option<PathBuf>,
        /// 1-based number of the last line read.
        line: usize,
    },
}

impl Input {
    /// A terminal with line editing, completion of `words` (the command names) and the
    /// history of earlier sessions (`$HOME/.local/state/argus/history`).
    pub(crate) fn terminal(words: Vec<String>) -> Result<Input> {
        let mut editor = rustyline::Editor::<Completion, FileHistory>::new()
            .context("setting up line editing on the terminal")?;
        editor.set_helper(Some(Completion { words }));
        let history =
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state/argus/history"));
        if let Some(h) = &history {
            // A first session has no history yet.
            let _ = editor.load_history(h);
        }
        Ok(Input::Terminal {
            editor: Box::new(editor),
            history,
        })
    }

    /// The lines of a script file.
    pub(crate) fn script(path: &Path) -> Result<Input> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening the session script {}", path.display()))?;
        Ok(Input::Lines {
            lines: Box::new(std::io::BufReader::new(file).lines()),
            path: Some(path.to_path_buf()),
            line: 0,
        })
    }

    /// The lines of standard input (not a terminal).
    pub(crate) fn stdin() -> Input {
        Input::Lines {
            lines: Box::new(std::io::stdin().lock().lines()),
            path: None,
            line: 0,
        }
    }

    /// The next line after showing `prompt`; `None` at the end of input (Ctrl-D, the end of
    /// the script). Ctrl-C gives an empty line (the command typed so far is dropped).
    pub(crate) fn read(&mut self, prompt: &str) -> Result<Option<String>> {
        match self {
            Input::Terminal { editor, .. } => match editor.readline(prompt) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                    }
                    Ok(Some(line))
                }
                Err(ReadlineError::Interrupted) => Ok(Some(String::new())),
                Err(ReadlineError::Eof) => Ok(None),
                Err(e) => Err(e).context("reading from the terminal"),
            },
            Input::Lines { lines, path, line } => match lines.next() {
                None => Ok(None),
                Some(Err(e)) => Err(e).with_context(|| format!("reading {}", where_(path))),
                Some(Ok(text)) => {
                    *line += 1;
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{prompt}{text}")?;
                    Ok(Some(text))
                }
            },
        }
    }

    /// Where the last line came from, for errors: `FILE line N` (`None` at a terminal).
    pub(crate) fn position(&self) -> Option<String> {
        match self {
            Input::Terminal { .. } => None,
            Input::Lines { path, line, .. } => Some(format!("{} line {line}", where_(path))),
        }
    }

    /// Whether a person types the lines (errors are shown and the session goes on; from a
    /// script they end it).
    pub(crate) fn interactive(&self) -> bool {
        matches!(self, Input::Terminal { .. })
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        if let Input::Terminal {
            editor,
            history: Some(h),
        } = self
        {
            if let Some(dir) = h.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.save_history(h);
        }
    }
}

fn where_(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or("standard input".to_string(), |p| p.display().to_string())
}

/// Completes the first word of a line (and the word after `help`) from the command names.
pub(crate) struct Completion {
    words: Vec<String>,
}

impl rustyline::completion::Completer for Completion {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let head = &line[..pos];
        let start = head.rfind(' ').map_or(0, |i| i + 1);
        let before = head[..start].split_whitespace().collect::<Vec<_>>();
        if !(before.is_empty() || before == ["help"]) {
            return Ok((start, Vec::new()));
        }
        let word = &head[start..];
        Ok((
            start,
            self.words
                .iter()
                .filter(|w| w.starts_with(word))
                .cloned()
                .collect(),
        ))
    }
}

impl rustyline::hint::Hinter for Completion {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for Completion {}
impl rustyline::validate::Validator for Completion {}
impl rustyline::Helper for Completion {}
