//! The publisher: packs messages into MoldUDP64 downstream packets and
//! sends them to a multicast group.
//!
//! It sends through the socket [`open_sender`] opens, which reaches only a
//! multicast group (through 127.0.0.1, TTL 0) or a 127.0.0.0/8 address.
//!
//! Pacing: with a rate `r`, message `i` (from 0) is due `i / r` seconds
//! after the start. Each packet takes the messages already due, as many as
//! fit the maximum payload; at a low rate packets carry one message, at a
//! high rate they fill up. Unpaced, every packet is full.

use std::collections::VecDeque;
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::protocol::moldudp64::{
    BLOCK_HEADER_LEN, Packet, PacketWriter, SESSION_LEN, Session, encode_end_of_session,
    encode_heartbeat,
};

use super::SimError;
use super::config::MoldSimConfig;
use super::faults::{FaultPlan, LineFaults, PacketFate, Restart, SeqRange};
use super::handle::{Shared, lock};
use super::itch::MessageSource;
use super::net::{is_transient, open_sender};
use super::stats::bump;

/// Longest single sleep of the publisher, so a stop request is seen promptly.
const IDLE_SLICE: Duration = Duration::from_millis(20);
/// Attempts at sending one datagram when the OS is short of buffers.
const SEND_ATTEMPTS: u32 = 5;

/// The name of the session started by restart number `generation`: the
/// base name cut to fit, then `-` and the generation.
pub fn restart_session(base: Session, generation: u32) -> Session {
    let suffix = format!("-{generation}");
    let keep = SESSION_LEN.saturating_sub(suffix.len());
    let mut name: Vec<u8> = base.trimmed().iter().copied().take(keep).collect();
    name.extend_from_slice(suffix.as_bytes());
    let mut session = Session::from_ascii(&name).unwrap_or(base);
    if session == base {
        // The base already ended with this suffix: mark it differently.
        if let Some(dash) = session.0.iter_mut().rev().find(|b| **b == b'-') {
            *dash = b'+';
        }
    }
    session
}

/// Datagrams waiting out a line's delay at most; beyond that they go out at once, so
/// the queue's memory stays bounded whatever the rate and the delay.
const MAX_DELAYED: usize = 1 << 16;

/// One line the publisher sends on.
struct LineOut {
    socket: UdpSocket,
    dest: SocketAddrV4,
    faults: LineFaults,
    plan: FaultPlan,
    /// Data packets offered to the line so far.
    data_packets: u64,
    /// Datagrams waiting out the line's delay, oldest first.
    delayed: VecDeque<(Instant, Vec<u8>)>,
}

impl LineOut {
    fn open(dest: SocketAddrV4, faults: LineFaults) -> Result<Self, SimError> {
        Ok(Self {
            socket: open_sender(dest)?,
            dest,
            plan: faults.plan(),
            faults,
            data_packets: 0,
            delayed: VecDeque::new(),
        })
    }

    /// Whether the line is dead by now.
    fn dead(&self) -> bool {
        self.faults
            .dead_after
            .is_some_and(|after| self.data_packets > after)
    }
}

/// A data packet held back by the reorder fault.
struct Held {
    bytes: Vec<u8>,
    range: SeqRange,
    after: u32,
    sent_after: u32,
}

/// The publisher thread's state.
pub(crate) struct Publisher {
    lines: Vec<LineOut>,
    /// The most a delayed datagram went out after it was due.
    delay_overrun: std::time::Duration,
    source: MessageSource,
    shared: Arc<Shared>,
    faults: FaultPlan,
    count: u64,
    rate: Option<f64>,
    heartbeat: Option<Duration>,
    eos_repeats: u32,
    eos_gap: Duration,
    start_delay: Duration,
    restart_after: Option<u64>,
    base_session: Session,
    session: Session,
    generation: u32,
    next_sequence: u64,
    in_session: u64,
    published: u64,
    held: Option<Held>,
    last_send: Instant,
    packet: Vec<u8>,
    message: Vec<u8>,
}

impl Publisher {
    /// Opens the socket; the configuration was validated.
    pub(crate) fn new(
        config: &MoldSimConfig,
        source: MessageSource,
        shared: Arc<Shared>,
    ) -> Result<Self, SimError> {
        let mut lines = vec![LineOut::open(config.group, config.line_faults)?];
        for line in &config.more_lines {
            lines.push(LineOut::open(line.group, line.faults)?);
        }
        Ok(Self {
            lines,
            delay_overrun: std::time::Duration::ZERO,
            source,
            shared,
            faults: FaultPlan::new(config.faults),
            count: config.count,
            rate: config.rate,
            heartbeat: config.heartbeat_interval,
            eos_repeats: config.end_of_session_repeats,
            eos_gap: config.end_of_session_gap,
            start_delay: config.start_delay,
            restart_after: config.faults.restart_after,
            base_session: config.session,
            session: config.session,
            generation: 0,
            next_sequence: 1,
            in_session: 0,
            published: 0,
            held: None,
            last_send: Instant::now(),
            packet: vec![0; config.max_payload],
            message: Vec::with_capacity(256),
        })
    }

    /// Publishes every message, then the end-of-session packets; returns
    /// early, without them, when told to stop.
    pub(crate) fn run(mut self) -> Result<(), SimError> {
        bump(&self.shared.counters.sessions, 1);
        if !self.nap_until(Instant::now().checked_add(self.start_delay)) {
            return Ok(());
        }
        let start = Instant::now();
        self.last_send = start;
        while self.published < self.count {
            if self.shared.stopping() {
                return Ok(());
            }
            self.flush_delayed(Instant::now())?;
            let due = self.due(start.elapsed());
            if self.published >= due {
                self.idle(start)?;
                continue;
            }
            if self.restart_after.is_some_and(|n| self.in_session >= n) {
                self.restart()?;
            }
            self.publish_packet(due)?;
        }
        self.release_held()?;
        self.end_session()?;
        self.drain_delayed()
    }

    /// How many messages are due `elapsed` after the start.
    fn due(&self, elapsed: Duration) -> u64 {
        match self.rate {
            None => self.count,
            Some(rate) => ((elapsed.as_secs_f64() * rate) as u64)
                .saturating_add(1)
                .min(self.count),
        }
    }

    /// Nothing is due: send a heartbeat if one is owed, then sleep until the
    /// next message is due, the next heartbeat, or one idle slice.
    fn idle(&mut self, start: Instant) -> Result<(), SimError> {
        let now = Instant::now();
        let heartbeat_at = self
            .heartbeat
            .and_then(|every| self.last_send.checked_add(every));
        if heartbeat_at.is_some_and(|at| now >= at) {
            self.release_held()?;
            let len = encode_heartbeat(&mut self.packet, self.session, self.next_sequence)?;
            self.send_packet(len)?;
            bump(&self.shared.counters.heartbeats_sent, 1);
            return Ok(());
        }
        let next_due = self
            .rate
            .and_then(|rate| Duration::try_from_secs_f64(self.published as f64 / rate).ok())
            .and_then(|offset| start.checked_add(offset));
        let mut wake = now.checked_add(IDLE_SLICE);
        for at in [next_due, heartbeat_at, self.next_delayed()]
            .into_iter()
            .flatten()
        {
            wake = wake.map(|w| w.min(at));
        }
        if let Some(wake) = wake {
            thread::sleep(wake.saturating_duration_since(now));
        }
        Ok(())
    }

    /// Builds one data packet from the messages due, records it in the feed
    /// state, then lets the fault plan decide its fate.
    fn publish_packet(&mut self, due: u64) -> Result<(), SimError> {
        let in_session_left = self
            .restart_after
            .map_or(u64::MAX, |n| n.saturating_sub(self.in_session));
        let budget = due.saturating_sub(self.published).min(in_session_left);
        let first = self.next_sequence;
        let mut writer = PacketWriter::new(&mut self.packet, self.session, first)?;
        let mut count = 0u64;
        while count < budget {
            let index = self.published.saturating_add(count);
            self.source
                .fill(index, first.saturating_add(count), &mut self.message);
            if writer.remaining() < self.message.len().saturating_add(BLOCK_HEADER_LEN) {
                break;
            }
            writer.push(&self.message)?;
            count += 1;
        }
        let len = writer.finish();
        if count == 0 {
            return Err(SimError::config(
                "max_payload",
                "a message does not fit a packet",
            ));
        }
        self.record(len)?;
        self.published = self.published.saturating_add(count);
        self.in_session = self.in_session.saturating_add(count);
        self.next_sequence = first.saturating_add(count);
        // The venue's heartbeat timer restarts whatever the network does
        // to the packet.
        self.last_send = Instant::now();
        let counters = &self.shared.counters;
        bump(&counters.messages_published, count);
        bump(&counters.data_packets, 1);
        let range = SeqRange {
            session: self.session,
            first,
            last: self.next_sequence.saturating_sub(1),
        };
        match self.faults.packet_fate(self.held.is_none()) {
            PacketFate::Drop { burst } => {
                for line in &mut self.lines {
                    line.data_packets += 1;
                }
                lock(&self.shared.injected).record_loss(range, burst);
            }
            PacketFate::Hold { after } => {
                let bytes = self.packet.get(..len).unwrap_or_default().to_vec();
                self.held = Some(Held {
                    bytes,
                    range,
                    after,
                    sent_after: 0,
                });
            }
            PacketFate::Duplicate => {
                self.send_data(len, range, 2)?;
                lock(&self.shared.injected).duplicated.push(range);
                self.tick_held()?;
            }
            PacketFate::Send => {
                self.send_data(len, range, 1)?;
                self.tick_held()?;
            }
        }
        Ok(())
    }

    /// Adds the messages of the packet in `self.packet[..len]` to the
    /// history and the book, and moves the next sequence on, in one step.
    fn record(&self, len: usize) -> Result<(), SimError> {
        let packet = Packet::decode(self.packet.get(..len).unwrap_or_default())
            .map_err(|e| SimError::config("max_payload", format!("built a bad packet: {e}")))?;
        let mut feed = lock(&self.shared.feed);
        for (sequence, message) in packet.sequenced_messages() {
            feed.history.push(sequence, message);
            let key = self.source.instrument(message);
            feed.book.apply(key, message);
        }
        feed.next_sequence = packet.next_sequence();
        Ok(())
    }

    /// Counts a packet that went out, and sends the held one when its turn has come.
    fn tick_held(&mut self) -> Result<(), SimError> {
        let ready = match self.held.as_mut() {
            Some(held) => {
                held.sent_after = held.sent_after.saturating_add(1);
                held.sent_after >= held.after
            }
            None => false,
        };
        if ready { self.release_held() } else { Ok(()) }
    }

    /// Sends the held packet now, if any.
    fn release_held(&mut self) -> Result<(), SimError> {
        if let Some(held) = self.held.take() {
            self.send_on_lines(&held.bytes, Some(held.range), 1)?;
            if held.sent_after > 0 {
                lock(&self.shared.injected).reordered.push(held.range);
            }
        }
        Ok(())
    }

    /// Starts the next session: new name, sequence 1, empty history and book.
    fn restart(&mut self) -> Result<(), SimError> {
        self.release_held()?;
        self.generation = self.generation.saturating_add(1);
        let from = self.session;
        self.session = restart_session(self.base_session, self.generation);
        self.next_sequence = 1;
        self.in_session = 0;
        {
            let mut feed = lock(&self.shared.feed);
            feed.session = self.session;
            feed.next_sequence = 1;
            feed.history.reset(1);
            feed.book.clear();
        }
        lock(&self.shared.injected).restarts.push(Restart {
            from,
            to: self.session,
            after_messages: self.published,
        });
        bump(&self.shared.counters.sessions, 1);
        Ok(())
    }

    /// Sends the end-of-session packets, `eos_gap` apart.
    fn end_session(&mut self) -> Result<(), SimError> {
        for i in 0..self.eos_repeats {
            if i > 0 && !self.nap_until(Instant::now().checked_add(self.eos_gap)) {
                return Ok(());
            }
            let len = encode_end_of_session(&mut self.packet, self.session, self.next_sequence)?;
            self.send_packet(len)?;
            bump(&self.shared.counters.end_of_session_sent, 1);
        }
        Ok(())
    }

    /// Sleeps in short slices until `until`, sending delayed datagrams as they fall
    /// due; false when told to stop first.
    fn nap_until(&mut self, until: Option<Instant>) -> bool {
        let until = until.unwrap_or_else(Instant::now);
        loop {
            if self.shared.stopping() {
                return false;
            }
            let now = Instant::now();
            if self.flush_delayed(now).is_err() {
                return false;
            }
            let left = until.saturating_duration_since(now);
            if left.is_zero() {
                return true;
            }
            let next = self
                .next_delayed()
                .map_or(left, |at| at.saturating_duration_since(now));
            thread::sleep(left.min(IDLE_SLICE).min(next));
        }
    }

    /// A heartbeat or end of session, on every line still alive.
    fn send_packet(&mut self, len: usize) -> Result<(), SimError> {
        let bytes = self.packet.get(..len).unwrap_or_default().to_vec();
        self.send_on_lines(&bytes, None, 1)?;
        self.last_send = Instant::now();
        Ok(())
    }

    /// The data packet in `self.packet[..len]`, `copies` times on each line that does not
    /// lose it.
    fn send_data(&mut self, len: usize, range: SeqRange, copies: u32) -> Result<(), SimError> {
        let bytes = self.packet.get(..len).unwrap_or_default().to_vec();
        self.send_on_lines(&bytes, Some(range), copies)?;
        self.last_send = Instant::now();
        Ok(())
    }

    /// Sends `bytes` on every line: each decides on its own whether it loses a data
    /// packet (`data`), and a delayed line queues it. A data packet no line carries is
    /// recorded as lost.
    fn send_on_lines(
        &mut self,
        bytes: &[u8],
        data: Option<SeqRange>,
        copies: u32,
    ) -> Result<(), SimError> {
        let now = Instant::now();
        let mut carried = false;
        let mut lost_on = Vec::new();
        for i in 0..self.lines.len() {
            let Some(line) = self.lines.get_mut(i) else {
                continue;
            };
            if data.is_some() {
                line.data_packets += 1;
                let dropped =
                    line.dead() || matches!(line.plan.packet_fate(false), PacketFate::Drop { .. });
                if dropped {
                    lost_on.push(i);
                    continue;
                }
                carried = true;
            } else if line.dead() {
                continue;
            }
            for _ in 0..copies {
                let line = self.lines.get_mut(i);
                match line {
                    Some(line)
                        if !line.faults.delay.is_zero() && line.delayed.len() < MAX_DELAYED =>
                    {
                        let due = now.checked_add(line.faults.delay).unwrap_or(now);
                        line.delayed.push_back((due, bytes.to_vec()));
                    }
                    Some(_) => self.send_datagram(i, bytes)?,
                    None => {}
                }
            }
        }
        if !lost_on.is_empty() {
            let mut injected = lock(&self.shared.injected);
            if injected.line_lost_packets.len() < self.lines.len() {
                injected.line_lost_packets.resize(self.lines.len(), 0);
            }
            for i in lost_on {
                if let Some(n) = injected.line_lost_packets.get_mut(i) {
                    *n += 1;
                }
            }
            if let (Some(range), false) = (data, carried) {
                injected.record_loss(range, false);
            }
        }
        Ok(())
    }

    /// When the next delayed datagram falls due.
    fn next_delayed(&self) -> Option<Instant> {
        self.lines
            .iter()
            .filter_map(|l| l.delayed.front().map(|(at, _)| *at))
            .min()
    }

    /// Sends every delayed datagram due at `now`.
    fn flush_delayed(&mut self, now: Instant) -> Result<(), SimError> {
        let mut late = std::time::Duration::ZERO;
        for i in 0..self.lines.len() {
            while let Some((due, bytes)) = self.lines.get_mut(i).and_then(|line| {
                if line.delayed.front().is_some_and(|(at, _)| *at <= now) {
                    line.delayed.pop_front()
                } else {
                    None
                }
            }) {
                late = late.max(Instant::now().saturating_duration_since(due));
                self.send_datagram(i, &bytes)?;
            }
        }
        if late > self.delay_overrun {
            self.delay_overrun = late;
            lock(&self.shared.injected).line_delay_overrun = late;
        }
        Ok(())
    }

    /// Waits out every line's delay at the end of the run, so nothing queued is lost.
    fn drain_delayed(&mut self) -> Result<(), SimError> {
        while let Some(at) = self.next_delayed() {
            if !self.nap_until(Some(at)) {
                return Ok(());
            }
            self.flush_delayed(Instant::now())?;
        }
        Ok(())
    }

    /// Sends one datagram on line `line`, retrying briefly when the OS is short of
    /// buffers; a datagram still refused after that is counted in `send_errors`.
    fn send_datagram(&self, line: usize, bytes: &[u8]) -> Result<(), SimError> {
        let counters = &self.shared.counters;
        let Some(out) = self.lines.get(line) else {
            return Ok(());
        };
        for _ in 0..SEND_ATTEMPTS {
            match out.socket.send_to(bytes, out.dest) {
                Ok(_) => {
                    bump(&counters.packets_sent, 1);
                    bump(
                        &counters.bytes_sent,
                        u64::try_from(bytes.len()).unwrap_or(0),
                    );
                    return Ok(());
                }
                Err(e) if is_transient(&e) => thread::sleep(Duration::from_millis(1)),
                Err(e) => return Err(SimError::io("send a packet")(e)),
            }
        }
        bump(&counters.send_errors, 1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_names_differ() {
        let base = Session::from_ascii(b"SIM0000001").unwrap_or(Session::BLANK);
        assert_eq!(restart_session(base, 1).as_bytes(), b"SIM00000-1");
        assert_eq!(restart_session(base, 12).as_bytes(), b"SIM0000-12");
        let short = Session::from_ascii(b"AB-1").unwrap_or(Session::BLANK);
        assert_eq!(restart_session(short, 1).trimmed(), b"AB-1-1");
        let clash = Session::from_ascii(b"ABCDEFGH-1").unwrap_or(Session::BLANK);
        assert_eq!(restart_session(clash, 1).as_bytes(), b"ABCDEFGH+1");
    }
}
