//! Messages per second into JetStream, acknowledged, from gapless's nats sink, against the
//! same client (`async-nats`) publishing the same payloads with the same message ids and the
//! same window of unacknowledged publishes, with no gapless work: no queue, no event
//! decoding, no headers.
//!
//! Both run against one `nats-server -js` (Debian's; the bench says so and stops where it is
//! not installed) on a loopback port of its own, its store in a temporary directory, in
//! alternating rounds; each round publishes fresh ids. Reported: the median of the rounds
//! for each, and the ratio (target: gapless at least 0.8x the bare client).
//!
//! `cargo bench --bench nats` (`NATS_BENCH_MESSAGES`, default 200000 a round).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::Publish, stream};
use gapless::config::NatsSink;
use gapless::internals::nats_sink;
use gapless::publish::jsonl::StreamNames;
use gapless::publish::{Event, Pushed, channel};

const ROUNDS: usize = 5;
const WINDOW: usize = 4096;
const PAYLOAD: [u8; 40] = [0x41; 40];

fn main() {
    let Some(binary) = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    else {
        println!("nats: nats-server is not installed (.ci/install-deps installs it): not measured");
        return;
    };
    let messages: u64 = std::env::var("NATS_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir = std::env::temp_dir().join(format!("gapless-bench-nats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(binary)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir.join("js"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = server.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = lines.next().expect("nats-server ended").unwrap();
        if line.contains("Server is ready") {
            break;
        }
        assert!(Instant::now() < deadline, "nats-server not ready in 20 s");
    }
    // Its log goes on being read, so that the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let url = format!("nats://127.0.0.1:{port}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(create_stream(&url));

    let (mut bare, mut ours) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        bare.push(runtime.block_on(bare_client(&url, round, messages)));
        ours.push(through_the_sink(&url, round, messages));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (b, o) = (median(&mut bare), median(&mut ours));
    println!(
        "nats: {messages} messages of {} bytes a round, {ROUNDS} rounds, window {WINDOW}, \
         one nats-server -js on loopback, two shared cores",
        PAYLOAD.len()
    );
    println!(
        "  bare async-nats client (same ids, same window): {:>9.0} messages/s acknowledged (median)",
        b
    );
    println!(
        "  gapless nats sink (queue, headers, ids, acks):  {:>9.0} messages/s acknowledged (median)",
        o
    );
    println!("  ratio gapless / bare: {:.2}x (target >= 0.80x)", o / b);
    server.kill().unwrap();
    server.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

async fn create_stream(url: &str) {
    let client = async_nats::connect(url).await.unwrap();
    let js = jetstream::new(client);
    js.get_or_create_stream(stream::Config {
        name: "BENCH".into(),
        subjects: vec!["gapless.>".into()],
        duplicate_window: Duration::from_secs(120),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
}

/// The same client with nothing around it: publish with an id, at most `WINDOW` awaiting
/// their acknowledgement, taken in order.
async fn bare_client(url: &str, round: usize, messages: u64) -> f64 {
    let client = async_nats::connect(url).await.unwrap();
    let js = jetstream::new(client);
    let start = Instant::now();
    let mut pending = VecDeque::with_capacity(WINDOW);
    for seq in 1..=messages {
        if pending.len() == WINDOW {
            let ack: jetstream::context::PublishAckFuture = pending.pop_front().unwrap();
            ack.await.unwrap();
        }
        let publish = Publish::build()
            .payload(bytes::Bytes::copy_from_slice(&PAYLOAD))
            .message_id(format!("bare.a.R{round}.{seq}"));
        pending.push_back(js.send_publish("gapless.bare.a", publish).await.unwrap());
    }
    for ack in pending {
        ack.await.unwrap();
    }
    messages as f64 / start.elapsed().as_secs_f64()
}

/// The same messages as consumer events through the nats sink, from the first push to
/// the last acknowledgement.
fn through_the_sink(url: &str, round: usize, messages: u64) -> f64 {
    let settings = NatsSink {
        url: url.to_string(),
        stream: "BENCH".into(),
        subject_prefix: "gapless".into(),
        duplicate_window: Duration::from_secs(120),
        max_age: None,
        max_pending: WINDOW as u32,
        instance: "bench".into(),
        creds: None,
        tls_ca: None,
        tls_client: None,
    };
    let mut names = StreamNames::new();
    names.set(0, "sink", "a");
    let (mut producer, consumer) = channel(256 << 20, 1);
    let label = format!("R{round}");
    // The queue holds the whole round: nothing is dropped, so every event is published.
    let push = |producer: &mut gapless::publish::Producer, event: &Event<'_>| {
        assert_eq!(
            producer.push(event),
            Pushed::Written,
            "the queue holds a round"
        );
    };
    let sink = nats_sink::start(&settings, consumer, &names, 1).unwrap();
    let counters = std::sync::Arc::clone(sink.counters());
    // Timed from an established connection, as the bare client is: connecting and checking
    // the stream are not publishing.
    let deadline = Instant::now() + Duration::from_secs(20);
    while counters.connected() == 0 {
        assert!(
            Instant::now() < deadline,
            "the sink did not connect in 20 s"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let start = Instant::now();
    push(
        &mut producer,
        &Event::Epoch {
            stream: 0,
            label: label.as_bytes(),
        },
    );
    for seq in 1..=messages {
        push(
            &mut producer,
            &Event::Message {
                stream: 0,
                seq,
                recv_ns: 1,
                snapshot: false,
                payload: &PAYLOAD,
            },
        );
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while counters.acked() < messages + 1 {
        assert!(
            Instant::now() < deadline,
            "the sink did not finish in 120 s"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let rate = messages as f64 / start.elapsed().as_secs_f64();
    drop(producer);
    sink.stop().unwrap();
    rate
}
