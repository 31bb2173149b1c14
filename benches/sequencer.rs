//! Sequencer throughput: the slot-ring detector against a `BTreeMap` reorder buffer, both
//! fed the same arrival order in the same run.
//!
//! Scenarios: in order; 10% of frames reordered within a window of 64; one frame in 10,000
//! arriving 500 late; 1% loss filled by backfill 32 frames later. After criterion's
//! groups, a table of median ns/frame for both and their ratio is printed.
//!
//! `cargo bench --bench sequencer`

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use gapless::sequencer::{Baseline, Delivered, Detector, Frame, StreamConfig};

const FRAMES: u64 = 200_000;

/// One arrival: the sequence and whether it comes as a retransmission.
#[derive(Clone, Copy)]
struct Arrival {
    seq: u64,
    backfill: bool,
}

/// A tiny deterministic generator (xorshift64*), so both sides see the same order.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn chance(&mut self, per_million: u64) -> bool {
        self.next() % 1_000_000 < per_million
    }
}

fn in_order() -> Vec<Arrival> {
    (1..=FRAMES)
        .map(|seq| Arrival {
            seq,
            backfill: false,
        })
        .collect()
}

/// Moves chosen frames `delay` positions later.
fn delayed(pick: impl Fn(&mut Rng, u64) -> Option<usize>, backfill: bool) -> Vec<Arrival> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut slots: Vec<Vec<Arrival>> = vec![Vec::new(); FRAMES as usize + 600];
    for seq in 1..=FRAMES {
        let at = match pick(&mut rng, seq) {
            Some(delay) => (seq as usize) + delay,
            None => seq as usize,
        };
        let arrival = Arrival {
            seq,
            backfill: backfill && at != seq as usize,
        };
        if let Some(slot) = slots.get_mut(at) {
            slot.push(arrival);
        }
    }
    slots.into_iter().flatten().collect()
}

fn reordered_10pct() -> Vec<Arrival> {
    delayed(
        |rng, _| rng.chance(100_000).then(|| 1 + (rng.next() % 63) as usize),
        false,
    )
}

fn late_500() -> Vec<Arrival> {
    delayed(|_, seq| (seq % 10_000 == 5_000).then_some(500), false)
}

fn loss_1pct_backfill() -> Vec<Arrival> {
    delayed(|rng, _| rng.chance(10_000).then_some(32), true)
}

/// The same record the detector hands out, so both sides produce identical output.
#[inline]
fn delivered(seq: u64, payload: u64) -> Delivered<u64> {
    Delivered {
        first: seq,
        last: seq,
        fresh_from: seq,
        payload,
    }
}

/// The baseline: the same multi-stream detector shape (streams addressed by index, an epoch
/// check, a delivered counter, the same output record) with the textbook `BTreeMap` of
/// pending frames in place of the slot ring.
struct TreeDetector {
    streams: Vec<TreeStream>,
}

struct TreeStream {
    epoch: u64,
    expected: u64,
    pending: BTreeMap<u64, u64>,
    delivered: u64,
    missing: u64,
}

impl TreeDetector {
    fn new() -> Self {
        let stream = TreeStream {
            epoch: 0,
            expected: 1,
            pending: BTreeMap::new(),
            delivered: 0,
            missing: 0,
        };
        Self {
            streams: vec![stream],
        }
    }

    #[inline]
    fn ingest(
        &mut self,
        stream: usize,
        epoch: u64,
        seq: u64,
        payload: u64,
        walk: bool,
        out: &mut Vec<Delivered<u64>>,
    ) {
        let Some(s) = self.streams.get_mut(stream) else {
            return;
        };
        if epoch != s.epoch || seq < s.expected || s.pending.contains_key(&seq) {
            return;
        }
        if seq > s.expected {
            let new_gap = s.pending.keys().next_back().is_none_or(|&k| seq > k + 1);
            s.pending.insert(seq, payload);
            if new_gap && walk {
                // Walk the missing ranges, as a requester would.
                let mut cursor = s.expected;
                let mut missing = 0;
                for &k in s.pending.keys() {
                    missing += k - cursor;
                    cursor = k + 1;
                }
                s.missing = missing;
            }
            return;
        }
        out.push(delivered(seq, payload));
        s.expected += 1;
        s.delivered += 1;
        while let Some(p) = s.pending.remove(&s.expected) {
            out.push(delivered(s.expected, p));
            s.expected += 1;
            s.delivered += 1;
        }
    }
}

/// Runs the slot-ring detector. With `walk`, a requester walks the missing ranges once per
/// new gap, as a venue with retransmission does (only the loss scenario asks for it).
fn run_ring(arrivals: &[Arrival], walk: bool) -> u64 {
    let mut detector: Detector<u64> = Detector::new();
    let s = detector.add_stream(StreamConfig::point(1024).with_baseline(Baseline::Expect(1)));
    let mut out: Vec<Delivered<u64>> = Vec::with_capacity(1024);
    let mut delivered = 0u64;
    let mut missing = 0u64;
    for a in arrivals {
        if a.backfill {
            let _ = detector.backfill(s, 0, Frame::point(a.seq, a.seq), &mut out);
        } else if detector
            .ingest(s, 0, Frame::point(a.seq, a.seq), &mut out)
            .new_gap
            .is_some()
            && walk
        {
            missing = detector.missing(s).map(|r| r.len()).sum();
        }
        delivered += out.len() as u64;
        out.clear();
    }
    black_box(missing);
    delivered
}

/// Runs the `BTreeMap` baseline, walking its missing ranges on a new gap with `walk`.
fn run_tree(arrivals: &[Arrival], walk: bool) -> u64 {
    let mut detector = TreeDetector::new();
    let mut out: Vec<Delivered<u64>> = Vec::with_capacity(1024);
    let mut delivered = 0u64;
    for a in arrivals {
        detector.ingest(0, 0, a.seq, a.seq, walk, &mut out);
        delivered += out.len() as u64;
        out.clear();
    }
    black_box(detector.streams.first().map(|s| (s.missing, s.delivered)));
    delivered
}

/// Name, arrival order, and whether a requester walks the missing ranges.
type Scenario = (&'static str, fn() -> Vec<Arrival>, bool);

const SCENARIOS: [Scenario; 4] = [
    ("in_order", in_order, false),
    ("reorder_10pct_w64", reordered_10pct, false),
    ("late_500_per_10k", late_500, false),
    ("loss_1pct_backfill", loss_1pct_backfill, true),
];

fn median_ns_per_frame(run: fn(&[Arrival], bool) -> u64, arrivals: &[Arrival], walk: bool) -> f64 {
    let mut samples: Vec<f64> = (0..31)
        .map(|_| {
            let start = Instant::now();
            let delivered = black_box(run(black_box(arrivals), walk));
            assert_eq!(delivered, FRAMES, "every frame delivered once");
            start.elapsed().as_nanos() as f64 / arrivals.len() as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    for (name, make, walk) in SCENARIOS {
        let arrivals = make();
        let mut group = criterion.benchmark_group(name);
        group.throughput(Throughput::Elements(arrivals.len() as u64));
        group.bench_with_input(BenchmarkId::new("slot_ring", name), &arrivals, |b, a| {
            b.iter(|| run_ring(a, walk))
        });
        group.bench_with_input(BenchmarkId::new("btreemap", name), &arrivals, |b, a| {
            b.iter(|| run_tree(a, walk))
        });
        group.finish();
    }
    criterion.final_summary();

    println!();
    println!("| scenario | slot ring ns/frame | BTreeMap ns/frame | ring / BTreeMap |");
    println!("|---|---:|---:|---:|");
    for (name, make, walk) in SCENARIOS {
        let arrivals = make();
        let ring = median_ns_per_frame(run_ring, &arrivals, walk);
        let tree = median_ns_per_frame(run_tree, &arrivals, walk);
        println!("| {name} | {ring:.2} | {tree:.2} | {:.2}x |", ring / tree);
    }
    println!("(median of 31 runs of {FRAMES} frames each; lower is better)");
}
