//! What a venue wants an operator to read: decisions and anomalies, as data.
//!
//! A venue never writes a log line itself (it is sans-IO). It queues [`Notice`]s, the
//! driver drains them with [`Venue::poll_notice`](super::Venue::poll_notice) and writes
//! them with the venue's and stream's names. The queue is bounded: a notice that finds it
//! full is counted, and the count reported by the next notice that fits.

use std::collections::VecDeque;
use std::fmt;

use super::ConnId;

/// How loud a notice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoticeLevel {
    /// Something failed or needs attention.
    Warn,
    /// What the venue is doing.
    Info,
    /// Detail for diagnosis.
    Debug,
}

/// An epoch's name as a venue shows it (a MoldUDP64 session, an IEX-TP session id), held
/// without allocating.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct EpochLabel {
    bytes: [u8; 20],
    len: u8,
}

impl EpochLabel {
    /// The label of `text`, cut to 20 bytes at a character boundary.
    pub fn new(text: &str) -> Self {
        let mut end = text.len().min(20);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0u8; 20];
        if let (Some(dst), Some(src)) = (bytes.get_mut(..end), text.as_bytes().get(..end)) {
            dst.copy_from_slice(src);
        }
        Self {
            bytes,
            len: end as u8,
        }
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        let bytes = self.bytes.get(..usize::from(self.len)).unwrap_or_default();
        std::str::from_utf8(bytes).unwrap_or("?")
    }
}

impl fmt::Debug for EpochLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for EpochLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a gap was declared lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// It was still open at its deadline (`gap_deadline_ms`).
    Deadline,
    /// Every re-request server spent its retry budget on it.
    Exhausted,
    /// The channel has neither a re-request server nor a snapshot service.
    NoRecoveryPath,
    /// Its session ended and the next one began before it was recovered.
    SessionEnded,
    /// The input ended (a replay) with it still open.
    EndOfInput,
    /// A datagram behind it could not be held otherwise (a replay: nothing can be
    /// re-requested from a capture, so a gap is held while memory allows).
    NoRoom,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Deadline => "still open at its deadline (gap_deadline_ms)",
            Self::Exhausted => "every re-request server spent its retry budget",
            Self::NoRecoveryPath => "the channel has no re-request server and no snapshot",
            Self::SessionEnded => "its session ended before it was recovered",
            Self::EndOfInput => "the input ended",
            Self::NoRoom => "the reorder buffer had no room left to hold it open",
        })
    }
}

/// Something a venue decided or saw that an operator should be able to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A stream adopted a new epoch (a session change): it restarts.
    EpochChanged {
        /// The venue's stream.
        stream: usize,
        /// The epoch adopted.
        label: EpochLabel,
        /// Epoch changes of the stream so far.
        changes: u64,
    },
    /// The stream's saved resume cursor was looked at for the first session seen: it
    /// `applied` (the stream resumes at `next`, and what the feed moved on since is
    /// recovered as a gap), or the feed is in another session.
    Resumed {
        /// The venue's stream.
        stream: usize,
        /// The cursor's epoch.
        saved: EpochLabel,
        /// The feed's epoch.
        feed: EpochLabel,
        /// The cursor's next sequence.
        next: u64,
        /// Whether the stream resumed at the cursor.
        applied: bool,
    },
    /// A channel configured with a session adopted another one before a single datagram
    /// of the configured session was seen: the configured value is likely wrong.
    UnexpectedEpoch {
        /// The venue's stream.
        stream: usize,
        /// The epoch configured.
        expected: EpochLabel,
        /// The epoch adopted.
        adopted: EpochLabel,
    },
    /// Datagrams of an epoch that was never adopted were dropped (strays on the group).
    StraysDropped {
        /// The venue's stream.
        stream: usize,
        /// Dropped since the last such notice.
        dropped: u64,
        /// Dropped in all.
        total: u64,
    },
    /// Gaps nothing could recover were declared lost: reported at most once a second per
    /// stream, covering every gap declared lost since the last report.
    GapsLost {
        /// The venue's stream.
        stream: usize,
        /// The first sequence of the first gap in the report.
        from: u64,
        /// The last sequence of the last gap in the report.
        to: u64,
        /// Gaps in the report.
        gaps: u64,
        /// Messages in the report.
        messages: u64,
        /// Messages lost on the stream so far.
        total: u64,
        /// Why the last of them was declared lost.
        reason: LostReason,
    },
    /// Re-requests gave up on a gap and no snapshot could help, under
    /// [`GapPolicy::Hold`](super::GapPolicy): the stream latches `reset_required`.
    RecoveryExhausted {
        /// The venue's stream.
        stream: usize,
        /// The first sequence missing.
        from: u64,
        /// Messages missing.
        missing: u64,
        /// Whether the channel has re-request servers at all.
        servers: bool,
    },
    /// The venue replaces a connection.
    Reconnecting {
        /// The connection.
        conn: ConnId,
        /// Why.
        why: &'static str,
    },
    /// A connection closed or could not open; the next attempt is due after `retry_ns`.
    ConnectionLost {
        /// The connection.
        conn: ConnId,
        /// Nanoseconds until the next attempt.
        retry_ns: u64,
        /// Attempts in a row that have failed.
        attempts: u32,
    },
    /// The connection attempt budget of the window is spent: the next attempt waits.
    ConnectDeferred {
        /// Attempts allowed per window.
        budget: u32,
        /// The window, in seconds.
        window_secs: u64,
        /// Nanoseconds until the next attempt.
        retry_ns: u64,
    },
    /// A connection being replaced was closed: every live stream had shown that its
    /// successor carries it (`linked`), or the overlap's deadline passed with `unlinked`
    /// streams still unproven (each then links or resyncs on its own).
    RotationDone {
        /// The connection closed.
        conn: ConnId,
        /// Whether every stream had linked on the successor.
        linked: bool,
        /// Streams that had not.
        unlinked: usize,
    },
    /// A connection stayed open with data long enough to count as healthy: the reconnect
    /// backoff starts again from its first delay.
    ConnectionHealthy {
        /// The connection.
        conn: ConnId,
    },
    /// A snapshot was asked for.
    SnapshotRequested {
        /// The venue's stream.
        stream: usize,
        /// What the request costs in the venue's budget unit (0: none).
        cost: u32,
        /// Budget spent in the venue's window, this request included.
        budget_used: u32,
    },
    /// A redundant line went silent while another line of its channel stayed live.
    LineDown {
        /// The venue's stream.
        stream: usize,
        /// The line, from 0 (shown as a letter).
        line: u8,
        /// How long it has been silent, in milliseconds.
        silent_ms: u64,
    },
    /// A line reported down carries datagrams again.
    LineUp {
        /// The venue's stream.
        stream: usize,
        /// The line, from 0 (shown as a letter).
        line: u8,
        /// How long it was down, in milliseconds.
        down_ms: u64,
    },
    /// Notices that found the queue full, dropped.
    Dropped {
        /// How many.
        count: u64,
    },
}

impl Notice {
    /// How loud the notice is.
    pub fn level(&self) -> NoticeLevel {
        match self {
            Self::EpochChanged { .. }
            | Self::UnexpectedEpoch { .. }
            | Self::StraysDropped { .. }
            | Self::GapsLost { .. }
            | Self::RecoveryExhausted { .. }
            | Self::ConnectionLost { .. }
            | Self::ConnectDeferred { .. }
            | Self::LineDown { .. }
            | Self::Dropped { .. } => NoticeLevel::Warn,
            Self::LineUp { .. } | Self::Resumed { .. } => NoticeLevel::Info,
            Self::ConnectionHealthy { .. } => NoticeLevel::Debug,
            Self::RotationDone { linked: true, .. } => NoticeLevel::Info,
            Self::RotationDone { .. } => NoticeLevel::Warn,
            Self::Reconnecting { .. } | Self::SnapshotRequested { .. } => NoticeLevel::Info,
        }
    }

    /// The venue's stream it concerns, if one.
    pub fn stream(&self) -> Option<usize> {
        match self {
            Self::EpochChanged { stream, .. }
            | Self::UnexpectedEpoch { stream, .. }
            | Self::Resumed { stream, .. }
            | Self::StraysDropped { stream, .. }
            | Self::GapsLost { stream, .. }
            | Self::RecoveryExhausted { stream, .. }
            | Self::LineDown { stream, .. }
            | Self::LineUp { stream, .. }
            | Self::SnapshotRequested { stream, .. } => Some(*stream),
            Self::Reconnecting { .. }
            | Self::ConnectionLost { .. }
            | Self::ConnectDeferred { .. }
            | Self::ConnectionHealthy { .. }
            | Self::RotationDone { .. }
            | Self::Dropped { .. } => None,
        }
    }
}

/// The name of line `index` of a channel: `a`, `b`, ... `z`, then its number.
pub fn line_name(index: usize) -> String {
    match u8::try_from(index) {
        Ok(i) if i < 26 => char::from(b'a' + i).to_string(),
        _ => index.to_string(),
    }
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LineDown {
                line, silent_ms, ..
            } => write!(
                f,
                "line {} down: nothing received for {silent_ms} ms while another line is \
                 live; the other lines carry the stream, with no redundancy left",
                line_name(usize::from(*line))
            ),
            Self::LineUp { line, down_ms, .. } => write!(
                f,
                "line {} up again after {down_ms} ms down",
                line_name(usize::from(*line))
            ),
            Self::EpochChanged { label, changes, .. } => write!(
                f,
                "session changed to {label:?} (change {changes}): the stream restarts"
            ),
            Self::Resumed {
                saved,
                feed,
                next,
                applied: true,
                ..
            } => write!(
                f,
                "resuming session {feed:?} at {next}, from the cursor saved before the \
                 restart ({saved:?}); what the feed sent since is recovered as a gap"
            ),
            Self::Resumed { saved, feed, .. } => write!(
                f,
                "the saved cursor is for session {saved:?}, the feed is in {feed:?}: the \
                 stream starts by its start rule"
            ),
            Self::UnexpectedEpoch {
                expected, adopted, ..
            } => write!(
                f,
                "the configured session {expected:?} was never seen; the feed's session \
                 {adopted:?} was adopted after confirmation: check the channel's `session` key"
            ),
            Self::StraysDropped { dropped, total, .. } => write!(
                f,
                "{dropped} datagrams of another session dropped ({total} in all): a stray \
                 sender on the group? the channel's `source` keeps it out"
            ),
            Self::GapsLost {
                from,
                to,
                gaps,
                messages,
                total,
                reason,
                ..
            } => {
                if *gaps == 1 {
                    write!(f, "messages {from}..={to} declared lost")?;
                } else {
                    write!(
                        f,
                        "{gaps} gaps ({messages} messages) between {from} and {to} declared lost"
                    )?;
                }
                write!(f, ": {reason} ({total} lost in all)")
            }
            Self::RecoveryExhausted {
                from,
                missing,
                servers,
                ..
            } => {
                if *servers {
                    write!(f, "re-requests gave up on {missing} messages from {from}")?;
                } else {
                    write!(
                        f,
                        "{missing} messages missing from {from} and no re-request server"
                    )?;
                }
                write!(
                    f,
                    ", and no snapshot service helps: with gap_policy = \"hold\" the stream \
                     stays reset_required until the next session (gap_policy = \"skip\" \
                     reports such gaps and goes on)"
                )
            }
            Self::Reconnecting { conn, why } => {
                write!(f, "connection {}: reconnecting ({why})", conn.0)
            }
            Self::ConnectionLost {
                conn,
                retry_ns,
                attempts,
            } => write!(
                f,
                "connection {}: down, attempt {} in {} ms",
                conn.0,
                attempts.saturating_add(1),
                retry_ns / 1_000_000
            ),
            Self::ConnectDeferred {
                budget,
                window_secs,
                retry_ns,
            } => write!(
                f,
                "{budget} connection attempts in {window_secs} s spent: next attempt in {} ms",
                retry_ns / 1_000_000
            ),
            Self::RotationDone {
                conn, linked: true, ..
            } => write!(
                f,
                "connection {}: closed, every symbol linked on its successor",
                conn.0
            ),
            Self::RotationDone { conn, unlinked, .. } => write!(
                f,
                "connection {}: closed at the rotation deadline with {unlinked} symbols not \
                 yet linked on its successor",
                conn.0
            ),
            Self::ConnectionHealthy { conn } => write!(
                f,
                "connection {}: healthy, reconnect backoff starts again from its first delay",
                conn.0
            ),
            Self::SnapshotRequested {
                cost, budget_used, ..
            } => write!(
                f,
                "snapshot requested (weight {cost}; {budget_used} used in the last minute)"
            ),
            Self::Dropped { count } => write!(f, "{count} notices dropped: the queue was full"),
        }
    }
}

/// A bounded queue of notices, allocated at start.
#[derive(Debug)]
pub struct Notices {
    queue: VecDeque<Notice>,
    capacity: usize,
    dropped: u64,
}

impl Notices {
    /// A queue of at most `capacity` notices.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(2);
        Self {
            queue: VecDeque::with_capacity(capacity),
            capacity,
            dropped: 0,
        }
    }

    /// Queues `notice`, or counts it when the queue is full.
    pub fn push(&mut self, notice: Notice) {
        if self.dropped > 0 && self.queue.len() + 1 < self.capacity {
            self.queue.push_back(Notice::Dropped {
                count: self.dropped,
            });
            self.dropped = 0;
        }
        if self.queue.len() < self.capacity {
            self.queue.push_back(notice);
        } else {
            self.dropped += 1;
        }
    }

    /// The oldest queued notice.
    pub fn pop(&mut self) -> Option<Notice> {
        self.queue.pop_front()
    }
}
