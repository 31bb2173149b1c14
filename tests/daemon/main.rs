//! The daemon and the command line as an operator runs them.

mod binance_cli;
mod run;
