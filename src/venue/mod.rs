//! Venue sessions (sans-IO): per-venue protocol logic between the wire codecs and the
//! consumers. They never touch a socket, a thread or the OS clock.
//!
//! # The venue contract
//!
//! Every venue kind is one session behind the [`Venue`] trait, in the manner of
//! quinn-proto's `Connection`: the drivers ([`crate::drive`]) own the sockets, threads and
//! clocks, and talk to a venue only through it.
//!
//! | direction | call | what |
//! | --- | --- | --- |
//! | in | [`Venue::handle_datagrams`] | datagrams received together on one of the venue's [`Endpoint`]s |
//! | in | [`Venue::handle_frame`] | a text frame on a connection the venue opened |
//! | in | [`Venue::handle_connection`] | a connection opened, failed or closed |
//! | in | [`Venue::handle_fetch`] | what a snapshot fetch produced |
//! | in | [`Venue::handle_timeout`] | the deadline of [`Venue::poll_timeout`] passed |
//! | in | [`Venue::handle_end`] | end of input (a replay reached the end of its capture) |
//! | out | [`Venue::poll_timeout`] | the earliest armed timer of the venue's [`TimerTable`]s |
//! | out | [`Venue::poll_transmit`] | a datagram to send from one of its endpoints (a re-request) |
//! | out | [`Venue::poll_io`] | a connection to open or close, a snapshot to fetch |
//! | out | [`Venue::poll_notice`] | something an operator should read in the log |
//! | out | [`Venue::stream`] | each stream's name, state and counters, for status and metrics |
//!
//! The `poll_*` calls only drain what the `handle_*` calls decided. Consumer events go out
//! through the [`Emit`] passed to each `handle_*` call rather than a queue to drain,
//! because a delivered message borrows the receive buffer it arrived in.
//!
//! The kinds: [`udp::UdpVenue`] (MoldUDP64 and IEX-TP) and [`binance::BinanceVenue`]
//! (Binance depth streams). [`AnyVenue`] holds either, so a driver keeps one `Vec` of
//! venues and names no kind.

pub mod binance;
mod notice;
mod timer;
pub mod udp;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

pub use notice::{EpochLabel, LostReason, Notice, NoticeLevel, Notices, line_name};
pub use timer::{Timer, TimerTable};
pub use udp::recovery::RequestPolicy;
pub use udp::wire::{SessionKey, Wire};
pub use udp::{ChannelSpec, FeedSpec, Resume, SnapshotSpec, UdpVenue};

use crate::config::{Config, Venue as VenueConfig};
use crate::publish::run::MessageRun;
use crate::publish::{Event, StreamState};
use crate::sequencer::StreamStats;
use crate::time::{Mono, Wall};

/// Where consumer events go: the publish fan-out live, a file in replay, a vector in tests.
pub trait Emit {
    /// Takes one event. Must not block.
    fn emit(&mut self, event: &Event<'_>);

    /// Takes a run of consecutive live messages of one stream. The default hands each
    /// message to [`Emit::emit`] as an [`Event::Message`]; the rx thread's fan-out
    /// writes the run as one queue record instead. Must not block.
    fn emit_run(&mut self, run: &MessageRun<'_>) {
        for event in run.events() {
            self.emit(&event);
        }
    }
}

impl<F: FnMut(&Event<'_>)> Emit for F {
    fn emit(&mut self, event: &Event<'_>) {
        self(event)
    }
}

/// One of a venue's datagram endpoints: an index into [`Venue::endpoints`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointId(pub u16);

/// One of a venue's connections, numbered by the venue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u16);

/// One snapshot fetch, numbered by the venue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FetchId(pub u64);

/// A datagram endpoint the driver opens for a venue at start, described by address values
/// only (the driver owns the socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A multicast group to join.
    Multicast {
        /// Group address and port.
        group: SocketAddrV4,
        /// Local interface to join on.
        interface: Ipv4Addr,
        /// Source filter: a source-specific join, or datagrams from elsewhere dropped.
        source: Option<Ipv4Addr>,
        /// Receive buffer to ask the kernel for (bytes).
        rcvbuf: usize,
        /// The venue's stream this endpoint feeds (for the socket counters in its view).
        stream: usize,
    },
    /// A unicast socket bound on `interface` (any port): requests go out from it and
    /// their answers come back to it.
    Unicast {
        /// Local interface to bind.
        interface: Ipv4Addr,
        /// The venue's stream this endpoint serves.
        stream: usize,
    },
}

impl Endpoint {
    /// The venue's stream this endpoint belongs to.
    pub fn stream(&self) -> usize {
        match self {
            Self::Multicast { stream, .. } | Self::Unicast { stream, .. } => *stream,
        }
    }
}

/// A datagram as the driver received it: its bytes and the wall-clock time it arrived
/// (the kernel's timestamp where there is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Received<'a> {
    /// The datagram.
    pub bytes: &'a [u8],
    /// When it arrived.
    pub recv: Wall,
}

/// A datagram to send: `bytes[..len]` to `to`, from `endpoint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The endpoint to send from (its socket receives the answer).
    pub endpoint: EndpointId,
    /// Where to.
    pub to: SocketAddr,
    /// The encoded datagram.
    pub bytes: [u8; 20],
    /// How many bytes of `bytes` to send.
    pub len: usize,
}

impl Transmit {
    /// The bytes to send.
    pub fn payload(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// A snapshot to fetch off the rx thread. Its `Debug` and `Display` never show the
/// password.
#[derive(Clone, PartialEq, Eq)]
pub enum Fetch {
    /// An HTTP `GET` of `url`; the answer is one [`FetchReply::Http`].
    Http {
        /// The whole URL.
        url: String,
    },
    /// A GLIMPSE-style snapshot over SoupBinTCP: log in, then every sequenced message is a
    /// [`FetchReply::Message`] until the end of snapshot, a [`FetchReply::End`].
    Soup {
        /// TCP address of the snapshot server.
        addr: SocketAddr,
        /// Login user name.
        username: String,
        /// Login password.
        password: String,
        /// The session to log in to (MoldUDP64's 10-byte session name).
        session: [u8; 10],
    },
}

impl fmt::Display for Fetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http { url } => write!(f, "GET {url}"),
            Self::Soup {
                addr,
                username,
                session,
                ..
            } => write!(
                f,
                "SoupBinTCP snapshot from {addr} as {username:?}, session {:?}",
                String::from_utf8_lossy(session)
            ),
        }
    }
}

impl fmt::Debug for Fetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http { url } => f.debug_struct("Http").field("url", url).finish(),
            Self::Soup {
                addr,
                username,
                session,
                ..
            } => f
                .debug_struct("Soup")
                .field("addr", addr)
                .field("username", username)
                .field("password", &"<hidden>")
                .field("session", &String::from_utf8_lossy(session))
                .finish(),
        }
    }
}

/// What a venue asks its driver to do besides sending datagrams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoRequest {
    /// Open a WebSocket connection to `url`; report it with [`Venue::handle_connection`].
    Open {
        /// The venue's number for it.
        conn: ConnId,
        /// `ws://` or `wss://` URL.
        url: String,
        /// The deadline of each step of the opening, and how often to ping once open.
        limits: ConnLimits,
    },
    /// Close connection `conn`; the driver reports [`ConnEvent::Closed`] when it is gone.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Fetch a snapshot; report what it produced with [`Venue::handle_fetch`].
    Fetch {
        /// The venue's number for it.
        id: FetchId,
        /// The venue's stream it is for.
        stream: usize,
        /// What to fetch.
        what: Fetch,
        /// The driver gives up (and reports [`FetchReply::Failed`]) after this long.
        timeout_ns: u64,
    },
}

/// How long each step of opening a connection may take, and how often an open one is
/// pinged, in nanoseconds (0: no ping). The driver gives up a step when its deadline
/// passes and reports [`ConnEvent::Failed`] with `timed_out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Name resolution.
    pub resolve_ns: u64,
    /// The TCP connect, per address tried.
    pub connect_ns: u64,
    /// The TLS handshake.
    pub tls_ns: u64,
    /// The WebSocket upgrade (request sent, `101` read).
    pub upgrade_ns: u64,
    /// Interval of the client's pings once open; 0: none.
    pub ping_ns: u64,
}

impl Default for ConnLimits {
    /// 5 s to resolve, 5 s a TCP connect, 5 s for TLS, 5 s for the upgrade; no pings.
    fn default() -> Self {
        const S: u64 = 1_000_000_000;
        Self {
            resolve_ns: 5 * S,
            connect_ns: 5 * S,
            tls_ns: 5 * S,
            upgrade_ns: 5 * S,
            ping_ns: 0,
        }
    }
}

/// The step of opening a connection that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnStage {
    /// Name resolution.
    Resolve,
    /// The TCP connect (every address failed).
    Connect,
    /// The TLS handshake.
    Tls,
    /// The WebSocket upgrade.
    Upgrade,
}

impl ConnStage {
    /// A lowercase word for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resolve => "resolve",
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Upgrade => "upgrade",
        }
    }
}

/// What became of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEvent<'a> {
    /// The connection is open and frames may follow.
    Opened,
    /// A ping or pong arrived: the connection is alive, though no data came.
    Alive,
    /// It could not be opened: `stage` failed, or its deadline passed (`timed_out`), for
    /// this reason.
    Failed {
        /// The step that failed.
        stage: ConnStage,
        /// Whether the step's deadline passed.
        timed_out: bool,
        /// What went wrong, for the log.
        reason: &'a str,
    },
    /// It was open and has closed (by either side), for this reason.
    Closed(&'a str),
}

/// What a snapshot fetch produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchReply<'a> {
    /// An HTTP response.
    Http {
        /// Its status code.
        status: u16,
        /// Its `Retry-After` header in seconds, when present.
        retry_after_secs: Option<u64>,
        /// Its `X-MBX-USED-WEIGHT-1M` header: the request weight the venue counts for this
        /// IP in the current minute, every client of the IP included.
        used_weight: Option<u32>,
        /// Its body.
        body: &'a [u8],
    },
    /// One snapshot message (SoupBinTCP); more follow.
    Message(&'a [u8]),
    /// The snapshot is complete; live data resumes at `next` (SoupBinTCP).
    End {
        /// The sequence the snapshot reflects everything before.
        next: u64,
    },
    /// No answer: it failed, for this reason.
    Failed(&'a str),
}

/// A stream as status lines and metrics see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo<'a> {
    /// The stream's name (channel or symbol).
    pub name: &'a str,
    /// Its consumer stream id.
    pub id: u16,
    /// What its consumers were last told.
    pub state: StreamState,
    /// Its counters.
    pub stats: ChannelStats,
}

/// The sans-IO contract every venue kind implements. See the [module documentation](self).
///
/// Times are [`Mono`] on whatever clock the driver uses (the rx loop's, or a capture's);
/// receive times are [`Wall`]. No call blocks, and nothing is allocated per datagram.
pub trait Venue {
    /// The venue's name, for logs and metrics.
    fn name(&self) -> &str;

    /// The datagram endpoints to open at start, in [`EndpointId`] order.
    fn endpoints(&self) -> &[Endpoint] {
        &[]
    }

    /// Handles datagrams received together on `endpoint`, in order.
    fn handle_datagrams<E: Emit>(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        datagrams: &[Received<'_>],
        emit: &mut E,
    ) {
        let _ = (now, endpoint, datagrams, emit);
    }

    /// Handles one text frame received on connection `conn` at `recv`.
    fn handle_frame<E: Emit>(
        &mut self,
        now: Mono,
        conn: ConnId,
        frame: &[u8],
        recv: Wall,
        emit: &mut E,
    ) {
        let _ = (now, conn, frame, recv, emit);
    }

    /// Handles a change of connection `conn`.
    fn handle_connection<E: Emit>(
        &mut self,
        now: Mono,
        conn: ConnId,
        event: ConnEvent<'_>,
        emit: &mut E,
    ) {
        let _ = (now, conn, event, emit);
    }

    /// Handles what the fetch `id` produced.
    fn handle_fetch<E: Emit>(
        &mut self,
        now: Mono,
        id: FetchId,
        reply: FetchReply<'_>,
        emit: &mut E,
    );

    /// Runs every timer due at `now`.
    fn handle_timeout<E: Emit>(&mut self, now: Mono, emit: &mut E);

    /// Nothing more will arrive (a replay reached the end of its capture).
    fn handle_end<E: Emit>(&mut self, now: Mono, emit: &mut E) {
        self.handle_timeout(now, emit);
    }

    /// The earliest time [`Venue::handle_timeout`] has work to do.
    fn poll_timeout(&self) -> Option<Mono>;

    /// The next datagram to send, if any.
    fn poll_transmit(&mut self) -> Option<Transmit> {
        None
    }

    /// The next connection or fetch to start, if any.
    fn poll_io(&mut self) -> Option<IoRequest> {
        None
    }

    /// The next thing worth a log line, if any.
    fn poll_notice(&mut self) -> Option<Notice>;

    /// Number of streams.
    fn stream_count(&self) -> usize;

    /// Stream `index`, below [`Venue::stream_count`].
    fn stream(&self, index: usize) -> Option<StreamInfo<'_>>;

    /// Counters of the venue as a whole (its connections), as `(name, value)` pairs with
    /// stable names.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// The redundant lines of stream `index`, in configuration order (empty for a venue
    /// that has none).
    fn lines(&self, index: usize) -> &[LineStats] {
        // A venue without redundant lines has none for any stream.
        let _ = index;
        &[]
    }
}

/// Every venue kind, so a driver can hold one `Vec` of them.
#[allow(clippy::large_enum_variant)]
pub enum AnyVenue {
    /// MoldUDP64 or IEX-TP.
    Udp(UdpVenue),
    /// Binance depth streams.
    Binance(binance::BinanceVenue),
}

/// Why a configured venue could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The Binance venue's settings are not valid.
    #[error("venue {venue}: {source}")]
    Binance {
        /// The venue.
        venue: String,
        /// What is wrong.
        #[source]
        source: binance::SpecError,
    },
}

impl AnyVenue {
    /// The MoldUDP64 or IEX-TP venue, if this is one.
    pub fn udp(&self) -> Option<&UdpVenue> {
        match self {
            Self::Udp(v) => Some(v),
            Self::Binance(_) => None,
        }
    }

    /// The Binance venue, if this is one.
    pub fn binance(&self) -> Option<&binance::BinanceVenue> {
        match self {
            Self::Binance(v) => Some(v),
            Self::Udp(_) => None,
        }
    }

    /// Gives each stream the resume cursor `saved` has for its consumer stream id (streams
    /// of venues without epochs, Binance's, resync from a snapshot and take none).
    pub fn set_resume(&mut self, saved: &dyn Fn(u16) -> Option<Resume>) {
        if let Self::Udp(v) = self {
            v.set_resume(saved);
        }
    }

    /// The venue `config` describes, its consumer stream ids from `stream_base`.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] when the settings do not make a valid venue.
    pub fn from_config(config: &VenueConfig, stream_base: u16) -> Result<Self, BuildError> {
        Self::from_config_with(config, stream_base, &|_, _| None)
    }

    /// [`AnyVenue::from_config`], with the local addresses that answer its channels'
    /// `"jetstream"` re-request entries (see [`udp::JetStreamServers`]).
    ///
    /// # Errors
    ///
    /// A [`BuildError`] when the settings do not make a valid venue.
    pub fn from_config_with(
        config: &VenueConfig,
        stream_base: u16,
        jetstream: udp::JetStreamServers<'_>,
    ) -> Result<Self, BuildError> {
        if let Some(spec) = udp::spec_from_config_with(config, stream_base, jetstream) {
            return Ok(Self::Udp(UdpVenue::new(config.name.as_str(), spec)));
        }
        let venue = binance::BinanceVenue::from_config(config, stream_base).map_err(|source| {
            BuildError::Binance {
                venue: config.name.as_str().to_string(),
                source,
            }
        })?;
        Ok(Self::Binance(venue))
    }

    /// Every venue of `config`, their stream ids numbered in order from 0.
    ///
    /// # Errors
    ///
    /// The first [`BuildError`].
    pub fn all_from_config(config: &Config) -> Result<Vec<Self>, BuildError> {
        Self::all_from_config_with(config, &|_, _, _| None)
    }

    /// [`AnyVenue::all_from_config`], with the local addresses that answer `"jetstream"`
    /// re-request entries: given the venue's name, the nats sink's stream and the
    /// channel's name.
    ///
    /// # Errors
    ///
    /// The first [`BuildError`].
    pub fn all_from_config_with(
        config: &Config,
        jetstream: &dyn Fn(&str, &str, &str) -> Option<SocketAddr>,
    ) -> Result<Vec<Self>, BuildError> {
        let mut base = 0u16;
        let mut venues = Vec::with_capacity(config.venues.len());
        for v in &config.venues {
            let name = v.name.as_str();
            let servers = |stream: &str, channel: &str| jetstream(name, stream, channel);
            venues.push(Self::from_config_with(v, base, &servers)?);
            base = base.saturating_add(u16::try_from(v.kind.stream_count()).unwrap_or(u16::MAX));
        }
        Ok(venues)
    }
}

macro_rules! each_venue {
    ($self:expr, $v:ident => $body:expr) => {
        match $self {
            AnyVenue::Udp($v) => $body,
            AnyVenue::Binance($v) => $body,
        }
    };
}

impl Venue for AnyVenue {
    fn name(&self) -> &str {
        each_venue!(self, v => v.name())
    }

    fn endpoints(&self) -> &[Endpoint] {
        each_venue!(self, v => v.endpoints())
    }

    #[inline]
    fn handle_datagrams<E: Emit>(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        datagrams: &[Received<'_>],
        emit: &mut E,
    ) {
        each_venue!(self, v => v.handle_datagrams(now, endpoint, datagrams, emit))
    }

    fn handle_frame<E: Emit>(
        &mut self,
        now: Mono,
        conn: ConnId,
        frame: &[u8],
        recv: Wall,
        emit: &mut E,
    ) {
        each_venue!(self, v => v.handle_frame(now, conn, frame, recv, emit))
    }

    fn handle_connection<E: Emit>(
        &mut self,
        now: Mono,
        conn: ConnId,
        event: ConnEvent<'_>,
        emit: &mut E,
    ) {
        each_venue!(self, v => v.handle_connection(now, conn, event, emit))
    }

    fn handle_fetch<E: Emit>(
        &mut self,
        now: Mono,
        id: FetchId,
        reply: FetchReply<'_>,
        emit: &mut E,
    ) {
        each_venue!(self, v => v.handle_fetch(now, id, reply, emit))
    }

    fn handle_timeout<E: Emit>(&mut self, now: Mono, emit: &mut E) {
        each_venue!(self, v => v.handle_timeout(now, emit))
    }

    fn handle_end<E: Emit>(&mut self, now: Mono, emit: &mut E) {
        each_venue!(self, v => v.handle_end(now, emit))
    }

    fn poll_timeout(&self) -> Option<Mono> {
        each_venue!(self, v => v.poll_timeout())
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        each_venue!(self, v => v.poll_transmit())
    }

    fn poll_io(&mut self) -> Option<IoRequest> {
        each_venue!(self, v => v.poll_io())
    }

    fn poll_notice(&mut self) -> Option<Notice> {
        each_venue!(self, v => v.poll_notice())
    }

    fn stream_count(&self) -> usize {
        each_venue!(self, v => v.stream_count())
    }

    fn stream(&self, index: usize) -> Option<StreamInfo<'_>> {
        each_venue!(self, v => v.stream(index))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        each_venue!(self, v => v.counters())
    }

    fn lines(&self, index: usize) -> &[LineStats] {
        each_venue!(self, v => v.lines(index))
    }
}

/// How a datagram arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// On the multicast feed.
    Multicast,
    /// As a unicast answer to a re-request.
    Unicast,
}

/// What to do with a gap that nothing can recover (no re-request server answers and no
/// snapshot service is configured, or a capture is being replayed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapPolicy {
    /// The stream stays unsynced, and says so; nothing after the gap is delivered.
    Hold,
    /// The gap is declared lost with an explicit gap event, and delivery resumes after it.
    Skip,
}

/// Counters of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelStats {
    /// Datagrams received (multicast and unicast).
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Messages carried by data datagrams (before deduplication).
    pub messages: u64,
    /// Heartbeats and end-of-session datagrams.
    pub heartbeats: u64,
    /// Datagrams that failed to decode.
    pub malformed: u64,
    /// Datagrams of a session already left behind that did not take the channel back
    /// (late stragglers of a finished session), and answers for such a session. Counted
    /// when given up.
    pub stale_session: u64,
    /// Datagrams of another session that was not adopted (strays on the group), and
    /// answers for a session never adopted. Counted when given up: a new session's first
    /// datagrams, held while it is confirmed and then delivered, are not counted.
    pub unconfirmed_session: u64,
    /// Session changes (new epochs).
    pub new_sessions: u64,
    /// Re-requests sent.
    pub requests: u64,
    /// Re-requests not sent because the transmit queue was full.
    pub requests_dropped: u64,
    /// Re-requests in flight now.
    pub requests_inflight: u64,
    /// Re-requests that timed out.
    pub timeouts: u64,
    /// Answers of a peer store (a `"jetstream"` re-request entry) that it does not hold
    /// a request's messages yet.
    pub not_yet: u64,
    /// Unicast answers received.
    pub answers: u64,
    /// Messages accepted from answers.
    pub recovered: u64,
    /// Snapshots started.
    pub snapshots_started: u64,
    /// Snapshots completed.
    pub snapshots_done: u64,
    /// Snapshots failed or timed out.
    pub snapshots_failed: u64,
    /// Snapshot messages passed to consumers.
    pub snapshot_messages: u64,
    /// Gaps declared lost ([`GapPolicy::Skip`], or the tail of a session that ended).
    pub gaps_lost: u64,
    /// Times re-requests gave up with no snapshot to help, under [`GapPolicy::Hold`]: the
    /// stream latched `reset_required`.
    pub recovery_exhausted: u64,
    /// Messages in gaps declared lost.
    pub messages_lost: u64,
    /// Messages that could not be kept for reordering (no free datagram slot).
    pub arena_full: u64,
    /// Messages in copies from a redundant line that another line had brought first:
    /// discarded by arbitration, not counted as duplicates.
    pub arbitrated: u64,
    /// The sequencer's counters for the channel's stream.
    pub sequencer: StreamStats,
}

/// Buckets of [`LagHistogram`]: upper bounds of 2^k µs for k in `0..LAG_BUCKETS - 1`
/// (1 µs to about 1 s), then everything above.
pub const LAG_BUCKETS: usize = 22;

/// How far behind the first copy the later copies of a datagram came, in powers of two of
/// microseconds; fixed size, no allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LagHistogram {
    /// Copies in each bucket (not cumulative).
    pub counts: [u64; LAG_BUCKETS],
    /// Sum of the lags, in nanoseconds.
    pub sum_ns: u64,
}

impl LagHistogram {
    /// Counts one copy `ns` nanoseconds behind the first.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let us = ns.div_ceil(1_000);
        // The first bucket whose bound 2^k µs holds `us`.
        let k = if us <= 1 {
            0
        } else {
            (64 - (us - 1).leading_zeros()) as usize
        };
        if let Some(c) = self.counts.get_mut(k.min(LAG_BUCKETS - 1)) {
            *c += 1;
        }
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Copies counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The upper bound of bucket `k` in seconds (`f64::MAX` for the last).
    pub fn bound_secs(k: usize) -> f64 {
        if k + 1 >= LAG_BUCKETS {
            f64::MAX
        } else {
            (1u64 << k) as f64 / 1e6
        }
    }
}

/// The counters and state of one redundant line of a channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineStats {
    /// Datagrams received on the line.
    pub packets: u64,
    /// Bytes received on the line.
    pub bytes: u64,
    /// Data datagrams that brought at least one message before any other line did.
    pub wins: u64,
    /// Messages in this line's copies that another line had already brought (discarded
    /// by arbitration, not anomalies).
    pub arbitrated: u64,
    /// Messages the line skipped: taken from another line, recovered, or lost on all.
    pub missed: u64,
    /// Whether the line is down: silent while another line of the channel is live.
    pub down: bool,
    /// Times the line went down.
    pub downs: u64,
    /// How far this line's copies came behind the first copy.
    pub lag: LagHistogram,
}

impl From<UdpVenue> for AnyVenue {
    fn from(v: UdpVenue) -> Self {
        Self::Udp(v)
    }
}

impl From<binance::BinanceVenue> for AnyVenue {
    fn from(v: binance::BinanceVenue) -> Self {
        Self::Binance(v)
    }
}

#[cfg(test)]
mod fetch_tests {
    use super::Fetch;

    #[test]
    fn a_snapshot_login_never_shows_its_password() {
        let soup = Fetch::Soup {
            addr: "127.0.0.1:9000".parse().unwrap(),
            username: "trader".into(),
            password: "s3cr3t-pw".into(),
            session: *b"SESSION001",
        };
        for text in [format!("{soup}"), format!("{soup:?}")] {
            assert!(!text.contains("s3cr3t-pw"), "{text}");
            assert!(
                text.contains("trader") && text.contains("127.0.0.1:9000"),
                "{text}"
            );
        }
    }
}
