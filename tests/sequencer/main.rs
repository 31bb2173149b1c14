//! The sequencer as a library: the model test against a `BTreeMap` oracle, and the
//! scenarios it was verified against.

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod model;
mod verification;
