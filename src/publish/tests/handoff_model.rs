//! The hand-off from the rx thread to consumers against plain models: several streams of
//! messages, runs and states through small rings; a hostile MoldUDP64 feed grouped through
//! the fan-out into small queues against the same feed one datagram at a time; and the
//! overrun markers of two edge cases (a loss just before shutdown, a lost snapshot message).

use std::collections::VecDeque;

use super::feed;

use crate::protocol::moldudp64;
use crate::publish::fanout::Fanout;
use crate::publish::run::{BlockLengths, MessageRun};
use crate::publish::{Consumer, Event, Pushed, StreamState, channel};
use crate::time::{Mono, Wall};
use crate::venue::udp::LineSpec;
use crate::venue::{ChannelSpec, Emit, FeedSpec, GapPolicy, Received, UdpVenue, Venue, Via, Wire};
use feed::{Rng, datagram, mold_session};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Msg {
        stream: u16,
        seq: u64,
        payload: Vec<u8>,
    },
    Overrun {
        stream: u16,
        from: u64,
        to: u64,
        events: u64,
    },
    State {
        stream: u16,
        state: StreamState,
    },
    Gap {
        stream: u16,
        from: u64,
        to: u64,
    },
    Other,
}

fn seen(e: &Event<'_>) -> Seen {
    match *e {
        Event::Message {
            stream,
            seq,
            payload,
            ..
        } => Seen::Msg {
            stream,
            seq,
            payload: payload.to_vec(),
        },
        Event::Overrun {
            stream,
            from,
            to,
            events,
        } => Seen::Overrun {
            stream,
            from,
            to,
            events,
        },
        Event::State { stream, state } => Seen::State { stream, state },
        Event::Gap { stream, from, to } => Seen::Gap { stream, from, to },
        _ => Seen::Other,
    }
}

fn drain(consumer: &mut Consumer) -> Vec<Seen> {
    std::iter::from_fn(|| consumer.pop(|e| seen(&e))).collect()
}

fn blocks(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&(m.len() as u16).to_be_bytes());
        out.extend_from_slice(m);
    }
    out
}

/// A plain model of the queue: records of consumer-visible events with their byte size;
/// a record's bytes are freed when its last event is popped.
struct Model {
    capacity: usize,
    used: usize,
    records: VecDeque<(usize, VecDeque<Seen>)>,
    losses: Vec<(u64, u64, u64)>,
    pending: VecDeque<u16>,
}

const MARKER: usize = 35;

impl Model {
    fn new(capacity: usize, streams: usize) -> Self {
        Self {
            capacity: capacity.max(MARKER),
            used: 0,
            records: VecDeque::new(),
            losses: vec![(u64::MAX, 0, 0); streams],
            pending: VecDeque::new(),
        }
    }
    fn free(&self) -> usize {
        self.capacity - self.used
    }
    fn markers(&mut self, n: usize) {
        for _ in 0..n {
            let s = self.pending.pop_front().unwrap();
            let (from, to, events) =
                std::mem::replace(&mut self.losses[usize::from(s)], (u64::MAX, 0, 0));
            self.used += MARKER;
            self.records.push_back((
                MARKER,
                VecDeque::from([Seen::Overrun {
                    stream: s,
                    from,
                    to,
                    events,
                }]),
            ));
        }
    }
    /// Pushes a record of `len` bytes carrying `events`, or records their loss.
    fn push(&mut self, stream: u16, len: usize, events: Vec<Seen>, lo: u64, hi: u64) -> bool {
        let need = self.pending.len() * MARKER + len;
        if need <= self.free() {
            self.markers(self.pending.len());
            self.used += len;
            self.records.push_back((len, events.into()));
            true
        } else {
            let n = events.len() as u64;
            let loss = &mut self.losses[usize::from(stream)];
            if loss.2 == 0 {
                self.pending.push_back(stream);
            }
            if lo <= hi {
                loss.0 = loss.0.min(lo);
                loss.1 = loss.1.max(hi);
            }
            loss.2 += n;
            false
        }
    }
    fn flush(&mut self) -> usize {
        let n = self.pending.len().min(self.free() / MARKER);
        self.markers(n);
        n
    }
    fn pop(&mut self) -> Option<Seen> {
        let (len, front) = self.records.front_mut()?;
        let e = front.pop_front().unwrap();
        if front.is_empty() {
            self.used -= *len;
            self.records.pop_front();
        }
        Some(e)
    }
}

/// Runs, single messages and state events on several streams through small rings, with
/// random pops and flushes, against the model: exact same consumer output.
#[test]
fn multi_stream_runs_messages_and_states_match_a_model() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for (capacity, streams) in [(120usize, 3usize), (300, 4), (1000, 2), (50, 5), (4096, 8)] {
        let (mut producer, mut consumer) = channel(capacity, streams);
        let mut model = Model::new(capacity, streams);
        assert_eq!(producer.capacity(), model.capacity);
        let mut next = vec![1u64; streams];
        let mut marker_events = 0u64;
        let mut attempted = 0u64;
        for step in 0..30_000 {
            match rng.below(10) {
                0..=2 => {
                    for _ in 0..rng.below(6) {
                        let got = consumer.pop(|e| seen(&e));
                        if let Some(Seen::Overrun { events, .. }) = got {
                            marker_events += events;
                        }
                        let want = model.pop();
                        assert_eq!(got, want, "cap {capacity} step {step}: pop");
                    }
                }
                3 => {
                    assert_eq!(producer.flush_overrun(), model.flush(), "flush");
                }
                _ => {
                    let stream = rng.below(streams as u64) as u16;
                    let s = usize::from(stream);
                    let kind = rng.below(4);
                    if kind == 0 {
                        let state = StreamState::ALL[rng.below(6) as usize];
                        let e = Event::State { stream, state };
                        attempted += 1;
                        let w = producer.push(&e) == Pushed::Written;
                        let m = model.push(stream, 12, vec![seen(&e)], u64::MAX, 0);
                        assert_eq!(w, m, "cap {capacity} step {step}: state");
                        continue;
                    }
                    let count = 1 + rng.below(8) as usize;
                    let msgs: Vec<Vec<u8>> = (0..count)
                        .map(|i| vec![(step + i) as u8; rng.below(30) as usize])
                        .collect();
                    let first = next[s];
                    next[s] += count as u64;
                    attempted += count as u64;
                    let want: Vec<Seen> = msgs
                        .iter()
                        .enumerate()
                        .map(|(i, m)| Seen::Msg {
                            stream,
                            seq: first + i as u64,
                            payload: m.clone(),
                        })
                        .collect();
                    if kind == 1 && count == 1 {
                        let e = Event::Message {
                            stream,
                            seq: first,
                            recv_ns: 3,
                            snapshot: false,
                            payload: &msgs[0],
                        };
                        let w = producer.push(&e) == Pushed::Written;
                        let m = model.push(stream, 28 + msgs[0].len(), want, first, first);
                        assert_eq!(w, m, "cap {capacity} step {step}: message");
                        continue;
                    }
                    let b = blocks(&msgs);
                    let run = MessageRun::new(
                        stream,
                        first,
                        3,
                        BlockLengths::BigEndian,
                        &b,
                        count as u32,
                    )
                    .unwrap();
                    let len = 32 + b.len();
                    let got = producer.push_run(&run);
                    if len > model.capacity {
                        let mut all = true;
                        for (i, w) in want.into_iter().enumerate() {
                            let seq = first + i as u64;
                            let l = 28 + msgs[i].len();
                            all &= model.push(stream, l, vec![w], seq, seq);
                        }
                        assert_eq!(got == Pushed::Written, all, "each");
                    } else {
                        let m = model.push(stream, len, want, first, first + count as u64 - 1);
                        assert_eq!(got == Pushed::Written, m, "cap {capacity} step {step}: run");
                    }
                }
            }
        }
        loop {
            let got = drain(&mut consumer);
            for g in &got {
                if let Seen::Overrun { events, .. } = g {
                    marker_events += events;
                }
            }
            let want: Vec<Seen> = std::iter::from_fn(|| model.pop()).collect();
            assert_eq!(got, want);
            if model.pending.is_empty() {
                break;
            }
            assert_eq!(producer.flush_overrun(), model.flush());
        }
        assert_eq!(producer.pending_overruns(), 0);
        assert_eq!(producer.flush_overrun(), 0);
        let st = producer.stats().snapshot();
        assert_eq!(st.popped, st.pushed + st.overrun_markers, "{st:?}");
        assert_eq!(st.dropped, marker_events, "{st:?}");
        assert_eq!(st.pushed + st.dropped, attempted, "{st:?}");
        assert_eq!((st.fill_bytes, st.discarded), (0, 0));
        assert!(st.dropped > 0);
    }
}

// ----------------------------------------------------------------------------------------
// Sessions through the fan-out into small queues.

fn spec(channels: usize) -> FeedSpec {
    let channels = (0..channels)
        .map(|i| ChannelSpec {
            name: format!("c{i}"),
            lines: vec![LineSpec::loopback("239.255.0.1:1".parse().unwrap())],
            session: None,
            rerequest: Vec::new(),
            peer_stores: Vec::new(),
            resume: None,
            snapshot: None,
        })
        .collect();
    let mut spec = FeedSpec::new(Wire::MoldUdp64, channels);
    spec.gap_policy = GapPolicy::Skip;
    spec
}

// ----------------------------------------------------------------------------------------
// Differential: one datagram at a time into a closure vs groups through a small queue.

/// A MoldUDP64 datagram of `session` carrying messages `first..first + count`.
fn mold(session: u32, first: u64, count: u64) -> Vec<u8> {
    datagram(Wire::MoldUdp64, session, first, count)
}

fn eos(session: u32, next: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 64];
    let len = moldudp64::encode_end_of_session(&mut buf, mold_session(session), next).unwrap();
    buf.truncate(len);
    buf
}

/// A hostile feed: loss, reordering, duplicates, repacks, garbage, cut datagrams,
/// heartbeats, end of session, session changes and returns to retired sessions.
fn hostile_feed(rng: &mut Rng, packets: usize) -> Vec<(Vec<u8>, Via)> {
    let sessions: [u32; 3] = [1, 2, 3];
    let mut out = Vec::new();
    let mut seq = 1u64;
    let mut s = 0usize;
    for _ in 0..packets {
        let count = 1 + rng.below(20);
        let d = mold(sessions[s], seq, count);
        match rng.below(100) {
            0..=3 => {}
            4..=6 => {
                out.push((d.clone(), Via::Multicast));
                out.push((d, Via::Multicast));
            }
            7..=10 => {
                let n = 1 + rng.below(20);
                out.push((mold(sessions[s], seq + count, n), Via::Multicast));
                out.push((d, Via::Multicast));
                seq += n;
            }
            11..=13 => {
                let mut bad = d.clone();
                let cut = 1 + rng.below(bad.len() as u64 - 1) as usize;
                bad.truncate(cut);
                out.push((bad, Via::Multicast));
                out.push((d, Via::Multicast));
            }
            14..=15 => {
                let mut junk = vec![0u8; rng.below(60) as usize];
                for b in &mut junk {
                    *b = rng.next() as u8;
                }
                out.push((junk, Via::Multicast));
                out.push((d, Via::Multicast));
            }
            16..=18 => {
                out.push((d, Via::Multicast));
                out.push((mold(sessions[s], seq + count, 0), Via::Multicast));
            }
            19 => {
                out.push((d, Via::Multicast));
                out.push((eos(sessions[s], seq + count), Via::Multicast));
            }
            20 if s > 0 => {
                // A stale datagram of a retired session.
                out.push((mold(sessions[s - 1], 5, 3), Via::Multicast));
                out.push((d, Via::Multicast));
            }
            21 if s < 2 => {
                s += 1;
                seq = 1;
                out.push((mold(sessions[s], seq, count), Via::Multicast));
            }
            22..=24 => {
                // Unicast answer of something recent (usually duplicate, sometimes not).
                out.push((d.clone(), Via::Unicast));
                out.push((d, Via::Multicast));
            }
            _ => out.push((d, Via::Multicast)),
        }
        seq += count;
    }
    out
}

/// Feeds `feed` to a new session in groups of random sizes (each of one via), one
/// datagram at a time or a group at once, calling `between` after each group; then lets
/// the timers run out.
fn drive<E: Emit>(
    feed: &[(Vec<u8>, Via)],
    sizes: &mut Rng,
    emit: &mut E,
    one_by_one: bool,
    mut between: impl FnMut(&mut E),
) -> UdpVenue {
    let mut session = UdpVenue::new("test", spec(1));
    let mut now = 0u64;
    let mut i = 0;
    while i < feed.len() {
        let via = feed[i].1;
        let mut n = 1 + sizes.below(12) as usize;
        n = n.min(feed.len() - i);
        // A group is all of one via.
        let n = feed[i..i + n].iter().take_while(|d| d.1 == via).count();
        let ds: Vec<(&[u8], u64)> = feed[i..i + n]
            .iter()
            .enumerate()
            .map(|(k, d)| (d.0.as_slice(), 1 + (i + k) as u64))
            .collect();
        if one_by_one {
            for &(d, t) in &ds {
                session.on_datagram(Mono::from_nanos(now), 0, d, Wall::from_nanos(t), via, emit);
            }
        } else {
            let rs = received(&ds);
            session.on_datagrams(Mono::from_nanos(now), 0, &rs, via, emit);
        }
        i += n;
        now += 100_000 * n as u64;
        if session.poll_timeout().is_some_and(|t| t.as_nanos() <= now) {
            session.handle_timeout(Mono::from_nanos(now), emit);
        }
        between(emit);
    }
    for _ in 0..100 {
        now += 10_000_000;
        session.handle_timeout(Mono::from_nanos(now), emit);
    }
    session
}

fn seq_of(e: &Seen) -> Option<u64> {
    match e {
        Seen::Msg { seq, .. } => Some(*seq),
        _ => None,
    }
}

/// `queued` must be `direct` with contiguous stretches replaced by an overrun marker
/// that counts and spans exactly what it replaced.
fn matches_with_overruns(direct: &[Seen], queued: &[Seen]) {
    let mut d = 0;
    for (at, q) in queued.iter().enumerate() {
        if let Seen::Overrun {
            from, to, events, ..
        } = *q
        {
            let skipped = &direct[d..d + events as usize];
            let seqs: Vec<u64> = skipped.iter().filter_map(seq_of).collect();
            let lo = seqs.iter().copied().min().unwrap_or(u64::MAX);
            let hi = seqs.iter().copied().max().unwrap_or(0);
            assert_eq!((from, to), (lo, hi), "queued event {at}: marker span");
            d += events as usize;
            continue;
        }
        assert_eq!(Some(q), direct.get(d), "queued event {at} vs direct {d}");
        d += 1;
    }
    assert_eq!(d, direct.len(), "queue saw everything or was told");
}

fn differential(seed: u64, capacity: usize) {
    let mut rng = Rng(seed);
    let feed = hostile_feed(&mut rng, 3000);
    let mut direct = Vec::new();
    let s1 = drive(
        &feed,
        &mut Rng(seed ^ 77),
        &mut |e: &Event<'_>| direct.push(seen(e)),
        true,
        |_| {},
    );
    let (producer, mut consumer) = channel(capacity, 1);
    let mut fanout = Fanout::new(vec![producer]);
    let mut queued = Vec::new();
    let mut pops = Rng(seed ^ 5);
    // The same groups at the same times, with random drains between them.
    let session = drive(
        &feed,
        &mut Rng(seed ^ 77),
        &mut fanout,
        false,
        |fanout: &mut Fanout| {
            if pops.below(3) == 0 {
                for _ in 0..pops.below(200) {
                    match consumer.pop(|e| seen(&e)) {
                        Some(s) => queued.push(s),
                        None => break,
                    }
                }
            }
            if pops.below(4) == 0 {
                fanout.flush_overruns();
            }
        },
    );
    for _ in 0..50 {
        queued.extend(drain(&mut consumer));
        fanout.flush_overruns();
    }
    queued.extend(drain(&mut consumer));
    assert_eq!(s1.stats(0), session.stats(0), "session counters agree");
    matches_with_overruns(&direct, &queued);
    let n = direct.iter().filter_map(seq_of).count();
    // The feed goes on after an end of session (1 packet in 100); what follows one until
    // the next session change is a straggler and not delivered.
    assert!(n > 5_000, "direct delivered {n}; stats {:?}", s1.stats(0));
    assert!(direct.iter().any(|e| matches!(e, Seen::Gap { .. })));
    if capacity < 1 << 20 {
        assert!(fanout.dropped > 0, "the queue overran");
    }
}

#[test]
fn hostile_feed_grouped_through_a_small_queue_equals_one_by_one() {
    for seed in [11, 12, 13, 14] {
        differential(seed, 1 << 24);
        differential(seed, 3000);
        differential(seed, 600);
    }
}

// ----------------------------------------------------------------------------------------
// Overrun markers at the edges.

fn msg(stream: u16, seq: u64, snapshot: bool) -> Event<'static> {
    Event::Message {
        stream,
        seq,
        recv_ns: 1,
        snapshot,
        payload: b"abcd",
    }
}

/// The daemon stops by dropping the fan-out while a slow consumer's ring is still full:
/// the marker of its last loss goes into the room the ring keeps for markers, so the
/// consumer does not drain a stream that silently ends early.
#[test]
fn loss_just_before_shutdown_is_reported_to_the_consumer() {
    let (producer, mut consumer) = channel(100, 1);
    let mut fanout = Fanout::new(vec![producer]);
    for seq in 1..=4 {
        fanout.emit(&msg(0, seq, false));
    }
    assert_eq!(fanout.dropped, 1, "the fourth message found no room");
    // Shutdown, as `Running::wait` does it: the sink is still behind.
    drop(fanout);
    let seen = drain(&mut consumer);
    let told = seen
        .iter()
        .any(|s| matches!(s, Seen::Overrun { from: 4, to: 4, .. }));
    assert!(
        told,
        "consumer saw {seen:?}: message 4 vanished without an overrun marker"
    );
}

/// Snapshot messages carry none of the feed's sequences (the session gives them seq 0): a
/// dropped one must not widen the marker's range down to 0, which would claim sequences
/// the consumer already received.
#[test]
fn dropped_snapshot_message_does_not_widen_the_overrun_range() {
    let (mut producer, mut consumer) = channel(100, 1);
    for seq in 1..=3 {
        assert_eq!(producer.push(&msg(0, seq, false)), Pushed::Written);
    }
    let delivered = drain(&mut consumer);
    assert_eq!(delivered.len(), 3);
    for seq in 4..=6 {
        assert_eq!(producer.push(&msg(0, seq, false)), Pushed::Written);
    }
    // Full: a snapshot message (seq 0, snapshot) and live message 7 are dropped.
    assert_eq!(producer.push(&msg(0, 0, true)), Pushed::Dropped);
    assert_eq!(producer.push(&msg(0, 7, false)), Pushed::Dropped);
    let _ = drain(&mut consumer);
    assert_eq!(producer.flush_overrun(), 1);
    let marker = drain(&mut consumer);
    assert_eq!(
        marker,
        [Seen::Overrun {
            stream: 0,
            from: 7,
            to: 7,
            events: 2
        }],
        "the marker must not claim sequences 0..=6 (1..=6 were delivered)"
    );
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
