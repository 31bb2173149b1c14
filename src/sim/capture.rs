//! Generated MoldUDP64 captures, written straight to a pcap file without a network: a
//! feed at any rate of capture time with chosen messages missing, and a compressed
//! capture many thousand times smaller than what it expands to.
//!
//! Both are for replay tests and measurements: the first knows exactly which ranges a
//! replay must report lost, the second checks that reading stays in bounded memory.

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::capture::PcapWriter;
use crate::protocol::moldudp64::{PacketWriter, Session};
use crate::sequencer::SeqRange;

use super::itch::synthetic_message;

/// Where generated packets come from (a documentation address).
const SOURCE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 40_000);

/// Largest generated packet payload: one Ethernet frame.
const MAX_PAYLOAD: usize = 1_472;

/// A generated MoldUDP64 feed: sequences `1..=messages` of one session, packed
/// `per_packet` to a packet, timed at `rate` messages a second of capture time, with the
/// messages of `missing` left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedCapture {
    /// Destination group.
    pub group: SocketAddrV4,
    /// Session name (10 bytes at most).
    pub session: String,
    /// Messages published, from sequence 1.
    pub messages: u64,
    /// Messages per packet at most (fewer where a missing range or a full packet cuts it).
    pub per_packet: u16,
    /// Messages per second of capture time.
    pub rate: u64,
    /// Capture time of message 1, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// Messages that never reach the capture.
    pub missing: Vec<SeqRange>,
    /// Every this many packets, two neighbours swap places (0: never).
    pub swap_every: u64,
}

impl FeedCapture {
    /// A feed of `messages` at `rate` messages a second, 8 to a packet, nothing missing.
    pub fn new(group: SocketAddrV4, messages: u64, rate: u64) -> Self {
        Self {
            group,
            session: "GEN0000001".to_string(),
            messages,
            per_packet: 8,
            rate,
            start_ns: 1_700_000_000_000_000_000,
            missing: Vec::new(),
            swap_every: 0,
        }
    }

    fn is_missing(&self, seq: u64) -> bool {
        self.missing.iter().any(|r| r.contains(seq))
    }

    fn ts(&self, seq: u64) -> u64 {
        let offset =
            u128::from(seq.saturating_sub(1)) * 1_000_000_000 / u128::from(self.rate.max(1));
        self.start_ns
            .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
    }

    /// Writes the capture, ending with a heartbeat that names the next sequence (so loss
    /// at the tail is known), and returns the ranges missing from it, merged and in order.
    ///
    /// # Errors
    ///
    /// Writing failed, or the session name is not valid.
    pub fn write<W: Write>(&self, out: W) -> io::Result<Vec<SeqRange>> {
        let session = Session::from_ascii(self.session.as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut writer = PcapWriter::new(out)?;
        let mut held: Option<(u64, Vec<u8>)> = None;
        let mut packets = 0u64;
        let mut buf = [0u8; MAX_PAYLOAD];
        let mut message = Vec::new();
        let mut seq = 1;
        let mut absent = Vec::new();
        while seq <= self.messages {
            if self.is_missing(seq) {
                match absent.last_mut() {
                    Some(SeqRange { to, .. }) if *to + 1 == seq => *to = seq,
                    _ => absent.push(SeqRange::new(seq, seq)),
                }
                seq += 1;
                continue;
            }
            let ts = self.ts(seq);
            let mut packet = PacketWriter::new(&mut buf, session, seq).map_err(invalid)?;
            while seq <= self.messages
                && !self.is_missing(seq)
                && packet.message_count() < self.per_packet.max(1)
            {
                synthetic_message(seq, 16, &mut message);
                if packet.remaining() < message.len() + 2 {
                    break;
                }
                packet.push(&message).map_err(invalid)?;
                seq += 1;
            }
            let len = packet.finish();
            let payload = buf.get(..len).unwrap_or_default().to_vec();
            packets += 1;
            // A packet to swap with its successor waits for it.
            match held.take() {
                Some((held_ts, held_payload)) => {
                    writer.write_udp(ts, SOURCE, self.group, &payload)?;
                    writer.write_udp(held_ts.max(ts), SOURCE, self.group, &held_payload)?;
                }
                None if self.swap_every > 0 && packets.is_multiple_of(self.swap_every) => {
                    held = Some((ts, payload));
                }
                None => writer.write_udp(ts, SOURCE, self.group, &payload)?,
            }
        }
        if let Some((held_ts, held_payload)) = held {
            writer.write_udp(held_ts, SOURCE, self.group, &held_payload)?;
        }
        let end_ts = self.ts(self.messages.saturating_add(1));
        let len = PacketWriter::new(&mut buf, session, self.messages.saturating_add(1))
            .map_err(invalid)?
            .finish();
        writer.write_udp(
            end_ts,
            SOURCE,
            self.group,
            buf.get(..len).unwrap_or_default(),
        )?;
        writer.into_inner()?;
        Ok(absent)
    }
}

/// Bytes of records in each zstd frame of [`write_zstd_bomb`] (16 MiB).
const BOMB_FRAME: u64 = 16 << 20;

/// Writes a zstd-compressed capture that expands to at least `expanded` bytes and returns
/// its record count: the pcap file header in one frame, then one 16 MiB run of the same
/// MoldUDP64 datagram to `group` compressed once and repeated frame after frame. A
/// replay of it delivers the datagram's messages once and counts the rest as duplicates.
///
/// # Errors
///
/// Writing or compressing failed.
pub fn write_zstd_bomb<W: Write>(
    mut out: W,
    group: SocketAddrV4,
    expanded: u64,
) -> io::Result<u64> {
    let session = Session::from_ascii(b"BOMB000001").map_err(invalid)?;
    let mut buf = [0u8; MAX_PAYLOAD];
    let mut packet = PacketWriter::new(&mut buf, session, 1).map_err(invalid)?;
    let mut message = Vec::new();
    for seq in 1..=8 {
        synthetic_message(seq, 16, &mut message);
        packet.push(&message).map_err(invalid)?;
    }
    let len = packet.finish();
    let payload = buf.get(..len).unwrap_or_default();
    let mut writer = PcapWriter::new(Vec::new())?;
    writer.write_udp(1_700_000_000_000_000_000, SOURCE, group, payload)?;
    let file = writer.into_inner()?;
    let (header, record) = file.split_at(file.len().min(24));
    // The same record byte for byte (the writer numbers its IP datagrams), so the run
    // compresses to almost nothing.
    let per_frame = BOMB_FRAME.div_ceil(record.len().max(1) as u64);
    let records = record.repeat(usize::try_from(per_frame).unwrap_or(0));
    out.write_all(&zstd::bulk::compress(header, 3)?)?;
    let frame = zstd::bulk::compress(&records, 19)?;
    let mut written = 0u64;
    let mut total = 0u64;
    while written < expanded {
        out.write_all(&frame)?;
        written += records.len() as u64;
        total += per_frame;
    }
    out.flush()?;
    Ok(total)
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}
