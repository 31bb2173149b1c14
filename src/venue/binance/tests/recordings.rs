//! Every recorded session replayed: one snapshot per symbol, then every delta after it,
//! continuous under the market's rule, equal to a plain re-implementation of the rule.

use crate::publish::StreamState as Published;
use crate::sequencer::StreamState;

use super::super::Market;
use super::capture::{
    Capture, Driver, Input, Rec, captures_dir, data_bytes, load_cryptofeed, load_hft,
};
use super::{Got, check_consumer};

/// What the documented rule makes of one symbol's events and its snapshot.
#[derive(Debug, Default)]
struct Expected {
    /// Indices of the events applied, in order.
    applied: Vec<usize>,
    /// Events older than the snapshot, wherever they arrived.
    stale: u64,
    /// Of those, the ones that arrived after the snapshot.
    stale_after: u64,
    duplicates: u64,
}

/// The venue's rule, written out plainly: `linked` for futures, `l` the snapshot's
/// lastUpdateId, `delivered_at` the number of events received before the snapshot.
fn oracle(linked: bool, l: u64, events: &[Rec], delivered_at: usize) -> Result<Expected, String> {
    let mut x = Expected::default();
    let first = events.first().ok_or("no event")?;
    if l < first.ids.first {
        return Err(format!(
            "snapshot {l} is older than the first event {:?}",
            first.ids
        ));
    }
    let mut previous: Option<u64> = None;
    for (i, e) in events.iter().enumerate() {
        let (big_u, u, pu) = (e.ids.first, e.ids.last, e.ids.prev);
        let stale = if linked { u < l } else { u <= l };
        let old = previous.is_some_and(|p| u <= p);
        if stale || old {
            if stale {
                x.stale += 1;
                if i >= delivered_at {
                    x.stale_after += 1;
                }
            } else {
                x.duplicates += 1;
            }
            continue;
        }
        let ok = match (previous, linked) {
            (None, true) => big_u <= l && l <= u,
            (None, false) => big_u <= l + 1 && l < u,
            (Some(p), true) => pu == Some(p),
            (Some(p), false) => big_u == p + 1,
        };
        if !ok {
            return Err(format!("event {i} {:?} breaks after {previous:?}", e.ids));
        }
        x.applied.push(i);
        previous = Some(u);
    }
    Ok(x)
}

/// Replays a recording and checks it; returns the report line.
fn check(capture: &Capture) -> String {
    let linked = capture.market.is_linked();
    let mut d = Driver::new(Driver::spec_for(capture));
    let start = capture.inputs.first().map_or(0, Input::time);
    d.step(&Input::Connect { t: start });
    d.run(&capture.inputs);
    match check_consumer(&d.sink.got, linked) {
        Ok(unparsed) => assert_eq!(unparsed, 0, "{}", capture.name),
        Err(e) => panic!("{}: {e}", capture.name),
    }
    let (mut events, mut applied, mut stale_before, mut stale_after, mut resyncs) = (0, 0, 0, 0, 0);
    for (s, name) in capture.symbols.iter().enumerate() {
        let what = format!("{} {name}", capture.name);
        let stats = d.session.stats(s);
        assert_eq!(d.session.state(s), StreamState::Synced, "{what}");
        assert_eq!(stats.snapshot_requests, 1, "{what}: {stats:?}");
        assert_eq!(stats.snapshots_applied, 1, "{what}");
        assert_eq!(
            (stats.resyncs, stats.breaks, stats.malformed),
            (0, 0, 0),
            "{what}"
        );
        assert_eq!((stats.overflowed, stats.buffered), (0, 0), "{what}");

        // The request asked for what was recorded.
        let recorded = capture.inputs.iter().find_map(|i| match i {
            Input::Snapshot {
                symbol, path, body, ..
            } if symbol == name => Some((path, body)),
            _ => None,
        });
        let (path, body) = recorded.unwrap();
        let request = d.requests.iter().find(|(_, r)| r.symbol == s).unwrap();
        if let Some(path) = path {
            assert_eq!(&request.1.path_and_query, path, "{what}");
        }

        let [(at, l)] = d.delivered[s][..] else {
            panic!("{what}: snapshots delivered {:?}", d.delivered[s]);
        };
        let x = oracle(linked, l, &d.events[s], at).unwrap_or_else(|e| panic!("{what}: {e}"));

        // Consumers: the snapshot once, before any delta; never a reset.
        let stream = d.session.stream_id(s);
        let mine = d.sink.of(stream);
        let next = if linked { l } else { l + 1 };
        let head: Vec<&Got> = mine.iter().take(3).copied().collect();
        assert_eq!(
            head,
            [
                &Got::Begin(stream),
                &Got::Snapshot {
                    stream,
                    seq: l,
                    payload: body.clone()
                },
                &Got::End { stream, next },
            ],
            "{what}"
        );
        assert_eq!(
            mine.iter().filter(|g| matches!(g, Got::Begin(_))).count(),
            1
        );
        assert_eq!(d.sink.states(stream, Published::ResetRequired), 0, "{what}");
        assert_eq!(d.sink.states(stream, Published::Synced), 1, "{what}");

        // Every delta the rule applies, and nothing else, as the event's own bytes.
        let want: Vec<Vec<u8>> = x
            .applied
            .iter()
            .map(|&i| data_bytes(&d.events[s][i].frame))
            .collect();
        let got = d.sink.ranges(stream);
        assert_eq!(got.len(), want.len(), "{what}");
        assert!(
            got.iter().zip(&want).all(|(g, w)| *g == w.as_slice()),
            "{what}"
        );
        assert_eq!(stats.applied, want.len() as u64, "{what}");
        assert_eq!(stats.dropped_stale, x.stale, "{what}");
        assert_eq!(stats.stale_after_snapshot, x.stale_after, "{what}");
        assert_eq!(stats.duplicates, x.duplicates, "{what}");
        assert_eq!(stats.events, d.events[s].len() as u64, "{what}");

        events += stats.events;
        applied += stats.applied;
        stale_before += stats.dropped_stale - stats.stale_after_snapshot;
        stale_after += stats.stale_after_snapshot;
        resyncs += stats.resyncs;
    }
    let venue = d.session.venue_stats();
    assert_eq!(
        (venue.malformed, venue.hostile_ids, venue.unknown_symbol),
        (0, 0, 0)
    );
    format!(
        "{}: {:?}, {} symbols, {events} depth events, {applied} applied, {stale_before} stale \
         before the snapshot, {stale_after} stale after it, {resyncs} resyncs, {} other frames \
         ignored",
        capture.name,
        capture.market,
        capture.symbols.len(),
        venue.ignored + venue.unknown_events
    )
}

fn hft(file: &str, market: Market) {
    let Some(dir) = captures_dir() else {
        return;
    };
    let capture = load_hft(&dir.join("hftbacktest").join(file));
    assert_eq!(capture.market, market);
    println!("{}", check(&capture));
}

fn cryptofeed(prefix: &str, market: Market) {
    let Some(dir) = captures_dir() else {
        return;
    };
    let capture = load_cryptofeed(&dir.join("cryptofeed"), prefix);
    assert_eq!(capture.market, market);
    println!("{}", check(&capture));
}

#[test]
fn hftbacktest_spot_btcusdt() {
    hft("spot_btcusdt_20240808.gz", Market::Spot);
}

#[test]
fn hftbacktest_usdm_btcusdt() {
    hft("usdm_btcusdt_20240808.gz", Market::Usdm);
}

#[test]
fn hftbacktest_coinm_btcusd_perp() {
    hft("cm_btcusd_perp_20240808.gz", Market::Coinm);
}

#[test]
fn cryptofeed_spot() {
    cryptofeed("BINANCE", Market::Spot);
}

#[test]
fn cryptofeed_spot_binance_us() {
    cryptofeed("BINANCE_US", Market::Spot);
}

#[test]
fn cryptofeed_usdm() {
    cryptofeed("BINANCE_FUTURES", Market::Usdm);
}

#[test]
fn cryptofeed_coinm() {
    cryptofeed("BINANCE_DELIVERY", Market::Coinm);
}

#[test]
fn every_recording_is_covered() {
    let Some(dir) = captures_dir() else {
        return;
    };
    let mut names: Vec<String> = ["hftbacktest", "cryptofeed"]
        .iter()
        .flat_map(|sub| std::fs::read_dir(dir.join(sub)).unwrap())
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".gz") || n.ends_with(".ws.1.0"))
        .collect();
    names.sort();
    let tested = [
        "BINANCE.ws.1.0",
        "BINANCE_DELIVERY.ws.1.0",
        "BINANCE_FUTURES.ws.1.0",
        "BINANCE_US.ws.1.0",
        "cm_btcusd_perp_20240808.gz",
        "spot_btcusdt_20240808.gz",
        "usdm_btcusdt_20240808.gz",
    ];
    assert_eq!(names, tested);
}

#[test]
fn the_oracle_rejects_what_the_rule_rejects() {
    let rec = |first, last, prev| Rec {
        ids: super::Ids { first, last, prev },
        frame: Vec::new(),
    };
    let spot = [rec(1, 5, None), rec(6, 9, None), rec(11, 12, None)];
    assert!(oracle(false, 6, &spot[..2], 0).is_ok());
    assert!(oracle(false, 6, &spot, 0).is_err());
    assert!(oracle(false, 0, &spot, 0).is_err());
    let fut = [
        rec(10, 20, Some(1)),
        rec(25, 30, Some(20)),
        rec(31, 40, Some(29)),
    ];
    assert_eq!(oracle(true, 20, &fut[..2], 1).unwrap().applied, [0, 1]);
    assert!(oracle(true, 20, &fut, 0).is_err());
}
