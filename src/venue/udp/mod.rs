//! The MoldUDP64 and IEX-TP venue (sans-IO): one stream per channel, re-request recovery,
//! snapshot fallback, and delivery to consumers, behind the [venue contract](crate::venue).
//!
//! | file | concept |
//! | --- | --- |
//! | this one | routing datagrams to channels; the venue's public surface and [`Venue`] impl |
//! | `spec` | what a venue is built from, and the mapping from the configuration |
//! | `wire` | the two wire formats behind one view; request encoding per wire |
//! | `channel` | one channel's data path: epoch, sequencer, arena, consumers |
//! | `epoch` | session changes, confirmed before they are adopted |
//! | `recovery` | recovery decisions, and the re-request planner |
//! | `snapshot` | the snapshot phase |
//! | `payload` | where a message's bytes are while it is held |
//! | `lines` | redundant lines: first copy, skipped messages, lag, line down |
//!
//! Each channel has one [`Endpoint::Multicast`] per line, then one [`Endpoint::Unicast`]
//! its requests go out from and its answers come back to, in channel order.

mod channel;
mod epoch;
mod gaps;
mod lines;
mod payload;
pub mod recovery;
mod snapshot;
mod spec;
pub mod wire;

use std::collections::VecDeque;

use channel::{Arrival, Channel, ChannelTimer, Core, Logged};
use epoch::Epochs;
use gaps::GapClock;
use lines::Lines;
use payload::PacketArena;
use recovery::Requester;
use snapshot::Phase;

pub use spec::{
    ChannelSpec, FeedSpec, JetStreamServers, LineSpec, Resume, SnapshotSpec, spec_from_config,
    spec_from_config_with,
};
pub use wire::{SessionKey, Wire};

use crate::sequencer::{Baseline, Detector, Overflow, SeqRange, StreamConfig, StreamState};
use crate::time::{Mono, Wall};
use crate::venue::{
    ChannelStats, Emit, Endpoint, EndpointId, FetchId, FetchReply, IoRequest, LostReason, Notice,
    Notices, Received, StreamInfo, TimerTable, Transmit, Venue, Via,
};

/// Notices queued at most.
const NOTICES: usize = 64;

/// Which channel an endpoint feeds, and how.
#[derive(Debug, Clone, Copy)]
struct Route {
    channel: usize,
    via: Via,
    /// The line, for [`Via::Multicast`].
    line: usize,
}

/// A MoldUDP64 or IEX-TP venue. See the [module documentation](self).
pub struct UdpVenue {
    name: String,
    spec: FeedSpec,
    channels: Vec<Channel>,
    core: Core,
    endpoints: Vec<Endpoint>,
    routes: Vec<Route>,
}

impl UdpVenue {
    /// Gives each channel the resume cursor `saved` has for its consumer stream id.
    pub fn set_resume(&mut self, saved: &dyn Fn(u16) -> Option<Resume>) {
        for channel in &mut self.channels {
            channel.spec.resume = saved(channel.id);
        }
    }

    /// Builds the venue and allocates every buffer it will use.
    pub fn new(name: &str, spec: FeedSpec) -> Self {
        let mut detector = Detector::new();
        let baseline = match spec.start_from {
            Some(n) => Baseline::Expect(n),
            None => Baseline::AdoptFirst,
        };
        let config = StreamConfig::point(spec.window)
            .with_baseline(baseline)
            .with_max_buffered(spec.max_buffered.min(spec.window).max(1))
            .with_reset_threshold(spec.reset_threshold);
        let mut endpoints = Vec::new();
        let mut routes = Vec::new();
        let mut channels = Vec::with_capacity(spec.channels.len());
        for (index, c) in spec.channels.iter().enumerate() {
            for (number, line) in c.lines.iter().enumerate() {
                routes.push(Route {
                    channel: index,
                    via: Via::Multicast,
                    line: number,
                });
                endpoints.push(Endpoint::Multicast {
                    group: line.group,
                    interface: line.interface,
                    source: line.source,
                    rcvbuf: line.rcvbuf,
                    stream: index,
                });
            }
            let unicast = EndpointId(u16::try_from(endpoints.len()).unwrap_or(u16::MAX));
            routes.push(Route {
                channel: index,
                via: Via::Unicast,
                line: 0,
            });
            let mut policy = spec.policy;
            if c.lines.len() > 1 {
                // A gap one line shows may be filled by another within the window: no
                // request before it has passed.
                policy.reorder_delay_ns = policy.reorder_delay_ns.max(spec.arbitration_window_ns);
            }
            endpoints.push(Endpoint::Unicast {
                interface: c
                    .lines
                    .first()
                    .map_or(std::net::Ipv4Addr::LOCALHOST, |l| l.interface),
                stream: index,
            });
            channels.push(Channel {
                spec: c.clone(),
                index,
                id: spec
                    .stream_base
                    .saturating_add(u16::try_from(index).unwrap_or(u16::MAX)),
                // With a snapshot, what the window cannot hold is resynchronised from it;
                // with only a re-request server, it is asked for once the window reaches
                // it; with neither, nothing can bring it back.
                stream: detector.add_stream(config.with_overflow(
                    if c.rerequest.is_empty() || c.snapshot.is_some() {
                        Overflow::Latch
                    } else {
                        Overflow::Drop
                    },
                )),
                epochs: Epochs::new(c.session, spec.session_confirm, spec.max_datagram),
                requester: Requester::new(c.rerequest.clone()).with_peer_stores(&c.peer_stores),
                phase: Phase::Idle,
                published: StreamState::Unseen,
                arena: PacketArena::new(spec.arena_datagrams, spec.max_datagram),
                stats: ChannelStats::default(),
                timers: TimerTable::new(),
                lines: Lines::new(c.lines.len()),
                ripening: GapClock::default(),
                ripe_to: 0,
                timer_pass: false,
                policy,
                unicast,
                logged: Logged::default(),
                gaps: GapClock::default(),
                given_up: false,
            });
        }
        let core = Core {
            detector,
            // A fill can release itself and a whole window of buffered frames at once.
            out: Vec::with_capacity(spec.window.min(1 << 20) + 1),
            tx: VecDeque::with_capacity(channel::TX_QUEUE),
            io: VecDeque::with_capacity(spec.channels.len().max(1)),
            notices: Notices::new(NOTICES),
            next_fetch: 1,
        };
        Self {
            name: name.to_string(),
            spec,
            channels,
            core,
            endpoints,
            routes,
        }
    }

    /// The spec the venue was built from.
    pub fn spec(&self) -> &FeedSpec {
        &self.spec
    }

    /// The wire format.
    pub fn wire(&self) -> Wire {
        self.spec.wire
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
        self.spec
            .stream_base
            .saturating_add(u16::try_from(channel).unwrap_or(u16::MAX))
    }

    /// The channel's sequencing state.
    pub fn state(&self, channel: usize) -> StreamState {
        self.channels
            .get(channel)
            .map_or(StreamState::Unseen, |c| self.core.detector.state(c.stream))
    }

    /// The channel's state as its consumers last saw it: the sequencing state, or
    /// [`StreamState::Closed`] once its session ended with nothing missing.
    pub fn published_state(&self, channel: usize) -> StreamState {
        self.channels
            .get(channel)
            .map_or(StreamState::Unseen, |c| c.published)
    }

    /// The channel's current session, once known.
    pub fn session(&self, channel: usize) -> Option<SessionKey> {
        self.channels.get(channel).and_then(|c| c.epochs.session)
    }

    /// The missing ranges of a channel, in order.
    pub fn missing(&self, channel: usize) -> Vec<SeqRange> {
        self.channels
            .get(channel)
            .map(|c| self.core.detector.missing(c.stream).collect())
            .unwrap_or_default()
    }

    /// The channel's counters, with the sequencer's.
    pub fn stats(&self, channel: usize) -> ChannelStats {
        self.channels
            .get(channel)
            .map_or_else(ChannelStats::default, |c| c.stats(&self.core))
    }

    /// The endpoint datagrams of `channel` arrive on by `via` (its first line for the
    /// feed).
    pub fn endpoint_of(&self, channel: usize, via: Via) -> Option<EndpointId> {
        let at = self
            .routes
            .iter()
            .position(|r| r.channel == channel && r.via == via)?;
        u16::try_from(at).ok().map(EndpointId)
    }

    /// Handles one datagram of `channel` that arrived at `now`, received at `recv`, by
    /// `via`: the same as [`Venue::handle_datagrams`] on the channel's endpoint.
    pub fn on_datagram(
        &mut self,
        now: Mono,
        channel: usize,
        datagram: &[u8],
        recv: Wall,
        via: Via,
        emit: &mut impl Emit,
    ) {
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        let a = Arrival {
            now,
            bytes: datagram,
            recv,
            via,
            line: 0,
        };
        c.on_decoded(
            &mut self.core,
            &self.spec,
            a,
            wire::decode(self.spec.wire, datagram),
            emit,
        );
    }

    /// The endpoint of line `line` of `channel`.
    pub fn endpoint_of_line(&self, channel: usize, line: usize) -> Option<EndpointId> {
        let at = self
            .routes
            .iter()
            .position(|r| r.channel == channel && r.via == Via::Multicast && r.line == line)?;
        u16::try_from(at).ok().map(EndpointId)
    }

    /// Handles datagrams of `channel` that arrived together by `via`: the same as
    /// [`Venue::handle_datagrams`] on the channel's endpoint for `via`.
    pub fn on_datagrams(
        &mut self,
        now: Mono,
        channel: usize,
        datagrams: &[Received<'_>],
        via: Via,
        emit: &mut impl Emit,
    ) {
        if let Some(endpoint) = self.endpoint_of(channel, via) {
            self.handle_datagrams(now, endpoint, datagrams, emit);
        }
    }
}

impl Venue for UdpVenue {
    fn name(&self) -> &str {
        &self.name
    }

    fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Decodes the datagrams four at a time (their message blocks checked together: see
    /// [`wire::decode4`]) and hands each to its channel, in order.
    #[inline]
    fn handle_datagrams<E: Emit>(
        &mut self,
        now: Mono,
        endpoint: EndpointId,
        datagrams: &[Received<'_>],
        emit: &mut E,
    ) {
        let Some(&Route { channel, via, line }) = self.routes.get(usize::from(endpoint.0)) else {
            return;
        };
        let Some(c) = self.channels.get_mut(channel) else {
            return;
        };
        let (core, spec) = (&mut self.core, &self.spec);
        if via == Via::Multicast && c.lines.redundant() {
            // A copy another line brought first is dropped from its header; the rest go
            // in one at a time.
            for d in datagrams {
                if !c.copy_held(core, spec, now, line, d.bytes) {
                    let a = Arrival {
                        now,
                        bytes: d.bytes,
                        recv: d.recv,
                        via,
                        line,
                    };
                    c.on_decoded(core, spec, a, wire::decode(spec.wire, d.bytes), emit);
                }
            }
            return;
        }
        fn arrival<'a>(now: Mono, via: Via, line: usize, d: &Received<'a>) -> Arrival<'a> {
            Arrival {
                now,
                bytes: d.bytes,
                recv: d.recv,
                via,
                line,
            }
        }
        let mut fours = datagrams.chunks_exact(4);
        for four in &mut fours {
            let [a, b, cc, d] = four else { continue };
            let [da, db, dc, dd] = wire::decode4(spec.wire, [a.bytes, b.bytes, cc.bytes, d.bytes]);
            c.on_decoded(core, spec, arrival(now, via, line, a), da, emit);
            c.on_decoded(core, spec, arrival(now, via, line, b), db, emit);
            c.on_decoded(core, spec, arrival(now, via, line, cc), dc, emit);
            c.on_decoded(core, spec, arrival(now, via, line, d), dd, emit);
        }
        for d in fours.remainder() {
            c.on_decoded(
                core,
                spec,
                arrival(now, via, line, d),
                wire::decode(spec.wire, d.bytes),
                emit,
            );
        }
    }

    fn handle_fetch<E: Emit>(
        &mut self,
        now: Mono,
        id: FetchId,
        reply: FetchReply<'_>,
        emit: &mut E,
    ) {
        let (core, spec) = (&mut self.core, &self.spec);
        for c in &mut self.channels {
            if c.on_fetch(core, spec, now, id, reply, emit) {
                return;
            }
        }
    }

    fn handle_timeout<E: Emit>(&mut self, now: Mono, emit: &mut E) {
        let (core, spec) = (&mut self.core, &self.spec);
        for c in &mut self.channels {
            if c.timers.is_due(ChannelTimer::LineWatch, now) {
                let next = c
                    .lines
                    .watch(now, spec.line_down_ns, c.index, &mut core.notices);
                c.timers.set_or_stop(ChannelTimer::LineWatch, next);
            }
            c.snapshot_timers(core, spec, now, emit);
            c.timer_pass = true;
            c.drive(core, spec, now, false, emit);
            c.timer_pass = false;
            c.publish_state(core, emit);
        }
    }

    /// End of input: nothing more will arrive, so with
    /// [`GapPolicy::Skip`](crate::venue::GapPolicy::Skip) every remaining gap is declared
    /// lost and what is buffered after it is delivered.
    fn handle_end<E: Emit>(&mut self, now: Mono, emit: &mut E) {
        self.handle_timeout(now, emit);
        if self.spec.gap_policy != crate::venue::GapPolicy::Skip {
            return;
        }
        let (core, spec) = (&mut self.core, &self.spec);
        for c in &mut self.channels {
            c.skip(core, spec, now, u64::MAX, LostReason::EndOfInput, emit);
            c.report_lost(core, now, true);
        }
    }

    fn poll_timeout(&self) -> Option<Mono> {
        self.channels.iter().filter_map(|c| c.timers.next()).min()
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.core.tx.pop_front()
    }

    fn poll_io(&mut self) -> Option<IoRequest> {
        self.core.io.pop_front()
    }

    fn poll_notice(&mut self) -> Option<Notice> {
        self.core.notices.pop()
    }

    fn stream_count(&self) -> usize {
        self.channels.len()
    }

    fn lines(&self, index: usize) -> &[crate::venue::LineStats] {
        self.channels.get(index).map_or(&[], |c| c.lines.stats())
    }

    fn stream(&self, index: usize) -> Option<StreamInfo<'_>> {
        let c = self.channels.get(index)?;
        Some(StreamInfo {
            name: &c.spec.name,
            id: c.id,
            state: c.published,
            stats: c.stats(&self.core),
        })
    }
}

/// The timers armed on each channel, for diagnosis: `(channel, timer name, deadline)`.
impl UdpVenue {
    /// Every armed timer: the channel, the timer's name and its deadline.
    pub fn armed_timers(&self) -> Vec<(usize, &'static str, Mono)> {
        let name = |t: ChannelTimer| match t {
            ChannelTimer::Recovery => "recovery",
            ChannelTimer::SnapshotDeadline => "snapshot deadline",
            ChannelTimer::SnapshotRetry => "snapshot retry",
            ChannelTimer::GapDeadline => "gap deadline",
            ChannelTimer::SessionDrain => "session drain",
            ChannelTimer::LostReport => "lost report",
            ChannelTimer::LineWatch => "line watch",
        };
        self.channels
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.timers.armed().map(move |(t, at)| (i, name(t), at)))
            .collect()
    }
}
