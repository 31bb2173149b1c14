//! Positions in the file: byte offsets to line and column, and spans to key paths.
//!
//! Validation knows the key path of every value it checks. serde's errors carry only a span, so
//! the path is found by reading the document a second time into a tree of spanned keys and
//! values ([`Node`]) and picking the smallest entry that covers the span. A file that does not
//! even parse as TOML has no tree; its path comes from the nearest table header and key above
//! the error instead.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

use super::error::Position;

/// A key path as printed in errors: `venue[0].channel[1].group`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Path(String);

impl Path {
    /// The document root, an empty path.
    pub(super) fn root() -> Self {
        Self::default()
    }

    /// This path followed by a table key.
    pub(super) fn key(&self, key: &str) -> Self {
        if self.0.is_empty() {
            Self(key.to_owned())
        } else {
            Self(format!("{}.{key}", self.0))
        }
    }

    /// This path followed by an array index.
    pub(super) fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// The path as text.
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The text of a file with its name, to turn spans into positions and quotes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Source<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
}

impl Source<'_> {
    /// The 1-based line and column (in characters) of a byte offset.
    pub(super) fn position(&self, offset: usize) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Position {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }

    /// The value at `span` as written, on one line and cut short if long.
    pub(super) fn quote(&self, span: &Range<usize>) -> String {
        const MAX: usize = 60;
        let text = self.text.get(span.clone()).unwrap_or("");
        let line = text.lines().next().unwrap_or("").trim_end();
        if line.chars().count() > MAX || line.len() < text.trim_end().len() {
            let cut: String = line.chars().take(MAX).collect();
            format!("{cut}…")
        } else {
            line.to_owned()
        }
    }

    /// The key path of the value or key at `span`.
    pub(super) fn path_at(&self, span: &Range<usize>) -> Path {
        match Node::parse(self.text) {
            Ok(tree) => {
                let mut best = None;
                tree.search(&Path::root(), span, &mut best);
                best.map(|(_, path)| path).unwrap_or_default()
            }
            Err(_) => self.path_from_headers(span.start),
        }
    }

    /// The path from the last table header above `offset` and the key on its line.
    fn path_from_headers(&self, offset: usize) -> Path {
        let mut arrays: HashMap<String, usize> = HashMap::new();
        let mut table = Path::root();
        let mut line_start = 0;
        for line in self.text.split_inclusive('\n') {
            let here = line_start..line_start + line.len();
            line_start = here.end;
            let trimmed = line.trim();
            let header = table_header(trimmed);
            if let Some((name, true)) = &header {
                *arrays.entry(name.clone()).or_insert(0) += 1;
                let nested = format!("{name}.");
                arrays.retain(|k, _| !k.starts_with(&nested));
            }
            if let Some((name, _)) = &header {
                table = Path::root();
                let mut prefix = String::new();
                for part in name.split('.').map(str::trim) {
                    prefix = if prefix.is_empty() {
                        part.to_owned()
                    } else {
                        format!("{prefix}.{part}")
                    };
                    table = table.key(part);
                    if let Some(&count) = arrays.get(&prefix) {
                        table = table.index(count - 1);
                    }
                }
            }
            if here.contains(&offset) || here.end == offset && offset == self.text.len() {
                return match (header, trimmed.split_once('=')) {
                    (None, Some((key, _))) if !trimmed.starts_with('#') => table.key(key.trim()),
                    _ => table,
                };
            }
        }
        table
    }
}

/// The name of a `[table]` or `[[array]]` header line, and whether it is an array element.
fn table_header(line: &str) -> Option<(String, bool)> {
    let (inner, close, array) = match line.strip_prefix("[[") {
        Some(inner) => (inner, "]]", true),
        None => (line.strip_prefix('[')?, "]", false),
    };
    let (name, rest) = inner.split_once(close)?;
    let rest = rest.trim_start();
    (rest.is_empty() || rest.starts_with('#')).then(|| (name.trim().to_owned(), array))
}

/// A parsed document reduced to its shape: tables and arrays with spanned keys and values.
#[derive(Debug)]
pub(super) enum Node {
    /// A table, its keys in file order.
    Table(Vec<(Spanned<String>, Spanned<Node>)>),
    /// An array.
    Array(Vec<Spanned<Node>>),
    /// Any other value, with its TOML type.
    Scalar(Scalar),
}

/// The TOML type of a value that is neither a table nor an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalar {
    /// A string.
    String,
    /// An integer.
    Integer,
    /// A float.
    Float,
    /// A boolean.
    Boolean,
    /// A date, a time or both.
    Datetime,
}

/// The key under which the TOML deserializer hands over a date-time as a one-entry map.
const DATETIME_KEY: &str = "$__toml_private_datetime";

/// The best candidate so far: the length of its span and its path.
type Best = Option<(usize, Path)>;

impl Node {
    /// The shape of a whole document, or the parser's error.
    pub(super) fn parse(text: &str) -> Result<Node, toml::de::Error> {
        toml::from_str(text)
    }

    /// Records in `best` the smallest key or value under `self` whose span covers `span`.
    fn search(&self, path: &Path, span: &Range<usize>, best: &mut Best) {
        let covers = |outer: &Range<usize>| outer.start <= span.start && span.end <= outer.end;
        let offer = |outer: &Range<usize>, path: Path, best: &mut Best| {
            let len = outer.end - outer.start;
            if covers(outer) && best.as_ref().is_none_or(|(l, _)| len <= *l) {
                *best = Some((len, path));
            }
        };
        match self {
            Node::Table(entries) => {
                for (key, value) in entries {
                    let path = path.key(key.get_ref());
                    offer(&value.span(), path.clone(), best);
                    offer(&key.span(), path.clone(), best);
                    value.get_ref().search(&path, span, best);
                }
            }
            Node::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    let path = path.index(index);
                    offer(&item.span(), path.clone(), best);
                    item.get_ref().search(&path, span, best);
                }
            }
            Node::Scalar(_) => {}
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Scalar(Scalar::Boolean))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Scalar(Scalar::Integer))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Scalar(Scalar::Integer))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Scalar(Scalar::Float))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Scalar(Scalar::String))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            if key.get_ref() == DATETIME_KEY {
                let _: de::IgnoredAny = map.next_value()?;
                return Ok(Node::Scalar(Scalar::Datetime));
            }
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Table(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
}
