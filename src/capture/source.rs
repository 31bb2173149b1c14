//! Where a capture's bytes come from: a file, standard input or memory, plain or
//! compressed, read through one buffer of bounded size.
//!
//! Compression is told by the first bytes of the input, never by a file name: `1F 8B` is
//! gzip (every member of a multi-member file is read, as `gzip -d` does), `28 B5 2F FD`
//! is zstd. Both are decompressed as a stream: what is held at any time is the
//! decoder's own window (32 KiB for gzip; for zstd what the frame declares, refused above
//! 2^[`ZSTD_WINDOW_LOG_MAX`] bytes) and the [`Window`] the records are parsed from, which
//! never grows past [`MAX_BUFFER`] bytes. A capture that expands to terabytes is read
//! in the same memory as one that does not.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::CaptureError;

const GZIP_MAGIC: [u8; 2] = [0x1F, 0x8B];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The largest zstd window accepted, as a power of two (27: 128 MiB, zstd's own default
/// limit, which every standard compression level stays within).
pub const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// The largest block the reader holds at once (1 MiB): a pcapng block claiming more is
/// refused, and the parse buffer never grows past this.
pub const MAX_BUFFER: usize = 1 << 20;

/// Opens the file at `path` and returns its bytes, decompressed when it is gzip or zstd
/// (told by its first bytes): for line-based captures that are not pcap.
///
/// # Errors
///
/// [`CaptureError::Io`] if the file cannot be opened; reading the stream gives the
/// [`CaptureError`] of a failed read or decompression as an [`io::Error`].
pub fn open_decompressed(path: &std::path::Path) -> Result<impl Read + Send + use<>, CaptureError> {
    let file = std::fs::File::open(path).map_err(|source| CaptureError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Decompressed(Input::new(path.to_path_buf(), file, None)?))
}

/// Standard input, decompressed when it is gzip or zstd (told by its first bytes): for
/// line-based captures that are not pcap, piped in.
///
/// # Errors
///
/// As [`open_decompressed`].
pub fn stdin_decompressed() -> Result<impl Read + Send + use<>, CaptureError> {
    Ok(Decompressed(Input::new(
        PathBuf::from("-"),
        io::stdin(),
        None,
    )?))
}

/// An [`Input`] as a reader.
struct Decompressed(Input);

impl Read for Decompressed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(io::Error::other)
    }
}

/// The parse buffer's size at first: room for the largest classic pcap record.
const INITIAL_BUFFER: usize = 512 * 1024;

/// How the input was compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Not compressed.
    None,
    /// gzip (RFC 1952), one or more members.
    Gzip,
    /// zstd, one or more frames.
    Zstd,
}

impl Compression {
    /// The name used in messages: `none`, `gzip` or `zstd`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }
}

/// Counts the bytes read through it, for progress while a decoder owns the reader.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The decompressed byte stream of a capture.
pub(super) struct Input {
    name: PathBuf,
    inner: Box<dyn Read + Send>,
    compression: Compression,
    raw_read: Arc<AtomicU64>,
    raw_len: Option<u64>,
    out: u64,
}

impl Input {
    /// Reads the first bytes of `reader` to tell its compression, and puts the matching
    /// decoder in front of it. `name` is used in error messages; `raw_len` is the input's
    /// size when known (a regular file), for progress.
    pub(super) fn new(
        name: PathBuf,
        reader: impl Read + Send + 'static,
        raw_len: Option<u64>,
    ) -> Result<Self, CaptureError> {
        let raw_read = Arc::new(AtomicU64::new(0));
        let mut counting = Counting {
            inner: reader,
            count: Arc::clone(&raw_read),
        };
        let mut head = [0u8; 4];
        let mut got = 0;
        while let Some(rest) = head.get_mut(got..).filter(|r| !r.is_empty()) {
            match counting.read(rest) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(CaptureError::Io { path: name, source }),
            }
        }
        let head = head.get(..got).unwrap_or_default();
        let compression = if head.starts_with(&ZSTD_MAGIC) {
            Compression::Zstd
        } else if head.starts_with(&GZIP_MAGIC) {
            Compression::Gzip
        } else {
            Compression::None
        };
        let chained = io::Cursor::new(head.to_vec()).chain(counting);
        let inner: Box<dyn Read + Send> = match compression {
            Compression::None => Box::new(chained),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(chained)),
            Compression::Zstd => {
                let failed = |source| CaptureError::Decompress {
                    codec: "zstd",
                    offset: 0,
                    source,
                };
                let mut decoder = zstd::stream::read::Decoder::new(chained).map_err(failed)?;
                decoder
                    .window_log_max(ZSTD_WINDOW_LOG_MAX)
                    .map_err(failed)?;
                Box::new(decoder)
            }
        };
        Ok(Self {
            name,
            inner,
            compression,
            raw_read,
            raw_len,
            out: 0,
        })
    }

    /// The name errors use for the input.
    pub(super) fn name(&self) -> &PathBuf {
        &self.name
    }

    pub(super) fn compression(&self) -> Compression {
        self.compression
    }

    /// Bytes read from the input itself (compressed bytes, for a compressed input).
    pub(super) fn raw_read(&self) -> u64 {
        self.raw_read.load(Ordering::Relaxed)
    }

    /// The input's size, when known.
    pub(super) fn raw_len(&self) -> Option<u64> {
        self.raw_len
    }

    /// Reads decompressed bytes; 0 at the end.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, CaptureError> {
        loop {
            match self.inner.read(buf) {
                Ok(n) => {
                    self.out += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(match self.compression {
                        Compression::None => CaptureError::Io {
                            path: self.name.clone(),
                            source,
                        },
                        c => CaptureError::Decompress {
                            codec: c.as_str(),
                            offset: self.out,
                            source,
                        },
                    });
                }
            }
        }
    }
}

/// The bytes of the decompressed stream being parsed: `bytes[pos..end]` is read and not
/// yet consumed, and `bytes[0]` is at offset `base` of the stream.
///
/// ```text
///   stream:  ... consumed ... | unread (pos..end) | not read yet ...
///   bytes:   [ consumed | unread | free ]       len <= MAX_BUFFER
///             ^0         ^pos     ^end
/// ```
///
/// Filling first moves the unread bytes to the front, so the buffer only grows when one
/// block is larger than the buffer, and never past [`MAX_BUFFER`].
pub(super) struct Window {
    bytes: Vec<u8>,
    pos: usize,
    end: usize,
    base: u64,
    eof: bool,
}

impl Window {
    pub(super) fn new() -> Self {
        Self {
            bytes: vec![0; INITIAL_BUFFER],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
        }
    }

    /// The bytes read and not consumed.
    pub(super) fn unread(&self) -> &[u8] {
        self.bytes.get(self.pos..self.end).unwrap_or_default()
    }

    /// The buffer index of the first unread byte; with [`slice`](Self::slice), valid
    /// until the next [`fill`](Self::fill).
    pub(super) fn index(&self) -> usize {
        self.pos
    }

    /// `len` bytes from buffer index `start`, if they were read.
    pub(super) fn slice(&self, start: usize, len: usize) -> Option<&[u8]> {
        let stop = start.checked_add(len)?;
        if stop > self.end {
            return None;
        }
        self.bytes.get(start..stop)
    }

    /// Marks `n` bytes as consumed.
    pub(super) fn consume(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.end);
    }

    /// The stream offset of the first unread byte.
    pub(super) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// True once the input has ended: what is unread is all there is.
    pub(super) fn at_end(&self) -> bool {
        self.eof
    }

    /// The buffer's size now.
    pub(super) fn capacity(&self) -> usize {
        self.bytes.len()
    }

    /// Reads until at least `want` bytes are unread (at most [`MAX_BUFFER`]) or the input
    /// ends.
    pub(super) fn fill(&mut self, input: &mut Input, want: usize) -> Result<(), CaptureError> {
        let want = want.min(MAX_BUFFER);
        if self.end - self.pos >= want || self.eof {
            return Ok(());
        }
        if self.pos > 0 {
            self.bytes.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if want > self.bytes.len() {
            self.bytes
                .resize(want.next_power_of_two().min(MAX_BUFFER).max(want), 0);
        }
        while self.end - self.pos < want {
            let Some(space) = self.bytes.get_mut(self.end..).filter(|s| !s.is_empty()) else {
                break;
            };
            let n = input.read(space)?;
            if n == 0 {
                self.eof = true;
                break;
            }
            self.end += n;
        }
        Ok(())
    }
}
