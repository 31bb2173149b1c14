//! The simulator's packets, and the re-request answers it sends to the handler, are valid
//! MoldUDP64 to Wireshark's dissector: captured live on loopback with tshark, no malformed
//! frame and no expert error. Skips with a reason where tshark is absent or cannot capture.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::io::idle::IdleStrategy;
use crate::publish::{Event, StreamState};
use crate::sim::{FaultConfig, MoldSim, MoldSimConfig};
use crate::venue::Wire;

use super::udp;

const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 62, 1), 46201);
const REREQUEST_PORT: u16 = 46202;

fn tshark_count(file: &str, filter: &str) -> Option<usize> {
    let out = Command::new("tshark")
        .args([
            "-r",
            file,
            "-d",
            "udp.port==46201,moldudp64",
            "-d",
            "udp.port==46202,moldudp64",
        ])
        .args(["-Y", filter])
        .output()
        .ok()?;
    out.status.success().then(|| {
        out.stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count()
    })
}

#[test]
fn simulator_packets_are_valid_moldudp64_to_wireshark() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("skipping: tshark is not installed (.ci/install-deps installs it)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("gapless-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mold.pcap");
    let file_s = file.to_string_lossy().to_string();
    let filter = format!(
        "(udp and dst host {}) or (udp src port {REREQUEST_PORT})",
        GROUP.ip()
    );
    let mut tshark = match Command::new("tshark")
        .args([
            "-i",
            "lo",
            "-f",
            &filter,
            "-w",
            &file_s,
            "-a",
            "duration:60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("skipping: cannot start tshark: {e}");
            return;
        }
    };
    // tshark says when it is capturing; anything else first means it cannot.
    let Some(stderr) = tshark.stderr.take() else {
        return;
    };
    let mut lines = BufReader::new(stderr).lines();
    let ready = lines
        .by_ref()
        .take(20)
        .map_while(Result::ok)
        .any(|l| l.contains("Capturing on"));
    if !ready {
        let _ = tshark.kill();
        let _ = tshark.wait();
        eprintln!("skipping: tshark cannot capture on lo here");
        return;
    }

    let mut cfg = MoldSimConfig::new(GROUP);
    cfg.count = 5_000;
    cfg.rate = Some(20_000.0);
    cfg.rerequest_port = REREQUEST_PORT;
    cfg.heartbeat_interval = Some(Duration::from_millis(20));
    cfg.end_of_session_repeats = 5;
    cfg.start_delay = Duration::from_millis(100);
    cfg.faults = FaultConfig {
        seed: 9,
        loss: 0.05,
        reorder: 0.02,
        duplicate: 0.02,
        ..FaultConfig::default()
    };
    let sim = MoldSim::start(cfg).expect("simulator");
    let spec = udp::spec(Wire::MoldUdp64, GROUP, Some(sim.rerequest_addr()));
    let mut handler = udp::start(spec, IdleStrategy::Yield, 16 << 20, None);
    let consumer = &mut handler.consumer;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut closed = false;
    let mut delivered = 0u64;
    while !closed && Instant::now() < deadline {
        let got = consumer.pop(|e| match e {
            Event::State {
                state: StreamState::Closed,
                ..
            } => closed = true,
            Event::Message { .. } => delivered += 1,
            _ => {}
        });
        if got.is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let venues = handler.stop().venues;
    let answers = venues[0].udp().expect("a udp venue").stats(0).answers;
    // SAFETY: sending SIGINT to the child we started; tshark then finishes the file.
    unsafe {
        libc::kill(tshark.id() as libc::pid_t, libc::SIGINT);
    }
    let _ = tshark.wait();
    drop(sim);
    assert!(closed, "the handler saw the session end complete");
    assert_eq!(delivered, 5_000);
    assert!(answers > 0, "re-request answers were exercised");

    let mold = tshark_count(&file_s, "moldudp64").expect("tshark reads the capture");
    let malformed = tshark_count(&file_s, "_ws.malformed").unwrap_or(usize::MAX);
    let errors = tshark_count(&file_s, "_ws.expert.severity == \"Error\"").unwrap_or(usize::MAX);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(mold > 100, "{mold} MoldUDP64 frames captured");
    assert_eq!(malformed, 0, "malformed frames");
    assert_eq!(errors, 0, "expert errors");
}
