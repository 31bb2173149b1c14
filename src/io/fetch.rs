//! Depth snapshots fetched off the receive thread ([`SnapshotFetcher`]).
//!
//! The receive thread never blocks here: [`SnapshotFetcher::request`] and
//! [`SnapshotFetcher::try_recv`] return at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::http::{HttpClient, HttpError, HttpResponse};

/// One snapshot request for a [`SnapshotFetcher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// Caller's tag, returned with the result.
    pub id: u64,
    /// Path and query, for example from [`depth_path`](super::http::depth_path).
    pub path_and_query: String,
}

/// The outcome of one [`FetchRequest`].
#[derive(Debug)]
pub struct FetchResult {
    /// The request's tag.
    pub id: u64,
    /// The response (any status) or the error.
    pub result: Result<HttpResponse, HttpError>,
}

/// A thread that performs snapshot requests one at a time: requests go in
/// through a bounded queue that never blocks the caller, results come out
/// through a channel the caller polls.
#[derive(Debug)]
pub struct SnapshotFetcher {
    requests: Option<SyncSender<FetchRequest>>,
    results: Receiver<FetchResult>,
    done: Receiver<()>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    timeout: Duration,
}

impl SnapshotFetcher {
    /// Starts the thread for `url_base`; each request gets `timeout`; at most
    /// `queue` requests wait at once.
    #[cfg(test)]
    pub fn spawn(url_base: &str, timeout: Duration, queue: usize) -> Result<Self, HttpError> {
        Self::spawn_with_notify(url_base, timeout, queue, || {})
    }

    /// [`SnapshotFetcher::spawn`], calling `notify` after each result is ready (to wake a
    /// poll loop waiting for it).
    pub fn spawn_with_notify(
        url_base: &str,
        timeout: Duration,
        queue: usize,
        notify: impl Fn() + Send + 'static,
    ) -> Result<Self, HttpError> {
        // One client for the thread's life: its connections stay open between snapshots.
        let client = HttpClient::new(url_base, timeout)?;
        let (request_tx, request_rx) = mpsc::sync_channel::<FetchRequest>(queue.max(1));
        let (result_tx, results) = mpsc::channel();
        let (done_tx, done) = mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("snapshot-fetch".to_owned())
            .spawn(move || {
                let _done = done_tx;
                while !flag.load(Ordering::Relaxed) {
                    let request = match request_rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(request) => request,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    };
                    let result = client.get(&request.path_and_query);
                    let outcome = FetchResult {
                        id: request.id,
                        result,
                    };
                    if result_tx.send(outcome).is_err() {
                        break;
                    }
                    notify();
                }
            })
            .map_err(HttpError::Thread)?;
        Ok(Self {
            requests: Some(request_tx),
            results,
            done,
            stop,
            thread: Some(thread),
            timeout,
        })
    }

    /// Queues a request without blocking.
    pub fn request(&self, id: u64, path_and_query: &str) -> Result<(), HttpError> {
        let sender = self.requests.as_ref().ok_or(HttpError::Stopped)?;
        match sender.try_send(FetchRequest {
            id,
            path_and_query: path_and_query.to_owned(),
        }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(HttpError::QueueFull),
            Err(TrySendError::Disconnected(_)) => Err(HttpError::Stopped),
        }
    }

    /// A finished request, if any, without blocking.
    pub fn try_recv(&self) -> Option<FetchResult> {
        self.results.try_recv().ok()
    }

    /// A finished request, waiting at most `timeout`.
    #[cfg(test)]
    pub fn recv_timeout(&self, timeout: Duration) -> Option<FetchResult> {
        self.results.recv_timeout(timeout).ok()
    }

    /// Stops the thread: queued requests are dropped, one in flight runs to
    /// its timeout at worst. True if the thread ended within that bound.
    #[cfg(test)]
    pub fn stop(mut self) -> bool {
        self.shutdown()
    }

    fn shutdown(&mut self) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        self.requests = None;
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let bound = self.timeout.min(Duration::from_secs(120)) + Duration::from_secs(1);
        match self.done.recv_timeout(bound) {
            Err(RecvTimeoutError::Disconnected) | Ok(()) => thread.join().is_ok(),
            Err(RecvTimeoutError::Timeout) => false,
        }
    }
}

impl Drop for SnapshotFetcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}
