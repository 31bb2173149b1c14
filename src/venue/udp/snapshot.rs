//! The snapshot phase of a channel: when re-requests cannot close a gap (too large, no
//! server left, a latched reset), the stream is resynchronised from the channel's
//! SoupBinTCP snapshot service while live data is kept for after it.
//!
//! ```text
//!   Idle --start--> Running{id, since} --End{next}--> Idle (resynchronised at `next`)
//!                        |  \--Failed or deadline--> Backoff{until} --retry timer--> Running
//! ```
//!
//! Starting latches the stream unsynced (consumers get `State{ResetRequired}` and
//! `SnapshotBegin`), and queues the fetch for the driver. The snapshot's messages go to
//! consumers as they arrive; its end (`SnapshotEnd{next}`) resynchronises the stream at
//! `next` and delivers what was buffered after it.

use super::channel::{Channel, ChannelTimer, Core};
use super::spec::FeedSpec;
use crate::publish::{Event, StreamState};
use crate::time::Mono;
use crate::venue::{Emit, Fetch, FetchId, FetchReply, IoRequest};

/// Where a channel's snapshot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No snapshot running.
    Idle,
    /// Fetch `id` started at `since`.
    Running { id: FetchId, since: Mono },
    /// The last one failed; the next starts at `until`.
    Backoff { until: Mono },
}

impl Channel {
    /// Starts a snapshot now, if the channel has a snapshot service; true if it did.
    pub(super) fn start_snapshot(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        emit: &mut impl Emit,
    ) -> bool {
        let Some(service) = self.spec.snapshot.as_ref() else {
            return false;
        };
        let id = FetchId(core.next_fetch);
        core.next_fetch += 1;
        self.phase = Phase::Running { id, since: now };
        self.timers.stop(ChannelTimer::SnapshotRetry);
        self.timers.stop(ChannelTimer::Recovery);
        self.timers.set(
            ChannelTimer::SnapshotDeadline,
            now.after_nanos(spec.snapshot_timeout_ns),
        );
        self.stats.snapshots_started += 1;
        self.requester.clear();
        core.io.push_back(IoRequest::Fetch {
            id,
            stream: self.index,
            what: Fetch::Soup {
                addr: service.addr,
                username: service.username.clone(),
                password: service.password.clone(),
                session: self.epochs.session.unwrap_or_default().0,
            },
            timeout_ns: spec.snapshot_timeout_ns,
        });
        core.detector.begin_resync(self.stream);
        self.release_discarded(core);
        self.published = StreamState::ResetRequired;
        emit.emit(&Event::State {
            stream: self.id,
            state: StreamState::ResetRequired,
        });
        emit.emit(&Event::SnapshotBegin { stream: self.id });
        true
    }

    /// Forgets any snapshot running or backing off (a new session was adopted).
    pub(super) fn stop_snapshot(&mut self) {
        self.phase = Phase::Idle;
        self.timers.stop(ChannelTimer::SnapshotDeadline);
        self.timers.stop(ChannelTimer::SnapshotRetry);
    }

    /// The running snapshot failed at `now` (or passed its deadline): try again later.
    fn snapshot_failed(&mut self, spec: &FeedSpec, now: Mono) {
        self.stats.snapshots_failed += 1;
        let until = now.after_nanos(spec.snapshot_retry_ns);
        self.phase = Phase::Backoff { until };
        self.timers.stop(ChannelTimer::SnapshotDeadline);
        self.timers.set(ChannelTimer::SnapshotRetry, until);
    }

    /// Runs the snapshot timers due at `now`.
    pub(super) fn snapshot_timers(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        emit: &mut impl Emit,
    ) {
        if self.timers.is_due(ChannelTimer::SnapshotDeadline, now)
            && matches!(self.phase, Phase::Running { .. })
        {
            self.snapshot_failed(spec, now);
        }
        if self.timers.is_due(ChannelTimer::SnapshotRetry, now)
            && matches!(self.phase, Phase::Backoff { .. })
        {
            self.timers.stop(ChannelTimer::SnapshotRetry);
            self.phase = Phase::Idle;
            self.start_snapshot(core, spec, now, emit);
        }
    }

    /// What fetch `id` produced, if it is this channel's running snapshot; false if not.
    pub(super) fn on_fetch(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        id: FetchId,
        reply: FetchReply<'_>,
        emit: &mut impl Emit,
    ) -> bool {
        if !matches!(self.phase, Phase::Running { id: running, .. } if running == id) {
            return false;
        }
        match reply {
            FetchReply::Message(payload) => {
                self.stats.snapshot_messages += 1;
                emit.emit(&Event::Message {
                    stream: self.id,
                    seq: 0,
                    recv_ns: 0,
                    snapshot: true,
                    payload,
                });
            }
            FetchReply::End { next } => {
                emit.emit(&Event::SnapshotEnd {
                    stream: self.id,
                    next,
                });
                self.phase = Phase::Idle;
                self.timers.stop(ChannelTimer::SnapshotDeadline);
                self.stats.snapshots_done += 1;
                self.requester.progress();
                self.resynchronize(core, next, emit);
                self.publish_state(core, emit);
                self.drive(core, spec, now, true, emit);
            }
            // A SoupBinTCP snapshot has no HTTP answer: a driver that gives one failed.
            FetchReply::Failed(_) | FetchReply::Http { .. } => self.snapshot_failed(spec, now),
        }
        true
    }
}
