//! The wire specifics of the point-sequenced UDP feeds, behind one view: MoldUDP64 and its
//! little-endian cousin IEX-TP both carry a session, the first message's sequence, a count
//! and length-prefixed messages, with count 0 as a heartbeat. Decoding and the encoding of
//! re-requests are the only places the two differ.

use crate::protocol::blocks::{BlockLengths, SequencedMessages};
use crate::protocol::moldudp64::{Request, Session};
use crate::protocol::{ProtocolError, iex_tp, moldudp64};

/// The wire format of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    /// Nasdaq MoldUDP64 (big-endian, 10-byte ASCII session).
    MoldUdp64,
    /// IEX-TP (little-endian, u32 session id).
    IexTp,
}

impl Wire {
    /// The name used in configuration and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MoldUdp64 => "moldudp64",
            Self::IexTp => "iex-tp",
        }
    }

    /// The re-request for `count` messages of `session` from `first`, and its length.
    ///
    /// MoldUDP64 defines the request (spec, "Request Packet"):
    ///
    /// ```text
    /// //# Field Name                Offset   Len   Value
    /// //# Session                      0      10    ANUM
    /// //# Sequence Number             10       8    NUM    First requested sequence number.
    /// //# Requested Message Count     18       2    NUM
    /// ```
    ///
    /// IEX-TP channels are asked in the same 20-byte layout, with the IEX session id in
    /// the session field's first four bytes (little-endian) and zeros after: the layout
    /// gapless's simulated re-request server answers for both wires. IEX's own gap-fill
    /// request (IEX-TP 1.25, "Gap Fill Request": request range blocks over UDP or TCP) is a
    /// different message and is not implemented; a production IEX-TP channel needs a
    /// gap-fill proxy that speaks this layout, or no `rerequest` server and a gap policy.
    pub fn encode_request(self, session: SessionKey, first: u64, count: u16) -> ([u8; 20], usize) {
        let request = Request {
            session: Session(session.0),
            sequence: first,
            count,
        };
        (request.to_bytes(), 20)
    }
}

/// A session identity: the MoldUDP64 session name, or the IEX-TP session id in its first
/// four bytes (little-endian) followed by zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SessionKey(pub [u8; 10]);

impl SessionKey {
    /// The key of an IEX-TP session id.
    pub fn iex(id: u32) -> Self {
        let mut key = [0u8; 10];
        key[..4].copy_from_slice(&id.to_le_bytes());
        Self(key)
    }

    /// A printable form for logs and summaries.
    pub fn display(&self, wire: Wire) -> String {
        match wire {
            Wire::MoldUdp64 => moldudp64::Session(self.0).to_string(),
            Wire::IexTp => {
                let id = u32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]]);
                id.to_string()
            }
        }
    }
}

/// What a datagram announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Messages numbered from the packet's sequence.
    Data,
    /// No messages; the sequence is the next expected one.
    Heartbeat,
    /// MoldUDP64 end of session; the sequence is the next expected one.
    EndOfSession,
}

/// A decoded datagram, fully validated (iterating its messages cannot fail).
pub struct Datagram<'a> {
    /// Session identity (the epoch).
    pub session: SessionKey,
    /// First message's sequence, or the next expected for heartbeats and end of session.
    pub seq: u64,
    /// What it announces.
    pub kind: Kind,
    /// Number of messages.
    pub count: u16,
    /// The messages' blocks as received (length-prefixed, in `lengths` byte order).
    pub blocks: &'a [u8],
    /// Byte order of the blocks' length prefixes.
    pub lengths: BlockLengths,
}

impl<'a> Datagram<'a> {
    /// The messages with their sequences, in order (none for a heartbeat or end of
    /// session).
    pub fn messages(&self) -> SequencedMessages<'a> {
        SequencedMessages::new(self.blocks, self.seq, u32::from(self.count), self.lengths)
    }
}

/// Decodes one datagram of `wire`.
pub fn decode(wire: Wire, bytes: &[u8]) -> Result<Datagram<'_>, ProtocolError> {
    match wire {
        Wire::MoldUdp64 => Ok(from_mold(moldudp64::Packet::decode(bytes)?)),
        Wire::IexTp => Ok(from_iex(iex_tp::Packet::decode(bytes)?)),
    }
}

/// Decodes four datagrams of `wire`, with the same results as [`decode`] on each;
/// their message blocks are checked together, which is faster.
pub fn decode4(wire: Wire, bytes: [&[u8]; 4]) -> [Result<Datagram<'_>, ProtocolError>; 4] {
    match wire {
        Wire::MoldUdp64 => {
            moldudp64::Packet::decode4(bytes).map(|r| r.map(from_mold).map_err(ProtocolError::from))
        }
        Wire::IexTp => {
            iex_tp::Packet::decode4(bytes).map(|r| r.map(from_iex).map_err(ProtocolError::from))
        }
    }
}

fn from_mold(p: moldudp64::Packet<'_>) -> Datagram<'_> {
    let kind = match p.kind() {
        moldudp64::PacketKind::Data { .. } => Kind::Data,
        moldudp64::PacketKind::Heartbeat => Kind::Heartbeat,
        moldudp64::PacketKind::EndOfSession => Kind::EndOfSession,
    };
    let count = if kind == Kind::Data {
        p.message_count()
    } else {
        0
    };
    Datagram {
        session: SessionKey(*p.session().as_bytes()),
        seq: p.sequence(),
        kind,
        count,
        blocks: p.blocks(),
        lengths: BlockLengths::BigEndian,
    }
}

fn from_iex(p: iex_tp::Packet<'_>) -> Datagram<'_> {
    let kind = if p.is_heartbeat() {
        Kind::Heartbeat
    } else {
        Kind::Data
    };
    Datagram {
        session: SessionKey::iex(p.session_id()),
        seq: p.sequence(),
        kind,
        count: p.message_count(),
        blocks: p.blocks(),
        lengths: BlockLengths::LittleEndian,
    }
}

/// The session, first sequence and message count of a data datagram with messages, read
/// from its header alone (its blocks unchecked); `None` for any other datagram or a
/// header too short. For deciding that a copy can be thrown away unread.
#[inline]
pub(crate) fn peek_data(wire: Wire, b: &[u8]) -> Option<(SessionKey, u64, u64)> {
    let array = |from: usize| -> Option<[u8; 8]> { b.get(from..from + 8)?.try_into().ok() };
    let pair = |from: usize| -> Option<[u8; 2]> { b.get(from..from + 2)?.try_into().ok() };
    match wire {
        Wire::MoldUdp64 => {
            let session: [u8; 10] = b.get(..10)?.try_into().ok()?;
            let seq = u64::from_be_bytes(array(10)?);
            let count = u16::from_be_bytes(pair(18)?);
            (count != 0 && count != u16::MAX).then_some((
                SessionKey(session),
                seq,
                u64::from(count),
            ))
        }
        Wire::IexTp => {
            if *b.first()? != iex_tp::VERSION {
                return None;
            }
            let id: [u8; 4] = b.get(8..12)?.try_into().ok()?;
            let count = u16::from_le_bytes(pair(14)?);
            let seq = u64::from_le_bytes(array(24)?);
            (count != 0).then_some((
                SessionKey::iex(u32::from_le_bytes(id)),
                seq,
                u64::from(count),
            ))
        }
    }
}

/// Offset of `part` inside `whole`, when `part` is a sub-slice of it.
pub(crate) fn offset_in(whole: &[u8], part: &[u8]) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len()).then_some(start)
}
