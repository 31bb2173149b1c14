//! gapless: a market-data feed handler.
//!
//! gapless receives sequenced market data (MoldUDP64 and IEX-TP over UDP multicast, Binance
//! depth streams over WebSocket), decides what is complete with a multi-stream gap detector,
//! recovers what is missing, and hands every consumer frames that are complete, in order and
//! exactly once, or an explicit statement that a stream is not synced.
//!
//! The layers, from the wire inwards:
//!
//! - [`capture`]: reading and writing pcap/pcapng captures (replay and recording).
//! - [`protocol`]: wire codecs that borrow their input and never panic.
//! - [`sequencer`]: the sans-IO gap detector and slot-ring reorder buffer.
//! - [`config`]: the TOML configuration, validated as a whole with precise errors.

#[cfg(test)]
mod boundary;
pub mod capture;
pub mod client;
pub mod config;
pub mod daemon;
pub mod drive;
pub(crate) mod io;
pub mod log;
pub(crate) mod metrics;
pub mod protocol;
pub mod publish;
pub mod sequencer;
pub mod sim;
pub(crate) mod sinks;
pub mod time;
pub mod venue;

/// Not part of the API: what the crate's own benchmarks measure below the public
/// surface. Anything here may change or go without notice.
#[doc(hidden)]
pub mod internals {
    pub use crate::io::batch::{RecvBatch, enable_kernel_timestamps};
    pub use crate::io::socket::{MulticastSpec, open_multicast, open_multicast_sender};
    pub use crate::publish::fanout::Fanout;
    pub use crate::sinks::nats as nats_sink;
    pub use crate::sinks::shm::ShmSink;
}
