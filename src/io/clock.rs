//! The clock of the receive loop: one monotonic reading per cycle, and the bridge between the
//! kernel's realtime receive timestamps and that monotonic scale.
//!
//! The sans-IO core takes `now` as an argument. The loop reads it once per cycle with
//! [`Clock::tick`] and hands the same value to everything done in that cycle, so one cycle is
//! one instant, and the clock costs one `clock_gettime` per cycle, not one per datagram.
//!
//! Monotonic time is nanoseconds since the clock's origin (its creation). Kernel timestamps
//! (`SO_TIMESTAMPNS`) are `CLOCK_REALTIME` nanoseconds since the Unix epoch; [`Clock::new`]
//! captures the realtime value at the origin, so a kernel timestamp maps onto the monotonic
//! scale by subtracting that offset ([`Clock::kernel_to_mono_ns`]). The offset is only as good
//! as the realtime clock: a step by NTP after start shifts the mapping until
//! [`Clock::recalibrate`] is called, so latencies are reported signed and the caller decides
//! what to do with a negative one.

use std::mem;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A monotonic nanosecond clock with a cached per-cycle reading and a captured
/// realtime-to-monotonic offset.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    realtime_at_origin_ns: u64,
    cycle_ns: u64,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    /// Starts a clock whose monotonic origin is now, capturing the realtime offset.
    pub fn new() -> Self {
        let (origin, realtime_at_origin_ns) = capture_offset();
        Clock {
            origin,
            realtime_at_origin_ns,
            cycle_ns: 0,
        }
    }

    /// Reads the monotonic clock, caches the value as this cycle's time, and returns it.
    pub fn tick(&mut self) -> u64 {
        self.cycle_ns = self.now_ns();
        self.cycle_ns
    }

    /// The value of the last [`tick`](Self::tick) (`0` before the first).
    #[cfg(test)]
    pub fn cycle_ns(&self) -> u64 {
        self.cycle_ns
    }

    /// Monotonic nanoseconds since the origin, read now.
    pub fn now_ns(&self) -> u64 {
        duration_ns(self.origin.elapsed())
    }

    /// The `Instant` the clock counts from.
    #[cfg(test)]
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The monotonic time of `instant` (`0` for an instant before the origin), for deadlines
    /// the core reports as `Instant`s.
    #[cfg(test)]
    pub fn mono_ns_of(&self, instant: Instant) -> u64 {
        duration_ns(instant.saturating_duration_since(self.origin))
    }

    /// The `Instant` at monotonic time `mono_ns`.
    #[cfg(test)]
    pub fn instant_at(&self, mono_ns: u64) -> Instant {
        self.origin + Duration::from_nanos(mono_ns)
    }

    /// `CLOCK_REALTIME` nanoseconds since the Unix epoch, the scale of kernel receive
    /// timestamps (`0` if the system clock is before 1970).
    pub fn realtime_ns() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_ns)
    }

    /// The realtime value captured at the origin: kernel timestamp minus this is monotonic time.
    pub fn realtime_offset_ns(&self) -> u64 {
        self.realtime_at_origin_ns
    }

    /// Maps a kernel (realtime) timestamp onto the monotonic scale. Negative when the
    /// timestamp is before the origin, e.g. a datagram queued before the clock was created.
    #[cfg(test)]
    pub fn kernel_to_mono_ns(&self, kernel_realtime_ns: u64) -> i64 {
        clamp_i64(i128::from(kernel_realtime_ns) - i128::from(self.realtime_at_origin_ns))
    }

    /// Nanoseconds from the kernel's receive timestamp to the monotonic time `now_mono_ns`:
    /// how long a datagram waited in the socket buffer and the loop. Negative only if the
    /// realtime clock stepped since the offset was captured.
    #[cfg(test)]
    pub fn latency_ns(&self, kernel_realtime_ns: u64, now_mono_ns: u64) -> i64 {
        clamp_i64(i128::from(now_mono_ns) - i128::from(self.kernel_to_mono_ns(kernel_realtime_ns)))
    }

    /// Captures the realtime offset again, keeping the monotonic origin; for use after the
    /// system clock was stepped.
    #[cfg(test)]
    pub fn recalibrate(&mut self) {
        let (instant, realtime) = capture_offset();
        let since_origin = duration_ns(instant.saturating_duration_since(self.origin));
        self.realtime_at_origin_ns = realtime.saturating_sub(since_origin);
    }
}

/// Reads realtime between two monotonic reads and pairs it with the midpoint, which halves the
/// error the gap between the reads would otherwise add to the offset.
fn capture_offset() -> (Instant, u64) {
    let before = Instant::now();
    let realtime = Clock::realtime_ns();
    let after = Instant::now();
    let half = after.saturating_duration_since(before) / 2;
    (before + half, realtime)
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Narrows to `i64`, saturating.
#[cfg(test)]
fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// The size of the kernel's `struct cmsghdr` (`size_t cmsg_len; int cmsg_level; int
/// cmsg_type`), rounded to the control-message alignment: where a message's data starts.
const CMSG_HEADER_LEN: usize = cmsg_align(mem::size_of::<usize>() + 2 * mem::size_of::<i32>());

/// Rounds `len` up to the alignment of control messages (`CMSG_ALIGN`: that of `size_t`).
const fn cmsg_align(len: usize) -> usize {
    let a = mem::size_of::<usize>();
    (len + a - 1) & !(a - 1)
}

/// Finds the `SOL_SOCKET`/`SCM_TIMESTAMPNS` message in the filled part of a `recvmsg` control
/// buffer and returns its time: `CLOCK_REALTIME` nanoseconds since the Unix epoch.
///
/// The buffer is decoded as bytes in the kernel's layout, every offset bounds-checked, so a
/// malformed buffer gives `None`, never a panic.
pub fn kernel_timestamp_ns(control: &[u8]) -> Option<u64> {
    const W: usize = mem::size_of::<usize>();
    let mut offset: usize = 0;
    while let Some(header) = control.get(offset..offset.checked_add(CMSG_HEADER_LEN)?) {
        let len = usize::from_ne_bytes(header.get(..W)?.try_into().ok()?);
        let level = i32::from_ne_bytes(header.get(W..W + 4)?.try_into().ok()?);
        let kind = i32::from_ne_bytes(header.get(W + 4..W + 8)?.try_into().ok()?);
        if len < CMSG_HEADER_LEN {
            return None;
        }
        let message = control.get(offset..offset.checked_add(len)?)?;
        if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS {
            return timespec_ns(message.get(CMSG_HEADER_LEN..)?);
        }
        offset = offset.checked_add(cmsg_align(len))?;
    }
    None
}

/// Decodes a native-endian `struct timespec` of two 64-bit or two 32-bit fields.
fn timespec_ns(data: &[u8]) -> Option<u64> {
    fn field<const N: usize>(data: &[u8], at: usize) -> Option<[u8; N]> {
        data.get(at..at.checked_add(N)?)?.try_into().ok()
    }
    let (secs, nanos) = match data.len() {
        16 => (
            i64::from_ne_bytes(field(data, 0)?),
            i64::from_ne_bytes(field(data, 8)?),
        ),
        8 => (
            i64::from(i32::from_ne_bytes(field(data, 0)?)),
            i64::from(i32::from_ne_bytes(field(data, 4)?)),
        ),
        _ => return None,
    };
    let secs = u64::try_from(secs).ok()?;
    let nanos = u64::try_from(nanos).ok().filter(|n| *n < 1_000_000_000)?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_time_only_moves_forward_and_ticks_are_cached() {
        let mut clock = Clock::new();
        assert_eq!(clock.cycle_ns(), 0);
        let a = clock.tick();
        assert_eq!(clock.cycle_ns(), a);
        let b = clock.now_ns();
        let c = clock.tick();
        assert!(a <= b && b <= c);
        assert_eq!(clock.cycle_ns(), c);
    }

    #[test]
    fn realtime_is_after_2020_and_the_offset_matches_it() {
        let clock = Clock::new();
        let now = Clock::realtime_ns();
        assert!(now > 1_577_836_800_000_000_000);
        let offset = clock.realtime_offset_ns();
        assert!(offset <= now && now - offset < 5_000_000_000);
    }

    #[test]
    fn a_realtime_reading_maps_close_to_the_monotonic_one() {
        let clock = Clock::new();
        let mono = clock.now_ns();
        let mapped = clock.kernel_to_mono_ns(Clock::realtime_ns());
        let mono_after = clock.now_ns();
        let diff = mapped - i64::try_from(mono).unwrap_or(i64::MAX);
        assert!(diff.abs() < 50_000_000, "diff {diff} ns");
        let latency = clock.latency_ns(Clock::realtime_ns(), mono_after);
        assert!(latency.abs() < 50_000_000, "latency {latency} ns");
    }

    #[test]
    fn latency_is_the_gap_between_kernel_time_and_now() {
        let clock = Clock::new();
        let kernel = clock.realtime_offset_ns() + 1_000_000;
        assert_eq!(clock.kernel_to_mono_ns(kernel), 1_000_000);
        assert_eq!(clock.latency_ns(kernel, 1_250_000), 250_000);
        assert_eq!(clock.kernel_to_mono_ns(clock.realtime_offset_ns() - 5), -5);
        assert_eq!(
            clock.kernel_to_mono_ns(0),
            -(clock.realtime_offset_ns() as i64)
        );
    }

    #[test]
    fn instants_and_nanoseconds_convert_both_ways() {
        let clock = Clock::new();
        let at = clock.instant_at(1_500);
        assert_eq!(clock.mono_ns_of(at), 1_500);
        assert_eq!(clock.mono_ns_of(clock.origin()), 0);
        let earlier = clock.origin().checked_sub(Duration::from_millis(1));
        if let Some(earlier) = earlier {
            assert_eq!(clock.mono_ns_of(earlier), 0);
        }
    }

    #[test]
    fn recalibrating_keeps_the_offset_consistent() {
        let mut clock = Clock::new();
        let before = clock.realtime_offset_ns();
        clock.recalibrate();
        let after = clock.realtime_offset_ns();
        assert!(before.abs_diff(after) < 50_000_000, "{before} vs {after}");
        assert_eq!(clamp_i64(i128::MAX), i64::MAX);
        assert_eq!(clamp_i64(i128::MIN), i64::MIN);
        assert_eq!(duration_ns(Duration::MAX), u64::MAX);
    }

    /// Builds a control buffer holding one message, laid out as the kernel does.
    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let w = mem::size_of::<usize>();
        let len = CMSG_HEADER_LEN + data.len();
        let mut out = vec![0u8; cmsg_align(len)];
        out[..w].copy_from_slice(&len.to_ne_bytes());
        out[w..w + 4].copy_from_slice(&level.to_ne_bytes());
        out[w + 4..w + 8].copy_from_slice(&kind.to_ne_bytes());
        out[CMSG_HEADER_LEN..len].copy_from_slice(data);
        out
    }

    fn timestamp(secs: i64, nanos: i64) -> Vec<u8> {
        let ts = [secs.to_ne_bytes(), nanos.to_ne_bytes()].concat();
        cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &ts)
    }

    #[test]
    fn kernel_timestamps_are_decoded_and_malformed_control_data_is_ignored() {
        let good = timestamp(1_700_000_000, 123_456_789);
        let want = Some(1_700_000_000_123_456_789);
        assert_eq!(kernel_timestamp_ns(&good), want);
        let other = cmsg(libc::IPPROTO_IP, 8, &[0; 4]);
        assert_eq!(
            kernel_timestamp_ns(&[other.clone(), good.clone()].concat()),
            want
        );
        assert_eq!(kernel_timestamp_ns(&other), None);
        assert_eq!(kernel_timestamp_ns(&[]), None);
        assert_eq!(kernel_timestamp_ns(&good[..good.len() - 1]), None);
        assert_eq!(kernel_timestamp_ns(&timestamp(1, 1_000_000_000)), None);
        assert_eq!(kernel_timestamp_ns(&timestamp(-1, 0)), None);
        let short = [1i32.to_ne_bytes(), 2i32.to_ne_bytes()].concat();
        assert_eq!(timespec_ns(&short), Some(1_000_000_002));
        assert_eq!(timespec_ns(&[0; 12]), None);
        let w = mem::size_of::<usize>();
        for bad_len in [0, 1, usize::MAX] {
            let mut bad = good.clone();
            bad[..w].copy_from_slice(&bad_len.to_ne_bytes());
            assert_eq!(kernel_timestamp_ns(&bad), None);
            assert_eq!(kernel_timestamp_ns(&[other.clone(), bad].concat()), None);
        }
    }
}
