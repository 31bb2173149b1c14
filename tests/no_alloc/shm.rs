//! The shared-memory ring's producer allocates nothing per event: messages, runs, gaps,
//! state changes and heartbeats, while it laps its ring many times over.

use gapless::internals::ShmSink;
use gapless::publish::run::{BlockLengths, MessageRun};
use gapless::publish::wire::StreamName;
use gapless::publish::{Event, StreamState};

use crate::allocations;

/// Four MoldUDP64 blocks (big-endian two-byte lengths) of 30 bytes each.
fn blocks() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..4u8 {
        out.extend_from_slice(&30u16.to_be_bytes());
        out.extend(std::iter::repeat_n(b'a' + i, 30));
    }
    out
}

#[test]
fn the_shm_producer_allocates_nothing_per_event() {
    let dir = std::env::temp_dir().join(format!("gapless-noalloc-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let names = [StreamName::new("v", "a"), StreamName::new("v", "b")];
    let mut sink = ShmSink::create(&dir.join("ring"), 1 << 16, &names).unwrap();
    let blocks = blocks();
    let payload = [7u8; 40];
    let mut seq = 1u64;
    let round = |sink: &mut ShmSink, seq: &mut u64| {
        for _ in 0..8 {
            sink.write(&Event::Message {
                stream: 0,
                seq: *seq,
                recv_ns: *seq,
                snapshot: false,
                payload: &payload,
            });
            *seq += 1;
        }
        let run = MessageRun::new(0, *seq, *seq, BlockLengths::BigEndian, &blocks, 4).unwrap();
        sink.write_run(&run);
        *seq += 4;
        sink.write(&Event::Gap {
            stream: 0,
            from: *seq,
            to: *seq + 1,
        });
        *seq += 2;
        sink.write(&Event::State {
            stream: 1,
            state: StreamState::Synced,
        });
        sink.write(&Event::Heartbeat {
            stream: 1,
            next: *seq,
        });
    };
    // Warm-up: past the first lap, so every page of the ring has been touched.
    for _ in 0..2_000 {
        round(&mut sink, &mut seq);
    }
    let before = allocations();
    for _ in 0..20_000 {
        round(&mut sink, &mut seq);
    }
    let after = allocations();
    let stats = sink.stats();
    assert!(
        stats.tail > 40 * (1 << 16),
        "lapped the ring many times: {stats:?}"
    );
    assert_eq!(
        after - before,
        0,
        "allocations in 20,000 rounds of 16 events"
    );
    drop(sink);
    std::fs::remove_dir_all(&dir).unwrap();
}
