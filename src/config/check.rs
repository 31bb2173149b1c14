//! Checks of single values, each reporting what it found and what the key allows.
//!
//! Every check returns `None` exactly when it has reported an error, so a caller can run all its
//! checks first and combine the results afterwards: one file run reports every problem.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use toml::Spanned;

use super::error::{ErrorKind, Report};
use super::locate::Path;
use super::raw::Field;
use super::values::{MulticastGroup, Name, PowerOfTwo};

/// What a group key allows, with an example.
pub(super) const GROUP: &str = "a multicast IPv4 address and port such as \"233.54.12.111:26477\"";

/// What a unicast server key allows, with an example.
pub(super) const SERVER: &str = "a unicast IPv4 address and port such as \"10.1.9.1:18000\"";

/// What a name key allows.
pub(super) const NAME: &str = "1 to 64 characters of a-z, 0-9, '_' and '-'";

impl Report<'_> {
    /// The key's value, or a missing-key error pointing at the header of `table`.
    pub(super) fn required<'f, T>(
        &mut self,
        field: &'f Field<T>,
        table: &Range<usize>,
        path: &Path,
        expected: &str,
    ) -> Option<&'f Spanned<T>> {
        // A key reported with the wrong type was left out of what serde read: not missing.
        if field.is_none() && !self.was_blanked(path) {
            let key = path.as_str().rsplit('.').next().unwrap_or("");
            let found = format!("required key `{key}` is missing");
            self.push(ErrorKind::MissingKey, table, path, found, expected);
        }
        field.as_ref()
    }

    /// An integer within `range`, converted to the type that holds it.
    pub(super) fn int<T: TryFrom<i64>>(
        &mut self,
        field: &Spanned<i64>,
        path: &Path,
        range: RangeInclusive<i64>,
    ) -> Option<T> {
        let value = *field.get_ref();
        if !range.contains(&value) {
            let found = format!("{} is out of range", self.quote(&field.span()));
            let expected = format!("an integer from {} to {}", range.start(), range.end());
            self.push(ErrorKind::OutOfRange, &field.span(), path, found, expected);
            return None;
        }
        T::try_from(value).ok()
    }

    /// Like [`Report::int`], with `default` for an absent key.
    pub(super) fn int_or<T: TryFrom<i64>>(
        &mut self,
        field: &Field<i64>,
        path: &Path,
        range: RangeInclusive<i64>,
        default: T,
    ) -> Option<T> {
        match field {
            Some(field) => self.int(field, path, range),
            None => Some(default),
        }
    }

    /// A whole number of `unit`s (`Duration::from_secs`, `from_millis`, ...) within `range`,
    /// or `default` for an absent key.
    pub(super) fn duration_or(
        &mut self,
        field: &Field<i64>,
        path: &Path,
        range: RangeInclusive<i64>,
        unit: fn(u64) -> Duration,
        default: Duration,
    ) -> Option<Duration> {
        match field {
            Some(field) => self.int(field, path, range).map(unit),
            None => Some(default),
        }
    }

    /// A power of two within `range`, or `default` for an absent key.
    pub(super) fn power_of_two(
        &mut self,
        field: &Field<i64>,
        path: &Path,
        range: RangeInclusive<usize>,
        default: PowerOfTwo,
    ) -> Option<PowerOfTwo> {
        let Some(field) = field else {
            return Some(default);
        };
        let expected = format!(
            "a power of two from {} to {}, such as {}",
            range.start(),
            range.end(),
            default.get()
        );
        let value = usize::try_from(*field.get_ref()).ok();
        let quoted = self.quote(&field.span());
        match value.and_then(PowerOfTwo::new) {
            None if value.is_some_and(|v| v > 0) => {
                let found = format!("{quoted} is not a power of two");
                self.push(
                    ErrorKind::NotPowerOfTwo,
                    &field.span(),
                    path,
                    found,
                    expected,
                );
                None
            }
            Some(size) if range.contains(&size.get()) => Some(size),
            _ => {
                let found = format!("{quoted} is out of range");
                self.push(ErrorKind::OutOfRange, &field.span(), path, found, expected);
                None
            }
        }
    }

    /// One of a fixed set of keywords, parsed by `parse`.
    pub(super) fn keyword<E>(
        &mut self,
        field: &Spanned<String>,
        path: &Path,
        keywords: &[&str],
        parse: fn(&str) -> Option<E>,
    ) -> Option<E> {
        let value = parse(field.get_ref());
        if value.is_none() {
            let found = format!("{} is not an allowed value", self.quote(&field.span()));
            self.push(
                ErrorKind::InvalidValue,
                &field.span(),
                path,
                found,
                one_of(keywords),
            );
            if let Some(near) = super::keys::suggest(field.get_ref(), keywords) {
                self.help(format!("did you mean \"{near}\"?"));
            }
        }
        value
    }

    /// A required keyword: missing (expecting one of `keywords`) or not one of them are both
    /// reported.
    pub(super) fn required_keyword<E>(
        &mut self,
        field: &Field<String>,
        table: &Range<usize>,
        path: &Path,
        keywords: &[&str],
        parse: fn(&str) -> Option<E>,
    ) -> Option<E> {
        let field = self.required(field, table, path, &one_of(keywords))?;
        self.keyword(field, path, keywords, parse)
    }

    /// A venue or channel name.
    pub(super) fn name(&mut self, field: &Spanned<String>, path: &Path) -> Option<Name> {
        let name = Name::new(field.get_ref());
        if name.is_none() {
            let found = format!("{} is not a valid name", self.quote(&field.span()));
            self.push(ErrorKind::InvalidValue, &field.span(), path, found, NAME);
        }
        name
    }

    /// An IPv4 address and a non-zero port.
    pub(super) fn socket_v4(
        &mut self,
        field: &Spanned<String>,
        path: &Path,
        expected: &str,
    ) -> Option<SocketAddrV4> {
        let text = field.get_ref().as_str();
        let quoted = self.quote(&field.span());
        let found = match text.parse::<SocketAddrV4>() {
            Ok(addr) if addr.port() != 0 => return Some(addr),
            Ok(_) => format!("{quoted} has port 0"),
            Err(_) if text.parse::<Ipv4Addr>().is_ok() => {
                format!("{quoted} is not an address with a port")
            }
            Err(_) if text.parse::<SocketAddr>().is_ok() => format!("{quoted} is not IPv4"),
            Err(_) => format!("{quoted} is not an IPv4 address and port"),
        };
        self.push(ErrorKind::BadAddress, &field.span(), path, found, expected);
        None
    }

    /// A multicast group and port.
    pub(super) fn group(&mut self, field: &Spanned<String>, path: &Path) -> Option<MulticastGroup> {
        let addr = self.socket_v4(field, path, GROUP)?;
        let group = MulticastGroup::new(addr);
        if group.is_none() {
            let found = format!("{} is not a multicast address", self.quote(&field.span()));
            self.push(ErrorKind::NotMulticast, &field.span(), path, found, GROUP);
        }
        group
    }

    /// A unicast server address and port.
    pub(super) fn server(&mut self, field: &Spanned<String>, path: &Path) -> Option<SocketAddrV4> {
        let addr = self.socket_v4(field, path, SERVER)?;
        self.unicast(*addr.ip(), &field.span(), path, SERVER)
            .map(|_| addr)
    }

    /// An IPv4 address without a port.
    pub(super) fn ipv4(
        &mut self,
        field: &Spanned<String>,
        path: &Path,
        expected: &str,
    ) -> Option<Ipv4Addr> {
        let text = field.get_ref().as_str();
        let quoted = self.quote(&field.span());
        let found = match text.parse::<Ipv4Addr>() {
            Ok(ip) => return Some(ip),
            Err(_) if text.parse::<SocketAddrV4>().is_ok() => format!("{quoted} has a port"),
            Err(_) => format!("{quoted} is not an IPv4 address"),
        };
        self.push(ErrorKind::BadAddress, &field.span(), path, found, expected);
        None
    }

    /// `ip` itself if it can be the address of one host.
    pub(super) fn unicast(
        &mut self,
        ip: Ipv4Addr,
        span: &Range<usize>,
        path: &Path,
        expected: &str,
    ) -> Option<Ipv4Addr> {
        let problem = if ip.is_multicast() {
            "a multicast address"
        } else if ip.is_unspecified() {
            "the unspecified address"
        } else if ip.is_broadcast() {
            "the broadcast address"
        } else {
            return Some(ip);
        };
        let found = format!("{} is {problem}", self.quote(span));
        self.push(ErrorKind::BadAddress, span, path, found, expected);
        None
    }

    /// Records `key` as used at `span`; reports it if an earlier entry already used it.
    pub(super) fn unique<K: Eq + Hash>(
        &mut self,
        seen: &mut HashMap<K, Range<usize>>,
        key: K,
        span: &Range<usize>,
        path: &Path,
        what: &str,
    ) {
        if let Some(first) = seen.get(&key) {
            let at = self.source.position(first.start);
            let found = format!(
                "{what} {} is already used at line {}, column {}",
                self.quote(span),
                at.line,
                at.column
            );
            let expected = format!("each {what} to be used once");
            self.push(ErrorKind::Duplicate, span, path, found, expected);
        } else {
            seen.insert(key, span.clone());
        }
    }

    /// Reports each key in `keys` as belonging to `owner` rather than to this `kind` of table.
    pub(super) fn foreign_keys(
        &mut self,
        keys: &[(&'static str, Range<usize>)],
        table: &Path,
        owner: &str,
        kind: &str,
        allowed: &str,
    ) {
        for (key, span) in keys {
            let found = format!("`{key}` belongs to {owner}, not to {kind}");
            let expected = format!("only the keys of {kind}: {allowed}");
            self.push(ErrorKind::WrongKind, span, &table.key(key), found, expected);
        }
    }
}

/// `one of "a", "b", "c"`.
pub(super) fn one_of(keywords: &[&str]) -> String {
    let quoted: Vec<String> = keywords.iter().map(|k| format!("\"{k}\"")).collect();
    format!("one of {}", quoted.join(", "))
}
