//! Loss injection in front of the venues: the received batch, dropped, duplicated, delayed
//! and reordered by seeded chance before a venue sees it.
//!
//! It sits where the kernel's datagrams enter the loop, so chaos runs exercise the real
//! sockets, the real batches and the real recovery, whatever publishes the feed (a
//! simulator without faults of its own, or a third-party server). Off unless configured
//! (`[chaos]`, for tests); the daemon logs a warning at start when it is on.
//!
//! Memory is fixed: a datagram delayed or held back for reordering is copied into one of
//! [`HELD`] slots of `max_datagram` bytes; one that finds every slot taken is passed on at
//! once (and counted), never allocated for.

use crate::time::{Mono, Wall};
use crate::venue::Received;

/// Datagrams held back (delayed or reordered) at once, per endpoint.
pub const HELD: usize = 64;

/// What to do to the datagrams, each a probability per datagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChaosSpec {
    /// Seed of the generator: the same seed gives the same faults for the same input.
    pub seed: u64,
    /// Drop the datagram.
    pub drop: f64,
    /// Start a burst: this datagram and the next `burst_len - 1` are dropped.
    pub burst: f64,
    /// Datagrams in a burst.
    pub burst_len: u32,
    /// Hand the datagram over twice.
    pub duplicate: f64,
    /// Hold the datagram back until after the next one.
    pub reorder: f64,
    /// Hold the datagram back for `delay_ns`.
    pub delay: f64,
    /// How long a delayed datagram is held.
    pub delay_ns: u64,
}

impl Default for ChaosSpec {
    fn default() -> Self {
        Self {
            seed: 1,
            drop: 0.0,
            burst: 0.0,
            burst_len: 10,
            duplicate: 0.0,
            reorder: 0.0,
            delay: 0.0,
            delay_ns: 5_000_000,
        }
    }
}

/// A [`ChaosSpec`] that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "loss injection setting {item:?}: {why}; expected comma-separated key=value with keys seed, drop, burst, burst_len, duplicate, reorder, delay, delay_ms"
)]
pub struct ChaosParseError {
    /// The item that could not be read.
    pub item: String,
    /// Why.
    pub why: &'static str,
}

impl ChaosSpec {
    /// Reads `seed=7,drop=0.02,burst=0.001,burst_len=10,duplicate=0.01,reorder=0.01,
    /// delay=0.01,delay_ms=5` (any subset; the rest default). Probabilities are 0..=1.
    ///
    /// # Errors
    ///
    /// An unknown key, a value that is not a number, or a probability outside 0..=1.
    pub fn parse(text: &str) -> Result<Self, ChaosParseError> {
        let mut spec = Self::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let fail = |why| ChaosParseError {
                item: item.to_string(),
                why,
            };
            let (key, value) = item.split_once('=').ok_or_else(|| fail("not key=value"))?;
            let int = || {
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| fail("not a whole number"))
            };
            let p = || match value.trim().parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(fail("not a probability from 0 to 1")),
            };
            match key.trim() {
                "seed" => spec.seed = int()?,
                "drop" => spec.drop = p()?,
                "burst" => spec.burst = p()?,
                "burst_len" => {
                    spec.burst_len = u32::try_from(int()?).map_err(|_| fail("too large"))?;
                }
                "duplicate" => spec.duplicate = p()?,
                "reorder" => spec.reorder = p()?,
                "delay" => spec.delay = p()?,
                "delay_ms" => spec.delay_ns = int()?.saturating_mul(1_000_000),
                _ => return Err(fail("unknown key")),
            }
        }
        Ok(spec)
    }
}

/// What the injector did, for the log and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChaosStats {
    /// Datagrams dropped (bursts included).
    pub dropped: u64,
    /// Datagrams handed over a second time.
    pub duplicated: u64,
    /// Datagrams held back until after the next one.
    pub reordered: u64,
    /// Datagrams held back for the delay.
    pub delayed: u64,
    /// Datagrams that were to be held but found every slot taken: passed on at once.
    pub hold_full: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    len: usize,
    recv: Wall,
    /// Released at this time (delay), or after the next datagram (`None`: reorder).
    until: Option<Mono>,
}

/// The injector of one endpoint. See the [module documentation](self).
#[derive(Debug)]
pub struct Chaos {
    spec: ChaosSpec,
    rng: u64,
    burst_left: u32,
    bytes: Box<[u8]>,
    slots: [Option<Slot>; HELD],
    max_datagram: usize,
    /// What it did.
    pub stats: ChaosStats,
}

impl Chaos {
    /// An injector for datagrams of up to `max_datagram` bytes.
    pub fn new(spec: ChaosSpec, max_datagram: usize) -> Self {
        Self {
            spec,
            // xorshift must not start at zero.
            rng: spec.seed.max(1),
            burst_left: 0,
            bytes: vec![0; HELD * max_datagram].into_boxed_slice(),
            slots: [None; HELD],
            max_datagram,
            stats: ChaosStats::default(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        // 53 random bits as a fraction in [0, 1).
        ((self.rng >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn hold(&mut self, d: &Received<'_>, until: Option<Mono>) -> bool {
        if d.bytes.len() > self.max_datagram {
            return false;
        }
        let Some(i) = self.slots.iter().position(Option::is_none) else {
            self.stats.hold_full += 1;
            return false;
        };
        let start = i * self.max_datagram;
        let Some(dst) = self.bytes.get_mut(start..start + d.bytes.len()) else {
            return false;
        };
        dst.copy_from_slice(d.bytes);
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = Some(Slot {
                len: d.bytes.len(),
                recv: d.recv,
                until,
            });
        }
        true
    }

    /// Passes `batch` through the faults at `now`, calling `out` with every datagram to
    /// hand over, in the order the venue is to see them (held ones that fall due first).
    pub fn apply(&mut self, now: Mono, batch: &[Received<'_>], mut out: impl FnMut(Received<'_>)) {
        self.release(now, false, &mut out);
        for d in batch {
            if self.burst_left > 0 {
                self.burst_left -= 1;
                self.stats.dropped += 1;
                continue;
            }
            if self.chance(self.spec.burst) {
                self.burst_left = self.spec.burst_len.saturating_sub(1);
                self.stats.dropped += 1;
                continue;
            }
            if self.chance(self.spec.drop) {
                self.stats.dropped += 1;
                continue;
            }
            if self.chance(self.spec.reorder) && self.hold(d, None) {
                self.stats.reordered += 1;
                continue;
            }
            if self.chance(self.spec.delay) {
                let until = Mono::from_nanos(now.as_nanos().saturating_add(self.spec.delay_ns));
                if self.hold(d, Some(until)) {
                    self.stats.delayed += 1;
                    continue;
                }
            }
            out(*d);
            // What was held back for reordering goes after the one that overtook it.
            self.release(now, true, &mut out);
            if self.chance(self.spec.duplicate) {
                self.stats.duplicated += 1;
                out(*d);
            }
        }
    }

    /// Hands over the held datagrams that are due at `now` (all reordered ones too when
    /// `overtaken`); the loop calls it every cycle, so a delay ends even on a quiet feed.
    pub fn release(&mut self, now: Mono, overtaken: bool, out: &mut impl FnMut(Received<'_>)) {
        for i in 0..HELD {
            let Some(Some(slot)) = self.slots.get(i).copied() else {
                continue;
            };
            let due = match slot.until {
                Some(t) => t <= now,
                None => overtaken,
            };
            if !due {
                continue;
            }
            if let Some(s) = self.slots.get_mut(i) {
                *s = None;
            }
            let start = i * self.max_datagram;
            if let Some(bytes) = self.bytes.get(start..start + slot.len) {
                out(Received {
                    bytes,
                    recv: slot.recv,
                });
            }
        }
    }

    /// When the next delayed datagram falls due.
    pub fn next_due(&self) -> Option<Mono> {
        self.slots.iter().flatten().filter_map(|s| s.until).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(range: std::ops::Range<u8>) -> Vec<Vec<u8>> {
        range.map(|i| vec![i; 4]).collect()
    }

    fn run(chaos: &mut Chaos, now: u64, data: &[Vec<u8>]) -> Vec<u8> {
        let received: Vec<Received<'_>> = data
            .iter()
            .map(|b| Received {
                bytes: b,
                recv: Wall::from_nanos(now),
            })
            .collect();
        let mut seen = Vec::new();
        chaos.apply(Mono::from_nanos(now), &received, |d| seen.push(d.bytes[0]));
        seen
    }

    #[test]
    fn the_same_seed_gives_the_same_faults_and_nothing_is_invented() {
        let spec = ChaosSpec {
            seed: 7,
            drop: 0.1,
            duplicate: 0.1,
            reorder: 0.1,
            ..ChaosSpec::default()
        };
        let data = batch(0..200);
        let a = run(&mut Chaos::new(spec, 16), 1, &data);
        let b = run(&mut Chaos::new(spec, 16), 1, &data);
        assert_eq!(a, b);
        let mut chaos = Chaos::new(spec, 16);
        let seen = run(&mut chaos, 1, &data);
        let s = chaos.stats;
        assert!(
            s.dropped > 5 && s.duplicated > 5 && s.reordered > 5,
            "{s:?}"
        );
        // Every datagram seen was sent; the count adds up.
        assert!(seen.iter().all(|i| *i < 200));
        let held = chaos.slots.iter().flatten().count() as u64;
        assert_eq!(seen.len() as u64, 200 - s.dropped + s.duplicated - held);
        // Reordered: some datagram comes after a later one.
        assert!(seen.windows(2).any(|w| w[0] > w[1]));
    }

    #[test]
    fn bursts_drop_runs_and_delays_end_on_time() {
        let spec = ChaosSpec {
            seed: 3,
            burst: 0.02,
            burst_len: 5,
            ..ChaosSpec::default()
        };
        let mut chaos = Chaos::new(spec, 16);
        let data = batch(0..250);
        let seen = run(&mut chaos, 1, &data);
        assert_eq!(chaos.stats.dropped % 5, 0, "{:?}", chaos.stats);
        assert!(chaos.stats.dropped >= 5);
        assert_eq!(seen.len() as u64, 250 - chaos.stats.dropped);

        let spec = ChaosSpec {
            seed: 3,
            delay: 1.0,
            delay_ns: 100,
            ..ChaosSpec::default()
        };
        let mut chaos = Chaos::new(spec, 16);
        assert!(run(&mut chaos, 1_000, &batch(0..3)).is_empty());
        assert_eq!(chaos.next_due(), Some(Mono::from_nanos(1_100)));
        let mut late = Vec::new();
        chaos.release(Mono::from_nanos(1_099), false, &mut |d| {
            late.push(d.bytes[0])
        });
        assert!(late.is_empty());
        chaos.release(Mono::from_nanos(1_100), false, &mut |d| {
            late.push(d.bytes[0])
        });
        assert_eq!(late.len(), 3);
        assert_eq!(chaos.next_due(), None);
    }

    #[test]
    fn settings_are_read_and_mistakes_named() {
        let spec = ChaosSpec::parse("seed=9, drop=0.02,burst_len=4,delay_ms=3").unwrap();
        assert_eq!(
            spec,
            ChaosSpec {
                seed: 9,
                drop: 0.02,
                burst_len: 4,
                delay_ns: 3_000_000,
                ..ChaosSpec::default()
            }
        );
        for bad in ["drop=2", "lose=0.1", "seed", "burst_len=x"] {
            let e = ChaosSpec::parse(bad).unwrap_err();
            assert!(
                e.to_string().contains(bad.split('=').next().unwrap()),
                "{e}"
            );
        }
    }

    #[test]
    fn a_full_hold_passes_datagrams_on_at_once() {
        let spec = ChaosSpec {
            delay: 1.0,
            delay_ns: 1_000_000,
            ..ChaosSpec::default()
        };
        let mut chaos = Chaos::new(spec, 16);
        let data: Vec<Vec<u8>> = (0..HELD + 10).map(|i| vec![i as u8; 4]).collect();
        let seen = run(&mut chaos, 1, &data);
        assert_eq!(seen.len(), 10);
        assert_eq!(chaos.stats.hold_full, 10);
    }
}
