//! From configuration to the venue sessions' specifications.

use std::net::SocketAddr;

use thiserror::Error;

use crate::config::{Channel, Config, Recovery, Snapshot, Start, Venue, VenueKind};
use crate::drive::replay::ReplayOptions;
use crate::venue::{ChannelSpec, FeedSpec, RequestPolicy, SessionKey, SnapshotSpec, Wire};

/// Why a configuration cannot drive what was asked of it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    /// The configuration has no venue of a kind replay can read.
    #[error("no moldudp64 or iex-tp venue to replay")]
    NoUdpVenue,
}

/// The session specification of a MoldUDP64 or IEX-TP venue (`None` for other kinds).
/// Consumer stream ids start at `stream_base`.
pub fn feed_spec(venue: &Venue, stream_base: u16) -> Option<FeedSpec> {
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
                .map(|c| channel_spec(c, c.session.map(|s| SessionKey(*s.as_bytes()))))
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
                .map(|c| channel_spec(c, c.session.map(|s| SessionKey::iex(s.0))))
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

fn channel_spec<S>(c: &Channel<S>, session: Option<SessionKey>) -> ChannelSpec {
    ChannelSpec {
        name: c.name.as_str().to_string(),
        session,
        rerequest: c.rerequest.iter().map(|a| SocketAddr::V4(*a)).collect(),
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
    spec.reset_threshold = r.reset_threshold.unwrap_or(0);
    spec.max_replay = r.max_replay;
    spec.session_confirm = r.session_confirm;
    spec.snapshot_timeout_ns = duration_ns(r.snapshot_timeout);
    spec.policy = RequestPolicy {
        reorder_delay_ns: duration_ns(r.reorder_delay),
        request_timeout_ns: duration_ns(r.request_timeout),
        max_request_count: r.max_request_count,
        retry_budget: r.retry_budget,
        requests_per_sec: r.requests_per_sec,
    };
}

fn duration_ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Takes the protocol, destinations and venue name for a replay from the first
/// MoldUDP64 or IEX-TP venue of `config`.
pub fn apply_replay_config(config: &Config, options: &mut ReplayOptions) -> Result<(), SpecError> {
    let venue = config
        .venues
        .iter()
        .find(|v| !matches!(v.kind, VenueKind::Binance { .. }))
        .ok_or(SpecError::NoUdpVenue)?;
    let spec = feed_spec(venue, 0).ok_or(SpecError::NoUdpVenue)?;
    options.wire = spec.wire;
    options.venue = venue.name.as_str().to_string();
    options.destinations = match &venue.kind {
        VenueKind::MoldUdp64 {
            channels, start, ..
        } => {
            options.from_start = *start == Start::FromStart;
            channels.iter().map(|c| c.group.addr()).collect()
        }
        VenueKind::IexTp {
            channels, start, ..
        } => {
            options.from_start = *start == Start::FromStart;
            channels.iter().map(|c| c.group.addr()).collect()
        }
        VenueKind::Binance { .. } => Vec::new(),
    };
    Ok(())
}

/// The session specification of a Binance venue (`None` for other kinds), with its
/// WebSocket base, REST base and update interval.
pub fn binance_spec(
    venue: &Venue,
    stream_base: u16,
) -> Option<(
    crate::venue::binance::BinanceSpec,
    String,
    String,
    Option<u32>,
)> {
    use crate::config::{Market, UpdateSpeed};
    use crate::venue::binance::{BinanceSpec, Market as M};
    let VenueKind::Binance {
        market,
        ws_url,
        rest_url,
        symbols,
        depth_limit,
        update_speed,
        weight_budget_per_min,
        silence_timeout,
        ws_max_age,
        buffering,
        snapshot_timeout,
    } = &venue.kind
    else {
        return None;
    };
    let m = match market {
        Market::Spot => M::Spot,
        Market::Usdm => M::Usdm,
        Market::Coinm => M::Coinm,
    };
    let mut spec = BinanceSpec::new(m, symbols.iter().map(|s| s.as_str().to_string()).collect());
    spec.stream_base = stream_base;
    spec.depth_limit = u32::from(depth_limit.get());
    spec.weight_budget_per_min = *weight_budget_per_min;
    spec.silence_timeout_ns = duration_ns(*silence_timeout);
    spec.ws_max_age_ns = duration_ns(*ws_max_age);
    spec.snapshot_timeout_ns = duration_ns(*snapshot_timeout);
    spec.max_pending = buffering.max_buffered().min(1 << 16);
    let speed = match update_speed {
        UpdateSpeed::Realtime => Some(0),
        UpdateSpeed::Ms100 => Some(100),
        UpdateSpeed::Ms250 => None,
        UpdateSpeed::Ms500 => Some(500),
        UpdateSpeed::Ms1000 => Some(1000),
    };
    Some((
        spec,
        ws_url.as_str().to_string(),
        rest_url.as_str().to_string(),
        speed,
    ))
}
