//! The `gapless sim binance` arguments.

use clap::Parser;
use gapless::sim::binance::{BinanceSimArgs, BookStyle, Source, run_cli};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BinanceSimArgs,
}

#[test]
fn arguments_become_a_config() -> Result<(), clap::Error> {
    let cli = Cli::try_parse_from([
        "sim",
        "--symbols",
        "btcusdt,ETHUSDT",
        "--style",
        "futures",
        "--rate",
        "5",
        "--drop",
        "0.1",
        "--disconnect-after",
        "9",
        "--silence-ms",
        "250",
        "--ping-ms",
        "0",
        "--chunked",
    ])?;
    let config = cli.args.to_config();
    let Source::Generated(generated) = &config.source else {
        panic!("generated source expected")
    };
    assert_eq!(generated.symbols, ["BTCUSDT", "ETHUSDT"]);
    assert_eq!((generated.style, generated.rate), (BookStyle::Futures, 5.0));
    assert_eq!(
        (config.faults.drop, config.faults.disconnect_after),
        (0.1, Some(9))
    );
    assert_eq!(
        config.faults.silence_for,
        Some(std::time::Duration::from_millis(250))
    );
    assert!(config.ping_interval.is_none() && config.http_chunked);
    let replay = Cli::try_parse_from(["sim", "--replay", "a.gz", "b.ws.1.0", "--speed", "2"])?;
    assert!(matches!(replay.args.to_config().source, Source::Recorded(r) if r.files.len() == 2));
    Ok(())
}

#[test]
fn runs_for_its_duration_on_free_ports() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::try_parse_from([
        "sim",
        "--ws-port",
        "0",
        "--http-port",
        "0",
        "--duration-secs",
        "1",
    ])?;
    let stats = run_cli(&cli.args)?;
    assert_eq!(stats.connections, 0);
    Ok(())
}
