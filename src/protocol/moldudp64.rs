//! MoldUDP64 1.00: downstream packets and re-request packets.
//!
//! All numbers are big-endian. A downstream packet is a 20-byte header
//!
//! | offset | length | field |
//! | --- | --- | --- |
//! | 0 | 10 | session (ASCII) |
//! | 10 | 8 | sequence number of the first message |
//! | 18 | 2 | message count |
//!
//! followed by `count` message blocks, each a 2-byte length and that many
//! bytes of message data (a length of 0 is allowed). A count of 0 is a
//! heartbeat and a count of `0xFFFF` marks the end of the session; both carry
//! the next expected sequence number and no blocks.
//!
//! A request packet asks a re-request server to retransmit `count` messages
//! starting at `sequence`; it is the 20-byte header alone.
//!
//! ```
//! use gapless::protocol::moldudp64::{Packet, PacketKind, PacketWriter, Session};
//!
//! let session: Session = "SESSION01".parse()?;
//! let mut buf = [0u8; 1500];
//! let mut writer = PacketWriter::new(&mut buf, session, 41)?;
//! writer.push(b"hello")?;
//! writer.push(b"")?;
//! let len = writer.finish();
//!
//! let packet = Packet::decode(&buf[..len])?;
//! assert_eq!(packet.session(), session);
//! assert_eq!(packet.kind(), PacketKind::Data { count: 2 });
//! assert_eq!(packet.next_sequence(), 43);
//! let messages: Vec<&[u8]> = packet.messages().collect();
//! assert_eq!(messages, [&b"hello"[..], &b""[..]]);
//! # Ok::<(), gapless::protocol::ProtocolError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::protocol::blocks::{self, BlockError, BlockLengths};
use crate::protocol::{EncodeError, ensure_capacity, read_array, write_at};

pub use crate::protocol::blocks::{Messages, SequencedMessages};

/// Length of the session field.
pub const SESSION_LEN: usize = 10;
/// Length of a downstream packet header.
pub const HEADER_LEN: usize = 20;
/// Length of a request packet.
pub const REQUEST_LEN: usize = 20;
/// Message count that marks a heartbeat.
pub const HEARTBEAT_COUNT: u16 = 0;
/// Message count that marks the end of a session.
pub const END_OF_SESSION_COUNT: u16 = 0xFFFF;
/// Largest number of messages a data packet can carry.
pub const MAX_MESSAGES: u16 = 0xFFFE;
/// Largest message data length a block can carry.
pub const MAX_MESSAGE_LEN: usize = u16::MAX as usize;
/// Length of a message block's length prefix.
pub const BLOCK_HEADER_LEN: usize = 2;

/// A 10-byte ASCII session name, as carried on the wire.
///
/// The inner array is public so any 10 bytes received can be represented;
/// [`Session::from_ascii`] and [`FromStr`] build one from text, checking it.
///
/// `Display` prints printable ASCII as is, a backslash as `\\` and any other
/// byte as `\xNN`, so a session name is always safe to log.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Session(pub [u8; SESSION_LEN]);

/// Why a session name was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The name is longer than 10 bytes.
    #[error("session name is {len} bytes, at most 10 allowed")]
    TooLong {
        /// Length of the rejected name.
        len: usize,
    },
    /// The name holds a byte outside printable ASCII (`0x20..=0x7E`).
    #[error("session name has a non-printable byte {byte:#04x} at index {index}")]
    InvalidByte {
        /// Index of the offending byte.
        index: usize,
        /// The offending byte.
        byte: u8,
    },
}

impl Session {
    /// The all-spaces session (SoupBinTCP uses it to mean "the current session").
    pub const BLANK: Self = Self([b' '; SESSION_LEN]);

    /// Builds a session name from at most 10 bytes of printable ASCII.
    ///
    /// A shorter name is padded on the right with spaces, as on the wire; a
    /// longer one, or one holding a byte outside `0x20..=0x7E`, is refused.
    ///
    /// ```
    /// use gapless::protocol::moldudp64::Session;
    ///
    /// let s = Session::from_ascii(b"ABC")?;
    /// assert_eq!(s.as_bytes(), b"ABC       ");
    /// assert!(Session::from_ascii(b"ELEVEN_CHAR").is_err());
    /// # Ok::<(), gapless::protocol::SessionError>(())
    /// ```
    pub fn from_ascii(name: &[u8]) -> Result<Self, SessionError> {
        if name.len() > SESSION_LEN {
            return Err(SessionError::TooLong { len: name.len() });
        }
        let mut bytes = [b' '; SESSION_LEN];
        for (index, (slot, &byte)) in bytes.iter_mut().zip(name).enumerate() {
            if !is_printable(byte) {
                return Err(SessionError::InvalidByte { index, byte });
            }
            *slot = byte;
        }
        Ok(Self(bytes))
    }

    /// The 10 wire bytes, padding included.
    pub const fn as_bytes(&self) -> &[u8; SESSION_LEN] {
        &self.0
    }

    /// The name without its trailing spaces.
    pub fn trimmed(&self) -> &[u8] {
        let end = self
            .0
            .iter()
            .rposition(|&b| b != b' ')
            .map_or(0, |i| i.saturating_add(1));
        self.0.get(..end).unwrap_or_default()
    }

    /// Whether the name is all spaces.
    pub fn is_blank(&self) -> bool {
        self.0.iter().all(|&b| b == b' ')
    }
}

impl FromStr for Session {
    type Err = SessionError;

    /// Same rules as [`Session::from_ascii`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_ascii(s.as_bytes())
    }
}

impl From<[u8; SESSION_LEN]> for Session {
    fn from(bytes: [u8; SESSION_LEN]) -> Self {
        Self(bytes)
    }
}

impl fmt::Display for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0 {
            if b == b'\\' {
                f.write_str("\\\\")?;
            } else if is_printable(b) {
                fmt::Write::write_char(f, char::from(b))?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Session(\"{self}\")")
    }
}

fn is_printable(b: u8) -> bool {
    (0x20..=0x7E).contains(&b)
}

/// What a downstream packet is, from its message count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Carries `count` messages (`1..=0xFFFE`).
    Data {
        /// Number of message blocks.
        count: u16,
    },
    /// Count 0: no messages; the sequence number is the next expected one.
    Heartbeat,
    /// Count `0xFFFF`: no messages; the session is over and the sequence
    /// number is the next expected one.
    EndOfSession,
}

impl PacketKind {
    /// Interprets a header's message count.
    pub const fn from_count(count: u16) -> Self {
        match count {
            HEARTBEAT_COUNT => Self::Heartbeat,
            END_OF_SESSION_COUNT => Self::EndOfSession,
            count => Self::Data { count },
        }
    }

    /// The message count field that encodes this kind.
    pub const fn count_field(self) -> u16 {
        match self {
            Self::Data { count } => count,
            Self::Heartbeat => HEARTBEAT_COUNT,
            Self::EndOfSession => END_OF_SESSION_COUNT,
        }
    }
}

/// Why a MoldUDP64 packet failed to decode.
///
/// Every variant carries `offset`, the byte position in the input where the
/// problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ends (at `offset`) before the 20-byte header does.
    #[error("input ends at byte {offset}, before the 20-byte header does")]
    ShortHeader {
        /// Length of the input.
        offset: usize,
    },
    /// A heartbeat or end-of-session packet has bytes after its header.
    #[error("{kind:?} packet carries {len} bytes of data at byte {offset}")]
    UnexpectedData {
        /// Position just after the header.
        offset: usize,
        /// The packet's kind.
        kind: PacketKind,
        /// Number of bytes after the header.
        len: usize,
    },
    /// The sequence number plus the message count does not fit in a `u64`.
    #[error("sequence {sequence} + count {count} at byte {offset} overflows u64")]
    SequenceOverflow {
        /// Position of the sequence number field.
        offset: usize,
        /// The packet's sequence number.
        sequence: u64,
        /// The packet's message count.
        count: u16,
    },
    /// The input ends before the header's count of blocks is reached.
    #[error("input ends at byte {offset} after {found} of {expected} message blocks")]
    MissingBlocks {
        /// Length of the input.
        offset: usize,
        /// Message count from the header.
        expected: u16,
        /// Blocks found before the input ended.
        found: u16,
    },
    /// A single byte remains where a 2-byte block length should start.
    #[error("block length at byte {offset} is cut off by the end of the input")]
    TruncatedBlockLength {
        /// Position of the cut-off length field.
        offset: usize,
    },
    /// A block's length runs past the end of the input.
    #[error("block at byte {offset} declares {length} bytes but only {available} remain")]
    BlockOverrun {
        /// Position of the block's length field.
        offset: usize,
        /// Declared message length.
        length: usize,
        /// Bytes left after the length field.
        available: usize,
    },
    /// Bytes remain after the last block (or after a request packet's 20 bytes).
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
            | Self::UnexpectedData { offset, .. }
            | Self::SequenceOverflow { offset, .. }
            | Self::MissingBlocks { offset, .. }
            | Self::TruncatedBlockLength { offset }
            | Self::BlockOverrun { offset, .. }
            | Self::TrailingBytes { offset, .. } => offset,
        }
    }
}

/// The fields shared by the downstream header and the request packet.
struct RawHeader {
    session: Session,
    sequence: u64,
    count: u16,
}

fn read_header(buf: &[u8]) -> Result<RawHeader, DecodeError> {
    let short = DecodeError::ShortHeader { offset: buf.len() };
    let session = read_array::<SESSION_LEN>(buf, 0).ok_or(short)?;
    let sequence = read_array::<8>(buf, SESSION_LEN).ok_or(short)?;
    let count = read_array::<2>(buf, SESSION_LEN + 8).ok_or(short)?;
    Ok(RawHeader {
        session: Session(session),
        sequence: u64::from_be_bytes(sequence),
        count: u16::from_be_bytes(count),
    })
}

fn header_bytes(session: Session, sequence: u64, count: u16) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    let parts: [&[u8]; 3] = [&session.0, &sequence.to_be_bytes(), &count.to_be_bytes()];
    for (slot, &b) in out.iter_mut().zip(parts.iter().flat_map(|p| p.iter())) {
        *slot = b;
    }
    out
}

/// A decoded, fully validated downstream packet borrowing its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    session: Session,
    sequence: u64,
    kind: PacketKind,
    blocks: &'a [u8],
    bytes: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Decodes and validates a whole downstream packet.
    ///
    /// The input must be exactly one packet: a 20-byte header and then
    /// exactly `count` blocks, or nothing for a heartbeat or end of session.
    /// Once this returns `Ok`, [`Packet::messages`] cannot fail.
    ///
    /// ```
    /// use gapless::protocol::moldudp64::{DecodeError, Packet};
    ///
    /// let mut bytes = b"SESSION01 ".to_vec();
    /// bytes.extend_from_slice(&7u64.to_be_bytes());
    /// bytes.extend_from_slice(&1u16.to_be_bytes());
    /// bytes.extend_from_slice(&[0, 3, b'a', b'b']); // declares 3 bytes, has 2
    /// assert_eq!(
    ///     Packet::decode(&bytes),
    ///     Err(DecodeError::BlockOverrun { offset: 20, length: 3, available: 2 })
    /// );
    /// ```
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let (packet, count) = Self::decode_header(buf)?;
        let end = blocks::walk(packet.blocks, count, HEADER_LEN, BlockLengths::BigEndian)?;
        if end != buf.len() {
            return Err(DecodeError::TrailingBytes {
                offset: end,
                count: buf.len().saturating_sub(end),
            });
        }
        Ok(packet)
    }

    /// Decodes four packets, with the same result as [`Packet::decode`] on each, and
    /// faster when they are well formed: their message blocks are walked together, so
    /// the walks' dependent loads overlap. A packet that fails is decoded again alone,
    /// for its exact error.
    ///
    /// ```
    /// use gapless::protocol::moldudp64::{Packet, PacketWriter, Session};
    ///
    /// let mut buf = [0u8; 64];
    /// let mut w = PacketWriter::new(&mut buf, Session(*b"SESSION01 "), 5)?;
    /// w.push(b"hello")?;
    /// let len = w.finish();
    /// let good = &buf[..len];
    /// let cut = &buf[..len - 1];
    /// let [a, b, c, d] = Packet::decode4([good, cut, good, &[]]);
    /// assert_eq!(a?.message_count(), 1);
    /// assert_eq!(b, Packet::decode(cut));
    /// assert!(c.is_ok() && d.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decode4(bufs: [&'a [u8]; 4]) -> [Result<Self, DecodeError>; 4] {
        blocks::decode4::<_, _, blocks::Big>(
            bufs,
            |buf| Self::decode_header(buf).map(|(p, count)| (p, p.blocks, count)),
            Self::decode,
        )
    }

    /// Everything [`Packet::decode`] checks but the blocks: returns the packet with the
    /// count of blocks it must hold.
    fn decode_header(buf: &'a [u8]) -> Result<(Self, u16), DecodeError> {
        let RawHeader {
            session,
            sequence,
            count,
        } = read_header(buf)?;
        let blocks = buf.get(HEADER_LEN..).unwrap_or_default();
        let kind = PacketKind::from_count(count);
        let count = match kind {
            PacketKind::Data { count } => count,
            PacketKind::Heartbeat | PacketKind::EndOfSession => {
                if !blocks.is_empty() {
                    return Err(DecodeError::UnexpectedData {
                        offset: HEADER_LEN,
                        kind,
                        len: blocks.len(),
                    });
                }
                0
            }
        };
        if sequence.checked_add(u64::from(count)).is_none() {
            return Err(DecodeError::SequenceOverflow {
                offset: SESSION_LEN,
                sequence,
                count,
            });
        }
        Ok((
            Self {
                session,
                sequence,
                kind,
                blocks,
                bytes: buf,
            },
            count,
        ))
    }

    /// The session this packet belongs to.
    pub const fn session(&self) -> Session {
        self.session
    }

    /// The header's sequence number: the first message's for a data packet,
    /// the next expected one for a heartbeat or end of session.
    pub const fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Data, heartbeat or end of session.
    pub const fn kind(&self) -> PacketKind {
        self.kind
    }

    /// Number of messages carried (0 for a heartbeat or end of session).
    pub const fn message_count(&self) -> u16 {
        match self.kind {
            PacketKind::Data { count } => count,
            PacketKind::Heartbeat | PacketKind::EndOfSession => 0,
        }
    }

    /// Sequence number of the message after this packet: `sequence + count`
    /// for data, `sequence` for a heartbeat or end of session.
    pub const fn next_sequence(&self) -> u64 {
        // `decode` refused any packet for which this addition overflows.
        self.sequence.wrapping_add(self.message_count() as u64)
    }

    /// The message blocks (u16 big-endian length, then the data), as received; empty
    /// for a heartbeat or end of session.
    pub const fn blocks(&self) -> &'a [u8] {
        self.blocks
    }

    /// Iterates over the messages' data, in order, without allocating.
    pub fn messages(&self) -> Messages<'a> {
        Messages::new(
            self.blocks,
            u32::from(self.message_count()),
            BlockLengths::BigEndian,
        )
    }

    /// Iterates over `(sequence number, message data)` pairs.
    pub fn sequenced_messages(&self) -> SequencedMessages<'a> {
        SequencedMessages::new(
            self.blocks,
            self.sequence,
            u32::from(self.message_count()),
            BlockLengths::BigEndian,
        )
    }

    /// The whole packet as received.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Length of the packet in bytes.
    pub const fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// Encodes this packet into `out` and returns its length; `out` is left
    /// untouched when it is too small.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        match self.kind {
            PacketKind::Heartbeat => encode_heartbeat(out, self.session, self.sequence),
            PacketKind::EndOfSession => encode_end_of_session(out, self.session, self.sequence),
            PacketKind::Data { .. } => {
                ensure_capacity(out, self.encoded_len())?;
                let mut writer = PacketWriter::new(out, self.session, self.sequence)?;
                for message in self.messages() {
                    writer.push(message)?;
                }
                Ok(writer.finish())
            }
        }
    }
}

/// Builds a data packet in a caller-owned buffer, one message at a time.
///
/// [`PacketWriter::new`] writes the header; each successful
/// [`PacketWriter::push`] appends a block and updates the header's count, so
/// the first [`PacketWriter::packet_len`] bytes of the buffer are always a
/// valid packet (a heartbeat until the first push). A refused push leaves the
/// buffer as it was.
#[derive(Debug)]
pub struct PacketWriter<'b> {
    out: &'b mut [u8],
    session: Session,
    sequence: u64,
    count: u16,
    len: usize,
}

impl<'b> PacketWriter<'b> {
    /// Writes the header (with a count of 0) to the front of `out`.
    ///
    /// Fails, leaving `out` untouched, when it is shorter than 20 bytes.
    pub fn new(out: &'b mut [u8], session: Session, sequence: u64) -> Result<Self, EncodeError> {
        ensure_capacity(out, HEADER_LEN)?;
        let len = write_at(out, 0, &header_bytes(session, sequence, 0))?;
        Ok(Self {
            out,
            session,
            sequence,
            count: 0,
            len,
        })
    }

    /// Appends one message and returns the packet length so far.
    ///
    /// Refuses, leaving the buffer untouched, when the message is longer than
    /// 65535 bytes, the packet already holds 65534 messages, the next
    /// sequence number would overflow, or the block does not fit.
    pub fn push(&mut self, message: &[u8]) -> Result<usize, EncodeError> {
        let length = u16::try_from(message.len()).map_err(|_| EncodeError::MessageTooLong {
            len: message.len(),
            max: MAX_MESSAGE_LEN,
        })?;
        if self.count >= MAX_MESSAGES {
            return Err(EncodeError::TooManyMessages {
                max: usize::from(MAX_MESSAGES),
            });
        }
        let count = self.count.saturating_add(1);
        if self.sequence.checked_add(u64::from(count)).is_none() {
            return Err(EncodeError::SequenceOverflow);
        }
        let end = self
            .len
            .saturating_add(BLOCK_HEADER_LEN)
            .saturating_add(message.len());
        ensure_capacity(self.out, end)?;
        let at = write_at(self.out, self.len, &length.to_be_bytes())?;
        let end = write_at(self.out, at, message)?;
        write_at(self.out, SESSION_LEN + 8, &count.to_be_bytes())?;
        self.len = end;
        self.count = count;
        Ok(end)
    }

    /// Bytes of the buffer not yet used; a message of `n` bytes needs `n + 2`.
    pub fn remaining(&self) -> usize {
        self.out.len().saturating_sub(self.len)
    }

    /// Length of the packet written so far.
    pub const fn packet_len(&self) -> usize {
        self.len
    }

    /// Number of messages written so far.
    pub const fn message_count(&self) -> u16 {
        self.count
    }

    /// The session written in the header.
    pub const fn session(&self) -> Session {
        self.session
    }

    /// Sequence number of the message after the last one pushed.
    pub const fn next_sequence(&self) -> u64 {
        self.sequence.wrapping_add(self.count as u64)
    }

    /// Ends the packet and returns its length.
    ///
    /// A writer finished without any message has written a heartbeat.
    pub fn finish(self) -> usize {
        self.len
    }
}

/// Writes a heartbeat (count 0) carrying the next expected sequence number.
///
/// Returns 20; fails, leaving `out` untouched, when `out` is shorter.
pub fn encode_heartbeat(
    out: &mut [u8],
    session: Session,
    next_sequence: u64,
) -> Result<usize, EncodeError> {
    ensure_capacity(out, HEADER_LEN)?;
    write_at(
        out,
        0,
        &header_bytes(session, next_sequence, HEARTBEAT_COUNT),
    )
}

/// Writes an end-of-session packet (count `0xFFFF`) carrying the next
/// expected sequence number.
///
/// Returns 20; fails, leaving `out` untouched, when `out` is shorter.
pub fn encode_end_of_session(
    out: &mut [u8],
    session: Session,
    next_sequence: u64,
) -> Result<usize, EncodeError> {
    ensure_capacity(out, HEADER_LEN)?;
    write_at(
        out,
        0,
        &header_bytes(session, next_sequence, END_OF_SESSION_COUNT),
    )
}

/// A request for retransmission of `count` messages starting at `sequence`.
///
/// ```
/// use gapless::protocol::moldudp64::{Request, Session};
///
/// let request = Request { session: "S1".parse()?, sequence: 100, count: 5 };
/// let mut buf = [0u8; 20];
/// assert_eq!(request.encode(&mut buf)?, 20);
/// assert_eq!(Request::decode(&buf)?, request);
/// # Ok::<(), gapless::protocol::ProtocolError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// Session the messages belong to.
    pub session: Session,
    /// First requested sequence number.
    pub sequence: u64,
    /// Number of messages requested.
    pub count: u16,
}

impl Request {
    /// Decodes a request packet, which must be exactly 20 bytes.
    ///
    /// Shorter input fails with [`DecodeError::ShortHeader`], longer with
    /// [`DecodeError::TrailingBytes`].
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let RawHeader {
            session,
            sequence,
            count,
        } = read_header(buf)?;
        if buf.len() > REQUEST_LEN {
            return Err(DecodeError::TrailingBytes {
                offset: REQUEST_LEN,
                count: buf.len().saturating_sub(REQUEST_LEN),
            });
        }
        Ok(Self {
            session,
            sequence,
            count,
        })
    }

    /// The 20 wire bytes.
    pub fn to_bytes(&self) -> [u8; REQUEST_LEN] {
        header_bytes(self.session, self.sequence, self.count)
    }

    /// Writes the request to the front of `out` and returns 20; fails,
    /// leaving `out` untouched, when `out` is shorter.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        ensure_capacity(out, REQUEST_LEN)?;
        write_at(out, 0, &self.to_bytes())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use crate::protocol::XorShift;

    fn s(name: &str) -> Session {
        name.parse().unwrap()
    }

    fn raw(session: &[u8; 10], sequence: u64, count: u16, tail: &[u8]) -> Vec<u8> {
        let mut v = session.to_vec();
        v.extend_from_slice(&sequence.to_be_bytes());
        v.extend_from_slice(&count.to_be_bytes());
        v.extend_from_slice(tail);
        v
    }

    fn build(session: Session, sequence: u64, messages: &[&[u8]]) -> Vec<u8> {
        let mut buf = vec![0u8; 20 + messages.iter().map(|m| m.len() + 2).sum::<usize>()];
        let mut w = PacketWriter::new(&mut buf, session, sequence).unwrap();
        for m in messages {
            w.push(m).unwrap();
        }
        let len = w.finish();
        assert_eq!(len, buf.len());
        buf
    }

    fn reencode(p: &Packet<'_>) -> Vec<u8> {
        let mut out = vec![0u8; p.encoded_len()];
        assert_eq!(p.encode(&mut out).unwrap(), out.len());
        out
    }

    #[test]
    fn session_from_str_pads_and_validates() {
        assert_eq!(s("AB").as_bytes(), b"AB        ");
        assert_eq!(s("").as_bytes(), b"          ");
        assert_eq!(s("0123456789").as_bytes(), b"0123456789");
        assert_eq!(
            "01234567890".parse::<Session>(),
            Err(SessionError::TooLong { len: 11 })
        );
        assert_eq!(
            Session::from_ascii(b"AB\x01"),
            Err(SessionError::InvalidByte { index: 2, byte: 1 })
        );
        assert_eq!(
            "é".parse::<Session>(),
            Err(SessionError::InvalidByte {
                index: 0,
                byte: 0xC3
            })
        );
        assert!(Session::BLANK.is_blank());
        assert!(!s("A").is_blank());
        assert_eq!(s("AB").trimmed(), b"AB");
        assert_eq!(Session::BLANK.trimmed(), b"");
        assert_eq!(Session::from(*b"X         "), s("X"));
    }

    #[test]
    fn session_display_escapes() {
        let session = Session(*b"A\\\x00\x7f\xff B   ");
        assert_eq!(session.to_string(), "A\\\\\\x00\\x7f\\xff B   ");
        assert_eq!(format!("{:?}", s("AB")), "Session(\"AB        \")");
    }

    #[test]
    fn decode_data_packet() {
        let bytes = raw(b"SESSION001", 10, 3, &[0, 1, b'x', 0, 0, 0, 2, b'y', b'z']);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.session(), Session(*b"SESSION001"));
        assert_eq!(p.sequence(), 10);
        assert_eq!(p.kind(), PacketKind::Data { count: 3 });
        assert_eq!(p.message_count(), 3);
        assert_eq!(p.next_sequence(), 13);
        assert_eq!(p.as_bytes(), &bytes[..]);
        let m = p.messages();
        assert_eq!(m.len(), 3);
        assert_eq!(m.collect::<Vec<_>>(), [&b"x"[..], b"", b"yz"]);
        assert_eq!(
            p.sequenced_messages().collect::<Vec<_>>(),
            [(10, &b"x"[..]), (11, b""), (12, b"yz")]
        );
        assert_eq!(reencode(&p), bytes);
    }

    #[test]
    fn heartbeat_and_end_of_session() {
        let hb = raw(b"SESSION001", 55, 0, &[]);
        let p = Packet::decode(&hb).unwrap();
        assert_eq!(p.kind(), PacketKind::Heartbeat);
        assert_eq!(p.message_count(), 0);
        assert_eq!(p.next_sequence(), 55);
        assert_eq!(p.messages().next(), None);
        let mut out = [0u8; 20];
        assert_eq!(encode_heartbeat(&mut out, p.session(), 55), Ok(20));
        assert_eq!(&out[..], &hb[..]);
        assert_eq!(reencode(&p), hb);

        let eos = raw(b"SESSION001", u64::MAX, 0xFFFF, &[]);
        let p = Packet::decode(&eos).unwrap();
        assert_eq!(p.kind(), PacketKind::EndOfSession);
        assert_eq!(p.message_count(), 0);
        assert_eq!(p.next_sequence(), u64::MAX);
        assert_eq!(p.messages().count(), 0);
        assert_eq!(
            encode_end_of_session(&mut out, p.session(), u64::MAX),
            Ok(20)
        );
        assert_eq!(&out[..], &eos[..]);
        assert_eq!(reencode(&p), eos);
    }

    #[test]
    fn packet_kind_counts() {
        assert_eq!(PacketKind::from_count(0), PacketKind::Heartbeat);
        assert_eq!(PacketKind::from_count(0xFFFF), PacketKind::EndOfSession);
        assert_eq!(PacketKind::from_count(7), PacketKind::Data { count: 7 });
        for count in [0, 1, 0xFFFE, 0xFFFF] {
            assert_eq!(PacketKind::from_count(count).count_field(), count);
        }
    }

    #[test]
    fn error_short_header() {
        for len in 0..20 {
            let bytes = vec![b'A'; len];
            let err = Packet::decode(&bytes).unwrap_err();
            assert_eq!(err, DecodeError::ShortHeader { offset: len });
            assert_eq!(err.offset(), len);
        }
    }

    #[test]
    fn error_unexpected_data() {
        let hb = raw(b"SESSION001", 1, 0, &[0, 0]);
        assert_eq!(
            Packet::decode(&hb),
            Err(DecodeError::UnexpectedData {
                offset: 20,
                kind: PacketKind::Heartbeat,
                len: 2
            })
        );
        let eos = raw(b"SESSION001", 1, 0xFFFF, &[9]);
        let err = Packet::decode(&eos).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnexpectedData {
                offset: 20,
                kind: PacketKind::EndOfSession,
                len: 1
            }
        );
        assert_eq!(err.offset(), 20);
    }

    #[test]
    fn error_sequence_overflow() {
        let bytes = raw(b"SESSION001", u64::MAX, 1, &[0, 0]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::SequenceOverflow {
                offset: 10,
                sequence: u64::MAX,
                count: 1
            }
        );
        assert_eq!(err.offset(), 10);
        // The largest allowed: next sequence is exactly u64::MAX.
        let bytes = raw(b"SESSION001", u64::MAX - 2, 2, &[0, 0, 0, 0]);
        assert_eq!(Packet::decode(&bytes).unwrap().next_sequence(), u64::MAX);
    }

    #[test]
    fn error_missing_blocks() {
        let bytes = raw(b"SESSION001", 1, 3, &[0, 1, b'a']);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::MissingBlocks {
                offset: 23,
                expected: 3,
                found: 1
            }
        );
        assert_eq!(err.offset(), 23);
        assert_eq!(
            Packet::decode(&raw(b"SESSION001", 1, 1, &[])),
            Err(DecodeError::MissingBlocks {
                offset: 20,
                expected: 1,
                found: 0
            })
        );
    }

    #[test]
    fn error_truncated_block_length() {
        let bytes = raw(b"SESSION001", 1, 2, &[0, 0, 0]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(err, DecodeError::TruncatedBlockLength { offset: 22 });
        assert_eq!(err.offset(), 22);
    }

    #[test]
    fn error_block_overrun() {
        let bytes = raw(b"SESSION001", 1, 2, &[0, 0, 0xFF, 0xFF, 1, 2, 3]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::BlockOverrun {
                offset: 22,
                length: 0xFFFF,
                available: 3
            }
        );
        assert_eq!(err.offset(), 22);
    }

    #[test]
    fn error_trailing_bytes() {
        let bytes = raw(b"SESSION001", 1, 1, &[0, 1, b'a', 0xEE, 0xEE]);
        let err = Packet::decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TrailingBytes {
                offset: 23,
                count: 2
            }
        );
        assert_eq!(err.offset(), 23);
    }

    #[test]
    fn error_messages_display() {
        let err = DecodeError::BlockOverrun {
            offset: 22,
            length: 9,
            available: 3,
        };
        assert_eq!(
            err.to_string(),
            "block at byte 22 declares 9 bytes but only 3 remain"
        );
    }

    #[test]
    fn empty_messages() {
        let bytes = build(s("E"), 1, &[b"", b"", b""]);
        assert_eq!(bytes.len(), 26);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.message_count(), 3);
        assert!(p.messages().all(|m| m.is_empty()));
        assert_eq!(reencode(&p), bytes);
    }

    #[test]
    fn max_size_message() {
        let big = vec![0xAB; MAX_MESSAGE_LEN];
        let bytes = build(s("MAX"), 9, &[&big]);
        assert_eq!(bytes.len(), 20 + 2 + MAX_MESSAGE_LEN);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.messages().next().unwrap(), &big[..]);
        assert_eq!(reencode(&p), bytes);

        let mut buf = vec![0u8; 70_000];
        let mut w = PacketWriter::new(&mut buf, s("MAX"), 9).unwrap();
        let too_big = vec![0u8; MAX_MESSAGE_LEN + 1];
        assert_eq!(
            w.push(&too_big),
            Err(EncodeError::MessageTooLong {
                len: MAX_MESSAGE_LEN + 1,
                max: MAX_MESSAGE_LEN
            })
        );
        assert_eq!(w.message_count(), 0);
    }

    #[test]
    fn max_message_count() {
        let mut buf = vec![0u8; 20 + 2 * usize::from(MAX_MESSAGES) + 2];
        let mut w = PacketWriter::new(&mut buf, s("MAXC"), 1).unwrap();
        for _ in 0..MAX_MESSAGES {
            w.push(b"").unwrap();
        }
        let before = w.packet_len();
        assert_eq!(
            w.push(b""),
            Err(EncodeError::TooManyMessages {
                max: usize::from(MAX_MESSAGES)
            })
        );
        assert_eq!(w.packet_len(), before);
        assert_eq!(w.next_sequence(), 1 + u64::from(MAX_MESSAGES));
        let len = w.finish();
        assert_eq!(len, 20 + 2 * usize::from(MAX_MESSAGES));
        let p = Packet::decode(&buf[..len]).unwrap();
        assert_eq!(
            p.kind(),
            PacketKind::Data {
                count: MAX_MESSAGES
            }
        );
        assert_eq!(p.messages().count(), usize::from(MAX_MESSAGES));
        assert_eq!(reencode(&p), &buf[..len]);
    }

    #[test]
    fn writer_refuses_when_full_and_leaves_buffer() {
        let mut buf = [0x55u8; 30];
        let mut w = PacketWriter::new(&mut buf, s("W"), 5).unwrap();
        assert_eq!(w.remaining(), 10);
        assert_eq!(w.push(b"12345678"), Ok(30));
        assert_eq!(w.remaining(), 0);
        assert_eq!(
            w.push(b""),
            Err(EncodeError::BufferTooSmall {
                needed: 32,
                available: 30
            })
        );
        assert_eq!(w.message_count(), 1);
        assert_eq!(w.session(), s("W"));
        let len = w.finish();
        assert_eq!(len, 30);
        let snapshot = buf;
        let p = Packet::decode(&buf).unwrap();
        assert_eq!(p.messages().collect::<Vec<_>>(), [&b"12345678"[..]]);

        // A refused push does not even touch the count field.
        let mut buf2 = snapshot;
        let mut w = PacketWriter::new(&mut buf2, s("W"), 5).unwrap();
        w.push(b"1234").unwrap();
        let mid: Vec<u8> = w.out.to_vec();
        assert!(w.push(b"123456789").is_err());
        assert_eq!(w.out.to_vec(), mid);
    }

    #[test]
    fn writer_without_messages_is_heartbeat() {
        let mut buf = [0u8; 20];
        let w = PacketWriter::new(&mut buf, s("HB"), 77).unwrap();
        assert_eq!(w.finish(), 20);
        assert_eq!(Packet::decode(&buf).unwrap().kind(), PacketKind::Heartbeat);
    }

    #[test]
    fn writer_refuses_sequence_overflow() {
        let mut buf = [0u8; 64];
        let mut w = PacketWriter::new(&mut buf, s("O"), u64::MAX - 1).unwrap();
        w.push(b"a").unwrap();
        assert_eq!(w.push(b"b"), Err(EncodeError::SequenceOverflow));
        assert_eq!(w.next_sequence(), u64::MAX);
    }

    #[test]
    fn encoders_refuse_small_buffers_untouched() {
        let mut buf = [0xAAu8; 19];
        assert_eq!(
            PacketWriter::new(&mut buf, s("X"), 1).map(|w| w.finish()),
            Err(EncodeError::BufferTooSmall {
                needed: 20,
                available: 19
            })
        );
        assert!(encode_heartbeat(&mut buf, s("X"), 1).is_err());
        assert!(encode_end_of_session(&mut buf, s("X"), 1).is_err());
        let req = Request {
            session: s("X"),
            sequence: 1,
            count: 1,
        };
        assert!(req.encode(&mut buf).is_err());
        assert_eq!(buf, [0xAA; 19]);

        let bytes = build(s("X"), 1, &[b"abc", b"de"]);
        let p = Packet::decode(&bytes).unwrap();
        let mut out = vec![0xAAu8; bytes.len() - 1];
        assert_eq!(
            p.encode(&mut out),
            Err(EncodeError::BufferTooSmall {
                needed: bytes.len(),
                available: bytes.len() - 1
            })
        );
        assert!(out.iter().all(|&b| b == 0xAA));
    }

    #[test]
    fn encode_into_larger_buffer() {
        let bytes = build(s("X"), 1, &[b"abc"]);
        let p = Packet::decode(&bytes).unwrap();
        let mut out = [0xEEu8; 64];
        let n = p.encode(&mut out).unwrap();
        assert_eq!(&out[..n], &bytes[..]);
        assert!(out[n..].iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn request_round_trip_and_errors() {
        let req = Request {
            session: s("REQ"),
            sequence: 0x0102_0304_0506_0708,
            count: 0xFFFF,
        };
        let bytes = req.to_bytes();
        assert_eq!(&bytes[..10], b"REQ       ");
        assert_eq!(&bytes[10..18], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&bytes[18..], &[0xFF, 0xFF]);
        assert_eq!(Request::decode(&bytes), Ok(req));
        let mut out = [0u8; 25];
        assert_eq!(req.encode(&mut out), Ok(20));
        assert_eq!(
            Request::decode(&out),
            Err(DecodeError::TrailingBytes {
                offset: 20,
                count: 5
            })
        );
        assert_eq!(
            Request::decode(&out[..19]),
            Err(DecodeError::ShortHeader { offset: 19 })
        );
    }

    fn check_reencode(bytes: &[u8]) -> bool {
        match Packet::decode(bytes) {
            Ok(p) => {
                assert_eq!(reencode(&p), bytes);
                assert_eq!(p.messages().count(), usize::from(p.message_count()));
                assert!(p.next_sequence() >= p.sequence());
                true
            }
            Err(e) => {
                assert!(e.offset() <= bytes.len());
                false
            }
        }
    }

    #[test]
    fn fuzz_decode_never_panics_and_reencodes() {
        let mut rng = XorShift::new(0x9E37_79B9_7F4A_7C15);
        let (mut ok, mut err) = (0u32, 0u32);
        for i in 0..20_000 {
            let bytes = if i % 2 == 0 {
                // Unstructured bytes.
                let len = rng.below(64);
                rng.bytes(len)
            } else {
                // A valid packet, then maybe damaged.
                let count = rng.below(6);
                let messages: Vec<Vec<u8>> = (0..count)
                    .map(|_| {
                        let len = rng.below(8);
                        rng.bytes(len)
                    })
                    .collect();
                let refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
                let sequence = match rng.below(3) {
                    0 => u64::MAX - rng.below(8) as u64,
                    _ => rng.next_u64(),
                };
                let mut session = [0u8; 10];
                rng.fill(&mut session);
                let mut v = vec![0u8; 20];
                match rng.below(10) {
                    0 => {
                        encode_heartbeat(&mut v, Session(session), sequence).unwrap();
                    }
                    1 => {
                        encode_end_of_session(&mut v, Session(session), sequence).unwrap();
                    }
                    _ => {
                        let sequence = sequence.min(u64::MAX - count as u64);
                        v = build(Session(session), sequence, &refs);
                    }
                }
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
            if check_reencode(&bytes) {
                ok += 1;
            } else {
                err += 1;
            }
        }
        assert!(ok > 2_000, "too few valid packets: {ok}");
        assert!(err > 2_000, "too few invalid packets: {err}");
    }

    #[test]
    fn fuzz_request_decode() {
        let mut rng = XorShift::new(7);
        for _ in 0..5_000 {
            let len = rng.below(24);
            let bytes = rng.bytes(len);
            match Request::decode(&bytes) {
                Ok(r) => assert_eq!(&r.to_bytes()[..], &bytes[..]),
                Err(e) => assert!(e.offset() <= bytes.len()),
            }
        }
    }
}
