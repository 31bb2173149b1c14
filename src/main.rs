//! The `gapless` command: parse arguments, then hand over to the library.
//!
//! Exit codes: 0 success; 1 runtime failure (I/O, a capture that cannot be read); 2 bad
//! usage or an invalid configuration.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::time::Duration;

use gapless::client::unix::tail_from;
use gapless::config::Config;
use gapless::daemon::{demo, service};
use gapless::drive::replay::pcap::ReplayError;
use gapless::drive::replay::{ReplayOptions, replay};
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
    /// Validate a configuration file: every error and warning in one pass, each with
    /// file:line:column, the line with a caret under the mistake, and a suggestion for a near
    /// miss. Exits 2 on any error.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Print a unix-socket sink's live stream, or a shared-memory ring, as JSON lines.
    Tail {
        /// The sink's socket path.
        #[arg(required_unless_present = "shm", conflicts_with = "shm")]
        socket: Option<PathBuf>,
        /// Read the shared-memory ring at this path instead (from its oldest record).
        #[arg(long, value_name = "PATH")]
        shm: Option<PathBuf>,
        /// Resume a stream (id, name or venue/stream) at an epoch and sequence: with --shm the
        /// ring's epoch number, on a socket the epoch's label (empty for a stream without
        /// one); what is no longer held is reported as an overrun. Repeatable. On a socket,
        /// lines then carry the stream's "epoch" label, and the cursors to carry on from are
        /// printed to stderr at the end.
        #[arg(long, value_name = "STREAM=EPOCH:SEQ")]
        from: Vec<String>,
        /// With --shm: exit once the producer stopped and no new ring came for this long.
        #[arg(long, value_name = "MS", requires = "shm")]
        exit_when_closed_ms: Option<u64>,
        /// Stop after this many events.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Replay a pcap/pcapng capture (plain, gzip or zstd; `-` reads standard input) through
    /// the live pipeline, in bounded memory.
    Replay(ReplayArgs),
    /// Run a simulated venue on loopback.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page, gapless(1), in roff.
    Manpage,
    /// A live table of a running daemon's streams and consumers, from its metrics endpoint.
    Top {
        /// The daemon's `metrics_listen` address.
        #[arg(long, default_value = "127.0.0.1:9464")]
        metrics: std::net::SocketAddr,
        /// Milliseconds between refreshes.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop after this many refreshes (default: run until interrupted).
        #[arg(long)]
        rounds: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// A MoldUDP64 venue: multicast publisher, re-request server, SoupBinTCP snapshot server.
    Moldudp64(MoldSimArgs),
    /// A Binance venue: WebSocket combined depth streams and REST snapshots, recorded or
    /// generated, with faults.
    Binance(gapless::sim::binance::BinanceSimArgs),
    /// Write a Binance capture (the project's line format) of generated books, with
    /// stale events after each snapshot and the dropped events named by `--drop`.
    BinanceCapture {
        /// Output file.
        #[arg(long)]
        out: PathBuf,
        /// Market: spot, usdm or coinm.
        #[arg(long, value_enum, default_value = "spot")]
        market: MarketArg,
        /// Symbols, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "btcusdt,ethusdt")]
        symbols: Vec<String>,
        /// Events per symbol.
        #[arg(long, default_value_t = 300)]
        events: usize,
        /// Leave out the Nth event (from 0) of SYMBOL: `SYMBOL:N`, repeatable.
        #[arg(long = "drop")]
        drops: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum MarketArg {
    /// Binance spot.
    Spot,
    /// USD-M futures.
    Usdm,
    /// COIN-M futures.
    Coinm,
}

impl MarketArg {
    fn market(self) -> gapless::venue::binance::Market {
        match self {
            Self::Spot => gapless::venue::binance::Market::Spot,
            Self::Usdm => gapless::venue::binance::Market::Usdm,
            Self::Coinm => gapless::venue::binance::Market::Coinm,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Protocol {
    /// Nasdaq MoldUDP64.
    Moldudp64,
    /// IEX-TP.
    IexTp,
    /// A Binance capture in gapless's line format (`ws` frames and `rest` snapshots).
    Binance,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The capture file; `-` for standard input.
    file: PathBuf,
    /// Wire protocol of the selected datagrams; default: told from the first of them
    /// (MoldUDP64 or IEX-TP). A Binance capture needs `--protocol binance`.
    #[arg(long, value_enum)]
    protocol: Option<Protocol>,
    /// Take the protocol, destinations and venue name from the first matching venue of
    /// this configuration instead.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Only datagrams to this group:port (repeatable); default: every UDP datagram.
    #[arg(long = "group")]
    groups: Vec<SocketAddrV4>,
    /// The redundant lines of one channel, as `GROUP,GROUP[,...]` (repeatable): replayed
    /// as one stream, the first copy of each message taken. Their datagrams are selected
    /// as with --group.
    #[arg(long = "lines", value_parser = parse_lines)]
    lines: Vec<LineGroup>,
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
    /// Binance captures: the market.
    #[arg(long, value_enum, default_value = "spot")]
    market: MarketArg,
    /// Binance captures: the symbols, comma-separated.
    #[arg(long, value_delimiter = ',')]
    symbols: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            config,
            status_secs,
        } => {
            // Until the file is read, lines take the journal's form when stderr is the
            // journal; the file's `log_format` applies once it is valid.
            gapless::log::set_format(gapless::config::LogFormat::Auto);
            let checked = Config::check_file(&config);
            let config = match checked.result {
                Ok(c) => c,
                Err(errors) => {
                    for error in &errors {
                        gapless::log_error!("{error}");
                    }
                    return ExitCode::from(2);
                }
            };
            gapless::log::set_format(config.daemon.log_format);
            for warning in &checked.warnings {
                gapless::log_warn!("{warning}");
            }
            if let Err(e) = service::block_stop_signals() {
                gapless::log_error!("cannot set up signal handling: {e}");
                return ExitCode::FAILURE;
            }
            let options = service::ServiceOptions {
                status_every: (status_secs > 0).then(|| Duration::from_secs(status_secs)),
                ..service::ServiceOptions::default()
            };
            match service::run_service(config, &options) {
                Ok(summary) => {
                    gapless::log_info!("{}", service::summary_text(&summary).trim_end());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    gapless::log_error!("{e}");
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
        Command::Tail {
            shm: Some(ring),
            from,
            exit_when_closed_ms,
            limit,
            ..
        } => {
            let options = gapless::client::shm::TailOptions {
                limit,
                from,
                exit_when_closed: exit_when_closed_ms.map(std::time::Duration::from_millis),
            };
            let stdout = io::stdout();
            let out = io::BufWriter::with_capacity(64 * 1024, stdout.lock());
            match gapless::client::shm::tail(&ring, out, &options) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Tail {
            socket: Some(socket),
            limit,
            from,
            ..
        } => {
            let cursors = if from.is_empty() {
                None
            } else {
                match unix_cursors(&socket, &from) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        eprintln!("error: {}: {e}", socket.display());
                        return ExitCode::from(2);
                    }
                }
            };
            let stdout = io::stdout();
            match tail_from(&socket, stdout.lock(), limit, cursors.as_deref()) {
                Ok(summary) => {
                    if cursors.is_some() {
                        let carry_on: Vec<String> = summary
                            .cursors
                            .iter()
                            .map(|c| format!("--from {}={}:{}", c.stream, c.label, c.next))
                            .collect();
                        eprintln!("gapless tail: to carry on: {}", carry_on.join(" "));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {}: {e}", socket.display());
                    ExitCode::FAILURE
                }
            }
        }
        Command::Tail { .. } => {
            eprintln!("error: give a SOCKET or --shm PATH");
            ExitCode::from(2)
        }
        Command::CheckConfig { file } => {
            let checked = Config::check_file(&file);
            // A report that cannot be written to stderr has nowhere else to go; the exit
            // code still says whether the file is valid.
            let mut err = io::stderr().lock();
            for warning in &checked.warnings {
                let _ = writeln!(err, "{}", warning.render("warning"));
            }
            match checked.result {
                Ok(config) => {
                    let _ = writeln!(
                        err,
                        "{}: ok ({} venue(s), {} sink(s), {} warning(s))",
                        file.display(),
                        config.venues.len(),
                        config.sinks.len(),
                        checked.warnings.len()
                    );
                    ExitCode::SUCCESS
                }
                Err(errors) => {
                    let _ = write!(err, "{}", errors.render());
                    ExitCode::from(2)
                }
            }
        }
        Command::Replay(args) => run_replay(args),
        Command::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "gapless", &mut io::stdout());
            ExitCode::SUCCESS
        }
        Command::Top {
            metrics,
            interval_ms,
            rounds,
        } => match gapless::client::top::run(
            metrics,
            Duration::from_millis(interval_ms.max(50)),
            rounds,
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Manpage => {
            let page = clap_mangen::Man::new(Cli::command());
            let mut out = io::stdout().lock();
            match page.render(&mut out).and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
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
        Command::Sim(SimCommand::BinanceCapture {
            out,
            market,
            symbols,
            events,
            drops,
        }) => {
            let mut parsed = Vec::new();
            for d in &drops {
                match d
                    .split_once(':')
                    .and_then(|(s, n)| Some((s, n.parse::<usize>().ok()?)))
                {
                    Some(pair) => parsed.push(pair),
                    None => {
                        eprintln!("error: --drop {d}: expected SYMBOL:N");
                        return ExitCode::from(2);
                    }
                }
            }
            let names: Vec<&str> = symbols.iter().map(String::as_str).collect();
            let written = File::create(&out).and_then(|f| {
                let mut w = BufWriter::new(f);
                gapless::sim::binance::capture::write_generated_capture(
                    &mut w,
                    market.market(),
                    &names,
                    events,
                    &parsed,
                )?;
                w.flush()
            });
            match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {}: {e}", out.display());
                    ExitCode::FAILURE
                }
            }
        }
        Command::Sim(SimCommand::Moldudp64(args)) => match run_cli(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// The groups of `--lines`: the redundant lines of one channel.
#[derive(Debug, Clone)]
struct LineGroup(Vec<SocketAddrV4>);

/// The cursors of `--from` for the socket at `path`; a stream named rather than numbered is
/// looked up in the socket's hello, from a connection of its own.
fn unix_cursors(
    path: &std::path::Path,
    from: &[String],
) -> Result<Vec<gapless::publish::wire::ResumeCursor>, String> {
    use gapless::publish::wire::ResumeCursor;
    let numbered = |text: &str| {
        text.split_once('=')
            .is_some_and(|(stream, _)| stream.parse::<u16>().is_ok())
    };
    let names = if from.iter().all(|t| numbered(t)) {
        Vec::new()
    } else {
        gapless::client::unix::connect(path, None)
            .map_err(|e| e.to_string())?
            .1
    };
    from.iter()
        .map(|text| ResumeCursor::parse(text, &names))
        .collect()
}

fn parse_lines(text: &str) -> Result<LineGroup, String> {
    let groups = text
        .split(',')
        .map(|g| g.parse::<SocketAddrV4>().map_err(|e| format!("{g:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LineGroup(groups))
}

fn run_replay(args: ReplayArgs) -> ExitCode {
    if matches!(args.protocol, Some(Protocol::Binance)) {
        return run_binance_replay(&args);
    }
    let mut options = ReplayOptions {
        wire: match args.protocol {
            Some(Protocol::Moldudp64) => Some(Wire::MoldUdp64),
            Some(Protocol::IexTp) => Some(Wire::IexTp),
            Some(Protocol::Binance) | None => None,
        },
        destinations: args
            .groups
            .iter()
            .chain(args.lines.iter().flat_map(|l| &l.0))
            .copied()
            .collect(),
        channels: args.lines.iter().map(|l| l.0.clone()).collect(),
        venue: args.venue.clone(),
        speed: args.speed,
        from_start: args.from_start,
        progress: true,
    };
    if let Some(path) = &args.config {
        match Config::load(path) {
            Ok(config) => {
                if let Err(e) =
                    gapless::drive::replay::pcap::apply_replay_config(&config, &mut options)
                {
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
            // Nowhere else to report a stderr that cannot be written; the exit code stands.
            let mut err = io::stderr().lock();
            let _ = writeln!(err, "{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            if args.protocol.is_none()
                && matches!(
                    e,
                    ReplayError::Capture(gapless::capture::CaptureError::BadMagic { .. })
                )
                && looks_like_binance_lines(&args.file)
            {
                eprintln!(
                    "hint: this looks like a Binance capture (`<recv_ns> ws <frame>` lines): add --protocol binance --symbols ..."
                );
            }
            ExitCode::FAILURE
        }
    }
}

/// Whether the file starts like the project's Binance capture lines: digits, then ` ws `
/// or ` rest `.
fn looks_like_binance_lines(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(n) = File::open(path).and_then(|mut f| f.read(&mut head)) else {
        return false;
    };
    let head = head.get(..n).unwrap_or_default();
    let digits = head.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = head.get(digits..).unwrap_or_default();
    digits > 0 && (rest.starts_with(b" ws ") || rest.starts_with(b" rest "))
}

fn run_binance_replay(args: &ReplayArgs) -> ExitCode {
    let symbols: Vec<&str> = args.symbols.iter().map(String::as_str).collect();
    if symbols.is_empty() {
        eprintln!("error: a Binance replay needs --symbols");
        return ExitCode::from(2);
    }
    let market = args.market.market();
    let path = &args.file;
    let result = match &args.jsonl {
        None => gapless::drive::replay::binance::replay_binance(path, market, &symbols, None),
        Some(p) if p.as_os_str() == "-" => {
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            let r = gapless::drive::replay::binance::replay_binance(
                path,
                market,
                &symbols,
                Some(&mut out),
            );
            if let Err(e) = out.flush() {
                eprintln!("error: standard output: {e}");
                return ExitCode::FAILURE;
            }
            r
        }
        Some(p) => match File::create(p) {
            Ok(f) => {
                let mut out = BufWriter::new(f);
                let r = gapless::drive::replay::binance::replay_binance(
                    path,
                    market,
                    &symbols,
                    Some(&mut out),
                );
                if let Err(e) = out.flush() {
                    eprintln!("error: {}: {e}", p.display());
                    return ExitCode::FAILURE;
                }
                r
            }
            Err(e) => {
                eprintln!("error: cannot create {}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        },
    };
    match result {
        Ok(summary) => {
            eprintln!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}
