//! Seeded fault injection, and the exact record of what was injected.
//!
//! Faults apply to data packets only: heartbeats and end-of-session packets
//! always go out. For each data packet the publisher asks [`FaultPlan`] for
//! its fate, in this order:
//!
//! 1. inside a loss burst, or hit by the random loss: dropped;
//! 2. hit by the reorder probability (and no packet already held back): held
//!    back and sent after the next 1..=`reorder_depth` packets that go out;
//! 3. hit by the duplicate probability: sent twice in a row;
//! 4. otherwise sent once.
//!
//! Every decision draws from one [`XorShift`] seeded from
//! [`FaultConfig::seed`], in packet order, so a run with the same
//! configuration injects the same faults. The re-request server draws its
//! drop-answer decisions from a second generator derived from the same
//! seed, so request timing never shifts the publisher's decisions.
//!
//! [`Injected`] records, per session, the sequence ranges that were lost,
//! duplicated and actually reordered (a held packet counts only when at
//! least one later packet went out before it).

use crate::protocol::moldudp64::Session;

/// A small xorshift64 generator: deterministic, no external crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator for `seed`; every seed, 0 included, gives a usable state.
    pub fn new(seed: u64) -> Self {
        Self(super::itch::mix64(seed) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p` (0 never draws, so it never shifts the sequence).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// A value in `low..=high` (`low` when `high <= low`).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        match high.checked_sub(low).and_then(|span| span.checked_add(1)) {
            Some(span) if span > 1 => low.saturating_add(self.next_u64() % span),
            _ => low,
        }
    }
}

/// Which faults to inject, and the seed they are drawn from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Seed of every random decision.
    pub seed: u64,
    /// Probability that a data packet is dropped.
    pub loss: f64,
    /// Packets dropped in a row by one burst (0: no bursts).
    pub burst_len: u32,
    /// Mean number of data packets between the starts of two bursts; each
    /// gap is drawn from `burst_every/2 ..= 3*burst_every/2` (0: no bursts).
    pub burst_every: u64,
    /// Probability that a data packet is held back and sent late.
    pub reorder: f64,
    /// A held packet goes out after 1..=`reorder_depth` later packets.
    pub reorder_depth: u32,
    /// Probability that a data packet is sent twice.
    pub duplicate: f64,
    /// Start a new session (new name, sequence back to 1) after this many
    /// messages of each session; `None` never restarts.
    pub restart_after: Option<u64>,
    /// Probability that the re-request server drops a request it would serve.
    pub drop_answers: f64,
    /// Whether the re-request server starts down (it then ignores every
    /// request; see `MoldSim::set_rerequest_down`).
    pub rerequest_down: bool,
}

impl Default for FaultConfig {
    /// No faults, seed 1.
    fn default() -> Self {
        Self {
            seed: 1,
            loss: 0.0,
            burst_len: 0,
            burst_every: 0,
            reorder: 0.0,
            reorder_depth: 3,
            duplicate: 0.0,
            restart_after: None,
            drop_answers: 0.0,
            rerequest_down: false,
        }
    }
}

/// What one line does to the packets the publisher sends on it, on top of the feed's own
/// [`FaultConfig`] (which every line shares: a packet it drops is on no line).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineFaults {
    /// Seed of the line's random decisions.
    pub seed: u64,
    /// Probability that the line loses a data packet.
    pub loss: f64,
    /// Data packets the line loses in a row by one burst (0: no bursts).
    pub burst_len: u32,
    /// Mean number of data packets between the starts of two bursts (0: no bursts).
    pub burst_every: u64,
    /// Every datagram reaches the line this much later than it was published.
    pub delay: std::time::Duration,
    /// The line carries nothing at all from this data packet on (0-based): a dead line.
    pub dead_after: Option<u64>,
}

impl Default for LineFaults {
    /// A clean line with no delay, seed 1.
    fn default() -> Self {
        Self {
            seed: 1,
            loss: 0.0,
            burst_len: 0,
            burst_every: 0,
            delay: std::time::Duration::ZERO,
            dead_after: None,
        }
    }
}

impl LineFaults {
    /// The plan of the line's loss decisions.
    pub(crate) fn plan(&self) -> FaultPlan {
        FaultPlan::new(FaultConfig {
            seed: self.seed,
            loss: self.loss,
            burst_len: self.burst_len,
            burst_every: self.burst_every,
            reorder: 0.0,
            duplicate: 0.0,
            ..FaultConfig::default()
        })
    }
}

/// What happens to one data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketFate {
    /// Sent once.
    Send,
    /// Never sent; `burst` tells whether a loss burst dropped it.
    Drop {
        /// Dropped by a burst rather than by the random loss.
        burst: bool,
    },
    /// Held back until `after` later packets have gone out.
    Hold {
        /// Packets to send before this one (at least 1).
        after: u32,
    },
    /// Sent twice in a row.
    Duplicate,
}

/// The publisher's fault decisions, one data packet at a time.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    config: FaultConfig,
    rng: XorShift,
    until_burst: u64,
    burst_left: u32,
}

impl FaultPlan {
    /// A plan for `config`.
    pub fn new(config: FaultConfig) -> Self {
        let mut plan = Self {
            config,
            rng: XorShift::new(config.seed),
            until_burst: 0,
            burst_left: 0,
        };
        plan.until_burst = plan.next_burst_gap();
        plan
    }

    fn bursts_enabled(&self) -> bool {
        self.config.burst_len > 0 && self.config.burst_every > 0
    }

    fn next_burst_gap(&mut self) -> u64 {
        if !self.bursts_enabled() {
            return u64::MAX;
        }
        let every = self.config.burst_every;
        self.rng
            .between((every / 2).max(1), every.saturating_add(every / 2))
    }

    /// The fate of the next data packet; `can_hold` is false while another
    /// packet is already held back.
    pub fn packet_fate(&mut self, can_hold: bool) -> PacketFate {
        if self.bursts_enabled() {
            if self.burst_left == 0 {
                self.until_burst = self.until_burst.saturating_sub(1);
                if self.until_burst == 0 {
                    self.burst_left = self.config.burst_len;
                    self.until_burst = self.next_burst_gap();
                }
            }
            if self.burst_left > 0 {
                self.burst_left -= 1;
                return PacketFate::Drop { burst: true };
            }
        }
        if self.rng.chance(self.config.loss) {
            return PacketFate::Drop { burst: false };
        }
        if can_hold && self.rng.chance(self.config.reorder) {
            let depth = u64::from(self.config.reorder_depth.max(1));
            let after = u32::try_from(self.rng.between(1, depth)).unwrap_or(1);
            return PacketFate::Hold { after };
        }
        if self.rng.chance(self.config.duplicate) {
            return PacketFate::Duplicate;
        }
        PacketFate::Send
    }
}

/// Inclusive range `first..=last` of sequence numbers of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeqRange {
    /// Session the sequence numbers belong to.
    pub session: Session,
    /// First sequence number.
    pub first: u64,
    /// Last sequence number (inclusive).
    pub last: u64,
}

impl SeqRange {
    /// Number of sequence numbers in the range.
    pub fn len(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1)
    }

    /// Always false: a range holds at least one sequence number.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `sequence` of `session` lies in the range.
    pub fn contains(&self, session: Session, sequence: u64) -> bool {
        self.session == session && (self.first..=self.last).contains(&sequence)
    }
}

/// A session restart the publisher performed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restart {
    /// The session that ended (without an end-of-session packet).
    pub from: Session,
    /// The session that started, at sequence 1.
    pub to: Session,
    /// Messages published over the whole run before the restart.
    pub after_messages: u64,
}

/// Exactly what the simulator injected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Injected {
    /// Sequences never sent on multicast, merged into maximal ranges per
    /// session, in publishing order.
    pub lost: Vec<SeqRange>,
    /// Data packets dropped.
    pub lost_packets: u64,
    /// Of `lost_packets`, those dropped by a burst.
    pub burst_packets: u64,
    /// Data packets sent twice, one range per packet.
    pub duplicated: Vec<SeqRange>,
    /// Data packets that went out after at least one later packet.
    pub reordered: Vec<SeqRange>,
    /// Session restarts, in order.
    pub restarts: Vec<Restart>,
    /// Requests the re-request server would have served but dropped.
    pub answers_dropped: u64,
    /// Requests that arrived while the re-request server was down.
    pub requests_while_down: u64,
    /// Per line, data packets it lost on its own (its loss, bursts, or dead), beyond
    /// those the feed lost on every line; empty until a line loses one. A packet every
    /// line lost is in `lost` too.
    pub line_lost_packets: Vec<u64>,
    /// How much later than its line's delay a delayed datagram went out at most (the
    /// publisher thread was not scheduled in time): the lag a handler saw is the delay
    /// plus up to this.
    pub line_delay_overrun: std::time::Duration,
}

impl Injected {
    /// Number of messages lost on multicast.
    pub fn lost_messages(&self) -> u64 {
        self.lost.iter().map(SeqRange::len).sum()
    }

    /// Every lost sequence number of `session`, in order.
    pub fn lost_sequences(&self, session: Session) -> impl Iterator<Item = u64> + '_ {
        self.lost
            .iter()
            .filter(move |range| range.session == session)
            .flat_map(|range| range.first..=range.last)
    }

    /// Of the sequences `first..=last` of `session`, how many were lost on multicast.
    pub fn lost_within(&self, session: Session, first: u64, last: u64) -> u64 {
        self.lost
            .iter()
            .filter(|r| r.session == session && r.first <= last && first <= r.last)
            .map(|r| r.last.min(last) - r.first.max(first) + 1)
            .sum()
    }

    /// Whether `sequence` of `session` was lost on multicast.
    pub fn is_lost(&self, session: Session, sequence: u64) -> bool {
        self.lost
            .iter()
            .any(|range| range.contains(session, sequence))
    }

    /// Records a dropped packet, merging it with the previous range when
    /// they touch.
    pub(crate) fn record_loss(&mut self, range: SeqRange, burst: bool) {
        self.lost_packets = self.lost_packets.saturating_add(1);
        if burst {
            self.burst_packets = self.burst_packets.saturating_add(1);
        }
        if let Some(previous) = self.lost.last_mut()
            && previous.session == range.session
            && previous.last.checked_add(1) == Some(range.first)
        {
            previous.last = range.last;
            return;
        }
        self.lost.push(range);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn fates(config: FaultConfig, n: usize) -> Vec<PacketFate> {
        let mut plan = FaultPlan::new(config);
        (0..n).map(|_| plan.packet_fate(true)).collect()
    }

    #[test]
    fn same_seed_same_faults() {
        let config = FaultConfig {
            seed: 7,
            loss: 0.1,
            reorder: 0.1,
            duplicate: 0.1,
            ..FaultConfig::default()
        };
        let a = fates(config, 1_000);
        assert_eq!(a, fates(config, 1_000));
        assert_ne!(a, fates(FaultConfig { seed: 8, ..config }, 1_000));
        let drops = a
            .iter()
            .filter(|f| matches!(f, PacketFate::Drop { .. }))
            .count();
        assert!((50..150).contains(&drops), "{drops}");
        assert!(
            fates(FaultConfig::default(), 100)
                .iter()
                .all(|f| *f == PacketFate::Send)
        );
    }

    #[test]
    fn bursts_drop_consecutive_packets() {
        let config = FaultConfig {
            burst_len: 4,
            burst_every: 20,
            ..FaultConfig::default()
        };
        let f = fates(config, 200);
        let drops = f
            .iter()
            .filter(|f| **f == PacketFate::Drop { burst: true })
            .count();
        assert!(drops >= 20 && drops % 4 == 0, "{drops}");
        let first = f.iter().position(|f| *f != PacketFate::Send).unwrap();
        assert!(
            f[first..first + 4]
                .iter()
                .all(|f| matches!(f, PacketFate::Drop { .. }))
        );
    }

    #[test]
    fn losses_merge_per_session() {
        let a = Session::from_ascii(b"A").unwrap();
        let b = Session::from_ascii(b"B").unwrap();
        let mut injected = Injected::default();
        injected.record_loss(
            SeqRange {
                session: a,
                first: 1,
                last: 3,
            },
            false,
        );
        injected.record_loss(
            SeqRange {
                session: a,
                first: 4,
                last: 4,
            },
            true,
        );
        injected.record_loss(
            SeqRange {
                session: b,
                first: 5,
                last: 6,
            },
            false,
        );
        injected.record_loss(
            SeqRange {
                session: b,
                first: 9,
                last: 9,
            },
            false,
        );
        assert_eq!(injected.lost.len(), 3);
        assert_eq!(injected.lost_messages(), 7);
        assert_eq!(injected.lost_packets, 4);
        assert_eq!(injected.burst_packets, 1);
        assert_eq!(injected.lost_sequences(b).collect::<Vec<_>>(), [5, 6, 9]);
        assert!(injected.is_lost(a, 4) && !injected.is_lost(a, 5));
    }
}
