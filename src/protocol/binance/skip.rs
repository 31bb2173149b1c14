//! Skipping nested values 64 bytes at a time: bit masks of quotes and brackets, and the
//! bytes inside strings, found with SSE2 on x86-64 and a plain loop elsewhere.

use super::number::word;

/// Bytes examined at once when skipping nested values.
pub(super) const BLOCK: usize = 64;

/// What the skipping loop needs to know about a 64-byte block: bit `i` describes byte `i`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct BlockMasks {
    /// `"` bytes.
    pub(super) quotes: u64,
    /// `[`, `]`, `{` and `}` bytes.
    pub(super) brackets: u64,
    /// Some byte is a backslash.
    pub(super) backslash: bool,
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(super) fn block_masks(block: &[u8; BLOCK]) -> BlockMasks {
    // SAFETY: `block_masks_sse2` needs SSE2 and nothing else; the cfg above admits only
    // builds where SSE2 is enabled, which is every x86-64 target. It only reads `block`.
    unsafe { block_masks_sse2(block) }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(super) fn block_masks(block: &[u8; BLOCK]) -> BlockMasks {
    block_masks_portable(block)
}

/// 16 bytes per step: compare, then `movemask` collects one bit per byte.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
pub(super) fn block_masks_sse2(block: &[u8; BLOCK]) -> BlockMasks {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8,
        _mm_setzero_si128,
    };

    let mut quotes = 0u64;
    let mut brackets = 0u64;
    let mut backslashes = _mm_setzero_si128();
    for (lane, chunk) in block.chunks_exact(16).enumerate() {
        let (low, high) = chunk.split_at(8);
        let bytes = _mm_set_epi64x(word(high) as i64, word(low) as i64);
        // `[` | 0x20 is `{` and `]` | 0x20 is `}`; no other byte folds onto either.
        let folded = _mm_or_si128(bytes, _mm_set1_epi8(0x20));
        let open = _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8));
        let close = _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8));
        let quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
        backslashes = _mm_or_si128(backslashes, backslash);
        let shift = 16 * lane;
        quotes |= u64::from(_mm_movemask_epi8(quote) as u16) << shift;
        brackets |= u64::from(_mm_movemask_epi8(_mm_or_si128(open, close)) as u16) << shift;
    }
    BlockMasks {
        quotes,
        brackets,
        backslash: _mm_movemask_epi8(backslashes) != 0,
    }
}

/// One byte at a time: used where SSE2 is not, and the reference the SSE2 version is tested
/// against.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
pub(super) fn block_masks_portable(block: &[u8; BLOCK]) -> BlockMasks {
    let mut masks = BlockMasks::default();
    for (i, &byte) in block.iter().enumerate() {
        let bit = 1u64 << i;
        match byte {
            b'"' => masks.quotes |= bit,
            b'\\' => masks.backslash = true,
            b'[' | b']' | b'{' | b'}' => masks.brackets |= bit,
            _ => {}
        }
    }
    masks
}

/// Bit `i` of the result is the XOR of bits `0..=i`: set inside a string (and on its opening
/// quote), given the quote positions.
pub(super) fn prefix_xor(mut bits: u64) -> u64 {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= bits << 32;
    bits
}

/// `0x01` in every byte.
pub(super) const ONES: u64 = u64::from_le_bytes([0x01; 8]);
/// `0x7f` in every byte.
pub(super) const LOW7: u64 = u64::from_le_bytes([0x7f; 8]);

/// The high bit of each byte of `word` that equals `byte`, and no other bit. Exact: adding
/// `0x7f` to the low seven bits cannot carry into the next byte.
pub(super) fn equal_bytes(word: u64, byte: u8) -> u64 {
    let diff = word ^ (ONES * u64::from(byte));
    !(((diff & LOW7) + LOW7) | diff | LOW7)
}

/// The index of the first `"` or `\` at or after `from`, eight bytes at a time.
pub(super) fn find_quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let mut words = rest.chunks_exact(8);
    let mut offset = from;
    for chunk in &mut words {
        let word = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).ok()?);
        let hits = equal_bytes(word, b'"') | equal_bytes(word, b'\\');
        if hits != 0 {
            return Some(offset + (hits.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|at| offset + at)
}
