//! The series of one redundant line of a stream, labelled `venue`, `stream` and `line`:
//! plain atomics the rx thread stores a line's [`LineStats`] into, read at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};

use super::exposition::{Family, Kind, Value};
use crate::venue::{LAG_BUCKETS, LagHistogram, LineStats};

/// One line's values, shared by the rx thread (writer) and the exporter.
#[derive(Debug, Default)]
pub struct LineMetrics {
    packets: AtomicU64,
    bytes: AtomicU64,
    wins: AtomicU64,
    arbitrated: AtomicU64,
    missed: AtomicU64,
    down: AtomicU64,
    downs: AtomicU64,
    filtered: AtomicU64,
    truncated: AtomicU64,
    inode: AtomicU64,
    lag: [AtomicU64; LAG_BUCKETS],
    lag_sum_ns: AtomicU64,
}

/// What the socket of a line counted beside the venue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineSocket {
    /// Datagrams dropped by the source filter.
    pub filtered: u64,
    /// Datagrams cut short by the receive buffer.
    pub truncated: u64,
    /// The socket's inode, by which its kernel drop count is found in `/proc/net/udp`
    /// (0: unknown).
    pub inode: u64,
}

impl LineMetrics {
    /// Stores `stats` and `socket`; plain `Relaxed` stores.
    pub fn publish(&self, stats: &LineStats, socket: LineSocket) {
        let store = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        store(&self.packets, stats.packets);
        store(&self.bytes, stats.bytes);
        store(&self.wins, stats.wins);
        store(&self.arbitrated, stats.arbitrated);
        store(&self.missed, stats.missed);
        store(&self.down, u64::from(stats.down));
        store(&self.downs, stats.downs);
        store(&self.filtered, socket.filtered);
        store(&self.truncated, socket.truncated);
        store(&self.inode, socket.inode);
        for (a, v) in self.lag.iter().zip(stats.lag.counts) {
            store(a, v);
        }
        store(&self.lag_sum_ns, stats.lag.sum_ns);
    }

    fn get(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }

    fn lag(&self) -> LagHistogram {
        let mut h = LagHistogram::default();
        for (c, a) in h.counts.iter_mut().zip(&self.lag) {
            *c = Self::get(a);
        }
        h.sum_ns = Self::get(&self.lag_sum_ns);
        h
    }
}

/// `(inode, drops)` of every UDP socket of this network namespace, from `/proc/net/udp`
/// (empty where it cannot be read).
fn udp_drops_by_inode() -> Vec<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|row| {
            let fields: Vec<&str> = row.split_whitespace().collect();
            let inode = fields.get(9)?.parse().ok()?;
            let drops = fields.last()?.parse().ok()?;
            Some((inode, drops))
        })
        .collect()
}

/// A registered line: its labels and values.
#[derive(Debug)]
pub(super) struct LineEntry {
    pub(super) venue: String,
    pub(super) stream: String,
    pub(super) line: String,
    pub(super) metrics: std::sync::Arc<LineMetrics>,
}

type Read = fn(&LineMetrics) -> u64;

/// Every line family, one sample per line.
pub(super) fn line_families(lines: &[LineEntry]) -> Vec<Family> {
    if lines.is_empty() {
        return Vec::new();
    }
    let series: [(&str, &str, Kind, Read); 9] = [
        (
            "gapless_line_packets_total",
            "Datagrams received on the line.",
            Kind::Counter,
            |m| LineMetrics::get(&m.packets),
        ),
        (
            "gapless_line_bytes_total",
            "Bytes received on the line.",
            Kind::Counter,
            |m| LineMetrics::get(&m.bytes),
        ),
        (
            "gapless_line_wins_total",
            "Data datagrams the line brought before any other line did.",
            Kind::Counter,
            |m| LineMetrics::get(&m.wins),
        ),
        (
            "gapless_line_arbitrated_messages_total",
            "Messages in the line's copies another line had brought first, discarded.",
            Kind::Counter,
            |m| LineMetrics::get(&m.arbitrated),
        ),
        (
            "gapless_line_missed_messages_total",
            "Messages the line skipped: taken from another line, recovered, or lost on all.",
            Kind::Counter,
            |m| LineMetrics::get(&m.missed),
        ),
        (
            "gapless_line_up",
            "0 while the line is silent and another line of its stream is live, else 1.",
            Kind::Gauge,
            |m| 1 - LineMetrics::get(&m.down).min(1),
        ),
        (
            "gapless_line_downs_total",
            "Times the line went down.",
            Kind::Counter,
            |m| LineMetrics::get(&m.downs),
        ),
        (
            "gapless_line_filtered_packets_total",
            "Datagrams of the line dropped by its source filter.",
            Kind::Counter,
            |m| LineMetrics::get(&m.filtered),
        ),
        (
            "gapless_line_truncated_packets_total",
            "Datagrams of the line cut short by the receive buffer and dropped.",
            Kind::Counter,
            |m| LineMetrics::get(&m.truncated),
        ),
    ];
    let labels = |e: &LineEntry| {
        vec![
            ("venue", e.venue.clone()),
            ("stream", e.stream.clone()),
            ("line", e.line.clone()),
        ]
    };
    let mut families: Vec<Family> = series
        .iter()
        .map(|&(name, help, kind, read)| {
            let mut family = Family::new(name, help, kind);
            for e in lines {
                family.push(labels(e), Value::Int(read(&e.metrics)));
            }
            family
        })
        .collect();
    // What the kernel dropped for each line's socket (its receive buffer full), read at
    // scrape time from the kernel's own table: nothing on the rx thread.
    let drops = udp_drops_by_inode();
    let mut kernel = Family::new(
        "gapless_line_kernel_drops_total",
        "Datagrams the kernel dropped for the line's socket because its receive buffer was full.",
        Kind::Counter,
    );
    for e in lines {
        let inode = LineMetrics::get(&e.metrics.inode);
        let dropped = drops
            .iter()
            .find(|(i, _)| *i == inode && inode != 0)
            .map_or(0, |(_, d)| *d);
        kernel.push(labels(e), Value::Int(dropped));
    }
    families.push(kernel);
    let mut lag = Family::new(
        "gapless_line_lag_seconds",
        "How far the line's copies of datagrams came behind the first copy, on another line.",
        Kind::Histogram,
    );
    for e in lines {
        let h = e.metrics.lag();
        let buckets = (0..LAG_BUCKETS)
            .map(|k| {
                (
                    LagHistogram::bound_secs(k),
                    h.counts.get(k).copied().unwrap_or(0),
                )
            })
            .collect();
        lag.push(
            labels(e),
            Value::Histogram {
                buckets,
                sum: h.sum_ns as f64 / 1e9,
                count: h.count(),
            },
        );
    }
    families.push(lag);
    families
}
