//! The sequencer as a library: the model test against a `BTreeMap` oracle, and the
//! scenarios it was verified against.

mod model;
mod verification;
