//! REST depth snapshots and API error bodies, parsed with serde.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use thiserror::Error;

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
    parse_object(bytes)
}

/// A snapshot body's `lastUpdateId`, after the same checks as [`parse_snapshot`] (an object
/// with `lastUpdateId`, `bids` and `asks`, each level a pair of strings, optional `E` and
/// `T` numbers), but keeping nothing of the levels: no allocation however deep the book,
/// for the rx thread, which passes the body on untouched. Levels must be
/// `[price, quantity]` arrays, as Binance sends them.
///
/// # Errors
///
/// As for [`parse_snapshot`].
///
/// ```
/// use gapless::protocol::binance::snapshot_last_update_id;
///
/// let body = br#"{"lastUpdateId":1027024,"bids":[["4.00000000","431.00000000"]],"asks":[]}"#;
/// assert_eq!(snapshot_last_update_id(body).unwrap(), 1027024);
/// assert!(snapshot_last_update_id(br#"{"lastUpdateId":1,"bids":[["4"]],"asks":[]}"#).is_err());
/// ```
pub fn snapshot_last_update_id(bytes: &[u8]) -> Result<u64, SnapshotError> {
    parse_object::<SnapshotIds>(bytes).map(|s| s.last_update_id)
}

/// Parses `bytes` as `T`, which must come from a JSON object; a Binance error body is told
/// apart from a malformed one.
fn parse_object<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, SnapshotError> {
    // serde's derived struct reader also takes the sequence form (`[0,[],[]]`): a snapshot
    // is an object, nothing else.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        let err = <serde_json::Error as serde::de::Error>::custom("a snapshot is a JSON object");
        return Err(SnapshotError::Malformed(err));
    }
    // JSON is UTF-8 text, and consumers get the body as it came. serde skips the values of
    // keys it does not know without looking at their bytes, so it would not say.
    if std::str::from_utf8(bytes).is_err() {
        let err = <serde_json::Error as serde::de::Error>::custom("a snapshot is UTF-8 text");
        return Err(SnapshotError::Malformed(err));
    }
    serde_json::from_slice(bytes).map_err(|err| match parse_api_error(bytes) {
        Ok(api) => SnapshotError::Rejected(api),
        Err(_) => SnapshotError::Malformed(err),
    })
}

/// [`DepthSnapshot`] with its levels checked and thrown away.
#[derive(Deserialize)]
struct SnapshotIds {
    #[serde(rename = "lastUpdateId")]
    last_update_id: u64,
    #[serde(rename = "bids")]
    _bids: Levels,
    #[serde(rename = "asks")]
    _asks: Levels,
    #[serde(rename = "E", default)]
    _event_time: Option<u64>,
    #[serde(rename = "T", default)]
    _transaction_time: Option<u64>,
}

/// An array of `[price, quantity]` string pairs, checked and not kept.
struct Levels;

impl<'de> Deserialize<'de> for Levels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Levels;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of [price, quantity] levels")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Levels, A::Error> {
                while seq.next_element::<Level>()?.is_some() {}
                Ok(Levels)
            }
        }
        d.deserialize_seq(V)
    }
}

/// One `[price, quantity]` pair of strings, checked and not kept.
struct Level;

impl<'de> Deserialize<'de> for Level {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Level;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a [price, quantity] pair of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Level, A::Error> {
                for i in 0..2 {
                    if seq.next_element::<Decimal>()?.is_none() {
                        return Err(de::Error::invalid_length(i, &self));
                    }
                }
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(Level)
            }
        }
        d.deserialize_seq(V)
    }
}

/// A JSON string (a decimal as Binance sends it), checked and not kept.
struct Decimal;

impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Decimal;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Decimal, E> {
                Ok(Decimal)
            }
        }
        d.deserialize_str(V)
    }
}

/// Parses a Binance REST error body such as `{"code":-1121,"msg":"Invalid symbol."}`.
///
/// # Errors
///
/// serde_json's error when the body is not one.
pub fn parse_api_error(bytes: &[u8]) -> Result<ApiError, serde_json::Error> {
    serde_json::from_slice(bytes)
}
