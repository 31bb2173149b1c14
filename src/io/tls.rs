//! Endpoints parsed from `ws://`, `wss://`, `http://` and `https://` URLs, and
//! the rustls client side shared by the WebSocket and HTTP clients.
//!
//! [`MaybeTls`] wraps any byte stream, blocking (`std::net::TcpStream`) or
//! non-blocking (`mio::net::TcpStream`), in TLS when the endpoint asks for it.
//! With a non-blocking socket every call returns `WouldBlock` instead of
//! waiting, and the TLS handshake advances on each read or write, so an event
//! loop drives it like any other I/O.

use std::io::{self, Read, Write};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// Errors of URL parsing and TLS set-up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The URL could not be parsed.
    #[error("bad URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The host is neither a DNS name nor an IP address usable for TLS.
    #[error("invalid TLS server name {0:?}")]
    InvalidServerName(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The scheme of an endpoint URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `ws://`, plain WebSocket.
    Ws,
    /// `wss://`, WebSocket over TLS.
    Wss,
    /// `http://`, plain HTTP.
    Http,
    /// `https://`, HTTP over TLS.
    Https,
}

impl Scheme {
    /// Whether the scheme runs over TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, Self::Wss | Self::Https)
    }

    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        if self.is_tls() { 443 } else { 80 }
    }
}

/// A URL split into what a client needs to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The scheme.
    pub scheme: Scheme,
    /// Host name or IP address, without the brackets of an IPv6 literal.
    pub host: String,
    /// TCP port, explicit or the scheme's default.
    pub port: u16,
    /// Path and query, starting with `/` (just `/` when the URL has none).
    pub path: String,
}

impl Endpoint {
    /// Parses `scheme://host[:port][/path][?query]`; IPv6 hosts in brackets.
    pub fn parse(url: &str) -> Result<Self, TlsError> {
        let bad = |reason| TlsError::BadUrl {
            url: url.to_owned(),
            reason,
        };
        let (scheme_text, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = match scheme_text.to_ascii_lowercase().as_str() {
            "ws" => Scheme::Ws,
            "wss" => Scheme::Wss,
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return Err(bad("unsupported scheme")),
        };
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(split);
        let path = match tail.chars().next() {
            None => "/".to_owned(),
            Some('?') => format!("/{tail}"),
            Some(_) => tail.to_owned(),
        };
        if authority.contains('@') {
            return Err(bad("credentials in URLs are not supported"));
        }
        let (host, port_text) = if let Some(inner) = authority.strip_prefix('[') {
            let (host, after) = inner.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            match after {
                "" => (host, None),
                _ => (
                    host,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad("junk after ']'"))?,
                    ),
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        let port = match port_text {
            None => scheme.default_port(),
            Some(text) => text.parse::<u16>().map_err(|_| bad("bad port"))?,
        };
        Ok(Self {
            scheme,
            host: host.to_owned(),
            port,
            path,
        })
    }

    /// Whether the endpoint runs over TLS.
    pub fn is_tls(&self) -> bool {
        self.scheme.is_tls()
    }

    /// The `Host` header value: the host, bracketed if IPv6, with the port
    /// unless it is the scheme's default.
    #[cfg(test)]
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// Resolves the host (a literal address needs no resolver); blocking, so for tests
    /// only (the live loop resolves through [`crate::io::resolve`]).
    #[cfg(test)]
    pub fn socket_addrs(&self) -> io::Result<Vec<std::net::SocketAddr>> {
        use std::net::ToSocketAddrs;
        Ok((self.host.as_str(), self.port).to_socket_addrs()?.collect())
    }
}

/// Where the system's CA bundle is looked for when `SSL_CERT_FILE` is not set (Debian's
/// `ca-certificates`, where `update-ca-certificates` adds a private CA).
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The CA certificates (DER) of the PEM bundle at `path`; empty if it cannot be read or
/// holds none.
pub fn bundle_certificates(path: &std::path::Path) -> Vec<Vec<u8>> {
    let Ok(pem) = std::fs::read(path) else {
        return Vec::new();
    };
    ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c.der().to_vec()),
            _ => None,
        })
        .collect()
}

/// The bundle servers are verified against: `SSL_CERT_FILE` if set, else the system's.
pub fn trusted_bundle() -> std::path::PathBuf {
    std::env::var_os("SSL_CERT_FILE").map_or_else(|| SYSTEM_BUNDLE.into(), Into::into)
}

/// The process-wide client configuration: ring provider, TLS 1.2 and 1.3, no client
/// certificate, and as roots the CAs of [`trusted_bundle`] (so a private CA added to
/// it is trusted, for WebSocket and REST alike), or Mozilla's (webpki-roots) where
/// that bundle is missing or empty.
pub fn client_config() -> Result<Arc<ClientConfig>, TlsError> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(Arc::clone(config));
    }
    let mut roots = RootCertStore::empty();
    // A certificate rustls cannot use is left out; the rest of the bundle still counts.
    let (_added, _unusable) = roots.add_parsable_certificates(
        bundle_certificates(&trusted_bundle())
            .into_iter()
            .map(rustls::pki_types::CertificateDer::from),
    );
    if roots.is_empty() {
        roots = webpki_roots::TLS_SERVER_ROOTS.iter().cloned().collect();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::clone(CONFIG.get_or_init(|| Arc::new(config))))
}

/// The name the server certificate must match: a DNS name or an IP address.
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(host.to_owned()).map_err(|_| TlsError::InvalidServerName(host.to_owned()))
}

/// A byte stream, in TLS or not.
#[derive(Debug)]
pub enum MaybeTls<S: Read + Write> {
    /// Bytes go to the socket as they are.
    Plain(S),
    /// Bytes are encrypted by rustls first.
    Tls(Box<StreamOwned<ClientConnection, S>>),
}

impl<S: Read + Write> MaybeTls<S> {
    /// Wraps `socket` in TLS for `endpoint.host` if the endpoint's scheme says
    /// so. The handshake itself runs on the first reads and writes.
    pub fn new(socket: S, endpoint: &Endpoint) -> Result<Self, TlsError> {
        if !endpoint.is_tls() {
            return Ok(Self::Plain(socket));
        }
        Self::with_config(socket, endpoint, client_config()?)
    }

    /// Like [`MaybeTls::new`], verifying the server with `config` (a private CA, say)
    /// instead of the public roots.
    pub fn with_config(
        socket: S,
        endpoint: &Endpoint,
        config: Arc<ClientConfig>,
    ) -> Result<Self, TlsError> {
        if !endpoint.is_tls() {
            return Ok(Self::Plain(socket));
        }
        let connection = ClientConnection::new(config, server_name(&endpoint.host)?)?;
        Ok(Self::Tls(Box::new(StreamOwned::new(connection, socket))))
    }

    /// The socket underneath.
    pub fn socket(&self) -> &S {
        match self {
            Self::Plain(socket) => socket,
            Self::Tls(stream) => stream.get_ref(),
        }
    }

    /// The socket underneath, mutably (for registration with a poller).
    pub fn socket_mut(&mut self) -> &mut S {
        match self {
            Self::Plain(socket) => socket,
            Self::Tls(stream) => stream.get_mut(),
        }
    }

    /// Whether the TLS handshake is still running (always false for plain).
    pub fn is_handshaking(&self) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Tls(stream) => stream.conn.is_handshaking(),
        }
    }
}

impl<S: Read + Write> Read for MaybeTls<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(socket) => socket.read(buf),
            Self::Tls(stream) => stream.read(buf),
        }
    }
}

impl<S: Read + Write> Write for MaybeTls<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(socket) => socket.write(buf),
            Self::Tls(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(socket) => socket.flush(),
            Self::Tls(stream) => stream.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binance_urls() -> Result<(), TlsError> {
        let e = Endpoint::parse("wss://stream.binance.com:9443/stream?streams=btcusdt@depth")?;
        assert_eq!(e.scheme, Scheme::Wss);
        assert_eq!(e.host, "stream.binance.com");
        assert_eq!(e.port, 9443);
        assert_eq!(e.path, "/stream?streams=btcusdt@depth");
        assert_eq!(e.authority(), "stream.binance.com:9443");
        let e = Endpoint::parse("https://api.binance.com")?;
        assert_eq!((e.port, e.path.as_str(), e.is_tls()), (443, "/", true));
        assert_eq!(e.authority(), "api.binance.com");
        let e = Endpoint::parse("ws://127.0.0.1:8080?x=1")?;
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("127.0.0.1", 8080, "/?x=1")
        );
        let e = Endpoint::parse("http://[::1]:81/api")?;
        assert_eq!(
            (e.host.as_str(), e.port, e.authority()),
            ("::1", 81, "[::1]:81".to_owned())
        );
        Ok(())
    }

    #[test]
    fn rejects_bad_urls() {
        for url in [
            "stream.binance.com",
            "ftp://x",
            "ws://:80/",
            "ws://h:99999",
            "ws://[::1",
            "ws://u@h/",
        ] {
            assert!(Endpoint::parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn builds_tls_client_for_names_and_addresses() -> Result<(), TlsError> {
        assert!(client_config().is_ok());
        assert!(server_name("fstream.binance.com").is_ok());
        assert!(server_name("127.0.0.1").is_ok());
        assert!(server_name("bad name!").is_err());
        let endpoint = Endpoint::parse("wss://stream.binance.com/ws")?;
        let stream = MaybeTls::new(io::Cursor::new(Vec::new()), &endpoint)?;
        assert!(stream.is_handshaking());
        let plain = MaybeTls::new(io::Cursor::new(Vec::new()), &Endpoint::parse("ws://h/")?)?;
        assert!(!plain.is_handshaking());
        Ok(())
    }
}
