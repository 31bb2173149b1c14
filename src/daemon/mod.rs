//! The daemon: turns a validated configuration into running venues, sinks and metrics.

pub mod fanout;
pub mod rx;
pub mod specs;

pub use specs::{apply_replay_config, feed_spec};
