//! systemd integration without a library: readiness, watchdog and stopping notices sent
//! as datagrams to `$NOTIFY_SOCKET`, and SIGTERM/SIGINT turned into a stop flag.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Sends `state` (for example `READY=1`) to the service manager, when there is one.
/// Returns whether it was sent.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let Ok(socket) = UnixDatagram::unbound() else {
        return false;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket name.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| socket.send_to_addr(state.as_bytes(), &addr))
    } else {
        socket.send_to(state.as_bytes(), &path)
    };
    sent.is_ok()
}

/// The watchdog interval systemd asks for (`$WATCHDOG_USEC`), if any.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Feeds the watchdog at half its interval, but only while the rx loop keeps cycling:
/// `alive_ns` must have moved within the interval (it holds the loop's clock, which
/// `now_ns` reads). Ends when `stop` is set.
pub fn spawn_watchdog(
    interval: Duration,
    alive_ns: Arc<AtomicU64>,
    now_ns: impl Fn() -> u64 + Send + 'static,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("gapless-watchdog".into())
        .spawn(move || {
            let half = interval / 2;
            let limit = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
            while !stop.load(Ordering::Relaxed) {
                let alive = alive_ns.load(Ordering::Relaxed);
                if now_ns().saturating_sub(alive) < limit {
                    notify("WATCHDOG=1");
                }
                // Sleeping is this thread's schedule, not a synchronisation: it wakes at
                // least every 100 ms so a stop is seen promptly.
                let mut left = half;
                while !left.is_zero() && !stop.load(Ordering::Relaxed) {
                    let step = left.min(Duration::from_millis(100));
                    std::thread::sleep(step);
                    left = left.saturating_sub(step);
                }
            }
        })
}

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs SIGTERM and SIGINT handlers that request a stop; see [`stop_requested`].
pub fn install_stop_signals() -> std::io::Result<()> {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `sigaction` with a zeroed struct plus a handler that only performs an
        // atomic store, which is async-signal-safe; the struct outlives the call.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// True once SIGTERM or SIGINT arrived.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_reaches_a_socket_named_in_the_environment() {
        let dir = std::env::temp_dir().join(format!("gapless-notify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).expect("bind");
        listener
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        // SAFETY: this test is the only code in its process touching NOTIFY_SOCKET.
        unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };
        assert!(notify("READY=1"));
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("received");
        assert_eq!(&buf[..n], b"READY=1");
        // SAFETY: as above.
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        assert!(!notify("READY=1"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
