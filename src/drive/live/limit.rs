//! Rate-limited log lines of the rx thread: at most one a second per venue and kind of
//! failure, on the rx thread's own clock, each a [`Throttle`].

use std::time::Duration;

use crate::log::Throttle;
use crate::time::Mono;

/// Least time between two lines of one venue and kind.
const EVERY: Duration = Duration::from_secs(1);

/// One venue's kind of line.
#[derive(Debug)]
struct Slot {
    venue: usize,
    kind: &'static str,
    log: Throttle<Mono>,
}

/// Which lines may go out now.
#[derive(Debug, Default)]
pub(super) struct LogLimit {
    slots: Vec<Slot>,
}

impl LogLimit {
    /// Whether a line of `kind` for venue `venue` may go out at `now`: `Some(held)` with the
    /// number of lines held back since the last one, or `None` (this one is held back).
    pub(super) fn allow(&mut self, now: Mono, venue: usize, kind: &'static str) -> Option<u64> {
        let at = match self
            .slots
            .iter()
            .position(|s| s.venue == venue && s.kind == kind)
        {
            Some(at) => at,
            None => {
                self.slots.push(Slot {
                    venue,
                    kind,
                    log: Throttle::new(EVERY),
                });
                self.slots.len() - 1
            }
        };
        self.slots.get_mut(at)?.log.admit_at(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_per_venue_and_kind() {
        let mut limit = LogLimit::default();
        let t = |ms: u64| Mono::ZERO.after_nanos(ms * 1_000_000);
        assert_eq!(limit.allow(t(0), 0, "connect"), Some(0));
        assert_eq!(limit.allow(t(10), 0, "connect"), None);
        assert_eq!(limit.allow(t(20), 0, "connect"), None);
        assert_eq!(limit.allow(t(20), 1, "connect"), Some(0));
        assert_eq!(limit.allow(t(20), 0, "tls"), Some(0));
        assert_eq!(limit.allow(t(1000), 0, "connect"), Some(2));
        assert_eq!(limit.allow(t(1001), 0, "connect"), None);
    }
}
