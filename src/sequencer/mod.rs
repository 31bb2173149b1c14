//! The sequencing core: a multi-stream gap detector with a slot-ring reorder buffer.
//!
//! Pure logic: no sockets, no clock. Every other part of gapless asks it one question per
//! frame: *is this complete, and what may be delivered now?*
//!
//! # Vocabulary
//!
//! - A **stream** is one sequence space (a MoldUDP64 session's channel, one IEX-TP channel,
//!   one Binance symbol's depth stream), registered up front and addressed by a dense
//!   [`StreamId`].
//! - **Point** sequencing numbers every message; **range** sequencing gives each frame an
//!   inclusive span `first..=last`; **linked range** frames also name the previous frame's
//!   last id (`prev`, Binance futures' `pu`), and continuity is `prev == last delivered`.
//! - An **epoch** is a numbering generation (a MoldUDP64 session). A newer epoch resets the
//!   stream; an older one is stale.
//! - A **gap** is `[from, to]`, missing and not buffered. **Backfill** fills it.
//!   **Resync** seeds the stream from a snapshot.
//!
//! # Call order
//!
//! 1. [`Detector::add_stream`] once per stream at start-up (this is where memory is
//!    allocated: the ring of `window` slots).
//! 2. Optionally [`Detector::resynchronize`] to seed the stream from a snapshot or a stored
//!    position; otherwise the [`Baseline`] policy decides how the first frame is treated.
//! 3. [`Detector::ingest`] every live frame in arrival order, with a reusable output
//!    vector. Apply what was pushed to it, in order; nothing else is safe to apply.
//! 4. When the outcome reveals a gap, ask [`Detector::missing`] for exactly what to
//!    request (buffered frames are excluded), and feed retransmissions to
//!    [`Detector::backfill`] until [`Reconciliation::is_synced`] is true.
//! 5. Feed heartbeats to [`Detector::heartbeat`]: only they reveal loss at the tail.
//! 6. When the stream is [`StreamState::ResetRequired`] (or backfill is impossible), fetch a
//!    snapshot and call [`Detector::resynchronize`]. Only [`StreamState::Synced`] authorises
//!    trading: see [`Detector::is_trading_authorized`].
//!
//! # What each disposition means for the caller
//!
//! | [`Disposition`] | meaning | caller does |
//! |---|---|---|
//! | `Processed` | continuous; it and any successors it unblocked were pushed | apply them |
//! | `PartialOverlap` | straddles `expected`; pushed with `fresh_from` marking the new part | apply from `fresh_from` |
//! | `Buffered` | ahead of a gap; held in the ring | request [`Detector::missing`] |
//! | `Duplicate` | already delivered or already buffered | nothing |
//! | `Stale` | from an older epoch | nothing |
//! | `DroppedBufferFull` | beyond the window or the buffer cap; stream latched `ResetRequired` | resync |
//! | `DroppedBeyondWindow` | the same under [`Overflow::Drop`]: dropped, still missing | request [`MissingRanges::in_window`] |
//! | `DroppedResetRequired` | the stream is latched; nothing is applied | resync |
//! | `ResetSuspected` | a backward jump of at least the threshold: a restart without a new epoch; latched | confirm the restart, resync |
//! | `AwaitingResync` | the stream waits for [`Detector::resynchronize`] ([`Baseline::Resync`]) | keep the frame if needed, resync |
//! | `Invalid` | `last < first`, a point frame with a span, or a link that is not before `first` | count it |
//! | `UnknownStream` | the id was not issued by this detector | fix the caller |
//!
//! # Example
//!
//! ```
//! use gapless::sequencer::{Detector, Disposition, Frame, SeqRange, StreamConfig};
//!
//! let mut detector = Detector::new();
//! let itch = detector.add_stream(StreamConfig::point(1024));
//! let mut out = Vec::new();
//!
//! detector.ingest(itch, 0, Frame::point(100, "a"), &mut out);
//! assert_eq!(detector.ingest(itch, 0, Frame::point(103, "d"), &mut out).disposition, Disposition::Buffered);
//! let missing: Vec<SeqRange> = detector.missing(itch).collect();
//! assert_eq!(missing, vec![SeqRange::new(101, 102)]);
//! assert!(!detector.is_trading_authorized(itch));
//!
//! out.clear();
//! detector.backfill(itch, 0, Frame::point(101, "b"), &mut out).unwrap();
//! let done = detector.backfill(itch, 0, Frame::point(102, "c"), &mut out).unwrap();
//! assert!(done.is_synced);
//! let payloads: Vec<&str> = out.iter().map(|d| d.payload).collect();
//! assert_eq!(payloads, ["b", "c", "d"]);
//! ```

mod range;
mod ring;
mod stream;
mod wrap;

use thiserror::Error;

pub use range::{MissingRanges, SeqRange};
pub use wrap::extend_u32;

use stream::Stream;

/// Dense identifier of a registered stream, issued by [`Detector::add_stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(u32);

impl StreamId {
    /// The dense index of the stream (0, 1, 2, ... in registration order).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// How a stream numbers its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequencing {
    /// One sequence number a message: every frame has `first == last`.
    Point,
    /// A frame covers `first..=last`; continuity is `first <= expected <= last`.
    Range,
    /// Like [`Sequencing::Range`], and frames may carry `prev`, the last id of the frame
    /// before them; continuity is then `prev == last delivered`.
    LinkedRange,
}

/// What a stream does with its first frame (and after each new epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    /// The first frame (or heartbeat) seen is the baseline. Whatever came before it is
    /// never known to be missing: right for a live-only consumer, wrong for anything that
    /// rebuilds state from the start of the session.
    AdoptFirst,
    /// The stream starts at this sequence; anything seen above it is a gap.
    Expect(u64),
    /// Nothing is accepted until [`Detector::resynchronize`] seeds the stream.
    Resync,
}

/// Per-stream configuration, fixed at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// The numbering model.
    pub sequencing: Sequencing,
    /// The first-frame policy.
    pub baseline: Baseline,
    /// Reorder window in sequence numbers: the ring's slot count (rounded up to a power of
    /// two). A frame at or beyond `expected + window` overflows.
    pub window: usize,
    /// Frames buffered at most (at most `window`); one more overflows.
    pub max_buffered: usize,
    /// A frame at least this far behind the last delivered sequence is a suspected restart
    /// rather than a duplicate. 0 disables the check.
    pub reset_threshold: u64,
    /// What a frame beyond the window or the buffer cap does to the stream.
    pub overflow: Overflow,
}

/// What a frame that cannot be held (beyond the reorder window, or over the buffer cap)
/// does to its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// The stream latches [`StreamState::ResetRequired`]: only a resync (a snapshot, a new
    /// epoch) brings it back. Right where what was dropped cannot be asked for again.
    Latch,
    /// The frame is dropped and counted, and stays missing: the stream goes on recovering
    /// from `expected`, and the dropped frames are asked for again once the window reaches
    /// them. Right where a re-request server holds the whole session (a late join from
    /// the start, say, whose backlog is larger than the window).
    Drop,
}

impl StreamConfig {
    /// Point sequencing with a `window`-slot ring, adopting the first frame.
    pub const fn point(window: usize) -> Self {
        Self {
            sequencing: Sequencing::Point,
            baseline: Baseline::AdoptFirst,
            window,
            max_buffered: window,
            reset_threshold: 0,
            overflow: Overflow::Latch,
        }
    }

    /// Range sequencing with a `window`-slot ring, adopting the first frame.
    pub const fn range(window: usize) -> Self {
        Self {
            sequencing: Sequencing::Range,
            ..Self::point(window)
        }
    }

    /// Linked range sequencing (`prev` links) with a `window`-slot ring, waiting for a resync.
    pub const fn linked(window: usize) -> Self {
        Self {
            sequencing: Sequencing::LinkedRange,
            baseline: Baseline::Resync,
            ..Self::point(window)
        }
    }

    /// Sets the baseline policy.
    pub const fn with_baseline(mut self, baseline: Baseline) -> Self {
        self.baseline = baseline;
        self
    }

    /// Sets the maximum number of buffered frames.
    pub const fn with_max_buffered(mut self, max_buffered: usize) -> Self {
        self.max_buffered = max_buffered;
        self
    }

    /// Sets the backward jump that counts as a suspected restart (0 disables).
    pub const fn with_reset_threshold(mut self, threshold: u64) -> Self {
        self.reset_threshold = threshold;
        self
    }

    /// Sets what a frame that cannot be held does to the stream.
    pub const fn with_overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }
}

/// The state of a stream: one vocabulary for the sequencer, the venues and consumers.
/// Only [`StreamState::Synced`] authorises trading.
///
/// The sequencer itself never reports [`StreamState::Closed`]: a venue adds it when its
/// stream ended with nothing missing (a MoldUDP64 end of session). The discriminants are
/// the state byte of the consumer event encoding ([`crate::publish::event`]).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamState {
    /// Never seen (or reset by a new epoch): nothing establishes that local state matches
    /// the publisher.
    Unseen = 0,
    /// Everything up to the latest known sequence was delivered.
    Synced = 1,
    /// A gap was seen; frames after it are buffered.
    DirtySyncPending = 2,
    /// Backfill is arriving but has not closed every gap.
    Recovering = 3,
    /// Frames were lost in a way backfill cannot repair; only a resync clears it.
    ResetRequired = 4,
    /// The stream ended (its session's end with nothing missing).
    Closed = 5,
}

impl StreamState {
    /// Every state, in discriminant order.
    pub const ALL: [Self; 6] = [
        Self::Unseen,
        Self::Synced,
        Self::DirtySyncPending,
        Self::Recovering,
        Self::ResetRequired,
        Self::Closed,
    ];

    /// The state whose discriminant is `value`, if any.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::Unseen),
            1 => Some(Self::Synced),
            2 => Some(Self::DirtySyncPending),
            3 => Some(Self::Recovering),
            4 => Some(Self::ResetRequired),
            5 => Some(Self::Closed),
            _ => None,
        }
    }

    /// A short lowercase name for logs, metrics and consumers.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unseen => "unseen",
            Self::Synced => "synced",
            Self::DirtySyncPending => "dirty_sync_pending",
            Self::Recovering => "recovering",
            Self::ResetRequired => "reset_required",
            Self::Closed => "closed",
        }
    }
}

impl std::fmt::Display for StreamState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A frame offered to the detector: the sequences it covers and its payload (or a handle
/// to it: the detector never looks inside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<P> {
    /// First sequence covered.
    pub first: u64,
    /// Last sequence covered (inclusive); equal to `first` for point sequencing.
    pub last: u64,
    /// The last sequence of the frame before this one, where the venue says so.
    pub prev: Option<u64>,
    /// The payload, carried through untouched.
    pub payload: P,
}

impl<P> Frame<P> {
    /// A frame with one sequence number.
    pub const fn point(seq: u64, payload: P) -> Self {
        Self {
            first: seq,
            last: seq,
            prev: None,
            payload,
        }
    }

    /// A frame covering `first..=last`.
    pub const fn range(first: u64, last: u64, payload: P) -> Self {
        Self {
            first,
            last,
            prev: None,
            payload,
        }
    }

    /// A frame covering `first..=last` whose predecessor ended at `prev`.
    pub const fn linked(first: u64, last: u64, prev: u64, payload: P) -> Self {
        Self {
            first,
            last,
            prev: Some(prev),
            payload,
        }
    }
}

/// A frame released for delivery, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered<P> {
    /// First sequence the frame covers.
    pub first: u64,
    /// Last sequence it covers.
    pub last: u64,
    /// The first sequence not delivered before: `first` unless the frame partly overlaps
    /// what was already delivered, in which case only `fresh_from..=last` is new.
    pub fresh_from: u64,
    /// The payload.
    pub payload: P,
}

/// How the detector classified one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Continuous: delivered, with any buffered successors it unblocked.
    Processed,
    /// Straddled the expected sequence: delivered; only the part from `fresh_from` is new.
    PartialOverlap,
    /// Ahead of a gap: held in the reorder ring.
    Buffered,
    /// Already delivered or already buffered.
    Duplicate,
    /// From an older epoch.
    Stale,
    /// Beyond the reorder window or the buffer cap: dropped; the stream is now
    /// [`StreamState::ResetRequired`].
    DroppedBufferFull,
    /// Beyond the reorder window or the buffer cap, on a stream with [`Overflow::Drop`]:
    /// dropped, and missing until it is asked for again; the stream stays unsynced.
    DroppedBeyondWindow,
    /// Dropped because the stream is latched in [`StreamState::ResetRequired`].
    DroppedResetRequired,
    /// A backward jump of at least the reset threshold: refused, and the stream latched.
    ResetSuspected,
    /// The stream waits for [`Detector::resynchronize`].
    AwaitingResync,
    /// The frame's numbers contradict themselves.
    Invalid,
    /// The stream id was not issued by this detector.
    UnknownStream,
}

/// The result of one ingest, backfill or heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The classification.
    pub disposition: Disposition,
    /// How many frames were pushed to the output vector.
    pub delivered: u32,
    /// True when this input opened a newer epoch and reset the stream first.
    pub epoch_reset: bool,
    /// The hole this input newly revealed, if any (it may since have been partly filled).
    pub new_gap: Option<SeqRange>,
}

impl Outcome {
    const fn with(disposition: Disposition, delivered: u32) -> Self {
        Self {
            disposition,
            delivered,
            epoch_reset: false,
            new_gap: None,
        }
    }

    const fn of(disposition: Disposition) -> Self {
        Self::with(disposition, 0)
    }
}

/// The result of a backfill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconciliation {
    /// How the retransmitted frame was classified.
    pub outcome: Outcome,
    /// True when nothing is missing any more: the stream is [`StreamState::Synced`].
    pub is_synced: bool,
    /// The stream's state after the backfill.
    pub state: StreamState,
}

/// Why a backfill was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BackfillError {
    /// The stream lost frames ahead of its gap (buffer overflow or suspected restart):
    /// filling the gap cannot produce a correct state. Only a resync clears it.
    #[error("stream {0} requires a resync; backfill cannot repair it")]
    ResetRequired(u32),
    /// The stream id was not issued by this detector.
    #[error("unknown stream {0}")]
    UnknownStream(u32),
}

/// Per-stream counters and gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamStats {
    /// Frames delivered.
    pub delivered: u64,
    /// Holes revealed (each new missing range counts once).
    pub gaps: u64,
    /// Sequences missing now (not delivered, not buffered, known to exist).
    pub missing: u64,
    /// Frames buffered now.
    pub buffered: usize,
    /// Most frames ever buffered at once.
    pub buffered_hwm: usize,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Frames from an older epoch dropped.
    pub stale: u64,
    /// Resets by a newer epoch.
    pub resets: u64,
    /// Suspected restarts (backward jumps at or over the threshold).
    pub reset_suspected: u64,
    /// Frames dropped because the ring was full or they lay beyond the window.
    pub overflows: u64,
    /// Resyncs from a snapshot.
    pub resyncs: u64,
    /// Retransmitted frames accepted by backfill.
    pub recovered: u64,
    /// Frames whose numbers contradicted themselves.
    pub invalid: u64,
    /// Frames dropped while latched in `ResetRequired`.
    pub dropped_reset_required: u64,
}

/// Many independent streams, each with its own state, expected sequence and reorder ring.
///
/// Not thread-safe by design: one thread owns it (the rx thread, or replay). See the
/// [module documentation](self) for the call order and the meaning of each disposition.
pub struct Detector<P> {
    streams: Vec<Stream<P>>,
}

impl<P> Default for Detector<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P> Detector<P> {
    /// An empty detector.
    pub const fn new() -> Self {
        Self {
            streams: Vec::new(),
        }
    }

    /// Registers a stream and allocates its ring. Call at start-up, not on the hot path.
    pub fn add_stream(&mut self, config: StreamConfig) -> StreamId {
        let id = StreamId(u32::try_from(self.streams.len()).unwrap_or(u32::MAX));
        self.streams.push(Stream::new(config));
        id
    }

    /// Number of registered streams.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Offers a live frame of `epoch`. Deliverable frames are pushed onto `out` in order
    /// (this one plus any buffered successors it unblocked); `out` is never cleared, so a
    /// caller that reuses it allocates nothing in steady state.
    #[inline(always)]
    pub fn ingest(
        &mut self,
        stream: StreamId,
        epoch: u64,
        frame: Frame<P>,
        out: &mut Vec<Delivered<P>>,
    ) -> Outcome {
        match self.streams.get_mut(stream.index()) {
            Some(s) => s.ingest(epoch, frame, out),
            None => Outcome::of(Disposition::UnknownStream),
        }
    }

    /// Takes the live point frames `first..first + count` of `epoch` in one step when
    /// they are exactly what the stream delivers next (it is point-sequenced, synced and
    /// in `epoch`, and `first` is the expected sequence): they count as delivered, in
    /// order, and the caller hands them on itself; nothing is pushed onto any output.
    /// Returns false, changing nothing, in every other case: the caller then offers the
    /// frames one by one with [`Detector::ingest`].
    ///
    /// ```
    /// use gapless::sequencer::{Detector, Frame, StreamConfig};
    ///
    /// let mut d = Detector::<()>::new();
    /// let s = d.add_stream(StreamConfig::point(64));
    /// let mut out = Vec::new();
    /// d.ingest(s, 0, Frame::point(1, ()), &mut out);
    /// assert!(d.ingest_run(s, 0, 2, 40)); // 2..=41 delivered at once
    /// assert_eq!(d.expected(s), Some(42));
    /// assert!(!d.ingest_run(s, 0, 50, 10)); // a gap: refused, nothing changed
    /// assert_eq!(d.expected(s), Some(42));
    /// ```
    #[inline]
    pub fn ingest_run(&mut self, stream: StreamId, epoch: u64, first: u64, count: u64) -> bool {
        self.streams
            .get_mut(stream.index())
            .is_some_and(|s| s.ingest_run(epoch, first, count))
    }

    /// Offers a retransmitted frame. Reports whether the stream is synced again; the
    /// ranges still missing are in [`Detector::missing`]. Refused on a stream latched in
    /// [`StreamState::ResetRequired`].
    pub fn backfill(
        &mut self,
        stream: StreamId,
        epoch: u64,
        frame: Frame<P>,
        out: &mut Vec<Delivered<P>>,
    ) -> Result<Reconciliation, BackfillError> {
        let s = self
            .streams
            .get_mut(stream.index())
            .ok_or(BackfillError::UnknownStream(stream.0))?;
        if s.state() == StreamState::ResetRequired {
            return Err(BackfillError::ResetRequired(stream.0));
        }
        let outcome = s.backfill(epoch, frame, out);
        let state = s.state();
        Ok(Reconciliation {
            outcome,
            is_synced: state == StreamState::Synced,
            state,
        })
    }

    /// The publisher says its next sequence is `next`. Reveals loss at the tail that no
    /// later frame would expose; [`Outcome::new_gap`] names it.
    pub fn heartbeat(&mut self, stream: StreamId, epoch: u64, next: u64) -> Outcome {
        match self.streams.get_mut(stream.index()) {
            Some(s) => s.heartbeat(epoch, next),
            None => Outcome::of(Disposition::UnknownStream),
        }
    }

    /// Seeds the stream from a snapshot: everything below `next` is covered, the state is
    /// cleared (including `ResetRequired`), and buffered frames at or after `next` are
    /// delivered when continuous. Returns how many frames were pushed onto `out`.
    pub fn resynchronize(
        &mut self,
        stream: StreamId,
        next: u64,
        out: &mut Vec<Delivered<P>>,
    ) -> usize {
        self.streams
            .get_mut(stream.index())
            .map_or(0, |s| s.resynchronize(None, next, out))
    }

    /// Like [`Detector::resynchronize`], for a snapshot of `epoch`: a different epoch resets
    /// the stream first.
    pub fn resynchronize_epoch(
        &mut self,
        stream: StreamId,
        epoch: u64,
        next: u64,
        out: &mut Vec<Delivered<P>>,
    ) -> usize {
        self.streams
            .get_mut(stream.index())
            .map_or(0, |s| s.resynchronize(Some(epoch), next, out))
    }

    /// Prepares for a resync that will take a while (a snapshot being fetched): drops what
    /// is buffered and what was known to exist beyond it (it may be a hostile sender's
    /// claim), latches [`StreamState::ResetRequired`], and from the next frame on
    /// *keeps* live frames (in a window based at the first of them) instead of dropping
    /// them, delivering nothing until [`Detector::resynchronize`], which then delivers the
    /// kept frames that follow the snapshot. A stream never seen is left alone.
    pub fn begin_resync(&mut self, stream: StreamId) {
        if let Some(s) = self.streams.get_mut(stream.index()) {
            s.begin_resync();
        }
    }

    /// True when a frame of `epoch` starting at `first` would be delivered at once (the
    /// stream is synced and `first` is the expected sequence): a caller may then hand
    /// over a payload that does not outlive the call.
    #[inline]
    pub fn is_next(&self, stream: StreamId, epoch: u64, first: u64) -> bool {
        self.streams
            .get(stream.index())
            .is_some_and(|s| s.is_next(epoch, first))
    }

    /// True when every point frame `first..first + count` of `epoch` is already delivered
    /// or buffered, so a copy of them would change nothing: the test arbitration of
    /// redundant lines makes before it stores a losing copy.
    #[inline]
    pub fn holds(&self, stream: StreamId, epoch: u64, first: u64, count: u64) -> bool {
        self.streams
            .get(stream.index())
            .is_some_and(|s| s.holds(epoch, first, count))
    }

    /// Hands `f` the payload of every frame that left the stream's ring without being
    /// delivered since the last call: covered by a resync or a delivered range, or dropped
    /// by a new epoch or [`Detector::begin_resync`]. Frames refused by `ingest` are not
    /// here (their disposition says so). A caller whose payloads hold resources (a buffer
    /// slot) calls this after each operation; up to one ring's worth is kept.
    pub fn take_discarded(&mut self, stream: StreamId, f: impl FnMut(P)) {
        if let Some(s) = self.streams.get_mut(stream.index()) {
            s.take_discarded(f);
        }
    }

    /// How far the sequences known to exist reach beyond the next expected one: an upper
    /// bound of what is missing (buffered frames included), in O(1).
    pub fn missing_span(&self, stream: StreamId) -> u64 {
        self.streams
            .get(stream.index())
            .map_or(0, Stream::missing_span)
    }

    /// Frames buffered now in the stream's ring.
    pub fn buffered(&self, stream: StreamId) -> usize {
        self.streams.get(stream.index()).map_or(0, Stream::buffered)
    }

    /// The stream's state; [`StreamState::Unseen`] for an unknown id.
    pub fn state(&self, stream: StreamId) -> StreamState {
        self.streams
            .get(stream.index())
            .map_or(StreamState::Unseen, Stream::state)
    }

    /// True only while the stream is [`StreamState::Synced`].
    pub fn is_trading_authorized(&self, stream: StreamId) -> bool {
        self.state(stream) == StreamState::Synced
    }

    /// The next sequence the stream will deliver, once it has a baseline.
    pub fn expected(&self, stream: StreamId) -> Option<u64> {
        self.streams.get(stream.index()).and_then(Stream::expected)
    }

    /// The stream's current epoch, once known.
    pub fn epoch(&self, stream: StreamId) -> Option<u64> {
        self.streams.get(stream.index()).and_then(Stream::epoch)
    }

    /// The missing ranges, in order, excluding what is buffered. Allocates nothing.
    pub fn missing(&self, stream: StreamId) -> MissingRanges<'_, P> {
        self.streams
            .get(stream.index())
            .map_or_else(MissingRanges::empty, Stream::missing)
    }

    /// The stream's counters and gauges.
    pub fn stats(&self, stream: StreamId) -> StreamStats {
        self.streams
            .get(stream.index())
            .map(Stream::stats)
            .unwrap_or_default()
    }
}
