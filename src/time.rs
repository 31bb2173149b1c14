//! The two clocks gapless keeps apart.
//!
//! - [`Mono`]: monotonic nanoseconds, the clock every deadline and timer runs on. Live it
//!   is the rx loop's clock (nanoseconds since the loop's clock started); in replay it is
//!   the capture's timestamps. Never compared with wall-clock time.
//! - [`Wall`]: wall-clock nanoseconds since the Unix epoch (`CLOCK_REALTIME`), the scale
//!   of kernel receive timestamps and of the `recv_ns` consumers receive. Only ever
//!   subtracted from another `Wall` (hand-off latency), never used for a deadline.
//!
//! Both are plain `u64` nanoseconds inside; the types exist so a receive time cannot be
//! passed where a deadline is meant, or the other way round.
//!
//! ```
//! use gapless::time::Mono;
//!
//! let now = Mono::from_nanos(1_000);
//! let deadline = now.after_nanos(500);
//! assert!(deadline > now);
//! assert_eq!(deadline.nanos_since(now), 500);
//! assert_eq!(now.nanos_since(deadline), 0, "saturates");
//! ```

/// A monotonic instant, in nanoseconds on the driver's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Mono(u64);

impl Mono {
    /// The origin of the clock.
    pub const ZERO: Self = Self(0);
    /// Later than any deadline.
    pub const MAX: Self = Self(u64::MAX);

    /// The instant `nanos` after the clock's origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the clock's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The instant `nanos` later, saturating at [`Mono::MAX`].
    #[must_use]
    pub const fn after_nanos(self, nanos: u64) -> Self {
        Self(self.0.saturating_add(nanos))
    }

    /// Nanoseconds from `earlier` to `self`; 0 when `earlier` is not earlier.
    pub const fn nanos_since(self, earlier: Self) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// A wall-clock instant: nanoseconds since the Unix epoch (0: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Wall(u64);

impl Wall {
    /// No time known.
    pub const UNKNOWN: Self = Self(0);

    /// The instant `nanos` after the Unix epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the Unix epoch (0: unknown).
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// True unless this is [`Wall::UNKNOWN`].
    pub const fn is_known(self) -> bool {
        self.0 != 0
    }
}

/// Nanoseconds in a [`std::time::Duration`], saturating at `u64::MAX`.
pub fn duration_nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
