//! Counters the simulator threads bump, and [`SimStats`], a copy of them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Declares the live counters (`Counters`, one atomic each) and the plain
/// copy handed to callers (`SimStats`) from one list, so the two never drift.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Live counters, written by the simulator threads.
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $(pub(crate) $name: AtomicU64,)*
        }

        /// What the simulator has done so far (see [`MoldSim::stats`](super::MoldSim::stats)).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct SimStats {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Counters {
            /// A copy of every counter.
            pub(crate) fn snapshot(&self) -> SimStats {
                SimStats {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

counters! {
    /// Datagrams written to the multicast socket (data, duplicates, heartbeats, end of session).
    packets_sent,
    /// Bytes of UDP payload written to the multicast socket.
    bytes_sent,
    /// Data packets built, each counted once whatever its fate.
    data_packets,
    /// Messages published (assigned a sequence number), over every session.
    messages_published,
    /// Heartbeats sent.
    heartbeats_sent,
    /// End-of-session packets sent.
    end_of_session_sent,
    /// Datagrams the OS refused to send even after retries.
    send_errors,
    /// Sessions started (1 plus the restarts).
    sessions,
    /// Datagrams received by the re-request server.
    requests_received,
    /// Requests answered.
    requests_served,
    /// Messages carried by the answers.
    messages_resent,
    /// Of `messages_resent`, those some line had carried: a handler reading every line
    /// had no need to ask for them.
    messages_resent_carried,
    /// Requests dropped: not a 20-byte request, or a count of 0.
    requests_malformed,
    /// Requests dropped: not for the current session.
    requests_wrong_session,
    /// Requests dropped: first sequence not in the history.
    requests_out_of_range,
    /// Requests for more than the configured maximum, answered with at most that many.
    requests_capped,
    /// Answers with fewer messages than asked for (and allowed): the packet was full, or
    /// the history ended.
    answers_short,
    /// Requests dropped: sender not on 127.0.0.0/8.
    requests_foreign,
    /// Requests dropped by the drop-answer fault.
    answers_dropped,
    /// Requests ignored while the server was down.
    requests_while_down,
    /// Snapshot connections accepted.
    snapshot_clients,
    /// Snapshot logins rejected.
    logins_rejected,
    /// Snapshots sent in full, end-of-snapshot marker included.
    snapshots_sent,
    /// Book messages sent in snapshots.
    snapshot_messages,
}

impl SimStats {
    /// Requests the re-request server received but did not answer.
    pub fn requests_dropped(&self) -> u64 {
        [
            self.requests_malformed,
            self.requests_wrong_session,
            self.requests_out_of_range,
            self.requests_foreign,
            self.answers_dropped,
            self.requests_while_down,
        ]
        .iter()
        .fold(0u64, |sum, n| sum.saturating_add(*n))
    }
}

/// Adds `n` to a counter.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}
