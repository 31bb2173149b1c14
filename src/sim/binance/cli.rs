//! The command line of `gapless sim binance`, and a runner that prints what
//! happened.

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use super::faults::FaultConfig;
use super::feed::{BookStyle, Source};
use super::handle::later;
use super::{BinanceSim, BinanceSimConfig, SimError, SimStats};

/// Command-line arguments of `gapless sim binance`: the source, the
/// servers and every fault switch.
#[derive(Debug, Clone, clap::Args)]
pub struct BinanceSimArgs {
    /// WebSocket port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 9443)]
    pub ws_port: u16,
    /// HTTP port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 9444)]
    pub http_port: u16,
    /// Symbols of the generated books, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "BTCUSDT,ETHUSDT")]
    pub symbols: Vec<String>,
    /// Update-id style of the generated books.
    #[arg(long, value_enum, default_value_t = BookStyle::Spot)]
    pub style: BookStyle,
    /// Generated events per second per symbol (0: as fast as clients read).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Generated events per symbol before the feed ends.
    #[arg(long)]
    pub count: Option<u64>,
    /// Replay these capture files instead of generating books.
    #[arg(long, num_args = 1..)]
    pub replay: Vec<PathBuf>,
    /// Replay speed factor; without it, as fast as clients read.
    #[arg(long)]
    pub speed: Option<f64>,
    /// Milliseconds between pings (0: none).
    #[arg(long, default_value_t = 20_000)]
    pub ping_ms: u64,
    /// Send snapshot bodies chunked.
    #[arg(long)]
    pub chunked: bool,
    /// Seed of the books and of the event faults.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Symbols the event and snapshot faults apply to (default: all).
    #[arg(long, value_delimiter = ',')]
    pub fault_symbols: Vec<String>,
    /// Probability of dropping a depth event.
    #[arg(long, default_value_t = 0.0)]
    pub drop: f64,
    /// Probability of sending a depth event twice.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Probability of delaying a depth event past the next one.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Stale snapshots served first, per symbol.
    #[arg(long, default_value_t = 0)]
    pub stale_snapshots: u32,
    /// REST requests answered 429 first.
    #[arg(long, default_value_t = 0)]
    pub rate_limited: u32,
    /// `Retry-After` seconds of the 429 answers.
    #[arg(long, default_value_t = 1)]
    pub retry_after: u64,
    /// Drop the TCP connection after this many events.
    #[arg(long)]
    pub disconnect_after: Option<u64>,
    /// Go silent after this many events.
    #[arg(long)]
    pub silence_after: Option<u64>,
    /// Milliseconds of silence (default: for good).
    #[arg(long)]
    pub silence_ms: Option<u64>,
    /// Send `serverShutdown` after this many events, then close.
    #[arg(long)]
    pub shutdown_after: Option<u64>,
    /// Connections (the first ones) given the connection faults; 0: all.
    #[arg(long, default_value_t = 1)]
    pub fault_connections: u32,
    /// Seconds to run before stopping.
    #[arg(long, default_value_t = 60)]
    pub duration_secs: u64,
}

impl BinanceSimArgs {
    /// The simulator configuration these arguments describe.
    pub fn to_config(&self) -> BinanceSimConfig {
        let mut config = if self.replay.is_empty() {
            let symbols: Vec<&str> = self.symbols.iter().map(String::as_str).collect();
            BinanceSimConfig::generated(&symbols, self.style, self.rate)
        } else {
            BinanceSimConfig::recorded(self.replay.clone(), self.speed)
        };
        if let Source::Generated(generated) = &mut config.source {
            (generated.count, generated.seed) = (self.count, self.seed);
        }
        config.ws_port = self.ws_port;
        config.http_port = self.http_port;
        config.ping_interval = (self.ping_ms > 0).then(|| Duration::from_millis(self.ping_ms));
        config.http_chunked = self.chunked;
        config.faults = FaultConfig {
            seed: self.seed,
            symbols: self.fault_symbols.clone(),
            drop: self.drop,
            duplicate: self.duplicate,
            reorder: self.reorder,
            stale_snapshots: self.stale_snapshots,
            rate_limited: self.rate_limited,
            retry_after_secs: self.retry_after,
            disconnect_after: self.disconnect_after,
            silence_after: self.silence_after,
            silence_for: self.silence_ms.map(Duration::from_millis),
            shutdown_after: self.shutdown_after,
            fault_connections: self.fault_connections,
            ..FaultConfig::default()
        };
        config
    }
}

/// Runs the simulator for `--duration-secs` (or until a finite feed has
/// ended and a second has passed), printing the addresses, then the counters
/// and what was injected.
pub fn run_cli(args: &BinanceSimArgs) -> Result<SimStats, SimError> {
    let sim = BinanceSim::start(args.to_config())?;
    println!(
        "WebSocket {} (e.g. {}/stream?streams=btcusdt@depth@100ms)",
        sim.ws_addr(),
        sim.ws_base()
    );
    println!(
        "HTTP      {} (e.g. {}/api/v3/depth?symbol=BTCUSDT&limit=100)",
        sim.http_addr(),
        sim.http_base()
    );
    let deadline = later(Instant::now(), Duration::from_secs(args.duration_secs));
    while Instant::now() < deadline {
        if sim.wait_finished(
            deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(200)),
        ) {
            thread::sleep(
                Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())),
            );
            break;
        }
    }
    let stats = sim.stats();
    println!("{stats:?}");
    for injection in &sim.injected().list {
        println!("injected: {injection:?}");
    }
    sim.stop()?;
    Ok(stats)
}
