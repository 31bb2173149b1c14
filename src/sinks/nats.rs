//! The NATS JetStream sink: every delivered message and every event, published into one
//! JetStream stream with a message id that lets the server drop copies.
//!
//! A thread of its own drains one [`Consumer`] queue and runs the `async-nats` client on a
//! current-thread tokio runtime, so nothing here ever waits on the rx thread's behalf: when
//! the server is slow or gone, the queue fills and the fan-out writes an
//! [`Event::Overrun`] marker, which this sink publishes like any other event.
//!
//! # Subjects, ids and headers
//!
//! Each consumer stream goes to `<prefix>.<venue>.<stream>`. The `Nats-Msg-Id` of a message
//! is `<venue>.<stream>.<epoch>.<seq>` (a range frame: `<first>-<last>` in place of the
//! sequence; a stream without epochs: `-`), the same in every instance that delivers it, so
//! JetStream keeps the first copy it receives within its duplicate window and acknowledges
//! the others as duplicates. The payload is the message's bytes, untouched. Headers:
//!
//! | header | on | value |
//! | --- | --- | --- |
//! | `Gapless-Kind` | every publish | `message`, `range`, `gap`, `state`, `epoch`, `snapshot-begin`, `snapshot-end`, `overrun` |
//! | `Gapless-Seq` | message | its sequence |
//! | `Gapless-First`, `Gapless-Last` | range | the sequences it covers |
//! | `Gapless-Epoch` | every publish | the stream's epoch label (`-` before one is known) |
//! | `Gapless-Recv-Ns` | message, range | receive time, nanoseconds since the Unix epoch |
//! | `Gapless-State` | every publish | the stream's state as this instance last reported it |
//! | `Gapless-Snapshot` | message | `1` for a message that is part of a snapshot |
//! | `Gapless-From`, `Gapless-To` | gap, overrun | the range lost (overrun: also `Gapless-Events`) |
//! | `Gapless-Next` | snapshot-end | the first sequence after the snapshot |
//! | `Gapless-Instance` | every publish | the `instance` that published it |
//!
//! A gap (`<venue>.<stream>.<epoch>.gap.<from>-<to>`) and an epoch
//! (`<venue>.<stream>.epoch.<epoch>`) are facts about the feed and share ids across
//! instances; states, snapshots and overruns are one instance's own and carry its name and
//! a serial in their id.
//!
//! # Publishing
//!
//! Publishes are pipelined: up to `max_pending` are sent before the oldest is acknowledged,
//! and acknowledgements are taken in order. When one fails or is not acknowledged within
//! [`ACK_TIMEOUT`], or the connection drops, every unacknowledged publish is sent again, in
//! order and with the same ids, on a new connection; the server drops the copies of those it had already stored.
//! The sink makes every connection itself (attempts paced by a pause that doubles up to
//! [`RETRY_MAX`]), each with a client on a runtime of its own that is dropped with the
//! connection: a client left to reconnect by itself would first send what it still
//! buffered, which would put those publishes ahead of the ones the lost connection took with
//! it. At every connection the sink creates the stream if it is missing and warns when an
//! existing one's subjects or duplicate window differ from the configuration.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::Publish, stream};
use async_nats::{HeaderMap, HeaderName, HeaderValue, Subject};
use bytes::Bytes;

use crate::config::NatsSink as Settings;
use crate::daemon::cursor::CursorSet;
use crate::log::{Throttle, held_note};
use crate::metrics::histogram::AtomicHistogram;
use crate::publish::jsonl::StreamNames;
use crate::publish::{Consumer, Event, StreamState};
use crate::sinks::SinkError;

/// Longest wait for a publish's acknowledgement before it is sent again.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest pause between two connection attempts.
pub const RETRY_MAX: Duration = Duration::from_secs(2);
const RETRY_MIN: Duration = Duration::from_millis(50);
/// Longest wait for a connection, and for the stream's creation or check.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest time a stopping sink keeps publishing what is queued and awaiting acknowledgements.
pub const STOP_DEADLINE: Duration = Duration::from_secs(10);
/// Events taken off the queue before acknowledgements are looked at.
const BATCH: usize = 512;
const IDLE_MIN: Duration = Duration::from_micros(100);
const IDLE_MAX: Duration = Duration::from_millis(5);
/// A failure of one kind is logged at most this often.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// Counters of a nats sink, read by the metrics exporter.
#[derive(Debug, Default)]
pub struct NatsCounters {
    published: AtomicU64,
    acked: AtomicU64,
    duplicates: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    overruns: AtomicU64,
    connects: AtomicU64,
    connected: AtomicU64,
    pending: AtomicU64,
    latency: AtomicHistogram,
}

impl NatsCounters {
    /// Publishes sent for the first time.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }
    /// Publishes the server acknowledged (stored, or dropped as a copy).
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }
    /// Acknowledgements that said the server already had the message.
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }
    /// Publishes sent again after a failure or a missing acknowledgement.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
    /// Publishes that failed or were not acknowledged in time.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
    /// Overrun markers published: events the sink's queue lost.
    pub fn overruns(&self) -> u64 {
        self.overruns.load(Ordering::Relaxed)
    }
    /// Connections made to a server (the first and every reconnection).
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }
    /// 1 while connected, else 0.
    pub fn connected(&self) -> u64 {
        self.connected.load(Ordering::Relaxed)
    }
    /// Publishes sent and not yet acknowledged.
    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::Relaxed)
    }
    /// Time from sending a publish to its acknowledgement.
    pub fn latency(&self) -> &AtomicHistogram {
        &self.latency
    }
}

/// A running nats sink; [`NatsSinkHandle::stop`] publishes what is queued first.
#[derive(Debug)]
pub struct NatsSinkHandle {
    stop: Arc<AtomicBool>,
    counters: Arc<NatsCounters>,
    cursors: Arc<CursorSet>,
    thread: Option<JoinHandle<()>>,
}

impl NatsSinkHandle {
    /// The sink's counters.
    pub fn counters(&self) -> &Arc<NatsCounters> {
        &self.counters
    }

    /// Where JetStream's acknowledgements have got to, per stream.
    pub fn cursors(&self) -> &Arc<CursorSet> {
        &self.cursors
    }

    /// Publishes what is queued and waits for its acknowledgements, at most
    /// [`STOP_DEADLINE`]; what is left unacknowledged then is logged.
    ///
    /// # Errors
    ///
    /// [`SinkError::ThreadPanicked`].
    pub fn stop(mut self) -> Result<(), SinkError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), SinkError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.stop.store(true, Ordering::Release);
        thread
            .join()
            .map_err(|_| SinkError::ThreadPanicked("nats sink"))
    }
}

impl Drop for NatsSinkHandle {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            crate::log_error!("nats sink: {e}");
        }
    }
}

/// Starts a nats sink on a thread of its own, draining `input`.
///
/// # Errors
///
/// When the thread cannot start.
pub fn start(
    settings: &Settings,
    input: Consumer,
    names: &StreamNames,
    streams: usize,
) -> Result<NatsSinkHandle, SinkError> {
    let counters = Arc::new(NatsCounters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let cursors = Arc::new(CursorSet::new(streams));
    let mut publisher = Publisher::new(
        settings.clone(),
        input,
        names,
        streams,
        Arc::clone(&counters),
        Arc::clone(&cursors),
        Arc::clone(&stop),
    );
    let thread = thread::Builder::new()
        .name("gapless-nats-sink".into())
        .spawn(move || publisher.run())?;
    Ok(NatsSinkHandle {
        stop,
        counters,
        cursors,
        thread: Some(thread),
    })
}

/// `text` with every character outside a subject token's safe alphabet replaced by `_`.
pub(crate) fn token(text: &str) -> String {
    let t: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if t.is_empty() { "_".to_string() } else { t }
}

/// The fixed part of one consumer stream's ids and subject.
#[derive(Debug, Clone)]
struct StreamInfo {
    /// Cloned into each publish: a reference count, not a copy.
    subject: Subject,
    /// `<venue>.<stream>`.
    id_prefix: String,
    /// The epoch label as a token, `-` before one is known.
    epoch: String,
    /// `<venue>.<stream>.<epoch>.`, what a message's id starts with.
    message_id_base: String,
    /// The epoch label as a header value, shared by every publish of the epoch.
    epoch_header: Arc<str>,
    state: StreamState,
    /// The headers a message and a range share until the epoch or the state changes,
    /// built when first needed: a publish clones them and adds its own few, so most of the
    /// header map is copied, not hashed again.
    templates: [Option<Arc<HeaderMap>>; 2],
}

impl StreamInfo {
    /// The shared headers of a publish of `fields`' kind, for a message or a range.
    fn template(&mut self, fields: Fields, instance: &str) -> Option<Arc<HeaderMap>> {
        let slot = match fields {
            Fields::Message { .. } => 0,
            Fields::Range { .. } => 1,
            _ => return None,
        };
        let template = self.templates.get_mut(slot)?;
        let (epoch, state) = (&*self.epoch_header, self.state);
        Some(Arc::clone(template.get_or_insert_with(|| {
            Arc::new(shared_headers(fields.kind(), epoch, state, instance))
        })))
    }
}

/// The `Gapless-Epoch` header value of an epoch label: printable ASCII and spaces kept,
/// anything else `?`.
pub(crate) fn epoch_header(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// `base` and then `seq`, in one allocation: a message's id, made once a message.
fn message_id(base: &str, seq: u64) -> String {
    use std::fmt::Write as _;
    let mut id = String::with_capacity(base.len() + 20);
    id.push_str(base);
    // Writing to a String cannot fail.
    let _ = write!(id, "{seq}");
    id
}

/// The headers every publish carries: kind, epoch, state and instance.
fn shared_headers(kind: &str, epoch: &str, state: StreamState, instance: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(KIND, kind);
    h.insert(EPOCH, epoch);
    h.insert(STATE, state.as_str());
    h.insert(INSTANCE, instance);
    h
}

/// The options of a connection to `settings`' servers, made and dropped by gapless
/// itself: the client's own reconnection is off (a dropped connection sets `lost`, and the
/// owner connects again on a new client). `who` names the owner in log lines.
pub(crate) async fn connect_options(
    settings: &Settings,
    lost: Arc<AtomicBool>,
    who: &'static str,
) -> std::io::Result<async_nats::ConnectOptions> {
    let url = settings.url.clone();
    let first = AtomicBool::new(true);
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("gapless-{}", settings.instance))
        .connection_timeout(CONNECT_TIMEOUT)
        .request_timeout(Some(ACK_TIMEOUT))
        // The owner reconnects itself, on a new client: the client's own reconnection
        // would first send what it buffered, ahead of the publishes that went missing.
        .max_reconnects(Some(1))
        .reconnect_delay_callback(move |_| {
            // The first call is for the first connection: at once. The next one is for
            // the client's own reconnection, which this runtime does not live to see.
            if first.swap(false, Ordering::Relaxed) {
                Duration::ZERO
            } else {
                Duration::from_secs(3600)
            }
        })
        .event_callback(move |event| {
            let lost = Arc::clone(&lost);
            let url = url.clone();
            async move {
                match event {
                    async_nats::Event::Disconnected => {
                        lost.store(true, Ordering::Release);
                        crate::log_warn!("{who}: disconnected from {url}; connecting again");
                    }
                    async_nats::Event::Connected => {}
                    other => crate::log_warn!("{who} {url}: {other}"),
                }
            }
        });
    if let Some(path) = &settings.creds {
        options = options.credentials_file(path).await?;
    }
    if let Some(ca) = &settings.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some((cert, key)) = &settings.tls_client {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(options)
}

type AckFuture =
    Pin<Box<dyn Future<Output = Result<jetstream::publish::PublishAck, PublishFailure>> + Send>>;

type PublishFailure = jetstream::context::PublishError;

/// What an acknowledged publish tells the stream's resume cursor.
enum Progress {
    None,
    Epoch(u16, String),
    Advance(u16, u64),
}

/// What a publish's headers carry besides its kind, kept as numbers until it is sent.
#[derive(Debug, Clone, Copy)]
enum Fields {
    Message { seq: u64, recv_ns: u64 },
    Snapshot { seq: u64, recv_ns: u64 },
    Range { first: u64, last: u64, recv_ns: u64 },
    Gap { from: u64, to: u64 },
    State,
    Epoch,
    SnapshotBegin,
    SnapshotEnd { next: u64 },
    Overrun { from: u64, to: u64, events: u64 },
}

impl Fields {
    fn kind(self) -> &'static str {
        match self {
            Fields::Message { .. } | Fields::Snapshot { .. } => "message",
            Fields::Range { .. } => "range",
            Fields::Gap { .. } => "gap",
            Fields::State => "state",
            Fields::Epoch => "epoch",
            Fields::SnapshotBegin => "snapshot-begin",
            Fields::SnapshotEnd { .. } => "snapshot-end",
            Fields::Overrun { .. } => "overrun",
        }
    }
}

pub(crate) const KIND: HeaderName = HeaderName::from_static("Gapless-Kind");
pub(crate) const SEQ: HeaderName = HeaderName::from_static("Gapless-Seq");
const FIRST: HeaderName = HeaderName::from_static("Gapless-First");
const LAST: HeaderName = HeaderName::from_static("Gapless-Last");
const RECV_NS: HeaderName = HeaderName::from_static("Gapless-Recv-Ns");
pub(crate) const SNAPSHOT: HeaderName = HeaderName::from_static("Gapless-Snapshot");
const FROM: HeaderName = HeaderName::from_static("Gapless-From");
const TO: HeaderName = HeaderName::from_static("Gapless-To");
const NEXT: HeaderName = HeaderName::from_static("Gapless-Next");
const EVENTS: HeaderName = HeaderName::from_static("Gapless-Events");
pub(crate) const EPOCH: HeaderName = HeaderName::from_static("Gapless-Epoch");
const STATE: HeaderName = HeaderName::from_static("Gapless-State");
const INSTANCE: HeaderName = HeaderName::from_static("Gapless-Instance");

/// One publish until it is acknowledged. Its headers are built when it is sent (again),
/// from these fields: nothing but numbers and shared strings is kept while it waits.
struct Pending {
    progress: Progress,
    subject: Subject,
    id: String,
    fields: Fields,
    /// The stream's epoch label and state when the event was taken off the queue.
    epoch: Arc<str>,
    state: StreamState,
    /// The stream's shared headers then, for a message or a range.
    template: Option<Arc<HeaderMap>>,
    payload: Bytes,
    /// The acknowledgement awaited; `None` when it must be sent (again).
    ack: Option<AckFuture>,
    sent: Instant,
}

/// The sink thread's state. It outlives each connection: a connection, its client and
/// every future of it live in a runtime of their own, dropped when the connection is given
/// up, so nothing the old client still buffered can reach a server after the publishes that
/// are sent again in its place.
struct Publisher {
    settings: Settings,
    input: Consumer,
    streams: Vec<StreamInfo>,
    counters: Arc<NatsCounters>,
    /// Where acknowledgements have got to, per stream: the daemon's resume cursors.
    cursors: Arc<CursorSet>,
    stop: Arc<AtomicBool>,
    pending: VecDeque<Pending>,
    /// Events of this instance's own get ids `<instance>.<started>.<serial>`.
    started_ns: u64,
    serial: u64,
    /// The pause before the next connection attempt; doubles while attempts fail.
    retry_pause: Duration,
    /// Set once the sink is asked to stop: publish what is queued until then.
    stopping: Option<Instant>,
    logged: [Throttle; 4],
}

/// The kinds of failure logged, each rate limited on its own.
#[derive(Debug, Clone, Copy)]
enum Failure {
    Connect = 0,
    Stream = 1,
    Publish = 2,
    Ack = 3,
}

/// How a connection's session ended.
enum Ended {
    /// Everything is published and acknowledged, or the stop deadline passed.
    Done,
    /// The connection failed or was given up: connect again and send what is unacknowledged.
    Reset,
}

/// One connection: its client and the JetStream context over it.
struct Session {
    client: async_nats::Client,
    context: jetstream::Context,
    /// Set by the client's event callback when the connection drops.
    lost: Arc<AtomicBool>,
}

impl Publisher {
    fn new(
        settings: Settings,
        input: Consumer,
        names: &StreamNames,
        streams: usize,
        counters: Arc<NatsCounters>,
        cursors: Arc<CursorSet>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let prefix = settings.subject_prefix.clone();
        let streams = (0..streams)
            .map(|id| {
                let (venue, stream) = names.get(u16::try_from(id).unwrap_or(u16::MAX));
                let (venue, stream) = (token(venue), token(stream));
                StreamInfo {
                    subject: Subject::from(format!("{prefix}.{venue}.{stream}")),
                    id_prefix: format!("{venue}.{stream}"),
                    epoch: "-".to_string(),
                    message_id_base: format!("{venue}.{stream}.-."),
                    epoch_header: Arc::from("-"),
                    state: StreamState::Unseen,
                    templates: [None, None],
                }
            })
            .collect();
        Self {
            settings,
            input,
            streams,
            counters,
            cursors,
            stop,
            pending: VecDeque::new(),
            started_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, crate::time::duration_nanos),
            serial: 0,
            retry_pause: RETRY_MIN,
            stopping: None,
            logged: [Throttle::new(LOG_EVERY); 4],
        }
    }

    /// The thread's body: a session per connection, each on a runtime of its own.
    fn run(&mut self) {
        loop {
            // Asked to stop while no connection could be made: the deadline runs all the
            // same, and with nothing left to publish there is nothing to wait for.
            if self.stopping.is_none() && self.stop.load(Ordering::Acquire) {
                self.stopping = Some(Instant::now() + STOP_DEADLINE);
            }
            if self.stopping.is_some() && self.input.is_empty() && self.pending.is_empty() {
                break;
            }
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    crate::log_error!("nats sink: no runtime for a connection: {e}");
                    thread::sleep(RETRY_MAX);
                    continue;
                }
            };
            let ended = runtime.block_on(self.session());
            // The old connection's client, its buffers and its tasks go with its runtime.
            drop(runtime);
            self.counters.connected.store(0, Ordering::Relaxed);
            for p in &mut self.pending {
                p.ack = None;
            }
            match ended {
                Ended::Done => break,
                Ended::Reset if self.past_stop_deadline() => {
                    self.report_unpublished();
                    break;
                }
                Ended::Reset => {}
            }
        }
    }

    fn past_stop_deadline(&self) -> bool {
        self.stopping.is_some_and(|at| Instant::now() >= at)
    }

    fn report_unpublished(&self) {
        crate::log_warn!(
            "nats sink: stopped with {} publishes unacknowledged and {} bytes of events \
             unpublished in its queue",
            self.pending.len(),
            self.input.available_bytes()
        );
    }

    /// Connects, sends again what is unacknowledged, then publishes until the connection
    /// fails or everything is done.
    async fn session(&mut self) -> Ended {
        let Some(session) = self.connect().await else {
            let pause = self.retry_pause;
            self.retry_pause = (self.retry_pause * 2).min(RETRY_MAX);
            self.pause(pause).await;
            return Ended::Reset;
        };
        // In order, with the same ids: the server drops the copies of what it stored.
        let mut resend = std::mem::take(&mut self.pending);
        let mut failed = false;
        for p in &mut resend {
            if !failed {
                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                failed = !self.send(&session, p).await;
            }
        }
        self.pending = resend;
        if failed {
            return Ended::Reset;
        }
        let mut idle = IDLE_MIN;
        let mut turns: u32 = 0;
        loop {
            if self.stopping.is_none() && self.stop.load(Ordering::Acquire) {
                self.stopping = Some(Instant::now() + STOP_DEADLINE);
            }
            let done = (self.stopping.is_some() || self.input.is_abandoned())
                && self.input.is_empty()
                && self.pending.is_empty();
            if done {
                // Whatever is buffered goes out before the connection closes.
                let flushed = tokio::time::timeout(CONNECT_TIMEOUT, session.client.flush()).await;
                if !matches!(flushed, Ok(Ok(()))) {
                    crate::log_warn!("nats sink: the last publishes could not be flushed");
                }
                return Ended::Done;
            }
            if self.past_stop_deadline() {
                self.report_unpublished();
                return Ended::Done;
            }
            if session.lost.load(Ordering::Acquire) {
                return Ended::Reset;
            }
            let Some(moved) = self.fill(&session).await else {
                return Ended::Reset;
            };
            let Some(reaped) = self.reap() else {
                return Ended::Reset;
            };
            self.counters
                .pending
                .store(self.pending.len() as u64, Ordering::Relaxed);
            if moved + reaped > 0 {
                idle = IDLE_MIN;
                // The client's connection task runs whenever the sink waits for an
                // acknowledgement; a yield on every turn would add a poll of the socket per
                // publish, so it is only a backstop here.
                turns = turns.wrapping_add(1);
                if turns.is_multiple_of(64) {
                    tokio::task::yield_now().await;
                }
            } else if self.pending.front().is_some_and(|p| p.ack.is_some()) {
                if !self.await_front(IDLE_MAX).await {
                    return Ended::Reset;
                }
            } else {
                self.pause(idle).await;
                idle = (idle * 2).min(IDLE_MAX);
            }
        }
    }

    /// Sleeps `d`, never past the stop deadline once there is one.
    async fn pause(&self, d: Duration) {
        let until = match self.stopping {
            Some(deadline) => deadline.min(Instant::now() + d),
            None => Instant::now() + d,
        };
        tokio::time::sleep_until(until.into()).await;
    }

    /// Logs a failure of `kind`, at most once every [`LOG_EVERY`].
    fn log_failure(&mut self, kind: Failure, what: std::fmt::Arguments<'_>) {
        if let Some(held) = self.logged.get_mut(kind as usize).and_then(Throttle::admit) {
            crate::log_warn!("nats sink {}: {what}{}", self.settings.url, held_note(held));
        }
    }

    /// Connects and creates or checks the stream; `None` (logged) when either fails.
    async fn connect(&mut self) -> Option<Session> {
        let lost = Arc::new(AtomicBool::new(false));
        let options = match connect_options(&self.settings, Arc::clone(&lost), "nats sink").await {
            Ok(options) => options,
            Err(e) => {
                self.log_failure(Failure::Connect, format_args!("credentials: {e}"));
                return None;
            }
        };
        let url = self.settings.url.clone();
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, options.connect(url.as_str())).await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                self.log_failure(Failure::Connect, format_args!("connect failed: {e}"));
                return None;
            }
            Err(_) => {
                self.log_failure(
                    Failure::Connect,
                    format_args!("connect timed out after {CONNECT_TIMEOUT:?}"),
                );
                return None;
            }
        };
        let mut context = jetstream::new(client.clone());
        context.set_timeout(ACK_TIMEOUT);
        if !self.ensure_stream(&context).await {
            return None;
        }
        let again = if self.counters.connects() > 0 {
            format!(
                ", sending {} unacknowledged publishes again",
                self.pending.len()
            )
        } else {
            String::new()
        };
        crate::log_info!(
            "nats sink: connected to {}, publishing into stream {}{again}",
            self.settings.url,
            self.settings.stream
        );
        self.counters.connects.fetch_add(1, Ordering::Relaxed);
        self.counters.connected.store(1, Ordering::Relaxed);
        Some(Session {
            client,
            context,
            lost,
        })
    }

    /// Creates the stream when it is missing; warns when an existing one differs.
    async fn ensure_stream(&mut self, context: &jetstream::Context) -> bool {
        let wanted_subjects = vec![format!("{}.>", self.settings.subject_prefix)];
        let config = stream::Config {
            name: self.settings.stream.clone(),
            subjects: wanted_subjects.clone(),
            duplicate_window: self.settings.duplicate_window,
            max_age: self.settings.max_age.unwrap_or_default(),
            storage: stream::StorageType::File,
            ..Default::default()
        };
        let created =
            tokio::time::timeout(CONNECT_TIMEOUT, context.get_or_create_stream(config)).await;
        let stream = match created {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                let name = self.settings.stream.clone();
                self.log_failure(
                    Failure::Stream,
                    format_args!("stream {name} could not be created or read: {e}"),
                );
                return false;
            }
            Err(_) => {
                self.log_failure(
                    Failure::Stream,
                    format_args!("no answer about the stream within {CONNECT_TIMEOUT:?}"),
                );
                return false;
            }
        };
        let info = stream.cached_info();
        let covered = wanted_subjects
            .iter()
            .all(|w| info.config.subjects.iter().any(|s| s == w || s == ">"));
        if !covered {
            crate::log_warn!(
                "nats sink: stream {} exists with subjects {:?}, which do not cover {:?}: \
                 publishes will be refused",
                self.settings.stream,
                info.config.subjects,
                wanted_subjects
            );
        }
        let max_age = self.settings.max_age.unwrap_or_default();
        if info.config.max_age != max_age {
            crate::log_warn!(
                "nats sink: stream {} exists with a retention by age of {:?}, not the {:?} \
                 configured (zero: none); it keeps its own",
                self.settings.stream,
                info.config.max_age,
                max_age
            );
        }
        if info.config.duplicate_window != self.settings.duplicate_window {
            crate::log_warn!(
                "nats sink: stream {} exists with a duplicate window of {:?}, not the {:?} \
                 configured; copies are dropped within its own window",
                self.settings.stream,
                info.config.duplicate_window,
                self.settings.duplicate_window
            );
        }
        true
    }

    /// Takes events off the queue and sends them, while the window has room; `None` when
    /// the client refused one (it stays pending, to be sent again).
    async fn fill(&mut self, session: &Session) -> Option<usize> {
        let mut moved = 0;
        let max = self.settings.max_pending as usize;
        while moved < BATCH && self.pending.len() < max {
            let Some(next) = self.next_publish() else {
                break;
            };
            moved += 1;
            let Some(mut p) = next else {
                continue;
            };
            self.counters.published.fetch_add(1, Ordering::Relaxed);
            let sent = self.send(session, &mut p).await;
            self.pending.push_back(p);
            if !sent {
                return None;
            }
        }
        Some(moved)
    }

    /// Sends `p` (again); false (logged) when the client refused it.
    async fn send(&mut self, session: &Session, p: &mut Pending) -> bool {
        let publish = Publish::build()
            .payload(p.payload.clone())
            .headers(self.headers(p))
            .message_id(&p.id);
        p.sent = Instant::now();
        match session
            .context
            .send_publish(p.subject.clone(), publish)
            .await
        {
            Ok(ack) => {
                p.ack = Some(ack.into_future());
                true
            }
            Err(e) => {
                p.ack = None;
                self.counters.failures.fetch_add(1, Ordering::Relaxed);
                self.log_failure(
                    Failure::Publish,
                    format_args!("publish to {} not sent: {e}", p.subject),
                );
                false
            }
        }
    }

    /// The headers of `p`; see the module's documentation for what each says.
    fn headers(&self, p: &Pending) -> HeaderMap {
        let mut h = match &p.template {
            Some(template) => HeaderMap::clone(template),
            None => shared_headers(
                p.fields.kind(),
                &p.epoch,
                p.state,
                self.settings.instance.as_str(),
            ),
        };
        match p.fields {
            Fields::Message { seq, recv_ns } => {
                h.insert(SEQ, HeaderValue::from(seq));
                h.insert(RECV_NS, HeaderValue::from(recv_ns));
            }
            Fields::Snapshot { seq, recv_ns } => {
                h.insert(SEQ, HeaderValue::from(seq));
                h.insert(RECV_NS, HeaderValue::from(recv_ns));
                h.insert(SNAPSHOT, "1");
            }
            Fields::Range {
                first,
                last,
                recv_ns,
            } => {
                h.insert(FIRST, HeaderValue::from(first));
                h.insert(LAST, HeaderValue::from(last));
                h.insert(RECV_NS, HeaderValue::from(recv_ns));
            }
            Fields::Gap { from, to } => {
                h.insert(FROM, HeaderValue::from(from));
                h.insert(TO, HeaderValue::from(to));
            }
            Fields::SnapshotEnd { next } => h.insert(NEXT, HeaderValue::from(next)),
            Fields::Overrun { from, to, events } => {
                h.insert(FROM, HeaderValue::from(from));
                h.insert(TO, HeaderValue::from(to));
                h.insert(EVENTS, HeaderValue::from(events));
            }
            Fields::State | Fields::Epoch | Fields::SnapshotBegin => {}
        }
        h
    }

    /// Takes acknowledgements off the front, in order; `None` when one failed or is overdue.
    fn reap(&mut self) -> Option<usize> {
        let mut reaped = 0;
        let mut cx = Context::from_waker(Waker::noop());
        while let Some(front) = self.pending.front_mut() {
            let Some(ack) = front.ack.as_mut() else {
                break;
            };
            match ack.as_mut().poll(&mut cx) {
                Poll::Ready(Ok(ack)) => {
                    self.acknowledged(ack.duplicate);
                    reaped += 1;
                }
                Poll::Ready(Err(e)) => {
                    front.ack = None;
                    self.ack_failed(format_args!("{e}"));
                    return None;
                }
                Poll::Pending => {
                    if front.sent.elapsed() >= ACK_TIMEOUT {
                        self.ack_failed(format_args!("no acknowledgement within {ACK_TIMEOUT:?}"));
                        return None;
                    }
                    break;
                }
            }
        }
        Some(reaped)
    }

    fn ack_failed(&mut self, why: std::fmt::Arguments<'_>) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        let (subject, waiting) = (
            self.pending
                .front()
                .map(|p| p.subject.to_string())
                .unwrap_or_default(),
            self.pending.len(),
        );
        self.log_failure(
            Failure::Ack,
            format_args!(
                "publish to {subject} failed: {why}; connecting again to send {waiting} \
                 unacknowledged publishes again, in order"
            ),
        );
    }

    fn acknowledged(&mut self, duplicate: bool) {
        if let Some(p) = self.pending.pop_front() {
            let ns = crate::time::duration_nanos(p.sent.elapsed());
            self.counters.latency.record(ns);
            match p.progress {
                Progress::None => {}
                Progress::Epoch(stream, label) => self.cursors.epoch(stream, &label),
                Progress::Advance(stream, next) => self.cursors.advance(stream, next),
            }
        }
        self.counters.acked.fetch_add(1, Ordering::Relaxed);
        if duplicate {
            self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        self.retry_pause = RETRY_MIN;
    }

    /// Waits for the front's acknowledgement, at most `limit`; false when it failed.
    async fn await_front(&mut self, limit: Duration) -> bool {
        let Some(ack) = self.pending.front_mut().and_then(|p| p.ack.as_mut()) else {
            return true;
        };
        let waited =
            tokio::time::timeout(limit, std::future::poll_fn(|cx| ack.as_mut().poll(cx))).await;
        match waited {
            Err(_) => true,
            Ok(Ok(ack)) => {
                self.acknowledged(ack.duplicate);
                true
            }
            Ok(Err(e)) => {
                if let Some(front) = self.pending.front_mut() {
                    front.ack = None;
                }
                self.ack_failed(format_args!("{e}"));
                false
            }
        }
    }

    /// The next event as a publish: `None` when the queue is empty, `Some(None)` for an
    /// event that is not published (a heartbeat).
    fn next_publish(&mut self) -> Option<Option<Pending>> {
        let instance = &self.settings.instance;
        let (streams, serial, started) = (&mut self.streams, &mut self.serial, self.started_ns);
        let counters = &self.counters;
        self.input.pop(|event| {
            let stream = usize::from(event.stream());
            let info = streams.get_mut(stream)?;
            let mut own_id = |kind: &str| {
                *serial += 1;
                format!("{}.{kind}.{instance}.{started}.{serial}", info.id_prefix)
            };
            let stream_id = event.stream();
            let mut progress = Progress::None;
            let (fields, id, payload) = match event {
                Event::Message {
                    seq,
                    recv_ns,
                    snapshot,
                    payload,
                    ..
                } => {
                    let (fields, id) = if snapshot {
                        (Fields::Snapshot { seq, recv_ns }, own_id("snapshot"))
                    } else {
                        progress = Progress::Advance(stream_id, seq.saturating_add(1));
                        (
                            Fields::Message { seq, recv_ns },
                            message_id(&info.message_id_base, seq),
                        )
                    };
                    (fields, id, Bytes::copy_from_slice(payload))
                }
                Event::Range {
                    first,
                    last,
                    recv_ns,
                    payload,
                    ..
                } => {
                    progress = Progress::Advance(stream_id, last.saturating_add(1));
                    let id = format!("{}.{}.{first}-{last}", info.id_prefix, info.epoch);
                    let fields = Fields::Range {
                        first,
                        last,
                        recv_ns,
                    };
                    (fields, id, Bytes::copy_from_slice(payload))
                }
                Event::Gap { from, to, .. } => {
                    progress = Progress::Advance(stream_id, to.saturating_add(1));
                    let id = format!("{}.{}.gap.{from}-{to}", info.id_prefix, info.epoch);
                    (Fields::Gap { from, to }, id, Bytes::new())
                }
                Event::State { state, .. } => {
                    info.state = state;
                    info.templates = [None, None];
                    (Fields::State, own_id("state"), Bytes::new())
                }
                Event::Epoch { label, .. } => {
                    let text = String::from_utf8_lossy(label);
                    info.epoch = token(&text);
                    info.message_id_base = format!("{}.{}.", info.id_prefix, info.epoch);
                    info.templates = [None, None];
                    info.epoch_header = epoch_header(&text).into();
                    progress = Progress::Epoch(stream_id, text.to_string());
                    let id = format!("{}.epoch.{}", info.id_prefix, info.epoch);
                    (Fields::Epoch, id, Bytes::new())
                }
                Event::SnapshotBegin { .. } => (
                    Fields::SnapshotBegin,
                    own_id("snapshot-begin"),
                    Bytes::new(),
                ),
                Event::SnapshotEnd { next, .. } => {
                    progress = Progress::Advance(stream_id, next);
                    (
                        Fields::SnapshotEnd { next },
                        own_id("snapshot-end"),
                        Bytes::new(),
                    )
                }
                Event::Overrun {
                    from, to, events, ..
                } => {
                    counters.overruns.fetch_add(1, Ordering::Relaxed);
                    (
                        Fields::Overrun { from, to, events },
                        own_id("overrun"),
                        Bytes::new(),
                    )
                }
                Event::Heartbeat { .. } => return None,
            };
            let template = info.template(fields, instance);
            Some(Pending {
                template,
                progress,
                subject: info.subject.clone(),
                id,
                fields,
                epoch: Arc::clone(&info.epoch_header),
                state: info.state,
                payload,
                ack: None,
                sent: Instant::now(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::{Pushed, channel};

    #[test]
    fn tokens_keep_only_safe_characters() {
        assert_eq!(token("itch-a_1"), "itch-a_1");
        assert_eq!(token("a.b*c>d e"), "a_b_c_d_e");
        assert_eq!(token(""), "_");
    }

    fn settings() -> Settings {
        Settings {
            url: "nats://127.0.0.1:1".into(),
            stream: "FEED".into(),
            subject_prefix: "gapless".into(),
            duplicate_window: Duration::from_secs(120),
            max_age: None,
            max_pending: 16,
            instance: "a".into(),
            creds: None,
            tls_ca: None,
            tls_client: None,
        }
    }

    /// The headers a publish must carry, written out in full, one by one.
    fn expected(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(HeaderName::from_static(name), value.as_str());
        }
        h
    }

    /// Messages and ranges share headers built once per epoch and state: each publish still
    /// carries the epoch and state of when it was taken, after either changes, and when it
    /// is sent again after the stream has moved on.
    #[test]
    fn every_publish_carries_the_epoch_and_state_it_was_taken_in() {
        let mut names = StreamNames::new();
        names.set(0, "v", "s");
        let (mut producer, consumer) = channel(1 << 16, 1);
        let mut publisher = Publisher::new(
            settings(),
            consumer,
            &names,
            1,
            Arc::new(NatsCounters::default()),
            Arc::new(CursorSet::new(1)),
            Arc::new(AtomicBool::new(false)),
        );
        let message = |seq| Event::Message {
            stream: 0,
            seq,
            recv_ns: 7,
            snapshot: false,
            payload: b"m",
        };
        let state = |state| Event::State { stream: 0, state };
        let events = [
            message(1),
            Event::Epoch {
                stream: 0,
                label: b"S1",
            },
            state(StreamState::Synced),
            message(2),
            Event::Range {
                stream: 0,
                first: 3,
                last: 4,
                recv_ns: 8,
                payload: b"r",
            },
            state(StreamState::DirtySyncPending),
            message(5),
            Event::Epoch {
                stream: 0,
                label: b"S2",
            },
            message(1),
        ];
        for e in &events {
            assert_eq!(producer.push(e), Pushed::Written);
        }
        let mut taken = Vec::new();
        while let Some(next) = publisher.next_publish() {
            taken.extend(next);
        }
        let message_headers = |seq: u64, epoch: &str, state: &str| {
            expected(&[
                ("Gapless-Kind", "message".into()),
                ("Gapless-Seq", seq.to_string()),
                ("Gapless-Recv-Ns", "7".into()),
                ("Gapless-Epoch", epoch.into()),
                ("Gapless-State", state.into()),
                ("Gapless-Instance", "a".into()),
            ])
        };
        let want = [
            message_headers(1, "-", "unseen"),
            expected(&[
                ("Gapless-Kind", "epoch".into()),
                ("Gapless-Epoch", "S1".into()),
                ("Gapless-State", "unseen".into()),
                ("Gapless-Instance", "a".into()),
            ]),
            expected(&[
                ("Gapless-Kind", "state".into()),
                ("Gapless-Epoch", "S1".into()),
                ("Gapless-State", "synced".into()),
                ("Gapless-Instance", "a".into()),
            ]),
            message_headers(2, "S1", "synced"),
            expected(&[
                ("Gapless-Kind", "range".into()),
                ("Gapless-First", "3".into()),
                ("Gapless-Last", "4".into()),
                ("Gapless-Recv-Ns", "8".into()),
                ("Gapless-Epoch", "S1".into()),
                ("Gapless-State", "synced".into()),
                ("Gapless-Instance", "a".into()),
            ]),
            expected(&[
                ("Gapless-Kind", "state".into()),
                ("Gapless-Epoch", "S1".into()),
                ("Gapless-State", "dirty_sync_pending".into()),
                ("Gapless-Instance", "a".into()),
            ]),
            message_headers(5, "S1", "dirty_sync_pending"),
            expected(&[
                ("Gapless-Kind", "epoch".into()),
                ("Gapless-Epoch", "S2".into()),
                ("Gapless-State", "dirty_sync_pending".into()),
                ("Gapless-Instance", "a".into()),
            ]),
            message_headers(1, "S2", "dirty_sync_pending"),
        ];
        assert_eq!(taken.len(), want.len());
        for (i, (p, want)) in taken.iter().zip(&want).enumerate() {
            assert_eq!(&publisher.headers(p), want, "publish {i}");
            // Sent again later, it is the same publish.
            assert_eq!(&publisher.headers(p), want, "publish {i} sent again");
        }
        let ids: Vec<&str> = taken.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids[0], "v.s.-.1");
        assert_eq!(ids[3], "v.s.S1.2");
        assert_eq!(ids[4], "v.s.S1.3-4");
        assert_eq!(ids[8], "v.s.S2.1");
    }
}
