//! Replay at feed rates: generated MoldUDP64 captures with real gaps, from 2,500 to
//! 1,000,000 messages a second of capture time, one or eight messages a packet, replay with
//! exactly the ranges that are missing, whatever the rate.

use std::net::{Ipv4Addr, SocketAddrV4};

use gapless::capture::CaptureReader;
use gapless::drive::replay::{ReplayOptions, replay_reader};
use gapless::sequencer::SeqRange;
use gapless::sim::capture::FeedCapture;
use gapless::venue::Wire;

const MESSAGES: u64 = 200_000;

fn options() -> ReplayOptions {
    ReplayOptions {
        wire: Some(Wire::MoldUdp64),
        destinations: Vec::new(),
        channels: Vec::new(),
        venue: "gen".into(),
        speed: None,
        from_start: true,
        progress: false,
    }
}

#[test]
fn fast_feeds_replay_with_exactly_the_missing_ranges() {
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 7, 1), 30_701);
    let cases = [
        (2_500, 8),
        (10_000, 1),
        (10_000, 8),
        (40_000, 8),
        (100_000, 1),
        (1_000_000, 8),
    ];
    let mut wrong = Vec::new();
    for (rate, per_packet) in cases {
        let mut feed = FeedCapture::new(group, MESSAGES, rate);
        feed.per_packet = per_packet;
        // Neighbouring packets swap now and then: reordering that must not look like loss.
        feed.swap_every = 97;
        feed.missing = vec![
            SeqRange::new(1, 2),
            SeqRange::new(28_468, 28_470),
            SeqRange::new(50_000, 50_000),
            SeqRange::new(50_002, 50_009),
            SeqRange::new(90_000, 90_999),
            // Longer than the reorder window.
            SeqRange::new(110_000, 180_000),
            SeqRange::new(199_990, MESSAGES),
        ];
        let mut bytes = Vec::new();
        let missing = feed.write(&mut bytes).unwrap();
        assert_eq!(missing, feed.missing);
        let summary =
            replay_reader(CaptureReader::from_bytes(bytes).unwrap(), &options(), None).unwrap();
        let gaps: Vec<SeqRange> = summary.gaps().copied().collect();
        let lost: u64 = missing.iter().map(SeqRange::len).sum();
        let reported: u64 = gaps.iter().map(SeqRange::len).sum();
        if gaps != missing || summary.delivered != MESSAGES - lost {
            let shown: Vec<String> = gaps.iter().map(ToString::to_string).collect();
            wrong.push(format!(
                "{rate} messages/s, {per_packet} a packet: {reported} reported lost \
                 (missing {lost}), {} delivered: {}",
                summary.delivered,
                shown.join(" ")
            ));
        }
        assert_eq!(summary.streams.len(), 1);
        assert_eq!(summary.streams[0].stats.messages_lost, reported);
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}
