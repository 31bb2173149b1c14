//! What a Binance venue is configured with, and the checks made before anything is allocated.

use thiserror::Error;

use super::Market;

/// Longest symbol accepted (Binance's longest are about 20 characters).
pub const MAX_SYMBOL_LEN: usize = 32;

/// One second in nanoseconds.
const SECOND_NS: u64 = 1_000_000_000;

/// How long to wait before asking for a snapshot again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotBackoff {
    /// Wait after the first failed request of a symbol; doubled with each further failure.
    pub retry_initial_ns: u64,
    /// Longest wait after failures.
    pub retry_max_ns: u64,
    /// Pause of the whole venue after a 429 without a longer `Retry-After`; doubled with each
    /// further 429 in a row, up to [`SnapshotBackoff::ban_ns`].
    pub rate_limit_ns: u64,
    /// Pause of the whole venue after a 418 (IP banned) without a longer `Retry-After`.
    pub ban_ns: u64,
}

impl Default for SnapshotBackoff {
    /// 1 s doubling to 60 s after failures, 10 s after a 429, 5 minutes after a 418.
    fn default() -> Self {
        Self {
            retry_initial_ns: SECOND_NS,
            retry_max_ns: 60 * SECOND_NS,
            rate_limit_ns: 10 * SECOND_NS,
            ban_ns: 300 * SECOND_NS,
        }
    }
}

/// A Binance venue: one combined-stream connection, one depth stream per symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinanceSpec {
    /// The market, which decides the REST path, the request weights and the continuity rule.
    pub market: Market,
    /// Lowercase symbols (`btcusdt`, `btcusd_perp`); symbol `i` is stream `stream_base + i`.
    pub symbols: Vec<String>,
    /// Consumer stream id of the first symbol.
    pub stream_base: u16,
    /// The snapshot depth (`limit`): 1 to 5000 on spot; 5, 10, 20, 50, 100, 500 or 1000 on
    /// futures.
    pub depth_limit: u32,
    /// Events buffered per symbol at most while it waits for its snapshot.
    pub max_pending: usize,
    /// Bytes of event JSON buffered per symbol at most while it waits for its snapshot.
    pub pending_bytes: usize,
    /// Request weight spent on snapshots in any 60 seconds at most. A request heavier than the
    /// whole budget is still sent once nothing was spent in the last 60 seconds.
    pub weight_budget_per_min: u32,
    /// Snapshot requests in flight at once at most (1 staggers them one by one).
    pub max_inflight: usize,
    /// A snapshot request not answered within this counts as failed.
    pub snapshot_timeout_ns: u64,
    /// Waits after failed, rate-limited and refused requests.
    pub backoff: SnapshotBackoff,
    /// The connection is replaced when nothing arrives for this long.
    pub silence_timeout_ns: u64,
    /// The connection is replaced after this long (Binance cuts it at 24 hours).
    pub ws_max_age_ns: u64,
    /// Name resolution of the WebSocket host may take this long.
    pub resolve_timeout_ns: u64,
    /// A TCP connect (per address) may take this long.
    pub connect_timeout_ns: u64,
    /// The TLS handshake may take this long.
    pub tls_timeout_ns: u64,
    /// The WebSocket upgrade may take this long.
    pub upgrade_timeout_ns: u64,
    /// The client pings an open connection this often (0: never). Pings and pongs both
    /// count as signs of life against [`BinanceSpec::silence_timeout_ns`].
    pub ping_interval_ns: u64,
    /// A connection proves healthy by staying open this long with data: only then does the
    /// reconnect backoff start again from its first delay.
    pub healthy_after_ns: u64,
    /// Connection attempts allowed in any [`BinanceSpec::connect_window_ns`] (Binance bans
    /// an address that makes more than 300 in 5 minutes).
    pub connect_budget: u32,
    /// The window of [`BinanceSpec::connect_budget`].
    pub connect_window_ns: u64,
    /// A symbol with no event for this long is counted as quiet (its connection may be
    /// alive: quiet is not silent).
    pub symbol_quiet_ns: u64,
    /// When every connection is lost, a live symbol keeps its state for this long, waiting
    /// for an event of the next connection that links to the last one delivered; 0 resyncs
    /// every symbol at once.
    pub relink_timeout_ns: u64,
    /// Permanent connections feeding the same symbols (1 to [`MAX_CONNECTIONS`]).
    pub connections: usize,
    /// A connection being replaced (age, shutdown notice) is closed once every live symbol
    /// has linked on its successor, or after this long.
    pub rotate_timeout_ns: u64,
    /// Streams one connection carries at most: symbols beyond it are split across more
    /// connections (shards), each with its own [`BinanceSpec::connections`].
    pub max_streams_per_connection: usize,
    /// Bytes of the `streams=` list of one connection's URL at most (each stream counted
    /// as its symbol and `@depth@100ms/`): beyond it the symbols are split the same way.
    pub max_streams_bytes: usize,
}

/// Streams Binance allows on one WebSocket connection.
pub const MAX_STREAMS_PER_CONNECTION: usize = 1024;

/// Bytes of the streams list of one connection's URL: a request line most HTTP servers
/// take by default (8 KiB) with room for the rest of the URL and the headers' start.
pub const MAX_STREAMS_BYTES: usize = 7_680;

/// Connection slots of a venue at most: shards times two per permanent connection (one
/// for a rotation's successor).
pub const MAX_SLOTS: usize = 64;

/// Permanent connections a venue keeps at most.
pub const MAX_CONNECTIONS: usize = 4;

impl BinanceSpec {
    /// A spec with defaults suited to a live venue: depth 1000, 1024 events and 1 MiB buffered
    /// per symbol, 1200 weight a minute, one request at a time, 10 s snapshot timeout, 5 s
    /// silence, 23 hour connections, 5 s for each step of opening one, a ping every 2 s,
    /// healthy after a minute, 60 connection attempts in any 5 minutes, 10 s for symbols to
    /// link after a lost connection, one connection, 30 s for a rotation's overlap.
    pub fn new(market: Market, symbols: Vec<String>) -> Self {
        Self {
            market,
            symbols,
            stream_base: 0,
            depth_limit: 1000,
            max_pending: 1024,
            pending_bytes: 1 << 20,
            weight_budget_per_min: 1200,
            max_inflight: 1,
            snapshot_timeout_ns: 10 * SECOND_NS,
            backoff: SnapshotBackoff::default(),
            silence_timeout_ns: 5 * SECOND_NS,
            ws_max_age_ns: 23 * 3600 * SECOND_NS,
            resolve_timeout_ns: 5 * SECOND_NS,
            connect_timeout_ns: 5 * SECOND_NS,
            tls_timeout_ns: 5 * SECOND_NS,
            upgrade_timeout_ns: 5 * SECOND_NS,
            ping_interval_ns: 2 * SECOND_NS,
            healthy_after_ns: 60 * SECOND_NS,
            connect_budget: 60,
            connect_window_ns: 300 * SECOND_NS,
            symbol_quiet_ns: 60 * SECOND_NS,
            relink_timeout_ns: 10 * SECOND_NS,
            connections: 1,
            max_streams_per_connection: MAX_STREAMS_PER_CONNECTION,
            max_streams_bytes: MAX_STREAMS_BYTES,
            rotate_timeout_ns: 30 * SECOND_NS,
        }
    }

    /// Checks the spec as a whole.
    ///
    /// # Errors
    ///
    /// The first problem found, as a [`SpecError`].
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.symbols.is_empty() {
            return Err(SpecError::NoSymbols);
        }
        for (index, symbol) in self.symbols.iter().enumerate() {
            let valid = !symbol.is_empty()
                && symbol.len() <= MAX_SYMBOL_LEN
                && symbol
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !valid {
                return Err(SpecError::InvalidSymbol(symbol.clone()));
            }
            if self
                .symbols
                .get(..index)
                .is_some_and(|s| s.contains(symbol))
            {
                return Err(SpecError::DuplicateSymbol(symbol.clone()));
            }
        }
        let last = usize::from(self.stream_base).saturating_add(self.symbols.len() - 1);
        if last > usize::from(u16::MAX) {
            return Err(SpecError::TooManySymbols {
                symbols: self.symbols.len(),
                stream_base: self.stream_base,
            });
        }
        if self.market.depth_weight(self.depth_limit).is_none() {
            return Err(SpecError::DepthLimit {
                market: self.market,
                limit: self.depth_limit,
            });
        }
        let positive = [
            ("max_pending", self.max_pending as u64),
            ("pending_bytes", self.pending_bytes as u64),
            (
                "weight_budget_per_min",
                u64::from(self.weight_budget_per_min),
            ),
            ("max_inflight", self.max_inflight as u64),
            ("snapshot_timeout_ns", self.snapshot_timeout_ns),
            ("silence_timeout_ns", self.silence_timeout_ns),
            ("ws_max_age_ns", self.ws_max_age_ns),
            ("resolve_timeout_ns", self.resolve_timeout_ns),
            ("connect_timeout_ns", self.connect_timeout_ns),
            ("tls_timeout_ns", self.tls_timeout_ns),
            ("upgrade_timeout_ns", self.upgrade_timeout_ns),
            ("connect_budget", u64::from(self.connect_budget)),
            ("connect_window_ns", self.connect_window_ns),
            ("connections", self.connections as u64),
            ("rotate_timeout_ns", self.rotate_timeout_ns),
        ];
        if self.connections > MAX_CONNECTIONS {
            return Err(SpecError::TooManyConnections(self.connections));
        }
        let slots = self.shards().len() * self.slots_per_shard();
        if slots > MAX_SLOTS {
            return Err(SpecError::TooManySlots {
                shards: self.shards().len(),
                connections: self.connections,
            });
        }
        match positive.iter().find(|(_, value)| *value == 0) {
            Some((field, _)) => Err(SpecError::Zero(field)),
            None => Ok(()),
        }
    }
}

impl BinanceSpec {
    /// The symbols of each connection, as ranges of symbol indices in order: as many in
    /// each as [`BinanceSpec::max_streams_per_connection`] and
    /// [`BinanceSpec::max_streams_bytes`] allow (at least one).
    pub fn shards(&self) -> Vec<std::ops::Range<usize>> {
        let mut shards = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for (i, s) in self.symbols.iter().enumerate() {
            let cost = s.len() + "@depth@100ms/".len();
            let full = i - start >= self.max_streams_per_connection.max(1)
                || (i > start && bytes + cost > self.max_streams_bytes);
            if full {
                shards.push(start..i);
                (start, bytes) = (i, 0);
            }
            bytes += cost;
        }
        shards.push(start..self.symbols.len());
        shards
    }

    /// Connection slots of each shard: two per permanent connection (the second for a
    /// rotation's successor), at most 8.
    pub fn slots_per_shard(&self) -> usize {
        (2 * self.connections).clamp(1, 8)
    }
}

/// Why a [`BinanceSpec`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// The venue has no symbol.
    #[error("a Binance venue needs at least one symbol")]
    NoSymbols,
    /// A symbol is empty, too long, or not lowercase `a-z`, `0-9` and `_`.
    #[error("symbol {0:?} is not 1 to {MAX_SYMBOL_LEN} characters of a-z, 0-9 and '_'")]
    InvalidSymbol(String),
    /// A symbol is listed twice.
    #[error("symbol {0:?} is listed twice")]
    DuplicateSymbol(String),
    /// The stream ids of the symbols do not fit in `u16`.
    #[error("{symbols} symbols from stream {stream_base} do not fit in u16 stream ids")]
    TooManySymbols {
        /// Number of symbols.
        symbols: usize,
        /// The first stream id.
        stream_base: u16,
    },
    /// The market does not offer this snapshot depth.
    #[error("depth limit {limit} is not offered on {market:?}")]
    DepthLimit {
        /// The market.
        market: Market,
        /// The refused limit.
        limit: u32,
    },
    /// A size, count or duration that must be positive is 0.
    #[error("`{0}` must be greater than 0")]
    Zero(&'static str),
    /// More connection slots than [`MAX_SLOTS`]: too many symbols for their connections.
    #[error(
        "{shards} connections' worth of symbols with {connections} permanent connections each \
         need more than {MAX_SLOTS} connection slots: split the symbols across venues"
    )]
    TooManySlots {
        /// Connections the symbols are split across.
        shards: usize,
        /// Permanent connections per shard.
        connections: usize,
    },
    /// More permanent connections than [`MAX_CONNECTIONS`].
    #[error("{0} connections asked for; at most {MAX_CONNECTIONS}")]
    TooManyConnections(usize),
    /// The configuration describes another kind of venue.
    #[error("not a Binance venue")]
    NotBinance,
}
