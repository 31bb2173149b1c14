//! The rx thread's side of delivery: every consumer event goes into each consumer's
//! lock-free queue, and never waits for any of them.

use std::sync::Arc;

use crate::metrics::StreamMetrics;
use crate::publish::run::MessageRun;
use crate::publish::{Event, Producer, Pushed};
use crate::sinks::shm::ShmSink;
use crate::venue::Emit;

/// Consumer queues fed by the rx thread, and what it measured while feeding them.
pub struct Fanout {
    producers: Vec<Producer>,
    /// Shared-memory rings, written in place: they never drop an event.
    rings: Vec<ShmSink>,
    /// Per-stream metrics (hand-off latency), by consumer stream id.
    stream_metrics: Vec<Arc<StreamMetrics>>,
    /// Wall-clock nanoseconds of the current batch, for hand-off latency.
    now_realtime_ns: u64,
    /// Messages and frames handed off.
    pub delivered: u64,
    /// Events a consumer queue had no room for (each consumer sees an overrun marker).
    pub dropped: u64,
}

impl Fanout {
    /// Feeds `producers`.
    pub fn new(producers: Vec<Producer>) -> Self {
        Self {
            producers,
            rings: Vec::new(),
            stream_metrics: Vec::new(),
            now_realtime_ns: 0,
            delivered: 0,
            dropped: 0,
        }
    }

    /// Also records each stream's hand-off latency into its metrics (by stream id).
    pub fn with_metrics(mut self, stream_metrics: Vec<Arc<StreamMetrics>>) -> Self {
        self.stream_metrics = stream_metrics;
        self
    }

    /// Also writes every event into these shared-memory rings.
    pub fn with_rings(mut self, rings: Vec<ShmSink>) -> Self {
        self.rings = rings;
        self
    }

    /// Sets the wall-clock time used for the latency of what is handed off next.
    pub fn set_now(&mut self, realtime_ns: u64) {
        self.now_realtime_ns = realtime_ns;
        self.publish_ring_stats();
    }

    /// Publishes each ring's counters for the metrics exporter.
    fn publish_ring_stats(&mut self) {
        for ring in &mut self.rings {
            ring.publish_stats();
        }
    }

    /// Writes pending overrun markers where room allows, and publishes the rings' counters
    /// (call when idle).
    pub fn flush_overruns(&mut self) {
        self.publish_ring_stats();
        for p in &mut self.producers {
            p.flush_overrun();
        }
    }

    /// Records the hand-off latency of `count` messages of `stream` received at
    /// `recv_ns` (0: unknown, nothing recorded).
    fn record_handoff(&self, stream: u16, recv_ns: u64, count: u64) {
        if recv_ns > 0 {
            let latency = self.now_realtime_ns.saturating_sub(recv_ns).max(1);
            if let Some(m) = self.stream_metrics.get(usize::from(stream)) {
                m.record_handoff_n(latency, count);
            }
        }
    }

    /// The consumer queues.
    pub fn producers(&self) -> &[Producer] {
        &self.producers
    }
}

impl Emit for Fanout {
    fn emit(&mut self, event: &Event<'_>) {
        if let Event::Message {
            recv_ns,
            snapshot: false,
            ..
        }
        | Event::Range { recv_ns, .. } = *event
        {
            self.delivered += 1;
            self.record_handoff(event.stream(), recv_ns, 1);
        }
        for ring in &mut self.rings {
            ring.write(event);
        }
        for p in &mut self.producers {
            if p.push(event) == Pushed::Dropped {
                self.dropped += 1;
            }
        }
    }

    /// One record per consumer for the whole run; its messages share one receive time,
    /// so the hand-off latency is recorded once, counted for every message.
    fn emit_run(&mut self, run: &MessageRun<'_>) {
        let count = u64::from(run.count());
        self.delivered += count;
        self.record_handoff(run.stream(), run.recv_ns(), count);
        for ring in &mut self.rings {
            ring.write_run(run);
        }
        for p in &mut self.producers {
            // A run longer than a queue goes into it message by message, and only some
            // may be dropped: count what the queue counted.
            let before = p.dropped_events();
            let _ = p.push_run(run);
            self.dropped += p.dropped_events() - before;
        }
    }
}
