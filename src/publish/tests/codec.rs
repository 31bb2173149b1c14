//! Encoding round trips, the documented byte layout, decode errors, and
//! garbage: decoding never panics and whatever decodes is canonical.

use super::{Xorshift, encode, every_kind};
use crate::publish::event::{DecodeError, EncodeError, Event, MAX_HEADER_LEN, StreamState};

#[test]
fn every_kind_round_trips_with_any_payload() {
    let long: Vec<u8> = (0..=255).cycle().take(1000).collect();
    for payload in [&b""[..], b"x", b"{\"u\":1}", &long] {
        for event in every_kind(payload) {
            let bytes = encode(&event);
            assert_eq!(bytes.len(), event.encoded_len());
            assert!(event.header_len() <= MAX_HEADER_LEN);
            assert_eq!(Event::decode(&bytes), Ok((event, bytes.len())), "{event:?}");
        }
    }
}

#[test]
fn header_lengths_follow_the_table() {
    let lengths: Vec<usize> = every_kind(b"").iter().map(Event::header_len).collect();
    assert_eq!(lengths, [24, 24, 31, 23, 8, 7, 15, 31, 15]);
}

#[test]
fn message_layout_is_the_documented_one() {
    let event = Event::Message {
        stream: 0x0201,
        seq: 0x0807_0605_0403_0201,
        recv_ns: 0x1817_1615_1413_1211,
        snapshot: true,
        payload: b"ab",
    };
    let mut expected = vec![1, 0x01, 0x02, 1];
    expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    expected.extend_from_slice(&[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
    expected.extend_from_slice(&[2, 0, 0, 0, b'a', b'b']);
    assert_eq!(encode(&event), expected);
}

#[test]
fn overrun_and_state_layouts_are_the_documented_ones() {
    let overrun = Event::Overrun {
        stream: 3,
        from: 10,
        to: 20,
        events: 11,
    };
    let mut expected = vec![7, 3, 0];
    for value in [10u64, 20, 11] {
        expected.extend_from_slice(&value.to_le_bytes());
    }
    expected.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(encode(&overrun), expected);

    let state = Event::State {
        stream: 1,
        state: StreamState::Closed,
    };
    assert_eq!(encode(&state), [4, 1, 0, 5, 0, 0, 0, 0]);
    assert_eq!(
        encode(&Event::SnapshotBegin { stream: 9 }),
        [5, 9, 0, 0, 0, 0, 0]
    );
}

#[test]
fn decode_stops_at_the_end_of_the_event() {
    let event = Event::Range {
        stream: 4,
        first: 1,
        last: 3,
        recv_ns: 5,
        payload: b"[1,2,3]",
    };
    let mut bytes = encode(&event);
    let len = bytes.len();
    bytes.extend_from_slice(b"trailing");
    assert_eq!(Event::decode(&bytes), Ok((event, len)));
}

#[test]
fn encode_into_a_short_buffer_writes_nothing() {
    let event = Event::Heartbeat { stream: 1, next: 2 };
    let mut out = [0xAA; 14];
    assert_eq!(
        event.encode_into(&mut out),
        Err(EncodeError::BufferTooSmall {
            needed: 15,
            available: 14
        })
    );
    assert_eq!(out, [0xAA; 14]);
}

#[test]
fn decode_names_what_is_wrong() {
    assert_eq!(
        Event::decode(&[]),
        Err(DecodeError::Truncated {
            needed: 1,
            available: 0
        })
    );
    assert_eq!(Event::decode(&[0; 40]), Err(DecodeError::UnknownTag(0)));
    assert_eq!(Event::decode(&[10; 40]), Err(DecodeError::UnknownTag(10)));
    // An epoch label longer than MAX_EPOCH_LABEL (20 bytes).
    let mut long_label = vec![9, 0, 0, 21, 0, 0, 0];
    long_label.extend_from_slice(&[b'a'; 21]);
    assert_eq!(
        Event::decode(&long_label),
        Err(DecodeError::LabelTooLong(21))
    );

    let message = encode(&Event::Message {
        stream: 1,
        seq: 2,
        recv_ns: 3,
        snapshot: false,
        payload: b"abc",
    });
    assert_eq!(
        Event::decode(&message[..10]),
        Err(DecodeError::Truncated {
            needed: 24,
            available: 10
        })
    );
    assert_eq!(
        Event::decode(&message[..26]),
        Err(DecodeError::Truncated {
            needed: 27,
            available: 26
        })
    );
    let mut flags = message.clone();
    flags[3] = 0b10;
    assert_eq!(Event::decode(&flags), Err(DecodeError::InvalidFlags(2)));

    let mut state = encode(&Event::State {
        stream: 1,
        state: StreamState::Synced,
    });
    state[3] = 6;
    assert_eq!(Event::decode(&state), Err(DecodeError::InvalidState(6)));

    let mut gap = encode(&Event::Gap {
        stream: 1,
        from: 2,
        to: 3,
    });
    gap[19] = 1;
    gap.push(0);
    assert_eq!(
        Event::decode(&gap),
        Err(DecodeError::UnexpectedPayload { tag: 3, len: 1 })
    );

    let mut huge = message;
    huge[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        Event::decode(&huge),
        Err(DecodeError::Truncated {
            needed: 24 + u32::MAX as usize,
            available: 27
        })
    );
}

#[test]
fn stream_states_round_trip_through_their_byte() {
    for (index, state) in StreamState::ALL.into_iter().enumerate() {
        let byte = u8::try_from(index).expect("six states");
        assert_eq!(state as u8, byte);
        assert_eq!(StreamState::from_u8(byte), Some(state));
        assert_eq!(state.to_string(), state.as_str());
    }
    assert_eq!(StreamState::from_u8(6), None);
    assert_eq!(StreamState::DirtySyncPending.as_str(), "dirty_sync_pending");
}

#[test]
fn accessors_report_stream_payload_and_sequences() {
    let events = every_kind(b"pay");
    let streams: Vec<u16> = events.iter().map(Event::stream).collect();
    assert_eq!(streams, [1, u16::MAX, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(events[0].payload(), b"pay");
    assert_eq!(events[2].payload(), b"pay");
    assert!(events[3..].iter().all(|event| event.payload().is_empty()));
    assert_eq!(events[1].sequences(), Some(9..=9));
    assert_eq!(events[2].sequences(), Some(100..=120));
    assert_eq!(events[3].sequences(), None);
}

/// Cases per fuzz test.
const CASES: usize = 20_000;

/// Decodes `bytes` and, when that succeeds, checks the event re-encodes to
/// exactly the bytes it was read from. Returns whether it decoded.
fn check(bytes: &[u8]) -> bool {
    match Event::decode(bytes) {
        Ok((event, used)) => {
            assert!(used <= bytes.len());
            assert_eq!(used, event.encoded_len());
            assert_eq!(encode(&event), &bytes[..used], "{bytes:?}");
            true
        }
        Err(error) => {
            assert!(!error.to_string().is_empty());
            false
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Xorshift::new(0x9E37_79B9_7F4A_7C15);
    let mut buf = [0u8; 96];
    for _ in 0..CASES {
        let len = usize::try_from(rng.below(97)).expect("below 97");
        rng.fill(&mut buf[..len]);
        check(&buf[..len]);
    }
}

#[test]
fn random_bytes_behind_a_valid_tag_never_panic() {
    let mut rng = Xorshift::new(42);
    let mut buf = [0u8; 64];
    let mut decoded = 0;
    for _ in 0..CASES {
        let len = 1 + usize::try_from(rng.below(64)).expect("below 64");
        rng.fill(&mut buf[..len]);
        buf[0] = 1 + u8::try_from(rng.below(8)).expect("below 8");
        // Small payload lengths more often, so some cases decode.
        if rng.below(2) == 0 && len > 31 {
            buf[27..31].fill(0);
            buf[19..23].fill(0);
        }
        if check(&buf[..len]) {
            decoded += 1;
        }
    }
    assert!(decoded > 0, "no case got past validation");
}

#[test]
fn mutated_events_never_panic() {
    let mut rng = Xorshift::new(7);
    let payload: Vec<u8> = (0..50).collect();
    let valid: Vec<Vec<u8>> = every_kind(&payload).iter().map(encode).collect();
    let mut decoded = 0;
    for case in 0..CASES {
        let mut bytes = valid[case % valid.len()].clone();
        for _ in 0..=rng.below(3) {
            let at = usize::try_from(rng.below(bytes.len() as u64)).expect("in range");
            bytes[at] = u8::try_from(rng.below(256)).expect("a byte");
        }
        let keep = match rng.below(3) {
            0 => usize::try_from(rng.below(bytes.len() as u64 + 1)).expect("in range"),
            _ => bytes.len(),
        };
        if check(&bytes[..keep]) {
            decoded += 1;
        }
    }
    assert!(decoded > 0, "every mutation was rejected");
}

#[test]
fn every_truncation_of_a_valid_event_is_rejected() {
    let payload = b"payload";
    for event in every_kind(payload) {
        let bytes = encode(&event);
        for len in 0..bytes.len() {
            assert!(Event::decode(&bytes[..len]).is_err(), "{event:?} at {len}");
        }
    }
}

#[test]
fn the_queue_message_head_is_the_length_and_the_encoded_header() {
    let mut rng = Xorshift::new(77);
    for len in [0usize, 1, 30, 1000, 65_535] {
        for snapshot in [false, true] {
            let (stream, seq, recv_ns) = (rng.next_u64() as u16, rng.next_u64(), rng.next_u64());
            let payload = vec![0xA5; len];
            let event = Event::Message {
                stream,
                seq,
                recv_ns,
                snapshot,
                payload: &payload,
            };
            let head = Event::message_record_head(stream, seq, recv_ns, snapshot, len)
                .expect("fits the length fields");
            let mut want = ((24 + len) as u32).to_le_bytes().to_vec();
            want.extend_from_slice(&encode(&event)[..24]);
            assert_eq!(head.to_vec(), want, "payload of {len}, snapshot {snapshot}");
        }
    }
}
