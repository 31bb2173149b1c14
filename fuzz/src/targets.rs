//! The fuzz targets, as plain functions of `&[u8]`.
//!
//! Each function takes one input, runs it through a part of gapless and panics when a
//! property does not hold. libFuzzer calls them from `fuzz_targets/` (nightly), and the
//! main crate's `tests/fuzz_corpus` calls the very same functions on every committed
//! corpus file and crash reproducer (stable), so a fixed bug stays fixed.
//!
//! This file is compiled twice: as a module of the `gapless-fuzz` crate, and as a module of
//! the main crate's `fuzz_corpus` test (through `#[path]`). It depends on `gapless` and
//! `serde_json` only.

use std::collections::HashMap;
use std::io::Cursor;

use gapless::capture::{CaptureReader, Stats, udp_datagram};
use gapless::client::unix::{Record, RecordReader};
use gapless::config::Config;
use gapless::protocol::binance::{
    Scanned, parse_api_error, parse_snapshot, scan, snapshot_last_update_id,
};
use gapless::protocol::moldudp64::{self, Request, Session};
use gapless::protocol::soupbintcp::{self, FrameDecoder};
use gapless::protocol::{iex_tp, moldudp64::Packet as MoldPacket};
use gapless::publish::{Event, StreamState};
use gapless::time::{Mono, Wall};
use gapless::venue::binance::{BinanceSpec, BinanceVenue, Market};
use gapless::venue::udp::LineSpec;
use gapless::venue::{
    AnyVenue, ChannelSpec, ConnEvent, ConnId, ConnStage, EndpointId, FeedSpec, FetchId, FetchReply,
    GapPolicy, IoRequest, Received, SessionKey, SnapshotSpec, UdpVenue, Venue, Wire,
};

/// Whether to print every consumer event (`GAPLESS_FUZZ_TRACE` set), to read a finding.
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("GAPLESS_FUZZ_TRACE").is_some())
}

/// A target: its name (the folder of its corpus) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const ALL: &[Target] = &[
    ("moldudp64_packet", moldudp64_packet),
    ("moldudp64_request", moldudp64_request),
    ("iex_tp_packet", iex_tp_packet),
    ("soupbintcp", soupbintcp_frames),
    ("binance_scan", binance_scan),
    ("binance_snapshot", binance_snapshot),
    ("binance_scan_json", binance_scan_json),
    ("capture", capture),
    ("config", config),
    ("unix_client", unix_client),
    ("udp_session", udp_session),
    ("binance_session", binance_session),
];

/// The target called `name`.
pub fn by_name(name: &str) -> Option<fn(&[u8])> {
    ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

// ---------------------------------------------------------------------------------------
// Stateless decoders
// ---------------------------------------------------------------------------------------

/// MoldUDP64 downstream packets: decode, walk, re-encode, and the four-at-a-time decoder
/// agrees with the single one.
pub fn moldudp64_packet(data: &[u8]) {
    let single = MoldPacket::decode(data);
    if let Ok(p) = single {
        check_mold_packet(data, &p);
    }
    // decode4 must give exactly what decode gives, on every lane.
    let half = data.get(..data.len() / 2).unwrap_or_default();
    let tail = data.get(1..).unwrap_or_default();
    let lanes = [data, half, tail, data];
    let four = MoldPacket::decode4(lanes);
    for (lane, got) in lanes.iter().zip(four.iter()) {
        assert_eq!(
            *got,
            MoldPacket::decode(lane),
            "decode4 differs from decode"
        );
    }
}

fn check_mold_packet(data: &[u8], p: &MoldPacket<'_>) {
    assert_eq!(p.as_bytes(), data);
    assert_eq!(p.encoded_len(), data.len());
    let count = usize::from(p.message_count());
    assert_eq!(p.messages().len(), count);
    let mut n = 0usize;
    for (i, (seq, msg)) in p.sequenced_messages().enumerate() {
        assert_eq!(seq, p.sequence().wrapping_add(i as u64));
        assert!(msg.len() <= moldudp64::MAX_MESSAGE_LEN);
        n += 1;
    }
    assert_eq!(n, count);
    let mut out = vec![0u8; data.len()];
    let len = p.encode(&mut out).expect("a decoded packet encodes");
    assert_eq!(out.get(..len), Some(data), "re-encoding differs");
    if !data.is_empty() {
        let mut short = vec![0u8; data.len() - 1];
        assert!(p.encode(&mut short).is_err(), "encoded into a short buffer");
        assert!(short.iter().all(|&b| b == 0), "a refused encode wrote");
    }
}

/// MoldUDP64 request packets: decode and round trip.
pub fn moldudp64_request(data: &[u8]) {
    match Request::decode(data) {
        Ok(r) => {
            assert_eq!(data.len(), moldudp64::REQUEST_LEN);
            assert_eq!(&r.to_bytes()[..], data);
            let mut out = [0u8; moldudp64::REQUEST_LEN];
            assert_eq!(r.encode(&mut out), Ok(moldudp64::REQUEST_LEN));
            assert_eq!(&out[..], data);
        }
        Err(e) => assert!(e.offset() <= data.len().max(moldudp64::REQUEST_LEN)),
    }
    let _ = Session::from_ascii(data);
}

/// IEX-TP segments: decode, walk, re-encode, decode4 agrees.
pub fn iex_tp_packet(data: &[u8]) {
    if let Ok(p) = iex_tp::Packet::decode(data) {
        assert_eq!(p.as_bytes(), data);
        assert_eq!(p.encoded_len(), data.len());
        assert_eq!(
            usize::from(p.payload_len()),
            data.len() - iex_tp::HEADER_LEN
        );
        let count = usize::from(p.message_count());
        assert_eq!(p.messages().len(), count);
        assert_eq!(p.sequenced_messages().count(), count);
        assert_eq!(p.is_heartbeat(), count == 0);
        let mut out = vec![0u8; data.len()];
        let len = p.encode(&mut out).expect("a decoded segment encodes");
        assert_eq!(out.get(..len), Some(data), "re-encoding differs");
    }
    let half = data.get(..data.len() / 2).unwrap_or_default();
    let tail = data.get(1..).unwrap_or_default();
    let lanes = [data, tail, half, data];
    let four = iex_tp::Packet::decode4(lanes);
    for (lane, got) in lanes.iter().zip(four.iter()) {
        assert_eq!(
            *got,
            iex_tp::Packet::decode(lane),
            "decode4 differs from decode"
        );
    }
}

/// SoupBinTCP: a byte stream split into frames; every frame re-encodes to its bytes.
pub fn soupbintcp_frames(data: &[u8]) {
    let decoder = FrameDecoder::default();
    let mut at = 0usize;
    // Each frame is at least 3 bytes, so the loop ends.
    while let Some(rest) = data.get(at..) {
        match decoder.decode(rest) {
            Ok(Some((frame, used))) => {
                assert!(used >= soupbintcp::FRAME_HEADER_LEN && used <= rest.len());
                assert_eq!(frame.encoded_len(), used);
                let mut out = vec![0u8; used];
                let len = frame.encode(&mut out).expect("a decoded frame encodes");
                assert_eq!(out.get(..len), rest.get(..used), "re-encoding differs");
                let _ = frame.end_of_snapshot();
                at += used;
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.offset() <= rest.len());
                break;
            }
        }
    }
    // The iterator sees the same frames.
    let frames = decoder.frames(data).count();
    assert!(frames <= data.len() / soupbintcp::FRAME_HEADER_LEN + 1);
    if let Some(next) = soupbintcp::parse_end_of_snapshot(data) {
        assert_eq!(
            &soupbintcp::end_of_snapshot_payload(next)[..],
            data,
            "end of snapshot does not round trip"
        );
    }
}

/// The Binance frame scan: never panics, offsets stay inside the input, ids are ordered.
pub fn binance_scan(data: &[u8]) {
    match scan(data) {
        Ok(Scanned::Depth(e)) => {
            assert!(e.first_update_id <= e.final_update_id);
            assert_eq!(data.get(e.event_range()), Some(e.event_bytes));
            assert_eq!(e.event_type, "depthUpdate");
        }
        Ok(Scanned::Other { event_bytes, .. })
        | Ok(Scanned::ServerShutdown { event_bytes, .. })
        | Ok(Scanned::Unknown { event_bytes, .. }) => {
            assert!(is_within(data, event_bytes));
        }
        Err(e) => assert!(e.offset() <= data.len()),
    }
}

/// REST snapshot and API error bodies.
pub fn binance_snapshot(data: &[u8]) {
    let whole = parse_snapshot(data);
    let tree = || match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(value) => Some(value),
        // JSON that serde_json's tree refuses by limits of its own, in the value of a key
        // the snapshot does not use: a number beyond f64, an escaped lone surrogate (told as
        // "unexpected end of hex escape" when a quote follows it; the skipping reader has
        // checked each escape's four hex digits).
        Err(e) if e.to_string().starts_with("number out of range") => None,
        Err(e) if e.to_string().contains("surrogate") => None,
        Err(e) if e.to_string().starts_with("unexpected end of hex escape") => None,
        Err(e) => panic!("a snapshot is JSON: {e}"),
    };
    if let (Ok(s), Some(value)) = (&whole, whole.as_ref().ok().and_then(|_| tree())) {
        assert_eq!(
            value.get("lastUpdateId").and_then(|v| v.as_u64()),
            Some(s.last_update_id)
        );
    }
    // The rx thread's reader of the update id alone accepts exactly what the whole parse
    // accepts, but levels written as objects, which it refuses.
    match (&whole, snapshot_last_update_id(data)) {
        (Ok(s), Ok(id)) => assert_eq!(s.last_update_id, id),
        (Err(_), Ok(id)) => panic!("the update id alone ({id}) accepted a refused body"),
        (Ok(_), Err(e)) => {
            let Some(value) = tree() else { return };
            let object_level = ["bids", "asks"].iter().any(|side| {
                value[side]
                    .as_array()
                    .is_some_and(|levels| levels.iter().any(serde_json::Value::is_object))
            });
            assert!(
                object_level,
                "the update id alone refused an accepted body: {e}"
            );
        }
        (Err(_), Err(_)) => {}
    }
    let _ = parse_api_error(data);
}

/// Differential: when both the scan and serde_json accept a frame as a depth event, they
/// agree on every sequencing field.
pub fn binance_scan_json(data: &[u8]) {
    let Ok(Scanned::Depth(e)) = scan(data) else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Some(object) = value.as_object() else {
        return;
    };
    let event = match object.get("data") {
        Some(inner) if inner.is_object() => {
            assert_eq!(
                object.get("stream").and_then(|s| s.as_str()),
                e.stream,
                "stream differs"
            );
            inner
        }
        _ => &value,
    };
    // serde_json keeps the last of duplicate keys: the scan may keep another, and a frame
    // with duplicate keys is not a valid event. Compare only frames with unique keys.
    if has_duplicate_keys(data) {
        return;
    }
    let u64_of = |k: &str| event.get(k).and_then(|v| v.as_u64());
    assert_eq!(event.get("e").and_then(|v| v.as_str()), Some("depthUpdate"));
    assert_eq!(
        event.get("s").and_then(|v| v.as_str()),
        Some(e.symbol),
        "s differs"
    );
    assert_eq!(u64_of("E"), Some(e.event_time), "E differs");
    assert_eq!(u64_of("U"), Some(e.first_update_id), "U differs");
    assert_eq!(u64_of("u"), Some(e.final_update_id), "u differs");
    if let Some(pu) = e.prev_final_update_id {
        assert_eq!(u64_of("pu"), Some(pu), "pu differs");
    }
    if let Some(t) = e.transaction_time {
        assert_eq!(u64_of("T"), Some(t), "T differs");
    }
    let inner: serde_json::Value =
        serde_json::from_slice(e.event_bytes).expect("the event bytes are the event object");
    assert_eq!(&inner, event, "event bytes differ from the event object");
}

/// Whether any JSON object in `data` (already known to be valid JSON) repeats a key.
fn has_duplicate_keys(data: &[u8]) -> bool {
    struct Check(bool);
    impl<'de> serde::de::Visitor<'de> for &mut Check {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(&mut *self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut keys = std::collections::HashSet::new();
            while let Some(k) = map.next_key::<String>()? {
                if !keys.insert(k) {
                    self.0 = true;
                }
                map.next_value_seed(&mut *self)?;
            }
            Ok(())
        }
    }
    impl<'de> serde::de::DeserializeSeed<'de> for &mut Check {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    let mut check = Check(false);
    let mut de = serde_json::Deserializer::from_slice(data);
    match serde::de::DeserializeSeed::deserialize(&mut check, &mut de) {
        Ok(()) => check.0,
        Err(_) => true,
    }
}

fn is_within(outer: &[u8], inner: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    inner.is_empty() || (i >= o && i + inner.len() <= o + outer.len())
}

/// pcap and pcapng files: every record, and the UDP datagram of each.
///
/// zstd-compressed inputs are not decompressed here: the bound on decompression is a
/// property of its own, and an unbounded expansion would only measure the allocator.
pub fn capture(data: &[u8]) {
    if data.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
        return;
    }
    let Ok(mut reader) = CaptureReader::from_bytes(data.to_vec()) else {
        return;
    };
    let len = data.len() as u64;
    let mut stats = Stats::default();
    let mut last = 0u64;
    // Each record consumes at least a header, so there are fewer than `len` of them.
    for _ in 0..=len {
        match reader.next_record() {
            None => break,
            Some(Err(_)) => {
                assert!(reader.next_record().is_none(), "records after an error");
                break;
            }
            Some(Ok(record)) => {
                assert!(record.offset < len);
                assert!(record.offset >= last, "records go backwards");
                last = record.offset;
                let outcome = udp_datagram(record.link, record.data);
                if let Ok(Some(d)) = &outcome {
                    assert!(is_within(record.data, d.payload));
                }
                stats.count(&outcome);
            }
        }
    }
    assert!(stats.skipped() <= stats.frames());
}

/// The configuration loader: a valid configuration builds its venues.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, "fuzz.toml") {
        Ok(config) => {
            // Keep the allocation of a venue's buffers out of what is measured: a valid
            // configuration may ask for large windows.
            let big = config.venues.iter().any(|v| v.kind.stream_count() > 16);
            if !big {
                let _ = AnyVenue::all_from_config(&config);
            }
        }
        Err(errors) => {
            assert!(!errors.errors().is_empty(), "an error list with no error");
            let _ = errors.to_string();
        }
    }
}

/// The unix-socket client: a record body, and a stream of framed records.
pub fn unix_client(data: &[u8]) {
    if let Ok(Record::Event(e)) = Record::decode(data) {
        assert_eq!(e.encoded_len(), data.len());
        let mut out = vec![0u8; data.len()];
        let len = e.encode_into(&mut out).expect("a decoded event encodes");
        assert_eq!(out.get(..len), Some(data), "re-encoding differs");
    }
    // A client's resume request, as the sink reads it: a request that decodes encodes back
    // to the same bytes.
    if let Ok(cursors) = gapless::publish::wire::decode_resume(data) {
        let mut out = Vec::new();
        gapless::publish::wire::encode_resume(&cursors, &mut out)
            .expect("a decoded request encodes");
        assert_eq!(out.get(4..), Some(data), "re-encoding the request differs");
    }
    let mut reader = RecordReader::new(Cursor::new(data));
    // Each record consumes at least its 4-byte prefix.
    for _ in 0..=data.len() / 4 {
        match reader.next_record() {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Stateful targets: input as a script of operations
// ---------------------------------------------------------------------------------------

/// Reads the fuzz input as a script: missing bytes read as zero.
struct Script<'a> {
    data: &'a [u8],
}

impl<'a> Script<'a> {
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_be_bytes(b)
    }

    fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(len.min(self.data.len()));
        self.data = rest;
        head
    }

    /// A sequence number near `cursor`, near zero, near `u64::MAX`, or anything.
    fn seq(&mut self, cursor: u64) -> u64 {
        let tag = self.u8();
        let small = u64::from(tag >> 2);
        match tag & 3 {
            0 => cursor.wrapping_add(small),
            1 => cursor.wrapping_sub(small),
            2 => u64::MAX - small,
            _ => self.u64(),
        }
    }
}

/// The first byte of a message the UDP session target made; followed by the session index
/// and the sequence number (big-endian), so a delivered message proves where it came from.
const TAG: u8 = 0xA5;
const TAGGED_LEN: usize = 10;

fn tagged(session: u8, seq: u64) -> [u8; TAGGED_LEN] {
    let mut m = [0u8; TAGGED_LEN];
    m[0] = TAG;
    m[1] = session;
    m[2..].copy_from_slice(&seq.to_be_bytes());
    m
}

const SESSIONS: [[u8; 10]; 3] = [*b"FUZZ000001", *b"FUZZ000002", *b"FUZZ000003"];
const IEX_SESSIONS: [u32; 3] = [1, 2, 3];

fn session_key(wire: Wire, index: u8) -> SessionKey {
    let i = usize::from(index % 3);
    match wire {
        Wire::MoldUdp64 => SessionKey(SESSIONS[i]),
        Wire::IexTp => SessionKey::iex(IEX_SESSIONS[i]),
    }
}

fn session_index(wire: Wire, key: SessionKey) -> Option<u8> {
    (0..3u8).find(|&i| session_key(wire, i) == key)
}

/// Encodes a datagram of `wire`: session, first sequence, count field, messages.
fn encode_datagram(wire: Wire, session: u8, first: u64, count: u16, messages: &[&[u8]]) -> Vec<u8> {
    let body: usize = messages.iter().map(|m| 2 + m.len()).sum();
    let mut out = Vec::with_capacity(40 + body);
    match wire {
        Wire::MoldUdp64 => {
            out.extend_from_slice(&SESSIONS[usize::from(session % 3)]);
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&count.to_be_bytes());
            for m in messages {
                out.extend_from_slice(&(m.len() as u16).to_be_bytes());
                out.extend_from_slice(m);
            }
        }
        Wire::IexTp => {
            out.push(iex_tp::VERSION);
            out.push(0);
            out.extend_from_slice(&0x8003u16.to_le_bytes());
            out.extend_from_slice(&1u32.to_le_bytes());
            out.extend_from_slice(&IEX_SESSIONS[usize::from(session % 3)].to_le_bytes());
            out.extend_from_slice(&(body as u16).to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
            out.extend_from_slice(&first.to_le_bytes());
            out.extend_from_slice(&0i64.to_le_bytes());
            for m in messages {
                out.extend_from_slice(&(m.len() as u16).to_le_bytes());
                out.extend_from_slice(m);
            }
        }
    }
    out
}

/// Decodes a datagram of `wire`: its session index (if one of ours), first sequence, and
/// each message with its offset in the datagram.
/// A decoded datagram: its session index (if one of ours), and `(sequence, offset, length)`
/// of each message.
type Decoded = (Option<u8>, Vec<(u64, usize, usize)>);

fn decode_datagram(wire: Wire, bytes: &[u8]) -> Option<Decoded> {
    let offset = |m: &[u8]| m.as_ptr() as usize - bytes.as_ptr() as usize;
    match wire {
        Wire::MoldUdp64 => {
            let p = MoldPacket::decode(bytes).ok()?;
            let s = session_index(wire, SessionKey(p.session().0));
            let msgs = p
                .sequenced_messages()
                .map(|(seq, m)| (seq, offset(m), m.len()))
                .collect();
            Some((s, msgs))
        }
        Wire::IexTp => {
            let p = iex_tp::Packet::decode(bytes).ok()?;
            let s = session_index(wire, SessionKey::iex(p.session_id()));
            let msgs = p
                .sequenced_messages()
                .map(|(seq, m)| (seq, offset(m), m.len()))
                .collect();
            Some((s, msgs))
        }
    }
}

/// Spoils every tagged message of a datagram that does not tell the truth about its session
/// and sequence (a raw or mutated datagram), so a tag always proves its origin.
fn sanitize(wire: Wire, bytes: &mut [u8]) {
    let Some((session, msgs)) = decode_datagram(wire, bytes) else {
        return;
    };
    for (seq, at, len) in msgs {
        let Some(m) = bytes.get(at..at + len) else {
            continue;
        };
        if m.first() == Some(&TAG)
            && (len != TAGGED_LEN
                || Some(m) != session.map(|s| tagged(s, seq)).as_ref().map(|t| &t[..]))
            && let Some(b) = bytes.get_mut(at)
        {
            *b = TAG ^ 0xFF;
        }
    }
}

/// What the consumer of one point-sequenced stream has seen, and the promise it checks:
/// within an epoch, messages are strictly increasing, each once, and contiguous unless a
/// gap event names what is skipped.
#[derive(Debug, Default)]
struct PointConsumer {
    /// The last sequence delivered or declared lost in this epoch.
    last: Option<u64>,
    /// The session of the tagged messages delivered in this epoch.
    session: Option<u8>,
    state: Option<StreamState>,
    in_snapshot: bool,
    delivered: u64,
    /// The label of the epoch the venue announced since the last session change.
    label: Option<Vec<u8>>,
}

impl PointConsumer {
    fn new_epoch(&mut self) {
        self.last = None;
        self.session = None;
    }

    fn event(&mut self, e: &Event<'_>) {
        if trace() {
            eprintln!("{e:?}");
        }
        match *e {
            Event::Message {
                seq,
                snapshot: true,
                ..
            } => {
                assert!(self.in_snapshot, "a snapshot message outside a snapshot");
                let _ = seq;
            }
            Event::Message { seq, payload, .. } => {
                assert!(
                    self.state != Some(StreamState::Closed),
                    "message {seq} delivered after the session closed"
                );
                assert!(
                    self.label.is_some(),
                    "message {seq} delivered before its session's epoch"
                );
                if let Some(last) = self.last {
                    assert!(seq > last, "message {seq} after {last}: not increasing");
                    assert!(
                        seq == last + 1,
                        "message {seq} after {last}: messages skipped without a gap event"
                    );
                }
                if payload.len() == TAGGED_LEN && payload.first() == Some(&TAG) {
                    let mut s = [0u8; 8];
                    s.copy_from_slice(&payload[2..]);
                    assert_eq!(
                        u64::from_be_bytes(s),
                        seq,
                        "message {seq} carries another message's bytes"
                    );
                    let session = payload[1];
                    if let Some(prev) = self.session {
                        assert_eq!(prev, session, "two sessions' messages in one epoch");
                    }
                    self.session = Some(session);
                }
                self.last = Some(seq);
                self.delivered += 1;
            }
            Event::Gap { from, to, .. } => {
                assert!(from <= to, "gap {from}..={to} inverted");
                if let Some(last) = self.last {
                    assert!(
                        last.checked_add(1) == Some(from),
                        "gap {from}..={to} after {last}: not contiguous with what was delivered"
                    );
                }
                self.last = Some(to);
            }
            Event::State { state, .. } => {
                if matches!(state, StreamState::Unseen | StreamState::ResetRequired) {
                    self.new_epoch();
                }
                if state == StreamState::Unseen {
                    self.label = None;
                }
                self.state = Some(state);
            }
            Event::SnapshotBegin { .. } => {
                self.in_snapshot = true;
                self.new_epoch();
            }
            Event::SnapshotEnd { next, .. } => {
                assert!(self.in_snapshot, "snapshot end without a begin");
                self.in_snapshot = false;
                self.new_epoch();
                self.last = next.checked_sub(1);
            }
            Event::Range { .. } => panic!("a range event on a point-sequenced stream"),
            Event::Epoch { label, .. } => {
                assert!(
                    self.label.is_none(),
                    "a second epoch {label:?} without a session change"
                );
                assert!(!label.is_empty(), "an epoch without a label");
                self.label = Some(label.to_vec());
            }
            Event::Overrun { .. } | Event::Heartbeat { .. } => {}
        }
    }
}

/// Drives a MoldUDP64 or IEX-TP venue with a script of datagrams (well formed, mutated and
/// raw), re-request answers, snapshot replies and timeouts, checking the consumer's promise.
pub fn udp_session(data: &[u8]) {
    let mut s = Script { data };
    let flags = s.u8();
    let wire = if flags & 1 == 0 {
        Wire::MoldUdp64
    } else {
        Wire::IexTp
    };
    let tuning = s.u8();
    // Flag 0x80: the channel has two redundant lines (A/B arbitration).
    let mut lines = vec![LineSpec::loopback(
        "239.255.0.1:1".parse().expect("an address"),
    )];
    if flags & 0x80 != 0 {
        lines.push(LineSpec::loopback(
            "239.255.0.2:1".parse().expect("an address"),
        ));
    }
    let rerequest: Vec<std::net::SocketAddr> = if flags & 4 != 0 {
        vec!["127.0.0.1:1".parse().expect("an address")]
    } else {
        vec![]
    };
    let channel = ChannelSpec {
        name: "fuzz".into(),
        lines,
        session: (flags & 0x40 != 0).then(|| session_key(wire, 0)),
        // Tuning's top bit (shared with the start sequence's offset): the server is a
        // peer store, whose heartbeats on the answer socket say "not yet".
        peer_stores: if tuning & 0x80 != 0 {
            rerequest.clone()
        } else {
            vec![]
        },
        rerequest,
        resume: None,
        snapshot: (flags & 8 != 0).then(|| SnapshotSpec {
            addr: "127.0.0.1:2".parse().expect("an address"),
            username: "u".into(),
            password: "p".into(),
        }),
    };
    let mut spec = FeedSpec::new(wire, vec![channel]);
    spec.window = 64;
    spec.max_buffered = 64;
    spec.arena_datagrams = 16;
    spec.max_datagram = 512;
    spec.max_replay = 16;
    spec.reset_threshold = [0, 8, 32, 1_000_000][usize::from(tuning & 3)];
    spec.session_confirm = 1 + u32::from((tuning >> 2) & 3);
    spec.gap_policy = if flags & 2 != 0 {
        GapPolicy::Skip
    } else {
        GapPolicy::Hold
    };
    spec.start_from = match (flags >> 4) & 3 {
        0 | 1 => None,
        2 => Some(1),
        _ => Some(u64::MAX - u64::from(tuning >> 4)),
    };
    spec.policy.reorder_delay_ns = 1_000_000;
    spec.policy.request_timeout_ns = 5_000_000;
    spec.policy.retry_budget = 2;
    spec.policy.max_request_count = 8;
    spec.snapshot_timeout_ns = 50_000_000;
    spec.snapshot_retry_ns = 10_000_000;
    spec.arbitration_window_ns = 2_000_000;
    spec.line_down_ns = 20_000_000;
    let mut venue = UdpVenue::new("fuzz", spec);
    let multicast = venue
        .endpoint_of(0, gapless::venue::Via::Multicast)
        .unwrap_or(EndpointId(0));
    // Line B where there is one, else line A again.
    let line_b = venue.endpoint_of_line(0, 1).unwrap_or(multicast);
    let unicast = venue
        .endpoint_of(0, gapless::venue::Via::Unicast)
        .unwrap_or(EndpointId(1));

    let mut consumer = PointConsumer::default();
    let mut now = 1_000u64;
    let mut cursor = 1u64;
    let mut fetches: Vec<FetchId> = Vec::new();
    let mut requests: Vec<(SessionKey, u64, u16)> = Vec::new();
    // Bound the work per input whatever its length.
    for _ in 0..4096 {
        if s.is_empty() {
            break;
        }
        let op = s.u8();
        let mut emit = |e: &Event<'_>| consumer.event(e);
        match op % 10 {
            // One well-formed data packet, heartbeat or end of session.
            0..=2 => {
                let session = s.u8();
                let first = s.seq(cursor);
                let shape = s.u8();
                let (count, n) = match shape % 8 {
                    0 => (moldudp64::HEARTBEAT_COUNT, 0),
                    1 => (moldudp64::END_OF_SESSION_COUNT, 0),
                    k => (u16::from(k) - 1, u64::from(k) - 1),
                };
                let msgs: Vec<[u8; TAGGED_LEN]> = (0..n)
                    .map(|i| tagged(session % 3, first.wrapping_add(i)))
                    .collect();
                let refs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
                let bytes = encode_datagram(wire, session, first, count, &refs);
                cursor = first.wrapping_add(n);
                let endpoint = match (shape & 0x80 != 0, shape & 0x40 != 0) {
                    (true, _) => unicast,
                    (false, true) => line_b,
                    (false, false) => multicast,
                };
                let d = [Received {
                    bytes: &bytes,
                    recv: Wall::from_nanos(now),
                }];
                venue.handle_datagrams(Mono::from_nanos(now), endpoint, &d, &mut emit);
            }
            // A batch of packets (through the four-at-a-time decoder), some duplicated or
            // reordered.
            3 => {
                let session = s.u8();
                let first = s.seq(cursor);
                let shape = s.u8();
                let packets = 1 + usize::from(shape & 7);
                let mut all = Vec::with_capacity(packets);
                for p in 0..packets as u64 {
                    let at = first.wrapping_add(p * 2);
                    let m = [
                        tagged(session % 3, at),
                        tagged(session % 3, at.wrapping_add(1)),
                    ];
                    all.push(encode_datagram(wire, session, at, 2, &[&m[0], &m[1]]));
                }
                if shape & 0x08 != 0 {
                    all.reverse();
                }
                if shape & 0x10 != 0 && all.len() > 1 {
                    all.swap(0, 1);
                    all.remove(1);
                }
                cursor = first.wrapping_add(packets as u64 * 2);
                let d: Vec<Received<'_>> = all
                    .iter()
                    .map(|b| Received {
                        bytes: b,
                        recv: Wall::from_nanos(now),
                    })
                    .collect();
                let endpoint = match (shape & 0x80 != 0, shape & 0x40 != 0) {
                    (true, _) => unicast,
                    (false, true) => line_b,
                    (false, false) => multicast,
                };
                venue.handle_datagrams(Mono::from_nanos(now), endpoint, &d, &mut emit);
                // Line B's copy of the batch, when the channel has one.
                if shape & 0x20 != 0 && line_b != multicast {
                    venue.handle_datagrams(Mono::from_nanos(now), line_b, &d, &mut emit);
                }
            }
            // A raw datagram.
            4 => {
                let len = usize::from(s.u16() % 2048);
                let mut bytes = s.bytes(len).to_vec();
                sanitize(wire, &mut bytes);
                let endpoint = EndpointId(u16::from(s.u8() % 3));
                let d = [Received {
                    bytes: &bytes,
                    recv: Wall::from_nanos(now),
                }];
                venue.handle_datagrams(Mono::from_nanos(now), endpoint, &d, &mut emit);
            }
            // A well-formed packet, mutated: truncated or one byte changed.
            5 => {
                let session = s.u8();
                let first = s.seq(cursor);
                let m = [
                    tagged(session % 3, first),
                    tagged(session % 3, first.wrapping_add(1)),
                ];
                let mut bytes = encode_datagram(wire, session, first, 2, &[&m[0], &m[1]]);
                let at = usize::from(s.u8()) % bytes.len();
                let how = s.u8();
                if how & 1 == 0 {
                    bytes.truncate(at);
                } else if let Some(b) = bytes.get_mut(at) {
                    *b ^= how | 1;
                }
                sanitize(wire, &mut bytes);
                let d = [Received {
                    bytes: &bytes,
                    recv: Wall::from_nanos(now),
                }];
                venue.handle_datagrams(Mono::from_nanos(now), multicast, &d, &mut emit);
            }
            // Answer the oldest re-request as a server would (perhaps partly), by unicast.
            6 => {
                let limit = u64::from(s.u8() % 9);
                if !requests.is_empty() {
                    let (key, from, count) = requests.remove(0);
                    if let Some(session) = session_index(wire, key) {
                        let n = u64::from(count).min(limit);
                        let msgs: Vec<[u8; TAGGED_LEN]> = (0..n)
                            .map(|i| tagged(session, from.wrapping_add(i)))
                            .collect();
                        let refs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
                        let bytes = encode_datagram(wire, session, from, n as u16, &refs);
                        let d = [Received {
                            bytes: &bytes,
                            recv: Wall::from_nanos(now),
                        }];
                        venue.handle_datagrams(Mono::from_nanos(now), unicast, &d, &mut emit);
                    }
                }
            }
            // Time passes; run the timers when due.
            7 => {
                let step = match s.u8() % 4 {
                    0 => 100_000,
                    1 => 1_000_000,
                    2 => 6_000_000,
                    _ => 60_000_000,
                };
                now = now.saturating_add(step);
                if venue.poll_timeout().is_some_and(|t| t.as_nanos() <= now) {
                    venue.handle_timeout(Mono::from_nanos(now), &mut emit);
                }
            }
            // A snapshot reply.
            8 => {
                let what = s.u8();
                let id = match fetches.last() {
                    Some(&id) if what & 0x80 == 0 => id,
                    _ => FetchId(u64::from(what & 3)),
                };
                let reply = match what % 4 {
                    0 => FetchReply::Message(b"snapshot message"),
                    1 => FetchReply::End {
                        next: s.seq(cursor),
                    },
                    2 => FetchReply::Failed("fuzz"),
                    _ => FetchReply::Http {
                        status: 200,
                        retry_after_secs: None,
                        used_weight: None,
                        body: b"{}",
                    },
                };
                venue.handle_fetch(Mono::from_nanos(now), id, reply, &mut emit);
            }
            // End of input.
            _ => {
                if s.u8() & 7 == 0 {
                    venue.handle_end(Mono::from_nanos(now), &mut emit);
                }
            }
        }
        while let Some(t) = venue.poll_transmit() {
            if let Ok(r) = Request::decode(t.payload())
                && requests.len() < 64
            {
                requests.push((SessionKey(r.session.0), r.sequence, r.count));
            }
        }
        while let Some(io) = venue.poll_io() {
            if let IoRequest::Fetch { id, .. } = io {
                fetches.push(id);
            }
        }
        while venue.poll_notice().is_some() {}
        // A venue that asks to be woken in the past would be woken again at once, for ever.
        if let Some(t) = venue.poll_timeout()
            && t.as_nanos() < now
        {
            venue.handle_timeout(Mono::from_nanos(now), &mut |e: &Event<'_>| {
                consumer.event(e)
            });
            assert!(
                venue.poll_timeout().is_none_or(|t| t.as_nanos() > now),
                "a timer stays due after its timeout ran at {now}: the loop would spin: {:?} {:?}",
                venue.armed_timers(),
                venue.stream(0).map(|s| (s.state, s.stats)),
            );
        }
    }
}

/// What the consumer of one Binance symbol has seen: no delta unless proven continuous.
#[derive(Debug, Default)]
struct RangeConsumer {
    in_snapshot: bool,
    /// A snapshot was applied since the last reset.
    synced: bool,
    /// The next delta must straddle this id (the first one after a snapshot).
    straddle: Option<u64>,
    last: Option<u64>,
}

impl RangeConsumer {
    fn event(&mut self, market: Market, e: &Event<'_>) {
        if trace() {
            eprintln!("{e:?}");
        }
        match *e {
            Event::State {
                state: StreamState::ResetRequired | StreamState::Unseen,
                ..
            } => {
                self.synced = false;
                self.last = None;
            }
            Event::State { .. } => {}
            Event::SnapshotBegin { .. } => {
                assert!(!self.in_snapshot, "snapshot begin twice");
                self.in_snapshot = true;
                self.synced = false;
                self.last = None;
            }
            Event::Message { snapshot, .. } => {
                assert!(snapshot && self.in_snapshot, "a message outside a snapshot");
            }
            Event::SnapshotEnd { next, .. } => {
                assert!(self.in_snapshot, "snapshot end without a begin");
                self.in_snapshot = false;
                self.synced = true;
                self.straddle = Some(next);
                self.last = None;
            }
            Event::Range {
                first,
                last,
                payload,
                ..
            } => {
                assert!(
                    self.synced,
                    "a delta {first}..={last} before a snapshot lined up"
                );
                assert!(first <= last, "range {first}..={last} inverted");
                let scanned = match scan(payload) {
                    Ok(Scanned::Depth(d)) => d,
                    other => panic!("a delta that is not a depth event: {other:?}"),
                };
                assert_eq!(
                    scanned.update_ids(),
                    first..=last,
                    "delta ids differ from its bytes"
                );
                if let Some(n) = self.straddle.take() {
                    assert!(
                        first <= n && n <= last,
                        "first delta {first}..={last} does not straddle {n}"
                    );
                } else if let Some(prev) = self.last {
                    match market {
                        // Continuous, and bringing ids beyond what was applied. An event
                        // that overlaps the last one (`U <= prev u`) is delivered whole, as
                        // the consumer contract says: depth levels are absolute quantities,
                        // so applying it whole is right.
                        Market::Spot => assert!(
                            first <= prev.saturating_add(1) && last > prev,
                            "delta {first}..={last} does not continue {prev}"
                        ),
                        Market::Usdm | Market::Coinm => {
                            assert_eq!(
                                scanned.prev_final_update_id,
                                Some(prev),
                                "delta {first}..={last} does not link to {prev}"
                            );
                            assert!(first > prev, "delta {first}..={last} after {prev}");
                        }
                    }
                }
                self.last = Some(last);
            }
            Event::Gap { .. } => panic!("a gap event on a Binance stream"),
            Event::Epoch { .. } => panic!("an epoch on a Binance stream, whose ids never restart"),
            Event::Overrun { .. } | Event::Heartbeat { .. } => {}
        }
    }
}

const SYMBOLS: [&str; 2] = ["btcusdt", "ethusdt"];

fn depth_frame(
    market: Market,
    symbol: usize,
    first: u64,
    last: u64,
    pu: u64,
    wrap: bool,
) -> String {
    let name = SYMBOLS.get(symbol).copied().unwrap_or("xrpusdt");
    let upper = name.to_ascii_uppercase();
    let pu = match market {
        Market::Spot => String::new(),
        _ => format!(",\"pu\":{pu}"),
    };
    let event = format!(
        "{{\"e\":\"depthUpdate\",\"E\":1723161255208,\"s\":\"{upper}\",\"U\":{first},\"u\":{last}{pu},\"b\":[[\"1.0\",\"2.0\"]],\"a\":[]}}"
    );
    if wrap {
        format!("{{\"stream\":\"{name}@depth\",\"data\":{event}}}")
    } else {
        event
    }
}

/// Drives a Binance venue with a script of frames (well formed and raw), connection events,
/// snapshot answers and timeouts, checking each symbol's consumer.
pub fn binance_session(data: &[u8]) {
    let mut s = Script { data };
    let flags = s.u8();
    let market = match flags % 3 {
        0 => Market::Spot,
        1 => Market::Usdm,
        _ => Market::Coinm,
    };
    let mut spec = BinanceSpec::new(market, SYMBOLS.iter().map(|s| s.to_string()).collect());
    spec.max_pending = 8;
    spec.pending_bytes = 2048;
    spec.silence_timeout_ns = 5_000_000_000;
    spec.snapshot_timeout_ns = 1_000_000_000;
    // Flag 0x80: one symbol a connection (two shards); 0x40: two permanent connections.
    if flags & 0x80 != 0 {
        spec.max_streams_per_connection = 1;
    }
    if flags & 0x40 != 0 {
        spec.connections = 2;
    }
    let Ok(mut venue) =
        BinanceVenue::new("fuzz", spec, "ws://127.0.0.1:1", "http://127.0.0.1:1", None)
    else {
        panic!("the spec is valid");
    };
    let mut consumers: HashMap<u16, RangeConsumer> = HashMap::new();
    let mut now = 1_000u64;
    let mut cursor = [1_000u64; 2];
    let mut conn = ConnId(0);
    // The connection opened before the latest (another shard's, or its twin).
    let mut earlier = ConnId(0);
    let mut fetches: Vec<(FetchId, usize)> = Vec::new();
    let emitter = |consumers: &mut HashMap<u16, RangeConsumer>, e: &Event<'_>| {
        consumers.entry(e.stream()).or_default().event(market, e);
    };
    for _ in 0..4096 {
        if s.is_empty() {
            break;
        }
        let op = s.u8();
        let mut emit = |e: &Event<'_>| emitter(&mut consumers, e);
        match op % 8 {
            // A well-formed depth event.
            0..=2 => {
                let symbol = usize::from(s.u8() & 1);
                let c = cursor.get(symbol).copied().unwrap_or(0);
                let first = s.seq(c.wrapping_add(1));
                let span = u64::from(s.u8() % 8);
                let last = first.saturating_add(span);
                let pu = match s.u8() % 4 {
                    0 => c.wrapping_sub(1),
                    1 => first.wrapping_sub(1),
                    _ => c,
                };
                let frame = depth_frame(market, symbol, first, last, pu, op & 0x80 == 0);
                if let Some(c) = cursor.get_mut(symbol) {
                    *c = last;
                }
                venue.handle_frame(
                    Mono::from_nanos(now),
                    if op & 0x40 != 0 { earlier } else { conn },
                    frame.as_bytes(),
                    Wall::from_nanos(now),
                    &mut emit,
                );
            }
            // A raw frame.
            3 => {
                let len = usize::from(s.u16() % 8192);
                let frame = s.bytes(len);
                venue.handle_frame(
                    Mono::from_nanos(now),
                    conn,
                    frame,
                    Wall::from_nanos(now),
                    &mut emit,
                );
            }
            // A connection event.
            4 => {
                let how = s.u8();
                let stages = [
                    ConnStage::Resolve,
                    ConnStage::Connect,
                    ConnStage::Tls,
                    ConnStage::Upgrade,
                ];
                let event = match how % 4 {
                    0 => ConnEvent::Opened,
                    1 => ConnEvent::Failed {
                        stage: stages[usize::from(how >> 2) % stages.len()],
                        timed_out: how & 0x40 != 0,
                        reason: "fuzz",
                    },
                    2 => ConnEvent::Alive,
                    _ => ConnEvent::Closed("fuzz"),
                };
                let which = match (how & 0x80 != 0, how & 0x10 != 0) {
                    (true, _) => ConnId(conn.0.wrapping_add(1)),
                    (false, true) => earlier,
                    (false, false) => conn,
                };
                venue.handle_connection(Mono::from_nanos(now), which, event, &mut emit);
            }
            // A snapshot answer.
            5 => {
                let how = s.u8();
                if fetches.is_empty() {
                    continue;
                }
                let (id, symbol) = fetches.remove(usize::from(how >> 4) % fetches.len());
                let c = cursor.get(symbol).copied().unwrap_or(0);
                let body;
                let reply = match how % 4 {
                    0 | 1 => {
                        let l = s.seq(c);
                        body = format!(
                            "{{\"lastUpdateId\":{l},\"bids\":[[\"1.0\",\"1.0\"]],\"asks\":[]}}"
                        );
                        FetchReply::Http {
                            status: 200,
                            retry_after_secs: None,
                            used_weight: Some(u32::from(s.u8()) * 30),
                            body: body.as_bytes(),
                        }
                    }
                    2 => {
                        let len = usize::from(s.u16() % 8192);
                        FetchReply::Http {
                            status: [200, 429, 418, 500, 403, 400][usize::from(s.u8() % 6)],
                            retry_after_secs: Some(u64::from(s.u8())),
                            used_weight: None,
                            body: s.bytes(len),
                        }
                    }
                    _ => FetchReply::Failed("fuzz"),
                };
                venue.handle_fetch(Mono::from_nanos(now), id, reply, &mut emit);
            }
            // Time passes.
            6 => {
                let step = match s.u8() % 4 {
                    0 => 1_000_000,
                    1 => 100_000_000,
                    2 => 1_500_000_000,
                    _ => 6_000_000_000,
                };
                now = now.saturating_add(step);
                if venue.poll_timeout().is_some_and(|t| t.as_nanos() <= now) {
                    venue.handle_timeout(Mono::from_nanos(now), &mut emit);
                }
            }
            _ => {
                if s.u8() & 7 == 0 {
                    venue.handle_end(Mono::from_nanos(now), &mut emit);
                }
            }
        }
        while let Some(io) = venue.poll_io() {
            match io {
                IoRequest::Open { conn: c, .. } => {
                    earlier = conn;
                    conn = c;
                }
                IoRequest::Fetch { id, stream, .. } => {
                    if fetches.len() < 16 {
                        fetches.push((id, stream));
                    }
                }
                IoRequest::Close { .. } => {}
            }
        }
        while venue.poll_notice().is_some() {}
        if let Some(t) = venue.poll_timeout()
            && t.as_nanos() < now
        {
            venue.handle_timeout(Mono::from_nanos(now), &mut |e: &Event<'_>| {
                emitter(&mut consumers, e)
            });
            assert!(
                venue.poll_timeout().is_none_or(|t| t.as_nanos() > now),
                "a timer stays due after its timeout ran: the loop would spin"
            );
        }
    }
}
