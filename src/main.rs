//! The `gapless` command: parse arguments, then hand over to the library.
//!
//! Exit codes: 0 success; 1 runtime failure (I/O, a capture that cannot be read); 2 bad
//! usage or an invalid configuration.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use std::time::Duration;

use gapless::config::Config;
use gapless::daemon::{demo, service};
use gapless::publish::sinks::tail::tail;
use gapless::replay::{ReplayOptions, replay};
use gapless::sim::{MoldSimArgs, run_cli};
use gapless::venue::Wire;

/// A market-data feed handler: complete, in-order, exactly-once delivery of sequenced
/// feeds, or an explicit statement that a stream is not synced.
#[derive(Debug, Parser)]
#[command(name = "gapless", version, about, long_about = None)]
#[command(
    after_help = "Exit codes: 0 success, 1 runtime failure, 2 bad usage or invalid configuration."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the feed handler described by a configuration file until SIGTERM or SIGINT.
    Run {
        /// The TOML file (one per venue host).
        #[arg(long, short)]
        config: PathBuf,
        /// Print a status line per stream every this many seconds (0: never).
        #[arg(long, default_value_t = 0)]
        status_secs: u64,
    },
    /// Simulated venues on loopback, with loss, and the handler against them.
    Demo {
        /// Run this long, then print the summary.
        #[arg(long, default_value_t = 20)]
        duration: u64,
    },
    /// Validate a configuration file; prints every error with file:line:column.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Print a unix-socket sink's live stream as JSON lines.
    Tail {
        /// The sink's socket path.
        socket: PathBuf,
        /// Stop after this many events.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Replay a pcap/pcapng capture (plain or zstd) through the live pipeline.
    Replay(ReplayArgs),
    /// Run a simulated venue on loopback.
    #[command(subcommand)]
    Sim(SimCommand),
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// A MoldUDP64 venue: multicast publisher, re-request server, SoupBinTCP snapshot server.
    Moldudp64(MoldSimArgs),
    /// A Binance venue: WebSocket combined depth streams and REST snapshots, recorded or
    /// generated, with faults.
    Binance(gapless::sim::binance::BinanceSimArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Protocol {
    /// Nasdaq MoldUDP64.
    Moldudp64,
    /// IEX-TP.
    IexTp,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The capture file.
    file: PathBuf,
    /// Wire protocol of the selected datagrams.
    #[arg(long, value_enum, default_value = "moldudp64")]
    protocol: Protocol,
    /// Take the protocol, destinations and venue name from the first matching venue of
    /// this configuration instead.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Only datagrams to this group:port (repeatable); default: every UDP datagram.
    #[arg(long = "group")]
    groups: Vec<SocketAddrV4>,
    /// Write the consumer stream as JSON lines here ("-" for standard output).
    #[arg(long)]
    jsonl: Option<PathBuf>,
    /// Pace at this multiple of real time (1.0 = as recorded); default: as fast as possible.
    #[arg(long)]
    speed: Option<f64>,
    /// Every session starts at sequence 1: report loss before the first packet too.
    #[arg(long)]
    from_start: bool,
    /// Venue name in the JSON lines.
    #[arg(long, default_value = "replay")]
    venue: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            config,
            status_secs,
        } => {
            let config = match Config::load(&config) {
                Ok(c) => c,
                Err(errors) => {
                    eprintln!("{errors}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = service::block_stop_signals() {
                eprintln!("error: cannot set up signal handling: {e}");
                return ExitCode::FAILURE;
            }
            let options = service::ServiceOptions {
                status_every: (status_secs > 0).then(|| Duration::from_secs(status_secs)),
                duration: None,
            };
            match service::run_service(config, &options) {
                Ok(summary) => {
                    eprint!("{}", service::summary_text(&summary));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Demo { duration } => {
            if let Err(e) = service::block_stop_signals() {
                eprintln!("error: cannot set up signal handling: {e}");
                return ExitCode::FAILURE;
            }
            match demo::run_demo(Duration::from_secs(duration)) {
                Ok(summary) => {
                    eprint!("{}", service::summary_text(&summary));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Tail { socket, limit } => {
            let stdout = io::stdout();
            match tail(&socket, stdout.lock(), limit) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {}: {e}", socket.display());
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(config) => {
                eprintln!(
                    "{}: ok ({} venue(s), {} sink(s))",
                    file.display(),
                    config.venues.len(),
                    config.sinks.len()
                );
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::from(2)
            }
        },
        Command::Replay(args) => run_replay(args),
        Command::Sim(SimCommand::Binance(args)) => match gapless::sim::binance::run_cli(&args) {
            Ok(stats) => {
                eprintln!("{stats:?}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Sim(SimCommand::Moldudp64(args)) => match run_cli(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn run_replay(args: ReplayArgs) -> ExitCode {
    let mut options = ReplayOptions {
        wire: match args.protocol {
            Protocol::Moldudp64 => Wire::MoldUdp64,
            Protocol::IexTp => Wire::IexTp,
        },
        destinations: args.groups.clone(),
        venue: args.venue.clone(),
        speed: args.speed,
        from_start: args.from_start,
    };
    if let Some(path) = &args.config {
        match Config::load(path) {
            Ok(config) => {
                if let Err(e) = gapless::daemon::apply_replay_config(&config, &mut options) {
                    eprintln!("error: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
            Err(errors) => {
                eprintln!("{errors}");
                return ExitCode::from(2);
            }
        }
    }
    let result = match &args.jsonl {
        None => replay(&args.file, &options, None),
        Some(p) if p.as_os_str() == "-" => {
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            replay(&args.file, &options, Some(&mut out))
        }
        Some(p) => match File::create(p) {
            Ok(f) => {
                let mut out = BufWriter::new(f);
                replay(&args.file, &options, Some(&mut out))
            }
            Err(e) => {
                eprintln!("error: cannot create {}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        },
    };
    match result {
        Ok(summary) => {
            let mut err = io::stderr().lock();
            let _ = writeln!(err, "{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            ExitCode::FAILURE
        }
    }
}
