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
use super::error::{ErrorKind, Report};
use super::locate::Path;
use super::raw::{List, RawConfig, RawDaemon, RawSink, RawVenue};
use super::schema::{
    Daemon, Idle, LogFormat, LogLevel, NatsSink, Rerequest, Sink, Venue, VenueKind,
};
use super::values::{PowerOfTwo, keyword_enum};
use super::venue;

/// The largest consumer or client queue, 2^24 slots.
const MAX_QUEUE: usize = 1 << 24;

/// Frames queued per Unix-socket client when `client_queue` is left out.
const DEFAULT_CLIENT_QUEUE: PowerOfTwo = PowerOfTwo::pow2(16);

/// pcap file size at which the next file starts when `rotate_bytes` is left out: 1 GiB.
const DEFAULT_ROTATE_BYTES: u64 = 1 << 30;

/// A unix sink's replay history when `history_bytes` is left out: 16 MiB.
const DEFAULT_HISTORY_BYTES: PowerOfTwo = PowerOfTwo::pow2(24);
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
        Nats = "nats",
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
    let mut venues = venues?;
    let sinks = sinks?;
    jetstream_sources(raw, &mut venues, &sinks, report)?;
    Some(Config {
        daemon: daemon?,
        venues,
        sinks,
    })
}

/// Resolves every `rerequest` entry that reads JetStream to the nats sink it names: the
/// only one for `"jetstream"`, the one with that `stream` for `"jetstream:STREAM"`.
fn jetstream_sources(
    raw: &RawConfig,
    venues: &mut [Venue],
    sinks: &[Sink],
    report: &mut Report<'_>,
) -> Option<()> {
    let streams: Vec<&str> = sinks
        .iter()
        .filter_map(|s| match s {
            Sink::Nats(n) => Some(n.stream.as_str()),
            _ => None,
        })
        .collect();
    let raw_venues = raw
        .venue
        .as_ref()
        .map(|l| l.get_ref().as_slice())
        .unwrap_or(&[]);
    let mut ok = true;
    for (v, (venue, raw_venue)) in venues.iter_mut().zip(raw_venues).enumerate() {
        let channels = match &mut venue.kind {
            VenueKind::MoldUdp64 { channels, .. } => channels
                .iter_mut()
                .map(|c| &mut c.rerequest)
                .collect::<Vec<_>>(),
            VenueKind::IexTp { channels, .. } => channels
                .iter_mut()
                .map(|c| &mut c.rerequest)
                .collect::<Vec<_>>(),
            VenueKind::Binance { .. } => continue,
        };
        let raw_channels = raw_venue
            .get_ref()
            .channel
            .as_ref()
            .map(|l| l.get_ref().as_slice())
            .unwrap_or(&[]);
        for (c, (entries, raw_channel)) in channels.into_iter().zip(raw_channels).enumerate() {
            let raw_entries = raw_channel
                .get_ref()
                .rerequest
                .as_ref()
                .map(|l| l.get_ref().as_slice())
                .unwrap_or(&[]);
            // "jetstream" and "jetstream:FEED" may name the same stream: duplicates of
            // these entries are found once they are resolved.
            let mut resolved = HashMap::new();
            for (i, (entry, raw_entry)) in entries.iter_mut().zip(raw_entries).enumerate() {
                let Rerequest::JetStream(named) = entry else {
                    continue;
                };
                let found = if named.is_empty() {
                    match streams.as_slice() {
                        [only] => Ok(*only),
                        [] => Err("there is no nats sink".to_string()),
                        several => Err(format!(
                            "there are {} nats sinks ({}): which one is not said",
                            several.len(),
                            several.join(", ")
                        )),
                    }
                } else if streams.contains(&named.as_str()) {
                    Ok(named.as_str())
                } else {
                    Err(format!("no nats sink has stream {named:?}"))
                };
                let path = Path::root()
                    .key("venue")
                    .index(v)
                    .key("channel")
                    .index(c)
                    .key("rerequest")
                    .index(i);
                match found {
                    Ok(stream) => {
                        let stream = stream.to_string();
                        let span = raw_entry.span();
                        report.unique(
                            &mut resolved,
                            stream.clone(),
                            &span,
                            &path,
                            "JetStream stream",
                        );
                        *named = stream;
                    }
                    Err(why) => {
                        ok = false;
                        report.push(
                            ErrorKind::InvalidValue,
                            &raw_entry.span(),
                            &path,
                            format!("{} reads JetStream, but {why}", report.quote(&raw_entry.span())),
                            "\"jetstream\" with one [[sink]] kind = \"nats\", or \"jetstream:STREAM\" \
                             naming one by its `stream`",
                        );
                    }
                }
            }
        }
    }
    ok.then_some(())
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
    let state_directory = match &raw.state_directory {
        None => Some(None),
        Some(field) => file_path(field, &path.key("state_directory"), report).map(Some),
    };
    Some(Daemon {
        metrics_listen: metrics_listen?,
        rx_core: rx_core?,
        idle: idle?,
        consumer_queue: consumer_queue?,
        log_level: log_level?,
        log_format: log_format?,
        state_directory: state_directory?,
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
    let kind = report.required_keyword(
        &raw.kind,
        &header,
        &path.key("kind"),
        SinkKind::KEYWORDS,
        SinkKind::from_keyword,
    );
    let kind = kind?;
    let file = if kind == SinkKind::Nats {
        None
    } else {
        report
            .required(&raw.path, &header, &path.key("path"), "a file path")
            .and_then(|f| file_path(f, &path.key("path"), report))
    };

    let this = format!("a {} sink", kind.keyword());
    let allowed: &[&str] = match kind {
        SinkKind::Jsonl => &["kind", "path", "rotate_bytes", "rotate_secs", "keep"],
        SinkKind::Unix => &[
            "kind",
            "path",
            "client_queue",
            "history_bytes",
            "mode",
            "group",
        ],
        SinkKind::Pcap => &["kind", "path", "rotate_bytes"],
        SinkKind::Shm => &["kind", "path", "size_bytes"],
        SinkKind::Nats => &NATS_KEYS,
    };
    let int = |f: &Option<Spanned<i64>>, key| f.as_ref().map(|f| (key, f.span()));
    let text = |f: &Option<Spanned<String>>, key| f.as_ref().map(|f| (key, f.span()));
    let present = [
        text(&raw.path, "path"),
        int(&raw.client_queue, "client_queue"),
        int(&raw.history_bytes, "history_bytes"),
        int(&raw.mode, "mode"),
        text(&raw.group, "group"),
        int(&raw.rotate_bytes, "rotate_bytes"),
        int(&raw.rotate_secs, "rotate_secs"),
        int(&raw.keep, "keep"),
        int(&raw.size_bytes, "size_bytes"),
        text(&raw.url, "url"),
        text(&raw.stream, "stream"),
        text(&raw.subject_prefix, "subject_prefix"),
        int(&raw.duplicate_window_secs, "duplicate_window_secs"),
        int(&raw.max_age_secs, "max_age_secs"),
        int(&raw.max_pending, "max_pending"),
        text(&raw.instance, "instance"),
        text(&raw.creds, "creds"),
        text(&raw.tls_ca, "tls_ca"),
        text(&raw.tls_cert, "tls_cert"),
        text(&raw.tls_key, "tls_key"),
    ];
    for (key, span) in present.into_iter().flatten() {
        if allowed.contains(&key) {
            continue;
        }
        let owner = match key {
            "path" => "jsonl, unix, pcap and shm sinks",
            "client_queue" | "history_bytes" | "mode" | "group" => "unix sinks",
            "rotate_bytes" => "jsonl and pcap sinks",
            "rotate_secs" | "keep" => "jsonl sinks",
            "size_bytes" => "shm sinks",
            _ => "nats sinks",
        };
        report.foreign_keys(&[(key, span)], path, owner, &this, &allowed.join(", "));
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
            let history = report.power_of_two(
                &raw.history_bytes,
                &path.key("history_bytes"),
                1 << 16..=1 << 36,
                DEFAULT_HISTORY_BYTES,
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
                history_bytes: history?.get() as u64,
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
        SinkKind::Nats => nats_sink(raw, &header, path, report).map(|n| Sink::Nats(Box::new(n))),
    }
}

/// The keys of a nats sink.
const NATS_KEYS: [&str; 12] = [
    "kind",
    "url",
    "stream",
    "subject_prefix",
    "duplicate_window_secs",
    "max_age_secs",
    "max_pending",
    "instance",
    "creds",
    "tls_ca",
    "tls_cert",
    "tls_key",
];

/// A nats sink's duplicate window when `duplicate_window_secs` is left out: two minutes,
/// JetStream's own default.
const DEFAULT_DUPLICATE_WINDOW_SECS: u64 = 120;

/// Publishes awaiting their acknowledgement when `max_pending` is left out.
const DEFAULT_MAX_PENDING: u32 = 4096;

fn nats_sink(
    raw: &RawSink,
    header: &std::ops::Range<usize>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<NatsSink> {
    let url = report
        .required(&raw.url, header, &path.key("url"), NATS_URL)
        .and_then(|f| nats_url(f, &path.key("url"), report));
    let stream = report
        .required(&raw.stream, header, &path.key("stream"), NATS_NAME)
        .and_then(|f| nats_token(f, &path.key("stream"), report, false));
    let prefix = match &raw.subject_prefix {
        None => Some("gapless".to_string()),
        Some(f) => nats_token(f, &path.key("subject_prefix"), report, true),
    };
    let window = report.int_or::<u64>(
        &raw.duplicate_window_secs,
        &path.key("duplicate_window_secs"),
        1..=7 * 86_400,
        DEFAULT_DUPLICATE_WINDOW_SECS,
    );
    let max_age = report.int_or::<u64>(
        &raw.max_age_secs,
        &path.key("max_age_secs"),
        0..=3650 * 86_400,
        0,
    );
    let max_pending = report.int_or(
        &raw.max_pending,
        &path.key("max_pending"),
        1..=1 << 20,
        DEFAULT_MAX_PENDING,
    );
    let instance = match &raw.instance {
        None => Some(host_name()),
        Some(f) => nats_token(f, &path.key("instance"), report, false),
    };
    let optional_file = |f: &Option<Spanned<String>>, key: &str, report: &mut Report<'_>| match f {
        None => Some(None),
        Some(f) => file_path(f, &path.key(key), report).map(Some),
    };
    let creds = optional_file(&raw.creds, "creds", report);
    let tls_ca = optional_file(&raw.tls_ca, "tls_ca", report);
    let tls_cert = optional_file(&raw.tls_cert, "tls_cert", report);
    let tls_key = optional_file(&raw.tls_key, "tls_key", report);
    let tls_client = match (tls_cert?, tls_key?) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (cert, _) => {
            let (given, missing) = if cert.is_some() {
                (&raw.tls_cert, "tls_key")
            } else {
                (&raw.tls_key, "tls_cert")
            };
            let span = given.as_ref().map_or_else(|| header.clone(), Spanned::span);
            report.push(
                ErrorKind::MissingKey,
                &span,
                &path.key(missing),
                format!("a client certificate needs both `tls_cert` and `tls_key`; `{missing}` is missing"),
                "both keys, or neither",
            );
            return None;
        }
    };
    let window = window?;
    let max_age = max_age?;
    Some(NatsSink {
        url: url?,
        stream: stream?,
        subject_prefix: prefix?,
        duplicate_window: Duration::from_secs(window),
        max_age: Some(max_age).filter(|&s| s > 0).map(Duration::from_secs),
        max_pending: max_pending?,
        instance: instance?,
        creds: creds?,
        tls_ca: tls_ca?,
        tls_client,
    })
}

const NATS_URL: &str = "a NATS server such as \"nats://127.0.0.1:4222\" (several: comma-separated)";
const NATS_NAME: &str = "1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'";

/// One or more `nats://`, `tls://` or `ws://`-less server addresses, comma-separated.
fn nats_url(field: &Spanned<String>, path: &Path, report: &mut Report<'_>) -> Option<String> {
    let text = field.get_ref();
    let ok = !text.trim().is_empty()
        && text.split(',').all(|one| {
            let one = one.trim();
            let rest = one
                .strip_prefix("nats://")
                .or_else(|| one.strip_prefix("tls://"))
                .unwrap_or(one);
            let host_port = rest.rsplit('@').next().unwrap_or("");
            host_port.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            })
        });
    if !ok {
        let found = format!(
            "{} is not a NATS server address",
            report.quote(&field.span())
        );
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            NATS_URL,
        );
        return None;
    }
    Some(text.clone())
}

/// A JetStream stream name or one subject token (or, with `dots`, several tokens).
fn nats_token(
    field: &Spanned<String>,
    path: &Path,
    report: &mut Report<'_>,
    dots: bool,
) -> Option<String> {
    let text = field.get_ref();
    let token_ok = |t: &str| {
        !t.is_empty()
            && t.len() <= 64
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let ok = if dots {
        text.len() <= 128 && text.split('.').all(token_ok)
    } else {
        token_ok(text)
    };
    if !ok {
        let found = format!("{} is not a usable NATS name", report.quote(&field.span()));
        let expected = if dots {
            "tokens of A-Z, a-z, 0-9, '_' and '-', separated by '.'"
        } else {
            NATS_NAME
        };
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            expected,
        );
        return None;
    }
    Some(text.clone())
}

/// This host's name as a NATS token (its characters outside the token's alphabet become
/// '_'), or "gapless" where it cannot be read.
fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "gapless".to_string()
    } else {
        name
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
