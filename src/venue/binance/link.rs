//! Reconnect pacing: exponential backoff with deterministic jitter.

use std::time::Duration;

/// Exponential reconnect backoff with deterministic jitter.
///
/// Attempt `n` (from 0) waits `min(max, base * 2^n)`, less up to `jitter`
/// of it (a fraction in `[0, 1]`), drawn from a generator seeded at
/// construction, so the same seed gives the same delays.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// Delay of the first attempt.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Fraction of each delay that may be taken off at random.
    pub jitter: f64,
    attempt: u32,
    rng: u64,
}

impl Backoff {
    /// A backoff starting at `base`, capped at `max`, with `jitter` in `[0, 1]`.
    pub fn new(base: Duration, max: Duration, jitter: f64, seed: u64) -> Self {
        Self {
            base,
            max,
            jitter: unit_fraction(jitter),
            attempt: 0,
            rng: seed,
        }
    }

    /// The delay before the next attempt; each call doubles the next one.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(31)).unwrap_or(u32::MAX);
        let full = self.base.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let unit = (self.next_random() >> 11) as f64 / (1u64 << 53) as f64;
        full.mul_f64(1.0 - unit_fraction(self.jitter) * unit)
    }

    /// Attempts since construction or the last [`reset`](Self::reset).
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Starts again from `base` (after a connection has proved healthy).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `x` clamped to `[0, 1]`, with NaN as 0.
fn unit_fraction(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_jitters_and_resets() {
        let (base, max) = (Duration::from_millis(100), Duration::from_secs(1));
        let mut exact = Backoff::new(base, max, 0.0, 1);
        let delays: Vec<u128> = (0..6).map(|_| exact.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        exact.reset();
        assert_eq!(exact.next_delay(), base);
        let mut a = Backoff::new(base, max, 0.5, 42);
        let mut b = Backoff::new(base, max, 0.5, 42);
        for n in 0..40 {
            let (da, db) = (a.next_delay(), b.next_delay());
            assert_eq!(da, db);
            let full = base.saturating_mul(1 << n.min(20)).min(max);
            assert!(da <= full && da >= full / 2, "{da:?} vs {full:?}");
        }
    }
}
