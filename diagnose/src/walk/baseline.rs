//! Baselines: a wait nobody ended (open, timed out, exited) is compared with a similar wait
//! that ended quickly. Decides which baseline, its wake-up path, which threads of that path
//! were abnormal during the hang, how they rank, and which chain is followed; also the beam
//! search's ranked paths of the report.

use super::activity::Activity;
use super::asking::Chosen;
use super::phrases::{sc, src_syscall};
use super::Walk;
use super::{at_least, path_edge, wakes};
use crate::findings::{During, Finding, Step};
use crate::report::{
    BaselineInfo, Candidate, CauseClass, Choice, FurtherCulprit, PathEdge, PathEdgeKind, PathItem,
    RankedPath, RankedStep, Role, RootCause, ThreadComparison,
};
use crate::{beam, hangs};
use argus_schema::{
    CausalEdge, EdgeKind, EndCause, Nanos, Segment, SegmentId, SegmentKind, Spin, SpinClass,
    StartCause, Strength, Tid,
};
use std::collections::HashSet;

/// The walk's state that a dry run (see [`Walk::dry_run`]) restores.
pub(super) struct Saved {
    pub(super) path: usize,
    pub(super) root_causes: usize,
    pub(super) questions: usize,
    pub(super) candidates: Vec<Candidate>,
    pub(super) advice: usize,
    pub(super) visited: HashSet<SegmentId>,
    pub(super) baseline_info: Option<BaselineInfo>,
    pub(super) baseline_next: Option<SegmentId>,
    pub(super) further: usize,
    pub(super) silent: bool,
}

/// How a thread of a baseline's wake-up path acted in the baseline, for its path item.
pub(super) struct BaselineNote {
    /// The syscall it acted through.
    syscall: Option<String>,
    /// When the baseline's wait began.
    at: Nanos,
    /// How long the baseline's wait lasted.
    wait_ns: u64,
}

/// An abnormal thread of a baseline's wake-up path, ranked.
pub(super) struct Culprit<'g> {
    /// Position on the baseline path (0 = nearest the hung thread).
    pub(super) pos: usize,
    /// The thread on the baseline path and the one examined during the hang.
    pub(super) bt: Tid,
    pub(super) t: Tid,
    /// The baseline edge that thread acted through, and its baseline segment.
    pub(super) e: &'g CausalEdge,
    pub(super) x: &'g Segment,
    pub(super) whole: bool,
    pub(super) score: f64,
    /// The segment that shows what it did during the hang.
    pub(super) seg: Option<&'g Segment>,
}

/// Longest common subsequence length of two syscall sequences over the longer length.
pub(super) fn seq_similarity(a: &[i32], b: &[i32]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let mut dp = vec![0usize; b.len() + 1];
    for x in a {
        let mut prev = 0;
        for (j, y) in b.iter().enumerate() {
            let cur = dp[j + 1];
            dp[j + 1] = if x == y {
                prev + 1
            } else {
                dp[j + 1].max(dp[j])
            };
            prev = cur;
        }
    }
    dp[b.len()] as f64 / a.len().max(b.len()) as f64
}

/// Jaccard similarity of two sorted, deduplicated sets (1 when both are empty).
pub(super) fn jaccard(a: &[EdgeKind], b: &[EdgeKind]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.iter().filter(|k| b.contains(k)).count();
    let union = a.len() + b.len() - inter;
    inter as f64 / union.max(1) as f64
}

impl<'g> Walk<'g, '_> {
    /// A wait that no wake-up ended (or that timed out): Algorithm 1's LongWait case. Find
    /// similar vertices that did not hang (same wait syscall, similar syscall sequence and
    /// connection kinds, a short wait ended by a wake-up), let the user pick one (default: the
    /// most recent), slice its wake-up path back, and for each thread on that path look at
    /// what it did during the hang; the first abnormal one (blocked, busy, gone) is a culprit,
    /// diagnosed recursively after a confirmation.
    pub(super) fn baseline(&mut self, s: &'g Segment, depth: usize) {
        let g = self.g;
        let w0 = s.wait_start_ns.unwrap_or(s.start_ns);
        let w1 = g.end_of(s);
        let hang_wait = w0.until(w1);
        let sys = sc(s.wait_syscall);
        let sims = self.similar(s, hang_wait);
        if sims.is_empty() {
            let advice = self.words().advice_no_baseline(s.tid, &sys);
            self.advice.push(advice);
            self.add_process_candidates(s, w0, w1, None);
            return;
        }
        let pick = if sims.len() == 1 || self.equivalent_baselines(&sims) {
            Some(0)
        } else {
            let choices = sims
                .iter()
                .map(|(b, _, score)| Choice {
                    segment: b.id,
                    segment_label: b.id.to_string(),
                    pid: b.pid,
                    tid: b.tid,
                    comm: g.comm(b.tid),
                    kind: PathEdgeKind::Baseline.name().to_string(),
                    strength: Strength::Weak,
                    ts: b.wait_start_ns.unwrap_or(b.start_ns),
                    description: self.words().choice_baseline(
                        b,
                        &sys,
                        b.wait_start_ns.unwrap_or(b.start_ns),
                        *score,
                    ),
                    stack: g.blocking_stack(b),
                })
                .collect();
            let prompt = self
                .words()
                .ask_baseline(s.tid, &sys, hang_wait, sims.len());
            self.ask("baseline", s, prompt, choices, 0)
        };
        let Some(i) = pick else {
            let advice = self.words().advice_baseline_unpicked();
            self.advice.push(advice);
            self.add_process_candidates(s, w0, w1, None);
            return;
        };
        let (b, nb, similarity) = sims[i];
        let similar_found = sims.len();
        self.baseline_next.get_or_insert(nb.id);
        let bw0 = b.wait_start_ns.unwrap_or(b.start_ns);
        let steps = self.baseline_slice(b, nb);
        let mut info = BaselineInfo {
            hang_segment: s.id,
            segment: b.id,
            segment_label: b.id.to_string(),
            tid: b.tid,
            comm: g.comm(b.tid),
            wait_ns: b.wait_ns(),
            similarity,
            similar_found,
            wake_path: Vec::new(),
            threads: Vec::new(),
        };
        info.wake_path.push(self.ranked_step(b, None, 0.0));
        for (e, x) in &steps {
            info.wake_path
                .push(self.ranked_step(x, Some(path_edge(e)), 0.0));
        }
        // The threads on the baseline path, nearest first, once each.
        let mut tids: Vec<(Tid, &'g Segment, &'g CausalEdge)> = Vec::new();
        for (e, x) in &steps {
            if x.tid.is_task() && x.tid != s.tid && !tids.iter().any(|(t, _, _)| *t == x.tid) {
                tids.push((x.tid, x, e));
            }
        }
        if tids.is_empty() {
            let by = steps.first().map(|(e, x)| (*x, src_syscall(e.src_syscall)));
            let advice = self.words().advice_normally_woken(
                s.tid,
                by.as_ref().map(|(x, sys)| (*x, sys.as_deref())),
                bw0,
                b.wait_ns(),
            );
            self.advice.push(advice);
            self.add_process_candidates(s, w0, w1, None);
            self.baseline_info = self.baseline_info.take().or(Some(info));
            return;
        }
        self.add_process_candidates(s, w0, w1, Some(tids[0].0));
        let pen = &self.cfg.beam.penalties;
        let mut cum = 0.0;
        let mut culprits: Vec<Culprit<'g>> = Vec::new();
        for (pos, (bt, x, e)) in tids.iter().enumerate() {
            let (t, role_of) = self.same_role(*bt, w0, w1);
            let act = self.activity(t, w0, w1);
            let abnormal = self.abnormal(&act, w0, w1, hang_wait);
            let (cov, whole, idle) = self.stuck(t, &act, hang_wait);
            cum += pen.edge(e) - pen.relevance * cov;
            let score = (cum * 1000.0).round() / 1000.0;
            let during = self.during(&act, w0, w1);
            let idle_in = idle.map(sc);
            let during_hang = self
                .words()
                .thread_during(&during, idle_in.as_deref(), role_of);
            info.threads.push(ThreadComparison {
                baseline_tid: *bt,
                tid: t,
                comm: g.comm(t),
                during_hang,
                during,
                idle_in,
                abnormal,
                whole_hang: abnormal && whole,
                score,
                rank: None,
                followed: false,
                explained_by: None,
            });
            if abnormal {
                let seg = act
                    .exited_at
                    .map(|(x, _)| x)
                    .or(act.longest_block.map(|(b, _)| b))
                    .filter(|_| whole || act.exited_at.is_some())
                    .or(act.busiest)
                    .or(act.at_start);
                culprits.push(Culprit {
                    pos,
                    bt: *bt,
                    t,
                    e,
                    x,
                    whole,
                    score,
                    seg,
                });
            }
        }
        // Threads stuck through the whole hang first, the nearest to the hung thread first;
        // then the others by their beam score.
        culprits.sort_by(|a, b| {
            (!a.whole)
                .cmp(&!b.whole)
                .then_with(|| {
                    if a.whole && b.whole {
                        a.pos.cmp(&b.pos)
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .then_with(|| a.score.total_cmp(&b.score))
                .then_with(|| a.pos.cmp(&b.pos))
        });
        for (r, c) in culprits.iter().enumerate() {
            if let Some(tc) = info.threads.get_mut(c.pos) {
                tc.rank = Some(r + 1);
            }
        }
        if culprits.is_empty() {
            self.baseline_info = self.baseline_info.take().or(Some(info));
            let on_path: Vec<Tid> = tids.iter().map(|(t, _, _)| *t).collect();
            let advice = self.words().advice_path_normal(&on_path);
            self.advice.push(advice);
            return;
        }
        let note = |_: &Self, c: &Culprit<'g>| BaselineNote {
            syscall: src_syscall(c.e.src_syscall),
            at: bw0,
            wait_ns: b.wait_ns(),
        };
        if culprits.len() == 1 || self.silent {
            // One culprit (or a chain explored with the default answers): follow the best.
            let c = &culprits[0];
            if let Some(tc) = info.threads.get_mut(c.pos) {
                tc.followed = true;
            }
            self.baseline_info = self.baseline_info.take().or(Some(info));
            let n = note(self, c);
            self.compare_culprit(s, c.t, c.bt, c.pos, n, w0, w1, depth);
            return;
        }
        // Several: explore each chain with the default answers, keep the independent ones
        // (a culprit on a better-ranked culprit's chain, or whose chain meets it, is explained
        // by it), and ask which to follow when more than one is left.
        let chains: Vec<(Vec<PathItem>, Vec<RootCause>)> = culprits
            .iter()
            .map(|c| {
                let n = note(self, c);
                self.dry_run(|w| w.compare_culprit(s, c.t, c.bt, c.pos, n, w0, w1, depth))
            })
            .collect();
        let tids_of = |(path, roots): &(Vec<PathItem>, Vec<RootCause>)| -> HashSet<Tid> {
            path.iter()
                .map(|p| p.tid)
                .chain(roots.iter().map(|r| r.tid))
                .collect()
        };
        let mut independent: Vec<usize> = Vec::new();
        for (j, c) in culprits.iter().enumerate() {
            let mine = tids_of(&chains[j]);
            let deepest = chains[j].1.last().map(|r| r.segment);
            let by = independent.iter().copied().find(|&i| {
                let theirs = tids_of(&chains[i]);
                theirs.contains(&c.t)
                    || mine.contains(&culprits[i].t)
                    || (deepest.is_some() && chains[i].1.last().map(|r| r.segment) == deepest)
            });
            match by {
                Some(i) => {
                    if let Some(tc) = info.threads.get_mut(c.pos) {
                        tc.explained_by = Some(culprits[i].t);
                    }
                }
                None => independent.push(j),
            }
        }
        let pick = if independent.len() == 1 {
            Some(0)
        } else {
            let choices: Vec<Choice> = independent
                .iter()
                .map(|&j| {
                    let c = &culprits[j];
                    let seg = c.seg.unwrap_or(c.x);
                    let during = info
                        .threads
                        .get(c.pos)
                        .map_or_else(String::new, |t| t.during_hang.clone());
                    let ends = chains[j].1.last().map(|r| r.reason.as_str());
                    Choice {
                        segment: seg.id,
                        segment_label: seg.id.to_string(),
                        pid: seg.pid,
                        tid: c.t,
                        comm: g.comm(c.t),
                        kind: PathEdgeKind::Baseline.name().to_string(),
                        strength: Strength::Weak,
                        ts: seg.start_ns,
                        description: self.words().choice_culprit(c.t, &during, c.score, ends),
                        stack: g.blocking_stack(seg),
                    }
                })
                .collect();
            let prompt = self
                .words()
                .ask_culprit(s.tid, &sys, hang_wait, independent.len());
            self.ask("culprit", s, prompt, choices, 0)
        };
        let durings: Vec<(String, During)> = culprits
            .iter()
            .map(|c| {
                info.threads
                    .get(c.pos)
                    .map(|t| (t.during_hang.clone(), t.during.clone()))
                    .unwrap_or_default()
            })
            .collect();
        let followed = pick.and_then(|i| independent.get(i).copied());
        if let Some(j) = followed {
            if let Some(tc) = info.threads.get_mut(culprits[j].pos) {
                tc.followed = true;
            }
        } else {
            let advice = self.words().advice_culprit_unfollowed();
            self.advice.push(advice);
        }
        self.baseline_info = self.baseline_info.take().or(Some(info));
        if let Some(j) = followed {
            let c = &culprits[j];
            let n = note(self, c);
            self.compare_culprit(s, c.t, c.bt, c.pos, n, w0, w1, depth);
        }
        let mut chains: Vec<Option<(Vec<PathItem>, Vec<RootCause>)>> =
            chains.into_iter().map(Some).collect();
        for &j in independent.iter().filter(|&&j| Some(j) != followed) {
            let c = &culprits[j];
            let Some((path, root_causes)) = chains.get_mut(j).and_then(Option::take) else {
                continue;
            };
            let (during_hang, during) = durings.get(j).cloned().unwrap_or_default();
            self.further.push(FurtherCulprit {
                rank: j + 1,
                tid: c.t,
                comm: g.comm(c.t),
                during_hang,
                during,
                score: c.score,
                path,
                root_causes,
            });
        }
    }

    /// Runs `f` (a step of the walk) with the default answers and no questions, then puts
    /// the walk back as it was; returns the path items and root causes `f` found.
    pub(super) fn dry_run(&mut self, f: impl FnOnce(&mut Self)) -> (Vec<PathItem>, Vec<RootCause>) {
        let saved = Saved {
            path: self.path.len(),
            root_causes: self.root_causes.len(),
            questions: self.questions.len(),
            candidates: self.candidates.clone(),
            advice: self.advice.len(),
            visited: self.visited.clone(),
            baseline_info: self.baseline_info.clone(),
            baseline_next: self.baseline_next,
            further: self.further.len(),
            silent: self.silent,
        };
        self.silent = true;
        f(self);
        let path = self.path.split_off(saved.path.min(self.path.len()));
        let roots = self
            .root_causes
            .split_off(saved.root_causes.min(self.root_causes.len()));
        self.questions.truncate(saved.questions);
        self.candidates = saved.candidates;
        self.advice.truncate(saved.advice);
        self.visited = saved.visited;
        self.baseline_info = saved.baseline_info;
        self.baseline_next = saved.baseline_next;
        self.further.truncate(saved.further);
        self.silent = saved.silent;
        (path, roots)
    }

    /// How much of a hang of length `hang_wait` thread `t` was stuck (gone, blocked outside
    /// its event-loop wait, or busy), as a fraction; whether that is (nearly) the whole hang;
    /// and the event-loop wait it idled in, when its longest block was one.
    pub(super) fn stuck(
        &self,
        t: Tid,
        act: &Activity<'_>,
        hang_wait: u64,
    ) -> (f64, bool, Option<i32>) {
        if hang_wait == 0 {
            return (0.0, false, None);
        }
        let frac = |ns: u64| (ns as f64 / hang_wait as f64).min(1.0);
        if act.exited_at.is_some() || act.segments == 0 {
            return (1.0, true, None);
        }
        let block = act.longest_block.map_or(0, |(_, ns)| ns);
        let idle = act
            .longest_block
            .filter(|(_, ns)| *ns > 0 && *ns >= act.on_cpu_ns)
            .and_then(|(b, _)| {
                hangs::learn_loop_wait(self.g, t, &self.cfg.hang)
                    .filter(|lw| argus_schema::syscalls::names(lw.syscall, b.wait_syscall))
                    .map(|lw| lw.syscall)
            });
        let blocked = if idle.is_some() { 0.0 } else { frac(block) };
        let cov = blocked.max(frac(act.on_cpu_ns));
        (cov, cov >= self.cfg.whole_hang_fraction, idle)
    }

    /// The culprit of a baseline comparison: `t` (with the role of `bt` on the baseline path)
    /// was abnormal during `[w0, w1)`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn compare_culprit(
        &mut self,
        s: &'g Segment,
        t: Tid,
        bt: Tid,
        pos: usize,
        note: BaselineNote,
        w0: Nanos,
        w1: Nanos,
        depth: usize,
    ) {
        let hang_wait = w0.until(w1);
        let act = self.activity(t, w0, w1);
        let during = self.during(&act, w0, w1);
        let normally_wakes = pos == 0;
        let step = |during: &During| Step::Baseline {
            normally_wakes,
            baseline_tid: bt,
            syscall: note.syscall.clone(),
            baseline_at: note.at,
            baseline_wait_ns: note.wait_ns,
            during: during.clone(),
        };
        let finding = |circular: bool| Finding::OnBaselinePath {
            waiter: s.tid,
            normally_wakes,
            during: during.clone(),
            circular,
        };
        let edge = PathEdge {
            kind: PathEdgeKind::Baseline,
            strength: Strength::Weak,
            ts: w0,
        };
        if let Some((seg, _)) = act.exited_at {
            self.push(seg, Some(edge), Role::Baseline, step(&during));
            self.root(seg, CauseClass::Exited, finding(false));
            return;
        }
        let blocked = act
            .longest_block
            .filter(|(_, ns)| at_least(*ns, hang_wait, self.cfg.busy_fraction));
        if let Some((bseg, ns)) = blocked {
            self.push(bseg, Some(edge), Role::Baseline, step(&during));
            if !self.visited.insert(bseg.id) {
                self.root(bseg, self.classify(bseg), finding(true));
                return;
            }
            self.root(bseg, self.classify(bseg), finding(false));
            let prompt = self
                .words()
                .ask_recurse_baseline(t, &sc(bseg.wait_syscall), ns);
            if self.confirm(bseg, prompt) {
                self.explain_wait(bseg, depth + 1);
            }
            return;
        }
        if let Some(busy) = act
            .busiest
            .filter(|_| at_least(act.on_cpu_ns, hang_wait, self.cfg.busy_fraction))
        {
            self.visited.insert(busy.id);
            self.push(busy, Some(edge), Role::Baseline, step(&during));
            self.root(busy, CauseClass::LongRunning, finding(false));
            let prompt = self.words().ask_recurse_busy(t);
            if self.confirm(busy, prompt) {
                self.context(busy);
            }
            return;
        }
        if let Some(seg) = act.busiest.or(act.at_start) {
            self.push(seg, Some(edge), Role::Baseline, step(&during));
            self.root(seg, self.classify(seg), finding(false));
        }
    }

    /// Whether a thread's activity during a hang of length `hang_wait` is abnormal: it exited,
    /// was blocked most of the time, or was busy most of the time.
    pub(super) fn abnormal(
        &self,
        act: &Activity<'_>,
        _w0: Nanos,
        _w1: Nanos,
        hang_wait: u64,
    ) -> bool {
        act.exited_at.is_some()
            || act.segments == 0
            || act
                .longest_block
                .is_some_and(|(_, ns)| at_least(ns, hang_wait, self.cfg.busy_fraction))
            || at_least(act.on_cpu_ns, hang_wait, self.cfg.busy_fraction)
    }

    /// The thread to examine during `[w0, w1)` for the baseline thread `bt`: `bt` itself when
    /// it existed then, else the thread with the same name in a process of the same name
    /// that was there the longest (short-lived helpers: a new `sleep` each time). The second
    /// value is `bt` when another thread took its role.
    pub(super) fn same_role(&self, bt: Tid, w0: Nanos, w1: Nanos) -> (Tid, Option<Tid>) {
        let g = self.g;
        let alive = |t: Tid| -> u64 {
            g.segments_overlapping(t, w0, w1)
                .map(|x| x.start_ns.max(w0).until(g.end_of(x).min(w1)))
                .sum()
        };
        let exited_before = g
            .thread_segments(bt)
            .next_back()
            .is_some_and(|l| l.end == EndCause::Exit && g.end_of(l) <= w0);
        if alive(bt) > 0 || !exited_before {
            return (bt, None);
        }
        let comm = g.comm(bt);
        let process = g.process_name(bt);
        let best = g
            .threads()
            .iter()
            .filter(|t| t.tid != bt && t.comm == comm && t.process == process)
            .map(|t| (alive(t.tid), t.tid))
            .filter(|(a, _)| *a > 0)
            .max();
        match best {
            Some((_, t)) => (t, Some(bt)),
            None => (bt, None),
        }
    }

    /// Similar vertices that did not hang: segments of the same thread, or of threads with the
    /// same name in a process of the same name (those of the hung thread's own process when
    /// it has any), ending in the same wait syscall, whose wait was short, not a timeout, and
    /// ended by a wake-up. Ranked by signature similarity; of the best group (within 0.2 of
    /// the best), the most recent first.
    pub(super) fn similar(
        &self,
        s: &'g Segment,
        hang_wait: u64,
    ) -> Vec<(&'g Segment, &'g Segment, f64)> {
        let g = self.g;
        let short = ((hang_wait as f64 * self.cfg.running_slack) as u64).max(1);
        let comm = g.comm(s.tid);
        let process = g.process_name(s.tid);
        let mut tids = vec![s.tid];
        tids.extend(
            g.threads()
                .iter()
                .filter(|t| t.tid != s.tid && t.comm == comm && t.process == process)
                .map(|t| t.tid)
                .take(16),
        );
        let kinds_of = |x: &Segment| -> Vec<EdgeKind> {
            let mut k: Vec<EdgeKind> = g
                .incoming(x.id)
                .map(|e| e.kind)
                .filter(|k| *k != EdgeKind::ThreadOrder)
                .collect();
            k.sort_unstable();
            k.dedup();
            k
        };
        let s_kinds = kinds_of(s);
        let mut out: Vec<(&'g Segment, &'g Segment, f64)> = Vec::new();
        for tid in tids {
            for b in g.thread_segments(tid).rev().take(self.cfg.baseline_scan) {
                if b.id == s.id
                    || b.wait_syscall != s.wait_syscall
                    || b.end != EndCause::Woken
                    || b.wait_start_ns.is_none()
                    || b.wait_ns() > short
                    || b.wait_timed_out()
                {
                    continue;
                }
                let Some(nb) = g.next_in_thread(b.id) else {
                    continue;
                };
                if !g.incoming(nb.id).any(|e| e.kind != EdgeKind::ThreadOrder) {
                    continue;
                }
                let seq = seq_similarity(&s.syscall_seq, &b.syscall_seq);
                let kinds = jaccard(&s_kinds, &kinds_of(b));
                out.push((b, nb, 0.7 * seq + 0.3 * kinds));
            }
        }
        // The hung thread's own process first: a same-named process elsewhere on the machine
        // (a system-wide trace) is only a baseline when the process has none.
        if out.iter().any(|x| x.0.pid == s.pid) {
            out.retain(|x| x.0.pid == s.pid);
        }
        let best = out.iter().map(|x| x.2).fold(f64::MIN, f64::max);
        out.retain(|x| x.2 >= best - 0.2);
        out.sort_by(|a, b| b.0.end_ns.cmp(&a.0.end_ns).then(b.0.id.cmp(&a.0.id)));
        out.truncate(self.cfg.max_choices.max(1));
        out
    }

    /// The baseline's wake-up path: from the segment its wake-up started, back through the
    /// causal edges (asking where ambiguous), through timers to their armers.
    pub(super) fn baseline_slice(
        &mut self,
        b: &'g Segment,
        nb: &'g Segment,
    ) -> Vec<(&'g CausalEdge, &'g Segment)> {
        let g = self.g;
        let mut out: Vec<(&'g CausalEdge, &'g Segment)> = Vec::new();
        let mut cur = nb;
        let mut about = b;
        let mut seen: HashSet<SegmentId> = HashSet::new();
        seen.insert(nb.id);
        for _ in 0..self.cfg.baseline_depth {
            let timer = matches!(cur.kind, SegmentKind::Timer { .. });
            let edges: Vec<&CausalEdge> = g
                .incoming(cur.id)
                .filter(|e| {
                    if timer {
                        e.kind == EdgeKind::Timer
                    } else {
                        e.kind != EdgeKind::ThreadOrder
                    }
                })
                .collect();
            // One source: the baseline's path goes there, weak or not (it only guides which
            // threads are compared with the hang); several: the user tells.
            let mut sources: Vec<_> = edges.iter().map(|e| e.src).collect();
            sources.sort_unstable();
            sources.dedup();
            let e = if sources.len() == 1 {
                match self.choose_default(edges) {
                    Some(e) => e,
                    None => break,
                }
            } else {
                let prompt = self.wake_prompt(
                    self.words().ask_baseline_wake(cur.tid, cur.start_ns),
                    &edges,
                );
                let Chosen::Edge(e) = self.choose("baseline-wake", about, prompt, edges) else {
                    break;
                };
                e
            };
            let Some(x) = g.segment(e.src) else { break };
            if !seen.insert(x.id) {
                break;
            }
            out.push((e, x));
            // Keep slicing through a waker that had itself just been woken (a relay), stop at
            // a thread that ran or slept on its own.
            about = x;
            cur = x;
            if x.tid.is_task() && x.start != StartCause::Woken {
                break;
            }
        }
        out
    }

    /// Whether the candidate baselines tell one story, so that choosing among them is no
    /// ambiguity to ask about: equally similar (within 0.05), and at least three quarters of
    /// them, the default (the most recent) among them, normally ended by a wake-up from a
    /// thread of one name (the same writer, or one `sleep` after another).
    pub(super) fn equivalent_baselines(&self, sims: &[(&'g Segment, &'g Segment, f64)]) -> bool {
        let g = self.g;
        let waker = |nb: &Segment| -> Option<String> {
            let mut comms: Vec<String> = g
                .incoming(nb.id)
                .filter(|e| wakes(e.kind))
                .map(|e| g.comm(e.src.tid()))
                .collect();
            comms.sort_unstable();
            comms.dedup();
            (comms.len() == 1).then(|| comms.remove(0))
        };
        let (lo, hi) = sims
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), (_, _, x)| {
                (lo.min(*x), hi.max(*x))
            });
        let first = sims.first().and_then(|(_, nb, _)| waker(nb));
        let same = sims.iter().filter(|(_, nb, _)| waker(nb) == first).count();
        hi - lo <= 0.05 && first.is_some() && same * 4 >= sims.len() * 3
    }

    /// One step of a ranked or baseline path.
    pub(super) fn ranked_step(&self, s: &Segment, edge: Option<PathEdge>, cost: f64) -> RankedStep {
        RankedStep {
            stack: self.step_stack(s, edge),
            segment: s.id,
            segment_label: s.id.to_string(),
            pid: s.pid,
            tid: s.tid,
            comm: self.g.comm(s.tid),
            edge,
            cost,
            description: self.words().seg_summary(s),
        }
    }

    /// The beam search's ranked paths from the hang.
    pub(super) fn ranked(&self, spin: &Spin, first: &'g Segment) -> Vec<RankedPath> {
        let g = self.g;
        let mut prefix: Vec<RankedStep> = vec![self.ranked_step(first, None, 0.0)];
        let start: &'g Segment = match spin.class {
            SpinClass::LongWait => {
                let next = (first.end == EndCause::Woken && !first.wait_timed_out())
                    .then(|| g.next_in_thread(first.id))
                    .flatten();
                match (next, self.baseline_next.and_then(|id| g.segment(id))) {
                    (Some(n), _) => n,
                    (None, Some(bn)) => {
                        if let Some(b) = g.prev_in_thread(bn.id) {
                            prefix.push(self.ranked_step(
                                b,
                                Some(PathEdge {
                                    kind: PathEdgeKind::Baseline,
                                    strength: Strength::Weak,
                                    ts: b.wait_start_ns.unwrap_or(b.start_ns),
                                }),
                                0.0,
                            ));
                        }
                        bn
                    }
                    (None, None) => first,
                }
            }
            SpinClass::RepeatedYield => g
                .segment(spin.last)
                .and_then(|l| g.next_in_thread(l.id))
                .unwrap_or(first),
            SpinClass::LongRunning => first,
        };
        let paths = beam::search(g, start, self.window, &self.cfg.beam);
        paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut steps = prefix.clone();
                for (j, seg) in p.segments.iter().enumerate().skip(1) {
                    let e = p.edges[j - 1];
                    steps.push(self.ranked_step(seg, Some(path_edge(e)), p.costs[j]));
                }
                let weak = p
                    .edges
                    .iter()
                    .filter(|e| e.strength == Strength::Weak)
                    .count();
                let end = p.end().map(|end| {
                    (
                        end.tid,
                        self.classify(end),
                        beam::coverage(g, end, self.window.0, self.window.1),
                    )
                });
                let evidence = self.words().ranked_evidence(p.edges.len(), weak, end);
                RankedPath {
                    rank: i + 1,
                    score: (p.score * 1000.0).round() / 1000.0,
                    steps,
                    evidence,
                }
            })
            .collect()
    }
}
