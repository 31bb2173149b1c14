//! Parsing and helpers of the I/O layer, without sockets except one refused
//! connect on loopback.

use std::io::Cursor;

use crate::io::http::{DepthApi, HttpError, HttpResponse, depth_path, read_response};
use crate::io::ws::{WsClient, WsError};
use crate::venue::binance::combined_url;
use mio::{Poll, Token};

fn parse(raw: &[u8]) -> Result<HttpResponse, HttpError> {
    read_response(&mut Cursor::new(raw.to_vec()), 64)
}

#[test]
fn parses_length_chunked_and_eof_bodies() -> Result<(), HttpError> {
    let r =
        parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-MBX-USED-WEIGHT-1M: 25\r\n\r\nhello")?;
    assert_eq!(
        (r.status, r.used_weight, r.body.as_slice()),
        (200, Some(25), &b"hello"[..])
    );
    let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=1\r\nhel\r\n2\r\nlo\r\n0\r\nT: 1\r\n\r\n";
    assert_eq!(parse(chunked)?.body, b"hello");
    let r = parse(b"HTTP/1.0 429 Too Many\r\nRetry-After: 7\r\n\r\n{}")?;
    assert_eq!(
        (r.status, r.retry_after_secs, r.body.as_slice()),
        (429, Some(7), &b"{}"[..])
    );
    assert_eq!(parse(b"HTTP/1.1 204 No Content\r\n\r\n")?.body, b"");
    Ok(())
}

#[test]
fn rejects_malformed_and_oversized_responses() {
    let malformed: [&[u8]; 6] = [
        b"HTTP/1.1 2000 X\r\n\r\n",
        b"SMTP 200\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX",
        b"HTTP/1.1 200 OK\r\nContent",
    ];
    for raw in malformed {
        assert!(
            matches!(parse(raw), Err(HttpError::Malformed(_))),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
    let too_large: [&[u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n",
        &[b"HTTP/1.1 200 OK\r\n\r\n".as_slice(), &[b'x'; 65]].concat(),
    ];
    for raw in too_large {
        assert!(matches!(
            parse(raw),
            Err(HttpError::BodyTooLarge { limit: 64 })
        ));
    }
}

#[test]
fn builds_depth_paths_and_combined_urls() {
    assert_eq!(
        depth_path(DepthApi::Spot, "btcusdt", 1000),
        "/api/v3/depth?symbol=BTCUSDT&limit=1000"
    );
    assert_eq!(
        depth_path(DepthApi::UsdM, "ethusdt", 5),
        "/fapi/v1/depth?symbol=ETHUSDT&limit=5"
    );
    assert_eq!(
        depth_path(DepthApi::CoinM, "BTCUSD_PERP", 5),
        "/dapi/v1/depth?symbol=BTCUSD_PERP&limit=5"
    );
    let url = combined_url("ws://127.0.0.1:9/", &["BTCUSDT", "ethusdt"], Some(100));
    assert_eq!(
        url,
        "ws://127.0.0.1:9/stream?streams=btcusdt@depth@100ms/ethusdt@depth@100ms"
    );
    assert_eq!(
        combined_url("wss://x", &["a"], None),
        "wss://x/stream?streams=a@depth"
    );
}

#[test]
fn websocket_client_rejects_bad_urls_and_reports_refused_connects() -> std::io::Result<()> {
    let poll = Poll::new()?;
    let result = WsClient::connect("http://127.0.0.1:1/", poll.registry(), Token(0));
    assert!(matches!(result, Err(WsError::NotWebSocket(_))));
    let result = WsClient::connect("ws//bad", poll.registry(), Token(0));
    assert!(matches!(result, Err(WsError::Tls(_))));
    // Port 1 on loopback: nothing listens, the connect is refused.
    let mut poll = Poll::new()?;
    let mut client = match WsClient::connect("ws://127.0.0.1:1/ws/x", poll.registry(), Token(1)) {
        Ok(client) => client,
        Err(WsError::Connect { .. }) => return Ok(()),
        Err(e) => panic!("unexpected {e}"),
    };
    let mut events = mio::Events::with_capacity(4);
    poll.poll(&mut events, Some(std::time::Duration::from_secs(2)))?;
    let outcome = client.on_writable();
    assert!(
        matches!(outcome, Err(WsError::Connect { .. })),
        "{outcome:?}"
    );
    assert!(!client.is_open());
    Ok(())
}
