//! Recording UDP datagrams to classic pcap files.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::mem;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

/// The largest UDP payload that fits in one IPv4 packet (65,535 − 20 − 8 bytes).
pub const MAX_UDP_PAYLOAD: usize = 65_535 - IPV4_HEADER_LEN - UDP_HEADER_LEN;

const FILE_HEADER_LEN: u64 = 24;
const RECORD_HEADER_LEN: usize = 16;
const ETHERNET_HEADER_LEN: usize = 14;
const IPV4_HEADER_LEN: usize = 20;
const UDP_HEADER_LEN: usize = 8;
/// Minimum Ethernet frame without the frame check sequence; shorter frames are zero-padded.
const MIN_FRAME_LEN: usize = 60;
const SNAPLEN: u32 = 262_144;
const LINKTYPE_ETHERNET: u32 = 1;
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Source MAC of every frame, and destination MAC for unicast destinations: locally
/// administered, unicast.
const SRC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const UNICAST_DST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
const PADDING: [u8; MIN_FRAME_LEN] = [0; MIN_FRAME_LEN];

/// Writes UDP datagrams as Ethernet/IPv4/UDP frames to a classic pcap file with nanosecond
/// timestamps (magic `0xa1b23c4d`, little-endian), through a [`BufWriter`].
///
/// Each frame gets an Ethernet II header (destination `01:00:5e` plus the low 23 bits of a
/// multicast group, otherwise `02:00:00:00:00:02`; source `02:00:00:00:00:01`), an IPv4 header
/// (TTL 64, don't-fragment, an incrementing identification, a correct header checksum) and a UDP
/// header with checksum 0 (none). Frames shorter than 60 bytes are zero-padded as on the wire.
///
/// Buffered data is flushed by [`flush`](Self::flush), [`into_inner`](Self::into_inner) and,
/// ignoring errors, on drop.
///
/// # Example
///
/// ```
/// use std::net::{Ipv4Addr, SocketAddrV4};
///
/// use gapless::capture::{CaptureReader, PcapWriter};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("pcap-writer-doc-{}.pcap", std::process::id()));
/// let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);
/// let dst = SocketAddrV4::new(Ipv4Addr::new(233, 215, 21, 4), 10378);
///
/// let mut writer = PcapWriter::create(&path)?;
/// writer.write_udp(1_700_000_000_000_000_001, src, dst, b"first")?;
/// writer.write_udp(1_700_000_000_000_000_002, src, dst, b"second")?;
/// writer.flush()?;
/// assert_eq!(writer.records_written(), 2);
///
/// let mut reader = CaptureReader::open(&path)?;
/// let record = reader.next_record().expect("one record")?;
/// assert_eq!(record.ts_ns, 1_700_000_000_000_000_001);
/// # std::fs::remove_file(&path)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PcapWriter<W: Write = File> {
    out: BufWriter<W>,
    bytes: u64,
    records: u64,
    ip_id: u16,
}

impl PcapWriter<File> {
    /// Creates (or truncates) the file at `path` and writes the pcap file header.
    ///
    /// # Errors
    ///
    /// Any error from creating or writing the file.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::new(File::create(path)?)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Wraps `inner` in a [`BufWriter`] and writes the pcap file header.
    ///
    /// # Errors
    ///
    /// Any error from writing the header.
    pub fn new(inner: W) -> io::Result<Self> {
        let mut out = BufWriter::new(inner);
        out.write_all(&0xA1B2_3C4Du32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?; // version 2.4
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?; // thiszone
        out.write_all(&0u32.to_le_bytes())?; // sigfigs
        out.write_all(&SNAPLEN.to_le_bytes())?;
        out.write_all(&LINKTYPE_ETHERNET.to_le_bytes())?;
        Ok(Self {
            out,
            bytes: FILE_HEADER_LEN,
            records: 0,
            ip_id: 0,
        })
    }

    /// The number of bytes one [`write_udp`](Self::write_udp) of `payload_len` bytes adds to
    /// the file: record header, headers, payload and padding.
    pub const fn record_len(payload_len: usize) -> u64 {
        let frame = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN + payload_len;
        let frame = if frame < MIN_FRAME_LEN {
            MIN_FRAME_LEN
        } else {
            frame
        };
        (RECORD_HEADER_LEN + frame) as u64
    }

    /// Appends one UDP datagram sent from `src` to `dst` at `ts_ns` nanoseconds since the epoch.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `payload` exceeds [`MAX_UDP_PAYLOAD`] or the timestamp
    /// is past the year 2106 (the pcap seconds field is 32 bits); otherwise any write error.
    pub fn write_udp(
        &mut self,
        ts_ns: u64,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &[u8],
    ) -> io::Result<()> {
        let ts_sec = check_record(ts_ns, payload)?;
        let udp_len = UDP_HEADER_LEN + payload.len();
        let ip_len = IPV4_HEADER_LEN + udp_len;
        let frame_len = ETHERNET_HEADER_LEN + ip_len;
        let padding = MIN_FRAME_LEN.saturating_sub(frame_len);
        let captured = u32::try_from(frame_len + padding).map_err(|_| too_long())?;
        // The record fields, in order: seconds, nanoseconds, captured and original length.
        let ts_nsec = (ts_ns % NANOS_PER_SEC) as u32;
        let mut record = [0u8; RECORD_HEADER_LEN];
        record[0..4].copy_from_slice(&ts_sec.to_le_bytes());
        record[4..8].copy_from_slice(&ts_nsec.to_le_bytes());
        record[8..12].copy_from_slice(&captured.to_le_bytes());
        record[12..16].copy_from_slice(&captured.to_le_bytes());

        let mut ethernet = [0u8; ETHERNET_HEADER_LEN];
        ethernet[0..6].copy_from_slice(&dst_mac(*dst.ip()));
        ethernet[6..12].copy_from_slice(&SRC_MAC);
        ethernet[12..14].copy_from_slice(&0x0800u16.to_be_bytes());

        let ip = ipv4_header(ip_len as u16, self.ip_id, *src.ip(), *dst.ip());
        self.ip_id = self.ip_id.wrapping_add(1);

        let mut udp = [0u8; UDP_HEADER_LEN];
        udp[0..2].copy_from_slice(&src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
        udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        // udp[6..8]: checksum 0, "not computed", which IPv4 allows.

        self.out.write_all(&record)?;
        self.out.write_all(&ethernet)?;
        self.out.write_all(&ip)?;
        self.out.write_all(&udp)?;
        self.out.write_all(payload)?;
        self.out
            .write_all(PADDING.get(..padding).unwrap_or_default())?;
        self.bytes += Self::record_len(payload.len());
        self.records += 1;
        Ok(())
    }

    /// Writes buffered data through to the underlying writer.
    ///
    /// # Errors
    ///
    /// Any write error.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Bytes written so far, including the file header and data still buffered.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Flushes and returns the underlying writer.
    ///
    /// # Errors
    ///
    /// Any error from the final flush.
    pub fn into_inner(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

fn too_long() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("UDP payload longer than {MAX_UDP_PAYLOAD} bytes"),
    )
}

/// Validates a datagram before anything is written; returns the timestamp's seconds.
fn check_record(ts_ns: u64, payload: &[u8]) -> io::Result<u32> {
    if payload.len() > MAX_UDP_PAYLOAD {
        return Err(too_long());
    }
    u32::try_from(ts_ns / NANOS_PER_SEC).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("timestamp {ts_ns} ns is beyond the 32-bit seconds of classic pcap"),
        )
    })
}

/// The destination MAC for `ip`: the IPv4 multicast mapping, or a fixed unicast address.
fn dst_mac(ip: Ipv4Addr) -> [u8; 6] {
    if ip.is_multicast() {
        let [_, b, c, d] = ip.octets();
        [0x01, 0x00, 0x5E, b & 0x7F, c, d]
    } else {
        UNICAST_DST_MAC
    }
}

fn ipv4_header(total_len: u16, id: u16, src: Ipv4Addr, dst: Ipv4Addr) -> [u8; IPV4_HEADER_LEN] {
    let mut h = [0u8; IPV4_HEADER_LEN];
    h[0] = 0x45; // version 4, 5 words
    h[2..4].copy_from_slice(&total_len.to_be_bytes());
    h[4..6].copy_from_slice(&id.to_be_bytes());
    h[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
    h[8] = 64; // TTL
    h[9] = 17; // UDP
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let checksum = ipv4_checksum(&h);
    h[10..12].copy_from_slice(&checksum.to_be_bytes());
    h
}

/// The ones'-complement sum of the header's 16-bit words, complemented.
fn ipv4_checksum(header: &[u8; IPV4_HEADER_LEN]) -> u16 {
    let (words, _) = header.as_chunks::<2>();
    let mut sum: u32 = words
        .iter()
        .map(|w| u32::from(u16::from_be_bytes(*w)))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// A [`PcapWriter`] that moves on to a new file when the current one would exceed a size.
///
/// Files are named `path`, then `path.1`, `path.2`, … (the number appended to the full file
/// name, e.g. `feed.pcap.1`). Each is a complete pcap file with its own header. A file is
/// never left without records: a datagram too large for an empty file is written to it anyway.
/// Existing files of the same names are overwritten.
///
/// # Example
///
/// ```
/// use std::net::{Ipv4Addr, SocketAddrV4};
///
/// use gapless::capture::{CaptureReader, RotatingPcapWriter};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("rotating-doc-{}.pcap", std::process::id()));
/// let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);
/// let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 6000);
///
/// let mut writer = RotatingPcapWriter::create(&path, 1_000)?;
/// for i in 0..20u64 {
///     writer.write_udp(i, src, dst, &[0xAB; 100])?;
/// }
/// let files = writer.finish()?;
/// assert!(files.len() > 1);
/// for file in &files {
///     let mut reader = CaptureReader::open(file)?;
///     assert!(reader.next_record().is_some());
///     # std::fs::remove_file(file)?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RotatingPcapWriter {
    base: PathBuf,
    max_bytes: u64,
    current: PcapWriter<File>,
    paths: Vec<PathBuf>,
}

impl RotatingPcapWriter {
    /// Creates the first file, `path`, keeping each file at or under `max_bytes` bytes.
    ///
    /// # Errors
    ///
    /// Any error from creating the file or writing its header.
    pub fn create(path: impl AsRef<Path>, max_bytes: u64) -> io::Result<Self> {
        let base = path.as_ref().to_path_buf();
        let current = PcapWriter::create(&base)?;
        Ok(Self {
            paths: vec![base.clone()],
            base,
            max_bytes,
            current,
        })
    }

    /// Appends one UDP datagram, first starting a new file if this record would take the
    /// current one past the size limit.
    ///
    /// # Errors
    ///
    /// As [`PcapWriter::write_udp`], plus any error from finishing the old file or creating the
    /// new one.
    pub fn write_udp(
        &mut self,
        ts_ns: u64,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &[u8],
    ) -> io::Result<()> {
        check_record(ts_ns, payload)?;
        let needed = PcapWriter::<File>::record_len(payload.len());
        if self.current.records_written() > 0
            && self.current.bytes_written().saturating_add(needed) > self.max_bytes
        {
            self.rotate()?;
        }
        self.current.write_udp(ts_ns, src, dst, payload)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.current.flush()?;
        let path = numbered(&self.base, self.paths.len());
        let next = PcapWriter::create(&path)?;
        let previous = mem::replace(&mut self.current, next);
        previous.into_inner()?;
        self.paths.push(path);
        Ok(())
    }

    /// Flushes the current file.
    ///
    /// # Errors
    ///
    /// Any write error.
    pub fn flush(&mut self) -> io::Result<()> {
        self.current.flush()
    }

    /// The file being written.
    pub fn current_path(&self) -> &Path {
        self.paths
            .last()
            .map_or(self.base.as_path(), PathBuf::as_path)
    }

    /// Every file started so far, oldest first.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Flushes the current file and returns every file written, oldest first.
    ///
    /// # Errors
    ///
    /// Any error from the final flush.
    pub fn finish(self) -> io::Result<Vec<PathBuf>> {
        self.current.into_inner()?;
        Ok(self.paths)
    }
}

/// `base` for the first file, then `base.1`, `base.2`, …
fn numbered(base: &Path, index: usize) -> PathBuf {
    if index == 0 {
        return base.to_path_buf();
    }
    let mut name = base.as_os_str().to_owned();
    name.push(format!(".{index}"));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::testutil::{TempDir, XorShift};
    use crate::capture::{CaptureReader, LinkType, Stats, udp_datagram};

    fn addr(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), port)
    }

    #[test]
    fn header_bytes() {
        let bytes = PcapWriter::new(Vec::new()).unwrap().into_inner().unwrap();
        assert_eq!(
            bytes,
            [
                0x4D, 0x3C, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0
            ]
        );
    }

    #[test]
    fn frame_layout_and_checksum() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let src = addr(192, 168, 1, 10, 1234);
        let dst = addr(239, 200, 3, 4, 5678);
        w.write_udp(7_000_000_123, src, dst, b"xy").unwrap();
        assert_eq!(w.bytes_written(), 24 + 16 + 60);
        let bytes = w.into_inner().unwrap();
        assert_eq!(
            bytes.len(),
            24 + 16 + 60,
            "short frames are padded to 60 bytes"
        );
        let rec = &bytes[24..40];
        assert_eq!(rec[0..4], 7u32.to_le_bytes());
        assert_eq!(rec[4..8], 123u32.to_le_bytes());
        let frame = &bytes[40..];
        assert_eq!(frame[0..6], [0x01, 0x00, 0x5E, 0x48, 0x03, 0x04]);
        assert_eq!(frame[6..12], SRC_MAC);
        let ip: &[u8; 20] = frame[14..34].try_into().unwrap();
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 30);
        // A correct header sums to 0xFFFF, so its checksum over itself is 0.
        assert_eq!(ipv4_checksum(ip), 0);
        let d = udp_datagram(LinkType::ETHERNET, frame).unwrap().unwrap();
        assert_eq!((d.src, d.dst, d.payload), (src, dst, &b"xy"[..]));
    }

    #[test]
    fn known_checksum() {
        // The classic worked example: 4500 0073 0000 4000 4011 ???? c0a8 0001 c0a8 00c7.
        let h = ipv4_header(
            0x73,
            0,
            Ipv4Addr::new(192, 168, 0, 1),
            Ipv4Addr::new(192, 168, 0, 199),
        );
        assert_eq!(h[10..12], [0xB8, 0x61]);
    }

    #[test]
    fn unicast_mac() {
        assert_eq!(dst_mac(Ipv4Addr::new(10, 0, 0, 1)), UNICAST_DST_MAC);
        assert_eq!(
            dst_mac(Ipv4Addr::new(224, 128, 0, 1)),
            [1, 0, 0x5E, 0, 0, 1]
        );
    }

    #[test]
    fn round_trip_through_file() {
        let dir = TempDir::new("round_trip");
        let path = dir.path().join("rt.pcap");
        let mut rng = XorShift::new(7);
        let mut sent = Vec::new();
        let mut w = PcapWriter::create(&path).unwrap();
        for i in 0..500u64 {
            let len = (rng.next() % 1500) as usize;
            let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let src = addr(10, 0, (i % 7) as u8, 1, 40_000 + i as u16);
            let dst = if i % 2 == 0 {
                addr(233, 54, 12, 111, 26477)
            } else {
                addr(172, 16, 0, 9, 9000)
            };
            let ts = 1_692_700_000_000_000_000 + i * 1_234_567;
            w.write_udp(ts, src, dst, &payload).unwrap();
            sent.push((ts, src, dst, payload));
        }
        w.write_udp(
            u64::from(u32::MAX) * 1_000_000_000 + 999_999_999,
            addr(1, 2, 3, 4, 5),
            addr(5, 6, 7, 8, 9),
            &[1; MAX_UDP_PAYLOAD],
        )
        .unwrap();
        w.flush().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), w.bytes_written());
        drop(w);

        let mut r = CaptureReader::open(&path).unwrap();
        let mut stats = Stats::default();
        let mut got = Vec::new();
        while let Some(rec) = r.next_record() {
            let rec = rec.unwrap();
            assert_eq!(rec.orig_len as usize, rec.data.len());
            let d = stats.extract(rec.link, rec.data).unwrap();
            got.push((rec.ts_ns, d.src, d.dst, d.payload.to_vec()));
        }
        assert_eq!(got.len(), 501);
        assert_eq!(&got[..500], &sent[..]);
        assert_eq!(got[500].3.len(), MAX_UDP_PAYLOAD);
        assert_eq!(stats.datagrams, 501);
    }

    #[test]
    fn invalid_input_is_rejected_before_writing() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let a = addr(1, 1, 1, 1, 1);
        let e = w
            .write_udp(0, a, a, &vec![0; MAX_UDP_PAYLOAD + 1])
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = w.write_udp(u64::MAX, a, a, b"").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(w.records_written(), 0);
        assert_eq!(w.into_inner().unwrap().len(), 24);
    }

    #[test]
    fn rotation_by_size() {
        let dir = TempDir::new("rotation");
        let base = dir.path().join("feed.pcap");
        let max = 4_096;
        let mut w = RotatingPcapWriter::create(&base, max).unwrap();
        let (src, dst) = (addr(10, 0, 0, 1, 1), addr(239, 1, 1, 1, 2));
        let mut rng = XorShift::new(99);
        let mut sent = Vec::new();
        for i in 0..200u64 {
            let payload = vec![i as u8; (rng.next() % 600) as usize];
            w.write_udp(i, src, dst, &payload).unwrap();
            sent.push(payload);
        }
        // A payload larger than the limit still goes out, alone in its file.
        w.write_udp(200, src, dst, &[9; 5_000]).unwrap();
        sent.push(vec![9; 5_000]);
        assert_eq!(w.current_path(), w.paths().last().unwrap().as_path());
        let files = w.finish().unwrap();
        assert!(files.len() > 5, "{} files", files.len());
        assert_eq!(files[0], base);
        assert_eq!(files[1], dir.path().join("feed.pcap.1"));
        assert_eq!(files[2], dir.path().join("feed.pcap.2"));

        let mut got = Vec::new();
        for (n, file) in files.iter().enumerate() {
            let size = std::fs::metadata(file).unwrap().len();
            let last = n == files.len() - 1;
            assert!(size <= max || last, "{} is {size} bytes", file.display());
            let mut r = CaptureReader::open(file).unwrap();
            let mut in_file = 0;
            while let Some(rec) = r.next_record() {
                let rec = rec.unwrap();
                let d = udp_datagram(rec.link, rec.data).unwrap().unwrap();
                assert_eq!(rec.ts_ns, got.len() as u64);
                got.push(d.payload.to_vec());
                in_file += 1;
            }
            assert!(in_file > 0, "{} has no records", file.display());
        }
        assert_eq!(got, sent);
    }

    #[test]
    fn numbered_names() {
        let base = Path::new("/tmp/x/cap.pcap");
        assert_eq!(numbered(base, 0), base);
        assert_eq!(numbered(base, 12), Path::new("/tmp/x/cap.pcap.12"));
    }

    #[test]
    fn tshark_reads_written_file() {
        let tshark = std::process::Command::new("which").arg("tshark").output();
        if !tshark.is_ok_and(|o| o.status.success()) {
            eprintln!("skipping: tshark not installed");
            return;
        }
        let dir = TempDir::new("tshark");
        let path = dir.path().join("t.pcap");
        let mut w = PcapWriter::create(&path).unwrap();
        for i in 0..10u64 {
            w.write_udp(
                1_700_000_000_000_000_000 + i,
                addr(10, 0, 0, 1, 1000),
                addr(233, 54, 12, 111, 26477),
                &[i as u8; 40],
            )
            .unwrap();
        }
        drop(w);
        let out = std::process::Command::new("tshark")
            .args(["-r"])
            .arg(&path)
            .args([
                "-o",
                "ip.check_checksum:TRUE",
                "-T",
                "fields",
                "-e",
                "udp.dstport",
                "-e",
                "ip.checksum.status",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "tshark failed: {stderr}");
        // tshark warns when it runs as root (as CI does); anything else is a complaint
        // about the file.
        let complaints: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.contains("Running as user"))
            .collect();
        assert!(complaints.is_empty(), "tshark complained: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.lines().count(), 10, "{stdout}");
        assert!(stdout.lines().all(|l| l.starts_with("26477")), "{stdout}");
    }
}
