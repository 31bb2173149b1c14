//! The client of the unix-socket sink: prints the events it receives as
//! JSON lines.
//!
//! [`tail`] connects, reads the hello record for the stream names, then
//! formats every event with [`JsonlFormatter`] (heartbeats have no JSON-lines
//! form and print nothing). It returns on EOF, on a cut-off record (whose
//! reason it also prints to stderr) or once `limit` events were received.
//! Nothing read from the socket can make it panic: malformed input is an
//! error.
//!
//! The reading side of the wire format lives here too: [`Record::decode`]
//! and [`RecordReader`], for clients other than `tail`; [`connect`] sends a resume request
//! and [`Progress`] keeps the cursors a client would resume from (see
//! [`crate::publish::wire`] for what the server does with them).
//!
//! ```no_run
//! use std::io;
//!
//! use gapless::client::unix::{TailEnd, tail};
//!
//! let summary = tail("/run/gapless/feed.sock", io::stdout().lock(), Some(1000))?;
//! if matches!(summary.end, TailEnd::CutOff(_)) {
//!     eprintln!("fell behind after {} events", summary.events);
//! }
//! # Ok::<(), gapless::client::unix::TailError>(())
//! ```

use std::io::{self, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::publish::Event;
use crate::publish::jsonl::JsonlFormatter;
use thiserror::Error;

use crate::publish::wire::{
    CUT_OFF_TAG, HELLO_MAGIC, MAX_RECORD_LEN, ResumeCursor, StreamName, WIRE_VERSION, WireError,
    encode_resume,
};
use crate::sinks::shm::next_after;

/// Why [`tail`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailEnd {
    /// The server closed the connection (it stopped).
    Eof,
    /// The server cut this client off, for this reason.
    CutOff(String),
    /// The limit of events was reached.
    Limit,
}

/// What [`tail`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailSummary {
    /// The stream names from the hello.
    pub streams: Vec<StreamName>,
    /// Events received.
    pub events: u64,
    /// JSON lines written.
    pub lines: u64,
    /// Why it stopped.
    pub end: TailEnd,
    /// Where each stream had got to: the cursors to resume from (`tail_from`'s own, for
    /// streams nothing was received of).
    pub cursors: Vec<ResumeCursor>,
}

/// Why [`tail`] failed.
#[derive(Debug, Error)]
pub enum TailError {
    /// The socket could not be reached.
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// The socket path.
        path: String,
        /// What the OS said.
        source: io::Error,
    },
    /// The connection carried something that is not the wire format.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(io::Error),
}

/// Connects to the sink at `path` and writes each event received to `out`
/// as a JSON line, until EOF, a cut-off, or `limit` events.
///
/// `out` is written line by line and flushed before returning; wrap it in a
/// `BufWriter` when lines need not appear as they arrive.
///
/// # Errors
///
/// [`TailError::Connect`] when nothing listens at `path`,
/// [`TailError::Wire`] for a connection error or malformed input (including
/// a missing hello and EOF inside a record), [`TailError::Output`] when
/// `out` fails.
pub fn tail(
    path: impl AsRef<Path>,
    out: impl Write,
    limit: Option<u64>,
) -> Result<TailSummary, TailError> {
    tail_from(path, out, limit, None)
}

/// [`tail`], resuming: with `Some(cursors)` it sends a resume request (an empty list
/// resumes nothing, but makes the server tell each stream's epoch label), and each line
/// gets the stream's `"epoch"` label, so that the last line of a stream is a cursor.
///
/// # Errors
///
/// As [`tail`].
pub fn tail_from(
    path: impl AsRef<Path>,
    mut out: impl Write,
    limit: Option<u64>,
    resume: Option<&[ResumeCursor]>,
) -> Result<TailSummary, TailError> {
    let (mut reader, streams) = connect(path, resume)?;
    let names = StreamName::table(&streams);
    let mut progress = Progress::new(resume.unwrap_or_default());
    let mut formatter = JsonlFormatter::new();
    let mut summary = TailSummary {
        streams,
        events: 0,
        lines: 0,
        end: TailEnd::Eof,
        cursors: Vec::new(),
    };
    loop {
        if limit.is_some_and(|limit| summary.events >= limit) {
            summary.end = TailEnd::Limit;
            break;
        }
        match reader.next_record()? {
            None => break,
            Some(Record::Event(event)) => {
                summary.events += 1;
                progress.observe(&event);
                if let Some(line) = formatter.format(&names, &event) {
                    match (resume.is_some(), progress.label(event.stream())) {
                        (true, Some(label)) => {
                            let mut text = line
                                .trim_end()
                                .strip_suffix('}')
                                .unwrap_or(line)
                                .to_string();
                            text.push_str(",\"epoch\":");
                            crate::publish::jsonl::push_json_string(&mut text, label);
                            writeln!(out, "{text}}}")
                        }
                        _ => out.write_all(line.as_bytes()),
                    }
                    .map_err(TailError::Output)?;
                    summary.lines += 1;
                }
            }
            Some(Record::CutOff(reason)) => {
                eprintln!("gapless tail: cut off by the server: {reason}");
                summary.end = TailEnd::CutOff(reason.to_string());
                break;
            }
            Some(Record::Hello(_)) => return Err(WireError::Malformed("repeated hello").into()),
        }
    }
    out.flush().map_err(TailError::Output)?;
    summary.cursors = progress.cursors();
    Ok(summary)
}

/// Connects to the sink at `path`, sends a resume request when `resume` is `Some`, and
/// reads the hello: a reader positioned at the first event, and the stream names.
///
/// # Errors
///
/// [`TailError::Connect`] when nothing listens at `path`; [`TailError::Wire`] when the
/// request cannot be sent or the hello does not come.
pub fn connect(
    path: impl AsRef<Path>,
    resume: Option<&[ResumeCursor]>,
) -> Result<(RecordReader<BufReader<UnixStream>>, Vec<StreamName>), TailError> {
    let path = path.as_ref();
    let mut stream = UnixStream::connect(path).map_err(|source| TailError::Connect {
        path: path.display().to_string(),
        source,
    })?;
    if let Some(cursors) = resume {
        let mut request = Vec::new();
        encode_resume(cursors, &mut request)?;
        stream.write_all(&request).map_err(WireError::Io)?;
    }
    let mut reader = RecordReader::new(BufReader::with_capacity(64 * 1024, stream));
    let streams = match reader.next_record()? {
        Some(Record::Hello(streams)) => streams,
        _ => return Err(WireError::NoHello.into()),
    };
    Ok((reader, streams))
}

/// The cursors a client would resume from, kept from the events it reads: per stream, the
/// label of the last `epoch` event and the next sequence after the last sequenced event.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    streams: Vec<Option<(String, u64)>>,
    /// Stands in for a stream id the table could not grow to (never).
    spare: Option<(String, u64)>,
}

impl Progress {
    /// Starting from `cursors` (those of a resume request).
    pub fn new(cursors: &[ResumeCursor]) -> Self {
        let mut p = Self::default();
        for c in cursors {
            *p.slot(c.stream) = Some((c.label.clone(), c.next));
        }
        p
    }

    fn slot(&mut self, stream: u16) -> &mut Option<(String, u64)> {
        let i = usize::from(stream);
        if self.streams.len() <= i {
            self.streams.resize(i + 1, None);
        }
        match self.streams.get_mut(i) {
            Some(slot) => slot,
            None => &mut self.spare,
        }
    }

    /// Takes one event into account.
    pub fn observe(&mut self, event: &Event<'_>) {
        let slot = self.slot(event.stream());
        match event {
            Event::Epoch { label, .. } => {
                *slot = Some((String::from_utf8_lossy(label).into_owned(), 0));
            }
            _ => {
                let (_, next) = slot.get_or_insert_with(|| (String::new(), 0));
                *next = next_after(event, *next).max(*next);
            }
        }
    }

    /// The label of `stream`'s epoch, once known.
    pub fn label(&self, stream: u16) -> Option<&str> {
        self.streams
            .get(usize::from(stream))?
            .as_ref()
            .map(|(label, _)| label.as_str())
    }

    /// The cursor of every stream known.
    pub fn cursors(&self) -> Vec<ResumeCursor> {
        self.streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let (label, next) = s.as_ref()?;
                Some(ResumeCursor {
                    stream: u16::try_from(i).ok()?,
                    label: label.clone(),
                    next: *next,
                })
            })
            .collect()
    }
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// The stream names, by stream id.
    Hello(Vec<StreamName>),
    /// An event.
    Event(Event<'a>),
    /// The server cut the client off, for this reason.
    CutOff(&'a str),
}

impl<'a> Record<'a> {
    /// Decodes a record body (without its length prefix). Never panics.
    ///
    /// # Errors
    ///
    /// A [`WireError`] naming what is malformed.
    pub fn decode(body: &'a [u8]) -> Result<Self, WireError> {
        if let Some(rest) = body.strip_prefix(&HELLO_MAGIC) {
            return decode_hello(rest).map(Record::Hello);
        }
        if let Some(rest) = body.strip_prefix(&[CUT_OFF_TAG]) {
            let mut cursor = Cursor(rest);
            let reason = cursor.string().ok_or(WireError::Malformed("cut-off"))?;
            return Ok(Record::CutOff(reason));
        }
        let (event, used) = Event::decode(body)?;
        if used != body.len() {
            return Err(WireError::Malformed("event"));
        }
        Ok(Record::Event(event))
    }
}

pub(crate) fn decode_hello(rest: &[u8]) -> Result<Vec<StreamName>, WireError> {
    let malformed = || WireError::Malformed("hello");
    let mut cursor = Cursor(rest);
    let version = cursor.u16().ok_or_else(malformed)?;
    if version != WIRE_VERSION {
        return Err(WireError::UnsupportedVersion(version));
    }
    let count = cursor.u16().ok_or_else(malformed)?;
    let mut names = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let venue = cursor.string().ok_or_else(malformed)?;
        let stream = cursor.string().ok_or_else(malformed)?;
        names.push(StreamName::new(venue, stream));
    }
    if !cursor.0.is_empty() {
        return Err(malformed());
    }
    Ok(names)
}

/// Reads little-endian fields off a byte slice, checked.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn u16(&mut self) -> Option<u16> {
        let (head, rest) = self.0.split_first_chunk::<2>()?;
        self.0 = rest;
        Some(u16::from_le_bytes(*head))
    }

    fn string(&mut self) -> Option<&'a str> {
        let len = usize::from(self.u16()?);
        let (text, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        std::str::from_utf8(text).ok()
    }
}

/// Reads framed records from a connection into a reusable buffer.
#[derive(Debug)]
pub struct RecordReader<R> {
    inner: R,
    body: Vec<u8>,
}

impl<R: Read> RecordReader<R> {
    /// A reader over `inner` (wrap a socket in a `BufReader`).
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            body: Vec::new(),
        }
    }

    /// The next record, or `None` on EOF between records.
    ///
    /// # Errors
    ///
    /// I/O errors, EOF inside a record, an oversized or malformed record.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, WireError> {
        let mut prefix = [0u8; 4];
        if !read_full(&mut self.inner, &mut prefix, true)? {
            return Ok(None);
        }
        let len = u32::from_le_bytes(prefix);
        if len > MAX_RECORD_LEN {
            return Err(WireError::TooLong(len));
        }
        self.body.resize(
            usize::try_from(len).map_err(|_| WireError::TooLong(len))?,
            0,
        );
        read_full(&mut self.inner, &mut self.body, false)?;
        Record::decode(&self.body).map(Some)
    }
}

/// Fills `buf`; false when EOF came before any byte and `eof_ok`.
fn read_full(reader: &mut impl Read, buf: &mut [u8], eof_ok: bool) -> Result<bool, WireError> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|rest| !rest.is_empty()) {
        match reader.read(rest) {
            Ok(0) if filled == 0 && eof_ok => return Ok(false),
            Ok(0) => return Err(WireError::Truncated),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}
