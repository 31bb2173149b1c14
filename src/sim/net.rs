//! The network-safety rule, and how socket errors are classified.
//!
//! The simulator never sends anywhere but the loopback interface:
//! [`open_sender`] refuses any destination that is neither a multicast group
//! nor a 127.0.0.0/8 address, binds to 127.0.0.1, and sends multicast
//! through 127.0.0.1 with a TTL of 0 (loop on), so no datagram leaves the
//! machine. The servers bind 127.0.0.1 and answer only 127.0.0.0/8 peers.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::SimError;

/// Whether the publisher may send to `ip`: a multicast group or 127.0.0.0/8.
pub fn is_allowed_destination(ip: Ipv4Addr) -> bool {
    ip.is_multicast() || ip.is_loopback()
}

/// Opens the publisher's socket for `dest`, refusing unsafe destinations.
pub fn open_sender(dest: SocketAddrV4) -> Result<UdpSocket, SimError> {
    if !is_allowed_destination(*dest.ip()) {
        return Err(SimError::ForbiddenDestination(dest));
    }
    let context = "open the publisher socket";
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(SimError::io(context))?;
    socket
        .set_multicast_if_v4(&Ipv4Addr::LOCALHOST)
        .and_then(|()| socket.set_multicast_ttl_v4(0))
        .and_then(|()| socket.set_multicast_loop_v4(true))
        .and_then(|()| socket.set_write_timeout(Some(Duration::from_millis(100))))
        .and_then(|()| socket.bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into()))
        .map_err(SimError::io(context))?;
    Ok(socket.into())
}

/// Errors worth a retry: a full socket buffer or an interrupted call.
pub(crate) fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    ) || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Whether a receive error only means the read timeout ran out.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_loopback_unicast() {
        for ip in [[10, 0, 0, 1], [192, 168, 0, 1], [8, 8, 8, 8], [0, 0, 0, 0]] {
            let dest = SocketAddrV4::new(Ipv4Addr::from(ip), 9_999);
            assert!(matches!(
                open_sender(dest),
                Err(SimError::ForbiddenDestination(_))
            ));
        }
        assert!(is_allowed_destination(Ipv4Addr::new(239, 1, 2, 3)));
        assert!(is_allowed_destination(Ipv4Addr::new(127, 3, 2, 1)));
    }
}
