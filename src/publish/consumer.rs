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
use crate::publish::run::{RUN_HEADER_LEN, RUN_TAG, RunHeader, block_at};
use crate::publish::stats::{ConsumerCounts, QueueStats, as_u64};

/// The reading end, owned by one consumer.
pub struct Consumer {
    ring: rtrb::Consumer<u8>,
    scratch: Box<[u8]>,
    capacity: usize,
    counts: ConsumerCounts,
    stats: Arc<QueueStats>,
    /// The run record being lent out, message by message.
    run: Option<RunCursor>,
}

/// Where the consumer is inside a run record that is still in the ring.
#[derive(Debug, Clone, Copy)]
struct RunCursor {
    header: RunHeader,
    /// Length of the whole record, prefix included.
    record_len: usize,
    /// Offset of the next block in the record's body.
    offset: usize,
    /// Sequence of the next message.
    next: u64,
    /// Messages not yet lent.
    remaining: u32,
    /// The record wraps the ring's end, so its body is in the scratch buffer.
    wrapped: bool,
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
            run: None,
        }
    }

    /// Takes the oldest event and lends it to `f`; `None` when the queue is
    /// empty.
    ///
    /// A [run](crate::publish::run) record is lent out one
    /// [`Event::Message`] a call, and leaves the ring with its last message.
    /// A record that does not decode (only possible if memory is corrupted)
    /// is skipped and counted in [`QueueStats::discarded`]; a corrupted run is
    /// found block by block, so messages before the damage are still lent.
    pub fn pop<R>(&mut self, f: impl FnOnce(Event<'_>) -> R) -> Option<R> {
        let mut f = f;
        loop {
            if let Some(run) = self.run {
                match self.pop_run(run, f) {
                    Ok(output) => return Some(output),
                    // The run's record was unreadable and thrown away: go on with the next.
                    Err(back) => f = back,
                }
                continue;
            }
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
            let wrapped = !tail.is_empty();
            let body = contiguous(head, tail, RECORD_PREFIX_LEN, &mut self.scratch);
            if let Some(run) = body
                .filter(|body| body.first() == Some(&RUN_TAG))
                .and_then(RunHeader::read)
            {
                // Leave the record in the ring (a wrapped one stays copied in the scratch
                // buffer) and lend its messages from the next turn of the loop on.
                self.run = Some(RunCursor {
                    header: run,
                    record_len,
                    offset: RUN_HEADER_LEN,
                    next: run.first,
                    remaining: run.count,
                    wrapped,
                });
                continue;
            }
            let decoded = body.and_then(|body| match Event::decode(body) {
                Ok((event, used)) if used == body.len() => Some(event),
                _ => None,
            });
            let Some(event) = decoded else {
                chunk.commit_all();
                self.count_discarded(record_len);
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

    /// Lends the next message of the run being read. `Err` hands `f` back when the
    /// run's record turned out unreadable (it is then discarded).
    fn pop_run<R, F: FnOnce(Event<'_>) -> R>(&mut self, run: RunCursor, f: F) -> Result<R, F> {
        let Ok(chunk) = self.ring.read_chunk(run.record_len) else {
            self.run = None;
            self.discard_all();
            return Err(f);
        };
        let body = if run.wrapped {
            self.scratch.get(..run.record_len - RECORD_PREFIX_LEN)
        } else {
            chunk.as_slices().0.get(RECORD_PREFIX_LEN..)
        };
        let block = body.and_then(|body| block_at(body, run.offset, run.header.lengths));
        let Some((payload, end)) = block else {
            chunk.commit_all();
            self.run = None;
            self.count_discarded(run.record_len);
            return Err(f);
        };
        let output = f(Event::Message {
            stream: run.header.stream,
            seq: run.next,
            recv_ns: run.header.recv_ns,
            snapshot: false,
            payload,
        });
        let remaining = run.remaining - 1;
        if remaining == 0 {
            chunk.commit_all();
            self.counts.bytes_read += as_u64(run.record_len);
            self.run = None;
        } else {
            self.run = Some(RunCursor {
                offset: end,
                next: run.next.wrapping_add(1),
                remaining,
                ..run
            });
        }
        self.counts.popped += 1;
        self.stats.store_consumer(&self.counts);
        Ok(output)
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

    /// True when no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.run.is_none() && self.ring.is_empty()
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
        self.count_discarded(waiting);
    }

    /// Counts `bytes` thrown away as one discarded record.
    fn count_discarded(&mut self, bytes: usize) {
        self.counts.bytes_read += as_u64(bytes);
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
