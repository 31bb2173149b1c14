//! `wss://` end to end on loopback: a TLS WebSocket server with a certificate made for
//! 127.0.0.1 at test time (openssl), and the client verifying it against that certificate
//! as its root. Skips with a reason where openssl is absent.

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::io::ws::{WsClient, WsStatus};
use mio::{Events, Poll, Token};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA certificate, and a certificate for IP 127.0.0.1 it signed with its PKCS#8 key,
/// all DER.
fn make_certificates(dir: &Path) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .ok()?;
    let ok = run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=gapless test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "leaf.ext",
        "-outform",
        "DER",
        "-out",
        "leaf.der",
    ]) && run(&["x509", "-in", "ca.pem", "-outform", "DER", "-out", "ca.der"])
        && run(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-outform",
            "DER",
            "-in",
            "leaf.key",
            "-out",
            "leaf.key.der",
        ]);
    if !ok {
        return None;
    }
    Some((
        std::fs::read(dir.join("ca.der")).ok()?,
        std::fs::read(dir.join("leaf.der")).ok()?,
        std::fs::read(dir.join("leaf.key.der")).ok()?,
    ))
}

/// A TLS server configuration presenting `cert` (DER) with its PKCS#8 `key`.
fn server_config(
    provider: &Arc<rustls::crypto::CryptoProvider>,
    cert: Vec<u8>,
    key: Vec<u8>,
) -> rustls::ServerConfig {
    rustls::ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        )
        .unwrap()
}

#[test]
fn wss_client_verifies_the_server_and_receives_frames() {
    let dir = std::env::temp_dir().join(format!("gapless-wss-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let Some((ca, cert, key)) = make_certificates(&dir) else {
        eprintln!("skipping: openssl is not available to make a test certificate");
        return;
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_config = server_config(&provider, cert, key);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let tls = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
        let stream = rustls::StreamOwned::new(tls, tcp);
        let mut ws = tungstenite::accept(stream).unwrap();
        for i in 0..3 {
            let frame = format!(
                r#"{{"stream":"btcusdt@depth@100ms","data":{{"e":"depthUpdate","U":{i},"u":{i}}}}}"#
            );
            ws.send(tungstenite::Message::text(frame)).unwrap();
        }
        let _ = ws.close(None);
        let _ = ws.flush();
    });

    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca)).unwrap();
    let client_config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut poll = Poll::new().unwrap();
    let url = format!("wss://127.0.0.1:{port}/stream?streams=btcusdt@depth@100ms");
    let mut client = WsClient::connect_with(
        &url,
        poll.registry(),
        Token(1),
        Some(Arc::new(client_config)),
    )
    .unwrap();
    let mut events = Events::with_capacity(8);
    let mut frames: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut closed = false;
    while !closed && Instant::now() < deadline {
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .unwrap();
        let _ = client.on_writable();
        match client.on_readable(|f| frames.push(String::from_utf8_lossy(f).into_owned())) {
            Ok(WsStatus::Closed { .. }) | Err(_) => closed = true,
            Ok(_) => {}
        }
    }
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(frames.len(), 3, "three frames over TLS: {frames:?}");
    assert!(frames[0].contains("depthUpdate"));
}

/// A REST server behind a private CA: trusted once that CA is in the bundle the client
/// reads (`SSL_CERT_FILE`, or the system bundle `update-ca-certificates` writes), refused
/// with a reason that names the certificate otherwise.
#[test]
fn rest_over_tls_trusts_a_private_ca_from_the_bundle() {
    use std::io::{Read, Write};
    let dir = std::env::temp_dir().join(format!("gapless-rest-ca-{}", std::process::id()));
    // A temporary folder; one left behind holds only test certificates.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let Some((_, cert, key)) = make_certificates(&dir) else {
        eprintln!("skipping: openssl is not available to make a test certificate");
        return;
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_config = Arc::new(server_config(&provider, cert, key));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        for _ in 0..2 {
            let Ok((tcp, _)) = listener.accept() else {
                return;
            };
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let tls = rustls::ServerConnection::new(Arc::clone(&server_config)).unwrap();
            let mut stream = rustls::StreamOwned::new(tls, tcp);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            // The refused client ends the handshake: the read fails, the next comes.
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            if head.ends_with(b"\r\n\r\n") {
                let body = br#"{"lastUpdateId":7,"bids":[],"asks":[]}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                stream.write_all(answer.as_bytes()).unwrap();
                stream.write_all(body).unwrap();
                stream.flush().unwrap();
                stream.conn.send_close_notify();
                // The answer was flushed already; a client gone before the close notify loses nothing.
                let _ = stream.flush();
            }
        }
    });
    let base = format!("https://127.0.0.1:{port}");
    let timeout = Duration::from_secs(5);
    // Mozilla's roots alone do not know the private CA.
    let stranger =
        crate::io::http::HttpClient::with_bundle(&base, timeout, &dir.join("none.pem")).unwrap();
    let refused = stranger.get("/api/v3/depth?symbol=BTCUSDT&limit=5");
    let reason = refused
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(refused.is_err(), "an unknown CA is refused");
    assert!(reason.to_lowercase().contains("certificate"), "{reason}");
    let trusting =
        crate::io::http::HttpClient::with_bundle(&base, timeout, &dir.join("ca.pem")).unwrap();
    let answer = trusting
        .get("/api/v3/depth?symbol=BTCUSDT&limit=5")
        .expect("trusted through the bundle");
    server.join().unwrap();
    // A temporary folder; one left behind holds only test certificates.
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(answer.status, 200);
    assert!(
        answer.body.starts_with(b"{\"lastUpdateId\":7"),
        "{:?}",
        answer.body
    );
}
