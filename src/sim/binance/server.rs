//! The simulator's WebSocket server, on 127.0.0.1 only.
//!
//! `/stream?streams=<s1>/<s2>` (combined, `{"stream":..,"data":..}`) and
//! `/ws/<s1>[/<s2>]` (raw). A stream `<symbol>@<kind>[@<speed>]` gets every
//! record of that symbol and kind, under the name asked for. One thread per
//! client, on a non-blocking socket, waiting at most [`WAIT_SLICE`] at once.

use std::io::ErrorKind;
use std::mem;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::http::StatusCode;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use super::faults::{EventFaults, Injection, InjectionKind};
use super::feed::{Entry, now_ms};
use super::handle::{accept_loop, later};
use super::record::query_value;
use super::{Counters, Shared, lock};

/// Longest wait of a client thread before it looks at its socket again.
const WAIT_SLICE: Duration = Duration::from_millis(20);
/// Records a client thread takes from the log at once.
const BATCH: usize = 256;
/// Frames a slow client may have queued before it counts as lagging.
const WRITE_LIMIT: usize = 8 << 20;

/// Accepts WebSocket clients, one thread each, until stopped.
pub(crate) fn ws_accept(shared: &Arc<Shared>, listener: TcpListener) {
    let mut index = 0u64;
    accept_loop(shared, &listener, |stream| {
        let (s, i) = (Arc::clone(shared), index);
        index += 1;
        let spawned = thread::Builder::new()
            .name(format!("binance-ws-{i}"))
            .spawn(move || client(&s, stream, i));
        let mut threads = lock(&shared.client_threads);
        threads.retain(|t| !t.is_finished());
        threads.extend(spawned.ok());
    });
}

/// One requested stream, resolved.
struct Sub {
    symbol: usize,
    kind: String,
    name: String,
}

/// The stream names of a request target and whether they are combined.
fn requested_streams(target: &str) -> Option<(Vec<String>, bool)> {
    let decoded = target
        .replace("%40", "@")
        .replace("%2F", "/")
        .replace("%2f", "/");
    let path = decoded.split('?').next().unwrap_or_default();
    let (list, combined) = match path {
        "/stream" => (query_value(&decoded, "streams")?, true),
        _ => (path.strip_prefix("/ws/")?, false),
    };
    let names: Vec<String> = list
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    (!names.is_empty()).then_some((names, combined))
}

fn client(shared: &Shared, stream: TcpStream, index: u64) {
    let mut target = None;
    // The error type is fixed by tungstenite's `Callback`.
    #[allow(clippy::result_large_err)]
    let callback = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
        let path = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default();
        if requested_streams(&path).is_none() {
            let mut refusal = ErrorResponse::new(Some("unknown stream path".to_owned()));
            *refusal.status_mut() = StatusCode::NOT_FOUND;
            return Err(refusal);
        }
        target = Some(path);
        Ok(response)
    };
    let config = WebSocketConfig::default().max_write_buffer_size(WRITE_LIMIT);
    let Ok(ws) = tungstenite::accept_hdr_with_config(stream, callback, Some(config)) else {
        return;
    };
    let Some((names, combined)) = target.as_deref().and_then(requested_streams) else {
        return;
    };
    if ws.get_ref().set_nonblocking(true).is_err() {
        return;
    }
    let mut feed = lock(&shared.feed);
    let subs = names
        .into_iter()
        .filter_map(|name| {
            let mut parts = name.split('@');
            let symbol = feed.symbol_index(&parts.next()?.to_ascii_lowercase())?;
            Some(Sub {
                symbol,
                kind: parts.next()?.to_owned(),
                name,
            })
        })
        .collect();
    let live = feed.next_seq;
    let cursor = if index == 0 {
        live
    } else {
        live.saturating_sub(shared.config.reconnect_overlap)
            .max(feed.oldest_seq())
    };
    feed.cursors.insert(index, cursor);
    drop(feed);
    shared.space_cv.notify_all();
    Counters::add(&shared.counters.connections, 1);
    Counters::add(&shared.counters.active, 1);
    let faults = &shared.config.faults;
    let mut conn = Conn {
        shared,
        ws,
        index,
        subs,
        combined,
        cursor,
        backlog_end: live,
        events: EventFaults::new(faults, index),
        connection_faults: faults.affects_connection(index),
        sent: 0,
        feed_done: false,
        batch: Vec::new(),
        out: Vec::new(),
        log: Vec::new(),
        silent_until: None,
        shutdown_at: None,
        closing_until: None,
        next_ping: shared
            .config
            .ping_interval
            .map(|p| later(Instant::now(), p)),
    };
    conn.run();
    lock(&shared.feed).cursors.remove(&index);
    shared.space_cv.notify_all();
    Counters::sub(&shared.counters.active, 1);
}

/// A WebSocket client's thread state.
struct Conn<'a> {
    shared: &'a Shared,
    ws: WebSocket<TcpStream>,
    index: u64,
    subs: Vec<Sub>,
    combined: bool,
    cursor: u64,
    /// The live head when the connection began: records before it are its backlog.
    backlog_end: u64,
    events: EventFaults,
    connection_faults: bool,
    sent: u64,
    feed_done: bool,
    batch: Vec<Arc<Entry>>,
    out: Vec<Arc<Entry>>,
    log: Vec<Injection>,
    /// Silent until then (`Some(None)`: for good).
    silent_until: Option<Option<Instant>>,
    shutdown_at: Option<Instant>,
    closing_until: Option<Instant>,
    next_ping: Option<Instant>,
}

/// Whether a client thread goes on.
#[derive(PartialEq)]
enum Flow {
    Go,
    End,
}

impl Conn<'_> {
    fn run(&mut self) {
        while let Flow::Go = self.step() {}
    }

    fn step(&mut self) -> Flow {
        if self.shared.stopping() && self.closing_until.is_none() {
            self.start_close(CloseCode::Away, "simulator stopping");
        }
        if let Flow::End = self.read_client() {
            return Flow::End;
        }
        let now = Instant::now();
        if let Some(until) = self.closing_until {
            let _ = self.ws.flush();
            if now >= until {
                return Flow::End;
            }
            thread::sleep(WAIT_SLICE / 4);
            return Flow::Go;
        }
        if self.shutdown_at.is_some_and(|at| now >= at) {
            self.start_close(CloseCode::Away, "server shutdown");
            return Flow::Go;
        }
        if let Some(until) = self.silent_until {
            if until.is_some_and(|u| now >= u) {
                self.silent_until = None;
            } else {
                let _ = self.ws.flush();
                self.skip_to_live();
                thread::sleep(WAIT_SLICE);
                return Flow::Go;
            }
        }
        if let (Some(at), Some(every)) = (self.next_ping, self.shared.config.ping_interval)
            && now >= at
        {
            let payload = now_ms().to_string().into_bytes();
            if self.send(Message::Ping(payload.into())).is_err() {
                return Flow::End;
            }
            Counters::add(&self.shared.counters.pings, 1);
            self.next_ping = Some(later(now, every));
        }
        match self.ws.flush() {
            Ok(()) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
                return Flow::Go;
            }
            Err(_) => return Flow::End,
        }
        if !self.fetch() {
            Counters::add(&self.shared.counters.lagged, 1);
            return Flow::End;
        }
        self.send_batch()
    }

    /// Reads what the client sent: pongs are counted, pings answered, a
    /// close frame ends the connection.
    fn read_client(&mut self) -> Flow {
        loop {
            match self.ws.read() {
                Ok(Message::Pong(_)) => Counters::add(&self.shared.counters.pongs, 1),
                Ok(Message::Close(_)) => {
                    let _ = self.ws.flush();
                    return Flow::End;
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                    return Flow::Go;
                }
                Err(_) => return Flow::End,
            }
        }
    }

    /// Takes the next records from the log, waiting a little if there are
    /// none. False if the client fell out of the log.
    fn fetch(&mut self) -> bool {
        self.batch.clear();
        let mut feed = lock(&self.shared.feed);
        if feed.next_seq == self.cursor {
            let wait = self
                .next_ping
                .map_or(WAIT_SLICE, |p| p.saturating_duration_since(Instant::now()));
            let slice = wait.clamp(Duration::from_millis(1), WAIT_SLICE);
            feed = self
                .shared
                .data_cv
                .wait_timeout(feed, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let Some(next) = feed.read_from(self.cursor, BATCH, &mut self.batch) else {
            return false;
        };
        self.feed_done = feed.finished && next == feed.next_seq;
        self.cursor = next;
        feed.cursors.insert(self.index, next);
        drop(feed);
        self.shared.space_cv.notify_all();
        true
    }

    fn skip_to_live(&mut self) {
        let mut feed = lock(&self.shared.feed);
        self.cursor = feed.next_seq;
        feed.cursors.insert(self.index, self.cursor);
        drop(feed);
        self.shared.space_cv.notify_all();
    }

    fn send_batch(&mut self) -> Flow {
        let batch = mem::take(&mut self.batch);
        let mut pending = mem::take(&mut self.out);
        for entry in &batch {
            if self.withheld(entry) {
                if let Some(ids) = entry.ids {
                    self.log.push(Injection {
                        connection: Some(self.index),
                        symbol: Some(entry.symbol_name.clone()),
                        kind: InjectionKind::LostOnReconnect {
                            update_id: ids.last,
                        },
                    });
                }
                continue;
            }
            if self.subscription(entry).is_some() {
                self.events
                    .apply(Arc::clone(entry), &mut pending, &mut self.log);
            }
        }
        if batch.is_empty() && self.feed_done {
            self.events.release(&mut pending);
        }
        lock(&self.shared.injected).list.append(&mut self.log);
        let mut flow = Flow::Go;
        for out in pending.drain(..) {
            let frame = match self.subscription(&out) {
                Some(sub) if self.combined => {
                    format!(r#"{{"stream":"{}","data":{}}}"#, sub.name, out.data)
                }
                _ => out.data.clone(),
            };
            if self.send(Message::text(frame)).is_err() {
                flow = Flow::End;
                break;
            }
            self.sent += 1;
            flow = self.connection_fault();
            let paused = self.silent_until.is_some() || self.closing_until.is_some();
            if flow == Flow::End || paused {
                break;
            }
        }
        pending.clear();
        (self.batch, self.out) = (batch, pending);
        flow
    }

    /// Whether `entry` is a backlog event of a symbol that loses it on reconnect.
    fn withheld(&self, entry: &Entry) -> bool {
        self.index > 0
            && entry.seq < self.backlog_end
            && entry.ids.is_some()
            && self.subscription(entry).is_some()
            && self
                .shared
                .config
                .faults
                .loses_on_reconnect(&entry.symbol_name)
    }

    fn subscription(&self, entry: &Entry) -> Option<&Sub> {
        self.subs
            .iter()
            .find(|s| s.symbol == entry.symbol && *s.kind == *entry.channel)
    }

    /// Applies the connection faults due after `self.sent` events.
    fn connection_fault(&mut self) -> Flow {
        let faults = &self.shared.config.faults;
        if !self.connection_faults {
            return Flow::Go;
        }
        let (sent, now) = (self.sent, Instant::now());
        let record = |kind| {
            let injection = Injection {
                connection: Some(self.index),
                symbol: None,
                kind,
            };
            lock(&self.shared.injected).list.push(injection);
        };
        if faults.disconnect_point(self.index) == Some(sent) {
            record(InjectionKind::Disconnected { after_events: sent });
            if self.ws.get_ref().set_nonblocking(false).is_ok() {
                let _ = self.ws.flush();
            }
            let _ = self.ws.get_ref().shutdown(Shutdown::Both);
            return Flow::End;
        }
        if faults.silence_after == Some(sent) {
            record(InjectionKind::Silenced {
                after_events: sent,
                duration: faults.silence_for,
            });
            self.silent_until = Some(faults.silence_for.map(|d| later(now, d)));
        }
        if faults.shutdown_after == Some(sent) {
            record(InjectionKind::ServerShutdown { after_events: sent });
            let event = format!(r#"{{"e":"serverShutdown","E":{}}}"#, now_ms());
            self.shutdown_at = Some(later(now, faults.shutdown_grace));
            if self.send(Message::text(event)).is_err() {
                return Flow::End;
            }
        }
        Flow::Go
    }

    /// Queues a frame; a full socket is not an error (the frame waits).
    fn send(&mut self, message: Message) -> Result<(), ()> {
        let counted = matches!(message, Message::Text(_));
        match self.ws.write(message) {
            Ok(()) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return Err(()),
        }
        if counted {
            Counters::add(&self.shared.counters.frames, 1);
        }
        Ok(())
    }

    fn start_close(&mut self, code: CloseCode, reason: &'static str) {
        let _ = self.ws.close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }));
        self.closing_until = Some(Instant::now() + Duration::from_secs(1));
    }
}
