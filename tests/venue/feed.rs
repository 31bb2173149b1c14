//! Scenario tests of the MoldUDP64 / IEX-TP venue session, driven in-process with a
//! virtual clock and a scripted re-request server: loss, reordering, duplicates, partial
//! answers, dead servers, snapshot fallback, session restarts, heartbeats, end of session,
//! hostile sequence numbers and malformed datagrams.

use std::net::SocketAddr;

use gapless::protocol::moldudp64::{self, PacketWriter, Request, Session};
use gapless::publish::{Event, StreamState as Published};
use gapless::sequencer::StreamState;
use gapless::time::{Mono, Wall};
use gapless::venue::udp::LineSpec;
use gapless::venue::{
    ChannelSpec, FeedSpec, Fetch, FetchId, FetchReply, GapPolicy, IoRequest, LostReason, Notice,
    SessionKey, SnapshotSpec, UdpVenue, Venue, Via, Wire,
};

const MS: u64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Msg {
        seq: u64,
        snapshot: bool,
        payload: Vec<u8>,
    },
    Gap(u64, u64),
    State(Published),
    SnapshotBegin,
    SnapshotEnd(u64),
}

fn record(events: &mut Vec<Seen>) -> impl FnMut(&Event<'_>) + '_ {
    move |e: &Event<'_>| {
        let seen = match *e {
            Event::Message {
                seq,
                snapshot,
                payload,
                ..
            } => Seen::Msg {
                seq,
                snapshot,
                payload: payload.to_vec(),
            },
            Event::Gap { from, to, .. } => Seen::Gap(from, to),
            Event::State { state, .. } => Seen::State(state),
            Event::SnapshotBegin { .. } => Seen::SnapshotBegin,
            Event::SnapshotEnd { next, .. } => Seen::SnapshotEnd(next),
            _ => return,
        };
        events.push(seen);
    }
}

pub(crate) fn message(seq: u64) -> Vec<u8> {
    let mut m = vec![b'A'];
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend(std::iter::repeat_n((seq % 251) as u8, (seq % 23) as usize));
    m
}

fn session(name: &str) -> Session {
    Session::from_ascii(name.as_bytes()).unwrap()
}

/// Packs messages `first..first+count` of `session` into one datagram.
pub(crate) fn packet(s: Session, first: u64, count: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 1400];
    let mut w = PacketWriter::new(&mut buf, s, first).unwrap();
    for seq in first..first + count {
        w.push(&message(seq)).unwrap();
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

fn heartbeat(s: Session, next: u64) -> Vec<u8> {
    let mut buf = [0u8; 20];
    let n = moldudp64::encode_heartbeat(&mut buf, s, next).unwrap();
    buf[..n].to_vec()
}

fn end_of_session(s: Session, next: u64) -> Vec<u8> {
    let mut buf = [0u8; 20];
    let n = moldudp64::encode_end_of_session(&mut buf, s, next).unwrap();
    buf[..n].to_vec()
}

/// A snapshot the venue asked for.
struct Task {
    id: u64,
    session: SessionKey,
}

/// A venue session plus a scripted re-request server and a virtual clock.
struct Harness {
    feed: UdpVenue,
    events: Vec<Seen>,
    now: u64,
    session: Session,
    published_to: u64,
    server_alive: bool,
    answer_limit: u64,
    /// Sessions published before the current one, with their last sequence: the server
    /// still answers for them.
    earlier: Vec<(Session, u64)>,
    /// The server is a peer's JetStream stream that holds the current session up to
    /// this sequence: it answers a request past it with a heartbeat giving the next one.
    peer_to: Option<u64>,
}

impl Harness {
    fn new(spec: FeedSpec) -> Self {
        Self {
            feed: UdpVenue::new("test", spec),
            events: Vec::new(),
            now: 1,
            session: session("TEST000001"),
            published_to: 0,
            server_alive: true,
            answer_limit: 8,
            earlier: Vec::new(),
            peer_to: None,
        }
    }

    fn datagram(&mut self, bytes: &[u8], via: Via) {
        self.now += 10_000;
        let mut sink = record(&mut self.events);
        self.feed.on_datagram(
            Mono::from_nanos(self.now),
            0,
            bytes,
            Wall::from_nanos(self.now),
            via,
            &mut sink,
        );
    }

    fn publish(&mut self, first: u64, count: u64) -> Vec<u8> {
        self.published_to = self.published_to.max(first + count - 1);
        packet(self.session, first, count)
    }

    /// Answers every queued request as the venue's server would: one packet, at most
    /// `answer_limit` messages, only for the current session and what was published.
    fn serve(&mut self) {
        while let Some(tx) = self.feed.poll_transmit() {
            let req = Request::decode(&tx.bytes[..tx.len]).unwrap();
            let published_to = if req.session == self.session {
                self.published_to
            } else if let Some(&(_, to)) = self.earlier.iter().find(|(s, _)| *s == req.session) {
                to
            } else {
                continue;
            };
            if !self.server_alive {
                continue;
            }
            let published_to = match self.peer_to {
                Some(head) if req.sequence > head => {
                    let not_yet = heartbeat(req.session, head + 1);
                    self.datagram(&not_yet, Via::Unicast);
                    continue;
                }
                Some(head) => published_to.min(head),
                None => published_to,
            };
            if req.sequence > published_to {
                continue;
            }
            let count = u64::from(req.count)
                .min(self.answer_limit)
                .min(published_to - req.sequence + 1);
            let answer = packet(req.session, req.sequence, count);
            self.datagram(&answer, Via::Unicast);
        }
    }

    /// Advances the clock in steps, firing timers and serving requests.
    fn run_for(&mut self, ns: u64) {
        let end = self.now + ns;
        while self.now < end {
            self.now = match self.feed.poll_timeout().map(Mono::as_nanos) {
                Some(t) if t > self.now && t <= end => t,
                _ => (self.now + MS).min(end),
            };
            {
                let mut sink = record(&mut self.events);
                self.feed
                    .handle_timeout(Mono::from_nanos(self.now), &mut sink);
            }
            self.serve();
        }
    }

    /// The snapshot fetch the venue asked for, if any.
    fn poll_snapshot(&mut self) -> Option<Task> {
        while let Some(request) = self.feed.poll_io() {
            if let IoRequest::Fetch {
                id,
                what: Fetch::Soup { session, .. },
                ..
            } = request
            {
                return Some(Task {
                    id: id.0,
                    session: SessionKey(session),
                });
            }
        }
        None
    }

    fn snapshot(&mut self, id: u64, reply: FetchReply<'_>) {
        let mut sink = record(&mut self.events);
        self.feed
            .handle_fetch(Mono::from_nanos(self.now), FetchId(id), reply, &mut sink);
    }

    fn finish(&mut self) {
        let mut sink = record(&mut self.events);
        self.feed.handle_end(Mono::from_nanos(self.now), &mut sink);
    }

    fn delivered(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Seen::Msg {
                    seq,
                    snapshot: false,
                    payload,
                } => {
                    assert_eq!(payload, &message(*seq), "payload of {seq} intact");
                    Some(*seq)
                }
                _ => None,
            })
            .collect()
    }

    fn states(&self) -> Vec<Published> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Seen::State(s) => Some(*s),
                _ => None,
            })
            .collect()
    }
}

/// A channel that expects the harness's first session (as a configured `session` does):
/// its datagrams are taken from the first on, and any other session must be confirmed.
fn spec(rerequest: bool, snapshot: bool) -> FeedSpec {
    let server: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let channel = ChannelSpec {
        name: "a".into(),
        lines: vec![LineSpec::loopback("239.255.0.1:1".parse().unwrap())],
        session: Some(SessionKey(*b"TEST000001")),
        rerequest: if rerequest { vec![server] } else { vec![] },
        peer_stores: Vec::new(),
        resume: None,
        snapshot: snapshot.then(|| SnapshotSpec {
            addr: "127.0.0.1:2".parse().unwrap(),
            username: "u".into(),
            password: "p".into(),
        }),
    };
    let mut spec = FeedSpec::new(Wire::MoldUdp64, vec![channel]);
    spec.window = 1024;
    spec.max_buffered = 1024;
    spec.arena_datagrams = 256;
    spec.policy.reorder_delay_ns = MS;
    spec.policy.request_timeout_ns = 20 * MS;
    spec.policy.retry_budget = 3;
    spec.max_replay = 5_000;
    spec
}

/// Checks `delivered` is exactly `from..=to`, reporting the first difference only.
fn assert_exactly(delivered: &[u64], from: u64, to: u64) {
    let want: Vec<u64> = (from..=to).collect();
    if let Some(i) = (0..delivered.len().max(want.len())).find(|&i| delivered.get(i) != want.get(i))
    {
        panic!(
            "delivered {} messages, want {}; first difference at index {i}: got {:?}, want {:?}",
            delivered.len(),
            want.len(),
            delivered.get(i),
            want.get(i)
        );
    }
}

#[test]
fn in_order_packets_deliver_every_message_once() {
    let mut h = Harness::new(spec(true, false));
    for first in (1..=100).step_by(5) {
        let p = h.publish(first, 5);
        h.datagram(&p, Via::Multicast);
    }
    assert_exactly(&h.delivered(), 1, 100);
    assert_eq!(h.feed.state(0), StreamState::Synced);
    assert_eq!(h.states(), [Published::Synced]);
    assert_eq!(h.feed.stats(0).requests, 0);
}

#[test]
fn loss_reorder_and_duplicates_are_repaired_with_partial_answers() {
    let mut s = spec(true, false);
    s.start_from = Some(1);
    let mut h = Harness::new(s);
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut next = |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let mut held: Option<Vec<u8>> = None;
    let mut first = 1;
    let mut lost = 0;
    while first <= 3_000 {
        let count = 1 + next(6);
        let p = h.publish(first, count);
        first += count;
        match next(100) {
            0..=4 => lost += 1, // lost on the wire
            5..=7 => {
                // Reordered: sent after the next packet.
                if let Some(old) = held.replace(p) {
                    h.datagram(&old, Via::Multicast);
                }
                continue;
            }
            8..=9 => {
                h.datagram(&p, Via::Multicast);
                h.datagram(&p, Via::Multicast);
            }
            _ => h.datagram(&p, Via::Multicast),
        }
        if let Some(old) = held.take() {
            h.datagram(&old, Via::Multicast);
        }
        h.run_for(100_000);
    }
    let hb = heartbeat(h.session, first);
    h.datagram(&hb, Via::Multicast);
    h.run_for(200 * MS);
    assert!(lost > 20, "the scenario must lose packets ({lost})");
    assert_exactly(&h.delivered(), 1, first - 1);
    let stats = h.feed.stats(0);
    assert!(stats.requests > 0 && stats.recovered > 0, "{stats:?}");
    assert_eq!(h.feed.state(0), StreamState::Synced);
    assert!(h.feed.missing(0).is_empty());
}

#[test]
fn tail_loss_is_revealed_only_by_a_heartbeat() {
    let mut h = Harness::new(spec(true, false));
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(11, 4);
    h.run_for(50 * MS);
    assert_exactly(&h.delivered(), 1, 10);
    assert_eq!(
        h.feed.state(0),
        StreamState::Synced,
        "nothing shows the loss yet"
    );
    let hb = heartbeat(h.session, 15);
    h.datagram(&hb, Via::Multicast);
    assert_eq!(h.feed.state(0), StreamState::DirtySyncPending);
    h.run_for(50 * MS);
    assert_exactly(&h.delivered(), 1, 14);
    assert_eq!(h.feed.state(0), StreamState::Synced);
}

#[test]
fn dead_server_falls_back_to_a_snapshot() {
    let mut h = Harness::new(spec(true, true));
    h.server_alive = false;
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(11, 5);
    let p = h.publish(16, 5);
    h.datagram(&p, Via::Multicast);
    h.run_for(200 * MS);
    let stats = h.feed.stats(0);
    assert!(stats.timeouts >= 3, "{stats:?}");
    let task = h.poll_snapshot().expect("snapshot wanted");
    assert_eq!(task.session, SessionKey(*h.session.as_bytes()));
    assert_eq!(h.feed.state(0), StreamState::ResetRequired);
    // Live data keeps arriving while the snapshot is fetched; it is kept, not delivered.
    let p = h.publish(21, 5);
    h.datagram(&p, Via::Multicast);
    h.snapshot(task.id, FetchReply::Message(b"book"));
    h.snapshot(task.id, FetchReply::End { next: 21 });
    assert_eq!(h.feed.state(0), StreamState::Synced);
    // Order: data, then the reset marker, the snapshot, then complete data after it.
    let tail: Vec<Seen> = h
        .events
        .iter()
        .skip_while(|e| !matches!(e, Seen::State(Published::ResetRequired)))
        .cloned()
        .collect();
    assert_eq!(tail[1], Seen::SnapshotBegin);
    assert_eq!(
        tail[2],
        Seen::Msg {
            seq: 0,
            snapshot: true,
            payload: b"book".to_vec()
        }
    );
    assert_eq!(tail[3], Seen::SnapshotEnd(21));
    let after: Vec<u64> = tail[4..]
        .iter()
        .filter_map(|e| match e {
            Seen::Msg { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(after, (21..=25).collect::<Vec<_>>());
    // 11..=20 are covered by the snapshot, not delivered as messages.
    let mut want: Vec<u64> = (1..=10).collect();
    want.extend(21..=25);
    assert_eq!(h.delivered(), want);
}

#[test]
fn hostile_sequence_is_bounded_and_resyncs() {
    let mut h = Harness::new(spec(true, true));
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    let hostile = packet(h.session, 6 + 1_000_000_000, 1);
    h.datagram(&hostile, Via::Multicast);
    assert_eq!(h.feed.state(0), StreamState::ResetRequired);
    assert_eq!(h.feed.stats(0).sequencer.buffered, 0);
    let task = h.poll_snapshot().expect("resync by snapshot");
    h.snapshot(task.id, FetchReply::End { next: 6 });
    let p = h.publish(6, 5);
    h.datagram(&p, Via::Multicast);
    assert_exactly(&h.delivered(), 1, 10);
    // The hostile packet's claim that 10^9 messages exist was dropped with the resync.
    assert_eq!(h.feed.stats(0).sequencer.missing, 0);
    assert_eq!(h.feed.state(0), StreamState::Synced);
}

#[test]
fn session_restart_is_a_reset_never_duplicates() {
    let mut h = Harness::new(spec(true, false));
    let p = h.publish(1, 50);
    h.datagram(&p, Via::Multicast);
    h.session = session("TEST000002");
    h.published_to = 0;
    // Unannounced: the new session is adopted on its third datagram in a row, and the
    // two before it, held meanwhile, are delivered first.
    for first in [1, 8] {
        let p = h.publish(first, 7);
        h.datagram(&p, Via::Multicast);
        assert_eq!(h.delivered().len(), 50, "held while unconfirmed");
    }
    let p = h.publish(15, 6);
    h.datagram(&p, Via::Multicast);
    let delivered = h.delivered();
    assert_eq!(delivered.len(), 70, "all 20 of the new session delivered");
    assert_eq!(&delivered[50..], (1..=20).collect::<Vec<_>>().as_slice());
    assert!(h.states().contains(&Published::Unseen));
    let stats = h.feed.stats(0);
    assert_eq!(stats.new_sessions, 1);
    assert_eq!(stats.packets, 4, "held datagrams are counted once");
    assert_eq!(
        stats.unconfirmed_session, 0,
        "the held datagrams were the new session"
    );
    // A straggler of the old session is stale, not a reset, and does not take the
    // channel back when the new session goes on.
    let old = packet(session("TEST000001"), 51, 1);
    h.datagram(&old, Via::Multicast);
    assert_eq!(h.delivered().len(), 70);
    let p = h.publish(21, 1);
    h.datagram(&p, Via::Multicast);
    assert_exactly(&h.delivered()[50..], 1, 21);
    let stats = h.feed.stats(0);
    assert_eq!((stats.new_sessions, stats.stale_session), (1, 1));
}

#[test]
fn after_end_of_session_the_next_session_is_adopted_at_once() {
    let mut h = Harness::new(spec(true, false));
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    let eos = end_of_session(h.session, 11);
    h.datagram(&eos, Via::Multicast);
    h.session = session("TEST000002");
    h.published_to = 0;
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    let delivered = h.delivered();
    assert_exactly(&delivered[10..], 1, 5);
    let stats = h.feed.stats(0);
    assert_eq!((stats.new_sessions, stats.unconfirmed_session), (1, 0));
}

#[test]
fn restart_loses_its_first_packet_and_recovers_it() {
    let mut h = Harness::new(spec(true, false));
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    h.session = session("TEST000002");
    h.published_to = 0;
    let _lost = h.publish(1, 5);
    for first in [6, 8, 10] {
        let p = h.publish(first, 2);
        h.datagram(&p, Via::Multicast);
    }
    h.run_for(20 * MS);
    let delivered = h.delivered();
    assert_eq!(&delivered[10..], (1..=11).collect::<Vec<_>>().as_slice());
}

#[test]
fn stray_datagrams_of_another_session_never_take_the_channel() {
    let mut h = Harness::new(spec(true, false));
    let stray = session("STRAY00001");
    let mut next = 1;
    for round in 0..20 {
        let p = h.publish(next, 4);
        h.datagram(&p, Via::Multicast);
        next += 4;
        // One or two datagrams of a session that does not belong here, between the
        // venue's own: counted, never adopted, nothing of the real stream lost.
        for i in 0..(1 + round % 2) {
            h.datagram(&packet(stray, 1 + i * 3, 3), Via::Multicast);
        }
        // An answer about the stray session is no evidence either.
        h.datagram(&packet(stray, 1, 1), Via::Unicast);
    }
    let p = h.publish(next, 1);
    h.datagram(&p, Via::Multicast);
    assert_exactly(&h.delivered(), 1, next);
    let stats = h.feed.stats(0);
    assert_eq!(stats.new_sessions, 0);
    assert_eq!(stats.unconfirmed_session, 30 + 20);
    assert_eq!(h.states(), [Published::Synced], "never reset");
    assert_eq!(h.feed.state(0), StreamState::Synced);
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000001")));
}

#[test]
fn without_a_configured_session_the_first_is_confirmed_too() {
    let mut s = spec(true, false);
    s.channels[0].session = None;
    s.start_from = Some(1);
    let mut h = Harness::new(s);
    // A stray heard before the venue: counted, and forgotten when the venue's datagrams
    // follow; the venue's first two are held until its third confirms the session.
    h.datagram(&packet(session("STRAY00001"), 1, 2), Via::Multicast);
    for first in [1, 4] {
        let p = h.publish(first, 3);
        h.datagram(&p, Via::Multicast);
        assert!(h.delivered().is_empty(), "held while unconfirmed");
    }
    let p = h.publish(7, 3);
    h.datagram(&p, Via::Multicast);
    assert_exactly(&h.delivered(), 1, 9);
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000001")));
    let stats = h.feed.stats(0);
    assert_eq!((stats.new_sessions, stats.unconfirmed_session), (0, 1));
}

#[test]
fn a_burst_of_strays_that_took_the_channel_gives_it_back_and_the_gap_is_recovered() {
    let mut h = Harness::new(spec(true, false));
    let real = h.session;
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    // Three datagrams in a row of another session look like a restart: adopted.
    let stray = session("STRAY00001");
    for first in [1, 4, 7] {
        h.datagram(&packet(stray, first, 3), Via::Multicast);
    }
    assert_eq!(h.feed.session(0), Some(SessionKey(*stray.as_bytes())));
    let strays_delivered = h.delivered().len() - 10;
    assert_eq!(
        strays_delivered, 9,
        "what a confirmed session sends is delivered"
    );
    // The real session goes on (11..=15 sent while the strays held the channel are not
    // seen): three of its datagrams in a row take the channel back, resuming at 11.
    let _unseen = h.publish(11, 5);
    for first in [16, 18, 20] {
        let p = h.publish(first, 2);
        h.datagram(&p, Via::Multicast);
    }
    assert_eq!(h.feed.session(0), Some(SessionKey(*real.as_bytes())));
    h.run_for(20 * MS);
    let delivered = h.delivered();
    assert_exactly(&delivered[..10], 1, 10);
    assert_exactly(&delivered[10 + strays_delivered..], 11, 21);
    let stats = h.feed.stats(0);
    assert_eq!(stats.new_sessions, 2);
    assert!(stats.recovered >= 5, "11..=15 re-requested: {stats:?}");
    assert_eq!(h.feed.state(0), StreamState::Synced);
}

#[test]
fn end_of_session_requests_what_is_missing_then_closes() {
    let mut h = Harness::new(spec(true, false));
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(11, 3);
    let eos = end_of_session(h.session, 14);
    h.datagram(&eos, Via::Multicast);
    assert_ne!(h.states().last(), Some(&Published::Closed));
    h.run_for(20 * MS);
    assert_exactly(&h.delivered(), 1, 13);
    assert_eq!(h.states().last(), Some(&Published::Closed));
    let requests = h.feed.stats(0).requests;
    h.datagram(&eos, Via::Multicast);
    h.run_for(20 * MS);
    assert_eq!(
        h.feed.stats(0).requests,
        requests,
        "nothing more is asked for"
    );
}

#[test]
fn without_recovery_a_gap_latches_the_stream_says_so_and_the_loop_goes_quiet() {
    let mut h = Harness::new(spec(false, false));
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(6, 1);
    let p = h.publish(7, 5);
    h.datagram(&p, Via::Multicast);
    h.run_for(100 * MS);
    assert_exactly(&h.delivered(), 1, 5);
    // gap_policy = "hold" with nothing to recover from: a clear state, told once, and no
    // timer left armed (a past deadline would spin the rx loop).
    assert_eq!(h.feed.state(0), StreamState::ResetRequired);
    assert_eq!(h.states().last(), Some(&Published::ResetRequired));
    assert_eq!(h.feed.stats(0).recovery_exhausted, 1);
    assert_eq!(h.feed.poll_timeout(), None, "{:?}", h.feed.armed_timers());
    let notices = notices(&mut h);
    assert!(
        notices.iter().any(|n| matches!(
            n,
            Notice::RecoveryExhausted {
                from: 6,
                missing: 1,
                servers: false,
                ..
            }
        )),
        "{notices:?}"
    );
    // More data changes nothing and arms nothing.
    let p = h.publish(12, 5);
    h.datagram(&p, Via::Multicast);
    h.run_for(100 * MS);
    assert_eq!(h.feed.poll_timeout(), None);
    assert_eq!(h.feed.stats(0).recovery_exhausted, 1);
}

fn notices(h: &mut Harness) -> Vec<Notice> {
    std::iter::from_fn(|| h.feed.poll_notice()).collect()
}

#[test]
fn a_dead_rerequest_server_is_given_up_within_its_budget_under_hold() {
    let mut h = Harness::new(spec(true, false));
    h.server_alive = false;
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(6, 1);
    for first in (7..=200).step_by(2) {
        let p = h.publish(first, 2);
        h.datagram(&p, Via::Multicast);
        h.run_for(MS);
    }
    h.run_for(500 * MS);
    let stats = h.feed.stats(0);
    // retry_budget 3: three requests time out, then the only server is given up.
    assert_eq!(stats.requests, 3, "{stats:?}");
    assert_eq!(stats.recovery_exhausted, 1);
    assert_eq!(h.feed.state(0), StreamState::ResetRequired);
    assert_exactly(&h.delivered(), 1, 5);
    assert_eq!(h.feed.poll_timeout(), None);
    assert!(
        notices(&mut h)
            .iter()
            .any(|n| matches!(n, Notice::RecoveryExhausted { servers: true, .. }))
    );
}

/// A peer's JetStream stream read back (a peer store) that has not stored a lost message
/// yet answers "not yet" with its head. While the head rises the channel waits, far past
/// its retry budget, and takes the message once the peer stored it; the same heartbeats
/// from a venue's server say nothing of its requests, and its budget runs out.
#[test]
fn a_peer_store_behind_is_waited_for_while_its_head_rises() {
    for peer in [true, false] {
        let mut s = spec(true, false);
        if peer {
            s.channels[0].peer_stores = s.channels[0].rerequest.clone();
        }
        let mut h = Harness::new(s);
        h.peer_to = Some(0);
        let p = h.publish(1, 5);
        h.datagram(&p, Via::Multicast);
        let _lost = h.publish(6, 1);
        for first in 7..=100 {
            let p = h.publish(first, 1);
            h.datagram(&p, Via::Multicast);
        }
        // The peer stores a message every 10 ms: it gets to 6 after 60 ms, which is three
        // request timeouts (the whole budget); it is done after a second.
        for head in 1..=100 {
            h.peer_to = Some(head);
            h.run_for(10 * MS);
        }
        let stats = h.feed.stats(0);
        if peer {
            assert_eq!(h.feed.state(0), StreamState::Synced, "{stats:?}");
            assert_exactly(&h.delivered(), 1, 100);
            assert_eq!(stats.recovery_exhausted, 0);
            assert!(stats.timeouts >= 3, "past the budget: {stats:?}");
            assert!(stats.not_yet >= stats.timeouts, "{stats:?}");
        } else {
            assert_eq!(h.feed.state(0), StreamState::ResetRequired, "{stats:?}");
            assert_eq!(stats.recovery_exhausted, 1);
            assert_eq!(stats.not_yet, 0);
        }
    }
}

#[test]
fn skip_declares_a_gap_lost_at_its_deadline_and_goes_on() {
    let mut s = spec(true, false);
    s.gap_policy = GapPolicy::Skip;
    s.gap_deadline_ns = 30 * MS;
    s.policy.retry_budget = 100;
    let mut h = Harness::new(s);
    h.server_alive = false;
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(6, 2);
    let mut first = 8;
    let mut at_deadline = None;
    while first <= 400 {
        let p = h.publish(first, 2);
        h.datagram(&p, Via::Multicast);
        first += 2;
        h.run_for(MS);
        if at_deadline.is_none() && h.events.iter().any(|e| matches!(e, Seen::Gap(..))) {
            at_deadline = Some(h.now);
        }
    }
    let order: Vec<&Seen> = h
        .events
        .iter()
        .filter(|e| matches!(e, Seen::Gap(..) | Seen::Msg { .. }))
        .collect();
    assert_eq!(order[5], &Seen::Gap(6, 7), "the gap, in its place");
    let mut want: Vec<u64> = (1..=5).collect();
    want.extend(8..first);
    assert_eq!(h.delivered(), want);
    let stats = h.feed.stats(0);
    assert_eq!((stats.gaps_lost, stats.messages_lost), (1, 2));
    assert_eq!(stats.recovery_exhausted, 0);
    assert_eq!(h.feed.state(0), StreamState::Synced);
    // Declared at its deadline (30 ms after it appeared, plus one step of the loop), not
    // when the retry budget of 100 would have run out.
    let opened = 10_000 * 3 + 1;
    let declared = at_deadline.unwrap() - opened;
    assert!((30 * MS..40 * MS).contains(&declared), "{declared} ns");
    let reported: Vec<Notice> = notices(&mut h);
    assert!(
        reported.iter().any(|n| matches!(
            n,
            Notice::GapsLost {
                from: 6,
                to: 7,
                reason: LostReason::Deadline,
                ..
            }
        )),
        "{reported:?}"
    );
    assert_eq!(h.feed.poll_timeout(), None);
}

#[test]
fn skip_with_a_live_server_recovers_before_the_deadline_and_loses_nothing() {
    let mut s = spec(true, false);
    s.gap_policy = GapPolicy::Skip;
    s.gap_deadline_ns = 100 * MS;
    let mut h = Harness::new(s);
    let mut first = 1;
    while first <= 600 {
        let p = h.publish(first, 3);
        if first % 30 != 1 || first == 1 {
            h.datagram(&p, Via::Multicast);
        }
        first += 3;
        h.run_for(MS);
    }
    let hb = heartbeat(h.session, first);
    h.datagram(&hb, Via::Multicast);
    h.run_for(50 * MS);
    assert_exactly(&h.delivered(), 1, first - 1);
    let stats = h.feed.stats(0);
    assert_eq!(stats.gaps_lost, 0, "{stats:?}");
    assert!(stats.recovered > 0);
}

#[test]
fn without_recovery_skip_reports_each_gap_and_the_loop_goes_quiet() {
    let mut s = spec(false, false);
    s.gap_policy = GapPolicy::Skip;
    let mut h = Harness::new(s);
    let mut first = 1;
    while first <= 300 {
        let p = h.publish(first, 3);
        if first % 30 != 4 {
            h.datagram(&p, Via::Multicast);
        }
        first += 3;
        h.run_for(MS);
    }
    h.run_for(10 * MS);
    let stats = h.feed.stats(0);
    assert_eq!((stats.gaps_lost, stats.messages_lost), (10, 30));
    assert_eq!(h.delivered().len() as u64, first - 1 - 30);
    assert_eq!(h.feed.state(0), StreamState::Synced);
    // Ten gaps, reported in at most a few rate-limited notices that add up: the last
    // report is due a second after the first.
    assert!(h.feed.poll_timeout().is_some());
    h.run_for(1_000 * MS);
    assert_eq!(h.feed.poll_timeout(), None, "{:?}", h.feed.armed_timers());
    let lost: Vec<(u64, u64)> = notices(&mut h)
        .iter()
        .filter_map(|n| match n {
            Notice::GapsLost {
                gaps,
                messages,
                reason: LostReason::NoRecoveryPath,
                ..
            } => Some((*gaps, *messages)),
            _ => None,
        })
        .collect();
    assert!(lost.len() <= 2, "{lost:?}");
    let (gaps, messages) = lost.iter().fold((0, 0), |(g, m), (a, b)| (g + a, m + b));
    assert_eq!((gaps, messages), (10, 30));
}

#[test]
fn skip_policy_reports_the_gap_and_resumes_after_it() {
    let mut s = spec(false, false);
    s.gap_policy = GapPolicy::Skip;
    let mut h = Harness::new(s);
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(6, 2);
    let p = h.publish(8, 5);
    h.datagram(&p, Via::Multicast);
    h.run_for(5 * MS);
    h.finish();
    let order: Vec<&Seen> = h
        .events
        .iter()
        .filter(|e| matches!(e, Seen::Gap(..) | Seen::Msg { .. }))
        .collect();
    assert_eq!(order[5], &Seen::Gap(6, 7));
    assert_eq!(h.delivered(), [1, 2, 3, 4, 5, 8, 9, 10, 11, 12]);
    assert_eq!(h.feed.stats(0).messages_lost, 2);
}

#[test]
fn malformed_datagrams_are_counted_and_lose_nothing() {
    let mut h = Harness::new(spec(true, false));
    let mut rng = 0xdead_beef_u64;
    let mut first = 1;
    for round in 0..2_000u64 {
        let p = h.publish(first, 3);
        first += 3;
        let mut bad = p.clone();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let cut = (rng % bad.len() as u64) as usize;
        match round % 3 {
            0 => bad.truncate(cut),
            1 => bad.push(0),
            _ => {
                // Corrupt the count so blocks no longer match it.
                bad[18] ^= 0x40;
            }
        }
        h.datagram(&bad, Via::Multicast);
        h.datagram(&p, Via::Multicast);
    }
    assert_exactly(&h.delivered(), 1, first - 1);
    assert_eq!(h.feed.stats(0).malformed, 2_000);
}

#[test]
fn iex_tp_heartbeat_and_gap_with_skip() {
    use gapless::protocol::iex_tp::{self, Header};
    let header = |seq: u64| Header {
        message_protocol_id: 0x8003,
        channel_id: 1,
        session_id: 42,
        stream_offset: 0,
        sequence: seq,
        send_time: 0,
        reserved: 0,
    };
    let segment = |seq: u64, count: u64| {
        let mut buf = vec![0u8; 1500];
        let mut w = iex_tp::PacketWriter::new(&mut buf, header(seq)).unwrap();
        for s in seq..seq + count {
            w.push(&message(s)).unwrap();
        }
        let n = w.finish();
        buf.truncate(n);
        buf
    };
    let mut s = spec(false, false);
    s.wire = Wire::IexTp;
    s.gap_policy = GapPolicy::Skip;
    let mut h = Harness::new(s);
    h.datagram(&segment(1, 4), Via::Multicast);
    h.datagram(&segment(8, 2), Via::Multicast);
    let mut hb = vec![0u8; 64];
    let n = iex_tp::encode_heartbeat(&mut hb, header(12)).unwrap();
    h.datagram(&hb[..n], Via::Multicast);
    h.run_for(5 * MS);
    let gaps: Vec<&Seen> = h
        .events
        .iter()
        .filter(|e| matches!(e, Seen::Gap(..)))
        .collect();
    assert_eq!(gaps, [&Seen::Gap(5, 7), &Seen::Gap(10, 11)]);
    assert_eq!(h.delivered(), [1, 2, 3, 4, 8, 9]);
    assert_eq!(h.feed.session(0), Some(SessionKey::iex(42)));
}

#[test]
fn an_overlapping_repack_behind_a_gap_keeps_every_buffered_payload_intact() {
    // A gap is open (5..=10 lost), 11..=20 wait in the arena, then a repack of 15..=25
    // arrives: 15..=20 are duplicates of what waits, 21..=25 are new. Its duplicates must
    // not free the repack's arena slot while 21..=25 are still going into it, or the
    // next datagrams stored would overwrite their bytes before delivery.
    let mut h = Harness::new(spec(true, false));
    let p = h.publish(1, 4);
    h.datagram(&p, Via::Multicast);
    let _lost = h.publish(5, 6);
    for (first, count) in [(11, 10), (15, 11), (26, 5), (31, 5), (36, 5)] {
        let p = h.publish(first, count);
        h.datagram(&p, Via::Multicast);
    }
    h.run_for(50 * MS);
    // `delivered` checks every payload against its source.
    assert_exactly(&h.delivered(), 1, 40);
    assert_eq!(h.feed.state(0), StreamState::Synced);
}

#[test]
fn an_answer_for_the_old_session_does_not_reset_the_count() {
    let mut h = Harness::new(spec(false, false));
    let old = h.session;
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    h.session = session("TEST000002");
    h.published_to = 0;
    for first in [1, 6] {
        let p = h.publish(first, 5);
        h.datagram(&p, Via::Multicast);
    }
    // A late answer to a request of the old session, between the new session's datagrams.
    h.datagram(&packet(old, 1, 5), Via::Unicast);
    let p = h.publish(11, 5);
    h.datagram(&p, Via::Multicast);
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000002")));
    assert_exactly(&h.delivered()[10..], 1, 15);
    assert_eq!(h.feed.stats(0).unconfirmed_session, 0);
}

#[test]
fn a_configured_session_taking_back_a_channel_it_never_started_keeps_its_baseline() {
    let mut h = Harness::new(spec(false, false));
    let stray = session("STRAY00001");
    for first in [1, 4, 7] {
        h.datagram(&packet(stray, first, 3), Via::Multicast);
    }
    assert_eq!(h.feed.session(0), Some(SessionKey(*stray.as_bytes())));
    let strays = h.delivered().len();
    for first in [5000, 5002, 5004] {
        let p = h.publish(first, 2);
        h.datagram(&p, Via::Multicast);
    }
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000001")));
    h.run_for(50 * MS);
    assert_exactly(&h.delivered()[strays..], 5000, 5005);
    assert_eq!(h.feed.state(0), StreamState::Synced);
}

#[test]
fn a_first_datagram_too_long_to_hold_is_missing_not_silently_lost() {
    let mut s = spec(false, false);
    s.channels[0].session = None;
    s.max_datagram = 256;
    let mut h = Harness::new(s);
    let big = h.publish(1, 20);
    assert!(big.len() > 256);
    h.datagram(&big, Via::Multicast);
    for first in [21, 22] {
        let p = h.publish(first, 1);
        h.datagram(&p, Via::Multicast);
    }
    h.run_for(5 * MS);
    // Live start at the lowest sequence seen: 1..=20 are a gap, never skipped; with no
    // re-request server here (and gap_policy = "hold") the stream latches and says that
    // 20 messages from 1 are missing.
    assert!(h.delivered().is_empty(), "{:?}", h.delivered());
    assert_ne!(h.feed.state(0), StreamState::Synced);
    let notices = notices(&mut h);
    assert!(
        notices.iter().any(|n| matches!(
            n,
            Notice::RecoveryExhausted {
                from: 1,
                missing: 20,
                ..
            }
        )),
        "{notices:?}"
    );
}

#[test]
fn a_session_that_announced_its_end_does_not_take_the_channel_back() {
    let mut h = Harness::new(spec(false, false));
    let old = h.session;
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    h.datagram(&end_of_session(old, 11), Via::Multicast);
    h.session = session("TEST000002");
    h.published_to = 0;
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    // The old session goes on repeating its end of session.
    for _ in 0..5 {
        h.datagram(&end_of_session(old, 11), Via::Multicast);
    }
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000002")));
    assert_eq!(h.feed.stats(0).stale_session, 5);
    assert_exactly(&h.delivered()[10..], 1, 5);
}

#[test]
fn with_a_count_of_one_a_late_straggler_never_takes_the_channel_back() {
    let mut s = spec(false, false);
    s.session_confirm = 1;
    let mut h = Harness::new(s);
    let old = h.session;
    let p = h.publish(1, 10);
    h.datagram(&p, Via::Multicast);
    h.session = session("TEST000002");
    h.published_to = 0;
    let p = h.publish(1, 5);
    h.datagram(&p, Via::Multicast);
    assert_eq!(
        h.feed.stats(0).new_sessions,
        1,
        "a count of 1 adopts at once"
    );
    h.datagram(&packet(old, 11, 1), Via::Multicast);
    let p = h.publish(6, 5);
    h.datagram(&p, Via::Multicast);
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000002")));
    assert_exactly(&h.delivered()[10..], 1, 10);
    assert_eq!(h.feed.stats(0).stale_session, 1);
}

/// Session 1 sends 1..=100 and loses its last two packets (91..=100) on the wire, announces
/// its end, and session 2 starts at once: what session 2 sends meanwhile is held.
fn session_change_with_a_lost_tail(h: &mut Harness) {
    for first in (1..=90).step_by(5) {
        let p = h.publish(first, 5);
        h.datagram(&p, Via::Multicast);
    }
    let _lost = (h.publish(91, 5), h.publish(96, 5));
    let eos = end_of_session(h.session, 101);
    h.datagram(&eos, Via::Multicast);
    h.earlier.push((h.session, 100));
    h.session = session("TEST000002");
    h.published_to = 0;
    for first in (1..=20).step_by(5) {
        let p = h.publish(first, 5);
        h.datagram(&p, Via::Multicast);
    }
}

/// Messages as (session number, sequence), in order.
type Delivered = Vec<(u32, u64)>;
/// Gaps as (session number, from, to), in order.
type Gaps = Vec<(u32, u64, u64)>;

/// The consumer's view: messages and gaps by session, in order.
fn by_session(events: &[Seen]) -> (Delivered, Gaps) {
    let mut session = 1;
    let (mut msgs, mut gaps) = (Vec::new(), Vec::new());
    for e in events {
        match e {
            Seen::State(Published::Unseen) if !msgs.is_empty() => session += 1,
            Seen::Msg { seq, .. } => msgs.push((session, *seq)),
            Seen::Gap(from, to) => {
                gaps.push((session, *from, *to));
            }
            _ => {}
        }
    }
    (msgs, gaps)
}

#[test]
fn an_ended_sessions_lost_tail_is_recovered_before_the_next_session_is_adopted() {
    let mut h = Harness::new(spec(true, false));
    session_change_with_a_lost_tail(&mut h);
    assert_eq!(
        h.feed.session(0),
        Some(SessionKey(*b"TEST000001")),
        "held while the tail is missing"
    );
    h.run_for(50 * MS);
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000002")));
    let (msgs, gaps) = by_session(&h.events);
    let mut want: Vec<(u32, u64)> = (1..=100).map(|s| (1, s)).collect();
    want.extend((1..=20).map(|s| (2, s)));
    assert_eq!(msgs, want, "session 1 complete, then session 2, each once");
    assert!(gaps.is_empty(), "{gaps:?}");
    let stats = h.feed.stats(0);
    assert_eq!((stats.recovered, stats.messages_lost), (10, 0), "{stats:?}");
    assert!(h.states().contains(&Published::Closed), "{:?}", h.states());
}

#[test]
fn an_ended_sessions_tail_nothing_can_recover_is_an_explicit_gap_before_the_next_session() {
    for policy in [GapPolicy::Hold, GapPolicy::Skip] {
        let mut s = spec(true, false);
        s.gap_policy = policy;
        let mut h = Harness::new(s);
        h.server_alive = false;
        session_change_with_a_lost_tail(&mut h);
        h.run_for(500 * MS);
        assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000002")));
        let (msgs, gaps) = by_session(&h.events);
        let mut want: Vec<(u32, u64)> = (1..=90).map(|s| (1, s)).collect();
        want.extend((1..=20).map(|s| (2, s)));
        assert_eq!(msgs, want, "{policy:?}");
        assert_eq!(gaps, [(1, 91, 100)], "{policy:?}");
        let gap_at = h
            .events
            .iter()
            .position(|e| matches!(e, Seen::Gap(..)))
            .unwrap();
        let new_at = h
            .events
            .iter()
            .rposition(|e| *e == Seen::State(Published::Unseen))
            .unwrap();
        assert!(gap_at < new_at, "the gap comes before the new session");
        let stats = h.feed.stats(0);
        assert_eq!(
            (stats.gaps_lost, stats.messages_lost),
            (1, 10),
            "{policy:?}"
        );
        assert!(
            notices(&mut h).iter().any(|n| matches!(
                n,
                Notice::GapsLost {
                    reason: LostReason::SessionEnded,
                    ..
                }
            )),
            "{policy:?}"
        );
        assert_eq!(h.feed.state(0), StreamState::Synced, "{policy:?}");
    }
}

#[test]
fn a_configured_session_the_feed_never_sends_is_reported_when_the_real_one_is_adopted() {
    let mut s = spec(true, false);
    s.channels[0].session = Some(SessionKey(*b"WRONG00001"));
    let mut h = Harness::new(s);
    for first in [1, 4, 7, 10] {
        let p = h.publish(first, 3);
        h.datagram(&p, Via::Multicast);
    }
    // The key is the session expected first, not a filter: the feed's own session is
    // confirmed and followed, and the operator is told the key looks wrong.
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000001")));
    assert_exactly(&h.delivered(), 1, 12);
    let notices = notices(&mut h);
    let warned: Vec<String> = notices
        .iter()
        .filter(|n| matches!(n, Notice::UnexpectedEpoch { .. }))
        .map(|n| n.to_string())
        .collect();
    assert_eq!(warned.len(), 1, "{notices:?}");
    assert!(
        warned[0].contains("WRONG00001") && warned[0].contains("TEST000001"),
        "{warned:?}"
    );
    // A later, ordinary session change is not reported as unexpected.
    h.datagram(&end_of_session(h.session, 13), Via::Multicast);
    h.session = session("TEST000002");
    h.published_to = 0;
    let p = h.publish(1, 3);
    h.datagram(&p, Via::Multicast);
    assert_eq!(h.feed.session(0), Some(SessionKey(*b"TEST000002")));
    assert!(
        !std::iter::from_fn(|| h.feed.poll_notice())
            .any(|n| matches!(n, Notice::UnexpectedEpoch { .. }))
    );
}

/// With `make_room` (replay's setting) and a reorder delay that never ends, a gap is held
/// until holding what follows would take more than the arena or the window, and then
/// exactly what had not arrived is declared lost: nothing that arrived is dropped, a late
/// fill within the bounds still closes its gap, and no clock time is needed.
#[test]
fn make_room_declares_exactly_what_is_missing_when_room_runs_out() {
    let mut s = spec(false, false);
    s.gap_policy = GapPolicy::Skip;
    s.make_room = true;
    s.policy.reorder_delay_ns = u64::MAX;
    s.gap_deadline_ns = u64::MAX;
    let mut h = Harness::new(s);
    let send = |h: &mut Harness, first: u64, count: u64| {
        let p = h.publish(first, count);
        h.datagram(&p, Via::Multicast);
    };
    send(&mut h, 1, 5);
    // 6..=7 never come; 300 one-message datagrams behind them overflow the 256-slot arena.
    for seq in 8..=307 {
        send(&mut h, seq, 1);
    }
    // 400 never comes; 1,100 messages behind it overflow the 1,024-message window.
    for first in (308..=399).step_by(4) {
        send(&mut h, first, 4);
    }
    for first in (401..=1_500).step_by(4) {
        send(&mut h, first, 4);
    }
    // 1,600 comes late, within the bounds: its gap closes, nothing is lost.
    for first in (1_601..=1_700).step_by(4) {
        send(&mut h, first, 4);
    }
    for first in (1_501..=1_599).step_by(3) {
        send(&mut h, first, 3);
    }
    send(&mut h, 1_600, 1);
    // A jump of more than the window with nothing missing: what lies between never came.
    send(&mut h, 7_000, 3);
    h.finish();
    let gaps: Vec<&Seen> = h
        .events
        .iter()
        .filter(|e| matches!(e, Seen::Gap(..)))
        .collect();
    assert_eq!(
        gaps,
        [
            &Seen::Gap(6, 7),
            &Seen::Gap(400, 400),
            &Seen::Gap(1_701, 6_999)
        ]
    );
    let mut want: Vec<u64> = (1..=5).chain(8..=399).chain(401..=1_700).collect();
    want.extend(7_000..=7_002);
    assert_eq!(h.delivered(), want);
    let stats = h.feed.stats(0);
    assert_eq!(stats.arena_full, 0, "{stats:?}");
    assert_eq!(stats.sequencer.overflows, 0, "{stats:?}");
    assert_eq!(stats.messages_lost, 2 + 1 + (6_999 - 1_701 + 1));
}

#[test]
fn sequence_numbers_near_the_top_of_the_range_never_wrap_a_counter() {
    let mut s = spec(false, false);
    s.gap_policy = GapPolicy::Skip;
    let mut h = Harness::new(s);
    let p = h.publish(1, 2);
    h.datagram(&p, Via::Multicast);
    // A hostile or corrupt sender near u64::MAX, twice, then the real feed again.
    for first in [u64::MAX - 40, u64::MAX - 3] {
        h.datagram(&packet(h.session, first, 2), Via::Multicast);
        h.run_for(5 * MS);
    }
    h.finish();
    let stats = h.feed.stats(0);
    // What was declared lost adds up to the gap events, counted without wrapping.
    let reported: u128 = h
        .events
        .iter()
        .filter_map(|e| match e {
            Seen::Gap(from, to) => Some(u128::from(to - from) + 1),
            _ => None,
        })
        .sum();
    assert_eq!(
        u128::from(stats.messages_lost),
        reported.min(u128::from(u64::MAX))
    );
    assert!(stats.messages_lost >= stats.gaps_lost, "{stats:?}");
}

/// Issue 13, case 2: a `from-start` join long after the open, with a re-request server and
/// no snapshot, whose backlog is many times the reorder window. What the window cannot
/// hold yet is dropped and counted, not latched: the backlog is asked for a window at a
/// time while the live feed runs ahead, and every message arrives once and in order.
#[test]
fn a_from_start_late_join_beyond_the_window_is_asked_for_a_window_at_a_time() {
    let mut spec = spec(true, false);
    spec.start_from = Some(1);
    let window = spec.window as u64;
    let mut h = Harness::new(spec);
    h.answer_limit = 32;
    // Published before the join: nearly twenty windows.
    let backlog = 20_000;
    h.published_to = backlog;
    let mut next = backlog + 1;
    for _ in 0..3_000 {
        let p = h.publish(next, 4);
        h.datagram(&p, Via::Multicast);
        next += 4;
        h.run_for(MS);
    }
    h.run_for(100 * MS);
    let stats = h.feed.stats(0);
    eprintln!(
        "{} delivered; {} requests, {} dropped beyond the window",
        h.delivered().len(),
        stats.requests,
        stats.sequencer.overflows
    );
    assert_exactly(&h.delivered(), 1, next - 1);
    assert!(
        !h.states().contains(&Published::ResetRequired),
        "{:?}",
        h.states()
    );
    assert_eq!(h.feed.state(0), StreamState::Synced);
    assert_eq!(stats.recovery_exhausted, 0);
    assert!(
        stats.sequencer.overflows > 0,
        "the live feed ran beyond the window: {stats:?}"
    );
    // Nothing was asked for outside the window: every request but the last few brought
    // a full answer, so about one request per answer's worth of the backlog and of what
    // the window dropped.
    let asked = backlog + stats.sequencer.overflows;
    assert!(
        stats.requests <= asked / 32 + 4 * window / 32,
        "{} requests for {asked} messages: {stats:?}",
        stats.requests
    );
}
