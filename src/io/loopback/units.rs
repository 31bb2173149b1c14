//! Parsing and helpers of the I/O layer, without sockets except one refused
//! connect on loopback.

use crate::io::http::{DepthApi, depth_path};
use crate::io::ws::{WsClient, WsError};
use crate::venue::binance::combined_url;
use mio::{Poll, Token};

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
