//! The simulator's REST server: `GET /api/v3/depth`, `/fapi/v1/depth` and
//! `/dapi/v1/depth` with `symbol` and `limit`, one request per connection,
//! `X-MBX-USED-WEIGHT-1M` on every answer, and the REST faults (429 with
//! `Retry-After`, stale snapshots).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::faults::{Injection, InjectionKind};
use super::feed::now_ms;
use super::handle::accept_loop;
use super::record::query_value;
use super::{Counters, Shared, lock};

/// Answers HTTP requests, one at a time, until stopped.
pub(crate) fn http_accept(shared: &Arc<Shared>, listener: TcpListener) {
    let mut state = HttpState::default();
    accept_loop(shared, &listener, |stream| {
        handle_http(shared, stream, &mut state)
    });
}

/// What the HTTP thread remembers between requests.
#[derive(Debug, Default)]
struct HttpState {
    minute: u64,
    used_weight: u32,
    rate_limited: u32,
    snapshots: HashMap<usize, u32>,
}

/// Request weight of a depth request, by `limit` (Binance spot's table).
fn weight(limit: usize) -> u32 {
    match limit {
        0..=100 => 5,
        101..=500 => 25,
        501..=1000 => 50,
        _ => 250,
    }
}

fn handle_http(shared: &Shared, mut stream: TcpStream, state: &mut HttpState) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + Duration::from_secs(2);
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(n) if n > 0 && head.len() + n <= 8192 && Instant::now() < deadline => {
                head.extend_from_slice(buf.get(..n).unwrap_or_default())
            }
            _ => return,
        }
    }
    Counters::add(&shared.counters.http, 1);
    let text = String::from_utf8_lossy(&head);
    let mut words = text.split_whitespace();
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let minute = now_ms() / 60_000;
    if minute != state.minute {
        (state.minute, state.used_weight) = (minute, 0);
    }
    let path = target.split('?').next().unwrap_or_default();
    if method != "GET" || !matches!(path, "/api/v3/depth" | "/fapi/v1/depth" | "/dapi/v1/depth") {
        return respond(
            shared,
            &mut stream,
            404,
            "",
            r#"{"code":-1,"msg":"Not found."}"#,
            state.used_weight,
        );
    }
    let limit = query_value(target, "limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(100usize)
        .clamp(1, 5000);
    state.used_weight = state.used_weight.saturating_add(weight(limit));
    let faults = &shared.config.faults;
    let log = |symbol, kind| {
        lock(&shared.injected).list.push(Injection {
            connection: None,
            symbol,
            kind,
        })
    };
    if state.rate_limited < faults.rate_limited {
        state.rate_limited += 1;
        let retry_after_secs = faults.retry_after_secs;
        log(None, InjectionKind::RateLimited { retry_after_secs });
        let header = format!("Retry-After: {retry_after_secs}\r\n");
        let body = r#"{"code":-1003,"msg":"Too many requests; retry later."}"#;
        return respond(shared, &mut stream, 429, &header, body, state.used_weight);
    }
    let symbol = query_value(target, "symbol")
        .unwrap_or_default()
        .to_ascii_uppercase();
    let feed = lock(&shared.feed);
    let mut stale = false;
    let snapshot = feed
        .symbol_index(&symbol.to_ascii_lowercase())
        .and_then(|index| {
            let served = state.snapshots.entry(index).or_default();
            stale = faults.affects(&symbol) && *served < faults.stale_snapshots;
            *served += 1;
            feed.snapshot(index, limit, stale)
        });
    drop(feed);
    let Some((last_update_id, body, first_event_u)) = snapshot else {
        return respond(
            shared,
            &mut stream,
            400,
            "",
            r#"{"code":-1121,"msg":"Invalid symbol."}"#,
            state.used_weight,
        );
    };
    if stale {
        log(
            Some(symbol),
            InjectionKind::StaleSnapshot {
                last_update_id,
                first_event_u,
            },
        );
    }
    Counters::add(&shared.counters.snapshots, 1);
    respond(shared, &mut stream, 200, "", &body, state.used_weight);
}

fn respond(
    shared: &Shared,
    stream: &mut TcpStream,
    status: u16,
    headers: &str,
    body: &str,
    weight: u32,
) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Too Many Requests",
    };
    let chunked = shared.config.http_chunked;
    let framing = match chunked {
        true => "Transfer-Encoding: chunked".to_owned(),
        false => format!("Content-Length: {}", body.len()),
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json;charset=UTF-8\r\n\
         X-MBX-USED-WEIGHT-1M: {weight}\r\n{headers}{framing}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    if chunked {
        for chunk in body.as_bytes().chunks(4096) {
            out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            out.extend_from_slice(chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
    } else {
        out.extend_from_slice(body.as_bytes());
    }
    let _ = stream.write_all(&out);
    let _ = stream.flush();
}
