//! Every file in `config/` loads and validates; new files are picked up automatically.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use gapless::config::{Config, Daemon, Recovery, Snapshot, Venue, VenueKind};

/// The example files, sorted by name.
fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("config/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

fn load(path: &PathBuf) -> Config {
    Config::load(path).unwrap_or_else(|errors| panic!("{} is invalid:\n{errors}", path.display()))
}

/// Every host a venue connects to or joins on, as written (groups excluded).
fn venue_hosts(venue: &Venue) -> Vec<String> {
    let mut hosts = Vec::new();
    match &venue.kind {
        VenueKind::MoldUdp64 { channels, .. } => {
            for channel in channels {
                for line in &channel.lines {
                    hosts.push(line.interface.to_string());
                    hosts.extend(line.source.map(|ip| ip.to_string()));
                }
                hosts.extend(
                    channel
                        .rerequest
                        .iter()
                        .filter_map(|r| r.server())
                        .map(|a| a.ip().to_string()),
                );
                if let Some(Snapshot::SoupBinTcp { addr, .. }) = &channel.snapshot {
                    hosts.push(addr.ip().to_string());
                }
            }
        }
        VenueKind::IexTp { channels, .. } => {
            for channel in channels {
                for line in &channel.lines {
                    hosts.push(line.interface.to_string());
                    hosts.extend(line.source.map(|ip| ip.to_string()));
                }
                hosts.extend(
                    channel
                        .rerequest
                        .iter()
                        .filter_map(|r| r.server())
                        .map(|a| a.ip().to_string()),
                );
            }
        }
        VenueKind::Binance {
            ws_url, rest_url, ..
        } => {
            hosts.push(ws_url.host().to_owned());
            hosts.push(rest_url.host().to_owned());
        }
    }
    hosts
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[test]
fn every_example_file_loads_and_validates() {
    let files = examples();
    assert!(
        files.len() >= 5,
        "expected at least 5 examples, found {files:?}"
    );
    for path in &files {
        let config = load(path);
        assert!(!config.venues.is_empty(), "{}", path.display());
    }
}

#[test]
fn examples_cover_every_venue_kind() {
    let configs: Vec<Config> = examples().iter().map(load).collect();
    let kinds = configs
        .iter()
        .flat_map(|c| &c.venues)
        .map(|v| match v.kind {
            VenueKind::MoldUdp64 { .. } => "moldudp64",
            VenueKind::IexTp { .. } => "iex-tp",
            VenueKind::Binance { .. } => "binance",
        });
    let kinds: Vec<&str> = kinds.collect();
    for kind in ["moldudp64", "iex-tp", "binance"] {
        assert!(kinds.contains(&kind), "no example of {kind}");
    }
}

#[test]
fn production_examples_use_no_loopback_venue_address() {
    for path in examples().iter().filter(|p| !p.ends_with("demo.toml")) {
        for venue in &load(path).venues {
            for host in venue_hosts(venue) {
                assert!(
                    !is_loopback(&host),
                    "{}: {} uses {host}",
                    path.display(),
                    venue.name
                );
            }
        }
    }
}

#[test]
fn demo_points_at_this_machine_only() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/demo.toml");
    let config = load(&path);
    assert!(config.daemon.metrics_listen.ip().is_loopback());
    for venue in &config.venues {
        for host in venue_hosts(venue) {
            assert!(is_loopback(&host), "demo venue {} uses {host}", venue.name);
        }
        if let VenueKind::MoldUdp64 { channels, .. } = &venue.kind {
            for line in channels.iter().flat_map(|c| &c.lines) {
                let group = *line.group.addr().ip();
                let admin_scoped = group.octets()[0] == 239 && group.octets()[1] == 255;
                assert!(admin_scoped, "demo group {group} is not site-local");
            }
        }
    }
    for sink in &config.sinks {
        if let Some(path) = sink.path() {
            assert!(path.is_relative(), "{}", path.display());
        }
    }
}

#[test]
fn left_out_keys_take_their_defaults() {
    let text = r#"
[[venue]]
name = "mold"
kind = "moldudp64"

  [[venue.channel]]
  name = "a"
  group = "233.54.12.111:26477"
"#;
    let config = Config::parse(text, "minimal.toml").expect("a minimal file is valid");
    assert_eq!(config.daemon, Daemon::default());
    assert!(config.sinks.is_empty());
    let VenueKind::MoldUdp64 {
        channels, recovery, ..
    } = &config.venues[0].kind
    else {
        panic!("expected a moldudp64 venue");
    };
    assert_eq!(*recovery, Recovery::default());
    assert_eq!(channels[0].lines.len(), 1);
    assert_eq!(channels[0].lines[0].interface, Ipv4Addr::UNSPECIFIED);
    assert_eq!(channels[0].rcvbuf, 64 << 20);
    assert!(channels[0].rerequest.is_empty() && channels[0].snapshot.is_none());
}
