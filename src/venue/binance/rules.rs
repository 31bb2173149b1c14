//! The venue's documented rules, per market: request weights and paths, which events are
//! stale, which event may follow a snapshot, and which may follow another event.
//!
//! Each rule below names the step of the venue's procedure it implements: Binance's "How to
//! manage a local order book correctly", one page per market
//! (<https://developers.binance.com/docs/binance-spot-api-docs/web-socket-streams>, section
//! "How to manage a local order book correctly";
//! <https://developers.binance.com/docs/derivatives/usds-margined-futures/websocket-market-streams/How-to-manage-a-local-order-book-correctly>
//! and the same page under `coin-margined-futures`). The steps, in short:
//!
//! | step | spot | USD-M and COIN-M futures | here |
//! | --- | --- | --- | --- |
//! | open the stream, buffer its events | yes | yes | the symbol's pending buffer |
//! | fetch a depth snapshot (its `lastUpdateId` is `L`) | yes | yes | [`Market::depth_path`], [`Market::depth_weight`] |
//! | a snapshot older than the first buffered event is fetched again | `L < U` of the first | the same | [`fit`]: [`Fit::TooOld`] |
//! | drop buffered events the snapshot already holds | `u <= L` | `u < L` | [`below_snapshot`] |
//! | the first event applied spans the snapshot | `U <= L + 1 <= u` | `U <= L <= u` | [`straddles`] |
//! | each next event continues the previous one, else start over from the snapshot | `U == previous u + 1` | `pu == previous u` | [`link`] |
//! | quantities are absolute; 0 removes a level, and removing an absent level is normal | yes | yes | left to consumers: payloads go out untouched |

use crate::sequencer::Frame;

use super::Market;
use crate::protocol::binance::DepthEvent;

impl Market {
    /// The REST path of the depth snapshot.
    pub const fn depth_path(self) -> &'static str {
        match self {
            Self::Spot => "/api/v3/depth",
            Self::Usdm => "/fapi/v1/depth",
            Self::Coinm => "/dapi/v1/depth",
        }
    }

    /// The request weight of a depth snapshot of `limit` levels, or `None` when the market
    /// does not offer that limit.
    ///
    /// Spot: 1-100: 5, 101-500: 25, 501-1000: 50, 1001-5000: 250. Futures (limits 5, 10, 20,
    /// 50, 100, 500, 1000): up to 50: 2, 100: 5, 500: 10, 1000: 20.
    pub const fn depth_weight(self, limit: u32) -> Option<u32> {
        match self {
            Self::Spot => match limit {
                1..=100 => Some(5),
                101..=500 => Some(25),
                501..=1000 => Some(50),
                1001..=5000 => Some(250),
                _ => None,
            },
            Self::Usdm | Self::Coinm => match limit {
                5 | 10 | 20 | 50 => Some(2),
                100 => Some(5),
                500 => Some(10),
                1000 => Some(20),
                _ => None,
            },
        }
    }

    /// True when events carry `pu` and continuity is `pu == previous u` (futures).
    pub const fn is_linked(self) -> bool {
        matches!(self, Self::Usdm | Self::Coinm)
    }
}

/// The update ids of one depth event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Ids {
    /// `U`.
    pub first: u64,
    /// `u`.
    pub last: u64,
    /// `pu` on futures; always `None` on spot.
    pub prev: Option<u64>,
}

/// The ids of `event` under the market's rules, or `None` when they contradict themselves:
/// `u < U`, `u == u64::MAX`, a futures event without `pu` or with `pu >= U`.
pub(crate) fn ids_of(market: Market, event: &DepthEvent<'_>) -> Option<Ids> {
    let (first, last) = (event.first_update_id, event.final_update_id);
    if last < first || last == u64::MAX {
        return None;
    }
    let prev = if market.is_linked() {
        let prev = event.prev_final_update_id?;
        if prev >= first {
            return None;
        }
        Some(prev)
    } else {
        None
    };
    Some(Ids { first, last, prev })
}

/// The sequencer frame of an event: a range on spot, a linked range on futures.
pub(crate) fn frame<P>(ids: Ids, payload: P) -> Frame<P> {
    match ids.prev {
        Some(prev) => Frame::linked(ids.first, ids.last, prev, payload),
        None => Frame::range(ids.first, ids.last, payload),
    }
}

/// The sequence a snapshot of `l` resynchronises the stream to: `L + 1` on spot (the first
/// event must cover it), `L` on futures.
pub(crate) const fn resync_point(market: Market, l: u64) -> u64 {
    if market.is_linked() {
        l
    } else {
        l.saturating_add(1)
    }
}

/// True when an event ending at `last` is older than a snapshot of `l` and is dropped:
/// `u <= L` on spot, `u < L` on futures (the procedure's "drop any event" step, which the
/// futures pages word as `u < lastUpdateId`).
pub(crate) const fn below_snapshot(market: Market, last: u64, l: u64) -> bool {
    if market.is_linked() {
        last < l
    } else {
        last <= l
    }
}

/// True when `ids` may be the first event applied on a snapshot of `l`: `U <= L + 1 <= u` on
/// spot, `U <= L <= u` on futures (the procedure's "first processed event" step).
pub(crate) const fn straddles(market: Market, l: u64, ids: Ids) -> bool {
    let point = resync_point(market, l);
    ids.first <= point && point <= ids.last
}

/// How an event relates to the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// It continues the previous event.
    Continues,
    /// It ends at or before the previous event's end: nothing new.
    Old,
    /// Events are missing between them.
    Break,
}

/// Whether `next` continues `prev`: `U == previous u + 1` on spot (an overlap that reaches
/// past `previous u` continues too), `pu == previous u` on futures (the procedure's "while
/// listening to the stream" step; a break means starting over from a new snapshot).
pub(crate) fn link(prev: Ids, next: Ids) -> Link {
    if next.last <= prev.last {
        return Link::Old;
    }
    let continues = match next.prev {
        Some(pu) => pu == prev.last,
        None => next.first <= prev.last.saturating_add(1),
    };
    if continues {
        Link::Continues
    } else {
        Link::Break
    }
}

/// How a snapshot lines up with the buffered events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The first event newer than the snapshot straddles it, or every buffered event is older
    /// than the snapshot (the next live event is then checked).
    Fits,
    /// `L` is below the first buffered event's `U`, or nothing is buffered: fetch again.
    TooOld,
    /// The first event newer than the snapshot does not straddle it: fetch again.
    NoStraddle,
}

/// Checks a snapshot of `l` against the buffered events, oldest first.
pub(crate) fn fit(market: Market, l: u64, mut buffered: impl Iterator<Item = Ids>) -> Fit {
    let Some(first) = buffered.next() else {
        return Fit::TooOld;
    };
    if l < first.first {
        return Fit::TooOld;
    }
    for ids in std::iter::once(first).chain(buffered) {
        if below_snapshot(market, ids.last, l) {
            continue;
        }
        return if straddles(market, l, ids) {
            Fit::Fits
        } else {
            Fit::NoStraddle
        };
    }
    Fit::Fits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spot(first: u64, last: u64) -> Ids {
        Ids {
            first,
            last,
            prev: None,
        }
    }

    fn fut(first: u64, last: u64, prev: u64) -> Ids {
        Ids {
            first,
            last,
            prev: Some(prev),
        }
    }

    #[test]
    fn weights_and_paths() {
        assert_eq!(Market::Spot.depth_weight(100), Some(5));
        assert_eq!(Market::Spot.depth_weight(101), Some(25));
        assert_eq!(Market::Spot.depth_weight(1000), Some(50));
        assert_eq!(Market::Spot.depth_weight(5000), Some(250));
        assert_eq!(Market::Spot.depth_weight(5001), None);
        assert_eq!(Market::Spot.depth_weight(0), None);
        assert_eq!(Market::Usdm.depth_weight(50), Some(2));
        assert_eq!(Market::Coinm.depth_weight(100), Some(5));
        assert_eq!(Market::Usdm.depth_weight(500), Some(10));
        assert_eq!(Market::Coinm.depth_weight(1000), Some(20));
        assert_eq!(Market::Usdm.depth_weight(5000), None);
        assert_eq!(Market::Usdm.depth_weight(30), None);
        assert_eq!(Market::Coinm.depth_path(), "/dapi/v1/depth");
    }

    #[test]
    fn spot_snapshot_rules() {
        let m = Market::Spot;
        assert!(below_snapshot(m, 10, 10));
        assert!(!below_snapshot(m, 11, 10));
        assert!(straddles(m, 10, spot(11, 12)));
        assert!(straddles(m, 10, spot(5, 11)));
        assert!(!straddles(m, 10, spot(12, 13)));
        let buffered = [spot(5, 8), spot(9, 12), spot(13, 14)];
        assert_eq!(fit(m, 10, buffered.into_iter()), Fit::Fits);
        assert_eq!(fit(m, 4, buffered.into_iter()), Fit::TooOld);
        assert_eq!(fit(m, 20, buffered.into_iter()), Fit::Fits);
        assert_eq!(
            fit(m, 10, [spot(5, 8), spot(12, 14)].into_iter()),
            Fit::NoStraddle
        );
        assert_eq!(fit(m, 10, std::iter::empty()), Fit::TooOld);
    }

    #[test]
    fn futures_snapshot_rules() {
        let m = Market::Usdm;
        assert!(below_snapshot(m, 9, 10));
        assert!(!below_snapshot(m, 10, 10));
        assert!(straddles(m, 10, fut(8, 10, 3)));
        assert!(!straddles(m, 10, fut(11, 15, 3)));
        let buffered = [fut(5, 8, 1), fut(20, 30, 8), fut(41, 50, 30)];
        assert_eq!(fit(m, 25, buffered.into_iter()), Fit::Fits);
        assert_eq!(fit(m, 35, buffered.into_iter()), Fit::NoStraddle);
        assert_eq!(fit(m, 4, buffered.into_iter()), Fit::TooOld);
    }

    #[test]
    fn links() {
        assert_eq!(link(spot(1, 5), spot(6, 9)), Link::Continues);
        assert_eq!(link(spot(1, 5), spot(4, 9)), Link::Continues);
        assert_eq!(link(spot(1, 5), spot(7, 9)), Link::Break);
        assert_eq!(link(spot(1, 5), spot(2, 5)), Link::Old);
        assert_eq!(link(fut(10, 20, 1), fut(30, 40, 20)), Link::Continues);
        // Futures ids are not contiguous: `U == prev u + 1` means nothing there.
        assert_eq!(link(fut(10, 20, 1), fut(21, 40, 19)), Link::Break);
        assert_eq!(link(fut(10, 20, 1), fut(15, 20, 9)), Link::Old);
    }
}
