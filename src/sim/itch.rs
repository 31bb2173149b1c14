//! Message sources: Nasdaq's ITCH sample-file format, or synthetic messages.
//!
//! The sample-file format is a plain concatenation of messages, each a
//! big-endian `u16` length followed by that many bytes. [`ItchFile`] loads
//! and checks a whole file up front; the publisher loops over it when it
//! needs more messages than the file holds.
//!
//! Synthetic messages ([`synthetic_message`]) have the lengths of real ITCH
//! 5.0 messages and carry the sequence number they were published under, so
//! a test can check any message it receives ([`synthetic_sequence`]):
//!
//! | offset | length | field |
//! | --- | --- | --- |
//! | 0 | 1 | ITCH type letter (`A`, `F`, `D`, `U`, `E`, `X`, `C`, `P`) |
//! | 1 | 8 | sequence number, big-endian |
//! | 9 | 2 | instrument id, big-endian |
//! | 11 | rest | filler derived from the sequence number |

use std::fs;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest sample file [`ItchFile::open`] loads.
pub const MAX_FILE_LEN: u64 = 256 * 1024 * 1024;

/// Bytes before the filler of a synthetic message.
pub const SYNTHETIC_HEADER_LEN: usize = 11;

/// ITCH 5.0 types and lengths the synthetic generator draws from, with
/// weights summing to 100 (adds, deletes and replaces dominate, as on Nasdaq).
const SYNTHETIC_MIX: [(u8, usize, u64); 8] = [
    (b'A', 36, 38),
    (b'F', 40, 4),
    (b'D', 19, 22),
    (b'U', 35, 10),
    (b'E', 31, 10),
    (b'X', 23, 8),
    (b'C', 36, 3),
    (b'P', 44, 5),
];

/// Longest synthetic message.
pub const SYNTHETIC_MAX_LEN: usize = 44;

/// Why the bytes of a sample file do not form a list of messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The file ends inside a length prefix.
    #[error("length prefix cut short at byte {offset}")]
    TruncatedLength {
        /// Where the prefix starts.
        offset: usize,
    },
    /// The file ends inside a message.
    #[error("message at byte {offset} needs {len} bytes, {available} remain")]
    TruncatedMessage {
        /// Where the length prefix starts.
        offset: usize,
        /// Length the prefix announces.
        len: usize,
        /// Bytes left after the prefix.
        available: usize,
    },
    /// A length prefix of 0: no ITCH message is empty.
    #[error("zero-length message at byte {offset}")]
    EmptyMessage {
        /// Where the length prefix starts.
        offset: usize,
    },
    /// The file holds no message at all.
    #[error("no message")]
    NoMessages,
}

/// Why a sample file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ItchError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file is larger than [`MAX_FILE_LEN`].
    #[error("{} is {len} bytes, at most {max} allowed", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The file is not in the sample-file format.
    #[error("{}: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        #[source]
        source: FormatError,
    },
}

/// The messages of a sample file, checked and held in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItchFile {
    data: Vec<u8>,
    spans: Vec<Range<usize>>,
    max_len: usize,
}

impl ItchFile {
    /// Loads and checks a sample file.
    pub fn open(path: &Path) -> Result<Self, ItchError> {
        let io_error = |source| ItchError::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = fs::metadata(path).map_err(io_error)?.len();
        if len > MAX_FILE_LEN {
            return Err(ItchError::TooLarge {
                path: path.to_path_buf(),
                len,
                max: MAX_FILE_LEN,
            });
        }
        let bytes = fs::read(path).map_err(io_error)?;
        Self::parse(bytes).map_err(|source| ItchError::Format {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Checks bytes in the sample-file format and keeps them.
    pub fn parse(data: Vec<u8>) -> Result<Self, FormatError> {
        let mut spans = Vec::new();
        let mut max_len = 0;
        let mut at = 0;
        while at < data.len() {
            let Some(&[hi, lo]) = data.get(at..).and_then(|rest| rest.first_chunk::<2>()) else {
                return Err(FormatError::TruncatedLength { offset: at });
            };
            let len = usize::from(u16::from_be_bytes([hi, lo]));
            if len == 0 {
                return Err(FormatError::EmptyMessage { offset: at });
            }
            let start = at.saturating_add(2);
            let end = start.saturating_add(len);
            if end > data.len() {
                return Err(FormatError::TruncatedMessage {
                    offset: at,
                    len,
                    available: data.len().saturating_sub(start),
                });
            }
            spans.push(start..end);
            max_len = max_len.max(len);
            at = end;
        }
        if spans.is_empty() {
            return Err(FormatError::NoMessages);
        }
        Ok(Self {
            data,
            spans,
            max_len,
        })
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether the file holds no message (never true for a parsed file).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The `index`-th message, counting from 0.
    pub fn message(&self, index: usize) -> Option<&[u8]> {
        self.spans
            .get(index)
            .and_then(|span| self.data.get(span.clone()))
    }

    /// The messages in file order.
    pub fn messages(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.spans
            .iter()
            .filter_map(|span| self.data.get(span.clone()))
    }

    /// Length of the longest message.
    pub fn max_message_len(&self) -> usize {
        self.max_len
    }
}

/// Where the publisher takes its messages from.
#[derive(Debug, Clone)]
pub enum MessageSource {
    /// Synthetic messages spread over `instruments` instrument ids.
    Synthetic {
        /// Number of distinct instrument ids (at least 1).
        instruments: u16,
    },
    /// The messages of a sample file, repeated as often as needed.
    Itch(Arc<ItchFile>),
}

impl MessageSource {
    /// Writes into `out` the message published `index`-th (from 0, over the
    /// whole run) under sequence number `sequence`.
    pub fn fill(&self, index: u64, sequence: u64, out: &mut Vec<u8>) {
        match self {
            Self::Synthetic { instruments } => synthetic_message(sequence, *instruments, out),
            Self::Itch(file) => {
                out.clear();
                let len = u64::try_from(file.len()).unwrap_or(u64::MAX).max(1);
                let at = usize::try_from(index % len).unwrap_or(0);
                if let Some(message) = file.message(at) {
                    out.extend_from_slice(message);
                }
            }
        }
    }

    /// Length of the longest message this source produces.
    pub fn max_message_len(&self) -> usize {
        match self {
            Self::Synthetic { .. } => SYNTHETIC_MAX_LEN,
            Self::Itch(file) => file.max_message_len(),
        }
    }

    /// The instrument a message is about, which keys the snapshot book:
    /// bytes 9..11 of a synthetic message, the stock locate (bytes 1..3) of
    /// an ITCH message. `None` for a message too short to have one.
    pub fn instrument(&self, message: &[u8]) -> Option<u16> {
        let at = match self {
            Self::Synthetic { .. } => 9,
            Self::Itch(_) => 1,
        };
        let bytes = message.get(at..)?.first_chunk::<2>()?;
        Some(u16::from_be_bytes(*bytes))
    }
}

/// A well-mixed 64-bit value from `x` (the splitmix64 finaliser).
pub(crate) fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Type letter and length of the synthetic message for `sequence`.
fn synthetic_kind(sequence: u64) -> (u8, usize) {
    let mut pick = mix64(sequence) % 100;
    for (kind, len, weight) in SYNTHETIC_MIX {
        if pick < weight {
            return (kind, len);
        }
        pick -= weight;
    }
    (b'A', 36)
}

/// Filler byte `i` of the synthetic message for `sequence`.
fn filler(sequence: u64, i: usize) -> u8 {
    let word = mix64(sequence ^ 0x5EED_F111);
    let shift = u32::try_from(i % 8).unwrap_or(0) * 8;
    ((word >> shift) as u8) ^ (i as u8)
}

/// Writes into `out` the synthetic message for `sequence` (see the module
/// documentation for its layout); its instrument id is below `instruments`.
pub fn synthetic_message(sequence: u64, instruments: u16, out: &mut Vec<u8>) {
    let (kind, len) = synthetic_kind(sequence);
    let instrument = (mix64(sequence) >> 32) % u64::from(instruments.max(1));
    out.clear();
    out.push(kind);
    out.extend_from_slice(&sequence.to_be_bytes());
    out.extend_from_slice(&u16::try_from(instrument).unwrap_or(0).to_be_bytes());
    out.extend((0..len.saturating_sub(SYNTHETIC_HEADER_LEN)).map(|i| filler(sequence, i)));
}

/// The sequence number a synthetic message carries, when the whole message
/// (type, length and filler) is exactly what [`synthetic_message`] writes
/// for it; `None` for anything else.
pub fn synthetic_sequence(message: &[u8]) -> Option<u64> {
    let (&kind, rest) = message.split_first()?;
    let sequence = u64::from_be_bytes(*rest.first_chunk::<8>()?);
    let (expected_kind, expected_len) = synthetic_kind(sequence);
    let filler_ok = message
        .get(SYNTHETIC_HEADER_LEN..)?
        .iter()
        .enumerate()
        .all(|(i, &b)| b == filler(sequence, i));
    (kind == expected_kind && message.len() == expected_len && filler_ok).then_some(sequence)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_messages_round_trip() {
        let mut msg = Vec::new();
        let mut kinds = std::collections::BTreeSet::new();
        for seq in 1..2_000 {
            synthetic_message(seq, 50, &mut msg);
            assert_eq!(synthetic_sequence(&msg), Some(seq));
            assert!(msg.len() <= SYNTHETIC_MAX_LEN && msg.len() >= 19);
            let source = MessageSource::Synthetic { instruments: 50 };
            assert!(source.instrument(&msg).unwrap() < 50);
            kinds.insert(msg[0]);
            let last = msg.len() - 1;
            msg[last] ^= 1;
            assert_eq!(synthetic_sequence(&msg), None);
        }
        assert_eq!(kinds.len(), SYNTHETIC_MIX.len());
        assert_eq!(synthetic_sequence(b"A1"), None);
    }

    #[test]
    fn parse_rejects_bad_files_with_offsets() {
        assert_eq!(ItchFile::parse(vec![]), Err(FormatError::NoMessages));
        assert_eq!(
            ItchFile::parse(vec![0, 1, b'S', 0]),
            Err(FormatError::TruncatedLength { offset: 3 })
        );
        assert_eq!(
            ItchFile::parse(vec![0, 3, b'S']),
            Err(FormatError::TruncatedMessage {
                offset: 0,
                len: 3,
                available: 1
            })
        );
        assert_eq!(
            ItchFile::parse(vec![0, 0]),
            Err(FormatError::EmptyMessage { offset: 0 })
        );
        let file = ItchFile::parse(vec![0, 1, b'S', 0, 2, b'A', b'B']).unwrap();
        assert_eq!(file.len(), 2);
        assert_eq!(file.message(1), Some(&b"AB"[..]));
        assert_eq!(file.max_message_len(), 2);
        let source = MessageSource::Itch(Arc::new(file));
        let mut out = Vec::new();
        source.fill(3, 99, &mut out);
        assert_eq!(out, b"AB");
    }

    #[test]
    fn open_reports_missing_file() {
        let err = ItchFile::open(Path::new("/nonexistent/file.itch")).unwrap_err();
        assert!(matches!(err, ItchError::Io { .. }));
        assert!(err.to_string().contains("/nonexistent/file.itch"));
    }
}
