//! The unix-socket fan-out server.
//!
//! ```text
//!  rx thread --push--> [input queue] --> dispatcher thread --push--> [client queue] --> writer thread --> socket
//!                                         (accepts clients)  \-push--> [client queue] --> writer thread --> socket
//! ```
//!
//! The rx thread feeds ONE [`Producer`]; the dispatcher thread drains its
//! [`Consumer`] and copies every event into each client's own
//! [`channel`], so the rx thread never waits on a client. Each client has a
//! writer thread that frames records as described in the [module
//! documentation](crate::publish::wire) (a hello, then `[u32 length][encoded event]`
//! records) and writes them in batches of up to 64 KiB.
//!
//! A client whose queue overflows is cut off at once: the dispatcher stops
//! feeding it, its writer throws away what was still queued, writes a
//! cut-off record with the reason after the bytes it had already batched,
//! and closes the connection. Other clients are not affected. A client that
//! does not read even that is closed after
//! [`FINAL_FLUSH`](crate::publish::wire::FINAL_FLUSH).
//!
//! The dispatcher also writes every event into a **replay history**: a ring of the
//! shared-memory sink's layout ([`crate::sinks::shm`]) in this process, of a size fixed at
//! start. A new connection has [`RESUME_WAIT`] to send a resume request (see
//! [`crate::publish::wire`]); until then it is not fed. It is then fed from the history,
//! each record judged against its cursors by the shm reader's rule (what it already had is
//! skipped, what the history no longer holds is an overrun marker with the exact range), at
//! the pace its queue takes; once it reaches the history's end it takes the live events
//! like any other client. A client whose queue takes nothing for [`REPLAY_STALL`] while it
//! replays is cut off.
//!
//! [`UnixSinkHandle::stop`] forwards what is in the input queue, lets every
//! writer flush its queue (again for at most
//! [`FINAL_FLUSH`](crate::publish::wire::FINAL_FLUSH)), closes the connections and removes
//! the socket file.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::client::shm::{Cursor, Cursors, Verdict};
use crate::log::{Throttle, held_note};
use crate::publish::wire::{RESUME_WAIT, ResumeCursor, decode_resume};
use crate::publish::{Consumer, Event, Producer, Pushed, channel};
use crate::sinks::shm::ring::{self, Geometry, Memory, Raw, RingReader, RingWriter};

#[cfg(test)]
mod tests;
mod writer;

use writer::{ClientState, ConnectionWriter};

use crate::publish::wire::{StreamName, encode_hello};
use crate::sinks::{Backoff, SinkError};

/// Socket write timeout: how often a blocked writer looks at its flags.
const WRITE_POLL: Duration = Duration::from_millis(50);
/// A refusal, or a client cut off, is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(5);
/// Events the dispatcher moves before it looks for new clients again.
const DISPATCH_BATCH: usize = 4096;
/// Events the dispatcher forwards at most once asked to stop.
const STOP_DRAIN_LIMIT: usize = 1 << 20;
const IDLE_MIN: Duration = Duration::from_micros(50);
const IDLE_MAX: Duration = Duration::from_millis(1);
/// Events moved from the history into one replaying client's queue a turn at most.
const REPLAY_BATCH: usize = 4096;
/// Room kept beside a replayed event for the marker and epoch event that may precede it.
const REPLAY_ROOM: usize = 1024;
/// A replaying client whose queue had no room for this long is cut off.
const REPLAY_STALL: Duration = Duration::from_secs(10);
/// Longest resume request read.
const MAX_REQUEST_BYTES: usize =
    4 + 8 + crate::publish::wire::MAX_RESUME_CURSORS * (2 + 1 + 255 + 8);
/// Replay history when the caller names none.
#[cfg(test)]
pub const DEFAULT_HISTORY_BYTES: u64 = 16 << 20;

/// Counters of a unix sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnixSinkStats {
    /// Clients accepted since the start.
    pub clients_accepted: u64,
    /// Clients being fed now.
    pub clients_connected: u64,
    /// Clients cut off because their queue overflowed.
    pub cut_offs: u64,
    /// Clients that went away on their own.
    pub disconnects: u64,
    /// Events taken off the input queue.
    pub events_dispatched: u64,
    /// Bytes written to clients, hello and cut-off records included.
    pub bytes_written: u64,
    /// Clients that sent a resume request.
    pub resumed: u64,
    /// Connections closed at once: what they sent was not a resume request, or the
    /// connection could not be set up (its socket options, its writer thread).
    pub refused: u64,
    /// Events sent to clients from the history (markers and epoch events included).
    pub events_replayed: u64,
}

/// Counters and the stop flag, shared by the handle, the threads and the metrics
/// exporter ([`UnixSinkHandle::counters`]).
#[derive(Debug, Default)]
pub struct UnixCounters {
    stop: AtomicBool,
    clients_accepted: AtomicU64,
    clients_connected: AtomicU64,
    cut_offs: AtomicU64,
    disconnects: AtomicU64,
    events_dispatched: AtomicU64,
    bytes_written: Arc<AtomicU64>,
    resumed: AtomicU64,
    refused: AtomicU64,
    events_replayed: AtomicU64,
}

impl UnixCounters {
    /// Clients accepted since the start.
    pub fn clients_accepted(&self) -> u64 {
        self.clients_accepted.load(Ordering::Relaxed)
    }

    /// Clients being fed now.
    pub fn clients_connected(&self) -> u64 {
        self.clients_connected.load(Ordering::Relaxed)
    }

    /// Clients cut off (their queue overflowed, or they took nothing while replaying).
    pub fn cut_offs(&self) -> u64 {
        self.cut_offs.load(Ordering::Relaxed)
    }

    /// Clients that sent a resume request.
    pub fn resumed(&self) -> u64 {
        self.resumed.load(Ordering::Relaxed)
    }

    /// Connections closed at once: not a resume request, or not set up.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Events sent to clients from the replay history.
    pub fn events_replayed(&self) -> u64 {
        self.events_replayed.load(Ordering::Relaxed)
    }

    fn snapshot(&self) -> UnixSinkStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        UnixSinkStats {
            clients_accepted: get(&self.clients_accepted),
            clients_connected: get(&self.clients_connected),
            cut_offs: get(&self.cut_offs),
            disconnects: get(&self.disconnects),
            events_dispatched: get(&self.events_dispatched),
            bytes_written: get(&self.bytes_written),
            resumed: get(&self.resumed),
            refused: get(&self.refused),
            events_replayed: get(&self.events_replayed),
        }
    }
}

/// The unix-socket fan-out server.
#[derive(Debug)]
pub struct UnixSink;

impl UnixSink {
    /// [`UnixSink::start_with_history`] with a history of 16 MiB.
    #[cfg(test)]
    pub fn start(
        path: impl AsRef<Path>,
        client_queue_bytes: usize,
        streams: &[StreamName],
    ) -> Result<UnixSinkHandle, SinkError> {
        Self::start_with_history(path, client_queue_bytes, DEFAULT_HISTORY_BYTES, streams)
    }

    /// Listens on `path` and feeds every client the events pushed into the
    /// handle's [`Producer`] ([`UnixSinkHandle::take_producer`]), whose
    /// queue holds `client_queue_bytes` like each client's. `streams` names
    /// stream ids `0..streams.len()` in the hello. The replay history keeps the last
    /// `history_bytes` of events (a power of two in 2^16..=2^36; other values are rounded
    /// up and clamped), allocated now.
    ///
    /// # Errors
    ///
    /// See [`UnixSink::start_with_input`].
    pub fn start_with_history(
        path: impl AsRef<Path>,
        client_queue_bytes: usize,
        history_bytes: u64,
        streams: &[StreamName],
    ) -> Result<UnixSinkHandle, SinkError> {
        let (producer, input) = channel(client_queue_bytes, streams.len());
        let mut handle =
            Self::start_with_input(path, input, client_queue_bytes, history_bytes, streams)?;
        handle.producer = Some(producer);
        Ok(handle)
    }

    /// [`UnixSink::start_with_history`] draining a queue the caller made.
    ///
    /// A stale socket file at `path` (one nobody listens on) is removed
    /// first.
    ///
    /// # Errors
    ///
    /// [`SinkError::SocketInUse`] when a server answers on `path`,
    /// [`SinkError::NotASocket`] when `path` is another kind of file,
    /// [`SinkError::Wire`] when the names do not fit the hello, and I/O
    /// errors from binding or starting the thread.
    pub fn start_with_input(
        path: impl AsRef<Path>,
        input: Consumer,
        client_queue_bytes: usize,
        history_bytes: u64,
        streams: &[StreamName],
    ) -> Result<UnixSinkHandle, SinkError> {
        let path = path.as_ref().to_path_buf();
        let history = History::new(history_bytes, streams.len());
        let mut hello = Vec::new();
        encode_hello(streams, &mut hello)?;
        remove_stale(&path)?;
        let listener = UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let inode = fs::symlink_metadata(&path).map(|m| (m.dev(), m.ino())).ok();
        let shared = Arc::new(UnixCounters::default());
        let dispatcher = Dispatcher {
            listener,
            input,
            arriving: Vec::new(),
            clients: Vec::new(),
            retired: Vec::new(),
            history,
            hello: hello.into(),
            queue_bytes: client_queue_bytes,
            streams: streams.len(),
            shared: Arc::clone(&shared),
            refused_logged: Throttle::new(LOG_EVERY),
            cut_logged: Throttle::new(LOG_EVERY),
        };
        let thread = thread::Builder::new()
            .name("gapless-unix-sink".into())
            .spawn(move || dispatcher.run())
            .inspect_err(|_| {
                let _ = fs::remove_file(&path);
            })?;
        Ok(UnixSinkHandle {
            path,
            inode,
            producer: None,
            shared,
            thread: Some(thread),
        })
    }
}

/// A running unix sink; stopping or dropping it closes every connection
/// and removes the socket file.
#[derive(Debug)]
pub struct UnixSinkHandle {
    path: PathBuf,
    inode: Option<(u64, u64)>,
    producer: Option<Producer>,
    shared: Arc<UnixCounters>,
    thread: Option<JoinHandle<()>>,
}

impl UnixSinkHandle {
    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The input queue's writing end, for the rx thread (once; `None` for a
    /// sink started with [`UnixSink::start_with_input`]).
    pub fn take_producer(&mut self) -> Option<Producer> {
        self.producer.take()
    }

    /// The live counters, for the metrics exporter.
    pub fn counters(&self) -> Arc<UnixCounters> {
        Arc::clone(&self.shared)
    }

    /// The counters now.
    #[cfg(test)]
    pub fn stats(&self) -> UnixSinkStats {
        self.shared.snapshot()
    }

    /// Forwards what is queued, flushes every client, closes the
    /// connections, removes the socket file and returns the final counters.
    ///
    /// # Errors
    ///
    /// [`SinkError::ThreadPanicked`] if the dispatcher panicked, or the
    /// error removing the socket file.
    pub fn stop(mut self) -> Result<UnixSinkStats, SinkError> {
        self.shutdown()?;
        Ok(self.shared.snapshot())
    }

    fn shutdown(&mut self) -> Result<(), SinkError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        // Events pushed before the stop are in the queue; the producer may
        // go now.
        self.producer = None;
        self.shared.stop.store(true, Ordering::Release);
        let joined = thread.join();
        let ours = fs::symlink_metadata(&self.path)
            .ok()
            .filter(|m| m.file_type().is_socket())
            .is_some_and(|m| Some((m.dev(), m.ino())) == self.inode);
        if ours {
            fs::remove_file(&self.path)?;
        }
        joined.map_err(|_| SinkError::ThreadPanicked("unix sink"))
    }
}

impl Drop for UnixSinkHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Removes a socket file nobody listens on; refuses a live socket or a
/// file of another kind.
fn remove_stale(path: &Path) -> Result<(), SinkError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if !meta.file_type().is_socket() {
        return Err(SinkError::NotASocket(path.to_path_buf()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(SinkError::SocketInUse(path.to_path_buf()));
    }
    fs::remove_file(path)?;
    Ok(())
}

/// A connection that may still send its resume request.
struct Arriving {
    stream: UnixStream,
    since: Instant,
    /// What it sent so far.
    buf: Vec<u8>,
    /// The history's tail when it connected: where a client without cursors starts.
    start: u64,
}

/// One connected client, as the dispatcher sees it.
struct Client {
    producer: Producer,
    state: Arc<ClientState>,
    thread: JoinHandle<()>,
    overflowed: bool,
    /// `Some` while it is fed from the history, `None` once it takes the live events.
    replay: Option<Box<Replay>>,
}

/// A client being fed from the history, at its own position, until it reaches the end.
struct Replay {
    reader: RingReader,
    cursors: Cursors,
    /// Streams without a cursor start at this history position.
    live_from: u64,
    /// Cursors of streams the history had no epoch of when the client connected (a daemon
    /// that restarted in the cursor's session has not sent its epoch event yet): each is
    /// placed at the stream's first epoch event, in that epoch if the label is the
    /// cursor's, else as lost.
    pending: Vec<ResumeCursor>,
    /// A resuming client gets an [`Event::Epoch`] where the history moves a stream to an
    /// epoch it was not told about: the history's epoch last told, per stream.
    told: Option<Vec<Option<u64>>>,
    /// Since when its queue has had no room, with nothing taken.
    full_since: Option<Instant>,
}

/// The epoch labels of one stream's recent epochs in the history: `(first, last, label)`
/// with the history's epochs the label was in force for.
#[derive(Debug, Default)]
struct Labels {
    spans: VecDeque<(u64, u64, Box<str>)>,
}

impl Labels {
    /// Epoch labels remembered per stream.
    const KEEP: usize = 8;

    fn label_of(&self, epoch: u64) -> Option<&str> {
        self.spans
            .iter()
            .rev()
            .find(|(first, last, _)| (*first..=*last).contains(&epoch))
            .map(|(_, _, label)| &**label)
    }

    /// The history's epoch a cursor's label names: the last one it was in force for.
    fn epoch_of(&self, label: &str) -> Option<u64> {
        self.spans
            .iter()
            .rev()
            .find(|(_, _, l)| &**l == label)
            .map(|(_, last, _)| *last)
    }
}

/// The events the sink received most recently, in a ring of the shared-memory sink's
/// layout held in this process, read by clients that replay.
struct History {
    writer: RingWriter,
    mem: Memory,
    geometry: Geometry,
    labels: Vec<Labels>,
}

impl History {
    fn new(capacity: u64, streams: usize) -> Self {
        let capacity = capacity.clamp(ring::MIN_CAPACITY, ring::MAX_CAPACITY);
        let capacity = if capacity.is_power_of_two() {
            capacity
        } else {
            capacity.next_power_of_two().min(ring::MAX_CAPACITY)
        };
        let (size, _) = ring::file_size(capacity, 0);
        let mem = Memory::heap(size);
        // Epochs grow across restarts of the daemon, as the shm ring's do.
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .min((1 << (64 - ring::EPOCH_RESET_BITS)) - 1);
        let geometry = ring::initialize(&mem, capacity, generation, &[]);
        Self {
            writer: RingWriter::new(mem.clone(), &geometry, streams),
            mem,
            geometry,
            labels: (0..streams).map(|_| Labels::default()).collect(),
        }
    }

    fn write(&mut self, event: &Event<'_>) {
        self.writer.write(event);
        let stream = event.stream();
        let epoch = self.writer.epoch(stream);
        let Some(labels) = self.labels.get_mut(usize::from(stream)) else {
            return;
        };
        if let Event::Epoch { label, .. } = event {
            if labels.spans.len() == Labels::KEEP {
                labels.spans.pop_front();
            }
            let label = String::from_utf8_lossy(label).into_owned().into_boxed_str();
            labels.spans.push_back((epoch, epoch, label));
        } else if let Some(span) = labels.spans.back_mut() {
            span.1 = span.1.max(epoch);
        }
    }

    /// A reader for a client that connected when the history's tail was `start`.
    fn replay(&self, start: u64, cursors: Option<&[ResumeCursor]>) -> Replay {
        let mut reader = RingReader::new(self.mem.clone(), self.geometry);
        let mut resume = Vec::new();
        let mut pending = Vec::new();
        for c in cursors.unwrap_or_default() {
            let labels = self.labels.get(usize::from(c.stream));
            let unlabelled = labels.is_none_or(|l| l.spans.is_empty());
            let epoch = match labels.and_then(|l| l.epoch_of(&c.label)) {
                Some(epoch) => epoch,
                // A stream that never had a label, named without one: its current epoch.
                None if unlabelled && c.label.is_empty() => self.writer.epoch(c.stream),
                // No epoch of the stream seen yet: placed at its first epoch event.
                None if unlabelled => {
                    pending.push(c.clone());
                    continue;
                }
                // An epoch the history no longer knows: everything it holds of the
                // stream comes after a marker of the loss.
                None => 0,
            };
            resume.push(Cursor {
                stream: c.stream,
                epoch,
                next: c.next,
            });
        }
        if resume.is_empty() {
            // Nothing to replay from the past: the client starts where it connected.
            reader.seek(start);
        }
        Replay {
            reader,
            cursors: Cursors::new(&resume),
            live_from: start,
            pending,
            told: cursors.map(|_| vec![None; self.labels.len()]),
            full_since: None,
        }
    }
}

/// The sink thread: accepts clients and copies input events to them.
struct Dispatcher {
    listener: UnixListener,
    input: Consumer,
    arriving: Vec<Arriving>,
    clients: Vec<Client>,
    retired: Vec<JoinHandle<()>>,
    history: History,
    hello: Arc<[u8]>,
    queue_bytes: usize,
    streams: usize,
    shared: Arc<UnixCounters>,
    refused_logged: Throttle,
    cut_logged: Throttle,
}

impl Dispatcher {
    fn run(mut self) {
        let mut backoff = Backoff::new(IDLE_MIN, IDLE_MAX);
        while !self.shared.stop.load(Ordering::Acquire) {
            let accepted = self.accept_pending();
            let moved = self.dispatch(DISPATCH_BATCH);
            let replayed = self.replay();
            self.reap();
            if accepted + moved + replayed == 0 {
                backoff.wait_at_most(IDLE_MAX);
            } else {
                backoff.reset();
            }
        }
        // Connections still deciding are taken as they are: the stop does not wait for
        // their requests.
        self.settle_arriving(true);
        self.dispatch(STOP_DRAIN_LIMIT);
        // Clients still replaying get what the history holds and fits their queues.
        let mut replayed = 0;
        while replayed < STOP_DRAIN_LIMIT {
            let moved = self.replay();
            if moved == 0 {
                break;
            }
            replayed += moved;
        }
        self.reap();
        let clients = std::mem::take(&mut self.clients);
        let mut threads = std::mem::take(&mut self.retired);
        // Dropping a producer tells its writer to flush and close.
        threads.extend(clients.into_iter().map(|client| client.thread));
        self.shared.clients_connected.store(0, Ordering::Relaxed);
        for thread in threads {
            let _ = thread.join();
        }
    }

    /// Accepts every waiting connection, and sets up those whose resume request came or
    /// whose wait for it ended; returns how many moved on.
    fn accept_pending(&mut self) -> usize {
        let mut accepted = 0;
        while let Ok((stream, _)) = self.listener.accept() {
            accepted += 1;
            self.shared.clients_accepted.fetch_add(1, Ordering::Relaxed);
            // A connection that cannot be set up is dropped, which closes it.
            if stream.set_nonblocking(true).is_ok() {
                self.arriving.push(Arriving {
                    stream,
                    since: Instant::now(),
                    buf: Vec::new(),
                    start: self.history.writer.tail(),
                });
            }
        }
        accepted + self.settle_arriving(false)
    }

    /// Sets up the arriving connections whose resume request came or whose wait for it
    /// ended (all of them when `now`); returns how many.
    fn settle_arriving(&mut self, now: bool) -> usize {
        let mut accepted = 0;
        for mut a in std::mem::take(&mut self.arriving) {
            match read_request(&mut a) {
                Request::Waiting if !now => self.arriving.push(a),
                Request::Waiting | Request::None => {
                    accepted += 1;
                    let replay = self.history.replay(a.start, None);
                    self.add_client(a.stream, replay);
                }
                Request::Resume(cursors) => {
                    accepted += 1;
                    self.shared.resumed.fetch_add(1, Ordering::Relaxed);
                    let replay = self.history.replay(a.start, Some(&cursors));
                    self.add_client(a.stream, replay);
                }
                Request::Refused(why) => {
                    accepted += 1;
                    self.refuse(format_args!("its resume request was refused ({why})"));
                }
            }
        }
        accepted
    }

    /// Counts a connection closed at once, and says why (at most every [`LOG_EVERY`]).
    fn refuse(&mut self, why: std::fmt::Arguments<'_>) {
        let total = self.shared.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(held) = self.refused_logged.admit() {
            crate::log_warn!(
                "unix sink: a client's connection is closed: {why} (refused so far: \
                 {total}){}",
                held_note(held)
            );
        }
    }

    fn add_client(&mut self, stream: UnixStream, replay: Replay) {
        let set_up = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_write_timeout(Some(WRITE_POLL)));
        if let Err(e) = set_up {
            self.refuse(format_args!("its socket could not be set up ({e})"));
            return;
        }
        let (producer, queue) = channel(self.queue_bytes, self.streams);
        let state = Arc::new(ClientState::default());
        let writer = ConnectionWriter::new(
            stream,
            queue,
            Arc::clone(&state),
            Arc::clone(&self.shared.bytes_written),
            &self.hello,
        );
        let thread = match thread::Builder::new()
            .name("gapless-unix-client".into())
            .spawn(move || writer.run())
        {
            Ok(thread) => thread,
            Err(e) => {
                self.refuse(format_args!("no thread to write to it ({e})"));
                return;
            }
        };
        self.clients.push(Client {
            producer,
            state,
            thread,
            overflowed: false,
            replay: Some(Box::new(replay)),
        });
        self.shared
            .clients_connected
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Moves up to `limit` input events into the history and to every live client; cuts
    /// off live clients whose queue overflowed. Returns how many events moved.
    fn dispatch(&mut self, limit: usize) -> usize {
        let (clients, history) = (&mut self.clients, &mut self.history);
        let mut moved = 0;
        while moved < limit {
            let popped = self.input.pop(|event| {
                history.write(&event);
                for client in clients
                    .iter_mut()
                    .filter(|c| !c.overflowed && c.replay.is_none())
                {
                    client.overflowed = client.producer.push(&event) == Pushed::Dropped;
                }
            });
            if popped.is_none() {
                break;
            }
            moved += 1;
        }
        self.shared
            .events_dispatched
            .fetch_add(moved as u64, Ordering::Relaxed);
        if self.clients.iter().any(|c| c.overflowed) {
            for client in self.clients.iter().filter(|c| c.overflowed) {
                // Before the producer is dropped: see `ConnectionWriter`.
                client.state.cut.store(true, Ordering::Release);
            }
            let cut = self.retire(|c| c.overflowed);
            self.cut_off(cut);
        }
        moved
    }

    /// Feeds replaying clients from the history, as far as their queues take; a client
    /// that reaches the history's end takes the live events from then on. Returns how many
    /// events went out.
    fn replay(&mut self) -> usize {
        let mut moved = 0;
        let history = &self.history;
        for client in &mut self.clients {
            let Some(replay) = client.replay.as_mut() else {
                continue;
            };
            match replay_some(replay, history, &mut client.producer) {
                Ok((n, end)) => {
                    moved += n;
                    if n > 0 || end != ReplayEnd::Full {
                        replay.full_since = None;
                    }
                    if end == ReplayEnd::CaughtUp {
                        client.replay = None;
                    } else if end == ReplayEnd::Full
                        && replay.full_since.get_or_insert_with(Instant::now).elapsed()
                            >= REPLAY_STALL
                    {
                        client.state.stalled.store(true, Ordering::Release);
                        client.overflowed = true;
                    }
                }
                Err(e) => {
                    crate::log_warn!("unix sink: replay history unreadable ({e}); client cut off");
                    client.overflowed = true;
                }
            }
        }
        if self.clients.iter().any(|c| c.overflowed) {
            for client in self.clients.iter().filter(|c| c.overflowed) {
                client.state.cut.store(true, Ordering::Release);
            }
            let cut = self.retire(|c| c.overflowed);
            self.cut_off(cut);
        }
        self.shared
            .events_replayed
            .fetch_add(moved as u64, Ordering::Relaxed);
        moved
    }

    /// Counts `cut` clients cut off, and says so in the log at most every [`LOG_EVERY`].
    fn cut_off(&mut self, cut: u64) {
        let total = self.shared.cut_offs.fetch_add(cut, Ordering::Relaxed) + cut;
        if let Some(held) = self.cut_logged.admit() {
            crate::log_warn!(
                "unix sink: {cut} client(s) cut off for falling behind ({total} so far); \
                 a client that reconnects with a resume request carries on where it was{}",
                held_note(held)
            );
        }
    }

    /// Forgets clients whose writer ended and joins finished threads,
    /// without blocking.
    fn reap(&mut self) {
        let gone = self.retire(|c| c.state.closed.load(Ordering::Acquire));
        self.shared.disconnects.fetch_add(gone, Ordering::Relaxed);
        let (done, running) = std::mem::take(&mut self.retired)
            .into_iter()
            .partition::<Vec<_>, _>(|thread| thread.is_finished());
        self.retired = running;
        for thread in done {
            let _ = thread.join();
        }
    }

    /// Stops feeding the clients `pick` selects (dropping their producers)
    /// and keeps their threads to join; returns how many.
    fn retire(&mut self, pick: impl Fn(&Client) -> bool) -> u64 {
        let mut retired = 0;
        for client in std::mem::take(&mut self.clients) {
            if pick(&client) {
                retired += 1;
                self.retired.push(client.thread);
            } else {
                self.clients.push(client);
            }
        }
        self.shared
            .clients_connected
            .fetch_sub(retired, Ordering::Relaxed);
        retired
    }
}

/// At the end of a resuming client's replay: the label of each stream it was not told one
/// for (nothing of the stream was replayed), so it knows what its next cursor names. False
/// when one did not fit its queue.
fn tell_current_epochs(replay: &mut Replay, history: &History, producer: &mut Producer) -> bool {
    let Some(told) = replay.told.as_mut() else {
        return true;
    };
    for (stream, labels) in history.labels.iter().enumerate() {
        let Ok(id) = u16::try_from(stream) else {
            break;
        };
        let current = history.writer.epoch(id);
        let (Some(slot), Some(label)) = (told.get_mut(stream), labels.label_of(current)) else {
            continue;
        };
        if slot.is_none() {
            let event = Event::Epoch {
                stream: id,
                label: label.as_bytes(),
            };
            if !producer.would_fit(&event) || producer.push(&event) != Pushed::Written {
                return false;
            }
            *slot = Some(current);
        }
    }
    true
}

/// What an arriving connection has sent.
enum Request {
    /// Nothing whole yet, and its wait is not over.
    Waiting,
    /// Nothing within the wait, or it closed its writing side having sent nothing: a
    /// client from now on.
    None,
    /// A resume request.
    Resume(Vec<ResumeCursor>),
    /// Something that is not a resume request, or the connection failed.
    Refused(String),
}

/// Reads what `a` sent without blocking.
fn read_request(a: &mut Arriving) -> Request {
    let mut chunk = [0u8; 4096];
    loop {
        match a.stream.read(&mut chunk) {
            Ok(0) if a.buf.is_empty() => return Request::None,
            Ok(0) => break,
            Ok(n) => {
                a.buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
                if a.buf.len() > MAX_REQUEST_BYTES {
                    return Request::Refused(format!(
                        "more than {MAX_REQUEST_BYTES} bytes before a whole request"
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Request::Refused(format!("read failed: {e}")),
        }
    }
    if let Some((len, body)) = a.buf.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        if len > MAX_REQUEST_BYTES {
            return Request::Refused(format!("a request of {len} bytes"));
        }
        if let Some(body) = body.get(..len) {
            return match decode_resume(body) {
                Ok(cursors) => Request::Resume(cursors),
                Err(e) => Request::Refused(e.to_string()),
            };
        }
    }
    if a.buf.is_empty() && a.since.elapsed() >= RESUME_WAIT {
        return Request::None;
    }
    if a.since.elapsed() >= RESUME_WAIT * 20 {
        return Request::Refused(format!(
            "{} bytes of an unfinished request after {:?}",
            a.buf.len(),
            RESUME_WAIT * 20
        ));
    }
    Request::Waiting
}

/// Where a turn of replay stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplayEnd {
    /// At the history's end with nothing left to settle: the client takes live events.
    CaughtUp,
    /// At the history's end, still waiting for an epoch event a cursor needs (or room for
    /// the labels it is to be told).
    Waiting,
    /// The client's queue has no room.
    Full,
    /// The turn's share moved.
    Batch,
}

/// Moves events from the history into a replaying client's queue while they fit: at most
/// [`REPLAY_BATCH`]. Returns how many went, and where it stopped.
fn replay_some(
    replay: &mut Replay,
    history: &History,
    producer: &mut Producer,
) -> Result<(usize, ReplayEnd), ring::LayoutError> {
    let mut moved = 0;
    while moved < REPLAY_BATCH {
        let header = match replay.reader.next()? {
            Raw::Empty => {
                // Caught up once every label is told and every cursor placed; until then
                // the replay goes on, reading new events from the history as they come.
                let told = tell_current_epochs(replay, history, producer);
                let end = if told && replay.pending.is_empty() {
                    ReplayEnd::CaughtUp
                } else {
                    ReplayEnd::Waiting
                };
                return Ok((moved, end));
            }
            Raw::Lapped { .. } => continue,
            Raw::Record(header) => header,
        };
        let at = replay.reader.last_position();
        let Some(event) = replay.reader.event() else {
            continue;
        };
        let stream = event.stream();
        if let Some(i) = replay.pending.iter().position(|c| c.stream == stream)
            && let Event::Epoch { label, .. } = event
        {
            let c = replay.pending.swap_remove(i);
            let epoch = if label == c.label.as_bytes() {
                header.epoch
            } else {
                0
            };
            replay.cursors.set(Cursor {
                stream,
                epoch,
                next: c.next,
            });
        }
        if !replay.cursors.is_positioned(stream) && at < replay.live_from {
            continue;
        }
        // Room for the event, and for the marker and epoch event that may go before it:
        // judged only once it can go, so that a record judged is a record sent.
        if producer.free_bytes() < event.encoded_len() + REPLAY_ROOM {
            replay.reader.rewind();
            return Ok((moved, ReplayEnd::Full));
        }
        let epoch = header.epoch;
        let verdict = replay.cursors.judge(&header, &event);
        let mut push = |e: &Event<'_>| {
            if producer.push(e) == Pushed::Written {
                moved += 1;
            }
        };
        match verdict {
            Verdict::Skip => continue,
            Verdict::Lost(marker) => {
                push(&marker);
                // The same record is judged again, against the cursor the marker moved.
                replay.reader.rewind();
                continue;
            }
            Verdict::Deliver => {}
        }
        if let Some(told) = replay
            .told
            .as_mut()
            .and_then(|t| t.get_mut(usize::from(stream)))
            && *told != Some(epoch)
        {
            *told = Some(epoch);
            let label = history
                .labels
                .get(usize::from(stream))
                .and_then(|l| l.label_of(epoch));
            if let (Some(label), false) = (label, matches!(event, Event::Epoch { .. })) {
                push(&Event::Epoch {
                    stream,
                    label: label.as_bytes(),
                });
            }
        }
        push(&event);
    }
    Ok((moved, ReplayEnd::Batch))
}

/// Gives the socket file at `path` the permission bits `mode` and, when named, the group
/// `group` (a name from the group database or a number), so consumers running as another
/// user of that group can connect (connecting needs write permission on the socket).
///
/// # Errors
///
/// [`SinkError::UnknownGroup`] for a group that does not exist, and I/O errors of `chown`
/// (the service's user must be a member of the group) and `chmod`.
pub fn set_access(path: &Path, mode: u32, group: Option<&str>) -> Result<(), SinkError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(group) = group {
        let gid = match group.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => group_id(group).ok_or_else(|| SinkError::UnknownGroup(group.to_owned()))?,
        };
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The id of the group named `name`, from the group database.
fn group_id(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: a zeroed `group` is a valid out-parameter for getgrnam_r.
    let mut group: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: a NUL-terminated name, a group struct
    // and a buffer of the length passed, and the result pointer.
    let rc = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut group,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some(group.gr_gid)
}
