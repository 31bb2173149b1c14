//! A capture recorded by the pcap sink during a simulator run (with loss recovered by
//! re-request) opens in tshark with the MoldUDP64 dissector and no malformed frame, and
//! replays to exactly the messages the consumer received live.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::capture::CaptureReader;
use crate::drive::replay::{ReplayOptions, replay_reader};
use crate::io::idle::IdleStrategy;
use crate::publish::{Event, StreamState};
use crate::sim::{FaultConfig, MoldSim, MoldSimConfig};
use crate::venue::Wire;

use super::udp;

const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 66, 1), 46601);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn recorded_capture_replays_to_what_was_received_live() {
    let dir = std::env::temp_dir().join(format!("gapless-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("live.pcap");

    let mut cfg = MoldSimConfig::new(GROUP);
    cfg.count = 20_000;
    cfg.rate = Some(20_000.0);
    cfg.start_delay = Duration::from_millis(100);
    cfg.heartbeat_interval = Some(Duration::from_millis(50));
    cfg.faults = FaultConfig {
        seed: 23,
        loss: 0.02,
        ..FaultConfig::default()
    };
    let sim = MoldSim::start(cfg).unwrap();
    let (tap, recorder) = crate::sinks::pcap::start(&path, 1 << 30, 16 << 20).unwrap();
    let spec = udp::spec(Wire::MoldUdp64, GROUP, Some(sim.rerequest_addr()));
    let mut handler = udp::start(spec, IdleStrategy::Yield, 32 << 20, Some(tap));
    let consumer = &mut handler.consumer;
    let mut live = Vec::new();
    let mut closed = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !closed && Instant::now() < deadline {
        let got = consumer.pop(|e| match e {
            Event::Message {
                seq,
                snapshot: false,
                payload,
                ..
            } => live.push((seq, hex(payload))),
            Event::State {
                state: StreamState::Closed,
                ..
            } => closed = true,
            _ => {}
        });
        if got.is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let result = handler.stop();
    let recovered = result.venues[0]
        .udp()
        .expect("a udp venue")
        .stats(0)
        .recovered;
    drop(result);
    let files = recorder.stop();
    drop(sim);
    assert!(closed, "the session ended complete");
    assert_eq!(live.len(), 20_000);
    assert!(
        recovered > 0,
        "loss was recovered by re-request during the recording"
    );

    // Replayed, the recording gives the same messages (answers were recorded with their
    // stream, so nothing is missing).
    let reader = CaptureReader::open(&files[0]).unwrap();
    let options = ReplayOptions {
        wire: Some(Wire::MoldUdp64),
        destinations: vec![GROUP],
        channels: Vec::new(),
        venue: "sim".into(),
        speed: None,
        from_start: true,
        progress: false,
    };
    let mut out = Vec::new();
    let summary = replay_reader(reader, &options, Some(&mut out)).unwrap();
    assert_eq!(summary.gaps().count(), 0, "{summary}");
    let replayed: Vec<(u64, String)> = String::from_utf8(out)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((v["seq"].as_u64()?, v["payload"].as_str()?.to_string()))
        })
        .collect();
    assert!(
        replayed == live,
        "replay differs from what was received live"
    );

    // Wireshark's view of the recording.
    match Command::new("tshark").arg("--version").output() {
        Err(_) => eprintln!("skipping the tshark check: tshark is not installed"),
        Ok(_) => {
            let file = files[0].to_string_lossy().to_string();
            let count = |filter: &str| {
                Command::new("tshark")
                    .args(["-r", &file, "-d", "udp.port==46601,moldudp64", "-Y", filter])
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(|o| {
                        o.stdout
                            .split(|b| *b == b'\n')
                            .filter(|l| !l.is_empty())
                            .count()
                    })
            };
            assert!(
                count("moldudp64").unwrap_or(0) > 100,
                "MoldUDP64 frames decoded"
            );
            assert_eq!(count("_ws.malformed"), Some(0), "no malformed frame");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
