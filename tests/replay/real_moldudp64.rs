//! The real MoldUDP64 packets in `../shared/captures/moldudp64/` decode to the sessions,
//! sequence numbers and counts its README lists, and every message block is intact.

use std::path::{Path, PathBuf};

use gapless::capture::{CaptureReader, Stats};
use gapless::protocol::moldudp64::{Packet, PacketKind};

fn root() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures/moldudp64/Nasdaq");
    if path.is_dir() {
        Some(path)
    } else {
        eprintln!("skipping: ../shared/captures not found");
        None
    }
}

/// (folder, session, sequence, count, payload length) of every packet in one folder.
fn decode_folder(dir: &Path) -> Vec<(String, u64, u16, usize)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let mut reader = CaptureReader::open(&file).unwrap();
        let mut link = Stats::default();
        while let Some(record) = reader.next_record() {
            let record = record.unwrap();
            let d = link
                .extract(record.link, record.data)
                .expect("a UDP datagram");
            let p = Packet::decode(d.payload).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let count = match p.kind() {
                PacketKind::Data { count } => {
                    assert_eq!(p.messages().count(), usize::from(count));
                    count
                }
                PacketKind::Heartbeat | PacketKind::EndOfSession => 0,
            };
            out.push((
                p.session().to_string(),
                p.sequence(),
                count,
                d.payload.len(),
            ));
        }
    }
    out
}

#[test]
fn totalview_packets_match_the_readme() {
    let Some(root) = root() else { return };
    let packets = decode_folder(&root.join("Nasdaq.Equities.TotalView.Itch.v5.0"));
    assert!(packets.iter().all(|p| p.0 == "000010059B"));
    let first = packets
        .iter()
        .find(|p| p.1 == 14_764_496)
        .expect("the one-message packet");
    assert_eq!(first.2, 1);
    let full = packets
        .iter()
        .find(|p| p.1 == 19_009_117)
        .expect("the full packet");
    assert_eq!((full.2, full.3), (38, 1_472));
}

#[test]
fn bx_and_ise_sessions_and_heartbeats() {
    let Some(root) = root() else { return };
    let bx = decode_folder(&root.join("Bx.Equities.TotalView.Itch.v5.0"));
    assert!(!bx.is_empty() && bx.iter().all(|p| p.0 == "000010059D"));
    let mut ise = decode_folder(&root.join("Ise.OrderComboFeed.v1.1"));
    ise.extend(decode_folder(&root.join("Ise.TopComboQuoteFeed.v1.0")));
    assert!(ise.iter().all(|p| p.0 == "000008367I"), "{ise:?}");
    assert!(ise.iter().any(|p| p.2 == 0), "real heartbeats (count 0)");
}

#[test]
fn twenty_six_packets_in_all() {
    let Some(root) = root() else { return };
    let total: usize = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| decode_folder(&e.unwrap().path()).len())
        .sum();
    assert_eq!(total, 26);
}
