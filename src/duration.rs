//! The one duration grammar of the command line (`--last`, `--retain`): a number with an
//! optional unit, `ms`, `us`, `s`/`sec` (the default), `m`/`min`, `h` or `d`: `500ms`, `90`,
//! `30s`, `10m`, `1.5h`, `2d`.

use std::time::Duration;

/// Parses a duration of the grammar above; the error says what was wrong and what to write.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_end);
    let scale = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return Err(format!("{text:?}: unknown unit (use ms, s, m, h or d)")),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 5m, 30s)"))?;
    let secs = value * scale;
    if !(secs.is_finite() && secs > 0.0 && secs < 1e12) {
        return Err(format!("{text:?} is not a usable duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_the_bare_number() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("10min"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30sec"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 90 "), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
    }

    #[test]
    fn nonsense_is_refused() {
        for bad in ["", "m", "5 parsecs", "0s", "-1m", "1e3", "10y", "."] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
