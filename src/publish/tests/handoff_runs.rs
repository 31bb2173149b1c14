//! The in-order fast path: a datagram that continues a synced stream is sequenced in one
//! step and handed to each consumer queue as one record. These tests drive the same
//! faulty feeds (loss, reordering, duplicates, overlapping repacks, heartbeats, malformed
//! datagrams, a session change) two ways and require identical consumer streams:
//!
//! - one datagram at a time into a plain closure, which receives every message as its
//!   own event (the default expansion of a run);
//! - datagrams in groups (their blocks checked four at a time) through the rx thread's
//!   fan-out into a real consumer queue, popped message by message.
//!
//! Both are also checked against the source: every published message comes out once, in
//! order, with its bytes, or inside an explicit gap.

use super::feed;

use crate::publish::fanout::Fanout;
use crate::publish::{self, Event, StreamState};
use crate::time::{Mono, Wall};
use crate::venue::udp::LineSpec;
use crate::venue::{ChannelSpec, Emit, FeedSpec, GapPolicy, Received, UdpVenue, Venue, Via, Wire};
use feed::{Rng, datagram, message};

/// A feed of about `packets` datagrams with every kind of fault.
fn faulty_feed(wire: Wire, rng: &mut Rng, packets: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut seq = 1u64;
    let mut session = 1u32;
    for _ in 0..packets {
        let count = 1 + rng.below(40);
        let d = datagram(wire, session, seq, count);
        match rng.below(100) {
            // Lost on the wire.
            0..=2 => {}
            // Duplicated.
            3..=4 => {
                out.push(d.clone());
                out.push(d);
            }
            // Arrives after the next one.
            5..=7 => {
                let next_count = 1 + rng.below(40);
                out.push(datagram(wire, session, seq + count, next_count));
                out.push(d);
                seq += next_count;
            }
            // An overlapping repack: the tail of this one again with some new messages.
            8..=9 => {
                out.push(d);
                let from = seq + rng.below(count);
                let more = 1 + rng.below(10);
                out.push(datagram(wire, session, from, seq + count + more - from));
                seq += more;
            }
            // A malformed copy (a length cut short) before the good one.
            10..=11 => {
                let mut bad = d.clone();
                bad.truncate(bad.len() - 1);
                out.push(bad);
                out.push(d);
            }
            // A heartbeat carrying the next sequence.
            12..=13 => {
                out.push(d);
                out.push(datagram(wire, session, seq + count, 0));
            }
            // The venue starts a new session, numbered from 1.
            14 if session < 3 => {
                session += 1;
                seq = 1;
                out.push(datagram(wire, session, seq, count));
            }
            _ => out.push(d),
        }
        seq += count;
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Msg { seq: u64, payload: Vec<u8> },
    Gap(u64, u64),
    State(StreamState),
}

fn seen(e: &Event<'_>) -> Option<Seen> {
    match *e {
        Event::Message { seq, payload, .. } => Some(Seen::Msg {
            seq,
            payload: payload.to_vec(),
        }),
        Event::Gap { from, to, .. } => Some(Seen::Gap(from, to)),
        Event::State { state, .. } => Some(Seen::State(state)),
        _ => None,
    }
}

fn spec(wire: Wire) -> FeedSpec {
    let channel = ChannelSpec {
        name: "test".into(),
        lines: vec![LineSpec::loopback("239.255.0.1:1".parse().unwrap())],
        session: None,
        rerequest: Vec::new(),
        peer_stores: Vec::new(),
        resume: None,
        snapshot: None,
    };
    let mut spec = FeedSpec::new(wire, vec![channel]);
    // No server to ask: a gap is declared lost after the reorder delay, and delivery
    // goes on after it, so every fault shows in the output.
    spec.gap_policy = GapPolicy::Skip;
    spec
}

/// Feeds `feed` in groups whose sizes `group` picks, with the clock moving 100 µs a
/// datagram and timers run when due between groups; each group goes in one datagram at
/// a time (`one_by_one`) or as one call.
fn run(
    wire: Wire,
    feed: &[Vec<u8>],
    mut group: impl FnMut() -> usize,
    emit: &mut impl Emit,
    one_by_one: bool,
) {
    let mut session = UdpVenue::new("test", spec(wire));
    let mut now = 0u64;
    let mut i = 0;
    while i < feed.len() {
        let n = group().clamp(1, feed.len() - i);
        let datagrams: Vec<(&[u8], u64)> = feed[i..i + n]
            .iter()
            .map(|d| (d.as_slice(), 1 + i as u64))
            .collect();
        if one_by_one {
            for &(d, recv_ns) in &datagrams {
                session.on_datagram(
                    Mono::from_nanos(now),
                    0,
                    d,
                    Wall::from_nanos(recv_ns),
                    Via::Multicast,
                    emit,
                );
            }
        } else {
            let rs = received(&datagrams);
            session.on_datagrams(Mono::from_nanos(now), 0, &rs, Via::Multicast, emit);
        }
        i += n;
        now += 100_000 * n as u64;
        if session.poll_timeout().is_some_and(|t| t.as_nanos() <= now) {
            session.handle_timeout(Mono::from_nanos(now), emit);
        }
    }
    // Let every pending gap expire.
    for _ in 0..100 {
        now += 10_000_000;
        session.handle_timeout(Mono::from_nanos(now), emit);
    }
}

fn check_against_source(events: &[Seen]) {
    let mut delivered = 0u64;
    let mut next: Option<u64> = None;
    for e in events {
        match e {
            Seen::Msg { seq, payload } => {
                assert_eq!(payload, &message(*seq), "bytes of {seq}");
                if let Some(n) = next {
                    // Strictly in order, unless a new session started over (its state
                    // change came first and reset `next`).
                    assert_eq!(*seq, n, "in order, nothing twice, nothing skipped silently");
                }
                next = Some(seq + 1);
                delivered += 1;
            }
            Seen::Gap(from, to) => {
                assert!(
                    next.is_none_or(|n| *from == n),
                    "a gap starts where delivery stopped"
                );
                next = Some(to + 1);
            }
            Seen::State(StreamState::Unseen) => next = None,
            Seen::State(_) => {}
        }
    }
    assert!(delivered > 1_000, "the feed delivered {delivered} messages");
}

fn both_ways_agree(wire: Wire, seed: u64) {
    let mut rng = Rng(seed);
    let feed = faulty_feed(wire, &mut rng, 3_000);

    // Both runs see the same groups at the same times: only the way in and out differs.
    let mut sizes = Rng(seed ^ 0x9e37_79b9);
    let mut direct = Vec::new();
    run(
        wire,
        &feed,
        || 1 + sizes.below(16) as usize,
        &mut |e: &Event<'_>| direct.extend(seen(e)),
        true,
    );
    check_against_source(&direct);

    let (producer, mut consumer) = publish::channel(64 << 20, 1);
    let mut fanout = Fanout::new(vec![producer]);
    let mut sizes = Rng(seed ^ 0x9e37_79b9);
    run(
        wire,
        &feed,
        || 1 + sizes.below(16) as usize,
        &mut fanout,
        false,
    );
    let mut queued = Vec::new();
    while let Some(s) = consumer.pop(|e| seen(&e)) {
        queued.extend(s);
    }
    assert_eq!(fanout.dropped, 0, "the queue holds the whole feed");
    assert_eq!(queued.len(), direct.len());
    if let Some(at) = queued.iter().zip(&direct).position(|(a, b)| a != b) {
        panic!(
            "first difference at event {at}: queue {:?}, direct {:?}",
            queued[at], direct[at]
        );
    }
    let gaps = direct.iter().filter(|e| matches!(e, Seen::Gap(..))).count();
    assert!(gaps > 10, "the faults opened gaps ({gaps})");
}

#[test]
fn moldudp64_runs_through_the_queue_equal_message_by_message() {
    for seed in [1, 2, 3] {
        both_ways_agree(Wire::MoldUdp64, seed);
    }
}

#[test]
fn iex_tp_runs_through_the_queue_equal_message_by_message() {
    for seed in [4, 5] {
        both_ways_agree(Wire::IexTp, seed);
    }
}

/// The datagrams `(bytes, receive time)` as the venue takes them.
fn received<'a>(datagrams: &[(&'a [u8], u64)]) -> Vec<Received<'a>> {
    datagrams
        .iter()
        .map(|&(bytes, t)| Received {
            bytes,
            recv: Wall::from_nanos(t),
        })
        .collect()
}
