//! What a feed session needs to recover: when to reconnect ([`Backoff`])
//! and depth snapshots fetched off the receive thread ([`SnapshotFetcher`]).
//!
//! The receive thread never blocks here: [`Backoff::next_delay`] only
//! computes, and [`SnapshotFetcher::request`] and
//! [`SnapshotFetcher::try_recv`] return at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::http::{HttpError, HttpResponse, http_get};
use super::tls::{Endpoint, Scheme};

/// Exponential reconnect backoff with deterministic jitter.
///
/// Attempt `n` (from 0) waits `min(max, base * 2^n)`, less up to `jitter`
/// of it (a fraction in `[0, 1]`), drawn from a generator seeded at
/// construction, so the same seed gives the same delays.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// Delay of the first attempt.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Fraction of each delay that may be taken off at random.
    pub jitter: f64,
    attempt: u32,
    rng: u64,
}

impl Backoff {
    /// A backoff starting at `base`, capped at `max`, with `jitter` in `[0, 1]`.
    pub fn new(base: Duration, max: Duration, jitter: f64, seed: u64) -> Self {
        Self {
            base,
            max,
            jitter: unit_fraction(jitter),
            attempt: 0,
            rng: seed,
        }
    }

    /// The delay before the next attempt; each call doubles the next one.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(31)).unwrap_or(u32::MAX);
        let full = self.base.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let unit = (self.next_random() >> 11) as f64 / (1u64 << 53) as f64;
        full.mul_f64(1.0 - unit_fraction(self.jitter) * unit)
    }

    /// Attempts since construction or the last [`reset`](Self::reset).
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Starts again from `base` (after a connection has proved healthy).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `x` clamped to `[0, 1]`, with NaN as 0.
fn unit_fraction(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

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
    /// Time from the start of the request to its outcome.
    pub elapsed: Duration,
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
    pub fn spawn(url_base: &str, timeout: Duration, queue: usize) -> Result<Self, HttpError> {
        let endpoint = Endpoint::parse(url_base)?;
        if !matches!(endpoint.scheme, Scheme::Http | Scheme::Https) {
            return Err(HttpError::NotHttp(url_base.to_owned()));
        }
        let (request_tx, request_rx) = mpsc::sync_channel::<FetchRequest>(queue.max(1));
        let (result_tx, results) = mpsc::channel();
        let (done_tx, done) = mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let (base, flag) = (url_base.to_owned(), Arc::clone(&stop));
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
                    let started = Instant::now();
                    let result = http_get(&base, &request.path_and_query, timeout);
                    let outcome = FetchResult {
                        id: request.id,
                        elapsed: started.elapsed(),
                        result,
                    };
                    if result_tx.send(outcome).is_err() {
                        break;
                    }
                }
            })
            .map_err(HttpError::Io)?;
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
    pub fn recv_timeout(&self, timeout: Duration) -> Option<FetchResult> {
        self.results.recv_timeout(timeout).ok()
    }

    /// Stops the thread: queued requests are dropped, one in flight runs to
    /// its timeout at worst. True if the thread ended within that bound.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_jitters_and_resets() {
        let (base, max) = (Duration::from_millis(100), Duration::from_secs(1));
        let mut exact = Backoff::new(base, max, 0.0, 1);
        let delays: Vec<u128> = (0..6).map(|_| exact.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        exact.reset();
        assert_eq!(exact.next_delay(), base);
        let mut a = Backoff::new(base, max, 0.5, 42);
        let mut b = Backoff::new(base, max, 0.5, 42);
        for n in 0..40 {
            let (da, db) = (a.next_delay(), b.next_delay());
            assert_eq!(da, db);
            let full = base.saturating_mul(1 << n.min(20)).min(max);
            assert!(da <= full && da >= full / 2, "{da:?} vs {full:?}");
        }
    }
}
