//! The dataflow's configuration from the user's flags and the recordings it runs over: the one
//! place where rules are set up, for `argus build` (trace directories and imports, every
//! process of a cluster alike) and `argus start` (the previous run's ring and the live one).
//!
//! - [`user_rules`]: the threshold and the rules file (`--rules`, `docs/rules.md`;
//!   [`apply_rules_file`], which `argus start` calls again on SIGHUP).
//! - [`configure`]: what each recording adds, from its [`Recording`]: kernel delegate and
//!   maintenance threads from its thread table, maintenance callbacks from its kallsyms,
//!   message channels from its fd identity, and its lost-events ranges as gaps (no edge is
//!   made across one).

use anyhow::{Context, Result};
use argus_ingest::files::{FileId, FileKind};
use argus_ingest::import::Imported;
use argus_ingest::kallsyms::Kallsyms;
use argus_ingest::replay::TraceReader;
use argus_ingest::tracedir::{FileLine, ProcEntry};
use argus_pipeline::dataflow::DataflowConfig;
use argus_pipeline::rules::{ChannelEnd, ChannelMap, RulesConfig};
use argus_schema::{Nanos, Pid, Tid};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The rules the user asked for: the spinning-vertex threshold and, with `rules_file`, the
/// boundaries and edges it declares ([`apply_rules_file`]).
pub fn user_rules(threshold_ns: u64, rules_file: Option<&Path>) -> Result<RulesConfig> {
    let mut rules = RulesConfig {
        spin_threshold_ns: threshold_ns,
        ..RulesConfig::default()
    };
    if let Some(file) = rules_file {
        apply_rules_file(&mut rules, file)?;
    }
    Ok(rules)
}

/// Adds what the rules file `file` declares (`docs/rules.md`) to `rules`: at the start of a
/// build or a job, and on each re-read of `argus start` (SIGHUP) to the rules the job had
/// learned without it. An error names the file (and the line and column).
pub fn apply_rules_file(rules: &mut RulesConfig, file: &Path) -> Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading rules {}", file.display()))?;
    apply_rules_text(rules, &text, &file.display().to_string())
}

/// Adds what rules-file `text` declares to `rules` (`argus inspect` measures a suggested
/// rule so); an error names `source`.
pub fn apply_rules_text(rules: &mut RulesConfig, text: &str, source: &str) -> Result<()> {
    argus_pipeline::rulesfile::parse(text, source)?.apply(rules);
    Ok(())
}

/// A recording the dataflow runs over, as far as its configuration goes.
pub enum Recording<'a> {
    /// A trace directory written by `argus record` (or an earlier `argus start`'s ring).
    Trace(&'a TraceReader),
    /// Another tool's recording (`argus build FILE`).
    Import(&'a Imported),
    /// The ring `argus start` is recording now: what its recorder wrote when it started
    /// (the `/proc` table, kallsyms). Lost-events gaps reach the rules as they happen
    /// (the merge adds them to the shared gap set).
    Live {
        /// The live trace's `/proc` table at its start.
        procs: &'a [ProcEntry],
        /// Its kallsyms, when the recorder could read them.
        kallsyms: Option<&'a Kallsyms>,
    },
}

/// `base` with what `recordings` tell the rules (module docs). Every process of a cluster
/// calls this with the same recordings and so runs the same rules.
pub fn configure(base: &DataflowConfig, recordings: &[Recording<'_>]) -> Result<DataflowConfig> {
    let mut cfg = base.clone();
    let rules = &mut cfg.rules;
    for rec in recordings {
        match rec {
            Recording::Trace(r) => {
                rules.classify_threads(
                    r.procs()
                        .iter()
                        .map(|p| (Tid(p.tid), p.comm.as_str(), p.kernel)),
                );
                if let Some(k) = r.kallsyms() {
                    rules.cull_symbols(k.iter());
                }
                // fd identity: pipes, sockets and eventfds become channels for message edges.
                let files = r
                    .files()
                    .with_context(|| format!("reading the fd identity of {}", r.dir().display()))?;
                rules.channels.merge(ChannelMap::from_identity(
                    files
                        .entries()
                        .map(|(pid, fd, ts, f)| (pid, fd, ts, channel_end(f))),
                    files.forks(),
                ));
                for ranges in r.meta_ext().lost_ranges.values() {
                    for g in ranges {
                        rules.add_gap(Nanos(g.from_ns), Nanos(g.to_ns));
                    }
                }
            }
            Recording::Import(imp) => {
                rules.classify_threads(
                    imp.threads()
                        .iter()
                        .map(|t| (t.tid, t.comm.as_str(), t.kernel)),
                );
                if let Some(k) = imp.kallsyms() {
                    rules.cull_symbols(k.iter());
                }
                for &(_, from, to, _) in &imp.summary().lost_ranges {
                    rules.add_gap(Nanos(from), Nanos(to));
                }
            }
            Recording::Live { procs, kallsyms } => {
                rules.classify_threads(
                    procs
                        .iter()
                        .map(|p| (Tid(p.tid), p.comm.as_str(), p.kernel)),
                );
                if let Some(k) = kallsyms {
                    rules.cull_symbols(k.iter());
                }
            }
        }
    }
    Ok(cfg)
}

/// What the rules make of a descriptor's identity: a channel end for message edges; an
/// unknown identity (`None`) ends the previous one.
fn channel_end(id: Option<&FileId>) -> ChannelEnd {
    id.map_or(ChannelEnd::default(), |f| {
        ChannelEnd::of_file(f.kind.as_str(), f.inode, f.peer, &f.target)
    })
}

/// The fd identity of a live recording as its tracker writes it (`argus start`): the
/// changes to the rules' channels that [`configure`] would have made from the finished
/// trace's `files/`, line by line ([`LiveChannels::learn`]).
///
/// As a build does, a socket whose peer its own record lacks takes it from the other end's
/// record; when that record comes later, the socket's spans are made again with the peer.
///
/// A job runs for weeks: [`LiveChannels::trim`] forgets, from the map and from this, what no
/// event still to come can look up (processes that ended, descriptors replaced since).
#[derive(Debug, Default)]
pub struct LiveChannels {
    /// Socket inode → the inode at the other end.
    peer_of: HashMap<u64, u64>,
    /// Sockets whose spans were made without a peer: inode → `(pid, fd, from, identity)`.
    unpaired: HashMap<u64, Vec<(Pid, i32, Nanos, FileId)>>,
    /// `(pid, fd, ts)` made unknown: a build sorts an unknown record after any other of the
    /// same descriptor and time.
    unknown_at: HashSet<(Pid, i32, Nanos)>,
    /// Each descriptor's latest record if it is a socket, `(from, inode)`: the sockets in
    /// use, whose peers are kept.
    sockets: HashMap<(Pid, i32), (Nanos, u64)>,
    /// Processes that ended (`exit` lines) and when, until a trim forgets them.
    gone: HashMap<Pid, Nanos>,
}

/// One change to a [`ChannelMap`] ([`LiveChannels::learn`]).
#[derive(Clone, Debug, PartialEq)]
pub enum ChannelChange {
    /// From `from` on, `fd` of `pid` is `end`.
    Span(Pid, i32, Nanos, ChannelEnd),
    /// `child` was forked from `parent` at the time.
    Fork(Nanos, Pid, Pid),
}

impl ChannelChange {
    /// Makes the change in `map`.
    pub fn apply(&self, map: &mut ChannelMap) {
        match *self {
            ChannelChange::Span(pid, fd, from, end) => map.insert(pid, fd, from, end),
            ChannelChange::Fork(at, parent, child) => map.set_parent(child, parent, at),
        }
    }
}

impl LiveChannels {
    /// The changes `lines` make, in order.
    pub fn learn(&mut self, lines: impl IntoIterator<Item = FileLine>) -> Vec<ChannelChange> {
        let mut out = Vec::new();
        for line in lines {
            match line {
                line @ FileLine::Fd { .. } => {
                    let Some((ts, pid, fd, mut id)) = FileId::of_line(line) else {
                        continue;
                    };
                    let (pid, ts, ino) = (Pid(pid), Nanos(ts), id.inode);
                    if self.unknown_at.contains(&(pid, fd, ts)) {
                        continue;
                    }
                    if id.kind == FileKind::Socket {
                        match id.peer {
                            Some(p) => {
                                self.peer_of.entry(ino).or_insert(p);
                                self.peer_of.entry(p).or_insert(ino);
                                // Sockets seen before without this pairing take it now.
                                for inode in [ino, p] {
                                    let Some(&other) = self.peer_of.get(&inode) else {
                                        continue;
                                    };
                                    for (pid, fd, from, mut old) in
                                        self.unpaired.remove(&inode).unwrap_or_default()
                                    {
                                        old.peer = Some(other);
                                        out.push(ChannelChange::Span(
                                            pid,
                                            fd,
                                            from,
                                            channel_end(Some(&old)),
                                        ));
                                    }
                                }
                            }
                            None => match self.peer_of.get(&ino) {
                                Some(&p) => id.peer = Some(p),
                                None => self.unpaired.entry(ino).or_default().push((
                                    pid,
                                    fd,
                                    ts,
                                    id.clone(),
                                )),
                            },
                        }
                    }
                    self.latest(pid, fd, ts, (id.kind == FileKind::Socket).then_some(ino));
                    out.push(ChannelChange::Span(pid, fd, ts, channel_end(Some(&id))));
                }
                FileLine::Unknown { ts, pid, fd } => {
                    let (pid, ts) = (Pid(pid), Nanos(ts));
                    self.unknown_at.insert((pid, fd, ts));
                    self.latest(pid, fd, ts, None);
                    out.push(ChannelChange::Span(pid, fd, ts, channel_end(None)));
                }
                FileLine::Fork { ts, parent, child } => {
                    out.push(ChannelChange::Fork(Nanos(ts), Pid(parent), Pid(child)))
                }
                FileLine::Exit { ts, pid } => {
                    let end = self.gone.entry(Pid(pid)).or_insert(Nanos(ts));
                    *end = (*end).max(Nanos(ts));
                }
                _ => {}
            }
        }
        out
    }

    /// Notes `fd` of `pid`'s record at `ts` (a socket's inode, or none) if it is the latest.
    fn latest(&mut self, pid: Pid, fd: i32, ts: Nanos, socket: Option<u64>) {
        match (self.sockets.get(&(pid, fd)), socket) {
            (Some(&(from, _)), _) if from > ts => {}
            (_, Some(ino)) => {
                self.sockets.insert((pid, fd), (ts, ino));
            }
            (_, None) => {
                self.sockets.remove(&(pid, fd));
            }
        }
    }

    /// Forgets what no lookup at `now` or later needs, in `maps` (each made by applying
    /// every change [`LiveChannels::learn`] returned) and here: processes that ended before
    /// `now` (once no live process inherits from them), descriptors' records replaced
    /// before `now`, and the peers of sockets no one holds. Call it with a time no event
    /// still to be looked up is before. Returns how many processes it forgot.
    pub fn trim(&mut self, now: Nanos, maps: &mut [&mut ChannelMap]) -> usize {
        let mut forgot: HashMap<Pid, Nanos> = HashMap::new();
        for map in maps.iter_mut() {
            for pid in map.trim(now, &self.gone) {
                forgot.insert(pid, self.gone[&pid]);
            }
        }
        self.gone.retain(|pid, _| !forgot.contains_key(pid));
        let ended = |pid: &Pid, t: Nanos| forgot.get(pid).is_some_and(|&end| t < end);
        self.sockets
            .retain(|(pid, _), (from, _)| !ended(pid, *from));
        let sockets = &self.sockets;
        self.unpaired.retain(|&ino, ends| {
            ends.retain(|&(pid, fd, from, _)| {
                !ended(&pid, from) && (from >= now || sockets.get(&(pid, fd)) == Some(&(from, ino)))
            });
            !ends.is_empty()
        });
        let held: HashSet<u64> = self
            .sockets
            .values()
            .map(|&(_, ino)| ino)
            .chain(self.unpaired.keys().copied())
            .collect();
        self.peer_of.retain(|ino, _| held.contains(ino));
        self.unknown_at.retain(|&(_, _, ts)| ts >= now);
        forgot.len()
    }

    /// How much it holds: `(sockets paired, sockets waiting for a peer, processes ended)`.
    pub fn held(&self) -> (usize, usize, usize) {
        (self.peer_of.len(), self.unpaired.len(), self.gone.len())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn proc(tid: i32, comm: &str, kernel: bool) -> ProcEntry {
        ProcEntry {
            pid: tid,
            tid,
            ppid: 2,
            comm: comm.to_string(),
            kernel,
        }
    }

    #[test]
    fn a_live_recording_classifies_its_kernel_threads_and_culls_maintenance_callbacks() {
        let procs = [
            proc(10, "kworker/0:1", true),
            proc(11, "rcu_preempt", true),
            proc(12, "kworker/0:1", false),
            proc(13, "bash", false),
        ];
        let ks = Kallsyms::parse(
            "ffffffff81000000 T tick_sched_timer\nffffffff81000100 T my_driver_fn\n",
        );
        let base = DataflowConfig::default();
        let cfg = configure(
            &base,
            &[Recording::Live {
                procs: &procs,
                kallsyms: Some(&ks),
            }],
        )
        .unwrap();
        assert!(cfg.rules.kernel_threads.contains(&Tid(10)));
        assert!(cfg.rules.cull_threads.contains(&Tid(11)));
        // A user thread named like a kernel one is not a kernel thread.
        assert!(!cfg.rules.kernel_threads.contains(&Tid(12)));
        assert!(!cfg.rules.kernel_threads.contains(&Tid(13)));
        assert_eq!(
            cfg.rules.cull_functions.iter().copied().collect::<Vec<_>>(),
            vec![0xffffffff81000000]
        );
        // The base is left as it was.
        assert!(base.rules.kernel_threads.is_empty());
    }

    #[test]
    fn the_rules_file_is_applied_and_a_bad_one_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.toml");
        std::fs::write(&file, "[[pool]]\ntids = [4243, 4244]\n").unwrap();
        let with = user_rules(3_000_000_000, Some(&file));
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[[condvar]\n").unwrap();
        let err = format!("{:#}", user_rules(1, Some(&bad)).unwrap_err());
        assert!(err.contains("bad.toml"), "{err}");
        let with = with.unwrap();
        assert_eq!(with.spin_threshold_ns, 3_000_000_000);
        assert_ne!(with.user, RulesConfig::default().user);
        let missing = format!(
            "{:#}",
            user_rules(1, Some(&dir.path().join("none.toml"))).unwrap_err()
        );
        assert!(missing.contains("none.toml"), "{missing}");
    }

    fn fd(ts: u64, pid: i32, fd: i32, kind: &str, ino: u64, peer: Option<u64>) -> FileLine {
        FileLine::Fd {
            ts,
            pid,
            fd,
            kind: kind.to_string(),
            ino,
            peer,
            target: format!("{kind}:[{ino}]"),
            src: "syscall".to_string(),
        }
    }

    /// Line by line, in the order a tracker may write them (a socket before its peer's
    /// record, an unknown before a record of the same time), the live channels come to what
    /// a build of the finished trace makes of them.
    #[test]
    fn live_channels_end_as_a_build_of_the_same_lines() {
        let lines = vec![
            fd(100, 10, 3, "pipe", 7, None),
            fd(100, 10, 4, "pipe", 7, None),
            FileLine::Fork {
                ts: 150,
                parent: 10,
                child: 11,
            },
            // A socket whose peer comes only with the other end's record, later.
            fd(200, 10, 5, "socket", 90, None),
            FileLine::Unknown {
                ts: 300,
                pid: 11,
                fd: 3,
            },
            fd(300, 11, 3, "pipe", 8, None),
            fd(250, 12, 6, "socket", 91, Some(90)),
            fd(400, 10, 4, "regular", 55, None),
            FileLine::Unknown {
                ts: 500,
                pid: 10,
                fd: 3,
            },
        ];
        let table = argus_ingest::files::FileTable::from_lines(lines.clone());
        let built = ChannelMap::from_identity(
            table
                .entries()
                .map(|(pid, fd, ts, f)| (pid, fd, ts, channel_end(f))),
            table.forks(),
        );
        let mut live = LiveChannels::default();
        let mut map = ChannelMap::default();
        for line in lines {
            for change in live.learn([line]) {
                change.apply(&mut map);
            }
        }
        assert_eq!(map, built);
        // The socket took its peer: both ends are one connection.
        let a = map.lookup(Pid(10), 5, Nanos(260)).unwrap();
        let b = map.lookup(Pid(12), 6, Nanos(260)).unwrap();
        assert!(a.connection().is_some());
        assert_eq!(a.connection(), b.connection());
        // The fork's child reads its parent's pipe until its own unknown record.
        assert_eq!(
            map.lookup(Pid(11), 4, Nanos(160)),
            map.lookup(Pid(10), 4, Nanos(150))
        );
        assert_eq!(
            map.lookup(Pid(11), 3, Nanos(300)),
            Some(ChannelEnd::default())
        );
    }

    /// A server that lives on while short-lived clients come and go, each forked from it
    /// with the server's pipe, connected to it by a socket pair and ended: trimmed as a job
    /// trims, the channels keep the size of what is live, and the server and a live client
    /// look up as a build of the same lines does.
    #[test]
    fn live_channels_forget_ended_processes_and_replaced_descriptors() {
        let mut lines = vec![fd(10, 10, 3, "pipe", 7, None)];
        let (mut live, mut map) = (LiveChannels::default(), ChannelMap::default());
        for change in live.learn(lines.clone()) {
            change.apply(&mut map);
        }
        let mut most = (0, 0, 0);
        for i in 0..2_000u64 {
            let t = 100 + i * 100;
            let child = 1_000 + (i % 300) as i32;
            let sock = 10_000 + 2 * i;
            let mut batch = vec![
                FileLine::Fork {
                    ts: t,
                    parent: 10,
                    child,
                },
                // The server's end of each connection reuses its fd 5; the client's end
                // comes with no peer first.
                fd(t + 1, child, 4, "socket", sock + 1, None),
                fd(t + 2, 10, 5, "socket", sock, Some(sock + 1)),
            ];
            if i < 1_999 {
                batch.push(FileLine::Exit {
                    ts: t + 50,
                    pid: child,
                });
            }
            lines.extend(batch.iter().cloned());
            for change in live.learn(batch) {
                change.apply(&mut map);
            }
            live.trim(Nanos(t + 60), &mut [&mut map]);
            most = most.max((map.len(), map.processes(), live.held().0));
        }
        let table = argus_ingest::files::FileTable::from_lines(lines);
        let built = ChannelMap::from_identity(
            table
                .entries()
                .map(|(pid, fd, ts, f)| (pid, fd, ts, channel_end(f))),
            table.forks(),
        );
        let now = Nanos(100 + 1_999 * 100 + 60);
        let last = Pid(1_000 + 1_999 % 300);
        for (pid, fd) in [(Pid(10), 3), (Pid(10), 5), (last, 3), (last, 4)] {
            let want = built.lookup(pid, fd, now);
            assert!(want.is_some(), "{pid:?} fd {fd}");
            assert_eq!(map.lookup(pid, fd, now), want, "{pid:?} fd {fd}");
        }
        // The server's pipe, its latest socket and the live client's: a few spans, one
        // creation and one connection, however many clients came before.
        assert!(built.len() > 4_000, "{}", built.len());
        assert!(most.0 <= 6 && most.1 <= 2 && most.2 <= 4, "{most:?}");
        assert_eq!(live.held().2, 0);
    }
}
