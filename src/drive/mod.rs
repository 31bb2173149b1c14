//! The drivers: what runs every venue session. The live rx loop ([`live`]) reads
//! sockets; the replay ([`replay`], [`replay_binance`]) reads captures.

pub mod binance;
pub mod live;
pub mod replay;
pub mod replay_binance;
