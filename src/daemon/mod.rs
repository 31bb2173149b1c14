//! The daemon: turns a validated configuration into running venues, sinks and metrics.

pub mod cursor;
pub mod demo;
pub mod notify;
pub mod run;
pub mod service;

pub use run::{Daemon, DaemonError, RunSummary, Running};
