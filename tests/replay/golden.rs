//! Golden tests: the project's own captures (made by `captures/make-captures.sh` with
//! gapless's simulator and pcap sink) replay to exactly the JSON lines beside them.

use std::path::Path;

use gapless::capture::CaptureReader;
use gapless::drive::replay::{ReplayOptions, replay_reader};
use gapless::venue::Wire;

#[test]
fn moldudp64_capture_with_known_loss_replays_to_its_expected_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("captures");
    let reader = CaptureReader::open(dir.join("moldudp64-loss.pcap")).expect("capture");
    // No protocol named: it is told from the datagrams.
    let options = ReplayOptions {
        wire: None,
        destinations: Vec::new(),
        channels: Vec::new(),
        venue: "sim".into(),
        speed: None,
        from_start: true,
        progress: false,
    };
    let mut out = Vec::new();
    let summary = replay_reader(reader, &options, Some(&mut out)).expect("replay");
    let expected = std::fs::read(dir.join("moldudp64-loss.expected.jsonl")).expect("expected");
    assert!(
        out == expected,
        "replay output differs from moldudp64-loss.expected.jsonl"
    );
    // The loss the simulator injected, as its own summary recorded it.
    let sim = std::fs::read_to_string(dir.join("moldudp64-loss.sim.txt")).expect("sim summary");
    let lost: u64 = summary.gaps().map(|g| g.len()).sum();
    assert!(
        sim.contains(&format!("injected: {lost} messages lost")),
        "{sim}"
    );
    assert_eq!(summary.delivered + lost, 2_000);
    assert_eq!(
        (summary.wire, summary.detected),
        (Some(Wire::MoldUdp64), true)
    );
    // The summary agrees with itself: the stream ended synced after its gaps, and it is
    // called incomplete, never both synced and unsynced.
    let text = summary.to_string();
    assert!(
        text.contains("ended synced delivered 1857 (1..=2000) duplicates 0 malformed 0 stale 0: lost 143 messages in 77 gaps, synced after them"),
        "{text}"
    );
    assert!(
        text.ends_with(
            "verdict:     incomplete: 239.255.65.1:46501 (state built from them is not the venue's)"
        ),
        "{text}"
    );
    assert!(!text.contains("unsynced"), "{text}");
    let summary_file =
        std::fs::read_to_string(dir.join("moldudp64-loss.summary.txt")).expect("summary");
    assert_eq!(
        summary_file.trim_end(),
        text,
        "moldudp64-loss.summary.txt is the summary"
    );
}

#[test]
fn binance_capture_with_a_dropped_event_replays_to_its_expected_output() {
    use gapless::drive::replay::binance::replay_binance;
    use gapless::venue::binance::Market;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("captures");
    let mut out = Vec::new();
    let summary = replay_binance(
        &dir.join("binance-drop.capture"),
        Market::Spot,
        &["btcusdt", "ethusdt"],
        Some(&mut out),
    )
    .expect("replay");
    let expected = std::fs::read(dir.join("binance-drop.expected.jsonl")).expect("expected");
    assert!(
        out == expected,
        "replay output differs from binance-drop.expected.jsonl"
    );
    // The dropped event resyncs btcusdt alone.
    let resyncs: Vec<(String, u64)> = summary
        .symbols
        .iter()
        .map(|s| (s.name.clone(), s.resyncs))
        .collect();
    assert_eq!(
        resyncs,
        [("btcusdt".to_string(), 1), ("ethusdt".to_string(), 0)]
    );
}
