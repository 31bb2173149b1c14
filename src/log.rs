//! Logging to standard error, one line an event, prefixed with its level (journald keeps
//! the lines; `SyslogLevelPrefix` is not needed). The level comes from the configuration's
//! `log_level`; messages below it are not formatted at all.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::config::LogLevel;

/// Errors: something failed.
pub const ERROR: u8 = 0;
/// Warnings: something needs attention.
pub const WARN: u8 = 1;
/// Information: what the service is doing.
pub const INFO: u8 = 2;
/// Detail for diagnosis.
pub const DEBUG: u8 = 3;
/// Everything.
pub const TRACE: u8 = 4;

static LEVEL: AtomicU8 = AtomicU8::new(INFO);

/// Sets the most detailed level written.
pub fn set_level(level: LogLevel) {
    let value = match level {
        LogLevel::Error => ERROR,
        LogLevel::Warn => WARN,
        LogLevel::Info => INFO,
        LogLevel::Debug => DEBUG,
        LogLevel::Trace => TRACE,
    };
    LEVEL.store(value, Ordering::Relaxed);
}

/// True when messages of `level` are written.
pub fn enabled(level: u8) -> bool {
    level <= LEVEL.load(Ordering::Relaxed)
}

/// Writes an error line.
#[macro_export]
macro_rules! log_error {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::ERROR) {
            eprintln!("error: {}", format_args!($($arg)*));
        }
    };
}

/// Writes a warning line.
#[macro_export]
macro_rules! log_warn {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::WARN) {
            eprintln!("warn: {}", format_args!($($arg)*));
        }
    };
}

/// Writes an information line.
#[macro_export]
macro_rules! log_info {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::INFO) {
            eprintln!("info: {}", format_args!($($arg)*));
        }
    };
}

/// Writes a debug line.
#[macro_export]
macro_rules! log_debug {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::DEBUG) {
            eprintln!("debug: {}", format_args!($($arg)*));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_filter() {
        set_level(LogLevel::Warn);
        assert!(enabled(ERROR) && enabled(WARN));
        assert!(!enabled(INFO) && !enabled(DEBUG));
        set_level(LogLevel::Info);
        assert!(enabled(INFO));
    }
}
