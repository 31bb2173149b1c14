//! Random interleavings of push, pop and flush against a plain model: a
//! `VecDeque` of encoded events with a byte budget.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::encode;
use crate::publish::event::{Event, StreamState};
use crate::publish::queue::{OVERRUN_RECORD_LEN, RECORD_PREFIX_LEN};
use crate::publish::{Pushed, channel};

#[derive(Debug, Clone)]
enum Op {
    /// Push an event of kind `kind % 8` on `stream` (which may be unknown)
    /// with a payload of `len` bytes where the kind has one.
    Push {
        stream: u16,
        kind: u8,
        len: usize,
    },
    Pop,
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..5, 0u8..8, 0usize..90).prop_map(|(stream, kind, len)| Op::Push { stream, kind, len }),
        3 => Just(Op::Pop),
        1 => Just(Op::Flush),
    ]
}

/// Loss on one stream: lowest and highest sequence, events.
type Loss = (u64, u64, u64);

/// What the queue should hold: whole encoded events, in order.
struct Model {
    capacity: usize,
    used: usize,
    records: VecDeque<Vec<u8>>,
    losses: Vec<Loss>,
    pending: VecDeque<u16>,
}

impl Model {
    fn free(&self) -> usize {
        self.capacity - self.used
    }

    fn append(&mut self, bytes: Vec<u8>) {
        self.used += RECORD_PREFIX_LEN + bytes.len();
        self.records.push_back(bytes);
    }

    fn write_markers(&mut self, count: usize) {
        for _ in 0..count {
            let stream = self.pending.pop_front().expect("pending marker");
            let (from, to, events) =
                std::mem::replace(&mut self.losses[usize::from(stream)], (u64::MAX, 0, 0));
            self.append(encode(&Event::Overrun {
                stream,
                from,
                to,
                events,
            }));
        }
    }

    fn push(&mut self, event: &Event<'_>) -> Pushed {
        let stream = usize::from(event.stream());
        if stream >= self.losses.len() {
            return Pushed::UnknownStream;
        }
        let need =
            self.pending.len() * OVERRUN_RECORD_LEN + RECORD_PREFIX_LEN + event.encoded_len();
        if need <= self.free() {
            self.write_markers(self.pending.len());
            self.append(encode(event));
            return Pushed::Written;
        }
        let loss = &mut self.losses[stream];
        if loss.2 == 0 {
            self.pending.push_back(event.stream());
        }
        // A snapshot message's seq is not a sequence of the feed's.
        let snapshot = matches!(event, Event::Message { snapshot: true, .. });
        if let Some(seqs) = event.sequences().filter(|_| !snapshot) {
            loss.0 = loss.0.min(*seqs.start());
            loss.1 = loss.1.max(*seqs.end());
        }
        loss.2 += 1;
        Pushed::Dropped
    }

    fn flush(&mut self) -> usize {
        let count = self.pending.len().min(self.free() / OVERRUN_RECORD_LEN);
        self.write_markers(count);
        count
    }

    fn pop(&mut self) -> Option<Vec<u8>> {
        let bytes = self.records.pop_front()?;
        self.used -= RECORD_PREFIX_LEN + bytes.len();
        Some(bytes)
    }
}

/// The event an op pushes; `next` is the stream's next sequence.
fn event_for<'a>(stream: u16, kind: u8, next: &mut u64, payload: &'a [u8]) -> Event<'a> {
    let seq = *next;
    match kind {
        0 => {
            *next += 1;
            Event::Message {
                stream,
                seq,
                recv_ns: seq,
                snapshot: seq.is_multiple_of(2),
                payload,
            }
        }
        1 => {
            *next += 4;
            Event::Range {
                stream,
                first: seq,
                last: seq + 3,
                recv_ns: seq,
                payload,
            }
        }
        2 => Event::Gap {
            stream,
            from: seq,
            to: seq + 1,
        },
        3 => Event::State {
            stream,
            state: StreamState::ALL[usize::try_from(seq % 6).expect("below 6")],
        },
        4 => Event::SnapshotBegin { stream },
        5 => Event::SnapshotEnd { stream, next: seq },
        6 => Event::Heartbeat { stream, next: seq },
        _ => {
            *next += 1;
            Event::Message {
                stream,
                seq,
                recv_ns: 0,
                snapshot: true,
                payload: &[],
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn queue_matches_the_model(
        capacity in 40usize..400,
        streams in 1usize..5,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let (mut producer, mut consumer) = channel(capacity, streams);
        let mut model = Model {
            capacity: producer.capacity(),
            used: 0,
            records: VecDeque::new(),
            losses: vec![(u64::MAX, 0, 0); streams],
            pending: VecDeque::new(),
        };
        let payload: Vec<u8> = (0..90).collect();
        let mut next = [0u64; 5];
        for op in ops {
            match op {
                Op::Push { stream, kind, len } => {
                    let event = event_for(stream, kind, &mut next[usize::from(stream)], &payload[..len]);
                    let fits = producer.would_fit(&event);
                    let pushed = producer.push(&event);
                    prop_assert_eq!(pushed, model.push(&event));
                    prop_assert_eq!(fits, pushed == Pushed::Written);
                }
                Op::Pop => prop_assert_eq!(consumer.pop(|event| encode(&event)), model.pop()),
                Op::Flush => prop_assert_eq!(producer.flush_overrun(), model.flush()),
            }
            prop_assert_eq!(producer.fill_bytes(), model.used);
            prop_assert_eq!(producer.pending_overruns(), model.pending.len());
        }
        while let Some(expected) = model.pop() {
            prop_assert_eq!(consumer.pop(|event| encode(&event)), Some(expected));
        }
        prop_assert_eq!(consumer.pop(|_| ()), None);
        prop_assert_eq!(producer.stats().fill_bytes(), 0);
    }
}
