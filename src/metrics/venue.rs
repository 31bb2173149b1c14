//! Counters and gauges of a venue as a whole (its connections and snapshot requests), as
//! opposed to one of its streams: one table names each value's key in
//! [`Venue::counters`](crate::venue::Venue::counters), its exported name, kind and help.
//!
//! The rx thread stores each venue's values into its [`VenueMetrics`] when it publishes
//! the stream views; the exporter reads them at scrape time. A key with no entry here is
//! not exported (a test checks that every key the Binance venue reports has one).

use std::sync::atomic::{AtomicU64, Ordering};

use super::counters::SeriesKind;

macro_rules! venue_series {
    ($($variant:ident $key:literal : $kind:ident $name:literal $help:literal;)*) => {
        /// Every venue-wide value the exporter serves.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum VenueSeries {
            $(
                #[doc = $help]
                $variant,
            )*
        }

        impl VenueSeries {
            /// Every series, in the order they are exported.
            pub const ALL: [Self; [$($name),*].len()] = [$(Self::$variant),*];

            /// Number of series.
            pub const COUNT: usize = Self::ALL.len();

            /// The series of a key of [`Venue::counters`](crate::venue::Venue::counters).
            pub fn from_key(key: &str) -> Option<Self> {
                match key {
                    $($key => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// The exported sample name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }

            /// The help text.
            pub const fn help(self) -> &'static str {
                match self {
                    $(Self::$variant => $help,)*
                }
            }

            /// Counter or gauge.
            pub const fn kind(self) -> SeriesKind {
                match self {
                    $(Self::$variant => SeriesKind::$kind,)*
                }
            }
        }
    };
}

venue_series! {
    Frames "frames": Counter "gapless_venue_frames_total"
        "WebSocket text frames received.";
    FrameBytes "frame_bytes": Counter "gapless_venue_frame_bytes_total"
        "Bytes of WebSocket text frames received.";
    DepthEvents "depth_events": Counter "gapless_venue_depth_events_total"
        "Depth events among the frames received.";
    IgnoredEvents "ignored_events": Counter "gapless_venue_ignored_events_total"
        "Events of other streams, ignored.";
    UnknownEvents "unknown_events": Counter "gapless_venue_unknown_events_total"
        "Events of an unknown type, ignored.";
    UnknownSymbolEvents "unknown_symbol_events": Counter
        "gapless_venue_unknown_symbol_events_total"
        "Depth events for a symbol that is not configured.";
    MalformedFrames "malformed_frames": Counter "gapless_venue_malformed_frames_total"
        "Frames that are not well-formed events, dropped.";
    HostileIds "hostile_ids": Counter "gapless_venue_hostile_ids_total"
        "Depth events whose update ids are inverted, dropped.";
    ServerShutdowns "server_shutdowns": Counter "gapless_venue_server_shutdowns_total"
        "Shutdown announcements from the server.";
    Connects "connects": Counter "gapless_venue_connects_total"
        "Connections opened.";
    Disconnects "disconnects": Counter "gapless_venue_disconnects_total"
        "Connections lost or closed.";
    Rotations "rotations": Counter "gapless_venue_rotations_total"
        "Connections replaced on a shutdown notice, their age or silence.";
    OverlappedRotations "overlapped_rotations": Counter
        "gapless_venue_overlapped_rotations_total"
        "Rotations that opened the successor before closing the old connection.";
    RotationsLinked "rotations_linked": Counter "gapless_venue_rotations_linked_total"
        "Replaced connections closed once every symbol had linked on the successor.";
    RotationsTimedOut "rotations_timed_out": Counter "gapless_venue_rotations_timed_out_total"
        "Replaced connections closed at the overlap deadline, some symbols unlinked.";
    StaleConnEvents "stale_conn_events": Counter "gapless_venue_stale_conn_events_total"
        "Frames and events of connections already given up, ignored.";
    OpenConnections "open_connections": Gauge "gapless_venue_open_connections"
        "WebSocket connections open now.";
    RelinkingSymbols "relinking_symbols": Gauge "gapless_venue_relinking_symbols"
        "Symbols kept across a lost connection, waiting for an event that links.";
    ConnectErrors "connect_errors": Counter "gapless_venue_connect_errors_total"
        "Connection attempts that failed, at any step.";
    ResolveErrors "resolve_errors": Counter "gapless_venue_resolve_errors_total"
        "Connection attempts whose name resolution failed or timed out.";
    TcpErrors "tcp_errors": Counter "gapless_venue_tcp_errors_total"
        "Connection attempts whose TCP connect failed or timed out on every address.";
    TlsErrors "tls_errors": Counter "gapless_venue_tls_errors_total"
        "Connection attempts whose TLS handshake failed or timed out.";
    UpgradeErrors "upgrade_errors": Counter "gapless_venue_upgrade_errors_total"
        "Connection attempts whose WebSocket upgrade failed or timed out.";
    OpenTimeouts "open_timeouts": Counter "gapless_venue_open_timeouts_total"
        "Connection attempts given up because a step passed its deadline.";
    ConnectsDeferred "connects_deferred": Counter "gapless_venue_connects_deferred_total"
        "Connection attempts put off because the window's attempt budget was spent.";
    HealthyConnections "healthy_connections": Counter
        "gapless_venue_healthy_connections_total"
        "Connections that stayed open with data long enough to reset the backoff.";
    AliveSignals "alive_signals": Counter "gapless_venue_alive_signals_total"
        "Pings and pongs received.";
    SnapshotErrors "snapshot_errors": Counter "gapless_venue_snapshot_errors_total"
        "Snapshot requests that got no usable answer (refused, reset, timed out).";
    SnapshotBadStatus "snapshot_bad_status": Counter "gapless_venue_snapshot_bad_status_total"
        "Snapshot answers with a status other than 200.";
    UnknownFetches "unknown_fetches": Counter "gapless_venue_unknown_fetches_total"
        "Snapshot answers for a request the venue did not make or gave up.";
    QuietSymbols "quiet_symbols": Gauge "gapless_venue_quiet_symbols"
        "Symbols with no event for the quiet period on a live connection.";
    SnapshotWeightUsed "snapshot_weight_used": Gauge "gapless_venue_snapshot_weight_used"
        "REST request weight of the last minute: this venue's snapshots, or the venue's own count for the IP when larger.";
    SymbolsGivenUp "symbols_given_up": Gauge "gapless_venue_symbols_given_up"
        "Symbols whose snapshot is no longer requested after permanent errors (an invalid symbol); they stay reset_required.";
}

/// The values of one venue, shared by the rx thread (writer) and the exporter.
#[derive(Debug)]
pub struct VenueMetrics {
    values: [AtomicU64; VenueSeries::COUNT],
}

impl Default for VenueMetrics {
    fn default() -> Self {
        Self {
            values: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl VenueMetrics {
    /// Stores every value of `counters` that has a series; plain `Relaxed` stores.
    pub fn publish(&self, counters: &[(&'static str, u64)]) {
        for (key, value) in counters {
            if let Some(series) = VenueSeries::from_key(key)
                && let Some(slot) = self.values.get(series as usize)
            {
                slot.store(*value, Ordering::Relaxed);
            }
        }
    }

    /// The latest value of `series`.
    pub fn get(&self, series: VenueSeries) -> u64 {
        self.values
            .get(series as usize)
            .map_or(0, |v| v.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::Venue;
    use crate::venue::binance::{BinanceSpec, BinanceVenue, Market};

    #[test]
    fn every_binance_counter_has_a_series_and_names_are_well_formed() {
        let spec = BinanceSpec::new(Market::Spot, vec!["btcusdt".to_string()]);
        let venue = BinanceVenue::new("v", spec, "ws://127.0.0.1:1", "http://127.0.0.1:1", None)
            .expect("venue");
        for (key, _) in venue.counters() {
            assert!(
                VenueSeries::from_key(key).is_some(),
                "{key} is not exported"
            );
        }
        for (i, s) in VenueSeries::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert!(s.name().starts_with("gapless_venue_"));
            assert_eq!(
                s.name().ends_with("_total"),
                s.kind() == SeriesKind::Counter
            );
            assert!(s.help().ends_with('.'));
        }
        let m = VenueMetrics::default();
        m.publish(&[("connect_errors", 3), ("no_such_key", 9)]);
        assert_eq!(m.get(VenueSeries::ConnectErrors), 3);
    }
}
