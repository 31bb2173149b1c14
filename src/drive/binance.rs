//! A Binance venue under the rx loop: the WebSocket connection driven by the same mio
//! poll, snapshots fetched on a thread of their own, reconnects with backoff and jitter,
//! and rotation on `serverShutdown`, before the 24-hour cut, or on silence.

use std::time::Duration;

use mio::{Registry, Token};

use crate::io::fetch::{Backoff, SnapshotFetcher};
use crate::io::ws::{WsClient, WsStatus, combined_url};
use crate::venue::Emit;
use crate::venue::binance::{BinanceSession, BinanceSpec, ReconnectReason, SnapshotResult};

/// Counters of the transport, beside the session's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Connections opened.
    pub connects: u64,
    /// Connections lost or rotated.
    pub disconnects: u64,
    /// Rotations asked for by the session (shutdown notice, age, silence).
    pub rotations: u64,
    /// Connect attempts that failed at once.
    pub connect_errors: u64,
    /// Snapshot requests the fetcher queue had no room for.
    pub fetch_queue_full: u64,
}

/// One Binance venue's connection and session.
pub struct BinanceVenue {
    /// Venue name.
    pub name: String,
    session: BinanceSession,
    url: String,
    token: Token,
    ws: Option<WsClient>,
    open: bool,
    reconnect_at: Option<u64>,
    backoff: Backoff,
    fetcher: SnapshotFetcher,
    inflight: Vec<(u64, usize)>,
    next_id: u64,
    stats: TransportStats,
    last_now: u64,
}

impl BinanceVenue {
    /// A venue streaming `spec`'s symbols from `ws_base` (combined streams at
    /// `update_ms`), with snapshots from `rest_base`.
    pub fn new(
        name: &str,
        spec: BinanceSpec,
        ws_base: &str,
        rest_base: &str,
        update_ms: Option<u32>,
        token: Token,
    ) -> Result<Self, String> {
        let symbols = spec.symbols.clone();
        let snapshot_timeout = Duration::from_nanos(spec.snapshot_timeout_ns);
        let session = BinanceSession::new(spec).map_err(|e| e.to_string())?;
        let fetcher = SnapshotFetcher::spawn(rest_base, snapshot_timeout, 64)
            .map_err(|e| format!("snapshot client for {rest_base}: {e}"))?;
        let base = ws_base.trim_end_matches('/').trim_end_matches("/stream");
        Ok(Self {
            name: name.to_string(),
            session,
            url: combined_url(base, &symbols, update_ms),
            token,
            ws: None,
            open: false,
            reconnect_at: Some(0),
            backoff: Backoff::new(
                Duration::from_millis(200),
                Duration::from_secs(30),
                0.3,
                u64::from(token.0 as u32),
            ),
            fetcher,
            inflight: Vec::new(),
            next_id: 1,
            stats: TransportStats::default(),
            last_now: 0,
        })
    }

    /// The session.
    pub fn session(&self) -> &BinanceSession {
        &self.session
    }

    /// The transport counters.
    pub fn transport_stats(&self) -> TransportStats {
        self.stats
    }

    /// REST request weight spent in the last minute (the venue's budget unit).
    pub fn weight_used(&self) -> u32 {
        self.session.weight_used_last_minute()
    }

    /// The poll token of this venue's socket.
    pub fn token(&self) -> Token {
        self.token
    }

    /// Handles readiness of the WebSocket. Returns the frames handled.
    pub fn on_ready(
        &mut self,
        now: u64,
        recv_ns: u64,
        registry: &Registry,
        emit: &mut impl Emit,
    ) -> usize {
        let Some(ws) = self.ws.as_mut() else {
            return 0;
        };
        let mut frames = 0;
        let session = &mut self.session;
        let written = ws.on_writable();
        let read = ws.on_readable(|frame| {
            frames += 1;
            session.on_text(now, recv_ns, frame, emit);
        });
        let status = match (written, read) {
            (_, Err(_)) | (Err(_), _) => WsStatus::Closed {
                code: crate::io::ws::CLOSE_ABNORMAL,
                reason: "error".into(),
            },
            (_, Ok(status)) => status,
        };
        match status {
            WsStatus::Open { .. } if !self.open => {
                self.open = true;
                self.stats.connects += 1;
                self.backoff.reset();
                self.session.on_connected(now);
            }
            WsStatus::Closed { .. } => self.lost(now, registry, emit),
            _ => {}
        }
        frames
    }

    fn lost(&mut self, now: u64, registry: &Registry, emit: &mut impl Emit) {
        if let Some(mut ws) = self.ws.take() {
            let _ = ws.deregister(registry);
        }
        if self.open {
            self.stats.disconnects += 1;
        }
        self.open = false;
        self.session.on_disconnected(now, emit);
        let delay = u64::try_from(self.backoff.next_delay().as_nanos()).unwrap_or(u64::MAX);
        self.reconnect_at = Some(now.saturating_add(delay));
    }

    /// Connects when due, rotates when the session asks, runs snapshots and timers.
    /// Returns the work done.
    pub fn after_io(&mut self, now: u64, registry: &Registry, emit: &mut impl Emit) -> usize {
        let mut work = 0;
        self.last_now = now;
        if self.ws.is_none() && self.reconnect_at.is_some_and(|t| t <= now) {
            work += 1;
            self.reconnect_at = None;
            match WsClient::connect(&self.url, registry, self.token) {
                Ok(ws) => self.ws = Some(ws),
                Err(e) => {
                    self.stats.connect_errors += 1;
                    crate::log_warn!("{}: connect to {}: {e}", self.name, self.url);
                    let delay =
                        u64::try_from(self.backoff.next_delay().as_nanos()).unwrap_or(u64::MAX);
                    self.reconnect_at = Some(now.saturating_add(delay));
                }
            }
        }
        if self.open
            && let Some(reason) = self.session.poll_reconnect(now)
        {
            work += 1;
            self.stats.rotations += 1;
            let why = match reason {
                ReconnectReason::ServerShutdown => "server shutdown notice",
                ReconnectReason::MaxAge => "connection age",
                ReconnectReason::Silence => "silence",
            };
            crate::log_info!("{}: reconnecting ({why})", self.name);
            if let Some(ws) = self.ws.as_mut() {
                let _ = ws.close();
            }
            self.lost(now, registry, emit);
            self.reconnect_at = Some(now);
        }
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            work += 1;
            self.session.handle_timeout(now, emit);
        }
        while let Some(request) = self.session.poll_snapshot(now) {
            work += 1;
            let id = self.next_id;
            self.next_id += 1;
            if self.fetcher.request(id, &request.path_and_query).is_ok() {
                self.inflight.push((id, request.symbol));
                crate::log_info!(
                    "{}: snapshot {} (weight {}; {} used in the last minute)",
                    self.name,
                    request.path_and_query,
                    request.weight,
                    self.session.weight_used_last_minute()
                );
            } else {
                self.stats.fetch_queue_full += 1;
                self.session
                    .on_snapshot(now, request.symbol, SnapshotResult::Failed, emit);
            }
        }
        while let Some(done) = self.fetcher.try_recv() {
            work += 1;
            let Some(at) = self.inflight.iter().position(|(id, _)| *id == done.id) else {
                continue;
            };
            let (_, symbol) = self.inflight.swap_remove(at);
            let result = match &done.result {
                Ok(r) if r.status == 200 => SnapshotResult::Body(&r.body),
                Ok(r) => SnapshotResult::Status {
                    code: r.status,
                    retry_after_secs: r.retry_after_secs,
                },
                Err(_) => SnapshotResult::Failed,
            };
            self.session.on_snapshot(now, symbol, result, emit);
        }
        work
    }

    /// The earliest time [`BinanceVenue::after_io`] has work to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        // Fetch results arrive on a channel, not a socket: look again every millisecond.
        let fetching = (!self.inflight.is_empty()).then_some(self.last_now + 1_000_000);
        [self.session.poll_timeout(), self.reconnect_at, fetching]
            .into_iter()
            .flatten()
            .min()
    }
}

/// A symbol's counters in the shape the status lines and metrics use.
pub fn channel_stats(s: &crate::venue::binance::SymbolStats) -> crate::venue::ChannelStats {
    crate::venue::ChannelStats {
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
        ..crate::venue::ChannelStats::default()
    }
}
