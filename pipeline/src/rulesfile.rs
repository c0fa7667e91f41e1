//! The rules file (`argus build --rules FILE`): user-defined segment boundaries and edges,
//! in TOML — the papers' "easy for a user to incrementally extend with custom segment
//! boundaries and edges".
//!
//! ```toml
//! # Split a thread's segment where it enters a syscall (in one process, or everywhere).
//! [[split]]
//! pid = 4242
//! syscall = "sendmsg"
//!
//! # ... or where the application writes a marker starting with this text.
//! [[split]]
//! marker = "frame "
//!
//! # A futex word (here a pthread_cond_t) that is a condition variable: its wake-ups are
//! # strong (kind "rule").
//! [[condvar]]
//! pid = 4242
//! addr = "0x7ffd12345670"   # or an integer
//! len = 48                  # bytes, default 48 (sizeof(pthread_cond_t))
//!
//! # Threads that are one worker pool: weak wake-ups between them are boosted.
//! [[pool]]
//! tids = [4243, 4244, 4245]
//!
//! # Two descriptors of a process that are the ends of one pipe (or socket pair): a read
//! # that finds data depends on the last write.
//! [[pipe]]
//! pid = 4242
//! write_fd = 4
//! read_fd = 3
//!
//! # Kernel threads and callbacks, when the caller's automatic choice is not enough.
//! [kernel]
//! delegate_threads = [12, 13]          # thread-order edges pruned
//! cull_threads = [15]                  # wake-ups culled
//! cull_functions = ["0xffffffff81234560"]
//! ```
//!
//! Parsing is pure: the caller reads the file and passes its text and name
//! ([`parse`]); errors name the file and the line. [`RulesFile::apply`] merges the result
//! into a [`RulesConfig`].
//!
//! ```
//! use argus_pipeline::{rules::RulesConfig, rulesfile};
//! let file = rulesfile::parse("[[split]]\nsyscall = \"sendto\"\n", "rules.toml").unwrap();
//! let mut cfg = RulesConfig::default();
//! file.apply(&mut cfg);
//! assert_eq!(cfg.user.splits.len(), 1);
//! let err = rulesfile::parse("[[split]]\nsyscall = \"nosuch\"\n", "rules.toml").unwrap_err();
//! assert!(err.to_string().starts_with("rules.toml:2:"), "{err}");
//! ```

use crate::rules::{CondvarRule, PipeRule, PoolRule, RulesConfig, SplitAt, SplitRule, UserRules};
use argus_schema::{syscalls, Pid, Tid};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::ops::Range;
use toml::Spanned;

/// A parsed rules file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RulesFile {
    /// Boundaries and edges.
    pub user: UserRules,
    /// `[kernel] delegate_threads`.
    pub kernel_threads: BTreeSet<Tid>,
    /// `[kernel] cull_threads`.
    pub cull_threads: BTreeSet<Tid>,
    /// `[kernel] cull_functions`.
    pub cull_functions: BTreeSet<u64>,
}

impl RulesFile {
    /// Adds every rule of the file to `cfg` (after what the caller already put there).
    pub fn apply(self, cfg: &mut RulesConfig) {
        cfg.user.condvars.extend(self.user.condvars);
        cfg.user.splits.extend(self.user.splits);
        cfg.user.pools.extend(self.user.pools);
        cfg.user.pipes.extend(self.user.pipes);
        cfg.kernel_threads.extend(self.kernel_threads);
        cfg.cull_threads.extend(self.cull_threads);
        cfg.cull_functions.extend(self.cull_functions);
    }
}

/// A rules file that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RulesFileError {
    /// Not TOML, or not the expected tables and keys.
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        /// The file, as the caller named it.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// Well-formed, but a value makes no sense (unknown syscall, bad address, …).
    #[error("{file}:{line}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    split: Vec<SplitToml>,
    #[serde(default)]
    condvar: Vec<CondvarToml>,
    #[serde(default)]
    pool: Vec<PoolToml>,
    #[serde(default)]
    pipe: Vec<PipeToml>,
    #[serde(default)]
    kernel: Option<KernelToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitToml {
    pid: Option<Spanned<i64>>,
    syscall: Option<Spanned<String>>,
    marker: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CondvarToml {
    pid: Spanned<i64>,
    addr: Spanned<Number>,
    len: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolToml {
    tids: Spanned<Vec<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PipeToml {
    pid: Spanned<i64>,
    write_fd: Spanned<i64>,
    read_fd: Spanned<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelToml {
    #[serde(default)]
    delegate_threads: Vec<Spanned<i64>>,
    #[serde(default)]
    cull_threads: Vec<Spanned<i64>>,
    #[serde(default)]
    cull_functions: Vec<Spanned<Number>>,
}

/// An integer, or a string holding one in decimal or `0x` hexadecimal (addresses above
/// 2^63 do not fit a TOML integer).
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(i64),
    Text(String),
}

struct Ctx<'a> {
    text: &'a str,
    file: &'a str,
}

impl Ctx<'_> {
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let before = self.text.get(..offset.min(self.text.len())).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    fn invalid(&self, span: Range<usize>, message: String) -> RulesFileError {
        RulesFileError::Invalid {
            file: self.file.to_string(),
            line: self.line_col(span.start).0,
            message,
        }
    }

    fn id(&self, v: &Spanned<i64>, what: &str) -> Result<i32, RulesFileError> {
        i32::try_from(*v.get_ref())
            .ok()
            .filter(|x| *x > 0)
            .ok_or_else(|| {
                self.invalid(
                    v.span(),
                    format!("{what} {} is not a valid id", v.get_ref()),
                )
            })
    }

    fn fd(&self, v: &Spanned<i64>, what: &str) -> Result<u64, RulesFileError> {
        u64::try_from(*v.get_ref())
            .map_err(|_| self.invalid(v.span(), format!("{what} {} is negative", v.get_ref())))
    }

    fn number(&self, v: &Spanned<Number>, what: &str) -> Result<u64, RulesFileError> {
        let bad = |m: String| self.invalid(v.span(), m);
        match v.get_ref() {
            Number::Int(i) => u64::try_from(*i).map_err(|_| bad(format!("{what} {i} is negative"))),
            Number::Text(t) => {
                let t = t.trim();
                let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
                    None => t.replace('_', "").parse::<u64>(),
                };
                parsed.map_err(|_| bad(format!("{what} {t:?} is not a number")))
            }
        }
    }
}

/// Parses a rules file's `text`; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<RulesFile, RulesFileError> {
    let ctx = Ctx { text, file };
    let raw: FileToml = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| ctx.line_col(s.start));
        RulesFileError::Syntax {
            file: file.to_string(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })?;
    let mut out = RulesFile::default();
    for s in &raw.split {
        let pid = s
            .pid
            .as_ref()
            .map(|p| ctx.id(p, "pid").map(Pid))
            .transpose()?;
        let at = match (&s.syscall, &s.marker) {
            (Some(sys), None) => {
                let nr = syscalls::number(sys.get_ref().trim()).ok_or_else(|| {
                    ctx.invalid(sys.span(), format!("unknown syscall {:?}", sys.get_ref()))
                })?;
                SplitAt::Syscall(nr)
            }
            (None, Some(m)) if !m.get_ref().is_empty() => SplitAt::Marker(m.get_ref().clone()),
            (None, Some(m)) => return Err(ctx.invalid(m.span(), "empty marker".into())),
            (Some(sys), Some(_)) => {
                return Err(ctx.invalid(
                    sys.span(),
                    "a [[split]] takes either syscall or marker, not both".into(),
                ))
            }
            (None, None) => {
                let span = s.pid.as_ref().map_or(0..0, |p| p.span());
                return Err(ctx.invalid(span, "a [[split]] needs syscall or marker".into()));
            }
        };
        out.user.splits.push(SplitRule { pid, at });
    }
    for c in &raw.condvar {
        let len = match &c.len {
            Some(l) if *l.get_ref() > 0 => *l.get_ref() as u64,
            Some(l) => return Err(ctx.invalid(l.span(), "len must be positive".into())),
            None => 48,
        };
        out.user.condvars.push(CondvarRule {
            pid: Pid(ctx.id(&c.pid, "pid")?),
            addr: ctx.number(&c.addr, "addr")?,
            len,
        });
    }
    for p in &raw.pool {
        let tids = p
            .tids
            .get_ref()
            .iter()
            .map(|t| {
                i32::try_from(*t)
                    .ok()
                    .filter(|x| *x > 0)
                    .map(Tid)
                    .ok_or_else(|| ctx.invalid(p.tids.span(), format!("tid {t} is not valid")))
            })
            .collect::<Result<BTreeSet<_>, _>>()?;
        if tids.len() < 2 {
            return Err(ctx.invalid(
                p.tids.span(),
                "a [[pool]] needs at least two threads".into(),
            ));
        }
        out.user.pools.push(PoolRule { tids });
    }
    for p in &raw.pipe {
        out.user.pipes.push(PipeRule {
            pid: Pid(ctx.id(&p.pid, "pid")?),
            write_fd: ctx.fd(&p.write_fd, "write_fd")?,
            read_fd: ctx.fd(&p.read_fd, "read_fd")?,
        });
    }
    if let Some(k) = &raw.kernel {
        for t in &k.delegate_threads {
            out.kernel_threads.insert(Tid(ctx.id(t, "tid")?));
        }
        for t in &k.cull_threads {
            out.cull_threads.insert(Tid(ctx.id(t, "tid")?));
        }
        for f in &k.cull_functions {
            out.cull_functions
                .insert(ctx.number(f, "function address")?);
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FULL: &str = r#"
[[split]]
pid = 4242
syscall = "sendmsg"

[[split]]
marker = "frame "

[[condvar]]
pid = 4242
addr = "0x7ffd12345670"
len = 4

[[condvar]]
pid = 4242
addr = 4096

[[pool]]
tids = [4243, 4244]

[[pipe]]
pid = 4242
write_fd = 4
read_fd = 3

[kernel]
delegate_threads = [12]
cull_threads = [15]
cull_functions = ["0xffffffff81234560", 77]
"#;

    #[test]
    fn every_rule_parses() {
        let f = parse(FULL, "r.toml").unwrap();
        assert_eq!(
            f.user.splits,
            vec![
                SplitRule {
                    pid: Some(Pid(4242)),
                    at: SplitAt::Syscall(46)
                },
                SplitRule {
                    pid: None,
                    at: SplitAt::Marker("frame ".into())
                }
            ]
        );
        assert_eq!(f.user.condvars[0].addr, 0x7ffd_1234_5670);
        assert_eq!(f.user.condvars[0].len, 4);
        assert_eq!(f.user.condvars[1].len, 48);
        assert!(f.user.is_condvar(Pid(4242), 4096 + 40));
        assert!(!f.user.is_condvar(Pid(4242), 4096 + 48));
        assert!(f.user.same_pool(Tid(4243), Tid(4244)));
        assert_eq!(f.user.pipe_of(Pid(4242), 4, true), Some(0));
        assert_eq!(f.user.pipe_of(Pid(4242), 3, false), Some(0));
        assert_eq!(f.user.pipe_of(Pid(4242), 3, true), None);
        assert!(f.kernel_threads.contains(&Tid(12)));
        assert!(f.cull_threads.contains(&Tid(15)));
        assert!(f.cull_functions.contains(&0xffff_ffff_8123_4560));
        assert!(f.cull_functions.contains(&77));
        let mut cfg = RulesConfig::default();
        f.apply(&mut cfg);
        assert_eq!(cfg.user.splits.len(), 2);
        assert_eq!(cfg.kernel_threads.len(), 1);
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            (
                "[[split]]\nsyscall = \"frobnicate\"\n",
                "r.toml:2: unknown syscall",
            ),
            (
                "\n\n[[condvar]]\npid = 1\naddr = \"0xzz\"\n",
                "r.toml:5: addr",
            ),
            ("[[pool]]\ntids = [5]\n", "r.toml:2: a [[pool]] needs"),
            ("[[split]]\npid = 3\n", "r.toml:2: a [[split]] needs"),
            (
                "[[pipe]]\npid = 1\nwrite_fd = -1\nread_fd = 2\n",
                "r.toml:3: write_fd",
            ),
            ("[[split]]\nsyscal = \"read\"\n", "r.toml:2:"),
            ("x = [\n", "r.toml:"),
            ("[[split]]\nsyscall = 5\n", "r.toml:2:"),
        ];
        for (text, want) in cases {
            let e = parse(text, "r.toml").unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn empty_file_is_no_rules() {
        let f = parse("# nothing\n", "r.toml").unwrap();
        assert!(f.user.is_empty());
    }
}
