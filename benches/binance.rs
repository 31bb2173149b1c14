//! `scan` against a full `serde_json::Value` parse extracting the same fields, over the real
//! Binance depth events recorded by hftbacktest (spot, USD-M and COIN-M), decompressed in memory
//! before any timing.

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use flate2::read::GzDecoder;
use serde_json::Value;

use gapless::protocol::binance::{Scanned, scan};

const FILES: [&str; 3] = [
    "spot_btcusdt_20240808.gz",
    "usdm_btcusdt_20240808.gz",
    "cm_btcusd_perp_20240808.gz",
];

/// Passes timed by hand after criterion's groups; the median is reported.
const TIMING_RUNS: usize = 9;

/// Every depth event's JSON frame, back to back in one buffer.
struct Corpus {
    bytes: Vec<u8>,
    events: Vec<Range<usize>>,
}

impl Corpus {
    fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.events
            .iter()
            .filter_map(|range| self.bytes.get(range.clone()))
    }
}

fn load() -> Result<Corpus, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures/binance/hftbacktest");
    if !dir.is_dir() {
        return Err(format!("{} not found", dir.display()));
    }
    let mut corpus = Corpus {
        bytes: Vec::new(),
        events: Vec::new(),
    };
    for name in FILES {
        let path = dir.join(name);
        let file = File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut text = String::new();
        GzDecoder::new(file)
            .read_to_string(&mut text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines() {
            let Some((_, json)) = line.split_once(' ') else {
                continue;
            };
            if json.contains("\"e\":\"depthUpdate\"") {
                let start = corpus.bytes.len();
                corpus.bytes.extend_from_slice(json.as_bytes());
                corpus.events.push(start..corpus.bytes.len());
            }
        }
    }
    Ok(corpus)
}

/// Folds the extracted fields so neither path can be optimised away.
fn fold(acc: u64, fields: [u64; 7]) -> u64 {
    fields
        .iter()
        .fold(acc, |acc, &field| acc.rotate_left(5) ^ field)
}

fn scan_all(corpus: &Corpus) -> u64 {
    corpus.frames().fold(0, |acc, frame| match scan(frame) {
        Ok(Scanned::Depth(event)) => fold(
            acc,
            [
                event.event_time,
                event.transaction_time.unwrap_or(0),
                event.symbol.len() as u64,
                event.first_update_id,
                event.final_update_id,
                event.prev_final_update_id.unwrap_or(0),
                event.stream.map_or(0, str::len) as u64 + event.event_bytes.len() as u64,
            ],
        ),
        _ => acc,
    })
}

fn serde_fields(frame: &[u8]) -> Option<[u64; 7]> {
    let value: Value = serde_json::from_slice(frame).ok()?;
    let data = value.get("data")?;
    if data.get("e")?.as_str()? != "depthUpdate" {
        return None;
    }
    let optional = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
    let stream = value
        .get("stream")
        .and_then(Value::as_str)
        .map_or(0, str::len);
    // Comparable to `event_bytes`: serialising `data` back would cost more than the parse.
    let event_len = frame.len() - "{\"stream\":\"\",\"data\":}".len() - stream;
    Some([
        data.get("E")?.as_u64()?,
        optional("T"),
        data.get("s")?.as_str()?.len() as u64,
        data.get("U")?.as_u64()?,
        data.get("u")?.as_u64()?,
        optional("pu"),
        (stream + event_len) as u64,
    ])
}

fn serde_all(corpus: &Corpus) -> u64 {
    corpus
        .frames()
        .fold(0, |acc, frame| match serde_fields(frame) {
            Some(fields) => fold(acc, fields),
            None => acc,
        })
}

fn median_seconds(corpus: &Corpus, pass: fn(&Corpus) -> u64) -> f64 {
    let mut times: Vec<f64> = (0..TIMING_RUNS)
        .map(|_| {
            let start = Instant::now();
            black_box(pass(black_box(corpus)));
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times.get(TIMING_RUNS / 2).copied().unwrap_or(f64::NAN)
}

fn timing_table(corpus: &Corpus) {
    let events = corpus.events.len() as f64;
    let megabytes = corpus.bytes.len() as f64 / 1e6;
    let scan_s = median_seconds(corpus, scan_all);
    let serde_s = median_seconds(corpus, serde_all);
    println!();
    println!(
        "{} depth events, {megabytes:.1} MB; median of {TIMING_RUNS} passes",
        corpus.events.len()
    );
    println!("| parser                 | ms/pass | events/s   | MB/s   |");
    println!("|------------------------|---------|------------|--------|");
    for (name, seconds) in [("scan", scan_s), ("serde_json::Value", serde_s)] {
        println!(
            "| {name:<22} | {:>7.2} | {:>10.0} | {:>6.0} |",
            seconds * 1e3,
            events / seconds,
            megabytes / seconds
        );
    }
    println!("| ratio scan/serde_json  | {:>7.1}x |", serde_s / scan_s);
}

fn main() {
    let corpus = match load() {
        Ok(corpus) => corpus,
        Err(reason) => {
            println!("skipping: {reason}");
            return;
        }
    };
    let (scanned, parsed) = (scan_all(&corpus), serde_all(&corpus));
    if scanned != parsed {
        println!("skipping: scan and serde_json disagree ({scanned:#x} != {parsed:#x})");
        return;
    }

    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut group = criterion.benchmark_group("binance_depth");
    group.throughput(Throughput::Elements(corpus.events.len() as u64));
    group.bench_function("scan", |b| b.iter(|| scan_all(black_box(&corpus))));
    group.bench_function("serde_json_value", |b| {
        b.iter(|| serde_all(black_box(&corpus)))
    });
    group.finish();
    criterion.final_summary();

    timing_table(&corpus);
    whole_path();
}

/// Frames a second through the whole Binance path, from bytes to the consumer: a
/// generated spot capture (one symbol, 200,000 events) replayed through the Binance
/// session (scan, sync rules, sequencer) into a consumer queue that a reader drains.
fn whole_path() {
    use gapless::internals::Fanout;
    use gapless::publish;
    use gapless::sim::binance::capture::write_generated_capture;
    use gapless::venue::binance::{BinanceSession, BinanceSpec, Market, SnapshotResult};

    let mut capture = Vec::new();
    if write_generated_capture(&mut capture, Market::Spot, &["btcusdt"], 200_000, &[]).is_err() {
        println!("skipping the whole-path figure: the generator failed");
        return;
    }
    let text = String::from_utf8_lossy(&capture).into_owned();
    let mut frames: Vec<&str> = Vec::new();
    let mut snapshot: Option<&str> = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (_, kind, rest) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
        match kind {
            Some("ws") => frames.push(rest),
            Some("rest") if snapshot.is_none() => {
                snapshot = rest.split_once(' ').map(|(_, body)| body)
            }
            _ => {}
        }
    }
    let Some(snapshot) = snapshot else {
        println!("skipping the whole-path figure: no snapshot in the capture");
        return;
    };
    let mut samples = Vec::new();
    let mut delivered = 0u64;
    for _ in 0..7 {
        let Ok(mut session) =
            BinanceSession::new(BinanceSpec::new(Market::Spot, vec!["btcusdt".into()]))
        else {
            return;
        };
        let (producer, mut consumer) = publish::channel(8 << 20, 1);
        let mut fanout = Fanout::new(vec![producer]);
        session.on_connected(1);
        let start = std::time::Instant::now();
        let mut snapshot_sent = false;
        for (i, frame) in frames.iter().enumerate() {
            let now = 2 + i as u64;
            session.on_text(now, now, frame.as_bytes(), &mut fanout);
            if !snapshot_sent && let Some(request) = session.poll_snapshot(now) {
                session.on_snapshot(
                    now,
                    request.symbol,
                    SnapshotResult::Body(snapshot.as_bytes()),
                    &mut fanout,
                );
                snapshot_sent = true;
            }
            if i % 1024 == 0 {
                while consumer.pop(|_| ()).is_some() {}
            }
        }
        while consumer.pop(|_| ()).is_some() {}
        samples.push(start.elapsed().as_secs_f64());
        delivered = fanout.delivered;
    }
    samples.sort_by(f64::total_cmp);
    let secs = samples[samples.len() / 2];
    println!();
    println!(
        "| whole Binance path (bytes to consumer queue, one symbol) | frames | seconds | frames/s |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| scan + spot sync rules + sequencer + hand-off | {delivered} | {secs:.4} | {:.0} |",
        delivered as f64 / secs
    );
}
