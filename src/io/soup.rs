//! The snapshot client: a GLIMPSE-style snapshot over SoupBinTCP, fetched on a thread of
//! its own so the receive thread never waits on TCP.
//!
//! Log in, pass every sequenced-data message back as a snapshot message until the
//! end-of-snapshot message (`G` plus the sequence to resume from), then log out.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use crate::protocol::moldudp64::Session;
use crate::protocol::soupbintcp::{Frame, FrameDecoder, LoginRequest};

/// A snapshot to fetch: where, the login, and the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoupTask {
    /// TCP address of the snapshot server.
    pub addr: SocketAddr,
    /// Login user name.
    pub username: String,
    /// Login password.
    pub password: String,
    /// The session to log in to.
    pub session: [u8; 10],
}

/// What a snapshot fetch reports, tagged with the task id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotReply {
    /// One snapshot message.
    Message(Vec<u8>),
    /// Done: live data resumes at `next`.
    End {
        /// The sequence the snapshot reflects everything before.
        next: u64,
    },
    /// The fetch failed, with the reason.
    Failed(String),
}

/// Starts fetching `task` on a new thread; every reply goes to `reply` (which returns
/// false when nobody listens any more: the fetch is then abandoned). The fetch gives up
/// after `timeout` in all.
pub fn spawn_fetch(
    task: SoupTask,
    timeout: Duration,
    mut reply: impl FnMut(SnapshotReply) -> bool + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("snapshot-soup".to_string())
        .spawn(move || {
            let result = fetch(&task, timeout, |m| {
                reply(SnapshotReply::Message(m.to_vec()))
            });
            let last = match result {
                Ok(next) => SnapshotReply::End { next },
                Err(reason) => SnapshotReply::Failed(reason),
            };
            // The last reply: whether anyone still listens changes nothing.
            let _ = reply(last);
        })
}

/// Fetches a snapshot, handing each message to `on_message` (which returns false to
/// abandon). Returns the sequence to resume from.
pub fn fetch(
    task: &SoupTask,
    timeout: Duration,
    mut on_message: impl FnMut(&[u8]) -> bool,
) -> Result<u64, String> {
    let deadline = Instant::now() + timeout;
    let addr = task.addr;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let login = LoginRequest::new(&task.username, &task.password, Session(task.session), 1)
        .map_err(|e| format!("login request: {e}"))?;
    let mut buf = [0u8; 64];
    let n = Frame::LoginRequest(login)
        .encode(&mut buf)
        .map_err(|e| format!("login request: {e}"))?;
    stream
        .write_all(buf.get(..n).unwrap_or_default())
        .map_err(|e| format!("send login to {addr}: {e}"))?;

    let decoder = FrameDecoder::new();
    let mut pending: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    let mut logged_in = false;
    loop {
        // Take every complete frame out of what was read so far.
        let mut consumed = 0;
        loop {
            let rest = pending.get(consumed..).unwrap_or_default();
            match decoder.decode(rest) {
                Ok(Some((frame, used))) => {
                    consumed += used;
                    match frame {
                        Frame::LoginAccepted(_) => logged_in = true,
                        Frame::LoginRejected(reason) => {
                            return Err(format!(
                                "login to {addr} rejected ({})",
                                char::from(reason.code())
                            ));
                        }
                        Frame::SequencedData(payload) => {
                            if !logged_in {
                                return Err(format!("{addr} sent data before accepting the login"));
                            }
                            if let Some(next) = frame.end_of_snapshot() {
                                let _ = logout(&mut stream);
                                return Ok(next);
                            }
                            if !on_message(payload) {
                                let _ = logout(&mut stream);
                                return Err("abandoned".into());
                            }
                        }
                        Frame::EndOfSession => {
                            return Err(format!(
                                "{addr} ended the session before the snapshot end"
                            ));
                        }
                        _ => {}
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(format!("{addr} sent a bad frame: {e}")),
            }
        }
        pending.drain(..consumed);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "snapshot from {addr} not complete within {timeout:?}"
            ));
        }
        stream
            .set_read_timeout(Some(left.min(Duration::from_secs(1))))
            .map_err(|e| format!("{addr}: {e}"))?;
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(format!(
                    "{addr} closed the connection before the snapshot end"
                ));
            }
            Ok(n) => pending.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(format!("read from {addr}: {e}")),
        }
    }
}

fn logout(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; 8];
    if let Ok(n) = Frame::LogoutRequest.encode(&mut buf) {
        stream.write_all(buf.get(..n).unwrap_or_default())?;
    }
    stream.shutdown(Shutdown::Both)
}
