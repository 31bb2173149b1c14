//! Inclusive sequence ranges and the walk that reports what is missing.

use std::fmt;

use super::ring::{RingIter, SlotRing};

/// An inclusive range of sequence numbers `[from, to]`.
///
/// ```
/// use gapless::sequencer::SeqRange;
/// let gap = SeqRange::new(101, 102);
/// assert_eq!(gap.len(), 2);
/// assert!(gap.contains(102));
/// assert_eq!(gap.to_string(), "[101, 102]");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqRange {
    /// First sequence in the range.
    pub from: u64,
    /// Last sequence in the range (inclusive).
    pub to: u64,
}

impl SeqRange {
    /// A range from `from` to `to`, both inclusive. `to` below `from` is clamped to `from`.
    pub const fn new(from: u64, to: u64) -> Self {
        let to = if to < from { from } else { to };
        Self { from, to }
    }

    /// How many sequence numbers the range holds (saturating at `u64::MAX`).
    pub const fn len(&self) -> u64 {
        (self.to - self.from).saturating_add(1)
    }

    /// Always false: a range holds at least one sequence number.
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// True when `seq` lies in the range.
    pub const fn contains(&self, seq: u64) -> bool {
        self.from <= seq && seq <= self.to
    }
}

impl fmt::Display for SeqRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}]", self.from, self.to)
    }
}

/// The missing ranges of one stream, in order: every sequence in `[expected, horizon)` that
/// no buffered frame covers. Borrowed from the detector; computing it allocates nothing.
///
/// For point sequencing a run of buffered frames is skipped a bitmap word at a time, so the
/// walk costs O(window / 64 + ranges) however many frames are buffered; range frames are
/// walked one by one, since a frame may cover positions beyond its own slot.
pub struct MissingRanges<'a, P> {
    ring: Option<&'a SlotRing<P>>,
    frames: Option<RingIter<'a, P>>,
    cursor: u64,
    window_end: u64,
    horizon: u64,
}

impl<'a, P> MissingRanges<'a, P> {
    pub(crate) fn new(ring: &'a SlotRing<P>, expected: u64, horizon: u64, point: bool) -> Self {
        Self {
            ring: point.then_some(ring),
            frames: (!point).then(|| ring.iter_from(expected)),
            cursor: expected,
            window_end: expected.saturating_add(ring.capacity()),
            horizon,
        }
    }

    pub(crate) fn empty() -> Self {
        Self {
            ring: None,
            frames: None,
            cursor: 0,
            window_end: 0,
            horizon: 0,
        }
    }

    /// Only the ranges inside the reorder window: what could be held if it came now.
    /// Asking for more is wasted under [`Overflow::Drop`](super::Overflow::Drop), since
    /// an answer beyond the window is dropped again.
    pub fn in_window(mut self) -> Self {
        self.horizon = self.horizon.min(self.window_end);
        self
    }

    fn next_point(&mut self, ring: &SlotRing<P>) -> Option<SeqRange> {
        if self.cursor < self.window_end {
            self.cursor = ring.next_vacant(self.cursor, self.window_end);
        }
        if self.cursor >= self.horizon {
            return None;
        }
        let occupied = if self.cursor < self.window_end {
            ring.next_occupied(self.cursor, self.window_end)
        } else {
            None
        };
        let end = occupied.unwrap_or(self.horizon).min(self.horizon);
        let range = SeqRange::new(self.cursor, end - 1);
        self.cursor = end;
        Some(range)
    }
}

impl<P> Iterator for MissingRanges<'_, P> {
    type Item = SeqRange;

    fn next(&mut self) -> Option<SeqRange> {
        if let Some(ring) = self.ring {
            return self.next_point(ring);
        }
        while let Some(frame) = self.frames.as_mut().and_then(Iterator::next) {
            let hole =
                (frame.first > self.cursor).then(|| SeqRange::new(self.cursor, frame.first - 1));
            self.cursor = self.cursor.max(frame.last.saturating_add(1));
            if hole.is_some() {
                return hole;
            }
        }
        self.frames = None;
        if self.horizon > self.cursor {
            let range = SeqRange::new(self.cursor, self.horizon - 1);
            self.cursor = self.horizon;
            return Some(range);
        }
        None
    }
}
