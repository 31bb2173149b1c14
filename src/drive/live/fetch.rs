//! Snapshot fetches off the rx thread: HTTP `GET`s on one worker thread per venue and
//! server, SoupBinTCP snapshots on a thread each. Every result goes through one channel
//! and wakes the rx loop's poll, so a blocked loop sees it at once.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use mio::Waker;

use crate::io::fetch::SnapshotFetcher;
use crate::io::http::HttpError;
use crate::io::soup::{SnapshotReply, SoupTask, spawn_fetch};
use crate::venue::{Fetch, FetchId, FetchReply};

/// Requests waiting per HTTP worker at most.
const HTTP_QUEUE: usize = 64;
/// Results waiting for the rx loop at most; a fetch thread waits for room.
const RESULTS: usize = 65_536;

/// Why a fetch could not start.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// The HTTP worker for a server could not start.
    #[error("snapshot client for {base}: {source}")]
    Client {
        base: String,
        #[source]
        source: HttpError,
    },
    /// The worker refused the request (its queue is full, or it stopped).
    #[error("GET {url}: {source}")]
    Request {
        url: String,
        #[source]
        source: HttpError,
    },
    /// The SoupBinTCP fetch thread could not start.
    #[error("snapshot thread for {addr}: {source}")]
    Thread {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What a fetch produced, owned until the rx loop hands it to its venue.
#[derive(Debug)]
pub(super) enum Outcome {
    Http {
        status: u16,
        retry_after_secs: Option<u64>,
        used_weight: Option<u32>,
        body: Vec<u8>,
    },
    Message(Vec<u8>),
    End {
        next: u64,
    },
    Failed(String),
}

impl Outcome {
    /// The borrowed form the venue takes.
    pub(super) fn reply(&self) -> FetchReply<'_> {
        match self {
            Self::Http {
                status,
                retry_after_secs,
                used_weight,
                body,
            } => FetchReply::Http {
                status: *status,
                retry_after_secs: *retry_after_secs,
                used_weight: *used_weight,
                body,
            },
            Self::Message(m) => FetchReply::Message(m),
            Self::End { next } => FetchReply::End { next: *next },
            Self::Failed(reason) => FetchReply::Failed(reason),
        }
    }
}

/// One result, for venue `venue`'s fetch `id`.
#[derive(Debug)]
pub(super) struct Done {
    pub(super) venue: usize,
    pub(super) id: FetchId,
    pub(super) outcome: Outcome,
}

/// An HTTP worker: one venue's requests to one server, one at a time.
struct HttpWorker {
    venue: usize,
    base: String,
    timeout: Duration,
    fetcher: SnapshotFetcher,
}

/// Every fetch the rx loop started.
pub(super) struct FetchService {
    tx: Sender<Done>,
    rx: Receiver<Done>,
    http: Vec<HttpWorker>,
    waker: Arc<Waker>,
}

/// `scheme://authority` and the rest (`/` when there is none) of an absolute URL.
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url.get(after_scheme..).and_then(|rest| rest.find('/')) {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, "/"),
    }
}

impl FetchService {
    pub(super) fn new(waker: Arc<Waker>) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(RESULTS);
        Self {
            tx,
            rx,
            http: Vec::new(),
            waker,
        }
    }

    /// Starts venue `venue`'s fetch `id`, giving up after `timeout`. An error says why it
    /// could not start (the venue is told it failed).
    pub(super) fn start(
        &mut self,
        venue: usize,
        id: FetchId,
        what: Fetch,
        timeout: Duration,
    ) -> Result<(), StartError> {
        match what {
            Fetch::Http { url } => {
                let (base, path) = split_url(&url);
                let found = self
                    .http
                    .iter()
                    .position(|w| w.venue == venue && w.base == base && w.timeout == timeout);
                let worker = match found {
                    Some(i) => i,
                    None => {
                        let waker = Arc::clone(&self.waker);
                        let fetcher = SnapshotFetcher::spawn_with_notify(
                            base,
                            timeout,
                            HTTP_QUEUE,
                            move || {
                                // A failed wake only delays the result to the next cycle.
                                let _ = waker.wake();
                            },
                        )
                        .map_err(|source| StartError::Client {
                            base: base.to_string(),
                            source,
                        })?;
                        self.http.push(HttpWorker {
                            venue,
                            base: base.to_string(),
                            timeout,
                            fetcher,
                        });
                        self.http.len() - 1
                    }
                };
                let request = match self.http.get(worker) {
                    Some(w) => w.fetcher.request(id.0, path),
                    None => Err(HttpError::Stopped),
                };
                request.map_err(|source| StartError::Request {
                    url: url.clone(),
                    source,
                })
            }
            Fetch::Soup {
                addr,
                username,
                password,
                session,
            } => {
                let task = SoupTask {
                    addr,
                    username,
                    password,
                    session,
                };
                let (tx, waker) = (self.tx.clone(), Arc::clone(&self.waker));
                spawn_fetch(task, timeout, move |reply| {
                    let outcome = match reply {
                        SnapshotReply::Message(m) => Outcome::Message(m),
                        SnapshotReply::End { next } => Outcome::End { next },
                        SnapshotReply::Failed(reason) => Outcome::Failed(reason),
                    };
                    let sent = tx.send(Done { venue, id, outcome }).is_ok();
                    // A failed wake only delays the result to the next cycle.
                    let _ = waker.wake();
                    sent
                })
                .map(|_| ())
                .map_err(|source| StartError::Thread { addr, source })
            }
        }
    }

    /// The next result of any fetch, without waiting.
    pub(super) fn try_next(&mut self) -> Option<Done> {
        if let Ok(done) = self.rx.try_recv() {
            return Some(done);
        }
        for w in &self.http {
            if let Some(r) = w.fetcher.try_recv() {
                let outcome = match r.result {
                    Ok(response) => Outcome::Http {
                        status: response.status,
                        retry_after_secs: response.retry_after_secs,
                        used_weight: response.used_weight,
                        body: response.body,
                    },
                    Err(e) => Outcome::Failed(format!("GET {}: {e}", w.base)),
                };
                return Some(Done {
                    venue: w.venue,
                    id: FetchId(r.id),
                    outcome,
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn urls_split_at_the_path() {
        assert_eq!(
            split_url("https://api.binance.com/api/v3/depth?symbol=X"),
            ("https://api.binance.com", "/api/v3/depth?symbol=X")
        );
        assert_eq!(
            split_url("http://127.0.0.1:9000"),
            ("http://127.0.0.1:9000", "/")
        );
    }
}
