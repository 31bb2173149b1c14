//! The validated configuration: what the daemon runs on once a file has been accepted.
//!
//! Nothing here can hold a value the file format forbids: each venue carries exactly the data
//! of its kind, addresses are parsed, sizes are checked, and times are [`Duration`]s.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use super::values::{
    DepthLimit, IexSession, MoldSession, MulticastGroup, Name, PowerOfTwo, SoupLogin, Symbol, Url,
    keyword_enum,
};

keyword_enum! {
    /// What the rx thread does when a poll found nothing to do.
    pub enum Idle {
        /// Poll again at once: lowest latency, one core at 100 %.
        BusySpin = "busy-spin",
        /// Yield to the scheduler between polls.
        Yield = "yield",
        /// Block in the poller until a socket is readable or a timer is due.
        Block = "block",
    }
}

keyword_enum! {
    /// The most detailed log level written.
    pub enum LogLevel {
        /// Errors only.
        Error = "error",
        /// Errors and warnings.
        Warn = "warn",
        /// Start-up, state changes and recoveries.
        Info = "info",
        /// Per-gap detail.
        Debug = "debug",
        /// Per-packet detail.
        Trace = "trace",
    }
}

keyword_enum! {
    /// How log lines are written to standard error.
    pub enum LogFormat {
        /// Journal priorities when standard error is the journal, else text.
        Auto = "auto",
        /// An RFC 3339 UTC timestamp, the level and the message.
        Text = "text",
        /// An sd-daemon priority prefix (`<3>`) and the message.
        Journal = "journal",
        /// One JSON object a line, with `timestamp`, `level` and `message`.
        Json = "json",
    }
}

keyword_enum! {
    /// Where a stream starts when the daemon starts.
    pub enum Start {
        /// Adopt the first sequence number seen; nothing before it is recovered.
        Live = "live",
        /// Expect sequence 1 and recover everything before the first packet seen.
        FromStart = "from-start",
    }
}

keyword_enum! {
    /// What a multicast venue does with a gap nothing recovers in time.
    pub enum GapPolicy {
        /// Deliver nothing past the gap: after the re-request budget is spent (and no
        /// snapshot helps) the stream latches `reset_required` until the next session.
        Hold = "hold",
        /// Declare the gap lost after `gap_deadline_ms` (or once the re-request budget is
        /// spent): consumers get a `gap` event with its range and delivery goes on.
        Skip = "skip",
    }
}

keyword_enum! {
    /// Which Binance market a venue reads.
    pub enum Market {
        /// Spot.
        Spot = "spot",
        /// USDⓈ-margined futures.
        Usdm = "usdm",
        /// Coin-margined futures.
        Coinm = "coinm",
    }
}

keyword_enum! {
    /// Interval of Binance diff-depth updates. Spot offers 100 ms and 1000 ms; USD-M and
    /// COIN-M futures 100, 250 and 500 ms ([`UpdateSpeed::offered`]).
    pub enum UpdateSpeed {
        /// Every 100 ms (`@depth@100ms`, every market).
        Ms100 = "100ms",
        /// Every 250 ms (futures' plain `@depth`).
        Ms250 = "250ms",
        /// Every 500 ms (futures' `@depth@500ms`).
        Ms500 = "500ms",
        /// Every second (spot's plain `@depth`).
        Ms1000 = "1000ms",
    }
}

impl Market {
    /// The stream endpoint used when `ws_url` is omitted.
    pub fn default_ws_url(self) -> &'static str {
        match self {
            Market::Spot => "wss://stream.binance.com:9443/stream",
            Market::Usdm => "wss://fstream.binance.com/public/stream",
            Market::Coinm => "wss://dstream.binance.com/stream",
        }
    }

    /// The REST endpoint used when `rest_url` is omitted.
    pub fn default_rest_url(self) -> &'static str {
        match self {
            Market::Spot => "https://api.binance.com",
            Market::Usdm => "https://fapi.binance.com",
            Market::Coinm => "https://dapi.binance.com",
        }
    }

    /// Whether this is a futures market (other update speeds, no 5000-level depth).
    pub fn is_futures(self) -> bool {
        self != Market::Spot
    }
}

impl UpdateSpeed {
    /// The speeds `market` publishes its diff-depth stream at.
    pub fn offered(market: Market) -> &'static [UpdateSpeed] {
        if market.is_futures() {
            &[UpdateSpeed::Ms100, UpdateSpeed::Ms250, UpdateSpeed::Ms500]
        } else {
            &[UpdateSpeed::Ms100, UpdateSpeed::Ms1000]
        }
    }

    /// The stream name's speed suffix on `market`: `Some(ms)` for `@depth@{ms}ms`, `None`
    /// for the plain `@depth` (1000 ms on spot, 250 ms on futures).
    pub fn suffix_ms(self, market: Market) -> Option<u32> {
        match (self, market.is_futures()) {
            (UpdateSpeed::Ms1000, false) | (UpdateSpeed::Ms250, true) => None,
            (speed, _) => u32::try_from(speed.interval().as_millis()).ok(),
        }
    }

    /// The update interval; zero for real-time.
    pub fn interval(self) -> Duration {
        Duration::from_millis(match self {
            UpdateSpeed::Ms100 => 100,
            UpdateSpeed::Ms250 => 250,
            UpdateSpeed::Ms500 => 500,
            UpdateSpeed::Ms1000 => 1000,
        })
    }
}

/// Process-wide settings, the `[daemon]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    /// Where the Prometheus endpoint listens. Any address is accepted; one that is not loopback
    /// exposes the metrics to the network.
    pub metrics_listen: SocketAddr,
    /// The core the rx thread is pinned to; `None` leaves it to the scheduler.
    pub rx_core: Option<usize>,
    /// What the rx thread does when idle.
    pub idle: Idle,
    /// Slots in each consumer queue.
    pub consumer_queue: PowerOfTwo,
    /// The most detailed log level written.
    pub log_level: LogLevel,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// Where each stream's resume cursor is kept across restarts; `None`: systemd's
    /// `$STATE_DIRECTORY` when set, else no cursors are kept.
    pub state_directory: Option<PathBuf>,
}

impl Default for Daemon {
    /// The values used for keys the file leaves out.
    fn default() -> Self {
        Self {
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            rx_core: None,
            idle: Idle::BusySpin,
            consumer_queue: PowerOfTwo::pow2(16),
            log_level: LogLevel::Info,
            log_format: LogFormat::Auto,
            state_directory: None,
        }
    }
}

/// One feed source, a `[[venue]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Venue {
    /// Unique among the venues of the file.
    pub name: Name,
    /// The protocol and everything that belongs to it.
    pub kind: VenueKind,
}

impl VenueKind {
    /// How many consumer streams the venue has: one per channel or symbol.
    pub fn stream_count(&self) -> usize {
        match self {
            Self::MoldUdp64 { channels, .. } => channels.len(),
            Self::IexTp { channels, .. } => channels.len(),
            Self::Binance { symbols, .. } => symbols.len(),
        }
    }
}

/// A venue's protocol with the settings only that protocol has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VenueKind {
    /// Nasdaq-style MoldUDP64 over multicast, with re-requests and a SoupBinTCP snapshot.
    MoldUdp64 {
        /// Where each stream starts.
        start: Start,
        /// One stream per channel, at least one.
        channels: Vec<Channel<MoldSession>>,
        /// Gap handling for every channel.
        recovery: Recovery,
    },
    /// IEX-TP over multicast.
    IexTp {
        /// Where each stream starts.
        start: Start,
        /// One stream per channel, at least one.
        channels: Vec<Channel<IexSession>>,
        /// Gap handling for every channel.
        recovery: Recovery,
    },
    /// Binance diff-depth streams over WebSocket, resynchronised from REST snapshots.
    Binance {
        /// The market read.
        market: Market,
        /// The combined-stream WebSocket endpoint (`ws` or `wss`).
        ws_url: Url,
        /// The REST endpoint for snapshots (`http` or `https`).
        rest_url: Url,
        /// One stream per symbol, at least one, no repeats.
        symbols: Vec<Symbol>,
        /// Levels per side in a snapshot.
        depth_limit: DepthLimit,
        /// Interval of depth updates.
        update_speed: UpdateSpeed,
        /// REST request weight spent per minute at most.
        weight_budget_per_min: u32,
        /// No message for this long means the connection is dead.
        silence_timeout: Duration,
        /// The connection is replaced after this long, before the server's 24-hour cut.
        ws_max_age: Duration,
        /// Deadlines of opening a connection, pings, and reconnect pacing.
        link: BinanceLink,
        /// Updates held while a snapshot is fetched.
        buffering: Buffering,
        /// A snapshot not complete by then is abandoned and tried again.
        snapshot_timeout: Duration,
    },
}

/// One multicast stream, a `[[venue.channel]]` table; `S` is the protocol's session type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel<S> {
    /// Unique within the venue.
    pub name: Name,
    /// The redundant lines the channel is published on (one or more), in the order
    /// their metrics and logs name them (`a`, `b`, ...).
    pub lines: Vec<Line>,
    /// The session expected first (not a filter): its datagrams are taken at once, any
    /// other session only once confirmed; `None` adopts the first one seen, once confirmed.
    pub session: Option<S>,
    /// Where re-requests go, tried in order: venue servers and JetStream streams.
    pub rerequest: Vec<Rerequest>,
    /// Where a snapshot comes from when re-requests cannot close a gap.
    pub snapshot: Option<Snapshot>,
    /// `SO_RCVBUF` in bytes.
    pub rcvbuf: usize,
}

impl<S> Channel<S> {
    /// The first line's group (every valid channel has one).
    pub fn group(&self) -> Option<MulticastGroup> {
        self.lines.first().map(|l| l.group)
    }
}

/// One entry of a channel's `rerequest` list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rerequest {
    /// A venue's re-request server: 20-byte requests over UDP, answered with datagrams of
    /// the channel's wire.
    Server(SocketAddrV4),
    /// The JetStream stream of the nats sink named (by its `stream`): what a peer instance
    /// published there is read back as if a re-request server answered
    /// (`"jetstream"`, or `"jetstream:STREAM"` where there are several nats sinks).
    JetStream(String),
}

impl Rerequest {
    /// The venue server's address; `None` for a JetStream entry.
    pub fn server(&self) -> Option<SocketAddrV4> {
        match self {
            Rerequest::Server(addr) => Some(*addr),
            Rerequest::JetStream(_) => None,
        }
    }
}

/// One line of a channel: a multicast group joined on one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// The group and port joined.
    pub group: MulticastGroup,
    /// The local address the group is joined on; `0.0.0.0` lets the kernel choose.
    pub interface: Ipv4Addr,
    /// Accept packets from this source only (source-specific multicast).
    pub source: Option<Ipv4Addr>,
}

/// A snapshot service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// A SoupBinTCP session that replays from a sequence number.
    SoupBinTcp {
        /// The server.
        addr: SocketAddrV4,
        /// The login.
        login: SoupLogin,
    },
}

/// How many frames a stream holds while it waits for missing ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffering {
    reorder_window: PowerOfTwo,
    max_buffered: usize,
}

impl Buffering {
    /// The largest reorder window accepted, 2^24 slots.
    pub const MAX_WINDOW: usize = 1 << 24;

    /// Returns `None` unless the window is 2..=2^24 and `max_buffered` is 1..=window.
    pub fn new(reorder_window: PowerOfTwo, max_buffered: usize) -> Option<Self> {
        let window = reorder_window.get();
        let ok = (2..=Self::MAX_WINDOW).contains(&window) && (1..=window).contains(&max_buffered);
        ok.then_some(Self {
            reorder_window,
            max_buffered,
        })
    }

    /// Slots in the reorder ring: how far ahead of the next expected number a frame may land.
    pub fn reorder_window(self) -> PowerOfTwo {
        self.reorder_window
    }

    /// Frames held at most, never more than the window.
    pub fn max_buffered(self) -> usize {
        self.max_buffered
    }
}

/// Gap handling for the streams of a multicast venue, the `[venue.recovery]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Reorder ring and buffer limits.
    pub buffering: Buffering,
    /// Datagrams each channel keeps while they cannot be delivered yet (each up to 2 KiB,
    /// allocated at start): what arrives beyond them is dropped and re-requested.
    pub held_datagrams: usize,
    /// Wait this long after a gap before the first re-request; reordering often fills it.
    pub reorder_delay: Duration,
    /// No answer within this is retried.
    pub request_timeout: Duration,
    /// Messages asked for in one request, 1..=65534.
    pub max_request_count: u16,
    /// Request timeouts without progress (one a `request_timeout` at most, however many
    /// requests were in flight) before a server is given up for the next one, and after
    /// the last for a snapshot.
    pub retry_budget: u32,
    /// Re-requests sent per second at most.
    pub requests_per_sec: u32,
    /// A gap larger than this goes straight to a snapshot.
    pub max_replay: u64,
    /// A backward jump at least this large is a suspected restart; `None` turns it off.
    pub reset_threshold: Option<u64>,
    /// Datagrams of another session in a row that adopt it while the current session has
    /// not announced its end, 1..=16 (1: at once).
    pub session_confirm: u32,
    /// A snapshot not complete by then is abandoned and tried again.
    pub snapshot_timeout: Duration,
    /// What a gap nothing recovers leads to.
    pub gap_policy: GapPolicy,
    /// With [`GapPolicy::Skip`]: a gap still open this long after it appeared is declared
    /// lost.
    pub gap_deadline: Duration,
    /// On a channel with several lines, a gap is asked for only once it has been open
    /// this long (the reorder delay, when longer, holds): another line may fill it.
    pub arbitration_window: Duration,
    /// A line silent this long while another line of its channel is live is down.
    pub line_down: Duration,
}

impl Default for Recovery {
    /// The values used for keys the file leaves out.
    fn default() -> Self {
        Self {
            buffering: Buffering {
                reorder_window: PowerOfTwo::pow2(16),
                max_buffered: 65536,
            },
            held_datagrams: 4096,
            reorder_delay: Duration::from_micros(1000),
            request_timeout: Duration::from_millis(50),
            max_request_count: 1000,
            retry_budget: 5,
            requests_per_sec: 2000,
            max_replay: 100_000,
            reset_threshold: Some(1_000_000),
            session_confirm: 3,
            snapshot_timeout: Duration::from_millis(10_000),
            gap_policy: GapPolicy::Hold,
            gap_deadline: Duration::from_millis(1_000),
            arbitration_window: Duration::from_micros(1_000),
            line_down: Duration::from_millis(2_000),
        }
    }
}

/// Where in-order output goes, a `[[sink]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// One JSON object per line, appended to a file, rotated by size and by age.
    Jsonl {
        /// The file written.
        path: PathBuf,
        /// The file is rotated once it holds this many bytes.
        rotate_bytes: u64,
        /// The file is rotated once it is this old; `None`: by size only.
        rotate_after: Option<Duration>,
        /// Rotated files kept (`PATH.1` the newest); older ones are removed.
        keep: u32,
    },
    /// A Unix stream socket that clients connect to.
    Unix {
        /// The socket path, at most 107 bytes.
        path: PathBuf,
        /// Frames queued per client; a client this far behind is cut off.
        client_queue: PowerOfTwo,
        /// Bytes of recent events kept for clients that connect or resume (a power of two,
        /// 2^16..=2^36), allocated at start.
        history_bytes: u64,
        /// Permission bits of the socket file; a client needs write permission to connect.
        mode: u32,
        /// The group the socket file is given, by name or number; `None`: the process's.
        group: Option<String>,
    },
    /// pcap files of the delivered frames, rotated by size.
    Pcap {
        /// The first file written; rotated files get a numeric suffix.
        path: PathBuf,
        /// A file is closed and a new one started at this size.
        rotate_bytes: u64,
    },
    /// A shared-memory ring file that reader processes map.
    Shm {
        /// The ring file (under a `RuntimeDirectory` or `/dev/shm`).
        path: PathBuf,
        /// Bytes of the ring's data region, a power of two.
        size_bytes: u64,
    },
    /// A NATS JetStream stream that every delivered message and event is published into.
    Nats(Box<NatsSink>),
}

impl Sink {
    /// The file or socket path of the sink; `None` for a sink that writes no file.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Sink::Jsonl { path, .. }
            | Sink::Unix { path, .. }
            | Sink::Pcap { path, .. }
            | Sink::Shm { path, .. } => Some(path),
            Sink::Nats(_) => None,
        }
    }
}

/// A `[[sink]] kind = "nats"` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSink {
    /// The server, `nats://host:port` (or `tls://host:port`); several, comma-separated.
    pub url: String,
    /// The JetStream stream's name; it is created when missing.
    pub stream: String,
    /// First token of every subject: `<prefix>.<venue>.<stream>`.
    pub subject_prefix: String,
    /// The stream's duplicate window: a second copy of a message id within it is dropped.
    pub duplicate_window: Duration,
    /// The stream's retention by age; `None`: kept until limits or an operator remove them.
    pub max_age: Option<Duration>,
    /// Publishes sent and not yet acknowledged, at most.
    pub max_pending: u32,
    /// This instance's name in the headers of its state events.
    pub instance: String,
    /// A NATS credentials file (JWT and nkey seed).
    pub creds: Option<PathBuf>,
    /// CA certificates (PEM) that the server's certificate must chain to; implies TLS.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that verify clients.
    pub tls_client: Option<(PathBuf, PathBuf)>,
}

/// How a Binance venue opens, watches and paces its WebSocket connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinanceLink {
    /// Name resolution may take this long.
    pub resolve_timeout: Duration,
    /// A TCP connect may take this long (each address).
    pub connect_timeout: Duration,
    /// The TLS handshake may take this long.
    pub tls_timeout: Duration,
    /// The WebSocket upgrade may take this long.
    pub upgrade_timeout: Duration,
    /// The client pings this often; zero: never.
    pub ping_interval: Duration,
    /// Open with data for this long, a connection is healthy and the backoff starts over.
    pub healthy_after: Duration,
    /// Connection attempts allowed in any `connect_budget_window`.
    pub connect_budget: u32,
    /// The window of `connect_budget`.
    pub connect_budget_window: Duration,
    /// Permanent connections feeding the same symbols (1 to 4).
    pub connections: u8,
    /// How long a live symbol waits, once every connection is lost, for the next one's
    /// events to link to what was delivered; zero resyncs at once.
    pub relink_timeout: Duration,
    /// A connection being replaced closes once every symbol has linked on its successor,
    /// or after this long.
    pub rotate_timeout: Duration,
}

impl Default for BinanceLink {
    /// 5 s for each step of opening, a ping every 2 s, healthy after 60 s, 60 attempts in
    /// any 300 s (Binance bans an address over 300 in 5 minutes); one connection, 10 s to
    /// link after a loss, 30 s of overlap at a rotation.
    fn default() -> Self {
        Self {
            resolve_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            tls_timeout: Duration::from_secs(5),
            upgrade_timeout: Duration::from_secs(5),
            ping_interval: Duration::from_secs(2),
            healthy_after: Duration::from_secs(60),
            connect_budget: 60,
            connect_budget_window: Duration::from_secs(300),
            connections: 1,
            relink_timeout: Duration::from_secs(10),
            rotate_timeout: Duration::from_secs(30),
        }
    }
}
