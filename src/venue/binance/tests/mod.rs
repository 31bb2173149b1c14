//! Tests of the Binance session: recorded sessions replayed, injected faults, hostile input.
//!
//! [`Sink`] keeps what consumers would receive; [`check_consumer`] replays it as a consumer
//! would and fails on any delta that does not follow its snapshot or predecessor under the
//! market's rule, read back from the payload itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod capture;
mod continuity;
mod faults;
mod fetching;
mod hostile;
mod lifecycle;
mod recordings;
mod session;

use std::collections::HashMap;

use crate::publish::{Event, StreamState as Published};
use crate::venue::Emit;

use super::{BinanceSession, BinanceSpec, Market, SnapshotResult};

/// One consumer event, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Got {
    Range {
        stream: u16,
        first: u64,
        last: u64,
        recv_ns: u64,
        payload: Vec<u8>,
    },
    Snapshot {
        stream: u16,
        seq: u64,
        payload: Vec<u8>,
    },
    Begin(u16),
    End {
        stream: u16,
        next: u64,
    },
    State {
        stream: u16,
        state: Published,
    },
    Other,
}

impl Got {
    pub(super) fn stream(&self) -> Option<u16> {
        match *self {
            Self::Range { stream, .. }
            | Self::Snapshot { stream, .. }
            | Self::Begin(stream)
            | Self::End { stream, .. }
            | Self::State { stream, .. } => Some(stream),
            Self::Other => None,
        }
    }
}

/// Collects consumer events.
#[derive(Debug, Default)]
pub(super) struct Sink {
    pub(super) got: Vec<Got>,
}

impl Emit for Sink {
    fn emit(&mut self, event: &Event<'_>) {
        self.got.push(match *event {
            Event::Range {
                stream,
                first,
                last,
                recv_ns,
                payload,
            } => Got::Range {
                stream,
                first,
                last,
                recv_ns,
                payload: payload.to_vec(),
            },
            Event::Message {
                stream,
                seq,
                snapshot: true,
                payload,
                ..
            } => Got::Snapshot {
                stream,
                seq,
                payload: payload.to_vec(),
            },
            Event::SnapshotBegin { stream } => Got::Begin(stream),
            Event::SnapshotEnd { stream, next } => Got::End { stream, next },
            Event::State { stream, state } => Got::State { stream, state },
            _ => Got::Other,
        });
    }
}

impl Sink {
    /// The events of one stream.
    pub(super) fn of(&self, stream: u16) -> Vec<&Got> {
        self.got
            .iter()
            .filter(|g| g.stream() == Some(stream))
            .collect()
    }

    /// The payloads of the deltas of one stream.
    pub(super) fn ranges(&self, stream: u16) -> Vec<&[u8]> {
        self.got
            .iter()
            .filter_map(|g| match g {
                Got::Range {
                    stream: s, payload, ..
                } if *s == stream => Some(payload.as_slice()),
                _ => None,
            })
            .collect()
    }

    /// How often a stream was told `state`.
    pub(super) fn states(&self, stream: u16, state: Published) -> usize {
        self.got
            .iter()
            .filter(|g| **g == Got::State { stream, state })
            .count()
    }
}

/// The ids of a depth event, read with serde (independently of the scanner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ids {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) prev: Option<u64>,
}

/// Where a consumer stands on one stream.
#[derive(Debug, Clone, Copy)]
enum Seen {
    /// No snapshot since the start or the last reset: a delta now is an error.
    NoBook,
    /// A snapshot began and is not finished.
    InSnapshot,
    /// A snapshot ended at `next`; no delta yet.
    After(u64),
    /// Deltas applied up to `u`.
    Live(u64),
}

/// The ids in a delta's payload (the last occurrence of a repeated key wins), or `None` when
/// the payload is not JSON: the scanner checks the structure of the price levels only.
fn payload_ids(payload: &[u8]) -> Option<Ids> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let key = |k: &str| value.get(k).and_then(serde_json::Value::as_u64);
    Some(Ids {
        first: key("U")?,
        last: key("u")?,
        prev: key("pu"),
    })
}

/// Replays consumer events as a consumer would, checking every delta against the rule of the
/// market (`linked`: futures) using the ids inside its payload. Returns how many deltas had a
/// payload that is not JSON: those are checked with the range the event carries, and on
/// futures their `pu` link is taken on trust.
pub(super) fn check_consumer(got: &[Got], linked: bool) -> Result<usize, String> {
    let mut streams: HashMap<u16, Seen> = HashMap::new();
    let mut unparsed = 0;
    for (k, g) in got.iter().enumerate() {
        let Some(stream) = g.stream() else {
            continue;
        };
        let seen = streams.entry(stream).or_insert(Seen::NoBook);
        *seen = match (g, *seen) {
            (Got::State { state, .. }, s) => match state {
                Published::Synced => match s {
                    Seen::After(_) | Seen::Live(_) => s,
                    _ => return Err(format!("event {k}: synced without a snapshot")),
                },
                _ => Seen::NoBook,
            },
            (Got::Begin(_), _) => Seen::InSnapshot,
            (Got::Snapshot { .. }, Seen::InSnapshot) => Seen::InSnapshot,
            (Got::End { next, .. }, Seen::InSnapshot) => Seen::After(*next),
            (
                Got::Range {
                    first,
                    last,
                    payload,
                    ..
                },
                s,
            ) => {
                let ids = match payload_ids(payload) {
                    Some(ids) => ids,
                    None => {
                        unparsed += 1;
                        let prev = match s {
                            Seen::Live(prev) if linked => Some(prev),
                            _ => None,
                        };
                        Ids {
                            first: *first,
                            last: *last,
                            prev,
                        }
                    }
                };
                if (ids.first, ids.last) != (*first, *last) {
                    return Err(format!(
                        "event {k}: range {first}..{last} but payload {ids:?}"
                    ));
                }
                let ok = match s {
                    Seen::After(next) => ids.first <= next && next <= ids.last,
                    Seen::Live(prev) if linked => ids.prev == Some(prev) && ids.last > prev,
                    Seen::Live(prev) => ids.first <= prev + 1 && ids.last > prev,
                    Seen::NoBook | Seen::InSnapshot => false,
                };
                if !ok {
                    return Err(format!("event {k}: delta {ids:?} does not follow {s:?}"));
                }
                Seen::Live(ids.last)
            }
            (other, s) => return Err(format!("event {k}: {other:?} in state {s:?}")),
        };
    }
    Ok(unparsed)
}

/// A small deterministic generator.
pub(super) struct XorShift(pub(super) u64);

impl XorShift {
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A depth event frame for hand-written tests: spot when `prev` is `None`.
pub(super) fn depth_frame(symbol: &str, first: u64, last: u64, prev: Option<u64>) -> Vec<u8> {
    let upper = symbol.to_ascii_uppercase();
    let pu = prev.map(|p| format!(",\"pu\":{p}")).unwrap_or_default();
    format!(
        "{{\"stream\":\"{symbol}@depth@100ms\",\"data\":{{\"e\":\"depthUpdate\",\"E\":1,\
         \"s\":\"{upper}\",\"U\":{first},\"u\":{last}{pu},\"b\":[[\"1.0\",\"2\"]],\"a\":[]}}}}"
    )
    .into_bytes()
}

/// A snapshot body for hand-written tests.
pub(super) fn snapshot_body(last_update_id: u64) -> Vec<u8> {
    format!("{{\"lastUpdateId\":{last_update_id},\"bids\":[[\"1.0\",\"3\"]],\"asks\":[]}}")
        .into_bytes()
}

/// One second in nanoseconds.
pub(super) const S: u64 = 1_000_000_000;

/// A session of `symbols` on `market`, its spec adjusted by `f`.
pub(super) fn session(
    market: Market,
    symbols: &[&str],
    f: impl FnOnce(&mut BinanceSpec),
) -> BinanceSession {
    let mut spec = BinanceSpec::new(market, symbols.iter().map(|s| s.to_string()).collect());
    f(&mut spec);
    BinanceSession::new(spec).unwrap()
}

/// Feeds one frame at `t`.
pub(super) fn feed(s: &mut BinanceSession, sink: &mut Sink, t: u64, frame: &[u8]) {
    s.on_text(t, t, frame, sink);
}

/// Answers the snapshot request of `symbol` at `t` with a snapshot of `l`.
pub(super) fn body(s: &mut BinanceSession, sink: &mut Sink, t: u64, symbol: usize, l: u64) {
    s.on_snapshot(t, symbol, SnapshotResult::Body(&snapshot_body(l)), sink);
}
