//! The reader's cursors: a lapped reader's overrun marker carries the exact lost range, a
//! cursor replays what the ring holds and reports what it does not, and a producer restart
//! is a new generation. `memory` runs in plain memory (miri runs it); `files` maps real
//! ring files.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use super::{Cursor, Poll, ShmReader, parse_cursor};
use crate::publish::Event;
use crate::publish::wire::StreamName;

/// What a reader saw, simplified: `M(stream, seq)`, `O(stream, from, to, events)`, `G`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    M(u16, u64),
    O(u16, u64, u64, u64),
    G(u64),
    Other,
}

/// Polls until idle (at most `limit` items).
fn read_all(r: &mut ShmReader, limit: usize) -> Vec<(u64, Seen)> {
    let mut out = Vec::new();
    while out.len() < limit {
        match r.poll().unwrap() {
            Poll::Idle => break,
            Poll::Generation { generation } => out.push((0, Seen::G(generation))),
            Poll::Event { epoch, event } => out.push((
                epoch,
                match event {
                    Event::Message { stream, seq, .. } => Seen::M(stream, seq),
                    Event::Overrun {
                        stream,
                        from,
                        to,
                        events,
                    } => Seen::O(stream, from, to, events),
                    _ => Seen::Other,
                },
            )),
        }
    }
    out
}

fn message(stream: u16, seq: u64) -> Event<'static> {
    Event::Message {
        stream,
        seq,
        recv_ns: 1,
        snapshot: false,
        payload: b"0123456789abcdef0123456789abcdef",
    }
}

fn seqs(seen: &[(u64, Seen)]) -> Vec<u64> {
    seen.iter()
        .filter_map(|(_, s)| match s {
            Seen::M(_, seq) => Some(*seq),
            _ => None,
        })
        .collect()
}

mod memory {
    use super::*;
    use crate::sinks::shm::tests::{RING, heap_ring};

    const EPOCH: u64 = 7 << crate::sinks::shm::ring::EPOCH_RESET_BITS;

    #[test]
    fn a_lapped_reader_gets_the_exact_lost_range_then_the_rest_in_order() {
        let (mut w, mem, _) = heap_ring(RING, 2);
        let mut r = ShmReader::from_memory(mem).unwrap();
        for seq in 1..=10 {
            w.write(&message(0, seq));
            w.write(&message(1, seq));
        }
        assert_eq!(seqs(&read_all(&mut r, 100)).len(), 20);
        // Far more than the ring holds, while the reader sleeps.
        let last = if cfg!(miri) { 150 } else { 4_000 };
        for seq in 11..=last {
            w.write(&message(0, seq));
            w.write(&message(1, seq));
        }
        let seen = read_all(&mut r, 100_000);
        assert!(r.lapped() >= 1);
        // Per stream: one marker from 11 to just before the first message after the loss,
        // counting the records lost, then every message to the end.
        for stream in [0, 1] {
            let mine: Vec<&Seen> = seen
                .iter()
                .map(|(_, s)| s)
                .filter(|s| matches!(s, Seen::M(st, _) | Seen::O(st, ..) if *st == stream))
                .collect();
            let Seen::O(_, from, to, events) = *mine[0] else {
                panic!("no marker first: {:?}", mine[0]);
            };
            assert_eq!((from, events), (11, to - 10));
            let rest: Vec<u64> = mine[1..]
                .iter()
                .map(|s| match s {
                    Seen::M(_, seq) => *seq,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(rest, (to + 1..=last).collect::<Vec<_>>());
        }
        assert_eq!(
            r.cursor(0),
            Some(Cursor {
                stream: 0,
                epoch: EPOCH,
                next: last + 1
            })
        );
    }

    #[test]
    fn a_cursor_replays_what_the_ring_holds_from_there_and_nothing_before() {
        let (mut w, mem, _) = heap_ring(4 * RING, 1);
        for seq in 1..=100 {
            w.write(&message(0, seq));
        }
        let mut r = ShmReader::from_memory(mem.clone()).unwrap();
        r.set_cursor(Cursor {
            stream: 0,
            epoch: EPOCH,
            next: 51,
        });
        let seen = read_all(&mut r, 1000);
        assert_eq!(seqs(&seen), (51..=100).collect::<Vec<_>>());
        assert_eq!(seen.len(), 50, "no marker: {seen:?}");
        // A reader restarted with the first one's cursor goes on with no duplicate.
        for seq in 101..=120 {
            w.write(&message(0, seq));
        }
        let mut again = ShmReader::from_memory(mem).unwrap();
        again.set_cursor(r.cursor(0).unwrap());
        assert_eq!(
            seqs(&read_all(&mut again, 1000)),
            (101..=120).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_cursor_past_what_the_ring_holds_gets_an_explicit_gap() {
        let (mut w, mem, _) = heap_ring(RING, 1);
        let last = if cfg!(miri) { 200 } else { 3_000 };
        for seq in 1..=last {
            w.write(&message(0, seq));
        }
        let mut r = ShmReader::from_memory(mem.clone()).unwrap();
        r.set_cursor(Cursor {
            stream: 0,
            epoch: EPOCH,
            next: 5,
        });
        let seen = read_all(&mut r, 10_000);
        let Seen::O(0, 5, to, 0) = seen[0].1 else {
            panic!("{:?}", seen[0]);
        };
        assert_eq!(seqs(&seen), (to + 1..=last).collect::<Vec<_>>());
        // A cursor of an older epoch: the rest of that epoch is lost, said with to = MAX.
        let mut old = ShmReader::from_memory(mem).unwrap();
        old.set_cursor(Cursor {
            stream: 0,
            epoch: EPOCH - (1 << crate::sinks::shm::ring::EPOCH_RESET_BITS),
            next: 77,
        });
        let seen = read_all(&mut old, 10_000);
        assert_eq!(seen[0].1, Seen::O(0, 77, u64::MAX, 0));
        assert_eq!(seqs(&seen).first(), Some(&(to + 1)));
    }

    #[test]
    fn cursors_parse_by_id_name_and_venue() {
        let streams = [StreamName::new("nasdaq", "a"), StreamName::new("iex", "a")];
        assert_eq!(
            parse_cursor("1=5:9", &streams),
            Ok(Cursor {
                stream: 1,
                epoch: 5,
                next: 9
            })
        );
        assert_eq!(parse_cursor("iex/a=5:9", &streams).map(|c| c.stream), Ok(1));
        assert!(parse_cursor("a=5:9", &streams).is_err(), "ambiguous");
        assert!(parse_cursor("b=5:9", &streams).is_err());
        assert!(parse_cursor("0=x:9", &streams).is_err());
        assert!(parse_cursor("0=5", &streams).is_err());
    }
}

#[cfg(not(miri))]
mod files {
    use super::*;
    use crate::sinks::shm::ShmSink;

    #[test]
    fn a_producer_restart_is_a_new_generation_and_a_new_epoch() {
        let dir = std::env::temp_dir().join(format!("gapless-shm-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ring");
        let names = [StreamName::new("v", "s")];
        let mut sink = ShmSink::create(&path, 1 << 16, &names).unwrap();
        for seq in 1..=10 {
            sink.write(&message(0, seq));
        }
        let mut r = ShmReader::open(&path, &[]).unwrap();
        let first = read_all(&mut r, 100);
        let Seen::G(g1) = first[0].1 else {
            panic!("{first:?}")
        };
        assert_eq!(seqs(&first), (1..=10).collect::<Vec<_>>());
        let epoch1 = first[1].0;
        drop(sink);
        assert!(r.is_closed());

        let mut sink = ShmSink::create(&path, 1 << 17, &names).unwrap();
        for seq in 1..=5 {
            sink.write(&message(0, seq));
        }
        let second = read_all(&mut r, 100);
        let Seen::G(g2) = second[0].1 else {
            panic!("{second:?}")
        };
        assert!(g2 > g1, "{g2} after {g1}");
        // The old epoch's end is not known: the marker says so; then the new epoch.
        assert_eq!(second[1].1, Seen::O(0, 11, u64::MAX, 0));
        assert_eq!(seqs(&second), (1..=5).collect::<Vec<_>>());
        assert!(second[2].0 > epoch1);
        drop(sink);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
