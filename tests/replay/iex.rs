//! Replay of the real IEX TOPS capture through the live pipeline: exact counts, every
//! message once and in order, exact gap ranges when packets are removed, determinism, and
//! clear errors for truncated or corrupt files.

use std::path::{Path, PathBuf};

use gapless::capture::{CaptureReader, PcapWriter, Stats};
use gapless::drive::replay::{ReplayOptions, ReplaySummary, replay_reader};
use gapless::protocol::iex_tp;
use gapless::sequencer::SeqRange;
use gapless::venue::Wire;

fn capture() -> Option<PathBuf> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures/iex/Tops.v1.6.pcap.zst");
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipping: ../shared/captures not found");
        None
    }
}

fn options() -> ReplayOptions {
    ReplayOptions {
        wire: Some(Wire::IexTp),
        destinations: Vec::new(),
        channels: Vec::new(),
        venue: "iex".into(),
        speed: None,
        from_start: true,
        progress: false,
    }
}

fn run(reader: CaptureReader) -> (ReplaySummary, Vec<u8>) {
    let mut out = Vec::new();
    let summary = replay_reader(reader, &options(), Some(&mut out)).expect("replay");
    (summary, out)
}

/// Sequence numbers of the message lines, in order, and gap events as (line index, range).
fn parse_lines(jsonl: &[u8]) -> (Vec<u64>, Vec<(usize, SeqRange)>) {
    let text = std::str::from_utf8(jsonl).unwrap();
    let mut seqs = Vec::new();
    let mut gaps = Vec::new();
    let field = |line: &str, key: &str| -> Option<u64> {
        let at = line.find(key)? + key.len();
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    for line in text.lines() {
        if line.contains("\"event\":\"gap\"") {
            let (from, to) = (
                field(line, "\"from\":").unwrap(),
                field(line, "\"to\":").unwrap(),
            );
            gaps.push((seqs.len(), SeqRange::new(from, to)));
        } else if let Some(seq) = field(line, "\"seq\":") {
            seqs.push(seq);
        }
    }
    (seqs, gaps)
}

#[test]
fn real_capture_replays_exactly() {
    let Some(path) = capture() else { return };
    let (summary, jsonl) = run(CaptureReader::open(&path).unwrap());
    assert_eq!(summary.records, 150_000);
    assert_eq!(summary.selected, 150_000);
    assert_eq!(summary.messages, 212_153);
    assert_eq!(summary.heartbeats, 2_667);
    assert_eq!(summary.delivered, 212_153);
    assert_eq!(summary.gaps().count(), 0);
    assert_eq!(summary.incomplete().count(), 0);
    assert_eq!(summary.streams.len(), 1);
    assert_eq!(summary.streams[0].delivered_range, Some((1, 212_153)));
    let (seqs, gaps) = parse_lines(&jsonl);
    assert!(gaps.is_empty());
    assert_eq!(seqs.len(), 212_153);
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == i as u64 + 1),
        "every message once, in order"
    );
}

#[test]
fn the_protocol_is_told_from_the_datagrams() {
    let Some(path) = capture() else { return };
    let options = ReplayOptions {
        wire: None,
        ..options()
    };
    let summary = replay_reader(CaptureReader::open(&path).unwrap(), &options, None).unwrap();
    assert_eq!((summary.wire, summary.detected), (Some(Wire::IexTp), true));
    assert_eq!(summary.delivered, 212_153);
    assert_eq!(summary.incomplete().count(), 0);
    assert!(
        summary
            .to_string()
            .contains("verdict:     every stream complete")
    );
    // Named wrongly, the summary says what the datagrams look like.
    let options = ReplayOptions {
        wire: Some(Wire::MoldUdp64),
        ..options
    };
    let summary = replay_reader(CaptureReader::open(&path).unwrap(), &options, None).unwrap();
    assert!(
        summary.to_string().contains("try --protocol iex-tp"),
        "{summary}"
    );
}

/// The capture with every 997th data packet and one burst of 100 data packets removed,
/// and the message ranges those packets carried.
fn with_packets_removed(path: &Path) -> (Vec<u8>, Vec<SeqRange>) {
    let mut reader = CaptureReader::open(path).unwrap();
    let mut writer = PcapWriter::new(Vec::new()).unwrap();
    let mut link = Stats::default();
    let mut removed: Vec<SeqRange> = Vec::new();
    let mut data_index = 0u64;
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        let d = link.extract(record.link, record.data).unwrap();
        let p = iex_tp::Packet::decode(d.payload).unwrap();
        if !p.is_heartbeat() {
            data_index += 1;
            let drop = data_index.is_multiple_of(997) || (60_000..60_100).contains(&data_index);
            if drop {
                let range = SeqRange::new(p.sequence(), p.next_sequence() - 1);
                match removed.last_mut() {
                    Some(last) if last.to + 1 == range.from => last.to = range.to,
                    _ => removed.push(range),
                }
                continue;
            }
        }
        writer
            .write_udp(record.ts_ns, d.src, d.dst, d.payload)
            .unwrap();
    }
    (writer.into_inner().unwrap(), removed)
}

#[test]
fn removed_packets_are_reported_exactly_and_nothing_crosses_them() {
    let Some(path) = capture() else { return };
    let (bytes, removed) = with_packets_removed(&path);
    assert!(removed.len() > 100, "{} ranges removed", removed.len());
    let lost: u64 = removed.iter().map(SeqRange::len).sum();
    let (summary, jsonl) = run(CaptureReader::from_bytes(bytes).unwrap());
    let gaps: Vec<SeqRange> = summary.gaps().copied().collect();
    assert_eq!(gaps, removed, "exact missing ranges");
    assert_eq!(summary.delivered, 212_153 - lost);
    assert_eq!(summary.streams[0].stats.messages_lost, lost);
    assert_eq!(
        summary.incomplete().count(),
        1,
        "the stream that lost data is named"
    );
    let (seqs, gap_lines) = parse_lines(&jsonl);
    // Nothing inside a gap is delivered, and every jump over a gap is announced first.
    for (i, pair) in seqs.windows(2).enumerate() {
        if pair[1] != pair[0] + 1 {
            let announced = gap_lines
                .iter()
                .any(|(at, g)| *at == i + 1 && g.from == pair[0] + 1 && g.to == pair[1] - 1);
            assert!(
                announced,
                "jump {} -> {} without its gap event",
                pair[0], pair[1]
            );
        }
    }
    assert!(seqs.iter().all(|s| !removed.iter().any(|r| r.contains(*s))));
}

#[test]
fn replay_is_deterministic() {
    let Some(path) = capture() else { return };
    let (bytes, _) = with_packets_removed(&path);
    let (a, first) = run(CaptureReader::from_bytes(bytes.clone()).unwrap());
    let (b, second) = run(CaptureReader::from_bytes(bytes).unwrap());
    assert_eq!(a, b);
    assert!(first == second, "identical JSON lines");
}

#[test]
fn truncated_and_corrupt_files_give_clear_errors() {
    let Some(path) = capture() else { return };
    let (bytes, _) = with_packets_removed(&path);
    // A file cut right after its header is a valid, empty capture.
    let empty = replay_reader(
        CaptureReader::from_bytes(bytes[..24].to_vec()).unwrap(),
        &options(),
        None,
    );
    assert_eq!(empty.map(|s| s.records).ok(), Some(0));
    for cut in [10usize, 30, 1_000, bytes.len() / 2, bytes.len() - 3] {
        let reader = match CaptureReader::from_bytes(bytes[..cut].to_vec()) {
            Ok(r) => r,
            Err(e) => {
                assert!(e.to_string().contains("byte offset"), "{e}");
                continue;
            }
        };
        let err = replay_reader(reader, &options(), None).expect_err("truncated");
        assert!(err.to_string().contains("byte offset"), "{err}");
    }
    // Flipped bytes: a clean error or counted drops, never a panic.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200 {
        let mut damaged = bytes[..200_000].to_vec();
        for _ in 0..8 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let at = (rng % damaged.len() as u64) as usize;
            damaged[at] ^= (rng >> 32) as u8 | 1;
        }
        if let Ok(reader) = CaptureReader::from_bytes(damaged) {
            let _ = replay_reader(reader, &options(), None);
        }
    }
}
