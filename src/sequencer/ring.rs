//! The slot ring: a fixed-size reorder buffer indexed by sequence number.
//!
//! ```text
//!            expected                      expected + capacity (exclusive)
//!               v                                v
//!   sequence:  101 102 103 104 105 106 107 108 | 109 ...   (window of 8)
//!   slot:       5   6   7   0   1   2   3   4  |           (seq & mask)
//!   occupied:   .   .   X   .   .   X   .   .  |           (bitmap, 1 bit a slot)
//! ```
//!
//! A frame is stored in the slot `first & mask`. The window `[expected, expected + capacity)`
//! always maps onto distinct slots, so two buffered frames can never collide as long as the
//! owner vacates every position it moves `expected` past (see [`SlotRing::vacate`]). Anything
//! at or beyond `expected + capacity` is refused by the owner before it reaches the ring: a
//! hostile `seq = expected + 10^9` therefore costs one comparison and no memory.
//!
//! Memory is allocated once, in [`SlotRing::new`]: `capacity` slots and `capacity / 64`
//! bitmap words. Insertion, lookup and removal are O(1); finding the next occupied slot
//! walks the bitmap a word (64 slots) at a time.

use super::Frame;

/// A power-of-two ring of optional frames plus an occupancy bitmap.
#[derive(Debug)]
pub(crate) struct SlotRing<P> {
    slots: Box<[Option<Frame<P>>]>,
    bits: Box<[u64]>,
    mask: u64,
    len: usize,
}

impl<P> SlotRing<P> {
    /// Allocates `capacity` slots; `capacity` must be a power of two of at least 1.
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1).next_power_of_two();
        let mut slots = Vec::with_capacity(capacity);
        slots.resize_with(capacity, || None);
        let words = capacity.div_ceil(64);
        Self {
            slots: slots.into_boxed_slice(),
            bits: vec![0u64; words].into_boxed_slice(),
            mask: (capacity - 1) as u64,
            len: 0,
        }
    }

    /// Number of slots (the window, in sequence numbers).
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Number of frames held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn index(&self, seq: u64) -> usize {
        (seq & self.mask) as usize
    }

    #[inline]
    fn bit(&self, index: usize) -> bool {
        self.bits
            .get(index / 64)
            .is_some_and(|w| w & (1u64 << (index % 64)) != 0)
    }

    /// True when a frame starting at `seq` is held.
    #[inline]
    pub(crate) fn contains(&self, seq: u64) -> bool {
        // The slot is authoritative; the bitmap only speeds up scanning.
        self.slots
            .get(self.index(seq))
            .and_then(Option::as_ref)
            .is_some_and(|f| f.first == seq)
    }

    /// Stores `frame` in the slot of `frame.first`. Returns the frame back when that slot
    /// is already taken (a duplicate, since the owner keeps the window collision-free).
    pub(crate) fn insert(&mut self, frame: Frame<P>) -> Result<(), Frame<P>> {
        let index = self.index(frame.first);
        match self.slots.get_mut(index) {
            Some(slot @ None) => {
                *slot = Some(frame);
                if let Some(word) = self.bits.get_mut(index / 64) {
                    *word |= 1u64 << (index % 64);
                }
                self.len += 1;
                Ok(())
            }
            _ => Err(frame),
        }
    }

    /// Removes and returns the frame starting at `seq`, if held.
    #[inline]
    pub(crate) fn take(&mut self, seq: u64) -> Option<Frame<P>> {
        let index = self.index(seq);
        let slot = self.slots.get_mut(index)?;
        if slot.as_ref().is_none_or(|f| f.first != seq) {
            return None;
        }
        let frame = slot.take()?;
        if let Some(word) = self.bits.get_mut(index / 64) {
            *word &= !(1u64 << (index % 64));
        }
        self.len -= 1;
        Some(frame)
    }

    fn take_index(&mut self, index: usize) -> Option<Frame<P>> {
        let frame = self.slots.get_mut(index).and_then(Option::take)?;
        if let Some(word) = self.bits.get_mut(index / 64) {
            *word &= !(1u64 << (index % 64));
        }
        self.len -= 1;
        Some(frame)
    }

    /// Borrows the frame starting at `seq`, if held.
    #[inline]
    pub(crate) fn get(&self, seq: u64) -> Option<&Frame<P>> {
        let index = self.index(seq);
        self.slots
            .get(index)
            .and_then(Option::as_ref)
            .filter(|f| f.first == seq)
    }

    /// The smallest sequence in `[from, end)` whose slot is occupied, where
    /// `end - from <= capacity`. Walks the bitmap a word at a time.
    pub(crate) fn next_occupied(&self, from: u64, end: u64) -> Option<u64> {
        if self.len == 0 || end <= from {
            return None;
        }
        self.scan(from, end, false)
    }

    /// The smallest sequence in `[from, end)` whose slot is empty, where
    /// `end - from <= capacity`; `end` when every slot in the span is taken. Skips a run
    /// of buffered frames a word (64 slots) at a time.
    pub(crate) fn next_vacant(&self, from: u64, end: u64) -> u64 {
        if self.len == 0 || end <= from {
            return from;
        }
        self.scan(from, end, true)
            .unwrap_or(from + (end - from).min(self.capacity()))
    }

    /// The first position in `[from, end)` (at most one window) whose occupancy bit is
    /// set, or clear when `vacant`; a bitmap word at a time.
    fn scan(&self, from: u64, end: u64, vacant: bool) -> Option<u64> {
        let span = (end - from).min(self.capacity());
        let mut offset = 0u64;
        while offset < span {
            let index = self.index(from + offset);
            let bit = index % 64;
            let raw = self.bits.get(index / 64).copied().unwrap_or(0);
            let word = if vacant { !raw } else { raw } >> bit;
            // Bits available in this word from `bit` on: not past the word, not past the
            // last slot (a ring smaller than 64 slots uses only part of its one word), and
            // not past the span.
            let avail = ((64 - bit) as u64)
                .min(self.capacity() - index as u64)
                .min(span - offset);
            let masked = if avail >= 64 {
                word
            } else {
                word & ((1u64 << avail) - 1)
            };
            if masked != 0 {
                return Some(from + offset + u64::from(masked.trailing_zeros()));
            }
            offset += avail;
        }
        None
    }

    /// Removes every frame whose first sequence lies in `[from, end)`, passing each to
    /// `f` in sequence order. Used when the owner moves its window start past them.
    pub(crate) fn vacate(&mut self, from: u64, end: u64, mut f: impl FnMut(Frame<P>)) {
        let mut cursor = from;
        while let Some(seq) = self.next_occupied(cursor, end) {
            if let Some(frame) = self.take_index(self.index(seq)) {
                f(frame);
            }
            cursor = seq + 1;
        }
    }

    /// Removes every frame, passing each to `f` in slot order.
    pub(crate) fn drain_all(&mut self, mut f: impl FnMut(Frame<P>)) {
        if self.len == 0 {
            return;
        }
        for index in 0..self.slots.len() {
            if self.bit(index)
                && let Some(frame) = self.take_index(index)
            {
                f(frame);
            }
        }
    }

    /// Iterates the held frames in sequence order, starting the scan at `from` and
    /// covering one window.
    pub(crate) fn iter_from(&self, from: u64) -> RingIter<'_, P> {
        RingIter {
            ring: self,
            cursor: from,
            end: from.saturating_add(self.capacity()),
        }
    }
}

/// Iterator over buffered frames in sequence order.
pub(crate) struct RingIter<'a, P> {
    ring: &'a SlotRing<P>,
    cursor: u64,
    end: u64,
}

impl<'a, P> Iterator for RingIter<'a, P> {
    type Item = &'a Frame<P>;

    fn next(&mut self) -> Option<Self::Item> {
        let seq = self.ring.next_occupied(self.cursor, self.end)?;
        self.cursor = seq + 1;
        self.ring.get(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: u64) -> Frame<u64> {
        Frame::point(seq, seq)
    }

    #[test]
    fn capacity_rounds_up_to_power_of_two() {
        assert_eq!(SlotRing::<u8>::new(100).capacity(), 128);
        assert_eq!(SlotRing::<u8>::new(64).capacity(), 64);
        assert_eq!(SlotRing::<u8>::new(0).capacity(), 1);
    }

    #[test]
    fn insert_take_and_duplicate() {
        let mut ring = SlotRing::new(8);
        assert!(ring.insert(frame(10)).is_ok());
        assert!(ring.insert(frame(10)).is_err());
        assert!(ring.contains(10));
        assert!(!ring.contains(18), "same slot, other sequence");
        assert_eq!(ring.take(18).map(|f| f.first), None);
        assert_eq!(ring.take(10).map(|f| f.payload), Some(10));
        assert_eq!(ring.len(), 0);
    }

    #[test]
    fn next_occupied_wraps_around_the_slots() {
        let mut ring = SlotRing::new(128);
        for seq in [250, 260, 300] {
            ring.insert(frame(seq)).unwrap();
        }
        // Window starting at 200 spans indices 72..127 then 0..71.
        assert_eq!(ring.next_occupied(200, 328), Some(250));
        assert_eq!(ring.next_occupied(251, 328), Some(260));
        assert_eq!(ring.next_occupied(261, 328), Some(300));
        assert_eq!(ring.next_occupied(301, 328), None);
        assert_eq!(ring.next_occupied(200, 250), None);
        let seen: Vec<u64> = ring.iter_from(200).map(|f| f.first).collect();
        assert_eq!(seen, vec![250, 260, 300]);
    }

    #[test]
    fn next_occupied_in_a_ring_smaller_than_a_word() {
        let mut ring = SlotRing::new(32);
        ring.insert(frame(32)).unwrap();
        // From 16 the window is indices 16..31 then 0..15; 32 sits at index 0.
        assert_eq!(ring.next_occupied(16, 48), Some(32));
        assert_eq!(ring.next_occupied(33, 64), None);
    }

    #[test]
    fn next_vacant_skips_runs() {
        let mut ring = SlotRing::new(128);
        for seq in 200..330 {
            if seq != 263 && seq < 328 {
                ring.insert(frame(seq)).unwrap();
            }
        }
        assert_eq!(ring.next_vacant(200, 328), 263);
        assert_eq!(ring.next_vacant(264, 328), 328, "all taken up to the end");
        let mut sparse = SlotRing::new(64);
        sparse.insert(frame(10)).unwrap();
        assert_eq!(sparse.next_vacant(10, 60), 11);
        assert_eq!(sparse.next_vacant(5, 60), 5);
    }

    #[test]
    fn vacate_removes_only_the_range() {
        let mut ring = SlotRing::new(64);
        for seq in [5, 6, 9, 12] {
            ring.insert(frame(seq)).unwrap();
        }
        let mut gone = Vec::new();
        ring.vacate(5, 10, |f| gone.push(f.first));
        assert_eq!(gone, vec![5, 6, 9]);
        assert_eq!(ring.len(), 1);
        assert!(ring.contains(12));
        let mut rest = Vec::new();
        ring.drain_all(|f| rest.push(f.first));
        assert_eq!(rest, vec![12]);
        assert_eq!(ring.len(), 0);
    }
}
