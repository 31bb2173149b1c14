//! The sans-IO session of a point-sequenced UDP venue (MoldUDP64 or IEX-TP): one stream
//! per channel, re-request recovery, snapshot fallback, and delivery to consumers.
//!
//! Inputs are datagrams with the time they arrived ([`FeedSession::on_datagram`]), timer
//! expiries ([`FeedSession::handle_timeout`]) and snapshot results
//! ([`FeedSession::on_snapshot`]). Outputs are consumer events pushed to an [`Emit`],
//! requests to send ([`FeedSession::poll_transmit`]), snapshots to fetch
//! ([`FeedSession::poll_snapshot`]) and the next deadline ([`FeedSession::poll_timeout`]).
//! Times are nanoseconds on whatever clock the caller uses: the live loop's monotonic
//! clock, or a capture's timestamps in replay.

use std::collections::VecDeque;
use std::net::SocketAddr;

mod epoch;
pub mod payload;
pub mod recovery;
pub mod wire;

use self::wire as feed;
use super::{ChannelStats, Emit, GapPolicy, Via};
use crate::protocol::ProtocolError;
use crate::protocol::moldudp64::{Request, Session};
use crate::publish::run::MessageRun;
use crate::publish::{Event, StreamState as Published};
use crate::sequencer::{
    Baseline, Delivered, Detector, Disposition, Frame, SeqRange, StreamConfig, StreamId,
    StreamState,
};
use epoch::{Candidate, Offer};
use payload::{MsgRef, PacketArena};
use recovery::{Plan, RequestPolicy, Requester};
use wire::{Kind, SessionKey, Wire};

/// How to reach a channel's snapshot service (SoupBinTCP, GLIMPSE-style).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSpec {
    /// TCP address of the snapshot server.
    pub addr: SocketAddr,
    /// Login user name.
    pub username: String,
    /// Login password.
    pub password: String,
}

/// One channel of a venue: one multicast feed, one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    /// Name for logs and metrics.
    pub name: String,
    /// The session to expect first; adopted from the first packet when `None`.
    pub session: Option<SessionKey>,
    /// Re-request servers, tried in order.
    pub rerequest: Vec<SocketAddr>,
    /// Snapshot service, if any.
    pub snapshot: Option<SnapshotSpec>,
}

/// A venue's channels and how they are sequenced and recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedSpec {
    /// The wire format.
    pub wire: Wire,
    /// Stream id of the first channel in consumer events; channel `i` is `stream_base + i`.
    /// The ids must fit a u16 (`stream_base + channels.len()` at most 65,536), or the
    /// last channels share id 65,535; the daemon's configuration check ensures it.
    pub stream_base: u16,
    /// The channels.
    pub channels: Vec<ChannelSpec>,
    /// Reorder window per stream (slots).
    pub window: usize,
    /// Messages buffered per stream at most.
    pub max_buffered: usize,
    /// A backward jump this large is a suspected restart (0 = off).
    pub reset_threshold: u64,
    /// `Some(n)`: the first session starts at `n` and everything before the first packet
    /// seen is missing. `None`: adopt the first packet as the baseline (live start).
    pub start_from: Option<u64>,
    /// Re-request tuning.
    pub policy: RequestPolicy,
    /// A gap larger than this goes to the snapshot (when there is one).
    pub max_replay: u64,
    /// A snapshot not finished within this is abandoned and retried.
    pub snapshot_timeout_ns: u64,
    /// Wait this long before retrying a failed snapshot.
    pub snapshot_retry_ns: u64,
    /// Largest datagram kept for reordering (bytes).
    pub max_datagram: usize,
    /// Datagrams kept for reordering per channel at most.
    pub arena_datagrams: usize,
    /// Datagrams of another session in a row, with none of the current one between them,
    /// that make it the channel's session when the current one has not announced its end
    /// (1: at once); the first session of a channel with none configured is confirmed the
    /// same way. Those before the last are held and delivered once it is adopted, so a
    /// restart loses nothing, while a stray datagram or two on the group never retire the
    /// real session. A session left behind takes the channel back the same way (with two
    /// datagrams at least), resuming where its stream had got to, unless it announced
    /// its end.
    pub session_confirm: u32,
    /// What to do with a gap nothing can recover.
    pub gap_policy: GapPolicy,
}

impl FeedSpec {
    /// A spec with defaults suited to a live MoldUDP64 or IEX-TP venue.
    pub fn new(wire: Wire, channels: Vec<ChannelSpec>) -> Self {
        Self {
            wire,
            stream_base: 0,
            channels,
            window: 65_536,
            max_buffered: 65_536,
            reset_threshold: 1_000_000,
            start_from: None,
            policy: RequestPolicy::default(),
            max_replay: 100_000,
            snapshot_timeout_ns: 10_000_000_000,
            snapshot_retry_ns: 1_000_000_000,
            max_datagram: 2048,
            arena_datagrams: 4096,
            session_confirm: 3,
            gap_policy: GapPolicy::Hold,
        }
    }
}

/// A request to send: `bytes[..len]` to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The channel asking.
    pub channel: usize,
    /// The re-request server.
    pub to: SocketAddr,
    /// The encoded request.
    pub bytes: [u8; 20],
    /// How many bytes of `bytes` to send.
    pub len: usize,
}

/// A snapshot the I/O shell should fetch off the receive thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotTask {
    /// Identifies this attempt in [`FeedSession::on_snapshot`].
    pub id: u64,
    /// The channel.
    pub channel: usize,
    /// Where and how to log in.
    pub spec: SnapshotSpec,
    /// The session the snapshot is for.
    pub session: SessionKey,
}

/// What the snapshot fetch reports back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotEvent<'a> {
    /// One snapshot message.
    Message(&'a [u8]),
    /// The snapshot is complete; live data resumes at `next`.
    End {
        /// The sequence the snapshot reflects everything before.
        next: u64,
    },
    /// The fetch failed.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Wanted,
    Running { id: u64, since: u64 },
    Backoff { until: u64 },
}

const RETIRED_SESSIONS: usize = 4;
const TX_QUEUE: usize = 256;

/// A session left behind, and the sequence its stream had reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Retired {
    session: SessionKey,
    /// Where the stream resumes if the session takes the channel back; `None` when it
    /// had not started (the channel's baseline rule then applies again).
    next: Option<u64>,
    /// It announced its end: it never takes the channel back.
    ended: bool,
}

struct Channel {
    spec: ChannelSpec,
    stream: StreamId,
    session: Option<SessionKey>,
    retired: [Option<Retired>; RETIRED_SESSIONS],
    /// Another session being counted before it is adopted.
    candidate: Candidate,
    epoch: u64,
    requester: Requester,
    phase: Phase,
    published: Published,
    end_of_session: bool,
    arena: PacketArena,
    stats: ChannelStats,
}

impl Channel {
    /// Gives up the session being counted: its datagrams are dropped, and counted.
    fn give_up_candidate(&mut self) {
        if let Some(given_up) = self.candidate.give_up() {
            if given_up.retired {
                self.stats.stale_session += given_up.datagrams;
            } else {
                self.stats.unconfirmed_session += given_up.datagrams;
            }
        }
    }
}

/// The session of one venue's point-sequenced channels.
pub struct FeedSession {
    spec: FeedSpec,
    channels: Vec<Channel>,
    detector: Detector<MsgRef>,
    out: Vec<Delivered<MsgRef>>,
    tx: VecDeque<Transmit>,
    next_snapshot_id: u64,
}

impl FeedSession {
    /// Builds the session and allocates every buffer it will use.
    pub fn new(spec: FeedSpec) -> Self {
        let mut detector = Detector::new();
        let baseline = match spec.start_from {
            Some(n) => Baseline::Expect(n),
            None => Baseline::AdoptFirst,
        };
        let config = StreamConfig::point(spec.window)
            .with_baseline(baseline)
            .with_max_buffered(spec.max_buffered.min(spec.window).max(1))
            .with_reset_threshold(spec.reset_threshold);
        let channels = spec
            .channels
            .iter()
            .map(|c| Channel {
                spec: c.clone(),
                stream: detector.add_stream(config),
                session: c.session,
                retired: [None; RETIRED_SESSIONS],
                candidate: Candidate::new(spec.session_confirm, spec.max_datagram),
                epoch: 0,
                requester: Requester::new(c.rerequest.clone()),
                phase: Phase::Idle,
                published: Published::Unseen,
                end_of_session: false,
                arena: PacketArena::new(spec.arena_datagrams, spec.max_datagram),
                stats: ChannelStats::default(),
            })
            .collect();
        Self {
            // A fill can release itself and a whole window of buffered frames at once.
            out: Vec::with_capacity(spec.window.min(1 << 20) + 1),
            tx: VecDeque::with_capacity(TX_QUEUE),
            spec,
            channels,
            detector,
            next_snapshot_id: 1,
        }
    }

    /// Number of channels.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// The channel's name.
    pub fn channel_name(&self, channel: usize) -> &str {
        self.channels
            .get(channel)
            .map_or("", |c| c.spec.name.as_str())
    }

    /// The consumer stream id of a channel.
    pub fn stream_id(&self, channel: usize) -> u16 {
        self.spec.stream_base.saturating_add(channel as u16)
    }

    /// The channel's sequencing state.
    pub fn state(&self, channel: usize) -> StreamState {
        self.channels
            .get(channel)
            .map_or(StreamState::Unseen, |c| self.detector.state(c.stream))
    }

    /// The channel's state as its consumers last saw it: the sequencing state, or
    /// [`Published::Closed`] once its session ended with nothing missing.
    pub fn published_state(&self, channel: usize) -> Published {
        self.channels
            .get(channel)
            .map_or(Published::Unseen, |c| c.published)
    }

    /// The wire format.
    pub fn wire(&self) -> Wire {
        self.spec.wire
    }

    /// The channel's current session, once known.
    pub fn session(&self, channel: usize) -> Option<SessionKey> {
        self.channels.get(channel).and_then(|c| c.session)
    }

    /// The missing ranges of a channel, in order.
    pub fn missing(&self, channel: usize) -> Vec<SeqRange> {
        self.channels
            .get(channel)
            .map(|c| self.detector.missing(c.stream).collect())
            .unwrap_or_default()
    }

    /// The channel's counters, with the sequencer's.
    pub fn stats(&self, channel: usize) -> ChannelStats {
        self.channels
            .get(channel)
            .map_or_else(ChannelStats::default, |c| {
                let mut stats = c.stats;
                stats.sequencer = self.detector.stats(c.stream);
                stats.requests_inflight = c.requester.inflight() as u64;
                stats.timeouts = c.requester.timeouts;
                stats
            })
    }

    /// Handles one datagram that arrived on `channel` at `now`, received at `recv_ns`
    /// (wall clock, for latency), by multicast or as a unicast answer to a request.
    pub fn on_datagram(
        &mut self,
        now: u64,
        channel: usize,
        datagram: &[u8],
        recv_ns: u64,
        via: Via,
        emit: &mut impl Emit,
    ) {
        let decoded = feed::decode(self.spec.wire, datagram);
        self.on_decoded(now, channel, datagram, decoded, recv_ns, via, emit);
    }

    /// Handles datagrams that arrived together on `channel`, each with its receive time,
    /// in order: the same as [`FeedSession::on_datagram`] on each, with their message
    /// blocks checked four datagrams at a time (faster: see [`feed::decode4`]).
    pub fn on_datagrams(
        &mut self,
        now: u64,
        channel: usize,
        datagrams: &[(&[u8], u64)],
        via: Via,
        emit: &mut impl Emit,
    ) {
        let wire = self.spec.wire;
        let mut fours = datagrams.chunks_exact(4);
        for four in &mut fours {
            let &[a, b, c, d] = four else { continue };
            let [da, db, dc, dd] = feed::decode4(wire, [a.0, b.0, c.0, d.0]);
            self.on_decoded(now, channel, a.0, da, a.1, via, emit);
            self.on_decoded(now, channel, b.0, db, b.1, via, emit);
            self.on_decoded(now, channel, c.0, dc, c.1, via, emit);
            self.on_decoded(now, channel, d.0, dd, d.1, via, emit);
        }
        for &(bytes, recv_ns) in fours.remainder() {
            self.on_datagram(now, channel, bytes, recv_ns, via, emit);
        }
    }

    /// Counts a datagram as received, then handles it.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn on_decoded(
        &mut self,
        now: u64,
        channel: usize,
        datagram: &[u8],
        decoded: Result<feed::Datagram<'_>, ProtocolError>,
        recv_ns: u64,
        via: Via,
        emit: &mut impl Emit,
    ) {
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        c.stats.packets += 1;
        c.stats.bytes += datagram.len() as u64;
        self.handle(now, channel, datagram, decoded, recv_ns, via, emit);
    }

    /// Handles a datagram already counted as received: the session's own, or one held
    /// while its session was being confirmed.
    #[allow(clippy::too_many_arguments)]
    fn handle(
        &mut self,
        now: u64,
        channel: usize,
        datagram: &[u8],
        decoded: Result<feed::Datagram<'_>, ProtocolError>,
        recv_ns: u64,
        via: Via,
        emit: &mut impl Emit,
    ) {
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        let Ok(d) = decoded else {
            c.stats.malformed += 1;
            return;
        };
        let Some(epoch) =
            self.epoch_of(now, channel, d.session, d.seq, datagram, recv_ns, via, emit)
        else {
            return;
        };
        let stream_id = self.stream_id(channel);
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        let stream = c.stream;
        match d.kind {
            // The common case: a live datagram that continues a synced stream. The
            // sequencer takes all its messages in one step and the consumers get them as
            // one run, the datagram's blocks as they arrived.
            Kind::Data
                if via == Via::Multicast
                    && d.count > 0
                    && self
                        .detector
                        .ingest_run(stream, epoch, d.seq, u64::from(d.count)) =>
            {
                c.stats.messages += u64::from(d.count);
                emit.emit_run(&MessageRun::validated(
                    stream_id,
                    d.seq,
                    recv_ns,
                    d.lengths,
                    d.blocks,
                    u32::from(d.count),
                ));
            }
            Kind::Heartbeat | Kind::EndOfSession => {
                c.stats.heartbeats += 1;
                if d.kind == Kind::EndOfSession {
                    c.end_of_session = true;
                }
                self.detector.heartbeat(stream, epoch, d.seq);
            }
            Kind::Data => {
                if via == Via::Unicast {
                    c.stats.answers += 1;
                    let end = d.seq.saturating_add(u64::from(d.count));
                    if d.count > 0 {
                        c.requester.answered(SeqRange::new(d.seq, end - 1));
                    }
                }
                c.stats.messages += u64::from(d.count);
                let mut stored: Option<u32> = None;
                for (seq, msg) in d.messages() {
                    self.message(
                        now,
                        channel,
                        epoch,
                        seq,
                        datagram,
                        msg,
                        recv_ns,
                        via,
                        &mut stored,
                        emit,
                    );
                }
                if let (Some(slot), Some(c)) = (stored, self.channels.get_mut(channel)) {
                    c.arena.release(slot);
                }
            }
        }
        self.publish_state(channel, emit);
        self.drive(now, channel, via == Via::Unicast, emit);
    }

    /// Resolves the epoch of a datagram's session; `None` when the datagram is not to be
    /// handled now (a session left behind, or another session not yet confirmed).
    #[allow(clippy::too_many_arguments)]
    fn epoch_of(
        &mut self,
        now: u64,
        channel: usize,
        session: SessionKey,
        seq: u64,
        datagram: &[u8],
        recv_ns: u64,
        via: Via,
        emit: &mut impl Emit,
    ) -> Option<u64> {
        let c = self.channels.get_mut(channel)?;
        let current = c.session;
        if current == Some(session) {
            if via == Via::Multicast && c.candidate.counting().is_some() {
                // The current session is alive on the feed: whatever was being counted
                // was not a restart. (An answer to an old request proves nothing.)
                c.give_up_candidate();
            }
            return Some(c.epoch);
        }
        let retired = c
            .retired
            .iter()
            .flatten()
            .find(|r| r.session == session)
            .copied();
        if via == Via::Unicast || retired.is_some_and(|r| r.ended) {
            // Answers to requests are no evidence of a live session, only the feed is; and
            // a session that announced its end is over.
            match retired {
                Some(_) => c.stats.stale_session += 1,
                None => c.stats.unconfirmed_session += 1,
            }
            return None;
        }
        if c.candidate.counting().is_some_and(|s| s != session) {
            c.give_up_candidate();
        }
        let adopt = if current.is_some() && c.end_of_session && retired.is_none() {
            // The current session said it ended: the next one needs no confirming.
            true
        } else {
            c.candidate
                .offer(session, retired.is_some(), seq, datagram, recv_ns)
                == Offer::Confirmed
        };
        if !adopt {
            return None;
        }
        match current {
            // The first session: confirmed like any other, so that a stray sender
            // heard before the venue does not become the channel's session.
            None => c.session = Some(session),
            Some(current) => self.adopt_session(channel, current, session, retired, emit),
        }
        let held = self.channels.get_mut(channel)?.candidate.take();
        // A stream that takes its first datagram as its start (a live start, not yet
        // started in this session) starts at the lowest the session sent while it was
        // being confirmed: a datagram that could not be held is then missing, not lost.
        let unstarted = current.is_none() || retired.is_some_and(|r| r.next.is_none());
        if let (true, None, Some(lowest)) = (unstarted, self.spec.start_from, held.lowest()) {
            let c = self.channels.get(channel)?;
            self.detector.heartbeat(c.stream, c.epoch, lowest);
        }
        // The datagrams that led up to the change (all of `session`), in the order they
        // came. They were counted as received when they arrived.
        for (bytes, held_recv_ns) in held.iter() {
            let decoded = feed::decode(self.spec.wire, bytes);
            self.handle(
                now,
                channel,
                bytes,
                decoded,
                held_recv_ns,
                Via::Multicast,
                emit,
            );
        }
        let c = self.channels.get_mut(channel)?;
        c.candidate.restore(held);
        (c.session == Some(session)).then_some(c.epoch)
    }

    /// Makes `session` the channel's session in a new epoch, retiring `current`: a new
    /// session starts from 1, and a retired one taking the channel back resumes where its
    /// stream had got to (what it sent meanwhile is then missing, and recovered).
    fn adopt_session(
        &mut self,
        channel: usize,
        current: SessionKey,
        session: SessionKey,
        retired: Option<Retired>,
        emit: &mut impl Emit,
    ) {
        let id = self.stream_id(channel);
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        let left = Retired {
            session: current,
            next: self.detector.expected(c.stream),
            ended: c.end_of_session,
        };
        // The one left now first, then the others, newest first, without the session
        // taking the channel (back).
        let mut retired_now = [None; RETIRED_SESSIONS];
        let kept = c.retired.iter().flatten().filter(|r| r.session != session);
        for (slot, r) in retired_now
            .iter_mut()
            .zip(std::iter::once(&left).chain(kept))
        {
            *slot = Some(*r);
        }
        c.retired = retired_now;
        c.session = Some(session);
        c.epoch += 1;
        c.stats.new_sessions += 1;
        c.requester.clear();
        c.requester.progress();
        c.phase = Phase::Idle;
        c.end_of_session = false;
        let (stream, epoch) = (c.stream, c.epoch);
        emit.emit(&Event::State {
            stream: id,
            state: Published::Unseen,
        });
        // A new session is numbered from 1; one taking the channel back resumes where its
        // stream had got to, or, had it not started, starts by the channel's baseline rule
        // with its first datagram of the new epoch.
        let start = match retired {
            None => Some(1),
            Some(r) => r.next,
        };
        if let Some(start) = start {
            let mut out = std::mem::take(&mut self.out);
            self.detector
                .resynchronize_epoch(stream, epoch, start, &mut out);
            self.out = out;
        }
        self.release_discarded(channel);
        if let Some(c) = self.channels.get_mut(channel) {
            c.published = Published::Unseen;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        now: u64,
        channel: usize,
        epoch: u64,
        seq: u64,
        datagram: &[u8],
        msg: &[u8],
        recv_ns: u64,
        via: Via,
        stored: &mut Option<u32>,
        emit: &mut impl Emit,
    ) {
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        let stream = c.stream;
        let offset = feed::offset_in(datagram, msg).unwrap_or(0) as u16;
        let len = msg.len() as u16;
        let payload = if self.detector.is_next(stream, epoch, seq) {
            MsgRef {
                slot: MsgRef::CURRENT,
                offset,
                len,
            }
        } else {
            let slot = match *stored {
                Some(slot) => slot,
                None => match c.arena.store(datagram, recv_ns) {
                    Some(slot) => {
                        // The datagram's own reference, dropped when all its messages are
                        // done: until then no release (a duplicate among them, a discard)
                        // can free the slot while later messages still go into it.
                        c.arena.retain(slot);
                        *stored = Some(slot);
                        slot
                    }
                    None => {
                        // No room to keep it: treat the message as lost on the wire, but
                        // record that it exists so it is requested like any other loss.
                        c.stats.arena_full += 1;
                        self.detector
                            .heartbeat(stream, epoch, seq.saturating_add(1));
                        return;
                    }
                },
            };
            c.arena.retain(slot);
            MsgRef { slot, offset, len }
        };
        let mut out = std::mem::take(&mut self.out);
        let disposition = match via {
            Via::Multicast => {
                let outcome =
                    self.detector
                        .ingest(stream, epoch, Frame::point(seq, payload), &mut out);
                if outcome.new_gap.is_some()
                    && let Some(c) = self.channels.get_mut(channel)
                {
                    c.requester.new_gap(now, &self.spec.policy);
                }
                outcome.disposition
            }
            Via::Unicast => {
                match self
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
        if let Some(c) = self.channels.get_mut(channel) {
            if !accepted && payload.slot != MsgRef::CURRENT {
                c.arena.release(payload.slot);
            }
            if accepted && via == Via::Unicast {
                c.stats.recovered += 1;
                // Recovery is making progress: the re-request budget is whole again.
                c.requester.progress();
            }
        }
        self.deliver(channel, &mut out, datagram, recv_ns, emit);
        self.out = out;
    }

    /// Emits delivered messages, releasing their slots, then releases discards.
    fn deliver(
        &mut self,
        channel: usize,
        out: &mut Vec<Delivered<MsgRef>>,
        datagram: &[u8],
        recv_ns: u64,
        emit: &mut impl Emit,
    ) {
        let stream_id = self.stream_id(channel);
        if let Some(c) = self.channels.get_mut(channel) {
            for d in out.drain(..) {
                let m = d.payload;
                let found = if m.slot == MsgRef::CURRENT {
                    let (start, end) = (m.offset as usize, m.offset as usize + m.len as usize);
                    datagram.get(start..end).map(|b| (b, recv_ns))
                } else {
                    c.arena.get(m)
                };
                if let Some((payload, t)) = found {
                    emit.emit(&Event::Message {
                        stream: stream_id,
                        seq: d.first,
                        recv_ns: t,
                        snapshot: false,
                        payload,
                    });
                }
                if m.slot != MsgRef::CURRENT {
                    c.arena.release(m.slot);
                }
            }
        }
        self.release_discarded(channel);
    }

    fn release_discarded(&mut self, channel: usize) {
        if let Some(c) = self.channels.get_mut(channel) {
            let arena = &mut c.arena;
            self.detector.take_discarded(c.stream, |m| {
                if m.slot != MsgRef::CURRENT {
                    arena.release(m.slot);
                }
            });
        }
    }

    /// Emits a state event when the consumer-visible state changed.
    fn publish_state(&mut self, channel: usize, emit: &mut impl Emit) {
        let stream_id = self.stream_id(channel);
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        let state = self.detector.state(c.stream);
        let now = if state == StreamState::Synced && c.end_of_session {
            Published::Closed
        } else {
            published(state)
        };
        if now != c.published {
            c.published = now;
            emit.emit(&Event::State {
                stream: stream_id,
                state: now,
            });
        }
    }

    /// Decides what recovery to run for `channel` now; `force` plans even when no timer is
    /// due (an answer arrived: a partial one is followed at once by a request for the rest).
    fn drive(&mut self, now: u64, channel: usize, force: bool, emit: &mut impl Emit) {
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        if matches!(c.phase, Phase::Running { .. } | Phase::Wanted) {
            return;
        }
        if let Phase::Backoff { until } = c.phase {
            if now < until {
                return;
            }
            c.phase = Phase::Wanted;
            return;
        }
        let policy = self.spec.policy;
        match self.detector.state(c.stream) {
            StreamState::Unseen | StreamState::Synced => {
                c.requester.clear();
                return;
            }
            StreamState::ResetRequired => {
                c.requester.clear();
                if c.spec.snapshot.is_some() {
                    c.phase = Phase::Wanted;
                } else if self.spec.gap_policy == GapPolicy::Skip {
                    self.skip(channel, emit);
                }
                return;
            }
            StreamState::DirtySyncPending | StreamState::Recovering => {}
        }
        c.requester.gap_seen(now, &policy);
        // Planning walks the missing ranges: only when something is due, not per datagram.
        if !force && !c.requester.due(now, &policy) {
            return;
        }
        c.requester.expire(now);
        let snapshot = c.spec.snapshot.is_some();
        if snapshot && self.detector.missing_span(c.stream) > self.spec.max_replay {
            c.phase = Phase::Wanted;
            return;
        }
        let plan = if c.requester.has_servers() {
            let session = Session(c.session.unwrap_or_default().0);
            let (tx, stats) = (&mut self.tx, &mut c.stats);
            c.requester.plan(
                now,
                &policy,
                self.detector.missing(c.stream),
                |to, range| {
                    let count = range.len().min(u64::from(u16::MAX)) as u16;
                    let request = Request {
                        session,
                        sequence: range.from,
                        count,
                    };
                    if tx.len() < TX_QUEUE {
                        tx.push_back(Transmit {
                            channel,
                            to,
                            bytes: request.to_bytes(),
                            len: 20,
                        });
                        stats.requests += 1;
                    } else {
                        stats.requests_dropped += 1;
                    }
                },
            )
        } else {
            Plan::Exhausted
        };
        if plan == Plan::Exhausted {
            if snapshot {
                c.phase = Phase::Wanted;
            } else if self.spec.gap_policy == GapPolicy::Skip {
                self.skip(channel, emit);
            }
            // GapPolicy::Hold: the stream stays unsynced, and its state says so.
        }
    }

    /// Declares every missing range lost: a gap event each, then delivery resumes after it.
    fn skip(&mut self, channel: usize, emit: &mut impl Emit) {
        let stream_id = self.stream_id(channel);
        // Each pass removes the first missing range; the ring bounds the passes.
        for _ in 0..=self.spec.window {
            let Some(c) = self.channels.get_mut(channel) else {
                return;
            };
            let stream = c.stream;
            let state = self.detector.state(stream);
            let first = self.detector.missing(stream).next();
            let next = match (first, state) {
                (Some(range), _) => {
                    c.stats.gaps_lost += 1;
                    c.stats.messages_lost += range.len();
                    emit.emit(&Event::Gap {
                        stream: stream_id,
                        from: range.from,
                        to: range.to,
                    });
                    range.to.saturating_add(1)
                }
                (None, StreamState::ResetRequired) => {
                    // Latched with nothing known missing (a suspected restart): start
                    // afresh from what is buffered, or from the expected sequence.
                    self.detector.expected(stream).unwrap_or(0)
                }
                (None, _) => break,
            };
            let mut out = std::mem::take(&mut self.out);
            self.detector.resynchronize(stream, next, &mut out);
            self.deliver(channel, &mut out, &[], 0, emit);
            self.out = out;
        }
        if let Some(c) = self.channels.get_mut(channel) {
            c.requester.clear();
        }
        self.publish_state(channel, emit);
    }

    /// Runs whatever became due by `now`.
    pub fn handle_timeout(&mut self, now: u64, emit: &mut impl Emit) {
        for channel in 0..self.channels.len() {
            if let Some(c) = self.channels.get_mut(channel)
                && let Phase::Running { since, .. } = c.phase
                && now >= since.saturating_add(self.spec.snapshot_timeout_ns)
            {
                c.stats.snapshots_failed += 1;
                c.phase = Phase::Backoff {
                    until: now.saturating_add(self.spec.snapshot_retry_ns),
                };
            }
            self.drive(now, channel, false, emit);
            self.publish_state(channel, emit);
        }
    }

    /// The earliest time [`FeedSession::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        let policy = &self.spec.policy;
        self.channels
            .iter()
            .filter_map(|c| match c.phase {
                Phase::Running { since, .. } => {
                    Some(since.saturating_add(self.spec.snapshot_timeout_ns))
                }
                Phase::Backoff { until } => Some(until),
                Phase::Wanted => None,
                Phase::Idle => match self.detector.state(c.stream) {
                    StreamState::DirtySyncPending | StreamState::Recovering => {
                        c.requester.next_deadline(policy)
                    }
                    _ => None,
                },
            })
            .min()
    }

    /// The next request to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.tx.pop_front()
    }

    /// A snapshot to start, if a channel wants one. The stream is latched unsynced and
    /// keeps live messages from now on; consumers are told a snapshot begins.
    pub fn poll_snapshot(&mut self, now: u64, emit: &mut impl Emit) -> Option<SnapshotTask> {
        let channel = self
            .channels
            .iter()
            .position(|c| c.phase == Phase::Wanted && c.spec.snapshot.is_some())?;
        let id = self.next_snapshot_id;
        self.next_snapshot_id += 1;
        let stream_id = self.stream_id(channel);
        let c = self.channels.get_mut(channel)?;
        c.phase = Phase::Running { id, since: now };
        c.stats.snapshots_started += 1;
        c.requester.clear();
        let task = SnapshotTask {
            id,
            channel,
            spec: c.spec.snapshot.clone()?,
            session: c.session.unwrap_or_default(),
        };
        self.detector.begin_resync(c.stream);
        self.release_discarded(channel);
        if let Some(c) = self.channels.get_mut(channel) {
            c.published = Published::ResetRequired;
        }
        emit.emit(&Event::State {
            stream: stream_id,
            state: Published::ResetRequired,
        });
        emit.emit(&Event::SnapshotBegin { stream: stream_id });
        Some(task)
    }

    /// Feeds back what the snapshot fetch `id` produced.
    pub fn on_snapshot(
        &mut self,
        now: u64,
        id: u64,
        event: SnapshotEvent<'_>,
        emit: &mut impl Emit,
    ) {
        let Some(channel) = self
            .channels
            .iter()
            .position(|c| matches!(c.phase, Phase::Running { id: running, .. } if running == id))
        else {
            return;
        };
        let stream_id = self.stream_id(channel);
        match event {
            SnapshotEvent::Message(payload) => {
                if let Some(c) = self.channels.get_mut(channel) {
                    c.stats.snapshot_messages += 1;
                }
                emit.emit(&Event::Message {
                    stream: stream_id,
                    seq: 0,
                    recv_ns: 0,
                    snapshot: true,
                    payload,
                });
            }
            SnapshotEvent::End { next } => {
                emit.emit(&Event::SnapshotEnd {
                    stream: stream_id,
                    next,
                });
                let Some(c) = self.channels.get_mut(channel) else {
                    return;
                };
                c.phase = Phase::Idle;
                c.stats.snapshots_done += 1;
                c.requester.progress();
                let stream = c.stream;
                let mut out = std::mem::take(&mut self.out);
                self.detector.resynchronize(stream, next, &mut out);
                self.deliver(channel, &mut out, &[], 0, emit);
                self.out = out;
                self.publish_state(channel, emit);
                self.drive(now, channel, true, emit);
            }
            SnapshotEvent::Failed => {
                if let Some(c) = self.channels.get_mut(channel) {
                    c.stats.snapshots_failed += 1;
                    c.phase = Phase::Backoff {
                        until: now.saturating_add(self.spec.snapshot_retry_ns),
                    };
                }
            }
        }
    }

    /// End of input (replay): nothing more will arrive, so with [`GapPolicy::Skip`] every
    /// remaining gap is declared lost and what is buffered after it is delivered.
    pub fn finish(&mut self, now: u64, emit: &mut impl Emit) {
        self.handle_timeout(now, emit);
        if self.spec.gap_policy != GapPolicy::Skip {
            return;
        }
        for channel in 0..self.channels.len() {
            self.skip(channel, emit);
        }
    }
}

/// The consumer-visible form of a sequencer state.
pub fn published(state: StreamState) -> Published {
    match state {
        StreamState::Unseen => Published::Unseen,
        StreamState::Synced => Published::Synced,
        StreamState::DirtySyncPending => Published::DirtySyncPending,
        StreamState::Recovering => Published::Recovering,
        StreamState::ResetRequired => Published::ResetRequired,
    }
}
