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
//! [`UnixSinkHandle::stop`] forwards what is in the input queue, lets every
//! writer flush its queue (again for at most
//! [`FINAL_FLUSH`](crate::publish::wire::FINAL_FLUSH)), closes the connections and removes
//! the socket file.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::publish::{Consumer, Producer, Pushed, channel};

mod writer;

use writer::{ClientState, ConnectionWriter};

use crate::publish::wire::{StreamName, encode_hello};
use crate::sinks::{Backoff, SinkError};

/// Socket write timeout: how often a blocked writer looks at its flags.
const WRITE_POLL: Duration = Duration::from_millis(50);
/// Events the dispatcher moves before it looks for new clients again.
const DISPATCH_BATCH: usize = 4096;
/// Events the dispatcher forwards at most once asked to stop.
const STOP_DRAIN_LIMIT: usize = 1 << 20;
const IDLE_MIN: Duration = Duration::from_micros(50);
const IDLE_MAX: Duration = Duration::from_millis(1);

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
}

/// Counters and the stop flag, shared by the handle and the threads.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    clients_accepted: AtomicU64,
    clients_connected: AtomicU64,
    cut_offs: AtomicU64,
    disconnects: AtomicU64,
    events_dispatched: AtomicU64,
    bytes_written: Arc<AtomicU64>,
}

impl Shared {
    fn snapshot(&self) -> UnixSinkStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        UnixSinkStats {
            clients_accepted: get(&self.clients_accepted),
            clients_connected: get(&self.clients_connected),
            cut_offs: get(&self.cut_offs),
            disconnects: get(&self.disconnects),
            events_dispatched: get(&self.events_dispatched),
            bytes_written: get(&self.bytes_written),
        }
    }
}

/// The unix-socket fan-out server.
#[derive(Debug)]
pub struct UnixSink;

impl UnixSink {
    /// Listens on `path` and feeds every client the events pushed into the
    /// handle's [`Producer`] ([`UnixSinkHandle::take_producer`]), whose
    /// queue holds `client_queue_bytes` like each client's. `streams` names
    /// stream ids `0..streams.len()` in the hello.
    ///
    /// # Errors
    ///
    /// See [`UnixSink::start_with_input`].
    pub fn start(
        path: impl AsRef<Path>,
        client_queue_bytes: usize,
        streams: &[StreamName],
    ) -> Result<UnixSinkHandle, SinkError> {
        let (producer, input) = channel(client_queue_bytes, streams.len());
        let mut handle = Self::start_with_input(path, input, client_queue_bytes, streams)?;
        handle.producer = Some(producer);
        Ok(handle)
    }

    /// [`UnixSink::start`] draining a queue the caller made.
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
        streams: &[StreamName],
    ) -> Result<UnixSinkHandle, SinkError> {
        let path = path.as_ref().to_path_buf();
        let mut hello = Vec::new();
        encode_hello(streams, &mut hello)?;
        remove_stale(&path)?;
        let listener = UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let inode = fs::symlink_metadata(&path).map(|m| (m.dev(), m.ino())).ok();
        let shared = Arc::new(Shared::default());
        let dispatcher = Dispatcher {
            listener,
            input,
            clients: Vec::new(),
            retired: Vec::new(),
            hello: hello.into(),
            queue_bytes: client_queue_bytes,
            streams: streams.len(),
            shared: Arc::clone(&shared),
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
    shared: Arc<Shared>,
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

/// One connected client, as the dispatcher sees it.
struct Client {
    producer: Producer,
    state: Arc<ClientState>,
    thread: JoinHandle<()>,
    overflowed: bool,
}

/// The sink thread: accepts clients and copies input events to them.
struct Dispatcher {
    listener: UnixListener,
    input: Consumer,
    clients: Vec<Client>,
    retired: Vec<JoinHandle<()>>,
    hello: Arc<[u8]>,
    queue_bytes: usize,
    streams: usize,
    shared: Arc<Shared>,
}

impl Dispatcher {
    fn run(mut self) {
        let mut backoff = Backoff::new(IDLE_MIN, IDLE_MAX);
        while !self.shared.stop.load(Ordering::Acquire) {
            let accepted = self.accept_pending();
            let moved = self.dispatch(DISPATCH_BATCH);
            self.reap();
            if accepted + moved == 0 {
                backoff.wait_at_most(IDLE_MAX);
            } else {
                backoff.reset();
            }
        }
        self.dispatch(STOP_DRAIN_LIMIT);
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

    /// Accepts every waiting connection; returns how many.
    fn accept_pending(&mut self) -> usize {
        let mut accepted = 0;
        while let Ok((stream, _)) = self.listener.accept() {
            accepted += 1;
            // A client that cannot be set up is dropped, which closes it.
            let _ = self.add_client(stream);
        }
        accepted
    }

    fn add_client(&mut self, stream: UnixStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_write_timeout(Some(WRITE_POLL))?;
        let (producer, queue) = channel(self.queue_bytes, self.streams);
        let state = Arc::new(ClientState::default());
        let writer = ConnectionWriter::new(
            stream,
            queue,
            Arc::clone(&state),
            Arc::clone(&self.shared.bytes_written),
            &self.hello,
        );
        let thread = thread::Builder::new()
            .name("gapless-unix-client".into())
            .spawn(move || writer.run())?;
        self.clients.push(Client {
            producer,
            state,
            thread,
            overflowed: false,
        });
        self.shared.clients_accepted.fetch_add(1, Ordering::Relaxed);
        self.shared
            .clients_connected
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Moves up to `limit` input events to every client; cuts off clients
    /// whose queue overflowed. Returns how many events moved.
    fn dispatch(&mut self, limit: usize) -> usize {
        let clients = &mut self.clients;
        let mut moved = 0;
        while moved < limit {
            let popped = self.input.pop(|event| {
                for client in clients.iter_mut().filter(|c| !c.overflowed) {
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
            self.shared.cut_offs.fetch_add(cut, Ordering::Relaxed);
        }
        moved
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
