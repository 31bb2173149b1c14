//! Hand-written sessions: the rules of each market, what consumers receive, buffering limits,
//! routing and the connection's health.

use crate::publish::{Event, StreamState as Published};
use crate::sequencer::StreamState;

use super::super::{
    BinanceSession, BinanceSpec, Market, ReconnectReason, SnapshotResult, SpecError,
};
use super::{Got, S, Sink, body, check_consumer, depth_frame, feed, session, snapshot_body};

#[test]
fn specs_are_checked() {
    let make = |f: fn(&mut BinanceSpec)| {
        let mut spec = BinanceSpec::new(Market::Usdm, vec!["btcusdt".into(), "ethusdt".into()]);
        f(&mut spec);
        BinanceSession::new(spec).err()
    };
    assert_eq!(make(|_| {}), None);
    assert_eq!(make(|s| s.symbols.clear()), Some(SpecError::NoSymbols));
    let upper = Some(SpecError::InvalidSymbol("BTCUSDT".into()));
    assert_eq!(make(|s| s.symbols[0] = "BTCUSDT".into()), upper);
    let twice = Some(SpecError::DuplicateSymbol("btcusdt".into()));
    assert_eq!(make(|s| s.symbols[1] = "btcusdt".into()), twice);
    let full = make(|s| s.stream_base = u16::MAX);
    assert!(matches!(
        full,
        Some(SpecError::TooManySymbols { symbols: 2, .. })
    ));
    let deep = make(|s| s.depth_limit = 5000);
    assert!(matches!(
        deep,
        Some(SpecError::DepthLimit { limit: 5000, .. })
    ));
    assert_eq!(
        make(|s| s.max_pending = 0),
        Some(SpecError::Zero("max_pending"))
    );
    assert!(!SpecError::NoSymbols.to_string().is_empty());
}

#[test]
fn futures_follow_pu_and_never_the_spot_test() {
    let mut s = session(Market::Coinm, &["btcusd_perp"], |_| {});
    let mut sink = Sink::default();
    feed(
        &mut s,
        &mut sink,
        0,
        &depth_frame("btcusd_perp", 100, 110, Some(90)),
    );
    let _ = s.poll_snapshot(0);
    body(&mut s, &mut sink, 1, 0, 105);
    // Not contiguous (U != 111) but linked: applied.
    feed(
        &mut s,
        &mut sink,
        2,
        &depth_frame("btcusd_perp", 115, 120, Some(110)),
    );
    // Stale after the snapshot: dropped, not a break.
    feed(
        &mut s,
        &mut sink,
        3,
        &depth_frame("btcusd_perp", 95, 104, Some(80)),
    );
    assert_eq!(
        (s.stats(0).applied, s.stats(0).stale_after_snapshot),
        (2, 1)
    );
    // Contiguous (U == 121) but not linked: a break.
    feed(
        &mut s,
        &mut sink,
        4,
        &depth_frame("btcusd_perp", 121, 130, Some(119)),
    );
    assert_eq!((s.stats(0).breaks, s.stats(0).resyncs), (1, 1));
    assert_eq!(s.state(0), StreamState::ResetRequired);
    assert_eq!(s.published_state(0), Published::ResetRequired);
    // A futures event without pu is refused.
    feed(
        &mut s,
        &mut sink,
        5,
        &depth_frame("btcusd_perp", 131, 140, None),
    );
    assert_eq!(s.stats(0).malformed, 1);
    check_consumer(&sink.got, true).unwrap();
}

#[test]
fn spot_follows_contiguous_ids() {
    let mut s = session(Market::Spot, &["aaa"], |_| {});
    let mut sink = Sink::default();
    for (first, last) in [(90, 95), (96, 100), (101, 110)] {
        feed(&mut s, &mut sink, 0, &depth_frame("aaa", first, last, None));
    }
    let _ = s.poll_snapshot(0);
    // The snapshot arrives after the event that straddles it.
    body(&mut s, &mut sink, 1, 0, 103);
    let stats = s.stats(0);
    assert_eq!(
        (
            stats.applied,
            stats.dropped_stale,
            stats.stale_after_snapshot
        ),
        (1, 2, 0)
    );
    feed(&mut s, &mut sink, 2, &depth_frame("aaa", 96, 100, None));
    feed(&mut s, &mut sink, 2, &depth_frame("aaa", 105, 110, None));
    feed(&mut s, &mut sink, 2, &depth_frame("aaa", 111, 115, None));
    let stats = s.stats(0);
    assert_eq!(
        (stats.applied, stats.stale_after_snapshot, stats.duplicates),
        (2, 1, 1)
    );
    feed(&mut s, &mut sink, 3, &depth_frame("aaa", 117, 120, None));
    assert_eq!(
        (s.stats(0).breaks, s.state(0)),
        (1, StreamState::ResetRequired)
    );
    let stream = s.stream_id(0);
    let expected = [
        Got::Begin(stream),
        Got::Snapshot {
            stream,
            seq: 103,
            payload: snapshot_body(103),
        },
        Got::End { stream, next: 104 },
    ];
    assert_eq!(sink.got[..3], expected);
    assert!(matches!(
        sink.got[3],
        Got::Range {
            first: 101,
            last: 110,
            ..
        }
    ));
    assert_eq!(
        sink.got[4],
        Got::State {
            stream,
            state: Published::Synced
        }
    );
    assert!(matches!(
        sink.got[5],
        Got::Range {
            first: 111,
            last: 115,
            ..
        }
    ));
    assert_eq!(
        sink.got[6],
        Got::State {
            stream,
            state: Published::ResetRequired
        }
    );
    check_consumer(&sink.got, false).unwrap();
}

#[test]
fn live_deltas_borrow_the_frame() {
    let mut s = session(Market::Spot, &["aaa"], |_| {});
    let mut sink = Sink::default();
    feed(&mut s, &mut sink, 0, &depth_frame("aaa", 10, 20, None));
    let _ = s.poll_snapshot(0);
    body(&mut s, &mut sink, 0, 0, 20);
    let frame = depth_frame("aaa", 21, 25, None);
    let span = frame.as_ptr_range();
    let mut borrowed = 0;
    let mut check = |e: &Event<'_>| {
        if let Event::Range { payload, .. } = e {
            assert!(span.contains(&payload.as_ptr()));
            borrowed += 1;
        }
    };
    s.on_text(1, 1, &frame, &mut check);
    assert_eq!(borrowed, 1);
}

#[test]
fn buffering_is_bounded_and_drops_the_oldest() {
    let mut s = session(Market::Spot, &["aaa"], |spec| spec.max_pending = 4);
    let mut sink = Sink::default();
    for k in 0..10 {
        feed(
            &mut s,
            &mut sink,
            0,
            &depth_frame("aaa", 10 * k + 1, 10 * k + 10, None),
        );
    }
    assert_eq!((s.stats(0).buffered, s.stats(0).overflowed), (4, 6));
    let _ = s.poll_snapshot(0);
    // Older than the oldest event kept: fetched again at once.
    body(&mut s, &mut sink, 1, 0, 30);
    assert_eq!(s.stats(0).snapshots_stale, 1);
    assert!(s.poll_snapshot(1).is_some());
    body(&mut s, &mut sink, 2, 0, 75);
    assert_eq!(
        (s.state(0), s.stats(0).applied, s.stats(0).buffered),
        (StreamState::Synced, 3, 0)
    );
    // A break while buffering restarts the chain from the new event.
    let mut s = session(Market::Spot, &["aaa"], |_| {});
    for (first, last) in [(1, 5), (6, 9), (20, 25), (18, 22)] {
        feed(&mut s, &mut sink, 0, &depth_frame("aaa", first, last, None));
    }
    let stats = s.stats(0);
    assert_eq!((stats.breaks, stats.buffered, stats.duplicates), (1, 1, 1));
}

#[test]
fn a_snapshot_far_ahead_is_given_up() {
    let mut s = session(Market::Spot, &["aaa"], |spec| spec.max_pending = 8);
    let mut sink = Sink::default();
    feed(&mut s, &mut sink, 0, &depth_frame("aaa", 1, 5, None));
    let _ = s.poll_snapshot(0);
    body(&mut s, &mut sink, 0, 0, 1 << 60);
    assert_eq!(s.state(0), StreamState::Synced);
    for k in 0..9 {
        feed(
            &mut s,
            &mut sink,
            1,
            &depth_frame("aaa", 6 + k, 6 + k, None),
        );
    }
    assert_eq!(
        (s.state(0), s.stats(0).resyncs),
        (StreamState::ResetRequired, 1)
    );
}

#[test]
fn routing_and_unsolicited_answers() {
    let mut s = session(Market::Spot, &["aaa", "bbb"], |spec| spec.stream_base = 7);
    let mut sink = Sink::default();
    assert_eq!(
        (s.symbol_index("BBB"), s.symbol_index("ccc")),
        (Some(1), None)
    );
    assert_eq!((s.stream_id(1), s.symbol_name(1)), (8, Some("bbb")));
    let renamed = String::from_utf8(depth_frame("bbb", 1, 2, None)).unwrap();
    feed(
        &mut s,
        &mut sink,
        0,
        renamed.replace("\"BBB\"", "\"ZZZ\"").as_bytes(),
    );
    feed(&mut s, &mut sink, 0, &depth_frame("ccc", 1, 2, None));
    assert_eq!((s.stats(1).events, s.venue_stats().unknown_symbol), (1, 1));
    s.on_snapshot(0, 9, SnapshotResult::Failed, &mut sink);
    body(&mut s, &mut sink, 0, 0, 5);
    assert_eq!(s.venue_stats().unsolicited_snapshots, 1);
    assert_eq!(s.stats(0).snapshots_discarded, 1);
    assert!(sink.got.is_empty());
}

#[test]
fn connection_age_and_silence() {
    let mut s = session(Market::Usdm, &["aaa"], |spec| {
        spec.ws_max_age_ns = 100 * S;
        spec.silence_timeout_ns = 30 * S;
    });
    let mut sink = Sink::default();
    assert_eq!((s.poll_reconnect(0), s.poll_timeout()), (None, None));
    s.on_connected(10 * S);
    assert_eq!(s.poll_timeout(), Some(40 * S));
    for k in 1..=8 {
        feed(
            &mut s,
            &mut sink,
            10 * S + k * 10 * S,
            br#"{"stream":"aaa@trade","data":{}}"#,
        );
    }
    assert_eq!(s.poll_reconnect(109 * S), None);
    assert_eq!(s.poll_timeout(), Some(110 * S));
    assert_eq!(s.poll_reconnect(110 * S), Some(ReconnectReason::MaxAge));
    s.on_disconnected(110 * S, &mut sink);
    assert_eq!((s.poll_reconnect(500 * S), s.poll_timeout()), (None, None));
    assert_eq!(s.venue_stats().ignored, 8);
}
