//! What a consumer lost while its queue was full, per stream.
//!
//! The producer records every event it drops here and reports it later as
//! one [`Event::Overrun`] marker per stream. Memory is fixed at
//! construction: one slot per stream and a queue of at most one entry per
//! stream, so a consumer that stays behind forever costs nothing more.

use std::collections::VecDeque;

use crate::publish::event::Event;

/// Loss on one stream since its last marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loss {
    /// Lowest sequence lost; `u64::MAX` while none was.
    from: u64,
    /// Highest sequence lost; 0 while none was.
    to: u64,
    /// Events of any kind lost; 0 when nothing is pending.
    events: u64,
}

impl Loss {
    const NONE: Self = Self {
        from: u64::MAX,
        to: 0,
        events: 0,
    };
}

/// Per-stream loss with the streams awaiting a marker, in the order of
/// their first loss.
#[derive(Debug)]
pub(crate) struct LossLedger {
    losses: Box<[Loss]>,
    pending: VecDeque<u16>,
}

impl LossLedger {
    /// A ledger for streams `0..streams` (at most `u16::MAX + 1`).
    pub(crate) fn new(streams: usize) -> Self {
        let streams = streams.min(usize::from(u16::MAX) + 1);
        Self {
            losses: vec![Loss::NONE; streams].into_boxed_slice(),
            pending: VecDeque::with_capacity(streams),
        }
    }

    /// Number of streams the ledger tracks.
    pub(crate) fn streams(&self) -> usize {
        self.losses.len()
    }

    /// True when the ledger tracks `stream`.
    pub(crate) fn knows(&self, stream: u16) -> bool {
        usize::from(stream) < self.losses.len()
    }

    /// Number of streams with a marker to write.
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Records that `event` was dropped; false (and nothing recorded) for an
    /// unknown stream.
    ///
    /// A dropped [`Event::Overrun`] hands its range and count on to the
    /// marker that replaces it.
    pub(crate) fn record(&mut self, event: &Event<'_>) -> bool {
        let (low, high, count) = match *event {
            Event::Overrun {
                from, to, events, ..
            } => (from, to, events.max(1)),
            Event::Range { first, last, .. } => (first.min(last), first.max(last), 1),
            // A snapshot message's `seq` is not one of the feed's sequences.
            Event::Message {
                seq,
                snapshot: false,
                ..
            } => (seq, seq, 1),
            _ => (u64::MAX, 0, 1),
        };
        self.record_span(event.stream(), low, high, count)
    }

    /// Records that `count` events carrying sequences `low..=high` were
    /// dropped (a run of messages); false for an unknown stream.
    pub(crate) fn record_span(&mut self, stream: u16, low: u64, high: u64, count: u64) -> bool {
        let Some(loss) = self.losses.get_mut(usize::from(stream)) else {
            return false;
        };
        if loss.events == 0 {
            self.pending.push_back(stream);
        }
        if low <= high {
            loss.from = loss.from.min(low);
            loss.to = loss.to.max(high);
        }
        loss.events = loss.events.saturating_add(count);
        true
    }

    /// The marker for the `index`-th pending stream (0 is the oldest loss),
    /// without clearing it.
    pub(crate) fn marker(&self, index: usize) -> Option<Event<'static>> {
        let stream = *self.pending.get(index)?;
        let loss = self.losses.get(usize::from(stream))?;
        Some(Event::Overrun {
            stream,
            from: loss.from,
            to: loss.to,
            events: loss.events,
        })
    }

    /// Clears the `count` oldest pending streams once their markers are
    /// written.
    pub(crate) fn clear(&mut self, count: usize) {
        for _ in 0..count {
            let Some(stream) = self.pending.pop_front() else {
                return;
            };
            if let Some(loss) = self.losses.get_mut(usize::from(stream)) {
                *loss = Loss::NONE;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl LossLedger {
        fn take_marker(&mut self) -> Option<Event<'static>> {
            let marker = self.marker(0)?;
            self.clear(1);
            Some(marker)
        }
    }

    fn message(stream: u16, seq: u64) -> Event<'static> {
        Event::Message {
            stream,
            seq,
            recv_ns: 0,
            snapshot: false,
            payload: b"x",
        }
    }

    #[test]
    fn merges_per_stream_in_order_of_first_loss() {
        let mut ledger = LossLedger::new(3);
        assert!(ledger.record(&message(2, 10)));
        assert!(ledger.record(&message(0, 5)));
        assert!(ledger.record(&message(2, 11)));
        let range = Event::Range {
            stream: 2,
            first: 12,
            last: 15,
            recv_ns: 0,
            payload: b"",
        };
        assert!(ledger.record(&range));
        assert!(ledger.record(&Event::Heartbeat { stream: 0, next: 6 }));
        assert_eq!(ledger.pending(), 2);
        assert_eq!(
            ledger.take_marker(),
            Some(Event::Overrun {
                stream: 2,
                from: 10,
                to: 15,
                events: 3
            })
        );
        assert_eq!(
            ledger.take_marker(),
            Some(Event::Overrun {
                stream: 0,
                from: 5,
                to: 5,
                events: 2
            })
        );
        assert_eq!(ledger.take_marker(), None);
        assert_eq!(ledger.pending(), 0);
    }

    #[test]
    fn unsequenced_loss_has_an_empty_range() {
        let mut ledger = LossLedger::new(1);
        assert!(ledger.record(&Event::SnapshotBegin { stream: 0 }));
        assert_eq!(
            ledger.take_marker(),
            Some(Event::Overrun {
                stream: 0,
                from: u64::MAX,
                to: 0,
                events: 1
            })
        );
    }

    #[test]
    fn dropped_marker_passes_its_loss_on() {
        let mut ledger = LossLedger::new(1);
        assert!(ledger.record(&message(0, 3)));
        let marker = Event::Overrun {
            stream: 0,
            from: 1,
            to: 2,
            events: 4,
        };
        assert!(ledger.record(&marker));
        assert_eq!(
            ledger.take_marker(),
            Some(Event::Overrun {
                stream: 0,
                from: 1,
                to: 3,
                events: 5
            })
        );
    }

    #[test]
    fn unknown_stream_is_not_recorded() {
        let mut ledger = LossLedger::new(2);
        assert!(!ledger.knows(2));
        assert!(!ledger.record(&message(2, 1)));
        assert_eq!(ledger.pending(), 0);
        assert_eq!(ledger.streams(), 2);
    }
}
