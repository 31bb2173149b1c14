//! The re-request server, and the history ring it answers from.
//!
//! The server listens on a UDP socket bound to 127.0.0.1. For each 20-byte
//! request packet it answers, by unicast to the requester's address, with
//! one ordinary downstream packet that starts at the requested sequence
//! number and carries as many of the requested messages as completely fit
//! the maximum payload. The MoldUDP64 specification puts it this way:
//!
//! //# If the total size of the requested messages exceeds the maximum
//! //# payload size of the of one UDP packet, only the number of messages
//! //# that completely fit will be returned. Additional retransmission
//! //# requests must be made for the subsequent messages if they are still
//! //# desired.
//!
//! A request for more messages than `--max-request` is answered like any
//! other, with at most that many: the client asks again for the rest, as
//! the specification expects after any partial answer. Each such answer is
//! counted (`requests_capped`), and so is every answer cut short by the
//! packet size or the end of the history (`answers_short`).
//!
//! It refuses, counted by reason and reported in the summary, any request
//! it cannot serve: not exactly 20 bytes or a count of 0 (malformed),
//! another session than the current one, a first sequence number outside
//! the history, a sender outside 127.0.0.0/8, and those hit by the
//! drop-answer fault or sent while the server is down.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use crate::protocol::moldudp64::{BLOCK_HEADER_LEN, PacketWriter, Request, Session};

use super::SimError;
use super::config::MoldSimConfig;
use super::faults::XorShift;
use super::handle::{Shared, lock};
use super::net::is_timeout;
use super::stats::bump;

/// How long one wait for a request lasts before the stop flag is checked.
const POLL: Duration = Duration::from_millis(50);

/// The last `capacity` messages of the current session, by sequence number.
///
/// A fixed ring: the message with sequence `s` lives in slot
/// `s % capacity`, and pushing one more message than the ring holds
/// overwrites the oldest. Each slot keeps its allocation, so once every slot
/// has held a message of the longest length, pushing allocates nothing.
///
/// ```text
///   capacity 6, holding 9..=14 (first = 9, next = 15)
///
///   slot:      0    1    2    3    4    5
///            +----+----+----+----+----+----+
///   sequence | 12 | 13 | 14 |  9 | 10 | 11 |
///            +----+----+----+----+----+----+
///                            ^ pushing 15 overwrites slot 15 % 6 = 3
///                              (sequence 9); first becomes 10
/// ```
#[derive(Debug, Clone)]
pub struct History {
    slots: Vec<Vec<u8>>,
    first: u64,
    next: u64,
}

impl History {
    /// An empty ring of `capacity` slots (at least 1), expecting sequence 1.
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: vec![Vec::new(); capacity.max(1)],
            first: 1,
            next: 1,
        }
    }

    /// Number of messages the ring can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Empties the ring; the next message pushed should be `next`.
    pub fn reset(&mut self, next: u64) {
        self.first = next;
        self.next = next;
    }

    /// Appends the message with sequence number `sequence`; a sequence other
    /// than the expected one empties the ring first.
    pub fn push(&mut self, sequence: u64, message: &[u8]) {
        if sequence != self.next {
            self.reset(sequence);
        }
        let index = self.index(sequence);
        if let Some(slot) = self.slots.get_mut(index) {
            slot.clear();
            slot.extend_from_slice(message);
        }
        self.next = sequence.saturating_add(1);
        let capacity = u64::try_from(self.capacity()).unwrap_or(u64::MAX);
        if self.next.saturating_sub(self.first) > capacity {
            self.first = self.next.saturating_sub(capacity);
        }
    }

    /// The message with sequence number `sequence`, if the ring holds it.
    pub fn get(&self, sequence: u64) -> Option<&[u8]> {
        if !(self.first..self.next).contains(&sequence) {
            return None;
        }
        self.slots.get(self.index(sequence)).map(Vec::as_slice)
    }

    /// Oldest sequence number held (equal to [`History::next`] when empty).
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Sequence number the next message pushed should have.
    pub fn next(&self) -> u64 {
        self.next
    }

    fn index(&self, sequence: u64) -> usize {
        let capacity = u64::try_from(self.capacity()).unwrap_or(u64::MAX).max(1);
        usize::try_from(sequence % capacity).unwrap_or(0)
    }
}

/// Why a request was not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a 20-byte request, or a count of 0.
    Malformed,
    /// Not the current session.
    WrongSession,
    /// The first requested sequence is not in the history.
    OutOfRange,
}

/// An answer built by [`build_answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Length of the packet.
    pub len: usize,
    /// Messages it carries, from the requested sequence.
    pub messages: u64,
    /// The request asked for more than the configured maximum.
    pub capped: bool,
    /// It carries fewer messages than were asked for (and allowed): the packet was full
    /// or the history ended.
    pub short: bool,
}

/// Builds into `out` (sized to the maximum payload) the answer to the
/// request in `datagram`, from the current `session` and its `history`: from the
/// requested sequence, as many messages as completely fit one packet, and at most
/// `max_request`.
pub fn build_answer(
    datagram: &[u8],
    session: Session,
    history: &History,
    max_request: u16,
    out: &mut [u8],
) -> Result<Answer, Refusal> {
    let request = Request::decode(datagram).map_err(|_| Refusal::Malformed)?;
    if request.count == 0 {
        return Err(Refusal::Malformed);
    }
    if request.session != session {
        return Err(Refusal::WrongSession);
    }
    if history.get(request.sequence).is_none() {
        return Err(Refusal::OutOfRange);
    }
    let allowed = request.count.min(max_request.max(1));
    let mut writer =
        PacketWriter::new(out, session, request.sequence).map_err(|_| Refusal::OutOfRange)?;
    let mut sequence = request.sequence;
    for _ in 0..allowed {
        let Some(message) = history.get(sequence) else {
            break;
        };
        if writer.remaining() < message.len().saturating_add(BLOCK_HEADER_LEN)
            || writer.push(message).is_err()
        {
            break;
        }
        sequence = sequence.saturating_add(1);
    }
    let messages = u64::from(writer.message_count());
    if messages == 0 {
        return Err(Refusal::OutOfRange);
    }
    Ok(Answer {
        len: writer.finish(),
        messages,
        capped: request.count > allowed,
        short: messages < u64::from(allowed),
    })
}

/// The re-request server thread's state.
pub(crate) struct RerequestServer {
    socket: UdpSocket,
    addr: SocketAddrV4,
    shared: Arc<Shared>,
    max_request: u16,
    drop_answers: f64,
    rng: XorShift,
    answer: Vec<u8>,
}

impl RerequestServer {
    /// Binds 127.0.0.1 on the configured port.
    pub(crate) fn bind(config: &MoldSimConfig, shared: Arc<Shared>) -> Result<Self, SimError> {
        let context = "bind the re-request server";
        let socket = UdpSocket::bind(SocketAddrV4::new(
            Ipv4Addr::LOCALHOST,
            config.rerequest_port,
        ))
        .map_err(SimError::io(context))?;
        socket
            .set_read_timeout(Some(POLL))
            .map_err(SimError::io(context))?;
        let addr = match socket.local_addr().map_err(SimError::io(context))? {
            SocketAddr::V4(addr) => addr,
            SocketAddr::V6(_) => return Err(SimError::config("rerequest_port", "bound to IPv6")),
        };
        Ok(Self {
            socket,
            addr,
            shared,
            max_request: config.max_request,
            drop_answers: config.faults.drop_answers,
            rng: XorShift::new(config.faults.seed ^ 0xA5A5_5A5A_F00D_BEEF),
            answer: vec![0; config.max_payload],
        })
    }

    /// Where the server listens.
    pub(crate) fn local_addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// Serves requests until told to stop.
    pub(crate) fn run(mut self) {
        let mut buf = [0u8; 2_048];
        while !self.shared.stopping() {
            match self.socket.recv_from(&mut buf) {
                Ok((len, from)) => self.handle(buf.get(..len).unwrap_or_default(), from),
                Err(e) if is_timeout(&e) => {}
                // An ICMP error from an earlier answer, or the like: pause so
                // a persistent error cannot make this loop spin.
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    fn handle(&mut self, datagram: &[u8], from: SocketAddr) {
        let counters = &self.shared.counters;
        bump(&counters.requests_received, 1);
        if !from.ip().is_loopback() {
            bump(&counters.requests_foreign, 1);
            return;
        }
        if self.shared.rerequest_down.load(Ordering::Relaxed) {
            bump(&counters.requests_while_down, 1);
            let mut injected = lock(&self.shared.injected);
            injected.requests_while_down = injected.requests_while_down.saturating_add(1);
            return;
        }
        let built = {
            let feed = lock(&self.shared.feed);
            build_answer(
                datagram,
                feed.session,
                &feed.history,
                self.max_request,
                &mut self.answer,
            )
        };
        let answer = match built {
            Ok(answer) => answer,
            Err(refusal) => {
                let counter = match refusal {
                    Refusal::Malformed => &counters.requests_malformed,
                    Refusal::WrongSession => &counters.requests_wrong_session,
                    Refusal::OutOfRange => &counters.requests_out_of_range,
                };
                bump(counter, 1);
                return;
            }
        };
        let (len, messages) = (answer.len, answer.messages);
        if self.rng.chance(self.drop_answers) {
            bump(&counters.answers_dropped, 1);
            let mut injected = lock(&self.shared.injected);
            injected.answers_dropped = injected.answers_dropped.saturating_add(1);
            return;
        }
        // Counted before sending, so a requester that has the answer also
        // sees it in the counters. Loopback sends do not fail short of a
        // full buffer, which drops the answer like a lossy network would.
        bump(&counters.requests_served, 1);
        bump(&counters.messages_resent, messages);
        if let Ok(request) = crate::protocol::moldudp64::Request::decode(datagram)
            && messages > 0
        {
            let last = request.sequence.saturating_add(messages - 1);
            let lost =
                lock(&self.shared.injected).lost_within(request.session, request.sequence, last);
            bump(
                &counters.messages_resent_carried,
                messages.saturating_sub(lost),
            );
        }
        bump(&counters.requests_capped, u64::from(answer.capped));
        bump(&counters.answers_short, u64::from(answer.short));
        let answer = self.answer.get(..len).unwrap_or_default();
        let _ = self.socket.send_to(answer, from);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use crate::protocol::moldudp64::Packet;

    use super::*;

    #[test]
    fn ring_keeps_the_last_capacity_messages() {
        let mut h = History::new(6);
        assert_eq!(h.get(1), None);
        for seq in 1..=14u64 {
            h.push(seq, &seq.to_be_bytes());
        }
        assert_eq!((h.first(), h.next()), (9, 15));
        assert_eq!(h.get(8), None);
        assert_eq!(h.get(9), Some(&9u64.to_be_bytes()[..]));
        assert_eq!(h.get(14), Some(&14u64.to_be_bytes()[..]));
        assert_eq!(h.get(15), None);
        h.push(1, b"x");
        assert_eq!((h.first(), h.next()), (1, 2));
        assert_eq!(h.get(9), None);
    }

    #[test]
    fn answers_fit_and_refusals_are_typed() {
        let session = Session::from_ascii(b"S").unwrap();
        let mut h = History::new(100);
        for seq in 1..=100u64 {
            h.push(seq, &[seq as u8; 30]);
        }
        let request = |s: Session, sequence, count| {
            Request {
                session: s,
                sequence,
                count,
            }
            .to_bytes()
        };
        let mut out = vec![0u8; 200];
        let a = build_answer(&request(session, 10, 50), session, &h, 60, &mut out).unwrap();
        assert_eq!((a.messages, a.capped, a.short), (5, false, true));
        let packet = Packet::decode(&out[..a.len]).unwrap();
        assert_eq!((packet.sequence(), packet.message_count()), (10, 5));
        let a = build_answer(&request(session, 99, 50), session, &h, 60, &mut out).unwrap();
        assert_eq!((a.messages, a.short), (2, true));
        // Over the maximum: answered with at most the maximum, and counted as capped.
        let mut big = vec![0u8; 4_000];
        let a = build_answer(&request(session, 10, 61), session, &h, 60, &mut big).unwrap();
        assert_eq!((a.messages, a.capped, a.short), (60, true, false));
        let a = build_answer(&request(session, 10, 60), session, &h, 60, &mut big).unwrap();
        assert_eq!((a.messages, a.capped, a.short), (60, false, false));
        let other = Session::from_ascii(b"T").unwrap();
        let cases = [
            (request(session, 1, 0).to_vec(), Refusal::Malformed),
            (b"short".to_vec(), Refusal::Malformed),
            (request(other, 1, 1).to_vec(), Refusal::WrongSession),
            (request(session, 101, 1).to_vec(), Refusal::OutOfRange),
            (request(session, 0, 1).to_vec(), Refusal::OutOfRange),
        ];
        for (datagram, refusal) in cases {
            assert_eq!(
                build_answer(&datagram, session, &h, 60, &mut out),
                Err(refusal)
            );
        }
    }
}
