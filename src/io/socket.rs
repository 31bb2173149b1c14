//! Opening sockets: multicast receivers, unicast sockets for re-requests, and a multicast
//! sender that is confined to the loopback interface.
//!
//! Receivers are returned non-blocking, as [`mio::net::UdpSocket`], with `SO_TIMESTAMPNS` on so
//! every datagram read through [`RecvBatch`](super::RecvBatch) carries its kernel receive time.
//!
//! # Network safety
//!
//! gapless only ever sends multicast through interface 127.0.0.1 with a TTL of 0 or 1.
//! [`open_multicast_sender`] refuses anything else, and [`send_loopback`] checks every
//! destination with [`is_loopback_safe`] against the socket's own multicast interface and TTL.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use super::IoError;
use super::batch::enable_kernel_timestamps;

/// What a multicast receiver joins and how large its kernel buffer should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MulticastSpec {
    /// The group and UDP port. The socket binds to this address, so on Linux it only sees
    /// datagrams sent to this group (not other groups that share the port).
    pub group: SocketAddrV4,
    /// The address of the local interface to join on, e.g. `127.0.0.1`.
    pub interface: Ipv4Addr,
    /// The only sender to accept. When set, the join is source-specific
    /// (`IP_ADD_SOURCE_MEMBERSHIP`) and `SocketInfo::accepts` filters in the receive path too.
    pub source: Option<Ipv4Addr>,
    /// The `SO_RCVBUF` to ask for, in bytes; `0` keeps the kernel default.
    pub rcvbuf: usize,
}

/// The receive buffer that was asked for and what the kernel granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcvBuf {
    /// The size asked for, in bytes (`0`: the kernel default was kept).
    pub requested: usize,
    /// What `getsockopt(SO_RCVBUF)` reported. Linux reports twice the usable size, the other
    /// half being its bookkeeping allowance.
    pub reported: usize,
    /// The usable size: `reported / 2` on Linux.
    pub effective: usize,
    /// Whether the kernel granted less than was asked for: it caps the request at
    /// `net.core.rmem_max`.
    pub capped: bool,
}

impl RcvBuf {
    /// Builds the report from the requested size and the value read back from the kernel.
    pub fn from_reported(requested: usize, reported: usize) -> Self {
        let effective = if cfg!(target_os = "linux") {
            reported / 2
        } else {
            reported
        };
        RcvBuf {
            requested,
            reported,
            effective,
            capped: requested > 0 && effective < requested,
        }
    }
}

/// What [`open_multicast`] set up, for the caller to log and to filter with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketInfo {
    /// The address the socket is bound to (the group address and port).
    pub local: SocketAddrV4,
    /// The group joined.
    pub group: Ipv4Addr,
    /// The interface the group was joined on.
    pub interface: Ipv4Addr,
    /// The only sender accepted, if the join was source-specific.
    pub source_filter: Option<Ipv4Addr>,
    /// The receive buffer requested and granted.
    pub rcvbuf: RcvBuf,
}

impl SocketInfo {
    /// Whether a datagram from `from` passes the source filter (always, without one).
    ///
    /// The kernel already filters a source-specific join; this second check keeps a
    /// misconfigured or any-source membership elsewhere on the host from leaking other senders
    /// into the feed.
    pub fn accepts(&self, from: SocketAddrV4) -> bool {
        self.source_filter
            .is_none_or(|allowed| *from.ip() == allowed)
    }

    /// A warning to log when the kernel capped the receive buffer, naming the sysctl to raise.
    pub fn rcvbuf_warning(&self) -> Option<String> {
        let r = self.rcvbuf;
        r.capped.then(|| {
            format!(
                "SO_RCVBUF for group {}: asked for {} bytes, the kernel granted {}; raise \
                 net.core.rmem_max (sysctl -w net.core.rmem_max={}) to avoid drops in bursts",
                self.local, r.requested, r.effective, r.requested
            )
        })
    }
}

/// Opens a non-blocking multicast receiver for `spec` and joins its group.
///
/// The socket has `SO_REUSEADDR` and `SO_REUSEPORT` set, so several receivers on one host can
/// join the same group and each gets every datagram; it is bound to the group address itself,
/// requests `SO_RCVBUF` = `spec.rcvbuf` (reported back in `SocketInfo::rcvbuf`) and has
/// kernel receive timestamps enabled.
pub fn open_multicast(spec: &MulticastSpec) -> Result<(mio::net::UdpSocket, SocketInfo), IoError> {
    let group = *spec.group.ip();
    if !group.is_multicast() {
        return Err(IoError::NotMulticast { group });
    }
    let from = spec.source.map(|s| format!(" from source {s}"));
    let (interface, from) = (spec.interface, from.unwrap_or_default());
    let target = format!("group {}{from} on interface {interface}", spec.group);
    let socket = udp_socket(&target)?;
    socket
        .set_reuse_address(true)
        .map_err(IoError::socket("set SO_REUSEADDR", &target))?;
    socket
        .set_reuse_port(true)
        .map_err(IoError::socket("set SO_REUSEPORT", &target))?;
    if spec.rcvbuf > 0 {
        let size = spec.rcvbuf.min(i32::MAX as usize);
        socket
            .set_recv_buffer_size(size)
            .map_err(IoError::socket("set SO_RCVBUF", &target))?;
    }
    let reported = socket
        .recv_buffer_size()
        .map_err(IoError::socket("read back SO_RCVBUF", &target))?;
    enable_kernel_timestamps(&socket).map_err(IoError::socket("enable SO_TIMESTAMPNS", &target))?;
    socket
        .bind(&spec.group.into())
        .map_err(IoError::socket("bind to the group address", &target))?;
    let (joined, op) = match spec.source {
        Some(src) => (
            socket.join_ssm_v4(&src, &group, &spec.interface),
            "join source-specific (IP_ADD_SOURCE_MEMBERSHIP)",
        ),
        None => (
            socket.join_multicast_v4(&group, &spec.interface),
            "join the group (IP_ADD_MEMBERSHIP)",
        ),
    };
    joined.map_err(IoError::socket(op, &target))?;
    socket
        .set_nonblocking(true)
        .map_err(IoError::socket("make the socket non-blocking", &target))?;
    let info = SocketInfo {
        local: spec.group,
        group,
        interface: spec.interface,
        source_filter: spec.source,
        rcvbuf: RcvBuf::from_reported(spec.rcvbuf, reported),
    };
    Ok((mio::net::UdpSocket::from_std(socket.into()), info))
}

/// Creates an IPv4 UDP socket; `target` names it in the error.
fn udp_socket(target: &str) -> Result<Socket, IoError> {
    Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(IoError::socket("create a UDP socket", target))
}

/// Opens a non-blocking UDP socket bound to `bind` (`0.0.0.0:0` for an ephemeral port), with
/// kernel receive timestamps, for re-requests and their answers.
pub fn open_unicast(bind: SocketAddrV4) -> Result<mio::net::UdpSocket, IoError> {
    let target = format!("unicast socket {bind}");
    let socket = udp_socket(&target)?;
    enable_kernel_timestamps(&socket).map_err(IoError::socket("enable SO_TIMESTAMPNS", &target))?;
    socket
        .bind(&bind.into())
        .map_err(IoError::socket("bind", &target))?;
    socket
        .set_nonblocking(true)
        .map_err(IoError::socket("make the socket non-blocking", &target))?;
    Ok(mio::net::UdpSocket::from_std(socket.into()))
}

/// Whether a datagram to `dst` through multicast interface `interface` stays on this host:
/// the interface must be 127.0.0.1 and the destination multicast or in 127.0.0.0/8.
#[cfg(test)]
pub fn is_loopback_safe(dst: Ipv4Addr, interface: Ipv4Addr) -> bool {
    interface == Ipv4Addr::LOCALHOST && (dst.is_multicast() || dst.is_loopback())
}

/// Opens a blocking multicast sender on `interface` (which must be 127.0.0.1) with the given
/// TTL (0 or 1) and multicast loop on, bound to `interface` with an ephemeral port.
pub fn open_multicast_sender(interface: Ipv4Addr, ttl: u32) -> Result<UdpSocket, IoError> {
    open_multicast_sender_from(interface, interface, ttl)
}

/// Like [`open_multicast_sender`], but binds to `source` (any 127.0.0.0/8 address), so the
/// datagrams carry that source address: how tests produce a second, distinct sender.
pub fn open_multicast_sender_from(
    source: Ipv4Addr,
    interface: Ipv4Addr,
    ttl: u32,
) -> Result<UdpSocket, IoError> {
    if interface != Ipv4Addr::LOCALHOST || !source.is_loopback() {
        return Err(IoError::NotLoopback {
            destination: source,
            interface,
        });
    }
    if ttl > 1 {
        return Err(IoError::TtlTooHigh { interface, ttl });
    }
    let target = format!("multicast sender from {source} on interface {interface}");
    let socket = udp_socket(&target)?;
    socket
        .set_multicast_if_v4(&interface)
        .map_err(IoError::socket("set IP_MULTICAST_IF", &target))?;
    socket
        .set_multicast_ttl_v4(ttl)
        .map_err(IoError::socket("set IP_MULTICAST_TTL", &target))?;
    socket
        .set_multicast_loop_v4(true)
        .map_err(IoError::socket("set IP_MULTICAST_LOOP", &target))?;
    socket
        .bind(&SocketAddrV4::new(source, 0).into())
        .map_err(IoError::socket("bind", &target))?;
    Ok(socket.into())
}

/// Sends `payload` to `dst` after checking, against the socket's own `IP_MULTICAST_IF` and
/// `IP_MULTICAST_TTL`, that it cannot leave the host. Returns the bytes sent.
#[cfg(test)]
pub fn send_loopback(
    socket: &UdpSocket,
    payload: &[u8],
    dst: SocketAddrV4,
) -> Result<usize, IoError> {
    let target = format!("destination {dst}");
    let sock = socket2::SockRef::from(socket);
    let interface = sock
        .multicast_if_v4()
        .map_err(IoError::socket("read IP_MULTICAST_IF", &target))?;
    let ttl = sock
        .multicast_ttl_v4()
        .map_err(IoError::socket("read IP_MULTICAST_TTL", &target))?;
    if !is_loopback_safe(*dst.ip(), interface) {
        return Err(IoError::NotLoopback {
            destination: *dst.ip(),
            interface,
        });
    }
    if ttl > 1 {
        return Err(IoError::TtlTooHigh { interface, ttl });
    }
    socket
        .send_to(payload, dst)
        .map_err(IoError::socket("send", &target))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::batch::RecvBatch;
    use crate::io::clock::Clock;
    use crate::io::test_support::{
        Got, LO, QUIET, TestResult, WAIT, group, local_v4, payloads, receive, spec,
    };

    /// Sends `count` datagrams, waits for them, then listens a little longer for extras.
    fn round_trip(g: SocketAddrV4, ttl: u32, count: u8) -> TestResult<(Vec<Got>, UdpSocket)> {
        let (mut rx, info) = open_multicast(&spec(g))?;
        assert_eq!(info.local, g);
        let tx = open_multicast_sender(LO, ttl)?;
        for i in 0..count {
            send_loopback(&tx, &[b'm', i], g)?;
        }
        let mut batch = RecvBatch::new(16, 2048);
        let (mut got, _) = receive(&mut rx, &mut batch, usize::from(count), WAIT);
        got.extend(receive(&mut rx, &mut batch, usize::MAX, QUIET).0);
        Ok((got, tx))
    }

    #[test]
    fn ttl_zero_and_one_deliver_exactly_once_with_source_and_kernel_time() -> TestResult {
        for (ttl, g) in [(0, group(1, 47001)), (1, group(2, 47002))] {
            let before = Clock::realtime_ns();
            let (got, tx) = round_trip(g, ttl, 5)?;
            let after = Clock::realtime_ns();
            let want: Vec<Vec<u8>> = (0..5).map(|i| vec![b'm', i]).collect();
            assert_eq!(payloads(&got), want, "TTL {ttl}");
            let sender = local_v4(tx.local_addr())?;
            for g in &got {
                assert_eq!((g.source, g.truncated, g.wire_len), (sender, false, 2));
                let k = g.kernel_ns.ok_or("no kernel timestamp")?;
                assert!(before <= k && k <= after, "{before} <= {k} <= {after}");
            }
        }
        Ok(())
    }

    const ALLOWED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

    /// Sends from 127.0.0.1, then from [`ALLOWED`], then from 127.0.0.1 again, and collects.
    fn from_two_senders(
        rx: &mut mio::net::UdpSocket,
        g: SocketAddrV4,
        want: usize,
    ) -> TestResult<Vec<Got>> {
        let other = open_multicast_sender(LO, 0)?;
        let good = open_multicast_sender_from(ALLOWED, LO, 0)?;
        send_loopback(&other, b"other", g)?;
        send_loopback(&good, b"good", g)?;
        send_loopback(&other, b"other", g)?;
        let mut batch = RecvBatch::new(8, 64);
        let (mut got, _) = receive(rx, &mut batch, want, WAIT);
        got.extend(receive(rx, &mut batch, usize::MAX, QUIET).0);
        Ok(got)
    }

    #[test]
    fn source_specific_join_only_passes_the_allowed_sender() -> TestResult {
        let ssm = MulticastSpec {
            source: Some(ALLOWED),
            ..spec(group(3, 47003))
        };
        let (mut rx, info) = open_multicast(&ssm)?;
        assert_eq!(info.source_filter, Some(ALLOWED));
        let got = from_two_senders(&mut rx, ssm.group, 1)?;
        assert_eq!(payloads(&got), vec![b"good".to_vec()]);
        assert_eq!(got.first().map(|g| *g.source.ip()), Some(ALLOWED));
        assert!(got.iter().all(|g| info.accepts(g.source)));
        Ok(())
    }

    #[test]
    fn the_receive_path_filter_drops_other_sources() -> TestResult {
        // An any-source join lets both senders through the kernel; the info's filter must not.
        let (mut rx, info) = open_multicast(&spec(group(4, 47004)))?;
        let got = from_two_senders(&mut rx, info.local, 3)?;
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|g| info.accepts(g.source)));
        let info = SocketInfo {
            source_filter: Some(ALLOWED),
            ..info
        };
        let kept: Vec<Got> = got.into_iter().filter(|g| info.accepts(g.source)).collect();
        assert_eq!(payloads(&kept), vec![b"good".to_vec()]);
        Ok(())
    }

    #[test]
    fn unicast_round_trip_carries_kernel_time() -> TestResult {
        let mut a = open_unicast(SocketAddrV4::new(LO, 0))?;
        let mut b = open_unicast(SocketAddrV4::new(LO, 0))?;
        let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
        a.send_to(b"request", b_addr)?;
        let mut batch = RecvBatch::new(4, 256);
        let (got, _) = receive(&mut b, &mut batch, 1, WAIT);
        assert_eq!(payloads(&got), vec![b"request".to_vec()]);
        let first = got.first().ok_or("nothing received")?;
        assert_eq!(std::net::SocketAddr::V4(first.source), a_addr);
        assert!(first.kernel_ns.is_some());
        b.send_to(b"answer", a_addr)?;
        let (got, _) = receive(&mut a, &mut batch, 1, WAIT);
        assert_eq!(payloads(&got), vec![b"answer".to_vec()]);
        Ok(())
    }

    #[test]
    fn only_loopback_sends_are_allowed() -> TestResult {
        let (g, ten) = (Ipv4Addr::new(239, 255, 91, 12), Ipv4Addr::new(10, 0, 0, 1));
        assert!(is_loopback_safe(g, LO));
        assert!(is_loopback_safe(Ipv4Addr::new(127, 0, 0, 9), LO));
        assert!(!is_loopback_safe(ten, LO));
        assert!(!is_loopback_safe(Ipv4Addr::new(8, 8, 8, 8), LO));
        assert!(!is_loopback_safe(g, ten));
        assert!(!is_loopback_safe(g, Ipv4Addr::UNSPECIFIED));

        let ttl2 = open_multicast_sender(LO, 2).err().map(|e| e.to_string());
        assert_eq!(
            ttl2.as_deref(),
            Some("refusing multicast TTL 2 on interface 127.0.0.1: only TTL 0 or 1 is allowed")
        );
        let remote_if = open_multicast_sender(ten, 0);
        assert!(matches!(remote_if, Err(IoError::NotLoopback { .. })));
        let remote_src = open_multicast_sender_from(ten, LO, 0);
        assert!(matches!(remote_src, Err(IoError::NotLoopback { .. })));

        // The check happens before the send: nothing reaches 10.0.0.1.
        let tx = open_multicast_sender(LO, 0)?;
        let refused = send_loopback(&tx, b"x", SocketAddrV4::new(ten, 47012)).err();
        let refused = refused.map(|e| e.to_string());
        assert!(refused.is_some_and(|t| t.starts_with("refusing to send to 10.0.0.1 via")));
        // A socket whose TTL was raised behind our back is refused too.
        socket2::SockRef::from(&tx).set_multicast_ttl_v4(2)?;
        let raised = send_loopback(&tx, b"x", SocketAddrV4::new(g, 47012));
        assert!(matches!(raised, Err(IoError::TtlTooHigh { ttl: 2, .. })));
        Ok(())
    }
}
