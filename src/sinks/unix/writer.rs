//! One unix-socket client's writer thread: from its queue to its socket.

use std::io::{self, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::publish::Consumer;
use crate::publish::wire::{FINAL_FLUSH, encode_cut_off, encode_event};
use crate::sinks::Backoff;

/// A connection writer batches records up to this many bytes a write.
const BATCH_BYTES: usize = 64 * 1024;

/// Flags between the unix sink's dispatcher and one connection writer.
#[derive(Debug, Default)]
pub(crate) struct ClientState {
    /// Set by the dispatcher, before it drops the producer, on overflow.
    pub(crate) cut: AtomicBool,
    /// Set with `cut` when the client was cut off for taking nothing while it replayed.
    pub(crate) stalled: AtomicBool,
    /// Set by the writer as its last act.
    pub(crate) closed: AtomicBool,
}

/// How a writer's main loop ended.
enum End {
    /// The queue is drained and the producer gone: the sink stops.
    Drained,
    /// The dispatcher cut the client off.
    CutOff,
    /// The client went away, or did not read before the deadline.
    Gone,
}

/// The writing side of the wire format: one client's thread, from its
/// queue to its socket. The socket must have a short write timeout, so a
/// blocked write returns to look at the flags.
pub(crate) struct ConnectionWriter {
    stream: UnixStream,
    queue: Consumer,
    state: Arc<ClientState>,
    bytes_written: Arc<AtomicU64>,
    /// Framed records; `..sent` are written.
    out: Vec<u8>,
    sent: usize,
}

impl ConnectionWriter {
    /// A writer that opens the connection with the framed `hello`.
    pub(crate) fn new(
        stream: UnixStream,
        queue: Consumer,
        state: Arc<ClientState>,
        bytes_written: Arc<AtomicU64>,
        hello: &[u8],
    ) -> Self {
        let mut out = Vec::with_capacity(BATCH_BYTES * 2);
        out.extend_from_slice(hello);
        Self {
            stream,
            queue,
            state,
            bytes_written,
            out,
            sent: 0,
        }
    }

    /// Writes until the queue is abandoned and drained, the client is cut
    /// off or gone; then closes the connection and sets `closed`.
    pub(crate) fn run(mut self) {
        if let End::CutOff = self.pump() {
            let reason = if self.state.stalled.load(Ordering::Acquire) {
                "the client read nothing while its replay waited: cut off; reconnect \
                 with a resume request to carry on"
                    .to_string()
            } else {
                format!(
                    "client queue of {} bytes overflowed: the client read too slowly; \
                     events after the last one received were lost (reconnect with a \
                     resume request to carry on)",
                    self.queue.capacity()
                )
            };
            encode_cut_off(&reason, &mut self.out);
            self.flush_until(Instant::now() + FINAL_FLUSH);
        }
        // The peer may already be gone.
        let _ = self.stream.shutdown(Shutdown::Both);
        self.state.closed.store(true, Ordering::Release);
    }

    fn pump(&mut self) -> End {
        let mut backoff = Backoff::new(Duration::from_micros(50), Duration::from_millis(1));
        let mut deadline = None;
        loop {
            if self.state.cut.load(Ordering::Acquire) {
                return End::CutOff;
            }
            let abandoned = self.queue.is_abandoned();
            if abandoned
                && Instant::now() >= *deadline.get_or_insert_with(|| Instant::now() + FINAL_FLUSH)
            {
                return End::Gone;
            }
            self.fill();
            if self.sent < self.out.len() {
                match self.write_some() {
                    Ok(true) => backoff.reset(),
                    Ok(false) => {}
                    Err(_) => return End::Gone,
                }
            } else if abandoned && self.queue.is_empty() {
                // The producer is dropped after the cut flag is set: seeing
                // it gone means the flag is visible.
                if self.state.cut.load(Ordering::Acquire) {
                    return End::CutOff;
                }
                return End::Drained;
            } else if !abandoned {
                backoff.wait_at_most(Duration::MAX);
            }
        }
    }

    /// Moves queued events into the batch, up to [`BATCH_BYTES`].
    fn fill(&mut self) {
        while self.out.len() < BATCH_BYTES {
            let out = &mut self.out;
            // An event too large for a record cannot be sent; it is skipped.
            let popped = self.queue.pop(|event| {
                let _ = encode_event(&event, out);
            });
            if popped.is_none() {
                break;
            }
        }
    }

    /// One write of the unwritten bytes; false when it timed out.
    fn write_some(&mut self) -> io::Result<bool> {
        let pending = self.out.get(self.sent..).unwrap_or_default();
        match self.stream.write(pending) {
            Ok(0) => Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                self.sent += n;
                self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                if self.sent >= self.out.len() {
                    self.out.clear();
                    self.sent = 0;
                }
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes what is batched until done, an error or `deadline`.
    fn flush_until(&mut self, deadline: Instant) {
        while self.sent < self.out.len() && Instant::now() < deadline {
            if self.write_some().is_err() {
                return;
            }
        }
    }
}
