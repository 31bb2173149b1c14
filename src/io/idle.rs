//! The idle strategy of the receive duty cycle.
//!
//! Aeron's agent runner calls `do_work()` in a loop; `do_work()` returns how much it did (a
//! work count), and when that count is zero an idle strategy decides how to spend the gap
//! before the next cycle. Work is never delayed: after a productive cycle the next one starts
//! at once. gapless keeps those semantics and adds mio: the wait itself happens inside
//! `Poll::poll`, so the strategy is expressed as the poll timeout of the next cycle
//! ([`Idler::poll_timeout`]) plus what to do on the CPU after an empty one ([`Idler::idle`]).
//!
//! | strategy   | poll timeout after an empty cycle    | on the CPU after an empty cycle |
//! |------------|--------------------------------------|---------------------------------|
//! | busy-spin  | zero                                 | `spin_loop` hint                |
//! | yield      | zero                                 | `yield_now` after a few spins   |
//! | block      | next deadline, capped at 100 ms      | nothing                         |
//!
//! Busy-spin keeps one core at 100% for the lowest latency and belongs on an isolated, pinned
//! core. Yield shares the core with other threads at some latency cost. Block sleeps in the
//! kernel until a socket is readable or the next timer is due, for laptops and CI. No wait is
//! ever unbounded, so a shutdown flag is noticed within [`DEFAULT_MAX_BLOCK`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The longest a blocking wait lasts by default, so the loop checks its shutdown flag at
/// least this often.
pub const DEFAULT_MAX_BLOCK: Duration = Duration::from_millis(100);

/// How many consecutive empty cycles [`IdleStrategy::Yield`] spins before it yields.
pub const SPINS_BEFORE_YIELD: u32 = 10;

/// What the receive loop does when a cycle found no work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdleStrategy {
    /// Poll without waiting and hint the CPU that this is a spin loop (`busy-spin`).
    BusySpin,
    /// Poll without waiting; after a few empty cycles give the core away (`yield`).
    Yield,
    /// Wait in `poll` until a socket is ready or the next deadline, bounded (`block`).
    Block,
}

impl IdleStrategy {
    /// Parses the configuration keyword: `busy-spin`, `yield` or `block`.
    pub fn from_keyword(keyword: &str) -> Option<Self> {
        match keyword {
            "busy-spin" => Some(IdleStrategy::BusySpin),
            "yield" => Some(IdleStrategy::Yield),
            "block" => Some(IdleStrategy::Block),
            _ => None,
        }
    }

    /// The configuration keyword of this strategy.
    pub fn keyword(self) -> &'static str {
        match self {
            IdleStrategy::BusySpin => "busy-spin",
            IdleStrategy::Yield => "yield",
            IdleStrategy::Block => "block",
        }
    }
}

impl fmt::Display for IdleStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.keyword())
    }
}

/// The error of parsing an unknown idle strategy keyword.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownIdleStrategy(pub String);

impl fmt::Display for UnknownIdleStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown idle strategy {:?}: expected busy-spin, yield or block",
            self.0
        )
    }
}

impl std::error::Error for UnknownIdleStrategy {}

impl FromStr for IdleStrategy {
    type Err = UnknownIdleStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IdleStrategy::from_keyword(s).ok_or_else(|| UnknownIdleStrategy(s.to_owned()))
    }
}

/// The per-thread state of an idle strategy: the receive loop reports each cycle's work count
/// to [`idle`](Self::idle) and asks [`poll_timeout`](Self::poll_timeout) how long to wait next.
#[derive(Debug, Clone)]
pub struct Idler {
    strategy: IdleStrategy,
    max_block: Duration,
    empty_cycles: u32,
}

impl Idler {
    /// An idler for `strategy` with the default cap on blocking waits ([`DEFAULT_MAX_BLOCK`]).
    pub fn new(strategy: IdleStrategy) -> Self {
        Idler {
            strategy,
            max_block: DEFAULT_MAX_BLOCK,
            empty_cycles: 0,
        }
    }

    /// Sets the cap on blocking waits (at least 1 ms, at most [`DEFAULT_MAX_BLOCK`]), which
    /// bounds how late a shutdown request is seen.
    #[cfg(test)]
    pub fn with_max_block(mut self, max_block: Duration) -> Self {
        self.max_block = max_block.clamp(Duration::from_millis(1), DEFAULT_MAX_BLOCK);
        self
    }

    /// The strategy this idler follows.
    #[cfg(test)]
    pub fn strategy(&self) -> IdleStrategy {
        self.strategy
    }

    /// How many cycles in a row found no work.
    #[cfg(test)]
    pub fn empty_cycles(&self) -> u32 {
        self.empty_cycles
    }

    /// The timeout for the next `Poll::poll`, given the time until the core's next deadline.
    ///
    /// Always `Some`: `Some(ZERO)` for busy-spin and yield, and after any cycle that did work
    /// (Aeron's rule: work is never delayed); for block, the time to `next_deadline`, never more
    /// than the cap. A `None` deadline means no timer is armed, and the cap applies.
    pub fn poll_timeout(&self, next_deadline: Option<Duration>) -> Option<Duration> {
        match self.strategy {
            IdleStrategy::BusySpin | IdleStrategy::Yield => Some(Duration::ZERO),
            IdleStrategy::Block if self.empty_cycles == 0 => Some(Duration::ZERO),
            IdleStrategy::Block => {
                Some(next_deadline.map_or(self.max_block, |deadline| deadline.min(self.max_block)))
            }
        }
    }

    /// Reports the work count of the cycle that just ended and idles accordingly: nothing
    /// after work; otherwise a spin hint (busy-spin), a spin hint then `yield_now` once
    /// [`SPINS_BEFORE_YIELD`] empty cycles passed (yield), or nothing, the wait being in the
    /// next poll (block).
    pub fn idle(&mut self, work_count: usize) {
        if work_count > 0 {
            self.empty_cycles = 0;
            return;
        }
        self.empty_cycles = self.empty_cycles.saturating_add(1);
        match self.strategy {
            IdleStrategy::BusySpin => std::hint::spin_loop(),
            IdleStrategy::Yield if self.empty_cycles > SPINS_BEFORE_YIELD => {
                std::thread::yield_now()
            }
            IdleStrategy::Yield => std::hint::spin_loop(),
            IdleStrategy::Block => {}
        }
    }

    /// Forgets the count of empty cycles, e.g. after the loop was paused.
    #[cfg(test)]
    pub fn reset(&mut self) {
        self.empty_cycles = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [IdleStrategy; 3] = [
        IdleStrategy::BusySpin,
        IdleStrategy::Yield,
        IdleStrategy::Block,
    ];

    #[test]
    fn keywords_round_trip_and_unknown_ones_are_refused() {
        for s in ALL {
            assert_eq!(IdleStrategy::from_keyword(s.keyword()), Some(s));
            assert_eq!(s.to_string().parse::<IdleStrategy>(), Ok(s));
        }
        assert_eq!(IdleStrategy::from_keyword("spin"), None);
        assert_eq!(IdleStrategy::from_keyword("Block"), None);
        let err = "sleep".parse::<IdleStrategy>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unknown idle strategy \"sleep\": expected busy-spin, yield or block")
        );
    }

    #[test]
    fn every_timeout_is_bounded() {
        let deadlines = [
            None,
            Some(Duration::ZERO),
            Some(Duration::from_millis(5)),
            Some(Duration::from_secs(3600)),
            Some(Duration::MAX),
        ];
        for s in ALL {
            let mut idler = Idler::new(s);
            for work in [0, 0, 3, 0, 0] {
                idler.idle(work);
                for d in deadlines {
                    let t = idler.poll_timeout(d);
                    assert!(
                        t.is_some_and(|t| t <= DEFAULT_MAX_BLOCK),
                        "{s} {d:?} -> {t:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn spinning_strategies_never_wait_in_poll() {
        for s in [IdleStrategy::BusySpin, IdleStrategy::Yield] {
            let mut idler = Idler::new(s);
            for _ in 0..2 * SPINS_BEFORE_YIELD {
                idler.idle(0);
                assert_eq!(idler.poll_timeout(None), Some(Duration::ZERO));
            }
            assert_eq!(idler.empty_cycles(), 2 * SPINS_BEFORE_YIELD);
        }
    }

    #[test]
    fn block_waits_only_after_an_empty_cycle_and_up_to_the_deadline_or_cap() {
        let mut idler = Idler::new(IdleStrategy::Block);
        assert_eq!(idler.poll_timeout(None), Some(Duration::ZERO));
        idler.idle(0);
        assert_eq!(idler.poll_timeout(None), Some(DEFAULT_MAX_BLOCK));
        let near = Duration::from_millis(7);
        assert_eq!(idler.poll_timeout(Some(near)), Some(near));
        assert_eq!(
            idler.poll_timeout(Some(Duration::from_secs(60))),
            Some(DEFAULT_MAX_BLOCK)
        );
        idler.idle(1);
        assert_eq!(idler.poll_timeout(None), Some(Duration::ZERO));
        idler.idle(0);
        idler.reset();
        assert_eq!(idler.empty_cycles(), 0);
        assert_eq!(idler.poll_timeout(None), Some(Duration::ZERO));
    }

    #[test]
    fn the_block_cap_is_clamped() {
        let mut short = Idler::new(IdleStrategy::Block).with_max_block(Duration::from_millis(20));
        short.idle(0);
        assert_eq!(short.poll_timeout(None), Some(Duration::from_millis(20)));
        let mut long = Idler::new(IdleStrategy::Block).with_max_block(Duration::from_secs(10));
        long.idle(0);
        assert_eq!(long.poll_timeout(None), Some(DEFAULT_MAX_BLOCK));
        let mut zero = Idler::new(IdleStrategy::Block).with_max_block(Duration::ZERO);
        zero.idle(0);
        assert_eq!(zero.poll_timeout(None), Some(Duration::from_millis(1)));
        assert_eq!(zero.strategy(), IdleStrategy::Block);
    }

    #[test]
    fn a_real_blocking_poll_returns_within_the_cap() {
        let Ok(mut poll) = mio::Poll::new() else {
            panic!("mio::Poll::new failed");
        };
        let mut events = mio::Events::with_capacity(1);
        let mut idler = Idler::new(IdleStrategy::Block).with_max_block(Duration::from_millis(20));
        idler.idle(0);
        let start = std::time::Instant::now();
        let r = poll.poll(&mut events, idler.poll_timeout(None));
        assert!(r.is_ok());
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(events.is_empty());
    }
}
