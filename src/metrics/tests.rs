//! The exporter over HTTP on loopback: series, labels, values written by
//! another thread, both exposition formats, health, routing, concurrency
//! with a bound, timeouts, a prompt stop; `promtool check metrics` on a real
//! scrape; and the dashboard's and alerts' queries against what is exported.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::metrics::exporter::{MAX_CONNECTIONS, READ_TIMEOUT};
use crate::metrics::{Exporter, Format, Registry, StreamSample, unix_now_ns};
use crate::publish::{Event, StreamState, channel};

const TIMEOUT: Duration = Duration::from_secs(5);
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0";

/// Sends one request and returns the status, the head and the body.
fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    request_accepting(addr, method, path, None)
}

/// [`request`] with an `Accept` header.
fn request_accepting(
    addr: SocketAddr,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream.set_write_timeout(Some(TIMEOUT)).expect("timeout");
    let accept = accept.map_or_else(String::new, |a| format!("Accept: {a}\r\n"));
    let req =
        format!("{method} {path} HTTP/1.1\r\nHost: test\r\n{accept}Connection: close\r\n\r\n");
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
        let (status, head, body) = request_accepting(addr, "GET", "/metrics", Some(OPENMETRICS));
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

    let (_, head, body) = request_accepting(addr, "GET", "/metrics", Some(OPENMETRICS));
    assert!(head.contains("application/openmetrics-text"), "{head}");
    let per_stream = [
        "gapless_messages_received_total",
        "gapless_bytes_received_total",
        "gapless_frames_delivered_total",
        "gapless_gaps_detected_total",
        "gapless_messages_missing",
        "gapless_rerequests_sent_total",
        "gapless_rerequests_answered_total",
        "gapless_rerequests_timed_out_total",
        "gapless_rerequests_not_yet_total",
        "gapless_messages_recovered_total",
        "gapless_snapshot_resyncs_total",
        "gapless_duplicates_total",
        "gapless_stale_total",
        "gapless_malformed_packets_total",
        "gapless_filtered_packets_total",
        "gapless_session_changes_total",
        "gapless_unconfirmed_session_packets_total",
        "gapless_truncated_packets_total",
        "gapless_rerequests_dropped_total",
        "gapless_rerequests_inflight",
        "gapless_heartbeats_received_total",
        "gapless_snapshots_failed_total",
        "gapless_messages_lost_total",
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

    // Without an Accept header: the text format, with the same samples.
    let (status, head, text) = request(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(text.contains("# TYPE gapless_messages_received_total counter\n"));
    assert!(text.contains("# HELP gapless_messages_received_total Messages "));
    assert!(!text.contains("# EOF"));
    // The same series; values equal (floats may differ in the last digit:
    // the two writers pick different shortest forms).
    let samples = |s: &str| {
        let mut lines: Vec<(String, f64)> = s
            .lines()
            .filter(|l| !l.starts_with('#'))
            // Scraped at another moment.
            .filter(|l| !l.starts_with("gapless_exporter_") && !l.starts_with("gapless_watchdog"))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(series, value)| (series.to_string(), value.parse().unwrap_or(f64::NAN)))
            .collect();
        lines.sort_by(|a, b| a.0.cmp(&b.0));
        lines
    };
    let (text_samples, om_samples) = (samples(&text), samples(&body));
    assert_eq!(text_samples.len(), om_samples.len());
    for ((series, a), (other, b)) in text_samples.iter().zip(&om_samples) {
        assert_eq!(series, other);
        assert!((a - b).abs() <= a.abs() * 1e-15, "{series}: {a} and {b}");
    }

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
        .filter(|_| producer.push(&event) != crate::publish::Pushed::Written)
        .count();
    let text = registry.encode(Format::Text).expect("encode");
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

/// A registry with two streams, a consumer and data in every histogram.
fn busy_registry() -> Arc<Registry> {
    let registry = Arc::new(Registry::new());
    let itch = registry.add_stream("nasdaq", "itch-a");
    let tops = registry.add_stream("iex", "tops");
    itch.publish(&StreamSample {
        packets_received: 10,
        messages_received: 40,
        messages_lost: 2,
        truncated_packets: 1,
        state: StreamState::Synced,
        ..StreamSample::default()
    });
    tops.set_state(StreamState::Recovering);
    for ns in [150, 2_000, 90_000, 4_000_000_000] {
        itch.record_handoff(ns);
        tops.record_snapshot(ns * 1000);
        registry.rx_cycle().record(ns);
    }
    let (producer, _consumer) = channel(4096, 2);
    registry.add_consumer("unix", Arc::clone(producer.stats()));
    registry.add_ring("/run/gapless/a.ring", ring_with_three_records());
    registry.add_socket(
        "/run/gapless/feed.sock",
        Arc::new(crate::sinks::UnixCounters::default()),
    );
    registry.add_nats(
        "nats:FEED",
        Arc::new(crate::sinks::nats::NatsCounters::default()),
    );
    registry.add_jetstream_recovery(
        "nats:FEED",
        Arc::new(crate::sinks::nats_recovery::RecoveryCounters::default()),
    );
    let line = registry.add_line("nasdaq", "itch-a", "b");
    let mut stats = crate::venue::LineStats {
        packets: 9,
        wins: 2,
        down: true,
        downs: 1,
        ..crate::venue::LineStats::default()
    };
    stats.lag.record(300_000);
    line.publish(&stats, crate::metrics::LineSocket::default());
    registry.process().mark_alive_now();
    registry
}

/// The counters of a real ring that took three messages (its file is gone, its mapping
/// stays).
fn ring_with_three_records() -> Arc<crate::sinks::shm::ShmCounters> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "gapless-metrics-ring-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let names = [crate::publish::wire::StreamName::new("nasdaq", "itch-a")];
    let mut ring = crate::sinks::shm::ShmSink::create(&path, 1 << 16, &names).expect("ring");
    std::fs::remove_file(&path).expect("remove the ring file");
    for seq in 1..=3 {
        ring.write(&crate::publish::Event::Message {
            stream: 0,
            seq,
            recv_ns: 1,
            snapshot: false,
            payload: b"abc",
        });
    }
    ring.publish_stats();
    ring.counters()
}

fn idle_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect"))
        .collect()
}

#[test]
fn a_scrape_answers_behind_idle_connections() {
    let exporter = Exporter::start(loopback(), busy_registry()).expect("start");
    let addr = exporter.local_addr();
    let idle = MAX_CONNECTIONS - 4;
    let _held = idle_connections(addr, idle);
    let started = Instant::now();
    let (status, _, body) = request(addr, "GET", "/metrics");
    let took = started.elapsed();
    println!("scrape behind {idle} idle connections: {took:?}");
    assert_eq!(status, 200);
    assert!(body.contains("gapless_messages_received_total{"));
    // Well under the read timeout that each idle connection may hold a
    // thread for: the scrape did not wait behind any of them.
    assert!(took < READ_TIMEOUT / 2, "{took:?}");
}

#[test]
fn connections_beyond_the_bound_are_refused_and_counted() {
    let registry = busy_registry();
    let exporter = Exporter::start(loopback(), Arc::clone(&registry)).expect("start");
    let addr = exporter.local_addr();
    // Accepted in order: by the time the next one is, these hold every slot
    // (for up to the read timeout each).
    let held = idle_connections(addr, MAX_CONNECTIONS);
    let started = Instant::now();
    let (status, head, _) = request(addr, "GET", "/metrics");
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("Retry-After: 1"), "{head}");
    assert!(started.elapsed() < READ_TIMEOUT / 2);
    assert_eq!(exporter.stats().refused(), 1);

    // Idle peers that hang up free their slots; a scrape gets through
    // again and reports the refusal.
    drop(held);
    let deadline = Instant::now() + TIMEOUT;
    let body = loop {
        let (status, _, body) = request(addr, "GET", "/metrics");
        if status == 200 {
            break body;
        }
        assert!(Instant::now() < deadline, "still refused");
        thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        sample_value(&body, "gapless_exporter_connections_refused_total"),
        Some(exporter.stats().refused())
    );
}

#[test]
fn an_idle_connection_is_closed_after_the_read_timeout() {
    let registry = busy_registry();
    let exporter = Exporter::start(loopback(), Arc::clone(&registry)).expect("start");
    let addr = exporter.local_addr();
    let mut idle = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    idle.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let started = Instant::now();
    let mut reply = Vec::new();
    // The server closes it without an answer; the read ends there.
    let _ = idle.read_to_end(&mut reply);
    let waited = started.elapsed();
    assert!(reply.is_empty(), "{}", String::from_utf8_lossy(&reply));
    assert!(
        waited >= READ_TIMEOUT.mul_f32(0.9) && waited < READ_TIMEOUT * 3,
        "{waited:?}"
    );
    let deadline = Instant::now() + TIMEOUT;
    while exporter.stats().failed() < 1 {
        assert!(Instant::now() < deadline, "the timeout was not counted");
        thread::sleep(Duration::from_millis(5));
    }
    let (_, _, body) = request(addr, "GET", "/metrics");
    assert_eq!(
        sample_value(&body, "gapless_exporter_connections_failed_total"),
        Some(1)
    );
}

fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        println!("skipped: promtool not found (.ci/install-deps installs Debian's prometheus)");
    }
    found.then_some("promtool")
}

/// Runs `promtool args..` with `input` on stdin; its exit code and output.
fn run_promtool(tool: &str, args: &[&str], input: &str) -> (Option<i32>, String) {
    let mut child = Command::new(tool)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("stdin");
    drop(stdin);
    let output = child.wait_with_output().expect("promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

#[test]
fn promtool_accepts_a_real_scrape() {
    let Some(promtool) = promtool() else {
        return;
    };
    let exporter = Exporter::start(loopback(), busy_registry()).expect("start");
    // What curl sends, and what promtool's own docs pipe into it.
    let (status, head, body) =
        request_accepting(exporter.local_addr(), "GET", "/metrics", Some("*/*"));
    assert_eq!(status, 200);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(body.contains(r#"gapless_consumer_overruns_total{consumer="unix"} 0"#));
    assert!(body.contains(r#"gapless_shm_records_total{ring="/run/gapless/a.ring"} 3"#));
    assert!(body.contains(r#"gapless_shm_capacity_bytes{ring="/run/gapless/a.ring"} 65536"#));
    assert!(body.contains(r#"gapless_unix_cut_offs_total{socket="/run/gapless/feed.sock"} 0"#));
    assert!(body.contains(r#"gapless_truncated_packets_total{venue="nasdaq",stream="itch-a"} 1"#));
    let (code, output) = run_promtool(promtool, &["check", "metrics"], &body);
    assert_eq!(code, Some(0), "promtool check metrics:\n{output}");

    // The check is real: the OpenMetrics form fails it (counter families
    // named without `_total`).
    let (_, _, om) = request_accepting(exporter.local_addr(), "GET", "/metrics", Some(OPENMETRICS));
    let (code, output) = run_promtool(promtool, &["check", "metrics"], &om);
    assert_ne!(code, Some(0), "{output}");
}

#[test]
fn promtool_passes_the_alert_rules_and_their_tests() {
    let Some(promtool) = promtool() else {
        return;
    };
    let (code, output) = run_promtool(
        promtool,
        &["check", "rules", "deploy/prometheus/gapless-alerts.yml"],
        "",
    );
    assert_eq!(code, Some(0), "promtool check rules:\n{output}");
    let (code, output) = run_promtool(
        promtool,
        &["test", "rules", "deploy/prometheus/gapless-alerts.test.yml"],
        "",
    );
    assert_eq!(code, Some(0), "promtool test rules:\n{output}");
}

/// Every `gapless_...` name in `text`.
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("gapless_") {
        let preceded = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.push(tail[..len].to_string());
        }
        rest = &tail[len..];
    }
    names.sort();
    names.dedup();
    names
}

/// Sample names the exporter serves (`x_bucket`, `x_sum` and `x_count` for
/// histograms).
fn exported_names() -> Vec<String> {
    let text = busy_registry().encode(Format::Text).expect("encode");
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(String::from)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn dashboard_and_alerts_name_only_exported_series() {
    let exported = exported_names();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "deploy/grafana/gapless-dashboard.json",
        "deploy/prometheus/gapless-alerts.yml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        let names = metric_names(&text);
        assert!(names.len() >= 5, "{file}: {names:?}");
        for name in names {
            assert!(
                exported.binary_search(&name).is_ok(),
                "{file} names {name}, which is not exported; exported: {exported:?}"
            );
        }
    }
}

/// Every string value under an `expr` or `query` key.
fn queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match v {
                    serde_json::Value::String(s) if key == "expr" || key == "query" => {
                        out.push(s.clone());
                    }
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

#[test]
fn every_dashboard_query_selects_the_instance() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/gapless-dashboard.json");
    let text = std::fs::read_to_string(path).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("template variables");
    let instance = variables
        .iter()
        .find(|v| v["name"] == "instance")
        .expect("an instance variable");
    assert_eq!(instance["type"], "query");
    let mut all = Vec::new();
    queries(&dashboard, &mut all);
    let with_series: Vec<&String> = all.iter().filter(|q| q.contains("gapless_")).collect();
    assert!(with_series.len() >= 19, "{with_series:?}");
    for query in with_series {
        // Every selector of a gapless series names the instance, except the
        // one that lists the instances.
        let mut rest = query.as_str();
        while let Some(at) = rest.find("gapless_") {
            let tail = &rest[at..];
            let name_len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            let after = &tail[name_len..];
            let selector = after
                .strip_prefix('{')
                .and_then(|s| s.split_once('}'))
                .map(|(inside, _)| inside);
            let lists_instances =
                query.starts_with("label_values(") && query.trim_end().ends_with(", instance)");
            if !lists_instances {
                assert!(
                    selector.is_some_and(|s| s.contains(r#"instance=~"$instance""#)),
                    "a selector without the instance in: {query}"
                );
            }
            rest = after;
        }
    }
}

#[test]
fn promtool_parses_every_dashboard_query() {
    let Some(promtool) = promtool() else {
        return;
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/gapless-dashboard.json");
    let text = std::fs::read_to_string(path).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let mut all = Vec::new();
    queries(&dashboard, &mut all);
    // Panel queries as recording rules, with the template variables filled in as Grafana
    // would: promtool parses each one.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut count = 0;
    for query in all
        .iter()
        .filter(|q| !q.starts_with("label_values(") && q.contains("gapless_"))
    {
        let expr = query
            .replace("$instance", "h1:9464")
            .replace("$venue", ".*");
        count += 1;
        rules.push_str(&format!(
            "      - record: dashboard:query_{count}\n        expr: {}\n",
            serde_json::Value::String(expr)
        ));
    }
    assert!(count >= 19, "{count}");
    let dir = std::env::temp_dir().join(format!("gapless-dashboard-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("dashboard-rules.yml");
    std::fs::write(&file, &rules).expect("write rules");
    let file_arg = file.to_string_lossy().into_owned();
    let (code, output) = run_promtool(promtool, &["check", "rules", &file_arg], "");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        code,
        Some(0),
        "promtool check rules on the dashboard's queries:\n{output}\n{rules}"
    );
}

#[test]
fn a_line_reports_what_the_kernel_dropped_for_its_socket() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    // A socket with a small receive buffer, sent far more than it holds and never read.
    let socket = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    socket
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .expect("bind");
    let socket: std::net::UdpSocket = socket.into();
    let to = socket.local_addr().expect("addr");
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").expect("sender");
    for _ in 0..200 {
        // A send the kernel refuses is one drop fewer; the assertion wants only some.
        let _ = sender.send_to(&[0u8; 1000], to);
    }
    let inode = std::fs::metadata(format!("/proc/self/fd/{}", socket.as_raw_fd()))
        .expect("fd")
        .ino();
    let registry = Registry::new();
    let line = registry.add_line("nasdaq", "itch", "a");
    line.publish(
        &crate::venue::LineStats::default(),
        crate::metrics::LineSocket {
            inode,
            ..crate::metrics::LineSocket::default()
        },
    );
    let text = registry.encode(Format::Text).expect("encode");
    let sample = text
        .lines()
        .find(|l| l.starts_with("gapless_line_kernel_drops_total{"))
        .expect("the series");
    let dropped: u64 = sample.rsplit(' ').next().unwrap().parse().unwrap();
    if std::fs::read_to_string("/proc/net/udp").is_err() {
        eprintln!("skipping: /proc/net/udp cannot be read here");
        return;
    }
    assert!(dropped > 100, "{sample}");
    drop(socket);
}
