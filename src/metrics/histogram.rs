//! A lock-free log-linear histogram of nanosecond durations, and the
//! percentile summary built from it.
//!
//! # Buckets
//!
//! Values below 2^[`SUB_BITS`] ns each have a bucket of their own. Above,
//! every power-of-two range `[2^k, 2^(k+1))` is cut into 2^[`SUB_BITS`]
//! equal buckets, so a bucket is at most 1/8 of its values wide (12.5 %
//! relative precision) whatever the magnitude:
//!
//! ```text
//!   lowest value (ns)  0 1 .. 7 | 8 9 .. 15 | 16 18 .. 30 | 32 36 .. 60 | ... | 2^39 .. 15*2^36
//!   bucket             0 1 .. 7 | 8 9 .. 15 | 16 17 .. 23 | 24 25 .. 31 | ... | 296  .. 303
//!   bucket width       1        | 1         | 2           | 4           | ... | 2^36
//! ```
//!
//! Values of 2^[`MAX_POW`] ns (about 18 minutes) and more land in the last
//! bucket. The buckets are a fixed array of atomics: [`AtomicHistogram::record`]
//! is a bucket index computed from the leading zeros and three `Relaxed`
//! atomic updates, with no lock and no allocation, so the rx thread can call
//! it every cycle.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

/// Sub-buckets per power of two, as a power of two.
pub const SUB_BITS: u32 = 3;
/// Values at or above 2^`MAX_POW` ns share the last bucket.
pub const MAX_POW: u32 = 40;
/// Number of buckets.
pub const BUCKETS: usize = ((MAX_POW - SUB_BITS + 1) as usize) << SUB_BITS;

const SUB_COUNT: u64 = 1 << SUB_BITS;
const MAX_VALUE: u64 = (1 << MAX_POW) - 1;

/// The bucket holding `ns`.
pub const fn bucket_of(ns: u64) -> usize {
    let v = if ns > MAX_VALUE { MAX_VALUE } else { ns };
    if v < SUB_COUNT {
        return v as usize;
    }
    let k = 63 - v.leading_zeros();
    let shift = k - SUB_BITS;
    ((shift as usize) << SUB_BITS) + (v >> shift) as usize
}

/// The smallest value bucket `index` holds.
pub const fn bucket_low(index: usize) -> u64 {
    if index < SUB_COUNT as usize {
        return index as u64;
    }
    let octave = (index >> SUB_BITS) as u32;
    let sub = (index as u64) & (SUB_COUNT - 1);
    (SUB_COUNT + sub) << (octave - 1)
}

/// The largest value bucket `index` holds.
pub const fn bucket_high(index: usize) -> u64 {
    if index + 1 >= BUCKETS {
        return MAX_VALUE;
    }
    bucket_low(index + 1) - 1
}

/// A histogram of nanosecond values that any number of threads may record
/// into and any thread may read, without locks.
pub struct AtomicHistogram {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    max: AtomicU64,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for AtomicHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snapshot = self.snapshot();
        f.debug_struct("AtomicHistogram")
            .field("count", &snapshot.count())
            .field("sum_ns", &snapshot.sum_ns())
            .finish_non_exhaustive()
    }
}

impl AtomicHistogram {
    /// An empty histogram; the only allocation it ever makes.
    pub fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Counts one value of `ns` nanoseconds.
    pub fn record(&self, ns: u64) {
        self.record_n(ns, 1);
    }

    /// Counts `n` values of `ns` nanoseconds each.
    pub fn record_n(&self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(bucket) = self.buckets.get(bucket_of(ns)) {
            bucket.fetch_add(n, Ordering::Relaxed);
        }
        self.sum.fetch_add(ns.saturating_mul(n), Ordering::Relaxed);
        if ns > self.max.load(Ordering::Relaxed) {
            self.max.fetch_max(ns, Ordering::Relaxed);
        }
    }

    /// A copy of the counts, for an exporter or a summary.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_ns: self.sum.load(Ordering::Relaxed),
            max_ns: self.max.load(Ordering::Relaxed),
        }
    }
}

/// The counts of an [`AtomicHistogram`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: Vec<u64>,
    sum_ns: u64,
    max_ns: u64,
}

impl HistogramSnapshot {
    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0, |a, &c| a.saturating_add(c))
    }

    /// Sum of the values recorded, in nanoseconds.
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// Largest value recorded, in nanoseconds.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Adds the counts of `other`, to report several histograms as one.
    pub fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine = mine.saturating_add(*theirs);
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Count in each bucket, by bucket index.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Values below `ns` nanoseconds, exactly when `ns` is a bucket
    /// boundary (every power of two is one).
    pub fn count_below(&self, ns: u64) -> u64 {
        let end = if ns > MAX_VALUE {
            BUCKETS
        } else {
            bucket_of(ns)
        };
        self.counts
            .iter()
            .take(end)
            .fold(0, |a, &c| a.saturating_add(c))
    }

    /// Prometheus buckets with upper bounds of 2^k ns for `k` in `lo..=hi`,
    /// in seconds, then `+Inf` (as `f64::MAX`), each with the count of
    /// values that fell in it alone (the encoder accumulates).
    pub fn prometheus_buckets(&self, lo: u32, hi: u32) -> Vec<(f64, u64)> {
        let mut out = Vec::with_capacity((hi.saturating_sub(lo) + 2) as usize);
        let mut below = 0;
        for k in lo..=hi.min(MAX_POW) {
            let cumulative = self.count_below(1 << k);
            out.push(((1u64 << k) as f64 / 1e9, cumulative.saturating_sub(below)));
            below = cumulative;
        }
        out.push((f64::MAX, self.count().saturating_sub(below)));
        out
    }
}

/// Percentiles of a latency distribution, in nanoseconds, for a final
/// report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencySummary {
    /// Number of values.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value.
    pub max: u64,
}

impl LatencySummary {
    /// The summary of an [`hdrhistogram::Histogram`] recorded in
    /// nanoseconds (for example on a consumer thread).
    pub fn from_hdr(hist: &Histogram<u64>) -> Self {
        if hist.is_empty() {
            return Self::default();
        }
        Self {
            count: hist.len(),
            p50: hist.value_at_quantile(0.5),
            p90: hist.value_at_quantile(0.9),
            p99: hist.value_at_quantile(0.99),
            p999: hist.value_at_quantile(0.999),
            max: hist.max(),
        }
    }

    /// The summary of an [`AtomicHistogram`]'s buckets. Each bucket counts
    /// as its largest value, so percentiles are upper bounds within the
    /// bucket precision (12.5 %); the maximum is exact.
    pub fn from_snapshot(snapshot: &HistogramSnapshot) -> Self {
        let Ok(mut hist) = Histogram::<u64>::new_with_bounds(1, MAX_VALUE, 3) else {
            return Self::default();
        };
        for (index, &count) in snapshot.counts().iter().enumerate() {
            if count > 0 {
                // Within the bounds by construction; a refusal only loses a
                // bucket from the report.
                let _ = hist.record_n(bucket_high(index).max(1), count);
            }
        }
        let mut summary = Self::from_hdr(&hist);
        summary.max = snapshot.max_ns();
        summary.p999 = summary.p999.min(summary.max);
        summary.p99 = summary.p99.min(summary.max);
        summary.p90 = summary.p90.min(summary.max);
        summary.p50 = summary.p50.min(summary.max);
        summary
    }
}

impl fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n={} p50={} p90={} p99={} p99.9={} max={}",
            self.count,
            Nanos(self.p50),
            Nanos(self.p90),
            Nanos(self.p99),
            Nanos(self.p999),
            Nanos(self.max)
        )
    }
}

/// A nanosecond duration printed in a readable unit.
struct Nanos(u64);

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0 as f64;
        match self.0 {
            0..1_000 => write!(f, "{}ns", self.0),
            1_000..1_000_000 => write!(f, "{:.1}us", ns / 1e3),
            1_000_000..1_000_000_000 => write!(f, "{:.1}ms", ns / 1e6),
            _ => write!(f, "{:.2}s", ns / 1e9),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range() {
        assert_eq!(bucket_low(0), 0);
        for index in 0..BUCKETS {
            assert_eq!(bucket_of(bucket_low(index)), index);
            assert_eq!(bucket_of(bucket_high(index)), index);
            if index + 1 < BUCKETS {
                assert_eq!(bucket_high(index) + 1, bucket_low(index + 1));
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn precision_is_one_eighth() {
        for index in SUB_COUNT as usize..BUCKETS {
            let (low, high) = (bucket_low(index), bucket_high(index));
            assert!((high - low + 1) * SUB_COUNT <= low);
        }
    }

    #[test]
    fn powers_of_two_are_bucket_boundaries() {
        for k in 0..MAX_POW {
            assert_eq!(bucket_low(bucket_of(1 << k)), 1 << k);
        }
    }

    #[test]
    fn summary_from_buckets() {
        let hist = AtomicHistogram::new();
        for ns in 1..=1000 {
            hist.record(ns * 1000);
        }
        let snapshot = hist.snapshot();
        assert_eq!(snapshot.count(), 1000);
        assert_eq!(snapshot.count_below(1 << 20), 1000);
        let summary = LatencySummary::from_snapshot(&snapshot);
        assert_eq!(summary.count, 1000);
        assert_eq!(summary.max, 1_000_000);
        let within = |got: u64, want: u64| got >= want && got <= want + want / 8 + 1;
        assert!(within(summary.p50, 500_000), "{summary}");
        assert!(within(summary.p99, 990_000), "{summary}");
        let buckets = snapshot.prometheus_buckets(10, 20);
        assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), 1000);
        assert_eq!(buckets.last().map(|b| b.1), Some(0));
    }
}
