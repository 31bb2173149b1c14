//! Generated order books for the simulator: a real book per symbol, so a
//! snapshot taken at any moment matches the ids of the events before it.
//!
//! Prices are whole cents around a centre that walks by one cent; each event
//! sets or removes one to four levels near the top, and removes levels that
//! the centre has crossed or that drifted too far, so both sides stay apart
//! and bounded.

use std::collections::BTreeMap;

use super::faults::Rng;
use super::feed::{BookStyle, GenConfig, Ids};

/// Events applied to a generated book before anything is published, so the
/// initial book is older than every event a client can see.
const WARMUP: u32 = 8;

/// A generated order book: prices in cents, quantities in thousandths.
#[derive(Debug)]
pub(crate) struct Book {
    style: BookStyle,
    name: String,
    bids: BTreeMap<u64, u64>,
    asks: BTreeMap<u64, u64>,
    center: u64,
    levels: u64,
    pub(crate) last_id: u64,
    rng: Rng,
    /// `lastUpdateId` and body of the book before warm-up: the stale snapshot.
    pub(crate) initial: (u64, String),
}

impl Book {
    pub(crate) fn new(config: &GenConfig, index: usize, name: &str) -> Self {
        let mut rng =
            Rng::new(config.seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let levels = config.levels.clamp(1, 1000) as u64;
        let center = 1_000_000 + 100_000 * (index as u64 % 50) + rng.below(10_000);
        let base = match config.style {
            BookStyle::Spot => 1_000_000 * (index as u64 + 1),
            BookStyle::Futures => 5_000_000_000 + 1_000_000 * (index as u64),
        };
        let mut book = Self {
            style: config.style,
            name: name.to_owned(),
            bids: (1..=levels)
                .map(|o| (center - o, 1 + rng.below(5_000)))
                .collect(),
            asks: (1..=levels)
                .map(|o| (center + o, 1 + rng.below(5_000)))
                .collect(),
            center,
            levels,
            last_id: base,
            rng,
            initial: (base, String::new()),
        };
        book.initial.1 = book.snapshot(usize::MAX, 0);
        for _ in 0..WARMUP {
            book.next_event(0);
        }
        book
    }

    /// Changes the book and returns the event JSON and its ids.
    pub(crate) fn next_event(&mut self, time_ms: u64) -> (String, Ids) {
        let mut changes: BTreeMap<(bool, u64), u64> = BTreeMap::new();
        let step = self.rng.below(5);
        if step == 0 && self.center > self.levels * 4 {
            self.center -= 1;
        } else if step == 1 {
            self.center += 1;
        }
        let (center, far) = (self.center, self.levels * 2);
        for (&p, _) in self
            .bids
            .iter()
            .filter(|(p, _)| **p >= center || center - **p > far)
        {
            changes.insert((true, p), 0);
        }
        for (&p, _) in self
            .asks
            .iter()
            .filter(|(p, _)| **p <= center || **p - center > far)
        {
            changes.insert((false, p), 0);
        }
        for _ in 0..=self.rng.below(4) {
            let bid = self.rng.below(2) == 0;
            let offset = 1 + self.rng.below(self.levels);
            let price = if bid {
                center - offset
            } else {
                center + offset
            };
            let qty = if self.rng.chance(0.25) {
                0
            } else {
                1 + self.rng.below(5_000)
            };
            changes.insert((bid, price), qty);
        }
        let mut sides = (String::new(), String::new());
        for (&(bid, price), &qty) in &changes {
            let (side, text) = if bid {
                (&mut self.bids, &mut sides.0)
            } else {
                (&mut self.asks, &mut sides.1)
            };
            if qty == 0 {
                side.remove(&price);
            } else {
                side.insert(price, qty);
            }
            push_level(text, price, qty);
        }
        let n = changes.len() as u64;
        let prev = self.last_id;
        let first = match self.style {
            BookStyle::Spot => prev + 1,
            BookStyle::Futures => prev + 2 + self.rng.below(4),
        };
        self.last_id =
            first + n - 1 + self.rng.below(3) * u64::from(self.style == BookStyle::Futures);
        let (u, s) = (self.last_id, &self.name);
        let json = match self.style {
            BookStyle::Spot => format!(
                r#"{{"e":"depthUpdate","E":{time_ms},"s":"{s}","U":{first},"u":{u},"b":[{}],"a":[{}]}}"#,
                sides.0, sides.1
            ),
            BookStyle::Futures => format!(
                r#"{{"e":"depthUpdate","E":{time_ms},"T":{time_ms},"s":"{s}","U":{first},"u":{u},"pu":{prev},"b":[{}],"a":[{}]}}"#,
                sides.0, sides.1
            ),
        };
        (json, Ids { first, last: u })
    }

    /// The REST snapshot body with the best `limit` levels of each side.
    pub(crate) fn snapshot(&self, limit: usize, time_ms: u64) -> String {
        let mut bids = String::new();
        let mut asks = String::new();
        self.bids
            .iter()
            .rev()
            .take(limit)
            .for_each(|(&p, &q)| push_level(&mut bids, p, q));
        self.asks
            .iter()
            .take(limit)
            .for_each(|(&p, &q)| push_level(&mut asks, p, q));
        let times = match self.style {
            BookStyle::Spot => String::new(),
            BookStyle::Futures => format!(r#""E":{time_ms},"T":{time_ms},"#),
        };
        format!(
            r#"{{"lastUpdateId":{},{times}"bids":[{bids}],"asks":[{asks}]}}"#,
            self.last_id
        )
    }
}

fn push_level(out: &mut String, price: u64, qty: u64) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(&format!(
        r#"["{}.{:02}","{}.{:03}"]"#,
        price / 100,
        price % 100,
        qty / 1000,
        qty % 1000
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::binance::record::find_u64;

    fn config(style: BookStyle) -> GenConfig {
        GenConfig {
            symbols: vec!["X".into()],
            style,
            rate: 1.0,
            count: None,
            levels: 5,
            seed: 3,
        }
    }

    #[test]
    fn ids_chain_by_style_and_snapshots_carry_the_last_id() {
        for style in [BookStyle::Spot, BookStyle::Futures] {
            let mut book = Book::new(&config(style), 0, "X");
            assert!(book.initial.0 + u64::from(WARMUP) <= book.last_id);
            let mut prev = book.last_id;
            for _ in 0..200 {
                let (json, ids) = book.next_event(1);
                assert!(ids.first <= ids.last);
                match style {
                    BookStyle::Spot => assert_eq!(ids.first, prev + 1),
                    BookStyle::Futures => {
                        assert!(ids.first > prev + 1);
                        assert_eq!(find_u64(&json, "pu"), Some(prev));
                    }
                }
                prev = ids.last;
                let best_bid = book.bids.keys().next_back().copied().unwrap_or(0);
                let best_ask = book.asks.keys().next().copied().unwrap_or(u64::MAX);
                assert!(best_bid < best_ask && book.bids.len() <= 11 && book.asks.len() <= 11);
            }
            assert_eq!(find_u64(&book.snapshot(3, 1), "lastUpdateId"), Some(prev));
        }
    }
}
