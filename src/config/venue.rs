//! Checks of one `[[venue]]` table: its kind, its list of channels and its recovery table.

use std::collections::HashMap;
use std::time::Duration;

use toml::Spanned;

use super::channel::{iex_session, mold_session};
use super::check::NAME;
use super::error::{ErrorKind, Report};
use super::locate::Path;
use super::raw::{RawRecovery, RawVenue};
use super::schema::{Buffering, Channel, GapPolicy, Recovery, Start, Venue, VenueKind};
use super::values::keyword_enum;

keyword_enum! {
    /// The venue protocols.
    enum Protocol {
        MoldUdp64 = "moldudp64",
        IexTp = "iex-tp",
        Binance = "binance",
    }
}

/// Checks one venue table at `path` (`venue[i]`).
pub(super) fn venue(
    table: &Spanned<RawVenue>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<Venue> {
    let raw = table.get_ref();
    let header = table.span();
    let name = report
        .required(&raw.name, &header, &path.key("name"), NAME)
        .and_then(|f| report.name(f, &path.key("name")));
    let protocol = report.required_keyword(
        &raw.kind,
        &header,
        &path.key("kind"),
        Protocol::KEYWORDS,
        Protocol::from_keyword,
    );
    let kind = match protocol? {
        Protocol::MoldUdp64 => {
            let (start, recovery) = multicast_common(table, path, Protocol::MoldUdp64, report);
            let channels = channels(table, path, report, mold_session);
            Some(VenueKind::MoldUdp64 {
                start: start?,
                channels: channels?,
                recovery: recovery?,
            })
        }
        Protocol::IexTp => {
            let (start, recovery) = multicast_common(table, path, Protocol::IexTp, report);
            let channels = channels(table, path, report, iex_session);
            Some(VenueKind::IexTp {
                start: start?,
                channels: channels?,
                recovery: recovery?,
            })
        }
        Protocol::Binance => super::binance::binance(table, path, report),
    };
    Some(Venue {
        name: name?,
        kind: kind?,
    })
}

/// The keys a multicast venue has besides its channels.
fn multicast_common(
    table: &Spanned<RawVenue>,
    path: &Path,
    protocol: Protocol,
    report: &mut Report<'_>,
) -> (Option<Start>, Option<Recovery>) {
    let raw = table.get_ref();
    let this = format!("a {} venue", protocol.keyword());
    let allowed = "name, kind, start, channel, recovery";
    report.foreign_keys(&raw.binance_keys(), path, "binance venues", &this, allowed);
    let start = match &raw.start {
        None => Some(Start::Live),
        Some(f) => report.keyword(f, &path.key("start"), Start::KEYWORDS, Start::from_keyword),
    };
    let recovery = match &raw.recovery {
        None => Some(Recovery::default()),
        Some(table) => recovery(table.get_ref(), &path.key("recovery"), report),
    };
    (start, recovery)
}

/// The `[[venue.channel]]` tables of a multicast venue; `session` reads the protocol's session.
fn channels<S>(
    table: &Spanned<RawVenue>,
    path: &Path,
    report: &mut Report<'_>,
    session: fn(&Spanned<toml::Value>, &Path, &mut Report<'_>) -> Option<S>,
) -> Option<Vec<Channel<S>>> {
    let path = path.key("channel");
    let list = table.get_ref().channel.as_ref();
    let Some(list) = list.filter(|l| !l.get_ref().is_empty()) else {
        let span = list.map_or(table.span(), Spanned::span);
        let found = "the venue has no channel";
        let expected = "at least one [[venue.channel]] table";
        report.push(ErrorKind::MissingKey, &span, &path, found, expected);
        return None;
    };
    let (mut names, mut groups) = (HashMap::new(), HashMap::new());
    let mut built = Vec::new();
    for (index, channel) in list.get_ref().iter().enumerate() {
        let path = path.index(index);
        let raw = channel.get_ref();
        if let Some(name) = &raw.name {
            let key = name.get_ref().clone();
            report.unique(
                &mut names,
                key,
                &name.span(),
                &path.key("name"),
                "channel name",
            );
        }
        let built_channel = super::channel::channel(channel, &path, report, session);
        if let Some(c) = &built_channel {
            // Every line's group is unique in the venue: a datagram names its line by
            // its group alone.
            let spans: Vec<(Path, std::ops::Range<usize>)> = match (&raw.group, &raw.lines) {
                (Some(group), _) => vec![(path.key("group"), group.span())],
                (None, Some(lines)) => lines
                    .get_ref()
                    .iter()
                    .enumerate()
                    .map(|(i, l)| {
                        let span = l.get_ref().group.as_ref().map_or(l.span(), |g| g.span());
                        (path.key("lines").index(i).key("group"), span)
                    })
                    .collect(),
                (None, None) => Vec::new(),
            };
            for (line, (at, span)) in c.lines.iter().zip(spans) {
                report.unique(&mut groups, line.group, &span, &at, "group");
            }
        }
        built.push(built_channel);
    }
    built.into_iter().collect()
}

/// The reorder ring and buffer limits, shared by every venue kind.
pub(super) fn buffering(
    raw: &RawRecovery,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<Buffering> {
    let default = Recovery::default().buffering;
    let window = report.power_of_two(
        &raw.reorder_window,
        &path.key("reorder_window"),
        2..=Buffering::MAX_WINDOW,
        default.reorder_window(),
    )?;
    let max = i64::try_from(window.get()).unwrap_or(i64::MAX);
    let max_buffered = report.int_or(
        &raw.max_buffered,
        &path.key("max_buffered"),
        1..=max,
        window.get(),
    )?;
    Buffering::new(window, max_buffered)
}

/// Milliseconds within `range`, or `default` for an absent key.
pub(super) fn millis(
    field: &Option<Spanned<i64>>,
    path: &Path,
    range: std::ops::RangeInclusive<i64>,
    default: Duration,
    report: &mut Report<'_>,
) -> Option<Duration> {
    report.duration_or(field, path, range, Duration::from_millis, default)
}

/// Microseconds, 0 to one second, or `default` for an absent key.
fn micros(
    field: &Option<Spanned<i64>>,
    path: &Path,
    default: Duration,
    report: &mut Report<'_>,
) -> Option<Duration> {
    report.duration_or(field, path, 0..=1_000_000, Duration::from_micros, default)
}

fn recovery(raw: &RawRecovery, path: &Path, report: &mut Report<'_>) -> Option<Recovery> {
    let d = Recovery::default();
    let buffering = buffering(raw, path, report);
    let held_datagrams = report.int_or(
        &raw.held_datagrams,
        &path.key("held_datagrams"),
        8..=262_144,
        d.held_datagrams,
    );
    let reorder_delay = micros(
        &raw.reorder_delay_us,
        &path.key("reorder_delay_us"),
        d.reorder_delay,
        report,
    );
    let request_timeout = millis(
        &raw.request_timeout_ms,
        &path.key("request_timeout_ms"),
        1..=60_000,
        d.request_timeout,
        report,
    );
    let max_request_count = report.int_or(
        &raw.max_request_count,
        &path.key("max_request_count"),
        1..=65534,
        d.max_request_count,
    );
    let retry_budget = report.int_or(
        &raw.retry_budget,
        &path.key("retry_budget"),
        0..=1000,
        d.retry_budget,
    );
    let requests_per_sec = report.int_or(
        &raw.requests_per_sec,
        &path.key("requests_per_sec"),
        1..=1_000_000,
        d.requests_per_sec,
    );
    let max_replay = report.int_or(
        &raw.max_replay,
        &path.key("max_replay"),
        0..=i64::MAX,
        d.max_replay,
    );
    let reset_threshold = match &raw.reset_threshold {
        None => Some(d.reset_threshold),
        Some(f) => report
            .int::<u64>(f, &path.key("reset_threshold"), 0..=i64::MAX)
            .map(|n| (n > 0).then_some(n)),
    };
    let session_confirm = report.int_or(
        &raw.session_confirm,
        &path.key("session_confirm"),
        1..=16,
        d.session_confirm,
    );
    let snapshot_timeout = millis(
        &raw.snapshot_timeout_ms,
        &path.key("snapshot_timeout_ms"),
        1..=3_600_000,
        d.snapshot_timeout,
        report,
    );
    let gap_policy = match &raw.gap_policy {
        None => Some(d.gap_policy),
        Some(f) => report.keyword(
            f,
            &path.key("gap_policy"),
            GapPolicy::KEYWORDS,
            GapPolicy::from_keyword,
        ),
    };
    let gap_deadline = millis(
        &raw.gap_deadline_ms,
        &path.key("gap_deadline_ms"),
        1..=3_600_000,
        d.gap_deadline,
        report,
    );
    if let (Some(GapPolicy::Hold), Some(f)) = (gap_policy, &raw.gap_deadline_ms) {
        // Hold never declares a gap lost: a deadline here would be silently ignored.
        report.push(
            ErrorKind::InvalidValue,
            &f.span(),
            &path.key("gap_deadline_ms"),
            format!("{} with gap_policy = \"hold\"", report.quote(&f.span())),
            "gap_deadline_ms only with gap_policy = \"skip\" (hold never declares a gap lost)",
        );
    }
    let arbitration_window = micros(
        &raw.arbitration_window_us,
        &path.key("arbitration_window_us"),
        d.arbitration_window,
        report,
    );
    let line_down = millis(
        &raw.line_down_ms,
        &path.key("line_down_ms"),
        10..=600_000,
        d.line_down,
        report,
    );
    Some(Recovery {
        arbitration_window: arbitration_window?,
        line_down: line_down?,
        gap_policy: gap_policy?,
        gap_deadline: gap_deadline?,
        buffering: buffering?,
        held_datagrams: held_datagrams?,
        reorder_delay: reorder_delay?,
        request_timeout: request_timeout?,
        max_request_count: max_request_count?,
        retry_budget: retry_budget?,
        requests_per_sec: requests_per_sec?,
        max_replay: max_replay?,
        reset_threshold: reset_threshold?,
        session_confirm: session_confirm?,
        snapshot_timeout: snapshot_timeout?,
    })
}
