//! Channels from fd identity: what each descriptor of each process referred to over time
//! ([`ChannelMap`]), as the channel a write feeds and the one a read drains ([`ChannelEnd`]).
//! The message rules (peer sets, data dependencies) look descriptors up here.

use argus_schema::{Nanos, Pid};
use serde::{Deserialize, Serialize};

/// One end of a channel as seen through a file descriptor: the channel a write on it
/// feeds and the channel a read on it drains. For a pipe both are the pipe's inode; for a
/// connected socket with inode `i` and peer `p`, writes feed `i → p` and reads drain
/// `p → i` (see [`ChannelEnd::socket`]). `None`: not a channel (a regular file, a socket
/// whose peer is unknown).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ChannelEnd {
    /// Channel fed by writes.
    pub send: Option<u64>,
    /// Channel drained by reads.
    pub recv: Option<u64>,
}

impl ChannelEnd {
    /// Both ends of the pipe with inode `inode`.
    pub fn pipe(inode: u64) -> ChannelEnd {
        let id = Self::mix(1, inode, 0);
        ChannelEnd {
            send: Some(id),
            recv: Some(id),
        }
    }

    /// A socket with inode `inode` connected to the socket with inode `peer`.
    pub fn socket(inode: u64, peer: u64) -> ChannelEnd {
        ChannelEnd {
            send: Some(Self::mix(2, inode, peer)),
            recv: Some(Self::mix(2, peer, inode)),
        }
    }

    /// What a descriptor to a file of kind `kind` (the collector's names: `pipe`, `socket`,
    /// `regular`, `anon`, `other`) with `inode`, socket `peer` and `/proc` link `target` is
    /// as a channel: pipes and FIFOs, connected sockets, and eventfds (written by one task,
    /// read by another) are; files, unconnected sockets and other anonymous inodes are not.
    pub fn of_file(kind: &str, inode: u64, peer: Option<u64>, target: &str) -> ChannelEnd {
        match (kind, peer) {
            ("pipe", _) => ChannelEnd::pipe(inode),
            ("socket", Some(peer)) => ChannelEnd::socket(inode, peer),
            ("anon", _) if target.contains("eventfd") => ChannelEnd::pipe(inode),
            _ => ChannelEnd::default(),
        }
    }

    /// The connection both directions belong to, the same seen from either end: the pipe,
    /// or the unordered pair of a connected socket's two directions.
    pub fn connection(&self) -> Option<u64> {
        match (self.send, self.recv) {
            (Some(a), Some(b)) if a == b => Some(a),
            (Some(a), Some(b)) => Some(Self::mix(3, a.min(b), a.max(b))),
            (Some(a), None) | (None, Some(a)) => Some(a),
            (None, None) => None,
        }
    }

    /// A channel id for (kind, from, to): injective enough for inode numbers (distinct
    /// inputs collide with probability ~2^-64).
    pub(super) fn mix(tag: u64, a: u64, b: u64) -> u64 {
        let mut z = a
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(17)
            .wrapping_add(b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
            .wrapping_add(tag);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// From `from` on, descriptor `fd` refers to `end` (until a later span of the same fd).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChannelSpan {
    /// The descriptor.
    pub fd: i32,
    /// Since when.
    pub from: Nanos,
    /// What it is.
    pub end: ChannelEnd,
}

/// The descriptor tables of the traced processes over time, as channels
/// ([`RulesConfig::channels`](super::RulesConfig::channels)); filled by the caller from the
/// trace's fd identity records.
/// A process without spans of its own for a descriptor falls back to its parent's table as
/// it was when the process was forked (descriptors are inherited).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "ChannelMapRepr", into = "ChannelMapRepr")]
pub struct ChannelMap {
    /// `(pid, fd)` → `(from, end)` sorted by `from`. Hashed by the descriptor itself (fast
    /// fixed-seed hash): looked up for every data-transfer syscall, and most descriptors
    /// have one span, so a lookup is one probe and no search.
    spans:
        std::collections::HashMap<(Pid, i32), Vec<(Nanos, ChannelEnd)>, foldhash::fast::FixedState>,
    /// Process → its creations `(fork time, parent)`, sorted (a pid may be reused).
    parents: std::collections::HashMap<Pid, Vec<(Nanos, Pid)>, foldhash::fast::FixedState>,
    /// Names these contents for the per-thread memo of answers ([`ChannelMap::lookup`]): a
    /// new number at every change, kept by clones (0: never changed, empty).
    version: u64,
}

impl PartialEq for ChannelMap {
    fn eq(&self, other: &ChannelMap) -> bool {
        self.spans == other.spans && self.parents == other.parents
    }
}

impl Eq for ChannelMap {}

/// A fresh [`ChannelMap::version`].
fn next_version() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One remembered answer: `end` is what `fd` of `pid` refers to for every time in
/// `[lo, hi)`, in the map of version `map`.
#[derive(Clone, Copy)]
struct Memo {
    map: u64,
    pid: Pid,
    fd: i32,
    lo: Nanos,
    hi: Nanos,
    end: Option<ChannelEnd>,
}

/// Slots of the per-thread memo (direct-mapped by process and descriptor).
const MEMO_SLOTS: usize = 64;

thread_local! {
    /// Each thread's recent [`ChannelMap::lookup`] answers: a thread's data transfers go
    /// through the same few descriptors, whose meaning changes rarely, and the look-up
    /// itself (two hash probes and two searches, for every read and write, twice) was ~4%
    /// of a build.
    static MEMO: std::cell::RefCell<[Memo; MEMO_SLOTS]> = const {
        std::cell::RefCell::new(
            [Memo {
                map: 0,
                pid: Pid(0),
                fd: 0,
                lo: Nanos(0),
                hi: Nanos(0),
                end: None,
            }; MEMO_SLOTS],
        )
    };
}

/// How a [`ChannelMap`] is serialized: its spans as a flat list (a map keyed by
/// `(pid, fd)` is not expressible in every format).
#[derive(Clone, Serialize, Deserialize)]
struct ChannelMapRepr {
    spans: Vec<(Pid, ChannelSpan)>,
    parents: Vec<(Pid, Vec<(Nanos, Pid)>)>,
}

impl From<ChannelMapRepr> for ChannelMap {
    fn from(r: ChannelMapRepr) -> ChannelMap {
        let mut m = ChannelMap::default();
        for (pid, s) in r.spans {
            m.insert(pid, s.fd, s.from, s.end);
        }
        for (child, forks) in r.parents {
            for (at, parent) in forks {
                m.set_parent(child, parent, at);
            }
        }
        m
    }
}

impl From<ChannelMap> for ChannelMapRepr {
    fn from(m: ChannelMap) -> ChannelMapRepr {
        let mut spans: Vec<(Pid, ChannelSpan)> = m
            .spans
            .into_iter()
            .flat_map(|((pid, fd), v)| {
                v.into_iter()
                    .map(move |(from, end)| (pid, ChannelSpan { fd, from, end }))
            })
            .collect();
        spans.sort();
        let mut parents: Vec<_> = m.parents.into_iter().collect();
        parents.sort();
        ChannelMapRepr { spans, parents }
    }
}

impl ChannelMap {
    /// Records that from `from` on, `fd` of `pid` refers to `end`.
    pub fn insert(&mut self, pid: Pid, fd: i32, from: Nanos, end: ChannelEnd) {
        self.version = next_version();
        let v = self.spans.entry((pid, fd)).or_default();
        let i = v.partition_point(|&(f, _)| f <= from);
        if i > 0 && v[i - 1].0 == from {
            v[i - 1].1 = end;
        } else {
            v.insert(i, (from, end));
        }
    }

    /// The map for a trace's fd identity: `records` are `(pid, fd, since, end)` as
    /// [`ChannelEnd::of_file`] makes them, `forks` are `(ts, parent, child)`.
    pub fn from_identity(
        records: impl IntoIterator<Item = (Pid, i32, Nanos, ChannelEnd)>,
        forks: impl IntoIterator<Item = (Nanos, Pid, Pid)>,
    ) -> ChannelMap {
        let mut m = ChannelMap::default();
        for (pid, fd, from, end) in records {
            m.insert(pid, fd, from, end);
        }
        for (at, parent, child) in forks {
            m.set_parent(child, parent, at);
        }
        m
    }

    /// Adds every span and fork of `other` (another trace of the same build).
    pub fn merge(&mut self, other: ChannelMap) {
        for ((pid, fd), spans) in other.spans {
            for (from, end) in spans {
                self.insert(pid, fd, from, end);
            }
        }
        for (child, forks) in other.parents {
            for (at, parent) in forks {
                self.set_parent(child, parent, at);
            }
        }
    }

    /// Records that `child` was forked from `parent` at `at` (inherits its descriptors).
    pub fn set_parent(&mut self, child: Pid, parent: Pid, at: Nanos) {
        self.version = next_version();
        if child != parent {
            let v = self.parents.entry(child).or_default();
            if let Err(i) = v.binary_search(&(at, parent)) {
                v.insert(i, (at, parent));
            }
        }
    }

    /// Forgets what no lookup at `now` or later can reach, for a map that keeps growing
    /// while lookups move forward in time (the continuous job: every event it has yet to
    /// process is at `now` or later). `gone`: processes that ended, each with the time it
    /// did (before `now`); their spans and creations from before it go once no creation of
    /// another process still falls back on them. Of every other descriptor and process it
    /// keeps what is in effect at `now`, and at each fork a child's lookups fall back to.
    /// Returns the ended processes it forgot.
    pub fn trim(&mut self, now: Nanos, gone: &std::collections::HashMap<Pid, Nanos>) -> Vec<Pid> {
        use std::collections::HashMap;
        // Parent → the fork times its children's lookups fall back to it at.
        let fallbacks = |parents: &HashMap<Pid, Vec<(Nanos, Pid)>, _>| {
            let mut at: HashMap<Pid, Vec<Nanos>> = HashMap::new();
            for forks in parents.values() {
                for &(t, parent) in forks {
                    at.entry(parent).or_default().push(t);
                }
            }
            at
        };
        // An ended process goes when no creation of a live one refers to it; forgetting
        // one may free its parent.
        let mut refs = fallbacks(&self.parents);
        let mut forgot: HashMap<Pid, Nanos> = HashMap::new();
        let mut todo: Vec<Pid> = gone.keys().copied().collect();
        while let Some(pid) = todo.pop() {
            let Some(&end) = gone.get(&pid) else { continue };
            if end >= now
                || forgot.contains_key(&pid)
                || refs.get(&pid).is_some_and(|v| v.iter().any(|&t| t < end))
            {
                continue;
            }
            forgot.insert(pid, end);
            if let Some(forks) = self.parents.get_mut(&pid) {
                for &(t, parent) in forks.iter().filter(|(t, _)| *t < end) {
                    if let Some(v) = refs.get_mut(&parent) {
                        if let Some(i) = v.iter().position(|&x| x == t) {
                            v.swap_remove(i);
                        }
                    }
                    todo.push(parent);
                }
                forks.retain(|(t, _)| *t >= end);
            }
        }
        self.parents.retain(|_, forks| !forks.is_empty());
        // What is in effect at `now`, at the keep times given, and everything after `now`.
        fn keep<T>(v: &mut Vec<(Nanos, T)>, now: Nanos, also: &[Nanos]) {
            let mut keep = vec![false; v.len()];
            for &t in also.iter().chain(std::iter::once(&now)) {
                if let Some(i) = v.partition_point(|(at, _)| *at <= t).checked_sub(1) {
                    keep[i] = true;
                }
            }
            let mut i = 0;
            v.retain(|(at, _)| {
                let k = keep[i] || *at > now;
                i += 1;
                k
            });
        }
        let none: &[Nanos] = &[];
        for (child, forks) in self.parents.iter_mut() {
            keep(forks, now, refs.get(child).map_or(none, Vec::as_slice));
        }
        let refs = fallbacks(&self.parents);
        self.spans.retain(|&(pid, _), spans| {
            if let Some(&end) = forgot.get(&pid) {
                spans.retain(|(from, _)| *from >= end);
            }
            keep(spans, now, refs.get(&pid).map_or(none, Vec::as_slice));
            !spans.is_empty()
        });
        self.version = next_version();
        forgot.into_keys().collect()
    }

    /// Whether there are no spans.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Number of spans.
    pub fn len(&self) -> usize {
        self.spans.values().map(Vec::len).sum()
    }

    /// Number of processes with a recorded creation.
    pub fn processes(&self) -> usize {
        self.parents.len()
    }

    /// What `fd` of `pid` referred to at `ts`: the process's own latest span since its
    /// latest creation (a reused pid does not see the previous process's descriptors), else
    /// what its parent's `fd` was at the fork.
    pub fn lookup(&self, pid: Pid, fd: i32, ts: Nanos) -> Option<ChannelEnd> {
        let slot = (pid.0 as u32 as usize)
            .wrapping_mul(31)
            .wrapping_add(fd as u32 as usize)
            % MEMO_SLOTS;
        let hit = MEMO.with(|m| {
            let e = m.borrow()[slot];
            (e.map == self.version && e.pid == pid && e.fd == fd && e.lo <= ts && ts < e.hi)
                .then_some(e.end)
        });
        if let Some(end) = hit {
            return end;
        }
        match self.own(pid, fd, ts) {
            Own::Here { end, lo, hi } => {
                MEMO.with(|m| {
                    m.borrow_mut()[slot] = Memo {
                        map: self.version,
                        pid,
                        fd,
                        lo,
                        hi,
                        end,
                    }
                });
                end
            }
            Own::Parent { at, parent } => self.resolve(parent, fd, at),
        }
    }

    /// What `pid`'s own table says of `fd` at `ts`: the latest span since the process's
    /// latest creation, with the times over which that holds (until the next span or
    /// creation; nothing at all before the first of either), else the parent's table as it
    /// was at the fork.
    fn own(&self, pid: Pid, fd: i32, ts: Nanos) -> Own {
        let forks = self.parents.get(&pid).map_or(&[][..], Vec::as_slice);
        let fi = forks.partition_point(|&(at, _)| at <= ts);
        let fork = fi.checked_sub(1).map(|i| forks[i]);
        let spans = self.spans.get(&(pid, fd)).map_or(&[][..], Vec::as_slice);
        let si = spans.partition_point(|&(at, _)| at <= ts);
        let hi = forks
            .get(fi)
            .map_or(Nanos(u64::MAX), |f| f.0)
            .min(spans.get(si).map_or(Nanos(u64::MAX), |s| s.0));
        if let Some((from, end)) = si.checked_sub(1).map(|i| spans[i]) {
            if fork.is_none_or(|(born, _)| from >= born) {
                return Own::Here {
                    end: Some(end),
                    lo: from,
                    hi,
                };
            }
        }
        match fork {
            Some((at, parent)) => Own::Parent { at, parent },
            None => Own::Here {
                end: None,
                lo: Nanos(0),
                hi,
            },
        }
    }

    /// [`ChannelMap::lookup`] without the memo.
    fn resolve(&self, pid: Pid, fd: i32, ts: Nanos) -> Option<ChannelEnd> {
        let (mut pid, mut ts) = (pid, ts);
        // Parent chains are short; the bound guards against a cycle in bad input.
        for _ in 0..16 {
            match self.own(pid, fd, ts) {
                Own::Here { end, .. } => return end,
                Own::Parent { at, parent } => (pid, ts) = (parent, at),
            }
        }
        None
    }
}

/// What one process's own descriptor table says ([`ChannelMap::own`]).
enum Own {
    /// `end` (nothing when `None`) holds for every time in `[lo, hi)`.
    Here {
        end: Option<ChannelEnd>,
        lo: Nanos,
        hi: Nanos,
    },
    /// The descriptor is the parent's, as it was at the fork.
    Parent { at: Nanos, parent: Pid },
}

/// A seeded xorshift: `rnd(n)` is in `0..n` (the tests' random maps and histories).
#[cfg(test)]
fn xorshift(mut x: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

#[cfg(test)]
mod memo_tests {
    use super::*;

    /// The memoized look-up answers like the plain one, for random maps (reused pids,
    /// forks, several spans per descriptor) and queries that jump back and forth in time,
    /// across a change of the map.
    #[test]
    fn memoized_lookups_equal_plain_ones() {
        let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
        let mut m = ChannelMap::default();
        let mut checked = 0;
        for round in 0..3 {
            for _ in 0..60 {
                let (pid, fd, at) = (Pid(rnd(6) as i32), rnd(4) as i32, Nanos(rnd(1_000)));
                m.insert(pid, fd, at, ChannelEnd::pipe(rnd(9) + 1));
            }
            for _ in 0..8 {
                m.set_parent(Pid(rnd(6) as i32), Pid(rnd(6) as i32), Nanos(rnd(1_000)));
            }
            for _ in 0..20_000 {
                let (pid, fd, ts) = (Pid(rnd(7) as i32), rnd(5) as i32, Nanos(rnd(1_100)));
                let got = m.lookup(pid, fd, ts);
                assert_eq!(
                    got,
                    m.resolve(pid, fd, ts),
                    "{pid:?} fd {fd} at {ts:?}, round {round}"
                );
                checked += usize::from(got.is_some());
            }
        }
        assert!(checked > 1_000, "only {checked} look-ups found a channel");
        // An equal map built apart compares equal whatever its memo version.
        let again = ChannelMap::from(ChannelMapRepr::from(m.clone()));
        assert_ne!(again.version, m.version);
        assert_eq!(again, m);
    }
}

#[cfg(test)]
mod trim_tests {
    use super::*;
    use std::collections::HashMap;

    /// Processes fork (reusing the pids of ended ones), open and close descriptors and end,
    /// while lookups move forward: a map trimmed as it goes answers every lookup of a live
    /// process at or after the trim time as the whole map does, and stays the size of what
    /// is live.
    #[test]
    fn a_trimmed_map_answers_live_lookups_as_the_whole_one_and_stays_small() {
        let mut rnd = xorshift(0x9e37_79b9_7f4a_7c15);
        let (mut whole, mut trimmed) = (ChannelMap::default(), ChannelMap::default());
        let mut live: Vec<Pid> = vec![Pid(1)];
        let mut gone: HashMap<Pid, Nanos> = HashMap::new();
        let (mut checked, mut biggest, mut forgot, mut inherited) = (0usize, 0, 0, 0);
        let mut half = 0;
        let mut now = 0u64;
        for step in 0..40_000u64 {
            now += 1 + rnd(3);
            let t = Nanos(now);
            match rnd(10) {
                // A fork: a pid of 64, so ended ones come back.
                0 | 1 if live.len() < 40 => {
                    let parent = live[rnd(live.len() as u64) as usize];
                    let child = Pid(2 + rnd(64) as i32);
                    if !live.contains(&child) {
                        whole.set_parent(child, parent, t);
                        trimmed.set_parent(child, parent, t);
                        live.push(child);
                    }
                }
                2 if live.len() > 1 => {
                    let i = 1 + rnd(live.len() as u64 - 1) as usize;
                    gone.insert(live.swap_remove(i), t);
                }
                _ => {
                    let pid = live[rnd(live.len() as u64) as usize];
                    let end = match rnd(3) {
                        0 => ChannelEnd::default(),
                        _ => ChannelEnd::pipe(1 + rnd(1_000)),
                    };
                    let fd = rnd(6) as i32;
                    whole.insert(pid, fd, t, end);
                    trimmed.insert(pid, fd, t, end);
                }
            }
            if step % 50 == 0 {
                now += 1;
                for pid in trimmed.trim(Nanos(now), &gone) {
                    gone.remove(&pid);
                    forgot += 1;
                }
                if step == 20_000 {
                    half = biggest;
                }
                biggest = biggest.max(trimmed.len());
                for &pid in &live {
                    for fd in 0..6 {
                        let ts = Nanos(now + rnd(3));
                        let want = whole.lookup(pid, fd, ts);
                        assert_eq!(
                            trimmed.lookup(pid, fd, ts),
                            want,
                            "{pid:?} fd {fd} at {ts:?}"
                        );
                        checked += usize::from(want.is_some());
                        inherited +=
                            usize::from(want.is_some() && !trimmed.spans.contains_key(&(pid, fd)));
                    }
                }
            }
        }
        assert!(checked > 10_000, "only {checked} look-ups found a channel");
        assert!(
            inherited > 1_000,
            "only {inherited} look-ups fell back to a parent"
        );
        assert!(forgot > 300, "only {forgot} ended processes forgotten");
        // The whole map holds every span ever made; the trimmed one what live processes (and
        // the ended ancestors they inherit from) hold, no more in the second half than in the
        // first.
        assert!(whole.len() > 15 * biggest, "{} vs {biggest}", whole.len());
        assert!(
            biggest < half + half / 2,
            "{half} spans halfway, {biggest} at most after"
        );
        assert!(
            trimmed.parents.len() <= 64,
            "{} processes",
            trimmed.parents.len()
        );
    }
}
