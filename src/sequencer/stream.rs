//! One stream's sequencing state machine.

use super::range::{MissingRanges, SeqRange};
use super::ring::SlotRing;
use super::{
    Baseline, Delivered, Disposition, Frame, Outcome, Overflow, Sequencing, StreamConfig,
    StreamState, StreamStats,
};

/// Counters kept per stream; `StreamStats` adds what is computed on demand.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    delivered: u64,
    gaps: u64,
    duplicates: u64,
    stale: u64,
    resets: u64,
    reset_suspected: u64,
    overflows: u64,
    resyncs: u64,
    recovered: u64,
    invalid: u64,
    dropped_reset_required: u64,
    buffered_hwm: usize,
}

/// `point_epoch` when the point short path is off.
const NO_SHORT_PATH: u64 = u64::MAX;

pub(crate) struct Stream<P> {
    /// The epoch whose in-order point frames may take the short path: the stream is
    /// point-sequenced, `Synced`, and in this epoch. [`NO_SHORT_PATH`] otherwise. Kept in
    /// step by [`Stream::refresh`] after every operation that can change state or epoch.
    point_epoch: u64,
    cfg: StreamConfig,
    state: StreamState,
    epoch: Option<u64>,
    /// The next sequence this stream will deliver; everything below it was delivered (or
    /// declared covered by a resync). Meaningless while `Unseen`.
    expected: u64,
    /// The last sequence of the last delivered frame; `None` right after a baseline or a
    /// resync, before anything was delivered on top of it.
    last_delivered: Option<u64>,
    /// One past the highest sequence known to exist (from frames and heartbeats).
    horizon: u64,
    ring: SlotRing<P>,
    counters: Counters,
    /// Between `begin_resync` and `resynchronize`: frames are buffered, never delivered,
    /// in a window based at the first frame seen after `begin_resync`.
    collecting: Collecting,
    /// Payloads of frames that left the ring without being delivered, until the caller
    /// takes them (so it can release whatever they hold). Capacity: one ring.
    discarded: Vec<P>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Collecting {
    No,
    /// Collecting; the window has no base yet.
    Unbased,
    /// Collecting in a window based at `expected`.
    Based,
}

impl<P> Stream<P> {
    pub(crate) fn new(cfg: StreamConfig) -> Self {
        let ring = SlotRing::new(cfg.window);
        let discarded = Vec::with_capacity(ring.capacity() as usize);
        Self {
            point_epoch: NO_SHORT_PATH,
            cfg,
            state: StreamState::Unseen,
            epoch: None,
            expected: 0,
            last_delivered: None,
            horizon: 0,
            ring,
            counters: Counters::default(),
            collecting: Collecting::No,
            discarded,
        }
    }

    pub(crate) fn state(&self) -> StreamState {
        self.state
    }

    pub(crate) fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    pub(crate) fn expected(&self) -> Option<u64> {
        (self.state != StreamState::Unseen).then_some(self.expected)
    }

    pub(crate) fn missing(&self) -> MissingRanges<'_, P> {
        match self.state {
            StreamState::Unseen => MissingRanges::empty(),
            _ => MissingRanges::new(
                &self.ring,
                self.expected,
                self.horizon.max(self.expected),
                self.cfg.sequencing == Sequencing::Point,
            ),
        }
    }

    pub(crate) fn stats(&self) -> StreamStats {
        let c = &self.counters;
        StreamStats {
            delivered: c.delivered,
            gaps: c.gaps,
            missing: self
                .missing()
                .map(|r| r.len())
                .fold(0u64, u64::saturating_add),
            buffered: self.ring.len(),
            buffered_hwm: c.buffered_hwm,
            duplicates: c.duplicates,
            stale: c.stale,
            resets: c.resets,
            reset_suspected: c.reset_suspected,
            overflows: c.overflows,
            resyncs: c.resyncs,
            recovered: c.recovered,
            invalid: c.invalid,
            dropped_reset_required: c.dropped_reset_required,
        }
    }

    /// Is `frame` the continuation of what was delivered?
    #[inline]
    fn continuous(&self, frame: &Frame<P>) -> bool {
        match (self.cfg.sequencing, frame.prev, self.last_delivered) {
            (Sequencing::LinkedRange, Some(prev), Some(last)) => prev == last && frame.last > last,
            _ => frame.first <= self.expected && self.expected <= frame.last,
        }
    }

    #[inline]
    fn valid(&self, frame: &Frame<P>) -> bool {
        frame.first <= frame.last
            && frame.last < u64::MAX
            && match self.cfg.sequencing {
                Sequencing::Point => frame.first == frame.last,
                Sequencing::Range => true,
                Sequencing::LinkedRange => frame.prev.is_none_or(|p| p < frame.first),
            }
    }

    /// Ingests a live frame. The in-order case on a synced stream is the short path at
    /// the top: one comparison chain, one push.
    #[inline(always)]
    pub(crate) fn ingest(
        &mut self,
        epoch: u64,
        frame: Frame<P>,
        out: &mut Vec<Delivered<P>>,
    ) -> Outcome {
        // Synced means the ring is empty and nothing is known beyond `expected`, so
        // delivering an in-order frame can unblock nothing else.
        if self.point_epoch == epoch
            && epoch != NO_SHORT_PATH
            && frame.first == self.expected
            && frame.last == frame.first
            && frame.first != u64::MAX
        {
            self.deliver_point(frame, out);
            return Outcome::with(Disposition::Processed, 1);
        }
        if self.state == StreamState::Synced
            && self.epoch == Some(epoch)
            && self.cfg.sequencing != Sequencing::Point
            && self.valid(&frame)
            && self.continuous(&frame)
        {
            let disposition = if frame.first < self.expected {
                Disposition::PartialOverlap
            } else {
                Disposition::Processed
            };
            self.deliver(frame, out);
            return Outcome::with(disposition, 1);
        }
        if self.cfg.sequencing == Sequencing::Point
            && matches!(
                self.state,
                StreamState::DirtySyncPending | StreamState::Recovering
            )
            && self.epoch == Some(epoch)
            && frame.first > self.expected
            && frame.last == frame.first
            && frame.first < u64::MAX
            && frame.first - self.expected < self.ring.capacity()
            && self.ring.len() < self.cfg.max_buffered
        {
            // The common case while a gap is open: a frame ahead of it goes straight into
            // its slot. The state stays as it is, since the gap stays open.
            let first = frame.first;
            if self.ring.insert(frame).is_err() {
                self.counters.duplicates += 1;
                return Outcome::of(Disposition::Duplicate);
            }
            let mut outcome = Outcome::of(Disposition::Buffered);
            outcome.new_gap = self.reveal(first, first + 1);
            self.counters.buffered_hwm = self.counters.buffered_hwm.max(self.ring.len());
            return outcome;
        }
        let Frame {
            first,
            last,
            prev,
            payload,
        } = frame;
        self.ingest_slow(epoch, first, last, prev, payload, out, false)
    }

    /// Delivers the point frames `first..first + count` at once when the short path
    /// would take each of them in turn; false, changing nothing, otherwise.
    #[inline]
    pub(crate) fn ingest_run(&mut self, epoch: u64, first: u64, count: u64) -> bool {
        // The conditions of the short path in `ingest`, for every frame of the run: synced
        // (so nothing is buffered or known beyond `expected`), in order, and the last
        // frame below `u64::MAX`.
        let fits = first.checked_add(count).is_some();
        if self.point_epoch == epoch
            && epoch != NO_SHORT_PATH
            && first == self.expected
            && count > 0
            && fits
        {
            self.expected = first + count;
            self.counters.delivered += count;
            return true;
        }
        false
    }

    /// Ingests a retransmitted frame; the caller has checked the state.
    pub(crate) fn backfill(
        &mut self,
        epoch: u64,
        frame: Frame<P>,
        out: &mut Vec<Delivered<P>>,
    ) -> Outcome {
        let Frame {
            first,
            last,
            prev,
            payload,
        } = frame;
        self.ingest_slow(epoch, first, last, prev, payload, out, true)
    }

    // Kept out of line so the short path above stays a handful of register operations
    // (measured: the frame was otherwise spilled to the stack first).
    #[inline(never)]
    // The frame arrives as its fields, in registers, so the short path never has to
    // write it to memory first (measured: that store cost about a tenth of the in-order
    // time).
    #[allow(clippy::too_many_arguments)]
    fn ingest_slow(
        &mut self,
        epoch: u64,
        first: u64,
        last: u64,
        prev: Option<u64>,
        payload: P,
        out: &mut Vec<Delivered<P>>,
        backfill: bool,
    ) -> Outcome {
        let frame = Frame {
            first,
            last,
            prev,
            payload,
        };
        let outcome = self.classify(epoch, frame, out, backfill);
        self.refresh();
        outcome
    }

    /// Turns the point short path on or off to match the state and epoch.
    fn refresh(&mut self) {
        self.point_epoch = match (self.state, self.cfg.sequencing, self.epoch) {
            (StreamState::Synced, Sequencing::Point, Some(epoch)) => epoch,
            _ => NO_SHORT_PATH,
        };
    }

    fn classify(
        &mut self,
        epoch: u64,
        frame: Frame<P>,
        out: &mut Vec<Delivered<P>>,
        backfill: bool,
    ) -> Outcome {
        if !self.valid(&frame) {
            self.counters.invalid += 1;
            return Outcome::of(Disposition::Invalid);
        }
        let epoch_reset = match self.begin_epoch(epoch) {
            Ok(reset) => reset,
            Err(outcome) => return outcome,
        };
        let mut outcome = self.place(frame, out, backfill);
        outcome.epoch_reset = epoch_reset;
        outcome
    }

    /// Applies the epoch rules and the baseline policy. `Err` carries the final outcome.
    fn begin_epoch(&mut self, epoch: u64) -> Result<bool, Outcome> {
        let mut reset = false;
        match self.epoch {
            Some(current) if epoch < current => {
                self.counters.stale += 1;
                return Err(Outcome::of(Disposition::Stale));
            }
            Some(current) if epoch > current => {
                self.reset_to_epoch(epoch);
                reset = true;
            }
            Some(_) => {}
            None => self.epoch = Some(epoch),
        }
        if self.state == StreamState::Unseen {
            match self.cfg.baseline {
                Baseline::AdoptFirst => {}
                Baseline::Expect(next) => self.seed(next),
                Baseline::Resync => {
                    let mut outcome = Outcome::of(Disposition::AwaitingResync);
                    outcome.epoch_reset = reset;
                    return Err(outcome);
                }
            }
        }
        Ok(reset)
    }

    /// Classifies a valid frame of the current epoch and delivers or buffers it.
    fn place(&mut self, frame: Frame<P>, out: &mut Vec<Delivered<P>>, backfill: bool) -> Outcome {
        if self.state == StreamState::Unseen {
            // Baseline::AdoptFirst: this frame is the baseline.
            self.seed(frame.first);
        }
        if self.state == StreamState::ResetRequired {
            return self.collect(frame);
        }
        if frame.last < self.expected {
            return self.behind(self.expected - 1 - frame.last);
        }
        if self.continuous(&frame) {
            let overlap = frame.first < self.expected;
            let before = out.len();
            let scan_from = self.expected;
            self.deliver(frame, out);
            self.drain(scan_from, false, out);
            if backfill {
                self.counters.recovered += 1;
            }
            self.settle(backfill);
            let disposition = if overlap {
                Disposition::PartialOverlap
            } else {
                Disposition::Processed
            };
            let delivered = u32::try_from(out.len() - before).unwrap_or(u32::MAX);
            return Outcome::with(disposition, delivered);
        }
        if let (Sequencing::LinkedRange, Some(prev), Some(last)) =
            (self.cfg.sequencing, frame.prev, self.last_delivered)
            && prev < last
        {
            // The frame says its predecessor ended before what was already delivered: the
            // venue's chain went backwards. Only a resync can make sense of it.
            self.counters.reset_suspected += 1;
            self.state = StreamState::ResetRequired;
            return Outcome::of(Disposition::ResetSuspected);
        }
        self.buffer(frame, backfill)
    }

    /// A frame for a stream latched in `ResetRequired`: dropped, unless a snapshot is
    /// being fetched, in which case it is kept for after the resync.
    fn collect(&mut self, frame: Frame<P>) -> Outcome {
        match self.collecting {
            Collecting::No => {
                self.counters.dropped_reset_required += 1;
                return Outcome::of(Disposition::DroppedResetRequired);
            }
            Collecting::Unbased => {
                self.expected = frame.first;
                self.horizon = frame.first;
                self.collecting = Collecting::Based;
            }
            Collecting::Based => {}
        }
        if frame.last < self.expected {
            self.counters.dropped_reset_required += 1;
            return Outcome::of(Disposition::DroppedResetRequired);
        }
        if frame.first < self.expected {
            // Straddles the window base: the resync decides what of it is new; keeping it
            // would need a slot below the base, so it is dropped and will show as missing.
            self.counters.dropped_reset_required += 1;
            return Outcome::of(Disposition::DroppedResetRequired);
        }
        self.buffer(frame, false)
    }

    /// Starts collecting for a resync: drops what is buffered, latches `ResetRequired`
    /// (not authorised), and from the next frame on buffers frames instead of dropping
    /// them, delivering nothing until `resynchronize`.
    pub(crate) fn begin_resync(&mut self) {
        self.begin_resync_inner();
        self.refresh();
    }

    fn begin_resync_inner(&mut self) {
        if self.state == StreamState::Unseen {
            return;
        }
        self.discard_all();
        // What was known to exist beyond `expected` may be a hostile sender's claim; the
        // snapshot and the frames that follow it are the evidence from here on.
        self.horizon = self.expected;
        self.state = StreamState::ResetRequired;
        self.collecting = Collecting::Unbased;
    }

    /// Empties the ring into the discard list.
    fn discard_all(&mut self) {
        let discarded = &mut self.discarded;
        self.ring.drain_all(|f| {
            if discarded.len() < discarded.capacity() {
                discarded.push(f.payload);
            }
        });
    }

    fn discard(&mut self, payload: P) {
        // Never grows: a caller that does not take discards loses them, not memory.
        if self.discarded.len() < self.discarded.capacity() {
            self.discarded.push(payload);
        }
    }

    /// Hands every discarded payload to `f`.
    pub(crate) fn take_discarded(&mut self, f: impl FnMut(P)) {
        self.discarded.drain(..).for_each(f);
    }

    /// How far the known sequences reach beyond `expected` (an upper bound of what is
    /// missing, computed in O(1)).
    pub(crate) fn missing_span(&self) -> u64 {
        match self.state {
            StreamState::Unseen => 0,
            _ => self.horizon.saturating_sub(self.expected),
        }
    }

    /// Frames buffered now.
    pub(crate) fn buffered(&self) -> usize {
        self.ring.len()
    }

    /// True when every point frame of `first..first + count` of `epoch` is already held:
    /// delivered (or passed) on a stream that is synced or recovering, or buffered in its
    /// slot. A copy of such frames changes nothing (a second line's copy of a datagram).
    /// A frame far enough behind to suspect a restart is never called held.
    #[inline]
    pub(crate) fn holds(&self, epoch: u64, first: u64, count: u64) -> bool {
        if self.epoch != Some(epoch)
            || count == 0
            || !matches!(
                self.state,
                StreamState::Synced | StreamState::DirtySyncPending | StreamState::Recovering
            )
        {
            return false;
        }
        let Some(end) = first.checked_add(count) else {
            return false;
        };
        let threshold = self.cfg.reset_threshold;
        if threshold != 0 && self.expected.saturating_sub(first) >= threshold {
            return false;
        }
        if end <= self.expected {
            return true;
        }
        let from = first.max(self.expected);
        end - self.expected <= self.ring.capacity() && (from..end).all(|s| self.ring.contains(s))
    }

    /// True when `first` is exactly what a synced stream of `epoch` takes next, so a
    /// frame starting there is delivered at once and never buffered.
    #[inline]
    pub(crate) fn is_next(&self, epoch: u64, first: u64) -> bool {
        self.state == StreamState::Synced && self.epoch == Some(epoch) && first == self.expected
    }

    /// A frame wholly below `expected`, `distance` behind the last delivered sequence.
    fn behind(&mut self, distance: u64) -> Outcome {
        let threshold = self.cfg.reset_threshold;
        if threshold != 0 && distance >= threshold {
            self.counters.reset_suspected += 1;
            self.state = StreamState::ResetRequired;
            return Outcome::of(Disposition::ResetSuspected);
        }
        self.counters.duplicates += 1;
        Outcome::of(Disposition::Duplicate)
    }

    /// Buffers a frame that starts beyond `expected`.
    fn buffer(&mut self, frame: Frame<P>, backfill: bool) -> Outcome {
        let beyond_window = frame.first - self.expected >= self.ring.capacity();
        if beyond_window || self.ring.len() >= self.cfg.max_buffered {
            if !beyond_window && self.ring.contains(frame.first) {
                self.counters.duplicates += 1;
                return Outcome::of(Disposition::Duplicate);
            }
            self.counters.overflows += 1;
            if self.cfg.overflow == Overflow::Drop {
                // The frame itself is missing now, as much as what lies before it.
                let new_gap = self.reveal(frame.last + 1, frame.last + 1);
                self.settle(backfill);
                let mut outcome = Outcome::of(Disposition::DroppedBeyondWindow);
                outcome.new_gap = new_gap;
                return outcome;
            }
            let new_gap = self.reveal(frame.first, frame.last + 1);
            self.state = StreamState::ResetRequired;
            let mut outcome = Outcome::of(Disposition::DroppedBufferFull);
            outcome.new_gap = new_gap;
            return outcome;
        }
        let (first, end) = (frame.first, frame.last + 1);
        if self.ring.insert(frame).is_err() {
            // The slot of `first` is taken: within the window that is the same frame.
            self.counters.duplicates += 1;
            return Outcome::of(Disposition::Duplicate);
        }
        let new_gap = self.reveal(first, end);
        self.counters.buffered_hwm = self.counters.buffered_hwm.max(self.ring.len());
        if backfill {
            self.counters.recovered += 1;
        }
        self.settle(backfill);
        let mut outcome = Outcome::of(Disposition::Buffered);
        outcome.new_gap = new_gap;
        outcome
    }

    /// Records that sequences up to `end` (exclusive) exist, with `first` the first of
    /// them actually seen. Returns the hole this newly revealed, if any.
    fn reveal(&mut self, first: u64, end: u64) -> Option<SeqRange> {
        let known = self.horizon.max(self.expected);
        let gap = (first > known).then(|| SeqRange::new(known, first - 1));
        if gap.is_some() {
            self.counters.gaps += 1;
        }
        self.horizon = self.horizon.max(end);
        gap
    }

    /// Delivers the point frame at `expected`. Neither `last_delivered` (linked ranges
    /// only) nor `horizon` (allowed to lag `expected`: every reader compares it with
    /// `expected` or above) needs touching.
    #[inline(always)]
    fn deliver_point(&mut self, frame: Frame<P>, out: &mut Vec<Delivered<P>>) {
        self.expected += 1;
        self.counters.delivered += 1;
        out.push(Delivered {
            first: frame.first,
            last: frame.first,
            fresh_from: frame.first,
            payload: frame.payload,
        });
    }

    #[inline]
    fn deliver(&mut self, frame: Frame<P>, out: &mut Vec<Delivered<P>>) {
        let fresh_from = frame.first.max(self.expected);
        self.expected = frame.last + 1;
        self.last_delivered = Some(frame.last);
        self.horizon = self.horizon.max(self.expected);
        self.counters.delivered += 1;
        out.push(Delivered {
            first: frame.first,
            last: frame.last,
            fresh_from,
            payload: frame.payload,
        });
    }

    /// Delivers every buffered frame that has become continuous. `scan_from` is the lowest
    /// sequence that may still hold a buffered frame now left behind `expected`; all such
    /// frames are removed, which keeps the ring's window collision-free. `jumped` says
    /// `expected` moved by other means than delivering (a resync).
    fn drain(&mut self, mut scan_from: u64, jumped: bool, out: &mut Vec<Delivered<P>>) {
        // Delivering a point frame advances `expected` by one and only the frame at
        // `expected` is ever taken, so nothing can be left behind it; range frames (and a
        // resync) can jump over buffered frames.
        let scan = jumped || self.cfg.sequencing != Sequencing::Point;
        if !scan {
            while let Some(frame) = self.ring.take(self.expected) {
                self.deliver_point(frame, out);
            }
            return;
        }
        while self.ring.len() > 0 {
            if let Some(seq) = scan
                .then(|| self.ring.next_occupied(scan_from, self.expected))
                .flatten()
            {
                scan_from = seq + 1;
                let Some(frame) = self.ring.take(seq) else {
                    continue;
                };
                if frame.last >= self.expected && self.continuous(&frame) {
                    self.deliver(frame, out);
                } else {
                    // Wholly covered by what was delivered, or inconsistent with it.
                    self.counters.duplicates += 1;
                    self.discard(frame.payload);
                }
                continue;
            }
            scan_from = self.expected;
            let head = match (self.cfg.sequencing, self.last_delivered) {
                (Sequencing::LinkedRange, Some(last)) => {
                    let end = self.expected.saturating_add(self.ring.capacity());
                    self.ring.next_occupied(self.expected, end).filter(|&seq| {
                        self.ring.get(seq).is_some_and(|f| match f.prev {
                            Some(prev) => prev == last,
                            None => f.first == self.expected,
                        })
                    })
                }
                _ => Some(self.expected),
            };
            let Some(frame) = head.and_then(|seq| self.ring.take(seq)) else {
                break;
            };
            self.deliver(frame, out);
        }
    }

    /// Sets the state from whether anything is missing.
    fn settle(&mut self, backfill: bool) {
        if matches!(self.state, StreamState::Unseen | StreamState::ResetRequired) {
            return;
        }
        let gap = self.ring.len() > 0 || self.horizon > self.expected;
        self.state = if !gap {
            StreamState::Synced
        } else if backfill {
            StreamState::Recovering
        } else if self.state == StreamState::Synced {
            StreamState::DirtySyncPending
        } else {
            self.state
        };
    }

    fn seed(&mut self, next: u64) {
        self.collecting = Collecting::No;
        self.expected = next;
        self.horizon = next;
        self.last_delivered = None;
        self.state = StreamState::Synced;
    }

    fn reset_to_epoch(&mut self, epoch: u64) {
        self.discard_all();
        self.state = StreamState::Unseen;
        self.collecting = Collecting::No;
        self.epoch = Some(epoch);
        self.expected = 0;
        self.horizon = 0;
        self.last_delivered = None;
        self.counters.resets += 1;
    }

    /// Heartbeat: the publisher's next sequence is `next`.
    pub(crate) fn heartbeat(&mut self, epoch: u64, next: u64) -> Outcome {
        let outcome = self.heartbeat_inner(epoch, next);
        self.refresh();
        outcome
    }

    fn heartbeat_inner(&mut self, epoch: u64, next: u64) -> Outcome {
        let epoch_reset = match self.begin_epoch(epoch) {
            Ok(reset) => reset,
            Err(outcome) => return outcome,
        };
        if self.state == StreamState::Unseen {
            self.seed(next);
        }
        let mut outcome = Outcome::of(Disposition::Processed);
        outcome.epoch_reset = epoch_reset;
        if self.state == StreamState::ResetRequired {
            self.horizon = self.horizon.max(next);
            outcome.disposition = Disposition::DroppedResetRequired;
            return outcome;
        }
        if next < self.expected {
            let threshold = self.cfg.reset_threshold;
            if threshold != 0 && self.expected - next >= threshold {
                self.counters.reset_suspected += 1;
                self.state = StreamState::ResetRequired;
                outcome.disposition = Disposition::ResetSuspected;
            }
            return outcome;
        }
        if next > self.expected {
            outcome.new_gap = self.reveal(next, next);
        }
        self.settle(false);
        outcome
    }

    /// Seeds the stream from a snapshot: everything below `next` is covered. Buffered
    /// frames at or after `next` are kept and delivered when continuous.
    pub(crate) fn resynchronize(
        &mut self,
        epoch: Option<u64>,
        next: u64,
        out: &mut Vec<Delivered<P>>,
    ) -> usize {
        let delivered = self.resynchronize_inner(epoch, next, out);
        self.refresh();
        delivered
    }

    fn resynchronize_inner(
        &mut self,
        epoch: Option<u64>,
        next: u64,
        out: &mut Vec<Delivered<P>>,
    ) -> usize {
        if let Some(epoch) = epoch
            && self.epoch != Some(epoch)
        {
            self.reset_to_epoch(epoch);
        }
        let before = out.len();
        let cap = self.ring.capacity();
        let unseen = self.state == StreamState::Unseen;
        let old = self.expected;
        if unseen {
            self.discard_all();
        } else if next < old {
            // The new window ends earlier: frames past it can no longer be held.
            let (dropped, discarded) = (&mut self.counters.overflows, &mut self.discarded);
            self.ring
                .vacate(next.saturating_add(cap), old.saturating_add(cap), |f| {
                    *dropped += 1;
                    if discarded.len() < discarded.capacity() {
                        discarded.push(f.payload);
                    }
                });
        }
        // `horizon` may lag `expected` (see the short path); the true horizon is their max.
        let horizon = if unseen {
            next
        } else {
            self.horizon.max(old).max(next)
        };
        self.seed(next);
        self.horizon = horizon;
        self.counters.resyncs += 1;
        self.drain(old.min(next), true, out);
        self.settle(false);
        out.len() - before
    }
}
