//! A capture holding both lines of an A/B feed replays as one stream: the first copy of
//! each message is taken, and only what both lines lost is a gap.

use std::net::{Ipv4Addr, SocketAddrV4};

use gapless::capture::{CaptureReader, PcapWriter};
use gapless::drive::replay::{ReplayOptions, replay_reader};
use gapless::protocol::moldudp64::{PacketWriter, Session};
use gapless::sequencer::SeqRange;
use gapless::venue::Wire;

const A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 8, 1), 30_801);
const B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 8, 2), 30_801);
const PACKETS: u64 = 2_000;
const PER_PACKET: u64 = 4;

/// Line A loses every 7th packet, line B every 11th: both lose every 77th.
fn capture() -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    let src = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 40_000);
    let session = Session(*b"LINES00001");
    for p in 0..PACKETS {
        let first = 1 + p * PER_PACKET;
        let mut buf = vec![0u8; 1400];
        let mut pw = PacketWriter::new(&mut buf, session, first).unwrap();
        for seq in first..first + PER_PACKET {
            pw.push(&seq.to_be_bytes()).unwrap();
        }
        let n = pw.finish();
        let at = 1_000_000_000 + p * 20_000;
        if p % 7 != 3 {
            w.write_udp(at, src, A, &buf[..n]).unwrap();
        }
        if p % 11 != 3 {
            w.write_udp(at + 300_000, src, B, &buf[..n]).unwrap();
        }
    }
    w.into_inner().unwrap()
}

fn options(channels: Vec<Vec<SocketAddrV4>>) -> ReplayOptions {
    ReplayOptions {
        wire: Some(Wire::MoldUdp64),
        destinations: Vec::new(),
        channels,
        venue: "ab".into(),
        speed: None,
        from_start: true,
        progress: false,
    }
}

#[test]
fn both_lines_of_a_capture_replay_as_one_stream_with_only_what_both_lost_missing() {
    let reader = CaptureReader::from_bytes(capture()).unwrap();
    let summary = replay_reader(reader, &options(vec![vec![A, B]]), None).unwrap();
    assert_eq!(summary.streams.len(), 1, "{summary}");
    let both: Vec<SeqRange> = (0..PACKETS)
        .filter(|p| p % 77 == 3)
        .map(|p| SeqRange::new(1 + p * PER_PACKET, p * PER_PACKET + PER_PACKET))
        .collect();
    let s = &summary.streams[0];
    assert_eq!(s.gaps, both);
    assert_eq!(
        s.delivered,
        PACKETS * PER_PACKET - both.len() as u64 * PER_PACKET
    );
    assert_eq!(s.stats.sequencer.duplicates, 0);
    assert!(s.stats.arbitrated > PACKETS * PER_PACKET / 2);

    // Each line on its own is a stream of its own, with its own line's loss.
    let reader = CaptureReader::from_bytes(capture()).unwrap();
    let summary = replay_reader(reader, &options(Vec::new()), None).unwrap();
    let lost: Vec<u64> = summary
        .streams
        .iter()
        .map(|s| s.gaps.iter().map(SeqRange::len).sum())
        .collect();
    let per_line = |k: u64| (0..PACKETS).filter(|p| p % k == 3).count() as u64 * PER_PACKET;
    assert_eq!(lost, vec![per_line(7), per_line(11)]);
}
