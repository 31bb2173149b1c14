//! The configuration file: one TOML file per process, one process per venue.
//!
//! A file has a `[daemon]` table, one or more `[[venue]]` tables and zero or more `[[sink]]`
//! tables; the annotated files in `config/` show every key with its default. Loading is a pure
//! function of the text: it opens no socket and creates no file, so a process either starts
//! with a whole valid configuration or does not start.
//!
//! Loading happens in three steps. The document's shape is checked against the keys each
//! table allows (`keys.rs`): every unknown key (with the nearest known one, "did you mean")
//! and every value of the wrong TOML type is reported, and left out of what serde then reads
//! into raw tables whose keys are all optional and spanned (`raw.rs`). Validation (`validate.rs`, `venue.rs`, `channel.rs`, `binance.rs`) then
//! checks every value and reports every problem it finds, each with the file, the key path,
//! the line and column of the value, what was found and what is allowed:
//!
//! ```text
//! config/bad.toml:12:9: venue[0].channel[0].group: "233.54.12.111" is not an address with a port; expected a multicast IPv4 address and port such as "233.54.12.111:26477"
//! ```
//!
//! A missing required key points at the header of the table that lacks it.
//!
//! # Keys
//!
//! `[daemon]`, optional as a whole:
//!
//! | key | allowed | default |
//! | --- | --- | --- |
//! | `metrics_listen` | IP address and non-zero port; a non-loopback address exposes the metrics to the network | `"127.0.0.1:9464"` |
//! | `rx_core` | core index 0..=4095 to pin the rx thread to | unpinned |
//! | `idle` | `"busy-spin"`, `"yield"`, `"block"` | `"busy-spin"` |
//! | `consumer_queue` | power of two, 2..=2^24 slots | 65536 |
//! | `log_level` | `"error"`, `"warn"`, `"info"`, `"debug"`, `"trace"` | `"info"` |
//! | `log_format` | `"auto"` (journal priorities when standard error is the journal, else text), `"text"` (RFC 3339 UTC timestamp first), `"journal"`, `"json"` (one object a line) | `"auto"` |
//!
//! `[[venue]]`, at least one:
//!
//! | key | kinds | allowed | default |
//! | --- | --- | --- | --- |
//! | `name` | all | `[a-z0-9_-]{1,64}`, unique in the file | required |
//! | `kind` | all | `"moldudp64"`, `"iex-tp"`, `"binance"` | required |
//! | `start` | moldudp64, iex-tp | `"live"`, `"from-start"` | `"live"` |
//! | `[[venue.channel]]` | moldudp64, iex-tp | at least one, see below | required |
//! | `[venue.recovery]` | all | see below | all defaults |
//! | `market` | binance | `"spot"`, `"usdm"`, `"coinm"` | required |
//! | `ws_url` | binance | `ws://` or `wss://` URL | the market's stream endpoint |
//! | `rest_url` | binance | `http://` or `https://` URL | the market's REST endpoint |
//! | `symbols` | binance | 1 or more unique `[a-z0-9_]+`; beyond what one connection carries (1,024 streams, or a streams list of 7,680 bytes: about 380 spot symbols) they are split across connections in order, each share with its own `connections`; at most 64 connection slots in all (two per permanent connection per share) | required |
//! | `depth_limit` | binance | 5, 10, 20, 50, 100, 500, 1000, and 5000 on spot | 1000 |
//! | `update_speed` | binance | `"100ms"` or `"1000ms"` on spot; `"100ms"`, `"250ms"` or `"500ms"` on futures | `"100ms"` |
//! | `weight_budget_per_min` | binance | 1..=100000 | 1200 |
//! | `silence_timeout_ms` | binance | 100..=600000 | 5000 |
//! | `ws_max_age_secs` | binance | 60..=86399 | 82800 |
//! | `resolve_timeout_ms` | binance | 10..=120000 | 5000 |
//! | `connect_timeout_ms` | binance | 10..=120000, each address | 5000 |
//! | `tls_timeout_ms` | binance | 10..=120000 | 5000 |
//! | `upgrade_timeout_ms` | binance | 10..=120000 | 5000 |
//! | `ping_interval_ms` | binance | 0 (none) up to half of `silence_timeout_ms` | 2000 |
//! | `healthy_after_secs` | binance | 1..=3600: open with data this long resets the backoff | 60 |
//! | `connect_budget` | binance | 1..=250 attempts per window | 60 |
//! | `connect_budget_window_secs` | binance | 60..=3600 | 300 |
//! | `connections` | binance | 1..=4 permanent connections feeding the same symbols | 1 |
//! | `relink_timeout_ms` | binance | 0..=600000; 0 resyncs every symbol when the connection drops | 10000 |
//! | `rotate_timeout_ms` | binance | 100..=600000: longest overlap of a rotation | 30000 |
//!
//! A key of another venue kind is an error that names the key and the kind.
//!
//! `[[venue.channel]]`, one stream each:
//!
//! | key | allowed | default |
//! | --- | --- | --- |
//! | `name` | `[a-z0-9_-]{1,64}`, unique in the venue | required |
//! | `lines` | 1..=8 redundant lines `{ group, interface, source }` (each key as below), arbitrated: the first copy of a message wins; named `a`, `b`, ... in metrics and logs | one line from the keys below |
//! | `group` | multicast IPv4 address and non-zero port, unique in the venue (every line's); not beside `lines` | required without `lines` |
//! | `interface` | local IPv4 address to join on; not beside `lines` | `"0.0.0.0"` |
//! | `source` | unicast IPv4 sender address (source-specific multicast); not beside `lines` | any sender |
//! | `session` | the session expected first, not a filter: its datagrams are taken from the first one on, while any other session (the first seen, when the key is absent) is adopted only after `session_confirm` datagrams in a row; adopting another before one datagram of this one was seen logs a warning naming both. moldudp64: 1..=10 printable ASCII characters; iex-tp: a u32 as integer or string | none: the first seen, once confirmed |
//! | `rerequest` | unicast IPv4 addresses and ports, tried in order; an entry `"jetstream"` (or `"jetstream:STREAM"`, naming a nats sink by its `stream` where there are several) reads back what a peer instance published into the nats sink's JetStream stream, as one more server in the order | none |
//! | `snapshot` | `{ kind = "soupbintcp", addr, username (<= 6), password (<= 10) }` | none |
//! | `rcvbuf` | `SO_RCVBUF` bytes, 4096..=2^31-1 | 67108864 |
//!
//! `[venue.recovery]`; a binance venue takes only `reorder_window`, `max_buffered` and
//! `snapshot_timeout_ms`, since it makes no re-requests:
//!
//! | key | allowed | default |
//! | --- | --- | --- |
//! | `reorder_window` | power of two, 2..=2^24 | 65536 |
//! | `max_buffered` | 1..=`reorder_window` | `reorder_window` |
//! | `held_datagrams` | 8..=262144 datagrams per channel kept while they wait for a gap before them (2 KiB each, reserved at start); beyond them a datagram is dropped and re-requested | 4096 |
//! | `reorder_delay_us` | 0..=1000000 | 1000 |
//! | `request_timeout_ms` | 1..=60000 | 50 |
//! | `max_request_count` | 1..=65534 | 1000 |
//! | `retry_budget` | 0..=1000: timeouts without progress (at most one a `request_timeout_ms`, however many requests were in flight; an answer that moves the stream's head refills the budget) before a server is given up for the next one, and after the last for a snapshot or the gap policy | 5 |
//! | `requests_per_sec` | 1..=1000000 | 2000 |
//! | `max_replay` | 0 or more | 100000 |
//! | `reset_threshold` | 0 (off) or more | 1000000 |
//! | `session_confirm` | 1..=16 datagrams of another session in a row that adopt it when the current one has not announced its end (1: at once) | 3 |
//! | `snapshot_timeout_ms` | 1..=3600000 | 10000 |
//! | `gap_policy` | `"hold"`: nothing past an unrecovered gap is delivered; once every re-request server spent its `retry_budget` (and no snapshot helps) the stream latches `reset_required` until the next session. `"skip"`: a gap still open after `gap_deadline_ms`, or once the budget is spent, is declared lost (a `gap` event with its range) and delivery goes on | `"hold"` |
//! | `gap_deadline_ms` | 1..=3600000; with `gap_policy = "skip"` only | 1000 |
//! | `arbitration_window_us` | 0..=1000000: on a channel with several lines, a gap is re-requested only once open this long (`reorder_delay_us` holds when longer) | 1000 |
//! | `line_down_ms` | 10..=600000: a line silent this long while another of its channel is live is down | 2000 |
//!
//! `[[sink]]`, any number, paths unique:
//!
//! | key | kinds | allowed | default |
//! | --- | --- | --- | --- |
//! | `kind` | all | `"jsonl"`, `"unix"`, `"pcap"`, `"shm"` | required |
//! | `path` | all | non-empty path; at most 107 bytes for `unix` | required |
//! | `client_queue` | unix | power of two, 2..=2^24 frames | 65536 |
//! | `history_bytes` | unix | bytes of recent events kept, so a client that reconnects with a resume request carries on where it was (power of two, 2^16..=2^36, reserved at start) | 16777216 |
//! | `mode` | unix | permission bits of the socket, 0..=0o777 (a client needs write permission) | 0o660 |
//! | `group` | unix | group name or number the socket is given (the service's user must be in it) | the process's |
//! | `rotate_bytes` | jsonl, pcap | 2^20..=2^40 | 1073741824 |
//! | `rotate_secs` | jsonl | 0 (by size only) ..= 31622400 | 0 |
//! | `keep` | jsonl | rotated files kept, `PATH.1` the newest, 0..=1000 | 10 |
//! | `size_bytes` | shm | bytes of the ring's data region, a power of two, 2^16..=2^36 (the file adds a header page or more) | 67108864 |

mod binance;
mod channel;
mod check;
mod error;
mod keys;
mod locate;
mod raw;
mod schema;
mod validate;
mod values;
mod venue;

use std::path::Path;

pub use error::{ConfigError, ConfigErrors, ErrorKind, Position, Snippet};
pub use schema::{
    BinanceLink, Buffering, Channel, Daemon, GapPolicy, Idle, Line, LogFormat, LogLevel, Market,
    NatsSink, Recovery, Rerequest, Sink, Snapshot, Start, UpdateSpeed, Venue, VenueKind,
};
pub use values::{
    DepthLimit, IexSession, MoldSession, MulticastGroup, Name, PowerOfTwo, SoupLogin, Symbol, Url,
};

use error::Report;
use locate::{Node, Source};
use raw::RawConfig;

/// A whole validated configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Process-wide settings.
    pub daemon: Daemon,
    /// The venues read, at least one, with unique names.
    pub venues: Vec<Venue>,
    /// Where in-order output goes; may be empty.
    pub sinks: Vec<Sink>,
}

impl Config {
    /// Reads and validates the file at `path`; errors name the path as given.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigErrors> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors::io(&file, &e))?;
        Config::parse(&text, &file)
    }

    /// Validates the text of a configuration file; `file_name` is used in error messages.
    ///
    /// Returns every problem found, in file order (see [`Config::check`]); only a text that is
    /// not valid TOML stops at its first syntax error.
    ///
    /// ```
    /// use gapless::config::{Config, ErrorKind, VenueKind};
    ///
    /// let text = r#"
    /// [[venue]]
    /// name = "btc"
    /// kind = "binance"
    /// market = "spot"
    /// symbols = ["btcusdt"]
    /// "#;
    /// let config = Config::parse(text, "spot.toml").expect("a valid file");
    /// assert_eq!(config.venues[0].name.as_str(), "btc");
    /// assert!(matches!(config.venues[0].kind, VenueKind::Binance { .. }));
    ///
    /// let errors = Config::parse(&text.replace("\"spot\"", "\"margin\""), "spot.toml")
    ///     .expect_err("an unknown market");
    /// assert_eq!(errors.errors()[0].kind, ErrorKind::InvalidValue);
    /// assert_eq!(
    ///     errors.to_string(),
    ///     "spot.toml:5:10: venue[0].market: \"margin\" is not an allowed value; \
    ///      expected one of \"spot\", \"usdm\", \"coinm\"",
    /// );
    /// ```
    pub fn parse(text: &str, file_name: &str) -> Result<Config, ConfigErrors> {
        Config::check(text, file_name).result
    }

    /// Reads the file at `path` as [`Config::check`] does.
    pub fn check_file(path: impl AsRef<Path>) -> Checked {
        let path = path.as_ref();
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Config::check(&text, &file),
            Err(e) => Checked {
                result: Err(ConfigErrors::io(&file, &e)),
                warnings: Vec::new(),
            },
        }
    }

    /// Validates the text of a configuration file and also returns its warnings: things a
    /// valid file may hold that are likely mistakes, such as a channel with no way to recover
    /// a gap.
    ///
    /// Every unknown key and every value of the wrong TOML type is reported, and every value
    /// of the rest checked, in one pass; only a text that is not TOML at all stops at its
    /// first syntax error.
    pub fn check(text: &str, file_name: &str) -> Checked {
        let source = Source {
            file: file_name,
            text,
        };
        let mut report = Report::new(source);
        let tree = match Node::parse(text) {
            Ok(tree) => tree,
            Err(error) => {
                return Checked {
                    result: Err(report.toml(&error)),
                    warnings: Vec::new(),
                };
            }
        };
        let readable = keys::check(&tree, &mut report);
        let result = match toml::from_str::<RawConfig>(&readable) {
            Ok(raw) => {
                let config = validate::config(&raw, &mut report);
                let warnings = report.take_warnings();
                return Checked {
                    result: report.finish(config),
                    warnings,
                };
            }
            Err(error) => Err(report.toml(&error)),
        };
        Checked {
            result,
            warnings: Vec::new(),
        }
    }
}

/// What [`Config::check`] found: the configuration or its errors, and warnings either way.
#[derive(Debug)]
pub struct Checked {
    /// The configuration, or every error in file order.
    pub result: Result<Config, ConfigErrors>,
    /// Warnings in file order; empty when the text could not be read as TOML.
    pub warnings: Vec<ConfigError>,
}
