//! Binance replay: a capture of one combined-stream WebSocket connection and its REST depth
//! snapshots, run through the live [`BinanceSession`] with the capture's times as the clock.
//!
//! # Capture format
//!
//! Plain text, one record a line (`\n` or `\r\n`; blank lines are skipped):
//!
//! ```text
//! <recv_ns> ws <combined-stream frame JSON>
//! <recv_ns> rest <SYMBOL> <snapshot JSON>
//! ```
//!
//! - `recv_ns`: receive time, nanoseconds since the Unix epoch, in decimal.
//! - `ws`: a WebSocket text frame as received (`{"stream":"btcusdt@depth@100ms","data":{..}}`).
//! - `rest`: a REST depth snapshot response body as received, for the symbol named (any case).
//!
//! # Replay
//!
//! The connection opens at the first `ws` record. Each snapshot request is answered with the
//! next unused `rest` record of its symbol: at once if already read, else when reached (unless
//! the request timed out first; the record then answers the next one). A request with no `rest`
//! record left for its symbol fails; the session backs off and asks again as the capture's
//! clock advances, until the end of the file. Reconnections are not replayed. The same file
//! always gives the same JSON lines.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io::{self, Write};
use std::path::Path;

use thiserror::Error;

use crate::publish::Event;
use crate::publish::jsonl::{JsonlFormatter, StreamNames};
use crate::venue::Emit;
use crate::venue::binance::{
    BinanceSession, BinanceSpec, Market, SnapshotResult, SpecError, SymbolState, SymbolStats,
    VenueStats,
};

/// Why a Binance replay failed.
#[derive(Debug, Error)]
pub enum ReplayBinanceError {
    /// The capture (at this path) could not be read.
    #[error("reading {0}: {1}")]
    Read(String, #[source] io::Error),
    /// A line (numbered from 1) is not a capture record, and why.
    #[error("line {0}: {1}")]
    Malformed(usize, String),
    /// The market and symbols do not make a valid venue.
    #[error("{0}")]
    Spec(#[from] SpecError),
    /// Writing the JSON lines failed.
    #[error("writing output: {0}")]
    Output(#[from] io::Error),
}

/// One symbol's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolSummary {
    /// Lowercase symbol (the stream name in the JSON lines).
    pub name: String,
    /// Where the symbol stands at the end.
    pub state: SymbolState,
    /// Deltas delivered, each proven continuous.
    pub applied: u64,
    /// Times sync was lost after a snapshot was applied.
    pub resyncs: u64,
    /// Continuity breaks seen.
    pub breaks: u64,
    /// Events dropped as older than the snapshot.
    pub stale_dropped: u64,
    /// Every counter of the symbol.
    pub stats: SymbolStats,
}

/// What a Binance replay saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BinanceReplaySummary {
    /// Records in the capture.
    pub records: u64,
    /// `ws` records (text frames).
    pub frames: u64,
    /// Diff-depth events among them.
    pub depth_events: u64,
    /// `rest` records.
    pub snapshots: u64,
    /// Snapshot requests answered as failed (no `rest` record left).
    pub unanswered: u64,
    /// The connection's counters.
    pub venue: VenueStats,
    /// Per symbol, in the order given.
    pub symbols: Vec<SymbolSummary>,
}

impl fmt::Display for BinanceReplaySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, fr, de, sn) = (self.records, self.frames, self.depth_events, self.snapshots);
        let (ma, un) = (self.venue.malformed, self.unanswered);
        write!(f, "records {r}: {fr} ws ({de} depth, {ma} malformed)")?;
        write!(f, ", {sn} rest ({un} requests unanswered)")?;
        for s in &self.symbols {
            let (name, st, ap) = (&s.name, s.state, s.applied);
            let (rs, br, sd) = (s.resyncs, s.breaks, s.stale_dropped);
            write!(f, "\nsymbol {name}: {st:?}, applied {ap}, resyncs {rs}")?;
            write!(f, ", breaks {br}, stale {sd}")?;
        }
        Ok(())
    }
}

/// One parsed capture record: time, symbol (`rest` only) and JSON body.
type Record<'a> = (u64, Option<&'a [u8]>, &'a [u8]);

/// Parses one non-blank line (`line` is its number, for errors).
fn parse_line(line: usize, text: &[u8]) -> Result<Record<'_>, ReplayBinanceError> {
    let bad = |reason: String| ReplayBinanceError::Malformed(line, reason);
    let mut parts = text.splitn(3, |&b| b == b' ');
    let mut next = || parts.next().unwrap_or_default();
    let (ts, kind, rest) = (next(), next(), next());
    let parsed = std::str::from_utf8(ts).ok().and_then(|t| t.parse().ok());
    let ts = parsed.ok_or_else(|| bad(format!("bad recv_ns {:?}", String::from_utf8_lossy(ts))))?;
    let (symbol, body) = match kind {
        b"ws" => (None, rest),
        b"rest" => {
            let mut parts = rest.splitn(2, |&b| b == b' ');
            let symbol = parts.next().filter(|s| !s.is_empty());
            let symbol = symbol.ok_or_else(|| bad("rest record without a symbol".into()))?;
            (Some(symbol), parts.next().unwrap_or_default())
        }
        other => {
            let kind = String::from_utf8_lossy(other);
            return Err(bad(format!("unknown record kind {kind:?} (ws or rest)")));
        }
    };
    match body.iter().all(u8::is_ascii_whitespace) {
        true => Err(bad("record without a JSON body".into())),
        false => Ok((ts, symbol, body)),
    }
}

/// Consumer events, written as JSON lines to the output if any; the first write error is kept.
struct Sink<'w>(
    JsonlFormatter,
    StreamNames,
    Option<&'w mut dyn Write>,
    Option<io::Error>,
);

impl Emit for Sink<'_> {
    fn emit(&mut self, event: &Event<'_>) {
        if self.3.is_none()
            && let Some(out) = self.2.as_mut()
            && let Err(e) = self.0.write(&self.1, event, out)
        {
            self.3 = Some(e);
        }
    }
}

/// Replays the Binance capture at `path` for `symbols` (any case) of `market`, writing the
/// consumer stream as JSON lines (venue `binance`, stream = lowercase symbol) to `jsonl` when
/// given. Every line is checked before anything is replayed.
///
/// # Errors
///
/// The file cannot be read, a line is malformed (the error names it), the venue is invalid,
/// or writing the JSON lines failed.
pub fn replay_binance(
    path: &Path,
    market: Market,
    symbols: &[&str],
    jsonl: Option<&mut dyn Write>,
) -> Result<BinanceReplaySummary, ReplayBinanceError> {
    let data =
        std::fs::read(path).map_err(|e| ReplayBinanceError::Read(path.display().to_string(), e))?;
    let lower: Vec<String> = symbols.iter().map(|s| s.to_ascii_lowercase()).collect();
    let spec = BinanceSpec::new(market, lower.clone());
    let timeout_ns = spec.snapshot_timeout_ns;
    let mut session = BinanceSession::new(spec)?;
    let mut records = Vec::new();
    for (i, text) in data.split(|&b| b == b'\n').enumerate() {
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if !text.iter().all(u8::is_ascii_whitespace) {
            records.push(parse_line(i + 1, text)?);
        }
    }
    let symbol_of =
        |name: &[u8]| (lower.iter()).position(|l| name.eq_ignore_ascii_case(l.as_bytes()));
    // `rest` records not reached yet, per symbol.
    let mut left = vec![0u64; lower.len()];
    for s in records.iter().filter_map(|r| r.1.and_then(symbol_of)) {
        left.get_mut(s).into_iter().for_each(|n| *n += 1);
    }
    let mut names = StreamNames::new();
    for (i, name) in lower.iter().enumerate() {
        names.set(session.stream_id(i), "binance", name);
    }
    let mut sink = Sink(JsonlFormatter::new(), names, jsonl, None);
    let mut summary = BinanceReplaySummary::default();
    // Bodies reached but not asked for yet, and the time of each request waiting for one.
    let mut ready: Vec<VecDeque<&[u8]>> = vec![VecDeque::new(); lower.len()];
    let mut inflight: Vec<Option<u64>> = vec![None; lower.len()];
    let mut now = 0u64;
    for (ts, symbol, body) in records {
        now = now.max(ts);
        summary.records += 1;
        if session.poll_timeout().is_some_and(|t| t <= now) {
            session.handle_timeout(now, &mut sink);
        }
        // Requests the session expired: their bodies wait for the next ones.
        let expired = |t: &&mut Option<u64>| t.is_some_and(|t| now >= t.saturating_add(timeout_ns));
        inflight.iter_mut().filter(expired).for_each(|t| *t = None);
        match symbol.map(symbol_of) {
            None => {
                if !session.is_connected() {
                    session.on_connected(now);
                }
                summary.frames += 1;
                session.on_text(now, ts, body, &mut sink);
            }
            Some(None) => summary.snapshots += 1,
            Some(Some(s)) => {
                summary.snapshots += 1;
                left.get_mut(s).into_iter().for_each(|n| *n -= 1);
                match inflight.get_mut(s).and_then(Option::take) {
                    Some(_) => session.on_snapshot(now, s, SnapshotResult::Body(body), &mut sink),
                    None => ready.get_mut(s).into_iter().for_each(|q| q.push_back(body)),
                }
            }
        }
        // Bounded: a failed request backs off, so each symbol starts at most two here.
        for _ in 0..=2 * lower.len() {
            let Some(request) = session.poll_snapshot(now) else {
                break;
            };
            let s = request.symbol;
            if let Some(body) = ready.get_mut(s).and_then(VecDeque::pop_front) {
                session.on_snapshot(now, s, SnapshotResult::Body(body), &mut sink);
            } else if left.get(s).is_some_and(|&n| n > 0) {
                inflight.get_mut(s).into_iter().for_each(|t| *t = Some(now));
            } else {
                summary.unanswered += 1;
                session.on_snapshot(now, s, SnapshotResult::Failed, &mut sink);
            }
        }
        if let Some(e) = sink.3.take() {
            return Err(e.into());
        }
    }
    if let Some(out) = sink.2.as_mut() {
        out.flush()?;
    }
    summary.venue = session.venue_stats();
    summary.depth_events = summary.venue.depth_events;
    for (i, name) in lower.into_iter().enumerate() {
        let stats = session.stats(i);
        summary.symbols.push(SymbolSummary {
            name,
            state: session.state(i),
            applied: stats.applied,
            resyncs: stats.resyncs,
            breaks: stats.breaks,
            stale_dropped: stats.dropped_stale,
            stats,
        });
    }
    Ok(summary)
}

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
