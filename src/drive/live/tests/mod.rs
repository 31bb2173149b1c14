//! The live driver end to end on loopback: the simulators (multicast through 127.0.0.1
//! with TTL 0, re-request, snapshot and Binance servers) against the real rx loop,
//! sockets, venues and consumer queues.

mod binance;
mod failures;
mod iex;
mod lines;
mod mold;
mod record;
mod tshark;
mod udp;

/// Set in a test run again inside a namespace by [`rerun_in_netns`].
const IN_NETNS: &str = "GAPLESS_TEST_IN_NETNS";

/// Runs the test named `test` again inside a user and network namespace of its own (its
/// own loopback, so no other test's groups or ports), and with `silent_resolver`,
/// `/etc/resolv.conf` pointing at a name server on 127.0.0.1:53 that the test runs and
/// that never answers. False (the test skips) when namespaces are not available here.
fn rerun_in_netns(test: &str, silent_resolver: bool) -> bool {
    let works = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !works("unshare", &["-rnm", "true"]) || !works("ip", &["-V"]) {
        eprintln!("skipping: unshare -rnm or ip (iproute2) is not available");
        return false;
    }
    let dir = std::env::temp_dir().join(format!("gapless-netns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut script = String::new();
    if silent_resolver {
        let resolv = dir.join("resolv.conf");
        std::fs::write(
            &resolv,
            "nameserver 127.0.0.1\noptions timeout:3 attempts:2\n",
        )
        .expect("resolv.conf");
        script = format!("mount --bind '{}' /etc/resolv.conf && ", resolv.display());
    }
    script.push_str(&format!(
        "ip link set lo up && exec \"$0\" --exact {test} --nocapture --test-threads=1"
    ));
    let exe = std::env::current_exe().expect("test binary");
    let status = std::process::Command::new("unshare")
        .args(["-rnm", "sh", "-c", &script])
        .arg(exe)
        .env(IN_NETNS, "1")
        .status()
        .expect("unshare");
    // A temporary directory left behind is harmless; the verdict is the status below.
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.success(),
        "the test inside the namespace failed: {status}"
    );
    true
}
