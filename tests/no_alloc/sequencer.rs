//! Steady-state ingest allocates nothing: a counting global allocator watches the detector
//! through in-order delivery, reordering, gaps, backfill and heartbeats, and a venue
//! session through a fill that releases its whole reorder window.

use gapless::sequencer::{Detector, Frame, StreamConfig};

use super::allocations;

#[test]
fn steady_state_ingest_allocates_nothing() {
    let mut detector: Detector<u64> = Detector::new();
    let a = detector.add_stream(StreamConfig::point(1024));
    let b = detector.add_stream(StreamConfig::range(1024));
    let mut out = Vec::with_capacity(4096);
    let mut seq = 1u64;
    let mut range_next = 1u64;

    let before = allocations();
    for round in 0..2_000u64 {
        // In order.
        for _ in 0..8 {
            detector.ingest(a, 0, Frame::point(seq, seq), &mut out);
            seq += 1;
        }
        // Reordered pair.
        detector.ingest(a, 0, Frame::point(seq + 1, seq + 1), &mut out);
        detector.ingest(a, 0, Frame::point(seq, seq), &mut out);
        seq += 2;
        // A gap filled by backfill, with the missing ranges walked as a requester would.
        detector.ingest(a, 0, Frame::point(seq + 3, seq + 3), &mut out);
        let missing: u64 = detector.missing(a).map(|r| r.len()).sum();
        assert_eq!(missing, 3);
        for k in 0..3 {
            let _ = detector.backfill(a, 0, Frame::point(seq + k, seq + k), &mut out);
        }
        seq += 4;
        // Tail loss revealed by a heartbeat, then filled.
        detector.heartbeat(a, 0, seq + 1);
        let _ = detector.backfill(a, 0, Frame::point(seq, seq), &mut out);
        seq += 1;
        // Range frames, including a straddling one.
        detector.ingest(
            b,
            0,
            Frame::range(range_next, range_next + 4, round),
            &mut out,
        );
        detector.ingest(
            b,
            0,
            Frame::range(range_next + 3, range_next + 9, round),
            &mut out,
        );
        range_next += 10;
        let _ = detector.stats(a);
        out.clear();
    }
    let allocations = allocations() - before;
    assert_eq!(
        allocations, 0,
        "steady-state ingest allocated {allocations} times"
    );
    assert!(detector.is_trading_authorized(a));
    assert!(detector.is_trading_authorized(b));
    assert_eq!(detector.stats(a).delivered, seq - 1);
}

/// A fill that releases a whole reorder window at once delivers through the session's
/// output buffer without growing it.
#[test]
fn a_fill_that_releases_a_full_reorder_window_allocates_nothing() {
    use gapless::protocol::moldudp64::{PacketWriter, Session};
    use gapless::publish::Event;
    use gapless::time::{Mono, Wall};
    use gapless::venue::udp::LineSpec;
    use gapless::venue::{ChannelSpec, Emit, FeedSpec, UdpVenue, Via, Wire};

    struct Messages(u64);
    impl Emit for Messages {
        fn emit(&mut self, event: &Event<'_>) {
            if matches!(event, Event::Message { .. }) {
                self.0 += 1;
            }
        }
    }
    let channel = ChannelSpec::new("a", LineSpec::loopback("239.255.0.1:1".parse().unwrap()));
    let mut spec = FeedSpec::new(Wire::MoldUdp64, vec![channel]);
    // Not a power of two, so the ring (128 slots) is not what bounds the window.
    spec.window = 100;
    spec.max_buffered = 128;
    let mut session = UdpVenue::new("test", spec);
    let datagram = |seq: u64| {
        let mut buf = vec![0u8; 64];
        let mut w = PacketWriter::new(&mut buf, Session(*b"SESSION001"), seq).expect("fits");
        w.push(&seq.to_be_bytes()).expect("fits");
        let n = w.finish();
        buf.truncate(n);
        buf
    };
    let mut emit = Messages(0);
    let offer = |session: &mut UdpVenue, seq: u64, emit: &mut Messages| {
        session.on_datagram(
            Mono::ZERO,
            0,
            &datagram(seq),
            Wall::from_nanos(1),
            Via::Multicast,
            emit,
        );
    };
    offer(&mut session, 1, &mut emit);
    // 2 is late; the whole window after it (3..=102) arrives first.
    let last = 102;
    for seq in 3..=last {
        offer(&mut session, seq, &mut emit);
    }
    assert_eq!(session.stats(0).sequencer.buffered, 100);
    let fill = datagram(2);
    let before = allocations();
    session.on_datagram(
        Mono::ZERO,
        0,
        &fill,
        Wall::from_nanos(1),
        Via::Multicast,
        &mut emit,
    );
    assert_eq!(allocations() - before, 0, "the fill allocated");
    assert_eq!(emit.0, last, "1..={last} delivered once each");
}
