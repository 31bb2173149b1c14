//! SoupBinTCP 3.0 framing over a TCP byte stream, and GLIMPSE-style
//! end-of-snapshot messages.
//!
//! Each frame is a big-endian `u16` length (counting the type byte and the
//! payload, so never 0), one type byte, then the payload:
//!
//! | type | direction | frame | payload |
//! | --- | --- | --- | --- |
//! | `+` | both | debug | free text |
//! | `A` | server | login accepted | session (10), sequence number (20) |
//! | `J` | server | login rejected | reason (1): `A` not authorized, `S` session not available |
//! | `S` | server | sequenced data | message |
//! | `H` | server | server heartbeat | none |
//! | `Z` | server | end of session | none |
//! | `L` | client | login request | username (6), password (10), session (10), sequence number (20) |
//! | `U` | client | unsequenced data | message |
//! | `R` | client | client heartbeat | none |
//! | `O` | client | logout request | none |
//!
//! Text fields are ASCII; username, password and session are left-justified
//! and padded with spaces (a blank requested session means "the current
//! one"); sequence numbers are decimal, right-justified and padded with
//! spaces. This codec accepts only the canonical form of a sequence number
//! (optional leading spaces, then digits with no leading zero unless the
//! number is 0), so any frame it decodes encodes back to the same bytes.
//!
//! # Reading a stream
//!
//! [`FrameDecoder`] (or [`parse_frame`], with the default limit) looks at the
//! front of the caller's receive buffer: `Ok(None)` means "read more bytes",
//! `Ok(Some((frame, consumed)))` gives one frame borrowing the buffer and how
//! many bytes it used. Any error means the stream has lost its framing and
//! the connection should be dropped.
//!
//! ```
//! use gapless::protocol::soupbintcp::{Frame, FrameDecoder, encode_end_of_snapshot};
//!
//! let mut stream = [0u8; 64];
//! let mut len = Frame::SequencedData(b"snapshot msg").encode(&mut stream)?;
//! len += encode_end_of_snapshot(&mut stream[len..], 1_000)?;
//!
//! let decoder = FrameDecoder::new();
//! // Only part of the first frame has arrived.
//! assert_eq!(decoder.decode(&stream[..5])?, None);
//! let (frame, used) = decoder.decode(&stream[..len])?.unwrap();
//! assert_eq!(frame, Frame::SequencedData(b"snapshot msg"));
//! let (frame, _) = decoder.decode(&stream[used..len])?.unwrap();
//! assert_eq!(frame.end_of_snapshot(), Some(1_000));
//! # Ok::<(), gapless::protocol::ProtocolError>(())
//! ```
//!
//! # Snapshots
//!
//! In our snapshot service a client logs in, then receives sequenced-data
//! frames: every message before the end-of-snapshot message is part of the
//! snapshot, and the end-of-snapshot message (payload `G` followed by a
//! 20-character sequence number, see [`end_of_snapshot_payload`] and
//! [`parse_end_of_snapshot`]) carries the sequence number of the first live
//! message to apply after the snapshot, i.e. where to resume the feed.

use std::iter::FusedIterator;

use crate::protocol::moldudp64::{SESSION_LEN, Session};
use crate::protocol::{EncodeError, ensure_capacity, read_array, write_at};

/// Length of the big-endian length prefix.
pub const LENGTH_PREFIX_LEN: usize = 2;
/// Bytes before the payload: length prefix and type byte.
pub const FRAME_HEADER_LEN: usize = 3;
/// Largest value of the length field (type byte plus payload).
pub const MAX_FRAME_LEN: usize = u16::MAX as usize;
/// Largest payload a frame can carry.
pub const MAX_PAYLOAD_LEN: usize = MAX_FRAME_LEN - 1;
/// Width of a sequence number field.
pub const SEQUENCE_FIELD_LEN: usize = 20;
/// Width of the username field of a login request.
pub const USERNAME_LEN: usize = 6;
/// Width of the password field of a login request.
pub const PASSWORD_LEN: usize = 10;
/// Payload length of a login-accepted frame.
pub const LOGIN_ACCEPTED_LEN: usize = SESSION_LEN + SEQUENCE_FIELD_LEN;
/// Payload length of a login-request frame.
pub const LOGIN_REQUEST_LEN: usize = USERNAME_LEN + PASSWORD_LEN + SESSION_LEN + SEQUENCE_FIELD_LEN;
/// First payload byte of an end-of-snapshot message.
pub const END_OF_SNAPSHOT_TYPE: u8 = b'G';
/// Length of an end-of-snapshot message (sequenced-data payload).
pub const END_OF_SNAPSHOT_LEN: usize = 1 + SEQUENCE_FIELD_LEN;

/// Type bytes of the SoupBinTCP frames.
pub mod frame_type {
    /// `+`: debug text, either direction.
    pub const DEBUG: u8 = b'+';
    /// `A`: login accepted.
    pub const LOGIN_ACCEPTED: u8 = b'A';
    /// `J`: login rejected.
    pub const LOGIN_REJECTED: u8 = b'J';
    /// `S`: sequenced data.
    pub const SEQUENCED_DATA: u8 = b'S';
    /// `H`: server heartbeat.
    pub const SERVER_HEARTBEAT: u8 = b'H';
    /// `Z`: end of session.
    pub const END_OF_SESSION: u8 = b'Z';
    /// `L`: login request.
    pub const LOGIN_REQUEST: u8 = b'L';
    /// `U`: unsequenced data.
    pub const UNSEQUENCED_DATA: u8 = b'U';
    /// `R`: client heartbeat.
    pub const CLIENT_HEARTBEAT: u8 = b'R';
    /// `O`: logout request.
    pub const LOGOUT_REQUEST: u8 = b'O';
}

/// One SoupBinTCP frame, borrowing its payload from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `+`: free-form debug text.
    Debug(&'a [u8]),
    /// `A`: the server accepted the login.
    LoginAccepted(LoginAccepted),
    /// `J`: the server rejected the login.
    LoginRejected(RejectReason),
    /// `S`: one sequenced message.
    SequencedData(&'a [u8]),
    /// `H`: server heartbeat.
    ServerHeartbeat,
    /// `Z`: the server ended the session.
    EndOfSession,
    /// `L`: the client asks to log in.
    LoginRequest(LoginRequest),
    /// `U`: one unsequenced message from the client.
    UnsequencedData(&'a [u8]),
    /// `R`: client heartbeat.
    ClientHeartbeat,
    /// `O`: the client logs out.
    LogoutRequest,
}

/// Payload of a login-accepted (`A`) frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LoginAccepted {
    /// Session the client is logged into.
    pub session: Session,
    /// Sequence number of the next sequenced message the server will send.
    pub sequence: u64,
}

/// Reason carried by a login-rejected (`J`) frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// `A`: bad username or password.
    NotAuthorized,
    /// `S`: the requested session is not available.
    SessionNotAvailable,
    /// Any other code, kept as received.
    Other(u8),
}

impl RejectReason {
    /// Interprets a reason code.
    pub const fn from_code(code: u8) -> Self {
        match code {
            b'A' => Self::NotAuthorized,
            b'S' => Self::SessionNotAvailable,
            other => Self::Other(other),
        }
    }

    /// The reason code on the wire.
    pub const fn code(self) -> u8 {
        match self {
            Self::NotAuthorized => b'A',
            Self::SessionNotAvailable => b'S',
            Self::Other(code) => code,
        }
    }
}

/// Payload of a login-request (`L`) frame, with its text fields as on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LoginRequest {
    /// Username, left-justified and space-padded.
    pub username: [u8; USERNAME_LEN],
    /// Password, left-justified and space-padded.
    pub password: [u8; PASSWORD_LEN],
    /// Requested session; [`Session::BLANK`] asks for the current one.
    pub session: Session,
    /// Requested sequence number of the next message (0: from the most recent).
    pub sequence: u64,
}

impl LoginRequest {
    /// Builds a login request, padding username and password with spaces.
    ///
    /// The username may have at most 6 bytes and the password at most 10,
    /// each printable ASCII without spaces.
    ///
    /// ```
    /// use gapless::protocol::moldudp64::Session;
    /// use gapless::protocol::soupbintcp::LoginRequest;
    ///
    /// let login = LoginRequest::new("trader", "secret", Session::BLANK, 1)?;
    /// assert_eq!(login.password, *b"secret    ");
    /// assert_eq!(login.password(), b"secret");
    /// # Ok::<(), gapless::protocol::EncodeError>(())
    /// ```
    pub fn new(
        username: &str,
        password: &str,
        session: Session,
        sequence: u64,
    ) -> Result<Self, EncodeError> {
        Ok(Self {
            username: pad_field("username", username.as_bytes())?,
            password: pad_field("password", password.as_bytes())?,
            session,
            sequence,
        })
    }

    /// The username without its padding.
    pub fn username(&self) -> &[u8] {
        trim_right(&self.username)
    }

    /// The password without its padding.
    pub fn password(&self) -> &[u8] {
        trim_right(&self.password)
    }
}

impl std::fmt::Debug for LoginRequest {
    /// Shows the username and session; the password is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginRequest")
            .field("username", &String::from_utf8_lossy(self.username()))
            .field("password", &"<hidden>")
            .field("session", &self.session)
            .field("sequence", &self.sequence)
            .finish()
    }
}

fn pad_field<const N: usize>(field: &'static str, value: &[u8]) -> Result<[u8; N], EncodeError> {
    if value.len() > N {
        return Err(EncodeError::FieldTooLong {
            field,
            len: value.len(),
            max: N,
        });
    }
    let mut out = [b' '; N];
    for (index, (slot, &byte)) in out.iter_mut().zip(value).enumerate() {
        if !(0x21..=0x7E).contains(&byte) {
            return Err(EncodeError::InvalidField { field, index, byte });
        }
        *slot = byte;
    }
    Ok(out)
}

fn trim_right(field: &[u8]) -> &[u8] {
    let end = field
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(0, |i| i.saturating_add(1));
    field.get(..end).unwrap_or_default()
}

/// Why the front of a SoupBinTCP stream failed to decode.
///
/// Every variant carries `offset`, the byte position in the input where the
/// problem was found. After any of these the stream's framing is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The length field is 0, so there is not even a type byte.
    #[error("frame at byte {offset} has length 0")]
    ZeroLength {
        /// Position of the length field.
        offset: usize,
    },
    /// The length field exceeds the decoder's maximum.
    #[error("frame at byte {offset} has length {len}, more than the maximum {max}")]
    FrameTooLong {
        /// Position of the length field.
        offset: usize,
        /// Declared length (type byte plus payload).
        len: usize,
        /// The decoder's maximum.
        max: usize,
    },
    /// The type byte is none of the SoupBinTCP types.
    #[error("unknown frame type {frame_type:#04x} at byte {offset}")]
    UnknownType {
        /// Position of the type byte.
        offset: usize,
        /// The type byte.
        frame_type: u8,
    },
    /// A fixed-size frame type has a payload of the wrong length.
    #[error(
        "frame type {frame_type:#04x} at byte {offset} has a {len}-byte payload, expected {expected}"
    )]
    BadLength {
        /// Position of the length field.
        offset: usize,
        /// The type byte.
        frame_type: u8,
        /// Declared payload length.
        len: usize,
        /// Payload length the type requires.
        expected: usize,
    },
    /// A sequence number field is not a canonical right-justified decimal
    /// that fits in a `u64`.
    #[error("invalid sequence number field at byte {offset}")]
    InvalidSequenceNumber {
        /// Position of the 20-byte field.
        offset: usize,
    },
}

impl DecodeError {
    /// Byte position in the input where the problem was found.
    pub const fn offset(&self) -> usize {
        match *self {
            Self::ZeroLength { offset }
            | Self::FrameTooLong { offset, .. }
            | Self::UnknownType { offset, .. }
            | Self::BadLength { offset, .. }
            | Self::InvalidSequenceNumber { offset } => offset,
        }
    }

    /// The same error with its offset moved by `base` bytes.
    const fn shifted(self, base: usize) -> Self {
        let mut e = self;
        match &mut e {
            Self::ZeroLength { offset }
            | Self::FrameTooLong { offset, .. }
            | Self::UnknownType { offset, .. }
            | Self::BadLength { offset, .. }
            | Self::InvalidSequenceNumber { offset } => {
                *offset = offset.saturating_add(base);
            }
        }
        e
    }
}

/// Payload length a frame type requires, `None` for variable-length types,
/// or `Err(())` for an unknown type.
fn fixed_payload_len(frame_type: u8) -> Result<Option<usize>, ()> {
    match frame_type {
        frame_type::DEBUG | frame_type::SEQUENCED_DATA | frame_type::UNSEQUENCED_DATA => Ok(None),
        frame_type::LOGIN_ACCEPTED => Ok(Some(LOGIN_ACCEPTED_LEN)),
        frame_type::LOGIN_REJECTED => Ok(Some(1)),
        frame_type::LOGIN_REQUEST => Ok(Some(LOGIN_REQUEST_LEN)),
        frame_type::SERVER_HEARTBEAT
        | frame_type::END_OF_SESSION
        | frame_type::CLIENT_HEARTBEAT
        | frame_type::LOGOUT_REQUEST => Ok(Some(0)),
        _ => Err(()),
    }
}

/// Decodes frames from the front of a receive buffer.
///
/// It holds no stream state: the caller keeps received bytes in a buffer,
/// calls [`FrameDecoder::decode`] (or iterates [`FrameDecoder::frames`]),
/// drops the consumed bytes and reads more when told to.
///
/// Checks happen as soon as the bytes for them have arrived: the length
/// (zero, over the maximum) with the first 2 bytes, the type and a fixed-size
/// type's length with the third, so a broken stream is caught without
/// waiting for a frame that may never complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameDecoder {
    max_frame_len: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder accepting any length the 16-bit field can express.
    pub const fn new() -> Self {
        Self {
            max_frame_len: MAX_FRAME_LEN,
        }
    }

    /// A decoder refusing frames whose length field (type byte plus payload)
    /// exceeds `max`.
    pub const fn with_max_frame_len(max: u16) -> Self {
        Self {
            max_frame_len: max as usize,
        }
    }

    /// The largest length field this decoder accepts.
    pub const fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// Decodes the frame at the front of `buf`.
    ///
    /// Returns `Ok(None)` when `buf` does not yet hold a whole frame, or the
    /// frame and the number of bytes it occupies.
    pub fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Frame<'a>, usize)>, DecodeError> {
        let Some(len) = read_array::<LENGTH_PREFIX_LEN>(buf, 0) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes(len));
        if len == 0 {
            return Err(DecodeError::ZeroLength { offset: 0 });
        }
        if len > self.max_frame_len {
            return Err(DecodeError::FrameTooLong {
                offset: 0,
                len,
                max: self.max_frame_len,
            });
        }
        let Some([frame_type]) = read_array::<1>(buf, LENGTH_PREFIX_LEN) else {
            return Ok(None);
        };
        let payload_len = len.saturating_sub(1);
        match fixed_payload_len(frame_type) {
            Err(()) => {
                return Err(DecodeError::UnknownType {
                    offset: LENGTH_PREFIX_LEN,
                    frame_type,
                });
            }
            Ok(Some(expected)) if expected != payload_len => {
                return Err(DecodeError::BadLength {
                    offset: 0,
                    frame_type,
                    len: payload_len,
                    expected,
                });
            }
            Ok(_) => {}
        }
        let end = FRAME_HEADER_LEN.saturating_add(payload_len);
        let Some(payload) = buf.get(FRAME_HEADER_LEN..end) else {
            return Ok(None);
        };
        let frame = decode_payload(frame_type, payload)?;
        Ok(Some((frame, end)))
    }

    /// Iterates over the complete frames at the front of `buf`.
    ///
    /// The iterator stops at an incomplete frame, and after yielding an
    /// error; [`Frames::consumed`] then tells how many bytes the complete
    /// frames used.
    pub fn frames<'a>(&self, buf: &'a [u8]) -> Frames<'a> {
        Frames {
            buf,
            consumed: 0,
            decoder: *self,
            done: false,
        }
    }
}

/// Decodes the frame at the front of `buf` with [`FrameDecoder::new`].
///
/// ```
/// use gapless::protocol::soupbintcp::{Frame, parse_frame};
///
/// assert_eq!(parse_frame(&[0, 1])?, None);
/// assert_eq!(parse_frame(&[0, 1, b'H', 0xAA])?, Some((Frame::ServerHeartbeat, 3)));
/// assert!(parse_frame(&[0, 1, b'?']).is_err());
/// # Ok::<(), gapless::protocol::soupbintcp::DecodeError>(())
/// ```
pub fn parse_frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, DecodeError> {
    FrameDecoder::new().decode(buf)
}

/// Builds the frame once its type is known and its payload complete.
/// Offsets in errors are from the start of the frame.
fn decode_payload(frame_type: u8, payload: &[u8]) -> Result<Frame<'_>, DecodeError> {
    let frame = match frame_type {
        frame_type::DEBUG => Frame::Debug(payload),
        frame_type::SEQUENCED_DATA => Frame::SequencedData(payload),
        frame_type::UNSEQUENCED_DATA => Frame::UnsequencedData(payload),
        frame_type::SERVER_HEARTBEAT => Frame::ServerHeartbeat,
        frame_type::END_OF_SESSION => Frame::EndOfSession,
        frame_type::CLIENT_HEARTBEAT => Frame::ClientHeartbeat,
        frame_type::LOGOUT_REQUEST => Frame::LogoutRequest,
        frame_type::LOGIN_REJECTED => {
            let [code] = field::<1>(payload, 0, frame_type)?;
            Frame::LoginRejected(RejectReason::from_code(code))
        }
        frame_type::LOGIN_ACCEPTED => {
            let session = field::<SESSION_LEN>(payload, 0, frame_type)?;
            let sequence = sequence_field(payload, SESSION_LEN, frame_type)?;
            Frame::LoginAccepted(LoginAccepted {
                session: Session(session),
                sequence,
            })
        }
        frame_type::LOGIN_REQUEST => {
            let username = field::<USERNAME_LEN>(payload, 0, frame_type)?;
            let password = field::<PASSWORD_LEN>(payload, USERNAME_LEN, frame_type)?;
            let session = field::<SESSION_LEN>(payload, USERNAME_LEN + PASSWORD_LEN, frame_type)?;
            let sequence = sequence_field(
                payload,
                USERNAME_LEN + PASSWORD_LEN + SESSION_LEN,
                frame_type,
            )?;
            Frame::LoginRequest(LoginRequest {
                username,
                password,
                session: Session(session),
                sequence,
            })
        }
        _ => {
            return Err(DecodeError::UnknownType {
                offset: LENGTH_PREFIX_LEN,
                frame_type,
            });
        }
    };
    Ok(frame)
}

/// A fixed-width payload field; lengths were checked before, so the error
/// is a fallback only.
fn field<const N: usize>(
    payload: &[u8],
    at: usize,
    frame_type: u8,
) -> Result<[u8; N], DecodeError> {
    read_array::<N>(payload, at).ok_or(DecodeError::BadLength {
        offset: 0,
        frame_type,
        len: payload.len(),
        expected: at.saturating_add(N),
    })
}

fn sequence_field(payload: &[u8], at: usize, frame_type: u8) -> Result<u64, DecodeError> {
    let raw = field::<SEQUENCE_FIELD_LEN>(payload, at, frame_type)?;
    parse_sequence(&raw).ok_or(DecodeError::InvalidSequenceNumber {
        offset: FRAME_HEADER_LEN.saturating_add(at),
    })
}

/// Parses a canonical right-justified, space-padded decimal field.
fn parse_sequence(raw: &[u8; SEQUENCE_FIELD_LEN]) -> Option<u64> {
    let start = raw.iter().position(|&b| b != b' ')?;
    let digits = raw.get(start..)?;
    if digits.len() > 1 && digits.first() == Some(&b'0') {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// Formats a number as a right-justified, space-padded decimal field.
fn format_sequence(value: u64) -> [u8; SEQUENCE_FIELD_LEN] {
    let mut out = [b' '; SEQUENCE_FIELD_LEN];
    let mut rest = value;
    // u64::MAX has 20 digits, so the field always has room.
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out
}

impl Frame<'_> {
    /// The frame's type byte.
    pub const fn type_byte(&self) -> u8 {
        match self {
            Self::Debug(_) => frame_type::DEBUG,
            Self::LoginAccepted(_) => frame_type::LOGIN_ACCEPTED,
            Self::LoginRejected(_) => frame_type::LOGIN_REJECTED,
            Self::SequencedData(_) => frame_type::SEQUENCED_DATA,
            Self::ServerHeartbeat => frame_type::SERVER_HEARTBEAT,
            Self::EndOfSession => frame_type::END_OF_SESSION,
            Self::LoginRequest(_) => frame_type::LOGIN_REQUEST,
            Self::UnsequencedData(_) => frame_type::UNSEQUENCED_DATA,
            Self::ClientHeartbeat => frame_type::CLIENT_HEARTBEAT,
            Self::LogoutRequest => frame_type::LOGOUT_REQUEST,
        }
    }

    /// Length of the payload (after the type byte).
    pub const fn payload_len(&self) -> usize {
        match self {
            Self::Debug(p) | Self::SequencedData(p) | Self::UnsequencedData(p) => p.len(),
            Self::LoginAccepted(_) => LOGIN_ACCEPTED_LEN,
            Self::LoginRejected(_) => 1,
            Self::LoginRequest(_) => LOGIN_REQUEST_LEN,
            Self::ServerHeartbeat
            | Self::EndOfSession
            | Self::ClientHeartbeat
            | Self::LogoutRequest => 0,
        }
    }

    /// Length of the whole frame, length prefix included.
    pub const fn encoded_len(&self) -> usize {
        FRAME_HEADER_LEN.saturating_add(self.payload_len())
    }

    /// The sequence number to resume from, when this is a sequenced-data
    /// frame holding an end-of-snapshot message.
    pub fn end_of_snapshot(&self) -> Option<u64> {
        match self {
            Self::SequencedData(payload) => parse_end_of_snapshot(payload),
            _ => None,
        }
    }

    /// Writes the frame to the front of `out` and returns its length.
    ///
    /// Refuses, leaving `out` untouched, when the payload is longer than
    /// 65534 bytes or `out` is too small.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let payload_len = self.payload_len();
        let len = u16::try_from(payload_len.saturating_add(1)).map_err(|_| {
            EncodeError::MessageTooLong {
                len: payload_len,
                max: MAX_PAYLOAD_LEN,
            }
        })?;
        ensure_capacity(out, self.encoded_len())?;
        let mut at = write_at(out, 0, &len.to_be_bytes())?;
        at = write_at(out, at, &[self.type_byte()])?;
        match self {
            Self::Debug(p) | Self::SequencedData(p) | Self::UnsequencedData(p) => {
                at = write_at(out, at, p)?;
            }
            Self::LoginAccepted(accepted) => {
                at = write_at(out, at, accepted.session.as_bytes())?;
                at = write_at(out, at, &format_sequence(accepted.sequence))?;
            }
            Self::LoginRejected(reason) => {
                at = write_at(out, at, &[reason.code()])?;
            }
            Self::LoginRequest(login) => {
                at = write_at(out, at, &login.username)?;
                at = write_at(out, at, &login.password)?;
                at = write_at(out, at, login.session.as_bytes())?;
                at = write_at(out, at, &format_sequence(login.sequence))?;
            }
            Self::ServerHeartbeat
            | Self::EndOfSession
            | Self::ClientHeartbeat
            | Self::LogoutRequest => {}
        }
        Ok(at)
    }
}

/// Iterator over the complete frames at the front of a buffer; see
/// [`FrameDecoder::frames`].
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    buf: &'a [u8],
    consumed: usize,
    decoder: FrameDecoder,
    done: bool,
}

impl Frames<'_> {
    /// Bytes used by the frames yielded so far.
    pub const fn consumed(&self) -> usize {
        self.consumed
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = self.buf.get(self.consumed..).unwrap_or_default();
        match self.decoder.decode(rest) {
            Ok(Some((frame, used))) => {
                self.consumed = self.consumed.saturating_add(used);
                Some(Ok(frame))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e.shifted(self.consumed)))
            }
        }
    }
}

impl FusedIterator for Frames<'_> {}

/// The end-of-snapshot message: `G` then `next_sequence` as a
/// right-justified, space-padded 20-character decimal.
///
/// Sent as the payload of a sequenced-data frame after the last snapshot
/// message; `next_sequence` is the sequence number to resume the feed from.
pub fn end_of_snapshot_payload(next_sequence: u64) -> [u8; END_OF_SNAPSHOT_LEN] {
    let mut out = [END_OF_SNAPSHOT_TYPE; END_OF_SNAPSHOT_LEN];
    for (slot, b) in out.iter_mut().skip(1).zip(format_sequence(next_sequence)) {
        *slot = b;
    }
    out
}

/// Writes a whole sequenced-data frame holding the end-of-snapshot message
/// and returns its length (24); refuses, leaving `out` untouched, when `out`
/// is too small.
pub fn encode_end_of_snapshot(out: &mut [u8], next_sequence: u64) -> Result<usize, EncodeError> {
    Frame::SequencedData(&end_of_snapshot_payload(next_sequence)).encode(out)
}

/// Recognises an end-of-snapshot message in a sequenced-data payload and
/// returns the sequence number to resume from.
///
/// ```
/// use gapless::protocol::soupbintcp::{end_of_snapshot_payload, parse_end_of_snapshot};
///
/// assert_eq!(parse_end_of_snapshot(&end_of_snapshot_payload(42)), Some(42));
/// assert_eq!(parse_end_of_snapshot(b"Gnot a number"), None);
/// ```
pub fn parse_end_of_snapshot(payload: &[u8]) -> Option<u64> {
    let (&kind, rest) = payload.split_first()?;
    if kind != END_OF_SNAPSHOT_TYPE {
        return None;
    }
    let raw: &[u8; SEQUENCE_FIELD_LEN] = rest.try_into().ok()?;
    parse_sequence(raw)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use crate::protocol::XorShift;

    fn encode(frame: &Frame<'_>) -> Vec<u8> {
        let mut out = vec![0u8; frame.encoded_len()];
        assert_eq!(frame.encode(&mut out), Ok(out.len()));
        out
    }

    fn frame_bytes(frame_type: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = ((payload.len() + 1) as u16).to_be_bytes().to_vec();
        v.push(frame_type);
        v.extend_from_slice(payload);
        v
    }

    fn all_frames() -> Vec<Frame<'static>> {
        vec![
            Frame::Debug(b"hello debug"),
            Frame::LoginAccepted(LoginAccepted {
                session: "SESS01".parse().unwrap(),
                sequence: 123,
            }),
            Frame::LoginRejected(RejectReason::NotAuthorized),
            Frame::LoginRejected(RejectReason::SessionNotAvailable),
            Frame::LoginRejected(RejectReason::Other(b'?')),
            Frame::SequencedData(b"payload"),
            Frame::SequencedData(b""),
            Frame::ServerHeartbeat,
            Frame::EndOfSession,
            Frame::LoginRequest(
                LoginRequest::new("user", "pass", Session::BLANK, u64::MAX).unwrap(),
            ),
            Frame::UnsequencedData(b"order"),
            Frame::ClientHeartbeat,
            Frame::LogoutRequest,
        ]
    }

    #[test]
    fn wire_layout() {
        assert_eq!(encode(&Frame::ServerHeartbeat), [0, 1, b'H']);
        assert_eq!(
            encode(&Frame::SequencedData(b"ab")),
            [0, 3, b'S', b'a', b'b']
        );
        let accepted = encode(&Frame::LoginAccepted(LoginAccepted {
            session: "ABC".parse().unwrap(),
            sequence: 1,
        }));
        assert_eq!(&accepted[..3], &[0, 31, b'A']);
        assert_eq!(&accepted[3..13], b"ABC       ");
        assert_eq!(&accepted[13..], b"                   1");
        let login = encode(&Frame::LoginRequest(
            LoginRequest::new("ab", "cd", "S".parse().unwrap(), 0).unwrap(),
        ));
        assert_eq!(&login[..3], &[0, 47, b'L']);
        assert_eq!(
            &login[3..],
            &b"ab    cd        S                            0"[..]
        );
        assert_eq!(
            encode(&Frame::LoginRejected(RejectReason::SessionNotAvailable)),
            [0, 2, b'J', b'S']
        );
    }

    #[test]
    fn round_trip_all_types() {
        for frame in all_frames() {
            let bytes = encode(&frame);
            let (decoded, used) = parse_frame(&bytes).unwrap().unwrap();
            assert_eq!(decoded, frame);
            assert_eq!(used, bytes.len());
            assert_eq!(decoded.type_byte(), bytes[2]);
        }
    }

    #[test]
    fn reject_reason_codes() {
        for code in 0..=255u8 {
            assert_eq!(RejectReason::from_code(code).code(), code);
        }
        assert_eq!(RejectReason::from_code(b'A'), RejectReason::NotAuthorized);
        assert_eq!(
            RejectReason::from_code(b'S'),
            RejectReason::SessionNotAvailable
        );
    }

    #[test]
    fn incremental_byte_by_byte() {
        let mut stream = Vec::new();
        for frame in all_frames() {
            stream.extend(encode(&frame));
        }
        let decoder = FrameDecoder::new();
        let mut got = Vec::new();
        let mut start = 0;
        for end in 0..=stream.len() {
            if let Some((frame, used)) = decoder.decode(&stream[start..end]).unwrap() {
                assert_eq!(start + used, end);
                got.push(frame);
                start = end;
            }
        }
        assert_eq!(got, all_frames());
        assert_eq!(start, stream.len());
    }

    #[test]
    fn frames_iterator() {
        let mut stream = Vec::new();
        for frame in all_frames() {
            stream.extend(encode(&frame));
        }
        let full = stream.len();
        stream.extend_from_slice(&[0, 5, b'S', 1]); // incomplete
        let mut frames = FrameDecoder::default().frames(&stream);
        let got: Vec<_> = frames.by_ref().map(Result::unwrap).collect();
        assert_eq!(got, all_frames());
        assert_eq!(frames.consumed(), full);
        assert_eq!(frames.next(), None);

        stream.truncate(full);
        stream.extend_from_slice(&[0, 1, b'#']);
        let mut frames = FrameDecoder::new().frames(&stream);
        let last = frames.by_ref().last().unwrap();
        assert_eq!(
            last,
            Err(DecodeError::UnknownType {
                offset: full + 2,
                frame_type: b'#'
            })
        );
        assert_eq!(frames.consumed(), full);
        assert_eq!(frames.next(), None);
    }

    #[test]
    fn needs_more_bytes() {
        assert_eq!(parse_frame(&[]), Ok(None));
        assert_eq!(parse_frame(&[0]), Ok(None));
        assert_eq!(parse_frame(&[0, 4]), Ok(None));
        assert_eq!(parse_frame(&[0, 4, b'S', 1, 2]), Ok(None));
        assert_eq!(
            parse_frame(&[0, 4, b'S', 1, 2, 3]),
            Ok(Some((Frame::SequencedData(&[1, 2, 3]), 6)))
        );
    }

    #[test]
    fn error_zero_length() {
        let err = parse_frame(&[0, 0, b'H']).unwrap_err();
        assert_eq!(err, DecodeError::ZeroLength { offset: 0 });
        assert_eq!(err.offset(), 0);
        assert_eq!(parse_frame(&[0, 0]), Err(err));
    }

    #[test]
    fn error_frame_too_long() {
        let decoder = FrameDecoder::with_max_frame_len(10);
        assert_eq!(decoder.max_frame_len(), 10);
        let ok = frame_bytes(b'S', &[7; 9]);
        assert!(decoder.decode(&ok).unwrap().is_some());
        let long = frame_bytes(b'S', &[7; 10]);
        // Refused from the length field alone.
        let err = decoder.decode(&long[..2]).unwrap_err();
        assert_eq!(
            err,
            DecodeError::FrameTooLong {
                offset: 0,
                len: 11,
                max: 10
            }
        );
        assert_eq!(err.offset(), 0);
        assert_eq!(FrameDecoder::new().max_frame_len(), MAX_FRAME_LEN);
    }

    #[test]
    fn error_unknown_type() {
        for t in 0..=255u8 {
            let bytes = [0, 1, t];
            let known = b"+AJSHZLURO".contains(&t);
            match parse_frame(&bytes) {
                Err(DecodeError::UnknownType { offset, frame_type }) => {
                    assert!(!known);
                    assert_eq!((offset, frame_type), (2, t));
                }
                _ => assert!(known, "type {t}"),
            }
        }
    }

    #[test]
    fn error_bad_length() {
        let cases: [(u8, usize, usize); 8] = [
            (b'H', 1, 0),
            (b'Z', 2, 0),
            (b'R', 1, 0),
            (b'O', 5, 0),
            (b'J', 0, 1),
            (b'J', 2, 1),
            (b'A', 29, 30),
            (b'L', 47, 46),
        ];
        for (t, len, expected) in cases {
            let bytes = frame_bytes(t, &vec![b'1'; len]);
            // Refused as soon as the type byte is there.
            let err = parse_frame(&bytes[..3]).unwrap_err();
            assert_eq!(
                err,
                DecodeError::BadLength {
                    offset: 0,
                    frame_type: t,
                    len,
                    expected
                }
            );
            assert_eq!(parse_frame(&bytes), Err(err));
            assert_eq!(err.offset(), 0);
        }
    }

    #[test]
    fn error_invalid_sequence_number() {
        let bad_fields: [&[u8; 20]; 7] = [
            b"                    ",
            b"                  1 ",
            b"00000000000000000001",
            b"                  01",
            b"                 1x2",
            b"18446744073709551616",
            b"                 -12",
        ];
        for field in bad_fields {
            let mut payload = b"SESSION1  ".to_vec();
            payload.extend_from_slice(field);
            let err = parse_frame(&frame_bytes(b'A', &payload)).unwrap_err();
            assert_eq!(err, DecodeError::InvalidSequenceNumber { offset: 13 });
            assert_eq!(err.offset(), 13);

            let mut payload = b"user  pass      SESSION1  ".to_vec();
            payload.extend_from_slice(field);
            let err = parse_frame(&frame_bytes(b'L', &payload)).unwrap_err();
            assert_eq!(err, DecodeError::InvalidSequenceNumber { offset: 29 });
        }
    }

    #[test]
    fn sequence_field_format() {
        assert_eq!(&format_sequence(0), b"                   0");
        assert_eq!(&format_sequence(u64::MAX), b"18446744073709551615");
        for v in [0, 1, 9, 10, 99, 1_000_000, u64::MAX / 3, u64::MAX] {
            assert_eq!(parse_sequence(&format_sequence(v)), Some(v));
        }
        assert_eq!(parse_sequence(b"18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn login_request_fields() {
        let login = LoginRequest::new("abcdef", "0123456789", "S".parse().unwrap(), 5).unwrap();
        assert_eq!(login.username(), b"abcdef");
        assert_eq!(login.password(), b"0123456789");
        let blank = LoginRequest::new("", "", Session::BLANK, 0).unwrap();
        assert_eq!(blank.username(), b"");
        assert!(blank.session.is_blank());
        assert_eq!(
            LoginRequest::new("abcdefg", "", Session::BLANK, 0),
            Err(EncodeError::FieldTooLong {
                field: "username",
                len: 7,
                max: 6
            })
        );
        assert_eq!(
            LoginRequest::new("a", "01234567890", Session::BLANK, 0),
            Err(EncodeError::FieldTooLong {
                field: "password",
                len: 11,
                max: 10
            })
        );
        assert_eq!(
            LoginRequest::new("a b", "", Session::BLANK, 0),
            Err(EncodeError::InvalidField {
                field: "username",
                index: 1,
                byte: b' '
            })
        );
        assert_eq!(
            LoginRequest::new("a", "p\n", Session::BLANK, 0),
            Err(EncodeError::InvalidField {
                field: "password",
                index: 1,
                byte: b'\n'
            })
        );
        let debug = format!("{login:?}");
        assert!(debug.contains("abcdef"));
        assert!(!debug.contains("0123456789"));
    }

    #[test]
    fn max_size_frame() {
        let payload = vec![0x5A; MAX_PAYLOAD_LEN];
        let frame = Frame::SequencedData(&payload);
        let bytes = encode(&frame);
        assert_eq!(bytes.len(), 2 + MAX_FRAME_LEN);
        assert_eq!(&bytes[..2], &[0xFF, 0xFF]);
        assert_eq!(parse_frame(&bytes), Ok(Some((frame, bytes.len()))));

        let too_long = vec![0u8; MAX_PAYLOAD_LEN + 1];
        let mut out = vec![0xEE; 70_000];
        assert_eq!(
            Frame::UnsequencedData(&too_long).encode(&mut out),
            Err(EncodeError::MessageTooLong {
                len: MAX_PAYLOAD_LEN + 1,
                max: MAX_PAYLOAD_LEN
            })
        );
        assert!(out.iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn encode_refuses_small_buffer_untouched() {
        for frame in all_frames() {
            let mut out = vec![0xEEu8; frame.encoded_len() - 1];
            assert_eq!(
                frame.encode(&mut out),
                Err(EncodeError::BufferTooSmall {
                    needed: frame.encoded_len(),
                    available: frame.encoded_len() - 1
                })
            );
            assert!(out.iter().all(|&b| b == 0xEE));
        }
        let mut out = [0xEEu8; 23];
        assert!(encode_end_of_snapshot(&mut out, 1).is_err());
        assert_eq!(out, [0xEE; 23]);
    }

    #[test]
    fn end_of_snapshot() {
        let payload = end_of_snapshot_payload(987_654);
        assert_eq!(&payload, b"G              987654");
        assert_eq!(parse_end_of_snapshot(&payload), Some(987_654));
        assert_eq!(
            parse_end_of_snapshot(&end_of_snapshot_payload(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_end_of_snapshot(&end_of_snapshot_payload(0)), Some(0));
        assert_eq!(parse_end_of_snapshot(b""), None);
        assert_eq!(parse_end_of_snapshot(b"G"), None);
        assert_eq!(parse_end_of_snapshot(b"X              987654"), None);
        assert_eq!(parse_end_of_snapshot(b"G              9876543"), None);
        assert_eq!(parse_end_of_snapshot(b"G             98765 4"), None);

        let mut out = [0u8; 32];
        let n = encode_end_of_snapshot(&mut out, 55).unwrap();
        assert_eq!(n, 24);
        let (frame, used) = parse_frame(&out[..n]).unwrap().unwrap();
        assert_eq!(used, 24);
        assert_eq!(frame.end_of_snapshot(), Some(55));
        assert_eq!(Frame::UnsequencedData(&payload).end_of_snapshot(), None);
        assert_eq!(Frame::SequencedData(b"Gx").end_of_snapshot(), None);
    }

    #[test]
    fn snapshot_stream() {
        let mut stream = Vec::new();
        for msg in [&b"book 1"[..], b"book 2", b"book 3"] {
            stream.extend(encode(&Frame::SequencedData(msg)));
        }
        let mut tail = [0u8; 24];
        encode_end_of_snapshot(&mut tail, 501).unwrap();
        stream.extend_from_slice(&tail);
        let mut snapshot = Vec::new();
        let mut resume = None;
        for frame in FrameDecoder::new().frames(&stream) {
            let frame = frame.unwrap();
            if let Some(next) = frame.end_of_snapshot() {
                resume = Some(next);
                break;
            }
            if let Frame::SequencedData(msg) = frame {
                snapshot.push(msg);
            }
        }
        assert_eq!(snapshot.len(), 3);
        assert_eq!(resume, Some(501));
    }

    #[test]
    fn error_display() {
        let err = DecodeError::UnknownType {
            offset: 2,
            frame_type: b'#',
        };
        assert_eq!(err.to_string(), "unknown frame type 0x23 at byte 2");
    }

    #[test]
    fn fuzz_parse_never_panics_and_reencodes() {
        let mut rng = XorShift::new(0xDEAD_BEEF_CAFE_F00D);
        let templates = all_frames();
        let (mut frames_ok, mut errors) = (0u32, 0u32);
        for i in 0..10_000 {
            let mut stream = Vec::new();
            if i % 3 == 0 {
                let len = rng.below(48);
                stream = rng.bytes(len);
                // Bias towards plausible small lengths.
                if let Some(b) = stream.first_mut() {
                    *b = 0;
                }
            } else {
                for _ in 0..rng.below(5) {
                    let t = &templates[rng.below(templates.len())];
                    stream.extend(encode(t));
                }
                let mut tail = [0u8; 24];
                encode_end_of_snapshot(&mut tail, rng.next_u64()).unwrap();
                stream.extend_from_slice(&tail);
                for _ in 0..rng.below(3) {
                    let at = rng.below(stream.len());
                    stream[at] = match rng.below(3) {
                        0 => b' ',
                        1 => b'0' + rng.below(10) as u8,
                        _ => rng.next_u64() as u8,
                    };
                }
                let cut = stream.len() - rng.below(4).min(stream.len());
                stream.truncate(cut);
            }
            let decoder = if i % 5 == 0 {
                FrameDecoder::with_max_frame_len(rng.below(64) as u16)
            } else {
                FrameDecoder::new()
            };
            let mut pos = 0;
            loop {
                match decoder.decode(&stream[pos..]) {
                    Ok(Some((frame, used))) => {
                        assert!(used >= FRAME_HEADER_LEN);
                        assert_eq!(encode(&frame), &stream[pos..pos + used]);
                        pos += used;
                        frames_ok += 1;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        assert!(e.offset() < stream.len() - pos);
                        errors += 1;
                        break;
                    }
                }
            }
        }
        assert!(frames_ok > 5_000, "too few frames: {frames_ok}");
        assert!(errors > 1_000, "too few errors: {errors}");
    }
}
