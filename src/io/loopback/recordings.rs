//! Recorded-data mode: real captures replayed through the simulator.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::io::http::{DepthApi, depth_path, http_get};
use crate::sim::binance::{BinanceSim, BinanceSimConfig, Source};
use crate::venue::binance::combined_url;
use flate2::read::GzDecoder;
use serde_json::Value;

use super::client::{Client, captures, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The `data` of the first `n` depth lines of an hftbacktest file, and the
/// first inline snapshot's id.
fn first_depth_events(
    path: &Path,
    n: usize,
) -> Result<(Vec<Value>, Option<u64>), Box<dyn std::error::Error>> {
    let mut events = Vec::new();
    let mut snapshot = None;
    for line in BufReader::new(GzDecoder::new(File::open(path)?)).lines() {
        let line = line?;
        let (_, text) = line.split_once(' ').ok_or("no timestamp")?;
        let value: Value = serde_json::from_str(text)?;
        if value["data"]["e"] == "depthUpdate" && events.len() < n {
            events.push(value["data"].clone());
        }
        if snapshot.is_none() {
            snapshot = value["lastUpdateId"].as_u64();
        }
        if events.len() == n && snapshot.is_some() {
            break;
        }
    }
    Ok((events, snapshot))
}

#[test]
fn replays_first_100_hftbacktest_events_in_order() -> TestResult {
    let Some(dir) = captures() else { return Ok(()) };
    let file = dir.join("binance/hftbacktest/spot_btcusdt_20240808.gz");
    let (want, snapshot_id) = first_depth_events(&file, 100)?;
    let mut config = BinanceSimConfig::recorded(vec![file], None);
    if let Source::Recorded(replay) = &mut config.source {
        replay.max_records = Some(2_000);
    }
    config.ping_interval = None;
    let sim = BinanceSim::start(config)?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["btcusdt"], Some(100)))?;
    let mut got = Vec::new();
    client.run(Duration::from_secs(20), |frame| {
        let value = json(frame);
        assert_eq!(value["stream"], "btcusdt@depth@100ms");
        got.push(value["data"].clone());
        got.len() == 100
    })?;
    assert_eq!(got.len(), 100);
    assert_eq!(got, want);
    for pair in got.windows(2) {
        assert_eq!(pair[1]["U"].as_u64(), pair[0]["u"].as_u64().map(|u| u + 1));
    }
    let response = http_get(
        &sim.http_base(),
        &depth_path(DepthApi::Spot, "BTCUSDT", 1000),
        Duration::from_secs(5),
    )?;
    let body: Value = serde_json::from_slice(&response.body)?;
    assert_eq!(body["lastUpdateId"].as_u64(), snapshot_id);
    sim.stop()?;
    Ok(())
}

#[test]
fn replays_cryptofeed_futures_with_its_snapshots() -> TestResult {
    let Some(dir) = captures() else { return Ok(()) };
    let base = dir.join("binance/cryptofeed");
    let files = vec![
        base.join("BINANCE_FUTURES.ws.1.0"),
        base.join("BINANCE_FUTURES.http.0.0"),
    ];
    let mut config = BinanceSimConfig::recorded(files, None);
    config.ping_interval = None;
    let sim = BinanceSim::start(config)?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["SUSHIUSDT"], Some(100)))?;
    let mut got: Vec<Value> = Vec::new();
    client.run(Duration::from_secs(20), |frame| {
        got.push(json(frame)["data"].clone());
        got.len() == 20
    })?;
    assert_eq!(got.len(), 20);
    for pair in got.windows(2) {
        assert_eq!(pair[1]["pu"], pair[0]["u"], "futures continuity");
    }
    let response = http_get(
        &sim.http_base(),
        &depth_path(DepthApi::UsdM, "SUSHIUSDT", 1000),
        Duration::from_secs(5),
    )?;
    let body: Value = serde_json::from_slice(&response.body)?;
    assert_eq!(body["lastUpdateId"].as_u64(), Some(600_859_605_926));
    sim.stop()?;
    Ok(())
}

#[test]
fn paced_replay_follows_the_recorded_clock() -> TestResult {
    let Some(dir) = captures() else { return Ok(()) };
    let file = dir.join("binance/hftbacktest/spot_btcusdt_20240808.gz");
    let mut config = BinanceSimConfig::recorded(vec![file], Some(4.0));
    if let Source::Recorded(replay) = &mut config.source {
        replay.max_records = Some(200);
    }
    config.ping_interval = None;
    let sim = BinanceSim::start(config)?;
    let mut client = Client::connect(&combined_url(&sim.ws_base(), &["btcusdt"], Some(100)))?;
    let mut first = None;
    let mut count = 0;
    client.run(Duration::from_secs(20), |_| {
        first.get_or_insert_with(Instant::now);
        count += 1;
        count == 6
    })?;
    let elapsed = first.map(|t| t.elapsed()).unwrap_or_default();
    assert_eq!(count, 6);
    // Five 100 ms depth intervals at four times the speed: about 125 ms.
    assert!(elapsed >= Duration::from_millis(90), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    sim.stop()?;
    Ok(())
}
