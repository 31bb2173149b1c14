//! Batched receive with `recvmmsg(2)`: many datagrams per system call into fixed buffers.
//!
//! [`RecvBatch::new`] allocates everything once: `n` payload buffers of `m` bytes, and for each
//! one an `iovec`, a `sockaddr_in` for the sender and a control buffer for the
//! `SCM_TIMESTAMPNS` message. [`RecvBatch::recv`] fills up to `n` of them without blocking and
//! the accessors read them back. Nothing is allocated after `new`.
//!
//! This is the only file of the module with `unsafe` code: the `recvmmsg` and `setsockopt`
//! calls, the zeroed C headers, and the `Send` impl. The control messages are decoded by safe
//! code in [`clock`](super::clock).

use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;

use super::clock::kernel_timestamp_ns;

/// The most datagrams one call asks for: the kernel caps `recvmmsg` at `UIO_MAXIOV` (1024).
pub const MAX_BATCH: usize = 1024;

/// The largest useful buffer per datagram: a UDP datagram's length field is 16 bits.
pub const MAX_DATAGRAM: usize = 65_536;

/// Bytes of control buffer per datagram: room for one `SCM_TIMESTAMPNS` message (32 bytes on
/// 64-bit Linux) with spare space, so an unexpected extra message does not truncate it.
const CONTROL_LEN: usize = 64;

/// A control buffer aligned for `cmsghdr`, as `recvmsg(2)` requires.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Control([u8; CONTROL_LEN]);

/// Enables `SO_TIMESTAMPNS` on `socket`: each datagram then carries its kernel receive time
/// (`CLOCK_REALTIME`, nanoseconds) as a control message, read by [`RecvBatch::kernel_ns`].
pub fn enable_kernel_timestamps(socket: &impl AsRawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `setsockopt` reads `size_of::<c_int>()` bytes from `&on`, a live local `c_int`;
    // any file descriptor value is memory-safe here (an invalid one yields EBADF/ENOTSOCK).
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            ptr::from_ref(&on).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One received datagram, borrowed from a [`RecvBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The bytes received: at most the batch's buffer size.
    pub payload: &'a [u8],
    /// The sender's address (`0.0.0.0:0` if the kernel did not report an IPv4 one).
    pub source: SocketAddrV4,
    /// The kernel receive time, `CLOCK_REALTIME` nanoseconds, if timestamps are enabled.
    pub kernel_ns: Option<u64>,
    /// The datagram's length on the wire; larger than `payload.len()` when truncated.
    pub wire_len: usize,
    /// Whether the datagram was larger than the buffer and its tail was dropped.
    pub truncated: bool,
}

/// Fixed buffers for up to `n` datagrams of up to `m` bytes, filled by one `recvmmsg` call.
pub struct RecvBatch {
    datagram_len: usize,
    data: Box<[u8]>,
    iovecs: Box<[libc::iovec]>,
    names: Box<[libc::sockaddr_in]>,
    controls: Box<[Control]>,
    headers: Box<[libc::mmsghdr]>,
    received: usize,
}

// SAFETY: the raw pointers inside `iovecs` and `headers` only ever point into heap buffers owned
// by this same value (`data`, `iovecs`, `names`, `controls`); they are rewritten from `&mut self`
// before every `recvmmsg` call and never shared, so moving the whole value to another thread
// moves the pointees with it and leaves no alias behind.
unsafe impl Send for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("capacity", &self.capacity())
            .field("datagram_len", &self.datagram_len)
            .field("received", &self.received)
            .finish()
    }
}

impl RecvBatch {
    /// Allocates buffers for `n` datagrams (1 to [`MAX_BATCH`]) of `m` bytes (1 to
    /// [`MAX_DATAGRAM`]) each.
    pub fn new(n: usize, m: usize) -> Self {
        let n = n.clamp(1, MAX_BATCH);
        let m = m.clamp(1, MAX_DATAGRAM);
        let iovec = libc::iovec {
            iov_base: ptr::null_mut(),
            iov_len: 0,
        };
        let name = libc::sockaddr_in {
            sin_family: 0,
            sin_port: 0,
            sin_addr: libc::in_addr { s_addr: 0 },
            sin_zero: [0; 8],
        };
        // SAFETY: `mmsghdr` is a C struct of integers and raw pointers (and, on some libcs,
        // private padding integers); all-zero bytes are a valid value of each field.
        let header: libc::mmsghdr = unsafe { mem::zeroed() };
        RecvBatch {
            datagram_len: m,
            data: vec![0; n * m].into_boxed_slice(),
            iovecs: vec![iovec; n].into_boxed_slice(),
            names: vec![name; n].into_boxed_slice(),
            controls: vec![Control([0; CONTROL_LEN]); n].into_boxed_slice(),
            headers: vec![header; n].into_boxed_slice(),
            received: 0,
        }
    }

    /// How many datagrams one [`recv`](Self::recv) can return.
    pub fn capacity(&self) -> usize {
        self.headers.len()
    }

    /// The buffer size per datagram; longer datagrams are truncated.
    pub fn datagram_len(&self) -> usize {
        self.datagram_len
    }

    /// How many datagrams the last [`recv`](Self::recv) returned.
    pub fn len(&self) -> usize {
        self.received
    }

    /// Whether the last [`recv`](Self::recv) returned nothing.
    pub fn is_empty(&self) -> bool {
        self.received == 0
    }

    /// Receives up to [`capacity`](Self::capacity) datagrams from `fd` without blocking.
    ///
    /// Returns how many arrived; `0` means the socket is drained (`EWOULDBLOCK`), which is the
    /// point where an edge-triggered mio loop may wait again. `EINTR` is retried. The previous
    /// batch's contents are overwritten.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.received = 0;
        let m = self.datagram_len;
        let slots = self
            .data
            .chunks_exact_mut(m)
            .zip(self.iovecs.iter_mut())
            .zip(self.names.iter_mut())
            .zip(self.controls.iter_mut())
            .zip(self.headers.iter_mut());
        for ((((buf, iov), name), control), header) in slots {
            iov.iov_base = buf.as_mut_ptr().cast();
            iov.iov_len = buf.len();
            let hdr = &mut header.msg_hdr;
            hdr.msg_name = ptr::from_mut(name).cast();
            hdr.msg_namelen = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            hdr.msg_iov = ptr::from_mut(iov);
            hdr.msg_iovlen = 1;
            hdr.msg_control = control.0.as_mut_ptr().cast();
            hdr.msg_controllen = CONTROL_LEN as _;
            hdr.msg_flags = 0;
            header.msg_len = 0;
        }
        let vlen = self.headers.len() as libc::c_uint;
        loop {
            // SAFETY: `headers` holds `vlen` initialised `mmsghdr`s whose name, iovec and control
            // pointers were just set to live, exclusively borrowed buffers of this struct with
            // matching lengths (`chunks_exact_mut` gives `m`-byte slices inside `data`); the kernel
            // writes only within those lengths. A null timeout is allowed (none is used).
            let rc = unsafe {
                libc::recvmmsg(
                    fd,
                    self.headers.as_mut_ptr(),
                    vlen,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    ptr::null_mut(),
                )
            };
            if rc >= 0 {
                self.received = (rc as usize).min(self.headers.len());
                return Ok(self.received);
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(err),
            }
        }
    }

    /// The header of received datagram `i`, if `i` is below [`len`](Self::len).
    fn header(&self, i: usize) -> Option<&libc::mmsghdr> {
        self.headers.get(..self.received)?.get(i)
    }

    /// The datagram's length on the wire (with `MSG_TRUNC` the kernel reports the full length
    /// even when the buffer was shorter); `0` for an index past [`len`](Self::len).
    pub fn wire_len(&self, i: usize) -> usize {
        self.header(i).map_or(0, |h| h.msg_len as usize)
    }

    /// Whether datagram `i` was longer than the buffer and arrived truncated.
    pub fn truncated(&self, i: usize) -> bool {
        self.header(i).is_some_and(|h| {
            h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || h.msg_len as usize > self.datagram_len
        })
    }

    /// The received bytes of datagram `i` (at most the buffer size; empty past
    /// [`len`](Self::len)).
    pub fn payload(&self, i: usize) -> &[u8] {
        if i >= self.received {
            return &[];
        }
        let len = self.wire_len(i).min(self.datagram_len);
        let start = i * self.datagram_len;
        self.data.get(start..start + len).unwrap_or(&[])
    }

    /// The sender of datagram `i` (`0.0.0.0:0` past [`len`](Self::len) or for a non-IPv4
    /// address).
    pub fn source(&self, i: usize) -> SocketAddrV4 {
        let unspecified = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        let Some(header) = self.header(i) else {
            return unspecified;
        };
        let Some(name) = self.names.get(i) else {
            return unspecified;
        };
        let full = mem::size_of::<libc::sockaddr_in>();
        if (header.msg_hdr.msg_namelen as usize) < full
            || name.sin_family != libc::AF_INET as libc::sa_family_t
        {
            return unspecified;
        }
        SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(name.sin_addr.s_addr)),
            u16::from_be(name.sin_port),
        )
    }

    /// The kernel receive time of datagram `i` (`CLOCK_REALTIME` nanoseconds since the Unix
    /// epoch) from its `SCM_TIMESTAMPNS` control message, if there is one.
    pub fn kernel_ns(&self, i: usize) -> Option<u64> {
        let header = self.header(i)?;
        let control = &self.controls.get(i)?.0;
        // `msg_controllen` is `size_t` on glibc but `socklen_t` on musl.
        #[allow(clippy::unnecessary_cast)]
        let used = (header.msg_hdr.msg_controllen as usize).min(CONTROL_LEN);
        kernel_timestamp_ns(control.get(..used)?)
    }

    /// Datagram `i` with all its attributes, or `None` past [`len`](Self::len).
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        (i < self.received).then(|| Datagram {
            payload: self.payload(i),
            source: self.source(i),
            kernel_ns: self.kernel_ns(i),
            wire_len: self.wire_len(i),
            truncated: self.truncated(i),
        })
    }

    /// The datagrams of the last [`recv`](Self::recv), in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = Datagram<'_>> {
        (0..self.received).filter_map(|i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::io::socket::{open_multicast, open_multicast_sender, send_loopback};
    use crate::io::test_support::{LO, TestResult, WAIT, group, receive, spec};

    /// Opens a receiver on `group` and sends it `sizes.len()` datagrams of those sizes.
    fn queued(group: SocketAddrV4, sizes: &[usize]) -> TestResult<mio::net::UdpSocket> {
        let (rx, _) = open_multicast(&spec(group))?;
        let tx = open_multicast_sender(LO, 0)?;
        for (i, &size) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..size).map(|b| (b + i) as u8).collect();
            send_loopback(&tx, &payload, group)?;
        }
        Ok(rx)
    }

    #[test]
    fn a_batch_larger_than_the_queue_returns_what_is_queued() -> TestResult {
        let mut batch = RecvBatch::new(64, 256);
        let rx = queued(group(20, 47020), &[])?;
        assert_eq!(batch.recv(rx.as_raw_fd())?, 0);
        assert!(batch.is_empty());
        let mut rx = queued(group(20, 47021), &[10; 3])?;
        let (got, sizes) = receive(&mut rx, &mut batch, 3, WAIT);
        assert_eq!(got.len(), 3);
        assert_eq!(sizes.iter().sum::<usize>(), 3);
        assert_eq!(batch.recv(rx.as_raw_fd())?, 0, "drained");
        Ok(())
    }

    #[test]
    fn a_queue_larger_than_the_batch_takes_several_calls() -> TestResult {
        let mut rx = queued(group(21, 47022), &[1; 10])?;
        let mut batch = RecvBatch::new(4, 64);
        let (got, sizes) = receive(&mut rx, &mut batch, 10, WAIT);
        let want: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i]).collect();
        assert_eq!(
            got.iter().map(|g| g.payload.clone()).collect::<Vec<_>>(),
            want
        );
        assert!(
            sizes.iter().all(|&n| n <= 4) && sizes.contains(&4),
            "{sizes:?}"
        );
        Ok(())
    }

    #[test]
    fn an_oversized_datagram_is_reported_truncated() -> TestResult {
        let mut rx = queued(group(22, 47023), &[100, 16])?;
        let mut batch = RecvBatch::new(4, 16);
        let (got, _) = receive(&mut rx, &mut batch, 2, WAIT);
        let prefix: Vec<u8> = (0..16).collect();
        let second: Vec<u8> = (1..17).collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].truncated, got[0].wire_len), (true, 100));
        assert_eq!(got[0].payload, prefix);
        assert_eq!((got[1].truncated, got[1].wire_len), (false, 16));
        assert_eq!(got[1].payload, second);
        Ok(())
    }

    #[test]
    fn accessors_past_the_batch_are_empty_not_panics() {
        let batch = RecvBatch::new(2, 8);
        assert_eq!(batch.payload(0), &[] as &[u8]);
        assert_eq!(batch.payload(usize::MAX), &[] as &[u8]);
        assert_eq!(batch.source(5), SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        assert_eq!(batch.kernel_ns(0), None);
        assert!(!batch.truncated(1));
        assert_eq!(batch.wire_len(3), 0);
        assert!(batch.get(0).is_none());
        assert_eq!(batch.iter().count(), 0);
    }

    #[test]
    fn sizes_are_clamped_and_the_batch_can_move_threads() {
        let batch = RecvBatch::new(0, 0);
        assert_eq!((batch.capacity(), batch.datagram_len()), (1, 1));
        let batch = RecvBatch::new(1_000_000, usize::MAX);
        assert_eq!(
            (batch.capacity(), batch.datagram_len()),
            (MAX_BATCH, MAX_DATAGRAM)
        );
        let moved = std::thread::spawn(move || batch.capacity()).join().ok();
        assert_eq!(moved, Some(MAX_BATCH));
    }

    #[test]
    fn a_bad_descriptor_is_an_error() {
        let mut batch = RecvBatch::new(2, 8);
        assert!(batch.recv(-1).is_err());
        assert!(batch.is_empty());
    }
}
