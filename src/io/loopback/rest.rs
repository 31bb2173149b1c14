//! The REST client against small hand-made servers on loopback: compressed bodies,
//! redirects, kept-alive connections, proxies, and a reason for every failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::io::fetch::SnapshotFetcher;
use crate::io::http::http_get;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A server on loopback that answers every request with what `answer` makes of its head;
/// counts connections and keeps the request heads.
struct Server {
    port: u16,
    connections: Arc<AtomicU64>,
    heads: Arc<Mutex<Vec<String>>>,
}

fn serve(answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let connections = Arc::new(AtomicU64::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (count, seen, answer) = (
        Arc::clone(&connections),
        Arc::clone(&heads),
        Arc::new(answer),
    );
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(stream) = stream else { return };
            count.fetch_add(1, Ordering::Relaxed);
            let (seen, answer) = (Arc::clone(&seen), Arc::clone(&answer));
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(TIMEOUT));
                let mut writer = stream.try_clone().expect("clone");
                let mut reader = BufReader::new(stream);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    seen.lock().expect("heads").push(head.clone());
                    if writer.write_all(&answer(&head)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Server {
        port,
        connections,
        heads,
    }
}

fn response(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

const SNAPSHOT: &[u8] = br#"{"lastUpdateId":42,"bids":[["1.0","2"]],"asks":[]}"#;

#[test]
fn gzip_bodies_are_asked_for_and_decoded() -> TestResult {
    let server = serve(|head| {
        if head.to_ascii_lowercase().contains("accept-encoding: gzip") {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(SNAPSHOT).expect("gzip");
            let body = gz.finish().expect("gzip");
            response("200 OK", "Content-Encoding: gzip\r\n", &body)
        } else {
            response("200 OK", "", SNAPSHOT)
        }
    });
    let base = format!("http://127.0.0.1:{}", server.port);
    let r = http_get(&base, "/api/v3/depth?symbol=BTCUSDT&limit=5", TIMEOUT)?;
    let heads = server.heads.lock().map_err(|_| "poisoned")?.clone();
    assert!(
        heads
            .iter()
            .all(|h| h.to_ascii_lowercase().contains("accept-encoding: gzip")),
        "{heads:?}"
    );
    assert_eq!((r.status, r.body.as_slice()), (200, SNAPSHOT));
    Ok(())
}

#[test]
fn redirects_are_followed() -> TestResult {
    let target = serve(|_| response("200 OK", "", SNAPSHOT));
    let location = format!("http://127.0.0.1:{}/moved/depth", target.port);
    let first = serve(move |_| {
        response(
            "301 Moved Permanently",
            &format!("Location: {location}\r\n"),
            b"",
        )
    });
    let base = format!("http://127.0.0.1:{}", first.port);
    let r = http_get(&base, "/api/v3/depth?symbol=BTCUSDT&limit=5", TIMEOUT)?;
    assert_eq!((r.status, r.body.as_slice()), (200, SNAPSHOT));
    let heads = target.heads.lock().map_err(|_| "poisoned")?.clone();
    assert!(
        heads
            .first()
            .is_some_and(|h| h.starts_with("GET /moved/depth")),
        "{heads:?}"
    );
    Ok(())
}

#[test]
fn the_fetcher_keeps_its_connection_alive() -> TestResult {
    let server = serve(|_| response("200 OK", "", SNAPSHOT));
    let base = format!("http://127.0.0.1:{}", server.port);
    let fetcher = SnapshotFetcher::spawn(&base, TIMEOUT, 4)?;
    for id in 0..3 {
        fetcher.request(id, "/api/v3/depth?symbol=BTCUSDT&limit=5")?;
        let done = fetcher.recv_timeout(TIMEOUT).ok_or("no answer")?;
        assert_eq!(done.result?.status, 200);
    }
    assert!(fetcher.stop());
    assert_eq!(
        server.connections.load(Ordering::Relaxed),
        1,
        "three snapshots over one connection"
    );
    Ok(())
}

#[test]
fn failures_say_why() {
    // Nothing listens on port 1; a listener that never answers times out.
    let refused = http_get("http://127.0.0.1:1", "/", Duration::from_millis(500));
    let reason = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(reason.to_ascii_lowercase().contains("refused"), "{reason}");
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!(
        "http://127.0.0.1:{}",
        silent.local_addr().expect("addr").port()
    );
    let held = std::thread::spawn(move || {
        let conn = silent.accept().map(|(s, _)| s);
        std::thread::sleep(Duration::from_millis(900));
        drop(conn);
    });
    let timed_out = http_get(&base, "/", Duration::from_millis(300));
    let reason = timed_out.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(reason.contains("timed out"), "{reason}");
    let _ = held.join();
    let garbage = serve(|_| b"SMTP ready\r\n\r\n".to_vec());
    let bad = http_get(&format!("http://127.0.0.1:{}", garbage.port), "/", TIMEOUT);
    assert!(bad.is_err());
    let _ = TcpStream::connect(("127.0.0.1", garbage.port)).map(|mut s| {
        let mut b = [0u8; 1];
        let _ = s.read(&mut b);
    });
}

#[test]
fn a_proxy_carries_the_request() -> TestResult {
    // The proxy opens the tunnel, then answers what comes through it itself: what
    // matters is that the request came through it.
    let proxy = serve(|head| {
        if head.starts_with("CONNECT ") {
            b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec()
        } else {
            response("200 OK", "", SNAPSHOT)
        }
    });
    let client = crate::io::http::HttpClient::with_proxy(
        "http://api.example.invalid",
        TIMEOUT,
        &format!("http://127.0.0.1:{}", proxy.port),
    )?;
    let r = client.get("/api/v3/depth?symbol=BTCUSDT&limit=5")?;
    assert_eq!(r.status, 200);
    let heads = proxy.heads.lock().map_err(|_| "poisoned")?.clone();
    assert!(
        heads
            .first()
            .is_some_and(|h| h.contains("api.example.invalid")),
        "{heads:?}"
    );
    Ok(())
}
