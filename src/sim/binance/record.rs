//! Capture files turned into records to replay and snapshots to serve.
//!
//! hftbacktest `*.gz`: `<local_recv_ns> <json>`, the JSON a combined-stream
//! wrapper or an inline REST snapshot (with no symbol in it for spot: it
//! belongs to the depth stream of its file). cryptofeed `*.ws.*`:
//! `<recv_ts>: <json>` after a `<url> <-> <connect_ts>` line; `*.http.*`:
//! `<url> -> <recv_ts>: <json>`, the symbol in the URL. Payloads are kept as
//! recorded: only the wrapper is split off and the ids are read.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use flate2::read::GzDecoder;

use super::SimError;
use super::feed::{Ids, Recorded, ReplayConfig, SymbolState};

/// A record waiting to be replayed.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) t_ns: u64,
    pub(crate) symbol: usize,
    pub(crate) channel: Arc<str>,
    pub(crate) data: String,
    pub(crate) ids: Option<Ids>,
}

/// Loads capture files: the symbols with their snapshots, and the stream
/// records sorted by capture time.
pub(crate) fn load(config: &ReplayConfig) -> Result<(Vec<SymbolState>, Vec<Record>), SimError> {
    let mut loader = Loader::default();
    for path in &config.files {
        loader.file(path, config.max_records.unwrap_or(usize::MAX))?;
    }
    loader.records.sort_by_key(|r| r.t_ns);
    for state in &mut loader.symbols {
        state.snapshots.sort_by_key(|s| s.t_ns);
    }
    for record in &loader.records {
        if let (Some(state), Some(ids)) = (loader.symbols.get_mut(record.symbol), record.ids) {
            state.first_u.get_or_insert(ids.first);
        }
    }
    Ok((loader.symbols, loader.records))
}

#[derive(Default)]
struct Loader {
    symbols: Vec<SymbolState>,
    records: Vec<Record>,
    channels: HashMap<String, Arc<str>>,
}

impl Loader {
    fn symbol(&mut self, lower: &str) -> usize {
        if let Some(i) = self.symbols.iter().position(|s| s.lower == lower) {
            return i;
        }
        let name = lower.to_ascii_uppercase();
        self.symbols.push(SymbolState {
            name,
            lower: lower.to_owned(),
            book: None,
            snapshots: Vec::new(),
            first_u: None,
        });
        self.symbols.len() - 1
    }

    fn file(&mut self, path: &Path, max_records: usize) -> Result<(), SimError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let io_error = |source| SimError::Capture {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_error)?;
        let reader: Box<dyn Read> = if name.ends_with(".gz") {
            Box::new(GzDecoder::new(file))
        } else {
            Box::new(file)
        };
        let (mut last_symbol, mut orphans) = (None, Vec::new());
        let start = self.records.len();
        for (number, line) in BufReader::new(reader).lines().enumerate() {
            let line = line.map_err(io_error)?;
            if line.trim().is_empty() {
                continue;
            }
            let bad = || SimError::CaptureLine {
                path: path.to_owned(),
                line: number + 1,
            };
            let (t_ns, json, url) = if name.ends_with(".gz") {
                let (t, json) = line.split_once(' ').ok_or_else(bad)?;
                (t.parse::<u64>().map_err(|_| bad())?, json, None)
            } else if name.contains(".http.") {
                let (url, rest) = line.split_once(" -> ").ok_or_else(bad)?;
                let (t, json) = rest.split_once(": ").ok_or_else(bad)?;
                (seconds_to_ns(t).ok_or_else(bad)?, json, Some(url))
            } else if name.contains(".ws.") {
                if number == 0 {
                    continue;
                }
                let (t, json) = line.split_once(": ").ok_or_else(bad)?;
                (seconds_to_ns(t).ok_or_else(bad)?, json, None)
            } else {
                return Err(SimError::CaptureFormat(path.to_owned()));
            };
            if let Some((stream, data)) = split_wrapper(json) {
                if self.records.len() - start >= max_records {
                    break;
                }
                let (symbol_lower, rest) = stream.split_once('@').unwrap_or((stream, ""));
                let channel_name = rest.split('@').next().unwrap_or_default();
                let symbol = self.symbol(symbol_lower);
                let channel = Arc::clone(
                    self.channels
                        .entry(channel_name.to_owned())
                        .or_insert_with(|| channel_name.into()),
                );
                let ids = depth_ids(data);
                if ids.is_some() {
                    last_symbol = Some(symbol);
                    if let Some(state) = self.symbols.get_mut(symbol) {
                        state.snapshots.append(&mut orphans);
                    }
                }
                self.records.push(Record {
                    t_ns,
                    symbol,
                    channel,
                    data: data.to_owned(),
                    ids,
                });
            } else if let Some(last_update_id) = find_u64(json, "lastUpdateId") {
                let snapshot = Recorded {
                    t_ns,
                    last_update_id,
                    body: json.to_owned(),
                };
                let named =
                    find_str(json, "symbol").or_else(|| url.and_then(|u| query_value(u, "symbol")));
                let owner = named
                    .map(|s| self.symbol(&s.to_ascii_lowercase()))
                    .or(last_symbol);
                match owner.and_then(|i| self.symbols.get_mut(i)) {
                    Some(state) => state.snapshots.push(snapshot),
                    None => orphans.push(snapshot),
                }
            }
        }
        Ok(())
    }
}

fn seconds_to_ns(text: &str) -> Option<u64> {
    let seconds = text
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)?;
    Some((seconds * 1e9) as u64)
}

/// Splits `{"stream":"<name>","data":<payload>}` without parsing the payload.
pub(crate) fn split_wrapper(json: &str) -> Option<(&str, &str)> {
    let rest = json.trim().strip_prefix("{\"stream\":\"")?;
    let (stream, tail) = rest.split_once("\",\"data\":")?;
    let data = tail.strip_suffix('}')?;
    (!stream.contains('"') && data.starts_with('{')).then_some((stream, data))
}

/// The first `"key":<digits>` in `json`.
pub(crate) fn find_u64(json: &str, key: &str) -> Option<u64> {
    let at = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits = json.get(at..)?;
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits.get(..end)?.parse().ok()
}

/// The first `"key":"<text>"` in `json`.
fn find_str<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let text = json.get(at..)?;
    text.get(..text.find('"')?)
}

/// A query parameter's value, as is.
pub(crate) fn query_value<'a>(url: &'a str, key: &str) -> Option<&'a str> {
    let query = url.split_once('?')?.1;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

/// `U` and `u` of a depth update event.
pub(crate) fn depth_ids(data: &str) -> Option<Ids> {
    if !data.contains("\"e\":\"depthUpdate\"") {
        return None;
    }
    Some(Ids {
        first: find_u64(data, "U")?,
        last: find_u64(data, "u")?,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    #[test]
    fn loads_all_three_formats_merged_by_time() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("binance-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let depth = |u: u64| {
            format!(r#"{{"e":"depthUpdate","E":1,"s":"AB","U":{u},"u":{u},"b":[],"a":[]}}"#)
        };
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        writeln!(
            gz,
            r#"3000000000 {{"stream":"ab@depth@100ms","data":{}}}"#,
            depth(11)
        )?;
        writeln!(
            gz,
            r#"3500000000 {{"lastUpdateId":10,"bids":[],"asks":[]}}"#
        )?;
        writeln!(
            gz,
            r#"4000000000 {{"stream":"ab@trade","data":{{"e":"trade","s":"AB"}}}}"#
        )?;
        std::fs::write(dir.join("x.gz"), gz.finish()?)?;
        let ws = format!(
            "wss://h/stream?streams=cd@depth <-> 1.0\n2.5: {{\"stream\":\"cd@depth\",\"data\":{}}}\n\n",
            depth(7)
        );
        std::fs::write(dir.join("X.ws.1.0"), ws)?;
        let http = "https://h/api/v3/depth?symbol=CD&limit=5 -> 2.0: {\"lastUpdateId\":6,\"bids\":[],\"asks\":[]}\n";
        std::fs::write(dir.join("X.http.0.0"), http)?;
        let files = ["x.gz", "X.ws.1.0", "X.http.0.0"]
            .map(|f| dir.join(f))
            .to_vec();
        let (symbols, records) = load(&ReplayConfig {
            files,
            speed: None,
            max_records: None,
        })?;
        std::fs::remove_dir_all(&dir)?;
        let names: Vec<&str> = symbols.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["AB", "CD"]);
        let order: Vec<(u64, &str)> = records.iter().map(|r| (r.t_ns, &*r.channel)).collect();
        assert_eq!(
            order,
            [
                (2_500_000_000, "depth"),
                (3_000_000_000, "depth"),
                (4_000_000_000, "trade")
            ]
        );
        let ids: Vec<u64> = symbols
            .iter()
            .filter_map(|s| s.snapshots.first().map(|r| r.last_update_id))
            .collect();
        assert_eq!(ids, [10, 6]);
        assert_eq!(
            symbols.iter().map(|s| s.first_u).collect::<Vec<_>>(),
            [Some(11), Some(7)]
        );
        Ok(())
    }

    #[test]
    fn scanners_read_wrappers_and_ids_without_panicking() {
        let line = r#"{"stream":"btcusdt@depth","data":{"e":"depthUpdate","U":5,"u":9,"pu":4}}"#;
        let (stream, data) = split_wrapper(line).unwrap_or_default();
        assert_eq!(stream, "btcusdt@depth");
        assert_eq!(depth_ids(data), Some(Ids { first: 5, last: 9 }));
        assert_eq!(find_u64(data, "pu"), Some(4));
        assert_eq!(query_value("/x?symbol=AB&limit=5", "limit"), Some("5"));
        for junk in [
            "",
            "{",
            r#"{"stream":"a"#,
            r#"{"stream":"a","data":}"#,
            "\u{1F600}",
        ] {
            assert_eq!(split_wrapper(junk), None);
            assert_eq!(find_u64(junk, "u"), None);
        }
        assert_eq!(find_u64(r#"{"u":"#, "u"), None);
    }
}
