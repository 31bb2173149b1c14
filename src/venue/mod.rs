//! Venue sessions (sans-IO): per-venue protocol logic between the wire codecs and the
//! consumers. They never touch a socket or the OS clock.
//!
//! - [`FeedSession`]: point-sequenced UDP venues, MoldUDP64 and IEX-TP: session epochs,
//!   re-request recovery, snapshot fallback over SoupBinTCP, heartbeats and end of session.

pub mod binance;
pub mod udp;

pub use udp::recovery::RequestPolicy;
pub use udp::wire::{SessionKey, Wire};
pub use udp::{
    ChannelSpec, FeedSession, FeedSpec, SnapshotEvent, SnapshotSpec, SnapshotTask, Transmit,
    published,
};

use crate::publish::Event;
use crate::publish::run::MessageRun;
use crate::sequencer::StreamStats;

/// Where consumer events go: the publish fan-out live, a file in replay, a vector in tests.
pub trait Emit {
    /// Takes one event. Must not block.
    fn emit(&mut self, event: &Event<'_>);

    /// Takes a run of consecutive live messages of one stream. The default hands each
    /// message to [`Emit::emit`] as an [`Event::Message`]; the rx thread's fan-out
    /// writes the run as one queue record instead. Must not block.
    fn emit_run(&mut self, run: &MessageRun<'_>) {
        for event in run.events() {
            self.emit(&event);
        }
    }
}

impl<F: FnMut(&Event<'_>)> Emit for F {
    fn emit(&mut self, event: &Event<'_>) {
        self(event)
    }
}

/// How a datagram arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// On the multicast feed.
    Multicast,
    /// As a unicast answer to a re-request.
    Unicast,
}

/// What to do with a gap that nothing can recover (no re-request server answers and no
/// snapshot service is configured, or a capture is being replayed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapPolicy {
    /// The stream stays unsynced, and says so; nothing after the gap is delivered.
    Hold,
    /// The gap is declared lost with an explicit gap event, and delivery resumes after it.
    Skip,
}

/// Counters of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelStats {
    /// Datagrams received (multicast and unicast).
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Messages carried by data datagrams (before deduplication).
    pub messages: u64,
    /// Heartbeats and end-of-session datagrams.
    pub heartbeats: u64,
    /// Datagrams that failed to decode.
    pub malformed: u64,
    /// Datagrams of a session already left behind that did not take the channel back
    /// (late stragglers of a finished session), and answers for such a session. Counted
    /// when given up.
    pub stale_session: u64,
    /// Datagrams of another session that was not adopted (strays on the group), and
    /// answers for a session never adopted. Counted when given up: a new session's first
    /// datagrams, held while it is confirmed and then delivered, are not counted.
    pub unconfirmed_session: u64,
    /// Session changes (new epochs).
    pub new_sessions: u64,
    /// Re-requests sent.
    pub requests: u64,
    /// Re-requests not sent because the transmit queue was full.
    pub requests_dropped: u64,
    /// Re-requests in flight now.
    pub requests_inflight: u64,
    /// Re-requests that timed out.
    pub timeouts: u64,
    /// Unicast answers received.
    pub answers: u64,
    /// Messages accepted from answers.
    pub recovered: u64,
    /// Snapshots started.
    pub snapshots_started: u64,
    /// Snapshots completed.
    pub snapshots_done: u64,
    /// Snapshots failed or timed out.
    pub snapshots_failed: u64,
    /// Snapshot messages passed to consumers.
    pub snapshot_messages: u64,
    /// Gaps declared lost ([`GapPolicy::Skip`]).
    pub gaps_lost: u64,
    /// Messages in gaps declared lost.
    pub messages_lost: u64,
    /// Messages that could not be kept for reordering (no free datagram slot).
    pub arena_full: u64,
    /// The sequencer's counters for the channel's stream.
    pub sequencer: StreamStats,
}
