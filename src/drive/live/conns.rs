//! The WebSocket connections of the live loop: opened and closed when a venue asks
//! ([`IoRequest::Open`](crate::venue::IoRequest::Open)), their frames handed to it, their
//! fate reported back ([`ConnEvent`]).

use mio::{Registry, Token};

use crate::io::clock::Clock;
use crate::io::ws::{CLOSE_ABNORMAL, WsClient, WsError, WsStatus};
use crate::publish::fanout::Fanout;
use crate::time::{Mono, Wall};
use crate::venue::{ConnEvent, ConnId, Venue};

/// One open (or opening) connection.
struct Conn {
    venue: usize,
    conn: ConnId,
    ws: WsClient,
    /// The venue was told it opened.
    open: bool,
}

/// Every connection, by slot; a slot's token is `base + slot`.
pub(super) struct Conns {
    slots: Vec<Option<Conn>>,
    base: usize,
}

impl Conns {
    /// No connections; tokens from `base` up.
    pub(super) fn new(base: usize) -> Self {
        Self {
            slots: Vec::new(),
            base,
        }
    }

    /// The slot of a token, if it is one of these connections'.
    pub(super) fn slot_of(&self, token: Token) -> Option<usize> {
        token
            .0
            .checked_sub(self.base)
            .filter(|s| *s < self.slots.len())
    }

    /// Starts connecting venue `venue`'s connection `conn` to `url`. An error says why it
    /// could not start.
    pub(super) fn open(
        &mut self,
        registry: &Registry,
        venue: usize,
        conn: ConnId,
        url: &str,
    ) -> Result<(), WsError> {
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let ws = WsClient::connect(url, registry, Token(self.base + slot))?;
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Some(Conn {
                venue,
                conn,
                ws,
                open: false,
            });
        }
        Ok(())
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
        if let Some(mut c) = slot.take() {
            // Best effort: a close frame if the socket takes it, then the socket goes.
            let _ = c.ws.close();
            let _ = c.ws.on_writable();
            let _ = c.ws.deregister(registry);
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
        let realtime = Clock::realtime_ns();
        fanout.set_now(realtime);
        let recv = Wall::from_nanos(realtime);
        let (conn, was_open) = (c.conn, c.open);
        let mut frames = 0;
        let written = c.ws.on_writable();
        let read = c.ws.on_readable(|frame| {
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
            WsStatus::Open { .. } if !was_open => {
                c.open = true;
                venue.handle_connection(now, conn, ConnEvent::Opened, fanout);
            }
            WsStatus::Closed { code, reason } => {
                let _ = c.ws.deregister(registry);
                let why = if reason.is_empty() {
                    format!("closed with code {code}")
                } else {
                    format!("closed with code {code}: {reason}")
                };
                let event = if was_open {
                    ConnEvent::Closed(&why)
                } else {
                    ConnEvent::Failed(&why)
                };
                venue.handle_connection(now, conn, event, fanout);
                if let Some(s) = self.slots.get_mut(slot) {
                    *s = None;
                }
            }
            _ => {}
        }
        frames
    }
}
