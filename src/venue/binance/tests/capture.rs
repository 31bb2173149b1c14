//! Recorded Binance sessions (hftbacktest and cryptofeed formats) and a driver that replays
//! one through a session the way the I/O shell would.

use crate::sequencer::StreamState;
use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use serde::Deserialize;

use super::super::{BinanceSession, BinanceSpec, Market, SnapshotRequest, SnapshotResult};
use super::{Ids, Sink};

/// One step of a recorded (or edited) session.
#[derive(Debug, Clone)]
pub(crate) enum Input {
    /// A WebSocket text frame received at `t`.
    Frame { t: u64, bytes: Vec<u8> },
    /// A REST snapshot of `symbol` received at `t` for the request `path`.
    Snapshot {
        t: u64,
        symbol: String,
        path: Option<String>,
        body: Vec<u8>,
    },
    /// The connection dropped at `t`.
    Disconnect { t: u64 },
    /// A new connection opened at `t`.
    Connect { t: u64 },
}

impl Input {
    pub(crate) fn time(&self) -> u64 {
        match *self {
            Self::Frame { t, .. }
            | Self::Snapshot { t, .. }
            | Self::Disconnect { t }
            | Self::Connect { t } => t,
        }
    }
}

/// A recorded session.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    pub(crate) name: String,
    pub(crate) market: Market,
    /// Lowercase symbols with a depth stream, in the order their snapshots were recorded.
    pub(crate) symbols: Vec<String>,
    pub(crate) inputs: Vec<Input>,
}

/// The folder of the Binance recordings, or `None` (with a message) when it is absent.
pub(crate) fn captures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures/binance");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipping: ../shared/captures not found");
        None
    }
}

/// `1633998512.0633569` as nanoseconds.
fn seconds_ns(text: &str) -> u64 {
    let (secs, frac) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
    let mut digits: String = frac.chars().take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    secs.parse::<u64>().unwrap() * 1_000_000_000 + digits.parse::<u64>().unwrap()
}

fn market_of_host(url: &str) -> Market {
    if url.contains("dstream") || url.contains("dapi") {
        Market::Coinm
    } else if url.contains("fstream") || url.contains("fapi") {
        Market::Usdm
    } else {
        Market::Spot
    }
}

/// An hftbacktest recording: gzip lines `<local_recv_ns> <json>`, snapshots inline.
pub(crate) fn load_hft(path: &Path) -> Capture {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let market = match name.split('_').next() {
        Some("spot") => Market::Spot,
        Some("usdm") => Market::Usdm,
        _ => Market::Coinm,
    };
    let reader = BufReader::new(GzDecoder::new(fs::File::open(path).unwrap()));
    let mut inputs = Vec::new();
    let mut symbol = String::new();
    for line in reader.lines() {
        let line = line.unwrap();
        let Some((t, json)) = line.split_once(' ') else {
            continue;
        };
        let t: u64 = t.parse().unwrap();
        if json.starts_with("{\"lastUpdateId\"") {
            inputs.push(Input::Snapshot {
                t,
                symbol: symbol.clone(),
                path: None,
                body: json.as_bytes().to_vec(),
            });
            continue;
        }
        if symbol.is_empty()
            && let Some(rest) = json.strip_prefix("{\"stream\":\"")
            && let Some((name, kind)) = rest.split_once('@')
            && kind.starts_with("depth")
        {
            symbol = name.to_owned();
        }
        inputs.push(Input::Frame {
            t,
            bytes: json.as_bytes().to_vec(),
        });
    }
    Capture {
        name,
        market,
        symbols: vec![symbol],
        inputs,
    }
}

/// A cryptofeed recording: `<prefix>.ws.1.0` and `<prefix>.http.0.0`, merged by time.
pub(crate) fn load_cryptofeed(dir: &Path, prefix: &str) -> Capture {
    let ws = fs::read_to_string(dir.join(format!("{prefix}.ws.1.0"))).unwrap();
    let http = fs::read_to_string(dir.join(format!("{prefix}.http.0.0"))).unwrap();
    let mut lines = ws.lines();
    let url = lines.next().unwrap_or_default();
    let market = market_of_host(url);
    let mut inputs: Vec<Input> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(t, json)| Input::Frame {
            t: seconds_ns(t),
            bytes: json.as_bytes().to_vec(),
        })
        .collect();
    let mut symbols = Vec::new();
    for line in http.lines() {
        let Some((url, rest)) = line.split_once(" -> ") else {
            continue;
        };
        let (t, json) = rest.split_once(": ").unwrap();
        let query = url.split_once("symbol=").unwrap().1;
        let symbol = query.split('&').next().unwrap().to_ascii_lowercase();
        let path = url.find("/api/").or_else(|| url.find("/fapi/"));
        let path = path
            .or_else(|| url.find("/dapi/"))
            .map(|i| url[i..].to_owned());
        symbols.push(symbol.clone());
        inputs.push(Input::Snapshot {
            t: seconds_ns(t),
            symbol,
            path,
            body: json.as_bytes().to_vec(),
        });
    }
    inputs.sort_by_key(Input::time);
    Capture {
        name: prefix.to_owned(),
        market,
        symbols,
        inputs,
    }
}

#[derive(Deserialize)]
struct Wrapper {
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    e: Option<String>,
    s: Option<String>,
    #[serde(rename = "U")]
    first: Option<u64>,
    #[serde(rename = "u")]
    last: Option<u64>,
    pu: Option<u64>,
}

/// The symbol and ids of a depth event frame, read with serde.
pub(crate) fn depth_ids(frame: &[u8]) -> Option<(String, Ids)> {
    let data = serde_json::from_slice::<Wrapper>(frame).ok()?.data?;
    if data.e.as_deref() != Some("depthUpdate") {
        return None;
    }
    let ids = Ids {
        first: data.first?,
        last: data.last?,
        prev: data.pu,
    };
    Some((data.s?.to_ascii_lowercase(), ids))
}

/// The `data` object of a combined-stream frame, as bytes.
pub(crate) fn data_bytes(frame: &[u8]) -> Vec<u8> {
    let key = b"\"data\":";
    let at = frame.windows(key.len()).position(|w| w == key).unwrap();
    let end = frame.iter().rposition(|&b| b == b'}').unwrap();
    frame[at + key.len()..end].to_vec()
}

/// One depth event as fed to the session.
#[derive(Debug, Clone)]
pub(crate) struct Rec {
    pub(crate) ids: Ids,
    pub(crate) frame: Vec<u8>,
}

/// How the driver answers one snapshot request.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    Body(Vec<u8>),
    Status(u16, Option<u64>),
    Failed,
}

/// Replays inputs through a session as the I/O shell would.
pub(crate) struct Driver {
    pub(crate) session: BinanceSession,
    pub(crate) sink: Sink,
    /// A recorded snapshot that arrived before it was asked for.
    recorded: Vec<Option<Vec<u8>>>,
    used_recorded: Vec<bool>,
    outstanding: Vec<bool>,
    /// Answers to give to the next requests of each symbol instead of the recording.
    pub(crate) overrides: Vec<VecDeque<Answer>>,
    /// Answer requests after the recorded one with a snapshot at the newest event's `u`.
    pub(crate) synthetic: bool,
    /// Depth events per symbol, in the order fed.
    pub(crate) events: Vec<Vec<Rec>>,
    /// Snapshot bodies delivered per symbol: (events fed before it, lastUpdateId).
    pub(crate) delivered: Vec<Vec<(usize, u64)>>,
    /// Requests made, with their time.
    pub(crate) requests: Vec<(u64, SnapshotRequest)>,
}

impl Driver {
    pub(crate) fn new(spec: BinanceSpec) -> Self {
        let n = spec.symbols.len();
        Self {
            session: BinanceSession::new(spec).unwrap(),
            sink: Sink::default(),
            recorded: vec![None; n],
            used_recorded: vec![false; n],
            outstanding: vec![false; n],
            overrides: vec![VecDeque::new(); n],
            synthetic: false,
            events: vec![Vec::new(); n],
            delivered: vec![Vec::new(); n],
            requests: Vec::new(),
        }
    }

    /// A spec for replaying `capture`: every symbol may fetch at once, so each recorded
    /// snapshot is answered at its recorded time.
    pub(crate) fn spec_for(capture: &Capture) -> BinanceSpec {
        let mut spec = BinanceSpec::new(capture.market, capture.symbols.clone());
        spec.stream_base = 10;
        spec.max_inflight = capture.symbols.len();
        spec.snapshot_timeout_ns = 600_000_000_000;
        spec.max_pending = 4096;
        spec.pending_bytes = 8 << 20;
        spec
    }

    pub(crate) fn run(&mut self, inputs: &[Input]) {
        for input in inputs {
            self.step(input);
        }
    }

    pub(crate) fn step(&mut self, input: &Input) {
        match input {
            Input::Frame { t, bytes } => {
                let symbol = depth_ids(bytes)
                    .and_then(|(s, ids)| Some((self.session.symbol_index(&s)?, ids)));
                if let Some((s, ids)) = symbol {
                    let rec = Rec {
                        ids,
                        frame: bytes.clone(),
                    };
                    self.events[s].push(rec);
                }
                self.session.on_text(*t, *t, bytes, &mut self.sink);
                if let Some((s, ids)) = symbol
                    && self.synthetic
                    && self.outstanding[s]
                    && self.used_recorded[s]
                    && self.session.state(s) == StreamState::ResetRequired
                {
                    let body = super::snapshot_body(ids.last);
                    self.deliver(*t, s, Answer::Body(body));
                }
            }
            Input::Snapshot {
                t, symbol, body, ..
            } => {
                let s = self.session.symbol_index(symbol).unwrap();
                if !self.used_recorded[s] {
                    self.used_recorded[s] = true;
                    if self.outstanding[s] {
                        self.deliver(*t, s, Answer::Body(body.clone()));
                    } else {
                        self.recorded[s] = Some(body.clone());
                    }
                }
            }
            Input::Disconnect { t } => self.session.on_disconnected(*t, &mut self.sink),
            Input::Connect { t } => self.session.on_connected(*t),
        }
        self.poll(input.time());
    }

    fn poll(&mut self, t: u64) {
        if self.session.poll_timeout().is_some_and(|d| d <= t) {
            self.session.handle_timeout(t, &mut self.sink);
        }
        while let Some(request) = self.session.poll_snapshot(t) {
            let s = request.symbol;
            self.requests.push((t, request));
            self.outstanding[s] = true;
            if let Some(answer) = self.overrides[s].pop_front() {
                self.deliver(t, s, answer);
            } else if let Some(body) = self.recorded[s].take() {
                self.deliver(t, s, Answer::Body(body));
            }
        }
    }

    fn deliver(&mut self, t: u64, s: usize, answer: Answer) {
        self.outstanding[s] = false;
        let result = match &answer {
            Answer::Body(body) => {
                #[derive(Deserialize)]
                struct Snap {
                    #[serde(rename = "lastUpdateId")]
                    l: u64,
                }
                if let Ok(snap) = serde_json::from_slice::<Snap>(body) {
                    self.delivered[s].push((self.events[s].len(), snap.l));
                }
                SnapshotResult::Body(body)
            }
            Answer::Status(code, retry) => SnapshotResult::Status {
                code: *code,
                retry_after_secs: *retry,
            },
            Answer::Failed => SnapshotResult::Failed,
        };
        self.session.on_snapshot(t, s, result, &mut self.sink);
    }
}
