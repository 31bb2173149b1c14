//! The HTTP client and the snapshot fetcher against the simulator on loopback.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::io::fetch::SnapshotFetcher;
use crate::io::http::{DepthApi, HttpError, depth_path, http_get};
use crate::sim::binance::{BinanceSim, BinanceSimConfig, BookStyle, InjectionKind};
use crate::venue::binance::combined_url;
use serde_json::Value;

use super::client::{Client, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const TIMEOUT: Duration = Duration::from_secs(5);

fn sim_with(chunked: bool) -> Result<BinanceSim, Box<dyn std::error::Error>> {
    let mut config = BinanceSimConfig::generated(&["BTCUSDT", "ETHUSDT"], BookStyle::Futures, 50.0);
    config.http_chunked = chunked;
    config.wait_for_client = false;
    Ok(BinanceSim::start(config)?)
}

fn check_snapshot(chunked: bool) -> TestResult {
    let sim = sim_with(chunked)?;
    let path = depth_path(DepthApi::UsdM, "btcusdt", 5);
    let response = http_get(&sim.http_base(), &path, TIMEOUT)?;
    assert_eq!(response.status, 200);
    assert_eq!(response.used_weight, Some(5));
    let body: Value = serde_json::from_slice(&response.body)?;
    assert!(
        body["lastUpdateId"]
            .as_u64()
            .is_some_and(|id| id >= 5_000_000_000)
    );
    assert_eq!(body["bids"].as_array().map(Vec::len), Some(5));
    assert_eq!(body["asks"].as_array().map(Vec::len), Some(5));
    let second = http_get(
        &sim.http_base(),
        &depth_path(DepthApi::CoinM, "ETHUSDT", 1000),
        TIMEOUT,
    )?;
    assert_eq!((second.status, second.used_weight), (200, Some(55)));
    sim.stop()?;
    Ok(())
}

#[test]
fn snapshot_with_content_length() -> TestResult {
    check_snapshot(false)
}

#[test]
fn snapshot_chunked() -> TestResult {
    check_snapshot(true)
}

#[test]
fn rate_limit_429_with_retry_after() -> TestResult {
    let mut config = BinanceSimConfig::generated(&["BTCUSDT"], BookStyle::Spot, 10.0);
    config.faults.rate_limited = 2;
    config.faults.retry_after_secs = 3;
    let sim = BinanceSim::start(config)?;
    let path = depth_path(DepthApi::Spot, "BTCUSDT", 100);
    for _ in 0..2 {
        let response = http_get(&sim.http_base(), &path, TIMEOUT)?;
        assert_eq!((response.status, response.retry_after_secs), (429, Some(3)));
    }
    let response = http_get(&sim.http_base(), &path, TIMEOUT)?;
    assert_eq!((response.status, response.retry_after_secs), (200, None));
    let limited = sim.injected().count(|k| {
        *k == InjectionKind::RateLimited {
            retry_after_secs: 3,
        }
    });
    assert_eq!(limited, 2);
    sim.stop()?;
    Ok(())
}

#[test]
fn unknown_paths_and_symbols() -> TestResult {
    let sim = sim_with(false)?;
    assert_eq!(
        http_get(&sim.http_base(), "/api/v3/trades", TIMEOUT)?.status,
        404
    );
    let response = http_get(
        &sim.http_base(),
        &depth_path(DepthApi::Spot, "NOPE", 5),
        TIMEOUT,
    )?;
    assert_eq!(response.status, 400);
    assert!(String::from_utf8_lossy(&response.body).contains("-1121"));
    let refused = http_get("http://127.0.0.1:1", "/", Duration::from_millis(500));
    assert!(matches!(
        refused,
        Err(HttpError::Request(_) | HttpError::Timeout(_))
    ));
    sim.stop()?;
    Ok(())
}

type Side = BTreeMap<String, String>;

fn apply(side: &mut Side, levels: &Value) {
    for level in levels.as_array().into_iter().flatten() {
        let (price, qty) = (
            level[0].as_str().unwrap_or(""),
            level[1].as_str().unwrap_or(""),
        );
        if qty.parse::<f64>().unwrap_or(0.0) == 0.0 {
            side.remove(price);
        } else {
            side.insert(price.to_owned(), qty.to_owned());
        }
    }
}

/// A book built from a snapshot plus the events after it equals a later
/// snapshot taken at the same update id; a stale snapshot cannot be bridged.
#[test]
fn generated_snapshots_agree_with_events_and_stale_one_does_not_bridge() -> TestResult {
    let mut config = BinanceSimConfig::generated(&["BTCUSDT"], BookStyle::Spot, 200.0);
    config.faults.stale_snapshots = 1;
    let sim = BinanceSim::start(config)?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["btcusdt"], Some(100)))?;
    let mut events: Vec<Value> = Vec::new();
    client.run(TIMEOUT, |frame| {
        events.push(json(frame)["data"].clone());
        events.len() >= 3
    })?;
    let first_u = events[0]["U"].as_u64().unwrap_or(0);

    let fetcher = SnapshotFetcher::spawn(&sim.http_base(), TIMEOUT, 4)?;
    fetcher.request(1, &depth_path(DepthApi::Spot, "BTCUSDT", 1000))?;
    let stale = fetcher.recv_timeout(TIMEOUT).ok_or("no stale snapshot")?;
    let stale: Value = serde_json::from_slice(&stale.result?.body)?;
    assert!(
        stale["lastUpdateId"].as_u64().unwrap_or(u64::MAX) + 1 < first_u,
        "stale snapshot"
    );

    fetcher.request(2, &depth_path(DepthApi::Spot, "BTCUSDT", 1000))?;
    let fresh = fetcher.recv_timeout(TIMEOUT).ok_or("no snapshot")?;
    assert_eq!(fresh.id, 2);
    let fresh: Value = serde_json::from_slice(&fresh.result?.body)?;
    let id = fresh["lastUpdateId"].as_u64().ok_or("no id")?;
    let (mut bids, mut asks) = (Side::new(), Side::new());
    apply(&mut bids, &fresh["bids"]);
    apply(&mut asks, &fresh["asks"]);
    // Let the book move past the first snapshot before taking the second.
    client.run(TIMEOUT, |frame| {
        let event = json(frame)["data"].clone();
        let moved = event["u"].as_u64().is_some_and(|u| u > id);
        events.push(event);
        moved
    })?;
    fetcher.request(3, &depth_path(DepthApi::Spot, "BTCUSDT", 1000))?;
    let later = fetcher.recv_timeout(TIMEOUT).ok_or("no second snapshot")?;
    let later: Value = serde_json::from_slice(&later.result?.body)?;
    let target = later["lastUpdateId"].as_u64().ok_or("no id")?;
    assert!(fetcher.stop());
    let deadline = Instant::now() + TIMEOUT;
    while events.last().and_then(|e| e["u"].as_u64()).unwrap_or(0) < target
        && Instant::now() < deadline
    {
        client.run(Duration::from_millis(100), |frame| {
            events.push(json(frame)["data"].clone());
            false
        })?;
    }
    let mut applied = 0;
    for event in &events {
        let (first, last) = (
            event["U"].as_u64().unwrap_or(0),
            event["u"].as_u64().unwrap_or(0),
        );
        if last <= id || first > target {
            continue;
        }
        applied += 1;
        apply(&mut bids, &event["b"]);
        apply(&mut asks, &event["a"]);
    }
    assert!(applied > 0);
    let (mut want_bids, mut want_asks) = (Side::new(), Side::new());
    apply(&mut want_bids, &later["bids"]);
    apply(&mut want_asks, &later["asks"]);
    assert_eq!(bids, want_bids);
    assert_eq!(asks, want_asks);
    let stale_count = sim
        .injected()
        .count(|k| matches!(k, InjectionKind::StaleSnapshot { .. }));
    assert_eq!(stale_count, 1);
    sim.stop()?;
    Ok(())
}

#[test]
fn fetcher_queue_is_bounded_and_never_blocks() -> TestResult {
    let sim = sim_with(false)?;
    let fetcher = SnapshotFetcher::spawn(&sim.http_base(), TIMEOUT, 1)?;
    let path = depth_path(DepthApi::UsdM, "ETHUSDT", 10);
    let started = Instant::now();
    let outcomes: Vec<bool> = (0..50).map(|i| fetcher.request(i, &path).is_ok()).collect();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(outcomes[0] && outcomes.iter().any(|ok| !ok));
    let result = fetcher.recv_timeout(TIMEOUT).ok_or("no result")?;
    assert_eq!(result.result?.status, 200);
    assert!(fetcher.stop());
    sim.stop()?;
    Ok(())
}
