//! From the raw file to a [`Config`]: the daemon table, the list of venues and the sinks.
//!
//! Each function checks every key of its table before it combines the results, so a file with
//! several mistakes gets them all reported in one run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::Config;
use super::check::one_of;
use super::error::{ErrorKind, Report};
use super::locate::Path;
use super::raw::{List, RawConfig, RawDaemon, RawSink, RawVenue};
use super::schema::{Daemon, Idle, LogFormat, LogLevel, Sink, Venue};
use super::values::{PowerOfTwo, keyword_enum};
use super::venue;

/// The largest consumer or client queue, 2^24 slots.
const MAX_QUEUE: usize = 1 << 24;

/// Frames queued per Unix-socket client when `client_queue` is left out.
const DEFAULT_CLIENT_QUEUE: PowerOfTwo = PowerOfTwo::pow2(16);

/// pcap file size at which the next file starts when `rotate_bytes` is left out: 1 GiB.
const DEFAULT_ROTATE_BYTES: u64 = 1 << 30;

/// A shared-memory ring's data bytes when `size_bytes` is left out: 64 MiB.
const DEFAULT_RING_BYTES: PowerOfTwo = PowerOfTwo::pow2(26);

/// Rotated JSON-lines files kept when `keep` is left out.
const DEFAULT_KEEP: u32 = 10;

/// A unix socket's mode when `mode` is left out: owner and group may connect.
const DEFAULT_SOCKET_MODE: u32 = 0o660;

/// The longest Unix socket path: `sun_path` holds 108 bytes with the terminating NUL.
const MAX_UNIX_PATH: usize = 107;

keyword_enum! {
    /// The kinds of sink.
    enum SinkKind {
        Jsonl = "jsonl",
        Unix = "unix",
        Pcap = "pcap",
        Shm = "shm",
    }
}

/// Checks the whole file.
pub(super) fn config(raw: &RawConfig, report: &mut Report<'_>) -> Option<Config> {
    let daemon = match &raw.daemon {
        Some(table) => daemon(table, report),
        None => Some(Daemon::default()),
    };
    let venues = venues(&raw.venue, report);
    let sinks = sinks(&raw.sink, report);
    Some(Config {
        daemon: daemon?,
        venues: venues?,
        sinks: sinks?,
    })
}

fn daemon(table: &Spanned<RawDaemon>, report: &mut Report<'_>) -> Option<Daemon> {
    let raw = table.get_ref();
    let path = Path::root().key("daemon");
    let defaults = Daemon::default();

    let metrics_listen = match &raw.metrics_listen {
        None => Some(defaults.metrics_listen),
        Some(field) => metrics_listen(field, &path.key("metrics_listen"), report),
    };
    let rx_core = match &raw.rx_core {
        None => Some(None),
        Some(field) => report.int(field, &path.key("rx_core"), 0..=4095).map(Some),
    };
    let idle = match &raw.idle {
        None => Some(defaults.idle),
        Some(field) => report.keyword(field, &path.key("idle"), Idle::KEYWORDS, Idle::from_keyword),
    };
    let consumer_queue = report.power_of_two(
        &raw.consumer_queue,
        &path.key("consumer_queue"),
        2..=MAX_QUEUE,
        defaults.consumer_queue,
    );
    let log_level = match &raw.log_level {
        None => Some(defaults.log_level),
        Some(field) => report.keyword(
            field,
            &path.key("log_level"),
            LogLevel::KEYWORDS,
            LogLevel::from_keyword,
        ),
    };
    let log_format = match &raw.log_format {
        None => Some(defaults.log_format),
        Some(field) => report.keyword(
            field,
            &path.key("log_format"),
            LogFormat::KEYWORDS,
            LogFormat::from_keyword,
        ),
    };
    Some(Daemon {
        metrics_listen: metrics_listen?,
        rx_core: rx_core?,
        idle: idle?,
        consumer_queue: consumer_queue?,
        log_level: log_level?,
        log_format: log_format?,
    })
}

fn metrics_listen(
    field: &Spanned<String>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<SocketAddr> {
    let expected = "an IP address and a non-zero port such as \"127.0.0.1:9464\"";
    let (kind, problem) = match field.get_ref().parse::<SocketAddr>() {
        Ok(addr) if addr.port() != 0 => return Some(addr),
        Ok(_) => (ErrorKind::BadAddress, "has port 0"),
        Err(_) => (ErrorKind::BadAddress, "is not an IP address and port"),
    };
    let found = format!("{} {problem}", report.quote(&field.span()));
    report.push(kind, &field.span(), path, found, expected);
    None
}

fn venues(list: &List<RawVenue>, report: &mut Report<'_>) -> Option<Vec<Venue>> {
    let path = Path::root().key("venue");
    let Some(list) = list.as_ref().filter(|l| !l.get_ref().is_empty()) else {
        let span = list.as_ref().map_or(0..0, Spanned::span);
        let found = "the file has no venue";
        let expected = "at least one [[venue]] table";
        report.push(ErrorKind::MissingKey, &span, &path, found, expected);
        return None;
    };
    let mut names = HashMap::new();
    let mut built = Vec::new();
    for (index, table) in list.get_ref().iter().enumerate() {
        let path = path.index(index);
        if let Some(name) = &table.get_ref().name {
            let key = name.get_ref().clone();
            report.unique(
                &mut names,
                key,
                &name.span(),
                &path.key("name"),
                "venue name",
            );
        }
        built.push(venue::venue(table, &path, report));
    }
    let built: Vec<Venue> = built.into_iter().collect::<Option<_>>()?;
    // Every stream gets a u16 consumer stream id, numbered across the venues in order.
    let streams: usize = built.iter().map(|v| v.kind.stream_count()).sum();
    if streams > MAX_STREAMS {
        let found = format!("{streams} streams (channels and symbols) in all");
        let expected = format!("at most {MAX_STREAMS}, one consumer stream id each");
        report.push(
            ErrorKind::OutOfRange,
            &list.span(),
            &path,
            &found,
            &expected,
        );
        return None;
    }
    Some(built)
}

/// Consumer stream ids are u16: this many streams at most across all venues.
pub const MAX_STREAMS: usize = 1 << 16;

fn sinks(list: &List<RawSink>, report: &mut Report<'_>) -> Option<Vec<Sink>> {
    let Some(list) = list else {
        return Some(Vec::new());
    };
    let mut paths = HashMap::new();
    let mut built = Vec::new();
    for (index, table) in list.get_ref().iter().enumerate() {
        let path = Path::root().key("sink").index(index);
        if let Some(file) = &table.get_ref().path {
            let key = file.get_ref().clone();
            report.unique(
                &mut paths,
                key,
                &file.span(),
                &path.key("path"),
                "sink path",
            );
        }
        built.push(sink(table, &path, report));
    }
    built.into_iter().collect()
}

fn sink(table: &Spanned<RawSink>, path: &Path, report: &mut Report<'_>) -> Option<Sink> {
    let raw = table.get_ref();
    let header = table.span();
    let kind = report
        .required(
            &raw.kind,
            &header,
            &path.key("kind"),
            &one_of(SinkKind::KEYWORDS),
        )
        .and_then(|f| {
            report.keyword(
                f,
                &path.key("kind"),
                SinkKind::KEYWORDS,
                SinkKind::from_keyword,
            )
        });
    let file = report
        .required(&raw.path, &header, &path.key("path"), "a file path")
        .and_then(|f| file_path(f, &path.key("path"), report));
    let kind = kind?;

    let this = format!("a {} sink", kind.keyword());
    let allowed = match kind {
        SinkKind::Jsonl => "kind, path, rotate_bytes, rotate_secs, keep",
        SinkKind::Unix => "kind, path, client_queue, mode, group",
        SinkKind::Pcap => "kind, path, rotate_bytes",
        SinkKind::Shm => "kind, path, size_bytes",
    };
    let span = |f: &Option<Spanned<i64>>, key| f.as_ref().map(|f| (key, f.span()));
    let unix_keys = [
        span(&raw.client_queue, "client_queue"),
        span(&raw.mode, "mode"),
        raw.group.as_ref().map(|f| ("group", f.span())),
    ];
    let jsonl_keys = [
        span(&raw.rotate_secs, "rotate_secs"),
        span(&raw.keep, "keep"),
    ];
    let ring_key = span(&raw.size_bytes, "size_bytes");
    let foreign: Vec<_> = match kind {
        SinkKind::Jsonl => unix_keys.into_iter().chain([ring_key]).flatten().collect(),
        SinkKind::Unix => jsonl_keys
            .into_iter()
            .chain([span(&raw.rotate_bytes, "rotate_bytes"), ring_key])
            .flatten()
            .collect(),
        SinkKind::Pcap => unix_keys
            .into_iter()
            .chain(jsonl_keys)
            .chain([ring_key])
            .flatten()
            .collect(),
        SinkKind::Shm => unix_keys
            .into_iter()
            .chain(jsonl_keys)
            .chain([span(&raw.rotate_bytes, "rotate_bytes")])
            .flatten()
            .collect(),
    };
    for (key, span) in foreign {
        let owner = match key {
            "client_queue" | "mode" | "group" => "unix sinks",
            "rotate_bytes" => "jsonl and pcap sinks",
            "size_bytes" => "shm sinks",
            _ => "jsonl sinks",
        };
        report.foreign_keys(&[(key, span)], path, owner, &this, allowed);
    }

    match kind {
        SinkKind::Jsonl => {
            let rotate_bytes = report.int_or(
                &raw.rotate_bytes,
                &path.key("rotate_bytes"),
                1 << 20..=1 << 40,
                DEFAULT_ROTATE_BYTES,
            );
            let rotate_secs = report.int_or::<u64>(
                &raw.rotate_secs,
                &path.key("rotate_secs"),
                0..=366 * 86_400,
                0,
            );
            let keep = report.int_or(&raw.keep, &path.key("keep"), 0..=1000, DEFAULT_KEEP);
            Some(Sink::Jsonl {
                path: file?,
                rotate_bytes: rotate_bytes?,
                rotate_after: Some(rotate_secs?)
                    .filter(|&s| s > 0)
                    .map(Duration::from_secs),
                keep: keep?,
            })
        }
        SinkKind::Unix => {
            let client_queue = report.power_of_two(
                &raw.client_queue,
                &path.key("client_queue"),
                2..=MAX_QUEUE,
                DEFAULT_CLIENT_QUEUE,
            );
            let mode = report.int_or(&raw.mode, &path.key("mode"), 0..=0o777, DEFAULT_SOCKET_MODE);
            let group = match &raw.group {
                None => Some(None),
                Some(field) => {
                    let text = field.get_ref();
                    let ok = !text.is_empty()
                        && text.len() <= 32
                        && text
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
                    if !ok {
                        let found = format!("{} is not a group name", report.quote(&field.span()));
                        report.push(
                            ErrorKind::InvalidValue,
                            &field.span(),
                            &path.key("group"),
                            found,
                            "a group name or number, such as \"gapless-consumers\"",
                        );
                    }
                    ok.then(|| Some(text.clone()))
                }
            };
            let file = file?;
            let too_long = file.as_os_str().len() > MAX_UNIX_PATH;
            if let (true, Some(field)) = (too_long, &raw.path) {
                let found = format!(
                    "{} is too long for a Unix socket",
                    report.quote(&field.span())
                );
                let expected = format!("a path of at most {MAX_UNIX_PATH} bytes");
                report.push(
                    ErrorKind::OutOfRange,
                    &field.span(),
                    &path.key("path"),
                    found,
                    expected,
                );
                return None;
            }
            Some(Sink::Unix {
                path: file,
                client_queue: client_queue?,
                mode: mode?,
                group: group?,
            })
        }
        SinkKind::Pcap => {
            let rotate_bytes = report.int_or(
                &raw.rotate_bytes,
                &path.key("rotate_bytes"),
                1 << 20..=1 << 40,
                DEFAULT_ROTATE_BYTES,
            );
            Some(Sink::Pcap {
                path: file?,
                rotate_bytes: rotate_bytes?,
            })
        }
        SinkKind::Shm => {
            let size = report.power_of_two(
                &raw.size_bytes,
                &path.key("size_bytes"),
                1 << 16..=1 << 36,
                DEFAULT_RING_BYTES,
            );
            Some(Sink::Shm {
                path: file?,
                size_bytes: size?.get() as u64,
            })
        }
    }
}

fn file_path(field: &Spanned<String>, path: &Path, report: &mut Report<'_>) -> Option<PathBuf> {
    let text = field.get_ref();
    if text.trim().is_empty() || text.contains('\0') {
        let found = format!("{} is not a usable path", report.quote(&field.span()));
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            "a non-empty file path",
        );
        return None;
    }
    Some(PathBuf::from(text))
}
