//! The publisher on loopback multicast: contiguity, faults, restarts,
//! heartbeats, the ITCH source, stopping and the command line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::moldudp64::{Packet, PacketKind};
use clap::Parser;

use super::{config, group, listen, messages, run_to_end};
use crate::sim::faults::SeqRange;
use crate::sim::itch::{ItchFile, MessageSource, synthetic_sequence};
use crate::sim::{MoldSim, MoldSimArgs, Source, run_cli};

#[test]
fn no_faults_contiguous_and_self_describing() {
    let config = config(1);
    let receiver = listen(config.group);
    let max_payload = config.max_payload;
    let sim = run_to_end(config);
    let datagrams = receiver.join().unwrap();
    let received = messages(&datagrams);
    assert_eq!(received.len(), 2_000);
    for (i, (session, sequence, message)) in received.iter().enumerate() {
        assert_eq!(*session, sim.session());
        assert_eq!(*sequence, i as u64 + 1);
        assert_eq!(synthetic_sequence(message), Some(*sequence));
    }
    assert!(datagrams.iter().all(|d| d.len() <= max_payload));
    let last = Packet::decode(datagrams.last().unwrap()).unwrap();
    assert_eq!(last.kind(), PacketKind::EndOfSession);
    assert_eq!(last.sequence(), 2_001);
    let stats = sim.stats();
    assert_eq!(stats.messages_published, 2_000);
    assert_eq!(stats.end_of_session_sent, 3);
    assert_eq!(stats.send_errors, 0);
    assert_eq!(sim.injected(), Default::default());
    sim.stop().unwrap();
}

#[test]
fn unpaced_packets_fill_the_payload() {
    let mut config = config(2);
    config.rate = None;
    config.max_payload = 300;
    let receiver = listen(config.group);
    let sim = run_to_end(config);
    let datagrams = receiver.join().unwrap();
    let received = messages(&datagrams);
    let sequences: Vec<u64> = received.iter().map(|m| m.1).collect();
    assert_eq!(sequences, (1..=2_000).collect::<Vec<_>>());
    let data: Vec<&Vec<u8>> = datagrams.iter().filter(|d| d.len() > 20).collect();
    // Every packet but the last is too full for one more (at most 46-byte) block.
    assert!(data.iter().all(|d| d.len() <= 300));
    assert!(data[..data.len() - 1].iter().all(|d| d.len() > 300 - 46));
    sim.stop().unwrap();
}

#[test]
fn lost_sequences_match_injected() {
    let mut config = config(3);
    config.faults.seed = 42;
    config.faults.loss = 0.05;
    config.faults.burst_len = 3;
    config.faults.burst_every = 40;
    let receiver = listen(config.group);
    let sim = run_to_end(config);
    let received: BTreeSet<u64> = messages(&receiver.join().unwrap())
        .iter()
        .map(|m| m.1)
        .collect();
    let injected = sim.injected();
    let lost: BTreeSet<u64> = injected.lost_sequences(sim.session()).collect();
    assert!(injected.burst_packets > 0 && injected.lost_packets > injected.burst_packets);
    assert!(!lost.is_empty());
    assert!(received.is_disjoint(&lost));
    let all: BTreeSet<u64> = received.union(&lost).copied().collect();
    assert_eq!(all, (1..=2_000).collect());
    assert_eq!(injected.lost_messages(), lost.len() as u64);
    sim.stop().unwrap();
}

#[test]
fn duplicates_and_reorders_match_injected() {
    let mut config = config(4);
    config.faults.seed = 9;
    config.faults.duplicate = 0.05;
    config.faults.reorder = 0.05;
    config.faults.reorder_depth = 3;
    let receiver = listen(config.group);
    let sim = run_to_end(config);
    let datagrams = receiver.join().unwrap();
    let mut seen = BTreeSet::new();
    let (mut duplicated, mut late) = (Vec::new(), Vec::new());
    let mut highest = 0;
    for datagram in &datagrams {
        let packet = Packet::decode(datagram).unwrap();
        let PacketKind::Data { count } = packet.kind() else {
            continue;
        };
        let range = SeqRange {
            session: packet.session(),
            first: packet.sequence(),
            last: packet.sequence() + u64::from(count) - 1,
        };
        if !seen.insert(range.first) {
            duplicated.push(range);
        } else if range.first < highest {
            late.push(range);
        }
        highest = highest.max(range.last);
    }
    let injected = sim.injected();
    assert!(!injected.duplicated.is_empty() && !injected.reordered.is_empty());
    assert_eq!(duplicated, injected.duplicated);
    assert_eq!(late, injected.reordered);
    let unique: BTreeSet<u64> = messages(&datagrams).iter().map(|m| m.1).collect();
    assert_eq!(unique, (1..=2_000).collect());
    sim.stop().unwrap();
}

#[test]
fn session_restart_renumbers_from_one() {
    let mut config = config(5);
    config.count = 1_200;
    config.faults.restart_after = Some(500);
    let receiver = listen(config.group);
    let sim = run_to_end(config);
    let received = messages(&receiver.join().unwrap());
    let mut per_session: BTreeMap<_, Vec<u64>> = BTreeMap::new();
    for (session, sequence, message) in &received {
        assert_eq!(synthetic_sequence(message), Some(*sequence));
        per_session.entry(*session).or_default().push(*sequence);
    }
    let injected = sim.injected();
    assert_eq!(injected.restarts.len(), 2);
    assert_eq!(injected.restarts[0].after_messages, 500);
    let lens: Vec<usize> = [
        injected.restarts[0].from,
        injected.restarts[0].to,
        injected.restarts[1].to,
    ]
    .iter()
    .map(|s| per_session[s].len())
    .collect();
    assert_eq!(lens, [500, 500, 200]);
    assert_eq!(per_session[&sim.session()], (1..=200).collect::<Vec<_>>());
    assert_eq!(sim.stats().sessions, 3);
    sim.stop().unwrap();
}

#[test]
fn heartbeats_carry_next_sequence_when_idle() {
    let mut config = config(6);
    config.count = 3;
    config.rate = Some(8.0);
    config.heartbeat_interval = Some(Duration::from_millis(30));
    let receiver = listen(config.group);
    let sim = run_to_end(config);
    let datagrams = receiver.join().unwrap();
    let mut next = 1;
    let mut heartbeats = 0;
    for datagram in &datagrams {
        let packet = Packet::decode(datagram).unwrap();
        match packet.kind() {
            PacketKind::Heartbeat => {
                assert_eq!(packet.sequence(), next);
                heartbeats += 1;
            }
            PacketKind::Data { .. } => next = packet.next_sequence(),
            PacketKind::EndOfSession => assert_eq!(packet.sequence(), 4),
        }
    }
    assert!(heartbeats >= 2, "{heartbeats}");
    assert_eq!(sim.stats().heartbeats_sent, heartbeats);
    sim.stop().unwrap();
}

/// The real sample file beside the project, or `None` (with a message) when absent.
fn sample_file() -> Option<std::path::PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/captures/itch/12302019_SNIPPET.NASDAQ_ITCH50");
    if !path.is_file() {
        println!("skipping: ../shared/captures not found");
        return None;
    }
    Some(path)
}

#[test]
fn itch_sample_file_reads_1000_messages() {
    let Some(path) = sample_file() else {
        return;
    };
    let file = ItchFile::open(&path).unwrap();
    assert_eq!(file.len(), 1_000);
    assert_eq!(file.messages().count(), 1_000);
    assert!(file.messages().all(|m| m[0].is_ascii_alphabetic()));
    assert!(file.max_message_len() <= 50);
}

#[test]
fn itch_source_loops_over_the_file() {
    let Some(path) = sample_file() else {
        return;
    };
    let file = Arc::new(ItchFile::open(&path).unwrap());
    let mut config = config(7);
    config.count = 1_500;
    config.source = Source::ItchFile(path);
    let receiver = listen(config.group);
    let sim = run_to_end(config);
    let received = messages(&receiver.join().unwrap());
    assert_eq!(received.len(), 1_500);
    for (i, (_, sequence, message)) in received.iter().enumerate() {
        assert_eq!(*sequence, i as u64 + 1);
        assert_eq!(Some(&message[..]), file.message(i % 1_000));
    }
    let source = MessageSource::Itch(file);
    assert_eq!(
        source.instrument(&received[0].2),
        Some(u16::from_be_bytes([received[0].2[1], received[0].2[2]]))
    );
    sim.stop().unwrap();
}

#[test]
fn stop_is_bounded_mid_run() {
    let mut config = config(8);
    config.count = 10_000_000;
    config.rate = Some(1_000.0);
    let sim = MoldSim::start(config).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!sim.is_finished());
    let started = Instant::now();
    sim.stop().unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    sim: MoldSimArgs,
}

#[test]
fn cli_parses_and_runs() {
    let cli = Cli::try_parse_from([
        "sim",
        "--group",
        "239.255.77.9:42009",
        "--count",
        "300",
        "--rate",
        "0",
        "--loss",
        "0.1",
        "--restart-after",
        "100",
        "--linger-ms",
        "0",
        "--heartbeat-ms",
        "0",
    ])
    .unwrap();
    let config = cli.sim.to_config().unwrap();
    assert_eq!(config.rate, None);
    assert_eq!(config.heartbeat_interval, None);
    assert_eq!(config.faults.restart_after, Some(100));
    run_cli(cli.sim).unwrap();
    let help = Cli::try_parse_from(["sim", "--help"])
        .err()
        .unwrap()
        .to_string();
    assert!(help.contains("--drop-answers") && help.contains("--itch-file"));
    let bad = Cli::try_parse_from(["sim", "--group", "10.1.2.3:5000", "--count", "1"]).unwrap();
    assert!(run_cli(bad.sim).is_err());
}

#[test]
fn each_line_loses_on_its_own_and_what_every_line_lost_is_recorded_as_lost() {
    let mut config = config(60);
    config.count = 4_000;
    config.line_faults = crate::sim::LineFaults {
        seed: 3,
        loss: 0.2,
        ..crate::sim::LineFaults::default()
    };
    let b = group(61);
    config.more_lines = vec![crate::sim::SimLine {
        group: b,
        faults: crate::sim::LineFaults {
            seed: 5,
            loss: 0.2,
            delay: Duration::from_millis(3),
            ..crate::sim::LineFaults::default()
        },
    }];
    let (rx_a, rx_b) = (listen(config.group), listen(b));
    let sim = run_to_end(config);
    let (got_a, got_b) = (rx_a.join().unwrap(), rx_b.join().unwrap());
    let seqs = |d: &[Vec<u8>]| -> BTreeSet<u64> { messages(d).iter().map(|m| m.1).collect() };
    let (a, b) = (seqs(&got_a), seqs(&got_b));
    let injected = sim.injected();
    let stats = sim.stats();
    sim.stop().unwrap();
    let data_packets = |d: &[Vec<u8>]| {
        d.iter()
            .filter(|p| {
                Packet::decode(p).is_ok_and(|p| matches!(p.kind(), PacketKind::Data { .. }))
            })
            .count() as u64
    };
    // Each line lost what the record says it lost on its own.
    assert_eq!(
        data_packets(&got_a) + injected.line_lost_packets[0],
        stats.data_packets
    );
    assert_eq!(
        data_packets(&got_b) + injected.line_lost_packets[1],
        stats.data_packets
    );
    // What neither line carried is exactly what is recorded as lost.
    let session = messages(&got_a)[0].0;
    let neither: Vec<u64> = (1..=4_000)
        .filter(|s| !a.contains(s) && !b.contains(s))
        .collect();
    assert!(
        !neither.is_empty(),
        "a 4 % chance per packet to be on neither"
    );
    assert_eq!(
        injected.lost_sequences(session).collect::<Vec<_>>(),
        neither
    );
    // Line b ends with the end of session too, once its delay has passed.
    let last = Packet::decode(got_b.last().unwrap()).unwrap();
    assert_eq!(last.kind(), PacketKind::EndOfSession);
}
