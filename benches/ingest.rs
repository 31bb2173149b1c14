//! The rx path against its floors, measured in the same run.
//!
//! 1. Ingest: datagrams already queued on a loopback multicast socket are drained with
//!    `recvmmsg` and run through decode, venue session, sequencer and hand-off to a
//!    consumer queue; the baseline is a bare `recvmmsg` drain of the same datagrams.
//! 2. Hand-off: one message event pushed into the consumer queue (encode, record framing,
//!    overrun bookkeeping) against the same bytes pushed into the raw SPSC ring.
//!
//! `cargo bench --bench ingest`

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use gapless::daemon::fanout::Fanout;
use gapless::io::batch::RecvBatch;
use gapless::io::socket::{MulticastSpec, open_multicast, open_multicast_sender};
use gapless::protocol::moldudp64::{PacketWriter, Session};
use gapless::publish::{self, Event};
use gapless::venue::{ChannelSpec, FeedSession, FeedSpec, Via, Wire};

const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 63, 1), 46301);
const DATAGRAMS: u64 = 2_000;
const MESSAGES_PER_DATAGRAM: u64 = 40;

fn datagrams(first_seq: u64) -> Vec<Vec<u8>> {
    let session = Session(*b"BENCH00001");
    let mut seq = first_seq;
    (0..DATAGRAMS)
        .map(|_| {
            let mut buf = vec![0u8; 1400];
            let mut w = PacketWriter::new(&mut buf, session, seq).expect("header fits");
            for _ in 0..MESSAGES_PER_DATAGRAM {
                let mut m = [b'A'; 30];
                m[1..9].copy_from_slice(&seq.to_be_bytes());
                if w.push(&m).is_err() {
                    break;
                }
                seq += 1;
            }
            let n = w.finish();
            buf.truncate(n);
            buf
        })
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Queues `packets` on the socket, then times draining them with `drain`.
fn timed_drain(
    sender: &std::net::UdpSocket,
    packets: &[Vec<u8>],
    mut drain: impl FnMut() -> u64,
) -> Option<f64> {
    for p in packets {
        sender.send_to(p, GROUP).ok()?;
    }
    let start = Instant::now();
    let mut got = 0;
    let deadline = start + Duration::from_secs(5);
    while got < packets.len() as u64 && Instant::now() < deadline {
        got += drain();
    }
    (got == packets.len() as u64).then(|| start.elapsed().as_nanos() as f64 / packets.len() as f64)
}

fn ingest() -> Option<(f64, f64)> {
    let spec = MulticastSpec {
        group: GROUP,
        interface: Ipv4Addr::LOCALHOST,
        source: None,
        rcvbuf: 8 << 20,
    };
    let (socket, _) = open_multicast(&spec).ok()?;
    let sender = open_multicast_sender(Ipv4Addr::LOCALHOST, 0).ok()?;
    let fd = socket.as_raw_fd();
    let mut batch = RecvBatch::new(64, 2048);
    let (mut bare, mut full) = (Vec::new(), Vec::new());
    let channel = ChannelSpec {
        name: "bench".into(),
        session: None,
        rerequest: Vec::new(),
        snapshot: None,
    };
    let spec = FeedSpec::new(Wire::MoldUdp64, vec![channel]);
    let mut delivered = 0;
    // Big enough for a round, small enough to stay resident after the first rounds.
    let (producer, mut consumer) = publish::channel(16 << 20, 1);
    let mut fanout = Fanout::new(vec![producer]);
    let mut next_seq = 1;
    for round in 0..28 {
        let packets = datagrams(next_seq);
        next_seq += DATAGRAMS * MESSAGES_PER_DATAGRAM;
        let ns = timed_drain(&sender, &packets, || {
            let n = batch.recv(fd).unwrap_or(0);
            for i in 0..n {
                black_box(batch.payload(i));
            }
            n as u64
        })?;
        bare.push(ns);
        let packets = datagrams(next_seq);
        next_seq += DATAGRAMS * MESSAGES_PER_DATAGRAM;
        // A fresh session (allocated before the clock starts) adopts this round's first
        // datagram, so the sequences the bare round consumed are not a gap.
        let mut session = FeedSession::new(spec.clone());
        let ns = timed_drain(&sender, &packets, || {
            let n = batch.recv(fd).unwrap_or(0);
            for i in 0..n {
                session.on_datagram(round, 0, batch.payload(i), 1, Via::Multicast, &mut fanout);
            }
            n as u64
        })?;
        full.push(ns);
        while consumer.pop(|_| ()).is_some() {}
        delivered += session.stats(0).sequencer.delivered;
    }
    assert_eq!(
        delivered,
        28 * DATAGRAMS * MESSAGES_PER_DATAGRAM,
        "every message handed off"
    );
    // The first rounds fault the queue's and the session's pages in: not measured.
    bare.drain(..3);
    full.drain(..3);
    Some((median(bare), median(full)))
}

/// The producer side only: a round of pushes into a queue big enough to hold them all,
/// drained after the clock stops, for both the consumer queue and the raw ring (the first
/// round, which faults the pages in, is not counted).
fn handoff() -> (f64, f64) {
    const N: u64 = 1_000_000;
    const BYTES: usize = 128 << 20;
    let payload = [7u8; 30];
    let (mut producer, mut consumer) = publish::channel(BYTES, 1);
    let (mut tx, mut rx) = rtrb::RingBuffer::<u8>::new(BYTES);
    let record_len = 4 + 24 + payload.len();
    let mut ours = Vec::new();
    let mut raw = Vec::new();
    for _ in 0..16 {
        let start = Instant::now();
        for seq in 0..N {
            let e = Event::Message {
                stream: 0,
                seq,
                recv_ns: seq,
                snapshot: false,
                payload: &payload,
            };
            let pushed = producer.push(&e);
            debug_assert_eq!(pushed, gapless::publish::Pushed::Written);
            let _ = black_box(pushed);
        }
        ours.push(start.elapsed().as_nanos() as f64 / N as f64);
        while consumer.pop(|_| ()).is_some() {}

        // The same bytes (record length, header, payload) through the bare SPSC ring.
        let start = Instant::now();
        for seq in 0..N {
            if let Ok(mut chunk) = tx.write_chunk_uninit(record_len) {
                let mut record = [0u8; 4 + 24 + 30];
                record[..4].copy_from_slice(&((record_len - 4) as u32).to_le_bytes());
                record[4..12].copy_from_slice(&seq.to_le_bytes());
                record[28..].copy_from_slice(&payload);
                let (a, b) = chunk.as_mut_slices();
                let split = a.len();
                rtrb::CopyToUninit::copy_to_uninit(&record[..split], a);
                rtrb::CopyToUninit::copy_to_uninit(&record[split..], b);
                // SAFETY: both pieces of the chunk were just written in full.
                unsafe { chunk.commit_all() };
            }
        }
        raw.push(start.elapsed().as_nanos() as f64 / N as f64);
        let n = rx.slots();
        if let Ok(chunk) = rx.read_chunk(n) {
            chunk.commit_all();
        }
    }
    ours.remove(0);
    raw.remove(0);
    (median(ours), median(raw))
}

fn main() {
    println!("| path | gapless ns | baseline ns | baseline / gapless (rate ratio) |");
    println!("|---|---:|---:|---:|");
    match ingest() {
        Some((bare, full)) => {
            let per_msg = |ns: f64| ns / MESSAGES_PER_DATAGRAM as f64;
            println!(
                "| ingest, per datagram of {MESSAGES_PER_DATAGRAM} messages (recvmmsg + decode + sequence + hand-off vs bare recvmmsg) | {full:.0} | {bare:.0} | {:.2}x |",
                bare / full
            );
            println!(
                "| ingest, per message | {:.1} | {:.1} | {:.2}x |",
                per_msg(full),
                per_msg(bare),
                bare / full
            );
        }
        None => println!("| ingest | skipped: loopback multicast unavailable | | |"),
    }
    let (ours, raw) = handoff();
    println!(
        "| hand-off, per message (consumer queue vs raw SPSC ring) | {ours:.1} | {raw:.1} | {:.2}x |",
        raw / ours
    );
    println!(
        "(medians; a ratio is baseline time / gapless time, so 1.00x means no cost over the floor)"
    );
}
