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
//! | event | an [`Event`] in the binary encoding of [`crate::publish::event`]: tag 1 to 8 | any number, in queue order |
//! | cut-off | 0: tag `0xF0`, 1: reason length u16, 3: reason UTF-8 | last, when the server cut the client off |
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
