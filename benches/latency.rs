//! Latency from the kernel's receive timestamp of a datagram to the moment a reader in
//! another process sees its message, on a loss-free MoldUDP64 feed on loopback, for three
//! paths measured in the same run:
//!
//! - **shm**: `gapless run` (busy-spin rx) writing the shared-memory ring sink, read by a
//!   reader process polling [`gapless::client::shm::ShmReader`];
//! - **unix**: the same daemon's unix-socket sink, read by a reader process blocking on the
//!   socket;
//! - **floor**: a bare busy `recvmmsg` loop in this process copying each datagram into a raw
//!   shared-memory SPSC ring, read by a polling reader process: what any path across
//!   processes costs at least on this machine.
//!
//! Each path runs alone (the simulator, one producer, one reader) at 100,000 and
//! 1,000,000 messages/s. Readers poll with `sched_yield` between empty polls, so that a
//! machine with two shared cores still runs the producer. The first tenth of each run is
//! warm-up and not counted. The table gives p50, p99, p99.9 and max, and each path's p50
//! and p99 against the floor's; the CDF of every path is written as an SVG plot
//! (`LATENCY_SVG`, default `target/latency-cdf.svg`).
//!
//! `cargo bench --bench latency` (`LATENCY_SECS`, default 3: seconds of feed per run)

// A test or benchmark fails by panicking: unwrap, expect, panic and indexing are how it
// says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gapless::client::shm::{Poll, ShmReader};
use gapless::client::unix::{Record, RecordReader};
use gapless::internals::{MulticastSpec, RecvBatch, enable_kernel_timestamps, open_multicast};
use gapless::publish::Event;
use gapless::sim::{MoldSim, MoldSimConfig};
use hdrhistogram::Histogram;
use memmap2::MmapMut;

const BIN: &str = env!("CARGO_BIN_EXE_gapless");
/// The environment variable that makes this binary a reader process: `KIND:PATH:COUNT`.
const ROLE: &str = "GAPLESS_LATENCY_READER";
/// The longest a reader or a run waits for the feed.
const RUN_DEADLINE: Duration = Duration::from_secs(120);
/// The quantiles a reader reports for the plot.
const CDF_POINTS: usize = 400;

/// Floor ring: slots of 256 words (2 KiB), after one header line of 8 words.
const SLOT_WORDS: usize = 256;
const SLOTS: usize = 1 << 14;
const HEADER_WORDS: usize = 8;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Latencies of messages after the warm-up (`seq > skip`), ended at `seq == last`.
struct Recorder {
    hist: Histogram<u64>,
    skip: u64,
    last: u64,
    done: bool,
}

impl Recorder {
    fn new(count: u64) -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, 600_000_000_000, 3).unwrap(),
            skip: count / 10,
            last: count,
            done: false,
        }
    }

    fn record(&mut self, seq: u64, recv_ns: u64, now: u64, messages: u64) {
        if seq > self.skip {
            // Only a latency past the histogram's 600 s bound fails; the run's deadline
            // is shorter.
            let _recorded = self
                .hist
                .record_n(now.saturating_sub(recv_ns).max(1), messages);
        }
        if seq + messages > self.last {
            self.done = true;
        }
    }

    /// One summary line, then `CDF_POINTS` lines `quantile nanoseconds`.
    fn report(&self) {
        let h = &self.hist;
        println!(
            "{} {} {} {} {}",
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
        for i in 0..CDF_POINTS {
            // Denser towards the tail: 1 - 10^-(4i/N).
            let q = 1.0 - 10f64.powf(-4.0 * i as f64 / CDF_POINTS as f64);
            println!("{q} {}", h.value_at_quantile(q));
        }
    }
}

/// Waits for work: `sched_yield`, so a polling reader leaves the core to whoever needs it.
fn idle() {
    std::thread::yield_now();
}

fn read_shm(path: &Path, count: u64) {
    let mut reader = ShmReader::open(path, &[]).unwrap();
    let mut rec = Recorder::new(count);
    let deadline = Instant::now() + RUN_DEADLINE;
    while !rec.done && Instant::now() < deadline {
        match reader.poll().unwrap() {
            Poll::Event {
                event: Event::Message { seq, recv_ns, .. },
                ..
            } => rec.record(seq, recv_ns, now_ns(), 1),
            Poll::Event { .. } | Poll::Generation { .. } => {}
            Poll::Idle => idle(),
        }
    }
    rec.report();
}

fn read_unix(path: &Path, count: u64) {
    let stream = UnixStream::connect(path).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = RecordReader::new(BufReader::with_capacity(1 << 16, stream));
    let mut rec = Recorder::new(count);
    let deadline = Instant::now() + RUN_DEADLINE;
    while !rec.done && Instant::now() < deadline {
        match reader.next_record() {
            Ok(Some(Record::Event(Event::Message { seq, recv_ns, .. }))) => {
                rec.record(seq, recv_ns, now_ns(), 1);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    rec.report();
}

/// Maps `path` (of the floor ring's size) as words.
fn map_words(path: &Path, create: bool) -> (MmapMut, usize) {
    let words = HEADER_WORDS + SLOTS * SLOT_WORDS;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(create)
        .open(path)
        .unwrap();
    if create {
        file.set_len((words * 8) as u64).unwrap();
    }
    // SAFETY: the file is this benchmark's own, sized above; other processes change it only
    // through the atomic words below.
    let map = unsafe { MmapMut::map_mut(&file) }.unwrap();
    (map, words)
}

fn words_of(map: &MmapMut, words: usize) -> &[AtomicU64] {
    assert!(map.len() >= words * 8);
    assert_eq!(map.as_ptr().align_offset(8), 0);
    // SAFETY: the mapping is at least `words * 8` bytes, page-aligned (so 8-aligned), lives
    // as long as the borrow, and every access to it, in any process, is atomic.
    unsafe { std::slice::from_raw_parts(map.as_ptr().cast::<AtomicU64>(), words) }
}

fn read_floor(path: &Path, count: u64) {
    let (map, n) = map_words(path, false);
    let words = words_of(&map, n);
    let tail = &words[0];
    let mut pos = 0u64;
    let mut rec = Recorder::new(count);
    let mut copy = vec![0u64; SLOT_WORDS];
    let deadline = Instant::now() + RUN_DEADLINE;
    while !rec.done && Instant::now() < deadline {
        if tail.load(Ordering::Acquire) == pos {
            idle();
            continue;
        }
        let base = HEADER_WORDS + (pos as usize % SLOTS) * SLOT_WORDS;
        let len_words = (words[base + 3].load(Ordering::Relaxed) as usize).min(SLOT_WORDS - 4);
        for (dst, src) in copy.iter_mut().zip(&words[base..base + 4 + len_words]) {
            *dst = src.load(Ordering::Relaxed);
        }
        rec.record(copy[1], copy[0], now_ns(), copy[2]);
        pos += 1;
    }
    rec.report();
}

/// The reader process: `KIND:PATH:COUNT`.
fn reader_role(role: &str) {
    let mut parts = role.splitn(3, ':');
    let (kind, path, count) = (
        parts.next().unwrap(),
        PathBuf::from(parts.next().unwrap()),
        parts.next().unwrap().parse().unwrap(),
    );
    match kind {
        "shm" => read_shm(&path, count),
        "unix" => read_unix(&path, count),
        "floor" => read_floor(&path, count),
        other => panic!("unknown reader {other}"),
    }
}

/// What a reader process reported.
struct Figures {
    n: u64,
    p50: u64,
    p99: u64,
    p999: u64,
    max: u64,
    cdf: Vec<(f64, u64)>,
}

fn spawn_reader(kind: &str, path: &Path, count: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env(ROLE, format!("{kind}:{}:{count}", path.display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn collect(child: Child) -> Figures {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "reader failed");
    let mut lines = BufReader::new(&out.stdout[..]).lines();
    let head: Vec<u64> = lines
        .next()
        .unwrap()
        .unwrap()
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    let cdf = lines
        .map(|l| {
            let l = l.unwrap();
            let (q, v) = l.split_once(' ').unwrap();
            (q.parse().unwrap(), v.parse().unwrap())
        })
        .collect();
    Figures {
        n: head[0],
        p50: head[1],
        p99: head[2],
        p999: head[3],
        max: head[4],
        cdf,
    }
}

fn feed(group: SocketAddrV4, rate: f64, count: u64) -> MoldSim {
    let mut cfg = MoldSimConfig::new(group);
    cfg.count = count;
    cfg.rate = Some(rate);
    cfg.start_delay = Duration::from_millis(1500);
    cfg.heartbeat_interval = Some(Duration::from_millis(100));
    MoldSim::start(cfg).unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A daemon with the one sink under measurement (`shm` or `unix`): another sink would be
/// another consumer of the rx thread's work, and the unix sink a thread of its own, on the
/// same two cores.
fn start_daemon(kind: &str, dir: &Path, group: SocketAddrV4, sim: &MoldSim) -> Child {
    let config = dir.join("gapless.toml");
    let sink = match kind {
        "shm" => format!(
            "[[sink]]\nkind = \"shm\"\npath = \"{}\"\n",
            dir.join("bench.ring").display()
        ),
        _ => format!(
            "[[sink]]\nkind = \"unix\"\npath = \"{}\"\nclient_queue = 1048576\n",
            dir.join("bench.sock").display()
        ),
    };
    std::fs::write(
        &config,
        format!(
            r#"
[daemon]
metrics_listen = "127.0.0.1:{metrics}"
idle = "busy-spin"
log_level = "warn"

[[venue]]
name = "bench"
kind = "moldudp64"
start = "from-start"

  [[venue.channel]]
  name = "a"
  group = "{group}"
  interface = "127.0.0.1"
  rerequest = ["{rerequest}"]
  rcvbuf = 8388608

{sink}"#,
            metrics = free_port(),
            rerequest = sim.rerequest_addr(),
        ),
    )
    .unwrap();
    let notify_path = dir.join("notify.sock");
    // The previous run's socket, if there was one; absent is as good as removed.
    let _ = std::fs::remove_file(&notify_path);
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).expect("READY=1 within 30 s");
    assert_eq!(&buf[..n], b"READY=1");
    child
}

fn stop(mut child: Child) {
    // SAFETY: signalling the child process this benchmark started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    child.wait().unwrap();
}

/// One daemon path (`shm` or `unix`) at `rate` for `count` messages.
fn daemon_path(kind: &str, dir: &Path, group: SocketAddrV4, rate: f64, count: u64) -> Figures {
    let sim = feed(group, rate, count);
    let daemon = start_daemon(kind, dir, group, &sim);
    let target = match kind {
        "shm" => dir.join("bench.ring"),
        _ => dir.join("bench.sock"),
    };
    let reader = spawn_reader(kind, &target, count);
    let figures = collect(reader);
    stop(daemon);
    drop(sim);
    figures
}

/// The floor at `rate`: this process's busy `recvmmsg` loop into a raw ring.
fn floor_path(dir: &Path, group: SocketAddrV4, rate: f64, count: u64) -> Figures {
    let path = dir.join("floor.ring");
    let (map, n) = map_words(&path, true);
    let spec = MulticastSpec {
        group,
        interface: Ipv4Addr::LOCALHOST,
        source: None,
        rcvbuf: 8 << 20,
    };
    let (socket, _) = open_multicast(&spec).unwrap();
    enable_kernel_timestamps(&socket).unwrap();
    let reader = spawn_reader("floor", &path, count);
    let sim = feed(group, rate, count);
    let stop_rx = Arc::new(AtomicBool::new(false));
    let stopper = Arc::clone(&stop_rx);
    let rx = std::thread::spawn(move || {
        let words = words_of(&map, n);
        let mut batch = RecvBatch::new(64, 2048);
        let mut tail = 0u64;
        let fd = socket.as_raw_fd();
        while !stopper.load(Ordering::Relaxed) {
            let got = batch.recv(fd).unwrap_or(0);
            for d in batch.iter() {
                let p = d.payload;
                if p.len() < 20 {
                    continue;
                }
                let seq = u64::from_be_bytes(p[10..18].try_into().unwrap());
                let msgs = u64::from(u16::from_be_bytes(p[18..20].try_into().unwrap()));
                if msgs == 0 || msgs == 0xFFFF {
                    continue;
                }
                let base = HEADER_WORDS + (tail as usize % SLOTS) * SLOT_WORDS;
                let len_words = p.len().div_ceil(8).min(SLOT_WORDS - 4);
                words[base].store(d.kernel_ns.unwrap_or(0), Ordering::Relaxed);
                words[base + 1].store(seq, Ordering::Relaxed);
                words[base + 2].store(msgs, Ordering::Relaxed);
                words[base + 3].store(len_words as u64, Ordering::Relaxed);
                for (i, chunk) in p.chunks(8).take(len_words).enumerate() {
                    let mut w = [0u8; 8];
                    w[..chunk.len()].copy_from_slice(chunk);
                    words[base + 4 + i].store(u64::from_le_bytes(w), Ordering::Relaxed);
                }
                tail += 1;
                words[0].store(tail, Ordering::Release);
            }
            if got == 0 {
                std::hint::spin_loop();
            }
        }
    });
    let figures = collect(reader);
    stop_rx.store(true, Ordering::Relaxed);
    rx.join().unwrap();
    drop(sim);
    figures
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The CDF of every run, latency on a log axis (1 µs to the largest quantile plotted).
fn write_svg(path: &Path, runs: &[(String, Figures)]) {
    let (w, h, left, bottom, top, right) = (900.0, 560.0, 70.0, 60.0, 40.0, 200.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let hi = runs
        .iter()
        .flat_map(|(_, f)| f.cdf.iter().map(|&(_, v)| v))
        .max()
        .unwrap_or(1_000)
        .max(10_000) as f64;
    let (lo_log, hi_log) = (3.0f64, hi.log10().ceil());
    let x = |ns: u64| left + ((ns.max(1_000) as f64).log10() - lo_log) / (hi_log - lo_log) * pw;
    let y = |q: f64| top + (1.0 - q) * ph;
    let colours = ["#1b9e77", "#d95f02", "#7570b3"];
    let mut svg = String::new();
    writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    )
    .unwrap();
    writeln!(
        svg,
        r#"<rect width="{w}" height="{h}" fill="white"/><text x="{left}" y="24" font-size="14">Kernel receive to a reader in another process, CDF (2 shared cores)</text>"#
    )
    .unwrap();
    for d in (lo_log as i32)..=(hi_log as i32) {
        let xv = x(10u64.pow(d as u32));
        let label = match d {
            3 => "1 µs".to_owned(),
            4 => "10 µs".to_owned(),
            5 => "100 µs".to_owned(),
            6 => "1 ms".to_owned(),
            7 => "10 ms".to_owned(),
            8 => "100 ms".to_owned(),
            _ => format!("1e{d} ns"),
        };
        writeln!(
            svg,
            r##"<line x1="{xv:.1}" y1="{top}" x2="{xv:.1}" y2="{}" stroke="#ddd"/><text x="{xv:.1}" y="{}" text-anchor="middle">{label}</text>"##,
            top + ph,
            top + ph + 18.0
        )
    .unwrap();
    }
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0] {
        let yv = y(q);
        writeln!(
            svg,
            r##"<line x1="{left}" y1="{yv:.1}" x2="{}" y2="{yv:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{q}</text>"##,
            left + pw,
            left - 6.0,
            yv + 4.0
        )
    .unwrap();
    }
    for (i, (name, f)) in runs.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let dash = if i >= colours.len() {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let points: String = f
            .cdf
            .iter()
            .map(|&(q, v)| format!("{:.1},{:.1} ", x(v), y(q)))
            .collect();
        writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{points}"/>"#
        )
        .unwrap();
        let ly = top + 20.0 + i as f64 * 20.0;
        let lx = left + pw + 16.0;
        writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}">{name}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0
        )
    .unwrap();
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).unwrap();
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        reader_role(&role);
        return;
    }
    let secs: f64 = std::env::var("LATENCY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let svg = std::env::var("LATENCY_SVG").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/latency-cdf.svg"),
        PathBuf::from,
    );
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("gapless-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    println!("latency: kernel receive timestamp -> a reader in another process sees the message");
    println!(
        "(loss-free MoldUDP64 on loopback, busy-spin rx, readers poll with sched_yield; two shared cores)"
    );
    println!(
        "{:<9} {:<6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "rate",
        "path",
        "messages",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "p50/floor",
        "p99/floor"
    );
    let mut runs = Vec::new();
    for (i, rate) in [100_000.0f64, 1_000_000.0].into_iter().enumerate() {
        let count = (rate * secs) as u64;
        let label = if rate >= 1e6 { "1M/s" } else { "100k/s" };
        let group = |k: u8| {
            SocketAddrV4::new(
                Ipv4Addr::new(239, 255, 65, 10 * i as u8 + k),
                46500 + u16::from(k),
            )
        };
        let floor = floor_path(&dir, group(1), rate, count);
        let shm = daemon_path("shm", &dir, group(2), rate, count);
        let unix = daemon_path("unix", &dir, group(3), rate, count);
        for (name, f) in [("floor", &floor), ("shm", &shm), ("unix", &unix)] {
            println!(
                "{:<9} {:<6} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>10.2} {:>10.2}",
                label,
                name,
                f.n,
                us(f.p50),
                us(f.p99),
                us(f.p999),
                us(f.max),
                f.p50 as f64 / floor.p50.max(1) as f64,
                f.p99 as f64 / floor.p99.max(1) as f64,
            );
        }
        runs.push((format!("floor {label}"), floor));
        runs.push((format!("shm {label}"), shm));
        runs.push((format!("unix {label}"), unix));
    }
    // Floor, shm, unix at 100k/s, then the same at 1M/s: colours mean paths, dashes 1M/s.
    write_svg(&svg, &runs);
    println!("CDF plot: {}", svg.display());
    // The benchmark's own scratch directory; a leftover does no harm.
    let _ = std::fs::remove_dir_all(&dir);
}
