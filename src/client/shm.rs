//! The reader of the shared-memory ring sink (its layout is documented in
//! `src/sinks/shm/mod.rs`), and `gapless tail --shm`.
//!
//! [`ShmReader`] maps the ring read-only and reads it at its own position: the producer
//! never learns it exists. It keeps, per stream, a [`Cursor`]: the epoch and the next
//! sequence it needs. Every record is judged against it, so one rule covers a reader that
//! starts with a cursor (what the ring still holds from there is replayed, anything older
//! skipped), a reader that was lapped, and a producer restart: when the next record of a
//! stream is past the cursor, an [`Event::Overrun`] with the lost range comes first.
//!
//! The marker's `from..=to` are the stream's sequences lost (`from` = `u64::MAX`, `to` = 0
//! when only events without a sequence were lost); `to` = `u64::MAX` when the loss runs past
//! the end of the cursor's epoch into a later one, whose records the stream then goes on
//! with. `events` counts the stream's records lost when this reader had read the stream in
//! this generation, and is 0 when that is not known (a cursor from an earlier run). With a
//! cursor `(epoch, next)`, events without a sequence at `next` itself (a state change just
//! before message `next`) are replayed: a cursor names sequences, not those.
//!
//! ```no_run
//! use gapless::client::shm::{Cursor, Poll, ShmReader};
//!
//! let mut reader = ShmReader::open("/dev/shm/gapless.ring", &[Cursor { stream: 0, epoch: 0, next: 0 }])?;
//! loop {
//!     match reader.poll()? {
//!         Poll::Event { epoch, event } => println!("{epoch} {event:?}"),
//!         Poll::Generation { generation } => println!("generation {generation}"),
//!         Poll::Idle => std::thread::sleep(std::time::Duration::from_millis(1)),
//!     }
//! }
//! # Ok::<(), gapless::client::shm::ShmError>(())
//! ```

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::MmapOptions;
use thiserror::Error;

use crate::client::unix::decode_hello;
use crate::publish::Event;
use crate::publish::jsonl::JsonlFormatter;
use crate::publish::wire::{HELLO_MAGIC, StreamName, WireError};
use crate::sinks::Backoff;
use crate::sinks::shm::ring::{self, Geometry, LayoutError, Memory, Raw, RingReader};
use crate::sinks::shm::{RecordHeader, is_sequenced, next_after};

/// How often an idle reader looks whether a newer ring replaced its file.
const REOPEN_CHECK: Duration = Duration::from_millis(20);
/// Records looked at in one [`ShmReader::poll`] before it returns [`Poll::Idle`].
const POLL_BUDGET: u32 = 4096;

/// Why the ring could not be read.
#[derive(Debug, Error)]
pub enum ShmError {
    /// The file could not be opened or mapped.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The ring's path.
        path: String,
        /// What the OS said.
        source: io::Error,
    },
    /// The file is not a ring this reader can read, or a record is malformed.
    #[error("{path}: {source}")]
    Layout {
        /// The ring's path.
        path: String,
        /// What is wrong.
        source: LayoutError,
    },
    /// The name table does not decode.
    #[error("bad name table: {0}")]
    Names(#[from] WireError),
    /// A resume cursor is malformed or names no stream of the ring.
    #[error("bad cursor: {0}")]
    Cursor(String),
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(io::Error),
}

/// Where a reader is in one stream: the epoch and the next sequence it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The stream id.
    pub stream: u16,
    /// The stream's epoch (see the ring's layout).
    pub epoch: u64,
    /// The next sequence needed.
    pub next: u64,
}

/// What [`ShmReader::poll`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll<'a> {
    /// An event of a stream whose epoch is `epoch` (for a marker: the epoch of the record
    /// that revealed the loss).
    Event {
        /// The stream's epoch.
        epoch: u64,
        /// The event.
        event: Event<'a>,
    },
    /// The reader opened a ring of this generation: the first poll after opening, and
    /// after each producer restart.
    Generation {
        /// The ring's generation.
        generation: u64,
    },
    /// Nothing new for now.
    Idle,
}

/// A stream as this reader has followed it.
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    /// Epoch and next sequence needed; `None`: take the stream from wherever it is.
    at: Option<(u64, u64)>,
    /// Index of the last record of the stream judged in this generation.
    index: Option<u64>,
}

/// What to do with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Deliver,
    Skip,
    /// Report this loss first, then judge the record again.
    Lost(Event<'static>),
}

/// Cursors of every stream, judging records against them (the unix sink judges its replay
/// history with the same rule).
#[derive(Debug, Clone, Default)]
pub(crate) struct Cursors {
    streams: Vec<Position>,
    /// Stands in for stream ids past the table (never: it grows to hold them).
    spare: Position,
}

impl Cursors {
    pub(crate) fn new(start: &[Cursor]) -> Self {
        let mut c = Self::default();
        for cursor in start {
            c.position(cursor.stream).at = Some((cursor.epoch, cursor.next));
        }
        c
    }

    fn position(&mut self, stream: u16) -> &mut Position {
        let i = usize::from(stream);
        if self.streams.len() <= i {
            self.streams.resize(i + 1, Position::default());
        }
        match self.streams.get_mut(i) {
            Some(p) => p,
            None => &mut self.spare,
        }
    }

    /// Record indexes count within one generation.
    fn new_generation(&mut self) {
        self.streams.iter_mut().for_each(|p| p.index = None);
    }

    /// Sets the cursor of one stream, forgetting where it was.
    pub(crate) fn set(&mut self, cursor: Cursor) {
        let p = self.position(cursor.stream);
        p.at = Some((cursor.epoch, cursor.next));
        p.index = None;
    }

    /// True once `stream` has a position: a cursor it started with, or a record delivered.
    pub(crate) fn is_positioned(&self, stream: u16) -> bool {
        self.streams
            .get(usize::from(stream))
            .is_some_and(|p| p.at.is_some())
    }

    pub(crate) fn cursor(&self, stream: u16) -> Option<Cursor> {
        let p = self.streams.get(usize::from(stream))?;
        let (epoch, next) = p.at?;
        Some(Cursor {
            stream,
            epoch,
            next,
        })
    }

    pub(crate) fn judge(&mut self, h: &RecordHeader, event: &Event<'_>) -> Verdict {
        let stream = event.stream();
        let p = self.position(stream);
        let lost_records = |p: &Position| match p.index {
            Some(i) => h.index.saturating_sub(i + 1),
            None => 0,
        };
        let in_order = p.index.is_none_or(|i| h.index == i + 1);
        let Some((epoch, next)) = p.at else {
            p.at = Some((h.epoch, next_after(event, h.next_before)));
            p.index = Some(h.index);
            return Verdict::Deliver;
        };
        if h.epoch < epoch {
            p.index = Some(h.index);
            return Verdict::Skip;
        }
        if h.epoch > epoch {
            if in_order && p.index.is_some() {
                // Every record of the old epoch was read: nothing lost.
                p.at = Some((h.epoch, next_after(event, h.next_before)));
                p.index = Some(h.index);
                return Verdict::Deliver;
            }
            let marker = Event::Overrun {
                stream,
                from: next,
                to: u64::MAX,
                events: lost_records(p),
            };
            p.at = Some((h.epoch, h.next_before));
            p.index = h.index.checked_sub(1);
            return Verdict::Lost(marker);
        }
        let before = if is_sequenced(event) {
            next_after(event, h.next_before) <= next
        } else {
            h.next_before < next
        };
        if before {
            p.index = Some(h.index);
            return Verdict::Skip;
        }
        if h.next_before > next || !in_order {
            let (from, to) = if h.next_before > next {
                (next, h.next_before - 1)
            } else {
                (u64::MAX, 0)
            };
            let marker = Event::Overrun {
                stream,
                from,
                to,
                events: lost_records(p),
            };
            p.at = Some((epoch, h.next_before.max(next)));
            p.index = h.index.checked_sub(1);
            return Verdict::Lost(marker);
        }
        p.at = Some((epoch, next_after(event, h.next_before).max(next)));
        p.index = Some(h.index);
        Verdict::Deliver
    }
}

/// The file a reader has mapped.
#[derive(Debug)]
struct Opened {
    ring: RingReader,
    identity: (u64, u64),
    names: Vec<StreamName>,
}

fn open_ring(path: &Path) -> Result<Opened, ShmError> {
    let shown = || path.display().to_string();
    let file = File::open(path).map_err(|source| ShmError::Open {
        path: shown(),
        source,
    })?;
    let meta = file.metadata().map_err(|source| ShmError::Open {
        path: shown(),
        source,
    })?;
    if !meta.len().is_multiple_of(8) || meta.len() < ring::NAMES_OFFSET {
        return Err(ShmError::Layout {
            path: shown(),
            source: LayoutError::Header("file size"),
        });
    }
    let map = MmapOptions::new()
        .map_raw_read_only(&file)
        .map_err(|source| ShmError::Open {
            path: shown(),
            source,
        })?;
    let mem = Memory::Map(Arc::new(map));
    let geometry = ring::geometry(&mem).map_err(|source| ShmError::Layout {
        path: shown(),
        source,
    })?;
    let names = read_names(&mem, &geometry)?;
    Ok(Opened {
        ring: RingReader::new(mem, geometry),
        identity: (meta.dev(), meta.ino()),
        names,
    })
}

fn read_names(mem: &Memory, g: &Geometry) -> Result<Vec<StreamName>, ShmError> {
    let table = ring::names(mem, g);
    let body = table
        .strip_prefix(&HELLO_MAGIC)
        .ok_or(WireError::Malformed("name table"))?;
    Ok(decode_hello(body)?)
}

/// A reader of a ring file, following producer restarts.
#[derive(Debug)]
pub struct ShmReader {
    path: PathBuf,
    opened: Opened,
    cursors: Cursors,
    announce: bool,
    last_check: Instant,
    lapped: u64,
    /// Look for a newer ring at `path` when idle (false for a ring in plain memory).
    follow: bool,
}

impl ShmReader {
    /// A reader of a ring in plain memory, at its oldest record.
    #[cfg(test)]
    pub(crate) fn from_memory(mem: Memory) -> Result<Self, ShmError> {
        let geometry = ring::geometry(&mem).map_err(|source| ShmError::Layout {
            path: String::new(),
            source,
        })?;
        let names = read_names(&mem, &geometry)?;
        Ok(Self {
            path: PathBuf::new(),
            opened: Opened {
                ring: RingReader::new(mem, geometry),
                identity: (0, 0),
                names,
            },
            cursors: Cursors::default(),
            announce: false,
            last_check: Instant::now(),
            lapped: 0,
            follow: false,
        })
    }

    /// Opens the ring at `path`, at its oldest record, with `cursors` for some streams
    /// (streams without one are read from the oldest record the ring holds).
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or is not a ring.
    pub fn open(path: impl AsRef<Path>, cursors: &[Cursor]) -> Result<Self, ShmError> {
        let path = path.as_ref().to_path_buf();
        let opened = open_ring(&path)?;
        Ok(Self {
            path,
            opened,
            cursors: Cursors::new(cursors),
            announce: true,
            last_check: Instant::now(),
            lapped: 0,
            follow: true,
        })
    }

    /// Sets the cursor of one stream (before reading it).
    pub fn set_cursor(&mut self, cursor: Cursor) {
        self.cursors.set(cursor);
    }

    /// Skips what the ring holds now: only events published from here on are read.
    pub fn seek_live(&mut self) {
        self.opened.ring.seek_tail();
    }

    /// The stream names, by stream id.
    pub fn streams(&self) -> &[StreamName] {
        &self.opened.names
    }

    /// The generation of the ring being read.
    pub const fn generation(&self) -> u64 {
        self.opened.ring.geometry().generation
    }

    /// Times this reader was lapped by the producer.
    pub const fn lapped(&self) -> u64 {
        self.lapped
    }

    /// The cursor of `stream`: where a new reader would resume to carry on from here.
    pub fn cursor(&self, stream: u16) -> Option<Cursor> {
        self.cursors.cursor(stream)
    }

    /// True when the producer stopped cleanly and no newer ring replaced it (yet).
    pub fn is_closed(&self) -> bool {
        self.opened.ring.is_closed()
    }

    /// The next event, if any. Never blocks.
    ///
    /// # Errors
    ///
    /// A malformed record, or a newer ring at the path that cannot be read.
    pub fn poll(&mut self) -> Result<Poll<'_>, ShmError> {
        if self.announce {
            self.announce = false;
            return Ok(Poll::Generation {
                generation: self.generation(),
            });
        }
        let mut budget = POLL_BUDGET;
        let epoch = loop {
            budget -= 1;
            if budget == 0 {
                return Ok(Poll::Idle);
            }
            let raw = self.opened.ring.next().map_err(|source| ShmError::Layout {
                path: self.path.display().to_string(),
                source,
            })?;
            match raw {
                Raw::Empty => return self.idle(),
                Raw::Lapped { .. } => self.lapped += 1,
                Raw::Record(header) => {
                    let Some(event) = self.opened.ring.event() else {
                        continue;
                    };
                    match self.cursors.judge(&header, &event) {
                        Verdict::Skip => {}
                        Verdict::Deliver => break header.epoch,
                        Verdict::Lost(marker) => {
                            self.opened.ring.rewind();
                            return Ok(Poll::Event {
                                epoch: header.epoch,
                                event: marker,
                            });
                        }
                    }
                }
            }
        };
        match self.opened.ring.event() {
            Some(event) => Ok(Poll::Event { epoch, event }),
            None => Ok(Poll::Idle),
        }
    }

    /// Everything in the ring was read: looks whether a newer ring replaced it.
    fn idle(&mut self) -> Result<Poll<'static>, ShmError> {
        let closed = self.opened.ring.is_closed();
        if !self.follow || (!closed && self.last_check.elapsed() < REOPEN_CHECK) {
            return Ok(Poll::Idle);
        }
        self.last_check = Instant::now();
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return Ok(Poll::Idle);
        };
        if (meta.dev(), meta.ino()) == self.opened.identity {
            return Ok(Poll::Idle);
        }
        let opened = open_ring(&self.path)?;
        self.opened = opened;
        self.cursors.new_generation();
        Ok(Poll::Generation {
            generation: self.generation(),
        })
    }
}

/// Why [`tail`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailEnd {
    /// The limit of events was reached.
    Limit,
    /// The producer stopped cleanly and nothing replaced its ring within the wait.
    Closed,
}

/// Options of [`tail`].
#[derive(Debug, Clone, Default)]
pub struct TailOptions {
    /// Stop after this many event lines (heartbeats and generation lines not counted).
    pub limit: Option<u64>,
    /// Resume cursors, `STREAM=EPOCH:SEQ` (see [`parse_cursor`]).
    pub from: Vec<String>,
    /// Stop once the producer closed the ring and no newer one came for this long;
    /// `None`: wait for a restart for ever.
    pub exit_when_closed: Option<Duration>,
}

/// Reads the ring at `path` and writes each event to `out` as the jsonl sink's JSON line
/// (with `"recv_ns"`), plus the stream's `"epoch"`, so that the last line of a stream is a
/// cursor to resume from; each ring opened is a line `{"event":"generation",
/// "generation":G}`. Idle waits sleep, from 50 µs up to 1 ms.
///
/// # Errors
///
/// When the ring cannot be read or `out` fails.
pub fn tail(path: &Path, mut out: impl Write, options: &TailOptions) -> Result<TailEnd, ShmError> {
    let mut reader = ShmReader::open(path, &[])?;
    for text in &options.from {
        let cursor = parse_cursor(text, reader.streams()).map_err(ShmError::Cursor)?;
        reader.set_cursor(cursor);
    }
    let mut formatter = JsonlFormatter::with_receive_time();
    let mut names = StreamName::table(reader.streams());
    let mut events = 0u64;
    let mut backoff = Backoff::new(Duration::from_micros(50), Duration::from_millis(1));
    let mut closed_since: Option<Instant> = None;
    loop {
        if options.limit.is_some_and(|limit| events >= limit) {
            out.flush().map_err(ShmError::Output)?;
            return Ok(TailEnd::Limit);
        }
        let polled = reader.poll()?;
        match polled {
            Poll::Event { epoch, event } => {
                backoff.reset();
                closed_since = None;
                if let Some(line) = formatter.format(&names, &event) {
                    let body = line.trim_end().strip_suffix('}').unwrap_or(line);
                    writeln!(out, "{body},\"epoch\":{epoch}}}").map_err(ShmError::Output)?;
                    events += 1;
                }
            }
            Poll::Generation { generation } => {
                names = StreamName::table(reader.streams());
                writeln!(
                    out,
                    "{{\"event\":\"generation\",\"generation\":{generation}}}"
                )
                .map_err(ShmError::Output)?;
            }
            Poll::Idle => {
                out.flush().map_err(ShmError::Output)?;
                if let (Some(wait), true) = (options.exit_when_closed, reader.is_closed()) {
                    let since = *closed_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= wait {
                        return Ok(TailEnd::Closed);
                    }
                }
                backoff.wait_at_most(Duration::from_millis(1));
            }
        }
    }
}

/// Parses a cursor `STREAM=EPOCH:SEQ`, where STREAM is a stream id, a stream name or
/// `venue/stream`, looked up in `streams`.
///
/// # Errors
///
/// A message saying what is wrong.
pub fn parse_cursor(text: &str, streams: &[StreamName]) -> Result<Cursor, String> {
    let bad = || format!("{text:?} is not STREAM=EPOCH:SEQ");
    let (stream, rest) = text.split_once('=').ok_or_else(bad)?;
    let (epoch, next) = rest.split_once(':').ok_or_else(bad)?;
    let epoch = epoch.parse().map_err(|_| bad())?;
    let next = next.parse().map_err(|_| bad())?;
    let id = crate::publish::wire::stream_id(stream, streams)?;
    Ok(Cursor {
        stream: id,
        epoch,
        next,
    })
}

#[cfg(test)]
mod tests;
