//! The ring's publication protocol in plain memory: every kind of event through it, wrap,
//! padding, overwrite detection and the head, and a writer and a reader racing on two
//! threads with no torn record ever accepted. No file, no system call: miri runs these.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use super::name_table;
use super::ring::{self, Geometry, Memory, Raw, RingReader, RingWriter};
use crate::publish::wire::StreamName;
use crate::publish::{Event, StreamState};

/// The data bytes of the test rings: the smallest a sink takes natively, 4 KiB under miri.
pub(crate) const RING: u64 = if cfg!(miri) { 1 << 12 } else { 1 << 16 };

/// A zeroed ring of `capacity` data bytes in heap memory, initialized as generation 7.
pub(crate) fn heap_ring(capacity: u64, streams: usize) -> (RingWriter, Memory, Geometry) {
    let table: Vec<StreamName> = (0..streams)
        .map(|i| StreamName::new("v", &format!("s{i}")))
        .collect();
    let names = name_table(&table).unwrap();
    let (size, _) = ring::file_size(capacity, names.len() as u64);
    let mem = Memory::heap(size);
    let g = ring::initialize(&mem, capacity, 7, &names);
    (RingWriter::new(mem.clone(), &g, streams), mem, g)
}

fn message(stream: u16, seq: u64, payload: &[u8]) -> Event<'_> {
    Event::Message {
        stream,
        seq,
        recv_ns: seq * 10,
        snapshot: false,
        payload,
    }
}

/// Reads everything there is, panicking on a lap.
fn drain(reader: &mut RingReader) -> Vec<(ring::RecordHeader, String)> {
    let mut out = Vec::new();
    loop {
        match reader.next().unwrap() {
            Raw::Empty => return out,
            Raw::Lapped { .. } => panic!("lapped"),
            Raw::Record(h) => out.push((h, format!("{:?}", reader.event().unwrap()))),
        }
    }
}

#[test]
fn every_kind_of_event_comes_back_with_its_place_in_the_stream() {
    let (mut w, mem, g) = heap_ring(RING, 2);
    assert_eq!(ring::geometry(&mem), Ok(g));
    let events = [
        Event::State {
            stream: 0,
            state: StreamState::Unseen,
        },
        message(0, 1, b"one"),
        Event::Range {
            stream: 1,
            first: 10,
            last: 12,
            recv_ns: 5,
            payload: b"{\"u\":12}",
        },
        Event::Gap {
            stream: 0,
            from: 2,
            to: 4,
        },
        Event::SnapshotBegin { stream: 0 },
        Event::Message {
            stream: 0,
            seq: 0,
            recv_ns: 0,
            snapshot: true,
            payload: b"snap",
        },
        Event::SnapshotEnd { stream: 0, next: 9 },
        Event::Overrun {
            stream: 1,
            from: 13,
            to: 20,
            events: 3,
        },
        Event::Heartbeat { stream: 0, next: 9 },
        message(0, 9, b""),
    ];
    for e in &events {
        w.write(e);
    }
    let mut r = RingReader::new(mem, g);
    let got = drain(&mut r);
    let want: Vec<String> = events.iter().map(|e| format!("{e:?}")).collect();
    assert_eq!(got.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(), want);
    let epoch = 7 << ring::EPOCH_RESET_BITS;
    // (index, next before) of stream 0's records: a gap and a snapshot end move it too.
    let places: Vec<(u64, u64)> = got
        .iter()
        .zip(&events)
        .filter(|(_, e)| e.stream() == 0)
        .map(|((h, _), _)| {
            assert_eq!(h.epoch, epoch);
            (h.index, h.next_before)
        })
        .collect();
    assert_eq!(
        places,
        [
            (0, 0),
            (1, 0),
            (2, 2),
            (3, 5),
            (4, 5),
            (5, 5),
            (6, 9),
            (7, 9)
        ]
    );
    assert_eq!(w.stats().records, events.len() as u64);
}

#[test]
fn a_restart_of_the_numbering_is_a_new_epoch() {
    let (mut w, mem, g) = heap_ring(RING, 1);
    let unseen = Event::State {
        stream: 0,
        state: StreamState::Unseen,
    };
    w.write(&unseen);
    w.write(&message(0, 5, b"a"));
    // A second `unseen` with nothing sequenced in between is not another restart.
    w.write(&unseen);
    w.write(&unseen);
    w.write(&message(0, 1, b"b"));
    let got = drain(&mut RingReader::new(mem, g));
    let base = 7 << ring::EPOCH_RESET_BITS;
    let epochs: Vec<(u64, u64)> = got
        .iter()
        .map(|(h, _)| (h.epoch - base, h.next_before))
        .collect();
    assert_eq!(epochs, [(0, 0), (0, 0), (1, 0), (1, 0), (1, 0)]);
}

#[test]
fn records_wrap_with_padding_and_a_reader_that_keeps_up_reads_each_once() {
    let capacity = RING;
    let (mut w, mem, g) = heap_ring(capacity, 1);
    let mut r = RingReader::new(mem, g);
    let payload = [0xA5u8; 200];
    // Shorter payloads under miri, which checks each byte copied.
    let longest = if cfg!(miri) { 48 } else { 200 };
    let mut next = 1u64;
    let mut total = 0u64;
    // Lengths that do not divide the capacity: the end of the region needs padding.
    for round in 0..if cfg!(miri) { 30 } else { 300 } {
        let batch = 1 + round % 17;
        for i in 0..batch {
            let len = (round * 31 + i * 7) % longest;
            w.write(&message(0, total + 1, &payload[..len]));
            total += 1;
        }
        for (h, e) in drain(&mut r) {
            assert!(e.contains(&format!("seq: {next},")), "{e}");
            assert_eq!(h.next_before, if next == 1 { 0 } else { next });
            next += 1;
        }
    }
    assert_eq!(next - 1, total);
    assert!(w.stats().tail > 3 * capacity, "wrapped several times");
}

#[test]
fn a_lapped_reader_says_so_and_goes_on_from_the_oldest_whole_record() {
    let capacity = RING;
    let (mut w, mem, g) = heap_ring(capacity, 1);
    let mut r = RingReader::new(mem.clone(), g);
    let payload = [7u8; 100];
    // More than two rings' worth, none read; each record takes 32 + 24 + 100 bytes, 160
    // with its padding.
    let record = 160;
    let count = 3 * capacity / record;
    for seq in 1..=count {
        w.write(&message(0, seq, &payload));
    }
    assert!(matches!(r.next().unwrap(), Raw::Lapped { skipped } if skipped > 0));
    let got = drain(&mut r);
    let first = got.first().unwrap();
    // Everything from the head on is whole and in order up to the last written.
    let seqs: Vec<u64> = got.iter().map(|(h, _)| h.next_before).collect();
    assert!(seqs.windows(2).all(|p| p[1] == p[0] + 1));
    assert_eq!(got.last().unwrap().0.next_before, count);
    // The head kept as much as fits: the oldest record is less than one record from
    // being overwritten.
    let held = (count - first.0.next_before + 1) * record;
    assert!(held <= capacity && held + 2 * record > capacity, "{held}");
    // A new reader starts at that head too.
    let again = drain(&mut RingReader::new(mem, g));
    assert_eq!(again.first().unwrap().0, first.0);
}

#[test]
fn an_event_too_long_for_a_record_becomes_an_overrun_of_its_sequences() {
    let (mut w, mem, g) = heap_ring(RING, 1);
    let big = vec![1u8; (g.max_record as usize) + 1];
    w.write(&message(0, 1, b"x"));
    w.write(&message(0, 2, &big));
    w.write(&message(0, 3, b"y"));
    let got = drain(&mut RingReader::new(mem, g));
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[1].1,
        format!(
            "{:?}",
            Event::Overrun {
                stream: 0,
                from: 2,
                to: 2,
                events: 1
            }
        )
    );
    assert_eq!(got[2].0.next_before, 3);
    assert_eq!(w.stats().too_long, 1);
}

#[test]
fn a_bad_header_is_refused() {
    let (_w, mem, _g) = heap_ring(RING, 1);
    let words = mem.words();
    words[0].store(0, Ordering::Relaxed);
    assert_eq!(ring::geometry(&mem), Err(ring::LayoutError::BadMagic));
    words[0].store(ring::MAGIC, Ordering::Relaxed);
    words[3].store(12345, Ordering::Relaxed);
    assert!(matches!(
        ring::geometry(&mem),
        Err(ring::LayoutError::Header(_))
    ));
}

/// The payload of message `seq`: its length and every byte follow from `seq`, so a record
/// mixing two writes cannot pass for a whole one.
fn stamped(seq: u64, buf: &mut [u8; 64]) -> &[u8] {
    let len = 8 + (seq % 57) as usize;
    for (i, b) in buf.iter_mut().enumerate().take(len) {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    &buf[..len]
}

#[test]
fn a_reader_racing_the_writer_never_accepts_a_torn_record() {
    // Under miri a small ring and few messages; natively enough to lap many times.
    let (capacity, count) = if cfg!(miri) {
        (RING, 300u64)
    } else {
        (RING, 2_000_000u64)
    };
    let (mut w, mem, g) = heap_ring(capacity, 1);
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(2));
    let reader = {
        let (done, start) = (Arc::clone(&done), Arc::clone(&start));
        thread::spawn(move || {
            let mut r = RingReader::new(mem, g);
            let (mut read, mut laps, mut last) = (0u64, 0u64, 0u64);
            let mut buf = [0u8; 64];
            start.wait();
            loop {
                let finished = done.load(Ordering::Acquire);
                match r.next().unwrap() {
                    Raw::Record(h) => {
                        let Some(Event::Message { seq, payload, .. }) = r.event() else {
                            panic!("not a message");
                        };
                        assert_eq!(payload, stamped(seq, &mut buf), "torn record {seq}");
                        assert_eq!(h.next_before, if seq == 1 { 0 } else { seq });
                        assert!(seq > last, "in order: {seq} after {last}");
                        last = seq;
                        read += 1;
                    }
                    Raw::Lapped { .. } => laps += 1,
                    Raw::Empty if finished => return (read, laps, last),
                    Raw::Empty => thread::yield_now(),
                }
            }
        })
    };
    let mut buf = [0u8; 64];
    start.wait();
    for seq in 1..=count {
        let payload = stamped(seq, &mut buf);
        w.write(&message(0, seq, payload));
        if seq % 1024 == 0 {
            // Give a reader on the same core a chance, natively and under miri.
            thread::yield_now();
        }
    }
    done.store(true, Ordering::Release);
    let (read, laps, last) = reader.join().unwrap();
    assert_eq!(last, count, "the reader reached the end");
    assert!(read > 0);
    eprintln!("read {read} of {count} messages, lapped {laps} times");
}
