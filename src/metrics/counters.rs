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
//! The series a [`StreamSample`] feeds are listed once, in [`SERIES`], with
//! their exported names, help text and kinds; the exporter walks that table.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::publish::StreamState;
use crate::venue::ChannelStats;

use crate::metrics::histogram::AtomicHistogram;

/// Whether a series only goes up or may go both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesKind {
    /// Monotonic; exported with a `_total` suffix.
    Counter,
    /// A value that may go down.
    Gauge,
}

/// The exported form of one per-stream value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesSpec {
    /// Metric family name, without the `_total` suffix that the encoder
    /// appends to counter samples.
    pub name: &'static str,
    /// Help text.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: SeriesKind,
}

/// Builds [`SERIES`] from one line a series: kind, name, help.
macro_rules! series {
    ($($kind:ident $name:literal $help:literal;)*) => {
        [$(SeriesSpec { name: $name, help: $help, kind: SeriesKind::$kind }),*]
    };
}

/// Number of per-stream values in a [`StreamSample`] (the state aside).
pub const SERIES_COUNT: usize = 21;

/// Every per-stream value, in the order of [`StreamSample::values`].
pub const SERIES: [SeriesSpec; SERIES_COUNT] = series! {
    Counter "gapless_packets_received" "Datagrams received, multicast and unicast.";
    Counter "gapless_messages_received" "Messages carried by data datagrams, before deduplication.";
    Counter "gapless_bytes_received" "Bytes received.";
    Counter "gapless_frames_delivered" "Frames delivered to consumers in order.";
    Counter "gapless_gaps_detected" "Gaps detected (each new missing range counts once).";
    Gauge "gapless_messages_missing" "Sequences missing now: not delivered, not buffered.";
    Counter "gapless_rerequests_sent" "Re-requests sent for missing sequences.";
    Counter "gapless_rerequests_answered" "Unicast answers to re-requests received.";
    Counter "gapless_rerequests_timed_out" "Re-requests that timed out.";
    Counter "gapless_messages_recovered" "Messages accepted from re-request answers.";
    Counter "gapless_snapshot_resyncs" "Resyncs of the stream from a snapshot.";
    Counter "gapless_duplicates" "Duplicate frames dropped.";
    Counter "gapless_stale" "Frames and datagrams from an older epoch dropped.";
    Counter "gapless_malformed_packets" "Datagrams that failed to decode.";
    Counter "gapless_filtered_packets" "Datagrams dropped by the source filter.";
    Gauge "gapless_reorder_buffered" "Frames held in the reorder buffer now.";
    Gauge "gapless_reorder_buffered_high_water" "Most frames ever held in the reorder buffer at once.";
    Counter "gapless_messages_lost" "Messages in gaps declared lost.";
    Counter "gapless_reorder_overflows" "Frames dropped because the reorder buffer was full.";
    Counter "gapless_session_changes" "Session changes adopted, each a new epoch (the stream resyncs).";
    Counter "gapless_unconfirmed_session_packets" "Datagrams of another session that was never adopted: strays on the group.";
};

/// The values of one stream at one moment, filled by the rx thread.
///
/// [`StreamSample::from`] a [`ChannelStats`] fills every field the session
/// keeps; the rx loop adds what only it knows:
///
/// ```
/// use gapless::publish::StreamState;
/// use gapless::venue::ChannelStats;
/// use gapless::metrics::StreamSample;
///
/// let stats = ChannelStats { packets: 10, messages: 40, ..ChannelStats::default() };
/// let sample = StreamSample {
///     filtered_packets: 2,
///     state: StreamState::Synced,
///     ..StreamSample::from(&stats)
/// };
/// assert_eq!(sample.messages_received, 40);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSample {
    /// Datagrams received.
    pub packets_received: u64,
    /// Messages received, before deduplication.
    pub messages_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Frames delivered.
    pub frames_delivered: u64,
    /// Gaps detected.
    pub gaps_detected: u64,
    /// Sequences missing now.
    pub messages_missing: u64,
    /// Re-requests sent.
    pub rerequests_sent: u64,
    /// Re-request answers received.
    pub rerequests_answered: u64,
    /// Re-requests timed out.
    pub rerequests_timed_out: u64,
    /// Messages recovered by re-requests.
    pub messages_recovered: u64,
    /// Resyncs from a snapshot.
    pub snapshot_resyncs: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Stale frames and datagrams dropped.
    pub stale: u64,
    /// Malformed datagrams.
    pub malformed_packets: u64,
    /// Datagrams dropped by the source filter (kept by the rx loop).
    pub filtered_packets: u64,
    /// Frames in the reorder buffer now.
    pub reorder_buffered: u64,
    /// Most frames ever in the reorder buffer.
    pub reorder_buffered_high_water: u64,
    /// Messages in gaps declared lost.
    pub messages_lost: u64,
    /// Frames dropped on a full reorder buffer.
    pub reorder_overflows: u64,
    /// Session changes adopted.
    pub session_changes: u64,
    /// Datagrams of another session that was never adopted.
    pub unconfirmed_session_packets: u64,
    /// The stream's state as consumers see it.
    pub state: StreamState,
}

impl Default for StreamSample {
    fn default() -> Self {
        Self::from_values([0; SERIES_COUNT], StreamState::Unseen)
    }
}

impl From<&ChannelStats> for StreamSample {
    fn from(stats: &ChannelStats) -> Self {
        let seq = &stats.sequencer;
        Self {
            packets_received: stats.packets,
            messages_received: stats.messages,
            bytes_received: stats.bytes,
            frames_delivered: seq.delivered,
            gaps_detected: seq.gaps,
            messages_missing: seq.missing,
            rerequests_sent: stats.requests,
            rerequests_answered: stats.answers,
            rerequests_timed_out: stats.timeouts,
            messages_recovered: stats.recovered,
            snapshot_resyncs: seq.resyncs,
            duplicates: seq.duplicates,
            stale: seq.stale.saturating_add(stats.stale_session),
            malformed_packets: stats.malformed,
            filtered_packets: 0,
            reorder_buffered: as_u64(seq.buffered),
            reorder_buffered_high_water: as_u64(seq.buffered_hwm),
            messages_lost: stats.messages_lost,
            reorder_overflows: seq.overflows,
            session_changes: stats.new_sessions,
            unconfirmed_session_packets: stats.unconfirmed_session,
            state: StreamState::Unseen,
        }
    }
}

impl StreamSample {
    /// The values in the order of [`SERIES`].
    pub const fn values(&self) -> [u64; SERIES_COUNT] {
        [
            self.packets_received,
            self.messages_received,
            self.bytes_received,
            self.frames_delivered,
            self.gaps_detected,
            self.messages_missing,
            self.rerequests_sent,
            self.rerequests_answered,
            self.rerequests_timed_out,
            self.messages_recovered,
            self.snapshot_resyncs,
            self.duplicates,
            self.stale,
            self.malformed_packets,
            self.filtered_packets,
            self.reorder_buffered,
            self.reorder_buffered_high_water,
            self.messages_lost,
            self.reorder_overflows,
            self.session_changes,
            self.unconfirmed_session_packets,
        ]
    }

    /// A sample from values in the order of [`SERIES`].
    pub const fn from_values(v: [u64; SERIES_COUNT], state: StreamState) -> Self {
        Self {
            packets_received: v[0],
            messages_received: v[1],
            bytes_received: v[2],
            frames_delivered: v[3],
            gaps_detected: v[4],
            messages_missing: v[5],
            rerequests_sent: v[6],
            rerequests_answered: v[7],
            rerequests_timed_out: v[8],
            messages_recovered: v[9],
            snapshot_resyncs: v[10],
            duplicates: v[11],
            stale: v[12],
            malformed_packets: v[13],
            filtered_packets: v[14],
            reorder_buffered: v[15],
            reorder_buffered_high_water: v[16],
            messages_lost: v[17],
            reorder_overflows: v[18],
            session_changes: v[19],
            unconfirmed_session_packets: v[20],
            state,
        }
    }
}

/// The metrics of one stream, shared (`Arc`) by the rx thread, which
/// writes them, and the exporter, which reads them.
#[derive(Debug)]
pub struct StreamMetrics {
    values: [AtomicU64; SERIES_COUNT],
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
        for (slot, value) in self.values.iter().zip(sample.values()) {
            slot.store(value, Ordering::Relaxed);
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
        let values = std::array::from_fn(|i| {
            self.values
                .get(i)
                .map_or(0, |slot| slot.load(Ordering::Relaxed))
        });
        StreamSample::from_values(values, self.state())
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

    #[test]
    fn values_round_trip_in_series_order() {
        let values: [u64; SERIES_COUNT] = std::array::from_fn(|i| i as u64 * 3 + 1);
        let sample = StreamSample::from_values(values, StreamState::Recovering);
        assert_eq!(sample.values(), values);
        let metrics = StreamMetrics::new();
        metrics.publish(&sample);
        assert_eq!(metrics.read(), sample);
    }

    #[test]
    fn series_names_are_unique_and_prefixed() {
        for (i, a) in SERIES.iter().enumerate() {
            assert!(a.name.starts_with("gapless_"));
            assert!(!a.name.ends_with("_total"));
            assert!(SERIES.iter().skip(i + 1).all(|b| b.name != a.name));
        }
    }
}
