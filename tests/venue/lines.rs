//! Redundant lines (A/B arbitration) of the MoldUDP64 venue, driven in-process with a
//! virtual clock: each line loses, delays or drops out on its own, a scripted re-request
//! server answers what is asked, and the oracle is the publisher's own record of what
//! each line carried.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use gapless::protocol::moldudp64::{Request, Session};

use super::feed::{message, packet};
use gapless::publish::{Event, StreamState};
use gapless::time::{Mono, Wall};
use gapless::venue::udp::LineSpec;
use gapless::venue::{
    ChannelSpec, FeedSpec, Notice, Received, SessionKey, UdpVenue, Venue, Via, Wire,
};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const SESSION: Session = Session(*b"LINES00001");

/// Messages per datagram.
const PER_PACKET: u64 = 4;

struct XorShift(u64);

impl XorShift {
    fn chance(&mut self, p: f64) -> bool {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// What one line does to the feed.
#[derive(Clone, Copy)]
struct LineFaults {
    /// Probability a packet is lost on this line.
    loss: f64,
    /// A burst of this many packets lost, every `burst_every` packets (0: none).
    burst: u64,
    burst_every: u64,
    /// How long after publication the line delivers.
    delay_ns: u64,
    /// The line carries nothing from this packet on.
    dead_from: Option<u64>,
    seed: u64,
}

impl LineFaults {
    fn clean(delay_ns: u64, seed: u64) -> Self {
        Self {
            loss: 0.0,
            burst: 0,
            burst_every: 0,
            delay_ns,
            dead_from: None,
            seed,
        }
    }
}

struct Outcome {
    delivered: Vec<u64>,
    states: Vec<StreamState>,
    /// Every sequence the venue asked the server for.
    requested: BTreeSet<u64>,
    /// Packets (by first sequence) lost on every line.
    lost_on_all: BTreeSet<u64>,
    notices: Vec<Notice>,
    venue: UdpVenue,
}

fn spec(lines: usize, window_ns: u64) -> FeedSpec {
    let channel = ChannelSpec {
        name: "ab".into(),
        lines: (0..lines)
            .map(|i| LineSpec::loopback(format!("239.255.0.{}:1", i + 1).parse().unwrap()))
            .collect(),
        session: Some(SessionKey(*SESSION.as_bytes())),
        rerequest: vec!["127.0.0.1:1".parse::<SocketAddr>().unwrap()],
        peer_stores: Vec::new(),
        resume: None,
        snapshot: None,
    };
    let mut spec = FeedSpec::new(Wire::MoldUdp64, vec![channel]);
    spec.start_from = Some(1);
    spec.window = 1 << 14;
    spec.max_buffered = 1 << 14;
    spec.arena_datagrams = 4096;
    spec.policy.reorder_delay_ns = 100 * US;
    spec.policy.request_timeout_ns = 20 * MS;
    spec.policy.retry_budget = 5;
    spec.policy.requests_per_sec = 100_000;
    spec.arbitration_window_ns = window_ns;
    spec.line_down_ns = 20 * MS;
    spec
}

/// Publishes `packets` datagrams one every 20 µs on every line of `faults`, feeds what
/// each line carries to the venue in time order, and answers every request 200 µs later.
fn run(packets: u64, faults: &[LineFaults], window_ns: u64) -> Outcome {
    let mut venue = UdpVenue::new("t", spec(faults.len(), window_ns));
    let mut arrivals: BTreeMap<(u64, usize, u64), Vec<u8>> = BTreeMap::new();
    let mut lost_on_all = BTreeSet::new();
    for (line, f) in faults.iter().enumerate() {
        let mut rng = XorShift(f.seed);
        for p in 0..packets {
            let in_burst = f.burst_every > 0 && p % f.burst_every < f.burst;
            let dead = f.dead_from.is_some_and(|d| p >= d);
            if rng.chance(f.loss) || in_burst || dead {
                continue;
            }
            let first = 1 + p * PER_PACKET;
            let at = 1 + p * 20 * US + f.delay_ns;
            arrivals.insert((at, line, first), packet(SESSION, first, PER_PACKET));
        }
    }
    let carried: BTreeSet<u64> = arrivals.keys().map(|&(_, _, first)| first).collect();
    for p in 0..packets {
        let first = 1 + p * PER_PACKET;
        if !carried.contains(&first) {
            lost_on_all.insert(first);
        }
    }
    let mut events: Vec<(u64, Option<u64>)> = Vec::new();
    let mut states = Vec::new();
    let mut requested = BTreeSet::new();
    let mut notices = Vec::new();
    // Answers due: (time, first, count).
    let mut answers: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut sink = |e: &Event<'_>| match *e {
        Event::Message { seq, payload, .. } => {
            assert_eq!(payload, message(seq).as_slice(), "payload of {seq}");
            events.push((seq, None));
        }
        Event::State { state, .. } => states.push(state),
        Event::Gap { from, to, .. } => events.push((from, Some(to))),
        _ => {}
    };
    let last = packets * PER_PACKET;
    let mut queue: Vec<(u64, usize, Vec<u8>)> = arrivals
        .into_iter()
        .map(|((at, line, _), bytes)| (at, line, bytes))
        .collect();
    queue.reverse();
    let mut now = 1;
    let end = 1 + packets * 20 * US + 500 * MS;
    while now < end {
        let next_arrival = queue.last().map(|(at, _, _)| *at);
        let next_answer = answers.keys().next().map(|(at, _)| *at);
        let next_timer = venue.poll_timeout().map(Mono::as_nanos);
        let Some(next) = [next_arrival, next_answer, next_timer]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        now = next.max(now);
        if next_arrival == Some(next) {
            let (_, line, bytes) = queue.pop().unwrap();
            let endpoint = venue.endpoint_of_line(0, line).unwrap();
            let d = [Received {
                bytes: &bytes,
                recv: Wall::from_nanos(now),
            }];
            venue.handle_datagrams(Mono::from_nanos(now), endpoint, &d, &mut sink);
        } else if next_answer == Some(next) {
            let (&(at, first), &count) = answers.iter().next().unwrap();
            answers.remove(&(at, first));
            let bytes = packet(SESSION, first, count);
            venue.on_datagram(
                Mono::from_nanos(now),
                0,
                &bytes,
                Wall::from_nanos(now),
                Via::Unicast,
                &mut sink,
            );
        } else {
            venue.handle_timeout(Mono::from_nanos(now), &mut sink);
        }
        while let Some(tx) = venue.poll_transmit() {
            let req = Request::decode(tx.payload()).unwrap();
            let count = u64::from(req.count).min(last + 1 - req.sequence.min(last + 1));
            if count == 0 {
                continue;
            }
            requested.extend(req.sequence..req.sequence + count);
            answers.insert((now + 200 * US, req.sequence), count.min(50));
        }
        while let Some(n) = venue.poll_notice() {
            notices.push(n);
        }
        if queue.is_empty() && answers.is_empty() && venue.missing(0).is_empty() {
            break;
        }
    }
    let delivered = events
        .iter()
        .map(|&(seq, gap)| {
            assert_eq!(gap, None, "no gap is declared under hold");
            seq
        })
        .collect();
    Outcome {
        delivered,
        states,
        requested,
        lost_on_all,
        notices,
        venue,
    }
}

fn assert_exactly(delivered: &[u64], to: u64) {
    let want: Vec<u64> = (1..=to).collect();
    if let Some(i) = (0..delivered.len().max(want.len())).find(|&i| delivered.get(i) != want.get(i))
    {
        panic!(
            "delivered {} messages, want {to}; first difference at index {i}: got {:?}, want {:?}",
            delivered.len(),
            delivered.get(i),
            want.get(i)
        );
    }
}

/// Every sequence asked for belongs to a packet no line carried.
fn assert_requests_only_for_lost_on_all(o: &Outcome) {
    for seq in &o.requested {
        let first = (seq - 1) / PER_PACKET * PER_PACKET + 1;
        assert!(
            o.lost_on_all.contains(&first),
            "{seq} was asked for, though a line carried it"
        );
    }
}

#[test]
fn independent_loss_with_bursts_on_each_line_asks_only_for_what_both_lost() {
    let packets = 50_000;
    let a = LineFaults {
        loss: 0.02,
        burst: 5,
        burst_every: 997,
        ..LineFaults::clean(0, 7)
    };
    let b = LineFaults {
        loss: 0.02,
        burst: 5,
        burst_every: 1_009,
        ..LineFaults::clean(300 * US, 11)
    };
    let o = run(packets, &[a, b], MS);
    let n = packets * PER_PACKET;
    assert_exactly(&o.delivered, n);
    assert!(
        !o.lost_on_all.is_empty(),
        "the seeds must make both lines lose some packets together"
    );
    assert_requests_only_for_lost_on_all(&o);
    // Whatever both lost was asked for, and nothing else.
    let lost_messages = o.lost_on_all.len() as u64 * PER_PACKET;
    assert_eq!(o.requested.len() as u64, lost_messages);
    let stats = o.venue.stats(0);
    assert_eq!(stats.sequencer.duplicates, 0, "copies are not anomalies");
    assert_eq!(stats.recovered, lost_messages);
    let lines = o.venue.lines(0);
    // Every message either line carried but did not bring first was arbitrated.
    let carried: u64 = lines.iter().map(|l| l.packets * PER_PACKET).sum();
    assert_eq!(
        stats.arbitrated,
        carried - (n - lost_messages),
        "arbitrated = copies beyond the first"
    );
    assert_eq!(
        lines[0].wins + lines[1].wins,
        packets - o.lost_on_all.len() as u64
    );
    assert!(lines[0].wins > lines[1].wins, "line a runs ahead");
    // Line b's copies are about 300 µs behind.
    let lag = &lines[1].lag;
    assert!(lag.count() > packets / 2);
    assert_eq!(lag.counts[9], lag.count(), "256 µs < lag <= 512 µs");
    for (i, l) in lines.iter().enumerate() {
        assert!(l.missed > 0 && !l.down, "line {i}: {l:?}");
    }
    assert!(
        !o.notices
            .iter()
            .any(|n| matches!(n, Notice::LineDown { .. }))
    );
}

#[test]
fn a_line_dead_halfway_costs_no_gap_and_is_reported_down() {
    let packets = 20_000;
    let a = LineFaults {
        dead_from: Some(packets / 2),
        ..LineFaults::clean(0, 3)
    };
    let b = LineFaults::clean(200 * US, 5);
    let o = run(packets, &[a, b], MS);
    assert_exactly(&o.delivered, packets * PER_PACKET);
    assert!(
        o.requested.is_empty(),
        "asked for {:?}",
        o.requested.first()
    );
    assert_eq!(o.states, vec![StreamState::Synced]);
    let lines = o.venue.lines(0);
    assert!(lines[0].down && lines[0].downs == 1, "{:?}", lines[0]);
    assert!(!lines[1].down);
    assert!(
        o.notices
            .iter()
            .any(|n| matches!(n, Notice::LineDown { line: 0, .. })),
        "{:?}",
        o.notices
    );
}

#[test]
fn a_line_two_ms_behind_within_a_five_ms_window_fills_every_gap_of_the_other() {
    let packets = 20_000;
    let a = LineFaults {
        loss: 0.05,
        ..LineFaults::clean(0, 13)
    };
    let b = LineFaults::clean(2 * MS, 17);
    let o = run(packets, &[a, b], 5 * MS);
    assert_exactly(&o.delivered, packets * PER_PACKET);
    assert!(
        o.requested.is_empty(),
        "asked for {:?}",
        o.requested.first()
    );
    assert!(o.venue.lines(0)[0].missed > 0);
    // With a window shorter than the lag, the same loss is asked for.
    let o = run(packets, &[a, b], 500 * US);
    assert_exactly(&o.delivered, packets * PER_PACKET);
    assert!(!o.requested.is_empty());
}

#[test]
fn loss_on_both_lines_at_once_is_recovered_by_re_request() {
    let packets = 5_000;
    // The same bursts on both lines: what they lose, they lose together.
    let a = LineFaults {
        burst: 3,
        burst_every: 500,
        ..LineFaults::clean(0, 19)
    };
    let b = LineFaults {
        burst: 3,
        burst_every: 500,
        ..LineFaults::clean(100 * US, 23)
    };
    let o = run(packets, &[a, b], MS);
    assert_exactly(&o.delivered, packets * PER_PACKET);
    assert_eq!(o.lost_on_all.len() as u64, packets / 500 * 3);
    assert_eq!(
        o.requested.len() as u64,
        o.lost_on_all.len() as u64 * PER_PACKET
    );
    assert_requests_only_for_lost_on_all(&o);
}

#[test]
fn a_stray_datagram_on_one_line_never_retires_the_session() {
    let mut venue = UdpVenue::new("t", spec(2, MS));
    let mut delivered = Vec::new();
    let mut sink = |e: &Event<'_>| {
        if let Event::Message { seq, .. } = *e {
            delivered.push(seq);
        }
    };
    let stray = Session(*b"STRAY00001");
    let mut now = 1;
    for p in 0..100u64 {
        let first = 1 + p * PER_PACKET;
        for line in 0..2 {
            now += 10 * US;
            let bytes = if line == 1 && p % 10 == 5 {
                packet(stray, 1_000 + p, 1)
            } else {
                packet(SESSION, first, PER_PACKET)
            };
            let endpoint = venue.endpoint_of_line(0, line).unwrap();
            let d = [Received {
                bytes: &bytes,
                recv: Wall::from_nanos(now),
            }];
            venue.handle_datagrams(Mono::from_nanos(now), endpoint, &d, &mut sink);
        }
    }
    assert_exactly(&delivered, 100 * PER_PACKET);
    assert_eq!(venue.session(0).unwrap().0, *SESSION.as_bytes());
    assert_eq!(venue.stats(0).new_sessions, 0);
    assert_eq!(venue.stats(0).unconfirmed_session, 10);
}

/// After a stall longer than the window, the loop reads line A's next datagram and line
/// B's copy of a gap in the same cycle: the gap is not asked for, since the decision waits
/// for the timers, which run once every ready socket is read.
#[test]
fn a_stall_longer_than_the_window_does_not_ask_for_what_the_other_line_has_queued() {
    let mut venue = UdpVenue::new("t", spec(2, MS));
    let mut sink = |_: &Event<'_>| {};
    let send = |venue: &mut UdpVenue, sink: &mut dyn FnMut(&Event<'_>), at: u64, line, p: u64| {
        let bytes = packet(SESSION, 1 + p * PER_PACKET, PER_PACKET);
        let endpoint = venue.endpoint_of_line(0, line).unwrap();
        let d = [Received {
            bytes: &bytes,
            recv: Wall::from_nanos(at),
        }];
        let mut emit = |e: &Event<'_>| sink(e);
        venue.handle_datagrams(Mono::from_nanos(at), endpoint, &d, &mut emit);
    };
    send(&mut venue, &mut sink, 1_000, 0, 0);
    send(&mut venue, &mut sink, 1_100, 1, 0);
    // Line A skips packet 1: a gap, seen at 2 µs.
    send(&mut venue, &mut sink, 2_000, 0, 2);
    // The loop stalls for 10 ms, then reads line A's next datagram and line B's copies.
    let at = 10 * MS;
    send(&mut venue, &mut sink, at, 0, 3);
    send(&mut venue, &mut sink, at, 1, 1);
    send(&mut venue, &mut sink, at, 1, 2);
    send(&mut venue, &mut sink, at, 1, 3);
    venue.handle_timeout(Mono::from_nanos(at), &mut sink);
    assert!(venue.poll_transmit().is_none(), "nothing is asked for");
    assert!(venue.missing(0).is_empty());
    assert_eq!(venue.stats(0).requests, 0);
}
