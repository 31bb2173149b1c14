//! Continuity across connections: symbols carried over a lost connection when the next
//! one's events link to what was delivered, make-before-break rotation, and permanent
//! redundant connections, on a virtual clock.

use crate::publish::StreamState as Published;
use crate::time::{Mono, Wall};
use crate::venue::{ConnEvent, ConnId, IoRequest, Venue};

use super::super::{BinanceSpec, BinanceVenue, Market};
use super::{Got, S, Sink, body, check_consumer, depth_frame, feed, session};

/// Spot `btcusdt` and `ethusdt`, both live from a snapshot of 100 and one event each.
fn live_spot(tweak: impl FnOnce(&mut BinanceSpec)) -> (super::BinanceSession, Sink) {
    let mut s = session(Market::Spot, &["btcusdt", "ethusdt"], tweak);
    let mut sink = Sink::default();
    s.on_connected(0);
    for sym in ["btcusdt", "ethusdt"] {
        feed(&mut s, &mut sink, 1, &depth_frame(sym, 95, 101, None));
    }
    for k in 0..2 {
        assert_eq!(s.poll_snapshot(2).map(|r| r.symbol), Some(k));
        body(&mut s, &mut sink, 3, k, 100);
    }
    for sym in ["btcusdt", "ethusdt"] {
        feed(&mut s, &mut sink, 4, &depth_frame(sym, 102, 105, None));
    }
    assert_eq!(s.stats(0).applied, 2);
    assert_eq!(s.published_state(1), Published::Synced);
    (s, sink)
}

#[test]
fn a_lost_connection_costs_nothing_where_the_next_one_links() {
    let (mut s, mut sink) = live_spot(|_| {});
    let before = sink.got.len();
    s.on_disconnected(5 * S, &mut sink);
    assert_eq!(
        sink.got.len(),
        before,
        "no reset while the symbols may link"
    );
    assert_eq!(s.relinking_symbols(), 2);
    s.on_connected(6 * S);
    // btcusdt's next event links (U == previous u + 1); ethusdt's overlaps what was
    // delivered and reaches past it (U <= previous u + 1 <= u), as the venue allows.
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("btcusdt", 106, 108, None),
    );
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("ethusdt", 104, 109, None),
    );
    for k in 0..2u16 {
        assert_eq!(
            sink.states(k, Published::ResetRequired),
            0,
            "{:?}",
            sink.got
        );
        let st = s.stats(usize::from(k));
        assert_eq!((st.relinked, st.resyncs, st.snapshot_requests), (1, 0, 1));
    }
    assert_eq!(s.relinking_symbols(), 0);
    assert_eq!(
        s.poll_snapshot(7 * S),
        None,
        "no snapshot after a linked reconnect"
    );
    check_consumer(&sink.got, false).unwrap();
}

#[test]
fn only_the_symbol_that_missed_events_resyncs() {
    let (mut s, mut sink) = live_spot(|_| {});
    s.on_disconnected(5 * S, &mut sink);
    s.on_connected(6 * S);
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("btcusdt", 106, 108, None),
    );
    // ethusdt missed 106..=110 while no connection carried it.
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("ethusdt", 111, 112, None),
    );
    assert_eq!(sink.states(0, Published::ResetRequired), 0);
    assert_eq!(sink.states(1, Published::ResetRequired), 1);
    let (btc, eth) = (s.stats(0), s.stats(1));
    assert_eq!((btc.relinked, btc.resyncs), (1, 0));
    assert_eq!((eth.relinked, eth.relinks_failed, eth.resyncs), (0, 1, 1));
    assert_eq!(s.poll_snapshot(7 * S).map(|r| r.symbol), Some(1));
    assert_eq!(s.poll_snapshot(7 * S), None);
    check_consumer(&sink.got, false).unwrap();
}

#[test]
fn a_repeat_of_what_was_delivered_proves_the_link_and_is_not_delivered_again() {
    let (mut s, mut sink) = live_spot(|_| {});
    s.on_disconnected(5 * S, &mut sink);
    s.on_connected(6 * S);
    let ranges = sink.ranges(0).len();
    // The new connection starts with the event last delivered.
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("btcusdt", 102, 105, None),
    );
    assert_eq!(sink.ranges(0).len(), ranges, "no id is delivered twice");
    assert_eq!(s.stats(0).relinked, 1);
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("btcusdt", 106, 106, None),
    );
    assert_eq!(sink.ranges(0).len(), ranges + 1);
    assert_eq!(sink.states(0, Published::ResetRequired), 0);
}

#[test]
fn a_symbol_that_cannot_link_in_time_is_told_so() {
    let (mut s, mut sink) = live_spot(|spec| spec.relink_timeout_ns = 2 * S);
    s.on_disconnected(5 * S, &mut sink);
    assert_eq!(s.poll_timeout(), Some(7 * S));
    s.on_connected(6 * S);
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("btcusdt", 106, 108, None),
    );
    s.handle_timeout(7 * S, &mut sink);
    assert_eq!(sink.states(0, Published::ResetRequired), 0);
    assert_eq!(sink.states(1, Published::ResetRequired), 1, "quiet ethusdt");
    assert_eq!(s.stats(1).relinks_expired, 1);
    assert_eq!(s.published_state(1), Published::ResetRequired);
}

#[test]
fn without_a_relink_wait_every_symbol_resyncs_at_once() {
    let (mut s, mut sink) = live_spot(|spec| spec.relink_timeout_ns = 0);
    s.on_disconnected(5 * S, &mut sink);
    assert_eq!(sink.states(0, Published::ResetRequired), 1);
    assert_eq!(sink.states(1, Published::ResetRequired), 1);
    assert_eq!(s.relinking_symbols(), 0);
}

#[test]
fn futures_link_by_pu() {
    let mut s = session(Market::Usdm, &["btcusdt", "ethusdt"], |_| {});
    let mut sink = Sink::default();
    s.on_connected(0);
    for sym in ["btcusdt", "ethusdt"] {
        feed(&mut s, &mut sink, 1, &depth_frame(sym, 95, 101, Some(90)));
    }
    for k in 0..2 {
        assert!(s.poll_snapshot(2).is_some());
        body(&mut s, &mut sink, 3, k, 100);
    }
    s.on_disconnected(5 * S, &mut sink);
    s.on_connected(6 * S);
    // Futures ids are not contiguous: `pu` names the previous event's `u`.
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("btcusdt", 110, 120, Some(101)),
    );
    feed(
        &mut s,
        &mut sink,
        6 * S,
        &depth_frame("ethusdt", 110, 120, Some(105)),
    );
    assert_eq!(sink.states(0, Published::ResetRequired), 0);
    assert_eq!(sink.states(1, Published::ResetRequired), 1);
    assert_eq!((s.stats(0).relinked, s.stats(1).relinks_failed), (1, 1));
    check_consumer(&sink.got, true).unwrap();
}

fn venue(tweak: impl FnOnce(&mut BinanceSpec)) -> BinanceVenue {
    let mut spec = BinanceSpec::new(Market::Spot, vec!["btcusdt".into(), "ethusdt".into()]);
    tweak(&mut spec);
    BinanceVenue::new(
        "v",
        spec,
        "ws://127.0.0.1:1",
        "http://127.0.0.1:1",
        Some(100),
    )
    .unwrap()
}

/// What the venue asked the driver for.
#[derive(Debug, Default)]
struct Asked {
    opens: Vec<ConnId>,
    closes: Vec<ConnId>,
    fetches: Vec<(u64, usize)>,
}

fn drain(v: &mut BinanceVenue, asked: &mut Asked) {
    while let Some(io) = v.poll_io() {
        match io {
            IoRequest::Open { conn, .. } => asked.opens.push(conn),
            IoRequest::Close { conn } => asked.closes.push(conn),
            IoRequest::Fetch { id, stream, .. } => asked.fetches.push((id.0, stream)),
        }
    }
}

fn tick(v: &mut BinanceVenue, t: u64, sink: &mut Sink, asked: &mut Asked) {
    v.handle_timeout(Mono::from_nanos(t), sink);
    drain(v, asked);
}

fn frame(v: &mut BinanceVenue, t: u64, conn: ConnId, bytes: &[u8], sink: &mut Sink) {
    v.handle_frame(Mono::from_nanos(t), conn, bytes, Wall::from_nanos(t), sink);
}

/// Answers snapshot fetch `id` of `v` with a snapshot at update id 100.
fn answer_snapshot(v: &mut BinanceVenue, id: crate::venue::FetchId, sink: &mut Sink) {
    let body = super::snapshot_body(100);
    let reply = crate::venue::FetchReply::Http {
        status: 200,
        retry_after_secs: None,
        used_weight: None,
        body: &body,
    };
    v.handle_fetch(Mono::from_nanos(S), id, reply, sink);
}

/// Syncs both symbols of `v` on `conn`: one event each, then their snapshots.
fn sync(v: &mut BinanceVenue, conn: ConnId, sink: &mut Sink, asked: &mut Asked) {
    for sym in ["btcusdt", "ethusdt"] {
        frame(v, S, conn, &depth_frame(sym, 95, 101, None), sink);
    }
    for _ in 0..2 {
        tick(v, S, sink, asked);
        let Some((id, _)) = asked.fetches.pop() else {
            panic!("a snapshot fetch: {asked:?}");
        };
        answer_snapshot(v, crate::venue::FetchId(id), sink);
    }
    assert_eq!(v.session().published_state(0), Published::Synced);
    assert_eq!(v.session().published_state(1), Published::Synced);
}

#[test]
fn rotation_for_age_overlaps_and_costs_no_snapshot() {
    let mut v = venue(|spec| {
        spec.ws_max_age_ns = 10 * S;
        spec.silence_timeout_ns = 100 * S;
    });
    let (mut sink, mut asked) = (Sink::default(), Asked::default());
    tick(&mut v, 0, &mut sink, &mut asked);
    let old = asked.opens[0];
    v.handle_connection(Mono::ZERO, old, ConnEvent::Opened, &mut sink);
    sync(&mut v, old, &mut sink, &mut asked);
    // Age reached: the successor is asked for, the old connection stays.
    tick(&mut v, 10 * S, &mut sink, &mut asked);
    assert_eq!(asked.opens.len(), 2, "{asked:?}");
    assert!(asked.closes.is_empty());
    let new = asked.opens[1];
    let t = 10 * S + 1;
    v.handle_connection(Mono::from_nanos(t), new, ConnEvent::Opened, &mut sink);
    // Both carry the same events; the old one is ahead.
    frame(
        &mut v,
        t,
        old,
        &depth_frame("btcusdt", 102, 103, None),
        &mut sink,
    );
    frame(
        &mut v,
        t,
        new,
        &depth_frame("btcusdt", 102, 103, None),
        &mut sink,
    );
    tick(&mut v, t, &mut sink, &mut asked);
    assert!(
        asked.closes.is_empty(),
        "ethusdt has not linked on the new one"
    );
    frame(
        &mut v,
        t,
        new,
        &depth_frame("ethusdt", 102, 104, None),
        &mut sink,
    );
    frame(
        &mut v,
        t,
        old,
        &depth_frame("ethusdt", 102, 104, None),
        &mut sink,
    );
    tick(&mut v, t, &mut sink, &mut asked);
    assert_eq!(asked.closes, [old]);
    // The driver confirms the close; nothing changes for consumers.
    v.handle_connection(
        Mono::from_nanos(t),
        old,
        ConnEvent::Closed("closed"),
        &mut sink,
    );
    frame(
        &mut v,
        t,
        new,
        &depth_frame("btcusdt", 104, 104, None),
        &mut sink,
    );
    for k in 0..2 {
        assert_eq!(
            sink.states(k, Published::ResetRequired),
            0,
            "{:?}",
            sink.got
        );
        assert_eq!(v.session().stats(usize::from(k)).snapshot_requests, 1);
    }
    let ranges = |k| sink.ranges(k).len();
    assert_eq!((ranges(0), ranges(1)), (3, 2), "each id once");
    let t = v.transport_stats();
    assert_eq!(
        (t.rotations, t.overlapped_rotations, t.rotations_linked),
        (1, 1, 1)
    );
    assert_eq!(
        t.stale_conn_events, 1,
        "the confirmed close of a connection let go"
    );
    assert_eq!(v.open_connections(), 1);
    check_consumer(&sink.got, false).unwrap();
}

#[test]
fn a_rotation_that_cannot_link_closes_at_its_deadline() {
    let mut v = venue(|spec| {
        spec.ws_max_age_ns = 10 * S;
        spec.silence_timeout_ns = 100 * S;
        spec.rotate_timeout_ns = 3 * S;
    });
    let (mut sink, mut asked) = (Sink::default(), Asked::default());
    tick(&mut v, 0, &mut sink, &mut asked);
    let old = asked.opens[0];
    v.handle_connection(Mono::ZERO, old, ConnEvent::Opened, &mut sink);
    sync(&mut v, old, &mut sink, &mut asked);
    tick(&mut v, 10 * S, &mut sink, &mut asked);
    let new = asked.opens[1];
    v.handle_connection(Mono::from_nanos(10 * S), new, ConnEvent::Opened, &mut sink);
    assert_eq!(v.poll_timeout(), Some(Mono::from_nanos(13 * S)));
    tick(&mut v, 13 * S, &mut sink, &mut asked);
    assert_eq!(asked.closes, [old]);
    assert_eq!(v.transport_stats().rotations_timed_out, 1);
    // The new connection is open: the quiet symbols go on, checked by their next event.
    assert_eq!(v.session().relinking_symbols(), 0);
    assert_eq!(sink.states(0, Published::ResetRequired), 0);
}

#[test]
fn two_permanent_connections_ride_out_a_drop_on_either() {
    let mut v = venue(|spec| spec.connections = 2);
    let (mut sink, mut asked) = (Sink::default(), Asked::default());
    tick(&mut v, 0, &mut sink, &mut asked);
    assert_eq!(asked.opens.len(), 2, "{asked:?}");
    let (a, b) = (asked.opens[0], asked.opens[1]);
    for c in [a, b] {
        v.handle_connection(Mono::ZERO, c, ConnEvent::Opened, &mut sink);
    }
    sync(&mut v, a, &mut sink, &mut asked);
    let mut next = 102;
    let mut send = |v: &mut BinanceVenue, t: u64, conns: &[ConnId], sink: &mut Sink| {
        for sym in ["btcusdt", "ethusdt"] {
            let f = depth_frame(sym, next, next + 1, None);
            for c in conns {
                frame(v, t, *c, &f, sink);
            }
        }
        next += 2;
    };
    send(&mut v, 2 * S, &[a, b], &mut sink);
    v.handle_connection(
        Mono::from_nanos(3 * S),
        a,
        ConnEvent::Closed("reset"),
        &mut sink,
    );
    send(&mut v, 3 * S, &[b], &mut sink);
    tick(&mut v, 4 * S, &mut sink, &mut asked);
    let a2 = *asked.opens.last().unwrap();
    assert_ne!(a2, a, "the lost one is replaced");
    v.handle_connection(Mono::from_nanos(4 * S), a2, ConnEvent::Opened, &mut sink);
    send(&mut v, 5 * S, &[a2, b], &mut sink);
    v.handle_connection(
        Mono::from_nanos(6 * S),
        b,
        ConnEvent::Closed("reset"),
        &mut sink,
    );
    send(&mut v, 6 * S, &[a2], &mut sink);
    for k in 0..2 {
        assert_eq!(sink.states(k, Published::ResetRequired), 0);
        let st = v.session().stats(usize::from(k));
        assert_eq!((st.snapshot_requests, st.applied), (1, 5), "{st:?}");
    }
    assert!(asked.fetches.is_empty());
    check_consumer(&sink.got, false).unwrap();
    assert!(matches!(sink.got.last(), Some(Got::Range { .. })));
}

#[test]
fn a_connection_running_ahead_waits_for_the_other_to_deliver_what_lies_between() {
    let (mut s, mut sink) = live_spot(|_| {});
    s.on_link_up(1, 5 * S);
    let f = |first, last| depth_frame("btcusdt", first, last, None);
    // Slot 1 links with a copy of the latest delivery.
    s.on_link_text(1, 5 * S, 5 * S, &f(102, 105), &mut sink);
    assert_eq!(s.unlinked_symbols(1), 1, "btcusdt linked; ethusdt not yet");
    // Slot 1 is ahead: 106..=107 has reached slot 0 only later.
    s.on_link_text(1, 6 * S, 6 * S, &f(108, 109), &mut sink);
    assert_eq!(s.stats(0).ahead, 1);
    assert_eq!(
        s.unlinked_symbols(1),
        2,
        "ethusdt never showed on it; btcusdt is ahead"
    );
    s.on_link_text(0, 6 * S, 6 * S, &f(106, 107), &mut sink);
    s.on_link_text(0, 6 * S, 6 * S, &f(108, 109), &mut sink);
    assert_eq!(
        s.unlinked_symbols(1),
        1,
        "btcusdt linked once 108..=109 was delivered"
    );
    s.on_link_text(1, 7 * S, 7 * S, &f(110, 110), &mut sink);
    assert_eq!(sink.states(0, Published::ResetRequired), 0);
    assert_eq!(s.stats(0).applied, 5);
    check_consumer(&sink.got, false).unwrap();
}

/// Symbols beyond what one connection carries are split across connections, each with
/// its own URL; a connection lost touches only its own symbols, and a rotation's
/// successor carries the same symbols as the connection it replaces.
#[test]
fn symbols_beyond_one_connection_are_split_and_each_connection_is_its_own() {
    let symbols = ["aaausdt", "bbbusdt", "cccusdt", "dddusdt", "eeeusdt"];
    let mut spec = BinanceSpec::new(
        Market::Spot,
        symbols.iter().map(|s| s.to_string()).collect(),
    );
    spec.max_streams_per_connection = 2;
    spec.relink_timeout_ns = 0;
    spec.ws_max_age_ns = 20 * S;
    spec.silence_timeout_ns = 100 * S;
    let mut v = BinanceVenue::new(
        "v",
        spec,
        "ws://127.0.0.1:1",
        "http://127.0.0.1:1",
        Some(100),
    )
    .unwrap();
    assert_eq!(v.session().shards(), [0..2, 2..4, 4..5]);
    assert_eq!(
        v.urls(),
        [
            "ws://127.0.0.1:1/stream?streams=aaausdt@depth@100ms/bbbusdt@depth@100ms",
            "ws://127.0.0.1:1/stream?streams=cccusdt@depth@100ms/dddusdt@depth@100ms",
            "ws://127.0.0.1:1/stream?streams=eeeusdt@depth@100ms",
        ]
    );
    let mut sink = Sink::default();
    let mut opens = Vec::new();
    v.handle_timeout(Mono::ZERO, &mut sink);
    while let Some(io) = v.poll_io() {
        if let IoRequest::Open { conn, url, .. } = io {
            opens.push((conn, url));
        }
    }
    assert_eq!(opens.len(), 3, "one connection per shard: {opens:?}");
    let conn_of = |shard: usize| opens[shard].0;
    for (i, (conn, url)) in opens.iter().enumerate() {
        assert_eq!(url, &v.urls()[i]);
        v.handle_connection(Mono::ZERO, *conn, ConnEvent::Opened, &mut sink);
    }
    // Each symbol's events on its own shard's connection; the snapshots answered.
    let shard_of = |k: usize| k / 2;
    for (k, sym) in symbols.iter().enumerate() {
        frame(
            &mut v,
            S,
            conn_of(shard_of(k)),
            &depth_frame(sym, 95, 101, None),
            &mut sink,
        );
    }
    // An event on a connection that was not asked for the symbol is not taken.
    frame(
        &mut v,
        S,
        conn_of(0),
        &depth_frame("eeeusdt", 95, 101, None),
        &mut sink,
    );
    assert_eq!(v.session().stats(4).events, 1);
    for _ in 0..symbols.len() {
        v.handle_timeout(Mono::from_nanos(S), &mut sink);
        while let Some(io) = v.poll_io() {
            if let IoRequest::Fetch { id, .. } = io {
                answer_snapshot(&mut v, id, &mut sink);
            }
        }
    }
    for k in 0..symbols.len() {
        assert_eq!(v.session().published_state(k), Published::Synced, "{k}");
    }
    // The second shard's connection drops: its two symbols lose sync, the others do not.
    v.handle_connection(
        Mono::from_nanos(2 * S),
        conn_of(1),
        ConnEvent::Closed("reset"),
        &mut sink,
    );
    let lost: Vec<bool> = (0..symbols.len())
        .map(|k| v.session().published_state(k) != Published::Synced)
        .collect();
    assert_eq!(lost, [false, false, true, true, false]);
    // Its replacement opens with the same symbols.
    v.handle_timeout(Mono::from_nanos(3 * S), &mut sink);
    let mut reopened = Vec::new();
    while let Some(io) = v.poll_io() {
        if let IoRequest::Open { url, .. } = io {
            reopened.push(url);
        }
    }
    assert_eq!(reopened, [v.urls()[1].clone()]);
    // At its age, the first shard's connection is replaced by one for the same symbols.
    v.handle_timeout(Mono::from_nanos(20 * S), &mut sink);
    let mut rotated = Vec::new();
    while let Some(io) = v.poll_io() {
        if let IoRequest::Open { url, .. } = io {
            rotated.push(url);
        }
    }
    assert!(rotated.contains(&v.urls()[0]), "{rotated:?}");
    assert!(rotated.iter().all(|u| v.urls().contains(u)));
}

/// A loaded loop can take a frame that arrives after a connection's age ran out before it
/// runs the timer: the rotation is still due, and the venue still asks for a timeout.
#[test]
fn an_age_passed_while_frames_kept_coming_still_rotates() {
    let mut v = venue(|spec| {
        spec.ws_max_age_ns = 10 * S;
        spec.silence_timeout_ns = 100 * S;
    });
    let (mut sink, mut asked) = (Sink::default(), Asked::default());
    tick(&mut v, 0, &mut sink, &mut asked);
    let old = asked.opens[0];
    v.handle_connection(Mono::ZERO, old, ConnEvent::Opened, &mut sink);
    sync(&mut v, old, &mut sink, &mut asked);
    // The frame comes in 1 ms past the age, before any timer ran.
    let late = 10 * S + 1_000_000;
    frame(
        &mut v,
        late,
        old,
        &depth_frame("btcusdt", 102, 103, None),
        &mut sink,
    );
    let due = v.poll_timeout().expect("a timeout is asked for");
    assert!(
        due.as_nanos() <= late + 2_000_000,
        "the due rotation is not put off to the silence timeout: {due:?}"
    );
    tick(&mut v, due.as_nanos().max(late), &mut sink, &mut asked);
    assert_eq!(
        asked.opens.len(),
        2,
        "the successor is asked for: {asked:?}"
    );
    assert_eq!(v.transport_stats().overlapped_rotations, 1);
}
