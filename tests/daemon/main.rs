//! The daemon and the command line as an operator runs them.

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod binance_cli;
mod logs;
mod nats;
mod run;
mod shm;
mod top;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Starts `gapless run --config CONFIG` (in `cwd`, when given, with stderr to `stderr`) and
/// waits up to 20 s for READY=1 on a notify socket of its own in `dir`.
fn start_daemon_with(config: &Path, dir: &Path, stderr: Stdio, cwd: Option<&Path>) -> Child {
    let notify_path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&notify_path);
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_gapless"));
    command
        .args(["run", "--config"])
        .arg(config)
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(stderr);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let child = command.spawn().unwrap();
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).expect("READY=1 within 20 s");
    assert_eq!(&buf[..n], b"READY=1");
    child
}
