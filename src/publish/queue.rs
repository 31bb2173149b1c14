//! The bounded lock-free SPSC queue from the rx thread to one consumer.
//!
//! The queue is an [`rtrb`] ring of bytes carrying variable-length records,
//! each a u32 little-endian length and an [encoded event](super::event), or
//! a [run](super::run) of consecutive messages ([`Producer::push_run`]) that
//! the consumer receives one message at a time:
//!
//! ```text
//!              write position    read position
//!                    v                 v
//!   +----------------+-----------------+-----+-------+-----+-------+-----+---+
//!   | ...ent (wraps) |      free       | len | event | len | event | len | ev|
//!   +----------------+-----------------+-----+-------+-----+-------+-----+---+
//!     the newest record starts at the right end and wraps to the left
//! ```
//!
//! The producer writes each batch (pending overrun markers, then one record)
//! with a single commit, so the consumer only ever sees whole records.
//! [`Producer::push`] never blocks and never allocates: when the batch does
//! not fit, it drops the event and records the loss per stream (lowest and
//! highest sequence lost, events lost). The next push that finds room for
//! every pending marker plus its own record writes one [`Event::Overrun`]
//! per affected stream first, so a consumer always sees the marker before
//! anything that came after the loss. While no record is written, all
//! pushes in between are dropped, so each marker's range is exactly the
//! run of sequences its stream lost.
//!
//! [`Consumer::pop`] lends the event to a closure. A record that lies in
//! one piece is read in place; one that wraps is copied into a scratch
//! buffer allocated once, at the ring's capacity. A run leaves the ring with
//! its last message.

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rtrb::{CopyToUninit, RingBuffer};

pub use crate::publish::consumer::Consumer;
use crate::publish::event::{Event, MAX_HEADER_LEN, OVERRUN_LEN};
use crate::publish::overrun::LossLedger;
use crate::publish::run::{MessageRun, RUN_HEADER_LEN};
use crate::publish::stats::{ProducerCounts, QueueStats, as_u64};

/// Length of the length prefix of a record.
pub const RECORD_PREFIX_LEN: usize = 4;
/// Length of a record holding an [`Event::Overrun`] marker.
pub const OVERRUN_RECORD_LEN: usize = RECORD_PREFIX_LEN + OVERRUN_LEN;

/// Creates a queue of `capacity_bytes` bytes for events on streams
/// `0..streams`.
///
/// Beyond those bytes the ring keeps room for one overrun marker per stream
/// that only markers may use once the producer is dropped: a consumer still
/// learns of the last loss when the rx side goes away with its queue full.
/// Every buffer is allocated here; pushing and popping allocate nothing.
///
/// ```
/// use gapless::publish::{Event, Pushed, channel};
///
/// // Room for three 32-byte message records (4-byte payloads).
/// let (mut producer, mut consumer) = channel(100, 1);
/// let message = |seq| Event::Message {
///     stream: 0,
///     seq,
///     recv_ns: 0,
///     snapshot: false,
///     payload: b"abcd",
/// };
/// for seq in 1..=3 {
///     assert_eq!(producer.push(&message(seq)), Pushed::Written);
/// }
/// // The consumer is behind: the rx thread drops instead of waiting.
/// assert_eq!(producer.push(&message(4)), Pushed::Dropped);
///
/// let describe = |event: Event<'_>| match event {
///     Event::Message { seq, .. } => format!("message {seq}"),
///     Event::Overrun { from, to, events, .. } => format!("lost {from}..={to} ({events})"),
///     _ => String::from("other"),
/// };
/// let mut seen = Vec::new();
/// while let Some(line) = consumer.pop(describe) {
///     seen.push(line);
/// }
/// assert_eq!(producer.push(&message(5)), Pushed::Written);
/// while let Some(line) = consumer.pop(describe) {
///     seen.push(line);
/// }
/// assert_eq!(
///     seen,
///     ["message 1", "message 2", "message 3", "lost 4..=4 (1)", "message 5"]
/// );
/// assert_eq!(producer.stats().dropped(), 1);
/// ```
pub fn channel(capacity_bytes: usize, streams: usize) -> (Producer, Consumer) {
    let ledger = LossLedger::new(streams);
    let capacity = capacity_bytes.max(OVERRUN_RECORD_LEN);
    let reserve = ledger.streams().max(1) * OVERRUN_RECORD_LEN;
    let (ring_tx, ring_rx) = RingBuffer::new(capacity + reserve);
    let stats = Arc::new(QueueStats::new(capacity));
    let producer = Producer {
        ring: ring_tx,
        ledger,
        capacity,
        reserve,
        counts: ProducerCounts::default(),
        stats: Arc::clone(&stats),
        prefetched_to: 0,
    };
    (producer, Consumer::new(ring_rx, capacity, stats))
}

/// What [`Producer::push`] did with an event.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The event was written, after any pending overrun markers.
    Written,
    /// There was no room (or the record is larger than the queue): the
    /// event was dropped and the consumer will get an [`Event::Overrun`]
    /// covering it.
    Dropped,
    /// The event's stream is not below the queue's stream count: nothing
    /// was written or recorded.
    UnknownStream,
}

/// The writing end, owned by the rx thread.
pub struct Producer {
    ring: rtrb::Producer<u8>,
    ledger: LossLedger,
    capacity: usize,
    /// Ring bytes beyond `capacity`, kept free for the markers written on drop.
    reserve: usize,
    counts: ProducerCounts,
    stats: Arc<QueueStats>,
    /// Address up to which the ring was last prefetched (see `prefetch_ahead`).
    prefetched_to: usize,
}

impl Producer {
    /// Writes `event` if it fits with the pending overrun markers, and drops
    /// it otherwise. Never blocks, never allocates.
    #[inline]
    pub fn push(&mut self, event: &Event<'_>) -> Pushed {
        if !self.ledger.knows(event.stream()) {
            return Pushed::UnknownStream;
        }
        let record = Record::Event(event);
        let is_message = matches!(event, Event::Message { .. });
        let outcome = if self.write_message(event)
            || (!is_message && self.write_alone(record))
            || self.write_batch(self.ledger.pending(), Some(record), self.reserve)
        {
            self.counts.pushed += 1;
            Pushed::Written
        } else {
            self.ledger.record(event);
            self.counts.dropped += 1;
            Pushed::Dropped
        };
        self.publish_counts(outcome, 1);
        outcome
    }

    /// Writes a run of consecutive messages as one record, or drops the
    /// whole run (the consumer's overrun marker then spans all of it).
    /// The consumer pops the run as one [`Event::Message`] per message, so
    /// while the queue has room what it sees is what pushing each message
    /// would have given it. A run longer than the whole queue is pushed
    /// message by message instead; `Written` then means all of them were.
    /// Never blocks, never allocates.
    ///
    /// ```
    /// use gapless::publish::run::{BlockLengths, MessageRun};
    /// use gapless::publish::{Event, Pushed, channel};
    ///
    /// let (mut producer, mut consumer) = channel(1024, 1);
    /// let blocks = [0, 1, b'a', 0, 1, b'b'];
    /// let run = MessageRun::new(0, 7, 0, BlockLengths::BigEndian, &blocks, 2).expect("2 blocks");
    /// assert_eq!(producer.push_run(&run), Pushed::Written);
    /// let mut seen = Vec::new();
    /// while let Some((seq, payload)) = consumer.pop(|e| match e {
    ///     Event::Message { seq, payload, .. } => (seq, payload.to_vec()),
    ///     _ => (0, Vec::new()),
    /// }) {
    ///     seen.push((seq, payload));
    /// }
    /// assert_eq!(seen, [(7, b"a".to_vec()), (8, b"b".to_vec())]);
    /// ```
    pub fn push_run(&mut self, run: &MessageRun<'_>) -> Pushed {
        if !self.ledger.knows(run.stream()) {
            return Pushed::UnknownStream;
        }
        let events = u64::from(run.count());
        let record = Record::Run(run);
        if record.len().is_none_or(|len| len > self.capacity) {
            // A run longer than the whole ring could never be written: its messages go
            // one a record instead, as many as fit.
            return self.push_each(run);
        }
        let outcome = if run
            .record_head()
            .is_some_and(|head| self.write_in_one_piece(&head, run.blocks()))
            || self.write_batch(self.ledger.pending(), Some(record), self.reserve)
        {
            self.counts.pushed += events;
            Pushed::Written
        } else {
            self.ledger
                .record_span(run.stream(), run.first(), run.last(), events);
            self.counts.dropped += events;
            Pushed::Dropped
        };
        self.publish_counts(outcome, events);
        outcome
    }

    /// Pushes the messages of `run` one a record: `Written` when all were.
    fn push_each(&mut self, run: &MessageRun<'_>) -> Pushed {
        let mut outcome = Pushed::Written;
        for event in run.events() {
            if self.push(&event) != Pushed::Written {
                outcome = Pushed::Dropped;
            }
        }
        outcome
    }

    /// Events dropped so far for lack of room (each reported in an overrun marker).
    pub fn dropped_events(&self) -> u64 {
        self.counts.dropped
    }

    /// Counters reach the metrics thread about every 64 events, on every drop and when
    /// idle (`flush_overrun`), not on every push.
    #[inline]
    fn publish_counts(&mut self, outcome: Pushed, events: u64) {
        if outcome == Pushed::Dropped || self.counts.pushed % 64 < events {
            self.stats.store_producer(&self.counts);
        }
    }

    /// Writes as many pending overrun markers as fit now, oldest loss first,
    /// and returns how many it wrote. Call it when idle so a consumer learns
    /// of a loss without waiting for the next event.
    pub fn flush_overrun(&mut self) -> usize {
        let pending = self.ledger.pending();
        if pending == 0 {
            self.stats.store_producer(&self.counts);
            return 0;
        }
        self.flush_markers(pending, self.reserve)
    }

    /// Writes as many of the `pending` markers as fit, leaving `keep` bytes free (the
    /// reserve while the producer lives, nothing when it is dropped).
    fn flush_markers(&mut self, pending: usize, keep: usize) -> usize {
        let free = self.ring.slots().saturating_sub(keep);
        let fit = (free / OVERRUN_RECORD_LEN).min(pending);
        if fit == 0 || !self.write_batch(fit, None, keep) {
            return 0;
        }
        self.stats.store_producer(&self.counts);
        fit
    }

    /// True when [`Producer::push`] would write `event` now. Room only grows
    /// until the next push, so a caller that may wait (a replay tool, a
    /// test) can wait for this before pushing. Always false for an unknown
    /// stream or a record larger than the queue.
    pub fn would_fit(&self, event: &Event<'_>) -> bool {
        self.ledger.knows(event.stream())
            && self
                .batch_len(self.ledger.pending(), Some(Record::Event(event)))
                .is_some_and(|need| need + self.reserve <= self.ring.slots())
    }

    /// Number of streams with an overrun marker waiting to be written.
    pub fn pending_overruns(&self) -> usize {
        self.ledger.pending()
    }

    /// Size of the ring in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Size of the whole ring: the capacity and the room kept for markers.
    pub(crate) fn ring_len(&self) -> usize {
        self.capacity + self.reserve
    }

    /// Number of streams the queue carries (ids `0..streams`).
    pub fn streams(&self) -> usize {
        self.ledger.streams()
    }

    /// Bytes free for writing now.
    pub fn free_bytes(&self) -> usize {
        self.ring.slots().saturating_sub(self.reserve)
    }

    /// Bytes written and not yet read now.
    pub fn fill_bytes(&self) -> usize {
        (self.capacity + self.reserve).saturating_sub(self.ring.slots())
    }

    /// The queue's counters, to hand to a metrics thread.
    pub fn stats(&self) -> &Arc<QueueStats> {
        &self.stats
    }

    /// True once the consumer is gone.
    pub fn is_abandoned(&self) -> bool {
        self.ring.is_abandoned()
    }

    /// Bytes a batch of `markers` overrun markers and `event` takes; `None`
    /// when it can never fit.
    fn batch_len(&self, markers: usize, record: Option<Record<'_, '_>>) -> Option<usize> {
        let record = match record {
            Some(record) => record.len()?,
            None => 0,
        };
        let need = markers
            .checked_mul(OVERRUN_RECORD_LEN)?
            .checked_add(record)?;
        (need <= self.ring_len()).then_some(need)
    }

    /// A message alone in one piece of free ring, its head built at fixed offsets.
    #[inline]
    fn write_message(&mut self, event: &Event<'_>) -> bool {
        let Event::Message {
            stream,
            seq,
            recv_ns,
            snapshot,
            payload,
        } = *event
        else {
            return false;
        };
        Event::message_record_head(stream, seq, recv_ns, snapshot, payload.len())
            .is_some_and(|head| self.write_in_one_piece(&head, payload))
    }

    /// [`Producer::write_in_one_piece`] for any record: its head assembled first.
    #[inline]
    fn write_alone(&mut self, record: Record<'_, '_>) -> bool {
        record
            .parts()
            .is_some_and(|(head, body)| self.write_in_one_piece(head.as_slice(), body))
    }

    /// The hot path: writes `head` then `body` as one record when no marker waits and
    /// the ring has them in one piece; false, with nothing written, otherwise. Always
    /// inlined, so a head of constant length (a message's, a run's) is copied with a
    /// few moves; one of run-time length was a call, measured at half the time of a
    /// 30-byte message's hand-off.
    #[inline(always)]
    fn write_in_one_piece(&mut self, head: &[u8], body: &[u8]) -> bool {
        if self.ledger.pending() > 0 {
            return false;
        }
        let need = head.len() + body.len();
        let Ok(mut chunk) = self.ring.write_chunk_uninit(need + self.reserve) else {
            return false;
        };
        let (first, _) = chunk.as_mut_slices();
        let Some(record) = first.get_mut(..need) else {
            return false;
        };
        let (h, b) = record.split_at_mut(head.len());
        head.copy_to_uninit(h);
        body.copy_to_uninit(b);
        // SAFETY: the chunk's first `need` slots lie in its first piece, and every one of
        // them was just written.
        unsafe { chunk.commit(need) };
        if need >= PREFETCH_FROM_RECORD {
            self.prefetch_ahead();
        }
        self.counts.bytes_written += as_u64(need);
        true
    }

    /// Writes the `markers` oldest overrun markers and then `event` in one
    /// commit, leaving `keep` bytes free, or nothing; true when written.
    #[inline]
    fn write_batch(&mut self, markers: usize, record: Option<Record<'_, '_>>, keep: usize) -> bool {
        let Some(need) = self.batch_len(markers, record) else {
            return false;
        };
        // Uninitialised slots: every byte is copied in below, and the chunk is committed
        // only when the writer has filled its first `need` slots exactly (zero-filling
        // first cost as much as the copy itself in the hand-off benchmark).
        let Ok(mut chunk) = self.ring.write_chunk_uninit(need + keep) else {
            return false;
        };
        let (head, tail) = chunk.as_mut_slices();
        let in_head = head.len().min(need);
        let (head, _) = head.split_at_mut(in_head);
        let Some(tail) = tail.get_mut(..need - in_head) else {
            return false;
        };
        let mut writer = SplitWriter { head, tail };
        let mut written = true;
        for index in 0..markers {
            written &= self
                .ledger
                .marker(index)
                .is_some_and(|marker| put_record(&mut writer, Record::Event(&marker)));
        }
        if let Some(record) = record {
            written &= put_record(&mut writer, record);
        }
        if !written || !writer.is_full() {
            return false;
        }
        // SAFETY: `writer.is_full()` means `put` initialised every slot it was given: the
        // chunk's first `need` slots, which is what `commit(need)` requires.
        unsafe { chunk.commit(need) };
        if need >= PREFETCH_FROM_RECORD {
            self.prefetch_ahead();
        }
        self.ledger.clear(markers);
        self.counts.overrun_markers += as_u64(markers);
        self.counts.bytes_written += as_u64(need);
        true
    }
}

/// Records at least this long also prefetch the ring ahead of the write position.
const PREFETCH_FROM_RECORD: usize = 256;
/// How far ahead of the write position the ring is prefetched.
const PREFETCH_AHEAD: usize = 4096;
const LINE: usize = 64;

impl Producer {
    /// Prefetches the ring's next [`PREFETCH_AHEAD`] bytes of free space, so the cache
    /// misses of the records to come overlap the work before they are written (a ring
    /// larger than the cache is cold where the producer writes: the consumer read it a
    /// lap ago). Only lines not asked for before are prefetched, so a record costs
    /// about one prefetch per line it fills.
    #[inline]
    fn prefetch_ahead(&mut self) {
        let ahead = PREFETCH_AHEAD.min(self.ring.slots());
        let Ok(mut chunk) = self.ring.write_chunk_uninit(ahead) else {
            return;
        };
        let (head, tail) = chunk.as_mut_slices();
        for piece in [head, tail] {
            let start = piece.as_ptr() as usize;
            let end = start + piece.len();
            // Continue where the last call stopped when that is inside this piece.
            let from = if (start..end).contains(&self.prefetched_to) {
                self.prefetched_to
            } else {
                start
            };
            let mut line = from & !(LINE - 1);
            while line < end {
                prefetch_line(line);
                line += LINE;
            }
            if end > from {
                self.prefetched_to = end;
            }
        }
        // The chunk is dropped uncommitted: nothing was written.
    }
}

#[inline(always)]
fn prefetch_line(address: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing into the program and cannot fault,
    // whatever the address (this one is in the ring's buffer or the line it starts in).
    // `_MM_HINT_ET0` is a prefetch for writing where the target enables it, an ordinary
    // one into the first-level cache otherwise.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
        _mm_prefetch::<{ _MM_HINT_ET0 }>(address as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

impl Drop for Producer {
    /// Writes the pending markers into the room kept for them, so a consumer
    /// still draining learns of the last loss.
    fn drop(&mut self) {
        self.flush_markers(self.ledger.pending(), 0);
    }
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity)
            .field("streams", &self.ledger.streams())
            .field("pending_overruns", &self.ledger.pending())
            .finish_non_exhaustive()
    }
}

/// What one queue record holds: an event, or a run of messages.
#[derive(Clone, Copy)]
enum Record<'r, 'a> {
    Event(&'r Event<'a>),
    Run(&'r MessageRun<'a>),
}

impl<'a> Record<'_, 'a> {
    /// Length of the record (prefix included); `None` when its length does
    /// not fit the u32 prefix.
    fn len(self) -> Option<usize> {
        let len = match self {
            Self::Event(event) => event.encoded_len(),
            Self::Run(run) => run.encoded_len(),
        };
        u32::try_from(len).ok()?;
        len.checked_add(RECORD_PREFIX_LEN)
    }

    /// The record as its head (length prefix and header, assembled on the stack) and
    /// the bytes that follow it; `None` when it cannot be encoded.
    #[inline]
    fn parts(self) -> Option<(Head, &'a [u8])> {
        let mut head = Head {
            bytes: [0; HEAD_MAX],
            len: 0,
        };
        let (prefix, header) = head.bytes.split_at_mut(RECORD_PREFIX_LEN);
        let (header_len, body) = match self {
            Self::Event(event) => {
                let header = <&mut [u8; MAX_HEADER_LEN]>::try_from(header).ok()?;
                (event.encode_header(header).ok()?, event.payload())
            }
            Self::Run(run) => {
                let encoded = run.header()?;
                header.get_mut(..RUN_HEADER_LEN)?.copy_from_slice(&encoded);
                (RUN_HEADER_LEN, run.blocks())
            }
        };
        let len = u32::try_from(header_len.checked_add(body.len())?).ok()?;
        prefix.copy_from_slice(&len.to_le_bytes());
        head.len = RECORD_PREFIX_LEN + header_len;
        Some((head, body))
    }
}

/// The longest head of a record: its length prefix and the longest header.
const HEAD_MAX: usize = RECORD_PREFIX_LEN + MAX_HEADER_LEN;
const _: () = assert!(RUN_HEADER_LEN <= MAX_HEADER_LEN);

/// A record's length prefix and header.
struct Head {
    bytes: [u8; HEAD_MAX],
    len: usize,
}

impl Head {
    #[inline]
    fn as_slice(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// Writes one record; false when it does not fit.
#[inline]
fn put_record(writer: &mut SplitWriter<'_>, record: Record<'_, '_>) -> bool {
    record
        .parts()
        .is_some_and(|(head, body)| writer.put(head.as_slice()) && writer.put(body))
}

/// Copies bytes into the two (uninitialised) pieces of a write chunk, in order.
struct SplitWriter<'b> {
    head: &'b mut [MaybeUninit<u8>],
    tail: &'b mut [MaybeUninit<u8>],
}

impl SplitWriter<'_> {
    /// Appends `bytes`; false when they do not fit.
    #[inline]
    fn put(&mut self, mut bytes: &[u8]) -> bool {
        for _ in 0..2 {
            let n = bytes.len().min(self.head.len());
            let (now, later) = bytes.split_at(n);
            let (dst, rest) = std::mem::take(&mut self.head).split_at_mut(n);
            now.copy_to_uninit(dst);
            self.head = rest;
            bytes = later;
            if bytes.is_empty() {
                return true;
            }
            self.head = std::mem::take(&mut self.tail);
        }
        false
    }

    /// True when every byte of the chunk was written.
    fn is_full(&self) -> bool {
        self.head.is_empty() && self.tail.is_empty()
    }
}
