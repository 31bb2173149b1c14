//! Extending 32-bit wire sequence numbers to 64 bits.

/// Extends a 32-bit wire sequence number to the 64-bit value closest to `expected`.
///
/// The wire carries only the low 32 bits; of every 64-bit number with those low bits, the
/// one nearest `expected` is taken (ties go to the larger), so internal comparisons never
/// wrap. Near zero and near `u64::MAX` the result stays in range.
///
/// ```
/// use gapless::sequencer::extend_u32;
/// // Just past the wrap: wire 5 after expecting 2^32 - 3 is 2^32 + 5.
/// assert_eq!(extend_u32(5, (1 << 32) - 3), (1 << 32) + 5);
/// // Just before it: wire 0xFFFF_FFFE while expecting 2^32 + 1 is 2^32 - 2.
/// assert_eq!(extend_u32(0xFFFF_FFFE, (1 << 32) + 1), (1 << 32) - 2);
/// ```
pub fn extend_u32(wire: u32, expected: u64) -> u64 {
    const SPAN: i128 = 1 << 32;
    const HALF: i128 = 1 << 31;
    let candidate = i128::from((expected & !0xFFFF_FFFF) | u64::from(wire));
    let distance = candidate - i128::from(expected);
    let adjusted = if distance <= -HALF {
        candidate + SPAN
    } else if distance > HALF {
        candidate - SPAN
    } else {
        candidate
    };
    // When the nearest value lies outside u64, the in-range alternative is the candidate.
    u64::try_from(adjusted).unwrap_or(candidate as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRAP: u64 = 1 << 32;

    #[test]
    fn identity_in_the_first_window() {
        assert_eq!(extend_u32(0, 0), 0);
        assert_eq!(extend_u32(7, 5), 7);
        assert_eq!(extend_u32(3, 5), 3);
    }

    #[test]
    fn crosses_the_wrap_forwards_and_backwards() {
        for offset in [1u64, 2, 100, 1 << 20] {
            let expected = WRAP - offset;
            assert_eq!(extend_u32(0, expected), WRAP, "forward from {expected}");
            assert_eq!(extend_u32(10, expected), WRAP + 10);
            let expected = WRAP + offset;
            assert_eq!(
                extend_u32(u32::MAX, expected),
                WRAP - 1,
                "backward from {expected}"
            );
        }
    }

    #[test]
    fn picks_the_nearest_across_many_wraps() {
        for epoch in [1u64, 2, 1000, 0xFFFF_FFFE] {
            let base = epoch * WRAP;
            for delta in [-1_000_000i64, -1, 0, 1, 1_000_000, (1 << 31) - 1] {
                let target = base.wrapping_add_signed(delta);
                let expected = base;
                assert_eq!(
                    extend_u32(target as u32, expected),
                    target,
                    "{epoch} {delta}"
                );
            }
        }
    }

    #[test]
    fn half_window_boundary() {
        let expected = 10 * WRAP;
        // Exactly half a window ahead is still ahead; half a window behind flips forwards.
        assert_eq!(extend_u32(1 << 31, expected), expected + (1 << 31));
        assert_eq!(
            extend_u32((1u32 << 31) + 1, expected),
            expected - (1 << 31) + 1
        );
    }

    #[test]
    fn stays_in_range_at_the_ends() {
        assert_eq!(extend_u32(u32::MAX, 0), u64::from(u32::MAX));
        assert_eq!(extend_u32(0, u64::MAX), 0xFFFF_FFFF_0000_0000);
        assert_eq!(extend_u32(u32::MAX, u64::MAX), u64::MAX);
    }
}
