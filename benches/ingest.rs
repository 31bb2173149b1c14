//! The rx path against its floors, measured in the same run.
//!
//! 1. Ingest: datagrams already queued on a loopback multicast socket are drained with
//!    `recvmmsg` and run through decode, venue session, sequencer and hand-off to a
//!    consumer queue; the baseline is a bare `recvmmsg` drain of the same datagrams.
//!    Two more passes show where the time goes: the same without the hand-off, and the
//!    bare drain plus a plain copy of each datagram into a raw ring of the queue's size.
//!    A last pass is the full path with the consumer popping on another thread meanwhile
//!    (in the other passes it drains after the clock stops).
//! 2. Hand-off: one message event pushed into the consumer queue (encode, record framing,
//!    overrun bookkeeping) against the same bytes pushed into the raw SPSC ring.
//! 3. A/B lines: the same datagrams queued on two groups (line B a batch behind line A)
//!    and ingested by one channel with both lines, against the channel on line A alone;
//!    the difference is what line B's copies cost, set beside a bare `recvmmsg` drain of
//!    the same copies (the target: at most that plus 10 %).
//!
//! `cargo bench --bench ingest`

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use gapless::internals::Fanout;
use gapless::internals::RecvBatch;
use gapless::internals::{MulticastSpec, open_multicast, open_multicast_sender};
use gapless::protocol::moldudp64::{PacketWriter, Session};
use gapless::publish::run::{BlockLengths, MessageRun};
use gapless::publish::{self, Event};
use gapless::time::{Mono, Wall};
use gapless::venue::udp::LineSpec;
use gapless::venue::{ChannelSpec, FeedSpec, Received, UdpVenue, Venue, Wire};

const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 63, 1), 46301);
const GROUP_B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 63, 2), 46301);
const DATAGRAMS: u64 = 2_000;
const MESSAGES_PER_DATAGRAM: u64 = 40;
/// The daemon's default consumer queue.
const QUEUE_BYTES: usize = 4 << 20;
/// Datagrams a `recvmmsg` call may return (the daemon's default batch).
const BATCH: usize = 64;
/// Rounds of each ingest pass; the first three are not counted.
const ROUNDS: u64 = 33;

fn datagrams(first_seq: u64) -> Vec<Vec<u8>> {
    let session = Session(*b"BENCH00001");
    let mut seq = first_seq;
    (0..DATAGRAMS)
        .map(|_| {
            let mut buf = vec![0u8; 1400];
            let mut w = PacketWriter::new(&mut buf, session, seq).expect("header fits");
            for _ in 0..MESSAGES_PER_DATAGRAM {
                let mut m = [b'A'; 30];
                m[1..9].copy_from_slice(&seq.to_be_bytes());
                if w.push(&m).is_err() {
                    break;
                }
                seq += 1;
            }
            let n = w.finish();
            buf.truncate(n);
            buf
        })
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Queues `packets` on the socket, then times draining them with `drain`.
fn timed_drain(
    sender: &std::net::UdpSocket,
    packets: &[Vec<u8>],
    mut drain: impl FnMut() -> u64,
) -> Option<f64> {
    for p in packets {
        sender.send_to(p, GROUP).ok()?;
    }
    let start = Instant::now();
    let mut got = 0;
    let deadline = start + Duration::from_secs(5);
    while got < packets.len() as u64 && Instant::now() < deadline {
        got += drain();
    }
    (got == packets.len() as u64).then(|| start.elapsed().as_nanos() as f64 / packets.len() as f64)
}

fn ingest() -> Option<Ingest> {
    let spec = MulticastSpec {
        group: GROUP,
        interface: Ipv4Addr::LOCALHOST,
        source: None,
        rcvbuf: 8 << 20,
    };
    let (socket, _) = open_multicast(&spec).ok()?;
    let sender = open_multicast_sender(Ipv4Addr::LOCALHOST, 0).ok()?;
    let fd = socket.as_raw_fd();
    let mut batch = RecvBatch::new(BATCH, 2048);
    let (mut bare, mut full, mut no_handoff) = (Vec::new(), Vec::new(), Vec::new());
    let (mut bare_copy, mut live) = (Vec::new(), Vec::new());
    // A bare ring of the consumer queue's size, for the copy floor below.
    let (mut tx, mut rx) = rtrb::RingBuffer::<u8>::new(QUEUE_BYTES);
    let channel = ChannelSpec::new("bench", LineSpec::loopback(spec.group));
    let spec = FeedSpec::new(Wire::MoldUdp64, vec![channel]);
    let mut delivered = 0;
    // The daemon's default consumer queue (65,536 slots of 64 bytes): a round fits.
    let (producer, mut consumer) = publish::channel(QUEUE_BYTES, 1);
    let mut fanout = Fanout::new(vec![producer]);
    // A second queue of the same size, drained by a consumer on another thread while
    // the rx side runs, as in the daemon.
    let (live_producer, live_consumer) = publish::channel(QUEUE_BYTES, 1);
    let mut live_fanout = Fanout::new(vec![live_producer]);
    let drainer = Drainer::spawn(live_consumer);
    let mut live_popped = 0;
    let mut next_seq = 1;
    for round in 0..ROUNDS {
        let packets = datagrams(next_seq);
        next_seq += DATAGRAMS * MESSAGES_PER_DATAGRAM;
        let ns = timed_drain(&sender, &packets, || {
            let n = batch.recv(fd).unwrap_or(0);
            for i in 0..n {
                black_box(batch.payload(i));
            }
            n as u64
        })?;
        bare.push(ns);
        let packets = datagrams(next_seq);
        next_seq += DATAGRAMS * MESSAGES_PER_DATAGRAM;
        // A fresh session (allocated before the clock starts) adopts this round's first
        // datagram, so the sequences the bare round consumed are not a gap.
        let mut session = UdpVenue::new("bench", spec.clone());
        let ns = timed_drain(&sender, &packets, || {
            to_session(&mut batch, fd, &mut session, round, &mut fanout)
        })?;
        full.push(ns);
        while consumer.pop(|_| ()).is_some() {}
        delivered += session.stats(0).sequencer.delivered;

        // The same again with the hand-off left out: where the rest of the time goes.
        let packets = datagrams(next_seq);
        next_seq += DATAGRAMS * MESSAGES_PER_DATAGRAM;
        let mut session = UdpVenue::new("bench", spec.clone());
        let ns = timed_drain(&sender, &packets, || {
            to_session(&mut batch, fd, &mut session, round, &mut Discard)
        })?;
        no_handoff.push(ns);

        // The bare drain again, each datagram's blocks also copied into the bare ring
        // behind a run's head: what any hand-off that copies into a queue this size costs.
        let packets = datagrams(next_seq);
        next_seq += DATAGRAMS * MESSAGES_PER_DATAGRAM;
        let ns = timed_drain(&sender, &packets, || {
            let n = batch.recv(fd).unwrap_or(0);
            for i in 0..n {
                let blocks = batch.payload(i).get(20..).unwrap_or_default();
                let mut header = [0u8; 4 + 28];
                header[..4].copy_from_slice(&((28 + blocks.len()) as u32).to_le_bytes());
                raw_write(&mut tx, &header, blocks);
            }
            n as u64
        })?;
        bare_copy.push(ns);
        drain_raw(&mut rx);

        // The full path again, the consumer draining its queue at the same time.
        let packets = datagrams(next_seq);
        next_seq += DATAGRAMS * MESSAGES_PER_DATAGRAM;
        let mut session = UdpVenue::new("bench", spec.clone());
        drainer.expect(DATAGRAMS * MESSAGES_PER_DATAGRAM);
        let ns = timed_drain(&sender, &packets, || {
            to_session(&mut batch, fd, &mut session, round, &mut live_fanout)
        })?;
        live.push(ns);
        live_popped += drainer.wait()?;
    }
    assert_eq!(
        live_popped,
        ROUNDS * DATAGRAMS * MESSAGES_PER_DATAGRAM,
        "every message reached the concurrent consumer"
    );
    assert_eq!(
        delivered,
        ROUNDS * DATAGRAMS * MESSAGES_PER_DATAGRAM,
        "every message handed off"
    );
    // The first rounds fault the queue's and the session's pages in: not measured.
    for times in [
        &mut bare,
        &mut full,
        &mut no_handoff,
        &mut bare_copy,
        &mut live,
    ] {
        times.drain(..3);
    }
    Some(Ingest {
        bare: median(bare),
        full: median(full),
        no_handoff: median(no_handoff),
        bare_copy: median(bare_copy),
        live: median(live),
    })
}

/// Receives one batch and hands it to the session as the rx loop does (the batch's
/// datagrams together); returns how many datagrams came.
fn to_session(
    batch: &mut RecvBatch,
    fd: std::os::fd::RawFd,
    session: &mut UdpVenue,
    now: u64,
    emit: &mut impl gapless::venue::Emit,
) -> u64 {
    to_line(batch, fd, session, 0, now, emit)
}

/// Per feed datagram, median nanoseconds: one line through the session, two lines (each
/// datagram twice) through the session, and a bare drain of the second line's copies;
/// and the median over rounds of what the copies cost (two lines minus one, in the same
/// round) against the bare drain of that round.
struct AbIngest {
    one: f64,
    two: f64,
    bare_b: f64,
    copies: f64,
    copies_over_bare: f64,
}

/// The A/B pass. See the [module documentation](self), item 3.
fn ab_ingest() -> Option<AbIngest> {
    let open = |group| {
        open_multicast(&MulticastSpec {
            group,
            interface: Ipv4Addr::LOCALHOST,
            source: None,
            rcvbuf: 8 << 20,
        })
        .ok()
        .map(|(s, _)| s)
    };
    let (a, b) = (open(GROUP)?, open(GROUP_B)?);
    let (fd_a, fd_b) = (a.as_raw_fd(), b.as_raw_fd());
    let sender = open_multicast_sender(Ipv4Addr::LOCALHOST, 0).ok()?;
    let mut batch = RecvBatch::new(BATCH, 2048);
    let one_line = FeedSpec::new(
        Wire::MoldUdp64,
        vec![ChannelSpec::new("bench", LineSpec::loopback(GROUP))],
    );
    let mut two_lines = one_line.clone();
    two_lines.channels[0]
        .lines
        .push(LineSpec::loopback(GROUP_B));
    let (producer, mut consumer) = publish::channel(QUEUE_BYTES, 1);
    let mut fanout = Fanout::new(vec![producer]);
    let (mut one, mut two, mut bare_b) = (Vec::new(), Vec::new(), Vec::new());
    let mut next_seq = 1;
    let mut arbitrated = 0;
    for round in 0..ROUNDS {
        let n = DATAGRAMS;
        // Line A alone.
        let packets = datagrams(next_seq);
        next_seq += n * MESSAGES_PER_DATAGRAM;
        let mut session = UdpVenue::new("bench", one_line.clone());
        let ns = timed_drain(&sender, &packets, || {
            to_line(&mut batch, fd_a, &mut session, 0, round, &mut fanout)
        })?;
        one.push(ns);
        while consumer.pop(|_| ()).is_some() {}

        // Both lines: each batch of line A, then line B's copy of it.
        let packets = datagrams(next_seq);
        next_seq += n * MESSAGES_PER_DATAGRAM;
        for p in &packets {
            sender.send_to(p, GROUP).ok()?;
            sender.send_to(p, GROUP_B).ok()?;
        }
        let mut session = UdpVenue::new("bench", two_lines.clone());
        let start = Instant::now();
        let deadline = start + Duration::from_secs(5);
        let (mut got_a, mut got_b) = (0, 0);
        while (got_a < n || got_b < n) && Instant::now() < deadline {
            got_a += to_line(&mut batch, fd_a, &mut session, 0, round, &mut fanout);
            got_b += to_line(&mut batch, fd_b, &mut session, 1, round, &mut fanout);
        }
        (got_a == n && got_b == n).then_some(())?;
        two.push(start.elapsed().as_nanos() as f64 / n as f64);
        while consumer.pop(|_| ()).is_some() {}
        arbitrated += session.stats(0).arbitrated;

        // A bare drain of line B's copies alone.
        for p in &packets {
            sender.send_to(p, GROUP_B).ok()?;
        }
        let start = Instant::now();
        let mut got = 0;
        while got < n && Instant::now() < deadline + Duration::from_secs(5) {
            let k = batch.recv(fd_b).unwrap_or(0);
            for i in 0..k {
                black_box(batch.payload(i));
            }
            got += k as u64;
        }
        (got == n).then_some(())?;
        bare_b.push(start.elapsed().as_nanos() as f64 / n as f64);
    }
    assert_eq!(
        arbitrated,
        ROUNDS * DATAGRAMS * MESSAGES_PER_DATAGRAM,
        "every copy on line B was arbitrated away"
    );
    for times in [&mut one, &mut two, &mut bare_b] {
        times.drain(..3);
    }
    let copies: Vec<f64> = two.iter().zip(&one).map(|(t, o)| t - o).collect();
    let over: Vec<f64> = copies.iter().zip(&bare_b).map(|(c, b)| c / b).collect();
    Some(AbIngest {
        one: median(one),
        two: median(two),
        bare_b: median(bare_b),
        copies: median(copies),
        copies_over_bare: median(over),
    })
}

/// Receives one batch on `fd` and hands it to line `line` of the session; returns how many
/// datagrams came.
fn to_line(
    batch: &mut RecvBatch,
    fd: std::os::fd::RawFd,
    session: &mut UdpVenue,
    line: usize,
    now: u64,
    emit: &mut impl gapless::venue::Emit,
) -> u64 {
    let n = batch.recv(fd).unwrap_or(0);
    let mut received = [Received::default(); BATCH];
    for (i, slot) in received.iter_mut().enumerate().take(n) {
        *slot = Received {
            bytes: batch.payload(i),
            recv: Wall::from_nanos(1),
        };
    }
    let received = received.get(..n).unwrap_or_default();
    if let Some(endpoint) = session.endpoint_of_line(0, line) {
        session.handle_datagrams(Mono::from_nanos(now), endpoint, received, emit);
    }
    n as u64
}

/// Median nanoseconds per datagram of the three ingest passes.
struct Ingest {
    bare: f64,
    full: f64,
    no_handoff: f64,
    bare_copy: f64,
    live: f64,
}

/// A consumer on its own thread, popping while the rx side runs.
struct Drainer {
    start: Option<crossbeam_channel::Sender<u64>>,
    done: crossbeam_channel::Receiver<u64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drainer {
    /// Moves `consumer` to a thread that, for each count it is given, pops that many
    /// messages (yielding while the queue is empty, for five seconds at most) and
    /// reports how many it got.
    fn spawn(mut consumer: publish::Consumer) -> Self {
        let (start, starts) = crossbeam_channel::bounded::<u64>(1);
        let (report, done) = crossbeam_channel::bounded(1);
        let thread = std::thread::spawn(move || {
            for expected in starts {
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut got = 0;
                while got < expected && Instant::now() < deadline {
                    match consumer.pop(|e| black_box(e.stream())) {
                        Some(_) => got += 1,
                        None => std::thread::yield_now(),
                    }
                }
                if report.send(got).is_err() {
                    return;
                }
            }
        });
        Self {
            start: Some(start),
            done,
            thread: Some(thread),
        }
    }

    /// Starts popping `messages` messages.
    fn expect(&self, messages: u64) {
        if let Some(start) = &self.start {
            let _ = start.send(messages);
        }
    }

    /// How many the thread popped of what it was last told to expect.
    fn wait(&self) -> Option<u64> {
        self.done.recv_timeout(Duration::from_secs(10)).ok()
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        self.start = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Takes every event and run and does nothing with them.
struct Discard;

impl gapless::venue::Emit for Discard {
    fn emit(&mut self, event: &Event<'_>) {
        black_box(event);
    }

    fn emit_run(&mut self, run: &MessageRun<'_>) {
        black_box(run);
    }
}

/// Rounds of the hand-off benchmark; the first, which faults the pages in, is not counted.
const HANDOFF_ROUNDS: usize = 16;

/// Times rounds of `ours` and rounds of `raw` in turn, so a drift in the machine's speed
/// touches both alike; each side is a push run `n` times a round and a drain run after
/// it off the clock. Returns the median nanoseconds per push of each side, the first
/// round (which faults the pages in) left out.
fn timed_pair(
    n: u64,
    (mut ours, mut ours_drain): (impl FnMut(u64), impl FnMut()),
    (mut raw, mut raw_drain): (impl FnMut(u64), impl FnMut()),
) -> (f64, f64) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..HANDOFF_ROUNDS {
        a.push(time_round(n, &mut ours));
        ours_drain();
        b.push(time_round(n, &mut raw));
        raw_drain();
    }
    a.remove(0);
    b.remove(0);
    (median(a), median(b))
}

/// Nanoseconds per call of `push`, over `n` calls.
fn time_round(n: u64, push: &mut impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        push(i);
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

/// Drains the raw ring record by record, reading each header as the consumer queue's
/// pop does, so both rings are left in the same state in the cache.
fn drain_raw(rx: &mut rtrb::Consumer<u8>) {
    while let Ok(prefix) = rx.read_chunk(4) {
        let (a, b) = prefix.as_slices();
        let mut len = [0u8; 4];
        for (dst, src) in len.iter_mut().zip(a.iter().chain(b)) {
            *dst = *src;
        }
        let len = 4 + u32::from_le_bytes(len) as usize;
        let Ok(record) = rx.read_chunk(len) else {
            break;
        };
        let (a, b) = record.as_slices();
        black_box(a.iter().chain(b).nth(4));
        record.commit_all();
    }
}

/// Writes `header` then `body` into the bare ring as one record, the way a hand-written
/// producer would: uninitialised slots, one copy each, one commit.
fn raw_write(tx: &mut rtrb::Producer<u8>, header: &[u8], body: &[u8]) {
    if let Ok(mut chunk) = tx.write_chunk_uninit(header.len() + body.len()) {
        let (a, b) = chunk.as_mut_slices();
        if b.is_empty() {
            let (h, rest) = a.split_at_mut(header.len());
            rtrb::CopyToUninit::copy_to_uninit(header, h);
            rtrb::CopyToUninit::copy_to_uninit(body, rest);
        } else {
            // At the ring's end, byte by byte across the two pieces.
            for (dst, &src) in a
                .iter_mut()
                .chain(b.iter_mut())
                .zip(header.iter().chain(body))
            {
                dst.write(src);
            }
        }
        // SAFETY: both pieces of the chunk were just written in full.
        unsafe { chunk.commit_all() };
    }
}

/// The producer side only: rounds of pushes into a queue big enough to hold a round,
/// drained after the clock stops, alternating between the consumer queue and the raw
/// ring.
///
/// Returns (per message: ours, raw) and (per datagram run of 40 messages: ours, raw).
fn handoff() -> ((f64, f64), (f64, f64)) {
    const N: u64 = 1_000_000;
    const RUNS: u64 = 50_000;
    const BYTES: usize = 128 << 20;
    let payload = [7u8; 30];
    let (mut producer, mut consumer) = publish::channel(BYTES, 1);
    let (mut tx, mut rx) = rtrb::RingBuffer::<u8>::new(BYTES);
    // One 30-byte message a record: the queue's record against the same bytes (record
    // length, 24-byte header, payload) written into the bare ring.
    let (ours, raw) = timed_pair(
        N,
        (
            |seq| {
                let e = Event::Message {
                    stream: 0,
                    seq,
                    recv_ns: seq,
                    snapshot: false,
                    payload: &payload,
                };
                let pushed = producer.push(&e);
                debug_assert_eq!(pushed, gapless::publish::Pushed::Written);
                let _ = black_box(pushed);
            },
            || while consumer.pop(|_| ()).is_some() {},
        ),
        (
            |seq| {
                let mut header = [0u8; 4 + 24];
                header[..4].copy_from_slice(&((24 + payload.len()) as u32).to_le_bytes());
                header[4..12].copy_from_slice(&seq.to_le_bytes());
                raw_write(&mut tx, &header, &payload);
            },
            || drain_raw(&mut rx),
        ),
    );

    // One datagram's 40 messages a record (the rx path's in-order case): a run record
    // against the same bytes (record length, 28-byte header, the blocks) in the bare ring.
    let blocks: Vec<u8> = (0..MESSAGES_PER_DATAGRAM)
        .flat_map(|_| {
            let mut block = vec![0u8, 30];
            block.extend_from_slice(&payload);
            block
        })
        .collect();
    let count = MESSAGES_PER_DATAGRAM as u32;
    // Checked once here, as the rx path's decode checks a datagram's blocks before the
    // hand-off; the queue does not care that every round pushes the same sequences.
    let run = MessageRun::new(0, 1, 1, BlockLengths::BigEndian, &blocks, count)
        .expect("the blocks hold 40 messages");
    let (ours_run, raw_run) = timed_pair(
        RUNS,
        (
            |_| {
                let _ = black_box(producer.push_run(black_box(&run)));
            },
            || while consumer.pop(|_| ()).is_some() {},
        ),
        (
            |i| {
                let mut header = [0u8; 4 + 28];
                header[..4].copy_from_slice(&((28 + blocks.len()) as u32).to_le_bytes());
                header[8..16].copy_from_slice(&black_box(i).to_le_bytes());
                raw_write(&mut tx, &header, black_box(&blocks));
            },
            || drain_raw(&mut rx),
        ),
    );
    ((ours, raw), (ours_run, raw_run))
}

fn main() {
    println!("| path | gapless ns | baseline ns | baseline / gapless (rate ratio) |");
    println!("|---|---:|---:|---:|");
    match ingest() {
        Some(Ingest {
            bare,
            full,
            no_handoff,
            bare_copy,
            live,
        }) => {
            let per_msg = |ns: f64| ns / MESSAGES_PER_DATAGRAM as f64;
            println!(
                "| ingest, per datagram of {MESSAGES_PER_DATAGRAM} messages (recvmmsg + decode + sequence + hand-off vs bare recvmmsg) | {full:.0} | {bare:.0} | {:.2}x |",
                bare / full
            );
            println!(
                "| ingest, per message | {:.1} | {:.1} | {:.2}x |",
                per_msg(full),
                per_msg(bare),
                bare / full
            );
            println!(
                "| ingest without the hand-off, per datagram (recvmmsg + decode + sequence) | {no_handoff:.0} | {bare:.0} | {:.2}x |",
                bare / no_handoff
            );
            println!(
                "| bare recvmmsg + a copy of each datagram into a raw SPSC ring of the queue's size, per datagram (the floor of any copying hand-off) | {bare_copy:.0} | {bare:.0} | {:.2}x |",
                bare / bare_copy
            );
            println!(
                "| ingest, per datagram, the consumer draining on another thread meanwhile | {live:.0} | {bare:.0} | {:.2}x |",
                bare / live
            );
        }
        None => println!("| ingest | skipped: loopback multicast unavailable | | |"),
    }
    match ab_ingest() {
        Some(AbIngest {
            one,
            two,
            bare_b,
            copies,
            copies_over_bare,
        }) => {
            println!(
                "| ingest, per feed datagram, lines A and B (each datagram twice) vs line A alone | {two:.0} | {one:.0} | {:.2}x |",
                one / two
            );
            println!(
                "| line B's copies, per datagram (two lines minus one, per round) vs a bare recvmmsg of them; their cost is {copies_over_bare:.2}x of it (target: at most 1.10x) | {copies:.0} | {bare_b:.0} | {:.2}x |",
                1.0 / copies_over_bare
            );
        }
        None => println!("| A/B ingest | skipped: loopback multicast unavailable | | |"),
    }
    let ((ours, raw), (ours_run, raw_run)) = handoff();
    println!(
        "| hand-off, one message a record (consumer queue vs raw SPSC ring) | {ours:.1} | {raw:.1} | {:.2}x |",
        raw / ours
    );
    println!(
        "| hand-off, one datagram of {MESSAGES_PER_DATAGRAM} messages a record (run vs raw SPSC ring) | {ours_run:.1} | {raw_run:.1} | {:.2}x |",
        raw_run / ours_run
    );
    println!(
        "| hand-off, per message of a datagram run | {:.2} | {:.2} | {:.2}x |",
        ours_run / MESSAGES_PER_DATAGRAM as f64,
        raw_run / MESSAGES_PER_DATAGRAM as f64,
        raw_run / ours_run
    );
    println!(
        "(medians; a ratio is baseline time / gapless time, so 1.00x means no cost over the floor)"
    );
}
