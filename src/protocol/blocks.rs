//! Checking the length-prefixed message blocks of several datagrams at once.
//!
//! MoldUDP64 and IEX-TP carry messages as blocks, each a u16 length and that
//! many bytes. Where a block starts depends on the length before it, so
//! checking one datagram is a chain of dependent loads: about one load's
//! latency per message, however wide the processor. Four datagrams have four
//! independent chains, and walking them in lockstep lets their loads overlap
//! (measured in `benches/ingest.rs`: about 2.4 times the throughput of one
//! at a time). The rx thread receives datagrams in batches, so it has four at
//! hand whenever the feed is busy.

/// Byte order of the u16 block lengths.
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
const POISON: usize = 1 << 40;

/// Offset of the block after the one at `at`; beyond the end when `at` holds no length.
#[inline(always)]
fn next<O: Order>(blocks: &[u8], at: usize) -> usize {
    match blocks.get(at..at.wrapping_add(2)) {
        Some(&[a, b]) => at + 2 + O::len([a, b]),
        _ => POISON,
    }
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
    let mut done = 0u16;
    // The lockstep part: every position is checked to be inside its datagram before
    // the next step reads there; the first datagram to fail ends it, and each then
    // finishes alone.
    while done < common {
        if p0 >= b0.len() || p1 >= b1.len() || p2 >= b2.len() || p3 >= b3.len() {
            break;
        }
        p0 = next::<O>(b0, p0);
        p1 = next::<O>(b1, p1);
        p2 = next::<O>(b2, p2);
        p3 = next::<O>(b3, p3);
        done += 1;
    }
    [
        finish::<O>(b0, p0, done, count[0]),
        finish::<O>(b1, p1, done, count[1]),
        finish::<O>(b2, p2, done, count[2]),
        finish::<O>(b3, p3, done, count[3]),
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
        // Every cut of a good datagram, with its count.
        for cut in 0..good.len() {
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
