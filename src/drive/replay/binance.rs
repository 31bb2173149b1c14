//! Binance replay: a capture of one combined-stream WebSocket connection and its REST depth
//! snapshots, run through a [`BinanceVenue`] and the [replay driver](super) with the
//! capture's times as the clock.
//!
//! # Capture format
//!
//! Text, one record a line (`\n` or `\r\n`; blank lines are skipped), plain or gzip or
//! zstd (told by the first bytes); a line is 16 MiB at most:
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
//! clock advances, until the end of the file. The venue never rotates the connection for
//! silence or age (a capture cannot reconnect). The same file always gives the same JSON
//! lines.
//!
//! A file is read twice, a line at a time: once to check every line and count each
//! symbol's snapshots, once to replay. Standard input (`-`) is read once: each line is
//! checked as it comes (a malformed line ends the replay with an error after what came
//! before it was replayed), and a snapshot request with no record read yet waits for one
//! until the request's own deadline on the capture's clock, as a live fetch would. Memory
//! does not grow with the input either way.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

use thiserror::Error;

use super::{Pacing, Record, Source};
use crate::capture::{open_decompressed, stdin_decompressed};
use crate::publish::Event;
use crate::publish::jsonl::{JsonlFormatter, StreamNames};
use crate::sequencer::StreamState;
use crate::venue::Emit;
use crate::venue::binance::{
    BinanceSpec, BinanceVenue, Market, SpecError, SymbolStats, VenueStats,
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
    pub state: StreamState,
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
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(bad("record without a JSON body".into()));
    }
    Ok(match symbol {
        None => Record::Frame { ts, text: body },
        Some(stream) => Record::Snapshot { ts, stream, body },
    })
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
/// given. `path` `-` reads standard input. Every line of a file is checked before anything
/// is replayed; standard input is checked as it is read.
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
    let piped = path.as_os_str() == "-";
    // First pass (a file): every line checked, each symbol's snapshots counted.
    let counts = if piped {
        None
    } else {
        let mut lines = Lines::open(path)?;
        let mut counts: Vec<(String, u64)> = Vec::new();
        while let Some(number) = lines.next()? {
            if let Record::Snapshot { stream, .. } = parse_line(number, &lines.line)? {
                let name = String::from_utf8_lossy(stream).to_ascii_lowercase();
                match counts.iter_mut().find(|(s, _)| *s == name) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((name, 1)),
                }
            }
        }
        Some(counts)
    };
    let lower: Vec<String> = symbols.iter().map(|s| s.to_ascii_lowercase()).collect();
    let mut spec = BinanceSpec::new(market, lower.clone());
    // A capture cannot reconnect: no rotation for silence or age.
    spec.silence_timeout_ns = u64::MAX;
    spec.ws_max_age_ns = u64::MAX;
    let venue = BinanceVenue::new("binance", spec, "ws://replay", "http://replay", None)?;
    let mut names = StreamNames::new();
    for (i, name) in lower.iter().enumerate() {
        names.set(venue.session().stream_id(i), "binance", name);
    }
    let mut sink = Sink(JsonlFormatter::new(), names, jsonl, None);
    let mut source = TextSource {
        lines: if piped {
            Lines::stdin()?
        } else {
            Lines::open(path)?
        },
        counts,
    };
    let mut venues = [venue];
    let driven = super::run(&mut source, &mut venues, &mut sink, Pacing::default())?;
    if let Some(e) = sink.3.take() {
        return Err(e.into());
    }
    if let Some(out) = sink.2.as_mut() {
        out.flush()?;
    }
    let [venue] = &venues;
    let session = venue.session();
    let mut summary = BinanceReplaySummary {
        records: driven.records,
        frames: driven.frames + driven.frames_dropped,
        snapshots: driven.snapshots,
        unanswered: driven.unanswered,
        venue: session.venue_stats(),
        ..BinanceReplaySummary::default()
    };
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

/// The longest line accepted.
const MAX_LINE: usize = 16 << 20;

/// The lines of a capture file, one at a time.
struct Lines {
    reader: BufReader<Box<dyn Read + Send>>,
    path: String,
    /// The current line, without its line end.
    line: Vec<u8>,
    number: usize,
}

impl Lines {
    fn open(path: &Path) -> Result<Self, ReplayBinanceError> {
        let name = path.display().to_string();
        let reader = open_decompressed(path)
            .map_err(|e| ReplayBinanceError::Read(name.clone(), io::Error::other(e)))?;
        Ok(Self::over(name, Box::new(reader)))
    }

    fn stdin() -> Result<Self, ReplayBinanceError> {
        let name = "standard input".to_string();
        let reader = stdin_decompressed()
            .map_err(|e| ReplayBinanceError::Read(name.clone(), io::Error::other(e)))?;
        Ok(Self::over(name, Box::new(reader)))
    }

    fn over(path: String, reader: Box<dyn Read + Send>) -> Self {
        Self {
            reader: BufReader::with_capacity(1 << 16, reader),
            path,
            line: Vec::new(),
            number: 0,
        }
    }

    /// Reads the next line that is not blank into `line`; its number, or `None` at the end.
    fn next(&mut self) -> Result<Option<usize>, ReplayBinanceError> {
        loop {
            self.line.clear();
            self.number += 1;
            let limit = (MAX_LINE + 1) as u64;
            let n = (&mut self.reader)
                .take(limit)
                .read_until(b'\n', &mut self.line)
                .map_err(|e| ReplayBinanceError::Read(self.path.clone(), e))?;
            if n == 0 {
                return Ok(None);
            }
            if self.line.last() == Some(&b'\n') {
                self.line.pop();
            } else if self.line.len() > MAX_LINE {
                return Err(ReplayBinanceError::Malformed(
                    self.number,
                    format!("longer than {MAX_LINE} bytes"),
                ));
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            if !self.line.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some(self.number));
            }
        }
    }
}

/// The records of a capture, read a line at a time.
struct TextSource {
    lines: Lines,
    counts: Option<Vec<(String, u64)>>,
}

impl Source for TextSource {
    type Error = ReplayBinanceError;

    fn next_record(&mut self) -> Option<Result<Record<'_>, Self::Error>> {
        match self.lines.next() {
            Ok(Some(number)) => Some(parse_line(number, &self.lines.line)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    fn snapshot_counts(&self) -> Option<Vec<(String, u64)>> {
        self.counts.clone()
    }
}
