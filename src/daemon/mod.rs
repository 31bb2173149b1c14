//! The daemon: turns a validated configuration into running venues, sinks and metrics.

pub mod demo;
pub mod notify;
pub mod run;
pub mod service;
pub mod specs;

pub use run::{Daemon, DaemonError, RunSummary, Running};
pub use specs::{apply_replay_config, feed_spec};
