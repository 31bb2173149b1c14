//! When each open gap of a channel falls due under `gap_policy = "skip"`.
//!
//! A gap is revealed by a datagram (or heartbeat) beyond the stream's horizon, so gaps open
//! in sequence order: the lowest missing message always belongs to the oldest open gap.
//! The clock is therefore a FIFO of `(last sequence of the gap, deadline)` in sequence
//! order, and declaring the front lost means declaring lost every missing message up to
//! its last sequence. Recovered gaps leave the FIFO lazily, when the lowest missing
//! sequence has passed them.
//!
//! The FIFO is fixed at [`GAP_CLOCKS`] entries. A gap that finds it full joins the newest
//! entry (its deadline is then that earlier gap's, never later than its own), so memory
//! stays fixed whatever the loss pattern, at the cost of declaring such a gap lost early.

use crate::sequencer::SeqRange;
use crate::time::Mono;

/// Open gaps timed separately at most.
pub(super) const GAP_CLOCKS: usize = 64;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    to: u64,
    due: Mono,
}

/// The deadlines of a channel's open gaps. See the [module documentation](self).
#[derive(Debug)]
pub(super) struct GapClock {
    entries: [Entry; GAP_CLOCKS],
    head: usize,
    len: usize,
    /// Gaps that found the FIFO full and joined the newest entry.
    pub(super) merged: u64,
}

impl Default for GapClock {
    fn default() -> Self {
        Self {
            entries: [Entry::default(); GAP_CLOCKS],
            head: 0,
            len: 0,
            merged: 0,
        }
    }
}

impl GapClock {
    fn slot(&self, i: usize) -> usize {
        (self.head + i) % GAP_CLOCKS
    }

    /// Notes that `gap` appeared; it falls due at `due`.
    pub(super) fn opened(&mut self, gap: SeqRange, due: Mono) {
        if self.len > 0 {
            let last = self.slot(self.len - 1);
            if let Some(e) = self.entries.get_mut(last) {
                if gap.to <= e.to {
                    // Inside a gap already timed (a heartbeat repeating what is known).
                    return;
                }
                if self.len == GAP_CLOCKS {
                    e.to = gap.to;
                    self.merged += 1;
                    return;
                }
            }
        }
        let at = self.slot(self.len);
        if let Some(e) = self.entries.get_mut(at) {
            *e = Entry { to: gap.to, due };
            self.len += 1;
        }
    }

    /// Drops the gaps wholly below `lowest_missing` (recovered or declared lost), or every
    /// gap when nothing is missing.
    pub(super) fn forget_below(&mut self, lowest_missing: Option<u64>) {
        let Some(lowest) = lowest_missing else {
            self.clear();
            return;
        };
        while self.len > 0 {
            let front = self.entries.get(self.head).map_or(u64::MAX, |e| e.to);
            if front >= lowest {
                break;
            }
            self.pop();
        }
    }

    /// The last sequence of the oldest gap if it is due at `now`, removing it.
    pub(super) fn pop_due(&mut self, now: Mono) -> Option<u64> {
        let front = *self.entries.get(self.head).filter(|_| self.len > 0)?;
        (front.due <= now).then(|| {
            self.pop();
            front.to
        })
    }

    /// When the oldest gap falls due.
    pub(super) fn next_due(&self) -> Option<Mono> {
        self.entries
            .get(self.head)
            .filter(|_| self.len > 0)
            .map(|e| e.due)
    }

    /// Forgets every gap.
    pub(super) fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    fn pop(&mut self) {
        self.head = (self.head + 1) % GAP_CLOCKS;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Mono {
        Mono::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn gaps_fall_due_oldest_first_and_recovered_ones_are_forgotten() {
        let mut c = GapClock::default();
        c.opened(SeqRange::new(5, 9), at(10));
        c.opened(SeqRange::new(20, 20), at(12));
        c.opened(SeqRange::new(30, 39), at(15));
        // A heartbeat repeating a known tail is not a new gap.
        c.opened(SeqRange::new(35, 39), at(99));
        assert_eq!(c.next_due(), Some(at(10)));
        assert_eq!(c.pop_due(at(9)), None);
        assert_eq!(c.pop_due(at(10)), Some(9));
        // 20 was recovered: the lowest missing is now 31.
        c.forget_below(Some(31));
        assert_eq!(c.next_due(), Some(at(15)));
        assert_eq!(c.pop_due(at(20)), Some(39));
        assert_eq!(c.pop_due(at(20)), None);
        c.opened(SeqRange::new(50, 50), at(30));
        c.forget_below(None);
        assert_eq!(c.next_due(), None);
    }

    #[test]
    fn a_full_clock_merges_new_gaps_into_the_newest_entry() {
        let mut c = GapClock::default();
        for i in 0..GAP_CLOCKS as u64 {
            c.opened(SeqRange::new(i * 10, i * 10), at(i));
        }
        c.opened(SeqRange::new(10_000, 10_005), at(1_000));
        assert_eq!(c.merged, 1);
        let mut last = None;
        while let Some(to) = c.pop_due(at(GAP_CLOCKS as u64)) {
            last = Some(to);
        }
        assert_eq!(
            last,
            Some(10_005),
            "the merged gap falls due with the newest entry"
        );
        assert_eq!(c.next_due(), None);
    }
}
