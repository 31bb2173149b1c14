//! Resume requests against the unix sink's replay history, on sockets under a temp dir.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::client::unix::{Progress, Record, RecordReader, connect};
use crate::publish::wire::ResumeCursor;
use crate::publish::{Event, Producer, StreamState};
use crate::sinks::UnixSink;
use crate::sinks::tests::{TempDir, names, push_waiting};

const TIMEOUT: Duration = Duration::from_secs(20);

fn push_messages(producer: &mut Producer, stream: u16, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        let payload = seq.to_le_bytes();
        push_waiting(
            producer,
            &Event::Message {
                stream,
                seq,
                recv_ns: seq,
                snapshot: false,
                payload: &payload,
            },
        );
    }
}

fn epoch(producer: &mut Producer, stream: u16, label: &str) {
    push_waiting(
        producer,
        &Event::Epoch {
            stream,
            label: label.as_bytes(),
        },
    );
}

/// What a client read, as comparable values.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Epoch(u16, String),
    Message(u16, u64),
    Overrun(u16, u64, u64),
    State(u16, StreamState),
    CutOff,
}

/// Reads until `done` says so (or EOF, or a cut-off); every event goes through `progress`.
fn read(
    reader: &mut RecordReader<BufReader<UnixStream>>,
    progress: &mut Progress,
    mut done: impl FnMut(&[Got]) -> bool,
) -> Vec<Got> {
    let mut got = Vec::new();
    while !done(&got) {
        let record = reader.next_record().expect("a record");
        let Some(record) = record else {
            break;
        };
        match record {
            Record::Event(event) => {
                progress.observe(&event);
                got.push(match event {
                    Event::Epoch { stream, label } => {
                        Got::Epoch(stream, String::from_utf8_lossy(label).into_owned())
                    }
                    Event::Message {
                        stream,
                        seq,
                        payload,
                        ..
                    } => {
                        assert_eq!(payload, seq.to_le_bytes(), "the message's own bytes");
                        Got::Message(stream, seq)
                    }
                    Event::Overrun {
                        stream, from, to, ..
                    } => Got::Overrun(stream, from, to),
                    Event::State { stream, state } => Got::State(stream, state),
                    other => panic!("unexpected {other:?}"),
                });
            }
            Record::CutOff(_) => {
                got.push(Got::CutOff);
                break;
            }
            Record::Hello(_) => panic!("a second hello"),
        }
    }
    got
}

fn open(path: &Path, resume: Option<&[ResumeCursor]>) -> RecordReader<BufReader<UnixStream>> {
    let (reader, streams) = connect(path, resume).expect("connect");
    assert_eq!(streams, names());
    reader
}

fn messages(got: &[Got], stream: u16) -> Vec<u64> {
    got.iter()
        .filter_map(|g| match g {
            Got::Message(s, seq) if *s == stream => Some(*seq),
            _ => None,
        })
        .collect()
}

#[test]
fn a_client_resuming_from_its_cursor_gets_what_follows_once_and_in_order() {
    let dir = TempDir::new("cursor");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 1 << 20, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    epoch(&mut producer, 0, "SESSION1");
    push_messages(&mut producer, 0, 1..=1_000);
    push_messages(&mut producer, 1, 1..=10);
    wait_for(|| sink.stats().events_dispatched == 1_011);

    let cursor = ResumeCursor {
        stream: 0,
        label: "SESSION1".into(),
        next: 501,
    };
    let mut reader = open(&path, Some(std::slice::from_ref(&cursor)));
    let mut progress = Progress::new(std::slice::from_ref(&cursor));
    let got = read(&mut reader, &mut progress, |g| {
        messages(g, 0).last() == Some(&1_000)
    });
    // The label first (its epoch event was replayed past), then 501..=1000; stream 1 had no
    // cursor, so it starts where it was when the client connected.
    assert_eq!(got.first(), Some(&Got::Epoch(0, "SESSION1".into())));
    assert_eq!(messages(&got, 0), (501..=1_000).collect::<Vec<_>>());
    assert!(messages(&got, 1).is_empty(), "{got:?}");

    // Then the live stream, with nothing twice between the two.
    push_messages(&mut producer, 0, 1_001..=1_010);
    push_messages(&mut producer, 1, 11..=12);
    let got = read(&mut reader, &mut progress, |g| {
        messages(g, 0).last() == Some(&1_010) && messages(g, 1).last() == Some(&12)
    });
    assert_eq!(messages(&got, 0), (1_001..=1_010).collect::<Vec<_>>());
    assert_eq!(messages(&got, 1), vec![11, 12]);
    let cursors = progress.cursors();
    assert_eq!(
        cursors.first(),
        Some(&ResumeCursor {
            stream: 0,
            label: "SESSION1".into(),
            next: 1_011
        })
    );
    let stats = sink.stop().expect("stop");
    assert_eq!((stats.resumed, stats.refused, stats.cut_offs), (1, 0, 0));
}

#[test]
fn a_cut_off_client_reconnects_with_its_cursor_and_misses_nothing() {
    const LAST: u64 = 60_000;
    let dir = TempDir::new("cut-off");
    let path = dir.join("feed.sock");
    // A client queue of 64 KiB holds about 1,500 messages: the client is cut off.
    let mut sink = UnixSink::start(&path, 64 * 1024, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    epoch(&mut producer, 0, "S1");
    let mut reader = open(&path, Some(&[]));
    let mut progress = Progress::new(&[]);
    // It reads the first hundred, then nothing while the feed runs past its queue.
    push_messages(&mut producer, 0, 1..=100);
    let got = read(&mut reader, &mut progress, |g| {
        messages(g, 0).last() == Some(&100)
    });
    let mut seen = messages(&got, 0);
    push_messages(&mut producer, 0, 101..=LAST / 2);
    wait_for(|| sink.stats().cut_offs == 1);
    let got = read(&mut reader, &mut progress, |_| false);
    assert_eq!(got.last(), Some(&Got::CutOff), "cut off: {:?}", got.last());
    seen.extend(messages(&got, 0));
    assert!(seen.len() < LAST as usize / 2, "it fell behind");

    // It comes back with the cursor its events gave it, while the feed goes on.
    let cursors = progress.cursors();
    assert_eq!(cursors.len(), 1, "{cursors:?}");
    let mut reader = open(&path, Some(&cursors));
    let feed = thread::spawn(move || {
        push_messages(&mut producer, 0, LAST / 2 + 1..=LAST);
        producer
    });
    let got = read(&mut reader, &mut progress, |g| {
        messages(g, 0).last() == Some(&LAST)
    });
    assert!(
        !got.iter()
            .any(|g| matches!(g, Got::Overrun(..) | Got::CutOff)),
        "nothing lost: the history held it"
    );
    seen.extend(messages(&got, 0));
    assert_eq!(
        seen,
        (1..=LAST).collect::<Vec<_>>(),
        "1..=LAST once, in order"
    );
    drop(feed.join().expect("feed"));
    let stats = sink.stop().expect("stop");
    assert_eq!((stats.resumed, stats.cut_offs), (2, 1));
    assert!(stats.events_replayed > 0);
}

#[test]
fn a_cursor_older_than_the_history_gets_an_overrun_with_the_lost_range() {
    let dir = TempDir::new("old-cursor");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start_with_history(&path, 1 << 20, 1 << 16, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    epoch(&mut producer, 0, "S1");
    // About 64 bytes a record: 10,000 of them lap a 64 KiB history many times.
    push_messages(&mut producer, 0, 1..=10_000);
    wait_for(|| sink.stats().events_dispatched == 10_001);
    let cursor = [ResumeCursor {
        stream: 0,
        label: "S1".into(),
        next: 1,
    }];
    let mut reader = open(&path, Some(&cursor));
    let mut progress = Progress::new(&cursor);
    let got = read(&mut reader, &mut progress, |g| {
        messages(g, 0).last() == Some(&10_000)
    });
    let held = messages(&got, 0);
    let first = *held.first().expect("the history's messages");
    assert!(first > 1_000, "most of the stream is gone: from {first}");
    assert_eq!(held, (first..=10_000).collect::<Vec<_>>());
    let markers: Vec<&Got> = got
        .iter()
        .filter(|g| matches!(g, Got::Overrun(..)))
        .collect();
    assert_eq!(markers, [&Got::Overrun(0, 1, first - 1)], "the exact loss");
    assert!(
        got.iter().position(|g| matches!(g, Got::Overrun(..)))
            < got.iter().position(|g| matches!(g, Got::Message(..))),
        "the marker comes before what follows it"
    );
    drop(producer);
    sink.stop().expect("stop");
}

#[test]
fn a_cursor_of_an_epoch_the_history_never_saw_is_reported_lost_into_the_next() {
    let dir = TempDir::new("unknown-epoch");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 1 << 20, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    epoch(&mut producer, 0, "S2");
    push_messages(&mut producer, 0, 1..=5);
    wait_for(|| sink.stats().events_dispatched == 6);
    let cursor = [ResumeCursor {
        stream: 0,
        label: "S1".into(),
        next: 700,
    }];
    let mut reader = open(&path, Some(&cursor));
    let mut progress = Progress::new(&cursor);
    let got = read(&mut reader, &mut progress, |g| {
        messages(g, 0).last() == Some(&5)
    });
    assert_eq!(
        got,
        [
            Got::Overrun(0, 700, u64::MAX),
            Got::Epoch(0, "S2".into()),
            Got::Message(0, 1),
            Got::Message(0, 2),
            Got::Message(0, 3),
            Got::Message(0, 4),
            Got::Message(0, 5),
        ]
    );
    drop(producer);
    sink.stop().expect("stop");
}

#[test]
fn a_connection_that_sends_something_else_is_refused_and_counted() {
    let dir = TempDir::new("refused");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 1 << 20, &names()).expect("start");
    let mut stream = UnixStream::connect(&path).expect("connect");
    stream
        .write_all(b"\x08\x00\x00\x00GET / HT")
        .expect("write");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let mut reader = RecordReader::new(BufReader::new(stream));
    assert!(
        matches!(reader.next_record(), Ok(None) | Err(_)),
        "closed without a hello"
    );
    wait_for(|| sink.stats().refused == 1);
    drop(sink.take_producer());
    sink.stop().expect("stop");
}

fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn resume_requests_round_trip_and_anything_short_of_one_is_refused() {
    use crate::publish::wire::{decode_resume, encode_resume};
    let cursors = vec![
        ResumeCursor {
            stream: 0,
            label: "SESSION1".into(),
            next: 5,
        },
        ResumeCursor {
            stream: 1,
            label: String::new(),
            next: u64::MAX,
        },
    ];
    let mut out = Vec::new();
    encode_resume(&cursors, &mut out).expect("encode");
    let body = out.get(4..).expect("framed");
    assert_eq!(decode_resume(body).expect("decode"), cursors);
    for cut in 0..body.len() {
        assert!(
            decode_resume(body.get(..cut).expect("cut")).is_err(),
            "{cut}"
        );
    }
    let mut longer = body.to_vec();
    longer.push(0);
    assert!(decode_resume(&longer).is_err(), "trailing bytes");

    let names = names();
    let parse = |t: &str| ResumeCursor::parse(t, &names);
    assert_eq!(
        parse("nasdaq/itch-a=S:1:7"),
        Ok(ResumeCursor {
            stream: 0,
            label: "S:1".into(),
            next: 7
        })
    );
    assert_eq!(
        parse("btcusdt=:9").map(|c| (c.stream, c.label, c.next)),
        Ok((1, String::new(), 9))
    );
    assert!(parse("itch-b=S:1").is_err());
    assert!(parse("0=S").is_err());
    assert!(parse("0=S:x").is_err());
}

#[test]
fn a_cursor_sent_before_its_epoch_began_waits_for_the_epoch_event() {
    let dir = TempDir::new("early-cursor");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 1 << 20, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    // Both connect before the stream has an epoch (a daemon just restarted).
    let same = [ResumeCursor {
        stream: 0,
        label: "S1".into(),
        next: 3,
    }];
    let other = [ResumeCursor {
        stream: 0,
        label: "S0".into(),
        next: 3,
    }];
    let mut same_reader = open(&path, Some(&same));
    let mut other_reader = open(&path, Some(&other));
    epoch(&mut producer, 0, "S1");
    push_messages(&mut producer, 0, 1..=5);
    let last_is_5 = |g: &[Got]| messages(g, 0).last() == Some(&5);
    let got = read(&mut same_reader, &mut Progress::new(&same), last_is_5);
    assert_eq!(
        got,
        [
            Got::Epoch(0, "S1".into()),
            Got::Message(0, 3),
            Got::Message(0, 4),
            Got::Message(0, 5)
        ]
    );
    let got = read(&mut other_reader, &mut Progress::new(&other), last_is_5);
    assert_eq!(got.first(), Some(&Got::Overrun(0, 3, u64::MAX)), "{got:?}");
    assert_eq!(messages(&got, 0), [1, 2, 3, 4, 5]);
    drop(producer);
    sink.stop().expect("stop");
}
