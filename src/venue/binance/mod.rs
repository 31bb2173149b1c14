//! The Binance venue (sans-IO): one combined-stream WebSocket connection carrying the diff
//! depth stream of many symbols, and the REST depth snapshots that seed each of them.
//!
//! [`BinanceSession`] never touches a socket or the OS clock. The I/O shell feeds it:
//!
//! - [`BinanceSession::on_connected`] and [`BinanceSession::on_disconnected`] as the WebSocket
//!   connection opens and closes,
//! - [`BinanceSession::on_text`] with every text frame (a combined-stream wrapper
//!   `{"stream":"btcusdt@depth@100ms","data":{..}}` or a bare event),
//! - [`BinanceSession::on_snapshot`] with the outcome of each REST depth request,
//! - [`BinanceSession::handle_timeout`] when [`BinanceSession::poll_timeout`] falls due,
//!
//! and asks it what to do: [`BinanceSession::poll_snapshot`] (a REST request to send, within
//! the request-weight budget), [`BinanceSession::poll_reconnect`] (the connection must be
//! replaced) and [`BinanceSession::poll_timeout`]. Consumer events go to an
//! [`Emit`](crate::venue::Emit). Times
//! are nanoseconds on whatever clock the caller uses: a monotonic clock live, a capture's
//! timestamps in replay.
//!
//! # The venue's rules
//!
//! Each symbol is one stream. Until its snapshot arrives, its events are buffered. The
//! snapshot's `lastUpdateId` is `L`; the first buffered event's first id is `U`.
//!
//! | | spot | USD-M and COIN-M futures |
//! |---|---|---|
//! | snapshot too old (fetch again) | `L < U` of the first buffered event | `L < U` of the first buffered event |
//! | stale event (dropped, also after the snapshot) | `u <= L` | `u < L` |
//! | first applied event | `U <= L + 1 <= u` | `U <= L <= u` |
//! | each later event | `U == previous u + 1` | `pu == previous u` |
//! | [`crate::sequencer`] model | range, `resynchronize(L + 1)` | linked range, `resynchronize(L)` |
//!
//! Futures update ids are not contiguous per symbol: the spot test is never applied to them.
//! A break resyncs that symbol alone; the connection and the other symbols are kept.
//!
//! # What consumers receive, per symbol (stream `stream_base + index`)
//!
//! `State{ResetRequired}` when a synced symbol loses continuity (or the connection drops),
//! then, once a snapshot lines up: `SnapshotBegin`, the snapshot body as one
//! `Message{seq: L, snapshot: true}`, `SnapshotEnd{next}` (`L + 1` on spot, `L` on futures),
//! the buffered events that follow it as `Range{first: U, last: u}` carrying the event's JSON
//! bytes untouched, then `State{Synced}` and every later event as a `Range`. No delta is
//! published unless it was proven continuous. A delta delivered at once borrows the input
//! frame; a buffered one is read from the symbol's fixed storage.
//!
//! # Memory
//!
//! Everything is allocated in [`BinanceSession::new`]: per symbol, a byte ring of
//! [`BinanceSpec::pending_bytes`] bytes and [`BinanceSpec::max_pending`] entries for the events
//! that wait for a snapshot. The buffered events always form one continuous chain: an event
//! that does not continue the newest buffered one restarts the buffer from that event, and
//! when the ring is full the **oldest** events are dropped. Both are safe under the rules
//! above, since a snapshot older than the first buffered event is fetched again.

mod fetch;
mod link;
mod pending;
mod rules;
mod session;
mod spec;
mod sync;
#[cfg(test)]
mod tests;
mod venue;

pub use link::Backoff;
pub use session::BinanceSession;
pub use session::MAX_LINKS;
pub use spec::{
    BinanceSpec, MAX_CONNECTIONS, MAX_SLOTS, MAX_STREAMS_BYTES, MAX_STREAMS_PER_CONNECTION,
    SnapshotBackoff, SpecError,
};
pub use venue::{BinanceVenue, TransportStats, channel_stats, combined_url};

/// Which Binance market a venue connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Market {
    /// Spot (`stream.binance.com`, `/api/v3/depth`): contiguous update ids, no `pu`.
    Spot,
    /// USD-M futures (`fstream.binance.com`, `/fapi/v1/depth`): events linked by `pu`.
    Usdm,
    /// COIN-M futures (`dstream.binance.com`, `/dapi/v1/depth`): events linked by `pu`.
    Coinm,
}

/// A REST depth snapshot the I/O shell should fetch, then report with
/// [`BinanceSession::on_snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// Index of the symbol in [`BinanceSpec::symbols`].
    pub symbol: usize,
    /// Path and query to append to the market's REST base URL, for example
    /// `/api/v3/depth?symbol=BTCUSDT&limit=1000`.
    pub path_and_query: String,
    /// The request weight Binance charges for it.
    pub weight: u32,
}

/// What a snapshot request produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotResult<'a> {
    /// A 200 response with this body.
    Body(&'a [u8]),
    /// A response with another status: 429 (rate limited), 418 (banned) or any other.
    Status {
        /// The HTTP status code.
        code: u16,
        /// The `Retry-After` header, in seconds, when present.
        retry_after_secs: Option<u64>,
    },
    /// No response: connection refused, reset, or timed out in the shell.
    Failed,
}

/// Why the WebSocket connection should be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconnectReason {
    /// The server announced it is about to close the connection (`serverShutdown`).
    ServerShutdown,
    /// The connection reached [`BinanceSpec::ws_max_age_ns`], before the server's 24-hour cut.
    MaxAge,
    /// Nothing arrived for [`BinanceSpec::silence_timeout_ns`].
    Silence,
}

/// Counters and gauges of one symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SymbolStats {
    /// Depth events routed to the symbol.
    pub events: u64,
    /// Deltas published to consumers.
    pub applied: u64,
    /// Events dropped as older than the snapshot (`u <= L` spot, `u < L` futures), whether
    /// buffered before it or received after it.
    pub dropped_stale: u64,
    /// Of [`SymbolStats::dropped_stale`], those received after the snapshot was applied.
    pub stale_after_snapshot: u64,
    /// Events wholly covered by what was already applied or buffered.
    pub duplicates: u64,
    /// Continuity breaks: missed events (while synced or while buffering), or more events in
    /// a row than [`BinanceSpec::max_pending`] that brought nothing new (the snapshot or an
    /// event claimed ids far ahead of the stream).
    pub breaks: u64,
    /// Times the symbol lost sync after a snapshot was applied (a break, a disconnect that
    /// could not be bridged).
    pub resyncs: u64,
    /// Events of one connection dropped for running ahead of the delivered chain while
    /// another connection that carries the symbol had not yet delivered what lies between
    /// (that connection's copies are delivered instead).
    pub ahead: u64,
    /// Times the symbol carried on across a lost connection: the next connection's first
    /// event linked to the last one delivered, by the market's rule.
    pub relinked: u64,
    /// Times the first event after a lost connection did not link (events were missed in
    /// between): the symbol resynced.
    pub relinks_failed: u64,
    /// Times no event linked within [`BinanceSpec::relink_timeout_ns`] of losing every
    /// connection: the symbol resynced.
    pub relinks_expired: u64,
    /// Snapshot requests issued.
    pub snapshot_requests: u64,
    /// Snapshots applied.
    pub snapshots_applied: u64,
    /// Snapshots that did not line up with the buffered events and were fetched again.
    pub snapshots_stale: u64,
    /// Snapshot bodies that arrived when the symbol had nothing to check them against.
    pub snapshots_discarded: u64,
    /// Snapshot requests that failed: no response, a timeout, an error status other than
    /// 429, 418 and 403, or a body that is not a snapshot.
    pub snapshots_failed: u64,
    /// 429 (rate limited) answers.
    pub rate_limited: u64,
    /// 418 (IP banned) answers.
    pub banned: u64,
    /// 403 answers: the venue's firewall refused the IP (too many requests); the venue
    /// pauses as for a 429.
    pub firewall_blocked: u64,
    /// The snapshot is no longer requested: it was refused with a permanent error (a 4xx
    /// other than 429, 418, 403 and 408, such as an invalid symbol) three times since its
    /// last snapshot.
    pub snapshot_given_up: bool,
    /// Events whose ids contradict themselves (`pu >= U`, a missing `pu` on futures,
    /// `u == u64::MAX`).
    pub malformed: u64,
    /// Buffered events dropped to make room (oldest first) or too large to keep.
    pub overflowed: u64,
    /// Events buffered now.
    pub buffered: usize,
    /// Most events ever buffered at once.
    pub buffered_hwm: usize,
}

/// Counters of the connection as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VenueStats {
    /// Text frames received.
    pub frames: u64,
    /// Bytes of text frames received.
    pub bytes: u64,
    /// Diff-depth events among them.
    pub depth_events: u64,
    /// Events of other streams (trades, book tickers, klines, replies), ignored.
    pub ignored: u64,
    /// Events with an unknown `e`, ignored.
    pub unknown_events: u64,
    /// Depth events for a symbol that is not configured.
    pub unknown_symbol: u64,
    /// Frames that are not well-formed JSON objects or lack a depth event's keys.
    pub malformed: u64,
    /// Depth events whose ids are inverted (`u < U`), dropped.
    pub hostile_ids: u64,
    /// `serverShutdown` announcements.
    pub server_shutdowns: u64,
    /// Connections opened.
    pub connects: u64,
    /// Connections lost or closed.
    pub disconnects: u64,
    /// Snapshot answers for a symbol index that does not exist.
    pub unsolicited_snapshots: u64,
}
