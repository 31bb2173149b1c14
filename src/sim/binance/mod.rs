//! A Binance-like venue on the loopback interface, for tests and demos.
//!
//! [`BinanceSim::start`] binds two listeners on 127.0.0.1 (never another
//! address) and runs three threads, plus one per WebSocket client:
//!
//! ```text
//!   recording or ──> feed thread ──> bounded log <── REST thread: /api/v3/depth,
//!   generated books                  (one lock)       /fapi/v1/depth, /dapi/v1/depth:
//!                                        │            snapshots, 429s, stale ids
//!                                        v  each client reads from its own cursor
//!            WebSocket client threads: /stream?streams=a@depth@100ms/b@depth,
//!            /ws/<stream>; pings; event and connection faults
//! ```
//!
//! * [`feed`]: the source configurations and the feed thread; recordings
//!   (hftbacktest, cryptofeed) replay on their clock scaled by a speed
//!   factor, generated books are spot-style (`U == prev u + 1`) or
//!   futures-style (`pu == prev u`).
//! * [`faults`]: drop, duplicate, reorder, stale snapshots, 429s,
//!   disconnects, silence, `serverShutdown`, and [`Injected`], the record.
//! * [`handle`]: [`BinanceSim`], the running simulator.
//! * [`cli`]: [`BinanceSimArgs`] and [`run_cli`] for `gapless sim binance`.
//! * Private: `record` (capture files), `book` (generated books), `server`
//!   (WebSocket), `rest` (HTTP).
//!
//! Every wait is bounded (socket timeouts, condition-variable timeouts, sleeps
//! of at most 50 ms checking a stop flag) and [`BinanceSim::stop`] joins
//! every thread within [`STOP_BOUND`].
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use gapless::sim::binance::{BinanceSim, BinanceSimConfig, BookStyle};
//!
//! let mut config = BinanceSimConfig::generated(&["BTCUSDT", "ETHUSDT"], BookStyle::Futures, 100.0);
//! config.faults.drop = 0.01;
//! config.faults.disconnect_after = Some(1_000);
//! let sim = BinanceSim::start(config)?;
//! println!("{}/stream?streams=btcusdt@depth@100ms and {}", sim.ws_base(), sim.http_base());
//! std::thread::sleep(Duration::from_secs(1));
//! println!("{:?} {:?}", sim.stats(), sim.injected());
//! sim.stop()?;
//! # Ok::<(), gapless::sim::binance::SimError>(())
//! ```

#![deny(
    missing_docs,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::io;
use std::path::PathBuf;
use std::time::Duration;

mod book;
pub mod capture;
pub mod cli;
pub mod faults;
pub mod feed;
pub mod handle;
mod record;
mod rest;
mod server;

pub use cli::{BinanceSimArgs, run_cli};
pub use faults::{FaultConfig, Injected, Injection, InjectionKind};
pub use feed::{BookStyle, GenConfig, ReplayConfig, Source};
pub use handle::BinanceSim;

pub(crate) use handle::{Counters, Shared, lock};

/// How long [`BinanceSim::stop`] waits for the threads, all together.
pub const STOP_BOUND: Duration = Duration::from_secs(3);

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A listener could not be bound on 127.0.0.1.
    #[error("bind {what} listener on 127.0.0.1:{port}: {source}")]
    Bind {
        /// `WebSocket` or `HTTP`.
        what: &'static str,
        /// The port asked for.
        port: u16,
        /// The cause.
        source: io::Error,
    },
    /// A thread could not be started.
    #[error("spawn thread: {0}")]
    Spawn(io::Error),
    /// A capture file could not be read.
    #[error("capture {path}: {source}")]
    Capture {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A capture line is not in the file's format.
    #[error("capture {path} line {line}: not in the expected format")]
    CaptureLine {
        /// The file.
        path: PathBuf,
        /// Line number from 1.
        line: usize,
    },
    /// The file name says neither `*.gz`, `*.ws.*` nor `*.http.*`.
    #[error("capture {0}: unknown kind (expected *.gz, *.ws.* or *.http.*)")]
    CaptureFormat(PathBuf),
    /// The configuration is unusable.
    #[error("bad configuration: {0}")]
    Config(String),
    /// Some threads were still running when [`STOP_BOUND`] ran out.
    #[error("{0} simulator thread(s) did not stop in time")]
    StopTimeout(usize),
}

/// Simulator configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct BinanceSimConfig {
    /// Where events come from.
    pub source: Source,
    /// WebSocket port on 127.0.0.1; 0: any free port.
    pub ws_port: u16,
    /// HTTP port on 127.0.0.1; 0: any free port.
    pub http_port: u16,
    /// Ping every client this often; `None`: never.
    pub ping_interval: Option<Duration>,
    /// Send HTTP bodies chunked instead of with `Content-Length`.
    pub http_chunked: bool,
    /// Hold the feed until the first WebSocket client has subscribed.
    pub wait_for_client: bool,
    /// Records the log keeps for clients that are behind.
    pub history: usize,
    /// Every connection after the first starts this many records before the live head (as
    /// far as the log holds them), so that a client reconnecting within that window can
    /// link its new connection to the old one; 0: every connection starts live, as
    /// Binance's do.
    pub reconnect_overlap: u64,
    /// Faults to inject.
    pub faults: FaultConfig,
}

impl BinanceSimConfig {
    /// Generated books for `symbols` at `rate` events per second per symbol.
    pub fn generated(symbols: &[&str], style: BookStyle, rate: f64) -> Self {
        let symbols = symbols.iter().map(|s| s.to_ascii_uppercase()).collect();
        let source = Source::Generated(GenConfig {
            symbols,
            style,
            rate,
            count: None,
            levels: 50,
            seed: 1,
        });
        Self::with_source(source)
    }

    /// Replay of capture files; `speed` `None` replays as fast as clients read.
    pub fn recorded(files: Vec<PathBuf>, speed: Option<f64>) -> Self {
        Self::with_source(Source::Recorded(ReplayConfig {
            files,
            speed,
            max_records: None,
        }))
    }

    fn with_source(source: Source) -> Self {
        Self {
            source,
            ws_port: 0,
            http_port: 0,
            ping_interval: Some(Duration::from_secs(20)),
            http_chunked: false,
            wait_for_client: true,
            history: 1 << 16,
            reconnect_overlap: 0,
            faults: FaultConfig::default(),
        }
    }
}

/// What the simulator has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Records published by the feed.
    pub events_published: u64,
    /// WebSocket connections accepted (handshake done).
    pub connections: u64,
    /// WebSocket connections open now.
    pub active_connections: u64,
    /// Text frames sent to clients.
    pub frames_sent: u64,
    /// Pings sent.
    pub pings_sent: u64,
    /// Pongs received.
    pub pongs_received: u64,
    /// Connections closed for falling behind the log.
    pub lagged: u64,
    /// HTTP requests read.
    pub http_requests: u64,
    /// Snapshots served (200).
    pub snapshots_served: u64,
    /// Whether the feed has published everything it had.
    pub feed_finished: bool,
}
