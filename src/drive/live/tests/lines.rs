//! A/B lines end to end, each test in a network namespace of its own: the simulator
//! publishes every datagram on two groups through 127.0.0.1, each line with its own loss,
//! bursts, delay or death, and the rx loop joins both. The simulator's own record says
//! what every line lost; its re-request server counts each message it resent that a line
//! had carried, which an arbitrating handler never needs to ask for.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use super::mold::{SERIAL, assert_contiguous, closed, config, consume, start_handler, stop};
use super::{IN_NETNS, rerun_in_netns};
use crate::sim::{FaultConfig, LineFaults, MoldSim, SimLine};
use crate::venue::udp::LineSpec;

const GROUP_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 62, 1), 46201);
const GROUP_B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 62, 2), 46201);

/// Runs `test` in a namespace of its own; true when the caller is that run.
fn in_netns(test: &str) -> bool {
    if std::env::var_os(IN_NETNS).is_some() {
        return true;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    rerun_in_netns(test, false);
    false
}

/// What a run of `count` messages at `rate` gave: the venue's stats, each line's, and
/// what the simulator injected and resent.
struct Run {
    /// Datagrams the kernel dropped on the lines' sockets (their receive buffers full).
    kernel_drops: u64,
    stats: crate::venue::ChannelStats,
    lines: Vec<crate::venue::LineStats>,
    injected: crate::sim::Injected,
    sim: crate::sim::SimStats,
}

fn run(
    count: u64,
    rate: f64,
    feed: FaultConfig,
    a: LineFaults,
    b: LineFaults,
    window_ns: u64,
) -> Run {
    let mut cfg = config(GROUP_A, count, rate, feed);
    cfg.history = 1 << 20;
    cfg.max_request = 2_000;
    cfg.line_faults = a;
    cfg.more_lines = vec![SimLine {
        group: GROUP_B,
        faults: b,
    }];
    let sim = MoldSim::start(cfg).expect("simulator");
    let mut h = start_handler(&sim, GROUP_A, |s| {
        s.channels[0].lines.push(LineSpec::loopback(GROUP_B));
        s.max_replay = 1 << 20;
        s.policy.max_request_count = 2_000;
        s.arbitration_window_ns = window_ns;
        s.line_down_ns = 200_000_000;
    });
    let limit = Duration::from_secs_f64(count as f64 / rate + 60.0);
    let r = consume(&mut h.consumer, limit, closed);
    let kernel_drops = udp_drops(GROUP_A.port());
    let injected = sim.injected();
    let sim_stats = sim.stats();
    let venues = stop(h);
    let udp = venues[0].udp().expect("a udp venue");
    assert!(closed(&r), "the stream closed; states {:?}", r.states);
    assert_contiguous(&r.messages, 0, 1, count);
    assert_eq!((r.bad_payloads, r.overruns), (0, 0));
    Run {
        kernel_drops,
        stats: udp.stats(0),
        lines: crate::venue::Venue::lines(udp, 0).to_vec(),
        injected,
        sim: sim_stats,
    }
}

/// Datagrams the kernel dropped on the UDP sockets bound to `port` in this namespace (the
/// last column of `/proc/net/udp`).
fn udp_drops(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let port = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.ends_with(&port))
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

fn lossy(seed: u64, burst_every: u64) -> LineFaults {
    LineFaults {
        seed,
        loss: 0.02,
        burst_len: 20,
        burst_every,
        ..LineFaults::default()
    }
}

/// The first case: independent 2 % loss with bursts on each line, a million
/// messages: exactly 1..N once and in order, and the only messages asked for are those
/// no line carried.
#[test]
fn independent_loss_on_two_lines_asks_only_for_what_both_lost() {
    if !in_netns(
        "drive::live::tests::lines::independent_loss_on_two_lines_asks_only_for_what_both_lost",
    ) {
        return;
    }
    let count = 1_000_000;
    let r = run(
        count,
        200_000.0,
        FaultConfig::default(),
        lossy(3, 3_000),
        lossy(5, 3_100),
        1_000_000,
    );
    eprintln!(
        "lines: {:?} lost on each line, {} messages on both; resent {} ({} carried by a line); arbitrated {}; {:?}",
        r.injected.line_lost_packets,
        r.injected.lost_messages(),
        r.sim.messages_resent,
        r.sim.messages_resent_carried,
        r.stats.arbitrated,
        r.lines
    );
    assert!(r.injected.line_lost_packets.iter().all(|&n| n > 1_000));
    assert!(
        r.injected.lost_messages() > 0,
        "some packets are lost on both lines"
    );
    // Nothing a line carried was asked for, unless the kernel dropped it on both sockets
    // (a stall of the loop on two shared cores longer than the receive buffers hold).
    if r.kernel_drops == 0 {
        assert_eq!(
            r.sim.messages_resent_carried, 0,
            "nothing a line carried was asked for"
        );
        assert_eq!(r.stats.sequencer.duplicates, 0, "copies are not anomalies");
    } else {
        eprintln!("the kernel dropped {} datagrams", r.kernel_drops);
        assert!(r.sim.messages_resent_carried <= r.kernel_drops * 40);
    }
    assert!(r.stats.recovered >= r.injected.lost_messages());
    assert!(r.stats.arbitrated > count / 2);
    assert!(
        r.lines
            .iter()
            .all(|l| l.missed > 0 && l.wins > 0 && !l.down)
    );
}

/// Line A dies halfway: line B carries on, with no gap and no request.
#[test]
fn line_a_dead_halfway_loses_nothing() {
    if !in_netns("drive::live::tests::lines::line_a_dead_halfway_loses_nothing") {
        return;
    }
    let a = LineFaults {
        dead_after: Some(5_000),
        ..LineFaults::default()
    };
    let r = run(
        200_000,
        100_000.0,
        FaultConfig::default(),
        a,
        LineFaults::default(),
        1_000_000,
    );
    if r.kernel_drops == 0 {
        assert_eq!(r.stats.requests, 0, "{:?}", r.stats);
        assert_eq!(r.stats.sequencer.gaps, 0);
    }
    assert!(r.lines[0].down && r.lines[0].downs == 1, "{:?}", r.lines[0]);
    assert!(!r.lines[1].down);
}

/// Line B runs 2 ms behind line A, which loses 2 %; with a 5 ms window line B fills every
/// gap and nothing is asked for.
#[test]
fn a_line_two_ms_behind_fills_the_other_within_the_window() {
    if !in_netns(
        "drive::live::tests::lines::a_line_two_ms_behind_fills_the_other_within_the_window",
    ) {
        return;
    }
    let b = LineFaults {
        delay: Duration::from_millis(2),
        ..LineFaults::default()
    };
    let r = run(
        200_000,
        100_000.0,
        FaultConfig::default(),
        lossy(7, 0),
        b,
        5_000_000,
    );
    assert!(r.injected.line_lost_packets[0] > 100);
    assert_eq!(r.injected.lost_messages(), 0);
    // Line b is 2 ms behind as long as the simulator's thread runs on time; on two busy
    // cores it may send later, and a copy more than the window behind is asked for.
    let behind = Duration::from_millis(2) + r.injected.line_delay_overrun;
    let on_time = r.kernel_drops == 0 && behind < Duration::from_millis(5);
    if on_time {
        assert_eq!(r.sim.requests_received, 0, "{:?}", r.stats);
    } else {
        eprintln!(
            "line b was up to {behind:?} behind, and the kernel dropped {} datagrams: \
             requests for it are expected ({} sent)",
            r.kernel_drops, r.stats.requests
        );
    }
    assert!(r.lines[0].missed > 0);
    assert!(r.lines[1].wins > 0, "line b brought what line a lost");
    let lag = &r.lines[1].lag;
    // Line b's copies are about 2 ms behind: nine in ten between 1 and 4 ms when the
    // simulator sent them on time; when it ran late (it records by how much), the late
    // ones spread further, and still more than half are there.
    let near: u64 = lag.counts[11..=12].iter().sum();
    if on_time {
        assert!(near * 10 > lag.count() * 9, "{lag:?}");
    } else {
        assert!(near * 2 > lag.count(), "{lag:?}");
    }
}

/// Loss on both lines at once (the feed's own loss, before the lines): re-requests bring
/// it back.
#[test]
fn loss_on_both_lines_is_recovered_by_re_request() {
    if !in_netns("drive::live::tests::lines::loss_on_both_lines_is_recovered_by_re_request") {
        return;
    }
    let feed = FaultConfig {
        seed: 9,
        loss: 0.01,
        burst_len: 10,
        burst_every: 2_000,
        ..FaultConfig::default()
    };
    let r = run(
        200_000,
        100_000.0,
        feed,
        LineFaults::default(),
        LineFaults::default(),
        1_000_000,
    );
    assert!(r.injected.lost_messages() > 1_000);
    assert!(r.stats.recovered >= r.injected.lost_messages());
    assert_eq!(r.sim.messages_resent_carried, 0);
    assert_eq!(r.stats.snapshots_started, 0);
}
