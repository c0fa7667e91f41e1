//! `argus debug --at TIME`: the moment a user says the program froze, as they know it — a
//! wall-clock time ("around 14:03:12") or a time before the end of the recording ("30 s
//! ago") — turned into a time on the trace clock, where the diagnosis picks the watched
//! thread's hang going on then (else the nearest one) instead of the longest.
//!
//! The grammar:
//!
//! | form | meaning |
//! |---|---|
//! | `14:03`, `14:03:12`, `14:03:12.25` | local time of day, on the trace's day (the date nearest the trace) |
//! | `2026-11-27 14:03:12`, `2026-11-27T14:03:12.5` | local date and time |
//! | `2026-11-27T14:03:12Z`, `…+01:00` | date and time with its offset from UTC |
//! | `@1795788192.5` | seconds since the Unix epoch |
//! | `-30s`, `30s ago`, `end-2m` | before the end of the trace (the duration grammar of `--last`) |
//!
//! A trace time is a wall-clock time minus the recording's `CLOCK_REALTIME −
//! CLOCK_MONOTONIC` offset (`meta.json`'s and the snapshot manifest's `wall_offset_ns`); a
//! recording made before Argus kept that offset takes only the relative form. A moment more
//! than [`MARGIN`] outside the trace is an error that names the trace's span.

use crate::duration::parse_duration;
use argus_schema::Nanos;
use std::time::Duration;

/// How far outside the trace a moment may lie and still pick the nearest hang (a person's
/// "about 14:03" for a hang at the trace's very end).
pub const MARGIN: Duration = Duration::from_secs(60);

const NS: i128 = 1_000_000_000;

/// A moment as the user gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// Nanoseconds since the Unix epoch.
    Wall(i128),
    /// Local time of day, in nanoseconds since midnight (the date is the trace's).
    TimeOfDay(i128),
    /// This long before the end of the trace.
    BeforeEnd(Duration),
}

/// Parses `--at`; the error says what is wrong and what to write.
pub fn parse(text: &str) -> Result<Moment, String> {
    let t = text.trim();
    let usage = || {
        format!(
            "--at {text:?}: not a time (write 14:03:12, 2026-11-27T14:03:12, @1795788192, \
             -30s or \"30s ago\")"
        )
    };
    if let Some(d) = t
        .strip_prefix("end-")
        .or_else(|| t.strip_prefix('-'))
        .or_else(|| t.strip_suffix("ago").map(str::trim_end))
    {
        return parse_duration(d)
            .map(Moment::BeforeEnd)
            .map_err(|e| format!("--at {text:?}: {e}"));
    }
    if let Some(secs) = t.strip_prefix('@') {
        return seconds(secs).map(Moment::Wall).ok_or_else(usage);
    }
    if let Some((date, rest)) = t.split_once(['T', ' ']) {
        let (time, zone) = split_zone(rest);
        let (y, mo, d) = ymd(date).ok_or_else(usage)?;
        let tod = time_of_day(time).ok_or_else(usage)?;
        return match zone {
            Some(offset) => Ok(Moment::Wall(
                i128::from(days_from_civil(y, mo, d)) * 86_400 * NS + tod - offset,
            )),
            None => local(y, mo, d, tod)
                .map(Moment::Wall)
                .ok_or_else(|| format!("--at {text:?}: no such local time (a clock change?)")),
        };
    }
    time_of_day(t).map(Moment::TimeOfDay).ok_or_else(usage)
}

/// The trace time of `m` for a trace spanning `start..=end` whose wall-clock offset is
/// `wall` (`None`: not recorded).
pub fn resolve(m: Moment, start: Nanos, end: Nanos, wall: Option<i64>) -> Result<Nanos, String> {
    let at: i128 = match m {
        Moment::BeforeEnd(d) => i128::from(end.0) - d.as_nanos() as i128,
        Moment::Wall(w) => w - i128::from(wall.ok_or_else(no_offset)?),
        Moment::TimeOfDay(tod) => {
            let wall = i128::from(wall.ok_or_else(no_offset)?);
            let (from, to) = (i128::from(start.0) + wall, i128::from(end.0) + wall);
            // The trace's last day, the day before and the day after: the nearest to the span.
            let (y, mo, d) = local_date(to).ok_or("--at: the trace's date is out of range")?;
            let base = days_from_civil(y, mo, d);
            let candidates = [base - 1, base, base + 1].map(|day| {
                let (y, mo, d) = civil_from_days(day);
                local(y, mo, d, tod).unwrap_or(i128::MAX / 4)
            });
            let outside = |w: i128| (from - w).max(w - to).max(0);
            candidates
                .into_iter()
                .min_by_key(|w| outside(*w))
                .unwrap_or(to)
                - wall
        }
    };
    let margin = MARGIN.as_nanos() as i128;
    if at < i128::from(start.0) - margin || at > i128::from(end.0) + margin {
        let span = match wall {
            Some(w) => format!(
                "{} to {} local time",
                local_text(i128::from(start.0) + i128::from(w)),
                local_text(i128::from(end.0) + i128::from(w))
            ),
            None => format!(
                "{:.1} s, from trace time {} ns",
                end.0.saturating_sub(start.0) as f64 / 1e9,
                start.0
            ),
        };
        let (how, by) = if at < i128::from(start.0) {
            ("before", i128::from(start.0) - at)
        } else {
            ("after", at - i128::from(end.0))
        };
        return Err(format!(
            "--at: that moment is {:.1} s {how} the trace (it covers {span})",
            by as f64 / 1e9
        ));
    }
    Ok(Nanos(at.clamp(0, i128::from(u64::MAX)) as u64))
}

fn no_offset() -> String {
    "--at: this snapshot's trace has no wall-clock offset (recorded before Argus kept one): \
     give the time before its end instead, like --at -30s"
        .to_string()
}

/// `SECS[.FRAC]` in nanoseconds.
fn seconds(text: &str) -> Option<i128> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || whole.len() > 12 {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns: i128 = whole.parse().ok()?;
    ns *= NS;
    let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
    Some(ns + digits.parse::<i128>().ok()?)
}

/// `HH:MM[:SS[.FRAC]]` in nanoseconds since midnight.
fn time_of_day(text: &str) -> Option<i128> {
    let mut parts = text.splitn(3, ':');
    let h: i128 = two_digits(parts.next()?)?;
    let m: i128 = two_digits(parts.next()?)?;
    let s = match parts.next() {
        Some(s) => seconds(s)?,
        None => 0,
    };
    (h < 24 && m < 60 && s < 61 * NS).then_some((h * 3600 + m * 60) * NS + s)
}

fn two_digits(t: &str) -> Option<i128> {
    (!t.is_empty() && t.len() <= 2 && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse().ok())
        .flatten()
}

/// `YYYY-MM-DD`.
fn ymd(text: &str) -> Option<(i64, u32, u32)> {
    let mut p = text.split('-');
    let (y, m, d) = (p.next()?, p.next()?, p.next()?);
    if p.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, u32, u32) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then_some((y, m, d))
}

/// Splits a trailing `Z` or `±HH:MM` off a time; the offset from UTC in nanoseconds.
fn split_zone(text: &str) -> (&str, Option<i128>) {
    if let Some(t) = text.strip_suffix(['Z', 'z']) {
        return (t, Some(0));
    }
    if let Some(i) = text.rfind(['+', '-']) {
        let (t, zone) = text.split_at(i);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        if let Some((h, m)) = zone[1..].split_once(':') {
            if let (Some(h), Some(m)) = (two_digits(h), two_digits(m)) {
                return (t, Some(sign * (h * 3600 + m * 60) * NS));
            }
        }
    }
    (text, None)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// The wall time (ns since the epoch) of a local date and time of day (`mktime`, so the
/// machine's time zone and its daylight-saving rules).
fn local(y: i64, m: u32, d: u32, tod: i128) -> Option<i128> {
    let secs = tod.div_euclid(NS);
    // SAFETY: `tm` is plain old data; all-zero is a valid value, every field used is set.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = i32::try_from(y - 1900).ok()?;
    tm.tm_mon = m as i32 - 1;
    tm.tm_mday = d as i32;
    tm.tm_hour = (secs / 3600) as i32;
    tm.tm_min = (secs / 60 % 60) as i32;
    tm.tm_sec = (secs % 60) as i32;
    tm.tm_isdst = -1;
    // SAFETY: `tm` is a valid, writable tm; mktime reads the time zone.
    let t = unsafe { libc::mktime(&mut tm) };
    (t != -1).then(|| i128::from(t) * NS + tod.rem_euclid(NS))
}

/// The local broken-down time of a wall time.
fn local_tm(wall: i128) -> Option<libc::tm> {
    let t = libc::time_t::try_from(wall.div_euclid(NS)).ok()?;
    // SAFETY: `tm` is plain old data; localtime_r fills it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is thread-safe.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    ok.then_some(tm)
}

/// The local date of a wall time.
fn local_date(wall: i128) -> Option<(i64, u32, u32)> {
    let tm = local_tm(wall)?;
    Some((
        i64::from(tm.tm_year) + 1900,
        (tm.tm_mon + 1) as u32,
        tm.tm_mday as u32,
    ))
}

/// `YYYY-MM-DD HH:MM:SS.mmm` in local time.
pub fn local_text(wall: i128) -> String {
    match local_tm(wall) {
        Some(tm) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec,
            wall.rem_euclid(NS) / 1_000_000
        ),
        None => format!("@{}", wall.div_euclid(NS)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const OFFSET: i64 = 1_795_700_000 * 1_000_000_000; // wall − trace
    fn wall_of(trace_s: f64) -> i128 {
        i128::from(OFFSET) + (trace_s * 1e9) as i128
    }

    #[test]
    fn every_form_parses() {
        assert_eq!(
            parse("-30s"),
            Ok(Moment::BeforeEnd(Duration::from_secs(30)))
        );
        assert_eq!(
            parse("30s ago"),
            Ok(Moment::BeforeEnd(Duration::from_secs(30)))
        );
        assert_eq!(
            parse("end-2m"),
            Ok(Moment::BeforeEnd(Duration::from_secs(120)))
        );
        assert_eq!(
            parse("@1795788192.5"),
            Ok(Moment::Wall(1_795_788_192_500_000_000))
        );
        assert_eq!(
            parse("14:03:12.25"),
            Ok(Moment::TimeOfDay(
                (14 * 3600 + 3 * 60 + 12) * NS + 250_000_000
            ))
        );
        assert_eq!(
            parse("14:03"),
            Ok(Moment::TimeOfDay((14 * 3600 + 3 * 60) * NS))
        );
        // 2026-11-27 is day 20_784 since the epoch.
        let day = 20_784i128 * 86_400 * NS;
        assert_eq!(
            parse("2026-11-27T14:03:12Z"),
            Ok(Moment::Wall(day + (14 * 3600 + 3 * 60 + 12) * NS))
        );
        assert_eq!(
            parse("2026-11-27T14:03:12.5+01:00"),
            Ok(Moment::Wall(day + (13 * 3600 + 3 * 60 + 12) * NS + NS / 2))
        );
        assert_eq!(
            parse("2026-11-27T14:03:12-02:30"),
            Ok(Moment::Wall(day + (16 * 3600 + 33 * 60 + 12) * NS))
        );
        for bad in [
            "",
            "noon",
            "25:00",
            "14:60",
            "2026-13-01T00:00",
            "@x",
            "-5 parsecs",
            "@1.5e3",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_calendar_round_trips() {
        for day in [-1, 0, 59, 365, 11_016, 20_784, 47_482] {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(20_784), (2026, 11, 27));
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
    }

    #[test]
    fn moments_resolve_to_trace_times_and_far_ones_are_errors() {
        let (start, end) = (Nanos(100_000_000_000), Nanos(160_000_000_000));
        let w = Some(OFFSET);
        assert_eq!(
            resolve(Moment::BeforeEnd(Duration::from_secs(30)), start, end, None),
            Ok(Nanos(130_000_000_000))
        );
        assert_eq!(
            resolve(Moment::Wall(wall_of(120.5)), start, end, w),
            Ok(Nanos(120_500_000_000))
        );
        // The local time of day of trace time 150 s, in whatever zone the tests run in.
        let tm = local_tm(wall_of(150.0)).unwrap();
        let tod =
            (i128::from(tm.tm_hour) * 3600 + i128::from(tm.tm_min) * 60 + i128::from(tm.tm_sec))
                * NS;
        assert_eq!(
            resolve(Moment::TimeOfDay(tod), start, end, w),
            Ok(Nanos(150_000_000_000))
        );
        // Without the offset, only the relative form.
        assert!(resolve(Moment::Wall(wall_of(120.0)), start, end, None).is_err());
        assert!(resolve(Moment::TimeOfDay(tod), start, end, None).is_err());
        // Within the margin: taken; beyond it: an error naming the span.
        assert_eq!(
            resolve(Moment::Wall(wall_of(170.0)), start, end, w),
            Ok(Nanos(170_000_000_000))
        );
        let e = resolve(Moment::Wall(wall_of(500.0)), start, end, w).unwrap_err();
        assert!(
            e.contains("after the trace") && e.contains("local time"),
            "{e}"
        );
        let e = resolve(
            Moment::BeforeEnd(Duration::from_secs(3600)),
            start,
            end,
            None,
        )
        .unwrap_err();
        assert!(e.contains("before the trace"), "{e}");
    }
}
