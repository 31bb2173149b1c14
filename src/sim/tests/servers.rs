//! The re-request and snapshot servers over real loopback sockets.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use crate::protocol::moldudp64::{BLOCK_HEADER_LEN, Packet, Request, Session};
use crate::protocol::soupbintcp::{Frame, LoginAccepted, RejectReason, parse_frame};

use super::{SoupClient, config, run_to_end};
use crate::sim::itch::{MessageSource, synthetic_message, synthetic_sequence};
use crate::sim::{MoldSim, MoldSimConfig};

/// A unicast client socket for the re-request server.
fn requester() -> UdpSocket {
    let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    socket
}

/// Sends `datagram` and returns the answer, or `None` after 300 ms.
fn ask(socket: &UdpSocket, sim: &MoldSim, datagram: &[u8]) -> Option<Vec<u8>> {
    socket.send_to(datagram, sim.rerequest_addr()).unwrap();
    let mut buf = [0u8; 65_536];
    socket.recv(&mut buf).ok().map(|len| buf[..len].to_vec())
}

fn request(session: Session, sequence: u64, count: u16) -> [u8; 20] {
    Request {
        session,
        sequence,
        count,
    }
    .to_bytes()
}

/// 3,000 messages with a 1,000-message history and requests of at most 500.
fn finished_sim(n: u8) -> (MoldSim, MoldSimConfig) {
    let mut config = config(n);
    config.count = 3_000;
    config.rate = None;
    config.history = 1_000;
    config.max_request = 500;
    (run_to_end(config.clone()), config)
}

#[test]
fn rerequest_answers_one_packet_from_the_requested_sequence() {
    let (sim, config) = finished_sim(20);
    let socket = requester();
    let session = sim.session();
    let answer = ask(&socket, &sim, &request(session, 2_500, 5)).unwrap();
    let packet = Packet::decode(&answer).unwrap();
    assert_eq!(
        (packet.session(), packet.sequence(), packet.message_count()),
        (session, 2_500, 5)
    );
    for (sequence, message) in packet.sequenced_messages() {
        assert_eq!(synthetic_sequence(message), Some(sequence));
    }
    // Larger than one packet: as many as completely fit, no more.
    let answer = ask(&socket, &sim, &request(session, 2_100, 500)).unwrap();
    let packet = Packet::decode(&answer).unwrap();
    assert_eq!(packet.sequence(), 2_100);
    assert!(answer.len() <= config.max_payload);
    let count = u64::from(packet.message_count());
    assert!((1..500).contains(&count));
    let mut next = Vec::new();
    synthetic_message(2_100 + count, 100, &mut next);
    assert!(answer.len() + BLOCK_HEADER_LEN + next.len() > config.max_payload);
    // Near the end of the session: what exists.
    let answer = ask(&socket, &sim, &request(session, 2_999, 10)).unwrap();
    assert_eq!(Packet::decode(&answer).unwrap().message_count(), 2);
    let stats = sim.stats();
    assert_eq!(
        (stats.requests_served, stats.messages_resent),
        (3, 5 + count + 2)
    );
    sim.stop().unwrap();
}

/// A client that asks for a whole gap at once, more than `--max-request`, gets what fits
/// one packet from its first sequence, asks again for the rest, and so recovers it all.
#[test]
fn rerequest_for_more_than_the_maximum_is_answered_with_what_fits() {
    let (sim, config) = finished_sim(24);
    let socket = requester();
    let session = sim.session();
    // The history holds 2,001..=3,000; the gap is 2,001..=2,900, 900 > 500 messages.
    let (mut next, last) = (2_001u64, 2_900u64);
    let mut got = Vec::new();
    for _ in 0..100 {
        if next > last {
            break;
        }
        let count = u16::try_from(last - next + 1).unwrap();
        let answer = ask(&socket, &sim, &request(session, next, count))
            .unwrap_or_else(|| panic!("no answer to {count} from {next}"));
        assert!(answer.len() <= config.max_payload);
        let packet = Packet::decode(&answer).unwrap();
        assert_eq!(packet.sequence(), next);
        assert!((1..=500).contains(&packet.message_count()));
        for (sequence, message) in packet.sequenced_messages() {
            assert_eq!(synthetic_sequence(message), Some(sequence));
            got.push(sequence);
        }
        next += u64::from(packet.message_count());
    }
    assert_eq!(
        got,
        (2_001..=2_900).collect::<Vec<_>>(),
        "the whole gap, once, in order"
    );
    let stats = sim.stats();
    assert_eq!(stats.requests_dropped(), 0);
    assert!(stats.requests_capped >= 1, "{stats:?}");
    assert_eq!(stats.requests_served, stats.requests_received);
    sim.stop().unwrap();
}

#[test]
fn rerequest_drops_what_it_will_not_serve() {
    let (sim, _) = finished_sim(21);
    let socket = requester();
    let session = sim.session();
    let other = Session::from_ascii(b"OTHER").unwrap();
    for datagram in [
        request(other, 2_500, 1).to_vec(),         // wrong session
        request(session, 100, 1).to_vec(),         // evicted from the history
        request(session, 3_001, 1).to_vec(),       // not published yet
        request(session, 2_500, 0).to_vec(),       // count 0
        request(session, 2_500, 1)[..19].to_vec(), // short
    ] {
        assert_eq!(ask(&socket, &sim, &datagram), None);
    }
    let stats = sim.stats();
    assert_eq!(stats.requests_wrong_session, 1);
    assert_eq!(stats.requests_out_of_range, 2);
    assert_eq!(stats.requests_malformed, 2);
    assert_eq!((stats.requests_received, stats.requests_dropped()), (5, 5));
    assert_eq!(stats.requests_served, 0);
    // Down, then up again.
    sim.set_rerequest_down(true);
    assert_eq!(ask(&socket, &sim, &request(session, 2_500, 1)), None);
    sim.set_rerequest_down(false);
    assert!(ask(&socket, &sim, &request(session, 2_500, 1)).is_some());
    assert_eq!(sim.injected().requests_while_down, 1);
    sim.stop().unwrap();
}

#[test]
fn rerequest_drop_answer_fault_is_recorded() {
    let mut config = config(22);
    config.count = 100;
    config.faults.drop_answers = 1.0;
    let sim = run_to_end(config);
    let socket = requester();
    for _ in 0..3 {
        assert_eq!(ask(&socket, &sim, &request(sim.session(), 1, 10)), None);
    }
    assert_eq!(sim.injected().answers_dropped, 3);
    assert_eq!(sim.stats().answers_dropped, 3);
    sim.stop().unwrap();
}

#[test]
fn snapshot_login_rejected() {
    let mut config = config(23);
    config.count = 10;
    let sim = run_to_end(config);
    let cases = [
        ("sim", "wrong", Session::BLANK, RejectReason::NotAuthorized),
        ("nobody", "sim", Session::BLANK, RejectReason::NotAuthorized),
        (
            "sim",
            "sim",
            Session::from_ascii(b"OLD").unwrap(),
            RejectReason::SessionNotAvailable,
        ),
    ];
    for (user, password, session, reason) in cases {
        let mut client = SoupClient::connect(sim.snapshot_addr());
        client.login(user, password, session);
        let raw = client.next_raw().unwrap();
        assert_eq!(
            parse_frame(&raw).unwrap().unwrap().0,
            Frame::LoginRejected(reason)
        );
        assert_eq!(client.next_raw(), None);
    }
    assert_eq!(sim.stats().logins_rejected, 3);
    sim.stop().unwrap();
}

/// Logs in, reads the snapshot up to its end marker, logs out and reads to
/// the end of session; returns the session, the book messages and the
/// sequence to resume from.
fn take_snapshot(sim: &MoldSim, session: Session) -> (Session, Vec<Vec<u8>>, u64) {
    let mut client = SoupClient::connect(sim.snapshot_addr());
    client.login("sim", "sim", session);
    let raw = client.next_raw().unwrap();
    let Frame::LoginAccepted(LoginAccepted {
        session,
        sequence: 1,
    }) = parse_frame(&raw).unwrap().unwrap().0
    else {
        panic!("expected login accepted");
    };
    let mut book = Vec::new();
    let resume = loop {
        let raw = client.next_raw().unwrap();
        let frame = parse_frame(&raw).unwrap().unwrap().0;
        if let Some(next) = frame.end_of_snapshot() {
            break next;
        }
        let Frame::SequencedData(message) = frame else {
            panic!("unexpected {frame:?}");
        };
        book.push(message.to_vec());
    };
    client.send(&Frame::LogoutRequest);
    let raw = client.next_raw().unwrap();
    assert_eq!(parse_frame(&raw).unwrap().unwrap().0, Frame::EndOfSession);
    assert_eq!(client.next_raw(), None);
    (session, book, resume)
}

/// The last synthetic message per instrument among sequences `1..resume`.
fn expected_book(resume: u64, instruments: u16) -> BTreeMap<u16, Vec<u8>> {
    let source = MessageSource::Synthetic { instruments };
    let mut book = BTreeMap::new();
    let mut message = Vec::new();
    for sequence in 1..resume {
        synthetic_message(sequence, instruments, &mut message);
        book.insert(source.instrument(&message).unwrap(), message.clone());
    }
    book
}

#[test]
fn snapshot_after_the_run_carries_the_book_and_end_marker() {
    let mut config = config(24);
    config.source = crate::sim::Source::Synthetic { instruments: 50 };
    let sim = run_to_end(config);
    let (session, book, resume) = take_snapshot(&sim, Session::BLANK);
    assert_eq!((session, resume), (sim.session(), 2_001));
    let expected: Vec<Vec<u8>> = expected_book(resume, 50).into_values().collect();
    assert_eq!(book, expected);
    // Asking for the current session by name works too.
    assert_eq!(take_snapshot(&sim, sim.session()).2, 2_001);
    let stats = sim.stats();
    assert_eq!((stats.snapshots_sent, stats.snapshot_messages), (2, 100));
    sim.stop().unwrap();
}

#[test]
fn snapshot_mid_run_is_consistent_with_its_sequence() {
    let mut config = config(25);
    config.count = 1_000_000;
    config.rate = Some(20_000.0);
    config.source = crate::sim::Source::Synthetic { instruments: 500 };
    let sim = MoldSim::start(config).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let (_, book, resume) = take_snapshot(&sim, Session::BLANK);
    assert!(resume > 1 && !sim.is_finished());
    let expected: Vec<Vec<u8>> = expected_book(resume, 500).into_values().collect();
    assert_eq!(book, expected);
    sim.stop().unwrap();
}

#[test]
fn snapshot_server_sends_heartbeats_then_ends_the_session() {
    let mut config = config(26);
    config.count = 10;
    config.snapshot_heartbeat = Duration::from_millis(50);
    config.snapshot_linger = Duration::from_millis(400);
    let sim = run_to_end(config);
    let mut client = SoupClient::connect(sim.snapshot_addr());
    client.login("sim", "sim", Session::BLANK);
    let mut kinds = Vec::new();
    while let Some(raw) = client.next_raw() {
        kinds.push(raw[2]);
    }
    let heartbeats = kinds.iter().filter(|k| **k == b'H').count();
    assert!(heartbeats >= 3, "{kinds:?}");
    assert_eq!(kinds.first(), Some(&b'A'));
    assert_eq!(kinds.last(), Some(&b'Z'));
    sim.stop().unwrap();
}
