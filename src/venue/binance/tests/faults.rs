//! Faults injected into recorded sessions: a missed event, a duplicate, a stale snapshot, rate
//! limits, a lost connection, a server shutdown and silence.

use crate::publish::StreamState as Published;
use crate::sequencer::StreamState;

use super::super::{BinanceSpec, ReconnectReason};
use super::capture::{Answer, Capture, Driver, Input, captures_dir, depth_ids, load_cryptofeed};
use super::{Got, check_consumer, snapshot_body};

/// The USD-M and spot cryptofeed recordings (four symbols each).
fn recordings() -> Vec<Capture> {
    let Some(dir) = captures_dir() else {
        return Vec::new();
    };
    let dir = dir.join("cryptofeed");
    vec![
        load_cryptofeed(&dir, "BINANCE_FUTURES"),
        load_cryptofeed(&dir, "BINANCE_US"),
    ]
}

/// Positions in `inputs` of the depth frames of `symbol`.
fn frames_of(c: &Capture, symbol: &str) -> Vec<usize> {
    let frames = c.inputs.iter().enumerate().filter_map(|(k, i)| match i {
        Input::Frame { bytes, .. } => depth_ids(bytes).map(|(s, _)| (k, s)),
        _ => None,
    });
    frames
        .filter(|(_, s)| s == symbol)
        .map(|(k, _)| k)
        .collect()
}

/// Position in `inputs` of the recorded snapshot of `symbol`.
fn snapshot_of(c: &Capture, symbol: &str) -> usize {
    let found = c
        .inputs
        .iter()
        .position(|i| matches!(i, Input::Snapshot { symbol: s, .. } if s == symbol));
    found.unwrap()
}

/// The symbol with the most depth events, and its index.
fn busiest(c: &Capture) -> (usize, String) {
    let counts = c.symbols.iter().map(|s| frames_of(c, s).len());
    let (i, _) = counts.enumerate().max_by_key(|&(_, n)| n).unwrap();
    (i, c.symbols[i].clone())
}

/// Replays `inputs` of `c` (connecting first) with synthetic answers to later requests.
fn replay(c: &Capture, inputs: &[Input], setup: impl FnOnce(&mut Driver)) -> Driver {
    replay_with(c, Driver::spec_for(c), inputs, setup)
}

/// [`replay`] with a spec of the caller's.
fn replay_with(
    c: &Capture,
    spec: BinanceSpec,
    inputs: &[Input],
    setup: impl FnOnce(&mut Driver),
) -> Driver {
    let mut d = Driver::new(spec);
    d.synthetic = true;
    setup(&mut d);
    d.step(&Input::Connect {
        t: inputs[0].time(),
    });
    d.run(inputs);
    check_consumer(&d.sink.got, c.market.is_linked()).unwrap();
    d
}

/// The `n`-th depth frame of `symbol` after its recorded snapshot.
fn after_snapshot(c: &Capture, symbol: &str, n: usize) -> usize {
    let snap = snapshot_of(c, symbol);
    frames_of(c, symbol)
        .into_iter()
        .filter(|&k| k > snap)
        .nth(n)
        .unwrap()
}

#[test]
fn a_missed_event_resyncs_that_symbol_only() {
    for c in recordings() {
        let (a, name) = busiest(&c);
        let mut inputs = c.inputs.clone();
        inputs.remove(after_snapshot(&c, &name, 10));
        let d = replay(&c, &inputs, |_| {});
        for s in 0..c.symbols.len() {
            let (stats, stream) = (d.session.stats(s), d.session.stream_id(s));
            assert_eq!(d.session.state(s), StreamState::Synced, "{} {s}", c.name);
            let resets = d.sink.states(stream, Published::ResetRequired);
            let begins = d
                .sink
                .of(stream)
                .iter()
                .filter(|g| matches!(g, Got::Begin(_)))
                .count();
            if s == a {
                assert_eq!(
                    (stats.breaks, stats.resyncs, resets),
                    (1, 1, 1),
                    "{}",
                    c.name
                );
                assert_eq!(
                    (stats.snapshot_requests, stats.snapshots_applied, begins),
                    (2, 2, 2)
                );
            } else {
                assert_eq!(
                    (stats.breaks, stats.resyncs, resets),
                    (0, 0, 0),
                    "{}",
                    c.name
                );
                assert_eq!((stats.snapshot_requests, begins), (1, 1));
            }
        }
        // The marker comes first, then the new snapshot, then deltas again.
        let stream = d.session.stream_id(a);
        let mine = d.sink.of(stream);
        let reset = mine
            .iter()
            .position(|g| {
                **g == Got::State {
                    stream,
                    state: Published::ResetRequired,
                }
            })
            .unwrap();
        assert!(matches!(mine[reset + 1], Got::Begin(_)));
        assert!(matches!(mine[reset + 2], Got::Snapshot { .. }));
        assert!(matches!(mine[reset + 3], Got::End { .. }));
        assert!(
            mine[reset + 4..]
                .iter()
                .any(|g| matches!(g, Got::Range { .. }))
        );
        assert!(d.session.is_connected());
    }
}

#[test]
fn a_duplicate_is_dropped() {
    for c in recordings() {
        let (a, name) = busiest(&c);
        let clean = replay(&c, &c.inputs, |_| {});
        let mut inputs = c.inputs.clone();
        let k = after_snapshot(&c, &name, 5);
        inputs.insert(k + 1, inputs[k].clone());
        let d = replay(&c, &inputs, |_| {});
        let (stats, before) = (d.session.stats(a), clean.session.stats(a));
        assert_eq!(stats.duplicates, before.duplicates + 1, "{}", c.name);
        assert_eq!((stats.resyncs, stats.applied), (0, before.applied));
        assert_eq!(d.sink.got, clean.sink.got, "{}", c.name);
    }
}

#[test]
fn a_stale_snapshot_is_fetched_again() {
    for c in recordings() {
        let (a, name) = busiest(&c);
        let first = frames_of(&c, &name)[0];
        let Input::Frame { bytes, .. } = &c.inputs[first] else {
            unreachable!()
        };
        let first_u = depth_ids(bytes).unwrap().1.first;
        let clean = replay(&c, &c.inputs, |_| {});
        let d = replay(&c, &c.inputs, |d| {
            d.overrides[a].push_back(Answer::Body(snapshot_body(first_u - 10)));
        });
        let stats = d.session.stats(a);
        assert_eq!(stats.snapshots_stale, 1, "{}", c.name);
        assert_eq!((stats.snapshot_requests, stats.snapshots_applied), (2, 1));
        assert_eq!(stats.resyncs, 0);
        // The stale one was never shown to consumers.
        assert_eq!(d.sink.got, clean.sink.got, "{}", c.name);
    }
}

#[test]
fn a_429_with_retry_after_backs_off_then_syncs() {
    for c in recordings() {
        let (a, _) = busiest(&c);
        let d = replay(&c, &c.inputs, |d| {
            d.overrides[a].push_back(Answer::Status(429, Some(2)));
        });
        let stats = d.session.stats(a);
        assert_eq!(
            (stats.rate_limited, stats.snapshot_requests),
            (1, 2),
            "{}",
            c.name
        );
        let refused_at = d.requests.iter().find(|(_, r)| r.symbol == a).unwrap().0;
        let later = d.requests.iter().filter(|(t, _)| *t > refused_at);
        // Nothing at all is asked for during the pause Retry-After names.
        assert!(later.clone().all(|(t, _)| *t >= refused_at + 2_000_000_000));
        assert!(later.clone().any(|(_, r)| r.symbol == a));
        for s in 0..c.symbols.len() {
            assert_eq!(d.session.state(s), StreamState::Synced, "{} {s}", c.name);
            assert_eq!(d.session.stats(s).resyncs, 0);
        }
    }
}

#[test]
fn a_failed_fetch_is_retried_after_a_pause() {
    for c in recordings() {
        let (a, _) = busiest(&c);
        let d = replay(&c, &c.inputs, |d| d.overrides[a].push_back(Answer::Failed));
        let stats = d.session.stats(a);
        assert_eq!(
            (stats.snapshots_failed, stats.snapshot_requests),
            (1, 2),
            "{}",
            c.name
        );
        let mut asked = d
            .requests
            .iter()
            .filter(|(_, r)| r.symbol == a)
            .map(|(t, _)| *t);
        let (first, second) = (asked.next().unwrap(), asked.next().unwrap());
        assert!(second >= first + 1_000_000_000);
        assert_eq!(
            (d.session.state(a), stats.resyncs),
            (StreamState::Synced, 0)
        );
    }
}

#[test]
fn a_418_pauses_the_venue_for_the_ban() {
    for c in recordings() {
        let (a, _) = busiest(&c);
        let d = replay(&c, &c.inputs, |d| {
            d.overrides[a].push_back(Answer::Status(418, Some(1)));
        });
        assert_eq!(d.session.stats(a).banned, 1);
        let refused_at = d.requests.iter().find(|(_, r)| r.symbol == a).unwrap().0;
        // The default ban pause (5 minutes) outlasts the 30 s recording.
        assert!(d.requests.iter().all(|(t, _)| *t <= refused_at));
        assert_eq!(d.session.state(a), StreamState::ResetRequired);
        assert!(d.session.stats(a).buffered > 0);
        let mut d = d;
        assert_eq!(d.session.poll_snapshot(refused_at + 299_000_000_000), None);
        let retry = d.session.poll_snapshot(refused_at + 300_000_000_000);
        assert!(retry.is_some());
    }
}

#[test]
fn without_a_relink_wait_a_disconnect_resyncs_every_symbol() {
    for c in recordings() {
        let mid = c.inputs.len() / 2;
        let t = c.inputs[mid].time();
        let mut spec = Driver::spec_for(&c);
        spec.relink_timeout_ns = 0;
        let mut d = replay_with(&c, spec, &c.inputs[..mid], |_| {});
        let n = c.symbols.len();
        assert!((0..n).all(|s| d.session.state(s) == StreamState::Synced));
        d.step(&Input::Disconnect { t });
        assert!(!d.session.is_connected());
        for s in 0..n {
            let stream = d.session.stream_id(s);
            assert_eq!(d.session.state(s), StreamState::Unseen);
            assert_eq!(d.session.stats(s).buffered, 0);
            assert_eq!(d.sink.states(stream, Published::ResetRequired), 1);
            assert_eq!(d.session.published_state(s), Published::ResetRequired);
        }
        d.step(&Input::Connect { t });
        d.run(&c.inputs[mid..]);
        check_consumer(&d.sink.got, c.market.is_linked()).unwrap();
        for s in 0..n {
            let stats = d.session.stats(s);
            assert_eq!(d.session.state(s), StreamState::Synced, "{} {s}", c.name);
            assert_eq!((stats.resyncs, stats.breaks), (1, 0), "{} {s}", c.name);
            assert_eq!((stats.snapshot_requests, stats.snapshots_applied), (2, 2));
        }
        assert_eq!(d.session.venue_stats().disconnects, 1);
    }
}

/// On the real recordings, a connection lost and replaced with nothing missed in between:
/// every symbol's next event links to its last, so no symbol resyncs and consumers see no
/// reset.
#[test]
fn a_disconnect_whose_next_events_link_keeps_every_symbol() {
    for c in recordings() {
        let mid = c.inputs.len() / 2;
        let t = c.inputs[mid].time();
        let mut d = replay(&c, &c.inputs[..mid], |_| {});
        let n = c.symbols.len();
        d.step(&Input::Disconnect { t });
        assert!(!d.session.is_connected());
        assert_eq!(d.session.relinking_symbols(), n, "{}", c.name);
        for s in 0..n {
            let stream = d.session.stream_id(s);
            assert_eq!(d.session.state(s), StreamState::Synced, "{} {s}", c.name);
            assert_eq!(d.sink.states(stream, Published::ResetRequired), 0);
        }
        d.step(&Input::Connect { t });
        d.run(&c.inputs[mid..]);
        check_consumer(&d.sink.got, c.market.is_linked()).unwrap();
        for s in 0..n {
            let stats = d.session.stats(s);
            assert_eq!(d.session.state(s), StreamState::Synced, "{} {s}", c.name);
            assert_eq!((stats.resyncs, stats.breaks), (0, 0), "{} {s}", c.name);
            assert_eq!(stats.relinked, 1, "{} {s}", c.name);
            assert_eq!((stats.snapshot_requests, stats.snapshots_applied), (1, 1));
        }
        assert_eq!(d.session.relinking_symbols(), 0);
        assert_eq!(d.session.venue_stats().disconnects, 1);
    }
}

#[test]
fn silence_and_server_shutdown_ask_for_a_new_connection() {
    for c in recordings() {
        let mid = c.inputs.len() / 2;
        let mut d = replay(&c, &c.inputs[..mid], |_| {});
        let last = c.inputs[mid - 1].time();
        let silence = 5_000_000_000;
        assert_eq!(d.session.poll_reconnect(last + silence - 1), None);
        assert_eq!(d.session.poll_timeout(), Some(last + silence));
        assert_eq!(
            d.session.poll_reconnect(last + silence),
            Some(ReconnectReason::Silence)
        );
        let shutdown = br#"{"stream":"x","data":{"e":"serverShutdown","E":1}}"#;
        d.session.on_text(last, last, shutdown, &mut d.sink);
        assert_eq!(
            d.session.poll_reconnect(last),
            Some(ReconnectReason::ServerShutdown)
        );
        // Depth keeps flowing until the shell reconnects.
        d.run(&c.inputs[mid..]);
        assert_eq!(d.session.venue_stats().server_shutdowns, 1);
        assert!((0..c.symbols.len()).all(|s| d.session.state(s) == StreamState::Synced));
        let end = c.inputs.last().unwrap().time();
        d.step(&Input::Disconnect { t: end });
        // A closed connection is replaced for being closed: the announced reason is spent.
        assert_eq!(d.session.poll_reconnect(end), None);
        d.step(&Input::Connect { t: end });
        assert_eq!(d.session.poll_reconnect(end), None);
    }
}
