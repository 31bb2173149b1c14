//! Sinks: consumers that take events off a [`publish::channel`] queue and
//! hand them on, each on threads of its own so the rx thread never waits.
//!
//! - [`unix`]: a unix-socket fan-out server with one queue per client.
//! - [`tail`](mod@tail): the client of that server, printing JSON lines.
//! - [`jsonl`]: a JSON-lines file writer.
//!
//! # Unix-socket wire format
//!
//! A connection carries a sequence of records, each a length and a body:
//!
//! | offset | field | type |
//! | --- | --- | --- |
//! | 0 | body length (at most [`MAX_RECORD_LEN`]) | u32 little-endian |
//! | 4 | body | that many bytes |
//!
//! The first byte(s) of the body say what the record is:
//!
//! | record | body (offset: field, type) | when |
//! | --- | --- | --- |
//! | hello | 0: magic `GPLS`, 4: version u16 = 1, 6: stream count u16, 8: for each stream id from 0: venue length u16, venue UTF-8, stream length u16, stream UTF-8 | first, exactly once |
//! | event | an [`Event`] in the binary encoding of [`crate::publish::event`]: tag 1 to 8 | any number, in queue order |
//! | cut-off | 0: tag `0xF0`, 1: reason length u16, 3: reason UTF-8 | last, when the server cut the client off |
//!
//! All integers are little-endian. A connection ends with a cut-off record
//! and EOF when the client fell behind (an [`Event::Overrun`] for the lost
//! events may come just before the cut-off), with EOF alone when the server
//! stopped. Any other [`Event::Overrun`] means the server's own input queue
//! lost events.
//!
//! [`publish::channel`]: crate::publish::channel

pub mod jsonl;
pub mod pcap;
pub mod tail;
pub mod unix;

use std::io::{self, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::publish::jsonl::StreamNames;
use crate::publish::{Consumer, DecodeError, Event};
use thiserror::Error;

pub use jsonl::{JsonlSink, JsonlSinkHandle, JsonlSinkStats};
pub use tail::{Record, RecordReader, TailEnd, TailError, TailSummary, tail};
pub use unix::{UnixSink, UnixSinkHandle, UnixSinkStats};

/// Magic bytes opening the hello record.
pub const HELLO_MAGIC: [u8; 4] = *b"GPLS";
/// Version of the wire format in the hello record.
pub const WIRE_VERSION: u16 = 1;
/// Tag opening a cut-off record.
pub const CUT_OFF_TAG: u8 = 0xF0;
/// Longest record body a reader accepts.
pub const MAX_RECORD_LEN: u32 = 16 * 1024 * 1024;
/// How long a connection writer keeps trying to hand over its last bytes
/// to a client that is cut off or whose server stops.
pub const FINAL_FLUSH: Duration = Duration::from_secs(2);
/// A connection writer batches records up to this many bytes a write.
const BATCH_BYTES: usize = 64 * 1024;

/// The venue and stream names of one stream id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamName {
    /// Venue name.
    pub venue: String,
    /// Stream name.
    pub stream: String,
}

impl StreamName {
    /// Names a stream.
    pub fn new(venue: &str, stream: &str) -> Self {
        Self {
            venue: venue.to_string(),
            stream: stream.to_string(),
        }
    }

    /// The table the JSON-lines formatter takes, indexed by stream id.
    pub fn table(names: &[Self]) -> StreamNames {
        let mut table = StreamNames::new();
        for (id, name) in (0..=u16::MAX).zip(names) {
            table.set(id, &name.venue, &name.stream);
        }
        table
    }
}

/// Why bytes on a sink connection are not a valid record.
#[derive(Debug, Error)]
pub enum WireError {
    /// Reading or writing the connection failed.
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    /// The connection ended inside a record.
    #[error("connection closed inside a record")]
    Truncated,
    /// A record declares more than [`MAX_RECORD_LEN`] bytes.
    #[error("record of {0} bytes exceeds the limit")]
    TooLong(u32),
    /// The first record is not a hello.
    #[error("the server did not open with a hello record")]
    NoHello,
    /// The hello names a version this reader does not know.
    #[error("unsupported wire version {0}")]
    UnsupportedVersion(u16),
    /// A hello or cut-off record is malformed.
    #[error("malformed {0} record")]
    Malformed(&'static str),
    /// An event record does not decode.
    #[error("bad event record: {0}")]
    Event(#[from] DecodeError),
    /// There are more streams, or longer names, than the hello can carry.
    #[error("stream table does not fit a hello record")]
    TableTooLarge,
}

/// Appends the framed hello record for `streams` to `out`.
///
/// # Errors
///
/// [`WireError::TableTooLarge`] past `u16::MAX` streams or name bytes.
pub fn encode_hello(streams: &[StreamName], out: &mut Vec<u8>) -> Result<(), WireError> {
    let count = u16::try_from(streams.len()).map_err(|_| WireError::TableTooLarge)?;
    let mut body = Vec::with_capacity(8 + streams.len() * 16);
    body.extend_from_slice(&HELLO_MAGIC);
    body.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    body.extend_from_slice(&count.to_le_bytes());
    for name in streams {
        for text in [&name.venue, &name.stream] {
            let len = u16::try_from(text.len()).map_err(|_| WireError::TableTooLarge)?;
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(text.as_bytes());
        }
    }
    frame(&body, out)
}

/// Appends a framed cut-off record to `out`; a reason longer than
/// `u16::MAX` bytes is shortened at a character boundary.
pub fn encode_cut_off(reason: &str, out: &mut Vec<u8>) {
    let mut end = reason.len().min(usize::from(u16::MAX));
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let text = reason.get(..end).unwrap_or_default();
    let len = u16::try_from(text.len()).unwrap_or(0);
    let mut body = Vec::with_capacity(3 + text.len());
    body.push(CUT_OFF_TAG);
    body.extend_from_slice(&len.to_le_bytes());
    body.extend_from_slice(text.as_bytes());
    // At most 3 + 65535 bytes: always framed.
    let _ = frame(&body, out);
}

/// Appends a framed event record to `out`, reusing its capacity.
///
/// # Errors
///
/// [`WireError::TooLong`] when the event exceeds [`MAX_RECORD_LEN`].
pub fn encode_event(event: &Event<'_>, out: &mut Vec<u8>) -> Result<(), WireError> {
    let len = event.encoded_len();
    let prefix = u32::try_from(len).unwrap_or(u32::MAX);
    if prefix > MAX_RECORD_LEN {
        return Err(WireError::TooLong(prefix));
    }
    let start = out.len();
    out.extend_from_slice(&prefix.to_le_bytes());
    out.resize(start + 4 + len, 0);
    let written = out.get_mut(start + 4..).map(|body| event.encode_into(body));
    if !matches!(written, Some(Ok(n)) if n == len) {
        out.truncate(start);
        return Err(WireError::TooLong(prefix));
    }
    Ok(())
}

fn frame(body: &[u8], out: &mut Vec<u8>) -> Result<(), WireError> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= MAX_RECORD_LEN)
        .ok_or(WireError::TableTooLarge)?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    Ok(())
}

/// Why a sink could not start or did not finish cleanly.
#[derive(Debug, Error)]
pub enum SinkError {
    /// An I/O operation failed.
    #[error("sink I/O error: {0}")]
    Io(#[from] io::Error),
    /// Another server is listening on the socket path.
    #[error("socket {0} is in use by a live server")]
    SocketInUse(PathBuf),
    /// The path exists and is not a socket; it is left alone.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// The hello could not be built.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A sink thread panicked.
    #[error("the {0} thread panicked")]
    ThreadPanicked(&'static str),
}

/// The idle strategy of sink threads: sleep, doubling from `min` to `max`
/// while there is nothing to do. Never spins; every wait is bounded.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    current: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) const fn new(min: Duration, max: Duration) -> Self {
        Self {
            current: min,
            min,
            max,
        }
    }

    /// Back to the shortest sleep, after doing some work.
    pub(crate) fn reset(&mut self) {
        self.current = self.min;
    }

    /// Sleeps for the current interval, at most `limit`, and lengthens it.
    pub(crate) fn wait_at_most(&mut self, limit: Duration) {
        thread::sleep(self.current.min(limit));
        self.current = (self.current * 2).min(self.max);
    }
}

/// Flags between the unix sink's dispatcher and one connection writer.
#[derive(Debug, Default)]
pub(crate) struct ClientState {
    /// Set by the dispatcher, before it drops the producer, on overflow.
    pub(crate) cut: AtomicBool,
    /// Set by the writer as its last act.
    pub(crate) closed: AtomicBool,
}

/// How a writer's main loop ended.
enum End {
    /// The queue is drained and the producer gone: the sink stops.
    Drained,
    /// The dispatcher cut the client off.
    CutOff,
    /// The client went away, or did not read before the deadline.
    Gone,
}

/// The writing side of the wire format: one client's thread, from its
/// queue to its socket. The socket must have a short write timeout, so a
/// blocked write returns to look at the flags.
pub(crate) struct ConnectionWriter {
    stream: UnixStream,
    queue: Consumer,
    state: Arc<ClientState>,
    bytes_written: Arc<AtomicU64>,
    /// Framed records; `..sent` are written.
    out: Vec<u8>,
    sent: usize,
}

impl ConnectionWriter {
    /// A writer that opens the connection with the framed `hello`.
    pub(crate) fn new(
        stream: UnixStream,
        queue: Consumer,
        state: Arc<ClientState>,
        bytes_written: Arc<AtomicU64>,
        hello: &[u8],
    ) -> Self {
        let mut out = Vec::with_capacity(BATCH_BYTES * 2);
        out.extend_from_slice(hello);
        Self {
            stream,
            queue,
            state,
            bytes_written,
            out,
            sent: 0,
        }
    }

    /// Writes until the queue is abandoned and drained, the client is cut
    /// off or gone; then closes the connection and sets `closed`.
    pub(crate) fn run(mut self) {
        if let End::CutOff = self.pump() {
            let reason = format!(
                "client queue of {} bytes overflowed: the client read too slowly; \
                 events after the last one received were lost",
                self.queue.capacity()
            );
            encode_cut_off(&reason, &mut self.out);
            self.flush_until(Instant::now() + FINAL_FLUSH);
        }
        // The peer may already be gone.
        let _ = self.stream.shutdown(Shutdown::Both);
        self.state.closed.store(true, Ordering::Release);
    }

    fn pump(&mut self) -> End {
        let mut backoff = Backoff::new(Duration::from_micros(50), Duration::from_millis(1));
        let mut deadline = None;
        loop {
            if self.state.cut.load(Ordering::Acquire) {
                return End::CutOff;
            }
            let abandoned = self.queue.is_abandoned();
            if abandoned
                && Instant::now() >= *deadline.get_or_insert_with(|| Instant::now() + FINAL_FLUSH)
            {
                return End::Gone;
            }
            self.fill();
            if self.sent < self.out.len() {
                match self.write_some() {
                    Ok(true) => backoff.reset(),
                    Ok(false) => {}
                    Err(_) => return End::Gone,
                }
            } else if abandoned && self.queue.is_empty() {
                // The producer is dropped after the cut flag is set: seeing
                // it gone means the flag is visible.
                if self.state.cut.load(Ordering::Acquire) {
                    return End::CutOff;
                }
                return End::Drained;
            } else if !abandoned {
                backoff.wait_at_most(Duration::MAX);
            }
        }
    }

    /// Moves queued events into the batch, up to [`BATCH_BYTES`].
    fn fill(&mut self) {
        while self.out.len() < BATCH_BYTES {
            let out = &mut self.out;
            // An event too large for a record cannot be sent; it is skipped.
            let popped = self.queue.pop(|event| {
                let _ = encode_event(&event, out);
            });
            if popped.is_none() {
                break;
            }
        }
    }

    /// One write of the unwritten bytes; false when it timed out.
    fn write_some(&mut self) -> io::Result<bool> {
        let pending = self.out.get(self.sent..).unwrap_or_default();
        match self.stream.write(pending) {
            Ok(0) => Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                self.sent += n;
                self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                if self.sent >= self.out.len() {
                    self.out.clear();
                    self.sent = 0;
                }
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes what is batched until done, an error or `deadline`.
    fn flush_until(&mut self, deadline: Instant) {
        while self.sent < self.out.len() && Instant::now() < deadline {
            if self.write_some().is_err() {
                return;
            }
        }
    }
}
