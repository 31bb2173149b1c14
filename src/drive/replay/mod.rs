//! The replay driver: a capture run through the [venue contract](crate::venue) with the
//! capture's timestamps as the clock, through exactly the code that runs live. It names no
//! venue kind.
//!
//! A capture is a [`Source`] of [`Record`]s: datagrams (a pcap or pcapng file, [`pcap`]),
//! WebSocket frames and REST snapshot answers (a Binance capture, [`binance`]). The driver
//! plays the part of the network:
//!
//! | the venue asks | in replay |
//! | --- | --- |
//! | datagrams on its endpoints | every captured datagram sent to an endpoint's group |
//! | a datagram sent ([`Venue::poll_transmit`]) | nothing can be sent to a capture: counted |
//! | a connection opened | opens at the next frame of the capture; frames go to it |
//! | a connection closed | closed at once; the next frame opens the next one asked for |
//! | an HTTP snapshot | the next snapshot record of its stream: at once if already read, else when reached (unless the request timed out first; the record then answers the next one); with none left in the capture, failed |
//! | a SoupBinTCP snapshot | failed: nothing can be fetched from a capture |
//!
//! At the end of the capture each venue gets [`Venue::handle_end`]: nothing more will
//! arrive. The same capture always gives the same consumer events.

pub mod binance;
pub mod detect;
pub mod pcap;
pub mod progress;

use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use crate::time::{Mono, Wall};
use crate::venue::{
    ConnEvent, ConnId, Emit, Endpoint, EndpointId, Fetch, FetchId, FetchReply, IoRequest, Received,
    Venue,
};

pub use detect::Detection;
pub use pcap::{ReplayError, ReplayOptions, ReplaySummary, StreamSummary, replay, replay_reader};

/// One record of a capture, in capture order; `ts` is its time in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// A UDP datagram sent to `dst`.
    Datagram {
        /// Capture time.
        ts: u64,
        /// Destination (a multicast group, or the unicast address answers came to).
        dst: SocketAddrV4,
        /// The UDP payload.
        payload: &'a [u8],
    },
    /// A WebSocket text frame.
    Frame {
        /// Capture time.
        ts: u64,
        /// The frame.
        text: &'a [u8],
    },
    /// A snapshot answer (an HTTP body) for the stream named `stream`.
    Snapshot {
        /// Capture time.
        ts: u64,
        /// The stream (symbol) it is for, in any case.
        stream: &'a [u8],
        /// The answer's body.
        body: &'a [u8],
    },
    /// A record that carries nothing to replay (another protocol, a fragment).
    Skipped {
        /// Capture time.
        ts: u64,
    },
}

impl Record<'_> {
    /// The record's capture time.
    pub fn ts(&self) -> u64 {
        match self {
            Self::Datagram { ts, .. }
            | Self::Frame { ts, .. }
            | Self::Snapshot { ts, .. }
            | Self::Skipped { ts } => *ts,
        }
    }
}

/// A capture, read record by record.
pub trait Source {
    /// Why reading failed.
    type Error;

    /// The next record, borrowed from the source's buffer.
    fn next_record(&mut self) -> Option<Result<Record<'_>, Self::Error>>;

    /// How many snapshot records the capture holds for each stream (lowercase names),
    /// known before it is read; `None` when they cannot be known beforehand (a stream
    /// read once): a snapshot request then waits for a record until its own deadline.
    fn snapshot_counts(&self) -> Option<Vec<(String, u64)>> {
        Some(Vec::new())
    }
}

/// Snapshot records not read yet, by lowercase stream name; `None`: not known, as many
/// as may come.
#[derive(Debug, Default)]
struct Left(Option<Vec<(String, u64)>>);

impl Left {
    fn of(&self, stream: &str) -> u64 {
        let Some(counts) = &self.0 else {
            return u64::MAX;
        };
        counts
            .iter()
            .find(|(s, _)| s.eq_ignore_ascii_case(stream))
            .map_or(0, |(_, n)| *n)
    }

    fn read(&mut self, stream: &[u8]) {
        if let Some((_, n)) = self
            .0
            .iter_mut()
            .flatten()
            .find(|(s, _)| s.as_bytes().eq_ignore_ascii_case(stream))
        {
            *n = n.saturating_sub(1);
        }
    }
}

/// What the driver counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Records read.
    pub records: u64,
    /// Datagrams handed to a venue endpoint.
    pub datagrams: u64,
    /// Datagrams to no endpoint of any venue.
    pub unrouted: u64,
    /// Frames handed to a connection.
    pub frames: u64,
    /// Frames with no connection asked for.
    pub frames_dropped: u64,
    /// Snapshot records read.
    pub snapshots: u64,
    /// Snapshot requests answered as failed: none left in the capture, or of a kind a
    /// capture cannot answer.
    pub unanswered: u64,
    /// Datagrams the venues asked to send (re-requests), which a capture cannot take.
    pub unsent: u64,
    /// Notices the venues queued (what they noticed is in their counters too).
    pub notices: u64,
}

/// How to run a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pacing {
    /// `Some(x)`: pace at `x` times the capture's speed. `None`: as fast as possible.
    pub speed: Option<f64>,
}

/// An HTTP snapshot waiting for its record.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    id: FetchId,
    stream: usize,
    deadline: Mono,
}

/// One venue's side of the network in replay.
#[derive(Debug, Default)]
struct Network {
    /// Connections asked for, not open yet, oldest first.
    opening: VecDeque<ConnId>,
    /// Open connections.
    open: Vec<ConnId>,
    /// Snapshot requests waiting for a record.
    waiting: Vec<Waiting>,
    /// Snapshot bodies read before anyone asked, by stream.
    ready: Vec<VecDeque<Vec<u8>>>,
}

/// Runs `source` through `venues`, consumer events to `emit`.
///
/// # Errors
///
/// The first error of the source.
pub fn run<S: Source, V: Venue, E: Emit>(
    source: &mut S,
    venues: &mut [V],
    emit: &mut E,
    pacing: Pacing,
) -> Result<DriverStats, S::Error> {
    let mut routes: Vec<(SocketAddrV4, usize, EndpointId)> = Vec::new();
    for (v, venue) in venues.iter().enumerate() {
        for (e, endpoint) in venue.endpoints().iter().enumerate() {
            if let Endpoint::Multicast { group, .. } = endpoint {
                routes.push((*group, v, EndpointId(u16::try_from(e).unwrap_or(u16::MAX))));
            }
        }
    }
    let mut nets: Vec<Network> = venues
        .iter()
        .map(|v| Network {
            ready: vec![VecDeque::new(); v.stream_count()],
            ..Network::default()
        })
        .collect();
    let mut stats = DriverStats::default();
    let mut left = Left(source.snapshot_counts());
    let mut now = Mono::ZERO;
    let mut started: Option<(u64, Instant)> = None;
    for (venue, net) in venues.iter_mut().zip(&mut nets) {
        service(now, venue, net, &left, emit, &mut stats);
    }
    while let Some(record) = source.next_record() {
        let record = record?;
        stats.records += 1;
        let ts = record.ts();
        now = now.max(Mono::from_nanos(ts));
        if let Some(speed) = pacing.speed.filter(|s| *s > 0.0) {
            let (start_ts, start) = *started.get_or_insert((ts, Instant::now()));
            let due = Duration::from_nanos((ts.saturating_sub(start_ts) as f64 / speed) as u64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        for (venue, net) in venues.iter_mut().zip(&mut nets) {
            if venue.poll_timeout().is_some_and(|t| t <= now) {
                venue.handle_timeout(now, emit);
                service(now, venue, net, &left, emit, &mut stats);
            }
        }
        match record {
            Record::Datagram { dst, payload, .. } => {
                let received = [Received {
                    bytes: payload,
                    recv: Wall::from_nanos(ts),
                }];
                let mut routed = false;
                for &(_, v, e) in routes.iter().filter(|(g, ..)| *g == dst) {
                    if let Some(venue) = venues.get_mut(v) {
                        venue.handle_datagrams(now, e, &received, emit);
                        routed = true;
                    }
                }
                if routed {
                    stats.datagrams += 1;
                } else {
                    stats.unrouted += 1;
                }
            }
            Record::Frame { text, .. } => {
                let mut taken = false;
                for (venue, net) in venues.iter_mut().zip(&mut nets) {
                    while let Some(conn) = net.opening.pop_front() {
                        venue.handle_connection(now, conn, ConnEvent::Opened, emit);
                        net.open.push(conn);
                    }
                    if let Some(&conn) = net.open.last() {
                        venue.handle_frame(now, conn, text, Wall::from_nanos(ts), emit);
                        taken = true;
                    }
                }
                if taken {
                    stats.frames += 1;
                } else {
                    stats.frames_dropped += 1;
                }
            }
            Record::Snapshot { stream, body, .. } => {
                stats.snapshots += 1;
                left.read(stream);
                for (venue, net) in venues.iter_mut().zip(&mut nets) {
                    answer(now, venue, net, stream, body, emit);
                }
            }
            Record::Skipped { .. } => {}
        }
        for (venue, net) in venues.iter_mut().zip(&mut nets) {
            service(now, venue, net, &left, emit, &mut stats);
        }
    }
    for (venue, net) in venues.iter_mut().zip(&mut nets) {
        venue.handle_end(now, emit);
        service(now, venue, net, &left, emit, &mut stats);
    }
    Ok(stats)
}

/// Hands a snapshot record of `stream` to the venue's request waiting for it, or keeps it
/// for the next one.
fn answer<V: Venue, E: Emit>(
    now: Mono,
    venue: &mut V,
    net: &mut Network,
    stream: &[u8],
    body: &[u8],
    emit: &mut E,
) {
    let Some(index) = (0..venue.stream_count()).find(|&i| {
        venue
            .stream(i)
            .is_some_and(|s| s.name.as_bytes().eq_ignore_ascii_case(stream))
    }) else {
        return;
    };
    // Requests the venue gave up on already wait no more: the body answers the next one.
    net.waiting.retain(|w| w.deadline > now);
    match net.waiting.iter().position(|w| w.stream == index) {
        Some(at) => {
            let w = net.waiting.swap_remove(at);
            venue.handle_fetch(now, w.id, http_ok(body), emit);
        }
        None => {
            if let Some(q) = net.ready.get_mut(index) {
                q.push_back(body.to_vec());
            }
        }
    }
}

fn http_ok(body: &[u8]) -> FetchReply<'_> {
    FetchReply::Http {
        status: 200,
        retry_after_secs: None,
        used_weight: None,
        body,
    }
}

/// Does what the venue asked for: transmits counted, connections and fetches answered
/// from the capture.
fn service<V: Venue, E: Emit>(
    now: Mono,
    venue: &mut V,
    net: &mut Network,
    left: &Left,
    emit: &mut E,
    stats: &mut DriverStats,
) {
    while venue.poll_transmit().is_some() {
        stats.unsent += 1;
    }
    // Bounded: a failed fetch backs off in the venue, so each stream asks a few times at
    // most here.
    for _ in 0..1024 {
        let Some(request) = venue.poll_io() else {
            break;
        };
        match request {
            IoRequest::Open { conn, .. } => net.opening.push_back(conn),
            IoRequest::Close { conn } => {
                net.open.retain(|c| *c != conn);
                net.opening.retain(|c| *c != conn);
                venue.handle_connection(now, conn, ConnEvent::Closed("closed by the venue"), emit);
            }
            IoRequest::Fetch {
                id,
                stream,
                what: Fetch::Http { .. },
                timeout_ns,
            } => {
                if let Some(body) = net.ready.get_mut(stream).and_then(VecDeque::pop_front) {
                    venue.handle_fetch(now, id, http_ok(&body), emit);
                    continue;
                }
                let left = venue.stream(stream).map_or(0, |s| left.of(s.name));
                if left > 0 {
                    net.waiting.push(Waiting {
                        id,
                        stream,
                        deadline: now.after_nanos(timeout_ns),
                    });
                } else {
                    stats.unanswered += 1;
                    let reason = "no snapshot left in the capture";
                    venue.handle_fetch(now, id, FetchReply::Failed(reason), emit);
                }
            }
            IoRequest::Fetch {
                id,
                what: Fetch::Soup { .. },
                ..
            } => {
                stats.unanswered += 1;
                let reason = "nothing can be fetched from a capture";
                venue.handle_fetch(now, id, FetchReply::Failed(reason), emit);
            }
        }
    }
    while venue.poll_notice().is_some() {
        stats.notices += 1;
    }
}
