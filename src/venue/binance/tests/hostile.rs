//! Hostile input: thousands of deterministic mutations of depth frames and snapshot bodies,
//! inverted and far-ahead ids. Nothing panics, everything is counted, buffering stays within
//! its bounds, and consumers never see a delta that does not follow its predecessor.

use super::super::{BinanceSession, BinanceSpec, Market, SnapshotResult};
use super::capture::{captures_dir, depth_ids, load_cryptofeed, load_hft};
use super::{Sink, XorShift, check_consumer, depth_frame, snapshot_body};

const MS: u64 = 1_000_000;
const MAX_PENDING: usize = 16;

/// A continuous stream of `n` events over three symbols.
fn synthetic(market: Market, n: usize, rng: &mut XorShift) -> (Vec<String>, Vec<Vec<u8>>) {
    let symbols: Vec<String> = ["aaa", "bbb", "ccc"].map(String::from).to_vec();
    let mut last = [1_000u64; 3];
    let frames = (0..n)
        .map(|k| {
            let s = k % 3;
            let (prev, gap) = (
                last[s],
                if market.is_linked() {
                    1 + rng.below(50)
                } else {
                    1
                },
            );
            let first = prev + gap as u64;
            last[s] = first + rng.below(20) as u64;
            let pu = market.is_linked().then_some(prev);
            depth_frame(&symbols[s], first, last[s], pu)
        })
        .collect();
    (symbols, frames)
}

/// Replaces the number after `"key":` with `value`.
fn set_number(frame: &mut Vec<u8>, key: &str, value: &str) {
    let needle = format!("\"{key}\":");
    let Some(at) = frame
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
    else {
        return;
    };
    let start = at + needle.len();
    let len = frame[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    frame.splice(start..start + len, value.bytes());
}

/// The number after `"key":`, if any.
fn number(frame: &[u8], key: &str) -> Option<u64> {
    let needle = format!("\"{key}\":");
    let at = frame
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())?;
    let digits = frame[at + needle.len()..]
        .iter()
        .take_while(|b| b.is_ascii_digit());
    std::str::from_utf8(&digits.copied().collect::<Vec<u8>>())
        .ok()?
        .parse()
        .ok()
}

/// One mutation of a frame or body.
fn mutate(rng: &mut XorShift, frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    let len = f.len().max(1);
    let numbers = [
        "0",
        "18446744073709551615",
        "18446744073709551616",
        "01",
        "7",
    ];
    match rng.below(9) {
        0 => {
            let i = rng.below(len);
            if let Some(b) = f.get_mut(i) {
                *b = rng.next() as u8;
            }
        }
        1 => f.truncate(rng.below(len)),
        2 => {
            let alphabet = b"{}[]\",:0123456789eE-.\\ uU";
            let junk: Vec<u8> = (0..1 + rng.below(6))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect();
            let at = rng.below(f.len() + 1);
            f.splice(at..at, junk);
        }
        3 => {
            let key = ["U", "u", "pu", "E", "lastUpdateId"][rng.below(5)];
            set_number(&mut f, key, numbers[rng.below(numbers.len())]);
        }
        4 => {
            // Inverted ids: u below U.
            if let (Some(a), Some(b)) = (number(frame, "U"), number(frame, "u")) {
                set_number(&mut f, "U", &(b + 1).to_string());
                set_number(&mut f, "u", &a.to_string());
            }
        }
        5 => {
            // Far ahead.
            if let Some(u) = number(frame, "u") {
                let far = u.saturating_add(1 << (40 + rng.below(20)));
                set_number(&mut f, "u", &(far + 5).to_string());
                set_number(&mut f, "U", &far.to_string());
                set_number(&mut f, "pu", &(far - 1).to_string());
            }
        }
        6 => {
            let i = rng.below(len);
            if let Some(b) = f.get_mut(i) {
                *b ^= 1 << rng.below(8);
            }
        }
        7 => {
            let keys: [(&[u8], &[u8]); 3] = [
                (b"\"pu\":", b"\"px\":"),
                (b"\"s\":", b"\"z\":"),
                (b"\"e\":", b"\"f\":"),
            ];
            let (from, to) = keys[rng.below(3)];
            if let Some(at) = f.windows(from.len()).position(|w| w == from) {
                f.splice(at..at + from.len(), to.iter().copied());
            }
        }
        _ => {
            // A repeated key: the last one wins.
            let extra = format!(",\"u\":{}", rng.next() >> rng.below(64));
            if let Some(at) = f.windows(6).position(|w| w == b"\"b\":[[") {
                f.splice(at.saturating_sub(1)..at.saturating_sub(1), extra.bytes());
            }
        }
    }
    f
}

/// Feeds `rounds` frames, genuine and hostile, and answers snapshot requests with aligned,
/// failed, refused or mutated answers.
fn fuzz(market: Market, symbols: Vec<String>, genuine: &[Vec<u8>], seed: u64, rounds: usize) {
    let mut spec = BinanceSpec::new(market, symbols.clone());
    spec.max_pending = MAX_PENDING;
    spec.pending_bytes = 16 << 10;
    spec.max_inflight = 2;
    spec.weight_budget_per_min = 100_000;
    spec.snapshot_timeout_ns = 2_000 * MS;
    spec.backoff.retry_initial_ns = 10 * MS;
    spec.backoff.retry_max_ns = 100 * MS;
    spec.backoff.rate_limit_ns = 100 * MS;
    spec.backoff.ban_ns = 1_000 * MS;
    let mut s = BinanceSession::new(spec).unwrap();
    let mut sink = Sink::default();
    let mut rng = XorShift(seed);
    let mut newest = vec![None; symbols.len()];
    let mut waiting = Vec::new();
    let (mut t, mut next) = (0u64, 0usize);
    s.on_connected(0);
    for _ in 0..rounds {
        t += 10 * MS;
        let frame = match rng.below(10) {
            0..=6 => {
                let f = genuine[next % genuine.len()].clone();
                next += 1;
                if let Some((name, ids)) = depth_ids(&f)
                    && let Some(i) = s.symbol_index(&name)
                {
                    newest[i] = Some(ids.last);
                }
                f
            }
            7 | 8 => {
                let k = rng.below(genuine.len());
                mutate(&mut rng, &genuine[k])
            }
            _ => {
                let name = &symbols[rng.below(symbols.len())];
                let a = rng.next() >> rng.below(64);
                let b = rng.next() >> rng.below(64);
                depth_frame(name, a, b, Some(rng.next() >> rng.below(64)))
            }
        };
        s.on_text(t, t, &frame, &mut sink);
        for k in 0..symbols.len() {
            assert!(s.stats(k).buffered <= MAX_PENDING);
        }
        while let Some(request) = s.poll_snapshot(t) {
            waiting.push(request.symbol);
        }
        if !waiting.is_empty() && rng.below(3) == 0 {
            let symbol = waiting.remove(0);
            let aligned = newest[symbol].map(snapshot_body).unwrap_or_default();
            let mutated = mutate(&mut rng, &aligned);
            let result = match rng.below(8) {
                0 => SnapshotResult::Failed,
                1 => SnapshotResult::Status {
                    code: 429,
                    retry_after_secs: Some(0),
                },
                2 => SnapshotResult::Status {
                    code: 418,
                    retry_after_secs: None,
                },
                3 => SnapshotResult::Status {
                    code: 500,
                    retry_after_secs: Some(u64::MAX),
                },
                4 => SnapshotResult::Body(&mutated),
                _ => SnapshotResult::Body(&aligned),
            };
            s.on_snapshot(t, symbol, result, &mut sink);
        }
        if s.poll_timeout().is_some_and(|d| d <= t) {
            s.handle_timeout(t, &mut sink);
        }
        let _ = s.poll_reconnect(t);
    }
    let unparsed = check_consumer(&sink.got, market.is_linked()).unwrap();
    let venue = s.venue_stats();
    let all: Vec<_> = (0..symbols.len()).map(|k| s.stats(k)).collect();
    let sum = |f: fn(&super::super::SymbolStats) -> u64| all.iter().map(f).sum::<u64>();
    println!(
        "{market:?} seed {seed:#x}: {rounds} frames, {} malformed, {} inverted ids, {} malformed \
         ids, {} breaks, {} applied, {} snapshots applied, {} unparsed payloads",
        venue.malformed,
        venue.hostile_ids,
        sum(|x| x.malformed),
        sum(|x| x.breaks),
        sum(|x| x.applied),
        sum(|x| x.snapshots_applied),
        unparsed,
    );
    assert_eq!(venue.frames, rounds as u64);
    assert!(venue.malformed > 0 && venue.hostile_ids > 0);
    assert!(sum(|x| x.breaks) > 0 && sum(|x| x.applied) > 0);
    assert!(sum(|x| x.snapshots_applied) > 0 && sum(|x| x.snapshots_failed) > 0);
    assert!(all.iter().all(|x| x.buffered_hwm <= MAX_PENDING));
}

#[test]
fn hostile_synthetic_streams() {
    for (k, market) in [Market::Spot, Market::Usdm, Market::Coinm]
        .into_iter()
        .enumerate()
    {
        let seed = 0x5eed_0000 + k as u64;
        let (symbols, frames) = synthetic(market, 3000, &mut XorShift(seed));
        fuzz(market, symbols, &frames, seed, 6000);
    }
}

#[test]
fn hostile_mutations_of_recordings() {
    let Some(dir) = captures_dir() else {
        return;
    };
    let futures = load_cryptofeed(&dir.join("cryptofeed"), "BINANCE_FUTURES");
    let spot = load_hft(&dir.join("hftbacktest/spot_btcusdt_20240808.gz"));
    for (capture, seed) in [(futures, 0xf00d_u64), (spot, 0xbeef)] {
        let frames: Vec<Vec<u8>> = capture
            .inputs
            .iter()
            .filter_map(|i| match i {
                super::capture::Input::Frame { bytes, .. } => Some(bytes.clone()),
                _ => None,
            })
            .filter(|f| depth_ids(f).is_some())
            .take(3000)
            .collect();
        fuzz(
            capture.market,
            capture.symbols.clone(),
            &frames,
            seed,
            2 * frames.len(),
        );
    }
}
