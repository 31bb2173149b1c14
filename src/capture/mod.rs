//! Packet capture files: reading, UDP extraction and recording.
//!
//! * [`CaptureReader`] reads classic pcap (microsecond or nanosecond timestamps, either byte
//!   order) and pcapng captures, plain, gzip or zstd, from a file, standard input or any
//!   reader, as a stream in bounded memory, and yields one [`Record`] per captured frame
//!   without allocating per record.
//! * [`udp_datagram`] peels the link layer (Ethernet with stacked 802.1Q/802.1ad tags, raw IP,
//!   Linux cooked capture v1 and v2), IPv4 and UDP off a frame and returns the [`Datagram`];
//!   [`Stats`] counts the frames that were skipped, by reason.
//! * [`PcapWriter`] records UDP datagrams as Ethernet frames in a nanosecond classic pcap file,
//!   and [`RotatingPcapWriter`] starts a new file whenever the current one would grow past a
//!   size limit.
//!
//! Malformed files produce a [`CaptureError`] that names the byte offset of the problem; no input
//! makes this module panic.

#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

mod error;
mod link;
mod reader;
mod source;
mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

pub use error::CaptureError;
pub use link::{Datagram, LinkType, Skip, Stats, udp_datagram};
pub use reader::{CaptureFormat, CaptureReader, MAX_RECORD_LEN, Record};
pub use source::{
    Compression, MAX_BUFFER, ZSTD_WINDOW_LOG_MAX, open_decompressed, stdin_decompressed,
};
pub use writer::{MAX_UDP_PAYLOAD, PcapWriter, RotatingPcapWriter};
