//! The ring's publication protocol over plain memory: [`RingWriter`] and [`RingReader`].
//!
//! Both sides see the ring as a slice of [`AtomicU64`] (the mapped file, or heap memory in
//! tests) and touch it only through atomic loads and stores, so a reader racing the writer
//! reads stale or mixed words, never undefined memory; the intent check after each copy
//! throws mixed words away. The layout is described in [the module above](super).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use memmap2::MmapRaw;

use crate::publish::Event;

/// Magic word at offset 0: `GAPLSHM1` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"GAPLSHM1");
/// Version of the layout.
pub const VERSION: u32 = 1;
/// Every record starts at a multiple of this many bytes.
pub const ALIGN: u64 = 8;
/// Bytes of a record's own header before the encoded event.
pub const RECORD_HEADER_LEN: usize = 32;
/// Where the stream-name table starts.
pub const NAMES_OFFSET: u64 = 256;
/// Smallest ring capacity. Under miri, whose checks make every access about a thousand
/// times dearer, smaller rings are allowed so its runs can lap one in seconds; the layout
/// is the same.
pub const MIN_CAPACITY: u64 = if cfg!(miri) { 1 << 10 } else { 1 << 16 };
/// Largest ring capacity.
pub const MAX_CAPACITY: u64 = 1 << 36;
/// Longest record the writer puts in the ring (at most a quarter of the capacity).
pub const MAX_RECORD: u64 = 4 << 20;
/// Bits of an epoch below the generation: the stream's numbering restarts within it.
pub const EPOCH_RESET_BITS: u32 = 24;

/// Record kind: an event.
pub const KIND_EVENT: u16 = 1;
/// Record kind: padding to the end of the data region.
pub const KIND_PADDING: u16 = 2;

/// Byte offsets of the header fields (each a u64 word unless said otherwise).
pub mod header {
    /// [`super::MAGIC`].
    pub const MAGIC: u64 = 0;
    /// Version (u32, low half) and record alignment (u32, high half).
    pub const VERSION: u64 = 8;
    /// Byte offset of the data region in the file.
    pub const DATA_OFFSET: u64 = 16;
    /// Capacity of the data region in bytes, a power of two.
    pub const CAPACITY: u64 = 24;
    /// Generation of this file.
    pub const GENERATION: u64 = 32;
    /// 1 once the producer stopped cleanly, else 0.
    pub const CLOSED: u64 = 40;
    /// Length in bytes of the stream-name table at [`super::NAMES_OFFSET`].
    pub const NAMES_LEN: u64 = 48;
    /// Longest record the producer writes.
    pub const MAX_RECORD: u64 = 56;
    /// Tail: the position just past the last record published.
    pub const TAIL: u64 = 128;
    /// Intent: the position just past the record being written.
    pub const INTENT: u64 = 136;
    /// Head: the position of the oldest record still whole in the ring.
    pub const HEAD: u64 = 144;
}

/// The ring's memory.
#[derive(Debug, Clone)]
pub(crate) enum Memory {
    /// Heap memory, shared by threads: the unix sink's replay history, and tests.
    Heap(Arc<[AtomicU64]>),
    /// A mapped file.
    Map(Arc<MmapRaw>),
}

impl Memory {
    /// Zeroed heap memory of `bytes` (rounded up to whole words).
    pub(crate) fn heap(bytes: u64) -> Self {
        let words = usize::try_from(bytes.div_ceil(8)).unwrap_or(0);
        Self::Heap((0..words).map(|_| AtomicU64::new(0)).collect())
    }

    /// The memory as words.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        match self {
            Self::Heap(words) => words,
            Self::Map(map) => {
                let ptr = map.as_ptr();
                // SAFETY: a mapping starts on a page boundary, so the pointer is aligned for
                // `AtomicU64`; it is valid for `len` bytes for as long as `map` lives (the
                // slice borrows `self`, which holds it); the memory is only ever accessed
                // through atomics in this process; other processes may write it at any time,
                // which atomics allow. Loads from a read-only mapping are plain loads.
                unsafe { std::slice::from_raw_parts(ptr.cast::<AtomicU64>(), map.len() / 8) }
            }
        }
    }
}

/// The header fields a reader needs, read from a valid header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Byte offset of the data region.
    pub data_offset: u64,
    /// Capacity of the data region, a power of two.
    pub capacity: u64,
    /// The file's generation.
    pub generation: u64,
    /// Length of the name table.
    pub names_len: u64,
    /// Longest record.
    pub max_record: u64,
}

/// Why memory does not hold a ring this reader can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The magic word is wrong (not a ring, or another byte order).
    #[error("not a gapless ring (bad magic)")]
    BadMagic,
    /// A version this reader does not know.
    #[error("unsupported ring version {0}")]
    Version(u32),
    /// A header field is out of range or disagrees with the file size.
    #[error("malformed ring header: {0}")]
    Header(&'static str),
    /// A record that passed the overwrite check is malformed: the producer wrote it so.
    #[error("malformed record at position {0}")]
    Record(u64),
    /// The tail went backwards within one file.
    #[error("the tail went backwards")]
    TailBackwards,
}

fn load(words: &[AtomicU64], byte: u64, order: Ordering) -> u64 {
    usize::try_from(byte / 8)
        .ok()
        .and_then(|i| words.get(i))
        .map_or(0, |w| w.load(order))
}

fn store(words: &[AtomicU64], byte: u64, value: u64, order: Ordering) {
    if let Some(w) = usize::try_from(byte / 8).ok().and_then(|i| words.get(i)) {
        w.store(value, order);
    }
}

/// Reads and checks the header of `mem`, `len` bytes long.
pub(crate) fn geometry(mem: &Memory) -> Result<Geometry, LayoutError> {
    let words = mem.words();
    let get = |at| load(words, at, Ordering::Acquire);
    if words.len() * 8 < NAMES_OFFSET as usize || get(header::MAGIC) != MAGIC {
        return Err(LayoutError::BadMagic);
    }
    let version = get(header::VERSION);
    if version as u32 != VERSION {
        return Err(LayoutError::Version(version as u32));
    }
    if (version >> 32) != ALIGN {
        return Err(LayoutError::Header("record alignment"));
    }
    let g = Geometry {
        data_offset: get(header::DATA_OFFSET),
        capacity: get(header::CAPACITY),
        generation: get(header::GENERATION),
        names_len: get(header::NAMES_LEN),
        max_record: get(header::MAX_RECORD),
    };
    let size = words.len() as u64 * 8;
    if !g.capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&g.capacity) {
        return Err(LayoutError::Header("capacity"));
    }
    if !g.data_offset.is_multiple_of(ALIGN)
        || g.data_offset < NAMES_OFFSET + g.names_len
        || g.data_offset.checked_add(g.capacity) != Some(size)
    {
        return Err(LayoutError::Header("data offset or file size"));
    }
    if g.max_record < RECORD_HEADER_LEN as u64 || g.max_record > g.capacity / 4 {
        return Err(LayoutError::Header("max record"));
    }
    Ok(g)
}

/// The bytes of the name table.
pub(crate) fn names(mem: &Memory, g: &Geometry) -> Vec<u8> {
    let words = mem.words();
    let mut out = Vec::with_capacity(g.names_len as usize + 8);
    let mut at = NAMES_OFFSET;
    while (out.len() as u64) < g.names_len {
        out.extend_from_slice(&load(words, at, Ordering::Acquire).to_ne_bytes());
        at += 8;
    }
    out.truncate(g.names_len as usize);
    out
}

const fn round_up(n: u64) -> u64 {
    n.div_ceil(ALIGN) * ALIGN
}

/// The size of the memory a ring of `capacity` with a name table of `names_len` bytes takes,
/// and where its data region starts.
pub(crate) const fn file_size(capacity: u64, names_len: u64) -> (u64, u64) {
    let data = (NAMES_OFFSET + names_len).div_ceil(4096) * 4096;
    (data + capacity, data)
}

/// Writes a fresh header (and the name table) into zeroed `mem`.
pub(crate) fn initialize(mem: &Memory, capacity: u64, generation: u64, names: &[u8]) -> Geometry {
    let words = mem.words();
    let names_len = names.len() as u64;
    let (_, data_offset) = file_size(capacity, names_len);
    let max_record = MAX_RECORD.min(capacity / 4);
    let mut at = NAMES_OFFSET;
    for chunk in names.chunks(8) {
        let mut word = [0u8; 8];
        word.iter_mut().zip(chunk).for_each(|(w, b)| *w = *b);
        store(words, at, u64::from_ne_bytes(word), Ordering::Relaxed);
        at += 8;
    }
    let put = |at, v| store(words, at, v, Ordering::Relaxed);
    put(header::VERSION, u64::from(VERSION) | (ALIGN << 32));
    put(header::DATA_OFFSET, data_offset);
    put(header::CAPACITY, capacity);
    put(header::GENERATION, generation);
    put(header::CLOSED, 0);
    put(header::NAMES_LEN, names_len);
    put(header::MAX_RECORD, max_record);
    put(header::TAIL, 0);
    put(header::INTENT, 0);
    put(header::HEAD, 0);
    // The magic last: a header with the magic is whole.
    store(words, header::MAGIC, MAGIC, Ordering::Release);
    Geometry {
        data_offset,
        capacity,
        generation,
        names_len,
        max_record,
    }
}

/// The sequences an event carries past its stream's position, and the position after it.
///
/// `next` is the stream's next expected sequence before the event; the result is the one
/// after it: past a live message, range frame or gap, the snapshot's end sequence after a
/// snapshot end, unchanged otherwise. The writer and the readers both use it.
pub fn next_after(event: &Event<'_>, next: u64) -> u64 {
    match *event {
        Event::Message {
            seq,
            snapshot: false,
            ..
        } => seq.saturating_add(1),
        Event::Range { last, .. } => last.saturating_add(1),
        Event::Gap { to, .. } => to.saturating_add(1),
        Event::SnapshotEnd { next, .. } => next,
        _ => next,
    }
}

/// True for events that carry the feed's sequences (live messages, range frames, gaps).
pub fn is_sequenced(event: &Event<'_>) -> bool {
    matches!(
        event,
        Event::Message {
            snapshot: false,
            ..
        } | Event::Range { .. }
            | Event::Gap { .. }
    )
}

/// The writer's account of one stream.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    /// Numbering restarts within this generation.
    resets: u64,
    /// Records of the stream written.
    index: u64,
    /// Next sequence expected.
    next: u64,
    /// A sequenced event was written since the last restart.
    sequenced: bool,
}

/// What a [`RingWriter`] has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Records written (padding not counted).
    pub records: u64,
    /// Events too long for a record, written as an overrun marker instead.
    pub too_long: u64,
    /// Bytes published (the tail).
    pub tail: u64,
}

/// The single producer of a ring.
#[derive(Debug)]
pub(crate) struct RingWriter {
    mem: Memory,
    data: u64,
    capacity: u64,
    max_record: u64,
    /// Mirror of the shared tail and head: only this writer changes them.
    tail: u64,
    head: u64,
    epoch_base: u64,
    streams: Vec<Track>,
    /// Tracks stream ids past `streams` (no such stream is configured).
    spare: Track,
    scratch: Vec<u8>,
    stats: WriterStats,
}

impl RingWriter {
    /// A writer for the freshly initialized ring in `mem`, for `streams` stream ids.
    pub(crate) fn new(mem: Memory, g: &Geometry, streams: usize) -> Self {
        Self {
            mem,
            data: g.data_offset,
            capacity: g.capacity,
            max_record: g.max_record,
            tail: 0,
            head: 0,
            epoch_base: g.generation << EPOCH_RESET_BITS,
            streams: vec![Track::default(); streams],
            spare: Track::default(),
            scratch: vec![0; g.max_record as usize],
            stats: WriterStats::default(),
        }
    }

    /// What was written.
    pub(crate) const fn stats(&self) -> WriterStats {
        self.stats
    }

    /// The epoch the next record of `stream` is written in (a state `unseen` after a
    /// sequenced event starts a new one).
    pub(crate) fn epoch(&self, stream: u16) -> u64 {
        let track = self.streams.get(usize::from(stream)).unwrap_or(&self.spare);
        self.epoch_base | track.resets.min((1 << EPOCH_RESET_BITS) - 1)
    }

    /// The position just past the last record published.
    pub(crate) const fn tail(&self) -> u64 {
        self.tail
    }

    /// Writes one event. Never blocks, allocates or makes a system call.
    pub(crate) fn write(&mut self, event: &Event<'_>) {
        let stream = event.stream();
        let track = match self.streams.get_mut(usize::from(stream)) {
            Some(t) => t,
            None => &mut self.spare,
        };
        if matches!(
            event,
            Event::State {
                state: crate::publish::StreamState::Unseen,
                ..
            }
        ) && track.sequenced
        {
            track.resets += 1;
            track.next = 0;
            track.sequenced = false;
        }
        let before = *track;
        track.index += 1;
        track.next = next_after(event, before.next);
        track.sequenced |= is_sequenced(event);

        let epoch = self.epoch_base | before.resets.min((1 << EPOCH_RESET_BITS) - 1);
        let len = RECORD_HEADER_LEN + event.encoded_len();
        let substitute;
        let event = if len as u64 > self.max_record {
            self.stats.too_long += 1;
            let (from, to) = event.sequences().map_or((u64::MAX, 0), |r| r.into_inner());
            substitute = Event::Overrun {
                stream,
                from,
                to,
                events: 1,
            };
            &substitute
        } else {
            event
        };
        let len = RECORD_HEADER_LEN + event.encoded_len();
        let padded = round_up(len as u64) as usize;
        let Some(record) = self.scratch.get_mut(..padded) else {
            return;
        };
        let (head, body) = record.split_at_mut(RECORD_HEADER_LEN);
        let first = u64::from(len as u32) | (u64::from(KIND_EVENT) << 32);
        for (slot, v) in head
            .chunks_exact_mut(8)
            .zip([first, epoch, before.index, before.next])
        {
            slot.copy_from_slice(&v.to_le_bytes());
        }
        let written = event.encode_into(body).unwrap_or(0);
        body.iter_mut().skip(written).for_each(|b| *b = 0);
        self.publish(padded as u64);
        self.stats.records += 1;
    }

    /// Publishes the first `len` bytes of the scratch buffer as one record.
    fn publish(&mut self, len: u64) {
        let words = self.mem.words();
        let mask = self.capacity - 1;
        let start = self.tail;
        let room = self.capacity - (start & mask);
        let pad = if len > room { room } else { 0 };
        let end = start + pad + len;
        // Records starting before `end - capacity` are about to be overwritten: move the
        // head past them, reading their lengths before they go.
        while self.head + self.capacity < end {
            let first = load(words, self.data + (self.head & mask), Ordering::Relaxed);
            self.head += round_up(u64::from(first as u32)).max(ALIGN);
        }
        store(words, header::HEAD, self.head, Ordering::Release);
        store(words, header::INTENT, end, Ordering::Relaxed);
        // The intent is visible before any byte of the record: a reader that sees one of
        // them and then fences sees the intent.
        fence(Ordering::Release);
        let mut at = start;
        if pad > 0 {
            let first = pad | (u64::from(KIND_PADDING) << 32);
            store(words, self.data + (at & mask), first, Ordering::Relaxed);
            at += pad;
        }
        let base = self.data + (at & mask);
        for (i, chunk) in self
            .scratch
            .chunks_exact(8)
            .take(len as usize / 8)
            .enumerate()
        {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            store(
                words,
                base + i as u64 * 8,
                u64::from_ne_bytes(word),
                Ordering::Relaxed,
            );
        }
        store(words, header::TAIL, end, Ordering::Release);
        self.tail = end;
        self.stats.tail = end;
    }

    /// Marks the ring as closed: the producer stopped cleanly.
    pub(crate) fn close(&self) {
        store(self.mem.words(), header::CLOSED, 1, Ordering::Release);
    }
}

/// The header of a record read, with the event's place in its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// The stream's epoch: generation and numbering restarts.
    pub epoch: u64,
    /// The record's index among its stream's records in this generation, from 0.
    pub index: u64,
    /// The stream's next expected sequence before this record.
    pub next_before: u64,
}

/// What [`RingReader::next`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Raw {
    /// A record, copied out whole: [`RingReader::event`] decodes it.
    Record(RecordHeader),
    /// Nothing new.
    Empty,
    /// The writer overwrote what this reader had not read; it moved on to the oldest
    /// record still whole, `skipped` bytes further.
    Lapped { skipped: u64 },
}

/// One reader of a ring, at its own position.
#[derive(Debug)]
pub(crate) struct RingReader {
    mem: Memory,
    g: Geometry,
    pos: u64,
    /// Where the last record returned started, for [`RingReader::rewind`].
    last: u64,
    buf: Vec<u8>,
    len: usize,
}

impl RingReader {
    /// A reader at the oldest record of the ring in `mem`.
    pub(crate) fn new(mem: Memory, g: Geometry) -> Self {
        let head = load(mem.words(), header::HEAD, Ordering::Acquire);
        Self {
            mem,
            g,
            pos: head,
            last: head,
            buf: Vec::new(),
            len: 0,
        }
    }

    /// Where the record [`RingReader::next`] returned last starts.
    pub(crate) const fn last_position(&self) -> u64 {
        self.last
    }

    /// Moves to `pos`, a position a record started at (or the tail) earlier; when the
    /// writer has overwritten it since, the next read says so ([`Raw::Lapped`]).
    pub(crate) fn seek(&mut self, pos: u64) {
        self.pos = pos;
        self.last = pos;
    }

    /// Moves to the newest end: only records published from now on are read.
    pub(crate) fn seek_tail(&mut self) {
        self.pos = load(self.mem.words(), header::TAIL, Ordering::Acquire);
    }

    /// The ring's header fields.
    pub(crate) const fn geometry(&self) -> &Geometry {
        &self.g
    }

    /// True once the producer marked the ring closed.
    pub(crate) fn is_closed(&self) -> bool {
        load(self.mem.words(), header::CLOSED, Ordering::Acquire) != 0
    }

    /// Reads the next record into the reader's buffer.
    ///
    /// # Errors
    ///
    /// A record that is malformed although the writer did not overwrite it while it was
    /// read, or a tail that went backwards.
    pub(crate) fn next(&mut self) -> Result<Raw, LayoutError> {
        let words = self.mem.words();
        let (cap, mask) = (self.g.capacity, self.g.capacity - 1);
        let intact =
            |pos: u64| load(words, header::INTENT, Ordering::Relaxed) <= pos.saturating_add(cap);
        loop {
            let tail = load(words, header::TAIL, Ordering::Acquire);
            if tail == self.pos {
                return Ok(Raw::Empty);
            }
            if tail < self.pos {
                return Err(LayoutError::TailBackwards);
            }
            if tail - self.pos > cap {
                return Ok(self.lapped());
            }
            let at = self.pos & mask;
            let first = load(words, self.g.data_offset + at, Ordering::Relaxed);
            let (len, kind) = (u64::from(first as u32), (first >> 32) as u16);
            let fits = len >= ALIGN && round_up(len) <= cap - at;
            if kind == KIND_PADDING && fits {
                fence(Ordering::Acquire);
                if !intact(self.pos) {
                    return Ok(self.lapped());
                }
                if len != cap - at {
                    return Err(LayoutError::Record(self.pos));
                }
                self.pos += len;
                continue;
            }
            if kind != KIND_EVENT
                || !fits
                || len < RECORD_HEADER_LEN as u64
                || len > self.g.max_record
            {
                fence(Ordering::Acquire);
                if !intact(self.pos) {
                    return Ok(self.lapped());
                }
                return Err(LayoutError::Record(self.pos));
            }
            let padded = round_up(len);
            self.buf.clear();
            let base = self.g.data_offset + at;
            let mut off = 0;
            while off < padded {
                let w = load(words, base + off, Ordering::Relaxed);
                self.buf.extend_from_slice(&w.to_ne_bytes());
                off += 8;
            }
            // Every word copied is read before the intent: if any was written by a record
            // that overwrote this one, the intent says so.
            fence(Ordering::Acquire);
            if !intact(self.pos) {
                return Ok(self.lapped());
            }
            let field = |i: usize| {
                self.buf
                    .get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes)
            };
            let header = RecordHeader {
                epoch: field(1),
                index: field(2),
                next_before: field(3),
            };
            self.len = len as usize;
            if self.event().is_none() {
                return Err(LayoutError::Record(self.pos));
            }
            self.last = self.pos;
            self.pos += padded;
            return Ok(Raw::Record(header));
        }
    }

    /// The event of the record [`RingReader::next`] returned last.
    pub(crate) fn event(&self) -> Option<Event<'_>> {
        let body = self.buf.get(RECORD_HEADER_LEN..self.len)?;
        match Event::decode(body) {
            Ok((event, n)) if n == body.len() => Some(event),
            _ => None,
        }
    }

    /// Goes back to the record returned last, to read it again.
    pub(crate) fn rewind(&mut self) {
        self.pos = self.last;
    }

    fn lapped(&mut self) -> Raw {
        let head = load(self.mem.words(), header::HEAD, Ordering::Acquire);
        let to = head.max(self.pos);
        let skipped = to - self.pos;
        self.pos = to;
        self.last = to;
        Raw::Lapped { skipped }
    }
}
