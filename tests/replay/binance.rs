//! Replays of generated Binance captures and of malformed ones.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use gapless::drive::replay::binance::{BinanceReplaySummary, ReplayBinanceError, replay_binance};
use gapless::sequencer::StreamState;
use gapless::sim::binance::capture::write_generated_capture;
use gapless::venue::binance::Market;

const SYMBOLS: [&str; 2] = ["btcusdt", "ethusdt"];

fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wip_binance_replay_{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    fs::write(&path, contents).unwrap();
    path
}

fn replay_to_bytes(path: &Path, market: Market) -> (BinanceReplaySummary, Vec<u8>) {
    let mut out = Vec::new();
    let summary = replay_binance(path, market, &SYMBOLS, Some(&mut out)).unwrap();
    (summary, out)
}

/// Checks every delivered delta of every stream against the market's continuity rule, from
/// the snapshot that precedes it. Returns the deltas per stream.
fn check_continuity(jsonl: &[u8], market: Market) -> BTreeMap<String, u64> {
    // Per stream: the last id applied, and whether it was a snapshot's `lastUpdateId`.
    let mut last: BTreeMap<String, Option<(u64, bool)>> = BTreeMap::new();
    let mut deltas = BTreeMap::new();
    for line in jsonl.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line).unwrap();
        assert_eq!(v["venue"], "binance");
        let stream = v["stream"].as_str().unwrap().to_string();
        assert!(SYMBOLS.contains(&stream.as_str()), "{stream}");
        let prev = last.entry(stream.clone()).or_insert(None);
        if v["snapshot"] == true {
            *prev = Some((v["seq"].as_u64().unwrap(), true));
        } else if v["event"] == "state" && v["state"] != "synced" {
            *prev = None;
        } else if let Some(first) = v["first"].as_u64() {
            let payload = &v["payload"];
            let (u_first, u_last) = (
                payload["U"].as_u64().unwrap(),
                payload["u"].as_u64().unwrap(),
            );
            assert_eq!((first, v["last"].as_u64().unwrap()), (u_first, u_last));
            let (p, after_snapshot) = prev.expect("a delta before any snapshot");
            let ok = match (market, after_snapshot) {
                (Market::Spot, true) => u_first <= p + 1 && p < u_last,
                (Market::Spot, false) => u_first == p + 1,
                (_, true) => u_first <= p && p <= u_last,
                (_, false) => payload["pu"].as_u64() == Some(p),
            };
            assert!(
                ok,
                "{stream}: after {p} (snapshot: {after_snapshot}) came {line:?}"
            );
            *prev = Some((u_last, false));
            *deltas.entry(stream).or_insert(0u64) += 1;
        }
    }
    deltas
}

fn generated_capture_replays(market: Market, name: &str) {
    let mut capture = Vec::new();
    write_generated_capture(&mut capture, market, &SYMBOLS, 300, &[("btcusdt", 120)]).unwrap();
    let path = temp_file(name, &capture);
    let (summary, first) = replay_to_bytes(&path, market);
    let (again, second) = replay_to_bytes(&path, market);
    assert_eq!(first, second, "two replays differ");
    assert_eq!(summary, again);
    let btc = &summary.symbols[0];
    let eth = &summary.symbols[1];
    assert_eq!((btc.resyncs, eth.resyncs), (1, 0), "{summary}");
    assert_eq!((btc.breaks, eth.breaks), (1, 0), "{summary}");
    assert!(
        btc.stale_dropped >= 2 && eth.stale_dropped >= 2,
        "{summary}"
    );
    assert_eq!(
        (btc.state, eth.state),
        (StreamState::Synced, StreamState::Synced)
    );
    assert_eq!(summary.frames, 599);
    assert_eq!(summary.snapshots, 3);
    assert_eq!(summary.unanswered, 0);
    let deltas = check_continuity(&first, market);
    assert_eq!(deltas.get("btcusdt"), Some(&btc.applied));
    assert_eq!(deltas.get("ethusdt"), Some(&eth.applied));
    assert!(btc.applied > 250 && eth.applied > 280, "{summary}");
    fs::remove_file(path).unwrap();
}

#[test]
fn spot_capture_with_a_dropped_event_resyncs_that_symbol_once() {
    generated_capture_replays(Market::Spot, "spot.txt");
}

#[test]
fn usdm_capture_with_a_dropped_event_resyncs_that_symbol_once() {
    generated_capture_replays(Market::Usdm, "usdm.txt");
}

#[test]
fn a_missing_resync_snapshot_is_answered_as_failed_and_the_replay_ends() {
    let mut capture = Vec::new();
    write_generated_capture(&mut capture, Market::Spot, &SYMBOLS, 50, &[("btcusdt", 20)]).unwrap();
    let text = String::from_utf8(capture).unwrap();
    let mut kept = Vec::new();
    let mut btc_rests = 0;
    for line in text.lines() {
        if line.contains(" rest BTCUSDT ") {
            btc_rests += 1;
            if btc_rests == 2 {
                continue;
            }
        }
        kept.push(line);
    }
    let path = temp_file("missing.txt", kept.join("\n").as_bytes());
    let (summary, _) = replay_to_bytes(&path, Market::Spot);
    assert!(summary.unanswered >= 1, "{summary}");
    assert_ne!(summary.symbols[0].state, StreamState::Synced);
    assert_eq!(summary.symbols[1].state, StreamState::Synced);
    fs::remove_file(path).unwrap();
}

#[test]
fn malformed_lines_are_reported_with_their_number() {
    let cases: [(&str, usize, &str); 5] = [
        ("1 ws {}\nabc ws {}\n", 2, "recv_ns"),
        ("1 ws {}\n\n2 wss {}\n", 3, "kind"),
        ("1 rest\n", 1, "symbol"),
        ("1 ws {}\r\n2 rest BTCUSDT \r\n", 2, "JSON"),
        ("5\n", 1, "kind"),
    ];
    for (i, (text, line, word)) in cases.into_iter().enumerate() {
        let path = temp_file(&format!("bad{i}.txt"), text.as_bytes());
        match replay_binance(&path, Market::Spot, &SYMBOLS, None) {
            Err(e @ ReplayBinanceError::Malformed(l, _)) => {
                assert_eq!(l, line, "{text:?}: {e}");
                let message = e.to_string();
                assert!(message.starts_with(&format!("line {line}: ")), "{message}");
                assert!(message.contains(word), "{message}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
        fs::remove_file(path).unwrap();
    }
    let missing = replay_binance(
        &PathBuf::from("/nonexistent/x"),
        Market::Spot,
        &SYMBOLS,
        None,
    );
    assert!(matches!(missing, Err(ReplayBinanceError::Read(..))));
}

/// A gzip or zstd Binance capture (told by its first bytes) replays exactly as the plain
/// one, read a line at a time.
#[test]
fn compressed_captures_replay_as_the_plain_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("captures");
    let plain = fs::read(dir.join("binance-drop.capture")).unwrap();
    let expected = fs::read(dir.join("binance-drop.expected.jsonl")).unwrap();
    let gzip = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, &plain).unwrap();
        e.finish().unwrap()
    };
    let zstd = zstd::encode_all(&plain[..], 3).unwrap();
    for (name, bytes) in [("drop.capture.gz", gzip), ("drop.capture.zst", zstd)] {
        let path = temp_file(name, &bytes);
        let (summary, out) = replay_to_bytes(&path, Market::Spot);
        assert!(out == expected, "{name}: output differs");
        assert_eq!(summary.records, 602, "{name}");
        // Cut short: a clear error, never a panic.
        let cut = temp_file(&format!("cut.{name}"), &bytes[..bytes.len() / 2]);
        let mut sink = Vec::new();
        let e = replay_binance(&cut, Market::Spot, &SYMBOLS, Some(&mut sink)).unwrap_err();
        assert!(
            e.to_string().contains("decompression failed")
                || matches!(e, ReplayBinanceError::Malformed(..)),
            "{name}: {e}"
        );
    }
}

/// `gapless replay -` on a Binance capture piped in (plain and gzip): read once, it gives
/// the same JSON lines as the file, and a snapshot request made before its record was
/// read waits for it rather than failing.
#[test]
fn a_capture_on_standard_input_replays_as_the_file() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("captures");
    let plain = fs::read(dir.join("binance-drop.capture")).unwrap();
    let expected = fs::read(dir.join("binance-drop.expected.jsonl")).unwrap();
    let gzip = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&plain).unwrap();
        e.finish().unwrap()
    };
    for (name, input) in [("plain", plain), ("gzip", gzip)] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gapless"))
            .args([
                "replay",
                "--protocol",
                "binance",
                "--symbols",
                "btcusdt,ethusdt",
            ])
            .args(["--jsonl", "-", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(out.stdout == expected, "{name}: output differs; {stderr}");
        assert!(stderr.contains("records 602"), "{name}: {stderr}");
    }
}
