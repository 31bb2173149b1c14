//! `push`, `pop` and `flush_overrun` allocate nothing once the queue exists,
//! whether records wrap, events are dropped or overrun markers are written.

use gapless::publish::{Consumer, Event, Producer, Pushed, StreamState, channel};

use super::allocations;

/// What a run did, kept in plain integers so counting it allocates nothing.
#[derive(Debug, Default)]
struct Summary {
    written: u64,
    dropped: u64,
    markers: u64,
    popped: u64,
    payload_bytes: u64,
}

/// Pushes three events for every two it pops, draining every 64 rounds.
fn run(producer: &mut Producer, consumer: &mut Consumer, rounds: std::ops::Range<u64>) -> Summary {
    let payload = [0x5A_u8; 256];
    let mut summary = Summary::default();
    for round in rounds {
        for k in 0..3 {
            let stream = u16::try_from((round + k) % 4).unwrap_or(0);
            let len = usize::try_from((round * 7 + k * 13) % 200).unwrap_or(0);
            let event = match (round + k) % 5 {
                0 => Event::Range {
                    stream,
                    first: round,
                    last: round + 1,
                    recv_ns: round,
                    payload: &payload[..len],
                },
                1 => Event::State {
                    stream,
                    state: StreamState::Synced,
                },
                2 => Event::Heartbeat {
                    stream,
                    next: round,
                },
                _ => Event::Message {
                    stream,
                    seq: round * 3 + k,
                    recv_ns: round,
                    snapshot: false,
                    payload: &payload[..len],
                },
            };
            match producer.push(&event) {
                Pushed::Written => summary.written += 1,
                Pushed::Dropped => summary.dropped += 1,
                Pushed::UnknownStream => {}
            }
        }
        let pops = if round % 64 == 63 { usize::MAX } else { 2 };
        for _ in 0..pops {
            let Some(marker) = consumer.pop(|event| {
                summary.payload_bytes += u64::try_from(event.payload().len()).unwrap_or(0);
                matches!(event, Event::Overrun { .. })
            }) else {
                break;
            };
            summary.popped += 1;
            summary.markers += u64::from(marker);
        }
        if round % 64 == 63 {
            producer.flush_overrun();
        }
    }
    summary
}

#[test]
fn push_and_pop_allocate_nothing_in_steady_state() {
    let (mut producer, mut consumer) = channel(4096, 4);
    let stats = std::sync::Arc::clone(producer.stats());
    run(&mut producer, &mut consumer, 0..1_000);

    let before = allocations();
    let summary = run(&mut producer, &mut consumer, 1_000..50_000);
    let snapshot = stats.snapshot();
    let after = allocations();

    assert_eq!(after - before, 0, "{summary:?}");
    assert!(summary.written > 0 && summary.dropped > 0, "{summary:?}");
    assert!(
        summary.markers > 0 && summary.payload_bytes > 0,
        "{summary:?}"
    );
    assert!(snapshot.overrun_markers > 0);
}

#[test]
fn the_counter_sees_allocations() {
    let before = allocations();
    let boxed = std::hint::black_box(Box::new([0u8; 64]));
    assert!(allocations() > before);
    drop(boxed);
}
