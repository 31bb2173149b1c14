//! The snapshot server: SoupBinTCP over TCP on 127.0.0.1.
//!
//! The snapshot state is the [`Book`]: for the current session, the last
//! message published for each instrument (the instrument id of a synthetic
//! message, the stock locate of an ITCH message; see
//! [`MessageSource::instrument`](super::MessageSource::instrument)). A
//! session restart empties it.
//!
//! A client session goes:
//!
//! 1. the client sends a login request within the login timeout; a wrong
//!    username or password gets login rejected `A`, a session other than
//!    blank or the current one gets login rejected `S`, and the connection
//!    closes;
//! 2. the server takes the book and the publisher's next sequence number
//!    under the lock the publisher updates them under, so the snapshot
//!    reflects exactly the messages before that sequence number;
//! 3. it sends login accepted (the current session, SoupBinTCP sequence 1),
//!    one sequenced-data frame per book message in instrument order, then
//!    the end-of-snapshot message `G` carrying that next sequence number;
//! 4. it sends server heartbeats while the client stays idle, until the
//!    client logs out, disconnects, or the linger time runs out, then sends
//!    end of session and closes.
//!
//! Clients are served concurrently, each on its own thread, at most
//! `max_snapshot_clients` at once; further connections wait in the backlog.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::protocol::soupbintcp::{
    Frame, FrameDecoder, LoginAccepted, LoginRequest, RejectReason, end_of_snapshot_payload,
};
use socket2::{Domain, Protocol, Socket, Type};

use super::SimError;
use super::config::MoldSimConfig;
use super::handle::{Shared, far_deadline, join_by, lock};
use super::net::is_timeout;
use super::stats::bump;

/// How long one wait for a connection or a client frame lasts.
const POLL: Duration = Duration::from_millis(50);
/// How long one write to a client may block.
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the server waits for its client threads when stopping.
const CLIENT_STOP_BOUND: Duration = Duration::from_secs(2);
/// Largest frame a client may send.
const MAX_CLIENT_FRAME: u16 = 256;
/// Bytes of snapshot frames buffered before one write.
const WRITE_CHUNK: usize = 64 * 1024;

/// The last message of each instrument, in instrument order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Book {
    last: BTreeMap<u16, Vec<u8>>,
}

impl Book {
    /// Makes `message` the last one of `instrument`; a message without an
    /// instrument changes nothing.
    pub fn apply(&mut self, instrument: Option<u16>, message: &[u8]) {
        if let Some(key) = instrument {
            let slot = self.last.entry(key).or_default();
            slot.clear();
            slot.extend_from_slice(message);
        }
    }

    /// Forgets every instrument.
    pub fn clear(&mut self) {
        self.last.clear();
    }

    /// Number of instruments with a message.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no instrument has a message.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// The messages, in instrument order.
    pub fn messages(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.last.values().map(Vec::as_slice)
    }
}

/// What a client thread needs to know.
#[derive(Debug)]
struct Settings {
    username: String,
    password: String,
    heartbeat: Duration,
    linger: Duration,
    login_timeout: Duration,
    max_clients: usize,
}

/// The snapshot server thread's state.
pub(crate) struct SnapshotServer {
    listener: TcpListener,
    addr: SocketAddrV4,
    shared: Arc<Shared>,
    settings: Arc<Settings>,
}

impl SnapshotServer {
    /// Binds and listens on 127.0.0.1 at the configured port.
    pub(crate) fn bind(config: &MoldSimConfig, shared: Arc<Shared>) -> Result<Self, SimError> {
        let context = "bind the snapshot server";
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(SimError::io(context))?;
        let local = SocketAddrV4::new(Ipv4Addr::LOCALHOST, config.snapshot_port);
        socket
            .set_reuse_address(true)
            .and_then(|()| socket.bind(&local.into()))
            .and_then(|()| socket.listen(16))
            // On Linux the receive timeout bounds `accept` too.
            .and_then(|()| socket.set_read_timeout(Some(POLL)))
            .map_err(SimError::io(context))?;
        let listener: TcpListener = socket.into();
        let addr = match listener.local_addr().map_err(SimError::io(context))? {
            SocketAddr::V4(addr) => addr,
            SocketAddr::V6(_) => return Err(SimError::config("snapshot_port", "bound to IPv6")),
        };
        let settings = Settings {
            username: config.username.clone(),
            password: config.password.clone(),
            heartbeat: config.snapshot_heartbeat,
            linger: config.snapshot_linger,
            login_timeout: config.login_timeout,
            max_clients: config.max_snapshot_clients,
        };
        Ok(Self {
            listener,
            addr,
            shared,
            settings: Arc::new(settings),
        })
    }

    /// Where the server listens.
    pub(crate) fn local_addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// Accepts and serves clients until told to stop, then joins them.
    pub(crate) fn run(self) {
        let mut clients: Vec<JoinHandle<()>> = Vec::new();
        while !self.shared.stopping() {
            clients.retain(|client| !client.is_finished());
            if clients.len() >= self.settings.max_clients {
                thread::sleep(POLL);
                continue;
            }
            match self.listener.accept() {
                Ok((stream, peer)) if peer.ip().is_loopback() => {
                    bump(&self.shared.counters.snapshot_clients, 1);
                    let shared = Arc::clone(&self.shared);
                    let settings = Arc::clone(&self.settings);
                    let spawned = thread::Builder::new()
                        .name("sim-snapshot-client".to_owned())
                        .spawn(move || {
                            // A client that goes away mid-session is no error of the server's.
                            let _ = serve_client(stream, &shared, &settings);
                        });
                    if let Ok(handle) = spawned {
                        clients.push(handle);
                    }
                }
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {}
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
        let deadline = far_deadline(CLIENT_STOP_BOUND);
        for client in clients {
            let _ = join_by(client, deadline, "snapshot client");
        }
    }
}

/// One client session, start to end.
fn serve_client(mut stream: TcpStream, shared: &Shared, settings: &Settings) -> io::Result<()> {
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let mut reader = FrameReader::default();
    let Some(login) = await_login(&mut stream, &mut reader, shared, settings)? else {
        return Ok(());
    };
    let mut out = Vec::with_capacity(WRITE_CHUNK);
    let snapshot = {
        let feed = lock(&shared.feed);
        let reason = if login.username() != settings.username.as_bytes()
            || login.password() != settings.password.as_bytes()
        {
            Some(RejectReason::NotAuthorized)
        } else if !login.session.is_blank() && login.session != feed.session {
            Some(RejectReason::SessionNotAvailable)
        } else {
            None
        };
        match reason {
            Some(reason) => Err(reason),
            None => {
                let accepted = LoginAccepted {
                    session: feed.session,
                    sequence: 1,
                };
                push_frame(&mut out, &Frame::LoginAccepted(accepted))?;
                let book: Vec<Vec<u8>> = feed.book.messages().map(<[u8]>::to_vec).collect();
                Ok((book, feed.next_sequence))
            }
        }
    };
    let (book, next_sequence) = match snapshot {
        Ok(snapshot) => snapshot,
        Err(reason) => {
            bump(&shared.counters.logins_rejected, 1);
            push_frame(&mut out, &Frame::LoginRejected(reason))?;
            return stream.write_all(&out);
        }
    };
    for message in &book {
        push_frame(&mut out, &Frame::SequencedData(message))?;
        if out.len() >= WRITE_CHUNK {
            if shared.stopping() {
                return Ok(());
            }
            stream.write_all(&out)?;
            out.clear();
        }
    }
    push_frame(
        &mut out,
        &Frame::SequencedData(&end_of_snapshot_payload(next_sequence)),
    )?;
    stream.write_all(&out)?;
    bump(&shared.counters.snapshots_sent, 1);
    bump(
        &shared.counters.snapshot_messages,
        u64::try_from(book.len()).unwrap_or(0),
    );
    linger(&mut stream, &mut reader, shared, settings)
}

/// Waits for the login request; `None` when the client sends anything
/// else, disconnects, or takes longer than the login timeout.
fn await_login(
    stream: &mut TcpStream,
    reader: &mut FrameReader,
    shared: &Shared,
    settings: &Settings,
) -> io::Result<Option<LoginRequest>> {
    let deadline = far_deadline(settings.login_timeout);
    while !shared.stopping() && Instant::now() < deadline {
        match reader.poll(stream)? {
            Incoming::Login(login) => return Ok(Some(login)),
            Incoming::Idle => {}
            Incoming::Logout | Incoming::Other | Incoming::Closed => return Ok(None),
        }
    }
    Ok(None)
}

/// After the snapshot: heartbeats while idle, until logout, disconnect or
/// the linger time; then end of session.
fn linger(
    stream: &mut TcpStream,
    reader: &mut FrameReader,
    shared: &Shared,
    settings: &Settings,
) -> io::Result<()> {
    let deadline = far_deadline(settings.linger);
    let mut last_sent = Instant::now();
    let mut out = Vec::new();
    while !shared.stopping() && Instant::now() < deadline {
        match reader.poll(stream)? {
            Incoming::Logout => break,
            Incoming::Closed => return Ok(()),
            Incoming::Login(_) | Incoming::Other | Incoming::Idle => {}
        }
        if last_sent.elapsed() >= settings.heartbeat {
            out.clear();
            push_frame(&mut out, &Frame::ServerHeartbeat)?;
            stream.write_all(&out)?;
            last_sent = Instant::now();
        }
    }
    out.clear();
    push_frame(&mut out, &Frame::EndOfSession)?;
    stream.write_all(&out)
}

/// Appends the encoding of `frame` to `out`.
fn push_frame(out: &mut Vec<u8>, frame: &Frame<'_>) -> io::Result<()> {
    let at = out.len();
    out.resize(at.saturating_add(frame.encoded_len()), 0);
    let written = out
        .get_mut(at..)
        .map(|tail| frame.encode(tail))
        .unwrap_or(Ok(0))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    out.truncate(at.saturating_add(written));
    Ok(())
}

/// What a client sent, as far as the server cares.
#[derive(Debug)]
enum Incoming {
    Login(LoginRequest),
    Logout,
    Other,
    Closed,
    Idle,
}

/// Reassembles client frames from a TCP stream in a fixed buffer.
#[derive(Debug)]
struct FrameReader {
    buf: [u8; 2 * MAX_CLIENT_FRAME as usize],
    len: usize,
    decoder: FrameDecoder,
}

impl Default for FrameReader {
    fn default() -> Self {
        Self {
            buf: [0; 2 * MAX_CLIENT_FRAME as usize],
            len: 0,
            decoder: FrameDecoder::with_max_frame_len(MAX_CLIENT_FRAME),
        }
    }
}

impl FrameReader {
    /// The next complete frame, reading at most once (bounded by the read
    /// timeout); `Idle` when none is complete yet.
    fn poll(&mut self, stream: &mut TcpStream) -> io::Result<Incoming> {
        if let Some(incoming) = self.take_frame()? {
            return Ok(incoming);
        }
        let free = self.buf.get_mut(self.len..).unwrap_or_default();
        match stream.read(free) {
            Ok(0) => Ok(Incoming::Closed),
            Ok(n) => {
                self.len = self.len.saturating_add(n);
                Ok(self.take_frame()?.unwrap_or(Incoming::Idle))
            }
            Err(e) if is_timeout(&e) => Ok(Incoming::Idle),
            Err(e) => Err(e),
        }
    }

    fn take_frame(&mut self) -> io::Result<Option<Incoming>> {
        let filled = self.buf.get(..self.len).unwrap_or_default();
        let decoded = self
            .decoder
            .decode(filled)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let Some((frame, used)) = decoded else {
            return Ok(None);
        };
        let incoming = match frame {
            Frame::LoginRequest(login) => Incoming::Login(login),
            Frame::LogoutRequest => Incoming::Logout,
            _ => Incoming::Other,
        };
        self.buf.copy_within(used..self.len, 0);
        self.len = self.len.saturating_sub(used);
        Ok(Some(incoming))
    }
}
