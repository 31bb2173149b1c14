//! The venues as sans-IO libraries, driven in-process with a virtual clock.

mod feed;
