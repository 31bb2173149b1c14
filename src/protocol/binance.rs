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

use std::ops::{Range, RangeInclusive};

use serde::Deserialize;
use thiserror::Error;

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

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn truncated(&self) -> ScanError {
        ScanError::Truncated {
            offset: self.bytes.len(),
        }
    }

    fn peek(&self) -> Result<u8, ScanError> {
        self.bytes
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.truncated())
    }

    fn unexpected(&self, found: u8, expected: &'static str) -> ScanError {
        ScanError::UnexpectedByte {
            offset: self.pos,
            found,
            expected,
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// Reads the object at the cursor, recording its keys of interest in `fields`. With
    /// `inner`, a `data` key holding an object is scanned into `inner` (one level only).
    fn object(
        &mut self,
        fields: &mut Fields,
        mut inner: Option<&mut Fields>,
    ) -> Result<(), ScanError> {
        fields.start = self.pos;
        self.pos += 1; // the caller saw `{`
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.pos += 1;
            fields.end = self.pos;
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            let key = self.key()?;
            self.skip_whitespace();
            match self.peek()? {
                b':' => self.pos += 1,
                other => return Err(self.unexpected(other, "`:` after an object key")),
            }
            self.skip_whitespace();
            let start = self.pos;
            if key == b"data"
                && let Some(inner) = inner.as_deref_mut()
            {
                fields.wrapped = self.peek()? == b'{';
                if fields.wrapped {
                    *inner = Fields::default();
                    self.object(inner, None)?;
                } else {
                    self.skip_value()?;
                }
            } else {
                let escaped = self.skip_value()?;
                let span = Some(Span {
                    start,
                    end: self.pos,
                    escaped,
                });
                match key {
                    b"e" => fields.event_type = span,
                    b"E" => fields.event_time = span,
                    b"T" => fields.transaction_time = span,
                    b"s" => fields.symbol = span,
                    b"U" => fields.first_update_id = span,
                    b"u" => fields.final_update_id = span,
                    b"pu" => fields.prev_final_update_id = span,
                    b"stream" => fields.stream = span,
                    _ => {}
                }
            }
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    fields.end = self.pos;
                    return Ok(());
                }
                other => return Err(self.unexpected(other, "`,` or `}` after an object value")),
            }
        }
    }

    /// Reads an object key and returns its bytes without the quotes.
    fn key(&mut self) -> Result<&'a [u8], ScanError> {
        let start = self.pos;
        // Binance's keys are one or two letters: take those without the general search.
        let plain = |byte: &u8| *byte != b'"' && *byte != b'\\';
        match self.bytes.get(start..start + 4) {
            Some([b'"', key @ .., b'"', _]) if key.iter().all(plain) => {
                self.pos = start + 3;
                return Ok(key);
            }
            Some([b'"', key @ .., b'"']) if key.iter().all(plain) => {
                self.pos = start + 4;
                return Ok(key);
            }
            _ => {}
        }
        let first = self.peek()?;
        if first != b'"' {
            return Err(self.unexpected(first, "`\"` opening an object key"));
        }
        if self.string()? {
            return Err(ScanError::EscapedKey { offset: start });
        }
        Ok(self.bytes.get(start + 1..self.pos - 1).unwrap_or_default())
    }

    /// Skips the string whose opening quote is at the cursor; returns whether it holds an escape.
    fn string(&mut self) -> Result<bool, ScanError> {
        let mut from = self.pos + 1;
        let mut escaped = false;
        loop {
            let Some(at) = find_quote_or_backslash(self.bytes, from) else {
                return Err(self.truncated());
            };
            if self.bytes.get(at) == Some(&b'"') {
                self.pos = at + 1;
                return Ok(escaped);
            }
            // A backslash: the byte after it is escaped, whatever it is.
            escaped = true;
            from = at + 2;
        }
    }

    /// Skips one value; returns whether it was a string holding an escape sequence.
    fn skip_value(&mut self) -> Result<bool, ScanError> {
        match self.peek()? {
            b'"' => return self.string(),
            b'{' | b'[' => self.skip_nested()?,
            b'-' | b'0'..=b'9' => {
                self.pos += digit_run(self.bytes.get(self.pos..).unwrap_or_default());
                while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') =
                    self.bytes.get(self.pos)
                {
                    self.pos += 1;
                }
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            other => return Err(self.unexpected(other, "a JSON value")),
        }
        Ok(false)
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), ScanError> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        for (i, &want) in word.iter().enumerate() {
            match rest.get(i) {
                None => return Err(self.truncated()),
                Some(&have) if have != want => {
                    return Err(ScanError::UnexpectedByte {
                        offset: self.pos + i,
                        found: have,
                        expected: "a JSON literal",
                    });
                }
                Some(_) => {}
            }
        }
        self.pos += word.len();
        Ok(())
    }

    /// Skips the array or object opening at the cursor, checking only that brackets pair up
    /// outside strings.
    ///
    /// 64 bytes at a time: the block's quotes give, by prefix XOR, which of its bytes lie inside
    /// a string, and only the brackets outside strings are followed. A block holding a
    /// backslash goes one byte at a time; the last block of the input is padded with zeros.
    fn skip_nested(&mut self) -> Result<(), ScanError> {
        let mut nesting = Nesting::default();
        let mut in_string = false;
        let mut pos = self.pos;
        loop {
            let padded;
            let (block, complete) = match self
                .bytes
                .get(pos..pos + BLOCK)
                .and_then(|chunk| <&[u8; BLOCK]>::try_from(chunk).ok())
            {
                Some(block) => (block, true),
                None => {
                    let mut tail = [0u8; BLOCK];
                    let rest = self.bytes.get(pos..).unwrap_or_default();
                    if let Some(head) = tail.get_mut(..rest.len()) {
                        head.copy_from_slice(rest);
                    }
                    padded = tail;
                    (&padded, false)
                }
            };
            let masks = block_masks(block);
            if masks.backslash {
                let until = pos + BLOCK;
                while pos < until {
                    if self.byte_step(&mut pos, &mut nesting, &mut in_string)? {
                        self.pos = pos;
                        return Ok(());
                    }
                }
                continue;
            }
            let inside = prefix_xor(masks.quotes) ^ 0u64.wrapping_sub(u64::from(in_string));
            let mut brackets = masks.brackets & !inside;
            while brackets != 0 {
                let at = brackets.trailing_zeros() as usize;
                brackets &= brackets - 1;
                let byte = block.get(at).copied().unwrap_or_default();
                if nesting.bracket(byte, pos + at)? {
                    self.pos = pos + at + 1;
                    return Ok(());
                }
            }
            if !complete {
                return Err(self.truncated());
            }
            in_string = inside >> 63 == 1;
            pos += BLOCK;
        }
    }

    /// Follows the byte at `pos` (and the byte it escapes); returns whether it closed the
    /// outermost level of `nesting`.
    fn byte_step(
        &self,
        pos: &mut usize,
        nesting: &mut Nesting,
        in_string: &mut bool,
    ) -> Result<bool, ScanError> {
        let at = *pos;
        let Some(&byte) = self.bytes.get(at) else {
            return Err(self.truncated());
        };
        *pos += 1;
        match (*in_string, byte) {
            (_, b'"') => *in_string = !*in_string,
            (true, b'\\') => *pos += 1,
            (false, b'[' | b'{' | b']' | b'}') => return nesting.bracket(byte, at),
            _ => {}
        }
        Ok(false)
    }
}

/// The open arrays and objects of a value being skipped.
#[derive(Debug, Default)]
struct Nesting {
    /// Bit `i` is set when the level `i` steps below the innermost is an object.
    objects: u64,
    depth: u32,
}

impl Nesting {
    /// Applies one of `[`, `{`, `]`, `}` outside strings; returns whether it closed the
    /// outermost level. `[` 0x5b and `{` 0x7b have bit 1 set, `]` 0x5d and `}` 0x7d do not,
    /// and bit 5 tells braces from square brackets.
    #[inline(always)]
    fn bracket(&mut self, byte: u8, at: usize) -> Result<bool, ScanError> {
        let object = byte & 0x20 != 0;
        if byte & 0x02 != 0 {
            if self.depth == MAX_NESTING {
                return Err(ScanError::TooDeep { offset: at });
            }
            self.objects = (self.objects << 1) | u64::from(object);
            self.depth += 1;
            return Ok(false);
        }
        let open_object = self.objects & 1 == 1;
        if self.depth == 0 || open_object != object {
            return Err(ScanError::UnexpectedByte {
                offset: at,
                found: byte,
                expected: if open_object { "`}`" } else { "`]`" },
            });
        }
        self.objects >>= 1;
        self.depth -= 1;
        Ok(self.depth == 0)
    }
}

/// Bytes examined at once when skipping nested values.
const BLOCK: usize = 64;

/// What the skipping loop needs to know about a 64-byte block: bit `i` describes byte `i`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct BlockMasks {
    /// `"` bytes.
    quotes: u64,
    /// `[`, `]`, `{` and `}` bytes.
    brackets: u64,
    /// Some byte is a backslash.
    backslash: bool,
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn block_masks(block: &[u8; BLOCK]) -> BlockMasks {
    // SAFETY: `block_masks_sse2` needs SSE2 and nothing else; the cfg above admits only
    // builds where SSE2 is enabled, which is every x86-64 target. It only reads `block`.
    unsafe { block_masks_sse2(block) }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn block_masks(block: &[u8; BLOCK]) -> BlockMasks {
    block_masks_portable(block)
}

/// 16 bytes per step: compare, then `movemask` collects one bit per byte.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn block_masks_sse2(block: &[u8; BLOCK]) -> BlockMasks {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8,
        _mm_setzero_si128,
    };

    let mut quotes = 0u64;
    let mut brackets = 0u64;
    let mut backslashes = _mm_setzero_si128();
    for (lane, chunk) in block.chunks_exact(16).enumerate() {
        let (low, high) = chunk.split_at(8);
        let bytes = _mm_set_epi64x(word(high) as i64, word(low) as i64);
        // `[` | 0x20 is `{` and `]` | 0x20 is `}`; no other byte folds onto either.
        let folded = _mm_or_si128(bytes, _mm_set1_epi8(0x20));
        let open = _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8));
        let close = _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8));
        let quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
        backslashes = _mm_or_si128(backslashes, backslash);
        let shift = 16 * lane;
        quotes |= u64::from(_mm_movemask_epi8(quote) as u16) << shift;
        brackets |= u64::from(_mm_movemask_epi8(_mm_or_si128(open, close)) as u16) << shift;
    }
    BlockMasks {
        quotes,
        brackets,
        backslash: _mm_movemask_epi8(backslashes) != 0,
    }
}

/// One byte at a time: used where SSE2 is not, and the reference the SSE2 version is tested
/// against.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn block_masks_portable(block: &[u8; BLOCK]) -> BlockMasks {
    let mut masks = BlockMasks::default();
    for (i, &byte) in block.iter().enumerate() {
        let bit = 1u64 << i;
        match byte {
            b'"' => masks.quotes |= bit,
            b'\\' => masks.backslash = true,
            b'[' | b']' | b'{' | b'}' => masks.brackets |= bit,
            _ => {}
        }
    }
    masks
}

/// Bit `i` of the result is the XOR of bits `0..=i`: set inside a string (and on its opening
/// quote), given the quote positions.
fn prefix_xor(mut bits: u64) -> u64 {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= bits << 32;
    bits
}

/// `0x01` in every byte.
const ONES: u64 = u64::from_le_bytes([0x01; 8]);
/// `0x7f` in every byte.
const LOW7: u64 = u64::from_le_bytes([0x7f; 8]);

/// The high bit of each byte of `word` that equals `byte`, and no other bit. Exact: adding
/// `0x7f` to the low seven bits cannot carry into the next byte.
fn equal_bytes(word: u64, byte: u8) -> u64 {
    let diff = word ^ (ONES * u64::from(byte));
    !(((diff & LOW7) + LOW7) | diff | LOW7)
}

/// The index of the first `"` or `\` at or after `from`, eight bytes at a time.
fn find_quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let mut words = rest.chunks_exact(8);
    let mut offset = from;
    for chunk in &mut words {
        let word = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).ok()?);
        let hits = equal_bytes(word, b'"') | equal_bytes(word, b'\\');
        if hits != 0 {
            return Some(offset + (hits.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|at| offset + at)
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

/// A strict unsigned decimal integer: digits only, no leading zero, at most `u64::MAX`.
///
/// Up to 16 digits are read as two (possibly overlapping) eight-byte words; update ids and
/// millisecond times have 10 to 13.
fn integer(bytes: &[u8], span: Span, key: &'static str) -> Result<u64, ScanError> {
    let offset = span.start;
    let digits = bytes.get(span.start..span.end).unwrap_or_default();
    let not_integer = ScanError::NotAnInteger { key, offset };
    if matches!(digits, [b'0', _, ..]) {
        return Err(not_integer);
    }
    let len = digits.len();
    match len {
        0 => Err(not_integer),
        1..=8 => {
            let mut padded = [b'0'; 8];
            if let Some(tail) = padded.get_mut(8 - len..) {
                tail.copy_from_slice(digits);
            }
            let padded = u64::from_le_bytes(padded);
            if non_digits(padded) != 0 {
                return Err(not_integer);
            }
            Ok(eight_digits(padded))
        }
        9..=16 => {
            let first = word(digits.get(..8).unwrap_or_default());
            let last = word(digits.get(len - 8..).unwrap_or_default());
            if non_digits(first) | non_digits(last) != 0 {
                return Err(not_integer);
            }
            // `last` repeats 16 - len digits of `first` in its low bytes: make them zeros.
            let repeated = u64::MAX << (8 * (16 - len));
            let last = (last & repeated) | (ASCII_ZEROS & !repeated);
            let scale = POWERS_OF_TEN.get(len - 8).copied().unwrap_or_default();
            Ok(eight_digits(first) * scale + eight_digits(last))
        }
        _ => long_integer(digits, key, offset),
    }
}

/// `10^i` for `i` in `0..=8`.
const POWERS_OF_TEN: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// 17 digits or more: only 20-digit numbers can overflow, and only in their last digit.
fn long_integer(digits: &[u8], key: &'static str, offset: usize) -> Result<u64, ScanError> {
    /// Any 19 digits fit in a u64 (`u64::MAX` has 20).
    const ALWAYS_FITS: usize = 19;
    if digit_run(digits) != digits.len() {
        return Err(ScanError::NotAnInteger { key, offset });
    }
    let (head, tail) = digits.split_at(digits.len().min(ALWAYS_FITS));
    let mut eights = head.chunks_exact(8);
    let mut value = 0u64;
    for chunk in &mut eights {
        value = value * 100_000_000 + eight_digits(word(chunk));
    }
    for &digit in eights.remainder() {
        value = value * 10 + u64::from(digit - b'0');
    }
    tail.iter().try_fold(value, |value, &digit| {
        value
            .checked_mul(10)
            .and_then(|value| value.checked_add(u64::from(digit - b'0')))
            .ok_or(ScanError::IntegerOverflow { key, offset })
    })
}

/// Eight bytes as a little-endian word; zero unless `chunk` has exactly eight.
fn word(chunk: &[u8]) -> u64 {
    <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes)
}

/// `0x0f` in every byte.
const LOW_NIBBLES: u64 = u64::from_le_bytes([0x0f; 8]);
/// `b'0'` in every byte.
const ASCII_ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);

/// Nonzero bytes where `word` holds something other than an ASCII digit. A byte is a digit
/// when its high nibble is 3 and its low nibble plus 6 stays below 16; neither test carries
/// into the next byte.
fn non_digits(word: u64) -> u64 {
    let high = (word & !LOW_NIBBLES) ^ ASCII_ZEROS;
    let low = ((word & LOW_NIBBLES) + ONES * 6) & !LOW_NIBBLES;
    high | low
}

/// How many ASCII digits `bytes` starts with, eight at a time.
fn digit_run(bytes: &[u8]) -> usize {
    let mut eights = bytes.chunks_exact(8);
    let mut count = 0;
    for chunk in &mut eights {
        let other = non_digits(word(chunk));
        if other != 0 {
            let nonzero = ((other & LOW7) + LOW7) | other;
            return count + ((nonzero & !LOW7).trailing_zeros() / 8) as usize;
        }
        count += 8;
    }
    count
        + eights
            .remainder()
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count()
}

/// The value of eight ASCII digits read as a little-endian word (first digit lowest), by
/// combining neighbours pairwise: 8 digits, 4 two-digit, 2 four-digit, 1 eight-digit number.
fn eight_digits(word: u64) -> u64 {
    let digits = word.wrapping_sub(ASCII_ZEROS);
    let pairs = (digits.wrapping_mul(10).wrapping_add(digits >> 8)) & 0x00ff_00ff_00ff_00ff;
    let quads = (pairs.wrapping_mul(100).wrapping_add(pairs >> 16)) & 0x0000_ffff_0000_ffff;
    (quads.wrapping_mul(10_000).wrapping_add(quads >> 32)) & 0xffff_ffff
}

fn optional_integer(
    bytes: &[u8],
    span: Option<Span>,
    key: &'static str,
) -> Result<Option<u64>, ScanError> {
    span.map(|span| integer(bytes, span, key)).transpose()
}

/// A REST depth snapshot (`GET /api/v3/depth`, `/fapi/v1/depth`, `/dapi/v1/depth`).
///
/// Unknown keys (`symbol`, `pair` on COIN-M) are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DepthSnapshot {
    /// `lastUpdateId`: the update id the book reflects.
    #[serde(rename = "lastUpdateId")]
    pub last_update_id: u64,
    /// Bid levels as sent, best first.
    pub bids: Vec<PriceLevel>,
    /// Ask levels as sent, best first.
    pub asks: Vec<PriceLevel>,
    /// `E`: message output time (futures only).
    #[serde(rename = "E", default)]
    pub event_time: Option<u64>,
    /// `T`: transaction time (futures only).
    #[serde(rename = "T", default)]
    pub transaction_time: Option<u64>,
}

/// One `[price, quantity]` level, both kept as the decimal strings Binance sends.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PriceLevel {
    /// The price.
    pub price: String,
    /// The quantity at that price; `"0"`-valued quantities remove the level in a diff.
    pub quantity: String,
}

/// The error body Binance's REST API returns, e.g. `{"code":-1121,"msg":"Invalid symbol."}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Error)]
#[error("Binance error {code}: {msg}")]
pub struct ApiError {
    /// Binance's error code (negative).
    pub code: i64,
    /// Binance's message.
    pub msg: String,
}

/// Why a snapshot body could not be used.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The body is a Binance error body instead of a snapshot.
    #[error("snapshot request rejected: {0}")]
    Rejected(ApiError),
    /// The body is neither a snapshot nor an error body.
    #[error("malformed depth snapshot: {0}")]
    Malformed(#[source] serde_json::Error),
}

/// Parses a REST depth snapshot body.
///
/// # Errors
///
/// [`SnapshotError::Rejected`] when the body is a Binance error body, otherwise
/// [`SnapshotError::Malformed`] with serde_json's reason.
///
/// # Example
///
/// ```
/// use gapless::protocol::binance::parse_snapshot;
///
/// let body = br#"{"lastUpdateId":1027024,"bids":[["4.00000000","431.00000000"]],"asks":[]}"#;
/// let snapshot = parse_snapshot(body).unwrap();
/// assert_eq!(snapshot.last_update_id, 1027024);
/// assert_eq!(snapshot.bids[0].price, "4.00000000");
/// assert_eq!(snapshot.event_time, None);
/// ```
pub fn parse_snapshot(bytes: &[u8]) -> Result<DepthSnapshot, SnapshotError> {
    serde_json::from_slice(bytes).map_err(|err| match parse_api_error(bytes) {
        Ok(api) => SnapshotError::Rejected(api),
        Err(_) => SnapshotError::Malformed(err),
    })
}

/// Parses a Binance REST error body such as `{"code":-1121,"msg":"Invalid symbol."}`.
///
/// # Errors
///
/// serde_json's error when the body is not one.
pub fn parse_api_error(bytes: &[u8]) -> Result<ApiError, serde_json::Error> {
    serde_json::from_slice(bytes)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests {
    use std::fs;
    use std::io::Read;
    use std::path::{Path, PathBuf};

    use flate2::read::GzDecoder;
    use serde_json::Value;

    use super::*;

    const SPOT: &str = r#"{"stream":"btcusdt@depth@100ms","data":{"e":"depthUpdate","E":1723161255208,"s":"BTCUSDT","U":50093239189,"u":50093239202,"b":[["61737.63","0.0"],["61730.17","1.5"]],"a":[["61837.64","1.54698"]]}}"#;
    const USDM: &str = r#"{"stream":"btcusdt@depth@0ms","data":{"e":"depthUpdate","E":1723161256299,"T":1723161256298,"s":"BTCUSDT","U":5123107832006,"u":5123107837557,"pu":5123107831937,"b":[["58710.20","0.014"]],"a":[]}}"#;
    const COINM_BARE: &str = r#"{"e":"depthUpdate","E":1723161257440,"T":1723161257432,"s":"BTCUSD_PERP","ps":"BTCUSD","U":1007198631260,"u":1007198631565,"pu":1007198631198,"b":[["61773.6","1001"]],"a":[["61801.4","0"]]}"#;

    /// The fields a depth event carries, as owned values for comparisons.
    #[derive(Debug, PartialEq, Eq)]
    struct Expected {
        stream: Option<String>,
        event_time: u64,
        transaction_time: Option<u64>,
        symbol: String,
        first: u64,
        last: u64,
        prev_last: Option<u64>,
    }

    impl Expected {
        fn of(event: &DepthEvent<'_>) -> Self {
            Self {
                stream: event.stream.map(str::to_owned),
                event_time: event.event_time,
                transaction_time: event.transaction_time,
                symbol: event.symbol.to_owned(),
                first: event.first_update_id,
                last: event.final_update_id,
                prev_last: event.prev_final_update_id,
            }
        }
    }

    /// Splits a serde_json tree the way `scan` does: `(stream, event)`.
    fn split_frame(frame: &Value) -> Option<(Option<&Value>, &Value)> {
        let object = frame.as_object()?;
        match object.get("data") {
            Some(data @ Value::Object(_)) => Some((object.get("stream"), data)),
            _ => Some((None, frame)),
        }
    }

    /// What `scan` must report for a frame according to serde_json, or `None` when the frame is
    /// not a well-formed depth event.
    fn oracle(frame: &Value) -> Option<Expected> {
        let (stream, event) = split_frame(frame)?;
        let stream = match stream {
            None => None,
            Some(Value::String(name)) => Some(name.clone()),
            Some(_) => return None,
        };
        let event = event.as_object()?;
        if event.get("e")?.as_str()? != DEPTH_UPDATE {
            return None;
        }
        let optional = |key: &str| match event.get(key) {
            None => Some(None),
            Some(value) => value.as_u64().map(Some),
        };
        let expected = Expected {
            stream,
            event_time: event.get("E")?.as_u64()?,
            transaction_time: optional("T")?,
            symbol: event.get("s")?.as_str()?.to_owned(),
            first: event.get("U")?.as_u64()?,
            last: event.get("u")?.as_u64()?,
            prev_last: optional("pu")?,
        };
        (expected.first <= expected.last).then_some(expected)
    }

    fn depth(frame: &str) -> DepthEvent<'_> {
        match scan(frame.as_bytes()) {
            Ok(Scanned::Depth(event)) => event,
            other => panic!("expected a depth event, got {other:?} for {frame}"),
        }
    }

    fn scan_str(frame: &str) -> Result<Scanned<'_>, ScanError> {
        scan(frame.as_bytes())
    }

    /// Every strict prefix of a frame is reported as truncated at its own length.
    fn assert_prefixes_truncated(frame: &[u8]) {
        for len in 0..frame.len() {
            let prefix = frame.get(..len).unwrap_or_default();
            assert_eq!(
                scan(prefix),
                Err(ScanError::Truncated { offset: len }),
                "prefix of {len} bytes"
            );
        }
    }

    #[test]
    fn spot_wrapped_event() {
        let event = depth(SPOT);
        assert_eq!(event.stream, Some("btcusdt@depth@100ms"));
        assert_eq!(event.event_type, "depthUpdate");
        assert_eq!(event.event_time, 1_723_161_255_208);
        assert_eq!(event.symbol, "BTCUSDT");
        assert_eq!(event.update_ids(), 50_093_239_189..=50_093_239_202);
        assert_eq!(event.transaction_time, None);
        assert_eq!(event.prev_final_update_id, None);
        let data_start = SPOT.find("{\"e\"").unwrap();
        assert_eq!(event.event_range(), data_start..SPOT.len() - 1);
        assert_eq!(
            event.event_bytes,
            &SPOT.as_bytes()[data_start..SPOT.len() - 1]
        );
    }

    #[test]
    fn futures_events_carry_pu_and_t() {
        let event = depth(USDM);
        assert_eq!(event.stream, Some("btcusdt@depth@0ms"));
        assert_eq!(event.transaction_time, Some(1_723_161_256_298));
        assert_eq!(event.prev_final_update_id, Some(5_123_107_831_937));
        assert_eq!(event.update_ids(), 5_123_107_832_006..=5_123_107_837_557);

        let bare = depth(COINM_BARE);
        assert_eq!(bare.stream, None);
        assert_eq!(bare.symbol, "BTCUSD_PERP");
        assert_eq!(bare.prev_final_update_id, Some(1_007_198_631_198));
        assert_eq!(bare.event_bytes, COINM_BARE.as_bytes());
        assert_eq!(bare.event_offset, 0);
    }

    #[test]
    fn other_streams_are_not_depth_events() {
        let cases = [
            (
                r#"{"stream":"btcusdt@trade","data":{"e":"trade","E":1723161255343,"s":"BTCUSDT","t":3735683259,"p":"61837.63","q":"0.02","T":1723161255342,"m":true,"M":true}}"#,
                Some("btcusdt@trade"),
                Some("trade"),
            ),
            (
                r#"{"stream":"btcusdt@bookTicker","data":{"u":50093239212,"s":"BTCUSDT","b":"61837.63","B":"3.78","a":"61837.64","A":"1.54"}}"#,
                Some("btcusdt@bookTicker"),
                None,
            ),
            (
                r#"{"stream":"sushiusdt@bookTicker","data":{"e":"bookTicker","u":600859600576,"s":"SUSHIUSDT","b":"7.6110","B":"2","a":"7.6120","A":"297","T":1626992741012,"E":1626992741017}}"#,
                Some("sushiusdt@bookTicker"),
                Some("bookTicker"),
            ),
            (
                r#"{"stream":"lrcbtc@aggTrade","data":{"e":"aggTrade","E":1,"s":"LRCBTC","a":12,"p":"0.1","q":"3","f":1,"l":2,"T":1,"m":false,"M":true}}"#,
                Some("lrcbtc@aggTrade"),
                Some("aggTrade"),
            ),
            (
                r#"{"stream":"nknusdt@kline_1m","data":{"e":"kline","E":1,"s":"NKNUSDT","k":{"t":1,"T":2,"s":"NKNUSDT","i":"1m","U":5,"x":false}}}"#,
                Some("nknusdt@kline_1m"),
                Some("kline"),
            ),
            (
                r#"{"lastUpdateId":1027024,"bids":[["4.0","431.0"]],"asks":[]}"#,
                None,
                None,
            ),
            (r#"{"result":null,"id":1}"#, None, None),
        ];
        for (frame, stream, event_type) in cases {
            match scan_str(frame) {
                Ok(Scanned::Other {
                    stream: got_stream,
                    event_type: got_type,
                    event_bytes,
                }) => {
                    assert_eq!((got_stream, got_type), (stream, event_type), "{frame}");
                    assert!(serde_json::from_slice::<Value>(event_bytes).is_ok());
                }
                other => panic!("{frame}: {other:?}"),
            }
        }
    }

    #[test]
    fn control_and_unknown_events_have_their_own_kinds() {
        let shutdown =
            r#"{"stream":"btcusdt@depth","data":{"e":"serverShutdown","E":1699000000000}}"#;
        assert!(matches!(
            scan_str(shutdown),
            Ok(Scanned::ServerShutdown {
                stream: Some("btcusdt@depth"),
                event_time: Some(1_699_000_000_000),
                ..
            })
        ));
        assert!(matches!(
            scan_str(r#"{"e":"serverShutdown"}"#),
            Ok(Scanned::ServerShutdown {
                stream: None,
                event_time: None,
                ..
            })
        ));
        assert!(matches!(
            scan_str(r#"{"e":"serverShutdown","E":-1}"#),
            Err(ScanError::NotAnInteger { key: "E", .. })
        ));
        for not_a_string in [r#"{"e":{depthUpdate}}"#, r#"{"e":[depthUpdate]}"#] {
            assert_eq!(
                scan_str(not_a_string),
                Err(ScanError::NotAString {
                    key: "e",
                    offset: 5
                })
            );
        }
        let unknown = r#"{"e":"listenKeyExpired","E":1,"listenKey":"abc"}"#;
        match scan_str(unknown) {
            Ok(Scanned::Unknown {
                stream: None,
                event_type: "listenKeyExpired",
                event_bytes,
            }) => assert_eq!(event_bytes, unknown.as_bytes()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn strings_with_escapes_are_skipped_whole() {
        let frame = r#"{"data":{"note":"a\"U\":1,\"u\":0\\","e":"depthUpdate","E":5,"s":"X","U":7,"u":9,"b":[["\"U\"","\\"]],"a":[["\u0022,","]}"]],"z":"\\\\\""},"stream":"x@depth"}"#;
        let event = depth(frame);
        assert_eq!(event.update_ids(), 7..=9);
        assert_eq!(event.stream, Some("x@depth"));
        let value: Value = serde_json::from_str(frame).unwrap();
        assert_eq!(oracle(&value), Some(Expected::of(&event)));
    }

    #[test]
    fn nested_values_never_supply_keys() {
        let frame = r#"{"e":"depthUpdate","b":[["U","u"],{"U":999,"u":1,"s":"NESTED","E":0}],"E":2,"s":"REAL","U":10,"a":[[{"pu":3}],[]],"u":20,"k":{"T":4,"e":"trade"}}"#;
        let event = depth(frame);
        assert_eq!(event.symbol, "REAL");
        assert_eq!(event.event_time, 2);
        assert_eq!(event.update_ids(), 10..=20);
        assert_eq!(event.prev_final_update_id, None);
        assert_eq!(event.transaction_time, None);
    }

    #[test]
    fn whitespace_between_every_token() {
        let frame = " \r\n\t{ \"stream\" :\n\"s@depth\" ,\t\"data\"\r: { \"e\" : \"depthUpdate\" , \"E\" : 1 ,\n\"s\" : \"A\" , \"U\" : 2 , \"u\" : 3 , \"b\" : [ [ \"1\" , \"2\" ] ] , \"a\" : [ ] }\n} \n\t\r";
        let event = depth(frame);
        assert_eq!((event.first_update_id, event.final_update_id), (2, 3));
        assert_eq!(event.stream, Some("s@depth"));
        assert!(event.event_bytes.starts_with(b"{ \"e\""));
        assert!(event.event_bytes.ends_with(b"[ ] }"));
    }

    #[test]
    fn every_key_order_gives_the_same_event() {
        let mut pairs = [
            r#""e":"depthUpdate""#,
            r#""E":1723161255208"#,
            r#""s":"BTCUSDT""#,
            r#""U":50093239189"#,
            r#""u":50093239202"#,
            r#""b":[["61737.63","0.0"]]"#,
            r#""a":[["61837.64","1.5"]]"#,
        ];
        let expected = Expected::of(&depth(
            r#"{"e":"depthUpdate","E":1723161255208,"s":"BTCUSDT","U":50093239189,"u":50093239202}"#,
        ));
        // Heap's algorithm, iterative: visits all 5,040 orders.
        let mut counters = [0usize; 7];
        let mut visited = 1;
        let check = |pairs: &[&str; 7]| {
            let frame = format!("{{{}}}", pairs.join(","));
            assert_eq!(Expected::of(&depth(&frame)), expected, "{frame}");
        };
        check(&pairs);
        let mut i = 1;
        while i < pairs.len() {
            if counters[i] < i {
                let swap_with = if i % 2 == 0 { 0 } else { counters[i] };
                pairs.swap(swap_with, i);
                check(&pairs);
                visited += 1;
                counters[i] += 1;
                i = 1;
            } else {
                counters[i] = 0;
                i += 1;
            }
        }
        assert_eq!(visited, 5040);
        // The wrapper's keys in either order.
        let swapped =
            r#"{"data":{"e":"depthUpdate","E":1,"s":"A","U":1,"u":1},"stream":"a@depth"}"#;
        assert_eq!(depth(swapped).stream, Some("a@depth"));
    }

    #[test]
    fn missing_keys_are_reported() {
        let full = [r#""E":1"#, r#""s":"A""#, r#""U":2"#, r#""u":3"#];
        let keys = ["E", "s", "U", "u"];
        for (skip, key) in keys.iter().enumerate() {
            let rest: Vec<&str> = full
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, pair)| *pair)
                .collect();
            let frame = format!(
                r#"{{"stream":"a@depth","data":{{"e":"depthUpdate",{}}}}}"#,
                rest.join(",")
            );
            assert_eq!(
                scan_str(&frame),
                Err(ScanError::MissingKey {
                    key,
                    offset: frame.find("{\"e\"").unwrap()
                }),
                "{frame}"
            );
        }
        // Without `e` the object is not a depth event at all.
        assert!(matches!(
            scan_str(r#"{"E":1,"s":"A","U":2,"u":3}"#),
            Ok(Scanned::Other {
                event_type: None,
                ..
            })
        ));
    }

    #[test]
    fn integers_are_strict() {
        let with_u = |u: &str| format!(r#"{{"e":"depthUpdate","E":1,"s":"A","U":0,"u":{u}}}"#);
        let max = with_u("18446744073709551615");
        assert_eq!(depth(&max).final_update_id, u64::MAX);
        assert_eq!(depth(&with_u("0")).final_update_id, 0);
        let offset = with_u("").len() - 1;
        for overflowing in ["18446744073709551616", "99999999999999999999999"] {
            assert_eq!(
                scan_str(&with_u(overflowing)),
                Err(ScanError::IntegerOverflow { key: "u", offset })
            );
        }
        for malformed in [
            "-1",
            "-0",
            "01",
            "1.0",
            "1e3",
            "1E3",
            "\"5\"",
            "null",
            "true",
            "[5]",
            "{}",
            "1-2",
            "99999999999999999999.5",
        ] {
            assert_eq!(
                scan_str(&with_u(malformed)),
                Err(ScanError::NotAnInteger { key: "u", offset }),
                "{malformed}"
            );
        }
        assert!(matches!(
            scan_str(&with_u("+1")),
            Err(ScanError::UnexpectedByte { found: b'+', .. })
        ));
        assert!(matches!(
            scan_str(&with_u("12x")),
            Err(ScanError::UnexpectedByte { found: b'x', .. })
        ));
    }

    #[test]
    fn inverted_range_is_reported() {
        let frame = r#"{"e":"depthUpdate","E":1,"s":"A","U":10,"u":9}"#;
        assert_eq!(
            scan_str(frame),
            Err(ScanError::RangeInverted {
                first: 10,
                last: 9,
                offset: frame.len() - 2
            })
        );
        let equal = r#"{"e":"depthUpdate","E":1,"s":"A","U":10,"u":10}"#;
        assert_eq!(depth(equal).update_ids(), 10..=10);
    }

    #[test]
    fn duplicate_keys_take_the_last() {
        let frame =
            r#"{"e":"trade","e":"depthUpdate","E":1,"s":"A","s":"B","U":1,"u":2,"U":2,"u":3}"#;
        let event = depth(frame);
        assert_eq!(event.symbol, "B");
        assert_eq!(event.update_ids(), 2..=3);
        let value: Value = serde_json::from_str(frame).unwrap();
        assert_eq!(oracle(&value), Some(Expected::of(&event)));

        // A later `data` object replaces the earlier one whole; a later non-object `data`
        // makes the frame bare.
        let twice = r#"{"data":{"e":"depthUpdate","E":1,"s":"A","U":1,"u":2,"pu":0},"stream":"a","data":{"e":"depthUpdate","E":5,"s":"B","U":3,"u":4}}"#;
        let event = depth(twice);
        assert_eq!((event.symbol, event.prev_final_update_id), ("B", None));
        let demoted = r#"{"data":{"e":"depthUpdate","E":1,"s":"A","U":1,"u":2},"data":7}"#;
        assert!(matches!(
            scan_str(demoted),
            Ok(Scanned::Other {
                event_type: None,
                ..
            })
        ));
    }

    #[test]
    fn structural_errors_carry_offsets() {
        let cases: [(&[u8], ScanError); 14] = [
            (b"", ScanError::Truncated { offset: 0 }),
            (b"   ", ScanError::Truncated { offset: 3 }),
            (b" [1]", ScanError::NotAnObject { offset: 1 }),
            (b"{} x", ScanError::TrailingBytes { offset: 3 }),
            (b"{}{}", ScanError::TrailingBytes { offset: 2 }),
            (
                br#"{"a":[1}"#,
                ScanError::UnexpectedByte {
                    offset: 7,
                    found: b'}',
                    expected: "`]`",
                },
            ),
            (
                br#"{"a":{]}"#,
                ScanError::UnexpectedByte {
                    offset: 6,
                    found: b']',
                    expected: "`}`",
                },
            ),
            (
                br#"{"a" 1}"#,
                ScanError::UnexpectedByte {
                    offset: 5,
                    found: b'1',
                    expected: "`:` after an object key",
                },
            ),
            (
                br#"{"a":1 "b":2}"#,
                ScanError::UnexpectedByte {
                    offset: 7,
                    found: b'"',
                    expected: "`,` or `}` after an object value",
                },
            ),
            (
                br#"{a:1}"#,
                ScanError::UnexpectedByte {
                    offset: 1,
                    found: b'a',
                    expected: "`\"` opening an object key",
                },
            ),
            (
                br#"{"a":trux}"#,
                ScanError::UnexpectedByte {
                    offset: 8,
                    found: b'x',
                    expected: "a JSON literal",
                },
            ),
            (
                br#"{"a":,}"#,
                ScanError::UnexpectedByte {
                    offset: 5,
                    found: b',',
                    expected: "a JSON value",
                },
            ),
            (
                br#"{"x":1,"\u0055":2}"#,
                ScanError::EscapedKey { offset: 7 },
            ),
            (
                b"{\"e\":\"depthUpdate\",\"E\":1,\"s\":\"\xff\",\"U\":1,\"u\":1}",
                ScanError::InvalidUtf8 {
                    key: "s",
                    offset: 29,
                },
            ),
        ];
        for (input, error) in cases {
            assert_eq!(
                scan(input),
                Err(error),
                "{}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(scan(input).err().map(|e| e.offset()), Some(error.offset()));
        }
        assert_eq!(
            scan_str(r#"{"e":"depthUpdate","E":1,"s":"A\u0042","U":1,"u":1}"#),
            Err(ScanError::EscapedString {
                key: "s",
                offset: 29
            })
        );
        assert_eq!(
            scan_str(r#"{"e":"depthUpdate","E":1,"s":5,"U":1,"u":1}"#),
            Err(ScanError::NotAString {
                key: "s",
                offset: 29
            })
        );
        assert_eq!(
            scan_str(r#"{"stream":7,"data":{}}"#),
            Err(ScanError::NotAString {
                key: "stream",
                offset: 10
            })
        );
        let message = ScanError::RangeInverted {
            first: 2,
            last: 1,
            offset: 9,
        }
        .to_string();
        assert_eq!(
            message,
            "update ids inverted at byte 9: U = 2 is above u = 1"
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let nested = |levels: usize| {
            format!(
                r#"{{"e":"x","b":{}{}}}"#,
                "[".repeat(levels),
                "]".repeat(levels)
            )
        };
        assert!(scan_str(&nested(MAX_NESTING as usize)).is_ok());
        assert_eq!(
            scan_str(&nested(MAX_NESTING as usize + 1)),
            Err(ScanError::TooDeep {
                offset: 13 + MAX_NESTING as usize
            })
        );
        assert!(matches!(
            scan_str(&nested(100_000)),
            Err(ScanError::TooDeep { .. })
        ));
    }

    #[test]
    fn every_truncation_is_reported_without_panic() {
        for frame in [SPOT, USDM, COINM_BARE] {
            assert_prefixes_truncated(frame.as_bytes());
        }
    }

    /// xorshift64: deterministic and dependency-free.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, bound: usize) -> usize {
            (self.next() % bound.max(1) as u64) as usize
        }
    }

    /// Bytes that tend to matter to a JSON scanner.
    const ALPHABET: &[u8] = b"{}[]\":,\\ \n0123456789-+.eEtrufalsnUuEsTp\x00\x7f\xc3\xff";

    fn mutate(rng: &mut XorShift, input: &mut Vec<u8>) {
        let len = input.len();
        match rng.below(7) {
            0 if len > 0 => input[rng.below(len)] = ALPHABET[rng.below(ALPHABET.len())],
            1 => input.insert(rng.below(len + 1), ALPHABET[rng.below(ALPHABET.len())]),
            2 if len > 0 => {
                input.remove(rng.below(len));
            }
            3 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(16)).min(len);
                let copy = input[start..end].to_vec();
                let at = rng.below(len + 1);
                input.splice(at..at, copy);
            }
            4 => input.truncate(rng.below(len + 1)),
            5 if len > 1 => {
                let (a, b) = (rng.below(len), rng.below(len));
                input.swap(a, b);
            }
            _ if len > 0 => input[rng.below(len)] = rng.next() as u8,
            _ => input.push(b'{'),
        }
    }

    /// Checks one input against serde_json: agreement whenever both accept it, and acceptance
    /// by `scan` of every well-formed depth event it can represent. Returns whether the input
    /// was a depth event by both.
    fn agrees_with_serde(input: &[u8]) -> bool {
        let scanned = scan(input);
        let Ok(frame) = serde_json::from_slice::<Value>(input) else {
            return false;
        };
        let expected = oracle(&frame);
        match scanned {
            Ok(Scanned::Depth(event)) => {
                assert_eq!(Some(Expected::of(&event)), expected, "{input:?}");
                let (_, data) = split_frame(&frame).unwrap();
                let reparsed: Value = serde_json::from_slice(event.event_bytes).unwrap();
                assert_eq!(&reparsed, data);
                true
            }
            other => {
                // The scanner may refuse escapes and `-0`, which serde_json accepts.
                let representable =
                    !input.contains(&b'\\') && !input.windows(2).any(|pair| pair == b"-0");
                assert!(
                    expected.is_none() || !representable,
                    "serde_json sees {expected:?}, scan gave {other:?} for {}",
                    String::from_utf8_lossy(input)
                );
                false
            }
        }
    }

    #[test]
    fn block_masks_match_the_reference() {
        let mut rng = XorShift(0x0123_4567_89ab_cdef);
        let mut block = [0u8; BLOCK];
        for start in (0..256).step_by(BLOCK) {
            for (i, slot) in block.iter_mut().enumerate() {
                *slot = (start + i) as u8;
            }
            assert_eq!(block_masks(&block), block_masks_portable(&block));
        }
        for round in 0..4_000 {
            for slot in &mut block {
                *slot = if round % 2 == 0 {
                    ALPHABET[rng.below(ALPHABET.len())]
                } else {
                    rng.next() as u8
                };
            }
            assert_eq!(block_masks(&block), block_masks_portable(&block));
        }
        assert_eq!(prefix_xor(0b1001), 0b0111);
        assert_eq!(prefix_xor(1), u64::MAX);
    }

    #[test]
    fn digit_helpers_match_the_byte_at_a_time_answer() {
        assert_eq!(eight_digits(u64::from_le_bytes(*b"12345678")), 12_345_678);
        assert_eq!(eight_digits(u64::from_le_bytes(*b"00000009")), 9);
        assert_eq!(eight_digits(u64::from_le_bytes(*b"99999999")), 99_999_999);
        let mut rng = XorShift(0x5151_7777_2222_9999);
        for _ in 0..4_000 {
            let len = rng.below(30);
            let bytes: Vec<u8> = (0..len)
                .map(|_| match rng.below(6) {
                    0 => rng.next() as u8,
                    _ => b'0' + rng.below(10) as u8,
                })
                .collect();
            let expected = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
            assert_eq!(digit_run(&bytes), expected, "{bytes:?}");
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let span = Span {
                start: 0,
                end: bytes.len(),
                escaped: false,
            };
            let strict = !text.is_empty()
                && text.bytes().all(|b| b.is_ascii_digit())
                && (text == "0" || !text.starts_with('0'));
            match integer(&bytes, span, "x") {
                Ok(value) => assert_eq!(Some(value), text.parse::<u64>().ok().filter(|_| strict)),
                Err(ScanError::IntegerOverflow { .. }) => {
                    assert!(strict && text.parse::<u64>().is_err())
                }
                Err(_) => assert!(!strict, "{text}"),
            }
        }
    }

    #[test]
    fn word_search_finds_the_first_quote_or_backslash() {
        let mut rng = XorShift(0xfeed_face_cafe_beef);
        for _ in 0..4_000 {
            let len = rng.below(40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| match rng.below(20) {
                    0 => b'"',
                    1 => b'\\',
                    _ => rng.next() as u8,
                })
                .collect();
            let from = rng.below(len + 2);
            let expected = bytes
                .get(from..)
                .and_then(|rest| rest.iter().position(|&b| b == b'"' || b == b'\\'))
                .map(|at| from + at);
            assert_eq!(
                find_quote_or_backslash(&bytes, from),
                expected,
                "{bytes:?} {from}"
            );
        }
    }

    /// Appends a random valid JSON string: escapes, brackets and multi-byte characters.
    fn random_string(rng: &mut XorShift, out: &mut String) {
        out.push('"');
        for _ in 0..rng.below(90) {
            match rng.below(14) {
                0 => out.push_str("\\\""),
                1 => out.push_str("\\\\"),
                2 => out.push_str("\\u0055"),
                3 => out.push('['),
                4 => out.push(']'),
                5 => out.push('{'),
                6 => out.push('}'),
                7 => out.push('é'),
                8 => out.push(','),
                _ => out.push(char::from(b'a' + rng.below(26) as u8)),
            }
        }
        out.push('"');
    }

    /// Appends a random valid JSON value, nesting at most `levels` deep.
    fn random_json(rng: &mut XorShift, levels: u32, out: &mut String) {
        const SCALARS: [&str; 6] = ["0", "-1.5e3", "true", "false", "null", "12345678901234"];
        let kind = if levels == 0 {
            rng.below(2)
        } else {
            rng.below(6)
        };
        match kind {
            0 => random_string(rng, out),
            1 => out.push_str(SCALARS[rng.below(SCALARS.len())]),
            2 | 3 => {
                out.push('[');
                for i in 0..rng.below(6) {
                    if i > 0 {
                        out.push_str([",", " , ", ",\n"][rng.below(3)]);
                    }
                    random_json(rng, levels - 1, out);
                }
                out.push(']');
            }
            _ => {
                out.push('{');
                for i in 0..rng.below(5) {
                    if i > 0 {
                        out.push(',');
                    }
                    random_string(rng, out);
                    out.push(':');
                    random_json(rng, levels - 1, out);
                }
                out.push('}');
            }
        }
    }

    #[test]
    fn skipped_values_of_every_shape_length_and_alignment() {
        let mut rng = XorShift(0x0bad_cafe_1234_5678);
        for round in 0..1_500u64 {
            let mut value = String::new();
            random_json(&mut rng, 6, &mut value);
            let pad = " ".repeat(rng.below(70));
            let frame = format!(
                r#"{{"e":"depthUpdate","x":{pad}{value},"E":1,"s":"A","U":{round},"u":{round},"b":{value}}}"#
            );
            let event = depth(&frame);
            assert_eq!(event.update_ids(), round..=round);
            let tree: Value = serde_json::from_str(&frame).unwrap();
            assert_eq!(oracle(&tree), Some(Expected::of(&event)), "{frame}");
            if round % 25 == 0 && frame.len() < 1_500 {
                assert_prefixes_truncated(frame.as_bytes());
            }
        }
    }

    #[test]
    fn fuzz_mutations_never_panic_and_agree_with_serde() {
        let long = format!(
            r#"{{"stream":"btcusdt@depth@100ms","data":{{"e":"depthUpdate","E":1723161255208,"s":"BTCUSDT","U":50093239189,"u":50093239202,"b":[{}],"a":[{}]}}}}"#,
            [r#"["61737.63000000","0.00000000"]"#; 7].join(","),
            [
                r#"["61837.64000000","1.54698000"]"#,
                r#"["61839.85000000","0.00000000"]"#
            ]
            .join(",")
        );
        let seeds = [
            SPOT,
            USDM,
            COINM_BARE,
            &long,
            r#"{"data":{"e":"depthUpdate","E":1,"s":"A\"","U":1,"u":2,"b":[["\\",{"U":1}]]},"stream":"x"}"#,
        ];
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut depth_events = 0;
        let mut cases = 0;
        for seed in seeds {
            for _ in 0..6_000 {
                let mut input = seed.as_bytes().to_vec();
                for _ in 0..1 + rng.below(3) {
                    mutate(&mut rng, &mut input);
                }
                if agrees_with_serde(&input) {
                    depth_events += 1;
                }
                cases += 1;
            }
        }
        // Pure noise as well.
        for _ in 0..4_000 {
            let len = rng.below(64);
            let noise: Vec<u8> = (0..len)
                .map(|_| ALPHABET[rng.below(ALPHABET.len())])
                .collect();
            let _ = scan(&noise);
            cases += 1;
        }
        println!("fuzz: {cases} inputs, {depth_events} still depth events");
        assert_eq!(cases, 34_000);
        assert!(
            depth_events > 1_000,
            "mutations too destructive: {depth_events}"
        );
    }

    #[test]
    fn snapshots_parse_with_serde() {
        let spot = parse_snapshot(
            br#"{"lastUpdateId":1027024,"bids":[["4.00000000","431.00000000"]],"asks":[["4.00000200","12.00000000"],["4.1","1"]]}"#,
        )
        .unwrap();
        assert_eq!(spot.last_update_id, 1_027_024);
        assert_eq!(
            spot.bids,
            vec![PriceLevel {
                price: "4.00000000".into(),
                quantity: "431.00000000".into()
            }]
        );
        assert_eq!(spot.asks.len(), 2);
        assert_eq!((spot.event_time, spot.transaction_time), (None, None));

        let coin_m = parse_snapshot(
            br#"{"lastUpdateId":167006089178,"E":1626916404580,"T":1626916404574,"symbol":"BCHUSD_PERP","pair":"BCHUSD","bids":[],"asks":[["427.9","169"]]}"#,
        )
        .unwrap();
        assert_eq!(coin_m.event_time, Some(1_626_916_404_580));
        assert_eq!(coin_m.transaction_time, Some(1_626_916_404_574));

        match parse_snapshot(br#"{"code":-1121,"msg":"Invalid symbol."}"#) {
            Err(SnapshotError::Rejected(api)) => {
                assert_eq!(api.code, -1121);
                assert_eq!(api.msg, "Invalid symbol.");
                assert_eq!(api.to_string(), "Binance error -1121: Invalid symbol.");
            }
            other => panic!("{other:?}"),
        }
        for malformed in [
            &br#"{"lastUpdateId":-1,"bids":[],"asks":[]}"#[..],
            br#"{"lastUpdateId":1,"bids":[["1","2","3"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[["1"]],"asks":[]}"#,
            br#"{"lastUpdateId":1,"bids":[]}"#,
            br#"{"lastUpdateId":1,"bids":[],"asks":[]"#,
        ] {
            assert!(
                matches!(parse_snapshot(malformed), Err(SnapshotError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(malformed)
            );
        }
    }

    fn captures_dir() -> Option<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures/binance");
        if dir.is_dir() {
            Some(dir)
        } else {
            println!("skipping: ../shared/captures not found");
            None
        }
    }

    #[derive(Debug, Default, PartialEq, Eq)]
    struct Counts {
        depth: usize,
        other: usize,
        snapshots: usize,
    }

    /// Checks one recorded frame against serde_json and counts what it was.
    fn check_recorded(json: &[u8], counts: &mut Counts, at: &str) {
        let frame: Value = serde_json::from_slice(json).unwrap_or_else(|e| panic!("{at}: {e}"));
        let scanned = scan(json).unwrap_or_else(|e| panic!("{at}: {e}"));
        match (oracle(&frame), scanned) {
            (Some(expected), Scanned::Depth(event)) => {
                assert_eq!(Expected::of(&event), expected, "{at}");
                let reparsed: Value = serde_json::from_slice(event.event_bytes).unwrap();
                assert_eq!(Some(&reparsed), frame.get("data"), "{at}");
                if counts.depth == 0 {
                    assert_prefixes_truncated(json);
                }
                counts.depth += 1;
            }
            (
                None,
                Scanned::Other {
                    stream, event_type, ..
                },
            ) => {
                assert_eq!(stream, frame.get("stream").and_then(Value::as_str), "{at}");
                let data = frame.get("data").unwrap_or(&frame);
                assert_eq!(event_type, data.get("e").and_then(Value::as_str), "{at}");
                if frame.get("lastUpdateId").is_some() {
                    check_snapshot(json, &frame, at);
                    counts.snapshots += 1;
                }
                counts.other += 1;
            }
            (expected, scanned) => panic!("{at}: serde_json {expected:?}, scan {scanned:?}"),
        }
    }

    fn check_snapshot(json: &[u8], frame: &Value, at: &str) {
        let snapshot = parse_snapshot(json).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(
            Some(snapshot.last_update_id),
            frame["lastUpdateId"].as_u64()
        );
        assert_eq!(snapshot.event_time, frame.get("E").and_then(Value::as_u64));
        assert_eq!(
            snapshot.transaction_time,
            frame.get("T").and_then(Value::as_u64)
        );
        for (side, levels) in [("bids", &snapshot.bids), ("asks", &snapshot.asks)] {
            let recorded = frame[side].as_array().unwrap();
            assert_eq!(levels.len(), recorded.len(), "{at} {side}");
            for (level, pair) in levels.iter().zip(recorded) {
                assert_eq!(pair[0].as_str(), Some(level.price.as_str()));
                assert_eq!(pair[1].as_str(), Some(level.quantity.as_str()));
            }
        }
    }

    #[test]
    fn hftbacktest_recordings_match_serde() {
        let Some(dir) = captures_dir() else {
            return;
        };
        let files = [
            ("spot_btcusdt_20240808.gz", 3_451),
            ("usdm_btcusdt_20240808.gz", 6_551),
            ("cm_btcusd_perp_20240808.gz", 26_847),
        ];
        for (name, expected_depth) in files {
            let mut text = String::new();
            GzDecoder::new(fs::File::open(dir.join("hftbacktest").join(name)).unwrap())
                .read_to_string(&mut text)
                .unwrap();
            let mut counts = Counts::default();
            for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
                let (_, json) = line.split_once(' ').unwrap();
                check_recorded(
                    json.as_bytes(),
                    &mut counts,
                    &format!("{name}:{}", number + 1),
                );
            }
            println!("{name}: {counts:?}");
            assert_eq!(counts.depth, expected_depth, "{name}");
            assert_eq!(counts.snapshots, 1, "{name}");
        }
    }

    #[test]
    fn cryptofeed_recordings_match_serde() {
        let Some(dir) = captures_dir() else {
            return;
        };
        let venues = [
            ("BINANCE", 177, 4),
            ("BINANCE_FUTURES", 764, 4),
            ("BINANCE_DELIVERY", 2_047, 10),
            ("BINANCE_US", 336, 4),
        ];
        for (venue, expected_depth, expected_snapshots) in venues {
            let ws =
                fs::read_to_string(dir.join("cryptofeed").join(format!("{venue}.ws.1.0"))).unwrap();
            let mut counts = Counts::default();
            for (number, line) in ws.lines().enumerate().skip(1) {
                if line.is_empty() {
                    continue;
                }
                let (_, json) = line.split_once(": ").unwrap();
                check_recorded(
                    json.as_bytes(),
                    &mut counts,
                    &format!("{venue}.ws:{}", number + 1),
                );
            }
            let http = fs::read_to_string(dir.join("cryptofeed").join(format!("{venue}.http.0.0")))
                .unwrap();
            let mut snapshots = 0;
            for (number, line) in http.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
                let (_, reply) = line.split_once(" -> ").unwrap();
                let (_, json) = reply.split_once(": ").unwrap();
                let frame: Value = serde_json::from_str(json).unwrap();
                check_snapshot(
                    json.as_bytes(),
                    &frame,
                    &format!("{venue}.http:{}", number + 1),
                );
                snapshots += 1;
            }
            println!("{venue}: {counts:?}, {snapshots} REST snapshots");
            assert_eq!(counts.depth, expected_depth, "{venue}");
            assert_eq!(snapshots, expected_snapshots, "{venue}");
        }
    }
}
