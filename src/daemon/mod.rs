//! The daemon: turns a validated configuration into running venues, sinks and metrics.

pub mod binance;
pub mod demo;
pub mod fanout;
pub mod notify;
pub mod run;
pub mod rx;
pub mod service;
pub mod specs;

pub use run::{Daemon, DaemonError, RunSummary, Running};
pub use specs::{apply_replay_config, feed_spec};
