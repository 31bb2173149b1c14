//! A producer thread and a consumer thread: lossless when the producer
//! waits for room, exactly accounted for when the consumer is slow.

use std::hint::spin_loop;
use std::thread;
use std::time::{Duration, Instant};

use super::{payload_matches, seq_payload};
use crate::publish::event::Event;
use crate::publish::queue::{Consumer, Producer};
use crate::publish::{Pushed, channel};

/// Longest either test may run; a hang fails instead of stalling CI.
const TIME_LIMIT: Duration = Duration::from_secs(120);

/// Waits a little while the other side makes progress; fails the test past
/// `deadline`.
fn back_off(spins: &mut u32, deadline: Instant) {
    *spins += 1;
    if (*spins).is_multiple_of(64) {
        assert!(Instant::now() < deadline, "ran past the time limit");
        thread::yield_now();
    } else {
        spin_loop();
    }
}

fn stream_of(seq: u64) -> u16 {
    u16::try_from(seq % 3).expect("below 3")
}

#[test]
fn a_million_messages_arrive_in_order_exactly_once() {
    const COUNT: u64 = 1_000_000;
    let start = Instant::now();
    let deadline = start + TIME_LIMIT;
    let (mut producer, mut consumer) = channel(4096, 3);
    let stats = std::sync::Arc::clone(producer.stats());

    let sender = thread::spawn(move || {
        let mut buf = [0; 48];
        for seq in 0..COUNT {
            let event = Event::Message {
                stream: stream_of(seq),
                seq,
                recv_ns: seq.wrapping_mul(31),
                snapshot: seq % 5 == 0,
                payload: seq_payload(seq, &mut buf),
            };
            let mut spins = 0;
            while !producer.would_fit(&event) {
                back_off(&mut spins, deadline);
            }
            assert_eq!(producer.push(&event), Pushed::Written);
        }
    });

    let mut next = 0;
    let mut spins = 0;
    while next < COUNT {
        let intact = consumer.pop(|event| match event {
            Event::Message {
                stream,
                seq,
                recv_ns,
                snapshot,
                payload,
            } => {
                seq == next
                    && stream == stream_of(seq)
                    && recv_ns == seq.wrapping_mul(31)
                    && snapshot == (seq % 5 == 0)
                    && payload_matches(seq, payload)
            }
            _ => false,
        });
        match intact {
            Some(true) => next += 1,
            Some(false) => panic!("message {next} is missing, out of order or damaged"),
            None => back_off(&mut spins, deadline),
        }
    }
    sender.join().expect("producer thread");
    assert!(consumer.is_abandoned());
    assert_eq!(consumer.pop(|_| ()), None);
    let stats = stats.snapshot();
    assert_eq!((stats.pushed, stats.popped), (COUNT, COUNT));
    assert_eq!(
        (stats.dropped, stats.overrun_markers, stats.fill_bytes),
        (0, 0, 0)
    );
    assert!(start.elapsed() < TIME_LIMIT);
}

/// What the slow consumer saw, owned.
#[derive(Debug, Clone, Copy)]
enum Seen {
    /// Sequences `first..=last` arrived on a stream, payload intact or not.
    Data {
        stream: u16,
        first: u64,
        last: u64,
        intact: bool,
    },
    Overrun {
        stream: u16,
        from: u64,
        to: u64,
        events: u64,
    },
    Other,
}

const STREAMS: usize = 3;
const EVENTS: u64 = 300_000;

/// Pushes like the rx thread: never waits. Returns each stream's next
/// sequence, then flushes the markers still pending.
fn produce_without_waiting(mut producer: Producer, deadline: Instant) -> [u64; STREAMS] {
    let mut next = [0u64; STREAMS];
    let mut buf = [0; 48];
    for i in 0..EVENTS {
        let stream = stream_of(i);
        let seq = &mut next[usize::from(stream)];
        let event = if i % 50 == 49 {
            Event::Heartbeat { stream, next: *seq }
        } else if i % 7 == 0 {
            let first = *seq;
            *seq += 3;
            Event::Range {
                stream,
                first,
                last: first + 2,
                recv_ns: i,
                payload: seq_payload(first, &mut buf),
            }
        } else {
            *seq += 1;
            Event::Message {
                stream,
                seq: *seq - 1,
                recv_ns: i,
                snapshot: false,
                payload: seq_payload(*seq - 1, &mut buf),
            }
        };
        assert_ne!(producer.push(&event), Pushed::UnknownStream);
    }
    let mut spins = 0;
    while producer.pending_overruns() > 0 {
        if producer.flush_overrun() == 0 {
            back_off(&mut spins, deadline);
        }
    }
    next
}

fn consume_slowly(mut consumer: Consumer, deadline: Instant) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut spins = 0;
    loop {
        let event = consumer.pop(|event| match event {
            Event::Message {
                stream,
                seq,
                payload,
                ..
            } => Seen::Data {
                stream,
                first: seq,
                last: seq,
                intact: payload_matches(seq, payload),
            },
            Event::Range {
                stream,
                first,
                last,
                payload,
                ..
            } => Seen::Data {
                stream,
                first,
                last,
                intact: payload_matches(first, payload),
            },
            Event::Overrun {
                stream,
                from,
                to,
                events,
            } => Seen::Overrun {
                stream,
                from,
                to,
                events,
            },
            _ => Seen::Other,
        });
        match event {
            Some(event) => {
                seen.push(event);
                if seen.len() % 400 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            None if consumer.is_abandoned() && consumer.is_empty() => return seen,
            None => back_off(&mut spins, deadline),
        }
    }
}

#[test]
fn a_slow_consumer_is_told_exactly_what_it_lost() {
    let start = Instant::now();
    let deadline = start + TIME_LIMIT;
    let (producer, consumer) = channel(8192, STREAMS);
    let stats = std::sync::Arc::clone(producer.stats());
    let receiver = thread::spawn(move || consume_slowly(consumer, deadline));
    let pushed = produce_without_waiting(producer, deadline);
    let seen = receiver.join().expect("consumer thread");

    // Walk each stream in arrival order: data must start where the last
    // data or marker ended, so a marker always precedes what follows a loss.
    let mut cursor = [0u64; STREAMS];
    let mut covered: Vec<Vec<u8>> = pushed
        .iter()
        .map(|&n| vec![0; usize::try_from(n).expect("fits")])
        .collect();
    let (mut received, mut lost_events, mut markers) = (0u64, 0u64, 0u64);
    for event in &seen {
        let (stream, from, to) = match *event {
            Seen::Data {
                stream,
                first,
                last,
                intact,
            } => {
                assert!(intact, "damaged payload at {stream}/{first}");
                received += 1;
                (stream, first, last)
            }
            Seen::Overrun {
                stream,
                from,
                to,
                events,
            } => {
                markers += 1;
                lost_events += events;
                (stream, from, to)
            }
            Seen::Other => {
                received += 1;
                continue;
            }
        };
        if from > to {
            continue;
        }
        let at = &mut cursor[usize::from(stream)];
        assert_eq!(from, *at, "stream {stream}: {event:?} does not follow {at}");
        *at = to + 1;
        for seq in from..=to {
            covered[usize::from(stream)][usize::try_from(seq).expect("fits")] += 1;
        }
    }
    assert_eq!(cursor, pushed, "the tail of a stream is unaccounted for");
    assert!(covered.iter().flatten().all(|&n| n == 1));

    let stats = stats.snapshot();
    assert!(markers > 0 && received > 0, "no loss happened: {stats:?}");
    assert_eq!(received + lost_events, EVENTS);
    assert_eq!((stats.pushed, stats.dropped), (received, lost_events));
    assert_eq!(stats.overrun_markers, markers);
    assert_eq!(stats.popped, received + markers);
    assert!(start.elapsed() < TIME_LIMIT);
}
