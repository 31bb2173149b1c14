//! The demo: simulated venues on loopback, with loss, and the handler against them, from
//! the embedded `config/demo.toml`.

use std::net::SocketAddrV4;
use std::time::Duration;

use super::run::{DaemonError, RunSummary};
use super::service::{ServiceOptions, run_service};
use crate::config::{Config, ConfigErrors, Snapshot, VenueKind};
use crate::sim::{FaultConfig, MoldSim, MoldSimConfig, SimError};

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
            let group = channel.group.addr();
            let mut cfg = MoldSimConfig::new(group);
            cfg.count = (rate * duration.as_secs_f64()) as u64;
            cfg.rate = Some(rate);
            cfg.heartbeat_interval = Some(Duration::from_millis(250));
            cfg.start_delay = Duration::from_millis(300);
            cfg.faults = FaultConfig {
                seed: 42 + i as u64,
                loss: 0.01,
                burst_len: 20,
                burst_every: 5_000,
                reorder: 0.005,
                duplicate: 0.005,
                ..FaultConfig::default()
            };
            if let Some(server) = channel.rerequest.first() {
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

/// Runs the demo for `duration`: simulators, the handler with status lines, a summary.
/// Venue kinds without a simulator here are left out, with a note.
pub fn run_demo(duration: Duration) -> Result<RunSummary, DemoError> {
    let mut config = demo_config()?;
    config.venues.retain(|v| {
        let keep = !matches!(v.kind, VenueKind::Binance { .. });
        if !keep {
            eprintln!(
                "note: venue {} (binance) is left out of this demo run",
                v.name.as_str()
            );
        }
        keep
    });
    let groups: Vec<SocketAddrV4> = config
        .venues
        .iter()
        .filter_map(|v| match &v.kind {
            VenueKind::MoldUdp64 { channels, .. } => Some(channels.iter().map(|c| c.group.addr())),
            _ => None,
        })
        .flatten()
        .collect();
    eprintln!(
        "demo: MoldUDP64 simulator on {groups:?} with 1% loss, bursts, reordering and duplicates; \
         the handler recovers by re-request and snapshot. Ctrl-C stops early."
    );
    let sims = start_mold_simulators(&config, 50_000.0, duration)?;
    let options = ServiceOptions {
        status_every: Some(Duration::from_secs(1)),
        duration: Some(duration + Duration::from_secs(2)),
    };
    let summary = run_service(config, &options);
    for sim in sims {
        let _ = sim.stop();
    }
    Ok(summary?)
}
