//! The thin OS shell: the only code that touches sockets, threads for blocking I/O, and
//! the clock.

pub mod soup;
