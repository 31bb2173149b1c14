//! Starting and stopping the daemon: sockets, sinks, the rx thread, metrics, readiness.
//!
//! ```no_run
//! use gapless::config::Config;
//! use gapless::daemon::Daemon;
//! use gapless::publish::Event;
//!
//! let config = Config::load("config/demo.toml").map_err(|e| e.to_string())?;
//! let mut daemon = Daemon::new(config);
//! // An in-process consumer: its own lock-free queue, fed by the rx thread.
//! let mut consumer = daemon.subscribe(1 << 20);
//! let running = daemon.start()?;
//! let mut seen = 0;
//! while seen < 10 {
//!     if let Some(()) = consumer.pop(|event| {
//!         if let Event::Message { seq, payload, .. } = event {
//!             println!("{seq}: {} bytes", payload.len());
//!         }
//!     }) {
//!         seen += 1;
//!     }
//! }
//! let summary = running.stop()?;
//! println!("delivered {}", summary.delivered);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use thiserror::Error;

use crate::config::{Config, Idle, NatsSink, Rerequest, Sink, VenueKind};
use crate::daemon::cursor::CursorKeeper;
use crate::drive::live::{RxError, RxLoop, RxOptions, RxResult, RxShared, StreamView};
use crate::io::idle::IdleStrategy;
use crate::metrics::{Exporter, ExporterHandle, Registry, StreamMetrics};
use crate::publish::fanout::Fanout;
use crate::publish::jsonl::StreamNames;
use crate::publish::wire::StreamName;
use crate::publish::{Consumer, Producer, channel};
use crate::sinks::jsonl::{JsonlSink, JsonlSinkHandle, Rotation};
use crate::sinks::nats::NatsSinkHandle;
use crate::sinks::nats_recovery::{JetStreamChannel, JetStreamRecovery};
use crate::sinks::pcap::PcapSinkHandle;
use crate::sinks::shm::ShmSink;
use crate::sinks::unix::{UnixSink, UnixSinkHandle, set_access};
use crate::venue::udp::Wire;
use crate::venue::{AnyVenue, BuildError, Resume, Venue as _, line_name};

/// Why the daemon could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// A venue's sockets could not be opened, joined or registered.
    #[error(transparent)]
    Socket(#[from] RxError),
    /// A sink could not start, or did not finish cleanly.
    #[error("sink {path}: {source}")]
    Sink {
        /// The sink's path.
        path: PathBuf,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The rx thread could not start, or failed.
    #[error("rx thread: {0}")]
    Rx(std::io::Error),
    /// The rx core could not be pinned.
    #[error("rx thread: {0}")]
    Pin(crate::io::IoError),
    /// The metrics endpoint could not start.
    #[error("metrics endpoint {addr}: {source}")]
    Metrics {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A venue could not be set up.
    #[error(transparent)]
    Venue(#[from] BuildError),
    /// `GAPLESS_CHAOS` is set but cannot be read.
    #[error("GAPLESS_CHAOS: {0}")]
    Chaos(#[from] crate::drive::live::chaos::ChaosParseError),
}

/// The environment variable that turns loss injection on (tests only): comma-separated
/// `key=value` with keys `seed`, `drop`, `burst`, `burst_len`, `duplicate`, `reorder`,
/// `delay` (probabilities per received multicast datagram, 0 to 1) and `delay_ms`, for
/// example `GAPLESS_CHAOS=seed=7,drop=0.02,reorder=0.01`.
pub const CHAOS_ENV: &str = "GAPLESS_CHAOS";

/// What a run did, for the final summary.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Messages and frames handed to consumers.
    pub delivered: u64,
    /// Events a consumer queue had no room for.
    pub dropped: u64,
    /// The consumers that dropped events, by name (`jsonl:PATH`, `unix:PATH`,
    /// `in-process-N`), with how many each.
    pub dropped_by: Vec<(String, u64)>,
    /// Per stream, at the end.
    pub streams: Vec<StreamView>,
    /// Hand-off latency percentiles in nanoseconds (from the metrics' histograms, so
    /// within their 12.5% bucket width): p50, p90, p99, p99.9, max.
    pub latency_ns: Option<[u64; 5]>,
}

/// A configured daemon, not yet started.
pub struct Daemon {
    config: Config,
    extra: Vec<Producer>,
}

impl Daemon {
    /// A daemon for a validated configuration.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            extra: Vec::new(),
        }
    }

    /// Streams the configuration defines, in consumer-id order: (venue, stream).
    pub fn stream_names(&self) -> StreamNames {
        let mut names = StreamNames::new();
        let mut id = 0u16;
        for venue in &self.config.venues {
            for stream in venue_streams(&venue.kind) {
                names.set(id, venue.name.as_str(), &stream);
                id = id.saturating_add(1);
            }
        }
        names
    }

    fn stream_count(&self) -> usize {
        self.config
            .venues
            .iter()
            .map(|v| v.kind.stream_count())
            .sum()
    }

    /// An in-process consumer with a queue of `capacity_bytes`: it receives every event,
    /// and when it falls behind it gets an overrun marker instead of slowing anyone.
    pub fn subscribe(&mut self, capacity_bytes: usize) -> Consumer {
        let (producer, consumer) = channel(capacity_bytes, self.stream_count().max(1));
        self.extra.push(producer);
        consumer
    }

    /// Opens every socket, starts the sinks and the rx thread. When this returns `Ok`,
    /// every group is joined (the moment to report readiness).
    pub fn start(self) -> Result<Running, DaemonError> {
        let names = self.stream_names();
        let streams = self.stream_count().max(1);
        let daemon = &self.config.daemon;
        let queue_bytes = daemon.consumer_queue.get().saturating_mul(64).max(1 << 16);

        let state_dir = daemon.state_directory.clone().or_else(|| {
            // systemd's StateDirectory=; several are separated by colons.
            std::env::var_os("STATE_DIRECTORY")
                .and_then(|v| {
                    v.to_str()
                        .and_then(|s| s.split(':').next())
                        .map(PathBuf::from)
                })
                .filter(|p| !p.as_os_str().is_empty())
        });
        let saved = state_dir
            .as_deref()
            .map(crate::daemon::cursor::load)
            .unwrap_or_default();
        // A loopback socket for each channel that reads JetStream as a re-request server:
        // the venues get its address, the recovery sources (started below) answer on it.
        let (jetstream_sources, jetstream_addrs) = jetstream_channels(&self.config, &saved)?;
        let mut venues =
            AnyVenue::all_from_config_with(&self.config, &|venue, stream, channel| {
                jetstream_addrs
                    .get(&(venue.to_string(), stream.to_string(), channel.to_string()))
                    .copied()
            })?;
        if let Some(dir) = &state_dir {
            if !saved.is_empty() {
                crate::log_info!(
                    "resume cursors for {} streams read from {}",
                    saved.len(),
                    dir.display()
                );
            }
            let lookup = |id: u16| {
                let (venue, stream) = names.get(id);
                saved.get(&(venue.to_string(), stream.to_string())).cloned()
            };
            for venue in &mut venues {
                venue.set_resume(&lookup);
            }
        }

        let registry = Arc::new(Registry::new());
        let stream_metrics: Vec<Arc<StreamMetrics>> = stream_ids(streams)
            .map(|id| {
                let (venue, stream) = names.get(id);
                registry.add_stream(venue, stream)
            })
            .collect();
        for (i, p) in self.extra.iter().enumerate() {
            registry.add_consumer(&format!("in-process-{i}"), Arc::clone(p.stats()));
        }
        let mut producers = self.extra;
        let mut jsonl = Vec::new();
        let mut unix = Vec::new();
        let mut recorder = None;
        let mut rings = Vec::new();
        let mut nats = Vec::new();
        for sink in &self.config.sinks {
            match sink {
                Sink::Jsonl {
                    path,
                    rotate_bytes,
                    rotate_after,
                    keep,
                } => {
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    let (producer, consumer) = channel(queue_bytes, streams);
                    let rotation = Rotation {
                        max_bytes: *rotate_bytes,
                        max_age: *rotate_after,
                        keep: *keep,
                    };
                    let handle =
                        JsonlSink::create_rotating(path, rotation, consumer, names.clone())
                            .map_err(|e| DaemonError::Sink {
                                path: path.clone(),
                                source: Box::new(e),
                            })?;
                    registry.add_consumer(
                        &format!("jsonl:{}", path.display()),
                        Arc::clone(producer.stats()),
                    );
                    producers.push(producer);
                    jsonl.push(handle);
                }
                Sink::Unix {
                    path,
                    client_queue,
                    history_bytes,
                    mode,
                    group,
                } => {
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    let table: Vec<StreamName> = stream_ids(streams)
                        .map(|id| {
                            let (venue, stream) = names.get(id);
                            StreamName {
                                venue: venue.to_string(),
                                stream: stream.to_string(),
                            }
                        })
                        .collect();
                    let bytes = client_queue.get().saturating_mul(64).max(1 << 16);
                    let mut handle =
                        UnixSink::start_with_history(path, bytes, *history_bytes, &table).map_err(
                            |e| DaemonError::Sink {
                                path: path.clone(),
                                source: Box::new(e),
                            },
                        )?;
                    set_access(path, *mode, group.as_deref()).map_err(|e| DaemonError::Sink {
                        path: path.clone(),
                        source: Box::new(e),
                    })?;
                    registry.add_socket(&path.display().to_string(), handle.counters());
                    if let Some(p) = handle.take_producer() {
                        registry.add_consumer(
                            &format!("unix:{}", path.display()),
                            Arc::clone(p.stats()),
                        );
                        producers.push(p);
                    }
                    unix.push(handle);
                }
                Sink::Shm { path, size_bytes } => {
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    let table: Vec<StreamName> = stream_ids(streams)
                        .map(|id| {
                            let (venue, stream) = names.get(id);
                            StreamName::new(venue, stream)
                        })
                        .collect();
                    let ring = ShmSink::create(path, *size_bytes, &table).map_err(|e| {
                        DaemonError::Sink {
                            path: path.clone(),
                            source: Box::new(e),
                        }
                    })?;
                    registry.add_ring(&path.display().to_string(), ring.counters());
                    rings.push(ring);
                }
                Sink::Pcap { path, rotate_bytes } => {
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    let (tap, handle) = crate::sinks::pcap::start(path, *rotate_bytes, 64 << 20)
                        .map_err(|e| DaemonError::Sink {
                            path: path.clone(),
                            source: Box::new(e),
                        })?;
                    recorder = Some((tap, handle));
                }
                Sink::Nats(settings) => {
                    let (producer, consumer) = channel(queue_bytes, streams);
                    let handle = crate::sinks::nats::start(settings, consumer, &names, streams)
                        .map_err(|e| DaemonError::Sink {
                            path: PathBuf::from(format!("nats:{}", settings.stream)),
                            source: Box::new(e),
                        })?;
                    let name = format!("nats:{}", settings.stream);
                    registry.add_consumer(&name, Arc::clone(producer.stats()));
                    registry.add_nats(&name, Arc::clone(handle.counters()));
                    producers.push(producer);
                    nats.push(handle);
                }
            }
        }

        let mut recovery = Vec::new();
        for (settings, channels) in jetstream_sources {
            let source = crate::sinks::nats_recovery::start(&settings, channels).map_err(|e| {
                DaemonError::Sink {
                    path: PathBuf::from(format!("jetstream:{}", settings.stream)),
                    source: Box::new(e),
                }
            })?;
            registry.add_jetstream_recovery(
                &format!("nats:{}", settings.stream),
                Arc::clone(source.counters()),
            );
            recovery.push(source);
        }

        let cursors = match &state_dir {
            None => None,
            Some(dir) => {
                let sources: Vec<_> = nats.iter().map(|n| Arc::clone(n.cursors())).collect();
                // Without a sink that acknowledges, the cursor is what the fan-out delivered.
                let input = sources.is_empty().then(|| {
                    let (producer, consumer) = channel(queue_bytes, streams);
                    registry.add_consumer("cursors", Arc::clone(producer.stats()));
                    producers.push(producer);
                    consumer
                });
                // Until a stream moves past it, its saved cursor stands.
                let floor = stream_ids(streams)
                    .map(|id| {
                        let (venue, stream) = names.get(id);
                        saved.get(&(venue.to_string(), stream.to_string())).cloned()
                    })
                    .collect();
                let keeper = CursorKeeper::start(dir, names.clone(), floor, sources, input)
                    .map_err(|e| DaemonError::Sink {
                        path: dir.join(crate::daemon::cursor::FILE_NAME),
                        source: Box::new(e),
                    })?;
                Some(keeper)
            }
        };

        let exporter =
            Exporter::start(daemon.metrics_listen, Arc::clone(&registry)).map_err(|e| {
                DaemonError::Metrics {
                    addr: daemon.metrics_listen,
                    source: Box::new(e),
                }
            })?;
        let venue_metrics = venues
            .iter()
            .map(|v| (!v.counters().is_empty()).then(|| registry.add_venue(v.name())))
            .collect();
        let line_metrics = venues
            .iter()
            .map(|v| {
                (0..v.stream_count())
                    .map(|i| {
                        let stream = v.stream(i).map_or("", |s| s.name);
                        (0..v.lines(i).len())
                            .map(|l| registry.add_line(v.name(), stream, &line_name(l)))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let shared = RxShared {
            metrics: Some(Arc::clone(&registry)),
            stream_metrics: stream_metrics.clone(),
            venue_metrics,
            line_metrics,
            ..RxShared::default()
        };
        // Loss injection for chaos tests: off unless the environment asks, and loud then.
        let chaos = match std::env::var(CHAOS_ENV) {
            Ok(text) => {
                let spec = crate::drive::live::ChaosSpec::parse(&text)?;
                crate::log_warn!(
                    "{CHAOS_ENV} is set ({text}): received datagrams are dropped, duplicated, \
                     delayed and reordered on purpose; never set it in production"
                );
                Some(spec)
            }
            Err(_) => None,
        };
        let options = RxOptions {
            idle: match daemon.idle {
                Idle::BusySpin => IdleStrategy::BusySpin,
                Idle::Yield => IdleStrategy::Yield,
                Idle::Block => IdleStrategy::Block,
            },
            chaos,
            ..RxOptions::default()
        };
        let fanout = Fanout::new(producers)
            .with_metrics(stream_metrics)
            .with_rings(rings);
        let mut rx_loop = RxLoop::new(venues, fanout, options, shared.clone())?;
        let (tap, pcap) = match recorder {
            Some((tap, handle)) => (Some(tap), Some(handle)),
            None => (None, None),
        };
        if let Some(tap) = tap {
            rx_loop = rx_loop.with_recorder(tap);
        }
        let core = daemon.rx_core;
        let (pinned_tx, pinned_rx) = crossbeam_channel::bounded(1);
        let rx = std::thread::Builder::new()
            .name("gapless-rx".into())
            .spawn(move || {
                let pinned = crate::io::affinity::pin_if_configured(core);
                let ok = pinned.is_ok();
                let _ = pinned_tx.send(pinned);
                if !ok {
                    return Err(std::io::Error::other("rx core could not be pinned"));
                }
                rx_loop.run()
            })
            .map_err(DaemonError::Rx)?;
        match pinned_rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                shared.stop.store(true, Ordering::Relaxed);
                let _ = rx.join();
                return Err(DaemonError::Pin(e));
            }
            Err(_) => {
                shared.stop.store(true, Ordering::Relaxed);
                return Err(DaemonError::Rx(std::io::Error::other(
                    "rx thread did not start",
                )));
            }
        }
        Ok(Running {
            shared,
            rx,
            jsonl,
            unix,
            nats,
            recovery,
            cursors,
            names,
            registry,
            exporter: Some(exporter),
            pcap,
        })
    }
}

/// The consumer stream ids of `streams` streams (at most 65,536, as the configuration
/// checks).
fn stream_ids(streams: usize) -> impl Iterator<Item = u16> {
    (0..=u16::MAX).take(streams)
}

/// A channel's JetStream sockets, by the nats sink they read, and their addresses by
/// (venue, nats stream, channel).
type JetStreamChannels = (
    Vec<(NatsSink, Vec<JetStreamChannel>)>,
    HashMap<(String, String, String), SocketAddr>,
);

/// Binds a loopback socket for every channel whose `rerequest` list reads JetStream; a
/// channel with a resume cursor in `saved` reads from it ahead.
fn jetstream_channels(
    config: &Config,
    saved: &HashMap<(String, String), Resume>,
) -> Result<JetStreamChannels, DaemonError> {
    let mut sources: Vec<(NatsSink, Vec<JetStreamChannel>)> = Vec::new();
    let mut addrs = HashMap::new();
    for venue in &config.venues {
        let (wire, channels): (Wire, Vec<(&str, &[Rerequest])>) = match &venue.kind {
            VenueKind::MoldUdp64 { channels, .. } => (
                Wire::MoldUdp64,
                channels
                    .iter()
                    .map(|c| (c.name.as_str(), c.rerequest.as_slice()))
                    .collect(),
            ),
            VenueKind::IexTp { channels, .. } => (
                Wire::IexTp,
                channels
                    .iter()
                    .map(|c| (c.name.as_str(), c.rerequest.as_slice()))
                    .collect(),
            ),
            VenueKind::Binance { .. } => continue,
        };
        for (channel, entries) in channels {
            for entry in entries {
                let Rerequest::JetStream(stream) = entry else {
                    continue;
                };
                let Some(settings) = config.sinks.iter().find_map(|s| match s {
                    Sink::Nats(n) if n.stream == *stream => Some(&**n),
                    _ => None,
                }) else {
                    continue;
                };
                let key = (
                    venue.name.as_str().to_string(),
                    stream.clone(),
                    channel.to_string(),
                );
                if addrs.contains_key(&key) {
                    continue;
                }
                let bound = JetStreamChannel::bind(settings, venue.name.as_str(), channel, wire)
                    .and_then(|mut c| {
                        c.warm = saved
                            .get(&(venue.name.as_str().to_string(), channel.to_string()))
                            .map(|r| (r.label.clone(), r.next));
                        Ok((c.local_addr()?, c))
                    });
                let (addr, bound) = bound.map_err(|e| DaemonError::Sink {
                    path: PathBuf::from(format!("jetstream:{stream}")),
                    source: Box::new(e),
                })?;
                addrs.insert(key, addr);
                match sources.iter_mut().find(|(s, _)| s.stream == *stream) {
                    Some((_, list)) => list.push(bound),
                    None => sources.push((settings.clone(), vec![bound])),
                }
            }
        }
    }
    Ok((sources, addrs))
}

/// The stream names of a venue, in channel or symbol order.
fn venue_streams(kind: &VenueKind) -> Vec<String> {
    match kind {
        VenueKind::MoldUdp64 { channels, .. } => channels
            .iter()
            .map(|c| c.name.as_str().to_string())
            .collect(),
        VenueKind::IexTp { channels, .. } => channels
            .iter()
            .map(|c| c.name.as_str().to_string())
            .collect(),
        VenueKind::Binance { symbols, .. } => {
            symbols.iter().map(|s| s.as_str().to_string()).collect()
        }
    }
}

/// A started daemon.
pub struct Running {
    shared: RxShared,
    rx: JoinHandle<std::io::Result<RxResult>>,
    jsonl: Vec<JsonlSinkHandle>,
    unix: Vec<UnixSinkHandle>,
    nats: Vec<NatsSinkHandle>,
    recovery: Vec<JetStreamRecovery>,
    cursors: Option<CursorKeeper>,
    names: StreamNames,
    registry: Arc<Registry>,
    exporter: Option<ExporterHandle>,
    pcap: Option<PcapSinkHandle>,
}

impl Running {
    /// The metrics registry (what `/metrics` serves).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Where `/metrics` is served.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.exporter.as_ref().map(ExporterHandle::local_addr)
    }

    /// The flag that stops the rx loop (set it from a signal handler).
    pub fn stop_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        Arc::clone(&self.shared.stop)
    }

    /// Monotonic nanoseconds of the rx loop's last cycle (for the watchdog).
    pub fn alive_ns(&self) -> Arc<std::sync::atomic::AtomicU64> {
        Arc::clone(&self.shared.alive_ns)
    }

    /// The latest per-stream view the rx loop published.
    pub fn views(&self) -> Vec<StreamView> {
        self.shared
            .views
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Stream names by consumer id.
    pub fn names(&self) -> &StreamNames {
        &self.names
    }

    /// True once the rx thread has ended (stopped, or failed).
    pub fn is_finished(&self) -> bool {
        self.rx.is_finished()
    }

    /// Stops the rx loop, then drains and flushes every sink.
    pub fn stop(self) -> Result<RunSummary, DaemonError> {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.wait()
    }

    /// Waits for the rx loop to end (after the stop flag is set), then drains and flushes
    /// every sink.
    pub fn wait(mut self) -> Result<RunSummary, DaemonError> {
        let joined = self
            .rx
            .join()
            .map_err(|_| DaemonError::Rx(std::io::Error::other("rx thread panicked")))?;
        let RxResult { views, fanout, .. } = joined.map_err(DaemonError::Rx)?;
        let summary = RunSummary {
            delivered: fanout.delivered,
            dropped: fanout.dropped,
            dropped_by: self
                .registry
                .consumer_drops()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
            streams: views,
            // The metrics' hand-off histograms are the one record of latency.
            latency_ns: Some(self.registry.handoff_latency())
                .filter(|l| l.count > 0)
                .map(|l| [l.p50, l.p90, l.p99, l.p999, l.max]),
        };
        // Dropping the fan-out closes every queue: the sinks drain what is left, then end.
        drop(fanout);
        // Nothing asks JetStream for anything once the rx loop is over.
        for source in self.recovery.drain(..) {
            source.stop();
        }
        for handle in self.jsonl {
            handle.stop().map_err(|e| DaemonError::Sink {
                path: PathBuf::from("jsonl"),
                source: Box::new(e),
            })?;
        }
        for handle in self.nats {
            handle.stop().map_err(|e| DaemonError::Sink {
                path: PathBuf::from("nats"),
                source: Box::new(e),
            })?;
        }
        if let Some(cursors) = self.cursors.take() {
            cursors.stop();
        }
        for handle in self.unix {
            let path = handle.path().to_path_buf();
            handle.stop().map_err(|e| DaemonError::Sink {
                path,
                source: Box::new(e),
            })?;
        }
        if let Some(pcap) = self.pcap.take() {
            let stats = std::sync::Arc::clone(pcap.stats());
            let files = pcap.stop();
            let (written, dropped, errors) = (
                stats.written.load(Ordering::Relaxed),
                stats.dropped.load(Ordering::Relaxed),
                stats.errors.load(Ordering::Relaxed),
            );
            if dropped > 0 || errors > 0 {
                crate::log_warn!(
                    "pcap recorder: {written} datagrams written, {dropped} not recorded (its \
                     queue was full), {errors} write errors"
                );
            }
            for f in files {
                crate::log_info!("recorded {}", f.display());
            }
        }
        if let Some(exporter) = self.exporter.take() {
            exporter.stop();
        }
        Ok(summary)
    }
}
