//! The file as serde reads it: every key optional and spanned, nothing checked yet.
//!
//! serde rejects unknown keys and values of the wrong TOML type here. Everything else (missing
//! keys, ranges, addresses, keys of another venue kind) is left to validation, which reports
//! all such problems at once with the span of each offending value.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

/// An optional key with the span of its value.
pub(super) type Field<T> = Option<Spanned<T>>;

/// An optional array with the span of each element.
pub(super) type List<T> = Field<Vec<Spanned<T>>>;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub daemon: Field<RawDaemon>,
    pub venue: List<RawVenue>,
    pub sink: List<RawSink>,
}

/// `[daemon]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    pub metrics_listen: Field<String>,
    pub rx_core: Field<i64>,
    pub idle: Field<String>,
    pub consumer_queue: Field<i64>,
    pub log_level: Field<String>,
    pub log_format: Field<String>,
    pub state_directory: Field<String>,
}

/// `[[venue]]`: the keys of every venue kind together; validation sorts out which apply.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVenue {
    pub name: Field<String>,
    pub kind: Field<String>,
    // moldudp64 and iex-tp
    pub start: Field<String>,
    pub channel: List<RawChannel>,
    // every kind, with a subset of keys for binance
    pub recovery: Field<RawRecovery>,
    // binance
    pub market: Field<String>,
    pub ws_url: Field<String>,
    pub rest_url: Field<String>,
    pub symbols: List<String>,
    pub depth_limit: Field<i64>,
    pub update_speed: Field<String>,
    pub weight_budget_per_min: Field<i64>,
    pub silence_timeout_ms: Field<i64>,
    pub ws_max_age_secs: Field<i64>,
    pub resolve_timeout_ms: Field<i64>,
    pub connect_timeout_ms: Field<i64>,
    pub tls_timeout_ms: Field<i64>,
    pub upgrade_timeout_ms: Field<i64>,
    pub ping_interval_ms: Field<i64>,
    pub healthy_after_secs: Field<i64>,
    pub connect_budget: Field<i64>,
    pub connect_budget_window_secs: Field<i64>,
    pub connections: Field<i64>,
    pub relink_timeout_ms: Field<i64>,
    pub rotate_timeout_ms: Field<i64>,
}

/// The span of a key's value, whatever its type.
fn span<T>(field: &Field<T>) -> Option<Range<usize>> {
    field.as_ref().map(Spanned::span)
}

impl RawVenue {
    /// The keys only multicast venues have, with the spans of those present.
    pub fn multicast_keys(&self) -> Vec<(&'static str, Range<usize>)> {
        let keys = [
            ("start", span(&self.start)),
            ("channel", span(&self.channel)),
        ];
        keys.into_iter()
            .filter_map(|(k, s)| Some((k, s?)))
            .collect()
    }

    /// The keys only Binance venues have, with the spans of those present.
    pub fn binance_keys(&self) -> Vec<(&'static str, Range<usize>)> {
        let keys = [
            ("market", span(&self.market)),
            ("ws_url", span(&self.ws_url)),
            ("rest_url", span(&self.rest_url)),
            ("symbols", span(&self.symbols)),
            ("depth_limit", span(&self.depth_limit)),
            ("update_speed", span(&self.update_speed)),
            ("weight_budget_per_min", span(&self.weight_budget_per_min)),
            ("silence_timeout_ms", span(&self.silence_timeout_ms)),
            ("ws_max_age_secs", span(&self.ws_max_age_secs)),
            ("resolve_timeout_ms", span(&self.resolve_timeout_ms)),
            ("connect_timeout_ms", span(&self.connect_timeout_ms)),
            ("tls_timeout_ms", span(&self.tls_timeout_ms)),
            ("upgrade_timeout_ms", span(&self.upgrade_timeout_ms)),
            ("ping_interval_ms", span(&self.ping_interval_ms)),
            ("healthy_after_secs", span(&self.healthy_after_secs)),
            ("connect_budget", span(&self.connect_budget)),
            (
                "connect_budget_window_secs",
                span(&self.connect_budget_window_secs),
            ),
            ("connections", span(&self.connections)),
            ("relink_timeout_ms", span(&self.relink_timeout_ms)),
            ("rotate_timeout_ms", span(&self.rotate_timeout_ms)),
        ];
        keys.into_iter()
            .filter_map(|(k, s)| Some((k, s?)))
            .collect()
    }
}

/// `[[venue.channel]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChannel {
    pub name: Field<String>,
    pub group: Field<String>,
    pub interface: Field<String>,
    pub source: Field<String>,
    /// A string for moldudp64; a string or an integer for iex-tp.
    pub session: Field<toml::Value>,
    pub rerequest: List<String>,
    pub snapshot: Field<RawSnapshot>,
    pub rcvbuf: Field<i64>,
    pub lines: List<RawLine>,
}

/// One of `lines = [{ ... }, ...]` of a channel.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLine {
    pub group: Field<String>,
    pub interface: Field<String>,
    pub source: Field<String>,
}

/// `snapshot = { ... }` of a channel.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSnapshot {
    pub kind: Field<String>,
    pub addr: Field<String>,
    pub username: Field<String>,
    pub password: Field<String>,
}

/// `[venue.recovery]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRecovery {
    pub reorder_window: Field<i64>,
    pub max_buffered: Field<i64>,
    pub held_datagrams: Field<i64>,
    pub reorder_delay_us: Field<i64>,
    pub request_timeout_ms: Field<i64>,
    pub max_request_count: Field<i64>,
    pub retry_budget: Field<i64>,
    pub requests_per_sec: Field<i64>,
    pub max_replay: Field<i64>,
    pub reset_threshold: Field<i64>,
    pub session_confirm: Field<i64>,
    pub snapshot_timeout_ms: Field<i64>,
    pub gap_policy: Field<String>,
    pub gap_deadline_ms: Field<i64>,
    pub arbitration_window_us: Field<i64>,
    pub line_down_ms: Field<i64>,
}

impl RawRecovery {
    /// The keys that steer re-requests, which Binance venues do not make, with their spans.
    pub fn rerequest_keys(&self) -> Vec<(&'static str, Range<usize>)> {
        let keys = [
            ("held_datagrams", span(&self.held_datagrams)),
            ("reorder_delay_us", span(&self.reorder_delay_us)),
            ("request_timeout_ms", span(&self.request_timeout_ms)),
            ("max_request_count", span(&self.max_request_count)),
            ("retry_budget", span(&self.retry_budget)),
            ("requests_per_sec", span(&self.requests_per_sec)),
            ("max_replay", span(&self.max_replay)),
            ("reset_threshold", span(&self.reset_threshold)),
            ("session_confirm", span(&self.session_confirm)),
            ("gap_policy", span(&self.gap_policy)),
            ("gap_deadline_ms", span(&self.gap_deadline_ms)),
            ("arbitration_window_us", span(&self.arbitration_window_us)),
            ("line_down_ms", span(&self.line_down_ms)),
        ];
        keys.into_iter()
            .filter_map(|(k, s)| Some((k, s?)))
            .collect()
    }
}

/// `[[sink]]`: the keys of every sink kind together.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSink {
    pub kind: Field<String>,
    pub path: Field<String>,
    pub client_queue: Field<i64>,
    pub history_bytes: Field<i64>,
    pub rotate_bytes: Field<i64>,
    pub rotate_secs: Field<i64>,
    pub keep: Field<i64>,
    pub mode: Field<i64>,
    pub group: Field<String>,
    pub size_bytes: Field<i64>,
    // nats
    pub url: Field<String>,
    pub stream: Field<String>,
    pub subject_prefix: Field<String>,
    pub duplicate_window_secs: Field<i64>,
    pub max_age_secs: Field<i64>,
    pub max_pending: Field<i64>,
    pub instance: Field<String>,
    pub creds: Field<String>,
    pub tls_ca: Field<String>,
    pub tls_cert: Field<String>,
    pub tls_key: Field<String>,
}
