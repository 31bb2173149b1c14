//! Clients of gapless's consumer endpoints in other processes.
//!
//! - [`unix`]: the unix-socket sink's client, printing JSON lines (`gapless tail`).

pub mod top;
pub mod unix;
