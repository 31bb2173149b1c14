//! End to end on loopback: the MoldUDP64 simulator (multicast through 127.0.0.1 with TTL 0,
//! a re-request server, a SoupBinTCP snapshot server) against the real rx loop, sockets,
//! venue session and consumer queue. Each test checks what the consumer received against
//! what the simulator published and injected.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::drive::live::{RxLoop, RxOptions, RxShared};
use crate::io::idle::IdleStrategy;
use crate::protocol::moldudp64::Session;
use crate::publish::fanout::Fanout;
use crate::publish::{self, Consumer, Event, StreamState};
use crate::sim::itch::synthetic_sequence;
use crate::sim::{FaultConfig, MoldSim, MoldSimConfig};
use crate::venue::udp::LineSpec;
use crate::venue::{AnyVenue, ChannelSpec, FeedSpec, SnapshotSpec, UdpVenue, Wire};

/// One loopback scenario at a time: they share two cores, and a scenario that starves the
/// rx loop would turn into kernel drops nobody injected.
pub(super) static SERIAL: Mutex<()> = Mutex::new(());

/// What the consumer saw.
#[derive(Debug, Default)]
pub(super) struct Received {
    /// Live messages, in arrival order: (session epoch index, seq).
    pub(super) messages: Vec<(usize, u64)>,
    pub(super) states: Vec<StreamState>,
    snapshot_messages: u64,
    snapshot_ends: Vec<u64>,
    order: Vec<&'static str>,
    pub(super) overruns: u64,
    pub(super) bad_payloads: u64,
}

pub(super) struct Handler {
    shared: RxShared,
    rx: JoinHandle<std::io::Result<crate::drive::live::RxResult>>,
    pub(super) consumer: Consumer,
}

pub(super) fn start_handler(
    sim: &MoldSim,
    group: SocketAddrV4,
    tweak: impl FnOnce(&mut FeedSpec),
) -> Handler {
    start_handler_with(sim, group, tweak, None)
}

/// [`start_handler`], with loss injection in front of the venue when `chaos` is set.
fn start_handler_with(
    sim: &MoldSim,
    group: SocketAddrV4,
    tweak: impl FnOnce(&mut FeedSpec),
    chaos: Option<crate::drive::live::ChaosSpec>,
) -> Handler {
    let channel = ChannelSpec {
        name: "sim-a".into(),
        lines: vec![LineSpec::loopback(group)],
        session: None,
        rerequest: vec![SocketAddr::V4(sim.rerequest_addr())],
        peer_stores: Vec::new(),
        resume: None,
        snapshot: Some(SnapshotSpec {
            addr: SocketAddr::V4(sim.snapshot_addr()),
            username: "sim".into(),
            password: "sim".into(),
        }),
    };
    let mut spec = FeedSpec::new(Wire::MoldUdp64, vec![channel]);
    spec.start_from = Some(1);
    spec.window = 1 << 16;
    spec.max_buffered = 1 << 16;
    spec.arena_datagrams = 8192;
    spec.policy.reorder_delay_ns = 2_000_000;
    spec.policy.request_timeout_ns = 50_000_000;
    spec.policy.retry_budget = 4;
    spec.policy.requests_per_sec = 20_000;
    spec.snapshot_timeout_ns = 5_000_000_000;
    spec.snapshot_retry_ns = 200_000_000;
    tweak(&mut spec);
    let venue = UdpVenue::new("sim", spec);
    let (producer, consumer) = publish::channel(64 << 20, 1);
    let shared = RxShared::default();
    let options = RxOptions {
        idle: IdleStrategy::Yield,
        chaos,
        ..RxOptions::default()
    };
    let rx_loop = RxLoop::new(
        vec![venue.into()],
        Fanout::new(vec![producer]),
        options,
        shared.clone(),
    )
    .expect("poll");
    let rx = std::thread::spawn(move || rx_loop.run());
    Handler {
        shared,
        rx,
        consumer,
    }
}

/// Reads the consumer until `done` says so or `limit` passes; checks payloads on the way.
pub(super) fn consume(
    consumer: &mut Consumer,
    limit: Duration,
    mut done: impl FnMut(&Received) -> bool,
) -> Received {
    let deadline = Instant::now() + limit;
    let mut r = Received::default();
    let mut epoch = 0usize;
    let mut empty = 0u32;
    while Instant::now() < deadline && !done(&r) {
        let got = consumer.pop(|e| match e {
            Event::Message {
                seq,
                snapshot: false,
                payload,
                ..
            } => {
                if synthetic_sequence(payload) != Some(seq) {
                    r.bad_payloads += 1;
                }
                r.messages.push((epoch, seq));
                r.order.push("message");
            }
            Event::Message { snapshot: true, .. } => {
                r.snapshot_messages += 1;
                r.order.push("snapshot_message");
            }
            Event::State { state, .. } => {
                if state == StreamState::Unseen && !r.messages.is_empty() {
                    epoch += 1;
                }
                r.states.push(state);
                r.order.push("state");
            }
            Event::SnapshotBegin { .. } => r.order.push("snapshot_begin"),
            Event::SnapshotEnd { next, .. } => {
                r.snapshot_ends.push(next);
                r.order.push("snapshot_end");
            }
            Event::Overrun { .. } => r.overruns += 1,
            _ => {}
        });
        if got.is_none() {
            // Idle backoff for a polled queue (two cores: do not starve the rx thread).
            empty += 1;
            if empty > 64 {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::thread::yield_now();
            }
        } else {
            empty = 0;
        }
    }
    r
}

pub(super) fn stop(handler: Handler) -> Vec<AnyVenue> {
    stop_all(handler).venues
}

pub(super) fn stop_all(handler: Handler) -> crate::drive::live::RxResult {
    handler.shared.stop.store(true, Ordering::Relaxed);
    handler.rx.join().expect("rx thread").expect("rx loop")
}

pub(super) fn config(
    group: SocketAddrV4,
    count: u64,
    rate: f64,
    faults: FaultConfig,
) -> MoldSimConfig {
    let mut c = MoldSimConfig::new(group);
    c.count = count;
    c.rate = Some(rate);
    c.faults = faults;
    c.heartbeat_interval = Some(Duration::from_millis(50));
    c.start_delay = Duration::from_millis(50);
    c.end_of_session_repeats = 20;
    c.end_of_session_gap = Duration::from_millis(50);
    c
}

pub(super) fn closed(r: &Received) -> bool {
    r.states.last() == Some(&StreamState::Closed)
}

pub(super) fn assert_contiguous(messages: &[(usize, u64)], epoch: usize, from: u64, to: u64) {
    let seqs: Vec<u64> = messages
        .iter()
        .filter(|m| m.0 == epoch)
        .map(|m| m.1)
        .collect();
    let want = to - from + 1;
    let first_bad = seqs
        .iter()
        .enumerate()
        .find(|(i, s)| **s != from + *i as u64)
        .map(|(i, s)| (i, *s));
    assert!(
        seqs.len() as u64 == want && first_bad.is_none(),
        "epoch {epoch}: {} messages, want {want} ({from}..={to}); first out of place: {first_bad:?}",
        seqs.len()
    );
}

#[test]
fn million_messages_with_loss_bursts_reordering_and_duplicates() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 1), 46101);
    let faults = FaultConfig {
        seed: 7,
        loss: 0.02,
        burst_len: 50,
        burst_every: 4_000,
        reorder: 0.01,
        reorder_depth: 3,
        duplicate: 0.01,
        ..FaultConfig::default()
    };
    let mut cfg = config(group, 1_000_000, 200_000.0, faults);
    cfg.history = 1 << 20;
    cfg.max_request = 2_000;
    let sim_holder = MoldSim::start(cfg).expect("simulator");
    let mut h = start_handler(&sim_holder, group, |s| {
        s.max_replay = 1 << 20;
        s.policy.max_request_count = 2_000;
    });
    let r = consume(&mut h.consumer, Duration::from_secs(120), closed);
    let injected = sim_holder.injected();
    let venues = stop(h);
    let stats = venues[0].udp().expect("a udp venue").stats(0);
    assert!(
        closed(&r),
        "stream closed after end of session; states {:?}",
        r.states
    );
    assert_contiguous(&r.messages, 0, 1, 1_000_000);
    assert_eq!(r.bad_payloads, 0, "payloads intact");
    assert_eq!(r.overruns, 0);
    assert!(
        injected.lost_packets > 200 && injected.burst_packets > 0,
        "{injected:?}"
    );
    // What was lost on multicast came back by re-request: every lost message (and possibly
    // reordered ones whose answer beat the late packet, or ones the kernel dropped).
    assert!(
        stats.recovered >= injected.lost_messages(),
        "recovered {} for {} lost: {stats:?}",
        stats.recovered,
        injected.lost_messages()
    );
    assert!(
        stats.sequencer.gaps >= injected.lost.len() as u64,
        "{stats:?}"
    );
    assert!(stats.sequencer.duplicates >= injected.duplicated.len() as u64);
    assert_eq!(stats.snapshots_started, 0, "re-requests sufficed");
    assert_eq!(stats.malformed, 0);
}

#[test]
fn dead_rerequest_server_falls_back_to_the_snapshot() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 2), 46102);
    let faults = FaultConfig {
        seed: 11,
        loss: 0.01,
        rerequest_down: true,
        ..FaultConfig::default()
    };
    let sim = MoldSim::start(config(group, 50_000, 100_000.0, faults)).expect("simulator");
    let mut h = start_handler(&sim, group, |_| {});
    let r = consume(&mut h.consumer, Duration::from_secs(60), closed);
    let injected = sim.injected();
    let venues = stop(h);
    let stats = venues[0].udp().expect("a udp venue").stats(0);
    assert!(injected.requests_while_down > 0);
    assert!(stats.snapshots_done >= 1, "{stats:?}");
    assert!(closed(&r), "{:?}", r.states);
    // Each snapshot: the reset marker, the snapshot messages, its end, then complete data
    // from the sequence it names up to the next snapshot (or the end of the session).
    assert!(r.states.contains(&StreamState::ResetRequired));
    assert!(r.snapshot_messages > 0);
    let mut msg = 0usize;
    let mut expect_next: Option<u64> = Some(1);
    let mut ends = r.snapshot_ends.iter();
    for (i, o) in r.order.iter().enumerate() {
        match *o {
            "message" => {
                let seq = r.messages[msg].1;
                msg += 1;
                let want = expect_next.expect("no data between a snapshot's begin and end");
                assert_eq!(seq, want, "data after a snapshot must be complete");
                expect_next = Some(seq + 1);
            }
            "snapshot_begin" => {
                assert_eq!(r.order[i - 1], "state", "reset marker before the snapshot");
                expect_next = None;
            }
            "snapshot_message" => assert!(expect_next.is_none()),
            "snapshot_end" => expect_next = ends.next().copied(),
            _ => {}
        }
    }
    // Everything up to the last message is accounted for: delivered, or in a snapshot.
    let reached = r
        .messages
        .last()
        .map(|m| m.1)
        .max(r.snapshot_ends.last().map(|n| n - 1));
    assert_eq!(reached, Some(50_000));
    assert_eq!(r.bad_payloads, 0);
}

#[test]
fn session_restart_then_end_of_session() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 3), 46103);
    // No injected loss here: the restart is unannounced and the re-request server forgets
    // the old session with it, so a loss just before the restart could never be recovered
    // (the loss paths have their own tests).
    let faults = FaultConfig {
        seed: 3,
        restart_after: Some(20_000),
        ..FaultConfig::default()
    };
    let sim = MoldSim::start(config(group, 40_000, 100_000.0, faults)).expect("simulator");
    let mut h = start_handler(&sim, group, |_| {});
    let r = consume(&mut h.consumer, Duration::from_secs(60), closed);
    let injected = sim.injected();
    let venues = stop(h);
    let stats = venues[0].udp().expect("a udp venue").stats(0);
    assert_eq!(injected.restarts.len(), 1, "{injected:?}");
    assert_eq!(stats.new_sessions, 1);
    assert!(closed(&r), "{:?}", r.states);
    assert!(
        r.states.contains(&StreamState::Unseen),
        "the restart is announced"
    );
    // The first session up to the restart, then the new one from 1: no duplicates.
    assert_contiguous(&r.messages, 0, 1, 20_000);
    assert_contiguous(&r.messages, 1, 1, 20_000);
    assert_eq!(r.bad_payloads, 0);
    assert_ne!(sim.session(), Session(*b"SIM0000001"));
}

#[test]
fn tail_loss_is_revealed_by_heartbeats() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 4), 46104);
    // Lose roughly everything at the very end: with a burst at the last packets, only the
    // heartbeats and end-of-session packets show that anything is missing.
    let faults = FaultConfig {
        seed: 5,
        burst_len: 3,
        burst_every: 60,
        ..FaultConfig::default()
    };
    let sim = MoldSim::start(config(group, 3_000, 50_000.0, faults)).expect("simulator");
    let mut h = start_handler(&sim, group, |_| {});
    let r = consume(&mut h.consumer, Duration::from_secs(30), closed);
    let injected = sim.injected();
    let venues = stop(h);
    let stats = venues[0].udp().expect("a udp venue").stats(0);
    assert!(injected.lost_packets > 0);
    assert!(closed(&r), "{:?}", r.states);
    assert_contiguous(&r.messages, 0, 1, 3_000);
    assert!(stats.recovered >= injected.lost_messages(), "{stats:?}");
    assert!(stats.heartbeats > 0);
}

#[test]
fn hostile_sequence_and_garbage_keep_memory_bounded() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 5), 46105);
    let mut cfg = config(group, 30_000, 20_000.0, FaultConfig::default());
    cfg.start_delay = Duration::from_millis(300);
    let sim = MoldSim::start(cfg).expect("simulator");
    let mut h = start_handler(&sim, group, |_| {});
    // A hostile packet far ahead, and thousands of malformed ones, to the same group.
    let sender = crate::io::socket::open_multicast_sender(Ipv4Addr::LOCALHOST, 0).expect("sender");
    let mut buf = [0u8; 64];
    let mut w =
        crate::protocol::moldudp64::PacketWriter::new(&mut buf, sim.session(), 1_000_000_000)
            .expect("writer");
    w.push(b"hostile").expect("fits");
    let n = w.finish();
    let hostile = buf[..n].to_vec();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut garbage = Vec::new();
    for i in 0..3_000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let len = (rng % 60) as usize;
        garbage.clear();
        garbage.extend((0..len).map(|k| (rng >> (k % 56)) as u8));
        if i % 3 == 0 && garbage.len() > 20 {
            garbage[..10].copy_from_slice(&sim.session().0);
        }
        let _ = sender.send_to(&garbage, group);
        if i == 1_500 {
            let _ = sender.send_to(&hostile, group);
        }
    }
    let r = consume(&mut h.consumer, Duration::from_secs(60), closed);
    let venues = stop(h);
    let stats = venues[0].udp().expect("a udp venue").stats(0);
    assert!(stats.malformed >= 1_000, "{stats:?}");
    assert!(closed(&r), "{:?}", r.states);
    assert!(stats.sequencer.buffered_hwm <= 1 << 16, "memory bounded");
    assert!(
        stats.snapshots_done >= 1,
        "the hostile packet forced a resync: {stats:?}"
    );
    assert_eq!(r.bad_payloads, 0);
    // Everything up to the end is accounted for: delivered, or in a snapshot.
    let reached = r
        .messages
        .last()
        .map(|m| m.1)
        .max(r.snapshot_ends.last().map(|n| n - 1));
    assert_eq!(reached, Some(30_000));
}

#[test]
fn a_stray_sender_on_the_group_never_takes_the_channel() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 6), 46106);
    let faults = FaultConfig {
        seed: 11,
        loss: 0.01,
        ..FaultConfig::default()
    };
    let sim = MoldSim::start(config(group, 40_000, 100_000.0, faults)).expect("simulator");
    let mut h = start_handler(&sim, group, |_| {});
    // Another sender on the same group (as a misconfigured feed or a capture replayed onto
    // it would be), with a session of its own: once the venue's session is established,
    // one or two datagrams after every 300 of the venue's messages the consumer gets.
    let sender = crate::io::socket::open_multicast_sender(Ipv4Addr::LOCALHOST, 0).expect("sender");
    // Never more than two strays in a row: a burst goes out only once a receiver of its
    // own on the group has seen one of the venue's datagrams behind the last burst (every
    // member's queue gets the group's datagrams in the same order). Pacing by the
    // consumer alone is not enough: a consumer running behind would send bursts back to
    // back, and three strays in a row are a restart by the rules under test.
    let (watcher, _) = crate::io::socket::open_multicast(&crate::io::socket::MulticastSpec {
        group,
        interface: Ipv4Addr::LOCALHOST,
        source: None,
        rcvbuf: 8 << 20,
    })
    .expect("watcher");
    let mut stray_seq = 1;
    let mut sent = 0u64;
    let mut next_at = 300;
    let mut burst = 0u64;
    let mut own_seen = 0u64;
    let mut waiting = false;
    let r = consume(&mut h.consumer, Duration::from_secs(60), |r| {
        let mut buf = [0u8; 2048];
        while let Ok((n, _)) = watcher.recv_from(&mut buf) {
            match buf.get(..10.min(n)) {
                Some(b"STRAY00001") => own_seen += 1,
                Some(_) if waiting && own_seen >= burst => waiting = false,
                _ => {}
            }
        }
        // None near the end: after the venue's end of session, the next session needs no
        // confirming, so a stray then would be adopted by design.
        if !waiting && r.messages.len() >= next_at && r.messages.len() < 39_000 {
            next_at = r.messages.len() + 300;
            burst = 0;
            own_seen = 0;
            for _ in 0..(1 + next_at / 300 % 2) {
                let mut buf = [0u8; 256];
                let mut w = crate::protocol::moldudp64::PacketWriter::new(
                    &mut buf,
                    Session(*b"STRAY00001"),
                    stray_seq,
                )
                .expect("writer");
                for _ in 0..4 {
                    w.push(b"not this venue's").expect("fits");
                }
                let n = w.finish();
                stray_seq += 4;
                if sender.send_to(&buf[..n], group).is_ok() {
                    sent += 1;
                    burst += 1;
                }
            }
            waiting = burst > 0;
        }
        closed(r)
    });
    let venues = stop(h);
    let stats = venues[0].udp().expect("a udp venue").stats(0);
    assert!(closed(&r), "{:?}", r.states);
    assert_eq!(stats.new_sessions, 0, "{stats:?}");
    assert!(sent >= 100, "{sent} stray datagrams sent");
    assert!(
        stats.unconfirmed_session > 0 && stats.unconfirmed_session <= sent,
        "{} counted, {sent} stray datagrams sent: {stats:?}",
        stats.unconfirmed_session
    );
    assert_contiguous(&r.messages, 0, 1, 40_000);
    assert_eq!(r.bad_payloads, 0);
    assert!(
        !r.states[1..].contains(&StreamState::Unseen),
        "never reset: {:?}",
        r.states
    );
}

#[test]
fn loss_injected_in_front_of_a_clean_feed_is_recovered_exactly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 8), 46108);
    // The simulator publishes without faults of its own: every fault below is made by
    // the loss injector between the socket and the venue.
    let sim = MoldSim::start(config(group, 60_000, 100_000.0, FaultConfig::default()))
        .expect("simulator");
    let chaos = crate::drive::live::ChaosSpec::parse(
        "seed=5,drop=0.02,burst=0.002,burst_len=8,duplicate=0.01,reorder=0.01,delay=0.005,delay_ms=3",
    )
    .expect("spec");
    let mut h = start_handler_with(&sim, group, |_| {}, Some(chaos));
    let r = consume(&mut h.consumer, Duration::from_secs(60), closed);
    let result = stop_all(h);
    let stats = result.venues[0].udp().expect("a udp venue").stats(0);
    let injected = result.chaos.expect("loss injection was on");
    assert!(closed(&r), "{:?} {stats:?}", r.states);
    assert_contiguous(&r.messages, 0, 1, 60_000);
    assert_eq!(r.bad_payloads, 0);
    assert!(
        injected.dropped > 20 && injected.duplicated > 5 && injected.reordered > 5,
        "{injected:?}"
    );
    assert!(
        stats.recovered > 0 && stats.sequencer.duplicates > 0,
        "{stats:?}"
    );
    assert_eq!(sim.injected().lost_packets, 0, "a clean feed");
    sim.stop().expect("sim");
}
