//! Snapshot scheduling: request paths and weights, staggering within the weight budget,
//! 429, 418 and 403 pauses, the venue's own weight count, failures, timeouts and their backoff,
//! and symbols given up after permanent errors.

use super::super::{Market, SnapshotResult};
use super::{S, Sink, body, depth_frame, feed, session};
use crate::sequencer::StreamState;

#[test]
fn requests_name_the_market_path_and_weight() {
    let cases = [
        (
            Market::Spot,
            "btcusdt",
            1000,
            "/api/v3/depth?symbol=BTCUSDT&limit=1000",
            50,
        ),
        (
            Market::Spot,
            "ethbtc",
            5000,
            "/api/v3/depth?symbol=ETHBTC&limit=5000",
            250,
        ),
        (
            Market::Usdm,
            "btcusdt",
            500,
            "/fapi/v1/depth?symbol=BTCUSDT&limit=500",
            10,
        ),
        (
            Market::Coinm,
            "btcusd_perp",
            100,
            "/dapi/v1/depth?symbol=BTCUSD_PERP&limit=100",
            5,
        ),
    ];
    for (market, symbol, limit, path, weight) in cases {
        let mut s = session(market, &[symbol], |spec| spec.depth_limit = limit);
        let mut sink = Sink::default();
        assert_eq!(
            s.poll_snapshot(0),
            None,
            "nothing to check a snapshot against yet"
        );
        let prev = market.is_linked().then_some(1);
        feed(&mut s, &mut sink, 0, &depth_frame(symbol, 10, 20, prev));
        let request = s.poll_snapshot(0).unwrap();
        assert_eq!((request.symbol, request.path_and_query.as_str()), (0, path));
        assert_eq!(request.weight, weight);
        assert_eq!(s.weight_used_last_minute(), weight);
    }
}

#[test]
fn requests_are_staggered_within_the_weight_budget() {
    let names = ["aaa", "bbb", "ccc", "ddd"];
    let mut s = session(Market::Spot, &names, |spec| {
        spec.weight_budget_per_min = 120
    });
    let mut sink = Sink::default();
    for name in names {
        feed(&mut s, &mut sink, 0, &depth_frame(name, 10, 20, None));
    }
    assert_eq!(s.poll_snapshot(0).map(|r| r.symbol), Some(0));
    assert_eq!(s.poll_snapshot(0), None, "one at a time");
    body(&mut s, &mut sink, S, 0, 15);
    assert_eq!(s.poll_snapshot(S).map(|r| r.symbol), Some(1));
    body(&mut s, &mut sink, 2 * S, 1, 15);
    assert_eq!(
        s.poll_snapshot(2 * S),
        None,
        "100 used, 50 more would pass 120"
    );
    assert_eq!(s.weight_used_last_minute(), 100);
    assert_eq!(s.poll_timeout(), Some(60 * S));
    assert_eq!(s.poll_snapshot(60 * S - 1), None);
    assert_eq!(s.poll_snapshot(60 * S).map(|r| r.symbol), Some(2));
    assert_eq!(s.weight_used_last_minute(), 100);
    assert_eq!(
        (s.state(0), s.state(1)),
        (StreamState::Synced, StreamState::Synced)
    );
    assert_eq!(s.state(3), StreamState::ResetRequired);
}

#[test]
fn rate_limits_pause_the_venue() {
    let mut s = session(Market::Usdm, &["aaa", "bbb"], |spec| spec.max_inflight = 2);
    let mut sink = Sink::default();
    feed(&mut s, &mut sink, 0, &depth_frame("aaa", 10, 20, Some(5)));
    let _ = s.poll_snapshot(0).unwrap();
    let limited = |secs| SnapshotResult::Status {
        code: 429,
        retry_after_secs: secs,
    };
    // Retry-After longer than the own pause (10 s) decides.
    s.on_snapshot(0, 0, limited(Some(30)), &mut sink);
    feed(&mut s, &mut sink, S, &depth_frame("bbb", 10, 20, Some(5)));
    assert_eq!(s.poll_snapshot(30 * S - 1), None);
    assert_eq!(s.poll_timeout(), Some(30 * S));
    let again = s.poll_snapshot(30 * S).unwrap();
    // A second 429 in a row, without Retry-After: the own pause doubles to 20 s.
    s.on_snapshot(30 * S, again.symbol, limited(None), &mut sink);
    assert_eq!(s.poll_snapshot(50 * S - 1), None);
    let third = s.poll_snapshot(50 * S).unwrap();
    body(&mut s, &mut sink, 50 * S, third.symbol, 15);
    assert_eq!(s.stats(0).rate_limited + s.stats(1).rate_limited, 2);
    assert_eq!(s.state(third.symbol), StreamState::Synced);
}

#[test]
fn failures_and_timeouts_back_off() {
    let mut s = session(Market::Spot, &["aaa"], |spec| {
        spec.snapshot_timeout_ns = 5 * S
    });
    let mut sink = Sink::default();
    feed(&mut s, &mut sink, 0, &depth_frame("aaa", 10, 20, None));
    let answers: [&[u8]; 2] = [b"{\"code\":-1121,\"msg\":\"Invalid symbol.\"}", b"not json"];
    let mut t = 0;
    for (k, delay) in [1, 2, 4, 8].into_iter().enumerate() {
        assert!(s.poll_snapshot(t).is_some());
        let result = match k {
            0 => SnapshotResult::Failed,
            1 => SnapshotResult::Status {
                code: 503,
                retry_after_secs: None,
            },
            _ => SnapshotResult::Body(answers[k - 2]),
        };
        s.on_snapshot(t, 0, result, &mut sink);
        assert_eq!(s.poll_snapshot(t + delay * S - 1), None, "attempt {k}");
        t += delay * S;
    }
    // No answer at all: the request times out and backs off (16 s) too.
    assert!(s.poll_snapshot(t).is_some());
    assert_eq!(s.poll_timeout(), Some(t + 5 * S));
    s.handle_timeout(t + 5 * S, &mut sink);
    assert_eq!(s.stats(0).snapshots_failed, 5);
    assert_eq!(s.poll_snapshot(t + 21 * S - 1), None);
    assert!(s.poll_snapshot(t + 21 * S).is_some());
    body(&mut s, &mut sink, t + 21 * S, 0, 15);
    assert_eq!(s.state(0), StreamState::Synced);
    assert_eq!(s.stats(0).snapshot_requests, 6);
}

#[test]
fn a_request_heavier_than_the_budget_waits_for_a_clear_minute() {
    let mut s = session(Market::Spot, &["aaa", "bbb"], |spec| {
        spec.weight_budget_per_min = 10;
        spec.max_inflight = 2;
        spec.snapshot_timeout_ns = 120 * S;
    });
    let mut sink = Sink::default();
    feed(&mut s, &mut sink, 0, &depth_frame("aaa", 10, 20, None));
    feed(&mut s, &mut sink, 0, &depth_frame("bbb", 10, 20, None));
    let first = s.poll_snapshot(0).unwrap();
    assert_eq!((first.symbol, first.weight), (0, 50));
    assert_eq!(
        s.poll_snapshot(0),
        None,
        "a second slot is free, the budget is not"
    );
    assert_eq!(s.poll_timeout(), Some(60 * S));
    assert_eq!(s.poll_snapshot(60 * S).map(|r| r.symbol), Some(1));
    body(&mut s, &mut sink, 60 * S, 0, 15);
    body(&mut s, &mut sink, 60 * S, 1, 15);
    assert_eq!(
        (s.state(0), s.state(1)),
        (StreamState::Synced, StreamState::Synced)
    );
    assert_eq!(s.weight_used_last_minute(), 50);
}

#[test]
fn the_venues_own_weight_count_paces_requests_too() {
    // Another client of the IP spent 1,150 of 1,200: this venue's next request (50) fits
    // only once that count is a minute old, though its own ledger is empty.
    let names = ["aaa", "bbb"];
    let mut s = session(Market::Spot, &names, |spec| {
        spec.weight_budget_per_min = 1200;
        spec.max_inflight = 2;
    });
    let mut sink = Sink::default();
    for name in names {
        feed(&mut s, &mut sink, 0, &depth_frame(name, 10, 20, None));
    }
    let first = s.poll_snapshot(0).unwrap();
    // Its answer says the IP's minute holds 1,160 (this request's 50 among them).
    s.observe_used_weight(1160, S);
    body(&mut s, &mut sink, S, first.symbol, 15);
    assert_eq!(s.weight_used_last_minute(), 1160);
    assert_eq!(s.poll_snapshot(S), None, "1,160 + 50 would pass 1,200");
    assert_eq!(s.poll_timeout(), Some(61 * S));
    assert_eq!(s.poll_snapshot(61 * S - 1), None);
    let second = s.poll_snapshot(61 * S).unwrap();
    assert_ne!(second.symbol, first.symbol);
    // A later, smaller count (the venue's minute turned) replaces the earlier one.
    s.observe_used_weight(100, 62 * S);
    assert_eq!(s.weight_used_last_minute(), 100);
}

#[test]
fn a_firewall_403_pauses_the_venue_like_a_429() {
    let mut s = session(Market::Spot, &["aaa", "bbb"], |spec| spec.max_inflight = 2);
    let mut sink = Sink::default();
    feed(&mut s, &mut sink, 0, &depth_frame("aaa", 10, 20, None));
    let first = s.poll_snapshot(0).unwrap();
    let blocked = SnapshotResult::Status {
        code: 403,
        retry_after_secs: None,
    };
    s.on_snapshot(0, first.symbol, blocked, &mut sink);
    feed(&mut s, &mut sink, S, &depth_frame("bbb", 10, 20, None));
    // The configured rate-limit pause (10 s) holds every symbol.
    assert_eq!(s.poll_snapshot(10 * S - 1), None);
    assert!(s.poll_snapshot(10 * S).is_some());
    assert_eq!(s.stats(first.symbol).firewall_blocked, 1);
    assert_eq!(s.stats(first.symbol).snapshots_failed, 0);
}

#[test]
fn a_symbol_refused_for_good_is_given_up_and_the_others_go_on() {
    let mut s = session(Market::Spot, &["aaa", "bbb"], |spec| spec.max_inflight = 1);
    let mut sink = Sink::default();
    feed(&mut s, &mut sink, 0, &depth_frame("aaa", 10, 20, None));
    let invalid = SnapshotResult::Status {
        code: 400,
        retry_after_secs: None,
    };
    let mut t = 0;
    for attempt in 1..=crate::venue::binance::fetch::MAX_PERMANENT_ERRORS {
        let r = s
            .poll_snapshot(t)
            .unwrap_or_else(|| panic!("attempt {attempt}"));
        assert_eq!(r.symbol, 0);
        s.on_snapshot(t, 0, invalid, &mut sink);
        t = s.poll_timeout().unwrap_or(t).max(t);
    }
    assert!(s.stats(0).snapshot_given_up);
    assert_eq!(s.symbols_given_up(), 1);
    // Never asked again, even as new events arrive and time passes.
    feed(&mut s, &mut sink, t, &depth_frame("aaa", 21, 30, None));
    assert_eq!(s.poll_snapshot(t + 3600 * S), None);
    assert_eq!(s.state(0), StreamState::ResetRequired);
    // Another symbol is not held back.
    feed(&mut s, &mut sink, t, &depth_frame("bbb", 10, 20, None));
    let other = s.poll_snapshot(t + 3600 * S).unwrap();
    assert_eq!(other.symbol, 1);
    body(&mut s, &mut sink, t + 3600 * S, 1, 15);
    assert_eq!(s.state(1), StreamState::Synced);
}
