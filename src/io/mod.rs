//! The OS shell: the only code in gapless that touches sockets, the clock and CPU affinity.
//!
//! Everything above this module is sans-IO: the venue sessions and the sequencer take bytes and
//! a time as arguments and return actions. This module supplies both, and nothing more:
//!
//! - [`socket`]: opening multicast receivers (any-source or source-specific joins, a receive
//!   buffer whose effective size is read back and reported), unicast sockets for re-requests,
//!   and a multicast sender that can only ever reach the loopback interface.
//! - [`batch`]: [`RecvBatch`], a set of fixed buffers filled by one `recvmmsg(2)` call, with
//!   each datagram's source, kernel receive time and truncation flag.
//! - [`idle`]: the idle strategy of the receive duty cycle (busy-spin, yield or block).
//! - [`clock`]: one monotonic reading per cycle, and the conversion of kernel (realtime)
//!   timestamps onto that monotonic scale for latency measurement.
//! - [`affinity`]: pinning the receive thread to a core.
//!
//! # The receive duty cycle
//!
//! The receive thread runs a loop in the style of Aeron's agent runner:
//!
//! ```text
//! loop {
//!     poll.poll(&mut events, idler.poll_timeout(core.next_deadline()))  // wait, bounded
//!     let now = clock.tick();                      // one clock read per cycle
//!     let work = drain every ready socket until recv() returns 0, feed the core;
//!     work += fire the core's timers that are due at `now`;
//!     idler.idle(work);                            // spin, yield or nothing
//!     if shutdown requested { break }
//! }
//! ```
//!
//! mio is edge-triggered: after a readiness event a socket must be read until it would block,
//! which is what [`RecvBatch::recv`] returning `0` means. Every wait is bounded (see
//! [`Idler::poll_timeout`]) so the loop notices a shutdown flag within a known time.
//!
//! This module targets Linux: `recvmmsg(2)`, `SO_TIMESTAMPNS` and `SO_REUSEPORT` semantics are
//! those of the Linux kernel.

pub mod affinity;
pub mod batch;
pub mod clock;
pub mod fetch;
pub mod http;
pub mod idle;
pub mod resolve;
pub mod socket;
pub mod soup;
pub mod tls;
pub mod ws;

#[cfg(test)]
mod loopback;

use std::io;

use thiserror::Error;

/// Every error of the OS shell. Each one names the address or core it concerns and what was
/// being attempted, so a log line is enough to act on.
#[derive(Debug, Error)]
pub enum IoError {
    /// A socket call failed.
    #[error("cannot {op} for {target}: {source}")]
    Socket {
        /// What was being attempted, e.g. `"join the multicast group"`.
        op: &'static str,
        /// The addresses involved, e.g. `"group 239.255.91.1:47000 on interface 127.0.0.1"`.
        target: String,
        /// The error the OS reported.
        #[source]
        source: io::Error,
    },
    /// The address given as a multicast group is not in 224.0.0.0/4.
    #[error("{group} is not a multicast group address (224.0.0.0/4)")]
    NotMulticast {
        /// The address that was given.
        group: std::net::Ipv4Addr,
    },
    /// A multicast TTL above 1 was asked for; datagrams could then be routed off the host.
    #[error("refusing multicast TTL {ttl} on interface {interface}: only TTL 0 or 1 is allowed")]
    TtlTooHigh {
        /// The interface the sender would use.
        interface: std::net::Ipv4Addr,
        /// The TTL that was asked for.
        ttl: u32,
    },
    /// A send that could leave the loopback interface was refused.
    #[error(
        "refusing to send to {destination} via interface {interface}: only 127.0.0.0/8 or \
         multicast destinations through interface 127.0.0.1 are allowed"
    )]
    NotLoopback {
        /// The destination, or the source address a sender was asked to bind.
        destination: std::net::Ipv4Addr,
        /// The multicast interface of the socket.
        interface: std::net::Ipv4Addr,
    },
    /// The core asked for does not exist or this thread may not run on it.
    #[error("cannot pin to core {core}: no such core for this thread (available: {available})")]
    NoSuchCore {
        /// The core that was asked for.
        core: usize,
        /// The cores this thread may run on, as a list like `0, 1`.
        available: String,
    },
}

impl IoError {
    /// Builds a closure that wraps an [`io::Error`] as [`IoError::Socket`], for `map_err`.
    pub(crate) fn socket(op: &'static str, target: &str) -> impl FnOnce(io::Error) -> IoError {
        let target = target.to_owned();
        move |source| IoError::Socket { op, target, source }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers shared by the loopback tests of the submodules.

    use std::error::Error;
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    use mio::{Events, Interest, Poll, Token};

    use super::batch::RecvBatch;
    use super::socket::MulticastSpec;

    /// The result type of the tests: `?` instead of `unwrap`.
    pub(crate) type TestResult<T = ()> = Result<T, Box<dyn Error>>;

    /// How long a test waits for datagrams that should arrive.
    pub(crate) const WAIT: Duration = Duration::from_secs(2);
    /// How long a test keeps listening for datagrams that must not arrive.
    pub(crate) const QUIET: Duration = Duration::from_millis(100);
    /// The loopback interface address.
    pub(crate) const LO: Ipv4Addr = Ipv4Addr::LOCALHOST;

    /// The test group `239.255.91.<last>:<port>`.
    pub(crate) fn group(last: u8, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(239, 255, 91, last), port)
    }

    /// An any-source spec for `group` on loopback with a 1 MiB buffer.
    pub(crate) fn spec(group: SocketAddrV4) -> MulticastSpec {
        MulticastSpec {
            group,
            interface: LO,
            source: None,
            rcvbuf: 1 << 20,
        }
    }

    /// The IPv4 local address of a socket.
    pub(crate) fn local_v4(addr: std::io::Result<SocketAddr>) -> TestResult<SocketAddrV4> {
        match addr? {
            SocketAddr::V4(a) => Ok(a),
            other => Err(format!("not IPv4: {other}").into()),
        }
    }

    /// One received datagram, copied out of the batch.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Got {
        pub(crate) payload: Vec<u8>,
        pub(crate) source: SocketAddrV4,
        pub(crate) kernel_ns: Option<u64>,
        pub(crate) truncated: bool,
        pub(crate) wire_len: usize,
    }

    /// The payloads of `got`, in order.
    pub(crate) fn payloads(got: &[Got]) -> Vec<Vec<u8>> {
        got.iter().map(|g| g.payload.clone()).collect()
    }

    /// Waits with mio (bounded) and drains `socket` until `want` datagrams arrived or `limit`
    /// passed, whichever is first. Returns what arrived and the count of each non-empty `recv`.
    pub(crate) fn receive(
        socket: &mut mio::net::UdpSocket,
        batch: &mut RecvBatch,
        want: usize,
        limit: Duration,
    ) -> (Vec<Got>, Vec<usize>) {
        let (mut got, mut sizes) = (Vec::new(), Vec::new());
        let Ok(mut poll) = Poll::new() else {
            return (got, sizes);
        };
        let registry = poll.registry();
        if registry
            .register(socket, Token(0), Interest::READABLE)
            .is_err()
        {
            return (got, sizes);
        }
        let mut events = Events::with_capacity(8);
        let deadline = Instant::now() + limit;
        // Read before the first wait: datagrams queued before registration raise no new edge.
        loop {
            while let Ok(n @ 1..) = batch.recv(socket.as_raw_fd()) {
                sizes.push(n);
                got.extend(batch.iter().map(|d| Got {
                    payload: d.payload.to_vec(),
                    source: d.source,
                    kernel_ns: d.kernel_ns,
                    truncated: d.truncated,
                    wire_len: d.wire_len,
                }));
            }
            let now = Instant::now();
            if got.len() >= want || now >= deadline {
                break;
            }
            if poll.poll(&mut events, Some(deadline - now)).is_err() {
                break;
            }
        }
        let _ = poll.registry().deregister(socket);
        (got, sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::batch::RecvBatch;
    use super::socket::{
        MulticastSpec, RcvBuf, open_multicast, open_multicast_sender, send_loopback,
    };
    use super::test_support::{LO, QUIET, TestResult, WAIT, group, payloads, receive, spec};

    #[test]
    fn two_receivers_on_one_group_both_get_everything() -> TestResult {
        let g = group(5, 47005);
        let (mut a, _) = open_multicast(&spec(g))?;
        let (mut b, _) = open_multicast(&spec(g))?;
        let tx = open_multicast_sender(LO, 0)?;
        for i in 0..3u8 {
            send_loopback(&tx, &[i], g)?;
        }
        let mut batch = RecvBatch::new(8, 64);
        let want = vec![vec![0], vec![1], vec![2]];
        assert_eq!(payloads(&receive(&mut a, &mut batch, 3, WAIT).0), want);
        assert_eq!(payloads(&receive(&mut b, &mut batch, 3, WAIT).0), want);
        Ok(())
    }

    #[test]
    fn binding_the_group_address_keeps_other_groups_out() -> TestResult {
        let (mine, theirs) = (group(6, 47006), group(7, 47006));
        let (mut rx, _) = open_multicast(&spec(mine))?;
        let (mut other_rx, _) = open_multicast(&spec(theirs))?;
        let tx = open_multicast_sender(LO, 0)?;
        send_loopback(&tx, b"theirs", theirs)?;
        send_loopback(&tx, b"mine", mine)?;
        let mut batch = RecvBatch::new(8, 64);
        let (mut got, _) = receive(&mut rx, &mut batch, 1, WAIT);
        got.extend(receive(&mut rx, &mut batch, usize::MAX, QUIET).0);
        assert_eq!(payloads(&got), vec![b"mine".to_vec()]);
        let (got, _) = receive(&mut other_rx, &mut batch, 1, WAIT);
        assert_eq!(payloads(&got), vec![b"theirs".to_vec()]);
        Ok(())
    }

    #[test]
    fn rcvbuf_capping_is_reported_with_the_sysctl_hint() -> TestResult {
        let rmem_max: Option<usize> = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let with = |port, rcvbuf| MulticastSpec {
            rcvbuf,
            ..spec(group(8, port))
        };
        let (_rx, info) = open_multicast(&with(47008, 1 << 30))?;
        assert!(info.rcvbuf.capped, "{:?}", info.rcvbuf);
        assert_eq!(info.rcvbuf.reported, 2 * info.rcvbuf.effective);
        if let Some(max) = rmem_max {
            assert_eq!(info.rcvbuf.effective, max);
        }
        let warning = info.rcvbuf_warning().unwrap_or_default();
        assert!(warning.contains("net.core.rmem_max"), "{warning}");
        assert!(warning.contains("239.255.91.8:47008"), "{warning}");

        let small = 64 * 1024;
        let (_rx, info) = open_multicast(&with(47009, small))?;
        assert_eq!(info.rcvbuf, RcvBuf::from_reported(small, 2 * small));
        assert!(!info.rcvbuf.capped && info.rcvbuf_warning().is_none());
        let (_rx, info) = open_multicast(&with(47010, 0))?;
        assert!(!info.rcvbuf.capped && info.rcvbuf.effective > 0);
        Ok(())
    }

    #[test]
    fn errors_name_the_operation_and_the_address() -> TestResult {
        let taken = std::net::UdpSocket::bind(std::net::SocketAddrV4::new(LO, 0))?;
        let addr = super::test_support::local_v4(taken.local_addr())?;
        let Err(e) = super::socket::open_unicast(addr) else {
            return Err("bound a taken port".into());
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("cannot bind for unicast socket {addr}: ")),
            "{text}"
        );
        let not_group = std::net::SocketAddrV4::new(LO, 47011);
        let text = open_multicast(&spec(not_group))
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            text.as_deref(),
            Some("127.0.0.1 is not a multicast group address (224.0.0.0/4)")
        );
        Ok(())
    }

    #[test]
    fn a_blocking_duty_cycle_receives_and_measures_latency() -> TestResult {
        use std::os::fd::AsRawFd;
        use std::time::Duration;

        use mio::{Events, Interest, Poll, Token};

        use super::clock::Clock;
        use super::idle::{IdleStrategy, Idler};

        let g = group(30, 47030);
        let (mut rx, info) = open_multicast(&spec(g))?;
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut rx, Token(7), Interest::READABLE)?;
        let mut events = Events::with_capacity(16);
        let mut clock = Clock::new();
        let mut idler = Idler::new(IdleStrategy::Block).with_max_block(Duration::from_millis(20));
        let mut batch = RecvBatch::new(8, 1500);
        let tx = open_multicast_sender(LO, 0)?;
        for i in 0..4u8 {
            send_loopback(&tx, &[i; 32], g)?;
        }
        let (mut received, mut latencies, mut cycles) = (0, Vec::new(), 0);
        // Bounded: each cycle waits at most 20 ms, and at most 100 cycles run.
        while received < 4 && cycles < 100 {
            cycles += 1;
            poll.poll(&mut events, idler.poll_timeout(None))?;
            let now = clock.tick();
            let mut work = 0;
            loop {
                let n = batch.recv(rx.as_raw_fd())?;
                if n == 0 {
                    break;
                }
                for d in batch.iter().filter(|d| info.accepts(d.source)) {
                    work += 1;
                    let kernel = d.kernel_ns.ok_or("no kernel timestamp")?;
                    latencies.push(clock.latency_ns(kernel, now));
                }
            }
            received += work;
            idler.idle(work);
        }
        assert_eq!(received, 4, "after {cycles} cycles");
        for latency in latencies {
            // From kernel receipt to the tick of the cycle that read it: small and not negative.
            assert!(
                (-1_000_000..1_000_000_000).contains(&latency),
                "{latency} ns"
            );
        }
        // Nothing left: the next cycles find no work and block, bounded by the cap.
        idler.idle(0);
        assert_eq!(idler.poll_timeout(None), Some(Duration::from_millis(20)));
        Ok(())
    }
}
