//! The daemon as operators run it: `gapless run --config` against the MoldUDP64
//! simulator on loopback, readiness over `$NOTIFY_SOCKET`, `/metrics` scraped over HTTP,
//! `gapless tail` on the unix sink, SIGTERM leaving complete JSON lines, and the systemd
//! unit verified where `systemd-analyze` exists.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gapless::sim::{FaultConfig, MoldSim, MoldSimConfig};

use crate::{free_port, temp_dir};

const BIN: &str = env!("CARGO_BIN_EXE_gapless");

fn config_text(group: SocketAddrV4, sim: &MoldSim, dir: &Path, metrics: u16) -> String {
    format!(
        r#"
[daemon]
metrics_listen = "127.0.0.1:{metrics}"
idle = "yield"
log_level = "info"

[[venue]]
name = "sim"
kind = "moldudp64"
start = "from-start"

  [[venue.channel]]
  name = "a"
  group = "{group}"
  interface = "127.0.0.1"
  rerequest = ["{rerequest}"]
  snapshot = {{ kind = "soupbintcp", addr = "{snapshot}", username = "sim", password = "sim" }}
  rcvbuf = 4194304

  [venue.recovery]
  reorder_window = 65536
  reorder_delay_us = 2000

[[sink]]
kind = "jsonl"
path = "{jsonl}"

[[sink]]
kind = "unix"
path = "{sock}"
client_queue = 65536
"#,
        rerequest = sim.rerequest_addr(),
        snapshot = sim.snapshot_addr(),
        jsonl = dir.join("out.jsonl").display(),
        sock = dir.join("out.sock").display(),
    )
}

/// Starts `gapless run` and waits for READY=1 on a notify socket of our own.
fn start_daemon(config: &Path, dir: &Path) -> Child {
    crate::start_daemon_with(config, dir, Stdio::inherit(), None)
}

pub(crate) fn http_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

fn sigterm(child: &mut Child) -> std::process::ExitStatus {
    crate::sigterm_within(child, Duration::from_secs(20))
}

#[test]
fn run_serves_metrics_tail_and_stops_cleanly_on_sigterm() {
    let dir = temp_dir("run");
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 64, 1), 46401);
    let mut cfg = MoldSimConfig::new(group);
    cfg.count = 60_000;
    cfg.rate = Some(20_000.0);
    cfg.start_delay = Duration::from_millis(500);
    cfg.heartbeat_interval = Some(Duration::from_millis(100));
    cfg.faults = FaultConfig {
        seed: 1,
        loss: 0.01,
        ..FaultConfig::default()
    };
    let mut sim = MoldSim::start(cfg).unwrap();
    let metrics = free_port();
    let config = dir.join("gapless.toml");
    std::fs::write(&config, config_text(group, &sim, &dir, metrics)).unwrap();
    let check = Command::new(BIN)
        .arg("check-config")
        .arg(&config)
        .status()
        .unwrap();
    assert!(check.success());

    let mut daemon = start_daemon(&config, &dir);

    // `tail` receives what the unix sink publishes.
    let tail = Command::new(BIN)
        .arg("tail")
        .arg(dir.join("out.sock"))
        .args(["--limit", "1000"])
        .output()
        .unwrap();
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let lines = String::from_utf8(tail.stdout).unwrap();
    assert_eq!(lines.lines().count(), 1000);
    for line in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["venue"], "sim");
        assert_eq!(v["stream"], "a");
    }

    // The Python client in the repository reads the same socket, stdlib only.
    python_client_reads(&dir.join("out.sock"));

    sim.wait(Duration::from_secs(30)).unwrap();
    // The scrape, over HTTP, while running.
    let body = http_get(metrics, "/metrics");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    for series in [
        "gapless_messages_received_total{",
        "gapless_frames_delivered_total{",
        "gapless_gaps_detected_total{",
        "gapless_messages_missing{",
        "gapless_rerequests_sent_total{",
        "gapless_messages_recovered_total{",
        "gapless_trading_authorized{",
        "gapless_stream_state{",
        "gapless_handoff_latency_seconds_bucket{",
        "gapless_consumer_queue_depth_bytes{",
        "gapless_rx_cycle_seconds_bucket{",
    ] {
        assert!(body.contains(series), "missing {series}");
    }
    assert!(http_get(metrics, "/healthz").starts_with("HTTP/1.1 200"));

    let status = sigterm(&mut daemon);
    assert!(status.success(), "exit status {status:?}");
    drop(sim);

    // Complete JSON lines: every line parses, messages in order, no gap in between.
    let text = std::fs::read_to_string(dir.join("out.jsonl")).unwrap();
    assert!(text.ends_with('\n'));
    let mut next = 1u64;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a complete JSON line");
        if let Some(seq) = v["seq"].as_u64() {
            assert_eq!(seq, next, "in order, once each");
            next += 1;
        }
    }
    assert_eq!(next - 1, 60_000, "every published message");
    assert!(
        !dir.join("out.sock").exists(),
        "the socket file is removed on stop"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `clients/python/gapless_client.py` on the socket: 500 messages of stream `a` of venue
/// `sim`, in order with no gap, each as `gapless tail` prints it.
fn python_client_reads(socket: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python/gapless_client.py");
    let out = match Command::new("python3")
        .arg(&script)
        .arg(socket)
        .args(["--limit", "500", "--timeout", "20"])
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipping the Python client: python3 cannot run ({e})");
            return;
        }
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 500, "{text}");
    let mut last = None;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["venue"], "sim");
        assert_eq!(v["stream"], "a");
        if let Some(seq) = v["seq"].as_u64() {
            assert!(
                v["payload"].as_str().is_some_and(|p| !p.is_empty()),
                "{line}"
            );
            if let Some(prev) = last {
                assert_eq!(seq, prev + 1, "in order, no gap: {line}");
            }
            last = Some(seq);
        }
    }
    assert!(last.is_some(), "messages among the events: {text}");
}

#[test]
fn check_config_reports_errors_with_exit_code_2() {
    let dir = temp_dir("check");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[daemon]\nidle = \"sometimes\"\nlog_levle = \"info\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // Both mistakes, each with its line and a caret; the file has no venue either.
    assert!(err.contains("bad.toml:2:8\n"), "{err}");
    assert!(err.contains("2 | idle = \"sometimes\"\n"), "{err}");
    assert!(
        err.contains("  |        ^^^^^^^^^^^ expected one of"),
        "{err}"
    );
    assert!(err.contains("bad.toml:3:1\n"), "{err}");
    assert!(err.contains("help: did you mean `log_level`?"), "{err}");
    assert!(err.ends_with("bad.toml: 3 errors\n"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn systemd_unit_verifies() {
    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipping: systemd-analyze not found");
        return;
    };
    if !out.status.success() {
        eprintln!("skipping: systemd-analyze does not run here");
        return;
    }
    let dir = temp_dir("unit");
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd/gapless@.service"),
    )
    .unwrap();
    // Point the unit at the binary under test; an instance name makes it concrete.
    std::fs::write(
        dir.join("gapless@.service"),
        unit.replace("/usr/bin/gapless", BIN),
    )
    .unwrap();
    std::fs::write(
        dir.join("gapless@demo.service"),
        unit.replace("/usr/bin/gapless", BIN),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("gapless@demo.service"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The hardening, as systemd scores it (3.3 before it was tightened; 1.5 now).
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(dir.join("gapless@demo.service"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let report = String::from_utf8_lossy(&security.stdout);
    match report
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for "))
        .and_then(|(_, rest)| rest.split_once(": "))
        .and_then(|(_, score)| score.split_whitespace().next()?.parse::<f64>().ok())
    {
        Some(score) => assert!(score <= 2.0, "exposure {score}:\n{report}"),
        None => eprintln!("skipping the security score: this systemd-analyze has no --offline"),
    }
}

#[test]
fn an_invalid_config_exits_2_which_the_unit_does_not_restart() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd/gapless@.service"),
    )
    .unwrap();
    assert!(unit.lines().any(|l| l == "RestartPreventExitStatus=2"));
    let dir = temp_dir("exit2");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[daemon]\nidle = \"sometimes\"\n").unwrap();
    for config in [bad, dir.join("absent.toml")] {
        let out = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", config.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_with_the_demo_config_delivers_both_venues() {
    use gapless::sim::binance::{BinanceSim, BinanceSimConfig, BookStyle};
    let dir = temp_dir("demo-config");
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 0, 1), 31001);
    let mut cfg = MoldSimConfig::new(group);
    cfg.count = 20_000;
    cfg.rate = Some(20_000.0);
    cfg.start_delay = Duration::from_millis(800);
    cfg.rerequest_port = 31002;
    cfg.snapshot_port = 31003;
    cfg.username = "demo".into();
    cfg.password = "demo".into();
    cfg.faults = FaultConfig {
        seed: 2,
        loss: 0.01,
        ..FaultConfig::default()
    };
    let mut mold = MoldSim::start(cfg).unwrap();
    let mut bcfg = BinanceSimConfig::generated(&["btcusdt", "ethusdt"], BookStyle::Spot, 50.0);
    bcfg.ws_port = 31010;
    bcfg.http_port = 31011;
    let binance = BinanceSim::start(bcfg).unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.toml");

    let mut daemon = crate::start_daemon_with(&config, &dir, Stdio::inherit(), Some(&dir));
    mold.wait(Duration::from_secs(30)).unwrap();
    let body = http_get(9464, "/metrics");
    for venue in ["demo-mold", "demo-binance"] {
        assert!(
            body.contains(&format!(
                "gapless_frames_delivered_total{{venue=\"{venue}\""
            )),
            "no series for {venue}"
        );
    }
    let status = sigterm(&mut daemon);
    assert!(status.success());
    drop(binance);
    drop(mold);
    let text = std::fs::read_to_string(dir.join("target/demo/demo.jsonl")).unwrap();
    let (mut mold_messages, mut binance_frames) = (0, 0);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("complete JSON line");
        if v["venue"] == "demo-mold" && v["seq"].is_u64() {
            mold_messages += 1;
        }
        if v["venue"] == "demo-binance" && v["first"].is_u64() {
            binance_frames += 1;
        }
    }
    assert_eq!(mold_messages, 20_000);
    assert!(binance_frames > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 13, case 7: with no venue running, refused WebSocket connections are logged with
/// their reason, `debug` says what the venue is doing, and the venue's counters are on
/// `/metrics`.
#[test]
fn refused_binance_connections_are_logged_and_exported() {
    let dir = temp_dir("refused");
    let (metrics, ws, rest) = (free_port(), free_port(), free_port());
    let config = dir.join("refused.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[daemon]
metrics_listen = "127.0.0.1:{metrics}"
idle = "block"
log_level = "debug"

[[venue]]
name = "bin"
kind = "binance"
market = "spot"
ws_url = "ws://127.0.0.1:{ws}"
rest_url = "http://127.0.0.1:{rest}"
symbols = ["btcusdt"]
"#
        ),
    )
    .unwrap();
    let mut daemon = crate::start_daemon_with(&config, &dir, Stdio::piped(), None);
    // Attempts at about 0, 0.2, 0.6 and 1.4 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    while Instant::now() < deadline {
        text = http_get(metrics, "/metrics");
        let errors = text
            .lines()
            .find_map(|l| l.strip_prefix("gapless_venue_tcp_errors_total{venue=\"bin\"} "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if errors >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = sigterm(&mut daemon);
    let mut stderr = String::new();
    daemon
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    eprintln!("{stderr}");
    assert!(status.success(), "{status}");
    assert!(
        text.contains("gapless_venue_connect_errors_total{venue=\"bin\"}"),
        "{text}"
    );
    let refused = stderr
        .lines()
        .filter(|l| l.contains("connect failed") && l.contains("refused"))
        .count();
    assert!(refused >= 1, "a reason for the refused connection");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(" debug: ") && l.contains("connecting to 127.0.0.1")),
        "debug says what the venue is doing"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
