//! A MoldUDP64 venue simulator for the demo, the tests and the benchmarks.
//!
//! [`MoldSim::start`] runs three services on their own threads, all on the
//! loopback interface:
//!
//! ```text
//!   message source ──> publisher ──(faults)──> multicast group via 127.0.0.1, TTL 0
//!   (ITCH file or          │
//!    synthetic)            │ every message published, under one lock:
//!                          v
//!                  feed state: session, next sequence,
//!                  history ring (last N messages), book
//!                      │                       │
//!        re-request server (UDP)        snapshot server (SoupBinTCP)
//!        127.0.0.1:port, unicast        127.0.0.1:port, login, book,
//!        answers, one packet each       end-of-snapshot `G`, logout
//! ```
//!
//! * [`itch`]: where messages come from: Nasdaq's sample-file format, or
//!   synthetic messages that carry their own sequence number.
//! * [`faults`]: seeded loss, burst loss, reordering, duplication, session
//!   restarts and re-request server faults, with an exact record
//!   ([`Injected`]) of what was done.
//! * [`mold`]: the publisher: packing, pacing, heartbeats, end of session.
//! * [`net`]: the network-safety rule: the publisher sends only to a
//!   multicast group (through 127.0.0.1, TTL 0) or to 127.0.0.0/8.
//! * [`rerequest`]: the re-request server and its bounded history ring.
//! * [`snapshot`]: the snapshot server and the book it serves.
//! * [`handle`]: [`MoldSim`], the running simulator, and [`SimStats`].
//! * [`cli`]: [`MoldSimArgs`] and [`run_cli`] for a command line.
//! * [`capture`]: generated MoldUDP64 captures written without a network: a feed with
//!   known gaps at any rate, and a compressed capture that expands a thousandfold.
//!
//! Every thread waits on a socket with a read timeout or sleeps in short
//! slices, checking a stop flag: nothing spins, and [`MoldSim::stop`] joins
//! everything within a bounded time.
//!
//! ```no_run
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! use std::time::Duration;
//!
//! use gapless::sim::{MoldSim, MoldSimConfig};
//!
//! let mut config = MoldSimConfig::new(SocketAddrV4::new(Ipv4Addr::new(239, 255, 0, 1), 30001));
//! config.count = 10_000;
//! config.rate = Some(50_000.0);
//! config.faults.loss = 0.01;
//! let mut sim = MoldSim::start(config)?;
//! sim.wait(Duration::from_secs(5))?;
//! println!("lost: {:?}", sim.injected().lost);
//! sim.stop()?;
//! # Ok::<(), gapless::sim::SimError>(())
//! ```

#![deny(
    missing_docs,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::io;
use std::net::SocketAddrV4;
use std::time::Duration;

use crate::protocol::{EncodeError, SessionError};

pub mod binance;
pub mod capture;
pub mod cli;
pub mod config;
pub mod faults;
pub mod handle;
pub mod itch;
pub mod mold;
pub mod net;
pub mod rerequest;
pub mod snapshot;
mod stats;

#[cfg(test)]
mod tests;

pub use cli::{MoldSimArgs, run_cli};
pub use config::{MoldSimConfig, SimLine, Source};
pub use faults::{FaultConfig, Injected, LineFaults, Restart, SeqRange, XorShift};
pub use handle::MoldSim;
pub use itch::{ItchError, ItchFile, MessageSource};
pub use stats::SimStats;

/// Why the simulator could not start, or what went wrong while it ran.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The destination is neither a multicast group nor a 127.0.0.0/8 address.
    #[error("destination {0} refused: only multicast groups and 127.0.0.0/8 are allowed")]
    ForbiddenDestination(SocketAddrV4),
    /// A configuration value is out of range.
    #[error("invalid configuration: {field}: {reason}")]
    Config {
        /// The offending setting.
        field: &'static str,
        /// What is allowed.
        reason: String,
    },
    /// The ITCH sample file could not be used.
    #[error(transparent)]
    Itch(#[from] ItchError),
    /// A session name is not 10 bytes of printable ASCII at most.
    #[error("invalid session name: {0}")]
    Session(#[from] SessionError),
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A packet or frame could not be encoded.
    #[error("encode: {0}")]
    Encode(#[from] EncodeError),
    /// Something did not finish within its bound.
    #[error("{what} did not finish within {after:?}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// The bound that ran out.
        after: Duration,
    },
    /// A simulator thread panicked.
    #[error("the {0} thread panicked")]
    ThreadPanicked(&'static str),
}

impl SimError {
    /// Builds a [`SimError::Config`].
    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        Self::Config {
            field,
            reason: reason.into(),
        }
    }

    /// Returns a closure that wraps an `io::Error` with `context`.
    pub(crate) fn io(context: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::Io { context, source }
    }
}
