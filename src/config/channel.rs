//! Checks of one `[[venue.channel]]` table: the multicast group, the sender, the session and
//! the servers that fill gaps.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use toml::Spanned;

use super::check::{GROUP, NAME, SERVER};
use super::error::{ErrorKind, Report};
use super::locate::Path;
use super::raw::{RawChannel, RawLine, RawSnapshot};
use super::schema::{Channel, Line, Rerequest, Snapshot};
use super::values::{IexSession, MoldSession, SoupLogin, keyword_enum};

/// `SO_RCVBUF` when `rcvbuf` is left out: 64 MiB, enough for a burst of a busy feed.
const DEFAULT_RCVBUF: usize = 64 << 20;

keyword_enum! {
    /// The snapshot services.
    enum SnapshotKind {
        SoupBinTcp = "soupbintcp",
    }
}

/// Checks one `[[venue.channel]]` table at `path`; `session` reads the protocol's session.
pub(super) fn channel<S>(
    table: &Spanned<RawChannel>,
    path: &Path,
    report: &mut Report<'_>,
    session: fn(&Spanned<toml::Value>, &Path, &mut Report<'_>) -> Option<S>,
) -> Option<Channel<S>> {
    let raw = table.get_ref();
    let header = table.span();
    let name = report
        .required(&raw.name, &header, &path.key("name"), NAME)
        .and_then(|f| report.name(f, &path.key("name")));
    let lines = match &raw.lines {
        None => {
            let one = RawLine {
                group: raw.group.clone(),
                interface: raw.interface.clone(),
                source: raw.source.clone(),
            };
            line(&one, &header, path, report).map(|l| vec![l])
        }
        Some(list) => {
            let shorthand = [
                ("group", &raw.group),
                ("interface", &raw.interface),
                ("source", &raw.source),
            ];
            for (key, field) in shorthand {
                if let Some(f) = field {
                    report.push(
                        ErrorKind::InvalidValue,
                        &f.span(),
                        &path.key(key),
                        format!("`{key}` beside `lines`"),
                        "either `lines = [...]` or the one-line shorthand `group`, \
                         `interface`, `source`, not both",
                    );
                }
            }
            let items = list.get_ref();
            if items.is_empty() || items.len() > MAX_LINES {
                let found = format!("{} lines", items.len());
                let expected = format!("1 to {MAX_LINES} lines");
                report.push(
                    ErrorKind::InvalidValue,
                    &list.span(),
                    &path.key("lines"),
                    found,
                    &expected,
                );
                None
            } else {
                let built: Vec<Option<Line>> = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        line(
                            item.get_ref(),
                            &item.span(),
                            &path.key("lines").index(i),
                            report,
                        )
                    })
                    .collect();
                built.into_iter().collect()
            }
        }
    };
    let session = match &raw.session {
        None => Some(None),
        Some(f) => session(f, &path.key("session"), report).map(Some),
    };
    let rerequest = match &raw.rerequest {
        None => Some(Vec::new()),
        Some(list) => {
            let mut seen = HashMap::new();
            let mut servers = Vec::new();
            for (index, item) in list.get_ref().iter().enumerate() {
                let path = path.key("rerequest").index(index);
                let server = match jetstream_entry(item.get_ref()) {
                    // Which nats sink it names, and whether another entry names the same,
                    // is checked once the sinks are read.
                    Some(stream) => Some(Rerequest::JetStream(stream.to_string())),
                    None => report.server(item, &path).map(|addr| {
                        report.unique(&mut seen, addr, &item.span(), &path, "re-request server");
                        Rerequest::Server(addr)
                    }),
                };
                servers.push(server);
            }
            servers.into_iter().collect()
        }
    };
    let snapshot = match &raw.snapshot {
        None => Some(None),
        Some(t) => snapshot(t, &path.key("snapshot"), report).map(Some),
    };
    let no_rerequest = raw
        .rerequest
        .as_ref()
        .is_none_or(|l| l.get_ref().is_empty());
    if no_rerequest && raw.snapshot.is_none() {
        report.warn(
            ErrorKind::NoRecovery,
            &header,
            path,
            "the channel has neither `rerequest` nor `snapshot`: a gap on it cannot be \
             recovered (with gap_policy \"hold\" the stream stops at its first gap; with \
             \"skip\" each gap is declared lost)",
            "`rerequest` servers, a `snapshot` service, or both, unless loss is acceptable",
        );
    }
    let rcvbuf = report.int_or(
        &raw.rcvbuf,
        &path.key("rcvbuf"),
        4096..=i64::from(i32::MAX),
        DEFAULT_RCVBUF,
    );
    Some(Channel {
        name: name?,
        lines: lines?,
        session: session?,
        rerequest: rerequest?,
        snapshot: snapshot?,
        rcvbuf: rcvbuf?,
    })
}

/// The stream named by a `rerequest` entry that reads JetStream: `""` for `"jetstream"`
/// (the only nats sink), `STREAM` for `"jetstream:STREAM"`; `None` for any other entry.
pub(super) fn jetstream_entry(text: &str) -> Option<&str> {
    let rest = text.strip_prefix(JETSTREAM)?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix(':')
    }
}

/// The `rerequest` entry that names a nats sink's JetStream stream.
pub(super) const JETSTREAM: &str = "jetstream";

/// Lines a channel takes at most.
pub(super) const MAX_LINES: usize = 8;

/// One line of a channel at `path` (the channel itself for the shorthand keys); `header`
/// is where a missing `group` is reported.
fn line(
    raw: &RawLine,
    header: &std::ops::Range<usize>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<Line> {
    let group = report
        .required(&raw.group, header, &path.key("group"), GROUP)
        .and_then(|f| report.group(f, &path.key("group")));
    let local = "a local unicast IPv4 address such as \"10.1.2.3\", or \"0.0.0.0\"";
    let interface = match &raw.interface {
        None => Some(Ipv4Addr::UNSPECIFIED),
        Some(f) => report
            .ipv4(f, &path.key("interface"), local)
            .and_then(|ip| match ip.is_unspecified() {
                true => Some(ip),
                false => report.unicast(ip, &f.span(), &path.key("interface"), local),
            }),
    };
    let sender = "the unicast IPv4 address of the sender, such as \"206.200.1.1\"";
    let source = match &raw.source {
        None => Some(None),
        Some(f) => report
            .ipv4(f, &path.key("source"), sender)
            .and_then(|ip| report.unicast(ip, &f.span(), &path.key("source"), sender))
            .map(Some),
    };
    Some(Line {
        group: group?,
        interface: interface?,
        source: source?,
    })
}

/// The `snapshot = { ... }` table of a channel.
fn snapshot(
    table: &Spanned<RawSnapshot>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<Snapshot> {
    let raw = table.get_ref();
    let header = table.span();
    let kind = report.required_keyword(
        &raw.kind,
        &header,
        &path.key("kind"),
        SnapshotKind::KEYWORDS,
        SnapshotKind::from_keyword,
    );
    let addr = report
        .required(&raw.addr, &header, &path.key("addr"), SERVER)
        .and_then(|f| report.server(f, &path.key("addr")));
    let username = credential(&raw.username, &header, &path.key("username"), 6, report);
    let password = credential(&raw.password, &header, &path.key("password"), 10, report);
    match kind? {
        SnapshotKind::SoupBinTcp => Some(Snapshot::SoupBinTcp {
            addr: addr?,
            login: SoupLogin::new(username?, password?)?,
        }),
    }
}

/// A SoupBinTCP username or password: at most `max` printable ASCII characters.
fn credential<'f>(
    field: &'f Option<Spanned<String>>,
    header: &std::ops::Range<usize>,
    path: &Path,
    max: usize,
    report: &mut Report<'_>,
) -> Option<&'f str> {
    let expected = format!("at most {max} printable ASCII characters without spaces");
    let field = report.required(field, header, path, &expected)?;
    let text = field.get_ref().as_str();
    let ok = text.len() <= max && text.bytes().all(|b| b.is_ascii_graphic());
    if !ok {
        let found = format!("{} is not allowed", report.quote(&field.span()));
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            expected,
        );
    }
    ok.then_some(text)
}

/// A MoldUDP64 session name, a string.
pub(super) fn mold_session(
    field: &Spanned<toml::Value>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<MoldSession> {
    let session = field.get_ref().as_str().and_then(MoldSession::new);
    if session.is_none() {
        let found = format!("{} is not a MoldUDP64 session", report.quote(&field.span()));
        let expected = "a string of 1 to 10 printable ASCII characters such as \"000010059B\"";
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            expected,
        );
    }
    session
}

/// An IEX-TP session id, an integer or a string holding one.
pub(super) fn iex_session(
    field: &Spanned<toml::Value>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<IexSession> {
    let session = match field.get_ref() {
        toml::Value::Integer(n) => u32::try_from(*n).ok(),
        toml::Value::String(s) => s.trim().parse::<u32>().ok(),
        _ => None,
    };
    if session.is_none() {
        let found = format!(
            "{} is not an IEX-TP session id",
            report.quote(&field.span())
        );
        let expected = format!(
            "an integer from 0 to {}, written as a number or a string",
            u32::MAX
        );
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            expected,
        );
    }
    session.map(IexSession)
}
