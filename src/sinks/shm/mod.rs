//! The shared-memory ring sink: a memory-mapped file that the rx thread writes every
//! consumer event into once, and that any number of reader processes read at their own
//! position, with no lock, no system call and no message to the producer.
//!
//! The producer ([`ShmSink`]) writes from the rx thread itself: a record is copied into the
//! mapping with atomic stores, and the tail is published with release ordering. It never
//! waits for a reader, allocates nothing and makes no system call per event. A reader that
//! falls a whole ring behind is lapped: it detects it, moves to the oldest record still
//! whole, and reports what its streams lost as [`Event::Overrun`] markers with the lost
//! ranges; it never returns torn or mixed data. Readers: [`crate::client::shm`] (and
//! `gapless tail --shm`), and `clients/python/gapless_shm.py`.
//!
//! # File
//!
//! The file is created as `PATH.new`, initialized, then renamed to `PATH`, so a reader that
//! opens `PATH` always finds a whole header. A producer restart makes a new file (a new
//! inode) with a higher generation; readers still mapping the old one keep valid memory, and
//! notice the new file by `stat`ing `PATH` when they have read everything in theirs (or see
//! the old file's `closed` flag). The size is fixed at start: header, name table, then
//! `size_bytes` of data. All integers are little-endian (the producer and its readers run on
//! one little-endian host); every u64 field is 8-byte aligned, and is read and written as
//! one atomic access.
//!
//! # Header
//!
//! | offset | field | type | written |
//! | --- | --- | --- | --- |
//! | 0 | magic `GAPLSHM1` | 8 bytes | once, last (release) |
//! | 8 | layout version = 1 | u32 | once |
//! | 12 | record alignment = 8 | u32 | once |
//! | 16 | data offset: where the data region starts (a multiple of 4096) | u64 | once |
//! | 24 | capacity: bytes of the data region, a power of two, 2^16..=2^36 | u64 | once |
//! | 32 | generation: higher for each producer start on this path | u64 | once |
//! | 40 | closed: 1 once the producer stopped cleanly | u64 | at stop (release) |
//! | 48 | name-table length in bytes | u64 | once |
//! | 56 | max record: longest record, at most capacity / 4 | u64 | once |
//! | 128 | **tail**: position just past the last whole record | u64 | each record (release) |
//! | 136 | **intent**: position just past the record being written | u64 | each record, before its bytes |
//! | 144 | **head**: position of the oldest record still whole | u64 | before intent (release) |
//! | 256 | name table: the unix sink's hello body (`GPLS`, version u16, stream count u16, then per stream id venue length u16, venue, stream length u16, stream; see [`crate::publish::wire`]) | bytes | once |
//!
//! Positions count bytes written since the file was made and never wrap; a position `p`
//! is at byte `data offset + (p mod capacity)` of the file.
//!
//! # Records
//!
//! Each record starts at a multiple of 8 and takes its length rounded up to 8. A record
//! never wraps past the end of the data region: when it does not fit, a padding record
//! fills the rest and the record starts at the region's beginning.
//!
//! | offset | field | type |
//! | --- | --- | --- |
//! | 0 | record length in bytes, header included, padding excluded | u32 |
//! | 4 | kind: 1 event, 2 padding (only its length is meaningful) | u16 |
//! | 6 | reserved, 0 | u16 |
//! | 8 | epoch of the event's stream | u64 |
//! | 16 | index: the record's number among its stream's records in this generation, from 0 | u64 |
//! | 24 | next before: the stream's next expected sequence before this record | u64 |
//! | 32 | the event in the encoding of [`crate::publish::event`] (tag 1 to 9), to the record's end | bytes |
//!
//! The *epoch* is `generation << 24 | restarts`, where `restarts` counts the stream's
//! numbering restarts seen in this generation (a `state` event `unseen` after any sequenced
//! event of the epoch). Epochs therefore grow across producer restarts too. *next before*
//! follows [`next_after`]: a live message `seq` moves it to `seq + 1`, a range frame or gap
//! to `last + 1`, a snapshot end to its `next`; a restart sets it to 0. An event longer than
//! the max record is written as an [`Event::Overrun`] of its sequences (and counted).
//!
//! # Memory ordering
//!
//! The producer, for each record: stores `head` (release), stores `intent` = end of the
//! record, issues a release fence, writes the record's words (relaxed), then stores `tail`
//! = end (release). A reader at position `pos`:
//!
//! 1. loads `tail` (acquire); `tail == pos`: nothing new; `tail - pos > capacity`: lapped;
//! 2. reads the record's first word, bounds its length, copies the whole record out;
//! 3. issues an acquire fence, then loads `intent`: if `intent > pos + capacity` the
//!    producer has started overwriting the record, and the copy is thrown away (lapped);
//!    otherwise the copy is whole and `pos` moves past it;
//! 4. when lapped, moves to `head` (acquire) and goes on; per stream, the next record's
//!    index and next-before against the reader's own say exactly what was lost.
//!
//! [`Event::Overrun`]: crate::publish::Event::Overrun

pub mod ring;
#[cfg(test)]
pub(crate) mod tests;

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use memmap2::MmapRaw;

use crate::publish::Event;
use crate::publish::run::MessageRun;
use crate::publish::wire::{StreamName, WireError, encode_hello};

use ring::{Memory, RingWriter};
pub use ring::{RecordHeader, WriterStats, is_sequenced, next_after};

/// The producer of a shared-memory ring file.
#[derive(Debug)]
pub struct ShmSink {
    writer: RingWriter,
    path: PathBuf,
    counters: Arc<ShmCounters>,
    /// `too_long` when it was last logged: a line each time the count doubles.
    too_long_logged: u64,
}

/// What a ring's producer has written, published by the rx thread once a batch (relaxed
/// stores) for the metrics exporter to read.
#[derive(Debug, Default)]
pub struct ShmCounters {
    records: AtomicU64,
    bytes: AtomicU64,
    too_long: AtomicU64,
    capacity: u64,
}

impl ShmCounters {
    /// Records written (padding not counted).
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Bytes published into the ring since its start, padding included.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Events too long for a record, written as an overrun marker of their sequences.
    pub fn too_long(&self) -> u64 {
        self.too_long.load(Ordering::Relaxed)
    }

    /// Data bytes of the ring.
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// The hello body of the wire format, without its length prefix: the ring's name table.
pub(crate) fn name_table(streams: &[StreamName]) -> Result<Vec<u8>, WireError> {
    let mut framed = Vec::new();
    encode_hello(streams, &mut framed)?;
    Ok(framed.split_off(4))
}

/// The generation of a ring already at `path`, if it holds one.
fn previous_generation(path: &Path) -> Option<u64> {
    let mut head = [0u8; 40];
    File::open(path).ok()?.read_exact(&mut head).ok()?;
    let word = |i: usize| {
        head.get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    (word(0)? == ring::MAGIC).then_some(())?;
    word(32)
}

impl ShmSink {
    /// Creates the ring file at `path` with `capacity` bytes of data (a power of two in
    /// 2^16..=2^36) for `streams`, and maps it. Its generation is one above the one a ring
    /// already at `path` had, and at least the Unix time in seconds.
    ///
    /// # Errors
    ///
    /// When the capacity is out of range, the name table is too large, or the file cannot
    /// be created, sized, mapped or renamed into place.
    pub fn create(path: &Path, capacity: u64, streams: &[StreamName]) -> io::Result<Self> {
        if !capacity.is_power_of_two()
            || !(ring::MIN_CAPACITY..=ring::MAX_CAPACITY).contains(&capacity)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring capacity {capacity} is not a power of two in 2^16..=2^36"),
            ));
        }
        let names = name_table(streams).map_err(io::Error::other)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let generation = previous_generation(path)
            .map_or(0, |g| g.saturating_add(1))
            .max(now)
            .min((1 << (64 - ring::EPOCH_RESET_BITS)) - 1);
        let mut staging = path.as_os_str().to_owned();
        staging.push(".new");
        let staging = PathBuf::from(staging);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&staging)?;
        let (size, _) = ring::file_size(capacity, names.len() as u64);
        file.set_len(size)?;
        let map = MmapRaw::map_raw(&file)?;
        let mem = Memory::Map(Arc::new(map));
        let geometry = ring::initialize(&mem, capacity, generation, &names);
        std::fs::rename(&staging, path)?;
        Ok(Self {
            writer: RingWriter::new(mem, &geometry, streams.len()),
            path: path.to_path_buf(),
            counters: Arc::new(ShmCounters {
                capacity,
                ..ShmCounters::default()
            }),
            too_long_logged: 0,
        })
    }

    /// Writes one event.
    pub fn write(&mut self, event: &Event<'_>) {
        self.writer.write(event);
    }

    /// Writes each message of a run as its own record.
    pub fn write_run(&mut self, run: &MessageRun<'_>) {
        for event in run.events() {
            self.writer.write(&event);
        }
    }

    /// What was written.
    pub const fn stats(&self) -> WriterStats {
        self.writer.stats()
    }

    /// The counters [`publish_stats`](Self::publish_stats) keeps up to date.
    pub fn counters(&self) -> Arc<ShmCounters> {
        Arc::clone(&self.counters)
    }

    /// Publishes what was written to [`counters`](Self::counters) (three relaxed stores),
    /// and says in the log when more events were too long for a record (a line each time
    /// their count doubles).
    pub fn publish_stats(&mut self) {
        let stats = self.writer.stats();
        let c = &self.counters;
        c.records.store(stats.records, Ordering::Relaxed);
        c.bytes.store(stats.tail, Ordering::Relaxed);
        c.too_long.store(stats.too_long, Ordering::Relaxed);
        if stats.too_long > 0 && stats.too_long >= self.too_long_logged.saturating_mul(2) {
            self.too_long_logged = stats.too_long;
            crate::log_warn!(
                "shm ring {}: {} events too long for a record, written as overrun markers \
                 (raise size_bytes: a record holds at most a quarter of the ring, 4 MiB at most)",
                self.path.display(),
                stats.too_long
            );
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ShmSink {
    /// Marks the ring closed; the file stays for readers to finish.
    fn drop(&mut self) {
        self.writer.close();
    }
}
