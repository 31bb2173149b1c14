//! An in-process consumer: the daemon runs inside this program and hands every event to a
//! queue of its own, with no socket in between.
//!
//! A MoldUDP64 simulator on loopback (1% loss, recovered by re-request) feeds it:
//!
//! ```sh
//! cargo run --release --example in_process
//! ```

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use gapless::config::Config;
use gapless::daemon::run::Daemon;
use gapless::publish::Event;
use gapless::sim::{FaultConfig, MoldSim, MoldSimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const MESSAGES: u64 = 20_000;
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 64, 7), 46407);
    let mut sim_config = MoldSimConfig::new(group);
    sim_config.count = MESSAGES;
    sim_config.rate = Some(20_000.0);
    sim_config.start_delay = Duration::from_millis(300);
    sim_config.faults = FaultConfig {
        seed: 7,
        loss: 0.01,
        ..FaultConfig::default()
    };
    let sim = MoldSim::start(sim_config)?;
    let text = format!(
        r#"
[daemon]
metrics_listen = "127.0.0.1:46417"
idle = "yield"

[[venue]]
name = "sim"
kind = "moldudp64"
start = "from-start"

  [[venue.channel]]
  name = "a"
  group = "{group}"
  interface = "127.0.0.1"
  rerequest = ["{rerequest}"]
"#,
        rerequest = sim.rerequest_addr()
    );
    let config = Config::parse(&text, "in-process").map_err(|e| e.to_string())?;
    let mut daemon = Daemon::new(config);
    // Its own lock-free queue, fed by the rx thread; falling behind costs this consumer an
    // overrun marker, never the others a wait.
    let mut consumer = daemon.subscribe(1 << 22);
    let running = daemon.start()?;

    let (mut messages, mut bytes, mut next) = (0u64, 0u64, 1u64);
    let deadline = Instant::now() + Duration::from_secs(30);
    while messages < MESSAGES && Instant::now() < deadline {
        let popped = consumer.pop(|event| match event {
            Event::Message { seq, payload, .. } => {
                assert_eq!(seq, next, "complete and in order");
                next += 1;
                messages += 1;
                bytes += payload.len() as u64;
            }
            Event::Gap { from, to, .. } => println!("lost {from}..={to}"),
            Event::State { state, .. } => println!("stream is {}", state.as_str()),
            _ => {}
        });
        if popped.is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let summary = running.stop()?;
    drop(sim);
    println!(
        "{messages} messages ({bytes} payload bytes) in order; the daemon delivered {}",
        summary.delivered
    );
    Ok(())
}
