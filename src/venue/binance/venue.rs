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
use super::session::{BinanceSession, MAX_LINKS};
use super::spec::{BinanceSpec, SpecError};
use super::{Market, ReconnectReason, SnapshotResult, SymbolStats, VenueStats};
use crate::config::{Market as ConfigMarket, Venue as VenueConfig, VenueKind};
use crate::time::{Mono, Wall, duration_nanos};
use crate::venue::{
    ChannelStats, ConnEvent, ConnId, Emit, Fetch, FetchId, FetchReply, IoRequest, Notice, Notices,
    StreamInfo, Venue,
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
    /// Of those, rotations that opened the successor before closing the old connection.
    pub overlapped_rotations: u64,
    /// Old connections closed because every live symbol had linked on the successor.
    pub rotations_linked: u64,
    /// Old connections closed because the overlap's deadline passed first.
    pub rotations_timed_out: u64,
    /// Frames and connection events of a connection already given up, ignored.
    pub stale_conn_events: u64,
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

/// Where a connection slot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// None open; `reconnect_at` says when to try, if the slot is kept.
    Down,
    /// Asked for; not open yet.
    Opening,
    /// Open: frames flow.
    Open,
}

/// One connection slot. Each shard of the symbols has its own slots (see
/// [`BinanceSession::shards`]); a shard's first `connections` slots start permanent, and a
/// rotation opens the successor in a free slot of the same shard, which becomes permanent
/// in place of the one it replaces.
struct Line {
    conn: ConnId,
    link: Link,
    /// Reconnected when lost (a slot being replaced, or freed, is not).
    permanent: bool,
    /// The next attempt, for a permanent slot that is down.
    reconnect_at: Option<Mono>,
    /// When the connection opened, and the venue's frame count then.
    opened_at: (Mono, u64),
    /// Being replaced by the connection in this slot; closed once every live symbol has
    /// linked on it, or at the deadline.
    retiring: Option<(usize, Mono)>,
    backoff: Backoff,
}

/// One Binance venue: the session and its connections' lifecycle behind the venue contract.
pub struct BinanceVenue {
    name: String,
    session: BinanceSession,
    /// The combined-stream URL of each shard.
    urls: Vec<String>,
    /// Slots of each shard.
    per_shard: usize,
    rest_base: String,
    lines: Vec<Line>,
    /// The last connection number handed out; each attempt gets the next.
    conn: ConnId,
    /// Times of the attempts in the current budget window, oldest first (every slot).
    attempts: VecDeque<Mono>,
    inflight: Vec<(FetchId, usize)>,
    next_fetch: u64,
    io: VecDeque<IoRequest>,
    notices: Notices,
    stats: TransportStats,
    /// A frame arrived while a rotation is under way: whether it can end is looked at in
    /// the next timeout call (once a loop cycle, not once a frame).
    rotation_check: Option<Mono>,
}

impl BinanceVenue {
    /// A venue streaming `spec`'s symbols from the combined streams at `ws_base` (at
    /// `update_ms`, the venue's default speed when `None`), with snapshots from
    /// `rest_base`. It asks for its first connections at once.
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
        let urls: Vec<String> = spec
            .shards()
            .into_iter()
            .map(|r| combined_url(ws_base, spec.symbols.get(r).unwrap_or_default(), update_ms))
            .collect();
        let per_shard = spec.slots_per_shard();
        let seed = name.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
        });
        let session = BinanceSession::new(spec)?;
        let permanent = session.spec().connections;
        let lines = (0..(urls.len() * per_shard).min(MAX_LINKS))
            .map(|k| Line {
                conn: ConnId(0),
                link: Link::Down,
                permanent: k % per_shard < permanent,
                reconnect_at: (k % per_shard < permanent).then_some(Mono::ZERO),
                opened_at: (Mono::ZERO, 0),
                retiring: None,
                backoff: Backoff::new(
                    Duration::from_millis(200),
                    Duration::from_secs(30),
                    0.3,
                    seed ^ (k as u64).wrapping_mul(0x9E37_79B9),
                ),
            })
            .collect();
        Ok(Self {
            name: name.to_string(),
            session,
            urls,
            per_shard,
            rest_base: rest_base.trim_end_matches('/').to_string(),
            lines,
            conn: ConnId(0),
            attempts: VecDeque::with_capacity(64),
            inflight: Vec::new(),
            next_fetch: 1,
            io: VecDeque::with_capacity(8),
            notices: Notices::new(NOTICES),
            stats: TransportStats::default(),
            rotation_check: None,
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
        let market_config = market;
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
        spec.connections = usize::from(link.connections);
        spec.relink_timeout_ns = duration_nanos(link.relink_timeout);
        spec.rotate_timeout_ns = duration_nanos(link.rotate_timeout);
        spec.max_pending = buffering.max_buffered().min(1 << 16);
        let speed = update_speed.suffix_ms(*market_config);
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

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.lines.iter().filter(|l| l.link == Link::Open).count()
    }

    /// The combined-stream URL of the first shard (every symbol's, with one shard).
    pub fn url(&self) -> &str {
        self.urls.first().map_or("", String::as_str)
    }

    /// The combined-stream URL of each shard of the symbols.
    pub fn urls(&self) -> &[String] {
        &self.urls
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

    /// The slot of connection `conn`, if it is one the venue still follows.
    fn line_of(&self, conn: ConnId) -> Option<usize> {
        self.lines
            .iter()
            .position(|l| l.conn == conn && l.link != Link::Down)
    }

    /// Asks for a new connection in slot `k` at `now`, unless the window's attempt budget
    /// is spent: then the attempt waits until the oldest one leaves the window.
    fn open(&mut self, k: usize, now: Mono) {
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
            if let Some(line) = self.lines.get_mut(k) {
                line.reconnect_at = Some(at);
            }
            self.notices.push(Notice::ConnectDeferred {
                budget,
                window_secs: window / 1_000_000_000,
                retry_ns: at.nanos_since(now),
            });
            return;
        }
        let Some(line) = self.lines.get_mut(k) else {
            return;
        };
        self.attempts.push_back(now);
        self.conn = ConnId(self.conn.0.wrapping_add(1));
        line.conn = self.conn;
        line.link = Link::Opening;
        line.reconnect_at = None;
        let url = self
            .urls
            .get(k / self.per_shard.max(1))
            .cloned()
            .unwrap_or_default();
        self.io.push_back(IoRequest::Open {
            conn: self.conn,
            url,
            limits: self.limits(),
        });
    }

    /// The connection of slot `k` is open (once per connection). The backoff is not reset
    /// here: a server that accepts and drops would be hammered. See [`Self::lost`].
    fn opened(&mut self, k: usize, now: Mono) {
        let frames = self.session.venue_stats().frames;
        if let Some(line) = self.lines.get_mut(k)
            && line.link == Link::Opening
        {
            line.link = Link::Open;
            line.opened_at = (now, frames);
            self.stats.connects += 1;
            self.session.on_link_up(k, now.as_nanos());
        }
    }

    /// The connection of slot `k` is gone (lost, failed or closed by the venue). The
    /// session is told (symbols carry on from another open slot, or wait to link on the
    /// next connection). A permanent slot tries again after its backoff, which starts
    /// again from its first delay only if the connection proved healthy: open for
    /// [`BinanceSpec::healthy_after_ns`] with data.
    fn lost(&mut self, k: usize, now: Mono, emit: &mut impl Emit) {
        let healthy_after = self.session.spec().healthy_after_ns;
        let frames = self.session.venue_stats().frames;
        let Some(line) = self.lines.get_mut(k) else {
            return;
        };
        if line.link == Link::Open {
            self.stats.disconnects += 1;
            let (since, then) = line.opened_at;
            if now.nanos_since(since) >= healthy_after && frames > then {
                self.stats.healthy += 1;
                line.backoff.reset();
                self.notices
                    .push(Notice::ConnectionHealthy { conn: line.conn });
            }
        }
        line.link = Link::Down;
        line.retiring = None;
        let conn = line.conn;
        let retry = line.permanent.then(|| {
            let attempts = line.backoff.attempts();
            let delay = duration_nanos(line.backoff.next_delay());
            line.reconnect_at = Some(now.after_nanos(delay));
            (delay, attempts)
        });
        self.session.on_link_down(k, now.as_nanos(), emit);
        if let Some((retry_ns, attempts)) = retry {
            self.notices.push(Notice::ConnectionLost {
                conn,
                retry_ns,
                attempts,
            });
        }
    }

    /// Closes the connection of slot `k` on the venue's own decision.
    fn close(&mut self, k: usize, now: Mono, emit: &mut impl Emit) {
        if let Some(line) = self.lines.get(k)
            && line.link != Link::Down
        {
            self.io.push_back(IoRequest::Close { conn: line.conn });
            self.lost(k, now, emit);
        }
    }

    /// Replaces the open connection of slot `k` for `reason`: make-before-break on a
    /// shutdown notice and for age (the successor opens in a free slot and both feed the
    /// session until every symbol has linked on it); at once on silence, since a silent
    /// connection carries nothing to overlap with.
    fn rotate(&mut self, k: usize, reason: ReconnectReason, now: Mono, emit: &mut impl Emit) {
        let free = self.free_slot(k);
        if free.is_none() && reason != ReconnectReason::Silence {
            // Every spare slot is taken by a rotation under way: this one starts once that
            // one ends (by its own deadline at the latest).
            return;
        }
        self.stats.rotations += 1;
        let why = match reason {
            ReconnectReason::ServerShutdown => "server shutdown notice",
            ReconnectReason::MaxAge => "connection age",
            ReconnectReason::Silence => "silence",
        };
        let conn = self.lines.get(k).map_or(ConnId(0), |l| l.conn);
        self.notices.push(Notice::Reconnecting { conn, why });
        match (reason, free) {
            (ReconnectReason::ServerShutdown | ReconnectReason::MaxAge, Some(j)) => {
                self.stats.overlapped_rotations += 1;
                let deadline = now.after_nanos(self.session.spec().rotate_timeout_ns);
                if let Some(old) = self.lines.get_mut(k) {
                    old.permanent = false;
                    old.retiring = Some((j, deadline));
                }
                if let Some(new) = self.lines.get_mut(j) {
                    new.permanent = true;
                    // The successor takes over the slot's backoff: a rotation is not a
                    // failure, and its attempts start from the first delay.
                    new.backoff.reset();
                }
                self.open(j, now);
            }
            _ => {
                // A rotation waits out the backoff like any other loss: after a healthy
                // connection that is its first, short delay; a connection that keeps going
                // silent backs off further each time.
                self.close(k, now, emit);
            }
        }
    }

    /// A slot the successor of slot `k`'s connection can open in: a free slot of the same
    /// shard, since it carries the same symbols.
    fn free_slot(&self, k: usize) -> Option<usize> {
        let per = self.per_shard.max(1);
        let shard = k / per;
        self.lines
            .iter()
            .enumerate()
            .skip(shard * per)
            .take(per)
            .find(|(_, l)| l.link == Link::Down && !l.permanent)
            .map(|(j, _)| j)
    }

    /// Closes each connection being replaced whose successor every live symbol has linked
    /// on, or whose overlap ran out of time.
    fn finish_rotations(&mut self, now: Mono, emit: &mut impl Emit) {
        for k in 0..self.lines.len() {
            let Some((j, deadline)) = self.lines.get(k).and_then(|l| l.retiring) else {
                continue;
            };
            let successor_open = self.lines.get(j).is_some_and(|l| l.link == Link::Open);
            let linked = successor_open && self.session.all_linked(j);
            if linked || now >= deadline {
                if linked {
                    self.stats.rotations_linked += 1;
                } else {
                    self.stats.rotations_timed_out += 1;
                }
                let conn = self.lines.get(k).map_or(ConnId(0), |l| l.conn);
                self.notices.push(Notice::RotationDone {
                    conn,
                    linked,
                    unlinked: self.session.unlinked_symbols(j),
                });
                self.close(k, now, emit);
            }
        }
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
        let Some(k) = self.line_of(conn) else {
            self.stats.stale_conn_events += 1;
            return;
        };
        // The driver may hand over frames read in the same step that finished the
        // handshake, before it reports the connection open.
        self.opened(k, now);
        self.session
            .on_link_text(k, now.as_nanos(), recv.as_nanos(), frame, emit);
        if self.rotation_check.is_none() && self.lines.iter().any(|l| l.retiring.is_some()) {
            self.rotation_check = Some(now);
        }
    }

    fn handle_connection<E: Emit>(
        &mut self,
        now: Mono,
        conn: ConnId,
        event: ConnEvent<'_>,
        emit: &mut E,
    ) {
        let Some(k) = self.line_of(conn) else {
            // A connection given up already (rotated, or failed before).
            self.stats.stale_conn_events += 1;
            return;
        };
        match event {
            ConnEvent::Opened => self.opened(k, now),
            ConnEvent::Alive => {
                self.stats.alive_signals += 1;
                self.session.on_link_alive(k, now.as_nanos());
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
                self.lost(k, now, emit);
            }
            ConnEvent::Closed(_) => self.lost(k, now, emit),
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
        if let FetchReply::Http {
            used_weight: Some(used),
            ..
        } = reply
        {
            self.session.observe_used_weight(used, now.as_nanos());
        }
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
        for k in 0..self.lines.len() {
            let due = self.lines.get(k).is_some_and(|l| {
                l.link == Link::Down && l.permanent && l.reconnect_at.is_some_and(|t| t <= now)
            });
            if due {
                self.open(k, now);
            }
        }
        for k in 0..self.lines.len() {
            let open = self
                .lines
                .get(k)
                .is_some_and(|l| l.link == Link::Open && l.retiring.is_none());
            if open && let Some(reason) = self.session.poll_link_reconnect(k, now.as_nanos()) {
                self.rotate(k, reason, now, emit);
            }
        }
        self.rotation_check = None;
        self.finish_rotations(now, emit);
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
        let lines = self.lines.iter().filter_map(|l| match l.link {
            Link::Down if l.permanent => l.reconnect_at,
            Link::Down => None,
            _ => l.retiring.map(|(_, t)| t),
        });
        // A connection's age, even when already past: it is replaced at the next timeout
        // (when a slot is free for its successor; otherwise the rotation under way ends
        // first, by its own deadline above).
        let ages = (0..self.lines.len()).filter_map(|k| {
            let l = self.lines.get(k)?;
            if l.link != Link::Open || l.retiring.is_some() || self.free_slot(k).is_none() {
                return None;
            }
            self.session.link_age_deadline(k).map(Mono::from_nanos)
        });
        lines
            .chain(session)
            .chain(ages)
            .chain(self.rotation_check)
            .min()
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
            ("overlapped_rotations", t.overlapped_rotations),
            ("rotations_linked", t.rotations_linked),
            ("rotations_timed_out", t.rotations_timed_out),
            ("stale_conn_events", t.stale_conn_events),
            ("open_connections", self.open_connections() as u64),
            ("relinking_symbols", self.session.relinking_symbols() as u64),
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
            ("symbols_given_up", self.session.symbols_given_up() as u64),
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
