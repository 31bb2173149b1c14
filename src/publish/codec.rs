//! Encoding and decoding of [`Event`]s, as laid out in the table of the
//! [`event`](super::event) module.

use thiserror::Error;

use crate::publish::event::{Event, MAX_EPOCH_LABEL, MAX_HEADER_LEN, StreamState};

const TAG_MESSAGE: u8 = 1;
const TAG_RANGE: u8 = 2;
const TAG_GAP: u8 = 3;
const TAG_STATE: u8 = 4;
const TAG_SNAPSHOT_BEGIN: u8 = 5;
const TAG_SNAPSHOT_END: u8 = 6;
const TAG_OVERRUN: u8 = 7;
const TAG_HEARTBEAT: u8 = 8;
const TAG_EPOCH: u8 = 9;

/// Message flag bit: the message is part of a snapshot.
const FLAG_SNAPSHOT: u8 = 0b1;
/// Header length of [`Event::Message`].
const MESSAGE_HEADER_LEN: usize = 24;

/// Why an event could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// The output buffer is shorter than the encoded event.
    #[error("buffer too small: {needed} bytes needed, {available} available")]
    BufferTooSmall {
        /// Encoded length of the event.
        needed: usize,
        /// Length of the buffer.
        available: usize,
    },
    /// The payload does not fit its length field (a u32; an epoch label's is
    /// [`MAX_EPOCH_LABEL`]).
    #[error("payload of {len} bytes is too long for its event")]
    PayloadTooLong {
        /// Length of the payload.
        len: usize,
    },
}

/// Why bytes are not an encoded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ends before the event does.
    #[error("truncated event: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes the event needs (as far as it could be read).
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The tag names no kind of event.
    #[error("unknown event tag {0}")]
    UnknownTag(u8),
    /// A message's flags byte has bits other than `snapshot` set.
    #[error("invalid message flags {0:#04x}")]
    InvalidFlags(u8),
    /// The state byte is no [`StreamState`].
    #[error("invalid stream state {0}")]
    InvalidState(u8),
    /// A kind without payload declares payload bytes.
    #[error("event tag {tag} carries no payload but declares {len} payload bytes")]
    UnexpectedPayload {
        /// The event's tag.
        tag: u8,
        /// The declared payload length.
        len: u32,
    },
    /// An epoch's label is longer than [`MAX_EPOCH_LABEL`] bytes.
    #[error("epoch label of {0} bytes is longer than {MAX_EPOCH_LABEL}")]
    LabelTooLong(u32),
}

impl<'a> Event<'a> {
    /// Encodes the event at the start of `out` and returns its length.
    ///
    /// # Errors
    ///
    /// [`EncodeError::BufferTooSmall`] when `out` is shorter than
    /// [`Event::encoded_len`], [`EncodeError::PayloadTooLong`] when the
    /// payload exceeds `u32::MAX` bytes or an epoch's label [`MAX_EPOCH_LABEL`]. Nothing is
    /// written then.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if let Self::Epoch { label, .. } = self
            && label.len() > MAX_EPOCH_LABEL
        {
            return Err(EncodeError::PayloadTooLong { len: label.len() });
        }
        let mut header = [0u8; MAX_HEADER_LEN];
        let header_len = self.encode_header(&mut header)?;
        let payload = self.payload();
        let needed = header_len + payload.len();
        let too_small = EncodeError::BufferTooSmall {
            needed,
            available: out.len(),
        };
        let dst = out.get_mut(..needed).ok_or(too_small)?;
        let (head, body) = dst.split_at_mut(header_len);
        head.copy_from_slice(header.get(..header_len).ok_or(too_small)?);
        body.copy_from_slice(payload);
        Ok(needed)
    }

    /// The record head of an [`Event::Message`]: the queue's u32 length prefix, then the
    /// 24-byte header [`Event::encode_header`] writes, at fixed offsets (the queue's hot
    /// path). `None` when the payload is too long for the length fields.
    #[inline]
    pub(crate) fn message_record_head(
        stream: u16,
        seq: u64,
        recv_ns: u64,
        snapshot: bool,
        payload_len: usize,
    ) -> Option<[u8; 4 + MESSAGE_HEADER_LEN]> {
        let payload = u32::try_from(payload_len).ok()?;
        let body = u32::try_from(payload_len.checked_add(MESSAGE_HEADER_LEN)?).ok()?;
        let [s0, s1] = stream.to_le_bytes();
        let flags = if snapshot { FLAG_SNAPSHOT } else { 0 };
        let mut h = [0u8; 4 + MESSAGE_HEADER_LEN];
        let (prefix, rest) = h.split_at_mut(4);
        prefix.copy_from_slice(&body.to_le_bytes());
        let (fixed, rest) = rest.split_at_mut(4);
        fixed.copy_from_slice(&[TAG_MESSAGE, s0, s1, flags]);
        let (seq_at, rest) = rest.split_at_mut(8);
        seq_at.copy_from_slice(&seq.to_le_bytes());
        let (recv_at, len_at) = rest.split_at_mut(8);
        recv_at.copy_from_slice(&recv_ns.to_le_bytes());
        len_at.copy_from_slice(&payload.to_le_bytes());
        Some(h)
    }

    /// Encodes the header (everything but the payload) into `out` and
    /// returns its length.
    #[inline]
    pub(crate) fn encode_header(
        &self,
        out: &mut [u8; MAX_HEADER_LEN],
    ) -> Result<usize, EncodeError> {
        let payload = self.payload();
        let payload_len = u32::try_from(payload.len())
            .map_err(|_| EncodeError::PayloadTooLong { len: payload.len() })?;
        let mut w = HeaderWriter { out, len: 0 };
        w.put(&[self.tag()]);
        w.put(&self.stream().to_le_bytes());
        match *self {
            Self::Message {
                seq,
                recv_ns,
                snapshot,
                ..
            } => {
                w.put(&[if snapshot { FLAG_SNAPSHOT } else { 0 }]);
                w.u64(seq);
                w.u64(recv_ns);
            }
            Self::Range {
                first,
                last,
                recv_ns,
                ..
            } => {
                w.u64(first);
                w.u64(last);
                w.u64(recv_ns);
            }
            Self::Gap { from, to, .. } => {
                w.u64(from);
                w.u64(to);
            }
            Self::State { state, .. } => w.put(&[state as u8]),
            Self::SnapshotBegin { .. } | Self::Epoch { .. } => {}
            Self::SnapshotEnd { next, .. } | Self::Heartbeat { next, .. } => w.u64(next),
            Self::Overrun {
                from, to, events, ..
            } => {
                w.u64(from);
                w.u64(to);
                w.u64(events);
            }
        }
        w.put(&payload_len.to_le_bytes());
        Ok(w.len)
    }

    /// Decodes the event at the start of `bytes`, returning it with the
    /// number of bytes it took. Bytes after the event are ignored.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] saying what is wrong; garbage never panics.
    pub fn decode(bytes: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let available = bytes.len();
        let tag = *bytes.first().ok_or(DecodeError::Truncated {
            needed: 1,
            available,
        })?;
        let header_len = header_len_of(tag).ok_or(DecodeError::UnknownTag(tag))?;
        let (header, rest) = bytes
            .split_at_checked(header_len)
            .ok_or(DecodeError::Truncated {
                needed: header_len,
                available,
            })?;
        let declared = header
            .last_chunk::<4>()
            .map_or(0, |len| u32::from_le_bytes(*len));
        let body = usize::try_from(declared).unwrap_or(usize::MAX);
        let needed = header_len.saturating_add(body);
        let payload = rest
            .get(..body)
            .ok_or(DecodeError::Truncated { needed, available })?;
        if declared != 0 && !matches!(tag, TAG_MESSAGE | TAG_RANGE | TAG_EPOCH) {
            return Err(DecodeError::UnexpectedPayload { tag, len: declared });
        }
        let mut r = Reader {
            rest: header,
            needed: header_len,
            available,
        };
        r.u8()?;
        let stream = r.u16()?;
        let event = match tag {
            TAG_MESSAGE => {
                let flags = r.u8()?;
                if flags & !FLAG_SNAPSHOT != 0 {
                    return Err(DecodeError::InvalidFlags(flags));
                }
                Self::Message {
                    stream,
                    snapshot: flags & FLAG_SNAPSHOT != 0,
                    seq: r.u64()?,
                    recv_ns: r.u64()?,
                    payload,
                }
            }
            TAG_RANGE => Self::Range {
                stream,
                first: r.u64()?,
                last: r.u64()?,
                recv_ns: r.u64()?,
                payload,
            },
            TAG_GAP => Self::Gap {
                stream,
                from: r.u64()?,
                to: r.u64()?,
            },
            TAG_STATE => {
                let value = r.u8()?;
                let state = StreamState::from_u8(value).ok_or(DecodeError::InvalidState(value))?;
                Self::State { stream, state }
            }
            TAG_SNAPSHOT_BEGIN => Self::SnapshotBegin { stream },
            TAG_SNAPSHOT_END => Self::SnapshotEnd {
                stream,
                next: r.u64()?,
            },
            TAG_OVERRUN => Self::Overrun {
                stream,
                from: r.u64()?,
                to: r.u64()?,
                events: r.u64()?,
            },
            TAG_HEARTBEAT => Self::Heartbeat {
                stream,
                next: r.u64()?,
            },
            TAG_EPOCH => {
                if payload.len() > MAX_EPOCH_LABEL {
                    return Err(DecodeError::LabelTooLong(declared));
                }
                Self::Epoch {
                    stream,
                    label: payload,
                }
            }
            _ => return Err(DecodeError::UnknownTag(tag)),
        };
        Ok((event, needed))
    }

    /// The tag that opens the encoded event.
    const fn tag(&self) -> u8 {
        match self {
            Self::Message { .. } => TAG_MESSAGE,
            Self::Range { .. } => TAG_RANGE,
            Self::Gap { .. } => TAG_GAP,
            Self::State { .. } => TAG_STATE,
            Self::SnapshotBegin { .. } => TAG_SNAPSHOT_BEGIN,
            Self::SnapshotEnd { .. } => TAG_SNAPSHOT_END,
            Self::Overrun { .. } => TAG_OVERRUN,
            Self::Heartbeat { .. } => TAG_HEARTBEAT,
            Self::Epoch { .. } => TAG_EPOCH,
        }
    }
}

/// Header length of the kind a tag names; `None` for an unknown tag.
const fn header_len_of(tag: u8) -> Option<usize> {
    match tag {
        TAG_MESSAGE => Some(24),
        TAG_RANGE | TAG_OVERRUN => Some(31),
        TAG_GAP => Some(23),
        TAG_STATE => Some(8),
        TAG_SNAPSHOT_BEGIN | TAG_EPOCH => Some(7),
        TAG_SNAPSHOT_END | TAG_HEARTBEAT => Some(15),
        _ => None,
    }
}

/// Appends fields to a header buffer; every header fits
/// [`MAX_HEADER_LEN`].
struct HeaderWriter<'b> {
    out: &'b mut [u8; MAX_HEADER_LEN],
    len: usize,
}

impl HeaderWriter<'_> {
    /// Appends `bytes`; `len` only counts bytes written, so it never
    /// exceeds [`MAX_HEADER_LEN`].
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(dst) = self.out.get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
            self.len = end;
        }
    }

    fn u64(&mut self, value: u64) {
        self.put(&value.to_le_bytes());
    }
}

/// Reads little-endian fields from a header already known to be complete;
/// still checked, so a wrong length table cannot panic.
struct Reader<'b> {
    rest: &'b [u8],
    needed: usize,
    available: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(DecodeError::Truncated {
                needed: self.needed,
                available: self.available,
            })?;
        self.rest = rest;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        self.array::<1>().map(|[b]| b)
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }
}
