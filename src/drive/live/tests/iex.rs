//! IEX-TP live, on the same rx path as MoldUDP64: segments sent by multicast through
//! 127.0.0.1 are delivered in order; with no retransmission configured, a gap leaves the
//! stream unsynced and says so, and a new session id is a new epoch.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use crate::io::idle::IdleStrategy;
use crate::io::socket::open_multicast_sender;
use crate::protocol::iex_tp::{self, Header};
use crate::publish::{Consumer, Event, StreamState};
use crate::venue::Wire;

use super::udp;

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
    let mut handler = udp::start(
        udp::spec(Wire::IexTp, GROUP, None),
        IdleStrategy::Block,
        8 << 20,
        None,
    );
    let consumer = &mut handler.consumer;
    let sender = open_multicast_sender(Ipv4Addr::LOCALHOST, 0).unwrap();

    // In order: 1..=300 in segments of 3.
    for seq in (1..=300).step_by(3) {
        sender.send_to(&segment(7, seq, 3), GROUP).unwrap();
    }
    let (messages, _) = read_until(consumer, Duration::from_secs(10), |m, _| m.len() >= 300);
    assert_eq!(messages, (1..=300).map(|s| (0, s)).collect::<Vec<_>>());

    // A lost segment: no retransmission here, so the stream is held unsynced and says so;
    // nothing after the gap is delivered as if continuous.
    sender.send_to(&segment(7, 304, 3), GROUP).unwrap();
    let (after_gap, states) = read_until(consumer, Duration::from_secs(2), |_, s| {
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
    let (new_session, states) = read_until(consumer, Duration::from_secs(10), |m, _| m.len() >= 30);
    assert!(
        states.contains(&StreamState::Unseen),
        "the restart is announced"
    );
    assert_eq!(
        new_session.iter().map(|m| m.1).collect::<Vec<_>>(),
        (1..=30).collect::<Vec<_>>()
    );

    let result = handler.stop();
    let stats = result.venues[0].udp().expect("a udp venue").stats(0);
    assert_eq!(stats.new_sessions, 1);
    assert_eq!(stats.sequencer.gaps, 1, "the gap was counted");
}
