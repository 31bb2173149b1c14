//! IEX Transport Protocol (IEX-TP) version 1 segments.
//!
//! All numbers are little-endian. A segment is a 40-byte header
//!
//! | offset | length | field |
//! | --- | --- | --- |
//! | 0 | 1 | version (1) |
//! | 1 | 1 | reserved |
//! | 2 | 2 | message protocol id |
//! | 4 | 4 | channel id |
//! | 8 | 4 | session id |
//! | 12 | 2 | payload length (bytes after the header) |
//! | 14 | 2 | message count |
//! | 16 | 8 | stream offset (of the payload's first byte in the channel's byte stream) |
//! | 24 | 8 | sequence number of the first message |
//! | 32 | 8 | send time, nanoseconds since the Unix epoch |
//!
//! followed by `count` message blocks, each a 2-byte length and that many
//! bytes, exactly filling the payload. A count of 0 is a heartbeat: it has
//! no payload and its sequence number is the next expected one.
//!
//! ```
//! use gapless::protocol::iex_tp::{Header, Packet, PacketWriter};
//!
//! let header = Header { channel_id: 1, session_id: 7, sequence: 100, ..Header::default() };
//! let mut buf = [0u8; 1500];
//! let mut writer = PacketWriter::new(&mut buf, header)?;
//! writer.push(b"first")?;
//! writer.push(b"second")?;
//! let len = writer.finish();
//!
//! let packet = Packet::decode(&buf[..len])?;
//! assert_eq!(packet.session_id(), 7);
//! assert_eq!(packet.payload_len(), 15);
//! assert_eq!(packet.next_sequence(), 102);
//! let messages: Vec<(u64, &[u8])> = packet.sequenced_messages().collect();
//! assert_eq!(messages, [(100, &b"first"[..]), (101, &b"second"[..])]);
//! # Ok::<(), gapless::protocol::ProtocolError>(())
//! ```

use crate::protocol::blocks::{self, BlockError, BlockLengths};
use crate::protocol::{EncodeError, ensure_capacity, read_array, write_at};

pub use crate::protocol::blocks::{Messages, SequencedMessages};

/// Length of a segment header.
pub const HEADER_LEN: usize = 40;
/// The only supported protocol version.
pub const VERSION: u8 = 1;
/// Largest payload (bytes after the header) a segment can carry.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize;
/// Length of a message block's length prefix.
pub const BLOCK_HEADER_LEN: usize = 2;
/// Largest message that fits in a segment.
pub const MAX_MESSAGE_LEN: usize = MAX_PAYLOAD_LEN - BLOCK_HEADER_LEN;

const PAYLOAD_LEN_AT: usize = 12;
const COUNT_AT: usize = 14;
const STREAM_OFFSET_AT: usize = 16;
const SEQUENCE_AT: usize = 24;

/// The header fields a sender chooses; payload length and message count
/// follow from the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Identifies the protocol of the messages (for example TOPS or DEEP).
    pub message_protocol_id: u16,
    /// Multicast channel.
    pub channel_id: u32,
    /// Session; a new session restarts sequence numbers.
    pub session_id: u32,
    /// Offset of the payload's first byte in the channel's byte stream.
    pub stream_offset: u64,
    /// Sequence number of the first message, or the next expected one for
    /// a heartbeat.
    pub sequence: u64,
    /// Send time, nanoseconds since the Unix epoch.
    pub send_time: i64,
    /// The reserved byte, kept as received (senders write 0).
    pub reserved: u8,
}

impl Header {
    fn to_bytes(self, payload_len: u16, count: u16) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let parts: [&[u8]; 10] = [
            &[VERSION],
            &[self.reserved],
            &self.message_protocol_id.to_le_bytes(),
            &self.channel_id.to_le_bytes(),
            &self.session_id.to_le_bytes(),
            &payload_len.to_le_bytes(),
            &count.to_le_bytes(),
            &self.stream_offset.to_le_bytes(),
            &self.sequence.to_le_bytes(),
            &self.send_time.to_le_bytes(),
        ];
        for (slot, &b) in out.iter_mut().zip(parts.iter().flat_map(|p| p.iter())) {
            *slot = b;
        }
        out
    }
}

/// Why an IEX-TP segment failed to decode.
///
/// Every variant carries `offset`, the byte position in the input where the
/// problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ends (at `offset`) before the 40-byte header does.
    #[error("input ends at byte {offset}, before the 40-byte header does")]
    ShortHeader {
        /// Length of the input.
        offset: usize,
    },
    /// The version byte is not 1.
    #[error("unsupported IEX-TP version {version} at byte {offset}")]
    UnsupportedVersion {
        /// Position of the version byte.
        offset: usize,
        /// The version received.
        version: u8,
    },
    /// The payload length field differs from the bytes after the header.
    #[error(
        "payload length field at byte {offset} says {declared}, but {actual} bytes follow the header"
    )]
    PayloadLengthMismatch {
        /// Position of the payload length field.
        offset: usize,
        /// Value of the field.
        declared: u16,
        /// Bytes after the header.
        actual: usize,
    },
    /// The sequence number plus the message count does not fit in a `u64`.
    #[error("sequence {sequence} + count {count} at byte {offset} overflows u64")]
    SequenceOverflow {
        /// Position of the sequence number field.
        offset: usize,
        /// The segment's first sequence number.
        sequence: u64,
        /// The segment's message count.
        count: u16,
    },
    /// A heartbeat (count 0) has a payload.
    #[error("heartbeat carries {len} bytes of data at byte {offset}")]
    UnexpectedData {
        /// Position just after the header.
        offset: usize,
        /// Payload length.
        len: usize,
    },
    /// The payload ends before the header's count of blocks is reached.
    #[error("payload ends at byte {offset} after {found} of {expected} message blocks")]
    MissingBlocks {
        /// Length of the input.
        offset: usize,
        /// Message count from the header.
        expected: u16,
        /// Blocks found before the payload ended.
        found: u16,
    },
    /// A single byte remains where a 2-byte block length should start.
    #[error("block length at byte {offset} is cut off by the end of the payload")]
    TruncatedBlockLength {
        /// Position of the cut-off length field.
        offset: usize,
    },
    /// A block's length runs past the end of the payload.
    #[error("block at byte {offset} declares {length} bytes but only {available} remain")]
    BlockOverrun {
        /// Position of the block's length field.
        offset: usize,
        /// Declared message length.
        length: usize,
        /// Bytes left after the length field.
        available: usize,
    },
    /// Payload bytes remain after the last block.
    #[error("{count} trailing bytes at byte {offset}")]
    TrailingBytes {
        /// Position just after the last block.
        offset: usize,
        /// Number of extra bytes.
        count: usize,
    },
}

impl From<BlockError> for DecodeError {
    fn from(e: BlockError) -> Self {
        match e {
            BlockError::Missing {
                offset,
                expected,
                found,
            } => Self::MissingBlocks {
                offset,
                expected,
                found,
            },
            BlockError::TruncatedLength { offset } => Self::TruncatedBlockLength { offset },
            BlockError::Overrun {
                offset,
                length,
                available,
            } => Self::BlockOverrun {
                offset,
                length,
                available,
            },
        }
    }
}

impl DecodeError {
    /// Byte position in the input where the problem was found.
    pub const fn offset(&self) -> usize {
        match *self {
            Self::ShortHeader { offset }
            | Self::UnsupportedVersion { offset, .. }
            | Self::PayloadLengthMismatch { offset, .. }
            | Self::SequenceOverflow { offset, .. }
            | Self::UnexpectedData { offset, .. }
            | Self::MissingBlocks { offset, .. }
            | Self::TruncatedBlockLength { offset }
            | Self::BlockOverrun { offset, .. }
            | Self::TrailingBytes { offset, .. } => offset,
        }
    }
}

/// A decoded, fully validated segment borrowing its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    header: Header,
    count: u16,
    payload: &'a [u8],
    bytes: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Decodes and validates a whole segment.
    ///
    /// The input must be exactly one segment: the header's payload length
    /// must equal the bytes after the header, and `count` blocks must fill
    /// them exactly. Once this returns `Ok`, [`Packet::messages`] cannot fail.
    ///
    /// ```
    /// use gapless::protocol::iex_tp::{DecodeError, Header, Packet, encode_heartbeat};
    ///
    /// let mut buf = [0u8; 41];
    /// let len = encode_heartbeat(&mut buf, Header::default())?;
    /// assert!(Packet::decode(&buf[..len])?.is_heartbeat());
    /// assert_eq!(
    ///     Packet::decode(&buf),
    ///     Err(DecodeError::PayloadLengthMismatch { offset: 12, declared: 0, actual: 1 })
    /// );
    /// # Ok::<(), gapless::protocol::ProtocolError>(())
    /// ```
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let packet = Self::decode_header(buf)?;
        let end = blocks::walk(
            packet.payload,
            packet.count,
            HEADER_LEN,
            BlockLengths::LittleEndian,
        )?;
        if end != buf.len() {
            return Err(DecodeError::TrailingBytes {
                offset: end,
                count: buf.len().saturating_sub(end),
            });
        }
        Ok(packet)
    }

    /// Decodes four segments, with the same result as [`Packet::decode`] on each;
    /// their message blocks are walked together, so the walks' loads overlap. A
    /// segment that fails is decoded again alone, for its exact error.
    pub fn decode4(bufs: [&'a [u8]; 4]) -> [Result<Self, DecodeError>; 4] {
        blocks::decode4::<_, _, blocks::Little>(
            bufs,
            |buf| Self::decode_header(buf).map(|p| (p, p.payload, p.count)),
            Self::decode,
        )
    }

    /// Everything [`Packet::decode`] checks but the blocks.
    fn decode_header(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let short = DecodeError::ShortHeader { offset: buf.len() };
        let raw = read_array::<HEADER_LEN>(buf, 0).ok_or(short)?;
        let u16_at = |at| {
            read_array::<2>(&raw, at)
                .map(u16::from_le_bytes)
                .ok_or(short)
        };
        let u32_at = |at| {
            read_array::<4>(&raw, at)
                .map(u32::from_le_bytes)
                .ok_or(short)
        };
        let u64_at = |at| {
            read_array::<8>(&raw, at)
                .map(u64::from_le_bytes)
                .ok_or(short)
        };
        let [version, reserved] = read_array::<2>(&raw, 0).ok_or(short)?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion { offset: 0, version });
        }
        let header = Header {
            message_protocol_id: u16_at(2)?,
            channel_id: u32_at(4)?,
            session_id: u32_at(8)?,
            stream_offset: u64_at(STREAM_OFFSET_AT)?,
            sequence: u64_at(SEQUENCE_AT)?,
            send_time: read_array::<8>(&raw, 32)
                .map(i64::from_le_bytes)
                .ok_or(short)?,
            reserved,
        };
        let declared = u16_at(PAYLOAD_LEN_AT)?;
        let count = u16_at(COUNT_AT)?;
        let payload = buf.get(HEADER_LEN..).unwrap_or_default();
        if usize::from(declared) != payload.len() {
            return Err(DecodeError::PayloadLengthMismatch {
                offset: PAYLOAD_LEN_AT,
                declared,
                actual: payload.len(),
            });
        }
        if header.sequence.checked_add(u64::from(count)).is_none() {
            return Err(DecodeError::SequenceOverflow {
                offset: SEQUENCE_AT,
                sequence: header.sequence,
                count,
            });
        }
        if count == 0 && !payload.is_empty() {
            return Err(DecodeError::UnexpectedData {
                offset: HEADER_LEN,
                len: payload.len(),
            });
        }
        Ok(Self {
            header,
            count,
            payload,
            bytes: buf,
        })
    }

    /// The sender-chosen header fields.
    pub const fn header(&self) -> Header {
        self.header
    }

    /// Protocol version (always 1 for a decoded segment).
    pub const fn version(&self) -> u8 {
        VERSION
    }

    /// Message protocol id.
    pub const fn message_protocol_id(&self) -> u16 {
        self.header.message_protocol_id
    }

    /// Channel id.
    pub const fn channel_id(&self) -> u32 {
        self.header.channel_id
    }

    /// Session id.
    pub const fn session_id(&self) -> u32 {
        self.header.session_id
    }

    /// Bytes after the header.
    pub const fn payload_len(&self) -> u16 {
        // Equal to the header field, which `decode` checked.
        self.payload.len() as u16
    }

    /// Number of messages (0 for a heartbeat).
    pub const fn message_count(&self) -> u16 {
        self.count
    }

    /// Whether this is a heartbeat (no messages).
    pub const fn is_heartbeat(&self) -> bool {
        self.count == 0
    }

    /// Offset of the payload's first byte in the channel's byte stream.
    pub const fn stream_offset(&self) -> u64 {
        self.header.stream_offset
    }

    /// Stream offset just after this payload, `None` if it overflows `u64`.
    pub const fn next_stream_offset(&self) -> Option<u64> {
        self.header
            .stream_offset
            .checked_add(self.payload.len() as u64)
    }

    /// Sequence number of the first message, or the next expected one for a
    /// heartbeat.
    pub const fn sequence(&self) -> u64 {
        self.header.sequence
    }

    /// Sequence number of the message after this segment.
    pub const fn next_sequence(&self) -> u64 {
        // `decode` refused any segment for which this addition overflows.
        self.header.sequence.wrapping_add(self.count as u64)
    }

    /// Send time, nanoseconds since the Unix epoch.
    pub const fn send_time(&self) -> i64 {
        self.header.send_time
    }

    /// The message blocks (u16 little-endian length, then the message), as received.
    pub const fn blocks(&self) -> &'a [u8] {
        self.payload
    }

    /// Iterates over the messages, in order, without allocating.
    pub fn messages(&self) -> Messages<'a> {
        Messages::new(
            self.payload,
            u32::from(self.count),
            BlockLengths::LittleEndian,
        )
    }

    /// Iterates over `(sequence number, message)` pairs.
    pub fn sequenced_messages(&self) -> SequencedMessages<'a> {
        SequencedMessages::new(
            self.payload,
            self.header.sequence,
            u32::from(self.count),
            BlockLengths::LittleEndian,
        )
    }

    /// The whole segment as received.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Length of the segment in bytes.
    pub const fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// Encodes this segment into `out` and returns its length; `out` is left
    /// untouched when it is too small.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        ensure_capacity(out, self.encoded_len())?;
        let mut writer = PacketWriter::new(out, self.header)?;
        for message in self.messages() {
            writer.push(message)?;
        }
        Ok(writer.finish())
    }
}

/// Builds a segment in a caller-owned buffer, one message at a time.
///
/// [`PacketWriter::new`] writes the header; each successful
/// [`PacketWriter::push`] appends a block and updates the payload length and
/// count, so the first [`PacketWriter::packet_len`] bytes of the buffer are
/// always a valid segment (a heartbeat until the first push). A refused push
/// leaves the buffer as it was.
#[derive(Debug)]
pub struct PacketWriter<'b> {
    out: &'b mut [u8],
    header: Header,
    count: u16,
    len: usize,
}

impl<'b> PacketWriter<'b> {
    /// Writes the header (payload length and count 0) to the front of `out`.
    ///
    /// Fails, leaving `out` untouched, when it is shorter than 40 bytes.
    pub fn new(out: &'b mut [u8], header: Header) -> Result<Self, EncodeError> {
        ensure_capacity(out, HEADER_LEN)?;
        let len = write_at(out, 0, &header.to_bytes(0, 0))?;
        Ok(Self {
            out,
            header,
            count: 0,
            len,
        })
    }

    /// Appends one message and returns the segment length so far.
    ///
    /// Refuses, leaving the buffer untouched, when the payload would exceed
    /// 65535 bytes, the count would exceed 65535, the next sequence number
    /// would overflow, or the block does not fit.
    pub fn push(&mut self, message: &[u8]) -> Result<usize, EncodeError> {
        let length = u16::try_from(message.len()).map_err(|_| EncodeError::MessageTooLong {
            len: message.len(),
            max: MAX_MESSAGE_LEN,
        })?;
        let payload_len = self
            .len
            .saturating_sub(HEADER_LEN)
            .saturating_add(BLOCK_HEADER_LEN)
            .saturating_add(message.len());
        let payload_field =
            u16::try_from(payload_len).map_err(|_| EncodeError::PayloadTooLong {
                len: payload_len,
                max: MAX_PAYLOAD_LEN,
            })?;
        let count = self
            .count
            .checked_add(1)
            .ok_or(EncodeError::TooManyMessages {
                max: usize::from(u16::MAX),
            })?;
        if self.header.sequence.checked_add(u64::from(count)).is_none() {
            return Err(EncodeError::SequenceOverflow);
        }
        let end = HEADER_LEN.saturating_add(payload_len);
        ensure_capacity(self.out, end)?;
        let at = write_at(self.out, self.len, &length.to_le_bytes())?;
        let end = write_at(self.out, at, message)?;
        write_at(self.out, PAYLOAD_LEN_AT, &payload_field.to_le_bytes())?;
        write_at(self.out, COUNT_AT, &count.to_le_bytes())?;
        self.len = end;
        self.count = count;
        Ok(end)
    }

    /// Bytes of the buffer not yet used; a message of `n` bytes needs `n + 2`.
    pub fn remaining(&self) -> usize {
        self.out.len().saturating_sub(self.len)
    }

    /// Length of the segment written so far.
    pub const fn packet_len(&self) -> usize {
        self.len
    }

    /// Number of messages written so far.
    pub const fn message_count(&self) -> u16 {
        self.count
    }

    /// Sequence number of the message after the last one pushed.
    pub const fn next_sequence(&self) -> u64 {
        self.header.sequence.wrapping_add(self.count as u64)
    }

    /// Ends the segment and returns its length.
    ///
    /// A writer finished without any message has written a heartbeat.
    pub fn finish(self) -> usize {
        self.len
    }
}

/// Writes a heartbeat segment; `header.sequence` is the next expected
/// sequence number.
///
/// Returns 40; fails, leaving `out` untouched, when `out` is shorter.
pub fn encode_heartbeat(out: &mut [u8], header: Header) -> Result<usize, EncodeError> {
    ensure_capacity(out, HEADER_LEN)?;
    write_at(out, 0, &header.to_bytes(0, 0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use crate::protocol::XorShift;

    fn header() -> Header {
        Header {
            message_protocol_id: 0x8003,
            channel_id: 1,
            session_id: 0x4300_0001,
            stream_offset: 1_000,
            sequence: 77,
            send_time: 1_700_000_000_123_456_789,
            reserved: 0,
        }
    }

    fn build(header: Header, messages: &[&[u8]]) -> Vec<u8> {
        let len = 40 + messages.iter().map(|m| m.len() + 2).sum::<usize>();
        let mut buf = vec![0u8; len];
        let mut w = PacketWriter::new(&mut buf, header).unwrap();
        for m in messages {
            w.push(m).unwrap();
        }
        assert_eq!(w.finish(), len);
        buf
    }

    fn reencode(p: &Packet<'_>) -> Vec<u8> {
        let mut out = vec![0u8; p.encoded_len()];
        assert_eq!(p.encode(&mut out), Ok(out.len()));
        out
    }

    /// A header with arbitrary payload length and count, and `tail` after it.
    fn raw(payload_len: u16, count: u16, sequence: u64, tail: &[u8]) -> Vec<u8> {
        let h = Header {
            sequence,
            ..header()
        };
        let mut v = h.to_bytes(payload_len, count).to_vec();
        v.extend_from_slice(tail);
        v
    }

    #[test]
    fn wire_layout() {
        let bytes = build(header(), &[b"ab"]);
        assert_eq!(bytes[0], 1);
        assert_eq!(bytes[1], 0);
        assert_eq!(&bytes[2..4], &[0x03, 0x80]);
        assert_eq!(&bytes[4..8], &[1, 0, 0, 0]);
        assert_eq!(&bytes[8..12], &[1, 0, 0, 0x43]);
        assert_eq!(&bytes[12..14], &[4, 0]);
        assert_eq!(&bytes[14..16], &[1, 0]);
        assert_eq!(&bytes[16..24], &1_000u64.to_le_bytes());
        assert_eq!(&bytes[24..32], &77u64.to_le_bytes());
        assert_eq!(&bytes[32..40], &1_700_000_000_123_456_789i64.to_le_bytes());
        assert_eq!(&bytes[40..], &[2, 0, b'a', b'b']);
    }

    #[test]
    fn decode_round_trip() {
        let bytes = build(header(), &[b"one", b"", b"three"]);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.header(), header());
        assert_eq!(p.version(), 1);
        assert_eq!(p.message_protocol_id(), 0x8003);
        assert_eq!(p.channel_id(), 1);
        assert_eq!(p.session_id(), 0x4300_0001);
        assert_eq!(p.payload_len(), 14);
        assert_eq!(p.message_count(), 3);
        assert!(!p.is_heartbeat());
        assert_eq!(p.stream_offset(), 1_000);
        assert_eq!(p.next_stream_offset(), Some(1_014));
        assert_eq!(p.sequence(), 77);
        assert_eq!(p.next_sequence(), 80);
        assert_eq!(p.send_time(), 1_700_000_000_123_456_789);
        assert_eq!(p.as_bytes(), &bytes[..]);
        assert_eq!(p.messages().len(), 3);
        assert_eq!(
            p.messages().collect::<Vec<_>>(),
            [&b"one"[..], b"", b"three"]
        );
        assert_eq!(
            p.sequenced_messages().collect::<Vec<_>>(),
            [(77, &b"one"[..]), (78, b""), (79, b"three")]
        );
        assert_eq!(reencode(&p), bytes);
    }

    #[test]
    fn heartbeat() {
        let mut buf = [0u8; 40];
        assert_eq!(encode_heartbeat(&mut buf, header()), Ok(40));
        let p = Packet::decode(&buf).unwrap();
        assert!(p.is_heartbeat());
        assert_eq!(p.payload_len(), 0);
        assert_eq!(p.next_sequence(), 77);
        assert_eq!(p.messages().next(), None);
        assert_eq!(reencode(&p), buf);
        let w = PacketWriter::new(&mut buf, header()).unwrap();
        assert_eq!(w.finish(), 40);
        assert!(Packet::decode(&buf).unwrap().is_heartbeat());
    }

    #[test]
    fn reserved_byte_and_stream_offset_kept() {
        let h = Header {
            reserved: 0xAB,
            stream_offset: u64::MAX,
            ..header()
        };
        let bytes = build(h, &[b"x"]);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.header().reserved, 0xAB);
        assert_eq!(p.next_stream_offset(), None);
        assert_eq!(reencode(&p), bytes);
    }

    #[test]
    fn error_short_header() {
        for len in 0..40 {
            let bytes = vec![1u8; len];
            let err = Packet::decode(&bytes).unwrap_err();
            assert_eq!(err, DecodeError::ShortHeader { offset: len });
            assert_eq!(err.offset(), len);
        }
    }

    #[test]
    fn error_unsupported_version() {
        let mut bytes = build(header(), &[b"x"]);
        bytes[0] = 2;
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnsupportedVersion {
                offset: 0,
                version: 2
            }
        );
        assert_eq!(err.offset(), 0);
    }

    #[test]
    fn error_payload_length_mismatch() {
        let bytes = raw(5, 1, 1, &[1, 0, b'a']);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::PayloadLengthMismatch {
                offset: 12,
                declared: 5,
                actual: 3
            }
        );
        assert_eq!(err.offset(), 12);
        let mut bytes = build(header(), &[b"abc"]);
        bytes.push(0);
        assert!(matches!(
            Packet::decode(&bytes),
            Err(DecodeError::PayloadLengthMismatch {
                declared: 5,
                actual: 6,
                ..
            })
        ));
    }

    #[test]
    fn error_sequence_overflow() {
        let bytes = raw(2, 1, u64::MAX, &[0, 0]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::SequenceOverflow {
                offset: 24,
                sequence: u64::MAX,
                count: 1
            }
        );
        assert_eq!(err.offset(), 24);
        let bytes = raw(0, 0, u64::MAX, &[]);
        assert_eq!(Packet::decode(&bytes).unwrap().next_sequence(), u64::MAX);
    }

    #[test]
    fn error_unexpected_data() {
        let bytes = raw(2, 0, 1, &[0, 0]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(err, DecodeError::UnexpectedData { offset: 40, len: 2 });
        assert_eq!(err.offset(), 40);
    }

    #[test]
    fn error_missing_blocks() {
        let bytes = raw(3, 2, 1, &[1, 0, b'a']);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::MissingBlocks {
                offset: 43,
                expected: 2,
                found: 1
            }
        );
        assert_eq!(err.offset(), 43);
    }

    #[test]
    fn error_truncated_block_length() {
        let bytes = raw(3, 2, 1, &[0, 0, 9]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(err, DecodeError::TruncatedBlockLength { offset: 42 });
        assert_eq!(err.offset(), 42);
    }

    #[test]
    fn error_block_overrun() {
        let bytes = raw(4, 1, 1, &[3, 0, b'a', b'b']);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::BlockOverrun {
                offset: 40,
                length: 3,
                available: 2
            }
        );
        assert_eq!(err.offset(), 40);
    }

    #[test]
    fn error_trailing_bytes() {
        let bytes = raw(5, 1, 1, &[1, 0, b'a', 0xEE, 0xEE]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TrailingBytes {
                offset: 43,
                count: 2
            }
        );
        assert_eq!(err.offset(), 43);
    }

    #[test]
    fn error_display() {
        let err = DecodeError::UnsupportedVersion {
            offset: 0,
            version: 9,
        };
        assert_eq!(err.to_string(), "unsupported IEX-TP version 9 at byte 0");
    }

    #[test]
    fn empty_messages() {
        let bytes = build(header(), &[b"", b"", b"", b""]);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.messages().filter(|m| m.is_empty()).count(), 4);
        assert_eq!(reencode(&p), bytes);
    }

    #[test]
    fn max_size_segment() {
        let big = vec![0x42u8; MAX_MESSAGE_LEN];
        let bytes = build(header(), &[&big]);
        assert_eq!(bytes.len(), HEADER_LEN + MAX_PAYLOAD_LEN);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(usize::from(p.payload_len()), MAX_PAYLOAD_LEN);
        assert_eq!(p.messages().next().unwrap(), &big[..]);
        assert_eq!(reencode(&p), bytes);

        // The payload is full: even an empty message is refused.
        let mut buf = vec![0u8; bytes.len() + 16];
        let mut w = PacketWriter::new(&mut buf, header()).unwrap();
        w.push(&big).unwrap();
        let before = w.out.to_vec();
        assert_eq!(
            w.push(b""),
            Err(EncodeError::PayloadTooLong {
                len: MAX_PAYLOAD_LEN + 2,
                max: MAX_PAYLOAD_LEN
            })
        );
        assert_eq!(w.out.to_vec(), before);
        assert_eq!(w.message_count(), 1);

        let too_big = vec![0u8; u16::MAX as usize + 1];
        let mut w = PacketWriter::new(&mut buf, header()).unwrap();
        assert_eq!(
            w.push(&too_big),
            Err(EncodeError::MessageTooLong {
                len: u16::MAX as usize + 1,
                max: MAX_MESSAGE_LEN
            })
        );
        assert!(matches!(
            w.push(&too_big[..MAX_MESSAGE_LEN + 1]),
            Err(EncodeError::PayloadTooLong { .. })
        ));
    }

    #[test]
    fn max_message_count() {
        // 32767 empty messages fill 65534 payload bytes.
        let n = MAX_PAYLOAD_LEN / 2;
        let mut buf = vec![0u8; HEADER_LEN + MAX_PAYLOAD_LEN];
        let mut w = PacketWriter::new(&mut buf, header()).unwrap();
        for _ in 0..n {
            w.push(b"").unwrap();
        }
        assert!(w.push(b"").is_err());
        assert_eq!(w.next_sequence(), 77 + n as u64);
        let len = w.finish();
        let p = Packet::decode(&buf[..len]).unwrap();
        assert_eq!(usize::from(p.message_count()), n);
        assert_eq!(p.messages().count(), n);
        assert_eq!(reencode(&p), &buf[..len]);
    }

    #[test]
    fn writer_refusals_leave_buffer() {
        let mut buf = [0x55u8; 45];
        let mut w = PacketWriter::new(&mut buf, header()).unwrap();
        assert_eq!(w.remaining(), 5);
        assert_eq!(w.push(b"abc"), Ok(45));
        assert_eq!(w.remaining(), 0);
        let before = w.out.to_vec();
        assert_eq!(
            w.push(b""),
            Err(EncodeError::BufferTooSmall {
                needed: 47,
                available: 45
            })
        );
        assert_eq!(w.out.to_vec(), before);
        assert_eq!(w.packet_len(), 45);

        let mut buf = [0u8; 64];
        let h = Header {
            sequence: u64::MAX - 1,
            ..header()
        };
        let mut w = PacketWriter::new(&mut buf, h).unwrap();
        w.push(b"a").unwrap();
        assert_eq!(w.push(b"b"), Err(EncodeError::SequenceOverflow));
    }

    #[test]
    fn encoders_refuse_small_buffers_untouched() {
        let mut buf = [0xAAu8; 39];
        assert!(PacketWriter::new(&mut buf, header()).is_err());
        assert_eq!(
            encode_heartbeat(&mut buf, header()),
            Err(EncodeError::BufferTooSmall {
                needed: 40,
                available: 39
            })
        );
        assert_eq!(buf, [0xAA; 39]);
        let bytes = build(header(), &[b"abc"]);
        let p = Packet::decode(&bytes).unwrap();
        let mut out = vec![0xAAu8; bytes.len() - 1];
        assert!(p.encode(&mut out).is_err());
        assert!(out.iter().all(|&b| b == 0xAA));
    }

    #[test]
    fn fuzz_decode_never_panics_and_reencodes() {
        let mut rng = XorShift::new(0x0123_4567_89AB_CDEF);
        let (mut ok, mut err) = (0u32, 0u32);
        for i in 0..20_000 {
            let bytes = if i % 4 == 0 {
                let len = rng.below(80);
                let mut v = rng.bytes(len);
                if let Some(b) = v.first_mut() {
                    *b = 1;
                }
                v
            } else {
                let count = rng.below(5);
                let messages: Vec<Vec<u8>> = (0..count)
                    .map(|_| {
                        let len = rng.below(6);
                        rng.bytes(len)
                    })
                    .collect();
                let refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
                let h = Header {
                    message_protocol_id: rng.next_u64() as u16,
                    channel_id: rng.next_u64() as u32,
                    session_id: rng.next_u64() as u32,
                    stream_offset: rng.next_u64(),
                    sequence: rng.next_u64().min(u64::MAX - count as u64),
                    send_time: rng.next_u64() as i64,
                    reserved: rng.next_u64() as u8,
                };
                let mut v = build(h, &refs);
                match rng.below(4) {
                    0 => {}
                    1 => {
                        let at = rng.below(v.len());
                        v[at] = rng.next_u64() as u8;
                    }
                    2 => v.truncate(rng.below(v.len() + 1)),
                    _ => v.push(rng.next_u64() as u8),
                }
                v
            };
            match Packet::decode(&bytes) {
                Ok(p) => {
                    assert_eq!(reencode(&p), bytes);
                    assert_eq!(p.messages().count(), usize::from(p.message_count()));
                    ok += 1;
                }
                Err(e) => {
                    assert!(e.offset() <= bytes.len());
                    err += 1;
                }
            }
        }
        assert!(ok > 4_000, "too few valid segments: {ok}");
        assert!(err > 4_000, "too few invalid segments: {err}");
    }
}
