//! Replay and the codecs against real and generated captures.

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod binance;
mod golden;
mod iex;
mod lines;
mod rates;
mod real_moldudp64;
