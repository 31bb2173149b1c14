//! The sync state machine of one symbol: buffering before the snapshot, lining the snapshot up
//! with the buffered events, and continuity checks on every event after it.

use crate::publish::{Event, StreamState};
use crate::sequencer::{Delivered, Detector, Disposition, StreamId};
use crate::venue::Emit;

use super::pending::{Pending, Stored};
use super::rules::{self, Fit, Ids, Link};
use super::{Market, SymbolStats};

/// The bit of connection slot `link` (slots beyond 8 share the last bit).
fn bit(link: usize) -> u8 {
    1u8 << link.min(7)
}

/// Where a delivered event's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The frame being handled now.
    Current,
    /// The symbol's pending storage, by handle.
    Pending(u64),
}

/// The detector shared by every symbol of a venue, with its reusable output.
pub(crate) struct Sequencer {
    pub(crate) market: Market,
    pub(crate) detector: Detector<Slot>,
    pub(crate) out: Vec<Delivered<Slot>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Buffering,
    Live,
}

/// What a snapshot body did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// StreamState; the symbol is live (or buffering again if a buffered event broke the chain).
    Yes,
    /// It did not line up with the buffered events: fetch again.
    Stale,
    /// The symbol was not waiting for one.
    Discarded,
}

/// Delivered final update ids remembered per symbol, to recognise another connection's copy
/// of an event already delivered.
const RECENT: usize = 16;

/// One symbol's sync state.
pub(crate) struct Book {
    stream: StreamId,
    stream_id: u16,
    /// The detector epoch: a new one for each snapshot, so nothing of the last survives it.
    epoch: u64,
    phase: Phase,
    /// `lastUpdateId` of the applied snapshot.
    snapshot: Option<u64>,
    /// Events in a row that brought nothing new (stale or duplicate), live or buffering.
    idle_run: usize,
    max_pending: usize,
    pending: Pending,
    published: StreamState,
    /// Live, with no connection open since the last one went: the next event must link to
    /// what was delivered (or the symbol resyncs).
    relinking: bool,
    /// Bit `k`: an event of connection slot `k` continued, or repeated, the delivered chain.
    linked: u8,
    /// The final ids of the latest deliveries, newest at `recent_next - 1`.
    recent: [u64; RECENT],
    recent_len: usize,
    recent_next: usize,
    /// The ids of the latest delivery.
    head: Option<Ids>,
    /// Per connection slot, the final id of its latest event dropped for running ahead of
    /// the delivered chain (0: none): the slot has linked once that event is delivered.
    ahead: [u64; 8],
    pub(crate) stats: SymbolStats,
}

impl Book {
    /// A symbol on `stream` (consumer id `stream_id`) with its pending storage.
    pub(crate) fn new(stream: StreamId, stream_id: u16, max_pending: usize, bytes: usize) -> Self {
        Self {
            stream,
            stream_id,
            epoch: 0,
            phase: Phase::Waiting,
            snapshot: None,
            idle_run: 0,
            max_pending,
            pending: Pending::new(max_pending, bytes),
            published: StreamState::Unseen,
            relinking: false,
            linked: 0,
            recent: [0; RECENT],
            recent_len: 0,
            recent_next: 0,
            head: None,
            ahead: [0; 8],
            stats: SymbolStats::default(),
        }
    }

    /// True while the symbol waits for an event that links to what was delivered before its
    /// connection was lost.
    pub(crate) fn is_relinking(&self) -> bool {
        self.relinking
    }

    /// True when connection slot `link` has shown it carries this symbol's chain, or the
    /// symbol is not live (nothing to link to).
    pub(crate) fn has_linked(&self, link: usize) -> bool {
        self.phase != Phase::Live || self.linked & bit(link) != 0
    }

    /// Connection slot `link` is gone: what it proved no longer counts.
    pub(crate) fn link_down(&mut self, link: usize) {
        self.linked &= !bit(link);
        if let Some(slot) = self.ahead.get_mut(link.min(7)) {
            *slot = 0;
        }
    }

    /// Every connection is gone. With `hold`, a live symbol keeps its state and waits for
    /// the next connection's events to link to it, and the events buffered for a snapshot
    /// are kept (update ids belong to the symbol, not the connection: the next event is
    /// checked against them as any other); without, the symbol loses sync at once.
    pub(crate) fn links_lost(&mut self, seq: &mut Sequencer, hold: bool, emit: &mut impl Emit) {
        if !hold {
            self.lose_sync(seq, emit);
            self.pending.clear();
        } else if self.phase == Phase::Live {
            self.relinking = true;
        }
    }

    /// The wait for a link ran out: the symbol resyncs. True if it was waiting.
    pub(crate) fn relink_expired(&mut self, seq: &mut Sequencer, emit: &mut impl Emit) -> bool {
        if !self.relinking {
            return false;
        }
        self.stats.relinks_expired += 1;
        self.lose_sync(seq, emit);
        true
    }

    /// An event of connection slot `link` linked to the delivered chain.
    fn proved(&mut self, link: usize) {
        self.linked |= bit(link);
        if self.relinking {
            self.relinking = false;
            self.stats.relinked += 1;
        }
    }

    fn remember(&mut self, first: u64, last: u64) {
        self.head = Some(Ids {
            first,
            last,
            prev: None,
        });
        for (k, ahead) in self.ahead.iter_mut().enumerate() {
            if *ahead == 0 || *ahead > last {
                continue;
            }
            if *ahead == last {
                self.linked |= bit(k);
            }
            *ahead = 0;
        }
        if let Some(slot) = self.recent.get_mut(self.recent_next) {
            *slot = last;
        }
        self.recent_next = (self.recent_next + 1) % RECENT;
        self.recent_len = (self.recent_len + 1).min(RECENT);
    }

    /// True when `last` ends one of the latest deliveries: an event repeating it belongs
    /// to the same chain.
    fn delivered_recently(&self, last: u64) -> bool {
        self.recent.iter().take(self.recent_len).any(|u| *u == last)
    }

    /// The symbol's state.
    pub(crate) fn state(&self) -> StreamState {
        match self.phase {
            Phase::Waiting => StreamState::Unseen,
            Phase::Buffering => StreamState::ResetRequired,
            Phase::Live => StreamState::Synced,
        }
    }

    /// The state consumers were last told.
    pub(crate) fn published(&self) -> StreamState {
        self.published
    }

    /// True while events wait for a snapshot.
    pub(crate) fn needs_snapshot(&self) -> bool {
        self.phase == Phase::Buffering
    }

    /// The counters, with the gauges filled in.
    pub(crate) fn stats(&self) -> SymbolStats {
        let mut stats = self.stats;
        stats.buffered = self.pending.len();
        stats.buffered_hwm = self.pending.hwm();
        stats
    }

    fn publish(&mut self, state: StreamState, emit: &mut impl Emit) {
        if self.published != state {
            self.published = state;
            emit.emit(&Event::State {
                stream: self.stream_id,
                state,
            });
        }
    }

    /// Handles one depth event of this symbol, its bytes borrowed from the frame.
    pub(crate) fn on_event(
        &mut self,
        seq: &mut Sequencer,
        link: usize,
        ids: Ids,
        recv_ns: u64,
        bytes: &[u8],
        emit: &mut impl Emit,
    ) {
        self.stats.events += 1;
        match self.phase {
            Phase::Waiting | Phase::Buffering => self.buffer(ids, recv_ns, bytes),
            Phase::Live => self.live(seq, link, ids, recv_ns, bytes, emit),
        }
    }

    /// Keeps an event until the snapshot, as the continuation of the buffered chain.
    fn buffer(&mut self, ids: Ids, recv_ns: u64, bytes: &[u8]) {
        if let Some(newest) = self.pending.newest() {
            match rules::link(newest, ids) {
                Link::Continues => {}
                Link::Old => {
                    self.stats.duplicates += 1;
                    self.idle_run += 1;
                    if self.idle_run <= self.max_pending {
                        return;
                    }
                    // Stuck behind an event whose ids lie far ahead: start again from here.
                    self.stats.breaks += 1;
                    self.stats.overflowed += self.pending.len() as u64;
                    self.pending.clear();
                }
                Link::Break => {
                    // Missed events: nothing buffered so far can be bridged to what follows.
                    self.stats.breaks += 1;
                    self.stats.overflowed += self.pending.len() as u64;
                    self.pending.clear();
                }
            }
        }
        self.idle_run = 0;
        match self.pending.push(ids, recv_ns, bytes) {
            Stored::Kept { evicted } => self.stats.overflowed += evicted as u64,
            Stored::TooLarge { evicted } => self.stats.overflowed += evicted as u64 + 1,
        }
        self.phase = if self.pending.is_empty() {
            Phase::Waiting
        } else {
            Phase::Buffering
        };
    }

    /// Offers an event of a live symbol to the detector.
    fn live(
        &mut self,
        seq: &mut Sequencer,
        link: usize,
        ids: Ids,
        recv_ns: u64,
        bytes: &[u8],
        emit: &mut impl Emit,
    ) {
        if let Some(head) = self.head
            && self.linked & !bit(link) != 0
            && rules::link(head, ids) == Link::Break
        {
            // Another connection carries this symbol and has not delivered what lies
            // between: it is on its way there. This copy is dropped; that one is delivered.
            self.stats.ahead += 1;
            self.linked &= !bit(link);
            if let Some(slot) = self.ahead.get_mut(link.min(7)) {
                *slot = ids.last;
            }
            return;
        }
        let frame = rules::frame(ids, Slot::Current);
        let outcome = seq
            .detector
            .ingest(self.stream, self.epoch, frame, &mut seq.out);
        match outcome.disposition {
            Disposition::Processed | Disposition::PartialOverlap => {
                self.deliver(seq, Some((recv_ns, bytes)), emit);
                self.proved(link);
            }
            Disposition::Duplicate => {
                // Another connection's copy of a delivered event proves its chain; an older
                // event proves nothing, and is only counted.
                if self.delivered_recently(ids.last) {
                    self.proved(link);
                }
                if self.count_old(seq.market, ids) {
                    self.stats.breaks += 1;
                    self.lose_sync(seq, emit);
                    self.buffer(ids, recv_ns, bytes);
                }
            }
            Disposition::Invalid => self.stats.malformed += 1,
            _ => {
                // A gap (buffered or beyond the window) or a chain that went backwards.
                if self.relinking {
                    self.stats.relinks_failed += 1;
                }
                self.stats.breaks += 1;
                self.lose_sync(seq, emit);
                self.buffer(ids, recv_ns, bytes);
            }
        }
        seq.out.clear();
    }

    /// Counts a live event that brought nothing new. True when the symbol looks stuck: more
    /// such events in a row than the buffer holds. Binance's stream is ordered, so that many
    /// never happen on a healthy connection; they do after a snapshot (or an event) whose ids
    /// lie far ahead of the stream, which only a new snapshot can undo.
    fn count_old(&mut self, market: Market, ids: Ids) -> bool {
        let stale = self
            .snapshot
            .is_some_and(|l| rules::below_snapshot(market, ids.last, l));
        if stale {
            self.stats.dropped_stale += 1;
            self.stats.stale_after_snapshot += 1;
        } else {
            self.stats.duplicates += 1;
        }
        self.idle_run += 1;
        self.idle_run > self.max_pending
    }

    /// Publishes what the detector delivered, reading each payload where it lives.
    fn deliver(
        &mut self,
        seq: &mut Sequencer,
        current: Option<(u64, &[u8])>,
        emit: &mut impl Emit,
    ) {
        for d in seq.out.drain(..) {
            let found = match d.payload {
                Slot::Current => current,
                Slot::Pending(handle) => self.pending.get(handle),
            };
            if let Some((recv_ns, payload)) = found {
                emit.emit(&Event::Range {
                    stream: self.stream_id,
                    first: d.first,
                    last: d.last,
                    recv_ns,
                    payload,
                });
                self.remember(d.first, d.last);
                self.stats.applied += 1;
                self.idle_run = 0;
            }
        }
    }

    /// Sync is lost (a break, a disconnect): consumers are told, the detector waits for the
    /// next snapshot, and the symbol buffers again from the next event.
    pub(crate) fn lose_sync(&mut self, seq: &mut Sequencer, emit: &mut impl Emit) {
        if self.phase == Phase::Live {
            self.stats.resyncs += 1;
        }
        seq.detector.begin_resync(self.stream);
        seq.detector.take_discarded(self.stream, |_| {});
        self.phase = Phase::Waiting;
        self.snapshot = None;
        self.relinking = false;
        self.linked = 0;
        self.recent_len = 0;
        self.head = None;
        self.ahead = [0; 8];
        self.publish(StreamState::ResetRequired, emit);
    }

    /// A snapshot of `l` with this `body` arrived at `now`.
    pub(crate) fn on_snapshot(
        &mut self,
        seq: &mut Sequencer,
        now: u64,
        l: u64,
        body: &[u8],
        emit: &mut impl Emit,
    ) -> Applied {
        if self.phase != Phase::Buffering {
            self.stats.snapshots_discarded += 1;
            return Applied::Discarded;
        }
        if rules::fit(seq.market, l, self.pending.ids()) != Fit::Fits {
            self.stats.snapshots_stale += 1;
            return Applied::Stale;
        }
        let next = rules::resync_point(seq.market, l);
        emit.emit(&Event::SnapshotBegin {
            stream: self.stream_id,
        });
        emit.emit(&Event::Message {
            stream: self.stream_id,
            seq: l,
            recv_ns: now,
            snapshot: true,
            payload: body,
        });
        emit.emit(&Event::SnapshotEnd {
            stream: self.stream_id,
            next,
        });
        self.epoch = self.epoch.wrapping_add(1);
        seq.out.clear();
        seq.detector
            .resynchronize_epoch(self.stream, self.epoch, next, &mut seq.out);
        seq.out.clear();
        self.snapshot = Some(l);
        self.phase = Phase::Live;
        self.idle_run = 0;
        self.stats.snapshots_applied += 1;
        self.replay(seq, emit);
        if self.phase == Phase::Live {
            self.publish(StreamState::Synced, emit);
        }
        Applied::Yes
    }

    /// Offers the buffered events, oldest first, to the freshly seeded detector.
    fn replay(&mut self, seq: &mut Sequencer, emit: &mut impl Emit) {
        while let Some((handle, ids)) = self.pending.front() {
            let frame = rules::frame(ids, Slot::Pending(handle));
            let outcome = seq
                .detector
                .ingest(self.stream, self.epoch, frame, &mut seq.out);
            match outcome.disposition {
                Disposition::Processed | Disposition::PartialOverlap => {
                    self.deliver(seq, None, emit);
                }
                Disposition::Duplicate => {
                    // Buffered before the snapshot: not "after" it, and never a reason to
                    // give up on it.
                    if self
                        .snapshot
                        .is_some_and(|l| rules::below_snapshot(seq.market, ids.last, l))
                    {
                        self.stats.dropped_stale += 1;
                    } else {
                        self.stats.duplicates += 1;
                    }
                }
                Disposition::Invalid => self.stats.malformed += 1,
                _ => {
                    // Cannot happen for a chain that fits the snapshot; if it does, this event
                    // and those after it stay buffered for the next snapshot.
                    seq.out.clear();
                    self.stats.breaks += 1;
                    self.lose_sync(seq, emit);
                    self.phase = Phase::Buffering;
                    return;
                }
            }
            seq.out.clear();
            self.pending.pop_front();
        }
    }
}
