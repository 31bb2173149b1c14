//! One test per kind of mistake: each message names the file, the key path, the line and
//! column of the offending value (or of the header of a table that lacks a key), what was
//! found and what is allowed.

use gapless::config::{Config, ConfigError, ConfigErrors, ErrorKind};

const FILE: &str = "config/bad.toml";

/// A valid file; each test breaks it in one or more places. Line numbers matter below.
const VALID: &str = r#"[daemon]
idle = "yield"
consumer_queue = 1024

[[venue]]
name = "nasdaq"
kind = "moldudp64"

  [[venue.channel]]
  name = "itch-a"
  group = "233.54.12.111:26477"
  rerequest = ["10.1.9.1:18000"]

  [[venue.channel]]
  name = "itch-b"
  group = "233.49.196.111:26477"

  [venue.recovery]
  reorder_window = 1024

[[venue]]
name = "btc"
kind = "binance"
market = "spot"
symbols = ["btcusdt", "ethusdt"]

[[sink]]
kind = "jsonl"
path = "a.jsonl"
"#;

/// `VALID` with each `(from, to)` replaced; every `from` must occur exactly once.
fn edit(edits: &[(&str, &str)]) -> String {
    let mut text = VALID.to_owned();
    for (from, to) in edits {
        assert_eq!(text.matches(from).count(), 1, "{from:?} must occur once");
        text = text.replace(from, to);
    }
    text
}

fn errors(text: &str) -> ConfigErrors {
    match Config::parse(text, FILE) {
        Ok(config) => panic!("expected errors, got {config:?}"),
        Err(errors) => errors,
    }
}

/// Asserts that `error` is of `kind` and that its message has the file, `line:col`, the key
/// path and `allowed`; returns the message.
fn check(error: &ConfigError, kind: ErrorKind, at: &str, path: &str, allowed: &str) -> String {
    let message = error.to_string();
    assert_eq!(error.kind, kind, "{message}");
    let prefix = format!("{FILE}:{at}: {path}: ");
    assert!(message.starts_with(&prefix), "{message:?} lacks {prefix:?}");
    let expected = message.split("; expected ").nth(1).unwrap_or("");
    assert!(expected.contains(allowed), "{message:?} lacks {allowed:?}");
    message
}

/// The only error of `text`, checked as by [`check`].
fn single(text: &str, kind: ErrorKind, at: &str, path: &str, allowed: &str) -> String {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors}");
    check(&errors.errors()[0], kind, at, path, allowed)
}

#[test]
fn the_valid_file_is_valid() {
    Config::parse(VALID, FILE).expect("VALID is valid");
}

#[test]
fn unknown_key() {
    let text = edit(&[("  name = \"itch-b\"", "  nmae = \"itch-b\"")]);
    let message = single(
        &text,
        ErrorKind::UnknownKey,
        "15:3",
        "venue[0].channel[1].nmae",
        "`name`",
    );
    assert!(message.contains("unknown key `nmae`"), "{message}");
}

#[test]
fn wrong_type() {
    let text = edit(&[("consumer_queue = 1024", "consumer_queue = \"1024\"")]);
    let message = single(
        &text,
        ErrorKind::WrongType,
        "3:18",
        "daemon.consumer_queue",
        "an integer",
    );
    assert!(message.contains("\"1024\" is a string"), "{message}");
}

#[test]
fn missing_field_points_at_the_table_header() {
    let text = edit(&[("  group = \"233.49.196.111:26477\"\n", "")]);
    let message = single(
        &text,
        ErrorKind::MissingKey,
        "14:3",
        "venue[0].channel[1].group",
        "a multicast IPv4 address and port",
    );
    assert!(
        message.contains("required key `group` is missing"),
        "{message}"
    );
}

#[test]
fn bad_address() {
    let text = edit(&[("\"233.54.12.111:26477\"", "\"233.54.12.111\"")]);
    let message = single(
        &text,
        ErrorKind::BadAddress,
        "11:11",
        "venue[0].channel[0].group",
        "",
    );
    assert_eq!(
        message,
        "config/bad.toml:11:11: venue[0].channel[0].group: \"233.54.12.111\" is not an address \
         with a port; expected a multicast IPv4 address and port such as \"233.54.12.111:26477\""
    );
}

#[test]
fn bad_address_in_a_list() {
    let text = edit(&[("[\"10.1.9.1:18000\"]", "[\"10.1.9.1:18000\", \"10.1.9.2\"]")]);
    let path = "venue[0].channel[0].rerequest[1]";
    single(
        &text,
        ErrorKind::BadAddress,
        "12:34",
        path,
        "a unicast IPv4 address and port",
    );
}

#[test]
fn non_multicast_group() {
    let text = edit(&[("233.49.196.111:26477", "10.1.2.3:26477")]);
    let message = single(
        &text,
        ErrorKind::NotMulticast,
        "16:11",
        "venue[0].channel[1].group",
        "multicast",
    );
    assert!(
        message.contains("\"10.1.2.3:26477\" is not a multicast address"),
        "{message}"
    );
}

#[test]
fn duplicate_venue_name() {
    let text = edit(&[("name = \"btc\"", "name = \"nasdaq\"")]);
    let message = single(
        &text,
        ErrorKind::Duplicate,
        "22:8",
        "venue[1].name",
        "used once",
    );
    assert!(
        message.contains("already used at line 6, column 8"),
        "{message}"
    );
}

#[test]
fn out_of_range_window() {
    let text = edit(&[("reorder_window = 1024", "reorder_window = 33554432")]);
    let path = "venue[0].recovery.reorder_window";
    single(
        &text,
        ErrorKind::OutOfRange,
        "19:20",
        path,
        "a power of two from 2 to 16777216",
    );
}

#[test]
fn max_buffered_above_the_window_is_out_of_range() {
    let text = edit(&[(
        "reorder_window = 1024",
        "reorder_window = 1024\n  max_buffered = 2048",
    )]);
    let path = "venue[0].recovery.max_buffered";
    single(
        &text,
        ErrorKind::OutOfRange,
        "20:18",
        path,
        "an integer from 1 to 1024",
    );
}

#[test]
fn not_power_of_two() {
    let text = edit(&[("consumer_queue = 1024", "consumer_queue = 1000")]);
    let message = single(
        &text,
        ErrorKind::NotPowerOfTwo,
        "3:18",
        "daemon.consumer_queue",
        "a power of two",
    );
    assert!(message.contains("1000 is not a power of two"), "{message}");
}

#[test]
fn key_of_the_wrong_venue_kind() {
    let text = edit(&[
        (
            "kind = \"moldudp64\"",
            "kind = \"moldudp64\"\nsymbols = [\"btcusdt\"]",
        ),
        ("market = \"spot\"", "market = \"spot\"\nstart = \"live\""),
    ]);
    let errors = errors(&text);
    assert_eq!(errors.len(), 2, "{errors}");
    let mold = check(
        &errors.errors()[0],
        ErrorKind::WrongKind,
        "8:11",
        "venue[0].symbols",
        "start, channel",
    );
    assert!(
        mold.contains("`symbols` belongs to binance venues, not to a moldudp64 venue"),
        "{mold}"
    );
    let binance = check(
        &errors.errors()[1],
        ErrorKind::WrongKind,
        "26:9",
        "venue[1].start",
        "symbols",
    );
    assert!(binance.contains("not to a binance venue"), "{binance}");
}

#[test]
fn rerequest_key_in_the_recovery_of_a_binance_venue() {
    let text = edit(&[(
        "[[sink]]",
        "  [venue.recovery]\n  max_replay = 5\n\n[[sink]]",
    )]);
    let path = "venue[1].recovery.max_replay";
    single(
        &text,
        ErrorKind::WrongKind,
        "28:16",
        path,
        "reorder_window, max_buffered",
    );
}

#[test]
fn session_confirm_is_for_sessioned_venues_and_at_most_16() {
    let text = edit(&[(
        "reorder_window = 1024",
        "reorder_window = 1024\n  session_confirm = 17",
    )]);
    single(
        &text,
        ErrorKind::OutOfRange,
        "20:21",
        "venue[0].recovery.session_confirm",
        "an integer from 1 to 16",
    );
    let text = edit(&[(
        "[[sink]]",
        "  [venue.recovery]\n  session_confirm = 2\n\n[[sink]]",
    )]);
    single(
        &text,
        ErrorKind::WrongKind,
        "28:21",
        "venue[1].recovery.session_confirm",
        "reorder_window, max_buffered",
    );
}

#[test]
fn key_of_the_wrong_sink_kind() {
    let text = edit(&[(
        "path = \"a.jsonl\"",
        "path = \"a.jsonl\"\nclient_queue = 64",
    )]);
    single(
        &text,
        ErrorKind::WrongKind,
        "30:16",
        "sink[0].client_queue",
        "kind, path",
    );
}

#[test]
fn spot_offers_only_100ms_and_1000ms() {
    for speed in ["250ms", "500ms", "0ms"] {
        let text = edit(&[(
            "market = \"spot\"",
            &format!("market = \"spot\"\nupdate_speed = \"{speed}\""),
        )]);
        single(
            &text,
            ErrorKind::InvalidValue,
            "25:16",
            "venue[1].update_speed",
            "one of \"100ms\", \"1000ms\"",
        );
    }
}

#[test]
fn futures_offer_only_100_250_and_500ms() {
    for speed in ["1000ms", "0ms"] {
        let text = edit(&[(
            "market = \"spot\"",
            &format!("market = \"usdm\"\nupdate_speed = \"{speed}\""),
        )]);
        single(
            &text,
            ErrorKind::InvalidValue,
            "25:16",
            "venue[1].update_speed",
            "one of \"100ms\", \"250ms\", \"500ms\"",
        );
    }
}

#[test]
fn unknown_keyword() {
    let text = edit(&[("idle = \"yield\"", "idle = \"spin\"")]);
    single(
        &text,
        ErrorKind::InvalidValue,
        "2:8",
        "daemon.idle",
        "one of \"busy-spin\", \"yield\", \"block\"",
    );
}

#[test]
fn a_file_without_venues() {
    single(
        "[daemon]\n",
        ErrorKind::MissingKey,
        "1:1",
        "venue",
        "at least one [[venue]] table",
    );
}

#[test]
fn syntax_error() {
    let text = edit(&[("idle = \"yield\"", "idle = \"yield")]);
    single(
        &text,
        ErrorKind::Syntax,
        "2:14",
        "daemon.idle",
        "valid TOML",
    );
}

#[test]
fn unreadable_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/no-such-file.toml");
    let errors = Config::load(path).expect_err("the file does not exist");
    assert_eq!(errors.errors()[0].kind, ErrorKind::Io);
    assert!(
        errors.to_string().starts_with(&format!("{path}: ")),
        "{errors}"
    );
}

#[test]
fn multiple_errors_reported_together() {
    let text = edit(&[
        ("consumer_queue = 1024", "consumer_queue = 1000"),
        ("\"233.54.12.111:26477\"", "\"233.54.12.111\""),
        ("233.49.196.111:26477", "10.1.2.3:26477"),
        ("reorder_window = 1024", "reorder_window = 33554432"),
        ("name = \"btc\"", "name = \"nasdaq\""),
        (
            "symbols = [\"btcusdt\", \"ethusdt\"]",
            "symbols = [\"btcusdt\", \"BTC\"]",
        ),
    ]);
    let errors = errors(&text);
    let found: Vec<(ErrorKind, &str)> = errors.iter().map(|e| (e.kind, e.path.as_str())).collect();
    assert_eq!(
        found,
        [
            (ErrorKind::NotPowerOfTwo, "daemon.consumer_queue"),
            (ErrorKind::BadAddress, "venue[0].channel[0].group"),
            (ErrorKind::NotMulticast, "venue[0].channel[1].group"),
            (ErrorKind::OutOfRange, "venue[0].recovery.reorder_window"),
            (ErrorKind::Duplicate, "venue[1].name"),
            (ErrorKind::InvalidValue, "venue[1].symbols[1]"),
        ],
        "{errors}"
    );
    let positions: Vec<String> = errors
        .iter()
        .map(|e| {
            e.position
                .map(|p| format!("{}:{}", p.line, p.column))
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        positions,
        ["3:18", "11:11", "16:11", "19:20", "22:8", "25:23"]
    );
    // One line per error, each a complete message.
    let text = errors.to_string();
    assert_eq!(text.lines().count(), 6, "{text}");
    assert!(
        text.lines()
            .all(|l| l.starts_with(FILE) && l.contains("; expected ")),
        "{text}"
    );
}

#[test]
fn more_streams_than_consumer_stream_ids_is_out_of_range() {
    // 65,537 channels: one more than u16 stream ids can number.
    let mut text = String::from("[[venue]]\nname = \"wide\"\nkind = \"moldudp64\"\n");
    for i in 0..=65_536u32 {
        let [_, a, b, c] = i.to_be_bytes();
        text.push_str(&format!(
            "[[venue.channel]]\nname = \"c{i}\"\ngroup = \"239.{a}.{b}.{c}:5000\"\n"
        ));
    }
    let errors = errors(&text);
    assert_eq!(errors.len(), 1, "{errors}");
    let message = check(
        &errors.errors()[0],
        ErrorKind::OutOfRange,
        "1:1",
        "venue",
        "at most 65536",
    );
    assert!(message.contains("65537 streams"), "{message}");
}

/// The six mistakes an operator makes most: each reported, in one pass, in file order.
const SIX_MISTAKES: &str = r#"[daemon]
idle = "bussy-spin"
consumer_queue = 1000
metrics_listn = "127.0.0.1:9464"

[[venue]]
name = "futures"
kind = "binance"
market = "usdm"
ws_url = "http://fstream.binance.com/stream"
symbols = ["btcusdt", "ethusdt", "btcusdt"]
depth_limit = 5000
"#;

#[test]
fn six_mistakes_are_reported_in_one_pass() {
    let errors = errors(SIX_MISTAKES);
    let found: Vec<(ErrorKind, &str, String)> = errors
        .iter()
        .map(|e| {
            let p = e.position.unwrap();
            (e.kind, e.path.as_str(), format!("{}:{}", p.line, p.column))
        })
        .collect();
    let expected = [
        (ErrorKind::InvalidValue, "daemon.idle", "2:8"),
        (ErrorKind::NotPowerOfTwo, "daemon.consumer_queue", "3:18"),
        (ErrorKind::UnknownKey, "daemon.metrics_listn", "4:1"),
        (ErrorKind::InvalidValue, "venue[0].ws_url", "10:10"),
        (ErrorKind::Duplicate, "venue[0].symbols[2]", "11:34"),
        (ErrorKind::InvalidValue, "venue[0].depth_limit", "12:15"),
    ];
    let expected: Vec<(ErrorKind, &str, String)> = expected
        .iter()
        .map(|(k, p, at)| (*k, *p, (*at).to_owned()))
        .collect();
    assert_eq!(found, expected, "{errors}");

    // Near misses get a suggestion; the rest do not.
    let helps: Vec<Option<&str>> = errors.iter().map(|e| e.help.as_deref()).collect();
    assert_eq!(
        helps,
        [
            Some("did you mean \"busy-spin\"?"),
            None,
            Some("did you mean `metrics_listen`?"),
            None,
            None,
            None,
        ]
    );

    // Rendered as rustc does: the line, a caret under the span, the expectation.
    let unknown = errors.errors()[2].render("error");
    assert_eq!(
        unknown,
        "error: daemon.metrics_listn: unknown key `metrics_listn`\n \
         --> config/bad.toml:4:1\n  |\n\
         4 | metrics_listn = \"127.0.0.1:9464\"\n  \
         | ^^^^^^^^^^^^^ expected one of `metrics_listen`, `rx_core`, `idle`, \
         `consumer_queue`, `log_level`, `log_format`, `state_directory`\n  \
         = help: did you mean `metrics_listen`?\n"
    );
    let url = errors.errors()[3].render("error");
    let caret = url.lines().nth(4).unwrap();
    assert_eq!(
        caret.find('^'),
        Some(5 + 9),
        "the caret starts under the value: {url}"
    );
    assert_eq!(caret.matches('^').count(), 35, "{url}");
    let all = errors.render();
    assert!(all.ends_with("error: config/bad.toml: 6 errors\n"), "{all}");
}

#[test]
fn wrong_types_and_unknown_keys_do_not_hide_other_errors() {
    let text = edit(&[
        ("consumer_queue = 1024", "consumer_queue = \"1024\""),
        ("  name = \"itch-b\"", "  nmae = \"itch-b\""),
        ("reorder_window = 1024", "reorder_window = 1000"),
        (
            "path = \"a.jsonl\"",
            "path = \"a.jsonl\"\nrotate = { bytes = 5 }",
        ),
    ]);
    let errors = errors(&text);
    let found: Vec<(ErrorKind, &str)> = errors.iter().map(|e| (e.kind, e.path.as_str())).collect();
    assert_eq!(
        found,
        [
            (ErrorKind::WrongType, "daemon.consumer_queue"),
            // Not also a missing `name`: the suggestion says which key was meant.
            (ErrorKind::UnknownKey, "venue[0].channel[1].nmae"),
            (ErrorKind::NotPowerOfTwo, "venue[0].recovery.reorder_window"),
            (ErrorKind::UnknownKey, "sink[0].rotate"),
        ],
        "{errors}"
    );
}

#[test]
fn a_wrongly_typed_required_key_is_not_also_missing() {
    let text = edit(&[("name = \"btc\"", "name = 7")]);
    let errors = errors(&text);
    assert_eq!(errors.len(), 1, "{errors}");
    assert_eq!(errors.errors()[0].kind, ErrorKind::WrongType);
}

#[test]
fn a_channel_without_recovery_is_a_warning() {
    // VALID's second channel has neither `rerequest` nor `snapshot`; the first has one.
    let checked = Config::check(VALID, FILE);
    assert!(checked.result.is_ok());
    let found: Vec<(ErrorKind, &str, usize)> = checked
        .warnings
        .iter()
        .map(|w| (w.kind, w.path.as_str(), w.position.unwrap().line))
        .collect();
    assert_eq!(found, [(ErrorKind::NoRecovery, "venue[0].channel[1]", 14)]);
    let text = checked.warnings[0].render("warning");
    assert!(text.starts_with("warning: venue[0].channel[1]: "), "{text}");
    assert!(
        text.contains("neither `rerequest` nor `snapshot`"),
        "{text}"
    );

    let recovered = edit(&[(
        "  group = \"233.49.196.111:26477\"\n",
        "  group = \"233.49.196.111:26477\"\n  rerequest = [\"10.1.9.2:18000\"]\n",
    )]);
    assert!(Config::check(&recovered, FILE).warnings.is_empty());
}

#[test]
fn more_symbols_than_the_venue_has_connection_slots_for() {
    let list = |n: usize| {
        let names: Vec<String> = (0..n).map(|i| format!("\"sym{i}usdt\"")).collect();
        format!("symbols = [{}]", names.join(", "))
    };
    // More than one connection carries: split across connections.
    let text = edit(&[("symbols = [\"btcusdt\", \"ethusdt\"]", &list(1025))]);
    Config::parse(&text, FILE).expect("1,025 symbols are split across connections");
    // Beyond what 64 connection slots (two per connection) can carry.
    let text = edit(&[("symbols = [\"btcusdt\", \"ethusdt\"]", &list(12_000))]);
    single(
        &text,
        ErrorKind::OutOfRange,
        "25:11",
        "venue[1].symbols",
        "at most 64 connection slots",
    );
}

#[test]
fn redundant_lines_are_read_in_order_with_their_interfaces() {
    let text = edit(&[(
        "  name = \"itch-b\"\n  group = \"233.49.196.111:26477\"\n",
        "  name = \"itch-b\"\n  lines = [\n    { group = \"233.49.196.111:26477\", interface = \"10.1.3.3\" },\n    { group = \"233.49.197.111:26477\", source = \"206.200.1.2\" },\n  ]\n",
    )]);
    let config = Config::parse(&text, FILE).expect("lines are valid");
    let gapless::config::VenueKind::MoldUdp64 { channels, .. } = &config.venues[0].kind else {
        panic!("a moldudp64 venue");
    };
    let lines = &channels[1].lines;
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].group.addr().to_string(), "233.49.196.111:26477");
    assert_eq!(lines[0].interface.to_string(), "10.1.3.3");
    assert_eq!(lines[1].interface.to_string(), "0.0.0.0");
    assert_eq!(
        lines[1].source.map(|s| s.to_string()).as_deref(),
        Some("206.200.1.2")
    );
    assert_eq!(channels[0].lines.len(), 1, "the shorthand is one line");
}

#[test]
fn a_line_group_used_twice_and_lines_beside_the_shorthand_are_errors() {
    // Line b of itch-b reuses itch-a's group.
    let text = edit(&[(
        "  name = \"itch-b\"\n  group = \"233.49.196.111:26477\"\n",
        "  name = \"itch-b\"\n  lines = [{ group = \"233.49.196.111:26477\" }, { group = \"233.54.12.111:26477\" }]\n",
    )]);
    single(
        &text,
        ErrorKind::Duplicate,
        "16:58",
        "venue[0].channel[1].lines[1].group",
        "",
    );
    let text = edit(&[(
        "  name = \"itch-b\"\n",
        "  name = \"itch-b\"\n  lines = [{ group = \"233.49.197.111:26477\" }]\n",
    )]);
    single(
        &text,
        ErrorKind::InvalidValue,
        "17:11",
        "venue[0].channel[1].group",
        "either `lines = [...]` or the one-line shorthand",
    );
    let text = edit(&[(
        "  name = \"itch-b\"\n  group = \"233.49.196.111:26477\"\n",
        "  name = \"itch-b\"\n  lines = []\n",
    )]);
    single(
        &text,
        ErrorKind::InvalidValue,
        "16:11",
        "venue[0].channel[1].lines",
        "1 to 8 lines",
    );
    let text = edit(&[(
        "  name = \"itch-b\"\n  group = \"233.49.196.111:26477\"\n",
        "  name = \"itch-b\"\n  lines = [{ group = \"10.0.0.1:26477\" }]\n",
    )]);
    single(
        &text,
        ErrorKind::NotMulticast,
        "16:22",
        "venue[0].channel[1].lines[0].group",
        "multicast",
    );
    let text = edit(&[(
        "  reorder_window = 1024\n",
        "  reorder_window = 1024\n  line_down_ms = 5\n",
    )]);
    single(
        &text,
        ErrorKind::OutOfRange,
        "20:18",
        "venue[0].recovery.line_down_ms",
        "10",
    );
}

/// `VALID` with a nats sink appended.
fn with_nats(sink: &str) -> String {
    format!("{VALID}\n[[sink]]\nkind = \"nats\"\n{sink}")
}

#[test]
fn a_nats_sink_is_read_with_its_defaults() {
    let text = with_nats("url = \"nats://127.0.0.1:4222\"\nstream = \"FEED\"\n");
    let config = Config::parse(&text, FILE).expect("valid");
    let Some(gapless::config::Sink::Nats(nats)) = config.sinks.last() else {
        panic!("no nats sink in {:?}", config.sinks);
    };
    assert_eq!(nats.subject_prefix, "gapless");
    assert_eq!(nats.duplicate_window, std::time::Duration::from_secs(120));
    assert_eq!(nats.max_pending, 4096);
    assert!(nats.max_age.is_none() && nats.tls_client.is_none());
}

#[test]
fn nats_sink_mistakes_are_each_named() {
    let errors = errors(&with_nats(
        "url = \"http://x\"\nstream = \"a.b\"\npath = \"/tmp/x\"\ntls_cert = \"c.pem\"\n",
    ));
    let text = errors.to_string();
    assert_eq!(errors.len(), 4, "{text}");
    assert!(text.contains("is not a NATS server address"), "{text}");
    assert!(text.contains("is not a usable NATS name"), "{text}");
    assert!(
        text.contains("`path` belongs to jsonl, unix, pcap and shm sinks"),
        "{text}"
    );
    assert!(text.contains("`tls_key` is missing"), "{text}");
    let missing = errors_of_missing_url();
    assert!(
        missing.contains("required key `url` is missing"),
        "{missing}"
    );
}

fn errors_of_missing_url() -> String {
    errors(&with_nats("stream = \"FEED\"\n")).to_string()
}

#[test]
fn held_datagrams_is_read_and_bounded() {
    let text = edit(&[(
        "  reorder_window = 1024\n",
        "  reorder_window = 1024\n  held_datagrams = 65536\n",
    )]);
    let config = Config::parse(&text, FILE).expect("valid");
    let spec = gapless::venue::udp::spec_from_config(&config.venues[0], 0).expect("a udp venue");
    assert_eq!(spec.arena_datagrams, 65536);
    let text = edit(&[(
        "  reorder_window = 1024\n",
        "  reorder_window = 1024\n  held_datagrams = 4\n",
    )]);
    single(
        &text,
        ErrorKind::OutOfRange,
        "20:20",
        "venue[0].recovery.held_datagrams",
        "8",
    );
}

#[test]
fn a_rerequest_server_listed_twice_is_a_duplicate() {
    let message = single(
        &edit(&[(
            "rerequest = [\"10.1.9.1:18000\"]",
            "rerequest = [\"10.1.9.1:18000\", \"10.1.9.1:18000\"]",
        )]),
        ErrorKind::Duplicate,
        "12:34",
        "venue[0].channel[0].rerequest[1]",
        "each re-request server to be used once",
    );
    assert!(
        message.contains("is already used at line 12, column 16"),
        "{message}"
    );
}

#[test]
fn a_rerequest_entry_reads_the_jetstream_of_the_nats_sink_it_names() {
    use gapless::config::{Rerequest, Sink, VenueKind};
    let rerequest = |config: &Config| match &config.venues[0].kind {
        VenueKind::MoldUdp64 { channels, .. } => channels[0].rerequest.clone(),
        other => panic!("not moldudp64: {other:?}"),
    };
    let one = edit(&[(
        "rerequest = [\"10.1.9.1:18000\"]",
        "rerequest = [\"10.1.9.1:18000\", \"jetstream\"]",
    )]) + "\n[[sink]]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"FEED\"\n";
    let config = Config::parse(&one, FILE).expect("valid");
    assert_eq!(
        rerequest(&config),
        [
            Rerequest::Server("10.1.9.1:18000".parse().unwrap()),
            Rerequest::JetStream("FEED".into())
        ]
    );
    // The venue gets the address that answers for it, in the order written.
    let answerer: std::net::SocketAddr = "127.0.0.1:4999".parse().unwrap();
    let spec =
        gapless::venue::udp::spec_from_config_with(&config.venues[0], 0, &|stream, channel| {
            (stream == "FEED" && channel == "itch-a").then_some(answerer)
        })
        .expect("a udp venue");
    assert_eq!(
        spec.channels[0].rerequest,
        ["10.1.9.1:18000".parse().unwrap(), answerer]
    );
    // Without one, the entry is left out.
    let spec = gapless::venue::udp::spec_from_config(&config.venues[0], 0).expect("a udp venue");
    assert_eq!(spec.channels[0].rerequest.len(), 1);

    // Two nats sinks: the entry names one of them by its stream.
    let two = |entry: &str| {
        edit(&[(
            "rerequest = [\"10.1.9.1:18000\"]",
            &format!("rerequest = [\"{entry}\"]"),
        )]) + "\n[[sink]]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"A\"\n\
               \n[[sink]]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4223\"\nstream = \"B\"\n"
    };
    let config = Config::parse(&two("jetstream:B"), FILE).expect("valid");
    assert_eq!(rerequest(&config), [Rerequest::JetStream("B".into())]);
    assert_eq!(
        config
            .sinks
            .iter()
            .filter(|s| matches!(s, Sink::Nats(_)))
            .count(),
        2
    );
    let message = single(
        &two("jetstream"),
        ErrorKind::InvalidValue,
        "12:16",
        "venue[0].channel[0].rerequest[0]",
        "\"jetstream:STREAM\"",
    );
    assert!(
        message.contains("there are 2 nats sinks (A, B)"),
        "{message}"
    );
    let message = single(
        &two("jetstream:C"),
        ErrorKind::InvalidValue,
        "12:16",
        "venue[0].channel[0].rerequest[0]",
        "\"jetstream:STREAM\"",
    );
    assert!(
        message.contains("no nats sink has stream \"C\""),
        "{message}"
    );
    // No nats sink at all.
    let message = single(
        &edit(&[(
            "rerequest = [\"10.1.9.1:18000\"]",
            "rerequest = [\"jetstream\"]",
        )]),
        ErrorKind::InvalidValue,
        "12:16",
        "venue[0].channel[0].rerequest[0]",
        "[[sink]] kind = \"nats\"",
    );
    assert!(message.contains("there is no nats sink"), "{message}");
    // The same entry twice is a duplicate, like a server twice.
    let errors = errors(
        &(edit(&[(
            "rerequest = [\"10.1.9.1:18000\"]",
            "rerequest = [\"jetstream\", \"jetstream\"]",
        )]) + "\n[[sink]]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"FEED\"\n"),
    );
    assert_eq!(errors.errors()[0].kind, ErrorKind::Duplicate, "{errors}");
    assert_eq!(errors.errors().len(), 1, "reported once: {errors}");
    // Written two ways, one stream: the second is refused once both are resolved.
    let message = single(
        &(edit(&[(
            "rerequest = [\"10.1.9.1:18000\"]",
            "rerequest = [\"jetstream\", \"jetstream:FEED\"]",
        )]) + "\n[[sink]]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"FEED\"\n"),
        ErrorKind::Duplicate,
        "12:29",
        "venue[0].channel[0].rerequest[1]",
        "each JetStream stream to be used once",
    );
    assert!(
        message.contains("is already used at line 12, column 16"),
        "{message}"
    );
}

#[test]
fn binance_keys_in_seconds_are_read_and_bounded() {
    let keys = "symbols = [\"btcusdt\", \"ethusdt\"]\nws_max_age_secs = 3600\nhealthy_after_secs = 30\n\
                connect_budget_window_secs = 600\n";
    // (ws_max_age_secs, healthy_after_secs, connect_budget_window_secs) of venue[1].
    let seconds = |text: &str| {
        let config = Config::parse(text, FILE).expect("valid");
        let gapless::config::VenueKind::Binance {
            ws_max_age, link, ..
        } = &config.venues[1].kind
        else {
            panic!("venue[1] is a binance venue");
        };
        (
            ws_max_age.as_secs(),
            link.healthy_after.as_secs(),
            link.connect_budget_window.as_secs(),
        )
    };
    let text = edit(&[("symbols = [\"btcusdt\", \"ethusdt\"]\n", keys)]);
    assert_eq!(seconds(&text), (3600, 30, 600));
    // Left out: the defaults.
    assert_eq!(seconds(VALID), (82_800, 60, 300));
    // Each out of its range, named with its range.
    for (key, bad, allowed) in [
        ("ws_max_age_secs", "59", "from 60 to 86399"),
        ("healthy_after_secs", "0", "from 1 to 3600"),
        ("connect_budget_window_secs", "3601", "from 60 to 3600"),
    ] {
        let line = format!("symbols = [\"btcusdt\", \"ethusdt\"]\n{key} = {bad}\n");
        let text = edit(&[("symbols = [\"btcusdt\", \"ethusdt\"]\n", &line)]);
        let at = format!("26:{}", key.len() + 4);
        single(
            &text,
            ErrorKind::OutOfRange,
            &at,
            &format!("venue[1].{key}"),
            allowed,
        );
    }
}
