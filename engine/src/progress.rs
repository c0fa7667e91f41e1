//! Progress for people watching: a bar with events/s while `argus build` decodes (only when
//! stderr is a terminal: logs and pipes get the one-line summary instead), and the rate
//! limiter behind `argus start`'s status line.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::Cell;
use std::io::IsTerminal;
use std::time::Duration;
#[cfg(target_os = "linux")]
use std::time::Instant;

/// Events between two updates of the bar (updating it per event would cost more than the
/// decoding).
const TICK_EVERY: u64 = 16_384;

/// The `argus build` progress bar: a spinner, events decoded and the rate. Hidden unless
/// stderr is a terminal.
pub(crate) struct BuildProgress {
    bar: Option<ProgressBar>,
    pending: Cell<u64>,
}

impl BuildProgress {
    /// A bar on stderr when it is a terminal, else a no-op.
    pub fn new() -> BuildProgress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            let style = ProgressStyle::with_template(
                "{spinner} decoding {human_pos} events ({per_sec}) {elapsed}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        BuildProgress {
            bar,
            pending: Cell::new(0),
        }
    }

    /// One more event.
    #[inline]
    pub fn tick(&self) {
        let n = self.pending.get() + 1;
        if n >= TICK_EVERY {
            if let Some(bar) = &self.bar {
                bar.inc(n);
            }
            self.pending.set(0);
        } else {
            self.pending.set(n);
        }
    }

    /// Decoding is over: the bar disappears (the summary line follows).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(self.pending.replace(0));
            bar.finish_and_clear();
        }
    }
}

/// Lets a status line through at most once per period (`argus start`'s, Linux-only).
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct RateLimit {
    every: Duration,
    last: Option<Instant>,
}

#[cfg(target_os = "linux")]
impl RateLimit {
    /// At most once every `every`.
    pub fn new(every: Duration) -> RateLimit {
        RateLimit { every, last: None }
    }

    /// Whether a line may be printed now (and, if so, the time since the previous one).
    pub fn ready(&mut self, now: Instant) -> Option<Duration> {
        match self.last {
            Some(last) if now.duration_since(last) < self.every => None,
            Some(last) => {
                self.last = Some(now);
                Some(now.duration_since(last))
            }
            None => {
                self.last = Some(now);
                Some(Duration::ZERO)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_lets_one_line_through_per_period() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(Duration::from_secs(5));
        assert_eq!(r.ready(t0), Some(Duration::ZERO));
        assert_eq!(r.ready(t0 + Duration::from_secs(1)), None);
        assert_eq!(r.ready(t0 + Duration::from_millis(4_999)), None);
        assert_eq!(
            r.ready(t0 + Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
        assert_eq!(r.ready(t0 + Duration::from_secs(6)), None);
    }

    #[test]
    fn a_hidden_bar_counts_nothing_and_never_fails() {
        let p = BuildProgress {
            bar: None,
            pending: Cell::new(0),
        };
        for _ in 0..(TICK_EVERY * 2 + 3) {
            p.tick();
        }
        assert_eq!(p.pending.get(), 3);
        p.finish();
    }
}
