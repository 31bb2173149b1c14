//! Logging to standard error, one line an event, in one of three formats.
//!
//! - **journal**: when standard error is the journal, each line starts with its sd-daemon
//!   priority (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace), which journald
//!   stores as the entry's priority; journald adds the time itself. Standard error is taken to
//!   be the journal when `$JOURNAL_STREAM` names the device and inode of file descriptor 2, as
//!   systemd documents, so a child whose standard error was redirected does not inherit it.
//! - **text** (a terminal, a file, a pipe): each line starts with an RFC 3339 UTC timestamp
//!   with microseconds, then the level: `2026-12-02T13:05:01.123456Z warn: ...`.
//! - **json**, for log shippers: one object a line,
//!   `{"timestamp":"2026-12-02T13:05:01.123456Z","level":"warn","message":"..."}`.
//!
//! The configuration's `log_format` picks one (`"auto"`, the default, picks journal or text as
//! above) and `log_level` the most detailed level written; messages below it are not
//! formatted at all. Each line is built whole and written with one `write` to the locked
//! standard error, so lines of different threads do not interleave.
//!
//! # Why not `tracing`
//!
//! `tracing` with `tracing-subscriber` (and `tracing-journald`) was weighed against this
//! module. What gapless logs is a few dozen kinds of event, all of them rare (a connection
//! lost, a gap declared lost, a session change): nothing is logged per packet, and the rx
//! loop's per-packet path formats nothing. The three formats need about a hundred lines here;
//! `tracing-subscriber` with its `fmt`, `json` and `env-filter` parts would add some fifteen
//! crates to a dependency set kept small on purpose, for spans and per-module filters the
//! daemon has no use for. `tracing-journald` writes to the journal's socket rather than
//! standard error, which gives structured fields but loses the lines when the service runs
//! outside systemd, and needs a second path for that case anyway. The level check here is
//! one relaxed atomic load, as cheap as `tracing`'s callsite cache. Should structured fields
//! or spans be wanted later, the macros below are the only place to change.

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::config::{LogFormat, LogLevel};

pub mod throttle;

pub use throttle::{Throttle, held_note};

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

/// The line formats, as stored in [`FORMAT`].
const TEXT: u8 = 0;
const JOURNAL: u8 = 1;
const JSON: u8 = 2;

static LEVEL: AtomicU8 = AtomicU8::new(INFO);
static FORMAT: AtomicU8 = AtomicU8::new(TEXT);

/// A line format after `auto` has been resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Timestamp, level, message.
    Text,
    /// sd-daemon priority prefix, message.
    Journal,
    /// One JSON object.
    Json,
}

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

/// Sets the line format; `auto` looks at `$JOURNAL_STREAM` and standard error.
pub fn set_format(format: LogFormat) {
    let style = match format {
        LogFormat::Auto if stderr_is_journal() => Style::Journal,
        LogFormat::Auto | LogFormat::Text => Style::Text,
        LogFormat::Journal => Style::Journal,
        LogFormat::Json => Style::Json,
    };
    FORMAT.store(
        match style {
            Style::Text => TEXT,
            Style::Journal => JOURNAL,
            Style::Json => JSON,
        },
        Ordering::Relaxed,
    );
}

/// The format lines are written in now.
pub fn style() -> Style {
    match FORMAT.load(Ordering::Relaxed) {
        JOURNAL => Style::Journal,
        JSON => Style::Json,
        _ => Style::Text,
    }
}

/// True when messages of `level` are written.
pub fn enabled(level: u8) -> bool {
    level <= LEVEL.load(Ordering::Relaxed)
}

/// True when `$JOURNAL_STREAM` (`DEVICE:INODE`) names file descriptor 2.
fn stderr_is_journal() -> bool {
    names_stderr(std::env::var_os("JOURNAL_STREAM").as_deref())
}

/// True when `value`, a `$JOURNAL_STREAM` (`DEVICE:INODE`), names file descriptor 2.
fn names_stderr(value: Option<&std::ffi::OsStr>) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some((dev, ino)) = value
        .and_then(|v| v.to_str())
        .and_then(|v| v.split_once(':'))
    else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let stderr = std::io::stderr();
    let Ok(fd) = stderr.as_fd().try_clone_to_owned() else {
        return false;
    };
    let file = std::fs::File::from(fd);
    file.metadata()
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The level's name as written in text and JSON lines.
fn level_name(level: u8) -> &'static str {
    match level {
        ERROR => "error",
        WARN => "warn",
        INFO => "info",
        DEBUG => "debug",
        _ => "trace",
    }
}

/// The sd-daemon priority (syslog severity) of a level.
pub fn priority(level: u8) -> u8 {
    match level {
        ERROR => 3,
        WARN => 4,
        INFO => 6,
        _ => 7,
    }
}

/// Wall-clock nanoseconds since the Unix epoch (0 if the clock is before it).
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Writes `ns` since the Unix epoch as RFC 3339 UTC with microseconds:
/// `2026-12-02T13:05:01.123456Z`.
pub fn write_rfc3339(out: &mut String, ns: u64) {
    let secs = ns / 1_000_000_000;
    let micros = (ns % 1_000_000_000) / 1_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (days-to-civil, in the form
/// H. Hinnant describes for his date library).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Appends `text` as a JSON string literal.
fn write_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One whole line, newline included, of `message` at `level` in `style`, stamped `ns`.
///
/// A message of several lines stays one journal entry or one JSON object: in text and journal
/// lines the line breaks become `\n`-separated continuation lines with the same prefix.
pub fn render(style: Style, level: u8, ns: u64, message: fmt::Arguments<'_>) -> String {
    let mut text = String::with_capacity(128);
    let _ = text.write_fmt(message);
    let mut line = String::with_capacity(text.len() + 48);
    match style {
        Style::Json => {
            line.push_str("{\"timestamp\":\"");
            write_rfc3339(&mut line, ns);
            line.push_str("\",\"level\":\"");
            line.push_str(level_name(level));
            line.push_str("\",\"message\":");
            write_json_string(&mut line, &text);
            line.push_str("}\n");
        }
        Style::Journal | Style::Text => {
            let mut prefix = String::with_capacity(40);
            if style == Style::Journal {
                let _ = write!(prefix, "<{}>", priority(level));
            } else {
                write_rfc3339(&mut prefix, ns);
                prefix.push(' ');
                prefix.push_str(level_name(level));
                prefix.push_str(": ");
            }
            for part in text.split('\n') {
                line.push_str(&prefix);
                line.push_str(part);
                line.push('\n');
            }
        }
    }
    line
}

/// Formats and writes one event at `level`; called by the macros once the level is enabled.
pub fn write(level: u8, message: fmt::Arguments<'_>) {
    let line = render(style(), level, now_ns(), message);
    // Nothing to be done if standard error is gone; the event is lost either way.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Writes an error line.
#[macro_export]
macro_rules! log_error {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::ERROR) {
            $crate::log::write($crate::log::ERROR, format_args!($($arg)*));
        }
    };
}

/// Writes a warning line.
#[macro_export]
macro_rules! log_warn {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::WARN) {
            $crate::log::write($crate::log::WARN, format_args!($($arg)*));
        }
    };
}

/// Writes an information line.
#[macro_export]
macro_rules! log_info {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::INFO) {
            $crate::log::write($crate::log::INFO, format_args!($($arg)*));
        }
    };
}

/// Writes a debug line.
#[macro_export]
macro_rules! log_debug {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::DEBUG) {
            $crate::log::write($crate::log::DEBUG, format_args!($($arg)*));
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

    fn stamp(ns: u64) -> String {
        let mut s = String::new();
        write_rfc3339(&mut s, ns);
        s
    }

    #[test]
    fn rfc3339_timestamps() {
        assert_eq!(stamp(0), "1970-01-01T00:00:00.000000Z");
        // `date -u -d @951782400` is 2000-02-29 00:00:00 (a leap day of a century year).
        assert_eq!(
            stamp(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        // 1_796_216_701.123456789 s: `date -u -d @1796216701` is 2026-12-02 13:05:01.
        assert_eq!(
            stamp(1_796_216_701_123_456_789),
            "2026-12-02T13:05:01.123456Z"
        );
        // The last second of a year.
        assert_eq!(
            stamp(1_735_689_599_000_000_000),
            "2024-12-31T23:59:59.000000Z"
        );
    }

    #[test]
    fn text_lines_start_with_the_time() {
        let line = render(
            Style::Text,
            WARN,
            1_796_216_701_123_456_789,
            format_args!("a {}", 1),
        );
        assert_eq!(line, "2026-12-02T13:05:01.123456Z warn: a 1\n");
    }

    #[test]
    fn journal_lines_carry_the_priority() {
        let at = |level| render(Style::Journal, level, 0, format_args!("m"));
        assert_eq!(at(ERROR), "<3>m\n");
        assert_eq!(at(WARN), "<4>m\n");
        assert_eq!(at(INFO), "<6>m\n");
        assert_eq!(at(DEBUG), "<7>m\n");
        assert_eq!(at(TRACE), "<7>m\n");
        // Each line of a message of several keeps the priority.
        let two = render(Style::Journal, ERROR, 0, format_args!("a\nb"));
        assert_eq!(two, "<3>a\n<3>b\n");
    }

    #[test]
    fn json_lines_parse_back() {
        let message = "quote \" backslash \\ tab \t bell \u{7} line\nnext é";
        let line = render(
            Style::Json,
            ERROR,
            1_796_216_701_123_456_789,
            format_args!("{message}"),
        );
        assert!(
            line.ends_with("}\n") && line.matches('\n').count() == 1,
            "{line}"
        );
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["timestamp"], "2026-12-02T13:05:01.123456Z");
        assert_eq!(value["level"], "error");
        assert_eq!(value["message"], message);
    }

    #[test]
    fn journal_stream_must_name_stderr() {
        use std::os::unix::fs::MetadataExt;
        // Inode 0 names no file; a malformed or absent value names nothing.
        for value in ["0:0", "", "12", "a:b"] {
            assert!(!names_stderr(Some(value.as_ref())), "{value}");
        }
        assert!(!names_stderr(None));
        // The device and inode of fd 2 itself are recognised.
        let fd2 = std::fs::metadata("/proc/self/fd/2").unwrap();
        let own = format!("{}:{}", fd2.dev(), fd2.ino());
        assert!(names_stderr(Some(own.as_ref())), "{own}");
    }
}
