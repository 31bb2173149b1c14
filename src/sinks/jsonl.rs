//! The JSON-lines file sink.
//!
//! A thread drains one [`Consumer`], formats each event with
//! [`JsonlFormatter`] and writes it through a [`BufWriter`]. The buffer is
//! flushed at least every [`FLUSH_INTERVAL`] while anything is unflushed,
//! when the producer goes away, and on [`JsonlSinkHandle::stop`], which
//! first drains everything queued at that moment: an event the rx thread
//! pushed before the stop is on disk when `stop` returns.
//!
//! A file sink ([`JsonlSink::create_rotating`]) rotates as logrotate does: once the file holds
//! [`Rotation::max_bytes`] or is [`Rotation::max_age`] old, it is renamed `PATH.1` (an older
//! `PATH.1` becomes `PATH.2`, and so on), files past [`Rotation::keep`] are removed, and a new
//! `PATH` is started. Rotation happens between lines, so every file holds whole lines. Each
//! record carries its receive time, `recv_ns`.
//!
//! ```ignore
//! use crate::publish::jsonl::StreamNames;
//! use crate::publish::{Event, channel};
//! use crate::sinks::JsonlSink;
//!
//! let (mut producer, consumer) = channel(64 * 1024, 1);
//! let mut names = StreamNames::new();
//! names.set(0, "nasdaq", "itch-a");
//! let sink = JsonlSink::start(Vec::new(), consumer, names)?;
//! let gap = Event::Gap { stream: 0, from: 5, to: 6 };
//! let _ = producer.push(&gap);
//! let stats = sink.stop()?;
//! assert_eq!(stats.lines, 1);
//! # Ok::<(), crate::sinks::SinkError>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::publish::Consumer;
use crate::publish::jsonl::{JsonlFormatter, StreamNames};

use crate::sinks::{Backoff, SinkError};

/// Longest time a written line stays in the buffer.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// Events written before the thread looks at the clock and its flags.
const BATCH: usize = 1024;
/// Events drained at most once asked to stop (the producer may still push).
const STOP_DRAIN_LIMIT: u64 = 1 << 22;
const BUFFER_BYTES: usize = 64 * 1024;
const IDLE_MIN: Duration = Duration::from_micros(100);
const IDLE_MAX: Duration = Duration::from_millis(10);

/// Counters of a JSON-lines sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JsonlSinkStats {
    /// Events taken off the queue.
    pub events: u64,
    /// Lines written (heartbeats have none).
    pub lines: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Flushes of the buffer.
    pub flushes: u64,
    /// Times the file was rotated.
    pub rotations: u64,
}

/// When a JSON-lines file is rotated and how many old files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate once the file holds this many bytes.
    pub max_bytes: u64,
    /// Rotate once the file is this old (since it was opened); `None`: by size only.
    pub max_age: Option<Duration>,
    /// Rotated files kept, `PATH.1` to `PATH.keep`; 0 keeps none.
    pub keep: u32,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    events: AtomicU64,
    lines: AtomicU64,
    bytes: AtomicU64,
    flushes: AtomicU64,
    rotations: AtomicU64,
}

impl Shared {
    fn snapshot(&self) -> JsonlSinkStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        JsonlSinkStats {
            events: get(&self.events),
            lines: get(&self.lines),
            bytes: get(&self.bytes),
            flushes: get(&self.flushes),
            rotations: get(&self.rotations),
        }
    }
}

/// Writes a consumer queue as JSON lines.
#[derive(Debug)]
pub struct JsonlSink;

impl JsonlSink {
    /// Appends to the file at `path` (created if missing), without rotation or receive times.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or the thread cannot start.
    #[cfg(test)]
    pub fn create(
        path: impl AsRef<Path>,
        input: Consumer,
        names: StreamNames,
    ) -> Result<JsonlSinkHandle, SinkError> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Self::start(file, input, names)
    }

    /// Appends to the file at `path` (created if missing), with receive times, rotating it
    /// as `rotation` says.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or the thread cannot start.
    pub fn create_rotating(
        path: impl AsRef<Path>,
        rotation: Rotation,
        input: Consumer,
        names: StreamNames,
    ) -> Result<JsonlSinkHandle, SinkError> {
        let path = path.as_ref().to_path_buf();
        let file = open_append(&path)?;
        let written = file.metadata().map_or(0, |m| m.len());
        let rotating = Rotating {
            path,
            rotation,
            written,
            opened: Instant::now(),
        };
        Self::spawn(
            Box::new(file),
            Some(rotating),
            JsonlFormatter::with_receive_time(),
            input,
            names,
        )
    }

    /// Writes to `out`, on a thread of its own.
    ///
    /// # Errors
    ///
    /// When the thread cannot start.
    #[cfg(test)]
    pub fn start<W: Write + Send + 'static>(
        out: W,
        input: Consumer,
        names: StreamNames,
    ) -> Result<JsonlSinkHandle, SinkError> {
        Self::spawn(Box::new(out), None, JsonlFormatter::new(), input, names)
    }

    fn spawn(
        out: Box<dyn Write + Send>,
        rotating: Option<Rotating>,
        formatter: JsonlFormatter,
        input: Consumer,
        names: StreamNames,
    ) -> Result<JsonlSinkHandle, SinkError> {
        let shared = Arc::new(Shared::default());
        let mut writer = Writer {
            out: BufWriter::with_capacity(BUFFER_BYTES, out),
            input,
            names,
            formatter,
            shared: Arc::clone(&shared),
            dirty: false,
            last_flush: Instant::now(),
            rotating,
        };
        let thread = thread::Builder::new()
            .name("gapless-jsonl-sink".into())
            .spawn(move || writer.run())?;
        Ok(JsonlSinkHandle {
            shared,
            thread: Some(thread),
        })
    }
}

/// A running JSON-lines sink; dropping it stops it like
/// [`JsonlSinkHandle::stop`], discarding the result.
#[derive(Debug)]
pub struct JsonlSinkHandle {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl JsonlSinkHandle {
    /// Drains what is queued, flushes, and returns the final counters.
    ///
    /// # Errors
    ///
    /// The first write or flush error (the thread stops at it), or
    /// [`SinkError::ThreadPanicked`].
    pub fn stop(mut self) -> Result<JsonlSinkStats, SinkError> {
        self.shutdown()?;
        Ok(self.shared.snapshot())
    }

    fn shutdown(&mut self) -> Result<(), SinkError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.shared.stop.store(true, Ordering::Release);
        match thread.join() {
            Ok(result) => result.map_err(SinkError::from),
            Err(_) => Err(SinkError::ThreadPanicked("jsonl sink")),
        }
    }
}

impl Drop for JsonlSinkHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The file being written and when it is due to rotate.
struct Rotating {
    path: PathBuf,
    rotation: Rotation,
    /// Bytes in the current file.
    written: u64,
    /// When the current file was opened.
    opened: Instant,
}

impl Rotating {
    fn due(&self) -> bool {
        self.written >= self.rotation.max_bytes
            || self
                .rotation
                .max_age
                .is_some_and(|age| self.written > 0 && self.opened.elapsed() >= age)
    }

    /// `PATH.n`.
    fn numbered(&self, n: u32) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// Shifts the kept files up by one, removes the one past `keep`, moves the current file
    /// to `PATH.1` (or removes it when none are kept) and opens a new one.
    fn rotate(&mut self) -> io::Result<File> {
        let keep = self.rotation.keep;
        let gone = |r: io::Result<()>| match r {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        gone(std::fs::remove_file(self.numbered(keep.max(1))))?;
        for n in (1..keep).rev() {
            gone(std::fs::rename(self.numbered(n), self.numbered(n + 1)))?;
        }
        if keep == 0 {
            gone(std::fs::remove_file(&self.path))?;
        } else {
            std::fs::rename(&self.path, self.numbered(1))?;
        }
        self.written = 0;
        self.opened = Instant::now();
        open_append(&self.path)
    }
}

/// The sink thread's state.
struct Writer {
    out: BufWriter<Box<dyn Write + Send>>,
    input: Consumer,
    names: StreamNames,
    formatter: JsonlFormatter,
    shared: Arc<Shared>,
    dirty: bool,
    last_flush: Instant,
    rotating: Option<Rotating>,
}

impl Writer {
    fn run(&mut self) -> io::Result<()> {
        let mut backoff = Backoff::new(IDLE_MIN, IDLE_MAX);
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                self.drain(STOP_DRAIN_LIMIT)?;
                break;
            }
            // Read before draining: once it is seen, whatever the producer
            // wrote is visible, so an empty queue after the drain is final.
            let abandoned = self.input.is_abandoned();
            let moved = self.drain(BATCH as u64)?;
            if abandoned && self.input.is_empty() {
                break;
            }
            if self.rotating.as_ref().is_some_and(Rotating::due) {
                self.rotate()?;
            }
            let since = self.last_flush.elapsed();
            if self.dirty && since >= FLUSH_INTERVAL {
                self.flush()?;
            }
            if moved == 0 {
                let until_flush = if self.dirty {
                    FLUSH_INTERVAL.saturating_sub(since)
                } else {
                    IDLE_MAX
                };
                backoff.wait_at_most(until_flush.max(IDLE_MIN));
            } else {
                backoff.reset();
            }
        }
        self.flush()
    }

    /// Writes up to `limit` queued events; returns how many.
    fn drain(&mut self, limit: u64) -> io::Result<u64> {
        let mut moved = 0;
        let (mut lines, mut bytes) = (0, 0);
        while moved < limit {
            let (formatter, names, out) = (&mut self.formatter, &self.names, &mut self.out);
            let popped = self
                .input
                .pop(|event| match formatter.format(names, &event) {
                    Some(line) => out.write_all(line.as_bytes()).map(|()| line.len() as u64),
                    None => Ok(0),
                });
            let Some(written) = popped else {
                break;
            };
            let written = written?;
            moved += 1;
            if written > 0 {
                lines += 1;
                bytes += written;
                if let Some(r) = &mut self.rotating {
                    r.written += written;
                    if r.due() {
                        self.rotate()?;
                    }
                }
            }
        }
        if moved > 0 {
            self.dirty |= lines > 0;
            self.shared.events.fetch_add(moved, Ordering::Relaxed);
            self.shared.lines.fetch_add(lines, Ordering::Relaxed);
            self.shared.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(moved)
    }

    /// Flushes what the current file has, then rotates it; between two lines.
    fn rotate(&mut self) -> io::Result<()> {
        let Some(rotating) = &mut self.rotating else {
            return Ok(());
        };
        self.out.flush()?;
        let file = rotating.rotate()?;
        self.out = BufWriter::with_capacity(BUFFER_BYTES, Box::new(file));
        self.shared.rotations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.last_flush = Instant::now();
        if self.dirty {
            self.dirty = false;
            self.shared.flushes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
