//! The WebSocket and REST failure paths on loopback: listeners that never answer, servers
//! that accept and drop, quiet symbols on pinging servers, and (in a network namespace of
//! its own) a resolver that never answers, beside a MoldUDP64 stream on the same loop.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::drive::live::{RxLoop, RxOptions, RxResult, RxShared};
use crate::io::idle::IdleStrategy;
use crate::publish::fanout::Fanout;
use crate::publish::{self, Consumer, Event, StreamState};
use crate::sim::binance::{BinanceSim, BinanceSimConfig, BookStyle, FaultConfig};
use crate::venue::binance::{BinanceSpec, BinanceVenue, Market, TransportStats};
use crate::venue::{AnyVenue, Venue};

static SERIAL: Mutex<()> = Mutex::new(());

/// A loop over `venues` for `span`, calling `watch` every few milliseconds with the
/// shared state and the consumer; returns what the loop handed back.
fn run_for(
    venues: Vec<AnyVenue>,
    span: Duration,
    watch: impl FnMut(&RxShared, &mut Consumer) -> bool,
) -> RxResult {
    run_shared(venues, RxShared::default(), span, watch)
}

/// [`run_for`] with the loop's shared state (metrics, say) given.
fn run_shared(
    venues: Vec<AnyVenue>,
    shared: RxShared,
    span: Duration,
    mut watch: impl FnMut(&RxShared, &mut Consumer) -> bool,
) -> RxResult {
    let streams: usize = venues.iter().map(Venue::stream_count).sum();
    let (producer, mut consumer) = publish::channel(16 << 20, streams.max(1));
    let options = RxOptions {
        idle: IdleStrategy::Yield,
        publish_every: Duration::from_millis(50),
        ..RxOptions::default()
    };
    let rx =
        RxLoop::new(venues, Fanout::new(vec![producer]), options, shared.clone()).expect("poll");
    let rx = std::thread::spawn(move || rx.run());
    let deadline = Instant::now() + span;
    while Instant::now() < deadline {
        if watch(&shared, &mut consumer) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    shared.stop.store(true, Ordering::Relaxed);
    rx.join().expect("rx thread").expect("rx loop")
}

fn binance(
    ws: &str,
    rest: &str,
    symbols: &[&str],
    tweak: impl FnOnce(&mut BinanceSpec),
) -> AnyVenue {
    let mut spec = BinanceSpec::new(
        Market::Spot,
        symbols.iter().map(|s| s.to_string()).collect(),
    );
    spec.depth_limit = 100;
    tweak(&mut spec);
    BinanceVenue::new("bin", spec, ws, rest, Some(100))
        .expect("venue")
        .into()
}

fn transport(result: &RxResult, venue: usize) -> TransportStats {
    result.venues[venue]
        .binance()
        .expect("a binance venue")
        .transport_stats()
}

/// A listener that accepts every connection and never writes a byte; counts them.
struct SilentListener {
    port: u16,
    accepted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentListener {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, flag) = (Arc::clone(&accepted), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        held.push(s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
                // Read and drop what clients send, never answer.
                for s in &mut held {
                    let _ = s.set_nonblocking(true);
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                }
            }
        });
        Self {
            port,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for SilentListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Issue 13, case 4: a listener that accepts and never answers must not hang the venue.
#[test]
fn a_listener_that_never_answers_is_retried() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for scheme in ["ws", "wss"] {
        let listener = SilentListener::start();
        let ws = format!("{scheme}://127.0.0.1:{}", listener.port);
        let venue = binance(&ws, "http://127.0.0.1:9", &["btcusdt"], |s| {
            s.connect_timeout_ns = 300_000_000;
            s.tls_timeout_ns = 300_000_000;
            s.upgrade_timeout_ns = 300_000_000;
        });
        let result = run_for(vec![venue], Duration::from_secs(4), |_, _| false);
        let t = transport(&result, 0);
        eprintln!(
            "{scheme}: {} connections accepted in 4 s, {t:?}",
            listener.accepted()
        );
        assert!(
            listener.accepted() >= 3,
            "{scheme}: retried after the deadline: {} accepted, {t:?}",
            listener.accepted()
        );
        assert!(t.connect_errors >= 2, "{scheme}: {t:?}");
        assert!(t.open_timeouts >= 2, "{scheme}: {t:?}");
    }
}

/// A listener whose accept queue is full: the kernel drops every further SYN, so a TCP
/// connect to it never completes. None if this kernel answers such connects after all.
struct FullListener {
    port: u16,
    _listener: socket2::Socket,
    _queued: Vec<TcpStream>,
}

impl FullListener {
    fn start() -> Option<Self> {
        use socket2::{Domain, Socket, Type};
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any = std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        listener.bind(&any.into()).expect("bind");
        listener.listen(0).expect("listen");
        let addr = listener
            .local_addr()
            .expect("addr")
            .as_socket()
            .expect("inet");
        let mut queued = Vec::new();
        // Connect until one attempt gets no answer: the queue is full from then on.
        for _ in 0..8 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(s) => queued.push(s),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return Some(Self {
                        port: addr.port(),
                        _listener: listener,
                        _queued: queued,
                    });
                }
                Err(e) => panic!("connect to the filling listener: {e}"),
            }
        }
        None
    }
}

/// Issue 13, case 4, the first step alone: a TCP connect that gets no answer at all (the
/// SYN is dropped) is given up at its deadline, counted and tried again later.
#[test]
fn a_tcp_connect_with_no_answer_is_given_up_and_retried() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(listener) = FullListener::start() else {
        eprintln!("skipping: this kernel completes connects to a listener with a full queue");
        return;
    };
    let ws = format!("ws://127.0.0.1:{}", listener.port);
    let venue = binance(&ws, "http://127.0.0.1:9", &["btcusdt"], |s| {
        s.connect_timeout_ns = 300_000_000;
    });
    let span = Duration::from_secs(4);
    let result = run_for(vec![venue], span, |_, _| false);
    let t = transport(&result, 0);
    eprintln!("{span:?} against a listener that drops every SYN: {t:?}");
    // 300 ms a try, backoff from 200 ms doubling: four tries fit in 4 s, three at least.
    assert_eq!(t.connects, 0, "{t:?}");
    assert!(t.tcp_errors >= 3, "given up and retried: {t:?}");
    assert_eq!(t.open_timeouts, t.tcp_errors, "each by its deadline: {t:?}");
    assert_eq!(
        t.upgrade_errors + t.tls_errors + t.resolve_errors,
        0,
        "{t:?}"
    );
    // Each try is a fresh connect, not the first one left hanging.
    assert!(t.connect_errors == t.tcp_errors, "{t:?}");
}

/// Issue 13, case 5: a server that completes the handshake and drops at once must not be
/// hammered: the backoff grows until a connection proves healthy.
#[test]
fn a_server_that_accepts_and_drops_is_not_stormed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cfg = BinanceSimConfig::generated(&["btcusdt"], BookStyle::Spot, 100.0);
    cfg.faults = FaultConfig {
        disconnect_after: Some(1),
        fault_connections: 0,
        ..FaultConfig::default()
    };
    let sim = BinanceSim::start(cfg).expect("sim");
    let span = Duration::from_secs(8);
    let venue = binance(&sim.ws_base(), &sim.http_base(), &["btcusdt"], |_| {});
    let result = run_for(vec![venue], span, |_, c| {
        while c.pop(|_| {}).is_some() {}
        false
    });
    let stats = sim.stats();
    let t = transport(&result, 0);
    eprintln!(
        "{} connections and {} snapshot requests in {span:?}; {t:?}",
        stats.connections, stats.http_requests
    );
    // Backoff from 200 ms doubling, less jitter: at most about 6 attempts in 8 s.
    assert!(stats.connections >= 3, "it does reconnect: {stats:?}");
    assert!(stats.connections <= 8, "no storm: {stats:?}");
    assert!(stats.http_requests <= 8, "no snapshot storm: {stats:?}");
}

/// Issue 13, case 6: a symbol with no events is quiet, not dead: the connection stays up
/// on the server's pings alone (client pings off), and on the client's pings alone (the
/// server never pings, only answers).
#[test]
fn a_quiet_symbol_on_a_pinging_server_stays_connected() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let span = Duration::from_secs(8);
    for (server_ping, client_ping_ns) in [(Some(Duration::from_secs(1)), 0), (None, 1_000_000_000)]
    {
        let mut cfg = BinanceSimConfig::generated(&["btcusdt"], BookStyle::Spot, 50.0);
        cfg.ping_interval = server_ping;
        let sim = BinanceSim::start(cfg).expect("sim");
        // ethusdt: subscribed, never published.
        let venue = binance(&sim.ws_base(), &sim.http_base(), &["ethusdt"], |s| {
            s.silence_timeout_ns = 3_000_000_000;
            s.ping_interval_ns = client_ping_ns;
        });
        let result = run_for(vec![venue], span, |_, c| {
            while c.pop(|_| {}).is_some() {}
            false
        });
        let stats = sim.stats();
        let t = transport(&result, 0);
        eprintln!(
            "server pings {server_ping:?}, client pings every {client_ping_ns} ns: {} connections \
             in {span:?}, {} pings sent, {} pongs received by the server; {t:?}",
            stats.connections, stats.pings_sent, stats.pongs_received
        );
        assert_eq!(stats.connections, 1, "no reconnect: {stats:?} {t:?}");
        assert_eq!(t.rotations, 0, "{t:?}");
        assert!(t.alive_signals >= 5, "{t:?}");
    }
}

/// Everything the MoldUDP64 consumer saw.
#[derive(Default)]
struct Seen {
    seqs: Vec<u64>,
    closed: bool,
}

fn drain_mold(c: &mut Consumer, seen: &mut Seen, stream: u16) {
    while c
        .pop(|e| match e {
            Event::Message {
                stream: s,
                seq,
                snapshot: false,
                ..
            } if s == stream => seen.seqs.push(seq),
            Event::State {
                stream: s, state, ..
            } if s == stream && state == StreamState::Closed => seen.closed = true,
            _ => {}
        })
        .is_some()
    {}
}

/// Issue 13, case 3 and its done-when: Binance venues that cannot get anywhere must not
/// stall the loop. One resolves its host names through a name server that never answers;
/// one connects to a listener that accepts and never answers (WebSocket and REST alike);
/// one streams from a live server but resolves its REST host through the silent name
/// server. The MoldUDP64 stream beside them stays synced and exact, the loop's liveness
/// stamp keeps moving, and each venue reports its failure.
#[test]
fn blackhole_names_and_listeners_stall_nothing() {
    const TEST: &str = "drive::live::tests::failures::blackhole_names_and_listeners_stall_nothing";
    if std::env::var_os(super::IN_NETNS).is_none() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        super::rerun_in_netns(TEST, true);
        return;
    }
    // The name server: takes every query, answers none.
    let _dns = UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53 in the namespace");
    let silent = SilentListener::start();
    let live = BinanceSim::start(BinanceSimConfig::generated(
        &["ethusdt"],
        BookStyle::Spot,
        50.0,
    ))
    .expect("binance simulator");
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 61, 31), 46131);
    let count = 24_000u64;
    let mut cfg = crate::sim::MoldSimConfig::new(group);
    cfg.count = count;
    cfg.rate = Some(4_000.0);
    cfg.heartbeat_interval = Some(Duration::from_millis(50));
    cfg.start_delay = Duration::from_millis(50);
    cfg.end_of_session_repeats = 20;
    cfg.end_of_session_gap = Duration::from_millis(50);
    let sim = crate::sim::MoldSim::start(cfg).expect("mold simulator");
    let channel = crate::venue::ChannelSpec {
        name: "mold-a".into(),
        lines: vec![crate::venue::udp::LineSpec::loopback(group)],
        session: None,
        rerequest: vec![std::net::SocketAddr::V4(sim.rerequest_addr())],
        peer_stores: Vec::new(),
        resume: None,
        snapshot: None,
    };
    let mut spec = crate::venue::FeedSpec::new(crate::venue::Wire::MoldUdp64, vec![channel]);
    spec.start_from = Some(1);
    let mold: AnyVenue = crate::venue::UdpVenue::new("mold", spec).into();
    let unresolved = binance(
        "ws://stream.blackhole.test:9443",
        "http://api.blackhole.test",
        &["btcusdt"],
        |_| {},
    );
    let at_silent = format!("127.0.0.1:{}", silent.port);
    let unanswered = binance(
        &format!("ws://{at_silent}"),
        &format!("http://{at_silent}"),
        &["btcusdt"],
        |s| s.upgrade_timeout_ns = 1_000_000_000,
    );
    let rest_unresolved = binance(
        &live.ws_base(),
        "http://api.blackhole.test",
        &["ethusdt"],
        |s| s.snapshot_timeout_ns = 2_000_000_000,
    );
    let registry = Arc::new(crate::metrics::Registry::new());
    let metrics: Vec<_> = ["unresolved", "unanswered", "rest_unresolved"]
        .iter()
        .map(|name| registry.add_venue(name))
        .collect();
    let shared = RxShared {
        metrics: Some(Arc::clone(&registry)),
        venue_metrics: std::iter::once(None)
            .chain(metrics.iter().cloned().map(Some))
            .collect(),
        ..RxShared::default()
    };
    use crate::metrics::VenueSeries as S;
    let reported = |m: &crate::metrics::VenueMetrics, series: S| m.get(series) >= 1;
    let all_reported = || {
        reported(&metrics[0], S::ResolveErrors)
            && reported(&metrics[1], S::UpgradeErrors)
            && reported(&metrics[2], S::Frames)
            && reported(&metrics[2], S::SnapshotErrors)
    };
    let mut seen = Seen::default();
    let mut worst = Duration::ZERO;
    let mut last_alive = (0u64, Instant::now());
    let venues = vec![mold, unresolved, unanswered, rest_unresolved];
    let result = run_shared(venues, shared, Duration::from_secs(30), |shared, c| {
        drain_mold(c, &mut seen, 0);
        let alive = shared.alive_ns.load(Ordering::Relaxed);
        if alive != last_alive.0 {
            last_alive = (alive, Instant::now());
        }
        worst = worst.max(last_alive.1.elapsed());
        seen.closed && all_reported()
    });
    let t: Vec<TransportStats> = (1..=3).map(|v| transport(&result, v)).collect();
    eprintln!(
        "{} of {count} messages; longest the loop stamp stood still: {worst:?}; \
         {} connections accepted by the silent listener; {t:#?}",
        seen.seqs.len(),
        silent.accepted()
    );
    let want: Vec<u64> = (1..=count).collect();
    assert!(seen.closed, "the MoldUDP64 session ran to its end");
    assert!(seen.seqs == want, "exact: {} messages", seen.seqs.len());
    assert!(worst < Duration::from_millis(500), "loop stalled {worst:?}");
    assert!(t[0].resolve_errors >= 1, "the lookups failed: {:?}", t[0]);
    assert!(
        t[1].upgrade_errors >= 1,
        "the upgrade timed out: {:?}",
        t[1]
    );
    assert!(t[1].open_timeouts >= 1, "by its deadline: {:?}", t[1]);
    assert!(silent.accepted() >= 1, "it did connect");
    assert!(t[2].connects >= 1, "the live one streams: {:?}", t[2]);
    assert!(t[2].snapshot_errors >= 1, "its snapshots fail: {:?}", t[2]);
    assert!(all_reported(), "every failure reached the metrics");
}

/// Issue 13, case 7: refused connections and failed snapshots are counted, and the
/// Binance venue's own counters reach the metrics endpoint.
#[test]
fn connection_and_snapshot_failures_reach_the_metrics() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sim = BinanceSim::start(BinanceSimConfig::generated(
        &["btcusdt"],
        BookStyle::Spot,
        50.0,
    ))
    .expect("sim");
    // Data flows, snapshots are refused.
    let fed = binance(&sim.ws_base(), "http://127.0.0.1:1", &["btcusdt"], |_| {});
    // Nothing listens at all.
    let refused = binance(
        "ws://127.0.0.1:1",
        "http://127.0.0.1:1",
        &["ethusdt"],
        |_| {},
    );
    let registry = Arc::new(crate::metrics::Registry::new());
    let venue_metrics = vec![
        Some(registry.add_venue("fed")),
        Some(registry.add_venue("refused")),
    ];
    let streams: usize = 2;
    let (producer, mut consumer) = publish::channel(16 << 20, streams);
    let shared = RxShared {
        metrics: Some(Arc::clone(&registry)),
        venue_metrics,
        ..RxShared::default()
    };
    let options = RxOptions {
        idle: IdleStrategy::Yield,
        publish_every: Duration::from_millis(50),
        ..RxOptions::default()
    };
    let rx = RxLoop::new(
        vec![fed, refused],
        Fanout::new(vec![producer]),
        options,
        shared.clone(),
    )
    .expect("poll");
    let rx = std::thread::spawn(move || rx.run());
    let value = |text: &str, name: &str, venue: &str| -> u64 {
        let prefix = format!("{name}{{venue=\"{venue}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    while Instant::now() < deadline {
        while consumer.pop(|_| {}).is_some() {}
        text = registry
            .encode(crate::metrics::Format::Text)
            .expect("encode");
        if value(&text, "gapless_venue_snapshot_errors_total", "fed") >= 1
            && value(&text, "gapless_venue_tcp_errors_total", "refused") >= 2
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    shared.stop.store(true, Ordering::Relaxed);
    let _ = rx.join().expect("rx thread").expect("rx loop");
    let show: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gapless_venue_") && !l.ends_with(" 0"))
        .collect();
    eprintln!("{show:#?}");
    assert!(
        value(&text, "gapless_venue_frames_total", "fed") >= 1,
        "{show:?}"
    );
    assert!(
        value(&text, "gapless_venue_connects_total", "fed") >= 1,
        "{show:?}"
    );
    assert!(
        value(&text, "gapless_venue_snapshot_errors_total", "fed") >= 1,
        "{show:?}"
    );
    assert!(
        value(&text, "gapless_venue_tcp_errors_total", "refused") >= 2,
        "{show:?}"
    );
    assert!(
        value(&text, "gapless_venue_connect_errors_total", "refused") >= 2,
        "{show:?}"
    );
}
