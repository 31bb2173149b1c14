//! Binance depth frames: a zero-allocation scanner for WebSocket stream events and serde
//! parsing of REST depth snapshots.
//!
//! [`scan`] reads one WebSocket text frame, either a combined-stream wrapper
//! `{"stream":..,"data":{..}}` or a bare event, in a single pass and without allocating. It looks
//! only at the top-level keys of the frame and of the event object; arrays, objects and strings
//! below them are skipped, so a `"U"` inside a string or a nested array is never taken for a key.
//! The event's bytes are handed back untouched ([`DepthEvent::event_bytes`]) so a consumer can
//! parse the price levels itself.
//!
//! Rules the scanner applies:
//!
//! - A top-level `data` key whose value is an object makes the frame a combined-stream wrapper;
//!   its `stream` key (optional) must then be a string. Any other frame is a bare event.
//! - Duplicate keys: the **last** occurrence wins, as in `serde_json::Value`. A repeated `data`
//!   object replaces the earlier one entirely.
//! - Keys at the two levels the scanner reads must not contain escape sequences
//!   ([`ScanError::EscapedKey`]): without unescaping, `"\u0055"` could not be told apart from
//!   `"U"`. The string values it hands out (`e`, `s`, `stream`) must not either
//!   ([`ScanError::EscapedString`]), since they are borrowed from the input as they are.
//! - Update ids and times are strict unsigned decimal integers: no sign, fraction, exponent,
//!   quotes or leading zero, and no value above `u64::MAX`.
//! - Values that are skipped are checked for structure only: brackets must pair up and strings
//!   must close, but their contents are not validated as JSON. Whoever parses
//!   [`DepthEvent::event_bytes`] validates the price levels.
//!
//! Every error carries the byte offset into the scanned input where it was found.
//!
//! Speed: the price-level arrays are most of a frame. They are skipped 64 bytes at a time: one
//! pass of byte comparisons (SSE2 on x86-64, a plain loop elsewhere) yields bit masks of quotes
//! and brackets, a prefix XOR of the quote mask marks the bytes inside strings, and only the
//! brackets outside strings are then followed one by one. Integers are read eight digits at a
//! time. The one `unsafe` block is the call into the SSE2 function.

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

mod cursor;
mod number;
mod skip;
mod snapshot;
#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests;

use std::ops::{Range, RangeInclusive};

use thiserror::Error;

use cursor::Cursor;
use number::{integer, optional_integer};

pub use snapshot::{
    ApiError, DepthSnapshot, PriceLevel, SnapshotError, parse_api_error, parse_snapshot,
    snapshot_last_update_id,
};

/// Deepest nesting of arrays and objects that [`scan`] follows inside one skipped value.
pub const MAX_NESTING: u32 = 64;

/// Event types (`e`) of market-data streams other than diff depth: [`scan`] reports these as
/// [`Scanned::Other`]. Any other `e` that is neither `depthUpdate` nor `serverShutdown` is
/// reported as [`Scanned::Unknown`].
pub const MARKET_EVENT_TYPES: &[&str] = &[
    "trade",
    "aggTrade",
    "kline",
    "continuous_kline",
    "bookTicker",
    "24hrTicker",
    "24hrMiniTicker",
    "avgPrice",
    "markPriceUpdate",
    "indexPriceUpdate",
    "forceOrder",
];

const DEPTH_UPDATE: &str = "depthUpdate";
const SERVER_SHUTDOWN: &str = "serverShutdown";

/// What one WebSocket frame turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scanned<'a> {
    /// A diff-depth event (`"e":"depthUpdate"`).
    Depth(DepthEvent<'a>),
    /// Market data of another kind (trade, bookTicker, kline, ...), or an object without an `e`
    /// key such as a spot bookTicker, a partial-depth payload or a subscription reply.
    Other {
        /// The combined-stream name, when the frame was wrapped.
        stream: Option<&'a str>,
        /// The `e` key, when there is one.
        event_type: Option<&'a str>,
        /// The event object's bytes, untouched.
        event_bytes: &'a [u8],
    },
    /// The venue announced that it is about to close the connection (`"e":"serverShutdown"`).
    ServerShutdown {
        /// The combined-stream name, when the frame was wrapped.
        stream: Option<&'a str>,
        /// The `E` key (milliseconds since the epoch), when there is one.
        event_time: Option<u64>,
        /// The event object's bytes, untouched.
        event_bytes: &'a [u8],
    },
    /// An event whose `e` is neither depth, a known market event nor `serverShutdown`.
    Unknown {
        /// The combined-stream name, when the frame was wrapped.
        stream: Option<&'a str>,
        /// The `e` key as received.
        event_type: &'a str,
        /// The event object's bytes, untouched.
        event_bytes: &'a [u8],
    },
}

/// The sequencing fields of one diff-depth event, borrowed from the scanned frame.
///
/// The event covers the update ids `first_update_id..=final_update_id` (range sequencing). On
/// USD-M and COIN-M futures `prev_final_update_id` is the `u` of the previous event of the
/// stream, and it is the only valid continuity check there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthEvent<'a> {
    /// The combined-stream name (`btcusdt@depth@100ms`), when the frame was wrapped.
    pub stream: Option<&'a str>,
    /// The `e` key: always `depthUpdate`.
    pub event_type: &'a str,
    /// `E`: event time, milliseconds since the epoch.
    pub event_time: u64,
    /// `T`: transaction time (futures only).
    pub transaction_time: Option<u64>,
    /// `s`: the symbol.
    pub symbol: &'a str,
    /// `U`: first update id in the event.
    pub first_update_id: u64,
    /// `u`: final update id in the event; never below `first_update_id`.
    pub final_update_id: u64,
    /// `pu`: final update id of the previous event (futures only).
    pub prev_final_update_id: Option<u64>,
    /// The event object's bytes (the `data` object when wrapped), untouched.
    pub event_bytes: &'a [u8],
    /// Where `event_bytes` starts in the scanned frame.
    pub event_offset: usize,
}

impl DepthEvent<'_> {
    /// The byte range of the event object in the scanned frame.
    pub fn event_range(&self) -> Range<usize> {
        self.event_offset..self.event_offset.saturating_add(self.event_bytes.len())
    }

    /// The update ids the event covers, `U..=u`.
    pub fn update_ids(&self) -> RangeInclusive<u64> {
        self.first_update_id..=self.final_update_id
    }
}

/// Why a frame could not be scanned. Every variant carries the byte offset in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ScanError {
    /// The input ended before the JSON value was complete.
    #[error("input ends at byte {offset} before the JSON value is complete")]
    Truncated {
        /// Length of the input.
        offset: usize,
    },
    /// A byte that the JSON grammar does not allow at this point.
    #[error("unexpected byte 0x{found:02x} at offset {offset}: expected {expected}")]
    UnexpectedByte {
        /// Where the byte is.
        offset: usize,
        /// The byte found.
        found: u8,
        /// What was expected instead.
        expected: &'static str,
    },
    /// The frame is not a JSON object.
    #[error("the value at byte {offset} is not a JSON object")]
    NotAnObject {
        /// Where the value starts.
        offset: usize,
    },
    /// A skipped value nests deeper than [`MAX_NESTING`].
    #[error("nesting deeper than {MAX_NESTING} levels at byte {offset}")]
    TooDeep {
        /// Where the level past the limit opens.
        offset: usize,
    },
    /// Something other than whitespace follows the object.
    #[error("bytes after the end of the JSON object at offset {offset}")]
    TrailingBytes {
        /// Where the extra bytes start.
        offset: usize,
    },
    /// An object key contains an escape sequence.
    #[error("object key at byte {offset} contains an escape sequence")]
    EscapedKey {
        /// Where the key starts.
        offset: usize,
    },
    /// A depth event lacks a key it must have.
    #[error("depth event at byte {offset} has no `{key}` key")]
    MissingKey {
        /// The missing key.
        key: &'static str,
        /// Where the event object starts.
        offset: usize,
    },
    /// A key that must hold an unsigned integer holds something else.
    #[error("`{key}` at byte {offset} is not an unsigned integer")]
    NotAnInteger {
        /// The key.
        key: &'static str,
        /// Where the value starts.
        offset: usize,
    },
    /// An integer does not fit in `u64`.
    #[error("`{key}` at byte {offset} does not fit in u64")]
    IntegerOverflow {
        /// The key.
        key: &'static str,
        /// Where the value starts.
        offset: usize,
    },
    /// A key that must hold a string holds something else.
    #[error("`{key}` at byte {offset} is not a string")]
    NotAString {
        /// The key.
        key: &'static str,
        /// Where the value starts.
        offset: usize,
    },
    /// A string value handed out by the scanner contains an escape sequence.
    #[error("`{key}` string at byte {offset} contains an escape sequence")]
    EscapedString {
        /// The key.
        key: &'static str,
        /// Where the value starts.
        offset: usize,
    },
    /// A string value handed out by the scanner is not UTF-8.
    #[error("`{key}` string at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// The key.
        key: &'static str,
        /// Where the value starts.
        offset: usize,
    },
    /// `u` is below `U`: the event claims an inverted update-id range.
    #[error("update ids inverted at byte {offset}: U = {first} is above u = {last}")]
    RangeInverted {
        /// The `U` received.
        first: u64,
        /// The `u` received.
        last: u64,
        /// Where the `u` value starts.
        offset: usize,
    },
}

impl ScanError {
    /// The byte offset in the scanned input where the problem was found.
    pub fn offset(&self) -> usize {
        match *self {
            Self::Truncated { offset }
            | Self::UnexpectedByte { offset, .. }
            | Self::NotAnObject { offset }
            | Self::TooDeep { offset }
            | Self::TrailingBytes { offset }
            | Self::EscapedKey { offset }
            | Self::MissingKey { offset, .. }
            | Self::NotAnInteger { offset, .. }
            | Self::IntegerOverflow { offset, .. }
            | Self::NotAString { offset, .. }
            | Self::EscapedString { offset, .. }
            | Self::InvalidUtf8 { offset, .. }
            | Self::RangeInverted { offset, .. } => offset,
        }
    }
}

/// Scans one Binance WebSocket frame without building a JSON tree or allocating.
///
/// Accepts a combined-stream wrapper or a bare event, surrounded by optional whitespace. See the
/// [module documentation](self) for the rules on duplicate keys, escapes and skipped values.
///
/// # Errors
///
/// A [`ScanError`] with the byte offset when the frame is not a complete JSON object, or when a
/// `depthUpdate` event lacks `E`, `s`, `U` or `u`, holds a malformed value there, or has
/// `u < U` ([`ScanError::RangeInverted`]).
///
/// # Example
///
/// ```
/// use gapless::protocol::binance::{Scanned, scan};
///
/// let frame = br#"{"stream":"btcusdt@depth@100ms","data":{"e":"depthUpdate","E":1723161255208,
///     "s":"BTCUSDT","U":50093239189,"u":50093239202,"b":[["61737.63","0.0"]],"a":[]}}"#;
/// let Ok(Scanned::Depth(event)) = scan(frame) else {
///     panic!("expected a depth event");
/// };
/// assert_eq!(event.stream, Some("btcusdt@depth@100ms"));
/// assert_eq!(event.symbol, "BTCUSDT");
/// assert_eq!(event.update_ids(), 50093239189..=50093239202);
/// assert_eq!(event.prev_final_update_id, None);
/// assert!(event.event_bytes.starts_with(b"{\"e\":\"depthUpdate\""));
///
/// let trade = br#"{"stream":"btcusdt@trade","data":{"e":"trade","E":1,"s":"BTCUSDT"}}"#;
/// assert!(matches!(scan(trade), Ok(Scanned::Other { event_type: Some("trade"), .. })));
/// ```
pub fn scan(bytes: &[u8]) -> Result<Scanned<'_>, ScanError> {
    let mut cursor = Cursor { bytes, pos: 0 };
    cursor.skip_whitespace();
    if cursor.peek()? != b'{' {
        return Err(ScanError::NotAnObject { offset: cursor.pos });
    }
    let mut outer = Fields::default();
    let mut inner = Fields::default();
    cursor.object(&mut outer, Some(&mut inner))?;
    cursor.skip_whitespace();
    if cursor.pos < bytes.len() {
        return Err(ScanError::TrailingBytes { offset: cursor.pos });
    }
    if outer.wrapped {
        let stream = outer
            .stream
            .map(|span| text(bytes, span, "stream"))
            .transpose()?;
        classify(bytes, &inner, stream)
    } else {
        classify(bytes, &outer, None)
    }
}

/// Byte range of one value token in the input (strings include their quotes).
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    /// The token is a string holding an escape sequence.
    escaped: bool,
}

/// The keys of interest seen at the top level of one object.
#[derive(Debug, Default)]
struct Fields {
    start: usize,
    end: usize,
    event_type: Option<Span>,
    event_time: Option<Span>,
    transaction_time: Option<Span>,
    symbol: Option<Span>,
    first_update_id: Option<Span>,
    final_update_id: Option<Span>,
    prev_final_update_id: Option<Span>,
    stream: Option<Span>,
    /// The last `data` key held an object, scanned into the caller's inner `Fields`.
    wrapped: bool,
}

/// Turns the recorded keys of the event object into a [`Scanned`].
fn classify<'a>(
    bytes: &'a [u8],
    event: &Fields,
    stream: Option<&'a str>,
) -> Result<Scanned<'a>, ScanError> {
    let event_bytes = bytes.get(event.start..event.end).unwrap_or_default();
    let Some(event_type) = event.event_type else {
        return Ok(Scanned::Other {
            stream,
            event_type: None,
            event_bytes,
        });
    };
    // The common types are matched as bytes; only the others are checked for UTF-8.
    let raw = bytes
        .get(event_type.start + 1..event_type.end.saturating_sub(1))
        .unwrap_or_default();
    let is_string = bytes.get(event_type.start) == Some(&b'"');
    if is_string && !event_type.escaped && raw == DEPTH_UPDATE.as_bytes() {
        return depth(bytes, event, stream, DEPTH_UPDATE).map(Scanned::Depth);
    }
    let event_type = text(bytes, event_type, "e")?;
    match event_type {
        DEPTH_UPDATE => depth(bytes, event, stream, DEPTH_UPDATE).map(Scanned::Depth),
        SERVER_SHUTDOWN => Ok(Scanned::ServerShutdown {
            stream,
            event_time: optional_integer(bytes, event.event_time, "E")?,
            event_bytes,
        }),
        known if MARKET_EVENT_TYPES.contains(&known) => Ok(Scanned::Other {
            stream,
            event_type: Some(known),
            event_bytes,
        }),
        unknown => Ok(Scanned::Unknown {
            stream,
            event_type: unknown,
            event_bytes,
        }),
    }
}

fn depth<'a>(
    bytes: &'a [u8],
    event: &Fields,
    stream: Option<&'a str>,
    event_type: &'a str,
) -> Result<DepthEvent<'a>, ScanError> {
    let required = |span: Option<Span>, key: &'static str| {
        span.ok_or(ScanError::MissingKey {
            key,
            offset: event.start,
        })
    };
    let first_update_id = integer(bytes, required(event.first_update_id, "U")?, "U")?;
    let final_span = required(event.final_update_id, "u")?;
    let final_update_id = integer(bytes, final_span, "u")?;
    let symbol = text(bytes, required(event.symbol, "s")?, "s")?;
    let event_time = integer(bytes, required(event.event_time, "E")?, "E")?;
    if final_update_id < first_update_id {
        return Err(ScanError::RangeInverted {
            first: first_update_id,
            last: final_update_id,
            offset: final_span.start,
        });
    }
    Ok(DepthEvent {
        stream,
        event_type,
        event_time,
        transaction_time: optional_integer(bytes, event.transaction_time, "T")?,
        symbol,
        first_update_id,
        final_update_id,
        prev_final_update_id: optional_integer(bytes, event.prev_final_update_id, "pu")?,
        event_bytes: bytes.get(event.start..event.end).unwrap_or_default(),
        event_offset: event.start,
    })
}

/// The contents of a string token, which must be escape-free UTF-8.
fn text<'a>(bytes: &'a [u8], span: Span, key: &'static str) -> Result<&'a str, ScanError> {
    let offset = span.start;
    let token = bytes.get(span.start..span.end).unwrap_or_default();
    let [b'"', contents @ .., b'"'] = token else {
        return Err(ScanError::NotAString { key, offset });
    };
    if span.escaped {
        return Err(ScanError::EscapedString { key, offset });
    }
    std::str::from_utf8(contents).map_err(|_| ScanError::InvalidUtf8 { key, offset })
}
