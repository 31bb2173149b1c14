//! The one walker of length-prefixed message blocks, for both byte orders.
//!
//! MoldUDP64 and IEX-TP carry messages as blocks, each a u16 length (big-endian in
//! MoldUDP64, little-endian in IEX-TP) and that many bytes; a run of messages in a
//! consumer queue keeps its datagram's blocks as they came. Everything that reads blocks
//! reads them here:
//!
//! - `walk`: checks that a datagram's blocks are exactly `count` well-formed blocks,
//!   naming the offset of the first that is not (the codecs' decode).
//! - [`Messages`] and [`SequencedMessages`]: iterate over blocks already checked.
//! - `exact4` and `decode4`: the same check for four datagrams at once.
//!
//! ```text
//!   +---------+------------+---------+------------+-----
//!   | len u16 | len bytes  | len u16 | len bytes  | ...
//!   +---------+------------+---------+------------+-----
//! ```
//!
//! Where a block starts depends on the length before it, so checking one datagram is a
//! chain of dependent loads: about one load's latency per message, however wide the
//! processor. Four datagrams have four independent chains, and walking them in lockstep
//! lets their loads overlap. The rx thread receives datagrams in batches, so it has four
//! at hand whenever the feed is busy.

use std::iter::FusedIterator;

/// Byte order of the u16 length in front of each block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockLengths {
    /// MoldUDP64's message blocks.
    BigEndian,
    /// IEX-TP's message blocks.
    LittleEndian,
}

impl BlockLengths {
    /// The length stored in `bytes`.
    #[inline]
    pub const fn read(self, bytes: [u8; 2]) -> u16 {
        match self {
            Self::BigEndian => u16::from_be_bytes(bytes),
            Self::LittleEndian => u16::from_le_bytes(bytes),
        }
    }
}

/// Why blocks are not exactly the count announced; offsets are in the whole input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockError {
    /// The input ended after `found` of `expected` blocks, at `offset`.
    Missing {
        offset: usize,
        expected: u16,
        found: u16,
    },
    /// A block length at `offset` is cut short.
    TruncatedLength { offset: usize },
    /// The block at `offset` claims `length` bytes where `available` are left.
    Overrun {
        offset: usize,
        length: usize,
        available: usize,
    },
}

/// Checks that `blocks` holds `count` well-formed blocks in the byte order `lengths`;
/// `base` is their offset in the input, for errors. Returns the input offset just after
/// the last one (bytes may follow: the caller decides whether that is an error).
#[inline]
pub(crate) fn walk(
    blocks: &[u8],
    count: u16,
    base: usize,
    lengths: BlockLengths,
) -> Result<usize, BlockError> {
    match lengths {
        BlockLengths::BigEndian => walk_in::<Big>(blocks, count, base),
        BlockLengths::LittleEndian => walk_in::<Little>(blocks, count, base),
    }
}

fn walk_in<O: Order>(blocks: &[u8], count: u16, base: usize) -> Result<usize, BlockError> {
    let mut pos = 0usize;
    for found in 0..count {
        let offset = base.saturating_add(pos);
        let Some(&[a, b]) = pos.checked_add(2).and_then(|end| blocks.get(pos..end)) else {
            return Err(if pos >= blocks.len() {
                BlockError::Missing {
                    offset,
                    expected: count,
                    found,
                }
            } else {
                BlockError::TruncatedLength { offset }
            });
        };
        let length = O::len([a, b]);
        let data_start = pos.saturating_add(2);
        let available = blocks.len().saturating_sub(data_start);
        if length > available {
            return Err(BlockError::Overrun {
                offset,
                length,
                available,
            });
        }
        pos = data_start.saturating_add(length);
    }
    Ok(base.saturating_add(pos))
}

/// The block at `offset` of `blocks`: its data and the offset of the next block. `None`
/// when it runs past the end.
#[inline]
pub(crate) fn block_at(
    blocks: &[u8],
    offset: usize,
    lengths: BlockLengths,
) -> Option<(&[u8], usize)> {
    let end = offset.checked_add(2)?;
    let &[a, b] = blocks.get(offset..end)? else {
        return None;
    };
    let data_end = end.checked_add(usize::from(lengths.read([a, b])))?;
    Some((blocks.get(end..data_end)?, data_end))
}

/// The data of the first `count` blocks of some bytes, in order. It stops early (and
/// stays stopped) at a block that runs past the end, which blocks checked by `walk`
/// never do.
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
    remaining: u32,
    lengths: BlockLengths,
}

impl<'a> Messages<'a> {
    /// The first `count` blocks of `blocks`.
    pub(crate) const fn new(blocks: &'a [u8], count: u32, lengths: BlockLengths) -> Self {
        Self {
            rest: blocks,
            remaining: count,
            lengths,
        }
    }

    /// The bytes after the blocks handed out so far.
    pub(crate) const fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.remaining == 0 {
            return None;
        }
        let Some((data, end)) = block_at(self.rest, 0, self.lengths) else {
            self.remaining = 0;
            return None;
        };
        self.rest = self.rest.get(end..).unwrap_or_default();
        self.remaining -= 1;
        Some(data)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Messages<'_> {}
impl FusedIterator for Messages<'_> {}

/// `(sequence, data)` of blocks numbered from a first sequence.
#[derive(Debug, Clone)]
pub struct SequencedMessages<'a> {
    messages: Messages<'a>,
    next: u64,
}

impl<'a> SequencedMessages<'a> {
    /// The first `count` blocks of `blocks`, numbered from `first`.
    pub(crate) const fn new(
        blocks: &'a [u8],
        first: u64,
        count: u32,
        lengths: BlockLengths,
    ) -> Self {
        Self {
            messages: Messages::new(blocks, count, lengths),
            next: first,
        }
    }

    /// The bytes after the blocks handed out so far.
    pub(crate) const fn rest(&self) -> &'a [u8] {
        self.messages.rest()
    }
}

impl<'a> Iterator for SequencedMessages<'a> {
    type Item = (u64, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<(u64, &'a [u8])> {
        let data = self.messages.next()?;
        let sequence = self.next;
        self.next = self.next.wrapping_add(1);
        Some((sequence, data))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.messages.size_hint()
    }
}

impl ExactSizeIterator for SequencedMessages<'_> {}
impl FusedIterator for SequencedMessages<'_> {}

/// Byte order of the u16 block lengths, as a type, for the lockstep loop.
pub(crate) trait Order {
    /// The length stored in `bytes`.
    fn len(bytes: [u8; 2]) -> usize;
}

/// MoldUDP64's big-endian lengths.
pub(crate) struct Big;
/// IEX-TP's little-endian lengths.
pub(crate) struct Little;

impl Order for Big {
    #[inline(always)]
    fn len(bytes: [u8; 2]) -> usize {
        usize::from(u16::from_be_bytes(bytes))
    }
}

impl Order for Little {
    #[inline(always)]
    fn len(bytes: [u8; 2]) -> usize {
        usize::from(u16::from_le_bytes(bytes))
    }
}

/// Far past any block: a length read that fails leaves the position beyond the end.
const POISON: usize = usize::MAX;

/// Offset of the block after the one at `at`; beyond the end when `at` holds no length.
#[inline(always)]
fn next<O: Order>(blocks: &[u8], at: usize) -> usize {
    match blocks.get(at..at + 2) {
        Some(&[a, b]) => at + 2 + O::len([a, b]),
        _ => POISON,
    }
}

/// [`next`] without the bounds check, for the lockstep loop (measured: the checks were
/// a third of its instructions, and their registers spilled).
///
/// # Safety
///
/// `at + 1 < blocks.len()`.
#[inline(always)]
unsafe fn next_unchecked<O: Order>(blocks: &[u8], at: usize) -> usize {
    debug_assert!(at + 1 < blocks.len());
    // SAFETY: the caller guarantees both indices are in bounds.
    let (a, b) = unsafe { (*blocks.get_unchecked(at), *blocks.get_unchecked(at + 1)) };
    at + 2 + O::len([a, b])
}

/// True when `blocks` is exactly `count` whole blocks, starting from block
/// `done` at offset `at`.
#[inline(always)]
fn finish<O: Order>(blocks: &[u8], mut at: usize, done: u16, count: u16) -> bool {
    for _ in done..count {
        if at >= blocks.len() {
            return false;
        }
        at = next::<O>(blocks, at);
    }
    at == blocks.len()
}

/// For each of four datagrams, whether its `blocks` are exactly `count`
/// well-formed blocks: no length cut short, none running past the end, no
/// bytes left over. The same answer as walking each one alone.
#[inline]
pub(crate) fn exact4<O: Order>(blocks: [&[u8]; 4], count: [u16; 4]) -> [bool; 4] {
    let [b0, b1, b2, b3] = blocks;
    let common = count.into_iter().min().unwrap_or(0);
    let (mut p0, mut p1, mut p2, mut p3) = (0, 0, 0, 0);
    // A length can be read at `p` when `p + 2 <= len`, that is `p < len - 1`.
    let limit = |b: &[u8]| b.len().saturating_sub(1);
    let (l0, l1, l2, l3) = (limit(b0), limit(b1), limit(b2), limit(b3));
    let mut done = 0u16;
    // The lockstep part: every position is checked to hold a whole length before the
    // step reads it (so the reads need no check of their own); the first datagram to
    // fail ends it, and each then finishes alone.
    while done < common {
        if p0 >= l0 || p1 >= l1 || p2 >= l2 || p3 >= l3 {
            break;
        }
        // SAFETY: the check above gives `p < len - 1` for each datagram, so both bytes
        // of the length at `p` are inside it.
        unsafe {
            p0 = next_unchecked::<O>(b0, p0);
            p1 = next_unchecked::<O>(b1, p1);
            p2 = next_unchecked::<O>(b2, p2);
            p3 = next_unchecked::<O>(b3, p3);
        }
        done += 1;
    }
    [
        finish::<O>(b0, p0, done, count[0]),
        finish::<O>(b1, p1, done, count[1]),
        finish::<O>(b2, p2, done, count[2]),
        finish::<O>(b3, p3, done, count[3]),
    ]
}

/// Decodes four datagrams with a codec's pieces: `header` checks everything but the
/// blocks and returns the packet with its blocks and their count; `whole` is the
/// codec's one-datagram decode, run again on any datagram whose blocks are not exact
/// (or whose header failed), so each result is exactly what `whole` gives. Lane by
/// lane rather than with array maps, so each packet is moved once.
#[inline]
pub(crate) fn decode4<'a, P, E, O: Order>(
    bufs: [&'a [u8]; 4],
    header: impl Fn(&'a [u8]) -> Result<(P, &'a [u8], u16), E>,
    whole: impl Fn(&'a [u8]) -> Result<P, E>,
) -> [Result<P, E>; 4] {
    let [a, b, c, d] = bufs;
    let (ha, hb, hc, hd) = (header(a), header(b), header(c), header(d));
    let part = |h: &Result<(P, &'a [u8], u16), E>| {
        h.as_ref()
            .map_or((&[][..], 0), |&(_, blocks, count)| (blocks, count))
    };
    let (pa, pb, pc, pd) = (part(&ha), part(&hb), part(&hc), part(&hd));
    let [ea, eb, ec, ed] = exact4::<O>([pa.0, pb.0, pc.0, pd.0], [pa.1, pb.1, pc.1, pd.1]);
    let pick = |head: Result<(P, &'a [u8], u16), E>, exact: bool, buf: &'a [u8]| match head {
        Ok((packet, _, _)) if exact => Ok(packet),
        _ => whole(buf),
    };
    [
        pick(ha, ea, a),
        pick(hb, eb, b),
        pick(hc, ec, c),
        pick(hd, ed, d),
    ]
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// One datagram at a time, the plain way.
    fn exact_one(blocks: &[u8], count: u16) -> bool {
        let mut at = 0usize;
        for _ in 0..count {
            let Some(len) = blocks.get(at..at + 2) else {
                return false;
            };
            at += 2 + usize::from(u16::from_be_bytes([len[0], len[1]]));
            if at > blocks.len() {
                return false;
            }
        }
        at == blocks.len()
    }

    fn blocks(lengths: &[u16]) -> Vec<u8> {
        let mut v = Vec::new();
        for &l in lengths {
            v.extend_from_slice(&l.to_be_bytes());
            v.extend(std::iter::repeat_n(0xAB, usize::from(l)));
        }
        v
    }

    #[test]
    fn agrees_with_one_at_a_time() {
        let good = blocks(&[3, 0, 7, 1, 300]);
        let mut cases: Vec<(Vec<u8>, u16)> = vec![
            (good.clone(), 5),
            (good.clone(), 4),
            (good.clone(), 6),
            (good[..good.len() - 1].to_vec(), 5),
            ([good.clone(), vec![0]].concat(), 5),
            (vec![0], 1),
            (vec![], 0),
            (vec![], 1),
            (blocks(&[0; 40]), 40),
            (blocks(&[u16::MAX]), 1),
        ];
        // Every cut of a good datagram, with its count (every 29th under miri, which runs
        // the unchecked reads about a thousand times slower).
        for cut in (0..good.len()).step_by(if cfg!(miri) { 29 } else { 1 }) {
            cases.push((good[..cut].to_vec(), 5));
        }
        for a in &cases {
            for b in &cases {
                for c in [&cases[0], &cases[3], &cases[7]] {
                    let four = [a, b, c, a];
                    let got = exact4::<Big>(
                        four.map(|(v, _)| v.as_slice()),
                        four.map(|(_, count)| *count),
                    );
                    let want = four.map(|(v, count)| exact_one(v, *count));
                    assert_eq!(got, want, "{four:?}");
                }
            }
        }
    }

    /// Blocks with small random lengths (so some datagrams are whole), then cut or
    /// corrupted at random.
    fn datagram() -> impl proptest::strategy::Strategy<Value = (Vec<u8>, u16)> {
        use proptest::prelude::*;
        (
            proptest::collection::vec(0u16..12, 0..20),
            0usize..4,
            any::<u16>(),
            0i8..3,
        )
            .prop_map(|(lengths, damage, at, count_delta)| {
                let mut v = blocks(&lengths);
                let at = usize::from(at) % v.len().max(1);
                match damage {
                    1 => v.truncate(at),
                    2 if !v.is_empty() => v[at] = v[at].wrapping_add(1),
                    3 => v.push(0),
                    _ => {}
                }
                let count = (lengths.len() as i32 + i32::from(count_delta) - 1).max(0) as u16;
                (v, count)
            })
    }

    proptest::proptest! {
        #[test]
        #[cfg_attr(miri, ignore = "too slow under miri; the exhaustive cases above run there")]
        fn agrees_with_one_at_a_time_on_random_datagrams(
            four in proptest::array::uniform4(datagram()),
            raw in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            raw_count in 0u16..40,
        ) {
            let want = four.each_ref().map(|(v, count)| exact_one(v, *count));
            let got = exact4::<Big>(four.each_ref().map(|(v, _)| v.as_slice()), four.each_ref().map(|(_, c)| *c));
            proptest::prop_assert_eq!(got, want);
            // Raw noise in every lane, lengths pointing anywhere.
            let got = exact4::<Big>([&raw, &raw, &four[0].0, &raw], [raw_count, 1, four[0].1, 0]);
            let want = [exact_one(&raw, raw_count), exact_one(&raw, 1), exact_one(&four[0].0, four[0].1), exact_one(&raw, 0)];
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn the_walker_names_what_is_wrong_in_both_byte_orders() {
        let good = blocks(&[3, 0, 2]);
        assert_eq!(
            walk(&good, 3, 10, BlockLengths::BigEndian),
            Ok(10 + good.len())
        );
        assert_eq!(
            walk(&good, 4, 10, BlockLengths::BigEndian),
            Err(BlockError::Missing {
                offset: 10 + good.len(),
                expected: 4,
                found: 3
            })
        );
        assert_eq!(
            walk(&good[..good.len() - 3], 3, 0, BlockLengths::BigEndian),
            Err(BlockError::TruncatedLength { offset: 7 })
        );
        assert_eq!(
            walk(&good[..4], 1, 0, BlockLengths::BigEndian),
            Err(BlockError::Overrun {
                offset: 0,
                length: 3,
                available: 2
            })
        );
        let little = [3, 0, 1, 2, 3, 0, 0];
        assert_eq!(walk(&little, 2, 0, BlockLengths::LittleEndian), Ok(7));
        let seen: Vec<(u64, &[u8])> =
            SequencedMessages::new(&little, 9, 2, BlockLengths::LittleEndian).collect();
        assert_eq!(seen, [(9, &[1u8, 2, 3][..]), (10, &[][..])]);
        // Stops at a block that runs past the end, and stays stopped.
        let mut cut = Messages::new(&little[..3], 2, BlockLengths::LittleEndian);
        assert_eq!((cut.next(), cut.next()), (None, None));
    }

    #[test]
    fn little_endian_lengths() {
        let le = [2u8, 0, b'h', b'i'];
        assert_eq!(
            exact4::<Little>([&le, &le, &le, &[]], [1, 1, 2, 0]),
            [true, true, false, true]
        );
        assert_eq!(
            exact4::<Big>([&le, &le, &le, &le], [1, 1, 1, 1]),
            [false; 4]
        );
    }
}
