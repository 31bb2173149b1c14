//! Update ids and times: strict unsigned decimal integers, read eight digits at a time.

use super::skip::{LOW7, ONES};
use super::{ScanError, Span};

/// A strict unsigned decimal integer: digits only, no leading zero, at most `u64::MAX`.
///
/// Up to 16 digits are read as two (possibly overlapping) eight-byte words; update ids and
/// millisecond times have 10 to 13.
pub(super) fn integer(bytes: &[u8], span: Span, key: &'static str) -> Result<u64, ScanError> {
    let offset = span.start;
    let digits = bytes.get(span.start..span.end).unwrap_or_default();
    let not_integer = ScanError::NotAnInteger { key, offset };
    if matches!(digits, [b'0', _, ..]) {
        return Err(not_integer);
    }
    let len = digits.len();
    match len {
        0 => Err(not_integer),
        1..=8 => {
            let mut padded = [b'0'; 8];
            if let Some(tail) = padded.get_mut(8 - len..) {
                tail.copy_from_slice(digits);
            }
            let padded = u64::from_le_bytes(padded);
            if non_digits(padded) != 0 {
                return Err(not_integer);
            }
            Ok(eight_digits(padded))
        }
        9..=16 => {
            let first = word(digits.get(..8).unwrap_or_default());
            let last = word(digits.get(len - 8..).unwrap_or_default());
            if non_digits(first) | non_digits(last) != 0 {
                return Err(not_integer);
            }
            // `last` repeats 16 - len digits of `first` in its low bytes: make them zeros.
            let repeated = u64::MAX << (8 * (16 - len));
            let last = (last & repeated) | (ASCII_ZEROS & !repeated);
            let scale = POWERS_OF_TEN.get(len - 8).copied().unwrap_or_default();
            Ok(eight_digits(first) * scale + eight_digits(last))
        }
        _ => long_integer(digits, key, offset),
    }
}

/// `10^i` for `i` in `0..=8`.
pub(super) const POWERS_OF_TEN: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// 17 digits or more: only 20-digit numbers can overflow, and only in their last digit.
pub(super) fn long_integer(
    digits: &[u8],
    key: &'static str,
    offset: usize,
) -> Result<u64, ScanError> {
    /// Any 19 digits fit in a u64 (`u64::MAX` has 20).
    const ALWAYS_FITS: usize = 19;
    if digit_run(digits) != digits.len() {
        return Err(ScanError::NotAnInteger { key, offset });
    }
    let (head, tail) = digits.split_at(digits.len().min(ALWAYS_FITS));
    let mut eights = head.chunks_exact(8);
    let mut value = 0u64;
    for chunk in &mut eights {
        value = value * 100_000_000 + eight_digits(word(chunk));
    }
    for &digit in eights.remainder() {
        value = value * 10 + u64::from(digit - b'0');
    }
    tail.iter().try_fold(value, |value, &digit| {
        value
            .checked_mul(10)
            .and_then(|value| value.checked_add(u64::from(digit - b'0')))
            .ok_or(ScanError::IntegerOverflow { key, offset })
    })
}

/// Eight bytes as a little-endian word; zero unless `chunk` has exactly eight.
pub(super) fn word(chunk: &[u8]) -> u64 {
    <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes)
}

/// `0x0f` in every byte.
pub(super) const LOW_NIBBLES: u64 = u64::from_le_bytes([0x0f; 8]);
/// `b'0'` in every byte.
pub(super) const ASCII_ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);

/// Nonzero bytes where `word` holds something other than an ASCII digit. A byte is a digit
/// when its high nibble is 3 and its low nibble plus 6 stays below 16; neither test carries
/// into the next byte.
pub(super) fn non_digits(word: u64) -> u64 {
    let high = (word & !LOW_NIBBLES) ^ ASCII_ZEROS;
    let low = ((word & LOW_NIBBLES) + ONES * 6) & !LOW_NIBBLES;
    high | low
}

/// How many ASCII digits `bytes` starts with, eight at a time.
pub(super) fn digit_run(bytes: &[u8]) -> usize {
    let mut eights = bytes.chunks_exact(8);
    let mut count = 0;
    for chunk in &mut eights {
        let other = non_digits(word(chunk));
        if other != 0 {
            let nonzero = ((other & LOW7) + LOW7) | other;
            return count + ((nonzero & !LOW7).trailing_zeros() / 8) as usize;
        }
        count += 8;
    }
    count
        + eights
            .remainder()
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count()
}

/// The value of eight ASCII digits read as a little-endian word (first digit lowest), by
/// combining neighbours pairwise: 8 digits, 4 two-digit, 2 four-digit, 1 eight-digit number.
pub(super) fn eight_digits(word: u64) -> u64 {
    let digits = word.wrapping_sub(ASCII_ZEROS);
    let pairs = (digits.wrapping_mul(10).wrapping_add(digits >> 8)) & 0x00ff_00ff_00ff_00ff;
    let quads = (pairs.wrapping_mul(100).wrapping_add(pairs >> 16)) & 0x0000_ffff_0000_ffff;
    (quads.wrapping_mul(10_000).wrapping_add(quads >> 32)) & 0xffff_ffff
}

pub(super) fn optional_integer(
    bytes: &[u8],
    span: Option<Span>,
    key: &'static str,
) -> Result<Option<u64>, ScanError> {
    span.map(|span| integer(bytes, span, key)).transpose()
}
