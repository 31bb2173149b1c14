//! The datagram endpoints of the live loop: one socket per [`Endpoint`] a venue declares,
//! drained with `recvmmsg` batches into the venue a few datagrams at a time.

use std::net::SocketAddrV4;
use std::os::fd::AsRawFd;

use mio::net::UdpSocket;

use super::chaos::{Chaos, ChaosSpec};
use crate::io::batch::RecvBatch;
use crate::io::clock::Clock;
use crate::io::socket::{MulticastSpec, SocketInfo, open_multicast, open_unicast};
use crate::publish::fanout::Fanout;
use crate::sinks::pcap::PcapTap;
use crate::time::{Mono, Wall};
use crate::venue::{Endpoint, EndpointId, Received, Transmit, Venue};

/// Datagrams handed to a venue at once (a multiple of the four it decodes together).
const GROUP: usize = 16;

/// Counters the loop keeps per endpoint beside the venue's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Datagrams dropped by the source filter.
    pub filtered: u64,
    /// Datagrams larger than the receive buffer (cut, dropped).
    pub truncated: u64,
    /// Requests that could not be sent.
    pub send_errors: u64,
    /// Receive calls that failed with an error other than "would block".
    pub recv_errors: u64,
}

impl SocketStats {
    /// The sum of two endpoints' counters.
    pub fn add(self, other: Self) -> Self {
        Self {
            filtered: self.filtered + other.filtered,
            truncated: self.truncated + other.truncated,
            send_errors: self.send_errors + other.send_errors,
            recv_errors: self.recv_errors + other.recv_errors,
        }
    }
}

impl Socket {
    /// A multicast join (a line of its stream), not a unicast socket.
    pub(super) fn is_multicast(&self) -> bool {
        self.info.is_some()
    }
}

/// The inode of socket `socket` (0 when it cannot be read): the key of its row in
/// `/proc/net/udp`, where the kernel counts what it dropped for it.
fn inode_of(socket: &UdpSocket) -> u64 {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/fd/{}", socket.as_raw_fd())).map_or(0, |m| m.ino())
}

/// One open endpoint.
pub(super) struct Socket {
    pub(super) socket: UdpSocket,
    /// The multicast join (source filter, receive buffer); `None` for a unicast socket.
    info: Option<SocketInfo>,
    /// The venue's stream it belongs to.
    pub(super) stream: usize,
    /// The address datagrams are recorded as received on (the stream's group), so a
    /// replay of the recording sees answers where it sees the feed.
    record_as: Option<SocketAddrV4>,
    pub(super) stats: SocketStats,
    /// The last receive error, and whether it was logged.
    pub(super) last_error: Option<std::io::ErrorKind>,
    /// Loss injection in front of the venue (multicast endpoints, when configured).
    pub(super) chaos: Option<Chaos>,
    /// The socket's inode (its kernel drop count is read at scrape time by it).
    pub(super) inode: u64,
}

/// Opens every endpoint of `venue`. Returns the sockets and a warning per multicast
/// socket whose receive buffer the kernel capped.
pub(super) fn open(
    venue: &impl Venue,
    chaos: Option<ChaosSpec>,
    max_datagram: usize,
) -> Result<(Vec<Socket>, Vec<String>), crate::io::IoError> {
    let endpoints = venue.endpoints();
    let mut sockets = Vec::with_capacity(endpoints.len());
    let mut warnings = Vec::new();
    for e in endpoints {
        let group_of = |stream: usize| {
            endpoints.iter().find_map(|o| match o {
                Endpoint::Multicast {
                    group, stream: s, ..
                } if *s == stream => Some(*group),
                _ => None,
            })
        };
        let socket = match *e {
            Endpoint::Multicast {
                group,
                interface,
                source,
                rcvbuf,
                stream,
            } => {
                let (socket, info) = open_multicast(&MulticastSpec {
                    group,
                    interface,
                    source,
                    rcvbuf,
                })?;
                if let Some(w) = info.rcvbuf_warning() {
                    warnings.push(format!("{}: {w}", venue.name()));
                }
                // Each line its own faults: the seed mixed with the endpoint's place.
                let chaos = chaos.map(|c| {
                    let seed = c.seed ^ (sockets.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    Chaos::new(ChaosSpec { seed, ..c }, max_datagram)
                });
                Socket {
                    inode: inode_of(&socket),
                    socket,
                    info: Some(info),
                    stream,
                    record_as: Some(info.local),
                    stats: SocketStats::default(),
                    last_error: None,
                    chaos,
                }
            }
            Endpoint::Unicast { interface, stream } => {
                let socket = open_unicast(SocketAddrV4::new(interface, 0))?;
                Socket {
                    inode: inode_of(&socket),
                    socket,
                    info: None,
                    stream,
                    record_as: group_of(stream),
                    stats: SocketStats::default(),
                    last_error: None,
                    chaos: None,
                }
            }
        };
        sockets.push(socket);
    }
    Ok((sockets, warnings))
}

/// What draining needs besides the socket.
pub(super) struct Drain<'a> {
    pub(super) batch: &'a mut RecvBatch,
    pub(super) fanout: &'a mut Fanout,
    pub(super) recorder: Option<&'a mut PcapTap>,
}

/// Reads `socket` (endpoint `id` of `venue`) until it would block, handing the datagrams
/// to the venue. Returns the datagrams handed over.
pub(super) fn drain<V: Venue>(
    now: Mono,
    venue: &mut V,
    id: EndpointId,
    socket: &mut Socket,
    d: &mut Drain<'_>,
) -> usize {
    let mut handled = 0;
    loop {
        let n = match d.batch.recv(socket.socket.as_raw_fd()) {
            Ok(0) => return handled,
            Ok(n) => n,
            Err(e) => {
                socket.stats.recv_errors += 1;
                socket.last_error = Some(e.kind());
                return handled;
            }
        };
        let realtime = Clock::realtime_ns();
        d.fanout.set_now(realtime);
        let mut group = [Received::default(); GROUP];
        let mut waiting = 0;
        for i in 0..n {
            let Some(dg) = d.batch.get(i) else { continue };
            if let (Some(tap), Some(at)) = (d.recorder.as_mut(), socket.record_as) {
                tap.record(dg.kernel_ns.unwrap_or(realtime), dg.source, at, dg.payload);
            }
            if dg.truncated {
                socket.stats.truncated += 1;
                continue;
            }
            if socket.info.is_some_and(|info| !info.accepts(dg.source)) {
                socket.stats.filtered += 1;
                continue;
            }
            let received = Received {
                bytes: dg.payload,
                recv: Wall::from_nanos(dg.kernel_ns.unwrap_or(realtime)),
            };
            if let Some(chaos) = socket.chaos.as_mut() {
                // One at a time: a datagram held back lives in the injector's buffer.
                let fanout = &mut *d.fanout;
                chaos.apply(now, std::slice::from_ref(&received), |r| {
                    venue.handle_datagrams(now, id, std::slice::from_ref(&r), fanout);
                });
                handled += 1;
                continue;
            }
            if let Some(slot) = group.get_mut(waiting) {
                *slot = received;
                waiting += 1;
            }
            if waiting == GROUP {
                venue.handle_datagrams(now, id, &group, d.fanout);
                waiting = 0;
            }
            handled += 1;
        }
        if let Some(rest) = group.get(..waiting) {
            venue.handle_datagrams(now, id, rest, d.fanout);
        }
    }
}

/// Sends `tx` from its endpoint's socket; false when it could not be sent (counted).
pub(super) fn send(sockets: &mut [Socket], tx: &Transmit) -> bool {
    let Some(socket) = sockets.get_mut(usize::from(tx.endpoint.0)) else {
        return false;
    };
    match socket.socket.send_to(tx.payload(), tx.to) {
        Ok(_) => true,
        Err(_) => {
            socket.stats.send_errors += 1;
            false
        }
    }
}

/// Hands the venue the datagrams the loss injector of `socket` (endpoint `id`) held back
/// that are due at `now`. Returns how many.
pub(super) fn release_held<V: Venue>(
    now: Mono,
    venue: &mut V,
    id: EndpointId,
    socket: &mut Socket,
    fanout: &mut Fanout,
) -> usize {
    let Some(chaos) = socket.chaos.as_mut() else {
        return 0;
    };
    if chaos.next_due().is_none_or(|t| t > now) {
        return 0;
    }
    let mut n = 0;
    chaos.release(now, false, &mut |r| {
        n += 1;
        venue.handle_datagrams(now, id, std::slice::from_ref(&r), fanout);
    });
    n
}
