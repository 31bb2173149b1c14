//! Command-line arguments for the simulator, and a runner that prints a summary.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::protocol::moldudp64::Session;

use super::SimError;
use super::config::{MoldSimConfig, SimLine, Source};
use super::faults::{FaultConfig, Injected, LineFaults};
use super::handle::MoldSim;
use super::stats::SimStats;

/// How long the publisher may go without publishing a message (while it
/// still has some to publish) before [`run_cli`] gives up on it.
const STALL_BOUND: Duration = Duration::from_secs(30);

/// Arguments of a MoldUDP64 venue simulator run on the loopback interface.
#[derive(Debug, Clone, clap::Args)]
pub struct MoldSimArgs {
    /// Multicast group (or 127.0.0.0/8 address) and port to publish to.
    #[arg(long, default_value = "239.255.0.1:30001", conflicts_with = "line")]
    pub group: SocketAddrV4,
    /// A redundant line, repeatable (the first replaces --group): its group, then what the
    /// line does on its own, as `GROUP[,loss=P][,burst=LEN/EVERY][,delay_us=N]
    /// [,dead_after=PACKETS][,seed=N]`. --loss and the other faults apply before the
    /// lines: what they drop is on no line.
    #[arg(long, value_parser = parse_line)]
    pub line: Vec<SimLine>,
    /// Session name, at most 10 printable ASCII characters.
    #[arg(long, default_value = "SIM0000001")]
    pub session: String,
    /// Messages to publish.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Messages per second; 0 publishes as fast as possible.
    #[arg(long, default_value_t = 10_000.0)]
    pub rate: f64,
    /// Largest UDP payload of a packet, MoldUDP64 header included.
    #[arg(long, default_value_t = 1_400)]
    pub max_payload: usize,
    /// Heartbeat after this many idle milliseconds; 0 sends none.
    #[arg(long, default_value_t = 1_000)]
    pub heartbeat_ms: u64,
    /// Milliseconds to wait before the first message.
    #[arg(long, default_value_t = 0)]
    pub start_delay_ms: u64,
    /// Milliseconds the servers keep answering after the last packet.
    #[arg(long, default_value_t = 1_000)]
    pub linger_ms: u64,
    /// Probability that a data packet is lost.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Packets dropped in a row by each loss burst; 0 disables bursts.
    #[arg(long, default_value_t = 0)]
    pub burst_len: u32,
    /// Mean number of packets between two loss bursts; 0 disables bursts.
    #[arg(long, default_value_t = 0)]
    pub burst_every: u64,
    /// Probability that a data packet is held back and sent late.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// A held packet goes out after 1 to this many later packets.
    #[arg(long, default_value_t = 3)]
    pub reorder_depth: u32,
    /// Probability that a data packet is sent twice.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Probability that the re-request server drops a request it would answer.
    #[arg(long, default_value_t = 0.0)]
    pub drop_answers: f64,
    /// Keep the re-request server down: it ignores every request.
    #[arg(long)]
    pub rerequest_down: bool,
    /// Start a new session (sequence back to 1) after this many messages of each session.
    #[arg(long)]
    pub restart_after: Option<u64>,
    /// Seed of every injected fault.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Publish the messages of this Nasdaq sample file instead of synthetic ones.
    #[arg(long)]
    pub itch_file: Option<PathBuf>,
    /// Instrument ids the synthetic messages are spread over.
    #[arg(long, default_value_t = 100)]
    pub instruments: u16,
    /// Re-request server port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    pub rerequest_port: u16,
    /// Snapshot server port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    pub snapshot_port: u16,
    /// Messages of the current session kept for re-requests.
    #[arg(long, default_value_t = 65_536)]
    pub history: usize,
    /// Most messages one answer carries; a request for more gets at most this many.
    #[arg(long, default_value_t = 1_000)]
    pub max_request: u16,
    /// Username snapshot clients log in with.
    #[arg(long, default_value = "sim")]
    pub username: String,
    /// Password snapshot clients log in with.
    #[arg(long, default_value = "sim")]
    pub password: String,
}

impl MoldSimArgs {
    /// The configuration these arguments describe (checked when started).
    pub fn to_config(&self) -> Result<MoldSimConfig, SimError> {
        let mut config = MoldSimConfig::new(self.group);
        if let Some((first, more)) = self.line.split_first() {
            config.group = first.group;
            config.line_faults = first.faults;
            config.more_lines = more.to_vec();
        }
        config.session = Session::from_ascii(self.session.as_bytes())?;
        config.count = self.count;
        config.rate = (self.rate != 0.0).then_some(self.rate);
        config.max_payload = self.max_payload;
        config.heartbeat_interval =
            (self.heartbeat_ms > 0).then(|| Duration::from_millis(self.heartbeat_ms));
        config.start_delay = Duration::from_millis(self.start_delay_ms);
        config.source = match &self.itch_file {
            Some(path) => Source::ItchFile(path.clone()),
            None => Source::Synthetic {
                instruments: self.instruments,
            },
        };
        config.faults = FaultConfig {
            seed: self.seed,
            loss: self.loss,
            burst_len: self.burst_len,
            burst_every: self.burst_every,
            reorder: self.reorder,
            reorder_depth: self.reorder_depth,
            duplicate: self.duplicate,
            restart_after: self.restart_after,
            drop_answers: self.drop_answers,
            rerequest_down: self.rerequest_down,
        };
        config.rerequest_port = self.rerequest_port;
        config.snapshot_port = self.snapshot_port;
        config.history = self.history;
        config.max_request = self.max_request;
        config.username.clone_from(&self.username);
        config.password.clone_from(&self.password);
        Ok(config)
    }
}

/// Parses `GROUP[,loss=P][,burst=LEN/EVERY][,delay_us=N][,dead_after=PACKETS][,seed=N]`.
pub fn parse_line(text: &str) -> Result<SimLine, String> {
    let mut parts = text.split(',');
    let group = parts
        .next()
        .unwrap_or_default()
        .parse::<SocketAddrV4>()
        .map_err(|e| format!("{text:?}: the group: {e}"))?;
    let mut faults = LineFaults::default();
    for part in parts {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not key=value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{key}={v:?}: {e}"));
        match key {
            "loss" => {
                faults.loss = value
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| format!("loss={value:?}: a probability in 0..=1"))?;
            }
            "burst" => {
                let (len, every) = value
                    .split_once('/')
                    .ok_or_else(|| format!("burst={value:?}: LEN/EVERY"))?;
                faults.burst_len = u32::try_from(number(len)?).map_err(|e| e.to_string())?;
                faults.burst_every = number(every)?;
            }
            "delay_us" => faults.delay = Duration::from_micros(number(value)?),
            "dead_after" => faults.dead_after = Some(number(value)?),
            "seed" => faults.seed = number(value)?,
            _ => {
                return Err(format!(
                    "{key:?}: one of loss, burst, delay_us, dead_after, seed"
                ));
            }
        }
    }
    Ok(SimLine { group, faults })
}

/// Runs the simulator to completion: publishes every message, keeps the
/// servers up for `--linger-ms`, stops, and prints a summary of what was
/// sent and injected to stderr.
///
/// Gives up with [`SimError::Timeout`] if the publisher stops making
/// progress for 30 s.
pub fn run_cli(args: MoldSimArgs) -> Result<(), SimError> {
    let config = args.to_config()?;
    let started = Instant::now();
    let mut sim = MoldSim::start(config)?;
    eprintln!(
        "mold sim: publishing to {} (session {}), re-request server {}, snapshot server {}",
        sim.group(),
        sim.session(),
        sim.rerequest_addr(),
        sim.snapshot_addr()
    );
    let mut last_progress = (0, Instant::now());
    loop {
        match sim.wait(Duration::from_millis(500)) {
            Ok(()) => break,
            Err(SimError::Timeout { .. }) => {}
            Err(e) => return Err(e),
        }
        let published = sim.stats().messages_published;
        if published != last_progress.0 {
            last_progress = (published, Instant::now());
        } else if last_progress.1.elapsed()
            >= STALL_BOUND.saturating_add(Duration::from_millis(args.start_delay_ms))
        {
            return Err(SimError::Timeout {
                what: "publisher (no progress)",
                after: STALL_BOUND,
            });
        }
    }
    thread::sleep(Duration::from_millis(args.linger_ms.min(600_000)));
    let stats = sim.stats();
    let injected = sim.injected();
    let session = sim.session();
    sim.stop()?;
    eprint!("{}", summary(&stats, &injected, session, started.elapsed()));
    Ok(())
}

/// The text [`run_cli`] prints at the end.
pub fn summary(
    stats: &SimStats,
    injected: &Injected,
    session: Session,
    elapsed: Duration,
) -> String {
    let ranges = |list: &[super::SeqRange]| {
        let shown: Vec<String> = list
            .iter()
            .take(10)
            .map(|r| format!("{}:{}..={}", r.session, r.first, r.last))
            .collect();
        let more = list.len().saturating_sub(shown.len());
        let tail = if more > 0 {
            format!(" (+{more} more)")
        } else {
            String::new()
        };
        format!("[{}]{tail}", shown.join(", "))
    };
    format!(
        "mold sim summary ({:.1} s, last session {session}):\n\
         \x20 sent: {} messages in {} data packets, {} datagrams ({} bytes), {} heartbeats, {} end-of-session, {} send errors, {} sessions\n\
         \x20 injected: {} messages lost on every line in {} packets ({} by bursts) {}\n\
         \x20           packets lost by each line on its own: {:?}\n\
         \x20           {} packets duplicated, {} reordered, {} restarts\n\
         \x20 re-request: {} received, {} served ({} messages, {} of them carried by a line; {} capped at --max-request, {} cut to one packet or the history's end)\n\
         \x20             {} refused: {} malformed, {} for another session, {} outside the history, {} from outside 127/8, {} answers dropped by fault, {} while down\n\
         \x20 snapshot: {} clients, {} snapshots ({} messages), {} logins rejected\n",
        elapsed.as_secs_f64(),
        stats.messages_published,
        stats.data_packets,
        stats.packets_sent,
        stats.bytes_sent,
        stats.heartbeats_sent,
        stats.end_of_session_sent,
        stats.send_errors,
        stats.sessions,
        injected.lost_messages(),
        injected.lost_packets,
        injected.burst_packets,
        ranges(&injected.lost),
        injected.line_lost_packets,
        injected.duplicated.len(),
        injected.reordered.len(),
        injected.restarts.len(),
        stats.requests_received,
        stats.requests_served,
        stats.messages_resent,
        stats.messages_resent_carried,
        stats.requests_capped,
        stats.answers_short,
        stats.requests_dropped(),
        stats.requests_malformed,
        stats.requests_wrong_session,
        stats.requests_out_of_range,
        stats.requests_foreign,
        injected.answers_dropped,
        injected.requests_while_down,
        stats.snapshot_clients,
        stats.snapshots_sent,
        stats.snapshot_messages,
        stats.logins_rejected,
    )
}
