//! The demo: simulated venues on loopback, with loss, and the handler against them, from
//! the embedded `config/demo.toml`.

use std::net::SocketAddrV4;
use std::time::Duration;

use super::run::{DaemonError, RunSummary};
use super::service::{ServiceOptions, run_service};
use crate::config::{Config, ConfigErrors, Snapshot, VenueKind};
use crate::sim::binance::{BinanceSim, BinanceSimConfig, BookStyle, FaultConfig as BinanceFaults};
use crate::sim::{FaultConfig, LineFaults, MoldSim, MoldSimConfig, SimError, SimLine};

/// The demo configuration, built into the binary.
pub const DEMO_TOML: &str = include_str!("../../config/demo.toml");

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The embedded configuration did not validate.
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    /// A simulator could not start.
    #[error("simulator: {0}")]
    Sim(#[from] SimError),
    /// The handler failed.
    #[error("{0}")]
    Daemon(#[from] DaemonError),
    /// The Binance simulator could not start.
    #[error("binance simulator: {0}")]
    Binance(String),
}

/// The parsed demo configuration.
pub fn demo_config() -> Result<Config, ConfigErrors> {
    Config::parse(DEMO_TOML, "config/demo.toml")
}

/// Starts a MoldUDP64 simulator for every MoldUDP64 channel of `config` (random loss,
/// bursts, reordering and duplicates; its re-request and snapshot servers on the ports
/// the channel names), publishing `rate` messages a second for `duration`.
pub fn start_mold_simulators(
    config: &Config,
    rate: f64,
    duration: Duration,
) -> Result<Vec<MoldSim>, SimError> {
    let mut sims = Vec::new();
    for venue in &config.venues {
        let VenueKind::MoldUdp64 { channels, .. } = &venue.kind else {
            continue;
        };
        for (i, channel) in channels.iter().enumerate() {
            let Some((first, more)) = channel.lines.split_first() else {
                continue;
            };
            let mut cfg = MoldSimConfig::new(first.group.addr());
            // Each line loses 1 % and bursts on its own; the second runs 300 µs behind.
            let line = |n: u64| LineFaults {
                seed: 100 + 10 * i as u64 + n,
                loss: 0.01,
                burst_len: 20,
                burst_every: 5_000,
                delay: Duration::from_micros(300 * n.min(1)),
                ..LineFaults::default()
            };
            cfg.line_faults = line(0);
            cfg.more_lines = more
                .iter()
                .zip(1..)
                .map(|(l, n)| SimLine {
                    group: l.group.addr(),
                    faults: line(n),
                })
                .collect();
            cfg.count = (rate * duration.as_secs_f64()) as u64;
            cfg.rate = Some(rate);
            cfg.heartbeat_interval = Some(Duration::from_millis(250));
            cfg.start_delay = Duration::from_millis(300);
            // At the source, on every line: what no line carries is re-requested.
            cfg.faults = FaultConfig {
                seed: 42 + i as u64,
                loss: if more.is_empty() { 0.01 } else { 0.002 },
                burst_len: 20,
                burst_every: if more.is_empty() { 5_000 } else { 50_000 },
                reorder: 0.005,
                duplicate: 0.005,
                ..FaultConfig::default()
            };
            if let Some(server) = channel.rerequest.iter().find_map(|r| r.server()) {
                cfg.rerequest_port = server.port();
            }
            if let Some(Snapshot::SoupBinTcp { addr, login }) = &channel.snapshot {
                cfg.snapshot_port = addr.port();
                cfg.username = login.username().to_string();
                cfg.password = login.password().to_string();
            }
            sims.push(MoldSim::start(cfg)?);
        }
    }
    Ok(sims)
}

/// Starts a Binance simulator (generated books for the venue's symbols, now and then a
/// dropped event) on the ports of every Binance venue of `config`.
pub fn start_binance_simulators(config: &Config) -> Result<Vec<BinanceSim>, DemoError> {
    let mut sims = Vec::new();
    for venue in &config.venues {
        let VenueKind::Binance {
            market,
            ws_url,
            rest_url,
            symbols,
            ..
        } = &venue.kind
        else {
            continue;
        };
        let names: Vec<&str> = symbols.iter().map(|s| s.as_str()).collect();
        let style = if market.is_futures() {
            BookStyle::Futures
        } else {
            BookStyle::Spot
        };
        let mut cfg = BinanceSimConfig::generated(&names, style, 20.0);
        cfg.ws_port = port_of(ws_url.as_str());
        cfg.http_port = port_of(rest_url.as_str());
        cfg.wait_for_client = false;
        cfg.faults = BinanceFaults {
            seed: 7,
            drop: 0.03,
            symbols: names
                .iter()
                .take(1)
                .map(|s| s.to_ascii_uppercase())
                .collect(),
            ..BinanceFaults::default()
        };
        sims.push(BinanceSim::start(cfg).map_err(|e| DemoError::Binance(e.to_string()))?);
    }
    Ok(sims)
}

/// The port of a loopback URL such as `ws://127.0.0.1:31010/stream` (0 when absent).
fn port_of(url: &str) -> u16 {
    url.split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|authority| authority.rsplit(':').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or(0)
}

/// Runs the demo for `duration`: simulators, the handler with status lines, a summary.
pub fn run_demo(duration: Duration) -> Result<RunSummary, DemoError> {
    let config = demo_config()?;
    let groups: Vec<SocketAddrV4> = config
        .venues
        .iter()
        .filter_map(|v| match &v.kind {
            VenueKind::MoldUdp64 { channels, .. } => Some(
                channels
                    .iter()
                    .flat_map(|c| c.lines.iter().map(|l| l.group.addr())),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    eprintln!(
        "demo: MoldUDP64 simulator on lines {groups:?}, each losing 1% with bursts on its \
         own, and 0.2% lost on both, reordered or duplicated at the source; the handler \
         takes the first copy of each message and recovers what both lines lost by \
         re-request and snapshot. Ctrl-C stops early."
    );
    eprintln!(
        "demo: Binance simulator with generated books; now and then it drops an event of the \
         first symbol, which resyncs that symbol alone from a new snapshot."
    );
    let sims = start_mold_simulators(&config, 50_000.0, duration)?;
    let binance = start_binance_simulators(&config)?;
    let mold_venues = config
        .venues
        .iter()
        .filter(|v| matches!(v.kind, VenueKind::MoldUdp64 { .. }))
        .map(|v| v.name.as_str().to_string())
        .collect();
    let options = ServiceOptions {
        status_every: Some(Duration::from_secs(1)),
        // The MoldUDP64 simulator publishes for `duration`, then ends its session: the
        // summary waits (15 s at most) for the handler to have recovered and delivered
        // everything up to the end.
        duration: Some(duration),
        until_closed: Some((mold_venues, Duration::from_secs(15))),
    };
    let summary = run_service(config, &options);
    for sim in sims {
        let _ = sim.stop();
    }
    for sim in binance {
        let _ = sim.stop();
    }
    Ok(summary?)
}
