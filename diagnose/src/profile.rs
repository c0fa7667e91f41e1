//! The hung-versus-normal comparison of one thread (`argus dig`): where its CPU time went
//! (call-stack samples) and which syscalls it made, inside the hung vertex and in the rest
//! of its life (the normal case).
//!
//! ```text
//!  samples (ts, frames innermost first) ─► hung: ts inside a hung window │ normal: the rest
//!      ─► per function: share of samples with it anywhere in the stack (inclusive) and on
//!         top (self), in each set ─► sorted by how much the two shares differ
//!      ─► only in the hang: ≥ MIN_SHARE of the hung samples, in none of the normal ones
//!  syscalls (ts, name) ─► count and rate (per second of each set's time) ─► sorted likewise
//! ```
//!
//! A function is counted once per sample however often it recurs in that stack, so an
//! inclusive share is the fraction of the time the function was on the stack.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A function is "only in the hang" when at least this share of the hung samples have it
/// and no normal sample does.
pub const MIN_SHARE: f64 = 0.05;

/// One call-stack sample of the thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileSample {
    /// When (trace clock, ns).
    pub ts: u64,
    /// Function names, innermost first (an unknown frame as its address).
    pub frames: Vec<String>,
}

/// A function's presence in the hung and the normal samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionShare {
    /// The function.
    pub function: String,
    /// Share of the hung samples with it on the stack.
    pub hung: f64,
    /// Share of the normal samples with it on the stack.
    pub normal: f64,
    /// Share of the hung samples with it on top (running its own code).
    pub hung_self: f64,
    /// Share of the normal samples with it on top.
    pub normal_self: f64,
}

/// A syscall's count and rate in the hung and the normal time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyscallShare {
    /// The syscall's name.
    pub syscall: String,
    /// Calls inside the hung windows.
    pub hung: u64,
    /// Calls in the normal time.
    pub normal: u64,
    /// Calls per second of hung time.
    pub hung_per_s: f64,
    /// Calls per second of normal time.
    pub normal_per_s: f64,
}

/// The comparison.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileDiff {
    /// Samples inside the hung windows.
    pub hung_samples: usize,
    /// Samples outside them.
    pub normal_samples: usize,
    /// Nanoseconds of hung and of normal time the syscalls were counted over.
    pub hung_ns: u64,
    /// See [`ProfileDiff::hung_ns`].
    pub normal_ns: u64,
    /// Every function seen, the ones whose share differs most between the hung and the
    /// normal samples first.
    pub functions: Vec<FunctionShare>,
    /// Functions in at least [`MIN_SHARE`] of the hung samples and in no normal one, most
    /// present first (empty when there are no normal samples to compare with).
    pub only_in_hang: Vec<String>,
    /// Functions in at least [`MIN_SHARE`] of the normal samples and in no hung one.
    pub only_in_normal: Vec<String>,
    /// Every syscall made, the ones whose rate (per second) differs most first.
    pub syscalls: Vec<SyscallShare>,
}

/// Whether `ts` falls in one of `windows` (`[start, end)`).
fn inside(windows: &[(u64, u64)], ts: u64) -> bool {
    windows.iter().any(|&(s, e)| ts >= s && ts < e)
}

/// Compares the samples and syscalls inside `hung` windows with those outside them.
/// `span` is the thread's observed life `(first, last)` ns: the normal time is the span
/// minus the hung windows (syscall rates are per second of each).
pub fn profile_diff(
    samples: &[ProfileSample],
    syscalls: &[(u64, String)],
    hung: &[(u64, u64)],
    span: (u64, u64),
) -> ProfileDiff {
    #[derive(Default)]
    struct Counts {
        hung: usize,
        normal: usize,
        hung_self: usize,
        normal_self: usize,
    }
    let mut by_fn: BTreeMap<&str, Counts> = BTreeMap::new();
    let (mut n_hung, mut n_normal) = (0usize, 0usize);
    for s in samples {
        let is_hung = inside(hung, s.ts);
        if is_hung {
            n_hung += 1;
        } else {
            n_normal += 1;
        }
        let mut seen = BTreeSet::new();
        for (depth, f) in s.frames.iter().enumerate() {
            let c = by_fn.entry(f.as_str()).or_default();
            if depth == 0 {
                if is_hung {
                    c.hung_self += 1;
                } else {
                    c.normal_self += 1;
                }
            }
            if seen.insert(f.as_str()) {
                if is_hung {
                    c.hung += 1;
                } else {
                    c.normal += 1;
                }
            }
        }
    }
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let mut functions: Vec<FunctionShare> = by_fn
        .into_iter()
        .map(|(f, c)| FunctionShare {
            function: f.to_string(),
            hung: share(c.hung, n_hung),
            normal: share(c.normal, n_normal),
            hung_self: share(c.hung_self, n_hung),
            normal_self: share(c.normal_self, n_normal),
        })
        .collect();
    // By how much the shares differ, in whole percentage points (a sampled profile says no
    // more: one sample of the hung window taken as the thread went back to its wait made
    // the hang's own function differ by 99.9 points and the normal runs' by 100); at equal
    // difference, what the hang has more of first.
    let points = |f: &FunctionShare| ((f.hung - f.normal).abs() * 100.0).round() as i64;
    functions.sort_by(|a, b| {
        points(b)
            .cmp(&points(a))
            .then_with(|| (b.hung - b.normal).total_cmp(&(a.hung - a.normal)))
            .then_with(|| a.function.cmp(&b.function))
    });
    let only =
        |mine: fn(&FunctionShare) -> f64, theirs: fn(&FunctionShare) -> f64, other: usize| {
            let mut v: Vec<&FunctionShare> = functions
                .iter()
                .filter(|f| other > 0 && mine(f) >= MIN_SHARE && theirs(f) == 0.0)
                .collect();
            v.sort_by(|a, b| mine(b).total_cmp(&mine(a)));
            v.into_iter()
                .map(|f| f.function.clone())
                .collect::<Vec<_>>()
        };
    let only_in_hang = only(|f| f.hung, |f| f.normal, n_normal);
    let only_in_normal = only(|f| f.normal, |f| f.hung, n_hung);

    let clip = |&(s, e): &(u64, u64)| (s.max(span.0), e.min(span.1));
    let hung_ns: u64 = hung
        .iter()
        .map(clip)
        .map(|(s, e)| e.saturating_sub(s))
        .sum();
    let normal_ns = span.1.saturating_sub(span.0).saturating_sub(hung_ns);
    let mut by_sc: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (ts, name) in syscalls {
        let c = by_sc.entry(name.as_str()).or_default();
        if inside(hung, *ts) {
            c.0 += 1;
        } else {
            c.1 += 1;
        }
    }
    let rate = |n: u64, ns: u64| {
        if ns == 0 {
            0.0
        } else {
            n as f64 * 1e9 / ns as f64
        }
    };
    let mut syscalls: Vec<SyscallShare> = by_sc
        .into_iter()
        .map(|(name, (h, n))| SyscallShare {
            syscall: name.to_string(),
            hung: h,
            normal: n,
            hung_per_s: rate(h, hung_ns),
            normal_per_s: rate(n, normal_ns),
        })
        .collect();
    syscalls.sort_by(|a, b| {
        (b.hung_per_s - b.normal_per_s)
            .abs()
            .total_cmp(&(a.hung_per_s - a.normal_per_s).abs())
            .then_with(|| a.syscall.cmp(&b.syscall))
    });
    ProfileDiff {
        hung_samples: n_hung,
        normal_samples: n_normal,
        hung_ns,
        normal_ns,
        functions,
        only_in_hang,
        only_in_normal,
        syscalls,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample(ts: u64, frames: &[&str]) -> ProfileSample {
        ProfileSample {
            ts,
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn the_function_only_the_hang_runs_is_named() {
        // Normal: checksum under serve; hung (100..200): rebuild under serve, recursing.
        let mut samples = Vec::new();
        for ts in 0..100 {
            samples.push(sample(ts, &["mix", "checksum", "serve", "start"]));
        }
        for ts in 100..200 {
            samples.push(sample(ts, &["mix", "rebuild", "rebuild", "serve", "start"]));
        }
        for ts in 200..250 {
            samples.push(sample(ts, &["read", "serve", "start"]));
        }
        let calls = vec![
            (10, "read".to_string()),
            (20, "write".to_string()),
            (150, "futex".to_string()),
            (160, "futex".to_string()),
        ];
        let d = profile_diff(&samples, &calls, &[(100, 200)], (0, 250));
        assert_eq!((d.hung_samples, d.normal_samples), (100, 150));
        assert_eq!(d.only_in_hang, vec!["rebuild".to_string()]);
        assert_eq!(
            d.only_in_normal,
            vec!["checksum".to_string(), "read".to_string()]
        );
        let top = &d.functions[0];
        // Counted once per sample although it recurs.
        assert_eq!(
            (top.function.as_str(), top.hung, top.normal),
            ("rebuild", 1.0, 0.0)
        );
        let mix = d.functions.iter().find(|f| f.function == "mix").unwrap();
        assert_eq!((mix.hung_self, mix.normal_self), (1.0, 100.0 / 150.0));
        // Shared by both at 100%: no difference.
        let serve = d.functions.iter().find(|f| f.function == "serve").unwrap();
        assert_eq!((serve.hung, serve.normal), (1.0, 1.0));
        assert_eq!((d.hung_ns, d.normal_ns), (100, 150));
        assert_eq!(d.syscalls[0].syscall, "futex");
        assert_eq!(d.syscalls[0].hung, 2);
        assert!((d.syscalls[0].hung_per_s - 2e7).abs() < 1e-3);
    }

    /// A function only the normal runs have, on every normal sample, differs as much as the
    /// one only the hang has: the hang's comes first (and the name does not decide).
    #[test]
    fn at_equal_difference_the_hangs_function_comes_first() {
        let samples = vec![sample(1, &["a_normal"]), sample(5, &["z_hung"])];
        let d = profile_diff(&samples, &[], &[(5, 6)], (0, 10));
        assert_eq!(d.functions[0].function, "z_hung");
        assert_eq!(d.functions[1].function, "a_normal");
        // Within a percentage point is equal: one hung sample of 1000 back in its wait.
        let mut samples: Vec<ProfileSample> =
            (0..1000).map(|ts| sample(ts, &["a_normal"])).collect();
        samples.extend((1000..1999).map(|ts| sample(ts, &["z_hung"])));
        samples.push(sample(1999, &["read"]));
        let d = profile_diff(&samples, &[], &[(1000, 2000)], (0, 2000));
        assert_eq!(d.functions[0].function, "z_hung");
        assert_eq!((d.functions[0].hung, d.functions[0].normal), (0.999, 0.0));
        assert_eq!(d.functions[1].function, "a_normal");
        // A point apart is not.
        samples.truncate(1990);
        samples.extend((1990..2000).map(|ts| sample(ts, &["read"])));
        let d = profile_diff(&samples, &[], &[(1000, 2000)], (0, 2000));
        assert_eq!(d.functions[0].function, "a_normal");
    }

    #[test]
    fn nothing_is_only_in_the_hang_without_normal_samples() {
        let samples = vec![sample(5, &["a"]), sample(6, &["a"])];
        let d = profile_diff(&samples, &[], &[(0, 10)], (0, 10));
        assert_eq!((d.hung_samples, d.normal_samples), (2, 0));
        assert!(d.only_in_hang.is_empty());
        assert_eq!(d.functions[0].hung, 1.0);
        assert_eq!(d.normal_ns, 0);
    }
}
