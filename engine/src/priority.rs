//! How the continuous job's own threads are scheduled (`argus start --nice`): a type every
//! platform has, since `argus start --help` is the same everywhere.

/// How the job's own threads are scheduled (`--nice`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum JobPriority {
    /// The default: the job's decoding, dataflow and collector at nice 19, its background
    /// threads (snapshot encoding, the live graph) in `SCHED_IDLE`. Under the saturating
    /// load of issue 14 (`cargo bench --bench overhead`, `ARGUS_BENCH_SATURATE`) the load
    /// kept 0.41 of its untraced speed with the whole job in `SCHED_IDLE`, against 0.33 at
    /// nice 10 and 0.39 at nice 19 (15 s runs, `argus record` alone: 0.48): the ping-pong
    /// load is slowed by every wake-up it has to wait for, and only the idle class is
    /// preempted at once. But in the idle class every thread of the job weighs the same, and
    /// nice values do not count there: the snapshot encoding and the live graph (0.3–0.4
    /// CPUs) competed as equals with the decoding and the dataflow whose spins `--follow`
    /// reads. In the soak (300 s, ~290k events/s, one run each) `--follow` reported a new
    /// hang a median 0.63 s after it was detectable with the whole job idle, 0.47 s with
    /// this split (max 2.56 s and 2.19 s), and the marker → snapshot delay's max fell from
    /// 2.19 to 1.34 periods; the load's CPU time was the same (0.72 and 0.71 CPUs).
    Idle,
    /// A nice value, -20..19.
    Nice(i32),
}

impl std::fmt::Display for JobPriority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobPriority::Idle => f.write_str("idle"),
            JobPriority::Nice(n) => write!(f, "nice {n}"),
        }
    }
}

/// `idle` or a nice value in -20..19.
pub fn parse_job_priority(s: &str) -> Result<JobPriority, String> {
    if s.eq_ignore_ascii_case("idle") {
        return Ok(JobPriority::Idle);
    }
    match s.parse::<i32>() {
        Ok(n) if (-20..=19).contains(&n) => Ok(JobPriority::Nice(n)),
        _ => Err(format!(
            "`{s}` is neither `idle` nor a nice value from -20 to 19"
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_job_priority_is_idle_or_a_nice_value() {
        assert_eq!(parse_job_priority("idle"), Ok(JobPriority::Idle));
        assert_eq!(parse_job_priority("IDLE"), Ok(JobPriority::Idle));
        assert_eq!(parse_job_priority("-5"), Ok(JobPriority::Nice(-5)));
        assert_eq!(parse_job_priority("19"), Ok(JobPriority::Nice(19)));
        for bad in ["20", "-21", "", "lazy", "1.5"] {
            assert!(parse_job_priority(bad).is_err(), "{bad:?}");
        }
    }
}
