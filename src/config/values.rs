//! Value types that can only hold what the configuration allows.
//!
//! Each type checks its invariant in its constructor, so a value that exists is a valid one: a
//! [`PowerOfTwo`] is a power of two, a [`MulticastGroup`] is a multicast address with a port.

use std::fmt;
use std::net::SocketAddrV4;

/// Declares a fieldless enum whose values are written in the file as fixed keywords.
macro_rules! keyword_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $keyword:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        #[allow(dead_code, reason = "a private keyword enum may not need every accessor")]
        impl $name {
            /// Every keyword the file may use for this setting, in declaration order.
            $vis const KEYWORDS: &'static [&'static str] = &[$($keyword),+];

            /// Reads a keyword as written in the file.
            $vis fn from_keyword(keyword: &str) -> Option<Self> {
                match keyword {
                    $($keyword => Some(Self::$variant),)+
                    _ => None,
                }
            }

            /// The keyword that stands for this value in the file.
            $vis fn keyword(self) -> &'static str {
                match self {
                    $(Self::$variant => $keyword,)+
                }
            }
        }
    };
}

pub(super) use keyword_enum;

/// A power of two, used for ring and queue sizes so an index is a mask away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PowerOfTwo(usize);

impl PowerOfTwo {
    /// Returns `None` unless `n` is a power of two (1 counts as 2^0).
    pub fn new(n: usize) -> Option<Self> {
        n.is_power_of_two().then_some(Self(n))
    }

    /// 2^`exp`, for defaults written as constants; `exp` must be below `usize::BITS`.
    pub(super) const fn pow2(exp: u32) -> Self {
        Self(1 << exp)
    }

    /// The size itself.
    pub fn get(self) -> usize {
        self.0
    }

    /// `size - 1`: the mask that turns a sequence number into a slot index.
    pub fn mask(self) -> usize {
        self.0 - 1
    }
}

/// A venue or channel name: 1 to 64 characters of `[a-z0-9_-]`, safe in metric labels and paths.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

impl Name {
    /// The longest name accepted.
    pub const MAX_LEN: usize = 64;

    /// Returns `None` unless `name` is 1 to 64 characters of lowercase ASCII letters, digits,
    /// `_` and `-`.
    pub fn new(name: &str) -> Option<Self> {
        let ok = (1..=Self::MAX_LEN).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        ok.then(|| Self(name.to_owned()))
    }

    /// The name as written in the file.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Binance symbol in the lowercase form the stream names use, such as `btcusdt`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Symbol(String);

impl Symbol {
    /// Returns `None` unless `symbol` is non-empty lowercase `[a-z0-9_]`.
    pub fn new(symbol: &str) -> Option<Self> {
        let ok = !symbol.is_empty()
            && symbol
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        ok.then(|| Self(symbol.to_owned()))
    }

    /// The lowercase form used in stream names (`btcusdt@depth@100ms`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The uppercase form the REST API takes (`symbol=BTCUSDT`).
    pub fn to_rest(&self) -> String {
        self.0.to_ascii_uppercase()
    }
}

/// A multicast group address (224.0.0.0/4) with a non-zero port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MulticastGroup(SocketAddrV4);

impl MulticastGroup {
    /// Returns `None` unless the address is multicast and the port is not 0.
    pub fn new(addr: SocketAddrV4) -> Option<Self> {
        (addr.ip().is_multicast() && addr.port() != 0).then_some(Self(addr))
    }

    /// The group and port to join and bind.
    pub fn addr(self) -> SocketAddrV4 {
        self.0
    }
}

/// A MoldUDP64 session name: up to 10 printable ASCII characters, space-padded as on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MoldSession([u8; 10]);

impl MoldSession {
    /// Returns `None` unless `session` is 1 to 10 printable ASCII characters.
    pub fn new(session: &str) -> Option<Self> {
        let ok = (1..=10).contains(&session.len())
            && session.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
        if !ok {
            return None;
        }
        let mut bytes = [b' '; 10];
        bytes
            .get_mut(..session.len())?
            .copy_from_slice(session.as_bytes());
        Some(Self(bytes))
    }

    /// The 10 bytes as they appear in a packet header.
    pub fn as_bytes(&self) -> &[u8; 10] {
        &self.0
    }

    /// The name without its padding.
    pub fn as_str(&self) -> &str {
        // The constructor admits ASCII only, so the bytes are valid UTF-8.
        std::str::from_utf8(&self.0).map_or("", str::trim_end)
    }
}

impl fmt::Debug for MoldSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MoldSession({:?})", self.as_str())
    }
}

/// An IEX-TP session id, the 32-bit number in every segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IexSession(pub u32);

/// SoupBinTCP login credentials; `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SoupLogin {
    username: String,
    password: String,
}

impl SoupLogin {
    /// Returns `None` unless the username has at most 6 and the password at most 10 printable
    /// ASCII characters (the protocol pads both with spaces).
    pub fn new(username: &str, password: &str) -> Option<Self> {
        let fits = |s: &str, max: usize| s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic());
        (fits(username, 6) && fits(password, 10)).then(|| Self {
            username: username.to_owned(),
            password: password.to_owned(),
        })
    }

    /// The username, unpadded.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password, unpadded.
    pub fn password(&self) -> &str {
        &self.password
    }
}

impl fmt::Debug for SoupLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoupLogin")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// A URL whose scheme was checked: `ws`/`wss` for streams, `http`/`https` for REST.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Url {
    text: String,
    tls: bool,
    host: std::ops::Range<usize>,
}

impl Url {
    /// Parses `text` if its scheme is `plain` or `secure` and a host follows `://`.
    pub fn new(text: &str, plain: &str, secure: &str) -> Option<Self> {
        let (scheme, rest) = text.split_once("://")?;
        let tls = if scheme == secure {
            true
        } else if scheme == plain {
            false
        } else {
            return None;
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host_len = if authority.starts_with('[') {
            authority.find(']')? + 1
        } else {
            authority.rfind(':').unwrap_or(authority.len())
        };
        let start = scheme.len() + 3;
        let ok = host_len > 0 && !text.contains(char::is_whitespace);
        ok.then(|| Self {
            text: text.to_owned(),
            tls,
            host: start..start + host_len,
        })
    }

    /// The whole URL as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the scheme asks for TLS (`wss`, `https`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The host part, without port; an IPv6 literal keeps its brackets.
    pub fn host(&self) -> &str {
        &self.text[self.host.clone()]
    }
}

/// Depth of a Binance REST order-book snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DepthLimit(u16);

impl DepthLimit {
    /// The limits the depth endpoints accept (5000 on spot only).
    pub const ALLOWED: [u16; 8] = [5, 10, 20, 50, 100, 500, 1000, 5000];

    /// Returns `None` unless `limit` is one of [`DepthLimit::ALLOWED`].
    pub fn new(limit: u16) -> Option<Self> {
        Self::ALLOWED.contains(&limit).then_some(Self(limit))
    }

    /// The number of price levels per side.
    pub fn get(self) -> u16 {
        self.0
    }
}
