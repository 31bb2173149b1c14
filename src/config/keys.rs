//! The keys every table may hold and the TOML type of each, checked before serde reads the
//! file so that every unknown key and every value of the wrong type is reported in one pass.
//!
//! serde stops at the first unknown key or wrong type. So the document is first read into its
//! shape ([`Node`]) and walked against [`ROOT`]: each unknown key is reported with the keys
//! the table allows and the nearest of them ("did you mean"), each value of the wrong type
//! with the type wanted. The offending `key = value` text is then blanked out (overwritten
//! with spaces, line breaks kept, so every other span stays where it was) before serde reads
//! the file, and validation goes on to report every other problem of the rest.
//!
//! [`ROOT`] mirrors the structs of `raw.rs`, which still deny unknown fields: a key missing
//! here is reported as unknown by serde, so the example files in `config/` (all keys set)
//! keep the two in step.

use std::ops::Range;

use toml::Spanned;

use super::error::{ErrorKind, Report};
use super::locate::{Node, Path, Scalar};

/// The TOML type a key takes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ty {
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A string or an integer, told apart by validation.
    StrOrInt,
    /// An array of strings.
    Strs,
    /// A table with these keys.
    Table(&'static [(&'static str, Ty)]),
    /// An array of tables with these keys.
    Tables(&'static [(&'static str, Ty)]),
}

use Ty::{Int, Str, StrOrInt, Strs};

const DAEMON: &[(&str, Ty)] = &[
    ("metrics_listen", Str),
    ("rx_core", Int),
    ("idle", Str),
    ("consumer_queue", Int),
    ("log_level", Str),
    ("log_format", Str),
    ("state_directory", Str),
];

const SNAPSHOT: &[(&str, Ty)] = &[
    ("kind", Str),
    ("addr", Str),
    ("username", Str),
    ("password", Str),
];

const LINE: &[(&str, Ty)] = &[("group", Str), ("interface", Str), ("source", Str)];

const CHANNEL: &[(&str, Ty)] = &[
    ("name", Str),
    ("group", Str),
    ("interface", Str),
    ("source", Str),
    ("session", StrOrInt),
    ("rerequest", Strs),
    ("snapshot", Ty::Table(SNAPSHOT)),
    ("rcvbuf", Int),
    ("lines", Ty::Tables(LINE)),
];

const RECOVERY: &[(&str, Ty)] = &[
    ("reorder_window", Int),
    ("max_buffered", Int),
    ("held_datagrams", Int),
    ("reorder_delay_us", Int),
    ("request_timeout_ms", Int),
    ("max_request_count", Int),
    ("retry_budget", Int),
    ("requests_per_sec", Int),
    ("max_replay", Int),
    ("reset_threshold", Int),
    ("session_confirm", Int),
    ("snapshot_timeout_ms", Int),
    ("gap_policy", Str),
    ("gap_deadline_ms", Int),
    ("arbitration_window_us", Int),
    ("line_down_ms", Int),
];

const VENUE: &[(&str, Ty)] = &[
    ("name", Str),
    ("kind", Str),
    ("start", Str),
    ("channel", Ty::Tables(CHANNEL)),
    ("recovery", Ty::Table(RECOVERY)),
    ("market", Str),
    ("ws_url", Str),
    ("rest_url", Str),
    ("symbols", Strs),
    ("depth_limit", Int),
    ("update_speed", Str),
    ("weight_budget_per_min", Int),
    ("silence_timeout_ms", Int),
    ("ws_max_age_secs", Int),
    ("resolve_timeout_ms", Int),
    ("connect_timeout_ms", Int),
    ("tls_timeout_ms", Int),
    ("upgrade_timeout_ms", Int),
    ("ping_interval_ms", Int),
    ("healthy_after_secs", Int),
    ("connect_budget", Int),
    ("connect_budget_window_secs", Int),
    ("connections", Int),
    ("relink_timeout_ms", Int),
    ("rotate_timeout_ms", Int),
];

const SINK: &[(&str, Ty)] = &[
    ("kind", Str),
    ("path", Str),
    ("client_queue", Int),
    ("history_bytes", Int),
    ("rotate_bytes", Int),
    ("rotate_secs", Int),
    ("keep", Int),
    ("mode", Int),
    ("group", Str),
    ("size_bytes", Int),
    ("url", Str),
    ("stream", Str),
    ("subject_prefix", Str),
    ("duplicate_window_secs", Int),
    ("max_age_secs", Int),
    ("max_pending", Int),
    ("instance", Str),
    ("creds", Str),
    ("tls_ca", Str),
    ("tls_cert", Str),
    ("tls_key", Str),
];

/// The top of the file.
pub(super) const ROOT: &[(&str, Ty)] = &[
    ("daemon", Ty::Table(DAEMON)),
    ("venue", Ty::Tables(VENUE)),
    ("sink", Ty::Tables(SINK)),
];

/// Walks the document against [`ROOT`], reports every unknown key and wrong type, and
/// returns the text with those entries blanked out.
pub(super) fn check(tree: &Node, report: &mut Report<'_>) -> String {
    let mut blanks = Vec::new();
    table(tree, ROOT, &Path::root(), report, &mut blanks);
    let mut bytes = report.source.text.as_bytes().to_vec();
    for range in blanks {
        blank(&mut bytes, range);
    }
    // Whole characters (spans start and end on character boundaries) were overwritten with
    // ASCII spaces: the text stays UTF-8.
    String::from_utf8(bytes).unwrap_or_else(|_| report.source.text.to_owned())
}

fn table(
    node: &Node,
    keys: &'static [(&'static str, Ty)],
    path: &Path,
    report: &mut Report<'_>,
    blanks: &mut Vec<Range<usize>>,
) {
    let Node::Table(entries) = node else {
        return;
    };
    for (key, value) in entries {
        let name = key.get_ref().as_str();
        let here = path.key(name);
        let Some((_, ty)) = keys.iter().find(|(k, _)| *k == name) else {
            let allowed: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
            let quoted: Vec<String> = allowed.iter().map(|k| format!("`{k}`")).collect();
            let found = format!("unknown key `{name}`");
            let expected = format!("one of {}", quoted.join(", "));
            report.push(ErrorKind::UnknownKey, &key.span(), &here, found, expected);
            if let Some(near) = suggest(name, &allowed) {
                report.help(format!("did you mean `{near}`?"));
                // The key meant is not also reported missing.
                report.blanked(&path.key(near));
            }
            entry(report, key, value, &here, blanks);
            continue;
        };
        match (ty, value.get_ref()) {
            (Ty::Str, Node::Scalar(Scalar::String))
            | (Ty::Int, Node::Scalar(Scalar::Integer))
            | (Ty::StrOrInt, Node::Scalar(Scalar::String | Scalar::Integer)) => {}
            (Ty::Strs, Node::Array(items))
                if items
                    .iter()
                    .all(|i| matches!(i.get_ref(), Node::Scalar(Scalar::String))) => {}
            (Ty::Table(sub), node @ Node::Table(_)) => table(node, sub, &here, report, blanks),
            (Ty::Tables(sub), Node::Array(items))
                if items.iter().all(|i| matches!(i.get_ref(), Node::Table(_))) =>
            {
                for (index, item) in items.iter().enumerate() {
                    table(item.get_ref(), sub, &here.index(index), report, blanks);
                }
            }
            (ty, node) => {
                let quoted = report.quote(&value.span());
                let found = format!("{quoted} is {}", type_name(node));
                report.push(
                    ErrorKind::WrongType,
                    &value.span(),
                    &here,
                    found,
                    wanted(*ty),
                );
                entry(report, key, value, &here, blanks);
            }
        }
    }
}

/// Marks a reported `key = value` for blanking when it is written that way (not as a
/// `[table]` header, which serde then reports instead), and records its path as reported.
fn entry(
    report: &mut Report<'_>,
    key: &Spanned<String>,
    value: &Spanned<Node>,
    path: &Path,
    blanks: &mut Vec<Range<usize>>,
) {
    let (key_span, value_span) = (key.span(), value.span());
    let between = report
        .source
        .text
        .get(key_span.end..value_span.start)
        .unwrap_or("");
    if value_span.start >= key_span.end && between.trim_start().starts_with('=') {
        blanks.push(key_span.start..value_span.end);
        report.blanked(path);
    }
}

/// Overwrites `range` with spaces, keeping line breaks, and the comma that separates the entry
/// from its neighbour in an inline table or array.
fn blank(bytes: &mut [u8], range: Range<usize>) {
    let end = range.end.min(bytes.len());
    let start = range.start.min(end);
    for b in bytes.iter_mut().take(end).skip(start) {
        if *b != b'\n' {
            *b = b' ';
        }
    }
    let after = bytes
        .iter()
        .skip(end)
        .position(|&b| b != b' ' && b != b'\t')
        .map(|i| end + i);
    if let Some(i) = after
        && bytes.get(i) == Some(&b',')
    {
        if let Some(b) = bytes.get_mut(i) {
            *b = b' ';
        }
        return;
    }
    let before = bytes
        .iter()
        .take(start)
        .rposition(|&b| b != b' ' && b != b'\t');
    if let Some(i) = before
        && bytes.get(i) == Some(&b',')
        && let Some(b) = bytes.get_mut(i)
    {
        *b = b' ';
    }
}

fn type_name(node: &Node) -> &'static str {
    match node {
        Node::Table(_) => "a table",
        Node::Array(_) => "an array",
        Node::Scalar(Scalar::String) => "a string",
        Node::Scalar(Scalar::Integer) => "an integer",
        Node::Scalar(Scalar::Float) => "a float",
        Node::Scalar(Scalar::Boolean) => "a boolean",
        Node::Scalar(Scalar::Datetime) => "a date-time",
    }
}

fn wanted(ty: Ty) -> String {
    match ty {
        Ty::Str => "a string",
        Ty::Int => "an integer",
        Ty::StrOrInt => "a string or an integer",
        Ty::Strs => "an array of strings",
        Ty::Table(_) => "a table",
        Ty::Tables(_) => "an array of tables",
    }
    .to_owned()
}

/// The candidate nearest to `word` when it is near enough to be what was meant: at most one
/// edit in three characters (at least one edit), as rustc and cargo suggest.
pub(super) fn suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (distance(&word.to_lowercase(), c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance between `a` and `b` (insertions, deletions, substitutions and swaps of two
/// neighbouring characters, each one edit).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut rows = vec![0usize; (a.len() + 1) * width];
    let at = |i: usize, j: usize| i * width + j;
    for i in 0..=a.len() {
        if let Some(cell) = rows.get_mut(at(i, 0)) {
            *cell = i;
        }
    }
    for j in 0..=b.len() {
        if let Some(cell) = rows.get_mut(at(0, j)) {
            *cell = j;
        }
    }
    let get = |rows: &[usize], i: usize, j: usize| rows.get(at(i, j)).copied().unwrap_or(0);
    for (i, ca) in a.iter().enumerate() {
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let mut best = (get(&rows, i, j + 1) + 1)
                .min(get(&rows, i + 1, j) + 1)
                .min(get(&rows, i, j) + cost);
            if i > 0 && j > 0 && a.get(i - 1) == Some(cb) && b.get(j - 1) == Some(ca) {
                best = best.min(get(&rows, i - 1, j - 1) + 1);
            }
            if let Some(cell) = rows.get_mut(at(i + 1, j + 1)) {
                *cell = best;
            }
        }
    }
    get(&rows, a.len(), b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_near_misses_only() {
        let keys = ["name", "group", "interface", "rerequest", "snapshot"];
        assert_eq!(suggest("nmae", &keys), Some("name"));
        assert_eq!(suggest("gropu", &keys), Some("group"));
        assert_eq!(suggest("re_request", &keys), Some("rerequest"));
        assert_eq!(suggest("SNAPSHOT", &keys), Some("snapshot"));
        assert_eq!(suggest("colour", &keys), None);
        assert_eq!(suggest("x", &keys), None);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
    }

    #[test]
    fn blanking_keeps_offsets_and_inline_tables_valid() {
        let text = "a = { x = 1, bad = \"é\" }\nb = [\n 1,\n 2]\nc = 3\n";
        let mut bytes = text.as_bytes().to_vec();
        let bad = text.find("bad").unwrap();
        blank(&mut bytes, bad..bad + "bad = \"é\"".len());
        let b = text.find("b =").unwrap();
        blank(&mut bytes, b..text.find(" 2]").unwrap() + 3);
        let out = String::from_utf8(bytes).unwrap();
        assert_eq!(out.len(), text.len());
        assert_eq!(out.find("c = 3"), text.find("c = 3"));
        let value: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(value.len(), 2, "{out}");
        assert!(value["a"].as_table().unwrap().contains_key("x"));
    }

    #[test]
    fn root_mirrors_the_example_files() {
        // Every key of every example file is in the schema (serde checks the other way).
        for file in [
            "demo",
            "moldudp64",
            "iex-tp",
            "binance-spot",
            "binance-usdm",
        ] {
            let path = format!("{}/config/{file}.toml", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let tree = Node::parse(&text).unwrap();
            let source = super::super::locate::Source {
                file: &path,
                text: &text,
            };
            let mut report = Report::new(source);
            let blanked = check(&tree, &mut report);
            assert_eq!(blanked, text, "{path}: nothing reported");
        }
    }
}
