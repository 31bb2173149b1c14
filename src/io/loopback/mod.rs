//! The I/O layer against real peers on loopback: the HTTP and WebSocket clients against
//! the Binance simulator, recordings served back, TLS, and the parsers on their own.

mod client;
mod http_sim;
mod recordings;
mod rest;
mod units;
mod ws_sim;
mod wss;
