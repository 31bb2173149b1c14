//! The exporter over HTTP on loopback: series, labels, values written by
//! another thread, health, routing and a prompt stop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gapless::metrics::{Exporter, Registry, StreamSample, unix_now_ns};
use gapless::publish::{Event, StreamState, channel};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one request and returns the status, the head and the body.
fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream.set_write_timeout(Some(TIMEOUT)).expect("timeout");
    let req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, head.to_string(), body.to_string())
}

fn sample_value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[test]
fn metrics_are_served_with_labels_and_live_values() {
    let registry = Arc::new(Registry::new());
    let itch = registry.add_stream("nasdaq", "itch-a");
    let _iex = registry.add_stream("iex", "tops");
    let (producer, _consumer) = channel(4096, 2);
    registry.add_consumer("unix", Arc::clone(producer.stats()));
    let exporter = Exporter::start(loopback(), Arc::clone(&registry)).expect("start");
    let addr = exporter.local_addr();

    // The rx thread stand-in publishes while the scraper reads.
    let writer = {
        let itch = Arc::clone(&itch);
        let cycle = Arc::clone(registry.rx_cycle());
        thread::spawn(move || {
            for n in 1..=20_000u64 {
                itch.publish(&StreamSample {
                    messages_received: n,
                    bytes_received: n * 10,
                    gaps_detected: 2,
                    messages_missing: 7,
                    reorder_buffered_high_water: 9,
                    session_changes: 1,
                    unconfirmed_session_packets: 4,
                    state: StreamState::Synced,
                    ..StreamSample::default()
                });
                itch.record_handoff(n % 5000 + 100);
                cycle.record(800);
                if n % 1000 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            itch.record_snapshot(2_000_000);
        })
    };
    let label = r#"{venue="nasdaq",stream="itch-a"}"#;
    let received = format!("gapless_messages_received_total{label}");
    let deadline = Instant::now() + TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let (status, head, body) = request(addr, "GET", "/metrics");
        assert_eq!(status, 200);
        assert!(head.contains("application/openmetrics-text"), "{head}");
        seen.extend(sample_value(&body, &received));
        if seen.last() == Some(&20_000) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "final value never appeared: {seen:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
    writer.join().expect("writer");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");

    let (_, _, body) = request(addr, "GET", "/metrics");
    let per_stream = [
        "gapless_messages_received_total",
        "gapless_bytes_received_total",
        "gapless_frames_delivered_total",
        "gapless_gaps_detected_total",
        "gapless_messages_missing",
        "gapless_rerequests_sent_total",
        "gapless_rerequests_answered_total",
        "gapless_rerequests_timed_out_total",
        "gapless_messages_recovered_total",
        "gapless_snapshot_resyncs_total",
        "gapless_duplicates_total",
        "gapless_stale_total",
        "gapless_malformed_packets_total",
        "gapless_filtered_packets_total",
        "gapless_session_changes_total",
        "gapless_unconfirmed_session_packets_total",
        "gapless_trading_authorized",
        "gapless_reorder_buffered",
        "gapless_reorder_buffered_high_water",
        "gapless_snapshot_duration_seconds_count",
        "gapless_handoff_latency_seconds_count",
    ];
    for name in per_stream {
        for labels in [label, r#"{venue="iex",stream="tops"}"#] {
            let series = format!("{name}{labels}");
            assert!(
                sample_value(&body, &series).is_some(),
                "missing {series}\n{body}"
            );
        }
    }
    assert_eq!(
        sample_value(&body, &format!("gapless_bytes_received_total{label}")),
        Some(200_000)
    );
    assert_eq!(
        sample_value(
            &body,
            &format!("gapless_unconfirmed_session_packets_total{label}")
        ),
        Some(4)
    );
    assert_eq!(
        sample_value(&body, &format!("gapless_messages_missing{label}")),
        Some(7)
    );
    assert_eq!(
        sample_value(&body, &format!("gapless_trading_authorized{label}")),
        Some(1)
    );
    assert_eq!(
        sample_value(
            &body,
            r#"gapless_trading_authorized{venue="iex",stream="tops"}"#
        ),
        Some(0)
    );
    let state =
        |s: &str| format!(r#"gapless_stream_state{{venue="nasdaq",stream="itch-a",state="{s}"}}"#);
    assert_eq!(sample_value(&body, &state("synced")), Some(1));
    assert_eq!(sample_value(&body, &state("recovering")), Some(0));
    let handoff_inf =
        r#"gapless_handoff_latency_seconds_bucket{le="+Inf",venue="nasdaq",stream="itch-a"}"#;
    assert_eq!(sample_value(&body, handoff_inf), Some(20_000));
    let snapshot_count = format!("gapless_snapshot_duration_seconds_count{label}");
    assert_eq!(sample_value(&body, &snapshot_count), Some(1));
    assert_eq!(
        sample_value(&body, "gapless_rx_cycle_seconds_count"),
        Some(20_000)
    );
    assert!(body.contains("# TYPE gapless_rx_cycle_seconds histogram"));
    assert!(body.contains("# TYPE gapless_messages_received counter"));
    assert_eq!(
        sample_value(
            &body,
            r#"gapless_consumer_queue_depth_bytes{consumer="unix"}"#
        ),
        Some(0)
    );
    assert_eq!(
        sample_value(&body, r#"gapless_consumer_overruns_total{consumer="unix"}"#),
        Some(0)
    );
    assert!(body.contains("gapless_watchdog_last_alive_timestamp_seconds "));
    assert!(body.ends_with("# EOF\n"));

    let summary = registry.handoff_latency();
    assert_eq!(summary.count, 20_000);
    assert!(summary.p50 >= 2_000 && summary.p50 <= 3_200, "{summary}");
    assert_eq!(summary.max, 5_099);
    exporter.stop();
}

#[test]
fn consumer_overruns_are_counted() {
    let registry = Arc::new(Registry::new());
    let (mut producer, _consumer) = channel(100, 1);
    registry.add_consumer("slow", Arc::clone(producer.stats()));
    let event = Event::Gap {
        stream: 0,
        from: 1,
        to: 2,
    };
    let dropped = (0..10)
        .filter(|_| producer.push(&event) != gapless::publish::Pushed::Written)
        .count();
    let text = registry.encode().expect("encode");
    let overruns = sample_value(&text, r#"gapless_consumer_overruns_total{consumer="slow"}"#);
    assert_eq!(overruns, Some(dropped as u64));
    assert!(dropped > 0);
    let depth = sample_value(
        &text,
        r#"gapless_consumer_queue_depth_bytes{consumer="slow"}"#,
    );
    assert!(depth.is_some_and(|d| d > 0));
}

#[test]
fn healthz_follows_the_watchdog() {
    let registry = Arc::new(Registry::new().with_alive_threshold(Duration::from_secs(2)));
    let exporter = Exporter::start(loopback(), Arc::clone(&registry)).expect("start");
    let addr = exporter.local_addr();

    let (status, _, body) = request(addr, "GET", "/healthz");
    assert_eq!(status, 503, "never alive: {body}");
    registry.process().mark_alive_now();
    let (status, _, body) = request(addr, "GET", "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    registry
        .process()
        .mark_alive(unix_now_ns() - 10_000_000_000);
    let (status, _, body) = request(addr, "GET", "/healthz");
    assert_eq!(status, 503);
    assert!(body.contains("silent for 10."), "{body}");

    let (status, _, _) = request(addr, "GET", "/nope");
    assert_eq!(status, 404);
    let (status, head, _) = request(addr, "POST", "/metrics");
    assert_eq!(status, 405);
    assert!(head.contains("Allow: GET, HEAD"));
    let (status, head, body) = request(addr, "HEAD", "/metrics");
    assert_eq!(status, 200);
    assert!(head.contains("Content-Length: "));
    assert!(body.is_empty());
    // Counted once the response is out, which the client may see first.
    let deadline = Instant::now() + TIMEOUT;
    while exporter.requests_served() < 6 {
        assert!(Instant::now() < deadline, "{}", exporter.requests_served());
        thread::sleep(Duration::from_millis(2));
    }

    let started = Instant::now();
    exporter.stop();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
}

#[test]
fn garbage_requests_get_400_and_the_server_survives() {
    let registry = Arc::new(Registry::new());
    let exporter = Exporter::start(loopback(), registry).expect("start");
    let addr = exporter.local_addr();
    for junk in [
        &b"\xff\xfe\xfd\r\n\r\n"[..],
        b"GET\r\n\r\n",
        &[b'A'; 9000][..],
    ] {
        let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        // The server may close before reading all of an oversized head.
        let _ = stream.write_all(junk);
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        let text = String::from_utf8_lossy(&reply);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 400"),
            "{text}"
        );
    }
    let (status, _, _) = request(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    let taken = Exporter::start(addr, Arc::new(Registry::new()));
    assert!(taken.is_err());
}
