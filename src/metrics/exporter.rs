//! The exporter thread: a minimal HTTP/1.1 server on a std [`TcpListener`].
//!
//! | request | response |
//! | --- | --- |
//! | `GET /metrics` | 200, the OpenMetrics text exposition of the [`Registry`] |
//! | `GET /healthz` | 200 while the rx loop marked itself alive within the registry's threshold, 503 otherwise |
//! | `GET` anything else | 404 |
//! | another method | 405 |
//! | not HTTP | 400 |
//!
//! `HEAD` is answered like `GET`, without a body. Every response closes the
//! connection. Requests are served one at a time on the exporter's own
//! thread, with 1 s read and write timeouts, so a stuck scraper delays the
//! next scrape by at most that and never touches the rx thread. The listener
//! is polled every 20 ms, which bounds how long [`ExporterHandle::stop`]
//! takes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::metrics::{Registry, unix_now_ns};

/// How long the thread sleeps when no connection is waiting.
const ACCEPT_POLL: Duration = Duration::from_millis(20);
/// Read and write timeout of a connection, and the most a request head may
/// take to arrive.
const IO_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest request head accepted.
const MAX_HEAD: usize = 8 * 1024;
/// Content type of the exposition.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

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

/// Serves a [`Registry`] over HTTP.
#[derive(Debug)]
pub struct Exporter;

impl Exporter {
    /// Binds `listen` and serves `registry` on a thread of its own until
    /// the handle is stopped or dropped. Port 0 picks a free port; see
    /// [`ExporterHandle::local_addr`].
    ///
    /// # Errors
    ///
    /// [`ExporterError::Bind`] when the address is taken or not local,
    /// [`ExporterError::Setup`] when the thread cannot start.
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
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let server = Server {
            listener,
            registry,
            stop: Arc::clone(&stop),
            served: Arc::clone(&served),
        };
        let thread = thread::Builder::new()
            .name("gapless-metrics".into())
            .spawn(move || server.run())?;
        Ok(ExporterHandle {
            local_addr,
            stop,
            served,
            thread: Some(thread),
        })
    }
}

/// The running exporter; stopping or dropping it ends the thread.
#[derive(Debug)]
pub struct ExporterHandle {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl ExporterHandle {
    /// The address the exporter listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Requests answered so far, whatever their status.
    pub fn requests_served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Stops the thread and waits for it: at most one poll interval, plus
    /// the request being served, if any.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
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

struct Server {
    listener: TcpListener,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
}

impl Server {
    fn run(self) {
        while !self.stop.load(Ordering::Acquire) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    // A connection that fails mid-way concerns that scraper
                    // alone; the next one is served as usual.
                    if self.serve(stream).is_ok() {
                        self.served.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Nothing waiting, or out of descriptors for a moment: wait
                // one poll interval either way.
                Err(_) => thread::sleep(ACCEPT_POLL),
            }
        }
    }

    fn serve(&self, mut stream: TcpStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let response = match read_head(&mut stream)? {
            Some(head) => self.respond(&head),
            None => Response::text(400, "Bad Request", "malformed request\n"),
        };
        stream.write_all(&response.into_bytes())?;
        stream.flush()?;
        // The peer may already be gone; the response was handed over.
        let _ = stream.shutdown(Shutdown::Write);
        Ok(())
    }

    fn respond(&self, head: &[u8]) -> Response {
        let Some(request) = RequestLine::parse(head) else {
            return Response::text(400, "Bad Request", "malformed request\n");
        };
        let head_only = request.method == "HEAD";
        if request.method != "GET" && !head_only {
            return Response::text(405, "Method Not Allowed", "only GET and HEAD\n")
                .with_header("Allow: GET, HEAD");
        }
        let response = match request.path {
            "/metrics" => match self.registry.encode() {
                Ok(text) => Response::new(200, "OK", OPENMETRICS, text),
                Err(_) => Response::text(500, "Internal Server Error", "encoding failed\n"),
            },
            "/healthz" => self.health(),
            _ => Response::text(404, "Not Found", "not found\n"),
        };
        if head_only {
            response.without_body()
        } else {
            response
        }
    }

    fn health(&self) -> Response {
        let now = unix_now_ns();
        let last = self.registry.process().last_alive_ns();
        if self.registry.is_alive(now) {
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
}

/// Reads up to the blank line ending the request head. `None` when the
/// peer closed first or the head is too long; an error on timeout.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let deadline = Instant::now() + IO_TIMEOUT;
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

/// The parts of a request line the exporter routes on.
#[derive(Debug, PartialEq, Eq)]
struct RequestLine<'a> {
    method: &'a str,
    /// The target without its query string.
    path: &'a str,
}

impl<'a> RequestLine<'a> {
    fn parse(head: &'a [u8]) -> Option<Self> {
        let end = head.iter().position(|&b| b == b'\n')?;
        let line = std::str::from_utf8(head.get(..end)?)
            .ok()?
            .trim_end_matches('\r');
        let mut parts = line.split(' ');
        let method = parts.next().filter(|m| !m.is_empty())?;
        let target = parts.next()?;
        let version = parts.next()?;
        if parts.next().is_some() || !version.starts_with("HTTP/1.") {
            return None;
        }
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        Some(Self { method, path })
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
        let get = RequestLine::parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(
            get,
            Some(RequestLine {
                method: "GET",
                path: "/metrics"
            })
        );
        assert_eq!(RequestLine::parse(b"GET /\n\n"), None);
        assert_eq!(RequestLine::parse(b"GET / SPDY/3\r\n\r\n"), None);
        assert_eq!(RequestLine::parse(b"\xff\xfe / HTTP/1.1\r\n\r\n"), None);
        assert_eq!(RequestLine::parse(b"no newline"), None);
    }

    #[test]
    fn head_keeps_the_length() {
        let response = Response::text(200, "OK", "ok\n").without_body();
        let text = String::from_utf8(response.into_bytes()).unwrap_or_default();
        assert!(text.contains("Content-Length: 3\r\n"));
        assert!(text.ends_with("\r\n\r\n"));
    }
}
