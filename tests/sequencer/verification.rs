//! The gap-detection verification list, one named test a case, plus the epoch, wrap,
//! range and linked-range behaviour the venues rely on.

use gapless::sequencer::{
    BackfillError, Baseline, Delivered, Detector, Disposition, Frame, SeqRange, StreamConfig,
    StreamId, StreamState,
};

const E: u64 = 0;

fn point() -> (Detector<u64>, StreamId) {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::point(64).with_reset_threshold(1000));
    (d, s)
}

fn seqs(out: &[Delivered<u64>]) -> Vec<u64> {
    out.iter().map(|f| f.first).collect()
}

fn missing(d: &Detector<u64>, s: StreamId) -> Vec<(u64, u64)> {
    d.missing(s).map(|r| (r.from, r.to)).collect()
}

fn ingest(
    d: &mut Detector<u64>,
    s: StreamId,
    seq: u64,
    out: &mut Vec<Delivered<u64>>,
) -> Disposition {
    d.ingest(s, E, Frame::point(seq, seq), out).disposition
}

#[test]
fn in_order_baseline() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    assert_eq!(ingest(&mut d, s, 100, &mut out), Disposition::Processed);
    assert_eq!(out.len(), 1);
    out.clear();
    assert_eq!(ingest(&mut d, s, 101, &mut out), Disposition::Processed);
    assert_eq!(seqs(&out), [101], "one frame released per call");
    assert_eq!(d.state(s), StreamState::Synced);
    assert_eq!(d.expected(s), Some(102));
    assert!(d.is_trading_authorized(s));
}

#[test]
fn gap_is_detected_and_buffered() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 100, &mut out);
    out.clear();
    let outcome = d.ingest(s, E, Frame::point(103, 103), &mut out);
    assert_eq!(outcome.disposition, Disposition::Buffered);
    assert_eq!(outcome.new_gap, Some(SeqRange::new(101, 102)));
    assert_eq!(missing(&d, s), [(101, 102)]);
    assert!(out.is_empty(), "nothing released across a gap");
    assert_eq!(d.state(s), StreamState::DirtySyncPending);
    assert!(!d.is_trading_authorized(s));
}

#[test]
fn missing_ranges_exclude_buffered_frames() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    for seq in [100, 103, 106] {
        ingest(&mut d, s, seq, &mut out);
    }
    assert_eq!(missing(&d, s), [(101, 102), (104, 105)]);
    assert_eq!(d.stats(s).gaps, 2);
    assert_eq!(d.stats(s).missing, 4);
}

#[test]
fn full_backfill_releases_in_order_and_syncs() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 100, &mut out);
    ingest(&mut d, s, 103, &mut out);
    out.clear();
    let r = d.backfill(s, E, Frame::point(101, 101), &mut out).unwrap();
    assert!(!r.is_synced);
    let r = d.backfill(s, E, Frame::point(102, 102), &mut out).unwrap();
    assert_eq!(seqs(&out), [101, 102, 103]);
    assert!(r.is_synced);
    assert_eq!(d.state(s), StreamState::Synced);
    assert_eq!(d.stats(s).recovered, 2);
}

#[test]
fn partial_backfill_leaves_recovering() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 100, &mut out);
    ingest(&mut d, s, 103, &mut out);
    let r = d.backfill(s, E, Frame::point(101, 101), &mut out).unwrap();
    assert!(!r.is_synced);
    assert_eq!(r.state, StreamState::Recovering);
    assert_eq!(missing(&d, s), [(102, 102)]);
}

#[test]
fn buffer_bound_latches_reset_required() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::point(64).with_max_buffered(2));
    let mut out = Vec::new();
    ingest(&mut d, s, 100, &mut out);
    assert_eq!(ingest(&mut d, s, 102, &mut out), Disposition::Buffered);
    assert_eq!(ingest(&mut d, s, 103, &mut out), Disposition::Buffered);
    assert_eq!(
        ingest(&mut d, s, 104, &mut out),
        Disposition::DroppedBufferFull
    );
    assert_eq!(d.state(s), StreamState::ResetRequired);
    assert_eq!(d.stats(s).buffered, 2, "buffer still 2");
    assert_eq!(
        ingest(&mut d, s, 105, &mut out),
        Disposition::DroppedResetRequired
    );
    assert_eq!(
        d.backfill(s, E, Frame::point(101, 101), &mut out),
        Err(BackfillError::ResetRequired(s.index() as u32))
    );
    assert_eq!(d.stats(s).overflows, 1);
}

#[test]
fn frame_beyond_the_window_overflows_without_memory() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 1, &mut out);
    assert_eq!(
        ingest(&mut d, s, 1 + 1_000_000_000, &mut out),
        Disposition::DroppedBufferFull
    );
    assert_eq!(d.stats(s).buffered, 0);
    assert_eq!(d.state(s), StreamState::ResetRequired);
    // Only a resync clears it, and the evidence of the hole survives it.
    out.clear();
    d.resynchronize(s, 500, &mut out);
    assert_eq!(d.state(s), StreamState::DirtySyncPending);
    assert_eq!(missing(&d, s), [(500, 1_000_000_001)]);
}

#[test]
fn restart_is_reset_suspected_not_duplicates() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 5_000_000, &mut out);
    out.clear();
    assert_eq!(ingest(&mut d, s, 1, &mut out), Disposition::ResetSuspected);
    assert!(out.is_empty(), "nothing released");
    assert_eq!(d.state(s), StreamState::ResetRequired);
}

#[test]
fn backward_jump_below_threshold_is_duplicate() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 5_000_000, &mut out);
    assert_eq!(
        ingest(&mut d, s, 5_000_000 - 999, &mut out),
        Disposition::Duplicate
    );
    assert_eq!(d.state(s), StreamState::Synced);
    assert_eq!(
        ingest(&mut d, s, 5_000_000 - 1000, &mut out),
        Disposition::ResetSuspected
    );
}

#[test]
fn heartbeat_reveals_tail_loss() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 100, &mut out);
    let outcome = d.heartbeat(s, E, 105);
    assert_eq!(outcome.new_gap, Some(SeqRange::new(101, 104)));
    assert_eq!(missing(&d, s), [(101, 104)]);
    assert_eq!(d.stats(s).buffered, 0);
    assert_eq!(d.state(s), StreamState::DirtySyncPending);
}

#[test]
fn heartbeat_at_expected_is_no_gap() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 100, &mut out);
    let outcome = d.heartbeat(s, E, 101);
    assert_eq!(outcome.new_gap, None);
    assert!(missing(&d, s).is_empty());
    assert_eq!(d.state(s), StreamState::Synced);
}

#[test]
fn range_frames_in_sequence() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::range(64));
    let mut out = Vec::new();
    let o = d.ingest(s, E, Frame::range(100, 104, 0u64), &mut out);
    assert_eq!(o.disposition, Disposition::Processed);
    let o = d.ingest(s, E, Frame::range(105, 109, 1), &mut out);
    assert_eq!(o.disposition, Disposition::Processed);
    assert_eq!(d.expected(s), Some(110));
}

#[test]
fn range_frames_with_a_gap() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::range(64));
    let mut out = Vec::new();
    d.ingest(s, E, Frame::range(100, 104, 0u64), &mut out);
    let o = d.ingest(s, E, Frame::range(107, 109, 1), &mut out);
    assert_eq!(o.disposition, Disposition::Buffered);
    assert_eq!(missing(&d, s), [(105, 106)]);
}

#[test]
fn range_partial_overlap_after_resync_is_applied() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::range(64).with_baseline(Baseline::Resync));
    let mut out = Vec::new();
    assert_eq!(
        d.ingest(s, E, Frame::range(990, 1000, 0u64), &mut out)
            .disposition,
        Disposition::AwaitingResync
    );
    d.resynchronize(s, 1001, &mut out);
    let o = d.ingest(s, E, Frame::range(998, 1005, 1), &mut out);
    assert_eq!(o.disposition, Disposition::PartialOverlap);
    assert_eq!(out.last().map(|f| f.fresh_from), Some(1001));
    assert_eq!(d.expected(s), Some(1006));
    let o = d.ingest(s, E, Frame::range(990, 1000, 2), &mut out);
    assert_eq!(o.disposition, Disposition::Duplicate);
}

#[test]
fn range_wholly_below_after_resync_is_duplicate() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::range(64));
    let mut out = Vec::new();
    d.resynchronize(s, 1001, &mut out);
    assert_eq!(
        d.ingest(s, E, Frame::range(990, 1000, 0u64), &mut out)
            .disposition,
        Disposition::Duplicate
    );
    assert_eq!(d.state(s), StreamState::Synced);
}

#[test]
fn streams_are_independent() {
    let mut d = Detector::new();
    let a = d.add_stream(StreamConfig::point(64));
    let b = d.add_stream(StreamConfig::point(64));
    let mut out = Vec::new();
    ingest(&mut d, a, 1, &mut out);
    ingest(&mut d, b, 1, &mut out);
    ingest(&mut d, a, 5, &mut out);
    ingest(&mut d, b, 2, &mut out);
    assert_eq!(d.state(a), StreamState::DirtySyncPending);
    assert_eq!(d.state(b), StreamState::Synced);
    assert!(d.is_trading_authorized(b));
    assert!(!d.is_trading_authorized(a));
}

#[test]
fn unknown_stream_is_not_authorized() {
    let (mut d, _) = point();
    let mut other = Detector::<u64>::new();
    other.add_stream(StreamConfig::point(8));
    let foreign = other.add_stream(StreamConfig::point(8));
    assert!(!d.is_trading_authorized(foreign));
    assert_eq!(d.state(foreign), StreamState::Unseen);
    let mut out = Vec::new();
    assert_eq!(
        ingest(&mut d, foreign, 1, &mut out),
        Disposition::UnknownStream
    );
}

#[test]
fn never_seen_stream_is_not_authorized() {
    let (d, s) = point();
    assert_eq!(d.state(s), StreamState::Unseen);
    assert!(!d.is_trading_authorized(s));
    assert_eq!(d.expected(s), None);
}

#[test]
fn newer_epoch_resets_and_older_is_stale() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    for seq in 1000..1010 {
        ingest(&mut d, s, seq, &mut out);
    }
    ingest(&mut d, s, 1020, &mut out);
    out.clear();
    // The venue restarted under a new epoch at sequence 1: a reset, never duplicates.
    let o = d.ingest(s, 1, Frame::point(1, 1), &mut out);
    assert!(o.epoch_reset);
    assert_eq!(o.disposition, Disposition::Processed);
    assert_eq!(seqs(&out), [1]);
    assert_eq!(d.state(s), StreamState::Synced);
    assert_eq!(d.stats(s).buffered, 0, "old epoch's buffer dropped");
    assert_eq!(d.stats(s).resets, 1);
    let o = d.ingest(s, 0, Frame::point(1011, 0), &mut out);
    assert_eq!(o.disposition, Disposition::Stale);
    assert_eq!(d.stats(s).stale, 1);
}

#[test]
fn newer_epoch_waits_for_resync_when_configured() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::point(64).with_baseline(Baseline::Resync));
    let mut out = Vec::new();
    d.resynchronize_epoch(s, 7, 10, &mut out);
    assert_eq!(
        d.ingest(s, 7, Frame::point(10, 0u64), &mut out).disposition,
        Disposition::Processed
    );
    let o = d.ingest(s, 8, Frame::point(1, 0), &mut out);
    assert_eq!(o.disposition, Disposition::AwaitingResync);
    assert!(o.epoch_reset);
    assert_eq!(d.state(s), StreamState::Unseen);
}

#[test]
fn expect_baseline_reports_everything_before_the_first_frame() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::point(64).with_baseline(Baseline::Expect(1)));
    let mut out = Vec::new();
    assert_eq!(ingest(&mut d, s, 5, &mut out), Disposition::Buffered);
    assert_eq!(missing(&d, s), [(1, 4)]);
}

#[test]
fn resync_applies_buffered_frames_after_it() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 1, &mut out);
    for seq in [10, 11, 12, 20] {
        ingest(&mut d, s, seq, &mut out);
    }
    out.clear();
    let n = d.resynchronize(s, 11, &mut out);
    assert_eq!(n, 2);
    assert_eq!(seqs(&out), [11, 12]);
    assert_eq!(missing(&d, s), [(13, 19)]);
    assert_eq!(d.state(s), StreamState::DirtySyncPending);
    assert_eq!(d.stats(s).buffered, 1);
}

#[test]
fn linked_range_follows_prev() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::linked(1024));
    let mut out = Vec::new();
    // Futures rule: resync at the snapshot's lastUpdateId L; first event has U <= L <= u.
    d.resynchronize(s, 500, &mut out);
    assert_eq!(
        d.ingest(s, E, Frame::linked(480, 499, 470, 0u64), &mut out)
            .disposition,
        Disposition::Duplicate
    );
    assert_eq!(
        d.ingest(s, E, Frame::linked(495, 510, 490, 1), &mut out)
            .disposition,
        Disposition::PartialOverlap
    );
    // Ids are not contiguous: 520 follows 510 by its link.
    assert_eq!(
        d.ingest(s, E, Frame::linked(520, 530, 510, 2), &mut out)
            .disposition,
        Disposition::Processed
    );
    // A broken link is a gap; the frame waits.
    assert_eq!(
        d.ingest(s, E, Frame::linked(560, 570, 550, 3), &mut out)
            .disposition,
        Disposition::Buffered
    );
    assert!(!d.is_trading_authorized(s));
    // The missing link arrives (as a backfill would); both are released in order.
    out.clear();
    d.backfill(s, E, Frame::linked(540, 550, 530, 4), &mut out)
        .unwrap();
    assert_eq!(seqs(&out), [540, 560]);
    assert!(d.is_trading_authorized(s));
}

#[test]
fn linked_range_backward_link_is_reset_suspected() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::linked(1024));
    let mut out = Vec::new();
    d.resynchronize(s, 100, &mut out);
    d.ingest(s, E, Frame::linked(90, 120, 80, 0u64), &mut out);
    let o = d.ingest(s, E, Frame::linked(130, 140, 110, 1), &mut out);
    assert_eq!(o.disposition, Disposition::ResetSuspected);
    assert_eq!(d.state(s), StreamState::ResetRequired);
}

#[test]
fn invalid_frames_are_counted() {
    let mut d = Detector::new();
    let p = d.add_stream(StreamConfig::point(8));
    let r = d.add_stream(StreamConfig::range(8));
    let mut out = Vec::new();
    assert_eq!(
        d.ingest(p, E, Frame::range(5, 6, 0u64), &mut out)
            .disposition,
        Disposition::Invalid
    );
    assert_eq!(
        d.ingest(r, E, Frame::range(9, 3, 0), &mut out).disposition,
        Disposition::Invalid
    );
    assert_eq!(
        d.ingest(r, E, Frame::point(u64::MAX, 0), &mut out)
            .disposition,
        Disposition::Invalid
    );
    assert_eq!(d.stats(r).invalid, 2);
    assert_eq!(d.state(r), StreamState::Unseen);
}

#[test]
fn duplicate_of_a_buffered_frame() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 1, &mut out);
    assert_eq!(ingest(&mut d, s, 3, &mut out), Disposition::Buffered);
    assert_eq!(ingest(&mut d, s, 3, &mut out), Disposition::Duplicate);
    assert_eq!(d.stats(s).duplicates, 1);
}

#[test]
fn overlapping_range_frames_drain_in_order() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::range(64));
    let mut out = Vec::new();
    d.ingest(s, E, Frame::range(100, 100, 0u64), &mut out);
    d.ingest(s, E, Frame::range(107, 109, 1), &mut out);
    d.ingest(s, E, Frame::range(104, 104, 2), &mut out);
    out.clear();
    // Covers 101..=108: releases itself, drops 104 (covered), delivers 109 as overlap.
    d.backfill(s, E, Frame::range(101, 108, 3), &mut out)
        .unwrap();
    let got: Vec<(u64, u64, u64)> = out
        .iter()
        .map(|f| (f.first, f.last, f.fresh_from))
        .collect();
    assert_eq!(got, [(101, 108, 101), (107, 109, 109)]);
    assert_eq!(d.state(s), StreamState::Synced);
    assert_eq!(d.expected(s), Some(110));
}

#[test]
fn ring_reuse_across_many_windows() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::point(8).with_baseline(Baseline::Expect(0)));
    let mut out = Vec::new();
    let mut next = 0u64;
    // Swap every pair for many laps of an 8-slot ring.
    while next < 10_000 {
        ingest(&mut d, s, next + 1, &mut out);
        ingest(&mut d, s, next, &mut out);
        next += 2;
    }
    let got = seqs(&out);
    assert_eq!(got.len(), 10_000);
    assert!(got.windows(2).all(|w| w[1] == w[0] + 1));
}

#[test]
fn begin_resync_keeps_live_frames_for_after_the_snapshot() {
    let mut d = Detector::new();
    let s = d.add_stream(StreamConfig::point(64).with_max_buffered(2));
    let mut out = Vec::new();
    ingest(&mut d, s, 1, &mut out);
    ingest(&mut d, s, 5, &mut out);
    ingest(&mut d, s, 6, &mut out);
    assert_eq!(
        ingest(&mut d, s, 7, &mut out),
        Disposition::DroppedBufferFull
    );
    d.begin_resync(s);
    assert_eq!(d.state(s), StreamState::ResetRequired);
    assert!(!d.is_trading_authorized(s));
    out.clear();
    // Live frames during the snapshot are kept, not delivered.
    assert_eq!(ingest(&mut d, s, 20, &mut out), Disposition::Buffered);
    assert_eq!(ingest(&mut d, s, 21, &mut out), Disposition::Buffered);
    assert_eq!(
        ingest(&mut d, s, 19, &mut out),
        Disposition::DroppedResetRequired
    );
    assert!(out.is_empty());
    assert!(d.backfill(s, E, Frame::point(2, 2), &mut out).is_err());
    // The snapshot covers everything below 18: 18 is missing, 20 and 21 wait behind it.
    d.resynchronize(s, 18, &mut out);
    assert!(out.is_empty());
    assert_eq!(missing(&d, s), [(18, 19)]);
    d.backfill(s, E, Frame::point(18, 18), &mut out).unwrap();
    let r = d.backfill(s, E, Frame::point(19, 19), &mut out).unwrap();
    assert!(r.is_synced);
    assert_eq!(seqs(&out), [18, 19, 20, 21]);
}

#[test]
fn resync_after_collecting_drops_what_the_snapshot_covers() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    ingest(&mut d, s, 1, &mut out);
    d.begin_resync(s);
    for seq in [30, 31, 32] {
        ingest(&mut d, s, seq, &mut out);
    }
    out.clear();
    assert_eq!(d.resynchronize(s, 32, &mut out), 1);
    assert_eq!(seqs(&out), [32]);
    assert!(d.is_trading_authorized(s));
}

#[test]
fn is_next_only_for_the_expected_frame_of_a_synced_stream() {
    let (mut d, s) = point();
    let mut out = Vec::new();
    assert!(!d.is_next(s, E, 1));
    ingest(&mut d, s, 1, &mut out);
    assert!(d.is_next(s, E, 2));
    assert!(!d.is_next(s, E, 3));
    assert!(!d.is_next(s, E + 1, 2));
    ingest(&mut d, s, 4, &mut out);
    assert!(!d.is_next(s, E, 2), "not synced");
}
