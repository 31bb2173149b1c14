//! Helpers shared by the tests of this module.

use std::path::{Path, PathBuf};

use super::{CaptureError, CaptureReader, Stats};

/// A tiny deterministic pseudo-random generator (xorshift64).
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("wip_capture_test_{}_{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where the shared real captures are, or `None` (after printing why) if absent.
pub fn captures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipping: ../shared/captures not found");
        None
    }
}

/// A classic pcap file with the given records `(seconds, fraction, data, orig_len)`.
pub fn pcap_file(big: bool, nanos: bool, link: u32, records: &[(u32, u32, &[u8], u32)]) -> Vec<u8> {
    let u32b = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut f = Vec::new();
    f.extend_from_slice(&u32b(if nanos { 0xA1B2_3C4D } else { 0xA1B2_C3D4 }));
    f.extend_from_slice(&u16b(2));
    f.extend_from_slice(&u16b(4));
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&u32b(65535));
    f.extend_from_slice(&u32b(link));
    for (sec, frac, data, orig) in records {
        f.extend_from_slice(&u32b(*sec));
        f.extend_from_slice(&u32b(*frac));
        f.extend_from_slice(&u32b(data.len() as u32));
        f.extend_from_slice(&u32b(*orig));
        f.extend_from_slice(data);
    }
    f
}

/// Builds pcapng files block by block.
pub struct NgBuilder {
    buf: Vec<u8>,
    big: bool,
}

impl NgBuilder {
    pub fn new(big: bool) -> Self {
        Self {
            buf: Vec::new(),
            big,
        }
    }

    pub fn set_big(&mut self, big: bool) {
        self.big = big;
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    fn u16b(&self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn u32b(&self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    /// Appends a block of `block_type` whose body is `body`, padded to 4 bytes.
    pub fn block(&mut self, block_type: u32, body: &[u8]) {
        let padded = body.len().next_multiple_of(4);
        let len = (12 + padded) as u32;
        let (t, l) = (self.u32b(block_type), self.u32b(len));
        self.buf.extend_from_slice(&t);
        self.buf.extend_from_slice(&l);
        self.buf.extend_from_slice(body);
        self.buf.resize(self.buf.len() + padded - body.len(), 0);
        self.buf.extend_from_slice(&l);
    }

    pub fn shb(&mut self) {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32b(0x1A2B_3C4D));
        body.extend_from_slice(&self.u16b(1));
        body.extend_from_slice(&self.u16b(0));
        body.extend_from_slice(&[0xFF; 8]); // section length unknown
        self.block(0x0A0D_0D0A, &body);
    }

    pub fn idb(&mut self, link: u16, snaplen: u32, options: &[(u16, &[u8])]) {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u16b(link));
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&self.u32b(snaplen));
        if !options.is_empty() {
            for (code, value) in options {
                body.extend_from_slice(&self.u16b(*code));
                body.extend_from_slice(&self.u16b(value.len() as u16));
                body.extend_from_slice(value);
                body.resize(body.len().next_multiple_of(4), 0);
            }
            body.extend_from_slice(&[0; 4]);
        }
        self.block(1, &body);
    }

    pub fn epb(&mut self, interface: u32, ts: u64, data: &[u8], orig: u32) {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32b(interface));
        body.extend_from_slice(&self.u32b((ts >> 32) as u32));
        body.extend_from_slice(&self.u32b(ts as u32));
        body.extend_from_slice(&self.u32b(data.len() as u32));
        body.extend_from_slice(&self.u32b(orig));
        body.extend_from_slice(data);
        self.block(6, &body);
    }

    pub fn spb(&mut self, data: &[u8], orig: u32) {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32b(orig));
        body.extend_from_slice(data);
        self.block(3, &body);
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads every record of `bytes`, running UDP extraction on each, and checks that any error
/// names a byte offset inside the data. Returns the record count or the first error.
pub fn exercise(bytes: Vec<u8>) -> Result<usize, CaptureError> {
    let plain_len = bytes.len() as u64;
    let compressed =
        bytes.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) || bytes.starts_with(&[0x1F, 0x8B]);
    let check = |e: &CaptureError, len: u64| {
        let offset = e.offset().expect("format errors carry an offset");
        let msg = e.to_string();
        assert!(msg.contains(&format!("byte offset {offset}")), "{msg}");
        if !matches!(e, CaptureError::Decompress { .. }) {
            assert!(offset <= len, "offset {offset} beyond {len} bytes: {msg}");
        }
    };
    let mut reader = match CaptureReader::from_bytes(bytes) {
        Ok(r) => r,
        Err(e) => {
            if !compressed {
                check(&e, plain_len);
            } else {
                check(&e, u64::MAX);
            }
            return Err(e);
        }
    };
    let len = if compressed { u64::MAX } else { plain_len };
    let mut stats = Stats::default();
    let mut count = 0;
    while let Some(record) = reader.next_record() {
        match record {
            Ok(record) => {
                assert!(record.data.len() <= super::MAX_RECORD_LEN as usize);
                assert!(record.offset < len);
                stats.extract(record.link, record.data);
                count += 1;
            }
            Err(e) => {
                check(&e, len);
                assert!(
                    reader.next_record().is_none(),
                    "reader must stop after an error"
                );
                return Err(e);
            }
        }
    }
    assert_eq!(stats.frames(), count as u64);
    Ok(count)
}
