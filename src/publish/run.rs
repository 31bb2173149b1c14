//! A run of consecutive messages handed off as one queue record.
//!
//! A MoldUDP64 or IEX-TP datagram that arrives in order carries `count`
//! messages numbered `first..first + count`, as length-prefixed blocks. The
//! rx thread hands the datagram's blocks to each consumer queue as a single
//! record ([`Producer::push_run`](super::Producer::push_run)) instead of one
//! record a message, and [`Consumer::pop`](super::Consumer::pop) lends the
//! messages out one [`Event::Message`] at a time. A consumer sees the events
//! per-message records would have given it, except when its queue overruns:
//! a run is dropped whole (its overrun marker spans it), and a run longer than
//! the whole queue goes in message by message. The rx thread writes one header
//! and copies one block of bytes per datagram.
//!
//! # Record layout (queue-internal)
//!
//! A run record is framed like any other queue record (a u32 little-endian
//! length, then the body). Its body is tag 9 (a tag [`Event::decode`]
//! refuses, so a run is never mistaken for an event), then:
//!
//! | offset | field | type |
//! | --- | --- | --- |
//! | 1 | stream | u16 LE |
//! | 3 | block length byte order: 0 big-endian, 1 little-endian | u8 |
//! | 4 | first sequence | u64 LE |
//! | 12 | receive time, ns since the Unix epoch | u64 LE |
//! | 20 | message count | u32 LE |
//! | 24 | length of the blocks | u32 LE |
//! | 28 | the blocks: each a u16 length (in the given order) and that many bytes | |
//!
//! Runs never leave the process: the unix socket and every other sink
//! write the per-message events a consumer pops.

use crate::publish::event::Event;
use crate::publish::queue::RECORD_PREFIX_LEN;

/// Tag of a run record's body.
pub(crate) const RUN_TAG: u8 = 9;
/// Length of a run record's header (everything before the blocks).
pub(crate) const RUN_HEADER_LEN: usize = 28;

pub use crate::protocol::blocks::BlockLengths;
use crate::protocol::blocks::SequencedMessages;

/// The wire code of a byte order in a run record.
const fn code(lengths: BlockLengths) -> u8 {
    match lengths {
        BlockLengths::BigEndian => 0,
        BlockLengths::LittleEndian => 1,
    }
}

/// The byte order of a wire code.
const fn from_code(code: u8) -> Option<BlockLengths> {
    match code {
        0 => Some(BlockLengths::BigEndian),
        1 => Some(BlockLengths::LittleEndian),
        _ => None,
    }
}

/// Messages `first..first + count` of one stream, received together, as the
/// length-prefixed blocks they arrived in.
///
/// ```
/// use gapless::publish::run::{BlockLengths, MessageRun};
///
/// let blocks = [0, 2, b'h', b'i', 0, 0, 0, 1, b'!'];
/// let run = MessageRun::new(4, 100, 7, BlockLengths::BigEndian, &blocks, 3).expect("3 blocks");
/// let seen: Vec<(u64, &[u8])> = run.messages().collect();
/// assert_eq!(seen, [(100, &b"hi"[..]), (101, &b""[..]), (102, &b"!"[..])]);
/// // Blocks that do not hold exactly `count` messages are refused.
/// assert!(MessageRun::new(4, 100, 7, BlockLengths::BigEndian, &blocks, 2).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRun<'a> {
    stream: u16,
    first: u64,
    count: u32,
    recv_ns: u64,
    lengths: BlockLengths,
    blocks: &'a [u8],
}

impl<'a> MessageRun<'a> {
    /// A run of `count` messages from `first`, after checking that `blocks`
    /// is exactly `count` well-formed blocks. `None` otherwise, or when
    /// `count` is 0 or the sequences would pass `u64::MAX`.
    pub fn new(
        stream: u16,
        first: u64,
        recv_ns: u64,
        lengths: BlockLengths,
        blocks: &'a [u8],
        count: u32,
    ) -> Option<Self> {
        let run = Self::validated(stream, first, recv_ns, lengths, blocks, count);
        let mut messages = run.messages();
        for _ in 0..count {
            messages.next()?;
        }
        (count > 0 && messages.rest().is_empty() && first.checked_add(u64::from(count)).is_some())
            .then_some(run)
    }

    /// A run whose blocks the caller has already checked (a decoded datagram's).
    pub(crate) const fn validated(
        stream: u16,
        first: u64,
        recv_ns: u64,
        lengths: BlockLengths,
        blocks: &'a [u8],
        count: u32,
    ) -> Self {
        Self {
            stream,
            first,
            count,
            recv_ns,
            lengths,
            blocks,
        }
    }

    /// The stream.
    pub const fn stream(&self) -> u16 {
        self.stream
    }

    /// The first message's sequence.
    pub const fn first(&self) -> u64 {
        self.first
    }

    /// The last message's sequence.
    pub const fn last(&self) -> u64 {
        self.first + self.count as u64 - 1
    }

    /// Number of messages.
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// Receive time, nanoseconds since the Unix epoch.
    pub const fn recv_ns(&self) -> u64 {
        self.recv_ns
    }

    /// The blocks as received.
    pub const fn blocks(&self) -> &'a [u8] {
        self.blocks
    }

    /// The messages with their sequences, in order.
    pub fn messages(&self) -> SequencedMessages<'a> {
        SequencedMessages::new(self.blocks, self.first, self.count, self.lengths)
    }

    /// Each message as the [`Event::Message`] a consumer receives.
    pub fn events(&self) -> impl Iterator<Item = Event<'a>> + use<'a> {
        let (stream, recv_ns) = (self.stream, self.recv_ns);
        self.messages().map(move |(seq, payload)| Event::Message {
            stream,
            seq,
            recv_ns,
            snapshot: false,
            payload,
        })
    }

    /// Length of the encoded body (header and blocks).
    pub(crate) const fn encoded_len(&self) -> usize {
        RUN_HEADER_LEN + self.blocks.len()
    }

    /// The record's head: the queue's u32 length prefix, then the encoded header.
    pub(crate) fn record_head(&self) -> Option<[u8; RECORD_PREFIX_LEN + RUN_HEADER_LEN]> {
        let header = self.header()?;
        let len = u32::try_from(self.encoded_len()).ok()?;
        let mut head = [0u8; RECORD_PREFIX_LEN + RUN_HEADER_LEN];
        let (prefix, rest) = head.split_at_mut(RECORD_PREFIX_LEN);
        prefix.copy_from_slice(&len.to_le_bytes());
        rest.copy_from_slice(&header);
        Some(head)
    }

    /// The encoded header; `None` when the blocks are too long for its length field.
    pub(crate) fn header(&self) -> Option<[u8; RUN_HEADER_LEN]> {
        let blocks_len = u32::try_from(self.blocks.len()).ok()?;
        let mut h = [0u8; RUN_HEADER_LEN];
        h[0] = RUN_TAG;
        h[1..3].copy_from_slice(&self.stream.to_le_bytes());
        h[3] = code(self.lengths);
        h[4..12].copy_from_slice(&self.first.to_le_bytes());
        h[12..20].copy_from_slice(&self.recv_ns.to_le_bytes());
        h[20..24].copy_from_slice(&self.count.to_le_bytes());
        h[24..28].copy_from_slice(&blocks_len.to_le_bytes());
        Some(h)
    }
}

/// The fields of a run record's header, as the consumer reads them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunHeader {
    pub(crate) stream: u16,
    pub(crate) lengths: BlockLengths,
    pub(crate) first: u64,
    pub(crate) recv_ns: u64,
    pub(crate) count: u32,
}

impl RunHeader {
    /// Reads the header of a run record's `body`; `None` unless it is a run
    /// whose length field matches the body and whose count is not 0.
    pub(crate) fn read(body: &[u8]) -> Option<Self> {
        let h = body.first_chunk::<RUN_HEADER_LEN>()?;
        let u64_at = |at: usize| {
            h.get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let u32_at = |at: usize| {
            h.get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let blocks_len = usize::try_from(u32_at(24)?).ok()?;
        let count = u32_at(20)?;
        (h[0] == RUN_TAG && count > 0 && body.len() - RUN_HEADER_LEN == blocks_len).then_some(())?;
        Some(Self {
            stream: u16::from_le_bytes([h[1], h[2]]),
            lengths: from_code(h[3])?,
            first: u64_at(4)?,
            recv_ns: u64_at(12)?,
            count,
        })
    }
}

pub(crate) use crate::protocol::blocks::block_at;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let blocks = [0, 1, b'a', 0, 1, b'b'];
        let run = MessageRun::new(3, 41, 9, BlockLengths::BigEndian, &blocks, 2).expect("valid");
        let mut body = run.header().expect("fits").to_vec();
        body.extend_from_slice(&blocks);
        assert_eq!(body.len(), run.encoded_len());
        let h = RunHeader::read(&body).expect("a run");
        assert_eq!(
            h,
            RunHeader {
                stream: 3,
                lengths: BlockLengths::BigEndian,
                first: 41,
                recv_ns: 9,
                count: 2
            }
        );
        // A body whose blocks length disagrees, or another tag, is not a run.
        assert!(RunHeader::read(&body[..body.len() - 1]).is_none());
        body[0] = 1;
        assert!(RunHeader::read(&body).is_none());
    }

    #[test]
    fn little_endian_lengths() {
        let blocks = [2, 0, b'h', b'i'];
        let run = MessageRun::new(0, 5, 0, BlockLengths::LittleEndian, &blocks, 1).expect("valid");
        assert_eq!(run.messages().collect::<Vec<_>>(), [(5, &b"hi"[..])]);
        assert!(MessageRun::new(0, 5, 0, BlockLengths::BigEndian, &blocks, 1).is_none());
    }

    #[test]
    fn refuses_bad_runs() {
        assert!(MessageRun::new(0, 1, 0, BlockLengths::BigEndian, &[], 0).is_none());
        assert!(MessageRun::new(0, u64::MAX, 0, BlockLengths::BigEndian, &[0, 0], 1).is_none());
        assert!(MessageRun::new(0, 1, 0, BlockLengths::BigEndian, &[0, 2, 1], 1).is_none());
        assert!(MessageRun::new(0, 1, 0, BlockLengths::BigEndian, &[0, 0, 9], 1).is_none());
    }
}
