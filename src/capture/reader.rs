//! Reading classic pcap and pcapng captures, plain, gzip or zstd, as a stream.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::error::CaptureError;
use super::link::LinkType;
use super::source::{Compression, Input, MAX_BUFFER, Window};

/// The largest captured length accepted for one record (256 KiB); anything longer is reported
/// as [`CaptureError::AbsurdLength`].
pub const MAX_RECORD_LEN: u32 = 256 * 1024;

const PCAPNG_SHB_BYTES: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];

const PCAP_HEADER_LEN: usize = 24;
const PCAP_RECORD_HEADER_LEN: usize = 16;

const BLOCK_IDB: u32 = 1;
const BLOCK_SPB: u32 = 3;
const BLOCK_EPB: u32 = 6;
const SHB_MIN_LEN: usize = 28;
const IDB_MIN_BODY: usize = 8;
const EPB_MIN_BODY: usize = 20;
const SPB_MIN_BODY: usize = 4;

const OPT_END: u16 = 0;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_TSOFFSET: u16 = 14;

const NANOS_PER_SEC: u64 = 1_000_000_000;

const PCAP_MAGICS: &str = "pcap magic A1B2C3D4 or A1B23C4D (either byte order) or pcapng 0A0D0D0A, plain, gzip (1F8B) or zstd (28B52FFD)";

/// The container format found by [`CaptureReader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureFormat {
    /// Classic libpcap format.
    Pcap,
    /// pcapng.
    PcapNg,
}

/// One captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Capture time in nanoseconds since the Unix epoch (0 for pcapng simple packet blocks,
    /// which carry no timestamp).
    pub ts_ns: u64,
    /// Link-layer type of `data`.
    pub link: LinkType,
    /// The captured bytes (possibly fewer than `orig_len`).
    pub data: &'a [u8],
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// Byte offset of the record header or packet block in the (decompressed) file.
    pub offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u16(self, buf: &[u8], off: usize) -> Option<u16> {
        let b = bytes::<2>(buf, off)?;
        Some(match self {
            Self::Little => u16::from_le_bytes(b),
            Self::Big => u16::from_be_bytes(b),
        })
    }

    fn u32(self, buf: &[u8], off: usize) -> Option<u32> {
        let b = bytes::<4>(buf, off)?;
        Some(match self {
            Self::Little => u32::from_le_bytes(b),
            Self::Big => u32::from_be_bytes(b),
        })
    }

    fn i64(self, buf: &[u8], off: usize) -> Option<i64> {
        let b = bytes::<8>(buf, off)?;
        Some(match self {
            Self::Little => i64::from_le_bytes(b),
            Self::Big => i64::from_be_bytes(b),
        })
    }
}

/// The `N` bytes at `off`, if they are all inside `buf`.
fn bytes<const N: usize>(buf: &[u8], off: usize) -> Option<[u8; N]> {
    let end = off.checked_add(N)?;
    buf.get(off..end)?.try_into().ok()
}

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Converts pcapng timestamp ticks to nanoseconds: `ticks * mul / div`.
#[derive(Debug, Clone, Copy)]
struct TsScale {
    mul: u128,
    div: u128,
}

impl TsScale {
    const MICROS: Self = Self { mul: 1000, div: 1 };

    /// From the `if_tsresol` option value: a power of ten, or of two when the top bit is set.
    fn from_tsresol(value: u8) -> Self {
        let exp = u32::from(value & 0x7F);
        if value & 0x80 == 0 {
            match 9u32.checked_sub(exp) {
                Some(up) => Self {
                    mul: 10u128.checked_pow(up).unwrap_or(1),
                    div: 1,
                },
                None => Self {
                    mul: 1,
                    div: 10u128.checked_pow(exp - 9).unwrap_or(u128::MAX),
                },
            }
        } else {
            Self {
                mul: u128::from(NANOS_PER_SEC),
                div: 1u128.checked_shl(exp).unwrap_or(u128::MAX),
            }
        }
    }

    fn to_ns(self, ticks: u64, offset_s: i64) -> u64 {
        // ticks < 2^64 and mul <= 10^9 < 2^30, so the product fits; div is never 0.
        let ns = u128::from(ticks).saturating_mul(self.mul) / self.div.max(1);
        let ns = i128::try_from(ns).unwrap_or(i128::MAX);
        let shifted = ns.saturating_add(i128::from(offset_s).saturating_mul(1_000_000_000));
        u64::try_from(shifted.max(0)).unwrap_or(u64::MAX)
    }
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    snaplen: u32,
    scale: TsScale,
    offset_s: i64,
}

#[derive(Debug)]
enum State {
    Pcap {
        endian: Endian,
        nanos: bool,
        link: LinkType,
    },
    PcapNg {
        endian: Endian,
        interfaces: Vec<Interface>,
    },
}

/// Where a record's bytes are, before borrowing them from the buffer.
struct Located {
    ts_ns: u64,
    link: LinkType,
    start: usize,
    len: usize,
    orig_len: u32,
    offset: usize,
}

/// Reads the records of a classic pcap or pcapng capture as a stream.
///
/// The input is a file, standard input, any reader, or bytes in memory; gzip and zstd are
/// told by their magic bytes and decompressed as the records are read (see
/// [`Compression`]). The container format is told by its magic number. Records are parsed
/// from one buffer that never grows past [`MAX_BUFFER`] bytes, whatever the capture's
/// size, and are borrowed from it, so reading allocates nothing per record. Byte offsets in
/// errors count in the decompressed stream. After the first error,
/// [`next_record`](Self::next_record) returns `None`.
///
/// # Example
///
/// ```
/// use std::net::{Ipv4Addr, SocketAddrV4};
///
/// use gapless::capture::{CaptureReader, PcapWriter, Stats};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Make a small capture in memory.
/// let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);
/// let dst = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 111), 26477);
/// let mut writer = PcapWriter::new(Vec::new())?;
/// writer.write_udp(1_700_000_000_123_456_789, src, dst, b"hello")?;
/// let bytes = writer.into_inner()?;
///
/// let mut reader = CaptureReader::from_bytes(bytes)?;
/// let mut stats = Stats::default();
/// while let Some(record) = reader.next_record() {
///     let record = record?;
///     if let Some(datagram) = stats.extract(record.link, record.data) {
///         assert_eq!(record.ts_ns, 1_700_000_000_123_456_789);
///         assert_eq!(datagram.dst, dst);
///         assert_eq!(datagram.payload, b"hello");
///     }
/// }
/// assert_eq!(stats.datagrams, 1);
/// # Ok(())
/// # }
/// ```
pub struct CaptureReader {
    input: Input,
    window: Window,
    state: State,
    failed: bool,
}

impl CaptureReader {
    /// Opens the file at `path` and parses its header.
    ///
    /// # Errors
    ///
    /// [`CaptureError::Io`] if the file cannot be opened or read, otherwise as
    /// [`from_reader`](Self::from_reader).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let path = path.as_ref();
        let io_error = |source| CaptureError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_error)?;
        let meta = file.metadata().map_err(io_error)?;
        let len = meta.is_file().then_some(meta.len());
        Self::start(Input::new(path.to_path_buf(), file, len)?)
    }

    /// Reads the capture from standard input (named `-` in errors).
    ///
    /// # Errors
    ///
    /// As [`from_reader`](Self::from_reader).
    pub fn stdin() -> Result<Self, CaptureError> {
        Self::from_reader("-", io::stdin())
    }

    /// Reads the capture from `reader`, named `name` in errors, and parses its header.
    ///
    /// # Errors
    ///
    /// [`CaptureError::Io`] or [`CaptureError::Decompress`] if reading fails,
    /// [`CaptureError::BadMagic`] for an unknown format, [`CaptureError::Truncated`] if the
    /// file header is cut short, and for pcapng the errors of the first section header
    /// block.
    pub fn from_reader(
        name: impl Into<PathBuf>,
        reader: impl Read + Send + 'static,
    ) -> Result<Self, CaptureError> {
        Self::start(Input::new(name.into(), reader, None)?)
    }

    /// Takes a complete capture in memory (plain, gzip or zstd) and parses its header.
    ///
    /// # Errors
    ///
    /// As [`from_reader`](Self::from_reader).
    pub fn from_bytes(data: Vec<u8>) -> Result<Self, CaptureError> {
        let len = data.len() as u64;
        Self::start(Input::new(
            PathBuf::from("<memory>"),
            io::Cursor::new(data),
            Some(len),
        )?)
    }

    fn start(mut input: Input) -> Result<Self, CaptureError> {
        let mut window = Window::new();
        window.fill(&mut input, 4)?;
        let unread = window.unread().len();
        let magic = bytes::<4>(window.unread(), 0).ok_or(CaptureError::Truncated {
            what: "file magic",
            offset: 0,
            need: 4,
            left: as_u64(unread),
        })?;
        let (endian, nanos) = match magic {
            [0xD4, 0xC3, 0xB2, 0xA1] => (Endian::Little, false),
            [0xA1, 0xB2, 0xC3, 0xD4] => (Endian::Big, false),
            [0x4D, 0x3C, 0xB2, 0xA1] => (Endian::Little, true),
            [0xA1, 0xB2, 0x3C, 0x4D] => (Endian::Big, true),
            PCAPNG_SHB_BYTES => {
                let (endian, len) = loop {
                    match section_header(window.unread(), 0) {
                        Ok(found) => break found,
                        Err(CaptureError::Truncated { offset, need, .. }) if !window.at_end() => {
                            let want =
                                usize::try_from(offset.saturating_add(need)).unwrap_or(usize::MAX);
                            if want <= window.unread().len() {
                                break section_header(window.unread(), 0)?;
                            }
                            window.fill(&mut input, want)?;
                        }
                        Err(e) => return Err(e),
                    }
                };
                window.consume(len);
                return Ok(Self {
                    input,
                    window,
                    state: State::PcapNg {
                        endian,
                        interfaces: Vec::new(),
                    },
                    failed: false,
                });
            }
            _ => {
                return Err(CaptureError::BadMagic {
                    offset: 0,
                    expected: PCAP_MAGICS,
                    found: u32::from_be_bytes(magic),
                });
            }
        };
        window.fill(&mut input, PCAP_HEADER_LEN)?;
        let data = window.unread();
        let network = endian
            .u32(data, 20)
            .filter(|_| data.len() >= PCAP_HEADER_LEN)
            .ok_or(CaptureError::Truncated {
                what: "pcap file header",
                offset: 0,
                need: as_u64(PCAP_HEADER_LEN),
                left: as_u64(data.len()),
            })?;
        // The upper bits of the link-type field carry FCS information, not the type.
        let link = LinkType((network & 0xFFFF) as u16);
        window.consume(PCAP_HEADER_LEN);
        Ok(Self {
            input,
            window,
            state: State::Pcap {
                endian,
                nanos,
                link,
            },
            failed: false,
        })
    }

    /// The container format.
    pub fn format(&self) -> CaptureFormat {
        match self.state {
            State::Pcap { .. } => CaptureFormat::Pcap,
            State::PcapNg { .. } => CaptureFormat::PcapNg,
        }
    }

    /// How the input was compressed.
    pub fn compression(&self) -> Compression {
        self.input.compression()
    }

    /// Whether the input was compressed (gzip or zstd).
    pub fn was_compressed(&self) -> bool {
        self.input.compression() != Compression::None
    }

    /// The link type from a classic pcap file header; `None` for pcapng, where each interface
    /// has its own.
    pub fn pcap_link_type(&self) -> Option<LinkType> {
        match self.state {
            State::Pcap { link, .. } => Some(link),
            State::PcapNg { .. } => None,
        }
    }

    /// The byte offset of the next record or block in the (decompressed) stream.
    pub fn position(&self) -> u64 {
        self.window.offset()
    }

    /// Bytes read from the input itself so far: compressed bytes for a compressed input.
    /// With [`input_len`](Self::input_len), how far through the input the reader is.
    pub fn input_read(&self) -> u64 {
        self.input.raw_read()
    }

    /// The input's size in bytes, when known (a regular file, or bytes in memory).
    pub fn input_len(&self) -> Option<u64> {
        self.input.raw_len()
    }

    /// The size of the parse buffer now; never more than [`MAX_BUFFER`].
    pub fn buffer_capacity(&self) -> usize {
        self.window.capacity()
    }

    /// The next record, `None` at the end of the data or after an error.
    ///
    /// pcapng blocks other than interface description, enhanced packet and simple packet
    /// blocks are skipped; a new section header block starts a new list of interfaces.
    pub fn next_record(&mut self) -> Option<Result<Record<'_>, CaptureError>> {
        if self.failed {
            return None;
        }
        // Each pass parses what is buffered; a record cut off by the buffer's end reads
        // more and parses again. Bounded: a pass that does not return has read more, and
        // at the end of the input a cut-off record is an error.
        let (located, start, at) = loop {
            if let Err(e) = self.window.fill(&mut self.input, 1) {
                return Some(Err(self.fail(e)));
            }
            let data = self.window.unread();
            let unread = data.len();
            let mut used = 0;
            let parsed = match &mut self.state {
                State::Pcap {
                    endian,
                    nanos,
                    link,
                } => next_pcap(data, &mut used, *endian, *nanos, *link),
                State::PcapNg { endian, interfaces } => {
                    next_pcapng(data, &mut used, endian, interfaces)
                }
            };
            let (start, at) = (self.window.index(), self.window.offset());
            self.window.consume(used);
            match parsed {
                // The buffer ran out between blocks: read on, unless the input ended.
                None if self.window.at_end() => return None,
                None => {}
                Some(Ok(located)) => break (located, start, at),
                Some(Err(e)) => {
                    // What the cut-off structure needs, from the new position.
                    let want = shortfall(&e)
                        .filter(|_| !self.window.at_end())
                        .map(|end| end.saturating_sub(used))
                        .filter(|&want| want > unread - used && want <= MAX_BUFFER);
                    match want {
                        Some(want) => {
                            if let Err(e) = self.window.fill(&mut self.input, want) {
                                return Some(Err(self.fail(e)));
                            }
                        }
                        None => return Some(Err(self.fail(e.shifted(at)))),
                    }
                }
            }
        };
        let offset = at.saturating_add(as_u64(located.offset));
        match self
            .window
            .slice(start.saturating_add(located.start), located.len)
        {
            Some(data) => Some(Ok(Record {
                ts_ns: located.ts_ns,
                link: located.link,
                data,
                orig_len: located.orig_len,
                offset,
            })),
            None => {
                self.failed = true;
                Some(Err(CaptureError::Truncated {
                    what: "record data",
                    offset,
                    need: as_u64(located.len),
                    left: 0,
                }))
            }
        }
    }

    fn fail(&mut self, e: CaptureError) -> CaptureError {
        self.failed = true;
        e
    }
}

impl fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("input", self.input.name())
            .field("format", &self.format())
            .field("compression", &self.compression())
            .field("position", &self.position())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// Where the data a [`CaptureError::Truncated`] wanted ends, relative to where parsing
/// started: reading that far may complete it.
fn shortfall(e: &CaptureError) -> Option<usize> {
    match e {
        CaptureError::Truncated { offset, need, .. } => {
            usize::try_from(offset.saturating_add(*need)).ok()
        }
        _ => None,
    }
}

fn next_pcap(
    data: &[u8],
    pos: &mut usize,
    endian: Endian,
    nanos: bool,
    link: LinkType,
) -> Option<Result<Located, CaptureError>> {
    let off = *pos;
    let left = data.len().saturating_sub(off);
    if left == 0 {
        return None;
    }
    let header = (|| {
        Some((
            endian.u32(data, off)?,
            endian.u32(data, off.checked_add(4)?)?,
            endian.u32(data, off.checked_add(8)?)?,
            endian.u32(data, off.checked_add(12)?)?,
        ))
    })();
    let Some((sec, frac, incl_len, orig_len)) = header else {
        return Some(Err(CaptureError::Truncated {
            what: "pcap record header",
            offset: as_u64(off),
            need: as_u64(PCAP_RECORD_HEADER_LEN),
            left: as_u64(left),
        }));
    };
    if incl_len > MAX_RECORD_LEN {
        return Some(Err(CaptureError::AbsurdLength {
            what: "pcap record captured",
            offset: as_u64(off),
            len: u64::from(incl_len),
            limit: u64::from(MAX_RECORD_LEN),
        }));
    }
    let start = off + PCAP_RECORD_HEADER_LEN;
    let len = incl_len as usize;
    let data_left = left - PCAP_RECORD_HEADER_LEN;
    if len > data_left {
        return Some(Err(CaptureError::Truncated {
            what: "pcap record data",
            offset: as_u64(start),
            need: u64::from(incl_len),
            left: as_u64(data_left),
        }));
    }
    let frac_ns = if nanos {
        u64::from(frac)
    } else {
        u64::from(frac) * 1000
    };
    *pos = start + len;
    Some(Ok(Located {
        ts_ns: u64::from(sec) * NANOS_PER_SEC + frac_ns,
        link,
        start,
        len,
        orig_len,
        offset: off,
    }))
}

/// Validates the block length at `off` and returns it.
fn block_len(
    data: &[u8],
    off: usize,
    endian: Endian,
    min: usize,
    what: &'static str,
) -> Result<usize, CaptureError> {
    let left = data.len().saturating_sub(off);
    let truncated = |need: usize| CaptureError::Truncated {
        what,
        offset: as_u64(off),
        need: as_u64(need),
        left: as_u64(left),
    };
    let len = off
        .checked_add(4)
        .and_then(|at| endian.u32(data, at))
        .ok_or_else(|| truncated(min.max(8)))?;
    let bad = |expected: String| CaptureError::BadBlockLength {
        offset: as_u64(off),
        len: u64::from(len),
        expected,
    };
    let len_usize = usize::try_from(len).unwrap_or(usize::MAX);
    if len_usize > MAX_BUFFER {
        return Err(CaptureError::AbsurdLength {
            what,
            offset: as_u64(off),
            len: u64::from(len),
            limit: as_u64(MAX_BUFFER),
        });
    }
    if len_usize < min {
        return Err(bad(format!("at least {min} bytes for a {what}")));
    }
    if len % 4 != 0 {
        return Err(bad("a multiple of 4".to_owned()));
    }
    if len_usize > left {
        return Err(truncated(len_usize));
    }
    let trailing = endian.u32(data, off + len_usize - 4);
    if trailing != Some(len) {
        return Err(bad(format!(
            "the trailing copy of the length to match, found {}",
            trailing.unwrap_or(0)
        )));
    }
    Ok(len_usize)
}

/// Parses the section header block at `off`: its byte order and total length.
fn section_header(data: &[u8], off: usize) -> Result<(Endian, usize), CaptureError> {
    const WHAT: &str = "pcapng section header block";
    let bom_at = off.saturating_add(8);
    let endian = match bytes::<4>(data, bom_at) {
        Some([0x4D, 0x3C, 0x2B, 0x1A]) => Endian::Little,
        Some([0x1A, 0x2B, 0x3C, 0x4D]) => Endian::Big,
        Some(found) => {
            return Err(CaptureError::BadMagic {
                offset: as_u64(bom_at),
                expected: "pcapng byte-order magic 1A2B3C4D (either byte order)",
                found: u32::from_be_bytes(found),
            });
        }
        None => {
            return Err(CaptureError::Truncated {
                what: WHAT,
                offset: as_u64(off),
                need: as_u64(SHB_MIN_LEN),
                left: as_u64(data.len().saturating_sub(off)),
            });
        }
    };
    let len = block_len(data, off, endian, SHB_MIN_LEN, WHAT)?;
    let major = endian.u16(data, off + 12).unwrap_or(0);
    let minor = endian.u16(data, off + 14).unwrap_or(0);
    if major != 1 {
        return Err(CaptureError::UnsupportedVersion {
            offset: as_u64(off),
            major,
            minor,
        });
    }
    Ok((endian, len))
}

fn next_pcapng(
    data: &[u8],
    pos: &mut usize,
    endian: &mut Endian,
    interfaces: &mut Vec<Interface>,
) -> Option<Result<Located, CaptureError>> {
    loop {
        let off = *pos;
        let left = data.len().saturating_sub(off);
        if left == 0 {
            return None;
        }
        let Some(type_bytes) = bytes::<4>(data, off) else {
            return Some(Err(CaptureError::Truncated {
                what: "pcapng block header",
                offset: as_u64(off),
                need: 12,
                left: as_u64(left),
            }));
        };
        if type_bytes == PCAPNG_SHB_BYTES {
            match section_header(data, off) {
                Ok((new_endian, len)) => {
                    *endian = new_endian;
                    interfaces.clear();
                    *pos = off + len;
                    continue;
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let block_type = match *endian {
            Endian::Little => u32::from_le_bytes(type_bytes),
            Endian::Big => u32::from_be_bytes(type_bytes),
        };
        let len = match block_len(data, off, *endian, 12, "pcapng block") {
            Ok(len) => len,
            Err(e) => return Some(Err(e)),
        };
        *pos = off + len;
        let body = off + 8;
        let body_len = len - 12;
        let result = match block_type {
            BLOCK_IDB => {
                interface_description(data, off, body, body_len, *endian).map(|interface| {
                    interfaces.push(interface);
                    None
                })
            }
            BLOCK_EPB => enhanced_packet(data, off, body, body_len, *endian, interfaces).map(Some),
            BLOCK_SPB => simple_packet(data, off, body, body_len, *endian, interfaces).map(Some),
            _ => Ok(None),
        };
        match result {
            Ok(None) => {}
            Ok(Some(located)) => return Some(Ok(located)),
            Err(e) => return Some(Err(e)),
        }
    }
}

fn interface_description(
    data: &[u8],
    off: usize,
    body: usize,
    body_len: usize,
    endian: Endian,
) -> Result<Interface, CaptureError> {
    if body_len < IDB_MIN_BODY {
        return Err(CaptureError::BadBlockLength {
            offset: as_u64(off),
            len: as_u64(body_len + 12),
            expected: format!(
                "at least {} bytes for an interface description block",
                IDB_MIN_BODY + 12
            ),
        });
    }
    let mut interface = Interface {
        link: LinkType(endian.u16(data, body).unwrap_or(0)),
        snaplen: endian.u32(data, body + 4).unwrap_or(0),
        scale: TsScale::MICROS,
        offset_s: 0,
    };
    let end = body + body_len;
    let mut at = body + IDB_MIN_BODY;
    while at + 4 <= end {
        let code = endian.u16(data, at).unwrap_or(OPT_END);
        let len = usize::from(endian.u16(data, at + 2).unwrap_or(0));
        if code == OPT_END {
            break;
        }
        let value = at + 4;
        if value + len > end {
            return Err(CaptureError::BadBlockLength {
                offset: as_u64(off),
                len: as_u64(body_len + 12),
                expected: format!(
                    "room for option {code} at byte {} of the block, whose value claims {len} bytes",
                    at - off
                ),
            });
        }
        match (code, len) {
            (OPT_IF_TSRESOL, 1..) => {
                if let Some(&v) = data.get(value) {
                    interface.scale = TsScale::from_tsresol(v);
                }
            }
            (OPT_IF_TSOFFSET, 8) => {
                interface.offset_s = endian.i64(data, value).unwrap_or(0);
            }
            _ => {}
        }
        at = value + len.next_multiple_of(4);
    }
    Ok(interface)
}

fn enhanced_packet(
    data: &[u8],
    off: usize,
    body: usize,
    body_len: usize,
    endian: Endian,
    interfaces: &[Interface],
) -> Result<Located, CaptureError> {
    let fields = (|| {
        Some((
            endian.u32(data, body)?,
            endian.u32(data, body + 4)?,
            endian.u32(data, body + 8)?,
            endian.u32(data, body + 12)?,
            endian.u32(data, body + 16)?,
        ))
    })();
    let Some((iface, ts_hi, ts_lo, cap_len, orig_len)) =
        fields.filter(|_| body_len >= EPB_MIN_BODY)
    else {
        return Err(CaptureError::BadBlockLength {
            offset: as_u64(off),
            len: as_u64(body_len + 12),
            expected: format!(
                "at least {} bytes for an enhanced packet block",
                EPB_MIN_BODY + 12
            ),
        });
    };
    if cap_len > MAX_RECORD_LEN {
        return Err(CaptureError::AbsurdLength {
            what: "pcapng enhanced packet block captured",
            offset: as_u64(off),
            len: u64::from(cap_len),
            limit: u64::from(MAX_RECORD_LEN),
        });
    }
    let len = cap_len as usize;
    if len > body_len - EPB_MIN_BODY {
        return Err(CaptureError::BadBlockLength {
            offset: as_u64(off),
            len: as_u64(body_len + 12),
            expected: format!("room for the captured length {cap_len}"),
        });
    }
    let interface = usize::try_from(iface)
        .ok()
        .and_then(|i| interfaces.get(i))
        .ok_or(CaptureError::UnknownInterface {
            offset: as_u64(off),
            interface: iface,
            defined: as_u64(interfaces.len()),
        })?;
    let ticks = (u64::from(ts_hi) << 32) | u64::from(ts_lo);
    Ok(Located {
        ts_ns: interface.scale.to_ns(ticks, interface.offset_s),
        link: interface.link,
        start: body + EPB_MIN_BODY,
        len,
        orig_len,
        offset: off,
    })
}

fn simple_packet(
    data: &[u8],
    off: usize,
    body: usize,
    body_len: usize,
    endian: Endian,
    interfaces: &[Interface],
) -> Result<Located, CaptureError> {
    let Some(orig_len) = endian.u32(data, body).filter(|_| body_len >= SPB_MIN_BODY) else {
        return Err(CaptureError::BadBlockLength {
            offset: as_u64(off),
            len: as_u64(body_len + 12),
            expected: format!(
                "at least {} bytes for a simple packet block",
                SPB_MIN_BODY + 12
            ),
        });
    };
    let interface = interfaces.first().ok_or(CaptureError::UnknownInterface {
        offset: as_u64(off),
        interface: 0,
        defined: 0,
    })?;
    let mut len = usize::try_from(orig_len)
        .unwrap_or(usize::MAX)
        .min(body_len - SPB_MIN_BODY);
    if interface.snaplen != 0 {
        len = len.min(usize::try_from(interface.snaplen).unwrap_or(usize::MAX));
    }
    if len > MAX_RECORD_LEN as usize {
        return Err(CaptureError::AbsurdLength {
            what: "pcapng simple packet block captured",
            offset: as_u64(off),
            len: as_u64(len),
            limit: u64::from(MAX_RECORD_LEN),
        });
    }
    Ok(Located {
        ts_ns: 0,
        link: interface.link,
        start: body + SPB_MIN_BODY,
        len,
        orig_len,
        offset: off,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::testutil::{NgBuilder, exercise, pcap_file};

    fn collect(mut r: CaptureReader) -> Vec<(u64, LinkType, Vec<u8>, u32)> {
        let mut out = Vec::new();
        while let Some(rec) = r.next_record() {
            let rec = rec.unwrap();
            out.push((rec.ts_ns, rec.link, rec.data.to_vec(), rec.orig_len));
        }
        out
    }

    #[test]
    fn classic_all_four_magics() {
        for big in [false, true] {
            for nanos in [false, true] {
                let frac = if nanos { 123_456_789 } else { 123_456 };
                let file = pcap_file(big, nanos, 1, &[(1_600_000_000, frac, b"abc", 60)]);
                let r = CaptureReader::from_bytes(file).unwrap();
                assert_eq!(r.format(), CaptureFormat::Pcap);
                assert_eq!(r.pcap_link_type(), Some(LinkType::ETHERNET));
                let recs = collect(r);
                let want_ns = if nanos { 123_456_789 } else { 123_456_000 };
                assert_eq!(
                    recs,
                    vec![(
                        1_600_000_000 * NANOS_PER_SEC + want_ns,
                        LinkType::ETHERNET,
                        b"abc".to_vec(),
                        60
                    )]
                );
            }
        }
    }

    #[test]
    fn classic_link_type_masks_fcs_bits() {
        let file = pcap_file(false, false, 0x1000_0071, &[]);
        let r = CaptureReader::from_bytes(file).unwrap();
        assert_eq!(r.pcap_link_type(), Some(LinkType::LINUX_SLL));
    }

    #[test]
    fn header_only_and_empty() {
        let r = CaptureReader::from_bytes(pcap_file(false, true, 1, &[])).unwrap();
        assert!(collect(r).is_empty());
        let e = CaptureReader::from_bytes(Vec::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "truncated file magic at byte offset 0 (need 4 bytes, 0 left)"
        );
    }

    #[test]
    fn bad_magic_names_offset_and_expectation() {
        let e = CaptureReader::from_bytes(b"GIF89a..............................".to_vec())
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("bad magic at byte offset 0: expected pcap magic"),
            "{msg}"
        );
        assert!(msg.ends_with("found bytes 47494638"), "{msg}");
        assert_eq!(e.offset(), Some(0));
    }

    #[test]
    fn truncated_record_header_message() {
        let mut file = pcap_file(false, false, 1, &[(1, 2, b"xyz", 3)]);
        let first_end = file.len();
        file.extend_from_slice(&[0; 7]);
        let mut r = CaptureReader::from_bytes(file).unwrap();
        assert!(r.next_record().unwrap().is_ok());
        let e = r.next_record().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "truncated pcap record header at byte offset {first_end} (need 16 bytes, 7 left)"
            )
        );
        assert!(r.next_record().is_none(), "reader stops after an error");
    }

    #[test]
    fn truncated_record_data_and_short_file_header() {
        let mut file = pcap_file(true, false, 1, &[(1, 2, &[7; 100], 100)]);
        file.truncate(file.len() - 10);
        let mut r = CaptureReader::from_bytes(file).unwrap();
        let e = r.next_record().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "truncated pcap record data at byte offset 40 (need 100 bytes, 90 left)"
        );
        let e =
            CaptureReader::from_bytes(pcap_file(false, false, 1, &[])[..20].to_vec()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "truncated pcap file header at byte offset 0 (need 24 bytes, 20 left)"
        );
    }

    #[test]
    fn absurd_record_length() {
        let mut file = pcap_file(false, false, 1, &[]);
        for v in [1u32, 2, MAX_RECORD_LEN + 1, 64] {
            file.extend_from_slice(&v.to_le_bytes());
        }
        let mut r = CaptureReader::from_bytes(file).unwrap();
        let e = r.next_record().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "absurd pcap record captured length 262145 at byte offset 24 (expected at most 262144 bytes)"
        );
    }

    #[test]
    fn pcapng_both_byte_orders_with_resolutions() {
        for big in [false, true] {
            let mut b = NgBuilder::new(big);
            b.shb();
            b.idb(1, 0, &[]); // default microseconds
            b.idb(228, 0, &[(OPT_IF_TSRESOL, &[9])]);
            b.idb(
                113,
                0,
                &[
                    (OPT_IF_TSRESOL, &[0x80 | 10]),
                    (OPT_IF_TSOFFSET, &ts_off(big, 2)),
                ],
            );
            b.block(4, &[1, 2, 3, 4, 5, 6, 7, 8]); // name resolution block: skipped
            b.epb(0, 1_500_000_000_000_001, b"eth", 14);
            b.epb(1, 1_500_000_000_000_000_007, b"ipv4!", 5);
            b.epb(2, 3 * 1024, b"sll", 3);
            b.spb(b"simple", 6);
            let r = CaptureReader::from_bytes(b.finish()).unwrap();
            assert_eq!(r.format(), CaptureFormat::PcapNg);
            assert_eq!(r.pcap_link_type(), None);
            let recs = collect(r);
            assert_eq!(
                recs,
                vec![
                    (
                        1_500_000_000_000_001_000,
                        LinkType::ETHERNET,
                        b"eth".to_vec(),
                        14
                    ),
                    (
                        1_500_000_000_000_000_007,
                        LinkType::IPV4,
                        b"ipv4!".to_vec(),
                        5
                    ),
                    (
                        2_000_000_000 + 3_000_000_000,
                        LinkType::LINUX_SLL,
                        b"sll".to_vec(),
                        3
                    ),
                    (0, LinkType::ETHERNET, b"simple".to_vec(), 6),
                ],
                "big endian: {big}"
            );
        }
    }

    fn ts_off(big: bool, secs: i64) -> [u8; 8] {
        if big {
            secs.to_be_bytes()
        } else {
            secs.to_le_bytes()
        }
    }

    #[test]
    fn pcapng_new_section_resets_interfaces_and_byte_order() {
        let mut b = NgBuilder::new(false);
        b.shb();
        b.idb(1, 0, &[]);
        b.epb(0, 5, b"a", 1);
        b.set_big(true);
        b.shb();
        b.idb(101, 0, &[]);
        b.epb(0, 6, b"b", 1);
        b.epb(1, 7, b"c", 1);
        let mut r = CaptureReader::from_bytes(b.finish()).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap().link, LinkType::ETHERNET);
        assert_eq!(r.next_record().unwrap().unwrap().link, LinkType::RAW);
        let e = r.next_record().unwrap().unwrap_err();
        assert!(matches!(
            e,
            CaptureError::UnknownInterface {
                interface: 1,
                defined: 1,
                ..
            }
        ));
        assert!(e.to_string().contains("byte offset"), "{e}");
    }

    #[test]
    fn pcapng_spb_honours_snaplen() {
        let mut b = NgBuilder::new(false);
        b.shb();
        b.idb(1, 4, &[]);
        b.spb(b"abcdefgh", 100);
        let recs = collect(CaptureReader::from_bytes(b.finish()).unwrap());
        assert_eq!(recs, vec![(0, LinkType::ETHERNET, b"abcd".to_vec(), 100)]);
    }

    #[test]
    fn pcapng_bad_block_lengths() {
        let mut b = NgBuilder::new(false);
        b.shb();
        let shb_len = b.len();
        b.idb(1, 0, &[]);
        let good = b.finish();

        let mut odd = good.clone();
        odd[shb_len + 4] = 21;
        let e = exercise(odd).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "bad pcapng block length 21 at byte offset {shb_len}: expected a multiple of 4"
            )
        );

        let mut short = good.clone();
        short[shb_len + 4] = 8;
        let e = exercise(short).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "bad pcapng block length 8 at byte offset {shb_len}: expected at least 12 bytes for a pcapng block"
            )
        );

        let mut trailing = good.clone();
        let last = trailing.len() - 4;
        trailing[last] = 16;
        let e = exercise(trailing).unwrap_err();
        assert!(e.to_string().contains("trailing copy"), "{e}");

        let mut long = good.clone();
        long[shb_len + 5] = 1;
        let e = exercise(long).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("truncated pcapng block at byte offset {shb_len} (need 276 bytes, 20 left)")
        );

        let mut bom = good.clone();
        bom[8] = 0;
        let e = exercise(bom).unwrap_err();
        assert!(
            e.to_string().starts_with("bad magic at byte offset 8"),
            "{e}"
        );

        let mut version = good;
        version[12] = 2;
        let e = exercise(version).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported pcapng version 2.0 at byte offset 0 (expected major version 1)"
        );
    }

    #[test]
    fn pcapng_absurd_epb_length() {
        let mut b = NgBuilder::new(false);
        b.shb();
        b.idb(1, 0, &[]);
        let epb_at = b.len();
        b.epb(0, 0, b"abcd", 4);
        let mut file = b.finish();
        file[epb_at + 20..epb_at + 24].copy_from_slice(&(MAX_RECORD_LEN + 1).to_le_bytes());
        let e = exercise(file).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "absurd pcapng enhanced packet block captured length 262145 at byte offset {epb_at}"
            )),
            "{e}"
        );
    }

    #[test]
    fn tsresol_extremes_do_not_overflow() {
        for v in 0..=255u8 {
            let s = TsScale::from_tsresol(v);
            for ticks in [0, 1, u64::MAX] {
                let _ = s.to_ns(ticks, i64::MIN);
                let _ = s.to_ns(ticks, i64::MAX);
                let _ = s.to_ns(ticks, 0);
            }
        }
        assert_eq!(TsScale::from_tsresol(3).to_ns(5, 0), 5_000_000);
        assert_eq!(TsScale::from_tsresol(12).to_ns(5_000, 0), 5);
        assert_eq!(TsScale::from_tsresol(0x80 | 1).to_ns(3, 0), 1_500_000_000);
    }

    #[test]
    fn zstd_and_gzip_round_trip_and_failures() {
        let plain = pcap_file(false, true, 1, &[(9, 8, b"payload", 7), (10, 0, b"x", 1)]);
        let zstd = zstd::encode_all(&plain[..], 3).unwrap();
        let gzip = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut e, &plain).unwrap();
            e.finish().unwrap()
        };
        for (packed, codec) in [(zstd, Compression::Zstd), (gzip, Compression::Gzip)] {
            let r = CaptureReader::from_bytes(packed.clone()).unwrap();
            assert!(r.was_compressed());
            assert_eq!(r.compression(), codec);
            assert_eq!(collect(r).len(), 2);

            // Cut anywhere after the magic: a clear error, never a panic, and never the
            // records of a complete file.
            for cut in 4..packed.len() {
                let e = match CaptureReader::from_bytes(packed[..cut].to_vec()) {
                    Err(e) => e,
                    Ok(mut r) => loop {
                        match r.next_record() {
                            Some(Ok(_)) => {}
                            Some(Err(e)) => break e,
                            None => panic!("{codec:?} cut at {cut}: no error"),
                        }
                    },
                };
                let msg = e.to_string();
                assert!(
                    matches!(
                        e,
                        CaptureError::Decompress { .. } | CaptureError::Truncated { .. }
                    ),
                    "{codec:?} cut at {cut}: {msg}"
                );
                assert!(msg.contains("byte offset"), "{msg}");
            }
        }

        let garbage = zstd::encode_all(&b"not a capture"[..], 3).unwrap();
        let e = CaptureReader::from_bytes(garbage).unwrap_err();
        assert!(matches!(e, CaptureError::BadMagic { offset: 0, .. }), "{e}");
    }

    #[test]
    fn open_missing_file_is_io_error() {
        let e = CaptureReader::open("/nonexistent/capture.pcap").unwrap_err();
        assert!(matches!(e, CaptureError::Io { .. }));
        assert_eq!(e.offset(), None);
    }
}
