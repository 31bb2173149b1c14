//! The unix-socket wire format: what the unix sink (`sinks::unix`) writes
//! and its client ([`crate::client::unix`]) reads.
//!
//! # Records
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
//! | event | an [`Event`] in the binary encoding of [`crate::publish::event`]: tag 1 to 9 | any number, in queue order |
//! | cut-off | 0: tag `0xF0`, 1: reason length u16, 3: reason UTF-8 | last, when the server cut the client off |
//!
//! A client may send one record of its own, the **resume request**, as the first bytes it
//! writes, within [`RESUME_WAIT`] of connecting:
//!
//! | offset | field | type |
//! | --- | --- | --- |
//! | 0 | body length | u32 little-endian |
//! | 4 | magic `GPLR` | 4 bytes |
//! | 8 | version = 1 | u16 |
//! | 10 | cursor count (at most [`MAX_RESUME_CURSORS`]) | u16 |
//! | 12 | for each cursor: stream id u16, epoch label length u8, the label (UTF-8, as the stream's last `epoch` event gave it; empty for a stream that had none), next sequence needed u64 | |
//!
//! A client that sends one is *resuming*: for each stream it names, the server replays what
//! its history still holds from that cursor on (events without a sequence at the cursor's
//! `next` included), and reports what the history no longer holds as an [`Event::Overrun`]
//! of the stream with the lost range (`to` = `u64::MAX` when the loss runs into a later
//! epoch); other streams start where the stream was when the client connected. Before the
//! first event of each stream, and wherever the history moves a stream to another epoch
//! without its `epoch` event, it gets an [`Event::Epoch`] with the label, so it always knows
//! the label its next cursor names. A client that sends nothing gets every event from the
//! moment it connected. Either way the history is read first, then the live stream, with
//! nothing twice and nothing left out between them; a client lapped by the history while it
//! is replayed gets [`Event::Overrun`] markers with the exact ranges.
//!
//! All integers are little-endian. A connection ends with a cut-off record
//! and EOF when the client fell behind (an [`Event::Overrun`] for the lost
//! events may come just before the cut-off), with EOF alone when the server
//! stopped. Any other [`Event::Overrun`] means the server's own input queue
//! lost events.

use std::io;
use std::time::Duration;

use thiserror::Error;

use crate::publish::jsonl::StreamNames;
use crate::publish::{DecodeError, Event};

/// Magic bytes opening a client's resume request.
pub const RESUME_MAGIC: [u8; 4] = *b"GPLR";
/// Version of the resume request.
pub const RESUME_VERSION: u16 = 1;
/// Cursors one resume request carries at most.
pub const MAX_RESUME_CURSORS: usize = 4096;
/// How long after a connection the server waits for a resume request before it takes the
/// client as one that sends none.
pub const RESUME_WAIT: Duration = Duration::from_millis(50);

/// Where a resuming client is in one stream: the epoch's label and the next sequence it
/// needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResumeCursor {
    /// The stream id (from the hello).
    pub stream: u16,
    /// The label of the stream's epoch, as its `epoch` event gave it; empty when it had none.
    pub label: String,
    /// The next sequence needed.
    pub next: u64,
}

impl ResumeCursor {
    /// Parses `STREAM=LABEL:SEQ` (the label may be empty, and may hold `:`; the last one
    /// ends it), where `STREAM` is as [`stream_id`] takes it.
    ///
    /// # Errors
    ///
    /// A message naming what is wrong.
    pub fn parse(text: &str, names: &[StreamName]) -> Result<Self, String> {
        let (stream, rest) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: expected STREAM=LABEL:SEQ"))?;
        let (label, next) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?}: expected STREAM=LABEL:SEQ"))?;
        let next = next
            .parse::<u64>()
            .map_err(|_| format!("{text:?}: {next:?} is not a sequence number"))?;
        let id = stream_id(stream, names)?;
        if label.len() > usize::from(u8::MAX) {
            return Err(format!("{text:?}: the label is longer than 255 bytes"));
        }
        Ok(Self {
            stream: id,
            label: label.to_string(),
            next,
        })
    }
}

/// The id of the stream `text` names in `names`: a stream id, a stream name (when only one
/// stream has it) or `venue/stream`.
///
/// # Errors
///
/// A message when no stream, or more than one, has the name.
pub fn stream_id(text: &str, names: &[StreamName]) -> Result<u16, String> {
    if let Ok(id) = text.parse::<u16>() {
        return Ok(id);
    }
    let matches: Vec<usize> = names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.stream == text || format!("{}/{}", n.venue, n.stream) == text)
        .map(|(i, _)| i)
        .collect();
    match matches.as_slice() {
        [i] => u16::try_from(*i).map_err(|_| format!("stream {text:?}: id out of range")),
        [] => Err(format!("no stream {text:?}")),
        _ => Err(format!("stream {text:?} is ambiguous: use venue/stream")),
    }
}

/// Appends a framed resume request for `cursors` to `out`.
///
/// # Errors
///
/// [`WireError::Malformed`] for more than [`MAX_RESUME_CURSORS`] cursors or a label longer
/// than 255 bytes.
pub fn encode_resume(cursors: &[ResumeCursor], out: &mut Vec<u8>) -> Result<(), WireError> {
    if cursors.len() > MAX_RESUME_CURSORS {
        return Err(WireError::Malformed("resume request"));
    }
    let mut body = Vec::with_capacity(8 + cursors.len() * 24);
    body.extend_from_slice(&RESUME_MAGIC);
    body.extend_from_slice(&RESUME_VERSION.to_le_bytes());
    body.extend_from_slice(&(cursors.len() as u16).to_le_bytes());
    for c in cursors {
        let len =
            u8::try_from(c.label.len()).map_err(|_| WireError::Malformed("resume request"))?;
        body.extend_from_slice(&c.stream.to_le_bytes());
        body.push(len);
        body.extend_from_slice(c.label.as_bytes());
        body.extend_from_slice(&c.next.to_le_bytes());
    }
    frame(&body, out)
}

/// Decodes a resume request's body (without its length prefix). Never panics.
///
/// # Errors
///
/// [`WireError::Malformed`] for anything but a whole version-1 request.
pub fn decode_resume(body: &[u8]) -> Result<Vec<ResumeCursor>, WireError> {
    let malformed = || WireError::Malformed("resume request");
    let mut rest = body.strip_prefix(&RESUME_MAGIC).ok_or_else(malformed)?;
    let mut take = |n: usize| -> Result<&[u8], WireError> {
        let (head, tail) = rest.split_at_checked(n).ok_or_else(malformed)?;
        rest = tail;
        Ok(head)
    };
    let u16_at = |b: &[u8]| {
        b.try_into()
            .map(u16::from_le_bytes)
            .map_err(|_| malformed())
    };
    if u16_at(take(2)?)? != RESUME_VERSION {
        return Err(malformed());
    }
    let count = usize::from(u16_at(take(2)?)?);
    if count > MAX_RESUME_CURSORS {
        return Err(malformed());
    }
    let mut cursors = Vec::with_capacity(count);
    for _ in 0..count {
        let stream = u16_at(take(2)?)?;
        let len = usize::from(*take(1)?.first().ok_or_else(malformed)?);
        let label = std::str::from_utf8(take(len)?).map_err(|_| malformed())?;
        let next = take(8)?
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| malformed())?;
        cursors.push(ResumeCursor {
            stream,
            label: label.to_string(),
            next,
        });
    }
    if !rest.is_empty() {
        return Err(malformed());
    }
    Ok(cursors)
}

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
