//! The live driver end to end on loopback: the simulators (multicast through 127.0.0.1
//! with TTL 0, re-request, snapshot and Binance servers) against the real rx loop,
//! sockets, venues and consumer queues.

mod binance;
mod failures;
mod iex;
mod mold;
mod record;
mod tshark;
mod udp;
