//! The connection's lifecycle on a virtual clock: backoff that resets only after proven
//! health, the attempt budget of a window, rotation that backs off, pings as liveness.

use crate::time::{Mono, Wall};
use crate::venue::{ConnEvent, ConnId, IoRequest, Venue};

use super::super::{BinanceSpec, BinanceVenue, Market};
use super::{S, Sink, depth_frame};

fn venue(tweak: impl FnOnce(&mut BinanceSpec)) -> BinanceVenue {
    let mut spec = BinanceSpec::new(Market::Spot, vec!["btcusdt".to_string()]);
    tweak(&mut spec);
    BinanceVenue::new("v", spec, "ws://127.0.0.1:1", "http://127.0.0.1:1", None).unwrap()
}

/// Runs timers until `t`, returning the connection asked for, if any.
fn step(v: &mut BinanceVenue, t: Mono, sink: &mut Sink) -> Option<ConnId> {
    if v.poll_timeout().is_some_and(|d| d <= t) {
        v.handle_timeout(t, sink);
    }
    let mut opened = None;
    while let Some(io) = v.poll_io() {
        if let IoRequest::Open { conn, .. } = io {
            opened = Some(conn);
        }
    }
    opened
}

/// A server that accepts, sends one event and drops, for `span_s` virtual seconds:
/// the times of every attempt.
fn accept_and_drop(v: &mut BinanceVenue, span_s: u64) -> Vec<u64> {
    let mut sink = Sink::default();
    let mut attempts = Vec::new();
    let mut t = Mono::ZERO;
    let end = Mono::ZERO.after_nanos(span_s * S);
    while t < end {
        if let Some(conn) = step(v, t, &mut sink) {
            attempts.push(t.as_nanos());
            let t1 = t.after_nanos(S / 100);
            v.handle_connection(t1, conn, ConnEvent::Opened, &mut sink);
            let frame = depth_frame("BTCUSDT", 10, 11, None);
            v.handle_frame(t1, conn, &frame, Wall::from_nanos(1), &mut sink);
            v.handle_connection(t1, conn, ConnEvent::Closed("dropped"), &mut sink);
            t = t1;
        }
        t = match v.poll_timeout() {
            Some(d) if d > t => d,
            _ => t.after_nanos(S / 100),
        };
    }
    attempts
}

#[test]
fn a_handshake_alone_does_not_reset_the_backoff() {
    let mut v = venue(|_| {});
    let attempts = accept_and_drop(&mut v, 60);
    // 200 ms doubling to 30 s, less up to 30 % jitter: about 9 attempts in a minute.
    assert!(
        (6..=12).contains(&attempts.len()),
        "{} attempts in 60 s: {attempts:?}",
        attempts.len()
    );
    let gaps: Vec<u64> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).take(6).all(|g| g[1] > g[0]), "{gaps:?}");
}

#[test]
fn the_attempt_budget_caps_every_window() {
    let window = 10 * S;
    let mut v = venue(|s| {
        s.connect_budget = 4;
        s.connect_window_ns = window;
    });
    let attempts = accept_and_drop(&mut v, 60);
    for (i, &a) in attempts.iter().enumerate() {
        let within = attempts[i..]
            .iter()
            .take_while(|&&b| b < a + window)
            .count();
        assert!(within <= 4, "{within} attempts from {a}: {attempts:?}");
    }
    assert!(v.transport_stats().connects_deferred >= 1);
    // Budget 300 in 5 minutes is Binance's ban line: the default is well under it.
    let mut d = venue(|_| {});
    let attempts = accept_and_drop(&mut d, 300);
    assert!(attempts.len() <= 60, "{}", attempts.len());
}

#[test]
fn a_healthy_connection_resets_the_backoff_and_rotation_backs_off() {
    let mut v = venue(|s| s.healthy_after_ns = 5 * S);
    let mut sink = Sink::default();
    // Three quick failures grow the backoff.
    let _ = accept_and_drop(&mut v, 2);
    let mut t = v.poll_timeout().unwrap();
    let conn = step(&mut v, t, &mut sink).expect("an attempt");
    v.handle_connection(t, conn, ConnEvent::Opened, &mut sink);
    // Data for 6 s: healthy.
    for k in 0..60u64 {
        t = t.after_nanos(S / 10);
        let frame = depth_frame("BTCUSDT", 100 + k, 100 + k, None);
        v.handle_frame(t, conn, &frame, Wall::from_nanos(1), &mut sink);
    }
    v.handle_connection(t, conn, ConnEvent::Closed("dropped"), &mut sink);
    assert_eq!(v.transport_stats().healthy, 1);
    let retry = v.poll_timeout().unwrap().nanos_since(t);
    assert!(retry <= S / 5, "first delay again after health: {retry}");

    // Silence rotations: each one waits longer than the one before.
    let mut delays = Vec::new();
    for _ in 0..4 {
        t = v.poll_timeout().unwrap();
        let conn = step(&mut v, t, &mut sink).expect("an attempt");
        v.handle_connection(t, conn, ConnEvent::Opened, &mut sink);
        // Nothing at all: the silence timeout rotates it.
        let due = t.after_nanos(v.session().spec().silence_timeout_ns);
        let _ = step(&mut v, due, &mut sink);
        delays.push(v.poll_timeout().unwrap().nanos_since(due));
    }
    assert_eq!(v.transport_stats().rotations, 4);
    assert!(delays.windows(2).all(|d| d[1] > d[0]), "{delays:?}");
}

#[test]
fn pings_and_pongs_keep_a_quiet_connection() {
    let mut v = venue(|s| s.silence_timeout_ns = 3 * S);
    let mut sink = Sink::default();
    let conn = step(&mut v, Mono::ZERO, &mut sink).expect("an attempt");
    v.handle_connection(Mono::ZERO, conn, ConnEvent::Opened, &mut sink);
    let mut t = Mono::ZERO;
    for _ in 0..30 {
        t = t.after_nanos(S);
        v.handle_connection(t, conn, ConnEvent::Alive, &mut sink);
        assert!(step(&mut v, t, &mut sink).is_none());
    }
    assert_eq!(v.transport_stats().rotations, 0);
    assert_eq!(v.transport_stats().alive_signals, 30);
    // Quiet (no event for the quiet period) is counted, not acted on.
    let quiet = v
        .counters()
        .into_iter()
        .find(|(n, _)| *n == "quiet_symbols");
    assert_eq!(
        quiet,
        Some(("quiet_symbols", 0)),
        "30 s is under the 60 s default"
    );
    for _ in 0..40 {
        t = t.after_nanos(S);
        v.handle_connection(t, conn, ConnEvent::Alive, &mut sink);
        let _ = step(&mut v, t, &mut sink);
    }
    let quiet = v
        .counters()
        .into_iter()
        .find(|(n, _)| *n == "quiet_symbols");
    assert_eq!(quiet, Some(("quiet_symbols", 1)));
    // Without signs of life the silence timeout still rotates.
    let _ = step(&mut v, t.after_nanos(3 * S), &mut sink);
    assert_eq!(v.transport_stats().rotations, 1);
}
