//! Log lines as the three places they go read them: journald (sd-daemon priorities when
//! `$JOURNAL_STREAM` names standard error), a terminal or file (an RFC 3339 timestamp first),
//! and a log shipper (`log_format = "json"`).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gapless");

fn temp_dir(name: &str) -> PathBuf {
    crate::temp_dir(&format!("logs-{name}"))
}

/// A valid file: one MoldUDP64 channel on a loopback group nobody sends to.
fn valid_config(dir: &Path, format: Option<&str>) -> PathBuf {
    let format = format.map_or_else(String::new, |f| format!("log_format = \"{f}\"\n"));
    let text = format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\nidle = \"block\"\n{format}\n\
         [[venue]]\nname = \"quiet\"\nkind = \"moldudp64\"\n\n\
         [[venue.channel]]\nname = \"a\"\ngroup = \"239.255.64.9:46409\"\ninterface = \"127.0.0.1\"\n\
         rerequest = [\"127.0.0.1:9\"]\n",
        port = crate::free_port(),
    );
    let path = dir.join("gapless.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `gapless run` on `config` with stderr a pipe of our own; with `journal`,
/// `$JOURNAL_STREAM` names that pipe as systemd would. A valid file is stopped with SIGTERM
/// once it reports READY=1. Returns the exit code and stderr.
fn run(config: &Path, dir: &Path, journal: Option<&str>) -> (Option<i32>, String) {
    let (mut reader, writer) = std::io::pipe().unwrap();
    let meta = std::fs::File::from(std::os::fd::OwnedFd::from(writer.try_clone().unwrap()))
        .metadata()
        .unwrap();
    let notify_path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&notify_path);
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["run", "--config"])
        .arg(config)
        .env("NOTIFY_SOCKET", &notify_path)
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::null())
        .stderr(Stdio::from(writer));
    match journal {
        Some("pipe") => {
            command.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
        }
        Some(other) => {
            command.env("JOURNAL_STREAM", other);
        }
        None => {}
    }
    let mut child = command.spawn().unwrap();
    // Our copy of the write end goes with `command`, so EOF comes when the child exits.
    drop(command);
    let mut buf = [0u8; 64];
    if let Ok(n) = notify.recv(&mut buf) {
        assert_eq!(&buf[..n], b"READY=1");
        // SAFETY: signalling the child process this test started.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "gapless did not stop within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut text = String::new();
    reader.read_to_string(&mut text).unwrap();
    (status.code(), text)
}

fn is_rfc3339_utc(stamp: &str) -> bool {
    let b = stamp.as_bytes();
    b.len() == 27
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            26 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn journal_lines_carry_sd_daemon_priorities() {
    let dir = temp_dir("journal");
    // An invalid file: every error line at priority 3, and exit code 2.
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[daemon]\nidle = \"sometimes\"\nconsumer_queue = 1000\n",
    )
    .unwrap();
    let (code, text) = run(&bad, &dir, Some("pipe"));
    assert_eq!(code, Some(2), "{text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    for line in text.lines() {
        assert!(line.starts_with("<3>"), "{line}");
        assert!(line.contains("bad.toml:"), "{line}");
    }

    // A valid file: start-up and stop at priority 6; no line without a priority.
    let good = valid_config(&dir, None);
    let (code, text) = run(&good, &dir, Some("pipe"));
    assert_eq!(code, Some(0), "{text}");
    let mut infos = 0;
    for line in text.lines() {
        let priority = line
            .strip_prefix('<')
            .and_then(|l| l.split_once('>'))
            .map(|(p, _)| p);
        assert!(
            matches!(priority, Some("3" | "4" | "6" | "7")),
            "no priority: {line}"
        );
        if line.starts_with("<6>") {
            infos += 1;
        }
    }
    assert!(text.contains("<6>metrics on http://127.0.0.1:"), "{text}");
    assert!(text.contains("<6>stopping on signal"), "{text}");
    assert!(infos >= 2, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn text_lines_start_with_a_utc_timestamp() {
    let dir = temp_dir("text");
    let good = valid_config(&dir, None);
    // No JOURNAL_STREAM, and one inherited from a parent whose stderr was the journal: both
    // are a plain stream, so both get timestamps.
    for journal in [None, Some("8:4242")] {
        let (code, text) = run(&good, &dir, journal);
        assert_eq!(code, Some(0), "{text}");
        assert!(text.lines().count() >= 2, "{text}");
        for line in text.lines() {
            let (stamp, rest) = line.split_once(' ').unwrap();
            assert!(is_rfc3339_utc(stamp), "{line}");
            assert!(
                ["error: ", "warn: ", "info: ", "debug: "]
                    .iter()
                    .any(|l| rest.starts_with(l)),
                "{line}"
            );
        }
        assert!(text.contains(" info: stopping on signal"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_lines_for_log_shippers() {
    let dir = temp_dir("json");
    let good = valid_config(&dir, Some("json"));
    // `log_format = "json"` wins over the journal.
    let (code, text) = run(&good, &dir, Some("pipe"));
    assert_eq!(code, Some(0), "{text}");
    let mut messages = Vec::new();
    for line in text.lines() {
        let value: serde_json::Value = serde_json::from_str(line).expect("a JSON object");
        assert!(
            is_rfc3339_utc(value["timestamp"].as_str().unwrap()),
            "{line}"
        );
        assert!(
            ["error", "warn", "info", "debug", "trace"].contains(&value["level"].as_str().unwrap()),
            "{line}"
        );
        messages.push(value["message"].as_str().unwrap().to_owned());
    }
    assert!(messages.iter().any(|m| m == "stopping on signal"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
