//! Errors raised while reading a capture file.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// Why a capture file could not be read (further).
///
/// Every variant except [`CaptureError::Io`] carries the byte offset, counted in the
/// decompressed stream for compressed files, at which the problem was found, and its message says
/// what was expected there.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The file could not be opened or read.
    #[error("cannot read capture file {path}: {source}")]
    Io {
        /// The file that was being read.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The data ended inside a header or a record.
    #[error("truncated {what} at byte offset {offset} (need {need} bytes, {left} left)")]
    Truncated {
        /// The structure that was cut short, e.g. `pcap record header`.
        what: &'static str,
        /// Where that structure starts.
        offset: u64,
        /// How many bytes the structure needs.
        need: u64,
        /// How many bytes were left from `offset` to the end of the data.
        left: u64,
    },

    /// The magic number is not one this reader knows.
    #[error("bad magic at byte offset {offset}: expected {expected}, found bytes {found:08X}")]
    BadMagic {
        /// Where the magic number was read.
        offset: u64,
        /// The magic numbers that would have been accepted.
        expected: &'static str,
        /// The four bytes found, in file order (first byte most significant).
        found: u32,
    },

    /// A record claims a captured length beyond [`MAX_RECORD_LEN`](super::MAX_RECORD_LEN).
    #[error("absurd {what} length {len} at byte offset {offset} (expected at most {limit} bytes)")]
    AbsurdLength {
        /// The length field, e.g. `pcap record captured`.
        what: &'static str,
        /// Where the record or block holding the field starts.
        offset: u64,
        /// The length found.
        len: u64,
        /// The largest length accepted.
        limit: u64,
    },

    /// A pcapng block length is impossible or inconsistent.
    #[error("bad pcapng block length {len} at byte offset {offset}: expected {expected}")]
    BadBlockLength {
        /// Where the block starts.
        offset: u64,
        /// The block's total length field.
        len: u64,
        /// What the block length should have satisfied.
        expected: String,
    },

    /// A pcapng section header has a major version other than 1.
    #[error(
        "unsupported pcapng version {major}.{minor} at byte offset {offset} (expected major version 1)"
    )]
    UnsupportedVersion {
        /// Where the section header block starts.
        offset: u64,
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },

    /// A pcapng packet block refers to an interface the section never described.
    #[error(
        "pcapng packet block at byte offset {offset} refers to interface {interface}, but the section describes {defined} interface(s)"
    )]
    UnknownInterface {
        /// Where the packet block starts.
        offset: u64,
        /// The interface id used.
        interface: u32,
        /// How many interface description blocks the section had so far.
        defined: u64,
    },

    /// The gzip or zstd stream could not be decompressed: corrupt, cut short, or (zstd)
    /// asking for a larger window than the reader allows.
    #[error(
        "{codec} decompression failed at byte offset {offset} of the decompressed stream (expected complete, valid {codec} data): {source}"
    )]
    Decompress {
        /// `gzip` or `zstd`.
        codec: &'static str,
        /// How many bytes had been decompressed when the failure occurred.
        offset: u64,
        /// The decoder's error.
        #[source]
        source: io::Error,
    },
}

impl CaptureError {
    /// The byte offset (in the decompressed stream) where the problem was found, if the error
    /// concerns the file's contents.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Self::Io { .. } => None,
            Self::Truncated { offset, .. }
            | Self::BadMagic { offset, .. }
            | Self::AbsurdLength { offset, .. }
            | Self::BadBlockLength { offset, .. }
            | Self::UnsupportedVersion { offset, .. }
            | Self::UnknownInterface { offset, .. }
            | Self::Decompress { offset, .. } => Some(*offset),
        }
    }

    /// The same error with its offset moved on by `by` bytes: the parser saw a part of
    /// the stream starting there.
    pub(super) fn shifted(mut self, by: u64) -> Self {
        match &mut self {
            Self::Io { .. } | Self::Decompress { .. } => {}
            Self::Truncated { offset, .. }
            | Self::BadMagic { offset, .. }
            | Self::AbsurdLength { offset, .. }
            | Self::BadBlockLength { offset, .. }
            | Self::UnsupportedVersion { offset, .. }
            | Self::UnknownInterface { offset, .. } => *offset = offset.saturating_add(by),
        }
        self
    }
}
