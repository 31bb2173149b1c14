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

use super::wire::SessionKey;

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
    /// holding up to `confirm - 1` datagrams of up to `max_datagram` bytes.
    pub(crate) fn new(confirm: u32, max_datagram: usize) -> Self {
        let confirm = confirm.max(1);
        let slots = (confirm - 1) as usize;
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
        if self.session != Some(session) {
            self.give_up();
            self.session = Some(session);
            self.retired = retired;
        }
        self.seen = self.seen.saturating_add(1);
        self.held.lowest = Some(self.held.lowest.map_or(seq, |l| l.min(seq)));
        let need = if self.retired {
            self.confirm.max(2)
        } else {
            self.confirm
        };
        if self.seen >= need {
            return Offer::Confirmed;
        }
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
        let mut c = Candidate::new(3, 8);
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
        let mut c = Candidate::new(2, 8);
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
        let mut c = Candidate::new(1, 8);
        assert_eq!(
            c.offer(key(b"NEXT000001"), false, 1, b"x", 1),
            Offer::Confirmed
        );
        let mut c = Candidate::new(3, 4);
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
        let mut c = Candidate::new(1, 8);
        let s = key(b"OLD0000001");
        assert_eq!(c.offer(s, true, 5, b"late", 1), Offer::Counted);
        assert_eq!(c.offer(s, true, 6, b"again", 2), Offer::Confirmed);
    }
}
