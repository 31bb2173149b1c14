//! A non-blocking WebSocket client for a mio event loop.
//!
//! [`WsClient::connect_to`] starts a TCP connect to an address resolved
//! beforehand (see [`crate::io::resolve`]) and registers the socket for
//! readable and writable events (edge-triggered). Each event advances the
//! state machine: TCP connect, TLS handshake (for `wss://`), HTTP upgrade,
//! then frames. Nothing here blocks or sleeps: every call does what the
//! socket allows and returns.
//!
//! ```ignore
//! use mio::{Events, Poll, Token};
//! use crate::io::ws::{WsClient, WsStatus};
//! use crate::venue::binance::combined_url;
//!
//! let mut poll = Poll::new()?;
//! let url = combined_url("ws://127.0.0.1:9443", &["btcusdt", "ethusdt"], Some(100));
//! let mut client = WsClient::connect(&url, poll.registry(), Token(1))?;
//! let mut events = Events::with_capacity(16);
//! poll.poll(&mut events, Some(std::time::Duration::from_millis(100)))?;
//! for event in events.iter() {
//!     if event.is_writable() {
//!         client.on_writable()?;
//!     }
//!     if event.is_readable() {
//!         if let WsStatus::Closed { code, .. } = client.on_readable(|frame| println!("{}", frame.len()))? {
//!             println!("closed with {code}");
//!         }
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, ErrorKind};
use std::mem;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use tungstenite::handshake::MidHandshake;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tungstenite::{ClientHandshake, HandshakeError, Message, Utf8Bytes, WebSocket};

use super::tls::{Endpoint, MaybeTls, Scheme, TlsError};

/// Largest message accepted from the server.
pub const MAX_MESSAGE: usize = 16 << 20;

/// Close code reported when the connection ended without a close frame.
pub const CLOSE_ABNORMAL: u16 = 1006;

type Stream = MaybeTls<TcpStream>;

/// Errors of the WebSocket client.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// The URL is not a usable `ws://` or `wss://` URL, or TLS set-up failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The URL has an `http(s)` scheme.
    #[error("not a WebSocket URL: {0}")]
    NotWebSocket(String),
    /// Resolving, connecting or registering the socket failed.
    #[error("connect to {endpoint}: {source}")]
    Connect {
        /// `host:port`.
        endpoint: String,
        /// The cause.
        source: io::Error,
    },
    /// The server refused the upgrade, or the handshake broke off.
    #[error("WebSocket handshake: {0}")]
    Handshake(String),
    /// A protocol violation, an oversized message or a socket error.
    #[error("WebSocket: {0}")]
    Protocol(#[from] tungstenite::Error),
}

/// Where a connection stands after an event was handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsStatus {
    /// TCP connect, TLS handshake or HTTP upgrade still running.
    Connecting,
    /// Open; `frames` text frames were handed over by this call.
    Open {
        /// Text frames handed to the callback by this call.
        frames: usize,
        /// Pings and pongs received by this call (proof of life without data).
        control: usize,
    },
    /// Closed: by a close frame (its code and reason), or by the connection
    /// ending without one ([`CLOSE_ABNORMAL`]).
    Closed {
        /// The close code.
        code: u16,
        /// The close reason.
        reason: String,
    },
}

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsStats {
    /// Text frames handed to callbacks.
    pub text_frames: u64,
    /// Bytes of those frames.
    pub text_bytes: u64,
    /// Binary frames received (ignored).
    pub binary_frames: u64,
    /// Pings received; each is answered with a pong carrying its payload.
    pub pings: u64,
    /// Pongs received (answers to [`WsClient::ping`], or unsolicited).
    pub pongs: u64,
    /// Pings sent by [`WsClient::ping`].
    pub pings_sent: u64,
}

/// How far a connection has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsStage {
    /// The TCP connect is running.
    Tcp,
    /// The TLS handshake is running.
    Tls,
    /// The upgrade request is out (or going), the `101` not read yet.
    Upgrade,
    /// Frames flow.
    Open,
    /// Closed.
    Closed,
}

#[derive(Debug)]
enum State {
    Connecting(Stream),
    Handshaking(MidHandshake<ClientHandshake<Stream>>),
    Open(WebSocket<Stream>),
    Closed { code: u16, reason: String },
}

/// A WebSocket client driven by a mio event loop.
#[derive(Debug)]
pub struct WsClient {
    state: State,
    url: String,
    stats: WsStats,
}

impl WsClient {
    /// Starts connecting to `url` (`ws://` or `wss://`) and registers the
    /// socket with `registry` under `token` for readable and writable events.
    /// Name resolution uses the system resolver and may block; a literal
    /// address does not.
    #[cfg(test)]
    pub fn connect(url: &str, registry: &Registry, token: Token) -> Result<Self, WsError> {
        Self::connect_with(url, registry, token, None)
    }

    /// Like [`WsClient::connect`]; for `wss://`, `tls` (when given) verifies the server
    /// instead of the public roots, for a venue behind a private CA.
    #[cfg(test)]
    pub fn connect_with(
        url: &str,
        registry: &Registry,
        token: Token,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, WsError> {
        let endpoint = Endpoint::parse(url)?;
        if !matches!(endpoint.scheme, Scheme::Ws | Scheme::Wss) {
            return Err(WsError::NotWebSocket(url.to_owned()));
        }
        let connect_error = |source| WsError::Connect {
            endpoint: format!("{}:{}", endpoint.host, endpoint.port),
            source,
        };
        let addr = endpoint
            .socket_addrs()
            .map_err(connect_error)?
            .into_iter()
            .next()
            .ok_or_else(|| connect_error(io::Error::new(ErrorKind::NotFound, "no address")))?;
        Self::connect_to(url, addr, registry, token, tls)
    }

    /// Starts connecting to `addr` for `url` (its host names the TLS server and the
    /// `Host` header), without resolving anything: never blocks. `tls` as for
    /// [`WsClient::connect_with`].
    pub fn connect_to(
        url: &str,
        addr: std::net::SocketAddr,
        registry: &Registry,
        token: Token,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, WsError> {
        let endpoint = Endpoint::parse(url)?;
        if !matches!(endpoint.scheme, Scheme::Ws | Scheme::Wss) {
            return Err(WsError::NotWebSocket(url.to_owned()));
        }
        let connect_error = |source| WsError::Connect {
            endpoint: addr.to_string(),
            source,
        };
        let mut socket = TcpStream::connect(addr).map_err(connect_error)?;
        socket.set_nodelay(true).map_err(connect_error)?;
        registry
            .register(&mut socket, token, Interest::READABLE | Interest::WRITABLE)
            .map_err(connect_error)?;
        let stream = match tls {
            Some(config) => MaybeTls::with_config(socket, &endpoint, config)?,
            None => MaybeTls::new(socket, &endpoint)?,
        };
        Ok(Self {
            state: State::Connecting(stream),
            url: url.to_owned(),
            stats: WsStats::default(),
        })
    }

    /// How far the connection has come.
    pub fn stage(&self) -> WsStage {
        match &self.state {
            State::Connecting(_) => WsStage::Tcp,
            State::Handshaking(mid) => {
                if mid.get_ref().get_ref().is_handshaking() {
                    WsStage::Tls
                } else {
                    WsStage::Upgrade
                }
            }
            State::Open(_) => WsStage::Open,
            State::Closed { .. } => WsStage::Closed,
        }
    }

    /// Sends a ping (an empty payload) on an open connection; does nothing otherwise.
    pub fn ping(&mut self) -> Result<(), WsError> {
        let State::Open(ws) = &mut self.state else {
            return Ok(());
        };
        let result = ws.write(Message::Ping(Default::default()));
        self.stats.pings_sent += 1;
        self.settle(result)?;
        self.flush()
    }

    /// Counters so far.
    #[cfg(test)]
    pub fn stats(&self) -> WsStats {
        self.stats
    }

    /// Whether the handshake has finished and the connection is not closed.
    #[cfg(test)]
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open(_))
    }

    /// Handles a readable event: advances the handshake, then reads every
    /// frame available until the socket would block, handing each text
    /// frame's bytes to `f` (borrowed from tungstenite's buffer: no copy).
    /// Pings are answered with pongs. Frames already handed over stay handed
    /// over if an error follows.
    pub fn on_readable(&mut self, mut f: impl FnMut(&[u8])) -> Result<WsStatus, WsError> {
        self.advance()?;
        let State::Open(ws) = &mut self.state else {
            return Ok(self.status(0));
        };
        let (mut frames, mut control) = (0, 0);
        let result = loop {
            match ws.read() {
                Ok(Message::Text(text)) => {
                    frames += 1;
                    self.stats.text_frames += 1;
                    self.stats.text_bytes += text.len() as u64;
                    f(text.as_bytes());
                }
                Ok(Message::Binary(_)) => self.stats.binary_frames += 1,
                Ok(Message::Ping(_)) => {
                    self.stats.pings += 1;
                    control += 1;
                }
                Ok(Message::Pong(_)) => {
                    self.stats.pongs += 1;
                    control += 1;
                }
                Ok(Message::Frame(_)) => {}
                Ok(Message::Close(frame)) => {
                    // Best effort: send the queued close reply before dropping.
                    let _ = ws.flush();
                    let (code, reason) = match frame {
                        Some(frame) => (u16::from(frame.code), frame.reason.as_str().to_owned()),
                        None => (1005, String::new()),
                    };
                    self.state = State::Closed { code, reason };
                    break Ok(());
                }
                Err(e) => break Err(e),
            }
        };
        self.settle(result)?;
        self.flush()?;
        Ok(match self.status(frames) {
            WsStatus::Open { frames, .. } => WsStatus::Open { frames, control },
            other => other,
        })
    }

    /// Handles a writable event: advances the connect and handshake, and
    /// sends what is queued (pongs, close frames, text). When this finishes
    /// the handshake, frames may already be buffered: handle the readable
    /// side of the same event (or the next readable event) with
    /// [`on_readable`](Self::on_readable).
    pub fn on_writable(&mut self) -> Result<WsStatus, WsError> {
        self.advance()?;
        self.flush()?;
        Ok(self.status(0))
    }

    /// Starts a clean close: sends a close frame (code 1000). Keep handling
    /// events until [`WsStatus::Closed`] comes back with the server's reply.
    /// Before the handshake has finished, the socket is simply dropped.
    pub fn close(&mut self) -> Result<(), WsError> {
        let reason = Utf8Bytes::from_static("");
        match &mut self.state {
            State::Open(ws) => {
                let result = ws.close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason,
                }));
                return self.settle(result);
            }
            State::Connecting(_) | State::Handshaking(_) => {
                let reason = "closed before open".to_owned();
                self.state = State::Closed { code: 1000, reason };
            }
            State::Closed { .. } => {}
        }
        Ok(())
    }

    /// Removes the socket from `registry` (a closed client has none left).
    pub fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match &mut self.state {
            State::Connecting(stream) => registry.deregister(stream.socket_mut()),
            State::Handshaking(mid) => registry.deregister(mid.get_mut().get_mut().socket_mut()),
            State::Open(ws) => registry.deregister(ws.get_mut().socket_mut()),
            State::Closed { .. } => Ok(()),
        }
    }

    fn status(&self, frames: usize) -> WsStatus {
        match &self.state {
            State::Connecting(_) | State::Handshaking(_) => WsStatus::Connecting,
            State::Open(_) => WsStatus::Open { frames, control: 0 },
            State::Closed { code, reason } => WsStatus::Closed {
                code: *code,
                reason: reason.clone(),
            },
        }
    }

    fn flush(&mut self) -> Result<(), WsError> {
        match &mut self.state {
            State::Open(ws) => {
                let result = ws.flush();
                self.settle(result)
            }
            _ => Ok(()),
        }
    }

    /// Sorts out a tungstenite result: a full socket is no error, the end of
    /// the connection closes the client (with [`CLOSE_ABNORMAL`] when no close
    /// frame came), anything else closes it and is returned.
    fn settle(&mut self, result: tungstenite::Result<()>) -> Result<(), WsError> {
        use tungstenite::Error as E;
        use tungstenite::error::ProtocolError as P;
        let (code, reason) = match result {
            Ok(()) => return Ok(()),
            Err(E::Io(e)) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(E::Io(e)) => (CLOSE_ABNORMAL, e.to_string()),
            Err(E::ConnectionClosed | E::AlreadyClosed) => (1000, "closed".to_owned()),
            Err(E::Protocol(P::ResetWithoutClosingHandshake)) => (
                CLOSE_ABNORMAL,
                "connection ended without a close frame".to_owned(),
            ),
            Err(other) => return Err(self.fail(other.into())),
        };
        if !matches!(self.state, State::Closed { .. }) {
            self.state = State::Closed { code, reason };
        }
        Ok(())
    }

    /// Closes the client because of `error`, and returns it.
    fn fail(&mut self, error: WsError) -> WsError {
        self.state = State::Closed {
            code: CLOSE_ABNORMAL,
            reason: error.to_string(),
        };
        error
    }

    /// Moves through connect and handshake as far as the socket allows.
    fn advance(&mut self) -> Result<(), WsError> {
        let placeholder = State::Closed {
            code: CLOSE_ABNORMAL,
            reason: String::new(),
        };
        let result = match mem::replace(&mut self.state, placeholder) {
            State::Connecting(stream) => match connected(stream.socket()) {
                Ok(false) => {
                    self.state = State::Connecting(stream);
                    return Ok(());
                }
                Ok(true) => {
                    let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE));
                    tungstenite::client::client_with_config(self.url.as_str(), stream, Some(config))
                }
                Err(source) => {
                    let endpoint = self.url.clone();
                    return Err(self.fail(WsError::Connect { endpoint, source }));
                }
            },
            State::Handshaking(mid) => mid.handshake(),
            other => {
                self.state = other;
                return Ok(());
            }
        };
        match result {
            Ok((ws, _response)) => self.state = State::Open(ws),
            Err(HandshakeError::Interrupted(mid)) => self.state = State::Handshaking(mid),
            Err(HandshakeError::Failure(e)) => {
                return Err(self.fail(WsError::Handshake(e.to_string())));
            }
        }
        Ok(())
    }
}

/// Whether a non-blocking connect has finished; an error if it failed.
fn connected(socket: &TcpStream) -> io::Result<bool> {
    if let Some(e) = socket.take_error()? {
        return Err(e);
    }
    match socket.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.kind(), ErrorKind::NotConnected | ErrorKind::WouldBlock) => Ok(false),
        Err(e) => Err(e),
    }
}
