//! `gapless top`: a live table of a running daemon's streams and consumers, read from its
//! metrics endpoint and redrawn in place, in the spirit of AeronStat and `vector top`.
//!
//! Each refresh fetches `/metrics` (text format) over one HTTP/1.1 request with a deadline,
//! keeps the `gapless_` series it shows, and draws per stream: state, messages a second,
//! gaps, messages missing now, recovered, lost; and per consumer its queue depth and
//! overruns. Rates are the difference between two scrapes over the time between them.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest response read.
const MAX_RESPONSE: u64 = 16 << 20;

/// One scrape: series name and labels (as written) to value.
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    series: BTreeMap<(String, String), f64>,
}

impl Scrape {
    /// Reads the text exposition format, keeping the `gapless_` samples.
    pub fn parse(text: &str) -> Self {
        let mut series = BTreeMap::new();
        for line in text.lines() {
            if !line.starts_with("gapless_") {
                continue;
            }
            let (key, value) = match line.rsplit_once(' ') {
                Some(pair) => pair,
                None => continue,
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match key.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (key, ""),
            };
            series.insert((name.to_owned(), labels.to_owned()), value);
        }
        Self { series }
    }

    fn get(&self, name: &str, labels: &str) -> f64 {
        self.series
            .get(&(name.to_owned(), labels.to_owned()))
            .copied()
            .unwrap_or(0.0)
    }

    /// The label sets of `name`.
    fn labels_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.series
            .keys()
            .filter(move |(n, _)| n == name)
            .map(|(_, l)| l.as_str())
    }
}

/// The value of `key` in a label set such as `venue="a",stream="b"`.
fn label<'a>(labels: &'a str, key: &str) -> &'a str {
    labels
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map_or("", |(_, v)| v.trim_matches('"'))
}

/// The table for `now`, with rates against `before` taken `elapsed` earlier.
pub fn render(now: &Scrape, before: Option<&Scrape>, elapsed: Duration, source: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!("gapless top - {source} - Ctrl-C quits\n\n"));
    out.push_str(&format!(
        "{:<32} {:<20} {:>12} {:>8} {:>10} {:>10} {:>8}\n",
        "STREAM", "STATE", "MSG/S", "GAPS", "MISSING", "RECOVERED", "LOST"
    ));
    let secs = elapsed.as_secs_f64().max(1e-3);
    let mut streams: Vec<&str> = now.labels_of("gapless_messages_received_total").collect();
    streams.sort_unstable();
    for labels in streams {
        let name = format!("{}/{}", label(labels, "venue"), label(labels, "stream"));
        let state = now
            .labels_of("gapless_stream_state")
            .filter(|l| l.starts_with(&format!("{labels},")))
            .find(|l| now.get("gapless_stream_state", l) >= 1.0)
            .map_or("?", |l| label(l, "state"));
        let received = now.get("gapless_messages_received_total", labels);
        let rate = before.map_or(0.0, |b| {
            (received - b.get("gapless_messages_received_total", labels)).max(0.0) / secs
        });
        out.push_str(&format!(
            "{:<32} {:<20} {:>12.0} {:>8} {:>10} {:>10} {:>8}\n",
            name,
            state,
            rate,
            now.get("gapless_gaps_detected_total", labels),
            now.get("gapless_messages_missing", labels),
            now.get("gapless_messages_recovered_total", labels),
            now.get("gapless_messages_lost_total", labels),
        ));
    }
    out.push_str(&format!(
        "\n{:<48} {:>14} {:>10}\n",
        "CONSUMER", "QUEUE BYTES", "OVERRUNS"
    ));
    for labels in now.labels_of("gapless_consumer_queue_depth_bytes") {
        out.push_str(&format!(
            "{:<48} {:>14} {:>10}\n",
            label(labels, "consumer"),
            now.get("gapless_consumer_queue_depth_bytes", labels),
            now.get("gapless_consumer_overruns_total", labels),
        ));
    }
    out
}

/// Fetches `/metrics` from `addr`, with a deadline.
pub fn scrape(addr: SocketAddr) -> io::Result<Scrape> {
    let mut stream = TcpStream::connect_timeout(&addr, SCRAPE_TIMEOUT)?;
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    stream.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    stream.take(MAX_RESPONSE).read_to_string(&mut body)?;
    let Some((head, text)) = body.split_once("\r\n\r\n") else {
        return Err(io::Error::other("no HTTP response"));
    };
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or("");
        return Err(io::Error::other(format!("the endpoint answered {status}")));
    }
    Ok(Scrape::parse(text))
}

/// Redraws the table every `every` until `rounds` draws (`None`: until interrupted).
pub fn run(addr: SocketAddr, every: Duration, rounds: Option<u64>) -> io::Result<()> {
    let source = format!("http://{addr}/metrics");
    let mut before: Option<(Scrape, Instant)> = None;
    let mut drawn = 0u64;
    loop {
        let text = match scrape(addr) {
            Ok(now) => {
                let (prev, elapsed) = match &before {
                    Some((s, at)) => (Some(s), at.elapsed()),
                    None => (None, every),
                };
                let text = render(&now, prev, elapsed, &source);
                before = Some((now, Instant::now()));
                text
            }
            Err(e) => format!("gapless top - {source}\n\ncannot scrape: {e}\n"),
        };
        let mut out = io::stdout().lock();
        // Home, clear the screen, draw.
        write!(out, "\x1b[H\x1b[2J{text}")?;
        out.flush()?;
        drawn += 1;
        if rounds.is_some_and(|r| drawn >= r) {
            return Ok(());
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP gapless_messages_received_total Messages received.
gapless_messages_received_total{venue=\"nasdaq\",stream=\"itch-a\"} 1500
gapless_gaps_detected_total{venue=\"nasdaq\",stream=\"itch-a\"} 4
gapless_messages_missing{venue=\"nasdaq\",stream=\"itch-a\"} 2
gapless_stream_state{venue=\"nasdaq\",stream=\"itch-a\",state=\"unseen\"} 0
gapless_stream_state{venue=\"nasdaq\",stream=\"itch-a\",state=\"recovering\"} 1
gapless_consumer_queue_depth_bytes{consumer=\"unix:/run/g.sock\"} 4096
gapless_consumer_overruns_total{consumer=\"unix:/run/g.sock\"} 3
";

    #[test]
    fn the_table_shows_state_rate_and_consumers() {
        let before = Scrape::parse(&TEXT.replace("} 1500", "} 500"));
        let now = Scrape::parse(TEXT);
        let table = render(&now, Some(&before), Duration::from_secs(2), "x");
        let row = table
            .lines()
            .find(|l| l.starts_with("nasdaq/itch-a"))
            .unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            ["nasdaq/itch-a", "recovering", "500", "4", "2", "0", "0"]
        );
        let consumer = table.lines().find(|l| l.starts_with("unix:")).unwrap();
        assert_eq!(
            consumer.split_whitespace().collect::<Vec<_>>(),
            ["unix:/run/g.sock", "4096", "3"]
        );
    }
}
