//! Sinks: consumers that take events off a [`publish::channel`] queue and
//! hand them on, each on threads of its own so the rx thread never waits.
//!
//! - [`unix`]: a unix-socket fan-out server with one queue per client (its wire
//!   format: [`crate::publish::wire`]).
//! - [`jsonl`]: a JSON-lines file writer.
//! - [`pcap`]: a recorder of the datagrams the rx thread received.
//! - [`shm`]: a shared-memory ring the rx thread writes and reader processes read.
//! - [`nats`]: a publisher into a NATS JetStream stream.
//!
//! [`publish::channel`]: crate::publish::channel

pub mod jsonl;
pub mod nats;
pub mod nats_recovery;
pub mod pcap;
pub mod shm;
pub mod unix;

#[cfg(test)]
pub(crate) mod tests;

use std::io;
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use thiserror::Error;

use crate::publish::wire::WireError;

#[cfg(test)]
pub use jsonl::JsonlSink;
pub use unix::UnixCounters;
#[cfg(test)]
pub use unix::UnixSink;

/// Why a sink could not start or did not finish cleanly.
#[derive(Debug, Error)]
pub enum SinkError {
    /// An I/O operation failed.
    #[error("sink I/O error: {0}")]
    Io(#[from] io::Error),
    /// Another server is listening on the socket path.
    #[error("socket {0} is in use by a live server")]
    SocketInUse(PathBuf),
    /// The path exists and is not a socket; it is left alone.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// The hello could not be built.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The group a unix socket is to be given does not exist.
    #[error("group {0:?} does not exist")]
    UnknownGroup(String),
    /// A sink thread panicked.
    #[error("the {0} thread panicked")]
    ThreadPanicked(&'static str),
}

/// The idle strategy of sink threads: sleep, doubling from `min` to `max`
/// while there is nothing to do. Never spins; every wait is bounded.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    current: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) const fn new(min: Duration, max: Duration) -> Self {
        Self {
            current: min,
            min,
            max,
        }
    }

    /// Back to the shortest sleep, after doing some work.
    pub(crate) fn reset(&mut self) {
        self.current = self.min;
    }

    /// Sleeps for the current interval, at most `limit`, and lengthens it.
    pub(crate) fn wait_at_most(&mut self, limit: Duration) {
        thread::sleep(self.current.min(limit));
        self.current = (self.current * 2).min(self.max);
    }
}
