//! Running as a service: signals, readiness, the watchdog, status lines and the summary.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::notify::{notify, spawn_watchdog, watchdog_interval};
use super::run::{Daemon, DaemonError, RunSummary};
use crate::config::Config;
use crate::drive::live::StreamView;

/// How long to run and what to print while running.
#[derive(Debug, Clone, Default)]
pub struct ServiceOptions {
    /// Print a status line per stream this often.
    pub status_every: Option<Duration>,
    /// Stop after this long (the demo); `None` runs until SIGTERM or SIGINT.
    pub duration: Option<Duration>,
    /// Once `duration` is over, go on for up to this long while a stream of these venues
    /// is not yet closed (its session ended and everything it sent was delivered), so
    /// that the summary covers all of it (the demo's simulators end their sessions).
    pub until_closed: Option<(Vec<String>, Duration)>,
}

/// True once `duration` has passed and, within the grace of `until_closed`, every stream
/// of its venues is closed.
fn finished(
    options: &ServiceOptions,
    elapsed: Duration,
    views: impl FnOnce() -> Vec<StreamView>,
) -> bool {
    let Some(duration) = options.duration else {
        return false;
    };
    if elapsed < duration {
        return false;
    }
    match &options.until_closed {
        None => true,
        Some((venues, grace)) => {
            elapsed >= duration.saturating_add(*grace)
                || views()
                    .iter()
                    .filter(|v| venues.contains(&v.venue))
                    .all(|v| v.state == crate::publish::StreamState::Closed)
        }
    }
}

/// Blocks SIGTERM and SIGINT in this thread and every thread started after it, so they
/// can be waited for with [`wait_for_stop_signal`].
pub fn block_stop_signals() -> std::io::Result<()> {
    // SAFETY: a zeroed sigset initialised by sigemptyset/sigaddset, passed to
    // pthread_sigmask for the calling thread; no memory outlives the calls.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

/// Waits up to `timeout` for SIGTERM or SIGINT (blocked beforehand); true when one came.
pub fn wait_for_stop_signal(timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the sigset is initialised by sigemptyset/sigaddset; `ts` and the set live
    // across the call; a null siginfo pointer is allowed.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigtimedwait(&set, std::ptr::null_mut(), &ts)
    };
    rc == libc::SIGTERM || rc == libc::SIGINT
}

/// Starts the daemon, reports readiness, feeds the watchdog while the rx loop cycles,
/// prints status lines, and stops cleanly (sinks flushed, sockets closed) on SIGTERM,
/// SIGINT or after `duration`. Call [`block_stop_signals`] first, before any thread
/// starts.
pub fn run_service(config: Config, options: &ServiceOptions) -> Result<RunSummary, DaemonError> {
    crate::log::set_level(config.daemon.log_level);
    crate::log::set_format(config.daemon.log_format);
    let running = Daemon::new(config).start()?;
    notify("READY=1");
    let clock = Instant::now();
    let watchdog = watchdog_interval().and_then(|interval| {
        // The rx loop stores its own monotonic clock; compare against a clock started
        // no later than it, so a stalled loop reads as stale.
        let origin = clock;
        spawn_watchdog(
            interval,
            running.alive_ns(),
            move || u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX),
            running.stop_flag(),
        )
        .ok()
    });
    if let Some(addr) = running.metrics_addr() {
        crate::log_info!("metrics on http://{addr}/metrics");
    }
    let started = Instant::now();
    let mut last_status = Instant::now();
    let mut status = StatusLines::default();
    loop {
        if wait_for_stop_signal(Duration::from_millis(200)) {
            crate::log_info!("stopping on signal");
            break;
        }
        if running.is_finished() {
            crate::log_error!("the rx loop ended on its own");
            break;
        }
        if finished(options, started.elapsed(), || running.views()) {
            break;
        }
        if let Some(every) = options.status_every
            && last_status.elapsed() >= every
        {
            last_status = Instant::now();
            for line in status.render(&running.views(), every) {
                crate::log_info!("{line}");
            }
        }
    }
    notify("STOPPING=1");
    let stop = running.stop_flag();
    let summary = running.stop();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    summary
}

/// Status lines, one per stream: state, messages/s since the previous line, delivered,
/// gaps, missing, recovered, resyncs.
#[derive(Debug, Default)]
pub struct StatusLines {
    last: Vec<u64>,
}

impl StatusLines {
    /// The lines for `views`, `interval` after the previous call.
    pub fn render(&mut self, views: &[StreamView], interval: Duration) -> Vec<String> {
        self.last.resize(views.len(), 0);
        let secs = interval.as_secs_f64().max(0.001);
        views
            .iter()
            .zip(self.last.iter_mut())
            .map(|(v, prev)| {
                let s = &v.stats;
                let delivered = s.sequencer.delivered;
                let rate = (delivered.saturating_sub(*prev)) as f64 / secs;
                *prev = delivered;
                let mut line = format!(
                    "{}/{}: {:<18} {:>10.0} msg/s  delivered {:>9}  gaps {:>5}  missing {:>6}  recovered {:>7}  resyncs {:>3}",
                    v.venue,
                    v.stream,
                    v.state.as_str(),
                    rate,
                    delivered,
                    s.sequencer.gaps,
                    s.sequencer.missing,
                    s.recovered,
                    s.snapshots_done
                );
                if v.lines.len() > 1 {
                    line.push_str(&lines_text(&v.lines));
                }
                line
            })
            .collect()
    }
}

/// `  lines a up 61% first, b DOWN 39% first`: each line's state and its share of the
/// datagrams that came first.
fn lines_text(lines: &[crate::venue::LineStats]) -> String {
    let wins: u64 = lines.iter().map(|l| l.wins).sum();
    let parts: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let share = (l.wins as f64 * 100.0 / wins.max(1) as f64).round();
            let state = if l.down { "DOWN" } else { "up" };
            format!("{} {state} {share}% first", crate::venue::line_name(i))
        })
        .collect();
    format!("  lines {}", parts.join(", "))
}

/// The end-of-run summary as text.
pub fn summary_text(summary: &RunSummary) -> String {
    // Writing into a String cannot fail: the results of `writeln!` below carry nothing.
    let mut out = String::new();
    if summary.dropped == 0 {
        let _ = writeln!(
            out,
            "summary: {} messages delivered, none dropped by a consumer",
            summary.delivered
        );
    } else {
        let by: Vec<String> = summary
            .dropped_by
            .iter()
            .map(|(name, n)| format!("{n} by {name}"))
            .collect();
        let _ = writeln!(
            out,
            "summary: {} messages delivered, {} events dropped by consumers too slow to keep up ({}); \
             a larger consumer_queue (or client_queue) gives them more room",
            summary.delivered,
            summary.dropped,
            by.join(", ")
        );
    }
    for v in &summary.streams {
        let s = &v.stats;
        let _ = writeln!(
            out,
            "  {}/{}: state {}, delivered {}, gaps detected {}, messages recovered {} ({} re-requests, {} timed out), snapshot resyncs {}, duplicates {}, malformed {}, lost {}, session changes {}, other-session datagrams dropped {}",
            v.venue,
            v.stream,
            v.state.as_str(),
            s.sequencer.delivered,
            s.sequencer.gaps,
            s.recovered,
            s.requests,
            s.timeouts,
            s.snapshots_done,
            s.sequencer.duplicates,
            s.malformed,
            s.messages_lost,
            s.new_sessions,
            s.unconfirmed_session
        );
        if v.lines.len() > 1 {
            let wins: u64 = v.lines.iter().map(|l| l.wins).sum();
            let each: Vec<String> = v
                .lines
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    format!(
                        "line {} {} ({:.0}% first, {} missed, down {} times)",
                        crate::venue::line_name(i),
                        if l.down { "down" } else { "up" },
                        l.wins as f64 * 100.0 / wins.max(1) as f64,
                        l.missed,
                        l.downs
                    )
                })
                .collect();
            // Writing into a String cannot fail (as above).
            let _ = writeln!(
                out,
                "    {}; copies discarded by arbitration {}",
                each.join(", "),
                s.arbitrated
            );
        }
    }
    if let Some([p50, p90, p99, p999, max]) = summary.latency_ns {
        let us = |ns: u64| ns as f64 / 1_000.0;
        let _ = writeln!(
            out,
            "  hand-off latency (kernel receive to consumer queue): p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
            us(p50),
            us(p90),
            us(p99),
            us(p999),
            us(max)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::StreamState;

    fn view(venue: &str, state: StreamState) -> StreamView {
        StreamView {
            venue: venue.to_string(),
            stream: "s".to_string(),
            stats: Default::default(),
            sockets: Default::default(),
            state,
            lines: Vec::new(),
        }
    }

    #[test]
    fn a_timed_run_ends_after_its_duration_and_waits_for_closing_streams_within_the_grace() {
        let secs = Duration::from_secs;
        let forever = ServiceOptions::default();
        assert!(!finished(&forever, secs(1_000_000), Vec::new));
        let timed = ServiceOptions {
            duration: Some(secs(20)),
            ..ServiceOptions::default()
        };
        assert!(!finished(&timed, secs(19), Vec::new));
        assert!(finished(&timed, secs(20), Vec::new));
        let until_closed = ServiceOptions {
            duration: Some(secs(20)),
            until_closed: Some((vec!["mold".to_string()], secs(15))),
            ..ServiceOptions::default()
        };
        let open = || {
            vec![
                view("mold", StreamState::Synced),
                view("binance", StreamState::Synced),
            ]
        };
        let closed = || {
            vec![
                view("mold", StreamState::Closed),
                view("binance", StreamState::Synced),
            ]
        };
        assert!(!finished(&until_closed, secs(19), closed));
        assert!(!finished(&until_closed, secs(25), open));
        assert!(
            finished(&until_closed, secs(25), closed),
            "other venues never close"
        );
        assert!(finished(&until_closed, secs(35), open), "the grace is over");
    }

    #[test]
    fn the_summary_names_the_consumers_that_dropped() {
        let mut summary = RunSummary {
            delivered: 10,
            dropped: 0,
            dropped_by: Vec::new(),
            streams: vec![view("v", StreamState::Synced)],
            latency_ns: None,
        };
        let text = summary_text(&summary);
        assert!(
            text.starts_with("summary: 10 messages delivered, none dropped"),
            "{text}"
        );
        summary.dropped = 1306;
        summary.dropped_by = vec![
            ("unix:target/demo/demo.sock".to_owned(), 1300),
            ("jsonl:out.jsonl".to_owned(), 6),
        ];
        let text = summary_text(&summary);
        assert!(
            text.contains(
                "1306 events dropped by consumers too slow to keep up \
                 (1300 by unix:target/demo/demo.sock, 6 by jsonl:out.jsonl)"
            ),
            "{text}"
        );
    }
}
