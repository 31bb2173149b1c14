//! What the simulator may do wrong on purpose, and the exact record of what
//! it did.
//!
//! Event faults (drop, duplicate, reorder) act per connection on the depth
//! events of the affected symbols, from a generator seeded with
//! [`FaultConfig::seed`] and the connection number, so a run is repeatable.
//! Connection faults (disconnect, silence, `serverShutdown`) fire after a
//! number of events sent on a connection, for the first
//! [`FaultConfig::fault_connections`] connections. REST faults (429 with
//! `Retry-After`, stale snapshots) act on the first requests.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::feed::Entry;

/// Fault settings; the default injects nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Seed of the event-fault generators.
    pub seed: u64,
    /// Symbols (any case) whose events and snapshots are affected; empty: all.
    pub symbols: Vec<String>,
    /// Probability that a depth event is not sent.
    pub drop: f64,
    /// Probability that a depth event is sent twice in a row.
    pub duplicate: f64,
    /// Probability that a depth event is held back and sent after the next
    /// event of its symbol.
    pub reorder: f64,
    /// The first this-many snapshot responses of each affected symbol carry
    /// a `lastUpdateId` older than the first event any client can see.
    pub stale_snapshots: u32,
    /// The first this-many REST requests are answered 429.
    pub rate_limited: u32,
    /// `Retry-After` seconds of the 429 answers.
    pub retry_after_secs: u64,
    /// Close the TCP connection (no close frame) after this many events.
    pub disconnect_after: Option<u64>,
    /// The connection accepted `i`-th disconnects after `disconnect_after + i * this`
    /// events, so that connections open at once drop at different times.
    pub disconnect_stagger: u64,
    /// Symbols (any case) whose events in a later connection's replayed backlog (see
    /// [`BinanceSimConfig::reconnect_overlap`](super::BinanceSimConfig::reconnect_overlap))
    /// are withheld: what they published while no connection carried them is lost.
    pub lose_on_reconnect: Vec<String>,
    /// Stop sending (data and pings) after this many events, socket open.
    pub silence_after: Option<u64>,
    /// How long a silence lasts; `None`: until the client goes away.
    pub silence_for: Option<Duration>,
    /// Send a `serverShutdown` event after this many events, then close
    /// with code 1001 after [`shutdown_grace`](Self::shutdown_grace).
    pub shutdown_after: Option<u64>,
    /// Time between the `serverShutdown` event and the close.
    pub shutdown_grace: Duration,
    /// How many connections (the first ones accepted) get the connection
    /// faults; 0: every connection.
    pub fault_connections: u32,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            seed: 7,
            symbols: Vec::new(),
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            stale_snapshots: 0,
            rate_limited: 0,
            retry_after_secs: 1,
            disconnect_after: None,
            disconnect_stagger: 0,
            lose_on_reconnect: Vec::new(),
            silence_after: None,
            silence_for: None,
            shutdown_after: None,
            shutdown_grace: Duration::from_millis(100),
            fault_connections: 1,
        }
    }
}

impl FaultConfig {
    /// Whether faults apply to `symbol` (any case).
    pub fn affects(&self, symbol: &str) -> bool {
        self.symbols.is_empty() || self.symbols.iter().any(|s| s.eq_ignore_ascii_case(symbol))
    }

    /// Whether `symbol` (any case) loses its backlog on a later connection.
    pub fn loses_on_reconnect(&self, symbol: &str) -> bool {
        self.lose_on_reconnect
            .iter()
            .any(|s| s.eq_ignore_ascii_case(symbol))
    }

    /// The event count after which the connection accepted `index`-th disconnects.
    pub fn disconnect_point(&self, index: u64) -> Option<u64> {
        let after = self.disconnect_after?;
        Some(after.saturating_add(index.saturating_mul(self.disconnect_stagger)))
    }

    /// Whether connection faults apply to the connection accepted `index`-th (from 0).
    pub fn affects_connection(&self, index: u64) -> bool {
        self.fault_connections == 0 || index < u64::from(self.fault_connections)
    }
}

/// What was injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectionKind {
    /// A depth event (its `u`) was not sent.
    Dropped {
        /// Final update id of the event.
        update_id: u64,
    },
    /// A depth event of a later connection's replayed backlog was withheld.
    LostOnReconnect {
        /// Final update id of the event.
        update_id: u64,
    },
    /// A depth event was sent twice.
    Duplicated {
        /// Final update id of the event.
        update_id: u64,
    },
    /// A depth event was sent after a later one.
    Reordered {
        /// Final update id of the delayed event.
        update_id: u64,
        /// Final update id of the event sent before it.
        after: u64,
    },
    /// A snapshot older than the first event any client can see.
    StaleSnapshot {
        /// The `lastUpdateId` served.
        last_update_id: u64,
        /// `U` of the first event published for the symbol (or the next one).
        first_event_u: u64,
    },
    /// A REST request answered 429.
    RateLimited {
        /// The `Retry-After` sent.
        retry_after_secs: u64,
    },
    /// The TCP connection was closed without a close frame.
    Disconnected {
        /// Events sent on the connection before.
        after_events: u64,
    },
    /// The connection went silent.
    Silenced {
        /// Events sent on the connection before.
        after_events: u64,
        /// How long; `None`: for good.
        duration: Option<Duration>,
    },
    /// A `serverShutdown` event was sent.
    ServerShutdown {
        /// Events sent on the connection before.
        after_events: u64,
    },
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// The WebSocket connection (numbered from 0 in accept order), if any.
    pub connection: Option<u64>,
    /// The symbol (upper case), if any.
    pub symbol: Option<String>,
    /// What was done.
    pub kind: InjectionKind,
}

/// Every fault injected so far, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Injected {
    /// The injections.
    pub list: Vec<Injection>,
}

impl Injected {
    /// How many injections match `pred`.
    pub fn count(&self, pred: impl Fn(&InjectionKind) -> bool) -> usize {
        self.list.iter().filter(|i| pred(&i.kind)).count()
    }

    /// Final update ids of the events dropped for `symbol` on `connection`.
    pub fn dropped(&self, connection: u64, symbol: &str) -> Vec<u64> {
        self.list
            .iter()
            .filter(|i| i.connection == Some(connection) && i.symbol.as_deref() == Some(symbol))
            .filter_map(|i| match i.kind {
                InjectionKind::Dropped { update_id } => Some(update_id),
                _ => None,
            })
            .collect()
    }
}

/// A small seeded generator (splitmix64).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

/// Event faults of one connection.
#[derive(Debug)]
pub(crate) struct EventFaults {
    config: FaultConfig,
    connection: u64,
    rng: Rng,
    held: HashMap<usize, Arc<Entry>>,
    affected: HashMap<usize, bool>,
}

impl EventFaults {
    pub(crate) fn new(config: &FaultConfig, connection: u64) -> Self {
        let seed = config.seed
            ^ connection
                .wrapping_add(1)
                .wrapping_mul(0xA24B_AED4_963E_E407);
        Self {
            config: config.clone(),
            connection,
            rng: Rng::new(seed),
            held: HashMap::new(),
            affected: HashMap::new(),
        }
    }

    fn active(&self) -> bool {
        self.config.drop > 0.0 || self.config.duplicate > 0.0 || self.config.reorder > 0.0
    }

    /// Pushes onto `out` what is to be sent for `entry` (nothing, it, it
    /// twice, or it and an event held back before) and logs the faults.
    pub(crate) fn apply(
        &mut self,
        entry: Arc<Entry>,
        out: &mut Vec<Arc<Entry>>,
        log: &mut Vec<Injection>,
    ) {
        let Some(ids) = entry.ids.filter(|_| self.active()) else {
            out.push(entry);
            return;
        };
        let config = &self.config;
        let affected = *self
            .affected
            .entry(entry.symbol)
            .or_insert_with(|| config.affects(&entry.symbol_name));
        if !affected {
            out.push(entry);
            return;
        }
        let record = |kind| Injection {
            connection: Some(self.connection),
            symbol: Some(entry.symbol_name.clone()),
            kind,
        };
        if self.rng.chance(self.config.drop) {
            log.push(record(InjectionKind::Dropped {
                update_id: ids.last,
            }));
            return;
        }
        if !self.held.contains_key(&entry.symbol) && self.rng.chance(self.config.reorder) {
            self.held.insert(entry.symbol, entry);
            return;
        }
        let duplicate = self.rng.chance(self.config.duplicate);
        if duplicate {
            log.push(record(InjectionKind::Duplicated {
                update_id: ids.last,
            }));
        }
        if let Some(held) = self.held.remove(&entry.symbol) {
            let update_id = held.ids.map_or(0, |h| h.last);
            log.push(record(InjectionKind::Reordered {
                update_id,
                after: ids.last,
            }));
            out.push(Arc::clone(&entry));
            if duplicate {
                out.push(Arc::clone(&entry));
            }
            out.push(held);
        } else {
            out.push(Arc::clone(&entry));
            if duplicate {
                out.push(entry);
            }
        }
    }

    /// Pushes the events still held back (the feed has ended).
    pub(crate) fn release(&mut self, out: &mut Vec<Arc<Entry>>) {
        out.extend(self.held.drain().map(|(_, entry)| entry));
    }
}
