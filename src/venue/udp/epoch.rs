//! Session changes are confirmed before they are adopted.
//!
//! A datagram whose session is not the channel's current one is either the venue starting
//! a new session (numbered from 1 again) or something that does not belong on the group: a
//! stray sender, a capture replayed onto it, a neighbouring feed on the same port.
//! Adopting every unknown session at once would let one stray datagram retire the real
//! session, whose datagrams would then be dropped as stale for good.
//!
//! So a change needs evidence. When the current session has announced its end, the next
//! session is adopted at once. Otherwise a [`Candidate`] counts the other session's
//! datagrams: `confirm` of them in a row, with none of the current session in between,
//! adopt it. The datagrams counted on the way are held, in memory fixed at start-up
//! (`confirm - 1` datagrams), and replayed once the change is adopted, so a real restart
//! loses nothing and is only held up by those datagrams. A datagram of the current session
//! ends the count and throws the held ones away.
//!
//! A session that was left behind is a candidate like any other, with two datagrams in a
//! row at least: if it was the real one all along (a burst of strays took its place), it
//! takes the channel back the same way. One that announced its end never does.
//!
//! A stream that takes its first datagram as its start starts, in a session adopted this
//! way, at the lowest sequence any counted datagram carried, so that one which could not
//! be held (longer than the buffers) is a gap to recover rather than skipped.
//!
//! # The tail of an ended session
//!
//! A session that announced its end may still miss its last messages: the end of session
//! reveals them, and the next session often starts at once. Adopting it would throw the
//! open gap away (answers for the old session are then refused as stale). So while the
//! ended session's stream still has messages missing, the next session waits, *drained*:
//! its datagrams are held (up to [`DRAIN_HOLD`]; beyond that they are counted, and once it
//! is adopted they are missing from it and re-requested like any loss), answers for the
//! old session are still taken, and the next session is adopted as soon as the old one is
//! complete. If the tail is not recovered within the drain time (what one server's retry
//! budget takes, or the gap deadline under `gap_policy = "skip"`), or recovery gives up,
//! the tail is declared lost with a `gap` event first: consumers always see the old
//! session complete, or its gap, before the new one.

use super::channel::{Arrival, Channel, ChannelTimer, Core};
use super::spec::FeedSpec;
use super::wire::{self, SessionKey};
use crate::publish::{Event, StreamState};
use crate::time::Mono;
use crate::venue::{Emit, EpochLabel, GapPolicy, LostReason, Notice, Via};

/// Datagrams of the next session held while an ended session's tail is recovered.
pub(super) const DRAIN_HOLD: usize = 32;

/// Sessions a channel remembers having left behind.
const RETIRED_SESSIONS: usize = 4;

/// Strays are reported at most this often per channel.
const STRAYS_NOTICE_EVERY_NS: u64 = 10_000_000_000;

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

/// A channel's sessions: the current one, those left behind, the one being counted.
#[derive(Debug)]
pub(super) struct Epochs {
    /// The current session, once known.
    pub(super) session: Option<SessionKey>,
    retired: [Option<Retired>; RETIRED_SESSIONS],
    /// Another session being counted before it is adopted.
    candidate: Candidate,
    /// The detector's epoch of the current session.
    pub(super) epoch: u64,
    /// The current session announced its end.
    pub(super) end_of_session: bool,
    /// The next session is waiting for the ended one's tail until then.
    pub(super) drain_until: Option<Mono>,
    /// A datagram of the current session has been seen on the feed.
    pub(super) seen_current: bool,
    /// Consumers were given the current session's [`Event::Epoch`].
    announced: bool,
}

impl Epochs {
    /// Whether another session is being counted (a datagram of the current one then
    /// matters: it ends the count).
    pub(super) fn counting(&self) -> bool {
        self.candidate.counting().is_some()
    }

    /// A channel's sessions, expecting `session` first (any when `None`).
    pub(super) fn new(session: Option<SessionKey>, confirm: u32, max_datagram: usize) -> Self {
        Self {
            session,
            retired: [None; RETIRED_SESSIONS],
            candidate: Candidate::new(confirm, DRAIN_HOLD, max_datagram),
            epoch: 0,
            end_of_session: false,
            drain_until: None,
            seen_current: false,
            announced: false,
        }
    }
}

impl Channel {
    /// Gives up the session being counted: its datagrams are dropped, and counted.
    fn give_up_candidate(&mut self) {
        if let Some(given_up) = self.epochs.candidate.give_up() {
            if given_up.retired {
                self.stats.stale_session += given_up.datagrams;
            } else {
                self.stats.unconfirmed_session += given_up.datagrams;
            }
        }
    }

    /// Reports strays dropped since the last report, at most every
    /// [`STRAYS_NOTICE_EVERY_NS`].
    fn report_strays(&mut self, core: &mut Core, stream: usize, now: Mono) {
        let total = self.stats.unconfirmed_session;
        let due = self
            .logged
            .strays_at
            .is_none_or(|t| now.nanos_since(t) >= STRAYS_NOTICE_EVERY_NS);
        if total > self.logged.strays && due {
            core.notices.push(Notice::StraysDropped {
                stream,
                dropped: total - self.logged.strays,
                total,
            });
            self.logged.strays = total;
            self.logged.strays_at = Some(now);
        }
    }

    /// Resolves the epoch of a datagram of `session` carrying `seq`; `None` when it is not
    /// to be handled now (a session left behind, or another session not yet confirmed).
    pub(super) fn resolve_epoch(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        a: Arrival<'_>,
        session: SessionKey,
        seq: u64,
        emit: &mut impl Emit,
    ) -> Option<u64> {
        let current = self.epochs.session;
        if current == Some(session) {
            if a.via == Via::Multicast {
                if !self.epochs.seen_current && self.spec.resume.is_some() {
                    // The configured session, first seen: a cursor of it applies now.
                    self.resume(core, spec, session);
                }
                self.epochs.seen_current = true;
            }
            self.announce(spec, session, emit);
            if a.via == Via::Multicast
                && self.epochs.candidate.counting().is_some()
                && self.epochs.drain_until.is_none()
            {
                // The current session is alive on the feed: whatever was being counted
                // was not a restart. (An answer to an old request proves nothing.)
                self.give_up_candidate();
                self.report_strays(core, self.index, a.now);
            }
            return Some(self.epochs.epoch);
        }
        let retired = self
            .epochs
            .retired
            .iter()
            .flatten()
            .find(|r| r.session == session)
            .copied();
        if a.via == Via::Unicast || retired.is_some_and(|r| r.ended) {
            // Answers to requests are no evidence of a live session, only the feed is; and
            // a session that announced its end is over.
            match retired {
                Some(_) => self.stats.stale_session += 1,
                None => self.stats.unconfirmed_session += 1,
            }
            self.report_strays(core, self.index, a.now);
            return None;
        }
        if self
            .epochs
            .candidate
            .counting()
            .is_some_and(|s| s != session)
        {
            self.give_up_candidate();
            self.report_strays(core, self.index, a.now);
        }
        let adopt = if current.is_some() && self.epochs.end_of_session && retired.is_none() {
            // The current session said it ended: the next one needs no confirming, only
            // the old one's tail must be settled first.
            if self.tail_open(core) {
                if !self.drain_due(spec, a.now) {
                    self.epochs
                        .candidate
                        .keep(session, seq, a.bytes, a.recv.as_nanos());
                    return None;
                }
                self.skip(core, spec, a.now, u64::MAX, LostReason::SessionEnded, emit);
            }
            true
        } else {
            self.epochs
                .candidate
                .offer(session, retired.is_some(), seq, a.bytes, a.recv.as_nanos())
                == Offer::Confirmed
        };
        if !adopt {
            return None;
        }
        self.adopt(core, spec, a.now, current, session, retired, emit);
        if self.epochs.session != Some(session) {
            return None;
        }
        self.announce(spec, session, emit);
        Some(self.epochs.epoch)
    }

    /// Gives consumers the current session's [`Event::Epoch`] once, before anything of the
    /// session reaches them: the feed's own name of the epoch (one allocation a session,
    /// for the printable form).
    fn announce(&mut self, spec: &FeedSpec, session: SessionKey, emit: &mut impl Emit) {
        if self.epochs.announced {
            return;
        }
        self.epochs.announced = true;
        let label = EpochLabel::new(&session.display(spec.wire));
        emit.emit(&Event::Epoch {
            stream: self.id,
            label: label.as_str().as_bytes(),
        });
    }

    /// Applies the channel's resume cursor, once: if it names `session`, the stream starts
    /// at its next sequence, and whatever the feed has moved on since is a gap, recovered
    /// like any other. True when it applied.
    fn resume(&mut self, core: &mut Core, spec: &FeedSpec, session: SessionKey) -> bool {
        let Some(cursor) = self.spec.resume.take() else {
            return false;
        };
        let label = EpochLabel::new(&session.display(spec.wire));
        let applied = cursor.label == label.as_str();
        core.notices.push(Notice::Resumed {
            stream: self.index,
            saved: EpochLabel::new(&cursor.label),
            feed: label,
            next: cursor.next,
            applied,
        });
        if !applied {
            return false;
        }
        let mut out = std::mem::take(&mut core.out);
        core.detector
            .resynchronize_epoch(self.stream, self.epochs.epoch, cursor.next, &mut out);
        core.out = out;
        true
    }

    /// True while the current session's stream misses messages it can still be given.
    fn tail_open(&self, core: &Core) -> bool {
        matches!(
            core.detector.state(self.stream),
            StreamState::DirtySyncPending | StreamState::Recovering
        )
    }

    /// Whether the drain of an ended session's tail is over at `now`, starting its clock
    /// at the first datagram of the next session.
    fn drain_due(&mut self, spec: &FeedSpec, now: Mono) -> bool {
        if !self.requester.has_servers() && self.spec.snapshot.is_none() {
            return true;
        }
        let until = *self.epochs.drain_until.get_or_insert_with(|| {
            let p = self.policy;
            let servers = self.spec.rerequest.len().max(1) as u64;
            let budget = p
                .request_timeout_ns
                .saturating_mul(u64::from(p.retry_budget).saturating_add(1))
                .saturating_mul(servers)
                .saturating_add(p.reorder_delay_ns);
            let budget = match spec.gap_policy {
                GapPolicy::Skip => budget.min(spec.gap_deadline_ns),
                GapPolicy::Hold => budget,
            };
            Mono::from_nanos(now.as_nanos().saturating_add(budget))
        });
        self.timers.set(ChannelTimer::SessionDrain, until);
        now >= until
    }

    /// Adopts the session waiting for an ended session's tail once the tail is complete,
    /// or declared lost at the drain's end.
    pub(super) fn drain_session(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        emit: &mut impl Emit,
    ) {
        if self.epochs.drain_until.is_none() {
            return;
        }
        let (Some(current), Some(session)) =
            (self.epochs.session, self.epochs.candidate.counting())
        else {
            // Nothing waits any more (the count was given up): no drain, no timer left due.
            self.epochs.drain_until = None;
            self.timers.stop(ChannelTimer::SessionDrain);
            return;
        };
        if self.tail_open(core) {
            if !self.drain_due(spec, now) {
                return;
            }
            self.skip(core, spec, now, u64::MAX, LostReason::SessionEnded, emit);
        }
        self.adopt(core, spec, now, Some(current), session, None, emit);
    }

    /// Makes `session` the channel's, then replays what was held of it.
    #[allow(clippy::too_many_arguments)]
    fn adopt(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        current: Option<SessionKey>,
        session: SessionKey,
        retired: Option<Retired>,
        emit: &mut impl Emit,
    ) {
        self.epochs.drain_until = None;
        self.timers.stop(ChannelTimer::SessionDrain);
        match current {
            // The first session: confirmed like any other, so that a stray sender
            // heard before the venue does not become the channel's session.
            None => self.epochs.session = Some(session),
            Some(current) => self.adopt_session(core, spec, current, session, retired, emit),
        }
        let held = self.epochs.candidate.take();
        let resumed = current.is_none() && self.resume(core, spec, session);
        // A stream that takes its first datagram as its start (a live start, not yet
        // started in this session) starts at the lowest the session sent while it was
        // being confirmed: a datagram that could not be held is then missing, not lost.
        let unstarted = current.is_none() || retired.is_some_and(|r| r.next.is_none());
        if let (true, false, None, Some(lowest)) =
            (unstarted, resumed, spec.start_from, held.lowest())
        {
            core.detector
                .heartbeat(self.stream, self.epochs.epoch, lowest);
        }
        // The datagrams that led up to the change (all of `session`), in the order they
        // came. They were counted as received when they arrived.
        for (bytes, recv_ns) in held.iter() {
            let decoded = wire::decode(spec.wire, bytes);
            let replayed = Arrival {
                now,
                bytes,
                recv: crate::time::Wall::from_nanos(recv_ns),
                via: Via::Multicast,
                // Held datagrams do not keep their line: no line is charged or credited.
                line: usize::MAX,
            };
            self.handle(core, spec, replayed, decoded, emit);
        }
        self.epochs.candidate.restore(held);
    }

    /// Makes `session` the channel's session in a new epoch, retiring `current`: a new
    /// session starts from 1, and a retired one taking the channel back resumes where its
    /// stream had got to (what it sent meanwhile is then missing, and recovered).
    fn adopt_session(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        current: SessionKey,
        session: SessionKey,
        retired: Option<Retired>,
        emit: &mut impl Emit,
    ) {
        let left = Retired {
            session: current,
            next: core.detector.expected(self.stream),
            ended: self.epochs.end_of_session,
        };
        // The one left now first, then the others, newest first, without the session
        // taking the channel (back).
        let mut retired_now = [None; RETIRED_SESSIONS];
        let kept = self
            .epochs
            .retired
            .iter()
            .flatten()
            .filter(|r| r.session != session);
        for (slot, r) in retired_now
            .iter_mut()
            .zip(std::iter::once(&left).chain(kept))
        {
            *slot = Some(*r);
        }
        self.epochs.retired = retired_now;
        if !self.epochs.seen_current && self.spec.session == Some(current) && retired.is_none() {
            core.notices.push(Notice::UnexpectedEpoch {
                stream: self.index,
                expected: EpochLabel::new(&current.display(spec.wire)),
                adopted: EpochLabel::new(&session.display(spec.wire)),
            });
        }
        self.epochs.session = Some(session);
        self.epochs.seen_current = false;
        self.epochs.announced = false;
        self.epochs.epoch += 1;
        self.stats.new_sessions += 1;
        self.requester.clear();
        self.requester.progress();
        self.gaps.clear();
        self.ripening.clear();
        self.ripe_to = 0;
        self.given_up = false;
        self.stop_snapshot();
        self.epochs.end_of_session = false;
        core.notices.push(Notice::EpochChanged {
            stream: self.index,
            label: EpochLabel::new(&session.display(spec.wire)),
            changes: self.stats.new_sessions,
        });
        self.logged.changes = self.stats.new_sessions;
        emit.emit(&Event::State {
            stream: self.id,
            state: StreamState::Unseen,
        });
        // A new session is numbered from 1; one taking the channel back resumes where its
        // stream had got to, or, had it not started, starts by the channel's baseline rule
        // with its first datagram of the new epoch.
        let start = match retired {
            None => Some(1),
            Some(r) => r.next,
        };
        if let Some(start) = start {
            let mut out = std::mem::take(&mut core.out);
            core.detector
                .resynchronize_epoch(self.stream, self.epochs.epoch, start, &mut out);
            core.out = out;
        }
        self.release_discarded(core);
        self.published = StreamState::Unseen;
    }
}

/// What [`Candidate::offer`] decided about a datagram of another session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Counted and held until the session is confirmed or given up.
    Held,
    /// Counted, but too long to hold (or, for a session taking the channel back with a
    /// count of 1, no room): if the session is adopted, its messages are missing and
    /// recovered like any other loss.
    Counted,
    /// This datagram completes the count: adopt the session, replay the held datagrams,
    /// then handle this one.
    Confirmed,
}

/// The other session being counted on one channel, and its held datagrams.
#[derive(Debug)]
pub(crate) struct Candidate {
    confirm: u32,
    session: Option<SessionKey>,
    /// Whether `session` is one the channel left behind.
    retired: bool,
    /// Datagrams of `session` in a row so far.
    seen: u32,
    held: Held,
}

/// A count that was given up: the session was not adopted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GivenUp {
    /// Its datagrams counted (held or not), now dropped.
    pub(crate) datagrams: u64,
    /// The session was one the channel had left behind.
    pub(crate) retired: bool,
}

/// Datagrams kept for replay: `slots` of `max_datagram` bytes each.
#[derive(Debug, Default)]
pub(crate) struct Held {
    bytes: Box<[u8]>,
    /// Length and receive time of each held datagram, oldest first.
    lens: Box<[(usize, u64)]>,
    count: usize,
    max_datagram: usize,
    /// The lowest sequence of every datagram counted (held or not, the confirming one
    /// included).
    lowest: Option<u64>,
}

impl Held {
    /// The lowest sequence the confirmed session's datagrams carried: where a stream
    /// that takes its first datagram as its start must start, so that none is lost.
    pub(crate) fn lowest(&self) -> Option<u64> {
        self.lowest
    }

    /// The held datagrams with their receive times, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.lens
            .iter()
            .take(self.count)
            .enumerate()
            .filter_map(|(i, &(len, recv_ns))| {
                let start = i.checked_mul(self.max_datagram)?;
                Some((self.bytes.get(start..start.checked_add(len)?)?, recv_ns))
            })
    }
}

impl Candidate {
    /// A candidate that adopts a session after `confirm` datagrams in a row (1: at once),
    /// holding up to `max(confirm - 1, hold)` datagrams of up to `max_datagram` bytes.
    pub(crate) fn new(confirm: u32, hold: usize, max_datagram: usize) -> Self {
        let confirm = confirm.max(1);
        let slots = ((confirm - 1) as usize).max(hold);
        Self {
            confirm,
            session: None,
            retired: false,
            seen: 0,
            held: Held {
                bytes: vec![0; slots.saturating_mul(max_datagram)].into_boxed_slice(),
                lens: vec![(0, 0); slots].into_boxed_slice(),
                count: 0,
                max_datagram,
                lowest: None,
            },
        }
    }

    /// The session being counted, if any.
    #[inline]
    pub(crate) fn counting(&self) -> Option<SessionKey> {
        self.session
    }

    /// Ends the count (a datagram of the current session arrived, or of yet another
    /// session) and throws the held datagrams away; what was counted, if anything.
    pub(crate) fn give_up(&mut self) -> Option<GivenUp> {
        let given_up = self.session.map(|_| GivenUp {
            datagrams: u64::from(self.seen),
            retired: self.retired,
        });
        self.session = None;
        self.seen = 0;
        self.held.count = 0;
        self.held.lowest = None;
        given_up
    }

    /// Counts a datagram of `session` (one the channel left behind when `retired`),
    /// another session than the current one, carrying sequence `seq`. A count of another
    /// session must have been given up first; this one then starts from 1. A session
    /// left behind needs at least two in a row: one late straggler never takes the
    /// channel back.
    pub(crate) fn offer(
        &mut self,
        session: SessionKey,
        retired: bool,
        seq: u64,
        datagram: &[u8],
        recv_ns: u64,
    ) -> Offer {
        self.count(session, retired, seq);
        let need = if self.retired {
            self.confirm.max(2)
        } else {
            self.confirm
        };
        if self.seen >= need {
            return Offer::Confirmed;
        }
        self.hold(datagram, recv_ns)
    }

    /// Counts and holds (if there is room) a datagram of `session`, the next session
    /// waiting for the current one's tail: never confirmed by the count.
    pub(crate) fn keep(
        &mut self,
        session: SessionKey,
        seq: u64,
        datagram: &[u8],
        recv_ns: u64,
    ) -> Offer {
        self.count(session, false, seq);
        self.hold(datagram, recv_ns)
    }

    /// Counts a datagram of `session` carrying `seq`, starting the count over for a
    /// session other than the one counted.
    fn count(&mut self, session: SessionKey, retired: bool, seq: u64) {
        if self.session != Some(session) {
            self.give_up();
            self.session = Some(session);
            self.retired = retired;
        }
        self.seen = self.seen.saturating_add(1);
        self.held.lowest = Some(self.held.lowest.map_or(seq, |l| l.min(seq)));
    }

    fn hold(&mut self, datagram: &[u8], recv_ns: u64) -> Offer {
        let i = self.held.count;
        let start = i.saturating_mul(self.held.max_datagram);
        let slot = self
            .held
            .bytes
            .get_mut(start..start.saturating_add(datagram.len()))
            .filter(|_| datagram.len() <= self.held.max_datagram);
        match (slot, self.held.lens.get_mut(i)) {
            (Some(slot), Some(len)) => {
                slot.copy_from_slice(datagram);
                *len = (datagram.len(), recv_ns);
                self.held.count += 1;
                Offer::Held
            }
            _ => Offer::Counted,
        }
    }

    /// Takes the held datagrams out for replay once the session is adopted, ending the
    /// count; hand them back with [`Candidate::restore`] (nothing is allocated).
    pub(crate) fn take(&mut self) -> Held {
        self.session = None;
        self.seen = 0;
        std::mem::take(&mut self.held)
    }

    /// Puts the buffers taken by [`Candidate::take`] back, empty.
    pub(crate) fn restore(&mut self, mut held: Held) {
        held.count = 0;
        held.lowest = None;
        self.held = held;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &[u8; 10]) -> SessionKey {
        SessionKey(*name)
    }

    #[test]
    fn confirms_after_a_run_and_holds_what_came_before() {
        let mut c = Candidate::new(3, 0, 8);
        let s = key(b"NEXT000001");
        assert_eq!(c.offer(s, false, 10, b"one", 1), Offer::Held);
        assert_eq!(c.offer(s, false, 11, b"two", 2), Offer::Held);
        assert_eq!(c.counting(), Some(s));
        assert_eq!(c.offer(s, false, 9, b"three", 3), Offer::Confirmed);
        let held = c.take();
        let got: Vec<(&[u8], u64)> = held.iter().collect();
        assert_eq!(got, [(&b"one"[..], 1), (&b"two"[..], 2)]);
        assert_eq!(
            held.lowest(),
            Some(9),
            "the confirming datagram's counts too"
        );
        assert_eq!(c.counting(), None);
        assert_eq!(c.give_up(), None, "adopted: nothing to give up");
        c.restore(held);
        // The buffers are back: the next candidate is held again.
        assert_eq!(c.offer(s, false, 12, b"four", 4), Offer::Held);
    }

    #[test]
    fn the_current_session_or_another_candidate_restarts_the_count() {
        let mut c = Candidate::new(2, 0, 8);
        let (a, b) = (key(b"STRAY00001"), key(b"STRAY00002"));
        assert_eq!(c.offer(a, true, 1, b"a", 1), Offer::Held);
        assert_eq!(
            c.give_up(),
            Some(GivenUp {
                datagrams: 1,
                retired: true
            })
        );
        assert_eq!(
            c.offer(a, false, 1, b"a", 2),
            Offer::Held,
            "counted from 1 again"
        );
        assert_eq!(
            c.offer(b, false, 1, b"b", 3),
            Offer::Held,
            "another session starts over"
        );
        assert_eq!(c.offer(b, false, 2, b"b", 4), Offer::Confirmed);
        assert_eq!(c.take().iter().count(), 1, "only b's datagram is held");
    }

    #[test]
    fn confirm_one_adopts_at_once_and_long_datagrams_are_counted_not_held() {
        let mut c = Candidate::new(1, 0, 8);
        assert_eq!(
            c.offer(key(b"NEXT000001"), false, 1, b"x", 1),
            Offer::Confirmed
        );
        let mut c = Candidate::new(3, 0, 4);
        let s = key(b"NEXT000001");
        assert_eq!(c.offer(s, false, 1, b"too long", 1), Offer::Counted);
        assert_eq!(c.offer(s, false, 2, b"ok", 2), Offer::Held);
        assert_eq!(c.offer(s, false, 3, b"go", 3), Offer::Confirmed);
        let held = c.take();
        assert_eq!(held.iter().collect::<Vec<_>>(), [(&b"ok"[..], 2)]);
        assert_eq!(held.lowest(), Some(1), "the datagram not held counts");
    }

    #[test]
    fn a_session_left_behind_needs_two_in_a_row_even_with_a_count_of_one() {
        let mut c = Candidate::new(1, 0, 8);
        let s = key(b"OLD0000001");
        assert_eq!(c.offer(s, true, 5, b"late", 1), Offer::Counted);
        assert_eq!(c.offer(s, true, 6, b"again", 2), Offer::Confirmed);
    }
}
