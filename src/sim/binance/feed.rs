//! Where events come from and where they go: the source configurations, and
//! the feed thread that publishes records into one bounded log which every
//! WebSocket connection reads from its own cursor.
//!
//! Paced sources publish when a record is due; unpaced ones publish as fast
//! as the slowest connected client reads (the log never evicts what a client
//! has still to read). A paced feed evicts regardless, and a client left
//! behind is disconnected, as a venue does with slow consumers.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::book::Book;
use super::handle::later;
use super::record::Record;
use super::{Counters, Shared, lock};

/// How update ids chain from one depth event to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BookStyle {
    /// Spot: `U == previous u + 1`, no `pu`.
    Spot,
    /// Futures: `pu == previous u`, ids not contiguous.
    Futures,
}

/// Generated books.
#[derive(Debug, Clone, PartialEq)]
pub struct GenConfig {
    /// Symbols (any case; served upper case in events, lower case in streams).
    pub symbols: Vec<String>,
    /// Id chaining.
    pub style: BookStyle,
    /// Events per second per symbol; 0 or less: as fast as clients read.
    pub rate: f64,
    /// Events per symbol, then the feed ends; `None`: no end.
    pub count: Option<u64>,
    /// Price levels kept near the top of each side.
    pub levels: usize,
    /// Seed of the books.
    pub seed: u64,
}

/// Recorded captures replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// Capture files, merged by time.
    pub files: Vec<PathBuf>,
    /// Replay speed factor (2.0: twice as fast); `None`: as fast as clients read.
    pub speed: Option<f64>,
    /// Stop reading the files after this many stream records.
    pub max_records: Option<usize>,
}

/// Where the simulator's events come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Generated books.
    Generated(GenConfig),
    /// Recorded captures.
    Recorded(ReplayConfig),
}

/// `U` and `u` of a depth event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ids {
    pub(crate) first: u64,
    pub(crate) last: u64,
}

/// One published stream record.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) symbol: usize,
    pub(crate) symbol_name: String,
    /// Stream kind without speed: `depth`, `bookTicker`, `trade`, ...
    pub(crate) channel: Arc<str>,
    /// The event JSON (the `data` of a combined-stream wrapper).
    pub(crate) data: String,
    pub(crate) ids: Option<Ids>,
}

/// A recorded REST snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) t_ns: u64,
    pub(crate) last_update_id: u64,
    pub(crate) body: String,
}

/// What the feed knows of one symbol.
#[derive(Debug)]
pub(crate) struct SymbolState {
    pub(crate) name: String,
    pub(crate) lower: String,
    pub(crate) book: Option<Book>,
    pub(crate) snapshots: Vec<Recorded>,
    /// `U` of the first depth event published, or else the first one coming.
    pub(crate) first_u: Option<u64>,
}

/// The published log and everything a server needs to see consistently.
#[derive(Debug)]
pub(crate) struct FeedState {
    pub(crate) log: VecDeque<Arc<Entry>>,
    pub(crate) next_seq: u64,
    pub(crate) capacity: usize,
    /// Next sequence each connection will read.
    pub(crate) cursors: HashMap<u64, u64>,
    pub(crate) symbols: Vec<SymbolState>,
    /// Capture time of the last record published (recordings).
    pub(crate) clock_ns: u64,
    pub(crate) finished: bool,
}

impl FeedState {
    pub(crate) fn new(symbols: Vec<SymbolState>, capacity: usize) -> Self {
        let capacity = capacity.max(16).max(symbols.len() * 2);
        Self {
            log: VecDeque::with_capacity(capacity.min(1 << 16)),
            next_seq: 0,
            capacity,
            cursors: HashMap::new(),
            symbols,
            clock_ns: 0,
            finished: false,
        }
    }

    /// Sequence of the oldest entry still held.
    pub(crate) fn oldest_seq(&self) -> u64 {
        self.log.front().map_or(self.next_seq, |e| e.seq)
    }

    /// Whether `n` pushes would evict nothing a connection has still to read.
    pub(crate) fn has_space(&self, n: usize) -> bool {
        let evicted = (self.log.len() + n).saturating_sub(self.capacity) as u64;
        evicted == 0
            || self
                .cursors
                .values()
                .all(|&c| c >= self.oldest_seq() + evicted)
    }

    /// The snapshot to serve for `symbol` now: `(lastUpdateId, body, U of
    /// the first event)`. A stale one is older than every event a client can
    /// see: the generated book before warm-up, or a recorded snapshot with
    /// its `lastUpdateId` moved back.
    pub(crate) fn snapshot(
        &self,
        symbol: usize,
        limit: usize,
        stale: bool,
    ) -> Option<(u64, String, u64)> {
        let state = self.symbols.get(symbol)?;
        if let Some(book) = &state.book {
            let first = state.first_u.unwrap_or(book.last_id + 1);
            return Some(match stale {
                true => (book.initial.0, book.initial.1.clone(), first),
                false => (book.last_id, book.snapshot(limit, now_ms()), first),
            });
        }
        let fitting = state
            .snapshots
            .iter()
            .rev()
            .find(|s| s.t_ns <= self.clock_ns);
        let fitting = fitting.or(state.snapshots.first())?;
        let first = state.first_u.unwrap_or(fitting.last_update_id + 1);
        if !stale {
            return Some((fitting.last_update_id, fitting.body.clone(), first));
        }
        let id = fitting.last_update_id.min(first.saturating_sub(2));
        let old = format!("\"lastUpdateId\":{}", fitting.last_update_id);
        let body = fitting
            .body
            .replacen(&old, &format!("\"lastUpdateId\":{id}"), 1);
        Some((id, body, first))
    }

    pub(crate) fn symbol_index(&self, lower: &str) -> Option<usize> {
        self.symbols.iter().position(|s| s.lower == lower)
    }

    /// Appends a record, evicting the oldest when full.
    pub(crate) fn push(
        &mut self,
        symbol: usize,
        channel: Arc<str>,
        data: String,
        ids: Option<Ids>,
    ) {
        if self.log.len() >= self.capacity {
            self.log.pop_front();
        }
        let Some(state) = self.symbols.get_mut(symbol) else {
            return;
        };
        if let Some(ids) = ids {
            state.first_u.get_or_insert(ids.first);
        }
        let entry = Entry {
            seq: self.next_seq,
            symbol,
            symbol_name: state.name.clone(),
            channel,
            data,
            ids,
        };
        self.log.push_back(Arc::new(entry));
        self.next_seq += 1;
    }

    /// Up to `max` entries from `cursor` on; `None` if `cursor` was evicted.
    pub(crate) fn read_from(
        &self,
        cursor: u64,
        max: usize,
        out: &mut Vec<Arc<Entry>>,
    ) -> Option<u64> {
        let skip = usize::try_from(cursor.checked_sub(self.oldest_seq())?).ok()?;
        out.extend(self.log.iter().skip(skip).take(max).cloned());
        Some(cursor + out.len() as u64)
    }
}

/// What the feed thread publishes.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Recorded records, on their clock divided by `speed` (`None`: no pacing).
    Replay {
        records: Vec<Record>,
        speed: Option<f64>,
    },
    /// One event per symbol per tick, `rate` ticks a second (0: no pacing).
    Generate { rate: f64, count: Option<u64> },
}

/// The feed thread: waits for the first client if asked to, publishes the
/// plan, then marks the feed finished.
pub(crate) fn run(shared: &Shared, plan: Plan) {
    if shared.config.wait_for_client {
        let mut feed = lock(&shared.feed);
        while feed.cursors.is_empty() {
            if shared.stopping() {
                return;
            }
            let slice = Duration::from_millis(50);
            feed = shared
                .space_cv
                .wait_timeout(feed, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    let started = Instant::now();
    let completed = match plan {
        Plan::Replay { records, speed } => {
            let t0 = records.first().map_or(0, |r| r.t_ns);
            records.into_iter().all(|r| {
                let due = speed
                    .map(|s| later(started, seconds(r.t_ns.saturating_sub(t0) as f64 / 1e9 / s)));
                publish(shared, due, 1, |feed| {
                    feed.clock_ns = r.t_ns;
                    feed.push(r.symbol, r.channel, r.data, r.ids);
                })
            })
        }
        Plan::Generate { rate, count } => {
            let paced = rate > 0.0;
            let depth: Arc<str> = Arc::from("depth");
            let n = lock(&shared.feed).symbols.len();
            (0..count.unwrap_or(u64::MAX)).all(|tick| {
                let due = paced.then(|| later(started, seconds(tick as f64 / rate)));
                publish(shared, due, n, |feed| {
                    let time_ms = now_ms();
                    for symbol in 0..feed.symbols.len() {
                        let event = feed
                            .symbols
                            .get_mut(symbol)
                            .and_then(|s| s.book.as_mut())
                            .map(|b| b.next_event(time_ms));
                        if let Some((json, ids)) = event {
                            feed.push(symbol, Arc::clone(&depth), json, Some(ids));
                        }
                    }
                })
            })
        }
    };
    if completed {
        lock(&shared.feed).finished = true;
        shared.data_cv.notify_all();
    }
}

/// Publishes `n` records with `f` once `due` has come (paced) or once every
/// client has room (unpaced). False if the simulator is stopping.
fn publish(
    shared: &Shared,
    due: Option<Instant>,
    n: usize,
    f: impl FnOnce(&mut FeedState),
) -> bool {
    if let Some(due) = due {
        loop {
            if shared.stopping() {
                return false;
            }
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
    let mut feed = lock(&shared.feed);
    while due.is_none() && !feed.has_space(n) {
        if shared.stopping() {
            return false;
        }
        let slice = Duration::from_millis(50);
        feed = shared
            .space_cv
            .wait_timeout(feed, slice)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let before = feed.next_seq;
    f(&mut feed);
    Counters::add(&shared.counters.events, feed.next_seq - before);
    drop(feed);
    shared.data_cv.notify_all();
    !shared.stopping()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `secs` as a duration; the longest one if it is out of range.
fn seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}
