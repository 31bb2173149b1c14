//! Tests of the event encoding and the queue, with their shared helpers.

mod codec;
mod feed;
mod handoff_model;
mod handoff_runs;
mod model;
mod queue;
mod runs;
mod threads;

use crate::publish::event::{Event, StreamState};

/// A deterministic xorshift64 generator, so failures reproduce.
pub(super) struct Xorshift(u64);

impl Xorshift {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `0..bound` (`bound` > 0).
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }

    pub(super) fn fill(&mut self, out: &mut [u8]) {
        for byte in out {
            *byte = self.next_u64().to_le_bytes()[3];
        }
    }
}

/// The encoded bytes of `event`: an owned form to compare and keep.
pub(super) fn encode(event: &Event<'_>) -> Vec<u8> {
    let mut out = vec![0; event.encoded_len()];
    let len = event
        .encode_into(&mut out)
        .expect("buffer sized by encoded_len");
    assert_eq!(len, out.len());
    out
}

/// One event of every kind (two messages: live and snapshot), with
/// `payload` where the kind carries one.
pub(super) fn every_kind(payload: &[u8]) -> Vec<Event<'_>> {
    vec![
        Event::Message {
            stream: 1,
            seq: 0x0102_0304_0506_0708,
            recv_ns: 1_700_000_000_123_456_789,
            snapshot: false,
            payload,
        },
        Event::Message {
            stream: u16::MAX,
            seq: 9,
            recv_ns: 0,
            snapshot: true,
            payload,
        },
        Event::Range {
            stream: 2,
            first: 100,
            last: 120,
            recv_ns: u64::MAX,
            payload,
        },
        Event::Gap {
            stream: 3,
            from: 5,
            to: 9,
        },
        Event::State {
            stream: 4,
            state: StreamState::Recovering,
        },
        Event::SnapshotBegin { stream: 5 },
        Event::SnapshotEnd {
            stream: 6,
            next: 77,
        },
        Event::Overrun {
            stream: 7,
            from: u64::MAX,
            to: 0,
            events: 3,
        },
        Event::Heartbeat {
            stream: 8,
            next: 1 << 40,
        },
    ]
}

/// Writes the test payload of message `seq` into `buf` and returns it:
/// 8 to 48 bytes, the seq in the first 8 and bytes derived from it after.
pub(super) fn seq_payload(seq: u64, buf: &mut [u8; 48]) -> &[u8] {
    let len = 8 + usize::try_from(seq % 41).expect("below 41");
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, byte) in buf[8..len].iter_mut().enumerate() {
        *byte = seq.to_le_bytes()[i % 8] ^ u8::try_from(i).expect("below 48");
    }
    &buf[..len]
}

/// True when `payload` is exactly the test payload of message `seq`.
pub(super) fn payload_matches(seq: u64, payload: &[u8]) -> bool {
    let mut buf = [0; 48];
    seq_payload(seq, &mut buf) == payload
}
