//! [`BinanceSim`], the running simulator, and the state its threads share.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::book::Book;
use super::faults::Injected;
use super::feed::{self, FeedState, Source, SymbolState};
use super::{BinanceSimConfig, STOP_BOUND, SimError, SimStats, record, rest, server};

/// Sleep between accept attempts on an idle listener.
const ACCEPT_IDLE: Duration = Duration::from_millis(10);
/// Read and write timeout of accepted sockets while they block (WebSocket
/// handshakes, HTTP requests, final flushes).
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Shared counters behind [`SimStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) events: AtomicU64,
    pub(crate) connections: AtomicU64,
    pub(crate) active: AtomicU64,
    pub(crate) frames: AtomicU64,
    pub(crate) pings: AtomicU64,
    pub(crate) pongs: AtomicU64,
    pub(crate) lagged: AtomicU64,
    pub(crate) http: AtomicU64,
    pub(crate) snapshots: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }
}

/// State shared by the handle and the threads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: BinanceSimConfig,
    pub(crate) stop: AtomicBool,
    pub(crate) feed: Mutex<FeedState>,
    /// Notified when records are published or the feed ends.
    pub(crate) data_cv: Condvar,
    /// Notified when a client moves its cursor or subscribes.
    pub(crate) space_cv: Condvar,
    pub(crate) counters: Counters,
    pub(crate) injected: Mutex<Injected>,
    pub(crate) client_threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Locks, going on with the data if a thread panicked while holding it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running simulator; dropping it stops it.
#[derive(Debug)]
pub struct BinanceSim {
    shared: Arc<Shared>,
    ws_addr: SocketAddr,
    http_addr: SocketAddr,
    threads: Vec<JoinHandle<()>>,
}

impl BinanceSim {
    /// Loads or builds the source, binds both listeners on 127.0.0.1 and
    /// starts the threads.
    pub fn start(config: BinanceSimConfig) -> Result<Self, SimError> {
        let (symbols, plan) = match &config.source {
            Source::Generated(gen_config) => {
                if gen_config.symbols.is_empty() || !gen_config.rate.is_finite() {
                    return Err(SimError::Config(
                        "generated books need symbols and a finite rate".into(),
                    ));
                }
                let symbols = gen_config
                    .symbols
                    .iter()
                    .enumerate()
                    .map(|(i, name)| SymbolState {
                        name: name.to_ascii_uppercase(),
                        lower: name.to_ascii_lowercase(),
                        book: Some(Book::new(gen_config, i, &name.to_ascii_uppercase())),
                        snapshots: Vec::new(),
                        first_u: None,
                    });
                (
                    symbols.collect(),
                    feed::Plan::Generate {
                        rate: gen_config.rate,
                        count: gen_config.count,
                    },
                )
            }
            Source::Recorded(replay) => {
                if replay.speed.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
                    return Err(SimError::Config("replay speed must be positive".into()));
                }
                let (symbols, records) = record::load(replay)?;
                (
                    symbols,
                    feed::Plan::Replay {
                        records,
                        speed: replay.speed,
                    },
                )
            }
        };
        let bind = |what, port| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(|source| SimError::Bind {
                what,
                port,
                source,
            })
        };
        let ws_listener = bind("WebSocket", config.ws_port)?;
        let http_listener = bind("HTTP", config.http_port)?;
        let local = |l: &TcpListener, what, port| {
            l.local_addr()
                .map_err(|source| SimError::Bind { what, port, source })
        };
        let ws_addr = local(&ws_listener, "WebSocket", config.ws_port)?;
        let http_addr = local(&http_listener, "HTTP", config.http_port)?;
        let history = config.history;
        let shared = Arc::new(Shared {
            config,
            stop: AtomicBool::new(false),
            feed: Mutex::new(FeedState::new(symbols, history)),
            data_cv: Condvar::new(),
            space_cv: Condvar::new(),
            counters: Counters::default(),
            injected: Mutex::new(Injected::default()),
            client_threads: Mutex::new(Vec::new()),
        });
        let mut sim = Self {
            shared: Arc::clone(&shared),
            ws_addr,
            http_addr,
            threads: Vec::new(),
        };
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            thread::Builder::new()
                .name(name.to_owned())
                .spawn(f)
                .map_err(SimError::Spawn)
        };
        let s = Arc::clone(&shared);
        sim.threads.push(spawn(
            "binance-feed",
            Box::new(move || feed::run(&s, plan)),
        )?);
        let s = Arc::clone(&shared);
        sim.threads.push(spawn(
            "binance-ws",
            Box::new(move || server::ws_accept(&s, ws_listener)),
        )?);
        let s = Arc::clone(&shared);
        sim.threads.push(spawn(
            "binance-http",
            Box::new(move || rest::http_accept(&s, http_listener)),
        )?);
        Ok(sim)
    }

    /// The WebSocket listener's address (127.0.0.1).
    pub fn ws_addr(&self) -> SocketAddr {
        self.ws_addr
    }

    /// The HTTP listener's address (127.0.0.1).
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// `ws://127.0.0.1:<port>`, the base for combined-stream URLs.
    pub fn ws_base(&self) -> String {
        format!("ws://{}", self.ws_addr)
    }

    /// `http://127.0.0.1:<port>`, the base for snapshot requests.
    pub fn http_base(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SimStats {
            events_published: get(&c.events),
            connections: get(&c.connections),
            active_connections: get(&c.active),
            frames_sent: get(&c.frames),
            pings_sent: get(&c.pings),
            pongs_received: get(&c.pongs),
            lagged: get(&c.lagged),
            http_requests: get(&c.http),
            snapshots_served: get(&c.snapshots),
            feed_finished: lock(&self.shared.feed).finished,
        }
    }

    /// Every fault injected so far.
    pub fn injected(&self) -> Injected {
        lock(&self.shared.injected).clone()
    }

    /// Waits at most `timeout` for the feed to publish everything it has;
    /// true if it has.
    pub fn wait_finished(&self, timeout: Duration) -> bool {
        let deadline = later(Instant::now(), timeout);
        let mut feed = lock(&self.shared.feed);
        while !feed.finished {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let slice = left.min(Duration::from_millis(50));
            feed = self
                .shared
                .data_cv
                .wait_timeout(feed, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Stops every thread and joins them within [`STOP_BOUND`].
    pub fn stop(mut self) -> Result<(), SimError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), SimError> {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.data_cv.notify_all();
        self.shared.space_cv.notify_all();
        let deadline = Instant::now() + STOP_BOUND;
        let mut stuck = 0;
        for handle in self.threads.drain(..) {
            stuck += usize::from(!join_until(handle, deadline));
        }
        let clients: Vec<_> = lock(&self.shared.client_threads).drain(..).collect();
        for handle in clients {
            stuck += usize::from(!join_until(handle, deadline));
        }
        if stuck == 0 {
            Ok(())
        } else {
            Err(SimError::StopTimeout(stuck))
        }
    }
}

impl Drop for BinanceSim {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Joins `handle` if it finishes before `deadline`; leaves it running if not.
pub(crate) fn join_until(handle: JoinHandle<()>, deadline: Instant) -> bool {
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
    handle.join().is_ok()
}

/// Accepts loopback connections and hands each to `handle`, until stopped.
pub(crate) fn accept_loop(
    shared: &Shared,
    listener: &TcpListener,
    mut handle: impl FnMut(TcpStream),
) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !shared.stopping() {
        match listener.accept() {
            Ok((stream, peer))
                if peer.ip().is_loopback() && stream.set_nonblocking(false).is_ok() =>
            {
                let _ = stream.set_nodelay(true);
                let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
                let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
                handle(stream);
            }
            Ok(_) => {}
            Err(_) => thread::sleep(ACCEPT_IDLE),
        }
    }
}

/// `from + wait`, or a year on if that is past what an `Instant` holds.
pub(crate) fn later(from: Instant, wait: Duration) -> Instant {
    from.checked_add(wait)
        .unwrap_or(from + Duration::from_secs(365 * 86_400))
}
