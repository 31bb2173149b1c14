//! Metrics: plain atomics written by the rx thread, read and exported in
//! the Prometheus (OpenMetrics) text format by a thread of their own.
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
//! Nothing is computed until a scrape: the [`Exporter`]'s thread walks the
//! [`Registry`] with [`MetricsCollector`], a `prometheus-client`
//! [`Collector`], and turns the atomics into series named in base units,
//! counters ending in `_total`, every per-stream series labelled `venue` and
//! `stream`, every per-consumer one labelled `consumer`.
//!
//! ```
//! use std::sync::Arc;
//!
//! use gapless::publish::StreamState;
//! use gapless::metrics::{Registry, StreamSample};
//!
//! let registry = Arc::new(Registry::new());
//! let itch = registry.add_stream("nasdaq", "itch-a");
//! // On the rx thread, once a cycle:
//! itch.publish(&StreamSample { messages_received: 3, state: StreamState::Synced, ..StreamSample::default() });
//! itch.record_handoff(1_500);
//! registry.process().mark_alive_now();
//!
//! let text = registry.encode()?;
//! assert!(text.contains(r#"gapless_messages_received_total{venue="nasdaq",stream="itch-a"} 3"#));
//! assert!(text.contains(r#"gapless_trading_authorized{venue="nasdaq",stream="itch-a"} 1"#));
//! # Ok::<(), std::fmt::Error>(())
//! ```

pub mod counters;
pub mod exporter;
pub mod histogram;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::publish::{QueueStats, StreamState};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

pub use counters::{ProcessMetrics, SERIES, SeriesKind, StreamMetrics, StreamSample, unix_now_ns};
pub use exporter::{Exporter, ExporterError, ExporterHandle};
pub use histogram::{AtomicHistogram, HistogramSnapshot, LatencySummary};

/// How long the rx loop may go without marking itself alive before
/// `/healthz` reports it unhealthy, unless set otherwise.
pub const DEFAULT_ALIVE_THRESHOLD: Duration = Duration::from_secs(5);

/// Exported bucket bounds of latency histograms: 2^7 ns (128 ns) to 2^30 ns
/// (about 1.07 s).
const LATENCY_POWS: (u32, u32) = (7, 30);
/// Exported bucket bounds of snapshot durations: 2^20 ns (about 1 ms) to
/// 2^39 ns (about 9 minutes).
const SNAPSHOT_POWS: (u32, u32) = (20, 39);

/// Everything the exporter reads: streams with their labels, consumer
/// queues, the rx cycle histogram and process gauges.
///
/// Registration takes a lock the exporter also takes while encoding; the
/// rx thread never touches the registry, only the `Arc`s it hands out.
#[derive(Debug)]
pub struct Registry {
    streams: Mutex<Vec<StreamEntry>>,
    consumers: Mutex<Vec<ConsumerEntry>>,
    rx_cycle: Arc<AtomicHistogram>,
    process: Arc<ProcessMetrics>,
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
            consumers: Mutex::new(Vec::new()),
            rx_cycle: Arc::new(AtomicHistogram::new()),
            process: Arc::new(ProcessMetrics::new()),
            alive_threshold: DEFAULT_ALIVE_THRESHOLD,
        }
    }

    /// Sets how long the rx loop may stay silent and still be healthy.
    pub fn with_alive_threshold(mut self, threshold: Duration) -> Self {
        self.alive_threshold = threshold;
        self
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

    /// Registers a consumer queue, by name, for depth and overrun series.
    pub fn add_consumer(&self, name: &str, stats: Arc<QueueStats>) {
        lock(&self.consumers).push(ConsumerEntry {
            name: escape_label(name),
            stats,
        });
    }

    /// The rx loop's cycle time histogram (nanoseconds a cycle).
    pub fn rx_cycle(&self) -> &Arc<AtomicHistogram> {
        &self.rx_cycle
    }

    /// Process-level gauges, among them the watchdog timestamp.
    pub fn process(&self) -> &Arc<ProcessMetrics> {
        &self.process
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

    /// The full exposition, as served at `/metrics`.
    ///
    /// # Errors
    ///
    /// Only if formatting fails, which writing to a `String` does not.
    pub fn encode(self: &Arc<Self>) -> Result<String, fmt::Error> {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(MetricsCollector::new(Arc::clone(self))));
        let mut text = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

/// A `prometheus-client` [`Collector`] that reads a [`Registry`] at each
/// scrape. Register it with any `prometheus_client` registry.
#[derive(Debug, Clone)]
pub struct MetricsCollector {
    registry: Arc<Registry>,
}

impl MetricsCollector {
    /// A collector reading `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        Self { registry }
    }
}

impl Collector for MetricsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let registry = &self.registry;
        encode_streams(&mut encoder, &lock(&registry.streams))?;
        encode_consumers(&mut encoder, &lock(&registry.consumers))?;

        let cycle = registry.rx_cycle.snapshot();
        let mut metric = encoder.encode_descriptor(
            "gapless_rx_cycle_seconds",
            "Duration of one rx loop cycle.",
            None,
            MetricType::Histogram,
        )?;
        encode_histogram(&mut metric, &cycle, LATENCY_POWS)?;

        let process = &registry.process;
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
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            metric.encode_gauge(&(ns as f64 / 1e9))?;
        }
        Ok(())
    }
}

fn encode_streams(encoder: &mut DescriptorEncoder, streams: &[StreamEntry]) -> fmt::Result {
    let samples: Vec<StreamSample> = streams.iter().map(|e| e.metrics.read()).collect();
    let labelled = || {
        streams.iter().zip(&samples).map(|(e, s)| {
            (
                [("venue", e.venue.as_str()), ("stream", e.stream.as_str())],
                s,
            )
        })
    };
    for (index, spec) in SERIES.iter().enumerate() {
        let kind = match spec.kind {
            SeriesKind::Counter => MetricType::Counter,
            SeriesKind::Gauge => MetricType::Gauge,
        };
        let mut metric = encoder.encode_descriptor(spec.name, spec.help, None, kind)?;
        for (labels, sample) in labelled() {
            let value = sample.values().get(index).copied().unwrap_or(0);
            let mut family = metric.encode_family(&labels)?;
            match spec.kind {
                SeriesKind::Counter => ConstCounter::new(value).encode(family)?,
                SeriesKind::Gauge => family.encode_gauge(&value)?,
            }
        }
    }

    let mut metric = encoder.encode_descriptor(
        "gapless_stream_state",
        "1 for the stream's current state, 0 for the others.",
        None,
        MetricType::Gauge,
    )?;
    for (labels, sample) in labelled() {
        for state in StreamState::ALL {
            let [venue, stream] = labels;
            let labels = [venue, stream, ("state", state.as_str())];
            let value = u64::from(sample.state == state);
            metric.encode_family(&labels)?.encode_gauge(&value)?;
        }
    }

    let mut metric = encoder.encode_descriptor(
        "gapless_trading_authorized",
        "1 while the stream is synced, the only state that authorises trading.",
        None,
        MetricType::Gauge,
    )?;
    for (labels, sample) in labelled() {
        let value = u64::from(sample.state == StreamState::Synced);
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }

    type Pick = fn(&StreamMetrics) -> &AtomicHistogram;
    let histograms: [(&str, &str, Pick, (u32, u32)); 2] = [
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
    for (name, help, histogram, pows) in histograms {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (entry, (labels, _)) in streams.iter().zip(labelled()) {
            let snapshot = histogram(&entry.metrics).snapshot();
            encode_histogram(&mut metric.encode_family(&labels)?, &snapshot, pows)?;
        }
    }
    Ok(())
}

fn encode_consumers(encoder: &mut DescriptorEncoder, consumers: &[ConsumerEntry]) -> fmt::Result {
    type Read = fn(&QueueStats) -> u64;
    let series: [(&str, &str, MetricType, Read); 4] = [
        (
            "gapless_consumer_queue_depth_bytes",
            "Bytes waiting in the consumer's queue.",
            MetricType::Gauge,
            QueueStats::fill_bytes,
        ),
        (
            "gapless_consumer_queue_capacity_bytes",
            "Size of the consumer's queue.",
            MetricType::Gauge,
            QueueStats::capacity_bytes,
        ),
        (
            "gapless_consumer_events",
            "Events written to the consumer's queue.",
            MetricType::Counter,
            QueueStats::pushed,
        ),
        (
            "gapless_consumer_overruns",
            "Events the consumer lost because its queue was full.",
            MetricType::Counter,
            QueueStats::dropped,
        ),
    ];
    for (name, help, kind, read) in series {
        let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
        for entry in consumers {
            let labels = [("consumer", entry.name.as_str())];
            let value = read(&entry.stats);
            let mut family = metric.encode_family(&labels)?;
            match kind {
                MetricType::Counter => ConstCounter::new(value).encode(family)?,
                _ => family.encode_gauge(&value)?,
            }
        }
    }
    Ok(())
}

fn encode_histogram(
    metric: &mut prometheus_client::encoding::MetricEncoder,
    snapshot: &HistogramSnapshot,
    (lo, hi): (u32, u32),
) -> fmt::Result {
    let buckets = snapshot.prometheus_buckets(lo, hi);
    let sum = snapshot.sum_ns() as f64 / 1e9;
    metric.encode_histogram::<NoLabelSet>(sum, snapshot.count(), &buckets, None)
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
