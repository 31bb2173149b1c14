//! JetStream as a re-request server: what a peer instance published into a nats sink's
//! stream, read back for a channel that misses it.
//!
//! Two instances on one feed publish into one JetStream stream (the active-active pair of
//! the nats sink). When one of them misses messages the other stored (it was down, or its
//! own copies were lost and the venue's re-request server no longer holds them), the
//! channel can ask JetStream for them like any other re-request server: the `rerequest`
//! entry `"jetstream"` gives the channel a loopback UDP socket of this module's as one more
//! server in its list, in the order written. The rx thread sends it the same 20-byte
//! request it sends a venue's server and takes the answer like any other answer; nothing
//! here runs on the rx thread, and nothing on it waits for JetStream.
//!
//! A request (session, first sequence, count) is answered with one datagram of the
//! channel's wire (MoldUDP64 or IEX-TP) holding the messages from `first` on, in order and
//! with no hole, as many as the request asks for and fit [`ANSWER_BYTES`]; the payloads are
//! the bytes JetStream stored, untouched. The messages are those published on the channel's
//! subject (`<prefix>.<venue>.<stream>`) with `Gapless-Kind: message`, no
//! `Gapless-Snapshot`, the request's session as `Gapless-Epoch` and their sequence in
//! `Gapless-Seq`. A request whose first message JetStream does not hold gets no answer, as
//! from a venue server: the channel's timeout and retry budget move it on to its next
//! server or to its gap policy.
//!
//! A request for what the peer has not published yet (the subject's last message is of
//! the request's session and before its first) is another matter: the peer publishes in
//! order, after its own recovery, so a channel that lost a message may ask before the peer
//! stored it. Such a request is answered with a heartbeat of the channel's wire whose
//! sequence is the next one the stream holds (the "not yet" answer) as soon as the reader
//! is at the subject's end (at once when the search found the subject ends before it),
//! and waits for the reader to get to it. The channel keeps its requests from that
//! sequence on waiting, without spending its retry budget, as long as that sequence keeps
//! rising ([`Requester::not_yet`](crate::venue::udp::recovery::Requester::not_yet)).
//!
//! # Reading the stream
//!
//! Messages are read ahead into a cache (at most [`CACHE_BYTES`] of payload, the oldest
//! sequences dropped first) by an ephemeral pull consumer on the channel's subject. Where it
//! starts is found by a binary search over the stream's sequence numbers with
//! `STREAM.MSG.GET` (`next_by_subj`), on the order the nats sink guarantees: a subject's
//! messages of one session are stored in sequence order, and a session's messages come after
//! those of the sessions before it (around a session change the two daemons of a pair may
//! publish both for a while, so the consumer starts [`LOOK_BACK`] stream sequences early).
//! The search runs only when the subject's last message is of the request's session and at
//! or past its first sequence, so a session that is over is not searched for. A request
//! shortly after the consumer's position, or any ahead of it while the consumer serves
//! others (a restart's hole is asked for in many pieces at once), waits for the consumer to
//! read on to it; one further ahead is searched for. Every wait has a deadline
//! ([`FILL_DEADLINE`]), after which the request goes unanswered.
//!
//! Every request, answer, unanswered request and failure is counted
//! ([`RecoveryCounters`], `gapless_jetstream_recovery_*`), and failures and unanswered
//! requests are logged at most every [`LOG_EVERY`](crate::sinks::nats::LOG_EVERY) with how
//! many there were.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, stream::Stream as JsStream};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::config::NatsSink as Settings;
use crate::log::{Throttle, held_note};
use crate::protocol::iex_tp;
use crate::protocol::moldudp64::{self, Request, Session};
use crate::sinks::SinkError;
use crate::sinks::nats::{
    CONNECT_TIMEOUT, EPOCH, KIND, LOG_EVERY, RETRY_MAX, SEQ, SNAPSHOT, connect_options,
    epoch_header, token,
};
use crate::venue::EpochLabel;
use crate::venue::udp::{SessionKey, Wire};

/// The longest answer: what a channel's receive buffer takes whole.
pub const ANSWER_BYTES: usize = 2048;
/// Bytes of messages kept read ahead per channel at most, counting each message's payload
/// and [`ENTRY_BYTES`].
pub const CACHE_BYTES: usize = 32 << 20;
/// What one cached message costs beside its payload (its map entry and handle), counted
/// against [`CACHE_BYTES`].
pub const ENTRY_BYTES: usize = 64;
/// Messages read past a request's first at most, and past a resume cursor before any
/// request comes.
pub const READ_AHEAD: u64 = 16_384;
/// A request further than this past the consumer's position starts a new search.
const MAX_SKIP: u64 = 200_000;
/// Events of other sessions in a row after which a reader's session is taken as over.
const MAX_FOREIGN: u64 = 4096;
/// A reader that delivered nothing for this long, with nothing waiting, is let go: its
/// consumer would soon be deleted by the server.
const STALE: Duration = Duration::from_secs(10);
/// The longest a consumer's deletion is waited for.
const CLOSE_DEADLINE: Duration = Duration::from_millis(500);
/// Stream sequences a consumer starts before where the search found the request's first.
const LOOK_BACK: u64 = 1024;
/// Messages the consumer fetches in one pull.
const BATCH: usize = 4096;
/// The longest a request waits for the reader to get to it once it is waiting, and the
/// bound on the search and the consumer's creation for it: together a request is answered
/// or given up within about twice this.
pub const FILL_DEADLINE: Duration = Duration::from_secs(1);
/// The first pause before connecting again after a failure; it doubles up to [`RETRY_MAX`].
const FIRST_RETRY: Duration = Duration::from_millis(50);
/// A connection that lasted this long was not a failed one: the next is made at once.
const STABLE_SESSION: Duration = Duration::from_secs(10);
/// A consumer that delivers nothing for this long has reached the stream's end for now.
const IDLE_END: Duration = Duration::from_millis(50);
/// How often a waiting channel looks at the stop flag and the connection.
const POLL: Duration = Duration::from_millis(100);
/// Non-message events skipped forward at most when a probe lands on one.
const MAX_EVENT_SKIP: usize = 16;

/// One channel that reads JetStream: its socket (the address its `"jetstream"` entry
/// became) and where its messages are.
#[derive(Debug)]
pub struct JetStreamChannel {
    /// The venue's name, for logs.
    pub venue: String,
    /// The channel's (consumer stream's) name, for logs.
    pub channel: String,
    /// The subject its messages are published on: `<prefix>.<venue>.<stream>` as the nats
    /// sink makes it.
    pub subject: String,
    /// The wire its answers are written in.
    pub wire: Wire,
    /// Bound to a loopback port ([`bind_local`]); requests arrive here.
    pub socket: UdpSocket,
    /// The channel's resume cursor (epoch label, next sequence) after a restart: what
    /// JetStream holds from there on is read before the first request comes, since the
    /// hole the restart left is asked for first.
    pub warm: Option<(String, u64)>,
}

impl JetStreamChannel {
    /// A channel of `venue` whose consumer stream is `stream`, on a new loopback socket,
    /// publishing under `settings`' subject prefix.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub fn bind(
        settings: &Settings,
        venue: &str,
        stream: &str,
        wire: Wire,
    ) -> std::io::Result<Self> {
        Ok(Self {
            venue: venue.to_string(),
            channel: stream.to_string(),
            subject: format!(
                "{}.{}.{}",
                settings.subject_prefix,
                token(venue),
                token(stream)
            ),
            wire,
            socket: bind_local()?,
            warm: None,
        })
    }

    /// The address requests go to.
    ///
    /// # Errors
    ///
    /// When the socket has none.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// A UDP socket on `127.0.0.1` with a port of the kernel's choosing.
///
/// # Errors
///
/// When none can be bound.
pub fn bind_local() -> std::io::Result<UdpSocket> {
    UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
}

/// What a JetStream recovery source did, read by the metrics exporter.
#[derive(Debug, Default)]
pub struct RecoveryCounters {
    requests: AtomicU64,
    answers: AtomicU64,
    messages: AtomicU64,
    unanswered: AtomicU64,
    not_yet: AtomicU64,
    refused: AtomicU64,
    failures: AtomicU64,
    connected: AtomicU64,
}

impl RecoveryCounters {
    /// Re-requests received.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    /// Answers sent.
    pub fn answers(&self) -> u64 {
        self.answers.load(Ordering::Relaxed)
    }
    /// Messages sent in answers.
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }
    /// Requests not answered: JetStream holds no copy of their first message, or it could
    /// not be read in time, the reader was busy elsewhere, a request for another session
    /// came, too many were waiting, or the message is too long for an answer (each logged
    /// with its reason).
    pub fn unanswered(&self) -> u64 {
        self.unanswered.load(Ordering::Relaxed)
    }
    /// Requests answered that the stream does not hold their first message yet (a
    /// heartbeat giving the next sequence it holds): the peer has not published it.
    pub fn not_yet(&self) -> u64 {
        self.not_yet.load(Ordering::Relaxed)
    }
    /// Requests that were not 20-byte re-requests, or asked for no message.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
    /// Connections, searches and reads that failed or ran past their deadline.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
    /// 1 while connected to a NATS server.
    pub fn connected(&self) -> u64 {
        self.connected.load(Ordering::Relaxed)
    }
}

/// A running JetStream recovery source; stops when dropped.
#[derive(Debug)]
pub struct JetStreamRecovery {
    stop: Arc<AtomicBool>,
    counters: Arc<RecoveryCounters>,
    thread: Option<JoinHandle<()>>,
}

impl JetStreamRecovery {
    /// Its counters.
    pub fn counters(&self) -> &Arc<RecoveryCounters> {
        &self.counters
    }

    /// Stops the thread and waits for it: within [`POLL`] when idle, and otherwise once the
    /// operation in progress ends (each has a deadline of at most a few seconds).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            crate::log_error!("jetstream recovery: its thread panicked");
        }
    }
}

impl Drop for JetStreamRecovery {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts answering `channels`' re-requests from the JetStream stream of the nats sink
/// `settings`, on a thread of its own.
///
/// # Errors
///
/// When the thread cannot start.
pub fn start(
    settings: &Settings,
    channels: Vec<JetStreamChannel>,
) -> Result<JetStreamRecovery, SinkError> {
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(RecoveryCounters::default());
    let mut source = Source {
        settings: settings.clone(),
        responders: channels
            .into_iter()
            .map(|channel| Responder::new(channel, Arc::clone(&counters)))
            .collect(),
        counters: Arc::clone(&counters),
        stop: Arc::clone(&stop),
        retry_pause: FIRST_RETRY,
        failure_logged: Throttle::new(LOG_EVERY),
        connect_logged: Throttle::new(LOG_EVERY),
    };
    let thread = thread::Builder::new()
        .name("gapless-js-recovery".into())
        .spawn(move || source.run())?;
    Ok(JetStreamRecovery {
        stop,
        counters,
        thread: Some(thread),
    })
}

/// The thread's state: every channel it answers for, across connections.
struct Source {
    settings: Settings,
    responders: Vec<Responder>,
    counters: Arc<RecoveryCounters>,
    stop: Arc<AtomicBool>,
    retry_pause: Duration,
    failure_logged: Throttle,
    connect_logged: Throttle,
}

impl Source {
    fn run(&mut self) {
        while !self.stop.load(Ordering::Acquire) {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    self.failure(format_args!("no runtime for a connection: {e}"));
                    self.sleep(RETRY_MAX);
                    continue;
                }
            };
            let started = Instant::now();
            let served = runtime.block_on(self.session());
            drop(runtime);
            self.counters.connected.store(0, Ordering::Relaxed);
            // A connection that held for a while is made again at once; one that failed,
            // or dropped soon after it was made (a server that takes connections and
            // closes them), backs off as a failed connect does.
            if served && started.elapsed() >= STABLE_SESSION {
                self.retry_pause = FIRST_RETRY;
            } else {
                let pause = self.retry_pause;
                self.retry_pause = (self.retry_pause * 2).min(RETRY_MAX);
                self.sleep(pause);
            }
        }
    }

    /// Sleeps `d`, waking for the stop flag.
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stop.load(Ordering::Acquire) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            thread::sleep(left.min(POLL));
        }
    }

    fn failure(&mut self, what: std::fmt::Arguments<'_>) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        if let Some(more) = self.failure_logged.admit().map(held_note) {
            crate::log_warn!(
                "jetstream recovery {} ({}): {what}{more}",
                self.settings.stream,
                self.settings.url,
            );
        }
    }

    /// One connection: serves every channel until it drops or the thread stops. False when
    /// no connection could be made, or a channel failed (its socket could not be set up).
    async fn session(&mut self) -> bool {
        let lost = Arc::new(AtomicBool::new(false));
        let options =
            match connect_options(&self.settings, Arc::clone(&lost), "jetstream recovery").await {
                Ok(options) => options,
                Err(e) => {
                    self.failure(format_args!("credentials: {e}"));
                    return false;
                }
            };
        let url = self.settings.url.clone();
        let client =
            match tokio::time::timeout(CONNECT_TIMEOUT, options.connect(url.as_str())).await {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => {
                    self.failure(format_args!("connect failed: {e}"));
                    return false;
                }
                Err(_) => {
                    self.failure(format_args!("connect timed out after {CONNECT_TIMEOUT:?}"));
                    return false;
                }
            };
        let context = jetstream::new(client);
        let stream = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            context.get_stream(self.settings.stream.as_str()),
        )
        .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                let name = self.settings.stream.clone();
                self.failure(format_args!("stream {name} could not be read: {e}"));
                return false;
            }
            Err(_) => {
                let name = self.settings.stream.clone();
                self.failure(format_args!(
                    "no answer about stream {name} within {CONNECT_TIMEOUT:?}"
                ));
                return false;
            }
        };
        self.counters.connected.store(1, Ordering::Relaxed);
        if let Some(more) = self.connect_logged.admit().map(held_note) {
            crate::log_info!(
                "jetstream recovery: connected to {}, answering re-requests of {} channels \
                 from stream {}{more}",
                self.settings.url,
                self.responders.len(),
                self.settings.stream,
            );
        }
        let stop = &*self.stop;
        let lost = &*lost;
        let serving = self
            .responders
            .iter_mut()
            .map(|r| r.serve(&stream, stop, lost));
        let failures: Vec<Option<String>> = futures_util::future::join_all(serving).await;
        let mut failed = false;
        for why in failures.into_iter().flatten() {
            failed = true;
            self.failure(format_args!("{why}"));
        }
        // A channel that failed on its own (its socket) is served again after a pause.
        !failed
    }
}

/// Messages of one session read ahead, by sequence.
#[derive(Debug, Default)]
struct Cache {
    /// The session's `Gapless-Epoch` value.
    label: String,
    messages: BTreeMap<u64, Bytes>,
    bytes: usize,
    /// The highest sequence let go to keep the bound, if any.
    evicted_through: Option<u64>,
}

impl Cache {
    /// Empties the cache for another session.
    fn switch(&mut self, label: &str) {
        if self.label != label {
            label.clone_into(&mut self.label);
            self.messages.clear();
            self.bytes = 0;
            self.evicted_through = None;
        }
    }

    fn insert(&mut self, seq: u64, payload: Bytes) {
        let len = payload.len() + ENTRY_BYTES;
        if let Some(old) = self.messages.insert(seq, payload) {
            self.bytes -= old.len() + ENTRY_BYTES;
        }
        self.bytes += len;
        while self.bytes > CACHE_BYTES {
            let Some((seq, old)) = self.messages.pop_first() else {
                break;
            };
            self.bytes -= old.len() + ENTRY_BYTES;
            self.evicted_through = Some(self.evicted_through.map_or(seq, |e| e.max(seq)));
        }
    }
}

/// The `Gapless-Epoch` value the nats sink gives the epoch `label`, as it reads back:
/// header values lose their surrounding spaces on the wire (a MoldUDP64 session is padded
/// with spaces to ten characters).
fn epoch_key(label: &str) -> String {
    epoch_header(label).trim().to_string()
}

/// One message as the nats sink stored it: `None` for any other event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored<'a> {
    /// A message of the session `epoch` with its sequence.
    Message { epoch: &'a str, seq: u64 },
    /// Any other event (state, gap, epoch, snapshot, overrun), or a snapshot's message.
    Other { epoch: &'a str },
}

fn stored(headers: Option<&HeaderMap>) -> Stored<'_> {
    let get = |name| {
        headers
            .and_then(|h| h.get(name))
            .map(|v: &async_nats::HeaderValue| v.as_str().trim())
    };
    let epoch = get(EPOCH).unwrap_or("");
    let message = get(KIND) == Some("message") && get(SNAPSHOT).is_none();
    match get(SEQ).and_then(|s| s.parse().ok()) {
        Some(seq) if message => Stored::Message { epoch, seq },
        _ => Stored::Other { epoch },
    }
}

/// An ephemeral consumer reading the channel's subject forward.
struct Reader {
    label: String,
    /// The consumer's name on the server, to delete it when the reader goes.
    name: String,
    messages: consumer::pull::Stream,
    /// The lowest sequence of the session read, once one was.
    first_read: Option<u64>,
    /// The highest sequence of the session read so far.
    last: u64,
    /// Read on until `last` reaches this (what requests asked for, or the read-ahead).
    target: u64,
    /// When it last delivered anything, or was opened.
    last_read_at: Instant,
    /// Events of other sessions read since the last message of this one.
    foreign: u64,
    /// It read more than [`MAX_FOREIGN`] events of other sessions in a row: this one is
    /// over on the subject.
    ended: bool,
    /// It was opened right after the subject's last message, and has been reading since.
    at_tail: bool,
    /// Since when it has been reading (it has something to read on to); `None` while it
    /// is not, when the subject may grow unseen.
    reading_since: Option<Instant>,
}

/// Where a request stands from a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Ahead, within [`READ_AHEAD`]: reading on is quicker than a search.
    Near,
    /// Ahead, within [`MAX_SKIP`].
    Far,
    /// Already read past (or of another session, or the reader's session is over).
    Behind,
    /// No reader.
    None,
}

impl Reader {
    /// Nothing came for [`IDLE_END`]: the stream's end, for now.
    fn idle(&self) -> bool {
        self.last_read_at.elapsed() >= IDLE_END
    }

    /// It is at the subject's end: opened right after its last message, or reading for
    /// [`IDLE_END`] and given nothing for as long. What lies past `last` is not stored
    /// yet.
    fn at_end(&self) -> bool {
        self.at_tail || (self.reading_since.is_some_and(|t| t.elapsed() >= IDLE_END) && self.idle())
    }

    /// Notes whether it is reading now.
    fn set_reading(&mut self, reading: bool) {
        if reading {
            self.reading_since.get_or_insert_with(Instant::now);
        } else {
            self.reading_since = None;
            self.at_tail = false;
        }
    }

    /// True when the reader has read through `first` of the session `label`: JetStream
    /// holds it only if the reader stored it.
    fn covers(&self, label: &str, first: u64) -> bool {
        self.label == label && self.first_read.is_some_and(|f| f <= first) && first <= self.last
    }

    /// Where `first` of the session `label` stands from the reader.
    fn reach(&self, label: &str, first: u64) -> Reach {
        if self.label != label || self.ended || self.last >= first {
            return Reach::Behind;
        }
        match first - self.last {
            d if d <= READ_AHEAD => Reach::Near,
            d if d <= MAX_SKIP => Reach::Far,
            _ => Reach::Behind,
        }
    }
}

/// A request waiting for the reader to reach it.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    session: SessionKey,
    first: u64,
    count: u16,
    from: SocketAddr,
    until: tokio::time::Instant,
    /// It was answered "not yet" since it was last asked.
    told: bool,
}

/// Requests waiting at most per channel; beyond them the oldest goes unanswered.
const MAX_WAITING: usize = 256;

/// One channel's answering side.
struct Responder {
    channel: JetStreamChannel,
    cache: Cache,
    answer: Vec<u8>,
    counters: Arc<RecoveryCounters>,
    unanswered_logged: Throttle,
}

/// What one turn of a channel's loop brought.
enum Turn {
    Request(usize, SocketAddr),
    Read(Box<jetstream::Message>),
    Idle,
    /// Reading the consumer failed.
    Failed(String),
    /// Receiving on the channel's socket failed.
    SocketFailed(String),
}

impl Responder {
    fn new(channel: JetStreamChannel, counters: Arc<RecoveryCounters>) -> Self {
        Self {
            channel,
            cache: Cache::default(),
            answer: vec![0; ANSWER_BYTES],
            counters,
            unanswered_logged: Throttle::new(LOG_EVERY),
        }
    }

    /// Answers the channel's requests until the thread stops or the connection drops;
    /// `Some` names a failure that ended it.
    ///
    /// One loop takes requests and reads the consumer as they come: a request whose first
    /// message the cache holds is answered at once, one ahead of the reader waits (at most
    /// [`FILL_DEADLINE`]) until the reader gets there, and the others start a search.
    async fn serve(
        &mut self,
        stream: &JsStream,
        stop: &AtomicBool,
        lost: &AtomicBool,
    ) -> Option<String> {
        use futures_util::future::{Either, select};
        let socket = match self
            .channel
            .socket
            .try_clone()
            .and_then(|s| {
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .and_then(tokio::net::UdpSocket::from_std)
        {
            Ok(socket) => socket,
            Err(e) => return Some(format!("channel {}: socket: {e}", self.channel.channel)),
        };
        let mut reader: Option<Reader> = None;
        let mut waiting: Vec<Waiting> = Vec::new();
        if let Some((label, next)) = self.channel.warm.take() {
            let label = epoch_key(&label);
            self.cache.switch(&label);
            reader = self
                .open(stream, &label, next, next.saturating_add(READ_AHEAD))
                .await;
        }
        let mut buf = [0u8; 64];
        loop {
            if stop.load(Ordering::Acquire) || lost.load(Ordering::Acquire) {
                return None;
            }
            let reading = reader
                .as_ref()
                .is_some_and(|r| !r.ended && (r.last < r.target || !waiting.is_empty()));
            if let Some(r) = reader.as_mut() {
                r.set_reading(reading);
            }
            let turn = match (reading, reader.as_mut()) {
                (true, Some(r)) => {
                    let recv = std::pin::pin!(socket.recv_from(&mut buf));
                    let next = std::pin::pin!(tokio::time::timeout(IDLE_END, r.messages.next()));
                    match select(recv, next).await {
                        Either::Left((Ok((n, from)), _)) => Turn::Request(n, from),
                        Either::Left((Err(e), _)) => Turn::SocketFailed(format!("receive: {e}")),
                        Either::Right((Err(_), _)) => Turn::Idle,
                        Either::Right((Ok(Some(Ok(m))), _)) => Turn::Read(Box::new(m)),
                        Either::Right((Ok(Some(Err(e))), _)) => {
                            Turn::Failed(format!("reading the consumer: {e}"))
                        }
                        Either::Right((Ok(None), _)) => Turn::Failed("the consumer ended".into()),
                    }
                }
                _ => match tokio::time::timeout(POLL, socket.recv_from(&mut buf)).await {
                    Err(_) => Turn::Idle,
                    Ok(Ok((n, from))) => Turn::Request(n, from),
                    Ok(Err(e)) => Turn::SocketFailed(format!("receive: {e}")),
                },
            };
            match turn {
                Turn::Request(n, from) => {
                    self.request(
                        stream,
                        &mut reader,
                        &mut waiting,
                        buf.get(..n),
                        from,
                        &socket,
                    )
                    .await;
                }
                Turn::Read(message) => {
                    if let Some(r) = reader.as_mut() {
                        r.last_read_at = Instant::now();
                        match stored(message.headers.as_ref()) {
                            Stored::Message { epoch, seq } if epoch == r.label => {
                                r.last = r.last.max(seq);
                                r.first_read = Some(r.first_read.map_or(seq, |f| f.min(seq)));
                                r.foreign = 0;
                                // A copy: the client's payload shares its read buffer with
                                // other messages, which the cache's bound would not see.
                                self.cache
                                    .insert(seq, Bytes::copy_from_slice(&message.payload));
                            }
                            Stored::Message { epoch, .. } | Stored::Other { epoch } => {
                                // Another session's. Around a session change the two
                                // daemons of a pair publish both sessions for a while, so
                                // a few are passed over; a long run of them means this
                                // session is over on the subject.
                                if epoch != r.label && epoch != "-" && !epoch.is_empty() {
                                    r.foreign += 1;
                                }
                                if r.foreign > MAX_FOREIGN && !r.ended {
                                    crate::log_debug!(
                                        "jetstream recovery {}/{}: session {} ends at {} on \
                                         the subject (session {epoch} follows)",
                                        self.channel.venue,
                                        self.channel.channel,
                                        r.label,
                                        r.last
                                    );
                                    r.ended = true;
                                }
                            }
                        }
                    }
                }
                Turn::Idle => {
                    // A reader untouched for long loses its consumer on the server: let
                    // it go first, and search again when asked.
                    if reader
                        .as_ref()
                        .is_some_and(|r| waiting.is_empty() && r.last_read_at.elapsed() >= STALE)
                    {
                        self.close(stream, reader.take()).await;
                    }
                }
                Turn::Failed(why) => {
                    let first = waiting.first().map_or(0, |w| w.first);
                    self.read_failed(first, &why);
                    self.close(stream, reader.take()).await;
                }
                Turn::SocketFailed(why) => {
                    // The socket is the channel's own: counted, logged, and read again
                    // after a pause, the other channels unaffected.
                    self.failed(0, &why);
                    tokio::time::sleep(POLL).await;
                }
            }
            self.answer_waiting(&mut waiting, reader.as_ref(), &socket)
                .await;
        }
    }

    /// Takes one request: answers it from the cache, or queues it for the reader (opening
    /// one where none reaches it), or counts it unanswered.
    async fn request(
        &mut self,
        stream: &JsStream,
        reader: &mut Option<Reader>,
        waiting: &mut Vec<Waiting>,
        bytes: Option<&[u8]>,
        from: SocketAddr,
        socket: &tokio::net::UdpSocket,
    ) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let request = match bytes.map(Request::decode) {
            Some(Ok(r)) if r.count > 0 => r,
            _ => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let session = SessionKey(*request.session.as_bytes());
        let label = epoch_key(EpochLabel::new(&session.display(self.channel.wire)).as_str());
        if label != self.cache.label {
            // Another session: what waited for the one before is not answered.
            for w in std::mem::take(waiting) {
                self.unanswered(w.first, Some("a request for another session came"));
            }
            self.cache.switch(&label);
            self.close(stream, reader.take()).await;
        }
        let first = request.sequence;
        let wanted = first.saturating_add(u64::from(request.count) - 1);
        if self.cache.messages.contains_key(&first) {
            self.send(session, first, request.count, from, socket).await;
            return;
        }
        // Read through already and not stored: JetStream does not hold it.
        if reader.as_ref().is_some_and(|r| r.covers(&label, first))
            && self.cache.evicted_through.is_none_or(|e| first > e)
        {
            self.unanswered(first, None);
            return;
        }
        // Read on to it when it is near, or when the reader is busy with requests before
        // it (a restart's hole is asked for in many pieces at once: moving the reader to
        // the furthest would leave the nearer ones behind it); otherwise a search is
        // quicker than reading through what lies between.
        let busy = !waiting.is_empty();
        let reach = reader
            .as_ref()
            .map_or(Reach::None, |r| r.reach(&label, first));
        let read_on = match reach {
            Reach::Near => true,
            Reach::Far => busy,
            Reach::Behind | Reach::None => false,
        };
        if !read_on {
            if busy && reach == Reach::Behind {
                // Out of the reader's reach (passed, or too far on) while it serves
                // others: asked again later, it is searched for once the reader is free.
                self.unanswered(first, Some("the reader is busy elsewhere"));
                return;
            }
            if let Some(r) = reader.as_ref() {
                crate::log_debug!(
                    "jetstream recovery {}/{}: a request from {first} is out of the reader's \
                     reach (at {}{}): searching again",
                    self.channel.venue,
                    self.channel.channel,
                    r.last,
                    if r.ended { ", its session over" } else { "" }
                );
            }
            self.close(stream, reader.take()).await;
            *reader = self.open(stream, &label, first, wanted).await;
        }
        let Some(r) = reader.as_mut() else {
            self.unanswered(first, None);
            return;
        };
        r.target = r.target.max(wanted.min(first.saturating_add(READ_AHEAD)));
        // Asked again: it is told "not yet" again (by `answer_waiting`, which runs next)
        // while it waits.
        if let Some(again) = waiting
            .iter_mut()
            .find(|w| w.first == first && w.from == from)
        {
            again.told = false;
        } else {
            if waiting.len() >= MAX_WAITING {
                let dropped = waiting.remove(0);
                self.unanswered(
                    dropped.first,
                    Some("too many requests waiting for the reader"),
                );
            }
            waiting.push(Waiting {
                session,
                first,
                count: request.count,
                from,
                until: tokio::time::Instant::now() + FILL_DEADLINE,
                told: false,
            });
        }
    }

    /// Tells `to` that the stream holds session `session`'s messages up to before `head`
    /// only: a heartbeat of the channel's wire with `head` as its sequence.
    async fn not_yet(
        &mut self,
        session: SessionKey,
        head: u64,
        to: SocketAddr,
        socket: &tokio::net::UdpSocket,
    ) {
        let mut out = [0u8; 64];
        let Some(bytes) = self.not_yet_bytes(session, head, &mut out) else {
            return;
        };
        match socket.send_to(bytes, to).await {
            Ok(_) => {
                self.counters.not_yet.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.failed(head, &e.to_string()),
        }
    }

    /// Writes the "not yet" answer of `session` with `head` into `out`: a heartbeat of the
    /// channel's wire.
    fn not_yet_bytes<'o>(
        &self,
        session: SessionKey,
        head: u64,
        out: &'o mut [u8; 64],
    ) -> Option<&'o [u8]> {
        let written = match self.channel.wire {
            Wire::MoldUdp64 => moldudp64::encode_heartbeat(out, Session(session.0), head),
            Wire::IexTp => iex_tp::encode_heartbeat(out, iex_header(session, head)),
        };
        written.ok().and_then(|len| out.get(..len))
    }

    /// Answers the waiting requests the reader has got far enough for (or that it will not
    /// get further for), drops those past their deadline, and tells the others "not yet"
    /// once the reader is at the subject's end short of them.
    async fn answer_waiting(
        &mut self,
        waiting: &mut Vec<Waiting>,
        reader: Option<&Reader>,
        socket: &tokio::net::UdpSocket,
    ) {
        if waiting.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        let mut i = 0;
        while let Some(w) = waiting.get(i).copied() {
            // Enough read for a full answer, or no more to come for now.
            let done = reader.is_none_or(|r| {
                r.idle()
                    || r.ended
                    || r.last >= w.first.saturating_add(u64::from(w.count.min(64)) - 1)
            });
            let held = self.cache.messages.contains_key(&w.first);
            if held && (done || now >= w.until) {
                waiting.swap_remove(i);
                self.send(w.session, w.first, w.count, w.from, socket).await;
            } else if done && reader.is_none_or(|r| r.ended || r.last >= w.first) || now >= w.until
            {
                // Read past and not held, or waited its whole deadline.
                waiting.swap_remove(i);
                self.unanswered(w.first, None);
            } else {
                // The reader got to the subject's end short of it: not published yet.
                if let Some(r) =
                    reader.filter(|r| r.at_end() && !r.ended && r.last < w.first && !w.told)
                {
                    if let Some(told) = waiting.get_mut(i) {
                        told.told = true;
                    }
                    self.not_yet(w.session, r.last.saturating_add(1), w.from, socket)
                        .await;
                }
                i += 1;
            }
        }
    }

    /// Sends the answer to (`session`, `first`, `count`) from the cache.
    async fn send(
        &mut self,
        session: SessionKey,
        first: u64,
        count: u16,
        to: SocketAddr,
        socket: &tokio::net::UdpSocket,
    ) {
        let Some((len, messages)) = self.build(session, first, count) else {
            // Held, but longer than an answer takes.
            self.unanswered(first, Some("the message does not fit an answer"));
            return;
        };
        let Some(bytes) = self.answer.get(..len) else {
            return;
        };
        match socket.send_to(bytes, to).await {
            Ok(_) => {
                self.counters.answers.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .messages
                    .fetch_add(messages, Ordering::Relaxed);
            }
            Err(e) => self.failed(first, &e.to_string()),
        }
    }

    /// Counts a request from `first` not answered, and logs it with `why` (by default,
    /// that JetStream holds no copy).
    fn unanswered(&mut self, first: u64, why: Option<&str>) {
        self.counters.unanswered.fetch_add(1, Ordering::Relaxed);
        self.log_not_answered(first, why.unwrap_or("JetStream holds no copy of it"));
    }

    /// Counts a failure while a request from `first` was served, and logs it.
    fn failed(&mut self, first: u64, why: &str) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        self.log_not_answered(first, why);
    }

    /// [`Responder::failed`] for a search or read of JetStream.
    fn read_failed(&mut self, first: u64, why: &str) {
        self.failed(first, &format!("reading JetStream failed: {why}"));
    }

    /// Logs, rate limited, that a request from `first` of the cache's session is not
    /// answered, and why.
    fn log_not_answered(&mut self, first: u64, why: &str) {
        if let Some(more) = self.unanswered_logged.admit().map(held_note) {
            crate::log_info!(
                "jetstream recovery {}/{}: a re-request for session {} from {first} is not \
                 answered: {why}{more}",
                self.channel.venue,
                self.channel.channel,
                self.cache.label,
            );
        }
    }

    /// Searches for the session `label`'s messages from `first` on and opens a consumer
    /// there, reading on to `target`; `None` (counted and logged where it failed) when
    /// JetStream holds none or the search or the consumer failed, within
    /// [`FILL_DEADLINE`].
    async fn open(
        &mut self,
        stream: &JsStream,
        label: &str,
        first: u64,
        target: u64,
    ) -> Option<Reader> {
        let deadline = tokio::time::Instant::now() + FILL_DEADLINE;
        let searched = tokio::time::timeout_at(
            deadline,
            locate(stream, &self.channel.subject, label, first),
        )
        .await;
        // Where the consumer starts, and the last message before it. A little before what
        // the search found: around a session change the two daemons of a pair publish both
        // sessions for a while, and the search assumes they do not. Right after the
        // subject's last message when the peer has not published `first` yet.
        let (start, last, at_tail) = match searched {
            Ok(Ok(Located::At(start))) => (
                start.saturating_sub(LOOK_BACK).max(1),
                first.saturating_sub(1),
                false,
            ),
            Ok(Ok(Located::Ahead { last_at, last })) => (last_at.saturating_add(1), last, true),
            Ok(Ok(Located::Nothing)) => {
                crate::log_debug!(
                    "jetstream recovery {}/{}: {} holds nothing of session {label} from {first}",
                    self.channel.venue,
                    self.channel.channel,
                    self.channel.subject
                );
                return None;
            }
            Ok(Err(why)) => {
                self.read_failed(first, &why);
                return None;
            }
            Err(_) => {
                self.read_failed(first, "the search ran past its deadline");
                return None;
            }
        };
        crate::log_debug!(
            "jetstream recovery {}/{}: session {label} from {first} is read from stream \
             sequence {start} of {}",
            self.channel.venue,
            self.channel.channel,
            self.channel.subject
        );
        let config = consumer::pull::Config {
            filter_subject: self.channel.subject.clone(),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ack_policy: consumer::AckPolicy::None,
            // Deleted when the reader goes; this is for a daemon that dies first.
            inactive_threshold: Duration::from_secs(30),
            memory_storage: true,
            ..Default::default()
        };
        let opened = tokio::time::timeout_at(deadline, async {
            let consumer = stream
                .create_consumer(config)
                .await
                .map_err(|e| format!("no consumer: {e}"))?;
            let name = consumer.cached_info().name.clone();
            let messages = consumer
                .stream()
                .max_messages_per_batch(BATCH)
                .messages()
                .await
                .map_err(|e| format!("the consumer delivers nothing: {e}"))?;
            Ok::<_, String>((name, messages))
        })
        .await;
        match opened {
            Ok(Ok((name, messages))) => Some(Reader {
                label: label.to_string(),
                name,
                messages,
                first_read: None,
                last,
                target,
                last_read_at: Instant::now(),
                foreign: 0,
                ended: false,
                at_tail,
                reading_since: None,
            }),
            Ok(Err(why)) => {
                self.read_failed(first, &why);
                None
            }
            Err(_) => {
                self.read_failed(first, "opening a consumer ran past its deadline");
                None
            }
        }
    }

    /// Lets a reader go, deleting its consumer on the server (within [`CLOSE_DEADLINE`];
    /// one left behind goes by itself after its inactivity threshold).
    async fn close(&mut self, stream: &JsStream, reader: Option<Reader>) {
        let Some(reader) = reader else {
            return;
        };
        drop(reader.messages);
        let deleted =
            tokio::time::timeout(CLOSE_DEADLINE, stream.delete_consumer(&reader.name)).await;
        if !matches!(deleted, Ok(Ok(_))) {
            crate::log_debug!(
                "jetstream recovery {}/{}: consumer {} not deleted; the server lets it go \
                 after 30 s",
                self.channel.venue,
                self.channel.channel,
                reader.name
            );
        }
    }

    /// Writes the answer to (`session`, `first`, `count`) from the cache: the length and the
    /// messages in it, `None` when the cache does not hold `first`.
    fn build(&mut self, session: SessionKey, first: u64, count: u16) -> Option<(usize, u64)> {
        let messages = self.cache.messages.range(first..);
        let mut expected = first;
        let mut taken = 0u16;
        match self.channel.wire {
            Wire::MoldUdp64 => {
                let mut writer =
                    moldudp64::PacketWriter::new(&mut self.answer, Session(session.0), first)
                        .ok()?;
                for (&seq, payload) in messages {
                    if seq != expected
                        || taken >= count
                        || writer.remaining() < payload.len() + moldudp64::BLOCK_HEADER_LEN
                        || writer.push(payload).is_err()
                    {
                        break;
                    }
                    taken += 1;
                    expected = expected.saturating_add(1);
                }
                (taken > 0).then(|| (writer.finish(), u64::from(taken)))
            }
            Wire::IexTp => {
                let header = iex_header(session, first);
                let mut writer = iex_tp::PacketWriter::new(&mut self.answer, header).ok()?;
                for (&seq, payload) in messages {
                    if seq != expected
                        || taken >= count
                        || writer.remaining() < payload.len() + iex_tp::BLOCK_HEADER_LEN
                        || writer.push(payload).is_err()
                    {
                        break;
                    }
                    taken += 1;
                    expected = expected.saturating_add(1);
                }
                (taken > 0).then(|| (writer.finish(), u64::from(taken)))
            }
        }
    }
}

/// The IEX-TP header of an answer of `session` from `sequence`, sent now.
fn iex_header(session: SessionKey, sequence: u64) -> iex_tp::Header {
    iex_tp::Header {
        session_id: u32::from_le_bytes([session.0[0], session.0[1], session.0[2], session.0[3]]),
        sequence,
        send_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
        ..iex_tp::Header::default()
    }
}

/// What [`locate`] reads: the subject's last stored message, and the first one at or
/// after a stream sequence. Apart from JetStream so that the search can be tested.
pub(crate) trait Probe {
    /// The subject's last message: its stream sequence and headers; `None` when the
    /// subject has none.
    async fn last(&self, subject: &str) -> Result<Option<(u64, HeaderMap)>, String>;
    /// The subject's first message at or after stream sequence `from`; `None` past the end.
    async fn next(&self, subject: &str, from: u64) -> Result<Option<(u64, HeaderMap)>, String>;
}

impl Probe for JsStream {
    async fn last(&self, subject: &str) -> Result<Option<(u64, HeaderMap)>, String> {
        use async_nats::jetstream::stream::LastRawMessageErrorKind as K;
        match self.get_last_raw_message_by_subject(subject).await {
            Ok(m) => Ok(Some((m.sequence, m.headers))),
            Err(e) if matches!(e.kind(), K::NoMessageFound) => Ok(None),
            Err(e) => Err(format!("the subject's last message: {e}")),
        }
    }

    async fn next(&self, subject: &str, from: u64) -> Result<Option<(u64, HeaderMap)>, String> {
        use async_nats::jetstream::stream::LastRawMessageErrorKind as K;
        match self.get_first_raw_message_by_subject(subject, from).await {
            Ok(m) => Ok(Some((m.sequence, m.headers))),
            Err(e) if matches!(e.kind(), K::NoMessageFound) => Ok(None),
            Err(e) => Err(format!("a message at or after {from}: {e}")),
        }
    }
}

/// Where [`locate`] found a session's messages from a first sequence on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Located {
    /// Read the subject from this stream sequence.
    At(u64),
    /// Not stored yet: the subject's last message (at stream sequence `last_at`) is of the
    /// session and has the sequence `last`, before the first asked for. What the peer
    /// publishes next comes after `last_at`.
    Ahead {
        /// The stream sequence of the subject's last message.
        last_at: u64,
        /// Its sequence in the session.
        last: u64,
    },
    /// JetStream holds nothing of it: the subject has nothing yet, or its last message is
    /// of another session.
    Nothing,
}

/// Where to read `subject` from for the session `label`'s messages from `first` on: the
/// lowest stream sequence at which the subject's next message is of that session with a
/// sequence at least `first`; or that the subject's last message is of the session and
/// before `first` ([`Located::Ahead`]); or that it holds nothing of the session.
pub(crate) async fn locate(
    probe: &impl Probe,
    subject: &str,
    label: &str,
    first: u64,
) -> Result<Located, String> {
    let Some((last_at, headers)) = probe.last(subject).await? else {
        return Ok(Located::Nothing);
    };
    match stored(Some(&headers)) {
        Stored::Message { epoch, seq } if epoch == label && seq >= first => {}
        Stored::Message { epoch, seq } if epoch == label => {
            return Ok(Located::Ahead { last_at, last: seq });
        }
        Stored::Other { epoch } if epoch == label => {}
        _ => return Ok(Located::Nothing),
    }
    // The predicate at stream sequence `at`: the next message there is of the session and
    // at or past `first` (or there is none). False below the answer, true from it on.
    let mut lo = 1u64;
    let mut hi = last_at.saturating_add(1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let mut at = mid;
        let mut verdict = true;
        for _ in 0..=MAX_EVENT_SKIP {
            match probe.next(subject, at).await? {
                None => break,
                Some((found, headers)) => match stored(Some(&headers)) {
                    Stored::Message { epoch, seq } => {
                        verdict = epoch == label && seq >= first;
                        break;
                    }
                    Stored::Other { epoch } => {
                        if epoch != label && epoch != "-" {
                            verdict = false;
                            break;
                        }
                        at = found.saturating_add(1);
                    }
                },
            }
        }
        if verdict {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Located::At(lo))
}

#[cfg(test)]
mod tests;
