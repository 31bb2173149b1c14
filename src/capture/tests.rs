//! Tests on the shared real captures, and robustness against truncated and corrupted input.

use std::collections::BTreeMap;
use std::fs;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use super::testutil::{NgBuilder, XorShift, captures_dir, exercise, pcap_file};
use super::{CaptureError, CaptureReader, LinkType, PcapWriter, Stats, udp_datagram};

fn nasdaq_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for feed in fs::read_dir(dir.join("moldudp64/Nasdaq")).unwrap() {
        let feed = feed.unwrap().path();
        if !feed.is_dir() {
            continue;
        }
        for file in fs::read_dir(&feed).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "pcap") {
                files.push(file);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn nasdaq_moldudp64_captures_yield_datagrams() {
    let Some(dir) = captures_dir() else { return };
    let files = nasdaq_files(&dir);
    assert!(files.len() >= 20, "found only {} files", files.len());
    let mut total = Stats::default();
    let mut tagged = 0;
    for file in &files {
        let mut reader = CaptureReader::open(file).unwrap();
        assert_eq!(
            reader.pcap_link_type(),
            Some(LinkType::ETHERNET),
            "{}",
            file.display()
        );
        let mut stats = Stats::default();
        while let Some(record) = reader.next_record() {
            let record = record.unwrap();
            let frame = record.data;
            if frame.get(12..14) == Some(&[0x81, 0x00][..]) {
                tagged += 1;
            } else {
                // Only the ISE combo feeds were captured without a VLAN tag.
                assert!(
                    file.to_string_lossy().contains("/Ise."),
                    "untagged: {}",
                    file.display()
                );
            }
            stats.extract(record.link, frame).unwrap();
        }
        assert!(stats.datagrams > 0, "{}", file.display());
        assert_eq!(stats.skipped(), 0, "{}", file.display());
        total.datagrams += stats.datagrams;
    }
    eprintln!(
        "{} Nasdaq files, {} UDP datagrams, {tagged} of the frames 802.1Q-tagged",
        files.len(),
        total.datagrams
    );
    assert!(tagged >= 12);
}

#[test]
fn nasdaq_multiple_packets() {
    let Some(dir) = captures_dir() else { return };
    let path =
        dir.join("moldudp64/Nasdaq/Nasdaq.Equities.TotalView.Itch.v5.0/Multiple.Packets.pcap");
    let mut reader = CaptureReader::open(path).unwrap();
    let mut found = Vec::new();
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        let d = udp_datagram(record.link, record.data).unwrap().unwrap();
        found.push((
            record.ts_ns,
            d.dst,
            d.payload.len(),
            d.payload[..10].to_vec(),
        ));
    }
    assert_eq!(found.len(), 2);
    let group = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 111), 26477);
    for (_, dst, _, session) in &found {
        assert_eq!(*dst, group);
        assert_eq!(session, b"000010059B");
    }
    assert_eq!(
        found[1].2, 1472,
        "second packet carries a full 1,472-byte payload"
    );
    assert!(
        found[0].0 > 1_692_000_000_000_000_000,
        "2023 timestamp: {}",
        found[0].0
    );
}

#[test]
fn iex_tops_zstd_capture() {
    let Some(dir) = captures_dir() else { return };
    let mut reader = CaptureReader::open(dir.join("iex/Tops.v1.6.pcap.zst")).unwrap();
    assert!(reader.was_compressed());
    let link = reader.pcap_link_type().unwrap();
    let mut stats = Stats::default();
    let mut destinations = BTreeMap::new();
    let mut records = 0u64;
    let mut first_ts = None;
    let mut last_ts = 0;
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        records += 1;
        first_ts.get_or_insert(record.ts_ns);
        last_ts = record.ts_ns;
        let d = stats.extract(record.link, record.data).unwrap();
        // IEX-TP header: version 1, reserved 0.
        assert_eq!(d.payload.first(), Some(&1));
        *destinations.entry(d.dst).or_insert(0u64) += 1;
    }
    eprintln!(
        "iex: {} bytes decompressed, link {link}, {records} records, destinations {destinations:?}, ts {first_ts:?}..{last_ts}",
        reader.position()
    );
    assert_eq!(records, 150_000);
    assert_eq!(stats.datagrams, 150_000);
    assert_eq!(link, LinkType::ETHERNET);
}

/// Every prefix of `base` reads cleanly up to the cut and then reports truncation.
fn truncate_everywhere(name: &str, base: &[u8]) {
    let full = exercise(base.to_vec()).unwrap();
    assert!(full > 0, "{name}");
    for cut in 0..base.len() {
        match exercise(base[..cut].to_vec()) {
            Ok(n) => assert!(n < full, "{name} cut at {cut}"),
            Err(CaptureError::Truncated {
                offset, left, need, ..
            }) => {
                assert!(left < need, "{name} cut at {cut}");
                assert!(
                    offset + left == cut as u64,
                    "{name} cut at {cut}: offset {offset} + {left}"
                );
            }
            Err(e) => panic!("{name} cut at {cut}: {e}"),
        }
    }
}

fn written_pcap() -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 4000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 111), 26477);
    for i in 0..6u64 {
        w.write_udp(
            1_692_700_000_000_000_000 + i,
            src,
            dst,
            &vec![i as u8; 10 + 30 * i as usize],
        )
        .unwrap();
    }
    w.into_inner().unwrap()
}

fn built_pcapng(big: bool) -> Vec<u8> {
    let raw = written_pcap();
    let mut reader = CaptureReader::from_bytes(raw).unwrap();
    let mut b = NgBuilder::new(big);
    b.shb();
    b.idb(1, 0, &[(9, &[9]), (2, b"eth0")]);
    b.block(5, &[0; 16]); // interface statistics: skipped
    b.idb(1, 128, &[]);
    let mut i = 0;
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        if i % 3 == 2 {
            b.spb(record.data, record.orig_len);
        } else {
            b.epb(i % 2, record.ts_ns, record.data, record.orig_len);
        }
        i += 1;
    }
    b.finish()
}

#[test]
fn truncated_files_report_truncation() {
    truncate_everywhere("written pcap", &written_pcap());
    truncate_everywhere(
        "big-endian µs pcap",
        &pcap_file(
            true,
            false,
            1,
            &[(1, 2, &[0x55; 80], 80), (3, 4, &[0; 14], 14)],
        ),
    );
    truncate_everywhere("pcapng LE", &built_pcapng(false));
    truncate_everywhere("pcapng BE", &built_pcapng(true));
    if let Some(dir) = captures_dir() {
        let real = fs::read(
            dir.join("moldudp64/Nasdaq/Nasdaq.Equities.TotalView.Itch.v5.0/Multiple.Packets.pcap"),
        )
        .unwrap();
        truncate_everywhere("Multiple.Packets.pcap", &real);
    }
}

#[test]
fn truncated_zstd_never_panics() {
    let packed = zstd::encode_all(&built_pcapng(false)[..], 19).unwrap();
    for cut in 0..packed.len() {
        let result = exercise(packed[..cut].to_vec());
        assert!(result.is_err(), "cut at {cut} of {}", packed.len());
    }
}

/// Flips bytes of `base` deterministically, `cases` times; returns (ok, err) counts.
fn corrupt(base: &[u8], seed: u64, cases: usize) -> (usize, usize) {
    let mut rng = XorShift::new(seed);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..cases {
        let mut bytes = base.to_vec();
        let flips = 1 + rng.below(4);
        for _ in 0..flips {
            // Half the flips land in the first 64 bytes, where the headers are.
            let at = if rng.next().is_multiple_of(2) {
                rng.below(64.min(bytes.len()))
            } else {
                rng.below(bytes.len())
            };
            let mask = (rng.next() % 255 + 1) as u8;
            bytes[at] ^= mask;
        }
        if rng.next().is_multiple_of(4) {
            // Overwrite a whole aligned word, as a corrupt length field would be.
            let at = rng.below(bytes.len() / 4) * 4;
            let word = rng.next().to_le_bytes();
            for (i, b) in word.iter().take(4).enumerate() {
                if let Some(slot) = bytes.get_mut(at + i) {
                    *slot = *b;
                }
            }
        }
        match exercise(bytes) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    (ok, err)
}

#[test]
fn corrupted_headers_never_panic() {
    let mut bases = vec![
        ("written pcap", written_pcap()),
        ("pcapng LE", built_pcapng(false)),
        ("pcapng BE", built_pcapng(true)),
    ];
    if let Some(dir) = captures_dir() {
        let real = fs::read(
            dir.join("moldudp64/Nasdaq/Nasdaq.Equities.TotalView.Itch.v5.0/Multiple.Packets.pcap"),
        )
        .unwrap();
        bases.push(("Multiple.Packets.pcap", real));
    }
    for (i, (name, base)) in bases.iter().enumerate() {
        let (ok, err) = corrupt(base, 0x9E37_79B9_7F4A_7C15 ^ i as u64, 3_000);
        eprintln!("{name}: 3000 corruptions, {ok} read to the end, {err} errors");
        assert!(err > 0 && ok > 0, "{name}");
    }
}

#[test]
fn corrupted_zstd_never_panics() {
    let packed = zstd::encode_all(&written_pcap()[..], 3).unwrap();
    let (ok, err) = corrupt(&packed, 42, 1_000);
    eprintln!("zstd: 1000 corruptions, {ok} read to the end, {err} errors");
    assert!(err > 0);
}

#[test]
fn real_iex_truncated_and_corrupted() {
    let Some(dir) = captures_dir() else { return };
    let packed = fs::read(dir.join("iex/Tops.v1.6.pcap.zst")).unwrap();
    for cut in [1, 4, 100, packed.len() / 3, packed.len() - 1] {
        let e = exercise(packed[..cut].to_vec()).unwrap_err();
        eprintln!("iex cut at {cut}: {e}");
    }
    let plain = zstd::decode_all(&packed[..]).unwrap();
    let mut rng = XorShift::new(2024);
    for _ in 0..10 {
        let cut = rng.below(plain.len());
        let mut bytes = plain[..cut].to_vec();
        let at = rng.below(bytes.len());
        bytes[at] ^= 0xFF;
        let _ = exercise(bytes);
    }
}

/// Hands out its bytes a few at a time, as a pipe or a slow decoder may.
struct Trickle {
    data: Vec<u8>,
    at: usize,
    rng: XorShift,
}

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (1 + self.rng.below(7))
            .min(buf.len())
            .min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn records_of(mut reader: CaptureReader) -> Vec<(u64, Vec<u8>, u64)> {
    let mut out = Vec::new();
    while let Some(r) = reader.next_record() {
        let r = r.unwrap();
        out.push((r.ts_ns, r.data.to_vec(), r.offset));
    }
    out
}

#[test]
fn short_reads_give_the_same_records_as_one_buffer() {
    for (name, file) in [
        ("pcap", written_pcap()),
        ("pcapng le", built_pcapng(false)),
        ("pcapng be", built_pcapng(true)),
    ] {
        let whole = records_of(CaptureReader::from_bytes(file.clone()).unwrap());
        assert_eq!(whole.len(), 6, "{name}");
        for seed in 1..20 {
            let trickle = Trickle {
                data: file.clone(),
                at: 0,
                rng: XorShift::new(seed),
            };
            let reader = CaptureReader::from_reader("trickle", trickle).unwrap();
            assert_eq!(records_of(reader), whole, "{name} seed {seed}");
        }
    }
}

#[test]
fn a_large_pcapng_block_grows_the_buffer_up_to_its_bound_and_no_further() {
    let mut b = NgBuilder::new(false);
    b.shb();
    b.idb(1, 0, &[]);
    b.block(4, &vec![7; 900 * 1024]); // a large block that is not a packet: skipped
    b.epb(0, 5, b"after", 5);
    let reader = CaptureReader::from_bytes(b.finish()).unwrap();
    let capacity = reader.buffer_capacity();
    let got = records_of(reader);
    assert_eq!(got.len(), 1);
    assert!(capacity <= super::MAX_BUFFER);

    let mut b = NgBuilder::new(false);
    b.shb();
    b.idb(1, 0, &[]);
    let at = b.len();
    b.block(4, &vec![7; super::MAX_BUFFER]);
    let e = exercise(b.finish()).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "absurd pcapng block length {} at byte offset {at}",
            super::MAX_BUFFER + 12
        )),
        "{e}"
    );
}

/// The bounded-memory promise: a zstd capture that expands to 2 GiB (and is a few
/// hundred KiB itself) is read in full through a buffer that never grows.
#[test]
fn a_multi_gigabyte_zstd_capture_reads_in_a_fixed_buffer() {
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 9, 9), 30_009);
    let expanded = 2u64 << 30;
    let mut bomb = Vec::new();
    let records = crate::sim::capture::write_zstd_bomb(&mut bomb, group, expanded).unwrap();
    assert!(bomb.len() < 2 << 20, "the bomb is {} bytes", bomb.len());
    let mut reader = CaptureReader::from_bytes(bomb).unwrap();
    let start = reader.buffer_capacity();
    let (mut n, mut largest) = (0u64, start);
    while let Some(record) = reader.next_record() {
        assert!(!record.unwrap().data.is_empty());
        n += 1;
        if n % 65_536 == 0 {
            largest = largest.max(reader.buffer_capacity());
        }
    }
    assert_eq!(n, records);
    assert!(reader.position() >= expanded, "{}", reader.position());
    assert_eq!(largest, start, "the buffer grew");
    assert!(start <= super::MAX_BUFFER);
}

/// A measurement aid, not a check: writes the zstd bomb to `$GAPLESS_BOMB` (4 GiB
/// expanded) and a generated feed capture to `$GAPLESS_FEED`, for `/usr/bin/time -v
/// gapless replay`.
#[test]
#[ignore = "writes files for a measurement"]
fn write_measurement_captures() {
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 9, 9), 30_009);
    if let Ok(path) = std::env::var("GAPLESS_BOMB") {
        let file = std::io::BufWriter::new(fs::File::create(&path).unwrap());
        let n = crate::sim::capture::write_zstd_bomb(file, group, 4 << 30).unwrap();
        eprintln!("{path}: {n} records");
    }
    if let Ok(path) = std::env::var("GAPLESS_FEED") {
        let mut feed = crate::sim::capture::FeedCapture::new(group, 2_000_000, 1_000_000);
        if let Some(n) = std::env::var("GAPLESS_FEED_PER_PACKET")
            .ok()
            .and_then(|n| n.parse().ok())
        {
            feed.per_packet = n;
        }
        feed.missing = vec![
            crate::sequencer::SeqRange::new(1_000, 1_003),
            crate::sequencer::SeqRange::new(500_000, 500_100),
        ];
        let file = std::io::BufWriter::new(fs::File::create(&path).unwrap());
        let missing = feed.write(file).unwrap();
        eprintln!("{path}: missing {missing:?}");
    }
}
