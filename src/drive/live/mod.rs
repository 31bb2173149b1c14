//! The live driver: the rx thread's duty cycle over every venue, through the
//! [venue contract](crate::venue). It names no venue kind.
//!
//! ```text
//! loop {
//!     poll(idle strategy's timeout, bounded by the earliest venue deadline)
//!     now = one clock read
//!     every ready endpoint: recvmmsg until drained -> venue.handle_datagrams
//!     every ready connection: frames -> venue.handle_frame, open/close -> handle_connection
//!     fetch results (a waker ends the poll when one is ready) -> venue.handle_fetch
//!     each venue: handle_timeout when due; then send its transmits, start its
//!     connections and fetches, log its notices
//!     every `publish_every`: stream views and metrics
//! }
//! ```
//!
//! - [`udp`]: the datagram endpoints' sockets.
//! - `conns`: the WebSocket connections.
//! - `fetch`: snapshot fetches on threads of their own.

pub mod chaos;
mod conns;
mod fetch;
mod limit;
pub mod udp;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};

pub use chaos::{ChaosSpec, ChaosStats};
use conns::Conns;
use fetch::FetchService;
use udp::{Drain, Socket};

pub use udp::SocketStats;

use crate::io::batch::RecvBatch;
use crate::io::clock::Clock;
use crate::io::idle::{IdleStrategy, Idler};
use crate::publish::fanout::Fanout;
use crate::sinks::pcap::PcapTap;
use crate::time::Mono;
use crate::venue::{AnyVenue, ChannelStats, EndpointId, IoRequest, NoticeLevel, Venue};

/// Endpoint tokens are `venue << ENDPOINT_BITS | endpoint`.
const ENDPOINT_BITS: u32 = 20;
/// Connection tokens start here.
const CONN_BASE: usize = 1 << 44;
/// The token of the fetch waker.
const WAKER: Token = Token(usize::MAX);

/// A snapshot of what the rx loop publishes for metrics and status lines.
#[derive(Debug, Clone)]
pub struct StreamView {
    /// Venue name.
    pub venue: String,
    /// Stream name.
    pub stream: String,
    /// The venue's counters of the stream.
    pub stats: ChannelStats,
    /// The counters of the stream's sockets.
    pub sockets: SocketStats,
    /// What its consumers were last told.
    pub state: crate::publish::StreamState,
    /// Its redundant lines, in configuration order (empty for a stream with none).
    pub lines: Vec<crate::venue::LineStats>,
}

/// What the loop hands back when it stops: its venues, their final views and the fan-out
/// (dropping it closes the consumer queues).
pub struct RxResult {
    /// The venues (the scenario tests read them back; the daemon's summary uses `views`).
    #[cfg_attr(not(test), allow(dead_code))]
    pub venues: Vec<AnyVenue>,
    /// Every stream's view at the end.
    pub views: Vec<StreamView>,
    /// The consumer fan-out.
    pub fanout: Fanout,
    /// What loss injection did, when it was on.
    #[cfg_attr(not(test), allow(dead_code))]
    pub chaos: Option<ChaosStats>,
}

/// Settings of the loop itself.
#[derive(Debug, Clone)]
pub struct RxOptions {
    /// What to do when a cycle finds nothing.
    pub idle: IdleStrategy,
    /// Datagrams per recvmmsg call.
    pub batch: usize,
    /// Largest datagram (bytes).
    pub max_datagram: usize,
    /// How often stream views are published.
    pub publish_every: Duration,
    /// Loss injection in front of the venues' multicast endpoints (tests only).
    pub chaos: Option<ChaosSpec>,
}

impl Default for RxOptions {
    fn default() -> Self {
        Self {
            idle: IdleStrategy::BusySpin,
            batch: 64,
            max_datagram: 2048,
            publish_every: Duration::from_millis(250),
            chaos: None,
        }
    }
}

/// Shared with the rest of the process: stop request, liveness, published views and
/// metrics.
#[derive(Clone)]
pub struct RxShared {
    /// Metrics the loop writes (plain atomics); `None`: none.
    pub metrics: Option<Arc<crate::metrics::Registry>>,
    /// Per-stream metrics, indexed by consumer stream id.
    pub stream_metrics: Vec<Arc<crate::metrics::StreamMetrics>>,
    /// Venue-wide metrics (connections, snapshot requests), indexed by venue; `None` for a
    /// venue with no venue-wide counters.
    pub venue_metrics: Vec<Option<Arc<crate::metrics::VenueMetrics>>>,
    /// Per-line metrics, indexed by venue, then the venue's stream, then line.
    pub line_metrics: Vec<Vec<Vec<Arc<crate::metrics::LineMetrics>>>>,
    /// Set to ask the loop to finish its cycle and return.
    pub stop: Arc<AtomicBool>,
    /// Monotonic nanoseconds (process clock) of the last completed cycle.
    pub alive_ns: Arc<AtomicU64>,
    /// Latest stream views, replaced every `publish_every`.
    pub views: Arc<std::sync::Mutex<Vec<StreamView>>>,
}

impl Default for RxShared {
    fn default() -> Self {
        Self {
            metrics: None,
            stream_metrics: Vec::new(),
            venue_metrics: Vec::new(),
            line_metrics: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            alive_ns: Arc::new(AtomicU64::new(0)),
            views: Arc::new(std::sync::Mutex::new(Vec::new())),
        }
    }
}

/// Why the loop could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RxError {
    /// A venue's endpoint could not be opened or joined.
    #[error("venue {venue}: {source}")]
    Socket {
        /// The venue.
        venue: String,
        /// What failed.
        #[source]
        source: crate::io::IoError,
    },
    /// The poll could not be created or a socket registered.
    #[error("rx poll: {0}")]
    Poll(#[source] std::io::Error),
}

/// The rx loop over a set of venues.
pub struct RxLoop {
    poll: Poll,
    venues: Vec<AnyVenue>,
    sockets: Vec<Vec<Socket>>,
    conns: Conns,
    fetches: FetchService,
    batch: RecvBatch,
    clock: Clock,
    idler: Idler,
    fanout: Fanout,
    options: RxOptions,
    shared: RxShared,
    last_publish: Mono,
    recorder: Option<PcapTap>,
    /// Rate limit of the snapshot failure lines.
    log: limit::LogLimit,
    /// Warnings to log once the loop runs (receive buffers the kernel capped).
    pub warnings: Vec<String>,
}

fn endpoint_token(venue: usize, endpoint: usize) -> Token {
    Token((venue << ENDPOINT_BITS) | endpoint)
}

impl RxLoop {
    /// Opens and registers every venue's endpoints with a new poll. Connections and
    /// fetches start from the first cycle on, as the venues ask.
    ///
    /// # Errors
    ///
    /// An [`RxError`] when a socket cannot be opened, joined or registered.
    pub fn new(
        venues: Vec<AnyVenue>,
        fanout: Fanout,
        options: RxOptions,
        shared: RxShared,
    ) -> Result<Self, RxError> {
        let poll = Poll::new().map_err(RxError::Poll)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(RxError::Poll)?);
        let mut sockets = Vec::with_capacity(venues.len());
        let mut warnings = Vec::new();
        for (v, venue) in venues.iter().enumerate() {
            let (mut open, w) =
                udp::open(venue, options.chaos, options.max_datagram).map_err(|source| {
                    RxError::Socket {
                        venue: venue.name().to_string(),
                        source,
                    }
                })?;
            warnings.extend(w);
            for (e, s) in open.iter_mut().enumerate() {
                poll.registry()
                    .register(&mut s.socket, endpoint_token(v, e), Interest::READABLE)
                    .map_err(RxError::Poll)?;
            }
            sockets.push(open);
        }
        Ok(Self {
            poll,
            venues,
            sockets,
            conns: Conns::new(CONN_BASE, Arc::clone(&waker)),
            fetches: FetchService::new(waker),
            batch: RecvBatch::new(options.batch, options.max_datagram),
            clock: Clock::new(),
            idler: Idler::new(options.idle),
            fanout,
            options,
            shared,
            last_publish: Mono::ZERO,
            recorder: None,
            log: limit::LogLimit::default(),
            warnings,
        })
    }

    /// Records every datagram received (multicast and answers) into `tap`.
    pub fn with_recorder(mut self, tap: PcapTap) -> Self {
        self.recorder = Some(tap);
        self
    }

    /// Runs cycles until the stop flag is set. Returns the venues, their views and the
    /// fan-out for the final summary.
    ///
    /// # Errors
    ///
    /// The poll failed (other than by a signal).
    pub fn run(mut self) -> std::io::Result<RxResult> {
        for w in std::mem::take(&mut self.warnings) {
            crate::log_warn!("{w}");
        }
        let mut events = Events::with_capacity(256);
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = Mono::from_nanos(self.clock.tick());
            let timeout = self.poll_wait(now);
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Mono::from_nanos(self.clock.tick());
            let mut work = 0;
            for event in events.iter() {
                work += self.ready(now, event.token());
            }
            work += self.after_io(now);
            self.shared
                .alive_ns
                .store(now.as_nanos(), Ordering::Relaxed);
            if work > 0
                && let Some(registry) = &self.shared.metrics
            {
                registry
                    .rx_cycle()
                    .record(self.clock.now_ns().saturating_sub(now.as_nanos()));
            }
            if now.nanos_since(self.last_publish) >= self.options.publish_every.as_nanos() as u64 {
                self.last_publish = now;
                self.publish_views();
            }
            if work == 0 {
                self.fanout.flush_overruns();
            }
            self.idler.idle(work);
        }
        let views = self.publish_views();
        let chaos = self.chaos_stats();
        if let Some(c) = chaos {
            crate::log_warn!(
                "loss injection: {} datagrams dropped, {} duplicated, {} reordered, {} delayed ({} passed on for want of a slot)",
                c.dropped,
                c.duplicated,
                c.reordered,
                c.delayed,
                c.hold_full
            );
        }
        Ok(RxResult {
            venues: self.venues,
            views,
            fanout: self.fanout,
            chaos,
        })
    }

    /// The earliest deadline of any venue or connection (or of a datagram the loss
    /// injector delays).
    fn next_deadline(&self) -> Option<Mono> {
        // Only when loss injection is on: otherwise no socket holds anything back.
        let held = self.options.chaos.and_then(|_| {
            self.sockets
                .iter()
                .flatten()
                .filter_map(|s| s.chaos.as_ref().and_then(chaos::Chaos::next_due))
                .min()
        });
        let venues = self.venues.iter().filter_map(Venue::poll_timeout).min();
        [venues, self.conns.next_deadline(), held]
            .into_iter()
            .flatten()
            .min()
    }

    /// What the loss injectors did, summed over every endpoint.
    fn chaos_stats(&self) -> Option<chaos::ChaosStats> {
        let mut any = false;
        let mut sum = chaos::ChaosStats::default();
        for c in self
            .sockets
            .iter()
            .flatten()
            .filter_map(|s| s.chaos.as_ref())
        {
            any = true;
            sum.dropped += c.stats.dropped;
            sum.duplicated += c.stats.duplicated;
            sum.reordered += c.stats.reordered;
            sum.delayed += c.stats.delayed;
            sum.hold_full += c.stats.hold_full;
        }
        any.then_some(sum)
    }

    /// How long the poll may wait at `now`: the idle strategy's bound, cut short by the
    /// earliest venue deadline.
    fn poll_wait(&self, now: Mono) -> Option<Duration> {
        let deadline = self
            .next_deadline()
            .map(|t| Duration::from_nanos(t.nanos_since(now)));
        self.idler.poll_timeout(deadline)
    }

    /// Handles one readiness event. Returns the work done.
    fn ready(&mut self, now: Mono, token: Token) -> usize {
        if token == WAKER {
            // Fetch results: drained in `after_io`.
            return 0;
        }
        if let Some(slot) = self.conns.slot_of(token) {
            return self.conns.ready(
                now,
                slot,
                &mut self.venues,
                self.poll.registry(),
                &mut self.fanout,
            );
        }
        let (v, e) = (
            token.0 >> ENDPOINT_BITS,
            token.0 & ((1 << ENDPOINT_BITS) - 1),
        );
        let (Some(venue), Some(socket)) = (
            self.venues.get_mut(v),
            self.sockets.get_mut(v).and_then(|s| s.get_mut(e)),
        ) else {
            return 0;
        };
        let id = EndpointId(u16::try_from(e).unwrap_or(u16::MAX));
        let mut drain = Drain {
            batch: &mut self.batch,
            fanout: &mut self.fanout,
            recorder: self.recorder.as_mut(),
        };
        let handled = udp::drain(now, venue, id, socket, &mut drain);
        if let Some(kind) = socket.last_error.take() {
            crate::log_warn!(
                "{}: receive on endpoint {e} failed ({kind}); {} receive errors in all",
                venue.name(),
                socket.stats.recv_errors
            );
        }
        handled
    }

    /// Fetch results, timers, and what the venues asked for. Returns the work done.
    fn after_io(&mut self, now: Mono) -> usize {
        let mut work = self.conns.resolved(
            now,
            self.poll.registry(),
            &mut self.venues,
            &mut self.fanout,
        );
        work += self.conns.expire(
            now,
            self.poll.registry(),
            &mut self.venues,
            &mut self.fanout,
        );
        if self.options.chaos.is_some() {
            for (venue, sockets) in self.venues.iter_mut().zip(&mut self.sockets) {
                for (e, socket) in sockets.iter_mut().enumerate() {
                    let id = EndpointId(u16::try_from(e).unwrap_or(u16::MAX));
                    work += udp::release_held(now, venue, id, socket, &mut self.fanout);
                }
            }
        }
        while let Some(done) = self.fetches.try_next() {
            work += 1;
            if let Some(venue) = self.venues.get(done.venue) {
                let name = venue.name();
                match &done.outcome {
                    fetch::Outcome::Failed(reason) => {
                        if let Some(held) = self.log.allow(now, done.venue, "snapshot") {
                            let note = crate::log::held_note(held);
                            crate::log_warn!(
                                "{name}: snapshot {} failed: {reason}{note}",
                                done.id.0
                            );
                        }
                    }
                    fetch::Outcome::Http { status, body, .. } if *status != 200 => {
                        if let Some(held) = self.log.allow(now, done.venue, "snapshot status") {
                            let note = crate::log::held_note(held);
                            let excerpt = String::from_utf8_lossy(body.get(..200).unwrap_or(body));
                            crate::log_warn!(
                                "{name}: snapshot {} answered {status}: {}{note}",
                                done.id.0,
                                excerpt.trim()
                            );
                        }
                    }
                    fetch::Outcome::Http { body, .. } => crate::log_debug!(
                        "{name}: snapshot {} answered 200 ({} bytes)",
                        done.id.0,
                        body.len()
                    ),
                    _ => {}
                }
            }
            if let Some(venue) = self.venues.get_mut(done.venue) {
                venue.handle_fetch(now, done.id, done.outcome.reply(), &mut self.fanout);
            }
        }
        for v in 0..self.venues.len() {
            work += self.service(now, v);
        }
        work
    }

    /// Runs venue `v`'s timers when due, then does what it asked for. Returns the work
    /// done.
    fn service(&mut self, now: Mono, v: usize) -> usize {
        let mut work = 0;
        let Some(venue) = self.venues.get_mut(v) else {
            return 0;
        };
        if venue.poll_timeout().is_some_and(|t| t <= now) {
            venue.handle_timeout(now, &mut self.fanout);
            work += 1;
        }
        let sockets = self
            .sockets
            .get_mut(v)
            .map(Vec::as_mut_slice)
            .unwrap_or_default();
        while let Some(tx) = venue.poll_transmit() {
            work += 1;
            udp::send(sockets, &tx);
        }
        // Bounded: each request is handled once, and a failure reported to the venue
        // queues at most a few more.
        for _ in 0..1024 {
            let Some(request) = venue.poll_io() else {
                break;
            };
            work += 1;
            match request {
                IoRequest::Open { conn, url, limits } => {
                    crate::log_debug!("{}: connection {}: opening {url}", venue.name(), conn.0);
                    // The clock read after the step, so a retry is timed from when it ended.
                    let now = Mono::from_nanos(self.clock.tick()).max(now);
                    self.conns.open(
                        now,
                        self.poll.registry(),
                        v,
                        venue,
                        conn,
                        &url,
                        limits,
                        &mut self.fanout,
                    );
                }
                IoRequest::Close { conn } => {
                    if self.conns.close(self.poll.registry(), v, conn) {
                        venue.handle_connection(
                            now,
                            conn,
                            crate::venue::ConnEvent::Closed("closed by the venue"),
                            &mut self.fanout,
                        );
                    }
                }
                IoRequest::Fetch {
                    id,
                    what,
                    timeout_ns,
                    ..
                } => {
                    let timeout = Duration::from_nanos(timeout_ns);
                    crate::log_debug!("{}: snapshot {} requested: {what}", venue.name(), id.0);
                    if let Err(e) = self.fetches.start(v, id, what, timeout) {
                        let reason = e.to_string();
                        if let Some(held) = self.log.allow(now, v, "snapshot start") {
                            let note = crate::log::held_note(held);
                            crate::log_warn!(
                                "{}: snapshot not started: {reason}{note}",
                                venue.name()
                            );
                        }
                        venue.handle_fetch(
                            now,
                            id,
                            crate::venue::FetchReply::Failed(&reason),
                            &mut self.fanout,
                        );
                    }
                }
            }
        }
        while let Some(notice) = venue.poll_notice() {
            let level = match notice.level() {
                NoticeLevel::Warn => crate::log::WARN,
                NoticeLevel::Info => crate::log::INFO,
                NoticeLevel::Debug => crate::log::DEBUG,
            };
            // A notice below the level is dropped here, before anything is formatted.
            if !crate::log::enabled(level) {
                continue;
            }
            let name = venue.name();
            match notice.stream().and_then(|s| venue.stream(s)) {
                Some(s) => crate::log::write(level, format_args!("{name}/{}: {notice}", s.name)),
                None => crate::log::write(level, format_args!("{name}: {notice}")),
            }
        }
        work
    }

    /// Publishes every stream's view and metrics; returns the views.
    fn publish_views(&mut self) -> Vec<StreamView> {
        let mut views = Vec::new();
        for (v, venue) in self.venues.iter().enumerate() {
            if let Some(Some(m)) = self.shared.venue_metrics.get(v) {
                m.publish(&venue.counters());
            }
            let sockets = self.sockets.get(v).map(Vec::as_slice).unwrap_or_default();
            for i in 0..venue.stream_count() {
                let Some(info) = venue.stream(i) else {
                    continue;
                };
                let socket_stats = sockets
                    .iter()
                    .filter(|s| s.stream == i)
                    .fold(SocketStats::default(), |a, s| a.add(s.stats));
                let lines = venue.lines(i);
                let line_metrics = self
                    .shared
                    .line_metrics
                    .get(v)
                    .and_then(|s| s.get(i))
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                // A stream's multicast sockets are its lines, in order.
                let line_sockets = sockets.iter().filter(|s| s.stream == i && s.is_multicast());
                for ((line, m), socket) in lines.iter().zip(line_metrics).zip(line_sockets) {
                    m.publish(
                        line,
                        crate::metrics::LineSocket {
                            filtered: socket.stats.filtered,
                            truncated: socket.stats.truncated,
                            inode: socket.inode,
                        },
                    );
                }
                let view = StreamView {
                    venue: venue.name().to_string(),
                    stream: info.name.to_string(),
                    stats: info.stats,
                    sockets: socket_stats,
                    state: info.state,
                    lines: lines.to_vec(),
                };
                if let Some(m) = self.shared.stream_metrics.get(usize::from(info.id)) {
                    let mut sample = crate::metrics::StreamSample::from(&view.stats);
                    sample.filtered_packets = view.sockets.filtered;
                    sample.truncated_packets = view.sockets.truncated;
                    sample.rerequests_send_failed = view.sockets.send_errors;
                    sample.state = view.state;
                    m.publish(&sample);
                    m.set_state(view.state);
                }
                views.push(view);
            }
        }
        if let Some(registry) = &self.shared.metrics {
            registry.process().mark_alive(
                self.clock
                    .realtime_offset_ns()
                    .saturating_add(self.clock.now_ns()),
            );
        }
        // Never wait for a reader: if one holds the lock, this round is skipped.
        if let Ok(mut shared) = self.shared.views.try_lock() {
            shared.clone_from(&views);
        }
        views
    }
}
