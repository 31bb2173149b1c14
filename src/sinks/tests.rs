//! The unix-socket fan-out, its `tail` client and the JSON-lines file sink,
//! on sockets and files under a private temp dir.

use std::fs;
use std::io::{self, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::client::unix::{Record, RecordReader, TailEnd, TailError, tail};
use crate::publish::jsonl::StreamNames;
use crate::publish::wire::{StreamName, WireError, encode_cut_off, encode_event, encode_hello};
use crate::publish::{Event, Producer, Pushed, StreamState, channel};
use crate::sinks::{JsonlSink, SinkError, UnixSink};

const TIMEOUT: Duration = Duration::from_secs(20);

/// A directory removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("gapless-sinks-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }

    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Tidiness only: a leftover is removed by the next run's `new`.
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn names() -> Vec<StreamName> {
    vec![
        StreamName::new("nasdaq", "itch-a"),
        StreamName::new("binance", "btcusdt"),
    ]
}

fn message(stream: u16, seq: u64, payload: &[u8]) -> Event<'_> {
    Event::Message {
        stream,
        seq,
        recv_ns: seq,
        snapshot: false,
        payload,
    }
}

/// Pushes `event`, waiting (bounded) for room instead of dropping it.
pub(crate) fn push_waiting(producer: &mut Producer, event: &Event<'_>) {
    let deadline = Instant::now() + TIMEOUT;
    while !producer.would_fit(event) {
        assert!(Instant::now() < deadline, "queue never drained");
        thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(producer.push(event), Pushed::Written);
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Connects and reads the hello.
fn connect(path: &Path) -> RecordReader<BufReader<UnixStream>> {
    let stream = UnixStream::connect(path).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let mut reader = RecordReader::new(BufReader::new(stream));
    match reader.next_record() {
        Ok(Some(Record::Hello(streams))) => assert_eq!(streams, names()),
        other => panic!("expected a hello, got {other:?}"),
    }
    reader
}

/// Reads `count` messages and checks that each stream's sequences follow
/// on; returns how many were read.
fn read_in_order(
    reader: &mut RecordReader<BufReader<UnixStream>>,
    count: u64,
    progress: &AtomicU64,
) -> u64 {
    let mut next = [0u64; 2];
    for n in 0..count {
        match reader.next_record() {
            Ok(Some(Record::Event(Event::Message {
                stream,
                seq,
                payload,
                ..
            }))) => {
                let slot = &mut next[usize::from(stream)];
                assert_eq!(seq, *slot, "stream {stream} out of order");
                assert_eq!(payload, &seq.to_le_bytes()[..]);
                *slot += 1;
            }
            other => panic!("record {n}: {other:?}"),
        }
        progress.store(n + 1, Ordering::Release);
    }
    count
}

#[test]
fn two_clients_receive_every_event_in_order() {
    const EVENTS: u64 = 100_000;
    let dir = TempDir::new("two-clients");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 8 << 20, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    let (ready_tx, ready_rx) = mpsc::channel();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (path, ready) = (path.clone(), ready_tx.clone());
            thread::spawn(move || {
                let mut reader = connect(&path);
                ready.send(()).expect("ready");
                read_in_order(&mut reader, EVENTS, &AtomicU64::new(0))
            })
        })
        .collect();
    for _ in 0..2 {
        ready_rx.recv_timeout(TIMEOUT).expect("client ready");
    }
    for n in 0..EVENTS {
        let bytes = (n / 2).to_le_bytes();
        push_waiting(&mut producer, &message((n % 2) as u16, n / 2, &bytes));
    }
    for client in clients {
        assert_eq!(client.join().expect("client"), EVENTS);
    }
    let stats = sink.stop().expect("stop");
    assert_eq!(stats.clients_accepted, 2);
    assert_eq!(stats.cut_offs, 0);
    assert_eq!(stats.events_dispatched, EVENTS);
    assert!(stats.bytes_written >= 2 * EVENTS * 36);
}

#[test]
fn a_client_that_never_reads_is_cut_off_and_the_others_keep_up() {
    const EVENTS: u64 = 40_960;
    const BATCH: u64 = 256;
    let dir = TempDir::new("slow-client");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 64 * 1024, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    let fast_progress = Arc::new(AtomicU64::new(0));
    let fast = {
        let (path, progress) = (path.clone(), Arc::clone(&fast_progress));
        let mut reader = connect(&path);
        thread::spawn(move || read_in_order(&mut reader, EVENTS, &progress))
    };
    let cut_seen = Arc::new(AtomicBool::new(false));
    let slow = {
        let mut reader = connect(&path);
        let cut_seen = Arc::clone(&cut_seen);
        thread::spawn(move || {
            // Reads nothing until the server has cut it off, then all.
            wait_until("the cut-off", || cut_seen.load(Ordering::Acquire));
            let mut events = Vec::new();
            loop {
                match reader.next_record() {
                    Ok(Some(Record::Event(Event::Message { seq, stream: 0, .. }))) => {
                        events.push(seq)
                    }
                    Ok(Some(Record::Event(Event::Message { .. } | Event::Overrun { .. }))) => {}
                    Ok(Some(Record::CutOff(reason))) => {
                        let reason = reason.to_string();
                        assert!(
                            matches!(reader.next_record(), Ok(None)),
                            "EOF after the cut-off"
                        );
                        return (events, reason);
                    }
                    other => panic!("slow client got {other:?}"),
                }
            }
        })
    };
    for batch in 0..EVENTS / BATCH {
        for n in batch * BATCH..(batch + 1) * BATCH {
            let bytes = (n / 2).to_le_bytes();
            push_waiting(&mut producer, &message((n % 2) as u16, n / 2, &bytes));
        }
        wait_until("the fast client", || {
            fast_progress.load(Ordering::Acquire) >= (batch + 1) * BATCH
        });
        if sink.stats().cut_offs > 0 {
            cut_seen.store(true, Ordering::Release);
        }
    }
    assert_eq!(fast.join().expect("fast client"), EVENTS);
    let stats = sink.stats();
    assert_eq!(stats.cut_offs, 1, "{stats:?}");
    cut_seen.store(true, Ordering::Release);
    let (events, reason) = slow.join().expect("slow client");
    assert!(reason.contains("overflowed"), "{reason}");
    assert!(!events.is_empty() && (events.len() as u64) < EVENTS / 2);
    assert!(
        events.iter().zip(0..).all(|(&seq, want)| seq == want),
        "prefix in order"
    );
    let stats = sink.stop().expect("stop");
    assert_eq!((stats.clients_accepted, stats.cut_offs), (2, 1));
}

#[test]
fn tail_prints_json_lines_until_the_limit() {
    let dir = TempDir::new("tail");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 1 << 20, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    let tailer = {
        let path = path.clone();
        thread::spawn(move || {
            let mut out = Vec::new();
            let summary = tail(&path, &mut out, Some(5)).expect("tail");
            (summary, String::from_utf8(out).expect("utf-8"))
        })
    };
    wait_until("the tail client", || sink.stats().clients_accepted == 1);
    let range = Event::Range {
        stream: 1,
        first: 5,
        last: 9,
        recv_ns: 0,
        payload: br#"{"U":5,"u":9}"#,
    };
    let events = [
        message(0, 7, &[0xab, 0x01]),
        range,
        Event::Heartbeat { stream: 0, next: 8 },
        Event::Gap {
            stream: 0,
            from: 8,
            to: 9,
        },
        Event::State {
            stream: 1,
            state: StreamState::Synced,
        },
        message(0, 10, b"not read: past the limit"),
    ];
    for event in &events {
        push_waiting(&mut producer, event);
    }
    let (summary, text) = tailer.join().expect("tail thread");
    assert_eq!(summary.end, TailEnd::Limit);
    assert_eq!((summary.events, summary.lines), (5, 4));
    assert_eq!(summary.streams, names());
    let want = [
        r#"{"venue":"nasdaq","stream":"itch-a","seq":7,"payload":"ab01"}"#,
        r#"{"venue":"binance","stream":"btcusdt","first":5,"last":9,"payload":{"U":5,"u":9}}"#,
        r#"{"venue":"nasdaq","stream":"itch-a","event":"gap","from":8,"to":9}"#,
        r#"{"venue":"binance","stream":"btcusdt","event":"state","state":"synced"}"#,
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
    sink.stop().expect("stop");
}

#[test]
fn tail_ends_cleanly_on_eof_and_on_a_cut_off() {
    let dir = TempDir::new("tail-end");
    let path = dir.join("feed.sock");
    let mut sink = UnixSink::start(&path, 1 << 20, &names()).expect("start");
    let mut producer = sink.take_producer().expect("producer");
    let tailer = {
        let path = path.clone();
        thread::spawn(move || tail(&path, Vec::new(), None).expect("tail"))
    };
    wait_until("the tail client", || sink.stats().clients_accepted == 1);
    for seq in 0..3 {
        push_waiting(&mut producer, &message(1, seq, b"x"));
    }
    drop(producer);
    sink.stop().expect("stop");
    let summary = tailer.join().expect("tail thread");
    assert_eq!((summary.end, summary.lines), (TailEnd::Eof, 3));

    // A hand-made server: a hello, one event, a cut-off.
    let path = dir.join("fake.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let server = thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut out = Vec::new();
        encode_hello(&names(), &mut out).expect("hello");
        encode_event(&Event::SnapshotBegin { stream: 0 }, &mut out).expect("event");
        encode_cut_off("too slow", &mut out);
        stream.write_all(&out).expect("write");
    });
    let mut out = Vec::new();
    let summary = tail(&path, &mut out, None).expect("tail");
    server.join().expect("server");
    assert_eq!(summary.end, TailEnd::CutOff("too slow".into()));
    assert_eq!(
        out,
        br#"{"venue":"nasdaq","stream":"itch-a","event":"snapshot_begin"}"#
            .iter()
            .chain(b"\n")
            .copied()
            .collect::<Vec<_>>()
    );
}

#[test]
fn tail_rejects_malformed_input_without_panicking() {
    let dir = TempDir::new("tail-bad");
    let cases: [(&str, Vec<u8>); 4] = [
        ("no hello", {
            let mut v = Vec::new();
            encode_cut_off("x", &mut v);
            v
        }),
        (
            "huge length",
            [u32::MAX.to_le_bytes().to_vec(), vec![1; 8]].concat(),
        ),
        ("truncated", {
            let mut v = Vec::new();
            encode_hello(&names(), &mut v).expect("hello");
            v.extend_from_slice(&[9, 0, 0, 0, 1]);
            v
        }),
        ("bad tag", {
            let mut v = Vec::new();
            encode_hello(&names(), &mut v).expect("hello");
            v.extend_from_slice(&[1, 0, 0, 0, 0x77]);
            v
        }),
    ];
    for (i, (what, bytes)) in cases.into_iter().enumerate() {
        let path = dir.join(&format!("bad{i}.sock"));
        let listener = UnixListener::bind(&path).expect("bind");
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let _ = stream.write_all(&bytes);
        });
        let result = tail(&path, io::sink(), None);
        server.join().expect("server");
        assert!(
            matches!(result, Err(TailError::Wire(_))),
            "{what}: {result:?}"
        );
    }
    let missing = tail(dir.join("none.sock"), io::sink(), None);
    assert!(matches!(missing, Err(TailError::Connect { .. })));
    assert!(matches!(
        Record::decode(&[0xF0, 5, 0, b'a']),
        Err(WireError::Malformed(_))
    ));
}

#[test]
fn stop_removes_the_socket_file_and_stale_files_are_replaced() {
    let dir = TempDir::new("socket-file");
    let path = dir.join("feed.sock");
    drop(UnixListener::bind(&path).expect("stale socket"));
    assert!(path.exists());
    let sink = UnixSink::start(&path, 4096, &names()).expect("start over a stale socket");
    assert!(path.exists());
    assert!(matches!(
        UnixSink::start(&path, 4096, &names()),
        Err(SinkError::SocketInUse(_))
    ));
    let started = Instant::now();
    sink.stop().expect("stop");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!path.exists());

    let file = dir.join("plain");
    fs::write(&file, b"keep me").expect("write");
    assert!(matches!(
        UnixSink::start(&file, 4096, &names()),
        Err(SinkError::NotASocket(_))
    ));
    assert_eq!(fs::read(&file).expect("read"), b"keep me");
}

#[test]
fn jsonl_sink_writes_every_event_and_flushes_on_stop() {
    const EVENTS: u64 = 20_000;
    let dir = TempDir::new("jsonl");
    let file = dir.join("out.jsonl");
    let (mut producer, consumer) = channel(256 * 1024, 2);
    let sink = JsonlSink::create(&file, consumer, StreamName::table(&names())).expect("start");
    for seq in 0..EVENTS {
        push_waiting(&mut producer, &message(0, seq, &[seq as u8]));
    }
    push_waiting(&mut producer, &Event::Heartbeat { stream: 1, next: 3 });
    let stats = sink.stop().expect("stop");
    assert_eq!((stats.events, stats.lines), (EVENTS + 1, EVENTS));
    let text = fs::read_to_string(&file).expect("read");
    assert_eq!(text.len() as u64, stats.bytes);
    let mut lines = 0;
    for (seq, line) in (0..).zip(text.lines()) {
        let want = format!(
            r#"{{"venue":"nasdaq","stream":"itch-a","seq":{seq},"payload":"{:02x}"}}"#,
            seq as u8
        );
        assert_eq!(line, want);
        lines += 1;
    }
    assert_eq!(lines, EVENTS);
}

/// A writer whose bytes a test can see while the sink runs.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn jsonl_sink_flushes_within_the_interval_while_running() {
    let (mut producer, consumer) = channel(64 * 1024, 1);
    let out = Shared::default();
    let mut names = StreamNames::new();
    names.set(0, "iex", "tops");
    let sink = JsonlSink::start(out.clone(), consumer, names).expect("start");
    push_waiting(
        &mut producer,
        &Event::SnapshotEnd {
            stream: 0,
            next: 42,
        },
    );
    let pushed = Instant::now();
    wait_until("the periodic flush", || {
        !out.0.lock().expect("lock").is_empty()
    });
    assert!(pushed.elapsed() < Duration::from_secs(1));
    let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
    assert_eq!(
        text,
        "{\"venue\":\"iex\",\"stream\":\"tops\",\"event\":\"snapshot_end\",\"next\":42}\n"
    );
    // The producer going away ends the sink on its own.
    drop(producer);
    let stats = sink.stop().expect("stop");
    assert_eq!((stats.events, stats.lines), (1, 1));
    assert!(stats.flushes >= 1);
}

#[test]
fn jsonl_sink_rotates_by_size_and_keeps_a_bounded_number_of_files() {
    use crate::sinks::jsonl::Rotation;
    let dir = TempDir::new("jsonl-rotate");
    let file = dir.join("out.jsonl");
    let (mut producer, consumer) = channel(256 * 1024, 2);
    // Each line is 78 to 82 bytes; 4096 bytes hold about 50.
    let rotation = Rotation {
        max_bytes: 4096,
        max_age: None,
        keep: 3,
    };
    let sink = JsonlSink::create_rotating(&file, rotation, consumer, StreamName::table(&names()))
        .expect("start");
    const EVENTS: u64 = 2_000;
    for seq in 1..=EVENTS {
        push_waiting(&mut producer, &message(0, seq, &[seq as u8]));
    }
    let stats = sink.stop().expect("stop");
    assert!(stats.rotations >= 30, "{stats:?}");
    // The current file and three rotated ones, no more.
    let mut names: Vec<String> = fs::read_dir(dir.join(""))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["out.jsonl", "out.jsonl.1", "out.jsonl.2", "out.jsonl.3"]
    );
    // Whole lines in each, each within the size, newest last: .3, .2, .1, then the file.
    let mut seqs = Vec::new();
    for name in ["out.jsonl.3", "out.jsonl.2", "out.jsonl.1", "out.jsonl"] {
        let text = fs::read_to_string(dir.join(name)).expect("read");
        assert!(text.ends_with('\n'), "{name}");
        assert!(text.len() < 4096 + 100, "{name}: {} bytes", text.len());
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a whole line");
            // The receive time travels with each record.
            assert_eq!(v["recv_ns"], v["seq"], "{line}");
            seqs.push(v["seq"].as_u64().expect("seq"));
        }
    }
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "consecutive");
    assert_eq!(seqs.last(), Some(&EVENTS));
}

#[test]
fn jsonl_sink_rotates_by_age() {
    use crate::sinks::jsonl::Rotation;
    let dir = TempDir::new("jsonl-age");
    let file = dir.join("out.jsonl");
    let (mut producer, consumer) = channel(64 * 1024, 2);
    let rotation = Rotation {
        max_bytes: 1 << 30,
        max_age: Some(Duration::from_millis(200)),
        keep: 2,
    };
    let sink = JsonlSink::create_rotating(&file, rotation, consumer, StreamName::table(&names()))
        .expect("start");
    push_waiting(&mut producer, &message(0, 1, b"a"));
    // The sink rotates an aged file on its own, with no further event to trigger it.
    wait_until("the age rotation", || dir.join("out.jsonl.1").exists());
    push_waiting(&mut producer, &message(0, 2, b"b"));
    let stats = sink.stop().expect("stop");
    assert_eq!(stats.rotations, 1, "{stats:?}");
    let old = fs::read_to_string(dir.join("out.jsonl.1")).expect("read");
    let new = fs::read_to_string(&file).expect("read");
    assert!(
        old.contains("\"seq\":1,") && !old.contains("\"seq\":2,"),
        "{old}"
    );
    assert!(new.contains("\"seq\":2,"), "{new}");
}

#[test]
fn unix_socket_mode_and_group_are_set() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = TempDir::new("unix-access");
    let path = dir.join("s.sock");
    let sink = UnixSink::start(&path, 4096, &names()).expect("start");
    // The process's own group is one it may always give.
    let gid = fs::metadata(dir.join("")).expect("dir").gid();
    crate::sinks::unix::set_access(&path, 0o660, Some(&gid.to_string())).expect("access");
    let meta = fs::symlink_metadata(&path).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), gid);
    crate::sinks::unix::set_access(&path, 0o600, None).expect("mode only");
    let meta = fs::symlink_metadata(&path).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(matches!(
        crate::sinks::unix::set_access(&path, 0o660, Some("no-such-group-here")),
        Err(SinkError::UnknownGroup(_))
    ));
    sink.stop().expect("stop");
}
