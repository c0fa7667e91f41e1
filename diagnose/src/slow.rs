//! Slow requests: not a hang, but one request that took far longer than its peers.
//!
//! A request is a round trip of a watched thread: it sent to another process, blocked, and
//! a message from that process ended the wait (a client's call to a server). Requests are
//! grouped with their similar vertices (same thread name, same process name, same wait
//! syscall); in a group of at least `min_peers`, one whose wait is `factor` times the
//! group's median or more (and at least `min_ns`) is slow. Each slow request is diagnosed
//! as a hang of its own (the walk, questions and blame as usual) and compared with a fast
//! one of its group (the nearest in time of those at most the median): what the slow one
//! waited for that the fast one did not is the time its blame gives to a thread and state
//! beyond what the fast one's blame gives to the same.
//!
//! ```text
//!  client  ─req─▶ ▒5ms▒ ─req─▶ ▒5ms▒ ─req─▶ ▒▒▒▒▒▒▒▒ 400 ms ▒▒▒▒▒▒▒▒ ─req─▶ ▒5ms▒
//!  median 5 ms, ×80: slow ──► walk + blame: server blocked 390 ms on the disk (device)
//!  fast neighbour's blame: server on CPU 4 ms  ──► extra: the disk, 390 ms
//! ```

use crate::answerer::{AutoOracle, Oracle};
use crate::blame::{Blame, BlameState};
use crate::graph::Graph;
use crate::hangs::{self, Hang, HangSource};
use crate::logical;
use crate::report::Report;
use crate::walk::{self, DiagnoseConfig};
use crate::Error;
use argus_schema::{syscalls, EndCause, Nanos, Pid, Segment, SegmentId, Spin, SpinClass, Tid};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How slow requests are told from their peers.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowConfig {
    /// A request is slow from this many times its group's median wait.
    pub factor: f64,
    /// ...and from this long (ns): `argus debug --threshold`.
    pub min_ns: u64,
    /// The fewest requests a group needs for a median to mean anything.
    pub min_peers: usize,
    /// Most slow requests diagnosed (the slowest first).
    pub max_reported: usize,
}

impl Default for SlowConfig {
    fn default() -> SlowConfig {
        SlowConfig {
            factor: 5.0,
            min_ns: 50_000_000,
            min_peers: 5,
            max_reported: 20,
        }
    }
}

/// One request: a round-trip wait of a watched thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Thread.
    pub tid: Tid,
    /// Process.
    pub pid: Pid,
    /// Thread name.
    pub comm: String,
    /// The segment that ended in the wait (the last of a logical wait).
    pub segment: SegmentId,
    /// `tid#seq`.
    pub segment_label: String,
    /// The wait syscall.
    pub syscall: String,
    /// When the wait began (the first of a logical wait).
    pub start_ns: Nanos,
    /// When it ended.
    pub end_ns: Nanos,
    /// Its length (ns).
    pub wait_ns: u64,
}

/// Time a slow request's chain spent in one thread and state beyond what a fast request of
/// its group spent there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExtraWait {
    /// The thread of the slow request's chain.
    pub tid: Tid,
    /// Its name.
    pub comm: String,
    /// Its process name.
    pub process: String,
    /// What it was doing.
    pub state: BlameState,
    /// Time in the slow request's blame (ns).
    pub slow_ns: u64,
    /// Time a thread of the same name and process spent in that state in the fast one's.
    pub fast_ns: u64,
}

/// A slow request, diagnosed and compared with a fast one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlowRequest {
    /// The request.
    pub request: Request,
    /// How many requests its group has (itself included).
    pub peers: usize,
    /// The group's median wait (ns).
    pub median_ns: u64,
    /// Its wait over the median.
    pub ratio: f64,
    /// The fast request of its group it was compared with.
    pub fast: Option<Request>,
    /// The fast request's blame.
    pub fast_blame: Option<Blame>,
    /// What it waited for that the fast one did not, the most first (at least the blame's
    /// `min_share` of its wait each).
    pub extra: Vec<ExtraWait>,
    /// Its diagnosis as a hang of its own.
    pub report: Report,
}

/// A group of similar requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestGroup {
    /// Thread name.
    pub comm: String,
    /// Process name.
    pub process: String,
    /// The wait syscall.
    pub syscall: String,
    /// How many requests.
    pub requests: usize,
    /// Their median wait (ns).
    pub median_ns: u64,
    /// The slowest (ns).
    pub max_ns: u64,
    /// How many are slow.
    pub slow: usize,
}

/// The requests of the watched threads: every group, and the slow ones diagnosed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlowRequests {
    /// Every group of similar requests, the most requests first.
    pub groups: Vec<RequestGroup>,
    /// The slow requests, the slowest (over its median) first.
    pub requests: Vec<SlowRequest>,
    /// How many slow requests were found (more than `requests` holds when capped).
    pub found: usize,
}

/// The round-trip waits of `tids`, as requests with the segments that bound them.
fn requests<'g>(g: &'g Graph, tids: &[Tid]) -> Vec<(Request, &'g Segment, &'g Segment)> {
    let mut out = Vec::new();
    for &tid in tids {
        for s in g.thread_segments(tid) {
            let Some(ws) = s.wait_start_ns else { continue };
            if s.end != EndCause::Woken
                || syscalls::is_sleep(s.wait_syscall)
                || s.wait_timed_out()
                || !hangs::round_trip_wait(g, s)
            {
                continue;
            }
            let first = logical::backward(g, s).first;
            let start = first.wait_start_ns.unwrap_or(ws);
            out.push((
                Request {
                    tid,
                    pid: s.pid,
                    comm: g.comm(tid),
                    segment: s.id,
                    segment_label: s.id.to_string(),
                    syscall: syscalls::name(s.wait_syscall).to_string(),
                    start_ns: start,
                    end_ns: s.end_ns,
                    wait_ns: start.until(s.end_ns),
                },
                first,
                s,
            ));
        }
    }
    out
}

/// The hang a request's wait makes, to walk.
fn as_hang(g: &Graph, first: &Segment, last: &Segment, r: &Request, cfg: &DiagnoseConfig) -> Hang {
    let spin = Spin {
        segment: first.id,
        last: last.id,
        tid: r.tid,
        pid: r.pid,
        class: SpinClass::LongWait,
        start_ns: r.start_ns,
        end_ns: r.end_ns,
        open: false,
        on_cpu_ns: 0,
        wait_ns: r.wait_ns,
        segments: first.id.seq().abs_diff(last.id.seq()).saturating_add(1),
        wait_syscall: last.wait_syscall,
        timeouts: logical::backward(g, last).timeouts,
    };
    let lw = hangs::learn_loop_wait(g, r.tid, &cfg.hang);
    Hang {
        evidence: hangs::class_evidence(g, &spin, lw.as_ref()),
        spin,
        source: HangSource::Segments,
        loop_wait: lw,
    }
}

/// Time per (process, thread name, state) in a blame's steps.
fn by_role(b: &Blame, g: &Graph) -> BTreeMap<(String, String, BlameState), (u64, Tid)> {
    let mut m = BTreeMap::new();
    for s in &b.steps {
        for st in BlameState::ALL {
            let ns = s.time.get(st);
            if ns == 0 {
                continue;
            }
            let e = m
                .entry((g.process_name(s.tid), s.comm.clone(), st))
                .or_insert((0, s.tid));
            e.0 += ns;
        }
    }
    m
}

/// Finds the slow requests of `tids` and diagnoses each (the oracle answers its questions;
/// the fast requests are walked with the default answers).
pub fn slow_requests(
    g: &Graph,
    tids: &[Tid],
    oracle: &mut dyn Oracle,
    cfg: &DiagnoseConfig,
    slow: &SlowConfig,
) -> Result<SlowRequests, Error> {
    let all = requests(g, tids);
    let mut groups: BTreeMap<(String, String, String), Vec<usize>> = BTreeMap::new();
    for (i, (r, _, _)) in all.iter().enumerate() {
        groups
            .entry((g.process_name(r.tid), r.comm.clone(), r.syscall.clone()))
            .or_default()
            .push(i);
    }
    let mut out_groups = Vec::new();
    let mut found: Vec<(usize, usize, u64)> = Vec::new();
    for ((process, comm, syscall), members) in &groups {
        let mut waits: Vec<u64> = members.iter().map(|i| all[*i].0.wait_ns).collect();
        waits.sort_unstable();
        let median = waits[waits.len() / 2];
        let bar = ((median as f64 * slow.factor) as u64).max(slow.min_ns);
        let enough = members.len() >= slow.min_peers.max(2);
        let slow_here: Vec<usize> = if enough {
            members
                .iter()
                .copied()
                .filter(|i| all[*i].0.wait_ns >= bar)
                .collect()
        } else {
            Vec::new()
        };
        out_groups.push(RequestGroup {
            comm: comm.clone(),
            process: process.clone(),
            syscall: syscall.clone(),
            requests: members.len(),
            median_ns: median,
            max_ns: waits.last().copied().unwrap_or(0),
            slow: slow_here.len(),
        });
        let gi = out_groups.len() - 1;
        found.extend(slow_here.into_iter().map(|i| (i, gi, median)));
    }
    out_groups.sort_by_key(|gr| (std::cmp::Reverse(gr.requests), gr.comm.clone()));
    let ratio = |i: usize, median: u64| all[i].0.wait_ns as f64 / median.max(1) as f64;
    found.sort_by(|a, b| {
        ratio(b.0, b.2)
            .total_cmp(&ratio(a.0, a.2))
            .then(all[a.0].0.start_ns.cmp(&all[b.0].0.start_ns))
    });
    let n_found = found.len();
    let mut requests_out = Vec::new();
    for &(i, _, median) in found.iter().take(slow.max_reported) {
        let (r, first, last) = &all[i];
        let report = walk::run(g, &as_hang(g, first, last, r, cfg), oracle, cfg)?;
        let key = (g.process_name(r.tid), r.comm.clone(), r.syscall.clone());
        // The fast one: of the group's requests at most the median, the nearest in time.
        let fast = groups[&key]
            .iter()
            .copied()
            .filter(|j| *j != i && all[*j].0.wait_ns <= median)
            .min_by_key(|j| {
                (
                    all[*j].0.start_ns.0.abs_diff(r.start_ns.0),
                    all[*j].0.segment,
                )
            });
        let fast_report = match fast {
            Some(j) => {
                let (fr, ff, fl) = &all[j];
                Some(walk::run(
                    g,
                    &as_hang(g, ff, fl, fr, cfg),
                    &mut AutoOracle,
                    cfg,
                )?)
            }
            None => None,
        };
        let fast_blame = fast_report.and_then(|f| f.blame);
        let extra = match (&report.blame, &fast_blame) {
            (Some(sb), fb) => {
                let fast_roles = fb.as_ref().map(|b| by_role(b, g)).unwrap_or_default();
                let floor = (r.wait_ns as f64 * sb.min_share) as u64;
                let mut extra: Vec<ExtraWait> = by_role(sb, g)
                    .into_iter()
                    .filter_map(|((process, comm, state), (ns, tid))| {
                        let f = fast_roles
                            .get(&(process.clone(), comm.clone(), state))
                            .map_or(0, |x| x.0);
                        (ns.saturating_sub(f) >= floor.max(1)).then_some(ExtraWait {
                            tid,
                            comm,
                            process,
                            state,
                            slow_ns: ns,
                            fast_ns: f,
                        })
                    })
                    .collect();
                extra.sort_by_key(|x| (std::cmp::Reverse(x.slow_ns - x.fast_ns), x.tid));
                extra
            }
            (None, _) => Vec::new(),
        };
        requests_out.push(SlowRequest {
            request: r.clone(),
            peers: groups[&key].len(),
            median_ns: median,
            ratio: ratio(i, median),
            fast: fast.map(|j| all[j].0.clone()),
            fast_blame,
            extra,
            report,
        });
    }
    Ok(SlowRequests {
        groups: out_groups,
        requests: requests_out,
        found: n_found,
    })
}

impl SlowRequests {
    /// The terminal explanation: the groups, then each slow request with what it waited for
    /// and its report.
    pub fn to_text(&self, subject: &str) -> String {
        let ms = |ns: u64| format!("{:.1} ms", ns as f64 / 1e6);
        let mut out = format!("Requests of {subject} (round trips, by thread and wait):\n");
        if self.groups.is_empty() {
            out.push_str(
                "  none: no wait of these threads was a request answered by another process\n",
            );
        }
        for gr in &self.groups {
            out.push_str(&format!(
                "  {} ({}) in {}: {} requests, median {}, slowest {}, {} slow\n",
                gr.comm,
                gr.process,
                gr.syscall,
                gr.requests,
                ms(gr.median_ns),
                ms(gr.max_ns),
                gr.slow
            ));
        }
        if self.found > self.requests.len() {
            out.push_str(&format!(
                "{} slow requests; the {} slowest are diagnosed\n",
                self.found,
                self.requests.len()
            ));
        }
        for (n, s) in self.requests.iter().enumerate() {
            let r = &s.request;
            out.push_str(&format!(
                "\nSlow request #{}: {} {} waited {} in {} ({:.0}× the median {} of {} similar)\n",
                n + 1,
                r.comm,
                r.tid,
                ms(r.wait_ns),
                r.syscall,
                s.ratio,
                ms(s.median_ns),
                s.peers
            ));
            if let Some(f) = &s.fast {
                out.push_str(&format!(
                    "  compared with a fast one: {} waited {}\n",
                    f.segment_label,
                    ms(f.wait_ns)
                ));
            }
            for x in &s.extra {
                let process = if x.process.is_empty() || x.process == x.comm {
                    String::new()
                } else {
                    format!(" ({})", x.process)
                };
                out.push_str(&format!(
                    "  waited for: {} {}{process}, {}, for {} (the fast one: {})\n",
                    x.comm,
                    x.tid,
                    x.state.words(),
                    ms(x.slow_ns),
                    ms(x.fast_ns)
                ));
            }
            for line in s.report.to_text().lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out
    }
}
