//! [`MoldSim`]: the running simulator, and the state its threads share.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::protocol::moldudp64::Session;

use super::SimError;
use super::config::{MoldSimConfig, Source};
use super::faults::Injected;
use super::itch::{ItchFile, MessageSource};
use super::mold::Publisher;
use super::rerequest::{History, RerequestServer};
use super::snapshot::{Book, SnapshotServer};
use super::stats::{Counters, SimStats};

/// How long [`MoldSim::stop`] waits for the threads, all together.
pub const STOP_BOUND: Duration = Duration::from_secs(3);

/// The published feed as the servers see it; the publisher updates every
/// field under one lock, so a reader always sees a consistent state.
#[derive(Debug)]
pub(crate) struct FeedState {
    /// Current session.
    pub(crate) session: Session,
    /// Sequence number the next message of the session will get.
    pub(crate) next_sequence: u64,
    /// The last messages of the current session, for re-requests.
    pub(crate) history: History,
    /// The book derived from the current session, for snapshots.
    pub(crate) book: Book,
}

/// State shared by the handle and the simulator threads.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Set once to make every thread finish.
    pub(crate) stop: AtomicBool,
    /// While set, the re-request server ignores every request.
    pub(crate) rerequest_down: AtomicBool,
    /// What every thread has done.
    pub(crate) counters: Counters,
    /// The published feed.
    pub(crate) feed: Mutex<FeedState>,
    /// What was injected.
    pub(crate) injected: Mutex<Injected>,
    publisher_done: Mutex<bool>,
    publisher_done_cv: Condvar,
}

impl Shared {
    fn new(config: &MoldSimConfig) -> Self {
        Self {
            stop: AtomicBool::new(false),
            rerequest_down: AtomicBool::new(config.faults.rerequest_down),
            counters: Counters::default(),
            feed: Mutex::new(FeedState {
                session: config.session,
                next_sequence: 1,
                history: History::new(config.history),
                book: Book::default(),
            }),
            injected: Mutex::new(Injected::default()),
            publisher_done: Mutex::new(false),
            publisher_done_cv: Condvar::new(),
        }
    }

    /// Whether the threads were told to finish.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Locks a mutex, carrying on with the data if another thread panicked
/// while holding it (every update leaves the data usable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks the publisher finished when dropped, even if it panicked.
struct DoneSignal(Arc<Shared>);

impl Drop for DoneSignal {
    fn drop(&mut self) {
        *lock(&self.0.publisher_done) = true;
        self.0.publisher_done_cv.notify_all();
    }
}

/// A running simulator: the publisher, the re-request server and the
/// snapshot server, each on its own thread. Dropping it stops them.
#[derive(Debug)]
pub struct MoldSim {
    shared: Arc<Shared>,
    group: SocketAddrV4,
    rerequest_addr: SocketAddrV4,
    snapshot_addr: SocketAddrV4,
    publisher: Option<JoinHandle<Result<(), SimError>>>,
    servers: Vec<(&'static str, JoinHandle<()>)>,
}

impl MoldSim {
    /// Checks `config`, binds every socket and starts the threads.
    ///
    /// The servers are listening when this returns; the publisher starts
    /// after `config.start_delay`.
    pub fn start(config: MoldSimConfig) -> Result<Self, SimError> {
        let source = match &config.source {
            Source::Synthetic { instruments } => MessageSource::Synthetic {
                instruments: *instruments,
            },
            Source::ItchFile(path) => MessageSource::Itch(Arc::new(ItchFile::open(path)?)),
        };
        config.validate(source.max_message_len())?;
        let shared = Arc::new(Shared::new(&config));
        let publisher = Publisher::new(&config, source, Arc::clone(&shared))?;
        let rerequest = RerequestServer::bind(&config, Arc::clone(&shared))?;
        let snapshot = SnapshotServer::bind(&config, Arc::clone(&shared))?;
        let mut sim = Self {
            shared: Arc::clone(&shared),
            group: config.group,
            rerequest_addr: rerequest.local_addr(),
            snapshot_addr: snapshot.local_addr(),
            publisher: None,
            servers: Vec::new(),
        };
        let handle = spawn("sim-rerequest", move || rerequest.run())?;
        sim.servers.push(("re-request server", handle));
        let handle = spawn("sim-snapshot", move || snapshot.run())?;
        sim.servers.push(("snapshot server", handle));
        sim.publisher = Some(spawn("sim-publisher", move || {
            let _done = DoneSignal(shared);
            publisher.run()
        })?);
        Ok(sim)
    }

    /// Where the publisher sends.
    pub fn group(&self) -> SocketAddrV4 {
        self.group
    }

    /// Where the re-request server listens.
    pub fn rerequest_addr(&self) -> SocketAddrV4 {
        self.rerequest_addr
    }

    /// Where the snapshot server listens.
    pub fn snapshot_addr(&self) -> SocketAddrV4 {
        self.snapshot_addr
    }

    /// The current session.
    pub fn session(&self) -> Session {
        lock(&self.shared.feed).session
    }

    /// The sequence number the next message of the current session will get.
    pub fn next_sequence(&self) -> u64 {
        lock(&self.shared.feed).next_sequence
    }

    /// A copy of the counters.
    pub fn stats(&self) -> SimStats {
        self.shared.counters.snapshot()
    }

    /// A copy of what was injected so far.
    pub fn injected(&self) -> Injected {
        lock(&self.shared.injected).clone()
    }

    /// Takes the re-request server down (it ignores every request) or up.
    pub fn set_rerequest_down(&self, down: bool) {
        self.shared.rerequest_down.store(down, Ordering::Relaxed);
    }

    /// Whether the publisher has finished (end-of-session packets included).
    pub fn is_finished(&self) -> bool {
        *lock(&self.shared.publisher_done)
    }

    /// Waits at most `timeout` for the publisher to finish, and returns its
    /// outcome. The servers keep running until [`MoldSim::stop`].
    pub fn wait(&mut self, timeout: Duration) -> Result<(), SimError> {
        let done = lock(&self.shared.publisher_done);
        let (done, _) = self
            .shared
            .publisher_done_cv
            .wait_timeout_while(done, timeout, |done| !*done)
            .unwrap_or_else(PoisonError::into_inner);
        let finished = *done;
        drop(done);
        if !finished {
            return Err(SimError::Timeout {
                what: "publisher",
                after: timeout,
            });
        }
        match self.publisher.take() {
            Some(handle) => join_by(handle, far_deadline(STOP_BOUND), "publisher")?,
            None => Ok(()),
        }
    }

    /// Stops every thread and joins them within [`STOP_BOUND`]; returns the
    /// publisher's error if it failed, or a timeout naming a thread that did
    /// not finish in time (it is then left detached).
    pub fn stop(mut self) -> Result<(), SimError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), SimError> {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.publisher_done_cv.notify_all();
        let deadline = far_deadline(STOP_BOUND);
        let mut outcome = Ok(());
        if let Some(handle) = self.publisher.take()
            && let Err(e) = join_by(handle, deadline, "publisher").and_then(|r| r)
        {
            outcome = Err(e);
        }
        for (what, handle) in self.servers.drain(..) {
            if let Err(e) = join_by(handle, deadline, what)
                && outcome.is_ok()
            {
                outcome = Err(e);
            }
        }
        outcome
    }
}

impl Drop for MoldSim {
    fn drop(&mut self) {
        // Errors were the caller's to collect with `stop`; here the threads
        // only need to end.
        let _ = self.shutdown();
    }
}

/// Starts a named thread.
fn spawn<T: Send + 'static>(
    name: &str,
    body: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, SimError> {
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(body)
        .map_err(SimError::io("spawn a simulator thread"))
}

/// `now + bound`, or a far but representable instant if that overflows.
pub(crate) fn far_deadline(bound: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(bound)
        .or_else(|| now.checked_add(Duration::from_secs(3_600)))
        .unwrap_or(now)
}

/// Joins `handle` if it finishes by `deadline`, polling every 2 ms.
pub(crate) fn join_by<T>(
    handle: JoinHandle<T>,
    deadline: Instant,
    what: &'static str,
) -> Result<T, SimError> {
    let start = Instant::now();
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            return Err(SimError::Timeout {
                what,
                after: start.elapsed(),
            });
        }
        thread::sleep(Duration::from_millis(2));
    }
    handle.join().map_err(|_| SimError::ThreadPanicked(what))
}
