use super::*;

/// A stream held in memory: (stream sequence, headers) of one subject, in order.
struct Fake(Vec<(u64, HeaderMap)>);

impl Probe for Fake {
    async fn last(&self, _subject: &str) -> Result<Option<(u64, HeaderMap)>, String> {
        Ok(self.0.last().cloned())
    }

    async fn next(&self, _subject: &str, from: u64) -> Result<Option<(u64, HeaderMap)>, String> {
        Ok(self.0.iter().find(|(at, _)| *at >= from).cloned())
    }
}

fn headers(kind: &str, epoch: &str, seq: Option<u64>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(KIND, kind);
    h.insert(EPOCH, epoch);
    if let Some(seq) = seq {
        h.insert(SEQ, seq.to_string().as_str());
    }
    h
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// Session OLD's messages 1..=50, then SESS's epoch event, its messages 1..=100 with a
/// state event after 40, interleaved with another subject's (gaps in the stream sequence).
fn two_sessions() -> Fake {
    let mut at = 0u64;
    let mut list = Vec::new();
    let mut push = |h: HeaderMap| {
        // Every third stream sequence belongs to another subject.
        at += if at % 3 == 2 { 2 } else { 1 };
        list.push((at, h));
    };
    for seq in 1..=50 {
        push(headers("message", "OLD", Some(seq)));
    }
    push(headers("epoch", "SESS", None));
    for seq in 1..=100 {
        push(headers("message", "SESS", Some(seq)));
        if seq == 40 {
            push(headers("state", "SESS", None));
        }
    }
    Fake(list)
}

fn stream_seq_of(fake: &Fake, epoch: &str, seq: u64) -> u64 {
    fake.0
        .iter()
        .find(|(_, h)| stored(Some(h)) == Stored::Message { epoch, seq })
        .map(|(at, _)| *at)
        .expect("held")
}

#[test]
fn the_search_finds_the_first_message_of_the_session_at_or_past_first() {
    let fake = two_sessions();
    for first in [1, 2, 40, 41, 99, 100] {
        let found = match run(locate(&fake, "s", "SESS", first)).expect("no failure") {
            Located::At(at) => Some(at),
            _ => None,
        };
        let next = fake
            .0
            .iter()
            .find(|(at, _)| *at >= found.expect("held"))
            .map(|(_, h)| stored(Some(h)));
        // The consumer starts at the message itself, or at an event just before it.
        let want = stream_seq_of(&fake, "SESS", first);
        assert!(found.expect("held") <= want, "first {first}");
        assert!(
            next == Some(Stored::Message {
                epoch: "SESS",
                seq: first
            }) || fake
                .0
                .iter()
                .filter(|(at, _)| *at >= found.expect("held") && *at < want)
                .all(|(_, h)| matches!(stored(Some(h)), Stored::Other { .. })),
            "first {first}: starts at {found:?}, the message is at {want}"
        );
    }
}

#[test]
fn the_search_declines_what_jetstream_does_not_hold() {
    let fake = two_sessions();
    // A session that is not the subject's latest.
    assert_eq!(run(locate(&fake, "s", "OLD", 10)), Ok(Located::Nothing));
    assert_eq!(run(locate(&fake, "s", "NONE", 1)), Ok(Located::Nothing));
    // A subject with nothing on it.
    assert_eq!(
        run(locate(&Fake(Vec::new()), "s", "SESS", 1)),
        Ok(Located::Nothing)
    );
}

/// Past the session's last message, the peer has not published it yet: the search says
/// where the last one is, and the reader starts right after it.
#[test]
fn the_search_tells_what_is_not_stored_yet_from_what_never_will_be() {
    let fake = two_sessions();
    let last_at = stream_seq_of(&fake, "SESS", 100);
    for first in [101, 102, 5000] {
        assert_eq!(
            run(locate(&fake, "s", "SESS", first)),
            Ok(Located::Ahead { last_at, last: 100 }),
            "first {first}"
        );
    }
    // The last message itself is stored.
    assert!(matches!(
        run(locate(&fake, "s", "SESS", 100)),
        Ok(Located::At(_))
    ));
}

#[test]
fn stored_messages_are_told_from_events_and_snapshots() {
    assert_eq!(
        stored(Some(&headers("message", "S1", Some(7)))),
        Stored::Message {
            epoch: "S1",
            seq: 7
        }
    );
    assert_eq!(
        stored(Some(&headers("state", "S1", None))),
        Stored::Other { epoch: "S1" }
    );
    let mut snap = headers("message", "S1", Some(7));
    snap.insert(SNAPSHOT, "1");
    assert_eq!(stored(Some(&snap)), Stored::Other { epoch: "S1" });
    let mut bad = headers("message", "S1", None);
    bad.insert(SEQ, "seven");
    assert_eq!(stored(Some(&bad)), Stored::Other { epoch: "S1" });
    assert_eq!(stored(None), Stored::Other { epoch: "" });
}

fn responder(wire: Wire) -> Responder {
    Responder::new(
        JetStreamChannel {
            venue: "v".into(),
            channel: "c".into(),
            subject: "gapless.v.c".into(),
            wire,
            socket: bind_local().expect("a loopback socket"),
            warm: None,
        },
        Arc::new(RecoveryCounters::default()),
    )
}

fn message(seq: u64) -> Bytes {
    Bytes::from(format!(
        "message {seq:04} {}",
        "x".repeat((seq % 7) as usize)
    ))
}

#[test]
fn a_moldudp64_answer_holds_consecutive_messages_from_first_that_fit() {
    let mut r = responder(Wire::MoldUdp64);
    r.cache.switch("SESS");
    for seq in (1..=300).filter(|s| *s != 250) {
        r.cache.insert(seq, message(seq));
    }
    let session = SessionKey(*b"SESS      ");
    // Asked for 5 from 10: exactly 10..=14.
    let (len, n) = r.build(session, 10, 5).expect("held");
    assert_eq!(n, 5);
    let packet = moldudp64::Packet::decode(&r.answer[..len]).expect("a valid packet");
    assert_eq!(packet.session(), Session(session.0));
    assert_eq!(packet.sequence(), 10);
    let got: Vec<Vec<u8>> = packet.messages().map(<[u8]>::to_vec).collect();
    let want: Vec<Vec<u8>> = (10..15).map(|s| message(s).to_vec()).collect();
    assert_eq!(got, want);
    // Asked for 1000 from 200: stops at the hole at 250, within the size.
    let (len, n) = r.build(session, 200, 1000).expect("held");
    assert_eq!(n, 50);
    assert!(len <= ANSWER_BYTES);
    // Asked for 1000 from 1: as many as fit the answer.
    let (len, n) = r.build(session, 1, 1000).expect("held");
    assert!(n > 20 && n < 249, "{n} messages");
    assert!(len <= ANSWER_BYTES && len + message(n + 1).len() + 2 > ANSWER_BYTES);
    // Not held: no answer.
    assert_eq!(r.build(session, 250, 3), None);
    assert_eq!(r.build(session, 301, 3), None);
}

#[test]
fn an_iex_tp_answer_carries_the_session_id_and_first_sequence() {
    let mut r = responder(Wire::IexTp);
    r.cache.switch("42");
    for seq in 5..=9 {
        r.cache.insert(seq, message(seq));
    }
    let (len, n) = r.build(SessionKey::iex(42), 6, 100).expect("held");
    assert_eq!(n, 4);
    let packet = iex_tp::Packet::decode(&r.answer[..len]).expect("a valid segment");
    assert_eq!(packet.session_id(), 42);
    assert_eq!(packet.sequence(), 6);
    assert_eq!(packet.message_count(), 4);
    let got: Vec<Vec<u8>> = packet.messages().map(<[u8]>::to_vec).collect();
    let want: Vec<Vec<u8>> = (6..10).map(|s| message(s).to_vec()).collect();
    assert_eq!(got, want);
}

/// The "not yet" answer is what the channel takes as one: a heartbeat of its wire, of the
/// request's session, with the head as its sequence.
#[test]
fn a_not_yet_answer_is_a_heartbeat_of_the_session_with_the_head() {
    use crate::venue::udp::wire::{Kind, decode};
    for (wire, session) in [
        (Wire::MoldUdp64, SessionKey(*b"SESS000001")),
        (Wire::IexTp, SessionKey::iex(42)),
    ] {
        let r = responder(wire);
        let mut out = [0u8; 64];
        let bytes = r
            .not_yet_bytes(session, 330_001, &mut out)
            .expect("written");
        let d = decode(wire, bytes).expect("a valid datagram");
        assert_eq!(
            (d.session, d.seq, d.kind, d.count),
            (session, 330_001, Kind::Heartbeat, 0),
            "{wire:?}"
        );
    }
}

#[test]
fn the_cache_keeps_its_bound_by_dropping_the_oldest() {
    let mut cache = Cache::default();
    cache.switch("S");
    let big = Bytes::from(vec![0u8; (1 << 20) - ENTRY_BYTES]);
    for seq in 1..=40 {
        cache.insert(seq, big.clone());
    }
    assert!(cache.bytes <= CACHE_BYTES);
    assert_eq!(cache.messages.len(), CACHE_BYTES >> 20);
    assert_eq!(cache.messages.first_key_value().map(|(k, _)| *k), Some(9));
    // The same sequence again replaces, not adds.
    cache.insert(40, Bytes::from_static(b"x"));
    assert_eq!(
        cache.bytes,
        ((CACHE_BYTES >> 20) - 1) * (1 << 20) + 1 + ENTRY_BYTES
    );
    // Small messages count their entries too.
    cache.switch("U");
    for seq in 1..=(CACHE_BYTES / ENTRY_BYTES) as u64 {
        cache.insert(seq, Bytes::from_static(b"m"));
    }
    assert!(cache.bytes <= CACHE_BYTES);
    assert!(cache.messages.len() < CACHE_BYTES / ENTRY_BYTES);
    // Another session starts empty.
    cache.switch("T");
    assert!(cache.messages.is_empty());
    assert_eq!(cache.bytes, 0);
}

/// A `nats-server -js` of the test's own on a loopback port, killed on drop; `None` (with
/// the reason printed) where the binary is not installed.
struct Server {
    child: std::process::Child,
    url: String,
    dir: std::path::PathBuf,
}

impl Server {
    fn start(name: &str) -> Option<Self> {
        use std::io::BufRead;
        let Some(binary) = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.exists())
        else {
            eprintln!("skipped: nats-server is not installed (.ci/install-deps installs it)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = std::env::temp_dir().join(format!("gapless-{name}-{}", std::process::id()));
        let mut child = std::process::Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nats-server starts");
        let stderr = child.stderr.take().expect("its stderr");
        let (ready, is_ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(ready);
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("Server is ready")
                    && let Some(tx) = ready.take()
                {
                    // The test may have given up already.
                    let _ = tx.send(());
                }
            }
        });
        let server = Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            dir,
        };
        is_ready
            .recv_timeout(Duration::from_secs(20))
            .expect("nats-server ready within 20 s");
        Some(server)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Gone already is as good as killed.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn settings(url: &str) -> Settings {
    Settings {
        url: url.to_string(),
        stream: "FEED".into(),
        subject_prefix: "gapless".into(),
        duplicate_window: Duration::from_secs(120),
        max_age: None,
        max_pending: 4096,
        instance: "test".into(),
        creds: None,
        tls_ca: None,
        tls_client: None,
    }
}

fn payload_of(session: &str, seq: u64) -> Bytes {
    Bytes::from(format!("{session}:{seq}"))
}

/// Publishes, as the nats sink would: session OLD 1..=500, then session SESS from 300,001
/// to 330,000 (beyond [`MAX_SKIP`] from 0, and longer than [`READ_AHEAD`]), with state
/// events among them and another subject's messages in between.
async fn publish(url: &str) {
    let client = async_nats::connect(url).await.expect("a connection");
    let js = jetstream::new(client);
    js.get_or_create_stream(jetstream::stream::Config {
        name: "FEED".into(),
        subjects: vec!["gapless.>".into()],
        ..Default::default()
    })
    .await
    .expect("the stream");
    let mut acks = Vec::new();
    let send = |subject: &'static str, h: HeaderMap, payload: Bytes| {
        let js = js.clone();
        async move {
            js.publish_with_headers(subject, h, payload)
                .await
                .expect("a publish")
        }
    };
    for seq in 1..=500 {
        acks.push(
            send(
                "gapless.v.c",
                headers("message", "OLD", Some(seq)),
                payload_of("OLD", seq),
            )
            .await,
        );
    }
    acks.push(send("gapless.v.c", headers("epoch", "SESS", None), Bytes::new()).await);
    for seq in 300_001..=330_000 {
        acks.push(
            send(
                "gapless.v.c",
                headers("message", "SESS", Some(seq)),
                payload_of("SESS", seq),
            )
            .await,
        );
        if seq % 700 == 0 {
            acks.push(send("gapless.v.c", headers("state", "SESS", None), Bytes::new()).await);
            acks.push(
                send(
                    "gapless.v.other",
                    headers("message", "X", Some(seq)),
                    Bytes::new(),
                )
                .await,
            );
        }
    }
    for ack in acks {
        ack.await.expect("stored");
    }
}

/// Sends (session, first, count) and returns the answer's (first, messages), or `None`
/// when none comes within two seconds.
fn ask(
    socket: &UdpSocket,
    to: SocketAddr,
    session: &str,
    first: u64,
    count: u16,
) -> Option<(u64, Vec<Vec<u8>>)> {
    let mut name = [b' '; 10];
    name[..session.len()].copy_from_slice(session.as_bytes());
    let request = Request {
        session: Session(name),
        sequence: first,
        count,
    };
    socket.send_to(&request.to_bytes(), to).expect("sent");
    receive(socket, Session(name))
}

/// The next answer of `session` on `socket`: its (first, messages), or `None` when none
/// comes within the socket's read timeout.
fn receive(socket: &UdpSocket, session: Session) -> Option<(u64, Vec<Vec<u8>>)> {
    let mut buf = [0u8; 4096];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    let packet = moldudp64::Packet::decode(&buf[..n]).expect("a valid answer");
    assert_eq!(packet.session(), session);
    Some((
        packet.sequence(),
        packet.messages().map(<[u8]>::to_vec).collect(),
    ))
}

/// Publishes session SESS's messages `seqs` as the nats sink would.
async fn publish_more(url: &str, seqs: std::ops::RangeInclusive<u64>) {
    let client = async_nats::connect(url).await.expect("a connection");
    let js = jetstream::new(client);
    for seq in seqs {
        js.publish_with_headers(
            "gapless.v.c",
            headers("message", "SESS", Some(seq)),
            payload_of("SESS", seq),
        )
        .await
        .expect("a publish")
        .await
        .expect("stored");
    }
}

#[test]
fn a_real_stream_is_read_back_across_sessions_and_far_sequences() {
    let Some(server) = Server::start("js-recovery-unit") else {
        return;
    };
    run(async {
        tokio::time::timeout(Duration::from_secs(60), publish(&server.url))
            .await
            .expect("published within 60 s");
    });
    let channel = JetStreamChannel::bind(&settings(&server.url), "v", "c", Wire::MoldUdp64)
        .expect("a socket");
    let to = channel.local_addr().expect("its address");
    let source = start(&settings(&server.url), vec![channel]).expect("started");
    let client = bind_local().expect("a client socket");
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("a timeout");

    // The session's first messages, past MAX_SKIP from nothing.
    let (first, got) = ask(&client, to, "SESS", 300_001, 1000).expect("an answer");
    assert_eq!(first, 300_001);
    assert!(got.len() > 50, "{} messages in one answer", got.len());
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m[..], payload_of("SESS", 300_001 + i as u64)[..]);
    }
    // Further on (read on to), past state events and another subject's messages.
    let (first, got) = ask(&client, to, "SESS", 302_990, 5).expect("an answer");
    assert_eq!((first, got.len()), (302_990, 5));
    assert_eq!(got[4][..], payload_of("SESS", 302_994)[..]);
    // Far on, to the session's last (searched for), and back to its start.
    let (first, got) = ask(&client, to, "SESS", 329_990, 100).expect("an answer");
    assert_eq!(first, 329_990);
    assert_eq!(got.len(), 11, "329,990..=330,000");
    assert_eq!(got[10][..], payload_of("SESS", 330_000)[..]);
    let (first, got) = ask(&client, to, "SESS", 300_002, 3).expect("an answer");
    assert_eq!((first, got.len()), (300_002, 3));
    // Past the end: not published yet. The answer at once is "not yet", a heartbeat with
    // the next sequence the stream has got to; the request waits for the reader.
    assert_eq!(
        ask(&client, to, "SESS", 330_001, 5),
        Some((330_001, Vec::new()))
    );
    // The peer publishes it within the request's deadline: the answer follows unasked.
    run(async {
        tokio::time::timeout(
            Duration::from_secs(5),
            publish_more(&server.url, 330_001..=330_003),
        )
        .await
        .expect("published within 5 s");
    });
    let mut sess = [b' '; 10];
    sess[..4].copy_from_slice(b"SESS");
    let (first, got) = receive(&client, Session(sess)).expect("the answer");
    assert_eq!((first, got.len()), (330_001, 3));
    assert_eq!(got[2][..], payload_of("SESS", 330_003)[..]);
    // Not held: a session that is not the subject's latest.
    assert_eq!(ask(&client, to, "OLD", 10, 5), None);
    let counters = Arc::clone(source.counters());
    source.stop();
    assert_eq!(counters.requests(), 6);
    assert_eq!(counters.answers(), 5);
    assert_eq!(counters.not_yet(), 1);
    assert_eq!(counters.unanswered(), 1);
    assert_eq!(counters.failures(), 0);
}
