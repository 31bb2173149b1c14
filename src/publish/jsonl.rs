//! The JSON-lines form of consumer events, shared by the jsonl sink and replay output.
//!
//! One object a line:
//!
//! | event | line |
//! |---|---|
//! | message | `{"venue":V,"stream":S,"seq":N,"payload":"<hex>"}` (plus `"snapshot":true` for snapshot messages) |
//! | range frame | `{"venue":V,"stream":S,"first":U,"last":u,"payload":{...the event's JSON...}}` |
//! | gap | `{"venue":V,"stream":S,"event":"gap","from":F,"to":T}` |
//! | state | `{"venue":V,"stream":S,"event":"state","state":"synced"}` |
//! | snapshot begin | `{"venue":V,"stream":S,"event":"snapshot_begin"}` |
//! | snapshot end | `{"venue":V,"stream":S,"event":"snapshot_end","next":N}` |
//! | overrun | `{"venue":V,"stream":S,"event":"overrun","from":F,"to":T,"events":K}` |
//! | heartbeat | not written |

use std::fmt::Write as _;
use std::io::{self, Write};

use super::Event;

/// Venue and stream names by consumer stream id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamNames {
    names: Vec<(String, String)>,
}

impl StreamNames {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names stream id `id`.
    pub fn set(&mut self, id: u16, venue: &str, stream: &str) {
        let i = usize::from(id);
        if self.names.len() <= i {
            self.names.resize(i + 1, (String::new(), String::new()));
        }
        if let Some(slot) = self.names.get_mut(i) {
            *slot = (venue.to_string(), stream.to_string());
        }
    }

    /// The venue and stream names of `id` (empty when unknown).
    pub fn get(&self, id: u16) -> (&str, &str) {
        self.names
            .get(usize::from(id))
            .map_or(("", ""), |(v, s)| (v.as_str(), s.as_str()))
    }
}

/// Formats events as JSON lines into a reusable buffer.
#[derive(Debug, Default)]
pub struct JsonlFormatter {
    line: String,
    receive_time: bool,
}

impl JsonlFormatter {
    /// A formatter with an empty line buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A formatter that also writes each message's and frame's receive time, `recv_ns`
    /// (wall-clock nanoseconds since the Unix epoch, the kernel's timestamp where it gives
    /// one), when it is known.
    pub fn with_receive_time() -> Self {
        Self {
            line: String::new(),
            receive_time: true,
        }
    }

    /// Formats `event` (with its newline) and returns the line, or `None` for events that
    /// have no JSON-lines form (heartbeats).
    pub fn format(&mut self, names: &StreamNames, event: &Event<'_>) -> Option<&str> {
        let line = &mut self.line;
        line.clear();
        let (venue, stream) = names.get(event.stream());
        line.push_str("{\"venue\":");
        push_json_string(line, venue);
        line.push_str(",\"stream\":");
        push_json_string(line, stream);
        // Writing into a String cannot fail; the results are ignored for that reason.
        match *event {
            Event::Message {
                seq,
                snapshot,
                payload,
                recv_ns,
                ..
            } => {
                let _ = write!(line, ",\"seq\":{seq}");
                if self.receive_time && recv_ns > 0 {
                    let _ = write!(line, ",\"recv_ns\":{recv_ns}");
                }
                if snapshot {
                    line.push_str(",\"snapshot\":true");
                }
                line.push_str(",\"payload\":\"");
                push_hex(line, payload);
                line.push('"');
            }
            Event::Range {
                first,
                last,
                payload,
                recv_ns,
                ..
            } => {
                let _ = write!(line, ",\"first\":{first},\"last\":{last}");
                if self.receive_time && recv_ns > 0 {
                    let _ = write!(line, ",\"recv_ns\":{recv_ns}");
                }
                match std::str::from_utf8(payload) {
                    Ok(text) if looks_like_object(text) => {
                        line.push_str(",\"payload\":");
                        line.push_str(text.trim());
                    }
                    _ => {
                        line.push_str(",\"payload_hex\":\"");
                        push_hex(line, payload);
                        line.push('"');
                    }
                }
            }
            Event::Gap { from, to, .. } => {
                let _ = write!(line, ",\"event\":\"gap\",\"from\":{from},\"to\":{to}");
            }
            Event::State { state, .. } => {
                let _ = write!(
                    line,
                    ",\"event\":\"state\",\"state\":\"{}\"",
                    state.as_str()
                );
            }
            Event::SnapshotBegin { .. } => line.push_str(",\"event\":\"snapshot_begin\""),
            Event::SnapshotEnd { next, .. } => {
                let _ = write!(line, ",\"event\":\"snapshot_end\",\"next\":{next}");
            }
            Event::Overrun {
                from, to, events, ..
            } => {
                let _ = write!(
                    line,
                    ",\"event\":\"overrun\",\"from\":{from},\"to\":{to},\"events\":{events}"
                );
            }
            Event::Epoch { label, .. } => {
                line.push_str(",\"event\":\"epoch\",\"label\":");
                push_json_string(line, &String::from_utf8_lossy(label));
            }
            Event::Heartbeat { .. } => return None,
        }
        line.push_str("}\n");
        Some(line.as_str())
    }

    /// Formats `event` and writes it to `out`.
    pub fn write(
        &mut self,
        names: &StreamNames,
        event: &Event<'_>,
        out: &mut impl Write,
    ) -> io::Result<()> {
        match self.format(names, event) {
            Some(line) => out.write_all(line.as_bytes()),
            None => Ok(()),
        }
    }
}

/// A cheap structural check: a JSON object with balanced braces outside strings. Range
/// payloads come from a venue's JSON; anything else is written as hex instead.
fn looks_like_object(text: &str) -> bool {
    let t = text.trim();
    if !(t.starts_with('{') && t.ends_with('}')) || t.contains('\n') {
        return false;
    }
    let (mut depth, mut in_string, mut escaped) = (0i64, false, false);
    for b in t.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                (false, c) if c < 0x20 => return false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0 && !in_string
}

fn push_hex(line: &mut String, bytes: &[u8]) {
    fn digit(nibble: u8) -> char {
        char::from(if nibble < 10 {
            b'0' + nibble
        } else {
            b'a' + (nibble & 0xf) - 10
        })
    }
    for &b in bytes {
        line.push(digit(b >> 4));
        line.push(digit(b & 0xf));
    }
}

pub(crate) fn push_json_string(line: &mut String, s: &str) {
    line.push('"');
    for c in s.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(line, "\\u{:04x}", c as u32);
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::StreamState;

    fn names() -> StreamNames {
        let mut n = StreamNames::new();
        n.set(0, "nasdaq", "itch-a");
        n.set(2, "binance", "btcusdt");
        n
    }

    #[test]
    fn every_event_kind() {
        let n = names();
        let mut f = JsonlFormatter::new();
        let cases: Vec<(Event<'_>, &str)> = vec![
            (
                Event::Message {
                    stream: 0,
                    seq: 7,
                    recv_ns: 1,
                    snapshot: false,
                    payload: &[0xab, 0x01],
                },
                r#"{"venue":"nasdaq","stream":"itch-a","seq":7,"payload":"ab01"}"#,
            ),
            (
                Event::Message {
                    stream: 0,
                    seq: 0,
                    recv_ns: 1,
                    snapshot: true,
                    payload: b"",
                },
                r#"{"venue":"nasdaq","stream":"itch-a","seq":0,"snapshot":true,"payload":""}"#,
            ),
            (
                Event::Range {
                    stream: 2,
                    first: 5,
                    last: 9,
                    recv_ns: 0,
                    payload: br#"{"U":5,"s":"a}"}"#,
                },
                r#"{"venue":"binance","stream":"btcusdt","first":5,"last":9,"payload":{"U":5,"s":"a}"}}"#,
            ),
            (
                Event::Range {
                    stream: 2,
                    first: 5,
                    last: 9,
                    recv_ns: 0,
                    payload: b"{oops",
                },
                r#"{"venue":"binance","stream":"btcusdt","first":5,"last":9,"payload_hex":"7b6f6f7073"}"#,
            ),
            (
                Event::Gap {
                    stream: 0,
                    from: 3,
                    to: 4,
                },
                r#"{"venue":"nasdaq","stream":"itch-a","event":"gap","from":3,"to":4}"#,
            ),
            (
                Event::State {
                    stream: 0,
                    state: StreamState::Synced,
                },
                r#"{"venue":"nasdaq","stream":"itch-a","event":"state","state":"synced"}"#,
            ),
            (
                Event::SnapshotBegin { stream: 0 },
                r#"{"venue":"nasdaq","stream":"itch-a","event":"snapshot_begin"}"#,
            ),
            (
                Event::SnapshotEnd {
                    stream: 0,
                    next: 11,
                },
                r#"{"venue":"nasdaq","stream":"itch-a","event":"snapshot_end","next":11}"#,
            ),
            (
                Event::Overrun {
                    stream: 0,
                    from: 1,
                    to: 2,
                    events: 3,
                },
                r#"{"venue":"nasdaq","stream":"itch-a","event":"overrun","from":1,"to":2,"events":3}"#,
            ),
        ];
        for (event, want) in cases {
            assert_eq!(f.format(&n, &event), Some(format!("{want}\n").as_str()));
        }
        assert_eq!(f.format(&n, &Event::Heartbeat { stream: 0, next: 1 }), None);
    }

    #[test]
    fn names_are_escaped() {
        let mut n = StreamNames::new();
        n.set(0, "a\"b", "c\\d\n");
        let mut f = JsonlFormatter::new();
        let line = f.format(&n, &Event::SnapshotBegin { stream: 0 }).unwrap();
        assert_eq!(
            line,
            "{\"venue\":\"a\\\"b\",\"stream\":\"c\\\\d\\u000a\",\"event\":\"snapshot_begin\"}\n"
        );
    }
}
