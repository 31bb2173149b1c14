//! One channel's data path: a decoded datagram through its epoch, the sequencer and the
//! payload arena to the consumers.
//!
//! A [`Channel`] holds everything that is the channel's own; the [`Core`] holds what the
//! venue's channels share (the detector with one stream per channel, its output buffer,
//! the queues the venue drains). Each step takes both, so no step has to find its channel
//! again by index.

use std::collections::VecDeque;

use super::epoch::Epochs;
use super::gaps::GapClock;
use super::lines::Lines;
use super::payload::{PacketArena, Payload, SlotId};
use super::recovery::{RequestPolicy, Requester};
use super::snapshot::Phase;
use super::spec::{ChannelSpec, FeedSpec};
use super::wire::{self, Datagram, Kind};
use crate::protocol::ProtocolError;
use crate::publish::run::MessageRun;
use crate::publish::{Event, StreamState};
use crate::sequencer::{Delivered, Detector, Disposition, Frame, SeqRange, StreamId};
use crate::time::{Mono, Wall};
use crate::venue::{
    ChannelStats, Emit, EndpointId, IoRequest, LostReason, Notices, Timer, TimerTable, Transmit,
    Via,
};

/// Requests queued for sending at most; more are counted as dropped.
pub(super) const TX_QUEUE: usize = 256;

/// What the venue's channels share.
pub(super) struct Core {
    /// One stream per channel.
    pub(super) detector: Detector<Payload>,
    /// What the detector released, reused for every call.
    pub(super) out: Vec<Delivered<Payload>>,
    /// Requests to send.
    pub(super) tx: VecDeque<Transmit>,
    /// Fetches to start.
    pub(super) io: VecDeque<IoRequest>,
    /// Notices for the log.
    pub(super) notices: Notices,
    /// The number of the next fetch.
    pub(super) next_fetch: u64,
}

/// Every timer of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChannelTimer {
    /// Re-requests: the reorder delay after a gap, a request's timeout, the rate limit.
    Recovery,
    /// The running snapshot's deadline.
    SnapshotDeadline,
    /// A failed snapshot is tried again.
    SnapshotRetry,
    /// The oldest open gap falls due (`gap_policy = "skip"`).
    GapDeadline,
    /// The ended session's open gap is given up and the next session adopted.
    SessionDrain,
    /// Gaps declared lost are due to be reported (the notice is rate-limited).
    LostReport,
    /// The redundant lines are checked for one gone silent.
    LineWatch,
}

impl Timer for ChannelTimer {
    const ALL: &'static [Self] = &[
        Self::Recovery,
        Self::SnapshotDeadline,
        Self::SnapshotRetry,
        Self::GapDeadline,
        Self::SessionDrain,
        Self::LostReport,
        Self::LineWatch,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// A datagram in hand: when and how it came, and its bytes as received.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrival<'a> {
    /// The driver's clock.
    pub(super) now: Mono,
    /// The datagram.
    pub(super) bytes: &'a [u8],
    /// When it was received.
    pub(super) recv: Wall,
    /// On the feed, or as an answer.
    pub(super) via: Via,
    /// The line it came on (for [`Via::Multicast`]).
    pub(super) line: usize,
}

/// What the log has been told of a channel.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Logged {
    /// Session changes reported.
    pub(super) changes: u64,
    /// Strays reported.
    pub(super) strays: u64,
    /// When strays were last reported.
    pub(super) strays_at: Option<Mono>,
    /// Gaps declared lost and not yet reported.
    pub(super) lost: Option<LostTally>,
    /// When lost gaps were last reported.
    pub(super) lost_at: Option<Mono>,
}

/// Gaps declared lost since the last report.
#[derive(Debug, Clone, Copy)]
pub(super) struct LostTally {
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) gaps: u64,
    pub(super) messages: u64,
    pub(super) reason: LostReason,
}

/// One channel: one multicast feed, one stream.
pub(super) struct Channel {
    pub(super) spec: ChannelSpec,
    /// Its index in the venue.
    pub(super) index: usize,
    /// Consumer stream id.
    pub(super) id: u16,
    /// The detector's stream.
    pub(super) stream: StreamId,
    pub(super) epochs: Epochs,
    pub(super) requester: Requester,
    pub(super) phase: Phase,
    /// What consumers were last told.
    pub(super) published: StreamState,
    pub(super) arena: PacketArena,
    pub(super) stats: ChannelStats,
    pub(super) timers: TimerTable<ChannelTimer, 7>,
    /// Its redundant lines.
    pub(super) lines: Lines,
    /// When each open gap has been open for the arbitration window (redundant lines).
    pub(super) ripening: GapClock,
    /// Gaps up to this sequence are older than the arbitration window.
    pub(super) ripe_to: u64,
    /// Timers are being run: the driver has read every socket that was ready, so a gap
    /// past the arbitration window is one no line filled (a datagram handled in the same
    /// loop cycle as its line's copy, after a stall, never decides that).
    pub(super) timer_pass: bool,
    /// The feed's request policy, its reorder delay stretched to the arbitration window
    /// when the channel has more than one line.
    pub(super) policy: RequestPolicy,
    /// When each open gap falls due (`gap_policy = "skip"`).
    pub(super) gaps: GapClock,
    /// Re-requests gave up under `gap_policy = "hold"`: the stream is latched until a
    /// new session, and nothing more is tried.
    pub(super) given_up: bool,
    /// The endpoint requests go out from.
    pub(super) unicast: EndpointId,
    pub(super) logged: Logged,
}

impl Channel {
    /// Counts a datagram as received, then handles it.
    #[inline]
    pub(super) fn on_decoded(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        a: Arrival<'_>,
        decoded: Result<Datagram<'_>, ProtocolError>,
        emit: &mut impl Emit,
    ) {
        self.stats.packets += 1;
        self.stats.bytes += a.bytes.len() as u64;
        if a.via == Via::Multicast {
            self.lines
                .received(a.line, a.bytes.len(), a.now, self.index, &mut core.notices);
            if self.lines.redundant() && self.timers.get(ChannelTimer::LineWatch).is_none() {
                let every = (spec.line_down_ns / 4).max(1_000_000);
                self.timers
                    .set(ChannelTimer::LineWatch, a.now.after_nanos(every));
            }
        }
        self.handle(core, spec, a, decoded, emit);
    }

    /// A copy on a redundant line of a data datagram another line brought whole: counted
    /// (received, arbitrated) and dropped from its header alone, its blocks unread.
    /// False, changing nothing, for anything else.
    #[inline]
    pub(super) fn copy_held(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        line: usize,
        bytes: &[u8],
    ) -> bool {
        let Some((session, seq, count)) = wire::peek_data(spec.wire, bytes) else {
            return false;
        };
        let epoch = self.epochs.epoch;
        if self.epochs.session != Some(session)
            || self.published == StreamState::Closed
            || self.epochs.counting()
            || !core.detector.holds(self.stream, epoch, seq, count)
        {
            return false;
        }
        self.stats.packets += 1;
        self.stats.bytes += bytes.len() as u64;
        self.stats.messages += count;
        self.epochs.seen_current = true;
        self.lines
            .received(line, bytes.len(), now, self.index, &mut core.notices);
        self.lines
            .carried(line, epoch, seq, seq.saturating_add(count));
        self.lines.lost_race(line, seq, count, now);
        true
    }

    /// Handles a datagram already counted as received: the session's own, or one held
    /// while its session was being confirmed.
    pub(super) fn handle(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        a: Arrival<'_>,
        decoded: Result<Datagram<'_>, ProtocolError>,
        emit: &mut impl Emit,
    ) {
        let Ok(d) = decoded else {
            self.stats.malformed += 1;
            return;
        };
        let Some(epoch) = self.resolve_epoch(core, spec, a, d.session, d.seq, emit) else {
            return;
        };
        if self.published == StreamState::Closed && d.kind == Kind::Data {
            // The session announced its end and nothing is missing: data after it is a
            // straggler, never delivered after consumers were told the stream closed.
            self.stats.stale_session += 1;
            return;
        }
        let stream = self.stream;
        if a.via == Via::Multicast && self.lines.redundant() {
            let count = u64::from(d.count);
            self.lines
                .carried(a.line, epoch, d.seq, d.seq.saturating_add(count));
            if d.kind == Kind::Data && count > 0 {
                if core.detector.holds(stream, epoch, d.seq, count) {
                    // Another line brought all of it first: arbitrated, nothing stored.
                    self.stats.messages += count;
                    self.lines.lost_race(a.line, d.seq, count, a.now);
                    return;
                }
                self.lines.won(a.line, d.seq, a.now);
            }
        }
        match d.kind {
            // The common case: a live datagram that continues a synced stream. The
            // sequencer takes all its messages in one step and the consumers get them as
            // one run, the datagram's blocks as they arrived.
            Kind::Data
                if a.via == Via::Multicast
                    && d.count > 0
                    && core
                        .detector
                        .ingest_run(stream, epoch, d.seq, u64::from(d.count)) =>
            {
                self.stats.messages += u64::from(d.count);
                emit.emit_run(&MessageRun::validated(
                    self.id,
                    d.seq,
                    a.recv.as_nanos(),
                    d.lengths,
                    d.blocks,
                    u32::from(d.count),
                ));
            }
            // A peer store's answer that it does not hold the request's messages yet: a
            // word about the requests, not about the feed.
            Kind::Heartbeat
                if a.via == Via::Unicast && self.requester.not_yet(a.now.as_nanos(), d.seq) =>
            {
                self.stats.answers += 1;
            }
            Kind::Heartbeat | Kind::EndOfSession => {
                self.stats.heartbeats += 1;
                if d.kind == Kind::EndOfSession {
                    self.epochs.end_of_session = true;
                }
                let outcome = core.detector.heartbeat(stream, epoch, d.seq);
                if let Some(gap) = outcome.new_gap {
                    self.gap_opened(spec, a.now, gap);
                }
            }
            Kind::Data => {
                if a.via == Via::Unicast {
                    self.stats.answers += 1;
                    let end = d.seq.saturating_add(u64::from(d.count));
                    if d.count > 0 {
                        self.requester.answered(SeqRange::new(d.seq, end - 1));
                    }
                }
                self.stats.messages += u64::from(d.count);
                let mut stored: Option<SlotId> = None;
                for (seq, msg) in d.messages() {
                    self.message(core, spec, a, epoch, seq, msg, &mut stored, emit);
                }
                if let Some(slot) = stored {
                    self.arena.release(slot);
                }
            }
        }
        self.publish_state(core, emit);
        self.drive(core, spec, a.now, a.via == Via::Unicast, emit);
    }

    /// One message of a datagram that did not go in as a whole run.
    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        a: Arrival<'_>,
        epoch: u64,
        seq: u64,
        msg: &[u8],
        stored: &mut Option<SlotId>,
        emit: &mut impl Emit,
    ) {
        let stream = self.stream;
        if a.via == Via::Multicast
            && self.lines.redundant()
            && core.detector.holds(stream, epoch, seq, 1)
        {
            // Part of a datagram another line brought first.
            self.lines.discarded(a.line, 1);
            return;
        }
        if spec.make_room && a.via == Via::Multicast {
            self.make_room(core, spec, epoch, seq, stored.is_none(), emit);
        }
        let offset = wire::offset_in(a.bytes, msg).unwrap_or(0) as u16;
        let len = msg.len() as u16;
        let payload = if core.detector.is_next(stream, epoch, seq) {
            Payload::Current { offset, len }
        } else {
            let slot = match *stored {
                Some(slot) => slot,
                None => match self.arena.store(a.bytes, a.recv.as_nanos()) {
                    Some(slot) => {
                        // The datagram's own reference, dropped when all its messages are
                        // done: until then no release (a duplicate among them, a discard)
                        // can free the slot while later messages still go into it.
                        self.arena.retain(slot);
                        *stored = Some(slot);
                        slot
                    }
                    None => {
                        // No room to keep it: treat the message as lost on the wire, but
                        // record that it exists so it is requested like any other loss.
                        self.stats.arena_full += 1;
                        let outcome = core
                            .detector
                            .heartbeat(stream, epoch, seq.saturating_add(1));
                        if let Some(gap) = outcome.new_gap {
                            self.gap_opened(spec, a.now, gap);
                        }
                        return;
                    }
                },
            };
            self.arena.retain(slot);
            Payload::Stored { slot, offset, len }
        };
        let mut out = std::mem::take(&mut core.out);
        let disposition = match a.via {
            Via::Multicast => {
                let outcome =
                    core.detector
                        .ingest(stream, epoch, Frame::point(seq, payload), &mut out);
                if let Some(gap) = outcome.new_gap {
                    self.requester.new_gap(a.now.as_nanos(), &self.policy);
                    self.gap_opened(spec, a.now, gap);
                }
                outcome.disposition
            }
            Via::Unicast => {
                match core
                    .detector
                    .backfill(stream, epoch, Frame::point(seq, payload), &mut out)
                {
                    Ok(r) => r.outcome.disposition,
                    Err(_) => Disposition::DroppedResetRequired,
                }
            }
        };
        let accepted = matches!(
            disposition,
            Disposition::Processed | Disposition::PartialOverlap | Disposition::Buffered
        );
        if !accepted && let Some(slot) = payload.slot() {
            self.arena.release(slot);
        }
        if accepted && a.via == Via::Unicast {
            self.stats.recovered += 1;
            // Delivered at once: it was the stream's head, and recovery moved on (the
            // re-request budget is whole again); held: a later gap, which does not.
            self.requester
                .recovered(seq, disposition == Disposition::Processed);
        }
        self.deliver(core, &mut out, a.bytes, a.recv, emit);
        core.out = out;
    }

    /// With [`FeedSpec::make_room`]: declares the oldest gaps lost, one at a time, until
    /// the message `seq` can be held: inside the reorder window, under the buffer cap, and
    /// with a free arena slot when its datagram needs one. What is declared lost is what
    /// had not arrived when room ran out, exactly; nothing that did arrive is dropped.
    fn make_room(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        epoch: u64,
        seq: u64,
        needs_slot: bool,
        emit: &mut impl Emit,
    ) {
        let stream = self.stream;
        let window = spec.window.max(1).next_power_of_two() as u64;
        let cap = spec.max_buffered.min(spec.window).max(1);
        // Each pass declares one range lost, or reveals the one a jump past the window
        // leaves behind; the window bounds the passes.
        for _ in 0..=spec.window.saturating_add(1) {
            if core.detector.epoch(stream) != Some(epoch)
                || !matches!(
                    core.detector.state(stream),
                    StreamState::Synced | StreamState::DirtySyncPending | StreamState::Recovering
                )
            {
                return;
            }
            let Some(expected) = core.detector.expected(stream) else {
                return;
            };
            if seq <= expected {
                return;
            }
            let in_window = seq - expected < window;
            let room = core.detector.buffered(stream) < cap
                && (!needs_slot || self.arena.free_slots() > 0);
            if in_window && room {
                return;
            }
            match core.detector.missing(stream).next() {
                Some(range) => {
                    self.lose(range, LostReason::NoRoom, emit);
                    self.resynchronize(core, range.to.saturating_add(1), emit);
                }
                // Nothing known missing, and `seq` is a window or more ahead: what lies
                // between never came.
                None if !in_window => {
                    core.detector.heartbeat(stream, epoch, seq);
                }
                None => return,
            }
        }
    }

    /// Emits delivered messages (those in `datagram` received at `recv`), releasing their
    /// slots, then releases discards.
    pub(super) fn deliver(
        &mut self,
        core: &mut Core,
        out: &mut Vec<Delivered<Payload>>,
        datagram: &[u8],
        recv: Wall,
        emit: &mut impl Emit,
    ) {
        for d in out.drain(..) {
            let found = match d.payload {
                Payload::Current { offset, len } => {
                    let (start, end) =
                        (usize::from(offset), usize::from(offset) + usize::from(len));
                    datagram.get(start..end).map(|b| (b, recv.as_nanos()))
                }
                stored @ Payload::Stored { .. } => self.arena.get(stored),
            };
            if let Some((payload, recv_ns)) = found {
                emit.emit(&Event::Message {
                    stream: self.id,
                    seq: d.first,
                    recv_ns,
                    snapshot: false,
                    payload,
                });
            }
            if let Some(slot) = d.payload.slot() {
                self.arena.release(slot);
            }
        }
        self.release_discarded(core);
    }

    /// Releases the slots of what the detector threw away.
    pub(super) fn release_discarded(&mut self, core: &mut Core) {
        let arena = &mut self.arena;
        core.detector.take_discarded(self.stream, |p| {
            if let Some(slot) = p.slot() {
                arena.release(slot);
            }
        });
    }

    /// Resynchronises the stream at `next` and delivers what that releases.
    pub(super) fn resynchronize(&mut self, core: &mut Core, next: u64, emit: &mut impl Emit) {
        let mut out = std::mem::take(&mut core.out);
        core.detector.resynchronize(self.stream, next, &mut out);
        self.deliver(core, &mut out, &[], Wall::UNKNOWN, emit);
        core.out = out;
    }

    /// Emits a state event when the consumer-visible state changed.
    pub(super) fn publish_state(&mut self, core: &Core, emit: &mut impl Emit) {
        let state = core.detector.state(self.stream);
        let now = if state == StreamState::Synced && self.epochs.end_of_session {
            StreamState::Closed
        } else {
            state
        };
        if now != self.published {
            self.published = now;
            emit.emit(&Event::State {
                stream: self.id,
                state: now,
            });
        }
    }

    /// The channel's counters, with the sequencer's and the requester's.
    pub(super) fn stats(&self, core: &Core) -> ChannelStats {
        let mut stats = self.stats;
        stats.sequencer = core.detector.stats(self.stream);
        stats.requests_inflight = self.requester.inflight() as u64;
        stats.timeouts = self.requester.timeouts;
        stats.not_yet = self.requester.not_yet_answers;
        stats.arbitrated = self.lines.arbitrated();
        stats
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::moldudp64::{self, PacketWriter, Session};
    use crate::publish::{Event, StreamState};
    use crate::time::{Mono, Wall};
    use crate::venue::udp::LineSpec;
    use crate::venue::{ChannelSpec, FeedSpec, UdpVenue, Via, Wire};

    const SESSION: Session = Session(*b"TEST000001");

    fn data(first: u64) -> Vec<u8> {
        let mut buf = [0u8; 64];
        let mut w = PacketWriter::new(&mut buf, SESSION, first).unwrap();
        w.push(b"m").unwrap();
        let n = w.finish();
        buf[..n].to_vec()
    }

    #[test]
    fn nothing_is_delivered_after_the_session_closed() {
        let line = LineSpec::loopback(std::net::SocketAddrV4::new([239, 255, 0, 1].into(), 1));
        let mut spec = FeedSpec::new(Wire::MoldUdp64, vec![ChannelSpec::new("a", line)]);
        spec.window = 64;
        spec.max_buffered = 64;
        spec.arena_datagrams = 8;
        spec.session_confirm = 1;
        let mut venue = UdpVenue::new("t", spec);
        let mut end = [0u8; 20];
        let n = moldudp64::encode_end_of_session(&mut end, SESSION, 2).unwrap();
        let mut seen = Vec::new();
        let mut sink = |e: &Event<'_>| seen.push(format!("{e:?}"));
        let datagrams = [data(1), end[..n].to_vec(), data(2), data(3)];
        for (i, d) in datagrams.iter().enumerate() {
            let at = 1_000 * (i as u64 + 1);
            venue.on_datagram(
                Mono::from_nanos(at),
                0,
                d,
                Wall::from_nanos(at),
                Via::Multicast,
                &mut sink,
            );
        }
        assert_eq!(venue.published_state(0), StreamState::Closed);
        let messages: Vec<&String> = seen.iter().filter(|e| e.starts_with("Message")).collect();
        // Before the fix, messages 2 and 3 came after the consumers were told it closed.
        assert_eq!(messages.len(), 1, "{seen:?}");
        assert!(seen.last().unwrap().contains("Closed"), "{seen:?}");
        assert_eq!(venue.stats(0).stale_session, 2);
    }
}
