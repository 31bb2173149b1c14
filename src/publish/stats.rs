//! Queue counters a metrics thread can read while the queue runs.
//!
//! Each side keeps its counters in plain fields and stores them into
//! [`QueueStats`] with `Relaxed` ordering after every call, so updating
//! costs a few plain stores and no read-modify-write. The producer's and
//! the consumer's counters sit on separate cache lines so neither side
//! slows the other. Readers see each counter's latest value, not a
//! consistent cut across counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one queue, shared by its producer, its consumer and any
/// metrics reader through an `Arc`.
#[derive(Debug, Default)]
pub struct QueueStats {
    capacity_bytes: u64,
    producer: ProducerSide,
    consumer: ConsumerSide,
}

/// Counters only the producer writes.
#[derive(Debug, Default)]
#[repr(align(128))]
struct ProducerSide {
    pushed: AtomicU64,
    dropped: AtomicU64,
    overrun_markers: AtomicU64,
    bytes_written: AtomicU64,
}

/// Counters only the consumer writes.
#[derive(Debug, Default)]
#[repr(align(128))]
struct ConsumerSide {
    popped: AtomicU64,
    discarded: AtomicU64,
    bytes_read: AtomicU64,
}

/// A copy of every counter, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    /// Size of the ring in bytes.
    pub capacity_bytes: u64,
    /// Events the producer wrote (overrun markers not included).
    pub pushed: u64,
    /// Events the producer dropped for lack of room.
    pub dropped: u64,
    /// Overrun markers the producer wrote.
    pub overrun_markers: u64,
    /// Bytes in the ring: written by the producer, not yet read.
    pub fill_bytes: u64,
    /// Events the consumer received, overrun markers included.
    pub popped: u64,
    /// Records the consumer threw away because they did not decode.
    pub discarded: u64,
}

/// Producer counters as kept in the producer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProducerCounts {
    pub(crate) pushed: u64,
    pub(crate) dropped: u64,
    pub(crate) overrun_markers: u64,
    pub(crate) bytes_written: u64,
}

/// Consumer counters as kept in the consumer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ConsumerCounts {
    pub(crate) popped: u64,
    pub(crate) discarded: u64,
    pub(crate) bytes_read: u64,
}

impl QueueStats {
    /// Counters for a ring of `capacity_bytes`.
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        Self {
            capacity_bytes: as_u64(capacity_bytes),
            ..Self::default()
        }
    }

    /// Size of the ring in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Events the producer wrote (overrun markers not included).
    pub fn pushed(&self) -> u64 {
        self.producer.pushed.load(Ordering::Relaxed)
    }

    /// Events the producer dropped for lack of room.
    pub fn dropped(&self) -> u64 {
        self.producer.dropped.load(Ordering::Relaxed)
    }

    /// Overrun markers the producer wrote.
    pub fn overrun_markers(&self) -> u64 {
        self.producer.overrun_markers.load(Ordering::Relaxed)
    }

    /// Bytes in the ring: written by the producer and not yet read by the
    /// consumer, as of their latest calls.
    pub fn fill_bytes(&self) -> u64 {
        let read = self.consumer.bytes_read.load(Ordering::Relaxed);
        let written = self.producer.bytes_written.load(Ordering::Relaxed);
        written.saturating_sub(read).min(self.capacity_bytes)
    }

    /// Events the consumer received, overrun markers included.
    pub fn popped(&self) -> u64 {
        self.consumer.popped.load(Ordering::Relaxed)
    }

    /// Records the consumer threw away because they did not decode (always
    /// 0 unless memory is corrupted).
    pub fn discarded(&self) -> u64 {
        self.consumer.discarded.load(Ordering::Relaxed)
    }

    /// Every counter at once.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            capacity_bytes: self.capacity_bytes,
            pushed: self.pushed(),
            dropped: self.dropped(),
            overrun_markers: self.overrun_markers(),
            fill_bytes: self.fill_bytes(),
            popped: self.popped(),
            discarded: self.discarded(),
        }
    }

    /// Publishes the producer's counters.
    pub(crate) fn store_producer(&self, counts: &ProducerCounts) {
        let side = &self.producer;
        side.pushed.store(counts.pushed, Ordering::Relaxed);
        side.dropped.store(counts.dropped, Ordering::Relaxed);
        side.overrun_markers
            .store(counts.overrun_markers, Ordering::Relaxed);
        side.bytes_written
            .store(counts.bytes_written, Ordering::Relaxed);
    }

    /// Publishes the consumer's counters.
    pub(crate) fn store_consumer(&self, counts: &ConsumerCounts) {
        let side = &self.consumer;
        side.popped.store(counts.popped, Ordering::Relaxed);
        side.discarded.store(counts.discarded, Ordering::Relaxed);
        side.bytes_read.store(counts.bytes_read, Ordering::Relaxed);
    }
}

/// A byte count as a counter value.
pub(crate) fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_is_written_minus_read() {
        let stats = QueueStats::new(100);
        stats.store_producer(&ProducerCounts {
            pushed: 3,
            dropped: 1,
            overrun_markers: 1,
            bytes_written: 90,
        });
        stats.store_consumer(&ConsumerCounts {
            popped: 2,
            discarded: 0,
            bytes_read: 60,
        });
        assert_eq!(
            stats.snapshot(),
            StatsSnapshot {
                capacity_bytes: 100,
                pushed: 3,
                dropped: 1,
                overrun_markers: 1,
                fill_bytes: 30,
                popped: 2,
                discarded: 0,
            }
        );
    }

    #[test]
    fn fill_never_goes_negative() {
        let stats = QueueStats::new(100);
        stats.store_consumer(&ConsumerCounts {
            popped: 1,
            discarded: 0,
            bytes_read: 10,
        });
        assert_eq!(stats.fill_bytes(), 0);
    }
}
