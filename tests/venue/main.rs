//! The venues as sans-IO libraries, driven in-process with a virtual clock.

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod feed;
mod lines;
