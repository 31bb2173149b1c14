//! Generated Binance captures: depth events and REST snapshots of several symbols in the
//! [capture format](crate::drive::replay::binance), with chosen events left out, for
//! tests and benchmarks of the replay.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::venue::binance::Market;

/// Events of a symbol written before each of its snapshots, and events between a snapshot's
/// `rest` record and the event it was taken after (those arrive after it and are stale).
const LEAD: usize = 2;
const STALE: usize = 3;
/// Capture time of the first record; records are 1 ms apart.
const START_NS: u64 = 1_700_000_000_000_000_000;

/// The next value of a xorshift64 generator.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Levels as Binance lists them, `["price","quantity"]`, from cents and thousandths.
fn levels<'a>(levels: impl Iterator<Item = (&'a u64, &'a u64)>) -> String {
    let level = |(p, q): (&u64, &u64)| {
        format!(
            r#"["{}.{:02}","{}.{:03}"]"#,
            p / 100,
            p % 100,
            q / 1000,
            q % 1000
        )
    };
    levels.map(level).collect::<Vec<_>>().join(",")
}

/// Writes a generated capture of `events_per_symbol` depth events for each of `symbols`
/// (interleaved round robin) on `market`, in the [capture format](self). Each symbol has its
/// own book (prices around 1000.00); events chain by the market's rule (spot
/// `U == previous u + 1`, futures `pu == previous u`) and each snapshot lists the book exactly
/// as it stood at its `lastUpdateId`.
///
/// Each symbol's first `rest` snapshot follows its first few events and reflects the book a
/// few events ahead, so those events arrive after it and are stale. Each `(symbol, n)` of
/// `drop_update_ids` leaves out that symbol's event `n` (from 0), and another such snapshot
/// follows a few events later, so the resync can complete.
///
/// # Errors
///
/// Writing to `out` failed.
pub fn write_generated_capture(
    out: &mut dyn Write,
    market: Market,
    symbols: &[&str],
    events_per_symbol: usize,
    drop_update_ids: &[(&str, usize)],
) -> io::Result<()> {
    let last = events_per_symbol.saturating_sub(1);
    let mut plans = Vec::with_capacity(symbols.len());
    for (index, name) in symbols.iter().enumerate() {
        let dropped: Vec<usize> = (drop_update_ids.iter())
            .filter(|(s, _)| s.eq_ignore_ascii_case(name))
            .map(|&(_, n)| n)
            .collect();
        // (written after event, taken after event) of each snapshot.
        let points: Vec<(usize, usize)> = std::iter::once(LEAD)
            .chain(dropped.iter().map(|n| n.saturating_add(LEAD)))
            .map(|w| (w.min(last), w.saturating_add(STALE).min(last)))
            .collect();
        let (upper, lower) = (name.to_ascii_uppercase(), name.to_ascii_lowercase());
        let mut bids: BTreeMap<u64, u64> = (1..=5).map(|o| (100_000 - o, 1_000 * o)).collect();
        let mut asks: BTreeMap<u64, u64> = (1..=5).map(|o| (100_000 + o, 1_000 * o)).collect();
        let mut last_id = 1_000_000 * (index as u64 + 1);
        let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1);
        // The lines written after each event: the event unless dropped, then due snapshots.
        let mut timeline: Vec<Vec<String>> = Vec::with_capacity(events_per_symbol);
        for n in 0..events_per_symbol {
            let time_ms = START_NS / 1_000_000 + (n * symbols.len()) as u64;
            let mut changed = (BTreeMap::new(), BTreeMap::new());
            let changes = 1 + xorshift(&mut rng) % 3;
            for _ in 0..changes {
                let bid = xorshift(&mut rng).is_multiple_of(2);
                let offset = 1 + xorshift(&mut rng) % 8;
                let removed = xorshift(&mut rng).is_multiple_of(4);
                let qty = (1 + xorshift(&mut rng) % 5_000) * u64::from(!removed);
                // Bids below 1000.00, asks above: the book never crosses.
                let (side, changed, price) = match bid {
                    true => (&mut bids, &mut changed.0, 100_000 - offset),
                    false => (&mut asks, &mut changed.1, 100_000 + offset),
                };
                side.insert(price, qty);
                side.retain(|_, q| *q > 0);
                changed.insert(price, qty);
            }
            let prev = last_id;
            let first = prev + 1 + u64::from(market != Market::Spot) * (xorshift(&mut rng) % 3);
            last_id = first + changes - 1;
            let (b, a) = (levels(changed.0.iter().rev()), levels(changed.1.iter()));
            let (linked, times) = match market {
                Market::Spot => (String::new(), String::new()),
                Market::Usdm | Market::Coinm => (
                    format!(r#""T":{time_ms},"pu":{prev},"#),
                    format!(r#""E":{time_ms},"T":{time_ms},"#),
                ),
            };
            let ids = format!(r#""s":"{upper}","U":{first},"u":{last_id},"#);
            let data =
                format!(r#"{{"e":"depthUpdate","E":{time_ms},{linked}{ids}"b":[{b}],"a":[{a}]}}"#);
            let frame = format!(r#"{{"stream":"{lower}@depth@100ms","data":{data}}}"#);
            let kept = !dropped.contains(&n);
            timeline.push(kept.then(|| format!("ws {frame}")).into_iter().collect());
            for &(written, _) in points.iter().filter(|p| p.1 == n) {
                let (b, a) = (levels(bids.iter().rev()), levels(asks.iter()));
                let body = format!(r#""lastUpdateId":{last_id},{times}"bids":[{b}],"asks":[{a}]"#);
                if let Some(lines) = timeline.get_mut(written) {
                    lines.push(format!("rest {upper} {{{body}}}"));
                }
            }
        }
        plans.push(timeline);
    }
    let mut ts = START_NS;
    for n in 0..events_per_symbol {
        for line in plans
            .iter_mut()
            .filter_map(|t| t.get_mut(n))
            .flat_map(std::mem::take)
        {
            writeln!(out, "{ts} {line}")?;
            ts += 1_000_000;
        }
    }
    out.flush()
}
