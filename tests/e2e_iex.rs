//! IEX-TP live, on the same rx path as MoldUDP64: segments sent by multicast through
//! 127.0.0.1 are delivered in order; with no retransmission configured, a gap leaves the
//! stream unsynced and says so, and a new session id is a new epoch.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gapless::daemon::fanout::Fanout;
use gapless::daemon::rx::{ChannelAddress, RxLoop, RxOptions, RxShared, UdpVenue};
use gapless::io::idle::IdleStrategy;
use gapless::io::socket::{MulticastSpec, open_multicast_sender};
use gapless::protocol::iex_tp::{self, Header};
use gapless::publish::{self, Consumer, Event, StreamState};
use gapless::venue::{ChannelSpec, FeedSpec, Wire};

const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 67, 1), 46701);

fn segment(session: u32, seq: u64, count: u64) -> Vec<u8> {
    let header = Header {
        message_protocol_id: 0x8003,
        channel_id: 1,
        session_id: session,
        stream_offset: 0,
        sequence: seq,
        send_time: 0,
        reserved: 0,
    };
    let mut buf = vec![0u8; 1500];
    let mut w = iex_tp::PacketWriter::new(&mut buf, header).unwrap();
    for s in seq..seq + count {
        w.push(format!("Q{s:012}").as_bytes()).unwrap();
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

/// Reads until `done` or the limit; returns (session epoch index, seq) of messages and
/// every state seen.
fn read_until(
    consumer: &mut Consumer,
    limit: Duration,
    mut done: impl FnMut(&[(usize, u64)], &[StreamState]) -> bool,
) -> (Vec<(usize, u64)>, Vec<StreamState>) {
    let (mut messages, mut states) = (Vec::new(), Vec::new());
    let mut epoch = 0;
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && !done(&messages, &states) {
        let got = consumer.pop(|e| match e {
            Event::Message { seq, payload, .. } => {
                assert_eq!(payload, format!("Q{seq:012}").as_bytes());
                messages.push((epoch, seq));
            }
            Event::State { state, .. } => {
                if state == StreamState::Unseen && !messages.is_empty() {
                    epoch += 1;
                }
                states.push(state);
            }
            _ => {}
        });
        if got.is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    (messages, states)
}

#[test]
fn iex_tp_live_in_order_gap_held_and_new_session() {
    let channel = ChannelSpec {
        name: "tops".into(),
        session: None,
        rerequest: Vec::new(),
        snapshot: None,
    };
    let mut spec = FeedSpec::new(Wire::IexTp, vec![channel]);
    spec.start_from = Some(1);
    let address = ChannelAddress {
        multicast: MulticastSpec {
            group: GROUP,
            interface: Ipv4Addr::LOCALHOST,
            source: None,
            rcvbuf: 1 << 20,
        },
    };
    let (venue, _) = UdpVenue::open("iex", spec, &[address]).unwrap();
    let (producer, mut consumer) = publish::channel(8 << 20, 1);
    let shared = RxShared::default();
    let options = RxOptions {
        idle: IdleStrategy::Block,
        ..RxOptions::default()
    };
    let rx = RxLoop::new(
        vec![venue],
        Vec::new(),
        Fanout::new(vec![producer]),
        options,
        shared.clone(),
    )
    .unwrap();
    let rx = std::thread::spawn(move || rx.run());
    let sender = open_multicast_sender(Ipv4Addr::LOCALHOST, 0).unwrap();

    // In order: 1..=300 in segments of 3.
    for seq in (1..=300).step_by(3) {
        sender.send_to(&segment(7, seq, 3), GROUP).unwrap();
    }
    let (messages, _) = read_until(&mut consumer, Duration::from_secs(10), |m, _| {
        m.len() >= 300
    });
    assert_eq!(messages, (1..=300).map(|s| (0, s)).collect::<Vec<_>>());

    // A lost segment: no retransmission here, so the stream is held unsynced and says so;
    // nothing after the gap is delivered as if continuous.
    sender.send_to(&segment(7, 304, 3), GROUP).unwrap();
    let (after_gap, states) = read_until(&mut consumer, Duration::from_secs(2), |_, s| {
        s.contains(&StreamState::DirtySyncPending)
    });
    assert!(
        after_gap.is_empty(),
        "nothing across the gap: {after_gap:?}"
    );
    assert_eq!(states.last(), Some(&StreamState::DirtySyncPending));

    // A new session id is a new epoch: the stream restarts from its first message.
    for seq in (1..=30).step_by(3) {
        sender.send_to(&segment(8, seq, 3), GROUP).unwrap();
    }
    let (new_session, states) =
        read_until(&mut consumer, Duration::from_secs(10), |m, _| m.len() >= 30);
    assert!(
        states.contains(&StreamState::Unseen),
        "the restart is announced"
    );
    assert_eq!(
        new_session.iter().map(|m| m.1).collect::<Vec<_>>(),
        (1..=30).collect::<Vec<_>>()
    );

    shared.stop.store(true, Ordering::Relaxed);
    let result = rx.join().unwrap().unwrap();
    let stats = result.venues[0].session().stats(0);
    assert_eq!(stats.new_sessions, 1);
    assert_eq!(stats.sequencer.gaps, 1, "the gap was counted");
}
