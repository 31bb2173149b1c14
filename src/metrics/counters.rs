//! Per-stream counters and gauges, and the process-level liveness gauge.
//!
//! The rx thread owns every value here and is the only writer: once a cycle
//! (or less often) it fills a [`StreamSample`] from the session's
//! [`ChannelStats`] and hands it to [`StreamMetrics::publish`], which costs
//! one `Relaxed` store a value and no read-modify-write. The exporter thread
//! reads them at scrape time with `Relaxed` loads: each value is the latest
//! one published, not a consistent cut across values, which is what a
//! scrape needs.
//!
//! Every per-stream value is one entry of the table in this file, which
//! names at once the [`Series`] variant, the [`StreamSample`] field, the
//! kind, the exported name, the help text and where the value comes from in
//! [`ChannelStats`]. Everything else (the sample's fields, its conversion
//! from [`ChannelStats`], the atomics of [`StreamMetrics`], the exporter's
//! walk) is generated from or driven by that table, so a new value is one
//! entry and no two lists can fall out of step.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::publish::StreamState;
use crate::venue::ChannelStats;

use crate::metrics::histogram::AtomicHistogram;

/// Whether a series only goes up or may go both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesKind {
    /// Monotonic; its exported name ends in `_total`.
    Counter,
    /// A value that may go down.
    Gauge,
}

/// Builds [`Series`], [`StreamSample`] and the conversion from
/// [`ChannelStats`] out of one entry a series:
///
/// `Variant field: Kind "exported_name" "Help text." = |stats| value;`
macro_rules! stream_series {
    ($(
        $variant:ident $field:ident : $kind:ident $name:literal
            $help:literal = $from:expr;
    )*) => {
        /// Every per-stream value the exporter serves, one variant a series.
        ///
        /// The variant's doc is the series' help text.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Series {
            $(
                #[doc = $help]
                $variant,
            )*
        }

        impl Series {
            /// Every series, in the order they are exported.
            pub const ALL: [Self; [$($name),*].len()] = [$(Self::$variant),*];

            /// Number of series.
            pub const COUNT: usize = Self::ALL.len();

            /// The exported sample name (counters end in `_total`).
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

        /// The values of one stream at one moment, filled by the rx thread.
        ///
        /// [`StreamSample::from`] a [`ChannelStats`] fills every field the
        /// session keeps; the rx loop adds what only it knows:
        ///
        /// ```ignore
        /// use crate::publish::StreamState;
        /// use crate::venue::ChannelStats;
        /// use crate::metrics::{Series, StreamSample};
        ///
        /// let stats = ChannelStats { packets: 10, messages: 40, ..ChannelStats::default() };
        /// let sample = StreamSample {
        ///     filtered_packets: 2,
        ///     truncated_packets: 1,
        ///     state: StreamState::Synced,
        ///     ..StreamSample::from(&stats)
        /// };
        /// assert_eq!(sample.messages_received, 40);
        /// assert_eq!(sample.get(Series::FilteredPackets), 2);
        /// ```
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct StreamSample {
            $(
                #[doc = $help]
                pub $field: u64,
            )*
            /// The stream's state as consumers see it.
            pub state: StreamState,
        }

        impl StreamSample {
            /// The value of `series`.
            pub const fn get(&self, series: Series) -> u64 {
                match series {
                    $(Series::$variant => self.$field,)*
                }
            }

            /// Sets the value of `series`.
            pub const fn set(&mut self, series: Series, value: u64) {
                match series {
                    $(Series::$variant => self.$field = value,)*
                }
            }
        }

        impl Default for StreamSample {
            fn default() -> Self {
                Self {
                    $($field: 0,)*
                    state: StreamState::Unseen,
                }
            }
        }

        impl From<&ChannelStats> for StreamSample {
            fn from(stats: &ChannelStats) -> Self {
                Self {
                    $($field: {
                        let read: fn(&ChannelStats) -> u64 = $from;
                        read(stats)
                    },)*
                    state: StreamState::Unseen,
                }
            }
        }
    };
}

// The table. Counters end in `_total`; `|_| 0` marks a value only the rx
// loop knows (it sets the field after `StreamSample::from`).
//
// Not exported on purpose: `ChannelStats::stale_session` and the
// sequencer's `stale` are summed into `gapless_stale_total`;
// the sequencer's `resyncs`, which also counts the resyncs of a session
// change and of a gap declared lost (`gapless_snapshot_resyncs_total` counts
// completed snapshots only, so an alert on it does not fire at every
// rollover); the sequencer's `recovered` counts the same frames as the
// session's `recovered`; the sequencer's `resets` count the session
// changes (`gapless_session_changes_total`).
stream_series! {
    PacketsReceived packets_received: Counter "gapless_packets_received_total"
        "Datagrams received, multicast and unicast." = |s| s.packets;
    MessagesReceived messages_received: Counter "gapless_messages_received_total"
        "Messages carried by data datagrams, before deduplication." = |s| s.messages;
    BytesReceived bytes_received: Counter "gapless_bytes_received_total"
        "Bytes received." = |s| s.bytes;
    HeartbeatsReceived heartbeats_received: Counter "gapless_heartbeats_received_total"
        "Heartbeat and end-of-session datagrams received." = |s| s.heartbeats;
    FramesDelivered frames_delivered: Counter "gapless_frames_delivered_total"
        "Frames delivered to consumers in order." = |s| s.sequencer.delivered;
    GapsDetected gaps_detected: Counter "gapless_gaps_detected_total"
        "Gaps detected (each new missing range counts once)." = |s| s.sequencer.gaps;
    MessagesMissing messages_missing: Gauge "gapless_messages_missing"
        "Sequences missing now: not delivered, not buffered." = |s| s.sequencer.missing;
    RerequestsSent rerequests_sent: Counter "gapless_rerequests_sent_total"
        "Re-requests sent for missing sequences." = |s| s.requests;
    RerequestsDropped rerequests_dropped: Counter "gapless_rerequests_dropped_total"
        "Re-requests not sent because the transmit queue was full." = |s| s.requests_dropped;
    RerequestsSendFailed rerequests_send_failed: Counter "gapless_rerequests_send_failed_total"
        "Re-requests the socket failed to send." = |_| 0;
    RerequestsInflight rerequests_inflight: Gauge "gapless_rerequests_inflight"
        "Re-requests sent and not yet answered or timed out." = |s| s.requests_inflight;
    RerequestsAnswered rerequests_answered: Counter "gapless_rerequests_answered_total"
        "Unicast answers to re-requests received." = |s| s.answers;
    RerequestsTimedOut rerequests_timed_out: Counter "gapless_rerequests_timed_out_total"
        "Re-requests that timed out." = |s| s.timeouts;
    RerequestsNotYet rerequests_not_yet: Counter "gapless_rerequests_not_yet_total"
        "Answers of a peer's JetStream stream that it does not hold a request's messages yet."
        = |s| s.not_yet;
    MessagesRecovered messages_recovered: Counter "gapless_messages_recovered_total"
        "Messages accepted from re-request answers." = |s| s.recovered;
    SnapshotsStarted snapshots_started: Counter "gapless_snapshots_started_total"
        "Snapshots requested." = |s| s.snapshots_started;
    SnapshotsFailed snapshots_failed: Counter "gapless_snapshots_failed_total"
        "Snapshots that failed or timed out." = |s| s.snapshots_failed;
    SnapshotMessages snapshot_messages: Counter "gapless_snapshot_messages_total"
        "Snapshot messages passed to consumers." = |s| s.snapshot_messages;
    SnapshotResyncs snapshot_resyncs: Counter "gapless_snapshot_resyncs_total"
        "Resyncs of the stream from a completed snapshot." = |s| s.snapshots_done;
    Duplicates duplicates: Counter "gapless_duplicates_total"
        "Duplicate frames dropped." = |s| s.sequencer.duplicates;
    Arbitrated arbitrated: Counter "gapless_arbitrated_messages_total"
        "Messages in a redundant line's copies that another line had brought first, discarded."
        = |s| s.arbitrated;
    Stale stale: Counter "gapless_stale_total"
        "Frames and datagrams from an older epoch dropped."
        = |s| s.sequencer.stale.saturating_add(s.stale_session);
    MalformedPackets malformed_packets: Counter "gapless_malformed_packets_total"
        "Datagrams that failed to decode." = |s| s.malformed;
    FilteredPackets filtered_packets: Counter "gapless_filtered_packets_total"
        "Datagrams dropped by the source filter." = |_| 0;
    TruncatedPackets truncated_packets: Counter "gapless_truncated_packets_total"
        "Datagrams cut short by the receive buffer and dropped." = |_| 0;
    InvalidFrames invalid_frames: Counter "gapless_invalid_frames_total"
        "Frames whose sequence numbers contradicted themselves, dropped."
        = |s| s.sequencer.invalid;
    ReorderBuffered reorder_buffered: Gauge "gapless_reorder_buffered"
        "Frames held in the reorder buffer now." = |s| as_u64(s.sequencer.buffered);
    ReorderBufferedHighWater reorder_buffered_high_water: Gauge
        "gapless_reorder_buffered_high_water"
        "Most frames ever held in the reorder buffer at once."
        = |s| as_u64(s.sequencer.buffered_hwm);
    ReorderOverflows reorder_overflows: Counter "gapless_reorder_overflows_total"
        "Frames dropped because the reorder buffer was full." = |s| s.sequencer.overflows;
    ArenaFull arena_full: Counter "gapless_reorder_arena_full_total"
        "Messages not kept for reordering because no datagram slot was free."
        = |s| s.arena_full;
    GapsLost gaps_lost: Counter "gapless_gaps_lost_total"
        "Gaps declared lost and skipped." = |s| s.gaps_lost;
    MessagesLost messages_lost: Counter "gapless_messages_lost_total"
        "Messages in gaps declared lost." = |s| s.messages_lost;
    RecoveryExhausted recovery_exhausted: Counter "gapless_recovery_exhausted_total"
        "Times re-requests gave up with no snapshot to help (gap_policy hold: the stream latched reset_required)."
        = |s| s.recovery_exhausted;
    ResetsSuspected resets_suspected: Counter "gapless_resets_suspected_total"
        "Backward sequence jumps large enough to suggest a publisher restart."
        = |s| s.sequencer.reset_suspected;
    DroppedResetRequired dropped_reset_required: Counter
        "gapless_dropped_reset_required_total"
        "Frames dropped while the stream waited for a resync." = |s| s.sequencer.dropped_reset_required;
    SessionChanges session_changes: Counter "gapless_session_changes_total"
        "Session changes adopted, each a new epoch (the stream resyncs)." = |s| s.new_sessions;
    UnconfirmedSessionPackets unconfirmed_session_packets: Counter
        "gapless_unconfirmed_session_packets_total"
        "Datagrams of another session that was never adopted: strays on the group."
        = |s| s.unconfirmed_session;
}

/// The metrics of one stream, shared (`Arc`) by the rx thread, which
/// writes them, and the exporter, which reads them.
#[derive(Debug)]
pub struct StreamMetrics {
    /// One slot a series, in the order of [`Series::ALL`].
    values: [AtomicU64; Series::COUNT],
    state: AtomicU8,
    handoff: AtomicHistogram,
    snapshot: AtomicHistogram,
}

impl Default for StreamMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamMetrics {
    /// Zeroed metrics for a stream in [`StreamState::Unseen`].
    pub fn new() -> Self {
        Self {
            values: std::array::from_fn(|_| AtomicU64::new(0)),
            state: AtomicU8::new(StreamState::Unseen as u8),
            handoff: AtomicHistogram::new(),
            snapshot: AtomicHistogram::new(),
        }
    }

    /// Stores every value of `sample`: plain `Relaxed` stores, no locking,
    /// no read-modify-write.
    pub fn publish(&self, sample: &StreamSample) {
        for (slot, series) in self.values.iter().zip(Series::ALL) {
            slot.store(sample.get(series), Ordering::Relaxed);
        }
        self.state.store(sample.state as u8, Ordering::Relaxed);
    }

    /// Stores the stream's state alone, for a state change between samples.
    pub fn set_state(&self, state: StreamState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// Records one hand-off latency: nanoseconds from kernel receive to the
    /// push into the consumer queues.
    pub fn record_handoff(&self, ns: u64) {
        self.handoff.record(ns);
    }

    /// Records `n` messages handed off together, each after `ns` nanoseconds.
    pub fn record_handoff_n(&self, ns: u64, n: u64) {
        self.handoff.record_n(ns, n);
    }

    /// Records how long a snapshot took, in nanoseconds.
    pub fn record_snapshot(&self, ns: u64) {
        self.snapshot.record(ns);
    }

    /// The latest published values.
    pub fn read(&self) -> StreamSample {
        let mut sample = StreamSample {
            state: self.state(),
            ..StreamSample::default()
        };
        for (slot, series) in self.values.iter().zip(Series::ALL) {
            sample.set(series, slot.load(Ordering::Relaxed));
        }
        sample
    }

    /// The latest published state.
    pub fn state(&self) -> StreamState {
        StreamState::from_u8(self.state.load(Ordering::Relaxed)).unwrap_or(StreamState::Unseen)
    }

    /// The hand-off latency histogram.
    pub fn handoff(&self) -> &AtomicHistogram {
        &self.handoff
    }

    /// The snapshot duration histogram.
    pub fn snapshot_duration(&self) -> &AtomicHistogram {
        &self.snapshot
    }
}

/// Process-level gauges: when the rx loop last proved it was alive, and
/// when the process started.
#[derive(Debug)]
pub struct ProcessMetrics {
    start_ns: u64,
    last_alive_ns: AtomicU64,
}

impl Default for ProcessMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcessMetrics {
    /// Gauges for a process starting now; never alive yet.
    pub fn new() -> Self {
        Self {
            start_ns: unix_now_ns(),
            last_alive_ns: AtomicU64::new(0),
        }
    }

    /// Records that the rx loop was alive at `now_ns` (nanoseconds since
    /// the Unix epoch, the time the loop already read this cycle).
    pub fn mark_alive(&self, now_ns: u64) {
        self.last_alive_ns.store(now_ns, Ordering::Relaxed);
    }

    /// [`ProcessMetrics::mark_alive`] with the system clock.
    pub fn mark_alive_now(&self) {
        self.mark_alive(unix_now_ns());
    }

    /// When the rx loop was last alive (0: never).
    pub fn last_alive_ns(&self) -> u64 {
        self.last_alive_ns.load(Ordering::Relaxed)
    }

    /// When the process started, in nanoseconds since the Unix epoch.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }
}

/// The system clock in nanoseconds since the Unix epoch (0 before it).
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequencer::StreamStats;

    /// A sample whose every series holds a different value.
    fn distinct() -> StreamSample {
        let mut sample = StreamSample {
            state: StreamState::Recovering,
            ..StreamSample::default()
        };
        for (i, series) in Series::ALL.into_iter().enumerate() {
            sample.set(series, i as u64 * 3 + 1);
        }
        sample
    }

    #[test]
    fn every_series_has_a_field_of_its_own() {
        let sample = distinct();
        for (i, series) in Series::ALL.into_iter().enumerate() {
            assert_eq!(sample.get(series), i as u64 * 3 + 1, "{series:?}");
        }
        let metrics = StreamMetrics::new();
        metrics.publish(&sample);
        assert_eq!(metrics.read(), sample);
    }

    #[test]
    fn series_names_are_unique_prefixed_and_suffixed_by_kind() {
        for (i, a) in Series::ALL.iter().enumerate() {
            assert!(a.name().starts_with("gapless_"), "{a:?}");
            let total = a.name().ends_with("_total");
            assert_eq!(total, a.kind() == SeriesKind::Counter, "{a:?}");
            assert!(a.help().ends_with('.') && !a.help().contains('\n'), "{a:?}");
            assert!(Series::ALL.iter().skip(i + 1).all(|b| b.name() != a.name()));
        }
    }

    #[test]
    fn channel_stats_land_in_their_own_series() {
        let stats = ChannelStats {
            packets: 1,
            bytes: 2,
            messages: 3,
            heartbeats: 4,
            malformed: 5,
            stale_session: 6,
            unconfirmed_session: 7,
            new_sessions: 8,
            requests: 9,
            requests_dropped: 10,
            requests_inflight: 11,
            timeouts: 12,
            answers: 13,
            recovered: 14,
            snapshots_started: 15,
            snapshots_done: 16,
            snapshots_failed: 17,
            snapshot_messages: 18,
            gaps_lost: 19,
            messages_lost: 20,
            arena_full: 21,
            recovery_exhausted: 22,
            arbitrated: 23,
            not_yet: 24,
            sequencer: StreamStats {
                delivered: 101,
                gaps: 102,
                missing: 103,
                buffered: 104,
                buffered_hwm: 105,
                duplicates: 106,
                stale: 107,
                resets: 108,
                reset_suspected: 109,
                overflows: 110,
                resyncs: 111,
                recovered: 112,
                invalid: 113,
                dropped_reset_required: 114,
            },
        };
        let sample = StreamSample::from(&stats);
        let expected = [
            (Series::PacketsReceived, 1),
            (Series::BytesReceived, 2),
            (Series::MessagesReceived, 3),
            (Series::HeartbeatsReceived, 4),
            (Series::MalformedPackets, 5),
            (Series::Stale, 6 + 107),
            (Series::UnconfirmedSessionPackets, 7),
            (Series::SessionChanges, 8),
            (Series::RerequestsSent, 9),
            (Series::RerequestsDropped, 10),
            (Series::RerequestsInflight, 11),
            (Series::RerequestsTimedOut, 12),
            (Series::RerequestsAnswered, 13),
            (Series::MessagesRecovered, 14),
            (Series::SnapshotsStarted, 15),
            (Series::SnapshotsFailed, 17),
            (Series::SnapshotMessages, 18),
            (Series::GapsLost, 19),
            (Series::MessagesLost, 20),
            (Series::ArenaFull, 21),
            (Series::RecoveryExhausted, 22),
            (Series::RerequestsNotYet, 24),
            (Series::Arbitrated, 23),
            (Series::FramesDelivered, 101),
            (Series::GapsDetected, 102),
            (Series::MessagesMissing, 103),
            (Series::ReorderBuffered, 104),
            (Series::ReorderBufferedHighWater, 105),
            (Series::Duplicates, 106),
            (Series::ResetsSuspected, 109),
            (Series::ReorderOverflows, 110),
            (Series::SnapshotResyncs, 16),
            (Series::InvalidFrames, 113),
            (Series::DroppedResetRequired, 114),
            // Only the rx loop knows these.
            (Series::FilteredPackets, 0),
            (Series::TruncatedPackets, 0),
            (Series::RerequestsSendFailed, 0),
        ];
        for series in Series::ALL {
            let want = expected.iter().find(|(s, _)| *s == series);
            assert_eq!(
                Some(sample.get(series)),
                want.map(|(_, v)| *v),
                "{series:?} (a series without an expectation here is a new one)"
            );
        }
        assert_eq!(expected.len(), Series::COUNT);
    }
}
