//! [`BinanceSession`]: routing frames to symbols, snapshot requests and answers, and the
//! health of the connection.

use crate::publish::StreamState;
use crate::sequencer::{Baseline, Detector, StreamConfig};
use crate::venue::Emit;

use super::fetch::Fetcher;
use super::rules;
use super::spec::{BinanceSpec, SpecError};
use super::sync::{Applied, Book, Sequencer};
use super::{ReconnectReason, SnapshotRequest, SnapshotResult, SymbolStats, VenueStats};
use crate::protocol::binance::{self as scan, ScanError, Scanned};

/// Reorder window of each symbol's stream. Binance has no retransmission, so any gap ends the
/// sync at once: the detector never needs to hold more than the frame that revealed it.
const WINDOW: usize = 64;

/// Connection slots a session tracks at most: the symbols' shards, each with two slots per
/// permanent connection (the second for a rotation's successor). Slot `k` belongs to shard
/// `k / slots_per_shard` and is that shard's slot `k % slots_per_shard` (below 8).
pub const MAX_LINKS: usize = super::spec::MAX_SLOTS;

/// One connection as the session sees it.
#[derive(Debug, Clone, Copy, Default)]
struct Link {
    connected: bool,
    since: u64,
    last_frame: u64,
    shutdown: bool,
}

/// The sans-IO session of one Binance venue: one combined-stream connection, one diff depth
/// stream per symbol. See the [module documentation](super) for the rules and the events.
pub struct BinanceSession {
    spec: BinanceSpec,
    /// Lowercase symbol and index, sorted by symbol, for routing.
    routes: Vec<(Box<str>, usize)>,
    /// `path?query` of each symbol's snapshot request.
    paths: Vec<String>,
    weight: u32,
    books: Vec<Book>,
    seq: Sequencer,
    fetcher: Fetcher,
    links: Vec<Link>,
    /// The symbols of each shard (each carried by its own connections).
    shards: Vec<std::ops::Range<usize>>,
    /// Slots of each shard.
    per_shard: usize,
    /// Live symbols whose connections were all lost must link by then, or resync.
    relink_deadline: Option<u64>,
    /// Symbols waiting to link now.
    relinking: usize,
    now: u64,
    stats: VenueStats,
    /// When each symbol's latest depth event arrived (0: none yet).
    last_event: Vec<u64>,
}

impl BinanceSession {
    /// Checks the spec and allocates every buffer the session will use.
    ///
    /// # Errors
    ///
    /// The [`SpecError`] of an invalid spec.
    pub fn new(spec: BinanceSpec) -> Result<Self, SpecError> {
        spec.validate()?;
        let market = spec.market;
        let weight = market.depth_weight(spec.depth_limit).unwrap_or(u32::MAX);
        let config = if market.is_linked() {
            StreamConfig::linked(WINDOW)
        } else {
            StreamConfig::range(WINDOW).with_baseline(Baseline::Resync)
        }
        .with_max_buffered(1);
        let mut detector = Detector::new();
        let mut books = Vec::with_capacity(spec.symbols.len());
        for i in 0..spec.symbols.len() {
            let stream = detector.add_stream(config);
            let id = spec.stream_base.saturating_add(i as u16);
            books.push(Book::new(stream, id, spec.max_pending, spec.pending_bytes));
        }
        let mut routes: Vec<(Box<str>, usize)> = spec
            .symbols
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str().into(), i))
            .collect();
        routes.sort();
        let paths = spec
            .symbols
            .iter()
            .map(|s| {
                let upper = s.to_ascii_uppercase();
                let path = market.depth_path();
                format!("{path}?symbol={upper}&limit={}", spec.depth_limit)
            })
            .collect();
        let fetcher = Fetcher::new(
            spec.symbols.len(),
            weight,
            spec.weight_budget_per_min,
            spec.max_inflight,
            spec.backoff,
            spec.snapshot_timeout_ns,
        );
        Ok(Self {
            routes,
            paths,
            weight,
            books,
            seq: Sequencer {
                market,
                detector,
                out: Vec::with_capacity(WINDOW),
            },
            fetcher,
            links: vec![Link::default(); spec.shards().len() * spec.slots_per_shard()],
            shards: spec.shards(),
            per_shard: spec.slots_per_shard(),
            relink_deadline: None,
            relinking: 0,
            now: 0,
            stats: VenueStats::default(),
            last_event: vec![0; spec.symbols.len()],
            spec,
        })
    }

    /// The spec the session was built from.
    pub fn spec(&self) -> &BinanceSpec {
        &self.spec
    }

    /// Number of symbols.
    pub fn symbol_count(&self) -> usize {
        self.books.len()
    }

    /// The index of a symbol, matched without regard to case (`BTCUSDT` or `btcusdt`).
    pub fn symbol_index(&self, symbol: &str) -> Option<usize> {
        let found = self.routes.binary_search_by(|(name, _)| {
            let wanted = symbol.bytes().map(|b| b.to_ascii_lowercase());
            name.bytes().cmp(wanted)
        });
        found.ok().and_then(|k| self.routes.get(k)).map(|(_, i)| *i)
    }

    /// The lowercase name of a symbol.
    pub fn symbol_name(&self, symbol: usize) -> Option<&str> {
        self.spec.symbols.get(symbol).map(String::as_str)
    }

    /// The consumer stream id of a symbol.
    pub fn stream_id(&self, symbol: usize) -> u16 {
        self.spec
            .stream_base
            .saturating_add(u16::try_from(symbol).unwrap_or(u16::MAX))
    }

    /// Where a symbol stands; [`StreamState::Unseen`] for an unknown index.
    pub fn state(&self, symbol: usize) -> StreamState {
        self.books
            .get(symbol)
            .map_or(StreamState::Unseen, Book::state)
    }

    /// The state consumers of a symbol were last told.
    pub fn published_state(&self, symbol: usize) -> StreamState {
        self.books
            .get(symbol)
            .map_or(StreamState::Unseen, Book::published)
    }

    /// A symbol's counters; zeros for an unknown index.
    pub fn stats(&self, symbol: usize) -> SymbolStats {
        self.books.get(symbol).map(Book::stats).unwrap_or_default()
    }

    /// The connection's counters.
    pub fn venue_stats(&self) -> VenueStats {
        self.stats
    }

    /// True while any connection is open (between [`BinanceSession::on_link_up`] and
    /// [`BinanceSession::on_link_down`] of some slot).
    pub fn is_connected(&self) -> bool {
        self.links.iter().any(|l| l.connected)
    }

    /// Symbols live across a lost connection, waiting for an event that links.
    pub fn relinking_symbols(&self) -> usize {
        self.relinking
    }

    /// The symbols of each shard, in order: shard `s` is carried by connection slots
    /// `s * slots_per_shard ..` of [`BinanceSpec::slots_per_shard`].
    pub fn shards(&self) -> &[std::ops::Range<usize>] {
        &self.shards
    }

    /// The shard of connection slot `link`, and its index among the shard's slots.
    fn slot(&self, link: usize) -> (usize, usize) {
        let per = self.per_shard.max(1);
        (link / per, link % per)
    }

    /// The symbols slot `link` carries.
    fn symbols_of(&self, link: usize) -> std::ops::Range<usize> {
        self.shards.get(self.slot(link).0).cloned().unwrap_or(0..0)
    }

    /// True when every live symbol has shown on connection slot `link` that it carries
    /// the delivered chain: an older connection feeding the same symbols can go.
    pub fn all_linked(&self, link: usize) -> bool {
        let local = self.slot(link).1;
        let books = self.books.get(self.symbols_of(link)).unwrap_or_default();
        books.iter().all(|b| b.has_linked(local))
    }

    /// Live symbols that have not shown on connection slot `link` that it carries them.
    pub fn unlinked_symbols(&self, link: usize) -> usize {
        let local = self.slot(link).1;
        let books = self.books.get(self.symbols_of(link)).unwrap_or_default();
        books.iter().filter(|b| !b.has_linked(local)).count()
    }

    /// The venue's own count of this IP's request weight in the current minute
    /// (`X-MBX-USED-WEIGHT-1M`), seen at `now`: snapshot requests are paced by it too.
    pub fn observe_used_weight(&mut self, used: u32, now: u64) {
        self.fetcher.observe_used_weight(used, now);
    }

    /// Symbols whose snapshot is no longer requested, after permanent errors.
    pub fn symbols_given_up(&self) -> usize {
        self.books
            .iter()
            .enumerate()
            .filter(|(i, _)| self.fetcher.given_up(*i))
            .count()
    }

    /// Request weight of the minute before the latest time the session was given (by any
    /// input or poll): this venue's snapshots, or the venue's own count for the IP when that
    /// is larger.
    pub fn weight_used_last_minute(&self) -> u32 {
        self.fetcher.used(self.now)
    }

    fn observe(&mut self, now: u64) {
        self.now = self.now.max(now);
    }

    /// The WebSocket connection opened at `now` (connection slot 0).
    pub fn on_connected(&mut self, now: u64) {
        self.on_link_up(0, now);
    }

    /// Connection slot `link` (below [`MAX_LINKS`]) opened at `now`. Symbols sync as their
    /// events arrive; several open slots feed the same symbols, and the sequencer discards
    /// what one repeats of another.
    pub fn on_link_up(&mut self, link: usize, now: u64) {
        self.observe(now);
        self.stats.connects += 1;
        if let Some(l) = self.links.get_mut(link) {
            *l = Link {
                connected: true,
                since: now,
                last_frame: now,
                shutdown: false,
            };
        }
    }

    /// The connection (slot 0) closed at `now`. See [`BinanceSession::on_link_down`].
    pub fn on_disconnected(&mut self, now: u64, emit: &mut impl Emit) {
        self.on_link_down(0, now, emit);
    }

    /// Connection slot `link` closed at `now`. While another slot is open, symbols go on
    /// from its events. When none is: with [`BinanceSpec::relink_timeout_ns`] above 0, each
    /// live symbol keeps its state and carries on, with no reset, if the next connection's
    /// first events link to the last one delivered (by the market's rule), and resyncs
    /// otherwise or once that wait is over; with 0, every symbol loses sync at once,
    /// consumers are told, and what was buffered is dropped.
    pub fn on_link_down(&mut self, link: usize, now: u64, emit: &mut impl Emit) {
        self.observe(now);
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if l.connected {
            self.stats.disconnects += 1;
        }
        l.connected = false;
        l.shutdown = false;
        let (shard, local) = self.slot(link);
        let symbols = self.symbols_of(link);
        for book in self.books.get_mut(symbols.clone()).unwrap_or_default() {
            book.link_down(local);
        }
        let per = self.per_shard.max(1);
        let shard_slots = self
            .links
            .get(shard * per..(shard + 1) * per)
            .unwrap_or_default();
        if shard_slots.iter().any(|l| l.connected) {
            return;
        }
        let hold = self.spec.relink_timeout_ns > 0;
        let first = symbols.start;
        for (i, book) in self
            .books
            .get_mut(symbols)
            .unwrap_or_default()
            .iter_mut()
            .enumerate()
        {
            let i = first + i;
            let was = book.is_relinking();
            book.links_lost(&mut self.seq, hold, emit);
            if !was && book.is_relinking() {
                self.relinking += 1;
            }
            self.fetcher.set_needed(i, book.needs_snapshot(), now);
        }
        if self.relinking > 0 && self.relink_deadline.is_none() {
            self.relink_deadline = Some(now.saturating_add(self.spec.relink_timeout_ns));
        }
    }

    /// Handles one text frame received at `now` (`recv_ns`: wall clock, passed to consumers).
    /// Deltas delivered at once borrow `frame`.
    pub fn on_text(&mut self, now: u64, recv_ns: u64, frame: &[u8], emit: &mut impl Emit) {
        self.on_link_text(0, now, recv_ns, frame, emit);
    }

    /// Handles one text frame of connection slot `link`, as [`BinanceSession::on_text`].
    pub fn on_link_text(
        &mut self,
        link: usize,
        now: u64,
        recv_ns: u64,
        frame: &[u8],
        emit: &mut impl Emit,
    ) {
        self.observe(now);
        let slot = link.min(self.links.len().saturating_sub(1));
        self.stats.frames += 1;
        self.stats.bytes += frame.len() as u64;
        let event = match scan::scan(frame) {
            Ok(Scanned::Depth(event)) => event,
            Ok(Scanned::ServerShutdown { .. }) => {
                self.stats.server_shutdowns += 1;
                if let Some(l) = self.links.get_mut(slot) {
                    l.shutdown = true;
                    l.last_frame = now;
                }
                return;
            }
            Ok(Scanned::Other { .. }) => {
                self.stats.ignored += 1;
                self.frame_seen(slot, now);
                return;
            }
            Ok(Scanned::Unknown { .. }) => {
                self.stats.unknown_events += 1;
                self.frame_seen(slot, now);
                return;
            }
            Err(ScanError::RangeInverted { .. }) => {
                self.stats.hostile_ids += 1;
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        self.frame_seen(slot, now);
        self.stats.depth_events += 1;
        let by_stream = || event.stream.and_then(|s| s.split('@').next());
        let Some(symbol) = self
            .symbol_index(event.symbol)
            .or_else(|| by_stream().and_then(|s| self.symbol_index(s)))
        else {
            self.stats.unknown_symbol += 1;
            return;
        };
        if !self.symbols_of(slot).contains(&symbol) {
            // A symbol this connection was not asked for: its events come on its own.
            self.stats.ignored += 1;
            return;
        }
        let local = self.slot(slot).1;
        let Some(book) = self.books.get_mut(symbol) else {
            return;
        };
        if let Some(t) = self.last_event.get_mut(symbol) {
            *t = now;
        }
        let was = book.is_relinking();
        match rules::ids_of(self.seq.market, &event) {
            Some(ids) => book.on_event(&mut self.seq, local, ids, recv_ns, event.event_bytes, emit),
            None => {
                book.stats.events += 1;
                book.stats.malformed += 1;
            }
        }
        if was && !book.is_relinking() {
            self.relinking = self.relinking.saturating_sub(1);
            if self.relinking == 0 {
                self.relink_deadline = None;
            }
        }
        self.fetcher.set_needed(symbol, book.needs_snapshot(), now);
    }

    fn frame_seen(&mut self, link: usize, now: u64) {
        if let Some(l) = self.links.get_mut(link) {
            l.last_frame = now;
        }
    }

    /// A ping or pong arrived at `now` (connection slot 0).
    pub fn on_alive(&mut self, now: u64) {
        self.on_link_alive(0, now);
    }

    /// A ping or pong arrived at `now` on connection slot `link`: it is alive, though no
    /// data came.
    pub fn on_link_alive(&mut self, link: usize, now: u64) {
        self.observe(now);
        if let Some(l) = self.links.get_mut(link)
            && l.connected
        {
            l.last_frame = now;
        }
    }

    /// Symbols with no depth event in the last [`BinanceSpec::symbol_quiet_ns`] (or none
    /// since the connection opened) while connected: quiet, which is not a reason to
    /// reconnect as long as the connection itself shows signs of life.
    pub fn quiet_symbols(&self) -> usize {
        let Some(link_since) = self
            .links
            .iter()
            .filter(|l| l.connected)
            .map(|l| l.since)
            .min()
        else {
            return 0;
        };
        let since = self.now.saturating_sub(self.spec.symbol_quiet_ns);
        let quiet_from = link_since.max(since);
        if self.now.saturating_sub(link_since) < self.spec.symbol_quiet_ns {
            return 0;
        }
        self.last_event.iter().filter(|t| **t < quiet_from).count()
    }

    /// The next snapshot request to send at `now`, if one is due and allowed: at most
    /// [`BinanceSpec::max_inflight`] in flight, within the weight budget, and not while a 429
    /// or 418 pause lasts.
    pub fn poll_snapshot(&mut self, now: u64) -> Option<SnapshotRequest> {
        self.observe(now);
        let symbol = self.fetcher.start(now)?;
        let book = self.books.get_mut(symbol)?;
        book.stats.snapshot_requests += 1;
        Some(SnapshotRequest {
            symbol,
            path_and_query: self.paths.get(symbol)?.clone(),
            weight: self.weight,
        })
    }

    /// The answer to a snapshot request of `symbol`, received at `now`. A body that lines up
    /// with the symbol's buffered events is published and the symbol goes live; one that does
    /// not is fetched again. Failures back off; 429 and 418 pause the whole venue.
    pub fn on_snapshot(
        &mut self,
        now: u64,
        symbol: usize,
        result: SnapshotResult<'_>,
        emit: &mut impl Emit,
    ) {
        self.observe(now);
        let Some(book) = self.books.get_mut(symbol) else {
            self.stats.unsolicited_snapshots += 1;
            return;
        };
        self.fetcher.answered(symbol);
        match result {
            SnapshotResult::Body(body) => match scan::snapshot_last_update_id(body) {
                Ok(l) => {
                    self.fetcher.succeeded(symbol);
                    if book.on_snapshot(&mut self.seq, now, l, body, emit) == Applied::Stale {
                        // The venue's rule: fetch again, at once.
                        self.fetcher.set_needed(symbol, true, now);
                        return;
                    }
                }
                Err(_) => {
                    book.stats.snapshots_failed += 1;
                    self.fetcher.failed(symbol, book.needs_snapshot(), now);
                    return;
                }
            },
            SnapshotResult::Status {
                code: code @ (429 | 418 | 403),
                retry_after_secs,
            } => {
                let banned = code == 418;
                match code {
                    418 => book.stats.banned += 1,
                    403 => book.stats.firewall_blocked += 1,
                    _ => book.stats.rate_limited += 1,
                }
                self.fetcher.refused(retry_after_secs, banned, now);
            }
            SnapshotResult::Status { code, .. } if (400..500).contains(&code) && code != 408 => {
                // A permanent error (an invalid symbol, a depth the venue does not offer; a
                // 408 is the request timing out, and retried as any failure):
                // retried with backoff, then given up; the symbol stays reset_required.
                book.stats.snapshots_failed += 1;
                let needed = book.needs_snapshot();
                if self.fetcher.refused_for_good(symbol, needed, now) {
                    book.stats.snapshot_given_up = true;
                }
                return;
            }
            SnapshotResult::Status { .. } | SnapshotResult::Failed => {
                book.stats.snapshots_failed += 1;
                self.fetcher.failed(symbol, book.needs_snapshot(), now);
                return;
            }
        }
        self.fetcher.set_needed(symbol, book.needs_snapshot(), now);
    }

    /// Runs whatever fell due by `now`: snapshot requests that timed out fail and back off.
    pub fn handle_timeout(&mut self, now: u64, emit: &mut impl Emit) {
        self.observe(now);
        let (books, fetcher) = (&mut self.books, &mut self.fetcher);
        let mut expired = |symbol: usize| {
            if let Some(book) = books.get_mut(symbol) {
                book.stats.snapshots_failed += 1;
            }
        };
        fetcher.expire(now, &mut expired);
        if self.relink_deadline.is_some_and(|t| t <= now) {
            self.relink_deadline = None;
            self.relinking = 0;
            for book in &mut self.books {
                book.relink_expired(&mut self.seq, emit);
            }
        }
        for (i, book) in self.books.iter().enumerate() {
            self.fetcher.set_needed(i, book.needs_snapshot(), now);
        }
    }

    /// The earliest time [`BinanceSession::handle_timeout`] (or [`BinanceSession::poll_snapshot`]
    /// or [`BinanceSession::poll_reconnect`]) has something to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        let mut next = self.fetcher.next_deadline(self.now);
        let mut consider = |t: u64| {
            if t > self.now {
                next = Some(next.map_or(t, |n: u64| n.min(t)));
            }
        };
        for link in self.links.iter().filter(|l| l.connected) {
            consider(link.last_frame.saturating_add(self.spec.silence_timeout_ns));
            consider(link.since.saturating_add(self.spec.ws_max_age_ns));
        }
        if let Some(t) = self.relink_deadline {
            // Due now or later: it is handled at the next timeout either way.
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        next
    }

    /// When the connection of slot `link` reaches its maximum age, if it is connected: due
    /// or not (the session's own timeout only names deadlines still ahead of the last
    /// event, and a frame may have moved that past the age before a timer ran).
    pub fn link_age_deadline(&self, link: usize) -> Option<u64> {
        let l = self.links.get(link).filter(|l| l.connected)?;
        Some(l.since.saturating_add(self.spec.ws_max_age_ns))
    }

    /// Whether the connection (slot 0) should be replaced at `now`. See
    /// [`BinanceSession::poll_link_reconnect`].
    pub fn poll_reconnect(&self, now: u64) -> Option<ReconnectReason> {
        self.poll_link_reconnect(0, now)
    }

    /// Whether connection slot `link` should be replaced at `now`, and why: the server
    /// announced a shutdown, the connection reached its maximum age, or nothing arrived for
    /// the silence timeout. Reported for as long as it holds; a new connection in the slot
    /// clears it.
    pub fn poll_link_reconnect(&self, link: usize, now: u64) -> Option<ReconnectReason> {
        let l = self.links.get(link)?;
        if l.shutdown {
            return Some(ReconnectReason::ServerShutdown);
        }
        if !l.connected {
            return None;
        }
        if now >= l.since.saturating_add(self.spec.ws_max_age_ns) {
            return Some(ReconnectReason::MaxAge);
        }
        let silent = now.saturating_sub(l.last_frame);
        (silent >= self.spec.silence_timeout_ns).then_some(ReconnectReason::Silence)
    }
}
