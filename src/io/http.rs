//! A small blocking HTTP/1.1 GET client for REST depth snapshots; it runs
//! on the [`SnapshotFetcher`](super::fetch::SnapshotFetcher) thread, never
//! on a receive thread.
//!
//! One request per connection (`Connection: close`), plain TCP or rustls,
//! `Content-Length`, chunked or read-to-end bodies of at most [`MAX_BODY`]
//! bytes. The whole exchange, connect included, is bounded by one timeout
//! (name resolution excepted: it uses the system resolver).

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::tls::{Endpoint, MaybeTls, Scheme, TlsError};

/// Largest response body accepted.
pub const MAX_BODY: usize = 16 << 20;

/// Longest header line or chunk-size line accepted.
const MAX_LINE: usize = 16 << 10;

/// Most header lines accepted.
const MAX_HEADERS: usize = 128;

/// Errors of [`http_get`] and of the snapshot fetcher.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The base URL is unusable, or TLS set-up failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The base URL is not `http://` or `https://`.
    #[error("not an HTTP URL: {0}")]
    NotHttp(String),
    /// Resolving or connecting failed.
    #[error("connect to {endpoint}: {source}")]
    Connect {
        /// `host:port`.
        endpoint: String,
        /// The cause.
        source: io::Error,
    },
    /// The timeout ran out.
    #[error("HTTP request timed out")]
    Timeout,
    /// A socket or TLS error after connecting.
    #[error("HTTP I/O: {0}")]
    Io(io::Error),
    /// The response is not valid HTTP/1.x.
    #[error("malformed HTTP response: {0}")]
    Malformed(&'static str),
    /// The body is larger than allowed.
    #[error("HTTP body larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The fetcher's request queue is full.
    #[error("snapshot request queue full")]
    QueueFull,
    /// The fetcher's thread has stopped.
    #[error("snapshot fetcher stopped")]
    Stopped,
}

impl From<io::Error> for HttpError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Self::Timeout,
            _ => Self::Io(e),
        }
    }
}

/// A response: status, the rate-limit headers Binance sends, and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// `Retry-After` in seconds (sent with 418 and 429).
    pub retry_after_secs: Option<u64>,
    /// `X-MBX-USED-WEIGHT-1M`: request weight used in the current minute.
    pub used_weight: Option<u32>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// The three Binance depth endpoints.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepthApi {
    /// Spot: `/api/v3/depth`.
    Spot,
    /// USD-M futures: `/fapi/v1/depth`.
    UsdM,
    /// COIN-M futures: `/dapi/v1/depth`.
    CoinM,
}

/// `/api/v3/depth?symbol=BTCUSDT&limit=1000` and the futures equivalents.
#[cfg(test)]
pub fn depth_path(api: DepthApi, symbol: &str, limit: u32) -> String {
    let prefix = match api {
        DepthApi::Spot => "/api/v3/depth",
        DepthApi::UsdM => "/fapi/v1/depth",
        DepthApi::CoinM => "/dapi/v1/depth",
    };
    format!(
        "{prefix}?symbol={}&limit={limit}",
        symbol.to_ascii_uppercase()
    )
}

/// GETs `path_and_query` from `url_base` (`http://host:port` or `https://host`,
/// optionally with a path prefix), within `timeout` for the whole exchange.
pub fn http_get(
    url_base: &str,
    path_and_query: &str,
    timeout: Duration,
) -> Result<HttpResponse, HttpError> {
    let now = Instant::now();
    let deadline = now
        .checked_add(timeout)
        .unwrap_or(now + Duration::from_secs(365 * 86_400));
    let endpoint = Endpoint::parse(url_base)?;
    if !matches!(endpoint.scheme, Scheme::Http | Scheme::Https) {
        return Err(HttpError::NotHttp(url_base.to_owned()));
    }
    let path = match (
        endpoint.path.trim_end_matches('/'),
        path_and_query.strip_prefix('/'),
    ) {
        (prefix, Some(rest)) => format!("{prefix}/{rest}"),
        (prefix, None) => format!("{prefix}/{path_and_query}"),
    };
    let socket = connect(&endpoint, deadline)?;
    let mut stream = Bounded {
        inner: MaybeTls::new(socket, &endpoint)?,
        deadline,
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: gapless\r\nAccept: application/json\r\n\
         Accept-Encoding: identity\r\nConnection: close\r\n\r\n",
        endpoint.authority()
    );
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    read_response(&mut stream, MAX_BODY)
}

fn connect(endpoint: &Endpoint, deadline: Instant) -> Result<TcpStream, HttpError> {
    let name = format!("{}:{}", endpoint.host, endpoint.port);
    let fail = |source| HttpError::Connect {
        endpoint: name.clone(),
        source,
    };
    let mut last = io::Error::new(ErrorKind::NotFound, "no address");
    for addr in endpoint.socket_addrs().map_err(fail)? {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(HttpError::Timeout);
        }
        match TcpStream::connect_timeout(&addr, remaining) {
            Ok(socket) => {
                socket.set_nodelay(true).map_err(fail)?;
                return Ok(socket);
            }
            Err(e) => last = e,
        }
    }
    Err(fail(last))
}

/// A stream whose every read and write gets the time left before `deadline`.
struct Bounded {
    inner: MaybeTls<TcpStream>,
    deadline: Instant,
}

impl Bounded {
    fn arm(&self) -> io::Result<()> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(io::Error::new(ErrorKind::TimedOut, "deadline passed"));
        }
        self.inner.socket().set_read_timeout(Some(remaining))?;
        self.inner.socket().set_write_timeout(Some(remaining))
    }
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        self.inner.read(buf)
    }
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.arm()?;
        self.inner.flush()
    }
}

/// Buffered input over a reader, for line and counted reads.
struct Input<'a, R> {
    buf: Vec<u8>,
    pos: usize,
    src: &'a mut R,
}

impl<R: Read> Input<'_, R> {
    fn available(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Reads more; false at end of stream (a TLS peer that closes without
    /// `close_notify` counts as end of stream).
    fn fill(&mut self) -> Result<bool, HttpError> {
        if self.pos >= self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        let start = self.buf.len();
        self.buf.resize(start + 16 * 1024, 0);
        let result = loop {
            let Some(space) = self.buf.get_mut(start..) else {
                break Ok(0);
            };
            match self.src.read(space) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => break Ok(0),
                other => break other,
            }
        };
        let n = result.inspect_err(|_| self.buf.truncate(start))?;
        self.buf.truncate(start + n);
        Ok(n > 0)
    }

    fn line(&mut self) -> Result<String, HttpError> {
        loop {
            let available = self.available();
            if let Some(end) = available.windows(2).position(|w| w == b"\r\n") {
                let line =
                    String::from_utf8_lossy(available.get(..end).unwrap_or_default()).into_owned();
                self.pos += end + 2;
                return Ok(line);
            }
            if available.len() > MAX_LINE {
                return Err(HttpError::Malformed("line too long"));
            }
            if !self.fill()? {
                return Err(HttpError::Malformed("connection closed mid-line"));
            }
        }
    }

    fn take(&mut self, mut n: usize, out: &mut Vec<u8>) -> Result<(), HttpError> {
        while n > 0 {
            if self.available().is_empty() && !self.fill()? {
                return Err(HttpError::Malformed("body shorter than announced"));
            }
            let chunk = self.available();
            let k = n.min(chunk.len());
            out.extend_from_slice(chunk.get(..k).unwrap_or_default());
            self.pos += k;
            n -= k;
        }
        Ok(())
    }

    fn rest(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), HttpError> {
        loop {
            out.extend_from_slice(self.available());
            self.pos = self.buf.len();
            if out.len() > limit {
                return Err(HttpError::BodyTooLarge { limit });
            }
            if !self.fill()? {
                return Ok(());
            }
        }
    }
}

/// Reads a whole HTTP/1.x response from `src`, body at most `limit` bytes.
pub fn read_response<R: Read>(src: &mut R, limit: usize) -> Result<HttpResponse, HttpError> {
    let mut input = Input {
        buf: Vec::with_capacity(16 * 1024),
        pos: 0,
        src,
    };
    let status_line = input.line()?;
    let mut parts = status_line.split_whitespace();
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(HttpError::Malformed("bad status line"));
    }
    let status = parts
        .next()
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|code| (100..1000).contains(code))
        .ok_or(HttpError::Malformed("bad status code"))?;
    let mut response = HttpResponse {
        status,
        retry_after_secs: None,
        used_weight: None,
        body: Vec::new(),
    };
    let (mut length, mut chunked) = (None, false);
    for count in 0.. {
        let line = input.line()?;
        if line.is_empty() {
            break;
        }
        if count >= MAX_HEADERS {
            return Err(HttpError::Malformed("too many headers"));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or(HttpError::Malformed("bad header line"))?;
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| HttpError::Malformed("bad Content-Length"))?,
                );
            }
            "transfer-encoding" => {
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
            }
            "retry-after" => response.retry_after_secs = value.parse().ok(),
            "x-mbx-used-weight-1m" => response.used_weight = value.parse().ok(),
            _ => {}
        }
    }
    let body = &mut response.body;
    if matches!(status, 100..=199 | 204 | 304) {
        return Ok(response);
    }
    if chunked {
        loop {
            let size_line = input.line()?;
            let size_text = size_line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| HttpError::Malformed("bad chunk size"))?;
            if size == 0 {
                while !input.line()?.is_empty() {}
                break;
            }
            if body.len().saturating_add(size) > limit {
                return Err(HttpError::BodyTooLarge { limit });
            }
            input.take(size, body)?;
            if !input.line()?.is_empty() {
                return Err(HttpError::Malformed("chunk not followed by CRLF"));
            }
        }
    } else if let Some(length) = length {
        if length > limit {
            return Err(HttpError::BodyTooLarge { limit });
        }
        body.reserve_exact(length);
        input.take(length, body)?;
    } else {
        input.rest(body, limit)?;
    }
    Ok(response)
}
