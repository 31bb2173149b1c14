//! The configuration: every error names its place, every example parses.

mod errors;
mod examples;
