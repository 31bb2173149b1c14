//! Metrics: plain atomics written by the rx thread, read and exported in
//! the Prometheus text format (or OpenMetrics, when asked) by a thread of
//! their own.
//!
//! The rx thread must never be slowed by metrics, so it only ever stores
//! into atomics it was handed at start-up:
//!
//! - [`StreamMetrics`], one per stream (`Arc`-shared): counters and gauges
//!   stored from a [`StreamSample`] with `Relaxed` stores, the stream
//!   state, and lock-free histograms of hand-off latency (kernel receive to
//!   consumer queue) and snapshot duration.
//! - the rx cycle time histogram and the watchdog timestamp of the
//!   [`Registry`].
//!
//! Nothing is computed until a scrape: the [`Exporter`]'s connection
//! threads walk the [`Registry`] and turn the atomics into series named in
//! base units, counters ending in `_total`, every per-stream series
//! labelled `venue` and `stream`, every per-consumer one labelled
//! `consumer`, written in the [`Format`] the scraper asked for.
//!
//! ```ignore
//! use std::sync::Arc;
//!
//! use crate::publish::StreamState;
//! use crate::metrics::{Format, Registry, StreamSample};
//!
//! let registry = Arc::new(Registry::new());
//! let itch = registry.add_stream("nasdaq", "itch-a");
//! // On the rx thread, once a cycle:
//! itch.publish(&StreamSample { messages_received: 3, state: StreamState::Synced, ..StreamSample::default() });
//! itch.record_handoff(1_500);
//! registry.process().mark_alive_now();
//!
//! let text = registry.encode(Format::Text)?;
//! assert!(text.contains(r#"gapless_messages_received_total{venue="nasdaq",stream="itch-a"} 3"#));
//! assert!(text.contains(r#"gapless_trading_authorized{venue="nasdaq",stream="itch-a"} 1"#));
//! # Ok::<(), std::fmt::Error>(())
//! ```

pub mod counters;
pub mod exporter;
pub mod exposition;
pub mod histogram;
pub mod line;
pub mod venue;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::publish::{QueueStats, StreamState};
use crate::sinks::UnixCounters;
use crate::sinks::nats::NatsCounters;
use crate::sinks::nats_recovery::RecoveryCounters;
use crate::sinks::shm::ShmCounters;
use exposition::{Family, Kind, Value};

pub use counters::{ProcessMetrics, Series, SeriesKind, StreamMetrics, StreamSample, unix_now_ns};
pub use exporter::{Exporter, ExporterHandle, ExporterStats};
pub use exposition::Format;
pub use histogram::{AtomicHistogram, HistogramSnapshot, LatencySummary};
pub use line::{LineMetrics, LineSocket};
pub use venue::{VenueMetrics, VenueSeries};

/// How long the rx loop may go without marking itself alive before
/// `/healthz` reports it unhealthy, unless set otherwise.
pub const DEFAULT_ALIVE_THRESHOLD: Duration = Duration::from_secs(5);

/// Exported bucket bounds of latency histograms: 2^7 ns (128 ns) to 2^30 ns
/// (about 1.07 s).
pub(crate) const LATENCY_POWS: (u32, u32) = (7, 30);
/// Exported bucket bounds of snapshot durations: 2^20 ns (about 1 ms) to
/// 2^39 ns (about 9 minutes).
pub(crate) const SNAPSHOT_POWS: (u32, u32) = (20, 39);

/// Everything the exporter reads: streams with their labels, consumer
/// queues, the rx cycle histogram, process gauges and the exporter's own
/// counters.
///
/// Registration takes a lock the exporter also takes while encoding; the
/// rx thread never touches the registry, only the `Arc`s it hands out.
#[derive(Debug)]
pub struct Registry {
    streams: Mutex<Vec<StreamEntry>>,
    venues: Mutex<Vec<(String, Arc<VenueMetrics>)>>,
    consumers: Mutex<Vec<ConsumerEntry>>,
    rings: Mutex<Vec<(String, Arc<ShmCounters>)>>,
    sockets: Mutex<Vec<(String, Arc<UnixCounters>)>>,
    nats: Mutex<Vec<(String, Arc<NatsCounters>)>>,
    recovery: Mutex<Vec<(String, Arc<RecoveryCounters>)>>,
    lines: Mutex<Vec<line::LineEntry>>,
    rx_cycle: Arc<AtomicHistogram>,
    process: Arc<ProcessMetrics>,
    exporter: Arc<ExporterStats>,
    alive_threshold: Duration,
}

#[derive(Debug)]
struct StreamEntry {
    venue: String,
    stream: String,
    metrics: Arc<StreamMetrics>,
}

#[derive(Debug)]
struct ConsumerEntry {
    name: String,
    stats: Arc<QueueStats>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// An empty registry with [`DEFAULT_ALIVE_THRESHOLD`].
    pub fn new() -> Self {
        Self {
            streams: Mutex::new(Vec::new()),
            venues: Mutex::new(Vec::new()),
            consumers: Mutex::new(Vec::new()),
            rings: Mutex::new(Vec::new()),
            sockets: Mutex::new(Vec::new()),
            nats: Mutex::new(Vec::new()),
            recovery: Mutex::new(Vec::new()),
            lines: Mutex::new(Vec::new()),
            rx_cycle: Arc::new(AtomicHistogram::new()),
            process: Arc::new(ProcessMetrics::new()),
            exporter: Arc::new(ExporterStats::default()),
            alive_threshold: DEFAULT_ALIVE_THRESHOLD,
        }
    }

    /// Sets how long the rx loop may stay silent and still be healthy.
    pub fn with_alive_threshold(mut self, threshold: Duration) -> Self {
        self.alive_threshold = threshold;
        self
    }

    /// Registers a venue and returns the venue-wide metrics its rx thread writes.
    pub fn add_venue(&self, venue: &str) -> Arc<VenueMetrics> {
        let metrics = Arc::new(VenueMetrics::default());
        lock(&self.venues).push((escape_label(venue), Arc::clone(&metrics)));
        metrics
    }

    /// Registers a stream and returns the metrics its rx thread writes.
    pub fn add_stream(&self, venue: &str, stream: &str) -> Arc<StreamMetrics> {
        let metrics = Arc::new(StreamMetrics::new());
        lock(&self.streams).push(StreamEntry {
            venue: escape_label(venue),
            stream: escape_label(stream),
            metrics: Arc::clone(&metrics),
        });
        metrics
    }

    /// Registers line `line` of a stream and returns the metrics its rx thread writes.
    pub fn add_line(&self, venue: &str, stream: &str, line: &str) -> Arc<LineMetrics> {
        let metrics = Arc::new(LineMetrics::default());
        lock(&self.lines).push(line::LineEntry {
            venue: escape_label(venue),
            stream: escape_label(stream),
            line: escape_label(line),
            metrics: Arc::clone(&metrics),
        });
        metrics
    }

    /// Registers a consumer queue, by name, for depth and overrun series.
    pub fn add_consumer(&self, name: &str, stats: Arc<QueueStats>) {
        lock(&self.consumers).push(ConsumerEntry {
            name: escape_label(name),
            stats,
        });
    }

    /// Registers a JetStream recovery source, by its nats sink's name, for the
    /// re-requests it answered and did not.
    pub fn add_jetstream_recovery(&self, name: &str, counters: Arc<RecoveryCounters>) {
        lock(&self.recovery).push((escape_label(name), counters));
    }

    /// Registers a nats sink, by name, for its publishes, acknowledgements and latency.
    pub fn add_nats(&self, name: &str, counters: Arc<NatsCounters>) {
        lock(&self.nats).push((escape_label(name), counters));
    }

    /// Registers a shared-memory ring, by path, for its records, bytes and refusals.
    pub fn add_ring(&self, path: &str, counters: Arc<ShmCounters>) {
        lock(&self.rings).push((escape_label(path), counters));
    }

    /// Registers a unix sink, by socket path, for its clients, cut-offs and resumes.
    pub fn add_socket(&self, path: &str, counters: Arc<UnixCounters>) {
        lock(&self.sockets).push((escape_label(path), counters));
    }

    /// Each consumer's name (as in its metric labels) and the events its queue had no room
    /// for, in the order they were added.
    pub fn consumer_drops(&self) -> Vec<(String, u64)> {
        lock(&self.consumers)
            .iter()
            .map(|c| (c.name.clone(), c.stats.dropped()))
            .collect()
    }

    /// The rx loop's cycle time histogram (nanoseconds a cycle).
    pub fn rx_cycle(&self) -> &Arc<AtomicHistogram> {
        &self.rx_cycle
    }

    /// Process-level gauges, among them the watchdog timestamp.
    pub fn process(&self) -> &Arc<ProcessMetrics> {
        &self.process
    }

    /// The exporter's own counters: requests answered, connections refused
    /// and failed.
    pub fn exporter(&self) -> &Arc<ExporterStats> {
        &self.exporter
    }

    /// How long the rx loop may stay silent and still be healthy.
    pub fn alive_threshold(&self) -> Duration {
        self.alive_threshold
    }

    /// True when the rx loop marked itself alive at most the threshold
    /// before `now_ns` (nanoseconds since the Unix epoch).
    pub fn is_alive(&self, now_ns: u64) -> bool {
        let last = self.process.last_alive_ns();
        let threshold = u64::try_from(self.alive_threshold.as_nanos()).unwrap_or(u64::MAX);
        last != 0 && now_ns.saturating_sub(last) <= threshold
    }

    /// Hand-off latency over every stream, for a final report.
    pub fn handoff_latency(&self) -> LatencySummary {
        let streams = lock(&self.streams);
        let mut merged: Option<HistogramSnapshot> = None;
        for entry in streams.iter() {
            let snapshot = entry.metrics.handoff().snapshot();
            match merged.as_mut() {
                Some(total) => total.merge(&snapshot),
                None => merged = Some(snapshot),
            }
        }
        merged.map_or_else(LatencySummary::default, |s| {
            LatencySummary::from_snapshot(&s)
        })
    }

    /// The full exposition in `format`, as served at `/metrics`.
    ///
    /// # Errors
    ///
    /// Only if formatting fails, which writing to a `String` does not.
    pub fn encode(&self, format: Format) -> Result<String, fmt::Error> {
        let families = self.families();
        let mut text = String::with_capacity(32 * 1024);
        match format {
            Format::Text => exposition::write_text(&mut text, &families)?,
            Format::OpenMetrics => exposition::write_openmetrics(&mut text, families)?,
        }
        Ok(text)
    }

    /// Every family with its current samples.
    fn families(&self) -> Vec<Family> {
        let mut families = stream_families(&lock(&self.streams));
        families.extend(venue_families(&lock(&self.venues)));
        families.extend(consumer_families(&lock(&self.consumers)));
        families.extend(ring_families(&lock(&self.rings)));
        families.extend(socket_families(&lock(&self.sockets)));
        families.extend(nats_families(&lock(&self.nats)));
        families.extend(recovery_families(&lock(&self.recovery)));
        families.extend(line::line_families(&lock(&self.lines)));

        let mut cycle = Family::new(
            "gapless_rx_cycle_seconds",
            "Duration of one rx loop cycle.",
            Kind::Histogram,
        );
        cycle.push(
            Vec::new(),
            histogram(&self.rx_cycle.snapshot(), LATENCY_POWS),
        );
        families.push(cycle);

        let process = &self.process;
        let gauges = [
            (
                "gapless_watchdog_last_alive_timestamp_seconds",
                "When the rx loop last marked itself alive, in seconds since the Unix epoch.",
                process.last_alive_ns(),
            ),
            (
                "gapless_process_start_time_seconds",
                "When the process started, in seconds since the Unix epoch.",
                process.start_ns(),
            ),
        ];
        for (name, help, ns) in gauges {
            let mut family = Family::new(name, help, Kind::Gauge);
            family.push(Vec::new(), Value::Float(ns as f64 / 1e9));
            families.push(family);
        }

        let exporter = &self.exporter;
        let counters = [
            (
                "gapless_exporter_connections_refused_total",
                "Connections to the metrics endpoint refused because too many were open.",
                exporter.refused(),
            ),
            (
                "gapless_exporter_connections_failed_total",
                "Connections to the metrics endpoint that timed out or failed before an answer.",
                exporter.failed(),
            ),
        ];
        for (name, help, value) in counters {
            let mut family = Family::new(name, help, Kind::Counter);
            family.push(Vec::new(), Value::Int(value));
            families.push(family);
        }
        families
    }
}

fn stream_families(streams: &[StreamEntry]) -> Vec<Family> {
    let samples: Vec<StreamSample> = streams.iter().map(|e| e.metrics.read()).collect();
    let labels = |entry: &StreamEntry| {
        vec![
            ("venue", entry.venue.clone()),
            ("stream", entry.stream.clone()),
        ]
    };
    let mut families = Vec::with_capacity(Series::COUNT + 4);
    for series in Series::ALL {
        let kind = match series.kind() {
            SeriesKind::Counter => Kind::Counter,
            SeriesKind::Gauge => Kind::Gauge,
        };
        let mut family = Family::new(series.name(), series.help(), kind);
        for (entry, sample) in streams.iter().zip(&samples) {
            family.push(labels(entry), Value::Int(sample.get(series)));
        }
        families.push(family);
    }

    let mut state = Family::new(
        "gapless_stream_state",
        "1 for the stream's current state, 0 for the others.",
        Kind::Gauge,
    );
    for (entry, sample) in streams.iter().zip(&samples) {
        for s in StreamState::ALL {
            let mut labels = labels(entry);
            labels.push(("state", s.as_str().to_string()));
            state.push(labels, Value::Int(u64::from(sample.state == s)));
        }
    }
    families.push(state);

    let mut authorized = Family::new(
        "gapless_trading_authorized",
        "1 while the stream is synced, the only state that authorises trading.",
        Kind::Gauge,
    );
    for (entry, sample) in streams.iter().zip(&samples) {
        let value = u64::from(sample.state == StreamState::Synced);
        authorized.push(labels(entry), Value::Int(value));
    }
    families.push(authorized);

    type Pick = fn(&StreamMetrics) -> &AtomicHistogram;
    let histograms: [(&'static str, &'static str, Pick, (u32, u32)); 2] = [
        (
            "gapless_handoff_latency_seconds",
            "Time from kernel receive to the hand-off to consumer queues.",
            StreamMetrics::handoff,
            LATENCY_POWS,
        ),
        (
            "gapless_snapshot_duration_seconds",
            "Time a snapshot took, from request to the last message applied.",
            StreamMetrics::snapshot_duration,
            SNAPSHOT_POWS,
        ),
    ];
    for (name, help, pick, pows) in histograms {
        let mut family = Family::new(name, help, Kind::Histogram);
        for entry in streams {
            family.push(
                labels(entry),
                histogram(&pick(&entry.metrics).snapshot(), pows),
            );
        }
        families.push(family);
    }
    families
}

fn venue_families(venues: &[(String, Arc<VenueMetrics>)]) -> Vec<Family> {
    if venues.is_empty() {
        return Vec::new();
    }
    VenueSeries::ALL
        .iter()
        .map(|series| {
            let kind = match series.kind() {
                SeriesKind::Counter => Kind::Counter,
                SeriesKind::Gauge => Kind::Gauge,
            };
            let mut family = Family::new(series.name(), series.help(), kind);
            for (venue, metrics) in venues {
                family.push(
                    vec![("venue", venue.clone())],
                    Value::Int(metrics.get(*series)),
                );
            }
            family
        })
        .collect()
}

/// A series of a labelled family: name, help, kind, and how to read an entry's value.
type LabelledSeries<T> = (&'static str, &'static str, Kind, fn(&T) -> u64);

/// A family per series, each with one sample per entry under `label`.
fn labelled_families<T>(
    series: &[LabelledSeries<T>],
    label: &'static str,
    entries: &[(&str, &T)],
) -> Vec<Family> {
    series
        .iter()
        .map(|&(name, help, kind, read)| {
            let mut family = Family::new(name, help, kind);
            for &(value, item) in entries {
                family.push(vec![(label, value.to_owned())], Value::Int(read(item)));
            }
            family
        })
        .collect()
}

fn consumer_families(consumers: &[ConsumerEntry]) -> Vec<Family> {
    let series: [LabelledSeries<QueueStats>; 4] = [
        (
            "gapless_consumer_queue_depth_bytes",
            "Bytes waiting in the consumer's queue.",
            Kind::Gauge,
            QueueStats::fill_bytes,
        ),
        (
            "gapless_consumer_queue_capacity_bytes",
            "Size of the consumer's queue.",
            Kind::Gauge,
            QueueStats::capacity_bytes,
        ),
        (
            "gapless_consumer_events_total",
            "Events written to the consumer's queue.",
            Kind::Counter,
            QueueStats::pushed,
        ),
        (
            "gapless_consumer_overruns_total",
            "Events the consumer lost because its queue was full.",
            Kind::Counter,
            QueueStats::dropped,
        ),
    ];
    let entries: Vec<(&str, &QueueStats)> = consumers
        .iter()
        .map(|c| (c.name.as_str(), &*c.stats))
        .collect();
    labelled_families(&series, "consumer", &entries)
}

fn ring_families(rings: &[(String, Arc<ShmCounters>)]) -> Vec<Family> {
    let series: [LabelledSeries<ShmCounters>; 4] = [
        (
            "gapless_shm_records_total",
            "Records written into the shared-memory ring.",
            Kind::Counter,
            ShmCounters::records,
        ),
        (
            "gapless_shm_written_bytes_total",
            "Bytes written into the shared-memory ring, padding included.",
            Kind::Counter,
            ShmCounters::bytes,
        ),
        (
            "gapless_shm_too_long_total",
            "Events too long for a record of the ring, written as overrun markers.",
            Kind::Counter,
            ShmCounters::too_long,
        ),
        (
            "gapless_shm_capacity_bytes",
            "Data bytes of the shared-memory ring.",
            Kind::Gauge,
            ShmCounters::capacity,
        ),
    ];
    if rings.is_empty() {
        return Vec::new();
    }
    let entries: Vec<(&str, &ShmCounters)> = rings
        .iter()
        .map(|(path, counters)| (path.as_str(), &**counters))
        .collect();
    labelled_families(&series, "ring", &entries)
}

fn socket_families(sockets: &[(String, Arc<UnixCounters>)]) -> Vec<Family> {
    if sockets.is_empty() {
        return Vec::new();
    }
    let series: [LabelledSeries<UnixCounters>; 6] = [
        (
            "gapless_unix_clients",
            "Clients of the unix socket being fed now.",
            Kind::Gauge,
            UnixCounters::clients_connected,
        ),
        (
            "gapless_unix_clients_accepted_total",
            "Connections the unix socket accepted.",
            Kind::Counter,
            UnixCounters::clients_accepted,
        ),
        (
            "gapless_unix_cut_offs_total",
            "Clients cut off: their queue overflowed, or they took nothing while replaying.",
            Kind::Counter,
            UnixCounters::cut_offs,
        ),
        (
            "gapless_unix_resumed_total",
            "Clients that resumed with a resume request.",
            Kind::Counter,
            UnixCounters::resumed,
        ),
        (
            "gapless_unix_refused_total",
            "Connections closed at once: not a resume request, or no socket setup or writer thread.",
            Kind::Counter,
            UnixCounters::refused,
        ),
        (
            "gapless_unix_replayed_events_total",
            "Events sent to clients from the replay history.",
            Kind::Counter,
            UnixCounters::events_replayed,
        ),
    ];
    let entries: Vec<(&str, &UnixCounters)> = sockets
        .iter()
        .map(|(path, counters)| (path.as_str(), &**counters))
        .collect();
    labelled_families(&series, "socket", &entries)
}

fn nats_families(sinks: &[(String, Arc<NatsCounters>)]) -> Vec<Family> {
    if sinks.is_empty() {
        return Vec::new();
    }
    let series: [LabelledSeries<NatsCounters>; 9] = [
        (
            "gapless_nats_published_total",
            "Publishes sent to JetStream for the first time.",
            Kind::Counter,
            NatsCounters::published,
        ),
        (
            "gapless_nats_acked_total",
            "Publishes JetStream acknowledged, stored or dropped as a copy.",
            Kind::Counter,
            NatsCounters::acked,
        ),
        (
            "gapless_nats_duplicates_total",
            "Acknowledgements saying JetStream already had the message.",
            Kind::Counter,
            NatsCounters::duplicates,
        ),
        (
            "gapless_nats_retries_total",
            "Publishes sent again after a failure or a missing acknowledgement.",
            Kind::Counter,
            NatsCounters::retries,
        ),
        (
            "gapless_nats_failures_total",
            "Publishes that failed or were not acknowledged in time.",
            Kind::Counter,
            NatsCounters::failures,
        ),
        (
            "gapless_nats_overruns_total",
            "Overrun markers published: events the sink's queue lost while JetStream was slow or away.",
            Kind::Counter,
            NatsCounters::overruns,
        ),
        (
            "gapless_nats_connects_total",
            "Connections made to a NATS server, the first and every reconnection.",
            Kind::Counter,
            NatsCounters::connects,
        ),
        (
            "gapless_nats_connected",
            "1 while the sink is connected to a NATS server.",
            Kind::Gauge,
            NatsCounters::connected,
        ),
        (
            "gapless_nats_pending",
            "Publishes sent and not yet acknowledged.",
            Kind::Gauge,
            NatsCounters::pending,
        ),
    ];
    let entries: Vec<(&str, &NatsCounters)> = sinks
        .iter()
        .map(|(name, counters)| (name.as_str(), &**counters))
        .collect();
    let mut families = labelled_families(&series, "sink", &entries);
    let mut latency = Family::new(
        "gapless_nats_publish_seconds",
        "Time from sending a publish to JetStream's acknowledgement.",
        Kind::Histogram,
    );
    for (name, counters) in sinks {
        latency.push(
            vec![("sink", name.clone())],
            histogram(&counters.latency().snapshot(), LATENCY_POWS),
        );
    }
    families.push(latency);
    families
}

fn recovery_families(sources: &[(String, Arc<RecoveryCounters>)]) -> Vec<Family> {
    if sources.is_empty() {
        return Vec::new();
    }
    let series: [LabelledSeries<RecoveryCounters>; 8] = [
        (
            "gapless_jetstream_recovery_requests_total",
            "Re-requests sent to JetStream as a re-request server.",
            Kind::Counter,
            RecoveryCounters::requests,
        ),
        (
            "gapless_jetstream_recovery_answers_total",
            "Re-requests answered from JetStream.",
            Kind::Counter,
            RecoveryCounters::answers,
        ),
        (
            "gapless_jetstream_recovery_messages_total",
            "Messages read back from JetStream in answers.",
            Kind::Counter,
            RecoveryCounters::messages,
        ),
        (
            "gapless_jetstream_recovery_unanswered_total",
            "Re-requests not answered: JetStream held no copy of their first message.",
            Kind::Counter,
            RecoveryCounters::unanswered,
        ),
        (
            "gapless_jetstream_recovery_not_yet_total",
            "Re-requests answered that the stream does not hold their first message yet.",
            Kind::Counter,
            RecoveryCounters::not_yet,
        ),
        (
            "gapless_jetstream_recovery_refused_total",
            "Datagrams on a JetStream recovery socket that were not re-requests.",
            Kind::Counter,
            RecoveryCounters::refused,
        ),
        (
            "gapless_jetstream_recovery_failures_total",
            "Connections, searches and reads of JetStream that failed or ran past their deadline.",
            Kind::Counter,
            RecoveryCounters::failures,
        ),
        (
            "gapless_jetstream_recovery_connected",
            "1 while the JetStream recovery source is connected to a NATS server.",
            Kind::Gauge,
            RecoveryCounters::connected,
        ),
    ];
    let entries: Vec<(&str, &RecoveryCounters)> = sources
        .iter()
        .map(|(name, counters)| (name.as_str(), &**counters))
        .collect();
    labelled_families(&series, "sink", &entries)
}

fn histogram(snapshot: &HistogramSnapshot, (lo, hi): (u32, u32)) -> Value {
    Value::Histogram {
        buckets: snapshot.prometheus_buckets(lo, hi),
        sum: snapshot.sum_ns() as f64 / 1e9,
        count: snapshot.count(),
    }
}

/// A label value with `\`, `"` and line feeds escaped, as the text format
/// requires (the encoder writes values as given).
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
