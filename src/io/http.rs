//! The blocking HTTP client of REST depth snapshots, on `ureq` with rustls; it runs on
//! the [`SnapshotFetcher`](super::fetch::SnapshotFetcher) thread, never on a receive
//! thread.
//!
//! One [`HttpClient`] per fetcher thread keeps its connections alive between snapshots,
//! asks for gzip and decodes it, follows up to [`MAX_REDIRECTS`] redirects, goes through
//! the proxy of `HTTPS_PROXY`, `HTTP_PROXY` or `ALL_PROXY` (and honours `NO_PROXY`) when
//! one is set, and trusts the system's CA bundle (`SSL_CERT_FILE`, or Debian's
//! `/etc/ssl/certs/ca-certificates.crt`) when there is one, Mozilla's roots otherwise.
//! Every exchange, name resolution included, is bounded by one timeout; a body is at
//! most [`MAX_BODY`] bytes after decompression. A failure says why.

use std::time::Duration;

use ureq::Agent;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};

use super::tls::{Endpoint, Scheme, TlsError};

/// Largest response body accepted (after decompression).
pub const MAX_BODY: usize = 16 << 20;

/// Redirects followed at most.
pub const MAX_REDIRECTS: u32 = 5;

/// Errors of [`HttpClient::get`] and of the snapshot fetcher.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The base URL is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The base URL is not `http://` or `https://`.
    #[error("not an HTTP URL: {0}")]
    NotHttp(String),
    /// The timeout ran out (resolving, connecting, or waiting for the answer).
    #[error("HTTP request timed out ({0})")]
    Timeout(String),
    /// The request failed: resolution, connect, TLS, a malformed answer, too many
    /// redirects, a body over the limit. The client's own words.
    #[error("HTTP request failed: {0}")]
    Request(String),
    /// The fetcher's request queue is full.
    #[error("snapshot request queue full")]
    QueueFull,
    /// The fetcher's thread has stopped.
    #[error("snapshot fetcher stopped")]
    Stopped,
    /// The fetcher's thread could not start.
    #[error("snapshot fetcher thread: {0}")]
    Thread(std::io::Error),
}

impl From<ureq::Error> for HttpError {
    fn from(e: ureq::Error) -> Self {
        match e {
            ureq::Error::Timeout(t) => Self::Timeout(t.to_string()),
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                Self::Timeout(io.to_string())
            }
            other => Self::Request(other.to_string()),
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
    /// The body, decoded.
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

/// A client for one base URL; see the [module documentation](self).
pub struct HttpClient {
    agent: Agent,
    base: String,
}

/// The CAs of the bundle at `path` as roots, if it holds any.
fn bundle_roots(path: &std::path::Path) -> Option<RootCerts> {
    let certs: Vec<_> = crate::io::tls::bundle_certificates(path)
        .iter()
        .map(|der| ureq::tls::Certificate::from_der(der).to_owned())
        .collect();
    (!certs.is_empty()).then(|| RootCerts::new_with_certs(&certs))
}

impl HttpClient {
    /// A client for `url_base` (`http://host:port` or `https://host`, optionally with a
    /// path prefix), each exchange bounded by `timeout`.
    ///
    /// # Errors
    ///
    /// The base URL is not a usable `http(s)://` URL.
    pub fn new(url_base: &str, timeout: Duration) -> Result<Self, HttpError> {
        let bundle = crate::io::tls::trusted_bundle();
        Self::build(url_base, timeout, ureq::Proxy::try_from_env(), &bundle)
    }

    fn build(
        url_base: &str,
        timeout: Duration,
        proxy: Option<ureq::Proxy>,
        bundle: &std::path::Path,
    ) -> Result<Self, HttpError> {
        let endpoint = Endpoint::parse(url_base)?;
        if !matches!(endpoint.scheme, Scheme::Http | Scheme::Https) {
            return Err(HttpError::NotHttp(url_base.to_owned()));
        }
        let roots = bundle_roots(bundle).unwrap_or(RootCerts::WebPki);
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(roots)
            .build();
        let config = Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(MAX_REDIRECTS)
            .user_agent(concat!("gapless/", env!("CARGO_PKG_VERSION")))
            .accept("application/json")
            .proxy(proxy)
            .tls_config(tls)
            .max_idle_connections_per_host(2)
            .build();
        Ok(Self {
            agent: config.into(),
            base: url_base.trim_end_matches('/').to_owned(),
        })
    }

    /// The same, through the proxy at `proxy` (`http://host:port`) whatever the
    /// environment says.
    ///
    /// # Errors
    ///
    /// The base URL or the proxy URL is unusable.
    #[cfg(test)]
    pub fn with_proxy(url_base: &str, timeout: Duration, proxy: &str) -> Result<Self, HttpError> {
        let bundle = crate::io::tls::trusted_bundle();
        Self::build(url_base, timeout, Some(ureq::Proxy::new(proxy)?), &bundle)
    }

    /// The same, trusting only the CAs of the PEM bundle at `bundle` (Mozilla's roots
    /// if it holds none), with no proxy.
    ///
    /// # Errors
    ///
    /// The base URL is unusable.
    #[cfg(test)]
    pub fn with_bundle(
        url_base: &str,
        timeout: Duration,
        bundle: &std::path::Path,
    ) -> Result<Self, HttpError> {
        Self::build(url_base, timeout, None, bundle)
    }

    /// GETs `path_and_query` below the base URL.
    ///
    /// # Errors
    ///
    /// An [`HttpError`] that says why no answer came; an answer with any status is `Ok`.
    pub fn get(&self, path_and_query: &str) -> Result<HttpResponse, HttpError> {
        let url = match path_and_query.strip_prefix('/') {
            Some(rest) => format!("{}/{rest}", self.base),
            None => format!("{}/{path_and_query}", self.base),
        };
        let mut response = self.agent.get(&url).call()?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_owned())
        };
        let retry_after_secs = header("retry-after").and_then(|v| v.parse().ok());
        let used_weight = header("x-mbx-used-weight-1m").and_then(|v| v.parse().ok());
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY as u64)
            .read_to_vec()?;
        Ok(HttpResponse {
            status,
            retry_after_secs,
            used_weight,
            body,
        })
    }
}

/// GETs `path_and_query` from `url_base` with a client of its own, within `timeout`.
///
/// # Errors
///
/// As [`HttpClient::new`] and [`HttpClient::get`].
#[cfg(test)]
pub fn http_get(
    url_base: &str,
    path_and_query: &str,
    timeout: Duration,
) -> Result<HttpResponse, HttpError> {
    HttpClient::new(url_base, timeout)?.get(path_and_query)
}
