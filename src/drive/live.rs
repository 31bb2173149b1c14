//! The rx thread: a duty cycle over every venue socket. Poll with the idle strategy's
//! timeout, read every ready socket until it is drained (recvmmsg batches), hand each
//! datagram to its venue session with the cycle's clock, then run what the sessions ask
//! for: timers, re-requests, snapshots.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};

use super::binance::BinanceVenue;
use crate::io::batch::RecvBatch;
use crate::io::clock::Clock;
use crate::io::idle::{IdleStrategy, Idler};
use crate::io::socket::{MulticastSpec, SocketInfo, open_multicast, open_unicast};
use crate::io::soup::{SnapshotReply, spawn_fetch};
use crate::publish::fanout::Fanout;
use crate::sinks::pcap::PcapTap;
use crate::venue::{ChannelStats, FeedSession, FeedSpec, SnapshotEvent, Via};

/// Sockets of one channel: the multicast feed and a unicast socket whose answers are
/// re-request replies for this channel alone.
struct ChannelSockets {
    multicast: UdpSocket,
    info: SocketInfo,
    unicast: UdpSocket,
}

/// Counters the rx loop keeps per channel beside the session's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Datagrams dropped by the source filter.
    pub filtered: u64,
    /// Datagrams larger than the receive buffer (cut, dropped).
    pub truncated: u64,
    /// Requests that could not be sent.
    pub send_errors: u64,
}

/// A MoldUDP64 or IEX-TP venue under the rx loop.
pub struct UdpVenue {
    /// Venue name.
    pub name: String,
    session: FeedSession,
    sockets: Vec<ChannelSockets>,
    socket_stats: Vec<SocketStats>,
    session_logs: Vec<SessionLog>,
}

/// What the log has said of one channel's sessions.
#[derive(Debug, Clone, Copy, Default)]
struct SessionLog {
    /// Session changes logged.
    changes: u64,
    /// Datagrams of another session when last logged.
    others: u64,
    /// When (rx clock) datagrams of another session were last logged.
    warned_ns: Option<u64>,
}

/// Datagrams of another session are logged at most this often per channel.
const OTHER_SESSION_LOG_EVERY_NS: u64 = 10_000_000_000;

impl SessionLog {
    /// Logs a session change, and datagrams of another session (at most every
    /// [`OTHER_SESSION_LOG_EVERY_NS`]), since the last call, from the channel's `view`.
    fn update(&mut self, now: u64, view: &StreamView, session: &FeedSession, channel: usize) {
        let (venue, name, stats) = (&view.venue, &view.stream, &view.stats);
        if stats.new_sessions > self.changes {
            self.changes = stats.new_sessions;
            let current = session
                .session(channel)
                .map(|s| s.display(session.wire()))
                .unwrap_or_default();
            crate::log_warn!(
                "{venue}/{name}: session changed to {current:?} (change {}): the stream restarts",
                stats.new_sessions
            );
        }
        let due = self
            .warned_ns
            .is_none_or(|t| now.saturating_sub(t) >= OTHER_SESSION_LOG_EVERY_NS);
        if stats.unconfirmed_session > self.others && due {
            crate::log_warn!(
                "{venue}/{name}: {} datagrams of another session dropped ({} in all): a stray \
                 sender on the group? the channel's `source` keeps it out",
                stats.unconfirmed_session - self.others,
                stats.unconfirmed_session
            );
            self.others = stats.unconfirmed_session;
            self.warned_ns = Some(now);
        }
    }
}

/// Where one channel of a venue listens.
#[derive(Debug, Clone)]
pub struct ChannelAddress {
    /// Group, interface, source filter and receive buffer.
    pub multicast: MulticastSpec,
}

impl UdpVenue {
    /// Joins every channel's group and opens its unicast socket. Returns the venue and a
    /// warning per channel whose receive buffer the kernel capped.
    pub fn open(
        name: &str,
        spec: FeedSpec,
        addresses: &[ChannelAddress],
    ) -> Result<(Self, Vec<String>), crate::io::IoError> {
        let mut sockets = Vec::with_capacity(addresses.len());
        let mut warnings = Vec::new();
        for a in addresses {
            let (multicast, info) = open_multicast(&a.multicast)?;
            if let Some(w) = info.rcvbuf_warning() {
                warnings.push(format!("{name}: {w}"));
            }
            let unicast = open_unicast(std::net::SocketAddrV4::new(a.multicast.interface, 0))?;
            sockets.push(ChannelSockets {
                multicast,
                info,
                unicast,
            });
        }
        let socket_stats = vec![SocketStats::default(); sockets.len()];
        let session_logs = vec![SessionLog::default(); sockets.len()];
        Ok((
            Self {
                name: name.to_string(),
                session: FeedSession::new(spec),
                sockets,
                socket_stats,
                session_logs,
            },
            warnings,
        ))
    }

    /// The venue session.
    pub fn session(&self) -> &FeedSession {
        &self.session
    }

    /// The rx loop's own counters for channel `i`.
    pub fn socket_stats(&self, i: usize) -> SocketStats {
        self.socket_stats.get(i).copied().unwrap_or_default()
    }
}

/// A snapshot of what the rx loop publishes for metrics and status lines.
#[derive(Debug, Clone)]
pub struct StreamView {
    /// Venue name.
    pub venue: String,
    /// Channel name.
    pub stream: String,
    /// Session counters.
    pub stats: ChannelStats,
    /// Socket counters.
    pub sockets: SocketStats,
    /// Current state.
    pub state: crate::publish::StreamState,
}

/// What the loop hands back when it stops: its venues (for the final summary) and the
/// fan-out (dropping it closes the consumer queues).
pub struct RxResult {
    /// The MoldUDP64 / IEX-TP venues.
    pub venues: Vec<UdpVenue>,
    /// The Binance venues.
    pub binance: Vec<BinanceVenue>,
    /// The consumer fan-out.
    pub fanout: Fanout,
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
    /// Snapshot fetches give up after this.
    pub snapshot_timeout: Duration,
    /// How often stream views are published.
    pub publish_every: Duration,
}

impl Default for RxOptions {
    fn default() -> Self {
        Self {
            idle: IdleStrategy::BusySpin,
            batch: 64,
            max_datagram: 2048,
            snapshot_timeout: Duration::from_secs(10),
            publish_every: Duration::from_millis(250),
        }
    }
}

/// Shared with the rest of the process: stop request, liveness, published views and
/// metrics.
#[derive(Clone)]
pub struct RxShared {
    /// Metrics the loop writes (plain atomics), by consumer stream id; empty: none.
    pub metrics: Option<Arc<crate::metrics::Registry>>,
    /// Per-stream metrics, indexed by consumer stream id.
    pub stream_metrics: Vec<Arc<crate::metrics::StreamMetrics>>,
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
            stop: Arc::new(AtomicBool::new(false)),
            alive_ns: Arc::new(AtomicU64::new(0)),
            views: Arc::new(std::sync::Mutex::new(Vec::new())),
        }
    }
}

/// The rx loop over a set of UDP venues.
pub struct RxLoop {
    poll: Poll,
    venues: Vec<UdpVenue>,
    binance: Vec<BinanceVenue>,
    batch: RecvBatch,
    clock: Clock,
    idler: Idler,
    fanout: Fanout,
    snapshot_tx: Sender<(u64, SnapshotReply)>,
    snapshot_rx: Receiver<(u64, SnapshotReply)>,
    snapshot_owner: Vec<(u64, usize)>,
    options: RxOptions,
    shared: RxShared,
    last_publish: u64,
    recorder: Option<PcapTap>,
}

const UNICAST_BIT: usize = 1;

/// Datagrams handed to a venue session at once (a multiple of the four it checks
/// together).
const SESSION_GROUP: usize = 16;

fn token(venue: usize, channel: usize, unicast: bool) -> Token {
    Token((venue << 20) | (channel << 1) | usize::from(unicast))
}

/// Tokens at or above this are Binance venues' WebSockets (index below it).
pub const BINANCE_TOKEN_BASE: usize = 1 << 40;

fn untoken(t: Token) -> (usize, usize, bool) {
    (t.0 >> 20, (t.0 >> 1) & 0x7_FFFF, t.0 & UNICAST_BIT != 0)
}

impl RxLoop {
    /// Registers every socket of `venues` with a new poll; Binance venues connect from
    /// the first cycle on (their tokens must be `BINANCE_TOKEN_BASE + index`).
    pub fn new(
        mut venues: Vec<UdpVenue>,
        binance: Vec<BinanceVenue>,
        fanout: Fanout,
        options: RxOptions,
        shared: RxShared,
    ) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        for (v, venue) in venues.iter_mut().enumerate() {
            for (c, s) in venue.sockets.iter_mut().enumerate() {
                poll.registry().register(
                    &mut s.multicast,
                    token(v, c, false),
                    Interest::READABLE,
                )?;
                poll.registry()
                    .register(&mut s.unicast, token(v, c, true), Interest::READABLE)?;
            }
        }
        let (snapshot_tx, snapshot_rx) = crossbeam_channel::bounded(65_536);
        Ok(Self {
            poll,
            venues,
            binance,
            batch: RecvBatch::new(options.batch, options.max_datagram),
            clock: Clock::new(),
            idler: Idler::new(options.idle),
            fanout,
            snapshot_tx,
            snapshot_rx,
            snapshot_owner: Vec::new(),
            options,
            shared,
            last_publish: 0,
            recorder: None,
        })
    }

    /// Records every datagram received (multicast and answers) into `tap`.
    pub fn with_recorder(mut self, tap: PcapTap) -> Self {
        self.recorder = Some(tap);
        self
    }

    /// Runs cycles until the stop flag is set. Returns the venues and the fan-out for the
    /// final summary.
    pub fn run(mut self) -> std::io::Result<RxResult> {
        let mut events = Events::with_capacity(256);
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = self.clock.tick();
            let deadline = self
                .next_deadline()
                .map(|t| Duration::from_nanos(t.saturating_sub(now)));
            let timeout = self.idler.poll_timeout(deadline);
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = self.clock.tick();
            let mut work = 0;
            for event in events.iter() {
                if let Some(b) = event.token().0.checked_sub(BINANCE_TOKEN_BASE) {
                    let realtime = Clock::realtime_ns();
                    self.fanout.set_now(realtime);
                    if let Some(venue) = self.binance.get_mut(b) {
                        work +=
                            venue.on_ready(now, realtime, self.poll.registry(), &mut self.fanout);
                    }
                    continue;
                }
                let (v, c, unicast) = untoken(event.token());
                work += self.drain_socket(now, v, c, unicast);
            }
            work += self.after_io(now);
            self.shared.alive_ns.store(now, Ordering::Relaxed);
            if work > 0
                && let Some(registry) = &self.shared.metrics
            {
                registry
                    .rx_cycle()
                    .record(self.clock.now_ns().saturating_sub(now));
            }
            if now.saturating_sub(self.last_publish) >= self.options.publish_every.as_nanos() as u64
            {
                self.last_publish = now;
                self.publish_views(now);
            }
            if work == 0 {
                self.fanout.flush_overruns();
            }
            self.idler.idle(work);
        }
        self.publish_views(self.clock.now_ns());
        Ok(RxResult {
            venues: self.venues,
            binance: self.binance,
            fanout: self.fanout,
        })
    }

    fn next_deadline(&self) -> Option<u64> {
        self.venues
            .iter()
            .filter_map(|v| v.session.poll_timeout())
            .min()
    }

    /// Reads one socket until it is drained. Returns the datagrams handled.
    fn drain_socket(&mut self, now: u64, v: usize, c: usize, unicast: bool) -> usize {
        let mut handled = 0;
        loop {
            let Some(sockets) = self.venues.get(v).and_then(|venue| venue.sockets.get(c)) else {
                return handled;
            };
            let fd = if unicast {
                sockets.unicast.as_raw_fd()
            } else {
                sockets.multicast.as_raw_fd()
            };
            let n = match self.batch.recv(fd) {
                Ok(0) | Err(_) => return handled,
                Ok(n) => n,
            };
            let realtime = Clock::realtime_ns();
            self.fanout.set_now(realtime);
            let Some(venue) = self.venues.get_mut(v) else {
                return handled;
            };
            let group = venue.sockets.get(c).map(|s| s.info.local);
            let via = if unicast {
                Via::Unicast
            } else {
                Via::Multicast
            };
            // Accepted datagrams go to the session a few at a time, so it can check
            // their message blocks together.
            let mut accepted_now: [(&[u8], u64); SESSION_GROUP] = [(&[], 0); SESSION_GROUP];
            let mut waiting = 0;
            for i in 0..n {
                let Some(d) = self.batch.get(i) else { continue };
                if let (Some(tap), Some(group)) = (self.recorder.as_mut(), group) {
                    tap.record(d.kernel_ns.unwrap_or(realtime), d.source, group, d.payload);
                }
                let Some(stats) = venue.socket_stats.get_mut(c) else {
                    continue;
                };
                if d.truncated {
                    stats.truncated += 1;
                    continue;
                }
                let accepted = unicast
                    || venue
                        .sockets
                        .get(c)
                        .is_none_or(|s| s.info.accepts(d.source));
                if !accepted {
                    stats.filtered += 1;
                    continue;
                }
                let recv_ns = d.kernel_ns.unwrap_or(realtime);
                if let Some(slot) = accepted_now.get_mut(waiting) {
                    *slot = (d.payload, recv_ns);
                    waiting += 1;
                }
                if waiting == SESSION_GROUP {
                    venue
                        .session
                        .on_datagrams(now, c, &accepted_now, via, &mut self.fanout);
                    waiting = 0;
                }
                handled += 1;
            }
            if let Some(rest) = accepted_now.get(..waiting) {
                venue
                    .session
                    .on_datagrams(now, c, rest, via, &mut self.fanout);
            }
        }
    }

    /// Timers, re-requests, snapshot starts and snapshot results. Returns work done.
    fn after_io(&mut self, now: u64) -> usize {
        let mut work = 0;
        for (v, venue) in self.venues.iter_mut().enumerate() {
            if venue.session.poll_timeout().is_some_and(|t| t <= now) {
                venue.session.handle_timeout(now, &mut self.fanout);
                work += 1;
            }
            while let Some(tx) = venue.session.poll_transmit() {
                work += 1;
                let sent = venue.sockets.get(tx.channel).map(|s| {
                    s.unicast
                        .send_to(tx.bytes.get(..tx.len).unwrap_or_default(), tx.to)
                });
                if !matches!(sent, Some(Ok(_)))
                    && let Some(stats) = venue.socket_stats.get_mut(tx.channel)
                {
                    stats.send_errors += 1;
                }
            }
            while let Some(task) = venue.session.poll_snapshot(now, &mut self.fanout) {
                work += 1;
                let id = task.id;
                self.snapshot_owner.push((id, v));
                if spawn_fetch(
                    task,
                    self.options.snapshot_timeout,
                    self.snapshot_tx.clone(),
                )
                .is_err()
                {
                    venue
                        .session
                        .on_snapshot(now, id, SnapshotEvent::Failed, &mut self.fanout);
                }
            }
        }
        for venue in &mut self.binance {
            work += venue.after_io(now, self.poll.registry(), &mut self.fanout);
        }
        while let Ok((id, reply)) = self.snapshot_rx.try_recv() {
            work += 1;
            let Some(&(_, v)) = self.snapshot_owner.iter().find(|(i, _)| *i == id) else {
                continue;
            };
            let Some(venue) = self.venues.get_mut(v) else {
                continue;
            };
            let event = match &reply {
                SnapshotReply::Message(m) => SnapshotEvent::Message(m),
                SnapshotReply::End { next } => SnapshotEvent::End { next: *next },
                SnapshotReply::Failed(reason) => {
                    crate::log_warn!("{}: snapshot failed: {reason}", venue.name);
                    SnapshotEvent::Failed
                }
            };
            venue.session.on_snapshot(now, id, event, &mut self.fanout);
            if !matches!(reply, SnapshotReply::Message(_)) {
                self.snapshot_owner.retain(|(i, _)| *i != id);
            }
        }
        work
    }

    /// Publishes every stream's view and metrics, and logs session changes and strays
    /// seen since the last call (`now`: the rx clock).
    fn publish_views(&mut self, now: u64) {
        let mut views = Vec::new();
        for venue in &mut self.venues {
            for c in 0..venue.session.channel_count() {
                let view = StreamView {
                    venue: venue.name.clone(),
                    stream: venue.session.channel_name(c).to_string(),
                    stats: venue.session.stats(c),
                    sockets: venue.socket_stats(c),
                    state: venue.session.published_state(c),
                };
                let id = usize::from(venue.session.stream_id(c));
                if let Some(m) = self.shared.stream_metrics.get(id) {
                    let mut sample = crate::metrics::StreamSample::from(&view.stats);
                    sample.filtered_packets = view.sockets.filtered;
                    sample.state = view.state;
                    m.publish(&sample);
                    m.set_state(view.state);
                }
                if let Some(log) = venue.session_logs.get_mut(c) {
                    log.update(now, &view, &venue.session, c);
                }
                views.push(view);
            }
        }
        for venue in &self.binance {
            let session = venue.session();
            for symbol in 0..session.symbol_count() {
                let view = StreamView {
                    venue: venue.name.clone(),
                    stream: session.symbol_name(symbol).unwrap_or("").to_string(),
                    stats: super::binance::channel_stats(&session.stats(symbol)),
                    sockets: SocketStats::default(),
                    state: session.published_state(symbol),
                };
                let id = usize::from(session.stream_id(symbol));
                if let Some(m) = self.shared.stream_metrics.get(id) {
                    let mut sample = crate::metrics::StreamSample::from(&view.stats);
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
            *shared = views;
        }
    }
}
