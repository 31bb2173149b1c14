//! Wire codecs for the sequenced feeds that `gapless` consumes.
//!
//! | module | transport | byte order | what it carries |
//! | --- | --- | --- | --- |
//! | [`moldudp64`] | UDP multicast / unicast | big-endian | downstream packets, re-request packets |
//! | [`soupbintcp`] | TCP | big-endian | SoupBinTCP 3.0 frames, GLIMPSE-style snapshots |
//! | [`iex_tp`] | UDP multicast | little-endian | IEX-TP segments |
//!
//! Every codec follows the same rules:
//!
//! * **Decoding borrows.** A decoded packet or frame holds `&'a [u8]` slices of
//!   the input; iterating over its messages never allocates.
//! * **Decoding validates up front.** `decode` checks the whole input before
//!   returning `Ok`, so walking the messages afterwards cannot fail.
//! * **Decoding never panics.** Malformed input yields a typed error that
//!   carries the byte offset (from the start of the input) where the problem
//!   was found; see each codec's `DecodeError::offset`.
//! * **Encoding writes into caller-owned buffers.** When the output does not
//!   fit, the encoder returns an [`EncodeError`] and leaves the buffer exactly
//!   as it was.
//!
//! Each codec has its own `DecodeError`; all encoders share [`EncodeError`].
//! [`ProtocolError`] wraps any of them for callers that handle several codecs
//! in one place.
//!
//! ```
//! use gapless::protocol::ProtocolError;
//! use gapless::protocol::moldudp64::Packet;
//!
//! fn first_message(datagram: &[u8]) -> Result<Option<&[u8]>, ProtocolError> {
//!     Ok(Packet::decode(datagram)?.messages().next())
//! }
//!
//! assert!(first_message(b"too short").is_err());
//! ```

#![deny(
    missing_docs,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub mod binance;
pub mod blocks;
pub mod iex_tp;
pub mod moldudp64;
pub mod soupbintcp;

pub use iex_tp::{
    DecodeError as IexDecodeError, Packet as IexPacket, PacketWriter as IexPacketWriter,
};
pub use moldudp64::{
    DecodeError as MoldDecodeError, Packet as MoldPacket, PacketKind,
    PacketWriter as MoldPacketWriter, Request as MoldRequest, Session, SessionError,
};
pub use soupbintcp::{
    DecodeError as SoupDecodeError, Frame as SoupFrame, FrameDecoder as SoupFrameDecoder,
};

/// Why an encoder refused to write.
///
/// Whatever the variant, the output buffer was left untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The output buffer is shorter than the encoding.
    #[error("output buffer too small: need {needed} bytes, have {available}")]
    BufferTooSmall {
        /// Bytes the encoding needs.
        needed: usize,
        /// Bytes the buffer offers.
        available: usize,
    },
    /// A single message or frame payload is longer than its length field can express.
    #[error("message of {len} bytes exceeds the maximum of {max}")]
    MessageTooLong {
        /// Length of the rejected message.
        len: usize,
        /// Largest length the format allows.
        max: usize,
    },
    /// The packet already holds as many messages as its count field allows.
    #[error("packet already holds the maximum of {max} messages")]
    TooManyMessages {
        /// Largest message count the format allows.
        max: usize,
    },
    /// The packet's payload would exceed what its payload length field can express.
    #[error("packet payload of {len} bytes exceeds the maximum of {max}")]
    PayloadTooLong {
        /// Payload length the packet would reach.
        len: usize,
        /// Largest payload length the format allows.
        max: usize,
    },
    /// The sequence number of the message after the packet would not fit in a `u64`.
    #[error("sequence number overflows u64")]
    SequenceOverflow,
    /// A fixed-width text field was given a longer value.
    #[error("field `{field}` is {len} bytes, at most {max} allowed")]
    FieldTooLong {
        /// Name of the field.
        field: &'static str,
        /// Length of the rejected value.
        len: usize,
        /// Width of the field.
        max: usize,
    },
    /// A text field was given a byte outside printable ASCII, or a space inside a
    /// field that is space-padded.
    #[error("field `{field}` has an invalid byte {byte:#04x} at index {index}")]
    InvalidField {
        /// Name of the field.
        field: &'static str,
        /// Index of the offending byte within the value.
        index: usize,
        /// The offending byte.
        byte: u8,
    },
}

/// Any error from the codecs in this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A MoldUDP64 packet failed to decode.
    #[error("MoldUDP64: {0}")]
    MoldUdp64(#[from] moldudp64::DecodeError),
    /// A SoupBinTCP frame failed to decode.
    #[error("SoupBinTCP: {0}")]
    SoupBinTcp(#[from] soupbintcp::DecodeError),
    /// An IEX-TP segment failed to decode.
    #[error("IEX-TP: {0}")]
    IexTp(#[from] iex_tp::DecodeError),
    /// A MoldUDP64/SoupBinTCP session name was invalid.
    #[error("session: {0}")]
    Session(#[from] SessionError),
    /// An encoder refused to write.
    #[error("encode: {0}")]
    Encode(#[from] EncodeError),
}

impl ProtocolError {
    /// Byte offset at which a decode error was found, from the start of the input.
    ///
    /// `None` for encode and session-name errors.
    pub fn offset(&self) -> Option<usize> {
        match self {
            Self::MoldUdp64(e) => Some(e.offset()),
            Self::SoupBinTcp(e) => Some(e.offset()),
            Self::IexTp(e) => Some(e.offset()),
            Self::Session(_) | Self::Encode(_) => None,
        }
    }
}

/// Reads `N` bytes at `at`, or `None` when the input is too short.
fn read_array<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..)?.first_chunk::<N>().copied()
}

/// Copies `src` into `out` at `at` and returns the position just after it.
///
/// Encoders check the full length before writing anything, so the `BufferTooSmall`
/// returned here when `src` does not fit is only a defensive fallback.
fn write_at(out: &mut [u8], at: usize, src: &[u8]) -> Result<usize, EncodeError> {
    let end = at
        .checked_add(src.len())
        .ok_or(EncodeError::BufferTooSmall {
            needed: usize::MAX,
            available: out.len(),
        })?;
    let available = out.len();
    let dst = out.get_mut(at..end).ok_or(EncodeError::BufferTooSmall {
        needed: end,
        available,
    })?;
    dst.copy_from_slice(src);
    Ok(end)
}

/// Fails with [`EncodeError::BufferTooSmall`] unless `out` holds at least `needed` bytes.
fn ensure_capacity(out: &[u8], needed: usize) -> Result<(), EncodeError> {
    if out.len() < needed {
        Err(EncodeError::BufferTooSmall {
            needed,
            available: out.len(),
        })
    } else {
        Ok(())
    }
}

/// Small deterministic generator for the fuzz-style tests of the codecs.
#[cfg(test)]
struct XorShift(u64);

#[cfg(test)]
impl XorShift {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform-ish value in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_u64() as u8;
        }
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn protocol_error_offsets() {
        let e: ProtocolError = moldudp64::Packet::decode(&[0; 5]).unwrap_err().into();
        assert_eq!(e.offset(), Some(5));
        let e: ProtocolError = EncodeError::SequenceOverflow.into();
        assert_eq!(e.offset(), None);
        assert!(e.to_string().contains("overflow"));
    }

    #[test]
    fn write_at_refuses_out_of_range() {
        let mut buf = [7u8; 4];
        assert_eq!(
            write_at(&mut buf, 3, &[1, 2]),
            Err(EncodeError::BufferTooSmall {
                needed: 5,
                available: 4
            })
        );
        assert_eq!(
            write_at(&mut buf, usize::MAX, &[1]),
            Err(EncodeError::BufferTooSmall {
                needed: usize::MAX,
                available: 4
            })
        );
        assert_eq!(buf, [7; 4]);
        assert_eq!(write_at(&mut buf, 2, &[1, 2]), Ok(4));
        assert_eq!(buf, [7, 7, 1, 2]);
    }

    #[test]
    fn read_array_bounds() {
        assert_eq!(read_array::<2>(&[1, 2, 3], 1), Some([2, 3]));
        assert_eq!(read_array::<2>(&[1, 2, 3], 2), None);
        assert_eq!(read_array::<2>(&[1, 2, 3], 9), None);
    }
}
