//! The WebSocket client against the simulator on loopback.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::io::ws::{CLOSE_ABNORMAL, WsStatus};
use crate::sim::binance::{BinanceSim, BinanceSimConfig, BookStyle, InjectionKind};
use crate::venue::binance::{Backoff, combined_url};

use super::client::{Client, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn generated(rate: f64) -> BinanceSimConfig {
    let mut config = BinanceSimConfig::generated(&["BTCUSDT", "ETHUSDT"], BookStyle::Spot, rate);
    config.ping_interval = None;
    config
}

#[test]
fn receives_combined_streams_for_two_symbols() -> TestResult {
    let sim = BinanceSim::start(generated(100.0))?;
    let url = combined_url(&sim.ws_base(), &["BTCUSDT", "ETHUSDT"], Some(100));
    let mut client = Client::connect(&url)?;
    let mut per_stream: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    client.run(Duration::from_secs(10), |frame| {
        let value = json(frame);
        let stream = value["stream"].as_str().unwrap_or("?").to_owned();
        let data = &value["data"];
        let ids = (
            data["U"].as_u64().unwrap_or(0),
            data["u"].as_u64().unwrap_or(0),
        );
        per_stream.entry(stream).or_default().push(ids);
        per_stream.len() == 2 && per_stream.values().all(|v| v.len() >= 5)
    })?;
    assert!(client.ws.is_open());
    let mut names: Vec<&String> = per_stream.keys().collect();
    names.sort();
    assert_eq!(names, ["btcusdt@depth@100ms", "ethusdt@depth@100ms"]);
    for ids in per_stream.values() {
        for pair in ids.windows(2) {
            assert_eq!(pair[1].0, pair[0].1 + 1, "spot ids chain: {pair:?}");
        }
    }
    assert!(client.ws.stats().text_frames >= 10);
    sim.stop()?;
    Ok(())
}

#[test]
fn answers_pings_with_pongs() -> TestResult {
    let mut config = generated(20.0);
    config.ping_interval = Some(Duration::from_millis(40));
    let sim = BinanceSim::start(config)?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["btcusdt"], None))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while (client.ws.stats().pings < 3 || sim.stats().pongs_received < 3)
        && Instant::now() < deadline
    {
        client.run(Duration::from_millis(100), |_| false)?;
    }
    assert!(client.ws.stats().pings >= 3, "{:?}", client.ws.stats());
    assert!(sim.stats().pongs_received >= 3, "{:?}", sim.stats());
    sim.stop()?;
    Ok(())
}

#[test]
fn disconnect_fault_closes_socket_and_reconnect_works() -> TestResult {
    let mut config = generated(200.0);
    config.faults.disconnect_after = Some(5);
    let sim = BinanceSim::start(config)?;
    let url = combined_url(&sim.ws_base(), &["btcusdt"], Some(100));
    let mut client = Client::connect(&url)?;
    let mut frames = 0;
    let status = client.run(Duration::from_secs(10), |_| {
        frames += 1;
        false
    })?;
    assert!(
        matches!(
            status,
            WsStatus::Closed {
                code: CLOSE_ABNORMAL,
                ..
            }
        ),
        "{status:?}"
    );
    assert_eq!(frames, 5);
    let kinds: Vec<_> = sim.injected().list.into_iter().map(|i| i.kind).collect();
    assert_eq!(kinds, [InjectionKind::Disconnected { after_events: 5 }]);

    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1), 0.5, 9);
    std::thread::sleep(backoff.next_delay());
    let mut again = Client::connect(&url)?;
    let mut more = 0;
    let status = again.run(Duration::from_secs(10), |_| {
        more += 1;
        more == 20
    })?;
    assert!(matches!(status, WsStatus::Open { .. }), "{status:?}");
    assert_eq!(more, 20);
    backoff.reset();
    assert_eq!(backoff.attempts(), 0);
    sim.stop()?;
    Ok(())
}

#[test]
fn silence_fault_sends_nothing_for_its_period() -> TestResult {
    let mut config = generated(100.0);
    config.faults.silence_after = Some(3);
    config.faults.silence_for = Some(Duration::from_millis(600));
    let sim = BinanceSim::start(config)?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["btcusdt"], Some(100)))?;
    let mut times = Vec::new();
    let status = client.run(Duration::from_secs(10), |_| {
        times.push(Instant::now());
        times.len() == 6
    })?;
    assert!(matches!(status, WsStatus::Open { .. }), "{status:?}");
    assert_eq!(times.len(), 6);
    let quiet = times[3] - times[2];
    assert!(quiet >= Duration::from_millis(550), "quiet for {quiet:?}");
    assert!(times[2] - times[0] < Duration::from_millis(500));
    let silenced = sim.injected().count(|k| {
        matches!(
            k,
            InjectionKind::Silenced {
                after_events: 3,
                ..
            }
        )
    });
    assert_eq!(silenced, 1);
    sim.stop()?;
    Ok(())
}

#[test]
fn server_shutdown_event_then_close_1001() -> TestResult {
    let mut config = generated(100.0);
    config.faults.shutdown_after = Some(4);
    config.faults.shutdown_grace = Duration::from_millis(50);
    let sim = BinanceSim::start(config)?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["ethusdt"], Some(100)))?;
    let mut shutdown_seen = false;
    let status = client.run(Duration::from_secs(10), |frame| {
        shutdown_seen |= json(frame)["e"] == "serverShutdown";
        false
    })?;
    assert!(shutdown_seen);
    assert!(
        matches!(status, WsStatus::Closed { code: 1001, .. }),
        "{status:?}"
    );
    sim.stop()?;
    Ok(())
}

#[test]
fn clean_close_from_the_client() -> TestResult {
    let sim = BinanceSim::start(generated(50.0))?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["btcusdt"], Some(100)))?;
    client.run(Duration::from_secs(10), |_| true)?;
    client.ws.close()?;
    let status = client.run(Duration::from_secs(5), |_| false)?;
    assert!(
        matches!(status, WsStatus::Closed { code: 1000, .. }),
        "{status:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while sim.stats().active_connections > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(sim.stats().active_connections, 0);
    sim.stop()?;
    Ok(())
}

#[test]
fn event_faults_match_the_record() -> TestResult {
    let mut config = BinanceSimConfig::generated(&["BTCUSDT", "ETHUSDT"], BookStyle::Futures, 0.0);
    if let crate::sim::binance::Source::Generated(g) = &mut config.source {
        g.count = Some(400);
    }
    config.faults.symbols = vec!["btcusdt".into()];
    config.faults.drop = 0.05;
    config.faults.duplicate = 0.05;
    config.faults.reorder = 0.05;
    let sim = BinanceSim::start(config)?;
    let url = combined_url(&sim.ws_base(), &["btcusdt", "ethusdt"], Some(0));
    let mut client = Client::connect(&url)?;
    let mut seen: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let before: usize = seen.values().map(Vec::len).sum();
        client.run(Duration::from_millis(300), |frame| {
            let v = json(frame);
            let ids = (
                v["data"]["pu"].as_u64().unwrap_or(0),
                v["data"]["u"].as_u64().unwrap_or(0),
            );
            let symbol = v["data"]["s"].as_str().unwrap_or("?").to_owned();
            seen.entry(symbol).or_default().push(ids);
            false
        })?;
        let quiet = before == seen.values().map(Vec::len).sum::<usize>();
        if (quiet && sim.stats().feed_finished) || Instant::now() > deadline {
            break;
        }
    }
    let injected = sim.injected();
    let eth = &seen["ETHUSDT"];
    assert_eq!(eth.len(), 400);
    assert!(
        eth.windows(2).all(|w| w[1].0 == w[0].1),
        "unaffected symbol has no breaks"
    );
    let btc = &seen["BTCUSDT"];
    let dropped = injected.dropped(0, "BTCUSDT");
    let duplicated = injected.count(|k| matches!(k, InjectionKind::Duplicated { .. }));
    let reordered = injected.count(|k| matches!(k, InjectionKind::Reordered { .. }));
    assert!(
        !dropped.is_empty() && duplicated > 0 && reordered > 0,
        "{injected:?}"
    );
    assert!(dropped.iter().all(|id| btc.iter().all(|&(_, u)| u != *id)));
    assert_eq!(btc.len() + dropped.len(), 400 + duplicated);
    let mut sorted: Vec<u64> = btc.iter().map(|&(_, u)| u).collect();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len() + dropped.len(),
        400,
        "every event sent or dropped"
    );
    sim.stop()?;
    Ok(())
}

#[test]
fn wss_client_fails_cleanly_against_a_plain_server() -> TestResult {
    let sim = BinanceSim::start(generated(10.0))?;
    let url = combined_url(&format!("wss://{}", sim.ws_addr()), &["btcusdt"], None);
    let mut client = Client::connect(&url)?;
    let started = Instant::now();
    let outcome = client.run(Duration::from_secs(5), |_| true);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the TLS handshake must not hang"
    );
    assert!(!client.ws.is_open());
    assert!(
        outcome.is_err() || matches!(outcome, Ok(WsStatus::Closed { .. })),
        "{outcome:?}"
    );
    sim.stop()?;
    Ok(())
}
