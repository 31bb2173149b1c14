//! Model-based test: random operations on several streams, run against the detector and
//! against a plain `BTreeMap` oracle written here, compared after every step.

use std::collections::{BTreeMap, BTreeSet};

use gapless::sequencer::{
    Baseline, Delivered, Detector, Disposition, Frame, Overflow, Sequencing, StreamConfig,
    StreamId, StreamState,
};
use proptest::prelude::*;

/// The oracle: the documented rules, written as plainly as possible.
#[derive(Debug, Clone)]
struct Oracle {
    cfg: StreamConfig,
    state: StreamState,
    epoch: Option<u64>,
    expected: u64,
    horizon: u64,
    pending: BTreeMap<u64, u64>, // first -> last
    /// 0: not collecting; 1: collecting, no base yet; 2: collecting from `expected`.
    collecting: u8,
}

impl Oracle {
    fn new(cfg: StreamConfig) -> Self {
        Self {
            cfg,
            state: StreamState::Unseen,
            epoch: None,
            expected: 0,
            horizon: 0,
            pending: BTreeMap::new(),
            collecting: 0,
        }
    }

    fn seed(&mut self, next: u64) {
        self.collecting = 0;
        self.expected = next;
        self.horizon = next;
        self.state = StreamState::Synced;
    }

    /// Epoch rules and baseline; `Err` is the final disposition.
    fn begin(&mut self, epoch: u64) -> Result<(), Disposition> {
        match self.epoch {
            Some(e) if epoch < e => return Err(Disposition::Stale),
            Some(e) if epoch > e => {
                self.pending.clear();
                self.state = StreamState::Unseen;
                self.collecting = 0;
                self.epoch = Some(epoch);
            }
            Some(_) => {}
            None => self.epoch = Some(epoch),
        }
        if self.state == StreamState::Unseen {
            match self.cfg.baseline {
                Baseline::AdoptFirst => {}
                Baseline::Expect(n) => self.seed(n),
                Baseline::Resync => return Err(Disposition::AwaitingResync),
            }
        }
        Ok(())
    }

    fn drain(&mut self, out: &mut Vec<(u64, u64)>) {
        while let Some((&first, &last)) = self.pending.iter().next() {
            if first > self.expected {
                break;
            }
            self.pending.remove(&first);
            if last >= self.expected {
                out.push((first, last));
                self.expected = last + 1;
                self.horizon = self.horizon.max(self.expected);
            }
        }
    }

    fn settle(&mut self, backfill: bool) {
        if matches!(self.state, StreamState::Unseen | StreamState::ResetRequired) {
            return;
        }
        let gap = !self.pending.is_empty() || self.horizon > self.expected;
        self.state = if !gap {
            StreamState::Synced
        } else if backfill {
            StreamState::Recovering
        } else if self.state == StreamState::Synced {
            StreamState::DirtySyncPending
        } else {
            self.state
        };
    }

    fn ingest(
        &mut self,
        epoch: u64,
        first: u64,
        last: u64,
        backfill: bool,
        out: &mut Vec<(u64, u64)>,
    ) -> Disposition {
        if last < first
            || last == u64::MAX
            || (self.cfg.sequencing == Sequencing::Point && first != last)
        {
            return Disposition::Invalid;
        }
        if let Err(d) = self.begin(epoch) {
            return d;
        }
        if self.state == StreamState::Unseen {
            self.seed(first);
        }
        if self.state == StreamState::ResetRequired {
            match self.collecting {
                0 => return Disposition::DroppedResetRequired,
                1 => {
                    self.expected = first;
                    self.horizon = first;
                    self.collecting = 2;
                }
                _ => {}
            }
            if first < self.expected {
                return Disposition::DroppedResetRequired;
            }
            if self.pending.contains_key(&first) {
                return Disposition::Duplicate;
            }
            self.horizon = self.horizon.max(last + 1);
            if first - self.expected >= self.cfg.window as u64
                || self.pending.len() >= self.cfg.max_buffered
            {
                return if self.cfg.overflow == Overflow::Drop {
                    Disposition::DroppedBeyondWindow
                } else {
                    Disposition::DroppedBufferFull
                };
            }
            self.pending.insert(first, last);
            return Disposition::Buffered;
        }
        if last < self.expected {
            let t = self.cfg.reset_threshold;
            if t != 0 && self.expected - 1 - last >= t {
                self.state = StreamState::ResetRequired;
                return Disposition::ResetSuspected;
            }
            return Disposition::Duplicate;
        }
        if first <= self.expected {
            let overlap = first < self.expected;
            out.push((first, last));
            self.expected = last + 1;
            self.horizon = self.horizon.max(self.expected);
            self.drain(out);
            self.settle(backfill);
            return if overlap {
                Disposition::PartialOverlap
            } else {
                Disposition::Processed
            };
        }
        if self.pending.contains_key(&first) {
            return Disposition::Duplicate;
        }
        self.horizon = self.horizon.max(last + 1);
        if first - self.expected >= self.cfg.window as u64
            || self.pending.len() >= self.cfg.max_buffered
        {
            if self.cfg.overflow == Overflow::Drop {
                // Dropped, and missing like everything else up to the horizon.
                self.settle(backfill);
                return Disposition::DroppedBeyondWindow;
            }
            self.state = StreamState::ResetRequired;
            return Disposition::DroppedBufferFull;
        }
        self.pending.insert(first, last);
        self.settle(backfill);
        Disposition::Buffered
    }

    fn heartbeat(&mut self, epoch: u64, next: u64) -> Disposition {
        if let Err(d) = self.begin(epoch) {
            return d;
        }
        if self.state == StreamState::Unseen {
            self.seed(next);
        }
        if self.state == StreamState::ResetRequired {
            self.horizon = self.horizon.max(next);
            return Disposition::DroppedResetRequired;
        }
        if next < self.expected {
            let t = self.cfg.reset_threshold;
            if t != 0 && self.expected - next >= t {
                self.state = StreamState::ResetRequired;
                return Disposition::ResetSuspected;
            }
            return Disposition::Processed;
        }
        self.horizon = self.horizon.max(next);
        self.settle(false);
        Disposition::Processed
    }

    fn resync(&mut self, next: u64, out: &mut Vec<(u64, u64)>) {
        let unseen = self.state == StreamState::Unseen;
        let window = self.cfg.window as u64;
        if unseen {
            self.pending.clear();
        } else if next < self.expected {
            let limit = next + window;
            self.pending.retain(|&first, _| first < limit);
        }
        let horizon = if unseen { next } else { self.horizon.max(next) };
        self.seed(next);
        self.horizon = horizon;
        self.drain(out);
        self.settle(false);
    }

    fn begin_resync(&mut self) {
        if self.state != StreamState::Unseen {
            self.pending.clear();
            self.horizon = self.expected;
            self.state = StreamState::ResetRequired;
            self.collecting = 1;
        }
    }

    fn missing(&self) -> Vec<(u64, u64)> {
        if self.state == StreamState::Unseen {
            return Vec::new();
        }
        let mut ranges = Vec::new();
        let mut cursor = self.expected;
        for (&first, &last) in &self.pending {
            if first > cursor {
                ranges.push((cursor, first - 1));
            }
            cursor = cursor.max(last + 1);
        }
        if self.horizon > cursor {
            ranges.push((cursor, self.horizon - 1));
        }
        ranges
    }
}

#[derive(Debug, Clone)]
enum Op {
    Ingest {
        stream: usize,
        epoch: i8,
        offset: i64,
        len: u64,
    },
    Backfill {
        stream: usize,
        epoch: i8,
        offset: i64,
        len: u64,
    },
    Heartbeat {
        stream: usize,
        epoch: i8,
        offset: i64,
    },
    Resync {
        stream: usize,
        offset: i64,
    },
    BeginResync {
        stream: usize,
    },
}

fn epoch_delta() -> impl Strategy<Value = i8> {
    prop_oneof![40 => Just(0i8), 1 => Just(1i8), 1 => Just(-1i8)]
}

fn op() -> impl Strategy<Value = Op> {
    let stream = 0usize..STREAMS;
    let offset = prop_oneof![20 => -4i64..24, 2 => -80i64..-4, 1 => 24i64..200];
    let len = prop_oneof![4 => Just(0u64), 1 => 0u64..6];
    prop_oneof![
        12 => (stream.clone(), epoch_delta(), offset.clone(), len.clone())
            .prop_map(|(stream, epoch, offset, len)| Op::Ingest { stream, epoch, offset, len }),
        4 => (stream.clone(), epoch_delta(), offset.clone(), len)
            .prop_map(|(stream, epoch, offset, len)| Op::Backfill { stream, epoch, offset, len }),
        2 => (stream.clone(), epoch_delta(), -2i64..30)
            .prop_map(|(stream, epoch, offset)| Op::Heartbeat { stream, epoch, offset }),
        1 => (stream.clone(), -10i64..30).prop_map(|(stream, offset)| Op::Resync { stream, offset }),
        1 => stream.prop_map(|stream| Op::BeginResync { stream }),
    ]
}

const STREAMS: usize = 4;

fn configs() -> [StreamConfig; STREAMS] {
    [
        StreamConfig::point(16)
            .with_max_buffered(12)
            .with_reset_threshold(50),
        StreamConfig::point(8).with_baseline(Baseline::Expect(0)),
        StreamConfig::range(32).with_reset_threshold(60),
        StreamConfig::point(8)
            .with_max_buffered(6)
            .with_baseline(Baseline::Expect(0))
            .with_overflow(Overflow::Drop),
    ]
}

fn at(base: u64, offset: i64) -> u64 {
    base.saturating_add_signed(offset)
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let cfgs = configs();
    let mut detector: Detector<u64> = Detector::new();
    let ids: Vec<StreamId> = cfgs.iter().map(|c| detector.add_stream(*c)).collect();
    let mut oracles: Vec<Oracle> = cfgs.iter().map(|c| Oracle::new(*c)).collect();
    // Last delivered sequence per stream, reset when the stream is re-based.
    let mut last_seen: Vec<Option<u64>> = vec![None; STREAMS];
    let mut out: Vec<Delivered<u64>> = Vec::new();
    let mut expect: Vec<(u64, u64)> = Vec::new();
    let mut token = 0u64;
    // Payload tokens held by the detector: every one leaves exactly once, delivered or
    // discarded, so a caller releasing resources per payload never leaks nor double-frees.
    let mut inside: BTreeSet<u64> = BTreeSet::new();

    for op in ops {
        out.clear();
        expect.clear();
        let (s, kind) = match *op {
            Op::Ingest {
                stream,
                epoch,
                offset,
                len,
            }
            | Op::Backfill {
                stream,
                epoch,
                offset,
                len,
            } => {
                let o = &mut oracles[stream];
                let epoch = o.epoch.unwrap_or(1).saturating_add_signed(epoch.into());
                let first = at(o.expected, offset);
                let last = if cfgs[stream].sequencing == Sequencing::Point {
                    first
                } else {
                    first + len
                };
                token += 1;
                let frame = Frame::range(first, last, token);
                let backfill = matches!(op, Op::Backfill { .. });
                let before = o.state;
                let want = if backfill && o.state == StreamState::ResetRequired {
                    None
                } else {
                    Some(o.ingest(epoch, first, last, backfill, &mut expect))
                };
                let got = if backfill {
                    detector
                        .backfill(ids[stream], epoch, frame, &mut out)
                        .ok()
                        .map(|r| r.outcome)
                } else {
                    Some(detector.ingest(ids[stream], epoch, frame, &mut out))
                };
                prop_assert_eq!(
                    got.map(|g| g.disposition),
                    want,
                    "{:?} from {:?}",
                    op,
                    before
                );
                if got.is_some_and(|g| {
                    matches!(
                        g.disposition,
                        Disposition::Processed
                            | Disposition::PartialOverlap
                            | Disposition::Buffered
                    )
                }) {
                    inside.insert(token);
                }
                if got.is_some_and(|g| g.epoch_reset) {
                    last_seen[stream] = None;
                }
                (stream, "frame")
            }
            Op::Heartbeat {
                stream,
                epoch,
                offset,
            } => {
                let o = &mut oracles[stream];
                let epoch = o.epoch.unwrap_or(1).saturating_add_signed(epoch.into());
                let next = at(o.expected, offset);
                let want = o.heartbeat(epoch, next);
                let got = detector.heartbeat(ids[stream], epoch, next);
                prop_assert_eq!(got.disposition, want, "{:?}", op);
                if got.epoch_reset {
                    last_seen[stream] = None;
                }
                (stream, "heartbeat")
            }
            Op::BeginResync { stream } => {
                oracles[stream].begin_resync();
                detector.begin_resync(ids[stream]);
                (stream, "begin_resync")
            }
            Op::Resync { stream, offset } => {
                let o = &mut oracles[stream];
                let next = at(o.expected, offset);
                o.resync(next, &mut expect);
                detector.resynchronize(ids[stream], next, &mut out);
                last_seen[stream] = next.checked_sub(1);
                (stream, "resync")
            }
        };
        for d in &out {
            prop_assert!(
                inside.remove(&d.payload),
                "delivered {} twice or never taken",
                d.payload
            );
        }
        for id in &ids {
            let mut gone = Vec::new();
            detector.take_discarded(*id, |p| gone.push(p));
            for p in gone {
                prop_assert!(inside.remove(&p), "discarded {} twice or never taken", p);
            }
        }
        let held: usize = ids.iter().map(|id| detector.buffered(*id)).sum();
        prop_assert_eq!(held, inside.len(), "payloads leaked");
        let got: Vec<(u64, u64)> = out.iter().map(|d| (d.first, d.last)).collect();
        prop_assert_eq!(&got, &expect, "{} delivered", kind);
        // Delivered frames strictly advance, never twice, never across a gap.
        for d in &out {
            if let Some(prev) = last_seen[s] {
                prop_assert!(d.last > prev, "{:?} after {}", d, prev);
                prop_assert!(d.first <= prev + 1, "{:?} jumps a gap after {}", d, prev);
                prop_assert_eq!(d.fresh_from, prev + 1);
            }
            last_seen[s] = Some(d.last);
        }
        for (i, o) in oracles.iter().enumerate() {
            let id = ids[i];
            prop_assert_eq!(detector.state(id), o.state, "stream {} state", i);
            let missing: Vec<(u64, u64)> = detector.missing(id).map(|r| (r.from, r.to)).collect();
            prop_assert_eq!(missing, o.missing(), "stream {} missing", i);
            let stats = detector.stats(id);
            prop_assert_eq!(stats.buffered, o.pending.len(), "stream {} buffered", i);
            prop_assert!(
                stats.buffered <= cfgs[i].max_buffered && stats.buffered <= cfgs[i].window
            );
            if o.state != StreamState::Unseen {
                prop_assert_eq!(detector.expected(id), Some(o.expected));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000),
        max_shrink_iters: 20_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn detector_matches_the_oracle(ops in proptest::collection::vec(op(), 1..120)) {
        run(&ops)?;
    }
}
