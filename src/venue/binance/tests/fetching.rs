//! Snapshot scheduling: request paths and weights, staggering within the weight budget,
//! 429 and 418 pauses, failures, timeouts and their backoff.

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
