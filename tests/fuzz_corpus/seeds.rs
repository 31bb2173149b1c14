//! Seed inputs for the fuzz targets, cut from real captures (`../shared/captures`, skipped
//! when absent) and the project's own (`captures/`, `config/`).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use gapless::capture::{CaptureReader, udp_datagram};
use gapless::protocol::moldudp64::{Packet, Request};
use gapless::protocol::soupbintcp::{Frame, LoginAccepted, encode_end_of_snapshot};
use gapless::publish::wire::{StreamName, encode_cut_off, encode_event, encode_hello};
use gapless::publish::{Event, StreamState};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/captures`, or the folder `GAPLESS_SHARED_CAPTURES` names (a worktree
/// elsewhere than beside `shared`).
fn shared() -> Option<PathBuf> {
    let dir = std::env::var_os("GAPLESS_SHARED_CAPTURES")
        .map_or_else(|| root().join("../shared/captures"), PathBuf::from);
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "{} is absent: seeds from the project's own files only",
            dir.display()
        );
        None
    }
}

/// Collects seeds per target and writes them as numbered files.
#[derive(Default)]
struct Seeds {
    by_target: Vec<(&'static str, Vec<Vec<u8>>)>,
}

impl Seeds {
    fn add(&mut self, target: &'static str, seed: Vec<u8>) {
        match self.by_target.iter_mut().find(|(t, _)| *t == target) {
            Some((_, v)) => v.push(seed),
            None => self.by_target.push((target, vec![seed])),
        }
    }

    fn write(&self, out: &Path) -> Vec<(&'static str, usize)> {
        let mut written = Vec::new();
        for (target, seeds) in &self.by_target {
            let dir = out.join(target);
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in seeds.iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i:05}")), s).unwrap();
            }
            written.push((*target, seeds.len()));
        }
        written
    }
}

/// The UDP payloads of a capture, at most `max`.
fn datagrams(path: &Path, max: usize) -> Vec<Vec<u8>> {
    let mut reader = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(Ok(r)) = reader.next_record() {
        if let Ok(Some(d)) = udp_datagram(r.link, r.data) {
            out.push(d.payload.to_vec());
        }
        if out.len() >= max {
            break;
        }
    }
    out
}

fn pcaps(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            pcaps(&p, out);
        } else if p.extension().is_some_and(|e| e == "pcap") {
            out.push(p);
        }
    }
}

/// A classic little-endian microsecond pcap of Ethernet frames carrying `payloads` as UDP.
fn pcap_of(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&0xA1B2_C3D4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&65_535u32.to_le_bytes());
    f.extend_from_slice(&1u32.to_le_bytes());
    for (i, p) in payloads.iter().enumerate() {
        let frame = ethernet_udp(p);
        f.extend_from_slice(&(1_700_000_000u32 + i as u32).to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        f.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        f.extend_from_slice(&frame);
    }
    f
}

/// A pcapng section with one Ethernet interface and an enhanced packet block per payload.
fn pcapng_of(payloads: &[Vec<u8>]) -> Vec<u8> {
    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let pad = (4 - body.len() % 4) % 4;
        let len = (12 + body.len() + pad) as u32;
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.extend(std::iter::repeat_n(0, pad));
        out.extend_from_slice(&len.to_le_bytes());
    }
    let mut f = Vec::new();
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    block(&mut f, 0x0A0D_0D0A, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&65_535u32.to_le_bytes());
    // if_tsresol = 9 (nanoseconds), then the end of options.
    idb.extend_from_slice(&9u16.to_le_bytes());
    idb.extend_from_slice(&1u16.to_le_bytes());
    idb.extend_from_slice(&[9, 0, 0, 0]);
    idb.extend_from_slice(&[0, 0, 0, 0]);
    block(&mut f, 1, &idb);
    for p in payloads {
        let frame = ethernet_udp(p);
        let mut epb = Vec::new();
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&0x0017_9A4Bu32.to_le_bytes());
        epb.extend_from_slice(&0x1000_0000u32.to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(&frame);
        epb.extend(std::iter::repeat_n(0, (4 - frame.len() % 4) % 4));
        block(&mut f, 6, &epb);
    }
    f
}

/// Ethernet, IPv4 (no options) and UDP around `payload`, from 10.0.0.1 to 233.54.12.111.
fn ethernet_udp(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x01, 0x00, 0x5E, 0x36, 0x0C, 0x6F, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,
    ];
    let total = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 1, 17, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 233, 54, 12, 111]);
    f.extend_from_slice(&26_400u16.to_be_bytes());
    f.extend_from_slice(&26_477u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// A `udp_session` script that replays `datagrams` as raw datagrams, with time passing
/// every few of them.
fn udp_script(flags: u8, tuning: u8, datagrams: &[Vec<u8>]) -> Vec<u8> {
    let mut s = vec![flags, tuning];
    for (i, d) in datagrams.iter().enumerate() {
        s.push(4);
        s.extend_from_slice(&(d.len() as u16).to_be_bytes());
        s.extend_from_slice(d);
        s.push(0);
        if i % 8 == 7 {
            s.extend_from_slice(&[7, 1]);
        }
    }
    s.extend_from_slice(&[7, 3, 9, 0]);
    s
}

/// One line of a Binance capture: a WebSocket frame or a REST snapshot body.
enum Line {
    Frame(Vec<u8>),
    Snapshot(Vec<u8>),
}

/// A snapshot body cut to its first few levels a side, so seeds stay small.
fn short_snapshot(body: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    for side in ["bids", "asks"] {
        if let Some(levels) = v.get_mut(side).and_then(|l| l.as_array_mut()) {
            levels.truncate(4);
        }
    }
    serde_json::to_vec(&v).ok()
}

fn classify(json: &[u8]) -> Line {
    if json.starts_with(b"{\"lastUpdateId\"") {
        Line::Snapshot(short_snapshot(json).unwrap_or_else(|| json.to_vec()))
    } else {
        Line::Frame(json.to_vec())
    }
}

/// hftbacktest: `<ns> <json>` lines, gzip.
fn hftbacktest(path: &Path, max: usize) -> Vec<Line> {
    let file = std::fs::File::open(path).unwrap();
    let reader = BufReader::new(flate2::read::GzDecoder::new(file));
    reader
        .split(b'\n')
        .map_while(Result::ok)
        .filter_map(|l| {
            let at = l.iter().position(|&b| b == b' ')?;
            Some(classify(&l[at + 1..]))
        })
        .take(max)
        .collect()
}

/// cryptofeed: `<ts>: <json>` (WebSocket) and `<url> -> <ts>: <json>` (REST) lines.
fn cryptofeed(path: &Path, max: usize) -> Vec<Line> {
    let mut text = Vec::new();
    std::fs::File::open(path)
        .unwrap()
        .read_to_end(&mut text)
        .unwrap();
    text.split(|&b| b == b'\n')
        .filter_map(|l| {
            let at = l.windows(2).position(|w| w == b": ")?;
            let json = &l[at + 2..];
            json.starts_with(b"{").then(|| classify(json))
        })
        .take(max)
        .collect()
}

/// The project's line format: `<ns> ws <frame>` and `<ns> rest <SYMBOL> <snapshot>`.
fn own_binance(path: &Path, max: usize) -> Vec<Line> {
    let text = std::fs::read(path).unwrap();
    text.split(|&b| b == b'\n')
        .filter_map(|l| {
            let at = l.iter().position(|&b| b == b'{')?;
            Some(classify(&l[at..]))
        })
        .take(max)
        .collect()
}

/// A `binance_session` script: connect, then each frame, each snapshot answering the
/// oldest request, with time passing.
fn binance_script(flags: u8, lines: &[Line]) -> Vec<u8> {
    let mut s = vec![flags, 6, 0, 4, 0];
    for (i, l) in lines.iter().enumerate() {
        match l {
            Line::Frame(f) if f.len() < 8192 => {
                s.push(3);
                s.extend_from_slice(&(f.len() as u16).to_be_bytes());
                s.extend_from_slice(f);
            }
            Line::Snapshot(b) if b.len() < 8192 => {
                s.extend_from_slice(&[5, 2]);
                s.extend_from_slice(&(b.len() as u16).to_be_bytes());
                s.extend_from_slice(&[0, 0]);
                s.extend_from_slice(b);
            }
            _ => {}
        }
        if i % 16 == 15 {
            s.extend_from_slice(&[6, 0]);
        }
        if s.len() > 48 << 10 {
            break;
        }
    }
    s
}

/// Writes every target's seeds under `out`; the number per target.
pub fn write_all(out: &Path) -> Vec<(&'static str, usize)> {
    let mut seeds = Seeds::default();
    let own_mold = datagrams(&root().join("captures/moldudp64-loss.pcap"), 400);
    let mut mold = own_mold.iter().take(40).cloned().collect::<Vec<_>>();
    let mut iex = Vec::new();
    let mut binance: Vec<(u8, Vec<Line>)> = vec![(
        0,
        own_binance(&root().join("captures/binance-drop.capture"), 400),
    )];
    let mut sample_pcaps = vec![root().join("captures/moldudp64-loss.pcap")];
    if let Some(shared) = shared() {
        let mut nasdaq = Vec::new();
        pcaps(&shared.join("moldudp64"), &mut nasdaq);
        for p in &nasdaq {
            mold.extend(datagrams(p, 4));
        }
        sample_pcaps.extend(nasdaq.iter().take(4).cloned());
        iex = datagrams(&shared.join("iex/Tops.v1.6.pcap.zst"), 600);
        let hb = shared.join("binance/hftbacktest");
        binance.push((0, hftbacktest(&hb.join("spot_btcusdt_20240808.gz"), 300)));
        binance.push((1, hftbacktest(&hb.join("usdm_btcusdt_20240808.gz"), 300)));
        let cf = shared.join("binance/cryptofeed");
        for (flags, name) in [
            (0u8, "BINANCE"),
            (1, "BINANCE_FUTURES"),
            (2, "BINANCE_DELIVERY"),
        ] {
            let mut lines = cryptofeed(&cf.join(format!("{name}.ws.1.0")), 200);
            lines.extend(cryptofeed(&cf.join(format!("{name}.http.0.0")), 4));
            binance.push((flags, lines));
        }
        // ITCH messages framed as SoupBinTCP sequenced data.
        let itch = std::fs::read(shared.join("itch/12302019_SNIPPET.NASDAQ_ITCH50")).unwrap();
        let mut stream = Vec::new();
        let accepted = Frame::LoginAccepted(LoginAccepted {
            session: gapless::protocol::moldudp64::Session(*b"000010059B"),
            sequence: 1,
        });
        let mut buf = vec![0u8; 70_000];
        let n = accepted.encode(&mut buf).unwrap();
        stream.extend_from_slice(&buf[..n]);
        let mut at = 0;
        let mut count = 0;
        while let Some(len) = itch.get(at..at + 2) {
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            let Some(msg) = itch.get(at + 2..at + 2 + len) else {
                break;
            };
            let n = Frame::SequencedData(msg).encode(&mut buf).unwrap();
            stream.extend_from_slice(&buf[..n]);
            at += 2 + len;
            count += 1;
            if count % 100 == 0 {
                seeds.add("soupbintcp", std::mem::take(&mut stream));
            }
        }
        let n = encode_end_of_snapshot(&mut buf, 1001).unwrap();
        stream.extend_from_slice(&buf[..n]);
        let n = Frame::ServerHeartbeat.encode(&mut buf).unwrap();
        stream.extend_from_slice(&buf[..n]);
        seeds.add("soupbintcp", stream);
    }
    for d in &mold {
        seeds.add("moldudp64_packet", d.clone());
        if let Ok(p) = Packet::decode(d) {
            let r = Request {
                session: p.session(),
                sequence: p.sequence(),
                count: p.message_count(),
            };
            seeds.add("moldudp64_request", r.to_bytes().to_vec());
        }
    }
    for d in iex.iter().take(40) {
        seeds.add("iex_tp_packet", d.clone());
    }
    for p in &sample_pcaps {
        let bytes = std::fs::read(p).unwrap();
        if bytes.len() < 64 << 10 {
            seeds.add("capture", bytes);
        }
    }
    seeds.add("capture", pcap_of(&own_mold[..20.min(own_mold.len())]));
    seeds.add("capture", pcapng_of(&own_mold[..20.min(own_mold.len())]));
    if !iex.is_empty() {
        seeds.add("capture", pcap_of(&iex[..20]));
    }
    // udp_session: the captures replayed under a few policies (flags: bit 0 IEX-TP, 1 skip,
    // 2 re-request, 3 snapshot, 4-5 start, 6 configured session).
    for flags in [0x00u8, 0x02, 0x04, 0x0C, 0x26] {
        seeds.add(
            "udp_session",
            udp_script(flags, 0x05, &own_mold[..200.min(own_mold.len())]),
        );
    }
    for flags in [0x01u8, 0x03, 0x05] {
        if iex.len() >= 300 {
            seeds.add("udp_session", udp_script(flags, 0x01, &iex[..300]));
        }
    }
    for (flags, lines) in &binance {
        seeds.add("binance_session", binance_script(*flags, lines));
        for l in lines.iter().take(60) {
            match l {
                Line::Frame(f) => {
                    seeds.add("binance_scan", f.clone());
                    seeds.add("binance_scan_json", f.clone());
                }
                Line::Snapshot(b) => seeds.add("binance_snapshot", b.clone()),
            }
        }
    }
    seeds.add(
        "binance_snapshot",
        br#"{"code":-1121,"msg":"Invalid symbol."}"#.to_vec(),
    );
    // The configuration examples, and the recording configuration of captures/.
    let mut configs: Vec<PathBuf> = std::fs::read_dir(root().join("config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    configs.push(root().join("captures/record-moldudp64.toml"));
    configs.sort();
    for p in configs {
        if p.extension().is_some_and(|e| e == "toml") {
            seeds.add("config", std::fs::read(p).unwrap());
        }
    }
    // The unix-socket records a server sends.
    let mut stream = Vec::new();
    encode_hello(
        &[
            StreamName::new("nasdaq", "a"),
            StreamName::new("btc", "btcusdt"),
        ],
        &mut stream,
    )
    .unwrap();
    let events = [
        Event::State {
            stream: 0,
            state: StreamState::Synced,
        },
        Event::Message {
            stream: 0,
            seq: 7,
            recv_ns: 1,
            snapshot: false,
            payload: b"A\x00\x01",
        },
        Event::Range {
            stream: 1,
            first: 10,
            last: 12,
            recv_ns: 2,
            payload: b"{}",
        },
        Event::Gap {
            stream: 0,
            from: 8,
            to: 9,
        },
        Event::SnapshotBegin { stream: 1 },
        Event::SnapshotEnd {
            stream: 1,
            next: 13,
        },
        Event::Overrun {
            stream: 0,
            from: 1,
            to: 2,
            events: 3,
        },
        Event::Heartbeat {
            stream: 0,
            next: 10,
        },
    ];
    for e in &events {
        let mut one = Vec::new();
        encode_event(e, &mut one).unwrap();
        seeds.add("unix_client", one[4..].to_vec());
        stream.extend_from_slice(&one);
    }
    encode_cut_off("too slow", &mut stream);
    seeds.add("unix_client", stream);
    seeds.write(out)
}
