//! Snapshot scheduling: which symbol is fetched next, and when, within the concurrency limit,
//! the request-weight budget and the pauses that 429, 418 and 403 answers impose on the venue.
//!
//! The budget is kept against the larger of two counts: the weight of this venue's own
//! requests in the last minute, and the venue's own count for the IP
//! (`X-MBX-USED-WEIGHT-1M` in its last answer, plus what was sent since), which includes
//! every other client on the IP: another venue of this daemon, or another process.

use std::collections::VecDeque;

use super::spec::SnapshotBackoff;

/// One minute in nanoseconds: the window of the weight budget.
pub(crate) const MINUTE_NS: u64 = 60_000_000_000;

/// Longest pause a `Retry-After` can impose (Binance bans last 2 minutes to 3 days).
const MAX_HOLD_NS: u64 = 3 * 24 * 3600 * 1_000_000_000;

/// Answers with a permanent error (a 4xx other than 429, 418, 403 and 408, such as an
/// invalid symbol) since the symbol's last snapshot, after which it is no longer requested.
pub(crate) const MAX_PERMANENT_ERRORS: u32 = 3;

/// The fetch state of one symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetch {
    /// No snapshot wanted.
    Idle,
    /// Wanted since `since`; not to be requested before `not_before`.
    Wanted { since: u64, not_before: u64 },
    /// Requested at `since`.
    Inflight { since: u64 },
    /// Given up after [`MAX_PERMANENT_ERRORS`] permanent errors: never requested again.
    GivenUp,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    fetch: Fetch,
    /// Failures in a row, for the retry delay.
    failures: u32,
    /// Permanent errors since the last snapshot received.
    permanent: u32,
}

/// Decides when each symbol's snapshot is requested.
#[derive(Debug)]
pub(crate) struct Fetcher {
    slots: Vec<Slot>,
    /// `(sent at, weight)` of the requests of the last minute, oldest first.
    ledger: VecDeque<(u64, u32)>,
    budget: u32,
    weight: u32,
    max_inflight: usize,
    inflight: usize,
    /// No request before this (429 and 418).
    hold_until: u64,
    /// 429 answers in a row.
    rate_limited: u32,
    /// The venue's own count of the IP's weight: `(seen at, weight)` from the last answer
    /// that carried it.
    venue_count: Option<(u64, u32)>,
    backoff: SnapshotBackoff,
    timeout_ns: u64,
}

impl Fetcher {
    /// A scheduler for `symbols` symbols whose requests weigh `weight` each.
    pub(crate) fn new(
        symbols: usize,
        weight: u32,
        budget: u32,
        max_inflight: usize,
        backoff: SnapshotBackoff,
        timeout_ns: u64,
    ) -> Self {
        let idle = Slot {
            fetch: Fetch::Idle,
            failures: 0,
            permanent: 0,
        };
        let per_minute = (budget / weight.max(1)) as usize + 2;
        Self {
            slots: vec![idle; symbols],
            ledger: VecDeque::with_capacity(per_minute.min(4096)),
            budget,
            weight,
            max_inflight: max_inflight.max(1),
            inflight: 0,
            hold_until: 0,
            rate_limited: 0,
            venue_count: None,
            backoff,
            timeout_ns,
        }
    }

    /// Weight spent in the minute before `now`: the larger of this venue's own requests
    /// and the venue's count for the IP (while that count is less than a minute old).
    pub(crate) fn used(&self, now: u64) -> u32 {
        self.own(now).max(self.counted(now))
    }

    /// Weight of this venue's own requests in the minute before `now`.
    fn own(&self, now: u64) -> u32 {
        self.ledger
            .iter()
            .filter(|(t, _)| t.saturating_add(MINUTE_NS) > now)
            .fold(0u32, |sum, (_, w)| sum.saturating_add(*w))
    }

    /// The venue's count for the IP, plus what this venue sent since it was seen; 0 once it
    /// is a minute old.
    fn counted(&self, now: u64) -> u32 {
        self.venue_count
            .filter(|(at, _)| at.saturating_add(MINUTE_NS) > now)
            .map_or(0, |(at, used)| {
                self.ledger
                    .iter()
                    .filter(|(t, _)| *t > at)
                    .fold(used, |sum, (_, w)| sum.saturating_add(*w))
            })
    }

    /// The venue's own count of the IP's weight, `used` at `now` (its
    /// `X-MBX-USED-WEIGHT-1M`). The latest answer counts: the venue's minute may have
    /// turned since an earlier one.
    pub(crate) fn observe_used_weight(&mut self, used: u32, now: u64) {
        self.venue_count = Some((now, used));
    }

    /// Whether one more request on top of `used` fits the budget.
    fn fits(&self, used: u32) -> bool {
        used == 0 || used.saturating_add(self.weight) <= self.budget
    }

    /// The earliest time from `now` on when one more request fits the budget, in one walk
    /// of the ledger (this runs on the rx thread's deadline poll).
    fn weight_free_at(&self, now: u64) -> u64 {
        if self.fits(self.used(now)) {
            return now;
        }
        // The venue's count holds until it is a minute old (what was sent after it ages
        // out later still), and is gone after: from then on only the ledger counts.
        let start = match self.venue_count {
            Some((at, _)) if !self.fits(self.counted(now)) => at.saturating_add(MINUTE_NS),
            _ => now,
        };
        let mut used = self.own(start);
        if self.fits(used) {
            return start;
        }
        for &(t, w) in &self.ledger {
            let expires = t.saturating_add(MINUTE_NS);
            if expires <= start {
                continue;
            }
            used = used.saturating_sub(w);
            if self.fits(used) {
                return expires;
            }
        }
        start
    }

    /// Marks whether `symbol` needs a snapshot. A request in flight is left alone.
    pub(crate) fn set_needed(&mut self, symbol: usize, needed: bool, now: u64) {
        let Some(slot) = self.slots.get_mut(symbol) else {
            return;
        };
        slot.fetch = match (slot.fetch, needed) {
            (Fetch::Idle, true) => Fetch::Wanted {
                since: now,
                not_before: now,
            },
            (Fetch::Wanted { .. }, false) => Fetch::Idle,
            (fetch, _) => fetch,
        };
    }

    /// Starts the next request due at `now`, if any: the symbol that has wanted one longest.
    pub(crate) fn start(&mut self, now: u64) -> Option<usize> {
        if self.inflight >= self.max_inflight
            || now < self.hold_until
            || self.weight_free_at(now) > now
        {
            return None;
        }
        let (symbol, _) = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s.fetch {
                Fetch::Wanted { since, not_before } if not_before <= now => Some((i, since)),
                _ => None,
            })
            .min_by_key(|&(i, since)| (since, i))?;
        let slot = self.slots.get_mut(symbol)?;
        slot.fetch = Fetch::Inflight { since: now };
        self.inflight += 1;
        while self
            .ledger
            .front()
            .is_some_and(|(t, _)| t.saturating_add(MINUTE_NS) <= now)
        {
            self.ledger.pop_front();
        }
        self.ledger.push_back((now, self.weight));
        Some(symbol)
    }

    /// An answer for `symbol` arrived: its request, if one was in flight, is over.
    pub(crate) fn answered(&mut self, symbol: usize) {
        if let Some(slot) = self.slots.get_mut(symbol)
            && let Fetch::Inflight { .. } = slot.fetch
        {
            slot.fetch = Fetch::Idle;
            self.inflight = self.inflight.saturating_sub(1);
        }
    }

    /// A snapshot body was received: failure counts start again.
    pub(crate) fn succeeded(&mut self, symbol: usize) {
        if let Some(slot) = self.slots.get_mut(symbol) {
            slot.failures = 0;
            slot.permanent = 0;
        }
        self.rate_limited = 0;
    }

    /// The request of `symbol` got a permanent error at `now` (an invalid symbol, say): it
    /// backs off like any failure, and after [`MAX_PERMANENT_ERRORS`] of them it is given up.
    /// Returns whether it was given up now.
    pub(crate) fn refused_for_good(&mut self, symbol: usize, needed: bool, now: u64) -> bool {
        let Some(slot) = self.slots.get_mut(symbol) else {
            return false;
        };
        slot.permanent = slot.permanent.saturating_add(1);
        if slot.permanent >= MAX_PERMANENT_ERRORS {
            slot.fetch = Fetch::GivenUp;
            return true;
        }
        self.failed(symbol, needed, now);
        false
    }

    /// Whether `symbol`'s snapshot is no longer requested.
    pub(crate) fn given_up(&self, symbol: usize) -> bool {
        self.slots
            .get(symbol)
            .is_some_and(|s| s.fetch == Fetch::GivenUp)
    }

    /// The request of `symbol` failed at `now`: retry after a doubling delay, if still needed.
    pub(crate) fn failed(&mut self, symbol: usize, needed: bool, now: u64) {
        let b = self.backoff;
        let Some(slot) = self.slots.get_mut(symbol) else {
            return;
        };
        if slot.fetch == Fetch::GivenUp {
            return;
        }
        let shift = slot.failures.min(32);
        slot.failures = slot.failures.saturating_add(1);
        let delay = b
            .retry_initial_ns
            .saturating_mul(1u64 << shift)
            .min(b.retry_max_ns.max(b.retry_initial_ns));
        slot.fetch = if needed {
            Fetch::Wanted {
                since: now,
                not_before: now.saturating_add(delay),
            }
        } else {
            Fetch::Idle
        };
    }

    /// A 429 or 403 (`banned == false`) or 418 answer at `now`: the whole venue pauses for
    /// the `Retry-After` or the configured pause, whichever is longer (a 403 is the venue's
    /// firewall refusing the IP for too many requests, as a 429 is its rate limit).
    pub(crate) fn refused(&mut self, retry_after_secs: Option<u64>, banned: bool, now: u64) {
        let b = self.backoff;
        let told = retry_after_secs.map_or(0, |s| s.saturating_mul(1_000_000_000));
        let own = if banned {
            b.ban_ns
        } else {
            let shift = self.rate_limited.min(32);
            self.rate_limited = self.rate_limited.saturating_add(1);
            b.rate_limit_ns
                .saturating_mul(1u64 << shift)
                .min(b.ban_ns.max(b.rate_limit_ns))
        };
        let pause = told.max(own).min(MAX_HOLD_NS);
        self.hold_until = self.hold_until.max(now.saturating_add(pause));
    }

    /// Requests in flight for longer than the timeout at `now` fail and back off like any
    /// failure; `f` gets each symbol.
    pub(crate) fn expire(&mut self, now: u64, mut f: impl FnMut(usize)) {
        for symbol in 0..self.slots.len() {
            if let Some(slot) = self.slots.get(symbol)
                && let Fetch::Inflight { since } = slot.fetch
                && now >= since.saturating_add(self.timeout_ns)
            {
                self.answered(symbol);
                self.failed(symbol, true, now);
                f(symbol);
            }
        }
    }

    /// The earliest time something is due: a request timing out, or a wanted request
    /// becoming possible.
    pub(crate) fn next_deadline(&self, now: u64) -> Option<u64> {
        let timeout = self
            .slots
            .iter()
            .filter_map(|s| match s.fetch {
                Fetch::Inflight { since } => Some(since.saturating_add(self.timeout_ns)),
                _ => None,
            })
            .min();
        let wanted = self
            .slots
            .iter()
            .filter_map(|s| match s.fetch {
                Fetch::Wanted { not_before, .. } => Some(not_before),
                _ => None,
            })
            .min()
            .filter(|_| self.inflight < self.max_inflight)
            .map(|t| t.max(self.hold_until).max(self.weight_free_at(now)));
        match (timeout, wanted) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
