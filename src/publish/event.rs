//! The events a consumer receives, and their binary encoding.
//!
//! [`Event`] is a borrowed view: a payload points into the queue (or the
//! socket buffer) it was read from, so reading an event copies nothing.
//!
//! # Encoding
//!
//! An event is encoded as a 1-byte tag, the stream id, the fixed fields of
//! its kind, a payload length and the payload. All integers are
//! little-endian. Every kind has the payload length field, as the last field
//! of its header; it must be 0 for kinds that carry no payload. The header
//! length therefore depends on the tag alone.
//!
//! | tag | event | fields (offset: name, type) | header length |
//! | --- | --- | --- | --- |
//! | 1 | [`Event::Message`] | 1: stream u16, 3: flags u8, 4: seq u64, 12: recv_ns u64, 20: payload length u32 | 24 |
//! | 2 | [`Event::Range`] | 1: stream u16, 3: first u64, 11: last u64, 19: recv_ns u64, 27: payload length u32 | 31 |
//! | 3 | [`Event::Gap`] | 1: stream u16, 3: from u64, 11: to u64, 19: payload length u32 (0) | 23 |
//! | 4 | [`Event::State`] | 1: stream u16, 3: state u8, 4: payload length u32 (0) | 8 |
//! | 5 | [`Event::SnapshotBegin`] | 1: stream u16, 3: payload length u32 (0) | 7 |
//! | 6 | [`Event::SnapshotEnd`] | 1: stream u16, 3: next u64, 11: payload length u32 (0) | 15 |
//! | 7 | [`Event::Overrun`] | 1: stream u16, 3: from u64, 11: to u64, 19: events u64, 27: payload length u32 (0) | 31 |
//! | 8 | [`Event::Heartbeat`] | 1: stream u16, 3: next u64, 11: payload length u32 (0) | 15 |
//! | 9 | [`Event::Epoch`] | 1: stream u16, 3: payload length u32 (the label's, at most 20) | 7 |
//!
//! The payload bytes follow the header. Bit 0 of the message flags is
//! `snapshot`; the other bits must be 0. The state byte is a
//! [`StreamState`] discriminant (0 to 5). An epoch's payload is its label, UTF-8 text.
//! Tag 0 and tags above 9 are
//! invalid, so zeroed memory never decodes.
//!
//! [`Event::decode`] checks the tag, the flags, the state byte, that a kind
//! without payload declares none and that the input holds the whole event.
//! It never panics, whatever the input; it does not check that ranges are
//! ordered (`first <= last`), since those are the producer's values.
//!
//! The queue (and the unix-socket wire format) frames each encoded event as
//! a record: a u32 little-endian length of the encoded event, then the
//! encoded event.
//!
//! ```
//! use gapless::publish::event::Event;
//!
//! let event = Event::Message { stream: 3, seq: 42, recv_ns: 7, snapshot: false, payload: b"hi" };
//! let mut buf = [0u8; 64];
//! let len = event.encode_into(&mut buf)?;
//! assert_eq!(len, event.encoded_len());
//! assert_eq!(Event::decode(&buf[..len])?, (event, len));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ops::RangeInclusive;

pub use crate::publish::codec::{DecodeError, EncodeError};

/// Longest header of any kind ([`Event::Range`] and [`Event::Overrun`]).
pub const MAX_HEADER_LEN: usize = 31;
/// Encoded length of an [`Event::Overrun`] (it never carries a payload).
pub const OVERRUN_LEN: usize = 31;

/// The consumers' vocabulary of stream states is the sequencer's own.
pub use crate::sequencer::StreamState;

/// One event for a consumer, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A point-sequenced message.
    Message {
        /// Stream the message belongs to.
        stream: u16,
        /// Its sequence number.
        seq: u64,
        /// Receive time, nanoseconds since the Unix epoch.
        recv_ns: u64,
        /// True for a message that is part of a snapshot.
        snapshot: bool,
        /// The message bytes.
        payload: &'a [u8],
    },
    /// A range-sequenced frame covering `first..=last` (for example a
    /// Binance depth event's JSON bytes).
    Range {
        /// Stream the frame belongs to.
        stream: u16,
        /// First sequence covered.
        first: u64,
        /// Last sequence covered (inclusive).
        last: u64,
        /// Receive time, nanoseconds since the Unix epoch.
        recv_ns: u64,
        /// The frame bytes.
        payload: &'a [u8],
    },
    /// Sequences `from..=to` are missing upstream and were not recovered.
    Gap {
        /// Stream with the gap.
        stream: u16,
        /// First missing sequence.
        from: u64,
        /// Last missing sequence (inclusive).
        to: u64,
    },
    /// The stream changed state.
    State {
        /// Stream that changed state.
        stream: u16,
        /// Its new state.
        state: StreamState,
    },
    /// Snapshot messages for the stream follow.
    SnapshotBegin {
        /// Stream being snapshotted.
        stream: u16,
    },
    /// The snapshot is complete; live messages resume at `next`.
    SnapshotEnd {
        /// Stream that was snapshotted.
        stream: u16,
        /// First sequence after the snapshot.
        next: u64,
    },
    /// This consumer fell behind and lost events on the stream.
    ///
    /// `from..=to` spans the sequences of the live messages and range frames
    /// lost; when only events without a sequence were lost (states, snapshot
    /// messages, which carry none of the feed's), `from` is `u64::MAX` and
    /// `to` is 0. `events` counts lost events of any kind. One marker covers
    /// one unbroken loss on its stream: if that loss spans a session change
    /// (the lost state event says so), the range spans both sessions'
    /// numbers.
    Overrun {
        /// Stream that lost events.
        stream: u16,
        /// Lowest sequence lost.
        from: u64,
        /// Highest sequence lost (inclusive).
        to: u64,
        /// Number of events of any kind lost.
        events: u64,
    },
    /// The stream is alive; the next sequence expected is `next`.
    Heartbeat {
        /// Stream the heartbeat is for.
        stream: u16,
        /// Next sequence expected.
        next: u64,
    },
    /// The feed's numbering epoch of the stream from here on, named as the venue names it
    /// (a MoldUDP64 session, an IEX-TP session id). It follows the `unseen` state of a
    /// session change, before the new session's first message, so `(label, seq)` names a
    /// message the same way on every host that reads the feed. Feeds whose numbering never
    /// restarts (Binance) send none.
    Epoch {
        /// Stream whose epoch this is.
        stream: u16,
        /// The venue's name of the epoch, UTF-8, at most [`MAX_EPOCH_LABEL`] bytes.
        label: &'a [u8],
    },
}

/// Longest label of an [`Event::Epoch`].
pub const MAX_EPOCH_LABEL: usize = 20;

impl<'a> Event<'a> {
    /// The stream the event is about.
    pub const fn stream(&self) -> u16 {
        match *self {
            Self::Message { stream, .. }
            | Self::Range { stream, .. }
            | Self::Gap { stream, .. }
            | Self::State { stream, .. }
            | Self::SnapshotBegin { stream }
            | Self::SnapshotEnd { stream, .. }
            | Self::Overrun { stream, .. }
            | Self::Heartbeat { stream, .. }
            | Self::Epoch { stream, .. } => stream,
        }
    }

    /// The payload: the message or frame bytes, an epoch's label, empty for other kinds.
    pub const fn payload(&self) -> &'a [u8] {
        match *self {
            Self::Message { payload, .. }
            | Self::Range { payload, .. }
            | Self::Epoch { label: payload, .. } => payload,
            _ => &[],
        }
    }

    /// The sequences a message or range frame carries; `None` for other
    /// kinds.
    pub const fn sequences(&self) -> Option<RangeInclusive<u64>> {
        match *self {
            Self::Message { seq, .. } => Some(seq..=seq),
            Self::Range { first, last, .. } => Some(first..=last),
            _ => None,
        }
    }

    /// Length of the encoded header: everything but the payload.
    pub const fn header_len(&self) -> usize {
        match self {
            Self::Message { .. } => 24,
            Self::Range { .. } | Self::Overrun { .. } => 31,
            Self::Gap { .. } => 23,
            Self::State { .. } => 8,
            Self::SnapshotBegin { .. } | Self::Epoch { .. } => 7,
            Self::SnapshotEnd { .. } | Self::Heartbeat { .. } => 15,
        }
    }

    /// Length of the encoded event.
    pub const fn encoded_len(&self) -> usize {
        self.header_len() + self.payload().len()
    }
}
