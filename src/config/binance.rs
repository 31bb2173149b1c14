//! Checks of a Binance venue: market, endpoints, symbols and the depth-stream settings.

use std::collections::HashMap;
use std::time::Duration;

use toml::Spanned;

use super::check::one_of;
use super::error::{ErrorKind, Report};
use super::locate::Path;
use super::raw::RawVenue;
use super::schema::{BinanceLink, Buffering, Market, Recovery, UpdateSpeed, VenueKind};
use super::values::{DepthLimit, Symbol, Url};
use super::venue::{buffering, millis};

/// REST weight per minute when `weight_budget_per_min` is left out: half of the futures IP
/// limit of 2400, leaving room for other processes on the same address.
const DEFAULT_WEIGHT_BUDGET: u32 = 1200;

/// Silence that ends a connection when `silence_timeout_ms` is left out.
const DEFAULT_SILENCE: Duration = Duration::from_millis(5000);

/// Connection lifetime when `ws_max_age_secs` is left out: 23 hours, an hour before the
/// server's 24-hour cut.
const DEFAULT_WS_MAX_AGE: Duration = Duration::from_secs(82_800);

/// Snapshot depth when `depth_limit` is left out.
const DEFAULT_DEPTH: u16 = 1000;

/// What a symbol allows.
const SYMBOL: &str = "a lowercase symbol of a-z, 0-9 and '_' such as \"btcusdt\"";

/// Checks the Binance part of the venue table at `path`.
pub(super) fn binance(
    table: &Spanned<RawVenue>,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<VenueKind> {
    let raw = table.get_ref();
    let header = table.span();
    let allowed = "name, kind, recovery, market, ws_url, rest_url, symbols, depth_limit, \
                   update_speed, weight_budget_per_min, silence_timeout_ms, ws_max_age_secs, \
                   resolve_timeout_ms, connect_timeout_ms, tls_timeout_ms, upgrade_timeout_ms, \
                   ping_interval_ms, healthy_after_secs, connect_budget, \
                   connect_budget_window_secs, connections, relink_timeout_ms, \
                   rotate_timeout_ms";
    let owner = "moldudp64 and iex-tp venues";
    report.foreign_keys(
        &raw.multicast_keys(),
        path,
        owner,
        "a binance venue",
        allowed,
    );

    let market = report.required_keyword(
        &raw.market,
        &header,
        &path.key("market"),
        Market::KEYWORDS,
        Market::from_keyword,
    );
    let symbols = symbols(table, path, report);
    let (buffering, snapshot_timeout) = match &raw.recovery {
        None => {
            let d = Recovery::default();
            (Some(d.buffering), Some(d.snapshot_timeout))
        }
        Some(recovery) => recovery_subset(recovery, &path.key("recovery"), report),
    };
    let weight_budget_per_min = report.int_or(
        &raw.weight_budget_per_min,
        &path.key("weight_budget_per_min"),
        1..=100_000,
        DEFAULT_WEIGHT_BUDGET,
    );
    let silence_timeout = millis(
        &raw.silence_timeout_ms,
        &path.key("silence_timeout_ms"),
        100..=600_000,
        DEFAULT_SILENCE,
        report,
    );
    let ws_max_age = report.duration_or(
        &raw.ws_max_age_secs,
        &path.key("ws_max_age_secs"),
        60..=86_399,
        Duration::from_secs,
        DEFAULT_WS_MAX_AGE,
    );
    let link = link(raw, path, silence_timeout, report);
    if let (Some(symbols), Some(link), Some(list)) = (&symbols, &link, &raw.symbols) {
        slots(
            symbols,
            link.connections,
            &list.span(),
            &path.key("symbols"),
            report,
        );
    }

    let ws_url = url(
        &raw.ws_url,
        market.map(Market::default_ws_url),
        path,
        "ws_url",
        report,
    );
    let rest_url = url(
        &raw.rest_url,
        market.map(Market::default_rest_url),
        path,
        "rest_url",
        report,
    );
    // Allowed depths and speeds depend on the market.
    let market = market?;
    let depth_limit = depth_limit(raw, market, &path.key("depth_limit"), report);
    let update_speed = update_speed(raw, market, &path.key("update_speed"), report);
    Some(VenueKind::Binance {
        market,
        ws_url: ws_url?,
        rest_url: rest_url?,
        symbols: symbols?,
        depth_limit: depth_limit?,
        update_speed: update_speed?,
        weight_budget_per_min: weight_budget_per_min?,
        silence_timeout: silence_timeout?,
        ws_max_age: ws_max_age?,
        link: link?,
        buffering: buffering?,
        snapshot_timeout: snapshot_timeout?,
    })
}

/// The connection keys: step deadlines, pings, health and the attempt budget.
fn link(
    raw: &RawVenue,
    path: &Path,
    silence: Option<Duration>,
    report: &mut Report<'_>,
) -> Option<BinanceLink> {
    let d = BinanceLink::default();
    let step = |field, key: &str, default, report: &mut Report<'_>| {
        millis(field, &path.key(key), 10..=120_000, default, report)
    };
    let resolve_timeout = step(
        &raw.resolve_timeout_ms,
        "resolve_timeout_ms",
        d.resolve_timeout,
        report,
    );
    let connect_timeout = step(
        &raw.connect_timeout_ms,
        "connect_timeout_ms",
        d.connect_timeout,
        report,
    );
    let tls_timeout = step(&raw.tls_timeout_ms, "tls_timeout_ms", d.tls_timeout, report);
    let upgrade_timeout = step(
        &raw.upgrade_timeout_ms,
        "upgrade_timeout_ms",
        d.upgrade_timeout,
        report,
    );
    // Pings must come well inside the silence timeout to keep a quiet connection alive.
    let ping_max = silence.map_or(600_000, |s| {
        i64::try_from(s.as_millis()).unwrap_or(i64::MAX) / 2
    });
    let ping_interval = millis(
        &raw.ping_interval_ms,
        &path.key("ping_interval_ms"),
        0..=ping_max,
        d.ping_interval
            .min(Duration::from_millis(u64::try_from(ping_max).unwrap_or(0))),
        report,
    );
    let healthy_after = report.duration_or(
        &raw.healthy_after_secs,
        &path.key("healthy_after_secs"),
        1..=3_600,
        Duration::from_secs,
        d.healthy_after,
    );
    // Binance bans an address making more than 300 attempts in 5 minutes.
    let connect_budget = report.int_or(
        &raw.connect_budget,
        &path.key("connect_budget"),
        1..=250,
        d.connect_budget,
    );
    let connect_budget_window = report.duration_or(
        &raw.connect_budget_window_secs,
        &path.key("connect_budget_window_secs"),
        60..=3_600,
        Duration::from_secs,
        d.connect_budget_window,
    );
    let connections = report.int_or(
        &raw.connections,
        &path.key("connections"),
        1..=4,
        d.connections,
    );
    let relink_timeout = millis(
        &raw.relink_timeout_ms,
        &path.key("relink_timeout_ms"),
        0..=600_000,
        d.relink_timeout,
        report,
    );
    let rotate_timeout = millis(
        &raw.rotate_timeout_ms,
        &path.key("rotate_timeout_ms"),
        100..=600_000,
        d.rotate_timeout,
        report,
    );
    Some(BinanceLink {
        resolve_timeout: resolve_timeout?,
        connect_timeout: connect_timeout?,
        tls_timeout: tls_timeout?,
        upgrade_timeout: upgrade_timeout?,
        ping_interval: ping_interval?,
        healthy_after: healthy_after?,
        connect_budget: connect_budget?,
        connect_budget_window: connect_budget_window?,
        connections: connections?,
        relink_timeout: relink_timeout?,
        rotate_timeout: rotate_timeout?,
    })
}

/// Streams Binance allows on one WebSocket connection: more symbols are split across
/// connections.
pub const MAX_STREAMS_PER_CONNECTION: usize = crate::venue::binance::MAX_STREAMS_PER_CONNECTION;

/// Refuses symbols too many for the connection slots a venue has: they are split into
/// shards of at most [`MAX_STREAMS_PER_CONNECTION`] streams (and a bounded URL), each with
/// `connections` permanent connections and a spare slot for each.
fn slots(
    symbols: &[Symbol],
    connections: u8,
    span: &std::ops::Range<usize>,
    path: &Path,
    report: &mut Report<'_>,
) {
    let mut spec = crate::venue::binance::BinanceSpec::new(
        crate::venue::binance::Market::Spot,
        symbols.iter().map(|s| s.as_str().to_string()).collect(),
    );
    spec.connections = usize::from(connections);
    let shards = spec.shards().len();
    let slots = shards * spec.slots_per_shard();
    if slots > crate::venue::binance::MAX_SLOTS {
        let found = format!(
            "{} symbols: {shards} connections' worth, with {connections} permanent connections each",
            symbols.len()
        );
        let expected = format!(
            "symbols and connections that need at most {} connection slots (two per \
             permanent connection per {MAX_STREAMS_PER_CONNECTION} streams): split the \
             symbols across venues",
            crate::venue::binance::MAX_SLOTS
        );
        report.push(ErrorKind::OutOfRange, span, path, found, expected);
    }
}

fn symbols(table: &Spanned<RawVenue>, path: &Path, report: &mut Report<'_>) -> Option<Vec<Symbol>> {
    let path = path.key("symbols");
    let expected = "a non-empty array of lowercase symbols such as [\"btcusdt\", \"ethusdt\"]";
    let list = report.required(&table.get_ref().symbols, &table.span(), &path, expected)?;
    if list.get_ref().is_empty() {
        let found = "the array of symbols is empty";
        report.push(ErrorKind::OutOfRange, &list.span(), &path, found, expected);
        return None;
    }
    let mut seen = HashMap::new();
    let mut built = Vec::new();
    for (index, item) in list.get_ref().iter().enumerate() {
        let path = path.index(index);
        let symbol = Symbol::new(item.get_ref());
        match &symbol {
            None => {
                let found = format!("{} is not a valid symbol", report.quote(&item.span()));
                report.push(ErrorKind::InvalidValue, &item.span(), &path, found, SYMBOL);
            }
            Some(s) => report.unique(&mut seen, s.clone(), &item.span(), &path, "symbol"),
        }
        built.push(symbol);
    }
    built.into_iter().collect()
}

/// `reorder_window`, `max_buffered` and `snapshot_timeout_ms`: the part of `[venue.recovery]`
/// that applies to a venue without re-requests.
fn recovery_subset(
    table: &Spanned<super::raw::RawRecovery>,
    path: &Path,
    report: &mut Report<'_>,
) -> (Option<Buffering>, Option<Duration>) {
    let raw = table.get_ref();
    let allowed = "reorder_window, max_buffered, snapshot_timeout_ms";
    let owner = "the recovery of moldudp64 and iex-tp venues";
    let this = "the recovery of a binance venue";
    report.foreign_keys(&raw.rerequest_keys(), path, owner, this, allowed);
    let buffering = buffering(raw, path, report);
    let snapshot_timeout = millis(
        &raw.snapshot_timeout_ms,
        &path.key("snapshot_timeout_ms"),
        1..=3_600_000,
        Recovery::default().snapshot_timeout,
        report,
    );
    (buffering, snapshot_timeout)
}

fn url(
    field: &Option<Spanned<String>>,
    default: Option<&str>,
    path: &Path,
    key: &str,
    report: &mut Report<'_>,
) -> Option<Url> {
    let (plain, secure, example) = if key == "ws_url" {
        ("ws", "wss", Market::Spot.default_ws_url())
    } else {
        ("http", "https", Market::Spot.default_rest_url())
    };
    let Some(field) = field else {
        return Url::new(default?, plain, secure);
    };
    let url = Url::new(field.get_ref(), plain, secure);
    if url.is_none() {
        let found = format!(
            "{} has the wrong scheme or no host",
            report.quote(&field.span())
        );
        let expected =
            format!("a URL of scheme {plain}:// or {secure}:// with a host, such as \"{example}\"");
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            &path.key(key),
            found,
            expected,
        );
    }
    url
}

fn depth_limit(
    raw: &RawVenue,
    market: Market,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<DepthLimit> {
    let Some(field) = &raw.depth_limit else {
        return DepthLimit::new(DEFAULT_DEPTH);
    };
    let allowed: &[u16] = if market.is_futures() {
        &DepthLimit::ALLOWED[..7]
    } else {
        &DepthLimit::ALLOWED
    };
    let limit = u16::try_from(*field.get_ref())
        .ok()
        .filter(|l| allowed.contains(l));
    if limit.is_none() {
        let list: Vec<String> = allowed.iter().map(u16::to_string).collect();
        let found = format!(
            "{} is not a depth limit of {}",
            report.quote(&field.span()),
            market.keyword()
        );
        let expected = format!("one of {}", list.join(", "));
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            expected,
        );
    }
    limit.and_then(DepthLimit::new)
}

fn update_speed(
    raw: &RawVenue,
    market: Market,
    path: &Path,
    report: &mut Report<'_>,
) -> Option<UpdateSpeed> {
    let Some(field) = &raw.update_speed else {
        return Some(UpdateSpeed::Ms100);
    };
    let offered = UpdateSpeed::offered(market);
    let speed = UpdateSpeed::from_keyword(field.get_ref()).filter(|s| offered.contains(s));
    if speed.is_none() {
        let found = format!(
            "{} is not an update speed of {}",
            report.quote(&field.span()),
            market.keyword()
        );
        let allowed: Vec<&str> = offered.iter().map(|s| s.keyword()).collect();
        let mut expected = one_of(&allowed);
        expected.push_str(if market.is_futures() {
            " (futures publish every 100, 250 or 500 ms)"
        } else {
            " (spot publishes every 100 or 1000 ms)"
        });
        report.push(
            ErrorKind::InvalidValue,
            &field.span(),
            path,
            found,
            expected,
        );
    }
    speed
}
