//! End to end on loopback: the Binance simulator (WebSocket combined streams and REST
//! snapshots, from the real recordings or generated books, with faults) against the real
//! rx loop, WebSocket client, snapshot fetcher and Binance session. The consumer checks
//! continuity by each market's own rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::drive::live::{RxLoop, RxOptions, RxResult, RxShared};
use crate::io::idle::IdleStrategy;
use crate::publish::fanout::Fanout;
use crate::publish::{self, Consumer, Event, StreamState};
use crate::sim::binance::{BinanceSim, BinanceSimConfig, BookStyle, FaultConfig, InjectionKind};
use crate::venue::binance::{BinanceSpec, BinanceVenue, Market};

static SERIAL: Mutex<()> = Mutex::new(());

fn recordings() -> Option<PathBuf> {
    // `GAPLESS_SHARED` names the shared material where `../shared` does not reach it.
    let shared = std::env::var_os("GAPLESS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let dir = shared.join("captures/binance");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipping: ../shared/captures not found");
        None
    }
}

/// Per symbol, what the consumer saw.
#[derive(Debug, Default, Clone)]
struct SymbolLog {
    snapshots: Vec<u64>,
    deltas: Vec<(u64, u64, Option<u64>)>,
    resets: u64,
    synced: bool,
    broken: Vec<String>,
}

fn run(
    sim: &BinanceSim,
    market: Market,
    symbols: &[&str],
    update_ms: Option<u32>,
    tweak: impl FnOnce(&mut BinanceSpec),
    until: impl Fn(&BTreeMap<u16, SymbolLog>, &BinanceSim) -> bool,
    limit: Duration,
) -> (BTreeMap<u16, SymbolLog>, RxResult) {
    run_lingering(
        sim,
        market,
        symbols,
        update_ms,
        tweak,
        until,
        limit,
        Duration::ZERO,
    )
}

/// [`run`], going on for `linger` once `until` holds (a quiet spell after the feed).
#[allow(clippy::too_many_arguments)]
fn run_lingering(
    sim: &BinanceSim,
    market: Market,
    symbols: &[&str],
    update_ms: Option<u32>,
    tweak: impl FnOnce(&mut BinanceSpec),
    until: impl Fn(&BTreeMap<u16, SymbolLog>, &BinanceSim) -> bool,
    limit: Duration,
    linger: Duration,
) -> (BTreeMap<u16, SymbolLog>, RxResult) {
    let mut spec = BinanceSpec::new(market, symbols.iter().map(|s| s.to_string()).collect());
    spec.depth_limit = 100;
    spec.silence_timeout_ns = 3_000_000_000;
    tweak(&mut spec);
    let venue =
        BinanceVenue::new("sim", spec, &sim.ws_base(), &sim.http_base(), update_ms).expect("venue");
    let (producer, mut consumer) = publish::channel(64 << 20, symbols.len());
    let shared = RxShared::default();
    let options = RxOptions {
        idle: IdleStrategy::Yield,
        ..RxOptions::default()
    };
    let rx = RxLoop::new(
        vec![venue.into()],
        Fanout::new(vec![producer]),
        options,
        shared.clone(),
    )
    .expect("poll");
    let rx = std::thread::spawn(move || rx.run());
    let mut logs: BTreeMap<u16, SymbolLog> = BTreeMap::new();
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && !until(&logs, sim) {
        if drain(&mut consumer, &mut logs, market) == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let quiet_until = Instant::now() + linger;
    while Instant::now() < quiet_until {
        if drain(&mut consumer, &mut logs, market) == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let result = rx.join().expect("rx thread").expect("rx loop");
    drain(&mut consumer, &mut logs, market);
    (logs, result)
}

/// Reads what is queued, checking each symbol's deltas against its market's rule.
fn drain(consumer: &mut Consumer, logs: &mut BTreeMap<u16, SymbolLog>, market: Market) -> usize {
    let mut n = 0;
    while consumer
        .pop(|e| {
            let log = logs.entry(e.stream()).or_default();
            match e {
                Event::State { state, .. } => {
                    if state == StreamState::ResetRequired {
                        log.resets += 1;
                    }
                    log.synced = state == StreamState::Synced;
                }
                Event::SnapshotEnd { next, .. } => {
                    log.snapshots.push(next);
                    log.deltas.clear();
                }
                Event::Range {
                    first,
                    last,
                    payload,
                    ..
                } => {
                    let v: serde_json::Value =
                        serde_json::from_slice(payload).expect("event JSON passed through");
                    assert_eq!(v["U"].as_u64(), Some(first));
                    assert_eq!(v["u"].as_u64(), Some(last));
                    let pu = v["pu"].as_u64();
                    let next = log.snapshots.last().copied();
                    let ok = match (log.deltas.last(), market) {
                        (None, Market::Spot) => next.is_some_and(|n| first <= n && n <= last),
                        (None, _) => next.is_some_and(|l| first <= l && l <= last),
                        (Some(&(_, prev, _)), Market::Spot) => first == prev + 1,
                        (Some(&(_, prev, _)), _) => pu == Some(prev),
                    };
                    if !ok {
                        log.broken.push(format!(
                            "{first}..={last} pu {pu:?} after {:?}",
                            log.deltas.last()
                        ));
                    }
                    log.deltas.push((first, last, pu));
                }
                _ => {}
            }
        })
        .is_some()
    {
        n += 1;
    }
    n
}

fn first_line_symbols(ws_file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(ws_file).unwrap();
    let url = text.lines().next().unwrap_or("");
    let streams = url
        .split("streams=")
        .nth(1)
        .unwrap_or("")
        .split(' ')
        .next()
        .unwrap_or("");
    let mut symbols: Vec<String> = streams
        .split('/')
        .filter(|s| s.contains("@depth"))
        .map(|s| s.split('@').next().unwrap_or("").to_string())
        .collect();
    symbols.dedup();
    symbols
}

fn replay_recording(ws: &str, http: &str, market: Market) -> u64 {
    let Some(dir) = recordings() else { return 0 };
    let ws = dir.join("cryptofeed").join(ws);
    let http = dir.join("cryptofeed").join(http);
    let symbols = first_line_symbols(&ws);
    let replay = Replay {
        speed: Some(4.0),
        update_ms: Some(100),
        linger: Duration::ZERO,
    };
    replay_files(vec![ws, http], symbols, market, replay)
}

/// How a recording is replayed.
struct Replay {
    /// Served at this multiple of its own pace; `None`: as fast as the client reads.
    speed: Option<f64>,
    update_ms: Option<u32>,
    /// How long to go on once every symbol is synced and the recording is out.
    linger: Duration,
}

fn replay_files(files: Vec<PathBuf>, symbols: Vec<String>, market: Market, replay: Replay) -> u64 {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sim = BinanceSim::start(BinanceSimConfig::recorded(files, replay.speed)).expect("sim");
    let names: Vec<&str> = symbols.iter().map(String::as_str).collect();
    let (logs, result) = run_lingering(
        &sim,
        market,
        &names,
        replay.update_ms,
        |spec| {
            // Replayed as fast as the client reads, the whole recording can arrive before
            // the snapshot answer: room to keep it all while waiting.
            spec.max_pending = 1 << 16;
            spec.pending_bytes = 64 << 20;
        },
        // Served as fast as the client reads, the whole recording can be out before the
        // snapshot answer is in (on a loaded machine, well before): stop only once every
        // symbol has applied its snapshot.
        |logs, sim| {
            sim.stats().feed_finished
                && (0..symbols.len()).all(|i| {
                    logs.get(&(i as u16))
                        .is_some_and(|l| l.synced && !l.snapshots.is_empty())
                })
        },
        Duration::from_secs(60),
        replay.linger,
    );
    let session = result.venues[0]
        .binance()
        .expect("a binance venue")
        .session();
    let mut stale_after = 0;
    let transport = result.venues[0]
        .binance()
        .expect("a binance venue")
        .transport_stats();
    eprintln!("transport: {transport:?}");
    // Once the recording is out the connection is quiet, not dead: the client's pings
    // and the server's pongs keep it (a loaded machine once took longer than the
    // silence timeout to consume the recording, and the rotation resynced the symbol).
    assert_eq!(transport.rotations, 0, "{transport:?}");
    assert!(
        sim.stats().feed_finished,
        "the recording was served to the end"
    );
    for (i, symbol) in symbols.iter().enumerate() {
        let stats = session.stats(i);
        let log = logs.get(&session.stream_id(i)).cloned().unwrap_or_default();
        assert_eq!(
            stats.resyncs, 0,
            "{symbol}: no break in a recording: {stats:?}"
        );
        assert_eq!(log.snapshots.len(), 1, "{symbol}: one snapshot: {stats:?}");
        assert!(log.broken.is_empty(), "{symbol}: {:?}", log.broken);
        assert!(
            !log.deltas.is_empty(),
            "{symbol}: deltas after the snapshot"
        );
        assert_eq!(log.deltas.len() as u64, stats.applied, "{symbol}");
        eprintln!(
            "{symbol}: {} deltas after the snapshot, {} stale after it dropped",
            log.deltas.len(),
            stats.stale_after_snapshot
        );
        stale_after += stats.stale_after_snapshot;
    }
    stale_after
}

#[test]
fn spot_recording_replays_continuously() {
    let _ = replay_recording("BINANCE.ws.1.0", "BINANCE.http.0.0", Market::Spot);
}

#[test]
fn usdm_recording_replays_continuously() {
    let _ = replay_recording(
        "BINANCE_FUTURES.ws.1.0",
        "BINANCE_FUTURES.http.0.0",
        Market::Usdm,
    );
}

#[test]
fn coinm_recording_replays_continuously() {
    replay_recording(
        "BINANCE_DELIVERY.ws.1.0",
        "BINANCE_DELIVERY.http.0.0",
        Market::Coinm,
    );
}

fn replay_hftbacktest(file: &str, symbol: &str, market: Market, update_ms: u32) {
    replay_hftbacktest_lingering(file, symbol, market, update_ms, Duration::ZERO);
}

fn replay_hftbacktest_lingering(
    file: &str,
    symbol: &str,
    market: Market,
    update_ms: u32,
    linger: Duration,
) {
    let Some(dir) = recordings() else { return };
    let file = dir.join("hftbacktest").join(file);
    let replay = Replay {
        speed: None,
        update_ms: Some(update_ms),
        linger,
    };
    let _ = replay_files(vec![file], vec![symbol.to_string()], market, replay);
}

#[test]
fn hftbacktest_spot_replays_continuously() {
    replay_hftbacktest("spot_btcusdt_20240808.gz", "btcusdt", Market::Spot, 100);
}

#[test]
fn hftbacktest_usdm_replays_continuously() {
    replay_hftbacktest("usdm_btcusdt_20240808.gz", "btcusdt", Market::Usdm, 0);
}

/// Issue 13, case 10: this test failed now and then with `resyncs == 0` broken. The
/// recording is served as fast as the client reads, then nothing comes; a consumer slowed
/// by a loaded machine took longer than the 3 s silence timeout to see the symbol synced,
/// the quiet connection was rotated as silent, and the symbol resynced. Lingering past
/// the silence timeout makes that certain instead of a matter of load.
#[test]
fn hftbacktest_coinm_replays_continuously() {
    replay_hftbacktest_lingering(
        "cm_btcusd_perp_20240808.gz",
        "btcusd_perp",
        Market::Coinm,
        0,
        Duration::from_secs(4),
    );
}

#[test]
fn binance_us_recording_replays_continuously() {
    let _ = replay_recording("BINANCE_US.ws.1.0", "BINANCE_US.http.0.0", Market::Spot);
}

fn generated(style: BookStyle, faults: FaultConfig) -> BinanceSim {
    let mut cfg = BinanceSimConfig::generated(&["btcusdt", "ethusdt"], style, 200.0);
    cfg.faults = faults;
    BinanceSim::start(cfg).expect("sim")
}

fn all_synced_with(min_deltas: usize) -> impl Fn(&BTreeMap<u16, SymbolLog>, &BinanceSim) -> bool {
    move |logs, _| {
        logs.len() == 2
            && logs
                .values()
                .all(|l| l.synced && l.deltas.len() >= min_deltas)
    }
}

#[test]
fn dropped_event_resyncs_only_its_symbol() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = FaultConfig {
        seed: 3,
        symbols: vec!["BTCUSDT".into()],
        drop: 0.01,
        ..FaultConfig::default()
    };
    let sim = generated(BookStyle::Futures, faults);
    let (logs, result) = run(
        &sim,
        Market::Usdm,
        &["btcusdt", "ethusdt"],
        Some(100),
        |_| {},
        |logs, _| {
            logs.get(&0)
                .is_some_and(|l| l.snapshots.len() >= 3 && l.synced && l.deltas.len() > 20)
        },
        Duration::from_secs(60),
    );
    let session = result.venues[0]
        .binance()
        .expect("a binance venue")
        .session();
    let (btc, eth) = (session.stats(0), session.stats(1));
    assert!(btc.resyncs >= 2, "{btc:?}");
    assert_eq!(eth.resyncs, 0, "the other symbol stays synced: {eth:?}");
    for log in logs.values() {
        assert!(log.broken.is_empty(), "{:?}", log.broken);
    }
    assert!(
        logs[&0].resets >= 2,
        "a reset marker before each new snapshot"
    );
    assert_eq!(logs[&1].snapshots.len(), 1);
}

#[test]
fn duplicates_are_dropped_and_stale_snapshots_refetched() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = FaultConfig {
        seed: 4,
        duplicate: 0.05,
        stale_snapshots: 2,
        ..FaultConfig::default()
    };
    let sim = generated(BookStyle::Spot, faults);
    let (logs, result) = run(
        &sim,
        Market::Spot,
        &["btcusdt", "ethusdt"],
        Some(100),
        |_| {},
        all_synced_with(200),
        Duration::from_secs(60),
    );
    let session = result.venues[0]
        .binance()
        .expect("a binance venue")
        .session();
    for i in 0..2 {
        let s = session.stats(i);
        assert_eq!(s.resyncs, 0, "{s:?}");
        assert!(s.duplicates > 0 || s.dropped_stale > 0, "{s:?}");
    }
    let stale: u64 = (0..2).map(|i| session.stats(i).snapshots_stale).sum();
    assert!(stale >= 1, "a stale snapshot was fetched again");
    for log in logs.values() {
        assert!(log.broken.is_empty(), "{:?}", log.broken);
        assert_eq!(log.snapshots.len(), 1);
    }
}

#[test]
fn rate_limit_backs_off_then_syncs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = FaultConfig {
        seed: 5,
        rate_limited: 2,
        retry_after_secs: 1,
        ..FaultConfig::default()
    };
    let sim = generated(BookStyle::Spot, faults);
    let start = Instant::now();
    let (logs, result) = run(
        &sim,
        Market::Spot,
        &["btcusdt", "ethusdt"],
        Some(100),
        |_| {},
        all_synced_with(10),
        Duration::from_secs(60),
    );
    let session = result.venues[0]
        .binance()
        .expect("a binance venue")
        .session();
    let limited: u64 = (0..2).map(|i| session.stats(i).rate_limited).sum();
    assert!(limited >= 1, "429 seen");
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
    assert!(logs.values().all(|l| l.synced && l.broken.is_empty()));
}

#[test]
fn disconnect_reconnects_and_resyncs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = FaultConfig {
        seed: 6,
        disconnect_after: Some(300),
        fault_connections: 1,
        ..FaultConfig::default()
    };
    let sim = generated(BookStyle::Futures, faults);
    let (logs, result) = run(
        &sim,
        Market::Usdm,
        &["btcusdt", "ethusdt"],
        Some(100),
        |_| {},
        |logs, _| {
            logs.len() == 2
                && logs
                    .values()
                    .all(|l| l.snapshots.len() >= 2 && l.synced && l.deltas.len() > 20)
        },
        Duration::from_secs(60),
    );
    assert!(
        result.venues[0]
            .binance()
            .expect("a binance venue")
            .transport_stats()
            .connects
            >= 2,
        "reconnected"
    );
    for log in logs.values() {
        assert!(log.broken.is_empty(), "{:?}", log.broken);
        assert!(log.snapshots.len() >= 2, "resynced after the reconnect");
    }
}

#[test]
fn silence_is_detected() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = FaultConfig {
        seed: 7,
        silence_after: Some(200),
        silence_for: Some(Duration::from_secs(30)),
        fault_connections: 1,
        ..FaultConfig::default()
    };
    let sim = generated(BookStyle::Spot, faults);
    let (logs, result) = run(
        &sim,
        Market::Spot,
        &["btcusdt", "ethusdt"],
        Some(100),
        |s| s.silence_timeout_ns = 1_000_000_000,
        |logs, _| logs.len() == 2 && logs.values().all(|l| l.snapshots.len() >= 2 && l.synced),
        Duration::from_secs(60),
    );
    let transport = result.venues[0]
        .binance()
        .expect("a binance venue")
        .transport_stats();
    assert!(transport.rotations >= 1, "silence noticed: {transport:?}");
    assert!(logs.values().all(|l| l.broken.is_empty()));
}

#[test]
fn a_binance_only_loop_that_blocks_wakes_at_the_venues_own_deadlines() {
    use crate::time::Mono;
    let spec = BinanceSpec::new(Market::Spot, vec!["btcusdt".to_string()]);
    let venue = BinanceVenue::new("x", spec, "ws://127.0.0.1:9", "http://127.0.0.1:9", None)
        .expect("venue");
    let options = RxOptions {
        idle: IdleStrategy::Block,
        ..RxOptions::default()
    };
    let rx = RxLoop::new(
        vec![venue.into()],
        Fanout::new(Vec::new()),
        options,
        RxShared::default(),
    )
    .expect("poll");
    // The first connection is due at once: the loop must not block for the idle bound.
    assert_eq!(rx.next_deadline(), Some(Mono::ZERO));
    assert_eq!(rx.poll_wait(Mono::ZERO), Some(Duration::ZERO));
    // Later, the idle bound still holds: the wait never exceeds it.
    let later = Mono::ZERO.after_nanos(1_000_000_000);
    assert!(
        rx.poll_wait(later)
            .is_some_and(|d| d <= Duration::from_millis(100))
    );
}

/// Per symbol: what the venue did, summed over the symbols.
fn symbol_totals(result: &RxResult, symbols: usize) -> crate::venue::binance::SymbolStats {
    let session = result.venues[0]
        .binance()
        .expect("a binance venue")
        .session();
    let mut t = crate::venue::binance::SymbolStats::default();
    for i in 0..symbols {
        let s = session.stats(i);
        t.snapshot_requests += s.snapshot_requests;
        t.snapshots_applied += s.snapshots_applied;
        t.resyncs += s.resyncs;
        t.relinked += s.relinked;
        t.relinks_failed += s.relinks_failed;
        t.relinks_expired += s.relinks_expired;
        t.breaks += s.breaks;
    }
    t
}

/// Every symbol has at least `deltas` deltas and the simulator accepted `connections`.
fn delivered_over(
    deltas: usize,
    connections: u64,
) -> impl Fn(&BTreeMap<u16, SymbolLog>, &BinanceSim) -> bool {
    move |logs, sim| {
        sim.stats().connections >= connections
            && logs.len() == 2
            && logs.values().all(|l| l.synced && l.deltas.len() >= deltas)
    }
}

fn generated_with(style: BookStyle, faults: FaultConfig, overlap: u64) -> BinanceSim {
    let mut cfg = BinanceSimConfig::generated(&["btcusdt", "ethusdt"], style, 200.0);
    cfg.faults = faults;
    cfg.reconnect_overlap = overlap;
    BinanceSim::start(cfg).expect("sim")
}

#[test]
fn a_dropped_connection_that_links_costs_no_snapshot_and_no_reset() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = FaultConfig {
        seed: 11,
        disconnect_after: Some(300),
        fault_connections: 1,
        ..FaultConfig::default()
    };
    // The next connection begins 600 records (1.5 s at 400 records a second) back.
    let sim = generated_with(BookStyle::Spot, faults, 600);
    let (logs, result) = run(
        &sim,
        Market::Spot,
        &["btcusdt", "ethusdt"],
        Some(100),
        |_| {},
        delivered_over(400, 2),
        Duration::from_secs(60),
    );
    let stats = sim.stats();
    let injected = sim.injected();
    assert_eq!(
        injected.count(|k| matches!(k, InjectionKind::Disconnected { .. })),
        1
    );
    assert_eq!(stats.connections, 2, "{stats:?}");
    assert_eq!(
        stats.snapshots_served, 2,
        "one snapshot a symbol, none after the drop"
    );
    let t = symbol_totals(&result, 2);
    assert_eq!(
        (t.relinked, t.resyncs, t.snapshots_applied),
        (2, 0, 2),
        "{t:?}"
    );
    for log in logs.values() {
        assert!(log.broken.is_empty(), "{:?}", log.broken);
        assert_eq!((log.snapshots.len(), log.resets), (1, 0));
        assert!(log.deltas.len() >= 400);
    }
}

#[test]
fn an_event_lost_between_connections_resyncs_only_its_symbol() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = FaultConfig {
        seed: 12,
        disconnect_after: Some(300),
        fault_connections: 1,
        lose_on_reconnect: vec!["ETHUSDT".into()],
        ..FaultConfig::default()
    };
    let sim = generated_with(BookStyle::Futures, faults, 600);
    let (logs, result) = run(
        &sim,
        Market::Usdm,
        &["btcusdt", "ethusdt"],
        Some(100),
        |_| {},
        |logs, sim| {
            delivered_over(400, 2)(logs, sim)
                && logs.get(&1).is_some_and(|l| l.snapshots.len() >= 2)
        },
        Duration::from_secs(60),
    );
    let lost = sim
        .injected()
        .count(|k| matches!(k, InjectionKind::LostOnReconnect { .. }));
    assert!(lost > 0, "the simulator withheld ethusdt's backlog");
    let session = result.venues[0]
        .binance()
        .expect("a binance venue")
        .session();
    let (btc, eth) = (session.stats(0), session.stats(1));
    assert_eq!(
        (btc.relinked, btc.resyncs, btc.snapshots_applied),
        (1, 0, 1),
        "{btc:?}"
    );
    assert_eq!((eth.relinks_failed, eth.resyncs), (1, 1), "{eth:?}");
    assert_eq!(eth.snapshots_applied, 2);
    assert_eq!(sim.stats().snapshots_served, 3);
    assert_eq!((logs[&0].snapshots.len(), logs[&0].resets), (1, 0));
    assert_eq!((logs[&1].snapshots.len(), logs[&1].resets), (2, 1));
    for log in logs.values() {
        assert!(log.broken.is_empty(), "{:?}", log.broken);
    }
}

#[test]
fn a_rotation_for_age_overlaps_and_costs_no_snapshot() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Every connection begins live, as Binance's do.
    let sim = generated_with(BookStyle::Futures, FaultConfig::default(), 0);
    let (logs, result) = run(
        &sim,
        Market::Usdm,
        &["btcusdt", "ethusdt"],
        Some(100),
        |s| s.ws_max_age_ns = 2_000_000_000,
        // Six connections seen by the simulator, though the venue needs four for three
        // rotations: a venue of another test in this process, still retrying, can reach
        // this simulator when its port was that test's simulator's before (seen on a
        // loaded machine: the run ended with the venue's own count one or three short).
        delivered_over(200, 6),
        Duration::from_secs(60),
    );
    let transport = result.venues[0]
        .binance()
        .expect("a binance venue")
        .transport_stats();
    let session = result.venues[0].binance().expect("binance").session();
    let per: Vec<_> = (0..2).map(|i| session.stats(i)).collect();
    assert!(transport.overlapped_rotations >= 3, "{transport:?} {per:?}");
    // The latest rotation may still be under way when the run stops.
    assert!(
        transport.rotations_linked + 1 >= transport.overlapped_rotations,
        "{transport:?}"
    );
    assert!(transport.rotations_linked >= 2, "{transport:?}");
    assert_eq!(transport.rotations_timed_out, 0, "{transport:?}");
    assert_eq!(sim.stats().snapshots_served, 2);
    let t = symbol_totals(&result, 2);
    assert_eq!(
        (t.resyncs, t.snapshots_applied, t.breaks),
        (0, 2, 0),
        "{t:?}"
    );
    for log in logs.values() {
        assert!(log.broken.is_empty(), "{:?}", log.broken);
        assert_eq!((log.snapshots.len(), log.resets), (1, 0));
    }
}

#[test]
fn two_connections_ride_out_independent_drops() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Connection i drops after 300 + 250 i events: the two first ones, and their
    // replacements, each at its own time.
    let faults = FaultConfig {
        seed: 13,
        disconnect_after: Some(300),
        disconnect_stagger: 250,
        fault_connections: 4,
        ..FaultConfig::default()
    };
    let sim = generated_with(BookStyle::Spot, faults, 0);
    let (logs, result) = run(
        &sim,
        Market::Spot,
        &["btcusdt", "ethusdt"],
        Some(100),
        |s| s.connections = 2,
        |logs, sim| {
            delivered_over(300, 5)(logs, sim)
                && sim
                    .injected()
                    .count(|k| matches!(k, InjectionKind::Disconnected { .. }))
                    >= 4
        },
        Duration::from_secs(60),
    );
    let drops = sim
        .injected()
        .count(|k| matches!(k, InjectionKind::Disconnected { .. }));
    assert!(drops >= 4, "{drops}");
    assert_eq!(sim.stats().snapshots_served, 2);
    let t = symbol_totals(&result, 2);
    assert_eq!(
        (t.resyncs, t.snapshots_applied, t.breaks),
        (0, 2, 0),
        "{t:?}"
    );
    for log in logs.values() {
        assert!(log.broken.is_empty(), "{:?}", log.broken);
        assert_eq!((log.snapshots.len(), log.resets), (1, 0));
    }
}

#[test]
fn symbols_split_across_connections_each_sync_on_their_own_connection() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let symbols = ["btcusdt", "ethusdt", "bnbusdt", "solusdt", "xrpusdt"];
    let cfg = BinanceSimConfig::generated(&symbols, BookStyle::Spot, 100.0);
    let sim = BinanceSim::start(cfg).expect("sim");
    let (logs, result) = run(
        &sim,
        Market::Spot,
        &symbols,
        Some(100),
        // Two streams a connection: three connections carry the five symbols.
        |s| s.max_streams_per_connection = 2,
        |logs, _| logs.len() == 5 && logs.values().all(|l| l.synced && l.deltas.len() >= 50),
        Duration::from_secs(60),
    );
    assert_eq!(logs.len(), 5, "every symbol delivered");
    for log in logs.values() {
        assert!(log.synced && log.broken.is_empty(), "{:?}", log.broken);
        assert_eq!((log.snapshots.len(), log.resets), (1, 0));
    }
    assert_eq!(sim.stats().connections, 3, "{:?}", sim.stats());
    let venue = result.venues[0].binance().expect("a binance venue");
    assert_eq!(venue.urls().len(), 3);
    assert_eq!(venue.open_connections(), 3);
}
