//! Timer tables: every deadline a session keeps, named by one enum.
//!
//! A session never computes "when do I next have work" from scattered state. Each thing
//! that can fall due is a variant of its timer enum, set when it is armed and stopped when
//! it no longer applies; [`TimerTable::next`] is then the session's `poll_timeout`, and a
//! timer that stays armed by mistake shows up as a named entry rather than a busy loop.
//!
//! ```
//! use gapless::time::Mono;
//! use gapless::venue::{Timer, TimerTable};
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Eq)]
//! enum T { Retry, Idle }
//! impl Timer for T {
//!     const ALL: &'static [Self] = &[T::Retry, T::Idle];
//!     fn index(self) -> usize { self as usize }
//! }
//!
//! let mut timers = TimerTable::<T, 2>::new();
//! timers.set(T::Retry, Mono::from_nanos(50));
//! timers.set(T::Idle, Mono::from_nanos(20));
//! assert_eq!(timers.next(), Some(Mono::from_nanos(20)));
//! let due: Vec<T> = timers.take_expired(Mono::from_nanos(30)).collect();
//! assert_eq!(due, [T::Idle]);
//! assert_eq!(timers.next(), Some(Mono::from_nanos(50)));
//! ```

use std::marker::PhantomData;

use crate::time::Mono;

/// The timers of one kind of session: a fieldless enum whose variants index a table.
pub trait Timer: Copy + Eq + 'static {
    /// Every variant, in index order.
    const ALL: &'static [Self];
    /// This variant's slot, below `ALL.len()`.
    fn index(self) -> usize;
}

/// One deadline per timer of `T` (`N` = `T::ALL.len()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerTable<T: Timer, const N: usize> {
    at: [Option<Mono>; N],
    kind: PhantomData<T>,
}

impl<T: Timer, const N: usize> Default for TimerTable<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Timer, const N: usize> TimerTable<T, N> {
    /// A table with every timer stopped.
    pub const fn new() -> Self {
        Self {
            at: [None; N],
            kind: PhantomData,
        }
    }

    /// Arms `timer` for `at` (replacing any earlier setting).
    #[inline]
    pub fn set(&mut self, timer: T, at: Mono) {
        if let Some(slot) = self.at.get_mut(timer.index()) {
            *slot = Some(at);
        }
    }

    /// Arms `timer` for `at`, or stops it when `at` is `None`.
    #[inline]
    pub fn set_or_stop(&mut self, timer: T, at: Option<Mono>) {
        if let Some(slot) = self.at.get_mut(timer.index()) {
            *slot = at;
        }
    }

    /// Stops `timer`.
    #[inline]
    pub fn stop(&mut self, timer: T) {
        self.set_or_stop(timer, None);
    }

    /// When `timer` falls due, if armed.
    #[inline]
    pub fn get(&self, timer: T) -> Option<Mono> {
        self.at.get(timer.index()).copied().flatten()
    }

    /// True when `timer` is armed and due at `now`.
    #[inline]
    pub fn is_due(&self, timer: T, now: Mono) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// The earliest deadline of any armed timer.
    #[inline]
    pub fn next(&self) -> Option<Mono> {
        self.at.iter().flatten().min().copied()
    }

    /// Stops and returns, in enum order, every timer due at `now`.
    pub fn take_expired(&mut self, now: Mono) -> impl Iterator<Item = T> + '_ {
        T::ALL.iter().copied().filter(move |t| {
            let due = self.is_due(*t, now);
            if due {
                self.stop(*t);
            }
            due
        })
    }

    /// The armed timers and their deadlines, in enum order (for status and tests).
    pub fn armed(&self) -> impl Iterator<Item = (T, Mono)> + '_ {
        T::ALL
            .iter()
            .filter_map(|t| self.get(*t).map(|at| (*t, at)))
    }
}
