//! The queue one call at a time: records at every offset of the ring,
//! overrun markers, and the edges of push.

use super::{encode, every_kind};
use crate::publish::event::{Event, OVERRUN_LEN};
use crate::publish::queue::{Consumer, OVERRUN_RECORD_LEN, Producer, RECORD_PREFIX_LEN};
use crate::publish::{Pushed, channel};

/// Length of a message record with no payload.
const EMPTY_MESSAGE_RECORD: usize = RECORD_PREFIX_LEN + 24;

fn message(stream: u16, seq: u64, payload: &[u8]) -> Event<'_> {
    Event::Message {
        stream,
        seq,
        recv_ns: seq * 10,
        snapshot: false,
        payload,
    }
}

/// A message whose record is exactly `record_len` bytes.
fn filler(record_len: usize, buf: &[u8]) -> Event<'_> {
    message(0, 0, &buf[..record_len - EMPTY_MESSAGE_RECORD])
}

fn pop_bytes(consumer: &mut Consumer) -> Option<Vec<u8>> {
    consumer.pop(|event| encode(&event))
}

/// Moves both ends of an empty ring to `offset`, with records of at most the queue's
/// capacity.
fn advance(producer: &mut Producer, consumer: &mut Consumer, offset: usize) {
    let capacity = producer.capacity();
    let buf = vec![7; capacity];
    let mut left = match offset {
        0 => 0,
        _ if offset >= EMPTY_MESSAGE_RECORD => offset,
        _ => producer.ring_len() + offset,
    };
    while left > 0 {
        let mut step = left.min(capacity);
        if (1..EMPTY_MESSAGE_RECORD).contains(&(left - step)) {
            step = left - EMPTY_MESSAGE_RECORD;
        }
        assert_eq!(producer.push(&filler(step, &buf)), Pushed::Written);
        assert!(pop_bytes(consumer).is_some());
        left -= step;
    }
    assert!(consumer.is_empty());
}

/// Ring offsets to test at: every one, or (under miri, which runs the unsafe code about a
/// thousand times slower) every seventh, which still meets every alignment modulo 8.
fn offsets(ring_len: usize) -> impl Iterator<Item = usize> {
    (0..ring_len).step_by(if cfg!(miri) { 7 } else { 1 })
}

/// Length of the ring of a queue made with `channel(capacity, streams)`.
fn ring_len(capacity: usize, streams: usize) -> usize {
    channel(capacity, streams).0.ring_len()
}

#[test]
fn every_kind_round_trips_at_every_offset() {
    const CAPACITY: usize = 160;
    let payload: Vec<u8> = (1..=40).collect();
    for offset in offsets(ring_len(CAPACITY, 16)) {
        for event in every_kind(&payload)
            .iter()
            .filter(|event| event.stream() < 16)
        {
            let (mut producer, mut consumer) = channel(CAPACITY, 16);
            advance(&mut producer, &mut consumer, offset);
            assert_eq!(producer.push(event), Pushed::Written);
            assert_eq!(
                pop_bytes(&mut consumer),
                Some(encode(event)),
                "offset {offset}"
            );
            assert_eq!(pop_bytes(&mut consumer), None);
        }
    }
}

#[test]
fn overrun_marker_round_trips_at_every_offset() {
    const CAPACITY: usize = 96;
    let buf = [3u8; CAPACITY];
    for offset in offsets(ring_len(CAPACITY, 2)) {
        let (mut producer, mut consumer) = channel(CAPACITY, 2);
        advance(&mut producer, &mut consumer, offset);
        let big = filler(CAPACITY - 10, &buf);
        assert_eq!(producer.push(&big), Pushed::Written);
        assert_eq!(producer.push(&message(1, 41, b"lost")), Pushed::Dropped);
        assert_eq!(producer.push(&message(1, 42, b"lost")), Pushed::Dropped);
        assert_eq!(pop_bytes(&mut consumer), Some(encode(&big)));
        let after = message(1, 43, b"kept");
        assert_eq!(producer.push(&after), Pushed::Written);
        let marker = Event::Overrun {
            stream: 1,
            from: 41,
            to: 42,
            events: 2,
        };
        assert_eq!(pop_bytes(&mut consumer), Some(encode(&marker)));
        assert_eq!(pop_bytes(&mut consumer), Some(encode(&after)));
        assert_eq!(pop_bytes(&mut consumer), None);
    }
}

#[test]
fn last_stream_id_is_usable() {
    let (mut producer, mut consumer) = channel(0, usize::from(u16::MAX) + 1);
    assert_eq!(producer.streams(), usize::from(u16::MAX) + 1);
    let event = message(u16::MAX, 3, b"end");
    assert_eq!(producer.push(&event), Pushed::Written);
    assert_eq!(pop_bytes(&mut consumer), Some(encode(&event)));
}

#[test]
fn unknown_stream_is_refused_untouched() {
    let (mut producer, mut consumer) = channel(1024, 2);
    assert_eq!(producer.push(&message(2, 1, b"")), Pushed::UnknownStream);
    assert!(!producer.would_fit(&message(2, 1, b"")));
    assert_eq!(producer.pending_overruns(), 0);
    assert_eq!(pop_bytes(&mut consumer), None);
    assert_eq!(producer.stats().snapshot().dropped, 0);
}

#[test]
fn record_larger_than_the_ring_is_dropped_and_reported() {
    let (mut producer, mut consumer) = channel(256, 1);
    let huge = vec![0; 300];
    assert!(!producer.would_fit(&message(0, 5, &huge)));
    assert_eq!(producer.push(&message(0, 5, &huge)), Pushed::Dropped);
    assert_eq!(producer.push(&message(0, 6, b"ok")), Pushed::Written);
    let marker = Event::Overrun {
        stream: 0,
        from: 5,
        to: 5,
        events: 1,
    };
    assert_eq!(pop_bytes(&mut consumer), Some(encode(&marker)));
    assert_eq!(
        pop_bytes(&mut consumer),
        Some(encode(&message(0, 6, b"ok")))
    );
}

#[test]
fn capacity_holds_a_marker_and_the_ring_keeps_a_marker_per_stream() {
    let (producer, consumer) = channel(10, 4);
    assert_eq!(producer.capacity(), OVERRUN_RECORD_LEN);
    assert_eq!(producer.ring_len(), 5 * OVERRUN_RECORD_LEN);
    assert_eq!(consumer.capacity(), producer.capacity());
    assert_eq!(producer.streams(), 4);
    assert_eq!(OVERRUN_RECORD_LEN, RECORD_PREFIX_LEN + OVERRUN_LEN);
}

#[test]
fn a_producer_dropped_with_its_queue_full_still_reports_every_loss() {
    let (mut producer, mut consumer) = channel(64, 4);
    let buf = [1u8; 64];
    let full = filler(64, &buf);
    assert_eq!(producer.push(&full), Pushed::Written);
    assert_eq!(producer.free_bytes(), 0);
    for stream in [2, 0, 3, 1] {
        assert_eq!(producer.push(&message(stream, 9, b"x")), Pushed::Dropped);
    }
    assert_eq!(
        producer.flush_overrun(),
        0,
        "no room while the producer lives"
    );
    drop(producer);
    assert_eq!(pop_bytes(&mut consumer), Some(encode(&full)));
    for stream in [2, 0, 3, 1] {
        let marker = Event::Overrun {
            stream,
            from: 9,
            to: 9,
            events: 1,
        };
        assert_eq!(pop_bytes(&mut consumer), Some(encode(&marker)));
    }
    assert_eq!(pop_bytes(&mut consumer), None);
}

#[test]
fn flush_writes_the_markers_that_fit_in_order_of_loss() {
    let capacity = 3 * OVERRUN_RECORD_LEN;
    let (mut producer, mut consumer) = channel(capacity, 3);
    let buf = vec![1; capacity];
    let big = filler(2 * OVERRUN_RECORD_LEN, &buf);
    assert_eq!(producer.push(&big), Pushed::Written);
    for stream in [2, 0, 1] {
        let ten = message(stream, 7, b"0123456789");
        assert_eq!(producer.push(&ten), Pushed::Dropped);
    }
    assert_eq!(producer.pending_overruns(), 3);
    assert_eq!(producer.flush_overrun(), 1);
    assert_eq!(producer.pending_overruns(), 2);
    assert!(pop_bytes(&mut consumer).is_some());
    assert_eq!(producer.flush_overrun(), 2);
    assert_eq!(producer.flush_overrun(), 0);
    let streams: Vec<u16> = std::iter::from_fn(|| consumer.pop(|event| event.stream())).collect();
    assert_eq!(streams, [2, 0, 1]);
    let stats = producer.stats().snapshot();
    assert_eq!(
        (stats.pushed, stats.dropped, stats.overrun_markers),
        (1, 3, 3)
    );
    assert_eq!(stats.popped, 4);
    assert_eq!(stats.fill_bytes, 0);
}

#[test]
fn fill_and_free_track_both_ends() {
    let (mut producer, mut consumer) = channel(1000, 1);
    let event = message(0, 1, b"12345");
    let record = RECORD_PREFIX_LEN + event.encoded_len();
    assert!(producer.would_fit(&event));
    assert_eq!(producer.push(&event), Pushed::Written);
    assert_eq!(producer.fill_bytes(), record);
    assert_eq!(producer.free_bytes(), 1000 - record);
    assert_eq!(consumer.available_bytes(), record);
    // Counters are published every 64 pushes and whenever the producer is idle.
    producer.flush_overrun();
    assert_eq!(
        producer.stats().fill_bytes(),
        u64::try_from(record).expect("small")
    );
    assert!(pop_bytes(&mut consumer).is_some());
    assert_eq!(producer.fill_bytes(), 0);
    assert_eq!(consumer.stats().fill_bytes(), 0);
    assert_eq!(consumer.stats().capacity_bytes(), 1000);
    assert_eq!(consumer.stats().discarded(), 0);
}

#[test]
fn dropping_the_producer_flushes_markers_and_abandons() {
    let (mut producer, mut consumer) = channel(64, 1);
    let buf = [0u8; 64];
    assert_eq!(producer.push(&filler(60, &buf)), Pushed::Written);
    assert_eq!(producer.push(&message(0, 9, b"")), Pushed::Dropped);
    assert!(!consumer.is_abandoned());
    assert!(!producer.is_abandoned());
    assert!(pop_bytes(&mut consumer).is_some());
    drop(producer);
    assert!(consumer.is_abandoned());
    let marker = Event::Overrun {
        stream: 0,
        from: 9,
        to: 9,
        events: 1,
    };
    assert_eq!(pop_bytes(&mut consumer), Some(encode(&marker)));
    assert_eq!(pop_bytes(&mut consumer), None);
}

#[test]
fn producer_sees_a_vanished_consumer() {
    let (mut producer, consumer) = channel(64, 1);
    drop(consumer);
    assert!(producer.is_abandoned());
    assert_eq!(producer.push(&message(0, 1, b"")), Pushed::Written);
    assert!(format!("{producer:?}").contains("capacity: 64"));
}
