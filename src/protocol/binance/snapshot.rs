//! REST depth snapshots and API error bodies, parsed with serde.

use serde::Deserialize;
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
    // serde's derived struct reader also takes the sequence form (`[0,[],[]]`): a snapshot
    // is an object, nothing else.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        let err = <serde_json::Error as serde::de::Error>::custom("a snapshot is a JSON object");
        return Err(SnapshotError::Malformed(err));
    }
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
