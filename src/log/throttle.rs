//! Rate-limited log lines: at most one line of a kind per period, the lines held back in
//! between counted and named in the next one that goes out.
//!
//! A [`Throttle`] is one kind of line. It runs on either clock: [`Instant`] on the service's
//! own threads, [`Mono`] on the rx thread, which reads its clock once a turn and hands the
//! reading down. It does no I/O and takes no lock; a thread-shared kind puts it behind a
//! mutex.

use std::time::{Duration, Instant};

use crate::time::Mono;

/// A point on a monotonic clock.
pub trait Moment: Copy {
    /// The time from `earlier` to `self`; zero when `earlier` is not earlier.
    fn since(self, earlier: Self) -> Duration;
}

impl Moment for Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Moment for Mono {
    fn since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.nanos_since(earlier))
    }
}

/// One kind of log line, let out at most once every period.
#[derive(Debug, Clone, Copy)]
pub struct Throttle<M = Instant> {
    every: Duration,
    last: Option<M>,
    held: u64,
}

impl<M: Moment> Throttle<M> {
    /// A kind of line let out at most once every `every`; the first always goes out.
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            held: 0,
        }
    }

    /// Whether a line may go out at `now`: `Some` with the number of lines held back since
    /// the last one that did, or `None` when this one is held back (and counted).
    pub fn admit_at(&mut self, now: M) -> Option<u64> {
        if self.last.is_some_and(|last| now.since(last) < self.every) {
            self.held += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held))
    }

    /// Lines held back since the last one let out.
    pub const fn held(&self) -> u64 {
        self.held
    }
}

impl Throttle<Instant> {
    /// [`Throttle::admit_at`] now.
    pub fn admit(&mut self) -> Option<u64> {
        self.admit_at(Instant::now())
    }
}

/// What a line says of the `held` lines held back before it: `" (N more like it not logged
/// since the last line)"`, or nothing when none were.
pub fn held_note(held: u64) -> String {
    if held == 0 {
        String::new()
    } else {
        format!(" ({held} more like it not logged since the last line)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_period_and_the_rest_counted() {
        let mut log = Throttle::new(Duration::from_secs(5));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(log.admit_at(at(0)), Some(0), "the first goes out");
        assert_eq!(log.admit_at(at(1)), None);
        assert_eq!(log.admit_at(at(4)), None);
        assert_eq!(log.held(), 2);
        assert_eq!(
            log.admit_at(at(5)),
            Some(2),
            "a period on, with those held back"
        );
        assert_eq!(log.held(), 0);
        assert_eq!(
            log.admit_at(at(9)),
            None,
            "the period runs from the last line out"
        );
        assert_eq!(log.admit_at(at(10)), Some(1));
    }

    #[test]
    fn runs_on_the_rx_clock_and_a_clock_going_back_holds_the_line() {
        let mut log = Throttle::new(Duration::from_millis(1));
        let ms = |n: u64| Mono::ZERO.after_nanos(n * 1_000_000);
        assert_eq!(log.admit_at(ms(10)), Some(0));
        assert_eq!(log.admit_at(ms(5)), None);
        assert_eq!(log.admit_at(ms(11)), Some(1));
    }

    #[test]
    fn the_note_names_what_was_held_back() {
        assert_eq!(held_note(0), "");
        assert_eq!(
            held_note(3),
            " (3 more like it not logged since the last line)"
        );
    }
}
