//! The WebSocket connections of the live loop: opened and closed when a venue asks
//! ([`IoRequest::Open`](crate::venue::IoRequest::Open)), their frames handed to it, their
//! fate reported back ([`ConnEvent`]).
//!
//! Opening runs in steps, none of which blocks the rx thread, each with a deadline from
//! the venue's [`ConnLimits`]:
//!
//! ```text
//! resolve (a thread of its own, see io::resolve) -> for each address in turn: TCP connect
//!   -> TLS handshake (wss) -> upgrade -> open (pinged every limits.ping_ns)
//! ```
//!
//! A refused or timed-out TCP connect moves on to the next address; any other failure, or
//! the last address failing, is reported to the venue as [`ConnEvent::Failed`] with the
//! step and the reason, and logged (one line a second per venue and step at most).

use std::net::SocketAddr;
use std::sync::Arc;

use mio::{Registry, Token, Waker};

use super::limit::LogLimit;
use crate::io::clock::Clock;
use crate::io::resolve::Resolver;
use crate::io::tls::Endpoint;
use crate::io::ws::{CLOSE_ABNORMAL, WsClient, WsStage, WsStatus};
use crate::log::held_note;
use crate::publish::fanout::Fanout;
use crate::time::{Mono, Wall};
use crate::venue::{ConnEvent, ConnId, ConnLimits, ConnStage, Venue};

/// Lookups running at once at most (each a parked thread while a name server is silent).
const MAX_LOOKUPS: usize = 4;

/// Where an opening connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Resolving,
    Tcp,
    Tls,
    Upgrade,
    Open,
}

impl Step {
    fn of(stage: WsStage) -> Self {
        match stage {
            WsStage::Tcp => Self::Tcp,
            WsStage::Tls => Self::Tls,
            WsStage::Upgrade => Self::Upgrade,
            WsStage::Open | WsStage::Closed => Self::Open,
        }
    }

    /// The step as the venue is told of a failure.
    fn stage(self) -> ConnStage {
        match self {
            Self::Resolving => ConnStage::Resolve,
            Self::Tcp => ConnStage::Connect,
            Self::Tls => ConnStage::Tls,
            Self::Upgrade | Self::Open => ConnStage::Upgrade,
        }
    }

    /// How long the step may take.
    fn limit(self, limits: &ConnLimits) -> u64 {
        match self {
            Self::Resolving => limits.resolve_ns,
            Self::Tcp => limits.connect_ns,
            Self::Tls => limits.tls_ns,
            Self::Upgrade => limits.upgrade_ns,
            Self::Open => u64::MAX,
        }
    }
}

/// One open (or opening) connection.
struct Conn {
    venue: usize,
    conn: ConnId,
    url: String,
    /// `host:port`, for log lines.
    target: String,
    limits: ConnLimits,
    /// The tag of its name lookup.
    key: u64,
    step: Step,
    /// When the step began (its deadline is `since + limit`).
    since: Mono,
    addrs: Vec<SocketAddr>,
    /// The next address to try.
    next_addr: usize,
    /// What went wrong with each address tried so far.
    errors: Vec<String>,
    ws: Option<WsClient>,
    /// The next ping is due then (open connections with pings on).
    next_ping: Mono,
}

impl Conn {
    fn deadline(&self) -> Mono {
        if self.step == Step::Open {
            if self.limits.ping_ns == 0 {
                return Mono::MAX;
            }
            return self.next_ping;
        }
        self.since.after_nanos(self.step.limit(&self.limits))
    }
}

/// Every connection, by slot; a slot's token is `base + slot`.
pub(super) struct Conns {
    slots: Vec<Option<Conn>>,
    base: usize,
    resolver: Resolver,
    next_key: u64,
    log: LogLimit,
}

/// What a failure report needs besides the connection.
struct Failure<'a> {
    step: Step,
    timed_out: bool,
    reason: &'a str,
}

impl Conns {
    /// No connections; tokens from `base` up; `waker` ends the poll when a lookup is
    /// answered.
    pub(super) fn new(base: usize, waker: Arc<Waker>) -> Self {
        Self {
            slots: Vec::new(),
            base,
            resolver: Resolver::new(MAX_LOOKUPS, move || {
                // A failed wake only delays the answer to the next cycle.
                let _ = waker.wake();
            }),
            next_key: 1,
            log: LogLimit::default(),
        }
    }

    /// The slot of a token, if it is one of these connections'.
    pub(super) fn slot_of(&self, token: Token) -> Option<usize> {
        token
            .0
            .checked_sub(self.base)
            .filter(|s| *s < self.slots.len())
    }

    /// The earliest deadline of any step, or ping.
    pub(super) fn next_deadline(&self) -> Option<Mono> {
        self.slots
            .iter()
            .flatten()
            .map(Conn::deadline)
            .filter(|t| *t != Mono::MAX)
            .min()
    }

    /// Starts opening venue `v`'s connection `conn` to `url` at `now`. What fails at once
    /// is reported to the venue at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open<V: Venue>(
        &mut self,
        now: Mono,
        registry: &Registry,
        v: usize,
        venue: &mut V,
        conn: ConnId,
        url: &str,
        limits: ConnLimits,
        fanout: &mut Fanout,
    ) {
        let endpoint = match Endpoint::parse(url) {
            Ok(e) => e,
            Err(e) => {
                let reason = e.to_string();
                let failure = Failure {
                    step: Step::Resolving,
                    timed_out: false,
                    reason: &reason,
                };
                self.report(now, v, venue, conn, url, &failure, fanout);
                return;
            }
        };
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let key = self.next_key;
        self.next_key += 1;
        let target = format!("{}:{}", endpoint.host, endpoint.port);
        crate::log_debug!(
            "{}: connection {}: resolving {target}",
            venue.name(),
            conn.0
        );
        let lookup = self.resolver.lookup(key, &endpoint.host, endpoint.port);
        let mut c = Conn {
            venue: v,
            conn,
            url: url.to_string(),
            target,
            limits,
            key,
            step: Step::Resolving,
            since: now,
            addrs: Vec::new(),
            next_addr: 0,
            errors: Vec::new(),
            ws: None,
            next_ping: Mono::MAX,
        };
        match lookup {
            Ok(None) => {}
            Ok(Some(addrs)) => {
                c.addrs = addrs;
                if let Some(s) = self.slots.get_mut(slot) {
                    *s = Some(c);
                }
                self.connect_next(now, slot, registry, venue, fanout);
                return;
            }
            Err(e) => {
                let reason = format!("resolve {}: {e}", c.target);
                let failure = Failure {
                    step: Step::Resolving,
                    timed_out: false,
                    reason: &reason,
                };
                self.report(now, v, venue, conn, url, &failure, fanout);
                return;
            }
        }
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Some(c);
        }
    }

    /// Hands the answers of name lookups to their connections. Returns the work done.
    pub(super) fn resolved<V: Venue>(
        &mut self,
        now: Mono,
        registry: &Registry,
        venues: &mut [V],
        fanout: &mut Fanout,
    ) -> usize {
        let mut work = 0;
        while let Some(answer) = self.resolver.try_next() {
            work += 1;
            let found = self.slots.iter().position(|s| {
                s.as_ref()
                    .is_some_and(|c| c.key == answer.key && c.step == Step::Resolving)
            });
            // An answer for a connection given up already (its deadline passed) is dropped.
            let Some(slot) = found else { continue };
            let Some(Some(c)) = self.slots.get_mut(slot) else {
                continue;
            };
            let Some(venue) = venues.get_mut(c.venue) else {
                continue;
            };
            match answer.result {
                Ok(addrs) => {
                    crate::log_debug!(
                        "{}: connection {}: {} resolved to {addrs:?}",
                        venue.name(),
                        c.conn.0,
                        c.target
                    );
                    c.addrs = addrs;
                    self.connect_next(now, slot, registry, venue, fanout);
                }
                Err(e) => {
                    let reason = format!("resolve {}: {e}", c.target);
                    let failure = Failure {
                        step: Step::Resolving,
                        timed_out: false,
                        reason: &reason,
                    };
                    self.fail(now, slot, registry, venue, &failure, fanout);
                }
            }
        }
        work
    }

    /// Starts a TCP connect to the next address of `slot`, or reports the connection
    /// failed when none is left.
    fn connect_next<V: Venue>(
        &mut self,
        now: Mono,
        slot: usize,
        registry: &Registry,
        venue: &mut V,
        fanout: &mut Fanout,
    ) {
        let token = Token(self.base + slot);
        let Some(Some(c)) = self.slots.get_mut(slot) else {
            return;
        };
        if let Some(mut old) = c.ws.take() {
            // The socket is dropped right after: closing it leaves the poll as well, so a
            // failed deregistration loses nothing.
            let _ = old.deregister(registry);
        }
        while let Some(&addr) = c.addrs.get(c.next_addr) {
            c.next_addr += 1;
            crate::log_debug!(
                "{}: connection {}: connecting to {addr}",
                venue.name(),
                c.conn.0
            );
            match WsClient::connect_to(&c.url, addr, registry, token, None) {
                Ok(ws) => {
                    c.ws = Some(ws);
                    c.step = Step::Tcp;
                    c.since = now;
                    return;
                }
                Err(e) => c.errors.push(format!("{addr}: {e}")),
            }
        }
        let reason = format!(
            "connect to {}: {}",
            c.target,
            if c.errors.is_empty() {
                "no address".to_string()
            } else {
                c.errors.join("; ")
            }
        );
        let timed_out = c.errors.iter().any(|e| e.contains("timed out"));
        let failure = Failure {
            step: Step::Tcp,
            timed_out,
            reason: &reason,
        };
        self.fail(now, slot, registry, venue, &failure, fanout);
    }

    /// Gives up `slot`: the venue is told why, the log says so.
    fn fail<V: Venue>(
        &mut self,
        now: Mono,
        slot: usize,
        registry: &Registry,
        venue: &mut V,
        failure: &Failure<'_>,
        fanout: &mut Fanout,
    ) {
        let Some(mut c) = self.slots.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if let Some(mut ws) = c.ws.take() {
            // Dropped right after; closing the socket leaves the poll as well.
            let _ = ws.deregister(registry);
        }
        self.report(now, c.venue, venue, c.conn, &c.url, failure, fanout);
    }

    /// Logs a failure (rate limited) and tells the venue.
    #[allow(clippy::too_many_arguments)]
    fn report<V: Venue>(
        &mut self,
        now: Mono,
        v: usize,
        venue: &mut V,
        conn: ConnId,
        url: &str,
        failure: &Failure<'_>,
        fanout: &mut Fanout,
    ) {
        let stage = failure.step.stage();
        if let Some(held) = self.log.allow(now, v, stage.as_str()) {
            crate::log_warn!(
                "{}: connection {} to {url}: {} {}: {}{}",
                venue.name(),
                conn.0,
                stage.as_str(),
                if failure.timed_out {
                    "timed out"
                } else {
                    "failed"
                },
                failure.reason,
                held_note(held)
            );
        }
        venue.handle_connection(
            now,
            conn,
            ConnEvent::Failed {
                stage,
                timed_out: failure.timed_out,
                reason: failure.reason,
            },
            fanout,
        );
    }

    /// Gives up every step whose deadline passed at `now` (a TCP connect moves on to the
    /// next address), and pings the open connections that are due. Returns the work done.
    pub(super) fn expire<V: Venue>(
        &mut self,
        now: Mono,
        registry: &Registry,
        venues: &mut [V],
        fanout: &mut Fanout,
    ) -> usize {
        let mut work = 0;
        for slot in 0..self.slots.len() {
            let Some(Some(c)) = self.slots.get_mut(slot) else {
                continue;
            };
            if c.deadline() > now {
                continue;
            }
            work += 1;
            let Some(venue) = venues.get_mut(c.venue) else {
                continue;
            };
            if c.step == Step::Open {
                c.next_ping = now.after_nanos(c.limits.ping_ns);
                if let Some(ws) = c.ws.as_mut() {
                    // A failure shows on the socket's next event.
                    let _ = ws.ping();
                }
                continue;
            }
            let ms = c.step.limit(&c.limits) / 1_000_000;
            if c.step == Step::Tcp {
                let addr = c.addrs.get(c.next_addr.wrapping_sub(1));
                let addr = addr.map_or_else(String::new, ToString::to_string);
                c.errors.push(format!("{addr}: timed out after {ms} ms"));
                self.connect_next(now, slot, registry, venue, fanout);
                continue;
            }
            let reason = match c.step {
                Step::Resolving => format!("no answer for {} within {ms} ms", c.target),
                Step::Tls => format!("no TLS handshake with {} within {ms} ms", c.target),
                _ => format!("no upgrade answer from {} within {ms} ms", c.target),
            };
            let failure = Failure {
                step: c.step,
                timed_out: true,
                reason: &reason,
            };
            self.fail(now, slot, registry, venue, &failure, fanout);
        }
        work
    }

    /// Closes venue `venue`'s connection `conn`, if it has one; true if it had.
    pub(super) fn close(&mut self, registry: &Registry, venue: usize, conn: ConnId) -> bool {
        let found = self.slots.iter_mut().find(|s| {
            s.as_ref()
                .is_some_and(|c| c.venue == venue && c.conn == conn)
        });
        let Some(slot) = found else {
            return false;
        };
        if let Some(mut c) = slot.take()
            && let Some(mut ws) = c.ws.take()
        {
            // Best effort: a close frame if the socket takes it, then the socket goes.
            let _ = ws.close();
            let _ = ws.on_writable();
            let _ = ws.deregister(registry);
        }
        true
    }

    /// Handles readiness of connection `slot`: frames go to its venue, and a change of
    /// state is reported. Returns the frames handled.
    pub(super) fn ready<V: Venue>(
        &mut self,
        now: Mono,
        slot: usize,
        venues: &mut [V],
        registry: &Registry,
        fanout: &mut Fanout,
    ) -> usize {
        let Some(Some(c)) = self.slots.get_mut(slot) else {
            return 0;
        };
        let Some(venue) = venues.get_mut(c.venue) else {
            return 0;
        };
        let Some(ws) = c.ws.as_mut() else {
            return 0;
        };
        let realtime = Clock::realtime_ns();
        fanout.set_now(realtime);
        let recv = Wall::from_nanos(realtime);
        let (conn, before) = (c.conn, c.step);
        let mut frames = 0;
        let written = ws.on_writable();
        let read = ws.on_readable(|frame| {
            frames += 1;
            venue.handle_frame(now, conn, frame, recv, fanout);
        });
        let status = match (written, read) {
            (Err(e), _) | (_, Err(e)) => WsStatus::Closed {
                code: CLOSE_ABNORMAL,
                reason: e.to_string(),
            },
            (_, Ok(status)) => status,
        };
        match status {
            WsStatus::Connecting => {
                let step = Step::of(ws.stage());
                if step != c.step {
                    crate::log_debug!(
                        "{}: connection {}: {:?} done, {:?} next",
                        venue.name(),
                        conn.0,
                        c.step,
                        step
                    );
                    c.step = step;
                    c.since = now;
                }
            }
            WsStatus::Open { control, .. } => {
                if before != Step::Open {
                    c.step = Step::Open;
                    c.since = now;
                    c.next_ping = now.after_nanos(c.limits.ping_ns);
                    crate::log_debug!(
                        "{}: connection {} open to {}",
                        venue.name(),
                        conn.0,
                        c.target
                    );
                    venue.handle_connection(now, conn, ConnEvent::Opened, fanout);
                }
                if control > 0 {
                    venue.handle_connection(now, conn, ConnEvent::Alive, fanout);
                }
            }
            WsStatus::Closed { code, reason } => {
                let why = if reason.is_empty() {
                    format!("closed with code {code}")
                } else {
                    format!("closed with code {code}: {reason}")
                };
                if before == Step::Open {
                    if let Some(mut ws) = c.ws.take() {
                        // Dropped right after; closing the socket leaves the poll as well.
                        let _ = ws.deregister(registry);
                    }
                    crate::log_debug!("{}: connection {} {why}", venue.name(), conn.0);
                    venue.handle_connection(now, conn, ConnEvent::Closed(&why), fanout);
                    if let Some(s) = self.slots.get_mut(slot) {
                        *s = None;
                    }
                } else if before == Step::Tcp && c.next_addr < c.addrs.len() {
                    // This address refused: the next one.
                    let addr = c.addrs.get(c.next_addr.wrapping_sub(1));
                    let addr = addr.map_or_else(String::new, ToString::to_string);
                    c.errors.push(format!("{addr}: {why}"));
                    self.connect_next(now, slot, registry, venue, fanout);
                } else {
                    let why = if before == Step::Tcp {
                        let mut all = std::mem::take(&mut c.errors);
                        all.push(why);
                        format!("connect to {}: {}", c.target, all.join("; "))
                    } else {
                        why
                    };
                    let failure = Failure {
                        step: before,
                        timed_out: false,
                        reason: &why,
                    };
                    self.fail(now, slot, registry, venue, &failure, fanout);
                }
            }
        }
        frames
    }
}
