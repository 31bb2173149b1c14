//! Replay of pcap and pcapng captures of MoldUDP64 or IEX-TP feeds: the capture's
//! datagrams through a [`UdpVenue`] and the [replay driver](super), with the capture's
//! timestamps as the clock.
//!
//! Nothing can be re-requested from a file, so a gap is reported with its exact range,
//! declared lost with an explicit gap event, and delivery resumes after it; nothing after
//! a gap is ever delivered as if it were continuous. A gap is held, whatever the feed's
//! rate, until what follows it fills the reorder window ([`REORDER_WINDOW`] messages or
//! [`HELD_DATAGRAMS`] datagrams) or the capture ends: what had not arrived by then is
//! what is reported lost.

use std::fmt;
use std::io::{self, Write};
use std::net::SocketAddrV4;
use std::path::Path;

use thiserror::Error;

use super::detect::Detection;
use super::progress::Progress;
use super::{Pacing, Record, Source};
use crate::capture::{CaptureError, CaptureReader, Stats as LinkStats};
use crate::config::{Config, Start, VenueKind};
use crate::publish::jsonl::{JsonlFormatter, StreamNames};
use crate::publish::{Event, StreamState};
use crate::sequencer::SeqRange;
use crate::venue::udp::{LineSpec, spec_from_config};
use crate::venue::{ChannelSpec, ChannelStats, FeedSpec, GapPolicy, UdpVenue, Wire};

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The wire format of the selected datagrams; `None`: told from the first of them
    /// (see [`Detection`]).
    pub wire: Option<Wire>,
    /// Only datagrams to these destinations (group and port); every UDP datagram when empty.
    pub destinations: Vec<SocketAddrV4>,
    /// Destinations that are the redundant lines of one channel, replayed as one stream
    /// with the first copy of each message taken; a destination in none of these is a
    /// channel of its own.
    pub channels: Vec<Vec<SocketAddrV4>>,
    /// Venue name used in the JSON lines.
    pub venue: String,
    /// `Some(x)`: pace the replay at `x` times real time. `None`: as fast as possible.
    pub speed: Option<f64>,
    /// Expect every session to start at sequence 1 (report loss before the first packet).
    pub from_start: bool,
    /// Draw a progress line on standard error when it is a terminal.
    pub progress: bool,
}

/// Why a replay failed.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The capture could not be read (the error names the byte offset).
    #[error("{0}")]
    Capture(#[from] CaptureError),
    /// Writing the JSON lines failed.
    #[error("writing output: {0}")]
    Output(#[from] io::Error),
    /// The configuration has no venue of a kind this replay can read.
    #[error("no moldudp64 or iex-tp venue to replay")]
    NoUdpVenue,
    /// No protocol was named and the datagrams do not tell it.
    #[error(
        "cannot tell the protocol: {0}; name it with --protocol moldudp64 or --protocol iex-tp"
    )]
    UnknownProtocol(Detection),
}

/// One stream's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSummary {
    /// Stream name (the destination it was received on).
    pub name: String,
    /// The last session seen.
    pub session: String,
    /// Final state.
    pub state: StreamState,
    /// First and last sequence delivered.
    pub delivered_range: Option<(u64, u64)>,
    /// Messages delivered.
    pub delivered: u64,
    /// Gaps declared lost, with their exact ranges.
    pub gaps: Vec<SeqRange>,
    /// The channel's counters.
    pub stats: ChannelStats,
}

/// What a replay saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Records in the capture.
    pub records: u64,
    /// Link-layer outcome (datagrams, IP fragments, non-UDP and truncated frames).
    pub link: LinkStats,
    /// UDP datagrams selected by destination.
    pub selected: u64,
    /// Data messages carried (before deduplication).
    pub messages: u64,
    /// Heartbeat datagrams.
    pub heartbeats: u64,
    /// Messages delivered to the consumer.
    pub delivered: u64,
    /// Per stream.
    pub streams: Vec<StreamSummary>,
    /// Datagrams to destinations first seen after the look-ahead, not replayed.
    pub late: Late,
    /// The protocol the datagrams were read as.
    pub wire: Option<Wire>,
    /// Whether it was told from the datagrams rather than named.
    pub detected: bool,
    /// How the first datagrams decode.
    pub detection: Detection,
}

impl ReplaySummary {
    /// Every gap of every stream.
    pub fn gaps(&self) -> impl Iterator<Item = &SeqRange> {
        self.streams.iter().flat_map(|s| s.gaps.iter())
    }

    /// Streams that lost data or did not end synced: state built from them is not the
    /// venue's.
    pub fn incomplete(&self) -> impl Iterator<Item = &StreamSummary> {
        self.streams.iter().filter(|s| !s.is_complete())
    }
}

impl StreamSummary {
    /// Nothing lost, and synced (or closed) at the end.
    pub fn is_complete(&self) -> bool {
        self.gaps.is_empty() && matches!(self.state, StreamState::Synced | StreamState::Closed)
    }

    /// What the stream's outcome means, in a few words: `complete`, `lost N messages in K
    /// gaps`, `not synced at the end (STATE)`, or both of the latter.
    pub fn verdict(&self) -> String {
        let lost: u64 = self.gaps.iter().map(SeqRange::len).sum();
        let ended = matches!(self.state, StreamState::Synced | StreamState::Closed);
        match (self.gaps.len(), ended) {
            (0, true) => "complete".to_string(),
            (0, false) => format!("not synced at the end ({})", self.state.as_str()),
            (n, true) => format!("lost {lost} messages in {n} gaps, synced after them"),
            (n, false) => format!(
                "lost {lost} messages in {n} gaps, not synced at the end ({})",
                self.state.as_str()
            ),
        }
    }
}

impl fmt::Display for ReplaySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "records:     {}", self.records)?;
        match self.wire {
            Some(wire) if self.detected => {
                writeln!(
                    f,
                    "protocol:    {} (told from the datagrams: {})",
                    wire.as_str(),
                    self.detection
                )?;
            }
            Some(wire) => {
                let fit = self.detection.decoding_as(wire);
                let looks = self.detection.wire().filter(|w| *w != wire);
                match looks {
                    Some(other) if fit * 2 < self.detection.datagrams => writeln!(
                        f,
                        "protocol:    {} as asked, but {} of the first {} datagrams decode as it and {} as {}: try --protocol {}",
                        wire.as_str(),
                        fit,
                        self.detection.datagrams,
                        self.detection.decoding_as(other),
                        other.as_str(),
                        other.as_str()
                    )?,
                    _ => writeln!(f, "protocol:    {} as asked", wire.as_str())?,
                }
            }
            None => writeln!(f, "protocol:    none ({})", self.detection)?,
        }
        writeln!(
            f,
            "datagrams:   {} udp, {} selected, {} ip fragments skipped, {} other skipped",
            self.link.datagrams,
            self.selected,
            self.link.fragments,
            self.link.not_udp_ipv4
                + self.link.truncated
                + self.link.malformed
                + self.link.unsupported_link
        )?;
        writeln!(
            f,
            "messages:    {} carried, {} delivered",
            self.messages, self.delivered
        )?;
        writeln!(f, "heartbeats:  {}", self.heartbeats)?;
        if self.late.datagrams > 0 {
            let names: Vec<String> = self
                .late
                .destinations
                .iter()
                .map(ToString::to_string)
                .collect();
            writeln!(
                f,
                "not replayed: {} datagrams to destinations first seen after the first {} records ({}): name every destination with --group",
                self.late.datagrams,
                LOOKAHEAD_RECORDS,
                names.join(", ")
            )?;
        }
        let gaps: Vec<String> = self.gaps().map(ToString::to_string).collect();
        let lost: u64 = self.gaps().map(SeqRange::len).sum();
        writeln!(
            f,
            "gaps:        {} ({} messages lost) {}",
            gaps.len(),
            lost,
            gaps.join(" ")
        )?;
        for s in &self.streams {
            let st = &s.stats;
            let range = s
                .delivered_range
                .map_or_else(|| "-".to_string(), |(a, b)| format!("{a}..={b}"));
            writeln!(
                f,
                "stream {}: session {} ended {} delivered {} ({}) duplicates {} malformed {} stale {}: {}",
                s.name,
                s.session,
                s.state.as_str(),
                s.delivered,
                range,
                st.sequencer.duplicates,
                st.malformed,
                st.stale_session,
                s.verdict()
            )?;
        }
        let incomplete: Vec<&str> = self.incomplete().map(|s| s.name.as_str()).collect();
        if incomplete.is_empty() {
            write!(f, "verdict:     every stream complete")
        } else {
            write!(
                f,
                "verdict:     incomplete: {} (state built from them is not the venue's)",
                incomplete.join(", ")
            )
        }
    }
}

/// Replays the capture at `path` (`-`: standard input), writing the consumer stream as
/// JSON lines to `jsonl` when given.
pub fn replay(
    path: &Path,
    options: &ReplayOptions,
    jsonl: Option<&mut dyn Write>,
) -> Result<ReplaySummary, ReplayError> {
    let reader = if path.as_os_str() == "-" {
        CaptureReader::stdin()?
    } else {
        CaptureReader::open(path)?
    };
    replay_reader(reader, options, jsonl)
}

/// Replays an opened capture in one pass; see [`replay`].
///
/// Without [`ReplayOptions::destinations`], the destinations are those of the UDP
/// datagrams among the first [`LOOKAHEAD_RECORDS`] records (or [`LOOKAHEAD_BYTES`] of
/// them), read ahead and replayed from memory; datagrams to a destination first seen
/// later are not replayed, and the summary counts them ([`ReplaySummary::late`]).
pub fn replay_reader(
    mut reader: CaptureReader,
    options: &ReplayOptions,
    jsonl: Option<&mut dyn Write>,
) -> Result<ReplaySummary, ReplayError> {
    let mut progress = if options.progress {
        Progress::on_stderr()
    } else {
        Progress::hidden()
    };
    let mut ahead = Lookahead::read(&mut reader)?;
    let discovered = options.destinations.is_empty();
    let destinations = if discovered {
        ahead.destinations.clone()
    } else {
        options.destinations.clone()
    };
    let detection = ahead.detect(&destinations);
    let wire = match options.wire.or_else(|| detection.wire()) {
        Some(wire) => wire,
        None => return Err(ReplayError::UnknownProtocol(detection)),
    };
    // The configured groups of lines first, then each other destination alone.
    let mut grouped: Vec<Vec<SocketAddrV4>> = options
        .channels
        .iter()
        .filter(|lines| !lines.is_empty())
        .cloned()
        .collect();
    for d in &destinations {
        if !grouped.iter().flatten().any(|g| g == d) {
            grouped.push(vec![*d]);
        }
    }
    // A channel is named after its first line's group.
    let name = |lines: &[SocketAddrV4]| lines.first().map_or_else(String::new, |g| g.to_string());
    let channels: Vec<ChannelSpec> = grouped
        .iter()
        .filter_map(|lines| {
            let first = *lines.first()?;
            Some(ChannelSpec {
                lines: lines.iter().map(|g| LineSpec::loopback(*g)).collect(),
                ..ChannelSpec::new(&first.to_string(), LineSpec::loopback(first))
            })
        })
        .collect();
    let destinations: Vec<SocketAddrV4> = grouped.iter().flatten().copied().collect();
    let mut spec = FeedSpec::new(wire, channels);
    spec.gap_policy = GapPolicy::Skip;
    // Capture time is no reason to give a gap up: only room is (`make_room`), or the end.
    spec.gap_deadline_ns = u64::MAX;
    spec.start_from = options.from_start.then_some(1);
    // Nothing can be re-requested from a file, so time does not decide when a gap is
    // lost: it is held (a capture recorded live holds the re-request answers that came
    // after it) until holding what follows it would take more than the window, the buffer
    // or the arena, or until the capture ends, and then exactly what had not arrived is
    // declared lost. The bounds are memory, so the rate of the feed does not matter.
    spec.window = REORDER_WINDOW;
    spec.max_buffered = REORDER_WINDOW;
    spec.arena_datagrams = HELD_DATAGRAMS;
    spec.policy.reorder_delay_ns = u64::MAX;
    spec.make_room = true;
    let mut venues = [UdpVenue::new(&options.venue, spec)];

    let mut names = StreamNames::new();
    for (i, lines) in grouped.iter().enumerate() {
        names.set(i as u16, &options.venue, &name(lines));
    }
    let mut sink = Collector {
        formatter: JsonlFormatter::new(),
        names,
        out: jsonl,
        error: None,
        per_stream: vec![StreamTally::default(); grouped.len()],
    };
    let mut source = PcapSource {
        reader: &mut reader,
        ahead: &mut ahead,
        next_ahead: 0,
        selected: 0,
        destinations: &destinations,
        late: Late::default(),
        discovered,
        progress: &mut progress,
        records: 0,
    };
    let pacing = Pacing {
        speed: options.speed,
    };
    let driven = super::run(&mut source, &mut venues, &mut sink, pacing)?;
    source.progress.finish();
    if let Some(e) = sink.error.take() {
        return Err(e.into());
    }
    if let Some(out) = sink.out.as_mut() {
        out.flush()?;
    }
    let [feed] = &venues;
    let mut summary = ReplaySummary {
        records: driven.records,
        link: source.ahead.link,
        selected: source.selected,
        late: source.late,
        wire: Some(wire),
        detected: options.wire.is_none(),
        detection,
        ..ReplaySummary::default()
    };
    for (i, tally) in sink.per_stream.into_iter().enumerate() {
        let stats = feed.stats(i);
        summary.messages += stats.messages;
        summary.heartbeats += stats.heartbeats;
        summary.delivered += tally.delivered;
        summary.streams.push(StreamSummary {
            name: feed.channel_name(i).to_string(),
            session: feed
                .session(i)
                .map_or_else(String::new, |s| s.display(wire)),
            state: feed.state(i),
            delivered_range: tally.first.zip(tally.last),
            delivered: tally.delivered,
            gaps: tally.gaps,
            stats,
        });
    }
    Ok(summary)
}

/// Messages a gap may hold back per stream: gaps are declared lost, oldest first, when a
/// message would land this far past the first of them.
pub const REORDER_WINDOW: usize = 1 << 16;

/// Datagrams held per stream behind a gap at most (2 KiB each).
pub const HELD_DATAGRAMS: usize = 16_384;

/// Records read ahead at most before a replay starts.
pub const LOOKAHEAD_RECORDS: usize = 100_000;

/// Bytes of datagrams read ahead at most before a replay starts (16 MiB).
pub const LOOKAHEAD_BYTES: usize = 16 << 20;

/// Destinations first seen after the look-ahead, named in the summary at most.
const LATE_NAMED: usize = 8;

/// Datagrams to destinations first seen after the look-ahead: not replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Late {
    /// How many datagrams.
    pub datagrams: u64,
    /// The first few such destinations.
    pub destinations: Vec<SocketAddrV4>,
}

/// One record read ahead: a datagram's payload is `bytes[start..start + len]`.
#[derive(Debug, Clone, Copy)]
struct Held {
    ts: u64,
    datagram: Option<(SocketAddrV4, usize, usize)>,
}

/// The first records of a capture, read before the replay starts to learn what it holds.
#[derive(Debug, Default)]
struct Lookahead {
    held: Vec<Held>,
    bytes: Vec<u8>,
    /// Link-layer outcome of every record read, ahead and after.
    link: LinkStats,
    /// UDP destinations in the order first seen.
    destinations: Vec<SocketAddrV4>,
}

impl Lookahead {
    /// How the datagrams read ahead to `destinations` decode.
    fn detect(&self, destinations: &[SocketAddrV4]) -> Detection {
        let mut detection = Detection::default();
        for held in &self.held {
            if let Some((dst, start, len)) = held.datagram
                && destinations.contains(&dst)
                && let Some(payload) = self.bytes.get(start..start + len)
            {
                detection.add(payload);
            }
        }
        detection
    }

    fn read(reader: &mut CaptureReader) -> Result<Self, CaptureError> {
        let mut ahead = Self::default();
        while ahead.held.len() < LOOKAHEAD_RECORDS && ahead.bytes.len() < LOOKAHEAD_BYTES {
            let Some(record) = reader.next_record() else {
                break;
            };
            let record = record?;
            let datagram = ahead.link.extract(record.link, record.data).map(|d| {
                if !ahead.destinations.contains(&d.dst)
                    && ahead.destinations.len() < usize::from(u16::MAX)
                {
                    ahead.destinations.push(d.dst);
                }
                let start = ahead.bytes.len();
                ahead.bytes.extend_from_slice(d.payload);
                (d.dst, start, d.payload.len())
            });
            ahead.held.push(Held {
                ts: record.ts_ns,
                datagram,
            });
        }
        Ok(ahead)
    }
}

/// The datagrams of a capture, those to `destinations` only: first those read ahead,
/// then the rest from the reader.
struct PcapSource<'r> {
    reader: &'r mut CaptureReader,
    ahead: &'r mut Lookahead,
    next_ahead: usize,
    selected: u64,
    destinations: &'r [SocketAddrV4],
    late: Late,
    discovered: bool,
    progress: &'r mut Progress,
    records: u64,
}

/// Records between two looks at the clock for the progress line.
const PROGRESS_EVERY: u64 = 4_096;

impl Source for PcapSource<'_> {
    type Error = CaptureError;

    fn next_record(&mut self) -> Option<Result<Record<'_>, CaptureError>> {
        if let Some(held) = self.ahead.held.get(self.next_ahead).copied() {
            self.next_ahead += 1;
            let ts = held.ts;
            let Some((dst, start, len)) = held.datagram else {
                return Some(Ok(Record::Skipped { ts }));
            };
            if !self.destinations.contains(&dst) {
                return Some(Ok(Record::Skipped { ts }));
            }
            self.selected += 1;
            let payload = self.ahead.bytes.get(start..start + len).unwrap_or_default();
            return Some(Ok(Record::Datagram { ts, dst, payload }));
        }
        self.records += 1;
        if self.records.is_multiple_of(PROGRESS_EVERY) {
            let (read, total) = (self.reader.input_read(), self.reader.input_len());
            let unpacked = self.reader.was_compressed().then(|| self.reader.position());
            self.progress.update(read, total, unpacked, self.records);
        }
        let record = match self.reader.next_record()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let ts = record.ts_ns;
        let Some(datagram) = self.ahead.link.extract(record.link, record.data) else {
            return Some(Ok(Record::Skipped { ts }));
        };
        if !self.destinations.contains(&datagram.dst) {
            if self.discovered {
                self.late.datagrams += 1;
                if self.late.destinations.len() < LATE_NAMED
                    && !self.late.destinations.contains(&datagram.dst)
                {
                    self.late.destinations.push(datagram.dst);
                }
            }
            return Some(Ok(Record::Skipped { ts }));
        }
        self.selected += 1;
        Some(Ok(Record::Datagram {
            ts,
            dst: datagram.dst,
            payload: datagram.payload,
        }))
    }
}

/// Takes the protocol, destinations and venue name for a replay from the first
/// MoldUDP64 or IEX-TP venue of `config`.
///
/// # Errors
///
/// [`ReplayError::NoUdpVenue`] when the configuration has none.
pub fn apply_replay_config(
    config: &Config,
    options: &mut ReplayOptions,
) -> Result<(), ReplayError> {
    let venue = config
        .venues
        .iter()
        .find(|v| !matches!(v.kind, VenueKind::Binance { .. }))
        .ok_or(ReplayError::NoUdpVenue)?;
    let spec = spec_from_config(venue, 0).ok_or(ReplayError::NoUdpVenue)?;
    options.wire = Some(spec.wire);
    options.venue = venue.name.as_str().to_string();
    options.destinations = spec
        .channels
        .iter()
        .flat_map(|c| c.lines.iter().map(|l| l.group))
        .collect();
    options.channels = spec
        .channels
        .iter()
        .map(|c| c.lines.iter().map(|l| l.group).collect())
        .collect();
    options.from_start = match &venue.kind {
        VenueKind::MoldUdp64 { start, .. } | VenueKind::IexTp { start, .. } => {
            *start == Start::FromStart
        }
        VenueKind::Binance { .. } => false,
    };
    Ok(())
}

#[derive(Debug, Clone, Default)]
struct StreamTally {
    delivered: u64,
    first: Option<u64>,
    last: Option<u64>,
    gaps: Vec<SeqRange>,
}

struct Collector<'w> {
    formatter: JsonlFormatter,
    names: StreamNames,
    out: Option<&'w mut dyn Write>,
    error: Option<io::Error>,
    per_stream: Vec<StreamTally>,
}

impl crate::venue::Emit for Collector<'_> {
    fn emit(&mut self, event: &Event<'_>) {
        if let Some(tally) = self.per_stream.get_mut(usize::from(event.stream())) {
            match *event {
                Event::Message {
                    seq,
                    snapshot: false,
                    ..
                } => {
                    tally.delivered += 1;
                    tally.first.get_or_insert(seq);
                    tally.last = Some(seq);
                }
                Event::Gap { from, to, .. } => tally.gaps.push(SeqRange::new(from, to)),
                _ => {}
            }
        }
        if self.error.is_none()
            && let Some(out) = self.out.as_mut()
            && let Err(e) = self.formatter.write(&self.names, event, out)
        {
            self.error = Some(e);
        }
    }
}
