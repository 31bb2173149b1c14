use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use serde_json::Value;

use super::number::{digit_run, eight_digits};
use super::skip::{BLOCK, block_masks, block_masks_portable, find_quote_or_backslash, prefix_xor};
use super::*;

const SPOT: &str = r#"{"stream":"btcusdt@depth@100ms","data":{"e":"depthUpdate","E":1723161255208,"s":"BTCUSDT","U":50093239189,"u":50093239202,"b":[["61737.63","0.0"],["61730.17","1.5"]],"a":[["61837.64","1.54698"]]}}"#;
const USDM: &str = r#"{"stream":"btcusdt@depth@0ms","data":{"e":"depthUpdate","E":1723161256299,"T":1723161256298,"s":"BTCUSDT","U":5123107832006,"u":5123107837557,"pu":5123107831937,"b":[["58710.20","0.014"]],"a":[]}}"#;
const COINM_BARE: &str = r#"{"e":"depthUpdate","E":1723161257440,"T":1723161257432,"s":"BTCUSD_PERP","ps":"BTCUSD","U":1007198631260,"u":1007198631565,"pu":1007198631198,"b":[["61773.6","1001"]],"a":[["61801.4","0"]]}"#;

/// The fields a depth event carries, as owned values for comparisons.
#[derive(Debug, PartialEq, Eq)]
struct Expected {
    stream: Option<String>,
    event_time: u64,
    transaction_time: Option<u64>,
    symbol: String,
    first: u64,
    last: u64,
    prev_last: Option<u64>,
}

impl Expected {
    fn of(event: &DepthEvent<'_>) -> Self {
        Self {
            stream: event.stream.map(str::to_owned),
            event_time: event.event_time,
            transaction_time: event.transaction_time,
            symbol: event.symbol.to_owned(),
            first: event.first_update_id,
            last: event.final_update_id,
            prev_last: event.prev_final_update_id,
        }
    }
}

/// Splits a serde_json tree the way `scan` does: `(stream, event)`.
fn split_frame(frame: &Value) -> Option<(Option<&Value>, &Value)> {
    let object = frame.as_object()?;
    match object.get("data") {
        Some(data @ Value::Object(_)) => Some((object.get("stream"), data)),
        _ => Some((None, frame)),
    }
}

/// What `scan` must report for a frame according to serde_json, or `None` when the frame is
/// not a well-formed depth event.
fn oracle(frame: &Value) -> Option<Expected> {
    let (stream, event) = split_frame(frame)?;
    let stream = match stream {
        None => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(_) => return None,
    };
    let event = event.as_object()?;
    if event.get("e")?.as_str()? != DEPTH_UPDATE {
        return None;
    }
    let optional = |key: &str| match event.get(key) {
        None => Some(None),
        Some(value) => value.as_u64().map(Some),
    };
    let expected = Expected {
        stream,
        event_time: event.get("E")?.as_u64()?,
        transaction_time: optional("T")?,
        symbol: event.get("s")?.as_str()?.to_owned(),
        first: event.get("U")?.as_u64()?,
        last: event.get("u")?.as_u64()?,
        prev_last: optional("pu")?,
    };
    (expected.first <= expected.last).then_some(expected)
}

fn depth(frame: &str) -> DepthEvent<'_> {
    match scan(frame.as_bytes()) {
        Ok(Scanned::Depth(event)) => event,
        other => panic!("expected a depth event, got {other:?} for {frame}"),
    }
}

fn scan_str(frame: &str) -> Result<Scanned<'_>, ScanError> {
    scan(frame.as_bytes())
}

/// Every strict prefix of a frame is reported as truncated at its own length.
fn assert_prefixes_truncated(frame: &[u8]) {
    for len in 0..frame.len() {
        let prefix = frame.get(..len).unwrap_or_default();
        assert_eq!(
            scan(prefix),
            Err(ScanError::Truncated { offset: len }),
            "prefix of {len} bytes"
        );
    }
}

#[test]
fn spot_wrapped_event() {
    let event = depth(SPOT);
    assert_eq!(event.stream, Some("btcusdt@depth@100ms"));
    assert_eq!(event.event_type, "depthUpdate");
    assert_eq!(event.event_time, 1_723_161_255_208);
    assert_eq!(event.symbol, "BTCUSDT");
    assert_eq!(event.update_ids(), 50_093_239_189..=50_093_239_202);
    assert_eq!(event.transaction_time, None);
    assert_eq!(event.prev_final_update_id, None);
    let data_start = SPOT.find("{\"e\"").unwrap();
    assert_eq!(event.event_range(), data_start..SPOT.len() - 1);
    assert_eq!(
        event.event_bytes,
        &SPOT.as_bytes()[data_start..SPOT.len() - 1]
    );
}

#[test]
fn futures_events_carry_pu_and_t() {
    let event = depth(USDM);
    assert_eq!(event.stream, Some("btcusdt@depth@0ms"));
    assert_eq!(event.transaction_time, Some(1_723_161_256_298));
    assert_eq!(event.prev_final_update_id, Some(5_123_107_831_937));
    assert_eq!(event.update_ids(), 5_123_107_832_006..=5_123_107_837_557);

    let bare = depth(COINM_BARE);
    assert_eq!(bare.stream, None);
    assert_eq!(bare.symbol, "BTCUSD_PERP");
    assert_eq!(bare.prev_final_update_id, Some(1_007_198_631_198));
    assert_eq!(bare.event_bytes, COINM_BARE.as_bytes());
    assert_eq!(bare.event_offset, 0);
}

#[test]
fn other_streams_are_not_depth_events() {
    let cases = [
        (
            r#"{"stream":"btcusdt@trade","data":{"e":"trade","E":1723161255343,"s":"BTCUSDT","t":3735683259,"p":"61837.63","q":"0.02","T":1723161255342,"m":true,"M":true}}"#,
            Some("btcusdt@trade"),
            Some("trade"),
        ),
        (
            r#"{"stream":"btcusdt@bookTicker","data":{"u":50093239212,"s":"BTCUSDT","b":"61837.63","B":"3.78","a":"61837.64","A":"1.54"}}"#,
            Some("btcusdt@bookTicker"),
            None,
        ),
        (
            r#"{"stream":"sushiusdt@bookTicker","data":{"e":"bookTicker","u":600859600576,"s":"SUSHIUSDT","b":"7.6110","B":"2","a":"7.6120","A":"297","T":1626992741012,"E":1626992741017}}"#,
            Some("sushiusdt@bookTicker"),
            Some("bookTicker"),
        ),
        (
            r#"{"stream":"lrcbtc@aggTrade","data":{"e":"aggTrade","E":1,"s":"LRCBTC","a":12,"p":"0.1","q":"3","f":1,"l":2,"T":1,"m":false,"M":true}}"#,
            Some("lrcbtc@aggTrade"),
            Some("aggTrade"),
        ),
        (
            r#"{"stream":"nknusdt@kline_1m","data":{"e":"kline","E":1,"s":"NKNUSDT","k":{"t":1,"T":2,"s":"NKNUSDT","i":"1m","U":5,"x":false}}}"#,
            Some("nknusdt@kline_1m"),
            Some("kline"),
        ),
        (
            r#"{"lastUpdateId":1027024,"bids":[["4.0","431.0"]],"asks":[]}"#,
            None,
            None,
        ),
        (r#"{"result":null,"id":1}"#, None, None),
    ];
    for (frame, stream, event_type) in cases {
        match scan_str(frame) {
            Ok(Scanned::Other {
                stream: got_stream,
                event_type: got_type,
                event_bytes,
            }) => {
                assert_eq!((got_stream, got_type), (stream, event_type), "{frame}");
                assert!(serde_json::from_slice::<Value>(event_bytes).is_ok());
            }
            other => panic!("{frame}: {other:?}"),
        }
    }
}

#[test]
fn control_and_unknown_events_have_their_own_kinds() {
    let shutdown = r#"{"stream":"btcusdt@depth","data":{"e":"serverShutdown","E":1699000000000}}"#;
    assert!(matches!(
        scan_str(shutdown),
        Ok(Scanned::ServerShutdown {
            stream: Some("btcusdt@depth"),
            event_time: Some(1_699_000_000_000),
            ..
        })
    ));
    assert!(matches!(
        scan_str(r#"{"e":"serverShutdown"}"#),
        Ok(Scanned::ServerShutdown {
            stream: None,
            event_time: None,
            ..
        })
    ));
    assert!(matches!(
        scan_str(r#"{"e":"serverShutdown","E":-1}"#),
        Err(ScanError::NotAnInteger { key: "E", .. })
    ));
    for not_a_string in [r#"{"e":{depthUpdate}}"#, r#"{"e":[depthUpdate]}"#] {
        assert_eq!(
            scan_str(not_a_string),
            Err(ScanError::NotAString {
                key: "e",
                offset: 5
            })
        );
    }
    let unknown = r#"{"e":"listenKeyExpired","E":1,"listenKey":"abc"}"#;
    match scan_str(unknown) {
        Ok(Scanned::Unknown {
            stream: None,
            event_type: "listenKeyExpired",
            event_bytes,
        }) => assert_eq!(event_bytes, unknown.as_bytes()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn strings_with_escapes_are_skipped_whole() {
    let frame = r#"{"data":{"note":"a\"U\":1,\"u\":0\\","e":"depthUpdate","E":5,"s":"X","U":7,"u":9,"b":[["\"U\"","\\"]],"a":[["\u0022,","]}"]],"z":"\\\\\""},"stream":"x@depth"}"#;
    let event = depth(frame);
    assert_eq!(event.update_ids(), 7..=9);
    assert_eq!(event.stream, Some("x@depth"));
    let value: Value = serde_json::from_str(frame).unwrap();
    assert_eq!(oracle(&value), Some(Expected::of(&event)));
}

#[test]
fn nested_values_never_supply_keys() {
    let frame = r#"{"e":"depthUpdate","b":[["U","u"],{"U":999,"u":1,"s":"NESTED","E":0}],"E":2,"s":"REAL","U":10,"a":[[{"pu":3}],[]],"u":20,"k":{"T":4,"e":"trade"}}"#;
    let event = depth(frame);
    assert_eq!(event.symbol, "REAL");
    assert_eq!(event.event_time, 2);
    assert_eq!(event.update_ids(), 10..=20);
    assert_eq!(event.prev_final_update_id, None);
    assert_eq!(event.transaction_time, None);
}

#[test]
fn whitespace_between_every_token() {
    let frame = " \r\n\t{ \"stream\" :\n\"s@depth\" ,\t\"data\"\r: { \"e\" : \"depthUpdate\" , \"E\" : 1 ,\n\"s\" : \"A\" , \"U\" : 2 , \"u\" : 3 , \"b\" : [ [ \"1\" , \"2\" ] ] , \"a\" : [ ] }\n} \n\t\r";
    let event = depth(frame);
    assert_eq!((event.first_update_id, event.final_update_id), (2, 3));
    assert_eq!(event.stream, Some("s@depth"));
    assert!(event.event_bytes.starts_with(b"{ \"e\""));
    assert!(event.event_bytes.ends_with(b"[ ] }"));
}

#[test]
fn every_key_order_gives_the_same_event() {
    let mut pairs = [
        r#""e":"depthUpdate""#,
        r#""E":1723161255208"#,
        r#""s":"BTCUSDT""#,
        r#""U":50093239189"#,
        r#""u":50093239202"#,
        r#""b":[["61737.63","0.0"]]"#,
        r#""a":[["61837.64","1.5"]]"#,
    ];
    let expected = Expected::of(&depth(
        r#"{"e":"depthUpdate","E":1723161255208,"s":"BTCUSDT","U":50093239189,"u":50093239202}"#,
    ));
    // Heap's algorithm, iterative: visits all 5,040 orders.
    let mut counters = [0usize; 7];
    let mut visited = 1;
    let check = |pairs: &[&str; 7]| {
        let frame = format!("{{{}}}", pairs.join(","));
        assert_eq!(Expected::of(&depth(&frame)), expected, "{frame}");
    };
    check(&pairs);
    let mut i = 1;
    while i < pairs.len() {
        if counters[i] < i {
            let swap_with = if i % 2 == 0 { 0 } else { counters[i] };
            pairs.swap(swap_with, i);
            check(&pairs);
            visited += 1;
            counters[i] += 1;
            i = 1;
        } else {
            counters[i] = 0;
            i += 1;
        }
    }
    assert_eq!(visited, 5040);
    // The wrapper's keys in either order.
    let swapped = r#"{"data":{"e":"depthUpdate","E":1,"s":"A","U":1,"u":1},"stream":"a@depth"}"#;
    assert_eq!(depth(swapped).stream, Some("a@depth"));
}

#[test]
fn missing_keys_are_reported() {
    let full = [r#""E":1"#, r#""s":"A""#, r#""U":2"#, r#""u":3"#];
    let keys = ["E", "s", "U", "u"];
    for (skip, key) in keys.iter().enumerate() {
        let rest: Vec<&str> = full
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != skip)
            .map(|(_, pair)| *pair)
            .collect();
        let frame = format!(
            r#"{{"stream":"a@depth","data":{{"e":"depthUpdate",{}}}}}"#,
            rest.join(",")
        );
        assert_eq!(
            scan_str(&frame),
            Err(ScanError::MissingKey {
                key,
                offset: frame.find("{\"e\"").unwrap()
            }),
            "{frame}"
        );
    }
    // Without `e` the object is not a depth event at all.
    assert!(matches!(
        scan_str(r#"{"E":1,"s":"A","U":2,"u":3}"#),
        Ok(Scanned::Other {
            event_type: None,
            ..
        })
    ));
}

#[test]
fn integers_are_strict() {
    let with_u = |u: &str| format!(r#"{{"e":"depthUpdate","E":1,"s":"A","U":0,"u":{u}}}"#);
    let max = with_u("18446744073709551615");
    assert_eq!(depth(&max).final_update_id, u64::MAX);
    assert_eq!(depth(&with_u("0")).final_update_id, 0);
    let offset = with_u("").len() - 1;
    for overflowing in ["18446744073709551616", "99999999999999999999999"] {
        assert_eq!(
            scan_str(&with_u(overflowing)),
            Err(ScanError::IntegerOverflow { key: "u", offset })
        );
    }
    for malformed in [
        "-1",
        "-0",
        "01",
        "1.0",
        "1e3",
        "1E3",
        "\"5\"",
        "null",
        "true",
        "[5]",
        "{}",
        "1-2",
        "99999999999999999999.5",
    ] {
        assert_eq!(
            scan_str(&with_u(malformed)),
            Err(ScanError::NotAnInteger { key: "u", offset }),
            "{malformed}"
        );
    }
    assert!(matches!(
        scan_str(&with_u("+1")),
        Err(ScanError::UnexpectedByte { found: b'+', .. })
    ));
    assert!(matches!(
        scan_str(&with_u("12x")),
        Err(ScanError::UnexpectedByte { found: b'x', .. })
    ));
}

#[test]
fn inverted_range_is_reported() {
    let frame = r#"{"e":"depthUpdate","E":1,"s":"A","U":10,"u":9}"#;
    assert_eq!(
        scan_str(frame),
        Err(ScanError::RangeInverted {
            first: 10,
            last: 9,
            offset: frame.len() - 2
        })
    );
    let equal = r#"{"e":"depthUpdate","E":1,"s":"A","U":10,"u":10}"#;
    assert_eq!(depth(equal).update_ids(), 10..=10);
}

#[test]
fn duplicate_keys_take_the_last() {
    let frame = r#"{"e":"trade","e":"depthUpdate","E":1,"s":"A","s":"B","U":1,"u":2,"U":2,"u":3}"#;
    let event = depth(frame);
    assert_eq!(event.symbol, "B");
    assert_eq!(event.update_ids(), 2..=3);
    let value: Value = serde_json::from_str(frame).unwrap();
    assert_eq!(oracle(&value), Some(Expected::of(&event)));

    // A later `data` object replaces the earlier one whole; a later non-object `data`
    // makes the frame bare.
    let twice = r#"{"data":{"e":"depthUpdate","E":1,"s":"A","U":1,"u":2,"pu":0},"stream":"a","data":{"e":"depthUpdate","E":5,"s":"B","U":3,"u":4}}"#;
    let event = depth(twice);
    assert_eq!((event.symbol, event.prev_final_update_id), ("B", None));
    let demoted = r#"{"data":{"e":"depthUpdate","E":1,"s":"A","U":1,"u":2},"data":7}"#;
    assert!(matches!(
        scan_str(demoted),
        Ok(Scanned::Other {
            event_type: None,
            ..
        })
    ));
}

#[test]
fn structural_errors_carry_offsets() {
    let cases: [(&[u8], ScanError); 14] = [
        (b"", ScanError::Truncated { offset: 0 }),
        (b"   ", ScanError::Truncated { offset: 3 }),
        (b" [1]", ScanError::NotAnObject { offset: 1 }),
        (b"{} x", ScanError::TrailingBytes { offset: 3 }),
        (b"{}{}", ScanError::TrailingBytes { offset: 2 }),
        (
            br#"{"a":[1}"#,
            ScanError::UnexpectedByte {
                offset: 7,
                found: b'}',
                expected: "`]`",
            },
        ),
        (
            br#"{"a":{]}"#,
            ScanError::UnexpectedByte {
                offset: 6,
                found: b']',
                expected: "`}`",
            },
        ),
        (
            br#"{"a" 1}"#,
            ScanError::UnexpectedByte {
                offset: 5,
                found: b'1',
                expected: "`:` after an object key",
            },
        ),
        (
            br#"{"a":1 "b":2}"#,
            ScanError::UnexpectedByte {
                offset: 7,
                found: b'"',
                expected: "`,` or `}` after an object value",
            },
        ),
        (
            br#"{a:1}"#,
            ScanError::UnexpectedByte {
                offset: 1,
                found: b'a',
                expected: "`\"` opening an object key",
            },
        ),
        (
            br#"{"a":trux}"#,
            ScanError::UnexpectedByte {
                offset: 8,
                found: b'x',
                expected: "a JSON literal",
            },
        ),
        (
            br#"{"a":,}"#,
            ScanError::UnexpectedByte {
                offset: 5,
                found: b',',
                expected: "a JSON value",
            },
        ),
        (
            br#"{"x":1,"\u0055":2}"#,
            ScanError::EscapedKey { offset: 7 },
        ),
        (
            b"{\"e\":\"depthUpdate\",\"E\":1,\"s\":\"\xff\",\"U\":1,\"u\":1}",
            ScanError::InvalidUtf8 {
                key: "s",
                offset: 29,
            },
        ),
    ];
    for (input, error) in cases {
        assert_eq!(
            scan(input),
            Err(error),
            "{}",
            String::from_utf8_lossy(input)
        );
        assert_eq!(scan(input).err().map(|e| e.offset()), Some(error.offset()));
    }
    assert_eq!(
        scan_str(r#"{"e":"depthUpdate","E":1,"s":"A\u0042","U":1,"u":1}"#),
        Err(ScanError::EscapedString {
            key: "s",
            offset: 29
        })
    );
    assert_eq!(
        scan_str(r#"{"e":"depthUpdate","E":1,"s":5,"U":1,"u":1}"#),
        Err(ScanError::NotAString {
            key: "s",
            offset: 29
        })
    );
    assert_eq!(
        scan_str(r#"{"stream":7,"data":{}}"#),
        Err(ScanError::NotAString {
            key: "stream",
            offset: 10
        })
    );
    let message = ScanError::RangeInverted {
        first: 2,
        last: 1,
        offset: 9,
    }
    .to_string();
    assert_eq!(
        message,
        "update ids inverted at byte 9: U = 2 is above u = 1"
    );
}

#[test]
fn nesting_is_bounded() {
    let nested = |levels: usize| {
        format!(
            r#"{{"e":"x","b":{}{}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    assert!(scan_str(&nested(MAX_NESTING as usize)).is_ok());
    assert_eq!(
        scan_str(&nested(MAX_NESTING as usize + 1)),
        Err(ScanError::TooDeep {
            offset: 13 + MAX_NESTING as usize
        })
    );
    assert!(matches!(
        scan_str(&nested(100_000)),
        Err(ScanError::TooDeep { .. })
    ));
}

#[test]
fn every_truncation_is_reported_without_panic() {
    for frame in [SPOT, USDM, COINM_BARE] {
        assert_prefixes_truncated(frame.as_bytes());
    }
}

/// xorshift64: deterministic and dependency-free.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

/// Bytes that tend to matter to a JSON scanner.
const ALPHABET: &[u8] = b"{}[]\":,\\ \n0123456789-+.eEtrufalsnUuEsTp\x00\x7f\xc3\xff";

fn mutate(rng: &mut XorShift, input: &mut Vec<u8>) {
    let len = input.len();
    match rng.below(7) {
        0 if len > 0 => input[rng.below(len)] = ALPHABET[rng.below(ALPHABET.len())],
        1 => input.insert(rng.below(len + 1), ALPHABET[rng.below(ALPHABET.len())]),
        2 if len > 0 => {
            input.remove(rng.below(len));
        }
        3 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16)).min(len);
            let copy = input[start..end].to_vec();
            let at = rng.below(len + 1);
            input.splice(at..at, copy);
        }
        4 => input.truncate(rng.below(len + 1)),
        5 if len > 1 => {
            let (a, b) = (rng.below(len), rng.below(len));
            input.swap(a, b);
        }
        _ if len > 0 => input[rng.below(len)] = rng.next() as u8,
        _ => input.push(b'{'),
    }
}

/// Checks one input against serde_json: agreement whenever both accept it, and acceptance
/// by `scan` of every well-formed depth event it can represent. Returns whether the input
/// was a depth event by both.
fn agrees_with_serde(input: &[u8]) -> bool {
    let scanned = scan(input);
    let Ok(frame) = serde_json::from_slice::<Value>(input) else {
        return false;
    };
    let expected = oracle(&frame);
    match scanned {
        Ok(Scanned::Depth(event)) => {
            assert_eq!(Some(Expected::of(&event)), expected, "{input:?}");
            let (_, data) = split_frame(&frame).unwrap();
            let reparsed: Value = serde_json::from_slice(event.event_bytes).unwrap();
            assert_eq!(&reparsed, data);
            true
        }
        other => {
            // The scanner may refuse escapes and `-0`, which serde_json accepts.
            let representable =
                !input.contains(&b'\\') && !input.windows(2).any(|pair| pair == b"-0");
            assert!(
                expected.is_none() || !representable,
                "serde_json sees {expected:?}, scan gave {other:?} for {}",
                String::from_utf8_lossy(input)
            );
            false
        }
    }
}

#[test]
fn block_masks_match_the_reference() {
    let mut rng = XorShift(0x0123_4567_89ab_cdef);
    let mut block = [0u8; BLOCK];
    for start in (0..256).step_by(BLOCK) {
        for (i, slot) in block.iter_mut().enumerate() {
            *slot = (start + i) as u8;
        }
        assert_eq!(block_masks(&block), block_masks_portable(&block));
    }
    for round in 0..4_000 {
        for slot in &mut block {
            *slot = if round % 2 == 0 {
                ALPHABET[rng.below(ALPHABET.len())]
            } else {
                rng.next() as u8
            };
        }
        assert_eq!(block_masks(&block), block_masks_portable(&block));
    }
    assert_eq!(prefix_xor(0b1001), 0b0111);
    assert_eq!(prefix_xor(1), u64::MAX);
}

#[test]
fn digit_helpers_match_the_byte_at_a_time_answer() {
    assert_eq!(eight_digits(u64::from_le_bytes(*b"12345678")), 12_345_678);
    assert_eq!(eight_digits(u64::from_le_bytes(*b"00000009")), 9);
    assert_eq!(eight_digits(u64::from_le_bytes(*b"99999999")), 99_999_999);
    let mut rng = XorShift(0x5151_7777_2222_9999);
    for _ in 0..4_000 {
        let len = rng.below(30);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match rng.below(6) {
                0 => rng.next() as u8,
                _ => b'0' + rng.below(10) as u8,
            })
            .collect();
        let expected = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        assert_eq!(digit_run(&bytes), expected, "{bytes:?}");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let span = Span {
            start: 0,
            end: bytes.len(),
            escaped: false,
        };
        let strict = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        match integer(&bytes, span, "x") {
            Ok(value) => assert_eq!(Some(value), text.parse::<u64>().ok().filter(|_| strict)),
            Err(ScanError::IntegerOverflow { .. }) => {
                assert!(strict && text.parse::<u64>().is_err())
            }
            Err(_) => assert!(!strict, "{text}"),
        }
    }
}

#[test]
fn word_search_finds_the_first_quote_or_backslash() {
    let mut rng = XorShift(0xfeed_face_cafe_beef);
    for _ in 0..4_000 {
        let len = rng.below(40);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match rng.below(20) {
                0 => b'"',
                1 => b'\\',
                _ => rng.next() as u8,
            })
            .collect();
        let from = rng.below(len + 2);
        let expected = bytes
            .get(from..)
            .and_then(|rest| rest.iter().position(|&b| b == b'"' || b == b'\\'))
            .map(|at| from + at);
        assert_eq!(
            find_quote_or_backslash(&bytes, from),
            expected,
            "{bytes:?} {from}"
        );
    }
}

/// Appends a random valid JSON string: escapes, brackets and multi-byte characters.
fn random_string(rng: &mut XorShift, out: &mut String) {
    out.push('"');
    for _ in 0..rng.below(90) {
        match rng.below(14) {
            0 => out.push_str("\\\""),
            1 => out.push_str("\\\\"),
            2 => out.push_str("\\u0055"),
            3 => out.push('['),
            4 => out.push(']'),
            5 => out.push('{'),
            6 => out.push('}'),
            7 => out.push('é'),
            8 => out.push(','),
            _ => out.push(char::from(b'a' + rng.below(26) as u8)),
        }
    }
    out.push('"');
}

/// Appends a random valid JSON value, nesting at most `levels` deep.
fn random_json(rng: &mut XorShift, levels: u32, out: &mut String) {
    const SCALARS: [&str; 6] = ["0", "-1.5e3", "true", "false", "null", "12345678901234"];
    let kind = if levels == 0 {
        rng.below(2)
    } else {
        rng.below(6)
    };
    match kind {
        0 => random_string(rng, out),
        1 => out.push_str(SCALARS[rng.below(SCALARS.len())]),
        2 | 3 => {
            out.push('[');
            for i in 0..rng.below(6) {
                if i > 0 {
                    out.push_str([",", " , ", ",\n"][rng.below(3)]);
                }
                random_json(rng, levels - 1, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            for i in 0..rng.below(5) {
                if i > 0 {
                    out.push(',');
                }
                random_string(rng, out);
                out.push(':');
                random_json(rng, levels - 1, out);
            }
            out.push('}');
        }
    }
}

#[test]
fn skipped_values_of_every_shape_length_and_alignment() {
    let mut rng = XorShift(0x0bad_cafe_1234_5678);
    for round in 0..1_500u64 {
        let mut value = String::new();
        random_json(&mut rng, 6, &mut value);
        let pad = " ".repeat(rng.below(70));
        let frame = format!(
            r#"{{"e":"depthUpdate","x":{pad}{value},"E":1,"s":"A","U":{round},"u":{round},"b":{value}}}"#
        );
        let event = depth(&frame);
        assert_eq!(event.update_ids(), round..=round);
        let tree: Value = serde_json::from_str(&frame).unwrap();
        assert_eq!(oracle(&tree), Some(Expected::of(&event)), "{frame}");
        if round % 25 == 0 && frame.len() < 1_500 {
            assert_prefixes_truncated(frame.as_bytes());
        }
    }
}

#[test]
fn fuzz_mutations_never_panic_and_agree_with_serde() {
    let long = format!(
        r#"{{"stream":"btcusdt@depth@100ms","data":{{"e":"depthUpdate","E":1723161255208,"s":"BTCUSDT","U":50093239189,"u":50093239202,"b":[{}],"a":[{}]}}}}"#,
        [r#"["61737.63000000","0.00000000"]"#; 7].join(","),
        [
            r#"["61837.64000000","1.54698000"]"#,
            r#"["61839.85000000","0.00000000"]"#
        ]
        .join(",")
    );
    let seeds = [
        SPOT,
        USDM,
        COINM_BARE,
        &long,
        r#"{"data":{"e":"depthUpdate","E":1,"s":"A\"","U":1,"u":2,"b":[["\\",{"U":1}]]},"stream":"x"}"#,
    ];
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut depth_events = 0;
    let mut cases = 0;
    for seed in seeds {
        for _ in 0..6_000 {
            let mut input = seed.as_bytes().to_vec();
            for _ in 0..1 + rng.below(3) {
                mutate(&mut rng, &mut input);
            }
            if agrees_with_serde(&input) {
                depth_events += 1;
            }
            cases += 1;
        }
    }
    // Pure noise as well.
    for _ in 0..4_000 {
        let len = rng.below(64);
        let noise: Vec<u8> = (0..len)
            .map(|_| ALPHABET[rng.below(ALPHABET.len())])
            .collect();
        let _ = scan(&noise);
        cases += 1;
    }
    println!("fuzz: {cases} inputs, {depth_events} still depth events");
    assert_eq!(cases, 34_000);
    assert!(
        depth_events > 1_000,
        "mutations too destructive: {depth_events}"
    );
}

#[test]
fn snapshots_parse_with_serde() {
    let spot = parse_snapshot(
        br#"{"lastUpdateId":1027024,"bids":[["4.00000000","431.00000000"]],"asks":[["4.00000200","12.00000000"],["4.1","1"]]}"#,
    )
    .unwrap();
    assert_eq!(spot.last_update_id, 1_027_024);
    assert_eq!(
        spot.bids,
        vec![PriceLevel {
            price: "4.00000000".into(),
            quantity: "431.00000000".into()
        }]
    );
    assert_eq!(spot.asks.len(), 2);
    assert_eq!((spot.event_time, spot.transaction_time), (None, None));

    let coin_m = parse_snapshot(
        br#"{"lastUpdateId":167006089178,"E":1626916404580,"T":1626916404574,"symbol":"BCHUSD_PERP","pair":"BCHUSD","bids":[],"asks":[["427.9","169"]]}"#,
    )
    .unwrap();
    assert_eq!(coin_m.event_time, Some(1_626_916_404_580));
    assert_eq!(coin_m.transaction_time, Some(1_626_916_404_574));

    match parse_snapshot(br#"{"code":-1121,"msg":"Invalid symbol."}"#) {
        Err(SnapshotError::Rejected(api)) => {
            assert_eq!(api.code, -1121);
            assert_eq!(api.msg, "Invalid symbol.");
            assert_eq!(api.to_string(), "Binance error -1121: Invalid symbol.");
        }
        other => panic!("{other:?}"),
    }
    for malformed in [
        &br#"{"lastUpdateId":-1,"bids":[],"asks":[]}"#[..],
        br#"{"lastUpdateId":1,"bids":[["1","2","3"]],"asks":[]}"#,
        br#"{"lastUpdateId":1,"bids":[["1"]],"asks":[]}"#,
        br#"{"lastUpdateId":1,"bids":[]}"#,
        br#"{"lastUpdateId":1,"bids":[],"asks":[]"#,
    ] {
        assert!(
            matches!(parse_snapshot(malformed), Err(SnapshotError::Malformed(_))),
            "{}",
            String::from_utf8_lossy(malformed)
        );
    }
}

#[test]
fn the_update_id_alone_is_checked_as_the_whole_snapshot_is() {
    let bodies: [&[u8]; 17] = [
        br#"{"lastUpdateId":1027024,"bids":[["4.00000000","431.00000000"]],"asks":[["4.1","1"]]}"#,
        br#"{"lastUpdateId":167006089178,"E":1626916404580,"T":1626916404574,"symbol":"BCHUSD_PERP","pair":"BCHUSD","bids":[],"asks":[["427.9","169"]]}"#,
        br#"  {"asks":[],"bids":[["1\u0030","2"]],"lastUpdateId":7}"#,
        br#"{"code":-1121,"msg":"Invalid symbol."}"#,
        br#"{"lastUpdateId":-1,"bids":[],"asks":[]}"#,
        br#"{"lastUpdateId":1,"bids":[["1","2","3"]],"asks":[]}"#,
        br#"{"lastUpdateId":1,"bids":[["1"]],"asks":[]}"#,
        br#"{"lastUpdateId":1,"bids":[[1,"2"]],"asks":[]}"#,
        br#"{"lastUpdateId":1,"bids":[]}"#,
        br#"{"lastUpdateId":1,"bids":[],"asks":[]"#,
        br#"{"lastUpdateId":1,"lastUpdateId":2,"bids":[],"asks":[]}"#,
        br#"{"lastUpdateId":1,"bids":[],"asks":[],"E":"x"}"#,
        br#"{"lastUpdateId":1,"bids":{},"asks":[]}"#,
        br#"[1,[],[]]"#,
        b"{\"lastUpdateId\":1,\"x\":\"\xff\xfe\",\"bids\":[],\"asks\":[]}",
        br#"{"lastUpdateId":18446744073709551615,"bids":[],"asks":[]} "#,
        br#"{"lastUpdateId":1,"bids":[],"asks":[]} x"#,
    ];
    // Bytes that are not UTF-8 in the value of an unknown key: not JSON (found by fuzzing).
    assert!(parse_snapshot(bodies[14]).is_err());
    for body in bodies {
        let whole = parse_snapshot(body);
        let id = snapshot_last_update_id(body);
        let text = String::from_utf8_lossy(body);
        match (&whole, &id) {
            (Ok(s), Ok(l)) => assert_eq!(s.last_update_id, *l, "{text}"),
            (Err(SnapshotError::Rejected(a)), Err(SnapshotError::Rejected(b))) => {
                assert_eq!(a, b, "{text}");
            }
            (Err(SnapshotError::Malformed(_)), Err(SnapshotError::Malformed(_))) => {}
            _ => panic!("{text}: whole {whole:?}, id alone {id:?}"),
        }
    }
}

fn captures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/captures/binance");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipping: ../shared/captures not found");
        None
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    depth: usize,
    other: usize,
    snapshots: usize,
}

/// Checks one recorded frame against serde_json and counts what it was.
fn check_recorded(json: &[u8], counts: &mut Counts, at: &str) {
    let frame: Value = serde_json::from_slice(json).unwrap_or_else(|e| panic!("{at}: {e}"));
    let scanned = scan(json).unwrap_or_else(|e| panic!("{at}: {e}"));
    match (oracle(&frame), scanned) {
        (Some(expected), Scanned::Depth(event)) => {
            assert_eq!(Expected::of(&event), expected, "{at}");
            let reparsed: Value = serde_json::from_slice(event.event_bytes).unwrap();
            assert_eq!(Some(&reparsed), frame.get("data"), "{at}");
            if counts.depth == 0 {
                assert_prefixes_truncated(json);
            }
            counts.depth += 1;
        }
        (
            None,
            Scanned::Other {
                stream, event_type, ..
            },
        ) => {
            assert_eq!(stream, frame.get("stream").and_then(Value::as_str), "{at}");
            let data = frame.get("data").unwrap_or(&frame);
            assert_eq!(event_type, data.get("e").and_then(Value::as_str), "{at}");
            if frame.get("lastUpdateId").is_some() {
                check_snapshot(json, &frame, at);
                counts.snapshots += 1;
            }
            counts.other += 1;
        }
        (expected, scanned) => panic!("{at}: serde_json {expected:?}, scan {scanned:?}"),
    }
}

fn check_snapshot(json: &[u8], frame: &Value, at: &str) {
    let snapshot = parse_snapshot(json).unwrap_or_else(|e| panic!("{at}: {e}"));
    assert_eq!(
        snapshot_last_update_id(json).ok(),
        Some(snapshot.last_update_id),
        "{at}"
    );
    assert_eq!(
        Some(snapshot.last_update_id),
        frame["lastUpdateId"].as_u64()
    );
    assert_eq!(snapshot.event_time, frame.get("E").and_then(Value::as_u64));
    assert_eq!(
        snapshot.transaction_time,
        frame.get("T").and_then(Value::as_u64)
    );
    for (side, levels) in [("bids", &snapshot.bids), ("asks", &snapshot.asks)] {
        let recorded = frame[side].as_array().unwrap();
        assert_eq!(levels.len(), recorded.len(), "{at} {side}");
        for (level, pair) in levels.iter().zip(recorded) {
            assert_eq!(pair[0].as_str(), Some(level.price.as_str()));
            assert_eq!(pair[1].as_str(), Some(level.quantity.as_str()));
        }
    }
}

#[test]
fn hftbacktest_recordings_match_serde() {
    let Some(dir) = captures_dir() else {
        return;
    };
    let files = [
        ("spot_btcusdt_20240808.gz", 3_451),
        ("usdm_btcusdt_20240808.gz", 6_551),
        ("cm_btcusd_perp_20240808.gz", 26_847),
    ];
    for (name, expected_depth) in files {
        let mut text = String::new();
        GzDecoder::new(fs::File::open(dir.join("hftbacktest").join(name)).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        let mut counts = Counts::default();
        for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
            let (_, json) = line.split_once(' ').unwrap();
            check_recorded(
                json.as_bytes(),
                &mut counts,
                &format!("{name}:{}", number + 1),
            );
        }
        println!("{name}: {counts:?}");
        assert_eq!(counts.depth, expected_depth, "{name}");
        assert_eq!(counts.snapshots, 1, "{name}");
    }
}

#[test]
fn cryptofeed_recordings_match_serde() {
    let Some(dir) = captures_dir() else {
        return;
    };
    let venues = [
        ("BINANCE", 177, 4),
        ("BINANCE_FUTURES", 764, 4),
        ("BINANCE_DELIVERY", 2_047, 10),
        ("BINANCE_US", 336, 4),
    ];
    for (venue, expected_depth, expected_snapshots) in venues {
        let ws =
            fs::read_to_string(dir.join("cryptofeed").join(format!("{venue}.ws.1.0"))).unwrap();
        let mut counts = Counts::default();
        for (number, line) in ws.lines().enumerate().skip(1) {
            if line.is_empty() {
                continue;
            }
            let (_, json) = line.split_once(": ").unwrap();
            check_recorded(
                json.as_bytes(),
                &mut counts,
                &format!("{venue}.ws:{}", number + 1),
            );
        }
        let http =
            fs::read_to_string(dir.join("cryptofeed").join(format!("{venue}.http.0.0"))).unwrap();
        let mut snapshots = 0;
        for (number, line) in http.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
            let (_, reply) = line.split_once(" -> ").unwrap();
            let (_, json) = reply.split_once(": ").unwrap();
            let frame: Value = serde_json::from_str(json).unwrap();
            check_snapshot(
                json.as_bytes(),
                &frame,
                &format!("{venue}.http:{}", number + 1),
            );
            snapshots += 1;
        }
        println!("{venue}: {counts:?}, {snapshots} REST snapshots");
        assert_eq!(counts.depth, expected_depth, "{venue}");
        assert_eq!(snapshots, expected_snapshots, "{venue}");
    }
}
