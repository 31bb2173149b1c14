//! Helpers shared by the loopback tests: a mio loop around one client.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::io::ws::{WsClient, WsError, WsStatus};
use mio::{Events, Poll, Token};

/// One WebSocket client and its poller.
pub struct Client {
    pub poll: Poll,
    pub ws: WsClient,
    events: Events,
}

impl Client {
    /// Connects to `url` (loopback only in these tests).
    pub fn connect(url: &str) -> Result<Self, WsError> {
        let poll = Poll::new().map_err(|e| WsError::Handshake(e.to_string()))?;
        let ws = WsClient::connect(url, poll.registry(), Token(7))?;
        Ok(Self {
            poll,
            ws,
            events: Events::with_capacity(64),
        })
    }

    /// Runs the event loop for at most `timeout`, handing every text frame
    /// to `on_frame`, until it returns true or the connection closes.
    /// Returns the last status.
    pub fn run(
        &mut self,
        timeout: Duration,
        mut on_frame: impl FnMut(&[u8]) -> bool,
    ) -> Result<WsStatus, WsError> {
        let deadline = Instant::now() + timeout;
        let mut status = WsStatus::Connecting;
        let mut done = false;
        while !done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.poll
                .poll(&mut self.events, Some(left.min(Duration::from_millis(50))))
                .map_err(|e| WsError::Handshake(e.to_string()))?;
            for event in self.events.iter() {
                if event.is_writable() {
                    status = self.ws.on_writable()?;
                }
                if event.is_readable() || event.is_read_closed() {
                    status = self.ws.on_readable(|frame| {
                        if !done {
                            done = on_frame(frame);
                        }
                    })?;
                }
            }
            if matches!(status, WsStatus::Closed { .. }) {
                break;
            }
        }
        Ok(status)
    }
}

/// `../shared/captures` beside the crate, if present.
pub fn captures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipping: ../shared/captures not found");
        None
    }
}

/// The parsed JSON of a frame, or `Null`.
pub fn json(frame: &[u8]) -> serde_json::Value {
    serde_json::from_slice(frame).unwrap_or(serde_json::Value::Null)
}
