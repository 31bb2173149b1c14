//! The redundant lines of one channel: which copy of each datagram came first, what each
//! line skipped, how far behind the first copy the others run, and which line is down.
//!
//! Arbitration itself is the sequencer's: the first copy of a message is taken, and a
//! later one is recognised as held ([`Detector::holds`](crate::sequencer::Detector::holds))
//! before anything is stored, so a losing copy costs a lookup and no copy of its bytes.
//! This module keeps the accounting beside it, in memory fixed at start.

use crate::time::Mono;
use crate::venue::{LineStats, Notice, Notices};

/// First arrivals remembered for the lag measure (a power of two).
const FIRST_SEEN: usize = 1024;

/// What a line's sequence tracking knows.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    /// The epoch `next` belongs to.
    epoch: Option<u64>,
    /// The sequence after the highest one the line carried.
    next: u64,
    /// When the line last carried a datagram (or the channel's first datagram, for a line
    /// not heard yet).
    last_at: Option<Mono>,
    /// Since when it is down.
    down_since: Option<Mono>,
}

/// The lines of a channel. See the [module documentation](self).
#[derive(Debug)]
pub(super) struct Lines {
    stats: Vec<LineStats>,
    track: Vec<Track>,
    /// `(first sequence, arrival)` of recent winning datagrams, by sequence.
    first_seen: Box<[(u64, Mono)]>,
    /// A datagram has arrived on some line.
    started: bool,
}

impl Lines {
    /// `count` lines (at least one).
    pub(super) fn new(count: usize) -> Self {
        let count = count.max(1);
        let remembered = if count > 1 { FIRST_SEEN } else { 0 };
        Self {
            stats: vec![LineStats::default(); count],
            track: vec![Track::default(); count],
            first_seen: vec![(u64::MAX, Mono::ZERO); remembered].into_boxed_slice(),
            started: false,
        }
    }

    /// More than one line: copies are arbitrated.
    #[inline]
    pub(super) fn redundant(&self) -> bool {
        self.stats.len() > 1
    }

    /// Every line's counters.
    pub(super) fn stats(&self) -> &[LineStats] {
        &self.stats
    }

    /// Messages discarded by arbitration, on every line.
    pub(super) fn arbitrated(&self) -> u64 {
        self.stats.iter().map(|s| s.arbitrated).sum()
    }

    /// A datagram of `bytes` arrived on `line` at `now`; a line down comes back up.
    #[inline]
    pub(super) fn received(
        &mut self,
        line: usize,
        bytes: usize,
        now: Mono,
        stream: usize,
        notices: &mut Notices,
    ) {
        if !self.started {
            // The channel's first datagram: the other lines are timed from here.
            self.started = true;
            for t in &mut self.track {
                t.last_at = Some(now);
            }
        }
        let (Some(s), Some(t)) = (self.stats.get_mut(line), self.track.get_mut(line)) else {
            return;
        };
        s.packets += 1;
        s.bytes += bytes as u64;
        t.last_at = Some(now);
        if let Some(since) = t.down_since.take() {
            s.down = false;
            notices.push(Notice::LineUp {
                stream,
                line: u8::try_from(line).unwrap_or(u8::MAX),
                down_ms: now.nanos_since(since) / 1_000_000,
            });
        }
    }

    /// Line `line` carried sequences up to (not including) `end` of `epoch`, from `first`:
    /// what it skipped since its last datagram is counted against it.
    #[inline]
    pub(super) fn carried(&mut self, line: usize, epoch: u64, first: u64, end: u64) {
        let (Some(s), Some(t)) = (self.stats.get_mut(line), self.track.get_mut(line)) else {
            return;
        };
        if t.epoch == Some(epoch) {
            // Sequences are the venue's: a jump near the top of the range must not wrap.
            s.missed = s.missed.saturating_add(first.saturating_sub(t.next));
            t.next = t.next.max(end);
        } else {
            t.epoch = Some(epoch);
            t.next = end;
        }
    }

    /// A datagram from `first` on `line` brought something first, at `now`.
    #[inline]
    pub(super) fn won(&mut self, line: usize, first: u64, now: Mono) {
        if let Some(s) = self.stats.get_mut(line) {
            s.wins += 1;
        }
        let mask = self.first_seen.len().wrapping_sub(1);
        if let Some(slot) = self.first_seen.get_mut(first as usize & mask) {
            *slot = (first, now);
        }
    }

    /// `messages` of a datagram from `first` on `line` had come on another line already.
    #[inline]
    pub(super) fn lost_race(&mut self, line: usize, first: u64, messages: u64, now: Mono) {
        let mask = self.first_seen.len().wrapping_sub(1);
        let seen = self
            .first_seen
            .get(first as usize & mask)
            .filter(|(seq, _)| *seq == first)
            .map(|(_, at)| *at);
        if let Some(s) = self.stats.get_mut(line) {
            s.arbitrated += messages;
            if let Some(at) = seen {
                s.lag.record(now.nanos_since(at));
            }
        }
    }

    /// `messages` of a datagram on `line`, part of whose messages were new, had come on
    /// another line already.
    #[inline]
    pub(super) fn discarded(&mut self, line: usize, messages: u64) {
        if let Some(s) = self.stats.get_mut(line) {
            s.arbitrated += messages;
        }
    }

    /// Marks down every line silent for `silence` while another line was heard within it;
    /// returns when to look again.
    pub(super) fn watch(
        &mut self,
        now: Mono,
        silence: u64,
        stream: usize,
        notices: &mut Notices,
    ) -> Option<Mono> {
        if !self.redundant() || !self.started {
            return None;
        }
        let quiet = |t: &Track| t.last_at.is_none_or(|at| now.nanos_since(at) > silence);
        let live = self.track.iter().any(|t| !quiet(t));
        if live {
            for (i, (s, t)) in self.stats.iter_mut().zip(&mut self.track).enumerate() {
                if quiet(t) && t.down_since.is_none() {
                    t.down_since = Some(now);
                    s.down = true;
                    s.downs += 1;
                    let silent_ms = t.last_at.map_or(0, |at| now.nanos_since(at) / 1_000_000);
                    notices.push(Notice::LineDown {
                        stream,
                        line: u8::try_from(i).unwrap_or(u8::MAX),
                        silent_ms,
                    });
                }
            }
        }
        Some(Mono::from_nanos(
            now.as_nanos().saturating_add((silence / 4).max(1_000_000)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Mono {
        Mono::from_nanos(n * 1_000_000)
    }

    #[test]
    fn a_line_is_charged_with_what_it_skipped_and_copies_are_timed() {
        let mut notices = Notices::new(8);
        let mut l = Lines::new(2);
        l.received(0, 100, ms(1), 0, &mut notices);
        l.carried(0, 1, 1, 11);
        l.won(0, 1, ms(1));
        l.received(1, 100, ms(3), 0, &mut notices);
        l.carried(1, 1, 1, 11);
        l.lost_race(1, 1, 10, ms(3));
        // Line a misses 11..=20, which line b brings first.
        l.received(1, 100, ms(4), 0, &mut notices);
        l.carried(1, 1, 11, 21);
        l.won(1, 11, ms(4));
        l.received(0, 100, ms(5), 0, &mut notices);
        l.carried(0, 1, 21, 31);
        let [a, b] = l.stats() else { panic!() };
        assert_eq!((a.missed, b.missed), (10, 0));
        assert_eq!((a.wins, b.wins), (1, 1));
        assert_eq!(b.arbitrated, 10);
        assert_eq!(b.lag.count(), 1);
        // 2 ms: in the bucket bounded by 2^11 µs.
        assert_eq!(b.lag.counts[11], 1);
        assert_eq!(b.lag.sum_ns, 2_000_000);
        // A new epoch starts the count again.
        l.carried(0, 2, 1, 5);
        assert_eq!(l.stats()[0].missed, 10);
    }

    #[test]
    fn a_jump_to_the_top_of_the_sequence_range_saturates_the_skipped_count() {
        let mut l = Lines::new(2);
        l.carried(0, 1, 1, 1);
        l.carried(0, 1, u64::MAX, u64::MAX);
        l.carried(0, 2, 4, 4);
        l.carried(0, 2, 1 << 60, 1 << 60);
        l.carried(0, 2, u64::MAX, u64::MAX);
        assert_eq!(l.stats()[0].missed, u64::MAX);
    }

    #[test]
    fn a_silent_line_goes_down_only_while_another_is_live() {
        let mut notices = Notices::new(8);
        let mut l = Lines::new(2);
        assert_eq!(l.watch(ms(0), 50_000_000, 0, &mut notices), None);
        l.received(0, 10, ms(0), 0, &mut notices);
        for t in (10..=100).step_by(10) {
            l.received(0, 10, ms(t), 0, &mut notices);
            l.watch(ms(t), 50_000_000, 0, &mut notices);
        }
        assert!(l.stats()[1].down && !l.stats()[0].down);
        assert_eq!(l.stats()[1].downs, 1);
        assert!(matches!(
            notices.pop(),
            Some(Notice::LineDown {
                line: 1,
                silent_ms: 60,
                ..
            })
        ));
        // Both silent: the feed is quiet, nobody else goes down.
        l.watch(ms(400), 50_000_000, 0, &mut notices);
        assert!(!l.stats()[0].down);
        l.received(1, 10, ms(401), 0, &mut notices);
        assert!(!l.stats()[1].down);
        assert!(matches!(
            notices.pop(),
            Some(Notice::LineUp {
                line: 1,
                down_ms: 341,
                ..
            })
        ));
    }
}
