//! Clients of gapless's consumer endpoints in other processes.
//!
//! - [`unix`]: the unix-socket sink's client, printing JSON lines (`gapless tail`).
//! - [`shm`]: the shared-memory ring's reader, with resume cursors (`gapless tail --shm`).

pub mod shm;
pub mod top;
pub mod unix;
