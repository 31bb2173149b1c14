//! A backtest consumer fed by replay: a recorded capture goes through the same decode,
//! session and sequencer as live, and the strategy sees exactly what it would have seen,
//! gaps included.
//!
//! ```sh
//! cargo run --release --example backtest -- captures/moldudp64-loss.pcap
//! ```
//!
//! The "strategy" here counts messages and payload bytes per stream and the messages lost in
//! gaps: a stand-in for a book builder or a signal.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use gapless::drive::replay::{ReplayOptions, replay};
use gapless::venue::Wire;

/// What the strategy keeps per stream.
#[derive(Debug, Default)]
struct Book {
    messages: u64,
    payload_bytes: u64,
    lost: u64,
    last_seq: Option<u64>,
}

/// Receives the replay's JSON lines and feeds each event to the strategy.
#[derive(Default)]
struct Strategy {
    pending: Vec<u8>,
    books: BTreeMap<String, Book>,
}

impl Strategy {
    fn on_line(&mut self, line: &[u8]) -> io::Result<()> {
        let event: serde_json::Value = serde_json::from_slice(line).map_err(io::Error::other)?;
        let text = |key| event.get(key).and_then(serde_json::Value::as_str);
        let number = |key| event.get(key).and_then(serde_json::Value::as_u64);
        let stream = text("stream").unwrap_or("").to_owned();
        let book = self.books.entry(stream).or_default();
        match (number("seq"), text("event")) {
            (Some(seq), _) => {
                book.messages += 1;
                book.payload_bytes += text("payload").map_or(0, |p| p.len() as u64 / 2);
                book.last_seq = Some(seq);
            }
            (None, Some("gap")) => {
                let (from, to) = (number("from"), number("to"));
                if let (Some(from), Some(to)) = (from, to) {
                    book.lost += to - from + 1;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Write for Strategy {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.on_line(&line)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("captures/moldudp64-loss.pcap"),
        PathBuf::from,
    );
    let options = ReplayOptions {
        wire: Some(Wire::MoldUdp64),
        destinations: Vec::new(),
        channels: Vec::new(),
        venue: "backtest".to_owned(),
        speed: None,
        from_start: true,
        progress: false,
    };
    let mut strategy = Strategy::default();
    let summary = replay(&path, &options, Some(&mut strategy))?;
    for (stream, book) in &strategy.books {
        println!(
            "{stream}: {} messages, {} payload bytes, {} lost in gaps, last seq {:?}",
            book.messages, book.payload_bytes, book.lost, book.last_seq
        );
    }
    println!("replay: {} messages delivered", summary.delivered);
    Ok(())
}
