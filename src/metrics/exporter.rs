//! The exporter: a minimal HTTP/1.1 server on a std [`TcpListener`], off the
//! rx thread.
//!
//! | request | response |
//! | --- | --- |
//! | `GET /metrics` | 200, the exposition of the [`Registry`] in the [`Format`] the `Accept` header asks for (the Prometheus text format 0.0.4 unless it names OpenMetrics) |
//! | `GET /healthz` | 200 while the rx loop marked itself alive within the registry's threshold, 503 otherwise |
//! | `GET` anything else | 404 |
//! | another method | 405 |
//! | not HTTP | 400 |
//! | a connection beyond [`MAX_CONNECTIONS`] open at once | 503 with `Retry-After`, counted as refused |
//!
//! `HEAD` is answered like `GET`, without a body. Every response closes the
//! connection.
//!
//! One thread accepts (waiting in `mio`, woken at once by a stop) and hands
//! each connection to a thread of its own, at most [`MAX_CONNECTIONS`] at
//! once. A connection's request head must arrive within [`READ_TIMEOUT`]
//! and its response be taken within [`WRITE_TIMEOUT`], so a connection
//! thread lives a bounded time, and idle or slow peers hold up neither the
//! other scrapes (each has its own thread) nor the rx thread (which never
//! waits for the exporter). Refused and failed connections are counted in
//! [`ExporterStats`], exported as series, and logged at most once every
//! [`LOG_EVERY`] with the number left unlogged.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};
use thiserror::Error;

use crate::log::Throttle;
use crate::metrics::{Format, Registry, unix_now_ns};

/// Most connections served at once; one more is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// The most a request head may take to arrive.
pub const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// The most writing a response may block.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// At most one log line of each kind (refusals, failures) this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// The accept thread's longest wait without an event, a backstop only.
const POLL_BACKSTOP: Duration = Duration::from_secs(1);
/// The wait before accepting again after an accept error (out of
/// descriptors, say), so a persistent error does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Longest request head accepted.
const MAX_HEAD: usize = 8 * 1024;
const PLAIN: &str = "text/plain; charset=utf-8";
const LISTENER: Token = Token(0);
const WAKE: Token = Token(1);

/// Why the exporter could not start.
#[derive(Debug, Error)]
pub enum ExporterError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: io::Error,
    },
    /// The listener could not be set up or its thread started.
    #[error("cannot start the metrics exporter: {0}")]
    Setup(#[from] io::Error),
}

/// The exporter's own counters, kept in the [`Registry`] and exported with
/// it.
#[derive(Debug, Default)]
pub struct ExporterStats {
    served: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    refusals_log: LogGate,
    failures_log: LogGate,
}

impl ExporterStats {
    /// Requests answered, whatever their status.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Connections refused because [`MAX_CONNECTIONS`] were open.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections that timed out, failed or could not get a thread before
    /// an answer was written.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    fn refuse(&self, peer: Option<SocketAddr>) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(unlogged) = self.refusals_log.admit() {
            crate::log_warn!(
                "metrics: refused a connection from {}: {MAX_CONNECTIONS} already open \
                 ({unlogged} more refused since the last line)",
                peer_name(peer)
            );
        }
    }

    fn fail(&self, peer: Option<SocketAddr>, error: &io::Error) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        if let Some(unlogged) = self.failures_log.admit() {
            crate::log_warn!(
                "metrics: connection from {} failed: {error} \
                 ({unlogged} more failed since the last line)",
                peer_name(peer)
            );
        }
    }
}

fn peer_name(peer: Option<SocketAddr>) -> String {
    peer.map_or_else(|| "an unknown peer".to_string(), |p| p.to_string())
}

/// Lets one log line through every [`LOG_EVERY`] and counts the others; shared by the
/// connection threads.
#[derive(Debug)]
struct LogGate(Mutex<Throttle>);

impl Default for LogGate {
    fn default() -> Self {
        Self(Mutex::new(Throttle::new(LOG_EVERY)))
    }
}

impl LogGate {
    /// `Some(lines suppressed since the last one)` when a line may be
    /// written now.
    fn admit(&self) -> Option<u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit()
    }
}

/// Serves a [`Registry`] over HTTP.
#[derive(Debug)]
pub struct Exporter;

impl Exporter {
    /// Binds `listen` and serves `registry` on threads of its own until
    /// the handle is stopped or dropped. Port 0 picks a free port; see
    /// [`ExporterHandle::local_addr`].
    ///
    /// # Errors
    ///
    /// [`ExporterError::Bind`] when the address is taken or not local,
    /// [`ExporterError::Setup`] when the poller or the thread cannot start.
    pub fn start(
        listen: SocketAddr,
        registry: Arc<Registry>,
    ) -> Result<ExporterHandle, ExporterError> {
        let listener = TcpListener::bind(listen).map_err(|source| ExporterError::Bind {
            addr: listen,
            source,
        })?;
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::clone(registry.exporter());
        let server = Server {
            poll,
            listener,
            registry,
            stop: Arc::clone(&stop),
        };
        let thread = thread::Builder::new()
            .name("gapless-metrics".into())
            .spawn(move || server.run())?;
        Ok(ExporterHandle {
            local_addr,
            stop,
            waker,
            stats,
            thread: Some(thread),
        })
    }
}

/// The running exporter; stopping or dropping it ends its threads.
#[derive(Debug)]
pub struct ExporterHandle {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    #[cfg_attr(not(test), allow(dead_code))]
    stats: Arc<ExporterStats>,
    thread: Option<JoinHandle<()>>,
}

impl ExporterHandle {
    /// The address the exporter listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Requests answered so far, whatever their status.
    #[cfg(test)]
    pub fn requests_served(&self) -> u64 {
        self.stats.served()
    }

    /// The exporter's counters (also in the registry it serves).
    #[cfg(test)]
    pub fn stats(&self) -> &Arc<ExporterStats> {
        &self.stats
    }

    /// Stops accepting at once and waits for the connections being served:
    /// at most [`READ_TIMEOUT`] plus [`WRITE_TIMEOUT`].
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            if let Err(e) = self.waker.wake() {
                // The thread still sees the flag within its poll backstop.
                crate::log_warn!("metrics: cannot wake the exporter to stop it: {e}");
            }
            // A panic on the exporter thread is not the caller's to rethrow.
            let _ = thread.join();
        }
    }
}

impl Drop for ExporterHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The accept thread.
struct Server {
    poll: Poll,
    listener: mio::net::TcpListener,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn run(mut self) {
        let mut events = Events::with_capacity(8);
        let mut connections: Vec<JoinHandle<()>> = Vec::with_capacity(MAX_CONNECTIONS);
        let mut wait = POLL_BACKSTOP;
        while !self.stop.load(Ordering::Acquire) {
            if let Err(e) = self.poll.poll(&mut events, Some(wait))
                && e.kind() != io::ErrorKind::Interrupted
            {
                crate::log_error!("metrics: the exporter's poll failed, it stops: {e}");
                break;
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            // Edge-triggered: accept until the backlog is empty, whatever
            // woke the thread.
            wait = if self.accept_all(&mut connections) {
                POLL_BACKSTOP
            } else {
                ACCEPT_RETRY
            };
        }
        // Close the listener first, so no one connects while the last
        // answers go out; each connection ends within its timeouts.
        drop(self.listener);
        for connection in connections {
            let _ = connection.join();
        }
    }

    /// Accepts every waiting connection. False after an accept error, to
    /// retry soon.
    fn accept_all(&mut self, connections: &mut Vec<JoinHandle<()>>) -> bool {
        let stats = self.registry.exporter();
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    stats.fail(None, &e);
                    return false;
                }
            };
            let stream = TcpStream::from(stream);
            connections.retain(|c| !c.is_finished());
            if connections.len() >= MAX_CONNECTIONS {
                // Counted before the answer goes out, so a peer that has its 503 also
                // sees it in the counters.
                stats.refuse(Some(peer));
                refuse(stream);
                continue;
            }
            let registry = Arc::clone(&self.registry);
            let spawned = thread::Builder::new()
                .name("gapless-metrics-conn".into())
                .spawn(move || serve(&registry, stream, peer));
            match spawned {
                Ok(connection) => connections.push(connection),
                // The closure, and the connection with it, is dropped:
                // the peer sees it closed.
                Err(e) => stats.fail(Some(peer), &e),
            }
        }
    }
}

/// Answers 503 on a connection beyond the bound, without waiting for it.
fn refuse(mut stream: TcpStream) {
    // Take in what the peer already sent (non-blocking, once): a socket
    // closed with unread data resets the connection, and the peer might
    // never read the answer.
    let mut request = [0u8; MAX_HEAD];
    let _ = stream.read(&mut request);
    let body = "too many connections to the metrics endpoint\n";
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: {PLAIN}\r\nContent-Length: {}\r\n\
         Retry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // Once, without blocking: a fresh socket's send buffer takes this whole;
    // if not, the peer sees the connection closed, a refusal too.
    let _ = stream.write(response.as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
}

/// One connection, on a thread of its own.
fn serve(registry: &Registry, stream: TcpStream, peer: SocketAddr) {
    let stats = registry.exporter();
    match answer(registry, stream) {
        Ok(()) => {
            stats.served.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => stats.fail(Some(peer), &e),
    }
}

fn answer(registry: &Registry, mut stream: TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let response = match read_head(&mut stream)? {
        Some(head) => respond(registry, &head),
        None => Response::text(400, "Bad Request", "malformed request\n"),
    };
    stream.write_all(&response.into_bytes())?;
    stream.flush()?;
    // The peer may already be gone; the response was handed over.
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

fn respond(registry: &Registry, head: &[u8]) -> Response {
    let Some(request) = Request::parse(head) else {
        return Response::text(400, "Bad Request", "malformed request\n");
    };
    let head_only = request.method == "HEAD";
    if request.method != "GET" && !head_only {
        return Response::text(405, "Method Not Allowed", "only GET and HEAD\n")
            .with_header("Allow: GET, HEAD");
    }
    let response = match request.path {
        "/metrics" => {
            let format = Format::from_accept(request.accept.as_deref());
            match registry.encode(format) {
                Ok(text) => Response::new(200, "OK", format.content_type(), text),
                Err(_) => Response::text(500, "Internal Server Error", "encoding failed\n"),
            }
        }
        "/healthz" => health(registry),
        _ => Response::text(404, "Not Found", "not found\n"),
    };
    if head_only {
        response.without_body()
    } else {
        response
    }
}

fn health(registry: &Registry) -> Response {
    let now = unix_now_ns();
    let last = registry.process().last_alive_ns();
    if registry.is_alive(now) {
        return Response::text(200, "OK", "ok\n");
    }
    let body = if last == 0 {
        "rx loop never reported alive\n".to_string()
    } else {
        let silent = Duration::from_nanos(now.saturating_sub(last));
        format!("rx loop silent for {:.3} s\n", silent.as_secs_f64())
    };
    Response::new(503, "Service Unavailable", PLAIN, body)
}

/// Reads up to the blank line ending the request head. `None` when the
/// peer closed first or the head is too long; an error on timeout.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while Instant::now() < deadline {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        head.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
    Err(io::ErrorKind::TimedOut.into())
}

/// The parts of a request the exporter routes on.
#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    method: &'a str,
    /// The target without its query string.
    path: &'a str,
    /// Every `Accept` header's value, joined with commas.
    accept: Option<String>,
}

impl<'a> Request<'a> {
    fn parse(head: &'a [u8]) -> Option<Self> {
        let head = std::str::from_utf8(head).ok()?;
        let mut lines = head.split('\n').map(|l| l.trim_end_matches('\r'));
        let (line, rest) = (lines.next()?, lines);
        if !head.contains('\n') {
            return None;
        }
        let mut parts = line.split(' ');
        let method = parts.next().filter(|m| !m.is_empty())?;
        let target = parts.next()?;
        let version = parts.next()?;
        if parts.next().is_some() || !version.starts_with("HTTP/1.") {
            return None;
        }
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        let mut accept: Option<String> = None;
        for header in rest.take_while(|l| !l.is_empty()) {
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("accept") {
                let value = value.trim();
                match accept.as_mut() {
                    Some(all) => {
                        all.push(',');
                        all.push_str(value);
                    }
                    None => accept = Some(value.to_string()),
                }
            }
        }
        Some(Self {
            method,
            path,
            accept,
        })
    }
}

/// A complete response, closing the connection.
struct Response {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    extra: Option<&'static str>,
    body: String,
    length: usize,
}

impl Response {
    fn new(status: u16, reason: &'static str, content_type: &'static str, body: String) -> Self {
        Self {
            status,
            reason,
            content_type,
            extra: None,
            length: body.len(),
            body,
        }
    }

    fn text(status: u16, reason: &'static str, body: &str) -> Self {
        Self::new(status, reason, PLAIN, body.to_string())
    }

    fn with_header(mut self, header: &'static str) -> Self {
        self.extra = Some(header);
        self
    }

    /// The same headers, `Content-Length` included, and no body (`HEAD`).
    fn without_body(mut self) -> Self {
        self.body.clear();
        self
    }

    fn into_bytes(self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status, self.reason, self.content_type, self.length
        );
        if let Some(extra) = self.extra {
            head.push_str(extra);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(self.body.as_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_lines() {
        let get = Request::parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(
            get,
            Some(Request {
                method: "GET",
                path: "/metrics",
                accept: None,
            })
        );
        assert_eq!(Request::parse(b"GET /\n\n"), None);
        assert_eq!(Request::parse(b"GET / SPDY/3\r\n\r\n"), None);
        assert_eq!(Request::parse(b"\xff\xfe / HTTP/1.1\r\n\r\n"), None);
        assert_eq!(Request::parse(b"no newline"), None);
    }

    #[test]
    fn gathers_accept_headers() {
        let head = b"GET /metrics HTTP/1.1\r\nHost: a\r\nACCEPT: text/plain;q=0.5\r\n\
                     X: y\r\naccept:application/openmetrics-text\r\n\r\nAccept: ignored\r\n";
        let request = Request::parse(head).map(|r| r.accept);
        assert_eq!(
            request,
            Some(Some(
                "text/plain;q=0.5,application/openmetrics-text".to_string()
            ))
        );
    }

    #[test]
    fn log_gate_lets_one_line_through_and_counts_the_rest() {
        let gate = LogGate::default();
        assert_eq!(gate.admit(), Some(0));
        assert_eq!(gate.admit(), None);
        assert_eq!(gate.admit(), None);
        let held = gate.0.lock().map(|t| t.held()).unwrap_or_default();
        assert_eq!(held, 2);
    }

    #[test]
    fn head_keeps_the_length() {
        let response = Response::text(200, "OK", "ok\n").without_body();
        let text = String::from_utf8(response.into_bytes()).unwrap_or_default();
        assert!(text.contains("Content-Length: 3\r\n"));
        assert!(text.ends_with("\r\n\r\n"));
    }
}
