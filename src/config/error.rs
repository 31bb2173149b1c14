//! Errors of loading a configuration file: where, which key, what was found, what is allowed.

use std::ops::Range;

use thiserror::Error;

use super::locate::{Path, Source};

/// What kind of mistake an error reports, for tools and tests to match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// The text is not valid TOML.
    Syntax,
    /// A key the schema does not have.
    UnknownKey,
    /// A value of the wrong TOML type, such as a string where an integer belongs.
    WrongType,
    /// A required key is absent.
    MissingKey,
    /// A key that belongs to another kind of venue or sink.
    WrongKind,
    /// Not an address and port, not the address family asked for, or port 0.
    BadAddress,
    /// A group address outside 224.0.0.0/4.
    NotMulticast,
    /// A name, symbol, group or path used twice where it must be unique.
    Duplicate,
    /// A number outside its allowed range.
    OutOfRange,
    /// A size that must be a power of two and is not.
    NotPowerOfTwo,
    /// Any other value the key does not allow: an unknown keyword, a malformed name or URL.
    InvalidValue,
    /// A warning, not an error: a channel with no way to recover a gap (neither `rerequest`
    /// nor `snapshot`).
    NoRecovery,
}

/// A 1-based line and column in a file; the column counts characters, not bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// Line number, from 1.
    pub line: usize,
    /// Column number, from 1.
    pub column: usize,
}

/// One problem in a configuration file.
///
/// Displays as `FILE:LINE:COL: KEY.PATH: FOUND; expected ALLOWED`, for instance
/// `config/bad.toml:12:9: venue[0].channel[0].group: "233.54.12.111" is not an address with a
/// port; expected a multicast IPv4 address and port such as "233.54.12.111:26477"`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{file}{}: {}{found}; expected {expected}{}", at(.position), subject(.path), hint(.help))]
pub struct ConfigError {
    /// What kind of mistake this is.
    pub kind: ErrorKind,
    /// The file name as given to [`Config::load`](super::Config::load) or
    /// [`Config::parse`](super::Config::parse).
    pub file: String,
    /// Where in the file; `None` when the file could not be read.
    pub position: Option<Position>,
    /// The key path, such as `venue[0].channel[1].group`; empty when no key applies.
    pub path: String,
    /// What the file holds, quoted as written where there is a value.
    pub found: String,
    /// What the key allows.
    pub expected: String,
    /// A suggestion, such as `did you mean "yield"?`, for a near miss.
    pub help: Option<String>,
    /// The line of the file the error is on, for a caret under the offending text.
    pub snippet: Option<Snippet>,
}

/// One line of the file, and which characters of it an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// The line as written, without its line break.
    pub text: String,
    /// 1-based character column where the offending text starts.
    pub column: usize,
    /// How many characters of the line it covers, at least 1.
    pub width: usize,
}

fn hint(help: &Option<String>) -> String {
    help.as_ref().map_or_else(String::new, |h| format!("; {h}"))
}

impl ConfigError {
    /// The error as rustc and cargo show theirs: a headline, the file position, the line with
    /// a caret under the offending text and what is expected, and a suggestion if there is
    /// one. `severity` is `error` or `warning`.
    ///
    /// ```text
    /// error: daemon.idle: "bussy-spin" is not an allowed value
    ///   --> gapless.toml:2:8
    ///    |
    ///  2 | idle = "bussy-spin"
    ///    |        ^^^^^^^^^^^^ expected one of "busy-spin", "yield", "block"
    ///    = help: did you mean "busy-spin"?
    /// ```
    pub fn render(&self, severity: &str) -> String {
        let mut out = format!("{severity}: {}{}\n", subject(&self.path), self.found);
        let (Some(position), Some(snippet)) = (self.position, &self.snippet) else {
            out.push_str(&format!("  --> {}\n", self.file));
            out.push_str(&format!("   = expected {}\n", self.expected));
            if let Some(help) = &self.help {
                out.push_str(&format!("   = help: {help}\n"));
            }
            return out;
        };
        let number = position.line.to_string();
        let gutter = " ".repeat(number.len());
        out.push_str(&format!(
            "{gutter}--> {}:{}:{}\n",
            self.file, position.line, position.column
        ));
        out.push_str(&format!("{gutter} |\n"));
        out.push_str(&format!("{number} | {}\n", snippet.text));
        let pad: String = snippet
            .text
            .chars()
            .take(snippet.column.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        out.push_str(&format!(
            "{gutter} | {pad}{} expected {}\n",
            "^".repeat(snippet.width.max(1)),
            self.expected
        ));
        if let Some(help) = &self.help {
            out.push_str(&format!("{gutter} = help: {help}\n"));
        }
        out
    }
}

fn at(position: &Option<Position>) -> String {
    position.map_or_else(String::new, |p| format!(":{}:{}", p.line, p.column))
}

fn subject(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

/// Every problem found in one file, in file order; never empty.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}", lines(.errors))]
pub struct ConfigErrors {
    errors: Vec<ConfigError>,
}

fn lines(errors: &[ConfigError]) -> String {
    let lines: Vec<String> = errors.iter().map(ConfigError::to_string).collect();
    lines.join("\n")
}

impl ConfigErrors {
    /// The errors, in the order of their positions in the file.
    pub fn errors(&self) -> &[ConfigError] {
        &self.errors
    }

    /// How many errors there are, at least one.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Always `false`: a `ConfigErrors` holds at least one error.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Iterates over the errors in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.errors.iter()
    }

    /// Every error as [`ConfigError::render`] shows it, a blank line between them, and a
    /// closing count, as `gapless check-config` prints them.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for error in &self.errors {
            out.push_str(&error.render("error"));
            out.push('\n');
        }
        let file = self.errors.first().map_or("", |e| e.file.as_str());
        let count = self.errors.len();
        let plural = if count == 1 { "" } else { "s" };
        out.push_str(&format!("error: {file}: {count} error{plural}\n"));
        out
    }

    /// An error of a file that could not be read.
    pub(super) fn io(file: &str, error: &std::io::Error) -> Self {
        Self {
            errors: vec![ConfigError {
                kind: ErrorKind::Io,
                file: file.to_owned(),
                position: None,
                path: String::new(),
                found: format!("the file cannot be read ({error})"),
                expected: "a readable UTF-8 TOML file".to_owned(),
                help: None,
                snippet: None,
            }],
        }
    }
}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.into_iter()
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}

/// Collects the errors of one file while it is validated.
pub(super) struct Report<'a> {
    pub(super) source: Source<'a>,
    errors: Vec<(usize, ConfigError)>,
    warnings: Vec<(usize, ConfigError)>,
    /// Paths of entries already reported and blanked out of the text serde reads.
    blanked: Vec<String>,
    /// Byte offset of the start of each line, for positions in a long file.
    line_starts: Vec<usize>,
}

impl<'a> Report<'a> {
    pub(super) fn new(source: Source<'a>) -> Self {
        Self {
            source,
            errors: Vec::new(),
            warnings: Vec::new(),
            blanked: Vec::new(),
            line_starts: std::iter::once(0)
                .chain(source.text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
        }
    }

    /// The position of `offset` and the line it is on, found by bisection.
    fn locate(&self, offset: usize) -> (Position, &'a str) {
        let text = self.source.text;
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let index = self
            .line_starts
            .partition_point(|&start| start <= offset)
            .saturating_sub(1);
        let start = self.line_starts.get(index).copied().unwrap_or(0);
        let end = self.line_starts.get(index + 1).map_or(text.len(), |&e| e);
        let line = text
            .get(start..end)
            .unwrap_or("")
            .trim_end_matches(['\n', '\r']);
        let column = text.get(start..offset).unwrap_or("").chars().count() + 1;
        (
            Position {
                line: index + 1,
                column,
            },
            line,
        )
    }

    /// The line `span` starts on, and the characters of it the span covers.
    fn snippet(&self, span: &Range<usize>) -> (Position, Snippet) {
        let (position, line) = self.locate(span.start);
        let covered = self.source.text.get(span.clone()).unwrap_or("");
        let first = covered.lines().next().unwrap_or("");
        let room = line.chars().count().saturating_sub(position.column - 1);
        let snippet = Snippet {
            text: line.to_owned(),
            column: position.column,
            width: first.chars().count().min(room).max(1),
        };
        (position, snippet)
    }

    /// Adds a suggestion to the error pushed last.
    pub(super) fn help(&mut self, help: String) {
        if let Some((_, error)) = self.errors.last_mut() {
            error.help = Some(help);
        }
    }

    /// Records that the entry at `path` was reported and left out of what serde reads.
    pub(super) fn blanked(&mut self, path: &Path) {
        self.blanked.push(path.as_str().to_owned());
    }

    /// True when the entry at `path` was reported already and left out.
    pub(super) fn was_blanked(&self, path: &Path) -> bool {
        self.blanked.iter().any(|p| p == path.as_str())
    }

    /// Records a warning: the file is valid, but something in it is likely a mistake.
    pub(super) fn warn(
        &mut self,
        kind: ErrorKind,
        span: &Range<usize>,
        path: &Path,
        found: impl Into<String>,
        expected: impl Into<String>,
    ) {
        let warning = self.error(kind, span, path, found.into(), expected.into());
        self.warnings.push((span.start, warning));
    }

    /// The warnings, in file order.
    pub(super) fn take_warnings(&mut self) -> Vec<ConfigError> {
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.sort_by_key(|(offset, _)| *offset);
        warnings.into_iter().map(|(_, w)| w).collect()
    }

    fn error(
        &self,
        kind: ErrorKind,
        span: &Range<usize>,
        path: &Path,
        found: String,
        expected: String,
    ) -> ConfigError {
        let (position, snippet) = self.snippet(span);
        ConfigError {
            kind,
            file: self.source.file.to_owned(),
            position: Some(position),
            path: path.as_str().to_owned(),
            found,
            expected,
            help: None,
            snippet: Some(snippet),
        }
    }

    /// Records an error about the key at `path` whose value (or table) starts at `span`.
    pub(super) fn push(
        &mut self,
        kind: ErrorKind,
        span: &Range<usize>,
        path: &Path,
        found: impl Into<String>,
        expected: impl Into<String>,
    ) {
        let error = self.error(kind, span, path, found.into(), expected.into());
        self.errors.push((span.start, error));
    }

    /// The value at `span` as written in the file.
    pub(super) fn quote(&self, span: &Range<usize>) -> String {
        self.source.quote(span)
    }

    /// `Ok(value)` if nothing was reported, else every error in file order.
    pub(super) fn finish<T>(self, value: Option<T>) -> Result<T, ConfigErrors> {
        match value {
            Some(value) if self.errors.is_empty() => Ok(value),
            _ => Err(self.into_errors()),
        }
    }

    fn into_errors(mut self) -> ConfigErrors {
        if self.errors.is_empty() {
            // Every check that yields `None` reports why; this is a guard, not a path.
            let found = "the file was rejected without a reason";
            self.push(
                ErrorKind::InvalidValue,
                &(0..0),
                &Path::root(),
                found,
                "a reason",
            );
        }
        self.errors.sort_by_key(|(offset, _)| *offset);
        ConfigErrors {
            errors: self.errors.into_iter().map(|(_, e)| e).collect(),
        }
    }

    /// Turns the error serde or the TOML parser stopped at into a located error, unless it
    /// is one already reported from the document's shape.
    pub(super) fn toml(mut self, error: &toml::de::Error) -> ConfigErrors {
        let span = error.span().unwrap_or(0..0);
        let message = error.message().trim();
        let path = self.source.path_at(&span);
        let quoted = self.quote(&span);
        let (kind, path, found, expected) = describe(message, path, &quoted);
        let known = self
            .errors
            .iter()
            .any(|(_, e)| e.kind == kind && e.path == path.as_str());
        if !known {
            self.push(kind, &span, &path, found, expected);
        }
        self.into_errors()
    }
}

/// Rewords a serde or TOML message as kind, path, what was found and what is allowed.
fn describe(message: &str, path: Path, quoted: &str) -> (ErrorKind, Path, String, String) {
    let expectation = |rest: &str| rest.split_once(", expected ").map(|(_, e)| e.to_owned());
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let key = rest.split(',').next().unwrap_or(rest);
        let allowed = expectation(rest).unwrap_or_else(|| "no keys in this table".to_owned());
        return (
            ErrorKind::UnknownKey,
            path,
            format!("unknown key {key}"),
            allowed,
        );
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        let key = rest.trim_matches('`');
        let found = format!("required key `{key}` is missing");
        return (
            ErrorKind::MissingKey,
            path.key(key),
            found,
            "the key to be set".to_owned(),
        );
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        let found_type = match rest.split_whitespace().next().unwrap_or("") {
            "string" => "a string",
            "integer" => "an integer",
            "floating" => "a float",
            "boolean" => "a boolean",
            "sequence" => "an array",
            _ if quoted.starts_with(['{', '[']) => "a table",
            _ => "a date-time",
        };
        let expected = expectation(rest).map_or_else(|| "another type".to_owned(), plain_type);
        return (
            ErrorKind::WrongType,
            path,
            format!("{quoted} is {found_type}"),
            expected,
        );
    }
    if message.starts_with("number too large") || message.starts_with("invalid value: integer") {
        let expected = format!("an integer from {} to {}", i64::MIN, i64::MAX);
        return (
            ErrorKind::OutOfRange,
            path,
            format!("{quoted} is out of range"),
            expected,
        );
    }
    if let Some(duplicate) = message.lines().find(|l| l.starts_with("duplicate key")) {
        let expected = "each key at most once in a table".to_owned();
        return (ErrorKind::Duplicate, path, duplicate.to_owned(), expected);
    }
    let mut lines = message.lines();
    let first = lines.next().unwrap_or("invalid TOML");
    let rest: Vec<&str> = lines.collect();
    let (found, detail) = match first.strip_prefix("expected ") {
        Some(what) if quoted.is_empty() => {
            ("the text here is not valid TOML".to_owned(), Some(what))
        }
        Some(what) => (format!("`{quoted}` is not valid TOML here"), Some(what)),
        None => (
            first.to_owned(),
            rest.first().and_then(|l| l.strip_prefix("expected ")),
        ),
    };
    let expected = match detail {
        Some(what) => what.to_owned(),
        None if rest.is_empty() => "valid TOML (https://toml.io/en/v1.0.0)".to_owned(),
        None => format!("valid TOML ({})", rest.join("; ")),
    };
    (ErrorKind::Syntax, path, found, expected)
}

/// serde's name for a type, in the words of the file format.
fn plain_type(expected: String) -> String {
    match expected.as_str() {
        "i64" | "u64" | "usize" | "u32" | "u16" => "an integer".to_owned(),
        "a sequence" => "an array".to_owned(),
        s if s.starts_with("struct ") || s == "a map" => "a table".to_owned(),
        _ => expected,
    }
}
