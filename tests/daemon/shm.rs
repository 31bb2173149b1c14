//! The shared-memory ring sink across processes: `gapless run` against the MoldUDP64
//! simulator with loss and recovery, and `gapless tail --shm` reader processes beside it:
//! two fast readers (one killed and restarted with its cursor), one whose output nobody reads
//! for a while (it is lapped), a daemon restart every reader sees, and the Python reader.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gapless::sim::{FaultConfig, MoldSim, MoldSimConfig};

use crate::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_gapless");

/// A directory on tmpfs where there is one (a ring is a shared-memory file), else the
/// temporary directory.
fn ring_dir(name: &str) -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("gapless-{name}-{}", std::process::id()));
    // A previous run's leftovers, if any; absent is the usual case.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config_text(
    group: SocketAddrV4,
    sim: &MoldSim,
    ring: &Path,
    size_bytes: u64,
    metrics: u16,
) -> String {
    format!(
        r#"
[daemon]
metrics_listen = "127.0.0.1:{metrics}"
idle = "yield"
log_level = "warn"

[[venue]]
name = "sim"
kind = "moldudp64"
start = "from-start"

  [[venue.channel]]
  name = "a"
  group = "{group}"
  interface = "127.0.0.1"
  rerequest = ["{rerequest}"]
  snapshot = {{ kind = "soupbintcp", addr = "{snapshot}", username = "sim", password = "sim" }}
  rcvbuf = 8388608

  [venue.recovery]
  reorder_window = 65536
  reorder_delay_us = 2000

[[sink]]
kind = "shm"
path = "{ring}"
size_bytes = {size_bytes}
"#,
        rerequest = sim.rerequest_addr(),
        snapshot = sim.snapshot_addr(),
        ring = ring.display(),
    )
}

/// The lines a reader process printed so far, and a signal for each batch.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Lines {
    /// Waits until `done` holds of the lines, at most `within`.
    fn wait_for(&self, within: Duration, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + within;
        let mut lines = self.lines.lock().unwrap();
        while !done(&lines) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{what} within {within:?}; {} lines, last {:?}",
                lines.len(),
                lines.last()
            );
            lines = self.grew.wait_timeout(lines, left).unwrap().0;
        }
    }

    fn snapshot(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

/// A `gapless tail --shm` process (or the Python reader) whose output a thread collects;
/// a reader started `held` has its output left unread until [`Reader::release`].
struct Reader {
    child: Child,
    lines: Arc<Lines>,
    release: Option<std::sync::mpsc::Sender<()>>,
    collector: Option<JoinHandle<()>>,
}

impl Reader {
    fn spawn(mut command: Command, held: bool) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Lines::default());
        let (release, released) = std::sync::mpsc::channel::<()>();
        let sink = Arc::clone(&lines);
        let collector = std::thread::spawn(move || {
            if held {
                // Held until released (or until the test drops the sender): the child's
                // pipe fills and it stops reading the ring.
                let _released = released.recv();
            }
            collect(stdout, &sink);
        });
        Self {
            child,
            lines,
            release: held.then_some(release),
            collector: Some(collector),
        }
    }

    fn tail(ring: &Path, from: Option<String>, held: bool) -> Self {
        let mut command = Command::new(BIN);
        command.arg("tail").arg("--shm").arg(ring);
        if let Some(cursor) = from {
            command.arg("--from").arg(cursor);
        }
        Self::spawn(command, held)
    }

    fn release(&mut self) {
        if let Some(release) = self.release.take() {
            release.send(()).unwrap();
        }
    }

    /// Kills the process and returns every whole line it printed.
    fn kill(mut self) -> Vec<String> {
        self.release();
        // Already gone is fine: the lines are what matters.
        let _ = self.child.kill();
        self.child.wait().unwrap();
        if let Some(collector) = self.collector.take() {
            collector.join().unwrap();
        }
        self.lines.snapshot()
    }
}

fn collect(stdout: ChildStdout, lines: &Lines) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.ends_with('\n') => {
                lines.lines.lock().unwrap().push(line.trim_end().to_owned());
                lines.grew.notify_all();
            }
            // A partial last line of a killed process is not a line.
            Ok(_) => break,
        }
    }
    lines.grew.notify_all();
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// The last message sequence among `lines`.
fn last_seq(lines: &[String]) -> Option<u64> {
    lines.iter().rev().find_map(|l| json(l)["seq"].as_u64())
}

fn count_generations(lines: &[String]) -> usize {
    lines
        .iter()
        .filter(|l| json(l)["event"] == "generation")
        .count()
}

/// Asserts that `lines` hold messages `first..=last` once each and in order, with no
/// overrun, and returns the epoch of the last one.
fn assert_exact(lines: &[String], first: u64, last: u64, who: &str) -> u64 {
    let mut next = first;
    let mut epoch = 0;
    for line in lines {
        let v = json(line);
        assert_ne!(v["event"], "overrun", "{who} was lapped: {line}");
        assert_ne!(v["event"], "gap", "{who} saw a gap: {line}");
        if let Some(seq) = v["seq"].as_u64() {
            assert_eq!(seq, next, "{who}: in order, once each: {line}");
            next += 1;
            epoch = v["epoch"].as_u64().unwrap();
        }
    }
    assert_eq!(next, last + 1, "{who}: every message up to {last}");
    epoch
}

fn sigterm(child: &mut Child) {
    let status = crate::sigterm_within(child, Duration::from_secs(20));
    assert!(status.success(), "exit status {status:?}");
}

const MESSAGES: u64 = 1_000_000;

#[test]
fn readers_in_other_processes_follow_the_ring_through_loss_laps_kills_and_a_restart() {
    let dir = ring_dir("shm-readers");
    let ring = dir.join("sim.ring");
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 64, 7), 46407);
    let mut cfg = MoldSimConfig::new(group);
    cfg.count = MESSAGES;
    cfg.rate = Some(100_000.0);
    cfg.start_delay = Duration::from_millis(1500);
    cfg.heartbeat_interval = Some(Duration::from_millis(100));
    cfg.faults = FaultConfig {
        seed: 7,
        loss: 0.01,
        ..FaultConfig::default()
    };
    let mut sim = MoldSim::start(cfg).unwrap();
    let config = dir.join("gapless.toml");
    // 64 MiB: more than half the run for the fast readers, less than all of it, so a reader
    // that stops reading is lapped.
    std::fs::write(
        &config,
        config_text(group, &sim, &ring, 1 << 26, free_port()),
    )
    .unwrap();
    let mut daemon = crate::start_daemon_with(&config, &dir, Stdio::inherit(), None);

    let fast = Reader::tail(&ring, None, false);
    let killed = Reader::tail(&ring, None, false);
    let mut slow = Reader::tail(&ring, None, true);

    // The second reader is killed a third of the way and restarted from its last line.
    killed
        .lines
        .wait_for(Duration::from_secs(60), "a third", |l| {
            last_seq(l).is_some_and(|s| s >= MESSAGES / 3)
        });
    let before = killed.kill();
    let last = last_seq(&before).unwrap();
    let epoch = before
        .iter()
        .rev()
        .find_map(|l| json(l)["epoch"].as_u64())
        .unwrap();
    let resumed = Reader::tail(&ring, Some(format!("sim/a={epoch}:{}", last + 1)), false);

    sim.wait(Duration::from_secs(120)).unwrap();
    let all = |l: &[String]| last_seq(l) == Some(MESSAGES);
    fast.lines
        .wait_for(Duration::from_secs(60), "the fast reader reads all", all);
    resumed
        .lines
        .wait_for(Duration::from_secs(60), "the resumed reader reads all", all);
    slow.release();
    slow.lines
        .wait_for(Duration::from_secs(60), "the slow reader catches up", all);

    let fast_lines = fast.lines.snapshot();
    let epoch_fast = assert_exact(&fast_lines, 1, MESSAGES, "the fast reader");
    assert_exact(&before, 1, last, "the killed reader");
    let after = resumed.lines.snapshot();
    assert_eq!(
        assert_exact(&after, last + 1, MESSAGES, "the resumed reader"),
        epoch_fast
    );

    // The slow reader: messages in order, each loss an overrun whose range is exactly
    // what it did not get.
    let mut next = 1u64;
    let mut overruns = 0;
    for line in slow.lines.snapshot() {
        let v = json(&line);
        if v["event"] == "overrun" {
            let from = v["from"].as_u64().unwrap();
            let to = v["to"].as_u64().unwrap();
            assert_eq!(
                from, next,
                "the overrun starts where the reader was: {line}"
            );
            assert!(to >= from, "{line}");
            next = to + 1;
            overruns += 1;
        } else if let Some(seq) = v["seq"].as_u64() {
            assert_eq!(
                seq, next,
                "the slow reader: in order, no silent hole: {line}"
            );
            next += 1;
        }
    }
    assert_eq!(next, MESSAGES + 1);
    assert!(overruns >= 1, "a reader that stopped reading was lapped");
    eprintln!(
        "slow reader: {overruns} overruns; killed at {last}, resumed with {} lines",
        after.len()
    );

    // A daemon restart is a new generation for every reader still running.
    drop(sim);
    sigterm(&mut daemon);
    let mut daemon = crate::start_daemon_with(&config, &dir, Stdio::inherit(), None);
    for (reader, who) in [(&fast, "fast"), (&resumed, "resumed"), (&slow, "slow")] {
        reader.lines.wait_for(
            Duration::from_secs(30),
            &format!("the {who} reader sees the restart"),
            |l| count_generations(l) == 2,
        );
    }
    sigterm(&mut daemon);
    for reader in [fast, resumed, slow] {
        reader.kill();
    }
    // Cleanup of the test's own directory; a leftover does no harm.
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Python reader in the repository (standard library only) reads the daemon's ring and
/// prints what `gapless tail --shm` prints.
#[test]
fn the_python_reader_prints_what_tail_prints() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python/gapless_shm.py");
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipping the Python shm reader: python3 cannot run");
        return;
    }
    let dir = ring_dir("shm-python");
    let ring = dir.join("sim.ring");
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 64, 8), 46408);
    let mut cfg = MoldSimConfig::new(group);
    cfg.count = 20_000;
    cfg.rate = Some(20_000.0);
    cfg.start_delay = Duration::from_millis(500);
    cfg.heartbeat_interval = Some(Duration::from_millis(100));
    cfg.faults = FaultConfig {
        seed: 8,
        loss: 0.01,
        ..FaultConfig::default()
    };
    let mut sim = MoldSim::start(cfg).unwrap();
    let config = dir.join("gapless.toml");
    let metrics = free_port();
    std::fs::write(&config, config_text(group, &sim, &ring, 1 << 24, metrics)).unwrap();
    let mut daemon = crate::start_daemon_with(&config, &dir, Stdio::inherit(), None);
    sim.wait(Duration::from_secs(60)).unwrap();

    let tail = Reader::tail(&ring, None, false);
    let mut python = Command::new("python3");
    python.arg("-u").arg(&script).arg(&ring);
    let python = Reader::spawn(python, false);
    let all = |l: &[String]| last_seq(l) == Some(20_000);
    tail.lines
        .wait_for(Duration::from_secs(30), "tail reads all", all);
    python
        .lines
        .wait_for(Duration::from_secs(60), "the Python reader reads all", all);
    let tail = tail.kill();
    let python = python.kill();
    assert_exact(&python, 1, 20_000, "the Python reader");
    // Same events, same fields, same values (the JSON compared as values, not text).
    let values = |lines: &[String]| -> Vec<serde_json::Value> {
        let end = lines
            .iter()
            .position(|l| json(l)["seq"].as_u64() == Some(20_000))
            .unwrap();
        lines[..=end].iter().map(|l| json(l)).collect()
    };
    assert_eq!(values(&python), values(&tail));
    // The ring's counters are scraped: every message was a record, none was refused. The
    // rx thread publishes them once a batch and when idle, so the scrape may be a batch
    // behind the readers: scraped again until it has caught up, for at most 5 s.
    let sample = |body: &str, name: &str| -> u64 {
        let prefix = format!("{name}{{ring=\"{}\"}} ", ring.display());
        body.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in {body}"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let body = loop {
        let body = crate::run::http_get(metrics, "/metrics");
        if sample(&body, "gapless_shm_records_total") >= 20_000
            || std::time::Instant::now() > deadline
        {
            break body;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let sample = |name: &str| sample(&body, name);
    assert!(sample("gapless_shm_records_total") >= 20_000);
    assert!(sample("gapless_shm_written_bytes_total") > 20_000 * 32);
    assert_eq!(sample("gapless_shm_too_long_total"), 0);
    assert_eq!(sample("gapless_shm_capacity_bytes"), 1 << 24);
    sigterm(&mut daemon);
    drop(sim);
    // Cleanup of the test's own directory; a leftover does no harm.
    let _ = std::fs::remove_dir_all(&dir);
}
