//! [`BinanceVenue`]: the Binance session behind the [venue contract](crate::venue), with the
//! connection's lifecycle: when to connect, reconnect with backoff and jitter, and rotate
//! (on `serverShutdown`, before the 24-hour cut, on silence).
//!
//! The driver opens and closes the WebSocket and fetches snapshots; the venue decides when.
//! Each connection gets a new [`ConnId`], so a late event of a connection already given up
//! is told apart from the current one and ignored.

use std::collections::VecDeque;
use std::time::Duration;

use crate::venue::{ConnLimits, ConnStage};

use super::link::Backoff;
use super::session::BinanceSession;
use super::spec::{BinanceSpec, SpecError};
use super::{Market, ReconnectReason, SnapshotResult, SymbolStats, VenueStats};
use crate::config::{Market as ConfigMarket, UpdateSpeed, Venue as VenueConfig, VenueKind};
use crate::time::{Mono, Wall, duration_nanos};
use crate::venue::{
    ChannelStats, ConnEvent, ConnId, Emit, Fetch, FetchId, FetchReply, IoRequest, Notice, Notices,
    StreamInfo, Timer, TimerTable, Venue,
};

/// Notices queued at most.
const NOTICES: usize = 64;

/// Counters of the connection's lifecycle, beside the session's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Connections opened.
    pub connects: u64,
    /// Connections lost or rotated.
    pub disconnects: u64,
    /// Rotations asked for by the session (shutdown notice, age, silence).
    pub rotations: u64,
    /// Connect attempts that failed (at any step).
    pub connect_errors: u64,
    /// Of those, failed name resolution.
    pub resolve_errors: u64,
    /// Of those, failed TCP connects (every address).
    pub tcp_errors: u64,
    /// Of those, failed TLS handshakes.
    pub tls_errors: u64,
    /// Of those, failed WebSocket upgrades.
    pub upgrade_errors: u64,
    /// Of the failures, those where a step's deadline passed.
    pub open_timeouts: u64,
    /// Attempts put off because the window's attempt budget was spent.
    pub connects_deferred: u64,
    /// Connections that proved healthy (open with data for the healthy period).
    pub healthy: u64,
    /// Pings and pongs received (signs of life without data).
    pub alive_signals: u64,
    /// Snapshot fetches that got no answer (refused, reset, timed out, unusable).
    pub snapshot_errors: u64,
    /// Snapshot answers with a status other than 200.
    pub snapshot_bad_status: u64,
    /// Snapshot answers for a fetch the venue did not start (or already gave up).
    pub unknown_fetches: u64,
}

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// None open; the reconnect timer says when to try.
    Down,
    /// Asked for; not open yet.
    Opening,
    /// Open: frames flow.
    Open,
}

/// Every timer of the venue besides the session's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VenueTimer {
    /// The next connection attempt.
    Reconnect,
}

impl Timer for VenueTimer {
    const ALL: &'static [Self] = &[Self::Reconnect];

    fn index(self) -> usize {
        self as usize
    }
}

/// One Binance venue: the session and its connection lifecycle behind the venue contract.
pub struct BinanceVenue {
    name: String,
    session: BinanceSession,
    url: String,
    rest_base: String,
    link: Link,
    conn: ConnId,
    backoff: Backoff,
    /// When the current connection opened, and the frame count then.
    opened_at: (Mono, u64),
    /// Times of the attempts in the current budget window, oldest first.
    attempts: VecDeque<Mono>,
    timers: TimerTable<VenueTimer, 1>,
    inflight: Vec<(FetchId, usize)>,
    next_fetch: u64,
    io: VecDeque<IoRequest>,
    notices: Notices,
    stats: TransportStats,
}

impl BinanceVenue {
    /// A venue streaming `spec`'s symbols from the combined streams at `ws_base` (at
    /// `update_ms`, the venue's default speed when `None`), with snapshots from
    /// `rest_base`. It asks for its first connection at once.
    ///
    /// # Errors
    ///
    /// The [`SpecError`] of an invalid spec.
    pub fn new(
        name: &str,
        spec: BinanceSpec,
        ws_base: &str,
        rest_base: &str,
        update_ms: Option<u32>,
    ) -> Result<Self, SpecError> {
        let url = combined_url(ws_base, &spec.symbols, update_ms);
        let seed = name.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
        });
        let session = BinanceSession::new(spec)?;
        let mut timers = TimerTable::new();
        timers.set(VenueTimer::Reconnect, Mono::ZERO);
        Ok(Self {
            name: name.to_string(),
            session,
            url,
            rest_base: rest_base.trim_end_matches('/').to_string(),
            link: Link::Down,
            conn: ConnId(0),
            backoff: Backoff::new(
                Duration::from_millis(200),
                Duration::from_secs(30),
                0.3,
                seed,
            ),
            opened_at: (Mono::ZERO, 0),
            attempts: VecDeque::with_capacity(64),
            timers,
            inflight: Vec::new(),
            next_fetch: 1,
            io: VecDeque::with_capacity(8),
            notices: Notices::new(NOTICES),
            stats: TransportStats::default(),
        })
    }

    /// The Binance venue `config` describes (its stream ids from `stream_base`).
    ///
    /// # Errors
    ///
    /// The [`SpecError`] of settings that do not make a valid venue, or
    /// [`SpecError::NotBinance`] for another kind of venue.
    pub fn from_config(config: &VenueConfig, stream_base: u16) -> Result<Self, SpecError> {
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
            link,
            buffering,
            snapshot_timeout,
        } = &config.kind
        else {
            return Err(SpecError::NotBinance);
        };
        let market = match market {
            ConfigMarket::Spot => Market::Spot,
            ConfigMarket::Usdm => Market::Usdm,
            ConfigMarket::Coinm => Market::Coinm,
        };
        let names = symbols.iter().map(|s| s.as_str().to_string()).collect();
        let mut spec = BinanceSpec::new(market, names);
        spec.stream_base = stream_base;
        spec.depth_limit = u32::from(depth_limit.get());
        spec.weight_budget_per_min = *weight_budget_per_min;
        spec.silence_timeout_ns = duration_nanos(*silence_timeout);
        spec.ws_max_age_ns = duration_nanos(*ws_max_age);
        spec.resolve_timeout_ns = duration_nanos(link.resolve_timeout);
        spec.connect_timeout_ns = duration_nanos(link.connect_timeout);
        spec.tls_timeout_ns = duration_nanos(link.tls_timeout);
        spec.upgrade_timeout_ns = duration_nanos(link.upgrade_timeout);
        spec.ping_interval_ns = duration_nanos(link.ping_interval);
        spec.healthy_after_ns = duration_nanos(link.healthy_after);
        spec.connect_budget = link.connect_budget;
        spec.connect_window_ns = duration_nanos(link.connect_budget_window);
        spec.snapshot_timeout_ns = duration_nanos(*snapshot_timeout);
        spec.max_pending = buffering.max_buffered().min(1 << 16);
        let speed = match update_speed {
            UpdateSpeed::Realtime => Some(0),
            UpdateSpeed::Ms100 => Some(100),
            UpdateSpeed::Ms250 => None,
            UpdateSpeed::Ms500 => Some(500),
            UpdateSpeed::Ms1000 => Some(1000),
        };
        Self::new(
            config.name.as_str(),
            spec,
            ws_url.as_str(),
            rest_url.as_str(),
            speed,
        )
    }

    /// The session.
    pub fn session(&self) -> &BinanceSession {
        &self.session
    }

    /// The connection's lifecycle counters.
    pub fn transport_stats(&self) -> TransportStats {
        self.stats
    }

    /// The combined-stream URL the venue connects to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The deadlines and ping interval the driver applies to a connection.
    fn limits(&self) -> ConnLimits {
        let spec = self.session.spec();
        ConnLimits {
            resolve_ns: spec.resolve_timeout_ns,
            connect_ns: spec.connect_timeout_ns,
            tls_ns: spec.tls_timeout_ns,
            upgrade_ns: spec.upgrade_timeout_ns,
            ping_ns: spec.ping_interval_ns,
        }
    }

    /// Asks for a new connection at `now`, unless the window's attempt budget is spent:
    /// then the attempt waits until the oldest one leaves the window.
    fn open(&mut self, now: Mono) {
        let (budget, window) = {
            let spec = self.session.spec();
            (spec.connect_budget, spec.connect_window_ns)
        };
        while self
            .attempts
            .front()
            .is_some_and(|t| now.nanos_since(*t) >= window)
        {
            self.attempts.pop_front();
        }
        if self.attempts.len() >= budget as usize
            && let Some(oldest) = self.attempts.front()
        {
            let at = oldest.after_nanos(window);
            self.stats.connects_deferred += 1;
            self.timers.set(VenueTimer::Reconnect, at);
            self.notices.push(Notice::ConnectDeferred {
                budget,
                window_secs: window / 1_000_000_000,
                retry_ns: at.nanos_since(now),
            });
            return;
        }
        self.attempts.push_back(now);
        self.conn = ConnId(self.conn.0.wrapping_add(1));
        self.link = Link::Opening;
        self.io.push_back(IoRequest::Open {
            conn: self.conn,
            url: self.url.clone(),
            limits: self.limits(),
        });
    }

    /// The connection asked for is open (once per connection). The backoff is not reset
    /// here: a server that accepts and drops would be hammered. See [`Self::lost`].
    fn opened(&mut self, now: Mono) {
        if self.link == Link::Opening {
            self.link = Link::Open;
            self.stats.connects += 1;
            self.opened_at = (now, self.session.venue_stats().frames);
            self.session.on_connected(now.as_nanos());
        }
    }

    /// The connection is gone (lost, failed or rotated): every symbol loses sync and the
    /// next attempt is due after the backoff, which starts again from its first delay
    /// only if the connection proved healthy: open for [`BinanceSpec::healthy_after_ns`]
    /// with data.
    fn lost(&mut self, now: Mono, emit: &mut impl Emit) {
        if self.link == Link::Open {
            self.stats.disconnects += 1;
            let (since, frames) = self.opened_at;
            let healthy = now.nanos_since(since) >= self.session.spec().healthy_after_ns
                && self.session.venue_stats().frames > frames;
            if healthy {
                self.stats.healthy += 1;
                self.backoff.reset();
                self.notices
                    .push(Notice::ConnectionHealthy { conn: self.conn });
            }
        }
        self.link = Link::Down;
        self.session.on_disconnected(now.as_nanos(), emit);
        let attempts = self.backoff.attempts();
        let delay = duration_nanos(self.backoff.next_delay());
        self.timers
            .set(VenueTimer::Reconnect, now.after_nanos(delay));
        self.notices.push(Notice::ConnectionLost {
            conn: self.conn,
            retry_ns: delay,
            attempts,
        });
    }

    /// Starts every snapshot request the session has due at `now`.
    fn start_fetches(&mut self, now: Mono) {
        while let Some(request) = self.session.poll_snapshot(now.as_nanos()) {
            let id = FetchId(self.next_fetch);
            self.next_fetch += 1;
            self.inflight.push((id, request.symbol));
            self.notices.push(Notice::SnapshotRequested {
                stream: request.symbol,
                cost: request.weight,
                budget_used: self.session.weight_used_last_minute(),
            });
            self.io.push_back(IoRequest::Fetch {
                id,
                stream: request.symbol,
                what: Fetch::Http {
                    url: format!("{}{}", self.rest_base, request.path_and_query),
                },
                timeout_ns: self.session.spec().snapshot_timeout_ns,
            });
        }
    }
}

impl Venue for BinanceVenue {
    fn name(&self) -> &str {
        &self.name
    }

    fn handle_frame<E: Emit>(
        &mut self,
        now: Mono,
        conn: ConnId,
        frame: &[u8],
        recv: Wall,
        emit: &mut E,
    ) {
        if conn != self.conn || self.link == Link::Down {
            return;
        }
        // The driver may hand over frames read in the same step that finished the
        // handshake, before it reports the connection open.
        self.opened(now);
        self.session
            .on_text(now.as_nanos(), recv.as_nanos(), frame, emit);
    }

    fn handle_connection<E: Emit>(
        &mut self,
        now: Mono,
        conn: ConnId,
        event: ConnEvent<'_>,
        emit: &mut E,
    ) {
        if conn != self.conn || self.link == Link::Down {
            // A connection given up already (rotated, or failed before).
            return;
        }
        match event {
            ConnEvent::Opened => self.opened(now),
            ConnEvent::Alive => {
                self.stats.alive_signals += 1;
                self.session.on_alive(now.as_nanos());
            }
            ConnEvent::Failed {
                stage, timed_out, ..
            } => {
                self.stats.connect_errors += 1;
                match stage {
                    ConnStage::Resolve => self.stats.resolve_errors += 1,
                    ConnStage::Connect => self.stats.tcp_errors += 1,
                    ConnStage::Tls => self.stats.tls_errors += 1,
                    ConnStage::Upgrade => self.stats.upgrade_errors += 1,
                }
                if timed_out {
                    self.stats.open_timeouts += 1;
                }
                self.lost(now, emit);
            }
            ConnEvent::Closed(_) => self.lost(now, emit),
        }
    }

    fn handle_fetch<E: Emit>(
        &mut self,
        now: Mono,
        id: FetchId,
        reply: FetchReply<'_>,
        emit: &mut E,
    ) {
        let Some(at) = self.inflight.iter().position(|(i, _)| *i == id) else {
            self.stats.unknown_fetches += 1;
            return;
        };
        let (_, symbol) = self.inflight.swap_remove(at);
        let result = match reply {
            FetchReply::Http {
                status: 200, body, ..
            } => SnapshotResult::Body(body),
            FetchReply::Http {
                status,
                retry_after_secs,
                ..
            } => {
                self.stats.snapshot_bad_status += 1;
                SnapshotResult::Status {
                    code: status,
                    retry_after_secs,
                }
            }
            FetchReply::Message(_) | FetchReply::End { .. } | FetchReply::Failed(_) => {
                self.stats.snapshot_errors += 1;
                SnapshotResult::Failed
            }
        };
        self.session
            .on_snapshot(now.as_nanos(), symbol, result, emit);
        self.start_fetches(now);
    }

    fn handle_timeout<E: Emit>(&mut self, now: Mono, emit: &mut E) {
        if self.link == Link::Down && self.timers.is_due(VenueTimer::Reconnect, now) {
            self.timers.stop(VenueTimer::Reconnect);
            self.open(now);
        }
        if self.link == Link::Open
            && let Some(reason) = self.session.poll_reconnect(now.as_nanos())
        {
            self.stats.rotations += 1;
            let why = match reason {
                ReconnectReason::ServerShutdown => "server shutdown notice",
                ReconnectReason::MaxAge => "connection age",
                ReconnectReason::Silence => "silence",
            };
            self.notices.push(Notice::Reconnecting {
                conn: self.conn,
                why,
            });
            self.io.push_back(IoRequest::Close { conn: self.conn });
            // A rotation waits out the backoff like any other loss: after a healthy
            // connection that is its first, short delay; a connection that keeps going
            // silent backs off further each time.
            self.lost(now, emit);
        }
        if self
            .session
            .poll_timeout()
            .is_some_and(|t| t <= now.as_nanos())
        {
            self.session.handle_timeout(now.as_nanos(), emit);
        }
        self.start_fetches(now);
    }

    fn poll_timeout(&self) -> Option<Mono> {
        let session = self.session.poll_timeout().map(Mono::from_nanos);
        [self.timers.next(), session].into_iter().flatten().min()
    }

    fn poll_io(&mut self) -> Option<IoRequest> {
        self.io.pop_front()
    }

    fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop()
    }

    fn stream_count(&self) -> usize {
        self.session.symbol_count()
    }

    fn stream(&self, index: usize) -> Option<StreamInfo<'_>> {
        Some(StreamInfo {
            name: self.session.symbol_name(index)?,
            id: self.session.stream_id(index),
            state: self.session.published_state(index),
            stats: channel_stats(&self.session.stats(index)),
        })
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let v: VenueStats = self.session.venue_stats();
        let t = self.stats;
        vec![
            ("frames", v.frames),
            ("frame_bytes", v.bytes),
            ("depth_events", v.depth_events),
            ("ignored_events", v.ignored),
            ("unknown_events", v.unknown_events),
            ("unknown_symbol_events", v.unknown_symbol),
            ("malformed_frames", v.malformed),
            ("hostile_ids", v.hostile_ids),
            ("server_shutdowns", v.server_shutdowns),
            ("connects", t.connects),
            ("disconnects", t.disconnects),
            ("rotations", t.rotations),
            ("connect_errors", t.connect_errors),
            ("resolve_errors", t.resolve_errors),
            ("tcp_errors", t.tcp_errors),
            ("tls_errors", t.tls_errors),
            ("upgrade_errors", t.upgrade_errors),
            ("open_timeouts", t.open_timeouts),
            ("connects_deferred", t.connects_deferred),
            ("healthy_connections", t.healthy),
            ("alive_signals", t.alive_signals),
            ("snapshot_errors", t.snapshot_errors),
            ("snapshot_bad_status", t.snapshot_bad_status),
            ("unknown_fetches", t.unknown_fetches),
            ("quiet_symbols", self.session.quiet_symbols() as u64),
            (
                "snapshot_weight_used",
                u64::from(self.session.weight_used_last_minute()),
            ),
        ]
    }
}

/// A symbol's counters in the shape the status lines and metrics use.
pub fn channel_stats(s: &SymbolStats) -> ChannelStats {
    ChannelStats {
        messages: s.events,
        malformed: s.malformed,
        snapshots_started: s.snapshot_requests,
        snapshots_done: s.snapshots_applied,
        snapshots_failed: s.snapshots_failed,
        sequencer: crate::sequencer::StreamStats {
            delivered: s.applied,
            gaps: s.breaks,
            duplicates: s.duplicates.saturating_add(s.dropped_stale),
            resyncs: s.resyncs,
            buffered: s.buffered,
            buffered_hwm: s.buffered_hwm,
            overflows: s.overflowed,
            ..crate::sequencer::StreamStats::default()
        },
        ..ChannelStats::default()
    }
}

/// A combined-stream URL for the depth streams of `symbols`:
/// `{base}/stream?streams=btcusdt@depth@100ms/ethusdt@depth@100ms`.
/// Symbols are lower-cased; `speed_ms` `None` gives the venue's default speed (`@depth`),
/// `Some(100)` gives `@depth@100ms`. A `base` already ending in `/stream` is taken as is.
///
/// ```
/// use gapless::venue::binance::combined_url;
///
/// let url = combined_url("wss://stream.binance.com:9443", &["BTCUSDT", "ethusdt"], Some(100));
/// assert_eq!(
///     url,
///     "wss://stream.binance.com:9443/stream?streams=btcusdt@depth@100ms/ethusdt@depth@100ms"
/// );
/// ```
pub fn combined_url<S: AsRef<str>>(base: &str, symbols: &[S], speed_ms: Option<u32>) -> String {
    let base = base.trim_end_matches('/').trim_end_matches("/stream");
    let suffix = speed_ms.map(|ms| format!("@{ms}ms")).unwrap_or_default();
    let streams: Vec<String> = symbols
        .iter()
        .map(|s| format!("{}@depth{suffix}", s.as_ref().to_ascii_lowercase()))
        .collect();
    format!("{base}/stream?streams={}", streams.join("/"))
}
