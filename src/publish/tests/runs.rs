//! Runs: one record for many messages, popped one message at a time.

use super::Xorshift;
use crate::publish::event::Event;
use crate::publish::queue::RECORD_PREFIX_LEN;
use crate::publish::run::{BlockLengths, MessageRun, RUN_HEADER_LEN};
use crate::publish::{Consumer, Pushed, channel};

/// Blocks holding `messages`, with big-endian lengths.
fn blocks(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&(m.len() as u16).to_be_bytes());
        out.extend_from_slice(m);
    }
    out
}

/// What a consumer saw, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Message {
        stream: u16,
        seq: u64,
        recv_ns: u64,
        payload: Vec<u8>,
    },
    Overrun {
        stream: u16,
        from: u64,
        to: u64,
        events: u64,
    },
    Other,
}

fn pop(consumer: &mut Consumer) -> Option<Seen> {
    consumer.pop(|e| match e {
        Event::Message {
            stream,
            seq,
            recv_ns,
            snapshot: false,
            payload,
        } => Seen::Message {
            stream,
            seq,
            recv_ns,
            payload: payload.to_vec(),
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
    })
}

fn drain(consumer: &mut Consumer) -> Vec<Seen> {
    std::iter::from_fn(|| pop(consumer)).collect()
}

#[test]
fn a_run_pops_as_its_messages_between_other_events() {
    let (mut producer, mut consumer) = channel(4096, 2);
    let messages = vec![b"first".to_vec(), Vec::new(), b"third".to_vec()];
    let bytes = blocks(&messages);
    let run = MessageRun::new(1, 10, 77, BlockLengths::BigEndian, &bytes, 3).expect("valid");
    let single = Event::Message {
        stream: 0,
        seq: 5,
        recv_ns: 1,
        snapshot: false,
        payload: b"solo",
    };
    assert_eq!(producer.push(&single), Pushed::Written);
    assert_eq!(producer.push_run(&run), Pushed::Written);
    assert_eq!(producer.push(&single), Pushed::Written);
    let mut seen = vec![pop(&mut consumer).expect("solo")];
    seen.push(pop(&mut consumer).expect("first of the run"));
    // Mid-run the queue is not empty even if the ring holds nothing else.
    assert!(!consumer.is_empty());
    seen.extend(drain(&mut consumer));
    let solo = Seen::Message {
        stream: 0,
        seq: 5,
        recv_ns: 1,
        payload: b"solo".to_vec(),
    };
    let of_run = |i: usize| Seen::Message {
        stream: 1,
        seq: 10 + i as u64,
        recv_ns: 77,
        payload: messages[i].clone(),
    };
    assert_eq!(seen, [solo.clone(), of_run(0), of_run(1), of_run(2), solo]);
    assert!(consumer.is_empty());
    // The producer publishes its counters when idle (and every 64 events).
    assert_eq!(producer.flush_overrun(), 0);
    let stats = producer.stats().snapshot();
    assert_eq!((stats.pushed, stats.popped, stats.fill_bytes), (5, 5, 0));
}

#[test]
fn a_run_that_does_not_fit_is_one_overrun_marker_spanning_it() {
    let messages: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 30]).collect();
    let bytes = blocks(&messages);
    let record = RECORD_PREFIX_LEN + RUN_HEADER_LEN + bytes.len();
    let (mut producer, mut consumer) = channel(record + record / 2, 1);
    let run = |first| MessageRun::new(0, first, 0, BlockLengths::BigEndian, &bytes, 40);
    let run = |first| run(first).expect("valid");
    assert_eq!(producer.push_run(&run(1)), Pushed::Written);
    assert_eq!(producer.push_run(&run(41)), Pushed::Dropped);
    assert_eq!(producer.push_run(&run(81)), Pushed::Dropped);
    let seen = drain(&mut consumer);
    assert_eq!(seen.len(), 40);
    assert_eq!(producer.push_run(&run(121)), Pushed::Written);
    let seen = drain(&mut consumer);
    assert_eq!(
        seen.first(),
        Some(&Seen::Overrun {
            stream: 0,
            from: 41,
            to: 120,
            events: 80
        })
    );
    let seqs: Vec<u64> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Message { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (121..161).collect::<Vec<_>>());
    producer.flush_overrun();
    let stats = producer.stats().snapshot();
    assert_eq!((stats.pushed, stats.dropped), (80, 80));
}

/// Runs and single messages of random sizes through a small ring, so records wrap its end
/// at every offset; pops interleave at random. Every message comes out once, in order,
/// or inside an overrun marker that covers exactly what was dropped.
#[test]
fn random_runs_through_a_wrapping_ring_match_what_was_pushed() {
    let mut rng = Xorshift::new(0x05ee_d0f2_u64);
    for capacity in [97usize, 256, 1000, 4096] {
        let (mut producer, mut consumer) = channel(capacity, 1);
        let mut want: Vec<Seen> = Vec::new();
        let mut lost: Option<(u64, u64, u64)> = None;
        let mut seen: Vec<Seen> = Vec::new();
        let mut seq = 1u64;
        for _ in 0..20_000 {
            if rng.below(3) == 0 {
                while let Some(s) = pop(&mut consumer) {
                    seen.push(s);
                    if rng.below(4) == 0 {
                        break;
                    }
                }
                continue;
            }
            let mut messages: Vec<Vec<u8>> = (0..1 + rng.below(6))
                .map(|_| {
                    let mut m = vec![0u8; rng.below(40) as usize];
                    rng.fill(&mut m);
                    m
                })
                .collect();
            // Runs that fit the ring: a longer one goes in message by message (tested
            // on its own below), which this oracle does not model.
            while messages.len() > 1
                && RECORD_PREFIX_LEN + RUN_HEADER_LEN + blocks(&messages).len() > capacity
            {
                messages.pop();
            }
            let count = messages.len();
            let bytes = blocks(&messages);
            let recv_ns = rng.next_u64();
            let pushed = if count == 1 && rng.below(2) == 0 {
                producer.push(&Event::Message {
                    stream: 0,
                    seq,
                    recv_ns,
                    snapshot: false,
                    payload: &messages[0],
                })
            } else {
                let run = MessageRun::new(
                    0,
                    seq,
                    recv_ns,
                    BlockLengths::BigEndian,
                    &bytes,
                    count as u32,
                )
                .expect("valid");
                producer.push_run(&run)
            };
            let last = seq + count as u64 - 1;
            match pushed {
                Pushed::Written => {
                    if let Some((from, to, events)) = lost.take() {
                        want.push(Seen::Overrun {
                            stream: 0,
                            from,
                            to,
                            events,
                        });
                    }
                    for (i, m) in messages.into_iter().enumerate() {
                        want.push(Seen::Message {
                            stream: 0,
                            seq: seq + i as u64,
                            recv_ns,
                            payload: m,
                        });
                    }
                }
                Pushed::Dropped => {
                    let (from, _, events) = lost.unwrap_or((seq, 0, 0));
                    lost = Some((from, last, events + count as u64));
                }
                Pushed::UnknownStream => panic!("stream 0 is known"),
            }
            seq = last + 1;
        }
        seen.extend(drain(&mut consumer));
        while producer.flush_overrun() == 0 && lost.is_some() {
            seen.extend(drain(&mut consumer));
        }
        seen.extend(drain(&mut consumer));
        if let Some((from, to, events)) = lost {
            want.push(Seen::Overrun {
                stream: 0,
                from,
                to,
                events,
            });
        }
        assert_eq!(seen.len(), want.len(), "capacity {capacity}");
        assert!(
            seen == want,
            "capacity {capacity}: first difference at {:?}",
            { seen.iter().zip(&want).position(|(a, b)| a != b) }
        );
        assert!(
            want.iter().any(|s| matches!(s, Seen::Overrun { .. })),
            "capacity {capacity}: the ring never filled"
        );
        assert_eq!(consumer.stats().snapshot().discarded, 0);
    }
}

#[test]
fn a_run_longer_than_the_queue_goes_in_message_by_message() {
    let messages: Vec<Vec<u8>> = (0..20).map(|i| vec![i as u8; 30]).collect();
    let bytes = blocks(&messages);
    let (mut producer, mut consumer) = channel(512, 1);
    let run = MessageRun::new(0, 1, 5, BlockLengths::BigEndian, &bytes, 20).expect("valid");
    // 20 messages of 58-byte records do not all fit 512 bytes: the first eight do.
    assert_eq!(producer.push_run(&run), Pushed::Dropped);
    assert_eq!(producer.dropped_events(), 12);
    let seen = drain(&mut consumer);
    let seqs: Vec<u64> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Message { seq, payload, .. } => {
                assert_eq!(payload, &messages[(*seq - 1) as usize]);
                Some(*seq)
            }
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    // The rest is reported once there is room.
    assert_eq!(producer.flush_overrun(), 1);
    assert_eq!(
        drain(&mut consumer),
        [Seen::Overrun {
            stream: 0,
            from: 9,
            to: 20,
            events: 12
        }]
    );
}
