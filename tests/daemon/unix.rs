//! The unix-socket sink's resume requests across processes: `gapless tail SOCKET --from`
//! against `gapless run` and the MoldUDP64 simulator with loss and recovery. A reader that
//! stops halfway and starts again with the cursor it printed carries on with nothing twice
//! and nothing missing; the Python client (`clients/python/gapless_client.py --from`) takes
//! its turn in the middle of the chain, with the same cursors.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gapless::sim::{FaultConfig, MoldSim, MoldSimConfig};

use crate::{free_port, temp_dir};

const BIN: &str = env!("CARGO_BIN_EXE_gapless");
const MESSAGES: u64 = 30_000;

/// The `"seq"` of a message line; `None` for other lines.
fn seq_of(line: &str) -> Option<u64> {
    let rest = line.split_once("\"seq\":")?.1;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn a_tail_stopped_halfway_carries_on_from_its_printed_cursor_with_nothing_twice() {
    let dir = temp_dir("unix-resume");
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 64, 31), 46431);
    let mut cfg = MoldSimConfig::new(group);
    cfg.count = MESSAGES;
    cfg.rate = Some(20_000.0);
    cfg.start_delay = Duration::from_millis(1500);
    cfg.heartbeat_interval = Some(Duration::from_millis(100));
    cfg.faults = FaultConfig {
        seed: 31,
        loss: 0.005,
        ..FaultConfig::default()
    };
    let mut sim = MoldSim::start(cfg).unwrap();
    let socket = dir.join("feed.sock");
    let config = dir.join("gapless.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[daemon]
metrics_listen = "127.0.0.1:{metrics}"
idle = "yield"
log_level = "warn"

[[venue]]
name = "sim"
kind = "moldudp64"
start = "from-start"

  [[venue.channel]]
  name = "a"
  group = "{group}"
  interface = "127.0.0.1"
  rerequest = ["{rerequest}"]
  rcvbuf = 8388608

[[sink]]
kind = "unix"
path = "{socket}"
history_bytes = 16777216
"#,
            metrics = free_port(),
            rerequest = sim.rerequest_addr(),
            socket = socket.display(),
        ),
    )
    .unwrap();
    let mut daemon = crate::start_daemon_with(&config, &dir, Stdio::inherit(), None);

    // The first reader takes 10,000 events (the epoch and state events among them) and
    // stops; it prints the cursor to carry on from.
    let first = Command::new(BIN)
        .arg("tail")
        .arg(&socket)
        .args(["--from", "sim/a=SIM0000001:1", "--limit", "10000"])
        .output()
        .unwrap();
    assert!(first.status.success(), "{first:?}");
    let lines = String::from_utf8(first.stdout).unwrap();
    assert!(
        !lines.contains("\"overrun\""),
        "the cursor's epoch is known"
    );
    let mut seen: Vec<u64> = lines.lines().filter_map(seq_of).collect();
    assert!(
        lines
            .lines()
            .filter(|l| seq_of(l).is_some())
            .all(|l| l.contains("\"epoch\":\"SIM0000001\"")),
        "every message line carries its epoch's label"
    );
    let stderr = String::from_utf8(first.stderr).unwrap();
    let carry_on = stderr
        .lines()
        .find_map(|l| l.strip_prefix("gapless tail: to carry on: "))
        .unwrap_or_else(|| panic!("no cursor printed: {stderr}"));
    let cursor = carry_on.strip_prefix("--from ").unwrap().to_string();
    assert_eq!(
        cursor,
        format!("0=SIM0000001:{}", seen.last().unwrap() + 1),
        "the cursor follows the last message"
    );

    // The Python client carries on from that cursor for 5,000 events, and prints its own.
    let cursor = python_carries_on(&socket, &cursor, &mut seen).unwrap_or(cursor);

    // The feed goes on while nobody reads; the second reader starts from the cursor.
    let mut second = Command::new(BIN)
        .arg("tail")
        .arg(&socket)
        .args(["--from", &cursor])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(second.stdout.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(90);
    for line in out.lines() {
        let line = line.unwrap();
        assert!(
            !line.contains("\"overrun\""),
            "the history held it all: {line}"
        );
        if let Some(seq) = seq_of(&line) {
            seen.push(seq);
            if seq == MESSAGES {
                break;
            }
        }
        assert!(Instant::now() < deadline, "message {MESSAGES} within 90 s");
    }
    second.kill().unwrap();
    second.wait().unwrap();
    sim.wait(Duration::from_secs(60)).unwrap();
    crate::sigterm_within(&mut daemon, Duration::from_secs(20));
    assert_eq!(
        seen,
        (1..=MESSAGES).collect::<Vec<_>>(),
        "1..={MESSAGES} once each, in order, across the two readers"
    );
    // Removing the directory is tidiness: a leftover is removed by the next run.
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// Runs the Python client from `cursor` for 5,000 events, adding the sequences it printed
/// to `seen`; returns the cursor it printed to carry on from (`None`, with the reason
/// printed, where python3 cannot run).
fn python_carries_on(socket: &Path, cursor: &str, seen: &mut Vec<u64>) -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python/gapless_client.py");
    let out = match Command::new("python3")
        .arg(&script)
        .arg(socket)
        .args(["--from", cursor, "--limit", "5000", "--timeout", "20"])
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipping the Python client's turn: python3 cannot run ({e})");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let lines = String::from_utf8(out.stdout).unwrap();
    assert!(!lines.contains("\"overrun\""), "the history held it all");
    let before = seen.len();
    seen.extend(lines.lines().filter_map(seq_of));
    assert!(
        seen.len() > before,
        "the Python client read messages: {lines}"
    );
    let carry_on = stderr
        .lines()
        .find_map(|l| l.strip_prefix("gapless_client: to carry on: "))
        .unwrap_or_else(|| panic!("no cursor printed: {stderr}"));
    let next = carry_on.strip_prefix("--from ").unwrap().to_string();
    assert_eq!(
        next,
        format!("0=SIM0000001:{}", seen.last().unwrap() + 1),
        "the Python client's cursor follows its last message"
    );
    Some(next)
}
