//! Publishing to consumers: the event model and the per-consumer queue.
//!
//! The rx thread hands every frame to each consumer through its own
//! [`channel`]: a lock-free bounded SPSC queue that never blocks the rx
//! thread and never allocates per message. A consumer that falls behind
//! loses events rather than slowing the feed, and is told exactly what it
//! lost by an [`Event::Overrun`] marker that arrives before anything that
//! came after the loss.
//!
//! - [`event`]: [`Event`], the borrowed view a consumer reads, and its
//!   binary encoding (also the unix-socket wire format).
//! - [`queue`]: [`channel`], [`Producer`] and [`Consumer`].
//! - [`run`]: [`MessageRun`](run::MessageRun), consecutive messages handed off as
//!   one record and popped one message at a time.
//! - [`stats`]: [`QueueStats`], counters a metrics thread reads.
//!
//! A consumer thread drains its queue until the producer is gone:
//!
//! ```
//! use std::thread;
//!
//! use gapless::publish::{Event, Pushed, channel};
//!
//! let (mut producer, mut consumer) = channel(64 * 1024, 2);
//! let reader = thread::spawn(move || {
//!     let mut last = [None; 2];
//!     loop {
//!         let seen = consumer.pop(|event| match event {
//!             Event::Message { stream, seq, .. } => last[usize::from(stream)] = Some(seq),
//!             Event::Overrun { stream, to, .. } => last[usize::from(stream)] = Some(to),
//!             _ => {}
//!         });
//!         if seen.is_none() {
//!             if consumer.is_abandoned() && consumer.is_empty() {
//!                 return last;
//!             }
//!             thread::yield_now();
//!         }
//!     }
//! });
//! for seq in 0..1000 {
//!     let event = Event::Message {
//!         stream: (seq % 2) as u16,
//!         seq,
//!         recv_ns: 0,
//!         snapshot: false,
//!         payload: &seq.to_le_bytes(),
//!     };
//!     // The rx thread never waits; a drop is reported to the consumer.
//!     let _: Pushed = producer.push(&event);
//! }
//! while producer.pending_overruns() > 0 {
//!     producer.flush_overrun();
//!     thread::yield_now();
//! }
//! drop(producer);
//! // Every sequence reached the consumer as a message or inside a marker.
//! assert_eq!(reader.join().ok(), Some([Some(998), Some(999)]));
//! ```

pub mod event;
pub(crate) mod fanout;
pub mod jsonl;
pub mod queue;
pub mod run;
pub mod stats;
pub mod wire;

mod codec;
mod consumer;
mod overrun;
#[cfg(test)]
mod tests;

pub use event::{DecodeError, EncodeError, Event, StreamState};
pub use queue::{Consumer, Producer, Pushed, channel};
pub use stats::{QueueStats, StatsSnapshot};
