//! What a MoldUDP64 or IEX-TP venue is built from: its channels, where they listen and how
//! they recover, and the mapping from the configuration.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use super::recovery::RequestPolicy;
use super::wire::{SessionKey, Wire};
use crate::config::{self, Channel, Recovery, Rerequest, Snapshot, Start, Venue, VenueKind};
use crate::time::duration_nanos;
use crate::venue::GapPolicy;

/// How to reach a channel's snapshot service (SoupBinTCP, GLIMPSE-style).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSpec {
    /// TCP address of the snapshot server.
    pub addr: SocketAddr,
    /// Login user name.
    pub username: String,
    /// Login password.
    pub password: String,
}

/// One multicast line a channel is published on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineSpec {
    /// Group and port.
    pub group: SocketAddrV4,
    /// Local interface to join on (`0.0.0.0`: the kernel chooses).
    pub interface: Ipv4Addr,
    /// Accept datagrams from this source only.
    pub source: Option<Ipv4Addr>,
    /// Receive buffer to ask for (bytes).
    pub rcvbuf: usize,
}

impl LineSpec {
    /// A line on `group`, joined on loopback, any source, a 4 MiB receive buffer.
    pub fn loopback(group: SocketAddrV4) -> Self {
        Self {
            group,
            interface: Ipv4Addr::LOCALHOST,
            source: None,
            rcvbuf: 4 << 20,
        }
    }
}

/// One channel of a venue: one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    /// Name for logs and metrics.
    pub name: String,
    /// The multicast lines it is published on (one today).
    pub lines: Vec<LineSpec>,
    /// The session to expect first; adopted from the first packet when `None`.
    pub session: Option<SessionKey>,
    /// Re-request servers, tried in order.
    pub rerequest: Vec<SocketAddr>,
    /// Those of `rerequest` that are a peer's JetStream stream read back (`"jetstream"`
    /// entries): they answer a request for what the peer has not published yet with a
    /// heartbeat giving the next sequence they hold, and are waited for while that rises
    /// (see [`recovery`](super::recovery)).
    pub peer_stores: Vec<SocketAddr>,
    /// Snapshot service, if any.
    pub snapshot: Option<SnapshotSpec>,
    /// Where an earlier run of the daemon left the channel's stream: if the first session
    /// seen is this one, the stream resumes at its cursor (and what was missed in between
    /// is recovered like any gap) instead of by the start rule.
    pub resume: Option<Resume>,
}

/// A stream's resume cursor: its epoch label and the next sequence it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The epoch label, as [`crate::publish::Event::Epoch`] gives it.
    pub label: String,
    /// The next sequence the stream needs.
    pub next: u64,
}

impl ChannelSpec {
    /// A channel named `name` on one line, with no recovery path.
    pub fn new(name: &str, line: LineSpec) -> Self {
        Self {
            name: name.to_string(),
            lines: vec![line],
            session: None,
            rerequest: Vec::new(),
            peer_stores: Vec::new(),
            snapshot: None,
            resume: None,
        }
    }
}

/// A venue's channels and how they are sequenced and recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedSpec {
    /// The wire format.
    pub wire: Wire,
    /// Stream id of the first channel in consumer events; channel `i` is `stream_base + i`.
    /// The ids must fit a u16 (`stream_base + channels.len()` at most 65,536), or the
    /// last channels share id 65,535; the daemon's configuration check ensures it.
    pub stream_base: u16,
    /// The channels.
    pub channels: Vec<ChannelSpec>,
    /// Reorder window per stream (slots).
    pub window: usize,
    /// Messages buffered per stream at most.
    pub max_buffered: usize,
    /// A backward jump this large is a suspected restart (0 = off).
    pub reset_threshold: u64,
    /// `Some(n)`: the first session starts at `n` and everything before the first packet
    /// seen is missing. `None`: adopt the first packet as the baseline (live start).
    pub start_from: Option<u64>,
    /// Re-request tuning.
    pub policy: RequestPolicy,
    /// A gap larger than this goes to the snapshot (when there is one).
    pub max_replay: u64,
    /// A snapshot not finished within this is abandoned and retried.
    pub snapshot_timeout_ns: u64,
    /// Wait this long before retrying a failed snapshot.
    pub snapshot_retry_ns: u64,
    /// Largest datagram kept for reordering (bytes).
    pub max_datagram: usize,
    /// Datagrams kept for reordering per channel at most.
    pub arena_datagrams: usize,
    /// Datagrams of another session in a row, with none of the current one between them,
    /// that make it the channel's session when the current one has not announced its end
    /// (1: at once); the first session of a channel with none configured is confirmed the
    /// same way. Those before the last are held and delivered once it is adopted, so a
    /// restart loses nothing, while a stray datagram or two on the group never retire the
    /// real session. A session left behind takes the channel back the same way (with two
    /// datagrams at least), resuming where its stream had got to, unless it announced
    /// its end.
    pub session_confirm: u32,
    /// What to do with a gap nothing can recover.
    pub gap_policy: GapPolicy,
    /// With [`GapPolicy::Skip`]: a gap still open this long after it appeared is declared
    /// lost, whether or not re-requests for it are still going on.
    pub gap_deadline_ns: u64,
    /// When a datagram cannot be held (past the reorder window, over the buffer cap, or
    /// no free datagram slot), declare the oldest gaps lost until it can, rather than
    /// drop it and resynchronise. For inputs where nothing can be re-requested (a
    /// capture), with a reorder delay that never ends: a gap is then held while memory
    /// allows, and exactly what had not arrived is declared lost.
    pub make_room: bool,
    /// On a channel with more than one line, no gap is asked for before this long after it
    /// appeared, so another line can fill it first (the reorder delay, when longer, holds).
    pub arbitration_window_ns: u64,
    /// A line silent this long while another line of its channel is live is down.
    pub line_down_ns: u64,
}

impl FeedSpec {
    /// A spec with defaults suited to a live MoldUDP64 or IEX-TP venue.
    pub fn new(wire: Wire, channels: Vec<ChannelSpec>) -> Self {
        Self {
            wire,
            stream_base: 0,
            channels,
            window: 65_536,
            max_buffered: 65_536,
            reset_threshold: 1_000_000,
            start_from: None,
            policy: RequestPolicy::default(),
            max_replay: 100_000,
            snapshot_timeout_ns: 10_000_000_000,
            snapshot_retry_ns: 1_000_000_000,
            max_datagram: 2048,
            arena_datagrams: 4096,
            session_confirm: 3,
            gap_policy: GapPolicy::Hold,
            gap_deadline_ns: 1_000_000_000,
            make_room: false,
            arbitration_window_ns: 1_000_000,
            line_down_ns: 2_000_000_000,
        }
    }
}

/// The spec of a MoldUDP64 or IEX-TP venue of the configuration (`None` for other kinds),
/// its consumer stream ids from `stream_base`.
pub fn spec_from_config(venue: &Venue, stream_base: u16) -> Option<FeedSpec> {
    spec_from_config_with(venue, stream_base, &|_, _| None)
}

/// Where a channel's JetStream re-requests go: given the nats sink's stream and the
/// channel's name, the local address of what answers them for that channel; `None` leaves
/// the entry out.
pub type JetStreamServers<'a> = &'a dyn Fn(&str, &str) -> Option<SocketAddr>;

/// [`spec_from_config`], with the addresses that answer its channels' `"jetstream"`
/// re-request entries.
pub fn spec_from_config_with(
    venue: &Venue,
    stream_base: u16,
    jetstream: JetStreamServers<'_>,
) -> Option<FeedSpec> {
    let (wire, start, channels, recovery) = match &venue.kind {
        VenueKind::MoldUdp64 {
            start,
            channels,
            recovery,
        } => (
            Wire::MoldUdp64,
            *start,
            channels
                .iter()
                .map(|c| channel_spec(c, c.session.map(|s| SessionKey(*s.as_bytes())), jetstream))
                .collect::<Vec<_>>(),
            recovery,
        ),
        VenueKind::IexTp {
            start,
            channels,
            recovery,
        } => (
            Wire::IexTp,
            *start,
            channels
                .iter()
                .map(|c| channel_spec(c, c.session.map(|s| SessionKey::iex(s.0)), jetstream))
                .collect(),
            recovery,
        ),
        VenueKind::Binance { .. } => return None,
    };
    let mut spec = FeedSpec::new(wire, channels);
    spec.stream_base = stream_base;
    apply_recovery(&mut spec, recovery);
    spec.start_from = (start == Start::FromStart).then_some(1);
    Some(spec)
}

fn channel_spec<S>(
    c: &Channel<S>,
    session: Option<SessionKey>,
    jetstream: JetStreamServers<'_>,
) -> ChannelSpec {
    // Each entry's address, and whether it is a peer's JetStream stream read back.
    let servers: Vec<(SocketAddr, bool)> = c
        .rerequest
        .iter()
        .filter_map(|r| match r {
            Rerequest::Server(addr) => Some((SocketAddr::V4(*addr), false)),
            Rerequest::JetStream(stream) => Some((jetstream(stream, c.name.as_str())?, true)),
        })
        .collect();
    ChannelSpec {
        name: c.name.as_str().to_string(),
        lines: c
            .lines
            .iter()
            .map(|l| LineSpec {
                group: l.group.addr(),
                interface: l.interface,
                source: l.source,
                rcvbuf: c.rcvbuf,
            })
            .collect(),
        session,
        resume: None,
        rerequest: servers.iter().map(|&(addr, _)| addr).collect(),
        peer_stores: servers
            .iter()
            .filter(|&&(_, peer)| peer)
            .map(|&(addr, _)| addr)
            .collect(),
        snapshot: c.snapshot.as_ref().map(|s| match s {
            Snapshot::SoupBinTcp { addr, login } => SnapshotSpec {
                addr: SocketAddr::V4(*addr),
                username: login.username().to_string(),
                password: login.password().to_string(),
            },
        }),
    }
}

fn apply_recovery(spec: &mut FeedSpec, r: &Recovery) {
    spec.window = r.buffering.reorder_window().get();
    spec.max_buffered = r.buffering.max_buffered();
    spec.arena_datagrams = r.held_datagrams;
    spec.reset_threshold = r.reset_threshold.unwrap_or(0);
    spec.max_replay = r.max_replay;
    spec.session_confirm = r.session_confirm;
    spec.snapshot_timeout_ns = duration_nanos(r.snapshot_timeout);
    spec.gap_policy = match r.gap_policy {
        config::GapPolicy::Hold => GapPolicy::Hold,
        config::GapPolicy::Skip => GapPolicy::Skip,
    };
    spec.gap_deadline_ns = duration_nanos(r.gap_deadline);
    spec.arbitration_window_ns = duration_nanos(r.arbitration_window);
    spec.line_down_ns = duration_nanos(r.line_down);
    spec.policy = RequestPolicy {
        reorder_delay_ns: duration_nanos(r.reorder_delay),
        request_timeout_ns: duration_nanos(r.request_timeout),
        max_request_count: r.max_request_count,
        retry_budget: r.retry_budget,
        requests_per_sec: r.requests_per_sec,
    };
}
