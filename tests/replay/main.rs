//! Replay and the codecs against real and generated captures.

mod binance;
mod golden;
mod iex;
mod real_moldudp64;
