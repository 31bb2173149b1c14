//! The reading end of a [`channel`](super::queue::channel).
//!
//! A record is decoded in place when it lies in one piece of the ring. One
//! that wraps past the end is copied into a scratch buffer allocated once,
//! at the ring's capacity, so the closure always sees a contiguous payload
//! and popping never allocates.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use rtrb::chunks::ChunkError;

use crate::publish::event::Event;
use crate::publish::queue::RECORD_PREFIX_LEN;
use crate::publish::stats::{ConsumerCounts, QueueStats, as_u64};

/// The reading end, owned by one consumer.
pub struct Consumer {
    ring: rtrb::Consumer<u8>,
    scratch: Box<[u8]>,
    capacity: usize,
    counts: ConsumerCounts,
    stats: Arc<QueueStats>,
}

impl Consumer {
    /// The reading end of `ring`, with its scratch buffer.
    pub(crate) fn new(ring: rtrb::Consumer<u8>, capacity: usize, stats: Arc<QueueStats>) -> Self {
        Self {
            ring,
            scratch: vec![0; capacity].into_boxed_slice(),
            capacity,
            counts: ConsumerCounts::default(),
            stats,
        }
    }

    /// Takes the oldest event and lends it to `f`; `None` when the queue is
    /// empty.
    ///
    /// A record that does not decode (only possible if memory is corrupted)
    /// is skipped and counted in [`QueueStats::discarded`].
    pub fn pop<R>(&mut self, f: impl FnOnce(Event<'_>) -> R) -> Option<R> {
        loop {
            let body_len = match self.ring.read_chunk(RECORD_PREFIX_LEN) {
                Ok(chunk) => {
                    let (head, tail) = chunk.as_slices();
                    let mut prefix = [0u8; RECORD_PREFIX_LEN];
                    contiguous(head, tail, 0, &mut prefix)
                        .and_then(|bytes| bytes.first_chunk::<RECORD_PREFIX_LEN>())
                        .map(|len| u32::from_le_bytes(*len))
                }
                Err(ChunkError::TooFewSlots(0)) => return None,
                Err(ChunkError::TooFewSlots(_)) => None,
            };
            let record_len = body_len
                .and_then(|len| usize::try_from(len).ok())
                .and_then(|len| len.checked_add(RECORD_PREFIX_LEN))
                .filter(|&len| len <= self.capacity);
            let Some(Ok(chunk)) = record_len.map(|len| self.ring.read_chunk(len)) else {
                self.discard_all();
                return None;
            };
            let record_len = chunk.len();
            let (head, tail) = chunk.as_slices();
            let decoded =
                contiguous(head, tail, RECORD_PREFIX_LEN, &mut self.scratch).and_then(|body| {
                    match Event::decode(body) {
                        Ok((event, used)) if used == body.len() => Some(event),
                        _ => None,
                    }
                });
            let Some(event) = decoded else {
                chunk.commit_all();
                self.counts.bytes_read += as_u64(record_len);
                self.counts.discarded += 1;
                self.stats.store_consumer(&self.counts);
                continue;
            };
            let output = f(event);
            chunk.commit_all();
            self.counts.bytes_read += as_u64(record_len);
            self.counts.popped += 1;
            self.stats.store_consumer(&self.counts);
            return Some(output);
        }
    }

    /// True once the producer is gone. Every record it wrote is then visible
    /// to [`Consumer::pop`], so a consumer drains until `pop` returns `None`
    /// after this returned true.
    pub fn is_abandoned(&self) -> bool {
        let abandoned = self.ring.is_abandoned();
        if abandoned {
            // Pairs with the release in the producer's drop, as rtrb asks.
            fence(Ordering::Acquire);
        }
        abandoned
    }

    /// True when no record is waiting.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Bytes waiting to be read.
    pub fn available_bytes(&self) -> usize {
        self.ring.slots()
    }

    /// Size of the ring in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The queue's counters.
    pub fn stats(&self) -> &Arc<QueueStats> {
        &self.stats
    }

    /// Throws away everything waiting after a record that cannot be framed.
    fn discard_all(&mut self) {
        let waiting = self.ring.slots();
        if let Ok(chunk) = self.ring.read_chunk(waiting) {
            chunk.commit_all();
        }
        self.counts.bytes_read += as_u64(waiting);
        self.counts.discarded += 1;
        self.stats.store_consumer(&self.counts);
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity)
            .field("available_bytes", &self.ring.slots())
            .finish_non_exhaustive()
    }
}

/// Bytes `skip..` of `head` followed by `tail`: borrowed from `head` when
/// they lie in it, copied into `scratch` when they wrap. `None` when
/// `scratch` is too small.
fn contiguous<'s>(
    head: &'s [u8],
    tail: &'s [u8],
    skip: usize,
    scratch: &'s mut [u8],
) -> Option<&'s [u8]> {
    if tail.is_empty() {
        return head.get(skip..);
    }
    let (first, second) = match head.get(skip..) {
        Some(rest) => (rest, tail),
        None => (&[][..], tail.get(skip.checked_sub(head.len())?..)?),
    };
    let dst = scratch.get_mut(..first.len() + second.len())?;
    let (a, b) = dst.split_at_mut(first.len());
    a.copy_from_slice(first);
    b.copy_from_slice(second);
    Some(dst)
}
