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
mod unix;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// An empty directory of this test run's own under the temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gapless-{name}-{}", std::process::id()));
    // A previous run's leftovers, if any; absent is the usual case.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A loopback TCP port nothing listens on at the moment.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends SIGTERM and waits up to `within` for the process to end; its exit status.
fn sigterm_within(child: &mut Child, within: Duration) -> ExitStatus {
    // SAFETY: signalling the child process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "gapless did not stop within {within:?} of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `gapless run --config CONFIG` (in `cwd`, when given, with stderr to `stderr`) and
/// waits up to 20 s for READY=1 on a notify socket of its own in `dir`.
fn start_daemon_with(config: &Path, dir: &Path, stderr: Stdio, cwd: Option<&Path>) -> Child {
    start_daemon_env(config, dir, stderr, cwd, &[])
}

/// [`start_daemon_with`], with `env` set in the daemon's environment.
fn start_daemon_env(
    config: &Path,
    dir: &Path,
    stderr: Stdio,
    cwd: Option<&Path>,
    env: &[(&str, &str)],
) -> Child {
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
    command.envs(env.iter().copied());
    let child = command.spawn().unwrap();
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).expect("READY=1 within 20 s");
    assert_eq!(&buf[..n], b"READY=1");
    child
}
