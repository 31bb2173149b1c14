//! Replay throughput on the real IEX TOPS capture (decompressed in memory first): the
//! whole pipeline (pcap records, link layers, IEX-TP decode, venue session, sequencer,
//! consumer events) against a bare pass that only parses the pcap records, in one run.
//!
//! `cargo bench --bench replay`

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use gapless::capture::CaptureReader;
use gapless::drive::replay::{ReplayOptions, replay_reader};
use gapless::venue::Wire;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures/iex/Tops.v1.6.pcap.zst");
    let Ok(compressed) = std::fs::read(&path) else {
        println!("skipping: ../shared/captures not found");
        return;
    };
    // Decompress once, outside every measurement.
    let Ok(bytes) = zstd::decode_all(&compressed[..]) else {
        println!("skipping: the capture did not decompress");
        return;
    };
    let options = ReplayOptions {
        wire: Some(Wire::IexTp),
        destinations: Vec::new(),
        channels: Vec::new(),
        venue: "iex".into(),
        speed: None,
        from_start: true,
        progress: false,
    };
    let (mut bare, mut full) = (Vec::new(), Vec::new());
    let mut messages = 0;
    for _ in 0..11 {
        let reader = CaptureReader::from_bytes(bytes.clone()).expect("opens");
        let start = Instant::now();
        let mut reader = reader;
        let mut records = 0u64;
        while let Some(record) = reader.next_record() {
            let record = record.expect("record");
            black_box(record.data);
            records += 1;
        }
        bare.push(start.elapsed().as_secs_f64());
        assert_eq!(records, 150_000);

        let reader = CaptureReader::from_bytes(bytes.clone()).expect("opens");
        let start = Instant::now();
        let summary = replay_reader(reader, &options, None).expect("replay");
        full.push(start.elapsed().as_secs_f64());
        messages = summary.delivered;
        assert_eq!(messages, 212_153);
    }
    let (bare, full) = (median(bare), median(full));
    let rate = |secs: f64| messages as f64 / secs;
    println!(
        "| pass over the IEX capture ({messages} messages, 150,000 packets) | seconds | messages/s |"
    );
    println!("|---|---:|---:|");
    println!("| bare pcap record parse | {bare:.4} | {:.0} |", rate(bare));
    println!("| full replay pipeline | {full:.4} | {:.0} |", rate(full));
    println!("| full / bare time | {:.2}x | |", full / bare);
    println!("(median of 11 runs; the full pass includes the look-ahead for destinations)");
}
