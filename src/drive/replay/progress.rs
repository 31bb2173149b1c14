//! A progress line for long replays on a terminal: a bar with the rate and the time left
//! when the input's size is known (a file), the bytes read and the rate otherwise (a
//! pipe). Drawn on standard error only when it is a terminal, at most ten times a second,
//! and cleared at the end so the summary follows on a clean line.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

/// Width of the bar, in cells.
const BAR: usize = 30;

/// Time between two redraws at least.
const EVERY: Duration = Duration::from_millis(100);

/// The progress line of one replay.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    last: Option<Instant>,
    drawn: bool,
    enabled: bool,
}

impl Progress {
    /// A progress line on standard error, drawn only when it is a terminal.
    pub fn on_stderr() -> Self {
        Self {
            started: Instant::now(),
            last: None,
            drawn: false,
            enabled: io::stderr().is_terminal(),
        }
    }

    /// One that never draws.
    pub fn hidden() -> Self {
        Self {
            enabled: false,
            ..Self::on_stderr()
        }
    }

    /// Redraws, if the last redraw is old enough: `read` of `total` input bytes (`unpacked`
    /// bytes after decompression, for a compressed input), `records` records so far.
    pub fn update(&mut self, read: u64, total: Option<u64>, unpacked: Option<u64>, records: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < EVERY) {
            return;
        }
        self.last = Some(now);
        let line = render(
            read,
            total,
            unpacked,
            records,
            now.duration_since(self.started),
        );
        let mut err = io::stderr().lock();
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Clears the line.
    pub fn finish(&mut self) {
        if self.drawn {
            let mut err = io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The line for `read` of `total` bytes (`unpacked` once decompressed) and `records`
/// records after `elapsed`.
pub fn render(
    read: u64,
    total: Option<u64>,
    unpacked: Option<u64>,
    records: u64,
    elapsed: Duration,
) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { read as f64 / secs } else { 0.0 };
    let unpacked = unpacked.map_or_else(String::new, |n| format!(" ({} unpacked)", bytes(n)));
    let tail = format!(
        "{unpacked}, {} records, {}/s",
        count(records),
        bytes(rate as u64)
    );
    match total.filter(|t| *t > 0) {
        Some(total) => {
            let done = (read as f64 / total as f64).clamp(0.0, 1.0);
            let cells = ((done * BAR as f64) as usize).min(BAR);
            let left = if rate > 0.0 {
                clock(Duration::from_secs_f64(
                    (total.saturating_sub(read) as f64 / rate).min(1e7),
                ))
            } else {
                "--:--".to_string()
            };
            format!(
                "[{}{}] {:>3.0}% {} of {}{tail}, {left} left",
                "#".repeat(cells),
                "-".repeat(BAR - cells),
                done * 100.0,
                bytes(read),
                bytes(total)
            )
        }
        None => format!("{} read{tail}, {} elapsed", bytes(read), clock(elapsed)),
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let name = UNITS.get(unit).copied().unwrap_or("B");
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {name}")
    }
}

fn count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_with_rate_and_time_left() {
        let line = render(
            1 << 30,
            Some(4 << 30),
            None,
            2_500_000,
            Duration::from_secs(2),
        );
        assert_eq!(
            line,
            "[#######-----------------------]  25% 1.0 GiB of 4.0 GiB, 2.5M records, 512.0 MiB/s, 00:06 left"
        );
        let piped = render(1536, None, Some(3 << 20), 12, Duration::from_secs(3_725));
        assert_eq!(
            piped,
            "1.5 KiB read (3.0 MiB unpacked), 12 records, 0 B/s, 1:02:05 elapsed"
        );
        assert!(render(0, Some(10), None, 0, Duration::ZERO).ends_with("--:-- left"));
    }
}
