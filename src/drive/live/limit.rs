//! Rate-limited log lines: at most one a second per venue and kind of failure, the lines
//! held back counted and named in the next one that goes out.

use crate::time::Mono;

/// Least time between two lines of one venue and kind.
const EVERY_NS: u64 = 1_000_000_000;

/// One venue's kind of line: when it last went out and how many were held back since.
#[derive(Debug)]
struct Slot {
    venue: usize,
    kind: &'static str,
    last: Mono,
    held: u64,
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
        let found = self
            .slots
            .iter_mut()
            .find(|s| s.venue == venue && s.kind == kind);
        let Some(slot) = found else {
            self.slots.push(Slot {
                venue,
                kind,
                last: now,
                held: 0,
            });
            return Some(0);
        };
        if now.nanos_since(slot.last) >= EVERY_NS {
            slot.last = now;
            Some(std::mem::take(&mut slot.held))
        } else {
            slot.held += 1;
            None
        }
    }
}

/// `" (N more like it held back)"`, or nothing.
pub(super) fn held_note(held: u64) -> String {
    if held == 0 {
        String::new()
    } else {
        format!(" ({held} more like it in the last second not logged)")
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
        assert!(held_note(2).contains('2'));
        assert!(held_note(0).is_empty());
    }
}
