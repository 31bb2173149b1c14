//! Loopback tests of the whole simulator: a receiver joined to the group on
//! 127.0.0.1, and plain UDP and TCP clients for the servers.
//!
//! Each test publishes to its own group and port (`239.255.77.N`, port
//! `42000 + N`) and binds the servers to free ports, so tests running in
//! parallel never see each other's traffic. Every receive has a timeout and
//! every loop a deadline.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::protocol::moldudp64::{Packet, PacketKind, Session};
use crate::protocol::soupbintcp::{Frame, LoginRequest, parse_frame};
use socket2::{Domain, Protocol, Socket, Type};

use super::{MoldSim, MoldSimConfig};

mod publisher;
mod servers;

/// The group and port of test number `n`.
fn group(n: u8) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, n), 42_000 + u16::from(n))
}

/// A small, fast configuration publishing to test `n`'s group.
fn config(n: u8) -> MoldSimConfig {
    let mut config = MoldSimConfig::new(group(n));
    config.count = 2_000;
    config.rate = Some(40_000.0);
    config.heartbeat_interval = Some(Duration::from_millis(50));
    config.end_of_session_gap = Duration::from_millis(2);
    config.snapshot_linger = Duration::from_secs(2);
    config.snapshot_heartbeat = Duration::from_millis(100);
    config
}

/// A receiver bound to `group` and joined to it on 127.0.0.1.
fn join(group: SocketAddrV4) -> UdpSocket {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket.bind(&group.into()).unwrap();
    socket
        .join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)
        .unwrap();
    socket.set_recv_buffer_size(4 << 20).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    socket.into()
}

/// Every datagram received until the first end-of-session packet (kept),
/// or until `limit` runs out.
fn receive_session(socket: &UdpSocket, limit: Duration) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 65_536];
    let mut datagrams = Vec::new();
    while Instant::now() < deadline {
        let Ok(len) = socket.recv(&mut buf) else {
            continue;
        };
        let datagram = buf[..len].to_vec();
        let end = Packet::decode(&datagram).unwrap().kind() == PacketKind::EndOfSession;
        datagrams.push(datagram);
        if end {
            break;
        }
    }
    datagrams
}

/// `(session, sequence, message)` of every message in `datagrams`, in arrival order.
fn messages(datagrams: &[Vec<u8>]) -> Vec<(Session, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for datagram in datagrams {
        let packet = Packet::decode(datagram).unwrap();
        for (sequence, message) in packet.sequenced_messages() {
            out.push((packet.session(), sequence, message.to_vec()));
        }
    }
    out
}

/// Joins `group` now, then receives one session on a thread (so nothing
/// waits in the socket buffer), for at most 10 s.
fn listen(group: SocketAddrV4) -> JoinHandle<Vec<Vec<u8>>> {
    let socket = join(group);
    thread::spawn(move || receive_session(&socket, Duration::from_secs(10)))
}

/// Starts a simulator and waits for its publisher, within 20 s.
fn run_to_end(config: MoldSimConfig) -> MoldSim {
    let mut sim = MoldSim::start(config).unwrap();
    sim.wait(Duration::from_secs(20)).unwrap();
    sim
}

/// A bare SoupBinTCP client.
struct SoupClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl SoupClient {
    fn connect(addr: SocketAddrV4) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    fn login(&mut self, user: &str, password: &str, session: Session) {
        let frame = Frame::LoginRequest(LoginRequest::new(user, password, session, 0).unwrap());
        self.send(&frame);
    }

    fn send(&mut self, frame: &Frame<'_>) {
        let mut out = vec![0u8; frame.encoded_len()];
        frame.encode(&mut out).unwrap();
        self.stream.write_all(&out).unwrap();
    }

    /// The next whole frame, raw; `None` at end of stream or after 5 s.
    fn next_raw(&mut self) -> Option<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut chunk = [0u8; 4_096];
        loop {
            if let Some((_, used)) = parse_frame(&self.buf).unwrap() {
                return Some(self.buf.drain(..used).collect());
            }
            if Instant::now() >= deadline {
                return None;
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => {}
            }
        }
    }
}
