//! The architecture's one-way arrows, checked: the sans-IO core (`sequencer/`,
//! `protocol/`, `venue/`) imports nothing that touches the OS and nothing from the shell.
//!
//! Address values (`Ipv4Addr`, `SocketAddr`, ...) and `Duration` are plain data and
//! allowed; sockets, threads, clocks, files, processes, the event loop and the network
//! libraries are not, nor are the drivers, sinks, metrics, daemon, clients, simulators or
//! the rx thread's fan-out. Test modules (a `tests` folder, a `tests.rs` file, or everything
//! after a `#[cfg(test)]` line) are not part of the core and are skipped.

use std::fs;
use std::path::{Path, PathBuf};

/// Text that may not appear in the core's code, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("std::net::UdpSocket", "a socket"),
    ("std::net::TcpStream", "a socket"),
    ("std::net::TcpListener", "a socket"),
    ("UdpSocket", "a socket"),
    ("TcpStream", "a socket"),
    ("std::thread", "a thread"),
    ("std::sync::mpsc", "a channel between threads"),
    ("Instant", "the OS clock"),
    ("SystemTime", "the OS clock"),
    ("std::fs", "the file system"),
    ("std::process", "processes"),
    ("std::os::", "OS specifics"),
    ("std::io::stdin", "standard streams"),
    ("std::io::stdout", "standard streams"),
    ("std::io::stderr", "standard streams"),
    ("println!", "standard streams"),
    ("eprintln!", "standard streams"),
    ("mio::", "the event loop"),
    ("libc::", "system calls"),
    ("socket2", "sockets"),
    ("tungstenite", "the WebSocket library"),
    ("rustls", "TLS"),
    ("crossbeam", "threads' channels"),
    ("crate::io", "the OS shell"),
    ("crate::drive", "the drivers"),
    ("crate::sinks", "the sinks"),
    ("crate::daemon", "the daemon"),
    ("crate::metrics", "the metrics"),
    ("crate::client", "the clients"),
    ("crate::sim", "the simulators"),
    ("crate::log", "the logger (venues queue notices instead)"),
    ("log_error!", "the logger (venues queue notices instead)"),
    ("log_warn!", "the logger (venues queue notices instead)"),
    ("log_info!", "the logger (venues queue notices instead)"),
    ("log_debug!", "the logger (venues queue notices instead)"),
    ("fanout", "the rx thread's fan-out"),
];

/// The core's folders.
const CORE: &[&str] = &["src/sequencer", "src/protocol", "src/venue"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The violations in `text` (a file's contents): line number, the text found, why.
fn violations(text: &str) -> Vec<(usize, &'static str, &'static str)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or_default();
        for &(what, why) in FORBIDDEN {
            if code.contains(what) {
                found.push((n + 1, what, why));
            }
        }
    }
    found
}

#[test]
fn the_sans_io_core_reaches_neither_the_os_nor_the_shell() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in CORE {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 20,
        "the core's files were found: {}",
        files.len()
    );
    let mut report = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_default();
        for (line, what, why) in violations(&text) {
            report.push(format!("{}:{line}: {what} ({why})", file.display()));
        }
    }
    assert!(
        report.is_empty(),
        "the core reaches out:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_check_sees_what_it_forbids() {
    let text = "use std::time::Duration;\nuse std::net::SocketAddr;\nuse mio::Poll;\n\
                // crate::io in a comment\nlet t = std::time::Instant::now();\n\
                #[cfg(test)]\nuse std::thread;\n";
    let found: Vec<usize> = violations(text).iter().map(|v| v.0).collect();
    assert_eq!(
        found,
        [3, 5],
        "mio and the clock, not the comment or the test module"
    );
}
