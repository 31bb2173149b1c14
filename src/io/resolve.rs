//! Name resolution off the caller's thread.
//!
//! The system resolver (`getaddrinfo`) blocks for as long as the name servers take, which
//! with one that never answers is `timeout * attempts` of `resolv.conf`, and it cannot be
//! cancelled. [`Resolver::lookup`] therefore runs each lookup on a short-lived thread of its
//! own and returns at once; the answer comes back through [`Resolver::try_next`], and the
//! `notify` callback wakes the caller's poll. At most the `max` given to [`Resolver::new`]
//! lookups run at once: a resolver that hangs costs that many parked threads, never the caller, and
//! a lookup beyond the bound is refused at once (the caller backs off and tries later).
//! The caller keeps its own deadline and ignores an answer that comes too late.
//! A literal address is answered without a thread.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender};

/// The answer to one lookup.
#[derive(Debug)]
pub struct Resolved {
    /// The caller's tag.
    pub key: u64,
    /// Every address, in the resolver's order, or why there is none.
    pub result: io::Result<Vec<SocketAddr>>,
}

/// Why a lookup did not start.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// As many lookups as allowed are still running (the name server is slow or silent).
    #[error("{0} lookups still running; resolver busy")]
    Busy(usize),
    /// The lookup thread could not start.
    #[error("lookup thread: {0}")]
    Spawn(io::Error),
}

/// Lookups on threads of their own; see the [module documentation](self).
pub struct Resolver {
    tx: Sender<Resolved>,
    rx: Receiver<Resolved>,
    inflight: Arc<AtomicUsize>,
    max: usize,
    notify: Arc<dyn Fn() + Send + Sync>,
}

impl Resolver {
    /// At most `max` lookups at once; `notify` runs after each answer is queued.
    pub fn new(max: usize, notify: impl Fn() + Send + Sync + 'static) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        Self {
            tx,
            rx,
            inflight: Arc::new(AtomicUsize::new(0)),
            max: max.max(1),
            notify: Arc::new(notify),
        }
    }

    /// Starts resolving `host:port` under `key`; never blocks. A literal address is
    /// answered at once (`Ok(Some(..))`); otherwise the answer comes from
    /// [`Resolver::try_next`].
    ///
    /// # Errors
    ///
    /// [`ResolveError::Busy`] when the most lookups allowed are running.
    pub fn lookup(
        &self,
        key: u64,
        host: &str,
        port: u16,
    ) -> Result<Option<Vec<SocketAddr>>, ResolveError> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Some(vec![SocketAddr::new(ip, port)]));
        }
        let running = self.inflight.fetch_add(1, Ordering::Relaxed);
        if running >= self.max {
            self.inflight.fetch_sub(1, Ordering::Relaxed);
            return Err(ResolveError::Busy(running));
        }
        let (tx, inflight, notify) = (
            self.tx.clone(),
            Arc::clone(&self.inflight),
            Arc::clone(&self.notify),
        );
        let name = host.to_owned();
        let spawned = std::thread::Builder::new()
            .name("resolve".to_owned())
            .spawn(move || {
                let result = (name.as_str(), port)
                    .to_socket_addrs()
                    .map(Iterator::collect::<Vec<_>>)
                    .and_then(|addrs| {
                        if addrs.is_empty() {
                            Err(io::Error::new(io::ErrorKind::NotFound, "no address"))
                        } else {
                            Ok(addrs)
                        }
                    });
                inflight.fetch_sub(1, Ordering::Relaxed);
                // The receiver may be gone (the loop stopped): nothing to tell.
                let _ = tx.send(Resolved { key, result });
                notify();
            });
        match spawned {
            Ok(_) => Ok(None),
            Err(e) => {
                self.inflight.fetch_sub(1, Ordering::Relaxed);
                Err(ResolveError::Spawn(e))
            }
        }
    }

    /// The next answer, without waiting.
    pub fn try_next(&self) -> Option<Resolved> {
        self.rx.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn literals_need_no_thread_and_names_come_back_later() {
        let resolver = Resolver::new(2, || {});
        let now = resolver.lookup(1, "127.0.0.1", 80).expect("lookup");
        assert_eq!(now, Some(vec![SocketAddr::from(([127, 0, 0, 1], 80))]));
        let v6 = resolver.lookup(2, "::1", 443).expect("lookup");
        assert_eq!(v6.map(|a| a.len()), Some(1));
        assert_eq!(resolver.lookup(3, "localhost", 81).expect("lookup"), None);
        let deadline = Instant::now() + Duration::from_secs(10);
        let answer = loop {
            if let Some(r) = resolver.try_next() {
                break r;
            }
            assert!(Instant::now() < deadline, "no answer for localhost");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(answer.key, 3);
        let addrs = answer.result.expect("localhost resolves");
        assert!(addrs.iter().all(|a| a.port() == 81 && a.ip().is_loopback()));
    }
}
